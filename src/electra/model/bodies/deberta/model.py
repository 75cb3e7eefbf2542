"""The DeBERTa body (He et al., 2021; DeBERTa-V3's settings), as transformers'
``DebertaV2Model`` defines it: disentangled attention over relative positions.

    embeddings   token table (no position table: positions are relative; no segments, as
                 the V3 checkpoints) -> LayerNorm -> padding zeroed -> dropout
    relative     each query-key distance in log buckets (``position_buckets``: exact up to
                 half of them, logarithmic out to ``max_relative_positions``), one shared
                 table of 2 x buckets rows, LayerNorm'd once a forward; the rows a row's
                 distances reach are projected once a layer (at 128 tokens of V3's 256
                 buckets: 257 of 512 rows; transformers projects all 512)
    block i      scores = q.k / s + c2p + p2c,  s = sqrt(head size x (1 + terms))
                 c2p[i, j] = q_i . Wk(rel[bucket(i - j)]) / s   (content to position)
                 p2c[i, j] = k_j . Wq(rel[bucket(j - i)]) / s   (position to content)
                 then BERT's post-LN block: x = LN(x + Wo(attention)), x = LN(x + FFN(x))

With ``share_att_key`` (V3's) the positions go through the block's own query and key
projections; otherwise through projections of their own. The two position terms are one
additive bias of a layer's (B, heads, T, T) scores, handed to the kernels' attention with
the padding mask folded in (torch's scaled-dot-product attention, or with dropout on a CPU
the written attention and its cheaper dropout): one layer's bias exists at a time. The body
computes padded rows whatever layout the kernels would give (the bias needs the whole row),
so its states at padding are computed, and never read.

A generator narrower than the shared embeddings projects them to its width after the norm
(ELECTRA's way); the discriminator of a released V3 checkpoint has embeddings as wide as its
blocks, where this equals transformers' ``embed_proj``-free layout.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from electra.config import ModelConfig
from electra.errors import UserError
from electra.model.kernels import FAST_CPU, Kernels, Layout
from electra.model.layers import GDES, Block, Dropout, Linear, TokenTable


def position_span(cfg: ModelConfig) -> tuple[int, int]:
    """(buckets a side: the relative table has twice as many rows, the farthest distance
    told apart): DeBERTa's ``pos_ebd_size`` and ``max_relative_positions``."""
    far = cfg.max_relative_positions or cfg.max_position_embeddings
    return (cfg.position_buckets or far), far


def relative_buckets(T: int, cfg: ModelConfig, device: torch.device) -> torch.Tensor:
    """(T, T) the bucket of each query-key distance i - j: the distance itself inside half
    the buckets, beyond it ``mid + ceil(log(|d| / mid) / log((far - 1) / mid) * (mid - 1))``
    with the distance's sign (transformers' ``make_log_bucket_position``)."""
    ids = torch.arange(T, device=device)
    return bucket_of(ids[:, None] - ids[None, :], cfg)


def bucket_of(rel: torch.Tensor, cfg: ModelConfig) -> torch.Tensor:
    """The bucket of each distance in ``rel`` (:func:`relative_buckets`' rule)."""
    if not cfg.position_buckets:
        return rel
    mid, (_, far) = cfg.position_buckets // 2, position_span(cfg)
    inside = (rel < mid) & (rel > -mid)
    size = torch.where(inside, torch.full_like(rel, mid - 1), rel.abs()).float()
    log_pos = torch.ceil(torch.log(size / mid) / math.log((far - 1) / mid) * (mid - 1)) + mid
    return torch.where(size <= mid, rel.float(), log_pos * rel.sign()).long()


def table_rows(T: int, cfg: ModelConfig) -> slice:
    """The rows of the relative table a row of T tokens reads: buckets out to its farthest
    distance's (counted on the host, one row of margin either side, so that no device value
    is read), within the table's 2 x S rows. Rows of up to half the buckets read 2T + 1."""
    span = position_span(cfg)[0]
    reach = int(bucket_of(torch.tensor([max(T - 1, 0)]), cfg)[0]) + 1
    return slice(max(0, span - reach), min(2 * span, span + reach + 1))


class DebertaEmbeddings(TokenTable, nn.Module):
    """Token embeddings, LayerNorm, dropout: no positions, no segments. Shareable."""

    def __init__(self, cfg: ModelConfig, kernels: Kernels | None = None) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.embedding_size,
                                            padding_idx=cfg.pad_token_id)
        self.layer_norm = nn.LayerNorm(cfg.embedding_size, eps=cfg.layer_norm_eps)
        self.dropout = Dropout(cfg.hidden_dropout, kernels)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor,
                positions: torch.Tensor | None = None,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        x = self.layer_norm(self.words(input_ids))
        if mask is not None:  # padding zeroed, as transformers does
            x = x * mask[..., None].to(x.dtype)
        return self.dropout(x)


class DebertaGDESEmbeddings(GDES, DebertaEmbeddings):
    """DeBERTa's embeddings under gradient-disentangled sharing (DeBERTaV3's own)."""


class DebertaBlock(Block):
    """Disentangled self-attention, then BERT's post-LN block (its fused Q/K/V, output
    projection, norms and feed-forward layers: :class:`electra.model.layers.Block`'s)."""

    def __init__(self, cfg: ModelConfig, kernels: Kernels | None = None) -> None:
        super().__init__(cfg, kernels)
        H = cfg.hidden_size
        self.qkv.castable = False  # its rows are read for the positions too (positions())
        self.terms = tuple(t for t in ("c2p", "p2c") if t in cfg.pos_att_type.split("|"))
        self.pos_key = self.pos_query = None
        if not cfg.share_att_key:  # positions through projections of their own
            self.pos_key = Linear(H, H) if "c2p" in self.terms else None
            self.pos_query = Linear(H, H) if "p2c" in self.terms else None
        self.rel_dropout = Dropout(cfg.hidden_dropout, kernels)

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        """(..., T, H) -> (..., heads, T, head size)."""
        return x.unflatten(-1, (self.num_heads, -1)).transpose(-2, -3)

    def positions(self, rel: torch.Tensor, own: nn.Linear | None, part: int) -> torch.Tensor:
        """The relative table through a projection of its own, or through the block's query
        (``part`` 0) or key (1) third of the fused Q/K/V: (heads, 2S, head size)."""
        if own is not None:
            return self.heads(own(rel))
        H = rel.shape[-1]
        rows = slice(part * H, (part + 1) * H)
        return self.heads(F.linear(rel, self.qkv.weight[rows], self.qkv.bias[rows]))

    def forward(self, x: torch.Tensor, masked: torch.Tensor | None,  # type: ignore[override]
                rel: torch.Tensor, c2p: torch.Tensor, p2c: torch.Tensor) -> torch.Tensor:
        """(B, T, H) -> (B, T, H); ``masked`` (B, 1, T, T) True where a key is not attended
        (None: no padding), ``rel`` the normed rows of the relative table the row reads,
        ``c2p`` / ``p2c`` (T, T) each query-key pair's row in it for each term
        (:meth:`DebertaEncoder.forward`)."""
        q, k, v = (self.heads(t) for t in self.qkv(x).chunk(3, -1))
        scale = math.sqrt(q.shape[-1] * (1 + len(self.terms)))
        rel = self.rel_dropout(rel)
        bias = torch.zeros((), dtype=q.dtype, device=q.device)
        if "c2p" in self.terms:  # q_i . key(rel[bucket(i - j)])
            pos_k = self.positions(rel, self.pos_key, 1)
            bias = bias + torch.gather(q @ pos_k.transpose(-1, -2), -1,
                                       c2p.expand(*q.shape[:-1], -1)) / scale
        if "p2c" in self.terms:  # k_j . query(rel[bucket(j - i)])
            pos_q = self.positions(rel, self.pos_query, 0)
            bias = bias + torch.gather(k @ pos_q.transpose(-1, -2), -1,
                                       p2c.expand(*k.shape[:-1], -1)).transpose(-1, -2) / scale
        if masked is not None:
            bias = bias.masked_fill(masked, torch.finfo(q.dtype).min)
        p = self.attention_dropout if self.training else 0.0
        a = self.kernels.biased_attention(q, k, v, bias, 1 / scale, p, self.probs_dropout)
        x = self.attention_norm(x + self.dropout(self.attention_out(
            a.transpose(-2, -3).flatten(-2))))
        return self.ffn_norm(x + self.dropout(self.ffn_out(F.gelu(self.ffn_in(x)))))


class DebertaEncoder(nn.Module):
    """Embeddings (owned or shared), an E -> H projection where they are narrower or wider
    than the blocks, the relative table and its norm, the blocks."""

    def __init__(self, cfg: ModelConfig, embeddings: DebertaEmbeddings | None = None,
                 kernels: Kernels | None = None) -> None:
        super().__init__()
        self.config = cfg
        self.kernels = kernels or FAST_CPU
        self.embeddings = embeddings if embeddings is not None else DebertaEmbeddings(
            cfg, kernels)
        E = self.embeddings.word_embeddings.embedding_dim
        self.embeddings_project = Linear(E, cfg.hidden_size) if cfg.hidden_size != E else None
        self.rel_embeddings = nn.Embedding(2 * position_span(cfg)[0], cfg.hidden_size)
        self.rel_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.layers = nn.ModuleList(DebertaBlock(cfg, kernels) for _ in range(cfg.num_layers))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, first_only: bool = False,
                sequence_ids: torch.Tensor | None = None,
                layout: Layout | None = None) -> torch.Tensor:
        """Hidden states (B, T, H) of padded rows (B, 1, H with ``first_only``): segments
        are not read (DeBERTa-V3 has none); packed rows are refused; ``layout`` is not read
        (the body computes every position, its relative positions need the whole row)."""
        if sequence_ids is not None:
            raise UserError("model.body=deberta reads one sequence a row; prepare the data "
                            "without --pack")
        T = input_ids.shape[1]
        mask = attention_mask.bool() if attention_mask is not None else None
        x = self.embeddings(input_ids, token_type_ids, mask=mask)
        if self.embeddings_project is not None:
            x = self.embeddings_project(x)
        rows, span = table_rows(T, self.config), position_span(self.config)[0]
        rel = self.rel_norm(self.rel_embeddings.weight)[rows]  # the rows the distances reach
        buckets = relative_buckets(T, self.config, input_ids.device)
        c2p = (buckets + span).clamp(0, 2 * span - 1) - rows.start  # row of rel[bucket(i-j)]
        p2c = (span - buckets).clamp(0, 2 * span - 1) - rows.start  # row of rel[bucket(j-i)]
        masked = (None if mask is None  # (B, 1, T, T)
                  else ~(mask[:, None, :, None] & mask[:, None, None, :]))
        for block in self.layers:
            x = block(x, masked, rel, c2p, p2c)
        return x[:, :1] if first_only else x


def deberta_macs_per_token(cfg: ModelConfig, seq_len: int) -> int:
    """Multiply-accumulates per token: BERT's block (Q/K/V and output projections, the
    feed-forward layers, QK^T and AV over the row) plus the position terms: each query's and
    key's dot products with the R relative rows the row reaches (c2p and p2c,
    :func:`table_rows`), and those rows through the key and query projections (R rows a
    layer, spread over the row's tokens)."""
    H, I, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_layers
    terms = len([t for t in cfg.pos_att_type.split("|") if t in ("c2p", "p2c")])
    rows = table_rows(seq_len, cfg)
    R = rows.stop - rows.start
    per_layer = (4 * H * H + 2 * H * I + 2 * seq_len * H
                 + terms * (R * H + R * H * H // max(1, seq_len)))
    project = cfg.embedding_size * H if cfg.embedding_size != H else 0
    return L * per_layer + project
