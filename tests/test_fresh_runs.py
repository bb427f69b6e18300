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
MEMORY_FRESH = {"add": 0.027, "copy": 0.113, "gelu": 0.062, "layernorm": 0.066, "rmsnorm": 0.042,
                "silu_mul": 0.029, "softmax": 0.080}   # softmax 10.6% before session 15's kernel classes;
# layernorm 9.0%, rmsnorm 12.4% before session 16's norm kernel model (simulator.compute.norm_forward_time)


def test_fresh_memory_bound_pooled_within_8_percent():
    """157 records, 5.6% pooled (7.6% before session 16's norm kernel model; the fit run, 4 in 5 of its
    records fitted: 6.4% then)."""
    errs = _errors(MEMORY, "kind")
    pooled = [e for k in MEMORY_FRESH for e in errs[k]]
    assert len(pooled) == 157 and _mape(pooled) <= 0.0563


@pytest.mark.parametrize("kind", sorted(MEMORY_FRESH))
def test_fresh_memory_bound_ratchet(kind):
    assert _mape(_errors(MEMORY, "kind")[kind]) <= MEMORY_FRESH[kind] + 5e-4


@pytest.mark.xfail(strict=True, reason="fresh run per kind: copy 11.3% (copies of ~5 us, launch-bound, 18-44% slow); "
                                       "every other kind within 8% since session 16's norm model (rmsnorm 12.4 -> 4.2%, "
                                       "layernorm 9.0 -> 6.6%; softmax 8.0%, 10.6% before session 15)")
def test_fresh_memory_bound_each_kind_within_8_percent():
    assert all(_mape(_errors(MEMORY, "kind")[k]) <= TARGET for k in MEMORY_FRESH)


# ---- GEMMs: a new random draw (seed 25, two passes) and grouped GEMMs (seed 34) ---------------------
GEMM25 = REPEAT / "h200_gemm_random25.json"
GROUPED34 = REPEAT / "h200_grouped_gemm34.json"
# with the model of session 8's narrow-load misaligned GEMMs (developed on seeds 21/22 and the sweeps,
# never on this draw): all 14.8 -> 14.3%, misaligned 31.3 -> 23.5%, but small-MN / large-K 11.0 -> 12.3%
# (that regime is checked first and holds misaligned split-K shapes; loosened, stated here)
# Issue #12 session 17: seed 25 is now DEVELOPMENT data (looked at while choosing gemm_launch_s and the
# H200 refit on seed 24; never fitted): 14.3 -> 10.1%, the GEMM call's launch 7.07 -> 6.23 us
GEMM25_TODAY = {"all": 0.102, "small_mn_large_k": 0.117, "fp8_small": 0.056, "misaligned": 0.213, "large": 0.076,
                "other": 0.053}


def test_fresh_gemm_draw_is_new():
    from validation.gemm_regimes import random_set_pairs
    fitted = {Path(f).name for f in profile_fitted_on("h200-sxm")}
    assert GEMM25.name not in fitted and GROUPED34.name not in fitted
    assert len(random_set_pairs(GEMM25, seed=25)) == 156


@pytest.mark.parametrize("regime", sorted(GEMM25_TODAY))
def test_fresh_gemm_ratchet(regime):
    from validation.gemm_regimes import mape_by_regime, random_set_pairs
    n, mape = mape_by_regime(random_set_pairs(GEMM25, seed=25))[regime][:2]
    assert n >= 9 and mape <= GEMM25_TODAY[regime] + 5e-4


@pytest.mark.xfail(strict=True, reason="H200 seed 25 (development data since session 17): 10.1% (misaligned 21.2%); target 7%")
def test_fresh_gemm_target():
    from validation.gemm_regimes import mape_by_regime, random_set_pairs
    assert mape_by_regime(random_set_pairs(GEMM25, seed=25))["all"][1] <= 0.07


def test_fresh_grouped_gemm_ratchet():
    """150 grouped GEMM calls of a new draw (grouped_mm, bmm, a loop of GEMMs): 13.5% today (14.2% when
    pinned; session 21 pinned today's figure: the GEMM changes it tried took it to 16-17%) (the H200 file
    of session 7, also never fitted: 13.2%)."""
    errs = _errors(GROUPED34, "kind")["grouped_gemm"]
    assert len(errs) == 150 and _mape(errs) <= 0.1355
