"""Time, dollars and energy to train a token budget at a simulated step's throughput.

    days          = tokens / tokens_per_s / 86,400
    GPU-hours     = tokens / tokens_per_s / 3,600 x GPUs
    dollars       = GPU-hours x price per GPU-hour (``price``, else the catalog's indicative price)
    GPU energy    = TDP x GPUs x time                    (joules; reported in kWh and MWh)
    facility      = GPU energy x PUE

The energy figure is an **upper bound of GPU board power only**: every GPU is taken to draw its
full TDP for the whole run (real training draws less on average), and CPUs, memory, NICs,
switches and storage are not counted. ``pue`` (power usage effectiveness, >= 1) scales it to
include the data centre's cooling and power-delivery overhead on that GPU power; it still
excludes the rest of the servers and the network.
"""
from __future__ import annotations

import math
from typing import Optional

from hardware_specs.errors import MeshcastError

SECONDS_PER_DAY = 86_400.0
JOULES_PER_KWH = 3.6e6

ENERGY_NOTE = ("upper bound of GPU board power only: TDP x GPUs x time (CPUs, NICs, switches and storage "
               "not counted); facility energy multiplies by the PUE")


def _accelerator_for(result, accelerator):
    """The accelerator behind ``result`` (given, or its catalog entry by name; None if unknown)."""
    if accelerator is not None:
        return accelerator
    from hardware_specs.catalog import load_accelerator

    try:
        return load_accelerator(result.accelerator)
    except MeshcastError:
        return None


def train_cost(result, tokens: Optional[float], price: Optional[float] = None, pue: float = 1.0, *,
               accelerator=None) -> dict:
    """Days, GPU-hours, dollars and energy to train ``tokens`` tokens at ``result``'s throughput.

    ``result``: a :class:`simulator.result.Result` (uses ``tokens_per_s``, ``num_gpus`` and
    ``accelerator``). ``price``: USD per GPU-hour; default the accelerator's catalog
    ``price_per_gpu_hour_usd`` (None if it has none: dollars are then None). ``pue``: power
    usage effectiveness (>= 1) for the facility energy. ``accelerator``: the
    :class:`hardware_specs.schema.Accelerator` to take price and TDP from (default: the catalog
    entry named ``result.accelerator``). ``tokens`` may be None: only per-token rates are given.

    Returns a plain dict (units in key names); raises :class:`MeshcastError` for bad input."""
    if tokens is not None and not (isinstance(tokens, (int, float)) and math.isfinite(tokens) and tokens > 0):
        raise MeshcastError("tokens", f"must be a positive number of tokens, got {tokens!r}")
    if price is not None and not (math.isfinite(price) and price > 0):
        raise MeshcastError("price", f"must be a positive USD per GPU-hour, got {price!r}")
    if not (math.isfinite(pue) and pue >= 1.0):
        raise MeshcastError("pue", f"power usage effectiveness must be >= 1, got {pue!r}")
    acc = _accelerator_for(result, accelerator)
    price_source = "user (--price)" if price is not None else None
    if price is None and acc is not None and acc.price_per_gpu_hour_usd is not None:
        price = float(acc.price_per_gpu_hour_usd)
        price_source = f"catalog: indicative price of {acc.name}"
    tdp = float(acc.tdp_w) if acc is not None else None
    gpus = result.num_gpus
    tps = result.tokens_per_s
    gpu_s_per_token = gpus / tps                          # GPU-seconds per token
    out = {
        "tokens": tokens,
        "tokens_per_s": tps,
        "num_gpus": gpus,
        "accelerator": result.accelerator,
        "price_per_gpu_hour_usd": price,
        "price_source": price_source,
        "tdp_w": tdp,
        "pue": pue,
        "gpu_hours_per_million_tokens": gpu_s_per_token * 1e6 / 3600.0,
        "usd_per_million_tokens": None if price is None else gpu_s_per_token * 1e6 / 3600.0 * price,
        "energy_note": ENERGY_NOTE,
        "time_s": None, "days": None, "gpu_hours": None, "cost_usd": None,
        "gpu_energy_kwh": None, "facility_energy_kwh": None,
    }
    if tokens is None:
        return out
    seconds = tokens / tps
    gpu_hours = seconds / 3600.0 * gpus
    out.update(time_s=seconds, days=seconds / SECONDS_PER_DAY, gpu_hours=gpu_hours,
               cost_usd=None if price is None else gpu_hours * price)
    if tdp is not None:
        kwh = tdp * gpus * seconds / JOULES_PER_KWH
        out.update(gpu_energy_kwh=kwh, facility_energy_kwh=kwh * pue)
    return out
