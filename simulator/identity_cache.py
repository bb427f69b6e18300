"""A memo keyed by object identity, for the cost model's hot path.

Model specs, accelerators and calibrations are unhashable or costly to hash (pydantic models,
dicts inside), so caches key them by ``id()``. An entry keeps its objects alive and is checked
with ``is`` on lookup, so a recycled id can never return another object's value.
"""
from __future__ import annotations

from typing import Callable


class IdentityCache:
    """Values keyed by (the identities of some objects, plain hashable values)."""

    def __init__(self, limit: int | None = None):
        self._store: dict = {}
        self._limit = limit

    def get(self, objects: tuple, extra: tuple, build: Callable[[], object]):
        """The cached value for ``objects`` and ``extra``, built by ``build()`` on a miss."""
        key = tuple(map(id, objects)) + extra
        hit = self._store.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], objects)):
            return hit[1]
        if self._limit is not None and len(self._store) >= self._limit:
            self._store.clear()
        value = build()
        self._store[key] = (objects, value)
        return value

    def clear(self) -> None:
        self._store.clear()

    def __len__(self) -> int:
        return len(self._store)
