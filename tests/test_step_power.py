"""The training-step power model (simulator/power.py, issue #12 item 1): a step's clock is set by
its average power over its mix of work, checked against the H200 sustained runs and the NVML
clocks recorded with single-GPU training steps (validation/measurements/h200_sustained.json,
h200_plan_clocks1.json, session 10)."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from simulator.calibration import calibration_for
from simulator.engine import simulate
from simulator.power import average_power_w, class_power_w, fit_step_power, step_clock_fraction, time_ratio
from validation.hardware import hardware_for
from validation.predict import plan_model, record_plan
from validation.records import load_measurements

ROOT = Path(__file__).resolve().parent.parent
SUSTAINED = ROOT / "validation/measurements/h200_sustained.json"
CLOCKS1 = ROOT / "validation/measurements/h200_plan_clocks1.json"


def _fit_file(path: Path) -> dict:
    d = json.loads(path.read_text())
    return fit_step_power(d["records"], d["info"])


def _profile_of(path: Path, fitted: dict):
    """The calibration of the GPU that ``path`` ran on, after checking it carries ``fitted``'s step_power."""
    cal = calibration_for(hardware_for(load_measurements(path)).accelerator)[0]
    for k, v in fitted["step_power"].items():
        assert cal.step_power[k] == pytest.approx(v, rel=1e-3, abs=1e-9), k
    return cal


@pytest.fixture(scope="module")
def fit():
    return _fit_file(SUSTAINED)


def test_the_profile_carries_the_fit(fit):
    """The H200 profile's step_power and φ are fit_step_power's on the committed file."""
    cal = _profile_of(SUSTAINED, fit)
    assert cal.gemm_clock_bound_fraction == pytest.approx(fit["gemm_clock_bound_fraction"], abs=1e-3)


def _mix(fit, adds):
    p = fit["points"]
    g, add = p["gemm 8192 8192 8192 bfloat16"], p["add"]
    return {"tensor": (g["burst_s"], g["burst_s"]), "memory": (adds * add["burst_s"],) * 2}, p[f"mix {adds} 0.0"]


def test_held_out_mix_clock_and_time(fit):
    """The GEMM + 6 adds mix was left out of the fit: its power-limited clock is predicted within
    0.03 of the measured (0.845 vs 0.869) and its time per iteration within 2.5% (+1.9%)."""
    sp, phi = fit["step_power"], fit["gemm_clock_bound_fraction"]
    mix, meas = _mix(fit, 6)
    x = step_clock_fraction(sp, mix, phi)
    t = mix["tensor"][0] * time_ratio(x, phi) + mix["memory"][0]
    assert abs(x - meas["x"]) <= 0.03
    assert abs(t / meas["sustained_s"] - 1) <= 0.025


def test_back_to_back_gemms_reproduce_their_sustained_clock(fit):
    """Pure bf16 / fp8 GEMM mixes meet the limit at the clocks measured under sustained load."""
    sp, phi, p = fit["step_power"], fit["gemm_clock_bound_fraction"], fit["points"]
    for key, cls in (("gemm 8192 8192 8192 bfloat16", "tensor"), ("gemm 8192 8192 8192 float8_e4m3fn", "tensor_fp8")):
        x = step_clock_fraction(sp, {cls: (1.0, 1.0)}, phi)
        assert x == pytest.approx(p[key]["x"], abs=0.01)


def test_gaps_and_memory_bound_work_keep_full_clock(fit):
    """Measured: the GEMM with 1.5 ms idle gaps ran at 1980 MHz averaging 491 W, and the add
    (streaming HBM at 4.4 TB/s) at 1980 MHz and 672 W: neither reaches the limit."""
    sp, phi, p = fit["step_power"], fit["gemm_clock_bound_fraction"], fit["points"]
    g, gap = p["gemm 8192 8192 8192 bfloat16"], p["mix 0 0.0015"]
    mix = {"tensor": (g["burst_s"], g["burst_s"]), "idle": (gap["sustained_s"] - g["burst_s"], 0.0)}
    assert step_clock_fraction(sp, mix, phi) == 1.0
    assert average_power_w(sp, mix, 1.0, phi) == pytest.approx(gap["power_w"], rel=0.01)   # the fit's own point
    assert step_clock_fraction(sp, {"memory": (1.0, 1.0)}, phi) == 1.0
    assert class_power_w(sp, "memory", 1.0) < sp["limit"] < class_power_w(sp, "tensor", 1.0)


def test_lower_activity_draws_less_power(fit):
    sp, phi = fit["step_power"], fit["gemm_clock_bound_fraction"]
    full = average_power_w(sp, {"tensor": (1.0, 1.0)}, 1.0, phi)
    half = average_power_w(sp, {"tensor": (1.0, 0.5)}, 1.0, phi)
    assert half == pytest.approx(sp["idle"] + 0.5 * (full - sp["idle"]))
    assert time_ratio(0.9, phi) > 1.0


def _clock_predictions(path: Path = CLOCKS1):
    mf = load_measurements(path)
    hw0 = hardware_for(mf)
    cal = calibration_for(hw0.accelerator)[0]
    out = []
    for rec in mf.records:
        if rec.get("kind") != "plan_step" or rec.get("sm_clock_mhz") is None:
            continue
        r = simulate(plan_model(rec), replace(hw0, num_gpus=rec["world"]), record_plan(rec), cal)
        out.append((rec, r))
    return out


GEMMTRACE = ROOT / "validation/measurements/profiles/h200_plan_gemmtrace.json"


def test_training_step_clocks_as_measured():
    """Ten single-GPU steps of two runs (h200_plan_clocks1.json, and the later GEMM-trace run:
    Megatron-Core local and torch-native, GPU-bound to host-bound) ran at 0.935-1.0 of f_max by NVML;
    the model predicts each within 0.047 (mean 0.018), and never a power-limited clock where the
    step ran at full clock. The worst is clocks1's llama-4b (0.935 measured, 0.981 predicted since
    session 14 costs Megatron's eager SwiGLU and RoPE at the non-vectorized element rate: longer
    kernels moving the same bytes, so less HBM activity); the same step ran at 0.966 in the later
    run (0.981 predicted): the clock of one step differs by 0.03 between machines."""
    errs = []
    for rec, r in _clock_predictions() + _clock_predictions(GEMMTRACE):
        measured = rec["sm_clock_mhz"] / 1980.0
        errs.append(abs(r.clock_fraction - measured))
        assert r.full_clock_step_time_s <= r.step_time_s
        if measured == 1.0:
            assert r.clock_fraction == 1.0
    assert len(errs) == 10 and max(errs) <= 0.047 and sum(errs) / len(errs) <= 0.02


def test_step_clock_reported_and_burst_step_kept():
    """A GPU-bound H200 step is reported with its power-limited clock and its full-clock time."""
    rec, r = _clock_predictions()[0]
    assert r.clock_fraction < 1.0 and r.step_time_s > r.full_clock_step_time_s
    d = r.to_dict()
    assert d["clock_fraction"] == r.clock_fraction and d["full_clock_step_time_s"] == r.full_clock_step_time_s


def test_an_incomplete_step_power_names_the_missing_key():
    from hardware_specs.errors import SpecError
    from simulator.calibration import calibration_from_dict
    with pytest.raises(SpecError) as e:
        calibration_from_dict({"parameters": {"step_power": {"limit": 700.0, "static": 80.0}}}, origin="my.yaml")
    assert "parameters.step_power.idle" in str(e.value)
    with pytest.raises(SpecError) as e:
        d = json.loads(SUSTAINED.read_text())
        sp = dict(fit_step_power(d["records"], d["info"])["step_power"], watts=1.0)
        calibration_from_dict({"parameters": {"step_power": sp}}, origin="my.yaml")
    assert "step_power.watts" in str(e.value)
    assert calibration_from_dict({"parameters": {"step_power": {}}}).step_power == {}


# ---- H100 (session 11): h100_sustained_power.json, then the pre-registered h100a plan steps ----------
H100_SUSTAINED = ROOT / "validation/measurements/h100_sustained_power.json"
H100_PLANS = ROOT / "validation/measurements/h100_plan_h100a.json"


@pytest.fixture(scope="module")
def fit_h100():
    return _fit_file(H100_SUSTAINED)


def test_the_h100_profile_carries_its_fit(fit_h100):
    """The H100 profile's step_power is fit_step_power's on its own sustained run; its φ stays the
    one fitted on the longer 40 s windows of h100_sustained.json (this run's 22 s windows: 0.386)."""
    cal = _profile_of(H100_SUSTAINED, fit_h100)
    assert fit_h100["gemm_clock_bound_fraction"] == pytest.approx(0.386, abs=0.001)
    assert cal.gemm_clock_bound_fraction == pytest.approx(0.3528)


def test_h100_held_out_mix_and_gemm_clocks(fit_h100):
    """H100: the GEMM + 6 adds mix (left out of the fit) ran at full clock and is predicted so;
    back-to-back bf16 / fp8 GEMMs settle where they were measured (0.697, 0.629); the fitted
    GEMM + 2 adds mix is predicted at 1.0 against 0.947 (the memory class's clock term came out
    negative and is clamped at 0)."""
    sp, p = fit_h100["step_power"], fit_h100["points"]
    phi = 0.3528
    mix6, meas6 = _mix(fit_h100, 6)
    assert meas6["x"] == 1.0 and step_clock_fraction(sp, mix6, phi) == 1.0
    mix2, meas2 = _mix(fit_h100, 2)
    assert abs(step_clock_fraction(sp, mix2, phi) - meas2["x"]) <= 0.055
    for key, cls in (("gemm 8192 8192 8192 bfloat16", "tensor"), ("gemm 8192 8192 8192 float8_e4m3fn", "tensor_fp8")):
        assert step_clock_fraction(sp, {cls: (1.0, 1.0)}, phi) == pytest.approx(p[key]["x"], abs=0.01)


def test_h100_plan_step_clocks():
    """The seven h100a steps that ran (measured after the power run, on the same machine; the plan
    predictions were registered before it without step_power) ran at 0.991-1.0 of f_max; with the
    H100 step_power each is predicted within 0.01 (full clock: none draws the limit on average)."""
    mf = load_measurements(H100_PLANS)
    hw0 = hardware_for(mf)
    cal = calibration_for(hw0.accelerator)[0]
    ran = [r for r in mf.records if not r.get("oom") and not r["name"].startswith("host-")]
    assert len(ran) == 7
    for rec in ran:
        r = simulate(plan_model(rec), replace(hw0, num_gpus=rec["world"]), record_plan(rec), cal)
        assert abs(r.clock_fraction - rec["sm_clock_mhz"] / 1980.0) <= 0.01
