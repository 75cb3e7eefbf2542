"""The ELECTRA encoder family: the bodies, the generator and the discriminator.

Single-device and free of training machinery: autocast, compile and DDP/FSDP are applied from
outside (``electra.runtime``, ``electra.train.parallel``); the generator/discriminator
pair trained together is the objective's (``electra.objectives.pretraining``); the
fine-tuning heads (:class:`EncoderWithHead` subclasses) are the tasks' (``electra.tasks``).
Every forward takes transformers' argument order ``(input_ids, attention_mask,
token_type_ids)``. The body (``model.body``: ``bert``, ELECTRA's; ``modernbert``;
``deberta``) comes from the registry in ``bodies/``, each body one folder (its model, its
transformers format, its recipes). The BERT body's parameters map one-to-one onto
transformers' ``ElectraForMaskedLM`` (generator) and ``ElectraForPreTraining``
(discriminator); ``bodies/bert/hf.py`` holds that key table. Dropout
and attention run through the kernels the model is built with (``electra.model.kernels``).

Shapes: B batch, T sequence length, P predicted positions per sequence, E embedding size,
H hidden size, nh heads, hs head size (H / nh), V vocabulary size.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from electra.config import ModelConfig
from electra.model.bodies import BODIES, Body, blocks, body_of, encoder_for, task_transform
from electra.model.bodies.bert.model import Embeddings, Encoder, GDESEmbeddings
from electra.model.kernels import Kernels, Layout
from electra.model.layers import (
    GDES,
    QKV,
    Block,
    Dropout,
    Linear,
    fuse_qkv,
    init_weights,
    split_qkv,
)

__all__ = ["BODIES", "GDES", "QKV", "Block", "Body", "Discriminator", "Dropout", "Embeddings",
           "Encoder", "EncoderWithHead", "GDESEmbeddings", "Generator", "blocks", "body_of",
           "count_parameters", "encoder_for", "fuse_qkv", "init_weights", "split_qkv",
           "task_transform"]


class EncoderWithHead(nn.Module):
    """An encoder and a head on its hidden states: the discriminator and every fine-tuning
    model. ``forward(input_ids, attention_mask, token_type_ids)`` is ``head(encoder(...))``.
    ``reads_first``: the head reads each row's first position ([CLS]) alone, and the encoder
    computes its last block for that position only (``Encoder.forward``'s ``first_only``)."""

    encoder: nn.Module  # a body's encoder (electra.model.bodies)
    reads_first = False

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        sequence_ids: torch.Tensor | None = None,
        layout: Layout | None = None,
    ) -> torch.Tensor:
        """The head's output; ``attention_mask`` (B, T) is 1/True on real tokens;
        ``sequence_ids`` (B, T): packed rows; ``layout``: the batch's (the encoder's)."""
        return self.head(self.encoder(input_ids, attention_mask, token_type_ids,
                                      first_only=self.reads_first,
                                      sequence_ids=sequence_ids, layout=layout))

    def head(self, h: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def build_head(self, cfg: ModelConfig, outputs: int, kernels: Kernels | None,
                   dense: bool = False, dropout: bool = True) -> None:
        """A task head's parts, in this order (the initial weights follow it): the encoder,
        the body's task transform (ModernBERT's; None for ELECTRA's), a dense layer where the
        head has one and the body no transform (``dense``), dropout, the output layer of
        ``outputs``; then every weight initialised."""
        self.config = cfg
        self.encoder = encoder_for(cfg, kernels=kernels)
        self.transform = task_transform(cfg)
        if dense and self.transform is None:
            self.head_dense = Linear(cfg.hidden_size, cfg.hidden_size)
        if dropout:
            self.head_dropout = nn.Dropout(cfg.hidden_dropout)
        self.head_out = Linear(cfg.hidden_size, outputs)
        init_weights(self, cfg.initializer_range)


class Discriminator(EncoderWithHead):
    """Encoder + dense -> GELU -> dense: one logit per token, > 0 meaning "replaced". A body
    with ``Body.rtd_context`` (DeBERTa's) first norms each state plus its row's first
    ([CLS]) state, as microsoft/DeBERTa's replaced-token head."""

    def __init__(self, cfg: ModelConfig, embeddings: nn.Module | None = None,
                 kernels: Kernels | None = None) -> None:
        super().__init__()
        self.config = cfg
        body = body_of(cfg)
        self.encoder = encoder_for(cfg, embeddings, kernels)
        self.head_dense = Linear(cfg.hidden_size, cfg.hidden_size, bias=body.bias)
        self.head_out = Linear(cfg.hidden_size, 1)
        self.head_norm = (nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
                          if body.rtd_context else None)
        init_weights(self, cfg.initializer_range, skip=embeddings)

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """Hidden states (B, T, H) -> one logit per token (B, T)."""
        if self.head_norm is not None:
            h = self.head_norm(h + h[:, :1])
        return self.head_out(F.gelu(self.head_dense(h))).squeeze(-1)


class Generator(nn.Module):
    """Encoder + dense -> GELU -> LayerNorm -> output layer tied to the word table (+ bias):
    a masked language model (ELECTRA's generator, or BERT when full size).

    Logits are computed only at the positions asked for, so the V-way head costs P, not T,
    rows per sequence. ``embeddings`` (shared embeddings) or ``encoder`` (a whole encoder,
    every weight shared) are used as they are, not re-initialised.
    """

    def __init__(self, cfg: ModelConfig, embeddings: nn.Module | None = None,
                 encoder: nn.Module | None = None, kernels: Kernels | None = None) -> None:
        super().__init__()
        self.config = cfg
        self.encoder = encoder if encoder is not None else encoder_for(cfg, embeddings,
                                                                         kernels)
        E = self.encoder.embeddings.word_embeddings.embedding_dim
        bias = body_of(cfg).bias
        self.head_dense = Linear(cfg.hidden_size, E, bias=bias)
        self.head_norm = nn.LayerNorm(E, eps=cfg.layer_norm_eps, bias=bias)
        self.output_bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        init_weights(self, cfg.initializer_range, skip=encoder or embeddings)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        padded: bool = False,
        sequence_ids: torch.Tensor | None = None,
        layout: Layout | None = None,
    ) -> torch.Tensor:
        """Logits (B, P, V) at ``positions`` (B, P), or (B, T, V) when ``positions`` is None;
        ``padded``: V padded as :meth:`logits` says; ``sequence_ids``: packed rows;
        ``layout``: the batch's (the encoder's)."""
        return self.logits(self.encoder(input_ids, attention_mask, token_type_ids,
                                        sequence_ids=sequence_ids, layout=layout),
                           positions, padded)

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
