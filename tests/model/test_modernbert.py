"""The ModernBERT body against transformers' own ModernBERT (an independent implementation):
random weights copied across, mixed-length padded batches longer than the local window,
fp32 outputs within 1e-5, on every layout the kernels give."""

from __future__ import annotations

import pytest
import torch
from helpers import make_batch

from electra.model import Discriminator, Generator, encoder_for
from electra.model.bodies import model_preset
from electra.model.bodies.modernbert.hf import to_config as to_modernbert_config
from electra.model.bodies.modernbert.hf import to_state as to_modernbert_state_dict
from electra.model.kernels import FAST_CPU, Kernels

transformers = pytest.importorskip("transformers")

PADDED = Kernels("padded", FAST_CPU.dropout, written_attention=True, unpad=False)
LENGTHS = [[40, 23, 9, 33], [40, 40, 40]]  # padded rows; none padded (attention without mask)


def config(**overrides):
    """4 blocks (0 and 3 global), a window of 8 tokens: rows of 40 reach far past it."""
    base = dict(vocab_size=101, embedding_size=32, hidden_size=32, num_layers=4, num_heads=4,
                intermediate_size=48, max_position_embeddings=64, local_attention=8,
                global_every=3)
    return model_preset("modernbert-small", **{**base, **overrides})


def randomized(module: torch.nn.Module) -> torch.nn.Module:
    """Every weight away from its init (norms included), so every term counts."""
    torch.manual_seed(0)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return module.eval()


def transformers_copy(ours: torch.nn.Module, cfg) -> torch.nn.Module:
    """transformers' class with ``ours``'s weights: ModernBertForMaskedLM for a generator,
    ModernBertModel for an encoder (through the export key table)."""
    hf_cfg = to_modernbert_config(cfg)
    hf_cfg._attn_implementation = "sdpa"
    if isinstance(ours, Generator):
        theirs = transformers.ModernBertForMaskedLM(hf_cfg)
        theirs.load_state_dict(to_modernbert_state_dict(ours.state_dict()))
    else:
        theirs = transformers.ModernBertModel(hf_cfg)
        state = to_modernbert_state_dict({f"encoder.{k}": v for k, v in
                                          ours.state_dict().items()})
        theirs.load_state_dict({k.removeprefix("model."): v for k, v in state.items()})
    return theirs.eval()


def assert_same(ours: torch.nn.Module, cfg, lengths: list[int], T: int) -> None:
    """Our outputs (hidden states, or a generator's logits) and transformers' on a batch of
    rows of ``lengths`` padded to T: within 1e-5 at every real token."""
    theirs = transformers_copy(ours, cfg)
    ids, mask, types = make_batch(lengths, T)
    with torch.no_grad():
        got = ours(ids, mask, types)
        out = theirs(input_ids=ids, attention_mask=mask)
    want = out.logits if isinstance(ours, Generator) else out.last_hidden_state
    real = mask.bool()
    torch.testing.assert_close(got[real], want[real], rtol=0, atol=1e-5)


@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("kernels", [FAST_CPU, PADDED], ids=["unpadded", "padded"])
@pytest.mark.parametrize("local", [8, 16], ids=["blocked", "dense-band"])
def test_encoder_equals_transformers_modernbertmodel(lengths, kernels, local):
    """Windows of 8 (keys within 4): rows of 40 take the blocked local kernel; of 16: the
    dense band (a row under 8 windows' length)."""
    cfg = config(local_attention=local)
    assert_same(randomized(encoder_for(cfg, kernels=kernels)), cfg, lengths, 40)


def test_generator_equals_transformers_modernbertformaskedlm():
    cfg = config(embedding_size=32)  # no projection: transformers' class has none
    assert_same(randomized(Generator(cfg)), cfg, [40, 17, 30], 40)


def test_no_biases_and_rope_past_the_window():
    """ModernBERT's layers carry no bias (the heads' too); a token far past the window still
    sees a distant one through the global blocks, and RoPE at positions up to 300 gives
    transformers' states."""
    cfg = config(max_position_embeddings=512)
    disc = Discriminator(cfg)
    names = [n for n, _ in disc.named_parameters() if n.endswith(".bias")]
    assert names == ["head_out.bias"], names  # the RTD logit's own bias
    enc = randomized(encoder_for(cfg))
    ids, mask, types = make_batch([300], 300)
    with torch.no_grad():
        a = enc(ids, mask, types)[0, 250]
        changed = ids.clone()
        changed[0, 10] = (changed[0, 10] + 1) % 100 + 1  # outside every local window of 250
        b = enc(changed, mask, types)[0, 250]
    assert not torch.equal(a, b)  # the global blocks carry it
    assert_same(enc, cfg, [300, 260], 300)


def test_unpadded_equals_padded_and_first_only_equals_the_full_pass():
    cfg = config()
    torch.manual_seed(0)
    unpadded = randomized(encoder_for(cfg, kernels=FAST_CPU))
    padded = encoder_for(cfg, kernels=PADDED).eval()
    padded.load_state_dict(unpadded.state_dict())
    ids, mask, types = make_batch([40, 23, 9, 33], 40)
    with torch.no_grad():
        a, b = unpadded(ids, mask, types), padded(ids, mask, types)
        real = mask.bool()
        torch.testing.assert_close(a[real], b[real], rtol=0, atol=1e-5)
        first = unpadded(ids, mask, types, first_only=True)
        torch.testing.assert_close(first[:, 0], a[:, 0], rtol=0, atol=1e-5)


def test_macs_follow_a_hand_count_and_the_profiler():
    """4 blocks of width 32, GeGLU 48, 40 tokens, windows of 8: per token each block costs
    4·32² + 3·32·48 = 8,704, attention 2·40·32 in the global blocks (0, 3) and 2·9·32 in the
    local ones (the 9 keys within 4). torch's FLOP counter sees what the blocked local
    kernel computes: blocks of 8 queries against 16 keys, 2·7·32 more in each local block."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from electra.model.macs import encoder_macs_per_token

    cfg = config()
    assert encoder_macs_per_token(cfg, 40) == 4 * 8704 + 2 * 2 * 40 * 32 + 2 * 2 * 9 * 32
    ids, mask, types = make_batch([40, 40], 40)
    enc = encoder_for(cfg, kernels=PADDED).eval()
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as c:
        enc(ids, mask, types)
    masked_keys = 2 * 2 * (16 - 9) * 32
    assert c.get_total_flops() == 2 * 2 * 40 * (encoder_macs_per_token(cfg, 40) + masked_keys)


def test_the_blocked_local_kernel_equals_the_dense_band_with_its_gradients():
    """Blocks of 2·window queries against their keys give the dense band-masked attention
    (padding keys masked, rows shorter than a block, a length that is no multiple of it),
    forward and backward; and a long ModernBERT row runs through it equal to transformers."""
    import torch.nn.functional as F

    from electra.model.kernels import band, local_attention

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 150, 8, requires_grad=True) for _ in range(3))
    keys = torch.ones(2, 150, dtype=torch.bool)
    keys[1, 97:] = False
    real = keys[:, None, :, None].expand(2, 4, 150, 8)
    dense = F.scaled_dot_product_attention(q, k, v, attn_mask=band(keys[:, None, None], 150, 6,
                                                                   q.device))
    grad = torch.randn_like(dense) * real
    want = torch.autograd.grad(dense, (q, k, v), grad, retain_graph=True)
    for written in (False, True):  # the blocks through SDPA, and written out (CPU training)
        blocked = local_attention(q, k, v, keys, 6, 12, written=written)
        torch.testing.assert_close(blocked[real], dense[real], rtol=0, atol=1e-6)
        got = torch.autograd.grad(blocked, (q, k, v), grad)
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5)

    cfg = config()  # windows of 8 tokens: rows of 40 and more take the blocked kernel
    assert_same(randomized(encoder_for(cfg, kernels=PADDED)), cfg, [64, 50, 33], 64)


@pytest.mark.parametrize("head", ["sequence", "tagging", "qa", "choice"])
def test_each_fine_tuning_head_equals_its_modernbert_for_class(head):
    """A fine-tuning head on the ModernBERT body is ModernBERT's (dense -> GELU -> norm, then
    the classifier; [CLS] pooling for a sequence or a choice): through the export key table,
    transformers' ModernBertFor* class gives our logits within 1e-5 on padded rows."""
    from electra.saved.hf_format import export_of
    from electra.tasks.choice.head import MultipleChoice
    from electra.tasks.qa.head import QuestionAnswerer
    from electra.tasks.sequence.head import SequenceClassifier
    from electra.tasks.tagging.head import TokenClassifier

    cfg = config(hidden_dropout=0.0, attention_dropout=0.0)
    ours, part, cls, extra = {
        "sequence": (SequenceClassifier(cfg, 3), "classifier",
                     "ModernBertForSequenceClassification", {"num_labels": 3}),
        "tagging": (TokenClassifier(cfg, 5), "tagger", "ModernBertForTokenClassification",
                    {"num_labels": 5}),
        "qa": (QuestionAnswerer(cfg), "qa", "ModernBertForQuestionAnswering", {}),
        "choice": (MultipleChoice(cfg), "multiple_choice", "ModernBertForMultipleChoice", {}),
    }[head]
    fmt = export_of(cfg)
    assert fmt.cls(part) == cls and fmt.why_not(cfg, part) is None
    randomized(ours)
    hf_cfg = fmt.config(cfg, **extra)
    hf_cfg._attn_implementation = "sdpa"
    theirs = getattr(transformers, cls)(hf_cfg).eval()
    theirs.load_state_dict(fmt.state(ours.state_dict(), part))
    ids, mask, _ = make_batch([40, 23, 9, 33], 40)
    with torch.no_grad():
        if head == "choice":
            mine = ours(ids.view(2, 2, 40), mask.view(2, 2, 40))
            out = theirs(input_ids=ids.view(2, 2, 40), attention_mask=mask.view(2, 2, 40))
            torch.testing.assert_close(mine, out.logits, atol=1e-5, rtol=1e-5)
            return
        mine = ours(ids, mask)
        out = theirs(input_ids=ids, attention_mask=mask)
    if head == "qa":
        real = mask.bool()
        torch.testing.assert_close(mine[..., 0][real], out.start_logits[real], atol=1e-5,
                                   rtol=1e-5)
        torch.testing.assert_close(mine[..., 1][real], out.end_logits[real], atol=1e-5,
                                   rtol=1e-5)
    elif head == "tagging":
        real = mask.bool()
        torch.testing.assert_close(mine[real], out.logits[real], atol=1e-5, rtol=1e-5)
    else:
        torch.testing.assert_close(mine, out.logits, atol=1e-5, rtol=1e-5)
