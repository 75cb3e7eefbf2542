"""A pretraining run's configuration: the objective (``[objective]``) and the run
(``RunConfig``: model, objective, loop), read from a preset or a TOML file with ``--set``
overrides, validated on construction. Here, beside the objectives, because an objective's
settings are checked against its traits (``objective.kind`` names a registered objective,
whose defaults fill what is unset); the sections that know no objective (``ModelConfig``,
``TrainConfig``, ``FinetuneConfig``) and the machinery are ``electra.config``. No torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

from electra.config import (
    ModelConfig,
    TrainConfig,
    _check,
    _check_ranges,
    _check_types,
    closest,
    config_from_dict,
    config_keys,
    did_you_mean,
    name_in,
    parse_set,
)
from electra.errors import UserError
from electra.io.files import read_json, read_toml

SHARINGS = ("embeddings", "none", "all", "gdes")
UNITS = ("token", "word", "span")


@dataclass(frozen=True)
class ObjectiveConfig:
    """The pretraining objective: ELECTRA's replaced-token detection (paper, section 2) and
    the paper's baselines and ablations (section 3.2), chosen with ``kind``."""

    SECTION: ClassVar[str] = "objective"
    RANGES: ClassVar[dict[str, str | tuple[str, ...]]] = {
        "mask_prob": "(0, 1)", "max_predictions": ">= 1", "mask_token_prob": "[0, 1]",
        "random_token_prob": "[0, 1]", "replacement": ("uniform", "unigram"),
        "disc_weight": ">= 0", "temperature": "> 0", "temperature_end": "> 0",
        "temperature_steps": ">= 0", "sampling": ("inverse_cdf", "gumbel"),
        "sharing": SHARINGS, "unit": UNITS, "span_mean": ">= 1", "two_stage_steps": ">= 0"}
    kind: str = "electra"
    """electra: generator + discriminator (the paper's method). mlm: BERT's masked LM on a
    discriminator-sized model (the BERT baseline). random: no generator, chosen positions get
    random tokens and the discriminator finds them. electra15: ELECTRA with the discriminator
    loss on the chosen positions only. replace_mlm: chosen positions get generator samples
    instead of [MASK] and the model predicts the originals there. all_tokens_mlm: replace_mlm
    predicting every token, with a copy probability (the paper's All-Tokens MLM)."""
    mask_prob: float = 0.15
    """Fraction of candidate tokens chosen per sequence (the budget, counted in tokens)."""
    max_predictions: int | None = None
    """Most positions chosen per sequence; unset: int((mask_prob + 0.005) * seq_len), the
    original's rule (19 at 128 tokens, 79 at 512)."""
    mask_token_prob: float | None = None
    """Of the chosen positions, the fraction replaced by [MASK] in the (generator's) input;
    unset: 0.85 (ELECTRA), 0.8 for kind mlm (BERT)."""
    random_token_prob: float | None = None
    """Of the chosen positions, the fraction replaced by a random token; unset: 0, 0.1 for
    kind mlm (BERT)."""
    replacement: str = "uniform"
    """kind random: replacement tokens drawn uniformly from the vocabulary, or "unigram" (by
    their frequency in the training data)."""
    disc_weight: float = 50.0
    """λ in L = L_MLM + λ·L_disc."""
    temperature: float = 1.0
    """Sampling temperature: replacements are drawn from softmax(logits / temperature)."""
    temperature_end: float | None = None
    """With temperature_steps: the temperature goes linearly from ``temperature`` to this over
    the first temperature_steps steps (e.g. 3 -> 1); validation samples at this one."""
    temperature_steps: int = 0
    """Steps of the temperature schedule (0: a constant temperature)."""
    sampling: str = "inverse_cdf"
    """How replacements are drawn: "inverse_cdf" or "gumbel" (Gumbel-max); same distribution,
    inverse_cdf is ~4x cheaper (see objective.sample)."""
    sharing: str = "embeddings"
    """What the generator shares with the discriminator: "embeddings" (the paper's default),
    "none", "all" (every weight tied; the generator must be the same size), or "gdes"
    (DeBERTaV3: the discriminator reads stop-gradient(E) + E_Δ, E_Δ its own)."""
    unit: str = "token"
    """What is chosen: single tokens, whole "word"s (every piece of a word), or "span"s of
    whole words (SpanBERT, geometric lengths); the budget is always counted in tokens."""
    span_mean: float = 3.0
    """unit span: mean span length in words."""
    two_stage_steps: int = 0
    """> 0: the paper's two-stage training: the generator alone for this many steps, then the
    discriminator, initialised from it, with the generator frozen (same size, no sharing)."""

    def __post_init__(self) -> None:
        # The objectives' registry (here, not at the top: reading a config, as the CLI's
        # --help does, needs no torch; same package).
        from electra.objectives.registry import OBJECTIVES

        _check_types(self)
        _check(self.kind in OBJECTIVES,
               f"objective.kind must be one of {', '.join(OBJECTIVES)}, got {self.kind!r}")
        method = OBJECTIVES[self.kind]
        for name in ("mask_token_prob", "random_token_prob"):  # unset: the objective's own
            if getattr(self, name) is None:
                object.__setattr__(self, name, getattr(method, name))
        _check(self.max_predictions is None or (isinstance(self.max_predictions, int)
                                                 and self.max_predictions >= 1),
               f"objective.max_predictions must be a positive integer, got "
               f"{self.max_predictions!r} (or leave it unset: int((mask_prob + 0.005) * seq_len))")
        m, r = self.mask_token_prob, self.random_token_prob
        _check(0.0 <= m <= 1.0 and 0.0 <= r <= 1.0 and m + r <= 1.0 + 1e-9,  # type: ignore[operator]
               f"objective.mask_token_prob={m} and objective.random_token_prob={r} must be in "
               f"[0, 1] and sum to at most 1 (the rest keep the original token); BERT uses "
               f"0.8 and 0.1")
        _check(self.replacement in ("uniform", "unigram"),
               f"objective.replacement must be uniform or unigram, got {self.replacement!r}")
        _check(self.disc_weight >= 0.0,
               f"objective.disc_weight (λ) must be >= 0, got {self.disc_weight!r}; "
               f"the paper uses 50")
        _check(self.span_mean >= 1.0,
               f"objective.span_mean must be >= 1 (words), got {self.span_mean!r}")
        _check_ranges(self)
        _check((self.temperature_steps > 0) == (self.temperature_end is not None),
               "objective.temperature_end and objective.temperature_steps go together: "
               "e.g. temperature = 3, temperature_end = 1, temperature_steps = 2000")
        _check(method.generator or self.sharing == "embeddings",
               f"objective.sharing={self.sharing!r} is about the generator, and kind "
               f"{self.kind!r} has none; leave objective.sharing unset")
        _check(self.two_stage_steps == 0 or method.two_stage,
               f"objective.two_stage_steps is the two-stage variant of kind 'electra', not of "
               f"{self.kind!r}")

    def temperature_at(self, step: int) -> float:
        """The sampling temperature at ``step`` (the schedule's end after it)."""
        if not self.temperature_steps:
            return self.temperature
        t = min(1.0, step / self.temperature_steps)
        return self.temperature + t * (self.temperature_end - self.temperature)  # type: ignore[operator]

    @property
    def final_temperature(self) -> float:
        return self.temperature_end if self.temperature_steps else self.temperature  # type: ignore[return-value]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class RunConfig:
    """Everything a pretraining run is: model, objective and loop."""

    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    objective: ObjectiveConfig = dataclasses.field(default_factory=ObjectiveConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)

    def __post_init__(self) -> None:
        # The bodies' registry (here, not at the top: the CLI reads this module without
        # torch): an unknown model.body is refused with the run's other settings.
        from electra.model.bodies import check

        m, o, t = self.model, self.objective, self.train
        check(m)  # the body, and its own settings
        same_size = "; set model.generator_size = 1"
        _check(o.sharing != "all" or m.generator_size == 1.0,
               f"objective.sharing='all' ties every generator weight to the discriminator's, "
               f"so the generator must be the same size, but model.generator_size is "
               f"{m.generator_size}{same_size}")
        shallower = m.generator_layers not in (0, m.num_layers)
        _check(not shallower or (o.sharing != "all" and not o.two_stage_steps),
               f"model.generator_layers={m.generator_layers} makes the generator shallower "
               f"than the discriminator ({m.num_layers} blocks), but objective.sharing='all' "
               f"and two_stage_steps need the same model; set model.generator_layers = 0")
        _check(m.share_embeddings or o.sharing in ("embeddings", "none"),
               f"objective.sharing={o.sharing!r} shares embeddings, but "
               f"model.share_embeddings=false turns sharing off; remove "
               f"model.share_embeddings or set objective.sharing='none'")
        if o.two_stage_steps:
            _check(m.generator_size == 1.0,
                   f"objective.two_stage_steps initialises the discriminator from the "
                   f"generator, so they must be the same size, but model.generator_size is "
                   f"{m.generator_size}{same_size}")
            _check(o.sharing == "none" or not m.share_embeddings,
                   "objective.two_stage_steps trains the discriminator with the generator "
                   "frozen, so they cannot share weights; set objective.sharing='none'")
            _check(o.two_stage_steps < t.max_steps,
                   f"objective.two_stage_steps={o.two_stage_steps} leaves no steps for the "
                   f"discriminator (train.max_steps={t.max_steps})")
            _check(t.parallel == "ddp",
                   "objective.two_stage_steps runs in one process or with train.parallel=ddp")

    @property
    def sharing(self) -> str:
        return sharing_of(self.model, self.objective)


    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model.to_dict(), "objective": self.objective.to_dict(),
                "train": self.train.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        sections = {"model": ModelConfig, "objective": ObjectiveConfig, "train": TrainConfig}
        unknown = sorted(set(d) - set(sections) - {"preset"})
        if unknown:
            raise UserError(f"unknown config section(s) {', '.join(map(repr, unknown))}; "
                            f"valid sections: {', '.join(sections)} (and a top-level preset)")
        preset = d.get("preset")
        base = run_preset(preset) if preset else cls()
        built = {}
        for name, klass in sections.items():
            given = d.get(name, {})
            if not isinstance(given, dict):
                raise UserError(f"[{name}] must be a table of settings, got {given!r}")
            values = {**getattr(base, name).to_dict(), **given}
            if name == "model" and given.get("body", base.model.body) != base.model.body:
                # another body than the base's: its own defaults, unless given with it
                from electra.model.bodies import BODIES  # torch: not for the CLI's parse

                body = BODIES.get(given["body"])
                values |= {k: v for k, v in (body.defaults if body else {}).items()
                           if k not in given}
            built[name] = config_from_dict(klass, values, f"[{name}]")
        return cls(**built)


def sharing_of(model: ModelConfig, objective: ObjectiveConfig) -> str:
    """What the generator shares: objective.sharing, or "none" when
    model.share_embeddings=false (the older switch for it)."""
    if not model.share_embeddings and objective.sharing == "embeddings":
        return "none"
    return objective.sharing


def run_preset(name: str) -> RunConfig:
    """A named preset: a body's recipe (the paper's model size with its pretraining
    hyperparameters; ``electra.model.bodies``)."""
    from electra.model.bodies import recipe  # torch: not for the CLI's parse

    r = recipe(name)
    return RunConfig(model=r.model, objective=ObjectiveConfig(**r.objective),
                     train=TrainConfig(**r.train))


def apply_overrides(d: dict[str, Any], sets: list[str]) -> dict[str, Any]:
    """Apply ``--set section.key=value`` (or ``key=value`` when the key is unambiguous)."""
    sections = {"model": ModelConfig, "objective": ObjectiveConfig, "train": TrainConfig}
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in d.items()}
    for item in sets:
        key, value = parse_set(item, "train.lr=1e-3")
        if "." in key:
            section, name = key.split(".", 1)
        else:
            owners = [s for s, k in sections.items() if name_in(k, key)]
            if len(owners) != 1:
                why = "several sections have" if owners else "no section has"
                every = {f.name: f"{s}.{f.name}" for s, k in sections.items()
                         for f in fields(k)}
                close = closest(key, list(every)) if not owners else None
                hint = f" (did you mean {every[close]!r}?)" if close else ""
                raise UserError(f"--set {key}: {why} that key{hint}; write it as section.key "
                                f"(sections: {', '.join(sections)})")
            section, name = owners[0], key
        if section not in sections:
            raise UserError(f"--set {key}: unknown section {section!r}; valid sections: "
                            f"{', '.join(sections)}")
        if not name_in(sections[section], name):
            names = config_keys(sections[section])
            raise UserError(f"--set {key}: unknown key {name!r} in [{section}]"
                            f"{did_you_mean(name, names)}; valid keys: {', '.join(names)}")
        table = out.setdefault(section, {})
        if not isinstance(table, dict):
            raise UserError(f"[{section}] must be a table of settings, got {table!r}")
        table[name] = value
    return out


def load_run_config(preset: str | None = None, config_file: str | None = None,
                    sets: list[str] | None = None) -> RunConfig:
    """Resolve ``--preset`` or ``--config FILE.toml``, then ``--set`` overrides (a [data]
    table aside: :func:`data_table` reads it)."""
    raw = raw_run_config(preset, config_file, sets)
    raw.pop("data", None)
    return RunConfig.from_dict(raw)


def data_table(config_file: str | None) -> str | None:
    """The ``[data]`` table of a ``--config`` file as ``--data`` would say it (None: no
    table): ``mix`` is ``--data``'s own text, a table of folder = weight (one phase), or a
    list of such tables (a phase each, in train.phases' order)."""
    if not config_file:
        return None
    table = read_toml(Path(config_file), "--config").get("data")
    if table is None:
        return None
    where = f"--config {config_file}: [data]"
    if not isinstance(table, dict) or set(table) != {"mix"}:
        raise UserError(f"{where} holds one key, mix (a --data text, a table of folder = "
                        f"weight, or a list of such tables: a phase each)")
    mix = table["mix"]

    def phase(t: Any) -> str:
        if isinstance(t, str) and t.strip():
            return t
        if isinstance(t, dict) and t and all(isinstance(w, int | float) and not isinstance(
                w, bool) for w in t.values()):
            return "+".join(f"{folder}:{weight}" for folder, weight in t.items())
        raise UserError(f"{where}: mix {t!r} is not a folder = weight table; e.g. mix = "
                        f"{{\"runs/web\" = 0.7, \"runs/books\" = 0.3}}")

    if isinstance(mix, list) and mix:
        return ",".join(phase(t) for t in mix)
    return phase(mix)


def raw_run_config(preset: str | None = None, config_file: str | None = None,
                   sets: list[str] | None = None) -> dict[str, Any]:
    """What ``--preset`` or ``--config FILE.toml`` and ``--set`` say, before defaults: the
    sections as given (``{"preset": ...}`` for a preset)."""
    d: dict[str, Any] = {}
    if preset and config_file:
        raise UserError("give either --preset or --config, not both")
    if preset:
        from electra.model.bodies import preset_names  # torch: not for the CLI's parse

        if preset not in preset_names():
            raise UserError(f"--preset {preset}: unknown; valid presets: "
                            f"{', '.join(preset_names())}")
        d["preset"] = preset
    if config_file:
        d = read_toml(Path(config_file), "--config")
    return apply_overrides(d, sets or [])


# The top-level keys of a run's config.json (what electra pretrain writes there).
RUN_FILE_KEYS = {"model", "objective", "train", "tokenizer_sha256", "data_vocab_size",
                 "seq_len", "data_mix"}


def resumed_run_config(run: str | Path, sets: list[str] | None = None) -> RunConfig:
    """`pretrain --resume` without --preset/--config: the run's own config, then ``--set``."""
    path = Path(run) / "config.json"
    if not path.is_file():
        raise UserError(f"--resume: {path} not found; give --preset or --config to start a run")
    saved = read_json(path, "the run's config")
    if not isinstance(saved, dict):
        raise UserError(f"--resume: {path} is not a run's config (a JSON object); give "
                        f"--preset or --config, or start a new --out")
    unknown = sorted(set(saved) - RUN_FILE_KEYS)
    if unknown:
        raise UserError(f"--resume: {path}: unknown key(s) {', '.join(map(repr, unknown[:5]))}"
                        f"; electra pretrain writes only {', '.join(sorted(RUN_FILE_KEYS))}: "
                        f"remove the others, or start a new --out")
    return RunConfig.from_dict(apply_overrides(
        {k: saved.get(k, {}) for k in ("model", "objective", "train")}, sets or []))


def decay_branch_config(checkpoint: str | Path, sets: list[str] | None = None
                        ) -> tuple[RunConfig, int]:
    """`pretrain --decay-from CHECKPOINT`: the checkpoint's run config (then ``--set``) made
    to decay from the checkpoint's step over the run's planned decay length D
    (``train.decay_steps``, else ``train.decay_fraction`` of its ``max_steps``): ``max_steps``
    becomes step + D and ``decay_steps`` D, the run a WSD run of that length would have been
    from the start. Returns it and the step."""
    from electra.io.checkpoint import verify_checkpoint  # the checkpoint's own reader

    path, flag = Path(checkpoint), f"--decay-from {checkpoint}"
    if not (path / "manifest.json").is_file():
        raise UserError(f"{flag}: not a checkpoint (a folder RUN/checkpoints/step-N holding "
                        f"manifest.json); name one of a run's checkpoints")
    saved = verify_checkpoint(path)
    step = saved.get("step") if isinstance(saved, dict) else None
    if not isinstance(step, int) or set(saved) - RUN_FILE_KEYS - {"step", "tokens"}:
        raise UserError(f"{flag}: its config.json is not a pretraining run's; name a "
                        f"checkpoint of `electra pretrain`")
    cfg = RunConfig.from_dict(apply_overrides(
        {k: saved.get(k, {}) for k in ("model", "objective", "train")}, sets or []))
    tc = cfg.train
    if tc.schedule != "wsd":
        raise UserError(f"{flag}: the run's train.schedule is {tc.schedule}; a decay branches "
                        f"off the stable phase of a WSD run (train.schedule=wsd)")
    decay = tc.decay_steps or round(tc.decay_fraction * tc.max_steps)
    if not tc.warmup_steps <= step <= tc.max_steps - decay:
        raise UserError(f"{flag}: step {step} is outside the run's stable phase (steps "
                        f"{tc.warmup_steps} to {tc.max_steps - decay}); choose a checkpoint in "
                        f"it")
    train = dataclasses.replace(tc, max_steps=step + decay, decay_steps=decay, max_tokens=0)
    return dataclasses.replace(cfg, train=train), step
