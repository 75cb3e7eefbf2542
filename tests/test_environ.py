"""The environment variables electra reads (``electra.environ``): each through one checked
parser, a bad value one line naming it before any work, the defaults where unset."""

from __future__ import annotations

import pytest
from helpers import cli_error

from electra import environ
from electra.errors import UserError


@pytest.mark.parametrize(("name", "value", "words"), [
    ("ELECTRA_CACHE_GB", "abc", "ELECTRA_CACHE_GB='abc': give a number from"),
    ("ELECTRA_CACHE_GB", "nan", "ELECTRA_CACHE_GB='nan': give a number from"),
    ("ELECTRA_CACHE_GB", "inf", "ELECTRA_CACHE_GB='inf'"),
    ("ELECTRA_CACHE_GB", "-1", "ELECTRA_CACHE_GB='-1'"),
    ("ELECTRA_CACHE_GB", "0", "ELECTRA_CACHE_GB='0'"),
    ("ELECTRA_PROGRESS_SECONDS", "0.1", "give a number from 1 to 86,400"),
    ("WORLD_SIZE", "two", "WORLD_SIZE='two': give a whole number from 1"),
    ("RANK", "1.5", "RANK='1.5': give a whole number from 0"),
    ("LOCAL_WORLD_SIZE", "0", "LOCAL_WORLD_SIZE='0'"),
    ("ELECTRA_MALLOC", "jemalloc", "ELECTRA_MALLOC='jemalloc': give one of unset, 'system'"),
    ("ELECTRA_PROCESS_GROUP", "yes", "give one of '0', '1'"),
])
def test_a_bad_value_is_one_line_naming_it_before_any_work(name, value, words, monkeypatch,
                                                           capsys, tmp_path):
    monkeypatch.setenv(name, value)
    with pytest.raises(UserError, match=r"unset it|give one of"):
        environ.get(name)
    err = cli_error(capsys, "prepare", "--input", tmp_path / "nothing.txt", "--out",
                    tmp_path / "p")
    assert err.startswith("electra: error: ") and words in err, err
    assert not (tmp_path / "p").exists()


def test_unset_or_empty_is_the_default_and_values_parse(monkeypatch):
    for name, s in environ.SETTINGS.items():
        monkeypatch.delenv(name, raising=False)
        assert environ.get(name) == s.default
        monkeypatch.setenv(name, "  ")
        assert environ.get(name) == s.default
    monkeypatch.setenv("ELECTRA_CACHE_GB", "0.5")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("ELECTRA_CACHE", "/scratch/c")
    assert (environ.get("ELECTRA_CACHE_GB"), environ.get("WORLD_SIZE"),
            environ.get("ELECTRA_CACHE")) == (0.5, 4, "/scratch/c")


def test_every_variable_electra_reads_goes_through_the_parser():
    """No module reads an ELECTRA_ or torchrun variable from os.environ itself."""
    import re
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "src" / "electra"
    direct = re.compile(r"os\.(environ\.get|getenv|environ\[)\(?\s*['\"](ELECTRA_\w+|RANK|"
                        r"WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE)")
    found = [f"{p.relative_to(src)}: {m.group(2)}" for p in src.rglob("*.py")
             for m in direct.finditer(p.read_text()) if p.name != "environ.py"]
    assert found == []
    import sys

    sys.path.insert(0, str(src.parents[1] / "docs"))
    try:
        import hooks
    finally:
        sys.path.pop(0)
    assert environ.reference() in hooks.config_reference()  # the configuration page's
