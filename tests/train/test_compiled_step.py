"""``compile``: the whole step in one graph (issue 73). The forward a micro-step calls
(generator, sampling, discriminator and losses; a fine-tune's model) traces without a graph
break and with a bounded number of graphs; compiled by inductor it tracks eager's losses and
resumes bitwise, as eager does."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from helpers import make_batch, small_model, traced, traced_steps

from electra.config import TrainConfig
from electra.data.loader import ShardDataset
from electra.model.bodies import BODIES
from electra.objectives.config import ObjectiveConfig
from electra.run_config import RunConfig
from electra.train.metrics import iter_metrics


def test_the_pretraining_forward_traces_whole_over_padded_and_full_batches(letters_data):
    """Every objective's step forward is one graph (fullgraph: a break would raise), rows
    with and without padding each their own (the mask is dropped where no row has padding),
    and no more graphs as the batches go on."""
    vocab = ShardDataset(str(letters_data)).vocab_size
    for kind in ("electra", "mlm", "all_tokens_mlm", "random", "electra15", "replace_mlm"):
        graphs, kinds = traced_steps(letters_data, small_model(vocab_size=vocab),
                                     ObjectiveConfig(kind=kind))
        assert graphs <= len(kinds), (kind, kinds)


@pytest.mark.parametrize("body", ["bert", "modernbert", "deberta"])
def test_every_body_traces_whole_with_gdes_and_both_schedules(letters_data, body):
    """Each body's ELECTRA step in bf16 with GDES and the two schedules a run changes every
    step, the masking rate (30 -> 15%: drawn before the forward, no recompile) and the
    sampling temperature (3 -> 1, a Python float: one recompile to a symbolic float for each
    kind of batch, then none; 9 steps over 8 temperatures): whole, in at most twice the
    graphs of a fixed one."""
    vocab = ShardDataset(str(letters_data)).vocab_size
    shape = {"modernbert": dict(local_attention=8, global_every=2, generator_size=1.0),
             "deberta": dict(generator_size=1.0, generator_layers=1, position_buckets=8,
                             max_relative_positions=32)}.get(body, {})
    model_cfg = small_model(vocab_size=vocab, body=body,
                            **{**BODIES[body].defaults, "hidden_dropout": 0.1,
                               "attention_dropout": 0.1, **shape})
    objective = ObjectiveConfig(sharing="gdes", mask_prob=0.3, mask_prob_end=0.15,
                                temperature=3.0, temperature_end=1.0, temperature_steps=8)
    graphs, kinds = traced_steps(letters_data, model_cfg, objective, steps=9,
                                 precision="bf16")
    assert graphs <= 2 * len(kinds), (body, kinds)


@pytest.mark.parametrize("unpad", [True, False])
def test_a_fine_tuning_forward_traces_whole_at_every_length(unpad):
    """A sequence head over padded rows of changing lengths: one graph for the first length,
    then symbolic lengths in two (the dropout masks on attention's probabilities are cut
    from 64-bit words one way where the length is a multiple of 4, another where it is not),
    none after that; a batch of one row would be one more (torch specialises sizes 0 and 1).
    Unpadding (fine-tuning's default) is left out of a compiled step: it keeps the rows,
    where finding the real tokens on the device would break the graph."""
    from electra.model.kernels import FAST_CPU
    from electra.tasks.sequence.head import SequenceClassifier

    torch.manual_seed(0)
    model = SequenceClassifier(small_model(vocab_size=101), 2,
                               dataclasses.replace(FAST_CPU, unpad=unpad)).train()
    step, counters = traced(model)
    for lengths, T in [([5, 7], 8), ([9, 13, 3], 13), ([4, 4], 4), ([20, 11], 20), ([6, 2], 6)]:
        ids, mask, types = make_batch(lengths, T)
        step(ids, mask, types).sum().backward()
    assert not counters["graph_break"]
    assert counters["stats"]["unique_graphs"] == 3


@pytest.mark.slow
def test_a_compiled_run_tracks_eager_and_resumes_bitwise(letters_data, tmp_path):
    """train.compile=true (inductor): without dropout its losses are eager's within 1e-4
    over 50 steps (fp32; the kernels sum in other orders; 2.3e-7 at most, Intel Xeon AMX);
    with dropout a run stopped and resumed equals the uninterrupted one, metrics and
    weights, bit for bit (its random numbers come from torch's generator, which the
    checkpoint holds)."""
    from test_pretrain import assert_same_runs, run, without_timing

    def cfg(compile: bool, dropout: float = 0.0, **train) -> RunConfig:
        t = dict(lr=1e-3, batch_size=8, warmup_steps=3, max_steps=8, log_every=1,
                 eval_every=0, save_every=4, precision="fp32", seed=7, compile=compile)
        return RunConfig(model=small_model(hidden_dropout=dropout, attention_dropout=dropout),
                         train=TrainConfig(**{**t, **train}))

    run(letters_data, tmp_path / "eager", cfg(False, max_steps=50, save_every=50))
    run(letters_data, tmp_path / "compiled", cfg(True, max_steps=50, save_every=50))
    eager, comp = (without_timing(list(iter_metrics(tmp_path / r)))
                   for r in ("eager", "compiled"))
    assert [r["step"] for r in comp] == [r["step"] for r in eager] == list(range(1, 51))
    for a, b in zip(eager, comp, strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4), (a, b)
    run(letters_data, tmp_path / "a", cfg(True, 0.1))
    run(letters_data, tmp_path / "b", cfg(True, 0.1), stop_after=4)
    run(letters_data, tmp_path / "b", cfg(True, 0.1), resume=True)
    assert_same_runs(tmp_path / "a", tmp_path / "b")


def test_a_batch_knows_whether_it_is_pad_free_as_a_plain_bool():
    """``Batch.pad_free`` (what a compiled forward reads as a constant): worked out from the
    host's ``full`` rows when the batch is made, for its micro-batches again, and kept by
    ``dataclasses.replace`` (FSDP's input casting replaces every field)."""
    import numpy as np

    from electra.objectives.masking import Batch

    ids, mask, types = make_batch([6, 6, 3], 6)
    batch = Batch(ids, mask, types, full=np.array([True, True, False]))
    assert batch.pad_free is False
    assert batch.rows(slice(0, 2)).pad_free is True and batch.rows(slice(1, 3)).pad_free is False
    assert dataclasses.replace(batch.rows(slice(0, 2)), input_ids=ids[:2] + 1).pad_free is True
    assert Batch(ids, mask).pad_free is False  # unknown on the host: attend with the mask
    packed = Batch(ids[:2], mask[:2], full=np.array([True, True]),
                   sequence_ids=torch.ones(2, 6, dtype=torch.long))
    assert packed.pad_free is False  # several sequences a row: attend within each
