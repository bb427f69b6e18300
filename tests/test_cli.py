"""The command line: real simulations, JSON, reports, and one clear message for bad input."""
import json
import subprocess
import sys

import pytest

from meshcast.cli import main


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_simulate_text(capsys):
    code, out, _ = run_cli(capsys, "simulate", "--model", "llama3-70b", "--cluster", "dgx-h100", "--gpus", "1024",
                           "--tp", "8", "--pp", "4", "--vp", "5", "--mbs", "1", "--gbs", "1024", "--seq", "8192")
    assert code == 0
    for needle in ("step time", "tokens/s", "MFU", "FITS", "bottleneck", "pipeline bubble"):
        assert needle in out


def test_simulate_json_is_one_object(capsys):
    code, out, _ = run_cli(capsys, "simulate", "--model", "gpt-1.7b", "--cluster", "dgx-a100-superpod",
                           "--gpus", "32", "--gbs", "512", "--mbs", "16", "--recompute", "full", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["num_gpus"] == 32 and d["plan"]["dp"] == 32
    assert d["step_time_s"] > 0 and 0 < d["mfu"] < 1
    assert d["hfu"] > d["mfu"]                      # full recompute adds hardware FLOPs
    assert set(d["time_breakdown_s"]) >= {"compute", "bubble", "dp", "optimizer"}


def test_html_report_and_trace(tmp_path, capsys):
    html, trace = tmp_path / "r.html", tmp_path / "t.json"
    code, _, _ = run_cli(capsys, "simulate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16",
                         "--tp", "2", "--pp", "2", "--gbs", "32", "-o", str(html), "--trace", str(trace))
    assert code == 0
    text = html.read_text()
    assert "plotly" in text.lower() and "Pipeline timeline" in text and "<script src=\"http" not in text
    events = json.loads(trace.read_text())["traceEvents"]
    assert {e.get("pid") for e in events if e.get("ph") == "X"} == {0, 1}      # one process per stage
    assert {e.get("cat") for e in events if e.get("ph") == "X"} >= {"forward", "backward", "tp", "pp", "dp"}


def test_plan_file_round_trip(tmp_path, capsys):
    plan = tmp_path / "plan.yaml"
    plan.write_text("plan:\n  tp: 8\n  pp: 2\n  mbs: 1\n  gbs: 64\n  recompute: selective\n")
    code, out, _ = run_cli(capsys, "simulate", "--model", "gpt-22b", "--cluster", "dgx-h100", "--gpus", "64",
                           "--plan", str(plan), "--json")
    assert code == 0 and json.loads(out)["plan"]["recompute"] == "selective"


@pytest.mark.parametrize("argv,field", [
    (["--model", "llama3-7b", "--cluster", "dgx-h100"], "model"),
    (["--model", "llama3-8b", "--cluster", "dgx-h1000"], "cluster"),
    (["--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "64", "--tp", "3"], "tp*pp*cp"),
    (["--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "48", "--tp", "6", "--pp", "1"], "tp"),
    (["--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "64", "--pp", "5"], "tp*pp*cp"),
    (["--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "64", "--pp", "4", "--vp", "3"], "pp"),
    (["--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "64", "--gbs", "100"], "gbs"),
    (["--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "64", "--mbs", "0"], "mbs"),
    (["--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "-8"], "gpus"),
    (["--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "64", "--ep", "2"], "ep"),
    (["--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "64", "--recompute", "most"], "recompute"),
])
def test_bad_input_one_message_exit_2(capsys, argv, field):
    code, out, err = run_cli(capsys, "simulate", *argv)
    assert code == 2
    assert err.startswith(f"error: {field}")
    assert "Traceback" not in err and err.count("\n") == 1


def test_malformed_yaml_names_the_line(tmp_path, capsys):
    bad = tmp_path / "plan.yaml"
    bad.write_text("tp: 8\npp: [1, 2\n")
    code, _, err = run_cli(capsys, "simulate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--plan", str(bad))
    assert code == 2 and "malformed YAML at line" in err


def test_unknown_plan_field(tmp_path, capsys):
    bad = tmp_path / "plan.yaml"
    bad.write_text("tp: 8\ntensor_parallel: 2\n")
    code, _, err = run_cli(capsys, "simulate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--plan", str(bad))
    assert code == 2 and "tensor_parallel" in err and "unknown plan field" in err


def test_console_script_runs_in_a_subprocess():
    proc = subprocess.run([sys.executable, "-m", "meshcast.cli", "simulate", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "--tp" in proc.stdout


def test_does_not_fit_is_reported(capsys):
    """A plan that runs out of memory: the prediction is still printed (it says why), then one line on
    stderr names the largest part and what shrinks it, and the exit status is 3 (docs/errors.md)."""
    code, out, err = run_cli(capsys, "simulate", "--model", "llama3-70b", "--cluster", "dgx-h100", "--gpus", "8",
                             "--tp", "8", "--gbs", "8", "--zero", "0", "--json")
    assert code == 3
    d = json.loads(out)
    assert d["fits"] is False and d["memory"]["total_bytes"] > d["memory"]["capacity_bytes"]
    assert err.count("\n") == 1 and err.startswith("error: memory: the plan does not fit: stage 0 needs ")
    # tp=8 on 8 GPUs leaves dp=1, so ZeRO cannot shard the Adam states: the message says what would
    assert "largest part is optimizer states" in err and "data parallelism with the distributed optimizer" in err


def test_a_plan_that_does_not_fit_exports_no_launch_config(tmp_path, capsys):
    """--export of a plan predicted to run out of memory writes nothing: a launch config is a promise
    that the plan runs."""
    target = tmp_path / "launch.sh"
    code, out, err = run_cli(capsys, "simulate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8",
                             "--mbs", "4", "--gbs", "128", "--export", "megatron", "-O", str(target))
    assert code == 3 and not target.exists()
    assert "DOES NOT FIT" in out and "no launch config exported" in err
    assert "largest part is activations" in err and "recompute (selective or full)" in err
    code, _, _ = run_cli(capsys, "simulate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8",
                         "--mbs", "1", "--gbs", "128", "--tp", "2", "--export", "megatron", "-O", str(target))
    assert code == 0 and target.exists()


def test_plan_writes_a_trace_of_the_best_plan(tmp_path, capsys):
    trace = tmp_path / "t.json"
    code, _, _ = run_cli(capsys, "plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "16",
                         "--gbs", "64", "--top", "1", "--max-tp", "2", "--trace", str(trace))
    assert code == 0
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("ph") == "X" and e.get("cat") == "forward" for e in events)


def test_ep_comm_overlap_hides_all_to_all(capsys):
    base = ["simulate", "--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--gpus", "64", "--tp", "1",
            "--ep", "8", "--gbs", "64", "--seq", "4096", "--zero", "2", "--json"]
    code, out, _ = run_cli(capsys, *base)
    plain = json.loads(out)
    code2, out2, _ = run_cli(capsys, *base, "--ep-comm-overlap")
    hidden = json.loads(out2)
    assert code == code2 == 0
    assert hidden["time_breakdown_s"]["ep"] < plain["time_breakdown_s"]["ep"]
    assert hidden["step_time_s"] < plain["step_time_s"]


def test_validate_says_which_files_the_profile_was_fitted_on(capsys):
    meas = "validation/measurements/"
    code, out, _ = run_cli(capsys, "validate", "--measurements", meas + "h200x2_host_phases.json",
                           meas + "h200x2_train.json", "--json")
    assert code == 0
    files = {f["path"].split("/")[-1]: f for f in json.loads(out)["files"]}
    assert files["h200x2_host_phases.json"]["in_profile_fit"] is True     # its tiny steps fit host parameters
    assert files["h200x2_train.json"]["in_profile_fit"] is False          # a pure test file
