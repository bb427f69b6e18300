"""ZeRO-3 parameter gathering: overlap switches, and DeepSpeed's per-module gathers at scale."""
import pytest

from hardware_specs import load_hardware
from models import load_model
from models.params import layer_param_tensors
from simulator.engine import simulate
from simulator.plan import ParallelPlan


def _plan(gpus: int, **kw) -> ParallelPlan:
    base = dict(tp=1, pp=1, dp=gpus, mbs=1, gbs=gpus, zero_stage=3, recompute="full", num_gpus=gpus)
    return ParallelPlan(**{**base, **kw})


@pytest.fixture(scope="module")
def gpt_175b():
    return load_model("gpt3-175b")


def test_turning_overlap_off_exposes_every_gather_and_reduce_scatter(gpt_175b):
    hw = load_hardware("dgx-a100-superpod", 384)
    on = simulate(gpt_175b, hw, _plan(384, framework="deepspeed"))
    off = simulate(gpt_175b, hw, _plan(384, framework="deepspeed", overlap_param_gather=False, overlap_grad_reduce=False))
    assert off.step_time_s > on.step_time_s
    # nothing hidden: data-parallel time is the whole per-layer traffic, three passes per layer
    assert off.breakdown["dp"] > 2 * on.breakdown["dp"]


def test_deepspeed_module_gathers_pay_ring_latency_that_grows_with_the_group(gpt_175b):
    # fixed per-GPU work (one sequence per GPU): a 4x larger group adds (n-1) hops per call
    small = simulate(gpt_175b, load_hardware("dgx-a100-superpod", 384), _plan(384, framework="deepspeed"))
    large = simulate(gpt_175b, load_hardware("dgx-a100-superpod", 1536), _plan(1536, framework="deepspeed"))
    fsdp_small = simulate(gpt_175b, load_hardware("dgx-a100-superpod", 384), _plan(384, framework="torchtitan"))
    fsdp_large = simulate(gpt_175b, load_hardware("dgx-a100-superpod", 1536), _plan(1536, framework="torchtitan"))
    growth = large.breakdown["dp"] - small.breakdown["dp"]
    hop = load_hardware("dgx-a100-superpod", 1536).cluster.tiers[0].latency_s
    calls = layer_param_tensors(gpt_175b, 0, biases=False) * gpt_175b.num_layers
    # lower bound: the forward all-gathers alone, with no compute left to hide them under
    assert growth > 0.5 * calls * (1536 - 384) * 7 / 8 * hop
    # one call per layer (FSDP) pays that latency once per layer, not once per module
    assert growth > fsdp_large.breakdown["dp"] - fsdp_small.breakdown["dp"]
