"""The modules an objective trains together, and its one forward (what DDP/FSDP wrap).

:class:`ElectraPretrainingModel` holds the parts its objective needs (the discriminator
always; the generator; a full-size MLM head on the discriminator's encoder) and how the
generator shares weights (``sharing``: the embeddings, none, all, or DeBERTaV3's
gradient-disentangled sharing). Its forward is :func:`electra_forward`: masking, then the
objective's own forward (``electra.objectives.registry``), so that DDP and FSDP wrappers see
the whole objective as one module call.

Nothing here calls ``.item()``: no host-device sync inside a step. Randomness comes from an
explicit ``torch.Generator`` so that masking and sampling are reproducible and resumable.
"""

from __future__ import annotations

import torch
from torch import nn

from electra.config import ModelConfig
from electra.data.tokenizer import SpecialTokens
from electra.model import Discriminator, GDESEmbeddings, Generator
from electra.model.kernels import Kernels
from electra.objectives.base import ElectraOutput, Step
from electra.objectives.config import ObjectiveConfig, sharing_of
from electra.objectives.losses import pair
from electra.objectives.masking import Noise, Norm, mask_inputs
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
                    disc.encoder.embeddings = GDESEmbeddings(
                        cfg, self.generator.encoder.embeddings.word_embeddings, kernels)
        if method.main_mlm:
            self.main_mlm = Generator(cfg.replace(generator_size=1.0), encoder=disc.encoder)
        if not method.detects:  # kept for the exported format, not trained
            for p in (*disc.head_dense.parameters(), *disc.head_out.parameters()):
                p.requires_grad_(False)
        self.register_buffer("unigram", torch.zeros(0), persistent=False)

    def set_unigram(self, counts: torch.Tensor) -> None:
        """Token frequencies for objective random with replacement = "unigram"."""
        self.unigram = counts.to(torch.float64)

    def start_stage_2(self) -> None:
        """Two-stage training: the discriminator's encoder takes the generator's weights."""
        assert self.generator is not None
        self.discriminator.encoder.load_state_dict(self.generator.encoder.state_dict())

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None, noise: Noise | None = None,
                norm: Norm | None = None, rng: torch.Generator | None = None,
                word_starts: torch.Tensor | None = None, temperature: float | None = None,
                stage: int | None = None, pad_free: bool = False) -> ElectraOutput:
        """The whole objective on a batch (:func:`electra_forward`); ``pad_free``: the
        caller knows no row has padding (the encoders then attend without a mask)."""
        if self.special is None:
            raise ValueError("ElectraPretrainingModel needs the special-token ids to train: "
                             "build it with special=SpecialTokens(...)")
        return electra_forward(self, input_ids, attention_mask, token_type_ids, self.special,
                               self.objective, rng, noise, norm, word_starts, temperature,
                               stage, pad_free)

    def parts(self) -> dict[str, nn.Module]:
        """The modules a finished run keeps as RUN/discriminator and RUN/generator: the
        discriminator as a plain one (under GDES its token table is E + E_Δ); the generator,
        or for objective mlm the full-size MLM model."""
        out: dict[str, nn.Module] = {"discriminator": self._plain_discriminator()}
        generator = self.method.exported_generator(self)
        if generator is not None:
            out["generator"] = generator
        return out

    def _plain_discriminator(self) -> nn.Module:
        disc = self.discriminator
        if not isinstance(disc.encoder.embeddings, GDESEmbeddings):
            return disc
        plain = Discriminator(self.config)
        state = {k: v for k, v in disc.state_dict().items() if not k.endswith("word_delta")}
        state["encoder.embeddings.word_embeddings.weight"] = (
            disc.encoder.embeddings.word_table().detach().clone())
        plain.load_state_dict(state)
        return plain


def electra_forward(
    model: ElectraPretrainingModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    token_type_ids: torch.Tensor | None,
    special: SpecialTokens,
    cfg: ObjectiveConfig,
    rng: torch.Generator | None = None,
    noise: Noise | None = None,
    norm: Norm | None = None,
    word_starts: torch.Tensor | None = None,
    temperature: float | None = None,
    stage: int | None = None,
    pad_free: bool = False,
) -> ElectraOutput:
    """One pass of the objective ``cfg.kind``: masking, then the objective's own forward.

    ``noise``: the batch's random draws (else drawn here from ``rng``, which Gumbel sampling
    always uses), with the positions chosen or not. ``norm``: the global batch's loss
    denominators (else this batch's own). ``temperature``: the sampling temperature now
    (else cfg.temperature). ``stage``: 1 or 2 of two-stage training (generator alone;
    discriminator with the generator frozen). ``pad_free``: no row has padding, known on the
    host (the encoders attend without a mask; the masking still reads ``attention_mask``).
    """
    if cfg.kind != model.objective.kind:
        raise ValueError(f"this model was built for objective {model.objective.kind!r}, not "
                         f"{cfg.kind!r}")
    vocab = model.config.vocab_size
    if noise is None:
        noise = Noise.draw(*input_ids.shape, vocab, cfg, rng, input_ids.device)
    masked = mask_inputs(input_ids, attention_mask, special, vocab, cfg, noise=noise,
                         word_starts=word_starts)
    step = Step(input_ids, attention_mask, token_type_ids, masked, noise, cfg, norm, rng,
                cfg.temperature if temperature is None else temperature, stage,
                counts={"masked_frac": pair(masked.weights.sum(), attention_mask.sum())},
                pad_free=pad_free)
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
