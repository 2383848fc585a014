"""Memoising results computed from objects that are unhashable or costly to hash (a Trace)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class IdentityMemo(Generic[V]):
    """Values keyed by the identity of the objects they were computed from plus hashable options.

    An entry is used only while those very objects are passed again (an id can be reused once
    its object has died), and the memo starts afresh when it holds `size` entries. Searches
    (recommend, validate) ask for the same per-trace work for every card and GPU count.
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._entries: dict[tuple[Hashable, ...], tuple[tuple[object, ...], V]] = {}

    def get(self, owners: tuple[object, ...], options: tuple[Hashable, ...], make: Callable[[], V]) -> V:
        key = (*(id(o) for o in owners), *options)
        hit = self._entries.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], owners, strict=True)):
            return hit[1]
        value = make()
        if len(self._entries) >= self._size:
            self._entries.clear()
        self._entries[key] = (owners, value)
        return value
