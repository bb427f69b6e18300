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

Cells are (band regime x workload): the GPU regimes of simulator/regimes.py, the ``datasheet`` one
split by accelerator family (Mondrian conformal prediction, Vovk et al. 2003: a band per category
known before the prediction, so that Blackwell's coverage does not borrow from Ampere's). Each
cell's band at coverage 1 - alpha is signed split-conformal (Vovk et al. 2005; Lei et al. 2018, with
alpha/2 in each tail): with m = log(measured / predicted step) = -residual, its lower end is minus the
ceil((n + 1)(1 - alpha/2))-th smallest of -m and its upper end the same rank of m, over the cell's n
held-out residuals; finite only when that rank is <= n (n >= 9 at 80%, n >= 19 at 90%). A cell whose
predictions lean one way gets a band that leans with them, not a wider symmetric one. Regenerate with
``python -m validation.bands --write`` (tests/test_confidence.py checks the file is current).
"""
from __future__ import annotations

import argparse
import glob
import statistics
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from simulator.regimes import WORKLOADS, band_regime, feature_tags, gpu_regime, workload

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
    family: str = ""            # the accelerator's family (catalog), for the datasheet rows' Mondrian split

    @property
    def band_regime(self) -> str:
        return band_regime(self.gpu_regime, self.family)


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
                out.append(_measured(res, regime, Path(path).name, not fitted, hw.accelerator.family))
    return out


def _measured(res, regime: str, source: str, held_out: bool, family: str) -> Residual:
    from validation.predict import record_plan, reference_plan
    rec = res.record
    world = int(rec.get("world", 1))
    tags = feature_tags(record_plan(rec) if rec["kind"] == "plan_step" else reference_plan(rec), world, 8)
    return Residual(math.log(res.prediction.time_s / rec["time_s"]), regime, workload(tags, world), tags, world,
                    source, held_out, "" if held_out else "in_fit: host-bound tiny step fitted the host parameters",
                    family)


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
                                f"{Path(path).name}:{source_family(c.source)}", family=acc.family))
    return out


def all_residuals() -> list[Residual]:
    """Every residual, held out or not (see the module docstring)."""
    return measurement_residuals() + published_residuals()


def signed_band(measured_over_predicted: list[float], alpha: float) -> tuple[float, float] | None:
    """The signed split-conformal band (lo, hi) of m = log(measured / predicted step) at coverage
    1 - alpha, alpha/2 in each tail: lo = -(rank-th smallest of -m), hi = rank-th smallest of m with
    rank = ceil((n + 1)(1 - alpha/2)); None when that rank exceeds n."""
    hi = conformal_quantile(measured_over_predicted, alpha / 2)
    lo = -conformal_quantile([-m for m in measured_over_predicted], alpha / 2)
    return (lo, hi) if math.isfinite(hi) and math.isfinite(lo) else None


def _band(rs: list[Residual]) -> dict:
    """Count, signed conformal bands and their half-widths of one pool of residuals: per level L,
    ``lo``/``hi`` (log measured/predicted step), ``band`` (the step factors e^lo, e^hi) and ``q``
    (half the band's log-width, the spread the planner's ties use)."""
    ms = [-r.log_error for r in rs]
    d = {"n": len(rs), "max_gpus": max((r.num_gpus for r in rs), default=0)}
    for a in ALPHAS:
        level, b = f"{round(100 * (1 - a))}", signed_band(ms, a)
        d[f"q{level}"] = round((b[1] - b[0]) / 2, 4) if b else None
        d[f"lo{level}"], d[f"hi{level}"] = (round(b[0], 4), round(b[1], 4)) if b else (None, None)
        d[f"band{level}"] = [round(math.exp(b[0]), 4), round(math.exp(b[1]), 4)] if b else None
    d["sources"] = dict(sorted(Counter(r.source for r in rs).items()))
    return d


def band_regimes(residuals: list[Residual]) -> list[str]:
    """The table's rows, best-measured first: calibrated, transfer, one ``datasheet:<family>`` per
    family with held-out residuals, ``datasheet`` (a family with none), uncalibrated."""
    families = sorted({r.band_regime for r in residuals if r.gpu_regime == "datasheet"})
    return ["calibrated", "transfer", *families, "datasheet", "uncalibrated"]


def band_table(residuals: list[Residual]) -> dict:
    """The committed band table: per cell, per band-regime and per workload pool, per feature."""
    held = [r for r in residuals if r.held_out]
    rows = band_regimes(held)
    cells = {f"{g}/{w}": _band([r for r in held if r.band_regime == g and r.workload == w])
             for g in rows if g != "datasheet" for w in WORKLOADS}
    pools = {g: _band([r for r in held if r.band_regime == g]) for g in rows if g != "datasheet"}
    pools["datasheet"] = _band([r for r in held if r.gpu_regime == "datasheet"])
    work = {w: _band([r for r in held if r.workload == w]) for w in WORKLOADS}
    datasheet = {w: _band([r for r in held if r.gpu_regime == "datasheet" and r.workload == w]) for w in WORKLOADS}
    tags = sorted({t for r in held for t in r.tags})
    features = {t: {"n": sum(t in r.tags for r in held), "max_gpus": max(r.num_gpus for r in held if t in r.tags),
                    "median_log_error": round(statistics.median(r.log_error for r in held if t in r.tags), 4)}
                for t in tags}
    return {
        "method": "signed split-conformal per cell (band regime x workload; datasheet GPUs split by family): "
                  "m = log(measured / predicted step); band [lo, hi] = alpha/2 conformal quantiles of -m and m "
                  "over the cell's held-out residuals; step in [t*e^lo, t*e^hi]",
        "alphas": list(ALPHAS),
        "feature_min_residuals": FEATURE_MIN,
        "residuals": {"held_out": len(held), "in_fit_excluded": len(residuals) - len(held)},
        "band_regimes": rows,
        "cells": cells, "band_regime_pools": pools, "workloads": work, "datasheet_pooled": datasheet,
        "features": features,
        "applied": applied_bands(rows, cells, pools, work, datasheet),
        "regenerate": "python -m validation.bands --write",
    }


def applied_bands(rows: list[str], cells: dict, pools: dict, work: dict, datasheet: dict) -> dict:
    """The 80% band each (band regime, workload) applies, by the ladder of docs/confidence.md:
    1. the cell's own band where finite (n >= 9);
    2. else the wider (by half-width) of its band regime's pool and its workload's pool;
    3. ``datasheet`` (a family with no residuals): the union of every datasheet family's applied
       band and the pooled datasheet band for the workload (an unmeasured family is not claimed
       closer than any measured one, in either direction);
    4. ``uncalibrated`` (no measured GPU of its vendor): the union of every applied band of the table;
    5. monotone: a band narrower than a better-measured regime's for the same workload (calibrated,
       then transfer, then each datasheet family) is widened equally at both ends to that width."""
    out: dict = {}
    for w in WORKLOADS:
        floor = 0.0
        for g in rows[:-2]:
            band = _ladder(cells[f"{g}/{w}"], pools[g], work[w])
            out[f"{g}/{w}"] = band = _raised(band, floor)
            if g in ("calibrated", "transfer"):
                floor = max(floor, band["q80"])
        fams = [out[f"{g}/{w}"] for g in rows[2:-2]]
        pooled = _ladder(datasheet[w], pools["datasheet"], work[w])
        out[f"datasheet/{w}"] = _raised(_union(fams + [pooled], "a family never measured nor published: the union of "
                                                 "the datasheet families' bands and the pooled datasheet band"), floor)
    everything = _union(list(out.values()), "no validation data: the union of every band of the table")
    for w in WORKLOADS:
        out[f"uncalibrated/{w}"] = dict(everything)
    return out


def _ladder(cell: dict, regime_pool: dict, work_pool: dict) -> dict:
    """Rules 1-2 of :func:`applied_bands`: the cell's own band, else the wider finite pool."""
    if cell["lo80"] is not None:
        return _applied(cell["lo80"], cell["hi80"], "cell")
    pools = [p for p in (regime_pool, work_pool) if p["lo80"] is not None]
    if not pools:
        return _applied(-math.inf, math.inf, "no residuals")
    p = max(pools, key=lambda x: x["q80"])
    return _applied(p["lo80"], p["hi80"], f"pooled (cell n = {cell['n']}, too few for a band of its own): the wider "
                                          "of its band regime's and its workload's pools")


def _union(bands: list[dict], basis: str) -> dict:
    """The smallest band holding every finite band of ``bands`` (rules 3-4 of :func:`applied_bands`)."""
    finite = [b for b in bands if math.isfinite(b["lo80"])]
    return _applied(min(b["lo80"] for b in finite), max(b["hi80"] for b in finite), basis)


def _raised(band: dict, floor: float) -> dict:
    """Rule 5: widen ``band`` equally at both ends to half-width ``floor`` where it is narrower."""
    if not math.isfinite(band["lo80"]) or band["q80"] >= floor:
        return band
    d = floor - band["q80"]
    return _applied(band["lo80"] - d, band["hi80"] + d, band["basis"] + "; widened to a better-measured regime's width")


def _applied(lo: float, hi: float, basis: str) -> dict:
    if not math.isfinite(lo):
        return {"q80": math.inf, "lo80": -math.inf, "hi80": math.inf, "band80": None, "basis": basis}
    return {"q80": round((hi - lo) / 2, 4), "lo80": round(lo, 4), "hi80": round(hi, 4),
            "band80": [round(math.exp(lo), 4), round(math.exp(hi), 4)], "basis": basis}


def leave_one_out_coverage(residuals: list[Residual], alpha: float = 0.2) -> dict:
    """Per cell with a band of its own: the share of held-out residuals inside the signed band
    computed from the others."""
    out = {}
    held = [r for r in residuals if r.held_out]
    for key in sorted({(r.band_regime, r.workload) for r in held}):
        ms = [-r.log_error for r in held if (r.band_regime, r.workload) == key]
        bands = [signed_band(ms[:i] + ms[i + 1:], alpha) for i in range(len(ms))]
        if any(b is None for b in bands):
            continue
        inside = [b[0] <= m <= b[1] for m, b in zip(ms, bands)]
        out["/".join(key)] = {"n": len(ms), "covered": sum(inside) / len(ms)}
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
