"""Fit of candidate gemm62: the share of a GEMM's streaming (or compute) time its pipeline cannot hide
(issue #12 session 34).

The committed model times a GEMM as max(tile compute, bytes / HBM rate) + fixed costs: the roofline,
loads perfectly hidden behind the tensor cores. On every development draw the GEMMs whose streaming
time is a quarter to a half of their measured time are predicted 4-7% fast (H100 and H200 alike), and
the gap between a shape's flushed event time and its warm device time (the profiler pass of
``--kernel-names``) grows with the bytes it moves, from ~3.8 us under 1 MB to 6-8 us at 16-64 MB,
faster on the H100's slower HBM; a re-run of H100 seed 53 reproduces that gap shape by shape
(correlation 0.99): it is the kernel's, not noise. A tile's first K-slices come from a cold L2 before its
first MMA and its output is stored after its last; neither overlaps within the tile. Candidate gemm62
(simulator.compute.gemm_with_roofline_s):

    t = max(compute, memory) + gemm_overlap_exposed x min(compute, memory) + fixed

with the parameters the roofline's bias had been absorbed into refitted with it: the dense peak
fractions of bf16 and fp8, the tile prologue/epilogue (``gemm_tile_overhead_k``), the small-tile
exponent and the fixed cost of a call (``gemm_launch_s``). Fitted per GPU by coordinate descent
(golden-section search per parameter, validation.gemm36_fit.coordinate_descent) of the pooled MAPE
over every development GEMM record: the kernel suite, every random draw through seed 60 (H200) / 61
(H100), and the real training GEMMs of seeds 60 and 62 (micro-batch 1 and 2), each draw reduced to its
faster pass median. Registered on fresh draws (H200 seed 62, H100 seed 63, training GEMMs seed 64)
before any adoption (docs/validation.md "Session 34").

    python -m validation.gemm62_fit            prints both GPUs' fitted values and MAPE per data set
    python -m validation.gemm62_fit --write    also writes validation/candidates/<profile>-gemm62.yaml
"""
from __future__ import annotations

import sys

from validation.gemm36_fit import (CANDIDATES, MEAS, REPEAT, coordinate_descent, dev_records, fit_candidate_text,
                                   print_fit, with_values)
from validation.gemm60_fit import DEV as DEV60

LAST_SEED = {"h200-sxm": 60, "h100-sxm": 61}
# development files and the draws taken from each: gemm60's, the draws of session 33 and its
# micro-batch-2 training GEMMs
DEV = {profile: {**files, REPEAT / f"{profile[:4]}_gemm_random{LAST_SEED[profile]}.json": (LAST_SEED[profile],),
                 MEAS / f"{profile[:4]}_gemm_real_mbs2_62.json": (62,)}
       for profile, files in DEV60.items()}
BOUNDS = {
    "gemm_overlap_exposed": (0.0, 0.5),               # share of min(compute, memory) not hidden
    "gemm_peak_fraction.bf16": (0.7, 0.95),           # refitted with it: the roofline's bias sat in these
    "gemm_peak_fraction.fp8": (0.6, 0.9),
    "gemm_tile_overhead_k": (50.0, 300.0),
    "gemm_small_tile_exponent": (0.0, 0.3),
    "gemm_launch_s": (4.0e-6, 7.0e-6),
}
NEW = ("gemm_overlap_exposed",)   # 0 in the committed profiles: the roofline max
ROUNDS = 2


def fit(profile: str) -> tuple[dict, float, float]:
    """({parameter: fitted value}, pooled MAPE at them, pooled MAPE of the committed profile):
    :data:`ROUNDS` rounds of coordinate descent from the committed values over :data:`BOUNDS`, on every
    development record of :data:`DEV`."""
    from simulator.calibration import load_calibration
    return coordinate_descent(load_calibration(profile), dev_records(profile, DEV[profile]), BOUNDS, ROUNDS)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from simulator.calibration import load_calibration
    for profile in DEV:
        committed = load_calibration(profile)
        values, mape, mape0 = fit(profile)
        print_fit(profile, "gemm62", values, mape, mape0, committed, with_values(committed, values), DEV[profile])
        if "--write" in argv:
            text = fit_candidate_text(
                profile, values, mape, mape0, name="gemm62", session=34, dev=DEV[profile], bounds=BOUNDS, new=NEW,
                rounds=ROUNDS, anchor="hbm_fraction", start="exposed share 0", last_seed=LAST_SEED[profile],
                mechanism="the exposed share of the smaller of the compute and streaming times of a GEMM (simulator.compute.gemm_with_roofline_s)")
            (CANDIDATES / f"{profile}-gemm62.yaml").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
