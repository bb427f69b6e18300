"""Row kernels at row lengths no fit had seen (validation/harness/row_kernels.py, session 15): PyTorch's
softmax forward at 1536-32768 elements (bf16, fp32: every register count of cunn_SoftMaxForwardReg, the
shared-memory and global-memory kernels), RMSNorm and LayerNorm at hidden sizes of real models, on one
H200 and one H100. The predictions were committed before the run (validation/measurements/logs/
prereg_row_kernels_*.txt); this file pins what they scored and what today's model scores."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hardware_specs.catalog import load_hardware
from simulator.calibration import calibration_for
from validation.predict import kernel_time

ROOT = Path(__file__).resolve().parents[1]
MEAS = ROOT / "validation" / "measurements"
HW = {"h200": "h200-1gpu", "h100": "h100-1gpu"}
# softmax MAPE as pre-registered (the model of c82c8eb: one rate per block kernel, fp32 warp rows by
# their bytes) and today (rows padded to their register count, reg / reg_wide rates, fp32 per element;
# mechanisms read from SoftMax.cu after the run, the reg/reg_wide boundary read from this run)
PREREGISTERED = {"h200": 0.161, "h100": 0.182}
# norms: 14.6 / 14.2% (RMSNorm), 10.3 / 10.0% (LayerNorm) until session 16 fitted its norm model on these
# records and the kernel suite's (fit data since)
# softmax 9.3 / 9.5% -> 8.3 / 9.2% with session 21's per-wave block kernels (adopted on the pre-registered seed-41
# membound draw; its H100 bf16 block rows here 7.9 -> 10.7%, the rest better)
# session 23 adopted the membound42 fit, which fitted every memory-bound parameter jointly on these records with
# the kernel suites, the norm suites and membound draws 40 / 41 (all fit data since): softmax 8.35 / 9.2 -> 6.8 /
# 7.0%, but RMSNorm 3.5 / 4.5 -> 5.95 / 6.1% and LayerNorm 4.2 / 4.2 -> 5.2 / 5.2% (LOOSENED, stated here: the
# joint fit trades these rows for the norm suites' and the random draws')
# session 36 adopted membound66 (every softmax parameter refitted on the softmax records of these files, the kernel
# suites and every registered memory-bound draw through seeds 64 / 65): softmax 6.8 / 7.0 -> 7.46 / 7.71% (LOOSENED,
# stated here: the bf16 draws outnumber these rows, and their fp32 rows get worse; registered softmax draws 5.6 / 9.8
# -> 3.1 / 6.3%)
TODAY = {"h200": {"softmax": 0.0746, "rmsnorm": 0.0595, "layernorm": 0.0524},
         "h100": {"softmax": 0.0771, "rmsnorm": 0.0607, "layernorm": 0.0524}}


def _records(gpu: str) -> list[dict]:
    return json.loads((MEAS / f"{gpu}_row_kernels.json").read_text())["records"]


def _label(r: dict) -> str:
    return f"{r['kind']:9s} {r['tokens']:7d}x{r['hidden']:<6d} {r['dtype']}"


def _mape(errors: list[float]) -> float:
    return sum(abs(e) for e in errors) / len(errors)


@pytest.mark.parametrize("gpu", sorted(HW))
def test_preregistered_predictions_scored_as_quoted(gpu):
    logged = {}
    for line in (MEAS / "logs" / f"prereg_row_kernels_{gpu}.txt").read_text().splitlines():
        m = re.match(r"(.*\S)\s+([0-9.]+) us$", line)
        logged[m.group(1)] = float(m.group(2)) * 1e-6
    recs = [r for r in _records(gpu) if r["kind"] == "softmax"]
    assert len(recs) == 63 and all(_label(r).strip() in logged for r in recs)
    errs = [logged[_label(r).strip()] / r["time_s"] - 1 for r in recs]
    assert _mape(errs) == pytest.approx(PREREGISTERED[gpu], abs=0.0015)


@pytest.mark.parametrize("gpu", sorted(HW))
def test_row_kernels_today(gpu):
    hw = load_hardware(HW[gpu])
    cal = calibration_for(hw.accelerator)[0]
    for kind, ratchet in TODAY[gpu].items():
        errs = [kernel_time(r, hw, cal) / r["time_s"] - 1 for r in _records(gpu) if r["kind"] == kind]
        assert len(errs) == (63 if kind == "softmax" else 21)
        assert _mape(errs) <= ratchet + 5e-4, kind


def test_row_kernels_fitted_by_the_norm_and_membound_fits_only():
    """Session 16 fitted the norm model (``--only norm_forward``) on these files' RMSNorm and LayerNorm
    records; session 23 adopted the membound42 fit, which fitted the softmax parameters on them too, and
    session 24 the membound46 fit (the norm forward's per-wave times and load latencies under whole waves,
    and the memcpy fixed cost), session 36 the membound66 fit (every softmax parameter), session 39 the membound68
    fit (fp32 softmax rates, with m78copy). No other fit names them."""
    from simulator.calibration import PROFILE_DIR, profile_fitted_on
    from hardware_specs.yamlio import read_yaml_mapping
    for gpu, profile in (("h200", "h200-sxm"), ("h100", "h100-sxm")):
        assert f"validation/measurements/{gpu}_row_kernels.json" in profile_fitted_on(profile)
        fits = read_yaml_mapping(PROFILE_DIR / f"{profile}.yaml")["fits"]
        naming = [name for name, fit in fits.items() if any("row_kernels" in f for f in fit.get("fitted_on", []))]
        assert naming[0] == "compute[norm_forward]" and naming[1].startswith("compute[membound42:") and len(naming) == 5
        assert all(p.startswith("norm_forward.") for p in fits["compute[norm_forward]"]["fitted"])
        assert "softmax_warp_cycles.kernel" in fits[naming[1]]["fitted"]
        assert naming[2].startswith("compute[membound46:")
        assert all(p.startswith(("norm_forward.", "memory_op_fixed_s.")) for p in fits[naming[2]]["fitted"])
        assert naming[3].startswith("compute[membound66:") and all(p.startswith("softmax_") for p in fits[naming[3]]["fitted"])
        assert naming[4].startswith("compute[membound68:") and all(p.startswith("softmax_") for p in fits[naming[4]]["fitted"])
