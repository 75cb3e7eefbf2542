"""Pretraining: build -> loop -> validate, on the shared scaffold (``electra.train.trainer``).

    RUN/config.json        the resolved config (model, objective, train) + data facts
    RUN/tokenizer.json     the data's tokenizer
    RUN/metrics.jsonl      one line per logged step (and val_* after each validation)
    RUN/tb/                TensorBoard event files
    RUN/checkpoints/       atomic checkpoints, the last K kept
    RUN/discriminator/     final weights + config + tokenizer, for fine-tuning and export
    RUN/generator/         the same for the generator

A run stopped and resumed with ``--resume`` produces the same metrics and final weights as one
that never stopped (on CPU, in fp32, with the same seed): every random stream (dropout,
masking, sampling), the data position and the unlogged metrics are saved with the checkpoint.

Under torchrun each process takes its rows of every global batch. A step's masking/sampling
draws and loss denominators belong to the whole global batch, so 1 process, N processes and N
accumulation micro-batches compute the same step (up to float summation order); dropout draws
from a stream of each rank's own. Rank 0 writes everything.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from electra import __version__
from electra.config import (
    DEFAULT_TIMEOUT_S,
    ModelConfig,
    TrainConfig,
    config_diffs,
    parse_batch_warmup,
    parse_phases,
)
from electra.data.examples import roc_auc
from electra.data.loader import BatchLoader, PhasedLoader, Prefetched, ShardDataset
from electra.data.tokenizer import SIDECAR, SpecialTokens, load_tokenizer, tokenizer_checksum
from electra.errors import UserError
from electra.io.checkpoint import latest_checkpoint
from electra.io.files import disk_errors, read_json, write_json
from electra.io.outputs import Claim, claim_out
from electra.io.trackers import Tracking, check_reachable, parse_log_to
from electra.model import body_of, count_parameters
from electra.model.kernels import HostLayout, kept_attention_bytes
from electra.objectives.config import (
    RunConfig,
    decay_branch_config,
    load_run_config,
    resumed_run_config,
)
from electra.objectives.flops import step_flops_per_sequence
from electra.objectives.masking import Batch, Draws, slots, step_draws
from electra.objectives.pretraining import ElectraPretrainingModel, begin_step, stage_at
from electra.runtime import (
    Runtime,
    autocast,
    available_memory,
    check_compile,
    check_cuda_graphs,
    peak_flops,
    resolve_device,
    resolve_precision,
    rows_without_padding,
    start,
    use_threads,
)
from electra.saved import cards, folders
from electra.saved.hf_format import GENERATOR_WEIGHTS
from electra.saved.models import open_model
from electra.train.metrics import iter_metrics
from electra.train.optim import (
    BatchSizes,
    batch_sizes,
    param_groups,
    phase_starts,
    steps_for_tokens,
)
from electra.train.probe import Probe
from electra.train.trainer import RandomStreams, Settings, Trainer, add_into, pool

# Settings that may change when a run is resumed; all others must match the saved run.
RESUMABLE_CHANGES = {"log_every", "eval_every", "eval_batches", "save_every",
                     "keep_checkpoints", "threads", "max_nonfinite_skips", "parallel",
                     # how the same step runs (a run started on a GPU resumes on a CPU)
                     "compile", "cuda_graphs",
                     # probes read the model and change nothing
                     "probe_every", "probe_train", "probe_dev", "probe_text_columns",
                     "probe_label_column", "probe_max_examples", "probe_epochs",
                     # what the model cards say
                     "license"}


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


def main(data: str, out: str, preset: str | None = None, config: str | None = None,
         sets: list[str] | None = None, resume: bool = False, overwrite: bool = False,
         init: str | None = None, device: str = "auto", progress: bool = True,
         stop_after: int | None = None, dist_timeout: float = DEFAULT_TIMEOUT_S,
         decay_from: str | None = None) -> None:
    """`electra pretrain`: resolve the config, then pretrain in this command's runtime."""
    if decay_from is not None:
        if preset is not None or config is not None or init is not None:
            raise UserError(f"--decay-from {decay_from} takes the run's settings and weights "
                            f"from the checkpoint: drop --preset, --config and --init (change "
                            f"a setting with --set)")
        cfg, _ = decay_branch_config(decay_from, sets)
    elif preset is None and config is None and not resume:
        raise UserError("give --preset NAME (tiny, small, base, large, modernbert-small, "
                        "...: `electra pretrain --help` lists them) or --config FILE.toml")
    else:
        cfg = (resumed_run_config(out, sets) if preset is None and config is None
               else load_run_config(preset, config, sets))
    if stop_after is not None and stop_after < 1:
        raise UserError(f"--stop-after {stop_after}: give a number of steps >= 1")
    opt = PretrainOptions(data=data, out=out, config=cfg, resume=resume, overwrite=overwrite,
                          progress=progress, device=device, stop_after=stop_after, init=init,
                          decay_from=decay_from)
    with start(device, dist_timeout, keep_memory=True) as rt:
        pretrain(opt, rt)


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

    def mfu(self, tokens_per_s: float) -> dict[str, float]:
        """A metrics line's model FLOPs utilisation, over its real tokens (at the length of
        the last step's rows)."""
        fpt = self.phases[self.current].flops_per_token
        return {"mfu": tokens_per_s * fpt / self.peak} if self.peak else {}


def pretrain(opt: PretrainOptions, rt: Runtime | None = None) -> dict[str, Any]:
    """Run (or resume) pretraining; returns the last logged metrics."""
    rt = rt or Runtime(device=resolve_device(opt.device))
    check_compile(opt.config.train.compile, rt.device, "train.compile")
    check_cuda_graphs(opt.config.train.cuda_graphs, rt.device)
    inputs = [*(("--data", name.strip()) for name in opt.data.split(",") if name.strip()),
              ("--init", opt.init), ("--decay-from", opt.decay_from)]
    with claim_out(opt.out, "run", "pretrain", overwrite=opt.overwrite, resume=opt.resume,
                   inputs=inputs, rt=rt) as claim:
        return _pretrain(opt, rt, claim)


def _pretrain(opt: PretrainOptions, rt: Runtime, claim: Claim) -> dict[str, Any]:
    p = build(opt, rt, claim)
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
    if trainer.step == tc.max_steps:
        final = trainer.whole_model()  # a collective under FSDP
        if rt.is_main:
            tok = load_tokenizer(Path(opt.out))
            for kind, module in final.parts().items():
                folders.save(module, kind, Path(opt.out) / kind, tok,
                             card=pretraining_card(opt, p, kind, module))
    if rt.is_main and opt.progress:
        print(closing_line(opt.out, trainer.step, tc.max_steps, trainer.last), flush=True)
    rt.barrier()  # every rank returns once the run's files exist
    return trainer.last


VAL_SHOWN = (("val_disc_acc", "held-out discriminator accuracy {:.2%}"),
             ("val_baseline_acc", "all-original baseline {:.2%}"),
             ("val_disc_auc", "ROC-AUC {:.3f}"),
             ("val_gen_acc", "generator accuracy on masked tokens {:.1%}"),
             ("val_mlm_acc", "MLM accuracy {:.1%}"))


def closing_line(out: str, step: int, max_steps: int, last: dict[str, Any] | None) -> str:
    """What a run's end says: where it stopped, its last validation, what it wrote."""
    if step < max_steps:
        return (f"electra: stopped at step {step:,} of {max_steps:,} with a checkpoint in "
                f"{Path(out) / 'checkpoints'}; the same command with --resume continues")
    shown = [text.format(last[key]) for key, text in VAL_SHOWN if key in (last or {})]
    parts = [p for p in ("discriminator", "generator") if (Path(out) / p).is_dir()]
    return (f"electra: done, {step:,} steps" + (f"; {', '.join(shown)}" if shown else "")
            + f"\nwrote {', '.join(str(Path(out) / p) + '/' for p in parts)}; next: "
            f"electra finetune --model {out} --task TASK ..., electra detect --model {out} "
            f"TEXT, or electra export {out} --out HF_FOLDER")


# A validation figure in a part's card: (part, metric, the hub's task type, task).
CARD_RESULTS = {
    "val_disc_acc": ("discriminator", "accuracy", "token-classification", "replaced-token "
                     "detection"),
    "val_disc_auc": ("discriminator", "roc_auc", "token-classification", "replaced-token "
                     "detection"),
    "val_gen_acc": ("generator", "accuracy", "fill-mask", "masked language modelling"),
    "val_mlm_acc": ("discriminator", "accuracy", "fill-mask", "masked language modelling")}


def corpus_name(meta: dict[str, Any], folder: str, sized: bool = True) -> str:
    """What a prepared folder was made from, as a card names it (no local paths): its inputs'
    file names (a hub dataset's id), with their documents and size: ``corpus.txt (120,000
    documents, 53.1 MB)``, without them unless ``sized``; the folder's name where its
    data.json has no inputs."""
    names = [n[len("hub:"):] if n.startswith("hub:") else Path(n).name
             for n in meta.get("inputs") or {}]
    if not names:
        return folder
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    size = [f"{meta['documents']:,} documents" if meta.get("documents") else "",
            f"{meta['bytes'] / 1e6:.1f} MB" if meta.get("bytes") else ""]
    return shown + (f" ({', '.join(x for x in size if x)})" if sized and any(size) else "")


def pretraining_card(opt: PretrainOptions, p: Pretraining, kind: str,
                     module: torch.nn.Module) -> dict[str, Any]:
    """What the model card of a finished run's ``kind`` folder says (electra.saved.cards):
    the objective, body, data, steps, tokens and FLOPs, the command, its held-out figures."""
    cfg, tc, t = p.cfg, p.cfg.train, p.trainer
    o, data = cfg.objective, corpus_name(p.data.meta, p.data.folder.name)
    tokens = t.tokens
    rows = [("objective", f"{o.kind}: {o.mask_prob:.0%} of tokens chosen, discriminator "
                          f"weight {o.disc_weight:g}, sharing {cfg.sharing}"),
            ("model", cards.size_line(module.config, count_parameters(module))),  # type: ignore[arg-type]
            ("data", f"{data}, in rows of {' then '.join(map(str, p.phases))} tokens"
             if tc.phases else f"{data}: {len(p.data):,} examples of {p.data.seq_len} tokens"),
            ("steps", f"{t.step:,} steps of {tc.batch_size} examples; {tc.optimizer}, "
                      f"{tc.schedule} schedule, peak rate {tc.lr:g}, {tc.warmup_steps:,} "
                      f"warmup steps"),
            ("tokens", f"{tokens:,} (real, padding not counted)"),
            *([("length phases", tc.phases)] if tc.phases else []),
            ("precision", resolve_precision(t.rt.device, tc.precision)),
            ("software", f"electra {__version__}, torch {torch.__version__}")]
    if p.flops_per_token and not tc.phases:
        rows.insert(5, ("training FLOPs", f"{p.flops_per_token * tokens:.3g} (generator and "
                                          f"discriminator, forward and backward)"))
    named = corpus_name(p.data.meta, p.data.folder.name, sized=False)
    results = [cards.result(task, named, metric, t.last[key], task_type=hub_task,
                            split="held-out")
               for key, (part, metric, hub_task, task) in CARD_RESULTS.items()
               if part == kind and key in t.last]
    what = {"discriminator": "labels every token of its input original or replaced (the "
                             "encoder to fine-tune)",
            "generator": "fills masked positions (the small masked language model whose "
                         "samples the discriminator learned to detect)"}
    card = {"title": f"{kind} of an electra pretraining run ({cfg.model.body} body)",
            "what": f"The {kind} of an `electra pretrain` run: it {what.get(kind, kind)}.",
            "trained": rows, "command": cards.command_line(), "results": results,
            "tags": [cfg.model.body, "replaced-token-detection", "pretraining"],
            "datasets": sorted(name[len("hub:"):] for name in p.data.meta.get("inputs", {})
                               if name.startswith("hub:"))}
    return cards.with_lineage(card, cards.source_lineage(opt.init), tc.license)


def train_step(trainer: Trainer, batch: dict[str, torch.Tensor], cfg: RunConfig,
               special: SpecialTokens, micro: int) -> dict[str, torch.Tensor] | None:
    """One pretraining step on ``batch``, this rank's rows of a global batch: the global
    batch's random draws and loss denominators first, then the scaffold's step over
    micro-batches of ``micro`` rows. Returns the step's statistics (None when skipped).
    The step the benches time."""
    rt, obj_cfg = trainer.rt, cfg.objective
    full = rows_without_padding(batch["attention_mask"])  # before the batch goes over
    rows = len(batch["input_ids"])  # batch_size / processes, fewer in a batch warmup
    hosts = host_layouts(batch, micro, rt) if cfg.train.unpad else None  # no device reads
    mine = Batch.of({k: v.to(rt.device, non_blocking=True) for k, v in batch.items()}, full)
    norm, noise = step_draws(mine, rows * rt.world_size, cfg.model.vocab_size, special,
                             cfg.objective, trainer.streams["masking"], rt)
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


def host_layouts(batch: dict[str, torch.Tensor], micro: int, rt: Runtime) -> list[Any]:
    """Each micro-batch's layout, computed on the host from the loader's rows and moved
    beside them (``electra.model.kernels.HostLayout``): what unpadding (``train.unpad``)
    would otherwise read off the device in every forward."""
    mask, groups = batch["attention_mask"], batch.get("sequence_ids")
    return [HostLayout.of(mask[j : j + micro], None if groups is None else groups[j : j + micro])
            .to(rt.device, pin=rt.pins_memory) for j in range(0, len(mask), micro)]


@torch.no_grad()
def validate(model: ElectraPretrainingModel, data: ShardDataset, cfg: RunConfig, rt: Runtime,
             micro: int, stage: int | None = None) -> dict[str, float]:
    """Held-out losses and statistics of the objective (generator loss/accuracy,
    discriminator loss/accuracy/ROC-AUC, MLM loss/accuracy: what the objective has).

    Scores the first ``eval_batches`` global batches of the split (in file order), each
    process its rows, pooled over processes: the numbers do not depend on the world size.
    The masking and sampling seed is fixed, and replacements are sampled at the schedule's
    final temperature, so every validation scores the same task on the same examples and
    the numbers are comparable over the run.
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
                                 cfg.objective, rng, rt)
        hosts = host_layouts(host, micro, rt) if tc.unpad else None
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


# -- building a run ----------------------------------------------------------------------


def build(opt: PretrainOptions, rt: Runtime, claim: Claim) -> Pretraining:
    """Check the inputs on every rank, prepare the run folder, build the model and trainer
    (restored from the run's last checkpoint with ``--resume``)."""
    tc = opt.config.train
    busy = use_threads(tc.threads, "train.threads", rt.device)
    if busy and rt.is_main:  # a note, even under --quiet: why the run is slower
        print(busy, file=sys.stderr, flush=True)
    data, val, init, cfg, loader, micro, datasets, warm = rt.agree(
        lambda: _inputs(opt, rt), "reading data and config")
    run_config = {**cfg.to_dict(), "tokenizer_sha256": data.meta["tokenizer_sha256"],
                  "data_vocab_size": data.vocab_size, "seq_len": data.seq_len}
    rt.check_same({"config": run_config, "data": data.meta, "init": opt.init,
                   "resume": opt.resume, "electra": __version__, "torch": torch.__version__},
                  "the config or the data")
    probe = rt.agree(lambda: Probe(tc, Path(opt.out)) if tc.probe_every else None,
                     "reading the probe's task (train.probe_train, train.probe_dev)")
    resume_from = rt.on_main(lambda: _run_folder(opt, run_config, data, claim),
                             "preparing the run folder")

    torch.manual_seed(tc.seed)  # the same initial weights on every rank
    kernels = rt.model_kernels(tc.unpad)
    model = ElectraPretrainingModel(cfg.model, cfg.objective, data.special, kernels)
    if model.method.needs_unigram(cfg.objective):
        model.set_unigram(_unigram_counts(data))
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
    if trainer.saved_world_size != rt.world_size:
        trainer.say(f"electra: resuming a {trainer.saved_world_size}-process run with "
                    f"{rt.world_size}: same step and data position; dropout streams restart, "
                    f"so not bitwise equal to an uninterrupted run")
    elif opt.resume and resume_from is None and opt.progress:
        trainer.say(f"no checkpoint in {opt.out}; starting a new run")
    fpt, peak, source = _mfu_terms(cfg, data.seq_len, rt)
    if opt.progress:
        m, g = cfg.model, cfg.model.generator_config()
        trainer.say(f"electra: {m.body} body {m.num_layers} x {m.hidden_size} (generator "
                    f"{g.num_layers} x {g.hidden_size}; dropout {m.hidden_dropout:g}/"
                    f"{m.attention_dropout:g}, layer-norm eps {m.layer_norm_eps:g}), "
                    f"{n_params / 1e6:.1f}M parameters, {len(data):,} examples of "
                    f"{data.seq_len} tokens, batch {tc.batch_size}"
                    + (f" over {rt.world_size} processes ({tc.parallel})" if rt.enabled else "")
                    + f", {resolve_precision(rt.device, tc.precision)}, {rt.device.type}"
                    + step_levers(tc, any(d.packed for d in datasets.values()))
                    + (f", resuming at step {trainer.step}" if trainer.step else "")
                    + (f"; MFU against {peak / rt.world_size / 1e12:,.1f} TFLOP/s a device "
                       f"({source})" if peak else ""))
    phases, current = _phases(opt, cfg, datasets, Phase(cfg, val, fpt), trainer.step, rt)
    return Pretraining(data, val, cfg, micro, trainer, loader, probe, fpt, peak,
                       warm if tc.batch_warmup else None, phases, current)


def step_levers(tc: TrainConfig, packed: bool) -> str:
    """What the step runs on, for the first line (docs/how-to/hardware.md has each lever's
    measurement on a GPU): the rows (packed or padded), unpadded or not, compiled blocks,
    CUDA graphs, the micro-batches."""
    levers = [("packed" if packed else "padded") + " rows",
              "unpadded" if tc.unpad else "every position computed",
              *(["CUDA graphs"] if tc.cuda_graphs else ["compiled blocks"] if tc.compile
                else []),
              *([f"{tc.grad_accum} micro-batches a step"] if tc.grad_accum > 1 else [])]
    return f" ({', '.join(levers)})"


def _phases(opt: PretrainOptions, cfg: RunConfig, datasets: dict[int, ShardDataset],
            first: Phase, step: int, rt: Runtime) -> tuple[dict[int, Phase], int]:
    """Each length's :class:`Phase` (the first: the run's own), and the length of the phase
    ``step`` is in (a resumed run's)."""
    words = cfg.objective.unit != "token"
    phases = {n: Phase(dataclasses.replace(cfg, objective=dataclasses.replace(
        cfg.objective, max_predictions=slots(opt.config.objective, n))),
        _val(d, words), _mfu_terms(cfg, n, rt)[0]) for n, d in list(datasets.items())[1:]}
    phases = {next(iter(datasets)): first, **phases}
    starts = phase_starts([f for _, f in parse_phases(cfg.train.phases)], cfg.train.max_steps)
    at = max((i for i, s in enumerate(starts) if s <= step), default=0)
    return phases, list(phases)[at]


def _mfu_terms(cfg: RunConfig, seq_len: int, rt: Runtime) -> tuple[float, float, str]:
    """(training FLOPs a token, the peak FLOP/s of every process's device together, its
    source); (0, 0, "") where the FLOPs are not one figure (two-stage training)."""
    if cfg.objective.two_stage_steps:
        return 0.0, 0.0, ""
    fpt = step_flops_per_sequence(cfg.model, cfg.objective, seq_len) / seq_len
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
    return Trainer(model, rt, settings, lambda m: param_groups(m, tc.weight_decay),
                   streams=streams, **kw)


def _inputs(opt: PretrainOptions, rt: Runtime) -> tuple[Any, ...]:
    """Data, validation split, init weights, the resolved config, this rank's loader and the
    batch split, each checked (a UserError on any rank stops every rank)."""
    cfg, tc = opt.config, opt.config.train
    check_reachable(parse_log_to(tc.log_to, "train.log_to"), "train.log_to")
    words = cfg.objective.unit != "token"  # whole words and spans need the word boundaries
    datasets = _datasets(opt, tc, words)  # one per length, the first phase's first
    data = next(iter(datasets.values()))
    val = _val(data, words)
    init = _load_init(opt.init, cfg.model) if opt.init else None
    model_cfg = (init[0] if init else cfg.model).replace(vocab_size=data.vocab_size,
                                                        pad_token_id=data.special.pad)
    if not (init or opt.resume):  # a new model: one export would refuse, refused now
        model_cfg.check_exportable()
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
    if any(d.packed for d in datasets.values()) and not body_of(model_cfg).packed_rows:
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
    loader = Prefetched(_loader(datasets, tc, warm, per_rank, rt), pin=rt.pins_memory)
    # The run's config names its slots (unset: derived from the data's sequence length).
    objective = dataclasses.replace(cfg.objective,
                                    max_predictions=slots(cfg.objective, data.seq_len))
    if tc.max_tokens:  # the steps those token positions take, rounded up
        tc = dataclasses.replace(tc, max_steps=steps_for_tokens(warm, tc.max_tokens,
                                                                data.seq_len))
    cfg = RunConfig(model=model_cfg, objective=objective, train=tc)
    return data, val, init, cfg, loader, per_rank // tc.grad_accum, datasets, warm


def _datasets(opt: PretrainOptions, tc: TrainConfig, words: bool) -> dict[int, ShardDataset]:
    """--data's prepared folders by their length, in the order train.phases reads them (one
    folder without phases); each checked, all of one tokenizer."""
    names = [name.strip() for name in opt.data.split(",") if name.strip()]
    phases = parse_phases(tc.phases)
    if len(names) > 1 and not phases:
        raise UserError(f"--data {opt.data}: {len(names)} folders; give one, or set "
                        f"train.phases=LEN:FRACTION,... to train on each length in turn")
    found: dict[int, ShardDataset] = {}
    for name in names:
        d = ShardDataset(name, "train", word_starts=words)
        if d.seq_len in found:
            raise UserError(f"--data {opt.data}: two folders hold {d.seq_len}-token rows; "
                            f"give one folder per length")
        found[d.seq_len] = d
    first = next(iter(found.values()))
    for d in found.values():
        if d.meta["tokenizer_sha256"] != first.meta["tokenizer_sha256"]:
            raise UserError(f"--data {opt.data}: {d.folder} was prepared with another "
                            f"tokenizer than {first.folder}; prepare every length with one")
    lengths = [n for n, _ in phases] or list(found)
    missing = [n for n in lengths if n not in found]
    unused = [n for n in found if n not in lengths]
    if missing or unused:
        what = (f"no folder holds {missing[0]}-token rows; prepare one with --seq-len "
                f"{missing[0]} and add it as --data A,B" if missing else
                f"no phase reads its {unused[0]}-token rows; name that length in the phases "
                f"or drop the folder")
        raise UserError(f"train.phases={tc.phases} with --data {opt.data}: {what} (the "
                        f"folders hold {', '.join(map(str, sorted(found)))})")
    return {n: found[n] for n in lengths}


def _val(data: ShardDataset, words: bool) -> ShardDataset | None:
    """The held-out split beside ``data``, where it was prepared with one."""
    return ShardDataset(data.folder, "val", word_starts=words) if "val" in \
        data.meta["splits"] else None


def _loader(datasets: dict[int, ShardDataset], tc: TrainConfig, warm: BatchSizes,
            per_rank: int, rt: Runtime) -> BatchLoader | PhasedLoader:
    """This rank's batches: of the one length, or of each phase's in turn (a batch warmup
    only inside the first phase)."""
    sizes = (lambda i: warm(i) // rt.world_size) if tc.batch_warmup else None
    loaders = [BatchLoader(d, per_rank, seed=tc.seed, rank=rt.rank, world_size=rt.world_size,
                           sizes=sizes if i == 0 else None)
               for i, d in enumerate(datasets.values())]
    if len(loaders) == 1:
        return loaders[0]
    starts = phase_starts([f for _, f in parse_phases(tc.phases)], tc.max_steps)
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
        raise UserError(
            f"--data {opt.data}: {micro} rows of {seq_len:,} tokens a micro-batch keep "
            f"{need / 1e9:,.1f} GB of attention probabilities (model.attention_dropout="
            f"{cfg.attention_dropout} writes each layer's {seq_len:,} x {seq_len:,} matrix "
            f"out) but {have / 1e9:,.1f} GB is free; set model.attention_dropout=0 (the fused "
            f"kernel keeps none of it), a larger train.grad_accum, a smaller "
            f"train.batch_size, or prepare shorter rows")


def _unigram_counts(data: ShardDataset) -> torch.Tensor:
    """How often each token occurs in the training split (special tokens: never drawn)."""
    counts = np.zeros(data.vocab_size, dtype=np.int64)
    for first in range(0, len(data), 1 << 16):
        counts += np.bincount(np.asarray(data.ids[first : first + (1 << 16)]).ravel(),
                              minlength=data.vocab_size)[: data.vocab_size]
    counts[data.special.ids()] = 0
    return torch.from_numpy(counts)


def _load_init(folder: str, run_model: ModelConfig
               ) -> tuple[ModelConfig, Any, Any, Path, bool]:
    """(model config, discriminator, generator, tokenizer folder, whether the RTD head was
    built fresh) to start from (a run, an imported run, a run's checkpoint, or a transformers
    folder: a generator is built, at the run's ``generator_size`` and ``generator_layers``
    (the folder's own depth rule where the run's is deeper than the model), where it holds
    none; the RTD head where the folder has none); dropout from the run config."""
    opened = open_model(folder, "discriminator", "--init")
    disc, tokenizer = opened["discriminator"], opened.tokenizer
    d = disc.config
    if d.body != run_model.body:
        raise UserError(f"--init {folder}: holds a {d.body} body but the run asks for "
                        f"model.body={run_model.body}; --set model.body={d.body} to continue "
                        f"it, or --init a {run_model.body} model")
    if _lone_transformers_model(Path(folder)):  # a fresh generator, sharing embeddings
        return (d.replace(generator_size=run_model.generator_size,
                          generator_layers=(run_model.generator_layers if
                                            run_model.generator_layers <= d.num_layers
                                            else d.generator_layers),
                          hidden_dropout=run_model.hidden_dropout,
                          attention_dropout=run_model.attention_dropout,
                          share_embeddings=run_model.share_embeddings), disc, None, tokenizer,
                opened.head_fresh)
    gen = open_model(folder, "generator", "--init")["generator"]
    g = gen.config
    cfg = d.replace(generator_size=g.hidden_size / d.hidden_size,
                    generator_layers=0 if g.num_layers == d.num_layers else g.num_layers,
                    hidden_dropout=run_model.hidden_dropout,
                    attention_dropout=run_model.attention_dropout,
                    share_embeddings=run_model.share_embeddings)
    derived = cfg.generator_config()
    if (derived.hidden_size, derived.num_heads, derived.intermediate_size,
            derived.num_layers) != (g.hidden_size, g.num_heads, g.intermediate_size,
                                    g.num_layers):
        raise UserError(f"--init {folder}: the generator ({g.hidden_size} wide, {g.num_heads} "
                        f"heads, FFN {g.intermediate_size}) is not a width multiple of the "
                        f"discriminator ({d.hidden_size}, {d.num_heads}, "
                        f"{d.intermediate_size})")
    return cfg, disc, gen, tokenizer, opened.head_fresh


def init_line(folder: str, cfg: RunConfig, generator_loaded: bool,
              head_fresh: bool = False) -> str:
    """What ``--init`` took from the folder and what the run built fresh, in one line."""
    m, g = cfg.model, cfg.model.generator_config()
    gen = f"the generator ({g.num_layers} x {g.hidden_size})"
    disc = f"the discriminator ({m.body} body {m.num_layers} x {m.hidden_size}"
    took = [disc + (", its encoder)" if head_fresh else ", with its replaced-token head)")]
    fresh = (["its replaced-token head"] if head_fresh else []) + (
        [] if generator_loaded else [gen])
    if generator_loaded:
        took.append(gen)
    line = f"--init {folder}: loaded {' and '.join(took)}"
    line += f"; built fresh: {' and '.join(fresh)}" if fresh else "; nothing built fresh"
    if cfg.sharing == "gdes":
        line += "; GDES's delta set to the discriminator's table less the generator's"
    return line


def _lone_transformers_model(folder: Path) -> bool:
    """A transformers folder that holds no generator (any class but a masked LM's)."""
    meta = read_json(folder / "config.json", "a model's config") if (
        folder / "config.json").is_file() else {}
    return (isinstance(meta, dict) and "model_type" in meta
            and not any(a.endswith("ForMaskedLM") for a in meta.get("architectures") or [])
            and not (folder / GENERATOR_WEIGHTS).is_file())  # a released V3 generator


def _in_its_run(checkpoint: Path, theirs: dict[str, Any], free: set[str]) -> bool:
    """Whether ``checkpoint`` sits in the run that wrote it (``RUN/checkpoints/step-N``, with
    RUN's config.json its settings, bar what --resume may change), so RUN's metrics are its
    history; a checkpoint copied into another folder is not."""
    run = checkpoint.parent.parent
    if checkpoint.parent.name != "checkpoints" or not (run / "config.json").is_file():
        return False
    try:
        mine = json.loads((run / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(mine, dict) and not config_diffs(
        {k: v for k, v in theirs.items() if k not in ("step", "tokens")}, mine, free)


def _branch(checkpoint: Path, run_config: dict[str, Any], out: Path) -> Path:
    """--decay-from: the checkpoint is the data's and the run's (its settings but the decay's
    length), and its run's metrics lines up to it start this run's."""
    theirs = read_json(checkpoint / "config.json", "a checkpoint's config")
    free = {f"train.{k}" for k in RESUMABLE_CHANGES} | {"train.max_steps",
                                                         "train.decay_steps", "step", "tokens"}
    diffs = config_diffs(theirs, run_config, free)
    if diffs:
        raise UserError(f"--decay-from {checkpoint}: this run would differ from the "
                        f"checkpoint's ({'; '.join(diffs[:3])}); use the run's --data and "
                        f"change only what --resume allows")
    lines = checkpoint.parent.parent / "metrics.jsonl"
    if lines.is_file() and not _in_its_run(checkpoint, theirs, free):
        print(f"electra: note: --decay-from {checkpoint}: the run folder around it is not the "
              f"run that wrote it (a copied checkpoint?), so its metrics.jsonl is not taken "
              f"as this branch's history; this run's metrics start at step "
              f"{theirs['step'] + 1}", file=sys.stderr, flush=True)
    elif lines.is_file():
        kept = [r for r in iter_metrics(lines.parent) if r["step"] <= theirs["step"]]
        part = out / "metrics.jsonl.tmp"
        part.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
        part.replace(out / "metrics.jsonl")
    return checkpoint


def _run_folder(opt: PretrainOptions, run_config: dict[str, Any], data: ShardDataset,
                claim: Claim) -> Path | None:
    """Create or check RUN (``claim``: what :func:`electra.io.outputs.claim_out` found there)
    and write its config; returns the checkpoint to resume from."""
    out = Path(opt.out)
    if claim.state == "same" and opt.overwrite and not opt.resume:
        shutil.rmtree(out)  # a run of this command's own (the claim checked it)
    claim.mark(out)
    found = None
    if opt.resume and (out / "config.json").is_file():
        saved = read_json(out / "config.json", "the run's config")
        if saved.get("tokenizer_sha256") != run_config["tokenizer_sha256"]:
            raise UserError(f"--resume: --data {opt.data} was prepared with another tokenizer "
                            f"than the run in {out} (tokenizer checksums differ); resume with "
                            f"the run's data or start a new --out")
        free = {f"train.{k}" for k in RESUMABLE_CHANGES}
        diffs = config_diffs(saved, run_config, free)
        if diffs:
            raise UserError(f"--resume: the settings differ from the run being resumed ("
                            f"{'; '.join(diffs[:3])}); resume with the same settings or start "
                            f"a new --out")
        found = latest_checkpoint(out / "checkpoints")
        if found is not None:
            theirs = read_json(found / "config.json", "a checkpoint's config")
            diffs = config_diffs(theirs, run_config, free | {"step", "tokens"})
            if diffs:
                raise UserError(f"--resume: checkpoint {found.name} was written by another run "
                                f"({'; '.join(diffs[:3])}); remove {found} to resume from an "
                                f"earlier checkpoint, or start a new --out")
    if opt.decay_from is not None:
        found = _branch(Path(opt.decay_from), run_config, out)
    write_json(out / "config.json", run_config)
    for name in ("tokenizer.json", SIDECAR):
        if (data.folder / name).is_file():  # the roles' file: data prepared since issue 17
            part = out / f"{name}.tmp"
            shutil.copyfile(data.folder / name, part)
            part.replace(out / name)
    return found
