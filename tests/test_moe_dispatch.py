"""MoE token routing as Megatron-Core's dispatchers run it (simulator/moe_dispatch.py, issue #12):
byte counts written from the formulas in docs/cost_model.md, not from running the code."""
from dataclasses import replace

import pytest

from hardware_specs.catalog import load_hardware
from models.catalog import load_model
from simulator import DEFAULT_CALIBRATION, ParallelPlan
from simulator.engine import _fabric, device_model, simulate
from simulator.lowering import Context, layer_ops
from simulator.plan import plan_from_dict, resolve_plan

# Qwen3-30B-A3B's MoE (128 experts, top-8, hidden 2048), 4 layers
H, E, K = 2048, 128, 8


def _model(**moe):
    m = load_model("qwen3-30b-a3b")
    return m.model_copy(update={"num_layers": 4, "moe": m.moe.model_copy(update=moe)})


def _ctx(model, **plan) -> Context:
    hw = load_hardware("dgx-h100", 8)
    p = resolve_plan(model, ParallelPlan(**{"tp": 1, "ep": 8, "mbs": 1, "gbs": 8, "seq": 4096, **plan}), 8)
    return Context(model, p, device_model(hw.accelerator, DEFAULT_CALIBRATION), _fabric(hw, DEFAULT_CALIBRATION))


def _ops(ctx, name, phase="fwd"):
    return [op for op in layer_ops(ctx, "moe", recompute=False) if op.name == name and op.phase == phase]


def test_fused_permute_moves_each_routed_row_twice():
    """TE moe_permute_with_probs: each of the T·k rows read and written at 2 bytes per element,
    plus its fp32 probability read and written and the row map (r1 w4 per [T, E] element)."""
    ctx = _ctx(_model())
    T = 4096
    (op,) = _ops(ctx, "moe.permute")
    assert op.bytes == T * K * H * 2 * 2 + T * K * 8 + 5 * T * E
    rows = T * K * H * 2 * 2
    assert rows / op.bytes > 0.98     # the token rows are nearly all the bytes


def test_unfused_permute_and_unpermute_move_more():
    fused, eager = _ctx(_model()), _ctx(_model(), moe_permute_fusion=False)
    for name in ("moe.permute", "moe.unpermute"):
        for phase in ("fwd", "bwd"):
            assert _ops(eager, name, phase)[0].bytes > _ops(fused, name, phase)[0].bytes
    # eager unpermute promotes to fp32: at least the fp32 product written and the scatter-add source read
    assert _ops(eager, "moe.unpermute")[0].bytes >= 4096 * K * H * (2 + 4 + 4)


def test_sort_chunks_only_with_several_local_experts():
    many = _ctx(_model())                                         # 16 local experts
    one = _ctx(_model(num_experts=8, top_k=2), ep=8)              # 1 local expert
    assert _ops(many, "moe.sort_chunks") and _ops(many, "moe.restore_chunks")
    assert not _ops(one, "moe.sort_chunks") and not _ops(one, "moe.restore_chunks")


def test_token_drop_pads_expert_gemm_to_capacity():
    """Drop and pad: each local expert runs capacity·ep rows, capacity = ceil(T·k/E·cf)."""
    T = 4096
    dropless, padded = _ctx(_model()), _ctx(_model(capacity_factor=1.25))
    m0 = _ops(dropless, "moe.experts.up")[0].shape[0]
    m1 = _ops(padded, "moe.experts.up")[0].shape[0]
    assert m0 == T * K * 8 // E
    assert m1 == -(-T * K * 125 // (E * 100)) * 8
    assert m1 > m0


def test_host_sync_dropless_not_with_padding_or_static_budget():
    assert _ops(_ctx(_model()), "moe.host_sync")
    assert not _ops(_ctx(_model(capacity_factor=1.0)), "moe.host_sync")          # sizes known on the host
    assert not _ops(_ctx(_model(), moe_dispatcher="hybridep", moe_host_sync=False), "moe.host_sync")
    (sync,) = _ops(_ctx(_model()), "moe.host_sync")
    cal = DEFAULT_CALIBRATION
    assert sync.time_s == pytest.approx(cal.kernel_launch_s + cal.host_op_s)
    # no backward twin: the backward reuses the host-side splits
    assert not _ops(_ctx(_model()), "moe.host_sync", "bwd")


def test_hybridep_fuses_the_permutations():
    ctx = _ctx(_model(), moe_dispatcher="hybridep")
    names = {op.name for op in layer_ops(ctx, "moe", recompute=False)}
    assert not names & {"moe.permute", "moe.unpermute", "moe.sort_chunks", "moe.restore_chunks"}
    assert {"moe.router_topk", "moe.routing_map_all_gather", "moe.host_sync"} <= names
    assert "moe.routing_map_all_gather.bwd" not in names                   # metadata: no gradient
    (gather,) = _ops(ctx, "moe.routing_map_all_gather")
    assert gather.bytes == 4096 * E                                         # bool [T, E] per rank


def test_router_fusion_fewer_bytes_and_launches():
    fused, eager = _ctx(_model(), moe_router_fusion=True), _ctx(_model())
    for phase in ("fwd", "bwd"):
        f, e = _ops(fused, "moe.router_topk", phase)[0], _ops(eager, "moe.router_topk", phase)[0]
        assert f.bytes < e.bytes and f.shape[1] < e.shape[1]


def test_dense_layers_and_dispatcher_none_have_no_routing_ops():
    ctx = _ctx(_model())
    dense = {op.name for op in layer_ops(ctx, "dense", recompute=False)}
    assert not any(n.startswith(("moe.", "moe_")) for n in dense)
    none = _ctx(_model(), moe_dispatcher="none")
    names = {op.name for op in layer_ops(none, "moe", recompute=False)}
    assert not names & {"moe.router_topk", "moe.permute", "moe.host_sync", "moe.counts_all_gather"}


def test_routing_slows_the_step_and_frameworks_without_a_dispatcher_are_unchanged():
    hw = load_hardware("dgx-h100", 8)
    m = _model()
    plan = ParallelPlan(tp=1, ep=8, mbs=1, gbs=8, seq=4096)
    with_routing = simulate(m, hw, plan, DEFAULT_CALIBRATION).step_time_s
    without = simulate(m, hw, replace(plan, moe_dispatcher="none"), DEFAULT_CALIBRATION).step_time_s
    assert with_routing > without


def test_plan_field_is_validated():
    from hardware_specs.errors import SpecError
    with pytest.raises(SpecError, match="moe_dispatcher"):
        plan_from_dict({"moe_dispatcher": "deepep"})
    assert plan_from_dict({"moe_dispatcher": "hybridep"}).moe_dispatcher == "hybridep"


def test_routing_runs_on_the_sequence_parallel_shard():
    """Under tp with sequence parallelism the MoE layer routes the rank's own S/tp tokens
    (MoELayer.forward): the router and the pre-dispatch permutation move half the bytes at tp = 2;
    the sort by local expert works on the rows after the tensor-parallel gather and does not."""
    one, two = _ctx(_model(), ep=4), _ctx(_model(), tp=2, ep=4, sequence_parallel=True)
    T = 4096
    (op,) = _ops(two, "moe.permute")
    assert op.bytes == (T // 2) * K * H * 2 * 2 + (T // 2) * K * 8 + 5 * (T // 2) * E
    assert _ops(two, "moe.router_topk")[0].bytes == pytest.approx(_ops(one, "moe.router_topk")[0].bytes / 2)
    assert _ops(two, "moe.sort_chunks")[0].bytes == _ops(one, "moe.sort_chunks")[0].bytes


def test_experts_at_etp_1_run_only_their_own_shards_rows():
    """Megatron-Core gathers the dispatched rows over the *expert* tensor-parallel group only
    (MoETokenDispatcher: tp_group = pg_collection.expt_tp): at tp = 2 with etp = 1 (the
    Megatron-Bridge MoE recipes) each rank's experts take the rows of its own S/tp shard, so the
    expert GEMMs and the all-to-all carry half of what they carry at etp = tp = 2, the same per token
    as at tp = 1; at etp = tp the rows are the full micro-batch's, as before (session 24)."""
    from simulator.moe_dispatch import dispatched_tokens, expert_tokens
    T = 4096
    one = _ctx(_model(), ep=4)
    etp_tp = _ctx(_model(), tp=2, ep=4, sequence_parallel=True)
    etp_1 = _ctx(_model(), tp=2, etp=1, ep=8, sequence_parallel=True)
    assert dispatched_tokens(one) == T and dispatched_tokens(etp_tp) == T and dispatched_tokens(etp_1) == T // 2
    assert expert_tokens(etp_1) == T // 2 * K * 8 // E          # (T/tp)·k·ep/E rows per local expert
    a2a = lambda c: _ops(c, "moe.dispatch_all_to_all")[0].bytes
    assert a2a(etp_1) == pytest.approx(a2a(one) / 2) and a2a(etp_tp) == a2a(one)
    # expert FLOPs per token of the micro-batch: etp = 1 at tp = 2 equals tp = 1 (ep 8 vs 4: per-expert rows x local experts)
    flops = lambda c: sum(op.flops for op in layer_ops(c, "moe", recompute=False)
                          if op.kind == "gemm" and op.name.startswith("moe.experts") and op.phase == "fwd")
    assert flops(etp_1) == pytest.approx(flops(one) / 2)
    assert flops(etp_tp) == pytest.approx(flops(one) / 2)   # etp = tp: every row, half the ffn


def test_latent_projections_run_on_the_sequence_parallel_shard():
    """LatentMoE's fc1/fc2_latent_proj (TELinear, parallel_mode duplicated) take the MoE layer's
    input as it arrives, the rank's S/tp shard."""
    m = load_model("nemotron-3-super-120b-a12b")
    m = m.model_copy(update={"num_layers": 4})
    hw = load_hardware("dgx-h100", 8)
    ctxs = [Context(m, resolve_plan(m, ParallelPlan(tp=tp, etp=1, ep=8, mbs=1, gbs=8, seq=4096,
                                                    sequence_parallel=tp > 1), 8),
                    device_model(hw.accelerator, DEFAULT_CALIBRATION), _fabric(hw, DEFAULT_CALIBRATION)) for tp in (1, 2)]
    down = [next(op for op in layer_ops(c, "moe", recompute=False) if op.name == "moe.latent_down") for c in ctxs]
    assert down[1].flops == pytest.approx(down[0].flops / 2)


def test_te_expert_gemms_one_cublas_call_per_local_expert():
    """megatron-core (Transformer Engine's GroupedLinear -> multi_stream_cublas_gemm) costs the local
    experts' GEMM as the sum of one GEMM per expert; a framework with one grouped kernel (torchtitan:
    torch._grouped_mm) as the batched GEMM. The sum is never faster than the batched kernel."""
    from simulator.compute import gemm_time
    from simulator.lowering import expert_gemm_time
    m = _model()
    for framework, per_expert in (("megatron-core", True), ("torchtitan", False)):
        ctx = _ctx(m, framework=framework)
        rows, local = 4096 * K * 8 // E, E // 8
        t = expert_gemm_time(ctx, rows, 768, H, "bf16", local)
        one, batched = gemm_time(ctx.dev, rows, 768, H, "bf16"), gemm_time(ctx.dev, rows, 768, H, "bf16", local)
        assert t == pytest.approx(local * one if per_expert else batched)
        assert local * one >= batched


def test_te_quantizes_each_experts_fp8_input_in_its_own_kernel_unless_delayed_scaling():
    """TE GroupedLinear's split_quantize (cast.cpp multi_tensor_quantize_impl, v2.8-v2.16) fuses the
    per-expert quantization into one kernel only for DelayedScaling; MXFP8 (and current scaling,
    blockwise) launch one kernel per local expert. Same bytes, so the difference is exactly the extra
    launches' fixed cost, on the forward and data-gradient GEMMs only (the weight gradient takes the
    column-wise copies); delayed (Megatron-Core's default) and bf16 are unchanged; a dense GEMM is one."""
    from simulator.compute import memory_fixed_s
    from simulator.lowering import fp8_quantize_launches
    m = _model()
    local = E // 8
    ctxs = {r: _ctx(m, precision="fp8", fp8_recipe=r) for r in (None, "delayed", "mxfp8", "tensorwise")}
    assert fp8_quantize_launches(ctxs["mxfp8"], local) == local == fp8_quantize_launches(ctxs["tensorwise"], local)
    assert fp8_quantize_launches(ctxs[None], local) == 1 == fp8_quantize_launches(ctxs["delayed"], local)
    assert fp8_quantize_launches(ctxs["mxfp8"], 1) == 1 and fp8_quantize_launches(ctxs["mxfp8"], local, False) == 1

    def times(ctx):
        return {(op.name, op.phase): op.time_s for op in layer_ops(ctx, "moe", recompute=False) if op.kind == "gemm"}
    d, mx = times(ctxs["delayed"]), times(ctxs["mxfp8"])
    fixed = (local - 1) * memory_fixed_s(ctxs["mxfp8"].dev.cal)
    # MXFP8 also writes the column-wise copy (session 24): compare at MXFP8's bytes
    from simulator.lowering import FP8_QUANTIZE_BYTES, MXFP8_QUANTIZE_BYTES, fp8_quantize_time
    ctx_mx = ctxs["mxfp8"]
    for name in ("moe.experts.up", "moe.experts.down"):
        m_, n_, k_ = next(op.shape[:3] for op in layer_ops(ctx_mx, "moe", recompute=False) if op.name == name)
        for gemm, elements in ((name, m_ * k_), (name + ".dgrad", m_ * n_)):
            phase = "fwd" if gemm == name else "bwd"
            extra = (fp8_quantize_time(ctx_mx, elements * local, local)
                     - fp8_quantize_time(ctxs["delayed"], elements * local, local))
            assert extra > fixed
            assert mx[(gemm, phase)] - d[(gemm, phase)] == pytest.approx(extra)
        assert MXFP8_QUANTIZE_BYTES > FP8_QUANTIZE_BYTES
        assert mx[(name + ".wgrad", "bwd")] == d[(name + ".wgrad", "bwd")]
    assert mx[("moe.router", "fwd")] == d[("moe.router", "fwd")]
    with pytest.raises(Exception, match="fp8_recipe"):
        _ctx(m, precision="fp8", fp8_recipe="e4m3")


def test_current_scaling_reads_each_input_once_more_for_its_amax():
    """TE's Float8CurrentScalingQuantizer (quantizer.cpp quantize_impl): an amax kernel reads the input,
    a second derives the scale, then the cast: 2 more bytes per element and 3 kernels per split, on the
    forward and data-gradient quantizations only; delayed scaling is one 3-byte cast."""
    from simulator.compute import memory_time
    from simulator.lowering import fp8_quantize_time
    m = _model()
    local, n = E // 8, 1e8
    cs, dl = _ctx(m, precision="fp8", fp8_recipe="tensorwise"), _ctx(m, precision="fp8")
    assert fp8_quantize_time(dl, n) == pytest.approx(memory_time(dl.dev, 3 * n))
    assert fp8_quantize_time(cs, n) == pytest.approx(memory_time(cs.dev, 5 * n, launches=3))
    assert fp8_quantize_time(cs, n, local) == pytest.approx(memory_time(cs.dev, 5 * n, launches=3 * local))
    assert fp8_quantize_time(cs, n, local, quantize=False) == pytest.approx(memory_time(cs.dev, 3 * n))


def test_bridge_fp8_rows_take_the_recipe_their_config_names():
    from validation.bridge_recipes import recipe_fp8_recipe
    assert recipe_fp8_recipe("LLAMA3_70B_PRETRAIN_CONFIG_GB200_FP8_CS_V2") == "tensorwise"
    assert recipe_fp8_recipe("QWEN3_30B_A3B_GB200_FP8_MX_BASE_CONFIG") == "mxfp8"
    assert recipe_fp8_recipe("gpt_oss_120b_pretrain_64gpu_gb300_fp8mx_config") == "mxfp8"
    assert recipe_fp8_recipe("LLAMA3_70B_PRETRAIN_CONFIG_GB200_BF16_V2") is None


# ---- Megatron-Core's local spec: SequentialMLP, a Python loop over the local experts (session 19)

def _local_ctx(model, **plan):
    return _ctx(model, framework="megatron-core-local", attention="unfused_torch", moe_permute_fusion=False, **plan)


def test_sequential_mlp_runs_each_local_expert_as_its_own_gemms():
    """SequentialMLP: one up and one down GEMM per local expert, each of the expert's rows alone
    (not one batched kernel), with the probability scaling per expert (per_token_scale)."""
    from simulator.compute import gemm_time
    ctx = _local_ctx(_model())
    local, rows = E // 8, 4096 * K * 8 // E
    ups = _ops(ctx, "moe.expert.up")
    assert len(ups) == local and not _ops(ctx, "moe.experts.up")
    assert all(op.shape[:4] == (rows, 2 * 768, H, 1) for op in ups)
    assert ups[0].time_s == pytest.approx(gemm_time(ctx.dev, rows, 2 * 768, H, "bf16"))
    assert len(_ops(ctx, "moe.expert.prob_scale")) == len(_ops(ctx, "moe.expert.prob_scale", "bwd")) == local


def test_probabilities_weighted_in_the_experts_leave_unpermute_a_plain_scatter():
    """Megatron-Core 0.19's alltoall dispatcher unpermutes without probabilities when the experts
    applied them: the eager unpermute is zeros + scatter_add_ of bf16 rows, T·2w + R·(4w + 8) bytes."""
    T, R = 4096, 4096 * K
    (op,) = _ops(_local_ctx(_model()), "moe.unpermute")
    assert op.bytes == 2 * H * T + R * (4 * H + 8)
    assert op.bytes < _ops(_ctx(_model(), moe_permute_fusion=False), "moe.unpermute")[0].bytes


def test_expert_loop_host_cost_grows_with_the_local_experts():
    """The host issues every iteration of the loop: with the same routed rows, each further local
    expert adds the same host seconds (its ops at expert_loop_op_scale of a layer op)."""
    from simulator.frameworks import get_framework
    hw = load_hardware("dgx-h100", 8)

    def host(experts):
        m = _model(num_experts=experts, top_k=K)
        plan = ParallelPlan(tp=1, ep=8, mbs=1, gbs=8, seq=4096, framework="megatron-core-local",
                            attention="unfused_torch")
        return simulate(m, hw, plan, DEFAULT_CALIBRATION).host_issue_s
    h64, h128, h256 = host(64), host(128), host(256)
    assert h256 - h128 == pytest.approx(2 * (h128 - h64), rel=0.02)
    per_op = DEFAULT_CALIBRATION.host_op_s * get_framework("megatron-core-local").host.op_scale
    scale = get_framework("megatron-core-local").host.expert_loop_op_scale
    # 8 more local experts x 4 layers x 8 micro-batches, each iteration 4 forward + 6 backward modelled ops
    assert h128 - h64 == pytest.approx(8 * 4 * 8 * 10 * scale * per_op, rel=0.02)


def test_plan_step_record_with_experts_is_a_moe_model():
    from validation.predict import plan_model
    rec = dict(layers=8, hidden=2048, heads=16, kv_heads=4, ffn_hidden=768, vocab=32768, seq=2048,
               activation="swiglu", norm="rmsnorm", experts=64, topk=8, moe_ffn_hidden=768)
    m = plan_model(rec)
    assert (m.moe.num_experts, m.moe.top_k, m.moe.expert_ffn_hidden) == (64, 8, 768)
    assert plan_model({k: v for k, v in rec.items() if k not in ("experts", "topk", "moe_ffn_hidden")}).moe is None
