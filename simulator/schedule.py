"""Pipeline schedules: step time of GPipe, 1F1B and interleaved 1F1B, and a timeline.

With p stages, m micro-batches, v model chunks per device and per-stage forward+backward
time c_i for one micro-batch, the step's pipeline time is

    T = (m - 1) · max_i c_i + (1/v) · Σ_i c_i + (1 - 1/v) · max_i c_i

which for equal stages is (m + (p-1)/v) · c: the bubble fraction (p-1)/(v·m) of Narayanan et
al. 2021 (§2.2). GPipe and 1F1B have the same time (1F1B only holds fewer micro-batches).

Point-to-point sends (``p2p_exposed``). A micro-batch's forward crosses v·p - 1 chunk boundaries
(v(p-1) between neighbouring stages and, interleaved, v-1 from the last stage back to the first)
and its backward as many again; the first micro-batch's forward and the last one's backward are
on the critical path, so the fill and drain add 2(v·p - 1) transfers (the replay below gives
the same). In the steady state every stage sends and receives 2v messages per micro-batch (an
activation and a gradient per chunk): without overlap they are on the critical path, 2v(m-1)
transfers; overlapped (a separate stream, Megatron's overlap_p2p_comm) each still costs
``overlap_cost`` (the calibration's comm_overlap_slowdown) of its time, because its NCCL kernel
occupies SMs and HBM while the compute it hides under runs. Each transfer is one send/recv of
the boundary activation (α + h + B/β, simulator.comm), so a virtual chunk is no longer free.

``timeline`` replays the schedule op by op (each stage runs its forward and backward passes in
the schedule's order, each waiting for its input from the neighbouring stage) and returns the
events for reports and Chrome traces. Tests check it agrees with the closed form.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Event:
    """One pass of one micro-batch (chunk) on one stage, seconds from the step's start."""

    stage: int
    kind: str        # F or B
    microbatch: int
    chunk: int
    start_s: float
    end_s: float


def pipeline_time(fwd: list[float], bwd: list[float], m: int, v: int, p2p_s, overlap_p2p: bool,
                  overlap_cost: float = 0.0) -> float:
    """Seconds from the first forward to the last backward of one step (formula above).
    ``p2p_s``: one transfer's seconds, or a sequence of p (per boundary s -> s+1, the last entry
    the wrap-around p-1 -> 0 that interleaving uses) when stages sit on different links."""
    costs = [f + b for f, b in zip(fwd, bwd)]
    worst = max(costs)
    t = (m - 1) * worst + sum(costs) / v + (1 - 1 / v) * worst
    return t + p2p_exposed(len(costs), m, v, p2p_s, overlap_p2p, overlap_cost)


def p2p_exposed(p: int, m: int, v: int, p2p_s, overlap_p2p: bool, overlap_cost: float = 0.0) -> float:
    """Seconds of pipeline sends on the critical path (module doc): 2(v·p - 1) transfers of
    fill and drain, plus 2v(m - 1) steady-state transfers, in full without overlap or at
    ``overlap_cost`` of their time with it."""
    if p <= 1:
        return 0.0
    links = list(p2p_s) if isinstance(p2p_s, (list, tuple)) else [p2p_s] * p
    inner, wrap = links[:p - 1], links[p - 1]
    fill = 2 * (v * sum(inner) + (v - 1) * wrap)
    slowest = max(inner + ([wrap] if v > 1 else []))
    steady = 2 * v * (m - 1) * slowest
    return fill + (overlap_cost * steady if overlap_p2p else steady)


def stage_order(schedule: str, p: int, v: int, m: int, stage: int) -> list[tuple[str, int, int]]:
    """The (kind, micro-batch, chunk) passes stage ``stage`` runs, in order (Megatron-LM order)."""
    if schedule == "gpipe":
        return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in reversed(range(m))]
    if schedule == "1f1b" or v == 1:
        warm = min(p - stage - 1, m)
        order = [("F", i, 0) for i in range(warm)]
        for i in range(m - warm):
            order += [("F", warm + i, 0), ("B", i, 0)]
        return order + [("B", i, 0) for i in range(m - warm, m)]
    total = m * v
    warm = min((p - stage - 1) * 2 + (v - 1) * p, total)

    def unit(k: int, forward: bool) -> tuple[int, int]:
        group, pos = divmod(k, p * v)
        chunk = pos // p
        if not forward:
            chunk = v - 1 - chunk
        return group * p + pos % p, chunk

    order = [("F", *unit(k, True)) for k in range(warm)]
    for k in range(total - warm):
        order += [("F", *unit(warm + k, True)), ("B", *unit(k, False))]
    return order + [("B", *unit(k, False)) for k in range(total - warm, total)]


def timeline(fwd: list[float], bwd: list[float], m: int, v: int, schedule: str, p2p_s: float) -> list[Event]:
    """Replay the schedule: each pass starts when its stage is free and its input has arrived."""
    p = len(fwd)
    orders = [stage_order(schedule, p, v, m, s) for s in range(p)]
    done: dict[tuple, float] = {}
    free = [0.0] * p
    pos = [0] * p
    events: list[Event] = []
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for s in range(p):
            while pos[s] < len(orders[s]):
                kind, mb, chunk = orders[s][pos[s]]
                dep = _dependency(kind, s, mb, chunk, p, v)
                if dep is not None and dep not in done:
                    break
                ready = done.get(dep, 0.0) + (p2p_s if dep is not None and dep[1] != s else 0.0)
                start = max(free[s], ready)
                end = start + (fwd[s] if kind == "F" else bwd[s]) / v
                done[(kind, s, mb, chunk)] = end
                events.append(Event(s, kind, mb, chunk, start, end))
                free[s] = end
                pos[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise RuntimeError("pipeline schedule deadlocked")
    return events


def _dependency(kind: str, s: int, mb: int, chunk: int, p: int, v: int):
    """The pass whose output this pass consumes (None for the very first forward)."""
    if kind == "F":
        if s > 0:
            return ("F", s - 1, mb, chunk)
        return ("F", p - 1, mb, chunk - 1) if chunk > 0 else None
    if s < p - 1:
        return ("B", s + 1, mb, chunk)
    if chunk < v - 1:
        return ("B", 0, mb, chunk + 1)
    return ("F", s, mb, chunk)
