"""The model: shapes, sharing, tying, and equality with transformers' ELECTRA."""

from __future__ import annotations

import pytest
import torch
from helpers import make_batch, tiny_config

from electra.data.tokenizer import SpecialTokens
from electra.errors import UserError
from electra.model import Discriminator, count_parameters
from electra.model.bodies import model_preset
from electra.model.bodies.bert.hf import from_state as from_hf_state_dict
from electra.model.bodies.bert.hf import to_config as to_hf_config
from electra.model.bodies.bert.hf import to_state as to_hf_state_dict
from electra.objectives.config import ObjectiveConfig
from electra.objectives.pretraining import ElectraPretrainingModel

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("preset, expected", [
    ("small", 13_549_057), ("base", 109_483_009), ("large", 335_142_913)])
def test_discriminator_parameter_counts(preset, expected):
    cfg = model_preset(preset)
    with torch.device("meta"):  # shapes only: nothing allocated or initialised
        ours = count_parameters(Discriminator(cfg))
        theirs = count_parameters(transformers.ElectraForPreTraining(to_hf_config(cfg)))
    assert ours == theirs == expected


@pytest.mark.parametrize("preset, gen", [
    ("small", (64, 1, 256)), ("base", (256, 4, 1024)), ("large", (256, 4, 1024))])
def test_generator_derived_by_multiplier(preset, gen):
    g = model_preset(preset).generator_config()
    assert (g.hidden_size, g.num_heads, g.intermediate_size) == gen
    assert g.num_layers == model_preset(preset).num_layers


def test_shared_embeddings_are_one_module_counted_once():
    cfg = tiny_config()
    m = ElectraPretrainingModel(cfg)
    emb = m.discriminator.encoder.embeddings
    assert m.generator.encoder.embeddings is emb
    n_emb = count_parameters(emb)
    assert count_parameters(m) == (count_parameters(m.discriminator)
                                   + count_parameters(m.generator) - n_emb)
    unshared = ElectraPretrainingModel(cfg.replace(share_embeddings=False))
    assert unshared.generator.encoder.embeddings is not unshared.discriminator.encoder.embeddings
    assert count_parameters(unshared) == (count_parameters(unshared.discriminator)
                                          + count_parameters(unshared.generator))


def test_a_shared_embeddings_module_is_not_reinitialised():
    from electra.model import Generator

    d = Discriminator(tiny_config())
    with torch.no_grad():
        d.encoder.embeddings.word_embeddings.weight.fill_(0.5)
    g = Generator(tiny_config().generator_config(), d.encoder.embeddings)
    assert (g.encoder.embeddings.word_embeddings.weight == 0.5).all()


def test_tied_output_layer_follows_the_word_table_after_an_update():
    torch.manual_seed(0)
    m = ElectraPretrainingModel(tiny_config())
    ids, mask, types = make_batch([20, 32], 32)
    from electra.objectives.masking import Batch
    from electra.objectives.pretraining import electra_forward

    opt = torch.optim.SGD(m.parameters(), lr=1.0)
    out = electra_forward(m, Batch(ids, mask, types), None, SpecialTokens(0, 1, 2, 3, 4),
                          ObjectiveConfig())
    out.loss.backward()
    opt.step()
    g = m.generator
    h = g.encoder(ids, mask, types)
    h = g.head_norm(torch.nn.functional.gelu(g.head_dense(h)))
    expected = h @ m.discriminator.encoder.embeddings.word_embeddings.weight.T + g.output_bias
    torch.testing.assert_close(g(ids, mask, types), expected)


@pytest.mark.parametrize("preset", ["tiny", "small"])
def test_logits_equal_transformers_with_padding(preset):
    torch.manual_seed(0)
    cfg = model_preset(preset, vocab_size=500)
    m = ElectraPretrainingModel(cfg).eval()
    hf_d = transformers.ElectraForPreTraining(to_hf_config(cfg)).eval()
    hf_g = transformers.ElectraForMaskedLM(to_hf_config(cfg.generator_config())).eval()
    hf_d.load_state_dict(to_hf_state_dict(m.discriminator.state_dict(), "discriminator"))
    hf_g.load_state_dict(to_hf_state_dict(m.generator.state_dict(), "generator"))
    ids, mask, types = make_batch([40, 17, 64], 64, vocab_size=500)
    types[:, 20:] = 1
    real = mask.bool()
    with torch.no_grad():
        ours = m.discriminator(ids, mask, types)
        theirs = hf_d(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
        torch.testing.assert_close(ours[real], theirs[real], atol=1e-5, rtol=1e-5)
        positions = torch.tensor([[1, 5, 9], [2, 3, 15], [60, 7, 30]])
        ours_g = m.generator(ids, mask, types, positions)
        theirs_g = hf_g(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
        torch.testing.assert_close(
            ours_g, torch.gather(theirs_g, 1, positions[..., None].expand(-1, -1, 500)),
            atol=1e-5, rtol=1e-5)


def test_key_table_round_trip_is_bitwise():
    m = ElectraPretrainingModel(tiny_config())
    for kind, module in (("discriminator", m.discriminator), ("generator", m.generator)):
        state = module.state_dict()
        back = from_hf_state_dict(to_hf_state_dict(state, kind), kind)
        assert back.keys() == state.keys()
        assert all(torch.equal(back[k], state[k]) for k in state)


def test_padding_does_not_change_real_token_outputs():
    torch.manual_seed(0)
    d = Discriminator(tiny_config()).eval()
    ids, mask, _ = make_batch([20], 20)
    padded = torch.cat([ids, torch.zeros(1, 12, dtype=torch.long)], 1)
    pmask = torch.cat([mask, torch.zeros(1, 12, dtype=torch.long)], 1)
    with torch.no_grad():
        torch.testing.assert_close(d(ids, mask), d(padded, pmask)[:, :20])


def test_vocab_without_special_tokens_is_refused():
    with pytest.raises(UserError, match=r"\[MASK\].*electra tokenizer train"):
        SpecialTokens.from_vocab({"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "a": 4})


def test_qkv_is_one_parameter_and_weights_in_the_three_tensor_layout_load_bitwise():
    """A block's query, key and value are one (3H, H) parameter; a state dict that holds
    them as three tensors (transformers', and checkpoints and folders written before the
    fusion) loads into it, and splitting gives the three back, bit for bit."""
    from electra.model import fuse_qkv, split_qkv

    cfg = tiny_config()
    torch.manual_seed(0)
    model = Discriminator(cfg)
    names = [n for n, _ in model.named_parameters()]
    assert not any(".query." in n or ".key." in n or ".value." in n for n in names)
    assert model.encoder.layers[0].qkv.weight.shape == (3 * cfg.hidden_size, cfg.hidden_size)
    state = model.state_dict()
    three = split_qkv(state)
    assert {k for k in three if "layers.0." in k} >= {
        f"encoder.layers.0.{n}.{p}" for n in ("query", "key", "value") for p in ("weight", "bias")}
    H = cfg.hidden_size
    assert torch.equal(three["encoder.layers.1.key.weight"],
                       state["encoder.layers.1.qkv.weight"][H:2 * H])
    torch.manual_seed(1)
    other = Discriminator(cfg)
    other.load_state_dict(three)  # strict: every key used, none missing
    assert all(torch.equal(v, other.state_dict()[k]) for k, v in state.items())
    fused = dict(three)
    fuse_qkv(fused)
    assert fused.keys() == state.keys() and all(torch.equal(fused[k], state[k]) for k in state)


@pytest.mark.parametrize("preset", ["tiny", "small"])
def test_the_fused_parameter_initialises_as_the_three_did(preset):
    """From one seed a block builds and initialises (init_weights) the weights the block
    with three query/key/value modules built before the fusion: normal_ fills 16 values at a
    time, and H*H is a multiple of 16 for every preset."""
    from torch import nn

    from electra.model import Block, init_weights

    cfg = model_preset(preset)
    H, inter = cfg.hidden_size, cfg.intermediate_size

    class ThreeBlock(nn.Module):  # the block's parameters as they were registered before
        def __init__(self) -> None:
            super().__init__()
            self.query, self.key, self.value = (nn.Linear(H, H) for _ in range(3))
            self.attention_out = nn.Linear(H, H)
            self.attention_norm = nn.LayerNorm(H)
            self.ffn_in, self.ffn_out = nn.Linear(H, inter), nn.Linear(inter, H)
            self.ffn_norm = nn.LayerNorm(H)

    torch.manual_seed(9)
    old = ThreeBlock()
    init_weights(old, cfg.initializer_range)
    torch.manual_seed(9)
    new = Block(cfg)
    init_weights(new, cfg.initializer_range)
    fused = {**old.state_dict()}
    for part in ("weight", "bias"):
        fused[f"qkv.{part}"] = torch.cat([fused.pop(f"{n}.{part}") for n in ("query", "key",
                                                                             "value")])
    assert fused.keys() == new.state_dict().keys()
    assert all(torch.equal(v, new.state_dict()[k]) for k, v in fused.items())
