"""Sentence embeddings from any electra or transformers model's encoder, and what they are
scored on: STS (Spearman of cosines) and dense retrieval (nDCG@10, MRR@10, Recall@100).

    electra.encode(MODEL, ["a sentence", ...])        -> (N, H) float32, L2-normalised
    Encoder(MODEL).encode(sentences, batch_size=32)   the object MTEB's runner takes
    electra.sts(MODEL, data="glue/STS-B")             -> {"dev": {"spearman": ...}}
    electra.retrieval(MODEL, data="squad/dev-v1.1.json")  -> {"ndcg@10": ..., ...}
    electra evaluate --model MODEL --task sts|retrieval --data ...

The encoder is the model's discriminator's (or a fine-tuned model's) as `electra detect` and
`finetune --model` open it: a run, one of its parts or checkpoints, a transformers folder, a
hub id. Pooling: ``mean`` over the real tokens (the default, sentence-transformers'), or
``cls`` (the first position); texts longer than the model's positions are cut.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from electra.data.examples import _records, header_of
from electra.data.retrieval import read_retrieval
from electra.data.tokenizer import load_tokenizer
from electra.errors import UserError
from electra.io import hub, remote
from electra.io.progress import reporting
from electra.runtime import placed
from electra.saved.models import open_model, trained_length
from electra.tasks.base import head_of, logits
from electra.tasks.embedding.data import encode_texts
from electra.tasks.embedding.head import Pooled
from electra.tasks.registry import load_task

POOLINGS = ("mean", "cls")


class Encoder:
    """A model's sentence embeddings: ``encode(sentences)`` -> (N, H) float32 (MTEB's
    runner calls it so: ``mteb.MTEB(tasks=...).run(Encoder("RUN"))``).

    A model's own settings are honoured where it has them, as its users' tools do: a
    sentence-transformers folder's pooling, normaliser, length (``max_seq_length``),
    lowercasing and prompts; a fine-tuned model's pooling, normaliser and the length it was
    fine-tuned at. Arguments given override them; the length is never more than the model's
    positions."""

    def __init__(self, model: str | Path, pooling: str | None = None,
                 normalize: bool | None = None, max_length: int | None = None,
                 precision: str = "fp32", device: str = "auto") -> None:
        if pooling is not None and pooling not in POOLINGS:
            raise UserError(f"pooling={pooling!r}: choose one of {', '.join(POOLINGS)}")
        model = hub.resolve(model, "--model")  # a hub id's folder, read before opening it
        st = sentence_transformers_folder(Path(model))
        if st is not None:  # its transformers folder and its own settings
            model = st.transformer
        meta_kind = "classifier" if _is_classifier(model) else "discriminator"
        opened = open_model(model, meta_kind)
        own = head_of(opened.meta).sentence_embedding(opened.meta) if (
            meta_kind == "classifier") else ((st.pooling, st.normalize) if st else None)
        pooling = pooling or (own[0] if own else "mean")
        normalize = (own[1] if own else True) if normalize is None else normalize
        self.module = placed(opened[meta_kind], device).eval()  # (auto: CUDA when present)
        self.encoder = self.module.encoder  # type: ignore[union-attr]
        self.model = Pooled(self.encoder, pooling, normalize)
        self.tok = load_tokenizer(opened.tokenizer)
        limit = self.module.config.max_position_embeddings  # type: ignore[union-attr]
        trained = (st.max_length if st else trained_length(opened.meta)
                   if meta_kind == "classifier" else None)
        self.max_length = min(max_length or trained or limit, limit)
        self.pooling, self.normalize, self.precision = pooling, normalize, precision
        self.prompts = dict(st.prompts) if st else {}
        self.default_prompt = st.default_prompt if st else None
        self.lowercase = bool(st and st.lowercase)

    def encode(self, sentences: list[str], batch_size: int = 32,
               prompt_name: str | None = None, prompt: str | None = None,
               show_progress_bar: bool = False, **_: Any) -> np.ndarray:
        """(len(sentences), H) float32 embeddings, in order. Batches hold texts of similar
        length (longest first), each cut to its longest, so little padding is computed.
        ``prompt`` (or the model's prompt named ``prompt_name``, else its default one) goes
        before each text, as sentence-transformers puts it; ``show_progress_bar``: a bar on
        a terminal, a line every ELECTRA_PROGRESS_SECONDS in a log (:mod:`electra.io.progress`;
        the commands' own bars count these texts too)."""
        if isinstance(sentences, str):
            raise UserError("encode takes a list of texts; give [text] for one")
        if prompt is None and (prompt_name or self.default_prompt):
            name = prompt_name or self.default_prompt
            if name not in self.prompts:
                raise UserError(f"prompt_name={name!r}: the model's prompts are "
                                f"{', '.join(map(repr, self.prompts)) or 'none'}")
            prompt = self.prompts[name]
        if not len(sentences):
            return np.zeros((0, self.module.config.hidden_size),  # type: ignore[union-attr]
                            dtype=np.float32)
        texts = [(prompt or "") + s for s in sentences]
        if self.lowercase:
            texts = [t.lower() for t in texts]
        batch = encode_texts(self.tok, texts, self.max_length)
        with (reporting(len(texts), "encoding", "text") if show_progress_bar
              else contextlib.nullcontext()):
            return logits(self.model, batch, self.precision, batch_size).numpy()

    def prompt_for(self, *names: str) -> str | None:
        """The first of ``names`` the model has a prompt for (retrieval's queries: query;
        documents: document, passage or corpus, as sentence-transformers' models name
        them)."""
        return next((n for n in names if n in self.prompts), None)


@dataclass(frozen=True)
class SentenceTransformersFolder:
    """What electra reads of a folder sentence-transformers saved: its transformers
    folder, pooling (mean or cls), normaliser, length (None: the model's positions),
    lowercasing and prompts (name -> text, and the default's name)."""

    transformer: Path
    pooling: str = "mean"
    normalize: bool = True
    max_length: int | None = None
    lowercase: bool = False
    prompts: tuple[tuple[str, str], ...] = ()
    default_prompt: str | None = None


def sentence_transformers_folder(folder: Path) -> SentenceTransformersFolder | None:
    """A folder sentence-transformers saved (``modules.json``), read as
    :class:`SentenceTransformersFolder`; None for any other folder. A pooling electra does
    not embed with (max, weighted mean, a prompt left out of the mean, ...) is a
    UserError."""
    modules = _json(folder / "modules.json")
    if not isinstance(modules, list):
        return None
    kinds = {str(m.get("type", "")).rpartition(".")[2]: m for m in modules
             if isinstance(m, dict)}
    if "Transformer" not in kinds:
        raise UserError(f"{folder}: a sentence-transformers folder without a Transformer "
                        f"module; electra reads those of an encoder and a pooling")
    pooling = "mean"
    if "Pooling" in kinds:
        cfg = _json(folder / kinds["Pooling"].get("path", "") / "config.json") or {}
        modes = [cfg.get("pooling_mode")] if cfg.get("pooling_mode") else [
            m.removeprefix("pooling_mode_").removesuffix("_token").removesuffix("_tokens")
            for m, on in cfg.items() if m.startswith("pooling_mode_") and on is True]
        if len(modes) != 1 or modes[0] not in POOLINGS:
            raise UserError(f"{folder}: its pooling is {'+'.join(map(str, modes))}; electra "
                            f"embeds with {' or '.join(POOLINGS)}")
        if cfg.get("include_prompt") is False:
            raise UserError(f"{folder}: its pooling leaves the prompt's tokens out "
                            f"(include_prompt false, an Instructor-style model); electra "
                            f"pools every token of the text")
        pooling = modes[0]
    transformer = folder / kinds["Transformer"].get("path", "")
    bert = _json(transformer / "sentence_bert_config.json") or {}
    length = bert.get("max_seq_length") or (_json(transformer / "tokenizer_config.json")
                                            or {}).get("model_max_length")
    own = _json(folder / "config_sentence_transformers.json") or {}
    prompts = own.get("prompts") if isinstance(own.get("prompts"), dict) else {}
    default = own.get("default_prompt_name")
    return SentenceTransformersFolder(
        transformer, pooling, "Normalize" in kinds,
        int(length) if isinstance(length, int | float) and 0 < length < 1e6 else None,
        bert.get("do_lower_case") is True,
        tuple((str(k), str(v)) for k, v in prompts.items() if isinstance(v, str)),
        default if isinstance(default, str) and default in prompts else None)


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _is_classifier(model: str | Path) -> bool:
    meta = Path(model) / "config.json"
    try:
        return json.loads(meta.read_text()).get("kind") == "classifier"
    except (OSError, ValueError, AttributeError):
        return False


def encode(model: str | Path, texts: list[str], pooling: str | None = None,
           normalize: bool | None = None, batch_size: int = 32, device: str = "auto"
           ) -> np.ndarray:
    """The embeddings of ``texts`` (the Python API's ``electra.encode``)."""
    return Encoder(model, pooling, normalize, device=device).encode(texts, batch_size)


def sts(model: str | Path, data: str | Path | None = None, split: str = "dev",
        pooling: str | None = None, batch_size: int = 32, dev: str | Path | None = None,
        text_columns: str | None = None, label_column: str | None = None,
        precision: str = "fp32", device: str = "auto", progress: bool = False
        ) -> dict[str, dict[str, float]]:
    """STS zero-shot (or with a fine-tuned embedding model): the Spearman correlation
    between the cosine of each pair's embeddings and its gold score, on GLUE's own STS-B
    files (``data``: the folder; the Python API's ``electra.sts``) or on a file of scored
    pairs (``dev``: CSV, TSV or JSONL; ``text_columns`` A,B, default sentence1,sentence2;
    the score in ``label_column``, default label, else score)."""
    from scipy.stats import spearmanr  # scipy's import takes a second: only when scoring

    if dev is not None:
        if label_column is None and Path(dev).is_file():
            header = header_of(_records(Path(dev)))
            label_column = next((c for c in ("label", "score") if c in header), None)
        task = load_task("custom", dev=str(dev), split="dev", text_columns=text_columns or
                         "sentence1,sentence2", label_column=label_column, regression=True)
        where = f"--dev {dev}"
    else:
        task = load_task("stsb", data=str(data), split=split)
        where = f"--data {data}"
    enc, out = Encoder(model, pooling, normalize=True, precision=precision,  # cosines
                       device=device), {}
    for name, rows in task.dev.items():
        pairs = [r for r in rows if r.label is not None and r.text_b is not None]
        if len(pairs) < 2:
            raise UserError(f"{where}: {len(pairs)} scored pair(s) in its {name} split; "
                            f"a correlation needs at least 2")
        with reporting(2 * len(pairs), f"sts: encoding {name}'s pairs", "text", progress):
            a = enc.encode([r.text_a for r in pairs], batch_size)
            b = enc.encode([r.text_b for r in pairs], batch_size)
        cosine = (a * b).sum(1)
        rho = spearmanr(cosine, np.array([float(r.label) for r in pairs])).statistic
        out[name] = {"spearman": float(rho)}
    return out


def score_run(qrels: dict[str, dict[str, int]],
              run: dict[str, dict[str, float]]) -> dict[str, float]:
    """What `electra evaluate --task retrieval` reports, the mean over ``qrels``' queries of
    each as trec_eval computes it (pytrec_eval; ties broken by document id, as trec_eval
    does): ``ndcg@10``, nDCG over the first 10 documents; ``mrr@10``, the reciprocal rank of
    the first relevant one within 10 (0 past it); ``recall@100``, the share of relevant
    documents in the first 100. ``run``: query id -> {document id: score}, at least its
    first 100 documents."""
    try:
        import pytrec_eval
    except ImportError:
        raise UserError("--task retrieval scores with pytrec_eval: pip install "
                        "'electra[retrieval]' (or pip install pytrec-eval-terrier)") from None
    top10 = {q: dict(sorted(docs.items(), key=lambda kv: (-kv[1], _desc(kv[0])))[:10])
             for q, docs in run.items()}
    full = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100"}).evaluate(run)
    first = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)
    n = len(qrels)  # a query the run left out scores 0
    return {"ndcg@10": sum(v["ndcg_cut_10"] for v in full.values()) / n,
            "mrr@10": sum(v["recip_rank"] for v in first.values()) / n,
            "recall@100": sum(v["recall_100"] for v in full.values()) / n}


class _desc(str):
    """A document id ordered as trec_eval breaks ties: descending."""

    def __lt__(self, other: str) -> bool:  # type: ignore[override]
        return str.__gt__(self, other)


def ranked(queries: np.ndarray, docs: np.ndarray, query_ids: list[str],
           doc_ids: list[str], k: int = 100, chunk: int = 1024) -> dict[str, dict[str, float]]:
    """Each query's ``k`` most similar documents by the dot product of their embeddings
    (the cosine, normalised), as pytrec_eval's run: query id -> {document id: score}."""
    D = torch.from_numpy(docs)
    k = min(k, len(doc_ids))
    run: dict[str, dict[str, float]] = {}
    for start in range(0, len(query_ids), chunk):
        sims = torch.from_numpy(queries[start:start + chunk]) @ D.T
        scores, index = sims.topk(k, dim=1)
        for r, (s_row, i_row) in enumerate(zip(scores.tolist(), index.tolist(), strict=True)):
            run[query_ids[start + r]] = {doc_ids[i]: s for i, s in zip(i_row, s_row,
                                                                       strict=True)}
    return run


def retrieval(model: str | Path, data: str | Path, split: str = "test",
              pooling: str | None = None, batch_size: int = 32,
              precision: str = "fp32", device: str = "auto",
              progress: bool = False) -> dict[str, Any]:
    """Dense retrieval with the model's embeddings: every query against the whole corpus of
    ``data`` (a BEIR folder's ``split``, or the set built from a SQuAD file:
    :mod:`electra.data.retrieval`), scored by :func:`score_run` (the Python API's
    ``electra.retrieval``)."""
    found = read_retrieval(remote.local(data, "--data"), split)
    enc = Encoder(model, pooling, precision=precision, device=device)
    doc_ids, query_ids = list(found.corpus), list(found.queries)
    with reporting(len(doc_ids) + len(query_ids), "retrieval: encoding the corpus and the "
                   "queries", "text", progress):
        docs = enc.encode([found.corpus[d] for d in doc_ids], batch_size,  # its prompts
                          prompt_name=enc.prompt_for("document", "passage", "corpus"))
        queries = enc.encode([found.queries[q] for q in query_ids], batch_size,
                             prompt_name=enc.prompt_for("query"))
    scores = score_run(found.qrels, ranked(queries, docs, query_ids, doc_ids))
    return {**scores, "queries": len(query_ids), "documents": len(doc_ids)}


EMBEDDING_TASKS = ("sts", "retrieval")


def evaluate_embeddings(model: str, task: str, data: str | None, dev: str | None,
                        split: str, pooling: str | None, precision: str | None,
                        text_columns: str | None, label_column: str | None,
                        device: str = "auto", progress: bool = True) -> dict[str, Any]:
    """`electra evaluate --task sts|retrieval`: any model's embeddings, zero-shot or
    fine-tuned, on STS pairs (GLUE's STS-B folder as --data, or a scored pairs file as
    --dev) or on a retrieval set (a BEIR folder or a SQuAD file as --data)."""
    if pooling is not None and pooling not in POOLINGS:  # before any file is read
        raise UserError(f"pooling={pooling!r}: choose one of {', '.join(POOLINGS)}")
    if task == "retrieval":
        if not data or dev:
            raise UserError("--task retrieval reads --data: a BEIR folder (corpus.jsonl, "
                            "queries.jsonl, qrels/SPLIT.tsv) or a SQuAD .json file")
        res = {"retrieval": retrieval(model, data, split, pooling,
                                      precision=precision or "fp32", device=device,
                                      progress=progress)}
    else:
        if bool(data) == bool(dev):
            raise UserError("--task sts reads --data (GLUE's STS-B folder) or --dev (a CSV, "
                            "TSV or JSONL of sentence pairs with a score), one of them")
        res = sts(model, data, split, pooling, dev=dev, text_columns=text_columns,
                  label_column=label_column, precision=precision or "fp32", device=device,
                  progress=progress)
    print(json.dumps(res))
    return res
