"""PyTorch's non-vectorized paths and fp32 softmax measured as kernels (session 12), the Megatron-local
attention pattern they feed, and H100's own cuDNN / memory-efficient attention fit.

Data: validation/measurements/{h200,h100}_torch_paths.json (fit data of memory_op_fraction
nonvectorized / cast_unrolled; clones and softmax records are checks, never fitted),
h100_attention_backends.json (fit data of H100's cuDNN and memory-efficient parameters) and
repeat/{h100,h200}_attention_fresh14.json (a draw measured before either fit: held out)."""
from __future__ import annotations

import importlib.util
import statistics
from collections import defaultdict
from pathlib import Path

import pytest

from simulator.calibration import load_calibration, profile_fitted_on
from simulator.compute import elementwise_time, memory_time, nonvectorized_time, unfused_torch_attention_parts
from simulator.engine import device_model
from hardware_specs.catalog import load_accelerator
from validation.hardware import hardware_for
from validation.predict import predict_record
from validation.records import load_measurements

ROOT = Path(__file__).resolve().parents[1]
MEAS = ROOT / "validation" / "measurements"


def _dev(name: str):
    return device_model(load_accelerator(name), load_calibration(name))


def _harness():
    spec = importlib.util.spec_from_file_location("torch_paths", ROOT / "validation" / "harness" / "torch_paths.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _errors(path: Path, key) -> dict:
    mf = load_measurements(path)
    hw = hardware_for(mf)
    cal = load_calibration(hw.accelerator.name)
    out = defaultdict(list)
    for r in mf.records:
        if r.get("time_s"):
            out[key(r)].append(predict_record(r, hw, cal).time_s / r["time_s"] - 1)
    return out


def _mape(errs) -> float:
    return statistics.fmean(abs(e) for e in errs)


# ---- the harness ------------------------------------------------------------------------------------
def test_harness_cases_and_bytes():
    h = _harness()
    cs = h.cases()
    assert len(cs) == 80
    assert all(4 * c["bh"] * c["seq"] ** 2 <= h.MAX_TENSOR_BYTES for c in cs if c["kind"] == "masked_fill_broadcast")
    assert h.bytes_min(dict(kind="masked_fill_broadcast", bh=2, seq=4)) == 8 * 2 * 16
    assert h.bytes_min(dict(kind="cast_to_fp32", elements=10)) == 60
    assert h.bytes_min(dict(kind="softmax_bwd", tokens=2, hidden=8, dtype="float32")) == 6 * 4 * 16


def test_torch_path_files_are_the_fits_of_their_profiles():
    for gpu in ("h200", "h100"):
        assert f"validation/measurements/{gpu}_torch_paths.json" in profile_fitted_on(f"{gpu}-sxm")
        assert len(load_measurements(MEAS / f"{gpu}_torch_paths.json").records) == 80


# ---- accuracy per kind, all records (fit and held-out split together; clones and softmax never fitted) --
TODAY = {
    # session 23's membound42 profiles (a memory-bound kernel's own fixed cost, 5.15 / 5.14 us in place of
    # kernel_launch_s 6.37 / 5.59 us; the warp softmax in SM cycles): softmax bf16 11.5 / 12.2 -> 3.4 / 3.1%, fp32
    # 9.1 / 10.0 -> 7.6 / 5.7%, clone 14.9 / 5.2 -> 4.8 / 2.6%, but the non-vectorized paths' smallest calls (6.7-7.6 us
    # measured; their rates were fitted with the old fixed cost) come out fast: add_mixed 5.4 / 14.9 -> 8.1 / 16.2%,
    # cast_to_fp32 4.3 / 5.3 -> 6.3 / 7.8% (LOOSENED, stated here; refitting their two rates alone moves them < 0.3 points)
    # session 36 adopted membound66 (every softmax parameter fitted on the bf16 softmax records of the kernel suites and
    # every registered memory-bound draw through seeds 64 / 65): softmax bf16 3.39 / 3.10 -> 3.28 / 3.61%, fp32 7.60 /
    # 5.74 -> 7.95 / 6.97% (LOOSENED, stated here: the fit has no fp32 row of these sizes; registered softmax draws
    # 5.6 / 9.8 -> 3.1 / 6.3%, docs/validation.md "Session 36")
    "h200": {("masked_fill_broadcast", "float32"): 0.0307, ("add_mixed", "float32"): 0.0808,
             ("cast_to_fp32", "float32"): 0.0634, ("clone", "float32"): 0.0483,
             ("softmax", "float32"): 0.0795, ("softmax", "bfloat16"): 0.0328,
             ("softmax_bwd", "float32"): 0.0444, ("softmax_bwd", "bfloat16"): 0.0808},
    "h100": {("masked_fill_broadcast", "float32"): 0.0373, ("add_mixed", "float32"): 0.1619,
             ("cast_to_fp32", "float32"): 0.078, ("clone", "float32"): 0.0261,
             ("softmax", "float32"): 0.0697, ("softmax", "bfloat16"): 0.0361,
             ("softmax_bwd", "float32"): 0.0377, ("softmax_bwd", "bfloat16"): 0.0808},
}


@pytest.mark.parametrize("gpu", sorted(TODAY))
def test_torch_path_accuracy_ratchet(gpu):
    errs = _errors(MEAS / f"{gpu}_torch_paths.json", lambda r: (r["kind"], r.get("dtype")))
    for key, ratchet in TODAY[gpu].items():
        assert len(errs[key]) >= 7 and _mape(errs[key]) <= ratchet + 5e-4, key


# ---- the model ------------------------------------------------------------------------------------
@pytest.mark.parametrize("gpu", ["h200-sxm", "h100-sxm"])
def test_nonvectorized_paths_are_slower_than_the_vectorized_copy(gpu):
    dev = _dev(gpu)
    nbytes = 8e9
    assert memory_time(dev, nbytes, op="copy") < nonvectorized_time(dev, nbytes) < nonvectorized_time(dev, nbytes, cast=True)
    # on the H200 the measured broadcast masked_fill_ (2.5-2.8 TB/s) is below the generic hbm_fraction
    # meshcast assumed (3.2 TB/s); on the H100 (2.2-2.4 TB/s) slightly above it (2.2 TB/s)
    assert (nonvectorized_time(dev, nbytes) > memory_time(dev, nbytes)) == (gpu == "h200-sxm")


def test_a_profile_without_the_paths_uses_hbm_fraction():
    import dataclasses
    dev = _dev("h200-sxm")
    bare = device_model(dev.accelerator, dataclasses.replace(dev.cal, memory_op_fraction={}))
    assert nonvectorized_time(bare, 1e9, cast=True) == memory_time(bare, 1e9)


def test_fp32_softmax_costs_per_element_like_bf16_floored_by_streaming():
    """The profiles before session 39 (candidate pre39): block-kernel rows (4096): fp32 costs what bf16 costs per
    element, floored by streaming its bytes. Warp-kernel rows (2048): bf16 by the warp kernel's SM cycles (session
    23's profiles), fp32 by the bytes form its masked cost was fitted with (simulator.compute.softmax_warp_time).
    Since session 39 (m78copy: membound68's fp32 rates) fp32 block-kernel rows cost more than bf16 rows of as many
    elements."""
    from simulator.compute import ELEMENTWISE_PASSES, softmax_warp_time
    from tests.kernel_profiles import committed_before_39
    today = _dev("h200-sxm")
    assert elementwise_time(today, "softmax", 131072, 4096, "fp32") > elementwise_time(today, "softmax", 131072, 4096, "bf16")
    dev = device_model(load_accelerator("h200-sxm"), committed_before_39("h200"))
    rows, row = 131072, 4096
    fp32 = elementwise_time(dev, "softmax", rows, row, "fp32")
    assert fp32 == max(elementwise_time(dev, "softmax", rows, row, "bf16"), memory_time(dev, 8.0 * rows * row, op="copy"))
    assert fp32 < 2 * elementwise_time(dev, "softmax", rows, row, "bf16")
    row = 2048
    fp32 = elementwise_time(dev, "softmax", rows, row, "fp32")
    bytes_form = memory_time(dev, 2.0 * rows * row * ELEMENTWISE_PASSES["softmax"], op="softmax")
    assert fp32 == max(bytes_form, memory_time(dev, 8.0 * rows * row, op="copy"))
    assert elementwise_time(dev, "softmax", rows, row, "bf16") > softmax_warp_time(dev, rows, row) > 0


def test_megatron_local_attention_runs_no_mask_without_causality():
    dev = _dev("h200-sxm")
    causal = dict(unfused_torch_attention_parts(dev, 2, 16, 4, 2048, 2048, 128, "fwd", True))
    plain = dict(unfused_torch_attention_parts(dev, 2, 16, 4, 2048, 2048, 128, "fwd", False))
    assert causal["mask"] > 0 and plain["mask"] == 0 and plain["gemm"] == causal["gemm"]
    bwd = dict(unfused_torch_attention_parts(dev, 2, 16, 4, 2048, 2048, 128, "bwd", False))
    assert bwd["memcpy"] == 0 and bwd["mask"] == 0


def test_the_out_of_place_mask_clone_is_charged_only_to_old_causal_records():
    from validation.predict import harness_mask_clone_s
    dev = _dev("h200-sxm")
    rec = dict(kind="attention_fwd", backend="unfused_torch", batch=2, heads=16, seq=2048, head_dim=128, causal=True)
    assert harness_mask_clone_s(rec, dev) == memory_time(dev, 8.0 * 2 * 16 * 2048 ** 2, op="copy")
    assert harness_mask_clone_s(dict(rec, mask_inplace=True), dev) == 0.0
    assert harness_mask_clone_s(dict(rec, causal=False), dev) == 0.0


# Megatron's local pattern, never fitted: 24.8 / 19.5% (H200 sweep) and 25.0 / 18.8% (H200 seed 14)
# before session 12; 3.0 / 4.5% and 4.7 / 4.2% before session 14's masked-softmax cost (fitted on
# h200_instep_conditions.json, not on these files; H100 keeps 1.0: not measured there); session 14:
# 2.4 / 4.0, 4.0 / 3.9 (H200), 2.4 / 3.5, 2.6 / 2.7 (H100) before session 15's softmax kernel classes
# (simulator.compute.torch_softmax_kernel), which moved H100's sweep fwd+bwd from 3.5 to 3.7%
# session 23's membound42 profiles: H200 sweep 1.8 / 4.0 -> 2.0 / 4.2%, seed 14 3.1 / 3.4 -> 3.2 / 3.0%; H100 sweep
# 1.9 / 3.8 -> 2.75 / 4.4%, seed 14 1.9 / 2.5 -> 2.4 / 2.6% (H200's masked-softmax cost refitted 1.444 -> 1.422)
# session 39's adoption of m78copy (batched GEMMs at their own streaming law, the layout copies costed, fp32 softmax at
# its own rates and per-kernel mask costs, the register softmax per slot): H200 sweep 2.0 / 4.2 -> 3.0 / 3.3%, seed 14
# 3.2 / 3.0 -> 2.65 / 2.5%; H100 sweep 2.75 / 4.4 -> 3.8 / 3.6%, seed 14 2.4 / 2.6 -> 3.2 / 2.3% (the forward of both
# sweeps worse, every other figure better; registered draws 41 / 42: 2.7 -> 2.3%, 3.1 -> 2.4%)
LOCAL_TODAY = {"h200_attention_backends.json": (0.0301, 0.0328), "repeat/h200_attention_fresh14.json": (0.0265, 0.025),
               "h100_attention_backends.json": (0.0379, 0.0362), "repeat/h100_attention_fresh14.json": (0.0316, 0.0233)}


@pytest.mark.parametrize("name", sorted(LOCAL_TODAY))
def test_megatron_local_attention_within_the_target(name):
    errs = _errors(MEAS / name, lambda r: (r.get("backend"), r["kind"]))
    fwd, fwd_bwd = LOCAL_TODAY[name]
    assert _mape(errs[("unfused_torch", "attention_fwd")]) <= fwd + 5e-4 <= 0.08
    assert _mape(errs[("unfused_torch", "attention_fwd_bwd")]) <= fwd_bwd + 5e-4 <= 0.08


# ---- H100's cuDNN and memory-efficient attention (fitted on h100_attention_backends.json) -----------
H100_FRESH = {("cudnn", "attention_fwd"): 0.049, ("cudnn", "attention_fwd_bwd"): 0.056,
              # memory-efficient 9.9 / 11.7% until session 20 (per-score staging cost, refitted on
              # h100_attention_backends.json only; this draw was looked at then: development data)
              ("efficient", "attention_fwd"): 0.029, ("efficient", "attention_fwd_bwd"): 0.042,
              ("flash", "attention_fwd"): 0.106, ("flash", "attention_fwd_bwd"): 0.057,
              ("math", "attention_fwd"): 0.063, ("math", "attention_fwd_bwd"): 0.079}


def test_h100_fresh_draw_is_held_out():
    fitted = profile_fitted_on("h100-sxm")
    assert "validation/measurements/h100_attention_backends.json" in fitted
    assert not any("fresh14" in f for f in fitted)
    assert load_measurements(MEAS / "repeat" / "h100_attention_fresh14.json").info["random_seed"] == 14


def test_h100_attention_fresh_draw_ratchet():
    errs = _errors(MEAS / "repeat" / "h100_attention_fresh14.json", lambda r: (r.get("backend"), r["kind"]))
    for key, ratchet in H100_FRESH.items():
        assert len(errs[key]) >= 14 and _mape(errs[key]) <= ratchet + 5e-4, key


@pytest.mark.xfail(strict=True, reason="H100 seed-14 draw: flash forward 10.6% (memory-efficient 9.9% / 11.7% until session 20) "
                                       "(target 8% per backend)")
def test_h100_attention_fresh_draw_target():
    errs = _errors(MEAS / "repeat" / "h100_attention_fresh14.json", lambda r: (r.get("backend"), r["kind"]))
    assert all(_mape(errs[key]) <= 0.08 for key in H100_FRESH)


def test_h100_cudnn_is_faster_than_flashattention2_as_measured():
    """Measured on the H100 draw: cuDNN takes 0.55-0.75x FlashAttention-2's time; before the fit the
    H100 profile had no cuDNN parameters and costed it as FlashAttention-2."""
    from simulator.compute import attention_time
    dev = _dev("h100-sxm")
    for direction in ("fwd", "fwd_bwd"):
        cudnn = attention_time(dev, 2, 16, 4096, 4096, 128, True, 16, "cudnn", direction)
        flash = attention_time(dev, 2, 16, 4096, 4096, 128, True, 16, "flash", direction)
        assert 0.45 < cudnn / flash < 0.85, direction
