"""Property tests: faster hardware never slows a step; more micro-batches in flight never
reduce memory; counted FLOPs do not depend on the plan."""
from hypothesis import given, settings
from hypothesis import strategies as st

from hardware_specs import load_hardware
from hardware_specs.catalog import Hardware
from models import load_model
from hardware_specs.errors import PlanError
from simulator import ParallelPlan, simulate
from simulator.frameworks import FRAMEWORKS
from simulator.plan import resolve_plan

HW = load_hardware("dgx-h100", 64)
MODEL = load_model("gpt-7.5b")



def _runnable(plan: ParallelPlan) -> bool:
    """True where the plan's framework can run it on HW (its rules are not what these test)."""
    try:
        resolve_plan(MODEL, plan, HW.num_gpus)
    except PlanError:
        return False
    return True


plans = st.builds(
    lambda tp, pp, mbs, rec, zero, sched, fw: ParallelPlan(tp=tp, pp=pp, mbs=mbs, gbs=64 * mbs, recompute=rec,
                                                          zero_stage=zero, schedule=sched, framework=fw),
    st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]),
    st.sampled_from(["none", "selective", "full"]), st.sampled_from([0, 1, 2, 3]),
    st.sampled_from(["1f1b", "gpipe"]), st.sampled_from(FRAMEWORKS)).filter(_runnable)


def _scaled(hw: Hardware, flops: float, hbm: float, link: float) -> Hardware:
    acc = hw.accelerator
    peaks = acc.peak_flops_dense.model_copy(update={k: v * flops for k, v in acc.peak_flops_dense if v})
    acc = acc.model_copy(update={"peak_flops_dense": peaks, "hbm_bandwidth_Bps": acc.hbm_bandwidth_Bps * hbm})
    intra = hw.node.intra_node.model_copy(update={"bandwidth_per_direction_Bps": hw.node.intra_node.bandwidth_per_direction_Bps * link})
    node = hw.node.model_copy(update={"intra_node": intra})
    tiers = [t.model_copy(update={"nic_bandwidth_per_direction_Bps": t.nic_bandwidth_per_direction_Bps * link})
             for t in hw.cluster.tiers]
    cluster = hw.cluster.model_copy(update={"tiers": tiers})
    return Hardware(cluster, node, acc, hw.num_gpus)


@settings(max_examples=40, deadline=None)
@given(plans, st.floats(1.0, 4.0), st.floats(1.0, 4.0), st.floats(1.0, 4.0))
def test_more_bandwidth_or_flops_never_slower(plan, f, h, l):
    base = simulate(MODEL, HW, plan).step_time_s
    faster = simulate(MODEL, _scaled(HW, f, h, l), plan).step_time_s
    assert faster <= base * (1 + 1e-9)


@settings(max_examples=30, deadline=None)
@given(plans)
def test_counted_flops_independent_of_plan_except_recompute(plan):
    def counted(p):
        r = simulate(MODEL, HW, p)
        q = r.plan
        return q.microbatches() * q.dp * q.tp * q.cp * sum(s.flops for s in r.stages)
    ref = counted(ParallelPlan(tp=1, pp=1, mbs=1, gbs=plan.gbs))
    got = counted(plan)
    assert abs(got - ref) / ref < 1e-3


@settings(max_examples=30, deadline=None)
@given(st.sampled_from([2, 4]), st.sampled_from([1, 2]), st.integers(1, 6))
def test_more_in_flight_microbatches_never_reduce_memory(pp, mbs, extra):
    # GPipe runs in torchtitan (torch.distributed.pipelining); one pipeline, no data parallelism
    hw = load_hardware("dgx-h100", 8 * pp)
    kw = dict(tp=8, pp=pp, mbs=mbs, framework="torchtitan", zero_stage=0)
    small = ParallelPlan(**kw, gbs=mbs * pp, schedule="gpipe")
    large = ParallelPlan(**kw, gbs=mbs * (pp + extra), schedule="gpipe")
    one_f = ParallelPlan(**kw, gbs=mbs * (pp + extra), schedule="1f1b")
    m_small = simulate(MODEL, hw, small).memory.total_bytes
    m_large = simulate(MODEL, hw, large).memory.total_bytes
    m_1f1b = simulate(MODEL, hw, one_f).memory.total_bytes
    assert m_large >= m_small
    assert m_large >= m_1f1b


@settings(max_examples=40, deadline=None)
@given(plans)
def test_batch_evaluation_equals_simulate(plan):
    from simulator import evaluate_plans
    [ev] = evaluate_plans(MODEL, HW, [plan])
    r = simulate(MODEL, HW, plan)
    assert ev.step_time_s == r.step_time_s
    assert ev.memory_total_bytes == r.memory.total_bytes and ev.fits == r.fits


def test_batch_evaluation_reports_invalid_plans():
    from simulator import evaluate_plans
    [ev] = evaluate_plans(MODEL, HW, [ParallelPlan(tp=3)])
    assert ev.error.startswith("tp") and ev.step_time_s == float("inf")
