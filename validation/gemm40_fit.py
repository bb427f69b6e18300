"""Fit of candidate gemm40: the fallback (unaligned) GEMM kernels' serial C store and small-tile loads
(issue #12 session 24).

Two mechanisms of the CUTLASS SM75 ``align1`` / SM80 ``align2`` kernels cuBLAS runs when a leading
dimension is not 16-byte aligned (traced: validation/gemm_kernels.py, the ``kernels`` field of the
random draws from seed 32 on and repeat/h*_gemm_trace_dev.json):

* ``gemm_unaligned_store_serial`` (simulator.compute.unaligned_store_s): those kernels store C in their
  epilogue after the whole main loop, not overlapped with it (no warp-specialised producer, no TMA
  store): + this x the output tiles' bytes at HBM bandwidth when not split over k;
* ``gemm_unaligned_reuse_exponent`` (simulator.compute.unaligned_load_s): a smaller CTA tile's narrow
  loads run (r_max / r) ** this slower than the per-element load law gives (r = 2·tm·tn/(tm + tn)).

Both are fitted per GPU with the fallback kernels' own load rate and fixed cost
(``gemm_unaligned_fraction``, ``gemm_unaligned_fixed_s``), every other parameter kept at the committed
profile's value, by coordinate descent (golden-section search per parameter, as validation/gemm36_fit.py)
of the pooled MAPE over the development GEMM records: the GPU's kernel suite (``h{200,100}_kernels.json``,
``gemm`` records) and every random draw through seed 39 (H200 seeds 24-26, 28, 30, 32, 34, 36, 38; H100
seeds 12, 21-23, 27, 29, 31, 33, 35, 37, 39), each reduced to its faster pass median
(validation.gemm_regimes.reproduced_times). Draws 40 and later are not read.

    python -m validation.gemm40_fit            prints both GPUs' fitted values, pooled MAPE and MAPE by regime
    python -m validation.gemm40_fit --write    also writes validation/candidates/<profile>-gemm40.yaml
"""
from __future__ import annotations

from dataclasses import replace

from validation.gemm36_fit import CANDIDATES, MEAS, REPEAT, coordinate_descent, dev_records, fit_candidate_text

# development files and the draws taken from each (nothing past seed 39)
DEV = {
    "h200-sxm": {MEAS / "h200_kernels.json": None, MEAS / "h200_gemm_random.json": (24,),
                 **{REPEAT / f"h200_gemm_random{s}.json": (s,) for s in (25, 26, 28, 30, 32, 34, 36, 38)}},
    "h100-sxm": {MEAS / "h100_kernels.json": None, MEAS / "h100_gemm_random2.json": (21, 22, 12),
                 MEAS / "h100_gemm_random3.json": (23,),
                 **{REPEAT / f"h100_gemm_random{s}.json": (s,) for s in (27, 29, 31, 33, 35, 37, 39)}},
}
# the candidate's parameters and the range each is searched over
BOUNDS = {
    # share of the fallback kernels' C store not overlapped with their main loop (1: fully serial)
    "gemm_unaligned_store_serial": (0.0, 1.5),
    # (r_max / r) ** this: smaller fallback tiles' loads slower than their reuse alone gives (0: off)
    "gemm_unaligned_reuse_exponent": (0.0, 1.0),
    # refitted with them: the fallback kernels' load rate (fraction of the bf16 peak at one element per
    # load on the largest tile) and their extra fixed cost
    "gemm_unaligned_fraction": (0.08, 0.30),
    "gemm_unaligned_fixed_s": (0.0, 4.0e-6),
}
NEW = ("gemm_unaligned_store_serial", "gemm_unaligned_reuse_exponent")   # 0 in the committed profiles: off
PARAMETERS = tuple(BOUNDS)
ROUNDS = 3         # coordinate-descent rounds, each a golden-section search per parameter in turn


def fit(profile: str) -> tuple[dict, float, float]:
    """({parameter: fitted value}, pooled MAPE at them, pooled MAPE of the committed profile):
    coordinate descent from the committed ``profile`` (the new parameters 0: off), :data:`ROUNDS`
    rounds of a golden-section search per parameter over its :data:`BOUNDS`, on the development
    records of :data:`DEV` (validation.gemm36_fit.dev_records)."""
    from simulator.calibration import load_calibration
    return coordinate_descent(load_calibration(profile), dev_records(profile, DEV[profile]), BOUNDS, ROUNDS)


def regime_mape(profile: str, cal) -> dict:
    """{regime: (records, MAPE)} (validation.gemm_regimes.mape_by_regime, ``all`` included) of the
    development records of ``profile`` predicted under calibration ``cal``."""
    from validation.gemm_regimes import mape_by_regime
    from validation.predict import predict_record
    return mape_by_regime([(r, predict_record(r, hw, cal).time_s) for r, hw in dev_records(profile, DEV[profile])])


def candidate_text(profile: str, values: dict, mape: float, mape0: float) -> str:
    """The committed profile's YAML with a top-level ``candidate:`` line, a ``gemm40[...]`` block in
    ``fits`` (provenance), the new parameters after ``gemm_unaligned_max_vector`` and the refitted
    ones in place (validation.gemm36_fit.fit_candidate_text)."""
    return fit_candidate_text(
        profile, values, mape, mape0, name="gemm40", session=24, dev=DEV[profile], bounds=BOUNDS, new=NEW,
        rounds=ROUNDS, anchor="gemm_unaligned_max_vector", start="new ones 0: off", last_seed=39,
        mechanism="the fallback (unaligned) GEMM kernels'' serial C store (simulator.compute.unaligned_store_s) and "
                  "small-tile load factor (unaligned_load_s), with their load rate and fixed cost refitted")


def main(argv=None) -> int:
    import sys
    from simulator.calibration import load_calibration
    from validation.gemm_regimes import REGIMES
    argv = sys.argv[1:] if argv is None else argv
    for profile in DEV:
        v, m, m0 = fit(profile)
        print(f"{profile}: " + ", ".join(f"{p} = {x:.6g}" for p, x in v.items())
              + f"  pooled MAPE {100 * m:.2f}% (committed profile: {100 * m0:.2f}%)")
        base = load_calibration(profile)
        before, after = regime_mape(profile, base), regime_mape(profile, replace(base, **v))
        for reg in ("all",) + REGIMES:
            print(f"    {reg:<18}{before[reg][0]:>6}  {100 * before[reg][1]:6.2f}% -> {100 * after[reg][1]:6.2f}%")
        if "--write" in argv:
            (CANDIDATES / f"{profile}-gemm40.yaml").write_text(candidate_text(profile, v, m, m0))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
