"""The training scaffold that pretraining and fine-tuning share.

    trainer = Trainer(model, rt, settings, groups, out=RUN, config=..., streams=...,
                      stateful={"loader": loader}, resume=checkpoint_or_None)
    with trainer.running():                        # progress bar, metrics, Ctrl-C checkpoint
        while trainer.step < max_steps:
            trainer.train_step(micro_step, tokens) # one optimizer step, see below
            if trainer.every(log_every):
                trainer.log(trainer.metrics())
            if trainer.every(save_every):
                trainer.save()                     # everything resumable, in one call

One optimizer step: ``grad_accum`` micro-batches, each a forward under autocast (DDP's
gradient all-reduce only on the last) and a backward (loss-scaled in fp16); whether the loss
is finite on every rank (a non-finite step is skipped, or stops the run naming the last good
checkpoint); unscaling, clipping, the optimizer (AdamW by default), the schedule.

On a GPU (fused AdamW, no grad scaler) the step never waits for the device: the
non-finite flag goes to the optimizer as its ``found_inf`` (the kernel leaves the weights and
moments of a flagged step as they were, as a grad scaler's skipped step), token counts and
statistics stay on the device, and all of it is read when a metrics line is made. A skipped
step then still counts as a step, and a run that exceeds ``max_nonfinite_skips`` stops at
that line. On a CPU, where reading a value costs nothing, and under fp16's grad scaler the
flag is read at once and a skipped step is not counted.

What a checkpoint holds, and ``resume`` restores, is the whole state: weights, optimizer,
schedule, scaler, step and token counts, every random stream (shared ones once, each rank's
own), the loop's stateful parts (data position...) and the unlogged metrics window. It is
taken as of the last completed step, so a checkpoint written on Ctrl-C in the middle of a step
replays that step exactly on ``--resume``.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from electra.config import LoopConfig
from electra.errors import UserError
from electra.io.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from electra.io.files import disk_errors
from electra.io.trackers import Tracking
from electra.runtime import (
    Runtime,
    autocast,
    fast_fp32,
    grad_scaler,
    host_reads_free,
    rank_seed,
    resolve_precision,
)
from electra.train import parallel, stop
from electra.train.cast import cast_once
from electra.train.metrics import MetricsLog
from electra.train.optim import clip_grad_norm, make_optimizer, schedule

# A micro-batch: (loss, statistics) from the step model and the micro-batch's index. The loss
# is this rank's share of the global batch's mean loss; each statistic is detached float64,
# either a 0-d share of a mean (pooled as a mean over steps) or a (2,) numerator/denominator
# count (pooled as their ratio).
MicroStep = Callable[[nn.Module, int], tuple[torch.Tensor, dict[str, torch.Tensor]]]


class Stateful(Protocol):
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class TrainingDiverged(UserError):
    """The loss became non-finite more often than allowed."""


@dataclass(frozen=True)
class Settings:
    """How the scaffold steps: the loop's own config (``loop``: the settings both loops share,
    electra.config.LoopConfig, read from it directly: precision, schedule, optimizer,
    clipping, skips, compile, cast-once) and what each loop works out itself."""

    lr: float
    max_steps: int
    warmup_steps: int
    loop: LoopConfig = field(default_factory=LoopConfig)
    keep_checkpoints: int = 3
    parallel: str = "ddp"
    find_unused: bool = False
    """DDP: parameters that get no gradient in some steps (two-stage training)."""
    cuda_graphs: bool = False
    """Compile the model's repeated blocks in reduce-overhead mode, with static shapes: each
    block's kernels are recorded once as a CUDA graph and replayed (a CUDA device, batches of
    one shape); without it ``loop.compile`` compiles the whole step in one process
    (:func:`compile_scope`)."""
    tracking: Tracking = field(default_factory=Tracking)
    """Where the metrics lines go besides metrics.jsonl (electra.io.trackers)."""

    @property
    def prefix(self) -> str:
        """How the user names these settings in ``--set`` (``train.lr`` or ``lr``)."""
        return f"{self.loop.SECTION}." if self.loop.SECTION else ""

    @property
    def compiled(self) -> bool:
        """Whether the step is compiled (:func:`compile_scope` says what of it)."""
        return self.loop.compile or self.cuda_graphs

    @staticmethod
    def of(loop: LoopConfig, lr: float, max_steps: int, warmup_steps: int,
           **own: Any) -> Settings:
        """The settings of a loop: its config, and ``own``, what the loop works out."""
        return Settings(lr=lr, max_steps=max_steps, warmup_steps=warmup_steps, loop=loop,
                        **own)


def compile_scope(settings: Settings, rt: Runtime) -> str:
    """What ``compile`` compiles: ``step``, the whole forward a micro-step calls (a
    pretraining objective's generator, sampling, discriminator and losses; a fine-tune's
    model), one graph for each kind of batch (rows with or without padding), in one process;
    ``blocks``, each transformer block (one graph serves every layer), under CUDA graphs
    (static shapes, each block's kernels replayed) and under DDP/FSDP."""
    return "blocks" if settings.cuda_graphs or rt.enabled else "step"


def compiled(model: nn.Module, step_model: nn.Module, settings: Settings,
             rt: Runtime) -> nn.Module:
    """The module the step calls, compiled as :func:`compile_scope` says. A whole step is
    compiled with automatic dynamic shapes: the first batch's shapes are fixed, a second
    shape recompiles with its dimensions symbolic (fine-tuning's lengths: in two graphs,
    lengths that are multiples of 4 and the others, as the lane dropout cuts its masks),
    and no more after that (tests/train/test_compiled_step.py)."""
    if compile_scope(settings, rt) == "step":
        return torch.compile(step_model)  # type: ignore[return-value]
    how = {"mode": "reduce-overhead", "dynamic": False} if settings.cuda_graphs else {}
    for m in model.modules():  # each block, compiled once for all of them
        if getattr(m, "compile_unit", False):
            m.compile(**how)
    return step_model


def pool(rt: Runtime, sums: dict[str, torch.Tensor], steps: int) -> dict[str, float]:
    """Statistics summed over steps, micro-batches and ranks (one all-reduce): a 0-d share of a
    step's mean becomes the mean over ``steps``, a (2,) count its ratio."""
    keys = sorted(sums)
    values = iter(rt.all_sum(torch.cat([sums[k].reshape(-1) for k in keys])).tolist())
    out = {}
    for key in keys:
        if sums[key].dim() == 0:
            out[key] = next(values) / steps
        else:
            num, den = next(values), next(values)
            out[key] = num / max(den, 1.0)
    return out


def add_into(sums: dict[str, torch.Tensor], stats: dict[str, torch.Tensor]) -> None:
    for key, value in stats.items():
        sums[key] = sums[key] + value if key in sums else value


class Window:
    """The statistics of the steps since the last metrics line (this rank's share)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.sums: dict[str, torch.Tensor] = {}
        self.steps = 0
        self.tokens: torch.Tensor | int = 0  # a device tensor until read
        self.skipped: torch.Tensor | int = 0  # steps skipped on the device, not yet counted
        self.grad_norm = torch.zeros((), dtype=torch.float64, device=device)
        self.clock = time.perf_counter()

    def add(self, stats: dict[str, torch.Tensor], grad_norm: torch.Tensor,
            tokens: torch.Tensor | int, skipped: torch.Tensor | None = None) -> None:
        """A step's statistics; ``skipped`` (a 0-d device flag): the step was skipped, its
        statistics and tokens count as nothing."""
        grad_norm = grad_norm.detach().double()
        if skipped is not None:
            stats = {k: torch.where(skipped, 0.0, v) for k, v in stats.items()}
            grad_norm = torch.where(skipped, 0.0, grad_norm)
            tokens = torch.where(skipped, 0, tokens)
            self.skipped = self.skipped + skipped.long()
        add_into(self.sums, stats)
        self.grad_norm = self.grad_norm + grad_norm
        self.steps += 1
        self.tokens = self.tokens + tokens

    def read(self) -> tuple[int, int]:
        """(tokens, skipped steps) of the window, read from the device (a sync)."""
        self.tokens, self.skipped = int(self.tokens), int(self.skipped)
        return self.tokens, self.skipped

    def state_dict(self) -> dict[str, Any]:
        tokens, skipped = self.read()
        return {"sums": dict(self.sums), "steps": self.steps, "tokens": tokens,
                "skipped": skipped, "grad_norm": self.grad_norm}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sums = {k: v.to(self.device) for k, v in state["sums"].items()}
        self.steps, self.tokens = int(state["steps"]), int(state["tokens"])
        self.skipped = int(state.get("skipped", 0))
        self.grad_norm = state["grad_norm"].to(self.device)


class RandomStreams:
    """The run's random-number streams.

    ``shared`` streams draw the same numbers on every rank (a step's masking, for the whole
    global batch); ``local`` ones are each rank's own, as is torch's global generator
    (dropout). Stream ``name: offset`` is seeded ``seed + offset`` (shared) or from
    ``(seed + offset, rank)`` (local).
    """

    def __init__(self, rt: Runtime, seed: int, shared: dict[str, int] | None = None,
                 local: dict[str, int] | None = None) -> None:
        self.rt, self.seed, self.offsets = rt, seed, dict(local or {})
        self.shared = {name: torch.Generator(rt.device).manual_seed(seed + off)
                       for name, off in (shared or {}).items()}
        self.local = {name: torch.Generator(rt.device).manual_seed(rank_seed(seed + off, rt.rank))
                      for name, off in self.offsets.items()}
        torch.manual_seed(rank_seed(seed, rt.rank))

    def __getitem__(self, name: str) -> torch.Generator:
        return self.shared[name] if name in self.shared else self.local[name]

    def local_state(self) -> dict[str, Any]:
        return {"torch": torch.get_rng_state(),
                **{name: g.get_state() for name, g in self.local.items()},
                **self.rt.device_rng_state()}

    def shared_state(self) -> dict[str, Any]:
        return {name: g.get_state() for name, g in self.shared.items()}

    def load(self, state: dict[str, Any], step: int) -> int:
        """Restore from a checkpoint's ``rng``; returns how many processes saved it. When that
        is another number, each rank's own streams restart from ``(seed, step, rank)``."""
        for name, g in self.shared.items():
            g.set_state(state[name])
        ranks = state.get("ranks", [state])  # older checkpoints: one process's streams
        if len(ranks) != self.rt.world_size:
            base = self.seed * 1_000_003 + step
            torch.manual_seed(rank_seed(base, self.rt.rank))
            for name, g in self.local.items():
                g.manual_seed(rank_seed(base + self.offsets[name], self.rt.rank))
            return len(ranks)
        mine = ranks[self.rt.rank]
        torch.set_rng_state(mine["torch"])
        for name, g in self.local.items():
            if name in mine:
                g.set_state(mine[name])
        self.rt.set_device_rng_state(mine)
        return len(ranks)


class Trainer:
    """A model, its optimizer and schedule, and everything a resumable training run tracks.

    Args:
        model: the module to train (on the CPU; moved to ``rt.device`` here).
        rt: this process's runtime.
        settings: how to step.
        groups: the model's parameter groups (called after DDP/FSDP wrapping).
        out: the run folder (``out/checkpoints``, ``out/metrics.jsonl``, ``out/tb``);
            None: no checkpoints or metrics files.
        config: the run's resolved config, stored with every checkpoint.
        streams: the run's random streams.
        stateful: the loop's parts to save and restore (a data loader...).
        resume: a checkpoint folder to continue from.
        rebuild: a fresh model of the same shape (needed under FSDP to gather a whole copy).
        progress: show a progress bar (rank 0).
    """

    def __init__(self, model: nn.Module, rt: Runtime, settings: Settings,
                 groups: Callable[[nn.Module], list[dict[str, Any]]], *,
                 out: Path | None = None, config: dict[str, Any] | None = None,
                 streams: RandomStreams, stateful: dict[str, Stateful] | None = None,
                 resume: Path | None = None, rebuild: Callable[[], nn.Module] | None = None,
                 progress: bool = False) -> None:
        self.rt, self.settings, self.out = rt, settings, out
        self.config = config or {}
        self.streams = streams
        self.stateful = dict(stateful or {})
        self.rebuild = rebuild
        self.progress = progress
        self.step = self.skips = 0
        self.counted_tokens = 0  # the tokens of the steps before the window's
        self.log_due = False  # resumed from a Ctrl-C that cut this step's metrics line short
        self.saved_step = -1  # the step of the checkpoint this process wrote last
        state = None
        if resume is not None:
            state, _ = rt.agree(lambda: load_checkpoint(resume, model), "loading the checkpoint")
        self.model = model.to(rt.device)
        self.precision = resolve_precision(rt.device, settings.loop.precision)  # once a run
        self.step_model = parallel.wrap(self.model, rt, settings.parallel,
                                        settings.find_unused, self.precision)
        if settings.compiled:  # the command checked that torch can
            self.step_model = compiled(self.model, self.step_model, settings, rt)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.cast_once = cast_once(self.model, rt, settings, self.precision)
        loop = settings.loop
        self.optimizer = make_optimizer(loop.optimizer, groups(self.model), settings.lr,
                                        (loop.adam_beta1, loop.adam_beta2), loop.adam_eps)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, schedule(
            loop.schedule, settings.warmup_steps, settings.max_steps,
            loop.decay_fraction, loop.decay_steps, loop.decay_shape))
        fast_fp32(rt.device, self.precision)
        self.scaler = grad_scaler(rt.device, self.precision)
        # Skip a non-finite step on the device (found_inf) where reading the flag would wait
        # for the device and the optimizer can.
        self.sync_free = (bool(self.optimizer.defaults.get("fused")) and self.scaler is None
                          and not host_reads_free(rt.device))
        self.window = Window(rt.device)
        self.saved_world_size = rt.world_size  # of the checkpoint resumed from
        if state is not None:
            self._load(state, resume)  # type: ignore[arg-type]
        self.boundary = self._snapshot()
        self.unlogged: tuple[int, Window] | None = None  # (step, window) of a line computed
        # by metrics() but not yet logged (validation runs between the two)
        self.last: dict[str, Any] = {}
        self.log_file: MetricsLog | None = None
        self.bar: Any = None

    # -- resumable state ------------------------------------------------------------------

    def _snapshot(self) -> dict[str, Any]:
        """This rank's data position and random streams as of now (taken after every
        completed step: a step interrupted half-way has consumed some of both)."""
        return {"parts": {k: v.state_dict() for k, v in self.stateful.items()},
                "shared": self.streams.shared_state(), "local": self.streams.local_state()}

    def _load(self, state: dict[str, Any], resume: Path) -> None:
        if "optimizer_shards" in state:  # written by FSDP's ranks, each its shard
            parallel.load_sharded_optimizer(self.model, self.optimizer,
                                            resume / state["optimizer_shards"])
        else:
            parallel.load_optimizer_state(self.optimizer, parallel.fuse_qkv_state(
                state["optimizer"], self.optimizer, self.model))
        self.scheduler.load_state_dict(state["scheduler"])
        if self.scaler is not None and "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])
        for name, part in self.stateful.items():
            part.load_state_dict(state[name])
        self.step, self.counted_tokens = int(state["step"]), int(state["tokens"])
        self.skips = int(state.get("skips", 0))
        self.log_due = bool(state.get("log_due", False))
        self.saved_world_size = self.streams.load(state["rng"], self.step)
        windows = state.get("window")  # one per rank (absent in older checkpoints)
        if windows is None:
            return
        if self.saved_world_size == self.rt.world_size:
            self.window.load_state_dict(windows[self.rt.rank])
        else:  # steps, tokens and grad norm are global; the sums go to rank 0 (pool sums)
            mine = dict(windows[0])
            mine["sums"] = ({k: sum(w["sums"][k] for w in windows) for k in mine["sums"]}
                            if self.rt.is_main else {})
            self.window.load_state_dict(mine)
        self.counted_tokens -= int(self.window.tokens)  # "tokens" counts the window's too

    def save(self, interrupted: bool = False) -> None:
        """A checkpoint of the last completed step under ``out/checkpoints`` (rank 0 writes).

        Every rank calls this, except on Ctrl-C (``interrupted``): rank 0 alone then, and
        the other ranks' own streams are left out (a resume restarts them). The metrics window
        is taken as it is now: it changes only when a step completes and when a line is logged.
        """
        if self.out is None:
            return
        b = self.boundary
        alone = interrupted and self.rt.enabled
        due = interrupted and self.unlogged is not None and self.unlogged[0] == self.step
        tokens = self.tokens
        if due:  # the line of this step was being computed: the resumed run writes it
            self.window = self.unlogged[1]  # type: ignore[index]
        ranks = [b["local"]] if alone else self.rt.gather(b["local"])
        window = self.window.state_dict()
        windows = [window] if alone else self.rt.gather(window)
        shards = self._save_shards() if parallel.is_sharded(self.model) else None
        optim_state = None if shards else {"optimizer": self.optimizer.state_dict()}
        weights = self.whole_model()
        if not self.rt.is_main:
            return
        state = {**(optim_state or {"optimizer_shards": "optimizer"}),
                 "scheduler": self.scheduler.state_dict(),
                 **b["parts"], "rng": {**b["shared"], "ranks": ranks}, "window": windows,
                 "step": self.step, "tokens": tokens, "skips": self.skips,
                 "world_size": self.rt.world_size, "log_due": due}
        if self.scaler is not None:
            state["scaler"] = self.scaler.state_dict()
        try:
            save_checkpoint(self.out / "checkpoints", self.step, weights, state,
                            {**self.config, "step": self.step, "tokens": tokens},
                            self.settings.keep_checkpoints,
                            move_in={"optimizer": shards} if shards else None)
            self.saved_step = self.step
        finally:
            if shards is not None:  # moved into the checkpoint, or left by a failure
                shutil.rmtree(shards, ignore_errors=True)

    def _save_shards(self) -> Path:
        """Under FSDP every rank writes its shard of the optimizer's state into one folder
        (``torch.distributed.checkpoint``), which the checkpoint then takes in."""
        assert self.out is not None
        shards = self.out / "checkpoints" / f".optimizer-{self.step:07d}"
        if self.rt.is_main:
            shutil.rmtree(shards, ignore_errors=True)
            shards.parent.mkdir(parents=True, exist_ok=True)
        self.rt.barrier()
        with disk_errors(shards, "free disk space and rerun with --resume"):
            parallel.save_sharded_optimizer(self.model, self.optimizer, shards)
        self.rt.barrier()
        return shards

    def whole_model(self) -> nn.Module:
        """The model with whole tensors (a collective under FSDP: call on every rank)."""
        return parallel.unsharded(self.model, self.rebuild)

    # -- one optimizer step ---------------------------------------------------------------

    def train_step(self, micro_step: MicroStep, tokens: torch.Tensor | int = 0,
                   micro_batches: int | None = None) -> dict[str, torch.Tensor] | None:
        """One optimizer step over ``micro_batches`` micro-batches (``grad_accum``; fewer in
        a batch-size warmup's smaller steps); ``tokens`` the global batch's real tokens (read
        only after the step's one sync). Returns the step's statistics summed over
        micro-batches (this rank's), with ``loss``; None when a non-finite loss made it skip
        the step."""
        s, rt = self.settings, self.rt
        signum = stop.agreed(rt) if stop.installed() else None  # SIGTERM or SIGUSR1 came
        if signum:  # every rank stops here, before the step, and saves with the others
            raise stop.Stopped(signum, together=rt.enabled)
        with stop.deferred():  # a signal now stops the run at the next step's start
            return self._step(micro_step, tokens, micro_batches or s.loop.grad_accum)

    def _step(self, micro_step: MicroStep, tokens: torch.Tensor | int,
              n: int) -> dict[str, torch.Tensor] | None:
        s, rt = self.settings, self.rt
        if s.cuda_graphs:  # a new step: the last one's graph outputs may be overwritten
            torch.compiler.cudagraph_mark_step_begin()
        stats: dict[str, torch.Tensor] = {}
        for j in range(n):
            with parallel.no_sync(self.step_model, j == n - 1), autocast(
                    rt.device, self.precision), self.cast_once():
                loss, micro_stats = micro_step(self.step_model, j)
                # DDP and FSDP average gradients over ranks; the loss is already this rank's
                # share of the global mean, so its gradient is scaled back up.
                scaled = loss * rt.world_size
                (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
            add_into(stats, {"loss": loss.detach().double(), **micro_stats})
        bad = rt.all_sum((~torch.isfinite(stats["loss"])).float()) > 0  # any rank's
        if self.sync_free:  # the optimizer skips the step (no sync; read at the next line)
            self.optimizer.found_inf = bad.float()  # type: ignore[attr-defined]
        elif bad:  # the step's one host sync; every rank takes the same branch
            self._skip(stats)
            return None
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        clip = self.settings.loop.grad_clip
        grad_norm = (clip_grad_norm(self.params, clip)
                     if clip > 0 else torch.zeros((), device=rt.device))
        if hasattr(grad_norm, "full_tensor"):  # FSDP: a DTensor
            grad_norm = grad_norm.full_tensor()
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        tokens = tokens.round().long() if isinstance(tokens, torch.Tensor) else tokens
        self.window.add(stats, grad_norm, tokens, bad if self.sync_free else None)
        self.boundary = self._snapshot()
        return stats

    @property
    def tokens(self) -> int:
        """Real tokens trained on so far (reads the device's count: a sync)."""
        return self.counted_tokens + self.window.read()[0]

    def _skip(self, stats: dict[str, torch.Tensor]) -> None:
        self.skips += 1
        self.optimizer.zero_grad(set_to_none=True)
        losses = ", ".join(f"{k} {float(v):.4g}" for k, v in stats.items() if v.dim() == 0)
        self._check_skips(f"at step {self.step + 1} ({losses})")

    def _check_skips(self, where: str) -> None:
        """Stop the run when more steps were skipped than allowed."""
        if self.skips <= self.settings.loop.max_nonfinite_skips:
            return
        good = latest_checkpoint(self.out / "checkpoints") if self.out else None
        p = self.settings.prefix
        raise TrainingDiverged(
            f"the loss is not finite {where}; stopped. Last good checkpoint: "
            f"{good or 'none'}. Lower {p}lr, try --set {p}precision=fp32, or allow skips "
            f"with --set {p}max_nonfinite_skips=N")

    # -- bookkeeping ----------------------------------------------------------------------

    def every(self, n: int) -> bool:
        """Whether the step just taken is a multiple of ``n`` (never for n = 0)."""
        return n > 0 and self.step % n == 0

    @property
    def lr(self) -> float:
        return self.scheduler.get_last_lr()[0]

    def metrics(self) -> dict[str, Any]:
        """The window since the last line, pooled over ranks (a collective), then reset:
        step, tokens, lr, each statistic, grad_norm, tokens_per_s."""
        w = self.window
        tokens, skipped = w.read()  # the window's one sync
        if skipped:
            self.skips += skipped
            self._check_skips(f"in {skipped} of the {w.steps} steps up to step {self.step}")
        steps = max(w.steps - skipped, 1)
        record: dict[str, Any] = {"step": self.step, "tokens": self.counted_tokens + tokens,
                                  "lr": self.lr}
        record.update(pool(self.rt, w.sums, steps))
        record["grad_norm"] = float(w.grad_norm) / steps
        record["tokens_per_s"] = tokens / max(time.perf_counter() - w.clock, 1e-9)
        self.unlogged = (self.step, w)
        self.counted_tokens += tokens
        self.window = Window(self.rt.device)
        return record

    def log(self, record: dict[str, Any],
            show: tuple[str, ...] = ("loss", "tokens_per_s")) -> None:
        """Write a metrics line (rank 0), show ``show`` fields on the progress bar, restart
        the window's clock (so time spent validating is not counted as training)."""
        if self.log_file is not None:
            self.log_file.write(record)
        self.unlogged, self.log_due = None, False
        self.last = record
        if self.bar is not None:
            names = {"tokens_per_s": "tok/s", "val_disc_auc": "val_auc"}
            self.bar.set_postfix({names.get(k, k): f"{record[k]:,.0f}" if k == "tokens_per_s"
                                  else f"{record[k]:.3f}" for k in show if k in record},
                                 refresh=False)
        self.window.clock = time.perf_counter()

    def say(self, message: str) -> None:
        """Print a line on rank 0 (above the progress bar)."""
        if not self.rt.is_main:
            return
        if self.bar is not None:
            self.bar.write(message)
        else:
            print(message, flush=True)

    @contextlib.contextmanager
    def running(self, total: int | None = None) -> Iterator[Trainer]:
        """The loop's context: metrics files and a progress bar (rank 0); on Ctrl-C a
        checkpoint of the last completed step where one can be written, then the interrupt
        goes on."""
        if self.out is not None:
            self.log_file = MetricsLog(self.out, self.step, enabled=self.rt.is_main,
                                       tracking=self.settings.tracking, config=self.config)
        if self.progress and self.rt.is_main:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total or self.settings.max_steps, initial=self.step,
                            unit="step", dynamic_ncols=True)
        self.window.clock = time.perf_counter()
        try:  # under torchrun a signal waits for the step all ranks agree on (train/stop.py)
            with stop.deferred(self.rt.enabled and stop.installed()):
                yield self
        except KeyboardInterrupt as err:
            self._interrupted(err)
            raise
        finally:
            if self.bar is not None:
                self.bar.close()
                self.bar = None
            if self.log_file is not None:
                self.log_file.close()
                self.log_file = None

    def _interrupted(self, err: KeyboardInterrupt) -> None:
        """Save the last completed step: every rank together when a signal stopped them all
        at one step (:class:`electra.train.stop.Stopped`), else (Ctrl-C) rank 0 alone."""
        together = isinstance(err, stop.Stopped) and err.together
        what = f"stopped by {err.name}" if isinstance(err, stop.Stopped) else "interrupted"
        if self.out is None:
            return
        saved = self.saved_step == self.step
        can = together or (self.rt.is_main and not parallel.is_sharded(self.model))
        if self.step > 0 and can and not saved:
            self.say(f"{what}: saving a checkpoint at step {self.step} ...")
            self.save(interrupted=not together)
            saved = True
        if self.rt.is_main:
            how = ("no step was completed" if self.step == 0 else
                   f"checkpoint of step {self.step} saved" if saved else
                   "its last checkpoint is kept")
            print(f"electra: {what} at step {self.step}; {how}", flush=True)

    def advance(self) -> None:
        """Move the progress bar one step."""
        if self.bar is not None:
            self.bar.update(1)
