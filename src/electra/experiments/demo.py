"""`electra demo`: the whole pipeline in a few minutes, on text that ships with Python.

The corpus is Python's own English documentation: the ``pydoc_data`` help topics and the
docstrings of the standard library (read with ``ast``, nothing imported). The demo trains a
WordPiece tokenizer on it, packs it into shards, pretrains the ``tiny`` preset, then shows
held-out discriminator accuracy against the all-original baseline and, for a corrupted
sentence, which tokens the discriminator flags as replaced.
"""

from __future__ import annotations

import ast
import functools
import re
import sysconfig
import time
from pathlib import Path

import torch

from electra import invocation
from electra.commands import pretrain as pretrain_command  # a module: tests stop its run
from electra.config import TrainConfig
from electra.data.prepare import PrepareOptions, prepare
from electra.data.tokenizer import SpecialTokens, load_tokenizer, train_tokenizer
from electra.errors import UserError
from electra.experiments.plot import plot_run
from electra.io.checkpoint import latest_checkpoint
from electra.io.files import write_json
from electra.io.outputs import claim_out
from electra.model.bodies import model_preset
from electra.objectives.config import ObjectiveConfig
from electra.objectives.masking import mask_inputs
from electra.objectives.sampling import corrupt, sample
from electra.run_config import RunConfig, apply_overrides
from electra.runtime import start
from electra.saved import folders

SKIP_DIRS = {"test", "tests", "idlelib", "lib2to3", "tkinter", "turtledemo", "ensurepip",
             "site-packages", "dist-packages", "__pycache__", "pydoc_data", "encodings"}
DEMO_STEPS = 600
# Replacements are sampled at temperature 3 (the paper: 1). At 1, a run of a few CPU minutes
# stays on the all-original plateau: the generator's samples quickly become unigram-like and
# can only be told apart by context, which RTD learns slowly at this size (transformers'
# ELECTRA behaves the same; see docs/explanation/short-runs.md). Flatter samples are
# detectable from the start.
DEMO_TEMPERATURE = 3.0


def _paragraphs(text: str) -> list[str]:
    """Re-flow wrapped text: one line per paragraph, code-like lines dropped."""
    out = []
    for para in re.split(r"\n\s*\n", text):
        lines = [ln.strip() for ln in para.splitlines()]
        lines = [ln for ln in lines if ln and not ln.startswith((">>>", "...", "$", "+--", "|"))]
        joined = " ".join(lines)
        if len(joined.split()) >= 4:
            out.append(joined)
    return out


def python_docs_corpus(max_bytes: int = 4_000_000) -> list[list[str]]:
    """Documents (lists of paragraph lines) from pydoc topics and stdlib docstrings."""
    import pydoc_data.topics

    docs = [_paragraphs(t) for _, t in sorted(pydoc_data.topics.topics.items())]
    size = sum(len(p) for d in docs for p in d)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(stdlib.rglob("*.py")):
        if size >= max_bytes:
            break
        if SKIP_DIRS & set(path.relative_to(stdlib).parts[:-1]):
            continue
        for paras in _docstrings(path):
            docs.append(list(paras))
            size += sum(len(p) for p in paras)
    return [d for d in docs if d]


@functools.cache
def _docstrings(path: Path) -> tuple[tuple[str, ...], ...]:
    """The module's, classes' and functions' docstrings of 20 words or more in one stdlib
    file, as paragraphs. Parsing the stdlib is most of the corpus's time (12.6 s of the demo's
    first 17 on an AVX2 EPYC), so a process parses each file once (the tests build the corpus
    many times)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, OSError):
        return ()
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(
        n, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef))]
    out = []
    for node in nodes:
        doc = ast.get_docstring(node)
        paras = _paragraphs(doc) if doc else []
        if sum(len(p.split()) for p in paras) >= 20:
            out.append(tuple(paras))
    return tuple(out)


def write_corpus(folder: Path) -> tuple[Path, Path]:
    """train.txt and heldout.txt (every 20th document) in BERT's input format."""
    docs = python_docs_corpus()
    folder.mkdir(parents=True, exist_ok=True)
    train, held = folder / "train.txt", folder / "heldout.txt"
    for path, part in ((train, [d for i, d in enumerate(docs) if i % 20]),
                       (held, docs[::20])):
        path.write_text("\n\n".join("\n".join(d) for d in part) + "\n", encoding="utf-8")
    return train, held


def demo_config(steps: int, sets: list[str] | None = None) -> RunConfig:
    """The demo's run: the tiny preset at temperature 3, then ``--set`` overrides."""
    model = model_preset("tiny")
    train = TrainConfig(lr=1e-3, batch_size=32, warmup_steps=min(100, steps // 10),
                        max_steps=steps, log_every=10, eval_every=max(1, steps // 4),
                        eval_batches=10, save_every=max(1, steps // 2))
    cfg = RunConfig(model=model, objective=ObjectiveConfig(temperature=DEMO_TEMPERATURE),
                    train=train)
    return RunConfig.from_dict(apply_overrides(cfg.to_dict(), sets)) if sets else cfg


def interrupted_step(out: Path) -> int | None:
    """The step of the last checkpoint of an interrupted demo in ``out`` (its pretraining
    saved, no summary.json yet); None when there is none."""
    if (out / "summary.json").is_file():
        return None
    last = latest_checkpoint(out / "run" / "checkpoints")
    return int(last.name.split("-")[-1]) if last is not None else None


def run_demo(out: str | Path = "runs/demo", steps: int | None = None, overwrite: bool = False,
             progress: bool = True, resume: bool = False, sets: list[str] | None = None) -> dict:
    """Build the corpus, tokenizer and shards, pretrain, then report and show an example.
    ``out`` is a new folder or one the demo wrote. A finished demo is kept: ``resume`` says
    it is finished and a plain rerun is refused, as every command refuses an existing
    ``--out``; ``overwrite`` trains it again. An interrupted demo (its pretraining
    checkpointed) is continued with ``resume`` (corpus, tokenizer and shards reused),
    started over with ``overwrite``, else refused."""
    cfg = demo_config(steps or DEMO_STEPS, sets)
    with claim_out(out, "demo", "demo", overwrite=True) as claim:
        step = check_demo_out(Path(out), resume, overwrite)
        claim.mark(Path(out))
        return _demo(Path(out), cfg, resume and step is not None, progress)


def check_demo_out(out: Path, resume: bool, overwrite: bool) -> int | None:
    """Refuse to replace a finished demo without ``overwrite`` (and ``resume`` of one: there
    is nothing to continue), or to start an interrupted one over; each refusal names the
    command that does what the user wants, as they started the demo. Returns the step of the
    interrupted demo's last checkpoint (None: there is none)."""
    step = interrupted_step(out)
    if overwrite:
        return step
    fallback = ["demo", "--out", str(out)]
    again = invocation.command(add=["--overwrite"], drop=["--resume"], fallback=fallback)
    if (out / "summary.json").is_file():
        model = out / "run" / "discriminator"
        if resume:
            raise UserError(f"--out {out} holds a finished demo (its model: {model}); "
                            f"nothing to continue. Run {again} to train it again, or give "
                            f"another --out")
        raise UserError(f"--out {out} holds a finished demo (its model: {model}); run "
                        f"{again} to replace it, or give another --out")
    if step is not None and not resume:
        cont = invocation.command(add=["--resume"], fallback=fallback)
        raise UserError(f"--out {out} holds an interrupted demo (its pretraining saved step "
                        f"{step}); run {cont} to continue it, or {again} to start it over")
    return step


def _reusable(out: Path) -> bool:
    """Corpus, tokenizer and shards of an earlier demo, complete (what --resume reuses)."""
    return all(p.is_file() for p in (out / "corpus/train.txt", out / "corpus/heldout.txt",
                                     out / "tokenizer/tokenizer.json", out / "data/meta.json"))


def _demo(out: Path, cfg: RunConfig, resume: bool, progress: bool) -> dict:
    t0 = time.perf_counter()
    steps = cfg.train.max_steps
    (out / "summary.json").unlink(missing_ok=True)  # a demo started over is not finished
    train_txt, held_txt = out / "corpus/train.txt", out / "corpus/heldout.txt"
    if resume and _reusable(out):
        print("1-3/4 corpus, tokenizer and shards: as the interrupted demo made them")
    else:
        print("1/4 corpus: Python's own documentation (pydoc topics + stdlib docstrings)")
        train_txt, held_txt = write_corpus(out / "corpus")
        print(f"    {train_txt.stat().st_size / 1e6:.1f} MB train, "
              f"{held_txt.stat().st_size / 1e6:.2f} MB held out")
        print("2/4 tokenizer: WordPiece, 8,192 tokens, uncased")
        train_tokenizer([str(train_txt)], 8192, out / "tokenizer", overwrite=True)
        print("3/4 shards: [CLS] A [SEP] B [SEP] examples of 128 tokens")
        prepare(PrepareOptions(inputs=[str(train_txt)], val_inputs=[str(held_txt)],
                               tokenizer=str(out / "tokenizer"), out=str(out / "data"),
                               seq_len=128, workers=1, overwrite=True))
    print(f"4/4 pretraining: tiny preset (discriminator 4x128, generator 4x32), {steps} steps;"
          f" replacements sampled at temperature {DEMO_TEMPERATURE:g} (the paper uses 1, which"
          f" needs far more than a few CPU minutes to leave the all-original plateau)")
    with start("auto", keep_memory=True) as rt:
        last = pretrain_command.pretrain(pretrain_command.PretrainOptions(
            data=str(out / "data"), out=str(out / "run"), config=cfg, overwrite=not resume,
            resume=resume, progress=progress), rt)
    minutes = (time.perf_counter() - t0) / 60
    acc, base = last["val_disc_acc"], last["val_baseline_acc"]
    margin = 100 * (acc - base)
    verdict = "beats" if margin >= 0.05 else "does NOT beat"
    print(f"\nheld-out discriminator accuracy {acc:.2%} {verdict} the all-original baseline "
          f"{base:.2%} by {margin:+.2f} points (ROC-AUC {last['val_disc_auc']:.3f}; 0.5 is "
          f"chance); generator accuracy on masked "
          f"tokens {last['val_gen_acc']:.1%} (chance {1 / 8192:.3%}); {minutes:.1f} min")

    print(f"curves: {plot_run(out / 'run')}")
    show_example(out / "run", held_txt)
    write_json(out / "summary.json", {**last, "minutes": minutes})
    return last


@torch.no_grad()
def show_example(run: Path, heldout: Path, seed: int = 3) -> None:
    """Corrupt one held-out sentence with the generator and print what the discriminator flags."""
    tok = load_tokenizer(run / "discriminator")
    special = SpecialTokens.of(tok)
    disc = folders.load(run, "discriminator")[0].eval()
    gen = folders.load(run, "generator")[0].eval()
    gen.encoder.embeddings = disc.encoder.embeddings  # shared in training, shared here
    lines = [ln for ln in heldout.read_text(encoding="utf-8").splitlines()
             if 12 <= len(ln.split()) <= 30]
    text = lines[len(lines) // 3]
    ids = torch.tensor([tok.encode(text).ids])
    mask = torch.ones_like(ids)
    rng = torch.Generator().manual_seed(seed)
    m = mask_inputs(ids, mask, special, gen.config.vocab_size, ObjectiveConfig(), rng)
    sampled = sample(gen(m.input_ids, mask, None, m.positions), DEMO_TEMPERATURE, rng=rng)
    corrupted = corrupt(ids, m.positions, m.weights, sampled)
    prob = torch.sigmoid(disc(corrupted, mask))[0]
    print("\nA held-out sentence, corrupted by the generator; the discriminator's verdict:")
    print(f"  original : {text}")
    words = []
    for i in range(1, ids.shape[1] - 1):
        t = tok.id_to_token(int(corrupted[0, i]))
        replaced = bool(corrupted[0, i] != ids[0, i])
        flagged = bool(prob[i] > 0.5)
        if replaced or flagged:
            was = f"(was {tok.id_to_token(int(ids[0, i]))})" if replaced else "(original)"
            mark = "FLAGGED" if flagged else "missed"
            t = f"[{t} {was} {mark} p={prob[i]:.2f}]"
        words.append(t)
    print("  corrupted: " + " ".join(words).replace(" ##", ""))
    n_rep = int((corrupted != ids).sum())
    n_flag = int((prob[1:-1] > 0.5).sum())
    n_hit = int(((corrupted != ids)[0] & (prob > 0.5)).sum())
    print(f"  {n_rep} token(s) replaced, {n_flag} flagged, {n_hit} replaced and flagged")
