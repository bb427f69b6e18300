"""Issue #12 session 43: cuBLAS's wide nvjet tiles in the GEMM tile search (simulator.compute.gemm_tiles,
profile switch ``gemm_tile_granularity``; candidate gemm72, validation/gemm72_fit.py)."""
import math
from dataclasses import replace
from pathlib import Path

import pytest

from hardware_specs.catalog import load_accelerator
from hardware_specs.errors import SpecError
from simulator.calibration import calibration_from_dict, load_calibration
from simulator.compute import GEMM_TILES, DeviceModel, gemm_plan, gemm_tiles, nvjet_wide_tiles


@pytest.fixture(scope="module")
def cal():
    return load_calibration("h100-sxm")


def test_switch_off_keeps_the_coarse_tiles(cal):
    assert cal.gemm_tile_granularity == 0
    assert gemm_tiles(cal, aligned=True) == GEMM_TILES


def test_wide_tiles_only_for_aligned_unbatched_gemms(cal):
    wide = replace(cal, gemm_tile_granularity=8.0)
    tiles = gemm_tiles(wide, aligned=True)
    assert tiles[:len(GEMM_TILES)] == GEMM_TILES
    # traced nvjet tiles (validation/gemm_kernels.py), in either orientation
    for traced in ((192, 192), (176, 192), (152, 256), (272, 128), (128, 288), (304, 128)):
        assert traced in tiles
    assert (64, 8) not in tiles and (320, 192) not in tiles      # narrow tiles and widths never traced
    assert gemm_tiles(wide, aligned=False) == GEMM_TILES          # CUTLASS fallback kernels
    assert gemm_tiles(wide, aligned=True, batch=4) == GEMM_TILES  # batched GEMMs keep their own fit's tiles
    assert len(set(tiles)) == len(tiles)
    assert all(w % 8 == 0 and h % 8 == 0 for w, h in nvjet_wide_tiles(8))


def test_a_wide_tile_covers_the_shape_in_one_wave(cal):
    """1504 x 2896 x 9600: the coarse tiles need 276 128x128 tiles (three waves of 132 SMs); cuBLAS ran 128
    tiles of 192 x 192 in one wave (H100 seed 65). The search finds a one-wave wide tiling and it is faster."""
    acc = load_accelerator("h100-sxm")
    coarse = gemm_plan(DeviceModel(acc, cal), 1504, 2896, 9600)
    wide = gemm_plan(DeviceModel(acc, replace(cal, gemm_tile_granularity=8.0)), 1504, 2896, 9600)
    tiles = math.ceil(1504 / wide[1]) * math.ceil(2896 / wide[2])
    assert tiles <= acc.sm_count and wide[3] == 1
    assert math.ceil(1504 / coarse[1]) * math.ceil(2896 / coarse[2]) > acc.sm_count
    assert wide[0] < 0.8 * coarse[0]


@pytest.mark.parametrize("bad", [12, 0.5, -8, "8"])
def test_granularity_must_be_a_traced_step(bad):
    with pytest.raises(SpecError, match="gemm_tile_granularity"):
        calibration_from_dict({"parameters": {"gemm_tile_granularity": bad}}, "p.yaml")


# ---- candidate gemm72, registered before the runs (commit 2a1f722, code of 5b722fc) ------------------------------
ROOT = Path(__file__).resolve().parent.parent
MEAS = ROOT / "validation" / "measurements"
CANDIDATES = ROOT / "validation" / "candidates"
# {set: (measurement file, shapes, {tag: MAPE as registered})}, tag "" the committed model
GEMM72_REGISTERED = {
    "random72_h200": (MEAS / "repeat" / "h200_gemm_random72.json", 156, {"": 0.0751, "_gemm72": 0.0711}),
    "random73_h100": (MEAS / "repeat" / "h100_gemm_random73.json", 156, {"": 0.0909, "_gemm72": 0.0935}),
    "real_mbs3_72_h200": (MEAS / "h200_gemm_real_mbs3_72.json", 197, {"": 0.0536, "_gemm72": 0.0486}),
    "real_mbs3_72_h100": (MEAS / "h100_gemm_real_mbs3_72.json", 197, {"": 0.0891, "_gemm72": 0.0547}),
}


@pytest.mark.parametrize("name", sorted(GEMM72_REGISTERED))
def test_gemm72_as_registered(name):
    from validation.gemm_regimes import registered_set_mapes
    data, shapes, figures = GEMM72_REGISTERED[name]
    got = registered_set_mapes({tag: MEAS / "logs" / f"prereg_gemm_{name}{tag}.txt" for tag in figures}, data)
    assert got == {tag: (shapes, pytest.approx(mape, abs=1e-4)) for tag, mape in figures.items()}


def test_the_fresh_sets_were_measured_after_their_registration():
    from validation.records import load_measurements
    for data, _, _ in GEMM72_REGISTERED.values():
        info = load_measurements(data).info
        assert info["date"] >= "2026-11-25" and info["passes"] == 2 and info["kernel_names"]


@pytest.mark.xfail(strict=True, reason="issue #12 target 7% on real training GEMMs: the committed H100 model misses it on "
                                       "the micro-batch-3 set as registered (8.9%; 7.1%, 7.0%, 7.4% at micro-batch 1, 2, 4); "
                                       "candidate gemm72 5.5%, not adopted (test_why_gemm72_is_not_adopted)")
def test_h100_real_training_gemms_at_micro_batch_3_within_7_percent():
    assert GEMM72_REGISTERED["real_mbs3_72_h100"][2][""] <= 0.07


def test_why_gemm72_is_not_adopted():
    """As registered, gemm72 is better on three of the four fresh sets (H200 random 7.51 -> 7.11%, real training GEMMs
    H200 5.36 -> 4.86%, H100 8.91 -> 5.47%) and worse on the H100 random draw (9.09 -> 9.35%). On the GEMMs profiled
    inside training steps (validation.gemm_instep, never fitted) it is better per call (linear 7.1 -> 5.7%) but their
    summed seconds, what a step's time rests on, go from +1.1% (predicted slow) to -2.9% (fast): the wide tiles take
    the large GEMMs' wave losses away and, in a step, those GEMMs run a few percent slower than alone. Every set of
    measured training steps it moves gets worse (docs/validation.md "Session 43"), so the shipped profiles keep the
    switch off."""
    from validation.gemm_instep import rows, summary
    better = [n for n, (_, _, v) in GEMM72_REGISTERED.items() if v["_gemm72"] < v[""]]
    assert sorted(better) == ["random72_h200", "real_mbs3_72_h100", "real_mbs3_72_h200"]
    committed = summary(rows())["linear"]
    cand = summary(rows(cal=load_calibration(str(CANDIDATES / "h200-sxm-gemm72.yaml"))))["linear"]
    assert cand["mape"] < committed["mape"] - 0.01
    assert committed["total_error"] > 0.005 and cand["total_error"] < -0.02
    assert all(load_calibration(p).gemm_tile_granularity == 0 for p in ("h200-sxm", "h100-sxm"))


@pytest.mark.parametrize("profile", ["h200-sxm", "h100-sxm"])
def test_candidate_is_the_committed_profile_plus_the_fit(profile):
    """The candidate changes the switch and the five refitted parameters, nothing else; its lower bf16 peak fraction
    (the coarse tiles' wave losses no longer need a higher rate to cancel) is stated in the fit block."""
    from validation.gemm36_fit import value_of
    from validation.gemm72_fit import BOUNDS
    committed, cand = load_calibration(profile), load_calibration(str(CANDIDATES / f"{profile}-gemm72.yaml"))
    assert cand.gemm_tile_granularity == 8
    moved = {p for p in BOUNDS if value_of(cand, p) != value_of(committed, p)}
    assert moved == set(BOUNDS)
    assert replace(cand, gemm_tile_granularity=0.0, gemm_peak_fraction=committed.gemm_peak_fraction,
                   gemm_tile_overhead_k=committed.gemm_tile_overhead_k,
                   gemm_small_tile_exponent=committed.gemm_small_tile_exponent,
                   gemm_launch_s=committed.gemm_launch_s, name=committed.name) == committed
    assert cand.gemm_peak_fraction["bf16"] < committed.gemm_peak_fraction["bf16"]
