"""plan_step records: real framework steps under a parallel plan (validation/harness/plan_step.py),
predicted with the record's framework profile (issue #11, first pass).

Targets of the issue: time within 10% and memory within 5% per family, Kendall tau >= 0.9 over the
plans of one model, meshcast's pick within 3% of the measured best. Met targets are asserted; unmet
ones are strict xfails carrying today's figure (they fail the day the target is reached) with a
ratchet that today's figure does not get worse. Today's figures: docs/measurements.md ("plan_step").
"""
from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

import pytest

from models.schema import ModelSpec
from simulator.calibration import calibration_for
from simulator.compute import attention_time
from simulator.engine import device_model
from simulator.plan import resolve_plan
from validation.accuracy import kendall_tau, plan_groups, plan_label, summarize, evaluate
from validation.hardware import hardware_for
from validation.predict import plan_model, record_plan
from validation.records import load_measurements

ROOT = Path(__file__).resolve().parent.parent
MEAS = ROOT / "validation" / "measurements"
FILES = ("h200_plan_megatron.json", "h200x2_plan_megatron.json", "h200x2_plan_torchtitan.json")


@lru_cache(maxsize=None)
def evaluated(name: str):
    mf = load_measurements(MEAS / name)
    hw = hardware_for(mf)
    cal = calibration_for(hw.accelerator)[0]
    res, unsupported = evaluate(mf, hw, cal)
    usable = float(mf.info["total_memory_bytes"])
    return res, unsupported, {k.kind: k for k in summarize(res)}["plan_step"], plan_groups(res, usable)


@pytest.mark.parametrize("name", FILES)
def test_every_plan_step_record_is_predicted(name):
    res, unsupported, _, _ = evaluated(name)
    assert not unsupported
    assert len(res) == len(load_measurements(MEAS / name).records)


# ---- time ---------------------------------------------------------------------------------------
def test_one_gpu_megatron_time_within_10_percent():
    assert evaluated("h200_plan_megatron.json")[2].mape <= 0.10           # 2.5% (8.3% before the kernel reconciliation)


# ratchets: 1-GPU and 2-GPU Megatron-Core improved by the kernel reconciliation (issue #11; 8.3% -> 2.5%,
# 14.5% -> 8.3%: validation/kernel_reconcile.py, docs/measurements.md); torchtitan 22.1% -> 14.6% and 2 GPUs
# 8.3% -> 7.5% (the host fit re-run for the op count) by the torch-native kernel reconciliation; torchtitan
# 14.6% -> 14.2% with FSDP2's deferred gradient sync modelled (its two FSDP2 records ran it; session 6)
@pytest.mark.parametrize("name,ratchet", [("h200_plan_megatron.json", 0.0376), ("h200x2_plan_megatron.json", 0.076),
                                          ("h200x2_plan_torchtitan.json", 0.142)])
def test_plan_step_time_ratchet(name, ratchet):
    assert evaluated(name)[2].mape <= ratchet


def test_two_gpu_megatron_time_target():
    assert evaluated("h200x2_plan_megatron.json")[2].mape <= 0.10         # 8.3% (tensor-parallel s2048 host-bound: up to -37%)


@pytest.mark.xfail(strict=True, reason="torchtitan plans: time MAPE 14.2% (DTensor TP+SP -39% after its host dispatch cost)")
def test_torchtitan_time_target():
    assert evaluated("h200x2_plan_torchtitan.json")[2].mape <= 0.10


# ---- memory and fit verdicts ----------------------------------------------------------------------
MEMORY = {"h200_plan_megatron.json": (0.025, 8, 8), "h200x2_plan_megatron.json": (0.032, 34, 37),
          "h200x2_plan_torchtitan.json": (0.014, 4, 4)}   # torchtitan 15.5% -> 8.3% (session 5 memory fixes)
# -> 2.8% (session 6: FSDP2's deferred gradient sync, which its two FSDP2 records ran, modelled; developed on them)
# -> 1.3% (session 8: DTensor sequence parallel saves the all-gathered linear inputs; loss_parallel's buffers)


@pytest.mark.parametrize("name", FILES)
def test_plan_step_memory_ratchet_and_fit_verdicts(name):
    ratchet, right, total = MEMORY[name]
    s = evaluated(name)[2]
    assert s.memory_mape <= ratchet
    assert s.fit_total == total and s.fit_correct >= right


@pytest.mark.parametrize("name", FILES[:2])
def test_megatron_plan_step_memory_target(name):
    assert evaluated(name)[2].memory_mape <= 0.05          # 2.5% (1 GPU), 3.1% (2 GPUs)


def test_torchtitan_plan_step_memory_target():
    # met since FSDP2's deferred gradient sync is modelled (8.3% -> 2.8%; the harness deferred it in
    # these records: fp32 unsharded gradients accumulated over the micro-batches)
    assert evaluated(FILES[2])[2].memory_mape <= 0.05


# ---- ranking of the plans of one model ------------------------------------------------------------
def _groups(name):
    return {(g.group["name"], g.group["seq"], g.group["world"]): g for g in evaluated(name)[3]}


TAU_TODAY = {("h200x2_plan_megatron.json", "llama-1b", 2048, 2): 0.86,
             ("h200x2_plan_megatron.json", "llama-1b", 4096, 2): 1.0,
             ("h200x2_plan_megatron.json", "gpt-1.3b", 2048, 2): 1.0,
             ("h200x2_plan_megatron.json", "llama-3b", 4096, 2): 1.0,
             ("h200x2_plan_megatron.json", "llama-7b", 2048, 2): 0.66,
             ("h200_plan_megatron.json", "llama-1b", 4096, 1): 1.0,
             ("h200x2_plan_torchtitan.json", "llama-1b", 4096, 2): 1.0}


@pytest.mark.parametrize("key", TAU_TODAY)
def test_kendall_tau_ratchet(key):
    name, *group = key
    assert _groups(name)[tuple(group)].kendall_tau >= TAU_TODAY[key] - 1e-9


@pytest.mark.xfail(strict=True, reason="Kendall tau 0.87 (llama-1b s2048: TP under-predicted) and 0.67 (llama-7b "
                                       "s2048) over 2-GPU Megatron-Core plans")
def test_kendall_tau_target():
    assert all(g.kendall_tau >= 0.9 for name in FILES for g in evaluated(name)[3] if g.kendall_tau is not None)


PICK_OK = [("h200x2_plan_megatron.json", "llama-1b", 2048, 2), ("h200x2_plan_megatron.json", "gpt-1.3b", 2048, 2),
           ("h200x2_plan_megatron.json", "llama-3b", 4096, 2), ("h200x2_plan_torchtitan.json", "llama-1b", 4096, 2)]


@pytest.mark.parametrize("key", PICK_OK)
def test_pick_within_3_percent_where_it_is_today(key):
    name, *group = key
    assert _groups(name)[tuple(group)].pick_ok


@pytest.mark.xfail(strict=True, reason="3 of 6 two-GPU Megatron groups: meshcast's pick ran out of memory (llama-1b "
                                       "s4096 mbs2, llama-1b s8192 tp2, llama-7b dp2 distributed optimizer)")
def test_pick_target():
    assert all(g.pick_ok for g in evaluated("h200x2_plan_megatron.json")[3])


# ---- pieces ------------------------------------------------------------------------------------
def test_kendall_tau_basics():
    assert kendall_tau([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
    assert kendall_tau([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0
    assert kendall_tau([1, 2, 3], [1, 3, 2]) == pytest.approx(1 / 3)


def test_record_plan_carries_every_plan_field():
    rec = load_measurements(MEAS / "h200x2_plan_megatron.json").records
    r = next(x for x in rec if x["pp"] == 2 and x["vp"] == 2)
    p = record_plan(r)
    assert (p.tp, p.pp, p.vp, p.dp, p.zero_stage, p.mbs, p.gbs, p.seq, p.framework, p.attention, p.pipeline_schedule) == \
        (1, 2, 2, 1, 0, 1, r["gbs"], r["seq"], "megatron-core-local", "unfused_torch", "interleaved")
    m = plan_model(r)
    assert (m.num_layers, m.hidden, m.kv_heads, m.activation, m.norm, m.position) == (16, 2048, 8, "swiglu", "rmsnorm", "rope")
    assert plan_label(r) == "pp2 vp2 z0 mbs1"


def test_unfused_torch_attention_costs_more_than_apex_fused_softmax():
    """The PyTorch softmax fallback makes four fp32 passes where apex's kernel makes one bf16 pass."""
    mf = load_measurements(MEAS / "h200_plan_megatron.json")
    hw = hardware_for(mf)
    dev = device_model(hw.accelerator, calibration_for(hw.accelerator)[0])
    args = (1, 32, 4096, 4096, 64, True, 8)
    t_apex = attention_time(dev, *args, backend="unfused", direction="fwd_bwd")
    t_torch = attention_time(dev, *args, backend="unfused_torch", direction="fwd_bwd")
    assert t_torch > 2 * t_apex


def test_megatron_core_with_te_has_no_torch_softmax_fallback():
    from hardware_specs.errors import PlanError
    r = dict(load_measurements(MEAS / "h200x2_plan_megatron.json").records[0], framework="megatron-core")
    with pytest.raises(PlanError):
        resolve_plan(plan_model(r), record_plan(r), 2)


def _harness():
    spec = importlib.util.spec_from_file_location("plan_step", ROOT / "validation" / "harness" / "plan_step.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("grid", ["main", "native", "native2", "native13", "smoke", "cpu", "cpu-pp"])
def test_every_harness_case_is_a_plan_meshcast_accepts(grid):
    """The harness's case grids and meshcast's framework rules agree: each case resolves for its framework."""
    h = _harness()
    for c in h.grid(grid):
        rec = dict(kind="plan_step", framework=c["framework"], name=c["name"], **c["model"], **c["plan"])
        assert set(h.PLAN_FIELDS) <= set(rec) and set(h.MODEL_FIELDS) <= set(rec)
        plan = resolve_plan(plan_model(rec), record_plan(rec), c["plan"]["world"])
        assert plan.dp * plan.tp * plan.pp * plan.cp == c["plan"]["world"]
        assert isinstance(plan_model(rec), ModelSpec)


def test_validate_groups_repeats_across_files_with_sample_lists(capsys):
    """Several files at once (repeat grouping) with plan_step records that carry per-step sample
    lists: the samples are not part of the case, and nothing tracebacks."""
    from meshcast.cli import main
    files = ["validation/measurements/h200_plan_megatron.json", "validation/measurements/h200x2_plan_megatron.json",
             "validation/measurements/h200x4_train.json"]
    assert main(["validate", "--measurements", *files]) == 0
    assert "plan_step" in capsys.readouterr().out


# ---- plan families and the pre-registered set -------------------------------------------------
PREREG = "h200x2_plan_prereg.json"    # predicted in logs/prereg_h200x2_plan.txt before it ran
PREREG_REST = "h200x2_plan_prereg_rest.json"   # the same predictions: the 4 cases the first run lost


def test_plan_families_of_a_record():
    from validation.accuracy import plan_families_of
    base = dict(world=2, tp=1, pp=1, cp=1, vp=1, zero_stage=0, recompute="none", sequence_parallel=False)
    assert plan_families_of(base) == ["dp"]
    assert plan_families_of(dict(base, zero_stage=1)) == ["dp + distributed optimizer"]
    assert plan_families_of(dict(base, zero_stage=3)) == ["FSDP / ZeRO-3"]
    assert plan_families_of(dict(base, tp=2, sequence_parallel=True, recompute="full")) == ["tp + sp", "recompute full"]
    assert plan_families_of(dict(base, pp=2, vp=2)) == ["pp interleaved"]
    assert plan_families_of(dict(base, world=1)) == ["1 GPU"]
    # torch-native context parallel (FSDP2 over the cp ranks) and torch.distributed.pipelining
    assert plan_families_of(dict(base, cp=2, dp=1, zero_stage=3, framework="torchtitan")) == ["cp"]
    assert plan_families_of(dict(base, pp=2, framework="torchtitan", schedule="1f1b")) == ["pp 1F1B"]
    assert plan_families_of(dict(base, pp=2, vp=2, recompute="full", framework="torchtitan")) == \
        ["pp interleaved", "recompute full"]


def test_native2_grid_is_predicted_and_torch_pipelining_buffers_counted():
    """Every case of the torch-native pp / cp grid is predicted (logs/prereg3_h200x2_plan.txt), and
    torch.distributed.pipelining's per-micro-batch buffers add to a torchtitan pipeline stage's
    memory, not to Megatron-Core's."""
    from validation.prereg import rows
    out = rows("native2", str(MEAS / "h200x2_plan_torchtitan.json"))
    assert len(out) >= 20 and not [label for label, r in out if "error" in r]
    from validation.predict import plan_step_prediction
    mf = load_measurements(MEAS / "h200x2_plan_torchtitan.json")
    hw = hardware_for(mf)
    cal = calibration_for(hw.accelerator)[0]
    h = _harness()
    tt = dict(kind="plan_step", framework="torchtitan", name="llama-1b",
              **h.case("torchtitan", "llama-1b", 4096, 2, pp=2, gbs=8)["model"],
              **h.case("torchtitan", "llama-1b", 4096, 2, pp=2, gbs=8)["plan"])
    more = dict(tt, gbs=16)      # more micro-batches: more receive buffers, the same in flight
    assert plan_step_prediction(more, hw, cal).peak_memory_bytes > plan_step_prediction(tt, hw, cal).peak_memory_bytes
    mc = dict(tt, framework="megatron-core-local")
    assert plan_step_prediction(dict(mc, gbs=16), hw, cal).peak_memory_bytes == \
        pytest.approx(plan_step_prediction(mc, hw, cal).peak_memory_bytes)


def _families(*names):
    from validation.accuracy import plan_families
    res = [r for n in names for r in evaluated(n)[0]]
    return {(f.framework, f.family): f for f in plan_families(res)}


# Megatron-Core local, two GPUs, every 2-GPU file pooled: step-time MAPE per family today
# session 12 (torch paths and the fp32 softmax measured as kernels; every H200 Megatron-local step ~1-2% faster):
# dp 4.0 -> 5.1%, dp + distributed optimizer 4.1 -> 5.3%, pp 1F1B 4.7 -> 5.3%, recompute full 2.3 -> 4.1%,
# recompute selective 1.9 -> 3.3%
FAMILY_TIME_TODAY = {"dp": 0.051, "dp + distributed optimizer": 0.053, "tp": 0.096, "tp + sp": 0.082,
                     "pp 1F1B": 0.053, "pp interleaved": 0.085, "recompute full": 0.041, "recompute selective": 0.034}


@pytest.mark.parametrize("family", sorted(FAMILY_TIME_TODAY))
def test_megatron_family_time_ratchet(family):
    fam = _families("h200x2_plan_megatron.json", PREREG, PREREG_REST)[("megatron-core-local", family)]
    assert fam.time_mape <= FAMILY_TIME_TODAY[family] + 1e-9


def _megatron_family_memory():
    fams = _families("h200x2_plan_megatron.json", PREREG, PREREG_REST)
    return {fam: f.memory_mape for (fw, fam), f in fams.items() if fw == "megatron-core-local"}


def test_megatron_family_memory_ratchet():
    # 0.6-1.4% per family since Megatron-Core's unfused SwiGLU saves silu's output and the
    # x_linear + glu_linear_offset sum (session 11, read from mlp.py; developed after seeing these
    # files): selective recompute 5.6 -> 1.3%, the others 1.3-4.4% -> 0.6-1.4%
    assert all(v <= 0.0145 for v in _megatron_family_memory().values())


def test_megatron_family_memory_target():
    """Met since session 11 (was: selective recompute 5.6%)."""
    assert all(v <= 0.05 for v in _megatron_family_memory().values())


def test_megatron_family_time_target():
    # met since the torch-native kernel reconciliation: tp 11.8% -> 9.6% (the host fit re-run for
    # torch-native's op count moved Megatron's op_scale 1.64 -> 1.99)
    fams = _families("h200x2_plan_megatron.json", PREREG, PREREG_REST)
    assert all(f.time_mape <= 0.10 for (fw, _), f in fams.items() if fw == "megatron-core-local")


def test_preregistered_set_figures():
    """Predicted before it ran (both runs: 22 plans), by the model of commit 87fc7ef: time 12.6%,
    peak memory 7.8%, 21 of 22 fit verdicts (the miss: an allocator-fragmentation OOM at seq 8192,
    34 GiB allocated of 132 reserved), meshcast's pick the measured best in all 7 groups. The
    kernel reconciliation that came after (developed on h200x2_plan_profile.json, not on this set)
    gives 7.5% (Megatron-Core 4.5%, torch-native 17.1%) and, with gradient accumulation's gradients
    counted in DDP's forward peak, memory 5.7%: held out, but no longer pre-registered. Today
    5.3% / 3.3%; FSDP2's deferred gradient sync (developed on this set's FSDP2 records among others,
    so not held out) gives 5.3% / 2.3%."""
    from validation.accuracy import plan_groups, summarize
    res = []
    for name in (PREREG, PREREG_REST):
        r, unsupported, _, _ = evaluated(name)
        assert not unsupported
        res += r
    s = {k.kind: k for k in summarize(res)}["plan_step"]
    assert s.mape <= 0.075 and s.memory_mape <= 0.021
    assert s.fit_correct >= 21 and s.fit_total == 22
    groups = plan_groups(res, 150109880320.0)
    assert len(groups) == 7 and all(g.pick_ok for g in groups)


# ---- kernel families of profiled steps (validation/kernel_reconcile.py) -----------------------------
def test_kernel_reconciliation_of_profiled_steps():
    from validation.kernel_reconcile import FAMILIES, reconcile
    rows = reconcile(str(MEAS / "h200x2_plan_profile.json"))
    assert len(rows) == 4
    for r in rows:
        assert set(r["measured"]) == set(r["modelled"]) == set(FAMILIES)
        assert sum(r["measured"].values()) == pytest.approx(r["kernel_s"], rel=1e-6)
        # the kernels the first pass had no op for are modelled now
        assert r["modelled"]["main_grad_add"] > 0 and r["modelled"]["memcpy"] > 0 and r["modelled"]["softmax_bwd_mul"] > 0
    # GPU-bound data-parallel steps: modelled kernel seconds within 4% of the profile's (ratchet; 3.0% and 1.3%
    # today; 17.4% and 0.4% before, the latter by compensating errors)
    for r in rows:
        if "tp1" in r["label"]:
            total_m, total_p = sum(r["measured"].values()), sum(r["modelled"].values())
            assert abs(total_p - total_m) / total_m <= 0.04, r["label"]


def test_kernel_reconciliation_of_torch_native_profiles():
    """The torch-native profiles (h200x2_plan_native_profile.json, developed against): the families
    the model had no op for are modelled, and the two GPU-bound DDP steps' modelled kernel seconds are
    within 4.5% of the profile's (-4.3% and -3.6% today; 1.3% and 2.3% before session 23 gave memory-bound
    kernels their own fixed cost, which brought the memory-bound families closer, 11.8 -> 8.9% and 6.2 -> 4.7%
    of the step's kernel seconds summed over them, and ended the cancellation with the under-modelled
    GEMMs; 25.6% and 18.8% before the reconciliation). RoPE is over-modelled (20.8 against 10.4 ms in the
    top 30 at s2048: 40 small kernels per layer, each with the calibrated fixed cost) while the all-reduce's
    kernel time (it spins waiting for the other rank) is under."""
    from validation.kernel_reconcile import TORCH_FAMILIES, reconcile
    rows = reconcile(str(MEAS / "h200x2_plan_native_profile.json"))
    assert len(rows) == 7
    for r in rows:
        assert set(r["measured"]) == set(r["modelled"]) == set(TORCH_FAMILIES)
        assert sum(r["measured"].values()) == pytest.approx(r["kernel_s"], rel=1e-6)
        assert r["modelled"]["rope"] > 0 and r["modelled"]["casts"] > 0
    ddp = [r for r in rows if "tp1 dp2 pp1" in r["label"] and r["modelled"]["fp32_add"] > 0]
    assert len(ddp) == 2
    for r in ddp:
        total_m, total_p = sum(r["measured"].values()), sum(r["modelled"].values())
        assert abs(total_p - total_m) / total_m <= 0.045, r["label"]
        memory_bound = ("casts", "fp32_add", "rope", "norm", "mixed_add")
        off = sum(abs(r["modelled"][f] - r["measured"][f]) for f in memory_bound) / total_m
        assert off <= (0.09 if "s2048" in r["label"] else 0.048), r["label"]


# ---- the second pre-registered set (logs/prereg2_h200x2_plan.txt, predicted by the reconciled model) ---
def test_second_preregistered_set():
    """Predicted before it ran, by commit 57decda: Megatron-Core local 3.6% time, 3.3% peak memory over
    9 plans (every family within 6.6%), 12 of 12 fit verdicts, meshcast's pick the measured best in
    all 5 groups; torch-native 19.3% time (DTensor TP+SP -36%), 25.5% memory (under)."""
    import statistics
    res, unsupported, s, groups = evaluated("h200x2_plan_prereg2.json")
    assert not unsupported and s.fit_correct == s.fit_total == 12
    meg = [r for r in res if r.record["framework"] == "megatron-core-local"]
    assert statistics.fmean(abs(r.time_error) for r in meg) <= 0.0395      # 3.7 -> 3.95% (session 12)
    assert statistics.fmean(abs(r.memory_error) for r in meg) <= 0.034
    assert max(abs(r.time_error) for r in meg) <= 0.067
    assert all(g.pick_ok for g in groups) and len(groups) == 5


@pytest.mark.xfail(strict=True, reason="torch-native (second pre-registered set): DTensor TP+SP -15.2% time (peak memory "
                                       "-7.3% -> -3.7% since session 8; FSDP2 +0.8% with its deferred sync modelled)")
def test_second_preregistered_set_torch_native_target():
    res = evaluated("h200x2_plan_prereg2.json")[0]
    tt = [r for r in res if r.record["framework"] == "torchtitan"]
    assert all(abs(r.time_error) <= 0.10 and abs(r.memory_error) <= 0.05 for r in tt)


# ---- the README's per-framework rows --------------------------------------------------------------
def _framework_figures(files, framework):
    import statistics
    res = [r for f in files for r in evaluated(f)[0] if r.record["framework"] == framework]
    t = [abs(r.time_error) for r in res if r.time_error is not None]
    m = [abs(r.memory_error) for r in res if r.memory_error is not None]
    v = [r.fit_correct for r in res if r.fit_correct is not None]
    return statistics.fmean(t), statistics.fmean(m), sum(v), len(v)


def test_readme_framework_rows():
    first = ("h200_plan_megatron.json", "h200x2_plan_megatron.json", "h200x2_plan_torchtitan.json")
    t, m, right, total = _framework_figures(first, "megatron-core-local")
    assert t <= 0.067 and m <= 0.027 and (right, total) == (43, 45)          # 6.7% (7.4% before the torch-native host re-fit), 2.7% (3.0% before GQA K/V copies), 43/45 (42/45 before Megatron-Core's measured non-allocator memory, session 11)
    t, m, _, _ = _framework_figures((PREREG, PREREG_REST), "megatron-core-local")
    assert t <= 0.046 and m <= 0.025                                          # 4.5%, 2.4% (today's model; 2.8% before GQA K/V copies)
    for files in ((PREREG, PREREG_REST), ("h200x2_plan_prereg2.json",)):
        t, m, right, total = _framework_figures(files, "torchtitan")
        assert t <= 0.0805 and m <= 0.020 and right == total                  # 8.05% since session 20 adopted FA2's forward block schedule (was 8.0); 6.0-8.0% (17.1-19.3% before the torch-native kernel reconciliation); 0.9-1.9% (1.9-3.1% before session 8's DTensor-SP memory, 6.2-7.0% before FSDP2's deferred sync, 14.8-14.9% before session 5)


# ---- the allocator: the same out-of-memory plans with expandable segments -----------------------------
def test_expandable_segments_rerun_of_wrong_verdicts():
    """Four plans predicted to fit ran out of memory with 56-79% of the GPU allocated (PyTorch's default
    caching allocator fragmented around multi-GiB transients). Re-run with
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (which meshcast's launch configs now set), three
    ran, at 3.3-4.4% above the predicted peak; the fourth (predicted within 2% of the GPU's memory)
    still ran out, with 130 GiB allocated: right since session 11, when the fit verdict counts
    Megatron-Core's measured non-allocator memory (8.74 GiB, process_memory_bytes) instead of 1 GiB."""
    res, unsupported, s, _ = evaluated("h200x2_plan_expandable.json")
    mf = load_measurements(MEAS / "h200x2_plan_expandable.json")
    assert not unsupported and mf.info["env"]["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    ran = [r for r in res if not r.record["oom"]]
    assert len(ran) == 3 and all(-0.045 <= r.memory_error <= 0.005 for r in ran)   # -3.7 to +0.3% since session 11's SwiGLU bytes
    assert s.fit_correct == 4 and s.fit_total == 4


# ---- the third pre-registered set (logs/prereg3_h200x2_plan.txt): torch-native pp, cp, FSDP2 ------------
NATIVE2 = "h200x2_plan_native2.json"
# (time, memory) MAPE per family today. Pre-registered: time 14.7-23.2%, memory 10.5-27.5%. Memory since
# then developed against these records (docs/measurements.md, third pass): torchtitan's separate
# projections under autocast and eager SwiGLU, FSDP2's accumulated gradient shards.
# Time since then developed against these records and h200x2_plan_native_profile.json (torch-native kernel
# reconciliation: autocast's casts per consuming linear, fp32 gradient sums and AccumulateGrad, fp32 RoPE):
# FSDP2 14.7% -> 9.2%, pp 1F1B 15.5% -> 2.2%, interleaved 19.4% -> 4.6%, cp 23.2% -> 17.5%, full recompute 15.7% -> 3.3%.
# The cp cases ran FSDP2's gradient sync deferred to the last micro-batch: modelled (session 6), cp memory
# 12.4% -> 0.8%, cp time 16.1% -> 16.8% (the model drops their reduce-scatters; their host-bound shortfall stays).
# session 16's norm kernel model (RMSNorm predicted faster): interleaved 4.7 -> 4.8%, recompute full 3.3 -> 3.45%
# (these plans were predicted too fast already)
# session 17's H200 GEMM launch refit (7.07 -> 6.23 us per call, fitted on the H200's own tiny GEMMs): FSDP2
# 9.30 -> 9.35%, 1F1B 2.30 -> 2.31%, interleaved 4.8 -> 4.9%, recompute full 3.45 -> 3.50% (predicted too fast already)
# session 23's membound42 / gemm32 profiles (memory-bound kernels' own fixed cost, 6.37 -> 5.15 us; these steps were
# predicted too fast): FSDP2 8.97 -> 9.48%, 1F1B 2.13 -> 2.14%, interleaved 4.15 -> 5.12%, cp 7.2 -> 7.4%, recompute
# full 2.58 -> 3.11% (the ratchets, at 9.36 / 2.32 / 4.9 / 17.6 / 3.51% before, tightened to today's figures)
NATIVE2_TODAY = {"FSDP / ZeRO-3": (0.0949, 0.028), "pp 1F1B": (0.0215, 0.005), "pp interleaved": (0.0513, 0.0075),
                 "cp": (0.0741, 0.008), "recompute full": (0.0312, 0.017)}


def _native2_families():
    return {fam: f for (fw, fam), f in _families(NATIVE2).items() if fw == "torchtitan"}


@pytest.mark.parametrize("family", sorted(NATIVE2_TODAY))
def test_native2_family_ratchet(family):
    f = _native2_families()[family]
    time_today, memory_today = NATIVE2_TODAY[family]
    assert f.time_mape <= time_today and f.memory_mape <= memory_today


def test_native2_family_target():
    """Met since session 7's joint host fit (cp dispatch 2.27x, fitted on twins of other machines;
    native2 itself carries no twins): FSDP2 9.2%, cp 7.3%, every family's memory within 2.7%."""
    assert all(f.time_mape <= 0.10 and f.memory_mape <= 0.05 for f in _native2_families().values())


# ---- the fourth pre-registered set (logs/prereg4_h200x2_plan.txt: the model of commit 0c21911) -------
def test_fourth_preregistered_set():
    """Predicted before it ran, after the torch-native memory fixes developed on native2: torch-native
    peak memory 0.9% over 12 plans (pp, interleaved, FSDP2, cp with per-micro-batch reduction, DDP),
    16 of 16 fit verdicts (llama-7b s8192 pp 2 vp 2 at 126.8 GiB of 139.8), every pick right;
    Megatron-Core local gpt-1.3b s3072: 2.5% time, 1.2% memory. Megatron's four rows of the
    pre-registration file were written with the profile's default attention (apex's fused softmax)
    where the machine runs the PyTorch fallback the earlier records show (a slip of the prereg tool,
    fixed: --attention-from); the figures here predict each record as `meshcast validate` does."""
    res, unsupported, s, groups = evaluated("h200x2_plan_native3.json")
    assert not unsupported and s.fit_correct == s.fit_total == 16
    tt = _framework_figures(("h200x2_plan_native3.json",), "torchtitan")
    # memory 0.9% as pre-registered; time 17.9% as pre-registered, 9.5% with the torch-native kernel
    # reconciliation made afterwards without looking at this set (developed on native2 and the profiles)
    assert tt[1] <= 0.0095 and tt[0] <= 0.096
    meg = _framework_figures(("h200x2_plan_native3.json",), "megatron-core-local")
    assert meg[0] <= 0.0622 and meg[1] <= 0.0125      # time 2.5 -> 6.2% with session 12's torch-path kernels
    assert all(g.pick_ok for g in groups) and len(groups) == 11


@pytest.mark.xfail(strict=True, reason="torch-native step time on the fourth pre-registered set: 17.9% as "
                                       "pre-registered, 9.5% today; cp -20/-28% (host-bound DTensor dispatch), "
                                       "FSDP2 llama-3b s2048 -12%")
def test_fourth_preregistered_set_torch_native_time_target():
    res = evaluated("h200x2_plan_native3.json")[0]
    assert all(abs(r.time_error) <= 0.10 for r in res if r.record["framework"] == "torchtitan")


# ---- the fifth pre-registered set (logs/prereg5_h200x2_plan.txt: the model of commit 48eae4e) --------
def test_fifth_preregistered_set():
    """Predicted before it ran, after the torch-native kernel reconciliation: 3.8% time and 2.7% peak
    memory over 16 plans; torch-native 4.1% / 1.2% (9 plans: DDP, FSDP2, pp, interleaved, cp at seq
    16384, DTensor TP + SP at -9.9%), Megatron-Core local llama-3b s3072 and llama-1b s6144 3.3% / 4.6%
    (memory 3.3-6.0% under); 16 of 16 fit verdicts; every plan family within 10% of time; meshcast's
    pick the measured best in all 10 groups."""
    res, unsupported, s, groups = evaluated("h200x2_plan_native4.json")
    assert not unsupported and s.fit_correct == s.fit_total == 16
    assert s.mape <= 0.038 and s.memory_mape <= 0.025      # memory 2.7% as pre-registered, 2.4% with GQA's K/V copies
    assert max(abs(r.time_error) for r in res) <= 0.10
    tt = _framework_figures(("h200x2_plan_native4.json",), "torchtitan")
    meg = _framework_figures(("h200x2_plan_native4.json",), "megatron-core-local")
    assert tt[0] <= 0.042 and tt[1] <= 0.013 and meg[0] <= 0.034 and meg[1] <= 0.041   # 4.6% as pre-registered
    assert all(g.pick_ok for g in groups) and len(groups) == 10


def test_fifth_preregistered_set_memory_target_per_plan():
    """Met since session 11's SwiGLU bytes (developed after seeing the set; was 4.0% with selective
    recompute 6.0% under, 4.6% as pre-registered): every plan within 2.1%."""
    res = evaluated("h200x2_plan_native4.json")[0]
    assert all(abs(r.memory_error) <= 0.05 for r in res)


# ---- the sixth pre-registered set (logs/prereg6_h200x2_plan.txt: the model of commit f5c57f0) --------
def test_sixth_preregistered_set():
    """Predicted before it ran, after GQA's repeated K/V were counted (developed on the fifth set),
    run with expandable segments as meshcast's Megatron launch sets: 6.3% time, 2.1% peak memory over
    9 plans; Megatron-Core local 4.6% / 2.9% (every plan's memory within 4.6%, llama-1b s5120 with the
    distributed optimizer at 105.6 GiB against 102.7 predicted); torch-native 8.4% / 1.0% (cp llama-3b
    s6144 -26.7%, host-bound); 9 of 9 fit verdicts; every pick right."""
    res, unsupported, s, groups = evaluated("h200x2_plan_native5.json")
    mf = load_measurements(MEAS / "h200x2_plan_native5.json")
    assert mf.info["env"]["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert not unsupported and s.fit_correct == s.fit_total == 9
    assert s.mape <= 0.063 and s.memory_mape <= 0.021
    meg = [r for r in res if r.record["framework"] == "megatron-core-local"]
    assert max(abs(r.memory_error) for r in meg) <= 0.047 and max(abs(r.time_error) for r in meg) <= 0.085
    assert all(g.pick_ok for g in groups) and len(groups) == 6


# ---- borderline fit verdicts ------------------------------------------------------------------------
def test_within_margin_is_five_percent_either_side():
    from simulator.memory import MEMORY_MARGIN, within_margin
    assert MEMORY_MARGIN == 0.05
    assert within_margin(104.9, 100) and within_margin(95.1, 100)
    assert not within_margin(105.1, 100) and not within_margin(94.9, 100)


def test_validate_marks_which_wrong_verdicts_were_borderline():
    """Set 14's dp + distributed optimizer (predicted 146.9 GiB of 139.8, ran with 1 GiB to spare)
    and the first pass's two Megatron plans predicted at 139.3 and 134.2 GiB that ran out of memory
    are wrong verdicts within the 5% margin; set 1's llama-1b pp2 plan (55 GiB predicted, an
    allocator-fragmentation OOM under the default allocator) is wrong and not borderline."""
    def stats(name):
        s = evaluated(name)[2]
        return s.fit_total - s.fit_correct, s.fit_wrong_borderline
    assert stats("h200x2_plan_native13_megatron.json") == (1, 1)
    assert stats("h200x2_plan_megatron.json") == (2, 2)
    assert stats("h200x2_plan_prereg.json") == (1, 0)


def test_simulate_says_when_its_verdict_is_borderline(capsys):
    from meshcast.cli import main
    base = ["simulate", "--model", "llama3-8b", "--cluster", "h200-2gpu", "--gpus", "2", "--mbs", "1", "--gbs", "8",
            "--seq", "2048", "--framework", "megatron-core-local", "--attention", "unfused_torch"]
    assert main(base + ["--dp", "2", "--zero", "1"]) == 3       # docs/errors.md: does not fit
    captured = capsys.readouterr()
    near = captured.out
    assert "DOES NOT FIT" in near and "borderline: within 5% of the capacity" in near
    assert "the verdict may go either way" in captured.err
    assert main(base + ["--tp", "2"]) == 0
    assert "borderline" not in capsys.readouterr().out
