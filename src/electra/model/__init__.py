"""The ELECTRA encoder family: embeddings, blocks, the generator and the discriminator.

Single-device and free of training machinery: autocast, compile and DDP/FSDP are applied from
outside (``electra.runtime``, ``electra.train.parallel``); the generator/discriminator
pair trained together is the objective's (``electra.objectives.pretraining``); the
fine-tuning heads (:class:`EncoderWithHead` subclasses) are the tasks' (``electra.tasks``).
Every forward takes transformers' argument order ``(input_ids, attention_mask,
token_type_ids)``. Parameters map one-to-one onto transformers' ``ElectraForMaskedLM``
(generator) and ``ElectraForPreTraining`` (discriminator); ``electra.saved.hf`` holds that key
table. Dropout and attention run through the kernels the model is built with
(``electra.model.kernels``).

Shapes: B batch, T sequence length, P predicted positions per sequence, E embedding size,
H hidden size, nh heads, hs head size (H / nh), V vocabulary size.
"""

from __future__ import annotations

import re

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


class Embeddings(nn.Module):
    """Word + position + token-type embeddings, LayerNorm, dropout. Shareable between models."""

    def __init__(self, cfg: ModelConfig, kernels: Kernels | None = None) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.embedding_size,
                                            padding_idx=cfg.pad_token_id)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.embedding_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.embedding_size)
        self.layer_norm = nn.LayerNorm(cfg.embedding_size, eps=cfg.layer_norm_eps)
        self.dropout = Dropout(cfg.hidden_dropout, kernels)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        T = input_ids.shape[1]
        x = (self.words(input_ids)
             + self.position_embeddings.weight[:T]  # (T, E), broadcast over B
             + self.token_type_embeddings(token_type_ids))
        return self.dropout(self.layer_norm(x))  # (B, T, E)

    def words(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.word_embeddings(input_ids)  # (B, T, E)

    def word_table(self) -> torch.Tensor:
        """The (V, E) token table this model reads (what a transformers export holds)."""
        return self.word_embeddings.weight


class GDESEmbeddings(Embeddings):
    """A discriminator's embeddings under gradient-disentangled sharing (DeBERTaV3, GDES):
    the token table it reads is stop-gradient(E) + E_Δ, where E is the generator's table
    (trained by the MLM loss alone) and E_Δ its own (zero at the start, trained by the
    discriminator's loss alone). Positions, token types and LayerNorm are its own."""

    def __init__(self, cfg: ModelConfig, shared: nn.Embedding,
                 kernels: Kernels | None = None) -> None:
        super().__init__(cfg, kernels)
        init_weights(self, cfg.initializer_range)  # its own parts; the shared table is not
        self.word_embeddings = shared  # the generator's module
        self.word_delta = nn.Parameter(torch.zeros_like(shared.weight))  # E_Δ

    def words(self, input_ids: torch.Tensor) -> torch.Tensor:
        E = self.word_embeddings
        return (F.embedding(input_ids, E.weight.detach(), E.padding_idx)
                + F.embedding(input_ids, self.word_delta, E.padding_idx))

    def word_table(self) -> torch.Tensor:
        return self.word_embeddings.weight.detach() + self.word_delta


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
        self.qkv = nn.Linear(H, 3 * H)
        self.attention_out = nn.Linear(H, H)
        self.attention_norm = nn.LayerNorm(H, eps=cfg.layer_norm_eps)
        self.ffn_in = nn.Linear(H, cfg.intermediate_size)
        self.ffn_out = nn.Linear(cfg.intermediate_size, H)
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
        super()._load_from_state_dict(state_dict, prefix, *args)  # type: ignore[arg-type]


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
        self.embeddings_project = nn.Linear(E, cfg.hidden_size) if cfg.hidden_size != E else None
        self.layers = nn.ModuleList(Block(cfg, kernels) for _ in range(cfg.num_layers))

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        first_only: bool = False,
    ) -> torch.Tensor:
        """Hidden states (B, T, H). ``attention_mask`` (B, T) is 1/True on real tokens; with
        unpadding kernels (``electra.model.kernels``) the padding's states are zeros.

        ``first_only``: the caller reads each row's first position alone ([CLS]), so the last
        block computes only that position after its fused Q/K/V projection (attention, the
        output projection and the feed-forward layers: most of a block, a twelfth of a 12-layer
        model's work): the states come back as (B, 1, H), or as
        (B, T, H) where a row's first position is padding under unpadding."""
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        layout = self.kernels.layout(attention_mask, input_ids.shape)
        first = first_only and len(self.layers) > 0 and layout.reads_first()
        x = layout.tokens(self.embeddings(input_ids, token_type_ids))
        if self.embeddings_project is not None:
            x = self.embeddings_project(x)
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x = layer(x, layout, first=first and i == last)
        if first:
            return x[:, None]  # (B, 1, H)
        return layout.repad(x)  # (B, T, H), zeros at padding when unpadded


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
            nn.init.zeros_(m.bias)


class EncoderWithHead(nn.Module):
    """An encoder and a head on its hidden states: the discriminator and every fine-tuning
    model. ``forward(input_ids, attention_mask, token_type_ids)`` is ``head(encoder(...))``.
    ``reads_first``: the head reads each row's first position ([CLS]) alone, and the encoder
    computes its last block for that position only (``Encoder.forward``'s ``first_only``)."""

    encoder: Encoder
    reads_first = False

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The head's output; ``attention_mask`` (B, T) is 1/True on real tokens."""
        return self.head(self.encoder(input_ids, attention_mask, token_type_ids,
                                      first_only=self.reads_first))

    def head(self, h: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class Discriminator(EncoderWithHead):
    """Encoder + dense -> GELU -> dense: one logit per token, > 0 meaning "replaced"."""

    def __init__(self, cfg: ModelConfig, embeddings: Embeddings | None = None,
                 kernels: Kernels | None = None) -> None:
        super().__init__()
        self.config = cfg
        self.encoder = Encoder(cfg, embeddings, kernels)
        self.head_dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.head_out = nn.Linear(cfg.hidden_size, 1)
        init_weights(self, cfg.initializer_range, skip=embeddings)

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """Hidden states (B, T, H) -> one logit per token (B, T)."""
        return self.head_out(F.gelu(self.head_dense(h))).squeeze(-1)


class Generator(nn.Module):
    """Encoder + dense -> GELU -> LayerNorm -> output layer tied to the word table (+ bias):
    a masked language model (ELECTRA's generator, or BERT when full size).

    Logits are computed only at the positions asked for, so the V-way head costs P, not T,
    rows per sequence. ``embeddings`` (shared embeddings) or ``encoder`` (a whole encoder,
    every weight shared) are used as they are, not re-initialised.
    """

    def __init__(self, cfg: ModelConfig, embeddings: Embeddings | None = None,
                 encoder: Encoder | None = None, kernels: Kernels | None = None) -> None:
        super().__init__()
        self.config = cfg
        self.encoder = encoder if encoder is not None else Encoder(cfg, embeddings, kernels)
        E = self.encoder.embeddings.word_embeddings.embedding_dim
        self.head_dense = nn.Linear(cfg.hidden_size, E)
        self.head_norm = nn.LayerNorm(E, eps=cfg.layer_norm_eps)
        self.output_bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        init_weights(self, cfg.initializer_range, skip=encoder or embeddings)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        padded: bool = False,
    ) -> torch.Tensor:
        """Logits (B, P, V) at ``positions`` (B, P), or (B, T, V) when ``positions`` is None;
        ``padded``: V padded as :meth:`logits` says."""
        return self.logits(self.encoder(input_ids, attention_mask, token_type_ids), positions,
                           padded)

    def logits(self, h: torch.Tensor, positions: torch.Tensor | None = None,
               padded: bool = False) -> torch.Tensor:
        """Hidden states (B, T, H) -> logits (B, P, V) at ``positions``, or (B, T, V).

        ``padded``: the table is padded with zero rows to a multiple of the kernels'
        ``vocab_multiple`` and the extra logits are -inf (what the objectives read: their
        softmax gives those 0, so no sample, loss or gradient comes from them)."""
        if positions is not None:
            h = torch.gather(h, 1, positions[..., None].expand(-1, -1, h.shape[-1]))  # (B, P, H)
        h = self.head_norm(F.gelu(self.head_dense(h)))  # (B, P, E)
        # Read the (possibly shared) word table at call time: the tie can never go stale.
        table, bias = self.encoder.embeddings.word_table(), self.output_bias
        pad = -table.shape[0] % self.encoder.kernels.vocab_multiple if padded else 0
        if pad:
            table = F.pad(table, (0, 0, 0, pad))
            bias = torch.cat([bias, bias.new_full((pad,), -torch.inf)])
        return F.linear(h, table, bias)


def count_parameters(module: nn.Module) -> int:
    """Trainable parameters, each shared tensor counted once."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)
