"""The BERT body (ELECTRA's): word + position + token-type embeddings, post-LN blocks with
GELU feed-forward layers and full attention. Parameters map one-to-one onto transformers'
``ElectraModel`` (the key table is this folder's ``hf.py``).
"""

from __future__ import annotations

import torch
from torch import nn

from electra.config import ModelConfig
from electra.model.kernels import FAST_CPU, Kernels, Layout
from electra.model.layers import GDES, Block, Dropout, Linear, TokenTable, encode


class Embeddings(TokenTable, nn.Module):
    """Word + position + token-type embeddings, LayerNorm, dropout. Shareable between models."""

    def __init__(self, cfg: ModelConfig, kernels: Kernels | None = None) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.embedding_size,
                                            padding_idx=cfg.pad_token_id)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.embedding_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.embedding_size)
        self.layer_norm = nn.LayerNorm(cfg.embedding_size, eps=cfg.layer_norm_eps)
        self.dropout = Dropout(cfg.hidden_dropout, kernels)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor,
                positions: torch.Tensor | None = None) -> torch.Tensor:
        """``positions`` (B, T): each token's position (packed rows); None: 0..T-1."""
        T = input_ids.shape[1]
        x = (self.words(input_ids)
             + (self.position_embeddings.weight[:T] if positions is None  # (T, E), over B
                else self.position_embeddings(positions))
             + self.token_type_embeddings(token_type_ids))
        return self.dropout(self.layer_norm(x))  # (B, T, E)


class GDESEmbeddings(GDES, Embeddings):
    """The BERT body's embeddings under gradient-disentangled sharing (``GDES``)."""


class Encoder(nn.Module):
    """Embeddings (owned or shared), an optional E->H projection, and the blocks."""

    def __init__(self, cfg: ModelConfig, embeddings: Embeddings | None = None,
                 kernels: Kernels | None = None) -> None:
        super().__init__()
        self.config = cfg
        self.kernels = kernels or FAST_CPU
        self.embeddings = embeddings if embeddings is not None else Embeddings(cfg, kernels)
        E = self.embeddings.word_embeddings.embedding_dim
        # The projection exists exactly when transformers' ElectraModel has `embeddings_project`.
        self.embeddings_project = Linear(E, cfg.hidden_size) if cfg.hidden_size != E else None
        self.layers = nn.ModuleList(Block(cfg, kernels) for _ in range(cfg.num_layers))

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        first_only: bool = False,
        sequence_ids: torch.Tensor | None = None,
        layout: Layout | None = None,
    ) -> torch.Tensor:
        """Hidden states (B, T, H). ``attention_mask`` (B, T) is 1/True on real tokens; with
        unpadding kernels (``electra.model.kernels``) the padding's states are zeros.
        ``sequence_ids`` (B, T): packed rows, each token attending within its own sequence
        (``Kernels.layout``). ``layout``: the batch's, made once by the caller (else here).

        ``first_only``: the caller reads each row's first position alone ([CLS]), so the last
        block computes only that position after its fused Q/K/V projection (attention, the
        output projection and the feed-forward layers: most of a block, a twelfth of a 12-layer
        model's work): the states come back as (B, 1, H), or as
        (B, T, H) where a row's first position is padding under unpadding."""
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        return encode(self, input_ids, attention_mask, token_type_ids, first_only,
                      sequence_ids=sequence_ids, layout=layout)


def bert_macs_per_token(cfg: ModelConfig, seq_len: int) -> int:
    """Multiply-accumulates per token: each block's Q/K/V and output projections, its
    feed-forward layers, QK^T and AV over the row; the E -> H projection where E != H."""
    H, I, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_layers
    per_layer = 4 * H * H + 2 * H * I + 2 * seq_len * H  # QKV+out, FFN, QK^T and AV
    project = cfg.embedding_size * H if cfg.embedding_size != H else 0
    return L * per_layer + project
