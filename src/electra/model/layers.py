"""What every body's modules share: dropout through the kernels, BERT's initialisation,
gradient-disentangled embedding sharing (GDES), the linear layer whose weights a training
step may cast once a micro-batch (``electra.train.cast``), and the parts bodies build from:
BERT's post-LN block (ELECTRA's, and DeBERTa's around its own attention) with its fused Q/K/V
and transformers' three tensors, rotary positions (RoPE: ModernBERT's), gated feed-forward
activations (GeGLU, SwiGLU); RMSNorm is torch's ``nn.RMSNorm``. No body imports another."""

from __future__ import annotations

import re
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from electra.config import ModelConfig
from electra.model.kernels import FAST_CPU, Kernels, Layout


class Dropout(nn.Module):
    """Dropout through the model's kernels (``electra.model.kernels``): on a CPU, masks cut
    from 16-bit lanes of random words (p rounds to a multiple of 1/65536); elsewhere torch's."""

    def __init__(self, p: float, kernels: Kernels | None = None) -> None:
        super().__init__()
        self.p = p
        self.kernels = kernels or FAST_CPU

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        return self.kernels.dropout(x, self.p)

    def extra_repr(self) -> str:
        return f"p={self.p}, {self.kernels.name}"


def init_weights(module: nn.Module, std: float, skip: nn.Module | None = None) -> None:
    """BERT's initialisation: N(0, std) weights, zero biases, unit LayerNorm, zero pad row.

    ``skip`` (a shared embeddings module handed in) is left as it is.
    """
    skipped = set(skip.modules()) if skip is not None else set()
    for m in module.modules():
        if m in skipped:
            continue
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=std)
            if m.padding_idx is not None:
                with torch.no_grad():
                    m.weight[m.padding_idx].zero_()
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            if m.bias is not None:  # ModernBERT's norms have none
                nn.init.zeros_(m.bias)


class TokenTable:
    """The token-table reads every body's embeddings module shares (``GDES`` overrides
    both): the (B, T, E) embeddings of ids, and the (V, E) table the model reads (what a
    transformers export holds)."""

    word_embeddings: nn.Embedding

    def words(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.word_embeddings(input_ids)

    def word_table(self) -> torch.Tensor:
        return self.word_embeddings.weight


class GDES:
    """A body's embeddings under gradient-disentangled sharing (DeBERTaV3, GDES), mixed in
    before the body's embeddings class: the token table the discriminator reads is
    stop-gradient(E) + E_Δ, where E is the generator's table (trained by the MLM loss alone)
    and E_Δ its own (zero at the start, trained by the discriminator's loss alone). The rest
    of the embeddings (positions, token types, norm) are its own."""

    word_embeddings: nn.Embedding

    def __init__(self, cfg: ModelConfig, shared: nn.Embedding,
                 kernels: Kernels | None = None) -> None:
        super().__init__(cfg, kernels)  # type: ignore[call-arg]
        init_weights(self, cfg.initializer_range)  # type: ignore[arg-type]  (its own parts)
        self.word_embeddings = shared  # the generator's module
        self.word_delta = nn.Parameter(torch.zeros_like(shared.weight))  # E_Δ

    def words(self, input_ids: torch.Tensor) -> torch.Tensor:
        E = self.word_embeddings
        return (F.embedding(input_ids, E.weight.detach(), E.padding_idx)
                + F.embedding(input_ids, self.word_delta, E.padding_idx))

    def word_table(self) -> Any:
        return self.word_embeddings.weight.detach() + self.word_delta


def encode(encoder: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
           token_type_ids: torch.Tensor | None, first_only: bool,
           end: nn.Module | None = None,
           sequence_ids: torch.Tensor | None = None,
           layout: Layout | None = None) -> torch.Tensor:
    """What every body's encoder runs: the kernels' layout of the batch (packed rows where
    ``sequence_ids`` are given: ``Kernels.layout``), the embeddings (at each token's
    position in its sequence; and their E -> H projection), the blocks (the last only at each
    row's first position under ``first_only``, where the layout allows it), ``end`` (a final
    norm), the repadding. Hidden states (B, T, H), zeros at padding when unpadded;
    (B, 1, H) under ``first_only``."""
    if layout is None:  # else the caller's, made once for the batch (electra_forward)
        layout = encoder.kernels.layout(attention_mask, input_ids.shape, sequence_ids)
    first = first_only and len(encoder.layers) > 0 and layout.reads_first()
    x = layout.tokens(encoder.embeddings(input_ids, token_type_ids, layout.row_positions()))
    if encoder.embeddings_project is not None:
        x = encoder.embeddings_project(x)
    last = len(encoder.layers) - 1
    for i, layer in enumerate(encoder.layers):
        x = layer(x, layout, first=first and i == last)
    if end is not None:
        x = end(x)
    if first:
        return x[:, None]  # (B, 1, H)
    return layout.repad(x)


class Linear(nn.Linear):
    """``nn.Linear`` that runs on the compute-dtype copies of its weights while a
    training step's ``CastOnce`` holds them (``cast``; ``electra.train.cast``), and as
    ``nn.Linear`` otherwise."""

    cast: tuple[torch.Tensor, torch.Tensor | None] | None = None
    castable = True  # False: the weight is read elsewhere too (kept on autocast's path)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.cast is None:
            return F.linear(x, self.weight, self.bias)
        w, b = self.cast
        if x.dtype != w.dtype:
            x = x.to(w.dtype)  # autocast's cast of the input
        if x.dim() == 2 or (x.dim() > 2 and x.is_contiguous()):
            return _Linear.apply(x, w, b)
        return F.linear(x, w, b)  # aten::linear's other path: matmul, then the bias


class _Linear(torch.autograd.Function):
    """x @ W^T + b, all in the compute dtype, x 2-D or contiguous (which ``aten::linear``
    folds to rows). Backward as autograd's addmm backward computes it (``mm_mat1_backward``,
    ``mm_mat2_backward``: W^T is column-major, so g^T @ x; the bias gradient a sum over
    rows)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor,  # type: ignore[override]
                b: torch.Tensor | None) -> torch.Tensor:
        rows = x if x.dim() == 2 else x.reshape(-1, x.shape[-1])
        ctx.save_for_backward(rows, w)
        ctx.shape, ctx.bias = x.shape, b is not None
        y = F.linear(rows, w, b)  # addmm(b, rows, w^T), or rows @ w^T
        return y if x.dim() == 2 else y.view(*x.shape[:-1], y.shape[-1])

    @staticmethod
    def backward(ctx, g: torch.Tensor):  # type: ignore[override]
        rows, w = ctx.saved_tensors
        if g.dim() != 2:
            g = g.reshape(-1, g.shape[-1])
        need_x, need_w, need_b = ctx.needs_input_grad
        gx = g.mm(w) if need_x else None
        if gx is not None and len(ctx.shape) != 2:
            gx = gx.view(ctx.shape)
        gw = g.t().mm(rows) if need_w else None
        gb = g.sum(0) if ctx.bias and need_b else None
        return gx, gw, gb


class Block(nn.Module):
    """Post-LN transformer block: x = LN(x + Attn(x)); x = LN(x + FFN(x)), as in BERT."""

    compile_unit = True  # what ``train.compile`` compiles (electra.train.trainer)

    def __init__(self, cfg: ModelConfig, kernels: Kernels | None = None) -> None:
        super().__init__()
        self.kernels = kernels = kernels or FAST_CPU
        H = cfg.hidden_size
        self.num_heads = cfg.num_heads
        self.attention_dropout = cfg.attention_dropout
        # Query, key and value as one (3H, H) parameter: one GEMM, one cast under autocast, one
        # gradient; transformers' three tensors on export and import (fuse_qkv, split_qkv).
        self.qkv = Linear(H, 3 * H)
        self.attention_out = Linear(H, H)
        self.attention_norm = nn.LayerNorm(H, eps=cfg.layer_norm_eps)
        self.ffn_in = Linear(H, cfg.intermediate_size)
        self.ffn_out = Linear(cfg.intermediate_size, H)
        self.ffn_norm = nn.LayerNorm(H, eps=cfg.layer_norm_eps)
        self.dropout = Dropout(cfg.hidden_dropout, kernels)
        self.probs_dropout = Dropout(cfg.attention_dropout, kernels)  # written attention

    def forward(self, x: torch.Tensor, layout: Layout, first: bool = False) -> torch.Tensor:
        """(B, T, H), or (N, H) under an unpadded layout, to the same shape; ``first``: only
        each row's first position after the fused Q/K/V projection, (B, H)."""
        qkv = self.qkv(x)
        p = self.attention_dropout if self.training else 0.0
        if first:
            a = layout.attend_first(self.kernels, qkv, self.num_heads, p, self.probs_dropout)
            x = layout.first(x)
        else:
            a = layout.attend(self.kernels, qkv, self.num_heads, p, self.probs_dropout)
        x = self.attention_norm(x + self.dropout(self.attention_out(a)))
        h = self.ffn_out(F.gelu(self.ffn_in(x)))
        return self.ffn_norm(x + self.dropout(h))

    def _load_from_state_dict(self, state_dict: dict[str, torch.Tensor], prefix: str,
                              *args: object) -> None:
        fuse_qkv(state_dict, prefix)  # weights written before QKV was one parameter
        super()._load_from_state_dict(state_dict, prefix, *args)


QKV = ("query", "key", "value")


def fuse_qkv(state: dict[str, torch.Tensor], prefix: str | None = None) -> None:
    """In place: every ``{prefix}query/key/value.{weight,bias}`` triple of ``state`` (separate
    tensors: transformers' layout, and this package's before 2026-12) becomes one
    ``{prefix}qkv.{weight,bias}``, rows in Q, K, V order; ``prefix`` None: every block's."""
    for key in list(state):
        m = re.fullmatch(r"(|.*\.)query\.(weight|bias)", key)
        if m is None or (prefix is not None and m[1] != prefix):
            continue
        names = [f"{m[1]}{n}.{m[2]}" for n in QKV]
        if all(n in state for n in names):
            state[f"{m[1]}qkv.{m[2]}"] = torch.cat([state.pop(n) for n in names])


def split_qkv(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` with every ``qkv.{weight,bias}`` as transformers' three tensors (copies, in
    the key's place): the inverse of :func:`fuse_qkv`, bitwise."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        m = re.fullmatch(r"(|.*\.)qkv\.(weight|bias)", key)
        if m is None:
            out[key] = value
        else:
            out.update({f"{m[1]}{n}.{m[2]}": t.clone() for n, t in
                        zip(QKV, value.chunk(3), strict=True)})
    return out


def rotate(qkv: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor,
           num_heads: int) -> torch.Tensor:
    """RoPE on the query and key thirds of fused projections (..., 3H), each token at its
    ``positions`` (the leading dims, or broadcast to them): q·cos + rotate_half(q)·sin in
    fp32, cast back, as transformers computes it."""
    lead, three_h = qkv.shape[:-1], qkv.shape[-1]
    parts = qkv.view(*lead, 3, num_heads, three_h // 3 // num_heads)
    freqs = positions[..., None].float() * inv_freq  # (..., hs/2)
    angles = torch.cat((freqs, freqs), -1)[..., None, :]  # (..., 1, hs)
    cos, sin = angles.cos(), angles.sin()

    def turn(x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        half = x32.shape[-1] // 2
        return (x32 * cos + torch.cat((-x32[..., half:], x32[..., :half]), -1) * sin
                ).to(qkv.dtype)

    q, k, v = parts.unbind(-3)
    return torch.stack((turn(q), turn(k), v), -3).view(*lead, three_h)


def glu(h: torch.Tensor, act: str = "silu") -> torch.Tensor:
    """A gated feed-forward layer's activation: the input's first half through ``act``
    (``silu``: SwiGLU, NeoBERT's and Llama's; ``gelu``: GeGLU, ModernBERT's) times its
    second half."""
    up, gate = h.chunk(2, -1)
    return (F.silu(up) if act == "silu" else F.gelu(up)) * gate
