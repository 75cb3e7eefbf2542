"""The GPU kit: what a lent GPU machine measures, in two commands of at most 5 minutes each.

    make gpu-data                                  # here, once: bench/data (ignored by git)
    python bench/gpu_kit.py 1 RESULTS              # there: checks and step measurements
    python bench/gpu_kit.py 2 RESULTS              # there: `electra compare` in the time left
    SMOKE=1 python bench/gpu_kit.py 1 RESULTS      # a rehearsal on a CPU, tiny sizes (tests)

Each stage appends one JSON line to ``RESULTS/kit.jsonl`` (and prints it) as soon as it
ends, failed or not, so a command cut short keeps every stage before the cut; a stage that
would not fit in the time left is recorded as skipped. Work goes to ``/tmp/electra-kit``
(``KIT_WORK``), never to RESULTS. The data comes from inside the repo: ``bench/data`` holds a
few thousand SST-2 rows (``SST-2/``) and BERT's vocabulary (``make gpu-data`` copies them from
../shared/data, which the GPU machine has not); the pretraining corpus is the demo's (Python's
own documentation, built where it runs). Needs transformers for the peer step.

Part 1 (``1``), each on one GPU:
- ``env``: device, torch, the measured bf16 matmul peak and the device's spec peak.
- ``fp32``: one batch of the ELECTRA objective on the CPU and the GPU from the same weights
  and draws (TF32 off): every loss within 1e-4, the same samples.
- ``step_<model>_<B>x<T>``: our pretraining step (``electra.pretrain.train_step``, what
  `electra pretrain` runs: bf16 autocast, fused AdamW, the sync-free step) against
  transformers' ``ElectraForMaskedLM`` + ``ElectraForPreTraining`` (SDPA attention, the same
  masking, Gumbel-max sampling, bf16 autocast, fused AdamW): tokens/s, ratio, MFU against the
  spec and the measured peak, for Small at 128x128 and Base at 128x128 and 32x512.
- ``compile``: the same step of ours eager and with ``train.compile`` (each block compiled).
- ``step_without_padding``: ours on rows without padding (attention without a mask:
  FlashAttention), Small 128x128.
- ``finetune``: fine-tuning steps of ELECTRA-Small on SST-2 batches, padded against unpadded;
  then both in eval mode from the same weights (unpadded attention through the varlen
  kernel where torch has it): logits' largest difference, examples/s.
- ``nccl``: `electra pretrain` under torchrun with one process in a process group
  (``ELECTRA_PROCESS_GROUP=1``), DDP and FSDP2, 3 steps each.

Part 2 (``2``):
- ``vocab``: our Small 128x128 step with the generator's output layer 30,522 wide and padded
  to 30,528 (a multiple of 64, what a GPU's kernels do by default), from the same weights.
- ``graphs``: the same step compiled, and compiled with ``train.cuda_graphs`` (each block's
  kernels recorded as CUDA graphs and replayed).
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
PART_SECONDS = float(os.environ.get("KIT_SECONDS", "60" if SMOKE else "285"))
# The GPU's precision; the CPU rehearsal takes the CPU's own (``auto``: bf16 only where it has
# bf16 units; emulated, bf16 made the rehearsal's steps many times slower on an AVX2-only EPYC)
PRECISION = "auto" if SMOKE else "bf16"
SPEC_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L4": 121e12, "A10": 125e12}

sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402

from electra.config import ObjectiveConfig, model_preset  # noqa: E402
from electra.io.tokenizer import SpecialTokens  # noqa: E402

SPECIAL = SpecialTokens(pad=0, unk=100, cls=101, sep=102, mask=103)  # bert-base-uncased
VOCAB = 30522


class Kit:
    """The stages of one part, their deadline and their results file."""

    def __init__(self, results: Path) -> None:
        self.results = results
        results.mkdir(parents=True, exist_ok=True)
        self.start = time.perf_counter()
        self.dev = torch.device("cpu" if SMOKE else "cuda")

    def left(self) -> float:
        return PART_SECONDS - (time.perf_counter() - self.start)

    def stage(self, name: str, needs: float, fn: Callable[[], dict]) -> dict:
        """Run ``fn`` if ``needs`` seconds are left; append its line either way."""
        t0 = time.perf_counter()
        if self.left() < needs:
            record = {"stage": name, "ok": None, "skipped": f"{self.left():.0f} s left, "
                      f"needs ~{needs:.0f}"}
        else:
            try:
                record = {"stage": name, "ok": True, **fn()}
            except Exception as err:  # a failed stage is recorded; the next ones still run
                record = {"stage": name, "ok": False, "error": f"{type(err).__name__}: {err}"[
                    :500], "where": traceback.format_exc().splitlines()[-3:]}
        record["seconds"] = round(time.perf_counter() - t0, 1)
        with open(self.results / "kit.jsonl", "a") as f:
            f.write(json.dumps(record, default=str) + "\n")
        print(json.dumps(record, default=str), flush=True)
        return record


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
    from electra.objectives.masking import Noise
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
        o = model(b["input_ids"], b["attention_mask"], b["token_type_ids"], Noise(
            *(None if t is None else t.to(d) for t in (
                noise.scores, noise.mask_u, noise.random_ids, noise.sample_u, noise.span_u))))
        out[name] = {k: float(v.detach()) for k, v in o.losses.items()} | {
            "loss": float(o.loss.detach())}
        samples[name] = o.corrupted_ids.cpu()
    diff = {k: abs(out["cpu"][k] - out["gpu"][k]) for k in out["cpu"]}
    same = bool(torch.equal(samples["cpu"], samples["gpu"]))
    return {"fp32_losses_cpu": out["cpu"], "fp32_abs_diff": diff, "same_samples": same,
            "fp32_ok": same and max(diff[k] for k in ("gen_loss", "disc_loss")) <= 1e-4
            and diff["loss"] <= 1e-4 * max(1.0, abs(out["cpu"]["loss"]))}


def batch(B: int, T: int, seed: int, dev: torch.device, padded: bool = False) -> dict:
    """Random tokens in BERT's vocabulary, [CLS] a [SEP] b [SEP]; ``padded``: rows of
    random lengths (pretraining shards are ~7% padding)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, VOCAB, (B, T), generator=g)
    lengths = (torch.randint(T // 2, T + 1, (B,), generator=g) if padded
               else torch.full((B,), T))
    ids[:, 0] = SPECIAL.cls
    ids[:, T // 2] = SPECIAL.sep
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    ids[torch.arange(B), lengths - 1] = SPECIAL.sep
    ids = ids * mask
    types = (torch.arange(T)[None, :] > T // 2).long() * mask
    return {"input_ids": ids.to(dev), "attention_mask": mask.to(dev),
            "token_type_ids": types.to(dev)}


def ours_step(preset: str, B: int, T: int, dev: torch.device, compile: bool = False,
              dropout: float = 0.1, kernels: Any = None, cuda_graphs: bool = False
              ) -> tuple[Callable[[dict], torch.Tensor], int]:
    """Our pretraining step (the command's), built from seed 0: (step(batch) -> loss, its
    training FLOPs). ``kernels``: other than the device's (``kernels_for``); ``compile``,
    ``cuda_graphs``: ``train.compile``, ``train.cuda_graphs``."""
    from electra.config import RunConfig, TrainConfig
    from electra.model.kernels import kernels_for
    from electra.objectives.flops import step_flops_per_sequence
    from electra.objectives.pretraining import ElectraPretrainingModel
    from electra.pretrain import make_trainer, train_step
    from electra.train.runtime import Runtime

    cfg = model_preset(preset, vocab_size=VOCAB, hidden_dropout=dropout,
                       attention_dropout=dropout, max_position_embeddings=max(512, T))
    obj = ObjectiveConfig(max_predictions=int(0.155 * T))
    run = RunConfig(model=cfg, objective=obj, train=TrainConfig(
        batch_size=B, precision=PRECISION, warmup_steps=0, compile=compile,
        cuda_graphs=cuda_graphs))
    torch.manual_seed(0)
    rt = Runtime(device=dev)
    model = ElectraPretrainingModel(cfg, obj, SPECIAL, kernels or kernels_for(dev))
    trainer = make_trainer(model, run, rt)

    def step(b: dict) -> torch.Tensor:
        return train_step(trainer, b, run, SPECIAL, B)["loss"]  # on the device: read later

    return step, step_flops_per_sequence(cfg, obj, T) * B


def hf_step(preset: str, B: int, T: int, dev: torch.device) -> Callable[[dict], float]:
    """transformers' ELECTRA pretraining step, as a transformers-based script writes it."""
    from transformers import ElectraForMaskedLM, ElectraForPreTraining

    from electra.io.hf_format import to_hf_config
    from electra.objectives.masking import mask_inputs
    from electra.train.optim import adamw, param_groups
    from electra.train.runtime import autocast

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
        ids, am, tt = b["input_ids"], b["attention_mask"], b["token_type_ids"]
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
            loss = g_out.loss + obj.disc_weight * d_out.loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

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


def compare_steps(preset: str, B: int, T: int, dev: torch.device, peak: dict) -> dict:
    n, warmup = (3, 1) if SMOKE else (12, 4)
    batches = [batch(B, T, i, dev, padded=True) for i in range(n)]
    ours, flops = ours_step(preset, B, T, dev)
    t_ours, loss_ours = timed(ours, batches, dev, warmup)
    del ours
    out = {"model": preset, "batch": B, "seq_len": T, "ours_tokens_per_s": round(B * T / t_ours),
           "ours_loss": round(loss_ours, 3), "ours_mfu_measured_peak": round(
               flops / t_ours / peak["measured"], 3)}
    if peak.get("spec"):
        out["ours_mfu_spec"] = round(flops / t_ours / peak["spec"], 3)
    try:
        hf = hf_step(preset, B, T, dev)
    except ImportError as err:
        return {**out, "hf": f"not run: {err}"}
    t_hf, loss_hf = timed(hf, batches, dev, warmup)
    return {**out, "hf_tokens_per_s": round(B * T / t_hf), "hf_loss": round(loss_hf, 3),
            "ours_over_hf": round(t_hf / t_ours, 2)}


def pad_free_step(preset: str, B: int, T: int, dev: torch.device, peak: dict) -> dict:
    """Our step on rows without padding: attention gets no mask (FlashAttention on a GPU)."""
    n, warmup = (3, 1) if SMOKE else (12, 4)
    step, flops = ours_step(preset, B, T, dev)
    t, loss = timed(step, [batch(B, T, i, dev) for i in range(n)], dev, warmup)
    return {"model": preset, "batch": B, "seq_len": T, "tokens_per_s": round(B * T / t),
            "mfu_measured_peak": round(flops / t / peak["measured"], 3), "loss": round(loss, 3)}


def step_variants(dev: torch.device, variants: dict[str, dict], warmup: int = 6) -> dict:
    """Our Small 128x128 step (tiny in SMOKE) built each way of ``variants`` (name -> keyword
    arguments of :func:`ours_step`) from the same weights, on the same batches: each one's
    tokens/s, last loss and seconds with building (and compiling), and the last over the first."""
    preset, B, T = ("tiny", 4, 32) if SMOKE else ("small", 128, 128)
    n, warmup = (3, 1) if SMOKE else (warmup + 8, warmup)
    batches = [batch(B, T, i, dev, padded=True) for i in range(n)]
    out: dict = {"model": preset, "batch": B, "seq_len": T}
    for name, kw in variants.items():
        t0 = time.perf_counter()
        t, loss = timed(ours_step(preset, B, T, dev, **kw)[0], batches, dev, warmup)
        out[f"{name}_tokens_per_s"] = round(B * T / t)
        out[f"{name}_last_loss"] = round(loss, 4)
        out[f"{name}_total_s"] = round(time.perf_counter() - t0, 1)
    first, last = next(iter(variants)), list(variants)[-1]
    out[f"{last}_over_{first}"] = round(out[f"{last}_tokens_per_s"]
                                        / out[f"{first}_tokens_per_s"], 2)
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
    multiple of 64 (30,528, the GPU's default)."""
    import dataclasses

    from electra.model.kernels import kernels_for

    return step_variants(dev, {f"multiple_{m}": {"kernels": dataclasses.replace(
        kernels_for(dev), vocab_multiple=m)} for m in (1, 64)}, warmup=4)


def sst2_rows(n: int) -> list[str]:
    path = DATA / "SST-2" / "train.tsv"
    lines = path.read_text().splitlines()[1 : n + 1]
    return [line.split("\t")[0] for line in lines]


def finetune_stage(dev: torch.device) -> dict:
    """Fine-tuning steps (bf16, AdamW) on real SST-2 batches of 32: padded against unpadded."""
    import dataclasses

    from tokenizers import BertWordPieceTokenizer

    from electra.model.kernels import kernels_for
    from electra.tasks.sequence import SequenceClassifier
    from electra.train.optim import adamw, param_groups
    from electra.train.runtime import autocast

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
    from electra.train.runtime import autocast

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
    with open(log, "w") as f:
        done = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=full_env,
                              timeout=timeout)
    if done.returncode:
        tail = log.read_text().splitlines()[-3:]
        raise RuntimeError(f"`electra {args[0]}` exited {done.returncode}: {tail}")


def demo_data() -> Path:
    """Pretraining data, packed once per machine in WORK: the demo's corpus (Python's own
    documentation, 4 MB) with its tokenizer; SMOKE: the SST-2 rows with BERT's vocabulary
    (seconds, not a minute)."""
    folder = WORK / "demo"
    if not (folder / "data" / "meta.json").is_file():
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        if SMOKE:
            (folder / "text.txt").write_text("\n\n".join(sst2_rows(4000)))
            electra("prepare", "--input", str(folder / "text.txt"), "--tokenizer",
                    str(DATA / "vocab.txt"), "--out", str(folder / "data"), "--seq-len", "32",
                    "--val-fraction", "0.05", "--workers", "1", log=WORK / "prepare.log")
        else:
            electra("demo", "--out", str(folder), "--steps", "1", "--quiet",
                    log=WORK / "demo.log")
    return folder / "data"


def nccl_stage() -> dict:
    data, out = demo_data(), {}
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
    data = demo_data()
    budget = 5 if SMOKE else max(20, int((seconds_left - 120) / 2.4))  # two objectives,
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
            "--seeds", "1", "--out", str(run), "--quiet", log=WORK / "compare.log",
            timeout=max(60, seconds_left - 10))
    results = json.loads((run / "results.json").read_text())
    return {"budget_s": budget, "models": {m["model"]: {
        "pretrain_flops": m["pretrain_flops"], "steps": m["steps"],
        **{t: s["median"] for t, s in m["tasks"].items()}} for m in results["models"]}}


def part1(kit: Kit) -> None:
    dev = kit.dev
    record = kit.stage("env", 5, lambda: env(dev))
    peak = {"measured": (record.get("bf16_matmul_tflops") or 1) * 1e12,
            "spec": (record.get("spec_bf16_tflops") or 0) * 1e12 or None}
    kit.stage("fp32", 10, lambda: check_fp32(dev, "tiny" if SMOKE else "small", 8, 128))
    sizes = ([("tiny", 4, 32), ("tiny", 4, 64)] if SMOKE else
             [("small", 128, 128), ("base", 128, 128), ("base", 32, 512)])
    for preset, B, T in sizes:
        kit.stage(f"step_{preset}_{B}x{T}", 15 if SMOKE else 30,
                  lambda p=preset, b=B, t=T: compare_steps(p, b, t, dev, peak))
    kit.stage("step_without_padding", 10 if SMOKE else 20,
              lambda: pad_free_step(*sizes[0], dev, peak))
    kit.stage("compile", 20 if SMOKE else 70, lambda: compile_stage(dev))
    kit.stage("finetune", 5 if SMOKE else 25, lambda: finetune_stage(dev))
    kit.stage("nccl", 20 if SMOKE else 60, nccl_stage)


def part2(kit: Kit) -> None:
    kit.stage("vocab", 10 if SMOKE else 25, lambda: vocab_stage(kit.dev))
    kit.stage("graphs", 10 if SMOKE else 80, lambda: graphs_stage(kit.dev))
    kit.stage("compare", 30 if SMOKE else 120, lambda: compare_stage(kit.left()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("part", choices=["1", "2"])
    ap.add_argument("results", type=Path, help="folder the stages' JSON lines go to")
    args = ap.parse_args()
    if not SMOKE and not torch.cuda.is_available():
        print("gpu_kit: no CUDA device (SMOKE=1 rehearses it on a CPU)", file=sys.stderr)
        return 2
    if not (DATA / "SST-2" / "train.tsv").is_file():
        print(f"gpu_kit: {DATA} is missing; run `make gpu-data` where ../shared is",
              file=sys.stderr)
        return 2
    if SMOKE:  # the rehearsal traces with dynamo, without inductor's minutes of CPU codegen
        compile_ = torch.nn.Module.compile  # (nor reduce-overhead's CUDA graphs)

        def eager(self: torch.nn.Module, *args: Any, mode: str | None = None, **kw: Any) -> None:
            compile_(self, *args, backend="eager", **kw)

        torch.nn.Module.compile = eager  # type: ignore[method-assign]
    kit = Kit(args.results)
    with contextlib.suppress(KeyboardInterrupt):
        (part1 if args.part == "1" else part2)(kit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
