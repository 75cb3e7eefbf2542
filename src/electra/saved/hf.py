"""transformers' formats: ``export`` and ``import``.

The BERT body: our ``Discriminator`` <-> ``ElectraForPreTraining``, our ``Generator`` <->
``ElectraForMaskedLM``, each fine-tuned head <-> its ``ElectraFor*`` class. The ModernBERT
body: the discriminator <-> ``ModernBertModel`` with the RTD head beside it (transformers has
no class for it), the generator <-> ``ModernBertForMaskedLM``; a ModernBERT folder of any
class imports. The DeBERTa body: the discriminator <-> ``DebertaV2Model`` with DeBERTa's RTD
head beside it, the generator <-> ``DebertaV2ForMaskedLM``, each head <-> its
``DebertaV2For*``; a released V3 folder imports with its ``pytorch_model.generator.bin`` and
``spm.model`` (each body's ``hf.py``: its key tables, configs, classes; driven by
``electra.saved.hf_format``). The
key mappings copy tensors as they are, so ours -> transformers -> ours is bitwise identical.

`electra export` writes ``DIR/discriminator`` and ``DIR/generator`` (or, for a fine-tuned model,
one ``ElectraForSequenceClassification`` folder with its label names), each with
``config.json``, ``model.safetensors`` and the tokenizer files, loadable with
``from_pretrained`` and no missing or unexpected weights. `electra import` reads such folders
(the layout of the released google/electra-* checkpoints) into our ``RUN/discriminator`` and
``RUN/generator``. transformers itself is needed only to write configs (an adapter's ``config``).

A sentence-transformers folder is written here (``export --sentence-transformers``: the
encoder, its pooling, its normaliser) and read here (:func:`sentence_transformers_folder`:
what ``electra.encode`` and the evaluations embed with).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from electra.config import ModelConfig
from electra.data.tokenizer import (
    SPM_MODEL,
    SpecialTokens,
    load_tokenizer,
    save_tokenizer,
    special_names,
)
from electra.errors import UserError
from electra.io import hub
from electra.io.files import maybe_json, read_json, staged
from electra.io.outputs import claim_out
from electra.io.progress import progress
from electra.model import Discriminator, Generator, count_parameters
from electra.saved import cards, folders
from electra.saved.hf_format import (
    export_of,
    generator_beside,
    need_transformers,
    read_hf_folder,
)
from electra.saved.models import LayerSpec, open_model, trained_length, truncate
from electra.tasks.base import head_of

if TYPE_CHECKING:
    from tokenizers import Tokenizer  # (the types only: the readers stay light)


def _write_hf_folder(folder: Path, module: torch.nn.Module, part: str, tok: Tokenizer,
                     card: dict[str, Any], pipeline: str = "", **hf_extra: Any) -> None:
    """config.json, model.safetensors and the tokenizer files transformers expects, and the
    model card (README.md) of ``card``, the source's (electra.saved.cards)."""
    from safetensors.torch import save_file

    cfg: ModelConfig = module.config  # type: ignore[assignment]
    fmt = export_of(cfg)
    folder.mkdir(exist_ok=True)
    if fmt.specials_in_config:
        s = SpecialTokens.of(tok)
        hf_extra = {"cls_token_id": s.cls, "sep_token_id": s.sep, "bos_token_id": s.cls,
                    "eos_token_id": s.sep, **hf_extra}
    hf_cfg = fmt.config(cfg, **hf_extra)
    hf_cfg.architectures = [fmt.cls(part)]
    hf_cfg.save_pretrained(folder)
    # safetensors refuses tensors that share memory: the tied output layer is a copy.
    state = {k: v.detach().cpu().contiguous().clone()
             for k, v in fmt.state(module.state_dict(), part).items()}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    save_tokenizer(tok, folder)  # tokenizer.json, vocab.txt, special_tokens_map.json
    spec = json.loads(tok.to_str())
    specials = {f"{role}_token": name for role, name in special_names(tok).items()}
    # BERT's WordPiece loads as transformers' ElectraTokenizer; any other algorithm (BPE,
    # Unigram) as the generic fast tokenizer over tokenizer.json, with the same roles.
    wordpiece = (spec.get("model") or {}).get("type") == "WordPiece"
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "ElectraTokenizer" if wordpiece else "PreTrainedTokenizerFast",
         "do_lower_case": bool((spec.get("normalizer") or {}).get("lowercase", False)),
         "model_max_length": cfg.max_position_embeddings,
         # ELECTRA reads segment ids: the generic tokenizer returns them only when asked
         "model_input_names": list(fmt.input_names),
         **specials}, indent=2))
    cls = fmt.cls(part)
    cards.write(folder, card, f"electra-{part}", library="transformers", pipeline=pipeline,
                load=f'from transformers import AutoTokenizer, {cls}\n\n'
                     f'tokenizer = AutoTokenizer.from_pretrained("path/to/this/folder")\n'
                     f'model = {cls}.from_pretrained("path/to/this/folder")')


def _card(folder: Path, part: str, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """The card a source folder's ``part`` keeps in its config.json, or (a checkpoint, an
    older folder) one that says where the export came from."""
    if meta is None:
        where = folder / part / "config.json"
        meta = read_json(where, "a model's config") if where.is_file() else {}
    card = (meta or {}).get("card") if isinstance(meta, dict) else None
    return card or {"title": f"{part} exported by electra",
                    "what": f"The {part} in `{folder.name}`, exported by `electra export`."}


def export_hf(source: str | Path, out: str | Path, overwrite: bool = False,
              sentence_transformers: str | None = None, layer: LayerSpec | None = None,
              generator: bool = False, truncate_dim: int | None = None) -> Path:
    """Write transformers folders for a run's (or checkpoint's) discriminator and generator,
    or one ``ElectraForSequenceClassification`` folder for a fine-tuned model; with
    ``sentence_transformers`` (a pooling: mean or cls), one folder
    ``sentence_transformers.SentenceTransformer`` loads: the encoder, that pooling, L2
    normalisation (what ``electra.encode`` computes); ``truncate_dim``: its embeddings cut
    to their first D dimensions (sentence-transformers' ``truncate_dim``)."""
    need_transformers()
    src, out = Path(source), Path(out)
    _check_flags(sentence_transformers, layer, generator)
    if truncate_dim is not None and truncate_dim <= 0:
        raise UserError(f"--truncate-dim {truncate_dim}: give a positive number of dimensions")
    with claim_out(out, "export", "export", overwrite=overwrite,
                   inputs=[("the source", src)]) as claim:
        opened = open_model(src, flag="export")
        own = _own_pooling(src, opened, sentence_transformers)
        if sentence_transformers is not None or own is not None:
            pooling, normalize = (sentence_transformers or own[0],  # type: ignore[index]
                                  own[1] if own else True)
            return _export_sentence_transformers(src, out, opened, pooling, claim, normalize,
                                                 layer, generator, truncate_dim)
        if truncate_dim is not None:
            raise UserError(f"--truncate-dim {truncate_dim}: cuts the embeddings of a "
                            f"sentence-transformers export; add --sentence-transformers mean "
                            f"(or cls), or export an embedding model")
        if "classifier" in opened.parts:
            model, meta = opened["classifier"], opened.meta
            head = head_of(meta)
            labels, part = head.hf_labels(meta), head.hf_part
            why = export_of(model.config).why_not(model.config, part)
            if why:
                raise UserError(f"export {src}: {why}")
            with staged(out) as tmp:
                claim.mark(tmp)
                _write_hf_folder(tmp, model, part, load_tokenizer(src),
                                 _card(src, part, meta), head.pipeline_tag,
                                 finetuning_task=meta["task"], **labels)
            print(f"wrote {out} ({export_of(model.config).cls(part)}, task {meta['task']}"
                  + (f", labels {list(labels['label2id'])})" if "label2id" in labels else ")"))
            note = head.export_note(meta)
            if note:
                print(f"electra: note: {note}", file=sys.stderr)
            return out
        models, tok = _exportable(src, opened.parts), load_tokenizer(opened.tokenizer)
        with staged(out) as tmp, progress(len(models), "export: parts written", "part") as bar:
            claim.mark(tmp)
            for part, module in models.items():
                _write_hf_folder(tmp / part, module, part, tok, _card(src, part),
                                 cards.PIPELINES.get(part, ""))
                bar.update(1)
    print("wrote " + " and ".join(f"{out}/{part} ({export_of(m.config).cls(part)})"
                                  for part, m in models.items()))
    note = export_of(models["discriminator"].config).note
    if note:
        print(f"electra: note: {note}", file=sys.stderr)
    return out


def _own_pooling(src: Path, opened: Any, given: str | None) -> tuple[str, bool] | None:
    """An embedding model's own (pooling, normalised), refusing another pooling given;
    None for any other model."""
    own = (head_of(opened.meta).sentence_embedding(opened.meta)
           if "classifier" in opened.parts else None)
    if own is not None and given not in (None, own[0]):
        raise UserError(f"--sentence-transformers {given}: {src} was fine-tuned to embed "
                        f"with {own[0]} pooling, and {given} pooling would give other "
                        f"vectors than those it learned; leave --sentence-transformers "
                        f"out (its own pooling is used) or give {own[0]}")
    return own


def _check_flags(sentence_transformers: str | None, layer: LayerSpec | None,
                 generator: bool) -> None:
    """Refuse a pooling export does not write, and an encoder's choice without the
    sentence-transformers export it shapes."""
    if sentence_transformers is not None and sentence_transformers not in ("mean", "cls"):
        raise UserError(f"--sentence-transformers {sentence_transformers}: give the pooling, "
                        f"mean or cls")
    if (layer is not None or generator) and sentence_transformers is None:
        raise UserError(f"{'--layer' if layer is not None else '--generator'}: chooses the "
                        f"encoder of a sentence-transformers export; add "
                        f"--sentence-transformers mean (or cls)")


def _export_sentence_transformers(src: Path, out: Path, opened: Any, pooling: str,
                                  claim: Any, normalize: bool = True,
                                  layer: LayerSpec | None = None, generator: bool = False,
                                  truncate_dim: int | None = None) -> Path:
    """OUT as sentence-transformers saves a model: the encoder (transformers' folder of the
    discriminator, or of a fine-tuned model's encoder), the pooling, a normaliser (where
    the embeddings are normalised); built and saved by sentence-transformers itself."""
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise UserError("--sentence-transformers needs sentence-transformers: pip install "
                        "'electra[st]'") from None
    try:  # its modules' home since 5.x; sentence_transformers.models before
        from sentence_transformers.sentence_transformer import modules as models
    except ImportError:
        from sentence_transformers import models  # type: ignore[no-redef]
    part = "classifier" if "classifier" in opened.parts else "discriminator"
    if generator:
        if "generator" not in opened.parts:
            raise UserError(f"--generator: {src} holds no generator; give a pretraining run "
                            f"(or its checkpoint)")
        part = "generator"
    module = opened[part]
    if part != "discriminator":  # its encoder, as a discriminator's (the head left out)
        disc = Discriminator(module.config)
        disc.encoder.load_state_dict(module.encoder.state_dict())
        module = disc
    layers = () if layer is None else truncate(module, layer, str(src))  # (as evaluated)
    why = export_of(module.config).why_not(module.config, "discriminator")
    if truncate_dim is not None and truncate_dim > (size := module.config.hidden_size):
        why = f"--truncate-dim {truncate_dim}: its embeddings have {size} dimensions"
    if why:
        raise UserError(f"export {src}: {why}")
    with staged(out) as tmp:
        claim.mark(tmp)
        encoder_dir = tmp.parent / (tmp.name + "-encoder")
        _write_hf_folder(encoder_dir, module, "discriminator", load_tokenizer(opened.tokenizer),
                         _card(src, part, opened.meta or None), "feature-extraction")
        length = (trained_length(opened.meta) if part == "classifier" else None
                  ) or module.config.max_position_embeddings  # what it was fine-tuned at
        try:  # (transformers' load report would call the replaced-token head, left out on
            with quiet_transformers():  # purpose, UNEXPECTED; its bars add nothing here)
                first = models.Transformer(str(encoder_dir), max_seq_length=length)
                width = (getattr(first, "get_embedding_dimension", None)  # 6.x's name
                         or first.get_word_embedding_dimension)()
                prompts = (head_of(opened.meta).prompts(opened.meta)
                           if part == "classifier" else {})  # a fine-tuned model's own
                SentenceTransformer(modules=_modules(models, first, width, layers, pooling,
                                                     normalize),
                                    device="cpu", prompts=prompts,
                                    truncate_dim=truncate_dim).save(str(tmp))
        finally:
            shutil.rmtree(encoder_dir, ignore_errors=True)
    print(f"wrote {out} (sentence-transformers: the encoder"
          + (f", the mean of states {','.join(map(str, layers))}" if layers else "")
          + f", {pooling} pooling"
          + (", normalised" if normalize else "") + f", texts cut at {length} tokens"
          + (f", embeddings cut to {truncate_dim} dimensions" if truncate_dim else "") + ")")
    return out


def _modules(models: Any, first: Any, width: int, layers: tuple[int, ...], pooling: str,
             normalize: bool) -> list[Any]:
    """sentence-transformers' modules after the transformer ``first``: the mean of the
    states ``layers`` where several are chosen (``WeightedLayerPooling``, weight 1 on each,
    0 between them; ``first`` set to give every state, ``output_hidden_states``), the
    pooling, the normaliser."""
    mean = []
    if layers:
        first.auto_model.config.output_hidden_states = True
        weights = torch.tensor([float(i in layers) for i in range(layers[0], layers[-1] + 1)])
        mean = [models.WeightedLayerPooling(width, layers[-1], layers[0],
                                            torch.nn.Parameter(weights))]
    return [first, *mean, models.Pooling(width, pooling_mode=pooling),
            *([models.Normalize()] if normalize else [])]


POOLINGS = ("mean", "cls")  # what electra embeds with (and exports)


@dataclass(frozen=True)
class SentenceTransformersFolder:
    """What electra reads of a folder sentence-transformers saved: its transformers
    folder, pooling (mean or cls), normaliser, length (None: the model's positions),
    lowercasing and prompts (name -> text, and the default's name)."""

    transformer: Path
    pooling: str = "mean"
    normalize: bool = True
    max_length: int | None = None
    lowercase: bool = False
    prompts: tuple[tuple[str, str], ...] = ()
    default_prompt: str | None = None
    truncate_dim: int | None = None  # the dimensions it embeds with (a Matryoshka model's)
    layers: tuple[int, ...] = ()  # the states averaged (a WeightedLayerPooling's); () the last


def sentence_transformers_folder(folder: Path) -> SentenceTransformersFolder | None:
    """A folder sentence-transformers saved (``modules.json``), read as
    :class:`SentenceTransformersFolder`; None for any other folder. A pooling electra does
    not embed with (max, weighted mean, a prompt left out of the mean, layers weighted
    unequally, ...) is a UserError."""
    modules = maybe_json(folder / "modules.json")
    if not isinstance(modules, list):
        return None
    kinds = {str(m.get("type", "")).rpartition(".")[2]: m for m in modules
             if isinstance(m, dict)}
    if "Transformer" not in kinds:
        raise UserError(f"{folder}: a sentence-transformers folder without a Transformer "
                        f"module; electra reads those of an encoder and a pooling")
    pooling = "mean"
    if "Pooling" in kinds:
        cfg = maybe_json(folder / kinds["Pooling"].get("path", "") / "config.json") or {}
        modes = [cfg.get("pooling_mode")] if cfg.get("pooling_mode") else [
            m.removeprefix("pooling_mode_").removesuffix("_token").removesuffix("_tokens")
            for m, on in cfg.items() if m.startswith("pooling_mode_") and on is True]
        if len(modes) != 1 or modes[0] not in POOLINGS:
            raise UserError(f"{folder}: its pooling is {'+'.join(map(str, modes))}; electra "
                            f"embeds with {' or '.join(POOLINGS)}")
        if cfg.get("include_prompt") is False:
            raise UserError(f"{folder}: its pooling leaves the prompt's tokens out "
                            f"(include_prompt false, an Instructor-style model); electra "
                            f"pools every token of the text")
        pooling = modes[0]
    transformer = folder / kinds["Transformer"].get("path", "")
    bert = maybe_json(transformer / "sentence_bert_config.json") or {}
    length = bert.get("max_seq_length") or (maybe_json(transformer / "tokenizer_config.json")
                                            or {}).get("model_max_length")
    own = maybe_json(folder / "config_sentence_transformers.json") or {}
    prompts: dict[str, Any] = own["prompts"] if isinstance(own.get("prompts"), dict) else {}
    default = own.get("default_prompt_name")
    return SentenceTransformersFolder(
        transformer, pooling, "Normalize" in kinds,
        int(length) if isinstance(length, int | float) and 0 < length < 1e6 else None,
        bert.get("do_lower_case") is True,
        tuple((str(k), str(v)) for k, v in prompts.items() if isinstance(v, str)),
        default if isinstance(default, str) and default in prompts else None,
        cut if isinstance(cut := own.get("truncate_dim"), int) and cut > 0 else None,
        _weighted_layers(folder, kinds.get("WeightedLayerPooling")))


def _weighted_layers(folder: Path, module: dict[str, Any] | None) -> tuple[int, ...]:
    """The states a ``WeightedLayerPooling`` module averages (those of a non-zero weight,
    ``hidden_states`` indexes); a UserError where their weights differ (electra embeds with
    their plain mean); () where there is none."""
    if module is None:
        return ()
    where = folder / str(module.get("path", ""))
    cfg = maybe_json(where / "config.json") or {}
    try:
        from safetensors.torch import load_file
        weights = load_file(str(where / "model.safetensors"))["layer_weights"].tolist()
    except (OSError, KeyError, ValueError) as e:
        raise UserError(f"{folder}: its WeightedLayerPooling's weights cannot be read "
                        f"({where}/model.safetensors: {e})") from None
    start = int(cfg.get("layer_start", 4))
    used = [(start + i, w) for i, w in enumerate(weights) if w != 0]
    if not used or len({w for _, w in used}) > 1:
        raise UserError(f"{folder}: its WeightedLayerPooling weighs the layers "
                        f"{[round(w, 4) for w in weights]}; electra embeds with the plain "
                        f"mean of the layers it uses (equal weights)")
    return tuple(i for i, _ in used)


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' warnings (a load report) and progress bars off for the block."""
    from transformers.utils import logging as hf_logging

    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def _exportable(src: Path, parts: dict[str, torch.nn.Module]) -> dict[str, torch.nn.Module]:
    """The run's parts that export; a discriminator that cannot is refused, a generator that
    cannot is left out with a note."""
    out = {}
    for part, module in parts.items():
        why = export_of(module.config).why_not(module.config, part)
        if why and part == "discriminator":
            raise UserError(f"export {src}: the discriminator cannot be exported: {why}")
        if why:
            print(f"electra: note: {part}/ not exported: {why}; the run keeps it",
                  file=sys.stderr)
            continue
        out[part] = module
    return out


def import_hf(hf_dir: str | Path, out: str | Path, generator: str | Path | None = None,
              overwrite: bool = False) -> Path:
    """Read a transformers discriminator (and generator) into our run layout.

    The generator comes from ``generator``, else from a ``pytorch_model.generator.bin``
    beside the weights (the released DeBERTa-V3 folders), else a fresh one is made (the
    body's rule: ¼ width for ELECTRA's, half depth for DeBERTa-V3's), sharing the
    discriminator's embeddings, so the run can be fine-tuned or pretrained further.
    """
    disc_dir, out = Path(hub.resolve(hf_dir, "import")), Path(out)
    if generator is not None:
        generator = hub.resolve(generator, "--generator")
    inputs = [("the transformers folder", disc_dir), ("--generator", generator)]
    with claim_out(out, "run", "import", overwrite=overwrite, inputs=inputs) as claim:
        d_cfg, d_state, head_fresh = read_hf_folder(disc_dir, "discriminator")
        disc = Discriminator(d_cfg)
        folders.fit(disc, d_state, disc_dir)
        if generator is None and generator_beside(disc_dir) is not None:
            generator = disc_dir  # a released DeBERTa-V3 folder: its generator beside it
        if generator is not None:
            g_cfg, g_state, _ = read_hf_folder(Path(generator), "generator")
            if g_cfg.body != d_cfg.body:
                raise UserError(f"--generator {generator} holds a {g_cfg.body} body and "
                                f"{disc_dir} a {d_cfg.body} one; a run's generator and "
                                f"discriminator share one body: give a {d_cfg.body} "
                                f"generator, or none (a fresh one is built)")
            if (g_cfg.vocab_size, g_cfg.embedding_size) != (d_cfg.vocab_size,
                                                             d_cfg.embedding_size):
                raise UserError(f"generator {generator} has vocabulary {g_cfg.vocab_size} "
                                f"and embedding size {g_cfg.embedding_size}, the "
                                f"discriminator {d_cfg.vocab_size} and "
                                f"{d_cfg.embedding_size}; they must match to share "
                                f"embeddings")
            gen = Generator(g_cfg.replace(generator_size=1.0))
            folders.fit(gen, g_state, Path(generator))
        else:
            gen = Generator(d_cfg.generator_config(), disc.encoder.embeddings)
        tok_src = next((p for p in (disc_dir / "tokenizer.json", disc_dir / SPM_MODEL,
                                    disc_dir / "vocab.txt") if p.is_file()), None)
        if tok_src is None:
            raise UserError(f"{disc_dir}: no tokenizer.json, {SPM_MODEL} or vocab.txt beside "
                            f"the weights")
        tok = load_tokenizer(tok_src)
        inherited = cards.source_lineage(disc_dir)
        with staged(out) as tmp:
            claim.mark(tmp)
            for part, module, src in (("discriminator", disc, disc_dir),
                                      ("generator", gen, generator)):
                card = {"title": f"{part} imported by electra",
                        "what": (f"The {part} of the transformers folder `{Path(src).name}`, "
                                 f"in electra's layout by `electra import`." if src else
                                 f"A fresh {part} (random weights) sharing the imported "
                                 f"discriminator's embeddings, made by `electra import`."),
                        "trained": [("model", cards.size_line(module.config,
                                                              count_parameters(module)))],
                        "command": cards.command_line(), **inherited}
                folders.write(tmp / part, module, part, tok, card=card)
    print(import_line(disc_dir, disc, gen, generator, head_fresh))
    print(f"wrote {out}/discriminator and {out}/generator")
    return out


def import_line(disc_dir: Path, disc: torch.nn.Module, gen: torch.nn.Module,
                generator: str | Path | None, head_fresh: bool) -> str:
    """What ``electra import`` loaded and what it built fresh, in one line."""
    d, g = disc.config, gen.config
    took = [f"the discriminator ({d.body} body {d.num_layers} x {d.hidden_size}"  # type: ignore[union-attr]
            + (", its encoder)" if head_fresh else ", with its replaced-token head)")]
    shape = f"the generator ({g.num_layers} x {g.hidden_size}"  # type: ignore[union-attr]
    fresh = ["its replaced-token head"] if head_fresh else []
    if generator is None:
        fresh.append(f"{shape}, sharing the discriminator's embeddings)")
    elif Path(generator) == disc_dir:
        took.append(f"{shape}, from {generator_beside(disc_dir).name})")  # type: ignore[union-attr]
    else:
        took.append(f"{shape}, from {generator})")
    return (f"import {disc_dir}: loaded {' and '.join(took)}; "
            + (f"built fresh: {' and '.join(fresh)}" if fresh else "nothing built fresh"))
