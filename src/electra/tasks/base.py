"""What a fine-tuning task head is, and the task data that carries one.

A :class:`Head` is one family of tasks (google-research/electra's ``Task``; transformers'
heads that own their loss), in four roles: its :class:`Reader` (how its examples are read),
its :class:`Learner` (the module on the encoder, its encoding, its loss), its
:class:`Scorer` (predictions, scores, report) and its :class:`Exporter` (what its saved
model says, its transformers class and keys); and its own settings (``Head.Settings``).
``finetune``, ``evaluate``, ``predict``, ``export`` and ``compare`` call the head of the
:class:`TaskData` (or of a model folder's config.json) and never ask which head it is.
``electra.tasks.registry`` names every head.
"""

from __future__ import annotations

import abc
import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from electra.config import FamilySettings
from electra.data.examples import confusion_counts
from electra.io.progress import advance
from electra.registry import Registry
from electra.runtime import autocast

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from electra.config import FinetuneConfig, ModelConfig
    from electra.model.kernels import Kernels

HEADS: Registry[Head] = Registry("head")  # filled by electra.tasks.registry


@dataclass(frozen=True)
class TaskData:
    """A task's examples, how it is scored, and its head (a name, or the head itself)."""

    name: str
    train: list[Any]
    dev: dict[str, list[Any]]
    metrics: tuple[str, ...]
    regression: bool
    labels: dict[str, int] = field(default_factory=dict)  # name -> id (classes, tags)
    test: dict[str, list[Any]] = field(default_factory=dict)  # for --predict test
    head: Any = "sequence"  # a Head; given by name, it is looked up in the registry
    columns: tuple[str, ...] = ()  # the text columns a file to predict on must have

    def __post_init__(self) -> None:
        if isinstance(self.head, str):
            object.__setattr__(self, "head", HEADS[self.head])

    def replace(self, **changes: Any) -> TaskData:
        return dataclasses.replace(self, **changes)


class Reader(abc.ABC):
    """A family's first role: which ``--task`` names it reads, how (files, a benchmark's
    folder, the inputs of `electra predict`), and its data once the settings are known."""

    tasks: ClassVar[tuple[str, ...]] = ()  # the --task names this head reads
    help: ClassVar[str] = ""  # the --task names as `electra finetune --help` lists them
    defaults: ClassVar[dict[str, Any]] = {}  # the paper's settings for its tasks (max_length)
    hub_datasets: ClassVar[dict[str, tuple[str, str]]] = {}
    """The hub's dataset id and configuration of each benchmark task, named in its model
    card (a task missing: the user's own data)."""

    def task_defaults(self, task: str) -> dict[str, Any]:
        """The fine-tuning settings ``task`` takes where the user sets none (the paper's:
        SQuAD's 512 tokens, RTE's and STS-B's 10 epochs); ``FinetuneConfig.resolved``
        applies them."""
        return dict(self.defaults)

    @abc.abstractmethod
    def load(self, task: str, **given: Any) -> TaskData:
        """The task's data from what `finetune`/`evaluate` were given."""
        raise NotImplementedError

    def reads(self, task: str, key: str) -> bool:
        """Whether ``task`` reads the flag ``key`` (a keyword of :meth:`load`: a flag no task
        of a command reads is refused, never ignored)."""
        return key in inspect.signature(self.load).parameters

    def trained_on(self, task: str) -> tuple[str, ...]:
        """The tasks whose fine-tuned models ``electra evaluate`` may score on ``task``
        (itself; a diagnostic set: the task it diagnoses)."""
        return (task,)

    def prepare(self, data: TaskData, cfg: FinetuneConfig) -> TaskData:
        """The data as training reads it, once the settings are resolved."""
        return data

    def for_model(self, data: TaskData, meta: dict[str, Any], cfg: FinetuneConfig,
                  where: str) -> TaskData:
        """Dev data scored with a fine-tuned model (``meta``: its config.json)."""
        return data.replace(labels=meta["labels"])

    def from_meta(self, meta: dict[str, Any]) -> TaskData:
        """An empty task as a fine-tuned model's config.json describes it (to predict)."""
        return TaskData(meta["task"], [], {}, tuple(meta.get("metrics", ())),
                        bool(meta.get("regression")), meta.get("labels") or {}, head=self,
                        columns=tuple(meta.get("text_columns") or ()))

    @abc.abstractmethod
    def read_inputs(self, path: Path, meta: dict[str, Any]) -> list[Any]:
        """A file to predict on, in the form this head reads (labels ignored)."""
        raise NotImplementedError


class Learner(abc.ABC):
    """A family's second role: the module on the encoder, the examples as it reads them,
    and the loss it learns from."""

    @abc.abstractmethod
    def build(self, cfg: ModelConfig, labels: dict[str, int], regression: bool,
              kernels: Kernels | None = None, settings: dict[str, Any] | None = None
              ) -> nn.Module:
        """The module on the encoder; ``settings``: the fine-tuning settings it was (or is
        being) trained with (config.json's ``finetune``), for a module they shape (the
        embedding head's pooling and temperature); None where unknown."""
        raise NotImplementedError

    def check_model(self, cfg: ModelConfig, settings: dict[str, Any]) -> None:
        """Refuse, before any work, settings this model cannot take (the embedding head's
        Matryoshka dimensions as wide as it); nothing by default."""
        return None

    def criterion(self, settings: dict[str, Any]) -> nn.Module | None:
        """A loss object with weights of its own (the embedding family's InfoNCE and its
        learned temperature): trained and checkpointed with the model, not part of it (nor
        of its folder); its ``forward`` turns the model's output into what :meth:`loss`
        reads. None by default: the model's output is the logits."""
        return None

    def augment(self, examples: list[Any], cfg: FinetuneConfig) -> list[Any]:
        """Training examples added to the set (e.g. pairs swapped); none by default."""
        return examples

    @abc.abstractmethod
    def encode(self, tok: Tokenizer, examples: list[Any], data: TaskData,
               cfg: FinetuneConfig) -> dict[str, torch.Tensor]:
        """Training examples as the model reads them, with their ``labels``."""
        raise NotImplementedError

    @abc.abstractmethod
    def loss(self, logits: torch.Tensor, labels: torch.Tensor,
             data: TaskData) -> torch.Tensor:
        """The summed loss of a micro-batch (fp32)."""
        raise NotImplementedError

    def micro_steps(self, cfg: FinetuneConfig, rows: Callable[[int], dict[str, torch.Tensor]],
                    n: int, denom: int, criterion: nn.Module | None, rt: Any,
                    which: dict[str, str]) -> Callable[..., Any] | None:
        """The head's own micro-steps for one optimizer step over ``n`` micro-batches
        ``rows(j)`` (the embedding family's cached loss, whose negatives span them all);
        None by default: each micro-batch's :meth:`loss`, over ``denom``."""
        return None

    def denominator(self, labels: torch.Tensor, index: torch.Tensor, batch_size: int) -> int:
        """What a step's loss is averaged over (``index``: the global batch's rows of the
        training ``labels``): the global batch's examples by default."""
        return batch_size


class Scorer(abc.ABC):
    """A family's third role: a trained module's predictions, their scores and report, the
    records of `electra predict` and a benchmark's submission files."""

    @abc.abstractmethod
    def predict(self, model: nn.Module, tok: Tokenizer, examples: list[Any], data: TaskData,
                cfg: FinetuneConfig) -> tuple[Any, Any]:
        """(predictions, labels) of one dev split."""
        raise NotImplementedError

    @abc.abstractmethod
    def score(self, data: TaskData, preds: Any, labels: Any) -> dict[str, float]:
        raise NotImplementedError

    def report(self, split: str, preds: Any, labels: Any,
               data: TaskData) -> tuple[list[str], dict[str, Any] | None]:
        """Warnings for a degenerate split, and its confusion matrix (or None)."""
        return [], None

    @abc.abstractmethod
    def records(self, model: nn.Module, tok: Tokenizer, items: list[Any], data: TaskData,
                cfg: FinetuneConfig) -> list[dict[str, Any]]:
        """`electra predict`'s JSON records of a batch of inputs."""
        raise NotImplementedError

    def write_test(self, model: nn.Module, tok: Tokenizer, data: TaskData, cfg: FinetuneConfig,
                   folder: Path) -> list[Path]:
        """Submission files for the test splits (heads whose tasks have them)."""
        return []


class Exporter:
    """A family's fourth role: what its saved model says of itself (config.json) and how it
    leaves as transformers' (or sentence-transformers') model. Plain data and defaults: a
    family sets the four names and overrides what differs."""

    hf_part: ClassVar[str]  # electra.saved.hf's table name for this head's weights
    hf_class: ClassVar[str]  # the transformers class a fine-tuned model exports as
    hf_keys: ClassVar[tuple[tuple[str, str], ...]]  # (our head key, transformers key)
    pipeline_tag: ClassVar[str] = ""  # the hub's task for its model cards ("": none fits)
    name: ClassVar[str]

    def meta(self, data: TaskData) -> dict[str, Any]:
        """What a fine-tuned model's config.json adds to say which head it has."""
        return {"head": self.name}

    def sentence_embedding(self, meta: dict[str, Any]) -> tuple[str, bool] | None:
        """An embedding model's (pooling, normalised): what `electra export` writes as a
        sentence-transformers folder and `electra.encode` embeds with (None: a head whose
        output is not a text's embedding)."""
        return None

    def prompts(self, meta: dict[str, Any]) -> dict[str, str]:
        """An embedding model's prompts by sentence-transformers' names (query, document):
        what `electra.encode`'s retrieval puts before each text, and the export's
        ``prompts``; none by default."""
        return {}

    def export_note(self, meta: dict[str, Any]) -> str | None:
        """What the transformers export cannot do that this head does (said by `export`)."""
        return None

    def hf_labels(self, meta: dict[str, Any]) -> dict[str, Any]:
        """transformers' label fields for the exported config.json."""
        ids = meta["labels"]  # name -> id
        return {"id2label": {i: name for name, i in ids.items()}, "label2id": dict(ids)}


class Head(Reader, Learner, Scorer, Exporter):
    """A family of fine-tuning tasks (google-research/electra's ``Task``), in one package: a
    name, its settings, and its four roles, each a small surface its callers use alone:

    - :class:`Reader` (`finetune`, `evaluate`, `predict` reading data): ``load`` and
      ``read_inputs``, and optionally ``task_defaults``, ``trained_on``, ``prepare``,
      ``for_model``, ``from_meta``, ``hub_datasets``;
    - :class:`Learner` (the training loop): ``build``, ``encode``, ``loss``, and optionally
      ``criterion``, ``augment``, ``denominator``;
    - :class:`Scorer` (evaluation and `predict`): ``predict``, ``score``, ``records``, and
      optionally ``report``, ``write_test``;
    - :class:`Exporter` (the saved model, `export`, the cards): ``hf_part``, ``hf_class``,
      ``hf_keys``, ``pipeline_tag``, and optionally ``meta``, ``hf_labels``,
      ``export_note``, ``sentence_embedding``.

    The roles are one object because they share the family's settings and examples (a QA
    window is what its reader cuts, its learner trains on and its scorer decodes); a head
    missing an abstract method cannot be made, so it is refused when registered.
    ``Settings``: the family's own fine-tuning settings (a :class:`FamilySettings`: QA's
    windows, the embedding head's pooling), given with `--set` beside the shared ones and
    read with :meth:`settings`.
    """

    Settings: ClassVar[type[FamilySettings]] = FamilySettings

    def settings(self, cfg: FinetuneConfig) -> Any:
        """This family's settings in ``cfg`` (those given, its defaults for the rest)."""
        return cfg.settings(self.Settings)


def examples_used(data: TaskData, cfg: FinetuneConfig) -> str:
    """The training examples a fine-tune of ``data`` draws, as its first line and its model
    card say them: ``3,200 training examples``, or ``400 of 3,200 training examples (a fixed
    random subset, max_train_examples)``."""
    total = len(data.train)
    if 0 < cfg.max_train_examples < total:
        return (f"{cfg.max_train_examples:,} of {total:,} training examples (a fixed random "
                f"subset, max_train_examples)")
    return f"{total:,} training examples"


def head_of(meta: dict[str, Any]) -> Head:
    """The head of a fine-tuned model's config.json (no "head": sequence classification)."""
    return HEADS[meta.get("head", "sequence")]


def confusion(preds: np.ndarray, labels: np.ndarray, names: dict[int, str], split: str
              ) -> tuple[list[str], dict[str, Any]]:
    """A split's confusion matrix of class ids, and a warning when the predictions are (nearly)
    one class: every one, or at least NEAR_ONE_CLASS of them while that class is less than
    NEAR_ONE_CLASS_LABELS of the labels (see :data:`NEAR_ONE_CLASS`)."""
    matrix = {"labels": [names[i] for i in range(len(names))],
              "matrix": confusion_counts(labels, preds, len(names)).tolist()}
    warnings = []
    values, counts = np.unique(preds, return_counts=True)
    if len(values) == 1:
        only = int(preds[0])
        warnings.append(f"{split}: every prediction is {names[only]!r} "
                        f"({np.mean(labels == only):.1%} of {split} is {names[only]!r})")
    elif len(values):
        top = int(values[counts.argmax()])
        share, truth = counts.max() / len(preds), float(np.mean(labels == top))
        if share >= NEAR_ONE_CLASS and truth < NEAR_ONE_CLASS_LABELS:
            warnings.append(f"{split}: nearly every prediction is {names[top]!r} ("
                            f"{counts.max():,} of {len(preds):,}, {share:.1%}; {truth:.1%} of "
                            f"{split} is {names[top]!r})")
    return warnings, matrix


# A classifier collapsed onto one class: at least 99% of its predictions are one class while
# under 95% of the labels are. Such a model scores within a point of answering that class
# always (at most 1% of rows answered otherwise), so its metric says nothing of what it
# learned; a split where the class really is 95%+ of the labels is not flagged.
NEAR_ONE_CLASS = 0.99
NEAR_ONE_CLASS_LABELS = 0.95


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor, **kw: Any) -> torch.Tensor:
    """Summed fp32 cross-entropy."""
    return F.cross_entropy(logits.float(), labels, reduction="sum", **kw)


@torch.no_grad()
def logits(model: torch.nn.Module, batch: dict[str, torch.Tensor], precision: str = "auto",
           batch_size: int = 128) -> torch.Tensor:
    """The model's float32 outputs (on the CPU) for encoded inputs of one width, in eval mode
    and in batches, in the inputs' order; the model's train/eval mode is restored after.

    Batches hold inputs of similar length (longest first), each cut to its longest row, so
    little padding is computed; per-token outputs (B, T, ...) come back at the full width,
    the dtype's lowest past each batch's cut (padding, which no caller reads)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    lengths = batch["attention_mask"].sum(1)
    order = torch.argsort(lengths, descending=True, stable=True)
    T = batch["input_ids"].shape[1]
    outs = []
    for i in range(0, len(order), batch_size):
        rows = order[i : i + batch_size]
        width = max(1, int(lengths[rows].max()))
        part = {k: batch[k][rows, :width].to(device)
                for k in ("input_ids", "attention_mask", "token_type_ids")}
        with autocast(device, precision):
            out = model(part["input_ids"], part["attention_mask"], part["token_type_ids"])
        out = out.float().cpu()
        advance(len(rows))  # a command's bar, where it opened one (electra.io.progress)
        if out.dim() == 3:  # per token: back to the full width
            out = F.pad(out, (0, 0, 0, T - width), value=torch.finfo(out.dtype).min)
        outs.append(out)
    model.train(was_training)
    out = torch.cat(outs)
    return torch.empty_like(out).index_copy_(0, order, out)
