"""Unpadding (``electra.model.kernels.Unpadded``): a padded batch computed on its real tokens
only gives the padded computation's outputs, losses and gradients (fp32, 1e-6), on real text
of mixed lengths, for the encoder under every head; a head that reads [CLS] alone, whose
last block computes that position alone, gives the whole computation's outputs too."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from helpers import host_reads, tiny_config

from electra.data.tokenizer import train_tokenizer
from electra.experiments.demo import python_docs_corpus
from electra.model import Discriminator, Generator
from electra.model.kernels import FAST_CPU, REFERENCE, Padded, Unpadded, use
from electra.tasks.choice.head import MultipleChoice
from electra.tasks.qa.head import QuestionAnswerer
from electra.tasks.sequence.head import SequenceClassifier
from electra.tasks.tagging.head import TokenClassifier

PADDED = dataclasses.replace(FAST_CPU, name="padded", unpad=False)


@pytest.fixture(scope="module")
def real_batch(tmp_path_factory):
    """Python's own documentation, tokenized: 8 paragraphs of 7 to 64 tokens, padded."""
    lines = [line for doc in python_docs_corpus(300_000) for line in doc if len(line) > 20]
    folder = tmp_path_factory.mktemp("tok")
    (folder / "text.txt").write_text("\n".join(lines))
    tok = train_tokenizer([str(folder / "text.txt")], 1000, folder / "tokenizer")
    tok.enable_truncation(64)
    picks = [lines[i] for i in (3, 40, 41, 100, 250, 400, 777, 1000)]
    enc = [e.ids for e in tok.encode_batch(picks)]
    T = max(map(len, enc))
    ids = torch.tensor([e + [0] * (T - len(e)) for e in enc])
    mask = (torch.arange(T)[None, :] < torch.tensor([len(e) for e in enc])[:, None]).long()
    assert len({len(e) for e in enc}) >= 5 and mask.float().mean() < 0.8  # mixed, padded
    types = torch.zeros_like(ids)
    types[:, T // 2:] = 1
    return ids, mask, types, tok.get_vocab_size()


def both(model: torch.nn.Module, fn):
    """``fn(model)`` (a loss) and the gradients, padded and unpadded."""
    out = []
    for kernels in (PADDED, FAST_CPU):
        use(model, kernels)
        model.zero_grad(set_to_none=True)
        loss = fn(model)
        loss.backward()
        out.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                                    if p.grad is not None}))
    return out


def assert_same(a, b):
    (loss_a, grads_a), (loss_b, grads_b) = a, b
    torch.testing.assert_close(loss_b, loss_a, rtol=0, atol=1e-6)
    assert grads_a.keys() == grads_b.keys() and len(grads_a) > 10
    for name in grads_a:
        torch.testing.assert_close(grads_b[name], grads_a[name], rtol=1e-5, atol=1e-6,
                                   msg=name)


@pytest.mark.parametrize("train", [False, True])
def test_unpadded_discriminator_equals_padded(real_batch, train):
    ids, mask, types, V = real_batch
    torch.manual_seed(0)
    d = Discriminator(tiny_config(vocab_size=V, hidden_dropout=0.0, attention_dropout=0.0))
    d.train(train)
    real = mask.bool()
    labels = (ids % 3 == 0).float()
    outs = []
    for kernels in (PADDED, FAST_CPU):
        use(d, kernels)
        outs.append(d(ids, mask, types))
    torch.testing.assert_close(outs[1][real], outs[0][real], rtol=0, atol=1e-6)
    assert torch.equal(outs[1][~real], torch.zeros_like(outs[1][~real]))  # repadded: zeros
    assert_same(*both(d, lambda m: F.binary_cross_entropy_with_logits(
        m(ids, mask, types)[real], labels[real])))


def test_unpadded_generator_and_heads_equal_padded(real_batch):
    ids, mask, types, V = real_batch
    cfg = tiny_config(vocab_size=V, hidden_dropout=0.0, attention_dropout=0.0)
    torch.manual_seed(0)
    positions = torch.stack([torch.randperm(int(n))[:4] for n in mask.sum(1)])
    g = Generator(cfg)
    assert_same(*both(g, lambda m: F.cross_entropy(
        m(ids, mask, types, positions).flatten(0, 1), ids.gather(1, positions).flatten())))
    y = torch.arange(len(ids)) % 2
    assert_same(*both(SequenceClassifier(cfg, 2),
                      lambda m: F.cross_entropy(m(ids, mask, types), y)))
    tags = ids % 5
    assert_same(*both(TokenClassifier(cfg, 5), lambda m: F.cross_entropy(
        m(ids, mask, types)[mask.bool()], tags[mask.bool()])))
    spans = torch.stack([torch.zeros(len(ids), dtype=torch.long), mask.sum(1) - 1], 1)
    assert_same(*both(QuestionAnswerer(cfg), lambda m: (lambda o: F.cross_entropy(
        o[..., 0], spans[:, 0]) + F.cross_entropy(o[..., 1], spans[:, 1]))(m(ids, mask, types))))


def test_layouts():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    u = FAST_CPU.layout(mask)
    assert isinstance(u, Unpadded)
    assert u.index.tolist() == [0, 1, 2, 4, 8, 9, 10, 11]
    assert u.cu_seqlens.tolist() == [0, 3, 4, 8] and u.cu_seqlens.dtype == torch.int32
    assert u.max_len == 4 and u.shape == (3, 4)
    x = torch.arange(12.0).view(3, 4, 1)
    assert u.tokens(x).flatten().tolist() == [0, 1, 2, 4, 8, 9, 10, 11]
    assert u.repad(u.tokens(x)).flatten().tolist() == [0, 1, 2, 0, 4, 0, 0, 0, 8, 9, 10, 11]
    # No padding, or no mask: attention without a mask (FlashAttention's case on a GPU).
    assert FAST_CPU.layout(torch.ones(2, 5)) == Padded(None)
    assert FAST_CPU.layout(None) == Padded(None)
    assert isinstance(PADDED.layout(mask), Padded) and PADDED.layout(mask).mask is not None


@pytest.mark.parametrize("train", [False, True])
def test_an_unpadded_forward_reads_the_device_once(real_batch, monkeypatch, train):
    """A GPU waits at each read of a tensor's value: the layout makes one (the real tokens'
    count, the longest row, whether every row starts with a real token, together), and a
    [CLS] head's forward no other. Its positions equal nonzero's, left-padded rows too."""
    ids, mask, types, V = real_batch
    torch.manual_seed(0)
    model = SequenceClassifier(tiny_config(vocab_size=V), 2).train(train)
    with host_reads(monkeypatch) as reads:
        model(ids, mask, types).sum().backward()
    assert reads == ["tolist"]
    g = torch.Generator().manual_seed(0)
    for m in [torch.rand(5, 9, generator=g) < 0.6 for _ in range(20)] + [
            torch.ones(5, 9, dtype=torch.bool)]:  # and without padding
        u = Unpadded.of(m)
        assert torch.equal(u.index, m.reshape(-1).nonzero().squeeze(1))
        assert u.max_len == int(m.sum(1).max()) and u.reads_first() == bool(m[:, 0].all())


def test_without_a_varlen_kernel_unpadded_attention_falls_back_to_the_padded_one(real_batch):
    # The reference kernels ask for FlashAttention's varlen kernel; on a CPU, in fp32 (or
    # bf16: it is CUDA's) attention runs over the repadded rows, and equals the padded run.
    ids, mask, types, V = real_batch
    torch.manual_seed(0)
    d = Discriminator(tiny_config(vocab_size=V), kernels=REFERENCE).eval()
    with torch.no_grad():
        a = d(ids, mask, types)
        use(d, dataclasses.replace(REFERENCE, unpad=False))
        b = d(ids, mask, types)
    torch.testing.assert_close(a[mask.bool()], b[mask.bool()], rtol=0, atol=1e-6)


@pytest.mark.parametrize("layout", ["unpadded", "padded", "no padding"])
def test_a_head_on_cls_alone_equals_the_whole_last_block(real_batch, layout):
    """The sequence and choice heads read [CLS] alone, so the last block computes it alone
    after its fused Q/K/V projection: losses and gradients equal the whole block's (fp32, 1e-6)."""
    ids, mask, types, V = real_batch
    if layout == "no padding":
        mask = torch.ones_like(mask)
    cfg = tiny_config(vocab_size=V, hidden_dropout=0.0, attention_dropout=0.0)
    y = torch.arange(len(ids)) % 2
    for model, loss in ((SequenceClassifier(cfg, 2), lambda o: F.cross_entropy(o, y)),
                        (MultipleChoice(cfg), lambda o: F.cross_entropy(o, y[:2]))):
        use(model, PADDED if layout == "padded" else FAST_CPU)
        inputs = (ids, mask, types) if isinstance(model, SequenceClassifier) else (
            ids.view(2, 4, -1), mask.view(2, 4, -1), types.view(2, 4, -1))
        runs, last_out = [], []
        hook = model.encoder.layers[-1].register_forward_hook(
            lambda m, args, out, seen=last_out: seen.append(out.shape))
        for first in (False, True):
            model.reads_first = first
            model.zero_grad(set_to_none=True)
            out = loss(model(*inputs))
            out.backward()
            runs.append((out.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                                        if p.grad is not None}))
        hook.remove()
        assert last_out[1] == (len(ids), cfg.hidden_size) != last_out[0]  # [CLS] rows alone
        assert_same(*runs)
        model.reads_first = True
        h = model.encoder(ids, mask, types, first_only=True)
        assert h.shape == (len(ids), 1, cfg.hidden_size)


def test_a_row_whose_first_position_is_padding_gets_the_whole_computation(real_batch):
    # unpadded rows begin with their first real token; where a row's first position is
    # padding (a left-padded row), [CLS] is not among the real tokens: every position is
    # computed, and the head reads position 0 as the padded model does
    ids, mask, types, V = real_batch
    left = mask.clone()
    left[0, :2] = 0
    torch.manual_seed(0)
    model = SequenceClassifier(tiny_config(vocab_size=V), 2).eval()
    assert not FAST_CPU.layout(left).reads_first() and FAST_CPU.layout(mask).reads_first()
    with torch.no_grad():
        h = model.encoder(ids, left, types, first_only=True)
        assert h.shape == (*ids.shape, model.config.hidden_size)
        a = model(ids, left, types)
        model.reads_first = False
        torch.testing.assert_close(a, model(ids, left, types), rtol=0, atol=0)


def test_a_layout_computed_on_the_host_equals_the_devices_and_reads_nothing(monkeypatch):
    """HostLayout (the loader's rows, on the host) holds what Unpadded reads off the device,
    for padded rows (left-padded, empty, full ones too) and packed rows; the kernels' layout
    from it reads no tensor on the host."""
    from helpers import no_syncs
    from test_packing import packed_rows

    from electra.model.kernels import HostLayout

    g = torch.Generator().manual_seed(0)
    masks = [torch.rand(5, 9, generator=g) < 0.6 for _ in range(20)]
    masks += [torch.ones(3, 7, dtype=torch.bool), torch.tensor([[0, 1, 1], [0, 0, 0]]) > 0]
    for m in masks:
        host, device = HostLayout.of(m.long()), Unpadded.of(m)
        assert torch.equal(host.index, device.index)
        assert torch.equal(host.cu_seqlens, device.cu_seqlens)
        assert (host.max_len, host.starts_real, host.shape) == (
            device.max_len, device.starts_real, device.shape)
        with no_syncs(monkeypatch):
            layout = FAST_CPU.layout(m, m.shape, host=host)
        if m.all():  # no padding: attention without a mask, as from the device's
            assert layout == Padded(None, m.shape) and FAST_CPU.layout(m, m.shape) == layout
        else:
            assert isinstance(layout, Unpadded) and layout.index is host.index
    groups = packed_rows(50)[2]
    groups[0, -3:] = 0  # padding after the last sequence
    host = HostLayout.of(groups > 0, groups)
    device = FAST_CPU.layout(groups > 0, sequence_ids=groups)
    for name in ("index", "cu_seqlens", "at"):
        assert torch.equal(getattr(host, name), getattr(device, name)), name
    assert host.max_len == device.max_len and not host.starts_real
    with no_syncs(monkeypatch):
        FAST_CPU.layout(groups > 0, sequence_ids=groups, host=host)
