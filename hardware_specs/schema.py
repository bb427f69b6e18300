"""Pydantic schemas of the hardware catalog: accelerator, node and cluster.

Units live in field names and every value is an SI float: ``_Bps`` bytes per second,
``_bytes`` bytes, ``_s`` seconds, ``_hz`` hertz, ``_w`` watts, FLOP/s for peaks.
Bandwidths are *per direction* unless the name says otherwise (NVLink's "900 GB/s" for the
H100 is 450 GB/s per direction). Peaks are *dense* (no 2:4 structured sparsity).
Every numeric field must be cited in ``sources`` (field name -> datasheet / paper citation).
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, model_validator

DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp4")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _require_sources(obj: BaseModel, sources: dict[str, str], skip: tuple[str, ...] = ()) -> None:
    """Raise if a numeric field that is set has no entry in ``sources``."""
    for name, value in obj:
        if name in skip or value is None:
            continue
        if isinstance(value, (int, float, BaseModel)) and not isinstance(value, bool):
            if name not in sources:
                raise ValueError(f"field {name!r} has no citation in 'sources'")


class DensePeaks(_Strict):
    """Peak dense math throughput per dtype, FLOP/s (tensor cores where they apply)."""

    fp64: Optional[PositiveFloat] = None
    fp32: Optional[PositiveFloat] = None
    tf32: Optional[PositiveFloat] = None
    bf16: Optional[PositiveFloat] = None
    fp16: Optional[PositiveFloat] = None
    fp8: Optional[PositiveFloat] = None
    fp4: Optional[PositiveFloat] = None


class Accelerator(_Strict):
    """One GPU/accelerator: math peaks, memory hierarchy and the names the driver reports."""

    name: str = Field(description="catalog name, e.g. h100-sxm")
    vendor: str
    family: str = Field(description="microarchitecture family used for calibration transfer, e.g. nvidia-hopper")
    device_names: list[str] = Field(description="names torch.cuda.get_device_properties().name reports")
    peak_flops_dense: DensePeaks
    hbm_capacity_bytes: PositiveFloat
    hbm_bandwidth_Bps: PositiveFloat
    l2_bytes: PositiveFloat
    sram_per_sm_bytes: PositiveFloat = Field(description="shared memory + L1 per SM (the FlashAttention 'M')")
    sm_count: PositiveInt
    boost_clock_hz: PositiveFloat
    sfu_exp_per_clk_per_sm: Optional[PositiveInt] = Field(
        None, description="exponentials (MUFU.EX2) one SM's special-function units issue per clock; unset: 16, "
                          "the Ampere/Hopper/Blackwell figure (simulator.compute.SFU_PER_SM)")
    tdp_w: PositiveFloat
    price_per_gpu_hour_usd: Optional[PositiveFloat] = Field(None, description="indicative cloud price")
    calibration_profile: Optional[str] = Field(None, description="default calibration profile name")
    sources: dict[str, str]
    notes: str = ""

    @model_validator(mode="after")
    def _cited(self):
        _require_sources(self, self.sources, skip=("calibration_profile",))
        return self

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype`` (one of DTYPES); raises KeyError if not supported."""
        value = getattr(self.peak_flops_dense, dtype, None)
        if value is None:
            raise KeyError(f"{self.name} has no {dtype} peak")
        return value


class Link(_Strict):
    """A fabric as one GPU sees it: per-direction bandwidth per GPU and one-hop latency."""

    kind: Literal["nvlink", "xgmi", "pcie", "infinity_fabric", "c2c", "ethernet"]
    bandwidth_per_direction_Bps: PositiveFloat = Field(description="per GPU, one direction")
    latency_s: PositiveFloat
    domain_gpus: Optional[PositiveInt] = Field(
        None, description="GPUs reachable at this bandwidth (default: the node); 72 for an NVL72 rack")


class Node(_Strict):
    """A server: its accelerators, the intra-node fabric and the host side (for offload)."""

    name: str
    accelerator: str = Field(description="catalog name of the accelerator")
    gpus_per_node: PositiveInt
    intra_node: Link
    host_memory_bytes: PositiveFloat
    host_link: Link = Field(description="GPU <-> host (PCIe or C2C), per GPU")
    host_adam_params_per_s: PositiveFloat = Field(
        description="CPU Adam update throughput of the whole host, parameters per second (ZeRO-Offload)")
    sources: dict[str, str]
    notes: str = ""

    @model_validator(mode="after")
    def _cited(self):
        _require_sources(self, self.sources, skip=("gpus_per_node",))
        return self


class ScaleOutTier(_Strict):
    """A network tier between nodes, e.g. the InfiniBand fat tree of a SuperPOD."""

    name: str
    nics_per_node: PositiveInt
    nic_bandwidth_per_direction_Bps: PositiveFloat
    latency_s: PositiveFloat
    topology: Literal["fat_tree", "rail_optimized", "dragonfly", "torus", "single_switch"]
    oversubscription: float = Field(1.0, ge=1.0, description="taper: 2.0 halves bandwidth beyond one leaf")
    span_nodes: Optional[PositiveInt] = Field(None, description="nodes reachable at this tier (None: all)")


class Cluster(_Strict):
    """A system: node type, how many nodes, and the scale-out tiers from inner to outer."""

    name: str
    node: str = Field(description="catalog name of the node")
    num_nodes: PositiveInt
    tiers: list[ScaleOutTier] = Field(default_factory=list)
    sources: dict[str, str]
    notes: str = ""

    @model_validator(mode="after")
    def _cited(self):
        if self.tiers and "tiers" not in self.sources:
            raise ValueError("field 'tiers' has no citation in 'sources'")
        return self
