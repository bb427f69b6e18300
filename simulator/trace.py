"""Chrome trace-event / Perfetto JSON of one simulated step, and the step's segments that the HTML
report's timeline draws from the same numbers.

Layout (docs/traces.md): one process per pipeline stage; in each, a compute track (forward and
backward passes, the optimizer step, optionally every layer and op of micro-batch 0 nested in its
passes), one track per communication kind the stage has (TP, CP, EP, DP, PP send, PP recv), and a
memory counter. Flow arrows join each pipeline send to the pass that consumes it on the next stage.

Every time comes from the simulator's Result, no second cost model:
  passes      the replayed schedule (Result.timeline, simulator/schedule.py)
  TP/CP/EP    each pass's exposed seconds of that kind: StageCost.groups[k] / (forward_s + backward_s)
              of the pass (the simulator costs a pass's exposed seconds per kind, not their order, so
              one slice per kind is drawn at the pass's end)
  PP          one send of Result.p2p_s after each pass whose output another stage consumes
  DP          Result.dp_comm_total_s, its exposed tail (breakdown 'dp' less ZeRO-3 gathers inside
              passes) after the last backward and the rest hidden under the backward before it
  optimizer   breakdown 'optimizer' after the DP tail; host-bound time (or, without a host term, the
              closed form's small excess over the replay) fills up to the step time
  memory      stage_memory: everything but activations, plus activations/in-flight per chunk live
              from each forward's start to its backward's end
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from hardware_specs.fileio import write_text_atomic
from simulator.result import Result

TRACKS = ("compute", "tp", "cp", "ep", "pp send", "pp recv", "dp")
TRACK_NAMES = {"compute": "compute (forward / backward / optimizer)", "tp": "TP communication",
               "cp": "CP communication", "ep": "EP all-to-all", "pp send": "PP send", "pp recv": "PP recv",
               "dp": "DP gradient communication"}
IN_PASS = ("tp", "cp", "ep", "dp")      # kinds whose exposed time sits inside a pass


@dataclass
class Segment:
    """One slice of the step on one stage's track, seconds from the step's start."""
    stage: int
    track: str
    name: str
    cat: str
    start_s: float
    end_s: float
    args: dict = field(default_factory=dict)


@dataclass
class Flow:
    """A pipeline transfer: sent by ``src`` stage at ``send_s``, consumed by ``dst`` at ``recv_s``."""
    src: int
    dst: int
    send_s: float
    recv_s: float
    name: str


def _pass_name(e, vp: int) -> str:
    return f"{e.kind}{e.microbatch}" + (f".c{e.chunk}" if vp > 1 else "")


def _in_pass_comm(result: Result, e) -> list[Segment]:
    """The exposed TP/CP/EP (and ZeRO-3 DP) seconds of one pass, one slice per kind at its end."""
    st = result.stages[e.stage]
    per_mb = st.forward_s + st.backward_s
    dur = e.end_s - e.start_s
    out, t = [], e.end_s
    for k in IN_PASS:
        share = st.groups.get(k, 0.0) / per_mb if per_mb > 0 else 0.0
        if share <= 0:
            continue
        d = dur * share
        out.append(Segment(e.stage, k, f"{k.upper()} {_pass_name(e, result.plan.vp)}", k, t - d, t,
                           {"exposed_s": d, "share_of_pass": share}))
        t -= d
    return out


def _pipeline_sends(result: Result) -> tuple[list[Segment], list[Flow]]:
    """A send (sender) and receive (receiver) slice of p2p_s for every cross-stage dependency."""
    from simulator.schedule import _dependency
    p, v = result.plan.pp, result.plan.vp
    if p <= 1 or not result.timeline:
        return [], []
    ends = {(e.kind, e.stage, e.microbatch, e.chunk): e for e in result.timeline}
    segs, flows = [], []
    for e in result.timeline:
        dep = _dependency(e.kind, e.stage, e.microbatch, e.chunk, p, v)
        if dep is None or dep[1] == e.stage or dep not in ends:
            continue
        src = ends[dep]
        t0, t1 = src.end_s, src.end_s + result.p2p_s
        what = "activation" if e.kind == "F" else "gradient"
        name = f"{what} {_pass_name(src, v)} -> stage {e.stage}"
        segs.append(Segment(src.stage, "pp send", f"send {name}", "pp", t0, t1, {"bytes_time_s": result.p2p_s}))
        segs.append(Segment(e.stage, "pp recv", f"recv {what} {_pass_name(src, v)} <- stage {src.stage}", "pp",
                            t0, t1))
        flows.append(Flow(src.stage, e.stage, t0, e.start_s, name))
    return segs, flows


def _tail(result: Result, end_s: float) -> list[Segment]:
    """Per stage: DP comm (hidden part before the pipeline's end, exposed tail after), the
    optimizer step, then any host-bound wait up to the step time."""
    b = result.breakdown
    m = result.plan.microbatches()
    worst = max(result.stages, key=lambda s: s.forward_s + s.backward_s)
    exposed = max(0.0, b.get("dp", 0.0) - m * worst.groups.get("dp", 0.0))
    hidden = max(0.0, result.dp_comm_total_s - exposed)
    out = []
    for s in range(result.plan.pp):
        if hidden > 0:
            out.append(Segment(s, "dp", "DP comm (hidden under backward)", "dp", max(0.0, end_s - hidden), end_s,
                               {"seconds": hidden}))
        t = end_s
        if exposed > 0:
            out.append(Segment(s, "dp", "DP comm (exposed)", "dp", t, t + exposed, {"seconds": exposed}))
            t += exposed
        opt = b.get("optimizer", 0.0)
        if opt > 0:
            out.append(Segment(s, "compute", "optimizer step", "optimizer", t, t + opt))
            t += opt
        if result.step_time_s > t * (1 + 1e-9):
            host = b.get("host", 0.0) > 0
            out.append(Segment(s, "compute", "host-bound wait (CPU issuing kernels)" if host else
                               "idle: the step's closed form beyond the replayed schedule", "host" if host else "bubble",
                               t, result.step_time_s))
    return out


def step_segments(result: Result) -> tuple[list[Segment], list[Flow]]:
    """Every slice of one step (passes, in-pass communication, pipeline sends, DP, optimizer)
    and the pipeline flows, from the Result's own numbers (module doc)."""
    if result.timeline is None:
        raise ValueError("simulate(..., with_timeline=True) is needed for a trace or timeline")
    v = result.plan.vp
    segs = [Segment(e.stage, "compute", _pass_name(e, v), "forward" if e.kind == "F" else "backward",
                    e.start_s, e.end_s, {"microbatch": e.microbatch, "chunk": e.chunk})
            for e in result.timeline]
    for e in result.timeline:
        segs += _in_pass_comm(result, e)
    sends, flows = _pipeline_sends(result)
    end = max((e.end_s for e in result.timeline), default=0.0)
    return segs + sends + _tail(result, end), flows


def memory_counter(result: Result) -> dict[int, list[tuple[float, float]]]:
    """Per stage, (seconds, bytes) steps of device memory over the step (module doc)."""
    v = result.plan.vp
    out = {}
    for s, mem in enumerate(result.stage_memory):
        unit = mem.activations_bytes / max(mem.in_flight_microbatches, 1e-9) / v
        base = mem.total_bytes - mem.activations_bytes
        deltas = []
        for e in result.timeline or []:
            if e.stage == s:
                deltas.append((e.start_s, unit) if e.kind == "F" else (e.end_s, -unit))
        live, points = 0.0, [(0.0, base)]
        for t, d in sorted(deltas, key=lambda x: (x[0], x[1])):
            live = max(0.0, live + d)
            points.append((t, base + live))
        points.append((result.step_time_s, base))
        out[s] = points
    return out


def _op_slices(result: Result, e) -> list[dict]:
    """Layers and ops of one pass (micro-batch 0), nested in it, scaled to the pass's duration."""
    ops = result.ops or {}
    st, p, v = result.stages[e.stage], result.plan.pp, result.plan.vp
    phases = ("fwd",) if e.kind == "F" else ("recompute", "bwd")
    n_moe = st.moe_layers // v
    n_dense = st.layers // v - n_moe
    blocks = []
    if e.stage == 0 and e.chunk == 0 and e.kind == "F":
        blocks.append(("embedding", ops.get("embedding", [])))
    blocks += [(f"layer {i} (dense)", ops.get("dense_layer", [])) for i in range(n_dense)]
    blocks += [(f"layer {n_dense + i} (MoE)", ops.get("moe_layer", [])) for i in range(n_moe)]
    if e.stage == p - 1 and e.chunk == v - 1:
        blocks.append(("head + loss", ops.get("head", [])))
    if e.stage == 0 and e.chunk == 0 and e.kind == "B":
        blocks.append(("embedding", ops.get("embedding", [])))
    if e.kind == "B":
        blocks.reverse()
    chosen = [(name, [o for o in blk if o.phase in phases and o.exposed_s > 0]) for name, blk in blocks]
    total = sum(o.exposed_s for _, blk in chosen for o in blk)
    if total <= 0:
        return []
    scale = (e.end_s - e.start_s) / total
    out, t = [], e.start_s
    for name, blk in chosen:
        t0 = t
        for o in blk:
            d = o.exposed_s * scale
            out.append({"name": o.name, "cat": o.group or o.kind, "ts": t * 1e6, "dur": d * 1e6,
                        "args": {"kind": o.kind, "phase": o.phase, "shape": list(o.shape), "flops": o.flops,
                                 "bytes": o.bytes, "predicted_s": o.time_s, "exposed_s": o.exposed_s}})
            t += d
        if blk:
            out.append({"name": name, "cat": "layer", "ts": t0 * 1e6, "dur": (t - t0) * 1e6})
    return out


def _lanes(segs: list[Segment]) -> dict:
    """Thread ids: slices of one stage's track that overlap in time (a receive from each
    neighbour, a hidden DP transfer beside a ZeRO-3 gather) go to extra lanes, so each thread's
    slices nest as the trace-event format requires. Keys: id(segment) and (stage, track, lane);
    ('send', i) is the thread of the i-th pipeline send (for its flow arrow)."""
    out: dict = {}
    ends: dict[tuple, list[float]] = {}
    for g in sorted(segs, key=lambda g: (g.start_s, -g.end_s)):
        lanes = ends.setdefault((g.stage, g.track), [])
        lane = next((i for i, e in enumerate(lanes) if e <= g.start_s + 1e-12), len(lanes))
        if lane == len(lanes):
            lanes.append(g.end_s)
        lanes[lane] = g.end_s
        out[id(g)] = out[(g.stage, g.track, lane)] = TRACKS.index(g.track) * 10 + lane
    for i, g in enumerate(g for g in segs if g.track == "pp send"):
        out[("send", i)] = out[id(g)]
    return out


def chrome_trace(result: Result, ops: bool = False) -> dict:
    """The trace-event JSON (microseconds): a process per stage, a track per kind of work, flow
    arrows for pipeline sends, a memory counter; ``ops`` nests each layer and op of micro-batch 0
    in its passes (needs ``simulate(..., with_ops=True)``)."""
    segs, flows = step_segments(result)
    if ops and result.ops is None:
        raise ValueError("simulate(..., with_ops=True) is needed for the per-op level")
    tids = _lanes(segs)
    events: list[dict] = []
    for s in range(result.plan.pp):
        events.append({"name": "process_name", "ph": "M", "pid": s, "tid": 0,
                       "args": {"name": f"stage {s} ({result.model} on {result.accelerator})"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": s, "tid": 0, "args": {"sort_index": s}})
    tracks = [(k, v) for k, v in tids.items() if isinstance(k, tuple) and len(k) == 3]
    for (s, track, lane), tid in sorted(tracks, key=lambda kv: (kv[0][0], kv[1])):
        name = TRACK_NAMES[track] + (f" ({lane + 1})" if lane else "")
        events.append({"name": "thread_name", "ph": "M", "pid": s, "tid": tid, "args": {"name": name}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": s, "tid": tid, "args": {"sort_index": tid}})
    for g in segs:
        events.append({"name": g.name, "cat": g.cat, "ph": "X", "pid": g.stage, "tid": tids[id(g)],
                       "ts": g.start_s * 1e6, "dur": (g.end_s - g.start_s) * 1e6, "args": g.args})
    for i, f in enumerate(flows):
        events.append({"name": f.name, "cat": "pp", "ph": "s", "id": i, "pid": f.src,
                       "tid": tids[("send", i)], "ts": f.send_s * 1e6})
        events.append({"name": f.name, "cat": "pp", "ph": "f", "bp": "e", "id": i, "pid": f.dst,
                       "tid": TRACKS.index("compute"), "ts": f.recv_s * 1e6})
    for s, points in memory_counter(result).items():
        for t, b in points:
            events.append({"name": "device memory (GB)", "ph": "C", "pid": s, "ts": t * 1e6, "args": {"GB": b / 1e9}})
    if ops:
        for e in result.timeline:
            if e.microbatch == 0:
                events += [{**o, "ph": "X", "pid": e.stage, "tid": 0} for o in _op_slices(result, e)]
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"model": result.model, "accelerator": result.accelerator, "num_gpus": result.num_gpus,
                          "step_time_s": result.step_time_s, "calibration": result.calibration}}


def write_chrome_trace(result: Result, path: str | Path, field: str = "trace", ops: bool = False) -> None:
    """Write :func:`chrome_trace` to ``path`` (open in ui.perfetto.dev or chrome://tracing)."""
    write_text_atomic(path, json.dumps(chrome_trace(result, ops)), field)
