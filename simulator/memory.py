"""Memory per device: model states under mixed precision and ZeRO, activations with
recompute, the in-flight micro-batches of the pipeline schedule, logits, and workspace.

Model states (Rajbhandari et al. 2020, ZeRO §3): with Ψ parameters on a device, K bytes of
optimizer state per parameter and N_d data-parallel shards, bytes/param are
  megatron  : 2 (bf16 weights) + 4 (fp32 main grads) + 12 (fp32 master, Adam m, v)
  zero      : 2 + 2 (bf16 grads) + 12                     -> the ZeRO paper's 16Ψ
  torch_amp : 4 (fp32 weights) + 4 (fp32 grads) + 8 (m, v), plus the bf16 copies autocast
              makes of every weight during forward and keeps for backward (2Ψ); under DDP
              (dp > 1) a second fp32 gradient copy in the communication buckets (4Ψ)
  torch_fsdp: 4 + 4 + 8, all sharded (FSDP2 full shard), plus the gathered bf16 parameters of
              the root module (embedding, head) and of two blocks (current + prefetch), and the
              larger of one block's unsharded bf16 + fp32 gradients (with the head's bf16
              gradient) and the root's, reduced last; with its gradient sync deferred to the
              last micro-batch (plan.fsdp_grad_sync), every unit's unsharded fp32 gradient
              (4 bytes per parameter, not sharded) instead of the shards (fsdp_deferred_peak)
ZeRO-3 under the zero recipe (DeepSpeed) gathers module by module instead of block by block: it
holds its live-parameter and prefetch budgets (1e9 + 5e7 parameters by default, at least the
largest matrix) and one module's gradients plus a 5e8-element reduce bucket.
ZeRO-1 divides the optimizer term by N_d, ZeRO-2 also the gradients, ZeRO-3 also the weights.
Offload (ZeRO-Offload / ZeRO-Infinity) moves the optimizer states (and, from ZeRO-2, the
gradient shards; with parameter offload, the weight shards) to host memory.

Activations per layer and micro-batch (Korthikanti et al. 2022, §4; their sbh(34 + 5as/h)
for GPT with dropout, unfused attention and no parallelism) are summed tensor by tensor from
what each op saves for backward, so GQA, SwiGLU, MoE, FlashAttention, SP, CP and TP fall out of
the same count. Full recompute keeps only each layer's input; selective drops the attention
core's s^2 tensors; the one layer being rebuilt for its backward is counted once. Pipeline stage i of p holds min(m, p - i) micro-batches under 1F1B, m under
GPipe, and 2(p-i-1) + (v-1)p + 1 model chunks under interleaved 1F1B (Narayanan et al. 2021).
torch.distributed.pipelining (torchtitan) adds its per-micro-batch receive buffers and the stage
outputs it keeps until backward (torch_pipeline_bytes).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from models.params import embedding_params, kind_params, largest_layer_matrix, mtp_layer_kinds, norm_params
from models.schema import ModelSpec
from simulator import moe_dispatch
from simulator.compute import FUSED_ATTENTION
from simulator.frameworks import get_framework
from simulator.identity_cache import IdentityCache
from simulator.lowering import Context, _attention_dims, layer_kind, mamba_local_dims, mtp_context

GIB = 1024 ** 3
WORKSPACE_BYTES = 1.0 * GIB     # cuBLAS/cuDNN workspaces + NCCL buffers (planning allowance)
FRAGMENTATION = 0.05            # caching-allocator fragmentation on top of live tensors
# The margin of a fit verdict: measured plan steps' peak allocated memory is predicted within ~5%
# (docs/validation.md, issue #11), and PyTorch's allocator reserves 1-9% over the allocated peak even
# with expandable segments (docs/measurements.md, "Set 14"). A plan whose fit-verdict bytes lie
# within this fraction of the capacity, on either side, is borderline: the verdict is the model's
# best estimate, not a promise (the planner keeps this much free by default).
MEMORY_MARGIN = 0.05
# Bytes per element of a linear layer's input saved for its wgrad GEMM (Transformer Engine keeps
# the quantized copy): fp8 1; nvfp4 only the column-wise NVFP4 copy (TE linear.py drops the
# row-wise one after fprop), 0.5 byte per value + one E4M3 scale per 16 values; else bf16.
GEMM_INPUT_SAVED_BYTES = {"fp8": 1.0, "nvfp4": 0.5 + 1.0 / 16}

# Peak bytes per logit of the loss: PyTorch's cross_entropy(logits.float()) keeps the fp32
# log-softmax, the NLL gradient and its own gradient (12, measured); Megatron's vocab-parallel
# cross-entropy works in place on one fp32 copy beside the bf16 logits (8).
LOSS_BYTES_PER_LOGIT = {"megatron": 8, "zero": 8, "torch_amp": 12, "torch_fsdp": 12}
# torch's loss_parallel (DTensor, vocabulary-sharded logits) decomposes the loss into eager ops
# (torch/distributed/tensor/parallel/loss.py): forward keeps the fp32 log-softmax (4); its fused
# NLL + log-softmax backward builds grad_input = zeros_like(x) (4), exp(x) (4) and their sum (4)
# before the product replaces them: 16 at the start of backward, against 12 measured for the
# fused cross-entropy counted the same way (the bf16 logits not counted in either). Read from the
# source, not fitted.
LOSS_PARALLEL_BYTES_PER_LOGIT = 16

STATE_BYTES = {  # (weights, gradients, optimizer) bytes per parameter
    "megatron": (2, 4, 12),
    "zero": (2, 2, 12),
    "torch_amp": (4, 4, 8),
    "torch_fsdp": (4, 4, 8),
}


def within_margin(total_bytes: float, capacity_bytes: float) -> bool:
    """Whether fit-verdict bytes ``total_bytes`` lie within MEMORY_MARGIN of ``capacity_bytes`` on
    either side: a borderline verdict."""
    return abs(capacity_bytes - total_bytes) <= MEMORY_MARGIN * capacity_bytes


def fits_in(total_bytes: float, capacity_bytes: float) -> bool:
    """meshcast's one "does it fit" verdict, used by simulate, the planner and validate alike: the
    fit-verdict bytes (live tensors x (1 + FRAGMENTATION) + WORKSPACE_BYTES, ``total_bytes``) within
    the device's capacity (the catalog's HBM, or the memory a measured GPU actually showed)."""
    return total_bytes <= capacity_bytes


@dataclass
class MemoryBreakdown:
    """Bytes on the fullest device, by kind; ``peak_allocated_bytes`` is live tensors at the
    peak, ``total_bytes`` adds workspace and fragmentation and is compared with capacity."""

    stage: int
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    logits_bytes: float
    workspace_bytes: float
    peak_allocated_bytes: float
    total_bytes: float
    capacity_bytes: float
    in_flight_microbatches: float

    @property
    def fits(self) -> bool:
        return fits_in(self.total_bytes, self.capacity_bytes)

    @property
    def headroom_bytes(self) -> float:
        return self.capacity_bytes - self.total_bytes

    @property
    def borderline(self) -> bool:
        """The verdict lies within MEMORY_MARGIN of the capacity (see within_margin)."""
        return within_margin(self.total_bytes, self.capacity_bytes)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["fits"] = self.fits
        d["headroom_bytes"] = self.headroom_bytes
        d["borderline"] = self.borderline
        return d


_KIND_PARAMS = IdentityCache()
_MOE_PREFIX = IdentityCache()
_KIND_PREFIX = IdentityCache()


def layer_kind_params(m: ModelSpec) -> dict:
    """LayerParams of each layer kind the model has (ModelSpec.layer_kind: dense and MoE layers,
    or a hybrid model's Mamba, attention, MLP and MoE blocks); cached by model identity
    (hashing a pydantic model costs more than this lookup)."""
    def build() -> dict:
        out: dict = {}
        for i in range(m.num_layers):
            kind = m.layer_kind(i)
            if kind not in out:
                out[kind] = kind_params(m, kind)
        return out
    return _KIND_PARAMS.get((m,), (), build)


def kinds_in(m: ModelSpec, start: int, stop: int) -> dict[str, int]:
    """How many of layers [start, stop) are of each kind (prefix sums cached per model); kinds
    with no layer in the range are left out."""
    def build() -> dict:
        kinds = sorted({m.layer_kind(i) for i in range(m.num_layers)})
        prefix = {k: [0] for k in kinds}
        for i in range(m.num_layers):
            kind = m.layer_kind(i)
            for k in kinds:
                prefix[k].append(prefix[k][-1] + (k == kind))
        return prefix
    prefix = _KIND_PREFIX.get((m,), (), build)
    counts = {k: v[stop] - v[start] for k, v in prefix.items()}
    return {k: n for k, n in counts.items() if n}


def moe_layers_in(m: ModelSpec, start: int, stop: int) -> int:
    """How many of layers [start, stop) are MoE layers (prefix sums cached per model)."""
    if m.moe is None:
        return 0
    def build() -> list:
        prefix = [0]
        for i in range(m.num_layers):
            prefix.append(prefix[-1] + m.is_moe_layer(i))
        return prefix
    prefix = _MOE_PREFIX.get((m,), (), build)
    return prefix[stop] - prefix[start]


def stage_params(ctx: Context, layers: range, first: bool, last: bool) -> tuple[float, float]:
    """(dense, expert) parameters held by one device of a stage owning ``layers``."""
    m, p = ctx.model, ctx.plan
    dense = expert = 0.0
    params = layer_kind_params(m)
    for kind, count in kinds_in(m, layers.start, layers.stop).items():
        d, e = _local_layer_params(ctx, params[kind])
        dense, expert = dense + count * d, expert + count * e
    emb = m.vocab * m.hidden / p.tp
    if last and m.mtp_layers:
        d, e = _mtp_local_params(ctx, first)
        dense, expert = dense + d, expert + e
    if first:   # token embedding (vocab-parallel) and learned positions (replicated)
        tables = m.vocab * m.hidden * (1 if m.tied_embeddings else 2)
        dense += emb + (embedding_params(m) - tables)
    if last:
        dense += emb + norm_params(m)     # output head (or the tied copy Megatron keeps on the last stage)
    if first and last and m.tied_embeddings:
        dense -= emb
    return dense, expert


def _local_layer_params(ctx: Context, lp) -> tuple[float, float]:
    """(dense, expert) parameters of one layer (LayerParams) on one device: TP-split matrices and
    Mamba mixer, replicated norms, router and latent projections, this rank's experts."""
    p = ctx.plan
    dense = (lp.attention + lp.dense_mlp + lp.shared_experts + lp.mamba) / p.tp + lp.norms + lp.router + lp.latent
    return dense, lp.expert * lp.num_experts / (p.ep * p.expert_tp)


def _mtp_local_params(ctx: Context, first: bool) -> tuple[float, float]:
    """(dense, expert) parameters of the MTP modules on one device of the last stage (the modules of
    models.params.mtp_params: each module's layer, its column-parallel 2h -> h projection and three
    norms), plus, where the last stage is not the first, the copy of the embedding table Megatron-Core
    builds there for the MTP input (gpt_model.py: an embedding wherever pre_process or mtp_process;
    kept equal to the first stage's like a tied output head)."""
    m, p = ctx.model, ctx.plan
    dense = expert = 0.0
    for module in range(m.mtp_layers):
        for kind in mtp_layer_kinds(m, module):
            d, e = _local_layer_params(ctx, kind_params(m, kind))
            dense, expert = dense + d, expert + e
        dense += 2 * m.hidden * m.hidden / p.tp + 3 * norm_params(m)
    if not first:
        dense += m.vocab * m.hidden / p.tp
    return dense, expert


def mtp_activation_bytes(ctx: Context) -> float:
    """Bytes the MTP depths save for backward for one micro-batch on one device of the last stage:
    per depth, the enorm and hnorm inputs (residual dtype), the eh_proj input (the 2h-wide
    concatenation, sequence-parallel shard, quantized as other GEMM inputs) and the activations of
    the module's layer (layer_activation_bytes of each kind, in the MTP modules' precision). Under
    full recompute (Megatron-Core checkpoints the whole MTP layer) only the two inputs are kept.
    The head's input is not counted, as for the main head; its logits are (stage_footprint)."""
    m, p = ctx.model, ctx.plan
    if not m.mtp_layers:
        return 0.0
    mctx = mtp_context(ctx)
    resid = 4 if p.recipe == "torch_amp" else 2
    inputs = 2 * resid * ctx.sp_tokens * m.hidden
    if p.recompute == "full":
        return m.mtp_forward_depths * inputs
    g_in = GEMM_INPUT_SAVED_BYTES.get(mctx.plan.precision, 2)
    total = 0.0
    for depth in range(m.mtp_forward_depths):
        kinds = mtp_layer_kinds(m, min(depth, m.mtp_layers - 1))
        total += inputs + g_in * ctx.sp_tokens * 2 * m.hidden + sum(layer_activation_bytes(mctx, k) for k in kinds)
    return total


def model_state_bytes(ctx: Context, dense: float, expert: float) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes on one device under the plan's recipe and ZeRO stage."""
    p = ctx.plan
    w, g, o = STATE_BYTES[p.recipe]
    if p.recipe == "torch_amp":
        w += 2  # autocast's bf16 weight copies, alive from forward to backward
    shard_dense = p.dp * p.cp
    shard_expert = max(1, p.dp * p.cp * p.tp // (p.ep * p.expert_tp))

    def sharded(per_param: float, stage_needed: int) -> float:
        if p.zero_stage >= stage_needed:
            return per_param * (dense / shard_dense + expert / shard_expert)
        return per_param * (dense + expert)

    weights = 0.0 if p.offload_params else sharded(w, 3)
    grads = 0.0 if p.offload_optimizer and p.zero_stage >= 2 else sharded(g, 2)   # streamed to the host
    opt = 0.0 if p.offload_optimizer else sharded(o, 1)
    if p.zero_stage == 3:
        weights, grads = _zero3_gathered(ctx, dense + expert, weights, grads)
    return weights, grads, opt


# DeepSpeed's ZeRO defaults (deepspeed/runtime/zero/config.py DeepSpeedZeroConfig, 0.19:
# stage3_max_live_parameters 1e9, stage3_prefetch_bucket_size 5e7, reduce_bucket_size 5e8):
# parameters kept gathered before release, prefetched ahead, and the gradient reduce bucket (elements)
DS_MAX_LIVE_PARAMS = 1e9
DS_PREFETCH_PARAMS = 5e7
DS_REDUCE_BUCKET = 5e8


def _zero3_gathered(ctx: Context, params: float, weights: float, grads: float) -> tuple[float, float]:
    """Add what ZeRO-3 holds unsharded. Block by block: two blocks of bf16 weights (current +
    prefetch) and one block's bf16 + fp32 gradients. DeepSpeed (recipe ``zero``) gathers module
    by module: it keeps at most its live-parameter and prefetch budgets gathered (never less than
    the largest matrix), and holds one module's bf16 gradients plus one reduce bucket. FSDP2's
    (``torch_fsdp``) depend on the moment of the step: fsdp_transients and fsdp_peak."""
    m, p = ctx.model, ctx.plan
    if p.recipe == "torch_fsdp":
        return weights, grads            # shards only: the rest is in fsdp_transients
    root, block = _root_and_block(m, params)
    if p.recipe == "zero":
        big = largest_layer_matrix(m, m.num_layers - 1) / p.tp
        weights += 2 * max(big, min(2 * block, DS_MAX_LIVE_PARAMS + DS_PREFETCH_PARAMS))
        grads += 2 * (big + min(block, DS_REDUCE_BUCKET))
        return weights, grads
    return weights + 2 * 2 * block, grads + (2 + 4) * block


def _root_and_block(m: ModelSpec, params: float) -> tuple[float, float]:
    """Parameters of the root module (embedding, untied head, final norm) and of one block, for
    a device holding ``params`` (ZeRO-3 gathers them separately)."""
    root = m.vocab * m.hidden * (1 if m.tied_embeddings else 2) + norm_params(m)
    return root, max(0.0, params - root) / max(1, m.num_layers)


@dataclass(frozen=True)
class FsdpTransients:
    """What FSDP2 holds beyond its shards at the moments its memory peaks, bytes on one device."""

    block_weights: float    # two blocks' gathered bf16 weights (current + prefetch)
    root_weights: float     # the root module's gathered bf16 weights (embedding, head, final norm)
    block_grads: float      # one block's unsharded bf16 + fp32 gradients, and the head's bf16 one
    root_grads: float       # the root's unsharded bf16 + fp32 gradients, reduced last
    root_grad_shard: float  # the root's fp32 gradient shard (exists only after that reduction)
    optimizer_temp: float   # foreach AdamW: one fp32 temporary the size of the shard (sqrt of v)
    # a deferred gradient sync (fsdp_grad_sync last_microbatch; fsdp_deferred_peak):
    unsharded_grads: float = 0.0     # every parameter's unsharded fp32 accumulated gradient
    block_reduce_input: float = 0.0  # one block's fp32 reduce-scatter input (beside its accumulator)
    root_reduce_input: float = 0.0   # the root's fp32 reduce-scatter input (beside its accumulator)
    head_grad: float = 0.0           # the output head's bf16 gradient, held until the root reduces


def fsdp_transients(ctx: Context, params: float) -> FsdpTransients:
    """FSDP2's gathered weights, unsharded gradients and optimizer temporary for ``params``
    parameters on one device (torch.distributed.fsdp.fully_shard per block and on the root).
    Gradients are unsharded in bf16 (MixedPrecisionPolicy param_dtype) and reduced in fp32
    (reduce_dtype): 2 + 4 bytes per parameter of the unit being reduced; a deferred sync keeps
    4 bytes per parameter of every unit (fsdp_deferred_peak)."""
    m, p = ctx.model, ctx.plan
    n = p.dp * p.cp
    root, block = _root_and_block(m, params)
    head = 2 * m.vocab * m.hidden
    return FsdpTransients(2 * 2 * block, 2 * root, (2 + 4) * block + head, (2 + 4) * root,
                          4 * root / n, 4 * params / n, 4 * params, 4 * block, 4 * root, head)


def fsdp_peak(weights: float, grads: float, opt: float, activations: float, f: FsdpTransients,
              accumulated: float = 0.0) -> float:
    """FSDP2's peak live bytes: the largest of four moments of a step. ``weights`` and ``grads``
    are the fp32 shards; gradients are set to None between steps. ``accumulated``: gradient bytes
    already held when a later micro-batch's backward starts (fsdp_accumulated_bytes).
      start of backward   every activation, gathered weights, one block's unsharded gradients
                          (and the gradients accumulated by earlier micro-batches)
      last block          gathered weights, every block's gradient shard, one block's gradients
      end of backward     blocks resharded; the root's unsharded gradients being reduced
      optimizer step      shards, optimizer states and foreach AdamW's temporary"""
    gathered = f.block_weights + f.root_weights
    block_shards = grads - f.root_grad_shard
    return weights + opt + max(gathered + activations + f.block_grads + accumulated,
                               gathered + block_shards + f.block_grads,
                               f.root_weights + block_shards + f.root_grads,
                               grads + f.optimizer_temp)


def fsdp_accumulated_bytes(p, grads: float) -> float:
    """Gradient bytes FSDP2 holds through a later micro-batch's forward and backward when it
    reduces after every micro-batch: every earlier micro-batch's reduced gradient is accumulated
    into the parameter's fp32 sharded ``.grad`` (torch 2.11-2.13
    torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py foreach_reduce: the new shard is
    added to ``sharded_param.grad`` where one exists), so all ``grads`` (the fp32 shards) are
    live from the second micro-batch on, as DDP's gradients are (peak_live_bytes). A deferred
    sync holds unsharded gradients instead: fsdp_deferred_peak."""
    return grads if p.microbatches() > 1 else 0.0


def fsdp_deferred_peak(weights: float, grads: float, opt: float, activations: float, f: FsdpTransients) -> float:
    """FSDP2's peak live bytes with its gradient sync deferred to the last of several micro-batches
    (FSDPModule.set_requires_gradient_sync(False) before the others; torch 2.11-2.13
    torch/distributed/fsdp/_fully_shard/). With ``reduce_grads`` off, FSDPParamGroup.post_backward
    (_fsdp_param_group.py) reshards the parameters and calls FSDPParam.to_accumulated_grad_if_needed
    (_fsdp_param.py), which replaces the first micro-batch's bf16 unsharded gradient by its cast to
    ``reduce_dtype`` (fp32) in ``unsharded_accumulated_grad``; later micro-batches' bf16 gradients are
    added into it in place and freed (accumulate_unsharded_grad_if_needed). No sharded ``.grad``
    exists until the last micro-batch, whose post_backward hands each unit's accumulated fp32
    gradient to foreach_reduce (_fsdp_collectives.py: copied into an fp32 reduce-scatter input, the
    accumulator then dropped) and creates the fp32 shards. So 4 bytes per parameter of every unit,
    unsharded (``f.unsharded_grads``), live from the second micro-batch's forward to the last one's
    reductions. The largest of three moments:
      start of a later backward  every activation, gathered weights, all accumulators, one block's
                                 fp32 reduce-scatter input (the last micro-batch's first reduction)
                                 and the head's bf16 gradient (added to the root's accumulator only
                                 when the root's post_backward runs, at the end of backward)
      end of the last backward   blocks resharded and reduced (their shards); the root's accumulator
                                 and its reduce-scatter input
      optimizer step             shards, optimizer states and foreach AdamW's temporary
    (The last block's reduction holds less than the first: the blocks after it are shards by then.)"""
    gathered = f.block_weights + f.root_weights
    block_shards = grads - f.root_grad_shard
    return weights + opt + max(gathered + activations + f.unsharded_grads + f.block_reduce_input + f.head_grad,
                               f.root_weights + block_shards + 2 * f.root_reduce_input,
                               grads + f.optimizer_temp)


def layer_activation_bytes(ctx: Context, moe: bool | str) -> float:
    """Bytes one layer of a kind (True/False: a transformer's MoE/dense layer; a hybrid model's
    ``mamba``, ``attention``, ``mlp`` or ``moe`` block) saves for backward for one micro-batch on
    one device (no recompute)."""
    kind = layer_kind(moe)
    if ctx.model.hybrid:
        if kind == "mamba":
            return _mamba_activation_bytes(ctx)
        if kind == "attention":
            return _attention_activation_bytes(ctx)
        return _ffn_activation_bytes(ctx, kind == "moe")
    return _attention_activation_bytes(ctx) + _ffn_activation_bytes(ctx, kind == "moe")


def _mamba_activation_bytes(ctx: Context) -> float:
    """What a Megatron-Core Mamba-2 block saves for backward: its norm input (the residual), the
    in_proj input (sequence-parallel shard, as for QKV), in_proj's output z, x, B, C, dt (the
    conv's input and the gate), the conv output x, B, C (the scan's inputs), the scan output y
    (mamba_chunk_scan_combined saves x, dt, B, C, y and recomputes its chunk states), and the
    out_proj input (the gated norm's output; fp8 under Transformer Engine)."""
    m, p = ctx.model, ctx.plan
    s = m.mamba
    T, Tsp, h = ctx.tokens, ctx.sp_tokens, m.hidden
    heads, groups = mamba_local_dims(ctx)
    d = heads * s.head_dim
    bc = 2 * groups * s.state_size
    resid = 4 if p.recipe == "torch_amp" else 2
    g_in = GEMM_INPUT_SAVED_BYTES.get(p.precision, 2)        # GEMM inputs are saved quantized (TE)
    return (resid * Tsp * h + g_in * Tsp * h + 2 * T * (2 * d + bc + heads) + 2 * T * (d + bc) + 2 * T * d
            + g_in * T * d)


def _saved_kv_heads(p, heads: int, kv: int) -> int:
    """K/V heads whose tensors an attention block saves for backward. Megatron-Core's local
    DotProductAttention (meshcast's ``unfused`` / ``unfused_torch``) repeats K and V to every
    query head (repeat_interleave) before its baddbmm and bmm, which save the repeated copies;
    under selective recompute that happens inside the recomputed core, so the group-sized K/V
    are kept (megatron/core/transformer/dot_product_attention.py)."""
    if p.attention in ("unfused", "unfused_torch") and not p.recomputes_core_attn:
        return heads
    return kv


def _attention_activation_bytes(ctx: Context) -> float:
    """What an attention block saves for backward (Korthikanti et al. 2022's attention terms)."""
    m, p = ctx.model, ctx.plan
    T, Tsp, h, tp = ctx.tokens, ctx.sp_tokens, m.hidden, p.tp
    resid = 4 if p.recipe == "torch_amp" else 2     # autocast keeps the residual stream in fp32
    heads = m.num_heads // tp
    kv = max(1, m.kv_heads // tp) if m.mla is None else heads
    qk, vd = _attention_dims(m)
    drop = 1 if p.dropout else 0
    g_in = GEMM_INPUT_SAVED_BYTES.get(p.precision, 2)        # GEMM inputs are saved quantized (TE)
    attn = resid * Tsp * h + g_in * _tp_input_tokens(ctx) * h     # norm input, QKV-GEMM input
    attn += 2 * T * (heads * qk + _saved_kv_heads(p, heads, kv) * (qk + vd))   # Q, K, V
    attn += 2 * T * heads * vd                                # attention output = out-proj input
    if p.attention in FUSED_ATTENTION:                        # FlashAttention-style kernels
        attn += 4 * p.mbs * heads * (p.seq // p.cp)           # log-sum-exp
    elif not p.recomputes_core_attn and p.attention == "unfused_torch":
        # softmax output kept in fp32 for its backward, its bf16 copy for the PV GEMM (+dropout)
        attn += (UNFUSED_TORCH_SAVED + 3 * drop) * p.mbs * heads * (p.seq // p.cp) * p.seq
    elif not p.recomputes_core_attn:
        attn += (2 + 3 * drop) * p.mbs * heads * (p.seq // p.cp) * p.seq   # scores, softmax (+dropout)
    attn += drop * Tsp * h
    return attn + _separate_projection_bytes(ctx, 2)


def _ffn_activation_bytes(ctx: Context, moe: bool) -> float:
    """What an FFN block (dense MLP or MoE) saves for backward."""
    m, p = ctx.model, ctx.plan
    T, Tsp, h, tp = ctx.tokens, ctx.sp_tokens, m.hidden, p.tp
    resid = 4 if p.recipe == "torch_amp" else 2
    drop = 1 if p.dropout else 0
    g_in = GEMM_INPUT_SAVED_BYTES.get(p.precision, 2)
    mlp = resid * Tsp * h + drop * Tsp * h
    if moe:
        mlp += _moe_activation_bytes(ctx)
    else:
        f = m.ffn_hidden // tp
        mlp += g_in * _tp_input_tokens(ctx) * h + 2 * T * f * (2 if m.gated_mlp else 1) + g_in * T * f
        if m.gated_mlp:
            mlp += _separate_projection_bytes(ctx, 1) + _eager_swiglu_bytes(ctx, f)
    return mlp


def loss_bytes_per_logit(p) -> float:
    """Peak bytes per logit of the loss (LOSS_BYTES_PER_LOGIT by recipe; torch's loss_parallel
    under tp where the framework runs it: LOSS_PARALLEL_BYTES_PER_LOGIT)."""
    if p.tp > 1 and get_framework(p.framework).kernels.tp_loss == "dtensor_loss_parallel":
        return LOSS_PARALLEL_BYTES_PER_LOGIT
    return LOSS_BYTES_PER_LOGIT[p.recipe]


def _tp_input_tokens(ctx: Context) -> int:
    """Tokens of a column-parallel linear's saved input on one device: the sequence shard under
    Megatron-style sequence parallelism (and without tp, where the shard is the whole sequence),
    the whole all-gathered sequence where the framework's sequence parallelism saves the gathered
    tensor (Kernels.sequence_parallel_saves: DTensor's PrepareModuleInput, torchtitan)."""
    p = ctx.plan
    if p.sequence_parallel and p.tp > 1 and get_framework(p.framework).kernels.sequence_parallel_saves == "gathered":
        return ctx.tokens
    return ctx.sp_tokens


def _separates(ctx: Context) -> bool:
    """Whether the framework's model code has separate projection modules (Kernels.projections)."""
    return get_framework(ctx.plan.framework).kernels.projections == "separate"


def _separate_projection_bytes(ctx: Context, extra: int) -> float:
    """Bytes beyond one saved GEMM input where ``extra`` more linears read the same norm output
    under autocast (recipe torch_amp) in a model with separate projections (wq, wk, wv: 2 extra;
    w1, w3: 1). The norm output is fp32 there (fp32 input and weight), and autocast caches only its
    casts of leaf tensors (the weights: torch/amp/autocast_mode.py, the cache of casts of leaf
    tensors that require grad), so each linear casts the activation to bf16 itself and saves its
    own copy for the weight gradient. Under FSDP2's bf16 parameters the norm output is already
    bf16 and shared (no extra copy). Counted on the sequence-parallel shard like the first copy."""
    p = ctx.plan
    if p.recipe != "torch_amp" or not _separates(ctx):
        return 0.0
    return extra * GEMM_INPUT_SAVED_BYTES.get(p.precision, 2) * _tp_input_tokens(ctx) * ctx.model.hidden


def _eager_swiglu_bytes(ctx: Context, f: int) -> float:
    """What an eager (unfused) SwiGLU saves beyond the fc1 output and the fc2 input, bytes. The
    product saves both operands for its backward (torch's derivative of mul needs each factor for
    the other's gradient, tools/autograd/derivatives.yaml) and silu saves its input:

    * separate projections, F.silu(w1(x)) * w3(x) (torchtitan): silu's bf16 output (2 B per
      element), w1's and w3's outputs being the inputs already counted;
    * Megatron-Core's MLP without bias_activation_fusion (``elementwise: unfused``: its local spec;
      megatron/core/transformer/mlp.py ``glu``, 0.19.2): ``silu(x_glu) * (x_linear +
      glu_linear_offset)`` on chunks of the fused fc1 output, so silu's output and the sum (a new
      tensor even at the default offset 0.0) are saved: 4 B per element.

    A fused SwiGLU (Transformer Engine, apex, Megatron's bias_swiglu_impl) keeps only fc1's output.
    ``f``: the local FFN width."""
    if _separates(ctx):
        return 2 * ctx.tokens * f
    if get_framework(ctx.plan.framework).kernels.elementwise == "unfused" and ctx.plan.recipe == "megatron":
        return 4 * ctx.tokens * f
    return 0.0


def _moe_activation_bytes(ctx: Context) -> float:
    m, p = ctx.model, ctx.plan
    e = m.moe
    T, h = ctx.tokens, m.hidden
    # rows the device's experts take: its sequence-parallel shard's times etp (moe_dispatch.dispatched_tokens)
    routed = moe_dispatch.dispatched_tokens(ctx) * e.top_k * (e.capacity_factor or 1.0)
    f = e.expert_ffn_hidden // p.expert_tp
    width = e.latent_size or h                                              # LatentMoE: latent tokens
    act = 2 * T * h + 4 * T * e.num_experts                                 # router input, probs
    if e.latent_size:
        L = moe_dispatch.local_tokens(ctx)                                  # on the rank's shard
        act += 2 * L * h + 2 * L * width                                    # latent down input, up input
    act += 2 * routed * width * 2                                           # dispatched in, expert out
    act += 2 * routed * f * (2 if m.gated_mlp else 1) + 2 * routed * f
    if e.shared_experts:
        fs = (e.shared_expert_ffn_hidden or e.expert_ffn_hidden) * e.shared_experts // p.tp
        act += 2 * T * fs * (2 if m.gated_mlp else 1) + 2 * T * fs
    return act


def in_flight(schedule: str, pp: int, vp: int, m: int, stage: int) -> float:
    """Micro-batches whose activations a stage holds at its peak, in whole-stage units."""
    if pp == 1:
        return 1.0
    if schedule == "gpipe":
        return float(m)
    if schedule == "interleaved":
        chunks = min(m * vp, 2 * (pp - stage - 1) + (vp - 1) * pp + 1)
        return chunks / vp
    return float(min(m, pp - stage))


@dataclass(frozen=True)
class StageFootprint:
    """What a stage holds independent of how many micro-batches are in flight."""

    params: float            # parameters on one device (dense + expert)
    weights: float
    grads: float
    opt: float
    per_microbatch: float    # activation bytes of one micro-batch in flight
    logits: float
    rebuild: float = 0.0     # full recompute: one layer's activations rebuilt at a time (once)
    fsdp: "FsdpTransients | None" = None   # FSDP2: gathered weights, unsharded gradients, temporaries
    transient: float = 0.0   # working bytes of one layer's attention core at its peak (once)
    optimizer_temp: float = 0.0   # the optimizer step's temporaries (activations freed by then)
    pipe_boundary: float = 0.0    # torch.distributed.pipelining: bytes of one stage-boundary tensor
    pipe_nonfirst: int = 0        # ... chunks on this device that receive activations
    pipe_nonlast: int = 0         # ... chunks on this device that send activations


def torch_pipeline_fields(ctx: Context, first: bool, last: bool) -> dict:
    """StageFootprint's pipe_* fields where the framework pipelines with torch.distributed.pipelining
    (torchtitan): one boundary tensor is a micro-batch's residual stream (fp32 under autocast), and
    of the device's vp chunks all but the first stage's receive activations and all but the last
    stage's send them."""
    m, p = ctx.model, ctx.plan
    if p.pp == 1 or p.framework != "torchtitan":
        return {}
    resid = 4 if p.recipe == "torch_amp" else 2
    return dict(pipe_boundary=ctx.sp_tokens * m.hidden * resid, pipe_nonfirst=p.vp - (1 if first else 0),
                pipe_nonlast=p.vp - (1 if last else 0))


def torch_pipeline_bytes(p, fp: StageFootprint, flight: float) -> float:
    """What torch.distributed.pipelining holds beyond the layers' saved activations
    (torch/distributed/pipelining/stage.py, torch 2.11-2.13): at its first step a stage allocates one
    activation receive buffer per micro-batch (_setup_forward_recv_info: args_recv_info[chunk_id] for
    every chunk_id) and one gradient receive buffer per micro-batch (_setup_backward_recv_info:
    grad_recv_info[mb_index]), kept across steps; and it keeps each in-flight micro-batch's stage
    output until that micro-batch's backward (fwd_cache), where Megatron-Core frees the output's
    data (deallocate_pipeline_outputs). An in-flight micro-batch's receive buffer is its first
    layer's saved input, already counted, so receiving chunks add m - flight buffers, sending
    chunks m gradient buffers + flight outputs (flight per chunk taken as the device's, in
    whole-stage units)."""
    if not fp.pipe_boundary:
        return 0.0
    m = p.microbatches()
    n = fp.pipe_nonfirst * max(0.0, m - flight) + fp.pipe_nonlast * (m + flight)
    return n * fp.pipe_boundary


def layer_activations_by_kind(ctx: Context) -> dict[str, float]:
    """layer_activation_bytes of every layer kind the model has."""
    return {k: layer_activation_bytes(ctx, k) for k in layer_kind_params(ctx.model)}


def stage_footprint(ctx: Context, layers: range, first: bool, last: bool,
                    per_layer: dict[str, float] | None = None) -> StageFootprint:
    """Model states, activations per in-flight micro-batch and logits of one stage's device.
    ``per_layer``: the activation bytes of each layer kind (layer_activations_by_kind)."""
    m, p = ctx.model, ctx.plan
    dense, expert = stage_params(ctx, layers, first, last)
    weights, grads, opt = model_state_bytes(ctx, dense, expert)
    counts = kinds_in(m, layers.start, layers.stop)
    if per_layer is None:
        per_layer = layer_activations_by_kind(ctx)
    stored = sum(n * per_layer[k] for k, n in counts.items())
    rebuild = 0.0
    if p.recompute == "full":
        full = len(layers) if p.recompute_layers is None else min(p.recompute_layers, len(layers))
        kept = stored * (len(layers) - full) / len(layers)
        stored = kept + full * 2 * ctx.sp_tokens * m.hidden     # recomputed layers keep their input
        rebuild = max(per_layer.values())   # the one layer being rebuilt for its backward, whatever is in flight
    if first:
        stored += 2 * ctx.sp_tokens * m.hidden
    transient = attention_transient_bytes(ctx)
    if p.recomputes_core_attn and p.attention == "unfused_torch":
        rebuild = max(rebuild, UNFUSED_TORCH_SAVED * score_elements(ctx))   # the core rebuilt for its backward
    if last:
        stored += mtp_activation_bytes(ctx)
    # the main head's logits, and as many again for each MTP depth (each keeps its loss's buffer
    # until backward: multi_token_prediction.py process_mtp_loss runs the shared head per depth)
    heads = 1 + m.mtp_forward_depths
    logits = heads * ctx.tokens * math.ceil(m.vocab / p.tp) * loss_bytes_per_logit(p) if last else 0.0
    fsdp = fsdp_transients(ctx, dense + expert) if p.recipe == "torch_fsdp" else None
    temp = get_framework(p.framework).kernels.optimizer_temp_bytes * (dense + expert) / _optimizer_shards(p)
    return StageFootprint(dense + expert, weights, grads, opt, stored, logits, rebuild, fsdp, transient, temp,
                          **torch_pipeline_fields(ctx, first, last))


# Megatron-Core's local DotProductAttention without apex (FusedScaleMaskSoftmax.forward_torch_softmax),
# bytes per score element (E = micro-batch x local heads x sq x sk): saved for backward, the fp32
# softmax output (4) and its bf16 copy for the PV GEMM (2); working set at the layer's peak, the
# backward of the softmax, which holds the incoming fp32 gradient and its fp32 result (8); and the
# bf16 score buffer of the global memory buffer that the QK^T baddbmm is handed (2, allocated once
# and kept: parallel_state.get_global_memory_buffer).
UNFUSED_TORCH_SAVED = 6
UNFUSED_TORCH_TRANSIENT = 8
UNFUSED_TORCH_BUFFER = 2


def score_elements(ctx: Context) -> float:
    """Elements of one layer's attention score matrix on one device for one micro-batch."""
    p = ctx.plan
    return p.mbs * (ctx.model.num_heads // p.tp) * (p.seq // p.cp) * p.seq


def attention_transient_bytes(ctx: Context) -> float:
    """Bytes beyond the saved activations that the attention core of one layer holds at its peak,
    counted once per device: the materialised-score backends' fp32 softmax working set (and
    Megatron's persistent score buffer); zero for fused kernels, whose working set is on-chip."""
    if ctx.plan.attention != "unfused_torch":
        return 0.0
    return (UNFUSED_TORCH_TRANSIENT + UNFUSED_TORCH_BUFFER) * score_elements(ctx)


def _optimizer_shards(p) -> int:
    """Ways the optimizer's parameters are split over data-parallel ranks."""
    return p.dp * p.cp if p.zero_stage >= 1 else 1


def stage_memory(ctx: Context, stage: int, layers: range, first: bool, last: bool,
                 capacity: float, per_layer: dict[str, float] | None = None,
                 footprint: StageFootprint | None = None) -> MemoryBreakdown:
    """Memory of one device of pipeline stage ``stage`` owning ``layers`` at its peak."""
    p = ctx.plan
    fp = footprint or stage_footprint(ctx, layers, first, last, per_layer)
    flight = in_flight(p.pipeline_schedule, p.pp, p.vp, p.microbatches(), stage)
    activations, grads, live = peak_live_bytes(p, fp, flight)
    workspace = process_bytes(p)
    total = live * (1 + FRAGMENTATION) + workspace
    return MemoryBreakdown(stage, fp.weights, grads, fp.opt, activations, fp.logits, workspace, live, total,
                           capacity, flight)


def process_bytes(p) -> float:
    """Device bytes outside the live tensors that the fit verdict adds once per device: the plan's
    framework's measured non-allocator memory (``process_memory_bytes``: CUDA context, library
    handles, communicator buffers), else the planning allowance ``WORKSPACE_BYTES``."""
    measured = get_framework(p.framework).process_memory_bytes
    return WORKSPACE_BYTES if measured is None else measured


def peak_live_bytes(p, fp: StageFootprint, flight: float) -> tuple[float, float, float]:
    """(activations, gradients, live tensors) at a stage's peak with ``flight`` micro-batches held."""
    weights, grads, opt, logits = fp.weights, fp.grads, fp.opt, fp.logits
    activations = fp.per_microbatch * flight + fp.rebuild + fp.transient + torch_pipeline_bytes(p, fp, flight)
    if p.recipe == "torch_amp":
        # zero_grad(set_to_none=True): gradients are allocated during backward as activations
        # (and autocast's weight copies) are freed, so the peak is the larger of the two ends;
        # with gradient accumulation the first micro-batch's gradients stay allocated through
        # every later forward, so from the second micro-batch on they add to its activations;
        # DDP's gradient buckets (a second fp32 copy, gradient_as_bucket_view=False) persist
        buckets = 4 * fp.params if p.dp > 1 and p.zero_stage == 0 else 0.0
        accumulated = grads if p.microbatches() > 1 else 0.0
        live = weights + opt + buckets + max(activations + logits + accumulated, grads - 2 * fp.params)
        grads += buckets
    elif p.recipe == "torch_fsdp" and p.fsdp_defers_sync and p.microbatches() > 1:
        f = fp.fsdp
        live = fsdp_deferred_peak(weights, grads, opt, activations + logits, f)
        weights += f.block_weights + f.root_weights
        grads = f.unsharded_grads + f.block_reduce_input + f.head_grad     # at the start of a later backward
    elif p.recipe == "torch_fsdp":
        f = fp.fsdp
        live = fsdp_peak(weights, grads, opt, activations + logits, f, fsdp_accumulated_bytes(p, grads))
        weights += f.block_weights + f.root_weights
        grads += max(f.block_grads, f.root_grads)
    else:
        # the optimizer's temporaries exist after backward, when activations and logits are freed
        live = weights + grads + opt + max(activations + logits, fp.optimizer_temp)
    return activations, grads, live


def stage_total_bytes(p, fp: StageFootprint, stage: int) -> float:
    """The fit-verdict bytes of one stage (live x fragmentation + workspace), without building a
    MemoryBreakdown: the planner's batch path."""
    flight = in_flight(p.pipeline_schedule, p.pp, p.vp, p.microbatches(), stage)
    return peak_live_bytes(p, fp, flight)[2] * (1 + FRAGMENTATION) + process_bytes(p)
