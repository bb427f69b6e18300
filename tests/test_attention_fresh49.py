"""Attention draws 49 (H200) and 50 (H100), issue #12 session 43: registered in e7c1ed6 by the committed profiles
(math42 adopted in session 42, nothing changed since) before they ran on newly lent machines; never fitted.
Figures: docs/validation.md "Session 43"."""
from __future__ import annotations

from pathlib import Path

import pytest

from validation.prereg_attention import score

ROOT = Path(__file__).resolve().parent.parent
MEAS = ROOT / "validation" / "measurements"
DRAWS = {"h200": 49, "h100": 50}
# MAPE per backend and direction as registered (count, MAPE)
AS_REGISTERED = {
    "h200": {("cudnn", "attention_fwd"): (28, 0.048), ("cudnn", "attention_fwd_bwd"): (28, 0.064),
             ("efficient", "attention_fwd"): (18, 0.064), ("efficient", "attention_fwd_bwd"): (18, 0.078),
             ("flash", "attention_fwd"): (28, 0.048), ("flash", "attention_fwd_bwd"): (28, 0.046),
             ("math", "attention_fwd"): (28, 0.026), ("math", "attention_fwd_bwd"): (28, 0.026),
             ("unfused_torch", "attention_fwd"): (11, 0.039), ("unfused_torch", "attention_fwd_bwd"): (11, 0.044)},
    "h100": {("cudnn", "attention_fwd"): (28, 0.034), ("cudnn", "attention_fwd_bwd"): (28, 0.032),
             ("efficient", "attention_fwd"): (7, 0.023), ("efficient", "attention_fwd_bwd"): (7, 0.058),
             ("flash", "attention_fwd"): (28, 0.067), ("flash", "attention_fwd_bwd"): (28, 0.043),
             ("math", "attention_fwd"): (28, 0.025), ("math", "attention_fwd_bwd"): (28, 0.016),
             ("unfused_torch", "attention_fwd"): (22, 0.033), ("unfused_torch", "attention_fwd_bwd"): (22, 0.018)},
}


def _score(gpu: str) -> dict:
    seed = DRAWS[gpu]
    prereg = MEAS / "logs" / f"prereg_attention{seed}_{gpu}.txt"
    assert "model commit: 30af92f" in prereg.read_text()
    return score(str(prereg), str(MEAS / "repeat" / f"{gpu}_attention_fresh{seed}.json"))["table"]


@pytest.mark.parametrize("gpu", DRAWS)
def test_as_registered(gpu):
    table = _score(gpu)
    for key, (count, mape) in AS_REGISTERED[gpu].items():
        assert table[key]["count"] == count
        assert table[key]["mape"] == pytest.approx(mape, abs=5e-4), key


@pytest.mark.parametrize("gpu", DRAWS)
def test_every_backend_and_direction_within_8_percent(gpu):
    """Issue #12's attention target on a second registered pair in a row (47 / 48 before): the worst are the H200's
    memory-efficient forward+backward (7.8%) and the H100's flash forward (6.7%)."""
    table = _score(gpu)
    assert {k for k in table if k[1] != "pooled"} == set(AS_REGISTERED[gpu])
    assert max(v["mape"] for v in table.values()) <= 0.08
