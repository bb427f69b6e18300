"""Issue #12 on a fresh run: kernels measured again in a separate, later run on a fresh H200
machine (session 8, 2026-11-23), after every fit the profile holds, and never fitted since:

- attention on a new random draw (``attention_backends.py --fresh-seed 13``: 28 shapes, every
  backend, forward and forward+backward; repeat/h200_attention_fresh13.json);
- memory-bound ops, the same sections as the fit run (``kernels.py --sections copy,elementwise``;
  repeat/h200_memory_fresh.json).

The issue's targets: attention <= 8% per backend, memory-bound ops <= 8%. Met ones are asserted;
unmet ones carry a ratchet at today's figure and a strict xfail. Figures: docs/validation.md,
"A fresh kernel run (session 8)"."""
from __future__ import annotations

from collections import defaultdict
from functools import lru_cache
from pathlib import Path

import pytest

from simulator.calibration import calibration_for, profile_fitted_on
from validation.accuracy import evaluate
from validation.hardware import hardware_for
from validation.records import load_measurements

ROOT = Path(__file__).resolve().parent.parent
REPEAT = ROOT / "validation" / "measurements" / "repeat"
ATTENTION = REPEAT / "h200_attention_fresh13.json"
MEMORY = REPEAT / "h200_memory_fresh.json"
TARGET = 0.08


def test_fresh_files_are_not_fit_data_and_ran_after_it():
    fitted = {Path(f).name for f in profile_fitted_on("h200-sxm")}
    assert ATTENTION.name not in fitted and MEMORY.name not in fitted
    assert load_measurements(ATTENTION).info["random_seed"] == 13       # the fit files' draw is 12
    assert all(load_measurements(p).info["date"] >= "2026-11-23" for p in (ATTENTION, MEMORY))


@lru_cache(maxsize=None)
def _errors(path: Path, key: str) -> dict:
    """{group: [|error|]} over the file's predicted records, grouped by record field ``key``."""
    mf = load_measurements(path)
    hw = hardware_for(mf)
    res, _ = evaluate(mf, hw, calibration_for(hw.accelerator)[0])
    out = defaultdict(list)
    for r in res:
        if r.time_error is not None:
            out[r.record[key]].append(abs(r.time_error))
    return dict(out)


def _mape(errs: list) -> float:
    return sum(errs) / len(errs)


# ---- attention, per backend (forward and forward+backward pooled) ----------------------------------
# unfused_torch 25.5 -> 5.7% in session 12, 5.4% in session 14 (see ATTENTION_TODAY in test_attention_backends.py)
# efficient 9.2 -> 3.4% in session 20 (its per-score shared-memory staging; this run was looked at then: development data)
# flash 6.3 -> 4.0% with session 19's FA2 forward tiles and block schedule (adopted in session 20; the draw was
# looked at while developing it)
ATTENTION_FRESH = {"cudnn": 0.044, "flash": 0.040, "math": 0.066, "efficient": 0.034, "unfused_torch": 0.054}


@pytest.mark.parametrize("backend", sorted(ATTENTION_FRESH))
def test_fresh_attention_ratchet(backend):
    errs = _errors(ATTENTION, "backend")[backend]
    assert len(errs) >= 20 and _mape(errs) <= ATTENTION_FRESH[backend] + 5e-4


@pytest.mark.parametrize("backend", [b for b, v in ATTENTION_FRESH.items() if v <= TARGET])
def test_fresh_attention_target_met(backend):
    assert _mape(_errors(ATTENTION, "backend")[backend]) <= TARGET


# (the strict xfail of memory-efficient, 9.2% on this run, was retired in session 20: every backend meets
# the target on it now, memory-efficient on a run that session looked at)


# ---- memory-bound ops ----------------------------------------------------------------------------
MEMORY_FRESH = {"add": 0.0304, "copy": 0.047, "gelu": 0.029, "layernorm": 0.056, "rmsnorm": 0.0464,
                "silu_mul": 0.0204, "softmax": 0.0589}   # softmax 10.6% before session 15's kernel classes;
# layernorm 9.0%, rmsnorm 12.4% before session 16's norm kernel model (simulator.compute.norm_forward_time);
# session 23 adopted the membound42 profiles (fitted on the kernel suites and membound draws 40 / 41, never on
# this file): copy 11.3 -> 4.7%, gelu 6.2 -> 2.9%, softmax 8.0 -> 5.9%, layernorm 6.6 -> 5.6%, silu_mul 2.9 ->
# 2.0%, but add 2.7 -> 3.0% and rmsnorm 4.2 -> 4.6%


def test_fresh_memory_bound_pooled_within_8_percent():
    """157 records, 4.1% pooled since session 23's membound42 profiles (5.6% before; 7.6% before session 16's
    norm kernel model; the fit run, 4 in 5 of its records fitted: 6.4% then)."""
    errs = _errors(MEMORY, "kind")
    pooled = [e for k in MEMORY_FRESH for e in errs[k]]
    assert len(pooled) == 157 and _mape(pooled) <= 0.0408


@pytest.mark.parametrize("kind", sorted(MEMORY_FRESH))
def test_fresh_memory_bound_ratchet(kind):
    assert _mape(_errors(MEMORY, "kind")[kind]) <= MEMORY_FRESH[kind] + 5e-4


def test_fresh_memory_bound_each_kind_within_8_percent():
    """Met since session 23 (the strict xfail retired): copy was 11.3% (copies of ~5 us, launch-bound,
    18-44% slow under kernel_launch_s), 4.7% with the memory-bound kernels' own fixed cost; the worst
    kind now softmax 5.9%."""
    assert all(_mape(_errors(MEMORY, "kind")[k]) <= TARGET for k in MEMORY_FRESH)


# ---- GEMMs: a new random draw (seed 25, two passes) and grouped GEMMs (seed 34) ---------------------
GEMM25 = REPEAT / "h200_gemm_random25.json"
GROUPED34 = REPEAT / "h200_grouped_gemm34.json"
# with the model of session 8's narrow-load misaligned GEMMs (developed on seeds 21/22 and the sweeps,
# never on this draw): all 14.8 -> 14.3%, misaligned 31.3 -> 23.5%, but small-MN / large-K 11.0 -> 12.3%
# (that regime is checked first and holds misaligned split-K shapes; loosened, stated here)
# Issue #12 session 17: seed 25 is now DEVELOPMENT data (looked at while choosing gemm_launch_s and the
# H200 refit on seed 24; never fitted): 14.3 -> 10.1%, the GEMM call's launch 7.07 -> 6.23 us
# Session 23: seed 25 is FIT data since the gemm32 candidate was adopted (its unaligned rate and fixed costs were
# fitted on seeds 24-30): 10.2 -> 9.3%, misaligned 21.3 -> 17.5%, small-mn large-k 11.7 -> 10.7%
GEMM25_TODAY = {"all": 0.0926, "small_mn_large_k": 0.1073, "fp8_small": 0.0553, "misaligned": 0.175, "large": 0.0756,
                "other": 0.0525}


def test_fresh_gemm_draw_was_new_and_is_fit_data_since_session_23():
    from validation.gemm_regimes import random_set_pairs
    fitted = {Path(f).name for f in profile_fitted_on("h200-sxm")}
    assert GEMM25.name in fitted and GROUPED34.name not in fitted
    assert len(random_set_pairs(GEMM25, seed=25)) == 156


@pytest.mark.parametrize("regime", sorted(GEMM25_TODAY))
def test_fresh_gemm_ratchet(regime):
    from validation.gemm_regimes import mape_by_regime, random_set_pairs
    n, mape = mape_by_regime(random_set_pairs(GEMM25, seed=25))[regime][:2]
    assert n >= 9 and mape <= GEMM25_TODAY[regime] + 5e-4


@pytest.mark.xfail(strict=True, reason="H200 seed 25 (development data since session 17, fit data since session 23): 9.3% (misaligned 17.5%); target 7%")
def test_fresh_gemm_target():
    from validation.gemm_regimes import mape_by_regime, random_set_pairs
    assert mape_by_regime(random_set_pairs(GEMM25, seed=25))["all"][1] <= 0.07


def test_fresh_grouped_gemm_ratchet():
    """150 grouped GEMM calls of a new draw (grouped_mm, bmm, a loop of GEMMs): 13.5% today (14.2% when
    pinned; session 21 pinned today's figure: the GEMM changes it tried took it to 16-17%) (the H200 file
    of session 7, also never fitted: 13.2%)."""
    errs = _errors(GROUPED34, "kind")["grouped_gemm"]
    assert len(errs) == 150 and _mape(errs) <= 0.1355
