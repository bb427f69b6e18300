"""Collectives as the GPU's time plus the host's call (issue #12 item 4, session 40).

* Run 40 (2xH200, harness v2, registered in 069ea9e by the committed profile) timed each case three ways:
  alone (``time_s``), replayed from a CUDA graph (``time_graph_s``: the GPU's time) and issued while
  the stream is held (``host_issue_s``: the host's seconds per call). Candidate coll40
  (validation/coll40_fit.py) refits the NVLink law on the GPU's time with NCCL's own protocol choice.
* Run 41 and 41b (a fresh machine, registered in c223e6b before they ran) judge it.
"""
from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

import pytest

from simulator.calibration import calibration_for, load_calibration
from simulator.comm import fabric_from_hardware, low_latency
from validation import coll40_fit
from validation.hardware import hardware_for
from validation.predict import predict_record
from validation.prereg_collectives import gpu_time_s, registered, score
from validation.records import load_measurements

ROOT = Path(__file__).resolve().parent.parent
MEAS = ROOT / "validation/measurements"
LOGS = MEAS / "logs"
CANDIDATE = ROOT / "validation/candidates/h200-sxm-coll40.yaml"
KINDS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv", "all_to_all")
MiB = 1 << 20


def _v2_records(run: str) -> list[dict]:
    return [r for r in load_measurements(MEAS / f"h200x2_collectives{run}.json").records if "time_graph_s" in r]


@pytest.mark.parametrize("run", ["40", "40b", "41", "41b"])
def test_a_single_call_is_the_hosts_call_plus_the_gpus_time(run):
    """Up to 64 MiB a call timed alone took about host issue + GPU time (median ratio 0.95-1.20 over
    102 cases per run); below 64 KiB the GPU's time was 7-26 us, the host's 26-65 us per call."""
    recs = _v2_records(run)
    assert len(recs) == 102
    ratio = statistics.median(r["time_s"] / (r["host_issue_s"] + r["time_graph_s"]) for r in recs)
    assert 0.93 <= ratio <= 1.22
    small = [r["time_graph_s"] for r in recs if r["bytes"] <= 64 << 10]
    assert 7e-6 < min(small) and max(small) < 26e-6
    assert min(r["host_issue_s"] for r in recs) > 25e-6


def test_run40_as_registered_by_the_committed_profile():
    """The tenth registered 2-GPU run: the committed profile's single-call MAPE per kind (all sizes)."""
    got = score(LOGS / "prereg_collectives40_h200x2.txt", MEAS / "h200x2_collectives40.json")
    committed = {k: v[0] for k, v in got.items()}
    assert committed == pytest.approx({"all_reduce": 0.1493, "all_gather": 0.2262, "reduce_scatter": 0.2350,
                                       "broadcast": 0.2227, "send_recv": 0.2220, "all_to_all": 0.1027}, abs=5e-4)


def test_run41_registered_gpu_time_of_the_candidate():
    """Registered before the run: coll40's GPU time per kind on the fresh machine, all sizes and from 1 MiB.
    Below 1 MiB the same machine's GPU times moved 8 -> 14 us between its two runs (41, 41b)."""
    prereg = LOGS / "prereg_collectives41_h200x2.txt"
    assert len(registered(prereg)) == 120
    gpu = {run: {k: v[2] for k, v in score(prereg, MEAS / f"h200x2_collectives{run}.json").items()} for run in ("41", "41b")}
    assert gpu["41"] == pytest.approx({"all_reduce": 0.1449, "all_gather": 0.0599, "reduce_scatter": 0.0702,
                                       "broadcast": 0.0835, "send_recv": 0.1316, "all_to_all": 0.0886}, abs=5e-4)
    assert max(gpu["41b"].values()) == pytest.approx(0.0986, abs=5e-4)
    for run in ("41", "41b"):
        big = score(prereg, MEAS / f"h200x2_collectives{run}.json", min_bytes=MiB)
        assert max(v[2] for v in big.values()) <= 0.085


def test_run41_single_calls_still_depend_on_the_host():
    """A single call's time_s adds the host's call, which the fresh machine issued up to 31% slower than
    run 40's (the candidate's collective_host_s; per kind -4..+31%): neither profile is within 10% per kind there."""
    got = score(LOGS / "prereg_collectives41_h200x2.txt", MEAS / "h200x2_collectives41.json")
    assert min(v[0] for v in got.values()) > 0.19 and min(v[1] for v in got.values()) > 0.17


@pytest.mark.xfail(strict=True, reason="issue #12: every collective kind within 10% on a fresh 2-GPU run; "
                   "run 41's all-reduce (14.5%) and send/recv (13.2%) GPU times miss below 1 MiB")
def test_every_kind_within_10_percent_of_gpu_time_on_every_fresh_run():
    prereg = LOGS / "prereg_collectives41_h200x2.txt"
    for run in ("41", "41b"):
        assert max(v[2] for v in score(prereg, MEAS / f"h200x2_collectives{run}.json").values()) <= 0.10


def test_the_candidate_profile_is_what_the_fit_writes():
    cal, report = coll40_fit.fit_candidate()
    cand = load_calibration(str(CANDIDATE))
    assert cand.link("nvlink").alpha_s == pytest.approx(cal.link("nvlink").alpha_s, rel=1e-6)
    assert cand.collective_host_s == pytest.approx(cal.collective_host_s, rel=1e-9)
    assert report.fits["comm:nvlink"].n_records == 120


def test_gpu_time_is_graph_then_batched():
    rec = {"bytes": 1 << 30, "time_batched_s": 2e-3, "time_graph_s": None}
    assert gpu_time_s(rec) == 2e-3 and gpu_time_s(rec, min_batched_bytes=2 << 30) is None
    assert gpu_time_s({"bytes": 1024, "time_graph_s": 1e-5, "time_batched_s": 3e-5}) == 1e-5


def test_single_call_adds_the_host_call_scaled_by_host_speed():
    mf = load_measurements(MEAS / "h200x2_collectives41.json")
    hw = hardware_for(mf)
    cand = load_calibration(str(CANDIDATE))
    rec = {"kind": "all_reduce", "bytes": 1024, "world": 2, "dtype": "bfloat16"}
    gpu = predict_record(rec, hw, cand, gpu_only=True).time_s
    assert predict_record(rec, hw, cand).time_s == pytest.approx(gpu + cand.collective_host_s["all_reduce"])
    slow = cand.with_host_speed(1.5)
    assert predict_record(rec, hw, slow).time_s == pytest.approx(gpu + 1.5 * cand.collective_host_s["all_reduce"])


def test_nccl_protocol_switch_per_kind_replaces_the_one_size():
    """With NCCL's bus bandwidth the LL/Simple switch is NCCL's own per kind (2 GPUs: all-reduce LL to
    ~1.7 MB, send/recv to 512 KiB per peer); without it, the one ll_max_bytes of the committed profile."""
    hw = hardware_for(load_measurements(MEAS / "h200x2_collectives41.json"))
    cand = fabric_from_hardware(hw, load_calibration(str(CANDIDATE))).levels[0]
    assert low_latency(cand, "all_reduce", 1 * MiB, 2) and not low_latency(cand, "all_reduce", 2 * MiB, 2)
    assert low_latency(cand, "send_recv", 512 << 10, 2) and not low_latency(cand, "send_recv", 1 * MiB, 2)
    committed = fabric_from_hardware(hw, calibration_for(hw.accelerator)[0]).levels[0]
    assert committed.nccl_bus_Bps == 0
    assert low_latency(committed, "all_reduce", committed.ll_max_bytes, 2)
    assert not low_latency(committed, "all_reduce", committed.ll_max_bytes + 1, 2)
    assert not low_latency(dataclasses.replace(cand, ll_beta_Bps=0.0), "all_reduce", 1024, 2)
