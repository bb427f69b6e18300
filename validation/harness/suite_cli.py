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
