"""Model cards: a ``README.md`` in every model folder electra writes, as the hub reads them.

    FOLDER/README.md    YAML metadata between two ``---`` lines (``library_name``,
                        ``pipeline_tag``, ``base_model``, ``datasets``, ``license``,
                        ``metrics``, ``tags``, and ``model-index`` with each measured result),
                        then what the model is, how it was trained and how to load it

The facts a card shows are kept in the folder's ``config.json`` (``"card"``), so a fine-tune
inherits its model's lineage and ``electra export`` writes the same card for transformers.
``huggingface_hub.ModelCard.load`` parses it (tests/io/test_cards.py). Pushing to a hub is
``hf upload``'s job (docs/how-to/export.md); electra has no push of its own.

A result's ``value`` is what results.json says (a fraction, not a percentage).
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

from electra.config import ModelConfig
from electra.io.files import maybe_json

PIPELINES = {"generator": "fill-mask"}
"""The hub's pipeline of a pretraining part (a fine-tuned head names its own)."""


def command_line() -> str:
    """The command this process runs, as a user would type it (``electra ...``); empty where
    electra was called from Python (no command line of its own)."""
    argv = list(sys.argv)
    first = Path(argv[0]) if argv else Path()
    if first.name != "electra" and (first.name, first.parent.name) != ("__main__.py",
                                                                       "electra"):
        return ""
    return shlex.join(["electra", *argv[1:]])


def hub_id(path: str | Path | None) -> str | None:
    """The hub's id of a downloaded model from its cache path (``.../models--ORG--NAME/
    snapshots/REV``), else None: a local folder has no id to name."""
    found = re.search(r"models--([^/\\]+?)--([^/\\]+)", str(path or ""))
    return f"{found[1]}/{found[2]}" if found else None


def hub_revision(path: str | Path | None) -> str | None:
    """The commit of a downloaded model's snapshot (``.../models--ORG--NAME/snapshots/REV``),
    else None."""
    found = re.search(r"models--[^/\\]+--[^/\\]+[/\\]snapshots[/\\]([^/\\]+)", str(path or ""))
    return found[1] if found else None


def lineage(source_meta: dict[str, Any] | None) -> dict[str, Any]:
    """What a model made from another keeps of its card: its base model (and the revision
    it came at) and license."""
    card = (source_meta or {}).get("card") or {}
    return {k: card[k] for k in ("base_model", "base_revision", "license") if card.get(k)}


def result(task: str, dataset: str, metric: str, value: float, *, task_type: str,
           split: str = "dev", hub: tuple[str, str] | None = None,
           seed: int | None = None) -> dict[str, Any]:
    """One measured result of a card."""
    out = {"task": task, "task_type": task_type, "dataset": dataset, "split": split,
           "metric": metric, "value": float(value)}
    if hub:
        out["dataset_type"], out["dataset_config"] = hub
    if seed is not None:
        out["seed"] = seed
    return out


def render(card: dict[str, Any], name: str, library: str, pipeline: str = "",
           load: str = "") -> str:
    """The README.md text of ``card`` for a model called ``name``, loaded by ``library``."""
    results = card.get("results") or []
    meta: dict[str, Any] = {"library_name": library}
    for key, value in (("pipeline_tag", pipeline), ("base_model", card.get("base_model")),
                       ("license", card.get("license"))):
        if value:
            meta[key] = value
    datasets = sorted({*card.get("datasets", []), *(r["dataset_type"] for r in results
                                                     if "dataset_type" in r)})
    if datasets:
        meta["datasets"] = datasets
    if results:
        meta["metrics"] = sorted({r["metric"] for r in results})
    meta["tags"] = ["electra", *card.get("tags", [])]
    lines = ["---", *_yaml(meta), *_model_index(name, results), "---", "",
             f"# {card.get('title') or name}", "", card.get("what", ""), ""]
    if card.get("base_model"):
        rev = card.get("base_revision")
        lines += [f"Its weights started from [{card['base_model']}](https://huggingface.co/"
                  f"{card['base_model']})" + (f" at revision `{rev}`" if rev else "") + ".", ""]
    rows = card.get("trained") or []
    if rows:
        lines += ["## How it was trained", "", "| | |", "|---|---|",
                  *(f"| {k} | {v} |" for k, v in rows), ""]
        if card.get("command"):
            lines += ["```bash", card["command"], "```", ""]
    if card.get("warnings"):
        lines += ["## Warnings", "", "The run that made this model flagged it; its scores "
                  "below say little of what it learned:", "",
                  *(f"- {w}" for w in card["warnings"]), ""]
    if results:
        lines += ["## Results", "", "| task | data | metric | value | seed |",
                  "|---|---|---|---|---|",
                  *(f"| {r['task']} | {r['dataset']} ({r['split']}) | {r['metric']} | "
                    f"{r['value']:.4f} | {r.get('seed', '')} |" for r in results), ""]
    if load:
        lines += ["## How to load it", "", "```python", load, "```", ""]
    return "\n".join(lines)


def _yaml(meta: dict[str, Any]) -> list[str]:
    """Flat YAML: a scalar per key, or a list of scalars (JSON's quoting is YAML's)."""
    out = []
    for key, value in meta.items():
        if isinstance(value, list):
            out += [f"{key}:", *(f"- {json.dumps(v)}" for v in value)]
        else:
            out.append(f"{key}: {json.dumps(value)}")
    return out


def _model_index(name: str, results: list[dict[str, Any]]) -> list[str]:
    """The hub's ``model-index``: one entry per result (task, dataset, metric)."""
    if not results:
        return []
    out = ["model-index:", f"- name: {json.dumps(name)}", "  results:"]
    for r in results:
        dataset = {"name": r["dataset"], "type": r.get("dataset_type", r["dataset"]),
                   "split": r["split"]}
        if "dataset_config" in r:
            dataset["config"] = r["dataset_config"]
        label = r["metric"] + (f" (seed {r['seed']})" if "seed" in r else "")
        out += ["  - task:", f"      type: {json.dumps(r['task_type'])}",
                f"      name: {json.dumps(r['task'])}", "    dataset:",
                *(f"      {k}: {json.dumps(v)}" for k, v in dataset.items()),
                "    metrics:", f"    - type: {json.dumps(r['metric'])}",
                f"      value: {json.dumps(r['value'])}", f"      name: {json.dumps(label)}"]
    return out


def write(folder: Path, card: dict[str, Any], name: str, library: str = "electra",
          pipeline: str = "", load: str = "") -> None:
    """``folder/README.md`` for ``card``."""
    (folder / "README.md").write_text(render(card, name, library, pipeline, load),
                                      encoding="utf-8")


def source_lineage(path: str | Path | None) -> dict[str, Any]:
    """The base model and license a model made from ``path`` inherits: a folder downloaded
    from the hub (a hub cache path) is the base model itself, at its revision; else an
    electra folder's card (a run, one of its parts, a fine-tuned model) names it. The
    license: the card's, or a transformers folder's README's ``license:``."""
    if not path:
        return {}
    folder = Path(path)
    here = {"base_model": hub_id(folder.resolve()), "base_revision": hub_revision(
        folder.resolve())}
    for meta_file in (folder / "discriminator" / "config.json", folder / "config.json"):
        meta = maybe_json(meta_file)
        if meta is None:  # missing, or not JSON: the next
            continue
        if isinstance(meta, dict) and "model_type" in meta:  # transformers'
            found = {**here, "license": _license(folder)}
        else:
            found = lineage(meta if isinstance(meta, dict) else {})
            if here["base_model"]:  # an electra folder downloaded from the hub
                found = {**found, **here}
        return {k: v for k, v in found.items() if v}
    return {}


def _license(folder: Path) -> str | None:
    """The ``license:`` of a README's YAML front matter (a scalar), if there is one; only a
    regular file is read (a named pipe would block the command)."""
    readme = folder / "README.md"
    try:
        text = readme.read_text(encoding="utf-8") if readme.is_file() else ""
    except (OSError, UnicodeDecodeError):
        return None
    front = text.split("---")[1] if text.startswith("---") and text.count("---") >= 2 else ""
    found = re.search(r"^license:\s*[\"']?([\w.+-]+)", front, flags=re.M)
    return found[1] if found else None


def with_lineage(card: dict[str, Any], inherited: dict[str, Any],
                 license: str = "") -> dict[str, Any]:
    """``card`` with the base model and license it inherits (``license`` set wins)."""
    out = {**card, **inherited}
    if license:
        out["license"] = license
    return out


def size_line(cfg: ModelConfig, n_params: int) -> str:
    """A body's shape in a line: ``bert body, 12 layers x 256 (4 heads, FFN 1024), 13.5M
    parameters``."""
    return (f"{cfg.body} body, {cfg.num_layers} layers x {cfg.hidden_size} ({cfg.num_heads} "
            f"heads, FFN {cfg.intermediate_size}), embeddings {cfg.embedding_size}, "
            f"{n_params / 1e6:.1f}M parameters, vocabulary {cfg.vocab_size:,}")
