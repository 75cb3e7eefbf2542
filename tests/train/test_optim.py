"""The optimizer's parts: the schedule, weight-decay groups, layer-wise learning rates."""

from __future__ import annotations

import pytest
from helpers import small_model

from electra.config import model_preset
from electra.tasks.sequence import SequenceClassifier
from electra.train.optim import layer_depth, layerwise_groups, param_groups, warmup_linear


def test_schedule_and_weight_decay_groups():
    f = warmup_linear(10, 110)
    assert [f(0), f(5), f(10), f(60), f(110), f(200)] == [0.0, 0.5, 1.0, 0.5, 0.0, 0.0]
    from electra.objectives.pretraining import ElectraPretrainingModel

    m = ElectraPretrainingModel(small_model(vocab_size=50))
    decay, plain = param_groups(m, 0.01)
    names = {id(p): n for n, p in m.named_parameters()}
    assert all(p.ndim == 2 for p in decay["params"])
    assert all(n.endswith(("bias", "norm.weight")) for n in (names[id(p)] for p in
                                                              plain["params"]))
    n_all = sum(p.numel() for p in m.parameters())
    assert n_all == sum(p.numel() for p in decay["params"] + plain["params"])


def test_layerwise_learning_rates_follow_the_formula():
    cfg = model_preset("tiny", vocab_size=100, num_layers=4)
    model = SequenceClassifier(cfg, 3)
    lr, d, L = 1e-3, 0.8, 4
    groups = layerwise_groups(model, lr, d, 0.01)
    rate = {id(p): g["lr"] for g in groups for p in g["params"]}
    for name, p in model.named_parameters():
        if name.startswith("head_"):
            expected = lr  # the task head: full rate
        elif name.startswith("encoder.layers."):
            i = int(name.split(".")[2])
            expected = lr * d ** (L - 1 - i)  # top layer (i = 3) full, each below x0.8
        else:
            assert name.startswith("encoder.embeddings"), name
            expected = lr * d**L  # one step below layer 0
        assert rate[id(p)] == pytest.approx(expected), name
    assert layer_depth("encoder.layers.3.query.weight", L) == 4
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))
