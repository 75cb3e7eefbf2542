"""The DeBERTa body (issue 43) against transformers' DebertaV2Model: the same hidden states
within 1e-5 in fp32 on padded rows of mixed lengths, distances past the bucket range
included, for V3's settings and the variants (own position projections, one term, no
buckets); and its relative buckets by hand."""

from __future__ import annotations

import re

import pytest
import torch
from helpers import make_batch

from electra.config import ModelConfig
from electra.model.bodies.deberta.model import DebertaEncoder, relative_buckets

transformers = pytest.importorskip("transformers")

KEYS = [(r"embeddings\.LayerNorm\.", "embeddings.layer_norm."),
        (r"encoder\.rel_embeddings\.", "rel_embeddings."),
        (r"encoder\.LayerNorm\.", "rel_norm."),
        (r"encoder\.layer\.(\d+)\.attention\.self\.query_proj\.", r"layers.\1.query."),
        (r"encoder\.layer\.(\d+)\.attention\.self\.key_proj\.", r"layers.\1.key."),
        (r"encoder\.layer\.(\d+)\.attention\.self\.value_proj\.", r"layers.\1.value."),
        (r"encoder\.layer\.(\d+)\.attention\.self\.pos_key_proj\.", r"layers.\1.pos_key."),
        (r"encoder\.layer\.(\d+)\.attention\.self\.pos_query_proj\.", r"layers.\1.pos_query."),
        (r"encoder\.layer\.(\d+)\.attention\.output\.dense\.", r"layers.\1.attention_out."),
        (r"encoder\.layer\.(\d+)\.attention\.output\.LayerNorm\.", r"layers.\1.attention_norm."),
        (r"encoder\.layer\.(\d+)\.intermediate\.dense\.", r"layers.\1.ffn_in."),
        (r"encoder\.layer\.(\d+)\.output\.dense\.", r"layers.\1.ffn_out."),
        (r"encoder\.layer\.(\d+)\.output\.LayerNorm\.", r"layers.\1.ffn_norm.")]


def ours_from(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {}
    for key, value in state.items():
        for pattern, repl in KEYS:
            if re.match(pattern, key):
                key = re.sub(pattern, repl, key)
                break
        out[key] = value
    return out


def pair(**ours):
    """transformers' DebertaV2Model (random weights, biases and norms moved off their init)
    and ours with the same weights."""
    cfg = ModelConfig().replace(
        vocab_size=120, embedding_size=64, hidden_size=64, num_layers=2, num_heads=4,
        intermediate_size=128, max_position_embeddings=512, hidden_dropout=0.0,
        attention_dropout=0.0, layer_norm_eps=1e-7, body="deberta",
        **{"position_buckets": 16, "max_relative_positions": 64, **ours})
    hf_cfg = transformers.DebertaV2Config(
        vocab_size=120, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=512, type_vocab_size=0,
        relative_attention=True, position_biased_input=False, layer_norm_eps=1e-7,
        position_buckets=cfg.position_buckets or -1,
        max_relative_positions=cfg.max_relative_positions or -1,
        pos_att_type=[t for t in cfg.pos_att_type.split("|") if t],
        share_att_key=cfg.share_att_key, norm_rel_ebd="layer_norm",
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, hidden_act="gelu")
    torch.manual_seed(0)
    hf = transformers.DebertaV2Model(hf_cfg).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    ours = DebertaEncoder(cfg).eval()
    ours.load_state_dict(ours_from(hf.state_dict()))
    return ours, hf


@pytest.mark.parametrize("settings", [
    {},  # V3's: 256 buckets here 16, shared keys, both terms
    {"share_att_key": False},
    {"pos_att_type": "c2p"},
    {"pos_att_type": "p2c", "share_att_key": False},
    {"position_buckets": 0, "max_relative_positions": 24},  # a row per distance, clamped
])
def test_hidden_states_equal_transformers(settings):
    ours, hf = pair(**settings)
    ids, mask, types = make_batch([80, 33, 7, 80], 80, vocab_size=120)  # distances to 79
    with torch.no_grad():
        a = ours(ids, mask, types)
        b = hf(input_ids=ids, attention_mask=mask).last_hidden_state
    real = mask.bool()
    torch.testing.assert_close(a[real], b[real], atol=1e-5, rtol=1e-5)


def test_relative_buckets_by_hand():
    """16 buckets out to 64: distances under 8 exact; beyond, 8 + ceil(log(d / 8) /
    log(63 / 8) x 7) with the distance's sign (d = 20: 8 + ceil(0.4440 x 7) = 12; d = 99,
    past 64: 8 + ceil(1.2190 x 7) = 17, still growing until the table's edge clamps it)."""
    cfg = ModelConfig().replace(body="deberta", position_buckets=16, max_relative_positions=64)
    b = relative_buckets(100, cfg, torch.device("cpu"))
    assert b[5, 0] == 5 and b[0, 5] == -5 and b[7, 0] == 7 and b[8, 0] == 8
    assert b[20, 0] == 12 and b[0, 20] == -12 and b[99, 0] == 17
    none = relative_buckets(6, ModelConfig().replace(body="deberta", position_buckets=0),
                            torch.device(
        "cpu"))
    assert torch.equal(none, torch.arange(6)[:, None] - torch.arange(6)[None, :])


def test_flops_a_token_equal_torchs_count_of_a_forward():
    """deberta_macs_per_token: BERT's block plus each query's and key's products with the
    relative rows the row reaches and those rows through two projections a layer (spread
    over the row), equal to torch's FLOP counter on a forward of one row (2 FLOPs a
    multiply-add). 32 tokens on 16 buckets out to 64: the farthest distance, 31, is bucket
    8 + ceil(log(31 / 8) / log(63 / 8) x 7) = 13, so rows 16 - 14 to 16 + 14 of the 32 (a row
    of margin either side): 29."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from electra.model.bodies.deberta.model import deberta_macs_per_token, table_rows

    ours, _ = pair()
    T = 32
    assert table_rows(T, ours.config) == slice(2, 31)
    ids = torch.randint(5, 120, (1, T))
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as fc:
        ours(ids, torch.ones_like(ids))
    H, I, R = 64, 128, 29
    # QKV+out, FFN, QK^T and AV, then c2p and p2c: R rows each, and R rows projected
    per_layer = 4 * H * H + 2 * H * I + 2 * T * H + 2 * (R * H + R * H * H // T)
    assert deberta_macs_per_token(ours.config, T) == 2 * per_layer  # 2 layers
    assert fc.get_total_flops() == 2 * T * deberta_macs_per_token(ours.config, T)


def test_the_rows_a_row_reads_are_the_ones_its_distances_reach():
    """table_rows holds every bucket of the row's distances (the gathers index inside it),
    for lengths in and beyond the exact range, with and without buckets; at V3's 256 buckets
    a row of 128 tokens reads 257 of the 512 rows, one of 512 tokens all of them."""
    from electra.model.bodies.deberta.model import position_span, table_rows

    for cfg in (ModelConfig().replace(body="deberta", position_buckets=16,
                                      max_relative_positions=64),
                ModelConfig().replace(body="deberta", position_buckets=0,
                                      max_relative_positions=24),
                ModelConfig(body="deberta")):
        span = position_span(cfg)[0]
        for T in (1, 2, 7, 8, 9, 31, 100, 300):
            rows, b = table_rows(T, cfg), relative_buckets(T, cfg, torch.device("cpu"))
            for index in ((b + span).clamp(0, 2 * span - 1), (span - b).clamp(0, 2 * span - 1)):
                assert rows.start <= int(index.min()) and int(index.max()) < rows.stop
    v3 = ModelConfig(body="deberta")
    assert (table_rows(128, v3), table_rows(512, v3)) == (slice(128, 385), slice(0, 512))
