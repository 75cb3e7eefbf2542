"""Pretraining's loop, beside fine-tuning's (``electra.train.finetuning``): setup (the
inputs read and checked on every rank, the model, the scaffold), fit (the steps, the metrics
lines, validation, probes, checkpoints), validate, and the step the benches time. `electra
pretrain` (``electra.commands.pretrain``) owns the flags, the run folder (``--out``,
``--resume``, ``--decay-from``), the final models, their cards and the closing line.

A run stopped and resumed with ``--resume`` produces the same metrics and final weights as one
that never stopped (on CPU, in fp32, with the same seed): every random stream (dropout,
masking, sampling), the data position and the unlogged metrics are saved with the checkpoint.

Under torchrun each process takes its rows of every global batch. A step's masking/sampling
draws and loss denominators belong to the whole global batch, so 1 process, N processes and N
accumulation micro-batches compute the same step (up to float summation order); dropout draws
from a stream of each rank's own.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from electra import __version__
from electra.config import ModelConfig, TrainConfig, parse_batch_warmup, parse_phases
from electra.data.examples import roc_auc
from electra.data.loader import BatchLoader, Blocks, PhasedLoader, Prefetched, ShardDataset
from electra.data.mixspec import Share
from electra.data.mixture import MixedLoader, source_tokens
from electra.data.sources import held_out, open_phases
from electra.data.tokenizer import SpecialTokens, load_tokenizer, tokenizer_checksum
from electra.errors import UserError
from electra.io.files import disk_errors
from electra.io.trackers import Tracking, check_reachable, parse_log_to
from electra.model import body_of, count_parameters
from electra.model.kernels import HostLayout, kept_attention_bytes
from electra.objectives.flops import step_flops_per_sequence
from electra.objectives.masking import Batch, Draws, slots, step_draws
from electra.objectives.pretraining import ElectraPretrainingModel, begin_step, stage_at
from electra.run_config import RunConfig
from electra.runtime import (
    Runtime,
    autocast,
    available_memory,
    peak_flops,
    resolve_precision,
    rows_without_padding,
    use_threads,
)
from electra.saved.start import FrozenGenerator, init_line, load_generator, load_init
from electra.train.first_lines import first_lines
from electra.train.optim import (
    BatchSizes,
    batch_sizes,
    param_groups,
    phase_starts,
    steps_for_tokens,
)
from electra.train.probe import Probe
from electra.train.trainer import RandomStreams, Settings, Trainer, add_into, pool


@dataclass
class PretrainOptions:
    data: str
    out: str
    config: RunConfig
    resume: bool = False
    overwrite: bool = False
    progress: bool = True
    device: str = "auto"
    stop_after: int | None = None  # stop (with a checkpoint) after this many steps
    stop_at: int | None = None  # stop (with a checkpoint) at this step (electra compare)
    init: str | None = None  # start from these weights (a run folder: discriminator/, generator/)
    decay_from: str | None = None  # a WSD run's stable-phase checkpoint to decay from


@dataclass
class Phase:
    """A length's config (its max_predictions), held-out split and training FLOPs a token."""

    cfg: RunConfig
    val: ShardDataset | None
    flops_per_token: float


@dataclass
class Pretraining:
    """A run ready to train: its data, resolved config, trainer and loader."""

    data: ShardDataset
    val: ShardDataset | None
    cfg: RunConfig  # the model's vocabulary and padding id set from the data
    micro: int  # examples per micro-batch
    trainer: Trainer
    loader: Prefetched
    probe: Probe | None = None  # train.probe_every's task
    flops_per_token: float = 0.0  # training FLOPs of a token (electra.objectives.flops)
    peak: float = 0.0  # the FLOP/s of all processes' devices, MFU's denominator
    warm: BatchSizes | None = None  # each batch's size in a batch warmup
    phases: dict[int, Phase] = dataclasses.field(default_factory=dict)  # by row length
    current: int = 0  # the length of the last step's rows

    @property
    def scheduled_mask(self) -> bool:
        """Whether the mask rate changes over the run (a schedule, or phases' own rates):
        then each metrics line says the rate of its step."""
        return self.cfg.objective.mask_prob_end is not None or any(
            m for *_, m in parse_phases(self.cfg.train.phases))

    def mfu(self, tokens_per_s: float) -> dict[str, float]:
        """A metrics line's model FLOPs utilisation, over its real tokens (at the length of
        the last step's rows)."""
        fpt = self.phases[self.current].flops_per_token
        return {"mfu": tokens_per_s * fpt / self.peak} if self.peak else {}


def train_step(trainer: Trainer, batch: dict[str, torch.Tensor], cfg: RunConfig,
               special: SpecialTokens, micro: int) -> dict[str, torch.Tensor] | None:
    """One pretraining step on ``batch``, this rank's rows of a global batch: the global
    batch's random draws and loss denominators first, then the scaffold's step over
    micro-batches of ``micro`` rows. Returns the step's statistics (None when skipped).
    The step the benches time."""
    rt, obj_cfg = trainer.rt, cfg.objective
    full = rows_without_padding(batch["attention_mask"])  # before the batch goes over
    rows = len(batch["input_ids"])  # batch_size / processes, fewer in a batch warmup
    hosts = batch.get(LAYOUTS)  # made in the loader's thread (Prefetched); else here
    if hosts is None and cfg.train.unpad:
        hosts = host_layouts(batch, micro)
    if hosts is not None:  # moved beside the rows: unpadding reads nothing off the device
        hosts = [h.to(rt.device, pin=rt.pins_memory) for h in hosts]
    mine = Batch.of({k: v.to(rt.device, non_blocking=True) for k, v in batch.items()
                     if k != LAYOUTS}, full)
    norm, noise = step_draws(mine, rows * rt.world_size, cfg.model.vocab_size, special,
                             cfg.objective, trainer.streams["masking"], rt,
                             cfg.mask_prob_at(trainer.step))
    stage = begin_step(trainer.model, obj_cfg, trainer.step)
    temperature = obj_cfg.temperature_at(trainer.step)

    def micro_step(model: torch.nn.Module, j: int) -> tuple[torch.Tensor, dict[str, Any]]:
        rows = slice(j * micro, (j + 1) * micro)
        part = mine.rows(rows) if hosts is None else replace(mine.rows(rows), host=hosts[j])
        out = model(part, Draws(noise.rows(rows.start, rows.stop), norm,
                                trainer.streams["gumbel"], temperature, stage))
        return out.loss, {**{k: v.detach().double() for k, v in out.losses.items()},
                          **out.counts}

    return trainer.train_step(micro_step, tokens=norm.tokens, micro_batches=rows // micro)


LAYOUTS = "host_layouts"  # a batch's key for its micro-batches' HostLayouts (train.unpad)


def host_layouts(batch: dict[str, torch.Tensor], micro: int) -> list[Any]:
    """Each micro-batch's layout, computed on the host from the loader's rows
    (``electra.model.kernels.HostLayout``): what unpadding (``train.unpad``) would otherwise
    read off the device in every forward. The run's loader computes them in its thread, one
    batch ahead (:func:`with_layouts`), off the step's path."""
    mask, groups = batch["attention_mask"], batch.get("sequence_ids")
    return [HostLayout.of(mask[j : j + micro], None if groups is None else groups[j : j + micro])
            for j in range(0, len(mask), micro)]


def with_layouts(micro: int) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """What the prefetching thread adds to each batch: its micro-batches' host layouts."""
    return lambda batch: {**batch, LAYOUTS: host_layouts(batch, micro)}


@torch.no_grad()
def validate(model: ElectraPretrainingModel, data: ShardDataset, cfg: RunConfig, rt: Runtime,
             micro: int, stage: int | None = None) -> dict[str, float]:
    """Held-out losses and statistics of the objective (generator loss/accuracy,
    discriminator loss/accuracy/ROC-AUC, MLM loss/accuracy: what the objective has).

    Scores the first ``eval_batches`` global batches of the split (in file order), each
    process its rows, pooled over processes: the numbers do not depend on the world size.
    The masking and sampling seed is fixed, and positions are chosen at the mask-rate
    schedule's final rate and replacements sampled at the temperature schedule's final
    temperature, so every validation scores the same task on the same examples and the
    numbers are comparable over the run.
    """
    tc = cfg.train
    was_training = model.training
    model.eval()
    rng = torch.Generator(rt.device).manual_seed(tc.seed + 1_000_003)
    W = rt.world_size
    G = min(tc.batch_size, len(data) // W * W)  # one global validation batch
    if G == 0:  # fewer held-out examples than processes
        return {}
    per_rank = G // W
    n = min(tc.eval_batches, max(1, len(data) // G))
    sums: dict[str, torch.Tensor] = {}
    scores, labels = [], []
    for i in range(n):
        first = i * G + rt.rank * per_rank
        host = data.batch(np.arange(first, first + per_rank))
        batch = Batch.of({k: v.to(rt.device) for k, v in host.items()})
        norm, noise = step_draws(batch, G, cfg.model.vocab_size, data.special,
                                 cfg.objective, rng, rt, cfg.objective.final_mask_prob)
        hosts = host_layouts(host, micro) if tc.unpad else None
        hosts = None if hosts is None else [h.to(rt.device) for h in hosts]
        for j in range(0, per_rank, micro):
            rows = slice(j, min(j + micro, per_rank))
            part = batch.rows(rows) if hosts is None else replace(batch.rows(rows),
                                                                  host=hosts[j // micro])
            with autocast(rt.device, tc.precision):
                out = model(part, Draws(noise.rows(rows.start, rows.stop), norm, rng,
                                                    cfg.objective.final_temperature, stage))
            if out.disc_logits is not None:
                real = batch.attention_mask[rows].bool()
                scores.append(out.disc_logits.float()[real].cpu())
                labels.append(out.labels[real].cpu())
            add_into(sums, {**{k: v.double() for k, v in out.losses.items()}, **out.counts})
    model.train(was_training)
    result = {f"val_{k}": v for k, v in pool(rt, sums, n).items()}
    if scores:  # the objectives with a discriminator
        y = np.concatenate([t.numpy() for t in rt.gather(torch.cat(labels))])
        s = np.concatenate([t.numpy() for t in rt.gather(torch.cat(scores))])
        result["val_disc_auc"] = roc_auc(y, s)
    if "val_replaced_frac" in result:
        result["val_baseline_acc"] = 1.0 - result["val_replaced_frac"]  # all-original guess
    return result


def setup(opt: PretrainOptions, rt: Runtime,
          run_folder: Callable[[dict[str, Any], ShardDataset], Path | None]) -> Pretraining:
    """Check the inputs on every rank, prepare the run folder (``run_folder(run_config,
    data)`` on rank 0: the command's, which returns the checkpoint to resume from), build the
    model and trainer (restored from that checkpoint)."""
    tc = opt.config.train
    busy = use_threads(tc.threads, "train.threads", rt.device)
    if busy and rt.is_main:  # a note, even under --quiet: why the run is slower
        print(busy, file=sys.stderr, flush=True)
    data, val, init, cfg, loader, micro, datasets, warm, mixes = rt.agree(
        lambda: _inputs(opt, rt), "reading data and config")
    kernels = rt.model_kernels(tc.unpad)
    o = cfg.objective
    frozen = rt.agree(lambda: load_generator(o.generator, data, kernels,
                                             o.generator_precision, "objective.generator")
                      if o.generator else None, "reading the frozen generator")
    run_config = _run_config(cfg, data, mixes, frozen)
    rt.check_same({"config": run_config, "data": data.meta, "init": opt.init,
                   "resume": opt.resume, "electra": __version__, "torch": torch.__version__},
                  "the config or the data")
    probe = rt.agree(lambda: Probe(tc, Path(opt.out)) if tc.probe_every else None,
                     "reading the probe's task (train.probe_train, train.probe_dev)")
    resume_from = rt.on_main(lambda: run_folder(run_config, data), "preparing the run folder")

    torch.manual_seed(tc.seed)  # the same initial weights on every rank
    model = ElectraPretrainingModel(cfg.model, cfg.objective, data.special, kernels)
    if frozen is not None:
        model.attach_generator(frozen.module)
    if model.method.needs_unigram(cfg.objective):
        model.set_unigram(data.unigram_counts())
    if init is not None and resume_from is None:
        model.start_from(init[1], init[2])  # init[2] None: the model's fresh generator
        if opt.progress and rt.is_main:
            print(init_line(opt.init, cfg, init[2] is not None, init[4]), flush=True)
    n_params = count_parameters(model)
    trainer = make_trainer(
        model, cfg, rt, out=Path(opt.out), config=run_config, progress=opt.progress,
        stateful={"loader": loader}, resume=resume_from,
        rebuild=lambda: ElectraPretrainingModel(cfg.model, cfg.objective, data.special,
                                                kernels))
    if frozen is not None and opt.progress:  # (the trainer moved it with the model)
        trainer.say(frozen.line())
    if trainer.saved_world_size != rt.world_size:
        trainer.say(f"electra: resuming a {trainer.saved_world_size}-process run with "
                    f"{rt.world_size}: same step and data position; dropout streams restart, "
                    f"so not bitwise equal to an uninterrupted run")
    elif opt.resume and resume_from is None and opt.progress:
        trainer.say(f"no checkpoint in {opt.out}; starting a new run")
    gen_cfg = None if frozen is None else frozen.config
    fpt, peak, source = _mfu_terms(cfg, data.seq_len, rt, gen_cfg)
    if opt.progress:
        first_lines(trainer, cfg, data, mixes, n_params, rt, peak, source)
    phases, current = _phases(opt, cfg, datasets, Phase(cfg, val, fpt), trainer.step, rt,
                              gen_cfg)
    return Pretraining(data, val, cfg, micro, trainer, loader, probe, fpt, peak,
                       warm if tc.batch_warmup else None, phases, current)


def _run_config(cfg: RunConfig, data: ShardDataset,
                mixes: dict[int, list[tuple[ShardDataset, Share]]],
                frozen: FrozenGenerator | None) -> dict[str, Any]:
    """What the run folder's config.json holds (what a resumed run must match): the config,
    the data's tokenizer and length, the mix, the frozen generator's checksum."""
    run_config = {**cfg.to_dict(), "tokenizer_sha256": data.meta["tokenizer_sha256"],
                  "data_vocab_size": data.vocab_size, "seq_len": data.seq_len}
    if frozen is not None:  # a resumed run must sample from the same weights
        run_config["generator_sha256"] = frozen.sha256
    if any(len(mix) > 1 for mix in mixes.values()):
        # the mix (a run of one folder per phase keeps the config.json it had)
        run_config["data_mix"] = [[{"name": s.name, "weight": s.weight} for _, s in mix]
                                  for mix in mixes.values()]
    return run_config


def _phases(opt: PretrainOptions, cfg: RunConfig, datasets: dict[int, ShardDataset],
            first: Phase, step: int, rt: Runtime, generator: ModelConfig | None = None
            ) -> tuple[dict[int, Phase], int]:
    """Each length's :class:`Phase` (the first: the run's own), and the length of the phase
    ``step`` is in (a resumed run's)."""
    phases = {n: Phase(dataclasses.replace(cfg, objective=phase_objective(
        opt.config.objective, cfg.train.phases, n)), held_out(d),
        _mfu_terms(cfg, n, rt, generator)[0]) for n, d in list(datasets.items())[1:]}
    phases = {next(iter(datasets)): first, **phases}
    starts = phase_starts([f for _, f, _ in parse_phases(cfg.train.phases)],
                          cfg.train.max_steps)
    at = max((i for i, s in enumerate(starts) if s <= step), default=0)
    return phases, list(phases)[at]


def phase_objective(objective: Any, phases: str, seq_len: int) -> Any:
    """The objective of the phase of ``seq_len``-token rows: its mask rate where
    train.phases gives one (LEN:FRACTION:MASK), and its slots (max_predictions, unset:
    derived from the length and that rate)."""
    mask = next((m for n, _, m in parse_phases(phases) if n == seq_len and m), None)
    if mask is not None:
        objective = dataclasses.replace(objective, mask_prob=mask)
    return dataclasses.replace(objective, max_predictions=slots(objective, seq_len))


def _mfu_terms(cfg: RunConfig, seq_len: int, rt: Runtime,
               generator: ModelConfig | None = None) -> tuple[float, float, str]:
    """(training FLOPs a token, the peak FLOP/s of every process's device together, its
    source); (0, 0, "") where the FLOPs are not one figure (two-stage training).
    ``generator``: a frozen generator's config (its forward counted, nothing else)."""
    if cfg.objective.two_stage_steps:
        return 0.0, 0.0, ""
    fpt = step_flops_per_sequence(cfg.model, cfg.objective, seq_len, generator) / seq_len
    tc = cfg.train
    peak, source = (tc.peak_tflops * 1e12, "train.peak_tflops") if tc.peak_tflops else \
        peak_flops(rt.device, resolve_precision(rt.device, tc.precision))
    return fpt, peak * rt.world_size, source


def make_trainer(model: ElectraPretrainingModel, cfg: RunConfig, rt: Runtime,
                 **kw: Any) -> Trainer:
    """The scaffold for ``model`` with the config's optimizer, schedule and step settings;
    ``kw`` (run folder, resume...) passes to :class:`Trainer`."""
    tc, out = cfg.train, kw.get("out")
    settings = Settings.of(tc, tc.lr, tc.max_steps, tc.warmup_steps,
                           keep_checkpoints=tc.keep_checkpoints, parallel=tc.parallel,
                           cuda_graphs=tc.cuda_graphs,
                           tracking=Tracking(parse_log_to(tc.log_to, "train.log_to"),
                                             root=out, name=out.name if out else ""),
                           # two-stage: one part of the model gets no gradient in each stage
                           find_unused=bool(cfg.objective.two_stage_steps))
    # Masking and sampling draw from one stream shared by all ranks (each takes its rows of
    # the global batch); dropout and Gumbel noise from streams of each rank's own.
    streams = RandomStreams(rt, tc.seed, shared={"masking": 1}, local={"gumbel": 2})
    return Trainer(model, rt, settings,
                   lambda m: param_groups(m, tc.weight_decay, tc.optimizer == "muon"),
                   streams=streams, **kw)


def _inputs(opt: PretrainOptions, rt: Runtime) -> tuple[Any, ...]:
    """Data, validation split, init weights, the resolved config, this rank's loader and the
    batch split, each checked (a UserError on any rank stops every rank)."""
    cfg, tc = opt.config, opt.config.train
    check_reachable(parse_log_to(tc.log_to, "train.log_to"), "train.log_to")
    words = cfg.objective.unit != "token"  # whole words and spans need the word boundaries
    mixes = open_phases(opt.data, tc, words)  # one per length, the first phase's first
    datasets = {n: mix[0][0] for n, mix in mixes.items()}  # each phase's first folder
    data = next(iter(datasets.values()))
    val = held_out(data)
    init = load_init(opt.init, cfg.model) if opt.init else None
    model_cfg = (init[0] if init else cfg.model).replace(vocab_size=data.vocab_size,
                                                        pad_token_id=data.special.pad)
    if not (init or opt.resume):  # a new model: one export would refuse, refused now
        body_of(model_cfg).check_exportable(model_cfg)
    if init:
        if init[0].vocab_size != data.vocab_size:
            raise UserError(f"--init {opt.init}: the model's vocabulary has "
                            f"{init[0].vocab_size} tokens but --data {opt.data} was prepared "
                            f"with {data.vocab_size}; prepare the data with the model's "
                            f"tokenizer")
        tok = load_tokenizer(init[3])
        data.check_tokenizer(tokenizer_checksum(tok), tok.get_vocab_size(),
                             f"--init {opt.init}")
    per_rank = tc.batch_size // rt.world_size
    if per_rank * rt.world_size != tc.batch_size or per_rank % tc.grad_accum:
        raise UserError(f"train.batch_size={tc.batch_size} does not split into "
                        f"{rt.world_size} process(es) x train.grad_accum={tc.grad_accum} "
                        f"equal micro-batches; choose a batch divisible by both")
    if any(d.packed for mix in mixes.values() for d, _ in mix) and not \
            body_of(model_cfg).packed_rows:
        raise UserError(f"--data {opt.data}: rows of several sequences (prepare --pack), "
                        f"which the {model_cfg.body} body cannot keep apart; prepare the data "
                        f"without --pack")
    for length in datasets:
        if length > model_cfg.max_position_embeddings:
            raise UserError(f"--data {opt.data}: sequence length {length} exceeds the "
                            f"model's {model_cfg.max_position_embeddings} positions; prepare "
                            f"with a shorter --seq-len or --set "
                            f"model.max_position_embeddings={length}")
        _check_length(opt, model_cfg, length, per_rank // tc.grad_accum, rt)
    warm = batch_warmup(tc, data.seq_len)
    loader = Prefetched(_loader(mixes, tc, warm, per_rank, rt), pin=rt.pins_memory,
                        prepare=with_layouts(per_rank // tc.grad_accum) if tc.unpad else None)
    # The run's config names its slots (unset: derived from the data's sequence length) and
    # its first phase's mask rate (train.phases' LEN:FRACTION:MASK).
    objective = phase_objective(cfg.objective, tc.phases, data.seq_len)
    if tc.max_tokens:  # the steps those token positions take, rounded up
        tc = dataclasses.replace(tc, max_steps=steps_for_tokens(warm, tc.max_tokens,
                                                                data.seq_len))
    cfg = RunConfig(model=model_cfg, objective=objective, train=tc)
    return data, val, init, cfg, loader, per_rank // tc.grad_accum, datasets, warm, mixes


def _loader(mixes: dict[int, list[tuple[ShardDataset, Share]]], tc: TrainConfig,
            warm: BatchSizes, per_rank: int, rt: Runtime
            ) -> BatchLoader | MixedLoader | PhasedLoader:
    """This rank's batches: of the one length, or of each phase's in turn (a batch warmup
    only inside the first phase); a phase of one folder reads it as ever, a mixture draws
    each row's folder at its weight."""
    sizes = (lambda i: warm(i) // rt.world_size) if tc.batch_warmup else None
    blocks = Blocks(tc.shuffle_block, tc.shuffle_window, tc.partitions) \
        if tc.shuffle == "blocks" else None

    def one(i: int, mix: list[tuple[ShardDataset, Share]]) -> BatchLoader | MixedLoader:
        if len(mix) == 1:
            return BatchLoader(mix[0][0], per_rank, seed=tc.seed, rank=rt.rank,
                               world_size=rt.world_size, sizes=sizes if i == 0 else None,
                               blocks=blocks)
        if tc.partitions > 1:
            raise UserError(f"train.partitions={tc.partitions} parts one folder's blocks; a "
                            f"mixture's rows are drawn across its folders (leave "
                            f"train.partitions=1: each folder streams window by window)")
        return MixedLoader([d for d, _ in mix], [s for _, s in mix], per_rank, seed=tc.seed,
                           rank=rt.rank, world_size=rt.world_size,
                           sizes=sizes if i == 0 else None, blocks=blocks)

    loaders = [one(i, mix) for i, mix in enumerate(mixes.values())]
    if len(loaders) == 1:
        return loaders[0]
    starts = phase_starts([f for _, f, *_ in parse_phases(tc.phases)], tc.max_steps)
    if len(set(starts)) < len(starts) or starts[-1] >= tc.max_steps:
        raise UserError(f"train.phases={tc.phases}: a phase gets no step of "
                        f"train.max_steps={tc.max_steps}; give it a larger fraction")
    if tc.batch_warmup and warm(starts[1] - 1) != tc.batch_size:
        raise UserError(f"train.batch_warmup={tc.batch_warmup} lasts past the first phase of "
                        f"train.phases={tc.phases} (step {starts[1]}); warm up over fewer "
                        f"tokens")
    return PhasedLoader(loaders, starts)


def batch_warmup(tc: TrainConfig, seq_len: int) -> BatchSizes:
    """Each step's global batch (``train.batch_warmup``; ``batch_size`` without one)."""
    start, tokens = parse_batch_warmup(tc.batch_warmup)
    return batch_sizes(start, tokens, tc.batch_size, tc.batch_size // tc.grad_accum, seq_len)


def _check_length(opt: PretrainOptions, cfg: ModelConfig, seq_len: int, micro: int,
                  rt: Runtime) -> None:
    """Rows of ``seq_len`` tokens suit the body's settings, and a micro-batch's attention
    probabilities (where the kernels write them out) fit in the device's free memory."""
    why = body_of(cfg).length_error(cfg, seq_len)
    if why:
        raise UserError(f"--data {opt.data}: {why}")
    need = kept_attention_bytes(rt.kernels, micro, seq_len, cfg.num_layers, cfg.num_heads,
                                cfg.attention_dropout)
    have = available_memory(rt.device)
    if need and have is not None and need > 0.9 * have:
        why = (f"model.attention_dropout={cfg.attention_dropout} writes each layer's "
               f"{seq_len:,} x {seq_len:,} matrix out" if cfg.attention_dropout else
               f"rows this short are attended written out, each layer's {seq_len:,} x "
               f"{seq_len:,} matrix kept")
        drop = ("set model.attention_dropout=0 (the fused kernel keeps none of it), "
                if cfg.attention_dropout else "")
        raise UserError(
            f"--data {opt.data}: {micro} rows of {seq_len:,} tokens a micro-batch keep "
            f"{need / 1e9:,.1f} GB of attention probabilities ({why}) but "
            f"{have / 1e9:,.1f} GB is free; {drop}a larger train.grad_accum, a smaller "
            f"train.batch_size, or prepare shorter rows")


def fit(opt: PretrainOptions, p: Pretraining, rt: Runtime) -> None:
    """The steps from the run's step to its end (or ``--stop-after``'s, ``stop_at``'s): each
    step, its metrics line (validation, probes, MFU) when due, checkpoints; a disk that
    fills is one line naming ``--resume``."""
    trainer, tc = p.trainer, p.cfg.train
    stop_at = min(tc.max_steps, trainer.step + (opt.stop_after or tc.max_steps),
                  opt.stop_at or tc.max_steps)
    resume_hint = "free disk space and rerun with --resume"

    def log() -> None:
        record = trainer.metrics()
        phase = p.phases[p.current]  # validation at the length training is at
        if phase.val is not None and (trainer.every(tc.eval_every)
                                      or trainer.step == tc.max_steps):
            record.update(validate(trainer.model, phase.val, phase.cfg, rt, p.micro,
                                   stage_at(p.cfg.objective, trainer.step)))
        if p.probe is not None and rt.is_main and (trainer.every(tc.probe_every)
                                                   or trainer.step == tc.max_steps):
            disc = trainer.model.discriminator
            record.update(p.probe.run(disc.encoder, disc.config, rt))
        record.update(p.mfu(record["tokens_per_s"]))
        if p.warm is not None:  # the last step's batch (the loader counts the batches)
            record["batch_size"] = p.warm(p.loader.state_dict()["batches"] - 1)
        if tc.phases:  # the length phase the step trained at
            record["seq_len"] = p.current
        if p.scheduled_mask:  # the step's mask rate
            record["mask_rate"] = p.phases[p.current].cfg.mask_prob_at(trainer.step - 1)
        drawn = source_tokens(p.loader.state_dict())  # a mixture: real tokens by source
        if drawn:
            names = sorted(drawn)
            total = rt.all_sum(torch.tensor([drawn[n] for n in names], dtype=torch.float64,
                                            device=rt.device))
            record.update({f"tokens_from_{n}": int(v) for n, v in zip(names, total.tolist(),
                                                                   strict=True)})
        trainer.log(record, show=("loss", "disc_acc", "tokens_per_s", "val_disc_auc",
                                  "probe_dev_accuracy"))

    with disk_errors(Path(opt.out), resume_hint), trainer.running():
        if trainer.log_due:  # Ctrl-C came while this step's line was being computed
            log()
        while trainer.step < stop_at:
            batch = next(p.loader)
            p.current = batch["input_ids"].shape[1]  # the phase's length (train.phases)
            if train_step(trainer, batch, p.phases[p.current].cfg, p.data.special,
                          p.micro) is None:
                continue  # a non-finite loss: the step was skipped
            if trainer.every(tc.log_every) or trainer.step == tc.max_steps:
                log()
            trainer.advance()
            if trainer.every(tc.save_every) or trainer.step == stop_at:
                trainer.save()
