"""Named efficiency parameters of the cost model, and calibration profiles that set them.

Physics gives FLOPs and bytes; these few parameters say how close real kernels and NCCL get
to the datasheet. Defaults are documented planning values (docs/cost_model.md); a
calibration profile fitted by ``meshcast calibrate`` from real measurements replaces them.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal, Optional

import yaml

from hardware_specs.errors import SpecError
from hardware_specs.fileio import write_text_atomic
from hardware_specs.yamlio import read_yaml_mapping

PROFILE_DIR = Path(__file__).resolve().parent.parent / "hardware_specs" / "profiles"


@dataclass(frozen=True)
class LinkEfficiency:
    """α–β parameters of one fabric tier as NCCL achieves them.

    NCCL runs a low-latency protocol (LL/LL128: small fixed cost, part of the bandwidth) and a
    bandwidth protocol (Simple: larger fixed cost, full bandwidth), choosing by message size;
    each is an α–β pair and ``ll_max_bytes`` is the largest size sent with the low-latency one.
    ``alpha_s``: Simple protocol's fixed cost per algorithm step (launch + hop latency), seconds.
    ``bandwidth_fraction``: Simple's achieved fraction of the tier's per-direction bandwidth.
    ``ll_alpha_s``, ``ll_bandwidth_fraction``: the same for the low-latency protocol.
    ``chunk_bytes``: pipeline chunk of a chained (ring) broadcast: each rank past the first hop
    waits for one chunk, min(B, chunk), before forwarding (0: no fill term).
    ``ramp_s``, ``ramp_tau_s``: start-up of a ring collective's two-way traffic (all-reduce,
    all-gather, reduce-scatter), seconds: a call of link time t over n ranks pays
    ramp_s/(n−1)·(1 − e^(−t/ramp_tau_s)) more, so its marginal bandwidth rises toward β with size
    (simulator.comm.ring_ramp; ramp_tau_s 0: no term).
    ``nccl_bus_Bps``: where positive, the protocol is NCCL's own choice by size, kind and GPU count
    (simulator.nccl.protocol, its tuner run with this ring-graph bus bandwidth: 360 GB/s on
    H100/H200 NVLink, read from NCCL's log) instead of the one ``ll_max_bytes`` switch; LL128 is
    costed as Simple. Not fitted.
    """

    alpha_s: float
    bandwidth_fraction: float
    ll_alpha_s: float = 0.0
    ll_bandwidth_fraction: float = 0.0
    ll_max_bytes: float = 65536.0
    chunk_bytes: float = 0.0
    ramp_s: float = 0.0
    ramp_tau_s: float = 0.0
    nccl_bus_Bps: float = 0.0


@dataclass(frozen=True)
class Calibration:
    """Efficiency parameters of the compute and communication cost models.

    Compute (per accelerator):
      gemm_peak_fraction[dtype]  achievable fraction of the dense datasheet peak in a large GEMM
      gemm_tile_overhead_k       per-tile prologue/epilogue expressed as extra K elements
      gemm_small_tile_exponent   throughput of a smaller output tile: (area/largest)^exponent
      gemm_unaligned_fraction    load rate of cuBLAS's non-TMA fallback kernels when a leading
                                 dimension is not 16-byte aligned: the FLOP/s of the largest tile
                                 at one element per load, as a fraction of the datasheet bf16 peak
                                 (dtype-independent; simulator.compute.unaligned_load_s)
      gemm_unaligned_fixed_s     extra fixed seconds of such a fallback GEMM call
      gemm_split_k_fixed_s       fixed seconds of a split-K / stream-K reduction of fp32 partials
      gemm_grouped_fixed_s       extra fixed seconds of a grouped GEMM call (torch._grouped_mm: the
                                 per-group problem set-up on the device; validation/grouped_fit.py)
                                 (in-kernel fix-up or a small second kernel), per GEMM that splits k
      gemm_unaligned_max_vector  widest load, elements, of the fallback kernels cuBLAS runs for an
                                 unaligned GEMM (traced: CUTLASS align1 and align2 kernels only, no
                                 align4); 0: no cap (a %8 == 4 bf16 dimension loads 4 at a time)
      gemm_unaligned_split_waves split-K of those fallback kernels: k is split while the
                                 tile-splits fill at most this many waves of one per SM (traced:
                                 up to ~2 x SMs CTAs, up to ~260 splits, reduced by a separate
                                 kernel); 0: they split as the TMA kernels do (split_k_factors)
      gemm_split_k_per_split_s   seconds per split of the split-K reduction (cuBLAS's separate
                                 splitKreduce kernel reads the s partials of an output serially:
                                 traced ~32 ns per split); 0: none
      gemm_l2_operand_bytes_per_flop  whole-GPU rate at which the tiles of one GEMM stream their
                                 operands from L2 into shared memory, bytes per FLOP of the datasheet
                                 dense bf16 peak: a split-K tiling's compute time is at least
                                 Σ_tile-splits (tm + tn)·k·bytes / (this x bf16 peak) (issue #12 session
                                 23, candidate gemm36); 0: no such floor
      gemm_unaligned_store_serial  share of the output store of cuBLAS's non-TMA fallback GEMM kernels
                                 (CUTLASS SM75 align1 / SM80 align2, no split-K) that does not overlap
                                 their main loop: + this x the tiles' padded C bytes / HBM bandwidth
                                 (issue #12 session 24, candidate gemm40); 0: none (fully overlapped)
      gemm_unaligned_reuse_exponent  those fallback kernels' loads of a tile of reuse r = 2·tm·tn/(tm+tn)
                                 take (r_max / r) ** this longer than the per-element load law
                                 (fewer, smaller warps per small CTA tile; candidate gemm40); 0: off
      gemm_tile_granularity      0: the tile search of an aligned, unbatched GEMM takes the five coarse tiles
                                 (simulator.compute.GEMM_TILES); g > 0: also cuBLAS's wide nvjet tiles, one
                                 side 128, 192 or 256 and the other from 128 to 256 (320 beside 128) in steps
                                 of g elements (simulator.compute.gemm_tiles; issue #12 session 43,
                                 candidate gemm72)
      gemm_sm_load_bytes_per_flop  bytes one SM loads GEMM operands at (L2 to shared memory) per
                                 FLOP of its datasheet dense bf16 peak: a tile's main loop takes at
                                 least (tm + tn)·k·bytes / (this x bf16 peak / SMs) seconds; 0: no cap
      kernel_launch_s            fixed per-kernel cost seen by CUDA events (launch + tail)
      memory_kernel_fixed_s      fixed seconds of one memory-bound kernel (PyTorch's elementwise,
                                 copy, norm and softmax kernels, simulator.compute.memory_fixed_s)
                                 as CUDA events around it see it: the device-side launch, the
                                 first loads' latency and the tail, with the host's issue outside
                                 the events; 0 = kernel_launch_s (every profile before issue #12
                                 session 22). Fitted with the memory-bound rates on the kernel
                                 suite and the membound_random draws (validation/membound_fit.py)
      memory_kernel_chained_s    fixed seconds a memory-bound kernel adds when it is queued right
                                 behind another inside one pair of CUDA events (eager ``F.silu(x) *
                                 y``'s product kernel: simulator.compute.torch_silu_mul_time); read
                                 only where ``memory_op_fraction["silu"]`` is fitted
      memory_op_fixed_s[family]  fixed seconds of one memory-bound op of a family that does not
                                 run a TensorIterator kernel, in place of memory_kernel_fixed_s:
                                 ``copy`` = a contiguous same-dtype copy_ PyTorch issues as one
                                 cudaMemcpyAsync (simulator.compute.memcpy_time); empty: as before
      gemm_launch_s              fixed seconds of one library GEMM call with no work, as CUDA
                                 events see it (launch, kernel prologue and epilogue); GEMMs take
                                 it instead of kernel_launch_s (was kernel_launch_s + gemm_setup_s)
      gemm_fp8_fixed_s           extra fixed cost of an fp8 scaled matmul (torch._scaled_mm:
                                 scale loads and the scaled epilogue), per call
      sustained_clock_fraction[dtype]  SM clock under sustained tensor-core load (at the power
                                 limit) over the clock of a short burst; from the power model
                                 (docs/cost_model.md "Clocks and power"); 1 = never power-limited
      step_power               the training-step power model (simulator/power.py
                                 step_clock_fraction): effective power ``limit``, ``static`` and
                                 ``idle`` watts, and per class of work (tensor, tensor_fp8,
                                 attention, memory) ``<class>_fixed`` and ``<class>_clock`` watts
                                 (P = static + fixed + clock·x³); empty = steps at full clock
      gemm_clock_bound_fraction  share of a large GEMM's burst time that scales with the SM
                                 clock (the rest, memory and synchronisation, does not)
      hbm_fraction               achievable fraction of datasheet HBM bandwidth (streaming)
      gemm_floor_fraction        a memory-bound GEMM's HBM rate for transfers of at least
                                 ``gemm_floor_full_bytes``, as a fraction of the datasheet; below,
                                 times (bytes / gemm_floor_full_bytes) ** gemm_floor_size_exponent
                                 (simulator.compute.gemm_floor_Bps); 0 = off: hbm_fraction
      score_gemm_floor_fraction  the HBM rate, as a fraction of the datasheet's, at which the batched
                                 GEMMs of unfused attention (QK^T, PV and their gradients: one
                                 operand or the output an s x s score matrix) stream from 1 GB on,
                                 below times (bytes / 1 GB) ** score_gemm_floor_exponent
                                 (simulator.compute.score_gemm_floor_Bps; 0: the generic floor,
                                 gemm_floor_Bps; issue #12 session 37, candidate bmm78: fitted on
                                 bmm_random78/79)
      unfused_layout_copies      1: cost the layout copies of Megatron-Core's local attention (the
                                 context's permute(...).contiguous() forward; the q/k/v gradients
                                 copied back into their strided layout backward) at the strided
                                 element rate (simulator.compute.strided_elementwise_time); 0: not
                                 costed, as before session 38 (issue #12: found by profiling the
                                 composite kernel by kernel; no parameter of its own)
      gemm_overlap_exposed       share of the smaller of a GEMM's tile compute and its HBM
                                 streaming time not hidden behind the larger (pipeline fill from
                                 a cold L2, epilogue stores; simulator.compute.gemm_with_roofline_s);
                                 0 = the plain roofline max (perfect overlap)
      attention_fwd_fraction     FlashAttention forward: fraction of bf16 peak at long sequences
      attention_bwd_fraction     FlashAttention backward: fraction of bf16 peak
      attention_softmax_fraction achieved fraction of the special-function units' exp rate
      attention_tile_overhead    fixed work per FlashAttention thread block, in score tiles
                                 (the four attention_* above: PyTorch SDPA's FlashAttention-2, ``flash``)
      attention_uneven_mask_tiles  FlashAttention-2 forward, causal, at a length no multiple of
                                 its tile (Is_even_MN false): the extra masking step each query
                                 block runs (flash_fwd_kernel.h n_masking_steps + 1), in score
                                 tiles beyond a plain tile's; 0 = not costed (issue #12 session 41)
      ffma_gemm[fraction|overhead_k|small_tile_exponent]  fp32 GEMMs on the CUDA cores (no TF32:
                                 PyTorch's default ``allow_tf32`` False; cuBLAS's sm80_xmma ..._ffma
                                 kernels), as PyTorch's SDPA math backend runs its batched GEMMs:
                                 fraction of the datasheet fp32 peak, per-tile prologue/epilogue in
                                 K elements, small-tile exponent (simulator.compute.ffma_gemm_time);
                                 empty: costed as a ``fp32`` GEMM of the tensor-core model (issue #12
                                 session 42: fitted on the profiled math sweep's GEMM kernels)
      attention_kernel_fraction[backend_direction]  the other fused attention kernels
                                 (``cudnn_fwd``, ``cudnn_bwd``, ``efficient_fwd``, ``efficient_bwd``;
                                 a kernel compiled per head_dim per variant: ``triton_fa_d64_fwd`` ...):
                                 fraction of the bf16 peak their tensor-core work reaches; unset:
                                 the documented fallback of simulator.compute.fused_attention_params
      attention_kernel_overlap[backend_direction]   share of the shorter of (tensor-core, exponential)
                                 work per tile hidden under the longer (0: serial, as FlashAttention-2;
                                 1: fully overlapped, as FlashAttention-3's ping-pong schedule); a
                                 ``backend`` key without direction stands for both
      attention_kernel_overhead[backend_direction]  fixed work per thread block, in tiles (likewise)
      attention_kernel_score_ops[backend_direction] extra per-score work of a kernel that stages its
                                 score tiles through shared memory between its MMAs, in FP32-lane
                                 operations per score element (SM cycles x 128 per score), added to
                                 the softmax's own; only ``efficient_fwd`` / ``efficient_bwd`` (PyTorch's
                                 memory-efficient kernel: P, and in the backward P and dS, written to
                                 and read back from shared memory each tile, the forward's row
                                 statistics combined across warps in shared memory, the backward's
                                 fp32 dQ tile read-modify-written in global memory under a lock);
                                 unset: 0 (simulator.compute._fused_pass)
      ssd_fraction[direction]    the Mamba-2 SSD scan's Triton kernels (simulator/ssm.py, mamba_ssm
                                 ssd_combined): their tensor-core work's rate as a fraction of the
                                 achievable bf16 GEMM rate (``fwd``, ``bwd``); unset: 1, the cuBLAS rate
      ssd_hbm_fraction           their HBM traffic's rate as a fraction of the streaming rate
                                 (datasheet x hbm_fraction); 1 = streaming
      ssd_host_s[direction]      host seconds to issue one SSD scan's kernels from Python (Triton's
                                 launch path; a synchronised scan alone takes the larger of this and
                                 its GPU time: simulator.ssm.ssd_time(isolated=True))
      ssd_kernel_fixed_s         extra fixed seconds per SSD kernel beyond kernel_launch_s (a small
                                 grid's ramp and tail, a kernel's set-up); 0 = none
                                 (the three: 1 / 1 / 0 until fitted on ssd_scan records:
                                 ``meshcast calibrate --only ssd``)
      comm_overlap_slowdown      compute time lost per second of communication hidden under it
                                 (NCCL kernels occupy SMs and HBM bandwidth: ~16-32 channels of
                                 132 SMs on Hopper); a planning value, not fitted
      host_op_s                  host seconds per modelled op an eager framework dispatches
      fsdp_unit_host_s           host seconds per FSDP2 unit per micro-batch (hooks, copies)
      ddp_tensor_host_s          host seconds per parameter tensor per micro-batch under DDP
                                 (the reducer's autograd hook)
      optimizer_tensor_host_s    host seconds per parameter tensor of a fused optimizer step
      fsdp_optimizer_tensor_host_s  the same for foreach AdamW over FSDP2's DTensor shards
                                 (all five fitted on host-bound training steps of tiny models
                                 and on their measured host time per phase; 0 = the host never
                                 limits)
      softmax_elements_per_cycle[kernel]  elements per SM per clock cycle (at the boost clock)
                                 of PyTorch's block-per-row softmax forward kernels (``reg``,
                                 ``reg_wide``, ``smem``: simulator.compute.torch_softmax_kernel), which are
                                 bound by the SMs, not by HBM; defaults: the H100/H200 fits;
                                 ``scalar`` (absent: off; session 24, candidate membound47): the
                                 global-memory kernel's scalar epilogue elements (row % (ILP x
                                 threads), simulator.compute.softmax_scalar_tail); ``reg_fp32``,
                                 ``reg_wide_fp32``, ``smem_fp32`` (absent: fp32 rows at the bf16
                                 rates; session 36, candidate membound68): fp32 rows' own rates
                                 (simulator.compute.softmax_rate_key)
      softmax_wave_cycles        fixed SM cycles per wave of PyTorch's block-per-row softmax kernels
                                 beyond registers (``smem``, ``plain``): block set-up, the first
                                 load's latency and two block-wide reductions before a row's
                                 elements stream (simulator.compute.softmax_forward_time); 0 = the
                                 element rate alone (before session 21)
      softmax_warp_cycles[key]   PyTorch's one-warp-per-row softmax forward (softmax_warp_forward,
                                 rows of <= 2048 elements) as SM cycles at the boost clock
                                 (simulator.compute.softmax_warp_time): ``kernel`` once per kernel,
                                 ``row`` per row, ``element`` per element of rows of <= 1024
                                 elements, ``element_wide`` of longer ones (64 registers of row per
                                 thread), spread over the SMs; ``latency`` (absent: 0; session 24,
                                 candidate membound47) cycles per element of the row once: one
                                 warp's own pass over its row; ``fp32`` (absent: fp32 rows as bytes;
                                 session 36, candidate membound68) scales fp32 rows' per-element
                                 cycles; empty: the warp kernel is bytes at
                                 memory_op_fraction["softmax"] (before session 22)
      softmax_reg_cycles[key]    PyTorch's register softmax forward (``reg``, ``reg_wide``) as SM
                                 cycles at the boost clock (simulator.compute.softmax_reg_time):
                                 ``<kernel>_wave`` per wave of resident blocks, ``<kernel>_element``
                                 per element and ``<kernel>_slot`` per register slot of a row per
                                 block, ``fp32`` a factor on fp32 rows' element cycles; empty (the
                                 committed profiles): the padded row at softmax_elements_per_cycle
                                 (issue #12 session 39, candidate membound78)
      softmax_plain_reread[key]  PyTorch's global-memory softmax forward re-reading rows from HBM
                                 (simulator.compute.softmax_plain_reread_s): ``passes`` re-read
                                 passes, the fraction from HBM rising from ``reread_from_bytes`` per
                                 row over ``reread_span_bytes``; empty (the committed profiles): none
                                 (issue #12 session 39, candidate membound78)
      softmax_masked_cost        the row work of PyTorch's fp32 softmax forward per score a mask
                                 set to -10000 (Megatron's attention_mask_func), relative to an
                                 ordinary score (1: no difference); fitted on the isolated
                                 causal vs N(0,1) pairs of instep_conditions.py
      softmax_masked_cost_by_kernel[kernel]  the same per softmax forward kernel (``warp``,
                                 ``reg``, ``reg_wide``, ``smem``, ``plain``), in place of
                                 softmax_masked_cost for that kernel's rows (absent: the one value;
                                 issue #12 session 37, candidate membound76: fitted on causal /
                                 N(0,1) twin grids of one shape each, membound_random74/75)
      norm_forward[key]          PyTorch's LayerNorm / RMSNorm forward kernel
                                 (simulator.compute.norm_forward_time): ``fraction`` of HBM
                                 bandwidth, the row size from which its second read of a row
                                 comes from HBM (``reread_from_bytes``, over ``reread_span_bytes``),
                                 each kind's effective load latency (``<kind>_load_latency_s``) and
                                 time per wave of blocks (``<kind>_row_s``); ``whole_waves`` 1:
                                 Little's law per wave, the tail wave at its own blocks in flight
                                 (0 / absent: fractional waves at the full grid's); empty: the norms are
                                 bytes at memory_op_fraction (fitted with ``--only norm_forward``)
      memory_op_fraction[op]     achieved fraction of HBM bandwidth of one memory-bound kernel
                                 family (layernorm, softmax, ...); default hbm_fraction
      collective_fraction[kind]  NCCL's achieved bandwidth of a collective relative to all_reduce
      collective_alpha_fraction[kind]  its fixed cost relative to all_reduce's per step
      collective_shard_steps[kind]     δ: extra time δ·S/β on the rank's own shard S of a ring
                                 collective (crosses no link, same kernel); 0 = none
      collective_host_s[kind]    host seconds to issue one torch.distributed call of the kind
                                 (ProcessGroupNCCL's bookkeeping, NCCL's enqueue), measured with the
                                 stream held (collectives.py v2 ``host_issue_s``). Added to the GPU
                                 time only for a call timed alone (validate's collective records);
                                 a step's host model counts collective calls among its ops. Empty:
                                 the link's α carries the host's share (profiles fitted on ``time_s``)
    Communication (per tier kind: nvlink, pcie, xgmi, scale_out):
      links[kind]                LinkEfficiency
    Not a fitted parameter:
      gemm_residuals             absolute path of the GEMM residual table the profile names with its
                                 top-level ``gemm_residuals:`` key (a file name resolved next to the
                                 profile, else in hardware_specs/profiles/; simulator/gemm_residual.py,
                                 docs/cost_model.md "GEMM residual correction"); "" (the default): no
                                 correction. Not part of to_dict()
    """

    gemm_peak_fraction: dict = field(default_factory=lambda: {
        "bf16": 0.80, "fp16": 0.80, "tf32": 0.75, "fp32": 0.90, "fp8": 0.70, "fp4": 0.65, "fp64": 0.90})
    gemm_tile_overhead_k: float = 128.0
    gemm_small_tile_exponent: float = 0.3
    gemm_unaligned_fraction: float = 0.25
    gemm_unaligned_fixed_s: float = 0.0
    gemm_split_k_fixed_s: float = 5.0e-6
    gemm_grouped_fixed_s: float = 0.0
    gemm_sm_load_bytes_per_flop: float = 0.0
    gemm_unaligned_max_vector: float = 0.0
    gemm_unaligned_split_waves: float = 0.0
    gemm_split_k_per_split_s: float = 0.0
    gemm_l2_operand_bytes_per_flop: float = 0.0
    gemm_unaligned_store_serial: float = 0.0
    gemm_unaligned_reuse_exponent: float = 0.0
    gemm_tile_granularity: float = 0.0
    kernel_launch_s: float = 5.0e-6
    gemm_launch_s: float = 6.0e-6
    gemm_fp8_fixed_s: float = 0.0
    sustained_clock_fraction: dict = field(default_factory=dict)
    step_power: dict = field(default_factory=dict)
    gemm_clock_bound_fraction: float = 1.0
    hbm_fraction: float = 0.90
    gemm_floor_fraction: float = 0.0
    score_gemm_floor_fraction: float = 0.0
    score_gemm_floor_exponent: float = 0.0
    unfused_layout_copies: float = 0.0
    gemm_floor_size_exponent: float = 0.0
    gemm_floor_full_bytes: float = 0.0
    gemm_overlap_exposed: float = 0.0
    attention_fwd_fraction: float = 0.65
    attention_bwd_fraction: float = 0.50
    attention_softmax_fraction: float = 0.50
    attention_tile_overhead: float = 1.0
    attention_uneven_mask_tiles: float = 0.0
    ffma_gemm: dict = field(default_factory=dict)
    ssd_fraction: dict = field(default_factory=dict)
    ssd_hbm_fraction: float = 1.0
    ssd_kernel_fixed_s: float = 0.0
    ssd_host_s: dict = field(default_factory=dict)
    comm_overlap_slowdown: float = 0.2
    softmax_masked_cost: float = 1.0
    softmax_masked_cost_by_kernel: dict = field(default_factory=dict)
    softmax_wave_cycles: float = 0.0
    softmax_warp_cycles: dict = field(default_factory=dict)
    softmax_reg_cycles: dict = field(default_factory=dict)
    softmax_plain_reread: dict = field(default_factory=dict)
    memory_kernel_fixed_s: float = 0.0
    memory_kernel_chained_s: float = 0.0
    memory_op_fixed_s: dict = field(default_factory=dict)
    norm_forward: dict = field(default_factory=dict)
    host_op_s: float = 0.0
    fsdp_unit_host_s: float = 0.0
    ddp_tensor_host_s: float = 0.0
    optimizer_tensor_host_s: float = 0.0
    fsdp_optimizer_tensor_host_s: float = 0.0
    softmax_elements_per_cycle: dict = field(default_factory=lambda: {"reg": 1.2, "reg_wide": 1.0, "smem": 2.0})
    attention_kernel_fraction: dict = field(default_factory=dict)
    attention_kernel_overlap: dict = field(default_factory=dict)
    attention_kernel_overhead: dict = field(default_factory=dict)
    attention_kernel_score_ops: dict = field(default_factory=dict)
    memory_op_fraction: dict = field(default_factory=dict)
    collective_fraction: dict = field(default_factory=dict)
    collective_alpha_fraction: dict = field(default_factory=dict)
    collective_host_s: dict = field(default_factory=dict)
    collective_shard_steps: dict = field(default_factory=dict)
    links: dict = field(default_factory=lambda: {
        "nvlink": LinkEfficiency(alpha_s=8.0e-6, bandwidth_fraction=0.80, ll_alpha_s=5.0e-6, ll_bandwidth_fraction=0.3),
        "xgmi": LinkEfficiency(alpha_s=10.0e-6, bandwidth_fraction=0.70),
        "pcie": LinkEfficiency(alpha_s=10.0e-6, bandwidth_fraction=0.75),
        "c2c": LinkEfficiency(alpha_s=5.0e-6, bandwidth_fraction=0.80),
        "scale_out": LinkEfficiency(alpha_s=15.0e-6, bandwidth_fraction=0.85),
    })
    name: str = "defaults"
    gemm_residuals: str = ""

    def link(self, kind: str) -> LinkEfficiency:
        """Efficiency of a tier kind; unknown kinds fall back to ``scale_out``."""
        return self.links.get(kind, self.links["scale_out"])

    def gemm_fraction(self, dtype: str) -> float:
        return self.gemm_peak_fraction.get(dtype, self.gemm_peak_fraction["bf16"])

    def with_host_speed(self, factor: float) -> "Calibration":
        """This calibration on a host ``factor`` times slower (>1) or faster (<1) than the one its
        host costs were fitted on: every host_* seconds scaled by ``factor``. Lent machines of one
        GPU kind differ this much in host speed (docs/measurements.md, "host speed": the same
        host-bound plan 1.46x apart); ``validation.host_speed`` measures the factor of a machine
        from tiny "twin" steps run on it."""
        if not factor > 0:
            raise ValueError(f"host speed factor must be positive, got {factor}")
        return replace(self, **{k: getattr(self, k) * factor for k in HOST_PARAMETERS},
                       collective_host_s={k: v * factor for k, v in self.collective_host_s.items()})

    def without_gemm_residuals(self) -> "Calibration":
        """This profile with the GEMM residual correction off (itself where it is off already): the model
        a residual table's residuals are taken against, and the one ``calibrate`` fits."""
        return replace(self, gemm_residuals="") if self.gemm_residuals else self

    def to_dict(self) -> dict:
        """The parameters as a mapping (links as mappings); without ``gemm_residuals``, which names a data
        file, not a parameter (a profile written from it carries no residual table)."""
        d = asdict(self)
        d.pop("gemm_residuals")
        d["links"] = {k: asdict(v) for k, v in self.links.items()}
        return d


DEFAULT = Calibration()
HOST_PARAMETERS = ("host_op_s", "fsdp_unit_host_s", "ddp_tensor_host_s", "optimizer_tensor_host_s",
                   "fsdp_optimizer_tensor_host_s")


DICT_PARAMETERS = ("gemm_peak_fraction", "attention_kernel_fraction", "attention_kernel_overlap",
                   "attention_kernel_overhead", "attention_kernel_score_ops", "memory_op_fraction", "collective_fraction", "collective_alpha_fraction",
                   "collective_shard_steps", "collective_host_s", "sustained_clock_fraction", "ssd_fraction", "ssd_host_s",
                   "step_power", "softmax_elements_per_cycle", "norm_forward", "softmax_warp_cycles", "memory_op_fixed_s",
                   "softmax_masked_cost_by_kernel", "softmax_reg_cycles",
                   "softmax_plain_reread")


FRACTIONS = ("gemm_unaligned_fraction", "gemm_clock_bound_fraction", "hbm_fraction", "attention_fwd_fraction", "attention_bwd_fraction",
             "attention_softmax_fraction", "ssd_hbm_fraction")


@lru_cache(maxsize=1)
def _profile_schema() -> type:
    """A strict pydantic model of a profile's ``parameters`` mapping with physical bounds: achieved
    fractions of a datasheet peak in (0, 1]; relative collective factors positive; fixed costs
    (seconds), tile overheads and exponents >= 0; every number finite. Missing keys keep the
    defaults, so a profile may set only what it fitted."""
    import pydantic
    from pydantic import Field

    cfg = pydantic.ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)
    fraction = Annotated[float, Field(gt=0, le=1)]
    positive = Annotated[float, Field(gt=0)]
    nonneg = Annotated[float, Field(ge=0)]
    link = pydantic.create_model("LinkParameters", __config__=cfg, alpha_s=(nonneg, None),
                                 bandwidth_fraction=(fraction, None), ll_alpha_s=(nonneg, None),
                                 ll_bandwidth_fraction=(Annotated[float, Field(ge=0, le=1)], None),
                                 ll_max_bytes=(nonneg, None), chunk_bytes=(nonneg, None),
                                 ramp_s=(nonneg, None), ramp_tau_s=(nonneg, None), nccl_bus_Bps=(nonneg, None))
    spec = {name: (Optional[fraction if name in FRACTIONS else nonneg], None)
            for name, value in DEFAULT.to_dict().items() if isinstance(value, float)}
    spec.update(gemm_floor_fraction=(Optional[Annotated[float, Field(ge=0, le=1)]], None),
                score_gemm_floor_fraction=(Optional[Annotated[float, Field(ge=0, le=1)]], None),
                score_gemm_floor_exponent=(Optional[Annotated[float, Field(ge=0, le=1)]], None),
                unfused_layout_copies=(Optional[Literal[0, 1]], None),
                gemm_overlap_exposed=(Optional[Annotated[float, Field(ge=0, le=1)]], None),
                gemm_tile_granularity=(Optional[Literal[0, 8, 16, 32]], None),
                gemm_peak_fraction=(Optional[dict[str, fraction]], None),
                memory_op_fraction=(Optional[dict[str, fraction]], None),
                attention_kernel_fraction=(Optional[dict[str, fraction]], None),
                attention_kernel_overlap=(Optional[dict[str, Annotated[float, Field(ge=0, le=1)]]], None),
                attention_kernel_overhead=(Optional[dict[str, nonneg]], None),
                attention_kernel_score_ops=(Optional[dict[str, nonneg]], None),
                collective_fraction=(Optional[dict[str, positive]], None),
                collective_alpha_fraction=(Optional[dict[str, positive]], None),
                collective_shard_steps=(Optional[dict[str, nonneg]], None),
                collective_host_s=(Optional[dict[str, nonneg]], None),
                sustained_clock_fraction=(Optional[dict[str, fraction]], None),
                step_power=(Optional[dict[str, nonneg]], None),
                ssd_fraction=(Optional[dict[str, fraction]], None),
                ffma_gemm=(Optional[dict[Literal["fraction", "overhead_k", "small_tile_exponent"], nonneg]], None),
                ssd_host_s=(Optional[dict[str, nonneg]], None),
                softmax_elements_per_cycle=(Optional[dict[Literal["reg", "reg_wide", "smem", "scalar", "reg_fp32", "reg_wide_fp32",
                                                                   "smem_fp32"], positive]], None),
                norm_forward=(Optional[dict[Literal["fraction", "reread_from_bytes", "reread_span_bytes", "rmsnorm_row_s",
                                                    "layernorm_row_s", "rmsnorm_load_latency_s", "layernorm_load_latency_s",
                                                    "whole_waves"],
                                            nonneg]], None),
                softmax_warp_cycles=(Optional[dict[Literal["kernel", "row", "element", "element_wide", "latency", "fp32"], nonneg]],
                                     None),
                softmax_reg_cycles=(Optional[dict[Literal["reg_wave", "reg_element", "reg_slot", "reg_wide_wave",
                                                          "reg_wide_element", "reg_wide_slot", "fp32"], nonneg]], None),
                softmax_plain_reread=(Optional[dict[Literal["reread_from_bytes", "reread_span_bytes", "passes"], nonneg]],
                                      None),
                memory_op_fixed_s=(Optional[dict[Literal["copy"], nonneg]], None),
                softmax_masked_cost_by_kernel=(Optional[dict[Literal["warp", "reg", "reg_wide", "smem", "plain"], positive]], None),
                links=(Optional[dict[str, link]], None))
    return pydantic.create_model("ProfileParameters", __config__=cfg, **spec)


def _check_parameters(params, origin: str) -> dict:
    """``params`` validated against :func:`_profile_schema`; the first problem is a SpecError
    naming ``origin: parameters.<field>``."""
    import pydantic

    if not isinstance(params, dict):
        raise SpecError(f"{origin}: parameters", f"expected a mapping of parameters, got {type(params).__name__}")
    try:
        _profile_schema().model_validate(params)
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        msg = "unknown parameter" if err["type"] == "extra_forbid" or err["type"] == "extra_forbidden" else err["msg"]
        raise SpecError(f"{origin}: parameters.{loc}", f"{msg[0].lower()}{msg[1:]}, got {err.get('input')!r}") from None
    _check_step_power(params.get("step_power"), origin)
    return params


def _check_step_power(sp: dict | None, origin: str) -> None:
    """A non-empty ``step_power`` holds every key the step power model reads and no other."""
    from simulator.power import STEP_POWER_KEYS, STEP_POWER_OPTIONAL
    if not sp:
        return
    for key in STEP_POWER_KEYS:
        if key not in sp:
            raise SpecError(f"{origin}: parameters.step_power.{key}",
                            "missing: the step power model (simulator/power.py) needs it once step_power is given")
    for key in sp:
        if key not in STEP_POWER_KEYS + STEP_POWER_OPTIONAL:
            raise SpecError(f"{origin}: parameters.step_power.{key}", "unknown parameter of the step power model")


def calibration_from_dict(data: dict, origin: str = "profile", base_dir: Path | None = None) -> Calibration:
    """Build a :class:`Calibration` from a profile mapping (parameters under ``parameters:`` or
    at the top level); unknown keys, wrong types and unphysical values raise SpecError. A top-level
    ``gemm_residuals`` names the profile's GEMM residual table (:func:`_residual_table_path`, relative
    to ``base_dir``)."""
    base = DEFAULT.to_dict()
    raw = data.get("parameters", {k: v for k, v in data.items() if k != "gemm_residuals"})
    params = _check_parameters(raw, origin)
    params = {k: v for k, v in params.items() if v is not None}
    merged = {**base, **params}
    for key in DICT_PARAMETERS:
        merged[key] = {**base[key], **(params.get(key) or {})}
    links = {k: {**base["links"].get(k, base["links"]["scale_out"]), **v} for k, v in params.get("links", {}).items()}
    links = {**base["links"], **links}
    merged["links"] = {k: LinkEfficiency(**{a: float(b) for a, b in v.items()}) for k, v in links.items()}
    for k, v in list(merged.items()):
        if isinstance(v, int) and not isinstance(v, bool):
            merged[k] = float(v)
    return Calibration(**merged, gemm_residuals=_residual_table_path(data.get("gemm_residuals"), origin, base_dir))


def _residual_table_path(name, origin: str, base_dir: Path | None) -> str:
    """The absolute path of the GEMM residual table a profile names (``gemm_residuals: <file>``): relative to
    ``base_dir`` (the profile's directory; else the working directory), else in PROFILE_DIR (a copy of a
    shipped profile elsewhere still finds its table); "" when it names none. SpecError when the value is not
    a file name or no such file exists."""
    if name is None:
        return ""
    if not isinstance(name, str) or not name:
        raise SpecError(f"{origin}: gemm_residuals", f"expected the file name of a GEMM residual table, got {name!r}")
    for path in (Path(name) if base_dir is None else Path(base_dir) / name, PROFILE_DIR / name):
        if path.is_file():
            return _checked_residual_table(str(path.resolve()), origin)
    raise SpecError(f"{origin}: gemm_residuals",
                    f"no such GEMM residual table: {name} (next to the profile or in {PROFILE_DIR})")


def _checked_residual_table(path: str, origin: str) -> str:
    """``path`` once the GEMM residual table there has been read (simulator.gemm_residual.load_table, cached):
    a file that is not one is the profile's error, reported at load, not a traceback inside a GEMM's cost."""
    from simulator.gemm_residual import load_table
    try:
        load_table(path)
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        raise SpecError(f"{origin}: gemm_residuals", f"{path} is not a GEMM residual table: {exc}") from None
    return path


def load_calibration(name_or_path: str | None) -> Calibration:
    """A calibration profile by name (hardware_specs/profiles/<name>.yaml) or path; None: defaults."""
    if name_or_path is None:
        return DEFAULT
    path = Path(name_or_path)
    if not path.exists():
        path = PROFILE_DIR / f"{name_or_path}.yaml"
    if not path.exists():
        from hardware_specs.errors import UnknownNameError
        known = [p.stem for p in PROFILE_DIR.glob("*.yaml")]
        raise UnknownNameError("calibration", name_or_path, known)
    return _read_profile(str(path.resolve()), path.stat().st_mtime_ns)


@lru_cache(maxsize=64)
def _read_profile(path: str, mtime_ns: int) -> Calibration:
    """One profile file, parsed once per version of the file: every caller then shares the same
    Calibration object, and with it the cost model's identity-keyed caches."""
    cal = calibration_from_dict(read_yaml_mapping(Path(path)), path, Path(path).parent)
    return replace(cal, name=Path(path).stem)


def profile_fitted_on(name: str) -> list[str]:
    """The measurement files a shipped profile was fitted on (its ``fitted_on`` provenance);
    empty for the defaults or a profile without provenance."""
    path = PROFILE_DIR / f"{name}.yaml"
    if not path.exists():
        return []
    return [str(f) for f in read_yaml_mapping(path).get("fitted_on") or []]


def profile_transferred_parameters(name: str) -> dict[str, str]:
    """{parameter path: profile it was copied from} of a shipped profile's ``transferred_parameters``
    (values fitted on another accelerator's measurements and carried over unchanged); empty for the
    defaults or a profile without any. A path names one value (``attention_kernel_fraction.triton_fa_d64_fwd``)
    or a whole map (``ssd_fraction``)."""
    path = PROFILE_DIR / f"{name}.yaml"
    if not path.exists():
        return {}
    return dict(_read_transferred(str(path), path.stat().st_mtime_ns))


@lru_cache(maxsize=64)
def _read_transferred(path: str, mtime_ns: int) -> tuple:
    """(path, source profile) pairs of one profile file's ``transferred_parameters``, read once per version."""
    return tuple((str(k), str(v)) for k, v in (read_yaml_mapping(Path(path)).get("transferred_parameters") or {}).items())


def save_calibration(cal: Calibration, path: Path, meta: dict) -> None:
    """Write ``cal`` with provenance ``meta`` (fitted_on, residuals, ...) as a profile YAML."""
    doc = {**meta, "parameters": cal.to_dict()}
    doc["parameters"].pop("name", None)
    write_text_atomic(path, yaml.safe_dump(doc, sort_keys=False), "output")


def calibration_for(accelerator, explicit: str | None = None) -> tuple[Calibration, str]:
    """The calibration to use for ``accelerator`` and a note saying where it came from:
    an explicit profile; the accelerator's own profile; else the profile of the nearest
    calibrated accelerator (same family first, else same vendor, nearest in dense bf16 peak):
    its fitted efficiencies with this accelerator's datasheet; else the documented defaults."""
    import math

    if explicit:
        return load_calibration(explicit), f"profile {explicit}"
    own = accelerator.calibration_profile
    if own and (PROFILE_DIR / f"{own}.yaml").exists():
        return load_calibration(own), f"profile {own} (fitted on measurements of this accelerator)"
    from hardware_specs.catalog import list_accelerators, load_accelerator
    calibrated = [a for a in map(load_accelerator, list_accelerators())
                  if a.calibration_profile and (PROFILE_DIR / f"{a.calibration_profile}.yaml").exists()]

    def distance(a) -> tuple:
        peak = accelerator.peak_flops_dense.bf16 or 1.0
        other = a.peak_flops_dense.bf16 or 1.0
        return (a.family != accelerator.family, abs(math.log(other / peak)), a.name)

    near = sorted((a for a in calibrated if a.vendor == accelerator.vendor), key=distance)
    if near:
        prof = near[0].calibration_profile
        how = "same family" if near[0].family == accelerator.family else f"same vendor, {near[0].family}"
        return load_calibration(prof), (f"profile {prof} ({how}): {accelerator.name} has never been measured; "
                                        f"its datasheet with the nearest calibrated efficiencies")
    return DEFAULT, f"uncalibrated defaults: no measured {accelerator.vendor} accelerator"
