"""The modules an objective trains together, and its one forward (what DDP/FSDP wrap).

:class:`ElectraPretrainingModel` holds the parts its objective needs (the discriminator
always; the generator; a full-size MLM head on the discriminator's encoder) and how the
generator shares weights (``sharing``: the embeddings, none, all, or DeBERTaV3's
gradient-disentangled sharing). Its forward is :func:`electra_forward` over a ``Batch`` and
the step's ``Draws``: masking, then the objective's own forward
(``electra.objectives.registry``), so that DDP and FSDP wrappers see the whole objective as
one module call.

Nothing here calls ``.item()``: no host-device sync inside a step. Randomness comes from an
explicit ``torch.Generator`` so that masking and sampling are reproducible and resumable.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from electra.config import ModelConfig
from electra.data.tokenizer import SpecialTokens
from electra.model import GDES, Discriminator, Generator, body_of
from electra.model.kernels import Kernels
from electra.objectives.base import ElectraOutput, Step
from electra.objectives.config import ObjectiveConfig, sharing_of
from electra.objectives.losses import pair
from electra.objectives.masking import Batch, Draws, Noise, mask_inputs
from electra.objectives.registry import OBJECTIVES


class ElectraPretrainingModel(nn.Module):
    """The modules a pretraining objective trains together, built from its configs.

    ``discriminator`` always (its RTD head trains for the objectives that detect: the copy
    gate of all_tokens_mlm is that head); ``generator`` for the objectives with one, sharing
    with the discriminator what ``sharing`` says; ``main_mlm``, a full-size MLM head on the
    discriminator's encoder (the same encoder module), for mlm, replace_mlm, all_tokens_mlm.
    ``method``: the objective (``electra.objectives.registry``) whose forward this runs.
    """

    def __init__(self, cfg: ModelConfig, objective: ObjectiveConfig | None = None,
                 special: SpecialTokens | None = None, kernels: Kernels | None = None) -> None:
        super().__init__()
        self.config = cfg
        self.objective = objective = objective or ObjectiveConfig()
        self.special = special
        self.sharing = sharing_of(cfg, objective)
        self.method = method = OBJECTIVES[objective.kind]
        self.discriminator = Discriminator(cfg, kernels=kernels)
        self.generator: Generator | None = None
        self.main_mlm: Generator | None = None
        disc = self.discriminator
        if method.generator:
            gen_cfg = cfg.generator_config()
            if self.sharing == "embeddings":
                self.generator = Generator(gen_cfg, disc.encoder.embeddings, kernels=kernels)
            elif self.sharing == "all":  # the same size: every encoder weight tied
                self.generator = Generator(gen_cfg, encoder=disc.encoder)
            else:
                self.generator = Generator(gen_cfg, kernels=kernels)
                if self.sharing == "gdes":
                    disc.encoder.embeddings = body_of(cfg).gdes(
                        cfg, self.generator.encoder.embeddings.word_embeddings, kernels)
        if method.main_mlm:
            self.main_mlm = Generator(cfg.replace(generator_size=1.0), encoder=disc.encoder)
        if not method.detects:  # kept for the exported format, not trained
            for name, p in disc.named_parameters():
                if name.startswith("head_"):
                    p.requires_grad_(False)
        self.register_buffer("unigram", torch.zeros(0), persistent=False)
        # objective fast_electra: an existing masked LM, frozen, outside the module tree (no
        # optimizer state, no checkpoint bytes, no DDP/FSDP wrapping); it moves with the model
        self.__dict__["frozen"] = None

    @property
    def sampler(self) -> nn.Module:
        """The masked LM whose samples replace the chosen tokens: the generator, or the
        frozen one attached (objective fast_electra)."""
        sampler = self.generator if self.generator is not None else self.__dict__["frozen"]
        if sampler is None:
            raise ValueError(f"objective {self.objective.kind!r} samples from a frozen "
                             f"generator: attach one with attach_generator()")
        return sampler

    def attach_generator(self, generator: nn.Module) -> None:
        """Objective fast_electra: sample from ``generator``, frozen (no gradient, eval mode,
        kept out of the parameters, state dict and wrappers: a checkpoint holds none of it;
        a resumed run attaches it again from objective.generator)."""
        if not self.method.frozen_generator:
            raise ValueError(f"objective {self.objective.kind!r} trains its own generator")
        generator.requires_grad_(False)
        generator.eval()
        self.__dict__["frozen"] = generator

    def _apply(self, fn: Any, recurse: bool = True) -> ElectraPretrainingModel:
        # .to(device) and friends move the frozen generator too (not a child module)
        frozen = self.__dict__.get("frozen")
        if frozen is not None:
            frozen._apply(fn, recurse)
        return super()._apply(fn, recurse)

    def set_unigram(self, counts: torch.Tensor) -> None:
        """Token frequencies for objective random with replacement = "unigram"."""
        self.unigram = counts.to(torch.float64)

    def start_stage_2(self) -> None:
        """Two-stage training: the discriminator's encoder takes the generator's weights."""
        assert self.generator is not None
        self.discriminator.encoder.load_state_dict(self.generator.encoder.state_dict())

    def forward(self, batch: Batch, draws: Draws | None = None) -> ElectraOutput:
        """The whole objective on ``batch`` with the step's ``draws``
        (:func:`electra_forward`, which refuses a model built without special-token ids)."""
        return electra_forward(self, batch, draws)

    def parts(self) -> dict[str, nn.Module]:
        """The modules a finished run keeps as RUN/discriminator and RUN/generator: the
        discriminator as a plain one (under GDES its token table is E + E_Δ); the generator,
        or for objective mlm the full-size MLM model."""
        out: dict[str, nn.Module] = {"discriminator": self._plain_discriminator()}
        generator = self.method.exported_generator(self)
        if generator is not None:
            out["generator"] = generator
        return out

    def start_from(self, disc: nn.Module, gen: nn.Module | None) -> None:
        """Take the weights of a plain discriminator and generator (:meth:`parts`' layout;
        ``gen`` None: keep the fresh one), generator first: with shared embeddings the
        discriminator's table wins; under GDES its E_Δ is its table less the generator's, so
        it reads its own table (to rounding)."""
        if gen is not None:
            self.generator.load_state_dict(gen.state_dict())  # type: ignore[union-attr]
        state = dict(disc.state_dict())
        embeddings = self.discriminator.encoder.embeddings
        if isinstance(embeddings, GDES):
            table = state.pop("encoder.embeddings.word_embeddings.weight")
            state["encoder.embeddings.word_delta"] = table - embeddings.word_embeddings.weight
            state["encoder.embeddings.word_embeddings.weight"] = (
                embeddings.word_embeddings.weight.detach())
        self.discriminator.load_state_dict(state)

    def _plain_discriminator(self) -> nn.Module:
        disc = self.discriminator
        if not isinstance(disc.encoder.embeddings, GDES):
            return disc
        plain = Discriminator(self.config)
        state = {k: v for k, v in disc.state_dict().items() if not k.endswith("word_delta")}
        state["encoder.embeddings.word_embeddings.weight"] = (
            disc.encoder.embeddings.word_table().detach().clone())
        plain.load_state_dict(state)
        return plain


def electra_forward(model: ElectraPretrainingModel, batch: Batch, draws: Draws | None = None,
                   special: SpecialTokens | None = None,
                   cfg: ObjectiveConfig | None = None) -> ElectraOutput:
    """One pass of the objective: masking, then the objective's own forward.

    ``draws`` (:class:`Draws`): the batch's random draws (else drawn here from its ``rng``,
    which Gumbel sampling always uses), with the positions chosen or not; the global batch's
    loss denominators (else this batch's own); the sampling temperature now (else
    ``cfg.temperature``); the stage of two-stage training. ``special`` and ``cfg``: the
    model's unless given (``cfg`` of the model's kind). Where ``batch.pad_free`` the encoders
    attend without a mask; the masking still reads ``attention_mask``.
    """
    special = model.special if special is None else special
    cfg = model.objective if cfg is None else cfg
    draws = Draws() if draws is None else draws
    if cfg.kind != model.objective.kind:
        raise ValueError(f"this model was built for objective {model.objective.kind!r}, not "
                         f"{cfg.kind!r}")
    if special is None:
        raise ValueError("electra_forward needs the special-token ids: build the model with "
                         "special=SpecialTokens(...) or pass special=")
    ids, mask = batch.input_ids, batch.attention_mask
    noise = draws.noise
    if noise is None:
        noise = Noise.draw(*ids.shape, model.config.vocab_size, cfg, draws.rng, ids.device)
    masked = mask_inputs(ids, mask, special, model.config.vocab_size, cfg, noise=noise,
                         word_starts=batch.word_starts)
    layout = None
    if batch.host is not None:  # the layout the rows' host tensors gave: made once, no sync
        layout = model.discriminator.encoder.kernels.layout(
            None if batch.pad_free else mask, ids.shape, batch.sequence_ids, batch.host)
    step = Step(batch, masked, noise, cfg, draws.norm, draws.rng,
                cfg.temperature if draws.temperature is None else draws.temperature,
                draws.stage, counts={"masked_frac": pair(masked.weights.sum(), mask.sum())},
                layout=layout)
    return model.method.forward(model, step)


def stage_at(cfg: ObjectiveConfig, step: int) -> int | None:
    """Two-stage training: 1 (generator alone) before two_stage_steps, then 2; else None."""
    if not cfg.two_stage_steps:
        return None
    return 1 if step < cfg.two_stage_steps else 2


def begin_step(model: ElectraPretrainingModel, cfg: ObjectiveConfig, step: int) -> int | None:
    """The stage of training step ``step`` (:func:`stage_at`); at the first step of stage 2
    the discriminator's encoder takes the generator's weights."""
    stage = stage_at(cfg, step)
    if stage == 2 and step == cfg.two_stage_steps:
        model.start_stage_2()
    return stage
