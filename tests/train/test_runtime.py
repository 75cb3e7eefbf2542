"""The runtime: devices named by the user, and malloc keeping a training step's memory."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest
import torch

from electra.errors import UserError
from electra.runtime import autocast, grad_scaler, resolve_device, resolve_precision

# A step's worth of large tensors allocated, touched and freed 8 times: the pages each of the
# last 6 times faults in (fresh memory from the kernel).
REFAULTS = """
import resource, sys, torch
from electra.runtime import keep_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "keep" else False
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
counts = []
for _ in range(8):
    before = faults()
    a, b, c = torch.ones(37_000_000), torch.ones(4_000_000), torch.ones(9_000_000)
    del a, b, c
    counts.append(faults() - before)
print(applied, sum(counts[2:]))
"""


def refaults(mode: str, **env: str) -> tuple[bool, int]:
    out = subprocess.run([sys.executable, "-c", REFAULTS, mode], capture_output=True,
                         text=True, check=True, env={**os.environ, **env}).stdout.split()
    return out[0] == "True", int(out[1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc malloc tuning only")
def test_kept_memory_is_reused_instead_of_faulted_back_in():
    """Freed training memory stays with the process: a repeated step of ~200 MB of tensors
    stops faulting its pages back in (what made the CPU step 1.1-1.25x faster)."""
    applied, plain = refaults("plain")
    assert not applied and plain > 6 * 40_000  # every step: ~45k fresh 4 KiB pages
    applied, kept = refaults("keep")
    assert applied and kept < plain / 3
    assert refaults("keep", ELECTRA_MALLOC="system")[0] is False  # the opt-out


@pytest.mark.parametrize("name, words", [
    ("bogus", "--device bogus: not a device; use auto, cpu, cuda or cuda:N"),
    ("meta", "electra runs on cpu or cuda"),
])
def test_bad_devices_are_one_line(name, words):
    with pytest.raises(UserError, match=words.replace("(", r"\(")):
        resolve_device(name)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu_says_use_cpu():
    with pytest.raises(UserError, match=r"no CUDA device.*--device cpu"):
        resolve_device("cuda")
    assert resolve_device("auto").type == "cpu"


@pytest.mark.parametrize("amx,avx512_bf16,want", [(False, False, "fp32"), (True, False, "bf16"),
                                                  (False, True, "bf16")])
def test_auto_precision_is_bf16_only_where_the_cpu_multiplies_it(monkeypatch, amx, avx512_bf16,
                                                                 want):
    """An AVX2 CPU emulates bf16 (an AMD EPYC ran a bf16 matmul ~75x slower than fp32), so
    `auto` gives fp32 there; AMX or AVX512-BF16 give bf16. Explicit settings are kept."""
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    cpu = torch.device("cpu")
    assert resolve_precision(cpu, "auto") == want
    for explicit in ("bf16", "fp16", "fp32"):
        assert resolve_precision(cpu, explicit) == explicit
    x = torch.randn(4, 8)
    with autocast(cpu, "auto"):
        y = torch.nn.functional.linear(x, torch.randn(3, 8))
    assert y.dtype == (torch.bfloat16 if want == "bf16" else torch.float32)
    assert grad_scaler(cpu, "auto") is None


def test_commands_whose_shapes_vary_bound_onednns_kernel_cache(monkeypatch, tmp_path):
    """Fine-tuning, evaluation, prediction and embedding hold oneDNN's built kernels to 64
    (each new batch shape builds bf16 kernels, and 1,024 of them held made bf16 peak above
    fp32); a value the user set is kept; pretraining leaves it as it is."""
    from electra.commands import finetune, predict
    from electra.runtime import KERNEL_CACHE, bound_kernel_cache

    key = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"
    monkeypatch.delenv(key, raising=False)
    bound_kernel_cache()
    assert os.environ[key] == str(KERNEL_CACHE) == "64"
    monkeypatch.setenv(key, "8")
    bound_kernel_cache()
    assert os.environ[key] == "8"
    for call in (lambda: finetune.main("sst2", str(tmp_path / "o"), random_init="nope"),
                 lambda: finetune.evaluate(str(tmp_path), "sst2"),
                 lambda: predict.predict(tmp_path, tmp_path / "x")):
        monkeypatch.delenv(key, raising=False)
        with pytest.raises(UserError):
            call()
        assert os.environ[key] == "64"
