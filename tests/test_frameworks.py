"""Framework profiles: each framework's plan space, memory semantics and layer splits."""
import pytest

from hardware_specs import load_hardware
from hardware_specs.errors import PlanError, UnknownNameError
from meshcast.cli import main
from models import load_model
from planners.search import Objective, search
from planners.space import make_constraints
from simulator import ParallelPlan, simulate
from simulator.frameworks import FRAMEWORKS, framework_violation, get_framework
from simulator.plan import resolve_plan


@pytest.fixture(scope="module")
def llama405b():
    return load_model("llama3-405b")


def test_every_profile_loads_and_names_its_zero_stages():
    assert set(FRAMEWORKS) >= {"megatron-core", "megatron-core-local", "torchtitan", "deepspeed", "pytorch"}
    for name in FRAMEWORKS:
        fw = get_framework(name)
        assert fw.name == name and fw.zero_stages and all(fw.zero[z].means for z in fw.zero_stages)


def test_unknown_framework_lists_the_known_ones(capsys):
    with pytest.raises(UnknownNameError) as err:
        get_framework("megatron")
    assert "megatron-core" in str(err.value)
    code = main(["simulate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--framework", "nemo"])
    _, stderr = capsys.readouterr()
    assert code == 2 and stderr.count("\n") == 1 and "torchtitan" in stderr and "Traceback" not in stderr


@pytest.mark.parametrize("framework,plan,field", [
    ("deepspeed", dict(tp=2), "tp"),                                   # the engine has no tensor parallelism
    ("deepspeed", dict(pp=2, zero_stage=2), "zero_stage"),             # pipeline engine: ZeRO-1 at most
    ("deepspeed", dict(pp=4, vp=2), "schedule"),                       # no interleaved schedule
    ("megatron-core-local", dict(tp=2, cp=2), "cp"),                   # CP runs through TE attention
    ("megatron-core-local", dict(tp=2, precision="fp8"), "precision"),  # no FP8 without TE
    ("megatron-core-local", dict(tp=2, tp_comm_overlap=True), "tp_comm_overlap"),
    ("megatron-core", dict(tp=2, schedule="gpipe", pp=2), "schedule"),  # Megatron has no GPipe
    ("megatron-core", dict(tp=2, pp=2, zero_stage=2), "zero_stage"),    # Megatron FSDP + PP: not modelled
    ("torchtitan", dict(tp=2, zero_stage=0), "zero_stage"),            # DDP only on a 1-D mesh
    ("torchtitan", dict(tp=2, zero_stage=3, sequence_parallel=False), "sequence_parallel"),
    ("torchtitan", dict(tp=2, cp=32, zero_stage=0), "zero_stage"),      # FSDP2 whenever cp > 1
    ("megatron-core", dict(tp=2, pp=2, vp=2, recompute="full", recompute_layers=3), "recompute_layers"),
    ("torchtitan", dict(tp=2, zero_stage=3, recompute="full", recompute_layers=7), "recompute_layers"),
    ("pytorch", dict(tp=2, zero_stage=3), "tp"),
    ("pytorch", dict(zero_stage=1), "zero_stage"),
])
def test_framework_rules_name_the_field_and_the_framework(framework, plan, field):
    model, hw = load_model("llama3-8b"), load_hardware("dgx-h100", 64)
    with pytest.raises(PlanError) as err:
        simulate(model, hw, ParallelPlan(framework=framework, mbs=1, gbs=64, **plan))
    assert err.value.field == field and framework in err.value.reason


def test_recipe_and_attention_come_from_the_framework():
    model = load_model("llama3-8b")
    # megatron-core: Transformer Engine prefers cuDNN fused attention on Hopper+; torchtitan and pytorch:
    # SDPA picks cuDNN on Hopper (measured on H200); simulator/compute.py costs cudnn as FlashAttention-2
    # on older GPUs and where a profile has no fitted cuDNN parameters
    expect = {("megatron-core", 1): ("megatron", "cudnn"), ("megatron-core-local", 0): ("megatron", "unfused"),
              ("torchtitan", 3): ("torch_fsdp", "cudnn"), ("deepspeed", 2): ("zero", "flash"),
              ("pytorch", 0): ("torch_amp", "cudnn")}
    for (fw, zero), (recipe, attention) in expect.items():
        p = resolve_plan(model, ParallelPlan(framework=fw, zero_stage=zero, mbs=1, gbs=8), 8)
        assert (p.recipe, p.attention) == (recipe, attention)
    with pytest.raises(PlanError):   # a recipe the framework does not keep is an error, not a silent choice
        resolve_plan(model, ParallelPlan(framework="megatron-core", recipe="torch_fsdp", zero_stage=3), 8)


def test_llama3_405b_published_flags_simulate_without_a_split_hint(llama405b):
    # Llama 3 paper: tp 8, pp 16, dp 128 on 16,384 H100s, 126 layers; Megatron-Core counts the
    # embedding and the loss as one layer each of the first and last stage: (126 + 2) / 16 = 8
    hw = load_hardware("dgx-h100", 16384)
    r = simulate(llama405b, hw, ParallelPlan(tp=8, pp=16, mbs=1, gbs=2048, seq=8192, recompute="full"))
    assert r.plan.layers_per_stage == (7,) + (8,) * 14 + (7,)
    assert "--account-for-embedding-in-pipeline-split" in r.split_note
    assert r.fits


def test_layers_that_no_framework_rule_splits_are_an_error(llama405b):
    # 126 layers over pp=5: neither 126, 127 nor 128 divides by 5
    with pytest.raises(PlanError) as err:
        resolve_plan(llama405b, ParallelPlan(tp=8, pp=5, mbs=1, gbs=2048), 8 * 5 * 4)
    assert err.value.field == "pp" and "layers_per_stage" in err.value.reason


def test_torchtitan_counts_embedding_and_output_as_layers():
    fw = get_framework("torchtitan")
    from simulator.frameworks import default_split
    split, how = default_split(fw, 30, 4, 1)     # 32 weighted units over 4 stages: 8 each, ends give one up
    assert split == (7, 8, 8, 7) and "torchtitan" in how


def test_zero2_reduces_sharded_gradients_after_every_microbatch():
    # Megatron FSDP optim_grads / DeepSpeed stage 2 keep only a gradient shard, so each
    # micro-batch's gradients are reduce-scattered; ZeRO-1 keeps the full buffer and reduces once
    model, hw = load_model("llama3-8b"), load_hardware("dgx-h100", 64)
    def dp_total(zero, gbs):
        return simulate(model, hw, ParallelPlan(tp=1, mbs=1, gbs=gbs, seq=4096, zero_stage=zero)).dp_comm_total_s
    assert dp_total(1, 512) == pytest.approx(dp_total(1, 128))            # once per step, whatever m
    assert dp_total(2, 512) > 3 * dp_total(2, 128) / 1.5                  # grows with the micro-batches
    assert dp_total(2, 128) > dp_total(1, 128)


@pytest.mark.parametrize("framework", ["megatron-core", "megatron-core-local", "torchtitan", "deepspeed"])
def test_planner_returns_only_plans_the_framework_can_launch(framework):
    model = load_model("llama3-8b")
    c = make_constraints(model, "dgx-h100", gpus=32, gbs=128, seq=4096, base=ParallelPlan(framework=framework),
                         max_vp=2, max_mbs=2)
    res = search(model, "dgx-h100", c, objective=Objective(), top=10)
    assert res.candidates
    fw = get_framework(framework)
    for cand in res.candidates:
        p = cand.result.plan
        assert p.framework == framework and framework_violation(fw, model, p) is None
        assert p.zero_stage in fw.zero_stages and p.recipe == fw.recipe(p.zero_stage)


def test_torchtitan_expert_tensor_parallelism_is_1_or_tp():
    """torchtitan ParallelDims._validate: "Currently we only support ETP=TP or ETP=1"."""
    model, hw = load_model("mixtral-8x7b"), load_hardware("dgx-h100", 64)
    ok = dict(framework="torchtitan", tp=4, ep=4, zero_stage=3, mbs=1, gbs=64)
    for etp in (1, 4):
        assert simulate(model, hw, ParallelPlan(etp=etp, **ok)).step_time_s > 0
    with pytest.raises(PlanError) as err:
        simulate(model, hw, ParallelPlan(etp=2, **ok))
    assert err.value.field == "etp" and "torchtitan" in err.value.reason


def test_recompute_counts_are_the_ones_the_framework_can_say():
    """Megatron's block method counts layers per model chunk (n = k * vp); torchtitan's layer
    SAC wraps every k-th layer (n = top // k); DeepSpeed leaves it to the model code."""
    from simulator.frameworks.rules import recompute_at_least, recompute_expressible
    mc, tt, ds = (get_framework(n) for n in ("megatron-core", "torchtitan", "deepspeed"))
    assert [n for n in range(1, 16) if recompute_expressible(mc, n, 16, 4)] == [4, 8, 12]
    assert [n for n in range(1, 32) if recompute_expressible(tt, n, 32, 1)] == \
        sorted({32 // k for k in range(2, 33)})
    assert all(recompute_expressible(ds, n, 16, 1) for n in range(1, 16))
    assert recompute_at_least(mc, 5, 16, 4) == 8 and recompute_at_least(mc, 13, 16, 4) is None
    assert recompute_at_least(tt, 11, 32, 1) == 16


@pytest.mark.parametrize("framework", ["megatron-core", "torchtitan"])
def test_planner_proposes_only_recompute_counts_the_framework_can_say(framework):
    from planners.search import brute_force
    from simulator.frameworks.rules import recompute_expressible
    model = load_model("llama3-8b")
    c = make_constraints(model, "dgx-h100", gpus=16, gbs=64, seq=8192, base=ParallelPlan(framework=framework),
                         max_vp=4, max_mbs=1, fixed={"recompute": "full"})
    fw = get_framework(framework)
    found = [c_.result.plan for c_ in search(model, "dgx-h100", c, top=10).candidates]
    found += [r.plan for _, r in brute_force(model, "dgx-h100", c, top=10)]
    counted = [p for p in found if p.recompute_layers is not None]
    assert counted, "the grid should need partial recompute somewhere"
    for p in counted:
        top = max(p.layers_per_stage) if p.layers_per_stage else model.num_layers // p.pp
        assert recompute_expressible(fw, p.recompute_layers, top, p.vp), p


def test_megatron_export_states_the_models_rope_base():
    """A launch config must train the same model: Llama 3's RoPE base is 500,000 (its config.json),
    not Megatron's default 10,000; a model that names none gets the default and a note."""
    from simulator.frameworks.launch import export_config
    from simulator.plan import resolve_plan
    m = load_model("llama3-8b")
    cfg = export_config(m, resolve_plan(m, ParallelPlan(tp=2, mbs=1, gbs=8), 8))
    assert "--rotary-base 500000" in cfg.text and not any("rotary" in n for n in cfg.notes)
    bare = m.model_copy(update={"rope_base": None})
    cfg = export_config(bare, resolve_plan(bare, ParallelPlan(tp=2, mbs=1, gbs=8), 8))
    assert "--rotary-base 10000" in cfg.text and any("rotary" in n for n in cfg.notes)


def test_validate_takes_a_framework(capsys):
    """validate --framework keeps the training steps and published runs that ran on it."""
    from meshcast.cli import main
    # Narayanan et al. 2021's six ZeRO-3 rows ran DeepSpeed's 2021 ZeRO-3 (profile deepspeed-0.3)
    code = main(["validate", "--published", "validation/published/published_runs.csv", "--framework", "deepspeed-0.3"])
    out = capsys.readouterr().out
    assert code == 0 and "only the 6 of" in out and "ran on deepspeed-0.3" in out
    code = main(["validate", "--measurements", "validation/measurements/h200x2_plan_megatron.json",
                 "--framework", "torchtitan"])
    err = capsys.readouterr().err
    assert code == 2 and "no record of this file ran on torchtitan" in err
