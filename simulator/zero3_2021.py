"""ZeRO-3 as DeepSpeed released it in 2021 (v0.3.13 to v0.5.10): per-parameter, synchronised gathers.

The framework profile ``deepspeed-0.3`` (``zero3_gather: per_param_sync``) costs a stage's ZeRO-3
traffic here instead of simulator.engine._zero3_exposed. What the releases did, read from DeepSpeed's
source at tag v0.3.16 (the same code paths in v0.3.13 and v0.5.10):

* partition_parameters.py Init._allgather_param: every parameter tensor is gathered in its own
  torch.distributed.all_gather, and each call is preceded by torch.cuda.synchronize(), a wait for
  all work of the device (compute, gathers and gradient reductions alike).
* stage3.py PartitionedParameterCoordinator.fetch_sub_module: a module's parameters that are not
  gathered yet are gathered before its forward (or backward), then _synchronize_communication
  waits on them and calls torch.cuda.synchronize() again.
* stage3.py prefetch_next_sub_modules: after that fetch, and only when no gather is in flight and
  fewer than stage3_max_live_parameters (1e9) elements are gathered, the next parameters of the
  recorded module trace are gathered asynchronously up to stage3_prefetch_bucket_size (5e7)
  elements; the last of them runs under the module's compute (each earlier one waits in the
  next one's torch.cuda.synchronize()).
* release_sub_module / _keep_for_later: after its use a parameter is released unless its next use
  in the trace is fewer than stage3_max_reuse_distance (1e9) elements of other modules away;
  parameters under stage3_param_persistence_threshold (1e5 elements) are never released.
* reduce_independent_p_g_buckets_and_remove_grads / reduce_ipg_grads: gradients join a bucket as
  backward produces them; when the next one would overflow reduce_bucket_size (5e8 elements) the
  bucket is reduced on the reduction stream (overlap_comm, True for ZeRO-3), after the host has
  waited for the previous bucket's reduction. With ZeRO-3's contiguous_gradients default of
  v0.3.13-v0.3.16 (False) that is buffered_reduce_fallback -> allreduce_bucket: an all-reduce of the
  flattened fp16 bucket. The last bucket is reduced after backward (the epilogue).

Modelled here: one device's stream of module uses (forward; under full recompute each layer's
forward again, then its backward), each with its compute seconds, replayed with one compute
stream, one network (gathers and reductions share the NICs and run one after another) and a
host that every synchronize holds until the device is idle. Assumed, not read from the source:
compute split over a layer's gathered matrices in proportion to their parameters (the GEMMs'
FLOPs are; attention and element-wise work is spread with them), tensors of one module ordered
as Megatron-LM's GPT layer runs them (QKV, output projection, fc1, fc2), vectors (norms, biases)
persistent, and the embedding and head, which meshcast's other ZeRO-3 modes also leave out, not
traced. Defaults are DeepSpeed's (constants.py at v0.3.16): a run that set other budgets is not
what this replays.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from models.params import layer_param_tensors
from models.schema import ModelSpec
from simulator.comm import collective_time
from simulator.compute import memory_time

# DeepSpeed v0.3.16 deepspeed/runtime/zero/constants.py defaults
PREFETCH_BUCKET = 5e7          # ZERO_OPTIMIZATION_PREFETCH_BUCKET_SIZE_DEFAULT (elements)
MAX_LIVE_PARAMETERS = 1e9      # ZERO_OPTIMIZATION_MAX_LIVE_PARAMETERS_DEFAULT
MAX_REUSE_DISTANCE = 1e9       # ZERO_OPTIMIZATION_MAX_REUSE_DISTANCE_DEFAULT
REDUCE_BUCKET = 5e8            # ZERO_OPTIMIZATION_REDUCE_BUCKET_SIZE_DEFAULT


@dataclass(frozen=True)
class Use:
    """One module use in the trace: its gathered tensor (an index into the stage's tensors),
    the compute seconds that follow its fetch, and whether it is a backward use (its gradient
    joins the reduce bucket after the compute)."""

    tensor: int
    compute_s: float
    backward: bool = False


def layer_matrices(model: ModelSpec, index: int) -> tuple[float, ...]:
    """Relative sizes of the parameter matrices one layer gathers, in the order its forward uses
    them: Megatron-LM's GPT layer (fused QKV, output projection, fc1 (w1|w3 fused when gated),
    fc2) for a dense attention layer; otherwise the layer's weight tensors
    (models.params.layer_param_tensors, biases=False) taken as equal."""
    m = model
    if not m.hybrid and m.mla is None and not m.is_moe_layer(index):
        h, d = m.hidden, m.dim_head
        qkv = h * (m.num_heads + 2 * m.kv_heads) * d
        fc1 = h * m.ffn_hidden * (2 if m.gated_mlp else 1)
        return (float(qkv), float(m.num_heads * d * h), float(fc1), float(m.ffn_hidden * h))
    return (1.0,) * max(1, layer_param_tensors(m, index, biases=False))


def stage_trace(sizes: list[tuple[float, ...]], fwd_s: list[float], bwd_s: list[float],
                recomputed: list[bool]) -> tuple[list[float], list[Use]]:
    """(elements of each gathered tensor, the stage's module uses in order) for layers with
    tensor ``sizes`` (elements each), forward seconds ``fwd_s`` and backward seconds ``bwd_s``
    (recompute included) per layer: forward through the layers, then from the last layer back,
    each recomputed layer's forward again (Megatron's checkpointed layer re-runs its modules,
    whose hooks fetch again) and its backward in reverse module order. Compute is split over a
    layer's tensors in proportion to their elements."""
    numel: list[float] = []
    first: list[int] = []
    for layer in sizes:
        first.append(len(numel))
        numel.extend(layer)
    fwd: list[Use] = []
    bwd: list[Use] = []
    for i, layer in enumerate(sizes):
        total = sum(layer)
        share = [s / total for s in layer]
        ids = range(first[i], first[i] + len(layer))
        fwd += [Use(t, fwd_s[i] * w) for t, w in zip(ids, share)]
    for i in reversed(range(len(sizes))):
        layer = sizes[i]
        total = sum(layer)
        share = [s / total for s in layer]
        ids = list(range(first[i], first[i] + len(layer)))
        back = bwd_s[i]
        if recomputed[i]:
            bwd += [Use(t, fwd_s[i] * w) for t, w in zip(ids, share)]
            back -= fwd_s[i]
        bwd += [Use(t, max(0.0, back) * w, True) for t, w in reversed(list(zip(ids, share)))]
    return numel, fwd + bwd


@dataclass
class _Device:
    """Replay state: when the compute stream and the network are done with what was issued, the
    host's clock, which tensors are gathered or in flight, and the open gradient bucket."""

    compute_end: float = 0.0
    net_end: float = 0.0
    reduce_end: float = 0.0
    host: float = 0.0
    available: set = field(default_factory=set)
    in_flight: set = field(default_factory=set)
    live: float = 0.0
    bucket: float = 0.0

    def synchronize(self) -> None:
        """torch.cuda.synchronize(): the host waits until the device has finished everything."""
        self.host = max(self.host, self.compute_end, self.net_end, self.reduce_end)

    def gather(self, seconds: float) -> None:
        """One parameter's all_gather (Init._allgather_param): synchronize, then the call."""
        self.synchronize()
        self.net_end = self.host + seconds


def replay(numel: list[float], trace: list[Use], gather_s, reduce_s, prefetch: bool = True,
           overlap_reduce: bool = True) -> float:
    """Seconds from the first fetch to the end of the last gradient reduction of one micro-batch
    replaying ``trace`` (stage_trace) under DeepSpeed 2021's ZeRO-3 rules (module doc):
    ``gather_s(elements)`` and ``reduce_s(elements)`` are the seconds of one all_gather of a tensor
    and one all-reduce of a bucket; ``prefetch`` False gathers nothing ahead, ``overlap_reduce``
    False reduces each bucket on the compute stream (overlap_comm off)."""
    d = _Device()
    nxt = _next_uses(trace)
    cum = [0.0]
    for use in trace:
        cum.append(cum[-1] + numel[use.tensor])
    for k, use in enumerate(trace):
        t = use.tensor
        if t not in d.available:
            if t not in d.in_flight:
                d.gather(gather_s(numel[t]))
                d.live += numel[t]
            d.synchronize()                         # _synchronize_communication
            d.available |= d.in_flight | {t}
            d.in_flight.clear()
        if prefetch and not d.in_flight and d.live < MAX_LIVE_PARAMETERS:
            for p in _to_prefetch(numel, trace, k, d.available):
                d.gather(gather_s(numel[p]))
                d.in_flight.add(p)
                d.live += numel[p]
        d.compute_end = max(d.compute_end, d.host) + use.compute_s
        if use.backward:
            _add_gradient(d, numel[t], reduce_s, overlap_reduce)
        if _released(cum, k, nxt[k]):
            d.available.discard(t)
            d.live -= numel[t]
    if d.bucket > 0:                                # the epilogue reduces the last bucket
        _reduce_bucket(d, reduce_s, overlap_reduce)
    d.synchronize()
    return d.host


def _next_uses(trace: list[Use]) -> list[int | None]:
    """For each use, the position of the same tensor's next use (None: not used again)."""
    out: list[int | None] = [None] * len(trace)
    last: dict[int, int] = {}
    for k in reversed(range(len(trace))):
        out[k] = last.get(trace[k].tensor)
        last[trace[k].tensor] = k
    return out


def _to_prefetch(numel: list[float], trace: list[Use], k: int, available: set) -> list[int]:
    """PrefetchCoordinator.get_params_to_prefetch: tensors of the next uses not yet gathered, in
    trace order, until they reach the prefetch bucket (at least one)."""
    out: list[int] = []
    total = 0.0
    for use in trace[k + 1:]:
        t = use.tensor
        if t not in available and t not in out:
            out.append(t)
            total += numel[t]
            if total >= PREFETCH_BUCKET:
                break
    return out


def _released(cum: list[float], k: int, again: int | None) -> bool:
    """release_sub_module / _keep_for_later: a tensor is released after use ``k`` unless it is used
    again within MAX_REUSE_DISTANCE elements of the modules in between (``cum``: elements of the
    trace's uses, cumulated)."""
    if again is None:
        return True
    return cum[again] - cum[k + 1] >= MAX_REUSE_DISTANCE


def _add_gradient(d: _Device, elements: float, reduce_s, overlap: bool) -> None:
    """reduce_independent_p_g_buckets_and_remove_grads: reduce the open bucket first when this
    gradient would overflow it, then add the gradient."""
    if d.bucket > 0 and d.bucket + elements > REDUCE_BUCKET:
        _reduce_bucket(d, reduce_s, overlap)
    d.bucket += elements


def _reduce_bucket(d: _Device, reduce_s, overlap: bool) -> None:
    """reduce_ipg_grads: the host waits for the previous bucket's reduction (overlap_comm), then
    all-reduces this one once its gradients exist, after what the network already carries."""
    d.host = max(d.host, d.reduce_end) if overlap else max(d.host, d.compute_end, d.reduce_end)
    start = max(d.host, d.compute_end, d.net_end)
    d.reduce_end = d.net_end = start + reduce_s(d.bucket)
    if not overlap:
        d.compute_end = d.host = d.reduce_end
    d.bucket = 0.0


def gather_buffer_s(dev, elements: float, n_dp: int) -> float:
    """Device seconds of the buffer work around one parameter's gather, besides the collective:
    Init._allgather_param (DeepSpeed v0.3.16) fills a ``torch.zeros`` buffer of the whole parameter
    (2-byte elements written) and copies its own partition into its slot; it then calls
    ``torch.distributed.all_gather`` with a *list* of ``n_dp`` output views, and ProcessGroupNCCL's
    list all-gather (torch 1.x, ``ProcessGroupNCCL::allgather``: ``flatten_for_scatter_gather``,
    then on the NCCL stream ``outputTensors[i][j].copy_(outputFlattened[i][j], true)`` for each
    rank) gathers into a flat scratch tensor and copies it out one rank's slice at a time: ``n_dp``
    device copies, the whole parameter read and written once. Each copy and the fill are costed as
    memory-bound kernels (simulator.compute.memory_time: HBM bytes plus one fixed kernel cost
    each), so the per-rank copies add ``n_dp`` fixed costs to every gather and grow with the
    data-parallel size at fixed bytes per rank. The host's dispatch of the ``n_dp`` copies is not
    costed separately (it runs while the device works through them)."""
    nbytes = 2 * elements + 2 * 2 * elements / n_dp + 2 * 2 * elements
    return memory_time(dev, nbytes, launches=n_dp + 2)


def stage_exposed(ctx, layers: range, f: float, b: float, block: float) -> tuple[float, float]:
    """Exposed ZeRO-3 seconds (forward, backward) of one micro-batch on one device of a stage
    under DeepSpeed 2021's per-parameter synchronised gathers (module doc): the replayed time of
    each pass minus its compute. ``f`` and ``b`` are the stage's forward and backward compute
    seconds (recompute included), spread evenly over its layers as simulator.engine's other ZeRO-3
    modes do; ``block`` the parameters of one layer on this device. Gathers are bf16/fp16 (2 bytes
    a parameter) all_gathers over the data-parallel group, reductions 2-byte all-reduces
    (collective_time on the plan's fabric); offloaded parameters first cross the host link."""
    p, model = ctx.plan, ctx.model
    n_dp = p.dp * p.cp
    n = len(layers)
    if n == 0 or block <= 0:
        return 0.0, 0.0
    sizes = []
    for i in layers:
        rel = layer_matrices(model, i)
        sizes.append(tuple(block * r / sum(rel) for r in rel))
    n_rec = n if p.recompute_layers is None else min(p.recompute_layers, n)
    recomputed = [p.recompute == "full" and j < n_rec for j in range(n)]
    fwd_l, bwd_l = [f / n] * n, [b / n] * n
    host_link = ctx.host_link_Bps

    def gather_s(elements: float) -> float:
        t = collective_time(ctx.fabric, "all_gather", 2 * elements / n_dp, n_dp, p.tp)
        t += gather_buffer_s(ctx.dev, elements, n_dp)
        return t + (2 * elements / n_dp / host_link if p.offload_params else 0.0)

    def reduce_s(elements: float) -> float:
        return collective_time(ctx.fabric, "all_reduce", 2 * elements, n_dp, p.tp)

    numel, trace = stage_trace(sizes, fwd_l, bwd_l, recomputed)
    n_fwd = sum(len(s) for s in sizes)
    kw = dict(prefetch=p.overlap_param_gather, overlap_reduce=p.overlap_grad_reduce)
    forward = replay(numel, trace[:n_fwd], gather_s, reduce_s, **kw)
    both = replay(numel, trace, gather_s, reduce_s, **kw)
    return max(0.0, forward - f), max(0.0, both - forward - b)
