"""The exposed share of a GEMM's smaller cost (issue #12 session 34, candidate gemm62).

simulator.compute.gemm_with_roofline_s: max(compute, memory) + gemm_overlap_exposed x min(compute, memory) + fixed.
Off (0: the roofline max) in the committed profiles; validation/gemm62_fit.py fits it per GPU with the dense peak
fractions, tile overhead, small-tile exponent and call fixed cost on every development GEMM record; the candidate
profiles are validation/candidates/h{200,100}-sxm-gemm62.yaml, registered on fresh draws before any adoption."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from hardware_specs.catalog import load_accelerator
from hardware_specs.errors import SpecError
from simulator.calibration import load_calibration
from simulator.compute import DeviceModel, gemm_bytes, gemm_fixed_s, gemm_floor_Bps, gemm_plan, gemm_time

CANDIDATES = Path(__file__).resolve().parent.parent / "validation" / "candidates"


def _dev(profile: str, **params) -> DeviceModel:
    return DeviceModel(load_accelerator(profile), replace(load_calibration(profile), **params))


def _parts(dev: DeviceModel, m: int, n: int, k: int) -> tuple[float, float]:
    nbytes = gemm_bytes(m, n, k, "bf16")
    return gemm_plan(dev, m, n, k, "bf16")[0], nbytes / gemm_floor_Bps(dev, nbytes)


@pytest.mark.parametrize("profile", ["h200-sxm", "h100-sxm"])
def test_committed_profiles_keep_the_roofline_max(profile):
    dev = _dev(profile)
    assert dev.cal.gemm_overlap_exposed == 0
    compute, memory = _parts(dev, 4096, 4096, 4096)
    assert gemm_time(dev, 4096, 4096, 4096) == pytest.approx(max(compute, memory) + gemm_fixed_s(dev.cal, 4096, 4096, 4096, "bf16"))


@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (16384, 64, 4096), (3552, 424, 13384)])
def test_the_exposed_share_adds_gamma_times_the_smaller_cost(shape):
    """Compute-bound, memory-bound and balanced shapes alike: the time rises by exactly γ x min(compute, memory)."""
    base, on = _dev("h100-sxm"), _dev("h100-sxm", gemm_overlap_exposed=0.2)
    compute, memory = _parts(base, *shape)
    assert gemm_time(on, *shape) - gemm_time(base, *shape) == pytest.approx(0.2 * min(compute, memory), rel=1e-9)
    assert gemm_time(on, *shape) > gemm_time(base, *shape)


@pytest.mark.parametrize("value", [1.5, -0.2])
def test_an_exposed_share_outside_0_1_is_rejected_naming_the_field(tmp_path, value):
    text = (CANDIDATES / "h100-sxm-gemm62.yaml").read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("  gemm_overlap_exposed: ", f"  gemm_overlap_exposed: {value}  # was ", 1))
    with pytest.raises(SpecError, match="gemm_overlap_exposed"):
        load_calibration(str(bad))


@pytest.mark.parametrize("profile", ["h200-sxm", "h100-sxm"])
def test_candidate_is_the_committed_profile_with_the_six_fitted_values(profile):
    """The candidate changes the fit's six parameters (two of them entries of the peak-fraction table) and nothing
    else, each inside the fit's bounds, and the exposed share is on."""
    from validation.gemm36_fit import value_of, with_values
    from validation.gemm62_fit import BOUNDS
    cand, committed = load_calibration(str(CANDIDATES / f"{profile}-gemm62.yaml")), load_calibration(profile)
    for p, (lo, hi) in BOUNDS.items():
        assert lo <= value_of(cand, p) <= hi
    assert cand.gemm_overlap_exposed > 0.05
    assert replace(with_values(cand, {p: value_of(committed, p) for p in BOUNDS}), name=committed.name) == committed


def test_with_values_sets_one_entry_of_a_table_and_leaves_the_rest():
    from validation.gemm36_fit import value_of, with_values
    cal = load_calibration("h100-sxm")
    new = with_values(cal, {"gemm_peak_fraction.fp8": 0.5, "gemm_launch_s": 1e-6})
    assert value_of(new, "gemm_peak_fraction.fp8") == 0.5 and new.gemm_launch_s == 1e-6
    assert {k: v for k, v in new.gemm_peak_fraction.items() if k != "fp8"} == \
        {k: v for k, v in cal.gemm_peak_fraction.items() if k != "fp8"}
    assert cal.gemm_peak_fraction["fp8"] != 0.5       # the original is not touched
