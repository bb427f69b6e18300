"""The confidence of one prediction: its regime, its 80% band and plain words saying what the band
rests on, what is extrapolated, and what its attention kernel's cost rests on
(simulator/kernel_basis.py). Bands come from simulator/confidence_bands.yaml (validation/bands.py:
split-conformal quantiles of the project's own validation residuals).

    confidence_of(result) -> Confidence   (also Result.confidence)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

from simulator.kernel_basis import kernel_basis
from simulator.regimes import (GPU_REGIME_WORDS, GPU_REGIMES, band_regime, describe_feature, feature_tags, gpu_regime,
                               workload)

BANDS_FILE = Path(__file__).resolve().parent / "confidence_bands.yaml"
COVERAGE = 0.8
WORKLOAD_WORDS = {"up_to_2_gpus": "training steps on 1-2 GPUs", "multi_gpu": "multi-GPU runs",
                  "zero3_at_scale": "ZeRO-3 runs across nodes"}
_DEGREE = {"cp": "CP={cp}", "ep": "EP={ep}", "ep_cross_node": "EP={ep} across nodes",
           "tp_cross_node": "TP={tp} across nodes"}


@lru_cache(maxsize=1)
def band_table() -> dict:
    """The committed band table (read once per process)."""
    return yaml.safe_load(BANDS_FILE.read_text())


@dataclass(frozen=True)
class Confidence:
    """A prediction's regime and its 80% band (step time, tokens/s and MFU ranges). The band need
    not be centred on the prediction: it is [t*band80[0], t*band80[1]], where the validation runs of
    its cell put the measured step (validation/bands.py, signed conformal)."""
    gpu_regime: str
    workload: str
    tags: tuple
    extrapolated: tuple         # plain-words reasons the prediction lies outside validated data
    q80: float                  # half the band's log-width: log(band80[1] / band80[0]) / 2
    basis: str
    step_range_s: tuple
    tokens_per_s_range: tuple
    mfu_range: tuple
    sentence: str
    kernel_basis: tuple = ()    # what the attention (and Mamba scan) costs rest on (simulator/kernel_basis.py)
    band80: tuple = (1.0, 1.0)  # measured step / predicted step at the band's ends

    @property
    def factor(self) -> float:
        """The band's multiplicative half-width exp(q) = sqrt(band80[1] / band80[0]): the spread two
        predictions on the same hardware are compared with (planners/ties.py)."""
        return math.exp(self.q80)

    @property
    def validated(self) -> bool:
        return not self.extrapolated

    def rank(self) -> tuple:
        """Tie preference (lower is better): fewer extrapolations, then a better-measured GPU, then
        a narrower band (a regime the validation data pin down more tightly)."""
        return (len(self.extrapolated), GPU_REGIMES.index(self.gpu_regime), round(self.q80, 4))

    def short(self) -> str:
        """The band as a compact column: the measured step's range against the prediction,
        '-12%..+25%' (or '×0.52..2.75' when it reaches 1.5×), with '!' when extrapolated."""
        lo, hi = self.band80
        text = f"{lo - 1:+.0%}..{hi - 1:+.0%}" if hi < 1.5 else f"×{lo:.2f}..{hi:.2f}"
        return text + ("!" if self.extrapolated else "")

    def to_dict(self) -> dict:
        return {"coverage": COVERAGE, "gpu_regime": self.gpu_regime, "workload": self.workload,
                "tags": list(self.tags), "extrapolated": list(self.extrapolated), "validated": self.validated,
                "band_factor": self.factor, "band_range": list(self.band80), "basis": self.basis,
                "step_time_range_s": list(self.step_range_s),
                "tokens_per_s_range": list(self.tokens_per_s_range), "mfu_range": list(self.mfu_range),
                "sentence": self.sentence, "kernel_basis": list(self.kernel_basis)}


def _hardware(result) -> tuple:
    """(accelerator, its GPU regime, its profile's owner, GPUs per node) of a Result, from the
    catalog names it carries; for a heterogeneous pipeline ('a+b'), the least-measured of its
    accelerators (each stage on another type runs on that type's own profile)."""
    from hardware_specs.catalog import load_accelerator, load_cluster, load_node
    from simulator.calibration import calibration_for
    worst = None
    for i, name in enumerate(result.accelerator.split("+")):
        acc = load_accelerator(name)
        cal = result.calibration if i == 0 else calibration_for(acc)[0].name
        regime, prof = gpu_regime(acc, cal)
        if worst is None or GPU_REGIMES.index(regime) > GPU_REGIMES.index(worst[1]):
            worst = (acc, regime, prof)
    try:
        per_node = min(load_node(load_cluster(c).node).gpus_per_node for c in result.cluster.split("+"))
    except Exception:       # a cluster given as a file outside the catalog: assume 8 GPUs per node
        per_node = 8
    return (*worst, per_node)


def applied_key(table: dict, regime: str, family: str, work: str) -> str:
    """The band-table cell a prediction applies: its band regime (a datasheet GPU's family row,
    validation/bands.py) and workload; a datasheet family without a row of its own takes ``datasheet``."""
    key = f"{band_regime(regime, family)}/{work}"
    return key if key in table["applied"] else f"{regime}/{work}"


def extrapolations(acc, regime: str, prof: str | None, tags: list, plan, num_gpus: int, table: dict) -> list[str]:
    """Plain-words reasons a prediction lies outside the validated data."""
    out = []
    if regime in ("datasheet", "uncalibrated"):
        out.append(GPU_REGIME_WORDS[regime].format(acc=acc.name, prof=prof))
    feats = table["features"]
    applied = table["applied"][applied_key(table, regime, acc.family, workload(tags, num_gpus))]
    for t in tags:
        what = _DEGREE.get(t, "").format(tp=plan.tp, cp=plan.cp, ep=plan.ep) or describe_feature(t)
        feat = feats.get(t, {})
        if feat.get("n", 0) < table["feature_min_residuals"]:
            out.append(f"{what} not validated on real runs")
        elif not applied["lo80"] <= -feat.get("median_log_error", 0.0) <= applied["hi80"]:
            # the feature's own held-out runs sit outside the band: the band does not cover it
            off = math.exp(-feat["median_log_error"]) - 1     # measured / predicted step - 1
            out.append(f"{what}: its {feat['n']} held-out runs took a median {off:+.0%} "
                       f"{'longer' if off > 0 else 'less'} than predicted")
    largest = table["workloads"][workload(tags, num_gpus)]["max_gpus"]
    if num_gpus > largest:
        out.append(f"{num_gpus} GPUs is beyond the largest validated run of this kind ({largest} GPUs)")
    return out


def confidence_of(result) -> Confidence:
    """The regime, 80% band and plain-words sentence of a simulated Result."""
    table = band_table()
    acc, regime, prof, per_node = _hardware(result)
    tags = sorted(feature_tags(result.plan, result.num_gpus, per_node) + list(result.model_tags))
    work = workload(tags, result.num_gpus)
    key = applied_key(table, regime, acc.family, work)
    applied = table["applied"][key]
    q = float(applied["q80"])
    lo, hi = math.exp(applied["lo80"]), math.exp(applied["hi80"])
    t = result.step_time_s
    extra = extrapolations(acc, regime, prof, tags, result.plan, result.num_gpus, table)
    if "+" in result.accelerator:
        extra.append(f"a pipeline over several GPU types ({result.accelerator.replace('+', ', ')}) "
                     "not validated on real runs")
    cell = table["cells"].get(key, {"n": 0})
    rests = _rests(applied["basis"], cell["n"], key.split("/")[0], work)
    band = f"{COVERAGE:.0%} band {_secs(t * lo)} - {_secs(t * hi)}"
    if extra:
        sentence = f"EXTRAPOLATED: {'; '.join(extra)}. {band} ({rests})"
    else:
        sentence = f"{band}: {GPU_REGIME_WORDS[regime].format(acc=acc.name, prof=prof)}; features validated ({rests})"
    basis = kernel_basis(result)
    sentence += "".join(f". {line[0].upper()}{line[1:]}" for line in basis)
    return Confidence(regime, work, tuple(tags), tuple(extra), q, applied["basis"], (t * lo, t * hi),
                      (result.tokens_per_s / hi, result.tokens_per_s / lo), (result.mfu / hi, result.mfu / lo), sentence,
                      basis, (lo, hi))


def _secs(x: float) -> str:
    return f"{x:.3g} s" if x >= 1 else f"{x * 1e3:.3g} ms"


def _rests(basis: str, n: int, row: str, work: str) -> str:
    """Plain words for what a band rests on (the ladder step of validation/bands.py); ``row`` is the
    band regime (``datasheet:<family>`` for a datasheet GPU's family)."""
    gpus = f"{row.split(':')[1]} GPUs (datasheet)" if ":" in row else f"{row} GPUs"
    own = f"{n} held-out {WORKLOAD_WORDS[work]} on {gpus}"
    if basis == "cell":
        return f"band from {own}"
    if basis.startswith("cell"):
        return f"band from {own}, widened to a better-measured GPU regime's width"
    if basis.startswith("pooled"):
        return (f"{n} held-out {WORKLOAD_WORDS[work]} on {gpus}, too few: band pooled from the {gpus}' "
                f"and the {WORKLOAD_WORDS[work]}' residuals")
    if basis.startswith("a family"):
        return "its family never validated: the union of the validated datasheet families' bands"
    return "no validation data: the union of every band of the table"
