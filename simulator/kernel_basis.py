"""What the cost of a prediction's kernels rests on, in plain words: for its attention kernel (and the
Mamba-2 scan where the model has one), whether the parameters were fitted on measurements of that
kernel with this profile, carried over from another GPU's profile (``transferred_parameters``), taken
from the kernel's published design, or stood in for by another kernel that was measured.

The band of simulator/confidence.py says how far whole steps of this kind were off; these lines say
which kernel measurements the step's attention cost comes from, which the band does not.

    attention_basis(backend, accelerator, cal) -> str
    kernel_basis(result) -> tuple[str, ...]
"""
from __future__ import annotations

from simulator.calibration import DEFAULT, Calibration, profile_transferred_parameters
from simulator.compute import FUSED_KERNELS, HOPPER_DESIGNS, costed_attention_backend

ATTENTION_NAMES = {
    "flash": "FlashAttention-2 (PyTorch SDPA)", "cudnn": "cuDNN fused attention", "fa3": "FlashAttention-3",
    "efficient": "SDPA memory-efficient attention", "triton_fa": "llm-foundry's Triton FlashAttention",
    "unfused": "unfused attention (batched GEMMs and a fused softmax)", "math": "SDPA math attention",
    "unfused_torch": "Megatron-Core local attention (PyTorch ops)",
}
# the parameter maps a fitted fused kernel's values live in (simulator.compute.fused_attention_params)
KERNEL_MAPS = ("attention_kernel_fraction", "attention_kernel_overlap", "attention_kernel_overhead",
               "attention_kernel_score_ops")
DIRECTIONS = {"fwd": "forward", "bwd": "backward"}


def attention_basis(backend: str, accelerator, cal: Calibration) -> str:
    """One line saying what ``backend``'s cost on ``accelerator`` with calibration ``cal`` rests on:
    a stand-in (costed as FlashAttention-2, simulator.compute.costed_attention_backend), FA3's design,
    a fitted kernel (naming any of its values transferred from another profile), or the profile's
    FlashAttention-2 / GEMM / softmax parameters (the non-fused and FA2 paths)."""
    name = ATTENTION_NAMES.get(backend, backend)
    if costed_attention_backend(backend, accelerator.family, cal) != backend:
        if backend in HOPPER_DESIGNS and accelerator.family not in HOPPER_DESIGNS[backend]:
            why = f"its design needs {' or '.join(f.removeprefix('nvidia-') for f in HOPPER_DESIGNS[backend])}"
        else:
            why = f"never measured with profile {cal.name}"
        return f"attention: {name} costed as FlashAttention-2 ({why})"
    if cal.name == DEFAULT.name:
        return f"attention: {name} at documented default efficiencies (no profile)"
    if backend == "fa3":
        return (f"attention: {name} costed from its published design (Shah et al. 2024) at profile {cal.name}'s "
                "GEMM rate; never measured here")
    if backend not in FUSED_KERNELS:
        return f"attention: {name}, costed with profile {cal.name}'s fitted attention, softmax and GEMM parameters"
    return f"attention: {name}, {_fitted_words(backend, cal)}"


def _fitted_words(backend: str, cal: Calibration) -> str:
    """'fitted on measurements with profile P', or per direction which values came from which profile."""
    keys = sorted({f"{m}.{k}" for m in KERNEL_MAPS for k in getattr(cal, m)
                   if k == backend or k.startswith(backend + "_")})
    moved = profile_transferred_parameters(cal.name)
    source = {k: next((v for p, v in moved.items() if k == p or k.startswith(p + ".")), None) for k in keys}
    if not any(source.values()):
        return f"fitted on measurements with profile {cal.name}"
    parts = []
    for d, words in DIRECTIONS.items():
        srcs = {source[k] for k in keys if k.endswith("_" + d)}
        if srcs:
            parts.append(f"{words} " + (f"fitted on measurements with profile {cal.name}" if srcs == {None} else
                                        f"transferred from profile {', '.join(sorted(s or cal.name for s in srcs))}"))
    return "; ".join(parts)


def ssd_basis(cal: Calibration) -> str:
    """One line saying what the Mamba-2 SSD scan's cost rests on with calibration ``cal``."""
    if cal.name == DEFAULT.name:
        return "Mamba-2 scan: documented default efficiencies (no profile)"
    sources = sorted({src for p, src in profile_transferred_parameters(cal.name).items() if p.startswith("ssd_")})
    if sources:
        return f"Mamba-2 scan: parameters transferred from profile {', '.join(sources)}"
    return f"Mamba-2 scan: fitted on measurements with profile {cal.name}"


def kernel_basis(result) -> tuple[str, ...]:
    """The basis lines of a simulated Result: its attention kernel's, and the Mamba-2 scan's where the
    model has Mamba blocks. For a pipeline over several GPU types, the first type's."""
    from hardware_specs.catalog import load_accelerator
    acc = load_accelerator(result.accelerator.split("+")[0])
    cal = result.calibration_used
    lines = [attention_basis(result.plan.attention or "flash", acc, cal)]
    if "mamba" in result.model_tags:
        lines.append(ssd_basis(cal))
    return tuple(line + _elsewhere(acc, cal) for line in lines)


def _elsewhere(accelerator, cal: Calibration) -> str:
    """'; applied to A through its datasheet ...' where ``cal`` is another catalog GPU's profile
    (transfer or datasheet regime, simulator.regimes.gpu_regime): the kernel's values were fitted on
    other GPUs and reach this one only through its peaks and bandwidths; empty for the GPU's own
    profile and for a profile of no catalog GPU (a candidate file, the defaults)."""
    from simulator.regimes import gpu_regime
    regime, _ = gpu_regime(accelerator, cal.name)
    if regime not in ("transfer", "datasheet"):
        return ""
    return f"; applied to {accelerator.name} through its datasheet (peaks, bandwidths), never measured on it"
