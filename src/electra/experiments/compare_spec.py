"""`electra compare`'s settings: ``--tasks`` (a small task language), ``--objectives``,
``--fractions`` and ``--budget`` (FLOPs, a duration of this machine's compute, or demo)."""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from electra.config import parse_bool, parse_set
from electra.errors import UserError
from electra.evaluation.base import Evaluator
from electra.evaluation.registry import EVALUATORS
from electra.io.outputs import plain_name
from electra.objectives.registry import OBJECTIVES
from electra.tasks.registry import finetune_config
from electra.tasks.sequence.data import GLUE

RANDOM_INIT = "random-init"  # the models fine-tuned from random weights
FRACTIONS = (0.25, 0.5, 1.0)

GLUE_FOLDERS = {"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B",
                "qqp": "QQP", "mnli": "MNLI", "qnli": "QNLI", "rte": "RTE", "wnli": "WNLI"}

# The paper's dev metric per task (section 3.1): Spearman for STS-B, Matthews correlation for
# CoLA, accuracy for the others; a custom regression task: Spearman.
PAPER_METRIC = {"cola": "mcc", "stsb": "spearman"}

DEMO_FLOPS = 2.0e13
"""--budget demo: training FLOPs per objective for the tiny model: ~600 ELECTRA steps of 32
examples at an 8k vocabulary (the demo's run, about 1.5 minutes of a 2-core CPU)."""

DEMO_TASKS = "sst2:max_train_examples=2000"

DEFAULT_TASKS = "sst2,mrpc,stsb,rte"

_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?$")

@dataclass(frozen=True)
class Task:
    """One task of the comparison: a GLUE task or a custom file pair, with its settings."""

    name: str  # how results name it: sst2, or a custom task's name
    task: str  # the GLUE task, or "custom"
    folder: str | None = None  # GLUE: the task's folder
    train: str | None = None
    dev: str | None = None
    text_columns: str | None = None  # None: the task's default (custom: text)
    label_column: str | None = None  # (custom: label)
    regression: bool = False
    sets: tuple[str, ...] = ()  # fine-tuning settings for this task (key=value)

    @property
    def zero_shot(self) -> bool:
        """An evaluation of the model's embeddings as they are (``electra.evaluation``: no
        fine-tune, no seeds, outside the average)."""
        return self.task in EVALUATORS

    def evaluation(self) -> Evaluator:
        """A zero-shot task's evaluator, on its data (``folder``) and split (``dev``)."""
        return EVALUATORS[self.task](data=self.folder, split=self.dev)

    @property
    def probe(self) -> bool:
        """A linear probe (``--probe``): the encoder frozen, the head alone trained."""
        return "freeze=encoder" in self.sets

    @property
    def reading(self) -> dict[str, Any]:
        """What ``load_task`` reads the task from."""
        return dict(data=self.folder, train=self.train, dev=self.dev,
                    text_columns=self.text_columns, label_column=self.label_column,
                    regression=self.regression)

    @property
    def metric(self) -> str:
        if self.task == "custom":
            return "spearman" if self.regression else "accuracy"
        if self.zero_shot:
            return EVALUATORS[self.task].primary_metric
        return PAPER_METRIC.get(self.task, "accuracy")

def parse_tasks(text: str, glue: str | None) -> list[Task]:
    """``--tasks``: comma-separated ``TASK[:key=value...]``. TASK is a GLUE task (read from
    ``--glue DIR``, e.g. DIR/SST-2) or ``custom`` with ``name=``, ``train=FILE``,
    ``dev=FILE``, and optionally ``text=COL[+COL]``, ``label=COL``, ``regression=true``;
    any other key=value is a fine-tuning setting for that task (e.g.
    ``sst2:max_train_examples=10000``). An evaluation's name (``electra.evaluation``: ``sts``,
    GLUE's STS-B from ``--glue``; ``retrieval:data=PATH``, a BEIR folder or a SQuAD file,
    ``split=S``) scores each model's embeddings as they are, zero-shot."""
    tasks: list[Task] = []
    for spec in [s.strip() for s in text.split(",") if s.strip()]:
        head, *items = spec.split(":")
        key = head.lower().replace("-", "")
        if key in EVALUATORS:
            tasks.append(_zero_shot(key, spec, items, glue))
            continue
        if key not in GLUE and key != "custom":
            raise UserError(f"--tasks {head}: unknown task; valid tasks: {', '.join(GLUE)}, "
                            f"custom:name=N:train=FILE:dev=FILE, or an evaluation of "
                            f"embeddings: {', '.join(_any_model())}")
        opts = dict(parse_set(i, "max_train_examples=10000") for i in items)
        own = {k: opts.pop(k) for k in ("name", "train", "dev", "text", "label", "regression")
               if k in opts}
        sets = tuple(f"{k}={v}" for k, v in opts.items())
        finetune_config(dict(opts), f"--tasks {spec}")  # refuse bad keys now
        if key == "custom":
            missing = [k for k in ("name", "train", "dev") if k not in own]
            if missing:
                raise UserError(f"--tasks {spec}: a custom task needs {', '.join(missing)}, "
                                f"e.g. custom:name=reviews:train=train.csv:dev=dev.csv")
            name = plain_name(str(own["name"]), f"--tasks {head}:name")
            tasks.append(Task(name, "custom", None, str(own["train"]),
                              str(own["dev"]), str(own.get("text", "text")).replace("+", ","),
                              str(own.get("label", "label")),
                              parse_bool(own.get("regression", False),
                                         f"--tasks {spec}: regression"),
                              sets))
            continue
        if own:
            raise UserError(f"--tasks {spec}: {', '.join(own)} belong to custom tasks; a GLUE "
                            f"task is read from --glue DIR")
        if glue is None:
            raise UserError(f"--tasks {head} is a GLUE task: give --glue DIR, the folder "
                            f"holding {GLUE_FOLDERS[key]}/ (train.tsv, dev.tsv)")
        folder = Path(glue) / GLUE_FOLDERS[key]
        if not folder.is_dir() and (Path(glue) / key).is_dir():
            folder = Path(glue) / key
        if not folder.is_dir():
            raise UserError(f"--glue {glue}: no {GLUE_FOLDERS[key]}/ folder for task {key}; "
                            f"give the folder that holds GLUE's task folders")
        tasks.append(Task(key, key, str(folder), sets=sets))
    names = [t.name for t in tasks]
    if not tasks or len(set(names)) != len(names):
        raise UserError(f"--tasks {text}: give distinct tasks separated by commas, e.g. "
                        f"sst2,mrpc,stsb,rte")
    return tasks

def _any_model() -> list[str]:
    """The evaluations that score any model as it is (a comparison's zero-shot tasks)."""
    return [n for n, e in EVALUATORS.items() if e.any_model]


def _zero_shot(key: str, spec: str, items: list[str], glue: str | None) -> Task:
    """An evaluation's ``NAME[:key=value...]``: the model's embeddings scored as they are
    (``Task.folder``: the evaluation's data; ``dev``: its split). One that scores a model
    fine-tuned for it (rerank) is refused: a comparison scores each model as it is."""
    if not EVALUATORS[key].any_model:
        raise UserError(f"--tasks {spec.split(':')[0]}: scores a model fine-tuned for it "
                        f"(`electra finetune --task {key}`), and a comparison scores each "
                        f"pretrained model as it is; valid evaluations: "
                        f"{', '.join(_any_model())}")
    opts = dict(parse_set(i, "data=squad/dev-v1.1.json") for i in items)
    allowed = EVALUATORS[key].spec_keys
    extra = sorted(set(opts) - allowed)
    if extra:
        raise UserError(f"--tasks {spec}: {key} takes no {', '.join(extra)} (it fine-tunes "
                        f"nothing: each model's embeddings are scored as they are)"
                        + (f"; give {' and '.join(f'{k}=...' for k in sorted(allowed))}"
                           if allowed else ""))
    ev = EVALUATORS[key].from_spec(opts, glue, spec)
    return Task(key, key, str(ev.data), dev=ev.split)


PROBE_SETS = ("freeze=encoder", "lr=1e-3")  # a task's own settings come after (and win)


def with_probes(tasks: list[Task], probe: str | None) -> list[Task]:
    """``--probe beside``: each task also as TASK-probe, a linear probe (the encoder frozen,
    only the head trained, at lr 1e-3 unless the task sets lr); ``--probe only``: the probes
    alone; None: the full fine-tunes alone."""
    if probe is None:
        return tasks
    probes = [dataclasses.replace(t, name=f"{t.name}-probe", sets=(*PROBE_SETS, *t.sets))
              for t in tasks if not t.zero_shot]
    return probes if probe == "only" else [*tasks, *probes]


@dataclass(frozen=True)
class Variant:
    """One pretraining run of the comparison: an objective kind with its own objective
    settings (``KIND[:key=value...][:name=NAME]``), named in the results by ``name``."""

    name: str
    kind: str
    sets: tuple[tuple[str, Any], ...] = ()

    @property
    def given(self) -> dict[str, Any]:
        return dict(self.sets)


def parse_objectives(text: str) -> list[Variant]:
    """``--objectives``: comma-separated ``KIND[:key=value...]``, each an objective kind
    with objective settings of its own (``electra:mask_prob=0.3:mask_prob_end=0.15``,
    ``fast_electra:generator=RUN``) and an optional ``name=NAME`` for its rows (else the
    kind's; a kind that comes twice names each)."""
    out: list[Variant] = []
    for spec in [s.strip() for s in text.split(",") if s.strip()]:
        kind, *items = spec.split(":")
        if kind not in OBJECTIVES:
            raise UserError(f"--objectives {text}: unknown objective {kind!r}; valid: "
                            f"{', '.join(OBJECTIVES)}")
        opts = dict(parse_set(i, "mask_prob=0.3") for i in items)
        name = opts.pop("name", None)
        if "kind" in opts:
            raise UserError(f"--objectives {spec}: the kind is the item's first word; drop "
                            f"kind=")
        sets = tuple(sorted(opts.items()))
        shown = kind if name is None else plain_name(str(name), f"--objectives {spec}: name")
        out.append(Variant(shown, kind, sets))
    names = [v.name for v in out]
    if not out or len(set(names)) != len(names):
        raise UserError(f"--objectives {text}: give distinct objectives (a kind that comes "
                        f"twice names each: electra:mask_prob_end=0.15:name=electra-sched); "
                        f"valid kinds: "
                        f"{', '.join(OBJECTIVES)}")
    return out

def parse_fractions(text: str) -> list[float]:
    try:
        values = sorted({float(s) for s in text.split(",") if s.strip()})
    except ValueError:
        values = []
    if not values or not all(0 < v <= 1 for v in values) or values[-1] != 1.0:
        raise UserError(f"--fractions {text}: give fractions of the budget in (0, 1], ending "
                        f"with 1, e.g. 0.25,0.5,1")
    return values

def parse_budget(text: str) -> tuple[str, float]:
    """``--budget``: ("flops", N), ("seconds", S) for a duration such as 30m, 1h or 90s, or
    ("demo", DEMO_FLOPS)."""
    text = text.strip().lower()
    if text == "demo":
        return "demo", DEMO_FLOPS
    try:
        value = float(text)
        if math.isfinite(value) and value > 0:
            return "flops", value
    except ValueError:
        pass
    m = _DURATION.match(text)
    if text and m and any(m.groups()):
        h, mi, s = (float(g or 0) for g in m.groups())
        seconds = 3600 * h + 60 * mi + s
        if seconds > 0:
            return "seconds", seconds
    raise UserError(f"--budget {text}: give training FLOPs per objective (e.g. 3e15), a "
                    f"duration of this machine's compute (e.g. 30m, 1h, 90s), or demo")
