"""`electra plot RUN`: losses, accuracies and replaced fraction over steps, as one PNG."""

from __future__ import annotations

from pathlib import Path

from electra.errors import UserError
from electra.files import check_writable, disk_errors
from electra.metrics import iter_metrics


def main(run: str, out: str | None = None) -> None:
    """`electra plot RUN`."""
    print(f"wrote {plot_run(run, out)}")


def plot_run(run: str | Path, out: str | Path | None = None) -> Path:
    """Write a 2x2 figure of the run's metrics.jsonl; returns the PNG's path."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UserError("plotting needs matplotlib: pip install matplotlib") from None
    out = Path(out) if out else Path(run) / "curves.png"
    if out.is_dir():
        raise UserError(f"--out {out} is a folder; give the path of a .png file")
    check_writable(out)
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
    with disk_errors(out):
        fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
