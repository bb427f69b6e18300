"""The ``meshcast`` command line: dispatches to one module per subcommand.

Every user error (MeshcastError: bad YAML, unknown names, impossible plans) prints one line,
``error: <field>: <reason>``, and exits with status 2; no traceback.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from hardware_specs.errors import MeshcastError

COMMANDS = ("simulate", "plan", "whatif", "calibrate", "validate", "catalog")


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser with every available subcommand."""
    parser = argparse.ArgumentParser(
        prog="meshcast",
        description="Predict LLM training step time, memory and cost for a parallel plan on a cluster; "
                    "search plans; calibrate and validate against real GPU measurements.")
    from meshcast import __version__
    parser.add_argument("--version", action="version", version=f"meshcast {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"meshcast.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"meshcast.commands.{name}":
                raise
            continue
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; MeshcastError becomes one line on stderr and exit status 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except MeshcastError as exc:
        print(f"error: {exc.field}: {exc.reason}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
