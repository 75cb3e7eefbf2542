"""Signals that ask a run to stop, and the step at which every rank stops.

Ctrl-C (SIGINT) raises ``KeyboardInterrupt`` where it lands, as Python does. SIGTERM, what
``timeout``, ``kill``, ``docker stop``, Kubernetes and SLURM (at a job's time limit, or before
a preemption) send, and SIGUSR1, what SLURM sends ahead of the limit when a job asks with
``--signal=USR1@SECONDS``, raise :class:`Stopped`, a ``KeyboardInterrupt``: every command
then does what it does on Ctrl-C (a checkpoint of the last completed step, finished parts
kept) and exits ``128 + signal`` with the exact command that continues it.

Inside a training step (:func:`deferred`) such a signal only marks the stop as asked for;
the scaffold stops at the start of the next step (:func:`agreed`), after the last one's
metrics line and checkpoint, so nothing is cut in half. Under torchrun every rank gets the
signal (torchrun passes it on), though not at the same step: there the whole loop defers,
and the ranks agree on the step to stop at with one all-reduce on the host at the start of
each step (gloo; a CPU tensor, so it never waits for a GPU), then save together (each rank's
random streams, a sharded optimizer's shards) as a scheduled checkpoint does.

    with handling():              # the CLI, around a command
        ...
        with deferred():          # the training loop (the step, or the whole loop on ranks)
            if agreed(rt):        # at the start of a step: every rank stops here
                raise Stopped(...)
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

from electra.errors import Stopped  # (beside UserError: the data layer raises it too)

SIGNALS = ("SIGTERM", "SIGUSR1")  # those that have a handler here (SIGINT keeps Python's)


_installed = False
_pending: int | None = None  # the signal asked for, not yet acted on
_deferring = 0
_group: Any = None  # the host (gloo) process group the ranks agree in
_world: Any = None  # the process group it was made beside (a new one: a new group)


def _handle(signum: int, frame: Any) -> None:
    global _pending
    if _deferring:
        _pending = _pending or signum
        return
    raise Stopped(signum)


@contextlib.contextmanager
def handling() -> Iterator[None]:
    """SIGTERM and SIGUSR1 raise :class:`Stopped` (or, in :func:`deferred`, mark the stop),
    then the handlers that were there before come back. A no-op outside the main thread."""
    global _installed, _pending
    if threading.current_thread() is not threading.main_thread() or _installed:
        yield
        return
    sigs = [getattr(signal, s) for s in SIGNALS if hasattr(signal, s)]
    before = {s: signal.signal(s, _handle) for s in sigs}
    _installed, _pending = True, None
    try:
        yield
    finally:
        for s, h in before.items():
            signal.signal(s, h)
        _installed, _pending = False, None


def installed() -> bool:
    """Whether :func:`handling` is active (the CLI's commands; not a library call)."""
    return _installed


@contextlib.contextmanager
def deferred(enabled: bool = True) -> Iterator[None]:
    """Inside, a signal marks the stop (:func:`pending`) instead of raising."""
    global _deferring
    if not enabled:
        yield
        return
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1


def pending() -> int | None:
    """The signal that asked this process to stop, if one did."""
    return _pending


def agreed(rt: Any) -> int | None:
    """The signal every rank stops for at this step, if any rank was asked to stop (one
    all-reduce on the host under torchrun, on every rank; the local answer in one process).
    """
    if not rt.enabled:
        return _pending
    import torch
    import torch.distributed as dist

    global _group, _world
    if _world is not dist.group.WORLD:  # NCCL cannot reduce a CPU tensor: gloo beside it
        _group = (dist.group.WORLD if dist.get_backend() == "gloo"
                  else dist.new_group(backend="gloo"))
        _world = dist.group.WORLD
    flag = torch.tensor([_pending or 0], dtype=torch.int64)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=_group)
    return int(flag[0]) or None
