"""Measured-residual correction of the GEMM cost model (issue #12; candidate knn53 of session 30).

cuBLAS picks its kernel (tile, cluster, split-K) by shape, deterministically, and the tiled-wave model
of :mod:`simulator.compute` misses some of those choices by 5-30%, the same way for neighbouring
shapes. A calibration profile may therefore name a *residual table* (``gemm_residuals:`` in the
profile, docs/cost_model.md "GEMM residual correction"): the GPU's own random GEMM draws, each stored
as (dtype, alignment class, m, n, k, r_i = ln(t_measured / t_model)), r_i taken against the cost
model without this correction. A GEMM (m, n, k, dtype) then costs t_model · exp(r) with

    r = Σ_i w_i r_i / (Σ_i w_i + w_0),   w_i = 1 / (d_i + D0),   w_0 = PRIOR_WEIGHT / (PRIOR_DISTANCE + D0)

over the K nearest records i of the same dtype and alignment class
(:func:`simulator.compute.gemm_aligned`: the aligned and the fallback kernels are different code), d_i
the Euclidean distance in (log2 m, log2 n, log2 k). ``w_0`` counts the model's own prediction as
``PRIOR_WEIGHT`` pseudo-records with residual 0 at distance ``PRIOR_DISTANCE`` (a shrinkage that grows as the
neighbours get farther); the switch's form has none (w_0 = 0: knn53 as registered in session 30).

Round shapes are left alone: a GEMM whose n and k are both multiples of ``ROUND_MULTIPLE`` (64) takes no
correction. Every linear-layer GEMM of the traced training steps and of the per-expert loops is such a
shape, as are 175 of the kernel suites' 184, but only 111 of the 4,524 development records; there the
neighbours' residuals do not carry over (the adoption study of session 31: correlation of knn53's r with
the actual residual -0.24 on the in-step GEMMs, 0.0-0.16 on the loops, against 0.53 / 0.67
leave-one-draw-out), and correcting them made the never-fitted real-workload sets worse (H200 per-expert
loops 12.7% -> 18.2%). Leave-one-draw-out with this form: H100 8.75% -> 6.42%, H200 7.79% -> 5.52%.
The form was found by looking at those real sets: it is a candidate, registered beside the committed
model on fresh draws (seeds 56 / 57, 58 / 59) before either was measured; no shipped profile turns it on. On the
registered real training GEMMs (session 32: validation/real_gemms.py, every off-grid GEMM of the catalog's models
under tp 1-8) it is worse than the uncorrected model on both GPUs (H200 5.83% -> 6.01%, H100 7.12% -> 7.46%), and
with ``max_distance`` = 1 (no extrapolation) too (6.19% / 7.42%): it stays off.

Where it does not apply (factor 1): a dtype or alignment class with no record, a batched GEMM
(batch > 1: the draws are single products), grouped GEMMs (another kernel family), and any
accelerator other than the one the table was measured on (a datasheet-only GPU borrowing a
calibrated profile never takes it).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

K = 8                      # nearest development records averaged
D0 = 0.5                   # distance offset of the inverse-distance weights, log2 units
PRIOR_DISTANCE = 0.5       # distance of the zero-residual pseudo-records, log2 units
PRIOR_WEIGHT = 0.0         # how many such records the model's own prediction counts as (0: knn53's inverse-distance mean)
ROUND_MULTIPLE = 64        # n and k both multiples of it ("round" shapes, the training GEMMs): no correction
FORMAT = "meshcast-gemm-residuals/1"


@dataclass(frozen=True, eq=False)
class ResidualTable:
    """Development residuals of one accelerator: ``classes`` maps (meshcast dtype, aligned) to
    (points [N, 3] in log2 m, n, k; log-residuals [N]). Hashed by identity."""

    accelerator: str
    classes: dict

    def __len__(self) -> int:
        return sum(len(r) for _, r in self.classes.values())


def shape_class(m: int, n: int, k: int, dtype: str) -> tuple[str, bool]:
    """(meshcast dtype, aligned): the records a GEMM's correction may borrow from. ``dtype`` in the
    simulator's spelling (bf16) or a measurement record's (bfloat16); aligned as
    :func:`simulator.compute.gemm_aligned` decides it."""
    from simulator.compute import TORCH_DTYPES, gemm_aligned
    dt = TORCH_DTYPES.get(dtype, dtype)
    return dt, gemm_aligned(m, n, k, dt)


def shape_point(m: int, n: int, k: int) -> np.ndarray:
    """A GEMM's position in the correction's space: (log2 m, log2 n, log2 k)."""
    return np.array([math.log2(m), math.log2(n), math.log2(k)])


def build_table(accelerator: str, rows) -> ResidualTable:
    """A :class:`ResidualTable` from ``rows`` of (m, n, k, dtype, log-residual), each class's records in
    the rows' order (the order knn53's neighbour sort saw when it was registered)."""
    grouped: dict = {}
    for m, n, k, dtype, r in rows:
        grouped.setdefault(shape_class(int(m), int(n), int(k), dtype), []).append((shape_point(m, n, k), float(r)))
    classes = {c: (np.array([p for p, _ in v]), np.array([r for _, r in v])) for c, v in grouped.items()}
    return ResidualTable(accelerator, classes)


def log_residual(table: ResidualTable, m: int, n: int, k: int, dtype: str, *, neighbours: int = K,
                 d0: float = D0, prior_weight: float = PRIOR_WEIGHT, prior_distance: float = PRIOR_DISTANCE,
                 round_multiple: int = ROUND_MULTIPLE, max_distance: float | None = None) -> float:
    """r of the module docstring for one GEMM: the inverse-distance-weighted (1 / (d + d0)) mean of the
    log-residuals of the ``neighbours`` nearest records of its class, shrunk towards 0 by a pseudo-neighbour
    of weight ``prior_weight`` / (``prior_distance`` + d0); 0.0 where the class has no record, or (with
    ``max_distance``, log2 units) where its nearest record is farther than that: no extrapolation beyond
    the measured shapes. Dimensionless (a natural log of a time ratio). Source: candidate knn53,
    validation/gemm_residual_knn.py."""
    if round_multiple and n % round_multiple == 0 and k % round_multiple == 0:
        return 0.0
    found = table.classes.get(shape_class(m, n, k, dtype))
    if found is None:
        return 0.0
    points, residuals = found
    d = np.linalg.norm(points - shape_point(m, n, k), axis=1)
    idx = np.argsort(d)[:neighbours]
    if max_distance is not None and d[idx[0]] > max_distance:
        return 0.0
    w = 1.0 / (d[idx] + d0)
    prior = prior_weight / (prior_distance + d0)
    return float(np.sum(w * residuals[idx]) / (np.sum(w) + prior))


def table_to_json(table_rows: list, accelerator: str, meta: dict) -> str:
    """The JSON text of a residual table file: ``format``, ``accelerator``, provenance ``meta`` and
    ``records``, each [dtype, aligned, m, n, k, log-residual] (log-residual = ln(measured / model))."""
    records = []
    for m, n, k, dtype, r in table_rows:
        dt, aligned = shape_class(int(m), int(n), int(k), dtype)
        records.append([dt, aligned, int(m), int(n), int(k), float(r)])
    doc = {"format": FORMAT, "accelerator": accelerator, **meta, "records": records}
    body = ",\n".join("  " + json.dumps(r) for r in records)
    head = json.dumps({k: v for k, v in doc.items() if k != "records"}, indent=1)[:-2]
    return f"{head},\n \"records\": [\n{body}\n ]\n}}\n"


@lru_cache(maxsize=16)
def load_table(path: str) -> ResidualTable:
    """The residual table file at ``path`` (:func:`table_to_json`'s format), read once per process."""
    doc = json.loads(Path(path).read_text())
    if doc.get("format") != FORMAT:
        raise ValueError(f"its format is {doc.get('format')!r}, not {FORMAT!r}")
    return build_table(doc["accelerator"], [(m, n, k, dt, r) for dt, _aligned, m, n, k, r in doc["records"]])


@lru_cache(maxsize=65536)
def residual_factor(path: str, accelerator: str, m: int, n: int, k: int, dtype: str) -> float:
    """exp(r) (:func:`log_residual`) for one GEMM from the table at ``path``, 1.0 when the table was measured
    on another accelerator than ``accelerator``: the factor :func:`simulator.compute.gemm_time` multiplies
    its modelled seconds by. Cached per shape."""
    table = load_table(path)
    if table.accelerator != accelerator:
        return 1.0
    return math.exp(log_residual(table, m, n, k, dtype))
