"""Typed errors shared by every layer of meshcast.

Every user-facing failure is a :class:`MeshcastError` carrying the offending ``field`` and a
human ``reason``; the CLI prints ``error: <field>: <reason>`` and exits with status 2.
These live in the bottom (data) layer so that catalogs, simulator, planners and validation
can all raise them without importing upward.
"""
from __future__ import annotations

import difflib
from collections.abc import Iterable


class MeshcastError(ValueError):
    """A problem with user input, named by the field it concerns."""

    def __init__(self, field: str, reason: str):
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


class SpecError(MeshcastError):
    """A catalog or user YAML file is malformed or violates its schema."""


class UnknownNameError(MeshcastError):
    """A catalog name (model, accelerator, node, cluster) does not exist."""

    def __init__(self, field: str, name: str, known: Iterable[str]):
        known = sorted(known)
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        super().__init__(field, f"unknown name {name!r}{hint} (known: {', '.join(known)})")
        self.name = name
        self.suggestions = close


class PlanError(MeshcastError):
    """A parallel plan is impossible for this model and cluster."""


class DoesNotFitError(MeshcastError):
    """A plan needs more memory than the device has (raised only where fitting is required)."""
