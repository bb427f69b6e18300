"""llm-foundry's Triton FlashAttention as a backend of its own (issue #12, session 26).

One H100 run (validation/measurements/h100_triton_attention_v2.json, validation/harness/triton_attention.py
under DISABLE_MMA_V3=1) fitted on its ``sweep`` shapes (validation/triton_fa_fit.py); its ``mpt`` shapes,
the per-GPU attention shapes of llm-foundry's H100 rows, are held out (a family of shapes the fit never
saw, same run: not a separate run)."""
from __future__ import annotations

import csv
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.calibration import load_calibration
from tests.kernel_profiles import SOFTMAX66_PARAMETERS
from validation.fit import get_value
from validation.hardware import hardware_for
from validation.predict import predict_record
from validation.records import load_measurements
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
    # fraction and per-block overhead of four compiled kernels (head_dim 64 / 128, forward / backward)
    assert len(res.params) == 8 and not res.unconstrained
    for p, v in zip(res.params, res.values):
        assert get_value(committed, p.path) == pytest.approx(v, abs=1e-4), p.path


def test_held_out_mpt_shapes_ratchet():
    """Quoted in docs/validation.md: the held-out MPT shapes 2.0% forward, 3.75% forward+backward
    (the fitted sweep 2.65% / 3.95%), since session 27 costed the blocks in launch order and each
    head_dim's compiled kernel apart; 11.8% / 10.4% before, with one fraction per direction
    (head_dim 64 then +32% forward)."""
    errs = errors_by_set(load_calibration("h100-sxm"))
    assert len(errs[("mpt", "attention_fwd")]) == 20 and len(errs[("mpt", "attention_fwd_bwd")]) == 20
    assert mape(errs[("mpt", "attention_fwd")]) <= 0.0203
    assert mape(errs[("mpt", "attention_fwd_bwd")]) <= 0.0376


def test_head_dim_kernels_are_costed_apart():
    """The two compiled kernels differ as measured: per FLOP the head_dim-64 backward is the faster
    (its 8 warps hold half the fp32 dK/dV accumulators), so its fitted fraction is higher."""
    cal = load_calibration("h100-sxm")
    assert cal.attention_kernel_fraction["triton_fa_d64_bwd"] > 1.2 * cal.attention_kernel_fraction["triton_fa_d128_bwd"]
    assert "triton_fa_fwd" not in cal.attention_kernel_overlap and "triton_fa_d64_fwd" not in cal.attention_kernel_overlap


def test_causal_forward_tail_is_costed():
    """One head of 32k causal tokens is 256 query blocks, launched light first on 132 SMs: the last
    (heaviest) blocks run alone, so the model's per-FLOP time is longer than at 16 heads; measured
    99 vs 148 TF/s (h100_triton_attention_v2.json)."""
    from simulator.compute import attention_flops, attention_time
    from simulator.engine import device_model
    from hardware_specs.catalog import load_accelerator
    dev = device_model(load_accelerator("h100-sxm"), load_calibration("h100-sxm"))
    rate = {h: attention_flops(1, h, 32768, 32768, 128, True) / attention_time(dev, 1, h, 32768, 32768, 128, True,
                                                                                   backend="triton_fa")
            for h in (1, 16)}
    assert rate[1] < 0.8 * rate[16]


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


# ---- fresh draws, registered before they ran (session 27; validation.prereg_attention --harness triton_attention):
# 40 random causal shapes each (seq 512..32768, head_dim 64 / 128, heads 1..64), on triton_fa and SDPA's
# FlashAttention-2, forward and forward+backward. H100 seed 51: the model of 861d2e9 (the triton_fa fit above);
# H200 seed 52: the H100's triton_fa parameters transferred unchanged (candidate h200-sxm-tritonfa27, adopted after)
FRESH = {(gpu, seed): MEAS / "repeat" / f"{gpu}_triton_fresh{seed}.json"
         for gpu, seed in (("h100", 51), ("h200", 52), ("h200", 53), ("h100", 54), ("h200", 55), ("h100", 56),
                           ("h200", 57), ("h100", 58))}
AS_REGISTERED = {   # (gpu, seed): {(backend, kind or pooled): MAPE}
    ("h100", 51): {("triton_fa", "attention_fwd"): 0.0385, ("triton_fa", "attention_fwd_bwd"): 0.0452,
                   ("triton_fa", "pooled"): 0.0418, ("flash", "attention_fwd"): 0.0573,
                   ("flash", "attention_fwd_bwd"): 0.0671, ("flash", "pooled"): 0.0622},
    ("h200", 52): {("triton_fa", "attention_fwd"): 0.0344, ("triton_fa", "attention_fwd_bwd"): 0.0959,
                   ("triton_fa", "pooled"): 0.0652, ("flash", "attention_fwd"): 0.0966,
                   ("flash", "attention_fwd_bwd"): 0.0941, ("flash", "pooled"): 0.0954},
    # session 28: H200 registered with its backward fitted on seed 52 and FlashAttention-2's per-head K/V bytes
    ("h200", 53): {("triton_fa", "attention_fwd"): 0.0390, ("triton_fa", "attention_fwd_bwd"): 0.0212,
                   ("triton_fa", "pooled"): 0.0301, ("flash", "attention_fwd"): 0.0433,
                   ("flash", "attention_fwd_bwd"): 0.0573, ("flash", "pooled"): 0.0503},
    ("h100", 54): {("triton_fa", "attention_fwd"): 0.0367, ("triton_fa", "attention_fwd_bwd"): 0.0384,
                   ("triton_fa", "pooled"): 0.0376, ("flash", "attention_fwd"): 0.0492,
                   ("flash", "attention_fwd_bwd"): 0.0482, ("flash", "pooled"): 0.0487},
    # session 29: registered by the committed model of a913dcd (the same attention model as for 53 / 54)
    ("h200", 55): {("triton_fa", "attention_fwd"): 0.0327, ("triton_fa", "attention_fwd_bwd"): 0.0246,
                   ("triton_fa", "pooled"): 0.0287, ("flash", "attention_fwd"): 0.0476,
                   ("flash", "attention_fwd_bwd"): 0.0751, ("flash", "pooled"): 0.0613},
    ("h100", 56): {("triton_fa", "attention_fwd"): 0.0558, ("triton_fa", "attention_fwd_bwd"): 0.0439,
                   ("triton_fa", "pooled"): 0.0499, ("flash", "attention_fwd"): 0.0630,
                   ("flash", "attention_fwd_bwd"): 0.0517, ("flash", "pooled"): 0.0574},
    # session 30: registered by the committed model of cd7f481 (the same attention model as for 53-56)
    ("h200", 57): {("triton_fa", "attention_fwd"): 0.0407, ("triton_fa", "attention_fwd_bwd"): 0.0403,
                   ("triton_fa", "pooled"): 0.0405, ("flash", "attention_fwd"): 0.0464,
                   ("flash", "attention_fwd_bwd"): 0.0517, ("flash", "pooled"): 0.0491},
    ("h100", 58): {("triton_fa", "attention_fwd"): 0.0396, ("triton_fa", "attention_fwd_bwd"): 0.0564,
                   ("triton_fa", "pooled"): 0.0480, ("flash", "attention_fwd"): 0.0557,
                   ("flash", "attention_fwd_bwd"): 0.0436, ("flash", "pooled"): 0.0496},
}


def _fresh_score(gpu: str, seed: int) -> dict:
    from validation.prereg_attention import score
    res = score(str(MEAS / "logs" / f"prereg_triton{seed}_{gpu}.txt"), str(FRESH[(gpu, seed)]))
    assert not res["refused"] and not res["missing"]
    return {k: v["mape"] for k, v in res["table"].items()}


@pytest.mark.parametrize("gpu,seed", sorted(FRESH))
def test_fresh_draws_as_registered(gpu, seed):
    """Quoted in docs/validation.md: H100 seed 51 triton_fa 3.85% forward, 4.5% forward+backward (4.2% pooled),
    FlashAttention-2 6.2% pooled; H200 seed 52, triton_fa on the H100's parameters: 3.4% / 9.6% (6.5% pooled:
    the H200's backward runs ~9% faster than the H100's fit says), FlashAttention-2 9.5% (its heads = 1 shapes,
    a layout the earlier draws never had, +15..+46% slow: its HBM bytes read K and V once per query block
    for one head, fixed in session 28, see test_fa2_on_the_fresh_draws_under_todays_model). Session 28:
    H200 seed 53 triton_fa 3.9% / 2.1% (3.0% pooled), flash 5.0% pooled; H100 seed 54 triton_fa 3.7% / 3.8%
    (3.8%), flash 4.9%. Session 29: H200 seed 55 triton_fa 3.3% / 2.5% (2.9%), flash 4.8% / 7.5% (6.1%); H100 seed
    56 triton_fa 5.6% / 4.4% (5.0%; its forward holds one call at -63%, b2 h49 s1664 d64, whose calls spread 3.6x),
    flash 6.3% / 5.2% (5.7%). Session 30 (registered by cd7f481): H200 seed 57 triton_fa 4.1% / 4.0% (4.05%), flash
    4.6% / 5.2% (4.9%); H100 seed 58 triton_fa 4.0% / 5.6% (4.8%), flash 5.6% / 4.4% (5.0%)."""
    got = _fresh_score(gpu, seed)
    assert set(got) == set(AS_REGISTERED[(gpu, seed)])
    for k, v in AS_REGISTERED[(gpu, seed)].items():
        assert got[k] == pytest.approx(v, abs=5e-4), k
    assert got[("triton_fa", "pooled")] <= 0.08         # the 8% per backend, pooled, on both draws


# FlashAttention-2 on the same draws under today's model (session 28: its HBM bytes read K and V once
# per head, not once per query block divided by kv_heads; found on these draws' heads = 1 shapes, so
# these are development figures for that change, not held-out ones)
FA2_TODAY = {("h100", 51): {"attention_fwd": 0.0475, "attention_fwd_bwd": 0.0487, "pooled": 0.0481},
             ("h200", 52): {"attention_fwd": 0.0531, "attention_fwd_bwd": 0.0521, "pooled": 0.0526},
             ("h200", 53): {"attention_fwd": 0.0433, "attention_fwd_bwd": 0.0573, "pooled": 0.0503},   # as registered
             ("h100", 54): {"attention_fwd": 0.0492, "attention_fwd_bwd": 0.0482, "pooled": 0.0487},
             ("h200", 55): {"attention_fwd": 0.0476, "attention_fwd_bwd": 0.0751, "pooled": 0.0613},   # as registered
             ("h100", 56): {"attention_fwd": 0.0630, "attention_fwd_bwd": 0.0517, "pooled": 0.0574},
             ("h200", 57): {"attention_fwd": 0.0464, "attention_fwd_bwd": 0.0517, "pooled": 0.0491},   # as registered
             ("h100", 58): {"attention_fwd": 0.0557, "attention_fwd_bwd": 0.0436, "pooled": 0.0496}}   # as registered


def _todays_errors(gpu: str, seed: int, backend: str) -> dict:
    mf = load_measurements(FRESH[(gpu, seed)])
    hw, cal = hardware_for(mf), load_calibration(f"{gpu}-sxm")
    errs: dict = {}
    for r in mf.records:
        if r.get("backend") == backend and r.get("time_s"):
            e = predict_record(r, hw, cal).time_s / r["time_s"] - 1.0
            errs.setdefault(r["kind"], []).append(e)
            errs.setdefault("pooled", []).append(e)
    return {k: statistics.fmean(abs(x) for x in v) for k, v in errs.items()}


@pytest.mark.parametrize("gpu,seed", sorted(FRESH))
def test_fa2_on_the_fresh_draws_under_todays_model(gpu, seed):
    """Quoted in docs/validation.md (session 28): FlashAttention-2 on the triton draws, today's model,
    H100 seed 51 4.8% pooled (registered 6.2%), H200 seed 52 5.3% (registered 9.5%). A ratchet."""
    got = _todays_errors(gpu, seed, "flash")
    for k, v in FA2_TODAY[(gpu, seed)].items():
        assert got[k] <= v + 5e-4, k


def test_fresh_draw_records_say_what_ran():
    """Both runs compiled the kernel to mma.sync only (no WGMMA), every case carries its seed, and each
    forward+backward triton_fa record names the backward config the autotuner picked."""
    for path in FRESH.values():
        d = json.loads(path.read_text())
        assert d["info"]["triton_mma"] == "v2" and not any(d["info"]["triton_wgmma"].values())
        recs = [r for r in d["records"] if r.get("backend") == "triton_fa"]
        assert len(recs) == 80 and all(r["set"] == "random" and r["seed"] == int(path.stem[-2:]) for r in recs)
        assert all("SEQUENCE_PARALLEL" in r["bwd_config"] for r in recs if r["kind"] == "attention_fwd_bwd")


def test_h200_takes_the_h100_triton_fa_forward_and_fits_its_backward_on_seed_52():
    """The H200 profile's triton_fa forward entries are the H100's (a transfer, not a fit); its four
    backward entries are what validation.triton_fa_fit --gpu h200 fits on the seed-52 draw (session 28);
    the session-27 candidate registered for that draw is the profile but for those four."""
    h100, h200 = load_calibration("h100-sxm"), load_calibration("h200-sxm")
    cand = load_calibration(str(ROOT / "validation" / "candidates" / "h200-sxm-tritonfa27.yaml"))
    for m in ("attention_kernel_fraction", "attention_kernel_overhead"):
        mine = {k: v for k, v in getattr(h200, m).items() if k.startswith("triton_fa")}
        theirs = {k: v for k, v in getattr(h100, m).items() if k.startswith("triton_fa")}
        assert set(mine) == set(theirs) and len(mine) == 4
        assert all(mine[k] == theirs[k] for k in mine if k.endswith("_fwd"))
        assert all(getattr(cand, m)[k] == theirs[k] for k in mine)
    from dataclasses import replace
    from validation.triton_fa_fit import BWD_PARAMS, fit_h200_backward
    res = fit_h200_backward(start=cand)
    for p, v in zip(res.params, res.values):
        assert get_value(h200, p.path) == pytest.approx(v, abs=1e-4), p.path
    assert sorted(p.path for p in res.params) == sorted(BWD_PARAMS)
    bwd_of = {m: {k: getattr(h200, m)[k] for k in getattr(h200, m) if k.startswith("triton_fa") and k.endswith("_bwd")}
              for m in ("attention_kernel_fraction", "attention_kernel_overhead")}
    later = {p: getattr(h200, p) for p in SOFTMAX66_PARAMETERS}   # refitted since (session 36)
    # session 39 adopted m78copy: softmax, mask costs, the batched-GEMM law and the layout copies, none triton_fa's
    m78 = ("softmax_elements_per_cycle", "softmax_warp_cycles", "softmax_masked_cost", "softmax_masked_cost_by_kernel",
           "softmax_reg_cycles", "softmax_plain_reread", "score_gemm_floor_fraction", "score_gemm_floor_exponent",
           "unfused_layout_copies", "ffma_gemm")     # ffma_gemm: session 42 adopted math42
    later.update({p: getattr(h200, p) for p in m78})
    patched = replace(cand, name=h200.name, **later, **{m: {**getattr(cand, m), **bwd_of[m]} for m in bwd_of})
    assert patched == h200


@pytest.mark.xfail(strict=True, reason="attention <= 8% per backend on a fresh run: H200 seed 52, triton_fa forward+"
                                       "backward 9.6% on the H100's transferred parameters; FlashAttention-2 9.5% pooled "
                                       "(heads = 1 shapes +15..+46%)")
def test_h200_fresh_draw_every_backend_and_direction_within_8_percent():
    assert max(_fresh_score("h200", 52).values()) <= 0.08


@pytest.mark.parametrize("gpu,seed", [("h200", 53), ("h100", 54), ("h200", 55), ("h100", 56), ("h200", 57), ("h100", 58)])
def test_session_28_draws_every_backend_and_direction_within_8_percent(gpu, seed):
    """Registered before they ran (session 28): H200 seed 53, triton_fa with its backward fitted on seed 52
    3.9% forward / 2.1% forward+backward, FlashAttention-2 with the per-head K/V bytes 4.3% / 5.7% (its
    seven heads = 1 shapes within -6..+14%); H100 seed 54: triton_fa 3.7% / 3.8%, FlashAttention-2 4.9% / 4.8%.
    Session 29, the same model: H200 seed 55 triton_fa 3.3% / 2.5%, FlashAttention-2 4.8% / 7.5%; H100 seed 56
    triton_fa 5.6% / 4.4%, FlashAttention-2 6.3% / 5.2%. Session 30, the same model (cd7f481): H200 seed 57
    triton_fa 4.1% / 4.0%, FlashAttention-2 4.6% / 5.2%; H100 seed 58 triton_fa 4.0% / 5.6%, FlashAttention-2
    5.6% / 4.4%."""
    got = _fresh_score(gpu, seed)
    assert max(got.values()) <= 0.08
    heads_one = [r for r in load_measurements(FRESH[(gpu, seed)]).records if r["heads"] == 1]
    assert heads_one          # the draw holds single-head shapes, the case seed 52 missed
