"""Where and how this process runs: its device, its precision, and its place among processes.

`torchrun --nproc-per-node N -m electra pretrain ...` (or `finetune`) sets RANK, WORLD_SIZE
and LOCAL_RANK; :func:`start`, entered by the command's entry point, then joins the process
group (NCCL on GPUs, gloo on CPU) with a timeout, so that a rank that dies makes the others
stop with an error instead of waiting forever, and leaves it when the command ends. Without
those variables everything runs in one process and every collective here is the identity.

Only rank 0 writes files. Errors found on one rank (a missing data folder, a config that
differs) are shared with :meth:`Runtime.agree` so that every rank stops with the same message.

Precision is one string: ``bf16`` | ``fp16`` (with a gradient scaler) | ``fp32`` | ``auto``,
the default, which :func:`resolve_precision` turns into bf16 where the hardware multiplies
bf16 natively (a CUDA GPU that supports it; a CPU with AMX or AVX512-BF16), fp16 on an older
GPU, and fp32 on other CPUs. On a CPU without those units bf16 is emulated: on an AMD EPYC
(Zen 3, AVX2) a 512 x 512 bf16 matmul ran at 1.4 GFLOP/s against fp32's 106, and a
bf16-autocast Linear (8192 x 256 -> 1024) 6.6x slower than in fp32.

Memory: a training step allocates and frees the same large tensors every step. glibc's malloc
hands freed memory back to the kernel (heap trimming, one mmap per block over 32 MB), so each
step faulted ~140k fresh pages back in: ~50 ms of a 0.7 s CPU step. :func:`keep_freed_memory`
(``start(..., keep_memory=True)``, what pretraining asks for) makes the process keep and reuse
it, as tcmalloc or jemalloc would: 1.1-1.25x the CPU pretraining step for 2.5% more peak
memory (bench/RESULTS.md). Fine-tuning, whose batch shapes vary, gained nothing from it and
does not ask. ``ELECTRA_MALLOC=system`` leaves malloc as it is; a preloaded tcmalloc or
jemalloc is left alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

import numpy as np
import torch
import torch.distributed as dist

from electra import environ
from electra.config import DEFAULT_TIMEOUT_S
from electra.errors import UserError
from electra.model.kernels import Kernels, kernels_for
from electra.model.kernels import use as use_kernels

T = TypeVar("T")
M = TypeVar("M", bound=torch.nn.Module)


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` (CUDA when present), ``cpu``, ``cuda`` or ``cuda:N``; anything else, or a
    device this machine does not have, is a UserError naming the choices."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise UserError(f"--device {name}: not a device; use auto, cpu, cuda or cuda:N") from None
    if device.type == "cpu":
        return device
    if device.type != "cuda":
        raise UserError(f"--device {name}: electra runs on cpu or cuda; use auto, cpu, cuda "
                        f"or cuda:N")
    if not torch.cuda.is_available():
        raise UserError(f"--device {name}: this machine has no CUDA device (or this torch "
                        f"build has no CUDA); use --device cpu")
    if device.index is not None and device.index >= torch.cuda.device_count():
        raise UserError(f"--device {name}: there are {torch.cuda.device_count()} CUDA "
                        f"device(s), numbered from 0")
    return device


def placed(module: M, device: str = "auto") -> M:
    """``module`` on ``device`` (:func:`resolve_device`'s names), with that device's kernels
    (a loaded model is built with the CPU's): where `evaluate`, `predict` and the embeddings
    run a saved model."""
    where = resolve_device(device)
    module.to(where)
    use_kernels(module, kernels_for(where))
    return module


def host_reads_free(device: torch.device) -> bool:
    """Whether reading a tensor's value on the host costs nothing: on a CPU there is no
    queue of device work to wait for (on a GPU each read is a sync)."""
    return device.type == "cpu"


def synchronize(device: torch.device) -> None:
    """Wait for ``device``'s queued work (a GPU's); a CPU has none."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def available_memory(device: torch.device) -> int | None:
    """Bytes ``device`` can still hand out: a GPU's free memory, a Linux host's MemAvailable
    (None where neither is known)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed memory for reuse instead of returning it to the kernel (no
    heap trimming, large blocks from the heap rather than one mmap each). For the rest of the
    process; Linux with glibc only. Returns whether it was applied."""
    import ctypes
    import platform

    preloaded = os.environ.get("LD_PRELOAD", "")
    if (environ.get("ELECTRA_MALLOC") == "system" or "jemalloc" in preloaded
            or "tcmalloc" in preloaded or platform.libc_ver()[0] != "glibc"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
    return bool(libc.mallopt(M_TRIM_THRESHOLD, 1 << 30) and libc.mallopt(M_MMAP_MAX, 0))


KERNEL_CACHE = 64  # oneDNN's built CPU kernels kept where batch shapes vary (its default: 1,024)


def bound_kernel_cache() -> None:
    """Keep at most :data:`KERNEL_CACHE` of oneDNN's built CPU kernels (its primitive cache,
    1,024 by default) in a command whose batches change shape (fine-tuning's unpadded
    batches, evaluation, prediction): every new shape builds new bf16 kernels, each held
    with its buffers, so bf16 fine-tuning peaked above fp32's. Measured with
    bench/embedding_vs_st.py's command (ELECTRA-Small, 1,600 pairs, batch 32, bf16; Intel
    Xeon AMX): peak 1.99-2.03 GB at 1,024, 1.76 at 256, 1.59 at 128, 1.50-1.52 at 64, 1.32 at 0
    (fp32: 1.49-1.53), CPU seconds 30-31 at 64-1,024 and 52 at 0; weights bitwise the same.
    Pretraining, whose shapes repeat, builds about 60 and is left alone. A value the user
    set (ONEDNN_PRIMITIVE_CACHE_CAPACITY) is kept; it acts where oneDNN has built no
    kernel yet in this process."""
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(KERNEL_CACHE))


def use_threads(threads: int, key: str, device: torch.device) -> str | None:
    """Run torch's CPU ops on ``threads`` threads (0: torch's default, one per core), and on
    a machine other jobs already keep busy, on as many as there are idle cores (at least
    one): torch's threads wait on each other at every op, and a thread the scheduler sets
    aside holds up the rest. Measured with bench/busy_threads.py (the demo's step, tiny
    preset, batch 32 x 128, bf16, on a 2-core AMD EPYC Zen 4, medians of 3): beside 1, 2 and
    5 busy loops 1 thread ran 2.3x, 1.5x and 2.5x faster than 2 (0.59 against 1.36, 0.93
    against 1.42, 2.10 against 5.23 s a step); on the idle machine 2 threads ran 1.65x faster
    than 1. Idle cores are sampled from /proc/stat (0.2 s, only when the 1-minute load is
    0.5 or more: an idle machine pays nothing), so load an earlier stage left is not taken
    for other jobs. Returns the note saying so (naming ``key``, the setting that chooses),
    or None."""
    if threads:
        torch.set_num_threads(threads)
        return None
    have, cores = torch.get_num_threads(), os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):
        return None
    if device.type != "cpu" or have <= 1 or load < 0.5:
        return None
    idle = idle_cores(cores)
    if idle is None:
        idle = max(0.0, cores - load)
    if idle >= have - 0.5:
        return None
    fewer = max(1, min(have - 1, round(idle)))
    torch.set_num_threads(fewer)
    return (f"electra: note: this machine is busy (load {load:.1f} on {cores} cores, {idle:.1f} "
            f"idle), so torch runs on {fewer} thread{'s' if fewer > 1 else ''} instead of "
            f"{have} (threads that wait on each other behind other jobs ran 1.5-2.5x "
            f"slower); choose with --set {key}=N")


def rows_without_padding(mask: torch.Tensor) -> np.ndarray | None:
    """Which rows of a (B, T) attention mask have no padding, read on the host (no device
    read: the loader's batches are still there); None for a mask already on a device."""
    return mask.numpy().all(axis=1) if mask.device.type == "cpu" else None


def idle_cores(cores: int, seconds: float = 0.2) -> float | None:
    """How many cores were idle over ``seconds`` (/proc/stat's idle and iowait time); None
    where /proc/stat cannot be read."""
    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
        return sum(values), values[3] + (values[4] if len(values) > 4 else 0)

    try:
        total0, idle0 = sample()
        time.sleep(seconds)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    return cores * (idle1 - idle0) / max(1, total1 - total0)


def resolve_precision(device: torch.device, precision: str) -> str:
    """``auto`` -> what this device computes fastest (see the module's docstring); any other
    precision is returned as it is."""
    if precision != "auto":
        return precision
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if device.type == "cpu":
        return "bf16" if _cpu_has_bf16() else "fp32"
    return "fp32"


def fast_fp32(device: torch.device, precision: str) -> None:
    """fp32 on a GPU multiplies in TF32 (tensor cores; 10-bit mantissa products, fp32
    accumulation), as transformers' ``tf32`` and most training code do; a CPU has nothing
    alike."""
    if device.type == "cuda" and precision == "fp32":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


# NVIDIA's dense (no sparsity) tensor-core peaks from each GPU's datasheet, FLOP/s: bf16 and
# fp16, then TF32 (what fp32 runs multiply in here); the first name the device's contains.
GPU_PEAKS = {"H100 PCIe": (756e12, 378e12), "H100": (989.4e12, 494.7e12),
             "H200": (989.4e12, 494.7e12), "A100": (312e12, 156e12),
             "L40S": (362.05e12, 183e12), "L4": (121e12, 60e12), "A10": (125e12, 62.5e12)}


def peak_flops(device: torch.device, precision: str) -> tuple[float, str]:
    """The FLOP/s that MFU divides by, and where it comes from: a GPU's datasheet
    (``GPU_PEAKS``), else square matrix multiplies measured here in the run's ``precision``
    (a resolved one: bf16, fp16 or fp32) on this process's threads."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, (half, tf32) in GPU_PEAKS.items():
            if key in name:
                return (tf32 if precision == "fp32" else half), (
                    f"{key} datasheet, {'TF32' if precision == 'fp32' else precision} dense")
    n, peak = _measured_peak(device, precision, torch.get_num_threads())
    return peak, f"measured: a {n}^3 {precision} matmul, {torch.get_num_threads()} threads"


@functools.lru_cache(maxsize=8)
def _measured_peak(device: torch.device, precision: str, threads: int) -> tuple[int, float]:
    """(n, FLOP/s): the best of three n^3 multiplies after one more, n = 1024; in bf16 or
    fp16, 256 where a 1024^3 one would take over half a second (emulated on a CPU without
    the units: 1024^3 took 14 s on an AVX2-only AMD EPYC). fp32 goes straight to 1024^3: a
    256^3 probe is too short to time on a busy CPU (2.1 GFLOP/s against 1024^3's 29.6 there,
    both cores taken by another job). Once a process; draws nothing from the random
    streams."""
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
    for n in (256, 1024) if dtype != torch.float32 else (1024,):
        a, best = torch.ones(n, n, device=device, dtype=dtype), float("inf")
        for i in range(4):
            _sync(device)
            t0 = time.perf_counter()
            a @ a
            _sync(device)
            best = min(best, time.perf_counter() - t0) if i else best
        if n == 1024 or best * 64 > 0.5:  # 256^3: only where 1024^3 is out of reach
            return n, 2 * n**3 / best
    raise AssertionError("unreachable")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def compile_missing(device: torch.device) -> str | None:
    """Why ``torch.compile`` cannot run on ``device`` here (None: it can): it needs dynamo's
    support of this Python, and inductor a C++ compiler (CPU) or Triton (GPU)."""
    import shutil

    if not hasattr(torch, "compile") or not torch._dynamo.is_dynamo_supported():
        return f"torch {torch.__version__} cannot compile on this Python"
    if device.type == "cuda":
        from torch.utils._triton import has_triton

        return None if has_triton() else "Triton is not installed (pip install triton)"
    if not any(shutil.which(c) for c in (os.environ.get("CXX", "g++"), "g++", "c++", "clang++")):
        return "no C++ compiler found (inductor needs g++ or clang++ on a CPU)"
    return None


def check_compile(enabled: bool, device: torch.device, key: str) -> None:
    """``key=true`` (``train.compile``...) where torch cannot compile: a UserError naming
    the fallback, before anything is written."""
    missing = compile_missing(device) if enabled else None
    if missing:
        raise UserError(f"{key}=true: {missing}; run without it (--set {key}=false)")


def check_cuda_graphs(enabled: bool, device: torch.device) -> None:
    """``train.cuda_graphs=true`` off a CUDA device, or where torch cannot compile: a
    UserError naming the fallback, before anything is written."""
    key = "train.cuda_graphs"
    if enabled and device.type != "cuda":
        raise UserError(f"{key}=true: CUDA graphs need a CUDA device and this run is on "
                        f"{device.type}; run without it (--set {key}=false)")
    check_compile(enabled, device, key)


def _cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (AMX tiles or AVX512-BF16)."""
    cpu = torch.cpu
    return any(getattr(cpu, f, lambda: False)() for f in
               ("_is_amx_tile_supported", "_is_avx512_bf16_supported"))


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """The one place precision becomes an autocast context (fp32: none; auto: see
    :func:`resolve_precision`)."""
    precision = resolve_precision(device, precision)
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device.type, dtype=dtype)


def grad_scaler(device: torch.device, precision: str) -> torch.amp.GradScaler | None:
    """fp16 needs loss scaling (its gradients underflow); bf16 and fp32 do not."""
    fp16 = resolve_precision(device, precision) == "fp16"
    return torch.amp.GradScaler(device.type) if fp16 else None


def rank_seed(seed: int, rank: int) -> int:
    """A seed for rank ``rank``'s own streams (dropout), derived from the run's seed."""
    return int(np.random.SeedSequence([seed, rank]).generate_state(1)[0])


def fingerprint(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class Runtime:
    """This process: its rank among ``world_size`` processes, and its device."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    chosen_kernels: Kernels | None = None  # None: the device's own (kernels_for)
    grouped: bool = False  # in a process group of its own (ELECTRA_PROCESS_GROUP=1, one rank)

    @property
    def kernels(self) -> Kernels:
        """The model's dropout and attention for this device, chosen once: what every model
        this process trains is built with (``electra.model.kernels``)."""
        return self.chosen_kernels or kernels_for(self.device)

    def model_kernels(self, unpad: bool) -> Kernels:
        """:attr:`kernels`, unpadding padded batches or not."""
        return dataclasses.replace(self.kernels, unpad=unpad)

    @property
    def pins_memory(self) -> bool:
        """Whether batches are staged in pinned host memory (a GPU's asynchronous copies)."""
        return self.device.type == "cuda"

    @property
    def device_ids(self) -> list[torch.device] | None:
        """What DDP is given as ``device_ids``: this process's GPU (None on a CPU)."""
        return [self.device] if self.device.type == "cuda" else None

    def device_rng_state(self) -> dict[str, torch.Tensor]:
        """The device's own random state where it has one (a GPU's), by device type."""
        if self.device.type == "cuda":
            return {"cuda": torch.cuda.get_rng_state(self.device)}
        return {}

    def set_device_rng_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`device_rng_state` saved (on the same kind of device)."""
        if "cuda" in state and self.device.type == "cuda":
            torch.cuda.set_rng_state(state["cuda"], self.device)

    @property
    def enabled(self) -> bool:
        """Launched by torchrun with more than one process, or with one and
        ``ELECTRA_PROCESS_GROUP=1`` (one GPU then runs NCCL, DDP and FSDP as a cluster does)."""
        return self.world_size > 1 or self.grouped

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    # -- collectives: each is the identity in one process -------------------------------

    def all_sum(self, t: torch.Tensor) -> torch.Tensor:
        """The sum of ``t`` over ranks (in place, returned)."""
        if self.enabled:
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t

    def gather(self, obj: T) -> list[T]:
        """Every rank's ``obj``, in rank order (``[obj]`` in one process)."""
        if not self.enabled:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    def agree(self, fn: Callable[[], T], what: str) -> T:
        """Run ``fn`` on every rank; if it fails on any, every rank raises that rank's error.

        Call it at the same point on every rank. ``what`` names the step for the message.
        """
        if not self.enabled:
            return fn()
        result: Any = None
        error: str | None = None
        try:
            result = fn()
        except UserError as err:
            error = str(err)
        bad = [(r, e) for r, e in enumerate(self.gather(error)) if e is not None]
        if bad:
            rank, message = bad[0]
            # Every rank raises it; only rank 0 prints it.
            raise _shared(message if rank == 0 else f"rank {rank} ({what}): {message}")
        return result

    def on_main(self, fn: Callable[[], T], what: str) -> T:
        """Run ``fn`` on rank 0 only and hand its result (or its error) to every rank."""
        result = self.agree(fn if self.is_main else (lambda: None), what)
        if not self.enabled:
            return result
        box = [result]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def check_same(self, value: Any, what: str) -> None:
        """Stop every rank when ranks disagree on ``value`` (config, data), naming the ranks."""
        if not self.enabled:
            return
        prints = self.gather(fingerprint(value))
        differ = [r for r, p in enumerate(prints) if p != prints[0]]
        if differ:
            raise _shared(f"ranks disagree on {what}: rank(s) {', '.join(map(str, differ))} "
                          f"differ from rank 0; launch every rank with the same arguments, "
                          f"data and code")


def _shared(message: str) -> UserError:
    err = UserError(message)
    err.shared = True
    return err


def launched() -> Runtime:
    """This process's place, from torchrun's environment (one process when absent)."""
    world = environ.get("WORLD_SIZE")
    grouped = world == 1 and "RANK" in os.environ and environ.get(
        "ELECTRA_PROCESS_GROUP") == "1"
    if world <= 1 and not grouped:
        return Runtime()
    return Runtime(environ.get("RANK"), world, environ.get("LOCAL_RANK"), grouped=grouped)


@contextlib.contextmanager
def start(device: str = "auto", timeout_s: float = DEFAULT_TIMEOUT_S,
          keep_memory: bool = False) -> Iterator[Runtime]:
    """The runtime of a training command, for its whole length: under torchrun, join the
    process group (one GPU per process) and leave it at the end, however the command ends.
    ``keep_memory``: :func:`keep_freed_memory` first."""
    place = launched()
    dev = resolve_device(device)
    if keep_memory:
        keep_freed_memory()
    if not place.enabled:
        yield Runtime(device=dev)
        return
    if dev.type == "cuda":
        dev = torch.device("cuda", place.local_rank)
        torch.cuda.set_device(dev)
    joined = not dist.is_initialized()
    if joined:  # a GPU named up front: NCCL connects eagerly, on that device
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo",
                                timeout=timedelta(seconds=timeout_s),
                                device_id=dev if dev.type == "cuda" else None)
    try:
        yield Runtime(place.rank, place.world_size, place.local_rank, dev,
                      grouped=place.grouped)
    finally:
        if joined and dist.is_initialized():
            dist.destroy_process_group()
