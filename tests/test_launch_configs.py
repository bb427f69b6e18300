"""Launch configs (simulator.frameworks.*_config): every export of the grid reads back to a plan
that simulates to the same step time, states the model's own dimensions, and the CLI writes,
reads and refuses them as documented."""
from __future__ import annotations

import json
import tomllib

import pytest

from hardware_specs import load_hardware
from hardware_specs.errors import PlanError, SpecError
from models import load_model
from simulator import simulate
from simulator.frameworks.launch import check_dims, export_config, import_config, require_format
from simulator.frameworks.megatron_config import parse_flags, pipeline_layout, read_config
from simulator.plan import ParallelPlan, resolve_plan
from tests.launch_grid import GRID


def _ids():
    return [f"{name}-{plan.framework}-{i}" for i, (name, _, plan) in enumerate(GRID)]


@pytest.fixture(scope="module", params=range(len(GRID)), ids=_ids())
def case(request):
    name, gpus, plan = GRID[request.param]
    model = load_model(name)
    return model, gpus, resolve_plan(model, plan, gpus)


def test_round_trip_gives_the_same_step_time(case):
    model, gpus, plan = case
    cfg = export_config(model, plan)
    back = import_config(cfg.format, cfg.text, model, gpus)
    check_dims(model, back.dims, "exported")
    assert back.plan.framework == plan.framework
    hw = load_hardware("dgx-h100", gpus)
    again = resolve_plan(model, back.plan, gpus)
    for f in ("tp", "pp", "vp", "cp", "ep", "dp", "zero_stage", "mbs", "gbs", "seq", "precision", "recompute",
              "pipeline_schedule", "layers_per_stage", "expert_tp", "sp", "offload_optimizer"):
        assert getattr(again, f) == getattr(plan, f), f
    assert simulate(model, hw, back.plan).step_time_s == simulate(model, hw, plan).step_time_s


def test_megatron_states_every_dimension(case):
    model, gpus, plan = case
    if export_config(model, plan).format != "megatron":
        pytest.skip("only Megatron's arguments define the model")
    back = import_config("megatron", export_config(model, plan).text, model, gpus)
    assert {"num_layers", "hidden", "ffn_hidden", "num_heads", "vocab", "norm", "activation", "position",
            "tied_embeddings", "linear_bias"} <= set(back.dims)
    assert back.dims.get("has_moe") == (model.moe is not None)


def test_megatron_uneven_pipelines():
    m = load_model("llama3-70b")
    flags = lambda plan, gpus=256: _flat(export_config(m, resolve_plan(m, plan, gpus)).text)
    first_last = flags(ParallelPlan(tp=8, pp=4, vp=2, gbs=256, layers_per_stage=(18, 22, 22, 18)))
    assert "--decoder-first-pipeline-num-layers 18 --decoder-last-pipeline-num-layers 22" not in first_last
    assert "--decoder-first-pipeline-num-layers 18" in first_last and "--decoder-last-pipeline-num-layers 18" in first_last
    assert "--num-virtual-stages-per-pipeline-rank 2" in first_last
    assert "--num-layers-per-virtual-pipeline-stage" not in first_last
    odd = flags(ParallelPlan(tp=8, pp=4, vp=2, gbs=256, layers_per_stage=(19, 20, 21, 20)))
    assert "--pipeline-model-parallel-layout 'Et*10|t*10|t*11|t*10|t*9|t*10|t*10|t*10L'" in odd
    big = load_model("llama3-405b")
    auto = _flat(export_config(big, resolve_plan(big, ParallelPlan(tp=8, pp=16, gbs=2048), 2048)).text)
    assert "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split" in auto
    assert "decoder-first" not in auto and "layout" not in auto


def _flat(text: str) -> str:
    return " ".join(text.replace("\\\n", " ").split())


def test_layout_is_megatrons_syntax():
    assert pipeline_layout((3, 2), 1) == "Et*3|t*2L"
    assert pipeline_layout((2, 2), 2, mtp=1) == "Et|t|t|tmL"


def test_megatron_zero_stages_are_megatrons_options():
    m = load_model("llama3-8b")
    text = {z: export_config(m, resolve_plan(m, ParallelPlan(tp=2, zero_stage=z, gbs=64), 64)).text for z in range(4)}
    assert "--use-distributed-optimizer" not in text[0] and "--use-megatron-fsdp" not in text[1]
    assert "--use-distributed-optimizer" in text[1]
    assert "--data-parallel-sharding-strategy optim_grads " in text[2].replace("\\\n", " ")
    assert "--data-parallel-sharding-strategy optim_grads_params" in text[3]
    assert "--ckpt-format fsdp_dtensor" in text[3]
    assert "CUDA_DEVICE_MAX_CONNECTIONS=1" in text[1] and "export CUDA_DEVICE_MAX_CONNECTIONS" not in text[3]


def test_megatron_local_has_no_te_flags():
    m = load_model("mixtral-8x7b")
    plan = resolve_plan(m, ParallelPlan(tp=2, ep=4, gbs=64, framework="megatron-core-local"), 64)
    text = export_config(m, plan).text
    assert "--transformer-impl local" in text and "--moe-grouped-gemm" not in text and "--attention-backend" not in text


def test_moe_layer_pattern_round_trips():
    m = load_model("deepseek-v3")
    cfg = export_config(m, resolve_plan(m, ParallelPlan(tp=2, pp=8, ep=32, etp=1, gbs=1024,
                                                        layers_per_stage=(7, 8, 8, 8, 8, 8, 8, 6)), 1024))
    assert "--moe-layer-freq '([0]*3+[1]*58)'" in cfg.text and "--multi-latent-attention" in cfg.text
    dims = import_config("megatron", cfg.text, m).dims
    assert dims["moe_layer_flags"] == tuple(int(m.is_moe_layer(i)) for i in range(61))


def test_reader_ignores_unknown_flags_and_stray_tokens():
    got = read_config("torchrun --nproc-per-node 8 pretrain_gpt.py --tensor-model-parallel-size 4 --foo 3 "
                      "stray --use-distributed-optimizer --bar")
    assert got.plan.tp == 4 and got.plan.zero_stage == 1
    assert any("--bar --foo" in n for n in got.notes) and any("stray" in n for n in got.notes)
    assert parse_flags("--a=1 --b")[0] == {"--a": "1", "--b": None}


def test_dimension_mismatch_names_the_field():
    m70, m8 = load_model("llama3-70b"), load_model("llama3-8b")
    cfg = export_config(m70, resolve_plan(m70, ParallelPlan(tp=8, gbs=64), 64))
    with pytest.raises(SpecError, match="num_layers: the config says 80 but llama3-8b has 32"):
        check_dims(m8, import_config("megatron", cfg.text, m8).dims, "f")


def test_format_must_match_the_framework():
    m = load_model("llama3-8b")
    plan = resolve_plan(m, ParallelPlan(zero_stage=3, gbs=64, framework="torchtitan"), 64)
    with pytest.raises(PlanError, match="torchtitan, which exports 'torchtitan', not 'megatron'"):
        require_format(plan, "megatron")
    with pytest.raises(PlanError, match="pytorch has no launch-config format"):
        export_config(m, resolve_plan(m, ParallelPlan(zero_stage=3, gbs=64, framework="pytorch"), 64))


def test_torchtitan_and_deepspeed_texts_parse():
    m = load_model("llama3-70b")
    tt = export_config(m, resolve_plan(m, ParallelPlan(tp=8, pp=4, vp=2, zero_stage=0, gbs=256,
                                                       framework="torchtitan"), 32))
    doc = tomllib.loads(tt.text)
    assert doc["parallelism"]["pipeline_parallel_schedule"] == "Interleaved1F1B"
    parts = doc["parallelism"]["module_fqns_per_model_part"]
    assert len(parts) == 8 and parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "output"]
    assert doc["training"]["local_batch_size"] == 256 and doc["parallelism"]["data_parallel_shard_degree"] == 1
    ds = export_config(m, resolve_plan(m, ParallelPlan(pp=8, zero_stage=1, gbs=128, framework="deepspeed"), 64))
    d = json.loads(ds.text)
    assert d["train_batch_size"] == 128 and d["gradient_accumulation_steps"] == 16 and d["pipeline"]["stages"] == 8
    with pytest.raises(SpecError, match="gpus"):
        import_config("deepspeed", ds.text, m, None)


def _cli(argv, capsys):
    from meshcast.cli import main
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_export_and_import(tmp_path, capsys):
    base = ["simulate", "--model", "llama3-70b", "--cluster", "dgx-h100", "--gpus", "256", "--json"]
    path = tmp_path / "tt.toml"
    rc, out, err = _cli(base + ["--framework", "torchtitan", "--tp", "8", "--zero", "3", "--gbs", "256",
                                "--export", "torchtitan", "-O", str(path)], capsys)
    assert rc == 0, err
    want = json.loads(out)["step_time_s"]
    rc, out, err = _cli(base + ["--from-torchtitan", str(path)], capsys)
    assert rc == 0, err
    assert json.loads(out)["step_time_s"] == want and json.loads(out)["plan"]["framework"] == "torchtitan"
    rc, out, err = _cli(base + ["--tp", "8", "--gbs", "256", "--export", "deepspeed"], capsys)
    assert rc == 2 and "megatron-core, which exports 'megatron', not 'deepspeed'" in err
    bad = tmp_path / "bad.sh"
    bad.write_text("pretrain_gpt.py --num-layers 32 --tensor-model-parallel-size 8")
    rc, out, err = _cli(base + ["--from-megatron-args", str(bad)], capsys)
    assert rc == 2 and "num_layers: the config says 32 but llama3-70b has 80" in err


def test_cli_plan_export_alias(capsys):
    rc, out, err = _cli(["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--gbs", "16",
                         "--top", "1", "--no-progress", "--framework", "torchtitan", "--export", "megatron"], capsys)
    assert rc == 2 and "torchtitan" in err and "not 'megatron'" in err


from hypothesis import given, settings
from hypothesis import strategies as st

from hardware_specs.errors import MeshcastError

_TOKENS = ["--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--num-layers", "--moe-layer-freq",
           "--pipeline-model-parallel-layout", "--decoder-first-pipeline-num-layers", "--recompute-method", "block",
           "--num-virtual-stages-per-pipeline-rank", "--use-megatron-fsdp", "--foo", "2", "0", "-3", "x", "Et|tL",
           "([0]*2+[1]*3)", "__import__('os')", "pretrain_gpt.py", "'", "\\", "=", "--a=b"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(_TOKENS), max_size=12))
def test_megatron_reader_never_crashes(tokens):
    """Any argument list reads to a plan or ends in one MeshcastError (never another exception)."""
    try:
        read_config(" ".join(tokens), load_model("llama3-8b"))
    except MeshcastError:
        pass


def test_cli_deepspeed_round_trip_and_plan_export_file(tmp_path, capsys):
    base = ["simulate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "64", "--json"]
    path = tmp_path / "ds.json"
    rc, out, err = _cli(base + ["--framework", "deepspeed", "--zero", "3", "--gbs", "128", "--recompute", "full",
                                "--export", "deepspeed", "-O", str(path)], capsys)
    assert rc == 0, err
    want = json.loads(out)["step_time_s"]
    rc, out, err = _cli(base + ["--from-deepspeed", str(path)], capsys)
    assert rc == 0, err
    assert json.loads(out)["step_time_s"] == want and json.loads(out)["plan"]["recompute"] == "full"
    job = tmp_path / "best.toml"
    rc, out, err = _cli(["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--gbs", "16",
                         "--top", "1", "--no-progress", "--framework", "torchtitan", "--export", "torchtitan",
                         "-O", str(job)], capsys)
    assert rc == 0, err
    assert tomllib.loads(job.read_text())["training"]["global_batch_size"] == 16


def test_megatron_script_world_size_is_checked():
    from simulator.frameworks.megatron_config import script_world_size
    m = load_model("llama3-8b")
    cfg = export_config(m, resolve_plan(m, ParallelPlan(tp=2, gbs=64), 64))
    assert script_world_size(cfg.text) == 64
    assert not any("processes" in n for n in import_config("megatron", cfg.text, m, 64).notes)
    assert any("launches 64 processes but 32 GPUs" in n for n in import_config("megatron", cfg.text, m, 32).notes)


def test_a_hybrid_mamba_model_is_refused_before_any_work(tmp_path, capsys):
    """No launch config meshcast writes carries a hybrid model's layer pattern: simulate --export
    says so in one line, exit 2, before simulating, and writes nothing."""
    path = tmp_path / "run.sh"
    rc, out, err = _cli(["simulate", "--model", "nemotron-3-nano-30b-a3b", "--cluster", "gb300-nvl72", "--gpus", "8",
                         "--ep", "8", "--gbs", "64", "--export", "megatron", "-O", str(path)], capsys)
    assert rc == 2 and "hybrid Mamba-2 model" in err and "Traceback" not in err
    assert "step time" not in out and not path.exists()
