"""Fit of candidate gemm72: cuBLAS's wide nvjet tiles in the GEMM tile search (issue #12 session 43).

The committed model tiles a GEMM with five coarse tiles (128x256, 256x128, 128x128, 64x128, 64x64) and
costs it in waves of one tile per SM. cuBLAS's Hopper kernels (nvjet) for large aligned shapes run wide
tiles at a much finer width: the traces of the development draws (validation/gemm_kernels.py) show one
side 128, 192 or 256 and the other any multiple of 8 from 128 up (192x176, 256x152, 128x272, 288x128 ...),
chosen so that m x n fills whole waves of the persistent kernel's ~132 CTAs. With only the coarse tiles,
the model pays wave quantization cuBLAS avoids: 1504x2896x9600 in three waves of 128x128 tiles (276
tiles) where cuBLAS runs one wave of 128 192x192 tiles (H100: predicted +49% slow). Candidate gemm72
(simulator.compute.gemm_tiles, profile switch ``gemm_tile_granularity`` 8) adds those wide tiles to the
search for aligned, unbatched GEMMs; unaligned GEMMs keep the CUTLASS fallback kernels' coarse tiles.

The parameters the coarse tiles' wave losses had been absorbed into are refitted with it: the dense peak
fractions of bf16 and fp8, the tile prologue/epilogue (``gemm_tile_overhead_k``), the small-tile exponent
and a call's fixed cost (``gemm_launch_s``). Fitted per GPU by coordinate descent (golden-section search
per parameter, validation.gemm36_fit.coordinate_descent) of the pooled MAPE over every development GEMM
record: the kernel suite, every random draw through seed 70 (H200) / 71 (H100) and the real training GEMMs
of seeds 60, 62 and 64 (micro-batch 1, 2 and 4), each draw reduced to its faster pass median. Registered on
fresh draws (H200 seed 72, H100 seed 73) before any adoption.

    python -m validation.gemm72_fit            prints both GPUs' fitted values and MAPE per data set
    python -m validation.gemm72_fit --write    also writes validation/candidates/<profile>-gemm72.yaml
    python -m validation.gemm72_fit h100-sxm   one GPU's profile only
"""
from __future__ import annotations

import sys
from dataclasses import replace

from validation.gemm36_fit import (CANDIDATES, MEAS, REPEAT, coordinate_descent, dev_records, fit_candidate_text,
                                   print_fit, with_values)
from validation.gemm62_fit import DEV as DEV62

LAST_SEED = {"h200-sxm": 70, "h100-sxm": 71}
FIRST_NEW_SEED = {"h200-sxm": 62, "h100-sxm": 63}
# development files: gemm62's, every draw since, and the micro-batch-4 training GEMMs
DEV = {profile: {**files,
                 **{REPEAT / f"{profile[:4]}_gemm_random{s}.json": (s,)
                    for s in range(FIRST_NEW_SEED[profile], LAST_SEED[profile] + 1, 2)},
                 MEAS / f"{profile[:4]}_gemm_real_mbs4_64.json": (64,)}
       for profile, files in DEV62.items()}
GRANULARITY = 8          # nvjet's wide-tile widths: multiples of 8 (traced)
BOUNDS = {
    "gemm_peak_fraction.bf16": (0.7, 0.95),
    "gemm_peak_fraction.fp8": (0.6, 0.9),
    "gemm_tile_overhead_k": (50.0, 300.0),
    "gemm_small_tile_exponent": (0.0, 0.3),
    "gemm_launch_s": (4.0e-6, 7.0e-6),
}
NEW = ("gemm_tile_granularity",)   # 0 in the committed profiles: the coarse tiles only
ROUNDS = 2
ITERS = 14                         # golden-section steps per search: the range shrinks to 0.618^14 = 0.12%


def fit(profile: str) -> tuple[dict, float, float]:
    """({parameter: fitted value}, pooled MAPE at them, pooled MAPE of the committed profile with the wide tiles
    switched on and nothing refitted): :data:`ROUNDS` rounds of coordinate descent from the committed values
    over :data:`BOUNDS`, on every development record of :data:`DEV`."""
    from simulator.calibration import load_calibration
    base = replace(load_calibration(profile), gemm_tile_granularity=float(GRANULARITY))
    return coordinate_descent(base, dev_records(profile, DEV[profile]), BOUNDS, ROUNDS, ITERS)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from simulator.calibration import load_calibration
    profiles = [p for p in DEV if p in argv] or list(DEV)
    for profile in profiles:
        committed = load_calibration(profile)
        values, mape, mape0 = fit(profile)
        values["gemm_tile_granularity"] = float(GRANULARITY)
        print_fit(profile, "gemm72", values, mape, mape0, committed, with_values(committed, values), DEV[profile])
        if "--write" in argv:
            text = fit_candidate_text(
                profile, values, mape, mape0, name="gemm72", session=43, dev=DEV[profile], bounds=BOUNDS, new=NEW,
                rounds=ROUNDS, anchor="gemm_split_k_per_split_s", start="wide tiles on, nothing refitted",
                last_seed=LAST_SEED[profile],
                mechanism="cuBLAS's wide nvjet tiles in the tile search of aligned GEMMs (simulator.compute.gemm_tiles)")
            (CANDIDATES / f"{profile}-gemm72.yaml").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
