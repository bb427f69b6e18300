"""Shared by the candidate-profile tests: a device model of the kernel suites' GPU under a calibration,
and a candidate profile of validation/candidates/ by name."""
from __future__ import annotations

from pathlib import Path

from simulator.calibration import load_calibration
from simulator.compute import DeviceModel
from validation.hardware import hardware_for
from validation.records import load_measurements

ROOT = Path(__file__).resolve().parent.parent


def kernel_device(gpu: str, cal) -> DeviceModel:
    """The device model of ``gpu``'s kernel suite (validation/measurements/<gpu>_kernels.json) under ``cal``."""
    mf = load_measurements(ROOT / "validation" / "measurements" / f"{gpu}_kernels.json")
    return DeviceModel(hardware_for(mf).accelerator, cal)


def candidate(gpu: str, name: str):
    """The calibration of candidate profile validation/candidates/<gpu>-sxm-<name>.yaml."""
    return load_calibration(str(ROOT / "validation" / "candidates" / f"{gpu}-sxm-{name}.yaml"))


# Parameters fitted after the earlier candidates, which no GEMM or memory-bound kernel of theirs uses:
# the Mamba-2 SSD scan's, refitted in session 25 under the kernel-by-kernel byte count (candidate ssd42,
# adopted), and llm-foundry's Triton FlashAttention (backend triton_fa, session 26: new entries of the
# attention_kernel_* maps, validation/triton_fa_fit.py)
SSD_PARAMETERS = ("ssd_fraction", "ssd_hbm_fraction", "ssd_kernel_fixed_s", "ssd_host_s")
LATER_KERNEL_MAPS = ("attention_kernel_fraction", "attention_kernel_overlap", "attention_kernel_overhead")
LATER_KERNELS = ("triton_fa",)
# PyTorch's softmax kernels, refitted by candidate membound66 (validation/membound66_fit.py) and adopted in
# session 36 after the registered seed-66/67 draws, and the causal mask's softmax cost refitted on top of them
# (softmax_masked_cost, H200); no GEMM, attention backend or other memory-bound kind uses them
SOFTMAX66_PARAMETERS = ("softmax_warp_cycles", "softmax_elements_per_cycle", "softmax_wave_cycles", "softmax_masked_cost")


def with_later_fits_of(cal, committed):
    """``cal`` with the committed profile's SSD scan parameters (SSD_PARAMETERS), its softmax parameters
    (SOFTMAX66_PARAMETERS) and its entries for the kernels fitted since (LATER_KERNELS): a candidate of an
    earlier session compared with today's profile."""
    from dataclasses import replace
    maps = {m: {**getattr(cal, m), **{k: v for k, v in getattr(committed, m).items()
                                      if k.startswith(LATER_KERNELS)}} for m in LATER_KERNEL_MAPS}
    return replace(cal, **{p: getattr(committed, p) for p in SSD_PARAMETERS + SOFTMAX66_PARAMETERS}, **maps)


def committed_before_39(gpu: str):
    """The committed profile of ``gpu`` before issue #12 session 39 adopted candidate m78copy (frozen as
    validation/candidates/<gpu>-sxm-pre39.yaml): what the candidates before it were registered beside."""
    return candidate(gpu, "pre39")
