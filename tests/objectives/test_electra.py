"""The ELECTRA objective checked against hand-computed values and its defining properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import SPECIAL, make_batch, tiny_config

from electra.objectives.config import ObjectiveConfig
from electra.objectives.losses import discriminator_loss, generator_loss
from electra.objectives.masking import (
    Batch,
    Draws,
    candidate_mask,
    choose_positions,
    mask_inputs,
)
from electra.objectives.pretraining import ElectraPretrainingModel, electra_forward
from electra.objectives.sampling import corrupt, sample


def forward(model, ids, mask, types, cfg, rng):
    """The objective's one pass on a batch, with the tests' special tokens."""
    return electra_forward(model, Batch(ids, mask, types), Draws(rng=rng), SPECIAL, cfg)


def test_hand_computed_case():
    # Generator: two chosen slots and one unused slot, vocabulary of 3.
    logits = torch.tensor([[[2.0, 0.0, 0.0], [0.0, 1.0, 0.0], [9.0, -9.0, 5.0]]])
    targets = torch.tensor([[0, 2, 1]])
    weights = torch.tensor([[True, True, False]])
    expected_gen = ((math.log(math.exp(2) + 2) - 2) + math.log(math.e + 2)) / 2
    assert generator_loss(logits, targets, weights).item() == pytest.approx(expected_gen, 1e-6)

    # Corruption: x = [CLS 10 11 12 SEP], positions 1 and 3 chosen (slot 2 unused -> pos 2).
    x = torch.tensor([[2, 10, 11, 12, 3]])
    positions = torch.tensor([[1, 3, 2]])
    sampled = torch.tensor([[10, 40, 99]])  # slot 0 samples the original; slot 2 is unused
    corrupted = corrupt(x, positions, torch.tensor([[True, True, False]]), sampled)
    assert corrupted.tolist() == [[2, 10, 11, 40, 3]]
    labels = corrupted != x
    assert labels.tolist() == [[False, False, False, True, False]]  # sampled original -> 0

    # Discriminator: mean BCE over the non-pad tokens only.
    d_logits = torch.tensor([[0.0, 2.0, -1.0, 3.0]])
    d_labels = torch.tensor([[False, True, True, False]])
    mask = torch.tensor([[1, 1, 1, 0]])
    expected_disc = (math.log(2) + math.log(1 + math.exp(-2)) + math.log(1 + math.exp(1))) / 3
    got = discriminator_loss(d_logits, d_labels, mask).item()
    assert got == pytest.approx(expected_disc, 1e-6)


def test_total_is_gen_plus_lambda_disc():
    torch.manual_seed(0)
    model = ElectraPretrainingModel(tiny_config())
    ids, mask, types = make_batch([20, 13, 30], 32)
    cfg = ObjectiveConfig(disc_weight=37.0)
    out = forward(model, ids, mask, types, cfg, torch.Generator().manual_seed(1))
    assert torch.allclose(out.loss, out.gen_loss + 37.0 * out.disc_loss)
    # The discriminator sees the sampled tokens, never [MASK], and labels equal the difference.
    assert not (out.corrupted_ids == SPECIAL.mask).any()
    assert torch.equal(out.labels, out.corrupted_ids != ids)


@pytest.mark.parametrize("lengths", [[5, 9, 40, 64], [3, 64, 17, 33, 12]])
def test_chosen_count_follows_formula(lengths):
    ids, mask, _ = make_batch(lengths, 64)
    cfg = ObjectiveConfig(mask_prob=0.15, max_predictions=7)
    for seed in range(5):
        cand = candidate_mask(ids, mask, SPECIAL)
        positions, weights = choose_positions(cand, cfg, torch.Generator().manual_seed(seed))
        for r, n_tokens in enumerate(lengths):
            n = n_tokens - 2  # [CLS] and [SEP] are not candidates
            expected = min(n, max(1, min(7, round(0.15 * n))))
            assert int(weights[r].sum()) == expected
            chosen = positions[r][weights[r]]
            assert len(set(chosen.tolist())) == expected  # distinct
            assert cand[r, chosen].all()  # never padding, never a special token


@pytest.mark.parametrize(("seq_len", "mask_prob", "slots"),
                         [(128, 0.15, 19), (512, 0.15, 79), (512, 0.25, 130), (8, 0.15, 1)])
def test_unset_max_predictions_follows_the_sequence_length(seq_len, mask_prob, slots):
    # The original's rule, int((mask_prob + 0.005) * seq_len): a fixed 19 would mask 3.7% of
    # a 512-token row instead of 15%.
    cfg = ObjectiveConfig(mask_prob=mask_prob)
    assert cfg.max_predictions is None
    ids, mask, _ = make_batch([seq_len] * 4, seq_len)
    positions, weights = choose_positions(candidate_mask(ids, mask, SPECIAL), cfg,
                                          torch.Generator().manual_seed(0))
    assert positions.shape == (4, slots)
    fraction = weights.sum(1).double() / seq_len
    assert fraction.min() >= mask_prob - 0.01 or seq_len < 16  # ~15% (25%) of every row
    assert fraction.max() <= mask_prob + 0.005 or seq_len < 16


def test_padding_never_chosen_nor_scored():
    torch.manual_seed(0)
    model = ElectraPretrainingModel(tiny_config())
    ids, mask, types = make_batch([10, 32], 32)
    cfg = ObjectiveConfig()
    out = forward(model, ids, mask, types, cfg, torch.Generator().manual_seed(3))
    assert not out.labels[mask == 0].any()
    assert torch.equal(out.corrupted_ids[mask == 0], ids[mask == 0])
    # Changing the discriminator's logits at padding leaves its loss unchanged.
    noisy = out.disc_logits.detach().clone()
    noisy[mask == 0] = 123.0
    assert torch.equal(discriminator_loss(noisy, out.labels, mask),
                       discriminator_loss(out.disc_logits.detach(), out.labels, mask))


def test_generator_always_original_gives_no_replaced_labels():
    torch.manual_seed(0)
    model = ElectraPretrainingModel(tiny_config())
    ids, mask, types = make_batch([30, 25, 32, 18], 32, seed=5)

    class Oracle(torch.nn.Module):
        """A generator that puts all probability on the original token."""

        config = model.generator.config

        def forward(self, masked_ids, token_type_ids, attention_mask, positions, padded=False,
                    sequence_ids=None, layout=None):
            target = torch.gather(ids, 1, positions)
            return F.one_hot(target, self.config.vocab_size).float() * 1e4

    model.generator = Oracle()
    opt = torch.optim.SGD(model.discriminator.parameters(), lr=0.5)
    cfg = ObjectiveConfig()
    means = []
    for step in range(5):
        out = forward(model, ids, mask, types, cfg, torch.Generator().manual_seed(step))
        assert not out.labels.any()
        assert out.stats["replaced_frac"].item() == 0.0
        assert out.stats["sampled_original_frac"].item() == 1.0
        means.append(out.disc_logits[mask.bool()].mean().item())
        opt.zero_grad()
        out.disc_loss.backward()
        opt.step()
    assert means[-1] < means[0] - 0.5  # pushed toward "original" (negative logits)


def test_no_gradient_from_disc_loss_into_generator():
    torch.manual_seed(0)
    model = ElectraPretrainingModel(tiny_config())
    ids, mask, types = make_batch([30, 25], 32)
    out = forward(model, ids, mask, types, ObjectiveConfig(), None)
    out.disc_loss.backward()
    shared = {id(p) for p in model.discriminator.encoder.embeddings.parameters()}
    for name, p in model.generator.named_parameters():
        if id(p) in shared:
            continue  # the shared embeddings learn from both losses, as in the paper
        assert p.grad is None or not p.grad.any(), name
    # And the generator's loss never reaches the discriminator's own layers.
    model.zero_grad(set_to_none=True)
    out = forward(model, ids, mask, types, ObjectiveConfig(), None)
    out.gen_loss.backward()
    for name, p in model.discriminator.named_parameters():
        if id(p) in shared:
            continue
        assert p.grad is None or not p.grad.any(), name


def test_gathered_loss_equals_full_vocabulary_loss():
    torch.manual_seed(0)
    model = ElectraPretrainingModel(tiny_config())
    model.eval()
    ids, mask, types = make_batch([30, 12, 32], 32)
    m = mask_inputs(ids, mask, SPECIAL, 101, ObjectiveConfig(), torch.Generator().manual_seed(0))
    gathered = generator_loss(model.generator(m.input_ids, mask, types, m.positions),
                              m.targets, m.weights)
    full_logits = model.generator(m.input_ids, mask, types)  # (B, T, V) at every position
    labels = torch.full_like(ids, -100)
    for r in range(ids.shape[0]):
        chosen = m.positions[r][m.weights[r]]
        labels[r, chosen] = ids[r, chosen]
    full = F.cross_entropy(full_logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
    torch.testing.assert_close(gathered, full)


@pytest.mark.parametrize("mask_p, random_p", [(0.85, 0.0), (0.8, 0.1)])
def test_mask_random_keep_proportions(mask_p, random_p):
    ids, mask, _ = make_batch([64] * 400, 64, vocab_size=101)
    cfg = ObjectiveConfig(mask_token_prob=mask_p, random_token_prob=random_p,
                          max_predictions=10)
    m = mask_inputs(ids, mask, SPECIAL, 101, cfg, torch.Generator().manual_seed(0))
    now = torch.gather(m.input_ids, 1, m.positions)[m.weights]
    orig = m.targets[m.weights]
    n = orig.numel()
    frac_mask = (now == SPECIAL.mask).sum().item() / n
    frac_keep = (now == orig).sum().item() / n
    assert frac_mask == pytest.approx(mask_p, abs=0.02)
    # A random token may equal the original (1 in 101), so "keep" absorbs a little of it.
    assert frac_keep == pytest.approx(1 - mask_p - random_p + random_p / 101, abs=0.02)
    # Unchosen positions are untouched.
    untouched = m.input_ids.clone().scatter_(1, m.positions, 0) == ids.clone().scatter_(
        1, m.positions, 0)
    assert untouched.all()


@pytest.mark.parametrize("method", ["gumbel", "inverse_cdf"])
def test_samplers_draw_from_softmax(method):
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0, -30.0]).repeat(200_000, 1)
    before = logits.clone()
    draws = sample(logits, temperature=2.0, method=method, rng=torch.Generator().manual_seed(0))
    assert torch.equal(logits, before)  # the fp32 input is not overwritten
    freq = torch.bincount(draws, minlength=5).double() / len(draws)
    expected = torch.softmax(logits[0].double() / 2.0, 0)
    assert torch.allclose(freq, expected, atol=4e-3), (freq, expected)
    again = sample(logits[:100], 2.0, method, torch.Generator().manual_seed(0))
    assert torch.equal(again, draws[:100])  # deterministic for a given generator state


def test_forward_is_deterministic_for_a_seed():
    torch.manual_seed(0)
    model = ElectraPretrainingModel(tiny_config(hidden_dropout=0.1, attention_dropout=0.1))
    ids, mask, types = make_batch([30, 25], 32)
    outs = []
    for _ in range(2):
        torch.manual_seed(7)
        outs.append(forward(model, ids, mask, types, ObjectiveConfig(),
                            torch.Generator().manual_seed(11)))
    assert torch.equal(outs[0].loss, outs[1].loss)
    assert torch.equal(outs[0].corrupted_ids, outs[1].corrupted_ids)


def test_statistics_match_their_definitions():
    torch.manual_seed(0)
    model = ElectraPretrainingModel(tiny_config())
    ids, mask, types = make_batch([30, 25, 32], 32)
    out = forward(model, ids, mask, types, ObjectiveConfig(), None)
    real = mask.bool()
    pred = out.disc_logits > 0
    acc = (pred == out.labels)[real].float().mean()
    torch.testing.assert_close(out.stats["disc_acc"], acc)
    torch.testing.assert_close(out.stats["replaced_frac"], out.labels[real].float().mean())
    assert 0.0 <= out.stats["masked_frac"].item() <= 0.2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_weighted_cross_entropy_equals_torch_in_value_and_gradient(dtype):
    """The fused MLM loss (one exp pass shared with the sampler, softmax - onehot backward)
    against F.cross_entropy on the same fp32 logits, with unused slots and a denominator."""
    torch.manual_seed(0)
    logits = (torch.randn(3, 5, 50) * 4).to(dtype).requires_grad_()
    targets = torch.randint(50, (3, 5))
    weights = torch.rand(3, 5) > 0.3
    denominator = torch.tensor(17.0)
    ours = generator_loss(logits, targets, weights, denominator)
    (g_ours,) = torch.autograd.grad(ours * 3.0, logits)

    ref_logits = logits.detach().clone().requires_grad_()
    ce = F.cross_entropy(ref_logits.float().flatten(0, 1), targets.flatten(), reduction="none")
    ref = (ce * weights.flatten().float()).sum() / denominator
    (g_ref,) = torch.autograd.grad(ref * 3.0, ref_logits)
    torch.testing.assert_close(ours, ref, rtol=1e-6, atol=1e-6)
    assert g_ours.dtype == dtype
    torch.testing.assert_close(g_ours, g_ref, rtol=1e-5, atol=1e-6)
    assert (g_ours[~weights] == 0).all()  # unused slots get no gradient
    # Without a denominator: the mean over the chosen slots.
    torch.testing.assert_close(generator_loss(logits, targets, weights),
                               ref * 17.0 / weights.sum())


def test_sampling_from_the_loss_exponentials_equals_the_sampler():
    """At temperature 1, electra_forward draws from the loss's exp(z - max z); with the same
    uniforms that is the standalone inverse-CDF sampler's draw, bit for bit."""
    from electra.objectives.losses import mlm_loss
    from electra.objectives.sampling import locate, sample_fp32

    torch.manual_seed(0)
    logits = torch.randn(4, 6, 300, dtype=torch.bfloat16) * 5
    targets = torch.randint(300, (4, 6))
    u = torch.rand(4, 6, 1)
    _, probs, zmax, target_logit = mlm_loss(logits, targets, torch.ones(4, 6, dtype=torch.bool),
                                             None)
    z = logits.float()
    expected, expected_max = sample_fp32(z.clone(), 1.0, "inverse_cdf", None, u)
    assert torch.equal(locate(probs, u, None), expected)
    assert torch.equal(zmax, expected_max)
    assert torch.equal(target_logit, z.gather(-1, targets[..., None]))
    torch.testing.assert_close(probs, (z - expected_max).exp())


@pytest.mark.parametrize("V", [5, 256, 700])
def test_two_level_locate_equals_one_searchsorted(V):
    """Integer weights keep every sum exact, so the block-wise draw must pick exactly the
    token that one searchsorted over the whole cumulative sum picks, zero weights never."""
    from electra.objectives.sampling import locate

    g = torch.Generator().manual_seed(V)
    w = torch.randint(0, 4, (64, V), generator=g).float()
    w[:, -1] = 1.0  # the last block (partial for V = 5, 700) is reachable too
    w[:, 300:400] = 0.0  # a zero run, across a block boundary for V = 700
    u = torch.cat([torch.rand(61, 1, generator=g), torch.tensor([[0.0], [0.5], [0.999999]])])
    cdf = w.double().cumsum(-1)
    expected = torch.searchsorted(cdf, u.double() * cdf[:, -1:], right=True).squeeze(-1)
    got = locate(w, u, None)
    assert torch.equal(got, expected)
    assert (w.gather(1, got[:, None]) > 0).all()


def test_mlm_loss_backward_twice_is_refused():
    logits = torch.randn(2, 3, 10, requires_grad=True)
    loss = generator_loss(logits, torch.zeros(2, 3, dtype=torch.long),
                          torch.ones(2, 3, dtype=torch.bool))
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="backward ran twice"):
        loss.backward()


@pytest.mark.parametrize("kind,sampling,temperature", [
    ("electra", "inverse_cdf", 1.0), ("electra", "gumbel", 1.0), ("electra", "inverse_cdf", 2.0),
    ("replace_mlm", "inverse_cdf", 1.0), ("all_tokens_mlm", "inverse_cdf", 1.0)])
def test_a_padded_vocabulary_changes_nothing_but_the_gemm_width(kind, sampling, temperature):
    """Kernels with ``vocab_multiple`` (a GPU's 64) pad the generator's output layer: the
    101-token table computes 128 logits, the 27 extra -inf. Losses, samples, statistics and
    every gradient equal the unpadded model's in fp32; the stored table keeps 101 rows."""
    import copy
    import dataclasses

    from electra.model.kernels import FAST_CPU, use

    torch.manual_seed(0)
    cfg = ObjectiveConfig(kind=kind, sampling=sampling, temperature=temperature)
    plain = ElectraPretrainingModel(tiny_config(hidden_dropout=0.1), cfg, SPECIAL)
    padded = copy.deepcopy(plain)
    use(padded, dataclasses.replace(FAST_CPU, name="fast-cpu-64", vocab_multiple=64))
    ids, mask, types = make_batch([30, 25, 32, 12], 32)
    outs = []
    for model in (plain, padded):
        torch.manual_seed(7)  # the same dropout masks
        out = forward(model, ids, mask, types, cfg, torch.Generator().manual_seed(11))
        out.loss.backward()
        outs.append(out)
    a, b = outs
    assert torch.equal(a.corrupted_ids, b.corrupted_ids)
    torch.testing.assert_close(b.loss, a.loss, rtol=1e-6, atol=1e-6)
    for key in a.stats:
        torch.testing.assert_close(b.stats[key], a.stats[key], rtol=1e-6, atol=1e-6)
    for (name, p), q in zip(plain.named_parameters(), padded.parameters(), strict=True):
        if p.grad is not None:
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-7, msg=name)
    assert padded.state_dict().keys() == plain.state_dict().keys()
    assert all(v.shape == plain.state_dict()[k].shape for k, v in padded.state_dict().items())
    gen = padded.generator if padded.generator is not None else padded.main_mlm
    h = gen.encoder(ids, mask, types)
    wide, narrow = gen.logits(h, padded=True), gen.logits(h)
    assert wide.shape[-1] == 128 and narrow.shape[-1] == 101
    assert torch.equal(wide[..., 101:], torch.full_like(wide[..., 101:], -torch.inf))
    torch.testing.assert_close(wide[..., :101], narrow, rtol=1e-6, atol=1e-6)


def test_a_draw_at_the_end_of_a_padded_row_is_the_last_real_token():
    """Weights zero past ``size`` (a padded vocabulary): a uniform of 1 (the rounding edge)
    lands on the last real token, never on padding."""
    from electra.objectives.sampling import locate

    w = torch.zeros(3, 320)
    w[:, :300] = 1.0
    u = torch.tensor([[1.0], [0.999999999], [0.0]])
    assert locate(w, u, None, size=300).tolist() == [299, 299, 0]
    assert locate(w, u, None)[0] == 319  # unaware of the padding, the edge falls on it


def test_a_batch_without_padding_attends_without_a_mask(monkeypatch):
    """pad_free (known on the host): the encoders attend with no mask (FlashAttention's case
    on a GPU), and in fp32 with dropout (the written attention) every loss and gradient is
    bitwise the masked pass's; a batch with padding keeps its mask. train_step decides it per
    micro-batch from the loader's rows."""
    from electra.model.kernels import Kernels
    from electra.runtime import Runtime

    seen: list[bool] = []
    real = Kernels.attention

    def spy(self, q, k, v, attn_mask, p, dropout):
        seen.append(attn_mask is None)
        return real(self, q, k, v, attn_mask, p, dropout)

    monkeypatch.setattr(Kernels, "attention", spy)
    padded = Runtime().model_kernels(False)  # `electra pretrain`'s layout (train.unpad=false)
    ids, mask, types = make_batch([32, 32, 32], 32)
    results = []
    for pad_free in (False, True):
        torch.manual_seed(0)
        model = ElectraPretrainingModel(tiny_config(), special=SPECIAL, kernels=padded).train()
        seen.clear()
        full = np.full(len(ids), pad_free)  # what the host knows of the rows
        out = model(Batch(ids, mask, types, full=full), Draws(rng=torch.Generator().manual_seed(1)))
        out.loss.backward()
        assert set(seen) == {pad_free}, seen
        results.append((out.loss.detach(), [p.grad.clone() for p in model.parameters()
                                             if p.grad is not None]))
    assert torch.equal(results[0][0], results[1][0])
    assert all(torch.equal(a, b) for a, b in zip(results[0][1], results[1][1], strict=True))

    import electra.train.pretraining as command
    from electra.config import TrainConfig
    from electra.run_config import RunConfig

    calls: list[bool] = []
    forward = ElectraPretrainingModel.forward

    def record(self, batch, draws=None):
        calls.append(batch.pad_free)
        return forward(self, batch, draws)

    monkeypatch.setattr(ElectraPretrainingModel, "forward", record)
    run = RunConfig(model=tiny_config(), train=TrainConfig(batch_size=4, grad_accum=2,
                                                            precision="fp32"))
    model = ElectraPretrainingModel(run.model, run.objective, SPECIAL, padded)
    trainer = command.make_trainer(model, run, Runtime())
    ids, mask, types = make_batch([32, 32, 32, 20], 32)  # the second micro-batch is padded
    command.train_step(trainer, {"input_ids": ids, "attention_mask": mask,
                                 "token_type_ids": types}, run, SPECIAL, 2)
    assert calls == [True, False]
