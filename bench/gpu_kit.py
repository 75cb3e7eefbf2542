"""The GPU kit: what a lent GPU machine measures, in one command of at most 9 minutes.

    make gpu-data                                  # here, once: bench/data (ignored by git)
    python3 -u bench/gpu_kit.py all RESULTS        # there: every stage, in order of worth
    SMOKE=1 python bench/gpu_kit.py all RESULTS    # a rehearsal on a CPU, tiny sizes (tests)

Every stage runs in its own process with its own time limit (so a crash, a hang or an
out-of-memory in one keeps every other), and appends one JSON line to ``RESULTS/kit.jsonl``
(and prints it) as soon as it ends: failed, stopped at its limit, or skipped because the
time left would not fit it, each says so in its line. Work goes to ``/tmp/electra-kit``
(``KIT_WORK``), never to RESULTS. The data travels inside the repo: ``bench/data`` holds a
few thousand SST-2 rows (``SST-2/``), BERT's vocabulary, and the demo's corpus (Python's own
documentation) prepared with that vocabulary at 128 and 512 tokens (``demo-128/``,
``demo-512/``; packed, ``--pack``: ``pack-128/``, ``pack-512/``); ``make gpu-data`` writes it
from ../shared/data, which the GPU machine has not. Needs transformers for the peer steps.

What "our step" is: ``electra.train.pretraining.train_step`` on a model built with the kernels
`electra pretrain` builds it with (``train.unpad`` as the command's default), on batches of
the demo's shards in the loader's order (their real padding). Tokens/s and MFU count real
tokens. The stages, in the order they run (the last ones are dropped first when time runs
short):
- ``env``: device, torch, the measured bf16 matmul peak and the device's spec peak.
- ``scale_<model>_<T>`` (Base at 512, the headline, then Base and Small at 128): our step as
  users run it, on the demo's corpus packed (``pack-T``) at the preset's batch, each variant
  at the largest micro-batch that fits (the rest by accumulation): the command's defaults,
  then each lever (``train.unpad``, ``train.cuda_graphs``, ``train.compile``), then
  transformers' step, then (the headline) ``train.cast_once=false``: autocast's own casts
  against the cast-once default; three timed windows each (median, min, max real tokens/s), MFU, the
  GPU's busy fraction under the profiler, each over the defaults.
- ``fp32``: one batch of the ELECTRA objective on the CPU and the GPU from the same weights
  and draws (TF32 off): every loss within 1e-4, the same samples.
- ``step_<model>_<B>x<T>``: our step against transformers' ``ElectraForMaskedLM`` +
  ``ElectraForPreTraining`` (SDPA attention, the same masking, Gumbel-max sampling, bf16
  autocast, fused AdamW) on the same batches: tokens/s, ratio, MFU against the spec and the
  measured peak, for Small at 128x128 and Base at 128x128 and 32x512. Each side is measured
  on its own: a failing peer keeps ours.
- ``finetune``: fine-tuning steps of ELECTRA-Small on SST-2 batches, padded against
  unpadded; then both in eval mode from the same weights: logits' largest difference.
- ``layouts``: our Small step with ``train.unpad`` false (the command's default) and true,
  and on rows without padding (attention without a mask: FlashAttention's case).
- ``compile``: our step eager and with ``train.compile`` (dynamo reset between them).
- ``nccl``: `electra pretrain` under torchrun with one process in a process group
  (``ELECTRA_PROCESS_GROUP=1``), DDP and FSDP2, 3 steps each.
- ``vocab``: the generator's output layer 30,522 wide and padded to 30,528.
- ``graphs``: compiled, and compiled with ``train.cuda_graphs`` (static shapes: the
  command's padded layout).
- ``compare``: `electra compare` (electra against mlm, ELECTRA-Small's shape, fine-tuned on
  the SST-2 rows) with a pretraining budget sized to the time left.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("KIT_DATA", ROOT / "bench" / "data"))
SMOKE = os.environ.get("SMOKE") == "1"
WORK = Path(os.environ.get("KIT_WORK", "/tmp/electra-kit"))
TOTAL_SECONDS = float(os.environ.get("KIT_SECONDS", "400" if SMOKE else "520"))
# The GPU's precision; the CPU rehearsal takes the CPU's own (``auto``: bf16 only where it has
# bf16 units; emulated, bf16 made the rehearsal's steps many times slower on an AVX2-only EPYC)
PRECISION = "auto" if SMOKE else "bf16"
SPEC_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L4": 121e12, "A10": 125e12}

sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402

from electra.data.tokenizer import SpecialTokens  # noqa: E402
from electra.model.bodies import model_preset  # noqa: E402
from electra.objectives.config import ObjectiveConfig  # noqa: E402

SPECIAL = SpecialTokens(pad=0, unk=100, cls=101, sep=102, mask=103)  # bert-base-uncased
VOCAB = 30522


class Kit:
    """One stage's process: its device, results file and deadline."""

    def __init__(self, results: Path, seconds: float) -> None:
        self.results = results
        results.mkdir(parents=True, exist_ok=True)
        self.start = time.perf_counter()
        self.seconds = seconds
        self.dev = torch.device("cpu" if SMOKE else "cuda")

    def left(self) -> float:
        return self.seconds - (time.perf_counter() - self.start)

    def stage(self, name: str, fn: Callable[[], dict]) -> dict:
        """Run ``fn``; append its line, failed or not. ``KIT_FAULT=NAME:hang`` or
        ``NAME:crash`` makes that stage hang or abort (the rehearsal of a stage that never
        ends or kills its process)."""
        fault = dict(f.split(":", 1) for f in os.environ.get("KIT_FAULT", "").split(",") if f)
        if fault.get(name) == "hang":
            time.sleep(1e6)
        elif fault.get(name) == "crash":
            os.abort()
        t0 = time.perf_counter()
        try:
            record = {"stage": name, "ok": True, **fn()}
        except Exception as err:  # a failed stage is recorded; the next ones still run
            record = {"stage": name, "ok": False, "error": f"{type(err).__name__}: {err}"[
                :500], "where": traceback.format_exc().splitlines()[-3:]}
        record["seconds"] = round(time.perf_counter() - t0, 1)
        write_line(self.results, record)
        return record

    def peak(self) -> dict:
        """The env stage's measured and spec bf16 peaks (FLOP/s), read from the results."""
        env_line = next((r for r in read_lines(self.results) if r["stage"] == "env"), {})
        return {"measured": (env_line.get("bf16_matmul_tflops") or 1) * 1e12,
                "spec": (env_line.get("spec_bf16_tflops") or 0) * 1e12 or None}


def write_line(results: Path, record: dict) -> None:
    with open(results / "kit.jsonl", "a") as f:
        f.write(json.dumps(record, default=str) + "\n")
    print(json.dumps(record, default=str), flush=True)


def read_lines(results: Path) -> list[dict]:
    path = results / "kit.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.is_file() else []


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def env(dev: torch.device) -> dict:
    n = 256 if SMOKE else 8192  # (a CPU without bf16 units emulates it: 1.4 GFLOP/s)
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    for _ in range(3):
        a @ a
    sync(dev)
    t0, reps = time.perf_counter(), 5 if SMOKE else 50
    for _ in range(reps):
        a @ a
    sync(dev)
    peak = 2 * n**3 * reps / (time.perf_counter() - t0)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    spec = next((v for k, v in SPEC_BF16.items() if k in name), None)
    try:
        import transformers

        hf = transformers.__version__
    except ImportError:
        hf = None
    return {"device": name, "torch": torch.__version__, "transformers": hf,
            "bf16_matmul_tflops": round(peak / 1e12, 1),
            "spec_bf16_tflops": spec and spec / 1e12}


def check_fp32(dev: torch.device, preset: str, B: int, T: int) -> dict:
    """The same weights and random draws in fp32 (no TF32) on the CPU and on ``dev``: every
    loss within 1e-4 and the same samples."""
    from electra.model.kernels import kernels_for
    from electra.objectives.masking import Batch, Draws, Noise
    from electra.objectives.pretraining import ElectraPretrainingModel

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    cfg = model_preset(preset, vocab_size=VOCAB, hidden_dropout=0.0, attention_dropout=0.0)
    cpu = ElectraPretrainingModel(cfg, ObjectiveConfig(), SPECIAL, kernels_for("cpu"))
    gpu = copy.deepcopy(cpu).to(dev)
    noise = Noise.draw(B, T, VOCAB, ObjectiveConfig(), torch.Generator().manual_seed(1))
    out, samples = {}, {}
    for name, model, d in (("cpu", cpu, torch.device("cpu")), ("gpu", gpu, dev)):
        b = batch(B, T, 2, d)
        o = model(Batch.of(b), Draws(Noise(
            *(None if t is None else t.to(d) for t in (
                noise.scores, noise.mask_u, noise.random_ids, noise.sample_u, noise.span_u)))))
        out[name] = {k: float(v.detach()) for k, v in o.losses.items()} | {
            "loss": float(o.loss.detach())}
        samples[name] = o.corrupted_ids.cpu()
    diff = {k: abs(out["cpu"][k] - out["gpu"][k]) for k in out["cpu"]}
    same = bool(torch.equal(samples["cpu"], samples["gpu"]))
    return {"fp32_losses_cpu": out["cpu"], "fp32_abs_diff": diff, "same_samples": same,
            "fp32_ok": same and max(diff[k] for k in ("gen_loss", "disc_loss")) <= 1e-4
            and diff["loss"] <= 1e-4 * max(1.0, abs(out["cpu"]["loss"]))}


def batch(B: int, T: int, seed: int, dev: torch.device) -> dict:
    """Random tokens in BERT's vocabulary without padding, [CLS] a [SEP] b [SEP] (the fp32
    check's batch, and the rows without padding of ``layouts``)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, VOCAB, (B, T), generator=g)
    ids[:, 0] = SPECIAL.cls
    ids[:, T // 2] = SPECIAL.sep
    ids[:, -1] = SPECIAL.sep
    types = (torch.arange(T)[None, :] > T // 2).long().expand(B, T)
    return {"input_ids": ids.to(dev), "attention_mask": torch.ones_like(ids).to(dev),
            "token_type_ids": types.to(dev)}


def shard_batches(B: int, T: int, n: int, packed: bool = False) -> list[dict]:
    """``n`` batches of the demo's shards at length ``T`` (``bench/data/demo-T``; ``packed``:
    ``pack-T``, prepared with ``--pack``: rows of several documents), in the loader's seeded
    order: what `electra pretrain` reads, with the shards' real padding."""
    from electra.data.loader import BatchLoader, ShardDataset

    loader = BatchLoader(ShardDataset(DATA / f"{'pack' if packed else 'demo'}-{T}"), B, seed=0)
    return [next(loader) for _ in range(n)]  # on the host, as the command's loader hands
    # them over: train_step copies them to the device (and sees which rows have padding)


def real_tokens(batches: list[dict]) -> float:
    """Real (not padding) tokens per batch, on average."""
    return sum(float(b["attention_mask"].sum()) for b in batches) / len(batches)


def ours_step(preset: str, B: int, T: int, dev: torch.device, compile: bool = False,
              dropout: float = 0.1, kernels: Any = None, cuda_graphs: bool = False,
              unpad: bool | None = None, micro: int | None = None, cast_once: bool = True
              ) -> tuple[Callable[[dict], torch.Tensor], int]:
    """Our pretraining step (the command's: ``electra.train.pretraining.train_step`` on a model with
    the kernels `electra pretrain` builds it with), from seed 0: (step(batch) -> loss, its
    training FLOPs at full length). ``kernels``: other than the command's; ``unpad``,
    ``compile``, ``cuda_graphs``: ``train.unpad`` (None: its default), ``train.compile``,
    ``train.cuda_graphs``; ``micro``: rows a forward (``train.grad_accum`` = B / micro);
    ``cast_once``: ``train.cast_once``."""
    from electra.config import TrainConfig
    from electra.objectives.flops import step_flops_per_sequence
    from electra.objectives.pretraining import ElectraPretrainingModel
    from electra.run_config import RunConfig
    from electra.runtime import Runtime
    from electra.train.pretraining import make_trainer, train_step

    cfg = model_preset(preset, vocab_size=VOCAB, hidden_dropout=dropout,
                       attention_dropout=dropout, max_position_embeddings=max(512, T))
    obj = ObjectiveConfig(max_predictions=int(0.155 * T))
    micro = micro or B
    run = RunConfig(model=cfg, objective=obj, train=TrainConfig(
        batch_size=B, grad_accum=B // micro, precision=PRECISION, warmup_steps=0,
        compile=compile, cuda_graphs=cuda_graphs, cast_once=cast_once,
        **({} if unpad is None else {"unpad": unpad})))
    torch.manual_seed(0)
    rt = Runtime(device=dev)
    command = rt.model_kernels(run.train.unpad if unpad is None else unpad)  # the command's
    model = ElectraPretrainingModel(cfg, obj, SPECIAL, kernels or command)
    trainer = make_trainer(model, run, rt)

    def step(b: dict) -> torch.Tensor:
        return train_step(trainer, b, run, SPECIAL, micro)["loss"]  # on the device: read later

    return step, step_flops_per_sequence(cfg, obj, T) * B


def hf_step(preset: str, B: int, T: int, dev: torch.device,
            micro: int | None = None) -> Callable[[dict], float]:
    """transformers' ELECTRA pretraining step, as a transformers-based script writes it, over
    micro-batches of ``micro`` rows (gradients accumulated; packed rows attend across their
    sequences, as transformers reads a row)."""
    from transformers import ElectraForMaskedLM, ElectraForPreTraining

    from electra.model.bodies.bert.hf import to_config as to_hf_config
    from electra.objectives.masking import mask_inputs
    from electra.runtime import autocast
    from electra.train.optim import adamw, param_groups

    cfg = model_preset(preset, vocab_size=VOCAB, max_position_embeddings=max(512, T))
    obj = ObjectiveConfig(max_predictions=int(0.155 * T))
    torch.manual_seed(0)
    disc_cfg, gen_cfg = to_hf_config(cfg), to_hf_config(cfg.generator_config())
    for c in (disc_cfg, gen_cfg):
        c._attn_implementation = "sdpa"
    disc = ElectraForPreTraining(disc_cfg)
    gen = ElectraForMaskedLM(gen_cfg)
    gen.electra.embeddings = disc.electra.embeddings
    gen.generator_lm_head.weight = disc.electra.embeddings.word_embeddings.weight
    model = torch.nn.ModuleDict({"generator": gen, "discriminator": disc}).to(dev)
    opt = adamw(param_groups(model, 0.01), lr=5e-4)
    rng = torch.Generator(dev).manual_seed(1)

    def step(b: dict) -> torch.Tensor:
        rows = micro or len(b["input_ids"])
        parts = len(b["input_ids"]) // rows
        total = None
        for j in range(parts):
            loss = part({k: v[j * rows:(j + 1) * rows] for k, v in b.items()}) / parts
            loss.backward()
            total = loss.detach() if total is None else total + loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return total

    def part(b: dict) -> torch.Tensor:
        ids, am, tt = (b[k].to(dev, non_blocking=True)
                       for k in ("input_ids", "attention_mask", "token_type_ids"))
        with autocast(dev, PRECISION):
            m = mask_inputs(ids, am, SPECIAL, VOCAB, obj, rng)
            labels = torch.full_like(ids, -100)
            labels.scatter_(1, m.positions, torch.where(m.weights, m.targets, -100))
            g_out = gen(input_ids=m.input_ids, attention_mask=am, token_type_ids=tt,
                        labels=labels)
            with torch.no_grad():
                logits = torch.gather(g_out.logits, 1, m.positions[..., None].expand(
                    -1, -1, VOCAB)).float()
                u = torch.rand(logits.shape, generator=rng, device=dev)
                sampled = (logits - torch.log(-torch.log(u.clamp(1e-20, 1 - 1e-7)))).argmax(-1)
                corrupted = ids.scatter(1, m.positions,
                                        torch.where(m.weights, sampled, m.targets))
            d_out = disc(input_ids=corrupted, attention_mask=am, token_type_ids=tt,
                         labels=(corrupted != ids).long())
            return g_out.loss + obj.disc_weight * d_out.loss

    return step


def timed(step: Callable[[dict], object], batches: list[dict], dev: torch.device,
          warmup: int) -> tuple[float, float]:
    """(median seconds per step after ``warmup`` steps, the last loss)."""
    times, loss = [], None
    for i, b in enumerate(batches):
        sync(dev)
        t0 = time.perf_counter()
        loss = step(b)
        sync(dev)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2], float(loss)  # type: ignore[arg-type]


def measure(name: str, build: Callable[[], Callable[[dict], object]], batches: list[dict],
            dev: torch.device, warmup: int, flops: float | None = None,
            peak: dict | None = None) -> dict:
    """One side's figures, ``name_``-prefixed: real tokens/s, last loss, MFU over real tokens
    (``flops`` at full length, scaled to the real tokens); an error kept as ``name_error``
    (the other sides still run). Memory is freed and dynamo reset after it."""
    out: dict = {}
    try:
        t0 = time.perf_counter()
        t, loss = timed(build(), batches, dev, warmup)
        real = real_tokens(batches)
        out = {f"{name}_tokens_per_s": round(real / t), f"{name}_last_loss": round(loss, 4),
               f"{name}_total_s": round(time.perf_counter() - t0, 1)}
        if flops and peak:
            done = flops * real / batches[0]["attention_mask"].numel() / t
            out[f"{name}_mfu_measured_peak"] = round(done / peak["measured"], 3)
            if peak.get("spec"):
                out[f"{name}_mfu_spec"] = round(done / peak["spec"], 3)
    except Exception as err:  # the kit records every failure and goes on
        out[f"{name}_error"] = f"{type(err).__name__}: {err}"[:300]
    finally:
        torch._dynamo.reset()
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    return out


def compare_steps(preset: str, B: int, T: int, dev: torch.device, peak: dict) -> dict:
    from electra.objectives.flops import step_flops_per_sequence

    n, warmup = (3, 1) if SMOKE else (12, 4)
    batches = shard_batches(B, T, n)
    cfg = model_preset(preset, vocab_size=VOCAB, max_position_embeddings=max(512, T))
    flops = step_flops_per_sequence(cfg, ObjectiveConfig(max_predictions=int(0.155 * T)), T) * B
    out = {"model": preset, "batch": B, "seq_len": T,
           "pad_fraction": round(1 - real_tokens(batches) / (B * T), 3)}
    out |= measure("ours", lambda: ours_step(preset, B, T, dev)[0], batches, dev, warmup,
                   flops, peak)
    out |= measure("hf", lambda: hf_step(preset, B, T, dev), batches, dev, warmup, flops, peak)
    if "ours_tokens_per_s" in out and "hf_tokens_per_s" in out:
        out["ours_over_hf"] = round(out["ours_tokens_per_s"] / out["hf_tokens_per_s"], 2)
    return out


def is_oom(err: BaseException) -> bool:
    return isinstance(err, torch.OutOfMemoryError) or "out of memory" in str(err).lower()


def free(dev: torch.device) -> None:
    import gc

    gc.collect()
    torch._dynamo.reset()
    if dev.type == "cuda":
        torch.cuda.empty_cache()


def fitted(make: Callable[[int], Callable[[dict], object]], B: int, first: dict,
           dev: torch.device, start: int | None = None) -> tuple[int, Callable, list[int]]:
    """The largest micro-batch (``start`` or B, then halving) whose step runs on ``first``:
    (micro, the step built with it, having run once: a warmup, the micro-batches that ran out
    of memory). ``KIT_MAX_MICRO`` caps it (the rehearsal's way onto the accumulation)."""
    cap = int(os.environ.get("KIT_MAX_MICRO", "0")) or B
    micro, failed = min(start or B, cap), []
    while micro >= 1:
        if B % micro == 0:
            try:
                step = make(micro)
                step(first)
                sync(dev)
                return micro, step, failed
            except Exception as err:  # out of memory: a smaller micro-batch; else a failure
                if not is_oom(err):
                    raise
                failed.append(micro)
                step = None  # type: ignore[assignment]
                free(dev)
        micro //= 2
    raise RuntimeError(f"no micro-batch of {B} rows fits")


def busy_fraction(step: Callable[[dict], object], batches: list[dict],
                  dev: torch.device) -> float | None:
    """The GPU's busy time over the wall time of ``batches``' steps, under torch.profiler
    (None on a CPU: the rehearsal has no device timeline)."""
    if dev.type != "cuda":
        return None
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    sync(dev)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for b in batches:
            step(b)
        sync(dev)
        wall = time.perf_counter() - t0
    busy = sum(getattr(k, "self_device_time_total", 0) for k in prof.key_averages()
               if k.device_type == DeviceType.CUDA) / 1e6
    return round(busy / wall, 3) if wall else None


def windows_measure(name: str, make: Callable[[int], Callable[[dict], object]], B: int,
                    batches: list[dict], dev: torch.device, warmup: int, per: int,
                    flops: float, peak: dict, start: int | None = None) -> dict:
    """One variant at the largest micro-batch that fits: after ``warmup`` steps, three
    windows of ``per`` steps timed in this process (real tokens/s: median, min, max), MFU of
    the median against the spec and the measured peak, then one window under the profiler
    (the GPU's busy fraction). ``name_``-prefixed; an error kept as ``name_error``."""
    out: dict = {}
    try:
        t0 = time.perf_counter()
        micro, step, failed = fitted(make, B, batches[0], dev, start)
        out[f"{name}_micro"] = micro
        if failed:
            out[f"{name}_out_of_memory_at"] = failed
        for b in batches[1:warmup]:
            step(b)
        rates, loss = [], None
        for w in range(3):
            part = batches[warmup + w * per: warmup + (w + 1) * per]
            sync(dev)
            t = time.perf_counter()
            for b in part:
                loss = step(b)
            sync(dev)
            rates.append(real_tokens(part) * len(part) / (time.perf_counter() - t))
        rates.sort()
        out |= {f"{name}_tokens_per_s": round(rates[1]), f"{name}_tokens_per_s_min": round(
            rates[0]), f"{name}_tokens_per_s_max": round(rates[2]),
                f"{name}_last_loss": round(float(loss), 4)}  # type: ignore[arg-type]
        done = flops * rates[1] / batches[0]["attention_mask"].numel()
        out[f"{name}_mfu_measured_peak"] = round(done / peak["measured"], 3)
        if peak.get("spec"):
            out[f"{name}_mfu_spec"] = round(done / peak["spec"], 3)
        out[f"{name}_gpu_busy"] = busy_fraction(step, batches[warmup + 3 * per:], dev)
        out[f"{name}_total_s"] = round(time.perf_counter() - t0, 1)
    except Exception as err:  # the kit records every failure and goes on
        out[f"{name}_error"] = f"{type(err).__name__}: {err}"[:300]
    finally:
        free(dev)
    return out


# A scale stage's variants, in the order they run (the last are dropped first when its time
# runs short): the command's defaults first, then each lever, then transformers' step, then
# the cast-once path off (its default chosen by this figure).
LEVERS = {"default": {}, "unpad": {"unpad": True}, "graphs": {"compile": True,
                                                              "cuda_graphs": True},
          "compile": {"compile": True},
          "nocast": {"cast_once": False}}  # autocast's own casts (train.cast_once=false)


def scale_stage(kit: Kit, preset: str, T: int, variants: tuple[str, ...]) -> dict:
    """Our step as users run ``preset`` at ``T`` tokens: on the demo's corpus packed
    (``prepare --pack``), at the preset's batch (``train.batch_size``), each variant at the
    largest micro-batch that fits and the rest by accumulation; ``variants``: names of
    :data:`LEVERS` and ``hf`` (transformers' ELECTRA step, bf16, the same rows). Each:
    real tokens/s over three windows, MFU, the GPU's busy fraction; and over the default."""
    from electra.model.bodies import recipe
    from electra.objectives.flops import step_flops_per_sequence

    B = 8 if SMOKE else recipe(preset).train["batch_size"]
    warmup, per = (2, 1) if SMOKE else (3, 3)
    batches = shard_batches(B, T, warmup + 4 * per, packed=True)
    cfg = model_preset(preset, vocab_size=VOCAB, max_position_embeddings=max(512, T))
    flops = step_flops_per_sequence(cfg, ObjectiveConfig(max_predictions=int(0.155 * T)),
                                    T) * B
    out: dict = {"model": preset, "batch": B, "seq_len": T, "packed": True,
                 "pad_fraction": round(1 - real_tokens(batches) / (B * T), 3),
                 "sequences_per_row": round(sum(float(b["sequence_ids"].max(1).values.sum())
                                                for b in batches) / (B * len(batches)), 2)}
    start = None
    for name in variants:
        if kit.left() < (15 if SMOKE else 40):
            out[f"{name}_skipped"] = f"{kit.left():.0f} s left"
            continue
        if name == "hf":
            def make(micro: int) -> Callable[[dict], object]:
                return hf_step(preset, B, T, kit.dev, micro)
        else:
            def make(micro: int, kw: dict = LEVERS[name]) -> Callable[[dict], object]:
                return ours_step(preset, B, T, kit.dev, micro=micro, **kw)[0]
        out |= windows_measure(name, make, B, batches, kit.dev, warmup, per, flops,
                               kit.peak(), start if name != "hf" else None)
        if name == "default":
            start = out.get("default_micro")
    base = out.get("default_tokens_per_s")
    for name in variants[1:]:
        if base and out.get(f"{name}_tokens_per_s"):
            out[f"{name}_over_default"] = round(out[f"{name}_tokens_per_s"] / base, 2)
    best = max((out[f"{n}_tokens_per_s"], n) for n in variants if n != "hf"
               and f"{n}_tokens_per_s" in out) if base else None
    if best:
        out["best"] = best[1]
        if out.get("hf_tokens_per_s"):
            out["best_over_hf"] = round(best[0] / out["hf_tokens_per_s"], 2)
    return out


def step_variants(dev: torch.device, variants: dict[str, dict], warmup: int = 6,
                  batches: list[dict] | None = None) -> dict:
    """Our Small 128x128 step (tiny in SMOKE) built each way of ``variants`` (name -> keyword
    arguments of :func:`ours_step`) from the same weights, on the same shard batches (or
    ``batches``), each on its own (dynamo reset between them; one failing keeps the others):
    each one's real tokens/s, last loss and seconds with building (and compiling), and the
    last over the first."""
    preset, B, T = ("tiny", 4, 32) if SMOKE else ("small", 128, 128)
    n, warmup = (3, 1) if SMOKE else (warmup + 8, warmup)
    batches = batches or shard_batches(B, T, n)
    out: dict = {"model": preset, "batch": B, "seq_len": T}
    for name, kw in variants.items():
        out |= measure(name, lambda kw=kw: ours_step(preset, B, T, dev, **kw)[0], batches, dev,
                       warmup)
    first, last = next(iter(variants)), list(variants)[-1]
    if f"{first}_tokens_per_s" in out and f"{last}_tokens_per_s" in out:
        out[f"{last}_over_{first}"] = round(out[f"{last}_tokens_per_s"]
                                            / out[f"{first}_tokens_per_s"], 2)
    return out


def layouts_stage(dev: torch.device) -> dict:
    """The command's padded layout (``train.unpad=false``) against the unpadded one on the
    shards' batches; then rows without padding (the command attends without a mask there:
    FlashAttention's case on a GPU)."""
    out = step_variants(dev, {"padded": {"unpad": False}, "unpadded": {"unpad": True}})
    preset, B, T = ("tiny", 4, 32) if SMOKE else ("small", 128, 128)
    full = [batch(B, T, i, torch.device("cpu")) for i in range(3 if SMOKE else 14)]
    out |= measure("pad_free", lambda: ours_step(preset, B, T, dev)[0], full, dev,
                   1 if SMOKE else 6)
    return out


def compile_stage(dev: torch.device) -> dict:
    return step_variants(dev, {"eager": {}, "compiled": {"compile": True}})


def graphs_stage(dev: torch.device) -> dict:
    """Compiled (``train.compile``) against replayed as CUDA graphs (``train.cuda_graphs``:
    each block's kernels recorded once, static shapes); and how many graphs inductor would not
    record (it then runs them without, silently)."""
    from torch._dynamo.utils import counters

    out = step_variants(dev, {"compiled": {"compile": True},
                              "graphs": {"compile": True, "cuda_graphs": True}})
    return {**out, "cudagraph_skips": counters["inductor"]["cudagraph_skips"]}


def vocab_stage(dev: torch.device) -> dict:
    """The generator's output layer at the vocabulary's width (30,522) and padded to a
    multiple of 64 (30,528, the GPU's default), in the command's layout otherwise."""
    import dataclasses

    from electra.runtime import Runtime

    command = Runtime(device=dev).model_kernels(False)
    return step_variants(dev, {f"multiple_{m}": {"kernels": dataclasses.replace(
        command, vocab_multiple=m)} for m in (1, 64)}, warmup=4)


def launches_stage(dev: torch.device) -> dict:
    """Our Small step at 128 x 128 under torch.profiler: kernels launched per step, the
    GPU's busy time per step against the step's wall time (launch-bound when far below),
    and the host ops most often called."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    B, T, n = (4, 32, 2) if SMOKE else (128, 128, 3)
    batches = shard_batches(B, T, 5 + n)
    step, _ = ours_step("tiny" if SMOKE else "small", B, T, dev)
    for b in batches[:5]:
        step(b)
    sync(dev)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=acts) as prof:
        t0 = time.perf_counter()
        for b in batches[5:]:
            step(b)
        sync(dev)
        wall = (time.perf_counter() - t0) / n
    ka = prof.key_averages()
    gpu = [k for k in ka if k.device_type == DeviceType.CUDA]
    busy = sum(getattr(k, "self_device_time_total", 0) for k in gpu) / n / 1e6
    ops = sorted((k for k in ka if k.device_type == DeviceType.CPU
                  and k.key.startswith("aten::")), key=lambda k: -k.count)
    launch = sum(k.count for k in ka if "LaunchKernel" in k.key) / n
    return {"model": "small", "batch": B, "seq_len": T, "kernels_per_step": round(
        sum(k.count for k in gpu) / n), "launch_calls_per_step": round(launch),
            "step_wall_ms": round(wall * 1e3, 2), "gpu_busy_ms": round(busy * 1e3, 2),
            "gpu_busy_fraction": round(busy / wall, 3) if wall else None,
            "top_host_ops": {k.key: round(k.count / n) for k in ops[:12]}}


def sst2_rows(n: int) -> list[str]:
    path = DATA / "SST-2" / "train.tsv"
    lines = path.read_text().splitlines()[1 : n + 1]
    return [line.split("\t")[0] for line in lines]


def finetune_stage(dev: torch.device) -> dict:
    """Fine-tuning steps (bf16, AdamW) on real SST-2 batches of 32: padded against unpadded."""
    import dataclasses

    from tokenizers import BertWordPieceTokenizer

    from electra.model.kernels import kernels_for
    from electra.runtime import autocast
    from electra.tasks.sequence.head import SequenceClassifier
    from electra.train.optim import adamw, param_groups

    tok = BertWordPieceTokenizer(str(DATA / "vocab.txt"), lowercase=True)
    tok.enable_truncation(128)
    tok.enable_padding()
    B, n = 32, (4 if SMOKE else 40)
    texts = sst2_rows(B * n)
    batches = []
    for i in range(n):
        enc = tok.encode_batch(texts[i * B : (i + 1) * B])
        batches.append({"input_ids": torch.tensor([e.ids for e in enc]).to(dev),
                        "attention_mask": torch.tensor([e.attention_mask for e in enc]).to(dev),
                        "labels": torch.randint(2, (B,)).to(dev)})
    pad = 1 - sum(float(b["attention_mask"].float().mean()) for b in batches) / n
    out, models = {"pad_fraction": round(pad, 3)}, {}
    cfg = model_preset("tiny" if SMOKE else "small", vocab_size=VOCAB)
    for unpad in (False, True):
        torch.manual_seed(0)
        kernels = dataclasses.replace(kernels_for(dev), unpad=unpad)
        model = SequenceClassifier(cfg, 2, kernels).to(dev).train()
        opt = adamw(param_groups(model, 0.01), lr=1e-4)

        def step(b: dict, model=model, opt=opt) -> torch.Tensor:
            with autocast(dev, PRECISION):
                loss = torch.nn.functional.cross_entropy(
                    model(b["input_ids"], b["attention_mask"]).float(), b["labels"])
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss.detach()

        t, _ = timed(step, batches, dev, 1 if SMOKE else 5)
        out["unpadded" if unpad else "padded"] = {"examples_per_s": round(B / t)}
        models[unpad] = model
    out["unpadded_over_padded"] = round(out["unpadded"]["examples_per_s"]
                                        / out["padded"]["examples_per_s"], 2)
    return out | inference(models, batches, dev)


def inference(models: dict, batches: list[dict], dev: torch.device) -> dict:
    """The two fine-tuned models' weights made equal, in eval mode (no attention dropout:
    unpadded attention may run FlashAttention's varlen kernel): logits agree, and the
    examples/s of each."""
    from electra.runtime import autocast

    padded, unpadded = models[False].eval(), models[True].eval()
    unpadded.load_state_dict(padded.state_dict())
    out, logits = {}, {}
    with torch.no_grad(), autocast(dev, PRECISION):
        for name, model in (("padded", padded), ("unpadded", unpadded)):
            logits[name] = torch.cat([model(b["input_ids"], b["attention_mask"]).float()
                                      for b in batches])
            t, _ = timed(lambda b, m=model: m(b["input_ids"], b["attention_mask"]).sum(),
                         batches, dev, 1 if SMOKE else 5)
            out[f"eval_{name}_examples_per_s"] = round(len(batches[0]["labels"]) / t)
    out["eval_logits_max_abs_diff"] = float((logits["padded"] - logits["unpadded"]).abs().max())
    from electra.model.kernels import _varlen_attn

    out["varlen_attn_available"] = _varlen_attn() is not None
    return out


def electra(*args: str, log: Path, env: dict | None = None, torchrun: bool = False,
            timeout: float = 240) -> None:
    """Run an `electra` command (under torchrun with one process: ``torchrun``)."""
    cmd = [sys.executable, *(["-m", "torch.distributed.run", "--standalone",
                              "--nproc_per_node", "1"] if torchrun else []), "-m", "electra",
           *args]
    full_env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **(env or {})}
    log.parent.mkdir(parents=True, exist_ok=True)  # each stage is its own process: the
    with open(log, "w") as f:  # work folder may not exist yet (the first H200 run's nccl)
        done = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=full_env,
                              timeout=timeout)
    if done.returncode:
        tail = log.read_text().splitlines()[-3:]
        raise RuntimeError(f"`electra {args[0]}` exited {done.returncode}: {tail}")


def make_data(data: Path) -> None:
    """``make gpu-data``'s shards: the demo's corpus (Python's own documentation; SMOKE: the
    SST-2 rows) prepared with BERT's vocabulary at 128 and 512 tokens (SMOKE: 32 and 64) into
    ``data/demo-T``, and packed (``--pack``: rows of several documents) into ``data/pack-T``
    (replaced), beside the SST-2 rows and vocab.txt already there."""
    corpus = WORK / "corpus"
    shutil.rmtree(corpus, ignore_errors=True)
    corpus.mkdir(parents=True)
    if SMOKE:
        (corpus / "train.txt").write_text("\n\n".join(sst2_rows(4000)))
    else:
        from electra.experiments.demo import write_corpus

        write_corpus(corpus)
    for T in SEQ_LENS:
        for name, pack in (("demo", []), ("pack", ["--pack"])):
            electra("prepare", "--input", str(corpus / "train.txt"), "--tokenizer",
                    str(data / "vocab.txt"), "--out", str(data / f"{name}-{T}"), "--seq-len",
                    str(T), "--val-fraction", "0.05", "--overwrite", *pack,
                    log=WORK / f"prepare-{name}-{T}.log")


def nccl_stage() -> dict:
    data, out = DATA / f"demo-{SEQ_LENS[0]}", {}
    for mode in ("ddp", "fsdp"):
        run = WORK / f"nccl-{mode}"
        shutil.rmtree(run, ignore_errors=True)
        electra("pretrain", "--preset", "tiny" if SMOKE else "small", "--data", str(data),
                "--out", str(run), "--quiet", "--set", "train.max_steps=3", "--set",
                "train.warmup_steps=1", "--set", "train.eval_every=0", "--set",
                "train.batch_size=16", "--set", f"train.parallel={mode}",
                log=WORK / f"nccl-{mode}.log", env={"ELECTRA_PROCESS_GROUP": "1"},
                torchrun=True, timeout=120)
        last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
        out[mode] = {"loss": round(last["loss"], 4), "step": last["step"]}
    return out


def compare_stage(seconds_left: float) -> dict:
    """`electra compare`, electra against mlm, with the pretraining budget the time allows."""
    data = DATA / f"demo-{SEQ_LENS[0]}"
    budget = 3 if SMOKE else max(20, int((seconds_left - 120) / 2.4))  # two objectives,
    # each pretrained then fine-tuned twice (50% and 100%), beside random init
    run = WORK / "compare"
    shutil.rmtree(run, ignore_errors=True)
    rows = 200 if SMOKE else 4000
    electra("compare", "--data", str(data), "--preset", "tiny" if SMOKE else "small",
            "--set", "train.batch_size=" + ("16" if SMOKE else "128"), "--set",
            "train.warmup_steps=100", "--set", "train.max_steps=10000", "--set",
            "train.eval_every=0", "--set", "train.save_every=100000",
            "--objectives", "electra,mlm", "--budget", f"{budget}s", "--fractions",
            "1" if SMOKE else "0.5,1",
            "--tasks", f"sst2:max_train_examples={rows}", "--glue", str(DATA),
            "--seeds", "1", *(["--finetune-set", "epochs=1"] if SMOKE else []),
            "--out", str(run), "--quiet", log=WORK / "compare.log",
            timeout=max(60, seconds_left - 10))
    results = json.loads((run / "results.json").read_text())
    return {"budget_s": budget, "models": {m["model"]: {
        "pretrain_flops": m["pretrain_flops"], "steps": m["steps"],
        **{t: s["median"] for t, s in m["tasks"].items()}} for m in results["models"]}}


SEQ_LENS = (32, 64) if SMOKE else (128, 512)
ALL = ("default", "unpad", "graphs", "compile", "hf", "nocast")
# What users run, first: Base at 512 (the headline) and 128, Small at 128, each at its preset's
# batch on packed rows (SMOKE: the tiny model), every lever measured at Base.
SCALES = ([("tiny", 64, ALL), ("tiny", 32, ("default", "unpad", "hf")),
           ("small", 32, ("default", "hf"))] if SMOKE else
          [("base", 512, ALL), ("base", 128, ("default", "unpad", "graphs", "hf")),
           ("small", 128, ("default", "unpad", "graphs", "hf"))])
SIZES = ([("tiny", 4, 32), ("tiny", 4, 64)] if SMOKE else
         [("small", 128, 128), ("base", 128, 128), ("base", 32, 512)])


def stages() -> dict[str, tuple[float, float, Callable[[Kit], dict]]]:
    """Each stage in the order it runs: (the least time it needs to start, the most it may
    take, its function). The GPU's times are estimates from the CPU rehearsal and the
    kernels' counts; the last stages are dropped first when the time left is short."""
    def f(seconds: tuple[float, float], smoke: tuple[float, float],
          fn: Callable[[Kit], dict]) -> tuple[float, float, Callable[[Kit], dict]]:
        return (*(smoke if SMOKE else seconds), fn)

    out = {"env": f((20, 40), (5, 60), lambda k: env(k.dev))}
    for (preset, T, variants), seconds in zip(SCALES, ((90, 200), (60, 120), (40, 80)),
                                              strict=True):
        out[f"scale_{preset}_{T}"] = f(seconds, (15, 120), lambda k, p=preset, t=T, v=variants:
                                       scale_stage(k, p, t, v))
    out["fp32"] = f((20, 40), (5, 60),
                    lambda k: check_fp32(k.dev, "tiny" if SMOKE else "small", 8, 128))
    for preset, B, T in SIZES:
        out[f"step_{preset}_{B}x{T}"] = f((30, 60), (10, 90), lambda k, p=preset, b=B, t=T:
                                        compare_steps(p, b, t, k.dev, k.peak()))
    out |= {"finetune": f((25, 50), (5, 60), lambda k: finetune_stage(k.dev)),
            "layouts": f((25, 50), (10, 90), lambda k: layouts_stage(k.dev)),
            "compile": f((60, 120), (20, 90), lambda k: compile_stage(k.dev)),
            "nccl": f((30, 60), (20, 90), lambda k: nccl_stage()),
            "vocab": f((20, 40), (10, 60), lambda k: vocab_stage(k.dev)),
            "graphs": f((60, 120), (10, 90), lambda k: graphs_stage(k.dev)),
            "launches": f((20, 50), (10, 60), lambda k: launches_stage(k.dev)),
            "compare": f((90, 400), (30, 200), lambda k: compare_stage(k.left()))}
    return out


def run_all(results: Path) -> None:
    """Every stage in its own process, each given the most it may take or the time left
    (whichever is less); one that would not get the least it needs is skipped, one that
    outruns its time is stopped; either way its line says so."""
    start = time.perf_counter()
    for name, (least, most, _) in stages().items():
        left = TOTAL_SECONDS - (time.perf_counter() - start)
        if left < least:
            write_line(results, {"stage": name, "ok": None, "skipped": f"{left:.0f} s left, "
                                 f"needs ~{least:.0f}"})
            continue
        limit = min(most, left)
        cmd = [sys.executable, "-u", __file__, "stage", name, str(results), "--seconds",
               str(round(limit))]
        before = len(read_lines(results))
        try:
            done = subprocess.run(cmd, timeout=limit + 5, stdout=sys.stdout.fileno(),
                                  stderr=subprocess.PIPE, text=True)
            code, tail = done.returncode, done.stderr[-400:]
        except subprocess.TimeoutExpired:
            code, tail = None, ""
        if len(read_lines(results)) == before:  # it died before writing its line
            write_line(results, {"stage": name, "ok": False, "seconds": round(limit),
                                 **({"timed_out": f"stopped at its limit of {limit:.0f} s"}
                                    if code is None else
                                    {"error": f"exited {code}", "stderr_tail": tail})})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["all", "stage", "data"])
    ap.add_argument("args", nargs="+", help="all RESULTS | stage NAME RESULTS | data DIR")
    ap.add_argument("--seconds", type=float, default=TOTAL_SECONDS)
    args = ap.parse_args()
    if args.what == "data":
        make_data(Path(args.args[0]))
        return 0
    if not SMOKE and not torch.cuda.is_available():
        print("gpu_kit: no CUDA device (SMOKE=1 rehearses it on a CPU)", file=sys.stderr)
        return 2
    if not all((DATA / p).exists() for p in ("SST-2/train.tsv", "vocab.txt",
                                             *(f"demo-{T}/meta.json" for T in SEQ_LENS))):
        print(f"gpu_kit: {DATA} is missing or incomplete; run `make gpu-data` where "
              f"../shared is", file=sys.stderr)
        return 2
    if args.what == "all":
        results = Path(args.args[0])
        results.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(KeyboardInterrupt):
            run_all(results)
        return 0
    name, results = args.args[0], Path(args.args[1])
    if SMOKE:  # the rehearsal traces with dynamo, without inductor's minutes of CPU codegen
        compile_ = torch.nn.Module.compile  # (nor reduce-overhead's CUDA graphs)

        def eager(self: torch.nn.Module, *a: Any, mode: str | None = None, **kw: Any) -> None:
            compile_(self, *a, backend="eager", **kw)

        torch.nn.Module.compile = eager  # type: ignore[method-assign]
    kit = Kit(results, args.seconds)
    kit.stage(name, lambda: stages()[name][2](kit))
    return 0


if __name__ == "__main__":
    sys.exit(main())
