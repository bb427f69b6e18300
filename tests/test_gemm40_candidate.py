"""Candidate gemm40 (issue #12 session 24): the fallback (unaligned) GEMM kernels' serial C store
(``gemm_unaligned_store_serial``, simulator.compute.unaligned_store_s) and small-tile load factor
(``gemm_unaligned_reuse_exponent``, simulator.compute.unaligned_load_s). Both 0 by default and in the
committed profiles, which predict exactly as before; the candidate profiles
validation/candidates/h{200,100}-sxm-gemm40.yaml carry the values validation/gemm40_fit.py fits on the
development GEMM records through seed 39."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from tests.kernel_profiles import with_later_fits_of
import yaml

from simulator.calibration import Calibration, load_calibration
from simulator.compute import (DeviceModel, gemm_aligned, gemm_plan, gemm_time, unaligned_load_s,
                               unaligned_store_s)
from validation.hardware import hardware_for
from validation.records import load_measurements

ROOT = Path(__file__).resolve().parent.parent
CAND = ROOT / "validation" / "candidates"
NEW = ("gemm_unaligned_store_serial", "gemm_unaligned_reuse_exponent")
ALIGNED = [(8192, 8192, 8192, "bf16"), (208, 376, 43304, "bf16"), (4096, 1536, 4096, "fp8"), (64, 864, 23104, "bf16")]
UNALIGNED = [(11890, 5356, 188, "bf16"), (181, 2771, 352, "bf16"), (1000, 1001, 999, "bf16"), (101, 38, 5098, "bf16"),
             (4095, 4095, 4095, "fp32")]


def _dev(profile: str, **kw) -> DeviceModel:
    mf = load_measurements(ROOT / "validation" / "measurements" / f"{profile[:4]}_kernels.json")
    return DeviceModel(hardware_for(mf).accelerator, replace(load_calibration(profile), **kw))


def test_off_by_default_and_in_the_committed_profiles():
    for p in NEW:
        assert getattr(Calibration(), p) == 0.0
        for profile in ("h200-sxm", "h100-sxm"):
            assert getattr(load_calibration(profile), p) == 0.0
    dev = _dev("h100-sxm")
    assert unaligned_store_s(dev, 1974, 128, 256, "bf16") == 0.0
    # exponent 0: the per-element law unchanged, (tm + tn)·k / (vector · loads/s) for every tile
    assert unaligned_load_s(dev, 64, 64, 384, 1.0) / unaligned_load_s(dev, 128, 256, 384, 1.0) == pytest.approx(128 / 384)


def test_store_term_is_output_bytes_at_hbm_bandwidth():
    dev = _dev("h100-sxm", gemm_unaligned_store_serial=1.0)
    assert unaligned_store_s(dev, 1974, 128, 256, "bf16") == pytest.approx(1974 * 128 * 256 * 2 / dev.hbm_Bps)
    assert unaligned_store_s(dev, 10, 64, 64, "fp32") == pytest.approx(10 * 64 * 64 * 4 / dev.hbm_Bps)
    half = _dev("h100-sxm", gemm_unaligned_store_serial=0.5)
    assert unaligned_store_s(half, 1974, 128, 256, "bf16") == pytest.approx(unaligned_store_s(dev, 1974, 128, 256, "bf16") / 2)


def test_new_terms_leave_aligned_gemms_alone_and_slow_unaligned_ones():
    """Both terms act on the fallback kernels only: an aligned GEMM is predicted bit for bit as before;
    an unaligned one never faster, and slower with more serial store / a larger exponent."""
    for profile in ("h200-sxm", "h100-sxm"):
        off = _dev(profile)
        store = _dev(profile, gemm_unaligned_store_serial=0.5)
        more_store = _dev(profile, gemm_unaligned_store_serial=1.0)
        reuse = _dev(profile, gemm_unaligned_reuse_exponent=0.3)
        for m, n, k, dt in ALIGNED:
            assert gemm_aligned(m, n, k, dt)
            t = gemm_time(off, m, n, k, dt)
            assert gemm_time(store, m, n, k, dt) == t and gemm_time(reuse, m, n, k, dt) == t
        for m, n, k, dt in UNALIGNED:
            assert not gemm_aligned(m, n, k, dt)
            t = gemm_time(off, m, n, k, dt)
            assert gemm_time(store, m, n, k, dt) >= t and gemm_time(reuse, m, n, k, dt) >= t
            assert gemm_time(more_store, m, n, k, dt) >= gemm_time(store, m, n, k, dt)
        # a large-m·n, small-k align2 shape: unsplit, so the store is charged in full
        assert gemm_plan(off, 11890, 5356, 188, "bf16")[3] == 1
        assert gemm_time(more_store, 11890, 5356, 188, "bf16") > 1.3 * gemm_time(off, 11890, 5356, 188, "bf16")


def test_reuse_exponent_slows_small_tiles_only():
    base, on = _dev("h100-sxm"), _dev("h100-sxm", gemm_unaligned_reuse_exponent=0.3)
    # the largest tile (reuse r_max) unchanged; 64x64 (reuse 64 of 170.7) by (170.7 / 64) ** 0.3
    assert unaligned_load_s(on, 128, 256, 512, 2.0) == pytest.approx(unaligned_load_s(base, 128, 256, 512, 2.0))
    assert unaligned_load_s(on, 64, 64, 512, 2.0) == pytest.approx(unaligned_load_s(base, 64, 64, 512, 2.0)
                                                                   * (2 * 128 * 256 / 384 / 64) ** 0.3)


@pytest.mark.parametrize("gpu", ["h200", "h100"])
def test_candidate_profile_holds_its_fit(gpu):
    """The candidate profile is the committed one plus the fitted parameters: every other value the
    committed profile's, the new ones on, and its recorded pooled MAPE what it predicts on the fit
    records (validation/gemm40_fit.py)."""
    from validation.gemm36_fit import dev_records, pooled_mape
    from validation.gemm40_fit import DEV, PARAMETERS
    path = CAND / f"{gpu}-sxm-gemm40.yaml"
    assert path.read_text().startswith("candidate: 'gemm40")
    cand, committed = load_calibration(str(path)), load_calibration(str(path.parent / f"{gpu}-sxm-pre39.yaml"))  # before session 39
    for p in NEW:
        assert getattr(cand, p) > 0
    same = replace(with_later_fits_of(cand, committed), **{p: getattr(committed, p) for p in PARAMETERS}).to_dict()
    assert {**same, "name": committed.name} == committed.to_dict()
    block = next(v for k, v in yaml.safe_load(path.read_text())["fits"].items() if k.startswith("gemm40"))
    rows = dev_records(f"{gpu}-sxm", DEV[f"{gpu}-sxm"])
    assert pooled_mape(rows, cand) == pytest.approx(block["pooled_mape"], abs=5e-5)
    assert pooled_mape(rows, committed) == pytest.approx(block["pooled_mape_committed"], abs=5e-5)
    assert block["pooled_mape"] < block["pooled_mape_committed"]
