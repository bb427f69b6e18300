"""Registered attention draws by the committed profiles since math42 (issue #12): H200 49 / H100 50 (session 43,
registered in e7c1ed6) and H200 51 / H100 52 (session 44, registered in b24ca15), each registered before it ran on a
newly lent machine; never fitted. The attention model is the same for both pairs (math42, adopted in session 42).
Figures: docs/validation.md "Session 43" and "Session 44"."""
from __future__ import annotations

from pathlib import Path

import pytest

from validation.prereg_attention import score

ROOT = Path(__file__).resolve().parent.parent
MEAS = ROOT / "validation" / "measurements"
# (gpu, seed): the commit whose model wrote the registration
DRAWS = {("h200", 49): "30af92f", ("h100", 50): "30af92f", ("h200", 51): "655db6c", ("h100", 52): "655db6c"}
# MAPE per backend and direction as registered (count, MAPE)
AS_REGISTERED = {
    ("h200", 49): {("cudnn", "attention_fwd"): (28, 0.048), ("cudnn", "attention_fwd_bwd"): (28, 0.064),
                   ("efficient", "attention_fwd"): (18, 0.064), ("efficient", "attention_fwd_bwd"): (18, 0.078),
                   ("flash", "attention_fwd"): (28, 0.048), ("flash", "attention_fwd_bwd"): (28, 0.046),
                   ("math", "attention_fwd"): (28, 0.026), ("math", "attention_fwd_bwd"): (28, 0.026),
                   ("unfused_torch", "attention_fwd"): (11, 0.039), ("unfused_torch", "attention_fwd_bwd"): (11, 0.044)},
    ("h100", 50): {("cudnn", "attention_fwd"): (28, 0.034), ("cudnn", "attention_fwd_bwd"): (28, 0.032),
                   ("efficient", "attention_fwd"): (7, 0.023), ("efficient", "attention_fwd_bwd"): (7, 0.058),
                   ("flash", "attention_fwd"): (28, 0.067), ("flash", "attention_fwd_bwd"): (28, 0.043),
                   ("math", "attention_fwd"): (28, 0.025), ("math", "attention_fwd_bwd"): (28, 0.016),
                   ("unfused_torch", "attention_fwd"): (22, 0.033), ("unfused_torch", "attention_fwd_bwd"): (22, 0.018)},
    ("h200", 51): {("cudnn", "attention_fwd"): (28, 0.052), ("cudnn", "attention_fwd_bwd"): (28, 0.062),
                   ("efficient", "attention_fwd"): (13, 0.027), ("efficient", "attention_fwd_bwd"): (13, 0.039),
                   ("flash", "attention_fwd"): (28, 0.045), ("flash", "attention_fwd_bwd"): (28, 0.039),
                   ("math", "attention_fwd"): (28, 0.022), ("math", "attention_fwd_bwd"): (28, 0.027),
                   ("unfused_torch", "attention_fwd"): (13, 0.021), ("unfused_torch", "attention_fwd_bwd"): (13, 0.018)},
    ("h100", 52): {("cudnn", "attention_fwd"): (28, 0.043), ("cudnn", "attention_fwd_bwd"): (28, 0.054),
                   ("efficient", "attention_fwd"): (14, 0.041), ("efficient", "attention_fwd_bwd"): (14, 0.042),
                   ("flash", "attention_fwd"): (28, 0.071), ("flash", "attention_fwd_bwd"): (28, 0.046),
                   ("math", "attention_fwd"): (28, 0.026), ("math", "attention_fwd_bwd"): (28, 0.021),
                   ("unfused_torch", "attention_fwd"): (14, 0.044), ("unfused_torch", "attention_fwd_bwd"): (14, 0.024)},
}


def _score(gpu: str, seed: int) -> dict:
    prereg = MEAS / "logs" / f"prereg_attention{seed}_{gpu}.txt"
    assert f"model commit: {DRAWS[(gpu, seed)]}" in prereg.read_text()
    return score(str(prereg), str(MEAS / "repeat" / f"{gpu}_attention_fresh{seed}.json"))["table"]


@pytest.mark.parametrize("gpu,seed", DRAWS)
def test_as_registered(gpu, seed):
    table = _score(gpu, seed)
    for key, (count, mape) in AS_REGISTERED[(gpu, seed)].items():
        assert table[key]["count"] == count
        assert table[key]["mape"] == pytest.approx(mape, abs=5e-4), key


@pytest.mark.parametrize("gpu,seed", DRAWS)
def test_every_backend_and_direction_within_8_percent(gpu, seed):
    """Issue #12's attention target on three registered pairs in a row (47 / 48, 49 / 50, 51 / 52): the worst are
    the H200's memory-efficient forward+backward on seed 49 (7.8%) and the H100's flash forward on seed 52 (7.1%)."""
    table = _score(gpu, seed)
    assert {k for k in table if k[1] != "pooled"} == set(AS_REGISTERED[(gpu, seed)])
    assert max(v["mape"] for v in table.values()) <= 0.08
