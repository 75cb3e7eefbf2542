"""Fine-tuning and evaluating the discriminator on a sentence (pair) task.

The paper's recipe as defaults: AdamW, lr 3e-4 for small-size and 1e-4 for base-size models,
layer-wise learning-rate decay 0.8 (0.9 for 24-layer models), 10% warmup then linear decay,
3 epochs (10 for RTE and STS-B), batch 32, max length 128.

Layer-wise decay, applied as the paper describes (the original code's off-by-one gives the
top layer decay²): the task head and the top layer train at the full rate, each layer below
is multiplied by the decay once more, and the embeddings sit one step below layer 0.

    OUT/seed-S/   model.safetensors, config.json (labels, task), tokenizer files
    OUT/seed-S/predictions/   GLUE submission files (with --predict test)
    OUT/results.json, OUT/results.md   per-seed metrics and their medians
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from electra.atomic import publish, staging_dir
from electra.config import ModelConfig, config_from_dict
from electra.data.tasks import Example, compute_metrics, label_map
from electra.distributed import DEFAULT_TIMEOUT_S
from electra.errors import UserError
from electra.model import Encoder, init_weights
from electra.optim import no_decay, warmup_linear


class SequenceClassifier(nn.Module):
    """Encoder + ELECTRA's head on [CLS]: dense -> GELU -> dropout -> dense (1 for regression).

    Keys map onto transformers' ElectraForSequenceClassification (classifier.dense,
    classifier.out_proj).
    """

    def __init__(self, cfg: ModelConfig, num_labels: int) -> None:
        super().__init__()
        self.config = cfg
        self.num_labels = num_labels
        self.encoder = Encoder(cfg)
        self.head_dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.head_dropout = nn.Dropout(cfg.hidden_dropout)
        self.head_out = nn.Linear(cfg.hidden_size, num_labels)
        init_weights(self, cfg.initializer_range)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None) -> torch.Tensor:
        h = self.encoder(input_ids, token_type_ids, attention_mask)[:, 0]  # [CLS], (B, H)
        h = self.head_dropout(F.gelu(self.head_dense(self.head_dropout(h))))
        return self.head_out(h)  # (B, num_labels)


def layer_depth(name: str, num_layers: int) -> int:
    """0 for embeddings, i+1 for block i, num_layers+1 for the task head."""
    if name.startswith("encoder.embeddings"):  # also encoder.embeddings_project
        return 0
    if name.startswith("encoder.layers."):
        return int(name.split(".")[2]) + 1
    return num_layers + 1


def layerwise_groups(model: SequenceClassifier, lr: float, decay: float,
                     weight_decay: float) -> list[dict[str, Any]]:
    """One param group per (depth, decay-or-not): lr * decay ** max(0, L - depth)."""
    L = model.config.num_layers
    groups: dict[tuple[int, bool], dict[str, Any]] = {}
    for name, p in model.named_parameters():
        depth = layer_depth(name, L)
        plain = no_decay(name, p)
        g = groups.setdefault((depth, plain), {
            "params": [], "lr": lr * decay ** max(0, L - depth),
            "weight_decay": 0.0 if plain else weight_decay, "depth": depth})
        g["params"].append(p)
    return list(groups.values())


@dataclass
class FinetuneConfig:
    lr: float | None = None  # None: 3e-4 up to width 256, else 1e-4
    layer_decay: float | None = None  # None: 0.8, or 0.9 for 24+ layers
    epochs: int | None = None  # None: 3, or 10 for RTE and STS-B
    batch_size: int = 32
    max_length: int = 128
    warmup_fraction: float = 0.1
    weight_decay: float = 0.01
    precision: str = "bf16"
    double_pairs: bool = False  # MRPC/STS-B: also train on (b, a), as the original can
    max_train_examples: int = 0  # >0: a fixed random subset (the same for every seed)

    def resolved(self, model_cfg: ModelConfig, task: str) -> FinetuneConfig:
        out = FinetuneConfig(**asdict(self))
        if out.lr is None:
            out.lr = 3e-4 if model_cfg.hidden_size <= 256 else 1e-4
        if out.layer_decay is None:
            out.layer_decay = 0.9 if model_cfg.num_layers >= 24 else 0.8
        if out.epochs is None:
            out.epochs = 10 if task in ("rte", "stsb") else 3
        if out.max_length > model_cfg.max_position_embeddings:
            raise UserError(f"--set max_length={out.max_length} exceeds the model's "
                            f"{model_cfg.max_position_embeddings} positions")
        return out


@dataclass
class TaskData:
    name: str
    train: list[Example]
    dev: dict[str, list[Example]]
    metrics: tuple[str, ...]
    regression: bool
    labels: dict[str, int] = field(default_factory=dict)
    test: dict[str, list[Example]] = field(default_factory=dict)  # for --predict test


def encode(tok: Any, examples: list[Example], max_length: int,
           labels: dict[str, int] | None, regression: bool) -> dict[str, torch.Tensor]:
    """Tokenize ([CLS] A [SEP] B [SEP]), truncate to max_length, pad to the longest."""
    tok.enable_truncation(max_length)
    pad_id = tok.token_to_id("[PAD]")
    tok.enable_padding(pad_id=pad_id, pad_token="[PAD]")
    inputs = [(e.text_a, e.text_b) if e.text_b is not None else e.text_a for e in examples]
    encs = tok.encode_batch(inputs)
    out = {
        "input_ids": torch.tensor([e.ids for e in encs]),
        "token_type_ids": torch.tensor([e.type_ids for e in encs]),
        "attention_mask": torch.tensor([e.attention_mask for e in encs]),
    }
    if all(e.label is not None for e in examples):
        if regression:
            out["labels"] = torch.tensor([float(e.label) for e in examples])
        else:
            assert labels is not None
            out["labels"] = torch.tensor([labels[str(e.label)] for e in examples])
    return out


def _loss(logits: torch.Tensor, labels: torch.Tensor, regression: bool) -> torch.Tensor:
    if regression:
        return F.mse_loss(logits.squeeze(-1).float(), labels.float())
    return F.cross_entropy(logits.float(), labels)


@torch.no_grad()
def predict(model: SequenceClassifier, batch: dict[str, torch.Tensor], regression: bool,
            precision: str = "bf16", batch_size: int = 128) -> torch.Tensor:
    from electra.pretrain import autocast

    model.eval()
    device = next(model.parameters()).device
    outs = []
    for i in range(0, len(batch["input_ids"]), batch_size):
        part = {k: v[i : i + batch_size].to(device) for k, v in batch.items() if k != "labels"}
        with autocast(device, precision):
            logits = model(part["input_ids"], part["token_type_ids"], part["attention_mask"])
        outs.append(logits.float().cpu())
    logits = torch.cat(outs)
    return logits.squeeze(-1) if regression else logits.argmax(-1)


def finetune_one(init: Path | None, model_cfg: ModelConfig, tok: Any, data: TaskData,
                 cfg: FinetuneConfig, seed: int, place: Any = None,
                 device: torch.device | None = None,
                 ) -> tuple[SequenceClassifier, dict[str, Any] | None]:
    """Fine-tune from the discriminator at ``init`` (or random weights if None); dev metrics.

    Under torchrun each process trains on its rows of every batch (DDP); rank 0 evaluates
    (the others get None).
    """
    from electra import distributed as dd
    from electra.pretrain import autocast

    place = place or dd.Dist()
    device = device or torch.device("cpu")
    torch.manual_seed(seed)
    n_out = 1 if data.regression else len(data.labels)
    model = SequenceClassifier(model_cfg, n_out)
    if init is not None:
        disc = load_file(str(init / "model.safetensors"))
        enc = {k[len("encoder."):]: v for k, v in disc.items() if k.startswith("encoder.")}
        model.encoder.load_state_dict(enc)
    train_ex = list(data.train)
    if 0 < cfg.max_train_examples < len(train_ex):
        pick = torch.randperm(len(train_ex), generator=torch.Generator().manual_seed(0))
        train_ex = [train_ex[i] for i in sorted(pick[: cfg.max_train_examples].tolist())]
    if cfg.double_pairs:
        train_ex += [Example(e.text_b, e.text_a, e.label) for e in train_ex
                     if e.text_b is not None]
    train = encode(tok, train_ex, cfg.max_length, data.labels, data.regression)
    n = len(train_ex)
    steps_per_epoch = max(1, n // cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    model = model.to(device)
    opt = torch.optim.AdamW(layerwise_groups(model, cfg.lr, cfg.layer_decay,
                                             cfg.weight_decay), eps=1e-6,
                            **({"fused": True} if device.type == "cuda" else {"foreach": True}))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, warmup_linear(int(cfg.warmup_fraction * total), total))
    g = torch.Generator().manual_seed(seed)  # the batch order: the same on every rank
    torch.manual_seed(dd.rank_seed(seed, place.rank))  # dropout: each rank its own
    step_model: nn.Module = model
    if place.enabled:
        from torch.nn.parallel import DistributedDataParallel

        step_model = DistributedDataParallel(
            model, device_ids=[device] if device.type == "cuda" else None)
    per_rank = cfg.batch_size // place.world_size
    model.train()
    for _ in range(cfg.epochs):
        order = torch.randperm(n, generator=g)
        for s in range(steps_per_epoch):
            first = s * cfg.batch_size + place.rank * per_rank
            idx = order[first : first + per_rank]
            b = {k: v[idx] for k, v in train.items()}
            keep = int(b["attention_mask"].sum(1).max())  # drop all-pad columns
            b = {k: (v[:, :keep] if v.ndim == 2 else v).to(device) for k, v in b.items()}
            with autocast(device, cfg.precision):
                logits = step_model(b["input_ids"], b["token_type_ids"], b["attention_mask"])
            loss = _loss(logits, b["labels"], data.regression)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
    return model, evaluate_model(model, tok, data, cfg) if place.is_main else None


def evaluate_model(model: SequenceClassifier, tok: Any, data: TaskData,
                   cfg: FinetuneConfig) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for split, examples in data.dev.items():
        batch = encode(tok, examples, cfg.max_length, data.labels, data.regression)
        preds = predict(model, batch, data.regression, cfg.precision)
        results[split] = compute_metrics(data.metrics, preds.numpy(), batch["labels"].numpy())
    return results


def write_predictions(model: SequenceClassifier, tok: Any, data: TaskData,
                      cfg: FinetuneConfig, folder: Path) -> list[Path]:
    """GLUE submission files for the test splits (labels by name; STS-B scores in [0, 5])."""
    from electra.data.tasks import SUBMISSION_FILES, write_submission

    names = {i: label for label, i in data.labels.items()}
    written = []
    for split, examples in data.test.items():
        batch = encode(tok, examples, cfg.max_length, data.labels, data.regression)
        preds = predict(model, batch, data.regression, cfg.precision)
        if data.regression:
            shown = [f"{v:.3f}" for v in preds.clamp(0.0, 5.0).tolist()]
        else:
            shown = [names[i] for i in preds.tolist()]
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / SUBMISSION_FILES.get((data.name, split), f"{data.name}-{split}.tsv")
        write_submission(path, examples, shown)
        written.append(path)
    return written


def save_classifier(model: SequenceClassifier, folder: Path, data: TaskData,
                    cfg: FinetuneConfig, tok_json: str) -> None:
    from tokenizers import Tokenizer

    from electra.tokenizer import save_tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()},
              str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({
        "format_version": 1, "kind": "classifier", "model": model.config.to_dict(),
        "task": data.name, "labels": data.labels, "regression": data.regression,
        "metrics": list(data.metrics), "finetune": asdict(cfg)}, indent=2))
    save_tokenizer(Tokenizer.from_str(tok_json), folder)


def load_classifier(folder: str | Path) -> tuple[SequenceClassifier, dict[str, Any]]:
    folder = Path(folder)
    path = folder / "config.json"
    if not path.is_file() or not (folder / "model.safetensors").is_file():
        raise UserError(f"--model {folder}: not a fine-tuned model (config.json and "
                        f"model.safetensors); give OUT/seed-N from `electra finetune`")
    meta = json.loads(path.read_text())
    if meta.get("kind") != "classifier":
        raise UserError(f"--model {folder}: holds a {meta.get('kind')}, not a fine-tuned "
                        f"classifier")
    cfg = config_from_dict(ModelConfig, meta["model"], str(path))
    model = SequenceClassifier(cfg, 1 if meta["regression"] else len(meta["labels"]))
    model.load_state_dict(load_file(str(folder / "model.safetensors")))
    return model, meta


def _resolve_init(model_dir: str | Path | None, model_cfg: ModelConfig | None,
                  tokenizer: str | Path | None) -> tuple[Path | None, ModelConfig, Any]:
    init = None
    if model_dir is not None:
        model_dir = Path(model_dir)
        init = model_dir / "discriminator" if (model_dir / "discriminator").is_dir() else model_dir
        if not (init / "model.safetensors").is_file():
            raise UserError(f"--model {model_dir}: no discriminator weights "
                            f"(model.safetensors); give a pretraining run or its "
                            f"discriminator/ folder")
        meta = json.loads((init / "config.json").read_text())
        model_cfg = config_from_dict(ModelConfig, meta["model"], str(init / "config.json"))
        tokenizer = init
    assert model_cfg is not None and tokenizer is not None
    return init, model_cfg, tokenizer


def run_finetune(model_dir: str | Path | None, model_cfg: ModelConfig | None, data: TaskData,
                 out: str | Path, cfg: FinetuneConfig, seeds: list[int],
                 overwrite: bool = False, tokenizer: str | Path | None = None,
                 device: str = "auto", dist_timeout: float = DEFAULT_TIMEOUT_S) -> dict | None:
    """Fine-tune once per seed; write per-seed models, results.json and results.md.

    Under torchrun the processes share each batch (DDP) and rank 0 evaluates and writes;
    it returns the results there and None elsewhere.
    """
    from electra import distributed as dd
    from electra.pretrain import resolve_device
    from electra.tokenizer import load_tokenizer

    out = Path(out)
    place, dev = dd.setup(resolve_device(device), dist_timeout)

    def check() -> tuple[Path | None, ModelConfig, Any, FinetuneConfig]:
        if place.is_main and out.exists() and any(out.iterdir()) and not overwrite:
            raise UserError(f"--out {out} already exists; pass --overwrite or choose another")
        init, m_cfg, tok_path = _resolve_init(model_dir, model_cfg, tokenizer)
        resolved = cfg.resolved(m_cfg, data.name)
        if resolved.batch_size % place.world_size:
            raise UserError(f"--set batch_size={resolved.batch_size} does not split into "
                            f"{place.world_size} processes; choose a multiple of "
                            f"{place.world_size}")
        return init, m_cfg, load_tokenizer(tok_path), resolved

    init, m_cfg, tok, cfg = dd.agree(place, check, "checking the fine-tuning inputs")
    if not data.regression and not data.labels:
        data.labels = label_map(data.train, [e for d in data.dev.values() for e in d])
    final = out
    if place.is_main:
        out = staging_dir(out)  # written into OUT.partial, published at the end
    per_seed = {}
    for seed in seeds:
        t0 = time.perf_counter()
        model, res = finetune_one(init, m_cfg, tok, data, cfg, seed, place, dev)
        if place.is_main:
            save_classifier(model.cpu(), out / f"seed-{seed}", data, cfg, tok.to_str())
            if data.test:
                write_predictions(model, tok, data, cfg, out / f"seed-{seed}" / "predictions")
            per_seed[seed] = res
            print(f"seed {seed}: {json.dumps(res)} ({time.perf_counter() - t0:.0f}s)",
                  flush=True)
    if not place.is_main:
        dd.barrier(place)
        return None
    median = {split: {m: statistics.median(per_seed[s][split][m] for s in seeds)
                      for m in data.metrics} for split in data.dev}
    results = {"task": data.name, "model": str(model_dir) if model_dir else "random-init",
               "config": asdict(cfg), "seeds": per_seed, "median": median}
    (out / "results.json").write_text(json.dumps(results, indent=2))
    lines = [f"| split | metric | {' | '.join(f'seed {s}' for s in seeds)} | median |",
             f"|---|---|{'---|' * len(seeds)}---|"]
    for split in data.dev:
        for m in data.metrics:
            vals = " | ".join(f"{per_seed[s][split][m]:.4f}" for s in seeds)
            lines.append(f"| {split} | {m} | {vals} | {median[split][m]:.4f} |")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    publish(out, final)
    print("\n".join(lines))
    dd.barrier(place)
    return results
