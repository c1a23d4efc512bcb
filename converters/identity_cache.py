"""A bounded cache whose entries belong to live objects (the layers of a model being converted), never to their
``id()`` alone: CPython reuses a freed object's address, so a key of ids can outlive its objects and be found for
others allocated where they were.

An entry is stored under ``(key, ids of its objects)`` (``key``: anything hashable, e.g. the file as it is now)
with a weak reference to each object. It is found only while every one of them is alive and the very object asked
about (``ref() is obj``); it is dropped when any of them is freed (the weak reference's callback) and, beyond
``size`` entries, the least recently used one goes. A cache entry therefore never hands one model's result to
another, and keeps its objects alive only where its value references them (Core ML's kept program does: its loop
bodies close over their layers), then as one of at most ``size`` entries.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Generic, Hashable, Sequence, TypeVar

V = TypeVar("V")


class IdentityCache(Generic[V]):
    """Values keyed by a hashable ``key`` plus a sequence of live objects compared by identity (module
    docstring); at most ``size`` entries."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[tuple, tuple[tuple[weakref.ref, ...], V]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable, objects: Sequence[object] = ()) -> V | None:
        """The value stored for ``key`` and these very ``objects`` (None: none)."""
        slot = (key, tuple(map(id, objects)))
        entry = self._entries.get(slot)
        if entry is None or not _same(entry[0], objects):
            return None
        self._entries.move_to_end(slot)
        return entry[1]

    def pop(self, key: Hashable, objects: Sequence[object] = ()) -> V | None:
        """``get``, the entry removed."""
        found = self.get(key, objects)
        if found is not None:
            del self._entries[(key, tuple(map(id, objects)))]
        return found

    def put(self, key: Hashable, objects: Sequence[object], value: V) -> None:
        """Store ``value`` for ``key`` and ``objects`` (replacing what was stored under their ids), dropping the least
        recently used entries beyond ``size``."""
        slot = (key, tuple(map(id, objects)))
        refs = tuple(weakref.ref(obj, self._forget(slot)) for obj in objects)
        self._entries[slot] = (refs, value)
        self._entries.move_to_end(slot)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()

    def _forget(self, slot: tuple):
        """The callback dropping the entry at ``slot`` when one of its objects is freed (only the entry that
        reference belongs to: another stored there since is left alone)."""
        entries = weakref.ref(self._entries)

        def forget(dead: weakref.ref) -> None:
            held = entries()
            entry = None if held is None else held.get(slot)
            if held is not None and entry is not None and any(ref is dead for ref in entry[0]):
                del held[slot]

        return forget


def _same(refs: tuple[weakref.ref, ...], objects: Sequence[object]) -> bool:
    """Whether ``refs`` still point at exactly ``objects``, in order."""
    return len(refs) == len(objects) and all(ref() is obj for ref, obj in zip(refs, objects))


__all__ = ["IdentityCache"]
