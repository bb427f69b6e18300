"""Loading the frameworks' own validation code on a CPU-only machine (the ``frameworks`` test extra).

Megatron-LM's ``parse_args``/``validate_args`` live in megatron.training, which the megatron-core
wheel does not ship: point MESHCAST_MEGATRON_LM at a Megatron-LM checkout (without one those
tests skip, saying so). Three shims let it import on CPU under Python 3.11, none of which
changes a check: typing.override (Python 3.12) from typing_extensions; the eight Megatron kernel
modules that import triton at module level (Mamba/SSM and MoE paged-stash kernels, never run by
argument validation) as empty stubs; get_device_arch_version() and torch.cuda.get_device_capability()
answering Hopper (9.0), whose rules (CUDA_DEVICE_MAX_CONNECTIONS, grouped GEMM) the launch scripts
target. TransformerConfig is then built with apply_rope_fusion off: its check that Transformer
Engine is installed (TE has no CPU build) is the one check skipped.
"""
from __future__ import annotations

import os
import pathlib
import sys
import types
import typing

MEGATRON_LM = pathlib.Path(os.environ.get("MESHCAST_MEGATRON_LM", ".no-megatron-lm-checkout"))


class _Anything:
    """Stands in for any name of a stubbed kernel module (decorators return the function)."""

    def __init__(self, *a, **k):
        pass

    def __call__(self, *a, **k):
        return a[0] if len(a) == 1 and callable(a[0]) and not k else _Anything()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()

    def __getitem__(self, key):
        return _Anything()


def _stub(name: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__file__ = f"/stub/{name}.py"
    mod.__path__ = []

    def getattr_(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Anything()
    mod.__getattr__ = getattr_
    return mod


def megatron_arguments_module():
    """megatron.training.arguments from the checkout, or the reason it cannot be imported."""
    if not (MEGATRON_LM / "megatron" / "training" / "arguments.py").exists():
        return None, f"no Megatron-LM checkout at {MEGATRON_LM} (set MESHCAST_MEGATRON_LM)"
    try:
        import torch  # noqa: F401
        import typing_extensions
    except ImportError as exc:
        return None, f"Megatron-LM needs torch: {exc}"
    if not hasattr(typing, "override"):
        typing.override = typing_extensions.override
    for f in (MEGATRON_LM / "megatron").rglob("*.py"):
        lines = f.read_text(errors="ignore").splitlines()
        if any(line.startswith(("import triton", "from triton")) for line in lines):
            name = ".".join(f.relative_to(MEGATRON_LM).with_suffix("").parts)
            sys.modules.setdefault(name, _stub(name))
    if str(MEGATRON_LM) not in sys.path:
        sys.path.insert(0, str(MEGATRON_LM))
    _forget_other_megatron()
    try:
        import megatron.training.arguments as arguments
    except Exception as exc:   # noqa: BLE001 - any import failure is a reason to skip
        return None, f"megatron.training.arguments does not import: {type(exc).__name__}: {exc}"
    arguments.get_device_arch_version = lambda: 9
    return arguments, ""


def _forget_other_megatron() -> None:
    """Drop megatron modules imported from elsewhere (the megatron-core wheel, checked first by
    tests/megatron_core_check.py): the checkout's megatron.training needs the checkout's own core."""
    root = str(MEGATRON_LM / "megatron")
    for name in [n for n in sys.modules if n == "megatron" or n.startswith("megatron.")]:
        where = getattr(sys.modules[name], "__file__", None) or ""
        if not where.startswith(root) and not where.startswith("/stub/"):
            del sys.modules[name]


def megatron_validate(arguments, argv: list[str], world_size: int, env: dict[str, str]):
    """Megatron-LM's own parse_args + validate_args on ``argv`` with the launch script's environment."""
    import torch
    saved_argv, saved_env, saved_cap = sys.argv, dict(os.environ), torch.cuda.get_device_capability
    torch.cuda.get_device_capability = lambda *a: (9, 0)   # Hopper: --moe-grouped-gemm's check
    try:
        os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
        os.environ.update({"WORLD_SIZE": str(world_size), "RANK": "0", "LOCAL_RANK": "0", **env})
        sys.argv = ["pretrain_gpt.py", *argv]
        ns = arguments.parse_args()
        return arguments.validate_args(ns) or ns
    finally:
        sys.argv = saved_argv
        torch.cuda.get_device_capability = saved_cap
        os.environ.clear()
        os.environ.update(saved_env)


class FakeMPU:
    """The data-parallel world DeepSpeedConfig asks the model-parallel unit for."""

    def __init__(self, dp: int):
        self.dp = dp

    def get_data_parallel_world_size(self):
        return self.dp

    def get_data_parallel_rank(self):
        return 0

    def get_model_parallel_world_size(self):
        return 1

    def get_model_parallel_rank(self):
        return 0


def torchtitan_modules():
    """(torchtitan.config.manager, ParallelDims) or (None, reason). torchtitan 0.2.x imports its MoE
    Triton kernels (torchtitan.models.moe.kernels) with the package; without triton (no CPU build)
    that one module is stubbed: config parsing and degree checks never run it."""
    try:
        import triton  # noqa: F401
    except ImportError:
        sys.modules.setdefault("torchtitan.models.moe.kernels", _stub("torchtitan.models.moe.kernels"))
    try:
        import torchtitan.config.manager as manager
        from torchtitan.distributed.parallel_dims import ParallelDims
    except Exception as exc:   # noqa: BLE001 - any import failure is a reason to skip
        return None, f"torchtitan (0.2.x, TOML job configs) does not import: {type(exc).__name__}: {exc}"
    if not hasattr(manager, "ConfigManager") or not hasattr(manager.ConfigManager, "_maybe_load_toml"):
        return None, "this torchtitan configures in Python (>= 0.3); the TOML export targets 0.2.x"
    return (manager, ParallelDims), ""


def torchtitan_job(found, text: str, world_size: int, tmp_path):
    """(job config, ParallelDims) from torchtitan's own ConfigManager and ParallelDims for a TOML
    export; raises what torchtitan raises when it rejects the config."""
    manager, ParallelDims = found
    path = tmp_path / "job.toml"
    path.write_text(text)
    job = manager.ConfigManager().parse_args(["--job.config_file", str(path)])
    par = job.parallelism
    dims = ParallelDims(dp_replicate=par.data_parallel_replicate_degree, dp_shard=par.data_parallel_shard_degree,
                        cp=par.context_parallel_degree, tp=par.tensor_parallel_degree,
                        pp=par.pipeline_parallel_degree, ep=par.expert_parallel_degree,
                        etp=par.expert_tensor_parallel_degree, world_size=world_size)
    return job, dims


def deepspeed_config(config_module, text: str, dp: int):
    """DeepSpeed's own DeepSpeedConfig of a JSON export (``deepspeed.runtime.config``, with
    dist.get_rank answering 0: no process group on CPU)."""
    import json
    saved = config_module.dist.get_rank
    config_module.dist.get_rank = lambda *a, **k: 0
    try:
        return config_module.DeepSpeedConfig(json.loads(text), mpu=FakeMPU(dp))
    finally:
        config_module.dist.get_rank = saved
