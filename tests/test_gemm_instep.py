"""Every GEMM of five profiled single-H200 steps against meshcast's GEMM model (session 13,
validation/gemm_instep.py on profiles/h200_plan_gemmtrace.json; grid ``gemm-trace``).

The file is a separate run, later than every GEMM fit (h200_kernels.json), never fitted. Today's
figures (ratchets; docs/measurements.md "GEMMs inside the step"): linear-layer GEMMs 7.6% MAPE
over 60 calls, their summed seconds +1.6% (layouts: NN +3.0%, NT -5.0%, TN +7.6% summed); the
attention's batched GEMMs (Megatron-Core local attention: QKᵀ and scores×V, 15 calls) 22.9%, all
predicted slow (+21.5% summed). Issue #12's GEMM target is 7% on a fresh run: the batched ones
miss it (strict xfail)."""
from __future__ import annotations

from functools import lru_cache

import pytest

from tests.harness_loader import HARNESS_DIR, load_harness
from validation.gemm_instep import gemm_dims, layout, rows, summary
from validation.records import load_measurements
from simulator.calibration import profile_fitted_on
from pathlib import Path

FILE = Path(__file__).resolve().parent.parent / "validation" / "measurements" / "profiles" / "h200_plan_gemmtrace.json"


@lru_cache(maxsize=None)
def _summary():
    return summary(rows(str(FILE)))


def test_trace_file_is_a_later_run_never_fitted():
    mf = load_measurements(FILE)
    assert FILE.name not in {Path(f).name for f in profile_fitted_on("h200-sxm")}
    assert mf.info["date"] >= "2026-11-23" and mf.info["gpu"] == "NVIDIA H200"
    frameworks = {r["framework"] for r in mf.records}
    assert frameworks == {"megatron-core-local", "torchtitan"}
    # every record was traced but one: llama-2b s4096 ran out of memory keeping its operands
    assert sum(1 for r in mf.records if r.get("gemm_calls")) == 4


def test_every_traced_call_is_compared():
    s = _summary()
    assert s["linear"]["count"] == 60 and s["batched"]["count"] == 15
    assert sum(s[f"linear {lay}"]["count"] for lay in ("NN", "NT", "TN")) == 60


# linear pinned at today's 7.0% / +1.0% summed in session 21 (was 7.6% / +1.6%; the committed model had improved
# on it since): every GEMM change tried that session moved it to 7.7-9.1% (docs/validation.md)
# session 23, the gemm32 candidate adopted: linear 7.05 -> 7.10% (+1.0 -> +1.06% summed; LOOSENED, stated here),
# batched 22.9 -> 22.5% (+21.5 -> +21.1%)
@pytest.mark.parametrize("cls,mape,total", [("linear", 0.0710, 0.0106), ("batched", 0.2246, 0.2106)])
def test_in_step_gemm_ratchet(cls, mape, total):
    s = _summary()[cls]
    assert s["mape"] <= mape + 5e-4
    assert abs(s["total_error"]) <= abs(total) + 5e-4


def test_linear_gemms_within_7_percent_summed():
    """The linear layers' summed GEMM seconds of a step: within 2% (the figure a step's time rests
    on; +1.0% today); per call 7.0%."""
    assert abs(_summary()["linear"]["total_error"]) <= 0.02


@pytest.mark.xfail(strict=True, reason="in-step batched attention GEMMs 22.9% (memory roofline at the generic "
                                       "memory-bound fraction; fixing it alone exposes the unfused attention's "
                                       "memory-bound parts, predicted fast: docs/measurements.md)")
def test_in_step_gemm_target():
    s = _summary()
    assert s["linear"]["mape"] <= 0.07 and s["batched"]["mape"] <= 0.07


def test_layout_and_dims_read_from_strides_and_shapes():
    # Megatron's forward x @ W.t(): B transposed; its wgrad grad.t() @ x: A transposed
    assert layout([[3584, 1], [1, 3584]]) == "NT"
    assert layout([[1, 3584], [3584, 1]]) == "TN"
    assert layout([[4096, 1], [3584, 1]]) == "NN"
    assert gemm_dims([[4096, 3584], [3584, 19456]]) == (4096, 19456, 3584, 1)
    # baddbmm: the added input first, then [b, m, k] and [b, k, n]
    assert gemm_dims([[56, 2048, 2048], [56, 2048, 128], [56, 128, 2048]]) == (2048, 2048, 128, 56)


def test_harness_captures_layouts_and_replays_on_cpu(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(HARNESS_DIR))      # the harness imports its sibling ``common``
    gt = load_harness("gemm_trace")
    lin = torch.nn.Linear(16, 32, bias=False)
    x = torch.randn(8, 16)

    def step():
        lin(x).sum().backward()
    calls = gt.capture_calls(step, keep_operands=True)
    assert [c["op"] for c in calls] == ["mm", "mm"]          # forward, then the weight gradient
    assert calls[0]["shapes"] == [[8, 16], [16, 32]] and calls[0]["strides"][1] == [1, 16]
    assert all(c["count"] == 1 for c in calls)
    ev, graph = gt.replay_isolated(calls[0], device="cpu")
    assert ev > 0 and graph is None
