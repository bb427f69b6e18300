"""Traces checked against the Chrome trace-event format (the spec: docs.google.com/document/d/
1CvAClvFfyA5R-PhYUmn5OOQtYMH4h5I0nSIVsr5MMk0): event fields and types per phase, slices on one
thread nesting properly, each flow's start and end binding to a slice, counters numeric; and the
trace's contents against the simulator's own numbers (docs/traces.md)."""
from __future__ import annotations

import json
from collections import defaultdict

import pytest

from hardware_specs import load_hardware
from models import load_model
from simulator import simulate
from simulator.calibration import calibration_for
from simulator.plan import ParallelPlan
from simulator.trace import TRACKS, chrome_trace, step_segments

EPS_US = 1e-3
CASES = {
    "dense-interleaved": ("llama3-70b", 1024, ParallelPlan(tp=8, pp=4, vp=5, mbs=1, gbs=1024, seq=8192)),
    "moe-ep": ("mixtral-8x7b", 64, ParallelPlan(tp=1, pp=2, ep=8, mbs=1, gbs=64, seq=4096)),
    "zero3-no-pp": ("llama3-8b", 16, ParallelPlan(tp=1, pp=1, zero_stage=3, mbs=1, gbs=32, seq=4096)),
}


def _simulate(name):
    model, gpus, plan = CASES[name]
    hw = load_hardware("dgx-h100", gpus)
    cal, _ = calibration_for(hw.accelerator, None)
    return simulate(load_model(model), hw, plan, cal, with_timeline=True, with_ops=True)


@pytest.fixture(scope="module", params=list(CASES))
def traced(request):
    r = _simulate(request.param)
    return r, chrome_trace(r, ops=True)


def check_trace_event_format(trace: dict) -> None:
    """Assert ``trace`` follows the trace-event format for the phases meshcast writes."""
    assert json.loads(json.dumps(trace)) == trace               # plain JSON
    assert isinstance(trace["traceEvents"], list) and trace["displayTimeUnit"] in ("ms", "ns")
    slices = defaultdict(list)
    flows = defaultdict(dict)
    named_threads = set()
    for e in trace["traceEvents"]:
        ph = e["ph"]
        assert ph in {"X", "M", "s", "f", "C"}, e
        assert isinstance(e["name"], str) and isinstance(e["pid"], int), e
        if ph == "M":
            assert e["name"] in {"process_name", "thread_name", "process_sort_index", "thread_sort_index"}, e
            assert isinstance(e["args"], dict) and e["args"], e
            if e["name"] == "thread_name":
                named_threads.add((e["pid"], e["tid"]))
            continue
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= -EPS_US, e
        if ph == "X":
            assert isinstance(e["tid"], int) and isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
            assert isinstance(e.get("cat", ""), str) and isinstance(e.get("args", {}), dict), e
            slices[(e["pid"], e["tid"])].append(e)
        elif ph in ("s", "f"):
            assert isinstance(e["id"], int) and isinstance(e["tid"], int), e
            assert e["id"] not in flows[ph], f"flow id {e['id']} used twice for {ph}"
            if ph == "f":
                assert e.get("bp") == "e", e           # binds to the enclosing slice at ts
            flows[ph][e["id"]] = e
        elif ph == "C":
            assert e["args"] and all(isinstance(v, (int, float)) for v in e["args"].values()), e
    for key, evs in slices.items():          # complete events on one thread nest, never cross
        assert key in named_threads, f"thread {key} has slices but no thread_name"
        stack = []
        for e in sorted(evs, key=lambda x: (x["ts"], -x["dur"])):
            while stack and stack[-1] <= e["ts"] + EPS_US:
                stack.pop()
            end = e["ts"] + e["dur"]
            assert not stack or end <= stack[-1] + EPS_US, f"{key}: {e['name']} crosses its enclosing slice"
            stack.append(end)
    assert flows["s"].keys() == flows["f"].keys(), "every flow start needs its end"
    for i, s in flows["s"].items():
        f = flows["f"][i]
        assert f["ts"] >= s["ts"] - EPS_US
        for ev, what in ((s, "start"), (f, "end")):
            assert any(x["ts"] - EPS_US <= ev["ts"] <= x["ts"] + x["dur"] + EPS_US
                       for x in slices[(ev["pid"], ev["tid"])]), f"flow {i} {what} binds to no slice"


def test_trace_follows_the_trace_event_format(traced):
    check_trace_event_format(traced[1])


def test_trace_holds_the_simulators_numbers(traced):
    r, trace = traced
    ev = trace["traceEvents"]
    x = [e for e in ev if e["ph"] == "X"]
    assert max(e["ts"] + e["dur"] for e in x) == pytest.approx(r.step_time_s * 1e6, rel=1e-9)
    cats = {e["cat"] for e in x}
    for k in ("tp", "cp", "ep"):
        assert (k in cats) == any(s.groups.get(k, 0) > 0 for s in r.stages), k
    passes = [e for e in x if e["cat"] in ("forward", "backward")]
    assert len(passes) == len(r.timeline)
    # exposed in-pass communication over the worst stage = its breakdown term
    worst = max(range(len(r.stages)), key=lambda i: r.stages[i].forward_s + r.stages[i].backward_s)
    for k in ("tp", "ep"):
        if r.breakdown.get(k, 0) > 0:
            got = sum(e["dur"] for e in x if e["cat"] == k and e["pid"] == worst and e["name"].startswith(k.upper()))
            assert got / 1e6 == pytest.approx(r.breakdown[k], rel=1e-6)
    sends = [e for e in x if e["tid"] // 10 == TRACKS.index("pp send")]
    flows = [e for e in ev if e["ph"] == "s"]
    if r.plan.pp > 1:
        assert len(sends) == len(flows) > 0 and all(e["dur"] == pytest.approx(r.p2p_s * 1e6) for e in sends)
        assert {(f["pid"]) for f in flows} == set(range(r.plan.pp))
    else:
        assert not sends and not flows
    dp = sum(e["dur"] for e in x if e["cat"] == "dp" and e["name"].startswith("DP comm")) / 1e6
    assert dp == pytest.approx(r.plan.pp * r.dp_comm_total_s, rel=1e-6)    # hidden + exposed, on each stage
    mem = [e for e in ev if e["ph"] == "C"]
    assert {e["pid"] for e in mem} == set(range(r.plan.pp))
    for s, m in enumerate(r.stage_memory):
        vals = [e["args"]["GB"] for e in mem if e["pid"] == s]
        assert min(vals) * 1e9 == pytest.approx(m.total_bytes - m.activations_bytes)
        assert max(vals) * 1e9 > m.total_bytes - m.activations_bytes


def test_op_level_fills_each_pass_of_micro_batch_0(traced):
    r, trace = traced
    x = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    layers = [e for e in x if e["cat"] == "layer"]
    assert layers
    for p in (e for e in x if e["cat"] in ("forward", "backward") and e["args"]["microbatch"] == 0):
        inside = [e for e in layers if e["pid"] == p["pid"] and p["ts"] - EPS_US <= e["ts"] < p["ts"] + p["dur"]]
        assert sum(e["dur"] for e in inside) == pytest.approx(p["dur"], rel=1e-6)
    assert not any(e["cat"] == "layer" for e in chrome_trace(r)["traceEvents"] if e["ph"] == "X")


def test_segments_need_a_timeline():
    model, gpus, plan = CASES["zero3-no-pp"]
    hw = load_hardware("dgx-h100", gpus)
    r = simulate(load_model(model), hw, plan)
    with pytest.raises(ValueError, match="with_timeline"):
        step_segments(r)
