"""Issue #9: the planner's plans pass each framework's own validation code.

For every catalog model x cluster x framework of the grid, planners.search (restricted to the
framework's space by ``base=ParallelPlan(framework=...)``) returns its top 10; every one of them is
exported, the export is checked by the framework's own code, and read back: the imported plan
must simulate to the search's step time.

- megatron-core, megatron-core-local: megatron-core's configs built from the exported command line
  (tests/megatron_core_check.py; the wheel alone, no Megatron-LM checkout);
- torchtitan: ConfigManager.parse_args on the TOML and ParallelDims (its degree checks);
- deepspeed: DeepSpeedConfig (batch arithmetic, ZeRO config with extra keys forbidden).

Each framework's cases skip with the reason when it is not installed (the ``frameworks`` extra).
"""
from __future__ import annotations

import pytest

from hardware_specs import load_hardware
from models import load_model
from planners.search import search
from planners.space import make_constraints
from simulator import simulate
from simulator.frameworks.launch import export_config, import_config
from simulator.plan import ParallelPlan, resolve_plan
from tests.frameworks_support import deepspeed_config, torchtitan_job, torchtitan_modules
from tests.megatron_core_check import core_configs, megatron_core_modules

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning",
                                        "ignore::FutureWarning")

# (model, GPUs, global batch, sequence): dense GQA, dense MHA, MoE, MLA + MoE + MTP
MODELS = [("llama3-8b", 64, 256, 4096), ("llama3-70b", 256, 512, 4096), ("mixtral-8x7b", 64, 256, 4096),
          ("gpt3-175b", 512, 1024, 2048), ("deepseek-v3", 512, 1024, 4096)]
CLUSTERS = ["dgx-h100", "dgx-a100-superpod", "gb200-nvl72"]
FRAMEWORKS = ["megatron-core", "megatron-core-local", "torchtitan", "deepspeed"]
TOP = 10
LIMITS = {"max_vp": 4, "max_mbs": 4}    # keeps the whole grid to about a minute on 2 cores


def _validator(framework: str):
    """A function (text, plan, tmp_path) running the framework's own checks, or pytest.skip."""
    if framework.startswith("megatron"):
        core, why = megatron_core_modules()
        if core is None:
            pytest.skip(why)
        return lambda text, plan, tmp: _megatron(core, text, plan)
    if framework == "torchtitan":
        found, why = torchtitan_modules()
        if found is None:
            pytest.skip(why)
        return lambda text, plan, tmp: _torchtitan(found, text, plan, tmp)
    config = pytest.importorskip("deepspeed.runtime.config", reason="deepspeed is not installed")
    return lambda text, plan, tmp: _deepspeed(config, text, plan)


def _megatron(core, text: str, plan) -> None:
    cfg = core_configs(core, text, plan.num_gpus)
    t = cfg.transformer
    assert (t.tensor_model_parallel_size, t.pipeline_model_parallel_size, t.context_parallel_size) == \
        (plan.tp, plan.pp, plan.cp)
    assert (cfg.data_parallel, cfg.num_microbatches) == (plan.dp, plan.microbatches())
    assert (t.virtual_pipeline_model_parallel_size or 1) == plan.vp
    assert cfg.ddp.use_distributed_optimizer == (plan.zero_stage >= 1)


def _torchtitan(found, text: str, plan, tmp_path) -> None:
    job, dims = torchtitan_job(found, text, plan.num_gpus, tmp_path)
    assert dims.dp_replicate * dims.dp_shard == plan.dp and dims.tp == plan.tp and dims.pp == plan.pp
    assert job.training.global_batch_size == plan.gbs


def _deepspeed(config, text: str, plan) -> None:
    cfg = deepspeed_config(config, text, plan.dp)
    assert (cfg.train_batch_size, cfg.train_micro_batch_size_per_gpu) == (plan.gbs, plan.mbs)
    assert cfg.gradient_accumulation_steps == plan.microbatches()
    assert cfg.zero_optimization_stage == plan.zero_stage


def _cases():
    return [pytest.param(fw, m, cl, id=f"{fw}-{m[0]}-{cl}") for fw in FRAMEWORKS for m in MODELS for cl in CLUSTERS]


@pytest.mark.parametrize("framework,case,cluster", _cases())
def test_top_plans_pass_the_frameworks_checks_and_round_trip(framework, case, cluster, tmp_path):
    validate = _validator(framework)
    name, gpus, gbs, seq = case
    model = load_model(name)
    c = make_constraints(model, cluster, gpus=gpus, gbs=gbs, seq=seq, base=ParallelPlan(framework=framework),
                         **LIMITS)
    found = search(model, cluster, c, top=TOP).candidates
    assert found
    for cand in found:
        plan = cand.plan
        where = f"{framework} {name} {cluster}: {plan}"
        cfg = export_config(model, plan)
        try:
            validate(cfg.text, plan, tmp_path)
        except (AssertionError, ValueError, RuntimeError, TypeError, KeyError) as exc:
            pytest.fail(f"{framework} rejects a top-{TOP} plan ({where}): {type(exc).__name__}: {exc}")
        back = import_config(cfg.format, cfg.text, model, plan.num_gpus)
        hw = load_hardware(cluster, plan.num_gpus)
        again = simulate(model, hw, resolve_plan(model, back.plan, plan.num_gpus))
        assert again.step_time_s == pytest.approx(cand.result.step_time_s, rel=1e-12), where
