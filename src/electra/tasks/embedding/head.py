"""Embedding fine-tuning (``--task embedding``): a text's embedding, trained contrastively.

Pairs (query, positive) or triplets (+ a hard negative), from CSV, TSV, JSONL or Parquet
(``electra.tasks.embedding.data``). Each text runs through the encoder alone; its embedding
is the mean of the last states over its real tokens, or its first position's
(``pooling``), L2-normalised (``normalize``): the model (:class:`EmbeddingModel`) is that
alone. The loss is a loss object beside it (``electra.tasks.embedding.loss.InfoNCE``, the
head's ``criterion``): InfoNCE with in-batch negatives (sentence-transformers'
MultipleNegativesRankingLoss), each query's similarities to every positive and hard negative
of its micro-batch, divided by a temperature (``temperature``, learned from it with
``learn_temperature``: kept in the run's checkpoints, not in the model's folder), and
cross-entropy towards its own positive. Under several processes every rank's documents of
the micro-batch are gathered (with their gradients), so N processes see the negatives one
does; under gradient accumulation the negatives are a micro-batch's.

Dev: every dev query against the dev set's documents (its positives and negatives, each
once): MRR@10, Recall@1 and Recall@10 of its own positive; or a retrieval set as ``--dev``
(a BEIR folder, its only or ``dev`` qrels; a SQuAD file), each query against its whole
corpus, scored as `evaluate --task retrieval` scores it (nDCG@10, which picks the epoch
kept, MRR@10, Recall@100; the model card lists them). `electra evaluate --task
sts|retrieval` scores the model on STS pairs or a BEIR retrieval set; `electra export`
writes it as a sentence-transformers folder (the encoder, its pooling, its normaliser).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from electra.config import FamilySettings, FinetuneConfig, ModelConfig
from electra.data.examples import _records
from electra.data.retrieval import RetrievalSet, ranked, read_retrieval, score_run
from electra.errors import UserError
from electra.io.files import read_text
from electra.model import EncoderWithHead, encoder_for, init_weights
from electra.model.kernels import Kernels
from electra.tasks.base import Head, TaskData, logits
from electra.tasks.embedding.cache import CachedStep
from electra.tasks.embedding.data import encode_pairs, encode_texts, read_pairs
from electra.tasks.embedding.loss import InfoNCE

if TYPE_CHECKING:
    from tokenizers import Tokenizer  # (the types only: the readers stay light)

RETRIEVAL_METRICS = ("ndcg@10", "mrr@10", "recall@100")  # a retrieval set as --dev


def pool(h: torch.Tensor, mask: torch.Tensor, cls: bool, normalize: bool) -> torch.Tensor:
    """A text's embedding from the encoder's last states ``h`` (N, T, H): its first
    position's (``cls``) or the mean over its real tokens (``mask``), in float32,
    L2-normalised where ``normalize``: what an embedding model, ``electra.encode`` and a
    sentence-transformers export compute alike."""
    h = h.float()
    if cls:
        v = h[:, 0]
    else:
        m = mask[..., None].float()
        v = (h * m).sum(1) / m.sum(1).clamp(min=1.0)
    return F.normalize(v, dim=-1) if normalize else v


class Pooled(nn.Module):
    """Any encoder and a pooling: ``forward`` -> (N, H) embeddings (``electra.encode``'s
    model, batched by :func:`electra.tasks.base.logits`)."""

    def __init__(self, encoder: nn.Module, pooling: str, normalize: bool,
                 layers: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.encoder, self.cls, self.normalize = encoder, pooling == "cls", normalize
        self.layers = layers  # () the encoder's output; else the mean of these states

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        h = (layer_mean(self.encoder, self.layers, input_ids, attention_mask, token_type_ids)
             if self.layers else self.encoder(input_ids, attention_mask, token_type_ids))
        return pool(h, attention_mask, self.cls, self.normalize)


def layer_mean(encoder: nn.Module, layers: tuple[int, ...], input_ids: torch.Tensor,
               attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None
               ) -> torch.Tensor:
    """(N, T, H): the mean of the encoder's states ``layers``, indexed as transformers'
    ``hidden_states`` (0 the first block's input, i block i's output; the top block's
    state is the encoder's output, after its final norm where the body has one, as
    transformers gives it), for any body: each block's input and output read by hooks."""
    blocks: nn.ModuleList = encoder.layers  # type: ignore[assignment]
    kernels: Kernels = encoder.kernels  # type: ignore[assignment]
    layout = kernels.layout(attention_mask, (input_ids.shape[0], input_ids.shape[1]), None)
    states: list[torch.Tensor] = []
    hooks = [blocks[0].register_forward_pre_hook(lambda _m, args: states.append(args[0]))]
    hooks += [b.register_forward_hook(lambda _m, _a, out: states.append(out))
              for b in blocks[:-1]]
    try:
        top = encoder(input_ids, attention_mask, token_type_ids, layout=layout)
    finally:
        for hook in hooks:
            hook.remove()
    states.append(top)  # (B, T, H); a block's state under unpadding is (tokens, H)
    return torch.stack([s if s.dim() == 3 else layout.repad(s)
                        for s in (states[i] for i in layers)]).mean(0)


class EmbeddingModel(EncoderWithHead):
    """Encoder + pooling (+ normalisation): what is trained, kept and exported. ``forward``
    on (N, T) inputs returns the (N, H) embeddings; on (B, K, T) rows of a query and its
    K - 1 documents, the (B, K, H) embeddings of each row's texts (what the loss object,
    ``electra.tasks.embedding.loss.InfoNCE``, compares)."""

    def __init__(self, cfg: ModelConfig, kernels: Kernels | None = None,
                 pooling: str = "mean", normalize: bool = True) -> None:
        super().__init__()
        self.config = cfg
        self.encoder = encoder_for(cfg, kernels=kernels)
        self.pooling, self.normalize = pooling, normalize
        self.reads_first = pooling == "cls"
        init_weights(self, cfg.initializer_range)
        self._register_load_state_dict_pre_hook(_without_temperature)

    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
              token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """(N, T) texts -> (N, H) embeddings (float32)."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        h = self.encoder(input_ids, attention_mask, token_type_ids,
                         first_only=self.reads_first)
        return pool(h, attention_mask, self.reads_first, self.normalize)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        if input_ids.dim() == 2:
            return self.embed(input_ids, attention_mask, token_type_ids)
        B, K, T = input_ids.shape
        if attention_mask is not None:  # the rows' all-padding columns dropped
            T = max(1, int(attention_mask.sum(-1).max()))
        flat = [x[..., :T].reshape(B * K, T) if x is not None else None
                for x in (input_ids, attention_mask, token_type_ids)]
        return self.embed(*flat).view(B, K, -1)


def _without_temperature(state: dict[str, Any], prefix: str, *_: Any) -> None:
    """A folder written before the temperature moved to the loss object holds it as
    ``log_scale``: training's, not the model's, so it is left out."""
    state.pop(prefix + "log_scale", None)


def ranks(queries: np.ndarray, docs: np.ndarray, gold: list[int]) -> np.ndarray:
    """Each query's rank (1 = first) of its own document ``gold[i]`` among ``docs`` by the
    dot product; a tie counts against it (rank after every document scoring as high)."""
    sims = queries @ docs.T
    own = sims[np.arange(len(gold)), gold]
    return (sims >= own[:, None]).sum(1)


@dataclass(frozen=True)
class EmbeddingSettings(FamilySettings):
    """A text's embedding and its contrastive loss (``--task embedding``)."""

    RANGES: ClassVar[dict[str, str | tuple[str, ...]]] = {"pooling": ("mean", "cls"),
                                                          "temperature": "> 0"}
    pooling: str = "mean"
    """A text's embedding: the mean of the encoder's last states over its real
    tokens (sentence-transformers' default) or cls (its first position's)."""
    temperature: float = 0.05
    """InfoNCE's temperature (similarities divided by it; sentence-transformers'
    MultipleNegativesRankingLoss: 0.05); with learn_temperature, where learning starts."""
    learn_temperature: bool = False
    """Learn the temperature with the model (CLIP's log-scale), from temperature."""
    normalize: bool = True
    """L2-normalised embeddings, compared by cosine; off: by dot product."""
    matryoshka_dims: str = ""
    """Smaller dimensions, comma-separated (e.g. 128,64), at which the loss is also taken
    (Matryoshka: InfoNCE of each embedding's first d dimensions, renormalised, weight 1 each,
    beside the whole's), so that a prefix of the embedding works alone; score and export
    one with --truncate-dim D."""
    cached: bool = False
    """The cached loss (GradCache): every micro-batch's and every rank's documents the
    negatives of every query, at the memory of one micro-batch (batch_size / grad_accum
    rows), for one more forward pass; off, each micro-batch has its own negatives."""
    query_prompt: str = ""
    """Text put before every query, then a space (e.g. query:), in training, evaluation and
    the sentence-transformers export's prompts ("query")."""
    document_prompt: str = ""
    """Text put before every document, then a space (e.g. passage:; the export's prompt
    "document")."""

    def __post_init__(self) -> None:
        dims: object = self.matryoshka_dims
        if isinstance(dims, int) and not isinstance(dims, bool):  # one, read as a number
            object.__setattr__(self, "matryoshka_dims", str(dims))
        super().__post_init__()
        self.dims()

    def dims(self) -> tuple[int, ...]:
        """``matryoshka_dims`` as numbers (largest first); refused in one line unless each
        is a positive whole number."""
        items = [x.strip() for x in str(self.matryoshka_dims).split(",") if x.strip()]
        if not all(x.isdigit() and int(x) > 0 for x in items):
            raise UserError(f"matryoshka_dims={self.matryoshka_dims!r}: give positive whole "
                            f"numbers separated by commas, each below the model's width, "
                            f"e.g. matryoshka_dims=128,64")
        return tuple(sorted({int(x) for x in items}, reverse=True))

    def prompts(self) -> dict[str, str]:
        """The prompts given, by sentence-transformers' names (query, document), each ending
        with a space (`--set` strips the value's own; sentence-transformers joins a prompt
        and its text as they are)."""
        return {k: v if v.endswith(" ") else v + " " for k, v in (
            ("query", self.query_prompt), ("document", self.document_prompt)) if v}


class Embedding(Head):
    name = "embedding"
    Settings = EmbeddingSettings
    tasks = ("embedding",)
    help = "embedding (pairs or triplets: InfoNCE)"
    hf_part = "embedding"
    hf_class = "ElectraModel"  # exported as a sentence-transformers folder over it
    hf_keys = ()
    pipeline_tag = "sentence-similarity"

    def load(self, task: str, train: str | None = None, dev: str | None = None,
             text_columns: str | None = None, predict: str | None = None,
             split: str | None = None, label_column: str | None = None,
             regression: bool = False, min_score: float | None = None, **_: Any) -> TaskData:
        if predict:
            raise UserError("--predict test writes benchmark submission files; an embedding "
                            "model is scored with `electra evaluate --task sts|retrieval`")
        if regression:
            raise UserError("--regression: --task embedding reads pairs or triplets, not "
                            "labels; drop it (--min-score X trains on the pairs scored at "
                            "least X)")
        if label_column is not None and min_score is None:
            raise UserError(f"--label-column {label_column}: --task embedding reads a score "
                            f"only to keep the pairs scored at least --min-score X; add "
                            f"--min-score, or drop --label-column")
        if not dev or not (train or split is not None):
            raise UserError("--task embedding needs --train FILE and --dev FILE (pairs "
                            "query,positive or triplets query,positive,negative: CSV, TSV, "
                            "JSONL or Parquet)")
        columns = None if text_columns in (None, "text") else text_columns
        rows = (read_pairs(train, columns, label_column, min_score) if train and split is None
                else [])
        if Path(dev).is_dir() or Path(dev).suffix == ".json":  # a retrieval set
            found = read_retrieval(dev, "dev" if split in (None, "dev") else split)
            return TaskData(task, rows, {"dev": [found]}, RETRIEVAL_METRICS, False, {},
                            head=self)
        return TaskData(task, rows, {"dev": read_pairs(dev, columns, label_column, min_score)},
                        ("mrr@10", "recall@1", "recall@10"), False, {}, head=self)

    def read_inputs(self, path: Path, meta: dict[str, Any]) -> list[Any]:
        """Texts to embed: a text file's lines, or the ``text`` field of a CSV, TSV, JSONL
        or Parquet file's rows."""
        if path.suffix in (".csv", ".tsv", ".tab", ".jsonl", ".parquet"):
            rows = _records(path)
            if not rows or not isinstance(rows[0], dict) or "text" not in rows[0]:
                raise UserError(f"--input {path}: no 'text' column; give one, or a text "
                                f"file of one text a line")
            return [str(r["text"]) for r in rows]
        return [line for line in read_text(path, "--input").splitlines() if line.strip()]

    def build(self, cfg: ModelConfig, labels: dict[str, int], regression: bool,
              kernels: Kernels | None = None, settings: dict[str, Any] | None = None
              ) -> nn.Module:
        s = EmbeddingSettings.of(settings or {})
        self.check_model(cfg, settings or {})
        return EmbeddingModel(cfg, kernels, s.pooling, s.normalize)

    def check_model(self, cfg: ModelConfig, settings: dict[str, Any]) -> None:
        """Matryoshka dimensions below the model's width."""
        s = EmbeddingSettings.of(settings)
        wide = [d for d in s.dims() if d >= cfg.hidden_size]
        if wide:
            raise UserError(f"matryoshka_dims={s.matryoshka_dims}: {wide[0]} is not below the "
                            f"model's {cfg.hidden_size} dimensions (the whole embedding's "
                            f"loss is always taken); give smaller ones")

    def criterion(self, settings: dict[str, Any]) -> nn.Module:
        """InfoNCE at the settings' temperature (learned where ``learn_temperature``), at
        each Matryoshka dimension too."""
        s = EmbeddingSettings.of(settings)
        return InfoNCE(s.temperature, s.learn_temperature, s.dims(), s.normalize)

    def encode(self, tok: Tokenizer, examples: list[Any], data: TaskData,
               cfg: FinetuneConfig) -> dict[str, torch.Tensor]:
        prompts = self.settings(cfg).prompts()
        return encode_pairs(tok, examples, cfg.max_length or 128, prompts.get("query", ""),
                            prompts.get("document", ""))

    def loss(self, logits: torch.Tensor, labels: torch.Tensor,
             data: TaskData) -> torch.Tensor:
        """Summed InfoNCE of the loss object's logits (:meth:`InfoNCE.loss`)."""
        return InfoNCE.loss(logits)

    def micro_steps(self, cfg: FinetuneConfig, rows: Callable[[int], dict[str, torch.Tensor]],
                    n: int, denom: int, criterion: nn.Module | None, rt: Any,
                    which: dict[str, str]) -> Callable[..., Any] | None:
        """With ``cached``, the whole batch's loss (:class:`CachedStep`)."""
        if not self.settings(cfg).cached or criterion is None:
            return None
        return CachedStep(rows, n, denom, criterion, rt, which)

    def embeddings(self, model: nn.Module, tok: Tokenizer, texts: list[str],
                   cfg: FinetuneConfig, role: str = "") -> np.ndarray:
        """(N, H) embeddings of ``texts``, batched by length as evaluation does; ``role``
        (query, document): its prompt before each text."""
        prompt = self.settings(cfg).prompts().get(role, "")
        return logits(model, encode_texts(tok, [prompt + t for t in texts],
                                          cfg.max_length or 128), cfg.precision).numpy()

    def predict(self, model: nn.Module, tok: Tokenizer, examples: list[Any], data: TaskData,
                cfg: FinetuneConfig) -> tuple[Any, Any]:
        """Each dev query's rank of its positive among the dev documents (each once); on a
        retrieval set (a BEIR folder or a SQuAD file as ``--dev``), each query's 100 nearest
        documents of its whole corpus and the set's judgements."""
        if examples and isinstance(examples[0], RetrievalSet):
            found = examples[0]
            q_ids, d_ids = list(found.queries), list(found.corpus)
            q = self.embeddings(model, tok, [found.queries[i] for i in q_ids], cfg, "query")
            d = self.embeddings(model, tok, [found.corpus[i] for i in d_ids], cfg, "document")
            return ranked(q, d, q_ids, d_ids), found.qrels
        docs: dict[str, int] = {}
        for p in examples:
            for t in p.texts()[1:]:
                docs.setdefault(t, len(docs))
        q = self.embeddings(model, tok, [p.query for p in examples], cfg, "query")
        d = self.embeddings(model, tok, list(docs), cfg, "document")
        return ranks(q, d, [docs[p.positive] for p in examples]), None

    def score(self, data: TaskData, preds: Any, labels: Any) -> dict[str, float]:
        if isinstance(preds, dict):  # a retrieval set's run and judgements
            return score_run(labels, preds)
        r = np.asarray(preds)
        return {"mrr@10": float(np.where(r <= 10, 1.0 / r, 0.0).mean()),
                "recall@1": float((r <= 1).mean()), "recall@10": float((r <= 10).mean())}

    def records(self, model: nn.Module, tok: Tokenizer, items: list[Any], data: TaskData,
                cfg: FinetuneConfig) -> list[dict[str, Any]]:
        out = self.embeddings(model, tok, list(items), cfg)
        return [{"embedding": [round(float(x), 6) for x in v]} for v in out]

    def prompts(self, meta: dict[str, Any]) -> dict[str, str]:
        return EmbeddingSettings.of(meta.get("finetune") or {}).prompts()

    def sentence_embedding(self, meta: dict[str, Any]) -> tuple[str, bool] | None:
        s = EmbeddingSettings.of(meta.get("finetune") or {})
        return s.pooling, s.normalize

    def hf_labels(self, meta: dict[str, Any]) -> dict[str, Any]:
        return {}
