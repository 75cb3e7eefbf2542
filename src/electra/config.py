"""Typed configuration: the model shape, the objective, the pretraining loop, fine-tuning.

Every config is a frozen dataclass validated on construction: each field's type (an int where
an int belongs, no NaN or infinity) and range, each message naming the key, the value and
what is valid. ``config_from_dict`` rejects unknown keys with the list of valid ones, so a typo
never silently falls back to a default.

    [model]      ModelConfig       the discriminator's shape (the generator is derived)
    [objective]  ObjectiveConfig   masking, sampling, λ
    [train]      TrainConfig       the pretraining loop
    --set k=v    FinetuneConfig    fine-tuning (keys without a section)
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypeVar

from electra.errors import UserError
from electra.io.trackers import parse_log_to
from electra.registry import Registry

T = TypeVar("T")
F = TypeVar("F", bound="FamilySettings")
DEFAULT_TIMEOUT_S = 1800.0
"""Under torchrun: seconds a process waits for the others (longer than any rank-0-only pause,
such as writing a checkpoint) before stopping with an error."""
_TYPES: dict[str, type] = {"int": int, "float": float, "str": str, "bool": bool}


def config_from_dict(cls: type[T], values: dict[str, Any], where: str = "") -> T:
    """Build dataclass ``cls`` from ``values``, rejecting keys it does not have.

    Args:
        cls: a config dataclass.
        values: field name -> value.
        where: how the user names this section (e.g. ``"[model]"``), used in messages.
    """
    own: set[str] = getattr(cls, "own_keys", set)()  # the bodies' own (ModelConfig)
    valid = config_keys(cls) + sorted(own - set(config_keys(cls)))
    unknown = sorted(set(values) - set(valid))
    if unknown:
        section = f" in {where}" if where else ""
        raise UserError(
            f"unknown config key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}"
            f"{section}{did_you_mean(unknown[0], valid)}; valid keys: {', '.join(valid)}"
        )
    if own:
        values = {k: v for k, v in values.items() if k not in own} | {
            "own": {k: v for k, v in values.items() if k in own}}
    return cls(**values)


def closest(name: str, valid: list[str]) -> str | None:
    """The one of ``valid`` that ``name`` looks like a misspelling of (difflib), if any."""
    import difflib

    close = difflib.get_close_matches(str(name), valid, n=1, cutoff=0.6)
    return close[0] if close else None


def did_you_mean(name: str, valid: list[str]) -> str:
    """`` (did you mean 'epochs'?)`` when ``name`` is close to one of ``valid``, else ''."""
    close = closest(name, valid)
    return f" (did you mean {close!r}?)" if close else ""


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise UserError(message)


BOOLEANS = {"true": True, "yes": True, "on": True, "1": True,
            "false": False, "no": False, "off": False, "0": False}
MAX_INT = 2**53  # larger integers lose their value in JSON (and no setting needs one)
MAX_SEED = 2**32 - 1  # numpy's seeds; torch's generators take these too


def parse_bool(value: Any, key: str) -> bool:
    """``value`` as a boolean: true/false, yes/no, on/off, 1/0 (any case), or a bool; anything
    else is a UserError naming ``key``. The one reading of a boolean everywhere."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | str) and str(value).strip().lower() in BOOLEANS:
        return BOOLEANS[str(value).strip().lower()]
    raise UserError(f"{key} must be true or false (or yes/no, 1/0), got {value!r}")


def _check_types(config: Any) -> None:
    """Check every field of a config dataclass against its annotation (ints become floats
    where a float belongs, yes/no/1/0 booleans where a boolean does); floats must be finite,
    integers below 2**53. Names the key in the error."""
    section = type(config).SECTION
    for f in fields(config):
        value = getattr(config, f.name)
        kinds = [k.strip() for k in str(f.type).split("|")]
        key = f"{section}.{f.name}" if section else f.name
        if value is None and "None" in kinds:
            continue
        if kinds[0].startswith("dict["):  # a nested table (FinetuneConfig.family)
            _check(isinstance(value, dict), f"{key} must be a table, got {value!r}")
            continue
        if "bool" in kinds and "int" not in kinds and not isinstance(value, bool):
            value = parse_bool(value, key)
            object.__setattr__(config, f.name, value)
        if isinstance(value, int) and not isinstance(value, bool):
            _check(abs(value) < MAX_INT, f"{key} must be below 2**53, got {value!r}")
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if "float" in kinds and number:
            _check(math.isfinite(value), f"{key} must be a finite number, got {value!r}")
            object.__setattr__(config, f.name, float(value))
        elif not any(isinstance(value, _TYPES[k]) and not (k == "int" and isinstance(
                value, bool)) for k in kinds if k in _TYPES):
            wanted = " or ".join("a number" if k == "float" else "an integer" if k == "int"
                                 else "true or false" if k == "bool" else "a string"
                                 if k == "str" else "unset" for k in kinds)
            raise UserError(f"{key} must be {wanted}, got {value!r}")


def within(spec: str, value: float) -> bool:
    """Whether ``value`` is in ``spec``: ``">= 1"``, ``"> 0"``, ``"[0, 1)"``, ``"(0, 1]"``..."""
    if spec[0] in "<>":
        op, bound = spec.split()
        b = float(bound)
        return {">=": value >= b, ">": value > b, "<=": value <= b, "<": value < b}[op]
    lo, hi = (float(x) for x in spec[1:-1].split(","))
    return ((value >= lo if spec[0] == "[" else value > lo)
            and (value <= hi if spec[-1] == "]" else value < hi))


def _check_ranges(config: Any) -> None:
    """Every field against its range in the class's ``RANGES``, which is also what the
    configuration reference (docs/) shows: a bound (``">= 1"``, ``"[0, 1)"``) or a tuple of
    choices. Unset (None) fields pass. Checks with their own advice run before this one."""
    section = type(config).SECTION
    for name, spec in type(config).RANGES.items():
        value = getattr(config, name)
        key = f"{section}.{name}" if section else name
        if value is None:
            continue
        if isinstance(spec, tuple):
            _check(value in spec, f"{key} must be one of {', '.join(spec)}, got {value!r}")
            continue
        wanted = ("a positive integer" if spec == ">= 1" and isinstance(value, int) else spec
                  if spec[0] in "<>" else f"in {spec}")
        _check(within(spec, value), f"{key} must be {wanted}, got {value!r}")


# The largest value of each size of a model (beyond any ELECTRA or BERT, far below overflow).
MODEL_LIMITS = {"vocab_size": 1 << 24, "embedding_size": 1 << 16, "hidden_size": 1 << 16,
                "num_layers": 1024, "num_heads": 1024, "intermediate_size": 1 << 18,
                "max_position_embeddings": 1 << 16, "type_vocab_size": 1024}


O = TypeVar("O", bound="OwnSettings")


@dataclass(frozen=True)
class OwnSettings:
    """The settings a part owns beside a config's (a body's, a task family's): frozen and
    checked as every config (types, ``RANGES``), saved flat with the config's."""

    SECTION: ClassVar[str] = ""
    RANGES: ClassVar[dict[str, str | tuple[str, ...]]] = {}

    def __post_init__(self) -> None:
        _check_types(self)
        _check_ranges(self)

    @classmethod
    def picked(cls: type[O], values: dict[str, Any]) -> O:
        """The settings among ``values`` that are this part's (its defaults for the rest)."""
        return cls(**{k: v for k, v in values.items() if name_in(cls, k)})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class BodySettings(OwnSettings):
    """A body's own model settings (a body's ``Settings``, in its folder,
    ``electra.model.bodies.<name>``), given as ``[model]`` keys (``--set model.KEY=VALUE``)
    beside ModelConfig's and saved flat with them. This base: a body with none."""

    SECTION: ClassVar[str] = "model"

    @classmethod
    def of(cls: type[B], cfg: ModelConfig) -> B:
        """The settings among ``cfg.own`` that are this body's (its defaults for the rest)."""
        return cls.picked(cfg.own)


B = TypeVar("B", bound=BodySettings)
BODY_SETTINGS: Registry[type[BodySettings]] = Registry("body's settings")
"""Each body's own settings by the body's name, added with the body by the bodies' registry
(``electra.model.bodies.register``)."""


def body_keys() -> set[str]:
    """The names of every registered body's own settings."""
    return {f.name for s in BODY_SETTINGS.values() for f in fields(s)}


@dataclass(frozen=True)
class ModelConfig:
    """Shape of one ELECTRA transformer (the discriminator; the generator is derived)."""

    SECTION: ClassVar[str] = "model"
    RANGES: ClassVar[dict[str, str | tuple[str, ...]]] = {
        **{name: f"[1, {top}]" for name, top in MODEL_LIMITS.items()},
        "hidden_dropout": "[0, 1)", "attention_dropout": "[0, 1)", "layer_norm_eps": "> 0",
        "initializer_range": "> 0", "pad_token_id": ">= 0", "generator_size": "(0, 1]",
        "generator_layers": ">= 0"}
    vocab_size: int = 30522
    """Rows of the word-embedding table (set from the tokenizer)."""
    embedding_size: int = 128
    """Width of the embeddings; projected to ``hidden_size`` when different."""
    hidden_size: int = 256
    """Width of the transformer blocks."""
    num_layers: int = 12
    """Number of transformer blocks."""
    num_heads: int = 4
    """Attention heads per block; must divide ``hidden_size``."""
    intermediate_size: int = 1024
    """Width of the feed-forward layer."""
    max_position_embeddings: int = 512
    """Longest sequence the position table holds."""
    type_vocab_size: int = 2
    """Number of token types (segments A and B)."""
    hidden_dropout: float = 0.1
    """Dropout on embeddings and block outputs."""
    attention_dropout: float = 0.1
    """Dropout on attention probabilities."""
    layer_norm_eps: float = 1e-12
    """LayerNorm epsilon (BERT's value)."""
    initializer_range: float = 0.02
    """Standard deviation of the normal initialisation."""
    pad_token_id: int = 0
    """Id of [PAD]; its embedding row starts at zero and receives no gradient."""
    generator_size: float = 0.25
    """Generator width as a fraction of this model's (hidden, FFN and heads scaled)."""
    generator_layers: int = 0
    """Generator depth in blocks; 0: the discriminator's (ELECTRA's generators are narrower,
    DeBERTa-V3's are as wide and half as deep)."""
    share_embeddings: bool = True
    """Generator and discriminator share one embedding module (word, position, type, LN)."""
    body: str = "bert"
    """The transformer body: bert (ELECTRA's), modernbert (RoPE, GeGLU, local/global
    attention) or deberta (disentangled attention over relative positions, DeBERTa-V3's);
    ``electra.model.bodies`` names each."""
    own: dict[str, Any] = dataclasses.field(default_factory=dict, metadata={"flat": True})
    """The body's own settings as given (``[model]`` keys beside these, saved flat with them):
    each body's ``Settings`` in its folder (``electra.model.bodies``) names, ranges and
    checks them; read with ``cfg.settings()`` or as ``cfg.KEY``."""

    def __post_init__(self) -> None:
        _check_types(self)
        for name, top in MODEL_LIMITS.items():
            value = getattr(self, name)
            _check(isinstance(value, int) and value > 0,
                   f"model.{name} must be a positive integer, got {value!r}")
            _check(value <= top, f"model.{name}={value} is out of range (at most {top:,})")
        _check(self.hidden_size % self.num_heads == 0,
               f"model.hidden_size={self.hidden_size} is not divisible by "
               f"model.num_heads={self.num_heads}; choose heads that divide the width")
        _check(self.layer_norm_eps > 0 and self.initializer_range > 0,
               f"model.layer_norm_eps ({self.layer_norm_eps!r}) and model.initializer_range "
               f"({self.initializer_range!r}) must be > 0; BERT uses 1e-12 and 0.02")
        _check_ranges(self)
        # a body's own settings are its own to check (electra.model.bodies: Body.check)
        _check(self.generator_layers <= self.num_layers,
               f"model.generator_layers={self.generator_layers} is deeper than the "
               f"discriminator's {self.num_layers} blocks; give at most {self.num_layers} "
               f"(0: the same depth)")
        _check(self.pad_token_id < self.vocab_size,
               f"model.pad_token_id={self.pad_token_id} is outside the vocabulary "
               f"(size {self.vocab_size})")
        self._check_memory()

    def parameters(self) -> int:
        """About how many parameters the discriminator has (embeddings and blocks)."""
        h, e, i = self.hidden_size, self.embedding_size, self.intermediate_size
        embed = (self.vocab_size + self.max_position_embeddings + self.type_vocab_size) * e
        return embed + e * h + self.num_layers * (4 * h * h + 2 * h * i + 9 * h + i)

    def _check_memory(self) -> None:
        """Refuse a model whose fp32 weights alone exceed this machine's memory."""
        import os

        try:
            memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            return
        params = self.parameters()
        need = 4 * params
        _check(need <= memory, f"the model ({self.num_layers} x {self.hidden_size}, FFN "
               f"{self.intermediate_size}, vocabulary {self.vocab_size:,}) has about "
               f"{params:,} parameters, {need / 2**30:,.1f} GiB in fp32: more than "
               f"this machine's {memory / 2**30:,.1f} GiB of memory; choose a smaller model")

    def generator_config(self) -> ModelConfig:
        """The generator: the same embeddings; hidden, FFN, heads scaled by generator_size;
        ``generator_layers`` blocks (0: as many as this model)."""
        m = self.generator_size
        heads = max(1, round(self.num_heads * m))
        hidden = max(heads, round(self.hidden_size * m))
        hidden -= hidden % heads
        return dataclasses.replace(
            self, hidden_size=hidden, num_heads=heads,
            intermediate_size=max(1, round(self.intermediate_size * m)), generator_size=1.0,
            num_layers=self.generator_layers or self.num_layers, generator_layers=0,
        )

    def replace(self, **changes: Any) -> ModelConfig:
        """A copy with ``changes`` applied (unknown keys rejected; a body's own among them)."""
        mine = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "own"}
        return config_from_dict(ModelConfig, {**mine, **self.own, **changes}, "[model]")

    def settings(self) -> BodySettings:
        """The body's own settings (those given, its defaults for the rest), made once a
        config (a body's forward reads them: no checks again on the step's path)."""
        made = self.__dict__.get("_settings")
        if made is None:
            made = BODY_SETTINGS.get(self.body, BodySettings).of(self)
            if self.body in BODY_SETTINGS:  # (a body registered later is read then)
                object.__setattr__(self, "_settings", made)
        return made

    def to_dict(self) -> dict[str, Any]:
        """Flat, as config.json keeps it: the shared keys, then the body's own."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "own"}
        return {**out, **self.settings().to_dict()}

    @classmethod
    def own_keys(cls) -> set[str]:
        """The keys of every registered body's own settings (what ``config_from_dict``
        puts in ``own``)."""
        return body_keys()

    def __getattr__(self, name: str) -> Any:
        """A body's own setting read as ``cfg.KEY`` (its value, or its body's default)."""
        if name.startswith("_") or name == "own":
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        settings = self.settings()
        if name in type(settings).__dataclass_fields__:
            return getattr(settings, name)
        if name in body_keys():
            raise AttributeError(f"model.{name} is not a setting of the {self.body} body")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __hash__(self) -> int:
        return hash(tuple((f.name, getattr(self, f.name)) for f in fields(self)
                          if f.name != "own") + tuple(sorted(self.own.items())))


PRECISIONS = ("auto", "bf16", "fp16", "fp32")
OPTIMIZERS = ("adamw", "stableadamw", "lamb", "muon")
"""torch's AdamW; StableAdamW (ModernBERT's: AdamW with update clipping) and LAMB
(layer-wise trust ratios, for large batches) from pytorch-optimizer; torch's Muon on the
blocks' matrices with AdamW on the rest (electra.train.optim)."""


def check_optimizer(name: str, key: str) -> None:
    """An optimizer outside torch is installed (a one-line error naming the extra)."""
    import importlib.util  # light, and only for these two settings

    if name in ("stableadamw", "lamb") and importlib.util.find_spec("pytorch_optimizer") is None:
        raise UserError(f"{key}={name}: needs pytorch-optimizer, which is not installed; "
                        f"pip install 'electra[optim]' (or pip install pytorch-optimizer), "
                        f"or use adamw")


def parse_batch_warmup(value: str, key: str = "train.batch_warmup") -> tuple[int, int]:
    """``START:TOKENS`` -> (START, TOKENS); "" -> (0, 0), no warmup. A one-line error
    naming the value otherwise."""
    if not value.strip():
        return 0, 0
    parts = value.replace("_", "").split(":")
    try:
        start, tokens = (int(float(p)) for p in parts) if len(parts) == 2 else (0, 0)
    except (ValueError, OverflowError):  # not a number, or inf
        start = tokens = 0
    if start < 1 or tokens < 1:
        raise UserError(f"{key}={value}: give START:TOKENS, the first step's batch and the "
                        f"token positions over which it grows to batch_size (e.g. "
                        f"32:2000000), both >= 1; empty for none")
    return start, tokens



def parse_phases(value: str, key: str = "train.phases"
                 ) -> tuple[tuple[int, float, float | None], ...]:
    """``LEN:FRACTION[:MASK],...`` -> ((LEN, FRACTION, MASK or None), ...); "" -> (): one
    length. The lengths distinct, each >= 8; the fractions in (0, 1], summing to 1; MASK, the
    phase's objective.mask_prob (mmBERT's 30% -> 15% -> 5%), in (0, 1)."""
    if not value.strip():
        return ()
    out = []
    for item in value.split(","):
        parts = item.strip().split(":")
        try:
            length = int(parts[0])
            fraction = float(parts[1]) if len(parts) in (2, 3) else -1.0
            mask = float(parts[2]) if len(parts) == 3 else None
        except ValueError:
            length, fraction, mask = 0, -1.0, None
        if length < 8 or not 0 < fraction <= 1 or not (mask is None or 0 < mask < 1):
            raise UserError(f"{key}={value}: {item.strip()!r} is not LEN:FRACTION[:MASK] (a "
                            f"length >= 8, a fraction of the steps in (0, 1], the phase's "
                            f"mask rate in (0, 1)); e.g. 128:0.9,512:0.1 or "
                            f"128:0.6:0.3,512:0.4:0.15")
        out.append((length, fraction, mask))
    if len({n for n, *_ in out}) < len(out):
        raise UserError(f"{key}={value}: a length is named twice; one phase per length")
    if abs(sum(f for _, f, _ in out) - 1) > 1e-6:
        raise UserError(f"{key}={value}: the fractions sum to {sum(f for _, f, _ in out):g}, "
                        f"not 1; give each phase its share of train.max_steps")
    return tuple(out)


def decay_start(max_steps: int, decay_steps: int = 0, decay_fraction: float = 0.1) -> int:
    """The step where a wsd schedule's decay begins: the last ``decay_steps`` of
    ``max_steps``, else its last ``decay_fraction`` (the schedule, a mask-rate schedule over
    the decay, a decay branch and push's decay-N tags read it alike)."""
    return max_steps - (decay_steps or round(decay_fraction * max_steps))


LOOP_RANGES: dict[str, str | tuple[str, ...]] = {
    "batch_size": ">= 1", "grad_accum": ">= 1", "schedule": ("linear", "cosine", "wsd"),
    "decay_fraction": "(0, 1]", "decay_steps": ">= 0", "decay_shape": ("linear", "1-sqrt"),
    "optimizer": OPTIMIZERS, "weight_decay": ">= 0", "adam_beta1": "[0, 1)",
    "adam_beta2": "[0, 1)", "adam_eps": "> 0", "grad_clip": ">= 0", "precision": PRECISIONS,
    "max_nonfinite_skips": ">= 0", "threads": "[0, 4096]"}


@dataclass(frozen=True)
class LoopConfig:
    """The settings both training loops share, under the same keys (pretraining's in
    ``[train]``, fine-tuning's without a section): the batch, the schedule after the warmup,
    the optimizer, precision, the skips, threads, trackers, the cards' license, compile. The
    trainer reads them from here (``electra.train.trainer.Settings.of``)."""

    SECTION: ClassVar[str] = ""
    batch_size: int = 128
    """Examples per optimizer step, over all processes and accumulation steps."""
    grad_accum: int = 1
    """Micro-batches per optimizer step; must divide batch_size."""
    schedule: str = "linear"
    """After the warmup: linear (decay to 0 at the last step, ELECTRA's) | cosine (half a
    cosine to 0) | wsd (warmup-stable-decay: the peak rate, then a decay to 0, decay_shape's,
    over the last decay_fraction of the steps; ModernBERT's trapezoid)."""
    decay_fraction: float = 0.1
    """wsd: the fraction of the steps, at the end, over which the rate decays to 0."""
    decay_steps: int = 0
    """wsd: the steps, at the end, over which the rate decays to 0 (0: decay_fraction's).
    `electra pretrain --decay-from CHECKPOINT` sets it and max_steps for its branch."""
    decay_shape: str = "linear"
    """wsd: how the rate falls over the decay: linear, or 1-sqrt (1 - sqrt of the decay's
    fraction done: ModernBERT's, most of the drop at its start)."""
    optimizer: str = "adamw"
    """adamw (torch's, fused) | stableadamw (ModernBERT's) | lamb (large batches) | muon
    (torch's Muon on the blocks' 2-d weights, AdamW on embeddings, heads, norms and biases;
    Muon's update scaled to AdamW's RMS, so lr and weight_decay serve both); stableadamw and
    lamb need `pip install 'electra[optim]'`. adam_beta1, adam_beta2, adam_eps and
    weight_decay apply to each (fine-tuning's layer-wise rates too)."""
    weight_decay: float = 0.01
    """AdamW weight decay (none on LayerNorm weights and biases)."""
    adam_beta1: float = 0.9
    """AdamW's first-moment decay (the original's 0.9)."""
    adam_beta2: float = 0.999
    """AdamW's second-moment decay (the original's 0.999)."""
    adam_eps: float = 1e-6
    """AdamW's epsilon (the original's 1e-6)."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this (0 turns clipping off)."""
    precision: str = "auto"
    """auto | bf16 | fp16 (with a gradient scaler) | fp32 autocast; weights and optimizer stay
    fp32; sampling always fp32. auto: bf16 where the device multiplies it natively (AMX or
    AVX512-BF16 CPUs, most GPUs), else fp32 on a CPU and fp16 on a GPU."""
    max_nonfinite_skips: int = 0
    """Batches with a non-finite loss to skip before stopping (0: stop at the first)."""
    threads: int = 0
    """CPU threads for torch (0: all cores); fewer help on a machine other jobs share."""
    log_to: str = "tensorboard"
    """Where metrics lines go besides metrics.jsonl: any of tensorboard, mlflow, wandb,
    comma-separated (empty: none; a fine-tune: a run of its own per seed, grouped by --out's
    name); mlflow and wandb need `pip install 'electra[track]'`."""
    license: str = ""
    """The license the final models' cards (README.md) name: the hub's id (apache-2.0, mit,
    cc-by-4.0...); empty: the starting model's (--init, --model), if its card names one."""
    compile: bool = False
    """torch.compile the step: in one process the whole forward a micro-step runs (the
    objective's generator, sampling, discriminator and losses; a fine-tune's model) as one
    graph, under DDP/FSDP and CUDA graphs each transformer block. The first steps compile it
    (minutes on a small CPU; cached on disk for the next run); bench/host_cost.py has its
    figures. Off by default."""
    cast_once: bool = True
    """bf16/fp16 in one eager process: cast the linear layers' weights to the compute dtype
    once a micro-batch and write their gradients in one op (electra.train.cast), bitwise
    autocast's step in a tenth of its ops (on a CPU its step time did not move; a GPU's
    figure is the kit's cast lever to give); false: autocast's own casts. Off by itself
    under DDP and FSDP (they reduce on autograd's gradient hooks, which it bypasses),
    compile and CUDA graphs."""

    def check_loop(self) -> None:
        """The shared settings' checks with their advice, before the ranges' plain ones
        (``LOOP_RANGES``)."""
        key = f"{self.SECTION}." if self.SECTION else ""
        _check_adam(self.adam_beta1, self.adam_beta2, self.adam_eps, key)
        _check(self.grad_accum < 1 or self.batch_size % self.grad_accum == 0,
               f"{key}batch_size={self.batch_size} is not divisible by "
               f"{key}grad_accum={self.grad_accum}; choose an accumulation that divides it")
        parse_log_to(self.log_to, f"{key}log_to")
        check_optimizer(self.optimizer, f"{key}optimizer")
        _check(self.decay_shape == "linear" or self.schedule == "wsd",
               f"{key}decay_shape={self.decay_shape} shapes a wsd decay; set "
               f"{key}schedule=wsd, or leave {key}decay_shape=linear")


SHUFFLES = ("rows", "blocks")


@dataclass(frozen=True)
class TrainConfig(LoopConfig):
    """The pretraining loop: optimisation, precision, logging and checkpoints."""

    SECTION: ClassVar[str] = "train"
    RANGES: ClassVar[dict[str, str | tuple[str, ...]]] = {
        **LOOP_RANGES, "lr": "> 0", "warmup_steps": ">= 0", "max_steps": ">= 1",
        "seed": f"[0, {MAX_SEED}]", "log_every": ">= 1", "eval_every": ">= 0",
        "eval_batches": ">= 1", "save_every": ">= 1", "keep_checkpoints": ">= 1",
        "parallel": ("ddp", "fsdp"), "probe_every": ">= 0", "probe_max_examples": ">= 1",
        "probe_epochs": "[1, 1000]", "peak_tflops": ">= 0", "max_tokens": ">= 0",
        "shuffle": SHUFFLES, "shuffle_block": ">= 1", "shuffle_window": ">= 1",
        "partitions": ">= 1"}
    lr: float = 5e-4
    """Peak learning rate (ELECTRA-Small 5e-4, Base 2e-4, Large 2e-4)."""
    batch_size: int = 128
    warmup_steps: int = 10_000
    """Linear warmup from 0 to lr, then the schedule's decay."""
    max_steps: int = 1_000_000
    """Optimizer steps in the whole run."""
    batch_warmup: str = ""
    """START:TOKENS grows each step's batch from START examples to batch_size, linearly in the
    token positions trained, over TOKENS (ModernBERT's batch-size warmup; empty: none). A step
    is k of the grad_accum micro-batches, so START is a multiple of batch_size/grad_accum."""
    phases: str = ""
    """LEN:FRACTION[:MASK],... trains on rows of each length in turn for its fraction of
    max_steps (BERT's and NVIDIA's ELECTRA: 128:0.9,512:0.1), each at its own
    objective.mask_prob where MASK is given (mmBERT's 30% -> 15% -> 5%); --data names a
    prepared folder (or mixture) of each length, A,B; max_predictions (unset) follows each
    length and rate. Empty: --data's one length."""
    max_tokens: int = 0
    """> 0: the run's length in token positions instead (batch_size rows of the data's
    seq_len a step, padding included: nearly all real with `prepare --pack`); max_steps
    becomes the steps that take, rounded up, and the schedule follows it."""
    shuffle: str = "rows"
    """The data's order each epoch: rows (a permutation of every row, ELECTRA's) | blocks
    (the rows of shuffle_window random blocks of shuffle_block consecutive rows shuffled
    together, window after window, each of partitions equal parts of a global batch from
    blocks of its own): the order `--data URL` streams through a bounded cache, each process
    fetching only the blocks its rows are in, instead of mirroring the folder whole. Local
    and streamed data, one process and N, read the same global batches."""
    shuffle_block: int = 2048
    """shuffle=blocks: consecutive rows in a block (what a stream fetches at once)."""
    shuffle_window: int = 32
    """shuffle=blocks: blocks whose rows are shuffled together (more: better mixed, a larger
    cache; a stream holds about two windows of each part a process reads)."""
    partitions: int = 1
    """shuffle=blocks: parts of each global batch, each from blocks of its own; as many as
    the processes (or a multiple) and each process reads only its parts' blocks. Must divide
    batch_size."""
    seed: int = 0
    """Seeds initialisation, data order, masking, sampling and dropout."""
    log_every: int = 10
    """Steps between lines in metrics.jsonl / TensorBoard."""
    eval_every: int = 500
    """Steps between validations on the held-out split (0: only at the end)."""
    eval_batches: int = 20
    """Batches per validation."""
    peak_tflops: float = 0.0
    """The device's peak (TFLOP/s) that each metrics line's mfu divides by; 0: a GPU's
    datasheet figure, or a matrix multiply measured at the start on a CPU (or a GPU not in
    electra.runtime.GPU_PEAKS)."""
    save_every: int = 1000
    """Steps between checkpoints (one is always written at the end)."""
    keep_checkpoints: int = 3
    """How many recent checkpoints to keep."""
    parallel: str = "ddp"
    """Under torchrun: ddp (each process holds the whole model) or fsdp (parameters,
    gradients and optimizer state sharded over processes, for models too big for one)."""
    unpad: bool = False
    """Compute only the real tokens of a padded batch (packed after the embeddings,
    variable-length attention, repadded for the heads). Off: pretraining rows are ~7%
    padding, and on a CPU packing them costs more than it saves (bench/RESULTS.md)."""
    cuda_graphs: bool = False
    """Replay each compiled block as CUDA graphs (torch.compile's reduce-overhead mode, static
    shapes): the step's kernel launches go. Implies train.compile; a CUDA device and
    train.unpad=false only (unpadding changes the shapes every batch)."""
    probe_every: int = 0
    """Steps between linear probes of the discriminator (0: none): a head trained on its
    frozen encoder on probe_train, scored on probe_dev and logged as probe_* beside the
    losses; the pretraining's numbers are unchanged."""
    probe_train: str = ""
    """The probe's labelled training file (CSV, TSV or JSONL, as `finetune --task custom`)."""
    probe_dev: str = ""
    """The probe's dev file, the same columns."""
    probe_text_columns: str = "text"
    """The probe files' text column, or two as A,B."""
    probe_label_column: str = "label"
    """The probe files' label column."""
    probe_max_examples: int = 2000
    """The probe's training examples at most (a fixed random subset)."""
    probe_epochs: int = 3
    """The probe's passes over its training examples."""

    def __post_init__(self) -> None:
        _check_types(self)
        _check_adam(self.adam_beta1, self.adam_beta2, self.adam_eps, "train.")  # its advice
        _check_ranges(self)
        self.check_loop()
        _check(not self.probe_every or (self.probe_train and self.probe_dev),
               "train.probe_every needs train.probe_train and train.probe_dev (labelled "
               "CSV, TSV or JSONL files)")
        _check(not self.probe_every or self.parallel == "ddp",
               "train.probe_every probes a whole model: use train.parallel=ddp (or no probe)")
        _check(not (parse_phases(self.phases) and self.max_tokens),
               f"train.phases={self.phases} with train.max_tokens: the phases split steps; "
               f"give train.max_steps")
        start, _ = parse_batch_warmup(self.batch_warmup)
        unit = self.batch_size // self.grad_accum
        _check(not start or (start < self.batch_size and start % unit == 0),
               f"train.batch_warmup={self.batch_warmup}: the first batch must be a multiple of "
               f"the micro-batch, train.batch_size/train.grad_accum={unit}, below "
               f"train.batch_size={self.batch_size} (raise train.grad_accum for finer steps)")
        _check(not self.decay_steps or self.decay_steps <= self.max_steps - self.warmup_steps,
               f"train.decay_steps={self.decay_steps} is more than the steps after the warmup "
               f"({self.max_steps} - {self.warmup_steps}); choose fewer")
        _check(self.batch_size % self.partitions == 0,
               f"train.partitions={self.partitions} must divide train.batch_size="
               f"{self.batch_size} (each part of a global batch is as large)")
        _check(self.partitions == 1 or self.shuffle == "blocks",
               f"train.partitions={self.partitions} parts the blocks of train.shuffle=blocks; "
               f"set it, or leave train.partitions=1")
        _check(not (self.cuda_graphs and self.unpad),
               "train.cuda_graphs=true needs static shapes, and train.unpad=true changes them "
               "every batch: set train.unpad=false (or train.cuda_graphs=false)")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _check_adam(beta1: float, beta2: float, eps: float, prefix: str) -> None:
    _check(0.0 <= beta1 < 1.0 and 0.0 <= beta2 < 1.0,
           f"{prefix}adam_beta1 ({beta1!r}) and {prefix}adam_beta2 ({beta2!r}) must be in "
           f"[0, 1); ELECTRA uses 0.9 and 0.999")
    _check(eps > 0.0, f"{prefix}adam_eps must be > 0, got {eps!r}; ELECTRA uses 1e-6")


def parse_value(text: str) -> Any:
    """A --set value: bool, int, float, or the string itself."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_set(item: str, example: str) -> tuple[str, Any]:
    """One ``--set key=value``: (key, parsed value); ``example`` shows the form on error."""
    if "=" not in item:
        raise UserError(f"--set {item!r}: expected key=value, e.g. --set {example}")
    key, value = item.split("=", 1)
    return key.strip(), parse_value(value.strip())


def name_in(klass: type, name: str) -> bool:
    return any(f.name == name for f in fields(klass))


SELECTIONS = ("last", "best")
FREEZES = ("none", "encoder")


@dataclass(frozen=True)
class FinetuneConfig(LoopConfig):
    """Fine-tuning a discriminator on a task (``--set key=value``, no section).

    ``None`` means the paper's value for the model and task (see :meth:`resolved`).
    """

    SECTION: ClassVar[str] = ""
    RANGES: ClassVar[dict[str, str | tuple[str, ...]]] = {
        **LOOP_RANGES, "lr": "> 0", "layer_decay": "(0, 1]", "epochs": "[1, 100000]",
        "max_length": ">= 8", "warmup_fraction": "[0, 1)",
        "task_sampling_alpha": "[0, 100]", "freeze": FREEZES, "max_train_examples": ">= 0",
        "save_every": ">= 0", "keep_checkpoints": ">= 1", "eval_every": ">= 0",
        "select": SELECTIONS}
    lr: float | None = None
    """Peak learning rate; None: 3e-4 up to width 256 (Small), else 1e-4 (Base, Large)."""
    layer_decay: float | None = None
    """Layer-wise learning-rate decay; None: 0.8, or 0.9 for models of 24+ layers."""
    epochs: int | None = None
    """Passes over the training set; None: 3, or 10 for RTE and STS-B."""
    batch_size: int = 32
    max_length: int | None = None
    """Tokens per example ([CLS] A [SEP] B [SEP]); longer inputs are truncated (question
    answering: the window's length). None: 128, or 512 for SQuAD (the original's)."""
    warmup_fraction: float = 0.1
    """Fraction of the steps with a linear warmup, then the schedule's decay (linear to 0
    by default; schedule, as pretraining's)."""
    group_by_length: bool = False
    """Batches of examples of similar length (each group of 50 random batches sorted by
    length, its batches shuffled; transformers' group_by_length), so less padding is
    computed; off: the paper's uniformly random batches."""
    unpad: bool = True
    """Compute only the real tokens of a padded batch (packed after the embeddings,
    variable-length attention, repadded for the head); off: every position of the batch, as
    a compiled step (compile=true) does by itself."""
    task_sampling_alpha: float = 1.0
    """Multi-task (``--task a,b``): draw each step's task with probability proportional to
    its training examples to this power (1: proportional, 0: uniform)."""
    freeze: str = "none"
    """none | encoder: train only the task head on the encoder's features, the encoder's
    weights left as they are and its dropout off (a linear probe)."""
    max_train_examples: int = 0
    """>0: a fixed random subset of the training set (the same for every seed)."""
    save_every: int = 0
    """Steps between checkpoints for --resume (0: at the end of every epoch)."""
    keep_checkpoints: int = 1
    """How many recent checkpoints to keep while a seed trains (removed when it ends)."""
    eval_every: int = 0
    """Steps between dev evaluations besides the one at every epoch's end (0: epochs only)."""
    select: str = "last"
    """Which model a seed keeps: "last" (the paper's protocol) or "best" (the evaluation with
    the highest dev score on the task's first metric)."""
    family: dict[str, Any] = dataclasses.field(default_factory=dict, metadata={"flat": True})
    """The task families' own settings that were given (``Head.Settings``: SQuAD's
    doc_stride, the embedding head's pooling...), set and saved flat beside the rest; a
    family reads its own with :meth:`settings`."""

    def __post_init__(self) -> None:
        _check_types(self)
        _check(0 <= self.task_sampling_alpha <= 100,
               f"task_sampling_alpha must be in [0, 100], got {self.task_sampling_alpha!r} "
               f"(1: proportional to the tasks' sizes, 0: uniform)")
        _check(self.freeze in FREEZES,
               f"freeze must be one of {', '.join(FREEZES)}, got {self.freeze!r}; "
               f"freeze=encoder trains the head alone (a probe)")
        _check(self.layer_decay is None or 0.0 < self.layer_decay <= 1.0,
               f"layer_decay must be in (0, 1], got {self.layer_decay!r}; the paper uses 0.8")
        _check_ranges(self)
        self.check_loop()

    def resolved(self, model_cfg: ModelConfig, task_defaults: dict[str, Any] | None = None,
                 family: type[FamilySettings] | None = None) -> FinetuneConfig:
        """The paper's values where this config leaves them unset, for this model and a task
        (``task_defaults``: what the task's head says, ``Head.task_defaults``; the rest: 128
        tokens, 3 epochs, lr and layer-wise decay by the model's size); with ``family`` (the
        task's ``Head.Settings``), its settings whole (the given ones, its defaults for the
        rest) and no other family's."""
        given = task_defaults or {}
        own = self.family if family is None else self.settings(family).to_dict()
        length = self.max_length or given.get("max_length", 128)
        _check(length <= model_cfg.max_position_embeddings,
               f"max_length={length} exceeds the model's {model_cfg.max_position_embeddings} "
               f"positions; --set max_length=N with N <= "
               f"{model_cfg.max_position_embeddings}")
        return dataclasses.replace(
            self, max_length=length, family=own,
            lr=self.lr if self.lr is not None else
            (3e-4 if model_cfg.hidden_size <= 256 else 1e-4),
            layer_decay=self.layer_decay if self.layer_decay is not None else
            (0.9 if model_cfg.num_layers >= 24 else 0.8),
            epochs=self.epochs if self.epochs is not None else given.get("epochs", 3))

    def settings(self, family: type[F]) -> F:
        """A task family's settings (its ``Head.Settings``): those given, its defaults for
        the rest."""
        return family.of(self.family)

    def to_dict(self) -> dict[str, Any]:
        """Flat, as `--set` takes them and config.json keeps them: the family's settings
        beside the rest."""
        out = dataclasses.asdict(self)
        family = out.pop("family")
        return {**out, **family}


@dataclass(frozen=True)
class FamilySettings(OwnSettings):
    """A task family's own fine-tuning settings (a head's ``Settings``, in its package),
    given with `--set KEY=VALUE` beside FinetuneConfig's and saved flat with them. This
    base: a family with none."""

    @classmethod
    def of(cls: type[F], values: dict[str, Any]) -> F:
        """The settings among ``values`` (a run's flat settings) that are this family's."""
        return cls.picked(values)


def config_keys(cls: type) -> list[str]:
    """A config's keys as its users read them: the class's own first, in its order, then
    those both loops share (``LoopConfig``'s)."""
    own = list(vars(cls).get("__annotations__", {}))
    keys = [k for k in own if name_in(cls, k)] + [f.name for f in fields(cls)
                                                  if f.name not in own]
    flat = {f.name for f in fields(cls) if f.metadata.get("flat")}  # their keys are others'
    return [k for k in keys if k not in flat]


def field_docs(cls: type) -> dict[str, str]:
    """Each field of a config dataclass and its docstring (the string under it in the
    source), which the CLI's help shows: the settings are documented once, here."""
    import ast
    import inspect
    import itertools
    import textwrap

    docs = {}
    for klass in reversed([k for k in cls.__mro__ if dataclasses.is_dataclass(k)]):
        body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body  # type: ignore[attr-defined]
        for node, after in itertools.pairwise(body):  # a base's first (LoopConfig's)
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)):
                docs[node.target.id] = " ".join(str(after.value.value).split())
    return {k: docs[k] for k in config_keys(cls) if k in docs}


def settings_help(cls: type) -> str:
    """``key: its doc's first sentence`` for every field of ``cls``, for a --set help."""
    def first(doc: str) -> str:
        return doc.split(". ")[0].rstrip(".")

    return "; ".join(f"{name}: {first(doc)}" for name, doc in field_docs(cls).items())


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"train": {"lr": 1}}`` -> ``{"train.lr": 1}``."""
    out: dict[str, Any] = {}
    for key, value in d.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def config_diffs(saved: dict[str, Any], now: dict[str, Any], free: set[str]) -> list[str]:
    """What differs between a saved run's config and the one given now, as
    ``"train.lr: run has 0.001, now 0.002"``; keys in ``free`` (settings a resumed run may
    change) and keys only one side has (fields added since) are not compared."""
    a, b = flatten(saved), flatten(now)
    return [f"{k}: run has {a[k]!r}, now {b[k]!r}" for k in sorted(set(a) & set(b))
            if k not in free and a[k] != b[k]]
