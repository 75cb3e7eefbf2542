"""`electra compare`'s results: each model's scores per task and seed, medians, the table
with the average, and the plot of score against pretraining FLOPs."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from electra.experiments.compare_plan import Plan
from electra.experiments.compare_spec import RANDOM_INIT, Task
from electra.experiments.plot import pyplot


def task_score(result: dict[str, Any], task: Task) -> list[float]:
    """The task's paper metric (x100) for each seed, from a fine-tune's results.json; an
    undefined score (a correlation of constant predictions: NaN) counts 0, what such a
    prediction is worth, so one seed cannot turn the average into NaN."""
    return [0.0 if math.isnan(v := seed_result["dev"][task.metric]) else 100 * v
            for seed_result in result["seeds"].values()]

def _undefined_seeds(result: dict[str, Any], task: Task) -> list[int]:
    return [int(s) for s, seed_result in result["seeds"].items()
            if math.isnan(seed_result["dev"][task.metric])]

def averaged(plan: Plan) -> list[Task]:
    """The tasks the average is over: the full fine-tunes (``--probe beside`` keeps its
    probes out of it), or the probes where there are only probes."""
    tasks = [t for t in plan.tasks if not t.zero_shot]  # embedding scores stand beside it
    return [t for t in tasks if not t.probe] or tasks


def summarize(plan: Plan, scores: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """results.json: per model, its pretraining FLOPs and, per task and for the average,
    every seed's score, the median, min and max (the models fine-tuned on every task so
    far: all of them at the end)."""
    models, over = [], averaged(plan)
    for name, objective, fraction, flops in plan.models():
        if any(t.name not in scores.get(name, {}) for t in plan.tasks):
            continue  # not yet fine-tuned on every task
        per_task = {}
        for task in plan.tasks:
            result = scores[name][task.name]
            per_task[task.name] = _spread(task_score(result, task))
            per_task[task.name]["warned_seeds"] = [
                int(s) for s, d in result.get("details", {}).items() if d.get("warnings")]
            if undefined := _undefined_seeds(result, task):
                per_task[task.name]["undefined_seeds"] = undefined
        seeds = [statistics.mean(per_task[t.name]["seeds"][i] for t in over)
                 for i in range(len(plan.seeds))] if over else []
        models.append({"model": name, "objective": objective, "fraction": fraction,
                       "pretrain_flops": flops,
                       "steps": (plan.ends(objective)[plan.fractions.index(fraction)]
                                 if objective else 0),
                       "tasks": per_task, "average": _spread(seeds) if seeds else None})
    bm25 = {t.name: scores[name][t.name]["bm25"] for name in scores for t in plan.tasks
            if "bm25" in scores[name].get(t.name, {})}  # the same for every model
    return {"budget_flops": plan.budget_flops, "seeds": plan.seeds,
            **({"baselines": {"bm25": bm25}} if bm25 else {}),
            "metrics": {t.name: t.metric for t in plan.tasks},
            "steps": {o: c.train.max_steps for o, c in plan.objectives.items()},
            "flops_per_step": plan.flops_per_step, "models": models}

def _spread(values: list[float]) -> dict[str, Any]:
    return {"seeds": [round(v, 4) for v in values], "median": round(statistics.median(values),
                                                                    4),
            "min": round(min(values), 4), "max": round(max(values), 4)}

def table(plan: Plan, results: dict[str, Any]) -> str:
    """Markdown: one row per objective at each budget fraction, one column per task and (with
    several tasks) the average; medians over seeds (min-max)."""
    names = [t.name for t in plan.tasks]
    metric = {t.name: t.metric for t in plan.tasks}
    avg = len(averaged(plan)) > 1
    head = " | ".join([f"{n} ({metric[n]})" for n in names] + (["average"] if avg else []))
    lines = [f"| model | budget | pretraining FLOPs | steps | {head} |",
             f"|---|---|---|---|{'---|' * (len(names) + avg)}"]
    for m in results["models"]:
        cells = [_cell(m["tasks"][n])
                 + (" !" if m["tasks"][n]["warned_seeds"] else "") for n in names]
        if avg:
            cells.append(_cell(m["average"]))
        budget = f"{m['fraction']:.0%}" if m["objective"] else "-"
        lines.append(f"| {m['objective'] or RANDOM_INIT} | {budget} | "
                     f"{m['pretrain_flops']:.3g} | {m['steps']} | {' | '.join(cells)} |")
    seeds = ",".join(map(str, plan.seeds))
    warned = any(m["tasks"][n]["warned_seeds"] for m in results["models"] for n in names)
    undefined = any(m["tasks"][n].get("undefined_seeds") for m in results["models"]
                    for n in names)
    zero = [t.name for t in plan.tasks if t.zero_shot]
    return ("\n".join(lines) + f"\n\nMedian over seeds {seeds} of each task's dev score x100 "
            f"(min-max in brackets)" + (f"; the average is each seed's mean over "
                                        f"{', '.join(t.name for t in averaged(plan))}."
                                        if avg else ".")
            + (f" {', '.join(zero)}: each model's embeddings as they are (mean pooling, no "
               f"fine-tuning), one score x100." if zero else "")
            + "".join(f" BM25 on {t} (bm25s, no model): {100 * v:.1f}." for t, v in
                      results.get("baselines", {}).get("bm25", {}).items())
            + ("\n! a seed predicted one class everywhere or its training loss never fell: "
               "see finetune/MODEL/TASK/results.md" if warned else "")
            + ("\nA seed whose score is undefined (a correlation of constant predictions) "
               "counts 0 (results.json: undefined_seeds)." if undefined else ""))

def _cell(s: dict[str, Any]) -> str:
    many = len(s["seeds"]) > 1
    return f"{s['median']:.1f}" + (f" ({s['min']:.1f}-{s['max']:.1f})" if many else "")

def plot(plan: Plan, results: dict[str, Any], path: Path) -> Path:
    """compare.png: one panel per task and one for the average; score against pretraining
    FLOPs, a line per objective (median, min-max bars over seeds), random init flat."""
    plt = pyplot()
    panels = [t.name for t in plan.tasks] + (["average"] if len(averaged(plan)) > 1 else [])
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, panels, strict=False):
        for objective in plan.objectives:
            pts = [m for m in results["models"] if m["objective"] == objective]
            stats = [m["average"] if panel == "average" else m["tasks"][panel] for m in pts]
            x = [m["pretrain_flops"] for m in pts]
            y = [s["median"] for s in stats]
            err = [[s["median"] - s["min"] for s in stats], [s["max"] - s["median"]
                                                             for s in stats]]
            ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=objective)
        rand = next(m for m in results["models"] if m["objective"] is None)
        s = rand["average"] if panel == "average" else rand["tasks"][panel]
        ax.axhline(s["median"], color="gray", linestyle="--", label=RANDOM_INIT)
        ax.axhspan(s["min"], s["max"], color="gray", alpha=0.15)
        metric = "mean" if panel == "average" else {t.name: t.metric for t in plan.tasks}[panel]
        ax.set_title(f"{panel} ({metric})")
        ax.set_xlabel("pretraining FLOPs")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(f"equal compute: {plan.budget_flops:.3g} training FLOPs per objective, "
                 f"seeds {','.join(map(str, plan.seeds))}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
