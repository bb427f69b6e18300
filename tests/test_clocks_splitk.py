"""Split-K choice and the power-limited clock model (issue #12)."""
import json
from pathlib import Path

import pytest

from hardware_specs.catalog import load_accelerator
from simulator.calibration import load_calibration
from simulator.compute import DeviceModel, gemm_plan, gemm_time, split_k_factors
from simulator.power import fit_power_model, power_w, sustained_clock_mhz, time_ratio

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def h100():
    return DeviceModel(load_accelerator("h100-sxm"), load_calibration("h100-sxm"))


@pytest.mark.parametrize("m,n,k", [(16, 32, 16384), (64, 128, 65536), (128, 256, 8192), (16, 64, 32768)])
def test_split_k_for_small_mn_large_k(h100, m, n, k):
    assert gemm_plan(h100, m, n, k, "bf16")[3] > 1


@pytest.mark.parametrize("m,n,k", [(8192, 8192, 8192), (4096, 4096, 512), (2048, 2048, 16384),
                                   (16384, 1024, 65536), (64, 64, 128), (512, 512, 256)])
def test_no_split_k_when_tiles_fill_the_sms_or_k_is_short(h100, m, n, k):
    assert gemm_plan(h100, m, n, k, "bf16")[3] == 1


def test_split_k_factors_bounded():
    assert split_k_factors(200, 65536, 132) == [1]
    f = split_k_factors(1, 1 << 20, 132)
    assert f[0] == 1 and max(f) == 32
    assert split_k_factors(1, 600, 132) == [1, 2]          # at least 256 of k per split
    assert max(split_k_factors(40, 1 << 20, 132)) == 3      # no more than one wave of tile-splits


def test_split_k_never_slower_than_no_split(h100):
    # the best plan includes s = 1, so allowing split-K never predicts a slower GEMM
    for m, n, k in [(16, 16, 4096), (100, 300, 30000), (1024, 1024, 1024)]:
        t, *_ = gemm_plan(h100, m, n, k, "bf16")
        assert gemm_time(h100, m, n, k) >= t


def test_sustained_clock_monotone_in_power_limit():
    clocks = [sustained_clock_mhz(p, 75.0, 250.0, 1980.0) for p in range(100, 3200, 50)]
    assert all(a <= b for a, b in zip(clocks, clocks[1:]))
    assert clocks[-1] == 1980.0                              # never above the maximum clock
    assert sustained_clock_mhz(700, 75, 250, 1980) == pytest.approx(1000 * (625 / 250) ** (1 / 3))


def test_sustained_clock_falls_with_heavier_work_and_power_meets_the_limit():
    light, heavy = sustained_clock_mhz(700, 75, 200, 1980), sustained_clock_mhz(700, 75, 320, 1980)
    assert heavy < light
    assert power_w(heavy, 75, 320) == pytest.approx(700)


def test_time_ratio_monotone():
    assert time_ratio(1.0, 0.4) == 1.0
    rs = [time_ratio(f, 0.35) for f in (1.0, 0.9, 0.8, 0.7, 0.6)]
    assert all(a < b for a, b in zip(rs, rs[1:]))
    assert time_ratio(0.5, 1.0) == pytest.approx(2.0)


def test_power_model_fit_reproduces_the_measured_ratios():
    d = json.loads((ROOT / "validation/measurements/h100_sustained.json").read_text())
    fit = fit_power_model(d["records"], d["info"])
    assert 0 < fit["gemm_clock_bound_fraction"] <= 1
    assert fit["sustained_clock_fraction"]["fp8"] < fit["sustained_clock_fraction"]["bf16"] < 1
    for s in fit["shapes"]:
        assert s["model_ratio"] == pytest.approx(s["measured_ratio"], rel=0.02)


def test_sustained_device_is_slower_only_for_heavy_work(h100):
    from dataclasses import replace
    hot = replace(h100, sustained=True)
    assert gemm_time(hot, 8192, 8192, 8192) > 1.1 * gemm_time(h100, 8192, 8192, 8192)
    assert hot.clock_rate("bf16") < 1 and h100.clock_rate("bf16") == 1
