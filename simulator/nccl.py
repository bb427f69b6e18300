"""What NCCL itself decides for a collective, by message size: protocol, channels and its latency.

Read from NCCL 2.28.9's source (tag v2.28.9-1, the version of every committed collectives run)
and checked against its own log on a 2×H200 machine (validation/measurements/logs/
h200x2_nccl_tuning.log: NCCL_DEBUG_SUBSYS=TUNING prints its cost table and the protocol and
channels of every call; tests/test_nccl.py replays it; docs/cost_model.md §3):

* ``src/graph/tuning.cc`` ``ncclTopoTuneModel``: per (collective, algorithm, protocol) a latency
  ``baseLatencies + nsteps × hwLatencies`` (µs) and a bus bandwidth, the ring graph's
  ``nChannels × bwIntra`` (12 × 30 = 360 GB/s on H200 NVLink, from 18 links × 20.6 GB/s), times
  0.5 capped at ``llMaxBws`` for LL and 0.92 for LL128, turned into algorithm bandwidth by
  ``nRanks / nsteps``.
* ``ncclTopoGetAlgoTime``: time = latency + nBytes / bandwidth; ``src/enqueue.cc``
  ``topoGetAlgoInfo`` takes the cheapest (algorithm, protocol), then lowers the channel count
  while ``nBytes < nChannels × nThreads × threadThreshold`` (``comm.h``: 8 for LL and LL128, 64
  for Simple; ring LL × nRanks).
* ``enqueue.cc`` ``addP2pToPlan`` (send/recv, all-to-all): LL up to ``p2pnChannelsPerPeer ×
  NCCL_P2P_LL_THRESHOLD`` (16 KiB) per peer, Simple above; no tuner; 32/n channels per peer,
  doubled while a part exceeds 16 MiB (2 GPUs: 16 channels up to 256 MiB per peer, 32 above).

Only the ring is modelled within a node: NCCL's tuner picks it over the tree at every size on 2
H200s (log), and NVLink SHARP (NVLS) is off on the machines measured (NCCL_NVLS_ENABLE=0).
``bus_Bps`` below is the ring graph's bus bandwidth (NCCL's 360 GB/s on H200).
"""
from __future__ import annotations

PROTOCOLS = ("LL", "LL128", "Simple")

# tuning.cc ncclTunerConstantsDefaults, ring rows (µs): baseLatencies and hwLatencies per link class
BASE_LATENCY_US = {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}
HW_LATENCY_US = {"nvlink": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4},
                 "pci": {"LL": 1.0, "LL128": 2.5, "Simple": 5.7},
                 "net": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0}}
# tuning.cc llMaxBws, one node, by GPU generation (GB/s): LL's bus bandwidth never exceeds it
LL_MAX_BW_BPS = {"nvidia-volta": 39.0e9, "nvidia-ampere": 87.7e9, "nvidia-hopper": 141.0e9,
                 "nvidia-blackwell": 282.0e9}
LL_BUS_FRACTION = 0.5         # tuning.cc: ring LL busBw × 0.5 (half of each 8-byte line is a flag)
LL128_BUS_FRACTION = 0.92     # tuning.cc: ring LL128 busBw × 0.92 (120 of 128 bytes carry data)
# device.h / comm.h: threads per channel and the per-thread bytes before another channel is used
MAX_THREADS = {"LL": 512, "LL128": 640, "Simple": 512}
THREAD_THRESHOLD = {"LL": 8, "LL128": 8, "Simple": 64}
COLL_CHANNELS = 24            # coll channels on H100/H200 NVSwitch nodes (NCCL INFO: "24 coll channels")
P2P_CHANNELS_PER_PEER = 32    # pow2Up(24), graph/paths.cc ncclTopoComputeP2pChannels (log: 32)
P2P_LL_THRESHOLD = 16384      # enqueue.cc NCCL_P2P_LL_THRESHOLD, bytes per channel
P2P_KINDS = ("send_recv", "all_to_all")


def tuner_bytes(kind: str, nbytes: float, n: int) -> float:
    """The size NCCL's tuner sees, bytes (``enqueue.h`` ``ncclFuncMaxSendRecvCount``): the larger
    of send and receive buffer; all-gather's is n × the input shard ``nbytes``."""
    return n * nbytes if kind == "all_gather" else nbytes


def ring_steps(kind: str, n: int) -> int:
    """``nsteps`` of tuning.cc: 2(n-1) for all-reduce, n-1 for all-gather and reduce-scatter, n
    for broadcast (a chain of n ranks)."""
    if kind == "all_reduce":
        return 2 * (n - 1)
    if kind in ("all_gather", "reduce_scatter"):
        return n - 1
    return n


def latency_s(kind: str, n: int, proto: str, hw: str) -> float:
    """NCCL's latency of one ring collective, seconds (tuning.cc ``ncclTopoTuneModel``, one node):
    base + nsteps × the link class ``hw``'s per-step latency for ``proto``; a broadcast
    (``sameChannels``) pays one step, and so does a point-to-point call (send/recv, all-to-all:
    NCCL's tuner has no entry for them; meshcast charges them one step of a ring)."""
    steps = 1 if kind in ("broadcast",) + P2P_KINDS else ring_steps(kind, n)
    return (BASE_LATENCY_US[proto] + steps * HW_LATENCY_US[hw][proto]) * 1e-6


def bus_bandwidth(proto: str, bus_Bps: float, ll_max_Bps: float | None) -> float:
    """Bus bandwidth of protocol ``proto``, bytes/s, from the ring's ``bus_Bps`` (Simple's;
    tuning.cc): LL half of it, capped at ``llMaxBws`` (``ll_max_Bps``, None: no cap); LL128 0.92
    (its cap, nChannels × 36.7 GB/s on Hopper, is above that on H100/H200)."""
    if proto == "LL":
        half = LL_BUS_FRACTION * bus_Bps
        return half if ll_max_Bps is None else min(half, ll_max_Bps)
    if proto == "LL128":
        return LL128_BUS_FRACTION * bus_Bps
    return bus_Bps


def algorithm_bandwidth(kind: str, n: int, proto: str, bus_Bps: float, ll_max_Bps: float | None) -> float:
    """NCCL's algorithm bandwidth of a ring collective, bytes/s (tuning.cc): the protocol's bus
    bandwidth × nRanks / nsteps (the ``bandwidths`` of its tuning table)."""
    return bus_bandwidth(proto, bus_Bps, ll_max_Bps) * n / ring_steps(kind, n)


def tuner_time(kind: str, nbytes: float, n: int, proto: str, bus_Bps: float, hw: str,
               ll_max_Bps: float | None) -> float:
    """NCCL's own estimate of a ring collective with ``proto``, seconds (tuning.cc
    ``ncclTopoGetAlgoTime``): latency + tuner bytes / algorithm bandwidth."""
    alg = algorithm_bandwidth(kind, n, proto, bus_Bps, ll_max_Bps)
    return latency_s(kind, n, proto, hw) + tuner_bytes(kind, nbytes, n) / alg


def protocol(kind: str, nbytes: float, n: int, bus_Bps: float, hw: str, ll_max_Bps: float | None,
             ll128: bool) -> str:
    """The protocol NCCL runs: for collectives the cheapest by :func:`tuner_time` (enqueue.cc
    ``topoGetAlgoInfo``; LL128 only where enabled: NVLink, Volta or newer); for send/recv and
    all-to-all LL up to ``P2P_CHANNELS_PER_PEER × P2P_LL_THRESHOLD`` bytes per peer (addP2pToPlan)."""
    if kind in P2P_KINDS:
        peer = nbytes / n if kind == "all_to_all" else nbytes
        return "LL" if peer <= P2P_CHANNELS_PER_PEER * P2P_LL_THRESHOLD else "Simple"
    allowed = PROTOCOLS if ll128 else ("LL", "Simple")
    return min(allowed, key=lambda p: tuner_time(kind, nbytes, n, p, bus_Bps, hw, ll_max_Bps))


def max_channels(kind: str, n: int) -> int:
    """Channels a call of this kind can use at most: NCCL's 24 coll channels (H100/H200), or for
    point-to-point 32 per peer (``p2pnChannelsPerPeer``), reached only by large messages
    (:func:`_p2p_channels`)."""
    return P2P_CHANNELS_PER_PEER if kind in P2P_KINDS else COLL_CHANNELS


def _p2p_min_channels(kind: str, n: int) -> int:
    """Channels per peer a point-to-point call starts from: 32 halved while channels x n ranks
    exceeds NCCL's 32 p2p channels (enqueue.cc ``scheduleP2pTasksToPlan`` nChannelsMin; n = 2
    for send/recv)."""
    return max(1, P2P_CHANNELS_PER_PEER // (n if kind == "all_to_all" else 2))


def _p2p_max_part(proto: str) -> float:
    """Largest part of a point-to-point message per channel on one node before NCCL doubles the
    channels, bytes: 32 x stepSize (addP2pToPlan maxPartSize; Simple 32 x 512 KiB = 16 MiB)."""
    return 32 * ((512 << 10) if proto == "Simple" else (64 << 10))


def active_channels(kind: str, nbytes: float, n: int, proto: str) -> float:
    """:func:`channels` as a continuous count (NCCL's integer count without its rounding down), so
    that a call's time never falls as its size grows: min(max channels, max(1, bytes / bytes per
    channel))."""
    most = max_channels(kind, n)
    if kind in P2P_KINDS:
        peer = nbytes / n if kind == "all_to_all" else nbytes
        start = max(1.0, min(_p2p_min_channels(kind, n), peer / _p2p_part(proto)))
        return min(most, max(start, peer / _p2p_max_part(proto)))
    return max(1.0, min(most, tuner_bytes(kind, nbytes, n) / _per_channel(proto, n)))


def _p2p_part(proto: str) -> float:
    """Smallest part of a point-to-point message per channel, bytes: stepSize/8 (addP2pToPlan)."""
    return (512 << 10) / 8 if proto == "Simple" else (64 << 10) / 8


def _per_channel(proto: str, n: int) -> float:
    """Bytes per channel before NCCL adds one (topoGetAlgoInfo): threads × thread threshold."""
    return MAX_THREADS[proto] * THREAD_THRESHOLD[proto] * (n if proto == "LL" else 1)


def channels(kind: str, nbytes: float, n: int, proto: str) -> int:
    """Channels (thread blocks) a call runs on at this size (enqueue.cc ``topoGetAlgoInfo``): the
    largest count c <= :func:`max_channels` with tuner bytes >= c x threads x threshold, at least
    1. Point-to-point: :func:`_p2p_channels`."""
    if kind in P2P_KINDS:
        return _p2p_channels(kind, nbytes / n if kind == "all_to_all" else nbytes, n, proto)
    most = max_channels(kind, n)
    return int(max(1, min(most, tuner_bytes(kind, nbytes, n) // _per_channel(proto, n))))


def _p2p_channels(kind: str, peer: float, n: int, proto: str) -> int:
    """Channels of one peer's ``peer`` bytes (enqueue.cc ``addP2pToPlan``, one node): parts of at
    least stepSize/8 (64 KiB with Simple, 8 KiB with LL) on at most :func:`_p2p_min_channels`,
    then doubled while a part exceeds :func:`_p2p_max_part` and the count is at most 16. On 2
    GPUs a send/recv or an all-to-all's per-peer block runs on 16 channels up to 256 MiB and on
    32 above (the all-to-all's self copy then shares those channels, each work on half the warps:
    device/sendrecv.h)."""
    c = int(max(1, min(_p2p_min_channels(kind, n), -(-peer // _p2p_part(proto)))))
    while max(_p2p_part(proto), -(-peer // c)) > _p2p_max_part(proto) and c <= P2P_CHANNELS_PER_PEER // 2:
        c *= 2
    return c
