"""`electra mine`: hard negatives for each (query, positive) pair, found in a corpus by BM25
or by a model's embeddings, written as the groups `finetune --task rerank` and `--task
embedding` read (sentence-transformers' ``mine_hard_negatives``, its controls).

    electra mine --data squad/train.json --out groups.jsonl                (BM25, 7 each)
    electra mine --data pairs.jsonl --corpus docs.jsonl --by RUN --negatives 3 --skip-top 3

``--data``: a BEIR folder or a SQuAD .json (each query with each relevant document; the
corpus is the set's), or a pairs file (query, positive; the corpus is ``--corpus``, else the
file's positives). Each query's first ``--range`` documents (after the first
``--skip-top``, often near-duplicates of the positive or unlabelled positives) are the
candidates; a candidate that is one of the query's relevant documents, or its positive's
text, is never a negative; ``--margin X`` keeps those scoring at most the positive's score
minus X, ``--max-ratio R`` those at most R times it (NV-Retriever's 0.95); of the rest the
best ``--negatives`` (or a seeded random choice, ``--sample random``). A query with fewer is
left out (a note says how many). Output ``groups``: query,positive,negative_1,...;
``triplets``: one row a negative; ``pairs``: query,document,label (1 the positive, 0 each
negative).

A ``--corpus`` file is streamed: read in chunks, embedded (``--by MODEL``) or indexed
(BM25: its sparse index alone kept) chunk by chunk, each query's best candidates kept as it
goes, and the chosen negatives' texts read in a second pass: a corpus larger than memory
works (the queries and, for BM25, the index are held).
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from electra.data.retrieval import read_retrieval
from electra.errors import UserError
from electra.evaluation.bm25 import BM25
from electra.evaluation.encoder import Encoder
from electra.io import remote
from electra.io.outputs import check_file_out, write_file
from electra.io.progress import reporting
from electra.runtime import resolve_device
from electra.tasks.embedding.data import read_pairs

FORMATS = ("groups", "triplets", "pairs")
CHUNK = 8192  # corpus texts read, embedded or indexed at a time


@dataclass(frozen=True)
class Controls:
    """What makes a candidate a negative (sentence-transformers' names in brackets)."""

    negatives: int = 7  # [num_negatives]
    skip_top: int = 0  # [range_min]
    range: int = 100  # [range_max]
    margin: float | None = None  # [absolute_margin]
    max_ratio: float | None = None  # [relative_margin = 1 - max_ratio]
    sample: str = "top"  # [sampling_strategy]
    seed: int = 0

    def check(self) -> None:
        if self.negatives < 1:
            raise UserError(f"--negatives {self.negatives}: give how many negatives a query "
                            f"to write, 1 or more")
        if self.skip_top < 0:
            raise UserError(f"--skip-top {self.skip_top}: give 0 or more")
        if self.range < self.negatives:
            raise UserError(f"--range {self.range}: the candidates a query must be at least "
                            f"--negatives {self.negatives}")
        if self.max_ratio is not None and not 0 < self.max_ratio <= 1:
            raise UserError(f"--max-ratio {self.max_ratio:g}: give a number in (0, 1], e.g. "
                            f"0.95 (a negative scores at most 95% of the positive)")
        if self.margin is not None and self.margin < 0:
            raise UserError(f"--margin {self.margin:g}: give 0 or more")
        if self.sample not in ("top", "random"):
            raise UserError(f"--sample {self.sample}: choose top or random")


@dataclass
class Row:
    """A query, its positive (id and text), and the ids of every document relevant to it."""

    query: str
    positive: str
    positive_id: str
    relevant: frozenset[str]


def rows_of(data: str, split: str, text_columns: str | None,
            corpus: str | None) -> tuple[list[Row], dict[str, str] | None]:
    """The (query, positive) rows and, for a retrieval set, its corpus (None: --corpus, or
    the pairs' own positives)."""
    path = Path(remote.local(data, "--data"))
    if path.is_dir() or path.suffix == ".json":
        if corpus is not None:
            raise UserError(f"--corpus {corpus}: --data {data} is a retrieval set with its "
                            f"own corpus; drop --corpus")
        found = read_retrieval(path, split)
        rows = [Row(found.queries[q], found.corpus[d], d, frozenset(docs))
                for q, docs in found.qrels.items() for d in docs]
        return rows, found.corpus
    pairs = read_pairs(path, text_columns, documents_needed=1)
    by_query: dict[str, set[str]] = {}
    for p in pairs:
        by_query.setdefault(p.query, set()).add(p.positive)
    return [Row(p.query, p.positive, p.positive, frozenset(by_query[p.query]))
            for p in pairs], None


def corpus_chunks(path: str) -> Iterator[list[tuple[str, str]]]:
    """A corpus file's (id, text) in chunks of :data:`CHUNK`: JSONL {"_id", "title"?, "text"}
    (BEIR's corpus.jsonl; no "_id": the text is its id) or a text file, one document a line
    (the text its id). Read line by line: the file is never held whole."""
    local = Path(remote.local(path, "--corpus"))
    if not local.is_file():
        raise UserError(f"--corpus {path}: no such file")
    chunk: list[tuple[str, str]] = []
    json_lines = local.suffix == ".jsonl"
    with open(local, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            if json_lines:
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    raise UserError(f"{path}:{n}: not a JSON object") from None
                if not isinstance(row, dict) or not isinstance(row.get("text"), str):
                    raise UserError(f"{path}:{n}: a document needs \"text\"")
                text = (f"{row['title']} {row['text']}".strip() if row.get("title")
                        else row["text"])
                chunk.append((str(row.get("_id", text)), text))
            else:
                chunk.append((line.rstrip("\n"), line.rstrip("\n")))
            if len(chunk) == CHUNK:
                yield chunk
                chunk = []
    if chunk:
        yield chunk


class Candidates:
    """Each query's best ``k`` documents seen so far (ids, scores), merged chunk by chunk."""

    def __init__(self, n: int, k: int) -> None:
        self.k = k
        self.scores = torch.full((n, 0), -torch.inf)
        self.ids: list[list[str]] = [[] for _ in range(n)]

    def add(self, scores: torch.Tensor, ids: list[str]) -> None:
        """``scores``: (queries, chunk) of the chunk's documents ``ids``."""
        both = torch.cat([self.scores, scores], 1)
        top, index = both.topk(min(self.k, both.shape[1]), dim=1)
        old = self.scores.shape[1]
        self.ids = [[mine[i] if i < old else ids[i - old] for i in row]
                    for mine, row in zip(self.ids, index.tolist(), strict=True)]
        self.scores = top


def search(queries: list[str], positives: list[tuple[int, str, str]], by: str, k: int,
           chunks: Iterator[list[tuple[str, str]]], need_positive: bool, batch_size: int,
           precision: str, device: str, progress: bool
           ) -> tuple[Candidates, np.ndarray | None]:
    """Each query's ``k`` best documents of the corpus streamed in ``chunks``, and (where
    ``need_positive``) each row's positive's score by the same measure (``positives``: each
    row's query's index, its positive's id and text)."""
    cand = Candidates(len(queries), k)
    if by == "bm25":
        index = BM25.streamed(chunks)
        found = list(index.search({str(i): q for i, q in enumerate(queries)}, k).values())
        cand.ids = [list(q) for q in found]
        cand.scores = torch.tensor([list(q.values()) + [-np.inf] * (k - len(q))
                                    for q in found], dtype=torch.float64).reshape(-1, k)
        if not need_positive:
            return cand, None
        lost = next((d for _, d, _ in positives if d not in index.at), None)
        if lost is not None:
            raise UserError(f"--margin/--max-ratio compare a negative's BM25 score with its "
                            f"positive's, and the positive {lost[:60]!r} is not in --corpus; "
                            f"add the positives to the corpus, or mine by a model (--by)")
        return cand, np.array([index.score(queries[i], d) for i, d, _ in positives])
    enc = Encoder(by, precision=precision, device=device)
    with reporting(len(queries), "mine: embedding the queries", "text", progress):
        q = torch.from_numpy(enc.encode(queries, batch_size, prompt_name=enc.prompt_for(
            "query")))
    doc_prompt = enc.prompt_for("document", "passage", "corpus")
    with reporting(None, "mine: embedding the corpus", "text", progress):
        for chunk in chunks:
            d = torch.from_numpy(enc.encode([t for _, t in chunk], batch_size,
                                            prompt_name=doc_prompt))
            cand.add(q @ d.T, [i for i, _ in chunk])
    pos = None
    if need_positive:
        p = torch.from_numpy(enc.encode([t for _, _, t in positives], batch_size,
                                        prompt_name=doc_prompt))
        pos = (q[[i for i, _, _ in positives]] * p).sum(1).numpy()
    return cand, pos


def choose(rows: list[Row], cand: Candidates, pos: np.ndarray | None, texts: dict[str, str],
           c: Controls) -> list[list[str]]:
    """Each row's negatives' ids (an empty list: too few candidates passed the controls)."""
    rng = random.Random(c.seed)
    out: list[list[str]] = []
    for i, row in enumerate(rows):
        keep: list[str] = []
        for d, s in zip(cand.ids[i][c.skip_top:], cand.scores[i, c.skip_top:].tolist(),
                        strict=False):
            if d in row.relevant or texts.get(d) == row.positive or s == -np.inf:
                continue
            if pos is not None and c.margin is not None and s > pos[i] - c.margin:
                continue
            if pos is not None and c.max_ratio is not None and s > c.max_ratio * pos[i]:
                continue
            if texts.get(d) not in {texts.get(k) for k in keep}:  # duplicates out
                keep.append(d)
        if len(keep) < c.negatives:
            out.append([])
        else:
            out.append(keep[:c.negatives] if c.sample == "top"
                       else rng.sample(keep, c.negatives))
    return out


def mine(data: str, out: str, corpus: str | None = None, by: str = "bm25",
         negatives: int = 7, skip_top: int = 0, range: int = 100, margin: float | None = None,
         max_ratio: float | None = None, sample: str = "top", format: str = "groups",
         split: str = "test", text_columns: str | None = None, seed: int = 0,
         batch_size: int = 32, precision: str = "fp32", device: str = "auto",
         progress: bool = True) -> int:
    """`electra mine` (see the module's docstring); returns how many rows it wrote."""
    controls = Controls(negatives, skip_top, range, margin, max_ratio, sample, seed)
    controls.check()
    if format not in FORMATS:
        raise UserError(f"--format {format}: choose one of {', '.join(FORMATS)}")
    resolve_device(device)
    target = check_file_out(out, "mine", [("--data", data), ("--corpus", corpus)],
                            suffix=".jsonl")
    rows, known = rows_of(data, split, text_columns, corpus)
    if known is not None:
        chunks: Any = lambda: iter([list(known.items())])  # noqa: E731 (a set's corpus)
    elif corpus is not None:
        chunks = lambda: corpus_chunks(corpus)  # noqa: E731
    else:  # the pairs' own positives
        own = list(dict.fromkeys(r.positive for r in rows))
        chunks = lambda: iter([[(t, t) for t in own]])  # noqa: E731
    queries = list(dict.fromkeys(r.query for r in rows))
    at = {q: i for i, q in enumerate(queries)}
    k = skip_top + range
    need = margin is not None or max_ratio is not None
    cand, pos = search(queries, [(at[r.query], r.positive_id, r.positive) for r in rows], by,
                       k, chunks(), need, batch_size, precision, device, progress)
    per_row = Candidates(len(rows), k)  # each row's candidates are its query's
    per_row.ids = [cand.ids[at[r.query]] for r in rows]
    per_row.scores = cand.scores[[at[r.query] for r in rows]]
    wanted = {d for ids in per_row.ids for d in ids} | {r.positive_id for r in rows}
    texts = {d: t for chunk in chunks() for d, t in chunk if d in wanted}
    chosen = choose(rows, per_row, pos, texts, controls)
    records = _records(rows, chosen, texts, format)
    left = sum(1 for c in chosen if not c)
    if not records:
        raise UserError(f"--data {data}: no query has {negatives} negative(s) that pass the "
                        f"controls (of its first {range} candidates after --skip-top "
                        f"{skip_top}); ask for fewer, or widen --range, --margin, --max-ratio")
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)

    def write(part: Path) -> None:
        part.write_text(text, encoding="utf-8")

    write_file(target, write, "mine")
    note = (f"; {left:,} of {len(rows):,} queries had fewer than {negatives} negatives that "
            f"passed the controls and are left out" if left else "")
    print(f"wrote {len(records):,} rows ({format}, {negatives} negative(s) a query by "
          f"{by}) to {target}{note}", file=sys.stderr)
    return len(records)


def _records(rows: list[Row], chosen: list[list[str]], texts: dict[str, str],
             format: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for row, negs in zip(rows, chosen, strict=True):
        if not negs:
            continue
        docs = [texts[d] for d in negs]
        if format == "groups":
            out.append({"query": row.query, "positive": row.positive,
                        **{f"negative_{i + 1}": t for i, t in enumerate(docs)}})
        elif format == "triplets":
            out += [{"query": row.query, "positive": row.positive, "negative": t}
                    for t in docs]
        else:
            out += [{"query": row.query, "document": row.positive, "label": 1},
                    *({"query": row.query, "document": t, "label": 0} for t in docs)]
    return out

