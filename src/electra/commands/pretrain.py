"""`electra pretrain`: the flags, the run folder, the final models and what the run says.

    RUN/config.json        the resolved config (model, objective, train) + data facts
    RUN/tokenizer.json     the data's tokenizer
    RUN/metrics.jsonl      one line per logged step (and val_* after each validation)
    RUN/tb/                TensorBoard event files
    RUN/checkpoints/       atomic checkpoints, the last K kept
    RUN/discriminator/     final weights + config + tokenizer, for fine-tuning and export
    RUN/generator/         the same for the generator

The loop itself (setup, fit, validate, the step) is ``electra.train.pretraining``; here:
the config from the flags, ``--out`` (a new run, ``--resume``'s checks, a ``--decay-from``
branch), the final models with their cards, the closing line. Rank 0 writes everything.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from electra import __version__
from electra.config import DEFAULT_TIMEOUT_S, config_diffs
from electra.data.loader import ShardDataset
from electra.data.mixspec import parse_data
from electra.data.sources import local_inputs
from electra.data.tokenizer import SIDECAR, load_tokenizer
from electra.errors import UserError
from electra.io import hub
from electra.io.checkpoint import latest_checkpoint
from electra.io.files import maybe_json, read_json, write_json
from electra.io.outputs import Claim, claim_out
from electra.model import count_parameters
from electra.run_config import data_table, decay_branch_config, load_run_config, resumed_run_config
from electra.runtime import (
    Runtime,
    check_compile,
    check_cuda_graphs,
    resolve_device,
    resolve_precision,
    start,
)
from electra.saved import cards, folders
from electra.train.metrics import iter_metrics
from electra.train.pretraining import Pretraining, PretrainOptions, fit, setup

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


def main(data: str | None, out: str, preset: str | None = None, config: str | None = None,
         sets: list[str] | None = None, resume: bool = False, overwrite: bool = False,
         init: str | None = None, device: str = "auto", progress: bool = True,
         stop_after: int | None = None, dist_timeout: float = DEFAULT_TIMEOUT_S,
         decay_from: str | None = None, generator: str | None = None) -> None:
    """`electra pretrain`: resolve the config, then pretrain in this command's runtime."""
    if generator is not None:  # a frozen generator: objective fast_electra (then --set)
        sets = ["objective.kind=fast_electra", f"objective.generator={generator}",
                *(sets or [])]
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
    data = data or data_table(config)  # --data wins over the file's [data] table
    if not data:
        raise UserError("give --data FOLDER (or a mixture, A:0.7+B:0.3), or a [data] table "
                        "with mix = ... in the --config file")
    opt = PretrainOptions(data=data, out=out, config=cfg, resume=resume, overwrite=overwrite,
                          progress=progress, device=device, stop_after=stop_after, init=init,
                          decay_from=decay_from)
    with start(device, dist_timeout, keep_memory=True) as rt:
        pretrain(opt, rt)


def pretrain(opt: PretrainOptions, rt: Runtime | None = None) -> dict[str, Any]:
    """Run (or resume) pretraining; returns the last logged metrics."""
    rt = rt or Runtime(device=resolve_device(opt.device))
    if opt.init:  # org/name[@revision]: its folder in the hub's cache
        opt = replace(opt, init=hub.resolve(opt.init, "--init"))
    check_compile(opt.config.train.compile, rt.device, "train.compile")
    check_cuda_graphs(opt.config.train.cuda_graphs, rt.device)
    inputs = [*local_inputs(("--data", s.path) for phase in parse_data(opt.data)
                            for s in phase),
              ("--init", opt.init), ("--decay-from", opt.decay_from),
              *([("--generator", g)] if (g := opt.config.objective.generator) and
                Path(g).exists() else [])]
    with claim_out(opt.out, "run", "pretrain", overwrite=opt.overwrite, resume=opt.resume,
                   inputs=inputs, rt=rt) as claim:
        return _pretrain(opt, rt, claim)


def _pretrain(opt: PretrainOptions, rt: Runtime, claim: Claim) -> dict[str, Any]:
    p = setup(opt, rt, lambda run_config, data: _run_folder(opt, run_config, data, claim))
    fit(opt, p, rt)
    trainer, tc = p.trainer, p.cfg.train
    if trainer.step == tc.max_steps:
        if not trainer.last:  # resumed at its last step (killed before its models were
            trainer.last = last_metrics(opt.out)  # written): its last line for the cards
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


def last_metrics(run: str | Path) -> dict[str, Any]:
    """The last line of RUN/metrics.jsonl (none: {})."""
    lines = list(iter_metrics(run)) if (Path(run) / "metrics.jsonl").is_file() else []
    return lines[-1] if lines else {}


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
    o, data = cfg.objective, corpus_name(p.data.meta, p.data.name)
    tokens = t.tokens
    rate = (f"{o.mask_prob:.0%}" if o.mask_prob_end is None else
            f"{o.mask_prob:.0%} -> {o.mask_prob_end:.0%} ({o.mask_shape}, over the "
            f"{o.mask_over})")
    rows = [("objective", f"{o.kind}: {rate} of tokens chosen, discriminator "
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
    named = corpus_name(p.data.meta, p.data.name, sized=False)
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


# -- building a run ----------------------------------------------------------------------


def _in_its_run(checkpoint: Path, theirs: dict[str, Any], free: set[str]) -> bool:
    """Whether ``checkpoint`` sits in the run that wrote it (``RUN/checkpoints/step-N``, with
    RUN's config.json its settings, bar what --resume may change), so RUN's metrics are its
    history; a checkpoint copied into another folder is not."""
    run = checkpoint.parent.parent
    if checkpoint.parent.name != "checkpoints" or not (run / "config.json").is_file():
        return False
    mine = maybe_json(run / "config.json")
    return isinstance(mine, dict) and not config_diffs(
        {k: v for k, v in theirs.items() if k not in ("step", "tokens")}, mine, free)


def _branch(checkpoint: Path, run_config: dict[str, Any], out: Path) -> Path:
    """--decay-from: the checkpoint is the data's and the run's (its settings but the decay's
    length), and its run's metrics lines up to it start this run's."""
    theirs = read_json(checkpoint / "config.json", "a checkpoint's config")
    free = {f"train.{k}" for k in RESUMABLE_CHANGES} | {
        "train.max_steps", "train.decay_steps", "step", "tokens",
        "data_mix"}  # a decay may read another mix (mmBERT's, EuroBERT's)
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
            last = opt.config.train.max_steps
            if theirs.get("step", 0) >= last and (out / "discriminator").is_dir():
                raise UserError(f"--resume: {out} is finished ({last:,} of {last:,} steps, its "
                                f"models written) and nothing was interrupted (nothing was "
                                f"changed); pass --overwrite to pretrain it again, or branch "
                                f"from its last checkpoint with --decay-from {found} and a new "
                                f"--out")
    if opt.decay_from is not None:
        found = _branch(Path(opt.decay_from), run_config, out)
    write_json(out / "config.json", run_config)
    for name in ("tokenizer.json", SIDECAR):
        beside = data.beside(name)
        if beside is not None:  # the roles' file: data prepared since issue 17
            part = out / f"{name}.tmp"
            shutil.copyfile(beside, part)
            part.replace(out / name)
    return found
