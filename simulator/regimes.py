"""Which validation regime a prediction is in: how its GPU was calibrated and which features of
its plan the project's own validation data cover. Shared by validation/bands.py (which tags each
residual) and simulator/confidence.py (which tags each prediction), so both use one definition.

GPU regimes (best first):
  calibrated    the accelerator's own profile, fitted on measurements of it
  transfer      a profile fitted on another accelerator of the same family (H100 <-> H200)
  datasheet     never measured: its datasheet with a profile of another family (A100, B200, L40S)
  uncalibrated  never measured and no measured accelerator of its vendor: documented defaults

Workload classes (the cells of the band table, with the GPU regime):
  up_to_2_gpus    one or two GPUs, as on the project's own machines
  multi_gpu       more than two GPUs, without ZeRO-3 across nodes
  zero3_at_scale  ZeRO-3 / FSDP full shard across nodes
"""
from __future__ import annotations

GPU_REGIMES = ("calibrated", "transfer", "datasheet", "uncalibrated")
WORKLOADS = ("up_to_2_gpus", "multi_gpu", "zero3_at_scale")

GPU_REGIME_WORDS = {
    "calibrated": "calibrated {acc} (its own profile, fitted on measurements of it)",
    "transfer": "{acc} predicted by transfer from the {prof} profile (same family, another GPU's measurements)",
    "datasheet": "{acc} never measured here (datasheet + nearest profile {prof})",
    "uncalibrated": "{acc} never measured here and no measured GPU of its vendor (datasheet + default efficiencies)",
}

FEATURE_WORDS = {
    "pp": "pipeline parallelism", "vp": "interleaved pipeline (virtual stages)", "cp": "context parallelism",
    "ep": "expert parallelism", "ep_cross_node": "expert parallelism across nodes",
    "tp_cross_node": "tensor parallelism across nodes", "zero3": "ZeRO-3 / FSDP full shard",
    "zero3_at_scale": "ZeRO-3 / FSDP across nodes", "fp8": "FP8 GEMMs", "nvfp4": "NVFP4 GEMMs", "multi_node": "more than one node",
}


def gpu_regime(accelerator, calibration_name: str) -> tuple[str, str | None]:
    """The GPU regime of predicting ``accelerator`` with calibration ``calibration_name``, and the
    accelerator the profile was fitted on (None for the defaults or an unknown profile). Read from
    the catalog's ``calibration_profile`` links, not from any note text."""
    from hardware_specs.catalog import list_accelerators, load_accelerator

    if calibration_name == accelerator.calibration_profile:
        return "calibrated", accelerator.name
    owners = [load_accelerator(a) for a in list_accelerators()]
    owner = next((a for a in owners if a.calibration_profile == calibration_name), None)
    if owner is None:
        return "uncalibrated", None
    if owner.family == accelerator.family:
        return "transfer", owner.name
    return "datasheet", owner.name


def band_regime(regime: str, family: str) -> str:
    """The band-table row of a GPU regime (Mondrian conformal, Vovk et al. 2003: one band per
    category known before the prediction): ``datasheet`` is split by the accelerator's family
    (``datasheet:nvidia-blackwell``, ``datasheet:nvidia-ampere``), since borrowed efficiencies
    transfer to one architecture better than to another; every other regime is its own row."""
    return f"datasheet:{family}" if regime == "datasheet" else regime


def feature_tags(plan, num_gpus: int, gpus_per_node: int) -> list[str]:
    """Feature tags of a plan on ``num_gpus`` GPUs with ``gpus_per_node`` per node (sorted);
    ``plan`` is a ParallelPlan or its to_dict() form. ``framework:<name>`` names the framework."""
    g = plan.get if isinstance(plan, dict) else (lambda k, d=None: getattr(plan, k, d))
    tp, pp, cp, ep = (int(g(k, 1) or 1) for k in ("tp", "pp", "cp", "ep"))
    vp, zero = int(g("vp", 1) or 1), int(g("zero_stage", 0) or 0)
    multi_node = num_gpus > gpus_per_node
    tags = {"pp": pp > 1, "vp": vp > 1, "cp": cp > 1, "ep": ep > 1, "ep_cross_node": ep > 1 and tp * ep > gpus_per_node,
            "tp_cross_node": tp > gpus_per_node, "zero3": zero == 3, "zero3_at_scale": zero == 3 and multi_node,
            "fp8": g("precision") == "fp8", "nvfp4": g("precision") == "nvfp4", "multi_node": multi_node}
    out = sorted(k for k, on in tags.items() if on)
    framework = g('framework') or 'megatron-core'
    if zero >= 2:   # sharded gradients (and parameters) are each framework's own mechanism
        out.append(f"sharded:{framework}:zero{zero}")
    return out + [f"framework:{framework}"]


def model_tags(model) -> list[str]:
    """Feature tags a model brings to any plan: ``mamba`` where its layer pattern holds Mamba-2
    blocks (models.schema hybrid_pattern)."""
    pattern = getattr(model, "hybrid_pattern", None) or ""
    return ["mamba"] if "M" in pattern else []


def workload(tags: list[str], num_gpus: int) -> str:
    """The workload class (a band-table cell, with the GPU regime) of a tagged plan."""
    if "zero3_at_scale" in tags:
        return "zero3_at_scale"
    return "up_to_2_gpus" if num_gpus <= 2 else "multi_gpu"


def describe_feature(tag: str) -> str:
    """Plain words for a feature tag."""
    if tag == "mamba":
        return "Mamba-2 blocks"
    if tag.startswith("framework:"):
        return f"the {tag.split(':', 1)[1]} framework"
    if tag.startswith("sharded:"):
        _, framework, zero = tag.split(":")
        return f"ZeRO-{zero[4:]} as {framework} runs it"
    return FEATURE_WORDS.get(tag, tag)
