"""The planner against published plans: for every complete row of published_runs.csv, search
the best plan for the same model, GPUs, batch and sequence, in the same framework and keeping the
planner's default headroom (5% of HBM), and compare its predicted step time with the published
plan's predicted step time (same cost model, same switches: precision, attention kernel, dropout).
Prints the table, the differences between the two plans, and whether the claimed gain lies inside
the planner's own 80% band (simulator/confidence.py): a gain inside the band is a tie the model
cannot resolve, not a claim.

Run: python benchmarks/plan_vs_published.py [PATH_TO_CSV]
"""
from __future__ import annotations

import csv
import sys
from dataclasses import replace
from pathlib import Path

from hardware_specs.catalog import load_hardware
from hardware_specs.errors import MeshcastError
from planners import make_constraints, search
from simulator.calibration import calibration_for
from simulator.engine import simulate
from validation.published import cluster_for, model_from_row, plan_from_row

HEADROOM_FRACTION = 0.05      # the planner's default (meshcast plan --min-headroom-gb)

DEFAULT_CSV = Path(__file__).resolve().parents[2] / "shared" / "validation" / "published_runs.csv"
if not DEFAULT_CSV.exists():
    DEFAULT_CSV = Path(__file__).resolve().parents[1] / "validation" / "published" / "published_runs.csv"
COMPARED = ("tp", "pp", "vp", "cp", "ep", "dp", "mbs", "zero_stage", "recompute", "recompute_layers",
            "layers_per_stage", "schedule")


def plan_differences(ours, theirs) -> list[str]:
    """'field: published -> planner' for each plan field that differs."""
    out = []
    for f in COMPARED:
        a, b = getattr(theirs, f), getattr(ours, f)
        if f == "schedule":
            a, b = theirs.pipeline_schedule, ours.pipeline_schedule
        if a != b:
            out.append(f"{f}: {a} -> {b}")
    return out


def compare_row(row: dict) -> dict:
    """Published plan vs the planner's best, both simulated; raises MeshcastError if not modelled."""
    model = model_from_row(row)
    published = plan_from_row(row, model)
    cluster = cluster_for(row["gpu"])
    hw = load_hardware(cluster, published.num_gpus)
    cal, _ = calibration_for(hw.accelerator)
    theirs = simulate(model, hw, published, cal)
    base = replace(published, tp=1, pp=1, dp=None, vp=1, cp=1, ep=1, etp=None, layers_per_stage=None,
                   recompute="none", recompute_layers=None, schedule=None, num_gpus=None)
    constraints = make_constraints(model, cluster, gpus=published.num_gpus, gbs=published.gbs,
                                   seq=model.seq_len, base=base,
                                   min_headroom_gb=HEADROOM_FRACTION * hw.accelerator.hbm_capacity_bytes / 1e9)
    best = search(model, cluster, constraints, calibration=cal, top=1).candidates[0].result
    return {"model": row["model"], "gpus": published.num_gpus, "framework": published.framework,
            "published_step_s": theirs.step_time_s,
            "published_fits": theirs.fits, "planner_step_s": best.step_time_s,
            "speedup": theirs.step_time_s / best.step_time_s, "band_factor": best.confidence.factor,
            "extrapolated": list(best.confidence.extrapolated),
            "differences": plan_differences(best.plan, theirs.plan)}


def main(path: Path) -> int:
    rows = list(csv.DictReader(path.open()))
    worse, gains = 0, []
    for i, row in enumerate(rows):
        try:
            c = compare_row(row)
        except MeshcastError as exc:
            print(f"#{i:<3} {row['model'][:28]:<28} not compared: {exc.field}: {exc.reason}")
            continue
        ok = c["planner_step_s"] <= c["published_step_s"] * (1 + 1e-9)
        worse += c["published_fits"] and not ok
        inside = c["speedup"] <= c["band_factor"]
        if c["published_fits"]:
            gains.append((c["speedup"], inside))
        print(f"#{i:<3} {c['model'][:24]:<24} {c['gpus']:>5} GPUs {c['framework']:<19} published {c['published_step_s']:8.3f} s"
              f"{'' if c['published_fits'] else ' (predicted not to fit: not comparable)'}  planner {c['planner_step_s']:8.3f} s  "
              f"x{c['speedup']:.2f} {'inside' if inside else 'OUTSIDE'} its band x{c['band_factor']:.2f}  "
              f"{'; '.join(c['differences'])}")
    print(f"\nplanner slower than a published plan that fits: {worse} rows")
    if gains:
        g = sorted(x for x, _ in gains)
        print(f"claimed gain over {len(g)} published plans that fit: median x{g[len(g) // 2]:.2f}, max x{g[-1]:.2f}; "
              f"inside the planner's 80% band: {sum(i for _, i in gains)} of {len(g)}")
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_CSV))
