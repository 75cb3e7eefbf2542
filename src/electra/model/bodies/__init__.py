"""Every body by name (``model.body``): what builds its encoder, its embeddings under GDES,
its block, its MACs and whether its heads carry biases. The generator, the discriminator, every
task head, the objectives and the FLOP count build through :func:`encoder_for` and the
body's entry, and never ask which body they hold. Adding a body is a module in
``electra/model/`` and one line here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from electra.errors import UserError
from electra.model.bert import (
    Block,
    Encoder,
    GDESEmbeddings,
    bert_macs_per_token,
)
from electra.model.deberta import (
    DebertaBlock,
    DebertaEncoder,
    DebertaGDESEmbeddings,
    deberta_macs_per_token,
)
from electra.model.modernbert import (
    ModernBlock,
    ModernEncoder,
    ModernGDESEmbeddings,
    ModernHead,
    modern_length_error,
    modern_macs_per_token,
)
from electra.registry import Registry


@dataclass(frozen=True)
class Body:
    """One body: ``encoder(cfg, embeddings, kernels)`` (its own embeddings when None),
    ``gdes(cfg, shared_table, kernels)``, its block class (the unit FSDP shards and
    ``train.compile`` compiles), its multiply-accumulates per token of a sequence (what the
    FLOP count adds up), ``bias``: whether the heads' dense layers and norms carry biases
    (BERT's do, ModernBERT's do not), ``length_error(cfg, seq_len)``: why rows of that
    length do not suit the body's settings (None: they do), and ``task_head``: the module a
    fine-tuning head applies before its classifier (ModernBERT's dense -> GELU -> norm, as
    its ``ModernBertFor*`` classes; None: each head its own, as ELECTRA's classes),
    ``packed_rows``: whether it reads rows of several sequences (``prepare --pack``),
    ``rtd_context``: whether the discriminator's head first norms each state plus its row's
    [CLS] state (DeBERTa's replaced-token head; ELECTRA's reads the state alone)."""

    name: str
    encoder: Callable[..., nn.Module]
    gdes: Callable[..., nn.Module]
    block: type[nn.Module]
    macs_per_token: Callable[[Any, int], int]
    bias: bool = True
    length_error: Callable[[Any, int], str | None] = lambda cfg, seq_len: None
    task_head: Callable[[Any], nn.Module] | None = None
    packed_rows: bool = True  # whether it keeps the sequences of a packed row apart
    rtd_context: bool = False


BODIES: Registry[Body] = Registry("body")
for _body in (
    # BERT's (ELECTRA's): absolute positions, post-LN, GELU, full attention
    Body("bert", Encoder, GDESEmbeddings, Block, bert_macs_per_token),
    # ModernBERT's: RoPE, pre-LN without biases, GeGLU, global and local attention
    Body("modernbert", ModernEncoder, ModernGDESEmbeddings, ModernBlock, modern_macs_per_token,
         bias=False, length_error=modern_length_error, task_head=ModernHead),
    # DeBERTa's (V3's settings): disentangled attention over log-bucketed relative positions
    Body("deberta", DebertaEncoder, DebertaGDESEmbeddings, DebertaBlock,
         deberta_macs_per_token, packed_rows=False, rtd_context=True),
):
    BODIES.add(_body.name, _body)


def body_of(cfg: Any) -> Body:
    """The body ``cfg.body`` names; an unknown one is a UserError naming the choices."""
    if cfg.body not in BODIES:
        raise UserError(f"model.body={cfg.body!r} is not a body; choose one of "
                        f"{', '.join(BODIES)}")
    return BODIES[cfg.body]


def encoder_for(cfg: Any, embeddings: nn.Module | None = None,
                kernels: Any = None) -> nn.Module:
    """The encoder of ``cfg``'s body, with ``embeddings`` (shared) or its own."""
    return body_of(cfg).encoder(cfg, embeddings, kernels)


def blocks() -> tuple[type[nn.Module], ...]:
    """Every body's block class."""
    return tuple(b.block for b in BODIES.values())


def task_transform(cfg: Any) -> nn.Module | None:
    """The body's module before a fine-tuning head's classifier (``Body.task_head``), or
    None where each head keeps its own (the BERT body: ELECTRA's heads)."""
    make = body_of(cfg).task_head
    return None if make is None else make(cfg)
