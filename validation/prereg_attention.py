"""Pre-registered predictions of an attention fresh run, and their score once it has run.

    python -m validation.prereg_attention write --seed 19 --n 64 --profile h200-sxm --gpu "NVIDIA H200" \\
        -o validation/measurements/logs/prereg_attention19_h200.txt
    python -m validation.prereg_attention score validation/measurements/logs/prereg_attention19_h200.txt RUN.json

``write`` predicts, with today's model and profile, every case that
``validation/harness/attention_backends.py --fresh-seed SEED --fresh-n N`` (or, ``--harness
triton_attention``, llm-foundry's Triton kernel beside FlashAttention-2) will time (the harness's
own case list, ``fresh_cases``), one tab-separated line each, under a header naming the model commit,
the seed and the command to run. ``score`` reads those lines back (never the model: what was
registered is what is scored) and compares them with the run's records: MAPE, bias and worst error
per backend and direction, and pooled per backend, plus the cases the GPU refused or never reached.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from simulator.calibration import calibration_for, load_calibration
from validation.hardware import hardware_for
from validation.predict import Unsupported, predict_record
from validation.records import MeasurementFile, load_measurements

ROOT = Path(__file__).resolve().parents[1]
KEY_FIELDS = ("backend", "kind", "batch", "heads", "kv_heads", "seq", "head_dim", "causal", "layout")
COLUMNS = KEY_FIELDS + ("predicted_s",)


HARNESS_COMMANDS = {
    "attention_backends": "PYTHONUNBUFFERED=1 python3 attention_backends.py --fresh-seed {seed} --fresh-n {n} "
                          "--budget-s {budget:g} --out OUT.json",
    # the same draw with one KV head per shape (multi-query attention)
    "attention_backends_mqa": "PYTHONUNBUFFERED=1 python3 attention_backends.py --fresh-seed {seed} --fresh-n {n} "
                              "--mqa --budget-s {budget:g} --out OUT.json",
    # llm-foundry's Triton FlashAttention beside SDPA's FlashAttention-2: the kernel staged by
    # stage_llmfoundry_triton_fa.sh into .devrun/llmf_triton, compiled to sm80 mma.sync as MPT's runs were
    "triton_attention": "TRITON_CACHE_DIR=tc_v2 DISABLE_MMA_V3=1 PYTHONUNBUFFERED=1 python3 triton_attention.py "
                        "--llmf-src llmf_triton --mma v2 --skip-peak --fresh-seed {seed} --fresh-n {n} "
                        "--budget-s {budget:g} --out OUT.json",
}


def _harness(name: str = "attention_backends"):
    """A harness of validation/harness (HARNESS_COMMANDS) as a module (plain Python: no torch needed)."""
    import importlib
    if name not in HARNESS_COMMANDS:
        raise ValueError(f"unknown harness {name!r}; known: {', '.join(HARNESS_COMMANDS)}")
    sys.path.insert(0, str(ROOT / "validation" / "harness"))
    return importlib.import_module(name.removesuffix("_mqa"))


def fresh_cases(harness: str, seed: int, n: int) -> list[dict]:
    """The cases the harness's fresh run of draw ``seed`` with ``n`` shapes times (``*_mqa``: with --mqa)."""
    module = _harness(harness)
    return module.fresh_cases(seed, n, mqa=True) if harness.endswith("_mqa") else module.fresh_cases(seed, n)


def case_record(c: dict) -> dict:
    """The measurement record the harness writes for case ``c``, without its timing."""
    return dict(kind="attention_fwd_bwd" if c["direction"] == "fwd_bwd" else "attention_fwd", batch=c["batch"],
                heads=c["heads"], kv_heads=c["kv_heads"], seq=c["seq"], head_dim=c["head_dim"], causal=c["causal"],
                backend=c["backend"], layout=c["layout"], set=c["set"],
                **({"mask_inplace": True} if c["backend"] == "unfused_torch" else {}))   # as run_case records it


def record_key(rec: dict) -> tuple:
    """The identity of a case: KEY_FIELDS, kv_heads defaulting to heads, as strings."""
    r = dict(rec, kv_heads=rec.get("kv_heads") or rec["heads"], layout=rec.get("layout", "bshd"))
    return tuple(str(int(r[k]) if isinstance(r[k], bool) else r[k]) for k in KEY_FIELDS)


def profile_for(profile: str | None, gpu: str) -> str:
    """The profile a registration predicts with: ``profile`` where given, else the committed profile of the
    accelerator named ``gpu`` (info.gpu; the default was h200-sxm whatever the GPU until session 36, when an H100
    draw was registered with the H200's profile by mistake)."""
    if profile:
        return profile
    return calibration_for(hardware_for(MeasurementFile("prereg", {"gpu": gpu}, [])).accelerator)[0].name


def predictions(seed: int, n: int, profile: str, gpu: str, harness: str = "attention_backends") -> list[tuple[dict, float | None]]:
    """(record, predicted seconds or None where the model has no prediction) for every case of the
    harness's fresh draw ``seed`` of ``n`` shapes, on the accelerator named ``gpu`` (info.gpu)."""
    hw = hardware_for(MeasurementFile("prereg", {"gpu": gpu}, []))
    cal = load_calibration(profile_for(profile, gpu))
    out = []
    for c in fresh_cases(harness, seed, n):
        rec = case_record(c)
        try:
            out.append((rec, predict_record(rec, hw, cal).time_s))
        except Unsupported:
            out.append((rec, None))
    return out


def git_commit() -> str:
    """The worktree's HEAD commit (the model the predictions come from), '+dirty' if it has changes."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                           text=True).stdout.strip()
    return head + ("+dirty" if dirty else "")


def write(seed: int, n: int, profile: str | None, gpu: str, out: str, budget_s: float,
          harness: str = "attention_backends") -> int:
    """Write the pre-registration file; returns the number of cases."""
    profile = profile_for(profile, gpu)
    rows = predictions(seed, n, profile, gpu, harness)
    cmd = HARNESS_COMMANDS[harness].format(seed=seed, n=n, budget=budget_s)
    lines = [f"# pre-registered attention predictions (validation/prereg_attention.py)",
             f"# model commit: {git_commit()}",
             f"# profile: {profile}; accelerator: {gpu}",
             f"# seed: {seed}; shapes: {n}; cases: {len(rows)}",
             f"# command (in a folder holding a copy of validation/harness/*.py): {cmd}",
             "# " + "\t".join(COLUMNS)]
    for rec, t in rows:
        lines.append("\t".join(record_key(rec)) + "\t" + ("-" if t is None else f"{t:.6e}"))
    Path(out).write_text("\n".join(lines) + "\n")
    return len(rows)


def read_prereg(path: str) -> dict[tuple, float | None]:
    """{case key: registered seconds (None: no prediction)} of a pre-registration file."""
    out = {}
    for line in Path(path).read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        *key, t = line.split("\t")
        out[tuple(key)] = None if t == "-" else float(t)
    return out


def score(prereg: str, run: str) -> dict:
    """{(backend, kind or 'pooled'): {count, mape, bias, worst}} of the registered predictions
    against the run's timed records, plus 'refused' (GPU refusals or OOM) and 'missing' (registered
    cases the run never reached) counts per backend. Errors are predicted / measured − 1."""
    reg = read_prereg(prereg)
    errs: dict[tuple, list] = defaultdict(list)
    refused: dict[str, int] = defaultdict(int)
    seen = set()
    for rec in load_measurements(run).records:
        if not rec.get("kind", "").startswith("attention"):
            continue
        key = record_key(rec)
        if key not in reg:
            continue
        seen.add(key)
        if not rec.get("time_s"):
            refused[rec["backend"]] += 1
            continue
        if reg[key] is None:
            continue
        e = reg[key] / rec["time_s"] - 1.0
        errs[(rec["backend"], rec["kind"])].append(e)
        errs[(rec["backend"], "pooled")].append(e)
    table = {k: {"count": len(v), "mape": statistics.fmean(abs(x) for x in v), "bias": statistics.fmean(v),
                 "worst": max(v, key=abs)} for k, v in sorted(errs.items())}
    missing: dict[str, int] = defaultdict(int)
    for key in reg:
        if key not in seen:
            missing[key[0]] += 1
    return {"table": table, "refused": dict(refused), "missing": dict(missing)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write", help="write the pre-registered predictions")
    w.add_argument("--seed", type=int, required=True)
    w.add_argument("--n", type=int, default=28, help="shapes in the draw (the harness's --fresh-n)")
    w.add_argument("--profile", help="calibration profile (default: the committed profile of --gpu's accelerator)")
    w.add_argument("--gpu", default="NVIDIA H200", help="the device name the run will record (info.gpu)")
    w.add_argument("--budget-s", type=float, default=240.0, help="the harness's --budget-s, for the command line")
    w.add_argument("--harness", default="attention_backends", choices=sorted(HARNESS_COMMANDS),
                   help="the harness whose fresh draw is registered (triton_attention: llm-foundry's Triton kernel)")
    w.add_argument("-o", "--output", required=True)
    s = sub.add_parser("score", help="score a run against a pre-registration")
    s.add_argument("prereg")
    s.add_argument("run")
    s.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.cmd == "write":
        if args.n < 1:
            ap.error(f"--n must be at least 1, got {args.n}")
        n = write(args.seed, args.n, args.profile, args.gpu, args.output, args.budget_s, args.harness)
        print(f"wrote {n} cases to {args.output}")
        return 0
    res = score(args.prereg, args.run)
    if args.json:
        print(json.dumps({"table": {f"{b} {k}": v for (b, k), v in res["table"].items()},
                          "refused": res["refused"], "missing": res["missing"]}, indent=1))
        return 0
    print(f"{'backend':13s} {'kind':17s} {'n':>4s} {'MAPE':>7s} {'bias':>7s} {'worst':>7s}")
    for (b, k), v in res["table"].items():
        print(f"{b:13s} {k:17s} {v['count']:4d} {100 * v['mape']:6.1f}% {100 * v['bias']:+6.1f}% {100 * v['worst']:+6.1f}%")
    print(f"refused on the GPU: {res['refused'] or 'none'}; registered but not run: {res['missing'] or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
