"""electra: ELECTRA pretraining (replaced-token detection) and fine-tuning in PyTorch.

The Python API: the commands as functions (the CLI's flags as keyword arguments, bad input
raised as :class:`UserError`), and the parts to build models from.

    electra.train_tokenizer(files, vocab_size, out)      a WordPiece tokenizer
    electra.prepare(inputs=[...], tokenizer=..., out=...) text -> token shards
    electra.pretrain(data=..., out=..., preset="small")  a pretraining run
    electra.finetune(task=..., out=..., model=RUN)       results (a dict); models on disk
    electra.evaluate(model=..., task=...)                a fine-tuned model's dev scores
    electra.predict(model, input)                        one record per input (a list)
    electra.detect(model, texts)                         p(replaced) of each token
    electra.export(source, out)                          transformers folders
    electra.import_(folder, out)                         a transformers model as a run
    electra.compare(data=..., out=..., budget=...)       the equal-compute comparison
    electra.demo(out="runs/demo")                        the demo (its summary, a dict)
    electra.plot(run)                                    the run's curves.png (its path)
    electra.encode(model, texts)                         sentence embeddings (N, H)
    electra.sts(model, data="glue/STS-B")                STS-B Spearman, zero-shot
    electra.retrieval(model, data="dev-v1.1.json")       nDCG@10, MRR@10, Recall@100
    electra.rerank(model, data="dev-v1.1.json")          BM25's top 100 reordered, both scored
    electra.mine(data=..., out="groups.jsonl")           hard negatives, by BM25 or a model
    electra.pairs(input=[...], out="pairs.jsonl")        pairs from raw text (two spans a doc)

Importing the package is cheap (no torch): the names below load on first use, so the CLI
and data-preparation workers start fast.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {  # name -> (module, its attribute)
    "ModelConfig": ("electra.config", "ModelConfig"),
    "ObjectiveConfig": ("electra.objectives.config", "ObjectiveConfig"),
    "FinetuneConfig": ("electra.config", "FinetuneConfig"),
    "model_preset": ("electra.model.bodies", "model_preset"),
    "UserError": ("electra.errors", "UserError"),
    "Discriminator": ("electra.model", "Discriminator"),
    "Generator": ("electra.model", "Generator"),
    "SequenceClassifier": ("electra.tasks.sequence.head", "SequenceClassifier"),
    "ElectraPretrainingModel": ("electra.objectives.pretraining", "ElectraPretrainingModel"),
    "Batch": ("electra.objectives.masking", "Batch"),
    "Draws": ("electra.objectives.masking", "Draws"),
    "SpecialTokens": ("electra.data.tokenizer", "SpecialTokens"),
    "train_tokenizer": ("electra.data.tokenizer", "train_tokenizer"),
    "prepare": ("electra.data.prepare", "main"),
    "pretrain": ("electra.commands.pretrain", "main"),
    "finetune": ("electra.commands.finetune", "main"),
    "evaluate": ("electra.commands.finetune", "evaluate"),
    "predict": ("electra.commands.predict", "predict"),
    "detect": ("electra.commands.detect", "detect"),
    "export": ("electra.saved.hf", "export_hf"),
    "push": ("electra.saved.push", "push"),
    "import_": ("electra.saved.hf", "import_hf"),  # `import` is Python's keyword (PEP 8's _)
    "compare": ("electra.experiments.compare", "main"),
    "demo": ("electra.experiments.demo", "run_demo"),
    "plot": ("electra.experiments.plot", "plot_run"),
    "encode": ("electra.evaluation.encoder", "encode"),
    "sts": ("electra.evaluation.sts", "sts"),
    "retrieval": ("electra.evaluation.retrieval", "retrieval"),
    "rerank": ("electra.evaluation.rerank", "rerank"),
    "mine": ("electra.commands.mine", "mine"),
    "pairs": ("electra.commands.pairs", "pairs"),
    "Encoder": ("electra.evaluation.encoder", "Encoder"),
}
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attribute = _LAZY[name]
        return getattr(importlib.import_module(module), attribute)
    raise AttributeError(f"module 'electra' has no attribute {name!r}")
