"""The ``meshcast`` command line: dispatches to one module per subcommand.

Every user error (MeshcastError: bad YAML, unknown names, impossible plans, and argparse's own
complaints about the command line) prints one line, ``error: <field>: <reason>``, and exits with
status 2; no traceback. Building the parser imports no numeric or plotting library, so
``meshcast --help`` starts fast; each command imports what it needs when it runs.
"""
from __future__ import annotations

import argparse
import importlib
import re
import sys

COMMANDS = ("simulate", "plan", "whatif", "calibrate", "validate", "catalog")


class UsageError(Exception):
    """A command-line problem found by argparse, named by the option it concerns."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field, self.reason = field, reason


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors raise :class:`UsageError` instead of printing usage."""

    def error(self, message: str):
        raise usage_error(message, self.prog)


def usage_error(message: str, prog: str = "meshcast") -> UsageError:
    """argparse's ``message`` as a :class:`UsageError` naming the option (``--recompute`` -> recompute)."""
    m = re.match(r"argument ([^:]+): (.*)", message)
    if m:
        names = m.group(1).split("/")
        field = next((n for n in names if n.startswith("--")), names[0]).lstrip("-")
        reason = m.group(2).replace("invalid choice: ", "invalid choice ")
        return UsageError(field.lower() if field != "COMMAND" else "command", f"{reason} (see {prog} --help)")
    m = re.match(r"the following arguments are required: (.*)", message)
    if m:
        return UsageError(m.group(1).split(",")[0].strip().lstrip("-").lower(), f"required (see {prog} --help)")
    return UsageError("arguments", f"{message} (see {prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser with every available subcommand."""
    from meshcast import __version__

    parser = Parser(
        prog="meshcast",
        description="Predict LLM training step time, memory and cost for a parallel plan on a cluster; "
                    "search plans; calibrate and validate against real GPU measurements.")
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
    try:
        args = build_parser().parse_args(argv)
    except UsageError as exc:
        print(f"error: {exc.field}: {exc.reason}", file=sys.stderr)
        return 2
    from hardware_specs.errors import MeshcastError

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
