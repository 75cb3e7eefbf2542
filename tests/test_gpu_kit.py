"""The GPU kit (bench/gpu_kit.py) rehearsed on the CPU (SMOKE=1): both commands run every
stage, each stage's line lands in the results folder as it ends, and the work stays out of
it. What it measures is only meaningful on a GPU; here the code paths are what is checked."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from helpers import ROOT, shared_data

PART1 = ["env", "fp32", "step_tiny_4x32", "step_tiny_4x64", "step_without_padding", "compile",
         "finetune", "nccl"]


@pytest.mark.slow
def test_both_commands_run_every_stage_and_keep_each_line(tmp_path):
    glue, vocab = shared_data("glue/SST-2"), shared_data("vocab/bert-base-uncased-vocab.txt")
    data = tmp_path / "data"  # what `make gpu-data` writes into bench/data
    (data / "SST-2").mkdir(parents=True)
    rows = (glue / "train.tsv").read_text().splitlines()[:4001]
    (data / "SST-2" / "train.tsv").write_text("\n".join(rows) + "\n")
    shutil.copy(glue / "dev.tsv", data / "SST-2" / "dev.tsv")
    shutil.copy(vocab, data / "vocab.txt")
    results = tmp_path / "results"
    # Every stage runs however slow the CPU (bf16 is emulated where it has no bf16 units: the
    # first part took 75 s on an AVX2-only AMD EPYC); on a GPU each part plans for 285 s.
    env = {**os.environ, "SMOKE": "1", "KIT_DATA": str(data), "KIT_WORK": str(tmp_path / "w"),
           "KIT_SECONDS": "400"}
    if "PYTEST_XDIST_WORKER" not in os.environ:  # alone: every core (74 s on one, 58 on two)
        env.pop("OMP_NUM_THREADS", None)
    for part, stages in (("1", PART1), ("2", ["vocab", "graphs", "compare"])):
        done = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_kit.py"), part,
                               str(results)], env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        lines = [json.loads(x) for x in (results / "kit.jsonl").read_text().splitlines()]
        mine = [r for r in lines if r["stage"] in stages]
        assert [r["stage"] for r in mine] == stages
        for r in mine:
            assert r["ok"] is True, r
    assert [p.name for p in results.iterdir()] == ["kit.jsonl"]  # the work went elsewhere
    by = {r["stage"]: r for r in lines}
    assert by["fp32"]["fp32_ok"] and by["step_tiny_4x32"]["ours_over_hf"] > 0
    assert by["finetune"]["pad_fraction"] > 0.5  # SST-2 batches of 32 are mostly padding
    assert by["finetune"]["eval_logits_max_abs_diff"] < 0.1  # the same weights (bf16 or fp32)
    assert by["nccl"]["ddp"]["step"] == by["nccl"]["fsdp"]["step"] == 3
    assert set(by["compare"]["models"]) >= {"electra-100", "mlm-100", "random-init"}
    # The same weights and batches: the padded output layer trains to the same losses.
    assert abs(by["vocab"]["multiple_1_last_loss"] - by["vocab"]["multiple_64_last_loss"]) < 1e-3
    # train.cuda_graphs (reduce-overhead is the GPU's; here the blocks trace with dynamo alone)
    assert abs(by["graphs"]["compiled_last_loss"] - by["graphs"]["graphs_last_loss"]) < 1e-3


def test_without_its_data_the_kit_says_how_to_make_it(tmp_path):
    env = {**os.environ, "SMOKE": "1", "KIT_DATA": str(tmp_path / "none")}
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_kit.py"), "1",
                           str(tmp_path / "r")], env=env, capture_output=True, text=True)
    assert done.returncode == 2
    assert "make gpu-data" in done.stderr and not (tmp_path / "r").exists()
