"""The Mamba-2 SSD scan: FLOPs, HBM bytes and time of the chunked algorithm.

Dao & Gu 2024 ("Transformers are SSMs", §6 and its ssd_minimal listing; the ssd_combined Triton
kernels of mamba_ssm that Megatron-Core's MambaMixer calls through mamba_chunk_scan_combined)
split a sequence into chunks of Q tokens and compute the SSM output in four steps. Per
sequence of T tokens, with H heads of P channels, G groups of B/C with state size N, c = T/Q
chunks:

  1. intra-chunk scores  CBᵀ per chunk and group            2·T·Q·N·G   (a batched GEMM)
  2. diagonal blocks     (L ∘ CBᵀ)·X per chunk and head     2·T·Q·P·H   (a batched GEMM)
  3. chunk states        Bᵀ·X per chunk and head            2·T·N·P·H   (a batched GEMM)
  4. state passing       s_c = a_c·s_{c-1} + state_c        2·c·N·P·H   (a scan over chunks)
  5. off-diagonal output C·s_{c-1} per chunk and head       2·T·N·P·H   (a batched GEMM)

Full Q×Q blocks are counted in steps 1-2 (the kernels compute whole tiles; the causal mask L is
applied inside). Steps 1-3 and 5 run on tensor cores (tl.dot) and are costed at the device's
achievable bf16 GEMM rate; the kernels are memory-heavy, so the time is the larger of that and
their HBM traffic (roofline), plus one launch per kernel:

  forward bytes = x and B, C read twice (chunk_state and chunk_scan), dt read and its fp32
                  cumulative decay written once and read twice, CBᵀ written and read in fp32,
                  the chunk states (fp32, H·N·P per chunk) written by chunk_state, read and
                  rewritten by state_passing and read by chunk_scan (4 passes), y written.
  backward      = the gradients of the four chunked products (2x each: data and weight side)
                  plus the chunk states recomputed (the forward saves x, B, C, dt and y, not
                  the states): FLOPs 2·F + F_3 + F_4, bytes 2·bytes_fwd + the state passes.

Launches: forward 5 kernels (chunk cumsum, chunk state, state passing, bmm CBᵀ, chunk scan),
backward 11 (mamba_ssm ssd_combined: _mamba_chunk_scan_combined_bwd). The scan runs in bf16
whatever the plan's GEMM precision (Transformer Engine's fp8 covers the linear layers only).

Gate (``gate``): Megatron-Core's default training path (``use_mamba_mem_eff_path``,
mamba_split_conv1d_scan_combined) passes z into the scan, which then reads z, writes the gated
output and keeps the ungated one (out_x) for the backward: +2 passes of T·H·P bf16 forward;
backward reads z and out_x again and writes dz: +3 passes (counted bytes; no FLOPs of note).

Achieved rates (calibration, docs/cost_model.md): the tensor-core work runs at
``ssd_fraction[fwd|bwd]`` of the achievable bf16 GEMM rate, the HBM traffic at ``ssd_hbm_fraction``
of the streaming rate, and every kernel costs ``kernel_launch_s + ssd_kernel_fixed_s``. Defaults
1 / 1 / 0: the ASSUMPTION that the Triton kernels reach the cuBLAS-fitted GEMM rate and stream at
HBM's rate, until a profile fits them on ``ssd_scan`` records (validation/harness/ssd_scan.py,
``meshcast calibrate --only ssd``).
"""
from __future__ import annotations

from dataclasses import dataclass

from simulator.compute import DeviceModel

SSD_FWD_LAUNCHES = 5
SSD_BWD_LAUNCHES = 11


@dataclass(frozen=True)
class SsdCost:
    """FLOPs and HBM bytes of one SSD scan over ``tokens`` tokens on one device."""

    flops: float
    bytes: float


def ssd_flops_parts(tokens: int, heads: int, head_dim: int, groups: int, state: int, chunk: int,
                    sequences: int = 1) -> dict[str, float]:
    """Forward FLOPs of the five steps of the chunked scan (module docstring)."""
    T, H, P, G, N, Q = tokens, heads, head_dim, groups, state, chunk
    chunks = sequences * -(-(T // max(1, sequences)) // Q)
    return {"cb": 2.0 * T * Q * N * G, "diagonal": 2.0 * T * Q * P * H, "states": 2.0 * T * N * P * H,
            "passing": 2.0 * chunks * N * P * H, "off_diagonal": 2.0 * T * N * P * H}


def ssd_cost(tokens: int, heads: int, head_dim: int, groups: int, state: int, chunk: int,
             sequences: int = 1, backward: bool = False, gate: bool = False) -> SsdCost:
    """FLOPs and bytes of the forward (or backward) chunked scan on one device: ``tokens`` in
    all (``sequences`` sequences of tokens / sequences each, every one split into chunks of
    ``chunk``), ``heads`` and ``groups`` this device's (after tensor parallelism); ``gate``: z
    fused into the scan (module docstring)."""
    T, H, P, G, N, Q = tokens, heads, head_dim, groups, state, chunk
    parts = ssd_flops_parts(T, H, P, G, N, Q, sequences)
    chunks = sequences * -(-(T // max(1, sequences)) // Q)
    state_bytes = 4.0 * 4 * chunks * H * N * P          # fp32 states: 4 passes
    fwd_bytes = (2 * 2.0 * T * H * P                   # x, read twice
                 + 2 * 2 * 2.0 * T * G * N             # B and C, read twice
                 + T * H * (2.0 + 3 * 4)               # dt, its fp32 cumulative decay (w + 2 r)
                 + 2 * 4.0 * T * Q * G                 # CBᵀ in fp32, written and read
                 + state_bytes + 2.0 * T * H * P)      # states; y written
    fwd = sum(parts.values())
    if not backward:
        return SsdCost(fwd, fwd_bytes + (2 * 2.0 * T * H * P if gate else 0.0))
    return SsdCost(2 * fwd + parts["states"] + parts["passing"],
                   2 * fwd_bytes + state_bytes + (3 * 2.0 * T * H * P if gate else 0.0))


def ssd_time(dev: DeviceModel, cost: SsdCost, backward: bool = False, isolated: bool = False) -> float:
    """Seconds of one SSD scan on the GPU: the larger of its tensor-core time (``ssd_fraction`` of
    the achievable bf16 GEMM rate) and its HBM time (``ssd_hbm_fraction`` of the streaming rate),
    plus a fixed cost per kernel (``kernel_launch_s + ssd_kernel_fixed_s``). ``isolated``: one
    synchronised scan alone (a kernel measurement), which cannot finish before the host has issued
    its kernels through Triton's Python launch path (``ssd_host_s``, measured: h200_ssd_scan.json):
    the larger of the two. In a training step the host's issue time overlaps other layers' GPU work
    and is not part of the GPU time returned here."""
    cal = dev.cal
    direction = "bwd" if backward else "fwd"
    launches = SSD_BWD_LAUNCHES if backward else SSD_FWD_LAUNCHES
    frac = cal.ssd_fraction.get(direction, 1.0)
    compute = cost.flops / (dev.peak("bf16") * frac)
    memory = cost.bytes / (dev.hbm_Bps * cal.ssd_hbm_fraction)
    gpu = max(compute, memory) + launches * (cal.kernel_launch_s + cal.ssd_kernel_fixed_s)
    return max(gpu, cal.ssd_host_s.get(direction, 0.0)) if isolated else gpu
