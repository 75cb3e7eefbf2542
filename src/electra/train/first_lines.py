"""What a pretraining run says before its first step: the body, its size, the data, the
batch, the precision, the device, what the step runs on and the MFU's peak; the data's order
where it is read in blocks; the mix where the data is a mixture."""

from __future__ import annotations

from electra.config import TrainConfig
from electra.data.loader import ShardDataset
from electra.data.mixspec import Share, describe
from electra.data.stream import StreamedShards
from electra.run_config import RunConfig
from electra.runtime import Runtime, resolve_precision
from electra.train.trainer import Trainer


def first_lines(trainer: Trainer, cfg: RunConfig, data: ShardDataset,
                mixes: dict[int, list[tuple[ShardDataset, Share]]], n_params: int,
                rt: Runtime, peak: float, source: str) -> None:
    """A run's first line (the body, its size, the data, the batch, precision, device, what
    the step runs on, the MFU's peak), and the mix where the data is a mixture."""
    tc, datasets = cfg.train, {n: mix[0][0] for n, mix in mixes.items()}
    mixed = any(len(mix) > 1 for mix in mixes.values())
    m, g = cfg.model, cfg.model.generator_config()
    gen = ("generator frozen" if cfg.objective.generator else
           f"generator {g.num_layers} x {g.hidden_size}")
    trainer.say(f"electra: {m.body} body {m.num_layers} x {m.hidden_size} ({gen}; dropout "
                f"{m.hidden_dropout:g}/"
                f"{m.attention_dropout:g}, layer-norm eps {m.layer_norm_eps:g}), "
                f"{n_params / 1e6:.1f}M parameters, {len(data):,} examples of "
                f"{data.seq_len} tokens, batch {tc.batch_size}"
                + (f" over {rt.world_size} processes ({tc.parallel})" if rt.enabled else "")
                + f", {resolve_precision(rt.device, tc.precision)}, {rt.device.type}"
                + step_levers(tc, any(d.packed for d in datasets.values()), rt.enabled)
                + (f", resuming at step {trainer.step}" if trainer.step else "")
                + (f"; MFU against {peak / rt.world_size / 1e12:,.1f} TFLOP/s a device "
                   f"({source})" if peak else ""))
    o = cfg.objective
    if o.mask_prob_end is not None:
        start, stop = cfg.mask_window()
        trainer.say(f"electra: mask rate {o.mask_prob:.0%} -> {o.mask_prob_end:.0%} "
                    f"({o.mask_shape}) over steps {start:,}-{stop:,}"
                    + (" (the learning rate's decay)" if o.mask_over == "decay" else "")
                    + f"; {slots_line(cfg, data.seq_len)}")
    if tc.shuffle == "blocks":
        streamed = [d.folder for mix in mixes.values() for d, _ in mix
                    if isinstance(d, StreamedShards)]
        trainer.say(f"electra: data order: blocks of {tc.shuffle_block:,} rows, "
                    f"{tc.shuffle_window} shuffled together"
                    + (f", in {tc.partitions} parts" if tc.partitions > 1 else "")
                    + (f"; streamed through a bounded cache: {', '.join(streamed)}"
                       if streamed else ""))
    if mixed:
        trainer.say("electra: data mix: " + describe(
            [[s for _, s in mix] for mix in mixes.values()], list(mixes)) + " of the rows"
            + " (each phase's held-out split: its first folder's)")


def slots_line(cfg: RunConfig, seq_len: int) -> str:
    """How many prediction slots a row has (sized for the schedule's highest rate)."""
    from electra.objectives.masking import slots  # torch: the objectives'

    return f"{slots(cfg.objective, seq_len)} prediction slots a row of {seq_len}"


def step_levers(tc: TrainConfig, packed: bool, processes: bool = False) -> str:
    """What the step runs on, for the first line (docs/how-to/hardware.md has each lever's
    measurement on a GPU): the rows (packed or padded), unpadded or not, the compiled step
    (compiled blocks under ``processes``: DDP/FSDP), CUDA graphs, the micro-batches."""
    levers = [("packed" if packed else "padded") + " rows",
              "unpadded" if tc.unpad else "every position computed",
              *(["CUDA graphs"] if tc.cuda_graphs else
                ["compiled blocks" if processes else "compiled step"] if tc.compile else []),
              *([f"{tc.grad_accum} micro-batches a step"] if tc.grad_accum > 1 else [])]
    return f" ({', '.join(levers)})"
