"""Hybrid Mamba-2 / attention stacks (Nemotron-H, Nemotron 3): the pattern, parameter counts,
the Mamba-2 block's FLOPs against the SSD algorithm's count, tensor parallelism of the mixer,
layer kinds per pipeline stage, and the HF import."""
from pathlib import Path

import pytest
from pydantic import ValidationError

from hardware_specs.catalog import load_hardware
from hardware_specs.errors import PlanError
from models import load_model
from models.hf_import import load_hf_config
from models.params import active_params, mamba_params, published_params_error, total_params
from models.schema import ModelSpec
from simulator import ParallelPlan, simulate
from simulator.calibration import DEFAULT
from simulator.engine import _fabric, device_model, stage_layer_ranges
from simulator.flops import layer_forward_flops_per_token
from simulator.lowering import Context, layer_ops
from simulator.memory import kinds_in, layer_activation_bytes
from simulator.plan import resolve_plan

DATA = Path(__file__).parent / "data" / "hf"
NANO, SUPER, ULTRA = "nemotron-3-nano-30b-a3b", "nemotron-3-super-120b-a12b", "nemotron-3-ultra-550b-a55b"


def _tiny(**kw) -> ModelSpec:
    base = dict(name="tiny-hybrid", num_layers=4, hidden=256, ffn_hidden=512, num_heads=4, vocab=1024, seq_len=512,
                norm="rmsnorm", activation="squared_relu", position="none", hybrid_pattern="M*M-",
                mamba=dict(num_heads=8, head_dim=64, state_size=16, n_groups=2))
    base.update(kw)
    return ModelSpec(**base)


def test_pattern_kinds_and_counts():
    m = load_model(NANO)
    assert [m.layer_kind(i) for i in range(6)] == ["mamba", "moe", "mamba", "moe", "mamba", "attention"]
    assert kinds_in(m, 0, m.num_layers) == {"mamba": 23, "moe": 23, "attention": 6}
    assert m.num_moe_layers == 23 and m.is_moe_layer(1) and not m.is_moe_layer(0)
    t = _tiny()
    assert [t.layer_kind(i) for i in range(4)] == ["mamba", "attention", "mamba", "mlp"]


@pytest.mark.parametrize("kw, message", [
    (dict(hybrid_pattern="M*X-"), "symbols are M"),
    (dict(hybrid_pattern="M*M"), "3 layers, num_layers is 4"),
    (dict(hybrid_pattern="M*ME"), "no moe config"),
    (dict(mamba=None), "no mamba config"),
    (dict(hybrid_pattern=None), "needs a hybrid_pattern"),
    (dict(mamba=dict(num_heads=8, head_dim=64, state_size=16, n_groups=3)), "must divide num_heads"),
])
def test_pattern_validation(kw, message):
    with pytest.raises(ValidationError, match=message):
        _tiny(**kw)


# published totals: Nemotron 3 Nano report 31.6B (3.2B active, 3.6B with embeddings); Super model card
# 120.6B total, 12.7B active (main model; MTP module not included); Ultra 550B / 55B
@pytest.mark.parametrize("name, total, active, rel", [(NANO, 31.6e9, 3.6e9, 0.002), (SUPER, 120.6e9, 12.7e9, 0.001),
                                                     (ULTRA, 550e9, 55e9, 0.002)])
def test_parameter_counts_match_the_published_totals(name, total, active, rel):
    m = load_model(name)
    assert published_params_error(m) == 0.0 or published_params_error(m) < rel
    assert total_params(m, include_mtp=False) == pytest.approx(total, rel=0.0025)
    assert active_params(m, include_mtp=False) == pytest.approx(active, rel=0.025)


def test_mamba_params_by_hand():
    m = _tiny()
    d, gn, h, H = 8 * 64, 2 * 16, 256, 8
    in_proj = h * (2 * d + 2 * gn + H)
    conv = (d + 2 * gn) * (4 + 1)
    assert mamba_params(m) == in_proj + conv + 3 * H + d + d * h


def _ctx(m, tp=1, sp=False, seq=1024, mbs=1, hw="dgx-h100", gpus=8):
    hardware = load_hardware(hw, gpus)
    plan = resolve_plan(m, ParallelPlan(tp=tp, mbs=mbs, gbs=mbs * gpus // tp, seq=seq, sequence_parallel=sp), gpus)
    return Context(m, plan, device_model(hardware.accelerator, DEFAULT), _fabric(hardware, DEFAULT))


def test_mamba_layer_flops_follow_the_ssd_count():
    """Forward FLOPs of a Mamba-2 block: in_proj and out_proj GEMMs plus the chunked scan of Dao &
    Gu 2024 §6 (per token 2QNG + 2QPH + 4NPH + 2NPH/Q), from the closed form and from the ops."""
    m = load_model(SUPER)
    s, h, T = m.mamba, m.hidden, 8192
    Q, N, P, H, G = s.chunk_size, s.state_size, s.head_dim, s.num_heads, s.n_groups
    scan = 2 * Q * N * G + 2 * Q * P * H + 4 * N * P * H + 2 * N * P * H / Q
    expect = 2 * h * (2 * H * P + 2 * G * N + H) + 2 * H * P * h + scan
    assert layer_forward_flops_per_token(m, 0, T) == pytest.approx(expect, rel=1e-9)
    ops = [op for op in layer_ops(_ctx(m, seq=T), "mamba") if op.phase == "fwd"]
    assert sum(op.flops for op in ops) == pytest.approx(expect * T, rel=1e-9)
    scan_op = next(op for op in ops if op.kind == "ssm")
    assert scan_op.flops == pytest.approx(scan * T, rel=1e-9)
    bwd = next(op for op in layer_ops(_ctx(m, seq=T), "mamba") if op.kind == "ssm" and op.phase == "bwd")
    assert 2 * scan_op.flops < bwd.flops < 2.5 * scan_op.flops     # gradients + recomputed chunk states


def test_tensor_parallel_mamba_splits_heads_and_groups():
    m = load_model(SUPER)
    one, two = (_ctx(m, tp=t, sp=t > 1) for t in (1, 2))
    f1 = {op.name: op for op in layer_ops(one, "mamba") if op.phase == "fwd"}
    f2 = {op.name: op for op in layer_ops(two, "mamba") if op.phase == "fwd"}
    assert f2["mamba.in_proj"].shape[1] * 2 == f1["mamba.in_proj"].shape[1]
    assert f2["mamba.out_proj"].shape[2] * 2 == f1["mamba.out_proj"].shape[2]
    assert f2["mamba.ssd_scan"].flops * 2 == pytest.approx(f1["mamba.ssd_scan"].flops)
    assert "mamba.sp_all_gather" in f2 and "mamba.tp_reduce_scatter" in f2      # as an attention block
    assert layer_activation_bytes(two, "mamba") < layer_activation_bytes(one, "mamba")
    with pytest.raises(PlanError, match="groups"):
        layer_ops(_ctx(m, tp=16, sp=True, gpus=16), "mamba")     # 128 heads, 8 groups: tp 16 splits no group


def test_stages_count_their_block_kinds():
    m = load_model(NANO)
    hw = load_hardware("dgx-h100", 16)
    plan = ParallelPlan(tp=1, pp=2, ep=8, mbs=1, gbs=64, seq=4096)
    r = simulate(m, hw, plan)
    ranges = stage_layer_ranges(m, r.plan)
    counts = [kinds_in(m, x.start, x.stop) for x in ranges]
    assert sum(c.get("mamba", 0) for c in counts) == 23 and sum(c.get("attention", 0) for c in counts) == 6
    assert [s.moe_layers for s in r.stages] == [c.get("moe", 0) for c in counts]
    assert r.fits and r.step_time_s > 0


def test_latent_moe_moves_latent_tokens():
    m = load_model(SUPER)
    hw = load_hardware("dgx-h100", 64)
    plan = resolve_plan(m, ParallelPlan(tp=1, ep=64, mbs=1, gbs=64, seq=4096), 64)
    ctx = Context(m, plan, device_model(hw.accelerator, DEFAULT), _fabric(hw, DEFAULT))
    ops = {op.name: op for op in layer_ops(ctx, "moe") if op.phase == "fwd"}
    assert ops["moe.dispatch_all_to_all"].bytes == 4096 * 22 * 1024 * 2
    assert ops["moe.experts.up"].shape[2] == 1024 and ops["moe.latent_down"].shape[:3] == (4096, 1024, 4096)


def test_hf_import_of_nemotron3_matches_the_catalog():
    skip = {"name", "source", "notes", "published_params", "published_params_precision",
            "published_params_includes_mtp", "rope_base", "head_dim"}
    for file, name in (("nemotron_3_nano_30b_a3b.json", NANO), ("nemotron_3_super_120b_a12b.json", SUPER)):
        got, want = load_hf_config(DATA / file), load_model(name)
        a = {k: v for k, v in got.model_dump().items() if k not in skip}
        b = {k: v for k, v in want.model_dump().items() if k not in skip}
        assert a == b and got.dim_head == want.dim_head
        assert "score-correction bias" in got.notes


def test_hf_import_reads_the_block_list_spelling(tmp_path):
    import json
    cfg = json.loads((DATA / "nemotron_3_nano_30b_a3b.json").read_text())
    pattern = cfg.pop("hybrid_override_pattern")
    cfg.pop("num_hidden_layers")
    names = {"M": "mamba", "E": "moe", "*": "attention", "-": "mlp"}
    cfg["layers_block_type"] = [names[c] for c in pattern]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m = load_hf_config(tmp_path / "config.json")
    assert m.hybrid_pattern == pattern and m.num_layers == 52


def test_planner_search_says_hybrids_are_simulate_only():
    from hardware_specs.errors import MeshcastError
    from planners.search import _check_searchable
    with pytest.raises(MeshcastError, match="hybrid Mamba-2"):
        _check_searchable(load_model(NANO))


def test_mamba_training_path_gate_conv_recompute_and_layout_copies():
    """The mixer as Megatron-Core's _ssm_training runs it: the gate fused into the scan (bytes only),
    the conv1d re-run in backward (10 bytes per element), a plain grouped RMSNorm after the scan, and
    the batch-major layout copies only with more than one sequence per micro-batch."""
    from simulator.ssm import ssd_cost
    hw = load_hardware("dgx-h100", 8)
    m = load_model(NANO)
    dev, fab = device_model(hw.accelerator, DEFAULT), _fabric(hw, DEFAULT)
    s = m.mamba
    for mbs in (1, 2):
        p = resolve_plan(m, ParallelPlan(tp=1, ep=8, mbs=mbs, gbs=64, seq=8192), 8)
        ops = layer_ops(Context(m, p, dev, fab), "mamba", recompute=False)
        by = {(op.name, op.phase): op for op in ops}
        T = mbs * 8192
        scan = by[("mamba.ssd_scan", "fwd")]
        gated = ssd_cost(T, s.num_heads, s.head_dim, s.n_groups, s.state_size, s.chunk_size, mbs, gate=True)
        assert scan.bytes == pytest.approx(gated.bytes)
        conv = s.num_heads * s.head_dim + 2 * s.n_groups * s.state_size
        assert by[("mamba.conv1d", "bwd")].bytes == pytest.approx(10.0 * T * conv)
        assert by[("mamba.out_norm", "fwd")].bytes == pytest.approx(4.0 * T * s.num_heads * s.head_dim)
        assert (("mamba.layout_copies", "fwd") in by) == (mbs > 1)
