"""Attention backends as separate kernels (issue #12 item 3): the harness's case list
(validation/harness/attention_backends.py) and, with torch present, its Megatron-local pattern."""
from __future__ import annotations

import functools
import math
from pathlib import Path

import pytest
from harness_loader import load_harness

ROOT = Path(__file__).resolve().parents[1]




H = load_harness("attention_backends")


def test_case_list_is_well_formed():
    cs = H.cases()
    keys = {"set", "seq", "head_dim", "causal", "batch", "heads", "kv_heads", "backend", "direction", "layout"}
    seen = set()
    for c in cs:
        assert set(c) == keys
        assert c["set"] in ("sweep", "random")
        assert c["backend"] in H.BACKENDS and c["direction"] in ("fwd", "fwd_bwd")
        assert 512 <= c["seq"] <= 16384 and c["head_dim"] in (64, 128)
        assert all(isinstance(c[k], int) and c[k] >= 1 for k in ("batch", "heads", "kv_heads", "seq"))
        assert c["heads"] % c["kv_heads"] == 0
        assert c["layout"] == ("sbhd" if c["backend"] == "unfused_torch" else c["layout"])
        assert c["layout"] in ("bshd", "bhsd", "sbhd")
        key = tuple(sorted(c.items()))
        assert key not in seen, c
        seen.add(key)
    # every SDPA backend runs every shape, forward and forward+backward
    shapes = {tuple((k, c[k]) for k in ("set", "seq", "head_dim", "causal", "batch", "heads", "kv_heads")) for c in cs}
    for shp in shapes:
        for be in H.SDPA_BACKENDS:
            for d in ("fwd", "fwd_bwd"):
                assert dict(shp, backend=be, direction=d, layout="bshd") in cs
    assert {c["set"] for c in cs} == {"sweep", "random"}
    assert any(c["kv_heads"] < c["heads"] for c in cs if c["set"] == "sweep")
    assert {c["causal"] for c in cs} == {True, False}


def test_random_set_is_seeded_and_held_out():
    a, b = H.random_shapes(), H.random_shapes()
    assert a == b                                       # seeded: the same draw every time
    assert H.random_shapes(seed=H.RANDOM_SEED + 1) != a
    sweep = {(s["seq"], s["head_dim"], s["batch"], s["heads"]) for s in H.sweep_shapes()}
    assert not any((s["seq"], s["head_dim"], s["batch"], s["heads"]) in sweep for s in a)
    assert any(s["seq"] % 128 for s in a)              # some unaligned sequence lengths


def test_estimated_time_within_budget():
    """The whole section on one H200 at the harness's conservative rates (flash/cuDNN 200 TFLOP/s,
    efficient 100, math 30 ps per score element, backward 2.4-4.5x) fits 4 minutes with room."""
    total = H.estimate_total_s()
    assert total <= 0.75 * H.BUDGET_S, total
    for c in H.cases():
        t = H.estimate_call_s(c)
        assert 0.5e-3 <= t <= 0.2, (c, t)               # each call ~1-100 ms (a factor 2 of slack)


def test_shape_rule():
    b, h, kv = H.shape(16384, 128)
    assert (b, h, kv) == (1, 6, 6)
    b, h, kv = H.shape(1024, 64, group=4)
    assert h == 32 and kv == 8 and b * h * 1024 ** 2 == pytest.approx(H.SCORES[64], rel=0.02)
    assert H.fwd_flops(dict(batch=1, heads=2, seq=4, head_dim=8, causal=True)) == 4 * 2 * 16 * 8 * 0.5


@pytest.mark.parametrize("causal", [True, False])
def test_unfused_torch_pattern_matches_sdpa_math(causal):
    """Megatron's local pattern computes attention (GQA, both masks), in Megatron's [s, b, h, d]."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    torch.manual_seed(0)
    c = dict(batch=2, heads=4, kv_heads=2, seq=64, head_dim=32, causal=causal, backend="unfused_torch")
    q, k, v = (torch.randn(64, 2, n, 32, dtype=torch.float64).permute(1, 2, 0, 3) for n in (4, 2, 2))
    got = H.build_forward(c, q, k, v)()                               # [s, b, h, d]
    ref = F.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), is_causal=causal)
    assert torch.allclose(got.permute(1, 2, 0, 3), ref, atol=1e-5)
    assert math.isfinite(float(got.abs().sum()))


def test_small_run_on_cpu(tmp_path):
    """The whole GPU path on CPU with tiny shapes: every case gives a timed or an unsupported record."""
    pytest.importorskip("torch")
    import json
    import subprocess
    import sys
    out = tmp_path / "a.json"
    subprocess.run([sys.executable, str(ROOT / "validation" / "harness" / "attention_backends.py"), "--small",
                    "--out", str(out)], check=True, capture_output=True, timeout=300)
    recs = json.loads(out.read_text())["records"]
    assert len(recs) == len(H.cases(small=True))
    for r in recs:
        assert (r["time_s"] is None) == bool(r.get("unsupported") or r.get("oom")), r
        if r.get("unsupported"):
            assert r["reason"]


# ---- the model: simulator/compute.py attention_time per backend --------------------------------

def _dev(acc="h100-sxm", sustained=False, cal=None):
    from hardware_specs.catalog import load_accelerator
    from simulator.calibration import load_calibration
    from simulator.compute import DeviceModel
    return DeviceModel(load_accelerator(acc), cal or load_calibration(acc.replace("-pcie", "-sxm")), sustained=sustained)


def _tflops(dev, backend, seq, head_dim=128, causal=False, direction="fwd", heads=None):
    """TFLOP/s at the FA3 paper's benchmark shapes: batch x seq = 16k tokens, heads x head_dim = 2048."""
    from simulator.compute import attention_flops, attention_time
    heads = heads or 2048 // head_dim
    b = 16384 // seq
    f = attention_flops(b, heads, seq, seq, head_dim, causal) * {"fwd": 1.0, "bwd": 2.5, "fwd_bwd": 3.5}[direction]
    return f / attention_time(dev, b, heads, seq, seq, head_dim, causal, heads, backend, direction) / 1e12


@pytest.mark.parametrize("acc", ["h100-sxm", "h200-sxm"])
@pytest.mark.parametrize("direction", ["fwd", "fwd_bwd"])
def test_math_slower_than_fused_at_long_sequences(acc, direction):
    """The math backend materialises the s x s scores in fp32 (Θ(s²) HBM bytes, fp32 GEMMs): at 4k+
    tokens it is several times slower than every fused kernel (h200_kernels.json: 10-30x)."""
    dev = _dev(acc)
    for seq in (4096, 16384):
        math_t = _tflops(dev, "math", seq, direction=direction)
        for be in ("flash", "cudnn", "efficient", "fa3"):
            # memory-efficient attention is the slowest fused kernel: h200_attention_backends.json
            # measures math 3.8-3.9x its time (non-causal forward+backward), 6.5-16x elsewhere
            bound = 3 if be == "efficient" else 4
            assert _tflops(dev, be, seq, direction=direction) > bound * math_t, (be, seq)


def test_unfitted_kernels_are_costed_as_flashattention2():
    """cuDNN and memory-efficient attention without fitted parameters cost exactly what the measured
    FlashAttention-2 costs; once parameters are fitted they have their own model."""
    import dataclasses
    from simulator.compute import attention_time
    bare = dataclasses.replace(_dev("h200-sxm").cal, attention_kernel_fraction={}, attention_kernel_overlap={},
                               attention_kernel_overhead={}, attention_kernel_score_ops={})
    dev = _dev("h200-sxm", cal=bare)
    for be in ("cudnn", "efficient"):
        for causal in (True, False):
            a = attention_time(dev, 2, 16, 4096, 4096, 128, causal, 8, be, "fwd_bwd")
            assert a == attention_time(dev, 2, 16, 4096, 4096, 128, causal, 8, "flash", "fwd_bwd")
    cal = dataclasses.replace(dev.cal, attention_kernel_fraction={"cudnn_fwd": 0.7, "cudnn_bwd": 0.5})
    fitted = _dev("h200-sxm", cal=cal)
    assert attention_time(fitted, 2, 16, 4096, 4096, 128, True, 16, "cudnn") != attention_time(
        fitted, 2, 16, 4096, 4096, 128, True, 16, "flash")


def test_hopper_designs_are_flashattention2_before_hopper():
    """FA3 and cuDNN's Hopper kernels need WGMMA/TMA: on an A100 they are costed as FlashAttention-2
    (Transformer Engine prefers cuDNN only on sm >= 90, and runs FA2 on Ampere)."""
    from simulator.compute import attention_time
    dev = _dev("a100-80gb-sxm", cal=_dev("h100-sxm").cal)
    for be in ("fa3", "cudnn"):
        assert attention_time(dev, 1, 16, 8192, 8192, 128, True, 16, be) == attention_time(
            dev, 1, 16, 8192, 8192, 128, True, 16, "flash")


def test_causal_costs_about_half_at_long_sequences():
    """A causal kernel skips the key blocks above the diagonal: at 16k about half the time."""
    from simulator.compute import attention_time
    dev = _dev("h100-sxm")
    for be in ("fa3", "flash"):
        full = attention_time(dev, 1, 16, 16384, 16384, 128, False, 16, be)
        causal = attention_time(dev, 1, 16, 16384, 16384, 128, True, 16, be)
        assert 0.45 < causal / full < 0.62, be


# FlashAttention-3 forward, H100 SXM, BF16, head_dim 128, 16 heads, batch x seq = 16k tokens (the FA3
# paper's benchmark shapes), non-causal, TFLOP/s: pytorch/benchmark PR #2391 (commit ff65cb6, "Fix
# dimension order for FlashAttention-3"), test plan table, column flash_v3-tflops. Test data only:
# nothing in meshcast is fitted on FA3.
FA3_PUBLISHED_FWD_HD128 = {512: 430.32, 1024: 517.099, 2048: 565.544, 4096: 590.233, 8192: 614.234, 16384: 620.73}


def test_fa3_forward_against_published_h100_figures():
    """meshcast's FA3 design model (GEMM efficiency of the tensor cores, the softmax hidden under the
    other warpgroup's GEMMs, FA3's 128 x 176 tiles, persistent scheduling) at the sustained
    (power-limited) clock of a benchmark loop is within +20% of the published figures at every
    length, and never below them: the model is optimistic by 11-15% (FA3's own ablation reaches
    661 TFLOP/s, 67% of peak, where the model's tensor cores run at the 84% of a cuBLAS GEMM)."""
    dev = _dev("h100-sxm", sustained=True)
    for seq, published in FA3_PUBLISHED_FWD_HD128.items():
        err = _tflops(dev, "fa3", seq) / published - 1
        assert 0.0 <= err <= 0.20, (seq, err)


def test_fa3_over_flashattention2_forward_speedup():
    """Shah et al. 2024 (abstract, §4.1): FA3 forward is 1.5-2.0x FlashAttention-2 on H100. meshcast's
    FA3 over its FlashAttention-2 (fitted on torch's FA2 on an H100) at head_dim 128, 2k-16k tokens:
    within 1.5x and 2.0x + 15% (the model's FA3 optimism above; causal 2k is the largest, 2.26x)."""
    dev = _dev("h100-sxm")
    for causal in (False, True):
        for seq in (2048, 4096, 8192, 16384):
            ratio = _tflops(dev, "fa3", seq, causal=causal) / _tflops(dev, "flash", seq, causal=causal)
            assert 1.5 <= ratio <= 2.3, (causal, seq, ratio)


@pytest.mark.xfail(strict=True, reason="the FA3 backward model is optimistic: 2.3x FA2 where the paper "
                                       "reports 1.5-1.75x (dQ atomics and register pressure are not modelled)")
def test_fa3_over_flashattention2_backward_speedup():
    """Shah et al. 2024: FA3's backward is 1.5-1.75x FlashAttention-2's on H100."""
    dev = _dev("h100-sxm")
    for seq in (4096, 16384):
        ratio = _tflops(dev, "fa3", seq, direction="bwd") / _tflops(dev, "flash", seq, direction="bwd")
        assert 1.5 <= ratio <= 1.75 * 1.1, (seq, ratio)


def test_frameworks_pick_the_backend_their_kernels_run():
    """megatron-core (Transformer Engine) defaults to cuDNN fused attention (TE's get_attention_backend
    prefers FusedAttention over FlashAttention on sm >= 90); torch-native frameworks run SDPA."""
    from simulator.frameworks import get_framework
    assert get_framework("megatron-core").default_attention == "cudnn"
    assert "fa3" in get_framework("megatron-core").kernels.attention
    for fw in ("torchtitan", "pytorch"):
        k = get_framework(fw).kernels.attention
        assert {"flash", "cudnn", "efficient", "math"} <= set(k)
        # SDPA's own choice on Hopper (info.sdpa_default of h200_attention_backends.json: cudnn everywhere)
        assert get_framework(fw).default_attention == "cudnn"
    assert get_framework("megatron-core-local").default_attention == "unfused"


def test_megatron_export_names_the_attention_backend():
    """The Megatron launch config asks for the kernel meshcast costed, and reads it back."""
    from models.catalog import load_model
    from simulator.frameworks.megatron_config import megatron_arguments, read_config
    from simulator.plan import ParallelPlan, resolve_plan
    model = load_model("llama3-8b")
    want = {"cudnn": "auto", "fa3": "flash", "flash": "flash", "unfused": "unfused"}
    for attention, flag in want.items():
        plan = resolve_plan(model, ParallelPlan(framework="megatron-core", attention=attention, mbs=1, gbs=8), 8)
        args = megatron_arguments(model, plan)[0]
        assert args[args.index("--attention-backend") + 1] == flag
    text = "torchrun pretrain_gpt.py --attention-backend fused --micro-batch-size 1 --global-batch-size 8"
    assert read_config(text, model, 8).plan.attention == "cudnn"


def _synthetic_file(tmp_path, truth):
    """The harness's cases 'measured' by meshcast itself under calibration ``truth`` (2% noise):
    what validation/harness/attention_backends.py will write, with known parameters behind it."""
    import json
    import random as _random
    from validation.hardware import hardware_for
    from validation.predict import predict_record
    from validation.records import MeasurementFile
    info = {"gpu": "NVIDIA H200", "sm_count": 132}
    hw = hardware_for(MeasurementFile("x", info, []))
    rng = _random.Random(3)
    recs = []
    for c in H.cases():
        if c["backend"] not in ("cudnn", "efficient", "flash"):
            continue
        rec = dict(kind="attention_fwd_bwd" if c["direction"] == "fwd_bwd" else "attention_fwd", batch=c["batch"],
                   heads=c["heads"], seq=c["seq"], head_dim=c["head_dim"], causal=c["causal"], backend=c["backend"],
                   set=c["set"], layout=c["layout"])
        if c["kv_heads"] != c["heads"]:
            rec["kv_heads"] = c["kv_heads"]
        rec["time_s"] = predict_record(rec, hw, truth).time_s * math.exp(rng.gauss(0, 0.02))
        recs.append(rec)
    recs.append(dict(recs[0], time_s=None, unsupported=True, reason="refused"))   # a refusal is skipped
    path = tmp_path / "h200_attention_backends.json"
    path.write_text(json.dumps({"info": info, "records": recs}))
    return path, hw


def test_fit_recovers_cudnn_and_efficient_parameters(tmp_path):
    """The fit path the real data will take (meshcast calibrate's compute fit): parameters of cuDNN
    and memory-efficient attention behind synthetic records are recovered; the random set and the
    refused shapes are not fitted."""
    import dataclasses
    from simulator.calibration import load_calibration
    from validation.calibrate import calibrate
    from validation.records import load_measurements
    start = load_calibration("h200-sxm")
    truth = dataclasses.replace(
        start, attention_kernel_fraction={"cudnn_fwd": 0.62, "cudnn_bwd": 0.45, "efficient_fwd": 0.40,
                                          "efficient_bwd": 0.28},
        attention_kernel_overlap={"cudnn": 0.6, "efficient": 0.1}, attention_kernel_overhead={"cudnn": 2.0, "efficient": 1.0})
    path, hw = _synthetic_file(tmp_path, truth)
    mf = load_measurements(path)
    report = calibrate([(mf, hw)], "synthetic", start=start)
    cal = report.calibration
    # the forward's parameters are recovered; the backward is seen only inside forward+backward
    # records, where its exponentials are a small share of a tile: its overlap, overhead and fraction
    # trade off along a ridge (this truth, overlap 0.6, fits as overlap 0 and a 10% higher fraction),
    # so only its fraction is checked, loosely, and the predictions below (held out) are what count.
    # Memory-efficient's forward has two per-tile terms since session 20, its tensor-core fraction and
    # its per-score staging (attention_kernel_score_ops): with 2% noise they trade off along a ridge
    # (0.35-0.36 and 18-19 ops for a truth of 0.40 and 20), so what the records determine is checked
    # at the same 5%: its forward time at head_dim 64 and 128 (the two tile shapes of the sweep)
    assert cal.attention_kernel_fraction["cudnn_fwd"] == pytest.approx(truth.attention_kernel_fraction["cudnn_fwd"],
                                                                       rel=0.05)
    from simulator.compute import attention_time
    for d, heads in ((64, 32), (128, 16)):
        for causal in (False, True):
            fit_t, true_t = (attention_time(_dev("h200-sxm", cal=c), 4, heads, 4096, 4096, d, causal, heads,
                                            "efficient", "fwd") for c in (cal, truth))
            assert fit_t == pytest.approx(true_t, rel=0.05), (d, causal)
    for key in ("cudnn_bwd", "efficient_bwd"):
        assert cal.attention_kernel_fraction[key] == pytest.approx(truth.attention_kernel_fraction[key], rel=0.15), key
    n_random = sum(1 for r in mf.records if r.get("set") == "random")
    n_sweep = sum(1 for r in mf.records if r.get("set") == "sweep" and r.get("time_s"))
    assert n_random > 0 and report.fits["compute"].n_records <= n_sweep
    held = {s.kind: s for s in report.held_out}
    assert held["attention_fwd"].mape < 0.05 and held["attention_fwd_bwd"].mape < 0.05
    assert held["attention_fwd"].mape < 0.04 and held["attention_fwd_bwd"].mape < 0.04   # 2% noise
    assert cal.attention_kernel_overhead["cudnn_fwd"] == pytest.approx(truth.attention_kernel_overhead["cudnn"], abs=0.3)
    assert cal.attention_kernel_overlap["cudnn_fwd"] == pytest.approx(truth.attention_kernel_overlap["cudnn"], abs=0.1)


def test_backend_table_groups_by_backend_and_set(tmp_path):
    """validation/attention_backends.py: per backend, direction and set, with refusals counted."""
    import dataclasses
    from simulator.calibration import load_calibration
    from validation.attention_backends import backend_table
    truth = dataclasses.replace(load_calibration("h200-sxm"), attention_kernel_fraction={"cudnn_fwd": 0.6})
    path, _ = _synthetic_file(tmp_path, truth)
    rows = {(r["backend"], r["kind"], r["set"]): r for r in backend_table([str(path)], "h200-sxm")}
    assert {k[2] for k in rows} == {"sweep", "random"}
    assert sum(r["refused"] for r in rows.values()) == 1
    assert rows[("flash", "attention_fwd", "sweep")]["mape"] < 0.05        # flash: same model as the truth
    assert rows[("cudnn", "attention_fwd", "random")]["count"] == sum(
        1 for c in H.cases() if (c["backend"], c["direction"], c["set"]) == ("cudnn", "fwd", "random"))


def test_fa3_is_never_fitted():
    """No calibration parameter is FA3's own: its model takes only what GEMM and FlashAttention-2
    records fitted (the GEMM efficiency, the exp rate, launch cost, the sustained clock)."""
    import dataclasses
    from simulator.compute import attention_time
    from validation.fit import COMPUTE_PARAMS
    assert not [p.path for p in COMPUTE_PARAMS if "fa3" in p.path]
    dev = _dev("h100-sxm")
    cal = dataclasses.replace(dev.cal, attention_kernel_fraction={"fa3_fwd": 0.1, "fa3_bwd": 0.1},
                              attention_kernel_overlap={"fa3": 0.0}, attention_kernel_overhead={"fa3": 9.0})
    assert attention_time(_dev("h100-sxm", cal=cal), 1, 16, 8192, 8192, 128, True, 16, "fa3", "fwd_bwd") == \
        attention_time(dev, 1, 16, 8192, 8192, 128, True, 16, "fa3", "fwd_bwd")


# ---- accuracy on the measured H200 (validation/measurements/h200_attention_backends*.json) ------
# MAPE per backend x direction x set with the committed h200-sxm profile (cudnn and efficient fitted
# on the sweep, four in five of its records; the random set held out; flash, math and unfused_torch
# not fitted on these files: flash and math were fitted on h200_kernels.json, a separate earlier run).
# The target: <= 8% per backend on a fresh run. Met: asserted. Not met: a ratchet at today's
# figure and a strict xfail of the target (docs/validation.md, docs/measurements.md).
ATTENTION_TARGET = 0.08
ATTENTION_TODAY = {
    ("cudnn", "attention_fwd", "sweep"): 0.043, ("cudnn", "attention_fwd", "random"): 0.036,
    ("cudnn", "attention_fwd_bwd", "sweep"): 0.039, ("cudnn", "attention_fwd_bwd", "random"): 0.079,
    # memory-efficient 8.8 / 8.2 / 10.1 / 10.7% until session 20, which costs its per-score shared-memory staging
    # (attention_kernel_score_ops, refitted on the same sweep records)
    ("efficient", "attention_fwd", "sweep"): 0.040, ("efficient", "attention_fwd", "random"): 0.039,
    ("efficient", "attention_fwd_bwd", "sweep"): 0.043, ("efficient", "attention_fwd_bwd", "random"): 0.032,
    # flash 9.2 / 6.8 / 5.8 / 3.7% until session 19 costed FA2's forward with its own tiles and its blocks
    # handed to SMs in launch order (simulator.compute._flash_fwd_pass)
    ("flash", "attention_fwd", "sweep"): 0.043, ("flash", "attention_fwd", "random"): 0.065,
    ("flash", "attention_fwd_bwd", "sweep"): 0.056, ("flash", "attention_fwd_bwd", "random"): 0.029,
    # math 8.8 / 8.4 / 3.7 / 5.3% until session 42 (candidate math42, adopted on registered draws 47 / 48): the
    # backend's kernels as it runs them (simulator.compute.math_attention_parts), its GEMMs on the CUDA cores
    ("math", "attention_fwd", "sweep"): 0.021, ("math", "attention_fwd", "random"): 0.019,
    ("math", "attention_fwd_bwd", "sweep"): 0.020, ("math", "attention_fwd_bwd", "random"): 0.022,
    # Megatron local 24.8 / 19.5% until session 12: masked_fill_ at its measured non-vectorized rate, the fp32
    # softmax per element, no mask without causality, and the suite's out-of-place mask clone counted;
    # 3.0 / 4.5% until session 14, which costs the softmax forward's masked scores (softmax_masked_cost)
    ("unfused_torch", "attention_fwd", "sweep"): 0.024, ("unfused_torch", "attention_fwd_bwd", "sweep"): 0.040,
}


@functools.lru_cache(maxsize=None)
def _measured_table() -> dict:
    from validation.attention_backends import backend_table
    files = sorted(str(p) for p in (ROOT / "validation" / "measurements").glob("h200_attention_backends*.json"))
    return {(r["backend"], r["kind"], r["set"]): r for r in backend_table(files, "h200-sxm")}


@pytest.mark.parametrize("key,today", ATTENTION_TODAY.items(), ids=["-".join(k) for k in ATTENTION_TODAY])
def test_attention_backend_accuracy_ratchet(key, today):
    """Per backend, direction and set: the target where met, else today's figure (+0.1 point)."""
    assert _measured_table()[key]["mape"] <= max(ATTENTION_TARGET, today + 0.001)


@pytest.mark.parametrize("key", [k for k, v in ATTENTION_TODAY.items() if v > ATTENTION_TARGET],
                         ids=["-".join(k) for k, v in ATTENTION_TODAY.items() if v > ATTENTION_TARGET])
@pytest.mark.xfail(strict=True, reason="above the issue's 8% per backend (figures in ATTENTION_TODAY)")
def test_attention_backend_accuracy_target(key):
    assert _measured_table()[key]["mape"] <= ATTENTION_TARGET


def test_fitted_cudnn_is_faster_than_flashattention2_on_h200():
    """Measured on the H200: FlashAttention-2 takes 1.4-2.5x cuDNN's time forward, 1.3-2.0x
    forward+backward; the fitted model keeps cuDNN ahead of FA2 and behind meshcast's FA3 design."""
    dev = _dev("h200-sxm")
    for seq in (2048, 8192):
        for direction in ("fwd", "fwd_bwd"):
            cudnn, flash = _tflops(dev, "cudnn", seq, direction=direction), _tflops(dev, "flash", seq, direction=direction)
            assert 1.3 <= cudnn / flash <= 2.1, (seq, direction, cudnn / flash)
            assert cudnn < _tflops(dev, "fa3", seq, direction=direction)


def test_restricted_calibrate_moves_only_the_named_parameters(tmp_path):
    """meshcast calibrate --only attention_kernels --start PROFILE: cuDNN's and memory-efficient
    attention's parameters are fitted; every other parameter (GEMM, FlashAttention-2, memory-bound,
    collectives, host) keeps the start profile's value, and the written profile keeps its provenance."""
    import dataclasses
    import yaml
    from meshcast.cli import main
    from simulator.calibration import load_calibration
    start = load_calibration("h200-sxm")
    truth = dataclasses.replace(start, attention_kernel_fraction={"cudnn_fwd": 0.7, "cudnn_bwd": 0.5,
                                                                  "efficient_fwd": 0.3, "efficient_bwd": 0.2},
                                attention_kernel_overlap={"cudnn": 0.5, "efficient": 0.0},
                                attention_kernel_overhead={"cudnn": 1.0, "efficient": 0.5},
                                attention_fwd_fraction=0.2)    # flash records off the start: must not move it
    path, _ = _synthetic_file(tmp_path, truth)
    out = tmp_path / "h200-sxm.yaml"
    assert main(["calibrate", "--measurements", str(path), "--start", "h200-sxm", "--only", "attention_kernels",
                 "-o", str(out)]) == 0
    fitted = load_calibration(str(out))
    same = {k: v for k, v in start.to_dict().items() if not k.startswith("attention_kernel_") and k != "name"}
    assert {k: v for k, v in fitted.to_dict().items() if k in same} == same
    assert fitted.attention_kernel_fraction["cudnn_fwd"] == pytest.approx(0.7, rel=0.05)
    doc = yaml.safe_load(out.read_text())
    assert "compute" in doc["fits"] and "compute[attention_kernels]" in doc["fits"]
    assert str(path) in doc["fitted_on"] and len(doc["fitted_on"]) > 1
    # without --start there is no profile to keep the other parameters at; an unknown group is refused
    assert main(["calibrate", "--measurements", str(path), "--only", "attention_kernels", "-o", str(tmp_path / "x.yaml")]) == 2
    assert main(["calibrate", "--measurements", str(path), "--start", "h200-sxm", "--only", "nonsense",
                 "-o", str(tmp_path / "x.yaml")]) == 2


# ---- FlashAttention-2 forward: its tiles and its block schedule (session 19) --------------------

def test_fa2_forward_tiles_are_pytorchs():
    """flash_fwd_launch_template.h (PyTorch's FA2, the A100/H100 branch without dropout): head_dim 64
    runs 128 x 128 tiles, 128 runs 128 x 64."""
    from simulator.compute import fa2_fwd_tile
    assert fa2_fwd_tile(64) == (128, 128) and fa2_fwd_tile(128) == (128, 64) and fa2_fwd_tile(256) == (64, 64)


def test_list_schedule_equal_blocks_fill_whole_waves():
    """Equal blocks on 132 SMs holding two each, sharing an SM's rate: 132 blocks run alone (one block's
    time), 264 share every SM (two blocks' time), one more than 264 starts a third round on one SM."""
    from simulator.compute import list_schedule
    assert list_schedule((1.0,), 132, 0.0, 132, 2) == pytest.approx(1.0)
    assert list_schedule((1.0,), 264, 0.0, 132, 2) == pytest.approx(2.0)
    assert list_schedule((1.0,), 265, 0.0, 132, 2) == pytest.approx(3.0)
    # overhead adds to every block
    assert list_schedule((1.0,), 132, 0.5, 132, 2) == pytest.approx(1.5)


def test_list_schedule_light_first_causal_blocks_end_on_a_tail():
    """A causal head's query blocks grow 1, 2, ..., n tiles and launch light-first (m_block =
    blockIdx.x): with few heads the heaviest blocks start last and the launch ends on a tail well
    past the balanced time; the same blocks launched heavy-first end close to it."""
    from simulator.compute import list_schedule
    light_first = tuple(range(1, 257))
    balanced = 6 * sum(light_first) / 132
    tail = list_schedule(light_first, 6, 0.0, 132, 2)
    assert tail > 1.15 * balanced
    assert list_schedule(light_first[::-1], 6, 0.0, 132, 2) < 1.05 * balanced
    # many heads: the tail is a small part of a long launch
    assert list_schedule(light_first, 96, 0.0, 132, 2) < 1.05 * 96 * sum(light_first) / 132


def _flash_sweep(seq, head_dim, heads, batch, causal):
    import json
    recs = json.loads((ROOT / "validation" / "measurements" / "h200_attention_backends.json").read_text())["records"]
    return [r["time_s"] for r in recs if r.get("backend") == "flash" and r["kind"] == "attention_fwd"
            and r.get("set") == "sweep" and r.get("layout") == "bshd" and (r["seq"], r["head_dim"], r["heads"],
                                                                           r["batch"], r["causal"]) ==
            (seq, head_dim, heads, batch, causal) and "kv_heads" not in r][0]


@pytest.mark.parametrize("seq,heads", [(16384, 6), (8192, 16)])
def test_flash_causal_forward_with_few_heads_pays_its_tail(seq, heads):
    """Measured on the H200 (sweep, b1, head_dim 128): causal forward takes 0.62-0.66 of the
    non-causal time at 8k-16k with 6-16 heads, not the ~0.5 the kept scores give. The model's ratio,
    from its block schedule, is within 8% of the measured one (it was 0.52-0.53 before session 19)."""
    from simulator.compute import attention_time
    dev = _dev("h200-sxm")
    measured = _flash_sweep(seq, 128, heads, 1, True) / _flash_sweep(seq, 128, heads, 1, False)
    model = (attention_time(dev, 1, heads, seq, seq, 128, True, heads, "flash")
             / attention_time(dev, 1, heads, seq, seq, 128, False, heads, "flash"))
    assert model == pytest.approx(measured, rel=0.08)
    assert model > 0.58


def test_preregistration_round_trip(tmp_path):
    """validation/prereg_attention.py: the registered cases are the harness's fresh draw, every one
    predicted; a run that measured exactly the registered times scores 0% on every backend, and a
    case the GPU refused is counted as refused, not scored."""
    import json
    from validation.prereg_attention import read_prereg, score, write
    reg = tmp_path / "prereg.txt"
    n = write(7, 3, "h200-sxm", "NVIDIA H200", str(reg), 240.0)
    assert n == len(H.fresh_cases(7, 3))
    text = reg.read_text()
    assert "seed: 7" in text and "--fresh-seed 7 --fresh-n 3" in text and "model commit:" in text
    registered = read_prereg(str(reg))
    assert len(registered) == n and all(t is not None and t > 0 for t in registered.values())
    cols = ("backend", "kind", "batch", "heads", "kv_heads", "seq", "head_dim", "causal", "layout")
    recs = []
    for key, t in registered.items():
        r = dict(zip(cols, key))
        r.update({k: int(r[k]) for k in ("batch", "heads", "kv_heads", "seq", "head_dim")}, causal=r["causal"] == "1",
                 time_s=t, set="random")
        recs.append(r)
    recs[0] = dict(recs[0], time_s=None, unsupported=True)
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"info": {"gpu": "NVIDIA H200"}, "records": recs}))
    res = score(str(reg), str(run))
    assert all(v["mape"] < 1e-6 for v in res["table"].values())
    assert sum(res["refused"].values()) == 1 and not res["missing"]


# ---- the pre-registered seed-19 fresh run (session 19; logs/prereg_attention19_h200*.txt) ---------
FRESH19 = ROOT / "validation" / "measurements" / "h200_attention_fresh19.json"
PREREG19 = ROOT / "validation" / "measurements" / "logs" / "prereg_attention19_h200.txt"
PREREG19_FA2 = ROOT / "validation" / "measurements" / "logs" / "prereg_attention19_h200_fa2sched.txt"


def _fresh19(prereg):
    from validation.prereg_attention import score
    return score(str(prereg), str(FRESH19))


def test_fresh19_as_pre_registered():
    """H200, seed 19, 64 shapes never measured before, predicted by the model of efbb5bf before the
    run: pooled forward and forward+backward MAPE cuDNN 5.2%, flash 6.4%, math 6.1%, Megatron's local
    pattern 2.6%, memory-efficient 10.9% (it refused the 34 GQA shapes). Ratchets as registered."""
    s = _fresh19(PREREG19)
    t = s["table"]
    quoted = {"cudnn": 0.052, "flash": 0.064, "math": 0.061, "unfused_torch": 0.026, "efficient": 0.109}
    for backend, mape in quoted.items():
        assert t[(backend, "pooled")]["mape"] <= mape + 0.0005, backend
    assert t[("cudnn", "pooled")]["count"] == t[("flash", "pooled")]["count"] == 128
    assert not s["missing"]


def test_fresh19_fa2_schedule_candidate_beats_todays_flash():
    """The FA2 launch-order candidate (branch attn-fresh-19-fa2sched, adopted in session 20 on this
    result; it moved two step-level ratchets by 0.05-0.6 point) was pre-registered beside the model of
    the time: flash forward 7.5% ->
    6.2%, forward+backward 5.4% -> 4.5% on this run, no other backend changed."""
    today, cand = _fresh19(PREREG19)["table"], _fresh19(PREREG19_FA2)["table"]
    assert cand[("flash", "pooled")]["mape"] <= 0.054 < today[("flash", "pooled")]["mape"]
    for backend in ("cudnn", "math", "efficient", "unfused_torch"):
        assert cand[(backend, "pooled")]["mape"] == pytest.approx(today[(backend, "pooled")]["mape"])


@pytest.mark.xfail(strict=True, reason="memory-efficient 10.9% on the pre-registered seed-19 run (its head_dim split is not modelled)")
def test_fresh19_every_backend_meets_the_target():
    t = _fresh19(PREREG19)["table"]
    assert all(v["mape"] <= 0.08 for (b, k), v in t.items() if k == "pooled")


def test_fresh19_memory_efficient_after_session_20_development_data():
    """Session 20 (branch memeff-20) looked at the seed-19 run while finding the memory-efficient
    kernel's per-score staging cost, so seed 19 is development data for it, no longer a test. Today's
    model (not the registration above) on it: memory-efficient 10.9% -> 4.8% pooled (forward 4.4%,
    forward+backward 5.2%); no other backend's prediction changed."""
    from validation.prereg_attention import predictions
    measured = {}
    from validation.prereg_attention import record_key
    from validation.records import load_measurements
    for r in load_measurements(str(FRESH19)).records:
        if r.get("backend") == "efficient" and r.get("time_s"):
            measured[record_key(r)] = r["time_s"]
    errs = {"attention_fwd": [], "attention_fwd_bwd": []}
    for rec, t in predictions(19, 64, "h200-sxm", "NVIDIA H200"):
        if record_key(rec) in measured:
            errs[rec["kind"]].append(abs(t / measured[record_key(rec)] - 1))
    pooled = errs["attention_fwd"] + errs["attention_fwd_bwd"]
    assert len(pooled) == 60
    assert sum(errs["attention_fwd"]) / 30 <= 0.044 + 0.0005
    assert sum(errs["attention_fwd_bwd"]) / 30 <= 0.052 + 0.0005
    assert sum(pooled) / 60 <= 0.048 + 0.0005


PREREG20 = ROOT / "validation" / "measurements" / "logs" / "prereg_attention20_h200.txt"
PREREG20_FA2 = ROOT / "validation" / "measurements" / "logs" / "prereg_attention20_h200_fa2.txt"
FRESH20 = ROOT / "validation" / "measurements" / "h200_attention_fresh20.json"
PREREG21 = ROOT / "validation" / "measurements" / "logs" / "prereg_attention21_h100.txt"
FRESH21 = ROOT / "validation" / "measurements" / "h100_attention_fresh21.json"
# session 23: seeds 22 (H200) and 23 (H100), registered by 9feff29 (the membound42 / gemm32 profiles adopted)
PREREG22 = ROOT / "validation" / "measurements" / "logs" / "prereg_attention22_h200.txt"
FRESH22 = ROOT / "validation" / "measurements" / "h200_attention_fresh22.json"
PREREG23 = ROOT / "validation" / "measurements" / "logs" / "prereg_attention23_h100.txt"
FRESH23 = ROOT / "validation" / "measurements" / "h100_attention_fresh23.json"
def _repeat_draw(seed: int, gpu: str) -> tuple[Path, Path]:
    """(registration log, run file in repeat/) of the fresh attention draw ``seed`` on ``gpu``."""
    meas = ROOT / "validation" / "measurements"
    return meas / "logs" / f"prereg_attention{seed}_{gpu}.txt", meas / "repeat" / f"{gpu}_attention_fresh{seed}.json"


# session 37: seeds 37 (H100, measured in session 37) and 38 (H200, session 38), registered in c904724 by the
# code of 6d48275; session 38: seeds 39 (H200) and 40 (H100), registered in a3082aa by the code of fdbfcbd (with
# candidates m76bmm and m76copy beside the committed model); session 39: seeds 41 (H200) and 42 (H100), registered
# in dfaf03f by the code of 157d98b (candidates m76copy and m78copy beside it; m78copy adopted after:
# tests/test_m76copy_candidate.py), and seeds 43 (H200) and 44 (H100), registered in 6b4737b at 44bdefb (the model
# of 1f1a57a: m78copy adopted); runs in repeat/
REPEAT_DRAWS = {"37": ("h100", "6d48275"), "38": ("h200", "6d48275"), "39": ("h200", "fdbfcbd"),
                "40": ("h100", "fdbfcbd"), "41": ("h200", "157d98b"), "42": ("h100", "157d98b"),
                "43": ("h200", "44bdefb"), "44": ("h100", "44bdefb")}     # seed: (gpu, model commit in the log)
# pooled forward and forward+backward MAPE per backend, as registered (session 21's runs)
AS_REGISTERED = {
    "20": {"cudnn": 0.0541, "efficient": 0.0436, "flash": 0.0798, "math": 0.0583, "unfused_torch": 0.0326},
    "20_fa2": {"cudnn": 0.0541, "efficient": 0.0436, "flash": 0.0518, "math": 0.0583, "unfused_torch": 0.0326},
    "21": {"cudnn": 0.0524, "efficient": 0.0388, "flash": 0.0566, "math": 0.0611, "unfused_torch": 0.0308},
    "22": {"cudnn": 0.0466, "efficient": 0.0376, "flash": 0.0529, "math": 0.0599, "unfused_torch": 0.0345},
    "23": {"cudnn": 0.0455, "efficient": 0.0429, "flash": 0.0559, "math": 0.0607, "unfused_torch": 0.0261},
    "37": {"cudnn": 0.0477, "efficient": 0.0262, "flash": 0.0520, "math": 0.0567, "unfused_torch": 0.0349},
    "38": {"cudnn": 0.0523, "efficient": 0.0422, "flash": 0.0646, "math": 0.0679, "unfused_torch": 0.0323},
    "39": {"cudnn": 0.0516, "efficient": 0.0369, "flash": 0.0503, "math": 0.0541, "unfused_torch": 0.0275},
    "40": {"cudnn": 0.0567, "efficient": 0.0377, "flash": 0.0431, "math": 0.0621, "unfused_torch": 0.0312},
    "41": {"cudnn": 0.0427, "efficient": 0.0310, "flash": 0.0494, "math": 0.0568, "unfused_torch": 0.0272},
    "42": {"cudnn": 0.0472, "efficient": 0.0374, "flash": 0.0563, "math": 0.0631, "unfused_torch": 0.0312},
    "43": {"cudnn": 0.0507, "efficient": 0.0372, "flash": 0.0642, "math": 0.0695, "unfused_torch": 0.0536},
    "44": {"cudnn": 0.0499, "efficient": 0.0558, "flash": 0.0693, "math": 0.0753, "unfused_torch": 0.0249},
}
REGISTRATIONS = {"20": (PREREG20, FRESH20, "0492bc2"), "20_fa2": (PREREG20_FA2, FRESH20, "5a66076"),
                 "21": (PREREG21, FRESH21, "7370b04"), "22": (PREREG22, FRESH22, "9feff29"),
                 "23": (PREREG23, FRESH23, "9feff29"),
                 **{seed: (*_repeat_draw(int(seed), gpu), commit) for seed, (gpu, commit) in REPEAT_DRAWS.items()}}


@pytest.mark.parametrize("name", sorted(REGISTRATIONS))
def test_fresh_runs_as_registered(name):
    """Session 21: seed 20 on one H200 (registered in session 20 twice: by the model of 0492bc2 and by
    5a66076, the FA2 forward schedule adopted since) and seed 21 on one H100 (registered at the start of
    session 21 by 7370b04, today's model), each on a machine lent after its registration, 64 shapes
    never measured before. Every backend within the 8% target of issue #12 under today's model: H200
    cuDNN 5.4%, flash 5.2%, memory-efficient 4.4%, math 5.8%, Megatron's local pattern 3.3%; H100
    5.2 / 5.7 / 3.9 / 6.1 / 3.1%. The older H200 registration had flash at 8.0% (the FA2 schedule
    was adopted on seed 19's evidence, before this run). Ratchets at the registered figures."""
    from validation.prereg_attention import read_prereg, score
    prereg, run, commit = REGISTRATIONS[name]
    assert f"model commit: {commit}" in prereg.read_text()
    s = score(str(prereg), str(run))
    assert not s["missing"] and set(s["refused"]) <= {"efficient"}   # mem-eff refuses GQA shapes
    for backend, mape in AS_REGISTERED[name].items():
        assert s["table"][(backend, "pooled")]["mape"] <= mape + 0.0005, backend
    timed = sum(v["count"] for (b, k), v in s["table"].items() if k == "pooled")
    assert timed + sum(s["refused"].values()) == len(read_prereg(str(prereg)))


@pytest.mark.parametrize("name", ["20_fa2", "21", "22", "23", "37", "38", "39", "40", "41", "42", "43", "44"])
def test_fresh_runs_meet_the_attention_target(name):
    """Issue #12's attention target (<= 8% per backend on a fresh run) on the registrations of
    session 21's model (20_fa2, 21) and of session 23's (22, 23: after the membound42 / gemm32
    profiles were adopted; newly lent machines): every backend's pooled forward and forward+backward
    MAPE. Per kind, H200 math forward is over on both H200 draws (8.6% and 8.1%, too fast: bias
    -8.6% / -8.1%); every other kind of either GPU is within 8% (seed 22: cuDNN 4.7%, flash 5.3%,
    memory-efficient 3.8%, math 6.0%, local 3.5% pooled; seed 23: 4.5 / 5.6 / 4.3 / 6.1 / 2.6%). Fourteen
    sessions later, by the model of 6d48275 (seed 37, H100: 4.8 / 5.2 / 2.6 / 5.7 / 3.5%; seed 38, H200: 5.2 /
    6.5 / 4.2 / 6.8 / 3.2%): H200 math forward over again (8.8%, bias -8.8%), nothing else; by the model of
    fdbfcbd (seed 39, H200: 5.2 / 5.0 / 3.7 / 5.4 / 2.75%, math forward 8.04%; seed 40, H100: 5.7 / 4.3 / 3.8 /
    6.2 / 3.1%); by the model of 157d98b (seed 41, H200: 4.3 / 4.9 / 3.1 / 5.7 / 2.7%, math forward 7.0%, every kind
    within 8%; seed 42, H100: 4.7 / 5.6 / 3.7 / 6.3 / 3.1%, every kind within 8%); by the profiles adopted in session 39
    (m78copy; seed 43, H200: 5.1 / 6.4 / 3.7 / 6.95 / 5.4%, flash forward 8.5% and math forward 9.4% over; seed 44, H100:
    5.0 / 6.9 / 5.6 / 7.5 / 2.5%, flash forward 9.7% over: flash and math are costed as before the adoption)."""
    from validation.prereg_attention import score
    prereg, run, _ = REGISTRATIONS[name]
    t = score(str(prereg), str(run))["table"]
    assert len(t) == 15 and all(v["mape"] <= 0.08 for (b, k), v in t.items() if k == "pooled")
    over = {bk for bk, v in t.items() if v["mape"] > 0.08}
    expect = {"43": {("math", "attention_fwd"), ("flash", "attention_fwd")}, "44": {("flash", "attention_fwd")}}
    assert over == expect.get(name, {("math", "attention_fwd")} if name in ("20_fa2", "22", "38", "39") else set())


def test_fresh_runs_were_never_fitted():
    """No fresh run is in a profile's fit list."""
    from simulator.calibration import profile_fitted_on
    fitted = {Path(f).name for p in ("h200-sxm", "h100-sxm") for f in profile_fitted_on(p)}
    assert not {run.name for _, run, _ in REGISTRATIONS.values()} & fitted
    assert {FRESH20.name, FRESH21.name, FRESH22.name, FRESH23.name} <= {run.name for _, run, _ in REGISTRATIONS.values()}


def test_mqa_draw_is_the_same_draw_with_one_kv_head(tmp_path):
    """--mqa (session 29): the same shapes, backends and directions as the plain draw of the seed, each with
    one KV head for all its query heads; its registration says so and runs the harness with --mqa."""
    from validation.prereg_attention import read_prereg, write
    plain, mqa = H.fresh_cases(29, 6), H.fresh_cases(29, 6, mqa=True)
    assert len(plain) == len(mqa) and any(c["kv_heads"] > 1 for c in plain)
    assert all(m == dict(p, kv_heads=1) for p, m in zip(plain, mqa))
    reg = tmp_path / "prereg.txt"
    assert write(29, 6, "h200-sxm", "NVIDIA H200", str(reg), 240.0, harness="attention_backends_mqa") == len(mqa)
    assert "--fresh-seed 29 --fresh-n 6 --mqa" in reg.read_text()
    assert {int(k[4]) for k in read_prereg(str(reg))} == {1}
