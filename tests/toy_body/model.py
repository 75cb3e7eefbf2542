"""The toy body's encoder: a token table -> RMSNorm; blocks x = x + Wo(attn(Wqkv(n(x)))),
x = x + W2(act(a) * g), [a, g] = W1(n(x)) (act: model.mlp_gate, the body's own setting);
a final RMSNorm. Its parts are model/layers.py's and torch's: it imports no other body."""

from __future__ import annotations

import torch
from torch import nn

from electra.config import ModelConfig
from electra.model.kernels import FAST_CPU, Kernels, Layout
from electra.model.layers import GDES, TokenTable, encode, glu


class ToyEmbeddings(TokenTable, nn.Module):
    def __init__(self, cfg: ModelConfig, kernels: Kernels | None = None) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.embedding_size,
                                            padding_idx=cfg.pad_token_id)
        self.norm = nn.RMSNorm(cfg.embedding_size, eps=cfg.layer_norm_eps)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor,
                positions: torch.Tensor | None = None) -> torch.Tensor:
        return self.norm(self.words(input_ids))


class ToyGDESEmbeddings(GDES, ToyEmbeddings):
    pass


class ToyBlock(nn.Module):
    compile_unit = True

    def __init__(self, cfg: ModelConfig, kernels: Kernels | None = None) -> None:
        super().__init__()
        self.kernels = kernels or FAST_CPU
        H, I = cfg.hidden_size, cfg.intermediate_size
        self.num_heads, self.gate = cfg.num_heads, cfg.mlp_gate  # its own setting
        self.attn_norm = nn.RMSNorm(H, eps=cfg.layer_norm_eps)
        self.qkv = nn.Linear(H, 3 * H, bias=False)
        self.attention_out = nn.Linear(H, H, bias=False)
        self.mlp_norm = nn.RMSNorm(H, eps=cfg.layer_norm_eps)
        self.mlp_in = nn.Linear(H, 2 * I, bias=False)
        self.mlp_out = nn.Linear(I, H, bias=False)

    def forward(self, x: torch.Tensor, layout: Layout, first: bool = False) -> torch.Tensor:
        qkv = self.qkv(self.attn_norm(x))
        if first:
            a = layout.attend_first(self.kernels, qkv, self.num_heads, 0.0, None)
            x = layout.first(x)
        else:
            a = layout.attend(self.kernels, qkv, self.num_heads, 0.0, None)
        x = x + self.attention_out(a)
        return x + self.mlp_out(glu(self.mlp_in(self.mlp_norm(x)), self.gate))


class ToyEncoder(nn.Module):
    def __init__(self, cfg: ModelConfig, embeddings: nn.Module | None = None,
                 kernels: Kernels | None = None) -> None:
        super().__init__()
        self.config = cfg
        self.kernels = kernels or FAST_CPU
        self.embeddings = embeddings if embeddings is not None else ToyEmbeddings(cfg, kernels)
        E = self.embeddings.word_embeddings.embedding_dim
        self.embeddings_project = (nn.Linear(E, cfg.hidden_size, bias=False)
                                   if cfg.hidden_size != E else None)
        self.layers = nn.ModuleList(ToyBlock(cfg, kernels) for _ in range(cfg.num_layers))
        self.final_norm = nn.RMSNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, first_only=False,
                sequence_ids=None, layout=None) -> torch.Tensor:
        return encode(self, input_ids, attention_mask, token_type_ids, first_only,
                      self.final_norm, sequence_ids, layout)


def toy_macs_per_token(cfg: ModelConfig, seq_len: int) -> int:
    H, I = cfg.hidden_size, cfg.intermediate_size
    return cfg.num_layers * (4 * H * H + 3 * H * I + 2 * seq_len * H)
