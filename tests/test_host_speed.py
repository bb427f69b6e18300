"""Host speed (validation/host_speed.py): host-bound steps take the host's time, which differs
between lent machines; tiny twin steps measure it on the machine itself (issue #11)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from models.schema import ModelSpec
from simulator.calibration import HOST_PARAMETERS, calibration_for
from validation.accuracy import evaluate, summarize
from validation.hardware import hardware_for
from validation.host_speed import host_speed_factor, is_twin, non_twin_indices
from validation.predict import plan_step_prediction
from validation.records import load_measurements

ROOT = Path(__file__).resolve().parent.parent
DIAG = ROOT / "validation" / "measurements" / "h200x2_plan_hostdiag.json"


def _diag():
    mf = load_measurements(DIAG)
    hw = hardware_for(mf)
    return mf, hw, calibration_for(hw.accelerator)[0]


def _structure(r: dict) -> tuple:
    return (r["framework"], r["layers"], r["seq"], r["tp"], r["cp"], r["zero_stage"], r["gbs"])


def test_a_twin_takes_the_time_of_its_real_size_plan_on_the_same_machine():
    """The measured fact the method rests on: the four host-bound structures took the same time
    at real size (llama-1b) and at host-grid size (host-llama, 16 layers), within 6%."""
    mf, _, _ = _diag()
    real = {_structure(r): r["time_s"] for r in mf.records if not is_twin(r)}
    tiny = {_structure(r): r["time_s"] for r in mf.records if is_twin(r)}
    assert real.keys() == tiny.keys() and len(real) == 4
    assert all(abs(tiny[k] / real[k] - 1) <= 0.06 for k in real)


def test_this_machine_is_slower_than_the_reference_host():
    mf, hw, cal = _diag()
    factor, n = host_speed_factor(mf, hw, cal)
    # 1.44 by the step-based twin rule since session 7 (1.69 by the host-pass rule before; the
    # reference host costs changed with the joint host fit, which also gives this file 1.445)
    assert n == 4 and 1.35 <= factor <= 1.55


def test_twins_bring_the_host_bound_plans_within_10_percent():
    """Reference host: every plan 24-45% under (29.8% MAPE with the session-7 host costs); with the
    factor from the twins (which are left out): 4.5% (9.9% before session 7's joint host fit, which
    took these twins as fit data: developed on, not held out)."""
    mf, hw, cal = _diag()
    ref = {s.kind: s for s in summarize(evaluate(mf, hw, cal, non_twin_indices(mf))[0])}["plan_step"]
    factor, _ = host_speed_factor(mf, hw, cal)
    res, _ = evaluate(mf, hw, cal.with_host_speed(factor), non_twin_indices(mf))
    fixed = {s.kind: s for s in summarize(res)}["plan_step"]
    assert ref.mape >= 0.29
    assert fixed.count == 4 and fixed.mape <= 0.046


def test_host_speed_scales_every_host_cost_and_the_host_bound_step():
    mf, hw, cal = _diag()
    slow = cal.with_host_speed(2.0)
    assert all(getattr(slow, k) == pytest.approx(2 * getattr(cal, k)) for k in HOST_PARAMETERS)
    rec = next(r for r in mf.records if is_twin(r) and r["tp"] == 2 and r["framework"] == "torchtitan")
    a, b = plan_step_prediction(rec, hw, cal), plan_step_prediction(rec, hw, slow)
    assert b.host_issue_s == pytest.approx(2 * a.host_issue_s)
    assert b.time_s > 1.8 * a.time_s                     # a twin is host-bound
    with pytest.raises(ValueError):
        cal.with_host_speed(0)


@pytest.mark.parametrize("argv", [["validate", "--measurements", str(DIAG), "--host-speed", "fast"],
                                  ["simulate", "--model", "llama3-8b", "--cluster", "h200-2gpu", "--tp", "2",
                                   "--host-speed", "-1"]])
def test_a_bad_host_speed_is_one_clear_error(argv):
    r = subprocess.run([sys.executable, "-m", "meshcast.cli", *argv], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "--host-speed" in r.stderr and "Traceback" not in r.stderr


def test_whatif_applies_host_speed_at_every_point(tmp_path, capsys):
    """whatif took --host-speed and ignored it: a host-bound point kept the reference host's step."""
    from meshcast.cli import main
    model = tmp_path / "tiny.yaml"
    model.write_text("name: tiny\nnum_layers: 1\nhidden: 64\nffn_hidden: 256\nnum_heads: 1\nvocab: 128\nseq_len: 64\n")
    steps = []
    for speed in ("1", "3"):
        assert main(["whatif", "--model", str(model), "--cluster", "h100-1gpu", "--gpus", "1", "--gbs", "1",
                     "--sweep", "gpus=1", "--host-speed", speed, "--json"]) == 0
        point = json.loads(capsys.readouterr().out)["points"][0]
        steps.append(point["result"]["step_time_s"])
        assert ("host 3x" in point["calibration"]) == (speed == "3")
    assert steps[1] > 2.5 * steps[0]


def test_the_harness_twin_keeps_plan_and_structure():
    import importlib.util
    spec = importlib.util.spec_from_file_location("plan_step", ROOT / "validation" / "harness" / "plan_step.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    real = mod.case("torchtitan", "llama-3b", 6144, 2, cp=2, zero=3, gbs=2)
    twin = mod.twin_of(dict(real, fsdp_sync_each=True))
    assert twin["name"] == "host-llama" and twin["model"]["layers"] == 28 and twin["fsdp_sync_each"]
    assert {k: v for k, v in twin["plan"].items()} == real["plan"]
    assert len(mod.with_twins([real, real])) == 3


# ---- the seventh pre-registered set (native6; logs/prereg7_h200x2_plan.txt, model of 60d4f89) -----
SET7 = ROOT / "validation" / "measurements" / "h200x2_plan_native6.json"


def _plan_set(path: Path, host: str):
    """(plan_step stats, plan groups) of a pre-registered set's real-size plans (twins left out),
    with the reference host or the file's twin factor."""
    from validation.accuracy import plan_groups
    mf = load_measurements(path)
    hw = hardware_for(mf)
    cal = calibration_for(hw.accelerator)[0]
    if host == "twins":
        cal = cal.with_host_speed(host_speed_factor(mf, hw, cal)[0])
    res, unsupported = evaluate(mf, hw, cal, non_twin_indices(mf))
    assert not unsupported
    return {s.kind: s for s in summarize(res)}["plan_step"], plan_groups(res, float(mf.info["total_memory_bytes"]))


def _set7(host: str):
    return _plan_set(SET7, host)


def test_set7_as_pre_registered_with_the_reference_host():
    """12 plans never run before, predicted before the run: 17.1% time as pre-registered (host-bound
    plans 29-37% fast on a host 1.54x the reference), 13.8% with the session-7 host costs (fitted
    on this file's twins among others), 2.5% peak memory, every fit verdict and pick right."""
    s, groups = _set7("reference")
    assert s.count == 12 and s.mape <= 0.138 and s.memory_mape <= 0.022
    assert (s.fit_correct, s.fit_total) == (12, 12)
    assert all(g.pick_ok for g in groups) and len(groups) == 2


def test_set7_with_the_registered_twin_rule():
    """The rule registered with the predictions (every host cost x the median twin ratio, 1.54):
    8.3% time; Kendall tau 0.60 (Megatron-Core llama-3b) and 0.87 (torch-native llama-1b). Since
    session 7 (step-based twin ratio, host costs refitted on five machines' twins, this file's
    among them: developed on): factor 1.25, 7.1%, tau 0.73 and 0.87."""
    mf = load_measurements(SET7)
    hw = hardware_for(mf)
    factor, n = host_speed_factor(mf, hw, calibration_for(hw.accelerator)[0])
    assert n == 12 and 1.2 <= factor <= 1.3
    s, groups = _set7("twins")
    assert s.mape <= 0.071 and s.memory_mape <= 0.022
    assert all(g.pick_ok for g in groups)
    assert sorted(round(g.kendall_tau, 2) for g in groups) >= [0.73, 0.86]


@pytest.mark.xfail(strict=True, reason="set 7 with twins (session 7): 7.1%, but Megatron selective recompute -15.6% "
                                       "and interleaved -15.8% (host and GPU time equal), tp -12.1%; tau 0.73 and 0.87")
def test_set7_meets_the_issue_targets():
    s, groups = _set7("twins")
    assert s.mape <= 0.10 and all(g.kendall_tau >= 0.9 for g in groups)


# ---- the eighth pre-registered set (native7; logs/prereg8_h200x2_plan.txt, model of 093212f) -----
SET8 = ROOT / "validation" / "measurements" / "h200x2_plan_native7.json"


def _set8(host: str):
    return _plan_set(SET8, host)


# session 12 (kernel-measured non-vectorized rates, fp32 softmax per element): 7.28 -> 8.02%, 7.19 -> 7.92%
@pytest.mark.parametrize("host, ratchet", [("reference", 0.0803), ("twins", 0.0793)])
def test_set8_as_pre_registered(host, ratchet):
    """12 plans never run before (gpt-1.3b s2560 under Megatron-Core local, llama-3b s2048
    torch-native), predicted before the run with the session-7 host costs: 7.3% time with the
    reference host, 7.2% by the registered twin rule (this host measured 0.98x the reference),
    1.3% peak memory, 12/12 verdicts, both picks right, tau 0.87 in both groups."""
    s, groups = _set8(host)
    assert s.count == 12 and s.mape <= ratchet and s.memory_mape <= 0.011
    assert (s.fit_correct, s.fit_total) == (12, 12)
    assert len(groups) == 2 and all(g.pick_ok for g in groups)
    assert all(round(g.kendall_tau, 2) >= 0.86 for g in groups)


@pytest.mark.xfail(strict=True, reason="set 8: Megatron-Core GPT-style tp + sp +28.8% and tp + selective +15.0% "
                                       "(host over-predicted: their twins ran 21-26% faster), torch-native cp -14.3%; "
                                       "tau 0.87 in both groups")
def test_set8_meets_the_issue_targets():
    mf = load_measurements(SET8)
    hw = hardware_for(mf)
    cal = calibration_for(hw.accelerator)[0]
    res, _ = evaluate(mf, hw, cal.with_host_speed(host_speed_factor(mf, hw, cal)[0]), non_twin_indices(mf))
    assert all(abs(r.time_error) <= 0.10 for r in res)
    assert all(g.kendall_tau >= 0.9 for g in _set8("twins")[1])


# ---- per-plan twins (session 8): each plan under its own twin's factor -------------------------------
def _per_plan(path: Path):
    from validation.accuracy import plan_groups
    from validation.host_speed import evaluate_per_plan_twins
    mf = load_measurements(path)
    hw = hardware_for(mf)
    res, unsupported = evaluate_per_plan_twins(mf, hw, calibration_for(hw.accelerator)[0])
    assert not unsupported
    return {s.kind: s for s in summarize(res)}["plan_step"], plan_groups(res, float(mf.info["total_memory_bytes"]))


def test_every_plan_of_the_twin_sets_finds_its_own_twin():
    from validation.host_speed import plan_host_speeds, twin_ratios
    for path, n in ((SET7, 12), (SET8, 12), (DIAG, 4)):
        mf = load_measurements(path)
        hw = hardware_for(mf)
        cal = calibration_for(hw.accelerator)[0]
        factors, median, own, _ = plan_host_speeds(mf, hw, cal)
        assert len(factors) == own == n
        assert set(factors.values()) <= set(twin_ratios(mf, hw, cal)) | {median}
        assert median == pytest.approx(host_speed_factor(mf, hw, cal)[0])


def test_a_plan_without_its_twin_takes_the_median():
    from dataclasses import replace
    from validation.host_speed import plan_host_speeds
    mf, hw, cal = _diag()
    drop = next(i for i, r in enumerate(mf.records) if is_twin(r) and r["tp"] == 2 and r["framework"] == "torchtitan")
    factors, median, own, _ = plan_host_speeds(replace(mf, records=[r for i, r in enumerate(mf.records) if i != drop]),
                                            hw, cal)
    assert own == 3 and sorted(factors.values()).count(median) >= 1


@pytest.mark.parametrize("path, ratchet, worst", [(SET7, 0.068, 0.157), (SET8, 0.0591, 0.162), (DIAG, 0.038, 0.054)])
def test_per_plan_twins_ratchet(path, ratchet, worst):
    """Developed on these files (session 8): set 7 7.1 -> 6.8%, set 8 7.2 -> 5.2% (Megatron-Core's
    tensor-parallel plans +28.8/+15.0% -> +2.4/-4.4%), the diagnostic 4.5 -> 3.8%. Left: torch-native
    cp -16.1% on set 8 (the real plan ran 19% slower than its twin), Megatron selective and
    interleaved -15.6/-12.1% on set 7 (host and GPU time equal)."""
    s, _ = _per_plan(path)
    assert s.mape <= ratchet and s.worst_abs_error <= worst


def test_validate_reports_a_twin_only_file_without_failing():
    r = subprocess.run([sys.executable, "-m", "meshcast.cli", "validate", "--host-speed", "twins", "--measurements",
                        str(ROOT / "validation/measurements/h200x2_plan_host.json"), str(SET8)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "only twin steps" in r.stdout and "its own twin's factor (12 of 12 records)" in r.stdout


# ---- the ninth pre-registered set (native8; logs/prereg9_h200x2_plan.txt, model of 411f7e8) -----
SET9 = ROOT / "validation" / "measurements" / "h200x2_plan_native8.json"


def test_set9_as_pre_registered_with_per_plan_twins():
    """12 plans on two model shapes never run before (gpt-2.7b s2048 under Megatron-Core local,
    llama-2b s4096 torch-native), predicted before the run; the registered rule (each plan under
    its own twin's factor): 4.8% time (worst torch-native TP + SP +13.9%, whose twin ran 14% slower
    than the plan itself), 1.5% peak memory as registered (1.0% since session 8 read
    torch's DTensor sequence-parallel memory from its source, developed on it), 12/12 verdicts, both picks right, tau 1.0 (Megatron)
    and 0.73 (torch-native: DDP, FSDP2, pp and interleaved within 9% of each other)."""
    s, groups = _per_plan(SET9)
    assert s.count == 12 and s.mape <= 0.048 and s.worst_abs_error <= 0.139 and s.memory_mape <= 0.011
    assert (s.fit_correct, s.fit_total) == (12, 12)
    assert len(groups) == 2 and all(g.pick_ok for g in groups)
    assert sorted(round(g.kendall_tau, 2) for g in groups) >= [0.73, 1.0]


@pytest.mark.parametrize("host, ratchet", [("reference", 0.081), ("twins", 0.0531)])
def test_set9_by_the_other_rules(host, ratchet):
    """The same predictions with the reference host (8.1%: torch-native TP + SP -20.0%, cp -22.9%
    on a host 1.27x the reference) and with session 7's one median factor per file (5.3%;
    Megatron-Core tp +18.2%)."""
    s, _ = _plan_set(SET9, host)
    assert s.count == 12 and s.mape <= ratchet


@pytest.mark.xfail(strict=True, reason="set 9: torch-native TP + SP +13.9% time (twin noise: its twin's steps spread "
                                       "2.4-3.4 s); torch-native tau 0.73 (its -9.0% peak memory as registered is -2.8% "
                                       "since session 8's DTensor sequence-parallel memory, developed on it)")
def test_set9_meets_the_issue_targets():
    s, groups = _per_plan(SET9)
    res_ok = s.worst_abs_error <= 0.10
    assert res_ok and all(g.kendall_tau >= 0.9 for g in groups)


# ---- the tenth pre-registered set (native9; logs/prereg10_h200x2_plan.txt, model of 2769c19) ----
SET10 = ROOT / "validation" / "measurements" / "h200x2_plan_native9.json"


def test_set10_as_pre_registered_with_per_plan_twins():
    """10 plans predicted before the run (session 9): llama-4b s2048 at micro-batch 2 under
    Megatron-Core local (a shape never run before) and gpt-2.7b s3072 torch-native; the two
    torch-native TP + SP and cp cases were registered but cannot run (learned positions under
    TP/CP) and errored. Registered rule: 7.9% time, every plan predicted too fast (-3.5 to -13.1%:
    the GPU-bound plans -5 to -10%, so the GPU side, not the host), 2.4% peak memory, 10/10
    verdicts, both picks right, tau 0.73 (Megatron) and 0.67 (torch-native: four plans within 16%)."""
    s, groups = _per_plan(SET10)
    # worst 13.1% (torch-native FSDP2 -13.1%; -13.11% since session 16's norm model, -13.28% since session 17's
    # H200 GEMM launch refit: a cheaper GEMM call in a plan already predicted too fast)
    assert s.count == 10 and s.mape <= 0.0795 and s.worst_abs_error <= 0.1329 and s.memory_mape <= 0.024
    assert (s.fit_correct, s.fit_total) == (10, 10)
    assert len(groups) == 2 and all(g.pick_ok for g in groups)
    assert sorted(round(g.kendall_tau, 2) for g in groups) >= [0.67, 0.73]


@pytest.mark.xfail(strict=True, reason="set 10: torch-native FSDP2 -13.1% and interleaved -10.2% time; every GPU-bound "
                                       "plan -5 to -10%; tau 0.73 / 0.67")
def test_set10_meets_the_issue_targets():
    s, groups = _per_plan(SET10)
    assert s.worst_abs_error <= 0.10 and all(g.kendall_tau >= 0.9 for g in groups)


# ---- the eleventh pre-registered set (native10; logs/prereg11_h200x2_plan.txt, model of b977c8c) ----
SET11 = ROOT / "validation" / "measurements" / "h200x2_plan_native10.json"


def test_set11_as_pre_registered_with_per_plan_twins():
    """12 plans predicted before the run (session 10), the first with the step power model:
    llama-3b s4096 under Megatron-Core local and llama-4b torch-native (never run torch-native).
    Registered rule (each plan under its own twin's host factor; this machine's host 1.39x
    slower than the reference): 3.2% time over the 10 that ran (worst 7.9%: torch-native cp),
    1.7% peak memory, tau 1.0 in both groups, both picks right. Megatron interleaved ran out of
    memory where 121 GiB was predicted to fit (10/11 verdicts; the process then held 29 GiB it
    had not allocated, after four earlier cases); its full-recompute plan never ran (the
    launcher blamed the OOM child's exit on it: fixed since)."""
    s, groups = _per_plan(SET11)
    # 3.2 -> 3.7% with session 12's kernel-measured torch paths (every H200 Megatron plan a little faster)
    assert s.count == 11 and s.mape <= 0.0371 and s.worst_abs_error <= 0.079 and s.memory_mape <= 0.0171
    # today (session 11, developed after seeing it): memory 0.6% with Megatron's unfused SwiGLU bytes, and
    # the interleaved plan predicted not to fit (live 125 GiB x 1.05 + Megatron's 8.74 GiB outside the allocator)
    assert s.memory_mape <= 0.0060 and (s.fit_correct, s.fit_total) == (11, 11)
    assert len(groups) == 2 and all(g.pick_ok and g.kendall_tau == 1.0 for g in groups)


def test_set11_clocks_as_pre_registered():
    """Every plan was predicted at full clock (its average power under the limit); NVML measured
    0.967-1.0 of f_max (torch-native DDP and pipelines at the cap, sw_power_cap): every plan
    within the registered 0.035."""
    mf = load_measurements(SET11)
    hw = hardware_for(mf)
    cal = calibration_for(hw.accelerator)[0]
    real = [r for r in mf.records if not is_twin(r) and not r["oom"]]
    assert len(real) == 10
    for r in real:
        p = plan_step_prediction(r, hw, cal)
        assert abs(p.clock_fraction - r["sm_clock_mhz"] / 1980.0) <= 0.035


def test_set11_every_verdict_right():
    """As registered, interleaved (121 GiB) was predicted to fit and ran out of memory; right since
    session 11 (its peak 125 GiB with the SwiGLU bytes, plus Megatron's measured memory outside
    the allocator): not a held-out verdict."""
    s, _ = _per_plan(SET11)
    assert s.fit_correct == s.fit_total


# ---- the first plan steps on an H100 (h100a; logs/prereg_h100a_plan.txt, model of 956cb28) ----------
H100A = ROOT / "validation" / "measurements" / "h100_plan_h100a.json"


def test_h100a_as_pre_registered_with_per_plan_twins():
    """Eight single-GPU plans predicted before any plan step had run on an H100 (session 11), on a
    machine whose host issued kernels 1.4-2.5x slower than the reference: under the registered
    per-plan twin rule 4.4% time over the 7 that ran (worst +10.7%: Megatron-Core selective
    recompute at s4096, predicted slow; full recompute +7.7%), 2.7% peak memory (selective -6.2%),
    and every verdict right, llama-4b at mbs 2 (103 GiB predicted) out of memory on 80 GB. Today 1.7%
    time, worst 7.1% (session 12: PyTorch's non-vectorized paths and fp32 softmax measured as H100
    kernels, h100_torch_paths.json; selective recompute +10.7 -> 0.0%, full +7.7 -> -1.1%), 1.7% memory.
    2.3% since session 14 (Megatron's eager SwiGLU and RoPE at the non-vectorized element rate: its
    llama steps +0.5/0.0/-1.1% -> +3.3/+1.2/+1.2% on this H100, while the nine Megatron-local llama
    steps on H200 went from -1..-3% to within 0.8%)."""
    s, groups = _per_plan(H100A)
    # worst 7.08 -> 7.71% since session 20 adopted FA2's forward block schedule (a faster flash forward on
    # a plan already predicted too fast; the schedule improves every attention kernel file and fresh draw)
    # 2.3 -> 2.45% with session 23's membound42 / gemm32 profiles (memory-bound kernels' fixed cost 5.59 -> 5.14 us on H100)
    assert s.count == 8 and s.mape <= 0.0245 and s.worst_abs_error <= 0.0772 and s.memory_mape <= 0.0275
    assert (s.fit_correct, s.fit_total) == (8, 8)
    assert all(g.pick_ok for g in groups if g.timed)


def test_h100a_meets_the_issue_targets():
    """Met since session 12 (selective recompute +10.7% as registered, 0.0% today)."""
    s, _ = _per_plan(H100A)
    assert s.worst_abs_error <= 0.10


# ---- single44: one grid of single-GPU plans on one H100 and one H200 (session 44; logs/prereg_single44_*.txt) -----
SINGLE44 = {"h100": ROOT / "validation" / "measurements" / "h100_plan_single44.json",
            "h200": ROOT / "validation" / "measurements" / "h200_plan_single44.json"}
# as registered (the model of 655db6c, unchanged when they ran): (time MAPE, worst, memory MAPE) under the per-plan twins
SINGLE44_AS_REGISTERED = {"h100": (0.0281, 0.0645, 0.0209), "h200": (0.0266, 0.0845, 0.0172)}


@pytest.mark.parametrize("gpu", SINGLE44)
def test_single44_as_pre_registered_with_per_plan_twins(gpu):
    """Eight single-GPU plans of shapes and combinations never run on one GPU (Megatron-Core local: qwen-3b full
    recompute, llama-2b s4096 selective, gpt-2.7b micro-batch 2, the Mixtral-like MoE at s4096; torch-native: qwen-3b
    full recompute, llama-2b s8192, gpt-1.3b micro-batch 2, llama-4b), registered in b24ca15 by the committed model
    and run on newly lent machines whose hosts issued kernels 1.2-3.0x (H100) and 1.0-2.4x (H200) slower than the
    reference. H100: 2.8% time (worst torch-native llama-4b +6.5%), 2.1% memory, and both plans predicted not to fit
    on 80 GB ran out of memory (Megatron qwen-3b at 69.6 GiB, gpt-2.7b at 108.7 GiB); H200: 2.7% time (worst
    Megatron qwen-3b -8.5%, a host-bound step, 1.96 s predicted of which 1.46 s host), 1.7% memory, 8/8 verdicts."""
    s, groups = _per_plan(SINGLE44[gpu])
    mape, worst, memory = SINGLE44_AS_REGISTERED[gpu]
    assert s.count == 8     # records; the H100 times six (two ran out of memory, as predicted)
    assert s.mape == pytest.approx(mape, abs=5e-4) and s.worst_abs_error == pytest.approx(worst, abs=5e-4)
    assert s.memory_mape == pytest.approx(memory, abs=5e-4)
    assert (s.fit_correct, s.fit_total) == (8, 8)
    assert all(g.pick_ok for g in groups if g.timed)


def test_single44_registration_names_its_model():
    """Both registrations were written by the model of 655db6c with the grid, before the machines were lent."""
    for gpu in SINGLE44:
        text = (ROOT / "validation" / "measurements" / "logs" / f"prereg_single44_{gpu}.txt").read_text()
        assert "model at commit 655db6c" in text and "BEFORE the run" in text


# ---- rank44: single-GPU plan choices of one model each on one H100 (session 44; logs/prereg_rank44_h100.txt) -----
RANK44 = ROOT / "validation" / "measurements" / "h100_plan_rank44.json"


def test_rank44_as_pre_registered_with_per_plan_twins():
    """Two groups of one model each under every micro-batch / recompute choice a planner weighs on one GPU, registered
    in c85a590 by the committed model: Megatron-Core local llama-2b s4096 gbs 8 (micro-batch 1 and 2 without recompute,
    1 and 2 selective, 2 and 4 full) and torch-native llama-1b s4096 gbs 16 (micro-batch 1, 2, 4; full recompute at 4
    and 8). 1.3% time (worst +2.6%), every verdict right: the two Megatron plans without recompute ran out of memory
    as predicted (75.9 GiB, just over the line, and 126 GiB); Kendall tau 1.0 in both groups and both picks the
    measured best (Megatron: selective recompute at micro-batch 2, 2% ahead of micro-batch 1; torch-native:
    micro-batch 4). Peak memory 3.9% pooled; torch-native micro-batch 1 and 2 are -9.2% and -7.9% (allocated more
    than predicted), over the 5% per-plan target."""
    s, groups = _per_plan(RANK44)
    assert s.count == 11 and (s.fit_correct, s.fit_total) == (11, 11)
    assert s.mape == pytest.approx(0.0129, abs=5e-4) and s.worst_abs_error == pytest.approx(0.0256, abs=5e-4)
    assert s.memory_mape == pytest.approx(0.0391, abs=5e-4)
    timed = [g for g in groups if g.timed >= 3]
    assert len(timed) == 2 and all(g.pick_ok and g.pick_regret == 0.0 for g in timed)
    assert [g.kendall_tau for g in timed] == [1.0, 1.0]


@pytest.mark.xfail(strict=True, reason="rank44: torch-native llama-1b s4096 micro-batch 1 and 2 peak memory -9.2% / -7.9%")
def test_rank44_every_plan_memory_within_5_percent():
    from validation.accuracy import evaluate
    mf = load_measurements(RANK44)
    hw = hardware_for(mf)
    res, _ = evaluate(mf, hw, calibration_for(hw.accelerator)[0])
    assert all(abs(r.memory_error) <= 0.05 for r in res if r.memory_error is not None
               and not r.record["name"].startswith("host-"))


# ---- the twelfth pre-registered set (native11; logs/prereg12_h200x2_plan.txt, model of 956cb28) -----
SET12 = ROOT / "validation" / "measurements" / "h200x2_plan_native11.json"


def test_set12_as_pre_registered_with_per_plan_twins():
    """11 plans predicted before the run (session 11): set 11's Megatron-Core interleaved plan
    first, in a fresh process, then set 10's plans again on another machine. Under the registered
    per-plan twin rule: 6.7% time (worst +12.2%: torch-native FSDP2, whose twin ran slower than the
    plan itself), 2.7% peak memory, every verdict right, the interleaved plan included (126.5 GiB
    allocated against 121 predicted: set 11's out-of-memory came from the four cases before it),
    both picks right. Set 10's Megatron-Core llama-4b mbs 2 plans are again 3-9% slower than
    predicted, on another machine: a model gap, not set 10's machine. Tau 0.87 and 0.67."""
    s, groups = _per_plan(SET12)
    assert s.count == 11 and s.mape <= 0.0675 and s.worst_abs_error <= 0.123 and s.memory_mape <= 0.0275
    # today: memory 0.65% with Megatron's unfused SwiGLU bytes, but the interleaved plan (126.5 GiB allocated,
    # 129.7 reserved) is now predicted at 140.4 GiB with the 5% allowance and the 8.74 GiB outside the
    # allocator, over the 139.8 GiB line: 10/11 (a conservative miss)
    assert s.memory_mape <= 0.0066 and (s.fit_correct, s.fit_total) == (10, 11)
    timed = [g for g in groups if g.timed >= 3]
    # the one-plan group (the interleaved plan) has no pick today: its only plan is predicted not to fit
    assert len(timed) == 2 and all(g.pick_ok for g in timed)
    assert sorted(round(g.kendall_tau, 2) for g in timed) >= [0.67, 0.87]


@pytest.mark.xfail(strict=True, reason="set 12: torch-native FSDP2 +12.2% (twin noise), Megatron-Core llama-4b "
                                       "mbs2 plans -3 to -9% again; tau 0.87 / 0.67; interleaved predicted at 140.4 "
                                       "GiB of 139.8 ran (10/11 verdicts today)")
def test_set12_meets_the_issue_targets():
    s, groups = _per_plan(SET12)
    assert s.worst_abs_error <= 0.10 and all(g.kendall_tau >= 0.9 for g in groups if g.timed >= 3)
    assert s.fit_correct == s.fit_total


# ---- the thirteenth pre-registered set (native12 / native12b; logs/prereg13_h200x2_plan.txt, model of 7e6b3bb) --
SET13_FIRST = ROOT / "validation" / "measurements" / "h200x2_plan_native12.json"
SET13 = ROOT / "validation" / "measurements" / "h200x2_plan_native12b.json"


def test_set13_as_pre_registered_with_per_plan_twins():
    """Set 13, predicted before either run (session 11). The first machine's launcher was stopped
    by the call's time limit before writing its plans (its log keeps their times: the same plans
    on the second machine ran within 1% of them; the twins moved up to 40%); the 9 plans rerun on a
    second machine, each beside its twin: 1.7% time (every plan within 4.1%: Megatron-Core local
    llama-2b s4096 mbs2, a shape never run under Megatron, −2.8 to +0.8%), 3.6% peak memory
    (selective recompute −9.1%, the known gap), 9/9 verdicts, tau 1.0 (Megatron) and 0.67
    (torch-native: four plans within 8%), both picks right. A model change developed on the
    llama-4b profile without seeing this set (branch kernel-recon: non-vectorized TensorIterator
    rates, per-element fp32 softmax) scored 2.0% here and was not merged."""
    s, groups = _per_plan(SET13)
    # today 2.9% (session 12: the torch paths and fp32 softmax measured as kernels move every plan ~2% faster)
    assert s.count == 9 and s.mape <= 0.0289 and s.worst_abs_error <= 0.05 and s.memory_mape <= 0.0365
    assert (s.fit_correct, s.fit_total) == (9, 9)
    assert len(groups) == 2 and all(g.pick_ok for g in groups)
    assert sorted(round(g.kendall_tau, 2) for g in groups) >= [0.67, 1.0]


def test_set13_every_verdict_right():
    """As registered, interleaved (128.8 GiB live, 1 GiB allowance: fits) ran out of memory; its OOM
    message showed 8.74 GiB of the process outside PyTorch's allocator, which the fit verdict now
    counts for Megatron-Core (process_memory_bytes, read from that message and the H100 one):
    predicted not to fit since (developed on this record: not a held-out verdict)."""
    s, _ = _per_plan(SET13_FIRST)
    assert s.fit_correct == s.fit_total == 1


# ---- the fourteenth pre-registered set (native13; logs/prereg14_h200x2_plan.txt, model of 6cb50da) ------------
SET14_MEGATRON = ROOT / "validation" / "measurements" / "h200x2_plan_native13_megatron.json"
SET14_TORCH = ROOT / "validation" / "measurements" / "h200x2_plan_native13_torch.json"


def test_set14_megatron_as_pre_registered_with_per_plan_twins():
    """Set 14, Megatron-Core local half (session 18): Llama-3-8B's shape, which does not fit one
    H200 with its optimizer, under every plan a team would weigh on two. Predicted before the run,
    each plan under its own twin's host factor: 2.2% time (every plan within 4.0%), 0.4% peak
    memory, 7/8 verdicts: dp + distributed optimizer, predicted at 129.7 GiB allocated (over the
    line once the 5% fragmentation allowance and the 8.74 GiB outside the allocator are added),
    ran at 128.5 GiB allocated, 129.6 reserved and 9.2 GiB outside the allocator: 138.8 of 139.8
    GiB. It was the measured best, so meshcast's pick (interleaved) is 4.8% slower; tau 0.81."""
    s, groups = _per_plan(SET14_MEGATRON)
    # 2.2 -> 2.35%, worst 4.0 -> 4.3% with session 23's membound42 / gemm32 profiles (tau 0.81 -> 0.90)
    assert s.count == 8 and s.mape <= 0.0235 and s.worst_abs_error <= 0.0433 and s.memory_mape <= 0.0042
    assert (s.fit_correct, s.fit_total) == (7, 8)
    assert len(groups) == 1 and groups[0].timed == 7 and groups[0].kendall_tau >= 0.80


def test_set14_torch_native_as_pre_registered_with_per_plan_twins():
    """Set 14, torch-native half: 6.3% time (FSDP2 -5.8%, DTensor TP + SP -8.2%, pp -0.4%,
    interleaved -5.8%, cp -11.5%), 1.4% peak memory, 6/6 verdicts (DDP out of memory as
    predicted), tau 0.80 (pp and interleaved ran within 0.7% of each other), pick right."""
    s, groups = _per_plan(SET14_TORCH)
    # 6.35 -> 6.7% with session 23's membound42 / gemm32 profiles (steps predicted too fast, memory-bound kernels cheaper)
    assert s.count == 6 and s.mape <= 0.0671 and s.worst_abs_error <= 0.1153 and s.memory_mape <= 0.0143
    assert (s.fit_correct, s.fit_total) == (6, 6)
    assert len(groups) == 1 and groups[0].pick_ok and groups[0].kendall_tau >= 0.80


@pytest.mark.xfail(strict=True, reason="set 14: torch-native cp -11.5%; tau 0.81 / 0.80; Megatron dp + distributed "
                                       "optimizer predicted over the line ran with 1 GiB to spare (7/8 verdicts), "
                                       "so the pick missed the measured best by 4.8%")
def test_set14_meets_the_issue_targets():
    for path in (SET14_MEGATRON, SET14_TORCH):
        s, groups = _per_plan(path)
        assert s.worst_abs_error <= 0.10 and s.fit_correct == s.fit_total
        assert all(g.kendall_tau >= 0.9 and g.pick_ok for g in groups)


def test_moe_plan_takes_its_moe_twin_before_its_dense_twin():
    """Session 20: a MoE plan's factor is its own MoE twin's (same expert count and top-k: the
    harness's host-moe-E) where one ran, else its dense twin's (the files before MoE twins)."""
    import copy
    from validation.host_speed import plan_host_speeds, twin_ratio_by_index
    from validation.records import MeasurementFile
    mf = load_measurements(ROOT / "validation" / "measurements" / "h200_plan_moe1.json")
    hw = hardware_for(mf)
    cal = calibration_for(hw.accelerator)[0]
    plan_i = next(i for i, r in enumerate(mf.records) if r["name"] == "moe-8x2" and r["mbs"] == 1)
    dense_i = next(i for i, r in enumerate(mf.records) if is_twin(r) and r["mbs"] == 1 and r["seq"] == 2048
                   and r["recompute"] == "none")
    plan, dense = mf.records[plan_i], mf.records[dense_i]
    moe_twin = copy.deepcopy(dense)
    moe_twin.update(name="host-moe-8", experts=8, topk=2, moe_ffn_hidden=64, ffn_hidden=64)
    only_dense = MeasurementFile("x", mf.info, [plan, dense])
    both = MeasurementFile("x", mf.info, [plan, dense, moe_twin])
    f_dense = plan_host_speeds(only_dense, hw, cal)[0][0]
    assert f_dense == pytest.approx(twin_ratio_by_index(only_dense, hw, cal)[1])
    factors, _, own, twins = plan_host_speeds(both, hw, cal)
    assert twins == 2 and own == 1
    assert factors[0] == pytest.approx(twin_ratio_by_index(both, hw, cal)[2]) != pytest.approx(f_dense)
