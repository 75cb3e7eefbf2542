"""Fine-tuning tasks: each head family its own module, in one registry.

    base.py       what a head is (reading, encoding, module, loss, prediction, scoring,
                  reporting, transformers class and keys) and TaskData, which carries one
    sequence.py   sentence (pair) classification and regression: GLUE, custom files
    tagging.py    one tag per word: NER, POS (CoNLL-U, CoNLL, JSONL)
    qa.py         extractive QA: SQuAD 1.1 / 2.0
    superglue.py  SuperGLUE's pair tasks (BoolQ, CB, RTE, WiC, WSC, MultiRC, ReCoRD, AX-b/g)
    choice.py     multiple choice: COPA, any N-choice JSONL
    registry.py   every head by name; load_task picks the head that reads a --task
"""

from electra.tasks import registry as _registry  # noqa: F401  (fills base.HEADS)
