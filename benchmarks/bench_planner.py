"""Benchmark of ``meshcast plan``: the full plan space of large runs, on one core.

Target (issue #3): Llama-3 405B on 16,384 H100s (dgx-h100), seq 8192, gbs 2048, every
dimension searched: best plan in <= 10 s on one core. Prints, per case: wall time, layouts
bounded, layouts expanded, plans simulated, layouts ruled out by memory bounds, and the
best plan; and simulate()'s own cost per call for scale.

    python benchmarks/bench_planner.py [--quick]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hardware_specs import load_hardware  # noqa: E402
from models import load_model  # noqa: E402
from planners.report import switches  # noqa: E402
from planners.search import search  # noqa: E402
from planners.space import make_constraints  # noqa: E402
from simulator import simulate  # noqa: E402
from simulator.calibration import calibration_for  # noqa: E402

CASES = [  # (label, model, cluster, gpus, gbs, seq, top)
    ("Llama-3 405B, 16384 H100, gbs 2048, top 1", "llama3-405b", "dgx-h100", "16384", "2048", 8192, 1),
    ("Llama-3 405B, 16384 H100, gbs 2048, top 5", "llama3-405b", "dgx-h100", "16384", "2048", 8192, 5),
    ("Llama-3 70B, 1024 H100, gbs 1024, top 5", "llama3-70b", "dgx-h100", "1024", "1024", 8192, 5),
    ("Llama-3 70B, 512-2048 H100 (range), gbs 1024, top 3", "llama3-70b", "dgx-h100", "512:2048", "1024", 8192, 3),
    ("Mixtral 8x22B, 1024 H100, gbs 1024, top 3", "mixtral-8x22b", "dgx-h100", "1024", "1024", 4096, 3),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="only the 405B top-1 case")
    args = ap.parse_args()
    try:
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})   # one core
        core = "pinned to one core"
    except (AttributeError, OSError):
        core = "single process"
    print(f"meshcast plan benchmark ({core}, Python {sys.version.split()[0]})")
    cases = CASES[:1] if args.quick else CASES
    for label, model_name, cluster, gpus, gbs, seq, top in cases:
        model = load_model(model_name)
        hw = load_hardware(cluster, int(gpus.split(":")[-1]))
        cal, _ = calibration_for(hw.accelerator)
        c = make_constraints(model, cluster, gpus=gpus, gbs=gbs, seq=seq)
        t0 = time.perf_counter()
        res = search(model, cluster, c, calibration=cal, top=top)
        wall = time.perf_counter() - t0
        s = res.stats
        b = res.best
        print(f"\n{label}")
        print(f"  wall {wall:6.2f} s | layouts {s.shapes:,} bounded, {s.shapes_expanded:,} expanded, "
              f"{s.shapes_memory_pruned:,} ruled out by memory bounds | {s.simulated:,} simulate() calls, "
              f"{s.splits_bounded:,} splits bounded | optimal: {not res.notes}")
        print(f"  best: {b.shape.describe()} {switches(b)} on {b.result.num_gpus} GPUs: step "
              f"{b.result.step_time_s:.3f} s, {b.result.tokens_per_s:,.0f} tokens/s, MFU {b.result.mfu:.1%}, "
              f"headroom {b.headroom_bytes / 1e9:.1f} GB, bottleneck {b.result.bottleneck}")
        n = 50
        t0 = time.perf_counter()
        for _ in range(n):
            simulate(model, load_hardware(cluster, b.result.num_gpus), b.plan, cal)
        print(f"  simulate() of the best plan: {(time.perf_counter() - t0) / n * 1e3:.2f} ms per call (warm)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
