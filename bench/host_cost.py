"""The step's host cost: the pretraining and fine-tuning steps at Base's depth with almost no
arithmetic, eager against compiled (``compile``: the whole step in one graph).

    python bench/host_cost.py [--rounds 3] [--steps 20] [--modes eager,compiled]
        [--precision fp32] [--parts pretrain,finetune]

Base's depth and heads (12 layers, 12 heads; the generator 12 layers at a quarter's width)
at a width of 48 (4 a head), rows of 32 tokens, batch 2: what is left of a step is the work
around the arithmetic (Python, the dispatcher, autograd, the optimizer's loop), the same work
a GPU's host does for Base at any width. Both steps are the commands' own (the scaffold's
``train_step``: forward, backward, the finite check, clipping, fused AdamW, the schedule):
pretraining ELECTRA on the Python-docs corpus packed at 32 tokens (the demo's, a 2,000-token
vocabulary), fine-tuning a sequence head on random rows of 8-32 tokens, each batch cut to
its longest row, unpadded as `electra finetune` runs it.

Per part and mode, the modes interleaved round by round: ms a step (min/median/max over
the rounds of each round's median over ``--steps`` steps), the top-level aten ops a step (as
bench/op_count.py counts them) and the share of the step's time inside them (the rest:
Python, autograd's engine and a compiled graph's own kernels), and for a compiled step the
graphs dynamo made, its graph breaks and the seconds its first steps took (compiling;
inductor's cache on disk makes a second run's shorter). ``--small-batch B``: the steps of
ELECTRA-Small itself (BERT's vocabulary; pretraining rows of 128, fine-tuning rows of 8-64),
where compiling has real arithmetic to fuse.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench")]

WIDTHS = dict(hidden_size=48, embedding_size=48, intermediate_size=96, num_heads=12,
              num_layers=12)  # Base's depth and heads, 4 dimensions a head


def pretrain_step(tmp: Path, compiled: bool, precision: str,
                  real: int = 0) -> Callable[[], None]:
    """`electra pretrain`'s step on Base's depth at width 48, batch 2 x 32; ``real`` (a batch
    size): ELECTRA-Small as it is, rows of 128 from the shared held-out corpus with BERT's
    vocabulary (bench/step_ablation.py's data)."""
    from electra.data.loader import BatchLoader, ShardDataset
    from electra.data.prepare import PrepareOptions, prepare
    from electra.data.tokenizer import train_tokenizer
    from electra.experiments.demo import write_corpus
    from electra.objectives.pretraining import ElectraPretrainingModel
    from electra.run_config import load_run_config
    from electra.runtime import Runtime
    from electra.train.pretraining import make_trainer, train_step

    batch = real or 2
    if real and not (tmp / "data").is_dir():
        from step_ablation import default_data

        default_data(str(tmp))
    elif not (tmp / "data").is_dir():
        text, _ = write_corpus(tmp / "corpus")
        train_tokenizer([str(text)], 2000, tmp / "tok")
        prepare(PrepareOptions(inputs=[str(text)], tokenizer=str(tmp / "tok"),
                               out=str(tmp / "data"), seq_len=32, quiet=True))
    data = ShardDataset(str(tmp / "data"))
    model_sets = [] if real else [f"model.{k}={v}" for k, v in WIDTHS.items()]
    cfg = load_run_config(preset="small" if real else "base", sets=[
        *model_sets, f"model.vocab_size={data.vocab_size}", f"train.batch_size={batch}",
        f"train.precision={precision}", f"train.compile={compiled}"])
    torch.manual_seed(0)
    rt = Runtime()
    model = ElectraPretrainingModel(cfg.model, cfg.objective, data.special,
                                    rt.model_kernels(cfg.train.unpad))
    trainer = make_trainer(model, cfg, rt)
    loader = BatchLoader(data, batch, seed=0)
    return lambda: train_step(trainer, next(loader), cfg, data.special, batch)


def finetune_step(compiled: bool, precision: str, real: int = 0) -> Callable[[], None]:
    """`electra finetune`'s step: a sequence head on Base's depth at width 48, batch 2, rows
    of 8-32 tokens; ``real`` (a batch size): on ELECTRA-Small itself (BERT's vocabulary),
    rows of 8-64 tokens (SST-2's sentences are 4-66)."""
    from electra.config import FinetuneConfig
    from electra.model.bodies import model_preset
    from electra.runtime import Runtime
    from electra.tasks.sequence.head import SequenceClassifier
    from electra.train.optim import param_groups
    from electra.train.trainer import RandomStreams, Settings, Trainer

    torch.manual_seed(0)
    rt = Runtime()
    vocab, batch, longest = (30522, real, 64) if real else (2000, 2, 32)
    body = model_preset("small", vocab_size=vocab) if real else model_preset(
        "base", vocab_size=vocab, **WIDTHS)
    model = SequenceClassifier(body, 2,
                               rt.model_kernels(FinetuneConfig().unpad)).train()
    settings = Settings.of(FinetuneConfig(compile=compiled, precision=precision), 1e-4,
                           10**9, 0)
    trainer = Trainer(model, rt, settings, lambda m: param_groups(m, 0.01),
                      streams=RandomStreams(rt, 0))
    g = torch.Generator().manual_seed(0)

    def step() -> None:
        lengths = torch.randint(8, longest + 1, (batch,), generator=g)
        T = int(lengths.max())
        ids = torch.randint(5, vocab, (batch, T), generator=g)
        mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
        ids, types = ids * mask, torch.zeros_like(ids)
        y = torch.randint(0, 2, (batch,), generator=g)

        def micro(m: torch.nn.Module, j: int) -> tuple[torch.Tensor, dict]:
            return torch.nn.functional.cross_entropy(m(ids, mask, types).float(), y), {}

        trainer.train_step(micro, int(mask.sum()))

    return step


def profile(step: Callable[[], None], steps: int = 2) -> tuple[float, float]:
    """(top-level aten ops a step, the share of the profiled steps' time spent inside them:
    the rest is Python, autograd's engine and a compiled graph's own kernels)."""
    from op_count import top_level_events

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            step()
        wall = time.perf_counter() - start
    ops = list(top_level_events(prof.events()))
    inside = sum(e.cpu_time_total for e in ops) / 1e6
    return len(ops) / steps, inside / wall


def measure(parts: list[str], modes: list[str], rounds: int, steps: int,
            precision: str, real: int = 0) -> list[dict]:
    import torch._dynamo.utils as du

    rows, made = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for part in parts:
            for mode in modes:
                torch._dynamo.reset()
                du.counters.clear()
                compiled = mode == "compiled"
                step = (pretrain_step(Path(tmp), compiled, precision, real)
                        if part == "pretrain" else finetune_step(compiled, precision, real))
                start = time.perf_counter()
                for _ in range(4):  # the optimizer's state; compiling (a second shape too)
                    step()
                first = time.perf_counter() - start
                ops, share = profile(step)
                made[part, mode] = (step, {
                    "part": part + (f" small x{real}" if real else ""),
                    "mode": mode, "precision": precision, "ops": round(ops),
                    "aten_share": round(share, 2), "first_4_steps_s": round(first, 1),
                    "graphs": du.counters["stats"].get("unique_graphs", 0),
                    "graph_breaks": sum(du.counters["graph_break"].values()), "ms": []})
        for _ in range(rounds):
            for (_part, _mode), (step, row) in made.items():
                times = []
                for _ in range(steps):
                    t = time.perf_counter()
                    step()
                    times.append((time.perf_counter() - t) * 1e3)
                row["ms"].append(statistics.median(times))
    for (_part, _mode), (_step, row) in made.items():
        ms = sorted(row.pop("ms"))
        row.update(ms_min=round(ms[0], 2), ms_median=round(statistics.median(ms), 2),
                   ms_max=round(ms[-1], 2))
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--modes", default="eager,compiled")
    ap.add_argument("--parts", default="pretrain,finetune")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--json", help="also append each row to this JSON-lines file")
    ap.add_argument("--small-batch", type=int, default=0,
                    help="ELECTRA-Small itself at this batch (pretraining rows of 128, "
                    "fine-tuning rows of 8-64): where compiling pays at real widths")
    args = ap.parse_args()
    rows = measure(args.parts.split(","), args.modes.split(","), args.rounds, args.steps,
                   args.precision, args.small_batch)
    print("| part | mode | ms a step min / med / max | aten ops a step | in aten ops | "
          "graphs | graph breaks | first 4 steps (s) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['part']} | {r['mode']} | {r['ms_min']} / {r['ms_median']} / "
              f"{r['ms_max']} | {r['ops']:,} | {r['aten_share']:.0%} | {r['graphs']} | "
              f"{r['graph_breaks']} | {r['first_4_steps_s']} |")
    base = {r["part"]: r["ms_median"] for r in rows if r["mode"] == "eager"}
    for r in rows:
        if r["mode"] != "eager" and r["part"] in base:
            print(f"{r['part']}: {r['mode']} / eager = {r['ms_median'] / base[r['part']]:.2f}")
    if args.json:
        from refusal_time import cpu_name

        with open(args.json, "a") as f:
            for r in rows:
                f.write(json.dumps({**r, "cpu": cpu_name()}) + "\n")


if __name__ == "__main__":
    main()
