"""Which kernels cuBLAS runs for the random GEMM draws, joined to their clean timings (issue #12).

``sustained.py --kernel-names`` re-ran every development draw under torch.profiler and recorded
each shape's device kernels (``kernels``: name, grid, block, shared memory, registers, launches per
call, device seconds) in ``validation/measurements/repeat/h{100,200}_gemm_trace_dev.json``. In those
files ``time_s`` / ``time_graph_s`` are NOT measurements (the profiler lengthened them); the
per-kernel ``device_s`` are. The clean timings of the same shapes are the original draw files
(:data:`CLEAN`); shapes are joined by (m, n, k, dtype, seed).

Kernel names parsed (:func:`parse_kernel`):

* ``nvjet_sm90_tst_<BM>x<BN>_<BK>x<stages>_<cx>x<cy>_<h|v>_bz[_coopA|_coopB][_splitK]_<layout>``
  (bf16, Hopper TMA/WGMMA) and ``nvjet_sm90_qqtst_..._algo2...`` (fp8 scaled mm). cuBLAS is
  column-major: for torch.mm's row-major C[m,n] = A[m,k] B[k,n] it computes C^T = B^T A^T, so the
  kernel's M is torch's n and its N is torch's m: BM tiles n, BN tiles m.
* ``cutlass_75_tensorop_[bf16_]s1688gemm_bf16_<BM>x<BN>_nn_align1`` (SM75 mma.m16n8k8, one
  element per load: an odd leading dimension), ``cutlass_80_tensorop_[bf16_]s16816gemm_bf16_<BM>x<BN>_<BK>x<stages>_nn_align2``
  and ``cutlass_80_wmma_tensorop_..._32x32_<BK>x<stages>_nn_align2`` (two elements per load: an even
  leading dimension not a multiple of 8). The ``bf16_`` infix: the kernel writes bf16 partials
  (its split-K reduce reads bf16), without it fp32 partials.
* ``cublasLt::splitKreduce_kernel``: the separate reduce launch of a split-K GEMM.

The split count is read from the grid: the CUTLASS kernels put it in grid.z; nvjet flattens it,
so it is CTAs / (output tiles rounded up to the cluster shape) (:func:`trace_splits`).

``python -m validation.gemm_kernels [--gpu h200|h100] [--profile P]`` prints the kernel families,
the tile/split choices against the model's (:func:`simulator.compute.gemm_plan`), and the model's
error split into (a) its choice of tile/split vs (b) its cost of the kernel cuBLAS runs: the model's
own time formula evaluated at the traced (oracle) tile and split (:func:`oracle_time`)."""
from __future__ import annotations

import argparse
import json
import math
import re
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MEAS = ROOT / "validation" / "measurements"
TRACE = {"h200": MEAS / "repeat" / "h200_gemm_trace_dev.json", "h100": MEAS / "repeat" / "h100_gemm_trace_dev.json"}
# clean timings of the traced draws: file -> seeds taken from it
CLEAN = {
    "h200": {MEAS / "h200_gemm_random.json": (24,), MEAS / "repeat" / "h200_gemm_random25.json": (25,),
             MEAS / "repeat" / "h200_gemm_random26.json": (26,), MEAS / "repeat" / "h200_gemm_random28.json": (28,),
             MEAS / "repeat" / "h200_gemm_random30.json": (30,)},
    "h100": {MEAS / "h100_gemm_random2.json": (21, 22), MEAS / "h100_gemm_random3.json": (23,),
             MEAS / "repeat" / "h100_gemm_random27.json": (27,), MEAS / "repeat" / "h100_gemm_random29.json": (29,),
             MEAS / "repeat" / "h100_gemm_random31.json": (31,)},
}
PROFILE = {"h200": "h200-sxm", "h100": "h100-sxm"}

_NVJET = re.compile(r"nvjet_sm90_(q?q?tst)_(\d+)x(\d+)_(\d+)x(\d+)_(\d+)x(\d+)_([hv])_bz((?:_\w+?)*)_([NT]{3})$")
_CUTLASS = re.compile(r"cutlass_(75|80)_(wmma_)?tensorop_(bf16_)?s(\d+)gemm_bf16_(\d+)x(\d+)(?:_(\d+)x(\d+))?_nn_align(\d)")


def parse_kernel(name: str, grid=(1, 1, 1)) -> dict:
    """Family and configuration of one traced kernel: ``family`` (nvjet / nvjet_fp8 / cutlass75 /
    cutlass80 / wmma80 / reduce / other), ``tile`` (BM, BN) in cuBLAS's column-major order (BM over
    torch's n, BN over torch's m), ``bk``, ``stages``, ``cluster``, ``split_k`` (bool), ``align``
    (elements per load of the CUTLASS fallback kernels), ``ctas`` (grid product)."""
    ctas = int(math.prod(grid))
    out = {"name": name, "ctas": ctas, "grid": tuple(grid), "split_k": False}
    if "splitKreduce" in name:
        return {**out, "family": "reduce"}
    m = _NVJET.search(name.split("(")[0].strip())
    if m:
        flags = m.group(9)
        return {**out, "family": "nvjet_fp8" if m.group(1) == "qqtst" else "nvjet",
                "tile": (int(m.group(2)), int(m.group(3))), "bk": int(m.group(4)), "stages": int(m.group(5)),
                "cluster": (int(m.group(6)), int(m.group(7))), "raster": m.group(8),
                "coop": "coopA" if "_coopA" in flags else "coopB" if "_coopB" in flags else "",
                "split_k": "_splitK" in flags, "layout": m.group(10)}
    m = _CUTLASS.search(name)
    if m:
        fam = "wmma80" if m.group(2) else f"cutlass{m.group(1)}"
        return {**out, "family": fam, "tile": (int(m.group(5)), int(m.group(6))),
                "bk": int(m.group(7)) if m.group(7) else 32, "stages": int(m.group(8)) if m.group(8) else 2,
                "align": int(m.group(9)), "bf16_partials": bool(m.group(3)), "split_k": int(grid[2]) > 1}
    return {**out, "family": "other"}


def trace_splits(main: dict, m: int, n: int) -> int:
    """Split-K factor of a traced main kernel of torch shape (m, n): CUTLASS: grid.z; nvjet split-K:
    CTAs / (⌈n/BM⌉ rounded up to the cluster's x · ⌈m/BN⌉ rounded up to its y), at least 1;
    otherwise 1."""
    if not main.get("split_k"):
        return 1
    if main["family"].startswith(("cutlass", "wmma")):
        return int(main["grid"][2])
    bm, bn = main["tile"]
    cx, cy = main["cluster"]
    tiles = _round_up(math.ceil(n / bm), cx) * _round_up(math.ceil(m / bn), cy)
    return max(1, round(main["ctas"] / tiles))


def _round_up(x: int, q: int) -> int:
    return math.ceil(x / q) * q


def load_trace(gpu: str) -> dict:
    """{(m, n, k, dtype, seed): kernels} of the trace file of ``gpu``."""
    recs = json.loads(Path(TRACE[gpu]).read_text())["records"]
    return {(int(r["m"]), int(r["n"]), int(r["k"]), r["dtype"], r["seed"]): r["kernels"] for r in recs}


def joined(gpu: str, cal=None) -> list[dict]:
    """One row per traced shape with a clean timing: the clean record (``rec``, reduced to its faster
    pass median by :func:`validation.gemm_regimes.reproduced_times`), the model's prediction
    (``pred``), its plan (``plan``: compute seconds, tile rows, tile cols, split), the parsed main
    kernel (``main``), the traced split (``splits``), whether a reduce kernel ran (``reduce``, its
    device seconds ``reduce_s``), the summed device seconds (``device_s``) and the regime."""
    from simulator.calibration import calibration_for
    from simulator.compute import DeviceModel, gemm_plan
    from validation.gemm_regimes import gemm_regime, reproduced_times
    from validation.hardware import hardware_for
    from validation.predict import predict_record, record_dtype
    from validation.records import load_measurements

    trace = load_trace(gpu)
    rows = []
    for path, seeds in CLEAN[gpu].items():
        mf = load_measurements(path)
        hw = hardware_for(mf)
        c = cal or calibration_for(hw.accelerator)[0]
        dev = DeviceModel(hw.accelerator, c)
        recs = reproduced_times([r for r in mf.records if r.get("kind") == "gemm" and r.get("seed") in seeds])
        for r in recs:
            key = (int(r["m"]), int(r["n"]), int(r["k"]), r["dtype"], r["seed"])
            if key not in trace:
                continue
            ks = [parse_kernel(x["name"], x["grid"]) | {"device_s": x["device_s"] * x.get("launches_per_call", 1.0)}
                  for x in trace[key]]
            main = next(x for x in ks if x["family"] != "reduce")
            red = [x for x in ks if x["family"] == "reduce"]
            m, n, k = key[:3]
            rows.append({"rec": r, "m": m, "n": n, "k": k, "dtype": record_dtype(r), "seed": r["seed"],
                         "regime": gemm_regime(r), "pred": predict_record(r, hw, c).time_s,
                         "plan": gemm_plan(dev, m, n, k, record_dtype(r)), "dev": dev,
                         "main": main, "splits": trace_splits(main, m, n), "reduce": bool(red),
                         "reduce_s": sum(x["device_s"] for x in red), "device_s": sum(x["device_s"] for x in ks)})
    return rows


def oracle_time(row: dict) -> float | None:
    """The model's time formula (:func:`simulator.compute.gemm_plan`'s per-(tile, split) term, the
    memory roofline and the fixed costs) evaluated at the traced tile and split instead of its own
    choice; the traced tile in torch's (rows of m, cols of n) order. None for a traced tile the
    formula cannot take (none here)."""
    from simulator.compute import gemm_load_vector, gemm_tiling_s, gemm_with_roofline_s
    dev, m, n, k, dtype = row["dev"], row["m"], row["n"], row["k"], row["dtype"]
    bm, bn = row["main"]["tile"]
    tm, tn = bn, bm                       # cuBLAS M = torch n
    vector = gemm_load_vector(n, k, dtype, dev.cal.gemm_unaligned_max_vector)
    return gemm_with_roofline_s(dev, gemm_tiling_s(dev, m, n, k, dtype, tm, tn, row["splits"], vector), m, n, k, dtype)


def reduce_fit(gpu: str) -> tuple[float, float, int]:
    """(seconds at s = 0, seconds per split, shapes) of cuBLAS's ``splitKreduce_kernel``: least
    squares of its traced device time (every traced shape with a reduce launch) on 1, the split
    count s, the fp32 partial bytes 4·s·m·n and the bf16 output bytes 2·m·n; the per-split
    coefficient is ``gemm_split_k_per_split_s`` (H200 3.19e-8 s, H100 3.16e-8 s; a line on s alone
    gives 3.0e-8 s on both). The reduce walks the s partials of each output in turn: its time grows
    with s far more than with the partials' bytes (which stay in L2)."""
    import numpy as np
    rows = [r for r in joined(gpu) if r["reduce"]]
    s = np.array([float(r["splits"]) for r in rows])
    mn = np.array([float(r["m"] * r["n"]) for r in rows])
    x = np.stack([np.ones_like(s), s, 4.0 * s * mn, 2.0 * mn], 1)
    coef = np.linalg.lstsq(x, np.array([r["reduce_s"] for r in rows]), rcond=None)[0]
    return float(coef[0]), float(coef[1]), len(rows)


def _mape(xs) -> str:
    xs = list(xs)
    return f"{100 * sum(xs) / len(xs):5.1f}% ({len(xs)})" if xs else "-"


def report(gpu: str, profile: str | None = None) -> None:
    from simulator.calibration import load_calibration
    cal = load_calibration(profile) if profile else None
    rows = joined(gpu, cal)
    print(f"== {gpu}: {len(rows)} traced shapes joined to clean timings")
    fam = Counter((r["main"]["family"], r["reduce"]) for r in rows)
    print("kernel family (with split-K reduce launch): " + ", ".join(f"{f}{'+reduce' if red else ''} {v}"
                                                                     for (f, red), v in fam.most_common()))
    # launch/gap overhead: clean event time minus summed device time
    by = defaultdict(list)
    for r in rows:
        by[(r["main"]["family"], r["reduce"])].append(r["rec"]["time_s"] - r["device_s"])
    print("clean time - device time, median us: " + ", ".join(
        f"{f}{'+red' if red else ''} {1e6 * sorted(v)[len(v) // 2]:.2f}" for (f, red), v in sorted(by.items())))
    red = [r["reduce_s"] for r in rows if r["reduce"]]
    if red:
        print(f"reduce kernel device time: median {1e6 * sorted(red)[len(red) // 2]:.2f} us, "
              f"min {1e6 * min(red):.2f}, max {1e6 * max(red):.2f}")
    # split choice
    agree = Counter()
    for r in rows:
        agree[(r["plan"][3] > 1, r["splits"] > 1)] += 1
    print("split-K (model, trace): " + ", ".join(f"{a}/{b}: {v}" for (a, b), v in sorted(agree.items())))
    print(f"{'group':<34}{'model':>14}{'oracle tile/split':>20}{'bias model':>12}{'bias oracle':>12}")
    groups = defaultdict(list)
    for r in rows:
        groups["all"].append(r)
        groups["regime " + r["regime"]].append(r)
        groups["family " + r["main"]["family"] + ("+reduce" if r["reduce"] else "")].append(r)
    for g, rs in sorted(groups.items(), key=lambda x: (x[0] != "all", x[0])):
        e = [r["pred"] / r["rec"]["time_s"] - 1 for r in rs]
        o = [oracle_time(r) / r["rec"]["time_s"] - 1 for r in rs]
        print(f"{g:<34}{_mape(map(abs, e)):>14}{_mape(map(abs, o)):>20}{100 * sum(e) / len(e):>11.1f}%"
              f"{100 * sum(o) / len(o):>11.1f}%")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", choices=sorted(TRACE), action="append")
    p.add_argument("--profile", help="calibration profile (default: the accelerator's own)")
    p.add_argument("--reduce-fit", action="store_true", help="only the split-K reduce kernel's line (s = split count)")
    a = p.parse_args(argv)
    for gpu in a.gpu or sorted(TRACE, reverse=True):
        if a.reduce_fit:
            a0, per, count = reduce_fit(gpu)
            print(f"{gpu}: splitKreduce device time = {1e6 * a0:.2f} us + {1e9 * per:.2f} ns x splits + bytes terms ({count} shapes)")
            continue
        report(gpu, a.profile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
