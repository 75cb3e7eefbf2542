"""The runtime: devices named by the user, and malloc keeping a training step's memory."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest
import torch

from electra.errors import UserError
from electra.runtime import resolve_device

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
