"""MoE token routing as Megatron-Core runs it (issue #12): the router's memory-bound work after its
GEMM, the token permutations around the expert-parallel all-to-alls, and the host synchronisation
that gives the host the per-expert token counts.

Megatron-Core sources, read at d98e8a64 (Megatron-LM main, 2026-08) and at the submodule commits the
Megatron-Bridge releases pin (v0.5.0: d0b3b775):

- megatron/core/transformer/moe/router.py ``TopKRouter.routing``: the score function (softmax or
  sigmoid), top-k, probability scatter and the auxiliary (load-balancing) loss, eager
  (moe_utils.topk_routing_with_score_function, compute_routing_scores_for_aux_loss) or with
  ``moe_router_fusion`` Transformer Engine's fused_topk_with_score_function,
  fused_compute_score_for_moe_aux_loss and fused_moe_aux_loss;
- megatron/core/transformer/moe/token_dispatcher.py ``MoEAlltoAllTokenDispatcher``: preprocess
  (tokens per expert, their all-gather over the tp x ep group, the device-to-host copy and the
  stream synchronisation at ``cuda_sync_point``), ``permute`` before the all-to-all,
  ``sort_chunks_by_idxs`` by local expert after it and back before the combine, ``unpermute`` (the
  probability-weighted scatter-add) after it; ``moe_permute_fusion`` runs Transformer Engine's
  moe_permute_with_probs / moe_unpermute / moe_sort_chunks_by_index_with_probs instead;
- the same file's ``MoEFlexTokenDispatcher`` with ``_HybridEPManager`` (``moe_flex_dispatcher_backend
  hybridep``, the Megatron-Bridge performance recipes' dispatcher): permutation fused into the
  dispatch and combine kernels, a metadata preprocessing step, and a host synchronisation in
  dispatch unless the permuted size is known on the host (token drop with padding, or
  ``moe_expert_rank_capacity_factor``'s static budget);
- megatron/core/transformer/moe/moe_utils.py ``permute``, ``unpermute``, ``sort_chunks_by_idxs``,
  ``get_capacity``.

Byte counts are HBM traffic per micro-batch on one device: T tokens, E experts, k the top-k, w the
width tokens travel at (hidden, or LatentMoE's latent size), R the routed rows (T·k dropless, or
capacity·E under token drop with padding). Router scores and probabilities are fp32 (4 bytes; the
HybridEP backend takes fp32 probabilities only, and Megatron-Bridge's MoE providers set
``moe_router_dtype`` fp32 or leave the scores' softmax in fp32), the routing map bool (1 byte), index
tensors int64 (8 bytes), token rows bf16 (2 bytes per element). Every memory-bound kernel runs at the
calibrated streaming rate plus ``kernel_launch_s`` per launch (simulator.compute.memory_time).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.compute import memory_time
from simulator.frameworks import get_framework
from simulator.ops import Op

DISPATCHERS = ("none", "alltoall", "hybridep")
TOKEN_BYTES = 2     # bf16 token rows
PROB_BYTES = 4      # fp32 router scores and probabilities
MAP_BYTES = 1       # bool routing map
INDEX_BYTES = 8     # int64 indices
ROW_MAP_BYTES = 4   # Transformer Engine's int32 row_id_map
# collectives of integer metadata (token counts, the routing map): no gradient, no backward mirror
FORWARD_ONLY = frozenset({"moe.counts_all_gather", "moe.routing_map_all_gather"})


@dataclass(frozen=True)
class DispatchSettings:
    """How one MoE layer routes its tokens: the token dispatcher (``none``: no routing work costed
    beyond the router GEMM and the all-to-alls), Transformer Engine's fused permute and router
    kernels, token drop with padding to capacity, and whether the host synchronises each forward."""

    dispatcher: str
    permute_fusion: bool
    router_fusion: bool
    drop_and_pad: bool
    host_sync: bool


def settings(ctx) -> DispatchSettings:
    """The plan's routing settings, each None field filled from the framework profile
    (Kernels.moe_*). Token drop (the model's ``capacity_factor``) is run with padding to capacity, as
    Megatron-Bridge's ``apply_moe_token_drop`` sets it (moe_pad_expert_input_to_capacity True).
    Host sync (``moe_host_sync`` None): MoEAlltoAllTokenDispatcher.preprocess syncs unless it drops
    and pads (its sizes are then known on the host); _HybridEPManager.dispatch syncs unless drop and
    pad or a static budget fix ``num_permuted_tokens`` (the plan says False for the latter)."""
    p, e = ctx.plan, ctx.model.moe
    k = get_framework(p.framework).kernels
    dispatcher = p.moe_dispatcher or k.moe_dispatcher
    permute = k.moe_permute_fusion if p.moe_permute_fusion is None else p.moe_permute_fusion
    router = k.moe_router_fusion if p.moe_router_fusion is None else p.moe_router_fusion
    pad = e.capacity_factor is not None
    sync = (dispatcher != "none" and not pad) if p.moe_host_sync is None else p.moe_host_sync
    return DispatchSettings(dispatcher, permute, router, pad, sync and dispatcher != "none")


def capacity(tokens: int, top_k: int, experts: int, factor: float) -> int:
    """Rows one source rank sends each expert under token drop: moe_utils.get_capacity,
    ceil(tokens·topk / experts · capacity_factor)."""
    return math.ceil(tokens * top_k / experts * factor)


def routed_rows(ctx, tokens: int | None = None) -> int:
    """Token rows one device permutes, sends and (balanced) receives per micro-batch for ``tokens``
    tokens (default T): T·k dropless (Megatron-Bridge's benchmarks force-balance the routing),
    capacity·E with drop and pad (every expert's chunk padded to capacity: moe_utils.permute
    drop_and_pad, num_out_tokens = capacity·E)."""
    e = ctx.model.moe
    T = ctx.tokens if tokens is None else tokens
    if e.capacity_factor is None:
        return T * e.top_k
    return capacity(T, e.top_k, e.num_experts, e.capacity_factor) * e.num_experts


def local_tokens(ctx) -> int:
    """Tokens the router and the pre-dispatch permutation see on one device: under sequence
    parallelism (which Megatron-Core requires for MoE with tp > 1) the MoE layer's input is the
    rank's [S/tp, B] shard (moe_layer.py MoELayer.forward routes hidden_states as they arrive;
    the tensor-parallel gather happens after the dispatch all-to-all, token_dispatcher.py
    dispatch_postprocess), so T/tp; else T."""
    p = ctx.plan
    return ctx.tokens // p.tp if p.tp > 1 and p.sp else ctx.tokens


def dispatched_tokens(ctx) -> int:
    """Tokens of one micro-batch whose routed rows one device's experts run and whose rows it sends
    in the dispatch all-to-all (bytes per rank = routed_rows of these): the rank's own tokens times
    the expert-tensor-parallel size etp. Megatron-Core's MoE layer routes its input as it arrives,
    the rank's [S/tp, B] sequence-parallel shard (moe_layer.py MoELayer.forward; training with tp > 1
    requires sequence parallelism there), and the token dispatchers gather the dispatched rows over
    the *expert* tensor-parallel group only (token_dispatcher.py MoETokenDispatcher.__init__:
    ``self.tp_group = pg_collection.expt_tp``; MoEAlltoAllTokenDispatcher.dispatch_postprocess's
    gather_from_sequence_parallel_region when that group's size > 1; MoEFlexTokenDispatcher's
    tp x ep group is expt_tp x ep), read at Megatron-LM d98e8a64. So under sequence parallelism
    a device's experts take T/tp · etp tokens' rows: T where etp = tp (Megatron-Core's default;
    the dispatch of T/tp tokens and the etp gather are costed as one all-to-all of T tokens' rows,
    as before), T/tp where etp = 1 < tp (the Megatron-Bridge MoE recipes' expert_tensor_parallel_size
    = 1 at tp = 2: each TP rank's experts run only its own shard's rows). Without sequence
    parallelism (tp = 1) T. Units: tokens."""
    p = ctx.plan
    if not p.sp:
        return ctx.tokens
    return local_tokens(ctx) * p.expert_tp


def expert_tokens(ctx) -> int:
    """Rows each local expert's GEMMs run on, over the tokens the device's experts take
    (dispatched_tokens, D): dropless and balanced, D·k·ep/E; with drop and pad, capacity(D) · ep
    (MoEAlltoAllTokenDispatcher.preprocess: num_tokens_per_local_expert = capacity · tp_size ·
    ep_size, tp_size being the expert-tensor-parallel size etp, capacity that of the rank's
    T/tp tokens: capacity(D) with D = T/tp · etp)."""
    e, p = ctx.model.moe, ctx.plan
    D = dispatched_tokens(ctx)
    if e.capacity_factor is None:
        return math.ceil(D * e.top_k * p.ep / e.num_experts)
    return capacity(D, e.top_k, e.num_experts, e.capacity_factor) * p.ep


def _mem(ctx, name: str, phase: str, nbytes: float, launches: int) -> Op:
    """A memory-bound op of ``nbytes`` HBM bytes in ``launches`` kernels at the streaming rate."""
    return Op(name, "memory", phase, memory_time(ctx.dev, nbytes, launches=launches), bytes=nbytes,
              shape=("moe_routing", launches))


def router_ops(ctx, s: DispatchSettings) -> list[Op]:
    """The router's work after its GEMM (router.py TopKRouter.routing), forward and backward, over
    the [T, E] fp32 logits; the load-balancing loss is costed as Megatron's default ``aux_loss``.

    Eager (moe_utils.topk_routing_with_score_function and compute_routing_scores_for_aux_loss), bytes
    per [T, E] element forward: score function (softmax or sigmoid) r4 w4; torch.topk r4; the dense
    probabilities scattered into zeros (w4) and the routing map into zeros (w1); the aux loss's own
    score function r4 w4, top-k r4 and routing map w1; its sum of scores over tokens r4: 35 bytes.
    Per selected (token, expert): the two top-k outputs (value 4 + index 8, twice: 24), the score
    normalisation r4 w4 (8), the two scatters reading value and index (24): 56 bytes. 11 kernels.
    Backward per element: top-k's gradient scattered into zeros (w4), the score function's backward
    r4 r4 w4 (12), the aux sum's expanded gradient (w4) and the aux score function's backward (12),
    the two logit gradients added r4 r4 w4 (12): 44 bytes; per selected pair the gather and scatter of
    the gradient (24). 7 kernels.
    Fused (moe_router_fusion: TE fused_topk_with_score_function, fused_compute_score_for_moe_aux_loss,
    fused_moe_aux_loss): forward per element r4 w4 w1 (probabilities, routing map) twice and the aux
    loss kernel's r4: 22 bytes, 3 kernels; backward per element the two fused backwards r4 r4 w4 (24),
    the aux loss backward w4 and the gradient add r4 r4 w4 (12): 40 bytes, 4 kernels. Over the
    rank's local tokens (local_tokens)."""
    e, T = ctx.model.moe, local_tokens(ctx)
    elems, pairs = T * e.num_experts, T * e.top_k
    if s.router_fusion:
        fwd, bwd = 22.0 * elems, 40.0 * elems
        nf, nb = 3, 4
    else:
        fwd, bwd = 35.0 * elems + 56.0 * pairs, 44.0 * elems + 24.0 * pairs
        nf, nb = 11, 7
    return [_mem(ctx, "moe.router_topk", "fwd", fwd, nf), _mem(ctx, "moe.router_topk", "bwd", bwd, nb)]


def preprocess_ops(ctx, s: DispatchSettings) -> list[Op]:
    """The dispatcher's metadata work each forward.

    alltoall (token_dispatcher.py MoEAlltoAllTokenDispatcher.preprocess): tokens per expert,
    routing_map.sum(dim=0) (r1 per [T, E] element, 1 kernel), skipped under drop and pad (sizes from
    the capacity); with ep > 1, their all-gather over the ep group (gather_from_sequence_parallel_region:
    E int64 counts per rank, latency-bound). hybridep (_HybridEPManager.dispatch -> hybrid_ep_dispatch's
    preprocessing): each rank needs the routing of every token bound for it: DeepEP's hybrid-ep
    executor (csrc/hybrid_ep, Executor::metadata_preprocess_core) takes a ``global_routing_map``
    gathered by its extension/allgather, the routing map being a torch.bool [tokens, experts] tensor
    (hybrid_ep buffer.py indices_to_map): T·E bytes per rank, all-gathered over ep. (Read from the
    hybrid-ep sources through the code search, not a mirror; the kernels' own HBM passes are not
    counted.) Over the rank's local tokens (local_tokens)."""
    e, p, T = ctx.model.moe, ctx.plan, local_tokens(ctx)
    ops = []
    if s.dispatcher == "alltoall":
        if not s.drop_and_pad:
            ops.append(_mem(ctx, "moe.tokens_per_expert", "fwd", MAP_BYTES * T * e.num_experts, 1))
            if p.ep > 1:
                ops.append(ctx.comm("moe.counts_all_gather", "all_gather", INDEX_BYTES * e.num_experts, "ep", "fwd"))
    elif s.dispatcher == "hybridep" and p.ep > 1:
        ops.append(ctx.comm("moe.routing_map_all_gather", "all_gather", MAP_BYTES * T * e.num_experts, "ep", "fwd"))
    return ops


def host_sync_ops(ctx, s: DispatchSettings) -> list[Op]:
    """The device-to-host copy of the token counts and the stream synchronisation that waits for it
    (MoEAlltoAllTokenDispatcher._maybe_dtoh_and_synchronize at cuda_sync_point; _HybridEPManager
    with num_permuted_tokens None sizes its buffers from tokens_per_expert on the host), once per
    MoE layer forward (backward reuses the host-side splits; a recomputed forward syncs again).
    The host blocks until the GPU has drained its queue, so the GPU then idles while the host issues
    the next op: one copy (``kernel_launch_s``) plus one modelled op of host issue (``host_op_s`` x the
    framework's ``host.op_scale``, the calibrated host cost per op)."""
    if not s.host_sync:
        return []
    cal = ctx.dev.cal
    t = cal.kernel_launch_s + cal.host_op_s * get_framework(ctx.plan.framework).host.op_scale
    return [Op("moe.host_sync", "host_sync", "fwd", t, shape=("dtoh_sync",))]


def permute_ops(ctx, s: DispatchSettings, width: int) -> list[Op]:
    """The local permutation before the dispatch all-to-all (moe_utils.permute), forward and backward.
    R routed rows of ``width`` bf16 values.

    Fused (TE moe_permute_with_probs: make_row_id_map, then the permute kernel): forward, the row map
    r1 w4 per [T, E] element (3 kernels) and per row the token read and written (2·2w) and its
    probability read and written (8): R·(4w + 8) + 5·T·E bytes, 4 kernels. Backward (the unpermute of
    the gradient, summing each token's k rows, and the probabilities' gradient): R·(2w + 8) + T·2w +
    4·T·E bytes, 1 kernel.
    Eager: routing_map.bool().T.contiguous() r1 w1, argsort of the flattened map (the arange of int64
    values w8, one radix pass over 1-byte keys and 8-byte values r9 w9, its histogram r1: 27), the
    probabilities transposed r4 w4: 37 bytes per [T, E] element; per row the slice and modulo of the
    sorted indices r8 w8, the probability gather (index r8, r4 w4), the token index_select (index r8,
    2·2w): R·(4w + 40). 8 kernels. Backward: index_select's backward, zeros of T·2w and an index_add
    (read R·(2w + 8), atomically add R·2w), and the probability gather's backward (zeros T·E·4,
    scatter R·12, transpose back r4 w4 per element): T·2w + R·(4w + 20) + 12·T·E, 5 kernels.
    T and R are the rank's local tokens and their rows (local_tokens)."""
    e, T = ctx.model.moe, local_tokens(ctx)
    R, elems = routed_rows(ctx, T), T * e.num_experts
    if s.permute_fusion:
        fwd = R * (4.0 * width + 8) + 5.0 * elems
        bwd = R * (2.0 * width + 8) + 2.0 * width * T + 4.0 * elems
        nf, nb = 4, 1
    else:
        fwd = 37.0 * elems + R * (4.0 * width + 40)
        bwd = 2.0 * width * T + R * (4.0 * width + 20) + 12.0 * elems
        nf, nb = 8, 5
    return [_mem(ctx, "moe.permute", "fwd", fwd, nf), _mem(ctx, "moe.permute", "bwd", bwd, nb)]


def unpermute_ops(ctx, s: DispatchSettings, width: int) -> list[Op]:
    """The probability-weighted scatter-add after the combine all-to-all (moe_utils.unpermute).

    Fused (TE moe_unpermute with merging probabilities): forward, read R rows (2w) and their
    probabilities (4) and the row map (4 per [T, E] element), write T·2w; 1 kernel. Backward: read the
    output gradient (T·2w) and the forward's input rows (R·2w, for the probabilities' gradient), write
    the rows' gradient (R·2w) and the probabilities' (R·4), read the row map: R·(4w + 4) + T·2w +
    4·T·E, 1 kernel.
    Eager (fp32 probabilities promote the product to fp32, as moe_utils.unpermute warns): the
    probabilities transposed (r4 w4) and masked-selected with the transposed map (r1 w1, r4 r1), 15
    bytes per [T, E] element and R·4 written; rows x probabilities into fp32 (R·(2w + 4) read, R·4w
    written); zeros of T·4w; scatter_add_ (read R·(4w + 8), atomically add R·4w); the cast to bf16
    (T·(4w + 2w)): 15·T·E + R·(14w + 16) + T·10w bytes, 7 kernels. Backward: the cast's (T·6w), the
    scatter's gather (R·(8w + 8)), the product's two gradients (R·(6w + 4) each), the masked select's
    (12 per element): T·6w + R·(20w + 16) + 12·T·E, 7 kernels. masked_select's data-dependent size
    synchronises the host too (host_sync_ops covers one synchronisation per forward). T and R are
    the rank's local tokens and their rows (local_tokens), as for the permutation."""
    e, T = ctx.model.moe, local_tokens(ctx)
    R, elems = routed_rows(ctx, T), T * e.num_experts
    if get_framework(ctx.plan.framework).kernels.moe_probs == "experts":
        return _unweighted_unpermute_ops(ctx, s, width, T, R, elems)
    if s.permute_fusion:
        fwd = R * (2.0 * width + 4) + 4.0 * elems + 2.0 * width * T
        bwd = R * (4.0 * width + 4) + 2.0 * width * T + 4.0 * elems
        nf, nb = 1, 1
    else:
        fwd = 15.0 * elems + R * (14.0 * width + 16) + 10.0 * width * T
        bwd = 6.0 * width * T + R * (20.0 * width + 16) + 12.0 * elems
        nf, nb = 7, 7
    return [_mem(ctx, "moe.unpermute", "fwd", fwd, nf), _mem(ctx, "moe.unpermute", "bwd", bwd, nb)]


def _unweighted_unpermute_ops(ctx, s: DispatchSettings, width: int, T: int, R: int, elems: int) -> list[Op]:
    """moe_utils.unpermute without probabilities (the experts weighted their outputs): eager, zeros of
    T·2w and a scatter_add_ of the R rows (read R·(2w + 8) with their int64 indices, atomically add
    R·2w): T·2w + R·(4w + 8) bytes, 2 kernels; backward, scatter_add_'s gradient gathers R rows of the
    output gradient (R·(4w + 8)), 1 kernel. Fused (TE moe_unpermute, no merging probabilities): read
    R·2w and the row map (4 per [T, E] element), write T·2w; backward the reverse, 1 kernel each."""
    if s.permute_fusion:
        fwd = bwd = R * 2.0 * width + 4.0 * elems + 2.0 * width * T
        nf = nb = 1
    else:
        fwd, bwd = 2.0 * width * T + R * (4.0 * width + 8), R * (4.0 * width + 8)
        nf, nb = 2, 1
    return [_mem(ctx, "moe.unpermute", "fwd", fwd, nf), _mem(ctx, "moe.unpermute", "bwd", bwd, nb)]


def sort_chunks_ops(ctx, s: DispatchSettings, width: int, name: str) -> list[Op]:
    """One sort of the received rows by local expert (moe_utils.sort_chunks_by_idxs; after the
    dispatch all-to-all, and back before the combine), forward and backward; only with more than
    one local expert. Every row and its probability read and written: R·(4w + 8) bytes each way
    (fused, TE moe_sort_chunks_by_index_with_probs: + its row map R·4 written, 2 kernels forward,
    1 backward; eager, torch.split and torch.cat of the rows and of the probabilities: 2 kernels
    each way)."""
    if ctx.model.moe.num_experts // ctx.plan.ep <= 1:
        return []
    R = routed_rows(ctx, dispatched_tokens(ctx))
    moved = R * (4.0 * width + 8)
    if s.permute_fusion:
        return [_mem(ctx, name, "fwd", moved + 4.0 * R, 2), _mem(ctx, name, "bwd", moved, 1)]
    return [_mem(ctx, name, "fwd", moved, 2), _mem(ctx, name, "bwd", moved, 2)]


def dispatch_ops(ctx, width: int) -> tuple[list[Op], list[Op], list[Op], list[Op]]:
    """The routing ops of one MoE layer, for four places of its forward: (before the dispatch
    all-to-all, between it and the experts, between the experts and the combine all-to-all, after
    the combine). Each list holds forward ops and their backward twins (phase ``bwd``). The router's
    own ops come from router_ops. HybridEP fuses every permutation into its dispatch and combine
    kernels, so only its preprocessing and synchronisation are added; dispatcher ``none`` adds nothing."""
    s = settings(ctx)
    if s.dispatcher == "none":
        return [], [], [], []
    pre = preprocess_ops(ctx, s)
    if s.dispatcher == "alltoall":
        pre += permute_ops(ctx, s, width)
    pre += host_sync_ops(ctx, s)
    if s.dispatcher != "alltoall":
        return pre, [], [], []
    return (pre, sort_chunks_ops(ctx, s, width, "moe.sort_chunks"),
            sort_chunks_ops(ctx, s, width, "moe.restore_chunks"), unpermute_ops(ctx, s, width))
