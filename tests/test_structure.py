"""The shape of the house: imports point one way, training loops are imported only by what
runs them, and the CLI is a table whose every command fits the function it calls."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
# The training loops, and the modules that run them (the CLI names them by string only).
LOOPS = {"electra.commands.pretrain": {"electra.experiments.demo", "electra.experiments.compare"},
         "electra.train.pretraining": {"electra.commands.pretrain"},
         "electra.commands.finetune": {"electra.experiments.compare"},
         # one loop for one task or several, and the probe during pretraining
         "electra.train.finetuning": {"electra.commands.finetune", "electra.train.probe"}}
# What the CLI module may import: no loading, no training, no torch.
# (electra.objectives.registry, electra.tasks.registry: only when help is shown, their
# live names; electra.objectives.config: the run's sections, for --set help; no torch)
CLI_IMPORTS = {"electra", "electra.config", "electra.errors", "electra.io.files",
               "electra.objectives.registry", "electra.objectives.config",
               "electra.tasks.registry", "electra.model.bodies",  # presets, help only
               "electra.data.examples", "electra.runtime",
               "electra.invocation", "electra.train.stop",  # stdlib alone: the advice, signals
               "electra.environ", "electra.catalog"}  # checked first; the help's registries


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Each module of the package -> the package modules it imports (anywhere in the file:
    function-level imports and those for annotations only, under TYPE_CHECKING, included)."""
    files = {module_name(f): f for f in (SRC / "electra").rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            else:
                continue
            for t in targets:
                while t and t not in files:
                    t = t.rpartition(".")[0]
                if t and t != mod:
                    graph[mod].add(t)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    graph = import_graph()
    assert {"electra.model", "electra.objectives.pretraining", "electra.train.trainer",
            "electra.train.pretraining", "electra.commands.pretrain"} <= set(graph)
    # (the graph sees real imports)
    assert "electra.objectives.pretraining" in graph["electra.train.pretraining"]
    assert "electra.train.pretraining" in graph["electra.commands.pretrain"]
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# The packages in one order, top to bottom: a module imports only from its own package or
# from a layer below it (siblings in one layer do not import each other). The package root
# is at the bottom: it imports nothing (its Python API names load lazily, for users), and
# modules read only its __version__ from it.
LAYERS = [
    {"electra.__main__"},  # python -m electra
    {"electra.cli"},  # the `electra` command: a table of commands
    {"electra.experiments"},  # compare, the demo: runs of the commands
    {"electra.commands"},  # one module per command
    {"electra.catalog"},  # what the help and the early checks say of the registries below
    {"electra.train"},  # the loops: the trainer, fine-tuning, the probe, parallelism
    {"electra.evaluation"},  # scores of a model's embeddings, one evaluator each
    {"electra.saved"},  # model folders, the opener, transformers' format
    {"electra.run_config"},  # a pretraining run's sections together (model, objective, loop)
    {"electra.tasks", "electra.objectives"},  # the heads; the objectives and run config
    {"electra.runtime"},  # device, precision, processes
    {"electra.model"},  # the encoder family and its kernels
    {"electra.data"},  # text, tokenizers, shards, task readers
    {"electra.config"},  # the configuration machinery and the objective-free sections
    {"electra.io"},  # files, outputs, checkpoints
    {"electra.environ"},  # the environment variables, each through one checked parser
    {"electra.registry", "electra.errors", "electra.invocation", "electra"},
]


def layer_of(module: str) -> tuple[int, str]:
    """(layer, unit): the unit is the package (``electra.tasks``) or top-level module."""
    for i, units in enumerate(LAYERS):
        for unit in units:
            if module == unit or (unit != "electra" and module.startswith(unit + ".")):
                return i, unit
    raise AssertionError(f"{module} is in no layer of LAYERS: place it")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for module, targets in graph.items():
        here, unit = layer_of(module)
        for target in sorted(targets):
            there, other = layer_of(target)
            if there < here or (there == here and other != unit):
                bad.append(f"{module} imports {target} ({other} is "
                           f"{'above it' if there < here else 'beside it'})")
    return bad


def test_no_package_imports_one_above_it():
    """Function-level imports included (import_graph reads every import in a file)."""
    assert upward_imports(import_graph()) == []


def test_the_order_check_finds_an_upward_import():
    graph = {"electra.data.text": {"electra.train.trainer"}, "electra.train.trainer": set(),
             "electra.tasks.base": {"electra.objectives.base"}, "electra.objectives.base": set()}
    assert upward_imports(graph) == [
        "electra.data.text imports electra.train.trainer (electra.train is above it)",
        "electra.tasks.base imports electra.objectives.base (electra.objectives is beside it)"]


def test_training_loops_are_imported_only_by_what_runs_them():
    graph = import_graph()
    for loop, runners in LOOPS.items():
        importers = {m for m, deps in graph.items() if loop in deps and m != "electra"}
        assert importers <= runners, f"{loop} imported by {sorted(importers - runners)}"


def test_model_holds_no_training_machinery():
    graph = import_graph()
    model = {m for m in graph if m == "electra.model" or m.startswith("electra.model.")}
    for m in model:
        assert graph[m] <= model | {"electra.config", "electra.registry", "electra.errors"}, (
            m, graph[m])


def test_cli_imports_nothing_that_loads_or_trains():
    assert import_graph()["electra.cli"] <= CLI_IMPORTS
    tree = ast.parse((SRC / "electra/cli.py").read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                for a in n.names}
    assert "torch" not in imported


@pytest.mark.parametrize("name", sorted(__import__("electra.cli").cli.COMMANDS))
def test_every_command_fits_its_function(name):
    """Every flag's destination is a parameter of the command's function (or, for a function
    taking the task families' ``**reading``, a keyword some family's ``load`` reads), and
    every parameter without a default is a flag."""
    import importlib

    from electra.cli import build_parser
    from electra.tasks.registry import reading_options

    parser = build_parser()
    words = name.split()
    sub = parser
    for w in words:
        sub = next(a for a in sub._actions if a.dest in ("command", f"{words[0]}_command")
                   ).choices[w]
    dests = {a.dest for a in sub._actions if a.dest not in ("help",)}
    module, function = sub.get_default("_target").split(":")
    params = inspect.signature(getattr(importlib.import_module(module), function)).parameters
    takes = set(params)
    if any(v.kind is v.VAR_KEYWORD for v in params.values()):
        takes |= reading_options()
    assert dests <= takes, f"{name}: flags without a parameter: {dests - takes}"
    required = {p for p, v in params.items() if v.default is inspect.Parameter.empty
                and v.kind is not v.VAR_KEYWORD}
    assert required <= dests, f"{name}: parameters without a flag: {required - dests}"


# -- the seams stay: dispatch by branching lives only in its owner --------------------------

def _registered(module: str, table: str) -> tuple[str, ...]:
    """The names a registry holds: the seams guard every one, a new one included."""
    import importlib

    return tuple(getattr(importlib.import_module(module), table))


OBJECTIVE_NAMES = _registered("electra.objectives.registry", "OBJECTIVES")
HEAD_NAMES = _registered("electra.tasks.registry", "HEADS")
BODY_NAMES = _registered("electra.model.bodies", "BODIES")
EVALUATION_NAMES = _registered("electra.evaluation.registry", "EVALUATORS")
# (what is branched on, the owner package or module, how a branch on it reads)
SEAMS = [
    ("an objective", "electra.objectives",
     lambda code: any(f"'{k}'" in code for k in OBJECTIVE_NAMES) and "kind" in code),
    ("a task head", "electra.tasks",
     lambda code: (("head" in code or ".kind" in code)
                   and any(f"'{k}'" in code for k in HEAD_NAMES))
     or ".tagging" in code or "data.regression" in code),
    ("an evaluation", "electra.evaluation",
     lambda code: any(f"'{k}'" in code for k in EVALUATION_NAMES)),
    ("a body", "electra.model.bodies",
     lambda code: any(f"'{k}'" in code for k in BODY_NAMES)),
    ("a device type", "electra.model.kernels",
     lambda code: "device.type" in code or ".type ==" in code or ".type !=" in code),
    ("where data comes from", "electra.data.sources",
     lambda code: "is_url" in code or "'://'" in code or "startswith('s3" in code),
]
# Where a device's type is the subject itself: choosing the device, its random state, its
# optimizer kernels and its synchronisation.
DEVICE_OWNERS = {"electra.runtime"}
# Where a URL is the subject itself: the stores, the outputs rule, the hub.
DATA_OWNERS = {"electra.io"}


def branches(tree: ast.AST):
    """The source of every condition: if/elif, while, conditional expressions, filters."""
    for node in ast.walk(tree):
        if isinstance(node, ast.If | ast.IfExp | ast.While):
            yield node.test
        elif isinstance(node, ast.comprehension):
            yield from node.ifs


def seam_breaks(sources: dict[str, str]) -> list[str]:
    """``module: condition`` for each branch on an objective, a head or a device type outside
    the module that owns it."""
    found = []
    for mod, text in sources.items():
        for test in branches(ast.parse(text)):
            code = ast.unparse(test)
            for what, owner, matches in SEAMS:
                owned = mod == owner or mod.startswith(owner + ".")
                if what == "a device type":
                    owned = owned or mod in DEVICE_OWNERS
                if what == "where data comes from":
                    owned = owned or any(mod.startswith(o + ".") for o in DATA_OWNERS)
                if matches(code) and not owned:
                    found.append(f"{mod}: branches on {what}: {code}")
    return found


def test_no_module_branches_on_what_a_seam_owns():
    sources = {module_name(f): f.read_text() for f in (SRC / "electra").rglob("*.py")}
    assert seam_breaks(sources) == []


def test_the_seam_check_finds_a_branch():
    assert seam_breaks({"electra.commands.finetune": "if data.kind == 'qa':\n    pass\n",
                        "electra.commands.pretrain": "x = 1 if cfg.kind == 'mlm' else 2\n",
                        "electra.model": "if x.device.type == 'cpu':\n    pass\n",
                        "electra.tasks.qa.head": "if head == 'qa':\n    pass\n",
                        "electra.experiments.compare": "if task.task == 'sts':\n    pass\n",
                        "electra.train.pretraining": "if cfg.body == 'modernbert':\n    x\n",
                        "electra.evaluation.sts": "if name == 'sts':\n    pass\n",
                        "electra.data.text": "if remote.is_url(path):\n    pass\n",
                        "electra.io.remote": "if is_url(path):\n    pass\n"}) == [
        "electra.commands.finetune: branches on a task head: data.kind == 'qa'",
        "electra.commands.pretrain: branches on an objective: cfg.kind == 'mlm'",
        "electra.model: branches on a device type: x.device.type == 'cpu'",
        "electra.experiments.compare: branches on an evaluation: task.task == 'sts'",
        "electra.train.pretraining: branches on a body: cfg.body == 'modernbert'",
        "electra.data.text: branches on where data comes from: remote.is_url(path)"]


def test_the_cli_starts_without_torch():
    """`electra --help` and the data-preparation workers import the CLI and the configs:
    neither may pull in torch (importing it takes a second or more)."""
    import subprocess
    import sys

    code = ("import sys, electra.cli, electra.config, electra.data.examples; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_no_function_is_longer_than_60_lines():
    long = []
    for f in (SRC / "electra").rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1
                if n > 60:
                    long.append(f"{module_name(f)}.{node.name}: {n} lines")
    assert long == []


def test_the_cli_names_every_objective(request):
    """compare --help names every objective: electra/catalog.json's in a fresh process
    (test_the_catalog_is_the_registries holds it equal to the registry), the live registry's
    where it is imported, one registered after the CLI module was imported included."""
    from test_seams import HalfLambda

    import electra.model.bodies
    import electra.tasks.registry  # noqa: F401
    from electra.cli import build_parser
    from electra.objectives.registry import OBJECTIVES, register

    register(HalfLambda())
    request.addfinalizer(lambda: OBJECTIVES.remove("half_lambda"))
    compare = next(a for a in build_parser()._actions if a.dest == "command").choices[
        "compare"]
    help_text = str(next(a.help for a in compare._actions if a.dest == "objectives"))
    assert all(name in help_text for name in OBJECTIVES), help_text
    assert "half_lambda" in help_text


def test_every_name_in_the_python_api_resolves():
    """electra.__all__ is the Python API: each name loads (two of them named modules that do
    not hold them, and raised AttributeError)."""
    import electra

    missing = [name for name in electra.__all__ if not hasattr(electra, name)]
    assert missing == []
    assert electra.ElectraPretrainingModel.__name__ == "ElectraPretrainingModel"


def test_every_function_level_import_says_why():
    """An import of electra's own inside a function stays only where it saves start-up time
    (torch, a registry the CLI's help reads), and says so on its line or the line above."""
    silent = []
    for path in sorted((SRC / "electra").rglob("*.py")):
        text = path.read_text()
        lines = text.splitlines()
        for fn in ast.walk(ast.parse(text)):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("electra")
                        and "#" not in lines[node.lineno - 1]
                        and not lines[node.lineno - 2].strip().startswith("#")):
                    silent.append(f"{module_name(path)}:{node.lineno}")
    assert silent == []


def test_every_command_is_a_python_function():
    """Each command has a function in the Python API (docs/how-to/python.md's table): the
    command's own, or its module's that returns what the command prints (predict, detect,
    plot); not the benchmark's, a developer's tool."""
    import electra
    from electra.cli import COMMANDS

    api = {module for module, _ in electra._LAZY.values()}
    missing = [name for name, cmd in COMMANDS.items()
               if cmd.target.split(":")[0] not in api and name != "bench"]
    assert missing == []
    text = (SRC.parent / "docs/how-to/python.md").read_text()
    assert [n for n in electra.__all__ if callable(getattr(electra, n)) and n[0].islower()
            and f"electra.{n}(" not in text] == []


def test_every_bench_script_is_in_the_bench_index():
    """bench/README.md names every script (what it measures, where its result is), and
    `make bench` has a rule."""
    root = SRC.parent
    index = (root / "bench/README.md").read_text()
    assert [p.name for p in sorted((root / "bench").glob("*.py"))
            if f"`{p.name}" not in index] == []
    assert "\nbench: " in (root / "Makefile").read_text()


def test_the_catalog_is_the_registries():
    """electra/catalog.json (what --help and the early checks read instead of importing the
    registries) is what the live registries say, built in a fresh process (no test's toy
    family, body or objective registered)."""
    import json
    import subprocess
    import sys

    from electra import catalog

    built = subprocess.run([sys.executable, "-c", "import json; from electra import catalog; "
                            "print(json.dumps(catalog.build()))"], capture_output=True,
                           text=True, check=True).stdout
    assert json.loads(built) == catalog.load(), (
        "electra/catalog.json differs from the registries: run `python -m electra.catalog`")


REFUSED_EARLY = [
    ["pretrain", "--preset", "tiny", "--data", "nowhere", "--out", "o"],
    ["pretrain", "--preset", "tiny", "--data", "d", "--out", "o", "--set", "train.bogus=1"],
    ["finetune", "--model", "nowhere", "--task", "sst2", "--data", "d", "--out", "o"],
    ["finetune", "--model", ".", "--task", "custom", "--train", "no.csv", "--dev", "no.csv",
     "--out", "o"],
    ["finetune", "--model", ".", "--task", "sst2", "--data", "d", "--out", "o", "--set",
     "bogus=1"],
    ["finetune", "--model", ".", "--task", "sst2", "--data", "d", "--out", "o", "--set",
     "lr=-1"],
    ["evaluate", "--model", "nowhere", "--task", "sst2", "--data", "d"],
    ["evaluate", "--model", "nowhere", "--task", "sts", "--data", "d"],
    ["predict", "--model", "nowhere", "--input", "x.csv"],
    ["detect", "--model", "nowhere", "a text"],
    ["export", "nowhere", "--out", "o"],
    ["compare", "--data", "nowhere", "--config", "c.toml", "--budget", "1e9", "--out", "o"],
]


def test_a_refusal_that_needs_no_model_imports_no_torch(tmp_path):
    """A missing path or a bad --set is refused (one line, exit 2) by the command's early
    check, before torch or transformers is imported (bench/refusal_time.py times it), and
    --help imports neither (its registries come from electra/catalog.json)."""
    import json
    import subprocess
    import sys

    code = ("import sys, json\nfrom electra.cli import main\ntry:\n"
            "    rc = main(json.loads(sys.argv[1]))\nexcept SystemExit as e:\n    rc = e.code\n"
            "heavy = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
            "print(json.dumps([rc, heavy]), file=sys.stdout)")
    for argv in [*REFUSED_EARLY, ["finetune", "--help"], ["pretrain", "--help"],
                 ["compare", "--help"]]:
        res = subprocess.run([sys.executable, "-c", code, json.dumps(argv)], cwd=tmp_path,
                             capture_output=True, text=True)
        rc, heavy = json.loads(res.stdout.strip().splitlines()[-1])
        assert heavy == [], (argv, heavy)
        if argv[-1] == "--help":
            assert rc == 0, (argv, res.stderr)
            continue
        assert rc == 2 and res.stderr.count("\n") == 1, (argv, rc, res.stderr)
        assert res.stderr.startswith("electra: error: "), (argv, res.stderr)


def test_the_type_checker_finds_nothing_its_baseline_does_not_hold():
    """mypy over src/electra (tests/typecheck.py): no error the committed baseline does not
    hold, and none it holds that is gone (the baseline only shrinks: write it anew with
    `python tests/typecheck.py --write` after fixing one). About 40 s cold, 1 s warm."""
    import typecheck

    new, gone = typecheck.differences()
    assert not new, "new type errors (fix them):\n" + "\n".join(new)
    assert not gone, ("fixed, so remove them from tests/typecheck-baseline.txt (python "
                      "tests/typecheck.py --write):\n" + "\n".join(gone))
