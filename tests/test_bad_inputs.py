"""Bad input to every command: exit status 2, one line ``error: <field>: <reason>`` on stderr
naming the field, no traceback, nothing written (docs/errors.md).

Table-driven: each case is (name, argv with {placeholders} for files made under a temporary
folder, a text the error line must contain). Outputs always point into ``out/``, which must be
empty afterwards. Hypothesis adds generated YAML, JSON, CSV and HF config.json contents.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meshcast.cli import main

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "validation" / "measurements" / "h100_kernels.json"
RUNS_CSV = ROOT / "validation" / "published" / "published_runs.csv"
LAYERS_CSV = ROOT / "validation" / "published" / "published_layer_times.csv"

SIM = ["simulate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "64", "--gbs", "256"]
PLAN = ["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--gbs", "64", "--tp", "8",
        "--pp", "1", "--mbs", "1", "--zero", "1", "--recompute", "full"]
WHATIF = ["whatif", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "64", "--gbs", "256",
          "--sweep", "gpus=64"]
CAL = ["calibrate", "--measurements", "{kernels_small}"]
VAL = ["validate", "--measurements", "{kernels_small}"]

BINARY = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe\x00"
LATIN1 = "tp: 2\nname: caf\xe9\n".encode("latin-1")


def _kernels_small() -> dict:
    data = json.loads(KERNELS.read_text())
    gemms = [r for r in data["records"] if r["kind"] == "gemm"][:10]
    return {"info": data["info"], "records": gemms}


def _files() -> dict[str, bytes | str | None]:
    """The files the cases refer to, by placeholder (None: a folder)."""
    small = _kernels_small()
    rec = small["records"][0]
    bad_rec = lambda **kw: json.dumps({"info": small["info"], "records": [{**rec, **kw}]})  # noqa: E731
    runs_header = RUNS_CSV.read_text().splitlines()[0]
    layers_lines = LAYERS_CSV.read_text().splitlines()
    good_layer = next(csv_row for csv_row in layers_lines[1:] if "Baseline no recompute" in csv_row)
    return {
        "kernels_small": json.dumps(small),
        "binary": BINARY, "latin1": LATIN1, "empty": "", "folder": None,
        "yaml_broken": "tp: [1, 2\npp: 1\n", "yaml_list": "- 1\n- 2\n", "yaml_scalar": "42\n",
        "json_broken": '{"records": [', "json_list": "[1, 2]", "json_nan": '{"info": {"gpu": "x"}, "records": NaN}',
        # plan files
        "plan_str_bool": "plan:\n  tp_comm_overlap: 'false'\n",
        "plan_float_tp": "tp: 2.0\n", "plan_str_tp": "tp: '2'\n", "plan_neg_pp": "pp: -1\n", "plan_zero_mbs": "mbs: 0\n",
        "plan_bool_tp": "tp: true\n", "plan_lps_str": "layers_per_stage: '16,16'\n",
        "plan_lps_items": "pp: 2\nlayers_per_stage: [16, x]\n", "plan_lps_neg": "pp: 2\nlayers_per_stage: [40, -8]\n",
        "plan_lps_sum": "pp: 2\nlayers_per_stage: [10, 10]\n", "plan_lps_len": "pp: 2\nlayers_per_stage: [32]\n",
        "plan_unknown": "tensor_parallel: 8\n", "plan_empty_body": "plan: {}\n", "plan_null_body": "plan:\n",
        "plan_list_body": "plan: [1, 2]\n", "plan_zero5": "zero_stage: 5\n", "plan_sched": "schedule: zigzag\n",
        "plan_prec": "precision: fp7\n", "plan_gpus32": "num_gpus: 32\ntp: 1\n", "plan_sp_int": "sequence_parallel: 1\n",
        "plan_gbs_str": "gbs: lots\n", "plan_nested_list": "layers_per_stage: [[1, 2]]\n",
        "plan_recompute_num": "recompute: 3\n", "plan_key_int": "1: 2\n",
        "plan_dup_key": "tp: 8\npp: 1\ntp: 4\n",      # PyYAML kept the last tp silently
        # calibration profiles
        "cal_gemm5": "parameters:\n  gemm_peak_fraction: {bf16: 5.0}\n", "cal_hbm_str": "parameters:\n  hbm_fraction: '0.9'\n",
        "cal_hbm_zero": "parameters:\n  hbm_fraction: 0\n", "cal_hbm_neg": "parameters:\n  hbm_fraction: -0.5\n",
        "cal_launch_neg": "parameters:\n  kernel_launch_s: -1.0e-6\n", "cal_nan": "parameters:\n  hbm_fraction: .nan\n",
        "cal_inf": "parameters:\n  kernel_launch_s: .inf\n", "cal_unknown": "parameters:\n  warp_speed: 9\n",
        "cal_links_list": "parameters:\n  links: [1]\n", "cal_link_bw0": "parameters:\n  links: {nvlink: {bandwidth_fraction: 0}}\n",
        "cal_link_alpha_str": "parameters:\n  links: {nvlink: {alpha_s: fast}}\n",
        "cal_link_unknown": "parameters:\n  links: {nvlink: {gamma: 1}}\n",
        "cal_mem_op_2": "parameters:\n  memory_op_fraction: {softmax: 2}\n",
        "cal_coll_neg": "parameters:\n  collective_fraction: {all_gather: -1}\n",
        "cal_params_list": "parameters: [1, 2]\n", "cal_bool": "parameters:\n  hbm_fraction: true\n",
        "cal_dict_str": "parameters:\n  gemm_peak_fraction: fast\n",
        "cal_dup_key": "parameters:\n  hbm_fraction: 0.9\n  hbm_fraction: 0.5\n",
        # measurement files
        "meas_no_records": json.dumps({"info": small["info"]}),
        "meas_no_gpu": json.dumps({"info": {}, "records": []}),
        "meas_rec_list": json.dumps({"info": small["info"], "records": [[1]]}),
        "meas_no_kind": json.dumps({"info": small["info"], "records": [{"m": 1}]}),
        "meas_time_neg": bad_rec(time_s=-1.0), "meas_time_zero": bad_rec(time_s=0),
        "meas_time_str": bad_rec(time_s="fast"), "meas_m_float": bad_rec(m=1.5), "meas_m_neg": bad_rec(m=-4),
        "meas_m_str": bad_rec(m="4096"), "meas_k_bool": bad_rec(k=True),
        "meas_inf": json.dumps({"info": small["info"], "records": [rec]}).replace(
            f'"time_s": {json.dumps(rec["time_s"])}', '"time_s": Infinity'),
        "meas_unknown_kind": json.dumps({"info": small["info"], "records": [{"kind": "teleport", "time_s": 1.0}]}),
        "meas_world_zero": json.dumps({"info": {**small["info"], "world": 0}, "records": [rec]}),
        "meas_bf16_train_only": json.dumps({"info": small["info"], "records": [
            {"kind": "train_step", "layers": 2, "hidden": 4096, "heads": 32, "vocab": 1000, "seq": 128,
             "micro_batch": 1, "time_s": 0.5}]}),
        "meas_train_heads": json.dumps({"info": small["info"], "records": [
            {"kind": "train_step", "layers": 2, "hidden": 1024, "heads": 7, "vocab": 1000, "seq": 128,
             "micro_batch": 1, "time_s": 0.5}]}),
        "meas_dtype": bad_rec(dtype="int3"), "meas_causal_str": bad_rec(causal="maybe"), "meas_empty": json.dumps({"info": small["info"], "records": []}),
        # published CSVs
        "runs_nocols": "a,b\n1,2\n", "runs_header_only": runs_header + "\n",
        "runs_nan": runs_header + "\n" + _run_row(runs_header, iteration_time_s="nan"),
        "runs_inf": runs_header + "\n" + _run_row(runs_header, iteration_time_s="inf"),
        "runs_neg": runs_header + "\n" + _run_row(runs_header, iteration_time_s="-3"),
        "runs_zero_gpus": runs_header + "\n" + _run_row(runs_header, num_gpus="0"),
        "runs_text_tp": runs_header + "\n" + _run_row(runs_header, tp="eight"),
        "runs_ragged": runs_header + "\nonly,three,cells\n",
        "runs_frac_tp": runs_header + "\n" + _run_row(runs_header, tp="2.5"),        # was read as tp=2
        "runs_dup_col": runs_header + ",tp\n" + _run_row(runs_header).rstrip("\n") + ",4\n",   # the last tp won
        "runs_unmodelled": runs_header + "\n" + _run_row(runs_header, gpu="TPU v5"),
        "layers_nocols": "implementation,value\nx,1\n",
        "layers_neg": layers_lines[0] + "\n" + good_layer.replace(",forward_time,7.7,", ",forward_time,-7.7,"),
        "layers_nan": layers_lines[0] + "\n" + good_layer.replace(",forward_time,7.7,", ",forward_time,nan,"),
        "layers_metric": layers_lines[0] + "\n" + good_layer.replace(",forward_time,7.7,", ",sideways_time,7.7,"),
        "layers_unknown_impl": layers_lines[0] + "\n" + good_layer.replace("Baseline no recompute", "Magic"),
        "layers_hidden_text": layers_lines[0] + "\n" + good_layer.replace(",6144,", ",wide,"),
        # model and cluster files
        "model_bad_field": "name: m\nnum_layers: -2\n", "model_unknown": "nonsense: 1\n",
        "cluster_bad": "name: c\nnum_nodes: zero\n",
        "hf_list": "[1, 2, 3]", "hf_broken": '{"hidden_size": 4096,', "hf_empty_obj": "{}",
        "hf_nan": '{"hidden_size": NaN}',
        # launch configs (--from-megatron-args / --from-torchtitan / --from-deepspeed)
        "mg_novalue": "torchrun pretrain_gpt.py --tensor-model-parallel-size --global-batch-size 64\n",
        "mg_no_flags": "echo nothing to see here\n",
        "mg_bf16_fp16": "pretrain_gpt.py --bf16 --fp16 --global-batch-size 64\n",
        "mg_dropout": "pretrain_gpt.py --attention-dropout abc --global-batch-size 64\n",
        "mg_freq0": "pretrain_gpt.py --moe-layer-freq 0 --num-layers 32 --global-batch-size 64\n",
        "mg_chunk0": "pretrain_gpt.py --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 0 "
                     "--global-batch-size 64\n",
        "tt_str": "[parallelism]\ntensor_parallel_degree = 'two'\n", "tt_bool": "[parallelism]\ntensor_parallel_degree = true\n",
        "tt_zero": "[parallelism]\ntensor_parallel_degree = 0\n", "tt_inf": "[parallelism]\npipeline_parallel_degree = inf\n",
        "tt_frac": "[training]\nlocal_batch_size = 2.5\n", "tt_list": "parallelism = [1, 2]\n",
        "tt_parts": "[parallelism]\npipeline_parallel_degree = 2\nmodule_fqns_per_model_part = 5\n",
        "ds_str": '{"train_batch_size": "lots"}', "ds_bool": '{"train_batch_size": true}',
        "ds_frac": '{"train_batch_size": 256.5}', "ds_auto": '{"train_batch_size": "auto"}',
        "ds_zero_str": '{"train_batch_size": 256, "zero_optimization": "yes"}',
        "ds_both_prec": '{"train_batch_size": 256, "bf16": {"enabled": true}, "fp16": {"enabled": true}}',
        "ds_enabled_str": '{"train_batch_size": 256, "bf16": {"enabled": "yes"}}',
        "ds_gas0": '{"train_batch_size": 256, "gradient_accumulation_steps": 0}',
        "ds_tiny": '{"train_batch_size": 4}',
    }


def _run_row(header: str, **cells) -> str:
    """One published-runs row: a complete Narayanan et al. GPT 1.7B run with ``cells`` replaced."""
    base = {"source": "Narayanan et al. 2021", "model": "GPT 1.7B", "layers": "24", "hidden": "2304",
            "heads": "24", "vocab": "51200", "seq_len": "2048", "gpu": "A100-80GB SXM", "num_gpus": "32",
            "tp": "1", "pp": "1", "global_batch": "512", "micro_batch": "16", "recompute": "full",
            "iteration_time_s": "5.0"}
    base.update(cells)
    return ",".join(base.get(col, "") for col in header.split(",")) + "\n"


def _cases() -> list[tuple[str, list[str], str]]:
    cases: list[tuple[str, list[str], str]] = []
    add = cases.append
    # ---- output paths: every writer of every command, checked before any work --------------
    writers = [("simulate-o", SIM, "-o", "output"), ("simulate-trace", SIM, "--trace", "trace"),
               ("plan-o", PLAN, "-o", "output"), ("plan-trace", PLAN, "--trace", "trace"),
               ("plan-write-plan", PLAN, "--write-plan", "write-plan"), ("whatif-o", WHATIF, "-o", "output"),
               ("calibrate-o", CAL, "-o", "output"), ("validate-o", VAL, "-o", "output")]
    for name, base, flag, field in writers:
        add((f"{name}-missing-dir", base + [flag, "{out}/no/such/dir/x.out"], field))
        add((f"{name}-folder", base + [flag, "{out}"], field))
        add((f"{name}-empty", base + [flag, ""], field))
        add((f"{name}-file-as-dir", base + [flag, "{kernels_small}/x.out"], field))
    add(("calibrate-o-overwrites-input", ["calibrate", "--measurements", "{kernels_small}", "-o", "{kernels_small}"],
         "also an input"))
    add(("simulate-o-same-as-trace", SIM + ["-o", "{out}/a.json", "--trace", "{out}/a.json"], "trace"))
    add(("simulate-o-overwrites-plan", SIM[:-4] + ["--plan", "{plan_gpus32}", "-o", "{plan_gpus32}"], "also an input"))
    add(("plan-write-plan-overwrites-calibration",
         PLAN + ["--calibration", "{cal_gemm5}", "--write-plan", "{cal_gemm5}"], "also an input"))
    add(("whatif-trace-dir-is-file", WHATIF + ["--trace-dir", "{kernels_small}"], "trace-dir"))
    add(("whatif-trace-dir-missing-parent", WHATIF + ["--trace-dir", "{out}/a/b/c"], "trace-dir"))
    add(("calibrate-o-missing-dir", ["calibrate", "--measurements", "{kernels_small}", "-o", "/nonexistent/p.yaml"],
         "output"))
    # ---- unreadable files at every file input -------------------------------------------------
    inputs = [("simulate-plan", SIM + ["--plan", "{F}"]), ("simulate-calibration", SIM + ["--calibration", "{F}"]),
              ("simulate-model-yaml", ["simulate", "--model", "{F}.yaml", "--cluster", "dgx-h100", "--gpus", "8"]),
              ("simulate-cluster-yaml", ["simulate", "--model", "llama3-8b", "--cluster", "{F}.yaml"]),
              ("simulate-hf-json", ["simulate", "--model", "{F}.json", "--cluster", "dgx-h100", "--gpus", "8"]),
              ("plan-calibration", PLAN + ["--calibration", "{F}"]),
              ("plan-model-yaml", ["plan", "--model", "{F}.yaml", "--cluster", "dgx-h100", "--gbs", "8"]),
              ("whatif-plan", WHATIF + ["--plan", "{F}"]),
              ("calibrate-measurements", ["calibrate", "--measurements", "{F}", "-o", "{out}/p.yaml"]),
              ("calibrate-start", CAL + ["-o", "{out}/p.yaml", "--start", "{F}.yaml"]),
              ("validate-measurements", ["validate", "--measurements", "{F}"]),
              ("validate-published", ["validate", "--published", "{F}"]),
              ("validate-published-layers", ["validate", "--published-layers", "{F}"]),
              ("catalog-none", ["simulate", "--model", "llama3-8b", "--cluster", "{F}.yml", "--gpus", "8"])]
    for name, argv in inputs:
        for content, expect in (("binary", "binary"), ("latin1", "UTF-8"), ("missing", "does-not-exist"),
                                ("folder", "folder")):
            add((f"{name}-{content}", [a.replace("{F}", "{" + content + "}") if "{F}" in a else a for a in argv],
                 expect))
    # ---- malformed YAML / JSON / CSV content at each parser --------------------------------------
    for name, argv in inputs[:4] + inputs[5:8] + inputs[9:10]:
        for content in ("yaml_broken", "yaml_list", "yaml_scalar", "empty"):
            add((f"{name}-{content}", [a.replace("{F}", "{" + content + "}") for a in argv], ""))
    for name, argv in (inputs[4], inputs[8], inputs[10]):
        for content in ("json_broken", "json_list", "json_nan", "empty", "binary"):
            add((f"{name}-{content}", [a.replace("{F}", "{" + content + "}") for a in argv], ""))
    for name, argv in inputs[11:13]:
        for content in ("empty", "binary", "runs_nocols", "layers_nocols", "runs_ragged", "json_list"):
            add((f"{name}-{content}", [a.replace("{F}", "{" + content + "}") for a in argv], ""))
    # ---- plan files: wrong types, bounds, shapes ------------------------------------------------
    plan_cases = {"plan_str_bool": "tp_comm_overlap", "plan_float_tp": "tp", "plan_str_tp": "tp",
                  "plan_neg_pp": "pp", "plan_zero_mbs": "mbs", "plan_bool_tp": "tp", "plan_lps_str": "layers_per_stage",
                  "plan_lps_items": "layers_per_stage.1", "plan_lps_neg": "layers_per_stage.1",
                  "plan_lps_sum": "layers_per_stage", "plan_lps_len": "layers_per_stage", "plan_unknown": "tensor_parallel",
                  "plan_empty_body": "empty plan", "plan_null_body": "empty plan", "plan_list_body": "mapping",
                  "plan_zero5": "zero_stage", "plan_sched": "schedule", "plan_prec": "precision",
                  "plan_sp_int": "sequence_parallel", "plan_gbs_str": "gbs", "plan_nested_list": "layers_per_stage",
                  "plan_recompute_num": "recompute", "plan_key_int": "field names",
                  "plan_dup_key": "line 3, column 1: duplicate key 'tp'"}
    for key, field in plan_cases.items():
        add((f"simulate-{key}", SIM + ["--plan", "{" + key + "}"], field))
        add((f"whatif-{key}", WHATIF + ["--plan", "{" + key + "}"], field))
    add(("simulate-plan-gpus-conflict", SIM + ["--plan", "{plan_gpus32}"], "gpus"))
    add(("whatif-plan-gpus-sweep", ["whatif", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gbs", "256",
                                    "--sweep", "gpus=32,64", "--plan", "{plan_gpus32}"], "num_gpus"))
    # ---- calibration profiles -----------------------------------------------------------------
    cal_cases = {"cal_gemm5": "gemm_peak_fraction.bf16", "cal_hbm_str": "hbm_fraction", "cal_hbm_zero": "hbm_fraction",
                 "cal_hbm_neg": "hbm_fraction", "cal_launch_neg": "kernel_launch_s", "cal_nan": "hbm_fraction",
                 "cal_inf": "kernel_launch_s", "cal_unknown": "warp_speed", "cal_links_list": "links",
                 "cal_link_bw0": "links.nvlink.bandwidth_fraction", "cal_link_alpha_str": "links.nvlink.alpha_s",
                 "cal_link_unknown": "links.nvlink.gamma", "cal_mem_op_2": "memory_op_fraction.softmax",
                 "cal_coll_neg": "collective_fraction.all_gather", "cal_params_list": "parameters",
                 "cal_bool": "hbm_fraction", "cal_dict_str": "gemm_peak_fraction",
                 "cal_dup_key": "duplicate key 'hbm_fraction'"}
    for key, field in cal_cases.items():
        add((f"simulate-{key}", SIM + ["--calibration", "{" + key + "}"], field))
        add((f"plan-{key}", PLAN + ["--calibration", "{" + key + "}"], field))
        add((f"calibrate-start-{key}", CAL + ["-o", "{out}/p.yaml", "--start", "{" + key + "}"], field))
    # ---- measurement files ----------------------------------------------------------------------
    meas_cases = {"meas_no_records": "records", "meas_no_gpu": "info.gpu", "meas_rec_list": "records[0]",
                  "meas_no_kind": "records[0]", "meas_time_neg": "time_s", "meas_time_zero": "time_s",
                  "meas_time_str": "time_s", "meas_m_float": ".m", "meas_m_neg": ".m", "meas_m_str": ".m",
                  "meas_k_bool": ".k", "meas_inf": "malformed JSON", "meas_unknown_kind": "records",
                  "meas_world_zero": "info.world", "meas_dtype": "records[0].dtype: unknown dtype 'int3'",
                  "meas_causal_str": "records[0].causal: must be true or false"}
    for key, field in meas_cases.items():
        add((f"validate-{key}", ["validate", "--measurements", "{" + key + "}"], field))
        add((f"calibrate-{key}", ["calibrate", "--measurements", "{" + key + "}", "-o", "{out}/p.yaml"], field))
    add(("validate-meas_train_heads", ["validate", "--measurements", "{meas_train_heads}"],
         "its dimensions are no valid model: hidden 1024 is not divisible by num_heads 7"))   # was a traceback
    add(("validate-meas_empty", ["validate", "--measurements", "{meas_empty}"], "the file holds no records"))
    add(("calibrate-nothing-constrained", ["calibrate", "--measurements", "{meas_bf16_train_only}", "-o",
                                           "{out}/p.yaml"], "measurements"))
    # ---- published CSVs -------------------------------------------------------------------------
    for key, field in {"runs_nocols": "source", "runs_header_only": "no data rows", "runs_nan": "iteration_time_s",
                       "runs_inf": "iteration_time_s", "runs_neg": "iteration_time_s", "runs_zero_gpus": "num_gpus",
                       "runs_text_tp": "tp", "runs_ragged": "line 2", "runs_unmodelled": "no row could be modelled",
                       "runs_frac_tp": "line 2: tp: must be a whole number",
                       "runs_dup_col": "tp: column given twice"}.items():
        add((f"validate-published-{key}", ["validate", "--published", "{" + key + "}"], field))
    for key, field in {"layers_nocols": "gpu", "layers_neg": "value", "layers_nan": "value", "layers_metric": "metric",
                       "layers_unknown_impl": "implementation", "layers_hidden_text": "hidden"}.items():
        add((f"validate-layers-{key}", ["validate", "--published-layers", "{" + key + "}"], field))
    # ---- model, cluster and HF config files ---------------------------------------------------
    for key, field in {"model_bad_field": "", "model_unknown": ""}.items():
        add((f"simulate-{key}", ["simulate", "--model", "{" + key + "}", "--cluster", "dgx-h100", "--gpus", "8"], field))
    add(("simulate-cluster_bad", ["simulate", "--model", "llama3-8b", "--cluster", "{cluster_bad}"], ""))
    for key in ("hf_list", "hf_broken", "hf_empty_obj", "hf_nan"):
        add((f"simulate-{key}", ["simulate", "--model", "{" + key + "}", "--cluster", "dgx-h100", "--gpus", "8"], ""))
        add((f"plan-{key}", ["plan", "--model", "{" + key + "}", "--cluster", "dgx-h100", "--gbs", "8"], ""))
    # ---- flags ----------------------------------------------------------------------------------
    for flag, value, field in (("--gpus", "0", "gpus"), ("--gpus", "-8", "gpus"), ("--gpus", "100000", "gpus"),
                               ("--gpus", "12", "gpus"), ("--tp", "0", "tp"), ("--tp", "-2", "tp"), ("--tp", "3", "tp"),
                               ("--pp", "0", "pp"), ("--pp", "7", ""), ("--mbs", "0", "mbs"), ("--gbs", "-1", "gbs"),
                               ("--gbs", "100", "gbs"), ("--zero", "4", "zero"), ("--zero", "-1", "zero"),
                               ("--recompute", "most", "recompute"), ("--schedule", "zigzag", "schedule"),
                               ("--precision", "fp7", "precision"), ("--recipe", "magic", "recipe"),
                               ("--attention", "psychic", "attention"), ("--ep", "2", "ep"), ("--cp", "0", "cp"),
                               ("--vp", "2", "vp"), ("--seq", "0", "seq"), ("--layers-per-stage", "a,b", "layers-per-stage"),
                               ("--layers-per-stage", "16,16", "layers_per_stage"), ("--etp", "0", "etp"),
                               ("--recompute-layers", "0", "recompute_layers"), ("--dp", "3", "dp"),
                               ("--layers-per-stage", "", "layers-per-stage"),            # was silently no split
                               ("--recompute-layers", "5", "needs recompute full")):     # was silently ignored
        add((f"simulate{flag}={value}", SIM + [flag, value], field))
    for value in ("inf", "1e308", "nan", "0"):        # inf divided by zero in the host model; 1e308 overflowed
        add((f"simulate--host-speed={value}", SIM + ["--host-speed", value], "--host-speed"))
        add((f"plan--host-speed={value}", PLAN + ["--host-speed", value], "--host-speed"))
        add((f"whatif--host-speed={value}", WHATIF + ["--host-speed", value], "--host-speed"))
        add((f"validate--host-speed={value}", VAL + ["--host-speed", value], "--host-speed"))
    add(("simulate-fp8-on-a100", ["simulate", "--model", "llama3-8b", "--cluster", "dgx-a100-superpod", "--gpus", "64",
                                  "--gbs", "256", "--precision", "fp8"], "a100-80gb-sxm"))
    add(("plan-fp8-on-a100", ["plan", "--model", "llama3-8b", "--cluster", "dgx-a100-superpod", "--gpus", "64",
                              "--gbs", "256", "--precision", "fp8"], "precision"))
    add(("simulate-nvfp4-on-h100", SIM + ["--precision", "nvfp4"], "precision: h100-sxm has no fp4 (NVFP4) tensor-core peak"))
    add(("plan-nvfp4-on-h100", PLAN + ["--precision", "nvfp4"], "precision"))
    add(("simulate-torchtitan-nvfp4", ["simulate", "--model", "llama3-8b", "--cluster", "gb200-nvl72", "--gpus", "64",
                                       "--gbs", "256", "--framework", "torchtitan", "--precision", "nvfp4"],
         "torchtitan: nvfp4 is not modelled"))
    # sequence parallelism splits each rank's tokens evenly over tp (a 3-token split over tp=2 ran before, a
    # 1-token one divided by zero)
    add(("simulate-seq-not-split-by-tp", SIM + ["--tp", "2", "--seq", "3"], "seq: sequence parallelism splits"))
    add(("simulate-model-unknown", ["simulate", "--model", "llama9", "--cluster", "dgx-h100"], "model"))
    add(("simulate-unknown-cluster", ["simulate", "--model", "llama3-8b", "--cluster", "dgx-z900"], "cluster"))
    add(("simulate-unknown-calibration", SIM + ["--calibration", "no-such-profile"], "calibration"))
    for argv, field in ((["--top", "0"], "top"), (["--days", "3"], "days"), (["--tokens", "-1"], "tokens"),
                        (["--price", "0", "--tokens", "1e9"], "price"), (["--time-limit", "0", "--inner", "ilp"], ""),
                        (["--ep", "3"], "ep"), (["--dp", "3"], "dp"), (["--schedules", "zigzag"], "schedule"),
                        (["--pool", "dgx-h100:x"], "pool"),
                        # each of these searched anyway (--seq 0 at the model's length, --days nan with no
                        # deadline, --schedules "" and --max-vp 0 as if absent) or named no flag
                        (["--seq", "0"], "seq: must be positive"), (["--days", "nan", "--tokens", "1e9"], "days"),
                        (["--tokens", "inf"], "tokens"), (["--schedules", ""], "schedules: empty list"),
                        (["--max-vp", "0"], "max-vp"), (["--max-tp", "0"], "max-tp"), (["--max-mbs", "-1"], "max-mbs"),
                        (["--tp", "4", "--max-tp", "2"], "above --max-tp 2"),
                        (["--dp", "8", "--tp", "2"], "tp*dp = 2*8 = 16 does not divide")):
        add((f"plan{''.join(argv)}", PLAN[:7] + ["--gbs", "64"] + argv, field))
    add(("plan-mixtral-ep3", ["plan", "--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--gpus", "64", "--gbs", "256",
                              "--ep", "3"], "ep=3 does not divide the 8 experts"))
    add(("plan-dp64-gbs100", ["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "64", "--dp", "64",
                              "--mbs", "1", "--gbs", "100"], "not a multiple of dp*mbs"))
    add(("plan-405b-on-8", ["plan", "--model", "llama3-405b", "--cluster", "dgx-h100", "--gpus", "8", "--gbs", "64"],
         "GPUs or more would hold it"))
    # ---- frameworks: an unknown one lists the known; a plan it cannot run names its rule ------------
    add(("simulate-framework-unknown", SIM + ["--framework", "nemo"], "framework"))
    add(("simulate-torchtitan-zero1", SIM + ["--framework", "torchtitan", "--zero", "1"], "torchtitan: has no ZeRO-1"))
    add(("simulate-deepspeed-tp2", SIM + ["--framework", "deepspeed", "--tp", "2"], "deepspeed: has no tensor parallelism"))
    add(("simulate-local-fp8", SIM + ["--framework", "megatron-core-local", "--precision", "fp8"], "megatron-core-local"))
    add(("simulate-megatron-gpipe", SIM + ["--pp", "2", "--schedule", "gpipe"], "megatron-core: has no gpipe schedule"))
    add(("simulate-export-mismatch", SIM + ["--export", "torchtitan"], "export"))
    add(("simulate-export-file-bad-dir", SIM + ["--export", "megatron", "-O", "/nonexistent/dir/run.sh"], "export-file"))
    launch = {"mg_novalue": ("megatron", "--tensor-model-parallel-size: given without a value"),
              "mg_no_flags": ("megatron", "no --flag found"), "mg_bf16_fp16": ("megatron", "--fp16 and --bf16"),
              "mg_dropout": ("megatron", "--attention-dropout: expected a number"),
              "mg_freq0": ("megatron", "--moe-layer-freq: must be at least 1"),
              "mg_chunk0": ("megatron", "--num-layers-per-virtual-pipeline-stage: must be at least 1"),
              "tt_str": ("torchtitan", "tensor_parallel_degree: expected an integer"),
              "tt_bool": ("torchtitan", "tensor_parallel_degree: expected an integer, got True"),
              "tt_zero": ("torchtitan", "tensor_parallel_degree: must be at least 1"),
              "tt_inf": ("torchtitan", "pipeline_parallel_degree: expected an integer, got inf"),
              "tt_frac": ("torchtitan", "local_batch_size: expected an integer, got 2.5"),
              "tt_list": ("torchtitan", "parallelism: expected a table"),
              "tt_parts": ("torchtitan", "module_fqns_per_model_part: expected a list"),
              "ds_str": ("deepspeed", "train_batch_size: expected an integer, got 'lots'"),
              "ds_bool": ("deepspeed", "train_batch_size: expected an integer, got True"),
              "ds_frac": ("deepspeed", "train_batch_size: expected an integer, got 256.5"),
              "ds_auto": ("deepspeed", "Hugging Face Trainer"),
              "ds_zero_str": ("deepspeed", "zero_optimization: expected a table"),
              "ds_both_prec": ("deepspeed", "fp16 and bf16 are both enabled"),
              "ds_enabled_str": ("deepspeed", "bf16: enabled: expected true or false"),
              "ds_gas0": ("deepspeed", "gradient_accumulation_steps: must be at least 1"),
              "ds_tiny": ("deepspeed", "less than one sequence per GPU")}
    for key, (fmt, expect) in launch.items():
        flag = {"megatron": "--from-megatron-args", "torchtitan": "--from-torchtitan", "deepspeed": "--from-deepspeed"}[fmt]
        add((f"simulate-{key}", SIM[:7] + [flag, "{" + key + "}"], expect))
    add(("simulate-from-megatron-missing", SIM + ["--from-megatron-args", "/nonexistent/run.sh"], "/nonexistent/run.sh"))
    add(("plan-deepspeed-ep8", ["plan", "--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--gpus", "64",
                                "--gbs", "128", "--framework", "deepspeed", "--ep", "8"], "deepspeed has no ep"))
    add(("plan-torchtitan-zero1", PLAN[:7] + ["--gbs", "64", "--framework", "torchtitan", "--zero", "1"],
         "torchtitan has no ZeRO-1"))
    for argv, field in ((["--sweep", "warp=1"], "sweep"), (["--sweep", "gpus="], "sweep"), (["--sweep", "gpus=x"], "gpus"),
                        (["--tokens", "-5"], "tokens"), (["--pue", "0.5"], "pue"), (["--jobs", "0"], "jobs"),
                        (["--replan-fix", "tp"], "replan-fix"), (["--price", "cheap"], "price")):
        add((f"whatif{''.join(argv)}", WHATIF + argv, field))
    for argv, field in ((["--holdout-every", "-1"], "holdout"), (["--hardware", "tpu-v9"], "hardware"),
                        (["--fit-seeds", "99"], "fit-seeds")):
        add((f"calibrate{''.join(argv)}", CAL + ["-o", "{out}/p.yaml"] + argv, field))
    for argv, field in (([], "measurements"), (["--measurements", "{kernels_small}", "--hardware", "tpu-v9"], "hardware"),
                        # a file that says it ran on an H200, re-labelled as another GPU: refused, not compared
                        (["--measurements", "{kernels_small}", "--hardware", "mi300x"], "hardware: "),
                        (["--measurements", "{kernels_small}", "--calibration", "{cal_gemm5}"], "gemm_peak_fraction")):
        add((f"validate{''.join(argv)}", ["validate"] + argv, field))
    for argv, field in ((["models", "llama9"], "models"), (["clusters", "dgx-z900"], "clusters"),
                        (["accelerators", "tpu"], "accelerators"), (["nodes", "x"], "nodes")):
        add((f"catalog-{'-'.join(argv)}", ["catalog"] + argv, field))
    seen: dict[str, int] = {}
    for i, (name, argv, expect) in enumerate(cases):     # one id per case
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            cases[i] = (f"{name}-{seen[name]}", argv, expect)
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad")
    paths = {}
    for key, content in _files().items():
        p = root / key
        for q in (p, p.with_name(p.name + ".yaml"), p.with_name(p.name + ".yml"), p.with_name(p.name + ".json")):
            if content is None:
                q.mkdir()
            elif isinstance(content, bytes):
                q.write_bytes(content)
            else:
                q.write_text(content)
        paths[key] = str(p)
    paths["missing"] = str(root / "does-not-exist")
    return paths


def _fill(argv: list[str], files: dict, out: Path) -> list[str]:
    filled = []
    for a in argv:
        a = a.replace("{out}", str(out))
        for key, path in files.items():
            a = a.replace("{" + key + "}", path)
        filled.append(a)
    return filled


def _snapshot(files: dict) -> dict:
    return {k: Path(p).read_bytes() for k, p in files.items() if Path(p).is_file()}


def test_enough_cases():
    assert len(CASES) >= 250
    assert len({name for name, _, _ in CASES}) == len(CASES)
    commands = {argv[0] for _, argv, _ in CASES}
    assert commands == {"simulate", "plan", "whatif", "calibrate", "validate", "catalog"}


@pytest.mark.parametrize("name,argv,expect", CASES, ids=[c[0] for c in CASES])
def test_bad_input(name, argv, expect, files, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    before = _snapshot(files)
    code = main(_fill(argv, files, out))
    stdout, stderr = capsys.readouterr()
    lines = stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    assert code == 2, f"exit {code}; stderr: {stderr!r}"
    assert len(errors) == 1 and lines[-1] == errors[0], stderr
    assert "Traceback" not in stderr
    assert expect in errors[0], errors[0]
    assert list(out.iterdir()) == [], "an output was written"
    assert _snapshot(files) == before, "an input file was changed"


# ---- generated contents: no traceback whatever the bytes --------------------------------------
def _run_on(tmp_path: Path, name: str, content: bytes, make_argv) -> tuple[int, str]:
    p = tmp_path / name
    p.write_bytes(content)
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    try:
        code = main(make_argv(str(p), str(out)))
    except SystemExit as exc:       # argparse itself (never for file contents)
        code = exc.code
    return code, str(out)


def _check(code: int, capsys, out: str) -> None:
    _, stderr = capsys.readouterr()
    assert "Traceback" not in stderr
    if code != 0:
        # 2: the input was wrong; 3: a valid model and plan that would run out of memory
        assert code == 2 or (code == 3 and stderr.startswith("error: memory: the plan does not fit")), stderr
        assert len([line for line in stderr.splitlines() if line.startswith("error: ")]) == 1, stderr
        assert list(Path(out).iterdir()) == []


_yaml_values = st.recursive(st.none() | st.booleans() | st.integers(-10, 10**6) | st.floats() | st.text(max_size=8),
                            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                            max_leaves=8)
_fast = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@_fast
@given(data=st.dictionaries(st.sampled_from(["tp", "pp", "dp", "mbs", "gbs", "zero_stage", "recompute", "precision",
                                             "layers_per_stage", "tp_comm_overlap", "num_gpus", "schedule", "bogus"]),
                            _yaml_values, max_size=4))
def test_generated_plan_yaml(data, tmp_path, capsys):
    import yaml
    code, out = _run_on(tmp_path, "plan.yaml", yaml.safe_dump({"plan": data}).encode(),
                        lambda p, o: SIM + ["--plan", p])
    _check(code, capsys, out)


@_fast
@given(data=st.dictionaries(st.sampled_from(["hbm_fraction", "kernel_launch_s", "gemm_peak_fraction", "links",
                                             "memory_op_fraction", "attention_fwd_fraction", "x"]),
                            _yaml_values, max_size=3))
def test_generated_profile_yaml(data, tmp_path, capsys):
    import yaml
    code, out = _run_on(tmp_path, "cal.yaml", yaml.safe_dump({"parameters": data}).encode(),
                        lambda p, o: SIM + ["--calibration", p])
    _check(code, capsys, out)


@_fast
@given(content=st.binary(max_size=64) | st.text(max_size=64).map(str.encode))
def test_generated_bytes_as_yaml(content, tmp_path, capsys):
    code, out = _run_on(tmp_path, "plan.yaml", content, lambda p, o: SIM + ["--plan", p])
    _check(code, capsys, out)


@_fast
@given(records=st.lists(st.dictionaries(st.sampled_from(["kind", "m", "n", "k", "time_s", "dtype", "bytes", "world"]),
                                        st.none() | st.integers(-5, 5000) | st.floats() | st.text(max_size=5)
                                        | st.sampled_from(["gemm", "all_reduce", "copy", "bfloat16"]),
                                        max_size=6), max_size=3))
def test_generated_measurements_json(records, tmp_path, capsys):
    doc = {"info": {"gpu": "NVIDIA H100 80GB HBM3"}, "records": records}
    code, out = _run_on(tmp_path, "m.json", json.dumps(doc).encode(), lambda p, o: ["validate", "--measurements", p])
    _check(code, capsys, out)


@_fast
@given(cells=st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=6), min_size=1,
                      max_size=8))
def test_generated_published_csv(cells, tmp_path, capsys):
    header = RUNS_CSV.read_text().splitlines()[0]
    cols = header.split(",")
    row = {**dict(zip(["source", "model", "num_gpus", "tp", "pp", "global_batch", "micro_batch", "gpu"], cells))}
    import csv
    import io
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols)
    w.writeheader()
    w.writerow({c: row.get(c, "") for c in cols})
    code, out = _run_on(tmp_path, "runs.csv", buf.getvalue().encode(), lambda p, o: ["validate", "--published", p])
    _check(code, capsys, out)


@_fast
@given(data=st.dictionaries(st.sampled_from(["hidden_size", "num_hidden_layers", "num_attention_heads",
                                             "num_key_value_heads", "intermediate_size", "vocab_size",
                                             "max_position_embeddings", "model_type", "num_local_experts"]),
                            st.none() | st.integers(-4, 70000) | st.floats(allow_nan=False) | st.text(max_size=6)
                            | st.booleans(), max_size=9))
def test_generated_hf_config(data, tmp_path, capsys):
    code, out = _run_on(tmp_path, "config.json", json.dumps(data).encode(),
                        lambda p, o: ["simulate", "--model", p, "--cluster", "dgx-h100", "--gpus", "8"])
    _check(code, capsys, out)


# ---- a few real processes: nothing but one line reaches stderr ---------------------------------
@pytest.mark.parametrize("argv", [
    SIM + ["-o", "/nonexistent/dir/r.html"],
    ["simulate", "--model", "llama3-8b", "--cluster", "dgx-a100-superpod", "--gpus", "64", "--gbs", "256",
     "--precision", "fp8"],
    ["validate", "--published-layers", "nope.csv"],
])
def test_subprocess_one_line(argv, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "meshcast.cli", *argv], capture_output=True, text=True,
                          cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ")
    assert "Traceback" not in proc.stderr
