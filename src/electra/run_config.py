"""A pretraining run's configuration (``RunConfig``: model, objective, loop), read from a
preset or a TOML file with ``--set`` overrides, validated on construction: the objective
against the model (``electra.objectives.config``), the model against its body's own settings
(``electra.model.bodies``). No torch at import (the CLI's early checks read it).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from electra.config import (
    BODY_SETTINGS,
    ModelConfig,
    TrainConfig,
    _check,
    body_keys,
    closest,
    config_from_dict,
    config_keys,
    decay_start,
    did_you_mean,
    name_in,
    parse_phases,
    parse_set,
)
from electra.errors import UserError
from electra.io.files import read_json, read_toml
from electra.objectives.config import ObjectiveConfig, sharing_of


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

        if o.mask_prob_end is not None:
            _check(o.mask_over != "decay" or t.schedule == "wsd",
                   f"objective.mask_over='decay' runs the mask-rate schedule over the "
                   f"learning rate's decay, which train.schedule={t.schedule!r} does not have; "
                   f"set train.schedule='wsd' or objective.mask_over='run'")
            _check(not any(m for *_, m in parse_phases(t.phases)),
                   f"train.phases={t.phases} gives each phase its mask rate and "
                   f"objective.mask_prob_end schedules one over the run; use one of the two")
            _check(o.two_stage_steps == 0,
                   "objective.mask_prob_end schedules the rate of a one-stage run; leave "
                   "objective.two_stage_steps at 0")
        else:
            _check(o.mask_over == "run" and o.mask_shape == "linear",
                   "objective.mask_shape and objective.mask_over shape a schedule that "
                   "objective.mask_prob_end asks for; set objective.mask_prob_end (e.g. "
                   "mask_prob = 0.3, mask_prob_end = 0.15)")

    @property
    def sharing(self) -> str:
        return sharing_of(self.model, self.objective)

    def mask_window(self) -> tuple[int, int]:
        """The steps [start, stop) the mask-rate schedule runs over (objective.mask_over):
        the whole run, or the learning rate's decay (wsd's last steps)."""
        t = self.train
        if self.objective.mask_over == "decay":
            return decay_start(t.max_steps, t.decay_steps, t.decay_fraction), t.max_steps
        return 0, t.max_steps

    def mask_prob_at(self, step: int) -> float:
        """The masking rate of training step ``step`` (objective.mask_prob without a
        schedule)."""
        return self.objective.mask_prob_at(step, *self.mask_window())


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
        built: dict[str, Any] = {}
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


def run_preset(name: str) -> RunConfig:
    """A named preset: a body's recipe (the paper's model size with its pretraining
    hyperparameters; ``electra.model.bodies``)."""
    from electra.model.bodies import recipe  # torch: not for the CLI's parse

    r = recipe(name)
    return RunConfig(model=r.model, objective=ObjectiveConfig(**r.objective),
                     train=TrainConfig(**r.train))


def apply_overrides(d: dict[str, Any], sets: list[str],
                    own: set[str] | None = None) -> dict[str, Any]:
    """Apply ``--set section.key=value`` (or ``key=value`` when the key is unambiguous).
    ``own``: the bodies' own ``[model]`` keys (None: the registered bodies'; the CLI's
    early checks give the catalog's, without torch)."""
    sections = {"model": ModelConfig, "objective": ObjectiveConfig, "train": TrainConfig}
    if own is None:
        import electra.model.bodies  # noqa: F401  (torch: the bodies register their settings)

        own = body_keys()

    def name_in(klass: type, name: str) -> bool:
        return any(f.name == name and not f.metadata.get("flat") for f in fields(klass)) \
            or (klass is ModelConfig and name in own)

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
            names = config_keys(sections[section]) + (
                sorted(own) if section == "model" else [])
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
    cfg = RunConfig.from_dict(raw)
    _no_other_bodys(raw.get("model") or {}, cfg.model)
    return cfg


def _no_other_bodys(given: dict[str, Any], model: ModelConfig) -> None:
    """A ``[model]`` key given (``--set``, a TOML file) that is another body's own setting is
    refused: the run's body would not read it. (A run's or a folder's config.json may list
    them: written before each body owned its settings, they are left unread.)"""
    mine = type(model.settings())
    for key in (k for k in given if k in body_keys() and not name_in(mine, k)):
        owners = [b for b, s in BODY_SETTINGS.items() if name_in(s, key)]
        raise UserError(f"model.{key}={given[key]!r} is a setting of the "
                        f"{' or '.join(owners)} body, but model.body={model.body}; set "
                        f"model.body={owners[0]} to use it, or leave it out")


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
                 "seq_len", "data_mix", "generator_sha256"}


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
