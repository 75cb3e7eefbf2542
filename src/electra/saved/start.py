"""What ``pretrain --init FOLDER`` starts from: the discriminator and generator a run, an
imported run, a run's checkpoint or a transformers folder holds (a generator built fresh where
it holds none), checked against the run's settings, and the line that says what was taken;
and the frozen generator objective fast_electra samples from (``pretrain --generator``)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch

from electra.config import ModelConfig
from electra.data.tokenizer import load_tokenizer, tokenizer_checksum
from electra.errors import UserError
from electra.io.files import read_json
from electra.model import Generator
from electra.run_config import RunConfig
from electra.saved.hf_format import generator_beside
from electra.saved.models import open_model

if TYPE_CHECKING:
    from electra.data.loader import ShardDataset
    from electra.model.kernels import Kernels


def load_init(folder: str, run_model: ModelConfig
               ) -> tuple[ModelConfig, Any, Any, Path, bool]:
    """(model config, discriminator, generator, tokenizer folder, whether the RTD head was
    built fresh) to start from (a run, an imported run, a run's checkpoint, or a transformers
    folder: a generator is built, at the run's ``generator_size`` and ``generator_layers``
    (the folder's own depth rule where the run's is deeper than the model), where it holds
    none; the RTD head where the folder has none); dropout from the run config."""
    opened = open_model(folder, "discriminator", "--init")
    disc, tokenizer = opened["discriminator"], opened.tokenizer
    d = cast(ModelConfig, disc.config)
    if d.body != run_model.body:
        raise UserError(f"--init {folder}: holds a {d.body} body but the run asks for "
                        f"model.body={run_model.body}; --set model.body={d.body} to continue "
                        f"it, or --init a {run_model.body} model")
    if lone_transformers_model(Path(folder)):  # a fresh generator, sharing embeddings
        return (d.replace(generator_size=run_model.generator_size,
                          generator_layers=(run_model.generator_layers if
                                            run_model.generator_layers <= d.num_layers
                                            else d.generator_layers),
                          hidden_dropout=run_model.hidden_dropout,
                          attention_dropout=run_model.attention_dropout,
                          share_embeddings=run_model.share_embeddings), disc, None, tokenizer,
                opened.head_fresh)
    gen = open_model(folder, "generator", "--init")["generator"]
    g = cast(ModelConfig, gen.config)
    cfg = d.replace(generator_size=g.hidden_size / d.hidden_size,
                    generator_layers=0 if g.num_layers == d.num_layers else g.num_layers,
                    hidden_dropout=run_model.hidden_dropout,
                    attention_dropout=run_model.attention_dropout,
                    share_embeddings=run_model.share_embeddings)
    derived = cfg.generator_config()
    if (derived.hidden_size, derived.num_heads, derived.intermediate_size,
            derived.num_layers) != (g.hidden_size, g.num_heads, g.intermediate_size,
                                    g.num_layers):
        raise UserError(f"--init {folder}: the generator ({g.hidden_size} wide, {g.num_heads} "
                        f"heads, FFN {g.intermediate_size}) is not a width multiple of the "
                        f"discriminator ({d.hidden_size}, {d.num_heads}, "
                        f"{d.intermediate_size})")
    return cfg, disc, gen, tokenizer, opened.head_fresh


def init_line(folder: str, cfg: RunConfig, generator_loaded: bool,
              head_fresh: bool = False) -> str:
    """What ``--init`` took from the folder and what the run built fresh, in one line."""
    m, g = cfg.model, cfg.model.generator_config()
    gen = f"the generator ({g.num_layers} x {g.hidden_size})"
    disc = f"the discriminator ({m.body} body {m.num_layers} x {m.hidden_size}"
    took = [disc + (", its encoder)" if head_fresh else ", with its replaced-token head)")]
    fresh = (["its replaced-token head"] if head_fresh else []) + (
        [] if generator_loaded else [gen])
    if generator_loaded:
        took.append(gen)
    line = f"--init {folder}: loaded {' and '.join(took)}"
    line += f"; built fresh: {' and '.join(fresh)}" if fresh else "; nothing built fresh"
    if cfg.sharing == "gdes":
        line += "; GDES's delta set to the discriminator's table less the generator's"
    return line


def lone_transformers_model(folder: Path) -> bool:
    """A transformers folder that holds no generator (any class but a masked LM's)."""
    meta = read_json(folder / "config.json", "a model's config") if (
        folder / "config.json").is_file() else {}
    return (isinstance(meta, dict) and "model_type" in meta
            and not any(a.endswith("ForMaskedLM") for a in meta.get("architectures") or [])
            and generator_beside(folder) is None)  # a released V3 generator


class FrozenGenerator:
    """The masked LM objective fast_electra samples from: the module (frozen, built with the
    run's kernels), its config, where it came from and a checksum of its weights (what a
    resumed run checks it reads the same one)."""

    def __init__(self, module: Any, source: str, sha256: str) -> None:
        self.module, self.source, self.sha256 = module, source, sha256

    @property
    def config(self) -> ModelConfig:
        return cast(ModelConfig, self.module.config)

    def line(self) -> str:
        g = self.config
        return (f"electra: frozen generator {self.source}: {g.body} body {g.num_layers} x "
                f"{g.hidden_size}, {sum(p.numel() for p in self.module.parameters()) / 1e6:.1f}"
                f"M parameters, forward only ({next(self.module.parameters()).dtype})"
                .replace("torch.", ""))


def load_generator(path: str, data: ShardDataset | None = None, kernels: Kernels | None = None,
                   precision: str = "fp32", flag: str = "--generator") -> FrozenGenerator:
    """The masked LM at ``path`` (a transformers *ForMaskedLM folder or hub id, a run, its
    generator/ folder or a checkpoint), frozen, in ``precision``; refused in one line where
    its tokenizer or vocabulary is not ``data``'s or its positions are fewer than its rows."""
    opened = open_model(path, "generator", flag)
    found = opened["generator"]
    g = cast(ModelConfig, found.config)
    if data is not None:
        tok = load_tokenizer(opened.tokenizer)
        if g.vocab_size != data.vocab_size or tok.get_vocab_size() != data.vocab_size:
            raise UserError(f"{flag} {path}: the generator's vocabulary has {g.vocab_size} "
                            f"tokens but --data {data.folder} was prepared with "
                            f"{data.vocab_size}; a frozen generator must share the data's "
                            f"tokenizer (prepare the data with {path}'s)")
        data.check_tokenizer(tokenizer_checksum(tok), tok.get_vocab_size(), f"{flag} {path}")
        if g.max_position_embeddings < data.seq_len:
            raise UserError(f"{flag} {path}: the generator reads at most "
                            f"{g.max_position_embeddings} positions but --data {data.folder} "
                            f"has rows of {data.seq_len}; prepare shorter rows")
    module = Generator(g, kernels=kernels)
    module.load_state_dict(found.state_dict())
    module.requires_grad_(False).eval()
    if precision == "bf16":
        module.to(torch.bfloat16)
    digest = hashlib.sha256()
    for name, tensor in sorted(found.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().float().contiguous().numpy().tobytes())
    return FrozenGenerator(module, path, digest.hexdigest())
