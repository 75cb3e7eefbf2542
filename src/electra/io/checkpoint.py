"""Checkpoints that describe themselves, are written atomically and verified when read.

A checkpoint is a folder ``RUN/checkpoints/step-0000100/``::

    model.safetensors   weights (shared tensors stored once)
    state.pt            optimizer, scheduler, RNG and data-position state
                        (plain tensors and containers: loads with weights_only=True)
    config.json         the resolved run config, step, tokens, tokenizer checksum
    optimizer/          under FSDP: the optimizer's state, each rank's shard
                        (torch.distributed.checkpoint), instead of state.pt holding it
    manifest.json       written last: size and sha256 of each file above

It is written into ``step-0000100.partial/`` and renamed when complete, so a crash or a full
disk never leaves a half checkpoint that looks whole, and older checkpoints are pruned only
after the new one is complete. Loading checks the manifest first and refuses a truncated or
corrupted checkpoint before anything is loaded.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save_model
from torch import nn

from electra.errors import UserError
from electra.io.files import pickle_refusal, read_json, sha256_file, staged

FILES = ("model.safetensors", "state.pt", "config.json")


def _fsync_write(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def step_dir(root: Path, step: int) -> Path:
    return root / f"step-{step:07d}"


def save_checkpoint(root: Path, step: int, model: nn.Module, state: dict[str, Any],
                    config: dict[str, Any], keep: int,
                    move_in: dict[str, Path] | None = None) -> Path:
    """Write checkpoint ``step`` under ``root`` atomically, then keep only the last ``keep``.
    ``move_in``: folders already written (FSDP's optimizer shards) moved in under a name.

    Raises:
        UserError: when writing fails (a full disk, say); the previous checkpoints stay.
    """
    final = step_dir(root, step)
    prev = latest_checkpoint(root)
    kept = f"; {prev.name} is intact" if prev else ""
    with staged(final, f"free disk space and rerun with --resume{kept}") as tmp:
        save_model(model, str(tmp / "model.safetensors"))
        torch.save(state, tmp / "state.pt")
        _fsync_write(tmp / "config.json", json.dumps(config, indent=2).encode())
        for name, folder in (move_in or {}).items():
            os.replace(folder, tmp / name)
        names = [*FILES, *sorted(str(f.relative_to(tmp)) for name in (move_in or {})
                                 for f in (tmp / name).rglob("*") if f.is_file())]
        manifest = {name: {"bytes": (tmp / name).stat().st_size,
                           "sha256": sha256_file(tmp / name)} for name in names}
        _fsync_write(tmp / "manifest.json", json.dumps(manifest, indent=2).encode())
    for old in list_checkpoints(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(root: Path) -> list[Path]:
    """Complete checkpoint folders (a manifest present), oldest first."""
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith("step-")
             and not p.name.endswith(".partial") and (p / "manifest.json").is_file()]
    return sorted(found, key=lambda p: p.name)


def latest_checkpoint(root: Path) -> Path | None:
    found = list_checkpoints(root)
    return found[-1] if found else None


def verify_checkpoint(path: Path) -> dict[str, Any]:
    """Check every file against the manifest; return the checkpoint's config.json.

    Raises:
        UserError: naming the file that is missing, truncated or corrupted.
    """
    try:
        manifest = json.loads((path / "manifest.json").read_text())
        if not isinstance(manifest, dict):
            raise ValueError("not an object")
    except (OSError, ValueError, RecursionError):
        raise UserError(f"checkpoint {path} has no readable manifest.json; it is incomplete "
                        f"or corrupted: delete it to resume from an earlier one") from None
    for name in dict.fromkeys([*FILES, *manifest]):  # FSDP's optimizer shards too
        f = path / name
        entry = manifest.get(name)
        problem = None
        if entry is None or not f.is_file():
            problem = "is missing"
        elif f.stat().st_size != entry["bytes"]:
            problem = f"is truncated ({f.stat().st_size} of {entry['bytes']} bytes)"
        elif sha256_file(f) != entry["sha256"]:
            problem = "is corrupted (checksum mismatch)"
        if problem:
            raise UserError(f"checkpoint {path}: {name} {problem}; nothing was loaded. Delete "
                            f"{path} to resume from an earlier checkpoint")
    return read_json(path / "config.json", "a checkpoint's config")


def load_checkpoint(path: Path, model: nn.Module) -> tuple[dict[str, Any], dict[str, Any]]:
    """Verify, then load weights into ``model``; returns (state, config)."""
    import pickle

    from safetensors import SafetensorError


    config = verify_checkpoint(path)
    try:  # weights_only: plain tensors and containers; anything that would run code is refused
        state = torch.load(path / "state.pt", map_location="cpu", weights_only=True)
        missing, unexpected = load_model(model, str(path / "model.safetensors"), strict=False)
    except pickle.UnpicklingError as err:
        raise UserError(f"{path}/state.pt: refused, it holds more than tensors "
                        f"({pickle_refusal(err)}); nothing was loaded. Delete {path} to "
                        f"resume from an earlier checkpoint") from None
    except (RuntimeError, EOFError, OSError, ValueError, SafetensorError) as err:
        raise UserError(f"checkpoint {path} cannot be read although its checksums match "
                        f"({str(err).strip().splitlines()[0][:120]}); nothing was loaded. "
                        f"Delete {path} to resume from an earlier checkpoint") from None
    if missing or unexpected:
        raise UserError(f"checkpoint {path} does not fit this model (missing "
                        f"{sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]})")
    return state, config
