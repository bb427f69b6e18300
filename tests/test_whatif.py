"""meshcast whatif: sweeps with a fixed plan or re-planning, physics monotonicity, invalid points,
JSON shape, traces, the HTML report (without a browser), cost arithmetic and bad sweep specs."""
import io
import json
import math
import time
from types import SimpleNamespace

import pytest

from hardware_specs.errors import MeshcastError
from meshcast.cli import main
from planners.whatif import Base, Progress, parse_sweep, parse_sweeps, run_sweep
from simulator.costing import train_cost
from simulator.plan import ParallelPlan

# llama3-8b on 64 GPUs, tp 8: eight data-parallel replicas across eight nodes, so gradient
# reduction crosses the scale-out tier and tensor parallelism the NVLink domain
BASE_8B = dict(model="llama3-8b", cluster="dgx-h100", gpus=64,
               plan=ParallelPlan(tp=8, pp=1, mbs=1, gbs=64, seq=4096, overlap_grad_reduce=False))


def sweep(*specs, replan=False, **kw):
    base_kw = {**BASE_8B, **kw}
    return run_sweep(Base(replan=replan, **base_kw), parse_sweeps(list(specs)))


def steps(s):
    return [p.result.step_time_s for p in s.points]


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def non_increasing(xs, rel=1e-12):
    return all(b <= a * (1 + rel) for a, b in zip(xs, xs[1:]))


# ---- physics: a fixed plan never gets slower on better hardware --------------------------------
@pytest.mark.parametrize("spec", ["ib_bandwidth=0.25x,0.5x,1x,2x,4x,16x",
                                  "nvlink_bandwidth=0.25x,0.5x,1x,2x,4x",
                                  "hbm_bandwidth=0.5x,1x,1.5x,2x"])
def test_more_bandwidth_is_never_slower(spec):
    s = sweep(spec)
    assert all(p.status == "ok" for p in s.points)
    t = steps(s)
    assert non_increasing(t), t
    assert t[0] > t[-1]            # and the swept resource matters for this plan


@pytest.mark.parametrize("spec", ["ib_latency=4x,2x,1x,0.5x,0.1x", "nvlink_latency=4x,2x,1x,0.5x"])
def test_less_latency_is_never_slower(spec):
    t = steps(sweep(spec))
    assert non_increasing(t), t


def test_ib_bandwidth_absolute_values_match_multipliers():
    # dgx-h100's NDR NICs carry 50 GB/s per direction: 100e9 is the same point as 2x
    a = steps(sweep("ib_bandwidth=2x"))[0]
    b = steps(sweep("ib_bandwidth=100e9"))[0]
    assert a == pytest.approx(b, rel=1e-12)


def test_h200_is_not_slower_than_h100_on_the_same_plan():
    # one calibration for both, so only the datasheets differ (same GH100 math, more and faster
    # HBM): physics says the H200 is never slower. (With each GPU's own fitted profile the
    # prediction also carries the measured kernel-efficiency differences of the two machines.)
    for model, gpus, plan in (("llama3-8b", 64, BASE_8B["plan"]),
                              ("llama3-70b", 1024, ParallelPlan(tp=8, pp=4, vp=5, mbs=1, gbs=1024, seq=8192))):
        s = sweep("accelerator=h100-sxm,h200-sxm", model=model, gpus=gpus, plan=plan, calibration="h100-sxm")
        h100, h200 = s.points
        assert h100.status == h200.status == "ok"
        assert h200.hardware["accelerator"] == "h200-sxm" and h200.hardware["node"] == "dgx-h100"
        assert h200.result.step_time_s <= h100.result.step_time_s
        assert h200.result.memory.capacity_bytes > h100.result.memory.capacity_bytes
    s = sweep("cluster=dgx-h100,dgx-h200", calibration="h100-sxm")
    assert s.points[1].result.step_time_s <= s.points[0].result.step_time_s


def test_each_accelerator_gets_its_own_calibration_by_default():
    s = sweep("accelerator=h100-sxm,h200-sxm")
    assert "profile h100-sxm" in s.points[0].calibration and "profile h200-sxm" in s.points[1].calibration


def test_more_gpus_more_throughput_at_fixed_batch():
    s = sweep("gpus=16,32,64", plan=ParallelPlan(tp=8, mbs=1, gbs=64, seq=4096))
    tps = [p.result.tokens_per_s for p in s.points]
    assert tps == sorted(tps)


def test_hbm_capacity_changes_fit_not_speed():
    plan = ParallelPlan(tp=8, pp=1, mbs=2, gbs=64, seq=8192, zero_stage=0)
    s = sweep("hbm=24e9,80e9,141e9", plan=plan)
    small, mid, big = s.points
    assert small.status == "does_not_fit" and "GB per GPU" in small.reason and small.result is not None
    assert mid.status == big.status == "ok"
    assert small.result.step_time_s == mid.result.step_time_s == big.result.step_time_s
    assert big.result.memory.capacity_bytes == 141e9


def test_sequence_and_batch_sweeps_change_the_plan_fields():
    s = sweep("seq=2048,4096,8192", "gbs=64,128")
    assert len(s.points) == 6
    assert [(p.result.plan.seq, p.result.plan.gbs) for p in s.points] == [
        (2048, 64), (2048, 128), (4096, 64), (4096, 128), (8192, 64), (8192, 128)]
    per_step = [p.result.step_time_s for p in s.points]
    assert per_step[0] < per_step[2] < per_step[4]        # longer sequences take longer per step


def test_model_and_depth_sweeps():
    s = sweep("model=llama3-8b,llama3-70b", plan=ParallelPlan(tp=8, pp=4, mbs=1, gbs=64, seq=4096), gpus=64)
    assert [p.result.model for p in s.points] == ["llama3-8b", "llama3-70b"]
    assert s.points[1].result.step_time_s > s.points[0].result.step_time_s
    d = sweep("layers=16,32")
    assert [p.result.model for p in d.points] == ["llama3-8b-16L", "llama3-8b-32L"]
    assert d.points[1].result.step_time_s > d.points[0].result.step_time_s


# ---- invalid points are reported with the reason, never dropped --------------------------------
def test_invalid_points_are_reported_with_reason():
    s = sweep("gpus=64,12,40,2")
    assert [p.setting["gpus"] for p in s.points] == ["64", "12", "40", "2"]
    ok, not_nodes, batch, too_few = s.points
    assert ok.status == "ok"
    assert not_nodes.status == "error" and "whole number of 8-GPU nodes" in not_nodes.reason
    # 40 GPUs: tp 8 x dp 5 is a layout, but the global batch of 64 does not split over dp 5
    assert batch.status == "invalid" and batch.reason.startswith("gbs") and "64" in batch.reason
    assert too_few.status == "invalid" and "does not divide" in too_few.reason and too_few.result is None


def test_bigger_than_the_cluster_is_hypothetical_and_said_so():
    s = sweep("gpus=8192,16384", model="llama3-8b", cluster="dgx-h200", plan=ParallelPlan(tp=8, mbs=1, gbs=8192))
    assert s.points[1].status == "ok"
    assert any("enlarged" in n for n in s.points[1].notes) and not s.points[0].notes


# ---- re-planning --------------------------------------------------------------------------------
def test_replan_is_at_least_as_fast_as_the_fixed_plan():
    fixed = sweep("gpus=8,16", plan=ParallelPlan(tp=8, mbs=1, gbs=64, seq=4096))
    replanned = sweep("gpus=8,16", plan=ParallelPlan(tp=8, mbs=1, gbs=64, seq=4096), replan=True)
    for f, r in zip(fixed.points, replanned.points):
        assert r.status == "ok" and r.search["simulated"] > 0
        if f.status == "ok":
            assert r.result.step_time_s <= f.result.step_time_s * (1 + 1e-9)


def test_replan_on_a_hardware_variant_goes_through_the_planner():
    # the planner loads the variant from YAML; the best plan re-simulated here must agree
    s = sweep("hbm=0.5x,1x", "ib_bandwidth=0.5x", model="gpt-1.7b", gpus=16,
              plan=ParallelPlan(gbs=64, seq=2048), replan=True)
    assert [p.status for p in s.points] == ["ok", "ok"]
    for p in s.points:
        assert p.result.memory.total_bytes <= p.result.memory.capacity_bytes
    assert s.points[0].result.memory.capacity_bytes == pytest.approx(s.points[1].result.memory.capacity_bytes / 2)


def test_replan_fix_pins_degrees(capsys):
    code, out, _ = run_cli(capsys, "whatif", "--model", "gpt-1.7b", "--cluster", "dgx-h100", "--gbs", "64",
                           "--seq", "2048", "--tp", "2", "--replan", "--replan-fix", "tp", "--sweep", "gpus=8,16",
                           "--jobs", "1", "--json")
    assert code == 0
    d = json.loads(out)
    assert [p["plan"]["tp"] for p in d["points"]] == [2, 2]
    assert d["mode"] == "replan" and d["points"][0]["search"]["fixed"] == {"tp": 2}


def test_no_plan_fits_is_a_point_not_a_crash():
    s = sweep("hbm=2e9", gpus=8, plan=ParallelPlan(gbs=8, seq=4096), replan=True)
    assert s.points[0].status == "no_plan" and s.points[0].result is None
    assert s.points[0].reason.startswith("memory:") and "2.0 GB" in s.points[0].reason


def test_two_workers_give_the_same_answers():
    specs = parse_sweeps(["ib_bandwidth=0.5x,1x,2x", "seq=2048,4096"])
    one = run_sweep(Base(**BASE_8B), specs, jobs=1)
    two = run_sweep(Base(**BASE_8B), specs, jobs=2)
    assert [p.label for p in one.points] == [p.label for p in two.points]
    assert steps(one) == steps(two)


# ---- CLI: table, JSON, report, traces ------------------------------------------------------------
CLI_BASE = ["whatif", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "64", "--tp", "8", "--mbs", "1",
            "--gbs", "64", "--seq", "4096"]


def test_cli_table(capsys):
    code, out, _ = run_cli(capsys, *CLI_BASE, "--sweep", "gpus=32,64,20", "--tokens", "1e12")
    assert code == 0
    assert "gpus=32" in out and "gpus=64" in out and "tokens/s" in out and "days" in out
    assert "gpus=20  error: gpus: 20 is not a whole number" in out
    assert "upper bound of GPU board power only" in out


def test_cli_json_shape(capsys):
    code, out, _ = run_cli(capsys, *CLI_BASE, "--sweep", "accelerator=h100-sxm,h200-sxm", "--sweep", "gpus=64,7",
                           "--tokens", "15e12", "--price", "h100-sxm=2,h200-sxm=3", "--pue", "1.2", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["command"] == "whatif" and d["mode"] == "fixed"
    assert d["sweeps"] == [{"variable": "accelerator", "values": ["h100-sxm", "h200-sxm"]},
                           {"variable": "gpus", "values": ["64", "7"]}]
    assert len(d["points"]) == 4
    p0, p1, p2, _ = d["points"]
    assert set(p0) >= {"index", "label", "setting", "status", "reason", "notes", "hardware", "plan", "result",
                       "cost", "trace", "calibration"}
    assert p0["setting"] == {"accelerator": "h100-sxm", "gpus": "64"} and p0["label"] == "accelerator=h100-sxm, gpus=64"
    assert p0["status"] == "ok" and p0["reason"] is None
    assert set(p0["result"]) >= {"step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "hfu", "fits",
                                 "memory", "time_breakdown_s", "bottleneck"}
    assert p1["status"] == "invalid" and p1["result"] is None and p1["plan"] is None
    assert p1["reason"].startswith("tp*pp*cp") and "7 GPUs" in p1["reason"]
    assert p0["cost"]["price_per_gpu_hour_usd"] == 2 and p2["cost"]["price_per_gpu_hour_usd"] == 3
    c = p0["cost"]
    assert c["days"] == pytest.approx(15e12 / p0["result"]["tokens_per_s"] / 86400)
    assert c["facility_energy_kwh"] == pytest.approx(1.2 * c["gpu_energy_kwh"])
    assert p2["hardware"]["accelerator"] == "h200-sxm"


def test_cli_report_and_traces(tmp_path, capsys):
    html, traces = tmp_path / "w.html", tmp_path / "traces"
    code, out, _ = run_cli(capsys, *CLI_BASE, "--sweep", "ib_bandwidth=0.5x,1x,2x", "--sweep", "gpus=64,12",
                           "-o", str(html), "--trace-dir", str(traces), "--tokens", "1e12")
    assert code == 0 and "wrote 3 traces" in out
    files = sorted(traces.iterdir())
    assert len(files) == 3
    for f in files:
        ev = json.loads(f.read_text())["traceEvents"]
        assert any(e.get("ph") == "X" for e in ev)
    text = html.read_text()
    assert text.count('class="plotly-graph-div"') == 5 or text.count("Plotly.newPlot") == 5
    assert text.count("Plotly.newPlot") == 5
    assert "<script src=\"http" not in text and "not a whole number" in text
    for heading in ("Throughput and MFU", "Step time breakdown", "Memory", "Roofline", "Cost and time to train"):
        assert f"<h2>{heading}</h2>" in text


@pytest.mark.parametrize("spec,needle", [
    ("foo=1,2", "unknown variable 'foo'"),
    ("gpus", "expected NAME=V1,V2"),
    ("gpus=", "empty value"),
    ("gpus=8,,16", "empty value"),
    ("gpus=abc", "not a number"),
    ("gpus=-8", "not a positive integer"),
    ("gpus=8.5", "not a positive integer"),
    ("ib_bandwidth=0x", "must be positive"),
    ("ib_bandwidth=fast", "not a number"),
    ("accelerator=h900", "unknown name 'h900'"),
    ("cluster=nowhere", "unknown name"),
    ("model=llama9", "unknown name"),
    ("zero=5", "not one of"),
    ("gpus=8,8", "given twice"),
    ("gpus=64:8:x2", "0 < LO <= HI"),
    ("gpus=8:64:x1", "above x1"),
    ("gpus=8:64", "LO:HI:STEP"),
])
def test_bad_sweep_spec_is_one_line_exit_2(capsys, spec, needle):
    code, out, err = run_cli(capsys, *CLI_BASE, "--sweep", spec)
    assert code == 2 and out == ""
    assert err.startswith("error: --sweep: ") and err.count("\n") == 1 and "Traceback" not in err
    assert needle in err


def test_no_sweep_and_duplicate_sweep_name_sweep(capsys):
    code, _, err = run_cli(capsys, *CLI_BASE)
    assert code == 2 and err.startswith("error: --sweep:")
    code, _, err = run_cli(capsys, *CLI_BASE, "--sweep", "gpus=8", "--sweep", "num_gpus=16")
    assert code == 2 and err.startswith("error: --sweep:") and "swept twice" in err


@pytest.mark.parametrize("extra,field", [
    (["--price", "cheap"], "price"), (["--price", "-1"], "price"), (["--tokens", "0"], "tokens"),
    (["--pue", "0.5"], "pue"), (["--replan-fix", "tp"], "replan-fix"), (["--jobs", "0"], "jobs"),
])
def test_bad_options_exit_2(capsys, extra, field):
    code, _, err = run_cli(capsys, *CLI_BASE, "--sweep", "gpus=64", *extra)
    assert code == 2 and err.startswith(f"error: {field}:") and err.count("\n") == 1


def test_sweep_ranges_and_aliases():
    assert [lv.value for lv in parse_sweep("gpus=512:4096:x2").levels] == [512, 1024, 2048, 4096]
    assert [lv.value for lv in parse_sweep("seq=1024:4096:1024").levels] == [1024, 2048, 3072, 4096]
    assert [lv.label for lv in parse_sweep("ib_bandwidth=0.5x:2x:x2").levels] == ["0.5x", "1x", "2x"]
    assert parse_sweep("num_gpus=8").name == "gpus" and parse_sweep("hbm_capacity=80e9").name == "hbm"
    assert parse_sweep("hbm=80e9").levels[0].value == ("abs", 80e9)
    with pytest.raises(MeshcastError) as e:
        parse_sweeps(["gpus=1:10000:1", "seq=1:10:1"])
    assert e.value.field == "--sweep" and "at most" in e.value.reason


def test_progress_bar_after_a_second():
    stream = io.StringIO()
    bar = Progress(10, True, stream)
    bar.update(1)
    assert stream.getvalue() == ""              # nothing in the first second
    bar.start = time.perf_counter() - 2.0
    bar.update(5)
    bar.done()
    out = stream.getvalue()
    assert "5/10 points" in out and "eta" in out and out.endswith("\n")
    quiet = io.StringIO()
    off = Progress(10, False, quiet)
    off.start -= 5
    off.update(3)
    assert quiet.getvalue() == ""


# ---- costing ------------------------------------------------------------------------------------
def fake_result(tokens_per_s=1e6, gpus=1024, accelerator="h100-sxm"):
    return SimpleNamespace(tokens_per_s=tokens_per_s, num_gpus=gpus, accelerator=accelerator)


def test_costing_arithmetic():
    r = fake_result(tokens_per_s=2.5e6, gpus=2048)
    c = train_cost(r, 15e12, price=2.0, pue=1.3)
    seconds = 15e12 / 2.5e6
    assert c["time_s"] == pytest.approx(seconds)
    assert c["days"] == pytest.approx(15e12 / 2.5e6 / 86400)
    assert c["gpu_hours"] == pytest.approx(seconds / 3600 * 2048)
    assert c["cost_usd"] == pytest.approx(c["gpu_hours"] * 2.0)
    # H100 SXM: 700 W TDP -> energy = TDP x GPUs x time
    assert c["tdp_w"] == 700
    assert c["gpu_energy_kwh"] == pytest.approx(700 * 2048 * seconds / 3.6e6)
    assert c["facility_energy_kwh"] == pytest.approx(1.3 * c["gpu_energy_kwh"])
    assert c["usd_per_million_tokens"] == pytest.approx(2048 / 2.5e6 * 1e6 / 3600 * 2.0)
    assert "upper bound" in c["energy_note"] and "GPU board power only" in c["energy_note"]


def test_costing_catalog_price_and_unknown_accelerator():
    c = train_cost(fake_result(), 1e12)
    assert c["price_per_gpu_hour_usd"] == 2.5 and c["price_source"].startswith("catalog")
    assert c["cost_usd"] == pytest.approx(c["gpu_hours"] * 2.5)
    u = train_cost(fake_result(accelerator="my-own-chip"), 1e12)
    assert u["cost_usd"] is None and u["gpu_energy_kwh"] is None and u["days"] == pytest.approx(1e12 / 1e6 / 86400)
    rates = train_cost(fake_result(), None, price=3.0)
    assert rates["days"] is None and rates["cost_usd"] is None
    assert rates["usd_per_million_tokens"] == pytest.approx(1024 / 1e6 * 1e6 / 3600 * 3.0)


@pytest.mark.parametrize("kw,field", [(dict(tokens=0), "tokens"), (dict(tokens=-1.0), "tokens"),
                                      (dict(tokens=math.inf), "tokens"), (dict(tokens=1e12, price=0), "price"),
                                      (dict(tokens=1e12, pue=0.9), "pue")])
def test_costing_rejects_bad_input(kw, field):
    with pytest.raises(MeshcastError) as e:
        train_cost(fake_result(), **kw)
    assert e.value.field == field


def test_costing_on_a_real_result_matches_the_sweep():
    s = sweep("gpus=64", tokens=1e12)
    p = s.points[0]
    assert p.cost["days"] == pytest.approx(1e12 / p.result.tokens_per_s / 86400)
    assert p.cost["cost_usd"] == pytest.approx(1e12 / p.result.tokens_per_s / 3600 * 64 * 2.5)
