"""`electra demo`, the README's first command: it runs from nothing, a rerun replaces its own
folder with the same data (the tokenizer and shards are byte-identical), and it never writes
into a folder it did not make."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from electra.cli import main
from electra.io.outputs import what_is


def digests(folder: Path) -> dict[str, str]:
    """Every file's checksum (meta.json, which records how long packing took, aside)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "meta.json"}


@pytest.mark.slow
def test_the_demo_runs_reruns_identically_and_keeps_to_its_own_folder(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--steps", "2", "--quiet"]) == 0
    first = {k: digests(out / k) for k in ("tokenizer", "data")}
    assert what_is(out) == ("demo", "demo") and (out / "run" / "discriminator").is_dir()
    assert main(["demo", "--out", str(out), "--steps", "2", "--quiet"]) == 0
    assert {k: digests(out / k) for k in ("tokenizer", "data")} == first
    assert "held-out discriminator accuracy" in capsys.readouterr().out
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    assert main(["demo", "--out", str(mine), "--steps", "2", "--quiet"]) == 2
    assert "holds files electra did not write" in capsys.readouterr().err
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
