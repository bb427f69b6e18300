"""Candidate bmm78 (issue #12 session 37, validation/bmm78_fit.py): unfused attention's batched GEMMs floored by
their own streaming law (``score_gemm_floor_fraction``, ``score_gemm_floor_exponent``), absent from the committed
profiles; m76bmm is membound76 with the same law."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from simulator.calibration import load_calibration
from simulator.compute import SCORE_GEMM_FULL_BYTES, gemm_time, score_gemm_floor_Bps, score_gemm_time
from tests.kernel_profiles import committed_before_39, candidate, kernel_device

ROOT = Path(__file__).resolve().parent.parent
GPUS = ("h200", "h100")
SHAPES = ((2048, 2048, 128, 64), (4096, 128, 4096, 32), (512, 512, 64, 8), (8192, 8192, 128, 4))


@pytest.mark.parametrize("gpu", GPUS)
def test_committed_profiles_cost_score_gemms_as_any_gemm(gpu):
    cal = committed_before_39(gpu)
    assert cal.score_gemm_floor_fraction == 0.0
    dev = kernel_device(gpu, cal)
    assert all(score_gemm_time(dev, *s[:3], "bf16", s[3]) == gemm_time(dev, *s[:3], "bf16", s[3]) for s in SHAPES)


@pytest.mark.parametrize("gpu", GPUS)
def test_the_law_moves_score_gemms_only(gpu):
    """Under the candidate every other GEMM costs what it did; the long-sequence score GEMMs get faster (their
    floor rises above hbm_fraction from a few hundred MB on)."""
    base, cand = kernel_device(gpu, committed_before_39(gpu)), kernel_device(gpu, candidate(gpu, "bmm78"))
    for s in SHAPES:
        assert gemm_time(cand, *s[:3], "bf16", s[3]) == gemm_time(base, *s[:3], "bf16", s[3])
    assert score_gemm_time(cand, 2096, 128, 2096, "bf16", 117) < 0.9 * score_gemm_time(base, 2096, 128, 2096, "bf16", 117)


def test_floor_law_is_flat_from_a_gigabyte_and_a_power_below():
    cal = replace(load_calibration("h200-sxm"), score_gemm_floor_fraction=0.8, score_gemm_floor_exponent=0.1)
    dev = kernel_device("h200", cal)
    peak = dev.accelerator.hbm_bandwidth_Bps
    assert score_gemm_floor_Bps(dev, 2 * SCORE_GEMM_FULL_BYTES) == pytest.approx(0.8 * peak)
    assert score_gemm_floor_Bps(dev, SCORE_GEMM_FULL_BYTES / 1024) == pytest.approx(0.8 * peak * 1024 ** -0.1)


@pytest.mark.parametrize("gpu", GPUS)
def test_candidate_files_reproduce_their_fit_on_the_first_draws_only(gpu):
    """Fitted on bmm_random78 (H200) / 79 (H100) alone: fit data H200 9.08 -> 6.88%, H100 10.94 -> 5.70%; the law
    comes out alike on both GPUs (0.81 / 0.80 of the datasheet from 1 GB, exponent 0.084 / 0.083). m76bmm is
    membound76 with the same two values."""
    import yaml
    from validation import bmm78_fit as b
    law, pairs, committed, fitted = b.run(gpu)
    for name, base in (("bmm78", committed), ("m76bmm", candidate(gpu, "membound76"))):
        doc = yaml.safe_load((ROOT / "validation" / "candidates" / f"{gpu}-sxm-{name}.yaml").read_text())
        assert doc["candidate"].startswith(name) and f"seed {b.DRAW[gpu] + 2}" in doc["candidate"]
        cand = candidate(gpu, name)
        assert (cand.score_gemm_floor_fraction, cand.score_gemm_floor_exponent) == pytest.approx(law, abs=1e-5)
        assert replace(cand, score_gemm_floor_fraction=0.0, score_gemm_floor_exponent=0.0, name=base.name) == base
        assert not any("bmm_random8" in f for f in doc["fitted_on"])
    before, after = {"h200": (0.0908, 0.0688), "h100": (0.1094, 0.0570)}[gpu]
    assert b.mape(pairs, committed) == pytest.approx(before, abs=5e-4)
    assert b.mape(pairs, fitted) == pytest.approx(after, abs=5e-4)
    assert 0.79 <= law[0] <= 0.82 and 0.08 <= law[1] <= 0.09


def test_in_step_batched_gemms_never_fitted():
    """The batched GEMMs of five profiled H200 steps (validation.gemm_instep; a separate run, never fitted by the
    law): 22.5% (+21.1% summed) by the committed floor of its time, 10.1% (+8.2% summed) under bmm78. The linear
    layers move through the step's clock alone (the step power model weighs the step's work by class): 7.1 -> 6.4%.
    Under today's profile (session 39 adopted the law with the rest of m78copy, whose layout copies and softmax
    move the step's clock again): batched 10.5%, linear 7.1%."""
    from validation.gemm_instep import rows, summary
    before = replace(committed_before_39("h200"), name="h200-sxm")     # the own profile's name: the step power model
    committed, cand = summary(rows(cal=before)), summary(rows(cal=candidate("h200", "bmm78")))
    assert committed["batched"]["mape"] == pytest.approx(0.225, abs=5e-4)
    assert cand["batched"]["mape"] == pytest.approx(0.1008, abs=5e-4)
    assert cand["linear"]["count"] == 60 and cand["linear"]["mape"] == pytest.approx(0.0640, abs=5e-4)
    today = summary(rows())
    assert today["batched"]["mape"] <= 0.1050 and today["linear"]["mape"] <= 0.0711


# registered in 6d48275 before either draw was measured (prereg_bmm_random{80,81}_*_bmm78.txt)
BMM78_REGISTERED = {("h200", 80): (0.1167, 0.0771, {"dk": 0.0261, "dp": 0.1700, "dq": 0.0401, "dv": 0.0606,
                                                    "pv": 0.0321, "qk_baddbmm": 0.1334}),
                    ("h100", 81): (0.1070, 0.0831, {"dk": 0.0419, "dp": 0.1902, "dq": 0.0211, "dv": 0.0572,
                                                    "pv": 0.0268, "qk_baddbmm": 0.1616})}


def _registered_errors(gpu: str, seed: int, registration: str) -> dict:
    from validation.gemm_regimes import registered_bmm_pairs
    pairs = registered_bmm_pairs(ROOT / "validation" / "measurements" / "logs" /
                                 f"prereg_bmm_random{seed}_{gpu}{registration}.txt",
                                 ROOT / "validation" / "measurements" / "repeat" / f"{gpu}_bmm_random{seed}.json")
    assert len(pairs) == 48
    errs: dict = {}
    for r, p in pairs:
        errs.setdefault(r["gemm"], []).append(p / r["time_s"] - 1)
    return errs


@pytest.mark.parametrize("gpu,seed", sorted(BMM78_REGISTERED))
def test_bmm78_on_the_draws_registered_before_measurement(gpu, seed):
    """The second draws (never fitted): bmm78 H200 11.67 -> 7.71%, H100 10.70 -> 8.31%, as registered. The reading
    GEMMs (PV, dQ, dK, dV: an s x d output) come within 2-6%; the writing ones (QK^T and dP, an s x s output from
    k = head dim) stay at 13-19%, predicted too fast where cuBLAS picks its slow transposed-tile kernels (the first
    draws' observation), now the draws' largest errors."""
    committed, fitted, per_gemm = BMM78_REGISTERED[(gpu, seed)]
    base, errs = _registered_errors(gpu, seed, ""), _registered_errors(gpu, seed, "_bmm78")
    assert sum(abs(e) for v in base.values() for e in v) / 48 == pytest.approx(committed, abs=5e-4)
    assert sum(abs(e) for v in errs.values() for e in v) / 48 == pytest.approx(fitted, abs=5e-4)
    assert {k: sum(map(abs, v)) / len(v) for k, v in errs.items()} == pytest.approx(per_gemm, abs=5e-4)
    worst = sorted((e for k in ("dp", "qk_baddbmm") for e in errs[k]))[:3]
    assert all(e < -0.28 for e in worst)


@pytest.mark.xfail(strict=True, reason="issue #12: GEMMs <= 7% on a fresh run; bmm78 as registered 7.71% (H200 "
                                       "seed 80), 8.31% (H100 seed 81)")
@pytest.mark.parametrize("gpu,seed", sorted(BMM78_REGISTERED))
def test_bmm78_within_the_gemm_target(gpu, seed):
    errs = _registered_errors(gpu, seed, "_bmm78")
    assert sum(abs(e) for v in errs.values() for e in v) / 48 <= 0.07
