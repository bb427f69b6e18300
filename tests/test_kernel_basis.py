"""What the attention (and Mamba scan) costs rest on, as the confidence sentence says it
(simulator/kernel_basis.py): fitted, transferred, a published design, or a stand-in."""
from __future__ import annotations

from dataclasses import replace

import pytest

from hardware_specs.catalog import load_accelerator
from simulator.calibration import calibration_for, load_calibration, profile_transferred_parameters
from simulator.compute import DeviceModel, attention_time
from simulator.kernel_basis import attention_basis


def _basis(acc: str, backend: str, cal=None) -> str:
    a = load_accelerator(acc)
    return attention_basis(backend, a, cal or calibration_for(a)[0])


def test_h200_triton_fa_names_its_transferred_forward_and_fitted_backward():
    words = _basis("h200-sxm", "triton_fa")
    assert "forward transferred from profile h100-sxm" in words
    assert "backward fitted on measurements with profile h200-sxm" in words
    assert _basis("h100-sxm", "triton_fa").endswith("fitted on measurements with profile h100-sxm")


@pytest.mark.parametrize("acc,backend", [("a100-80gb-sxm", "cudnn"), ("a100-80gb-sxm", "fa3"),
                                         ("a100-80gb-sxm", "triton_fa"), ("gb200", "fa3")])
def test_a_stand_in_is_named_and_is_what_the_cost_model_runs(acc, backend):
    a = load_accelerator(acc)
    cal = calibration_for(a)[0]
    assert "costed as FlashAttention-2 (its design needs" in attention_basis(backend, a, cal)
    dev = DeviceModel(a, cal)
    args = (dev, 2, 32, 4096, 4096, 128, True, 8)
    assert attention_time(*args, backend, "fwd_bwd") == attention_time(*args, "flash", "fwd_bwd")


def test_a_kernel_the_profile_never_measured_is_a_stand_in():
    cal = load_calibration("h100-sxm")
    bare = replace(cal, **{m: {k: v for k, v in getattr(cal, m).items() if not k.startswith("triton_fa")}
                           for m in ("attention_kernel_fraction", "attention_kernel_overlap", "attention_kernel_overhead")})
    assert "costed as FlashAttention-2 (never measured with profile h100-sxm)" in _basis("h100-sxm", "triton_fa", bare)
    assert "costed as" not in _basis("h100-sxm", "triton_fa", cal)


def test_fa3_rests_on_its_design_and_the_non_fused_paths_on_the_profile():
    assert "published design" in _basis("h100-sxm", "fa3") and "never measured here" in _basis("h100-sxm", "fa3")
    assert "profile h200-sxm's fitted attention, softmax and GEMM parameters" in _basis("h200-sxm", "unfused_torch")


@pytest.mark.parametrize("profile", ["h100-sxm", "h200-sxm"])
def test_transferred_parameters_hold_the_source_profiles_values(profile):
    """Each value a profile says it carried over equals its source profile's value (or whole map)."""
    moved = profile_transferred_parameters(profile)
    assert moved
    mine = load_calibration(profile)
    for path, src in moved.items():
        theirs = load_calibration(src)
        top, _, key = path.partition(".")
        a, b = getattr(mine, top), getattr(theirs, top)
        assert (a[key] == b[key]) if key else (a == b), path


def test_simulate_reports_the_basis_in_its_sentence_and_json(capsys):
    """The JSON's confidence carries the lines, and the sentence ends with them: a hybrid Mamba model on
    the H100 says its scan rests on the H200's parameters (the H100 profile's transferred_parameters)."""
    import json

    from meshcast.cli import main
    assert main(["simulate", "--model", "nemotron-3-nano-30b-a3b", "--cluster", "dgx-h100", "--gpus", "16",
                 "--ep", "8", "--mbs", "1", "--gbs", "64", "--seq", "4096", "--recompute", "full", "--json"]) == 0
    conf = json.loads(capsys.readouterr().out)["confidence"]
    assert conf["kernel_basis"][0].startswith("attention: cuDNN fused attention, fitted on measurements with profile h100-sxm")
    assert conf["kernel_basis"][1] == "Mamba-2 scan: parameters transferred from profile h200-sxm"
    assert conf["sentence"].endswith(". Mamba-2 scan: parameters transferred from profile h200-sxm")


def test_an_explicit_profile_file_is_the_basis_named(capsys):
    """--calibration with a profile file outside hardware_specs/profiles: the basis reads the calibration
    the step was costed with (Result.calibration_used), not a shipped profile looked up by its name."""
    import json
    from pathlib import Path

    from meshcast.cli import main
    cand = Path(__file__).resolve().parent.parent / "validation" / "candidates" / "h200-sxm-tritonfa27.yaml"
    assert main(["simulate", "--model", "llama2-7b", "--cluster", "h200-1gpu", "--gpus", "1", "--mbs", "1",
                 "--gbs", "8", "--seq", "4096", "--recompute", "full", "--calibration", str(cand), "--json"]) == 0
    conf = json.loads(capsys.readouterr().out)["confidence"]
    assert conf["kernel_basis"] == ["attention: cuDNN fused attention, fitted on measurements with profile h200-sxm-tritonfa27"]


def test_a_kernel_measured_on_another_gpu_says_which_and_how_it_is_scaled(capsys):
    """On a GPU predicted with another GPU's profile (GB200 with h100-sxm, H200 with --calibration
    h100-sxm), each basis line says the kernel was never measured on it and reaches it through its
    datasheet; on its own profile, no line says so."""
    import json

    from meshcast.cli import main

    def lines(*extra):
        assert main(["simulate", "--model", "nemotron-3-nano-30b-a3b", "--ep", "8", "--mbs", "1", "--gbs", "64",
                     "--seq", "4096", "--json", *extra]) == 0
        return json.loads(capsys.readouterr().out)["confidence"]["kernel_basis"]
    tail = "; applied to {} through its datasheet (peaks, bandwidths), never measured on it"
    gb = lines("--cluster", "gb200-nvl72", "--gpus", "8")
    assert gb[0] == "attention: cuDNN fused attention, fitted on measurements with profile h100-sxm" + tail.format("gb200")
    assert gb[1] == "Mamba-2 scan: parameters transferred from profile h200-sxm" + tail.format("gb200")
    h200 = lines("--cluster", "dgx-h200", "--gpus", "8", "--calibration", "h100-sxm")
    assert h200[0].endswith(tail.format("h200-sxm"))
    assert not any("never measured" in x for x in lines("--cluster", "dgx-h200", "--gpus", "8"))
