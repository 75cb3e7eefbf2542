"""A strict, live table of named parts (the fine-tuning heads, the pretraining objectives).

Strict: a name is added once; a second part under a taken name is refused (a plug-in or a
test's toy cannot silently replace a built-in). Live: readers look names up when they use
them (export tables, CLI help, config checks), so a part added later is seen everywhere.
Light (no torch): the CLI and the config read it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Mapping[str, T], Generic[T]):
    """``name -> part``, read as a mapping, added to with :meth:`add` only."""

    def __init__(self, what: str) -> None:
        self.what = what  # "head", "objective": for messages
        self._parts: dict[str, T] = {}

    def add(self, name: str, part: T) -> T:
        """Add ``part`` under ``name``; returns it. A taken name is refused (ValueError)."""
        if name in self._parts:
            raise ValueError(f"a {self.what} named {name!r} is already registered "
                             f"({self._parts[name]!r}); give the new one another name")
        self._parts[name] = part
        return part

    def remove(self, name: str) -> None:
        """Take ``name`` out (a test's toy, after the test)."""
        del self._parts[name]

    def __getitem__(self, name: str) -> T:
        return self._parts[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._parts)

    def __len__(self) -> int:
        return len(self._parts)

    def __repr__(self) -> str:
        return f"Registry({self.what}: {', '.join(self._parts)})"
