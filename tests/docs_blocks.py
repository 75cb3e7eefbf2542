"""The docs' runnable blocks and the folder they run in (the `test_docs_*.py` files use it).

Every block marked runnable (a fence ```` ```bash title="runnable" ````, or a Python one run
as ``python -``) in the pages of the site's navigation runs, page by page in the
navigation's order, in a working folder laid out as the pages say: ``runs/demo/corpus``
(what `make demo` writes), the shared data at ``../shared/data`` cut down to a few rows, the
SuperGLUE fixtures at ``tests/fixtures/superglue``. Each page's blocks run as one bash
script (``set -e``: a failing command fails the page), so a page can set a variable in one
block and use it in the next, and later pages use what earlier ones made.

The pages are split into :data:`CHAINS`, one test file each, so that pytest-xdist runs them
on several workers at once. The first chain starts from the bare folder, as a reader does.
The others start where a reader who has done the first two tutorials stands: the folder
after `Pretrain on your own corpus`'s blocks and the block of `Continue from a released
checkpoint` that writes ``my_train.csv`` and ``my_dev.csv`` (:data:`START`), made once for
the whole run (conftest's ``docs_started``; the workers that need it meanwhile wait) and
copied for each chain. The pretraining tutorial runs there, once; every other page runs in
one chain.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import ROOT, SHARED_DATA
from warm_cli import warm_bin

RUNNABLE = re.compile(r'^```(bash|python) title="runnable"\n(.*?)^```', re.S | re.M)
ROWS = 121  # a header and 120 rows of each GLUE file

# Each chain in the navigation's order; with START's whole pages they hold every page with
# runnable blocks once (tests/test_docs.py checks). A page uses what its chain's earlier pages
# (and START) made. The first starts from the bare folder, the others from START's.
CHAINS = {
    "first": ["getting-started.md"],
    "start": ["tutorials/continue.md", "tutorials/wsd.md", "how-to/transformers.md",
              "how-to/python.md"],
    "bodies": ["tutorials/modernbert.md", "tutorials/deberta.md", "tutorials/distributed.md",
               "how-to/cluster.md", "how-to/hardware.md", "how-to/tracking.md"],
    "finetuning": ["tutorials/glue.md", "tutorials/custom.md", "tutorials/squad.md",
                   "tutorials/tagging.md", "tutorials/superglue.md", "tutorials/multitask.md",
                   "tutorials/compare.md", "tutorials/detect.md", "tutorials/embeddings.md",
                   "tutorials/rerankers.md", "how-to/embeddings-from-a-corpus.md"],
}
# Where the chains after the first start: every block of the pretraining tutorial, then the
# block of the continuing one that writes the CSV task (page, index of the block or None;
# that block writes the same files again when its page's chain runs it).
START = [("tutorials/pretrain.md", None), ("tutorials/continue.md", 1)]


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


def run_blocks(blocks: list[str], workdir: Path, what: str) -> None:
    """``blocks`` as one ``set -e`` bash script in ``workdir``; a failure names ``what``."""
    script = "set -euo pipefail\n" + "\n".join(blocks)
    if os.environ.get("ELECTRA_DOCS_TRACE"):  # each command with its start time, on stderr
        script = "PS4='+ $(date +%s.%N | cut -c7-14) '\nset -x\n" + script
    first, warm = warm_bin()  # `electra` forked from a warm server (tests/warm_cli.py)
    path = os.pathsep.join([*first, str(Path(sys.executable).parent),
                            os.environ.get("PATH", "")])
    env = {**os.environ, **warm, "PATH": path, "NO_COLOR": "1", "ELECTRA_DOCS_TEST": "1"}
    done = subprocess.run(["bash", "-c", script], cwd=workdir, env=env, capture_output=True,
                          text=True, timeout=600)
    if os.environ.get("ELECTRA_DOCS_TRACE"):
        print("\n".join(line for line in done.stderr.splitlines() if line.startswith("+ ")))
    assert done.returncode == 0, (f"{what}: exit {done.returncode}\n--- script\n{script}\n"
                                  f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n"
                                  f"{done.stderr[-4000:]}")
    # A reader runs the pages from the checkout, where only runs/ is ignored by git: what a
    # page writes goes there (tests/ holds the SuperGLUE fixtures the pages read).
    stray = sorted(p.name for p in workdir.iterdir() if p.name not in ("runs", "tests"))
    assert stray == [], f"{what} wrote {stray} outside runs/"


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


def bare_folder(base: Path) -> Path:
    """``base/work`` (the commands' folder) with ``base/shared/data`` beside it, both small."""
    glue = SHARED_DATA / "glue"
    if not glue.is_dir():
        pytest.skip(f"{glue} is absent (the shared real-data folder is not beside the "
                    f"checkout): the tutorials read GLUE, SQuAD and tagging files from it")
    from electra.experiments.demo import python_docs_corpus

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
    return work


def copy_folder(base: Path, to: Path) -> Path:
    """A copy of ``base/work`` and ``base/shared`` (the relative path between them kept)."""
    for sub in ("work", "shared"):
        shutil.copytree(base / sub, to / sub, symlinks=True)
    return to / "work"


def start_blocks() -> list[str]:
    """The blocks of :data:`START`; the CSV block is checked to be the one writing the CSVs."""
    blocks = []
    for page, index in START:
        found = runnable(page)
        blocks += found if index is None else [found[index]]
    assert "my_train.csv" in blocks[-1] and "my_dev.csv" in blocks[-1], blocks[-1]
    return blocks


class Chain:
    """A chain's pages run in order in one folder, each once, as far as a test asks: the
    test of any page, whichever order the tests run in, runs the pages before it first and
    reports that page's own outcome."""

    def __init__(self, pages: list[str], folder: Path) -> None:
        self.pages, self.folder = pages, folder
        self.outcome: dict[str, BaseException | None] = {}

    def through(self, page: str) -> None:
        for p in self.pages[:self.pages.index(page) + 1]:
            if p not in self.outcome:
                try:
                    run_blocks(runnable(p), self.folder, p)  # where earlier pages wrote
                    self.outcome[p] = None
                except KeyboardInterrupt:
                    raise
                except BaseException as err:  # (pytest.fail's is no Exception)
                    self.outcome[p] = err
        if self.outcome[page] is not None:
            raise self.outcome[page]


def chain(name: str, start: str) -> tuple[Any, Any]:
    """A chain's test file is these two names: its ``workdir`` fixture (a :class:`Chain` in a
    copy of the folder of the session fixture ``start``, conftest's ``docs_bare`` or
    ``docs_started``) and the test of each of its pages, which runs the chain through it."""
    @pytest.fixture(scope="module")
    def workdir(request, tmp_path_factory) -> Chain:
        return Chain(CHAINS[name], copy_folder(request.getfixturevalue(start),
                                               tmp_path_factory.mktemp(f"docs-{name}")))

    @pytest.mark.slow
    @pytest.mark.parametrize("page", CHAINS[name])
    def test_every_runnable_block_runs(workdir, page):
        workdir.through(page)

    return workdir, test_every_runnable_block_runs
