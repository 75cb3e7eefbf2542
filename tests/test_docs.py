"""The documentation cannot drift from the CLI.

- Every block marked runnable (a fence ```` ```bash title="runnable" ````, or a Python one
  run as ``python -``) in the pages of the site's navigation runs, page by page in the
  navigation's order, in one working folder laid out as the pages say: ``runs/demo/corpus``
  (what `make demo` writes), the shared data at ``../shared/data`` cut down to a few rows,
  the SuperGLUE fixtures at ``tests/fixtures/superglue`` (the CSV task, ``my_train.csv``, is
  made by a page's block, as a reader makes it). Each page's blocks run as one bash script
  (``set -e``: a failing command fails the page), so a page can set a variable in one block
  and use it in the next, and later pages use what earlier ones made.
- The README's quickstart is the getting-started page's, line for line, and its links
  point at files that exist.
- The generated configuration reference lists every field of every config.

`mkdocs build --strict` itself (broken links, missing pages, API symbols that do not
resolve) runs in `.ci/run`, beside the tests.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import ROOT, SHARED_DATA

RUNNABLE = re.compile(r'^```(bash|python) title="runnable"\n(.*?)^```', re.S | re.M)
ROWS = 121  # a header and 120 rows of each GLUE file


def nav_pages() -> list[str]:
    """The site's pages, in the navigation's order."""
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    out: list[str] = []

    def walk(entry) -> None:
        if isinstance(entry, str):
            out.append(entry)
        elif isinstance(entry, list):
            for e in entry:
                walk(e)
        elif isinstance(entry, dict):
            for v in entry.values():
                walk(v)

    walk(nav)
    return out


def runnable(page: str) -> list[str]:
    """The page's runnable blocks as bash (a Python block runs as ``python - <<'EOF'``)."""
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    return [code if lang == "bash" else f"python - <<'EOF'\n{code}EOF\n"
            for lang, code in RUNNABLE.findall(text)]


PAGES = [p for p in nav_pages() if runnable(p)]


def _head(src: Path, dst: Path, rows: int = ROWS) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    with src.open(encoding="utf-8-sig" if src.suffix == ".tsv" else "utf-8") as f:
        lines = [line for _, line in zip(range(rows), f, strict=False)]
    dst.write_text("".join(lines), encoding="utf-8")


def _sentences(path: Path, n: int, lines: list[str]) -> None:
    """Whole CoNLL(-U) sentences from the start of ``lines`` until ``n`` are written."""
    out, count = [], 0
    for line in lines:
        out.append(line)
        if not line.strip():
            count += 1
            if count >= n:
                break
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(out), encoding="utf-8")


def _squad(src: Path, dst: Path) -> None:
    import json

    data = json.loads(src.read_text(encoding="utf-8"))
    articles = []
    for article in data["data"][:4]:
        paras = [dict(p, qas=p["qas"][:3]) for p in article["paragraphs"][:3]]
        articles.append(dict(article, paragraphs=paras))
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(json.dumps({"version": data.get("version", "1.1"), "data": articles}))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """``work/`` (the commands' folder) with ``../shared/data`` beside it, both small."""
    glue = SHARED_DATA / "glue"
    if not glue.is_dir():
        pytest.skip(f"{glue} is absent (the shared real-data folder is not beside the "
                    f"checkout): the tutorials read GLUE, SQuAD and tagging files from it")
    from electra.experiments.demo import python_docs_corpus

    base = tmp_path_factory.mktemp("docs")
    work, shared = base / "work", base / "shared" / "data"
    for task in ("SST-2", "RTE", "MRPC", "STS-B", "CoLA"):
        for split in ("train", "dev"):
            _head(glue / task / f"{split}.tsv", shared / "glue" / task / f"{split}.tsv")
    _squad(SHARED_DATA / "squad" / "dev-v1.1.json", shared / "squad" / "dev-v1.1.json")
    # enough training sentences to hold every tag of the dev and test sentences kept
    for name, n in (("wnut17train.conll", 120), ("emerging.dev.conll", 8),
                    ("emerging.test.annotated", 8)):
        src = SHARED_DATA / "wnut17" / name
        _sentences(shared / "wnut17" / name, n, src.read_text(encoding="utf-8")
                   .splitlines(keepends=True))
    for name, n in (("en_ewt-ud-train.conllu", 40), ("en_ewt-ud-dev.conllu", 8)):
        src = SHARED_DATA / "ud-english-ewt" / name
        _sentences(shared / "ud-english-ewt" / name, n,
                   src.read_text(encoding="utf-8").splitlines(keepends=True))
    shutil.copytree(ROOT / "tests" / "fixtures" / "superglue",
                    work / "tests" / "fixtures" / "superglue")
    docs = python_docs_corpus(max_bytes=400_000)
    corpus = work / "runs" / "demo" / "corpus"
    corpus.mkdir(parents=True)
    text = ["\n".join(d) for d in docs]
    (corpus / "train.txt").write_text("\n\n".join(t for i, t in enumerate(text) if i % 20)
                                      + "\n", encoding="utf-8")
    (corpus / "heldout.txt").write_text("\n\n".join(text[::20]) + "\n", encoding="utf-8")
    return work  # my_train.csv and my_dev.csv: a runnable block makes them (continue.md)


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_every_runnable_block_runs(workdir, page):
    """The page's runnable blocks, as one script, in the folder earlier pages wrote to."""
    script = "set -euo pipefail\n" + "\n".join(runnable(page))
    if os.environ.get("ELECTRA_DOCS_TRACE"):  # each command with its start time, on stderr
        script = "PS4='+ $(date +%s.%N | cut -c7-14) '\nset -x\n" + script
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
           f"{os.environ.get('PATH', '')}", "NO_COLOR": "1", "ELECTRA_DOCS_TEST": "1"}
    done = subprocess.run(["bash", "-c", script], cwd=workdir, env=env, capture_output=True,
                          text=True, timeout=600)
    if os.environ.get("ELECTRA_DOCS_TRACE"):
        print("\n".join(line for line in done.stderr.splitlines() if line.startswith("+ ")))
    assert done.returncode == 0, (f"{page}: exit {done.returncode}\n--- script\n{script}\n"
                                  f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n"
                                  f"{done.stderr[-4000:]}")


def test_the_pages_have_runnable_blocks_where_a_tutorial_promises_them():
    """Every tutorial and the getting-started page has at least one runnable block."""
    pages = [p for p in nav_pages() if p.startswith("tutorials/") and not
             p.endswith("index.md")] + ["getting-started.md"]
    assert [p for p in pages if not runnable(p)] == []


def test_readme_quickstart_is_the_getting_started_one():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = runnable("getting-started.md")[0]
    assert quick in readme, "README.md's quickstart differs from docs/getting-started.md's"
    assert len(readme.splitlines()) <= 200
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    assert [link for link in links if not link.startswith("http")
            and not (ROOT / link).exists()] == []


def test_configuration_reference_lists_every_setting():
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        import hooks
    finally:
        sys.path.pop(0)
    from dataclasses import fields

    from electra.config import FinetuneConfig, ModelConfig, TrainConfig
    from electra.objectives.config import ObjectiveConfig

    text = hooks.config_reference()
    for cls in (ModelConfig, ObjectiveConfig, TrainConfig, FinetuneConfig):
        for f in fields(cls):
            key = f"{cls.SECTION}.{f.name}" if cls.SECTION else f.name
            assert f"| `{key}` |" in text, key
