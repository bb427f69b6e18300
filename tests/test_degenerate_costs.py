"""Costs that make degenerate plans look free (issue #9 part 5): groups that straddle nodes,
the per-chunk costs of interleaving, context parallelism at short sequences, and heterogeneous
plans run stage by stage. Each test fails on the code before the fix."""
from hardware_specs import load_hardware
from simulator.calibration import calibration_for
from simulator.comm import collective_time, fabric_from_hardware, flat_time

HW = load_hardware("dgx-h100", 64)
CAL, _ = calibration_for(HW.accelerator)
FABRIC = fabric_from_hardware(HW, CAL)


def test_tp3_groups_straddling_nodes_run_at_the_inter_node_tier():
    """tp=3 on 8-GPU nodes: groups {6,7,8}, {15,16,17}, ... span two nodes; the ring waits on
    the NIC edge, so per byte tp=3 is slower than tp=4 (aligned, all NVLink) and runs at the
    inter-node tier's speed."""
    nbytes = 64e6
    inner, outer = FABRIC.levels[0], FABRIC.levels[1]
    for kind in ("all_reduce", "all_gather", "reduce_scatter"):
        t3 = collective_time(FABRIC, kind, nbytes, 3, 1)
        t4 = collective_time(FABRIC, kind, nbytes, 4, 1)
        # per-rank bytes moved: reduce-scatter/all-reduce (n-1)/n of B, all-gather (n-1)·B
        moved = {"all_reduce": 2 * 2 / 3, "all_gather": 2, "reduce_scatter": 2 / 3}[kind] * nbytes
        moved4 = {"all_reduce": 2 * 3 / 4, "all_gather": 3, "reduce_scatter": 3 / 4}[kind] * nbytes
        assert t3 / moved > 2 * t4 / moved4, kind
        assert t3 == flat_time(outer, kind, nbytes, 3, FABRIC.fraction(kind), FABRIC.alpha_fraction(kind))
        assert t3 > flat_time(inner, kind, nbytes, 3, FABRIC.fraction(kind), FABRIC.alpha_fraction(kind))
    # tp=6 straddles too; cp=2 over tp=3 (a block of 6 ranks) as well; tp=2 and tp=8 do not
    assert collective_time(FABRIC, "all_reduce", nbytes, 6, 1) > 2 * collective_time(FABRIC, "all_reduce", nbytes, 8, 1)
    assert collective_time(FABRIC, "send_recv", nbytes, 2, 3) > 2 * collective_time(FABRIC, "send_recv", nbytes, 2, 4)


def test_interleaved_fill_crosses_every_chunk_boundary():
    """The closed form charges 2(v·p - 1) fill/drain transfers, as the op-by-op replay does
    (it charged 2(p - 1) whatever v was: an extra virtual chunk was free)."""
    from simulator.schedule import pipeline_time, timeline

    p, m, x = 4, 8, 0.01
    for v in (2, 4):
        replay = max(e.end_s for e in timeline([1.0] * p, [2.0] * p, m, v, "interleaved", x))
        closed = pipeline_time([1.0] * p, [2.0] * p, m, v, x, True, overlap_cost=0.0)
        assert abs(replay - closed) < 1e-9, (v, replay, closed)


def test_each_virtual_chunk_pays_its_pipeline_messages():
    """llama3-70b on 1024 H100s, tp=2 cp=2 pp=8: the pipeline sends grow with vp (2v messages
    per micro-batch, overlapped at comm_overlap_slowdown, and 2(v·p - 1) in fill and drain)."""
    from models import load_model
    from simulator import ParallelPlan, simulate

    hw = load_hardware("dgx-h100", 1024)
    cal, _ = calibration_for(hw.accelerator)
    model = load_model("llama3-70b")
    res = {vp: simulate(model, hw, ParallelPlan(tp=2, cp=2, pp=8, vp=vp, gbs=1024, seq=8192), cal) for vp in (5, 10)}
    m, p2p, slow = res[5].plan.microbatches(), res[5].p2p_s, cal.comm_overlap_slowdown
    for vp, r in res.items():
        want = 2 * (vp * 8 - 1) * p2p + slow * 2 * vp * (m - 1) * p2p
        assert abs(r.breakdown["pp"] - want) < 1e-9 * want
    # five more chunks per stage cost 2·5·8 more fill transfers and 2·5 more per micro-batch
    assert res[10].breakdown["pp"] - res[5].breakdown["pp"] > 80 * p2p


def test_context_parallelism_at_short_sequences_pays_its_ring():
    """llama3-70b, tp=8 pp=4 on 256 H100s (cp crosses nodes): at 4K tokens each ring step's
    K/V transfer is as long as the tiny attention step it hides under, so the exchange is
    exposed and cp=2 is slower than cp=1 at equal GPUs; at 128K the ring hides and cp helps."""
    from models import load_model
    from simulator import ParallelPlan, simulate

    hw = load_hardware("dgx-h100", 256)
    cal, _ = calibration_for(hw.accelerator)
    model = load_model("llama3-70b")

    def run(cp, seq, gbs):
        return simulate(model, hw, ParallelPlan(tp=8, pp=4, cp=cp, gbs=gbs, seq=seq, recompute="full"), cal)

    short1, short2 = run(1, 4096, 512), run(2, 4096, 512)
    long1, long2 = run(1, 131072, 16), run(2, 131072, 16)
    assert short2.breakdown["cp"] > 1e-3 * short2.step_time_s
    # exposed share of the ring: larger where the steps are short
    assert short2.breakdown["cp"] / short2.step_time_s > long2.breakdown["cp"] / long2.step_time_s
    assert short2.step_time_s > short1.step_time_s
    assert long2.step_time_s < long1.step_time_s


def test_heterogeneous_plan_round_trip(tmp_path, capsys):
    """plan --pool --write-plan -> simulate --plan runs the stages on their own GPU types (and
    the link between the clusters) and gives the planner's step time."""
    import json

    from meshcast.cli import main

    out = tmp_path / "hetero.yaml"
    assert main(["plan", "--model", "llama3-8b", "--pool", "dgx-h100:16", "--pool", "dgx-a100-superpod:8",
                 "--tp", "2", "--pp", "3", "--dp", "4", "--gbs", "48", "--seq", "4096", "--json",
                 "--write-plan", str(out)]) == 0
    planned = json.loads(capsys.readouterr().out)
    types = {r["gpu_type"] for r in planned["stages"]}
    assert types == {"h100-sxm", "a100-80gb-sxm"}
    assert main(["simulate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "24",
                 "--plan", str(out), "--json"]) == 0
    simulated = json.loads(capsys.readouterr().out)
    assert abs(simulated["step_time_s"] - planned["step_time_s"]) < 1e-9 * planned["step_time_s"]
    assert simulated["accelerator"] in ("h100-sxm+a100-80gb-sxm", "a100-80gb-sxm+h100-sxm")
    # each stage's time is its own type's: the A100 stage is slower per layer
    st = simulated["stages"]
    for s, row in zip(st, planned["stages"]):
        assert abs(s["forward_s"] + s["backward_s"] - row["stage_time_s"]) < 1e-6 * row["stage_time_s"]


def test_sends_between_clusters_cross_the_slower_nic():
    """A boundary between stages on different clusters is a send over the slower NIC tier."""
    from models import load_model
    from simulator import ParallelPlan, simulate
    from simulator.engine import inter_cluster_link

    model = load_model("llama3-8b")
    hw = load_hardware("dgx-h100", 24)
    base = ParallelPlan(tp=2, pp=3, dp=4, gbs=48, seq=4096, num_gpus=24)
    same = simulate(model, hw, base.__class__(**{**base.to_dict(), "layers_per_stage": (11, 11, 10),
                                                 "stage_clusters": ("dgx-h100",) * 3}), CAL)
    homo = simulate(model, hw, base.__class__(**{**base.to_dict(), "layers_per_stage": (11, 11, 10)}), CAL)
    assert abs(same.step_time_s - homo.step_time_s) < 1e-12 * homo.step_time_s
    mixed = simulate(model, hw, base.__class__(**{**base.to_dict(), "layers_per_stage": (11, 11, 10),
                                                  "stage_clusters": ("dgx-h100", "dgx-a100-superpod", "dgx-h100")}), CAL)
    a100 = fabric_from_hardware(load_hardware("dgx-a100-superpod", 24))
    link = inter_cluster_link(FABRIC, a100)
    assert link.beta_Bps <= min(FABRIC.levels[1].beta_Bps, a100.levels[1].beta_Bps)
    assert mixed.step_time_s > homo.step_time_s
