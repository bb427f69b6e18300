"""Pre-registration of a collectives run: meshcast's predicted time of every case that
validation/harness/collectives.py measures by default, written before the run.

    python -m validation.prereg_collectives --like validation/measurements/h200x2_collectives.json \
        -o validation/measurements/logs/prereg_collectives19_h200x2.txt

The cases are the harness's default kinds (``OPS``) and sizes (``sizes(small=False, max_bytes=4 GiB)``),
read from its source without importing it (it needs torch), on ``--world`` GPUs (default: the
``--like`` file's ``info.world``). Each is predicted as ``meshcast validate`` predicts a collective
record (validation.predict.predict_record) on the hardware of the ``--like`` file with its
accelerator's calibration profile. The header names the git commit of the model, so that a later
session can score the run against these lines unchanged.
"""
from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

from hardware_specs.errors import MeshcastError
from simulator.calibration import calibration_for, load_calibration
from validation.hardware import hardware_for
from validation.predict import predict_record
from validation.records import load_measurements

HARNESS = Path(__file__).resolve().parent / "harness" / "collectives.py"
ROOT = Path(__file__).resolve().parent.parent


def harness_cases(path: Path = HARNESS) -> list[tuple[str, int]]:
    """(kind, bytes) of every case the collectives harness runs by default, in its order: its
    ``OPS``, each over ``sizes(False, 4 GiB)`` (the ``--max-bytes`` default). The module's
    constants and ``sizes`` are evaluated from its source alone."""
    tree = ast.parse(path.read_text())
    keep = [n for n in tree.body if isinstance(n, ast.Assign) and any(
        isinstance(t, (ast.Name, ast.Tuple)) and _names(t) & {"OPS", "KiB", "MiB", "GiB"} for t in n.targets)]
    keep += [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "sizes"]
    env: dict = {}
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(path), "exec"), env)
    return [(op, nb) for op in env["OPS"] for nb in env["sizes"](False, 4 * env["GiB"])]


def _names(target) -> set:
    """The names an assignment target binds."""
    if isinstance(target, ast.Name):
        return {target.id}
    return {e.id for e in target.elts if isinstance(e, ast.Name)}


def model_commit() -> str:
    """The git commit of the working tree's HEAD (with '+dirty' when tracked files differ)."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    return (head or "unknown") + ("+dirty" if dirty else "")


def prediction_lines(like: str, world: int | None = None, candidate: str | None = None,
                     gpu_time: bool = False) -> list[str]:
    """The prereg file: a header (hardware, profile, commit) and one line per case:
    ``kind bytes world predicted_time_s``, plus ``candidate_time_s`` under the profile file
    ``candidate`` where one is given (a model not adopted yet, scored on the same run), and with
    ``gpu_time`` ``candidate_gpu_time_s``, its GPU's time alone (harness v2's ``time_graph_s`` to
    64 MiB, ``time_batched_s`` above)."""
    mf = load_measurements(like)
    n = int(world or mf.info.get("world") or 2)
    hw = hardware_for(mf)
    cal, note = calibration_for(hw.accelerator)[:2]
    out = [f"# meshcast predictions for NCCL collectives on {n} x {hw.accelerator.name} ({hw.node.name} node), "
           f"calibration {cal.name}{' (' + note + ')' if note else ''}; model commit {model_commit()}; "
           f"written before the run",
           f"# cases: validation/harness/collectives.py defaults (OPS x sizes up to 4 GiB), bytes as MEASUREMENTS.md "
           f"defines them; hardware from {like}",
           f"# candidate_time_s: the same cases under profile {candidate}" if candidate else "#",
           "# kind bytes world predicted_time_s" + (" candidate_time_s" if candidate else "")
           + (" candidate_gpu_time_s" if candidate and gpu_time else "")]
    alt = load_calibration(candidate) if candidate else None
    for kind, nbytes in harness_cases():
        rec = {"kind": kind, "bytes": nbytes, "world": n, "dtype": "bfloat16"}
        line = f"{kind} {nbytes} {n} {predict_record(rec, hw, cal).time_s:.6e}"
        line += f" {predict_record(rec, hw, alt).time_s:.6e}" if alt else ""
        out.append(line + (f" {predict_record(rec, hw, alt, gpu_only=True).time_s:.6e}" if alt and gpu_time else ""))
    return out


def gpu_time_s(rec: dict, min_batched_bytes: int = 0) -> float | None:
    """The GPU's seconds for one call of a collective record (harness v2): its CUDA-graph replay
    time where measured, else its back-to-back time if the record is at least
    ``min_batched_bytes`` (where the host runs ahead of the GPU); None when it has neither."""
    if rec.get("time_graph_s"):
        return float(rec["time_graph_s"])
    if rec.get("time_batched_s") and int(rec["bytes"]) >= min_batched_bytes:
        return float(rec["time_batched_s"])
    return None


def registered(path: str | Path) -> dict[tuple[str, int], list[float]]:
    """{(kind, bytes): [registered predictions, in the file's column order]} of a prereg file."""
    rows = [line.split() for line in Path(path).read_text().splitlines() if line.strip() and not line.startswith("#")]
    return {(r[0], int(r[1])): [float(x) for x in r[3:]] for r in rows}


def columns(path: str | Path) -> list[str]:
    """The column names of a prereg file (its ``# kind bytes world ...`` header line)."""
    head = next((line for line in Path(path).read_text().splitlines() if line.startswith("# kind ")), "")
    return head[2:].split()


def score(prereg: str | Path, run: str | Path, min_bytes: int = 0, max_bytes: int = 1 << 62) -> dict[str, list[float]]:
    """{kind: [MAPE per prediction column]} of a run against its registration, over the cases
    from ``min_bytes`` to ``max_bytes``: the time columns against ``time_s``, a GPU-time column
    (the last, where the file has one) against :func:`gpu_time_s`."""
    reg = registered(prereg)
    gpu_col = "candidate_gpu_time_s" in columns(prereg)
    errs: dict[str, list[list[float]]] = {}
    for r in load_measurements(run).records:
        key = (r.get("kind"), int(r.get("bytes", 0)))
        if key not in reg or not r.get("time_s") or not min_bytes <= key[1] <= max_bytes:
            continue
        preds = reg[key]
        measured = [float(r["time_s"])] * len(preds)
        if gpu_col:
            measured[-1] = gpu_time_s(r)
        e = errs.setdefault(key[0], [[] for _ in preds])
        for i, (p, m) in enumerate(zip(preds, measured)):
            if m:
                e[i].append(abs(p / m - 1.0))
    return {k: [sum(v) / len(v) if v else float("nan") for v in cols] for k, cols in errs.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--like", required=False, help="a collectives file of the machine type (its info.gpu, world)")
    p.add_argument("--world", type=int, default=None, help="GPUs (default: the --like file's info.world)")
    p.add_argument("--candidate", default=None, help="a second profile file whose predictions go in a second column")
    p.add_argument("--gpu-time", action="store_true", help="also the candidate's GPU time alone (harness v2)")
    p.add_argument("-o", "--output", default=None, help="file to write (default: stdout)")
    p.add_argument("--score", nargs=2, metavar=("PREREG", "RUN"), default=None,
                   help="instead: each kind's MAPE of a run against its registration, per column")
    args = p.parse_args(argv)
    if args.score:
        try:
            tables = [(label, score(*args.score, min_bytes=lo)) for label, lo in (("all sizes", 0), (">= 1 MiB", 1 << 20))]
        except (MeshcastError, OSError, ValueError) as exc:
            print(f"error: --score {' '.join(args.score)}: {exc}", file=sys.stderr)
            return 2
        print("columns: " + " ".join(columns(args.score[0])[3:]))
        for label, table in tables:
            for kind, cols in table.items():
                print(f"{label:9s} {kind:15s} " + "  ".join(f"{100 * c:6.2f}%" for c in cols))
        return 0
    if not args.like:
        p.error("--like is required to write predictions")
    try:
        lines = prediction_lines(args.like, args.world, args.candidate, args.gpu_time)
    except MeshcastError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = "\n".join(lines) + "\n"
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
