"""Multi-query attention (one KV head for all query heads), never in a measured draw before session 29: a
draw per GPU registered before it ran (validation/harness/attention_backends.py --mqa; H200 seed 29, H100
seed 30, 28 random shapes on every SDPA backend and Megatron's local attention, by the committed model of
c0e4aff) and measured on newly lent machines. It checks session 28's FlashAttention-2 HBM bytes (K and V once
per KV head) on the layout they were changed for. Session 30: the next pair (H200 seed 31, H100 seed 32), registered
by the committed model of cd7f481 (commit 4b9b158) before they ran. Figures: docs/validation.md, "Session 29" and
"Session 30". Session 32: H200 seed 33, H100 seed 34, registered by the committed model of 0c24860 (commit 26e156b)
before they ran ("Session 32")."""
from __future__ import annotations

from pathlib import Path

import pytest

from validation.prereg_attention import score

MEAS = Path(__file__).resolve().parent.parent / "validation" / "measurements"
DRAWS = {"h200": ("prereg_attention29_h200_mqa.txt", "h200_attention_mqa29.json"),
         "h100": ("prereg_attention30_h100_mqa.txt", "h100_attention_mqa30.json")}
# session 30 (registered by cd7f481 in commit 4b9b158, the same attention model)
DRAWS_30 = {"h200": ("prereg_attention31_h200_mqa.txt", "h200_attention_mqa31.json"),
            "h100": ("prereg_attention32_h100_mqa.txt", "h100_attention_mqa32.json")}
# session 32 (registered by 0c24860 in commit 26e156b, the same attention model)
DRAWS_32 = {"h200": ("prereg_attention33_h200_mqa.txt", "h200_attention_mqa33.json"),
            "h100": ("prereg_attention34_h100_mqa.txt", "h100_attention_mqa34.json")}
AS_REGISTERED = {   # gpu: {(backend, kind or pooled): (count, MAPE)}
    "h200": {("cudnn", "attention_fwd"): (28, 0.039), ("cudnn", "attention_fwd_bwd"): (28, 0.060),
             ("cudnn", "pooled"): (56, 0.050), ("flash", "attention_fwd"): (28, 0.067),
             ("flash", "attention_fwd_bwd"): (28, 0.044), ("flash", "pooled"): (56, 0.055),
             ("math", "attention_fwd"): (28, 0.082), ("math", "attention_fwd_bwd"): (28, 0.038),
             ("math", "pooled"): (56, 0.060), ("unfused_torch", "attention_fwd"): (14, 0.065),
             ("unfused_torch", "attention_fwd_bwd"): (14, 0.057), ("unfused_torch", "pooled"): (28, 0.061)},
    "h100": {("cudnn", "attention_fwd"): (28, 0.036), ("cudnn", "attention_fwd_bwd"): (28, 0.052),
             ("cudnn", "pooled"): (56, 0.044), ("flash", "attention_fwd"): (28, 0.068),
             ("flash", "attention_fwd_bwd"): (28, 0.043), ("flash", "pooled"): (56, 0.055),
             ("math", "attention_fwd"): (28, 0.068), ("math", "attention_fwd_bwd"): (28, 0.060),
             ("math", "pooled"): (56, 0.064), ("unfused_torch", "attention_fwd"): (12, 0.029),
             ("unfused_torch", "attention_fwd_bwd"): (12, 0.029), ("unfused_torch", "pooled"): (24, 0.029)},
}
AS_REGISTERED_30 = {   # the session-30 draws: gpu: {(backend, kind or pooled): (count, MAPE)}
    "h200": {("cudnn", "attention_fwd"): (28, 0.035), ("cudnn", "attention_fwd_bwd"): (28, 0.072),
             ("cudnn", "pooled"): (56, 0.054), ("flash", "attention_fwd"): (28, 0.052),
             ("flash", "attention_fwd_bwd"): (28, 0.037), ("flash", "pooled"): (56, 0.044),
             ("math", "attention_fwd"): (28, 0.068), ("math", "attention_fwd_bwd"): (28, 0.052),
             ("math", "pooled"): (56, 0.060), ("unfused_torch", "attention_fwd"): (12, 0.037),
             ("unfused_torch", "attention_fwd_bwd"): (12, 0.022), ("unfused_torch", "pooled"): (24, 0.030)},
    "h100": {("cudnn", "attention_fwd"): (28, 0.032), ("cudnn", "attention_fwd_bwd"): (28, 0.034),
             ("cudnn", "pooled"): (56, 0.033), ("flash", "attention_fwd"): (28, 0.064),
             ("flash", "attention_fwd_bwd"): (28, 0.044), ("flash", "pooled"): (56, 0.054),
             ("math", "attention_fwd"): (28, 0.057), ("math", "attention_fwd_bwd"): (28, 0.050),
             ("math", "pooled"): (56, 0.053), ("unfused_torch", "attention_fwd"): (20, 0.032),
             ("unfused_torch", "attention_fwd_bwd"): (20, 0.041), ("unfused_torch", "pooled"): (40, 0.036)},
}

AS_REGISTERED_32 = {   # the session-32 draws: gpu: {(backend, kind or pooled): (count, MAPE)}
    "h200": {("cudnn", "attention_fwd"): (28, 0.038), ("cudnn", "attention_fwd_bwd"): (28, 0.059),
             ("cudnn", "pooled"): (56, 0.048), ("flash", "attention_fwd"): (28, 0.038),
             ("flash", "attention_fwd_bwd"): (28, 0.040), ("flash", "pooled"): (56, 0.039),
             ("math", "attention_fwd"): (28, 0.088), ("math", "attention_fwd_bwd"): (28, 0.037),
             ("math", "pooled"): (56, 0.063), ("unfused_torch", "attention_fwd"): (14, 0.035),
             ("unfused_torch", "attention_fwd_bwd"): (14, 0.025), ("unfused_torch", "pooled"): (28, 0.030)},
    "h100": {("cudnn", "attention_fwd"): (28, 0.053), ("cudnn", "attention_fwd_bwd"): (28, 0.063),
             ("cudnn", "pooled"): (56, 0.058), ("flash", "attention_fwd"): (28, 0.060),
             ("flash", "attention_fwd_bwd"): (28, 0.034), ("flash", "pooled"): (56, 0.047),
             ("math", "attention_fwd"): (28, 0.065), ("math", "attention_fwd_bwd"): (28, 0.066),
             ("math", "pooled"): (56, 0.066), ("unfused_torch", "attention_fwd"): (14, 0.020),
             ("unfused_torch", "attention_fwd_bwd"): (14, 0.022), ("unfused_torch", "pooled"): (28, 0.021)},
}

LATER = {30: (DRAWS_30, AS_REGISTERED_30), 32: (DRAWS_32, AS_REGISTERED_32)}


def _score(gpu: str, draws: dict = DRAWS) -> dict:
    log, run = draws[gpu]
    return score(str(MEAS / "logs" / log), str(MEAS / "repeat" / run))


@pytest.mark.parametrize("gpu", sorted(DRAWS))
def test_mqa_draws_as_registered(gpu):
    """Pinned as registered (to the 0.1 point the docs quote). Every case the run reached was registered
    and timed, except memory-efficient attention, which PyTorch refuses for a KV head count other than the
    query heads' (all 56 of its cases on each GPU: refused, not scored)."""
    got = _score(gpu)
    assert got["missing"] == {} and got["refused"] == {"efficient": 56}
    assert set(got["table"]) == set(AS_REGISTERED[gpu])
    for key, (n, mape) in AS_REGISTERED[gpu].items():
        assert got["table"][key]["count"] == n, key
        assert got["table"][key]["mape"] == pytest.approx(mape, abs=0.0006), key


@pytest.mark.parametrize("gpu", sorted(DRAWS))
def test_mqa_every_backend_pooled_within_8_percent(gpu):
    """Issue #12's attention target (<= 8% per backend) on the MQA draws: cuDNN 5.0% / 4.4%, FlashAttention-2
    5.5% / 5.5%, math 6.0% / 6.4%, Megatron local 6.1% / 2.9% (H200 / H100)."""
    table = _score(gpu)["table"]
    assert max(v["mape"] for (b, k), v in table.items() if k == "pooled") <= 0.08


def test_mqa_h100_every_backend_and_direction_within_8_percent():
    """The H100 draw within 8% per backend and direction (math forward 6.8% the worst)."""
    assert max(v["mape"] for v in _score("h100")["table"].values()) <= 0.08


@pytest.mark.xfail(strict=True, reason="issue #12: attention <= 8% per backend and direction: the H200 MQA draw's "
                                       "math forward is 8.2% (predicted a mean 8% too fast); every other backend "
                                       "and direction on both GPUs within 8%")
def test_mqa_h200_every_backend_and_direction_within_8_percent():
    assert max(v["mape"] for v in _score("h200")["table"].values()) <= 0.08


@pytest.mark.parametrize("session,gpu", [(30, "h200"), (30, "h100"), (32, "h200"), (32, "h100")])
def test_later_mqa_draws_as_registered(session, gpu):
    """The later pairs, each registered before it ran, pinned as registered (to the 0.1 point the docs quote):
    session 30 by cd7f481 (H200 seed 31, H100 seed 32), session 32 by 0c24860 (H200 seed 33, H100 seed 34);
    memory-efficient refuses all 56 of its cases on each GPU every time."""
    draws, want = LATER[session]
    got = _score(gpu, draws)
    assert got["missing"] == {} and got["refused"] == {"efficient": 56}
    assert set(got["table"]) == set(want[gpu])
    for key, (n, mape) in want[gpu].items():
        assert got["table"][key]["count"] == n, key
        assert got["table"][key]["mape"] == pytest.approx(mape, abs=0.0006), key


@pytest.mark.parametrize("gpu", sorted(DRAWS_30))
def test_session_30_mqa_every_backend_and_direction_within_8_percent(gpu):
    """Issue #12's attention target per backend and direction on both session-30 draws: pooled H200 / H100 cuDNN
    5.4% / 3.3%, FlashAttention-2 4.4% / 5.4%, math 6.0% / 5.3%, Megatron local 3.0% / 3.6%; the worst single
    direction H200 cuDNN forward+backward 7.2%, H100 FlashAttention-2 forward 6.4%."""
    assert max(v["mape"] for v in _score(gpu, DRAWS_30)["table"].values()) <= 0.08


@pytest.mark.parametrize("gpu", sorted(DRAWS_32))
def test_session_32_mqa_every_backend_pooled_within_8_percent(gpu):
    """Issue #12's attention target per backend on both session-32 draws: pooled H200 / H100 cuDNN 4.8% / 5.8%,
    FlashAttention-2 3.9% / 4.7%, math 6.3% / 6.6%, Megatron local 3.0% / 2.1%."""
    got = _score(gpu, DRAWS_32)["table"]
    assert max(v["mape"] for (_, kind), v in got.items() if kind == "pooled") <= 0.08


def test_session_32_mqa_h100_every_direction_within_8_percent():
    """H100 seed 34: every backend and direction within 8% (worst math forward+backward 6.6%)."""
    assert max(v["mape"] for v in _score("h100", DRAWS_32)["table"].values()) <= 0.08


@pytest.mark.xfail(strict=True, reason="issue #12: attention <= 8% per backend and direction: the H200 MQA draw 33's "
                                       "math forward is 8.8% (its pooled math 6.3%), as draw 29's math forward was 8.2%")
def test_session_32_mqa_h200_every_direction_within_8_percent():
    assert max(v["mape"] for v in _score("h200", DRAWS_32)["table"].values()) <= 0.08


# session 36 (registered in commit c0d9b12 by the code of 424c641, the same attention model; beside it candidate membound68,
# fp32 softmax rates of their own, which moves Megatron-Core local attention's cases only). The H100 log of the committed
# model was written with profile h200-sxm: validation.prereg_attention's --profile defaulted to it whatever --gpu said (fixed
# since: the default follows --gpu). On every backend but unfused_torch the candidate's H100 log holds the committed h100-sxm
# model's predictions (the test below checks it), so those are registered by the committed model after all.
DRAWS_36 = {"h200": ("prereg_attention35_h200_mqa.txt", "h200_attention_mqa35.json"),
            "h100": ("prereg_attention36_h100_mqa_membound68.txt", "h100_attention_mqa36.json")}
AS_REGISTERED_36 = {   # gpu: {(backend, kind or pooled): (count, MAPE)}; H100 from the candidate's log (see above)
    "h200": {("cudnn", "attention_fwd"): (28, 0.044), ("cudnn", "attention_fwd_bwd"): (28, 0.064),
             ("cudnn", "pooled"): (56, 0.054), ("flash", "attention_fwd"): (28, 0.060),
             ("flash", "attention_fwd_bwd"): (28, 0.042), ("flash", "pooled"): (56, 0.051),
             ("math", "attention_fwd"): (28, 0.071), ("math", "attention_fwd_bwd"): (28, 0.049),
             ("math", "pooled"): (56, 0.060), ("unfused_torch", "attention_fwd"): (13, 0.032),
             ("unfused_torch", "attention_fwd_bwd"): (13, 0.028), ("unfused_torch", "pooled"): (26, 0.030)},
    "h100": {("cudnn", "attention_fwd"): (28, 0.042), ("cudnn", "attention_fwd_bwd"): (28, 0.065),
             ("cudnn", "pooled"): (56, 0.053), ("flash", "attention_fwd"): (28, 0.064),
             ("flash", "attention_fwd_bwd"): (28, 0.033), ("flash", "pooled"): (56, 0.049),
             ("math", "attention_fwd"): (28, 0.049), ("math", "attention_fwd_bwd"): (28, 0.084),
             ("math", "pooled"): (56, 0.066), ("unfused_torch", "attention_fwd"): (6, 0.027),
             ("unfused_torch", "attention_fwd_bwd"): (6, 0.032), ("unfused_torch", "pooled"): (12, 0.030)},
}
LATER[36] = (DRAWS_36, AS_REGISTERED_36)


@pytest.mark.parametrize("gpu", sorted(DRAWS_36))
def test_session_36_mqa_as_registered_every_backend_pooled_within_8_percent(gpu):
    """Issue #12's attention target per backend on both session-36 draws: pooled H200 / H100 cuDNN 5.4% / 5.3%,
    FlashAttention-2 5.1% / 4.9%, math 6.0% / 6.6%, Megatron local 3.0% / 3.0% (H100: the candidate's registration, whose
    local-attention cases are the candidate's; the committed h100-sxm model gives 3.0% too)."""
    test_later_mqa_draws_as_registered(36, gpu)
    got = _score(gpu, DRAWS_36)["table"]
    assert max(v["mape"] for (_, kind), v in got.items() if kind == "pooled") <= 0.08


@pytest.mark.xfail(strict=True, reason="issue #12: attention <= 8% per backend and direction: the H100 MQA draw 36's "
                                       "math forward+backward is 8.4% (pooled 6.6%); H200 seed 35 every direction within 8%")
def test_session_36_mqa_h100_every_direction_within_8_percent():
    assert max(v["mape"] for v in _score("h100", DRAWS_36)["table"].values()) <= 0.08


def test_session_36_mqa_h200_every_direction_within_8_percent():
    """H200 seed 35: every backend and direction within 8% (worst math forward 7.1%)."""
    assert max(v["mape"] for v in _score("h200", DRAWS_36)["table"].values()) <= 0.08


def test_session_36_h100_candidate_log_is_the_committed_model_but_for_local_attention():
    """The committed h100-sxm model predicts every cuDNN and FlashAttention-2 case of seed 36 as the candidate's
    registration does (its math cases too until session 42 re-costed the math backend: candidate math42); the log
    written under the committed model's name used h200-sxm (the old default) and differs."""
    from validation.prereg_attention import predictions, read_prereg, record_key
    cand = read_prereg(str(MEAS / "logs" / "prereg_attention36_h100_mqa_membound68.txt"))
    wrong = read_prereg(str(MEAS / "logs" / "prereg_attention36_h100_mqa.txt"))
    assert "profile: h200-sxm" in (MEAS / "logs" / "prereg_attention36_h100_mqa.txt").read_text().splitlines()[2]
    rows = predictions(36, 28, None, "NVIDIA H100 80GB HBM3", "attention_backends_mqa")
    other = [(tuple(record_key(r)), t) for r, t in rows if r["backend"] not in ("unfused_torch", "math") and t is not None]
    assert len(other) >= 140
    assert all(cand[k] == pytest.approx(t, rel=1e-5) for k, t in other)
    assert sum(wrong[k] != pytest.approx(t, rel=1e-5) for k, t in other) > 100


def test_session_36_candidate_moves_local_attention_only():
    """Candidate membound68 on the session-36 draws: Megatron local pooled H200 3.0 -> 4.0% (registered both ways; the
    committed h100-sxm model and the candidate both 3.0% on H100); every other backend as the committed model."""
    h200 = score(str(MEAS / "logs" / "prereg_attention35_h200_mqa_membound68.txt"), str(MEAS / "repeat" / "h200_attention_mqa35.json"))
    base = _score("h200", DRAWS_36)
    for key, v in h200["table"].items():
        if key[0] == "unfused_torch":
            continue
        assert v["mape"] == pytest.approx(base["table"][key]["mape"], abs=1e-9), key
    assert h200["table"][("unfused_torch", "pooled")]["mape"] == pytest.approx(0.040, abs=0.0006)


def test_prereg_attention_profile_follows_the_gpu_unless_given():
    from validation.prereg_attention import profile_for
    assert profile_for(None, "NVIDIA H100 80GB HBM3") == "h100-sxm" and profile_for(None, "NVIDIA H200") == "h200-sxm"
    assert profile_for("h200-sxm", "NVIDIA H100 80GB HBM3") == "h200-sxm"
