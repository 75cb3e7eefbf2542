"""`electra compare`: FLOPs counted by hand and by torch's profiler, the steps a budget buys,
a whole tiny comparison, and continuing one that was interrupted."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from helpers import write_sentiment
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from electra.cli import main
from electra.config import ModelConfig
from electra.data.tokenizer import SpecialTokens
from electra.experiments import compare_plan, compare_spec
from electra.model import Generator
from electra.objectives.config import ObjectiveConfig
from electra.objectives.flops import step_flops_per_sequence
from electra.objectives.masking import Batch, Draws
from electra.objectives.pretraining import ElectraPretrainingModel
from electra.objectives.registry import OBJECTIVES

KINDS = tuple(OBJECTIVES)

CFG = ModelConfig(vocab_size=100, embedding_size=16, hidden_size=32, num_layers=1,
                  num_heads=2, intermediate_size=64, max_position_embeddings=16,
                  generator_size=0.5, hidden_dropout=0.0, attention_dropout=0.0)
T, P = 8, 2  # sequence length, prediction slots (max_predictions)

# Multiply-accumulates of CFG's parts on one sequence of T = 8 tokens, by hand:
DISC = T * (4 * 32**2 + 2 * 32 * 64 + 2 * T * 32 + 16 * 32)  # + the E=16 -> H=32 projection
GEN = T * (4 * 16**2 + 2 * 16 * 32 + 2 * T * 16)  # width 16 = E: no projection
RTD_HEAD = T * (32 * 32 + 32)
GEN_HEAD = P * (16 * 16 + 16 * 100)  # dense H -> E, output E -> V at the P slots
MLM_HEAD = P * (32 * 16 + 16 * 100)
HAND = {
    "electra": 6 * (DISC + RTD_HEAD + GEN + GEN_HEAD),
    "electra15": 6 * (DISC + RTD_HEAD + GEN + GEN_HEAD),
    "mlm": 6 * (DISC + MLM_HEAD),
    "random": 6 * (DISC + RTD_HEAD),
    "replace_mlm": 6 * (DISC + MLM_HEAD + GEN + GEN_HEAD),
    "all_tokens_mlm": 6 * (DISC + RTD_HEAD + T * (32 * 16 + 16 * 100) + GEN + GEN_HEAD),
    # a frozen generator of the generator's shape: its forward only (2 FLOPs a MAC)
    "fast_electra": 6 * (DISC + RTD_HEAD) + 2 * (GEN + GEN_HEAD),
}
FROZEN = CFG.generator_config()  # fast_electra's generator in these counts
META = {"vocab_size": 100, "pad_id": 0, "seq_len": T}  # the data a plan is made for
RAW = {"model": {k: getattr(CFG, k) for k in ("embedding_size", "hidden_size", "num_layers",
                                               "num_heads", "intermediate_size",
                                               "max_position_embeddings", "generator_size")},
       "objective": {"max_predictions": P},
       "train": {"batch_size": 4, "max_steps": 100, "warmup_steps": 10}}  # a base config


def objective_of(kind: str) -> ObjectiveConfig:
    frozen = OBJECTIVES[kind].frozen_generator
    return ObjectiveConfig(kind=kind, max_predictions=P, generator="x" if frozen else None)


def test_flops_per_step_equal_hand_counts():
    assert DISC == 73_728 and HAND["electra"] == 625_920  # the arithmetic, written out
    for kind in KINDS:
        assert step_flops_per_sequence(CFG, objective_of(kind), T, FROZEN) == HAND[kind], kind


@pytest.mark.parametrize("kind", KINDS)
def test_flops_equal_torch_profiler_count_of_a_real_step(kind):
    """Forward and backward of the whole objective, counted by FlopCounterMode (attention
    as plain matrix products, which it counts)."""
    special = SpecialTokens(pad=0, unk=1, cls=2, sep=3, mask=4)
    torch.manual_seed(0)
    objective = objective_of(kind)
    model = ElectraPretrainingModel(CFG, objective, special)
    if model.method.frozen_generator:
        model.attach_generator(Generator(FROZEN))
    B = 3
    ids = torch.randint(5, 100, (B, T))
    ids[:, 0], ids[:, -1] = 2, 3
    ones = torch.ones(B, T, dtype=torch.long)
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(Batch(ids, ones, torch.zeros_like(ids)),
              Draws(rng=torch.Generator().manual_seed(0))).loss.backward()
    assert counter.get_total_flops() == B * step_flops_per_sequence(CFG, objective, T, FROZEN)


def test_a_budget_buys_each_objective_the_steps_its_flops_imply():
    meta, raw = META, RAW
    budget = 5e8
    plan = compare_plan.make_plan(meta, raw, ["electra", "mlm", "random"], ("flops", budget),
                             [0.25, 0.5, 1.0], [], [1], [])
    for kind in ("electra", "mlm", "random"):
        per_step = 4 * HAND[kind]
        assert plan.flops_per_step[kind] == per_step
        steps = int(budget // per_step)
        assert plan.objectives[kind].train.max_steps == steps
        assert plan.objectives[kind].train.warmup_steps == round(10 * steps / 100)
        assert plan.ends(kind) == [round(steps / 4), round(steps / 2), steps]
        assert budget - per_step < steps * per_step <= budget
    # BERT's corruption for mlm, ELECTRA's for the others, unless the config sets them
    assert plan.objectives["mlm"].objective.mask_token_prob == 0.8
    assert plan.objectives["electra"].objective.mask_token_prob == 0.85
    with pytest.raises(compare_spec.UserError, match="is too small"):
        compare_plan.make_plan(meta, raw, ["electra"], ("flops", 3 * 4 * HAND["electra"]),
                          [0.25, 1.0], [], [1], [])


def test_variants_of_one_kind_run_under_their_names_at_their_own_cost(monkeypatch):
    """--objectives KIND:key=value...:name=NAME: the same kind with and without a mask-rate
    schedule, and fast_electra with its frozen generator (its forward in the step's FLOPs,
    so it buys more steps than electra, whose generator also trains)."""
    meta, raw = META, RAW
    variants = compare_spec.parse_objectives(
        "electra,electra:mask_prob=0.3:mask_prob_end=0.15:name=electra-sched,"
        "fast_electra:generator=RUN:temperature=2:temperature_end=1:temperature_steps=10")
    assert [v.name for v in variants] == ["electra", "electra-sched", "fast_electra"]
    monkeypatch.setattr(compare_plan, "frozen_config",
                        lambda c: FROZEN if c.objective.generator == "RUN" else None)
    plan = compare_plan.make_plan(meta, raw, variants, ("flops", 5e8), [0.5, 1.0], [], [1], [])
    sched = plan.objectives["electra-sched"].objective
    assert (sched.kind, sched.mask_prob, sched.mask_prob_end) == ("electra", 0.3, 0.15)
    assert plan.objectives["electra"].objective.mask_prob_end is None
    assert plan.flops_per_step["fast_electra"] == 4 * HAND["fast_electra"]
    assert plan.objectives["fast_electra"].train.max_steps > plan.objectives[
        "electra"].train.max_steps
    assert [m[0] for m in plan.models()][:2] == ["electra-50", "electra-100"]
    for bad, said in (("electra,electra:mask_prob_end=0.1", "a kind that comes twice"),
                      ("electra:kind=mlm", "drop kind="), ("nope", "unknown objective"),
                      ("electra:name=../x", "a name becomes a folder name")):
        with pytest.raises(compare_spec.UserError, match=said):
            compare_spec.parse_objectives(bad)


def test_budget_and_task_parsing():
    assert compare_spec.parse_budget("30m") == ("seconds", 1800)
    assert compare_spec.parse_budget("1h30m") == ("seconds", 5400)
    assert compare_spec.parse_budget("3e15") == ("flops", 3e15)
    assert compare_spec.parse_budget("demo")[0] == "demo"
    tasks = compare_spec.parse_tasks("custom:name=r:train=a.csv:dev=b.csv:text=x+y:regression=true:"
                                "epochs=2", None)
    assert tasks[0].text_columns == "x,y" and tasks[0].regression
    assert tasks[0].sets == ("epochs=2",) and tasks[0].metric == "spearman"


def _args(data: Path, root: Path, out: Path) -> list[str]:
    task = f"custom:name=sent:train={root / 'train.csv'}:dev={root / 'dev.csv'}"
    return ["compare", "--data", str(data), "--config", str(root / "base.toml"),
            "--objectives", "electra,mlm", "--budget", "4e8", "--fractions", "0.5,1",
            "--tasks", task, "--seeds", "1,2", "--finetune-set", "epochs=2",
            "--finetune-set", "precision=fp32", "--finetune-set", "max_length=32",
            "--out", str(out), "--quiet"]


@pytest.fixture(scope="module")
def compared(letters_data, tmp_path_factory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("compare")
    write_sentiment(root / "train.csv", 64, 0)
    write_sentiment(root / "dev.csv", 24, 1)
    (root / "base.toml").write_text(
        "[model]\nembedding_size = 32\nhidden_size = 32\nnum_layers = 1\nnum_heads = 2\n"
        "intermediate_size = 64\nmax_position_embeddings = 64\ngenerator_size = 0.5\n"
        "hidden_dropout = 0.0\nattention_dropout = 0.0\n"  # ranks draw their own dropout

        "[train]\nlr = 1e-3\nbatch_size = 8\nwarmup_steps = 2\nmax_steps = 100\n"
        "eval_every = 0\neval_batches = 1\nsave_every = 1000\nprecision = \"fp32\"\n")
    args = _args(letters_data, root, root / "out")
    assert main(args) == 0
    return root / "out", args


@pytest.fixture
def own_compare(compared, tmp_path) -> tuple[Path, list[str]]:
    """A copy of the module's comparison for a test that reruns or changes it: the module's
    stays as it was, whichever order the tests run in."""
    out, args = compared
    mine = tmp_path / "out"
    shutil.copytree(out, mine, symlinks=True)
    at = args.index("--out") + 1
    return mine, [*args[:at], str(mine), *args[at + 1:]]


def test_a_tiny_comparison_writes_the_table_results_and_plot(compared):
    out, _ = compared
    results = json.loads((out / "results.json").read_text())
    names = [m["model"] for m in results["models"]]
    assert names == ["electra-50", "electra-100", "mlm-50", "mlm-100", "random-init"]
    for m in results["models"]:
        scores = m["tasks"]["sent"]["seeds"]
        assert len(scores) == 2 and m["average"]["seeds"] == scores
        ft = json.loads(next((out / "finetune" / m["model"]).glob("sent-*/results.json"))
                        .read_text())
        assert scores == [round(100 * ft["seeds"][s]["dev"]["accuracy"], 4) for s in ("1", "2")]
        if m["objective"]:
            per_step = results["flops_per_step"][m["objective"]]
            assert m["pretrain_flops"] == m["steps"] * per_step
            saved = json.loads((out / "models" / m["model"] / "discriminator/config.json"
                                ).read_text())
            assert saved["step"] == m["steps"]
    for kind in ("electra", "mlm"):  # each spends the budget to within one step
        full = next(m for m in results["models"] if m["model"] == f"{kind}-100")
        assert 4e8 - results["flops_per_step"][kind] < full["pretrain_flops"] <= 4e8
    table = (out / "results.md").read_text()
    assert table.count("\n| electra |") == 2 and "| random-init | - | 0 | 0 |" in table
    assert "| steps | sent (accuracy) |\n" in table  # one task: no average column
    assert (out / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_modernbert_comparison_spends_its_flops_on_that_body(compared, letters_data,
                                                                tmp_path):
    """`compare --set model.body=modernbert`: each objective pretrains the ModernBERT body
    for the same FLOPs, counted by that body's MACs (fewer keys in its local blocks), so
    it buys other step counts than the BERT body's comparison."""
    out, _ = compared
    root = out.parent
    task = f"custom:name=sent:train={root / 'train.csv'}:dev={root / 'dev.csv'}"
    mine = ["compare", "--data", str(letters_data), "--config", str(root / "base.toml"),
            "--set", "model.body=modernbert", "--set", "model.local_attention=8",
            "--objectives", "electra,mlm", "--budget", "4e8", "--fractions", "1",
            "--tasks", task, "--seeds", "1", "--finetune-set", "epochs=1",
            "--finetune-set", "precision=fp32", "--finetune-set", "max_length=32",
            "--out", str(tmp_path / "out"), "--quiet"]
    assert main(mine) == 0
    results = json.loads((tmp_path / "out/results.json").read_text())
    bert = json.loads((out / "results.json").read_text())
    for kind in ("electra", "mlm"):
        full = next(m for m in results["models"] if m["model"] == f"{kind}-100")
        assert 4e8 - results["flops_per_step"][kind] < full["pretrain_flops"] <= 4e8
        assert results["flops_per_step"][kind] != bert["flops_per_step"][kind]
        saved = json.loads((tmp_path / "out/models" / full["model"] /
                            "discriminator/config.json").read_text())
        assert saved["model"]["body"] == "modernbert"


def test_rerun_skips_finished_parts_and_reproduces_interrupted_ones(own_compare, capsys):
    out, args = own_compare
    before = json.loads((out / "results.json").read_text())
    kept = next((out / "finetune/electra-50").glob("sent-*/results.json"))
    stamp = kept.stat().st_mtime_ns
    # Interrupt electra after its 50% checkpoint, and mlm-100's fine-tune before it ended.
    run = out / "pretrain/electra"
    last = sorted((run / "checkpoints").iterdir())[-1]
    for gone in (last, run / "discriminator", run / "generator", out / "models/electra-100",
                 out / "finetune/electra-100", out / "finetune/mlm-100", out / "results.json"):
        shutil.rmtree(gone) if gone.is_dir() else gone.unlink()
    capsys.readouterr()
    assert main(args) == 0
    said = capsys.readouterr().out
    assert "pretraining electra to 100%" in said and "pretraining mlm" not in said
    assert "fine-tuning electra-50" not in said and "fine-tuning mlm-100" in said
    assert kept.stat().st_mtime_ns == stamp
    assert json.loads((out / "results.json").read_text()) == before


def test_an_undefined_seed_score_counts_zero_and_is_named(own_compare, capsys):
    """A seed whose score is undefined (STS-B's Spearman of a constant prediction is NaN)
    counts 0 in its task and the average, named in results.json and under the table: one
    such seed once made a whole row's average NaN."""
    out, args = own_compare
    kept = next((out / "finetune/mlm-100").glob("sent-*/results.json"))
    ft = json.loads(kept.read_text())
    ft["seeds"]["2"]["dev"]["accuracy"] = float("nan")
    kept.write_text(json.dumps(ft))
    (out / "results.json").unlink()
    assert main(args) == 0
    capsys.readouterr()
    mlm = next(m for m in json.loads((out / "results.json").read_text())["models"]
               if m["model"] == "mlm-100")
    first = round(100 * ft["seeds"]["1"]["dev"]["accuracy"], 4)
    assert mlm["tasks"]["sent"]["seeds"] == [first, 0.0]
    assert mlm["tasks"]["sent"]["undefined_seeds"] == [2]
    assert mlm["average"]["seeds"] == [first, 0.0] and mlm["average"]["min"] == 0.0
    assert "undefined (a correlation of constant predictions) counts 0" in (
        out / "results.md").read_text()


def test_other_seeds_reuse_the_pretraining_and_another_budget_is_refused(own_compare, capsys):
    out, args = own_compare
    seeds = args.index("--seeds") + 1
    capsys.readouterr()
    assert main([*args[:seeds], "3", *args[seeds + 1:]]) == 0
    said = capsys.readouterr().out
    assert "its pretrained models are reused" in said and "compare: pretraining" not in said
    results = json.loads((out / "results.json").read_text())
    assert results["seeds"] == [3] and len(results["models"][0]["tasks"]["sent"]["seeds"]) == 1
    budget = args.index("--budget") + 1
    assert main([*args[:budget], "5e8", *args[budget + 1:]]) == 2
    assert "holds a different comparison (budget_flops: run has 4" in capsys.readouterr().err
    assert main(args) == 0  # back to seeds 1,2: every part is read back
    assert "compare: fine-tuning" not in capsys.readouterr().out


@pytest.mark.slow
def test_two_processes_compare_like_one(compared):
    """Under torchrun, through the same scaffold: the same steps and discriminators (up to
    float summation order), and the same fine-tuned scores."""
    from helpers import launch, why_failed
    from safetensors.torch import load_file

    out, args = compared
    two = out.parent / "two"
    res = launch(2, *args[:args.index("--out")], "--out", two, "--quiet")
    assert res.returncode == 0, why_failed(res)
    one_r = json.loads((out / "results.json").read_text())
    two_r = json.loads((two / "results.json").read_text())
    assert [m["steps"] for m in one_r["models"]] == [m["steps"] for m in two_r["models"]]
    for m in one_r["models"][:-1]:
        a = load_file(out / "models" / m["model"] / "discriminator/model.safetensors")
        b = load_file(two / "models" / m["model"] / "discriminator/model.safetensors")
        for k in a:
            torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5, msg=k)
    assert [m["tasks"] for m in one_r["models"]] == [m["tasks"] for m in two_r["models"]]


def test_probes_train_the_head_alone_on_each_pretrained_model(own_compare, capsys):
    """--probe beside: the same pretraining, each model also probed (TASK-probe); every
    probe's encoder is bitwise the model it probed, the table names the probe's column, and
    the average leaves the probes out; --probe only runs the probes alone."""
    from safetensors.torch import load_file

    out, args = own_compare
    seeds = args.index("--seeds") + 1
    capsys.readouterr()
    assert main([*args[:seeds], "1", *args[seeds + 1:], "--probe", "beside"]) == 0
    assert "compare: pretraining" not in capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    assert list(results["metrics"]) == ["sent", "sent-probe"]
    for m in results["models"]:
        assert m["average"]["seeds"] == m["tasks"]["sent"]["seeds"]  # probes left out
    assert main([*args[:seeds], "1", *args[seeds + 1:], "--probe", "only"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert list(results["metrics"]) == ["sent-probe"]
    for m in results["models"]:
        ft = next((out / "finetune" / m["model"]).glob("sent-probe-*"))
        assert json.loads((ft / "results.json").read_text())["config"]["freeze"] == "encoder"
        if m["objective"]:
            tuned = load_file(ft / "seed-1/model.safetensors")
            base = load_file(out / "models" / m["model"] / "discriminator/model.safetensors")
            assert all(torch.equal(tuned[k], base[k]) for k in tuned
                       if k.startswith("encoder.")), m["model"]
    assert "sent-probe (accuracy)" in (out / "results.md").read_text()
    assert main(args) == 0  # back to the full fine-tunes, read back


def test_embedding_scores_stand_beside_the_fine_tunes(own_compare, capsys, tmp_path):
    """--tasks ...,retrieval:data=BEIR: each model's embeddings scored as they are (random
    init's drawn once, seed 0), one value each, equal to `electra.retrieval`'s on the saved
    model, outside the average; the table says so."""
    import electra

    out, args = own_compare
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    docs = {f"d{i}": " ".join(c * (i + 1) for _ in range(4)) for i, c in enumerate("abcdef")}
    (beir / "corpus.jsonl").write_text("".join(json.dumps({"_id": k, "text": v}) + "\n"
                                               for k, v in docs.items()))
    (beir / "queries.jsonl").write_text("".join(
        json.dumps({"_id": f"q{i}", "text": c * (i + 1)}) + "\n" for i, c in enumerate("abc")))
    (beir / "qrels/test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"q{i}\td{i}\t1\n" for i in range(3)))
    tasks = args.index("--tasks") + 1
    more = [*args[:tasks], f"{args[tasks]},retrieval:data={beir}", *args[tasks + 1:]]
    capsys.readouterr()
    assert main(more) == 0
    assert "compare: pretraining" not in capsys.readouterr().out  # the same pretraining
    results = json.loads((out / "results.json").read_text())
    assert results["metrics"] == {"sent": "accuracy", "retrieval": "ndcg@10"}
    for m in results["models"]:
        got = m["tasks"]["retrieval"]["seeds"]
        model = out / "models" / m["model"]
        assert got == [round(100 * electra.retrieval(model, beir)["ndcg@10"], 4)]
        assert m["average"]["seeds"] == m["tasks"]["sent"]["seeds"]  # outside the average
    table = (out / "results.md").read_text()
    assert "retrieval (ndcg@10)" in table and "retrieval: each model's embeddings" in table
    bm25 = electra.retrieval(out / "models" / "random-init", beir)["bm25"]["ndcg@10"]
    assert results["baselines"] == {"bm25": {"retrieval": bm25}}  # BM25 beside the models
    assert f"BM25 on retrieval (bm25s, no model): {100 * bm25:.1f}." in table
    assert "retrieval needs data=PATH" in _error(capsys, [*args[:tasks], "retrieval",
                                                          *args[tasks + 1:]])


def _error(capsys, argv: list[str]) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    return capsys.readouterr().err


def test_a_comparison_continues_from_its_small_files_alone(own_compare, capsys, tmp_path):
    """Each objective is pretrained and then fine-tuned before the next (the control after
    the first); one whose fine-tunes all have results.json is not pretrained again, so a
    comparison carried to a new machine as its small files (no weights, no pretraining runs)
    goes on where it stopped: here mlm-100's fine-tune is missing, so mlm is pretrained
    again from the start, to the same model and the same scores; random init's takes its
    shape from electra-100's config alone."""
    out, args = own_compare
    before = json.loads((out / "results.json").read_text())
    small = tmp_path / "small"
    for f in out.rglob("*"):
        rel = f.relative_to(out)
        keep = (rel.name in ("compare.json", ".electra.json") and len(rel.parts) == 1) or (
            rel.parts[0] == "finetune" and rel.name == "results.json"
            and rel.parts[1] not in ("mlm-100", "random-init")) or (
            rel.parts[0] == "models" and f.is_file() and rel.name != "model.safetensors")
        if keep:
            (small / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, small / rel)
    at = args.index("--out") + 1
    capsys.readouterr()
    assert main([*args[:at], str(small), *args[at + 1:]]) == 0
    said = capsys.readouterr().out
    assert "pretraining electra" not in said and "fine-tuning electra" not in said
    assert "pretraining mlm to 50%" in said and "fine-tuning mlm-100" in said
    assert "fine-tuning mlm-50" not in said and "fine-tuning random-init" in said
    assert json.loads((small / "results.json").read_text()) == before
    for m in ("mlm-50", "mlm-100"):  # pretrained again, bitwise
        weights = f"models/{m}/discriminator/model.safetensors"
        assert (small / weights).read_bytes() == (out / weights).read_bytes()


def test_each_objective_is_fine_tuned_before_the_next_is_pretrained(own_compare, capsys,
                                                                   monkeypatch):
    """The order of the work, and results.md after each model: the rows so far."""
    from electra.experiments import compare as compare_module

    out, args = own_compare
    for gone in ("finetune", "models", "pretrain", "results.json", "results.md"):
        shutil.rmtree(out / gone) if (out / gone).is_dir() else (out / gone).unlink()
    tables, real = [], compare_module._finetune_model

    def seen(plan, name, where, *rest):
        md = where / "results.md"
        tables.append(md.read_text() if md.is_file() else "")
        return real(plan, name, where, *rest)

    monkeypatch.setattr(compare_module, "_finetune_model", seen)
    capsys.readouterr()
    assert main(args) == 0
    assert tables[0] == "" and tables[1].count("\n| electra | 50% |") == 1
    assert "4 of 5 models still to fine-tune" in tables[1]
    assert "| random-init |" not in tables[2] and "| random-init |" in tables[3]
    assert "still to fine-tune" not in (out / "results.md").read_text()
    said = [line.split(" to ")[0].split(" on ")[0]
            for line in capsys.readouterr().out.splitlines() if line.startswith("compare: ")
            and ("pretraining" in line or "fine-tuning" in line)]
    assert said == ["compare: pretraining electra", "compare: pretraining electra",
                    "compare: fine-tuning electra-50", "compare: fine-tuning electra-100",
                    "compare: fine-tuning random-init", "compare: pretraining mlm",
                    "compare: pretraining mlm", "compare: fine-tuning mlm-50",
                    "compare: fine-tuning mlm-100"]
