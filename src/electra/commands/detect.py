"""`electra detect`: what a discriminator thinks of a text, token by token.

For each token, the probability that it was replaced (sigmoid of the RTD head's logit), shown
in the terminal (tokens at or above --threshold highlighted), as JSON lines, or as an HTML
page shaded by probability. The model is a pretraining run, its discriminator/ folder, a
checkpoint (RUN/checkpoints/step-N), or a transformers ``ElectraForPreTraining`` folder.
"""

from __future__ import annotations

import html
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch

from electra.data.tokenizer import load_tokenizer, special_names
from electra.errors import UserError
from electra.io.files import jsonl, read_text
from electra.io.outputs import HTML_GENERATOR, check_file_out, write_file
from electra.saved.models import open_model

if TYPE_CHECKING:
    from tokenizers import Tokenizer  # (the types only: the readers stay light)

    from electra.config import ModelConfig

_RED, _RESET = "\033[41;97m", "\033[0m"


def load_detector(source: str | Path) -> tuple[torch.nn.Module, Any]:
    """(discriminator in eval mode, its tokenizer) from a run, discriminator folder,
    checkpoint, or transformers ElectraForPreTraining folder."""
    opened = open_model(source, "discriminator")  # refuses generators and classifiers
    if opened.head_fresh:  # an encoder alone: its head's scores would be a fresh head's
        raise UserError(f"--model {source}: an encoder without a replaced-token head (a "
                        f"transformers ...Model folder, a sentence-transformers one), so "
                        f"nothing to detect with; give a run, its discriminator, or an "
                        f"ElectraForPreTraining folder")
    return opened["discriminator"].eval(), load_tokenizer(opened.tokenizer)


@torch.no_grad()
def score(disc: torch.nn.Module, tok: Tokenizer, texts: list[str], batch_size: int = 32
          ) -> list[dict[str, Any]]:
    """For each text: its tokens (without [CLS]/[SEP]), their character offsets and the
    probability each was replaced. Texts longer than the model's positions are truncated."""
    limit = cast("ModelConfig", disc.config).max_position_embeddings
    tok.no_padding()
    tok.enable_truncation(limit)
    roles = special_names(tok)
    specials = {tok.token_to_id(roles[r]) for r in ("cls", "sep", "pad")}  # not unk, mask
    out = []
    for i in range(0, len(texts), batch_size):
        encs = tok.encode_batch(texts[i:i + batch_size])
        T = max(len(e.ids) for e in encs)
        ids = torch.zeros(len(encs), T, dtype=torch.long)
        types = torch.zeros_like(ids)
        mask = torch.zeros_like(ids)
        for r, e in enumerate(encs):
            n = len(e.ids)
            ids[r, :n] = torch.tensor(e.ids)
            types[r, :n] = torch.tensor(e.type_ids)
            mask[r, :n] = 1
        probs = torch.sigmoid(disc(ids, mask, types).float())
        for r, e in enumerate(encs):
            text = texts[i + r]
            tokens = [{"token": t, "start": s, "end": end, "p_replaced": round(float(p), 4)}
                      for t, tid, (s, end), p in zip(e.tokens, e.ids, e.offsets,
                                                     probs[r, :len(e.ids)].tolist(),
                                                     strict=True)
                      if tid not in specials]
            out.append({"text": text, "tokens": tokens})
    return out


def _terminal(result: dict[str, Any], threshold: float, color: bool) -> str:
    parts, text, pos = [], result["text"], 0
    for t in result["tokens"]:
        parts.append(text[pos:t["start"]])
        piece = text[t["start"]:t["end"]]
        if t["p_replaced"] >= threshold:
            piece = (f"{_RED}{piece}{_RESET}" if color
                     else f"[{piece} p={t['p_replaced']:.2f}]")
        parts.append(piece)
        pos = t["end"]
    parts.append(text[pos:])
    return "".join(parts)


def _html(results: list[dict[str, Any]], model: str) -> str:
    rows = []
    for res in results:
        text, pos, spans = res["text"], 0, []
        for t in res["tokens"]:
            spans.append(html.escape(text[pos:t["start"]]))
            p = t["p_replaced"]
            spans.append(f'<span style="background: rgba(220, 40, 40, {p:.3f})" '
                         f'title="p(replaced) = {p:.3f}">'
                         f'{html.escape(text[t["start"]:t["end"]])}</span>')
            pos = t["end"]
        spans.append(html.escape(text[pos:]))
        rows.append(f"<p>{''.join(spans)}</p>")
    return ("<!doctype html>\n<meta charset=\"utf-8\">\n" + HTML_GENERATOR + "\n"
            "<title>electra detect</title>\n"
            "<style>body{font:16px/1.8 sans-serif;max-width:50em;margin:2em auto}"
            "span{border-radius:3px}</style>\n"
            f"<h1>p(replaced) per token</h1>\n<p><small>{html.escape(model)}: the redder, "
            f"the surer the discriminator is that the token was replaced (hover for the "
            f"number).</small></p>\n" + "\n".join(rows) + "\n")


def _read_texts(path: str) -> list[str]:
    p = Path(path)
    lines = read_text(p, "--input").splitlines()
    if p.suffix == ".jsonl":
        texts = []
        for n, r in jsonl(path, lines):
            if not isinstance(r, dict) or "text" not in r:
                raise UserError(f"{path}:{n}: not a JSON object with a \"text\" field")
            texts.append(str(r["text"]))
        return texts
    return [line for line in lines if line.strip()]


def detect(model: str | Path, texts: list[str]) -> list[dict[str, Any]]:
    """Each text scored by a discriminator (a run, its discriminator/, a checkpoint, a
    transformers folder): its tokens, their character offsets and the probability each was
    replaced (the Python API's ``electra.detect``; :func:`score`'s records)."""
    if isinstance(texts, str):
        raise UserError("detect takes a list of texts; give [text] for one")
    disc, tok = load_detector(model)
    return score(disc, tok, list(texts))


def main(model: str, text: list[str] | None = None, input: str | None = None,
         html_out: str | None = None, json_lines: bool = False,
         threshold: float = 0.5) -> None:
    """`electra detect`."""
    if not 0.0 <= threshold <= 1.0:
        raise UserError(f"--threshold {threshold} must be between 0 and 1")
    texts = list(text or []) + (_read_texts(input) if input else [])
    if not texts:
        raise UserError("electra detect needs a text (\"...\") or --input FILE")
    if html_out is not None:
        inputs = [("--model", model), ("--input", input)]
        out = check_file_out(html_out, "detect", inputs, "--html", suffix=".html")
    results = detect(model, texts)
    if html_out is not None:
        page = _html(results, model)
        write_file(out, lambda part: part.write_text(page, encoding="utf-8"), "detect",
                   "--html")
    if json_lines:
        for res in results:
            print(json.dumps(res, ensure_ascii=False))
    else:
        color = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
        for res in results:
            flagged = sum(t["p_replaced"] >= threshold for t in res["tokens"])
            print(f"{_terminal(res, threshold, color)}\n  ({flagged} of {len(res['tokens'])} "
                  f"tokens at p(replaced) >= {threshold})")
    if html_out is not None:
        print(f"wrote {html_out}", file=sys.stderr)
