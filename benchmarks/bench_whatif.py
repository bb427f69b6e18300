"""Benchmark of ``meshcast whatif``: a sweep of 100 re-planned points of Llama-3 70B.

    python benchmarks/bench_whatif.py [--grid typical|stress] [--jobs 2] [--points 100] [--fixed]

The ``typical`` grid is GPUs (256 .. 4,096) x scale-out bandwidth (0.5x .. 8x) x sequence
length (4k .. 32k); ``stress`` starves the network (0.25x .. 4x) at short sequences (2k .. 16k),
where exposed data-parallel communication dominates. gbs 1,024 throughout. Each point runs the
planner's full search (planners.search, top 1) and re-simulates its best plan. Prints wall
time, points per second, the per-point time distribution and the slowest points. The target:
100 re-planned points in under a minute on two cores.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planners.whatif import Base, parse_sweeps, run_sweep  # noqa: E402
from simulator.plan import ParallelPlan  # noqa: E402

GRIDS = {
    # what people ask: scale, network and context length around today's hardware
    "typical": ["gpus=256,512,1024,2048,4096", "ib_bandwidth=0.5x,1x,2x,4x,8x", "seq=4096,8192,16384,32768"],
    # starved networks at scale with short sequences: exposed data-parallel communication
    # dominates, where the planner's time bounds are weakest
    "stress": ["gpus=256,512,1024,2048,4096", "ib_bandwidth=0.25x,0.5x,1x,2x,4x", "seq=2048,4096,8192,16384"],
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--points", type=int, default=100, help="use only the first N points of the grid")
    ap.add_argument("--fixed", action="store_true", help="fixed plan (tp 8, pp 4) instead of re-planning")
    ap.add_argument("--progress", action="store_true", help="progress bar on stderr")
    ap.add_argument("--grid", choices=sorted(GRIDS), default="typical", help="which 100-point grid")
    ap.add_argument("--slowest", type=int, default=5, help="list the N slowest points")
    args = ap.parse_args()
    axes = parse_sweeps(GRIDS[args.grid])
    n_grid = 1
    for a in axes:
        n_grid *= len(a.levels)
    if args.points < n_grid:       # trim the first axis' levels to get at most --points points
        keep = max(1, args.points // (n_grid // len(axes[0].levels)))
        axes[0] = type(axes[0])(axes[0].variable, axes[0].levels[:keep])
    plan = ParallelPlan(tp=8, pp=4, mbs=1, gbs=1024) if args.fixed else ParallelPlan(gbs=1024)
    base = Base(model="llama3-70b", cluster="dgx-h100", gpus=None, plan=plan, replan=not args.fixed)
    t0 = time.perf_counter()
    sweep = run_sweep(base, axes, jobs=args.jobs, progress=args.progress)
    wall = time.perf_counter() - t0
    n = len(sweep.points)
    per = [p.seconds for p in sweep.points]
    status: dict[str, int] = {}
    for p in sweep.points:
        status[p.status] = status.get(p.status, 0) + 1
    print(f"whatif benchmark ({args.grid} grid): llama3-70b on dgx-h100, gbs 1024, "
          f"{'fixed plan' if args.fixed else 're-planned'} sweep of "
          f"{n} points ({' x '.join(f'{a.name} {len(a.levels)}' for a in axes)}), {args.jobs} worker process(es), "
          f"{os.cpu_count()} CPUs visible")
    print(f"  wall time            {wall:8.2f} s   ({n / wall:.2f} points/s)")
    print(f"  per point (worker)   median {statistics.median(per):.3f} s, mean {statistics.mean(per):.3f} s, "
          f"max {max(per):.3f} s, sum {sum(per):.1f} s")
    if not args.fixed:
        sims = [p.search["simulated"] for p in sweep.points if p.search]
        if sims:
            print(f"  plans simulated      median {statistics.median(sims):.0f} per point, total {sum(sims):,}")
    print(f"  outcomes             {', '.join(f'{k}: {v}' for k, v in status.items())}")
    for p in sorted(sweep.points, key=lambda p: -p.seconds)[:args.slowest]:
        sims = f", {p.search['simulated']:,} plans simulated" if p.search else ""
        print(f"  slow point           {p.seconds:6.2f} s  {p.label}{sims}")
    if not args.fixed and n >= 100 and args.jobs <= 2:
        print(f"  target: 100 re-planned points < 60 s on two cores -> {'MET' if wall < 60 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
