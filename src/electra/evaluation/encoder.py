"""A model's sentence embeddings, as every evaluation and the Python API compute them.

    electra.encode(MODEL, ["a sentence", ...])        -> (N, H) float32, L2-normalised
    Encoder(MODEL).encode(sentences, batch_size=32)   the object MTEB's runner takes
    electra.encode(MODEL, texts, truncate_dim=64)     a Matryoshka model's first 64 dimensions

The encoder is the model's discriminator's (or a fine-tuned model's) as `electra detect` and
`finetune --model` open it: a run, one of its parts or checkpoints, a transformers folder, a
sentence-transformers folder, a hub id. Pooling: ``mean`` over the real tokens (the default,
sentence-transformers'), or ``cls`` (the first position); a model's own pooling, length and
prompts are used where it has them.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import numpy as np

from electra.data.tokenizer import load_tokenizer
from electra.errors import UserError
from electra.io import hub
from electra.io.progress import reporting
from electra.runtime import bound_kernel_cache, placed
from electra.saved.hf import POOLINGS, sentence_transformers_folder
from electra.saved.models import (
    LayerSpec,
    encoder_part,
    fine_tuned,
    open_model,
    trained_length,
    truncate,
)
from electra.tasks.base import head_of, logits
from electra.tasks.embedding.data import encode_texts
from electra.tasks.embedding.head import Pooled


class Encoder:
    """A model's sentence embeddings: ``encode(sentences)`` -> (N, H) float32 (MTEB's
    runner calls it so: ``mteb.MTEB(tasks=...).run(Encoder("RUN"))``).

    A model's own settings are honoured where it has them, as its users' tools do: a
    sentence-transformers folder's pooling, normaliser, length (``max_seq_length``),
    lowercasing and prompts; a fine-tuned model's pooling, normaliser and the length it was
    fine-tuned at. Arguments given override them; the length is never more than the model's
    positions."""

    def __init__(self, model: str | Path, pooling: str | None = None,
                 normalize: bool | None = None, max_length: int | None = None,
                 precision: str = "fp32", device: str = "auto",
                 layer: LayerSpec | None = None,
                 generator: bool = False, truncate_dim: int | None = None) -> None:
        if pooling is not None and pooling not in POOLINGS:
            raise UserError(f"pooling={pooling!r}: choose one of {', '.join(POOLINGS)}")
        bound_kernel_cache()  # (texts of every length)
        model = hub.resolve(model, "--model")  # a hub id's folder, read before opening it
        st = sentence_transformers_folder(Path(model))
        if st is not None:  # its transformers folder and its own settings
            model = st.transformer
        part = encoder_part(model)  # a fine-tuned model's, or a run's discriminator
        if generator:
            if part == "classifier":
                raise UserError(f"--generator: {model} is a fine-tuned model, with no "
                                f"generator; give a pretraining run (or its checkpoint)")
            part = "generator"
        opened = open_model(model, part)
        layers = () if layer is None else truncate(opened[part], layer, str(model))
        if layer is None and st is not None and st.layers:  # its WeightedLayerPooling's
            layers = st.layers  # states, of its encoder as it is (not cut)
            if layers[-1] > (n := len(opened[part].encoder.layers)):  # type: ignore[union-attr, arg-type]
                raise UserError(f"{model}: its WeightedLayerPooling reads state "
                                f"{layers[-1]}, and its encoder has {n} blocks")
        tuned = fine_tuned(model)
        own = head_of(opened.meta).sentence_embedding(opened.meta) if tuned else (
            (st.pooling, st.normalize) if st else None)
        pooling = pooling or (own[0] if own else "mean")
        normalize = (own[1] if own else True) if normalize is None else normalize
        self.module = placed(opened[part], device).eval()  # (auto: CUDA when present)
        self.encoder = self.module.encoder  # type: ignore[union-attr]
        self.model = Pooled(self.encoder, pooling, normalize, layers)
        self.tok = load_tokenizer(opened.tokenizer)
        limit = self.module.config.max_position_embeddings  # type: ignore[union-attr]
        trained = (st.max_length if st else trained_length(opened.meta) if tuned else None)
        self.max_length = min(max_length or trained or limit, limit)
        self.pooling, self.normalize, self.precision = pooling, normalize, precision
        self.prompts = (dict(st.prompts) if st else  # a fine-tuned model's own
                        head_of(opened.meta).prompts(opened.meta) if tuned else {})
        self.default_prompt = st.default_prompt if st else None
        self.lowercase = bool(st and st.lowercase)
        width = int(self.module.config.hidden_size)  # type: ignore[union-attr, arg-type]
        self.truncate_dim = _dims(truncate_dim or (st.truncate_dim if st else None), width)

    def encode(self, sentences: list[str], batch_size: int = 32,
               prompt_name: str | None = None, prompt: str | None = None,
               show_progress_bar: bool = False, **_: Any) -> np.ndarray:
        """(len(sentences), H) float32 embeddings, in order. Batches hold texts of similar
        length (longest first), each cut to its longest, so little padding is computed.
        ``prompt`` (or the model's prompt named ``prompt_name``, else its default one) goes
        before each text, as sentence-transformers puts it; ``show_progress_bar``: a bar on
        a terminal, a line every ELECTRA_PROGRESS_SECONDS in a log (:mod:`electra.io.progress`;
        the commands' own bars count these texts too)."""
        if isinstance(sentences, str):
            raise UserError("encode takes a list of texts; give [text] for one")
        if prompt is None and (prompt_name or self.default_prompt):
            name = prompt_name or self.default_prompt
            if name not in self.prompts:
                raise UserError(f"prompt_name={name!r}: the model's prompts are "
                                f"{', '.join(map(repr, self.prompts)) or 'none'}")
            prompt = self.prompts[name]
        if not len(sentences):
            return np.zeros((0, self.truncate_dim), dtype=np.float32)
        texts = [(prompt or "") + s for s in sentences]
        if self.lowercase:
            texts = [t.lower() for t in texts]
        batch = encode_texts(self.tok, texts, self.max_length)
        with (reporting(len(texts), "encoding", "text") if show_progress_bar
              else contextlib.nullcontext()):
            v = logits(self.model, batch, self.precision, batch_size)
        if v.shape[1] > self.truncate_dim:  # Matryoshka: the first D, renormalised
            v = v[:, :self.truncate_dim]
            if self.normalize:
                v = v / v.norm(dim=1, keepdim=True).clamp(min=1e-12)
        return v.numpy()

    def prompt_for(self, *names: str) -> str | None:
        """The first of ``names`` the model has a prompt for (retrieval's queries: query;
        documents: document, passage or corpus, as sentence-transformers' models name
        them)."""
        return next((n for n in names if n in self.prompts), None)


def encode(model: str | Path, texts: list[str], pooling: str | None = None,
           normalize: bool | None = None, batch_size: int = 32, device: str = "auto",
           layer: LayerSpec | None = None, generator: bool = False,
           truncate_dim: int | None = None) -> np.ndarray:
    """The embeddings of ``texts`` (the Python API's ``electra.encode``): ``layer`` N pools
    the states of block N (negative: from the top), ``[2, 4]`` or ``"2,4"`` the mean of
    several (transformers' ``hidden_states`` of the encoder cut after the highest: 0 the
    embeddings); ``generator``: a run's generator's
    encoder instead of its discriminator's; ``truncate_dim`` D: each embedding's first D
    dimensions (renormalised), a Matryoshka model's smaller embedding."""
    return Encoder(model, pooling, normalize, device=device, layer=layer,
                   generator=generator, truncate_dim=truncate_dim).encode(texts, batch_size)


def _dims(given: int | None, width: int) -> int:
    """The dimensions an Encoder keeps: ``given`` (checked against the model's ``width``),
    else all."""
    if given is None:
        return width
    if not 0 < given <= width:
        raise UserError(f"truncate_dim={given}: the model's embeddings have {width} "
                        f"dimensions; give 1-{width}")
    return given
