"""Fine-tuning tasks: each family one package (its head, its reader, its scores), in one
registry.

    base.py       what a head is (its roles: Reader, Learner, Scorer, Exporter; its own
                  settings, FamilySettings) and TaskData, which carries one
    sequence/     sentence (pair) classification and regression: GLUE, custom files
    tagging/      one tag per word: NER, POS (CoNLL-U, CoNLL, JSONL)
    qa/           extractive QA: SQuAD 1.1 / 2.0
    superglue/    SuperGLUE's pair tasks (BoolQ, CB, RTE, WiC, WSC, MultiRC, ReCoRD, AX-b/g)
    choice/       multiple choice: COPA, any N-choice JSONL
    embedding/    a text's embedding, trained contrastively (InfoNCE) on pairs or triplets
    registry.py   every head by name; load_task picks the head that reads a --task
"""

from electra.tasks import registry as _registry  # noqa: F401  (fills base.HEADS)
