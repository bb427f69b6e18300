"""Load a measurement harness under validation/harness/ as a module, without torch: the harnesses
keep their case lists and shape rules in plain Python so that tests run on a machine with no GPU."""
from __future__ import annotations

import importlib.util
from pathlib import Path

HARNESS_DIR = Path(__file__).resolve().parent.parent / "validation" / "harness"


def load_harness(name: str):
    """validation/harness/<name>.py as a module named ``name``."""
    spec = importlib.util.spec_from_file_location(name, HARNESS_DIR / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
