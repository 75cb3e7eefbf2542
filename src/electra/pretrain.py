"""The pretraining loop: setup -> train step -> validate -> checkpoint, resumable exactly.

    RUN/config.json        the resolved config (model, objective, train) + data facts
    RUN/metrics.jsonl      one line per logged step (and val_* after each validation)
    RUN/tb/                TensorBoard event files
    RUN/checkpoints/       atomic checkpoints, the last K kept
    RUN/discriminator/     final weights + config + tokenizer, for fine-tuning and export
    RUN/generator/         the same for the generator

On CPU in fp32 with the same seed, a run stopped and resumed with ``--resume`` produces the
same metrics and final weights as one that never stopped: every random stream (dropout,
masking, sampling, data order) is saved and restored with the checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from electra.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from electra.config import RunConfig
from electra.data.loader import BatchLoader, ShardDataset
from electra.errors import UserError
from electra.model import ElectraPretrainingModel, count_parameters
from electra.objective import electra_forward
from electra.optim import build_optimizer, build_scheduler
from electra.pretrained import save_pretrained

# Settings that may change when a run is resumed; all others must match the saved run.
RESUMABLE_CHANGES = {"log_every", "eval_every", "eval_batches", "save_every",
                     "keep_checkpoints", "threads", "max_nonfinite_skips"}
TIMING_KEYS = {"tokens_per_s", "elapsed_s"}


class TrainingDiverged(UserError):
    """The loss became non-finite more often than allowed."""


@dataclass
class PretrainOptions:
    data: str
    out: str
    config: RunConfig
    resume: bool = False
    overwrite: bool = False
    progress: bool = True
    device: str = "auto"
    stop_after: int | None = None  # stop (with a checkpoint) after this many steps: for tests
    init: str | None = None  # start from these weights (a run folder: discriminator/, generator/)


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """The one place precision becomes an autocast context (fp32: none)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device.type, dtype=dtype)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _prepare_run_dir(opt: PretrainOptions, cfg_dict: dict[str, Any]) -> Path | None:
    """Create or check RUN; returns the checkpoint to resume from, if any."""
    out = Path(opt.out)
    config_path = out / "config.json"
    holds_run = out.exists() and any(out.iterdir())
    if holds_run and not opt.resume and not opt.overwrite:
        raise UserError(f"--out {out} already holds a run; pass --resume to continue it or "
                        f"--overwrite to start again")
    if holds_run and opt.overwrite and not opt.resume:
        if not config_path.is_file() and not (out / "checkpoints").is_dir():
            raise UserError(f"--out {out} holds files that are not an electra run; refusing "
                            f"to delete them, choose another folder")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    if opt.resume and config_path.is_file():
        saved = json.loads(config_path.read_text())
        _check_same_run(saved, cfg_dict)
        ckpt = latest_checkpoint(out / "checkpoints")
        return ckpt
    return None


def _check_same_run(saved: dict[str, Any], now: dict[str, Any]) -> None:
    diffs = []
    for section in ("model", "objective", "train"):
        for key, value in now[section].items():
            if section == "train" and key in RESUMABLE_CHANGES:
                continue
            if saved[section].get(key) != value:
                diffs.append(f"{section}.{key}: run has {saved[section].get(key)!r}, "
                             f"now {value!r}")
    for key in ("tokenizer_sha256", "data_vocab_size"):
        if saved.get(key) != now.get(key):
            diffs.append(f"{key}: run has {saved.get(key)!r}, data has {now.get(key)!r}")
    if diffs:
        raise UserError(f"--resume: the settings differ from the run being resumed ("
                        f"{'; '.join(diffs[:3])}); resume with the same settings or start "
                        f"a new --out")


def _rng_state(masking_rng: torch.Generator) -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "masking": masking_rng.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any], masking_rng: torch.Generator) -> None:
    torch.set_rng_state(state["torch"])
    masking_rng.set_state(state["masking"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class MetricsLog:
    """metrics.jsonl (truncated to the resume step) and TensorBoard, written on rank 0."""

    def __init__(self, run: Path, start_step: int, enabled: bool = True) -> None:
        self.enabled = enabled
        self.path = run / "metrics.jsonl"
        self.tb = None
        if not enabled:
            return
        if self.path.exists():  # drop lines past the checkpoint we resume from
            kept = [line for line in self.path.read_text().splitlines()
                    if line.strip() and json.loads(line)["step"] <= start_step]
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text("".join(line + "\n" for line in kept))
            tmp.replace(self.path)
        self.file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(run / "tb"), purge_step=start_step or None)
        except ImportError:  # tensorboard is optional
            self.tb = None

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()
        if self.tb is not None:
            for key, value in record.items():
                if key != "step" and isinstance(value, int | float) and math.isfinite(value):
                    self.tb.add_scalar(key, value, record["step"])

    def close(self) -> None:
        if self.enabled:
            self.file.close()
            if self.tb is not None:
                self.tb.close()


@torch.no_grad()
def validate(model: ElectraPretrainingModel, data: ShardDataset, run_cfg: RunConfig,
             device: torch.device, batch_size: int, batches: int) -> dict[str, float]:
    """Held-out generator loss/accuracy and discriminator loss/accuracy/ROC-AUC.

    The masking and sampling seed is fixed, so every validation scores the same corruption
    pattern of the same examples and the numbers are comparable over the run.
    """
    from sklearn.metrics import roc_auc_score

    was_training = model.training
    model.eval()
    rng = torch.Generator(device).manual_seed(run_cfg.train.seed + 1_000_003)
    loader = BatchLoader(data, min(batch_size, len(data)), shuffle=False)
    n = min(batches, max(1, len(data) // loader.batch_size))
    sums: dict[str, float] = {}
    scores, labels = [], []
    for _ in range(n):
        batch = {k: v.to(device) for k, v in next(loader).items()}
        with autocast(device, run_cfg.train.precision):
            out = electra_forward(model, batch["input_ids"], batch["attention_mask"],
                                  batch["token_type_ids"], data.special, run_cfg.objective, rng)
        real = batch["attention_mask"].bool()
        scores.append(out.disc_logits.float()[real].cpu())
        labels.append(out.labels[real].cpu())
        for key, value in (("gen_loss", out.gen_loss), ("disc_loss", out.disc_loss),
                           *out.stats.items()):
            sums[key] = sums.get(key, 0.0) + float(value)
    model.train(was_training)
    y = torch.cat(labels).numpy()
    s = torch.cat(scores).numpy()
    result = {f"val_{k}": v / n for k, v in sums.items() if k != "n_tokens"}
    result["val_disc_auc"] = float(roc_auc_score(y, s)) if 0 < y.sum() < len(y) else float("nan")
    result["val_baseline_acc"] = 1.0 - result["val_replaced_frac"]  # all-original guess
    return result


def _load_init(folder: str, run_model: Any) -> tuple[Any, Any, Any]:
    """(model config, discriminator, generator) to start from; dropout from the run config."""
    from electra.pretrained import load_pretrained

    disc = load_pretrained(folder, "discriminator")
    gen = load_pretrained(folder, "generator")
    d, g = disc.config, gen.config
    cfg = d.replace(generator_size=g.hidden_size / d.hidden_size,
                    hidden_dropout=run_model.hidden_dropout,
                    attention_dropout=run_model.attention_dropout,
                    share_embeddings=run_model.share_embeddings)
    derived = cfg.generator_config()
    if (derived.hidden_size, derived.num_heads, derived.intermediate_size) != (
            g.hidden_size, g.num_heads, g.intermediate_size):
        raise UserError(f"--init {folder}: the generator ({g.hidden_size} wide, {g.num_heads} "
                        f"heads, FFN {g.intermediate_size}) is not a width multiple of the "
                        f"discriminator ({d.hidden_size}, {d.num_heads}, "
                        f"{d.intermediate_size})")
    return cfg, disc, gen


def pretrain(opt: PretrainOptions, rank: int = 0, world_size: int = 1) -> dict[str, Any]:
    """Run (or resume) pretraining; returns the last logged metrics."""
    cfg = opt.config
    tc = cfg.train
    if tc.threads:
        torch.set_num_threads(tc.threads)
    device = resolve_device(opt.device)
    data = ShardDataset(opt.data, "train")
    val = ShardDataset(opt.data, "val") if "val" in data.meta["splits"] else None
    init = _load_init(opt.init, cfg.model) if opt.init else None
    model_cfg = (init[0] if init else cfg.model).replace(vocab_size=data.vocab_size,
                                                        pad_token_id=data.special.pad)
    if init and init[0].vocab_size != data.vocab_size:
        raise UserError(f"--init {opt.init}: the model's vocabulary has {init[0].vocab_size} "
                        f"tokens but --data {opt.data} was prepared with {data.vocab_size}; "
                        f"prepare the data with the model's tokenizer")
    if data.seq_len > model_cfg.max_position_embeddings:
        raise UserError(f"--data {opt.data}: sequence length {data.seq_len} exceeds the "
                        f"model's {model_cfg.max_position_embeddings} positions; prepare with "
                        f"a shorter --seq-len or --set model.max_position_embeddings="
                        f"{data.seq_len}")
    cfg = RunConfig(model=model_cfg, objective=cfg.objective, train=tc)
    per_rank = tc.batch_size // world_size
    if per_rank * world_size != tc.batch_size or per_rank % tc.grad_accum:
        raise UserError(f"train.batch_size={tc.batch_size} does not split into "
                        f"{world_size} process(es) x train.grad_accum={tc.grad_accum} equal "
                        f"micro-batches; choose a batch divisible by both")
    micro = per_rank // tc.grad_accum
    cfg_dict = {**cfg.to_dict(), "tokenizer_sha256": data.meta["tokenizer_sha256"],
                "data_vocab_size": data.vocab_size, "seq_len": data.seq_len}

    run = Path(opt.out)
    resume_from = _prepare_run_dir(opt, cfg_dict) if rank == 0 else None
    if rank == 0:
        (run / "config.json").write_text(json.dumps(cfg_dict, indent=2))
        shutil.copyfile(data.folder / "tokenizer.json", run / "tokenizer.json")

    torch.manual_seed(tc.seed)
    model = ElectraPretrainingModel(model_cfg)
    if init and resume_from is None:
        # Generator first: with shared embeddings the discriminator's table wins.
        model.generator.load_state_dict(init[2].state_dict())
        model.discriminator.load_state_dict(init[1].state_dict())
    model = model.to(device)
    optimizer = build_optimizer(model, tc)
    scheduler = build_scheduler(optimizer, tc)
    scaler = torch.amp.GradScaler(device.type) if tc.precision == "fp16" else None
    masking_rng = torch.Generator(device).manual_seed(tc.seed + 1)
    loader = BatchLoader(data, micro * tc.grad_accum, seed=tc.seed, rank=rank,
                         world_size=world_size)
    step, tokens = 0, 0
    if resume_from is not None:
        state, _ = load_checkpoint(resume_from, model)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        if scaler is not None and "scaler" in state:
            scaler.load_state_dict(state["scaler"])
        loader.load_state_dict(state["loader"])
        _set_rng_state(state["rng"], masking_rng)
        step, tokens = int(state["step"]), int(state["tokens"])
    elif opt.resume and rank == 0 and opt.progress:
        print(f"no checkpoint in {run}; starting a new run")

    log = MetricsLog(run, step, enabled=rank == 0)
    bar = None
    if opt.progress and rank == 0:
        from tqdm.auto import tqdm

        bar = tqdm(total=tc.max_steps, initial=step, unit="step", dynamic_ncols=True)
        n_params = count_parameters(model)
        bar.write(f"electra: {n_params / 1e6:.1f}M parameters (discriminator "
                  f"{count_parameters(model.discriminator) / 1e6:.1f}M), {len(data):,} "
                  f"examples of {data.seq_len} tokens, batch {tc.batch_size}, "
                  f"{tc.precision}, {device.type}"
                  + (f", resuming at step {step}" if step else ""))

    params = [p for p in model.parameters() if p.requires_grad]
    window: dict[str, torch.Tensor] = {}
    window_steps, window_tokens, skips = 0, 0, 0
    t_window = time.perf_counter()
    last: dict[str, Any] = {}
    stop_at = tc.max_steps if opt.stop_after is None else min(tc.max_steps,
                                                              step + opt.stop_after)
    model.train()

    # Data position and RNG streams as of the last completed step: a checkpoint written on
    # Ctrl-C (mid-step) uses these, so --resume replays the interrupted step exactly.
    boundary = {"loader": loader.state_dict(), "rng": _rng_state(masking_rng)}

    def checkpoint() -> None:
        if rank != 0:
            return
        state = {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                 "loader": boundary["loader"], "rng": boundary["rng"],
                 "step": step, "tokens": tokens}
        if scaler is not None:
            state["scaler"] = scaler.state_dict()
        save_checkpoint(run / "checkpoints", step, model, state,
                        {**cfg_dict, "step": step, "tokens": tokens}, tc.keep_checkpoints)

    try:
        while step < stop_at:
            step_stats: dict[str, torch.Tensor] = {}
            step_tokens = 0
            for _ in range(tc.grad_accum):
                batch = next(loader)
                step_tokens += int(batch["attention_mask"].sum())
                batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
                with autocast(device, tc.precision):
                    out = electra_forward(model, batch["input_ids"], batch["attention_mask"],
                                          batch["token_type_ids"], data.special, cfg.objective,
                                          masking_rng)
                loss = out.loss / tc.grad_accum
                (scaler.scale(loss) if scaler is not None else loss).backward()
                for key, value in (("loss", out.loss), ("gen_loss", out.gen_loss),
                                   ("disc_loss", out.disc_loss), *out.stats.items()):
                    v = value.detach().float() / tc.grad_accum
                    step_stats[key] = step_stats[key] + v if key in step_stats else v
            if not torch.isfinite(step_stats["loss"]):
                skips += 1
                optimizer.zero_grad(set_to_none=True)
                if skips > tc.max_nonfinite_skips:
                    good = latest_checkpoint(run / "checkpoints")
                    raise TrainingDiverged(
                        f"the loss is not finite at step {step + 1} (gen_loss "
                        f"{float(step_stats['gen_loss']):.4g}, disc_loss "
                        f"{float(step_stats['disc_loss']):.4g}); stopped. Last good "
                        f"checkpoint: {good or 'none'}. Lower train.lr, try "
                        f"--set train.precision=fp32, or allow skips with "
                        f"--set train.max_nonfinite_skips=N")
                continue
            if scaler is not None:
                scaler.unscale_(optimizer)
            grad_norm = (torch.nn.utils.clip_grad_norm_(params, tc.grad_clip)
                         if tc.grad_clip > 0 else torch.zeros(()))
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            tokens += step_tokens * world_size
            window_tokens += step_tokens * world_size
            window_steps += 1
            boundary = {"loader": loader.state_dict(), "rng": _rng_state(masking_rng)}
            step_stats["grad_norm"] = grad_norm.detach().float()
            for key, value in step_stats.items():
                window[key] = window[key] + value if key in window else value

            if step % tc.log_every == 0 or step == tc.max_steps:
                now = time.perf_counter()
                record: dict[str, Any] = {"step": step, "tokens": tokens,
                                          "lr": scheduler.get_last_lr()[0]}
                for key, value in window.items():
                    if key != "n_tokens":
                        record[key] = float(value) / window_steps
                record["tokens_per_s"] = window_tokens / max(now - t_window, 1e-9)
                window, window_steps, window_tokens, t_window = {}, 0, 0, now
                evaluate = val is not None and (
                    (tc.eval_every and step % tc.eval_every == 0) or step == tc.max_steps)
                if evaluate:
                    record.update(validate(model, val, cfg, device, micro, tc.eval_batches))
                    t_window = time.perf_counter()
                log.write(record)
                last = record
                if bar is not None:
                    post = {"loss": f"{record['loss']:.3f}",
                            "disc_acc": f"{record['disc_acc']:.3f}",
                            "tok/s": f"{record['tokens_per_s']:,.0f}"}
                    if "val_disc_auc" in record:
                        post["val_auc"] = f"{record['val_disc_auc']:.3f}"
                    bar.set_postfix(post, refresh=False)
            if bar is not None:
                bar.update(1)
            if step % tc.save_every == 0 or step == stop_at:
                checkpoint()
    except KeyboardInterrupt:
        if rank == 0 and step > 0:
            if bar is not None:
                bar.write(f"interrupted: saving a checkpoint at step {step} ...")
            checkpoint()
            print(f"electra: interrupted at step {step}; checkpoint saved, continue with "
                  f"--resume", flush=True)
        raise
    finally:
        if bar is not None:
            bar.close()
        log.close()

    if step == tc.max_steps and rank == 0:
        tok_json = (run / "tokenizer.json").read_text()
        save_pretrained(model.discriminator, "discriminator", run / "discriminator", tok_json)
        save_pretrained(model.generator, "generator", run / "generator", tok_json)
    return last


def iter_metrics(run: str | Path) -> Iterator[dict[str, Any]]:
    """The records of RUN/metrics.jsonl."""
    path = Path(run) / "metrics.jsonl"
    if not path.is_file():
        raise UserError(f"{run}: no metrics.jsonl; is this a pretraining run folder?")
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)

