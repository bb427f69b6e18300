"""The GEMM residual correction's development data and its evidence (issue #12; candidate knn53 of
session 30, and since its adoption study the opt-in correction of simulator/gemm_residual.py).

Why. cuBLAS picks its kernel (tile, cluster, split-K) by shape, deterministically: the 156 shapes of
H100 seed 53, run again on a later machine (repeat/h100_gemm_random53_rerun.json), reproduce the first
run to 1.8% MAPE with the same kernels, while the committed model misses both by 9.1-9.2%. The model's
error on random shapes is its own, and it is local in shape space (neighbouring shapes get the same
kernel families), which a nearest-neighbour average of measured log-residuals can learn.

The correction (the maths lives in simulator/gemm_residual.py, one implementation for the cost model and
this module). For a GEMM (m, n, k, dtype) the model's time t is multiplied by exp(r),
r = Σ w_i r_i / (Σ w_i + w_0) over the K = 8 nearest development records of the same dtype and alignment
class in (log2 m, log2 n, log2 k), w_i = 1 / (d_i + 0.5), r_i = ln(t_measured / t_model).

* knn53, as registered beside seeds 54 and 55 (:data:`KNN53`): no prior, w_0 = 0. Leave-one-draw-out over
  the development draws: H100 (14 draws, seeds 27-53) 8.75% -> 6.41%, H200 (15 draws, seeds 25-52)
  7.79% -> 5.50% pooled MAPE. Registered: H200 seed 54 7.44% -> 4.56%, H100 seed 55 9.22% -> 5.83%.
* the study's first form (:data:`STUDY_PRIOR`, session 31): w_0 = 8 / (0.5 + 0.5) = 8, the model's own
  prediction counted as K = 8 development records at distance 0.5 with residual 0, shrinking r towards 0
  the farther the neighbours. :func:`choose` (the mean change of MAPE over leave-one-draw-out on each GPU
  and the never-fitted real-workload GEMM sets: in-step linear layers, per-expert loops, grouped draw 34;
  the registered seeds 54 and 55 not read) put its minimum at 8: leave-one-draw-out H100 8.75% -> 7.28%,
  H200 7.79% -> 6.38%, but the H200 per-expert loops still 12.69% -> 14.45%.
* the switch's form (:data:`SWITCH`, simulator.gemm_residual's constants): knn53 with round shapes (n and k
  multiples of 64: every real-workload GEMM) left alone, found from those sets: leave-one-draw-out H100
  6.42%, H200 5.52%, the real-workload sets unchanged. Registered beside the committed model on seeds 56
  (H200) / 57 (H100) before they ran; no shipped profile turns it on.

* near (:data:`NEAR`, session 32): the switch's form with no correction where the nearest development record
  is more than one binade away (Euclidean, log2 units): the correction interpolates measured residuals and
  does not extrapolate them to shapes beyond the draws' range (the output heads and large-m GEMMs of real
  steps). Leave-one-draw-out H100 6.74%, H200 5.75% (the draws are dense, so the gate costs a little there).
  Registered beside the committed model and the switch's form on GEMM seeds 58 / 59 and on the real training
  GEMMs' set (validation/real_gemms.py, seed 60) before they ran: random draws H200 7.25 -> 5.15%, H100 8.88 ->
  7.46%; real training GEMMs 5.83 -> 6.19%, 7.12 -> 7.42% (the switch's form 6.01%, 7.46%): worse where it
  would act in training, so neither form is switched on (tests/test_gemm_real_set.py).

Development records: every committed random draw of the GPU through session 30 (DEV_SEEDS), each
reduced to its faster pass median (validation.gemm_regimes.reproduced_times), residuals taken against
the profile with the correction off. The profiles' tables (hardware_specs/profiles/<gpu>-sxm_gemm_residuals.json)
are written by ``table``.

    python -m validation.gemm_residual_knn table GPU [--out FILE]  write GPU's residual table
    python -m validation.gemm_residual_knn cv GPU [--knn53]        leave-one-draw-out over DEV_SEEDS
    python -m validation.gemm_residual_knn choose                  the prior weight's selection grid
    python -m validation.gemm_residual_knn register LOG OUT       knn53's predictions of a registered draw
                                                                  (LOG: validation.prereg --gemm-seed)
"""
from __future__ import annotations

import argparse
import math
import re
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from simulator.calibration import PROFILE_DIR, load_calibration
from simulator.gemm_residual import (PRIOR_DISTANCE, PRIOR_WEIGHT, ROUND_MULTIPLE, ResidualTable, build_table,
                                     log_residual, table_to_json)
from validation.gemm_regimes import _dims

REPEAT = Path(__file__).resolve().parent / "measurements" / "repeat"
DEV_SEEDS = {
    "h100": (27, 29, 31, 33, 35, 37, 39, 41, 43, 45, 47, 49, 51, 53),
    "h200": (25, 26, 28, 30, 32, 34, 36, 38, 40, 42, 44, 46, 48, 50, 52),
}
KNN53 = {"prior_weight": 0.0, "round_multiple": 0}   # the candidate as registered beside seeds 54 and 55
SWITCH = {"prior_weight": PRIOR_WEIGHT, "prior_distance": PRIOR_DISTANCE, "round_multiple": ROUND_MULTIPLE}
NEAR = dict(SWITCH, max_distance=1.0)   # the switch's form, no correction beyond one binade of the records (session 32)
STUDY_PRIOR = {"prior_weight": 8.0, "prior_distance": PRIOR_DISTANCE, "round_multiple": 0}   # the study's first form
FORMS = {"knn53": KNN53, "switch": SWITCH, "near": NEAR}
PRIOR_GRID = (0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0, 24.0, 32.0)


def profile_name(gpu: str) -> str:
    """The calibration profile of ``gpu`` (h100 -> h100-sxm)."""
    return f"{gpu}-sxm"


@lru_cache(maxsize=None)
def draw_rows(gpu: str, seed: int) -> tuple:
    """(m, n, k, dtype, ln(measured / model)) of every record of one development draw of ``gpu``, in file
    order, against its profile with the correction off."""
    from validation.gemm_regimes import random_set_pairs
    cal = load_calibration(profile_name(gpu)).without_gemm_residuals()
    return tuple((int(rec["m"]), int(rec["n"]), int(rec["k"]), rec["dtype"], math.log(rec["time_s"] / pred))
                 for rec, pred in random_set_pairs(REPEAT / f"{gpu}_gemm_random{seed}.json", cal))


def residual_rows(gpu: str, leave_out: int | None = None) -> tuple:
    """:func:`draw_rows` of every development draw of ``gpu`` in seed order (``leave_out``: one seed left out)."""
    return tuple(row for seed in DEV_SEEDS[gpu] if seed != leave_out for row in draw_rows(gpu, seed))


@lru_cache(maxsize=None)
def development_table(gpu: str, leave_out: int | None = None) -> ResidualTable:
    """The residual table of ``gpu``'s development draws (``leave_out``: one seed left out, for
    cross-validation)."""
    return build_table(profile_name(gpu), residual_rows(gpu, leave_out))


def correction(table: ResidualTable, m: int, n: int, k: int, dtype: str, **variant) -> float:
    """The factor exp(r) for one GEMM (simulator.gemm_residual.log_residual; ``variant``: its keyword
    arguments, default the simulator's constants; 1.0 where its class has no record)."""
    return math.exp(log_residual(table, m, n, k, dtype, **variant))


def write_table(gpu: str, out: Path) -> int:
    """Write ``gpu``'s residual table file (simulator.gemm_residual.table_to_json) to ``out``; returns
    the records written."""
    rows = residual_rows(gpu)
    meta = {"description": "GEMM residual table: ln(measured / modelled seconds) of every development random "
                           "GEMM draw of this GPU against its profile with the correction off "
                           "(simulator/gemm_residual.py, docs/cost_model.md 'GEMM residual correction')",
            "generated_by": f"python -m validation.gemm_residual_knn table {gpu}",
            "profile": profile_name(gpu),
            "draws": [f"validation/measurements/repeat/{gpu}_gemm_random{s}.json" for s in DEV_SEEDS[gpu]]}
    out.write_text(table_to_json(list(rows), profile_name(gpu), meta))
    return len(rows)


def _registered_rows(log: Path):
    """(line, dtype, m, n, k, predicted us) of a validation.prereg --gemm-seed log; comments as None."""
    for line in log.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            yield line, None
            continue
        m, n, k = _dims(line)
        yield line, (line.split()[0], m, n, k, float(line.split()[-2]))


def register(log: Path, out: Path, gpu: str, header: list[str], variant: dict | None = None) -> int:
    """Write a candidate's predictions of the draw registered in ``log``: each row as there, its time
    multiplied by the correction (``variant`` default :data:`KNN53`, as registered beside seeds 54 / 55;
    :data:`SWITCH` for the switch's form, registered beside seeds 56 / 57); returns the rows written."""
    table = development_table(gpu)
    variant = KNN53 if variant is None else variant
    lines, count = list(header), 0
    for line, row in _registered_rows(log):
        if row is None:
            if line.startswith("# Columns"):
                lines.append(line)
            continue
        dtype, m, n, k, us = row
        value = us * correction(table, m, n, k, dtype, **variant)
        lines.append(re.sub(r"(\s+[\d.]+) us\s*$", lambda mo: f"{value:{len(mo.group(1))}.2f} us", line.rstrip()))
        count += 1
    out.write_text("\n".join(lines) + "\n")
    return count


def cross_validate(gpu: str, **variant) -> dict[int, tuple[float, float]]:
    """{seed: (uncorrected MAPE, corrected MAPE)} with each development draw left out of the table in turn
    (``variant``: keyword arguments of simulator.gemm_residual.log_residual; default the simulator's)."""
    out = {}
    for seed in DEV_SEEDS[gpu]:
        table = development_table(gpu, leave_out=seed)
        rows = draw_rows(gpu, seed)
        e0 = [abs(math.exp(-r) - 1) for *_, r in rows]
        e1 = [abs(correction(table, m, n, k, dt, **variant) * math.exp(-r) - 1) for m, n, k, dt, r in rows]
        out[seed] = (sum(e0) / len(e0), sum(e1) / len(e1))
    return out


def pooled(res: dict) -> tuple[float, float]:
    """(uncorrected, corrected) mean over draws of :func:`cross_validate`'s per-draw MAPEs."""
    return tuple(float(np.mean([v[i] for v in res.values()])) for i in (0, 1))


# ---- the never-fitted real-workload GEMM sets the prior was chosen on ---------------------------------------
GROUPED_FILES = {"h100_grouped_gemm.json": "h100", "h100_grouped_gemm2.json": "h100", "h200_grouped_gemm.json": "h200",
                 "repeat/h200_grouped_gemm34.json": "h200"}


@lru_cache(maxsize=None)
def instep_calls() -> tuple:
    """(m, n, k, dtype, calls, in-step seconds, model seconds with the correction off) of every linear-layer GEMM
    of the H200 in-step trace (validation/gemm_instep.py), each predicted on its step's device model."""
    from simulator.compute import TORCH_DTYPES, gemm_time
    from simulator.engine import _step
    from validation.gemm_instep import DEFAULT_FILE, gemm_dims
    from validation.kernel_reconcile import profiled_steps
    from validation.predict import plan_model, record_plan
    hw, cal, recs = profiled_steps(DEFAULT_FILE, "gemm_calls")
    out = []
    for rec in recs:
        hw_rec, cal_off = replace(hw, num_gpus=rec["world"]), cal.without_gemm_residuals()
        dev = _step(plan_model(rec), hw_rec, record_plan(rec), cal_off).ctx.dev
        for c in rec["gemm_calls"]:
            m, n, k, batch = gemm_dims(c["shapes"])
            if c.get("in_step_s") and c["op"] not in ("bmm", "baddbmm"):
                dt = TORCH_DTYPES[c["dtype"]]
                out.append((m, n, k, dt, c["count"], c["in_step_s"], gemm_time(dev, m, n, k, dt)))
    return tuple(out)


@lru_cache(maxsize=None)
def grouped_records(name: str, impl: str | None) -> tuple:
    """(measured seconds, model seconds of the parts that take no correction, ((m, n, k, dtype, model seconds), ...)
    of the parts that may) per ``grouped_gemm`` record of ``name`` (``impl``: only those), correction off:
    a per-expert ``loop`` is one unbatched GEMM per group; ``grouped_mm`` and ``bmm`` take none."""
    from simulator.compute import gemm_time
    from validation.hardware import hardware_for
    from validation.predict import device_model, predict_record, record_dtype
    from validation.records import load_measurements
    mf = load_measurements(Path(__file__).resolve().parent / "measurements" / name)
    hw = hardware_for(mf)
    cal = load_calibration(profile_name(GROUPED_FILES[name])).without_gemm_residuals()
    dev = device_model(hw.accelerator, cal)
    out = []
    for r in mf.records:
        if r.get("kind") != "grouped_gemm" or (impl and r.get("impl") != impl):
            continue
        n, k, dt = int(r["n"]), int(r["k"]), record_dtype(r)
        if r.get("impl") == "loop":
            parts = tuple((m, n, k, dt, gemm_time(dev, m, n, k, dt)) for m in map(int, r["group_tokens"]) if m > 0)
            out.append((r["time_s"], 0.0, parts))
        else:
            out.append((r["time_s"], predict_record(r, hw, cal).time_s, ()))
    return tuple(out)


def instep_figures(**variant) -> tuple[float, float]:
    """(MAPE, summed-seconds error) of the in-step linear GEMMs with the correction ``variant``."""
    table = development_table("h200")
    pred = [t * correction(table, m, n, k, dt, **variant) for m, n, k, dt, _, _, t in instep_calls()]
    meas = [(c, s) for *_, c, s, _ in instep_calls()]
    mape = float(np.mean([abs(p / s - 1) for p, (_, s) in zip(pred, meas)]))
    return mape, sum(p * c for p, (c, _) in zip(pred, meas)) / sum(c * s for c, s in meas) - 1.0


def grouped_mape(name: str, impl: str | None = "loop", **variant) -> float:
    """MAPE of the grouped-GEMM records of ``name`` (``impl``: only those; None: all) with the correction
    ``variant``."""
    table = development_table(GROUPED_FILES[name])
    errs = []
    for meas, fixed, parts in grouped_records(name, impl):
        pred = fixed + sum(t * correction(table, m, n, k, dt, **variant) for m, n, k, dt, t in parts)
        errs.append(abs(pred / meas - 1))
    return float(np.mean(errs))


def selection_figures(**variant) -> dict[str, float]:
    """The seven figures the prior was chosen on, MAPE: leave-one-draw-out on each GPU's development draws, the
    in-step linear GEMMs (H200), the per-expert loops of the three grouped files, the grouped draw 34 (every impl)."""
    figs = {f"lodo {gpu}": pooled(cross_validate(gpu, **variant))[1] for gpu in DEV_SEEDS}
    figs["in-step linear"] = instep_figures(**variant)[0]
    for name in list(GROUPED_FILES)[:3]:
        figs[f"loop {name}"] = grouped_mape(name, "loop", **variant)
    figs["grouped draw 34"] = grouped_mape("repeat/h200_grouped_gemm34.json", None, **variant)
    return figs


def choose(grid=PRIOR_GRID, round_multiple: int = 0) -> dict[float, tuple[float, dict]]:
    """{prior weight (zero-residual pseudo-records at PRIOR_DISTANCE): (J, figures)}: J the mean change, in MAPE,
    of :func:`selection_figures` against the model with the correction off (one vote per set), with round shapes
    corrected (``round_multiple`` 0: the study's first grid, minimum at 8) or left alone (64: minimum at 0)."""
    off = selection_figures(prior_weight=1e12, round_multiple=0)
    out = {}
    for w in grid:
        figs = selection_figures(prior_weight=w, prior_distance=PRIOR_DISTANCE, round_multiple=round_multiple)
        out[w] = (float(np.mean([figs[k] - off[k] for k in figs])), figs)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("table")
    t.add_argument("gpu", choices=sorted(DEV_SEEDS))
    t.add_argument("--out", type=Path, help="default hardware_specs/profiles/<gpu>-sxm_gemm_residuals.json")
    c = sub.add_parser("cv")
    c.add_argument("gpu", choices=sorted(DEV_SEEDS))
    c.add_argument("--knn53", action="store_true", help="the candidate as registered (no prior)")
    sub.add_parser("choose")
    r = sub.add_parser("register")
    r.add_argument("log", type=Path)
    r.add_argument("out", type=Path)
    r.add_argument("--gpu", choices=sorted(DEV_SEEDS), required=True)
    r.add_argument("--header", action="append", default=[], help="a comment line for the file (repeatable)")
    r.add_argument("--form", choices=tuple(FORMS), default="knn53",
                   help="knn53 (as registered beside seeds 54 / 55), the switch's form (round shapes left alone), "
                        "or near (the switch's form only within one binade of a record)")
    args = p.parse_args(argv)
    if args.cmd == "table":
        out = args.out or PROFILE_DIR / f"{profile_name(args.gpu)}_gemm_residuals.json"
        print(f"wrote {write_table(args.gpu, out)} records to {out}")
    elif args.cmd == "register":
        n = register(args.log, args.out, args.gpu, [h if h.startswith("#") else "# " + h for h in args.header],
                     FORMS[args.form])
        print(f"wrote {n} rows to {args.out}")
    elif args.cmd == "cv":
        res = cross_validate(args.gpu, **(KNN53 if args.knn53 else SWITCH))
        for seed, (a, b) in res.items():
            print(f"seed {seed}: uncorrected {100 * a:.2f}%  corrected {100 * b:.2f}%")
        a, b = pooled(res)
        print(f"pooled: uncorrected {100 * a:.2f}%  corrected {100 * b:.2f}%")
    else:
        for w0, (j, figs) in choose().items():
            print(f"prior {w0:5.1f}  J {100 * j:+.3f}  " + "  ".join(f"{k} {100 * v:.2f}" for k, v in figs.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
