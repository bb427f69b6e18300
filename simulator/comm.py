"""Collective communication cost: ring, tree and hierarchical algorithms, α–β per fabric tier.

A fabric is a list of levels from inner to outer: level 0 is the intra-node (or NVL-rack)
fabric, the next levels the scale-out tiers. Each level gives every GPU a per-direction
bandwidth share: NVLink per GPU; for a NIC tier, ``nics_per_node x nic_bw / gpus_per_node /
oversubscription``. Concurrent groups that share a node's NICs therefore share that node's
bandwidth: eight data-parallel groups (one per tensor-parallel rank) each get one NIC's worth.

Costs (Thakur, Rabenseifner & Gropp 2005; NCCL's ring/tree algorithms), with n ranks, a
per-rank buffer of B bytes, achieved bandwidth β and per-step cost α:

  all_reduce     ring  2(n-1)/n · B/β + 2(n-1)h      tree  2·B/β + 2⌈log2 n⌉h  (fewer steps)
  reduce_scatter (n-1)/n · B/β + (n-1)h               B = full input
  all_gather     (n-1) · B/β + (n-1)h                 B = input shard
  all_to_all     (n-1)/n · B/β + h                    (n-1 concurrent sends, one hop deep)
  broadcast      B/β + (n-2)·min(B, L)/β + (n-1)h     (pipelined chain of n-1 hops, chunk L)
  send_recv      B/β + h
each plus the call's fixed cost α (launch, synchronisation, protocol setup; calibrated per
collective kind), with h the per-hop latency of the tier (catalog ``latency_s``). NCCL sends
messages up to a size threshold with a low-latency protocol (its own α and β) and larger ones
with its bandwidth protocol; both lines and the threshold are calibrated. Ring collectives also
spend δ·S/β on the rank's own shard S (B/n; all_gather: B), work that crosses no link but runs in
the same kernel and channels (δ = ``collective_shard_steps[kind]``, fitted): this is why the bus
bandwidth of all-gather and reduce-scatter rises from two ranks to four, (n-1)/(n-1+δ) of β.
All-to-all has no such term: NCCL copies the rank's own block on separate channels and warps,
concurrently with the peer traffic (:func:`self_copy_in_series`).

A group spanning several level-0 domains with k members in each runs hierarchically
(reduce-scatter inside the domain, the collective across domains on B/k, all-gather inside):
the inter-domain phase then uses all k members' NIC shares at once, which is why a node-wide
all-reduce reaches the node's aggregate NIC bandwidth (as nccl-tests bus bandwidth shows).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from hardware_specs.catalog import Hardware
from simulator import nccl
from simulator.calibration import DEFAULT, Calibration

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv")


@dataclass(frozen=True)
class Level:
    """One fabric tier as a GPU sees it, with calibrated α and achieved bandwidth β."""

    name: str
    kind: str                 # nvlink, pcie, xgmi, c2c or scale_out (selects the calibration)
    span_gpus: int            # GPUs reachable within this level
    bandwidth_Bps: float      # datasheet per-direction bandwidth share per GPU
    alpha_s: float
    beta_Bps: float           # achieved per-direction bandwidth per GPU
    ll_alpha_s: float = 0.0   # low-latency protocol (0: not modelled on this level)
    ll_beta_Bps: float = 0.0
    hop_s: float = 0.0        # per-step hop latency (catalog latency_s)
    ll_max_bytes: float = 0.0 # largest message sent with the low-latency protocol
    chunk_bytes: float = 0.0  # pipeline chunk of a chained broadcast (0: no fill term)
    ramp_s: float = 0.0       # start-up cost of a ring's two-way traffic at 2 ranks, at most (ring_ramp)
    ramp_tau_s: float = 0.0   # its time constant, seconds of link time (0: no term)
    nccl_bus_Bps: float = 0.0 # >0: NCCL's protocol choice with this ring bus bandwidth (low_latency)
    ll_cap_Bps: float | None = None   # NCCL's LL bus-bandwidth cap of the GPU generation (llMaxBws)


@dataclass(frozen=True)
class Fabric:
    """The levels of a system, inner to outer."""

    levels: tuple[Level, ...]
    kind_fraction: tuple = ()      # ((collective, bandwidth fraction), ...) relative to all_reduce
    kind_alpha: tuple = ()         # ((collective, fixed-cost fraction), ...)
    kind_shard: tuple = ()         # ((collective, shard steps δ), ...)

    def fraction(self, kind: str) -> float:
        return _lookup(self.kind_fraction, kind)

    def alpha_fraction(self, kind: str) -> float:
        return _lookup(self.kind_alpha, kind)

    def shard_steps(self, kind: str) -> float:
        return _lookup(self.kind_shard, kind, 0.0)

    def level_for_span(self, span: int) -> Level:
        """The innermost level whose domain holds ``span`` consecutive GPUs."""
        for level in self.levels:
            if span <= level.span_gpus:
                return level
        return self.levels[-1]


def _lookup(pairs: tuple, key: str, default: float = 1.0) -> float:
    for k, v in pairs:
        if k == key:
            return v
    return default


def job_domain_gpus(domain_gpus: int, gpus_per_node: int, num_gpus: int) -> int:
    """The NVLink domain a job's consecutive ranks see on a rack-scale system (domain_gpus larger
    than a node: GB200/GB300 NVL72). meshcast places a job as Slurm's ``--segment`` does (NVIDIA's
    guidance for NVL72, and Megatron-Bridge's performance harness, scripts/performance/utils/
    executors.py): all of its trays in one rack when they fit, else segments of equal size, the
    largest divisor of the job's tray count that fits in one rack, each inside one rack. A
    256-GPU job on NVL72 racks so runs as four 64-GPU domains, not as blocks of 72 straddling racks."""
    if domain_gpus <= gpus_per_node:
        return min(domain_gpus, num_gpus)
    rack_trays = domain_gpus // gpus_per_node
    trays = max(1, num_gpus // gpus_per_node)
    if trays <= rack_trays:
        return trays * gpus_per_node
    return gpus_per_node * next(s for s in range(rack_trays, 0, -1) if trays % s == 0)


def fabric_from_hardware(hw: Hardware, cal: Calibration = DEFAULT) -> Fabric:
    """Build the levels of ``hw``: the intra-node fabric (on rack-scale systems the job's segment of
    a rack, job_domain_gpus), then each scale-out tier."""
    node = hw.node
    intra = node.intra_node
    span0 = job_domain_gpus(intra.domain_gpus or node.gpus_per_node, node.gpus_per_node, hw.num_gpus)
    eff = cal.link(intra.kind)
    bw0 = intra.bandwidth_per_direction_Bps
    levels = [Level("intra_node", intra.kind, span0, bw0, eff.alpha_s, bw0 * eff.bandwidth_fraction,
                    eff.ll_alpha_s, bw0 * eff.ll_bandwidth_fraction, intra.latency_s, eff.ll_max_bytes, eff.chunk_bytes,
                    eff.ramp_s, eff.ramp_tau_s, eff.nccl_bus_Bps, nccl.LL_MAX_BW_BPS.get(hw.accelerator.family))]
    for tier in hw.cluster.tiers:
        share = tier.nics_per_node * tier.nic_bandwidth_per_direction_Bps / node.gpus_per_node
        share /= tier.oversubscription
        span = hw.num_gpus if tier.span_nodes is None else tier.span_nodes * node.gpus_per_node
        e = cal.link("scale_out")
        levels.append(Level(tier.name, "scale_out", max(span, span0), share, e.alpha_s, share * e.bandwidth_fraction,
                            e.ll_alpha_s, share * e.ll_bandwidth_fraction, tier.latency_s, e.ll_max_bytes,
                            e.chunk_bytes, e.ramp_s, e.ramp_tau_s))
    return Fabric(tuple(levels), tuple(sorted(cal.collective_fraction.items())),
                  tuple(sorted(cal.collective_alpha_fraction.items())),
                  tuple(sorted(cal.collective_shard_steps.items())))


def flat_time(level: Level, kind: str, nbytes: float, n: int, fraction: float = 1.0,
              alpha_fraction: float = 1.0, shard_steps: float = 0.0) -> float:
    """Time of one collective among ``n`` ranks all on ``level`` (formulas in the module doc):
    NCCL's low-latency protocol up to ``ll_max_bytes``, its bandwidth protocol above;
    ``fraction``, ``alpha_fraction`` and ``shard_steps`` (δ) are this collective kind's
    bandwidth and fixed-cost factors and its own-shard term."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    ll = low_latency(level, kind, nbytes, n)
    a, b = (level.ll_alpha_s, level.ll_beta_Bps) if ll else (level.alpha_s, level.beta_Bps)
    t = _alpha_beta(kind, nbytes, n, a * alpha_fraction, b * fraction, level.hop_s)
    own = shard_bytes(kind, nbytes, n) if self_copy_in_series(kind) else 0.0
    ramp = 0.0 if ll else ring_ramp(kind, n, wire_time(kind, nbytes, n, b * fraction), level.ramp_s, level.ramp_tau_s)
    return t + shard_steps * own / (b * fraction) + ramp + \
        _chain_fill(kind, nbytes, n, level.chunk_bytes, b * fraction)


def low_latency(level: Level, kind: str, nbytes: float, n: int) -> bool:
    """Whether a call runs NCCL's low-latency protocol on ``level``: NCCL's own choice by size, kind
    and ranks (simulator.nccl.protocol; LL128 counts as the bandwidth protocol) where the level has
    NCCL's ring bus bandwidth, else up to ``ll_max_bytes``; never where LL is not modelled."""
    if level.ll_beta_Bps <= 0:
        return False
    if level.nccl_bus_Bps > 0:
        link = {"pcie": "pci", "scale_out": "net"}.get(level.kind, "nvlink")
        return nccl.protocol(kind, nbytes, n, level.nccl_bus_Bps, link, level.ll_cap_Bps, True) == "LL"
    return nbytes <= level.ll_max_bytes


RAMP_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


def ring_ramp(kind: str, n: int, link_s: float, ramp_s: float, tau_s: float) -> float:
    """Start-up of a collective's two-way traffic, seconds: ``ramp_s``/(n−1)·(1 − e^(−t/τ))
    for a call of link time t = ``link_s`` over ``n`` ranks (all-reduce, all-gather,
    reduce-scatter and, since session 40, all-to-all, where each rank also sends and receives at
    once, with NCCL's Simple protocol; 0 for one-way broadcast and send/recv, and when no τ is
    calibrated; no committed profile before session 40 carries a τ, so the all-to-all term moved
    only the logged ring start-up candidate of session 31). Small calls run at β/(1 + ramp_s/((n−1)τ)); the excess stops growing
    past a few τ, so large calls approach β.

    Source: the data, not NCCL's code (docs/cost_model.md §3). In every 2-GPU H200 run the marginal
    bandwidth of the ring kinds, where each rank sends and receives at once, keeps rising past
    256 MiB (all-gather 264 -> 291 -> 302 GB/s over 64 MiB-256 MiB-1 GiB-4 GiB) while one-way
    traffic (broadcast, send/recv) is flat at ~371 GB/s from 64 MiB; nothing NCCL 2.28.9 decides
    changes there (Simple on 24 channels, a fixed chunk per channel: ``enqueue.cc``
    ``calcCollChunking`` shrinks chunks only for tree, NVLS, CollNet and PAT). The rise is smaller
    on 4 GPUs; 1/(n−1), the share of a rank's traffic that is its own shard, is the assumed scaling
    (two GPU counts measured)."""
    if tau_s <= 0 or ramp_s <= 0 or n <= 1 or kind not in RAMP_KINDS:
        return 0.0
    return ramp_s / (n - 1) * -math.expm1(-link_s / tau_s)


def wire_time(kind: str, nbytes: float, n: int, b: float) -> float:
    """Seconds the bytes each rank moves over a link take at bandwidth ``b`` (the β term of the
    module doc's formulas, without α, hops, own-shard or fill terms)."""
    if kind == "all_reduce":
        ring = 2 * (n - 1) / n * nbytes / b
        tree = 2 * nbytes / b
        return ring if n <= 2 or ring <= tree else tree
    if kind in ("reduce_scatter", "all_to_all"):
        return (n - 1) / n * nbytes / b
    if kind == "all_gather":
        return (n - 1) * nbytes / b
    return nbytes / b


def shard_bytes(kind: str, nbytes: float, n: int) -> float:
    """The rank's own shard of a ring collective, bytes: the input of an all-gather, 1/n of the
    buffer of reduce-scatter and all-reduce; 0 for broadcast, send/recv and all-to-all
    (:func:`self_copy_in_series`)."""
    if kind == "all_gather":
        return nbytes
    if kind in ("reduce_scatter", "all_reduce"):
        return nbytes / n
    return 0.0


def self_copy_in_series(kind: str) -> bool:
    """Whether the rank's own block costs time after its link traffic. Not for all-to-all: NCCL
    (2.28.9) runs it as grouped send/recv whose round 0 is the rank's send to itself
    (``enqueue.cc`` ``scheduleP2pTasksToPlan``), a plain copy by warps of their own
    (``device/sendrecv.h``, ``isCopy`` -> ``reduceCopy``), on channels that start at
    ``reverseBits(round)`` (``include/channel.h`` ``ncclP2pChannelBaseForRound``: on 2 GPUs the
    self copy on channels 0-15, the peer's send/recv on 16-31): it overlaps the peer traffic."""
    return kind in ("all_reduce", "all_gather", "reduce_scatter")


def _chain_fill(kind: str, nbytes: float, n: int, chunk: float, b: float) -> float:
    """Pipeline fill of a chained broadcast: each of the n-2 ranks past the first hop waits for
    one chunk (at most the whole message) before it forwards; 0 when no chunk is calibrated."""
    if kind != "broadcast" or chunk <= 0 or n <= 2:
        return 0.0
    return (n - 2) * min(nbytes, chunk) / b


def steps(kind: str, n: int) -> int:
    """Hops on the critical path over ``n`` ranks: ring or tree all-reduce, ring all-gather and
    reduce-scatter, a chained broadcast (NCCL's ring broadcast, n-1 hops), one hop for send/recv
    and all-to-all (n-1 concurrent point-to-point sends)."""
    if kind == "all_reduce":
        return min(2 * (n - 1), 2 * math.ceil(math.log2(n)))
    if kind in ("reduce_scatter", "all_gather", "broadcast"):
        return n - 1
    if kind in ("send_recv", "all_to_all"):
        return 1
    raise ValueError(f"unknown collective {kind!r}")


def _alpha_beta(kind: str, nbytes: float, n: int, a: float, b: float, hop: float) -> float:
    """Fixed cost of the call ``a`` (launch, synchronisation, protocol setup), one ``hop``
    latency per algorithm step, and the bytes each rank moves over bandwidth ``b``."""
    return a + steps(kind, n) * hop + wire_time(kind, nbytes, n, b)


def _flat(fabric: Fabric, level: Level, kind: str, nbytes: float, n: int) -> float:
    """:func:`flat_time` on ``level`` with the fabric's factors for collective ``kind``."""
    return flat_time(level, kind, nbytes, n, fabric.fraction(kind), fabric.alpha_fraction(kind),
                     fabric.shard_steps(kind))


def collective_time(fabric: Fabric, kind: str, nbytes: float, n: int, stride: int = 1) -> float:
    """Time of collective ``kind`` over a group of ``n`` ranks spaced ``stride`` apart in rank
    order (ranks fill a node first), with ``nbytes`` per rank as MEASUREMENTS.md defines."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    inner = fabric.levels[0]
    if len(fabric.levels) == 1:
        return _flat(fabric, inner, kind, nbytes, n)
    block = stride * n                                  # consecutive ranks one group's block covers
    if block <= inner.span_gpus and inner.span_gpus % block == 0:
        return _flat(fabric, inner, kind, nbytes, n)
    if block % inner.span_gpus:
        # blocks not aligned to the inner domains (tp=3 or 6 on 8-GPU nodes): some groups
        # straddle two domains, with an unequal split of members that the hierarchical algorithm
        # cannot use; NCCL runs one ring over them, every step waiting on the slowest edge it
        # crosses (the outer tier, each crossing rank on its own share of the NICs), and the
        # step waits on the slowest group
        outer = fabric.level_for_span(max(block, inner.span_gpus + 1))
        return _flat(fabric, outer, kind, nbytes, n)
    k = max(1, min(n, inner.span_gpus // stride))      # members sharing one inner domain
    outer = fabric.level_for_span(stride * n)
    r = n // k                                          # inner domains the group spans
    if k == 1:
        return flat_time(outer, kind, nbytes, n)
    if kind == "all_reduce":
        return (flat_time(inner, "reduce_scatter", nbytes, k) + flat_time(outer, "all_reduce", nbytes / k, r)
                + flat_time(inner, "all_gather", nbytes / k, k))
    # NCCL runs all-gather and reduce-scatter as one ring over all n ranks: bandwidth as the
    # hierarchical split (the inter-node hops carry 1/k of the data per NIC), but n-1 steps, each
    # waiting on the slowest (inter-node) hop
    ring_latency = (n - r) * outer.hop_s
    if kind == "reduce_scatter":
        return (flat_time(inner, "reduce_scatter", nbytes, k) + flat_time(outer, "reduce_scatter", nbytes / k, r)
                + ring_latency - (k - 1) * inner.hop_s)
    if kind == "all_gather":
        return (flat_time(outer, "all_gather", nbytes, r) + flat_time(inner, "all_gather", nbytes * r, k)
                + ring_latency - (k - 1) * inner.hop_s)
    if kind == "all_to_all":
        off = (n - k) / n * nbytes / outer.beta_Bps + outer.alpha_s + (r - 1) * outer.hop_s
        on = (k - 1) / n * nbytes / inner.beta_Bps + inner.alpha_s + (k - 1) * inner.hop_s
        return max(off, on)
    return flat_time(outer, kind, nbytes, n)
