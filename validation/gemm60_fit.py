"""Fit of candidate gemm60: a memory-bound GEMM's HBM rate as a function of the bytes it moves
(issue #12 session 33).

The committed model floors a GEMM at its operands' and output's bytes over one streaming rate, the
datasheet bandwidth x ``hbm_fraction`` (0.65 on both GPUs, fitted on the memory-bound kernels). On the
development draws the memory-bound GEMMs do not stream at one rate: their achieved fraction of the
datasheet rises with the bytes they move (H100 medians ~0.25 under 1 MB, ~0.5 at 4-64 MB, ~0.65 at
64-256 MB, ~0.8 for the 0.3-0.8 GB MoE-router GEMMs of the real training set), so the mid sizes are
predicted 6-12% fast and the largest 15-30% slow. Candidate gemm60 (simulator.compute.gemm_floor_Bps):

    rate(bytes) = datasheet B/s x gemm_floor_fraction x min(1, bytes / gemm_floor_full_bytes) ** gemm_floor_size_exponent

an empirical law, not a derived mechanism. Its three parameters are fitted per GPU, every other
parameter kept at the committed profile's value, by a coarse grid search refined by coordinate descent
(golden-section search per parameter, validation.gemm36_fit.coordinate_descent) of the pooled MAPE over
the development GEMM records:
the GPU's kernel suite (``gemm`` records), every random draw through seed 59 (H200 24-58, H100 12-59)
and the real training GEMMs of seed 60 (``h{200,100}_gemm_real60.json``), each draw reduced to its
faster pass median (validation.gemm_regimes.reproduced_times). Registered on seeds 60-62 before any
adoption (docs/validation.md "Session 33").

    python -m validation.gemm60_fit            prints both GPUs' fitted values and MAPE per data set
    python -m validation.gemm60_fit --write    also writes validation/candidates/<profile>-gemm60.yaml
"""
from __future__ import annotations

import sys
from dataclasses import replace

from validation.gemm36_fit import (CANDIDATES, MEAS, REPEAT, coordinate_descent, dev_records, fit_candidate_text,
                                   pooled_mape, print_fit)

H200_DRAWS = (25, 26, 28, 30, 32, 34, 36, 38, 40, 42, 44, 46, 48, 50, 52, 54, 56, 58)
H100_DRAWS = (27, 29, 31, 33, 35, 37, 39, 41, 43, 45, 47, 49, 51, 53, 55, 57, 59)
# development files and the draws taken from each (nothing past seed 60)
DEV = {
    "h200-sxm": {MEAS / "h200_kernels.json": None, MEAS / "h200_gemm_random.json": (24,),
                 **{REPEAT / f"h200_gemm_random{s}.json": (s,) for s in H200_DRAWS},
                 MEAS / "h200_gemm_real60.json": (60,)},
    "h100-sxm": {MEAS / "h100_kernels.json": None, MEAS / "h100_gemm_random2.json": (21, 22, 12),
                 MEAS / "h100_gemm_random3.json": (23,),
                 **{REPEAT / f"h100_gemm_random{s}.json": (s,) for s in H100_DRAWS},
                 MEAS / "h100_gemm_real60.json": (60,)},
}
BOUNDS = {
    "gemm_floor_fraction": (0.55, 1.0),            # of the datasheet HBM bandwidth, at and above full_bytes
    "gemm_floor_size_exponent": (0.0, 0.4),        # 0: one rate for every size
    "gemm_floor_full_bytes": (5.0e7, 2.0e9),       # bytes from which the rate stops rising
}
NEW = tuple(BOUNDS)        # 0 in the committed profiles: the floor at hbm_fraction
ROUNDS = 2
GRID_START = "the best point of validation/gemm60_fit.GRID, each range clipped to one grid step around it"
# coarse grid searched first (the three interact: coordinate descent from the committed rate stalls at a
# lower fraction with almost no size dependence), the best point then refined by coordinate descent
# within one grid step of it
GRID = {
    "gemm_floor_fraction": (0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0),
    "gemm_floor_size_exponent": (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3),
    "gemm_floor_full_bytes": (1.0e8, 2.0e8, 4.0e8, 8.0e8, 1.6e9),
}


def start(profile: str):
    """The committed profile with the floor's law switched on at the committed rate: fraction =
    ``hbm_fraction``, exponent 0 (every size at that rate: the committed model's predictions), full
    bytes 400 MB."""
    from simulator.calibration import load_calibration
    cal = load_calibration(profile)
    return replace(cal, gemm_floor_fraction=cal.hbm_fraction, gemm_floor_size_exponent=0.0, gemm_floor_full_bytes=4.0e8)


def fit(profile: str) -> tuple[dict, float, float]:
    """({parameter: fitted value}, pooled MAPE at them, pooled MAPE of the committed profile): the best
    point of :data:`GRID`, refined by :data:`ROUNDS` rounds of coordinate descent within one grid step of
    it (clipped to :data:`BOUNDS`), on every development record of :data:`DEV`."""
    import itertools
    base, rows = start(profile), dev_records(profile, DEV[profile])
    names = tuple(GRID)
    best = min(itertools.product(*GRID.values()),
               key=lambda point: pooled_mape(rows, replace(base, **dict(zip(names, point)))))
    bounds = {}
    for p, v in zip(names, best):
        grid = GRID[p]
        i = grid.index(v)
        bounds[p] = (max(BOUNDS[p][0], grid[max(i - 1, 0)]), min(BOUNDS[p][1], grid[min(i + 1, len(grid) - 1)]))
    return coordinate_descent(replace(base, **dict(zip(names, best))), rows, bounds, ROUNDS)[:2] + (pooled_mape(rows, base),)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from simulator.calibration import load_calibration
    for profile in DEV:
        base = start(profile)
        values, mape, mape0 = fit(profile)
        print_fit(profile, "gemm60", values, mape, mape0, load_calibration(profile), replace(base, **values), DEV[profile])
        if "--write" in argv:
            text = fit_candidate_text(
                profile, values, mape, mape0, name="gemm60", session=33, dev=DEV[profile], bounds=BOUNDS, new=NEW,
                rounds=ROUNDS, anchor="hbm_fraction", start=GRID_START, last_seed=60,
                mechanism="the HBM rate of a memory-bound GEMM rising with the bytes it moves (simulator.compute.gemm_floor_Bps)")
            (CANDIDATES / f"{profile}-gemm60.yaml").write_text(text.replace("from the committed values (" + GRID_START, "from (" + GRID_START))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
