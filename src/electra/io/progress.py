"""Signs of life for long work: a tqdm bar on a terminal, a line every
``ELECTRA_PROGRESS_SECONDS`` (30 by default) in a log, nothing when quiet.

    with progress(total, "encoding the corpus", "text") as bar:
        for batch in batches:
            ...
            bar.update(len(batch))

Work deep in the library (the batched model calls every evaluation makes,
``electra.tasks.base.logits``) calls :func:`advance`, which moves the bar a command opened
with :func:`reporting`, if any (a context variable: no bar, no cost).

On standard error, so that a command's results on standard output (``evaluate``'s JSON)
stay as they are. A log line reads ``electra: encoding the corpus: 4,096/10,570 texts (39%,
812 texts/s, about 8 s left)``.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any, TextIO

from electra import environ

_now = time.monotonic  # (what the tests move by hand)


class Lines:
    """The log's form of a bar: a line when at least ``every`` seconds have passed since the
    last one (and at the end, if one was written)."""

    def __init__(self, total: int | None, desc: str, unit: str, every: float,
                 stream: TextIO) -> None:
        self.total, self.desc, self.unit, self.every = total, desc, unit, every
        self.stream, self.n = stream, 0
        self.start = self.last = _now()
        self.said = False

    def update(self, n: int = 1) -> None:
        self.n += n
        now = _now()
        if now - self.last >= self.every:
            self.last = now
            self._line(now)

    def _line(self, now: float) -> None:
        rate = self.n / max(now - self.start, 1e-9)
        done = f"{self.n:,}" + (f"/{self.total:,}" if self.total else "")
        parts = [f"{self.n / self.total:.0%}"] if self.total else []
        parts.append(f"{rate:,.0f} {self.unit}s/s" if rate >= 100 else
                     f"{rate:.3g} {self.unit}s/s")
        if self.total and rate > 0 and self.n < self.total:
            parts.append(f"about {_duration((self.total - self.n) / rate)} left")
        print(f"electra: {self.desc}: {done} {self.unit}s ({', '.join(parts)})",
              file=self.stream, flush=True)
        self.said = True

    def close(self) -> None:
        if self.said:  # (a short job says nothing at all)
            self._line(_now())


class Silent:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@contextlib.contextmanager
def progress(total: int | None, desc: str, unit: str = "item", enabled: bool = True,
             stream: TextIO | None = None) -> Iterator[Any]:
    """A bar (``update(n)``) for ``total`` units of work: tqdm's on a terminal, a line every
    ``ELECTRA_PROGRESS_SECONDS`` otherwise, nothing where not ``enabled``."""
    stream = stream or sys.stderr
    if not enabled:
        bar: Any = Silent()
    elif stream.isatty():
        from tqdm.auto import tqdm

        bar = tqdm(total=total, desc=desc, unit=unit, file=stream, dynamic_ncols=True,
                   leave=False)
    else:
        bar = Lines(total, desc, unit, environ.get("ELECTRA_PROGRESS_SECONDS"), stream)
    try:
        yield bar
    finally:
        bar.close()


_OPEN: ContextVar[Any] = ContextVar("electra_progress", default=None)


@contextlib.contextmanager
def reporting(total: int | None, desc: str, unit: str = "item",
              enabled: bool = True) -> Iterator[Any]:
    """:func:`progress`, moved by :func:`advance` from the work the block calls."""
    with progress(total, desc, unit, enabled) as bar:
        token = _OPEN.set(bar)
        try:
            yield bar
        finally:
            _OPEN.reset(token)


def advance(n: int) -> None:
    """Move the bar :func:`reporting` opened, if one is open."""
    bar = _OPEN.get()
    if bar is not None:
        bar.update(n)
