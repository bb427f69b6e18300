"""Confidence bands from the project's own validation residuals (split-conformal, per regime).

Residuals are log(predicted step time / measured step time) of whole training steps:
  (a) every train_step and plan_step record of validation/measurements/*.json, predicted with
      the GPU's own profile (regime ``calibrated``) and with the other Hopper profile
      (``transfer``: H100 <-> H200). Host-bound tiny-model steps fitted the host parameters, and
      the plan_step host grid and the twins of later sets (validation/host_fit.py) fitted the
      frameworks' host costs: they are kept, labelled ``in_fit``, and left out of every band;
  (b) every published run validation/published.py can model (the committed copies of
      published_runs.csv and published_runs_more.csv), with the calibration simulate() would pick:
      A100 rows are the residuals of a GPU never measured here (``datasheet``).

For each cell (GPU regime x workload) the band at coverage 1 - alpha is the split-conformal
quantile (Vovk et al. 2005; Lei et al. 2018): the ceil((n + 1)(1 - alpha))-th smallest |residual|
of the cell's n held-out residuals; it is finite only when that rank is <= n. Regenerate with
``python -m validation.bands --write`` (tests/test_confidence.py checks the file is current).
"""
from __future__ import annotations

import argparse
import glob
import statistics
import math
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from simulator.regimes import GPU_REGIMES, WORKLOADS, feature_tags, gpu_regime, workload

ROOT = Path(__file__).resolve().parent.parent
BANDS_FILE = ROOT / "simulator" / "confidence_bands.yaml"
PUBLISHED = (ROOT / "validation" / "published" / "published_runs.csv",
             ROOT / "validation" / "published" / "published_runs_more.csv")   # verbatim copies of ../shared
ALPHAS = (0.2, 0.1)          # 80% (shown on every prediction) and 90% bands
FEATURE_MIN = 3              # held-out residuals a feature needs to count as validated


@dataclass
class Residual:
    """One whole-step residual, its regime and where it came from."""
    log_error: float            # log(predicted step / measured step)
    gpu_regime: str
    workload: str
    tags: list
    num_gpus: int
    source: str                 # measurement file or published source family
    held_out: bool = True
    note: str = ""


@dataclass
class Cell:
    """The residuals of one regime and their conformal quantiles."""
    residuals: list = field(default_factory=list)

    @property
    def scores(self) -> list[float]:
        return sorted(abs(r.log_error) for r in self.residuals)


def conformal_quantile(scores: list[float], alpha: float) -> float:
    """The split-conformal quantile: the ceil((n+1)(1-alpha))-th smallest score; inf when that
    rank exceeds n (too few residuals for this coverage)."""
    s = sorted(scores)
    k = math.ceil((len(s) + 1) * (1 - alpha))
    return s[k - 1] if 0 < k <= len(s) else math.inf


def measurement_residuals(pattern: str = "validation/measurements/*.json") -> list[Residual]:
    """Train-step residuals of the committed measurements, each predicted with the GPU's own
    profile (calibrated) and with the other Hopper profile (transfer)."""
    from simulator.calibration import calibration_for, load_calibration
    from validation.accuracy import evaluate
    from validation.fit import host_bound
    from validation.host_fit import EXPERT_LOOP_FILES, HOST_FILES
    from validation.host_speed import is_twin
    from validation.hardware import hardware_for
    from validation.records import load_measurements

    out = []
    for path in sorted(glob.glob(str(ROOT / pattern))):
        mf = load_measurements(path)
        idx = [i for i, r in enumerate(mf.records)
               if r.get("kind") in ("train_step", "plan_step") and r.get("time_s") and not r.get("oom")]
        if not idx:
            continue
        hw = hardware_for(mf)
        own = calibration_for(hw.accelerator)[0]
        other = load_calibration("h200-sxm" if own.name == "h100-sxm" else "h100-sxm")
        for cal in (own, other):
            regime, _ = gpu_regime(hw.accelerator, cal.name)
            for res in evaluate(mf, hw, cal, idx)[0]:
                # the host fit takes only twins (host-* models) from its files; their real-size plans stay held out
                fitted = (host_bound(res.record) or is_twin(res.record) and Path(path).name in HOST_FILES
                          or Path(path).name in EXPERT_LOOP_FILES)
                out.append(_measured(res, regime, Path(path).name, not fitted))
    return out


def _measured(res, regime: str, source: str, held_out: bool) -> Residual:
    from validation.predict import record_plan, reference_plan
    rec = res.record
    world = int(rec.get("world", 1))
    tags = feature_tags(record_plan(rec) if rec["kind"] == "plan_step" else reference_plan(rec), world, 8)
    return Residual(math.log(res.prediction.time_s / rec["time_s"]), regime, workload(tags, world), tags, world,
                    source, held_out, "" if held_out else "in_fit: host-bound tiny step fitted the host parameters")


def published_residuals(paths=PUBLISHED) -> list[Residual]:
    """Residuals of every published run the simulator can model (rows it cannot are skipped)."""
    import csv

    from hardware_specs.catalog import load_cluster, load_node
    from hardware_specs.errors import MeshcastError
    from hardware_specs.catalog import load_hardware
    from simulator.calibration import calibration_for
    from validation.published import cluster_for, compare_row, source_family

    out = []
    for path in paths:
        if not Path(path).exists():
            continue
        for i, row in enumerate(csv.DictReader(Path(path).open())):
            try:
                c = compare_row(i, row, None)
            except MeshcastError:
                continue
            cluster = cluster_for(row["gpu"])
            acc = load_hardware(cluster, c.num_gpus).accelerator
            regime, _ = gpu_regime(acc, calibration_for(acc)[0].name)
            per_node = load_node(load_cluster(cluster).node).gpus_per_node
            tags = sorted(feature_tags(c.plan, c.num_gpus, per_node) + list(c.model_tags))
            # error = predicted/published throughput - 1 = measured/predicted step - 1
            out.append(Residual(-math.log1p(c.error), regime, workload(tags, c.num_gpus), tags, c.num_gpus,
                                f"{Path(path).name}:{source_family(c.source)}"))
    return out


def all_residuals() -> list[Residual]:
    """Every residual, held out or not (see the module docstring)."""
    return measurement_residuals() + published_residuals()


def _band(scores: list[float], sources: dict, max_gpus: int) -> dict:
    """Count, conformal quantiles and band factors of one pool of scores."""
    d = {"n": len(scores), "max_gpus": max_gpus}
    for a in ALPHAS:
        q = conformal_quantile(scores, a)
        level = f"{round(100 * (1 - a))}"
        d[f"q{level}"] = round(q, 4) if math.isfinite(q) else None
        d[f"band{level}"] = [round(math.exp(-q), 4), round(math.exp(q), 4)] if math.isfinite(q) else None
    d["sources"] = dict(sorted(sources.items()))
    return d


def _pool(rs: list[Residual]) -> dict:
    sources: dict = {}
    for r in rs:
        sources[r.source] = sources.get(r.source, 0) + 1
    return _band([abs(r.log_error) for r in rs], sources, max((r.num_gpus for r in rs), default=0))


def band_table(residuals: list[Residual]) -> dict:
    """The committed band table: per cell, per GPU regime and per workload pool, per feature."""
    held = [r for r in residuals if r.held_out]
    cells = {f"{g}/{w}": _pool([r for r in held if r.gpu_regime == g and r.workload == w])
             for g in GPU_REGIMES for w in WORKLOADS}
    gpu = {g: _pool([r for r in held if r.gpu_regime == g]) for g in GPU_REGIMES}
    work = {w: _pool([r for r in held if r.workload == w]) for w in WORKLOADS}
    tags = sorted({t for r in held for t in r.tags})
    features = {t: {"n": sum(t in r.tags for r in held), "max_gpus": max(r.num_gpus for r in held if t in r.tags),
                    "median_log_error": round(statistics.median(r.log_error for r in held if t in r.tags), 4)}
                for t in tags}
    widest = max((c["q80"] for c in cells.values() if c["q80"] is not None), default=None)
    applied = applied_bands(cells, gpu, work, widest)
    return {
        "method": "split-conformal: band = ceil((n+1)(1-alpha))-th smallest |log(predicted/measured step)| "
                  "of the regime's held-out residuals; step in [t/exp(q), t*exp(q)]",
        "alphas": list(ALPHAS),
        "feature_min_residuals": FEATURE_MIN,
        "residuals": {"held_out": len(held), "in_fit_excluded": len(residuals) - len(held)},
        "cells": cells, "gpu_regimes": gpu, "workloads": work, "features": features,
        "widest_q80": widest,
        "applied": applied,
        "regenerate": "python -m validation.bands --write",
    }


def applied_bands(cells: dict, gpu: dict, work: dict, widest: float) -> dict:
    """The 80% band each cell applies, by the fallback ladder (docs/confidence.md):
    1. the cell's own conformal quantile where it is finite; where its residuals are too few for a
       90% band (n < 9), at least its workload's pool (four residuals cannot carry a band of their own);
    2. else the wider of its GPU regime's pool and its workload's pool (each where finite);
    3. a GPU regime with no residuals at all ("no validation data"): the widest cell band;
    4. monotone in the GPU regime: never narrower than a better-measured regime's band for the
       same workload (a GPU never measured is not claimed more accurate than a measured one)."""
    out: dict = {}
    for w in WORKLOADS:
        floor = 0.0
        for g in GPU_REGIMES:
            own = cells[f"{g}/{w}"]["q80"]
            pools = [p for p in (gpu[g]["q80"], work[w]["q80"]) if p is not None]
            if own is not None and cells[f"{g}/{w}"]["q90"] is None and work[w]["q80"] is not None \
                    and work[w]["q80"] > own:
                q, basis = work[w]["q80"], f"cell (n = {cells[f'{g}/{w}']['n']}, too few for its own band): its workload's pool"
            elif own is not None:
                q, basis = own, "cell"
            elif gpu[g]["n"] == 0 or not pools:
                q, basis = widest, "no validation data: widest band of the table"
            else:
                q, basis = max(pools), "pooled: wider of the GPU-regime and workload pools"
            if q < floor:
                q, basis = floor, basis + "; raised to a better-measured regime's band"
            floor = q
            out[f"{g}/{w}"] = {"q80": round(q, 4), "band80": [round(math.exp(-q), 4), round(math.exp(q), 4)],
                               "basis": basis}
    return out


def leave_one_out_coverage(residuals: list[Residual], alpha: float = 0.2) -> dict:
    """Per cell: the share of held-out residuals inside the band computed from the others."""
    out = {}
    held = [r for r in residuals if r.held_out]
    for key in sorted({(r.gpu_regime, r.workload) for r in held}):
        scores = [abs(r.log_error) for r in held if (r.gpu_regime, r.workload) == key]
        inside = [s <= conformal_quantile(scores[:i] + scores[i + 1:], alpha) for i, s in enumerate(scores)]
        out["/".join(key)] = {"n": len(scores), "covered": sum(inside) / len(scores)}
    return out


def render(table: dict) -> str:
    """The YAML text of the band table."""
    head = ("# Confidence bands of meshcast predictions (docs/confidence.md). Generated by\n"
            "# `python -m validation.bands --write` from validation residuals; do not edit by hand.\n")
    return head + yaml.safe_dump(table, sort_keys=False)


def main(argv=None) -> int:
    """Print the band table (and leave-one-out coverage); --write updates the committed file."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"write {BANDS_FILE.relative_to(ROOT)}")
    args = ap.parse_args(argv)
    res = all_residuals()
    text = render(band_table(res))
    if args.write:
        BANDS_FILE.write_text(text)
        print(f"wrote {BANDS_FILE}")
    else:
        print(text)
    for key, v in leave_one_out_coverage(res).items():
        print(f"leave-one-out 80% coverage {key:<32} n={v['n']:>4}  {v['covered']:.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
