"""simulator.nccl against NCCL's own log on 2 H200s (validation/measurements/logs/h200x2_nccl_tuning.log):
its cost table, and the protocol and channels it ran every call of the collectives suite with."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from simulator import nccl

LOG = Path(__file__).resolve().parent.parent / "validation/measurements/logs/h200x2_nccl_tuning.log"
BUS = 360e9            # the ring graph of the log: 12 channels x 30 GB/s ("Pattern 4 ... nChannels 12, bw 30")
HOPPER = nccl.LL_MAX_BW_BPS["nvidia-hopper"]
KINDS = {"AllReduce": "all_reduce", "AllGather": "all_gather", "ReduceScatter": "reduce_scatter",
         "Broadcast": "broadcast"}


def _calls() -> list[tuple[str, int, str, int]]:
    """(kind, meshcast bytes, protocol, channels) of every call in the log. The log gives
    reduce-scatter's output bytes (meshcast's bytes are its input: n x) and all-gather's input shard."""
    out = []
    for line in LOG.read_text().splitlines():
        m = re.match(r"(\w+): (\d+) Bytes -> Algo RING proto (\w+) channel\{Lo\.\.Hi\}=\{(\d+)\.\.(\d+)\}", line)
        if m:
            kind = KINDS[m[1]]
            nbytes = int(m[2]) * (2 if kind == "reduce_scatter" else 1)
            proto = {"SIMPLE": "Simple"}.get(m[3], m[3])
            out.append((kind, nbytes, proto, int(m[5]) - int(m[4]) + 1))
    return out


def _table() -> dict[tuple[str, str], tuple[float, float]]:
    """{(kind, protocol): (latency µs, algorithm bandwidth GB/s)} of the log's ring columns."""
    out = {}
    for line in LOG.read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if cells[0] in KINDS and len(cells) > 7 and cells[4] != "0.0/   0.0":
            for proto, cell in zip(nccl.PROTOCOLS, cells[4:7]):
                lat, bw = (float(x) for x in cell.split("/"))
                out.setdefault((KINDS[cells[0]], proto), (lat, bw))     # the first table: Tree, Ring, ...
    return out


def test_the_log_covers_every_call():
    calls = _calls()
    assert len(calls) == 80 and {c[0] for c in calls} == set(KINDS.values())


@pytest.mark.parametrize("kind,proto", [(k, p) for k in KINDS.values() for p in nccl.PROTOCOLS])
def test_latency_and_bandwidth_are_nccls_table(kind, proto):
    lat, bw = _table()[(kind, proto)]
    assert nccl.latency_s(kind, 2, proto, "nvlink") * 1e6 == pytest.approx(lat, abs=0.05)
    assert nccl.algorithm_bandwidth(kind, 2, proto, BUS, HOPPER) / 1e9 == pytest.approx(bw, abs=0.05)


def test_protocol_of_every_call_is_nccls():
    for kind, nbytes, proto, _ in _calls():
        assert nccl.protocol(kind, nbytes, 2, BUS, "nvlink", HOPPER, True) == proto, (kind, nbytes)


def test_channels_of_every_call_are_nccls():
    """NCCL's tuner count exactly where it is below 16; above, the log's count can be 2 lower
    (its scheduler rounds each channel's share to 16 KiB of traffic: 22 of 24), never higher."""
    for kind, nbytes, proto, used in _calls():
        ours = nccl.channels(kind, nbytes, 2, proto)
        assert ours == used if ours < 16 else 0 <= ours - used <= 2, (kind, nbytes, ours, used)


def test_switch_sizes_two_and_four_gpus():
    """The sizes where NCCL leaves LL, from its own formulas (docs/cost_model.md §3): 2 GPUs,
    all-reduce between 1 and 2 MiB, reduce-scatter between 2 and 4 MiB; 4 GPUs, all-reduce runs
    LL128 between about 2.5 and 9.4 MB, all-gather leaves LL above a 768 KiB shard."""
    def proto(kind, nbytes, n):
        return nccl.protocol(kind, nbytes, n, BUS, "nvlink", HOPPER, True)
    assert proto("all_reduce", 1 << 20, 2) == "LL" and proto("all_reduce", 2 << 20, 2) == "Simple"
    assert proto("reduce_scatter", 2 << 20, 2) == "LL" and proto("reduce_scatter", 4 << 20, 2) == "Simple"
    assert [proto("all_reduce", b * 1e6, 4) for b in (2.4, 2.6, 9.3, 9.5)] == ["LL", "LL128", "LL128", "Simple"]
    assert proto("all_gather", 768 << 10, 4) == "LL" and proto("all_gather", 1 << 20, 4) == "Simple"
    assert "LL128" not in {proto(k, 2 ** e, 2) for k in KINDS.values() for e in range(10, 33)}


def test_point_to_point_threshold_and_channels():
    """send/recv and all-to-all: LL up to 32 channels x 16 KiB per peer (addP2pToPlan), on 32/n channels."""
    assert nccl.protocol("send_recv", 512 << 10, 2, BUS, "nvlink", HOPPER, True) == "LL"
    assert nccl.protocol("send_recv", 1 << 20, 2, BUS, "nvlink", HOPPER, True) == "Simple"
    assert nccl.protocol("all_to_all", 2 << 20, 4, BUS, "nvlink", HOPPER, True) == "LL"
    assert nccl.channels("send_recv", 64 << 10, 2, "Simple") == 1 and nccl.channels("send_recv", 64 << 20, 2, "Simple") == 16
    assert nccl.channels("all_to_all", 8 << 20, 4, "Simple") == 8


def test_point_to_point_channels_double_above_16_mib_parts():
    """addP2pToPlan doubles a peer's channels while a part exceeds 32 x 512 KiB: 2 GPUs, 16
    channels up to 256 MiB per peer, 32 above (an all-to-all of 1 GiB and 4 GiB: 32)."""
    assert nccl.channels("send_recv", 256 << 20, 2, "Simple") == 16
    assert nccl.channels("send_recv", 1 << 30, 2, "Simple") == 32
    assert [nccl.channels("all_to_all", b, 2, "Simple") for b in (256 << 20, 1 << 30, 4 << 30)] == [16, 32, 32]
    assert [nccl.channels("all_to_all", b, 4, "Simple") for b in (256 << 20, 1 << 30, 4 << 30)] == [8, 16, 32]
    assert nccl.max_channels("send_recv", 2) == 32

def test_active_channels_grow_with_size_to_the_maximum():
    for kind in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv", "all_to_all"):
        for proto in ("LL", "Simple"):
            counts = [nccl.active_channels(kind, 2 ** e, 2, proto) for e in range(10, 33)]
            assert counts == sorted(counts) and counts[0] >= 1 and counts[-1] == nccl.max_channels(kind, 2)
