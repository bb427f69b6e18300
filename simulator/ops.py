"""The op graph of one device: what runs, its counted FLOPs and bytes, and its cost."""
from __future__ import annotations

from dataclasses import dataclass

# Categories used in the time breakdown.
COMPUTE = "compute"
COMM_KINDS = ("tp", "cp", "ep", "dp", "pp")


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


def total_time(ops: list[Op]) -> float:
    """Critical-path seconds of a sequential op list (overlapped comm excluded)."""
    return sum(op.time_s - op.overlap_s for op in ops)


def breakdown(ops: list[Op]) -> dict[str, float]:
    """Exposed seconds per category: compute, or the comm group (tp, cp, ep, dp, pp)."""
    out: dict[str, float] = {}
    for op in ops:
        key = op.group if op.kind == "collective" else COMPUTE
        out[key] = out.get(key, 0.0) + op.time_s - op.overlap_s
    return out
