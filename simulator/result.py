"""The result of one simulated training step, and its plain-data forms (dict / JSON)."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from simulator.memory import MemoryBreakdown
from simulator.plan import ParallelPlan

BOTTLENECK_NAMES = {
    "compute": "compute (GEMMs, attention and memory-bound kernels)",
    "tp": "tensor-parallel communication",
    "cp": "context-parallel communication",
    "ep": "expert-parallel all-to-all",
    "dp": "data-parallel gradient/parameter communication",
    "pp": "pipeline point-to-point transfers",
    "bubble": "pipeline bubble",
    "optimizer": "optimizer step",
    "host": "host-bound: the CPU issuing kernels (eager dispatch, FSDP hooks)",
}


@dataclass
class StageCost:
    """One pipeline stage for one micro-batch: seconds forward/backward and by category."""

    index: int
    layers: int
    moe_layers: int
    forward_s: float
    backward_s: float
    groups: dict
    flops: float = 0.0      # GEMM + attention FLOPs of one micro-batch, forward + backward, no recompute
    host_s: float = 0.0     # host seconds to dispatch one micro-batch of this stage
    host_forward_s: float = 0.0   # of which its forward pass
    power_s: dict = None    # (exposed, active) seconds of one micro-batch per class of the step power model


@dataclass
class Result:
    """Predicted step. Times in seconds, memory in bytes, throughput in tokens/s.

    MFU = model FLOPs / (step time x GPUs x dense bf16 peak), model FLOPs by the Megatron
    convention (simulator/flops.py); HFU counts recomputed forward FLOPs as well.
    ``mfu_precision_peak`` divides by the peak of the plan's GEMM precision (fp8 for fp8 plans, fp4 for nvfp4)."""

    model: str
    cluster: str
    accelerator: str
    num_gpus: int
    plan: ParallelPlan
    calibration: str
    step_time_s: float
    tokens_per_s: float
    model_flops: float
    hardware_flops: float
    mfu: float
    hfu: float
    mfu_precision_peak: float
    memory: MemoryBreakdown
    stage_memory: list
    stages: list
    breakdown: dict
    pipeline_s: float
    dp_comm_total_s: float
    p2p_s: float
    timeline: list | None = field(default=None, repr=False)
    ops: dict | None = field(default=None, repr=False)   # op lists of one micro-batch (with_ops=True)
    host_issue_s: float = 0.0       # host (CPU) seconds to issue every micro-batch's forward and backward
    host_optimizer_s: float = 0.0   # host seconds to issue the optimizer step
    split_note: str = ""            # how the framework split uneven layers over the stages ('' if given/even)
    model_tags: tuple = ()          # feature tags the model brings (simulator.regimes.model_tags: mamba)
    clock_fraction: float = 1.0     # SM clock / f_max the step runs at under the power limit (simulator/power.py)
    full_clock_step_time_s: float = 0.0   # the same step at full clock (a burst); = step_time_s if not capped
    calibration_used: object = field(default=None, repr=False, compare=False)   # the Calibration itself (engine sets it)

    @cached_property
    def confidence(self):
        """Regime, 80% band and plain-words sentence of this prediction (simulator/confidence.py)."""
        from simulator.confidence import confidence_of
        return confidence_of(self)

    @property
    def fits(self) -> bool:
        return self.memory.fits

    @property
    def tflops_per_gpu(self) -> float:
        """Model TFLOP/s per GPU (model FLOPs / step time / GPUs / 1e12)."""
        return self.model_flops / self.step_time_s / self.num_gpus / 1e12

    @property
    def bottleneck(self) -> str:
        """The category with the most exposed time."""
        key = max(self.breakdown, key=self.breakdown.get)
        return key

    def bottleneck_sentence(self) -> str:
        key = self.bottleneck
        share = self.breakdown[key] / self.step_time_s
        return f"{BOTTLENECK_NAMES.get(key, key)}: {share:.0%} of the step"

    def to_dict(self) -> dict:
        """Plain-data form for --json (units in key names)."""
        return {
            "model": self.model, "cluster": self.cluster, "accelerator": self.accelerator,
            "num_gpus": self.num_gpus, "calibration": self.calibration, "plan": self.plan.to_dict(),
            "step_time_s": self.step_time_s, "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_gpu": self.tokens_per_s / self.num_gpus,
            "model_tflops_per_gpu": self.tflops_per_gpu, "mfu": self.mfu, "hfu": self.hfu,
            "mfu_precision_peak": self.mfu_precision_peak,
            "memory": self.memory.to_dict(), "fits": self.fits,
            "stage_memory_total_bytes": [m.total_bytes for m in self.stage_memory],
            "time_breakdown_s": dict(self.breakdown), "bottleneck": self.bottleneck,
            "bottleneck_description": self.bottleneck_sentence(),
            "stages": [{"index": s.index, "layers": s.layers, "moe_layers": s.moe_layers,
                        "forward_s": s.forward_s, "backward_s": s.backward_s} for s in self.stages],
            "pipeline_s": self.pipeline_s, "dp_comm_total_s": self.dp_comm_total_s, "p2p_s": self.p2p_s,
            "host_issue_s": self.host_issue_s, "host_optimizer_s": self.host_optimizer_s,
            "clock_fraction": self.clock_fraction, "full_clock_step_time_s": self.full_clock_step_time_s,
            "layer_split_note": self.split_note,
            "confidence": self.confidence.to_dict(),
        }
