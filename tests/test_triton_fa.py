"""llm-foundry's Triton FlashAttention as a backend of its own (issue #12, session 26).

One H100 run (validation/measurements/h100_triton_attention_v2.json, validation/harness/triton_attention.py
under DISABLE_MMA_V3=1) fitted on its ``sweep`` shapes (validation/triton_fa_fit.py); its ``mpt`` shapes,
the per-GPU attention shapes of llm-foundry's H100 rows, are held out (a family of shapes the fit never
saw, same run: not a separate run)."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.calibration import load_calibration
from validation.fit import get_value
from validation.triton_fa_fit import errors_by_set, fit_triton_fa, mape

ROOT = Path(__file__).resolve().parent.parent
MEAS = ROOT / "validation" / "measurements"
HARNESS = ROOT / "validation" / "harness" / "triton_attention.py"


def test_the_run_used_mma_sync_only_and_the_wgmma_run_did_not():
    v2 = json.loads((MEAS / "h100_triton_attention_v2.json").read_text())["info"]
    v3 = json.loads((MEAS / "h100_triton_attention_v3.json").read_text())["info"]
    assert v2["triton_mma"] == "v2" and not any(v2["triton_wgmma"].values())
    assert v3["triton_mma"] == "default" and v3["triton_wgmma"]["_fwd_kernel"] and v3["triton_wgmma"]["_bwd_kernel"]


def test_harness_covers_every_llm_foundry_h100_shape():
    """Every H100 bf16 row of llm-foundry (micro-batch, sequence) is an ``mpt`` case of the harness."""
    sys.path.insert(0, str(HARNESS.parent))
    import triton_attention as ta
    shapes = {(b, s) for _, b, _, s, _ in ta.MPT_SHAPES}
    rows = [r for r in csv.DictReader((ROOT / "validation" / "published" / "published_runs_more.csv").open())
            if "llm-foundry" in r["source"] and r["gpu"].startswith("H100") and r["dtype"] == "amp_bf16"]
    assert len(rows) >= 20
    missing = {(int(r["micro_batch"]), int(r["seq_len"])) for r in rows} - shapes
    # the four seq-2048 rows (MPT-3b mbs 10, MPT-13b mbs 2, MPT-30b mbs 3 and 10) were left out for the
    # budget: seq 2048 is measured at MPT-760m's mbs 24 and in the sweep
    assert missing == {(10, 2048), (2, 2048), (3, 2048)}, missing
    out = subprocess.run([sys.executable, str(HARNESS), "--dry-run"], capture_output=True, text=True, check=True)
    assert "112 attention cases" in out.stdout


def test_fit_reproduces_the_committed_profile():
    res = fit_triton_fa()
    committed = load_calibration("h100-sxm")
    assert len(res.params) == 6 and not res.unconstrained
    for p, v in zip(res.params, res.values):
        assert get_value(committed, p.path) == pytest.approx(v, abs=1e-4), p.path


def test_held_out_mpt_shapes_ratchet():
    """Quoted in docs/validation.md: the held-out MPT shapes 11.8% forward, 10.4% forward+backward;
    the fitted sweep 12.9% / 13.7%. Head_dim 64 runs faster per FLOP than the model's single
    fraction per direction allows (+32% forward on the two head_dim-64 shapes)."""
    errs = errors_by_set(load_calibration("h100-sxm"))
    assert len(errs[("mpt", "attention_fwd")]) == 20 and len(errs[("mpt", "attention_fwd_bwd")]) == 20
    assert mape(errs[("mpt", "attention_fwd")]) <= 0.1183
    assert mape(errs[("mpt", "attention_fwd_bwd")]) <= 0.1042


@pytest.mark.xfail(strict=True, reason="attention <= 8% per backend: triton_fa's held-out MPT shapes 11.8% / 10.4%")
def test_triton_fa_meets_the_attention_target():
    errs = errors_by_set(load_calibration("h100-sxm"))
    assert mape(errs[("mpt", "attention_fwd")]) <= 0.08 and mape(errs[("mpt", "attention_fwd_bwd")]) <= 0.08


MIRROR = Path("/work/.mirror/mosaicml+llm-foundry/repo")


@pytest.mark.skipif(not MIRROR.exists(), reason="no llm-foundry mirror on this machine")
def test_staging_ports_only_the_api(tmp_path):
    script = ROOT / "validation" / "harness" / "stage_llmfoundry_triton_fa.sh"
    out = subprocess.run(["sh", str(script), str(MIRROR), str(tmp_path)], capture_output=True, text=True, check=True)
    assert "3 trans_b, 2 trans_a dots ported" in out.stdout
    orig = (tmp_path / "flash_attn_triton_orig.py").read_text().splitlines()
    ported = (tmp_path / "flash_attn_triton.py").read_text().splitlines()
    changed = [(a, b) for a, b in zip(orig, ported) if a != b]
    assert len(orig) == len(ported) and len(changed) == 7
    assert all("tl.dot" in a or "triton_pre_mlir" in a for a, _ in changed)
