"""torchrun data-parallel pretraining on CPU with gloo and 2 processes.

Each test launches `torchrun --standalone --nproc-per-node 2 -m electra pretrain ...` as a
user would; the one-process runs they are compared with run in the test's own process.
Dropout is off so that one process and two compute the same thing: masking and sampling
draws are made for the whole global batch and each rank takes its rows, and the losses are
averaged over the global batch, so only float summation order differs.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from helpers import launch, why_failed
from safetensors.torch import load_file

from electra.cli import main
from electra.data.tokenizer import train_tokenizer
from electra.train.metrics import TIMING_KEYS, iter_metrics

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(),
                                reason="this torch build has no torch.distributed")

CONFIG = """
preset = "tiny"

[model]
embedding_size = 32
hidden_size = 32
num_layers = 2
num_heads = 2
intermediate_size = 64
max_position_embeddings = 64
hidden_dropout = 0.0
attention_dropout = 0.0

[train]
lr = 1e-3
batch_size = 8
warmup_steps = 3
max_steps = 10
log_every = 1
eval_every = 5
eval_batches = 2
save_every = 5
precision = "fp32"
seed = 3
"""


@pytest.fixture(scope="module")
def setup(letters_data, tmp_path_factory) -> tuple[Path, Path]:
    """The letters corpus (32-token examples, a validation split) and a tiny config."""
    config = tmp_path_factory.mktemp("dist") / "tiny.toml"
    config.write_text(CONFIG)
    return letters_data, config


@pytest.fixture(scope="module")
def runs(setup, tmp_path_factory) -> Callable[..., Path]:
    """``runs(nproc, *extra)``: the run of that launch, made the first time a test asks for it
    and shared after (several tests compare against the same uninterrupted run). A test that
    resumes a shared run resumes its own copy (:func:`copy_run`)."""
    made: dict[tuple, Path] = {}

    def run(nproc: int, *extra: str) -> Path:
        key = (nproc, *extra)
        if key not in made:
            out = tmp_path_factory.mktemp("run") / "out"
            pretrain(nproc, *setup, out, *extra)
            made[key] = out
        return made[key]

    return run


def copy_run(run: Path, to: Path) -> Path:
    shutil.copytree(run, to)
    return to


def pretrain(nproc: int, data: Path, config: Path, out: Path, *extra,
             env: dict[str, str] | None = None) -> None:
    """`electra pretrain` on ``nproc`` processes under torchrun; one process without a
    process group runs here, in the test's own process (a launch costs a torchrun and a
    fresh process's imports, ~10 s on an AVX2 EPYC, and tests nothing a lone run needs)."""
    args = ["pretrain", "--config", config, "--data", data, "--out", out, "--quiet", *extra]
    if nproc == 1 and env is None:
        assert main([str(a) for a in args]) == 0
        return
    res = launch(nproc, *args, env=env)
    assert res.returncode == 0, why_failed(res)


def metrics(run: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in iter_metrics(run)]


def weights(run: Path) -> dict[str, torch.Tensor]:
    return {f"{kind}.{k}": v for kind in ("discriminator", "generator")
            for k, v in load_file(run / kind / "model.safetensors").items()}


def assert_same_run(a: Path, b: Path, exact: bool, atol: float = 1e-5) -> None:
    ma, mb = metrics(a), metrics(b)
    assert [r["step"] for r in ma] == [r["step"] for r in mb]
    for ra, rb in zip(ma, mb, strict=True):
        assert ra.keys() == rb.keys()
        for k in ra:
            if exact:
                assert ra[k] == rb[k], (ra["step"], k)
            else:
                assert ra[k] == pytest.approx(rb[k], rel=1e-4, abs=1e-6), (ra["step"], k)
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        if exact:
            assert torch.equal(wa[k], wb[k]), k
        else:
            torch.testing.assert_close(wa[k], wb[k], rtol=1e-4, atol=atol, msg=k)


@pytest.mark.slow
def test_two_processes_train_like_one(runs):
    one, two = runs(1), runs(2)
    assert_same_run(one, two, exact=False)
    # Only rank 0 wrote: the same files, one metrics line per step, one event file.
    files = sorted(str(p.relative_to(one)) for p in one.rglob("*") if "tb" not in p.parts)
    assert files == sorted(str(p.relative_to(two)) for p in two.rglob("*")
                           if "tb" not in p.parts)
    assert len(list((two / "tb").iterdir())) == 1
    assert [r["step"] for r in metrics(two)] == list(range(1, 11))
    state = torch.load(two / "checkpoints/step-0000010/state.pt", weights_only=True)
    assert state["world_size"] == 2 and len(state["rng"]["ranks"]) == 2


@pytest.mark.slow
def test_one_process_in_a_process_group_trains_like_one_alone(setup, runs, tmp_path):
    """ELECTRA_PROCESS_GROUP=1: one process joins a process group of its own, so one GPU
    runs NCCL, DDP and FSDP2 as a cluster does (here gloo, FSDP; the GPU kit's rehearsal
    runs DDP too); it trains as the lone process."""
    data, config = setup
    pretrain(1, data, config, tmp_path / "grouped", "--set", "train.parallel=fsdp",
             env={"ELECTRA_PROCESS_GROUP": "1"})
    assert_same_run(runs(1), tmp_path / "grouped", exact=False)
    state = torch.load(tmp_path / "grouped/checkpoints/step-0000010/state.pt",
                       weights_only=True)
    assert state["world_size"] == 1


def test_fsdp_mixed_precision_policy_follows_the_precision():
    """FSDP2 under bf16 all-gathers bf16 parameters and reduces fp32 gradients; fp32 and fp16
    keep fp32 parameters (autocast and the grad scaler do the rest)."""
    from electra.train.parallel import mixed_precision

    bf16 = mixed_precision("bf16")
    assert (bf16.param_dtype, bf16.reduce_dtype) == (torch.bfloat16, torch.float32)
    for precision in ("fp32", "fp16"):
        assert mixed_precision(precision).param_dtype is None


@pytest.mark.slow
def test_fsdp_in_bf16_resumes_exactly(setup, tmp_path):
    """FSDP2 with its bf16 policy (gloo): a run stopped and resumed from its sharded
    checkpoint (torch.distributed.checkpoint) equals the uninterrupted one, bit for bit; a
    damaged shard is refused before anything loads."""
    data, config = setup
    bf16 = ("--set", "train.parallel=fsdp", "--set", "train.precision=bf16")
    pretrain(2, data, config, tmp_path / "a", *bf16)
    pretrain(2, data, config, tmp_path / "b", *bf16, "--stop-after", "4")
    shard = tmp_path / "b/checkpoints/step-0000004/optimizer/__0_0.distcp"
    good = shard.read_bytes()
    shard.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    res = launch(2, "pretrain", "--config", config, "--data", data, "--out", tmp_path / "b",
                 "--quiet", *bf16, "--resume")
    assert res.returncode != 0  # torchrun's own code; each rank exited 2 with the line
    assert "optimizer/__0_0.distcp is corrupted (checksum mismatch)" in res.stderr
    shard.write_bytes(good)
    pretrain(2, data, config, tmp_path / "b", *bf16, "--resume")
    assert_same_run(tmp_path / "a", tmp_path / "b", exact=True)
    assert metrics(tmp_path / "a")[-1]["loss"] < metrics(tmp_path / "a")[0]["loss"]


@pytest.mark.slow
def test_two_process_resume_equals_an_uninterrupted_run(setup, runs, tmp_path):
    data, config = setup
    b = copy_run(runs(2, "--stop-after", "4"), tmp_path / "b")
    assert (b / "checkpoints/step-0000004").is_dir()
    assert not (b / "discriminator").exists()
    pretrain(2, data, config, b, "--resume")
    assert_same_run(runs(2), b, exact=True)


@pytest.mark.slow
def test_resume_with_another_world_size_continues_from_the_same_step(setup, runs, tmp_path):
    data, config = setup
    b = copy_run(runs(2, "--stop-after", "4"), tmp_path / "b")
    pretrain(1, data, config, b, "--resume")
    ma, mb = metrics(runs(2)), metrics(b)
    assert [r["step"] for r in mb] == list(range(1, 11))
    assert [r["tokens"] for r in ma] == [r["tokens"] for r in mb]  # the same data
    # Without dropout the two runs compute the same steps (only summation order differs).
    assert mb[-1]["loss"] == pytest.approx(ma[-1]["loss"], rel=1e-4)


def test_bad_launches_stop_every_rank_with_one_clear_error(setup, tmp_path):
    data, config = setup
    res = launch(2, "pretrain", "--config", config, "--data", data, "--out", tmp_path / "r",
                 "--quiet", "--set", "train.batch_size=7", "--set", "train.grad_accum=1")
    assert res.returncode != 0
    assert res.stderr.count("train.batch_size=7 does not split into 2 process(es)") == 1
    assert "src/electra/" not in res.stderr  # no traceback from our code (torchrun adds its own)
    assert not (tmp_path / "r").exists()
    # Ranks launched with different settings: rank 1 asks for another learning rate.
    script = ('exec "$0" -m electra pretrain --config "$1" --data "$2" --out "$3" --quiet '
              '--set train.lr=$((RANK + 1))e-3')
    res = launch(2, sys.executable, config, data, tmp_path / "d",
                 prefix=["--no-python", "sh", "-c", script])
    assert res.returncode != 0
    assert "ranks disagree on the config or the data: rank(s) 1" in res.stderr
    assert res.stderr.count("ranks disagree") == 1  # printed once, by rank 0


def test_a_dying_rank_stops_the_others(setup, tmp_path):
    """Rank 1 exits at its 3rd step; rank 0 must not wait forever in the next all-reduce."""
    data, config = setup
    helper = tmp_path / "die.py"
    helper.write_text(
        "import os, sys\n"
        "from electra.objectives import pretraining as objectives\n"
        "from electra.cli import main\n"
        "real, calls = objectives.electra_forward, [0]\n"
        "def dying(*a, **k):\n"
        "    calls[0] += 1\n"
        "    if os.environ['RANK'] == '1' and calls[0] == 3:\n"
        "        os._exit(1)\n"
        "    return real(*a, **k)\n"
        "objectives.electra_forward = dying\n"
        "sys.exit(main(sys.argv[1:]))\n")
    res = launch(2, "pretrain", "--config", config, "--data", data, "--out", tmp_path / "r",
                 "--quiet", "--dist-timeout", "30", prefix=[str(helper)], timeout=200)
    assert res.returncode != 0
    assert json.loads((tmp_path / "r/config.json").read_text())["train"]["max_steps"] == 10


@pytest.mark.slow
def test_fsdp_trains_like_ddp_and_resumes(setup, runs, tmp_path):
    """train.parallel = "fsdp" shards the model (FSDP2 fully_shard); its checkpoints hold the
    whole model and optimizer state (gathered tensor by tensor), laid out as in any other run,
    so FSDP resumes FSDP and DDP resumes FSDP."""
    data, config = setup
    fsdp = ("--set", "train.parallel=fsdp")
    pretrain(2, data, config, tmp_path / "fsdp", *fsdp, "--stop-after", "3")
    pretrain(2, data, config, tmp_path / "fsdp", *fsdp, "--resume", "--stop-after", "3")
    # Under FSDP the optimizer's state is each rank's shard (torch.distributed.checkpoint),
    # in the checkpoint's manifest; the weights are whole.
    ck = tmp_path / "fsdp/checkpoints/step-0000006"
    shards = sorted(p.name for p in (ck / "optimizer").iterdir())
    assert ".metadata" in shards and len(shards) >= 3, shards  # one file per rank at least
    manifest = json.loads((ck / "manifest.json").read_text())
    assert {f"optimizer/{n}" for n in shards} <= set(manifest)
    assert "optimizer" not in torch.load(ck / "state.pt", weights_only=True)
    pretrain(2, data, config, tmp_path / "fsdp", "--resume")  # steps 7-10 with DDP
    assert_same_run(runs(2), tmp_path / "fsdp", exact=False)
    ddp_ck = tmp_path / "fsdp/checkpoints/step-0000010"
    assert "optimizer" in torch.load(ddp_ck / "state.pt", weights_only=True)


@pytest.mark.slow
def test_muon_under_ddp_and_fsdp_trains_like_one_process_and_resumes(setup, runs, tmp_path):
    """train.optimizer=muon on 2 processes: DDP steps as one process does; under FSDP2 each
    matrix is a sharded DTensor whose Newton-Schulz products run on the whole matrix, so it
    too steps as one process (to float summation order), and a run stopped and resumed
    (its optimizer state in shards) ends the same."""
    script = Path(__file__).parents[1] / "fixtures/dist/muon_sharded.py"
    res = launch(2, prefix=[str(script)])
    assert res.returncode == 0 and "equals the whole matrix's" in res.stdout, why_failed(res)
    # Whole runs: Newton-Schulz runs in bf16 (torch's, as the reference's), so a gradient
    # summed in another order can move a bf16 rounding; over 10 steps the weights stay
    # within 3e-4 of one process's (measured: 5e-5 under DDP, 2e-4 under FSDP, on the
    # Intel Xeon), the losses within 1e-4.
    data, config = setup
    muon, fsdp = ("--set", "train.optimizer=muon"), ("--set", "train.parallel=fsdp")
    one = runs(1, *muon)
    pretrain(2, data, config, tmp_path / "fsdp", *muon, *fsdp, "--stop-after", "5")
    pretrain(2, data, config, tmp_path / "fsdp", *muon, *fsdp, "--resume")
    for other in (runs(2, *muon), tmp_path / "fsdp"):
        assert_same_run(one, other, exact=False, atol=3e-4)


@pytest.mark.slow
def test_finetune_on_two_processes_equals_one(tmp_path):
    from helpers import write_sentiment

    from electra.model import Discriminator
    from electra.model.bodies import model_preset
    from electra.saved import folders

    write_sentiment(tmp_path / "train.csv", 256, 0)
    write_sentiment(tmp_path / "dev.csv", 64, 1)
    tok = train_tokenizer([str(tmp_path / "train.csv")], 100, tmp_path / "tok")
    torch.manual_seed(0)
    disc = Discriminator(model_preset("tiny", vocab_size=tok.get_vocab_size(), num_layers=2,
                                      hidden_dropout=0.0, attention_dropout=0.0))
    folders.save(disc, "discriminator", tmp_path / "run/discriminator", tok)
    common = ["finetune", "--model", tmp_path / "run", "--task", "custom", "--train",
              tmp_path / "train.csv", "--dev", tmp_path / "dev.csv", "--set", "epochs=2",
              "--set", "precision=fp32", "--set", "batch_size=16"]
    assert main([str(a) for a in common] + ["--out", str(tmp_path / "ft1")]) == 0
    res = launch(2, *common, "--out", tmp_path / "ft2")
    assert res.returncode == 0, why_failed(res)
    r1 = json.loads((tmp_path / "ft1/results.json").read_text())
    r2 = json.loads((tmp_path / "ft2/results.json").read_text())
    assert r1["seeds"] == r2["seeds"]
    w1 = load_file(tmp_path / "ft1/seed-1/model.safetensors")
    w2 = load_file(tmp_path / "ft2/seed-1/model.safetensors")
    for k in w1:
        torch.testing.assert_close(w1[k], w2[k], rtol=1e-4, atol=1e-5, msg=k)
    res = launch(2, *common[:-2], "--set", "batch_size=15", "--out", tmp_path / "bad")
    assert res.returncode != 0
    assert res.stderr.count("batch_size=15 does not split into 2 processes") == 1
    # Multi-task: each step's task is drawn alike on every rank (the other heads get no
    # gradient: DDP is told), and two processes train like one.
    copa = Path(__file__).parent.parent / "fixtures/superglue/COPA"
    multi = [*common[:4], "custom,copa", "--data", f",{copa}", "--train",
             f"{tmp_path / 'train.csv'},", "--dev", f"{tmp_path / 'dev.csv'},", *common[9:]]
    assert main([str(a) for a in multi] + ["--out", str(tmp_path / "mt1")]) == 0
    res = launch(2, *multi, "--out", tmp_path / "mt2")
    assert res.returncode == 0, why_failed(res)
    r1, r2 = (json.loads((tmp_path / f"mt{n}/results.json").read_text()) for n in (1, 2))
    assert r1["seeds"] == r2["seeds"]
    for task in ("custom", "copa"):
        w1, w2 = (load_file(tmp_path / f"mt{n}/seed-1/{task}/model.safetensors")
                  for n in (1, 2))
        for k in w1:
            torch.testing.assert_close(w1[k], w2[k], rtol=1e-4, atol=1e-5, msg=k)


def test_embedding_finetune_on_two_processes_equals_one(tmp_path):
    """InfoNCE's negatives are every rank's documents of the micro-batch (gathered with
    their gradients), so two processes see what one does: the same dev scores, weights
    within 1e-4. The cached loss over 4 micro-batches trains as the whole batch at once
    (weights within 1e-5), on two processes of 2 micro-batches each too (within 1e-4)."""
    import random

    words = [f"{a}{b}" for a in "bcdfghjklm" for b in "aeiou"]
    image = dict(zip(words, random.Random(42).sample(words, len(words)), strict=True))
    rng, rows = random.Random(0), []
    for _ in range(64):
        q = rng.sample(words, 2)
        rows.append({"query": " ".join(q), "positive": " ".join(image[w] for w in q)})
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "c.txt").write_text((" ".join(words) + "\n") * 5)
    tok = train_tokenizer([str(tmp_path / "c.txt")], 200, tmp_path / "tok")
    from electra.model import Discriminator
    from electra.model.bodies import model_preset
    from electra.saved import folders

    torch.manual_seed(0)  # no dropout: each rank draws its own
    disc = Discriminator(model_preset("tiny", vocab_size=tok.get_vocab_size(), num_layers=2,
                                      hidden_dropout=0.0, attention_dropout=0.0))
    folders.save(disc, "discriminator", tmp_path / "run/discriminator", tok)
    common = ["finetune", "--model", tmp_path / "run", "--task", "embedding", "--train",
              tmp_path / "pairs.jsonl", "--dev", tmp_path / "pairs.jsonl", "--set",
              "epochs=2", "--set", "precision=fp32", "--set", "batch_size=16", "--set",
              "max_length=16", "--set", "learn_temperature=true"]
    assert main([str(a) for a in common] + ["--out", str(tmp_path / "e1")]) == 0
    res = launch(2, *common, "--out", tmp_path / "e2")
    assert res.returncode == 0, why_failed(res)
    r1, r2 = (json.loads((tmp_path / f"e{n}/results.json").read_text()) for n in (1, 2))
    for metric, value in r1["seeds"]["1"]["dev"].items():
        assert r2["seeds"]["1"]["dev"][metric] == pytest.approx(value, abs=1e-3), metric
    w1, w2 = (load_file(tmp_path / f"e{n}/seed-1/model.safetensors") for n in (1, 2))
    for k in w1:
        torch.testing.assert_close(w1[k], w2[k], rtol=1e-4, atol=1e-4, msg=k)
    cached = [*common, "--set", "cached=true", "--set"]
    assert main([str(a) for a in cached] + ["grad_accum=4", "--out", str(tmp_path / "c1")]) == 0
    res = launch(2, *cached, "grad_accum=2", "--out", tmp_path / "c2")
    assert res.returncode == 0, why_failed(res)
    for n, tol in ((1, 1e-5), (2, 1e-4)):
        wc = load_file(tmp_path / f"c{n}/seed-1/model.safetensors")
        for k in w1:
            torch.testing.assert_close(wc[k], w1[k], rtol=tol, atol=tol, msg=f"c{n} {k}")


@pytest.mark.slow
def test_two_processes_stream_their_parts_of_a_store_as_one_reads_the_folder(setup, s3,
                                                                           tmp_path):
    """train.shuffle=blocks with two parts: two processes streaming the folder from an S3
    server train as one process reading it locally, and each fetched its own part's blocks
    (the first and last, read by both when the split is opened, aside)."""
    import fsspec

    data, config = setup
    _, env = s3  # a server and store of this test's own (conftest)
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    for f in sorted(data.rglob("*")):
        if f.is_file():
            fs.put_file(str(f), f"data/letters/{f.relative_to(data).as_posix()}")
    blocks = ("--set", "train.shuffle=blocks", "--set", "train.shuffle_block=16", "--set",
              "train.shuffle_window=2", "--set", "train.partitions=2")
    pretrain(1, data, config, tmp_path / "one", *blocks)
    pretrain(2, "s3://data/letters", config, tmp_path / "two", *blocks, env=env)
    assert_same_run(tmp_path / "one", tmp_path / "two", exact=False)
    n = int(json.loads((data / "meta.json").read_text())["splits"]["train"]["examples"])
    opened = {0, (n - 16) // 16, (n - 1) // 16}
    cache = Path(env["ELECTRA_CACHE"])
    read = [{int(p.stem.rpartition("-")[2]) for p in
             (cache / f"stream/rank-{r}").glob("*-train-ids.bin-*.bin")} - opened
            for r in (0, 1)]
    assert read[0] and read[1] and read[0].isdisjoint(read[1])
