"""Candidate gemm36 (issue #12 session 23): the split-K L2 operand floor.

``gemm_l2_operand_bytes_per_flop`` (simulator.compute.l2_operand_s): a split-K tiling's compute time is
at least the operand bytes its tile-splits stream from L2, Σ (tm + tn)·k_pad·bytes, over that rate x the
datasheet dense bf16 peak. 0 (the default, and the committed profiles) leaves every prediction as it
was; the candidate profiles validation/candidates/h{200,100}-sxm-gemm36.yaml carry the values
validation/gemm36_fit.py fits on the development GEMM records (through seed 35)."""
from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
from tests.kernel_profiles import with_later_fits_of

from simulator.calibration import Calibration, load_calibration
from simulator.compute import (DTYPE_BYTES, DeviceModel, gemm_plan, gemm_tiling_s, gemm_time, l2_operand_s,
                               split_k_reduction_s, gemm_tile_s)
from validation.hardware import hardware_for
from validation.records import load_measurements

ROOT = Path(__file__).resolve().parent.parent
CAND = ROOT / "validation" / "candidates"
PARAM = "gemm_l2_operand_bytes_per_flop"
# shapes of every kind: small-m·n large-k (split-K), fat, skinny, unaligned, fp8
SHAPES = [(208, 376, 43304, "bf16"), (64, 864, 23104, "bf16"), (8192, 8192, 8192, "bf16"), (5208, 144, 3032, "bf16"),
          (101, 38, 5098, "bf16"), (119, 96, 50864, "fp8"), (4096, 1536, 4096, "fp8"), (1000, 1001, 999, "bf16")]


def _dev(profile: str, **kw) -> DeviceModel:
    mf = load_measurements(ROOT / "validation" / "measurements" / f"{profile[:4]}_kernels.json")
    return DeviceModel(hardware_for(mf).accelerator, replace(load_calibration(profile), **kw))


def test_off_by_default_and_on_in_the_committed_profiles():
    """Off by default (0: no floor, bit for bit what the model gave before); on in the committed H200 / H100
    profiles since session 23 adopted the candidate (fresh draws 36 / 37: 11.0 -> 8.25%, 9.7 -> 8.6%)."""
    assert getattr(Calibration(), PARAM) == 0.0
    for profile in ("h200-sxm", "h100-sxm"):
        assert getattr(load_calibration(profile), PARAM) > 0.004
        zero = _dev(profile, **{PARAM: 0.0})
        assert l2_operand_s(zero, 132, 64, 64, 43304, "bf16") == 0.0
        # bit for bit: the floor at 0 and the committed split-K fixed cost give the tiling's waves alone
        for m, n, k, dt in SHAPES:
            assert gemm_time(_dev(profile), m, n, k, dt) >= gemm_time(zero, m, n, k, dt)


def test_floor_is_operand_bytes_over_the_rate():
    dev = _dev("h200-sxm", **{PARAM: 0.01})
    rate = 0.01 * dev.accelerator.peak_flops("bf16")
    # 24 tile-splits of 64x64 over k = 8661 (padded to 8704): (64 + 64) x 8704 x 2 bytes each
    assert l2_operand_s(dev, 24, 64, 64, 8661, "bf16") == pytest.approx(24 * 128 * 8704 * 2 / rate)
    assert l2_operand_s(dev, 24, 64, 64, 8661, "fp8") == pytest.approx(24 * 128 * 8704 * DTYPE_BYTES["fp8"] / rate)
    # twice the rate, half the floor
    dev2 = _dev("h200-sxm", **{PARAM: 0.02})
    assert l2_operand_s(dev2, 24, 64, 64, 8661, "bf16") == pytest.approx(l2_operand_s(dev, 24, 64, 64, 8661, "bf16") / 2)


def test_floor_applies_to_split_k_tilings_only():
    off, on = _dev("h200-sxm", **{PARAM: 0.0}), _dev("h200-sxm", **{PARAM: 0.0074})
    m, n, k = 208, 376, 43304
    # no split: the tiling's time is unchanged however low the L2 rate
    assert gemm_tiling_s(on, m, n, k, "bf16", 64, 64, 1, None) == gemm_tiling_s(off, m, n, k, "bf16", 64, 64, 1, None)
    # split 5 ways: the floor binds (24 tiles x 5 splits of 64x64 stream 266 MB) and replaces the waves' time
    t_on = gemm_tiling_s(on, m, n, k, "bf16", 64, 64, 5, None)
    tiles = math.ceil(m / 64) * math.ceil(n / 64)
    waves = math.ceil(tiles * 5 / on.accelerator.sm_count) * gemm_tile_s(on, 64, 64, math.ceil(k / 5), "bf16")
    floor = l2_operand_s(on, tiles * 5, 64, 64, math.ceil(k / 5), "bf16")
    assert floor > waves
    assert t_on == pytest.approx(floor + split_k_reduction_s(on, m, n, 5))
    assert t_on > gemm_tiling_s(off, m, n, k, "bf16", 64, 64, 5, None)


def test_small_mn_large_k_slower_fat_gemms_unchanged():
    off, on = _dev("h200-sxm", **{PARAM: 0.0}), _dev("h200-sxm", **{PARAM: 0.0074})
    assert gemm_time(on, 208, 376, 43304, "bf16") > 1.2 * gemm_time(off, 208, 376, 43304, "bf16")
    # a fat GEMM never splits: identical
    assert gemm_plan(off, 8192, 8192, 8192, "bf16")[3] == 1
    assert gemm_time(on, 8192, 8192, 8192, "bf16") == gemm_time(off, 8192, 8192, 8192, "bf16")
    # a floor can only slow a tiling, and the planner still picks the fastest: never faster than without it
    for m, n, k, dt in SHAPES:
        assert gemm_time(on, m, n, k, dt) >= gemm_time(off, m, n, k, dt)


@pytest.mark.parametrize("gpu", ["h200", "h100"])
def test_candidate_loads_and_is_the_committed_profile(gpu):
    """The candidate differed from the profile of its time only in the fitted parameters; adopted in
    session 23, the committed profile is the candidate, except the memory-bound parameters of candidate
    membound46 adopted in session 24 (no GEMM uses them)."""
    from validation.gemm36_fit import BEFORE
    path = CAND / f"{gpu}-sxm-gemm36.yaml"
    assert path.read_text().startswith("candidate: 'gemm36")
    cand, base = load_calibration(str(path)), load_calibration(str(path.parent / f"{gpu}-sxm-pre39.yaml"))   # profile before session 39
    assert 0.004 < getattr(cand, PARAM) < 0.008          # 4-8 TB/s of L2 into the SMs on a 989 TFLOP/s part
    assert 1e-6 < cand.gemm_split_k_fixed_s < BEFORE[f"{gpu}-sxm"]["gemm_split_k_fixed_s"]
    assert replace(with_later_fits_of(cand, base), name=base.name, memory_op_fixed_s=base.memory_op_fixed_s,
                   norm_forward=base.norm_forward) == base


@pytest.mark.parametrize("gpu", ["h200", "h100"])
def test_candidate_values_reproduce_from_the_fit(gpu):
    """validation/gemm36_fit.py, run again from the values it replaced (gemm36_fit.BEFORE), gives the
    candidate's and the committed profile's values and the pooled figures its fit block records."""
    import yaml
    from validation.gemm36_fit import PARAMETERS, fit
    values, mape, mape0 = fit(f"{gpu}-sxm")
    cand = load_calibration(str(CAND / f"{gpu}-sxm-gemm36.yaml"))
    for p in PARAMETERS:
        assert values[p] == pytest.approx(getattr(cand, p), rel=1e-6), p
    assert mape < mape0 - 0.004                          # H200 8.47 -> 7.19%, H100 8.90 -> 8.42% pooled
    doc = yaml.safe_load((CAND / f"{gpu}-sxm-gemm36.yaml").read_text())
    block = next(v for k, v in doc["fits"].items() if k.startswith("gemm36"))
    assert (round(mape, 4), round(mape0, 4)) == (block["pooled_mape"], block["pooled_mape_committed"])
