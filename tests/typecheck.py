"""mypy over ``src/electra`` against the committed baseline, ``tests/typecheck-baseline.txt``:
the errors the code had when the type checker came in (issue 70), each as ``path: [code]
message`` (no line numbers, so moving code does not change them), with how many times.

    python tests/typecheck.py           # what differs from the baseline (exit 1 if anything)
    python tests/typecheck.py --write   # the baseline written anew (after fixing errors)

The baseline may only shrink: tests/test_structure.py fails on an error it does not hold, and
on one it holds that is gone (remove it with --write, so it cannot come back unnoticed).
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "tests" / "typecheck-baseline.txt"
LINE = re.compile(r"^(?P<path>[^:]+):\d+: error: (?P<message>.*?)\s+\[(?P<code>[\w-]+)\]$")


def current() -> collections.Counter[str]:
    """mypy's errors now (its settings: pyproject.toml's [tool.mypy])."""
    res = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary",
                          "--no-pretty", "--show-error-codes"], cwd=ROOT, capture_output=True,
                         text=True)
    if res.returncode not in (0, 1):  # 1: errors found; 2: mypy itself failed
        raise RuntimeError(f"mypy failed: {res.stdout[-2000:]}{res.stderr[-2000:]}")
    found: collections.Counter[str] = collections.Counter()
    for line in res.stdout.splitlines():
        m = LINE.match(line.strip())
        if m:
            found[f"{m['path']}: [{m['code']}] {m['message']}"] += 1
    return found


def baseline() -> collections.Counter[str]:
    out: collections.Counter[str] = collections.Counter()
    for line in BASELINE.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            count, _, key = line.partition(" ")
            out[key] = int(count)
    return out


def differences() -> tuple[list[str], list[str]]:
    """(errors the baseline does not hold, baseline errors that are gone)."""
    now, then = current(), baseline()
    new = sorted((now - then).elements())
    gone = sorted((then - now).elements())
    return new, gone


def write() -> None:
    now = current()
    BASELINE.write_text("# mypy's errors in src/electra (tests/typecheck.py): count, then "
                        "path: [code] message\n" + "".join(
                            f"{n} {key}\n" for key, n in sorted(now.items())),
                        encoding="utf-8")
    print(f"wrote {BASELINE}: {sum(now.values())} errors")


if __name__ == "__main__":
    if "--write" in sys.argv:
        write()
    else:
        new, gone = differences()
        print("\n".join([*(f"new: {e}" for e in new), *(f"gone: {e}" for e in gone)]) or
              "as the baseline")
        sys.exit(1 if new or gone else 0)
