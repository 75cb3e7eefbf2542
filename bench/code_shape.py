"""The shape of the source, for the before/after table of a refactor.

    python bench/code_shape.py [SRC]      # default: this checkout's src/electra

Prints: modules and lines; the ten longest functions (lines from ``def`` to the last line);
and the dispatch by branching that the seams replace: comparisons of a task kind
(``.kind``/``.tagging``/``"head"``/``regression`` tested in an ``if`` or a conditional
expression), of an objective kind (``kind`` against an objective's name), and of a device
type (``.device.type`` / ``.type == "cuda"``), counted per file.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections import Counter
from pathlib import Path

OBJECTIVES = ("electra", "mlm", "random", "electra15", "replace_mlm", "all_tokens_mlm")
TASK = re.compile(r"(data|meta|task)\.kind\b|\.tagging\b|[\"']head[\"']|\bhead\s*(==|in)|"
                  r"\bregression\b|\"(qa|tagging|sequence)\"")
OBJ = re.compile(r"(cfg|objective)\.kind\b|\bkind\b.*(" + "|".join(f'"{k}"' for k in OBJECTIVES)
                 + r")|\b(WITH_GENERATOR|MAIN_MLM|RTD)\b|\bstage\s*[!=]=")
DEVICE = re.compile(r"device\.type|\.type\s*[!=]=\s*\"(cuda|cpu)\"")


def tests(tree: ast.AST):
    """The source text of every condition: if/elif, while, conditional expressions, asserts,
    comprehension filters."""
    for node in ast.walk(tree):
        if isinstance(node, ast.If | ast.IfExp | ast.While):
            yield node.test
        elif isinstance(node, ast.comprehension):
            yield from node.ifs


def shape(src: Path) -> dict:
    files = sorted(src.rglob("*.py"))
    lines, longest = 0, []
    branches: dict[str, Counter] = {"task": Counter(), "objective": Counter(), "device": Counter()}
    for f in files:
        text = f.read_text()
        lines += len(text.splitlines())
        tree = ast.parse(text)
        rel = str(f.relative_to(src.parent))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                longest.append((node.end_lineno - node.lineno + 1, f"{rel}:{node.name}"))
        for test in tests(tree):
            code = ast.unparse(test)
            for name, pattern in (("task", TASK), ("objective", OBJ), ("device", DEVICE)):
                if pattern.search(code):
                    branches[name][rel] += 1
    longest.sort(reverse=True)
    return {"files": len(files), "lines": lines, "longest": longest[:10],
            "branches": branches}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", nargs="?", type=Path,
                    default=Path(__file__).resolve().parents[1] / "src" / "electra")
    s = shape(ap.parse_args().src)
    print(f"modules: {s['files']}, lines: {s['lines']:,}")
    print("longest functions: " + ", ".join(f"{n} {w}" for n, w in s["longest"]))
    for name, counts in s["branches"].items():
        where = ", ".join(f"{f} {n}" for f, n in counts.most_common())
        print(f"{name}-kind branches: {sum(counts.values())} ({where})")


if __name__ == "__main__":
    main()
    sys.exit(0)
