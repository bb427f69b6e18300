"""Regimes of GEMM shapes for reporting accuracy on the held-out random sets (issue #12).

Decided from the shape alone, in this order: ``small_mn_large_k`` (m·n ≤ 1024², k ≥ 4096 and
k ≥ 4·max(m, n): split-K / stream-K territory), ``fp8_small`` (fp8, every dimension ≤ 1024),
``misaligned`` (a leading dimension not 16-byte aligned), ``large`` (≥ 2 GFLOP), ``other``.

``python -m validation.gemm_regimes [--profile NAME] FILE...`` prints MAPE by regime per seed of
each file (records timed in several passes reduced by :func:`reproduced_times` first)."""
from __future__ import annotations

import argparse
import re
import statistics
from collections import defaultdict
from pathlib import Path

from simulator.compute import TORCH_DTYPES, gemm_aligned

REGIMES = ("small_mn_large_k", "fp8_small", "misaligned", "large", "other")


def gemm_regime(rec: dict) -> str:
    m, n, k = int(rec["m"]), int(rec["n"]), int(rec["k"])
    dtype = TORCH_DTYPES.get(rec.get("dtype") or "bfloat16", "bf16")
    if m * n <= 1024 * 1024 and k >= 4096 and k >= 4 * max(m, n):
        return "small_mn_large_k"
    if dtype == "fp8" and max(m, n, k) <= 1024:
        return "fp8_small"
    if not gemm_aligned(m, n, k, dtype):
        return "misaligned"
    if 2.0 * m * n * k * int(rec.get("batch") or 1) >= 2.0 * 1024 ** 3:     # a batched GEMM's whole work
        return "large"
    return "other"


def reproduced_times(records: list[dict]) -> list[dict]:
    """One record per shape of GEMM records timed in several passes (``pass_no``; records without
    one are single-pass and pass through unchanged). Shapes are grouped by (m, n, k, dtype, seed, and for
    bmm_random records batch and gemm: its PV, dV, dQ and dK share (m, n, k) at sq = skv);
    the record returned is the shape's fastest pass, its ``time_s`` the faster of the pass
    medians, with ``passes`` (how many), ``pass_times_s`` (each pass median, seconds) and
    ``pass_spread`` (slowest / fastest pass median − 1) added. The rule: interference (a clock
    dip, another tenant, the host) only lengthens a kernel, never shortens it, so the faster
    median is the closer to the kernel's own time (docs/measurements.md, second random run)."""
    groups: dict = defaultdict(list)
    order = []
    for r in records:
        key = (int(r["m"]), int(r["n"]), int(r["k"]), r.get("dtype"), r.get("seed"),
               r.get("batch"), r.get("gemm")) if "pass_no" in r else id(r)
        if key not in groups:
            order.append(key)
        groups[key].append(r)
    out = []
    for key in order:
        recs = groups[key]
        if len(recs) == 1 and "pass_no" not in recs[0]:
            out.append(recs[0])
            continue
        times = [float(r["time_s"]) for r in recs]
        best = recs[times.index(min(times))]
        out.append({**best, "passes": len(recs), "pass_times_s": times, "pass_spread": max(times) / min(times) - 1.0})
    return out


def interference_suspect(rec: dict, ratio: float = 3.0) -> bool:
    """A single-pass record whose slowest call took more than ``ratio`` × its fastest
    (time_max_s / time_min_s): its median may be another tenant's or a clock dip's, not the kernel's."""
    lo, hi = rec.get("time_min_s"), rec.get("time_max_s")
    return bool(lo and hi and hi / lo > ratio)


def mape_by_regime(pairs) -> dict:
    """{regime: (count, MAPE)} and ``all`` from (record, predicted seconds) pairs."""
    errs = defaultdict(list)
    for rec, pred in pairs:
        e = abs(pred / rec["time_s"] - 1.0)
        errs[gemm_regime(rec)].append(e)
        errs["all"].append(e)
    return {k: (len(v), sum(v) / len(v)) for k, v in errs.items()}


def random_set_pairs(path, cal=None, seed=None, flagged: bool | None = None) -> list[tuple[dict, float]]:
    """(record, predicted seconds) of the ``gemm`` records of a random-set file, reduced by
    :func:`reproduced_times`; ``seed``: only that draw (any seed the file holds); ``flagged``:
    True/False keeps only records that are / are not :func:`interference_suspect`; ``cal``:
    default the accelerator's own profile."""
    from simulator.calibration import calibration_for
    from validation.hardware import hardware_for
    from validation.predict import predict_record
    from validation.records import load_measurements

    mf = load_measurements(path)
    hw = hardware_for(mf)
    cal = cal or calibration_for(hw.accelerator)[0]
    recs = reproduced_times([r for r in mf.records if r.get("kind") == "gemm"
                             and (seed is None or r.get("seed") == seed)])
    if flagged is not None:
        recs = [r for r in recs if interference_suspect(r) == flagged]
    return [(r, predict_record(r, hw, cal).time_s) for r in recs]


def registered_pairs(log_path, path) -> list[tuple[dict, float]]:
    """(record, registered seconds) of a random-set file against the predictions written before it
    ran (``python -m validation.prereg --gemm-seed``: one line per case, dtype, m x n x k, group,
    regime, predicted microseconds; ``#`` lines are comments), records reduced by
    :func:`reproduced_times`. KeyError when a measured shape was not registered."""
    registered = {}
    for line in Path(log_path).read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        registered[(line.split()[0], *_dims(line))] = float(line.split()[-2]) * 1e-6
    from validation.records import load_measurements
    recs = reproduced_times([r for r in load_measurements(path).records if r.get("kind") == "gemm"])
    return [(r, registered[(r["dtype"], int(r["m"]), int(r["n"]), int(r["k"]))]) for r in recs]


def registered_set_mapes(logs: dict, path) -> dict:
    """{tag: (records, pooled MAPE)} of one measured GEMM set against each of its registrations ``logs`` ({tag: log
    path}, e.g. the committed model's and a candidate's), records reduced by :func:`reproduced_times`."""
    return {tag: mape_by_regime(registered_pairs(log, path))["all"] for tag, log in logs.items()}


def registered_bmm_pairs(log_path, path) -> list[tuple[dict, float]]:
    """(record, registered seconds) of a bmm_random file (sustained.py --suite bmm_random) against its
    registration (``python -m validation.prereg --gemm-suite bmm_random``: one line per case, named as
    validation/harness/bmm_cases.label names it, regime, predicted microseconds), records reduced by
    :func:`reproduced_times`. KeyError when a measured case was not registered."""
    from validation.prereg import harness
    from validation.records import load_measurements
    label = harness("bmm_cases").label
    registered = {}
    for line in Path(log_path).read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        m = re.match(r"(.*\S)\s+\S+\s+([0-9.]+) us$", line)
        registered[m.group(1)] = float(m.group(2)) * 1e-6
    recs = reproduced_times([r for r in load_measurements(path).records if r.get("kind") == "gemm"])
    return [(r, registered[label(r).rstrip()]) for r in recs]


def _dims(line: str) -> tuple[int, int, int]:
    """m, n, k of a registered line (``  77x   755x 42459``: the first three integers after the dtype)."""
    return tuple(int(x) for x in re.findall(r"(\d+)x?", line.split(None, 1)[1])[:3])


def seeds_of(path) -> list:
    """The draws (``seed``) a random-set file holds, in order of first appearance (None: unseeded)."""
    from validation.records import load_measurements
    return list(dict.fromkeys(r.get("seed") for r in load_measurements(path).records if r.get("kind") == "gemm"))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+")
    p.add_argument("--profile", help="calibration profile (default: the accelerator's own)")
    args = p.parse_args(argv)
    from simulator.calibration import load_calibration
    cal = load_calibration(args.profile) if args.profile else None
    cols = ("all",) + REGIMES
    print(f"{'file':<28}{'seed':>6}" + "".join(f"{c:>20}" for c in cols))
    for path in args.files:
        for seed in seeds_of(path):
            pairs = random_set_pairs(path, cal, seed)
            res = mape_by_regime(pairs)
            spread = [r["pass_spread"] for r, _ in pairs if "pass_spread" in r]
            row = "".join(f"{'%.1f%% (%d)' % (100 * res[c][1], res[c][0]) if c in res else '-':>20}" for c in cols)
            extra = f"  pass spread median {100 * statistics.median(spread):.1f}%" if spread else ""
            print(f"{str(path).split('/')[-1]:<28}{str(seed):>6}{row}{extra}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
