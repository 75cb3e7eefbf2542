"""A linear probe during pretraining (``train.probe_every``): the discriminator's encoder as
it is now, frozen, with a sequence head trained on a small labelled task and scored on its
dev file, so a run shows representation quality while it trains, not only after.

The probe is a fine-tune of its own (``electra.train.finetuning``, ``freeze=encoder``, lr
1e-3, fixed seed) on a copy of the encoder's weights in this process alone, with the
random state saved and restored around it: the pretraining's numbers are the same with or
without probes.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from electra.config import FinetuneConfig, ModelConfig, TrainConfig
from electra.data.tokenizer import load_tokenizer
from electra.runtime import Runtime
from electra.tasks.base import TaskData
from electra.tasks.registry import load_task
from electra.train.finetuning import ModelSource, evaluate_model, finetune_one

if TYPE_CHECKING:
    from tokenizers import Tokenizer  # (the types only: the readers stay light)


class Probe:
    """The probe's task, read (and checked) once when the run starts."""

    SEED = 1

    def __init__(self, tc: TrainConfig, tokenizer: Path) -> None:
        self.data: TaskData = load_task("custom", train=tc.probe_train, dev=tc.probe_dev,
                                        text_columns=tc.probe_text_columns,
                                        label_column=tc.probe_label_column)
        self.tokenizer = tokenizer  # the run's (written once the run folder is)
        self.tok: Tokenizer | None = None
        self.cfg = FinetuneConfig(freeze="encoder", lr=1e-3, epochs=tc.probe_epochs,
                                  max_train_examples=tc.probe_max_examples,
                                  precision=tc.precision)
        self.data = self.data.head.prepare(self.data, self.cfg)  # its labels, once

    def run(self, encoder: torch.nn.Module, model_cfg: ModelConfig,
            rt: Runtime) -> dict[str, float]:
        """``probe_<split>_<metric>`` of a probe on ``encoder``'s current weights."""
        # the probe's model loads a copy of the weights: the encoder itself is not touched
        source = ModelSource(None, model_cfg, self.tokenizer, "probe", encoder.state_dict())
        local = Runtime(device=rt.device, chosen_kernels=rt.chosen_kernels)
        cfg = dataclasses.replace(self.cfg, max_length=min(
            128, model_cfg.max_position_embeddings)).resolved(model_cfg)
        if self.tok is None:
            self.tok = load_tokenizer(self.tokenizer)
        with torch.random.fork_rng(devices=rt.device_ids or []):  # a GPU's state too
            model, _ = finetune_one(source, self.tok, self.data, cfg, self.SEED, local)
            scores: dict[str, Any] = evaluate_model(model, self.tok, self.data, cfg)
        return {f"probe_{split}_{m}": v for split, res in scores.items()
                for m, v in res.items()}
