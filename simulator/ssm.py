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

HBM bytes, kernel by kernel (:func:`ssd_kernel_bytes`, read from mamba_ssm at e9594ce:
ops/triton/ssd_combined.py ``_mamba_chunk_scan_combined_fwd`` / ``_bwd`` and the wrappers in
ssd_chunk_state.py, ssd_state_passing.py, ssd_bmm.py and ssd_chunk_scan.py): every tensor a
kernel reads or writes, once, at its dtype (compulsory traffic; B and C, shared by the heads of a
group, are counted once per kernel: L2 serves the re-reads). In units of x = T·H·P elements,
states S = c·H·P·N, B or C = T·G·N, CBᵀ = c·G·Q², dt-length D = c·Q·H:

  forward  (5 kernels)  chunk_cumsum (dt in; fp32 dt and cumulative decay out), chunk_state
           (x, B, dt, decay in; fp32 states out), state_passing (fp32 states in, bf16 out),
           bmm_chunk (C, B in; fp32 CBᵀ out), chunk_scan (CBᵀ, x, dt, decay, C, bf16 states, z
           in; y and, with z, the ungated y out)
  backward (the forward's first four kernels re-run, states now kept in fp32, then) chunk_scan
           _bwd_dz (dout, y, z, x in; dz and the gated dout out: only with z), bwd_dstates
           (C, decay, dout in; fp32 dstates out), state_passing_bwd (fp32 states and dstates
           in; bf16 dstates and states out), chunk_scan_chunk_state_bwd_dx (x, dt, decay, B,
           CBᵀ, dout, dstates in; dx and fp32 ddt out), chunk_state_bwd_db and chunk_scan_bwd_dC
           (x or states, dt, decay, dstates or dout, B or C in; fp32 dB / dC per head split and a
           decay gradient out, then summed over the splits), chunk_scan_bwd_dcb (fp32 dCBᵀ per
           split, summed), two bmm_chunk_bwd (dB, dC with their residuals), the decay gradient's
           flip-cumsum-flip and adds (torch ops on fp32 D-length tensors), chunk_scan_bwd
           _ddAcs_stable and chunk_cumsum_bwd.

The backward reads x and dout five to six times each and passes the states six times: about
three times the forward's bytes (Nemotron 3 Super's mixer: 3.2x), where the earlier count
(twice the forward plus one state pass) gave 2.5x and the H200 measurements' GPU-bound
forward+backward calls ran 20-27% over it. The head splits (``nheads_per_program`` = min(heads
per group, ⌈batch·chunks·heads / SMs⌉)) make dB, dC and dCBᵀ several fp32 copies on small grids.
Launches: one per kernel and torch op listed (5 forward, 28 backward with z). The scan runs in
bf16 whatever the plan's GEMM precision (Transformer Engine's fp8 covers the linear layers only).

Gate (``gate``): Megatron-Core's default training path (``use_mamba_mem_eff_path``,
mamba_split_conv1d_scan_combined) passes z into the scan: the forward reads z and writes the
ungated output too; the backward adds chunk_scan_bwd_dz (no FLOPs of note).

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

SM_COUNT_DEFAULT = 132      # the head-split heuristic's SM count where no device is given (H100 / H200)


@dataclass(frozen=True)
class SsdCost:
    """FLOPs, HBM bytes and kernel launches of one SSD scan over ``tokens`` tokens on one device."""

    flops: float
    bytes: float
    launches: int = 5


def ssd_flops_parts(tokens: int, heads: int, head_dim: int, groups: int, state: int, chunk: int,
                    sequences: int = 1) -> dict[str, float]:
    """Forward FLOPs of the five steps of the chunked scan (module docstring)."""
    T, H, P, G, N, Q = tokens, heads, head_dim, groups, state, chunk
    chunks = sequences * -(-(T // max(1, sequences)) // Q)
    return {"cb": 2.0 * T * Q * N * G, "diagonal": 2.0 * T * Q * P * H, "states": 2.0 * T * N * P * H,
            "passing": 2.0 * chunks * N * P * H, "off_diagonal": 2.0 * T * N * P * H}


def ssd_head_splits(batch: int, chunks_per_sequence: int, heads: int, groups: int, sm_count: int) -> int:
    """How many fp32 copies chunk_state_bwd_db, chunk_scan_bwd_dC and chunk_scan_bwd_dcb write
    before summing them (mamba_ssm: nheads_per_program = max(min(⌈batch·chunks·heads / SMs⌉,
    heads / groups), 1); splits = ⌈(heads / groups) / nheads_per_program⌉)."""
    ratio = max(1, heads // max(1, groups))
    per_program = max(min(-(-batch * chunks_per_sequence * heads // max(1, sm_count)), ratio), 1)
    return -(-ratio // per_program)


def ssd_kernel_bytes(tokens: int, heads: int, head_dim: int, groups: int, state: int, chunk: int,
                     sequences: int = 1, backward: bool = False, gate: bool = False,
                     sm_count: int = SM_COUNT_DEFAULT) -> list[tuple[str, float]]:
    """(kernel, HBM bytes) of every kernel and torch op of the forward (or backward) scan, in
    launch order (module docstring: mamba_ssm ssd_combined at e9594ce); bf16 activations, fp32
    where the wrappers allocate fp32."""
    T, H, P, G, N, Q = tokens, heads, head_dim, groups, state, chunk
    per_seq = -(-(T // max(1, sequences)) // Q)
    chunks = sequences * per_seq
    X, S, BC = float(T * H * P), float(chunks * H * P * N), float(T * G * N)
    CB, D, Draw = float(chunks * G * Q * Q), float(chunks * Q * H), float(T * H)
    recompute_states = 4 if backward else 2          # the backward keeps the passed states in fp32
    fwd = [("chunk_cumsum_fwd", 2 * Draw + 8 * D),
           ("chunk_state_fwd", 2 * X + 2 * BC + 8 * D + 4 * S),
           ("state_passing_fwd", 4 * S + recompute_states * S),
           ("bmm_chunk_fwd", 4 * BC + 4 * CB)]
    if not backward:
        return fwd + [("chunk_scan_fwd", 4 * CB + 2 * X + 8 * D + 2 * BC + 2 * S + (6 if gate else 2) * X)]
    k = ssd_head_splits(sequences, per_seq, H, G, sm_count)
    out = [("dt_clone", 4 * Draw)] + fwd
    if gate:
        out += [("chunk_scan_bwd_dz", 12 * X), ("dD_sum", 0.0)]
    out += [("chunk_scan_bwd_dstates", 2 * BC + 4 * D + 2 * X + 4 * S),
            ("state_passing_bwd", 4 * S + 4 * S + 2 * S + 2 * S), ("ddA_chunk_sum", 0.0),
            ("chunk_scan_chunk_state_bwd_dx", 2 * X + 8 * D + 2 * BC + 4 * CB + 2 * X + 2 * S + 2 * X + 4 * D),
            ("dD_from_x_sum", 0.0),
            ("chunk_state_bwd_db", 2 * X + 8 * D + 2 * S + 2 * BC + 4 * k * BC + 4 * D),
            ("dB_split_sum", 4 * k * BC + 4 * BC),
            ("chunk_scan_bwd_dC", 2 * S + 4 * D + 2 * X + 2 * BC + 4 * k * BC + 4 * D),
            ("dC_split_sum", 4 * k * BC + 4 * BC),
            ("chunk_scan_bwd_dcb", 2 * X + 8 * D + 2 * X + 4 * k * CB),
            ("dCB_split_sum", 4 * k * CB + 4 * CB),
            ("bmm_chunk_bwd_dB", 2 * BC + 4 * CB + 4 * BC + 2 * BC),
            ("bmm_chunk_bwd_dC", 2 * BC + 4 * CB + 4 * BC + 2 * BC),
            ("ddA_last_add", 0.0), ("ddA_flip", 8 * D), ("ddA_cumsum", 8 * D), ("ddA_flip_back", 8 * D),
            ("chunk_scan_bwd_ddAcs_stable", 2 * X + 8 * D + 2 * X + 4 * CB + 4 * D),
            ("ddA_add_next", 12 * D), ("ddA_add_prev", 12 * D),
            ("chunk_cumsum_bwd", 8 * D + 4 * Draw)]
    return out


def ssd_cost(tokens: int, heads: int, head_dim: int, groups: int, state: int, chunk: int,
             sequences: int = 1, backward: bool = False, gate: bool = False,
             sm_count: int = SM_COUNT_DEFAULT) -> SsdCost:
    """FLOPs, bytes and launches of the forward (or backward) chunked scan on one device:
    ``tokens`` in all (``sequences`` sequences of tokens / sequences each, every one split into
    chunks of ``chunk``), ``heads`` and ``groups`` this device's (after tensor parallelism);
    ``gate``: z fused into the scan; ``sm_count``: the device's SMs (the backward's head splits).
    Bytes and launches: :func:`ssd_kernel_bytes`."""
    parts = ssd_flops_parts(tokens, heads, head_dim, groups, state, chunk, sequences)
    kernels = ssd_kernel_bytes(tokens, heads, head_dim, groups, state, chunk, sequences, backward, gate, sm_count)
    fwd = sum(parts.values())
    flops = 2 * fwd + parts["states"] + parts["passing"] if backward else fwd
    return SsdCost(flops, sum(b for _, b in kernels), len(kernels))


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
    frac = cal.ssd_fraction.get(direction, 1.0)
    compute = cost.flops / (dev.peak("bf16") * frac)
    memory = cost.bytes / (dev.hbm_Bps * cal.ssd_hbm_fraction)
    gpu = max(compute, memory) + cost.launches * (cal.kernel_launch_s + cal.ssd_kernel_fixed_s)
    return max(gpu, cal.ssd_host_s.get(direction, 0.0)) if isolated else gpu
