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

Under torchrun (``electra.distributed``) each process takes its rows of every global batch.
A step's masking/sampling draws and loss denominators belong to the whole global batch, so
1 process, N processes and N accumulation micro-batches compute the same step (up to float
summation order); dropout draws from a stream of each rank's own. Rank 0 writes everything.
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

import numpy as np
import torch

from electra import distributed as dd
from electra import objective as obj
from electra.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from electra.config import RunConfig
from electra.data.loader import BatchLoader, ShardDataset
from electra.errors import UserError
from electra.model import ElectraPretrainingModel, count_parameters
from electra.optim import build_optimizer, build_scheduler
from electra.pretrained import save_pretrained

# Settings that may change when a run is resumed; all others must match the saved run.
RESUMABLE_CHANGES = {"log_every", "eval_every", "eval_batches", "save_every",
                     "keep_checkpoints", "threads", "max_nonfinite_skips", "parallel"}
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
    dist_timeout: float = dd.DEFAULT_TIMEOUT_S  # seconds a torchrun process waits for the others


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


def _local_rng_state(device: torch.device, gumbel_rng: torch.Generator) -> dict[str, Any]:
    """This process's own streams: dropout (torch's CPU and CUDA generators), Gumbel noise."""
    state = {"torch": torch.get_rng_state(), "gumbel": gumbel_rng.get_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_local_rng_state(state: dict[str, Any], device: torch.device,
                         gumbel_rng: torch.Generator) -> None:
    torch.set_rng_state(state["torch"])
    if "gumbel" in state:
        gumbel_rng.set_state(state["gumbel"])
    if "cuda" in state and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], device)


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


def _global_draws(batch: dict[str, torch.Tensor], global_batch: int, data: ShardDataset,
                  cfg: RunConfig, rng: torch.Generator, place: Any) -> tuple[Any, Any]:
    """A step's loss denominators (summed over ranks) and random draws, both for the whole
    global batch, of which ``batch`` is this rank's rows: (Norm, Noise)."""
    counts = dd.all_sum(place, obj.batch_norm_counts(
        batch["input_ids"], batch["attention_mask"], data.special, cfg.objective))
    noise = obj.Noise.draw(global_batch, data.seq_len, cfg.model.vocab_size, cfg.objective,
                           rng, batch["input_ids"].device)
    return obj.Norm(chosen=counts[0].float(), tokens=counts[1].float()), noise


LOSSES = ("loss", "gen_loss", "disc_loss")  # summed shares of each step's global mean


def _pooled(place: Any, sums: dict[str, torch.Tensor], steps: int) -> dict[str, float]:
    """Metrics pooled over steps, micro-batches and ranks (one all-reduce): the losses are
    summed shares of each step's global mean, so their mean over ``steps``; the statistics
    are (numerator, denominator) counts, so their ratio."""
    keys = sorted(sums)
    values = iter(dd.all_sum(place, torch.cat([sums[k].reshape(-1) for k in keys])).tolist())
    out = {}
    for key in keys:
        if key in LOSSES:
            out[key] = next(values) / steps
        else:
            num, den = next(values), next(values)
            out[key] = num / max(den, 1.0)
    return out


@torch.no_grad()
def validate(model: ElectraPretrainingModel, data: ShardDataset, run_cfg: RunConfig,
             device: torch.device, micro: int, place: Any = None) -> dict[str, float]:
    """Held-out generator loss/accuracy and discriminator loss/accuracy/ROC-AUC.

    Scores the first ``eval_batches`` global batches of the split (in file order), each
    process its rows, pooled over processes: the numbers do not depend on the world size.
    The masking and sampling seed is fixed, so every validation scores the same corruption
    pattern of the same examples and the numbers are comparable over the run.
    """
    from sklearn.metrics import roc_auc_score

    place = place or dd.Dist()
    tc = run_cfg.train
    was_training = model.training
    model.eval()
    rng = torch.Generator(device).manual_seed(tc.seed + 1_000_003)
    W = place.world_size
    G = min(tc.batch_size, len(data) // W * W)  # one global validation batch
    if G == 0:  # fewer held-out examples than processes
        return {}
    per_rank = G // W
    n = min(tc.eval_batches, max(1, len(data) // G))
    sums: dict[str, torch.Tensor] = {}
    scores, labels = [], []
    for i in range(n):
        first = i * G + place.rank * per_rank
        batch = {k: v.to(device) for k, v in
                 data.batch(np.arange(first, first + per_rank)).items()}
        norm, noise = _global_draws(batch, G, data, run_cfg, rng, place)
        for j in range(0, per_rank, micro):
            rows = slice(j, min(j + micro, per_rank))
            start = place.rank * per_rank + j
            with autocast(device, tc.precision):
                out = model(batch["input_ids"][rows], batch["attention_mask"][rows],
                            batch["token_type_ids"][rows], data.special, run_cfg.objective,
                            rng, noise.rows(start, start + rows.stop - rows.start), norm)
            real = batch["attention_mask"][rows].bool()
            scores.append(out.disc_logits.float()[real].cpu())
            labels.append(out.labels[real].cpu())
            for key, value in (("gen_loss", out.gen_loss), ("disc_loss", out.disc_loss),
                               *out.counts.items()):
                v = value.detach().double().reshape(-1)
                sums[key] = sums[key] + v if key in sums else v
    model.train(was_training)
    result = {f"val_{k}": v for k, v in _pooled(place, sums, n).items()}
    y = np.concatenate([t.numpy() for t in dd.gather(place, torch.cat(labels))])
    s = np.concatenate([t.numpy() for t in dd.gather(place, torch.cat(scores))])
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


def _setup_run(opt: PretrainOptions) -> tuple[Any, ...]:
    """Data, validation split, init weights, the resolved config and the micro-batch size."""
    cfg, tc = opt.config, opt.config.train
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
    return data, val, init, cfg


def _split_batch(tc: Any, world_size: int) -> tuple[int, int]:
    """(examples per process per step, examples per micro-batch)."""
    per_rank = tc.batch_size // world_size
    if per_rank * world_size != tc.batch_size or per_rank % tc.grad_accum:
        raise UserError(f"train.batch_size={tc.batch_size} does not split into "
                        f"{world_size} process(es) x train.grad_accum={tc.grad_accum} equal "
                        f"micro-batches; choose a batch divisible by both")
    return per_rank, per_rank // tc.grad_accum


def pretrain(opt: PretrainOptions) -> dict[str, Any]:
    """Run (or resume) pretraining; returns the last logged metrics.

    Launched by torchrun, each process trains on its rows of every global batch (DDP, or
    FSDP with ``train.parallel = "fsdp"``) and only rank 0 writes.
    """
    cfg = opt.config
    tc = cfg.train
    if tc.threads:
        torch.set_num_threads(tc.threads)
    place, device = dd.setup(resolve_device(opt.device), opt.dist_timeout)
    data, val, init, cfg = dd.agree(place, lambda: _setup_run(opt), "reading data and config")
    per_rank, micro = dd.agree(place, lambda: _split_batch(tc, place.world_size),
                               "splitting the batch")
    cfg_dict = {**cfg.to_dict(), "tokenizer_sha256": data.meta["tokenizer_sha256"],
                "data_vocab_size": data.vocab_size, "seq_len": data.seq_len}
    from electra import __version__

    dd.check_same(place, {"config": cfg_dict, "data": data.meta, "init": opt.init,
                          "resume": opt.resume, "electra": __version__,
                          "torch": torch.__version__}, "the config or the data")
    run = Path(opt.out)

    def prepare_run() -> Path | None:
        found = _prepare_run_dir(opt, cfg_dict)
        (run / "config.json").write_text(json.dumps(cfg_dict, indent=2))
        shutil.copyfile(data.folder / "tokenizer.json", run / "tokenizer.json")
        return found

    resume_from = dd.on_main(place, prepare_run, "preparing the run folder")

    torch.manual_seed(tc.seed)  # the same initial weights on every rank
    model = ElectraPretrainingModel(cfg.model)
    n_params = count_parameters(model)
    if init and resume_from is None:
        # Generator first: with shared embeddings the discriminator's table wins.
        model.generator.load_state_dict(init[2].state_dict())
        model.discriminator.load_state_dict(init[1].state_dict())
    state: dict[str, Any] | None = None
    if resume_from is not None:
        state, _ = dd.agree(place, lambda: load_checkpoint(resume_from, model),
                            "loading the checkpoint")
    model = model.to(device)
    fsdp = place.enabled and tc.parallel == "fsdp"
    if fsdp:
        _shard(model, device)
    optimizer = build_optimizer(model, tc)
    scheduler = build_scheduler(optimizer, tc)
    scaler = torch.amp.GradScaler(device.type) if tc.precision == "fp16" else None
    # Masking and sampling draw from one stream shared by all ranks (each takes its rows of
    # the global batch); dropout and Gumbel noise from streams of each rank's own.
    masking_rng = torch.Generator(device).manual_seed(tc.seed + 1)
    gumbel_rng = torch.Generator(device).manual_seed(dd.rank_seed(tc.seed + 2, place.rank))
    torch.manual_seed(dd.rank_seed(tc.seed, place.rank))
    loader = BatchLoader(data, per_rank, seed=tc.seed, rank=place.rank,
                         world_size=place.world_size)
    step, tokens = 0, 0
    if state is not None:
        if fsdp:
            _load_sharded_optimizer(optimizer, state["optimizer"])
        else:
            optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        if scaler is not None and "scaler" in state:
            scaler.load_state_dict(state["scaler"])
        loader.load_state_dict(state["loader"])
        step, tokens = int(state["step"]), int(state["tokens"])
        rng = state["rng"]
        masking_rng.set_state(rng["masking"])
        ranks = rng.get("ranks", [rng])  # older checkpoints: one process's streams
        if len(ranks) == place.world_size:
            _set_local_rng_state(ranks[place.rank], device, gumbel_rng)
        else:  # another world size: same step and data position, fresh per-rank streams
            torch.manual_seed(dd.rank_seed(tc.seed * 1_000_003 + step, place.rank))
            gumbel_rng.manual_seed(dd.rank_seed(tc.seed * 1_000_003 + step + 2, place.rank))
            if place.is_main:
                print(f"electra: resuming a {len(ranks)}-process run with "
                      f"{place.world_size}: same step and data position; dropout streams "
                      f"restart, so not bitwise equal to an uninterrupted run", flush=True)
    elif opt.resume and place.is_main and opt.progress:
        print(f"no checkpoint in {run}; starting a new run")

    if fsdp:
        step_model: torch.nn.Module = model
    elif place.enabled:
        from torch.nn.parallel import DistributedDataParallel

        step_model = DistributedDataParallel(
            model, device_ids=[device] if device.type == "cuda" else None,
            gradient_as_bucket_view=True)
    else:
        step_model = model

    log = MetricsLog(run, step, enabled=place.is_main)
    bar = None
    if opt.progress and place.is_main:
        from tqdm.auto import tqdm

        bar = tqdm(total=tc.max_steps, initial=step, unit="step", dynamic_ncols=True)
        bar.write(f"electra: {n_params / 1e6:.1f}M parameters, {len(data):,} examples of "
                  f"{data.seq_len} tokens, batch {tc.batch_size}"
                  + (f" over {place.world_size} processes ({tc.parallel})"
                     if place.enabled else "")
                  + f", {tc.precision}, {device.type}"
                  + (f", resuming at step {step}" if step else ""))

    params = [p for p in model.parameters() if p.requires_grad]
    window: dict[str, torch.Tensor] = {}
    window_steps, window_tokens, skips = 0, 0, 0
    window_grad_norm = torch.zeros((), dtype=torch.float64, device=device)
    t_window = time.perf_counter()
    last: dict[str, Any] = {}
    stop_at = tc.max_steps if opt.stop_after is None else min(tc.max_steps,
                                                              step + opt.stop_after)
    model.train()

    # Data position and RNG streams as of the last completed step: a checkpoint written on
    # Ctrl-C (mid-step) uses these, so --resume replays the interrupted step exactly.
    def streams() -> dict[str, Any]:
        return {"loader": loader.state_dict(), "masking": masking_rng.get_state(),
                "local": _local_rng_state(device, gumbel_rng)}

    boundary = streams()

    def checkpoint(interrupted: bool = False) -> None:
        """Every rank calls this (rank 0 writes), except on Ctrl-C: rank 0 alone, with the
        other ranks' streams left out (a resume then restarts them)."""
        ranks = ([boundary["local"]] if interrupted and place.enabled
                 else dd.gather(place, boundary["local"]))
        optim_state = _sharded_optimizer_state(optimizer) if fsdp else None
        to_save = _full_model(model, cfg.model) if fsdp else model
        if not place.is_main:
            return
        state = {"optimizer": optim_state if fsdp else optimizer.state_dict(),
                 "scheduler": scheduler.state_dict(), "loader": boundary["loader"],
                 "rng": {"masking": boundary["masking"], "ranks": ranks},
                 "step": step, "tokens": tokens, "world_size": place.world_size}
        if scaler is not None:
            state["scaler"] = scaler.state_dict()
        save_checkpoint(run / "checkpoints", step, to_save, state,
                        {**cfg_dict, "step": step, "tokens": tokens}, tc.keep_checkpoints)

    try:
        while step < stop_at:
            step_stats: dict[str, torch.Tensor] = {}
            batch = {k: v.to(device, non_blocking=True) for k, v in next(loader).items()}
            # The global batch's loss denominators and random draws, before any forward.
            norm, noise = _global_draws(batch, tc.batch_size, data, cfg, masking_rng, place)
            for j in range(tc.grad_accum):
                rows = slice(j * micro, (j + 1) * micro)
                first = place.rank * per_rank + j * micro  # this micro-batch's global rows
                sync = j == tc.grad_accum - 1
                with _no_sync(step_model, fsdp, sync), autocast(device, tc.precision):
                    out = step_model(batch["input_ids"][rows], batch["attention_mask"][rows],
                                     batch["token_type_ids"][rows], data.special,
                                     cfg.objective, gumbel_rng,
                                     noise.rows(first, first + micro), norm)
                    # DDP/FSDP average gradients over ranks; the losses are already global
                    # means, so each rank's share is scaled back up.
                    loss = out.loss * place.world_size
                    (scaler.scale(loss) if scaler is not None else loss).backward()
                for key, value in (("loss", out.loss), ("gen_loss", out.gen_loss),
                                   ("disc_loss", out.disc_loss), *out.counts.items()):
                    v = value.detach().double()
                    step_stats[key] = step_stats[key] + v if key in step_stats else v
            bad = dd.all_sum(place, (~torch.isfinite(step_stats["loss"])).float())
            if bad:  # the one host sync of a step; every rank takes the same branch
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
                         if tc.grad_clip > 0 else torch.zeros((), device=device))
            if hasattr(grad_norm, "full_tensor"):  # FSDP: a DTensor
                grad_norm = grad_norm.full_tensor()
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            step_tokens = int(norm.tokens)  # global (exact below 2**24); in sync already
            tokens += step_tokens
            window_tokens += step_tokens
            window_steps += 1
            boundary = streams()
            window_grad_norm = window_grad_norm + grad_norm.detach().double()
            for key, value in step_stats.items():
                window[key] = window[key] + value if key in window else value

            if step % tc.log_every == 0 or step == tc.max_steps:
                now = time.perf_counter()
                record: dict[str, Any] = {"step": step, "tokens": tokens,
                                          "lr": scheduler.get_last_lr()[0]}
                record.update(_pooled(place, window, window_steps))
                record["grad_norm"] = float(window_grad_norm) / window_steps
                record["tokens_per_s"] = window_tokens / max(now - t_window, 1e-9)
                window, window_steps, window_tokens, t_window = {}, 0, 0, now
                window_grad_norm = torch.zeros((), dtype=torch.float64, device=device)
                evaluate = val is not None and (
                    (tc.eval_every and step % tc.eval_every == 0) or step == tc.max_steps)
                if evaluate:
                    record.update(validate(model, val, cfg, device, micro, place))
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
        if step > 0 and (place.is_main and not fsdp):
            if bar is not None:
                bar.write(f"interrupted: saving a checkpoint at step {step} ...")
            checkpoint(interrupted=True)
            print(f"electra: interrupted at step {step}; checkpoint saved, continue with "
                  f"--resume", flush=True)
        elif place.is_main:
            print(f"electra: interrupted at step {step}; continue from the last checkpoint "
                  f"with --resume", flush=True)
        raise
    finally:
        if bar is not None:
            bar.close()
        log.close()

    if step == tc.max_steps:
        final = _full_model(model, cfg.model) if fsdp else model
        if place.is_main:
            tok_json = (run / "tokenizer.json").read_text()
            save_pretrained(final.discriminator, "discriminator", run / "discriminator",
                            tok_json)
            save_pretrained(final.generator, "generator", run / "generator", tok_json)
    dd.barrier(place)  # every rank returns once the run's files exist
    return last


def _no_sync(step_model: torch.nn.Module, fsdp: bool, sync: bool
             ) -> contextlib.AbstractContextManager:
    """Skip the gradient all-reduce on all but the last accumulation micro-batch."""
    if sync:
        return contextlib.nullcontext()
    if fsdp:
        step_model.set_requires_gradient_sync(False)  # type: ignore[operator]
        return _resync(step_model)
    if hasattr(step_model, "no_sync"):  # DDP
        return step_model.no_sync()  # type: ignore[operator]
    return contextlib.nullcontext()


@contextlib.contextmanager
def _resync(model: torch.nn.Module) -> Iterator[None]:
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)  # type: ignore[operator]


def _fully_shard() -> Any:
    try:
        from torch.distributed.fsdp import fully_shard  # torch >= 2.6
    except ImportError:  # torch 2.4-2.5
        from torch.distributed._composable.fsdp import fully_shard
    return fully_shard


def _shard(model: ElectraPretrainingModel, device: torch.device) -> None:
    """FSDP2: each transformer block its own unit, the rest (embeddings, heads) the root's."""
    import warnings

    from torch.distributed.device_mesh import init_device_mesh

    # The root returns ElectraOutput, whose tensors include views; nothing here modifies
    # them in place, which is what FSDP2's warning is about.
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view")
    fully_shard = _fully_shard()
    mesh = init_device_mesh(device.type, (torch.distributed.get_world_size(),))
    for part in (model.generator, model.discriminator):
        for block in part.encoder.layers:
            fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)


def _gathered(t: Any) -> Any:
    """A sharded (DTensor) tensor as a whole CPU tensor; a collective, call on every rank."""
    return t.full_tensor().cpu() if hasattr(t, "full_tensor") else t


def _full_model(model: torch.nn.Module, model_cfg: Any) -> ElectraPretrainingModel:
    """FSDP: the whole model as an unsharded CPU copy, gathered one tensor at a time."""
    full = {k: _gathered(v) for k, v in model.state_dict().items()}
    copy = ElectraPretrainingModel(model_cfg)
    copy.load_state_dict(full)
    return copy


def _sharded_optimizer_state(optimizer: Any) -> dict[str, Any]:
    """FSDP: the optimizer state with every tensor whole, laid out exactly like a
    one-process ``optimizer.state_dict()`` (so DDP and FSDP checkpoints are the same)."""
    sd = optimizer.state_dict()
    return {"state": {i: {k: _gathered(v) for k, v in sorted(st.items())}
                      for i, st in sorted(sd["state"].items())},
            "param_groups": sd["param_groups"]}


def _load_sharded_optimizer(optimizer: Any, state: dict[str, Any]) -> None:
    """FSDP: shard a whole optimizer state like the parameters it belongs to."""
    from torch.distributed.tensor import distribute_tensor

    params = [p for g in optimizer.param_groups for p in g["params"]]
    for i, st in state["state"].items():
        p = params[int(i)]
        for k, v in st.items():
            if hasattr(p, "device_mesh") and v.shape == p.shape:
                st[k] = distribute_tensor(v.to(p.device), p.device_mesh, p.placements)
    optimizer.load_state_dict(state)


def iter_metrics(run: str | Path) -> Iterator[dict[str, Any]]:
    """The records of RUN/metrics.jsonl."""
    path = Path(run) / "metrics.jsonl"
    if not path.is_file():
        raise UserError(f"{run}: no metrics.jsonl; is this a pretraining run folder?")
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)

