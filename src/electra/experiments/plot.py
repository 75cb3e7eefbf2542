"""`electra plot RUN`: a run's curves as one PNG.

A pretraining run: losses, accuracies and fractions of tokens over steps. A fine-tuning
output (``OUT/seed-N/metrics.jsonl``): training loss and each dev metric per epoch, one line
per seed (what ``OUT.partial`` holds so far, while it runs).
"""

from __future__ import annotations

from pathlib import Path

from electra.errors import UserError
from electra.io.outputs import PNG_SOFTWARE, check_file_out, write_file
from electra.train.metrics import iter_metrics


def main(run: str, out: str | None = None) -> None:
    """`electra plot RUN`."""
    print(f"wrote {plot_run(run, out)}")


def pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UserError("plotting needs matplotlib: pip install matplotlib") from None
    return plt


def plot_run(run: str | Path, out: str | Path | None = None) -> Path:
    """Write the figure of a pretraining run or a fine-tuning output; returns the PNG's path."""
    out = check_file_out(Path(out) if out else Path(run) / "curves.png", "plot",
                         [("the run", Path(run) / "metrics.jsonl")], suffix=".png")
    seeds = sorted(Path(run).glob("seed-*/metrics.jsonl"))
    if seeds and not (Path(run) / "metrics.jsonl").is_file():
        return _plot_finetune(Path(run), seeds, out)
    plt = pyplot()
    records = list(iter_metrics(run))
    if not records:
        raise UserError(f"{run}/metrics.jsonl is empty; nothing to plot yet")

    def series(key: str) -> tuple[list[int], list[float]]:
        pts = [(r["step"], r[key]) for r in records if key in r]
        return [p[0] for p in pts], [p[1] for p in pts]

    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    panels = [
        ("Generator loss (MLM)", ["gen_loss", "val_gen_loss"]),
        ("Discriminator loss (RTD)", ["disc_loss", "val_disc_loss"]),
        ("Accuracy", ["gen_acc", "disc_acc", "val_disc_acc", "val_baseline_acc",
                      "val_disc_auc"]),
        ("Fractions of tokens", ["masked_frac", "replaced_frac", "sampled_original_frac"]),
    ]
    for ax, (title, keys) in zip(axes.flat, panels, strict=True):
        for key in keys:
            x, y = series(key)
            if x:
                style = "o--" if key.startswith("val_") else "-"
                ax.plot(x, y, style, label=key, markersize=3)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{Path(run).name}: {records[-1]['tokens']:,} tokens, step "
                 f"{records[-1]['step']:,}")
    fig.tight_layout()
    _save(fig, out)
    plt.close(fig)
    return out


def _save(fig, out: Path) -> None:
    """The figure as a PNG at ``out`` (written whole, marked as electra plot's)."""
    write_file(out, lambda part: fig.savefig(part, dpi=100, format="png",
                                             metadata={"Software": PNG_SOFTWARE}), "plot")


def _plot_finetune(run: Path, seeds: list[Path], out: Path) -> Path:
    """Training loss and every dev metric against epochs, one line per seed."""
    plt = pyplot()
    runs = {path.parent.name: list(iter_metrics(path.parent)) for path in seeds}
    metrics = sorted({k for records in runs.values() for r in records for k in r
                      if k not in ("step", "tokens", "lr", "loss", "grad_norm", "epoch",
                                   "tokens_per_s")})
    fig, axes = plt.subplots(1, 1 + len(metrics), figsize=(5 * (1 + len(metrics)), 4),
                             squeeze=False)
    for ax, key in zip(axes[0], ["loss", *metrics], strict=True):
        for name, records in runs.items():
            pts = [(r["epoch"], r[key]) for r in records if key in r and "epoch" in r]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=name,
                        markersize=3)
        ax.set_title("training loss" if key == "loss" else key.replace("_", " "))
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{run.name}: {len(runs)} seed(s)")
    fig.tight_layout()
    _save(fig, out)
    plt.close(fig)
    return out
