"""Benchmark: one full simulation, and plan evaluations per second for a planner-like sweep.

Run: python benchmarks/bench_simulate.py   (prints medians; one core, in-process)
"""
from __future__ import annotations

import itertools
import statistics
import time

from hardware_specs import load_hardware
from models import load_model
from simulator import ParallelPlan, evaluate_plans, simulate
from simulator.plan import PlanError


def bench_single(repeats: int = 300) -> float:
    """Median seconds of simulate() for Llama-3 405B on 16,384 H100s (tp8 pp16 vp2 dp128)."""
    model, hw = load_model("llama3-405b"), load_hardware("dgx-h100", 16384)
    plan = ParallelPlan(tp=8, pp=16, vp=2, mbs=1, gbs=2048, seq=8192, recompute="full",
                        layers_per_stage=(7,) + (8,) * 14 + (7,))
    simulate(model, hw, plan)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        simulate(model, hw, plan)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def sweep_plans() -> list[ParallelPlan]:
    """The planner-style grid of Llama-3 70B plans (a third are invalid and get rejected)."""
    grid = itertools.product([1, 2, 4, 8], [1, 2, 4, 8, 16], [1, 2, 4, 5], [1, 2], [1, 2], [0, 1, 2],
                             ["none", "selective", "full"])
    return [ParallelPlan(tp=tp, pp=pp, vp=vp, cp=cp, mbs=mbs, gbs=1024, seq=8192, zero_stage=zero, recompute=rec)
            for tp, pp, vp, cp, mbs, zero, rec in grid]


def bench_batch(clock=time.perf_counter) -> tuple[int, float]:
    """The same grid through the batch API evaluate_plans(); returns (valid plans, seconds)."""
    model, hw = load_model("llama3-70b"), load_hardware("dgx-h100", 1024)
    plans = sweep_plans()
    t0 = clock()
    res = evaluate_plans(model, hw, plans)
    return sum(1 for r in res if not r.error), clock() - t0


def bench_sweep(clock=time.perf_counter) -> tuple[int, float]:
    """Evaluate a grid of plans of Llama-3 70B on 1,024 H100s; returns (plans, seconds)."""
    model, hw = load_model("llama3-70b"), load_hardware("dgx-h100", 1024)
    grid = itertools.product([1, 2, 4, 8], [1, 2, 4, 8, 16], [1, 2, 4, 5], [1, 2], [1, 2], [0, 1, 2],
                             ["none", "selective", "full"])
    n, t0 = 0, clock()
    for tp, pp, vp, cp, mbs, zero, rec in grid:
        try:
            simulate(model, hw, ParallelPlan(tp=tp, pp=pp, vp=vp, cp=cp, mbs=mbs, gbs=1024, seq=8192,
                                             zero_stage=zero, recompute=rec))
            n += 1
        except PlanError:
            pass
    return n, clock() - t0


if __name__ == "__main__":
    single = bench_single()
    print(f"simulate llama3-405b on 16384 x h100 (one plan): median {single * 1e3:.3f} ms")
    n, secs = bench_sweep()
    print(f"planner-style sweep, llama3-70b on 1024 x h100, cold (layer kinds lowered on first use): "
          f"{n} valid plans in {secs:.2f} s = {n / secs:,.0f} plan evaluations/s")
    runs = sorted(bench_sweep() for _ in range(5))
    n, secs = runs[2]
    print(f"the same sweep again, warm (a planner's steady state), median of 5: {n} plans in {secs:.2f} s "
          f"= {n / secs:,.0f} plan evaluations/s wall")
    runs = sorted(bench_sweep(time.process_time) for _ in range(5))
    n, secs = runs[2]
    print(f"  the same in process CPU time (excludes time the VM gives to others): {n / secs:,.0f} per CPU-second")
    bench_batch()
    runs = sorted(bench_batch() for _ in range(5))
    n, secs = runs[2]
    print(f"batch API evaluate_plans() on the same grid, warm, median of 5: {n} plans in {secs:.2f} s "
          f"= {n / secs:,.0f} plan evaluations/s")
