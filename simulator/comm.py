"""Collective communication cost: ring, tree and hierarchical algorithms, α–β per fabric tier.

A fabric is a list of levels from inner to outer: level 0 is the intra-node (or NVL-rack)
fabric, the next levels the scale-out tiers. Each level gives every GPU a per-direction
bandwidth share: NVLink per GPU; for a NIC tier, ``nics_per_node x nic_bw / gpus_per_node /
oversubscription``. Concurrent groups that share a node's NICs therefore share that node's
bandwidth: eight data-parallel groups (one per tensor-parallel rank) each get one NIC's worth.

Costs (Thakur, Rabenseifner & Gropp 2005; NCCL's ring/tree algorithms), with n ranks, a
per-rank buffer of B bytes, achieved bandwidth β and per-step cost α:

  all_reduce     ring  2(n-1)/n · B/β + 2(n-1)α      tree  2·B/β + 2⌈log2 n⌉α  (the faster)
  reduce_scatter (n-1)/n · B/β + (n-1)α               B = full input
  all_gather     (n-1) · B/β + (n-1)α                 B = input shard
  all_to_all     (n-1)/n · B/β + (n-1)α
  broadcast      B/β + ⌈log2 n⌉α                      (pipelined ring / tree)
  send_recv      B/β + α

A group spanning several level-0 domains with k members in each runs hierarchically
(reduce-scatter inside the domain, the collective across domains on B/k, all-gather inside):
the inter-domain phase then uses all k members' NIC shares at once, which is why a node-wide
all-reduce reaches the node's aggregate NIC bandwidth (as nccl-tests bus bandwidth shows).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from hardware_specs.catalog import Hardware
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


@dataclass(frozen=True)
class Fabric:
    """The levels of a system, inner to outer."""

    levels: tuple[Level, ...]
    kind_fraction: tuple = ()      # ((collective, fraction), ...): NCCL efficiency per collective

    def fraction(self, kind: str) -> float:
        for k, v in self.kind_fraction:
            if k == kind:
                return v
        return 1.0

    def level_for_span(self, span: int) -> Level:
        """The innermost level whose domain holds ``span`` consecutive GPUs."""
        for level in self.levels:
            if span <= level.span_gpus:
                return level
        return self.levels[-1]


def fabric_from_hardware(hw: Hardware, cal: Calibration = DEFAULT) -> Fabric:
    """Build the levels of ``hw``: the intra-node fabric, then each scale-out tier."""
    node = hw.node
    intra = node.intra_node
    span0 = min(intra.domain_gpus or node.gpus_per_node, hw.num_gpus)
    eff = cal.link(intra.kind)
    levels = [Level("intra_node", intra.kind, span0, intra.bandwidth_per_direction_Bps,
                    max(eff.alpha_s, intra.latency_s), intra.bandwidth_per_direction_Bps * eff.bandwidth_fraction)]
    for tier in hw.cluster.tiers:
        share = tier.nics_per_node * tier.nic_bandwidth_per_direction_Bps / node.gpus_per_node
        share /= tier.oversubscription
        span = hw.num_gpus if tier.span_nodes is None else tier.span_nodes * node.gpus_per_node
        e = cal.link("scale_out")
        levels.append(Level(tier.name, "scale_out", max(span, span0), share, max(e.alpha_s, tier.latency_s),
                            share * e.bandwidth_fraction))
    return Fabric(tuple(levels), tuple(sorted(cal.collective_fraction.items())))


def flat_time(level: Level, kind: str, nbytes: float, n: int, fraction: float = 1.0) -> float:
    """Time of one collective among ``n`` ranks all on ``level`` (formulas in the module doc);
    ``fraction`` scales the achieved bandwidth for this collective kind."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    a, b = level.alpha_s, level.beta_Bps * fraction
    if kind == "all_reduce":
        ring = 2 * (n - 1) / n * nbytes / b + 2 * (n - 1) * a
        tree = 2 * nbytes / b + 2 * math.ceil(math.log2(n)) * a
        return min(ring, tree)
    if kind in ("reduce_scatter", "all_to_all"):
        return (n - 1) / n * nbytes / b + (n - 1) * a
    if kind == "all_gather":
        return (n - 1) * nbytes / b + (n - 1) * a
    if kind == "broadcast":
        return nbytes / b + math.ceil(math.log2(n)) * a
    if kind == "send_recv":
        return nbytes / b + a
    raise ValueError(f"unknown collective {kind!r}")


def collective_time(fabric: Fabric, kind: str, nbytes: float, n: int, stride: int = 1) -> float:
    """Time of collective ``kind`` over a group of ``n`` ranks spaced ``stride`` apart in rank
    order (ranks fill a node first), with ``nbytes`` per rank as MEASUREMENTS.md defines."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    inner = fabric.levels[0]
    if stride * n <= inner.span_gpus or len(fabric.levels) == 1:
        return flat_time(inner, kind, nbytes, n, fabric.fraction(kind))
    k = max(1, min(n, inner.span_gpus // stride))      # members sharing one inner domain
    outer = fabric.level_for_span(stride * n)
    r = n // k                                          # inner domains the group spans
    if k == 1:
        return flat_time(outer, kind, nbytes, n)
    if kind == "all_reduce":
        return (flat_time(inner, "reduce_scatter", nbytes, k) + flat_time(outer, "all_reduce", nbytes / k, r)
                + flat_time(inner, "all_gather", nbytes / k, k))
    if kind == "reduce_scatter":
        return flat_time(inner, "reduce_scatter", nbytes, k) + flat_time(outer, "reduce_scatter", nbytes / k, r)
    if kind == "all_gather":
        return flat_time(outer, "all_gather", nbytes, r) + flat_time(inner, "all_gather", nbytes * r, k)
    if kind == "all_to_all":
        off = (n - k) / n * nbytes / outer.beta_Bps + (r - 1) * outer.alpha_s
        on = (k - 1) / n * nbytes / inner.beta_Bps + (k - 1) * inner.alpha_s
        return max(off, on)
    return flat_time(outer, kind, nbytes, n)
