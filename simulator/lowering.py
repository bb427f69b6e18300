"""Lowering: model x plan x hardware -> the ops one device runs for one micro-batch.

Shapes follow Megatron-LM's tensor parallelism (Shoeybi et al. 2019): QKV and MLP-up are
column-parallel (n / tp), attention-out and MLP-down row-parallel (k / tp); with sequence
parallelism (Korthikanti et al. 2022) the norms run on seq/tp tokens and each all-reduce
becomes an all-gather before and a reduce-scatter after the parallel region. Context
parallelism splits the sequence into cp chunks and passes K/V around a ring (overlapped with
attention). Expert parallelism dispatches tokens with an all-to-all (GShard).

Backward of a GEMM is two GEMMs (data-gradient and weight-gradient) with the transposed
shapes; backward of attention is FlashAttention's backward; each collective has its mirror.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from hardware_specs.errors import PlanError
from models.params import (attention_params, embedding_params, kind_param_tensors, kind_params, mamba_params, mlp_params,
                           mtp_layer_kinds, norm_params)
from models.schema import ModelSpec
from simulator.comm import Fabric, collective_time
from simulator.frameworks import get_framework
from simulator.compute import (DTYPE_BYTES, EAGER_SWIGLU_BYTES, DeviceModel, attention_flops, attention_time, elementwise_time,
                               flash_attention_bytes, gemm_bytes, gemm_flops, gemm_time, memory_time,
                               mixed_add_time, nvfp4_quantize_time, strided_elementwise_time)
from simulator import moe_dispatch
from simulator.ops import Op
from simulator.plan import PRECISION_GEMM_DTYPE, ParallelPlan, gemm_precision_override
from simulator.ssm import ssd_cost, ssd_time

ACT_BYTES = 2  # bf16 activations


@dataclass(frozen=True)
class Context:
    """Everything lowering needs, with the per-device sizes derived once."""

    model: ModelSpec
    plan: ParallelPlan
    dev: DeviceModel
    fabric: Fabric

    @property
    def tokens(self) -> int:
        """Tokens of one micro-batch on one device before TP sharding: mbs x seq / cp."""
        return self.plan.mbs * self.plan.seq // self.plan.cp

    @property
    def sp_tokens(self) -> int:
        """Tokens in the sequence-parallel regions (norms, residuals)."""
        return self.tokens // self.plan.tp if self.plan.sp else self.tokens

    host_link_Bps: float = 64e9    # per-GPU host link, per direction (node catalog)

    @property
    def gemm_dtype(self) -> str:
        return PRECISION_GEMM_DTYPE.get(self.plan.precision, "bf16")

    def comm(self, name: str, kind: str, nbytes: float, group: str, phase: str, overlap_with: float = 0.0) -> Op:
        """A collective of ``group`` (tp, cp, ep, dp, pp) at its place in the rank order."""
        p = self.plan
        size, stride = {"tp": (p.tp, 1), "cp": (p.cp, p.tp), "dp": (p.dp, p.tp * p.cp),
                        "ep": (p.ep, p.expert_tp), "pp": (2, p.tp * p.cp * p.dp)}[group]
        t = collective_time(self.fabric, kind, nbytes, size, stride)
        tier = self.fabric.level_for_span(size * stride).name if size > 1 else "none"
        return Op(name, "collective", phase, t, bytes=nbytes, shape=(kind, size, stride, tier), group=group,
                  overlap_s=min(t, overlap_with))


def _gemm(ctx: Context, name: str, m: int, n: int, k: int, phase: str, batch: int = 1, dtype: str | None = None,
          bias: bool = False, quantize: bool = True) -> Op:
    """A GEMM op; in fp8 it includes Transformer Engine's quantisation of its activation input
    (read bf16, write fp8 and an amax reduction: 3 bytes per element; over several experts in
    :func:`fp8_quantize_launches` kernels), weights cached in fp8.
    In fp4 (NVFP4) the fprop GEMM quantizes its input X and the dgrad GEMM the incoming gradient
    dY, each once for both uses (compute.nvfp4_quantize_time); the wgrad GEMM (``quantize``
    False) takes the column-wise copies those made; weights are quantized once per step (the
    recipe's fp4 parameters), not per micro-batch.
    ``bias``: the linear layer has a bias (its gradient is reduced in backward). The plan's
    ``gemm_precision`` may set another dtype for this GEMM (plan.gemm_precision_override)."""
    dtype = dtype or gemm_precision_override(ctx.plan, name) or ctx.gemm_dtype
    t = expert_gemm_time(ctx, m, n, k, dtype, batch) if batch > 1 else gemm_time(ctx.dev, m, n, k, dtype)
    if dtype == "fp8":
        t += fp8_quantize_time(ctx, m * k * batch, batch, quantize)
    elif dtype == "fp4" and quantize:
        t += nvfp4_quantize_time(ctx.dev, m * k * batch)
    return Op(name, "gemm", phase, t, gemm_flops(m, n, k, batch), gemm_bytes(m, n, k, dtype, batch),
              (m, n, k, batch, dtype, bias))


# Transformer Engine's current-scaling quantization (Float8CurrentScalingQuantizer::quantize_impl,
# transformer_engine/pytorch/csrc/quantizer.cpp, v2.8-v2.16): nvte_compute_amax reads the input for
# its amax, nvte_compute_scale_from_amax turns it into the scale, then nvte_quantize_v2 casts: one more
# read of the input (2 bytes per element) and two more kernels than a delayed-scaling cast, whose scale
# comes from the amax history. The amax all-reduce over the tensor-parallel group (with_amax_reduction,
# sequence-parallel inputs) is not costed.
FP8_QUANTIZE_BYTES = 3.0                 # read bf16, write fp8 and the amax reduction
CURRENT_SCALING_AMAX_BYTES = 2.0         # the amax kernel's read of the bf16 input
CURRENT_SCALING_KERNELS = 3              # amax, scale from amax, quantize
# Transformer Engine's MXFP8 quantization (MXFP8Quantizer::create_tensor and ::quantize,
# transformer_engine/pytorch/csrc/quantizer.cpp, commit d0067d0): one E8M0 scale byte per MXFP8_BLOCK
# consecutive elements along the GEMM's reduction dimension, so the row-wise copy (fprop, dgrad) and the
# column-wise copy (wgrad) are separate data: a quantization for both uses (linear.py / grouped_linear.py
# set columnwise usage on the forward input when backward needs it and on the output gradient for wgrad)
# writes both copies with their scales in one nvte_quantize_v2 kernel, no amax pass: read bf16 (2), write
# 2 x (1 + 1/32) bytes per element. Tensor-scaled FP8 on Blackwell writes the row-wise copy only
# (Float8Quantizer / Float8CurrentScalingQuantizer::create_tensor: with_transpose = columnwise_usage &&
# !nvte_is_non_tn_fp8_gemm_supported(), true from sm_100: transformer_engine/common/transformer_engine.cpp).
MXFP8_BLOCK = 32
MXFP8_QUANTIZE_BYTES = 2.0 + 2 * (DTYPE_BYTES["fp8"] + 1.0 / MXFP8_BLOCK)


def fp8_quantize_time(ctx: Context, elements: float, experts: int = 1, quantize: bool = True) -> float:
    """Seconds to quantize the ``elements`` bf16 input values of an fp8 GEMM over ``experts`` local
    experts: FP8_QUANTIZE_BYTES per element in :func:`fp8_quantize_launches` kernels; under the
    current-scaling recipe (plan ``fp8_recipe`` tensorwise) each quantization (``quantize``: forward and
    data-gradient inputs) first reads its input for the amax and derives the scale, in kernels of their
    own (CURRENT_SCALING_AMAX_BYTES, CURRENT_SCALING_KERNELS per split); under ``mxfp8`` each writes
    its row-wise and column-wise copies (:func:`fp8_quantize_bytes_per_element`). On a device whose fp8
    GEMMs take any layout (:func:`non_tn_fp8_gemm`: Blackwell) the weight-gradient GEMM (``quantize``
    False) costs no pass: both its operands were quantized for it already."""
    if not quantize and non_tn_fp8_gemm(ctx.dev):
        return 0.0
    launches = fp8_quantize_launches(ctx, experts, quantize)
    nbytes = fp8_quantize_bytes_per_element(ctx.plan.fp8_recipe, quantize) * elements
    if quantize and ctx.plan.fp8_recipe == "tensorwise":
        nbytes += CURRENT_SCALING_AMAX_BYTES * elements
        launches *= CURRENT_SCALING_KERNELS
    return memory_time(ctx.dev, nbytes, launches=launches)


# GPU families on which cuBLAS runs fp8 GEMMs in every operand layout, so Transformer Engine makes no
# transposed fp8 copy for the weight-gradient GEMM (nvte_is_non_tn_fp8_gemm_supported: compute
# capability 10.x-11.x or >= 13.0, transformer_engine/common/transformer_engine.cpp; the catalog's
# Blackwell parts are sm_100 / sm_103).
NON_TN_FP8_FAMILIES = ("nvidia-blackwell",)


def non_tn_fp8_gemm(dev: DeviceModel) -> bool:
    """Whether the device's fp8 weight-gradient GEMM takes the copies the forward and data-gradient
    quantizations already wrote (no quantize pass of its own): true on NON_TN_FP8_FAMILIES. Elsewhere
    (Hopper) the wgrad GEMM keeps its own pass over its input, as costed before (the TN-only fp8 GEMM
    needs transposed copies: TE's cast-transpose)."""
    return dev.accelerator.family in NON_TN_FP8_FAMILIES


def fp8_quantize_bytes_per_element(recipe: str | None, quantize: bool = True) -> float:
    """HBM bytes per bf16 input element of one fp8 GEMM operand's quantization: MXFP8_QUANTIZE_BYTES
    under the ``mxfp8`` recipe where the GEMM quantizes (``quantize``: the forward input and the output
    gradient, each for its row-wise and column-wise uses), else FP8_QUANTIZE_BYTES (one row-wise copy;
    the weight-gradient GEMM, ``quantize`` False, keeps the recipe-independent figure it always had)."""
    return MXFP8_QUANTIZE_BYTES if quantize and recipe == "mxfp8" else FP8_QUANTIZE_BYTES


def fp8_quantize_launches(ctx: Context, experts: int, quantize: bool = True) -> int:
    """Kernels that quantize the fp8 input of a GEMM over ``experts`` local experts. Transformer
    Engine's GroupedLinear (the framework's ``expert_gemm: per_expert``) splits its input and its
    output gradient by expert and quantizes the splits with ``tex.split_quantize``, whose
    ``multi_tensor_quantize_impl`` (transformer_engine/pytorch/csrc/extensions/cast.cpp, v2.8 to v2.16)
    has one fused kernel for all splits only for DelayedScaling quantizers ("Currently only have fused
    kernel for FP8 delayed scaling": nvte_multi_cast_transpose); every other FP8 recipe (Megatron-Core's
    ``tensorwise``, ``mxfp8``, ``blockwise``) launches one quantize kernel per split ("Quantize kernels
    individually"). The bytes are the same either way; each extra kernel adds its fixed cost
    (compute.memory_time ``launches``). One launch for a single GEMM, a recipe that fuses, another
    expert kernel path, or the weight-gradient GEMM (``quantize`` False: it takes the column-wise
    copies the forward and data-gradient quantizations made)."""
    if experts <= 1 or not quantize or get_framework(ctx.plan.framework).kernels.expert_gemm != "per_expert":
        return 1
    return 1 if (ctx.plan.fp8_recipe or "delayed") == "delayed" else experts


def expert_gemm_time(ctx: Context, m: int, n: int, k: int, dtype: str, experts: int) -> float:
    """Seconds of one GEMM over ``experts`` local experts of ``m`` rows each, as the framework runs
    it (``Kernels.expert_gemm``). "grouped": one batched kernel whose tiles fill every SM in waves
    (compute.gemm_time with ``batch``). "per_expert": Transformer Engine's GroupedLinear issues one
    cuBLAS GEMM per expert (``multi_stream_cublas_gemm``, transformer_engine/common/gemm/
    cublaslt_gemm.cu, TE v2.12-v2.16), each with its own tile waves and fixed cost: the sum of
    ``experts`` single GEMMs. ASSUMPTION: the GEMMs do not run concurrently although TE spreads them
    over its compute streams (``nvte_get_num_compute_streams``, 4): cuBLAS's Hopper and Blackwell
    kernels launch enough one-CTA-per-SM thread blocks to take every free SM, so a GEMM on another
    stream starts as SMs free up, filling at most the last wave of the one before; the sum is an upper
    bound, the batched kernel the lower one."""
    if get_framework(ctx.plan.framework).kernels.expert_gemm == "per_expert":
        return experts * gemm_time(ctx.dev, m, n, k, dtype)
    return gemm_time(ctx.dev, m, n, k, dtype, experts)


def _gemm_bwd(ctx: Context, fwd: Op) -> list[Op]:
    """Data-gradient dX = dY W^T (m, k, n) and weight-gradient dW = X^T dY (k, n, m); with a
    bias, its gradient is a reduction of dY over the tokens (one read of m x n)."""
    m, n, k, batch, dtype, bias = fwd.shape
    ops = [_gemm(ctx, fwd.name + ".dgrad", m, k, n, "bwd", batch, dtype),
           _gemm(ctx, fwd.name + ".wgrad", k, n, m, "bwd", batch, dtype, quantize=False)]
    if bias:
        nbytes = m * n * batch * ACT_BYTES
        ops.append(Op(fwd.name + ".bias_grad", "memory", "bwd", memory_time(ctx.dev, nbytes), bytes=nbytes))
    return ops


def _qkv_bias(m: ModelSpec) -> bool:
    """Whether the fused QKV projection has a bias (it may differ from the others, as in Qwen2)."""
    return m.qkv_bias if m.qkv_bias is not None else m.linear_bias


def _elementwise(ctx: Context, name: str, op: str, tokens: int, width: int, phase: str,
                 dtype: str = "bf16") -> Op:
    t = elementwise_time(ctx.dev, op, tokens, width, dtype, backward=(phase == "bwd"))
    per_element = EAGER_SWIGLU_BYTES[phase == "bwd"] if op == "silu_mul_eager" else DTYPE_BYTES[dtype]
    return Op(name, "elementwise", phase, t, bytes=tokens * width * per_element, shape=(op, tokens, width, dtype))


def _residual_dtype(ctx: Context) -> str:
    """Autocast (torch_amp) keeps the residual stream, norms and adds in fp32."""
    return "fp32" if ctx.plan.recipe == "torch_amp" else "bf16"


def _autocast_ops(ctx: Context, block: str, linear_params: float) -> list[Op]:
    """Under autocast, each forward casts the block's fp32 weights to bf16 and the fp32 norm
    output to bf16 before its first GEMM; backward casts the bf16 gradients back to fp32.
    Each cast reads 4 and writes 2 bytes per element (or the reverse)."""
    if ctx.plan.recipe != "torch_amp":
        return []
    if get_framework(ctx.plan.framework).kernels.autocast == "torch_eager":
        return _torch_autocast_ops(ctx, block, linear_params)
    act = ctx.tokens * ctx.model.hidden
    fwd_bytes = 6 * (linear_params + act)
    # backward: weight gradients bf16 -> fp32, the norm-input gradient bf16 -> fp32, and the
    # block output's gradient fp32 -> bf16 (it leaves the fp32 residual add for a bf16 GEMM)
    bwd_bytes = 6 * (linear_params + 2 * act)
    return [Op(f"{block}.autocast_casts", "memory", "fwd", memory_time(ctx.dev, fwd_bytes, launches=3),
               bytes=fwd_bytes),
            Op(f"{block}.autocast_casts", "memory", "bwd", memory_time(ctx.dev, bwd_bytes, launches=4),
               bytes=bwd_bytes)]


def _linear_consumers(ctx: Context, block: str) -> tuple[int, int]:
    """(linear weight tensors, linears reading the block's normed input) of one block in the
    framework's model code: torchtitan's separate wq, wk, wv (+ wo) and w1, w3 (+ w2)
    (Kernels.projections separate) or one fused QKV / gate-up GEMM."""
    m = ctx.model
    separate = get_framework(ctx.plan.framework).kernels.projections == "separate"
    if block == "attention" and m.mla is None:
        return (4, 3) if separate else (2, 1)
    if block == "mlp" and m.gated_mlp:
        return (3, 2) if separate else (2, 1)
    return 2, 1


def _torch_autocast_ops(ctx: Context, block: str, linear_params: float) -> list[Op]:
    """Casts and fp32 gradient sums of one block under torch.autocast(bf16) with fp32 weights and
    an fp32 residual stream, as torch runs them (Kernels.autocast torch_eager), bytes per element:

    Forward: each linear casts its fp32 weight to bf16 (autocast caches casts of leaf tensors only,
    until the outermost autocast region exits: torch/amp/autocast_mode.py __exit__ clears the cache,
    so once per micro-batch where each micro-batch enters autocast) and casts its fp32 input anew
    (a non-leaf: not cached), so the normed input is cast once per consuming linear (3 for
    separate wq/wk/wv, 2 for w1/w3): r4 w2. These are contiguous float->bf16 copies, ATen's
    vectorized bfloat16_copy_kernel (aten/src/ATen/native/cuda/Copy.cu): the ``copy`` fraction.
    Backward: autograd casts each bf16 gradient back to its fp32 source (the weight gradients, and
    the normed input's gradient per consumer: r2 w4). bf16 -> fp32 takes direct_copy_kernel_cuda's
    dynamically casting unrolled_elementwise_kernel, which no committed kernel measurement covers:
    ASSUMPTION, at the generic ``hbm_fraction`` (as the Megatron ``.float()``). The block output's
    fp32 gradient is cast to bf16 for the bf16 branch (vectorized, r4 w2). The normed input's
    per-consumer fp32 gradients are summed (consumers - 1 adds) and so is the residual stream's
    (the norm's input gradient plus the skip path's): vectorized fp32 adds (CUDAFunctor_add<float>,
    r4 r4 w4), at the ``add`` fraction. Kernels per layer and micro-batch for llama in the
    torch-native profile: 12 + 2 RoPE fp32->bf16 forward, 14 bf16->fp32 and 10 fp32->bf16 backward
    (with RoPE's), 9 fp32 adds (with RoPE's 4): validation/kernel_reconcile.py on
    h200x2_plan_native_profile.json."""
    weights, consumers = _linear_consumers(ctx, block)
    act = ctx.tokens * ctx.model.hidden
    cast = 6.0 * (linear_params + consumers * act)
    sums = 12.0 * consumers * act                   # (consumers - 1) input-gradient sums + the residual's
    fwd = memory_time(ctx.dev, cast, launches=weights + consumers, op="copy")
    bwd = memory_time(ctx.dev, cast, launches=weights + consumers) + memory_time(ctx.dev, 6.0 * act, op="copy")
    summed = memory_time(ctx.dev, sums, launches=consumers, op="add")
    return [Op(f"{block}.autocast_casts", "memory", "fwd", fwd, bytes=cast),
            Op(f"{block}.autocast_casts", "memory", "bwd", bwd, bytes=cast + 6.0 * act),
            Op(f"{block}.grad_sums", "memory", "bwd", summed,
               bytes=sums)]


def _attention(ctx: Context, phase: str) -> Op:
    m, p = ctx.model, ctx.plan
    heads = m.num_heads // p.tp
    kv = max(1, m.kv_heads // p.tp)
    s = p.seq // p.cp
    qk_dim, v_dim = _attention_dims(m)
    d = max(qk_dim, v_dim)
    backend = p.attention
    # load-balanced causal CP: each rank does cp half-blocks of s x s worth of work
    direction = "bwd" if phase == "bwd" else "fwd"
    if p.cp > 1:
        first, rest = _cp_step_times(ctx, direction)
        t = first + (p.cp - 1) * rest
    else:
        t = attention_time(ctx.dev, p.mbs, heads, s, s, d, True, kv, backend, direction)
    flops = attention_flops(p.mbs * p.cp, heads, s, s, (qk_dim + v_dim) / 2, True) * (2.5 if phase == "bwd" else 1)
    nbytes = flash_attention_bytes(p.mbs * p.cp, heads, kv, s, s, d) * (2.5 if phase == "bwd" else 1)
    return Op("attention.core", "attention", phase, t, flops, nbytes, shape=(p.mbs * p.cp, heads, s, d, backend))


def _cp_step_times(ctx: Context, direction: str) -> tuple[float, float]:
    """Seconds of one ring-attention step's kernel under load-balanced causal CP (Megatron/TE):
    the rank's s = seq/cp tokens are two half-chunks (i and 2cp-1-i); step 0 attends them to
    their own keys (causal, s x s), every later step runs a separate non-causal kernel over half
    a block (s x s/2: either the early half-chunk of keys, or the late half-chunk of queries).
    Total work is cp·s²/2, as one causal kernel of the whole would do, but in cp launches, each
    with its own wave quantisation."""
    m, p = ctx.model, ctx.plan
    heads, kv = m.num_heads // p.tp, max(1, m.kv_heads // p.tp)
    s = p.seq // p.cp
    d = max(_attention_dims(m))
    first = attention_time(ctx.dev, p.mbs, heads, s, s, d, True, kv, p.attention, direction)
    rest = attention_time(ctx.dev, p.mbs, heads, s, s // 2, d, False, kv, p.attention, direction)
    return first, rest


def _cp_ring(ctx: Context, phase: str) -> list[Op]:
    """Ring attention's K/V exchange for one micro-batch (and, in backward, dK/dV travel with
    K/V: twice the bytes) plus the per-step merge of partial results. Each of the cp-1 transfers
    runs under one step's attention kernel (the first under step 0's): it is exposed by what
    exceeds that kernel, and the hidden part still costs comm_overlap_slowdown of its time.
    Merges: forward, each later step's output (bf16) folds into the fp32 running output with
    its log-sum-exp (read 2 + read/write 8 bytes per output element); backward, each step's
    dQ, dK, dV accumulate in fp32 (read/write 8 bytes per element)."""
    m, p = ctx.model, ctx.plan
    heads = m.num_heads // p.tp
    kv_heads = max(1, m.kv_heads // p.tp) if m.mla is None else heads
    qk, vd = _attention_dims(m)
    kv_bytes = ctx.tokens * kv_heads * (qk + vd) * ACT_BYTES * (2 if phase == "bwd" else 1)
    step_c = collective_time(ctx.fabric, "send_recv", kv_bytes, p.cp, p.tp)
    first, rest = _cp_step_times(ctx, phase)
    slow = ctx.dev.cal.comm_overlap_slowdown
    total = (p.cp - 1) * step_c
    exposed = sum(max(0.0, step_c - cover) + slow * min(step_c, cover)
                  for cover in [first] + [rest] * (p.cp - 2))
    ring = Op("attention.cp_ring", "collective", phase, total, bytes=kv_bytes, shape=("send_recv", p.cp, p.tp),
              group="cp", overlap_s=total - exposed)
    if phase == "bwd":
        merge = 8.0 * ctx.tokens * (heads * qk + kv_heads * (qk + vd))
    else:
        merge = 10.0 * ctx.tokens * heads * vd
    merge *= p.cp - 1
    return [ring, Op("attention.cp_merge", "memory", phase, memory_time(ctx.dev, merge, launches=p.cp - 1),
                     bytes=merge)]


def _attention_dims(m: ModelSpec) -> tuple[int, int]:
    """(QK head dim, V head dim): MLA uses nope+rope for QK and v_head_dim for V."""
    if m.mla is not None:
        return m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim, m.mla.v_head_dim
    return m.dim_head, m.dim_head


def attention_block_fwd(ctx: Context) -> list[Op]:
    """Norm, (SP all-gather), QKV / MLA projections, attention core (+CP ring), out-proj, TP reduce."""
    m, p = ctx.model, ctx.plan
    T, h, tp = ctx.tokens, m.hidden, p.tp
    rd = _residual_dtype(ctx)
    ops = [_elementwise(ctx, "attention.norm", m.norm, ctx.sp_tokens, h, "fwd", rd)]
    act = ctx.tokens * h * ACT_BYTES
    if p.sp:
        ops.append(ctx.comm("attention.sp_all_gather", "all_gather", act / tp, "tp", "fwd"))
    heads = m.num_heads // tp
    if m.mla is None:
        kv = max(1, m.kv_heads // tp)
        ops.append(_gemm(ctx, "attention.qkv", T, (heads + 2 * kv) * m.dim_head, h, "fwd", bias=_qkv_bias(m)))
    else:
        ops += _mla_projections(ctx, heads)
    ops += _rope(ctx, T, heads, max(1, m.kv_heads // tp) if m.mla is None else heads)
    core = _attention(ctx, "fwd")
    ops.append(core)
    if m.mla is None:
        # backward: dQ, dK, dV come out as three tensors and are copied into the fused QKV
        # gradient (read + write, bf16)
        qkv_grad = 4.0 * T * (heads + 2 * max(1, m.kv_heads // tp)) * m.dim_head
        ops.append(Op("attention.qkv_grad_concat", "memory", "bwd", memory_time(ctx.dev, qkv_grad), bytes=qkv_grad))
    if p.cp > 1:
        ops += _cp_ring(ctx, "fwd")
    _, vd = _attention_dims(m)
    out = _gemm(ctx, "attention.out", T, h, heads * vd, "fwd", bias=m.linear_bias)
    ops.append(out)
    ops += _tp_reduce(ctx, "attention", act, out.time_s)
    ops.append(_elementwise(ctx, "attention.residual", "add", ctx.sp_tokens, h, "fwd", rd))
    return ops + _autocast_ops(ctx, "attention", attention_params(m) / tp)


def _rope(ctx: Context, tokens: int, heads: int, kv_heads: int) -> list[Op]:
    """Rotary embeddings where the framework runs them as separate PyTorch kernels (Megatron-Core
    without apply_rope_fusion: rope_utils.py _apply_rotary_pos_emb_bshd, once on Q and once on K,
    bf16). Per element of Q and K, forward: t * cos (read 2, write 2), -x2 on half (2), the
    rotate-half cat (4), * sin (4), the add (6), the final cat with the empty pass-through part
    (4): 24 bytes, 6 kernels per tensor (cos and sin themselves are [s, d]: negligible bytes).
    Backward (autograd): grad * cos and grad * sin (8), the neg (2), the chunk's gradient gathered
    (4), the two paths added (6), the slice's gradient copied into a zeroed tensor (6): 26 bytes,
    7 kernels per tensor. Q and K are strided views of the fused QKV output, so all but the adds
    run on PyTorch's non-vectorized path (profiled: elementwise_kernel<128, 4> multiplies, neg and
    direct_copy, CatArrayBatchedCopy), costed per element at its element rate
    (:func:`strided_elementwise_time`): forward 4.5 element passes (two multiplies, the neg over
    half, two cats), backward 4.5 (two multiplies, the neg, the chunk's gather, the slice copy);
    the adds (6 bytes per element) vectorized at the ``add`` fraction."""
    m = ctx.model
    kind = get_framework(ctx.plan.framework).kernels.choices(ctx.plan.attention).rope
    if m.position != "rope" or kind == "none":
        return []
    qk_dim = _attention_dims(m)[0] if m.mla is None else m.mla.qk_rope_head_dim
    elems = tokens * (heads + kv_heads) * qk_dim
    if kind == "torch_fp32":
        return _torch_fp32_rope(ctx, elems)
    strided = strided_elementwise_time(ctx.dev, 4.5 * elems, launches=10)
    add = memory_time(ctx.dev, 6.0 * elems, launches=2, op="add")
    return [Op("attention.rope", "memory", "fwd", strided + add, bytes=24.0 * elems),
            Op("attention.rope", "memory", "bwd", strided + add + memory_time(ctx.dev, 2.0 * elems, launches=2),
               bytes=26.0 * elems)]


def _torch_fp32_rope(ctx: Context, elems: float) -> list[Op]:
    """Eager RoPE on bf16 Q and K (``elems`` elements together) with fp32 cos/sin tables, as the
    torch-native harness's model runs it (validation/harness/plan_step.py ``rope``: the even and
    odd halves x1, x2 as strided views, stack((x1·c − x2·s, x1·s + x2·c), -1).flatten(-2), then
    ``type_as`` bf16; torchtitan's complex form, ``view_as_complex(x.float())`` times freqs_cis, is
    also fp32 with one cast each way). Bytes per element of Q and K, the casts in the
    ``autocast_casts`` ops (as autocast's, by kernel class):
    forward: four bf16 x fp32 products into fp32 (r2 w4 over half the elements: 12), the
    difference and sum (r8 w4 over half: 12), the stack's two strided writes (r4 w4: 8): 32 bytes,
    8 kernels per tensor; the fp32 -> bf16 cast: 6 (vectorized copy).
    backward: the sum's negation (4), four fp32 products of the gradient halves with cos and sin
    (16), each cast to the bf16 half it belongs to (4 casts, 12 bytes, vectorized), two bf16 sums
    (6), each half's slice gradient zero-filled and copied in (8) and the two summed (6): 40 bytes,
    12 kernels per tensor; type_as's gradient bf16 -> fp32 (6, the unrolled casting path).
    Non-vectorized TensorIterator paths (mixed dtypes, strided halves): ``hbm_fraction``
    (ASSUMPTION, as the other unmeasured casting kernels)."""
    fwd = memory_time(ctx.dev, 32.0 * elems, launches=16)
    bwd = memory_time(ctx.dev, 40.0 * elems, launches=24)
    return [Op("attention.rope", "memory", "fwd", fwd, bytes=32.0 * elems),
            Op("attention.rope", "memory", "bwd", bwd, bytes=40.0 * elems),
            Op("attention.rope.autocast_casts", "memory", "fwd", memory_time(ctx.dev, 6.0 * elems, launches=2, op="copy"),
               bytes=6.0 * elems),
            Op("attention.rope.autocast_casts", "memory", "bwd",
               memory_time(ctx.dev, 6.0 * elems, launches=2) + memory_time(ctx.dev, 12.0 * elems, launches=8, op="copy"),
               bytes=18.0 * elems)]


def _mla_projections(ctx: Context, heads: int) -> list[Op]:
    """DeepSeek MLA: Q down/up (or plain Q), KV down (replicated), KV up (split over heads)."""
    m, T, h = ctx.model, ctx.tokens, ctx.model.hidden
    a = m.mla
    qk = a.qk_nope_head_dim + a.qk_rope_head_dim
    ops = []
    if a.q_lora_rank:
        ops.append(_gemm(ctx, "attention.q_down", T, a.q_lora_rank, h, "fwd", bias=m.linear_bias))
        ops.append(_gemm(ctx, "attention.q_up", T, heads * qk, a.q_lora_rank, "fwd", bias=m.linear_bias))
    else:
        ops.append(_gemm(ctx, "attention.q", T, heads * qk, h, "fwd", bias=m.linear_bias))
    ops.append(_gemm(ctx, "attention.kv_down", T, a.kv_lora_rank + a.qk_rope_head_dim, h, "fwd"))
    ops.append(_gemm(ctx, "attention.kv_up", T, heads * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank, "fwd",
                     bias=m.linear_bias))
    return ops


def _tp_reduce(ctx: Context, block: str, act_bytes: float, overlap_gemm_s: float) -> list[Op]:
    """The reduction closing a row-parallel GEMM: reduce-scatter (SP) or all-reduce."""
    p = ctx.plan
    if p.tp == 1:
        return []
    hide = overlap_gemm_s if p.tp_comm_overlap else 0.0
    kind = "reduce_scatter" if p.sp else "all_reduce"
    return [ctx.comm(f"{block}.tp_{kind}", kind, act_bytes, "tp", "fwd", hide)]


def mlp_block_fwd(ctx: Context, moe: bool) -> list[Op]:
    """Norm, (SP all-gather), dense MLP or MoE (router, all-to-all, grouped experts), TP reduce."""
    m, p = ctx.model, ctx.plan
    T, h = ctx.tokens, m.hidden
    act = T * h * ACT_BYTES
    rd = _residual_dtype(ctx)
    ops = [_elementwise(ctx, "mlp.norm", m.norm, ctx.sp_tokens, h, "fwd", rd)]
    if p.sp:
        ops.append(ctx.comm("mlp.sp_all_gather", "all_gather", act / p.tp, "tp", "fwd"))
    if moe:
        ffn = _moe_ffn(ctx)
        ops += ffn
        # the last op of the MoE block proper (the routing ops after the combine are not GEMMs)
        last = next(op.time_s for op in reversed(ffn) if op.kind in ("gemm", "collective"))
    else:
        ops += _dense_ffn(ctx, "mlp", T, m.ffn_hidden // p.tp)
        last = ops[-1].time_s
    ops += _tp_reduce(ctx, "mlp", act, last)
    ops.append(_elementwise(ctx, "mlp.residual", "add", ctx.sp_tokens, h, "fwd", rd))
    linear = mlp_params(m, m.ffn_hidden) / p.tp if not moe else 0.0
    return ops + _autocast_ops(ctx, "mlp", linear)


def _dense_ffn(ctx: Context, name: str, tokens: int, ffn_local: int, batch: int = 1,
               width: int | None = None) -> list[Op]:
    """Up (gate+up when gated), activation, down for ``batch`` experts of ``tokens`` each;
    ``width`` is the FFN's input and output width (hidden, or LatentMoE's latent size)."""
    m = ctx.model
    if tokens <= 0 or ffn_local <= 0:
        return []
    width = width or m.hidden
    up_n = ffn_local * (2 if m.gated_mlp else 1)
    act_op = "silu_mul" if m.gated_mlp else "gelu"
    if m.gated_mlp and get_framework(ctx.plan.framework).kernels.choices(ctx.plan.attention).swiglu == "megatron_eager":
        act_op = "silu_mul_eager"
    return [_gemm(ctx, f"{name}.up", tokens, up_n, width, "fwd", batch, bias=m.linear_bias),
            _elementwise(ctx, f"{name}.act", act_op, tokens * batch, ffn_local, "fwd"),
            _gemm(ctx, f"{name}.down", tokens, width, ffn_local, "fwd", batch, bias=m.linear_bias)]


def _moe_ffn(ctx: Context) -> list[Op]:
    """Router, dispatch all-to-all, local experts as a grouped GEMM, combine all-to-all, shared
    experts, with the routing work the framework's token dispatcher adds around them
    (simulator/moe_dispatch.py: the router's top-k and aux loss, the token permutations, the host
    synchronisation). With ``ep_comm_overlap`` (DualPipe-style scheduling of two micro-batch
    chunks, as DeepSeek-V3 trains) the two all-to-alls hide under the expert and shared-expert compute."""
    m, p = ctx.model, ctx.plan
    e = m.moe
    etp = p.expert_tp
    T = ctx.tokens
    router = _gemm(ctx, "moe.router", T, e.num_experts, m.hidden, "fwd", dtype="bf16")
    local_experts = e.num_experts // p.ep
    width = e.latent_size or m.hidden      # LatentMoE: tokens travel and experts run at the latent size
    # rows the device sends and its experts run: its own sequence-parallel shard's, times etp
    # (moe_dispatch.dispatched_tokens: T where etp = tp, T/tp where etp = 1 < tp)
    a2a = moe_dispatch.routed_rows(ctx, moe_dispatch.dispatched_tokens(ctx)) * width * ACT_BYTES
    rows, ffn = moe_dispatch.expert_tokens(ctx), e.expert_ffn_hidden // etp
    if get_framework(p.framework).kernels.expert_gemm == "sequential":
        experts = _sequential_experts(ctx, rows, ffn, local_experts, width)
    else:
        experts = _dense_ffn(ctx, "moe.experts", rows, ffn, local_experts, width)
    shared = []
    if e.shared_experts:
        shared_width = (e.shared_expert_ffn_hidden or e.expert_ffn_hidden) * e.shared_experts
        shared = _dense_ffn(ctx, "moe.shared", T, shared_width // p.tp)
    hide = sum(op.time_s for op in experts + shared) / 2 if p.ep_comm_overlap else 0.0
    s = moe_dispatch.settings(ctx)
    pre, post_dispatch, pre_combine, post_combine = moe_dispatch.dispatch_ops(ctx, width)
    ops = [router] + (moe_dispatch.router_ops(ctx, s) if s.dispatcher != "none" else [])
    # LatentMoE's fc1/fc2_latent_proj are TELinear(parallel_mode="duplicated") on the MoE layer's
    # input as it arrives, the rank's sequence-parallel shard (moe_layer.py, Megatron-LM d98e8a64)
    L = moe_dispatch.local_tokens(ctx)
    if e.latent_size:   # hidden -> latent before dispatch (weights replicated over tp, like the router)
        ops.append(_gemm(ctx, "moe.latent_down", L, e.latent_size, m.hidden, "fwd"))
    ops += pre
    if p.ep > 1:
        ops.append(ctx.comm("moe.dispatch_all_to_all", "all_to_all", a2a, "ep", "fwd", hide))
    ops += post_dispatch + experts + pre_combine
    if p.ep > 1:
        ops.append(ctx.comm("moe.combine_all_to_all", "all_to_all", a2a, "ep", "fwd", hide))
    ops += post_combine
    if e.latent_size:   # latent -> hidden after the combine
        ops.append(_gemm(ctx, "moe.latent_up", L, m.hidden, e.latent_size, "fwd"))
    return ops + shared


EXPERT_LOOP_OP = "moe.expert."     # name prefix of the ops of one iteration of a Python loop over experts


def _sequential_experts(ctx: Context, tokens: int, ffn_local: int, experts: int, width: int) -> list[Op]:
    """Megatron-Core's SequentialMLP (transformer/moe/experts.py): torch.split of the permuted rows,
    then each local expert's MLP module in turn (up GEMM, activation, with the profile's
    ``moe_probs: experts`` the probability scaling, down GEMM: mlp.py MLP.forward), then torch.cat of
    the outputs (``tokens`` rows of ``width`` bf16 values per expert, read and written). One copy of
    the ops per expert, so that each GEMM pays its own tile waves and fixed cost and the host issues
    every kernel of the loop (its op count)."""
    one = _dense_ffn(ctx, EXPERT_LOOP_OP.rstrip("."), tokens, ffn_local, 1, width)
    if get_framework(ctx.plan.framework).kernels.moe_probs == "experts":
        one = one[:2] + _prob_scale_ops(ctx, tokens, ffn_local) + one[2:]
    cat = 2 * ACT_BYTES * tokens * experts * width
    return one * experts + [Op("moe.experts_cat", "memory", "fwd", memory_time(ctx.dev, cat), bytes=cat)]


def _prob_scale_ops(ctx: Context, rows: int, ffn: int) -> list[Op]:
    """MLP.forward's ``per_token_scale`` on one expert's ``rows`` x ``ffn`` bf16 activation
    (megatron/core/transformer/mlp.py, the unfused branch): ``intermediate * probs.unsqueeze(-1)``
    with fp32 probabilities promotes to fp32 (read 2 + 4/ffn, write 4 bytes per element), then
    ``.to(bf16)`` (read 4, write 2): two kernels forward. Backward, by autograd's formulas: the cast's
    gradient to fp32 (r2 w4), the product's two gradients, grad x probs into fp32 and its cast to
    bf16 for the bf16 input (r4 w4, r4 w2), and grad x input summed over ``ffn`` for the
    probabilities (r4 r2 w4, then r4): five kernels, 34 bytes per element. One modelled op each way,
    as the routing ops count theirs (simulator/moe_dispatch.py)."""
    n = rows * ffn
    fwd, bwd = 12.0 * n + 4 * rows, 34.0 * n + 8 * rows
    name = EXPERT_LOOP_OP + "prob_scale"
    return [Op(name, "memory", "fwd", memory_time(ctx.dev, fwd, launches=2), bytes=fwd),
            Op(name, "memory", "bwd", memory_time(ctx.dev, bwd, launches=5), bytes=bwd)]


def backward_of(ctx: Context, fwd: list[Op]) -> list[Op]:
    """The backward ops of a forward op list, in reverse order."""
    out: list[Op] = []
    for op in reversed(fwd):
        if op.kind == "gemm":
            out += _gemm_bwd(ctx, op)
        elif op.kind == "attention":
            out.append(_attention(ctx, "bwd"))
        elif op.kind == "ssm":
            out.append(_ssd_scan(ctx, "bwd"))
        elif op.kind == "elementwise":
            kind, tokens, width, dtype = op.shape
            out.append(_elementwise(ctx, op.name, kind, tokens, width, "bwd", dtype))
        elif op.name == "attention.cp_ring":
            out += _cp_ring(ctx, "bwd")
        elif op.kind == "collective" and op.name not in moe_dispatch.FORWARD_ONLY:
            out.append(Op(op.name + ".bwd", op.kind, "bwd", op.time_s, bytes=op.bytes, shape=op.shape,
                          group=op.group, overlap_s=op.overlap_s))
    return out


# Forward ops each Megatron-Core selective-recompute module re-runs (plan.recompute_modules), by op
# name: "layernorm" recomputes input_layernorm and pre_mlp_layernorm where they are modules of their
# own (transformer_layer.py: not IdentityOp); Transformer Engine's layer specs fuse the norm into the
# following TELayerNormColumnParallelLinear (linear_qkv, a dense MLP's linear_fc1) and keep a TENorm
# before an MoE block (pre_mlp_layernorm) and before MLA's down-projections (input_layernorm), so
# the norms recomputed are "mlp.norm" of an MoE block and "attention.norm" of an MLA block.
# "moe_act": the routed experts' activation (moe/experts.py activation_recompute; not the shared
# expert's MLP). "mla_up_proj": multi_latent_attention.py qkv_up_proj_and_rope_apply under
# CheckpointWithoutOutput: linear_q_up_proj, linear_kv_up_proj and the RoPE application.
RECOMPUTE_MODULE_OPS = {"moe_act": ("moe.experts.act",),
                        "mla_up_proj": ("attention.q_up", "attention.kv_up", "attention.rope")}


def _module_recomputed(op: Op, mods: tuple[str, ...], moe_block: bool, mla: bool) -> bool:
    """Whether selective recompute of the Megatron-Core modules ``mods`` re-runs forward ``op``."""
    if op.kind == "attention":
        return "core_attn" in mods
    if "layernorm" in mods and (op.name == "mlp.norm" and moe_block or op.name == "attention.norm" and mla):
        return True
    return any(op.name in RECOMPUTE_MODULE_OPS.get(m, ()) for m in mods)


def recomputed(fwd: list[Op], plan: ParallelPlan) -> list[Op]:
    """Ops re-run before backward: all of the layer's forward (full), or under selective the
    forward ops of the recomputed modules (``plan.recompute_modules``, RECOMPUTE_MODULE_OPS; the
    attention core alone when none is named, Megatron-Core's default); the backward-phase ops a
    forward list carries (gradient copies) are not re-run. Module recompute costs the re-run
    forward only: under fp8/fp4 Transformer Engine re-quantizes the recomputed input for the
    weight gradient (set_save_original_input), not costed."""
    if plan.recompute == "full":
        keep = [op for op in fwd if op.phase == "fwd"]
    elif plan.recompute == "selective":
        mods = plan.recompute_modules or ("core_attn",)
        moe_block = any(op.name.startswith("moe.") for op in fwd)
        mla = any(op.name == "attention.kv_down" for op in fwd)
        keep = [op for op in fwd if op.phase == "fwd" and _module_recomputed(op, mods, moe_block, mla)]
    else:
        keep = []
    return [Op(op.name, op.kind, "recompute", op.time_s, op.flops, op.bytes, op.shape, op.group, op.overlap_s)
            for op in keep]


def layer_kind(moe: bool | str) -> str:
    """A layer kind (ModelSpec.layer_kind); True and False stand for ``moe`` and ``dense``."""
    return moe if isinstance(moe, str) else ("moe" if moe else "dense")


def layer_ops(ctx: Context, moe: bool | str, recompute: bool = True) -> list[Op]:
    """All ops of one layer for one micro-batch: forward, recompute, backward. ``moe`` is the
    layer kind (ModelSpec.layer_kind; True/False for a transformer's MoE/dense layer): a
    transformer layer is an attention block and an FFN block; a hybrid model's layer is one
    block (Mamba-2 mixer, attention, dense MLP or MoE)."""
    kind = layer_kind(moe)
    if ctx.model.hybrid:
        fwd = {"mamba": mamba_block_fwd, "attention": attention_block_fwd,
               "mlp": lambda c: mlp_block_fwd(c, False), "moe": lambda c: mlp_block_fwd(c, True)}[kind](ctx)
    else:
        fwd = attention_block_fwd(ctx) + mlp_block_fwd(ctx, kind == "moe")
    rec = recomputed(fwd, ctx.plan) if recompute else []
    return fwd + rec + backward_of(ctx, fwd) + main_grad_accumulation(ctx, "layer", _layer_local_params(ctx, kind),
                                                                      _layer_tensors(ctx, kind))


def _layer_tensors(ctx: Context, kind: str) -> int:
    """Parameter tensors of one layer (models.params.kind_param_tensors: one fused QKV weight; a
    gated MLP's three matrices already), with torchtitan's separate wq, wk, wv (Kernels.projections
    separate) counted one by one."""
    m = ctx.model
    n = kind_param_tensors(m, kind)
    if get_framework(ctx.plan.framework).kernels.projections == "separate" and m.mla is None and not m.hybrid:
        n += 2
    return n


def _layer_local_params(ctx: Context, moe: bool | str) -> float:
    """Parameters of one layer of this kind held by one device (TP-split matrices and Mamba
    mixer, replicated norms, router and latent projections, this rank's experts)."""
    m, p = ctx.model, ctx.plan
    lp = kind_params(m, layer_kind(moe))
    return ((lp.attention + lp.dense_mlp + lp.shared_experts + lp.mamba) / p.tp + lp.norms + lp.router + lp.latent
            + lp.expert * lp.num_experts / (p.ep * p.expert_tp))


def mamba_local_dims(ctx: Context) -> tuple[int, int]:
    """(heads, groups) of the Mamba-2 mixer on one tensor-parallel rank. Megatron-Core's
    MambaMixer splits both over tp (nheads_local_tp = nheads / tp, ngroups_local_tp = ngroups /
    tp) and requires ngroups % tp == 0."""
    s, tp = ctx.model.mamba, ctx.plan.tp
    if s.num_heads % tp or s.n_groups % tp:
        raise PlanError("tp", f"Megatron-Core's Mamba mixer splits its {s.num_heads} heads and {s.n_groups} "
                              f"B/C groups over tensor parallelism; tp={tp} divides "
                              + ("neither" if s.num_heads % tp and s.n_groups % tp else
                                 "not the heads" if s.num_heads % tp else "not the groups"))
    if ctx.plan.cp > 1:
        raise PlanError("cp", "context parallelism of Mamba-2 layers (its all-to-all between sequence and head "
                              "sharding) is not modelled")
    return s.num_heads // tp, s.n_groups // tp


def _ssd_scan(ctx: Context, phase: str) -> Op:
    """The SSD chunked scan of one Mamba-2 mixer on one device (simulator/ssm.py), with the gate
    z fused into it as Megatron-Core's training path runs it: ``use_mamba_mem_eff_path`` (default
    True) calls mamba_ssm's ``mamba_split_conv1d_scan_combined`` without ``rmsnorm_weight``, so
    ``_mamba_chunk_scan_combined_fwd(z=z)`` writes y·silu(z) and keeps the ungated y for backward,
    whose ``_chunk_scan_bwd_dz`` reads them again (ssm.ssd_cost ``gate``: bytes only)."""
    s, p = ctx.model.mamba, ctx.plan
    heads, groups = mamba_local_dims(ctx)
    bwd = phase == "bwd"
    cost = ssd_cost(ctx.tokens, heads, s.head_dim, groups, s.state_size, s.chunk_size, p.mbs, backward=bwd,
                    gate=True, sm_count=ctx.dev.accelerator.sm_count)
    return Op("mamba.ssd_scan", "ssm", phase, ssd_time(ctx.dev, cost, bwd), cost.flops, cost.bytes,
              shape=(p.mbs, heads, s.head_dim, groups, s.state_size, s.chunk_size))


def mamba_block_fwd(ctx: Context) -> list[Op]:
    """One Mamba-2 block as Megatron-Core's MambaLayer runs it in training (``MambaMixer._ssm_training``,
    the ``use_mamba_mem_eff_path`` default: mamba_ssm ``mamba_split_conv1d_scan_combined``): pre-norm,
    (SP all-gather), in_proj (column-parallel: z, x, B, C, dt for this rank's heads and groups), the
    sequence-major layout copies (:func:`mamba_layout_copies`), the depthwise causal conv1d with SiLU
    over x, B, C (:func:`mamba_conv1d_bytes`), the SSD scan with the gate fused into it
    (:func:`_ssd_scan`), the grouped RMSNorm of the gated output (``RMSNormGated`` called without z:
    read y, write 2 bytes per element; backward reads y and the gradient and writes the input
    gradient: 6 bytes), out_proj (row-parallel), TP reduce-scatter or all-reduce, residual add: the
    collectives of an attention block."""
    m, p = ctx.model, ctx.plan
    s = m.mamba
    T, h, tp = ctx.tokens, m.hidden, p.tp
    heads, groups = mamba_local_dims(ctx)
    d_local = heads * s.head_dim
    conv_local = d_local + 2 * groups * s.state_size
    in_width = 2 * d_local + 2 * groups * s.state_size + heads
    rd = _residual_dtype(ctx)
    ops = [_elementwise(ctx, "mamba.norm", m.norm, ctx.sp_tokens, h, "fwd", rd)]
    act = T * h * ACT_BYTES
    if p.sp:
        ops.append(ctx.comm("mamba.sp_all_gather", "all_gather", act / tp, "tp", "fwd"))
    ops.append(_gemm(ctx, "mamba.in_proj", T, in_width, h, "fwd"))
    ops += mamba_layout_copies(ctx, in_width, d_local)
    conv_f, conv_b = mamba_conv1d_bytes(T, conv_local)
    ops += [Op("mamba.conv1d", "memory", "fwd", memory_time(ctx.dev, conv_f), bytes=conv_f),
            Op("mamba.conv1d", "memory", "bwd", memory_time(ctx.dev, conv_b, launches=2), bytes=conv_b)]
    ops.append(_ssd_scan(ctx, "fwd"))
    norm_f, norm_b = 4.0 * T * d_local, 6.0 * T * d_local
    ops += [Op("mamba.out_norm", "memory", "fwd", memory_time(ctx.dev, norm_f), bytes=norm_f),
            Op("mamba.out_norm", "memory", "bwd", memory_time(ctx.dev, norm_b), bytes=norm_b)]
    out = _gemm(ctx, "mamba.out_proj", T, h, d_local, "fwd")
    ops.append(out)
    ops += _tp_reduce(ctx, "mamba", act, out.time_s)
    ops.append(_elementwise(ctx, "mamba.residual", "add", ctx.sp_tokens, h, "fwd", rd))
    return ops + _autocast_ops(ctx, "mamba", mamba_params(m) / tp)


def mamba_conv1d_bytes(tokens: int, channels: int) -> tuple[float, float]:
    """HBM bytes (forward, backward) of the causal conv1d + SiLU over x, B, C (``channels`` per
    token, bf16). Forward (causal-conv1d ``causal_conv1d_fwd``): read and write each element, 4
    bytes. Backward: ``MambaSplitConv1dScanCombinedFn.backward`` (mamba_ssm ssd_combined.py) saves
    zxbcdt, not the conv output, so it re-runs ``causal_conv1d_fwd`` (4 bytes) before the scan's
    backward, then ``causal_conv1d_bwd`` reads the input and the output gradient and writes the
    input gradient (6 bytes): 10 bytes per element in two kernels. (Before: 8 bytes, one kernel,
    without the recomputation.)"""
    return 4.0 * tokens * channels, 10.0 * tokens * channels


def mamba_layout_copies(ctx: Context, in_width: int, d_local: int) -> list[Op]:
    """The mixer's layout copies with more than one sequence per micro-batch. Megatron-Core works
    sequence-major (l, b, d); ``MambaMixer._ssm_training`` rearranges in_proj's output to batch-major
    for the kernel (``rearrange(zxBCdt, "l b d -> b l d").contiguous()``) and the scan's output back
    (``rearrange(y, "b l d -> l b d").contiguous()``): with b = mbs > 1 each is a copy (read and write
    2 bytes per element; with b = 1 both are views). In backward, the kernel's batch-major dzxBCdt
    reaches in_proj's backward as a permuted view, which Transformer Engine makes contiguous (one copy
    of the in_proj width); y's gradient is read through its strides by the scan's Triton kernels
    (stride 1 on the last dimension: no copy)."""
    if ctx.plan.mbs <= 1:
        return []
    T = ctx.tokens
    fwd = 4.0 * T * (in_width + d_local)
    bwd = 4.0 * T * in_width
    return [Op("mamba.layout_copies", "memory", "fwd", memory_time(ctx.dev, fwd, launches=2), bytes=fwd),
            Op("mamba.layout_copies", "memory", "bwd", memory_time(ctx.dev, bwd), bytes=bwd)]


def main_grad_accumulation(ctx: Context, block: str, params: float, tensors: int = 1) -> list[Op]:
    """Where the framework accumulates weight gradients with a separate kernel (Megatron DDP
    without gradient-accumulation fusion: ``param.main_grad.add_(param.grad)`` in each parameter's
    backward hook, megatron/core/distributed/distributed_data_parallel.py), one add per parameter
    tensor and micro-batch: read the fp32 main_grad (4), read the bf16 grad (2), write fp32 (4)
    bytes per parameter. A mixed-dtype add takes TensorIterator's unrolled casting path, not the
    vectorized one (``unrolled_elementwise_kernel<CUDAFunctor_add<float>>``): costed at the measured
    non-vectorized rate, :func:`simulator.compute.mixed_add_time`."""
    kind = get_framework(ctx.plan.framework).kernels.choices(ctx.plan.attention).grad_accumulation
    if kind == "autograd_fp32":
        return _autograd_accumulation(ctx, block, params, tensors)
    if kind != "unfused_fp32" or params <= 0:
        return []
    nbytes = 10.0 * params
    return [Op(f"{block}.main_grad_accumulate", "memory", "bwd", mixed_add_time(ctx.dev, params), bytes=nbytes)]


def _autograd_accumulation(ctx: Context, block: str, params: float, tensors: int) -> list[Op]:
    """fp32 parameters under autocast (recipe torch_amp): autograd's AccumulateGrad steals the
    first micro-batch's gradient and from the second on adds each new fp32 gradient into
    ``param.grad`` in place (torch/csrc/autograd/functions/accumulate_grad.h accumulateGrad, case
    2.3 ``variable_grad += new_grad``; under DDP's no_sync as on the synchronizing micro-batch): a
    vectorized fp32 add (r4 r4 w4 = 12 bytes per parameter, ``tensors`` kernels), on m − 1 of the
    step's m micro-batches, so (m − 1)/m of one per micro-batch. Other recipes: none here (FSDP2
    accumulates its reduced shards, simulator.engine)."""
    m = ctx.plan.microbatches()
    if ctx.plan.recipe != "torch_amp" or m <= 1 or params <= 0:
        return []
    t = memory_time(ctx.dev, 12.0 * params, launches=tensors, op="add") * (m - 1) / m
    return [Op(f"{block}.grad_accumulate", "memory", "bwd", t, bytes=12.0 * params * (m - 1) / m)]


def embedding_ops(ctx: Context) -> list[Op]:
    """Vocab-parallel token embedding: gather rows, reduce over tp; backward scatter-adds."""
    m, p = ctx.model, ctx.plan
    act = ctx.tokens * m.hidden * ACT_BYTES
    ops = [Op("embedding.lookup", "memory", "fwd", memory_time(ctx.dev, 2 * act), bytes=2 * act)]
    if p.tp > 1:
        kind = "reduce_scatter" if p.sp else "all_reduce"
        ops.append(ctx.comm(f"embedding.tp_{kind}", kind, act, "tp", "fwd"))
    table = m.vocab * m.hidden / p.tp * DTYPE_BYTES["fp32"] * 2     # zero-fill + accumulate the dense grad
    ops.append(Op("embedding.grad", "memory", "bwd", memory_time(ctx.dev, 3 * act + table, launches=2),
                  bytes=3 * act + table))
    positions = embedding_params(m) - m.vocab * m.hidden * (1 if m.tied_embeddings else 2)
    return ops + main_grad_accumulation(ctx, "embedding", m.vocab * m.hidden / p.tp + max(0, positions),
                                        1 + (1 if positions > 0 else 0))


def head_ops(ctx: Context) -> list[Op]:
    """Final norm, output-head GEMM (vocab split over tp), fp32 cross-entropy, and backward."""
    m, p = ctx.model, ctx.plan
    T, h, v_local = ctx.tokens, m.hidden, math.ceil(m.vocab / p.tp)
    fwd = [_elementwise(ctx, "head.norm", m.norm, ctx.sp_tokens, h, "fwd", _residual_dtype(ctx))]
    if p.sp:
        fwd.append(ctx.comm("head.sp_all_gather", "all_gather", T * h * ACT_BYTES / p.tp, "tp", "fwd"))
    fwd.append(_gemm(ctx, "head.logits", T, v_local, h, "fwd", dtype="bf16"))
    # fp32 cross-entropy as PyTorch runs it: upcast (r2 w4), log-softmax (2 reads of 4, w4);
    # backward: dense NLL gradient (w4), log-softmax backward (r4 r4 w4), downcast (r4 w2)
    loss_bytes, loss_bwd_bytes = T * v_local * 18, T * v_local * 22
    loss = Op("head.cross_entropy", "memory", "fwd", memory_time(ctx.dev, loss_bytes, launches=4), bytes=loss_bytes)
    fwd.append(loss)
    if p.tp > 1:
        fwd.append(ctx.comm("head.tp_loss_all_reduce", "all_reduce", 3 * T * 4, "tp", "fwd"))
    bwd = [Op("head.cross_entropy", "memory", "bwd", memory_time(ctx.dev, loss_bwd_bytes, launches=4),
              bytes=loss_bwd_bytes)]
    bwd += backward_of(ctx, [op for op in fwd if op.kind != "memory" and op.group != "tp"
                             or op.name == "head.sp_all_gather"])
    # the output head's weight (a tied one is accumulated into the embedding's) and the final norm
    head_params = (0 if m.tied_embeddings else m.vocab * m.hidden / p.tp) + norm_params(m)
    return fwd + bwd + main_grad_accumulation(ctx, "head", head_params, 1 if m.tied_embeddings else 2)


def mtp_context(ctx: Context) -> Context:
    """The context the MTP modules are lowered in: the plan's, or with bf16 GEMMs where the model
    keeps its MTP modules in bf16 (ModelSpec.mtp_bf16)."""
    if not ctx.model.mtp_bf16 or ctx.plan.precision == "bf16":
        return ctx
    return replace(ctx, plan=replace(ctx.plan, precision="bf16"))


def _mtp_projection(ctx: Context) -> list[Op]:
    """One MTP depth's input projection (Megatron-Core MultiTokenPredictionLayer._concat_embeddings)
    and its backward: RMSNorm of the shifted tokens' embedding (enorm) and of the previous depth's
    hidden state (hnorm), their concatenation (read 2 x h, write 2h values, bf16), (SP all-gather of
    the 2h-wide input), the column-parallel 2h -> h eh_proj, and the all-gather of its h/tp output
    slices over tp (gather_from_tensor_model_parallel_region: no communication in backward)."""
    m, p = ctx.model, ctx.plan
    T, h, tp, rd = ctx.tokens, m.hidden, p.tp, _residual_dtype(ctx)
    fwd = [_elementwise(ctx, "mtp.enorm", m.norm, ctx.sp_tokens, h, "fwd", rd),
           _elementwise(ctx, "mtp.hnorm", m.norm, ctx.sp_tokens, h, "fwd", rd)]
    cat = 2.0 * ctx.sp_tokens * 2 * h * ACT_BYTES
    fwd.append(Op("mtp.concat", "memory", "fwd", memory_time(ctx.dev, cat), bytes=cat))
    if p.sp:
        fwd.append(ctx.comm("mtp.sp_all_gather", "all_gather", T * 2 * h * ACT_BYTES / tp, "tp", "fwd"))
    fwd.append(_gemm(ctx, "mtp.eh_proj", T, math.ceil(h / tp), 2 * h, "fwd"))
    gather = []
    if tp > 1:
        gather.append(ctx.comm("mtp.tp_all_gather", "all_gather", T * h * ACT_BYTES / tp, "tp", "fwd"))
    return fwd + gather + backward_of(ctx, fwd)


def _shared(ops: list[Op]) -> list[Op]:
    """Ops of a module whose weights the MTP depth shares with the main model (embedding, output
    head): the same kernels, but no second main-grad accumulation (one hook per parameter)."""
    return [op for op in ops if not op.name.endswith("main_grad_accumulate")]


def mtp_ops(ctx: Context) -> list[Op]:
    """All ops of the model's multi-token-prediction depths for one micro-batch on the last
    pipeline stage (Megatron-Core multi_token_prediction.py; DeepSeek-V3 report Sec. 2.2). Depth k,
    for every token: the shared embedding of the tokens shifted by k (embedding_ops), the input
    projection (_mtp_projection), one layer of the module's kinds (layer_ops: DeepSeek-V3 MLA +
    MoE; a hybrid model's mtp_pattern blocks, Nemotron 3 '*E' attention + LatentMoE), and the
    final norm, the shared output head and cross-entropy (head_ops). A repeated module
    (``mtp_depths`` > ``mtp_layers``) costs its compute per depth and accumulates its weight
    gradients once. The loss scaling and label/mask shifts are scalar or per-token-id work, left out."""
    m = ctx.model
    mctx = mtp_context(ctx)
    emb, head = _shared(embedding_ops(ctx)), _shared(head_ops(ctx))
    ops: list[Op] = []
    for depth in range(m.mtp_forward_depths):
        module = min(depth, m.mtp_layers - 1)
        layers = [op for kind in mtp_layer_kinds(m, module) for op in layer_ops(mctx, kind)]
        proj = _mtp_projection(mctx)
        if depth < m.mtp_layers:
            proj += main_grad_accumulation(mctx, "mtp.proj", 2 * m.hidden * m.hidden / ctx.plan.tp
                                           + 3 * norm_params(m))
        else:
            layers = _shared(layers)
        ops += [replace(op, name=f"mtp{depth + 1}.{op.name}") for op in emb + proj + layers + head]
    return ops


def last_stage_ops(ctx: Context) -> list[Op]:
    """What the last pipeline stage runs after its decoder layers: the output head and loss, then
    the MTP depths (Megatron-Core places them on the last stage unless a pipeline layout says
    otherwise; Megatron-Bridge's DeepSeek-V3 layouts put them there too, 'mL')."""
    return head_ops(ctx) + mtp_ops(ctx)


def p2p_time(ctx: Context) -> float:
    """One pipeline send of a micro-batch's boundary activation to the next stage, seconds
    (what a send would cost; callers use it only when pp > 1)."""
    p = ctx.plan
    nbytes = ctx.sp_tokens * ctx.model.hidden * ACT_BYTES
    return collective_time(ctx.fabric, "send_recv", nbytes, 2, p.tp * p.cp * p.dp)
