"""The command line every single-GPU kernel suite shares (no torch import: ``--dry-run`` runs anywhere)."""
from __future__ import annotations

import argparse


def suite_parser(doc: str, budget_s: float, small_help: str, dry_run_help: str) -> argparse.ArgumentParser:
    """An ArgumentParser described by the first line of ``doc`` with the suite options: ``--out FILE``,
    ``--budget-s`` (seconds, default ``budget_s``), ``--small`` and ``--dry-run``; a suite adds its own."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--out")
    ap.add_argument("--budget-s", type=float, default=budget_s)
    ap.add_argument("--small", action="store_true", help=small_help)
    ap.add_argument("--dry-run", action="store_true", help=dry_run_help)
    return ap


def open_suite(doc: str, budget_s: float, cases_of, describe, suite: str, timing: str) -> tuple | None:
    """The opening of a single-GPU suite whose cases are ``cases_of(small)``: with ``--dry-run`` print
    ``describe(case)`` for each and their count and return None (no torch imported); otherwise
    (args, cases, Recorder, L2 Flusher, Deadline) of common.start_seeded_run, the file's info naming
    ``suite`` and ``timing``; ``--out`` required (SystemExit naming it when missing)."""
    args = suite_parser(doc, budget_s, "tiny shapes (CPU code-path check)", "list the cases; no torch").parse_args()
    cs = cases_of(args.small)
    if args.dry_run:
        for c in cs:
            print(describe(c))
        print(f"{len(cs)} cases")
        return None
    if not args.out:
        raise SystemExit("--out FILE is required (or --dry-run)")
    import common
    info = common.device_info(suite=suite, timing=timing)
    return (args, cs) + common.start_seeded_run(args.out, info, args.budget_s, suite)


def run_simple_suite(doc: str, budget_s: float, cases_of, describe, suite: str, timing: str, run_case, label) -> None:
    """A whole single-GPU suite whose cases each run alone: :func:`open_suite`, then every case through
    ``run_case(case, flush, recorder)`` within the budget (common.run_within_budget), the count of
    records and every error logged at the end."""
    import time
    opened = open_suite(doc, budget_s, cases_of, describe, suite, timing)
    if opened is None:
        return
    args, cs, rec, flush, dl = opened
    import common
    t0 = time.time()
    common.run_within_budget(cs, dl, rec, lambda c: run_case(c, flush, rec), label)
    common.log(f"done in {time.time() - t0:.1f} s: {len(rec.records)} records; {len(rec.errors)} errors")
    for e in rec.errors:
        common.log("  error:", e)


def run_bytes_suite(doc: str, budget_s: float, suite: str, timing: str, cases_of, label, bytes_min, run_case) -> None:
    """:func:`run_simple_suite` for a suite whose dry run lists each case by ``label(case)`` and the GB
    it moves (``bytes_min(case)``)."""
    run_simple_suite(doc, budget_s, cases_of, lambda c: f"{label(c)} {bytes_min(c) / 1e9:8.3f} GB", suite, timing,
                     run_case, label)
