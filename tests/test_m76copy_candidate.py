"""Candidate m76copy (issue #12 session 38): m76bmm with Megatron-Core local attention's layout copies costed
(``unfused_layout_copies``), found by profiling the local-attention composite kernel by kernel
(validation/harness/attention_backends.py --profile; validation/measurements/profiles/*_unfused_profile*.json)."""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from simulator.calibration import load_calibration
from simulator.compute import strided_elementwise_time, unfused_torch_attention_parts
from tests.kernel_profiles import committed_before_39, candidate, kernel_device
from validation.hardware import hardware_for
from validation.predict import kernel_time
from validation.records import load_measurements

ROOT = Path(__file__).resolve().parent.parent
PROFILES = {"h200": ROOT / "validation" / "measurements" / "profiles" / "h200_unfused_profile38.json",
            "h100": ROOT / "validation" / "measurements" / "profiles" / "h100_unfused_profile37.json"}
STRIDED_COPY = re.compile(r"elementwise_kernel<128, 4, .*direct_copy_kernel")


@pytest.mark.parametrize("gpu", ("h200", "h100"))
def test_committed_profiles_leave_the_copies_uncosted(gpu):
    cal = committed_before_39(gpu)
    assert cal.unfused_layout_copies == 0.0
    dev = kernel_device(gpu, cal)
    for direction in ("fwd", "bwd"):
        assert dict(unfused_torch_attention_parts(dev, 8, 16, 16, 2048, 2048, 128, direction))["layout_copy"] == 0.0


@pytest.mark.parametrize("gpu", ("h200", "h100"))
def test_candidate_is_m76bmm_with_the_copies_on(gpu):
    """Nothing fitted for it: the copies stream at the strided element rate the profile already holds."""
    cand, base = candidate(gpu, "m76copy"), candidate(gpu, "m76bmm")
    assert cand.unfused_layout_copies == 1.0
    assert replace(cand, unfused_layout_copies=0.0, name=base.name) == base
    dev = kernel_device(gpu, cand)
    b, h, s, d = 8, 16, 2048, 128
    fwd = dict(unfused_torch_attention_parts(dev, b, h, h, s, s, d, "fwd"))["layout_copy"]
    bwd = dict(unfused_torch_attention_parts(dev, b, h, h, s, s, d, "bwd"))["layout_copy"]
    gqa = dict(unfused_torch_attention_parts(dev, b, h, 2, s, s, d, "bwd"))["layout_copy"]
    e = b * h * s * d
    assert fwd == pytest.approx(strided_elementwise_time(dev, e))
    assert bwd == pytest.approx(strided_elementwise_time(dev, e) + strided_elementwise_time(dev, 2 * e, launches=2))
    assert gqa == pytest.approx(fwd)            # grouped K / V gradients come out of the sum over the group


@pytest.mark.parametrize("gpu", ("h200", "h100"))
def test_profiled_composites_hold_the_strided_copies(gpu):
    """Every profiled local-attention call ran the context's strided copy forward (one launch, plus K and V
    repeated for grouped heads) and three more backward without grouped heads (one with): the kernels the
    committed model leaves out, 0.2-14% of a call."""
    mf = load_measurements(PROFILES[gpu])
    assert len(mf.records) == {"h200": 28, "h100": 26}[gpu]
    for r in mf.records:
        copies = sum(c for name, _, c in r["kernels"] if STRIDED_COPY.search(name))
        gqa = (r.get("kv_heads") or r["heads"]) != r["heads"]
        assert copies == (3 if gqa else 1) + (r["kind"] == "attention_fwd_bwd") * (1 if gqa else 3), r
        share = sum(t for name, t, _ in r["kernels"] if STRIDED_COPY.search(name)) / r["kernel_s"]
        assert 0.001 < share < 0.15


# composite MAPE of the profiled calls (the shapes of registered draws 38 / 37, run again with --profile; the
# copies were found on them: development data) by the committed model, m76bmm and m76copy
PROFILED = {"h200": (0.0314, 0.0424, 0.0209), "h100": (0.0355, 0.0410, 0.0360)}


@pytest.mark.parametrize("gpu", ("h200", "h100"))
def test_copies_take_back_what_the_batched_gemms_covered(gpu):
    """H200: committed 3.14%, m76bmm 4.24% (its right GEMMs expose the missing copies: bias -3.8%), m76copy
    2.09%; H100 3.55 / 4.10 / 3.60%."""
    mf = load_measurements(PROFILES[gpu])
    hw = hardware_for(mf)
    got = []
    for cal in (committed_before_39(gpu), candidate(gpu, "m76bmm"), candidate(gpu, "m76copy")):
        got.append(sum(abs(kernel_time(r, hw, cal) / r["time_s"] - 1) for r in mf.records) / len(mf.records))
    assert got == pytest.approx(PROFILED[gpu], abs=5e-4)


# registered in a3082aa (code of fdbfcbd) before the draws ran: Megatron-Core local attention, pooled fwd and fwd+bwd
REGISTERED = {("h200", 39): {"": 0.0275, "_m76bmm": 0.0441, "_m76copy": 0.0301},
              ("h100", 40): {"": 0.0312, "_m76bmm": 0.0387, "_m76copy": 0.0367},
              # registered in dfaf03f (code of 157d98b), with m78copy (m76copy with membound78's softmax) beside them
              ("h200", 41): {"": 0.0272, "_m76copy": 0.0240, "_m78copy": 0.0228},
              ("h100", 42): {"": 0.0312, "_m76copy": 0.0291, "_m78copy": 0.0244}}


@pytest.mark.parametrize("gpu,seed", sorted(REGISTERED))
def test_local_attention_on_the_draws_registered_before_they_ran(gpu, seed):
    """H200 seed 39: committed 2.75%, m76bmm 4.41%, m76copy 3.01%; H100 seed 40: 3.12 / 3.87 / 3.67%. The copies
    take back most of what m76bmm's right batched GEMMs lose, not all: the committed composite stays the best
    whole, so m76copy is not adopted (docs/validation.md, sessions 37-38). H200 seed 41 / H100 seed 42 (session 39):
    committed 2.72 / 3.12%, m76copy 2.40 / 2.91%, m78copy (membound78's register softmax and re-reads added) 2.28 /
    2.44%, the best on both: adopted in session 39 (the committed profile since predicts these draws as its log)."""
    from validation.prereg_attention import score
    for reg, mape in REGISTERED[(gpu, seed)].items():
        s = score(str(ROOT / "validation" / "measurements" / "logs" / f"prereg_attention{seed}_{gpu}{reg}.txt"),
                  str(ROOT / "validation" / "measurements" / "repeat" / f"{gpu}_attention_fresh{seed}.json"))
        assert s["table"][("unfused_torch", "pooled")]["mape"] == pytest.approx(mape, abs=5e-4), reg
    if seed >= 41:
        assert min(REGISTERED[(gpu, seed)].values()) == REGISTERED[(gpu, seed)]["_m78copy"]
