"""The planner's search space: which parallel layouts exist for a model, a cluster and a batch.

A candidate plan is an *outer shape* (the degrees and the discrete switches below) plus *inner
choices* decided per shape (layers per pipeline stage, and for full recompute the number of
recomputed layers per stage, ``recompute_layers``):

  gpus   the GPU count (one value, or a range ``lo:hi[:step]`` of whole nodes)
  tp     tensor parallel, sequence parallelism on; divides the attention heads (and the KV
         heads, or is divided by them); inside one NVLink domain unless relaxed
  cp     context parallel; 2*cp divides the sequence (load-balanced causal CP), and with sequence
         parallelism tp divides each rank's seq/cp tokens (Megatron-Core splits them evenly)
  pp     pipeline stages; dp = gpus / (tp*cp*pp) must be a whole number
  ep/etp expert parallel and expert tensor parallel (MoE models only); ep divides the experts,
         ep*etp divides tp*cp*dp and stays inside the NVLink domain unless relaxed
  mbs    micro-batch size, a divisor of gbs/dp
  gbs    the global batch (fixed, or a range: per shape the largest batch that fits)
  vp     virtual stages per device (interleaved 1F1B); vp divides every stage's layer count
  schedule  gpipe | 1f1b | interleaved (interleaved exactly when vp > 1)
  zero   ZeRO stage 0-3 (3 only without pipeline parallelism, as the simulator requires)
  recompute none | selective | full (with ``recompute_layers`` = N per stage, chosen inside)

Layer splits (``layer_splits``): the even split where pp*vp divides the layers, and the family
Megatron-LM expresses with ``--decoder-first/last-pipeline-num-layers``: equal middle stages of
q layers and a first and last stage of a and b layers (1 <= a, b <= 2q), which lets the first
and last stages give up layers to balance the embedding, the output head and the logits, or
the activations the first stages hold in flight.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Iterator, Optional

from hardware_specs.errors import MeshcastError, PlanError
from models.schema import ModelSpec
from simulator.frameworks import framework_violation, get_framework
from simulator.plan import SCHEDULES, ParallelPlan

RECOMPUTE_MODES = ("none", "selective", "full")
ZERO_STAGES = (0, 1, 2, 3)
# Preference among shapes whose bounds tie: cheaper switches first.
ZERO_ORDER = {1: 0, 2: 1, 0: 2, 3: 3}
RECOMPUTE_ORDER = {"none": 0, "selective": 1, "full": 2}
SCHEDULE_ORDER = {None: 0, "1f1b": 0, "interleaved": 1, "gpipe": 2}


def divisors(n: int) -> list[int]:
    """Positive divisors of ``n`` in increasing order."""
    small, large = [], []
    for d in range(1, int(math.isqrt(n)) + 1):
        if n % d == 0:
            small.append(d)
            if d != n // d:
                large.append(n // d)
    return small + large[::-1]


def parse_count_range(text: str, name: str) -> tuple[int, int, Optional[int]]:
    """``"1024"`` -> (1024, 1024, None); ``"512:2048"`` -> (512, 2048, None); ``"a:b:s"`` with a step."""
    parts = str(text).split(":")
    try:
        vals = [int(float(p)) for p in parts]
    except ValueError:
        raise MeshcastError(name, f"expected N or LO:HI[:STEP], got {text!r}") from None
    if len(vals) == 1:
        vals = [vals[0], vals[0]]
    if len(vals) not in (2, 3) or min(vals) <= 0:
        raise MeshcastError(name, f"expected positive N or LO:HI[:STEP], got {text!r}")
    if vals[0] > vals[1]:
        raise MeshcastError(name, f"range {text!r} is empty (low end above high end)")
    return vals[0], vals[1], (vals[2] if len(vals) == 3 else None)


def gpu_counts(lo: int, hi: int, step: Optional[int], gpus_per_node: int, total: int) -> list[int]:
    """GPU counts to try in [lo, hi]: whole nodes (or one partial node below a node); without a
    step, node counts of the form 2^a or 3*2^a (the sizes parallel degrees factor into)."""
    if hi > total:
        raise MeshcastError("gpus", f"{hi} GPUs requested but the cluster has {total}")
    if lo == hi:
        return [lo]
    out = []
    if step:
        out = [g for g in range(lo, hi + 1, step)]
    else:
        cands = set()
        for base in (1, 3):
            v = base
            while v <= hi:
                cands.add(v)
                v *= 2
        for g in sorted(cands):
            if g < gpus_per_node:
                if lo <= g <= hi:
                    out.append(g)
            elif g % gpus_per_node == 0 and lo <= g <= hi:
                out.append(g)
        for g in (lo, hi):
            if g not in out and (g <= gpus_per_node or g % gpus_per_node == 0):
                out.append(g)
    out = sorted({g for g in out if g <= gpus_per_node or g % gpus_per_node == 0})
    if not out:
        raise MeshcastError("gpus", f"no whole-node GPU count ({gpus_per_node} per node) in {lo}:{hi}")
    return out


@dataclass(frozen=True)
class Constraints:
    """What the user asked for: the searched dimensions and their limits.

    gpus           GPU counts to consider
    gbs            (low, high) global batch in sequences; equal ends fix it
    seq            sequence length in tokens
    fixed          dimensions pinned by the user: tp, pp, cp, dp, vp, ep, etp, mbs, zero_stage,
                   recompute, recompute_layers (None values are ignored)
    max_tp, max_pp, max_cp, max_vp, max_mbs   upper limits of the searched degrees
    schedules      pipeline schedules allowed
    zero_stages    ZeRO stages allowed
    recompute      recompute modes allowed
    min_headroom_bytes  memory each device must keep free
    nvlink_only    keep tp and ep*etp inside one NVLink domain (``--allow-cross-node-tp`` relaxes)
    uneven         allow uneven layer splits (first/last stage family)
    base           template plan for the fields not searched (precision, recipe, overlaps, ...)
    """

    gpus: tuple[int, ...]
    gbs: tuple[int, int]
    seq: int
    fixed: dict = field(default_factory=dict)
    max_tp: Optional[int] = None
    max_pp: Optional[int] = None
    max_cp: int = 16
    max_vp: int = 8
    max_mbs: int = 16
    schedules: tuple[str, ...] = SCHEDULES
    zero_stages: tuple[int, ...] = ZERO_STAGES
    recompute: tuple[str, ...] = RECOMPUTE_MODES
    min_headroom_bytes: float = 0.0
    nvlink_only: bool = True
    uneven: bool = True
    base: ParallelPlan = field(default_factory=ParallelPlan)

    def fix(self, name: str):
        return self.fixed.get(name)


@dataclass(frozen=True, slots=True)
class Shape:
    """One outer choice: degrees, batch, schedule and switches (inner: split and N)."""

    gpus: int
    tp: int
    cp: int
    pp: int
    dp: int
    ep: int
    etp: Optional[int]
    mbs: int
    gbs: int
    vp: int
    schedule: Optional[str]
    zero: int
    recompute: str

    @property
    def microbatches(self) -> int:
        return self.gbs // (self.dp * self.mbs)

    def layout(self) -> tuple:
        """Shapes with the same layout are variants of one parallel layout (top-k keeps one)."""
        return (self.gpus, self.tp, self.cp, self.pp, self.ep, self.etp, self.vp, self.mbs)

    def tie_rank(self) -> tuple:
        return (ZERO_ORDER[self.zero], RECOMPUTE_ORDER[self.recompute], SCHEDULE_ORDER[self.schedule],
                self.mbs, self.vp)

    def to_plan(self, base: ParallelPlan, seq: int, layers_per_stage=None, recompute_layers=None) -> ParallelPlan:
        """The plan of this shape on ``base`` (its framework fills the recipe and attention kernel)."""
        fw = get_framework(base.framework)
        return replace(base, recipe=fw.recipe(self.zero), attention=base.attention or fw.default_attention, tp=self.tp, pp=self.pp, dp=self.dp, vp=self.vp, cp=self.cp, ep=self.ep,
                       etp=self.etp, zero_stage=self.zero, recompute=self.recompute,
                       recompute_layers=recompute_layers, mbs=self.mbs, gbs=self.gbs, seq=seq,
                       schedule=self.schedule, layers_per_stage=layers_per_stage, num_gpus=self.gpus)

    def describe(self) -> str:
        parts = [f"tp={self.tp}"]
        if self.cp > 1:
            parts.append(f"cp={self.cp}")
        parts.append(f"pp={self.pp}")
        if self.vp > 1:
            parts.append(f"vp={self.vp}")
        parts.append(f"dp={self.dp}")
        if self.ep > 1:
            parts.append(f"ep={self.ep}")
        if self.etp is not None and self.etp != self.tp:
            parts.append(f"etp={self.etp}")
        parts.append(f"mbs={self.mbs}")
        return " ".join(parts)


# ---------------------------------------------------------------------------------------------
def layer_splits(num_layers: int, pp: int, vp: int, uneven: bool = True) -> list[Optional[tuple[int, ...]]]:
    """Layer counts per stage to try (None = the even split), each entry a multiple of ``vp``.

    Uneven splits: pp = 2, any (a, L - a); pp > 2, (a, q, ..., q, b) with vp <= a, b <= 2q."""
    L = num_layers
    out: list[Optional[tuple[int, ...]]] = []
    if pp == 1:
        return [None] if vp == 1 else []
    if L % (pp * vp) == 0:
        out.append(None)
    if not uneven:
        return out
    even = tuple([L // pp] * pp) if L % pp == 0 else None
    if pp == 2:
        for a in range(vp, L - vp + 1, vp):
            b = L - a
            if b % vp == 0 and (a, b) != even:
                out.append((a, b))
        return out
    mid = pp - 2
    for q in range(vp, L // mid + 1, vp):
        rem = L - mid * q
        if rem < 2 * vp:
            break
        for a in range(max(vp, rem - 2 * q), min(2 * q, rem - vp) + 1):
            b = rem - a
            if a % vp or b % vp or b < vp or b > 2 * q:
                continue
            split = (a,) + (q,) * mid + (b,)
            if split != even:
                out.append(split)
    return out


def _tp_ok(model: ModelSpec, tp: int) -> Optional[str]:
    if model.num_heads % tp:
        return f"tp={tp} does not divide the {model.num_heads} attention heads"
    if model.kv_heads % tp and tp % model.kv_heads:
        return f"tp={tp} and the {model.kv_heads} KV heads: neither divides the other"
    return None


@dataclass
class Rejections:
    """Why layouts were not generated: reason -> count, by field (for infeasibility messages)."""

    counts: Counter = field(default_factory=Counter)
    example: dict = field(default_factory=dict)
    depth: dict = field(default_factory=dict)

    def add(self, field_name: str, reason: str, depth: int = 0) -> None:
        """Count a rejection; ``depth`` is how far into the enumeration (tp, cp, pp/dp, experts,
        micro-batch) it happened: a deeper one passed every earlier check."""
        self.counts[field_name] += 1
        if depth > self.depth.get(field_name, -1):
            self.depth[field_name] = depth
            self.example[field_name] = reason

    def binding(self) -> str:
        """The field whose constraint binds: rejected deepest into the enumeration (every choice
        before it was possible), ties broken by how often; a tp=16 that cannot fit an NVLink
        domain is not why a fixed ep=3 or a batch of 100 over dp=64 fails."""
        return max(self.counts, key=lambda f: (self.depth.get(f, 0), self.counts[f]))


def _allowed(c: Constraints, name: str, values):
    v = c.fix(name)
    if v is None:
        return list(values)
    return [x for x in values if x == v] or []


def enumerate_shapes(model: ModelSpec, c: Constraints, gpus_per_domain: int,
                     rejections: Optional[Rejections] = None) -> Iterator[Shape]:
    """Every outer shape the constraints allow (inner choices are enumerated later)."""
    rej = rejections if rejections is not None else Rejections()
    L = model.num_layers
    seq = c.seq
    gb_lo, gb_hi = c.gbs
    counts = ", ".join(map(str, c.gpus[:4])) + (", ..." if len(c.gpus) > 4 else "")
    for name in ("tp", "dp", "pp", "cp"):   # a fixed degree no GPU count can hold binds before anything else
        v = c.fix(name)
        if v is not None and all(g % v for g in c.gpus):
            rej.add(name, f"{name}={v} does not divide the GPU count ({counts})", 9)
    _reject_fixed_product(c, counts, rej)
    for gpus in c.gpus:
        tp_cands = [t for t in divisors(gpus) if c.max_tp is None or t <= c.max_tp]
        if c.fix("tp") is not None and c.fix("tp") not in divisors(gpus):
            rej.add("tp", f"tp={c.fix('tp')} does not divide the {gpus} GPUs", 0)
        for tp in _allowed(c, "tp", tp_cands):
            why = _tp_ok(model, tp)
            if why:
                rej.add("tp", why, 1)
                continue
            if c.nvlink_only and tp > gpus_per_domain:
                rej.add("tp", f"tp={tp} exceeds the {gpus_per_domain}-GPU NVLink domain "
                              "(--allow-cross-node-tp relaxes this)", 1)
                continue
            rest = gpus // tp
            for cp in _allowed(c, "cp", [x for x in divisors(rest) if x <= c.max_cp or c.fix("cp")]):
                if cp > 1 and seq % (2 * cp):
                    rej.add("cp", f"sequence {seq} is not divisible by 2*cp = {2 * cp}", 2)
                    continue
                if tp > 1 and c.base.sequence_parallel and (seq // cp) % tp:
                    rej.add("seq", f"sequence parallelism splits {seq // cp} tokens per rank over tp={tp}: "
                                   "not divisible", 2)
                    continue
                rest2 = rest // cp
                pp_cands = [x for x in divisors(rest2) if x <= L and (c.max_pp is None or x <= c.max_pp)]
                for pp in _allowed(c, "pp", pp_cands):
                    dp = rest2 // pp
                    if c.fix("dp") is not None and c.fix("dp") != dp:
                        continue
                    if dp > gb_hi:
                        rej.add("gbs", f"dp={dp} exceeds the global batch {gb_hi}", 3)
                        continue
                    yield from _inner_shapes(model, c, gpus, tp, cp, pp, dp, gpus_per_domain, rej)


def _reject_fixed_product(c: Constraints, counts: str, rej: Rejections) -> None:
    """Fixed degrees each dividing the GPUs but together dividing none (--dp 8 --tp 2 on 8 GPUs)
    bind before anything else: name them all, with their product."""
    named = [(n, c.fix(n)) for n in ("tp", "cp", "pp", "dp") if c.fix(n) is not None]
    product = math.prod(v for _, v in named)
    if len(named) > 1 and all(g % product for g in c.gpus):
        rej.add(named[-1][0], f"{'*'.join(n for n, _ in named)} = {'*'.join(str(v) for _, v in named)} = {product} "
                              f"does not divide the GPU count ({counts})", 9)


def _expert_options(model: ModelSpec, c: Constraints, tp: int, cp: int, dp: int, domain: int,
                    rej: Rejections) -> list[tuple[int, Optional[int]]]:
    if model.moe is None:
        if (c.fix("ep") or 1) > 1:
            rej.add("ep", f"ep={c.fix('ep')} but {model.name} has no experts", 4)
            return []
        return [(1, None)]
    out = []
    width = tp * cp * dp
    if c.fix("ep") is not None and model.moe.num_experts % c.fix("ep"):
        rej.add("ep", f"ep={c.fix('ep')} does not divide the {model.moe.num_experts} experts of {model.name}", 4)
        return []
    for ep in _allowed(c, "ep", divisors(model.moe.num_experts)):
        etps = [e for e in divisors(tp)] if c.fix("etp") is None else [c.fix("etp")]
        for etp in etps:
            if width % (ep * etp):
                rej.add("ep", f"ep*etp = {ep}*{etp} does not divide tp*cp*dp = {width}", 4)
                continue
            if c.nvlink_only and ep * etp > domain:
                rej.add("ep", f"ep*etp = {ep * etp} exceeds the {domain}-GPU NVLink domain", 4)
                continue
            out.append((ep, None if etp == tp else etp))
    return out


def _inner_shapes(model, c: Constraints, gpus, tp, cp, pp, dp, domain, rej) -> Iterator[Shape]:
    L = model.num_layers
    gb_lo, gb_hi = c.gbs
    fw = get_framework(c.base.framework)
    seq = c.seq
    experts = _expert_options(model, c, tp, cp, dp, domain, rej)
    if not experts:
        return
    mbs_cands = [x for x in range(1, c.max_mbs + 1)] if c.fix("mbs") is None else [c.fix("mbs")]
    for mbs in mbs_cands:
        unit = dp * mbs
        if unit > gb_hi:
            rej.add("gbs", f"dp*mbs = {dp}*{mbs} exceeds the global batch {gb_hi}", 5)
            continue
        m_max = gb_hi // unit
        if m_max * unit < gb_lo:
            what = f"global batch {gb_hi} is" if gb_lo == gb_hi else f"no global batch in {gb_lo}:{gb_hi} is"
            rej.add("gbs", f"{what} not a multiple of dp*mbs = {dp}*{mbs}", 5)
            continue
        if gb_lo == gb_hi and c.fix("mbs") is None and gb_hi % unit:
            continue
        if pp == 1:
            scheds: list[tuple[Optional[str], int]] = [(None, 1)] if (c.fix("vp") or 1) == 1 else []
        else:
            scheds = []
            for s in c.schedules:
                if s == "interleaved":
                    vps = [v for v in range(2, c.max_vp + 1)] if c.fix("vp") is None else \
                        ([c.fix("vp")] if c.fix("vp") > 1 else [])
                    scheds += [("interleaved", v) for v in vps if _vp_possible(L, pp, v, c.uneven)]
                elif (c.fix("vp") or 1) == 1:
                    scheds.append((s, 1))
        for schedule, vp in scheds:
            for gbs in _batches(c, unit, pp, vp, schedule, m_max):
                for ep, etp in experts:
                    for zero in c.zero_stages:
                        if c.fix("zero_stage") is not None and zero != c.fix("zero_stage"):
                            continue
                        if zero == 3 and pp > 1:
                            continue
                        if zero not in fw.zero:
                            rej.add("zero_stage", f"{fw.name} has no ZeRO-{zero}")
                            continue
                        for rec in c.recompute:
                            if c.fix("recompute") is not None and rec != c.fix("recompute"):
                                continue
                            shape = Shape(gpus, tp, cp, pp, dp, ep, etp, mbs, gbs, vp, schedule, zero, rec)
                            broken = framework_violation(fw, model, shape.to_plan(c.base, seq))
                            if broken:
                                rej.add(*broken)
                                continue
                            yield shape


def _vp_possible(L: int, pp: int, vp: int, uneven: bool) -> bool:
    if L % (pp * vp) == 0:
        return True
    return uneven and L >= pp * vp and L % vp == 0


def _saturation(schedule: Optional[str], pp: int, vp: int) -> int:
    """Micro-batch count beyond which the stages' in-flight activations stop growing."""
    if pp == 1:
        return 1
    if schedule == "gpipe":
        return 1 << 62
    if schedule == "interleaved":
        return math.ceil((2 * (pp - 1) + (vp - 1) * pp + 1) / vp)
    return pp


def _batches(c: Constraints, unit: int, pp: int, vp: int, schedule, m_max: int) -> list[int]:
    """Global batches to try for a layout: the fixed one, or in a range the largest that the
    layout divides and, below it, only those whose in-flight memory is smaller (time per token
    never improves with fewer micro-batches under the cost model; memory never grows)."""
    lo, hi = c.gbs
    step = pp if schedule == "interleaved" else 1
    if lo == hi:
        if hi % unit:
            return []
        m = hi // unit
        return [hi] if m % step == 0 else []
    ms = []
    top = (m_max // step) * step
    if top * unit >= lo and top > 0:
        ms.append(top)
    sat = _saturation(schedule, pp, vp)
    for m in range(min(top - step, sat - 1), 0, -1):
        if m % step == 0 and m * unit >= lo:
            ms.append(m)
    return [m * unit for m in ms]


def all_batches(c: Constraints, unit: int, pp: int, schedule) -> list[int]:
    """Every global batch in the range the layout admits (the brute-force reference uses this)."""
    lo, hi = c.gbs
    step = pp if schedule == "interleaved" else 1
    return [m * unit for m in range(hi // unit, 0, -1) if m % step == 0 and lo <= m * unit <= hi]


def recompute_layer_options(split: tuple[int, ...], mode: str, fixed: Optional[int] = None, fw=None,
                            vp: int = 1) -> list[Optional[int]]:
    """``recompute_layers`` values that differ for a split: 1 .. max stage - 1 (those the framework
    ``fw`` can express, when given), and None (all)."""
    if mode != "full":
        return [None]
    if fixed is not None:
        return [fixed]
    from simulator.frameworks.rules import recompute_expressible
    top = max(split)
    return [n for n in range(1, top) if fw is None or recompute_expressible(fw, n, top, vp)] + [None]


def split_tuple(split: Optional[tuple[int, ...]], num_layers: int, pp: int) -> tuple[int, ...]:
    """The layers of every stage for a split description (None: the even split)."""
    return split if split is not None else tuple([num_layers // pp] * pp)


def make_constraints(model: ModelSpec, cluster: str, *, gpus=None, gbs, seq: Optional[int] = None,
                     fixed: Optional[dict] = None, min_headroom_gb: float = 0.0, base: Optional[ParallelPlan] = None,
                     schedules=None, **limits) -> Constraints:
    """Constraints from user-level values: ``gpus`` and ``gbs`` as N or "LO:HI[:STEP]" (GPUs
    default to the whole cluster), ``min_headroom_gb`` in GB (1e9 bytes), ``fixed`` degrees."""
    from hardware_specs.catalog import load_cluster, load_node

    cl = load_cluster(cluster)
    node = load_node(cl.node)
    total = cl.num_nodes * node.gpus_per_node
    if gpus is None:
        counts = [total]
    else:
        lo, hi, step = parse_count_range(str(gpus), "gpus")
        counts = gpu_counts(lo, hi, step, node.gpus_per_node, total)
    glo, ghi, gstep = parse_count_range(str(gbs), "gbs")
    if gstep is not None:
        raise MeshcastError("gbs", "a batch range takes no step: LO:HI")
    seq = model.seq_len if seq is None else seq     # --seq 0 is an error, not the model's length
    if seq <= 0:
        raise MeshcastError("seq", f"must be positive, got {seq}")
    if min_headroom_gb < 0:
        raise MeshcastError("min_headroom_gb", f"must be >= 0, got {min_headroom_gb}")
    fixed = {k: v for k, v in (fixed or {}).items() if v is not None}
    for k in ("tp", "pp", "cp", "dp", "vp", "ep", "etp", "mbs"):
        if k in fixed and (not isinstance(fixed[k], int) or fixed[k] <= 0):
            raise MeshcastError(k, f"must be a positive integer, got {fixed[k]!r}")
    if "zero_stage" in fixed and fixed["zero_stage"] not in ZERO_STAGES:
        raise MeshcastError("zero", f"must be 0, 1, 2 or 3, got {fixed['zero_stage']!r}")
    if fixed.get("recompute_layers") is not None:
        if fixed.get("recompute", "full") != "full":
            raise MeshcastError("recompute_layers", "needs --recompute full")
        if not isinstance(fixed["recompute_layers"], int) or fixed["recompute_layers"] <= 0:
            raise MeshcastError("recompute_layers", f"must be a positive integer, got {fixed['recompute_layers']!r}")
        fixed["recompute"] = "full"
    if "recompute" in fixed and fixed["recompute"] not in RECOMPUTE_MODES:
        raise MeshcastError("recompute", f"must be one of {', '.join(RECOMPUTE_MODES)}; got {fixed['recompute']!r}")
    if schedules is not None and not any(schedules):
        raise MeshcastError("schedules", f"empty list; give one or more of {', '.join(SCHEDULES)}")
    sched = tuple(schedules) if schedules else SCHEDULES
    bad = [s for s in sched if s not in SCHEDULES]
    if bad:
        raise MeshcastError("schedules", f"unknown schedule {bad[0]!r}; choose from {', '.join(SCHEDULES)}")
    if fixed.get("vp", 1) > 1 and "interleaved" not in sched:
        raise MeshcastError("vp", "vp > 1 needs the interleaved schedule in --schedules")
    _check_limits(fixed, limits)
    from simulator.frameworks import get_framework
    fw = get_framework((base or ParallelPlan()).framework)
    _check_fixed_against_framework(fw, fixed)
    _check_grad_sync(fw, base or ParallelPlan())
    if not fw.parallelism.arbitrary_split:
        limits["uneven"] = False      # the framework splits layers itself: only even splits are searched
    return Constraints(gpus=tuple(counts), gbs=(glo, ghi), seq=seq, fixed=fixed,
                       min_headroom_bytes=min_headroom_gb * 1e9, base=base or ParallelPlan(), schedules=sched,
                       **{k: v for k, v in limits.items() if v is not None})


def _check_limits(fixed: dict, limits: dict) -> None:
    """Each --max-* limit is at least 1 (0 left no layout, and --max-vp 0 searched as if absent),
    and a fixed degree does not exceed its own limit (--tp 4 --max-tp 2 contradict each other)."""
    for name in ("tp", "pp", "cp", "vp", "mbs"):
        limit = limits.get(f"max_{name}")
        if limit is None:
            continue
        if limit < 1:
            raise MeshcastError(f"max-{name}", f"must be at least 1, got {limit}")
        if fixed.get(name) is not None and fixed[name] > limit:
            raise MeshcastError(name, f"--{name} {fixed[name]} is above --max-{name} {limit}; drop one or make them agree")


def _check_grad_sync(fw, base: ParallelPlan) -> None:
    """The search keeps the base plan's ``fsdp_grad_sync`` (it never varies it); a policy the
    framework's launch config cannot say (rules.grad_sync_expressible: torchtitan reduces after
    every micro-batch) would make every plan it proposes one the team cannot launch: PlanError."""
    from simulator.frameworks.rules import grad_sync_expressible
    if not grad_sync_expressible(fw, base.fsdp_grad_sync):
        raise PlanError("fsdp_grad_sync", f"{fw.name} reduces FSDP2's gradients after every micro-batch (its "
                                          f"config has no deferred sync): the planner searches only "
                                          f"every_microbatch, not {base.fsdp_grad_sync}")


def _check_fixed_against_framework(fw, fixed: dict) -> None:
    """A pinned degree or ZeRO stage the framework does not offer is the user's conflict: name the
    framework's rule rather than let the search report whichever constraint it met first."""
    par = fw.parallelism
    for name, offered in (("tp", par.tp), ("pp", par.pp), ("cp", par.cp), ("ep", par.ep)):
        if (fixed.get(name) or 1) > 1 and not offered:
            raise MeshcastError(name, f"{fw.name} has no {name} > 1 (--framework selects another; "
                                      "`meshcast catalog frameworks` lists them)")
    if fixed.get("zero_stage") is not None and fixed["zero_stage"] not in fw.zero:
        raise MeshcastError("zero", f"{fw.name} has no ZeRO-{fixed['zero_stage']}; it offers "
                                    f"{', '.join(map(str, fw.zero_stages))}")
