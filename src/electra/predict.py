"""`electra predict`: a fine-tuned model applied to an unlabelled file, one JSON line per input.

    classification  CSV/TSV/JSONL with the model's text column(s), or plain lines (one text
                    each) -> {"label": NAME, "probs": {NAME: p, ...}}
    regression      the same inputs -> {"score": x}
    tagging         .conllu, CoNLL or .jsonl {"tokens": [...]}, or plain lines of
                    whitespace-separated words -> {"tokens": [...], "tags": [...]}
    squad1/squad2   SQuAD JSON, or .jsonl {"question", "context"[, "id"]} -> {"id", "answer",
                    "no_answer_minus_best"} (squad2: "" when that is > 0)

The inputs are encoded exactly as in training and evaluation (the model's saved settings:
max_length, stride...), in batches, with a progress bar on stderr. Labels in the input, if
any, are ignored. Output goes to --out (written whole, then renamed) or stdout.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch

from electra.errors import UserError
from electra.io.files import jsonl
from electra.io.outputs import check_file_out, write_file


def main(model: str, input: str, out: str | None = None, batch_size: int = 64,
         progress: bool = True) -> int:
    """`electra predict`: read, predict in batches, write JSON lines; returns the count."""
    from electra.config import FinetuneConfig, config_from_dict
    from electra.io import folders
    from electra.io.tokenizer import load_tokenizer

    if batch_size < 1:
        raise UserError(f"--batch-size {batch_size}: give a positive number")
    target = (check_file_out(out, "predict", [("--model", model), ("--input", input)],
                             suffix=".jsonl") if out else None)
    net, meta = folders.load(model, "classifier")
    net.eval()
    cfg = config_from_dict(FinetuneConfig, meta["finetune"], f"{model}/config.json")
    head = meta.get("head", "sequence")
    items = read_inputs(Path(input), head, meta)
    tok = load_tokenizer(folders.resolve(model, "classifier"))
    records = predict_records(net, tok, items, meta, cfg, batch_size, progress)
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    if target is None:
        sys.stdout.write(text)
    else:
        write_file(target, lambda part: part.write_text(text, encoding="utf-8"), "predict")
        print(f"wrote {len(records):,} predictions to {target}", file=sys.stderr)
    return len(records)


def read_inputs(path: Path, head: str, meta: dict[str, Any]) -> list[Any]:
    """The inputs in the form the model's task reads them (labels, if any, ignored)."""
    from electra.data.tagging import Sentence, read_tagged

    if not path.is_file():
        raise UserError(f"--input {path}: no such file")
    if head == "qa":
        return _questions(path)
    if head == "tagging":
        if path.suffix in (".conllu", ".jsonl", ".conll", ".bio", ".tsv"):
            return read_tagged(path)
        return [Sentence(line.split(), None) for line in _lines(path) if line.split()]
    columns = meta.get("text_columns") or ["text"]
    if path.suffix in (".csv", ".tsv", ".tab", ".jsonl"):
        from electra.data.tasks import read_custom

        return read_custom(path, columns, None)
    if len(columns) > 1:
        raise UserError(f"--input {path}: this model reads pairs ({', '.join(columns)}); give "
                        f"a CSV, TSV or JSONL file with those columns")
    from electra.data.tasks import Example

    return [Example(line, None, None) for line in _lines(path) if line.strip()]


def _lines(path: Path) -> list[str]:
    from electra.io.files import read_text

    return read_text(path, "--input").splitlines()


def _questions(path: Path) -> list[Any]:
    from electra.data.squad import QAExample, read_squad

    if path.suffix == ".json":
        return read_squad(path, training=False)[0]
    out = []
    for n, r in jsonl(path, _lines(path)):
        if not isinstance(r, dict) or not isinstance(r.get("question"), str) or not \
                isinstance(r.get("context"), str):
            raise UserError(f'{path}:{n}: expected {{"question": ..., "context": ...}} (and '
                            f'optionally "id")')
        out.append(QAExample(str(r.get("id", n)), r["question"], r["context"]))
    if not out:
        raise UserError(f"{path}: no questions")
    return out


@torch.no_grad()
def predict_records(net: torch.nn.Module, tok: Any, items: list[Any], meta: dict[str, Any],
                    cfg: Any, batch_size: int = 64, progress: bool = False
                    ) -> list[dict[str, Any]]:
    """One record per input, in order (the same encoding as fine-tuning's)."""
    from tqdm.auto import tqdm

    from electra.data.tasks import TaskData

    head = meta.get("head", "sequence")
    data = TaskData(meta["task"], [], {}, tuple(meta.get("metrics", ())),
                    bool(meta.get("regression")), meta.get("labels") or {},
                    kind=head if head in ("tagging", "qa") else "sequence")
    records: list[dict[str, Any]] = []
    bar = tqdm(total=len(items), disable=not progress, unit="input", file=sys.stderr)
    for i in range(0, len(items), batch_size):
        part = items[i : i + batch_size]
        records += _predict(net, tok, part, data, cfg)
        bar.update(len(part))
    bar.close()
    return records


def _predict(net: Any, tok: Any, part: list[Any], data: Any, cfg: Any) -> list[dict[str, Any]]:
    from electra.data.tasks import encode
    from electra.tasks.infer import answer_questions, logits, predict_tags

    if data.kind == "tagging":
        tags = predict_tags(net, tok, part, data, cfg)
        return [{"tokens": s.words, "tags": t} for s, t in zip(part, tags, strict=True)]
    if data.kind == "qa":
        answers, null = answer_questions(net, tok, part, cfg)
        no_answer = data.name == "squad2"
        return [{"id": e.qid, "answer": "" if no_answer and null[e.qid] > 0 else
                 answers[e.qid], "no_answer_minus_best": round(null[e.qid], 4)} for e in part]
    out = logits(net, encode(tok, part, cfg.max_length, data.labels, data.regression),
                 cfg.precision, len(part))
    if data.regression:
        return [{"score": round(float(v), 6)} for v in out.squeeze(-1)]
    names = {i: name for name, i in data.labels.items()}
    probs = out.softmax(-1)
    return [{"label": names[int(p.argmax())],
             "probs": {names[j]: round(float(p[j]), 6) for j in range(len(names))}}
            for p in probs]
