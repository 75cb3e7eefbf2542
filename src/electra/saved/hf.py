"""transformers' ELECTRA format: the key table, the config mapping, ``export`` and ``import``.

Our ``Discriminator`` <-> ``ElectraForPreTraining``, our ``Generator`` <-> ``ElectraForMaskedLM``,
a fine-tuned ``SequenceClassifier`` <-> ``ElectraForSequenceClassification``. The key mapping is
one-to-one (no tensor is split, fused or transposed), so ours -> transformers -> ours is
bitwise identical; the config mapping is :func:`to_hf_config` / :func:`from_hf_config`.

`electra export` writes ``DIR/discriminator`` and ``DIR/generator`` (or, for a fine-tuned model,
one ``ElectraForSequenceClassification`` folder with its label names), each with
``config.json``, ``model.safetensors`` and the tokenizer files, loadable with
``from_pretrained`` and no missing or unexpected weights. `electra import` reads such folders
(the layout of the released google/electra-* checkpoints) into our ``RUN/discriminator`` and
``RUN/generator``. transformers itself is needed only to write configs (``to_hf_config``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch

from electra.config import ModelConfig
from electra.data.tokenizer import load_tokenizer, save_tokenizer, special_names
from electra.errors import UserError
from electra.io.files import staged
from electra.io.outputs import claim_out
from electra.model import Discriminator, Generator
from electra.saved import folders
from electra.saved.hf_format import (
    hf_class,
    need_transformers,
    read_hf_folder,
    to_hf_config,
    to_hf_state_dict,
)
from electra.saved.models import open_model
from electra.tasks.base import head_of


def _write_hf_folder(folder: Path, module: torch.nn.Module, part: str, tok: Any,
                     **hf_extra: Any) -> None:
    """config.json, model.safetensors and the tokenizer files transformers expects."""
    from safetensors.torch import save_file

    cfg: ModelConfig = module.config  # type: ignore[assignment]
    folder.mkdir(exist_ok=True)
    hf_cfg = to_hf_config(cfg, **hf_extra)
    hf_cfg.architectures = [hf_class(part)]
    hf_cfg.save_pretrained(folder)
    # safetensors refuses tensors that share memory: the tied output layer is a copy.
    state = {k: v.detach().cpu().contiguous().clone()
             for k, v in to_hf_state_dict(module.state_dict(), part).items()}
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
         "model_input_names": ["input_ids", "token_type_ids", "attention_mask"],
         **specials}, indent=2))


def export_hf(source: str | Path, out: str | Path, overwrite: bool = False) -> Path:
    """Write transformers folders for a run's (or checkpoint's) discriminator and generator,
    or one ``ElectraForSequenceClassification`` folder for a fine-tuned model."""
    need_transformers()
    src, out = Path(source), Path(out)
    with claim_out(out, "export", "export", overwrite=overwrite,
                   inputs=[("the source", src)]) as claim:
        opened = open_model(src, flag="export")
        bodies = {m.config.body for m in opened.parts.values()}
        if bodies != {"bert"}:
            raise UserError(f"export {src}: its body is {', '.join(sorted(bodies))}; only the "
                            f"bert body exports to transformers' ELECTRA classes so far "
                            f"(ModernBERT's classes come with issue 42); electra's own "
                            f"commands (finetune, detect, predict) use the run as it is")
        if "classifier" in opened.parts:
            model, meta = opened["classifier"], opened.meta
            head = head_of(meta)
            labels, part = head.hf_labels(meta), head.hf_part
            with staged(out) as tmp:
                claim.mark(tmp)
                _write_hf_folder(tmp, model, part, load_tokenizer(src),
                                 finetuning_task=meta["task"], **labels)
            print(f"wrote {out} ({hf_class(part)}, task {meta['task']}"
                  + (f", labels {list(labels['label2id'])})" if "label2id" in labels else ")"))
            note = head.export_note(meta)
            if note:
                print(f"electra: note: {note}", file=sys.stderr)
            return out
        models, tok = opened.parts, load_tokenizer(opened.tokenizer)
        with staged(out) as tmp:
            claim.mark(tmp)
            for part, module in models.items():
                _write_hf_folder(tmp / part, module, part, tok)
    print("wrote " + " and ".join(f"{out}/{part} ({hf_class(part)})" for part in models))
    return out


def import_hf(hf_dir: str | Path, out: str | Path, generator: str | Path | None = None,
              overwrite: bool = False) -> Path:
    """Read a transformers ELECTRA discriminator (and generator) into our run layout.

    Without a generator folder a fresh one (¼ width) is made, sharing the discriminator's
    embeddings, so the run can be fine-tuned or pretrained further.
    """
    disc_dir, out = Path(hf_dir), Path(out)
    inputs = [("the transformers folder", disc_dir), ("--generator", generator)]
    with claim_out(out, "run", "import", overwrite=overwrite, inputs=inputs) as claim:
        d_cfg, d_state = read_hf_folder(disc_dir, "discriminator")
        disc = Discriminator(d_cfg)
        folders.fit(disc, d_state, disc_dir)
        if generator is not None:
            g_cfg, g_state = read_hf_folder(Path(generator), "generator")
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
        tok_src = next((p for p in (disc_dir / "tokenizer.json", disc_dir / "vocab.txt")
                        if p.is_file()), None)
        if tok_src is None:
            raise UserError(f"{disc_dir}: no tokenizer.json or vocab.txt beside the weights")
        tok = load_tokenizer(tok_src)
        with staged(out) as tmp:
            claim.mark(tmp)
            folders.write(tmp / "discriminator", disc, "discriminator", tok)
            folders.write(tmp / "generator", gen, "generator", tok)
    print(f"wrote {out}/discriminator and {out}/generator"
          + ("" if generator else " (a fresh generator, sharing the discriminator's "
                                  "embeddings)"))
    return out
