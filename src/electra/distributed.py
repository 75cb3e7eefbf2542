"""Data-parallel runs under `torchrun`: the process group, per-rank seeds, agreeing at start-up.

`torchrun --nproc-per-node N -m electra pretrain ...` (or `finetune`) sets RANK, WORLD_SIZE
and LOCAL_RANK; :func:`setup` then joins the process group (NCCL on GPUs, gloo on CPU) with a
timeout, so that a rank that dies makes the others stop with an error instead of waiting
forever. Without those variables everything runs in one process and nothing here is used.

Only rank 0 writes files. Errors found on one rank (a missing data folder, a config that
differs) are shared with :func:`agree` so that every rank stops with the same message.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import numpy as np
import torch
import torch.distributed as dist

from electra.errors import UserError

T = TypeVar("T")
DEFAULT_TIMEOUT_S = 1800.0  # longer than any rank-0-only pause (checkpoint writing)


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def launched() -> Dist:
    """This process's place, from torchrun's environment (one process when absent)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    return Dist(int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", "0")))


def setup(device: torch.device, timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[Dist, torch.device]:
    """Join the process group if launched by torchrun; returns (place, this rank's device)."""
    place = launched()
    if not place.enabled:
        return place, device
    if device.type == "cuda":
        device = torch.device("cuda", place.local_rank)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                timeout=timedelta(seconds=timeout_s))
    return place, device


def teardown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def rank_seed(seed: int, rank: int) -> int:
    """A seed for rank ``rank``'s own streams (dropout), derived from the run's seed."""
    return int(np.random.SeedSequence([seed, rank]).generate_state(1)[0])


def fingerprint(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def gather(place: Dist, obj: T) -> list[T]:
    """Every rank's ``obj``, in rank order (``[obj]`` in one process)."""
    if not place.enabled:
        return [obj]
    out: list[Any] = [None] * place.world_size
    dist.all_gather_object(out, obj)
    return out


def agree(place: Dist, fn: Callable[[], T], what: str) -> T:
    """Run ``fn`` on every rank; if it fails on any, every rank raises that rank's error.

    Call it at the same point on every rank. ``what`` names the step for the message.
    """
    if not place.enabled:
        return fn()
    result: Any = None
    error: str | None = None
    try:
        result = fn()
    except UserError as err:
        error = str(err)
    errors = gather(place, error)
    bad = [(r, e) for r, e in enumerate(errors) if e is not None]
    if bad:
        rank, message = bad[0]
        # Every rank raises it; only rank 0 prints it.
        raise _shared(message if rank == 0 else f"rank {rank} ({what}): {message}")
    return result


def on_main(place: Dist, fn: Callable[[], T], what: str) -> T:
    """Run ``fn`` on rank 0 only and hand its result (or its error) to every rank."""
    result = agree(place, fn if place.is_main else (lambda: None), what)
    if not place.enabled:
        return result
    box = [result]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def check_same(place: Dist, value: Any, what: str) -> None:
    """Stop every rank when ranks disagree on ``value`` (config, data), naming the ranks."""
    if not place.enabled:
        return
    prints = gather(place, fingerprint(value))
    differ = [r for r, p in enumerate(prints) if p != prints[0]]
    if differ:
        raise _shared(f"ranks disagree on {what}: rank(s) {', '.join(map(str, differ))} "
                        f"differ from rank 0; launch every rank with the same arguments, "
                        f"data and code")


def _shared(message: str) -> UserError:
    err = UserError(message)
    err.shared = True
    return err


def all_sum(place: Dist, t: torch.Tensor) -> torch.Tensor:
    """The sum of ``t`` over ranks (in place, returned); ``t`` itself in one process."""
    if place.enabled:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def barrier(place: Dist) -> None:
    if place.enabled:
        dist.barrier()
