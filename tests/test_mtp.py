"""Multi-token prediction (MTP) in the step model: the depths' ops on the last pipeline stage, their
activations, logits and parameters (simulator/lowering.py mtp_ops, simulator/memory.py)."""
import pytest

from hardware_specs.catalog import load_hardware
from models.catalog import load_model
from models.params import mtp_params
from simulator import DEFAULT_CALIBRATION, ParallelPlan
from simulator.compute import gemm_flops
from simulator.engine import _fabric, device_model, simulate, summarize_ops
from simulator.lowering import Context, head_ops, layer_ops, mtp_ops
from simulator.memory import layer_activation_bytes, mtp_activation_bytes, stage_footprint, stage_params
from simulator.plan import resolve_plan


def _dsv3(mtp: int = 1, **kw):
    """DeepSeek-V3 cut to 8 layers (3 dense, 5 MoE), with ``mtp`` MTP modules."""
    return load_model("deepseek-v3").model_copy(update={"num_layers": 8, "mtp_layers": mtp, **kw})


def _ctx(model, plan: ParallelPlan, gpus: int = 16) -> Context:
    hw = load_hardware("dgx-h100", gpus)
    plan = resolve_plan(model, plan, gpus)
    return Context(model, plan, device_model(hw.accelerator, DEFAULT_CALIBRATION), _fabric(hw, DEFAULT_CALIBRATION))


PLAN = ParallelPlan(tp=2, pp=1, ep=8, mbs=1, gbs=64, seq=4096, sequence_parallel=True)


def test_no_mtp_no_ops():
    assert mtp_ops(_ctx(_dsv3(0), PLAN)) == []


def test_one_depth_is_a_layer_the_shared_head_and_the_projection():
    """The FLOPs of a depth are those of the module's layer, of the output head and of the 2h -> h
    projection (forward, data- and weight-gradient GEMMs): built from the lowering's own op lists."""
    m = _dsv3()
    ctx = _ctx(m, PLAN)
    T, h, tp = ctx.tokens, m.hidden, ctx.plan.tp
    flops = lambda ops: sum(op.flops for op in ops if op.phase in ("fwd", "bwd"))
    expect = flops(layer_ops(ctx, "moe")) + flops(head_ops(ctx)) + 3 * gemm_flops(T, h // tp, 2 * h)
    assert flops(mtp_ops(ctx)) == pytest.approx(expect)
    assert all(op.name.startswith("mtp1.") for op in mtp_ops(ctx))


def test_step_grows_by_the_mtp_ops_only_on_the_last_stage():
    """pp=2: the first stage is unchanged; the last one grows by the MTP ops' own seconds and FLOPs."""
    plan = ParallelPlan(tp=2, pp=2, ep=4, mbs=1, gbs=64, seq=4096, sequence_parallel=True)
    hw = load_hardware("dgx-h100", 16)
    without, with_ = simulate(_dsv3(0), hw, plan), simulate(_dsv3(1), hw, plan, with_ops=True)
    mtp = summarize_ops(with_.ops["mtp"])
    first0, last0 = without.stages
    first1, last1 = with_.stages
    assert (first1.forward_s, first1.backward_s, first1.flops) == (first0.forward_s, first0.backward_s, first0.flops)
    assert last1.forward_s - last0.forward_s == pytest.approx(mtp.forward_s)
    assert last1.backward_s - last0.backward_s == pytest.approx(mtp.backward_s)
    assert last1.flops - last0.flops == pytest.approx(mtp.flops)
    assert with_.step_time_s > without.step_time_s
    assert with_.model_flops == without.model_flops          # MFU counts the model without MTP


def test_repeated_module_costs_compute_per_depth_and_weights_once():
    """Megatron-Core mtp_use_repeated_layer: two depths of one module run its layer and the head
    twice; its parameters are counted once."""
    one, two = _dsv3(), _dsv3(mtp_depths=2)
    f1 = summarize_ops(mtp_ops(_ctx(one, PLAN))).flops
    f2 = summarize_ops(mtp_ops(_ctx(two, PLAN))).flops
    assert f2 == pytest.approx(2 * f1)
    assert mtp_params(two) == mtp_params(one)
    c1, c2 = _ctx(one, PLAN), _ctx(two, PLAN)
    assert stage_params(c2, range(0, 8), True, True) == stage_params(c1, range(0, 8), True, True)


def test_repeated_depths_need_one_module():
    from models.schema import ModelSpec
    spec = {**_dsv3().model_dump(), "mtp_layers": 2, "mtp_depths": 3}
    with pytest.raises(ValueError, match="only one"):
        ModelSpec(**spec)


def test_memory_grows_by_the_mtp_activations_logits_and_parameters():
    """The last stage holds each depth's activations (more than its layer's), one more head's
    logits per depth, the MTP modules' parameters and, under pp > 1, a copy of the embedding."""
    plan = ParallelPlan(tp=1, pp=2, ep=1, mbs=1, gbs=64, seq=4096)
    c0, c1 = _ctx(_dsv3(0), plan, 2), _ctx(_dsv3(1), plan, 2)
    last = range(4, 8)
    f0, f1 = stage_footprint(c0, last, False, True), stage_footprint(c1, last, False, True)
    act = mtp_activation_bytes(c1)
    assert act > layer_activation_bytes(c1, "moe")
    assert f1.per_microbatch - f0.per_microbatch == pytest.approx(act)
    assert f1.logits == pytest.approx(2 * f0.logits)
    m = c1.model
    assert f1.params - f0.params == pytest.approx(mtp_params(m) + m.vocab * m.hidden)
    # the first stage holds none of it
    assert stage_footprint(c1, range(0, 4), True, False).params == stage_footprint(c0, range(0, 4), True, False).params


def test_mtp_bf16_keeps_the_module_gemms_in_bf16():
    """Megatron-Bridge keep_mtp_spec_in_bf16: an fp8 plan runs the MTP module's GEMMs in bf16."""
    plan = ParallelPlan(tp=2, pp=1, ep=8, mbs=1, gbs=64, seq=4096, sequence_parallel=True, precision="fp8")
    dtypes = lambda m: {op.shape[4] for op in mtp_ops(_ctx(m, plan)) if op.kind == "gemm" and "head." not in op.name
                        and "router" not in op.name}
    assert dtypes(_dsv3()) == {"fp8"}
    assert dtypes(_dsv3(mtp_bf16=True)) == {"bf16"}


def test_hybrid_module_runs_its_pattern():
    """Nemotron 3 Super's '*E' module: an attention block and a (Latent)MoE block per depth."""
    m = load_model("nemotron-3-super-120b-a12b")
    plan = ParallelPlan(tp=1, pp=1, ep=8, mbs=1, gbs=64, seq=8192)
    ctx = _ctx(m, plan, 8)
    flops = lambda ops: sum(op.flops for op in ops if op.phase in ("fwd", "bwd"))
    layers = flops(layer_ops(ctx, "attention")) + flops(layer_ops(ctx, "moe"))
    expect = layers + flops(head_ops(ctx)) + 3 * gemm_flops(ctx.tokens, m.hidden, 2 * m.hidden)
    assert flops(mtp_ops(ctx)) == pytest.approx(expect)


def test_bridge_super_rows_run_two_repeated_depths_in_bf16():
    from validation.published import model_from_row
    row = {"model": "Nemotron_3_Super", "source": "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md",
           "layers": "", "seq_len": ""}
    fills: list = []
    m = model_from_row(row, fills)
    assert (m.mtp_layers, m.mtp_forward_depths, m.mtp_bf16) == (1, 2, True)
    assert any("mtp_use_repeated_layer" in f for f in fills)
    assert model_from_row({**row, "source": "a paper"}).mtp_forward_depths == 1
