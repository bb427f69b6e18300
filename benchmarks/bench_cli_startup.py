"""Benchmark: wall time of ``meshcast --help`` and of subcommand help, as a user starts them.

Run: python benchmarks/bench_cli_startup.py [--runs N]   (median of N fresh subprocesses each)

Each run is a new ``python -m meshcast.cli ...`` process, so the figure includes the
interpreter's own start (about 20 ms) and every import the help needs.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = (["--help"], ["simulate", "--help"], ["plan", "--help"])


def time_command(args: list[str], runs: int) -> float:
    """Median wall seconds of ``python -m meshcast.cli *args`` over ``runs`` fresh processes."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    times = []
    for _ in range(runs + 1):          # the first run warms the OS file cache and is dropped
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "meshcast.cli", *args], env=env, cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - t)
    return statistics.median(times[1:])


def main() -> None:
    """Print the median start time of each help command."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7, help="processes per command")
    runs = ap.parse_args().runs
    for args in COMMANDS:
        print(f"meshcast {' '.join(args):<18} median {time_command(args, runs) * 1e3:7.1f} ms over {runs} runs")


if __name__ == "__main__":
    main()
