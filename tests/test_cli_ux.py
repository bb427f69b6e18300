"""CLI usability: fast, light --help; Megatron-LM flag spellings; choices; versioned strict JSON;
catalog --model."""
import json
import subprocess
import sys

import pytest

from meshcast.cli import build_parser, main
from meshcast.commands import common

HEAVY = ("numpy", "scipy", "plotly", "pulp", "pydantic", "yaml")


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv", [[], ["simulate"], ["plan"], ["whatif"], ["catalog"], ["validate"], ["calibrate"]])
def test_help_imports_no_heavy_module(argv):
    """Structural, not timed: building the parser and printing help loads no numeric library."""
    code = ("import sys\nfrom meshcast.cli import main\n"
            f"try:\n    main({argv + ['--help']!r})\nexcept SystemExit:\n    pass\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_choice_lists_match_the_plan_checks():
    from simulator import plan
    assert common.SCHEDULES == plan.SCHEDULES and common.RECOMPUTE == plan.RECOMPUTE
    from simulator.frameworks import DEFAULT_FRAMEWORK, FRAMEWORKS
    assert common.FRAMEWORKS == FRAMEWORKS and common.DEFAULT_FRAMEWORK == DEFAULT_FRAMEWORK
    assert common.PRECISIONS == plan.PRECISIONS
    assert common.FP8_RECIPES == plan.FP8_RECIPES


MEGATRON = ["--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2",
            "--num-virtual-stages-per-pipeline-rank", "2", "--context-parallel-size", "1",
            "--micro-batch-size", "1", "--global-batch-size", "64", "--seq-length", "4096",
            "--recompute-granularity", "selective", "--sequence-parallel", "--data-parallel-size", "4"]
SHORT = ["--tp", "2", "--pp", "2", "--vp", "2", "--cp", "1", "--mbs", "1", "--gbs", "64", "--seq", "4096",
         "--recompute", "selective", "--dp", "4"]


def test_megatron_spellings_give_the_same_plan(capsys):
    base = ["simulate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16", "--json"]
    code, out, err = run_cli(capsys, *base, *MEGATRON)
    code2, out2, _ = run_cli(capsys, *base, *SHORT)
    assert code == code2 == 0, err
    a, b = json.loads(out), json.loads(out2)
    assert a["plan"] == b["plan"] and a["step_time_s"] == b["step_time_s"]
    assert a["plan"]["tp"] == 2 and a["plan"]["vp"] == 2 and a["plan"]["recompute"] == "selective"


def test_megatron_spellings_in_moe_and_plan(capsys):
    code, out, err = run_cli(capsys, "simulate", "--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--gpus", "64",
                             "--tensor-model-parallel-size", "1", "--expert-model-parallel-size", "8",
                             "--expert-tensor-parallel-size", "1", "--global-batch-size", "64", "--seq-length", "4096",
                             "--recompute-granularity", "full", "--json")
    assert code == 0, err
    assert json.loads(out)["plan"]["ep"] == 8
    code, out, err = run_cli(capsys, "plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16",
                             "--global-batch-size", "64", "--seq-length", "4096", "--tensor-model-parallel-size", "2",
                             "--pipeline-model-parallel-size", "1", "--top", "1", "--json", "--no-progress")
    assert code == 0, err
    best = json.loads(out)["plans"][0]["plan"]
    assert best["tp"] == 2 and best["pp"] == 1 and best["seq"] == 4096


def test_no_sequence_parallel(capsys):
    base = ["simulate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--tp", "8", "--gbs", "8",
            "--json"]
    assert json.loads(run_cli(capsys, *base)[1])["plan"]["sequence_parallel"] is True
    assert json.loads(run_cli(capsys, *base, "--no-sp")[1])["plan"]["sequence_parallel"] is False


def _subparser(name):
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return sub.choices[name]


@pytest.mark.parametrize("name", ["simulate", "whatif", "plan"])
def test_aliases_share_one_option(name):
    """An alias is another spelling of the same option, listed beside it in --help."""
    p = _subparser(name)
    by_flag = {s: a for a in p._actions for s in a.option_strings}
    for flag, aliases in common.MEGATRON_ALIASES.items():
        if flag == "--dp" or flag in by_flag:
            for alias in aliases:
                assert by_flag[alias] is by_flag[flag]
    help_text = p.format_help()
    assert "--tp N, --tensor-model-parallel-size N" in help_text


@pytest.mark.parametrize("name", ["simulate", "whatif", "plan", "catalog", "validate", "calibrate"])
def test_help_states_each_default_once(name):
    text = _subparser(name).format_help()
    assert "(default: None)" not in text and "%(default)" not in text
    for line in text.splitlines():
        assert line.count("default") <= 1, line


@pytest.mark.parametrize("name,flag,values", [
    ("simulate", "--recompute", ("none", "selective", "full")), ("simulate", "--schedule", common.SCHEDULES),
    ("simulate", "--precision", common.PRECISIONS), ("simulate", "--framework", common.FRAMEWORKS),
    ("simulate", "--attention", common.ATTENTION), ("simulate", "--zero", (0, 1, 2, 3)),
    ("plan", "--objective", ("throughput", "cost")), ("plan", "--recompute", ("none", "selective", "full")),
    ("plan", "--zero", (0, 1, 2, 3)), ("plan", "--precision", common.PRECISIONS)])
def test_fixed_value_options_use_choices(name, flag, values):
    action = next(a for a in _subparser(name)._actions if flag in a.option_strings)
    assert tuple(action.choices) == tuple(values)


def test_usage_error_is_one_line(capsys):
    code, _, err = run_cli(capsys, "simulate", "--model", "llama3-8b", "--cluster", "dgx-h100",
                           "--recompute-granularity", "most")
    assert code == 2 and err.startswith("error: recompute: invalid choice 'most'") and err.count("\n") == 1
    code, _, err = run_cli(capsys, "simulate", "--cluster", "dgx-h100")
    assert code == 2 and err.startswith("error: model: required") and err.count("\n") == 1
    code, _, err = run_cli(capsys, "simulate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--tp", "two")
    assert code == 2 and err.startswith("error: tp: invalid int value") and err.count("\n") == 1
    code, _, err = run_cli(capsys, "simulat")
    assert code == 2 and err.startswith("error: command: invalid choice 'simulat'")
    code, _, err = run_cli(capsys)
    assert code == 2 and err.startswith("error: command: required")
    code, _, err = run_cli(capsys, "catalog", "--bogus")
    assert code == 2 and err.startswith("error: arguments: unrecognized arguments: --bogus")


def _reject(token):
    raise ValueError(f"non-standard JSON constant {token}")


MEAS = "validation/measurements/h200_train_extra.json"
JSON_COMMANDS = {
    "simulate": ["simulate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16", "--gbs", "32", "--tp", "2"],
    "plan": ["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16", "--gbs", "64", "--top", "1",
             "--max-tp", "2", "--no-progress"],
    "whatif": ["whatif", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16", "--gbs", "32",
               "--sweep", "gpus=8,16", "--no-progress"],
    "validate": ["validate", "--measurements", MEAS],
    "calibrate": ["calibrate", "--measurements", "validation/measurements/h200_host_phases.json", "-o",
                  "{tmp}/profile.yaml"],   # host-bound tiny steps: they constrain the host parameters
    "catalog": ["catalog"],
    "catalog-model": ["catalog", "--model", "mixtral-8x7b"],
    "catalog-cluster": ["catalog", "--cluster", "dgx-h100"],
}


@pytest.mark.parametrize("key", list(JSON_COMMANDS))
def test_every_json_output_is_versioned_strict_json(key, capsys, tmp_path):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in JSON_COMMANDS[key]] + ["--json"]
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    doc = json.loads(out, parse_constant=_reject)
    assert doc["schema_version"] == f"meshcast.{argv[0]}/{common.JSON_SCHEMA_REVISION}"
    assert doc["meshcast_version"] == __import__("meshcast").__version__


def test_emit_json_replaces_nan(capsys):
    common.emit_json({"x": float("nan"), "y": [1.0, float("inf")]}, "simulate")
    doc = json.loads(capsys.readouterr().out, parse_constant=_reject)
    assert doc["x"] is None and doc["y"] == [1.0, None]


def test_catalog_model_shows_shape_and_counts(capsys):
    code, out, _ = run_cli(capsys, "catalog", "--model", "mixtral-8x7b", "--json")
    doc = json.loads(out)
    m, p = doc["model"], doc["params"]
    assert m["num_layers"] == 32 and m["num_kv_heads"] == 8 and m["head_dim"] == 128 and m["moe"]["top_k"] == 2
    assert 46.0e9 < p["total"] < 47.2e9 and 12.5e9 < p["active_per_token"] < 13.2e9
    per = p["per_layer"]["moe_layer"]
    assert per["count"] == 32
    assert p["total"] == (per["count"] * per["total"] + p["embedding"] + p["output_head"] + p["final_norm"])
    code, out, _ = run_cli(capsys, "catalog", "--model", "deepseek-v3")
    assert code == 0 and "MLA" in out and "active per token" in out and "moe layer x58" in out


def test_calibrate_text_without_held_out_records_prints_no_nan(capsys, tmp_path):
    """--holdout-every 0 (the documented 'none') printed 'nan%' in the held-out columns."""
    data = json.loads(open("validation/measurements/h100_kernels.json").read())
    small = tmp_path / "gemms.json"
    small.write_text(json.dumps({"info": data["info"], "records": [r for r in data["records"] if r["kind"] == "gemm"][:20]}))
    code, out, err = run_cli(capsys, "calibrate", "--measurements", str(small), "-o", str(tmp_path / "p.yaml"),
                             "--holdout-every", "0")
    assert code == 0, err
    row = next(line for line in out.splitlines() if line.startswith("gemm "))
    assert "nan" not in out and row.split()[-2:] == ["-", "-"]
