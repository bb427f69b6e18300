"""Candidate math42 (issue #12 session 42): PyTorch's SDPA math backend costed kernel by kernel
(simulator.compute.math_attention_parts) with its fp32 GEMMs on the CUDA cores (ffma_gemm_time), registered beside
the committed model on attention draws 47 (H200) and 48 (H100) before they ran, and adopted on them.
Figures: docs/validation.md "Session 42"."""
from __future__ import annotations

from pathlib import Path

import pytest

from simulator.calibration import load_calibration
from validation import math42_fit as F
from validation.prereg_attention import score

ROOT = Path(__file__).resolve().parent.parent
MEAS = ROOT / "validation" / "measurements"
DRAWS = {"h200": 47, "h100": 48}
# math MAPE per direction as registered: (committed model of 87ad3fa, candidate math42)
AS_REGISTERED = {"h200": {"attention_fwd": (0.069, 0.020), "attention_fwd_bwd": (0.044, 0.021)},
                 "h100": {"attention_fwd": (0.073, 0.022), "attention_fwd_bwd": (0.062, 0.016)}}


def _score(gpu: str, suffix: str = "") -> dict:
    seed = DRAWS[gpu]
    prereg = MEAS / "logs" / f"prereg_attention{seed}_{gpu}{suffix}.txt"
    assert "model commit: 87ad3fa" in prereg.read_text()
    return score(str(prereg), str(MEAS / "repeat" / f"{gpu}_attention_fresh{seed}.json"))


@pytest.mark.parametrize("gpu", DRAWS)
def test_registered_draws_math42_beats_the_committed_model(gpu):
    """Draws 47 / 48, registered (238a52b) before they ran: math forward 6.9% -> 2.0% (H200), 7.3% -> 2.2% (H100);
    forward+backward 4.4% -> 2.1%, 6.2% -> 1.6%. No other backend moves. Ratchets as registered."""
    before, after = _score(gpu)["table"], _score(gpu, "_math42")["table"]
    for kind, (b, a) in AS_REGISTERED[gpu].items():
        assert before[("math", kind)]["mape"] <= b + 0.0005
        assert after[("math", kind)]["mape"] <= a + 0.0005 < before[("math", kind)]["mape"]
        assert before[("math", kind)]["count"] == after[("math", kind)]["count"] == 28
    for key, v in before.items():
        if key[0] != "math":
            assert after[key]["mape"] == pytest.approx(v["mape"])


@pytest.mark.parametrize("gpu", DRAWS)
def test_registered_draws_every_backend_and_direction_within_8_percent_under_math42(gpu):
    """Under math42 (the committed model since session 42) every backend and direction of draws 47 / 48 is within the
    issue's 8%; before it, everything but math's forward on the H100 draw was (7.3%, within; the H200's 6.9%)."""
    t = _score(gpu, "_math42")["table"]
    assert len(t) == 15 and max(v["mape"] for v in t.values()) <= 0.08


@pytest.mark.parametrize("gpu", ("h100", "h200"))
def test_adopted_profile_is_the_candidate(gpu):
    """The committed profile carries math42's ffma_gemm (the H200's transferred from the H100, and listed so)."""
    cand = load_calibration(str(ROOT / "validation" / "candidates" / f"{gpu}-sxm-math42.yaml"))
    assert load_calibration(f"{gpu}-sxm").ffma_gemm == cand.ffma_gemm
    from simulator.calibration import profile_transferred_parameters
    assert ("ffma_gemm" in profile_transferred_parameters(f"{gpu}-sxm")) == (gpu == "h200")


def test_fit_reproduces_the_profile():
    """validation.math42_fit on the committed H100 profile run gives the committed constants (GEMM kernels 2.66%)."""
    pairs = F.math_records(F.PROFILE_RUN, profiled=True)
    assert len(pairs) == 82
    cal = load_calibration("h100-sxm")
    fitted = F.fit_ffma(pairs, cal)
    assert fitted == pytest.approx(cal.ffma_gemm, rel=2e-3)
    errs = F.gemm_log_errors(pairs, cal)
    assert float(sum(abs(2.718281828 ** e - 1) for e in errs) / len(errs)) <= 0.0266 + 0.0005


# summed modelled / measured seconds per kernel family over the 82 profiled H100 records (development data)
FAMILY_SUMS = {"gemm": -0.008, "safe_softmax": -0.033, "softmax_fwd": 0.010, "mask": -0.114, "cast_to_bf16": 0.046,
               "softmax_bwd": -0.017, "softmax_bwd_mul": 0.030, "layout_copy": -0.100, "cast_to_fp32": -0.014,
               "scale": 0.036}


def test_every_profiled_kernel_family_is_costed():
    """Each kernel family the profile shows is one math_attention_parts costs, summed within its quoted error (the
    memory-bound families at rates fitted elsewhere, no fit to math records); unclassified kernels are < 0.2% of
    the time."""
    cal = load_calibration("h100-sxm")
    measured, modelled = {}, {}
    for r, hw in F.math_records(F.PROFILE_RUN, profiled=True):
        for k, v in F.measured_families(r).items():
            measured[k] = measured.get(k, 0.0) + v
        for k, v in F.modelled_families(r, hw, cal).items():
            modelled[k] = modelled.get(k, 0.0) + v
    assert measured.get("small", 0.0) < 0.002 * sum(measured.values())
    for fam, quoted in FAMILY_SUMS.items():
        err = modelled[fam] / measured[fam] - 1
        assert abs(err) <= abs(quoted) + 0.005, (fam, err)


def test_development_figures_on_the_committed_draws():
    """Every fresh draw committed before math42 was registered, looked at while building it (development data, not a
    test of it): math forward H200 1.97%, H100 2.37%; forward+backward 2.03%, 1.78% (the model before it, printed by
    validation.math42_fit at 87ad3fa: forward 8.42% / 6.71%, forward+backward 3.81% / 5.98%)."""
    quoted = {"h200": (0.0197, 0.0203, 720), "h100": (0.0237, 0.0178, 592)}
    for gpu, (fwd, fwd_bwd, n) in quoted.items():
        cal = load_calibration(f"{gpu}-sxm")
        pairs = F.fresh_draws(gpu)
        assert len(pairs) == n
        assert F.mape(pairs, cal, "attention_fwd") <= fwd + 0.0005
        assert F.mape(pairs, cal, "attention_fwd_bwd") <= fwd_bwd + 0.0005


def test_ffma_gemm_time_is_waves_of_tiles_over_k_plus_the_tile_overhead():
    """ffma_gemm_time: for a GEMM of many full waves the time is proportional to (k + overhead_k) and to the batch;
    a profile with only some of the three constants takes ``gemm_peak_fraction["fp32"]`` for the fraction; an empty
    ``ffma_gemm`` costs it as a tensor-core fp32 GEMM (gemm_time)."""
    import dataclasses

    from hardware_specs.catalog import load_accelerator
    from simulator.compute import ffma_gemm_time, gemm_time
    from simulator.engine import device_model
    acc, cal = load_accelerator("h100-sxm"), load_calibration("h100-sxm")
    dev = device_model(acc, cal)
    o, launch = cal.ffma_gemm["overhead_k"], cal.gemm_launch_s
    t64, t512 = (ffma_gemm_time(dev, 4096, 4096, k, 64) - launch for k in (64, 512))
    assert t512 / t64 == pytest.approx((512 + o) / (64 + o), rel=1e-9)
    assert ffma_gemm_time(dev, 4096, 4096, 64, 128) - launch == pytest.approx(2 * t64, rel=2e-3)   # whole waves
    partial = device_model(acc, dataclasses.replace(cal, ffma_gemm={"overhead_k": o}))
    assert ffma_gemm_time(partial, 4096, 4096, 64, 64) > 0
    empty = device_model(acc, dataclasses.replace(cal, ffma_gemm={}))
    assert ffma_gemm_time(empty, 4096, 4096, 64, 64) == gemm_time(empty, 4096, 4096, 64, "fp32", 64)
