"""The op graph of one device: what runs, its counted FLOPs and bytes, and its cost."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Op:
    """One kernel or collective of a training step, on one device, for one micro-batch.

    ``phase``: fwd, bwd or recompute. ``group``: for collectives, the parallel dimension
    (tp, cp, ep, dp, pp); ``overlap``: seconds of this op hidden under concurrent compute."""

    name: str
    kind: str            # gemm, attention, elementwise, memory, collective
    phase: str
    time_s: float
    flops: float = 0.0
    bytes: float = 0.0
    shape: tuple = ()
    group: str = ""
    overlap_s: float = 0.0

    @property
    def exposed_s(self) -> float:
        """Time this op adds to the critical path."""
        return self.time_s - self.overlap_s

