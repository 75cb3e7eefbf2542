"""The ModernBERT body (Warner et al., 2024), as transformers' ``ModernBertModel`` defines it.

    embeddings   token table (no position table, no segments) -> LayerNorm (no bias) -> dropout
    block i      x = x + Wo(attention(RoPE(Wqkv(norm_a(x)))))     norm_a: none in block 0
                 x = x + Wo_mlp(GELU(a) * g),  [a, g] = Wi(norm_m(x))  (GeGLU)
    end          LayerNorm (no bias)

Every ``global_every``-th block (0, 3, 6, ...) attends globally with RoPE's theta 160,000;
the others attend to the tokens at most ``local_attention // 2`` away (a window of
``local_attention``) with theta 10,000. No linear layer and no LayerNorm has a bias. The
blocks run on the layout the kernels give (``electra.model.kernels``): unpadded from the
embeddings to the heads, or padded with the mask; RoPE reads each token's position in its
row from the layout. Dropout (0 in the published models): ``hidden_dropout`` on the
embeddings and inside the MLP, ``attention_dropout`` on the attention probabilities and the
attention's output.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from electra.config import ModelConfig
from electra.model.kernels import FAST_CPU, Kernels, Layout
from electra.model.layers import GDES, Dropout, Linear, TokenTable, encode, glu, rotate


class ModernEmbeddings(TokenTable, nn.Module):
    """Token embeddings, LayerNorm without bias, dropout. Shareable between models."""

    def __init__(self, cfg: ModelConfig, kernels: Kernels | None = None) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.embedding_size,
                                            padding_idx=cfg.pad_token_id)
        self.norm = nn.LayerNorm(cfg.embedding_size, eps=cfg.layer_norm_eps, bias=False)
        self.dropout = Dropout(cfg.hidden_dropout, kernels)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor,
                positions: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T, E): no segments, no positions (RoPE places the tokens, in the blocks)."""
        return self.dropout(self.norm(self.words(input_ids)))


class ModernGDESEmbeddings(GDES, ModernEmbeddings):
    """ModernBERT's embeddings under gradient-disentangled sharing (``GDES``)."""


class ModernBlock(nn.Module):
    """A pre-norm block: attention with RoPE over the whole row or a window, then GeGLU."""

    compile_unit = True  # what ``train.compile`` compiles (electra.train.trainer)

    def __init__(self, cfg: ModelConfig, index: int, kernels: Kernels | None = None) -> None:
        super().__init__()
        self.kernels = kernels = kernels or FAST_CPU
        H = cfg.hidden_size
        self.num_heads = cfg.num_heads
        self.attention_dropout = cfg.attention_dropout
        is_global = index % cfg.global_every == 0
        self.window = None if is_global else cfg.local_attention // 2
        theta = cfg.global_rope_theta if is_global else cfg.local_rope_theta
        hs = H // cfg.num_heads
        self.register_buffer("inv_freq", 1.0 / theta ** (torch.arange(0, hs, 2).float() / hs),
                             persistent=False)
        self.attn_norm = (nn.LayerNorm(H, eps=cfg.layer_norm_eps, bias=False) if index
                          else nn.Identity())  # block 0 reads the embeddings' norm
        self.qkv = Linear(H, 3 * H, bias=False)
        self.attention_out = Linear(H, H, bias=False)
        self.mlp_norm = nn.LayerNorm(H, eps=cfg.layer_norm_eps, bias=False)
        self.mlp_in = Linear(H, 2 * cfg.intermediate_size, bias=False)
        self.mlp_out = Linear(cfg.intermediate_size, H, bias=False)
        self.out_dropout = Dropout(cfg.attention_dropout, kernels)
        self.mlp_dropout = Dropout(cfg.hidden_dropout, kernels)
        self.probs_dropout = Dropout(cfg.attention_dropout, kernels)  # written attention

    def forward(self, x: torch.Tensor, layout: Layout, first: bool = False) -> torch.Tensor:
        """(B, T, H), or (N, H) under an unpadded layout, to the same shape; ``first``: only
        each row's first position after the attention's projections, (B, H)."""
        h = self.attn_norm(x)
        qkv = rotate(self.qkv(h), layout.positions(h), self.inv_freq, self.num_heads)
        p = self.attention_dropout if self.training else 0.0
        if first:
            a = layout.attend_first(self.kernels, qkv, self.num_heads, p, self.probs_dropout,
                                    window=self.window)
            x = layout.first(x)
        else:
            a = layout.attend(self.kernels, qkv, self.num_heads, p, self.probs_dropout,
                              window=self.window)
        x = x + self.out_dropout(self.attention_out(a))
        return x + self.mlp_out(self.mlp_dropout(glu(self.mlp_in(self.mlp_norm(x)), "gelu")))


class ModernEncoder(nn.Module):
    """Embeddings (owned or shared), an optional E->H projection, the blocks, the final
    norm: the interface of the BERT body's ``Encoder``."""

    def __init__(self, cfg: ModelConfig, embeddings: nn.Module | None = None,
                 kernels: Kernels | None = None) -> None:
        super().__init__()
        self.config = cfg
        self.kernels = kernels or FAST_CPU
        self.embeddings = (embeddings if embeddings is not None
                           else ModernEmbeddings(cfg, kernels))
        E = self.embeddings.word_embeddings.embedding_dim
        self.embeddings_project = Linear(E, cfg.hidden_size, bias=False) \
            if cfg.hidden_size != E else None
        self.layers = nn.ModuleList(ModernBlock(cfg, i, kernels) for i in range(cfg.num_layers))
        self.final_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, bias=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None,
                first_only: bool = False,
                sequence_ids: torch.Tensor | None = None,
                layout: Layout | None = None) -> torch.Tensor:
        """Hidden states (B, T, H) after the final norm (zeros at padding when unpadded);
        ``first_only``, ``sequence_ids`` and ``layout`` as the BERT body's: (B, 1, H), each
        row's first position; packed rows; the caller's layout."""
        return encode(self, input_ids, attention_mask, token_type_ids, first_only,
                      self.final_norm, sequence_ids, layout)


def modern_macs_per_token(cfg: ModelConfig, seq_len: int) -> int:
    """Multiply-accumulates per token of the model as defined: each block's Wqkv and Wo
    (4H²), its GeGLU (Wi: H -> 2I, Wo: I -> H), QK^T and AV over the keys it attends (the
    row in a global block, ``local_attention + 1`` in a local one, fewer where the row is
    shorter), and the E -> H projection where E != H. (The kernels compute a little more:
    the dense band's masked-out keys below 8 windows' length, each block's 2·window extra
    keys above; this counts the model's work.)"""
    H, I = cfg.hidden_size, cfg.intermediate_size
    total = cfg.embedding_size * H if cfg.embedding_size != H else 0
    for i in range(cfg.num_layers):
        keys = seq_len if i % cfg.global_every == 0 else min(seq_len, cfg.local_attention + 1)
        total += 4 * H * H + 3 * H * I + 2 * keys * H
    return total


class ModernHead(nn.Module):
    """ModernBERT's prediction head before a task's classifier (transformers'
    ``ModernBertPredictionHead``): dense (no bias) -> GELU -> LayerNorm (no bias)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.dense = Linear(cfg.hidden_size, cfg.hidden_size, bias=False)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, bias=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.norm(F.gelu(self.dense(h)))


def modern_length_error(cfg: ModelConfig, seq_len: int) -> str | None:
    """A local window longer than the rows: every local block would attend to the whole row
    (a global block with the local theta), which no ModernBERT means."""
    if cfg.local_attention > seq_len:
        return (f"model.local_attention={cfg.local_attention} is longer than the "
                f"{seq_len}-token rows, so every local layer would attend to its whole row; set "
                f"model.local_attention to an even number up to {seq_len}, or prepare longer "
                f"rows (--seq-len)")
    return None
