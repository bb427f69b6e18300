"""Chrome-trace / Perfetto JSON of one simulated step: one track per pipeline stage."""
from __future__ import annotations

import json
from pathlib import Path

from hardware_specs.fileio import write_text_atomic
from simulator.result import Result


def chrome_trace(result: Result) -> dict:
    """Trace events (``ph: X``, microseconds) for each forward/backward pass of each stage,
    followed by the exposed data-parallel communication and the optimizer step."""
    if result.timeline is None:
        raise ValueError("simulate(..., with_timeline=True) is needed for a trace")
    events = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": f"{result.model} step"}}]
    for s in range(result.plan.pp):
        events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": s, "args": {"name": f"stage {s}"}})
    for e in result.timeline:
        events.append({"name": f"{e.kind}{e.microbatch}" + (f".c{e.chunk}" if result.plan.vp > 1 else ""),
                       "cat": "forward" if e.kind == "F" else "backward", "ph": "X", "pid": 0, "tid": e.stage,
                       "ts": e.start_s * 1e6, "dur": (e.end_s - e.start_s) * 1e6,
                       "args": {"microbatch": e.microbatch, "chunk": e.chunk}})
    end = max((e.end_s for e in result.timeline), default=0.0)
    tail = [("data-parallel comm (exposed)", result.breakdown.get("dp", 0.0)),
            ("optimizer step", result.breakdown.get("optimizer", 0.0))]
    for s in range(result.plan.pp):
        t = end
        for name, dur in tail:
            if dur > 0:
                events.append({"name": name, "cat": "step", "ph": "X", "pid": 0, "tid": s,
                               "ts": t * 1e6, "dur": dur * 1e6})
                t += dur
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_chrome_trace(result: Result, path: str | Path, field: str = "trace") -> None:
    """Write :func:`chrome_trace` to ``path`` (open in chrome://tracing or ui.perfetto.dev)."""
    write_text_atomic(path, json.dumps(chrome_trace(result)), field)
