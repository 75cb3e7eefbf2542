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

import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from electra.data.tokenizer import load_tokenizer
from electra.errors import UserError
from electra.io.outputs import check_file_out, write_file
from electra.runtime import bound_kernel_cache, placed, resolve_device
from electra.saved import folders
from electra.tasks.base import head_of
from electra.tasks.registry import finetune_config

if TYPE_CHECKING:
    from tokenizers import Tokenizer  # (the types only: the readers stay light)


def main(model: str, input: str, out: str | None = None, batch_size: int = 64,
         progress: bool = True, precision: str | None = None, device: str = "auto") -> int:
    """`electra predict`: read, predict in batches, write JSON lines; returns the count."""
    target = (check_file_out(out, "predict", [("--model", model), ("--input", input)],
                             suffix=".jsonl") if out else None)
    records = predict(model, input, batch_size, progress, precision, device)
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    if target is None:
        sys.stdout.write(text)
    else:
        write_file(target, lambda part: part.write_text(text, encoding="utf-8"), "predict")
        print(f"wrote {len(records):,} predictions to {target}", file=sys.stderr)
    return len(records)


def predict(model: str | Path, input: str | Path, batch_size: int = 64,
            progress: bool = False, precision: str | None = None, device: str = "auto"
            ) -> list[dict[str, Any]]:
    """A fine-tuned model (``OUT/seed-S``, or ``OUT/seed-S/TASK``) applied to the inputs in
    a file (the forms above); one record per input, in order (the Python API's
    ``electra.predict``). ``precision``: instead of the fine-tune's (``fp32``: transformers'
    fp32 results; ``auto``, the default's, is bf16 where the CPU has it); ``device``: where
    the model runs (auto: CUDA when present)."""
    if batch_size < 1:
        raise UserError(f"--batch-size {batch_size}: give a positive number")
    resolve_device(device)  # before any file is read
    bound_kernel_cache()
    net, meta = folders.load_classifier(model)
    net = placed(net, device).eval()
    cfg = finetune_config(meta["finetune"], f"{model}/config.json")
    if precision is not None:
        cfg = dataclasses.replace(cfg, precision=precision)
    path = Path(input)
    if not path.is_file():
        raise UserError(f"--input {path}: no such file")
    items = head_of(meta).read_inputs(path, meta)
    tok = load_tokenizer(folders.classifier_folder(model))
    return predict_records(net, tok, items, meta, cfg, batch_size, progress)


@torch.no_grad()
def predict_records(net: torch.nn.Module, tok: Tokenizer, items: list[Any], meta: dict[str, Any],
                    cfg: Any, batch_size: int = 64, progress: bool = False
                    ) -> list[dict[str, Any]]:
    """One record per input, in order (the same encoding as fine-tuning's)."""
    from tqdm.auto import tqdm

    head = head_of(meta)
    data = head.from_meta(meta)
    records: list[dict[str, Any]] = []
    bar = tqdm(total=len(items), disable=not progress, unit="input", file=sys.stderr)
    for i in range(0, len(items), batch_size):
        part = items[i : i + batch_size]
        records += head.records(net, tok, part, data, cfg)
        bar.update(len(part))
    bar.close()
    return records
