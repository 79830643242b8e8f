"""A module-level registry (targets, platforms) found from the settings of the root that asks for it.

The roots (cli/main.py, runtime/worker.py, engine/parts.py) read Settings once and pass them with ``use`` (the
profiled program, profiling/runner.py, passes the worker's from its spec);
the registry is found on its first read after that, and found again when a root passes other settings. Read
before any root asked (a library user importing a registry alone), it is found from the defaults."""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from typing import TypeVar

from kforge_mcp.core.settings import Settings

T = TypeVar("T")


class Registry(MutableMapping[str, T]):
    def __init__(self, discover: Callable[[Settings], dict[str, T]]):
        self._discover = discover
        self._settings: Settings | None = None
        self._found: dict[str, T] | None = None

    def use(self, settings: Settings) -> None:
        """A root's settings: what the registry is found from when next read."""
        if settings != self._settings:
            self._settings, self._found = settings, None

    def _items(self) -> dict[str, T]:
        if self._found is None:
            self._found = self._discover(self._settings or Settings.read({}))
        return self._found

    def __getitem__(self, name: str) -> T:
        return self._items()[name]

    def __setitem__(self, name: str, value: T) -> None:
        self._items()[name] = value

    def __delitem__(self, name: str) -> None:
        del self._items()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items())

    def __len__(self) -> int:
        return len(self._items())
