"""DeepSpeed 2021 ZeRO-3 (profile deepspeed-0.3): per-parameter gathers after a device synchronize,
one prefetch bucket only with nothing in flight, bucketed gradient all-reduces (simulator/zero3_2021.py)."""
import pytest

from hardware_specs import load_hardware
from models import load_model
from simulator.engine import simulate
from simulator.frameworks import FRAMEWORKS, get_framework
from simulator.plan import ParallelPlan
from simulator.zero3_2021 import (MAX_LIVE_PARAMETERS, MAX_REUSE_DISTANCE, PREFETCH_BUCKET, REDUCE_BUCKET,
                                  layer_matrices, replay, stage_trace)

ALPHA = 1e-3          # fixed seconds of one call in these toy replays


def _gather(elements):
    return ALPHA + elements * 1e-9


def _no_reduce(elements):
    return 0.0


def test_without_compute_every_per_parameter_call_is_exposed_and_grows_with_the_tensor_count():
    # the same 4e8 elements split into 4 or 16 tensors of one layer, forward only, nothing to hide under
    times = {}
    for k in (4, 16):
        numel, trace = stage_trace([(4e8 / k,) * k], [0.0], [0.0], [False])
        times[k] = replay(numel, trace[:k], _gather, _no_reduce)
    assert times[4] == pytest.approx(4 * ALPHA + 4e8 * 1e-9)
    assert times[16] == pytest.approx(16 * ALPHA + 4e8 * 1e-9)


def test_only_the_one_prefetched_gather_runs_under_a_module_compute():
    # 3 layers of one 1e8-element matrix (over the 5e7 prefetch bucket: one tensor prefetched at a
    # time), forward only: the first gather is exposed, then each module's compute hides at most the
    # next gather, so the pass takes g + sum(max(c, g)) + the last c
    g = _gather(1e8)
    for c in (0.5 * g, 2 * g):
        numel, trace = stage_trace([(1e8,)] * 3, [c] * 3, [0.0] * 3, [False] * 3)
        t = replay(numel, trace[:3], _gather, _no_reduce)
        assert t == pytest.approx(g + 2 * max(c, g) + c)
        # with the prefetch off, every gather waits for the compute before it
        assert replay(numel, trace[:3], _gather, _no_reduce, prefetch=False) == pytest.approx(3 * (g + c))


def test_a_module_over_the_live_parameter_budget_prefetches_nothing():
    big = MAX_LIVE_PARAMETERS
    c = 10 * _gather(big)           # compute long enough to hide any one gather
    numel, trace = stage_trace([(big,)] * 2, [c] * 2, [0.0] * 2, [False] * 2)
    # the first module's gather leaves the budget full: the second gather waits for its compute
    assert replay(numel, trace[:2], _gather, _no_reduce) == pytest.approx(2 * (_gather(big) + c))


def test_recomputed_parameters_are_gathered_again_for_backward_beyond_the_reuse_distance():
    calls = []

    def counting(elements):
        calls.append(elements)
        return 0.0

    for size, expected in ((1e8, 4), (MAX_REUSE_DISTANCE / 2, 4 + 4 + 3)):
        calls.clear()
        # one layer of 4 matrices, full recompute: forward, recompute, backward in reverse order
        numel, trace = stage_trace([(size,) * 4], [0.0], [0.0], [True])
        replay(numel, trace, counting, _no_reduce, prefetch=False)
        # small: every next use is under 1e9 elements away, nothing is released, 4 gathers; large:
        # forward 4, recompute 4, and in backward all but the last matrix (reused at once) again
        assert len(calls) == expected


def test_gradients_are_all_reduced_in_reduce_bucket_size_buckets():
    sizes = []

    def reduce(elements):
        sizes.append(elements)
        return 0.0

    numel, trace = stage_trace([(2e8,) * 4], [0.0], [0.0], [False])
    replay(numel, trace, lambda e: 0.0, reduce)
    # 2e8-element gradients fill a 5e8 bucket two at a time; the epilogue reduces the rest
    assert REDUCE_BUCKET == 5e8 and sizes == [4e8, 4e8]


def test_defaults_are_deepspeed_v0_3_16s():
    assert (PREFETCH_BUCKET, MAX_LIVE_PARAMETERS, MAX_REUSE_DISTANCE, REDUCE_BUCKET) == (5e7, 1e9, 1e9, 5e8)


def test_gpt_layer_matrices_in_megatron_order():
    m = load_model("gpt3-175b")
    h = m.hidden
    assert layer_matrices(m, 0) == (3 * h * h, h * h, 4 * h * h, 4 * h * h)


def test_only_the_2021_profile_replays_per_parameter_gathers():
    assert {n for n in FRAMEWORKS if get_framework(n).zero3_gather == "per_param_sync"} == {"deepspeed-0.3"}
    assert get_framework("deepspeed").zero3_gather == "prefetched"


@pytest.mark.parametrize("gpus", [384, 1536])
def test_2021_zero3_is_slower_than_todays_and_differs_only_in_data_parallel_time(gpus):
    m = load_model("gpt3-175b")
    hw = load_hardware("dgx-a100-superpod", gpus)
    plan = dict(tp=1, pp=1, dp=gpus, mbs=1, gbs=gpus, zero_stage=3, recompute="full", num_gpus=gpus,
                precision="fp16")    # DeepSpeed before v0.5.x has no bf16
    today = simulate(m, hw, ParallelPlan(**plan, framework="deepspeed"))
    old = simulate(m, hw, ParallelPlan(**plan, framework="deepspeed-0.3"))
    assert old.step_time_s > today.step_time_s
    assert old.breakdown["compute"] == pytest.approx(today.breakdown["compute"])
    assert old.breakdown["dp"] > today.breakdown["dp"]


def test_deepspeed_03_exports_what_that_release_reads_and_ran():
    """The exported config of a deepspeed-0.3 plan carries no bf16 block (none before v0.5.x), turns
    contiguous_gradients off (the v0.3.13-v0.3.16 ZeRO-3 default the replay models) and says which
    release the prediction is for; a bf16 plan is refused with the reason."""
    import json
    from hardware_specs.errors import MeshcastError
    from simulator.frameworks import get_framework
    from simulator.frameworks.deepspeed_config import write_config
    from simulator.plan import resolve_plan
    model, hw = load_model("gpt3-5b"), load_hardware("dgx-a100-superpod", 64)
    plan = dict(dp=64, zero_stage=3, mbs=1, gbs=64, framework="deepspeed-0.3", num_gpus=64)
    with pytest.raises(MeshcastError, match="bf16"):
        simulate(model, hw, ParallelPlan(**plan, precision="bf16"))
    cfg = write_config(model, resolve_plan(model, ParallelPlan(**plan, precision="fp16"), 64))
    doc = json.loads(cfg.text)
    assert "bf16" not in doc and doc["fp16"]["enabled"] and doc["zero_optimization"]["contiguous_gradients"] is False
    assert any("v0.3.13-v0.5" in n for n in cfg.notes)
    assert get_framework("deepspeed-0.3").precision == ("fp16",)


def _device(name="a100-80gb-sxm"):
    from simulator.calibration import calibration_for
    from simulator.compute import DeviceModel
    from hardware_specs import load_accelerator
    acc = load_accelerator(name)
    return DeviceModel(acc, calibration_for(acc)[0])


def test_list_all_gather_copies_out_one_slice_per_rank():
    """torch's list all_gather (ProcessGroupNCCL::allgather) copies the flat result out one rank's slice
    at a time, so the buffer work around one gather grows by one memory-bound kernel's fixed cost per
    rank at fixed bytes; the bytes (fill, own slot, copy-out) stream once through HBM whatever the size."""
    from simulator.compute import memory_fixed_s, memory_time
    from simulator.zero3_2021 import gather_buffer_s
    dev = _device()
    elements = 12288 * 3 * 12288          # one 174.6B layer's fused QKV
    small, large = gather_buffer_s(dev, elements, 384), gather_buffer_s(dev, elements, 1536)
    own_slot = memory_time(dev, 4 * elements / 384) - memory_time(dev, 4 * elements / 1536)
    assert large - small == pytest.approx((1536 - 384) * memory_fixed_s(dev.cal) - own_slot, rel=1e-6)
    # bytes: the fill writes 2 an element, the own-slot copy and the copy-out read and write 4 each (with one
    # rank the own slot is the whole parameter): 10 bytes an element, so half the elements save 5 of them
    streamed = gather_buffer_s(dev, elements, 1) - gather_buffer_s(dev, 0.5 * elements, 1)
    assert streamed == pytest.approx(memory_time(dev, 5 * elements, launches=0), rel=1e-6)


def test_per_rank_copies_slow_the_2021_replay_more_at_larger_data_parallel_sizes(monkeypatch):
    """With the copy-out costed, the 2021 ZeRO-3 step slows, and by more at 1,536 data-parallel ranks
    than at 384 (same per-GPU work); the prefetched ZeRO-3 of today's DeepSpeed is untouched."""
    import simulator.zero3_2021 as z3
    from simulator import engine
    m = load_model("gpt3-175b")
    step = {}
    for gpus in (384, 1536):
        hw = load_hardware("dgx-a100-superpod", gpus)
        plan = dict(tp=1, pp=1, dp=gpus, mbs=1, gbs=gpus, zero_stage=3, recompute="full", num_gpus=gpus,
                    precision="fp16")
        with_copies = simulate(m, hw, ParallelPlan(**plan, framework="deepspeed-0.3")).step_time_s
        today = simulate(m, hw, ParallelPlan(**plan, framework="deepspeed")).step_time_s
        with monkeypatch.context() as mp:
            mp.setattr(z3, "gather_buffer_s", lambda dev, elements, n_dp: 0.0)
            engine._BUNDLES.clear()                 # stage costs are memoised
            without = simulate(m, hw, ParallelPlan(**plan, framework="deepspeed-0.3")).step_time_s
            assert simulate(m, hw, ParallelPlan(**plan, framework="deepspeed")).step_time_s == today
        step[gpus] = with_copies - without
    assert 0 < step[384] < step[1536]
