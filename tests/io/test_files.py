"""Staged folders: the old output stays until the new one is complete."""

from __future__ import annotations

from electra.io.files import publish, staging_dir


def test_old_output_survives_until_publish_then_is_replaced(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.txt").write_text("old")
    tmp = staging_dir(out)
    (tmp / "a.txt").write_text("new")
    assert (out / "a.txt").read_text() == "old"  # a crash here loses nothing
    assert staging_dir(out) == tmp and not any(tmp.iterdir())  # a retry starts clean
    (tmp / "a.txt").write_text("new")
    publish(tmp, out)
    assert (out / "a.txt").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no .partial, no .old
