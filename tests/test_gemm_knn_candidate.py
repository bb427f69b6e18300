"""Candidate knn53 (validation/gemm_residual_knn.py, issue #12 session 30): the committed GEMM model times
a nearest-neighbour correction learned from the GPU's earlier random draws, registered beside the committed
model before GEMM seeds 54 (H200) and 55 (H100) ran. Also the evidence it rests on: the same 156 H100 shapes
measured twice agree far more closely than the model does. Figures: docs/validation.md, "Session 30". The maths is
simulator/gemm_residual.py's (prior weight 0 for knn53), the correction a profile may switch on."""
from __future__ import annotations

from pathlib import Path

import pytest

from validation.gemm_regimes import mape_by_regime, random_set_pairs, registered_pairs
from validation.gemm_residual_knn import DEV_SEEDS, KNN53, cross_validate, register

MEAS = Path(__file__).resolve().parent.parent / "validation" / "measurements"
LOGS, REPEAT = MEAS / "logs", MEAS / "repeat"
DRAWS = {54: "h200", 55: "h100"}
SKIP_DRAWS = {56: "h200", 57: "h100"}      # candidate knnskip (session 31), below
# as registered (commit d41c0e5, before the draws ran): seed: {regime: MAPE}
COMMITTED = {54: {"all": 0.0744, "large": 0.0988, "misaligned": 0.0831, "other": 0.0822},
             55: {"all": 0.0922, "large": 0.1079, "misaligned": 0.0837, "small_mn_large_k": 0.1118}}
CANDIDATE = {54: {"all": 0.0456, "fp8_small": 0.0170, "large": 0.0677, "misaligned": 0.0633, "other": 0.0334,
                  "small_mn_large_k": 0.0545},
             55: {"all": 0.0583, "fp8_small": 0.0280, "large": 0.1044, "misaligned": 0.0657, "other": 0.0312,
                  "small_mn_large_k": 0.0767}}


def _scores(seed: int, tag: str) -> dict:
    """MAPE per regime of a registration (``tag``: "" the committed model, "_knn" knn53, "_knnskip" knnskip,
    "_knnnear" knnnear)."""
    gpu = {**DRAWS, **SKIP_DRAWS, **NEAR_DRAWS}[seed]
    got = mape_by_regime(registered_pairs(LOGS / f"prereg_gemm_random{seed}_{gpu}{tag}.txt",
                                          REPEAT / f"{gpu}_gemm_random{seed}.json"))
    return {k: v[1] for k, v in got.items()}


@pytest.mark.parametrize("seed", sorted(DRAWS))
def test_registered_draws_as_measured(seed):
    """Both registrations scored on the draw they predicted: the committed model and the candidate."""
    committed, candidate = _scores(seed, ""), _scores(seed, "_knn")
    for regime, mape in COMMITTED[seed].items():
        assert committed[regime] == pytest.approx(mape, abs=1e-4), regime
    for regime, mape in CANDIDATE[seed].items():
        assert candidate[regime] == pytest.approx(mape, abs=1e-4), regime


@pytest.mark.parametrize("seed", sorted(DRAWS))
def test_candidate_meets_the_gemm_target_where_the_model_does_not(seed):
    """Issue #12's 7% on a fresh draw: the candidate 4.56% (H200) and 5.83% (H100, the first H100 draw within
    7%), the committed model 7.44% / 9.22% on the same shapes; the candidate is better pooled and in every
    regime but H100's large shapes (10.4% against 10.8%)."""
    committed, candidate = _scores(seed, ""), _scores(seed, "_knn")
    assert candidate["all"] <= 0.07 < committed["all"]
    assert all(candidate[r] <= committed[r] for r in committed)


@pytest.mark.parametrize("seed", sorted(DRAWS))
def test_the_candidate_log_is_what_the_module_writes(seed, tmp_path):
    """The registered candidate rows are the module's correction of the committed rows (its development
    draws end at seed 53: the scored draws were never read)."""
    gpu = DRAWS[seed]
    assert max(DEV_SEEDS[gpu]) < seed
    out = tmp_path / "knn.txt"
    register(LOGS / f"prereg_gemm_random{seed}_{gpu}.txt", out, gpu, [])
    rows = lambda p: [line for line in p.read_text().splitlines() if line and not line.startswith("#")]  # noqa: E731
    assert rows(out) == rows(LOGS / f"prereg_gemm_random{seed}_{gpu}_knn.txt")


@pytest.mark.parametrize("gpu,committed,corrected", [("h100", 0.0875, 0.0641), ("h200", 0.0779, 0.0550)])
def test_leave_one_draw_out(gpu, committed, corrected):
    """Each development draw predicted with a table of the others: H100 (14 draws) 8.75% -> 6.41%, H200
    (15 draws) 7.79% -> 5.50% pooled; ratchets at those figures. knn53 as registered, without the prior of the
    form behind the profile switch (tests/test_gemm_residual.py pins that one's figures)."""
    res = cross_validate(gpu, **KNN53)
    mean = lambda i: sum(v[i] for v in res.values()) / len(res)  # noqa: E731
    assert mean(0) == pytest.approx(committed, abs=5e-4)
    assert mean(1) <= corrected + 5e-4


def test_the_same_shapes_measured_twice_agree_to_two_percent():
    """H100 seed 53's 156 shapes timed again on a later machine start (same harness and software): the first
    run 'predicts' the second to 1.82% MAPE (median 1.0%), with the same cuBLAS kernel on every shape, while
    the committed model misses both runs by 9.1-9.2%: its GEMM error is not measurement noise."""
    first = {(r["m"], r["n"], r["k"], r["dtype"]): r for r, _ in random_set_pairs(REPEAT / "h100_gemm_random53.json")}
    again = {(r["m"], r["n"], r["k"], r["dtype"]): (r, p)
             for r, p in random_set_pairs(REPEAT / "h100_gemm_random53_rerun.json")}
    assert set(first) == set(again) and len(first) == 156
    cross = mape_by_regime([(again[k][0], first[k]["time_s"]) for k in first])["all"][1]
    model = mape_by_regime(list(again.values()))["all"][1]
    assert cross <= 0.0185 and model >= 0.09
    assert all(first[k]["kernels"][0]["name"] == again[k][0]["kernels"][0]["name"] for k in first)


# ---- candidate knnskip (session 31): knn53 with round shapes left alone, the form behind the profile switch ----
# as registered (commit 161615c and its registration commit, before the draws ran): seed: {regime: MAPE}
SKIP_COMMITTED = {56: {"all": 0.0751, "large": 0.0751, "misaligned": 0.1234, "other": 0.0621, "small_mn_large_k": 0.0782},
                  57: {"all": 0.0845, "large": 0.1571, "misaligned": 0.0972, "other": 0.0802, "small_mn_large_k": 0.0890}}
SKIP_CANDIDATE = {56: {"all": 0.0523, "fp8_small": 0.0225, "large": 0.0867, "misaligned": 0.0837, "other": 0.0346,
                       "small_mn_large_k": 0.0594},
                  57: {"all": 0.0622, "fp8_small": 0.0279, "large": 0.1258, "misaligned": 0.0741, "other": 0.0420,
                       "small_mn_large_k": 0.0740}}



@pytest.mark.parametrize("seed", sorted(SKIP_DRAWS))
def test_knnskip_registered_draws_as_measured(seed):
    """Seeds 56 (H200) / 57 (H100), registered by the committed model and by the switch's form beside it before
    they ran: committed 7.51% / 8.45%, knnskip 5.23% / 6.22%, both within issue #12's 7%; every regime better
    but H200's large shapes (8.67% against 7.51%)."""
    committed, candidate = _scores(seed, ""), _scores(seed, "_knnskip")
    for regime, mape in SKIP_COMMITTED[seed].items():
        assert committed[regime] == pytest.approx(mape, abs=1e-4), regime
    for regime, mape in SKIP_CANDIDATE[seed].items():
        assert candidate[regime] == pytest.approx(mape, abs=1e-4), regime
    assert candidate["all"] <= 0.07 < committed["all"]
    worse = {r for r in committed if candidate[r] > committed[r]}
    assert worse == ({"large"} if seed == 56 else set())


# ---- session 32: seeds 58 (H200) / 59 (H100), knnskip and knnnear (no correction beyond one binade) beside the
# committed model (0c24860, registered in 26e156b before the draws ran); the real training GEMMs: test_gemm_real_set.py
NEAR_DRAWS = {58: "h200", 59: "h100"}
NEAR_AS_REGISTERED = {   # seed: tag: {regime: MAPE}
    58: {"": {"all": 0.0725, "large": 0.1045, "other": 0.0806, "small_mn_large_k": 0.0741},
         "_knnskip": {"all": 0.0523, "fp8_small": 0.0213, "large": 0.0870, "misaligned": 0.0579, "other": 0.0346,
                      "small_mn_large_k": 0.0615},
         "_knnnear": {"all": 0.0515, "fp8_small": 0.0229, "large": 0.0793, "misaligned": 0.0606, "other": 0.0338,
                      "small_mn_large_k": 0.0615}},
    59: {"": {"all": 0.0888, "large": 0.1314, "misaligned": 0.0743, "small_mn_large_k": 0.1059},
         "_knnskip": {"all": 0.0740, "fp8_small": 0.0461, "large": 0.1420, "misaligned": 0.0776, "other": 0.0464,
                      "small_mn_large_k": 0.0863},
         "_knnnear": {"all": 0.0746, "fp8_small": 0.0461, "large": 0.1397, "misaligned": 0.0827, "other": 0.0536,
                      "small_mn_large_k": 0.0822}},
}


@pytest.mark.parametrize("seed", sorted(NEAR_DRAWS))
def test_session_32_draws_as_registered(seed):
    """Seeds 58 (H200) / 59 (H100): committed 7.25% / 8.88%, knnskip 5.23% / 7.40%, knnnear 5.15% / 7.46%. On H200
    both candidates meet issue #12's 7%; on H100 neither does (the first knn-family miss in six registered draws),
    and both are worse than the committed model on its large shapes (14.2% / 14.0% against 13.1%)."""
    for tag, want in NEAR_AS_REGISTERED[seed].items():
        got = _scores(seed, tag)
        for regime, mape in want.items():
            assert got[regime] == pytest.approx(mape, abs=1e-4), (tag, regime)
    skip, near, committed = (_scores(seed, t)["all"] for t in ("_knnskip", "_knnnear", ""))
    assert max(skip, near) < committed
    assert (max(skip, near) <= 0.07) == (seed == 58)


@pytest.mark.parametrize("seed,form,tag", [(56, "switch", "_knnskip"), (57, "switch", "_knnskip"),
                                           (58, "switch", "_knnskip"), (59, "switch", "_knnskip"),
                                           (58, "near", "_knnnear"), (59, "near", "_knnnear")])
def test_the_candidate_logs_are_what_the_module_writes(seed, form, tag, tmp_path):
    """knnskip's (seeds 56-59) and knnnear's (58, 59) registrations are what ``register`` writes today from the
    committed model's registration of the same draw, with a table of draws older than the seed."""
    from validation.gemm_residual_knn import FORMS
    gpu = {**SKIP_DRAWS, **NEAR_DRAWS}[seed]
    assert max(DEV_SEEDS[gpu]) < seed
    out = tmp_path / "cand.txt"
    register(LOGS / f"prereg_gemm_random{seed}_{gpu}.txt", out, gpu, [], FORMS[form])
    rows = lambda p: [line for line in p.read_text().splitlines() if line and not line.startswith("#")]  # noqa: E731
    assert rows(out) == rows(LOGS / f"prereg_gemm_random{seed}_{gpu}{tag}.txt")


def test_the_near_gate_only_removes_corrections():
    """knnnear is knnskip with the correction dropped (factor 1) where the nearest record is over one binade away:
    every factor is either knnskip's or exactly 1, and the gate drops some on the real training GEMMs' set."""
    import sys
    from validation.gemm_residual_knn import NEAR, SWITCH, correction, development_table
    sys.path.insert(0, str(MEAS.parent / "harness"))
    import gemm_cases
    table = development_table("h100")
    dropped = 0
    for m, n, k, dt, _ in gemm_cases.real_cases(60):
        skip, near = (correction(table, m, n, k, dt, **v) for v in (SWITCH, NEAR))
        assert near == skip or near == 1.0
        dropped += near == 1.0 != skip
    assert dropped > 10
