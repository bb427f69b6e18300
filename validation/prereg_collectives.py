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


def prediction_lines(like: str, world: int | None = None, candidate: str | None = None) -> list[str]:
    """The prereg file: a header (hardware, profile, commit) and one line per case:
    ``kind bytes world predicted_time_s``, plus ``candidate_time_s`` under the profile file
    ``candidate`` where one is given (a model not adopted yet, scored on the same run)."""
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
           "# kind bytes world predicted_time_s" + (" candidate_time_s" if candidate else "")]
    alt = load_calibration(candidate) if candidate else None
    for kind, nbytes in harness_cases():
        rec = {"kind": kind, "bytes": nbytes, "world": n, "dtype": "bfloat16"}
        line = f"{kind} {nbytes} {n} {predict_record(rec, hw, cal).time_s:.6e}"
        out.append(line + (f" {predict_record(rec, hw, alt).time_s:.6e}" if alt else ""))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--like", required=True, help="a collectives file of the machine type (its info.gpu, world)")
    p.add_argument("--world", type=int, default=None, help="GPUs (default: the --like file's info.world)")
    p.add_argument("--candidate", default=None, help="a second profile file whose predictions go in a second column")
    p.add_argument("-o", "--output", default=None, help="file to write (default: stdout)")
    args = p.parse_args(argv)
    try:
        lines = prediction_lines(args.like, args.world, args.candidate)
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
