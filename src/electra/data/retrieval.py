"""Retrieval sets: a corpus, queries and their relevant documents (qrels), read from BEIR's
file layout or built from a SQuAD file.

BEIR's layout (what ``beir`` and MTEB's retrieval tasks read)::

    FOLDER/corpus.jsonl        {"_id": "d1", "title": "...", "text": "..."} a line
    FOLDER/queries.jsonl       {"_id": "q1", "text": "..."} a line
    FOLDER/qrels/SPLIT.tsv     query-id <TAB> corpus-id <TAB> score, after a header line

A SQuAD file (v1.1 or v2.0 JSON) becomes the set people build from it: each question a
query, each unique paragraph a document, a question's own paragraph its one relevant
document (v2.0's unanswerable questions included: their paragraph is still theirs). A
document is embedded as ``title + " " + text`` where it has a title (BEIR's convention for
dense models); SQuAD's paragraphs are embedded alone.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from electra.errors import UserError
from electra.io.files import jsonl, read_json, read_text

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class RetrievalSet:
    """``corpus``: document id -> text; ``queries``: query id -> text (only those with
    judgements); ``qrels``: query id -> {document id: relevance > 0}."""

    corpus: dict[str, str]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]


def read_retrieval(path: str | Path, split: str = "test") -> RetrievalSet:
    """A BEIR folder's ``split`` (``qrels/SPLIT.tsv``; ``dev``, `evaluate`'s default, takes
    a folder's only qrels file whatever its name), or a SQuAD JSON file's set."""
    path = Path(path)
    if path.is_file() and path.suffix == ".json":
        return squad_retrieval(path)
    if not path.is_dir():
        raise UserError(f"--data {path}: not a BEIR folder (corpus.jsonl, queries.jsonl, "
                        f"qrels/SPLIT.tsv) or a SQuAD .json file")
    missing = [n for n in ("corpus.jsonl", "queries.jsonl") if not (path / n).is_file()]
    if missing:
        raise UserError(f"--data {path}: no {missing[0]}; a BEIR folder holds corpus.jsonl, "
                        f"queries.jsonl and qrels/SPLIT.tsv")
    qrels_file = path / "qrels" / f"{split}.tsv"
    have = sorted(p.stem for p in (path / "qrels").glob("*.tsv"))
    if not qrels_file.is_file() and split == "dev" and len(have) == 1:
        qrels_file = path / "qrels" / f"{have[0]}.tsv"  # `evaluate`'s default: the only one
    if not qrels_file.is_file():
        raise UserError(f"--data {path}: no qrels/{split}.tsv; "
                        + (f"give --split {' or '.join(have)}" if have else
                           "a BEIR folder holds qrels/SPLIT.tsv (query-id, corpus-id, score)"))
    corpus = {}
    for line_no, row in _jsonl(path / "corpus.jsonl"):
        doc_id, text = row.get("_id"), row.get("text")
        if not isinstance(doc_id, str | int) or not isinstance(text, str):
            raise UserError(f"{path / 'corpus.jsonl'}:{line_no}: a document needs \"_id\" and "
                            f"\"text\"")
        title = row.get("title") or ""
        if str(doc_id) in corpus:  # a second text would silently replace the first
            raise UserError(f"{path / 'corpus.jsonl'}:{line_no}: document {str(doc_id)!r} is "
                            f"given twice; give each document its own \"_id\"")
        corpus[str(doc_id)] = f"{title} {text}".strip() if title else text
    if not corpus:
        raise UserError(f"{path / 'corpus.jsonl'}: the corpus is empty; give at least one "
                        f"document")
    queries = {}
    for line_no, row in _jsonl(path / "queries.jsonl"):
        if not isinstance(row.get("_id"), str | int) or not isinstance(row.get("text"), str):
            raise UserError(f"{path / 'queries.jsonl'}:{line_no}: a query needs \"_id\" and "
                            f"\"text\"")
        if str(row["_id"]) in queries:
            raise UserError(f"{path / 'queries.jsonl'}:{line_no}: query {str(row['_id'])!r} "
                            f"is given twice; give each query its own \"_id\"")
        queries[str(row["_id"])] = row["text"]
    qrels = _qrels(qrels_file, corpus, queries)
    return RetrievalSet(corpus, {q: queries[q] for q in qrels}, qrels)


def _jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of a JSONL file's lines (electra.io.files' reading)."""
    for i, row in jsonl(path, read_text(path).splitlines()):
        if not isinstance(row, dict):
            raise UserError(f"{path}:{i}: expected a JSON object")
        yield i, row


def _qrels(path: Path, corpus: dict[str, str],
           queries: dict[str, str]) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    rows = list(csv.reader(read_text(path).splitlines(), delimiter="\t"))
    for i, row in enumerate(rows[1:], 2):  # BEIR's files open with a header line
        if not row or not "".join(row).strip():
            continue
        if len(row) < 3:
            raise UserError(f"{path}:{i}: expected query-id, corpus-id and score, tab-separated")
        q, d, score = row[0], row[1], row[2]
        try:
            rel = int(float(score))
        except ValueError:
            raise UserError(f"{path}:{i}: score {score!r} is not a number") from None
        if q not in queries:
            raise UserError(f"{path}:{i}: query {q!r} is not in queries.jsonl")
        if d not in corpus:
            raise UserError(f"{path}:{i}: document {d!r} is not in corpus.jsonl")
        if rel > 0:
            qrels.setdefault(q, {})[d] = rel
    if not qrels:
        raise UserError(f"{path}: no query has a relevant document (a score above 0)")
    return qrels


def squad_retrieval(path: Path) -> RetrievalSet:
    """SQuAD's questions against its unique paragraphs (see the module's docstring)."""
    doc = read_json(path, "a SQuAD file")
    articles = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(articles, list):
        raise UserError(f"--data {path}: not a SQuAD file (a JSON object with \"data\": "
                        f"articles of paragraphs of questions)")
    corpus: dict[str, str] = {}
    ids: dict[str, str] = {}  # paragraph text -> its document id
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    for article in articles:
        for paragraph in article.get("paragraphs", []):
            text = paragraph.get("context", "")
            if not text.strip():
                continue
            doc = ids.setdefault(text, f"p{len(ids)}")
            corpus[doc] = text
            for qa in paragraph.get("qas", []):
                qid = str(qa.get("id", f"q{len(queries)}"))
                queries[qid] = qa.get("question", "")
                qrels[qid] = {doc: 1}
    if not corpus or not queries:
        raise UserError(f"--data {path}: no paragraphs with questions")
    return RetrievalSet(corpus, queries, qrels)


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
    import torch  # (only when ranking: the readers stay light)

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
