"""What two CPU speed-ups of the training step buy, as paired ratios measured in one run.

    python bench/step_ablation.py [--data DIR] [--config configs/cpu-30min.toml] [--repeats 5]

Variants of *our* step (same model, batch, data, seed), timed interleaved A B C A B C ...:

    current      what `electra pretrain` runs now
    -lanes       torch's Bernoulli dropout masks (F.dropout, and SDPA's own attention dropout)
                 instead of masks cut from 16-bit lanes of 64-bit random words
    -icdf        Gumbel-max sampling instead of inverse-CDF sampling (same distribution)
    +vocab64     the generator's output layer padded to a multiple of 64 (a GPU's default,
                 ``Kernels.vocab_multiple``)

For changes that are not switches (the fused MLM loss, the written-out attention), compare
two checkouts with bench/ab_step.py.

Without --data it packs ../shared/data's held-out corpus with BERT's vocabulary (or, where
that is absent, Python's own docs).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from electra.data.loader import BatchLoader, ShardDataset
from electra.model.kernels import FAST_CPU, REFERENCE, Kernels, use
from electra.objectives.pretraining import ElectraPretrainingModel
from electra.run_config import load_run_config
from electra.runtime import Runtime, keep_freed_memory
from electra.train.pretraining import make_trainer, train_step

ROOT = Path(__file__).resolve().parents[1]


def default_data(tmp: str) -> str:
    """The shared held-out corpus with BERT's 30,522-token vocabulary, where present;
    otherwise Python's own docs with a vocabulary trained on them."""
    from electra.data.prepare import PrepareOptions, prepare

    shared = ROOT.parent / "shared/data"
    if (shared / "corpus/heldout").is_dir():
        text, tok = shared / "corpus/heldout", shared / "vocab/bert-base-uncased-vocab.txt"
    else:
        from electra.data.tokenizer import train_tokenizer
        from electra.experiments.demo import write_corpus

        text, _ = write_corpus(Path(tmp) / "corpus")
        train_tokenizer([str(text)], 30522, Path(tmp) / "tok")
        tok = Path(tmp) / "tok"
    prepare(PrepareOptions(inputs=[str(text)], tokenizer=str(tok), out=f"{tmp}/data",
                           quiet=True))
    return f"{tmp}/data"


def training_step(data_dir: str, config: str, batch: int) -> Callable[[str], int]:
    """The training step `electra pretrain` runs (``electra.train.pretraining.train_step``: forward
    under autocast, backward, the non-finite check, clipping, AdamW, the schedule, with malloc
    keeping freed memory as `electra pretrain` sets it) as a function of the sampling method;
    it returns the step's real tokens. Same seed, model and batches for every caller."""
    keep_freed_memory()
    data = ShardDataset(data_dir)
    cfg = load_run_config(config_file=config, sets=[f"train.batch_size={batch}",
                                                    "train.grad_accum=1"])
    cfg = dataclasses.replace(cfg, model=cfg.model.replace(vocab_size=data.vocab_size))
    torch.manual_seed(0)
    rt = Runtime()
    command = rt.model_kernels(cfg.train.unpad)  # what `electra pretrain` builds the model with
    model = ElectraPretrainingModel(cfg.model, cfg.objective, data.special, command)
    trainer = make_trainer(model, cfg, rt)
    loader = BatchLoader(data, batch, seed=0)

    def step(sampling: str = "inverse_cdf", kernels: Kernels = FAST_CPU) -> int:
        b = next(loader)
        use(model, dataclasses.replace(kernels, unpad=command.unpad))  # the command's layout
        model.objective = dataclasses.replace(cfg.objective, sampling=sampling)
        train_step(trainer, b, cfg, data.special, batch)
        return int(b["attention_mask"].sum())

    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", help="prepared folder (default: ../shared/data's held-out "
                    "corpus, or Python's docs where that is absent)")
    ap.add_argument("--config", default=str(ROOT / "configs/cpu-30min.toml"))
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=4, help="timed steps per measurement")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    tmp = tempfile.TemporaryDirectory()
    step = training_step(args.data or default_data(tmp.name), args.config, args.batch)

    variants = {
        "current": ("inverse_cdf", FAST_CPU),
        # torch's dropout, SDPA's attention dropout (the output layer as wide as current's)
        "-lanes": ("inverse_cdf", dataclasses.replace(
            REFERENCE, vocab_multiple=FAST_CPU.vocab_multiple)),
        "-icdf": ("gumbel", FAST_CPU),
        "+vocab64": ("inverse_cdf", dataclasses.replace(FAST_CPU, vocab_multiple=64)),
    }
    for _ in range(2):
        step("inverse_cdf")  # warm up
    results: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(args.repeats):
        for name, (sampling, kernels) in variants.items():
            step(sampling, kernels)
            t0 = time.perf_counter()
            n = sum(step(sampling, kernels) for _ in range(args.steps))
            results[name].append(n / (time.perf_counter() - t0))
    precision = load_run_config(config_file=args.config).train.precision
    print(f"config {args.config}, batch {args.batch}, {torch.get_num_threads()} threads, "
          f"{precision}; tokens/s over {args.steps} steps, {args.repeats} repeats")
    base = results["current"]
    for name, v in results.items():
        ratios = [a / b for a, b in zip(v, base, strict=True)]
        print(f"{name:10s} min/med/max {min(v):7.0f} {statistics.median(v):7.0f} "
              f"{max(v):7.0f}   x current (paired median) {statistics.median(ratios):.2f}")
    print(json.dumps({k: round(statistics.median(v)) for k, v in results.items()}))


if __name__ == "__main__":
    main()
