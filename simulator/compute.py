"""IO-aware compute cost of single kernels: GEMM, attention and memory-bound ops.

Every cost starts from counted FLOPs and counted HBM bytes and takes the larger of the two
roofline times (Williams, Waterman & Patterson 2009), corrected by named efficiency
parameters (``simulator.calibration.Calibration``):

* GEMM: the output is tiled as a cuBLAS/CUTLASS kernel tiles it; tiles run in waves of one
  tile per SM, so time = waves x (per-tile time). This captures tile quantisation (padding m, n
  to the tile) and wave quantisation (a last, partly empty wave). The per-tile time counts
  K padded to the K-tile plus a prologue/epilogue of ``gemm_tile_overhead_k`` elements. Of the
  candidate tiles the fastest is taken, as cuBLAS' heuristics do.
* Attention: FlashAttention (Dao et al. 2022, Thm. 2) moves Θ(N²d²/M) HBM bytes for SRAM size M;
  its time is matmul FLOPs on the tensor cores plus the exponentials of the softmax on the
  special-function units (the split FlashAttention-3, Shah et al. 2024 §3, points out: H100 has
  989 TFLOP/s of matmul but only ~3.9 T exp/s). Unfused ("math") attention is two batched
  GEMMs plus softmax passes over the materialised N² score matrix: Θ(Nd + N²) HBM bytes.
* Memory-bound ops (norms, activations, adds, copies, optimizer): bytes / achieved bandwidth.

All times are seconds; FLOP/s and B/s are per device.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from functools import lru_cache

from hardware_specs.schema import Accelerator
from simulator.calibration import DEFAULT, Calibration
from simulator.gemm_residual import residual_factor
from simulator.power import time_ratio

DTYPE_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "fp4": 0.5}
# GEMM input dtypes Transformer Engine quantizes to (bf16 output).
QUANTIZED_GEMM_DTYPES = ("fp8", "fp4")
# NVFP4 (TE NVFP4BlockScaling; NVIDIA, "Pretraining Large Language Models with NVFP4", arXiv
# 2509.25149): E2M1 values, one E4M3 scale per 16 consecutive elements, one FP32 scale per tensor.
NVFP4_BLOCK = 16
NVFP4_SCALE_BYTES_PER_ELEMENT = 1.0 / NVFP4_BLOCK
# Measurement-record spellings -> catalog dtype names.
TORCH_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float8_e4m3fn": "fp8",
                "float64": "fp64"}

# Output tiles (rows, cols) a Hopper/Ampere GEMM library chooses among. A smaller tile reuses
# each operand byte loaded into shared memory for fewer FLOPs; its throughput relative to the
# largest tile is (area / largest area) ** gemm_small_tile_exponent (calibrated).
GEMM_TILES = ((128, 256), (256, 128), (128, 128), (64, 128), (64, 64))
GEMM_TILE_K = 64
# Split-K (cuBLAS) / stream-K (CUTLASS): a GEMM whose output tiles leave SMs idle splits k over
# several thread blocks and reduces their fp32 partials. At most GEMM_MAX_SPLIT_K splits (a
# planning bound: with 132 SMs and one tile, 32 splits already fill a quarter of the chip) and
# at least GEMM_SPLIT_MIN_K of k per split (a few K-tiles: below that the prologue dominates).
GEMM_MAX_SPLIT_K = 32
GEMM_SPLIT_MIN_K = 256
# Split-K of the fallback (unaligned) kernels, when a profile turns it on (gemm_unaligned_split_waves):
# at most 256 splits (traced up to 263: 256 is the bound of the planning loop), at least one
# 64-element K-tile per split (traced down to 7-8: cuBLAS's heuristic, not modelled below a K-tile).
GEMM_UNALIGNED_MAX_SPLIT_K = 256
GEMM_UNALIGNED_SPLIT_MIN_K = 64
GEMM_ALIGN_BYTES = 16            # TMA / vectorised loads need 16-byte aligned leading dimensions
ATTENTION_BLOCK_Q = 128          # query rows per FlashAttention thread block
# exponentials per SM per clock on the special-function units (MUFU.EX2): 16 on Ampere and Hopper
# (whitepapers) and on Blackwell B200/GB200 ("the exponential unit (MUFU) stays at 16 operations per
# clock per SM", Zadouri et al. 2026, FlashAttention-4 §1); an accelerator may state its own
# (Accelerator.sfu_exp_per_clk_per_sm: Blackwell Ultra doubles it)
SFU_PER_SM = 16
FP32_LANES_PER_SM = 128          # FP32 units per SM (Hopper whitepaper: 128 FP32 cores per SM)

# Bytes moved per element of a [tokens, hidden] tensor by each memory-bound op, forward,
# in units of the element size: reads + writes (norm: x in, y out; silu_mul: x, y in, out).
ELEMENTWISE_PASSES = {"layernorm": 2, "rmsnorm": 2, "gelu": 2, "softmax": 2, "silu_mul": 3,
                      "add": 3, "copy": 2, "dropout": 2.5, "cross_entropy": 3}


@dataclass(frozen=True, eq=False)
class DeviceModel:
    """An accelerator and its calibration. Hashed by identity, so per-op caches are per instance."""

    accelerator: Accelerator
    cal: Calibration = DEFAULT
    sustained: bool = False      # heavy tensor-core work held for seconds (training): power-limited clock
    clock_fraction: float = 1.0  # SM clock / f_max a training step runs at (simulator/power.py step_clock_fraction)

    @property
    def name(self) -> str:
        return self.accelerator.name

    def peak(self, dtype: str) -> float:
        """Achievable dense peak, FLOP/s: datasheet peak x ``gemm_peak_fraction[dtype]``, times
        the sustained-clock rate factor under sustained load (:meth:`clock_rate`)."""
        return self.accelerator.peak_flops(dtype) * self.cal.gemm_fraction(dtype) * self.clock_rate(dtype)

    def clock_rate(self, dtype: str) -> float:
        """Tensor-core rate relative to a short burst: 1 for a burst; at a step's clock fraction
        x (``clock_fraction`` < 1, simulator/power.py step_clock_fraction) 1 / (φ/x + 1 − φ);
        under sustained GEMM load 1 / (φ / (f_sustained/f_max) + 1 − φ), φ =
        ``gemm_clock_bound_fraction``, f_sustained/f_max = ``sustained_clock_fraction[dtype]``
        (fp16 and tf32 take bf16's; a dtype with no fraction is never power-limited)."""
        if self.clock_fraction < 1.0:
            return 1.0 / time_ratio(self.clock_fraction, self.cal.gemm_clock_bound_fraction)
        if not self.sustained:
            return 1.0
        fr = self.cal.sustained_clock_fraction
        frac = fr.get(dtype, fr.get("bf16") if dtype in ("fp16", "tf32") else None)
        if not frac:
            return 1.0
        phi = self.cal.gemm_clock_bound_fraction
        return 1.0 / (phi / frac + 1.0 - phi)

    @property
    def hbm_Bps(self) -> float:
        """Achievable HBM bandwidth, B/s (reads + writes together)."""
        return self.accelerator.hbm_bandwidth_Bps * self.cal.hbm_fraction

    @property
    def exp_per_s(self) -> float:
        """Exponentials per second on the special-function units, achieved: SMs x exponentials per SM
        per clock (the accelerator's ``sfu_exp_per_clk_per_sm``, else SFU_PER_SM) x clock x the
        calibrated ``attention_softmax_fraction``."""
        a = self.accelerator
        per_sm = a.sfu_exp_per_clk_per_sm or SFU_PER_SM
        return a.sm_count * per_sm * a.boost_clock_hz * self.cal.attention_softmax_fraction


def gemm_flops(m: int, n: int, k: int, batch: int = 1) -> float:
    """FLOPs of ``batch`` products A[m,k] @ B[k,n]: 2mnk each (multiply + add)."""
    return 2.0 * m * n * k * batch


def gemm_bytes(m: int, n: int, k: int, dtype: str, batch: int = 1, out_dtype: str | None = None) -> float:
    """Minimum HBM bytes of a GEMM: read A and B once, write C once. Quantized inputs (fp8, fp4)
    write a bf16 output; fp4 is NVFP4, whose inputs carry one E4M3 scale byte per
    ``NVFP4_BLOCK`` elements along k (Transformer Engine's NVFP4BlockScaling)."""
    b_in = DTYPE_BYTES[dtype] + (NVFP4_SCALE_BYTES_PER_ELEMENT if dtype == "fp4" else 0.0)
    b_out = DTYPE_BYTES[out_dtype or ("bf16" if dtype in QUANTIZED_GEMM_DTYPES else dtype)]
    return batch * ((m * k + k * n) * b_in + m * n * b_out)


def gemm_time(dev: DeviceModel, m: int, n: int, k: int, dtype: str = "bf16", batch: int = 1) -> float:
    """Predicted time of a (batched) GEMM, seconds: tiled waves vs HBM roofline + launch, times the
    measured-residual correction of :func:`gemm_residual_factor` where the profile names a table."""
    return _gemm_time(dev, int(m), int(n), int(k), dtype, int(batch))


def score_gemm_time(dev: DeviceModel, m: int, n: int, k: int, dtype: str, batch: int) -> float:
    """Predicted seconds of one batched GEMM of unfused attention (QK^T, PV and their four gradients: an s x s
    score matrix is its output or one operand): :func:`gemm_time`, its HBM floor at :func:`score_gemm_floor_Bps`
    where the profile has ``score_gemm_floor_fraction`` (issue #12 session 37, candidate bmm78)."""
    return _gemm_time(dev, int(m), int(n), int(k), dtype, int(batch), dev.cal.score_gemm_floor_fraction > 0)


def score_gemm_floor_Bps(dev: DeviceModel, nbytes: float) -> float:
    """HBM rate (B/s) at which a batched GEMM of unfused attention moving ``nbytes`` streams them: the datasheet
    bandwidth x ``score_gemm_floor_fraction`` x min(1, nbytes / SCORE_GEMM_FULL_BYTES) ** ``score_gemm_floor_exponent``,
    an empirical law of the form of :func:`gemm_floor_Bps` fitted on these GEMMs alone (validation/bmm78_fit.py).
    Measured alone at random shapes (bmm_random78/79): the achieved fraction of the datasheet rises with the bytes,
    ~0.25-0.3 at 10 MB, ~0.45-0.6 at 50-100 MB, 0.71-0.83 from ~300 MB to 1.2 GB (the long-sequence cases), where
    the committed floor (hbm_fraction 0.66) costs the largest 13-28% slow (in profiled steps: +21% summed,
    validation.gemm_instep). Not read from cuBLAS; cuBLAS kernels that write the s x s output as transposed
    tiles (nvjet ..._TNT) ran at 0.36-0.49 and stay unexplained."""
    cal = dev.cal
    rate = dev.accelerator.hbm_bandwidth_Bps * cal.score_gemm_floor_fraction
    return rate * min(1.0, max(nbytes, 1.0) / SCORE_GEMM_FULL_BYTES) ** cal.score_gemm_floor_exponent


SCORE_GEMM_FULL_BYTES = 1e9     # bytes from which score_gemm_floor_Bps is flat (the largest draws' cases: ~1.1 GB)


@lru_cache(maxsize=65536)
def _gemm_time(dev: DeviceModel, m: int, n: int, k: int, dtype: str, batch: int, score: bool = False) -> float:
    if min(m, n, k, batch) <= 0:
        return 0.0
    floor = score_gemm_floor_Bps if score else gemm_floor_Bps
    t = gemm_with_roofline_s(dev, gemm_plan(dev, m, n, k, dtype, batch)[0], m, n, k, dtype, batch, floor)
    if dev.cal.gemm_residuals and batch == 1:
        t *= gemm_residual_factor(dev, m, n, k, dtype)
    return t


def gemm_residual_factor(dev: DeviceModel, m: int, n: int, k: int, dtype: str) -> float:
    """Dimensionless factor on the modelled seconds of one (unbatched) GEMM: exp(r), r the
    distance-weighted mean log-residual of the nearest development GEMMs in the residual table
    ``dev.cal.gemm_residuals`` names (simulator/gemm_residual.py; candidate knn53 of issue #12
    session 30 with a zero-residual prior); 1.0 when the profile names none or the table was
    measured on another accelerator (a datasheet-only GPU borrowing the profile)."""
    if not dev.cal.gemm_residuals:
        return 1.0
    return residual_factor(dev.cal.gemm_residuals, dev.accelerator.name, m, n, k, dtype)


def gemm_with_roofline_s(dev: DeviceModel, compute_s: float, m: int, n: int, k: int, dtype: str,
                         batch: int = 1, floor=None) -> float:
    """Seconds of a GEMM whose tiles take ``compute_s``: floored by streaming its operands and
    output through HBM once (``memory_s``: :func:`gemm_bytes` at :func:`gemm_floor_Bps`), plus the
    exposed share γ (``gemm_overlap_exposed``) of the smaller of the two, plus its fixed costs
    (:func:`gemm_fixed_s`): max(c, m) + γ·min(c, m). γ = 0 is the roofline (Williams et al. 2009:
    loads fully hidden behind the tensor cores or the reverse); γ > 0 charges what a pipelined
    main loop cannot overlap: each tile's first K-slices loaded from a cold L2 before its first
    MMA and its output stored after its last (issue #12 session 34: the development draws'
    GEMMs with streaming time 25-50% of their time are predicted 4-7% fast under the max).
    ``floor``: the function (dev, bytes) -> B/s of the streaming rate, :func:`gemm_floor_Bps` unless given
    (:func:`score_gemm_time`)."""
    nbytes = gemm_bytes(m, n, k, dtype, batch)
    memory_s = nbytes / (floor or gemm_floor_Bps)(dev, nbytes)
    exposed = dev.cal.gemm_overlap_exposed * min(compute_s, memory_s)
    return max(compute_s, memory_s) + exposed + gemm_fixed_s(dev.cal, m, n, k, dtype)


def gemm_floor_Bps(dev: DeviceModel, nbytes: float) -> float:
    """HBM rate (B/s) at which a memory-bound GEMM moving ``nbytes`` streams them. Default (profile's
    ``gemm_floor_fraction`` 0): the achievable streaming rate of every kernel, ``dev.hbm_Bps``
    (datasheet x ``hbm_fraction``). With ``gemm_floor_fraction`` f > 0: the datasheet bandwidth x
    f x min(1, nbytes / ``gemm_floor_full_bytes``) ** ``gemm_floor_size_exponent``, an empirical law
    (issue #12 session 33, validation/gemm_floor_fit.py): on the development GEMM draws of both
    GPUs the memory-bound GEMMs' achieved fraction of the datasheet rises with the bytes they move,
    from ~0.25-0.4 under 1 MB through ~0.5 at 4-64 MB to ~0.8 for the 0.3-0.8 GB MoE-router GEMMs,
    where one rate (hbm_fraction, 0.65) leaves the mid sizes 6-12% fast and the largest 15-30% slow.
    Not derived from a mechanism: a fit of the rate's size dependence, registered on fresh draws
    before any adoption."""
    cal = dev.cal
    if cal.gemm_floor_fraction <= 0:
        return dev.hbm_Bps
    rate = dev.accelerator.hbm_bandwidth_Bps * cal.gemm_floor_fraction
    if cal.gemm_floor_full_bytes > 0 and nbytes < cal.gemm_floor_full_bytes:
        rate *= (max(nbytes, 1.0) / cal.gemm_floor_full_bytes) ** cal.gemm_floor_size_exponent
    return rate


def gemm_fixed_s(cal: Calibration, m: int, n: int, k: int, dtype: str) -> float:
    """Fixed seconds of one library GEMM call as CUDA events see it: ``gemm_launch_s`` (the
    launch as the GPU front end sees it plus the prologue and epilogue of a kernel with no
    work: its own parameter, not the memory-bound kernels' ``kernel_launch_s``, because the
    tiniest cuBLAS GEMMs measure 5.5-6.0 us on H200 against that fit's 6.4 us), an fp8 scaled
    matmul's scale loads and epilogue (``gemm_fp8_fixed_s``: fitted ~0 on H100 and H200) and,
    when a leading dimension is not 16-byte aligned, the non-TMA fallback kernel's extra
    set-up (``gemm_unaligned_fixed_s``)."""
    fixed = cal.gemm_launch_s
    if dtype == "fp8":
        fixed += cal.gemm_fp8_fixed_s
    if not gemm_aligned(m, n, k, dtype):
        fixed += cal.gemm_unaligned_fixed_s
    return fixed


# Transformer Engine's NVFP4 quantization of one bf16 GEMM operand for both its uses (TE
# transformer_engine/pytorch/csrc/quantizer.cpp NVFP4Quantizer::quantize_impl, commit d0067d0):
# a first kernel (nvte_hadamard_transform_amax) reads the tensor for the per-tensor amax of the
# tensor and of its 16x16 random-Hadamard transform (2 bytes per element); a fused second kernel
# (nvte_quantize_with_hadamard_transform) reads it again (2) and writes the row-wise NVFP4 copy
# and the column-wise, Hadamard-transformed copy the wgrad GEMM takes (0.5 each), each with one
# E4M3 scale per 16 elements (1/16 each): 5.125 bytes per element in 2 launches. The transform
# is a 16x16 matmul per block on the tensor cores (32 FLOP per element): memory-bound.
NVFP4_QUANTIZE_BYTES_PER_ELEMENT = 2.0 + 2.0 + 2 * (DTYPE_BYTES["fp4"] + NVFP4_SCALE_BYTES_PER_ELEMENT)
NVFP4_QUANTIZE_LAUNCHES = 2


def nvfp4_quantize_time(dev: DeviceModel, elements: float) -> float:
    """Seconds to quantize ``elements`` bf16 values to NVFP4 for both GEMM uses (row-wise and
    column-wise with the random Hadamard transform), memory-bound (NVFP4_QUANTIZE_BYTES_PER_ELEMENT)."""
    return memory_time(dev, NVFP4_QUANTIZE_BYTES_PER_ELEMENT * elements, launches=NVFP4_QUANTIZE_LAUNCHES)


def split_k_factors(tiles: int, k: int, sms: int) -> list[int]:
    """Split-K factors a library considers for a GEMM of ``tiles`` output tiles (batch
    included): 1, and, only when the tiles leave SMs idle (fewer tiles than SMs), every s up to
    ``GEMM_MAX_SPLIT_K`` that still leaves each split at least ``GEMM_SPLIT_MIN_K`` of k and
    launches no more than one wave of tile-splits (cuBLAS's split-K / CUTLASS's stream-K both
    exist to fill the SMs of a GEMM whose m·n gives too few tiles)."""
    return _split_factors(tiles, k, sms, GEMM_MAX_SPLIT_K, GEMM_SPLIT_MIN_K)


def _split_factors(tiles: int, k: int, limit: float, max_split: int, min_k: int) -> list[int]:
    """1, and every split s up to ``max_split`` keeping tiles·s within ``limit`` tile-splits and at
    least ``min_k`` of k per split (none when the tiles alone reach ``limit``)."""
    out = [1]
    if tiles >= limit:
        return out
    for s in range(2, max_split + 1):
        if tiles * s > limit or k < s * min_k:
            break
        out.append(s)
    return out


def unaligned_split_k_factors(tiles: int, k: int, sms: int, waves: float) -> list[int]:
    """Split-K factors of the fallback kernels cuBLAS runs for an unaligned GEMM (CUTLASS SM75
    ``align1`` / SM80 ``align2`` kernels, whose split count is grid.z), when
    ``gemm_unaligned_split_waves`` (``waves``) > 0: 1 and every s up to
    ``GEMM_UNALIGNED_MAX_SPLIT_K`` that keeps tiles·s within ``waves`` waves of one tile-split
    per SM and at least ``GEMM_UNALIGNED_SPLIT_MIN_K`` of k per split. Traced
    (validation/gemm_kernels.py, H100 and H200 development draws): these kernels split far more
    than the TMA kernels (median 23-26 splits, up to 263; grids of ~2 x SMs CTAs, e.g. 35x19x45185
    in 257 splits of 176), because a narrow-load main loop is long per K element and its
    reduction is a separate cheap kernel."""
    return _split_factors(tiles, k, waves * sms, GEMM_UNALIGNED_MAX_SPLIT_K, GEMM_UNALIGNED_SPLIT_MIN_K)


# cuBLAS's Hopper kernels (nvjet) for large aligned GEMMs run wide tiles at a finer width than the five
# coarse tiles: traced on the H100 and H200 development draws (validation/gemm_kernels.py), one side
# 128, 192 or 256 and the other any multiple of 8 from 128 up (144, 152, 176, 208, 248, 272, 288, 304 ...),
# which lets a persistent kernel cover m x n in whole waves of its ~132 CTAs (e.g. 1504 x 2896 in
# 8 x 16 = 128 tiles of 192 x 192, one wave, where 128 x 128 tiles need 276, three waves).
NVJET_WIDE_SIDES = {128: 320, 192: 256, 256: 256}   # fixed side: largest other side traced (elements)
NVJET_WIDE_MIN = 128


def gemm_tiles(cal, aligned: bool, batch: int = 1) -> tuple:
    """Output tiles (rows of m, columns of n) the tile search of one GEMM considers: the five coarse
    GEMM_TILES, and, for an aligned unbatched GEMM when the profile's ``gemm_tile_granularity`` g > 0,
    also nvjet's wide tiles (:func:`nvjet_wide_tiles`). Unaligned GEMMs run CUTLASS fallback kernels
    of the coarse tiles (traced), batched ones keep the tiles their own fit (bmm78) was made with."""
    g = int(cal.gemm_tile_granularity)
    if g <= 0 or not aligned or batch != 1:
        return GEMM_TILES
    return nvjet_wide_tiles(g)


@lru_cache(maxsize=8)
def nvjet_wide_tiles(g: int) -> tuple:
    """GEMM_TILES followed by every tile with one side in NVJET_WIDE_SIDES and the other from
    NVJET_WIDE_MIN to that side's largest traced width in steps of ``g``, in both orientations."""
    out = list(GEMM_TILES)
    for side, widest in NVJET_WIDE_SIDES.items():
        for other in range(NVJET_WIDE_MIN, widest + 1, g):
            for tile in ((side, other), (other, side)):
                if tile not in out:
                    out.append(tile)
    return tuple(out)


def gemm_plan(dev: DeviceModel, m: int, n: int, k: int, dtype: str = "bf16", batch: int = 1) -> tuple:
    """(compute seconds, tile rows, tile cols, split-K factor) of the fastest tiling under the
    model: for each output tile (tm, tn) and split factor s, waves of ⌈tiles·s / SMs⌉ tile-splits,
    each over k/s (:func:`gemm_tile_s`), and for s > 1 the reduction of the s fp32 partial
    m×n outputs (:func:`split_k_reduction_s`). An unaligned GEMM (``vector``: the fallback kernel's
    load width, :func:`gemm_load_vector`, capped at ``gemm_unaligned_max_vector``) takes its split
    factors from :func:`unaligned_split_k_factors` when ``gemm_unaligned_split_waves`` > 0. The
    memory roofline and fixed costs are added by :func:`gemm_time`."""
    sms = dev.accelerator.sm_count
    vector = gemm_load_vector(n, k, dtype, dev.cal.gemm_unaligned_max_vector)
    waves = dev.cal.gemm_unaligned_split_waves
    best = (math.inf, 0, 0, 1)
    for tm, tn in gemm_tiles(dev.cal, vector is None, batch):
        tiles = math.ceil(m / tm) * math.ceil(n / tn) * batch
        factors = unaligned_split_k_factors(tiles, k, sms, waves) if vector is not None and waves > 0 \
            else split_k_factors(tiles, k, sms)
        for s in factors:
            t = gemm_tiling_s(dev, m, n, k, dtype, tm, tn, s, vector, batch)
            if t < best[0]:
                best = (t, tm, tn, s)
    return best


def gemm_tiling_s(dev: DeviceModel, m: int, n: int, k: int, dtype: str, tm: int, tn: int, s: int,
                  vector: float | None, batch: int = 1) -> float:
    """Compute seconds of a GEMM run as tm×tn output tiles split s ways over k: waves of
    ⌈tiles·s / SMs⌉ tile-splits, each over ⌈k/s⌉ (:func:`gemm_tile_s`; a partial last wave runs its
    tiles with the whole SM each: no gain beyond one tile per SM), plus for s > 1 the reduction of
    the s partial outputs (:func:`split_k_reduction_s`)."""
    tiles = math.ceil(m / tm) * math.ceil(n / tn) * batch
    t = math.ceil(tiles * s / dev.accelerator.sm_count) * gemm_tile_s(dev, tm, tn, math.ceil(k / s), dtype, vector)
    if vector is not None and s == 1:
        t += unaligned_store_s(dev, tiles, tm, tn, dtype)
    if s > 1:
        t = max(t, l2_operand_s(dev, tiles * s, tm, tn, math.ceil(k / s), dtype))
        t += split_k_reduction_s(dev, m, n, s, batch)
    return t


def l2_operand_s(dev: DeviceModel, tile_splits: int, tm: int, tn: int, k: int, dtype: str) -> float:
    """Seconds the whole GPU needs to stream the operands of ``tile_splits`` tm×tn tiles, each
    over ``k`` (padded to the K-tile), from L2 into shared memory: Σ (tm + tn)·k_pad·bytes at
    ``gemm_l2_operand_bytes_per_flop`` × the datasheet dense bf16 peak (B/s); 0 when that is 0 (the
    default: no floor). Every output tile re-reads its row panel of A and column panel of B, so a
    small-tile tiling of a small-m·n, large-k GEMM moves far more than the operands' own bytes
    (208×376×43304 on 64×64 tiles: 266 MB through L2 for 51 MB of operands); what the SMs can pull
    from L2 together, not each SM's own load rate (``gemm_sm_load_bytes_per_flop``), then bounds
    the kernel. Source: the cuBLAS traces of the development draws (validation/gemm_kernels.py):
    split-K nvjet kernels of small-m·n, large-k shapes run 15-35% longer than the tiles' tensor
    time at every traced tile; issue #12 session 23."""
    rate = dev.cal.gemm_l2_operand_bytes_per_flop * dev.accelerator.peak_flops("bf16")
    if rate <= 0:
        return 0.0
    k_pad = math.ceil(k / GEMM_TILE_K) * GEMM_TILE_K
    return tile_splits * (tm + tn) * k_pad * DTYPE_BYTES[dtype] / rate


def unaligned_store_s(dev: DeviceModel, tiles: int, tm: int, tn: int, dtype: str) -> float:
    """Seconds by which storing C lengthens a non-TMA fallback GEMM kernel run without split-K:
    ``gemm_unaligned_store_serial`` x the ``tiles`` tm×tn output tiles' bytes (the output dtype's:
    bf16 for fp8 inputs) at the achieved HBM bandwidth; 0 when that parameter is 0 (the default).
    Mechanism: cuBLAS's fallback kernels for a leading dimension not 16-byte aligned are CUTLASS
    SM75 ``align1`` / SM80 ``align2`` multistage kernels (traced, validation/gemm_kernels.py): one
    output tile per thread block, its epilogue storing C with ``align``-element stores after the
    whole main loop, no warp-specialised producer and no TMA store to overlap the next tile's loads
    with it (CUTLASS ``gemm::kernel::Gemm`` runs mainloop then epilogue in the same warps, where the
    SM90 warp-specialised persistent kernels nvjet uses overlap the two). Every wave's tiles thus
    load from L2 and compute together, then store together at HBM bandwidth: the stores add
    tiles·tm·tn·bytes / HBM B/s. Source: H100 traces of large-m·n, small-k ``align2`` shapes, whose
    kernels run 1.4-1.6x the main-loop model (11890×5356×188: 174 us traced, 111 us modelled, the
    127 MB output at HBM bandwidth 58 us); issue #12 session 24, candidate gemm40. Split-K (s > 1)
    is not charged here: its fp32 partials' write and read are in :func:`split_k_reduction_s`."""
    serial = dev.cal.gemm_unaligned_store_serial
    if serial <= 0:
        return 0.0
    b_out = DTYPE_BYTES["bf16" if dtype in QUANTIZED_GEMM_DTYPES else dtype]
    return serial * tiles * tm * tn * b_out / dev.hbm_Bps


def gemm_tile_s(dev: DeviceModel, tm: int, tn: int, k: int, dtype: str, vector: float | None = None) -> float:
    """Seconds one SM spends on one tm×tn output tile over ``k``: the main loop over k padded
    to the K-tile at the per-SM peak times the small-tile factor (area / largest tile area) **
    ``gemm_small_tile_exponent``, but never faster than the SM can load its operands ((tm + tn) x
    k_pad elements from L2 at ``gemm_sm_load_bytes_per_flop`` x the SM's datasheet dense bf16
    FLOP/s, bytes/s: relative to the tensor rate, so it transfers between balanced designs; 0 = no
    such cap) nor, when a leading dimension is not 16-byte aligned (``vector``: elements per
    load of the non-TMA fallback kernel, :func:`gemm_load_vector`; None: aligned), than its narrow
    loads allow (:func:`unaligned_load_s`); plus the tile's prologue and epilogue,
    ``gemm_tile_overhead_k`` K elements at the aligned rate (alignment slows loads, not the
    pipeline fill or the store of C)."""
    cal = dev.cal
    per_sm = dev.peak(dtype) / dev.accelerator.sm_count
    per_sm *= (tm * tn / (GEMM_TILES[0][0] * GEMM_TILES[0][1])) ** cal.gemm_small_tile_exponent
    k_pad = math.ceil(k / GEMM_TILE_K) * GEMM_TILE_K
    main = 2.0 * tm * tn * k_pad / per_sm
    if vector is not None:
        main = max(main, unaligned_load_s(dev, tm, tn, k_pad, vector))
    if cal.gemm_sm_load_bytes_per_flop > 0:
        load_Bps = cal.gemm_sm_load_bytes_per_flop * dev.accelerator.peak_flops("bf16") / dev.accelerator.sm_count
        main = max(main, (tm + tn) * k_pad * DTYPE_BYTES[dtype] / load_Bps)
    return main + 2.0 * tm * tn * cal.gemm_tile_overhead_k / per_sm


# cuBLAS's fp32 CUDA-core GEMM kernels (sm80_xmma_gemm_f32f32_..._ffma) as traced on an H100 under PyTorch's
# SDPA math backend (validation/measurements/repeat/h100_attention_math_profile.json): output tiles and K-tile
FFMA_TILES = ((128, 128), (256, 64), (128, 64), (64, 128), (64, 64))
FFMA_TILE_K = 8


def ffma_gemm_time(dev: DeviceModel, m: int, n: int, k: int, batch: int = 1) -> float:
    """Seconds of an fp32 (batched) GEMM on the CUDA cores, without TF32 (PyTorch's default
    ``torch.backends.cuda.matmul.allow_tf32 = False``): the tile model of :func:`gemm_tile_s` with the
    FFMA kernels' own tiles (FFMA_TILES), K-tile (8) and constants ``ffma_gemm`` -- waves of
    ⌈tiles / SMs⌉ tiles, each 2·tm·tn·(k_pad + ``overhead_k``) FLOPs at the SM's share of the datasheet
    fp32 peak x ``fraction`` x (tm·tn / 128²) ** ``small_tile_exponent`` -- plus ``gemm_launch_s``; the
    best tile. A profile without ``ffma_gemm`` costs it as a ``fp32`` GEMM of the tensor-core model."""
    p = dev.cal.ffma_gemm
    if not p:
        return gemm_time(dev, m, n, k, "fp32", batch)
    if min(m, n, k, batch) <= 0:
        return 0.0
    sms = dev.accelerator.sm_count
    fraction = p.get("fraction") or dev.cal.gemm_fraction("fp32")      # a profile that sets only some of the three
    per_sm = dev.accelerator.peak_flops("fp32") * fraction * dev.clock_rate("fp32") / sms
    k_pad = math.ceil(k / FFMA_TILE_K) * FFMA_TILE_K + p.get("overhead_k", 0.0)
    best = math.inf
    for tm, tn in FFMA_TILES:
        rate = per_sm * (tm * tn / (FFMA_TILES[0][0] * FFMA_TILES[0][1])) ** p.get("small_tile_exponent", 0.0)
        waves = math.ceil(math.ceil(m / tm) * math.ceil(n / tn) * batch / sms)
        best = min(best, waves * 2.0 * tm * tn * k_pad / rate)
    return best + dev.cal.gemm_launch_s


def split_k_reduction_s(dev: DeviceModel, m: int, n: int, s: int, batch: int = 1) -> float:
    """Seconds to reduce ``s`` fp32 partial m×n outputs: each written and read back once
    (8·s·m·n bytes per product at HBM bandwidth, an upper bound: on Hopper the partials of a
    small output mostly stay in L2), plus ``gemm_split_k_fixed_s``: cuBLAS's split-K and
    CUTLASS's stream-K reduce in the GEMM kernel itself (a fix-up by the last thread block of
    each tile, after a semaphore wait) or in a small second kernel; the fitted fixed cost
    stands for either. Plus ``gemm_split_k_per_split_s`` per split: cuBLAS's separate
    ``splitKreduce_kernel`` walks the s partials of each output in turn, and its traced device
    time grows ~32 ns per split on H100 and H200 (1.5 us + 0.032 us·s: 1.3 us at s = 3, 9.8 us at
    s = 257; validation/gemm_kernels.py); 0 in a profile that predates the trace."""
    return 8.0 * s * m * n * batch / dev.hbm_Bps + dev.cal.gemm_split_k_fixed_s + s * dev.cal.gemm_split_k_per_split_s


def grouped_gemm_time(dev: DeviceModel, group_tokens: tuple, n: int, k: int, dtype: str = "bf16") -> float:
    """Predicted seconds of one grouped GEMM launch (torch._grouped_mm, a CUTLASS grouped kernel;
    MoE experts): group g multiplies its ``group_tokens[g]`` rows [m_g, k] by its own weight
    [k, n]. One persistent kernel walks the output tiles of every group: for each candidate
    tile (tm, tn), Σ_g ⌈m_g/tm⌉·⌈n/tn⌉ tiles in waves over the SMs, each tile as in
    :func:`gemm_tile_s` (no split-K: the grouped kernel has none); the fastest tile wins.
    Memory roofline: every A row, the weight of every non-empty group, every C row, once.
    Fixed costs as one GEMM call (:func:`gemm_fixed_s`) plus ``gemm_grouped_fixed_s`` (the grouped
    problem's set-up: per-group sizes and operand addresses built on the device before the GEMM
    kernel runs; measured, validation/grouped_fit.py). Empty groups cost nothing."""
    return _grouped_gemm_time(dev, tuple(int(t) for t in group_tokens if int(t) > 0), int(n), int(k), dtype)


@lru_cache(maxsize=16384)
def _grouped_gemm_time(dev: DeviceModel, tokens: tuple, n: int, k: int, dtype: str) -> float:
    if not tokens or min(n, k) <= 0:
        return 0.0
    sms = dev.accelerator.sm_count
    vector = gemm_load_vector(n, k, dtype)
    best = math.inf
    for tm, tn in GEMM_TILES:
        tiles = sum(math.ceil(m / tm) for m in tokens) * math.ceil(n / tn)
        best = min(best, math.ceil(tiles / sms) * gemm_tile_s(dev, tm, tn, k, dtype, vector))
    rows = sum(tokens)
    b_in = DTYPE_BYTES[dtype]
    b_out = DTYPE_BYTES["bf16" if dtype in QUANTIZED_GEMM_DTYPES else dtype]
    memory = ((rows * k + len(tokens) * k * n) * b_in + rows * n * b_out) / dev.hbm_Bps
    return max(best, memory) + gemm_fixed_s(dev.cal, rows, n, k, dtype) + dev.cal.gemm_grouped_fixed_s



def gemm_load_vector(n: int, k: int, dtype: str, max_vector: float = 0.0) -> float | None:
    """Elements per global load of the kernel cuBLAS falls back to when a leading dimension is
    not 16-byte aligned, or None when both are (the TMA path). Row-major A[m,k] has leading
    dimension k, B[k,n] and C[m,n] have n; a leading dimension of d elements is aligned to
    gcd(d·bytes, 16) bytes, and a kernel loads vectors no wider than that. ASSUMPTION: the
    fallback kernel is built for one alignment, the narrowest of A's and B's, and loads every
    operand at it (CUTLASS/cuBLAS ``align1``/``align2``/``align4`` kernels; developed on
    h100_kernels.json and seed 21 of h100_gemm_random2.json, where modelling A and B each at its
    own width fitted worse). ``max_vector`` > 0 caps it (``gemm_unaligned_max_vector``): the traced
    cuBLAS fallback kernels are SM75 ``align1`` (an odd leading dimension) and SM80 ``align2``
    (even, not a multiple of 8, including % 8 == 4): there is no ``align4`` bf16 kernel
    (validation/gemm_kernels.py)."""
    size = DTYPE_BYTES[dtype]
    if gemm_aligned(0, n, k, dtype):
        return None
    vector = min(math.gcd(int(d * size), GEMM_ALIGN_BYTES) for d in (n, k)) / size
    return min(vector, max_vector) if max_vector > 0 else vector


def unaligned_load_s(dev: DeviceModel, tm: int, tn: int, k_pad: int, vector: float) -> float:
    """Seconds the non-TMA fallback kernel needs to load one tm×tn tile's operands over
    ``k_pad``: (tm + tn)·k_pad elements, ``vector`` per load instruction. Narrow loads bound the
    kernel by load instructions, not FLOPs or bytes: its rate does not depend on the dtype (an
    odd-sized tf32 GEMM runs about as fast as a bf16 one, h100_kernels.json "awkward": 137 vs
    136-153 TFLOP/s) and grows with the tile's reuse 2·tm·tn/(tm + tn) FLOP per element.
    ``gemm_unaligned_fraction`` sets the rate: the FLOP/s the largest tile reaches with one
    element per load, as a fraction of the datasheet dense bf16 peak (loads per second per SM =
    fraction x bf16 peak per SM / (2·tm·tn/(tm + tn)) of the largest tile). A tile of less reuse than
    the largest (r = 2·tm·tn/(tm + tn) < r_max) takes (r_max / r) ** ``gemm_unaligned_reuse_exponent``
    times longer again (0, the default: no such factor; candidate gemm40, issue #12 session 24): the
    fallback kernels' smaller CTA tiles have fewer and smaller warp tiles (CUTLASS SM75 / SM80
    ``64x64`` tiles: 4 warps of 32x32, against 8 warps of 64x64 in ``256x128``), so fewer narrow
    loads in flight per SM to hide their latency and more shared-memory fragment reads per FLOP;
    traced on H100 (validation/gemm_kernels.py), the SM75 ``64x64_nn_align1`` kernels run 1.5-1.9x
    the per-element law (181x2771x352: 14.3 us traced, 7.5 us modelled) where ``256x128`` ones
    run within ~10% of it. The exponent is fitted (validation/gemm40_fit.py)."""
    big_m, big_n = GEMM_TILES[0]
    flop_per_element = 2.0 * big_m * big_n / (big_m + big_n)
    loads_per_s = dev.cal.gemm_unaligned_fraction * dev.accelerator.peak_flops("bf16") / dev.accelerator.sm_count \
        / flop_per_element
    # candidate gemm40: a smaller tile's loads run slower than its reuse alone gives (exponent 0: off)
    small = (flop_per_element * (tm + tn) / (2.0 * tm * tn)) ** dev.cal.gemm_unaligned_reuse_exponent
    return small * (tm + tn) * k_pad / (vector * loads_per_s)


def gemm_aligned(m: int, n: int, k: int, dtype: str) -> bool:
    """Whether row-major A[m,k], B[k,n], C[m,n] have 16-byte aligned leading dimensions (k, n);
    unaligned operands keep cuBLAS off its TMA/tensor-core fast path (a slower kernel runs)."""
    per = GEMM_ALIGN_BYTES / DTYPE_BYTES[dtype]
    return k % per == 0 and n % per == 0


def attention_flops(batch: int, heads: int, seq_q: int, seq_kv: int, head_dim: int, causal: bool) -> float:
    """Forward matmul FLOPs of attention: QK^T and PV, 2 x 2·sq·skv·d per head; causal halves
    the score matrix when sq == skv (the kept fraction is (skv - sq/2)/skv in general)."""
    return 4.0 * batch * heads * seq_q * seq_kv * head_dim * causal_fraction(seq_q, seq_kv, causal)


def causal_fraction(seq_q: int, seq_kv: int, causal: bool) -> float:
    """Fraction of the sq x skv score matrix a causal mask keeps (queries are the last sq)."""
    if not causal:
        return 1.0
    return (seq_kv - seq_q / 2.0 + 0.5) / seq_kv if seq_q <= seq_kv else 0.5


def flash_attention_bytes(batch: int, heads: int, kv_heads: int, seq_q: int, seq_kv: int, head_dim: int) -> float:
    """HBM bytes of a FlashAttention forward: Q and O once per query head, K and V once per key/value
    head. Dao et al. 2022 (Thm. 2) count K and V once per query block, the traffic between SRAM and
    HBM without a cache; on a GPU the query blocks of one (batch, head) are adjacent in launch order
    (the query block is the grid's fastest dimension) and run together, so they, and the query heads
    of a GQA group after them, re-read K and V from L2: 2·s_kv·d·2 bytes per head, 4 MB at s = 8192,
    d = 128, against 40-50 MB of L2 on A100/H100/H200. Where a head's K and V would not fit, the
    kernel is compute-bound by far (s/4 FLOP per byte), so the bound never binds there."""
    e = 2  # bf16 / fp16 elements
    return 2 * batch * heads * seq_q * head_dim * e + 2 * batch * kv_heads * seq_kv * head_dim * e


def attention_time(dev: DeviceModel, batch: int, heads: int, seq_q: int, seq_kv: int, head_dim: int,
                   causal: bool = True, kv_heads: int | None = None, backend: str = "flash",
                   direction: str = "fwd") -> float:
    """Predicted time of scaled-dot-product attention, seconds.

    ``direction``: ``fwd``, ``bwd`` or ``fwd_bwd``. ``backend``: ``flash`` (PyTorch SDPA's
    FlashAttention-2, fused and IO-aware), ``cudnn`` (cuDNN's fused flash attention: SDPA's
    CUDNN_ATTENTION, Transformer Engine's FusedAttention), ``efficient`` (SDPA's memory-efficient
    CUTLASS kernel), ``fa3`` (FlashAttention-3, Shah et al. 2024; never fitted), ``triton_fa``
    (llm-foundry's Triton FlashAttention, sm80 mma.sync code) -- the five costed by
    :func:`_flash_pass` / :func:`_fused_pass`; ``cudnn``, ``fa3`` and ``triton_fa`` are costed as
    ``flash`` on accelerators of other families than they were designed or measured for (HOPPER_DESIGNS) --,
    ``unfused`` (Megatron-LM before FlashAttention: 16-bit batched GEMMs around one fused
    scale-mask-softmax kernel over the materialised score matrix) or ``math`` (PyTorch's SDPA
    math backend: the same in fp32 with separate mask and softmax passes) or ``unfused_torch``
    (Megatron-Core's local DotProductAttention without apex or Transformer Engine: bf16 batched
    GEMMs, the softmax in fp32 as separate PyTorch kernels)."""
    kv_heads = kv_heads or heads
    backend = costed_attention_backend(backend, dev.accelerator.family, dev.cal)
    if backend in FUSED_KERNELS:
        t = 0.0
        if direction in ("fwd", "fwd_bwd"):
            t += _fused_pass(dev, backend, batch, heads, kv_heads, seq_q, seq_kv, head_dim, causal, bwd=False)
        if direction in ("bwd", "fwd_bwd"):
            t += _fused_pass(dev, backend, batch, heads, kv_heads, seq_q, seq_kv, head_dim, causal, bwd=True)
        return t
    if backend == "unfused_torch":
        return _unfused_torch_attention_time(dev, batch, heads, kv_heads, seq_q, seq_kv, head_dim, direction, causal)
    if backend == "math":
        return _math_attention_time(dev, batch, heads, kv_heads, seq_q, seq_kv, head_dim, causal, direction)
    if backend == "unfused":
        return _unfused_attention_time(dev, batch, heads, seq_q, seq_kv, head_dim, direction)
    t = 0.0
    if direction in ("fwd", "fwd_bwd"):
        t += _flash_fwd_pass(dev, batch, heads, kv_heads, seq_q, seq_kv, head_dim, causal)
    if direction in ("bwd", "fwd_bwd"):
        t += _flash_pass(dev, batch, heads, kv_heads, seq_q, seq_kv, head_dim, causal, bwd=True)
    return t


def costed_attention_backend(backend: str, family: str, cal: Calibration) -> str:
    """The attention kernel :func:`attention_time` costs for ``backend`` on an accelerator of
    ``family`` with calibration ``cal``: ``flash`` (FlashAttention-2) where the kernel's design needs
    another family (HOPPER_DESIGNS: no WGMMA/TMA before Hopper, cuDNN's and FA3's sm80 paths are
    FA2-class kernels) or where a fitted kernel has no parameters in ``cal`` (a kernel never measured
    is costed as the one that was); else ``backend`` itself."""
    if backend in HOPPER_DESIGNS and family not in HOPPER_DESIGNS[backend]:
        return "flash"
    if backend in FUSED_KERNELS and backend != "fa3" and not fused_attention_fitted(cal, backend):
        return "flash"
    return backend


def _tile_sum(n_q: int, n_kv: int, causal: bool) -> int:
    """Query-block x key-block tile pairs a FlashAttention kernel visits: causal skips the
    blocks above the diagonal at block granularity (diagonal blocks cost a whole tile)."""
    if not causal:
        return n_q * n_kv
    offset = n_kv - n_q                  # queries are the last n_q blocks of the keys
    return sum(min(n_kv, offset + i + 1) for i in range(n_q))


@lru_cache(maxsize=16384)
def _flash_pass(dev: DeviceModel, batch: int, heads: int, kv_heads: int, seq_q: int, seq_kv: int,
                head_dim: int, causal: bool, bwd: bool) -> float:
    """One FlashAttention kernel (forward, or backward with its pre/post-processing kernels).

    Work is counted in tiles of ATTENTION_BLOCK_Q x ATTENTION_BLOCK_Q scores: each costs the
    tensor-core FLOPs of its 2 (forward) or 5 (backward) matmuls and the exponentials of its
    scores; each thread block adds ``attention_tile_overhead`` tiles of fixed work (prologue,
    epilogue, softmax rescaling); thread blocks run in waves over the SMs."""
    cal = dev.cal
    bq = ATTENTION_BLOCK_Q
    n_q, n_kv = math.ceil(seq_q / bq), math.ceil(seq_kv / bq)
    blocks = batch * heads * (n_kv if bwd else n_q)      # backward parallelises over key blocks
    tiles = batch * heads * _tile_sum(n_q, n_kv, causal) + blocks * cal.attention_tile_overhead
    sms = dev.accelerator.sm_count
    wave_eff = blocks / (math.ceil(blocks / sms) * sms)
    peak = dev.accelerator.peak_flops("bf16") * dev.clock_rate("bf16")
    matmuls, frac = (5, cal.attention_bwd_fraction) if bwd else (2, cal.attention_fwd_fraction)
    tile_flops = matmuls * 2 * bq * bq * head_dim
    compute = tiles * (tile_flops / (peak * frac) + bq * bq / dev.exp_per_s) / wave_eff
    io = flash_attention_bytes(batch, heads, kv_heads, seq_q, seq_kv, head_dim)
    launches = 1
    if bwd:   # dO.O row sums before, fp32 dQ accumulator converted to bf16 after
        io = 2.5 * io + batch * heads * seq_q * head_dim * (2 + 2 + 4 + 4 + 2)
        launches = 3
    return max(compute, io / dev.hbm_Bps) + launches * cal.kernel_launch_s


# PyTorch's FlashAttention-2 forward (aten/src/ATen/native/transformers/cuda/flash_attn/
# flash_fwd_launch_template.h, run_mha_fwd_hdim*, the A100/H100 branch without dropout):
# (largest head_dim, kBlockM query rows, kBlockN keys per tile)
FA2_FWD_TILES = ((64, 128, 128), (128, 128, 64), (160, 128, 32), (224, 128, 64), (256, 64, 64))
# thread blocks resident per SM: the 4-warp kernels are sized for two CTAs per SM (the same file:
# "128 x 32 (48 KB smem) ... since we get 2 CTAs per SM", "For H100 we want to run with 64 x 64
# (96KB smem) since then we can get 2 CTAs per SM"); their ~255 registers per thread (the O
# accumulator in registers) allow 65536 / (128 x 256) = 2
FA2_FWD_CTAS_PER_SM = 2
# blocks simulated exactly by :func:`list_schedule`; before them, a long launch is taken as balanced
LIST_SCHEDULE_MAX_BLOCKS = 12288


def fa2_fwd_tile(head_dim: int) -> tuple[int, int]:
    """(kBlockM, kBlockN) of PyTorch's FlashAttention-2 forward kernel for ``head_dim`` (FA2_FWD_TILES)."""
    for hd, bm, bn in FA2_FWD_TILES:
        if head_dim <= hd:
            return bm, bn
    return FA2_FWD_TILES[-1][1:]


@lru_cache(maxsize=65536)
def fa2_fwd_block_work(seq_q: int, seq_kv: int, bm: int, bn: int, causal: bool) -> tuple[int, ...]:
    """Tiles (bm x bn score blocks) each forward thread block of one head visits, in launch order
    (m_block = blockIdx.x ascending: flash_fwd_kernel.h compute_attn, grid (num_m_block, b, h) in
    flash_fwd_launch_template.h run_flash_fwd). Causal: queries are the last seq_q keys; query
    block i visits key blocks 0 .. the one holding its last row's key (diagonal tiles whole), so
    later blocks carry more work: 1, 2, ... x kBlockM / kBlockN tiles."""
    n_q, n_kv = math.ceil(seq_q / bm), math.ceil(seq_kv / bn)
    if not causal:
        return (n_kv,) * n_q
    offset = seq_kv - seq_q
    return tuple(max(0, min(n_kv, math.ceil((offset + min((i + 1) * bm, seq_q)) / bn))) for i in range(n_q))


def fa2_uneven_mask_work(work: tuple, seq_q: int, seq_kv: int, bm: int, bn: int, causal: bool,
                         extra_tiles: float) -> tuple:
    """``work`` (tiles per forward block, :func:`fa2_fwd_block_work`) with the extra masking step of
    FlashAttention-2's causal forward at lengths no multiple of its tile. flash_fwd_kernel.h runs the
    first ceil(kBlockM / kBlockN) key blocks of each query block through its masking loop, and one
    more where Is_even_MN is false (seq_q % kBlockM or seq_kv % kBlockN), so a query block with more
    tiles than that pays one more masked step. Measured on one H100 (the session-41 mask probe,
    validation/measurements/repeat/h100_attention_maskprobe.json): at 520-576 keys the kernel takes
    1.55x (head_dim 64) and 1.34x (128) the time it takes at 640 with the same tiles, fading at long
    lengths; neither cuDNN nor the memory-efficient kernel shows it. ``extra_tiles`` (profile
    ``attention_uneven_mask_tiles``) is that step's cost beyond a plain tile's, in tiles."""
    even = seq_q % bm == 0 and seq_kv % bn == 0
    if not causal or even or extra_tiles <= 0:
        return work
    steps = -(-bm // bn)                           # masked steps of the even kernel
    return tuple(w + extra_tiles if w > steps else w for w in work)


@lru_cache(maxsize=16384)
def list_schedule(work: tuple, repeats: int, overhead: float, sms: int, per_sm: int) -> float:
    """Makespan, in SM-time units (a block of w units alone on an SM takes w + overhead), of
    ``repeats`` copies of the block sequence ``work`` handed in launch order to whichever SM frees
    one of its ``per_sm`` slots first (the GPU's block scheduler as blocks retire); the blocks
    resident on one SM share its rate equally. Equal blocks come out as waves; causal blocks,
    launched light-first, leave the heaviest for last: a tail no wave count shows. Launches longer
    than LIST_SCHEDULE_MAX_BLOCKS are taken as balanced up to their last blocks, simulated."""
    import heapq
    keep = min(repeats, max(1, LIST_SCHEDULE_MAX_BLOCKS // len(work)))
    t0 = (repeats - keep) * (sum(work) + overhead * len(work)) / sms
    state = [[t0, []] for _ in range(sms)]          # per SM: time of its state, remaining work of its blocks
    heap = [(t0, 0, i) for i in range(sms)]         # (time the SM next has a free slot, blocks on it, SM)
    heapq.heapify(heap)

    def advance(st, t):
        """Run SM state ``st`` to time t at equal shares, dropping finished blocks."""
        while st[1] and st[0] < t:
            rate = 1.0 / len(st[1])
            dt = min(t - st[0], min(st[1]) / rate)
            st[1] = [r - dt * rate for r in st[1]]
            st[0] += dt
            st[1] = [r for r in st[1] if r > 1e-12]
        st[0] = t

    def next_free(st):
        """(time a slot frees, blocks still resident then)"""
        if len(st[1]) < per_sm:
            return st[0], len(st[1])
        low = min(st[1])
        return st[0] + low * len(st[1]), sum(1 for r in st[1] if r > low + 1e-12)

    for _ in range(keep):
        for w in work:
            t, _, i = heapq.heappop(heap)                # ties: the emptiest SM first (blocks spread over SMs)
            st = state[i]
            advance(st, t)
            st[1].append(w + overhead)
            heapq.heappush(heap, (*next_free(st), i))
    end = 0.0
    for st in state:
        t, rem = st[0], sorted(st[1])               # finish what is resident
        prev = 0.0
        for k, r in enumerate(rem):
            t += (r - prev) * (len(rem) - k)
            prev = r
        end = max(end, t)
    return end


@lru_cache(maxsize=16384)
def _flash_fwd_pass(dev: DeviceModel, batch: int, heads: int, kv_heads: int, seq_q: int, seq_kv: int,
                    head_dim: int, causal: bool) -> float:
    """PyTorch's FlashAttention-2 forward kernel, seconds.

    Its own tiles (:func:`fa2_fwd_tile`: 128 x 128 at head_dim 64, 128 x 64 at 128); a grid of
    ceil(seq_q / kBlockM) x batch x heads thread blocks, m_block fastest, FA2_FWD_CTAS_PER_SM of
    them resident per SM; each block costs its tiles' tensor-core FLOPs (2 matmuls at
    ``attention_fwd_fraction`` of the bf16 peak) and exponentials, plus ``attention_tile_overhead``
    tiles of fixed work; blocks are handed to SMs as earlier ones retire (:func:`list_schedule`),
    so a causal launch, whose heaviest blocks come last, ends on a tail. HBM bytes as
    :func:`flash_attention_bytes`; the kernel takes the larger of the two."""
    cal = dev.cal
    bm, bn = fa2_fwd_tile(head_dim)
    work = fa2_uneven_mask_work(fa2_fwd_block_work(seq_q, seq_kv, bm, bn, causal), seq_q, seq_kv, bm, bn, causal,
                                cal.attention_uneven_mask_tiles)
    sms = dev.accelerator.sm_count
    slots = sms * FA2_FWD_CTAS_PER_SM
    peak = dev.accelerator.peak_flops("bf16") * dev.clock_rate("bf16")
    t_tile = 2 * 2 * bm * bn * head_dim / (peak * cal.attention_fwd_fraction) + bm * bn / dev.exp_per_s
    units = list_schedule(work, batch * heads, cal.attention_tile_overhead, sms, FA2_FWD_CTAS_PER_SM)
    compute = units * sms * t_tile               # an SM runs at 1 / sms of the whole GPU's rate
    io = flash_attention_bytes(batch, heads, kv_heads, seq_q, seq_kv, head_dim)
    return max(compute, io / dev.hbm_Bps) + cal.kernel_launch_s


@dataclass(frozen=True)
class FusedAttentionKernel:
    """The structure of one fused (IO-aware, online-softmax) attention kernel family.

    ``fwd_tiles`` / ``bwd_tiles``: ((largest head_dim, (bM, bN) non-causal, (bM, bN) causal), ...):
    a forward thread block owns bM query rows and loops over key blocks of bN; a backward block owns
    bN keys and loops over query blocks of bM (FlashAttention-2's and -3's partitioning).
    ``persistent``: a persistent kernel with a tile scheduler (blocks handed to SMs as they free up)
    instead of one launch wave after another. ``bwd_launches``: kernels of one backward (the dO·O
    row sums before, the fp32 dQ conversion after)."""

    name: str
    fwd_tiles: tuple
    bwd_tiles: tuple
    persistent: bool
    bwd_launches: int
    source: str
    # compiled specialisations by head_dim ((largest head_dim, name), ...), each with parameters of
    # its own (``<backend>_<name>_<direction>`` keys): a kernel whose head_dim is a compile-time
    # constant builds a different kernel per size (register allocation, warps), whose rates differ
    head_dim_variants: tuple = ()
    # blocks handed to SMs in launch order as earlier ones retire (list_schedule), each block's own
    # number of tiles counted, instead of equal-sized blocks in waves
    launch_ordered: bool = False
    # the softmax overlap by design (the share of the shorter of tensor-core and softmax work per tile
    # hidden under the longer) where the kernel's structure fixes it; None: fitted (attention_kernel_overlap)
    overlap: float | None = None


FUSED_KERNELS = {
    # FlashAttention-3 (Dao-AILab/flash-attention hopper/tile_size.h tile_size_fwd_sm90, bf16;
    # hopper/flash_bwd_launch_template.h run_mha_bwd_hdim*, Arch >= 90); persistent tile scheduler
    # (hopper/tile_scheduler.hpp); backward: preprocess, main, dQ postprocess kernels
    "fa3": FusedAttentionKernel(
        "fa3",
        fwd_tiles=((64, (192, 192), (192, 128)), (96, (192, 144), (192, 144)), (128, (128, 176), (128, 128)),
                   (192, (128, 128), (128, 128)), (256, (128, 80), (128, 80))),
        bwd_tiles=((64, (128, 128), (128, 128)), (96, (64, 128), (64, 128)), (128, (80, 128), (64, 128)),
                   (192, (64, 96), (64, 96)), (256, (64, 80), (64, 80))),
        persistent=True, bwd_launches=3, source="Shah et al. 2024 (FlashAttention-3); hopper/tile_size.h"),
    # cuDNN's fused flash attention (cudnn-frontend SDPA; Transformer Engine's FusedAttention
    # F16_arbitrary_seqlen): its tiles are not published; 128 x 128 forward and 64 x 128 backward are
    # assumed (FlashAttention-3's causal tiles at head_dim 128); launches in waves
    "cudnn": FusedAttentionKernel(
        "cudnn",
        fwd_tiles=((256, (128, 128), (128, 128)),),
        bwd_tiles=((256, (64, 128), (64, 128)),),
        persistent=False, bwd_launches=3, source="cuDNN SDPA; tiles assumed"),
    # PyTorch's memory-efficient attention (xFormers' CUTLASS kernel, sm80 mma.sync on Hopper):
    # forward instantiations fmha_cutlassF_bf16_aligned_64x64_rf (head_dim <= 64), 64x128_rf (<= 128),
    # 32x128_gmem (larger); backward (dispatch_cutlassB_bf16_sm80: the first listed kernel whose
    # kMaxK covers head_dim) fmha_cutlassB_bf16_aligned_64x64_k64 (head_dim <= 64), 128x128_k128
    # (<= 128), 64x64_k65536 beyond; one backward kernel (it computes the dO·O row sums itself).
    # Unlike FlashAttention-2 it keeps no score tile in registers between its MMAs
    # (mem_eff_attention/kernel_forward.h MM0/MM1, kernel_backward.h): the forward writes P to
    # shared memory (B2bGemm::accumToSmem) for PV to read back, and combines the row max / sum across
    # the warps of a row in shared memory; the backward writes exp(S - LSE) and dS = (dP - D)·P to
    # shared memory (dS twice, transposed) for the dV, dQ and dK MMAs, and read-modify-writes each
    # query block's fp32 dQ tile in a global workspace under a spin lock (GradQTempStorage,
    # AtomicLock) for every key block. That work is per score element, not per head_dim: it is what
    # makes head_dim 64 slower per FLOP than head_dim 128 (attention_kernel_score_ops, fitted)
    "efficient": FusedAttentionKernel(
        "efficient",
        fwd_tiles=((64, (64, 64), (64, 64)), (128, (64, 128), (64, 128)), (65536, (32, 128), (32, 128))),
        bwd_tiles=((64, (64, 64), (64, 64)), (128, (128, 128), (128, 128)), (65536, (64, 64), (64, 64))),
        persistent=False, bwd_launches=1, source="PyTorch aten/src/ATen/native/transformers/cuda/mem_eff_attention"),
}
# llm-foundry's Triton FlashAttention (attn_impl "triton": llmfoundry/models/layers/flash_attn_triton.py
# at 5e8666f, flash-attention v1.0.5's Triton kernel compiled by the triton-pre-mlir fork, whose code
# generator emits sm80 mma.sync, never WGMMA): forward BLOCK_M = BLOCK_N = 128 at every head_dim
# (_flash_attn_forward: num_warps 4 up to head_dim 64, else 8; num_stages 1); backward 128 x 128
# (_bwd_kernel's two autotuned configs, with and without SEQUENCE_PARALLEL: costed as the
# sequence-parallel one, a block per key block, which the autotuner picks wherever batch x heads
# leaves SMs idle); backward: _bwd_preprocess_do_o_dot, the main kernel (fp32 dQ accumulated with
# atomics) and dq.copy_ of the fp32 accumulator: three launches. BLOCK_HEADDIM is a compile-time
# constant (64 or 128), so head_dim <= 64 and <= 128 are two kernels per direction, fitted apart
# (forward: 4 warps against 8; the backward's 8 warps hold half the fp32 dK/dV accumulators at 64:
# measured, the head_dim-64 backward takes 0.30 of the head_dim-128 one's time per tile, not 0.5).
# Blocks run in launch order: the forward grid is (query block, batch x heads), query block fastest,
# so causal blocks come light first and the heaviest last (a tail, as FlashAttention-2's); the
# sequence-parallel backward's grid is (key block, batch x heads), key block fastest, so causal
# blocks come heavy first. One resident block per SM is assumed (8 warps of up to 255 registers; a
# second one at 4 warps shows in that specialisation's fitted fraction). The softmax runs in the
# same warps between the two MMAs (num_stages 1, no warp specialisation): overlap 0, not fitted.
# Fitted on H100 runs of the staged kernel under today's Triton with DISABLE_MMA_V3=1
# (validation/harness/triton_attention.py, validation/triton_fa_fit.py)
FUSED_KERNELS["triton_fa"] = FusedAttentionKernel(
    "triton_fa",
    fwd_tiles=((128, (128, 128), (128, 128)),),
    bwd_tiles=((128, (128, 128), (128, 128)),),
    persistent=False, bwd_launches=3, source="llm-foundry flash_attn_triton.py (5e8666f), triton-pre-mlir",
    head_dim_variants=((64, "d64"), (128, "d128")), launch_ordered=True, overlap=0.0)
# backends whose model is a Hopper design (WGMMA, TMA, warp specialisation), by the accelerator
# families it applies to; elsewhere they are costed as FlashAttention-2 (``flash``). Transformer
# Engine likewise prefers cuDNN's FusedAttention only on compute capability >= 9.0
# (transformer_engine/pytorch/attention/dot_product_attention/utils.py, get_attention_backend)
#
# ``triton_fa`` is bound to Hopper for another reason: its fit measures sm80 mma.sync code on a Hopper
# GPU, as a fraction of Hopper's WGMMA datasheet peak (the matmul probe of the same run: a Triton
# mma.sync matmul reaches 0.46 of that peak, WGMMA 0.74); that fraction says nothing of an Ampere GPU,
# whose datasheet peak is the mma.sync rate, so elsewhere the kernel is costed as FlashAttention-2
HOPPER_DESIGNS = {"fa3": ("nvidia-hopper",), "cudnn": ("nvidia-hopper", "nvidia-blackwell"),
                  "triton_fa": ("nvidia-hopper",)}
# kernels that never materialise the score matrix (they keep only the log-sum-exp for backward)
FUSED_ATTENTION = ("flash",) + tuple(FUSED_KERNELS)
FA3_OVERLAP_FWD = 1.0    # ping-pong of two warpgroups + intra-warpgroup overlap (Shah et al. 2024 §3.1-3.2)
FA3_OVERLAP_BWD = 0.0    # the backward has no ping-pong schedule: matmuls and exponentials in turn
FUSED_BLOCK_OVERHEAD_TILES = 1.0   # design value: a block's prologue (Q load) and epilogue (O store, rescale)


def _tile_for(table: tuple, head_dim: int, causal: bool) -> tuple[int, int]:
    for max_d, plain, masked in table:
        if head_dim <= max_d:
            return masked if causal else plain
    return table[-1][2 if causal else 1]


def fused_attention_key(backend: str, bwd: bool, head_dim: int | None = None) -> str:
    """The profile key of one fused kernel's pass: ``<backend>_<direction>``, or for a kernel with
    compiled head_dim specialisations (FusedAttentionKernel.head_dim_variants) and a head_dim,
    ``<backend>_<variant>_<direction>`` of the smallest variant that holds it."""
    direction = "bwd" if bwd else "fwd"
    variants = FUSED_KERNELS[backend].head_dim_variants if backend in FUSED_KERNELS else ()
    if head_dim is not None and variants:
        name = next((v for d, v in variants if head_dim <= d), variants[-1][1])
        return f"{backend}_{name}_{direction}"
    return f"{backend}_{direction}"


def fused_attention_params(cal: Calibration, backend: str, bwd: bool, tile: tuple[int, int] = (128, 128),
                           head_dim: int | None = None) -> tuple:
    """(tensor-core fraction of the bf16 peak, softmax overlap, per-block overhead in tiles) of one
    fused kernel's pass.

    * ``fa3`` is never fitted: its tensor cores run like a Hopper GEMM's (warp-specialised TMA
      producer, WGMMA consumers: the CUTLASS pipeline cuBLAS's large GEMMs use), so the fraction
      is the calibrated ``gemm_peak_fraction.bf16`` times the GEMM model's small-tile factor
      ((bM·bN / 128·256) ** ``gemm_small_tile_exponent``); overlap 1 forward (ping-pong), 0 backward;
      one tile of per-block overhead.
    * ``cudnn``, ``efficient`` and ``triton_fa``: ``attention_kernel_fraction``, ``attention_kernel_overlap``
      and ``attention_kernel_overhead`` under ``<backend>_fwd`` / ``<backend>_bwd`` (overlap and overhead
      may also be one ``<backend>`` value for both directions) once fitted on measurements of that
      kernel (validation/harness/attention_backends.py, triton_attention.py); a kernel compiled per
      head_dim (``head_dim_variants``) under ``<backend>_<variant>_<direction>`` for the given
      ``head_dim`` first (:func:`fused_attention_key`); a kernel whose structure fixes its overlap
      (``FusedAttentionKernel.overlap``) takes that, never a fitted one. Per direction because the two passes differ
      as FA3's do: a forward can hide its softmax under the other warpgroup's GEMMs, a backward
      (5 GEMMs, dQ accumulation) does not; a backward block also loads K and V and writes dK and dV. A calibration without
      them costs the kernel as FlashAttention-2 (:func:`attention_time` hands it to ``flash``: a
      kernel never measured is costed like the one that was); the fallbacks here (FlashAttention-2's
      fitted fractions, overlap 0, ``attention_tile_overhead``) are the fit's starting point."""
    direction = "bwd" if bwd else "fwd"
    if backend != "fa3":
        frac = cal.attention_bwd_fraction if bwd else cal.attention_fwd_fraction
        defaults = (frac, 0.0, cal.attention_tile_overhead)
    else:
        small = (tile[0] * tile[1] / (GEMM_TILES[0][0] * GEMM_TILES[0][1])) ** cal.gemm_small_tile_exponent
        defaults = (cal.gemm_fraction("bf16") * min(1.0, small), FA3_OVERLAP_BWD if bwd else FA3_OVERLAP_FWD,
                    FUSED_BLOCK_OVERHEAD_TILES)
    if backend == "fa3":
        return defaults
    # the pass's own key (its head_dim specialisation's, where the kernel has them), then the
    # direction's, then one value for the backend
    keys = (fused_attention_key(backend, bwd, head_dim), f"{backend}_{direction}", backend)

    def look(d: dict, default: float) -> float:
        return next((d[k] for k in keys if k in d), default)
    design_overlap = FUSED_KERNELS[backend].overlap if backend in FUSED_KERNELS else None
    overlap = design_overlap if design_overlap is not None else look(cal.attention_kernel_overlap, defaults[1])
    return (look(cal.attention_kernel_fraction, defaults[0]), overlap, look(cal.attention_kernel_overhead, defaults[2]))


def fused_attention_fitted(cal: Calibration, backend: str) -> bool:
    """Whether the calibration carries fitted parameters of this fused kernel."""
    return any(k == backend or k.startswith(backend + "_")
               for d in (cal.attention_kernel_fraction, cal.attention_kernel_overlap, cal.attention_kernel_overhead,
                         cal.attention_kernel_score_ops)
               for k in d)


@lru_cache(maxsize=65536)
def _pairs_per_block(n_q: int, n_kv: int, bq: int, bkv: int, seq_q: int, seq_kv: int, causal: bool,
                     by_kv: bool) -> tuple[int, int, int]:
    """(thread blocks per head, tiles per head, tiles of the busiest block) for rectangular bq x bkv
    tiles: a tile is a (query block, key block) pair a block visits. Causal: queries are the last
    seq_q positions of the keys; a pair is visited when any of its scores is kept (diagonal tiles
    cost a whole tile). ``by_kv``: blocks own key blocks (backward), else query blocks."""
    if not causal:
        return (n_kv, n_q * n_kv, n_q) if by_kv else (n_q, n_q * n_kv, n_kv)
    offset = seq_kv - seq_q
    per_q = [min(n_kv, math.ceil((offset + min((i + 1) * bq, seq_q)) / bkv)) for i in range(n_q)]  # non-decreasing
    total = sum(per_q)
    if not by_kv:
        return n_q, total, max(per_q)
    # key block j is visited by every query block i with per_q[i] > j
    busiest = max(n_q - bisect.bisect_right(per_q, j) for j in range(n_kv))
    return n_kv, total, busiest


@lru_cache(maxsize=16384)
def fused_block_work(seq_q: int, seq_kv: int, bq: int, bkv: int, causal: bool, by_kv: bool) -> tuple[int, ...]:
    """Tiles each thread block of one head visits, in launch order (block index ascending): query
    blocks (forward, :func:`fa2_fwd_block_work`: causal blocks light first), or key blocks
    (``by_kv``, a backward parallel over keys: key block j is visited by every query block holding a
    kept score of it; causal: the first key blocks are seen by the most queries, heavy first).
    Causal as everywhere here: the queries are the last seq_q keys."""
    if not by_kv:
        return fa2_fwd_block_work(seq_q, seq_kv, bq, bkv, causal)
    per_q = fa2_fwd_block_work(seq_q, seq_kv, bq, bkv, causal)          # key blocks per query block, non-decreasing
    return tuple(len(per_q) - bisect.bisect_right(per_q, j) for j in range(math.ceil(seq_kv / bkv)))


@lru_cache(maxsize=16384)
def _fused_pass(dev: DeviceModel, backend: str, batch: int, heads: int, kv_heads: int, seq_q: int, seq_kv: int,
                head_dim: int, causal: bool, bwd: bool) -> float:
    """One pass (forward, or backward with its pre/post-processing kernels) of a fused attention
    kernel of FUSED_KERNELS, seconds.

    Per tile of bM x bN scores: tensor-core time t_mm = m·2·bM·bN·d / (peak·fraction) with m = 2
    matmuls forward (QKᵀ, PV) and 5 backward (QKᵀ recomputed, dP = dO·Vᵀ, dV, dK, dQ), and
    softmax time t_exp = bM·bN / exp rate (16 SFUs per SM x SMs x clock x
    ``attention_softmax_fraction``: the same hardware rate FlashAttention-2's fit gives) plus the
    softmax's other per-score FP32 operations (forward 3.5 + d/bN, backward 4; see the code) and,
    for a kernel that stages its score tiles through shared memory (``efficient``),
    ``attention_kernel_score_ops`` more, at 128 FP32 lanes per SM per clock; the tile costs max(t_mm, t_exp) + (1 − overlap)·min(t_mm, t_exp) (overlap 0: FlashAttention-2's
    serial schedule; 1: FlashAttention-3's ping-pong hides the softmax under the other warpgroup's
    GEMMs, Shah et al. 2024 §3.1). Each thread block adds ``overhead`` tiles. Blocks run in waves
    (time = total / wave efficiency, as :func:`_flash_pass`), or, for a persistent kernel, as a
    greedy schedule bounded by max(total / SMs, the longest block), or, for a kernel whose blocks
    differ in work and are costed in launch order (``launch_ordered``), as :func:`list_schedule` of
    :func:`fused_block_work`. A kernel with head_dim specialisations takes that specialisation's
    parameters (:func:`fused_attention_key`). HBM bytes: every tensor once
    (forward: Q, K, V read, O written; backward: Q, K, V, O, dO read, dQ, dK, dV written and the
    fp32 dQ accumulator read and written): the query blocks of one head re-read its K and V, but
    from L2 (one head's K and V, 4·s·d bytes, fit the 50-60 MB L2 of a Hopper GPU up to s ~ 100k),
    since blocks of one head run together. The main kernel takes the larger of compute and IO; a
    backward of three launches (``bwd_launches``: the dO·O row sums before, the fp32 dQ conversion
    after) adds the HBM time of those two memory-bound kernels (read O and dO; read the fp32 dQ,
    write it in bf16), which run alone."""
    k = FUSED_KERNELS[backend]
    cal = dev.cal
    bq, bkv = _tile_for(k.bwd_tiles if bwd else k.fwd_tiles, head_dim, causal)
    frac, overlap, overhead = fused_attention_params(cal, backend, bwd, (bq, bkv), head_dim)
    n_q, n_kv = math.ceil(seq_q / bq), math.ceil(seq_kv / bkv)
    per_head, pairs, busiest = _pairs_per_block(n_q, n_kv, bq, bkv, seq_q, seq_kv, causal, bwd)
    bh = batch * heads
    blocks = bh * per_head
    sms = dev.accelerator.sm_count
    peak = dev.accelerator.peak_flops("bf16") * dev.clock_rate("bf16")
    t_mm = (5 if bwd else 2) * 2.0 * bq * bkv * head_dim / (peak * frac)
    # the softmax's other per-score work on the FP32 units (FP32_LANES_PER_SM per SM per clock):
    # forward: scale-and-subtract-max FMA, row max, row sum, bf16 conversion (two per instruction),
    # and the rescale of the O accumulator (d / bN multiplies per score); backward: P = exp(S - LSE)'s
    # FMA, dS = P * (dP - D) (subtract, multiply), two bf16 conversions (of P and dS)
    alu_ops = 4.0 if bwd else 3.5 + head_dim / bkv
    # a kernel that stages its score tiles through shared memory between its MMAs (``efficient``:
    # P forward; P and dS backward, and the backward's fp32 dQ read-modify-write per tile) pays that
    # per score element, whatever head_dim: attention_kernel_score_ops, fitted (0 where unset)
    alu_ops += cal.attention_kernel_score_ops.get(f"{backend}_{'bwd' if bwd else 'fwd'}", 0.0)
    alu_rate = sms * FP32_LANES_PER_SM * dev.accelerator.boost_clock_hz
    # the SFU and FP32 units run at the SM clock: under sustained load at its power-limited fraction
    clock = (cal.sustained_clock_fraction.get("bf16") or 1.0) if dev.sustained else dev.clock_fraction
    t_exp = (bq * bkv / dev.exp_per_s + bq * bkv * alu_ops / alu_rate) / clock
    t_tile = max(t_mm, t_exp) + (1.0 - overlap) * min(t_mm, t_exp)          # whole-GPU seconds per tile
    total = (bh * pairs + blocks * overhead) * t_tile
    if k.launch_ordered:
        work = fused_block_work(seq_q, seq_kv, bq, bkv, causal, bwd)
        compute = list_schedule(work, bh, overhead, sms, 1) * sms * t_tile   # an SM runs at 1 / sms of the GPU's rate
    elif k.persistent:
        compute = max(total, (busiest + overhead) * t_tile * sms)
    else:
        compute = total / (blocks / (math.ceil(blocks / sms) * sms))
    q_elems, kv_elems = batch * heads * seq_q * head_dim, batch * kv_heads * seq_kv * head_dim
    launches, serial = 1, 0.0
    if bwd:   # read Q, O, dO, write dQ (bf16) and its fp32 accumulator (read + write); K, V, dK, dV
        io = q_elems * (2 + 2 + 2 + 2 + 8) + kv_elems * (2 + 2 + 2 + 2)
        launches = k.bwd_launches
        if launches == 3:
            # the dO·O row sums (read O, dO) and the fp32 dQ conversion (read 4, write 2 bytes) are
            # kernels of their own, before and after the main one: their bytes do not overlap its
            # compute. The main kernel reads Q and dO and accumulates dQ in fp32 (read + write)
            serial = q_elems * (2 + 2 + 4 + 2) / dev.hbm_Bps
            io = q_elems * (2 + 2 + 8) + kv_elems * (2 + 2 + 2 + 2)
    else:     # read Q, K, V, write O
        io = q_elems * (2 + 2) + kv_elems * (2 + 2)
    return max(compute, io / dev.hbm_Bps) + serial + launches * cal.kernel_launch_s


def _unfused_attention_time(dev: DeviceModel, batch: int, heads: int, seq_q: int, seq_kv: int,
                            head_dim: int, direction: str) -> float:
    """Megatron-LM's unfused attention: QK^T and PV as 16-bit batched GEMMs, one fused
    scale+mask+softmax pass over the s x s scores (read 2, write 2 bytes); backward: four
    batched GEMMs and the fused softmax backward (read P and dP, write dS)."""
    bh = batch * heads
    scores = bh * seq_q * seq_kv * 2
    t_fwd = (score_gemm_time(dev, seq_q, seq_kv, head_dim, "bf16", bh) + score_gemm_time(dev, seq_q, head_dim, seq_kv, "bf16", bh)
             + memory_time(dev, 2 * scores, op="softmax"))
    t_bwd = (score_gemm_time(dev, seq_q, seq_kv, head_dim, "bf16", bh) + score_gemm_time(dev, seq_kv, head_dim, seq_q, "bf16", bh)
             + score_gemm_time(dev, seq_q, head_dim, seq_kv, "bf16", bh) + score_gemm_time(dev, seq_kv, head_dim, seq_q, "bf16", bh)
             + memory_time(dev, 3 * scores, op="softmax"))
    return {"fwd": t_fwd, "bwd": t_bwd, "fwd_bwd": t_fwd + t_bwd}[direction]


def summed_parts(parts, direction: str, *args, **kwargs) -> float:
    """Seconds of a composite attention backend in ``direction`` (``fwd``, ``bwd`` or ``fwd_bwd``): the sum of
    the (family, seconds) kernels ``parts(*args, d, **kwargs)`` lists for each direction d it covers."""
    dirs = ("fwd", "bwd") if direction == "fwd_bwd" else (direction,)
    return sum(t for d in dirs for _, t in parts(*args, d, **kwargs))


def _unfused_torch_attention_time(dev: DeviceModel, batch: int, heads: int, kv_heads: int, seq_q: int,
                                  seq_kv: int, head_dim: int, direction: str, causal: bool = True) -> float:
    """Megatron-Core's local DotProductAttention (no apex, no Transformer Engine): the sum of its
    kernels, :func:`unfused_torch_attention_parts`."""
    return summed_parts(unfused_torch_attention_parts, direction, dev, batch, heads, kv_heads, seq_q, seq_kv,
                        head_dim, causal=causal)


def unfused_torch_attention_parts(dev: DeviceModel, batch: int, heads: int, kv_heads: int, seq_q: int, seq_kv: int,
                                  head_dim: int, direction: str, causal: bool = True) -> list[tuple[str, float]]:
    """(kernel family, seconds) of each kernel Megatron-Core's DotProductAttention launches with
    FusedScaleMaskSoftmax's PyTorch fallback (megatron/core/transformer/dot_product_attention.py,
    megatron/core/fusions/fused_softmax.py forward_torch_softmax; no apex, no Transformer Engine),
    ``direction`` ``fwd`` or ``bwd``; the families are the kernel families of
    validation/kernel_reconcile.py (``small``: its ``other``). n = batch·heads·sq·skv score elements.

    Forward: GQA keys and values repeated to every head (repeat_interleave); the causal mask built
    anew each call (get_default_causal_mask: ones fp32, triu, .bool(), sq x skv once); QK^T as a
    bf16 baddbmm over the whole s x s matrix (no causal skipping); ``.float()`` (read 2, write 4
    bytes per score); ``masked_fill_`` in place (read 4, write 4; the bool mask, one s x s copy
    broadcast over batch and heads, stays in L2); fp32 softmax (read 4, write 4); ``.bfloat16()``
    (read 4, write 2); PV as a bf16 bmm.
    Backward (autograd, PyTorch's derivatives): the two GEMMs of PV; dP to fp32 (read 2, write 4);
    softmax backward, which PyTorch's CUDA softmax_backward runs as ``tmp = grad * output`` (a
    vectorized fp32 multiply: read 4, read 4, write 4) and then the row kernel (read tmp and
    output, write dS: 12 bytes); masked_fill's gradient ``grad.masked_fill(mask, 0)``, out of place,
    which ATen runs as a clone (a device-to-device memcpy: read 4, write 4) and masked_fill_ on it
    (read 4, write 4); dS to bf16 (read 4, write 2); the two GEMMs of QK^T, each scaled by the
    baddbmm's alpha (a bf16 multiply of dQ and dK); the repeated keys' and values' gradients summed
    back to kv_heads. Without a mask (``causal`` False: AttnMaskType.no_mask) FusedScaleMaskSoftmax
    skips mask_func, so neither the mask build nor masked_fill_ (nor its gradient's clone and fill) runs.

    Kernel classes (PyTorch's TensorIterator, aten/src/ATen/native/cuda/Loops.cuh): contiguous
    same-dtype kernels run vectorized (16-byte loads): ``.bfloat16()`` (bfloat16_copy_kernel,
    vectorized), the softmax-backward multiply and row kernel (float4 loads), costed at the
    calibrated vectorized copy and add fractions (memory_op_fraction copy / add, fitted on
    h200_kernels.json-style copies and adds); the memcpy at the copy fraction. Kernels that take
    the non-vectorized paths -- ``.float()`` (a dtype-converting copy: unrolled_elementwise_kernel
    with dynamic casts) and ``masked_fill_`` with a broadcast mask (a non-contiguous iterator:
    elementwise_kernel<128, 2> with offset calculators) -- at their own measured rates,
    :func:`nonvectorized_time`. The fp32 softmax forward per element (:func:`elementwise_time`), the
    scores above the causal diagonal (-10000 after the mask) at ``softmax_masked_cost``.

    ``layout_copy`` (only where the calibration's ``unfused_layout_copies`` is 1; candidate m76copy, issue #12
    session 38): the strided copies the pattern runs around its GEMMs, non-vectorized
    (``elementwise_kernel<128, 4>`` direct_copy, :func:`strided_elementwise_time`): forward the context's
    ``permute(2, 0, 1, 3).contiguous()`` (b·h·sq·d elements); backward dQ, and dK and dV unless the heads are
    grouped (their gradients then come out of the sum over the group), copied into the strided layout of
    [s, b, heads, d] storage. Kernel counts as profiled (validation/measurements/profiles/*_unfused_profile*.json)."""
    bh = batch * heads
    n = bh * seq_q * seq_kv                                   # score elements
    rows, row = bh * seq_q, seq_kv
    repeat = 0.0
    if kv_heads != heads:                                     # read kv heads, write all heads, K and V
        repeat = 2 * batch * seq_kv * head_dim * 2 * (kv_heads + heads)
    qk = score_gemm_time(dev, seq_q, seq_kv, head_dim, "bf16", bh)
    pv = score_gemm_time(dev, seq_q, head_dim, seq_kv, "bf16", bh)
    masked = 1.0 if causal else 0.0
    if direction == "fwd":
        mask_build = masked * seq_q * seq_kv * (4 + 8 + 5)    # ones (w4), triu (r4 w4), .bool() (r4 w1)
        return [("gemm", qk + pv),
                ("cast_to_fp32", cast_to_fp32_time(dev, n)),
                ("mask", masked_fill_time(dev, masked * n)),
                ("softmax_fwd", elementwise_time(dev, "softmax", rows, row, "fp32",
                                                 masked=1.0 - causal_fraction(seq_q, seq_kv, causal))),
                ("cast_to_bf16", memory_time(dev, 6.0 * n, op="copy")),
                ("small", memory_time(dev, repeat, launches=2) + memory_time(dev, mask_build, launches=3)),
                ("layout_copy", _unfused_layout_copies_time(dev, bh * seq_q * head_dim, 0.0))]
    grads = 4 * bh * head_dim * (seq_q + seq_kv)              # alpha multiply of dQ and dK (bf16: read 2, write 2)
    reduce = 2 * batch * seq_kv * head_dim * 2 * (kv_heads + heads) if kv_heads != heads else 0.0
    return [("gemm", score_gemm_time(dev, seq_q, seq_kv, head_dim, "bf16", bh) + score_gemm_time(dev, seq_kv, head_dim, seq_q, "bf16", bh)
             + score_gemm_time(dev, seq_q, head_dim, seq_kv, "bf16", bh) + score_gemm_time(dev, seq_kv, head_dim, seq_q, "bf16", bh)),
            ("cast_to_fp32", cast_to_fp32_time(dev, n)),
            ("softmax_bwd_mul", softmax_backward_kernel_time(dev, n)),
            ("softmax_bwd", softmax_backward_kernel_time(dev, n)),
            ("memcpy", fp32_clone_time(dev, masked * n)),
            ("mask", masked_fill_time(dev, masked * n)),
            ("cast_to_bf16", memory_time(dev, 6.0 * n, op="copy")),
            ("small", memory_time(dev, grads, launches=2) + memory_time(dev, reduce, launches=2)),
            ("layout_copy", _unfused_layout_copies_time(dev, bh * seq_q * head_dim,
                                                        0.0 if kv_heads != heads else 2 * bh * seq_kv * head_dim))]


def _unfused_layout_copies_time(dev: DeviceModel, q_elements: float, kv_elements: float) -> float:
    """Seconds of the local attention's strided layout copies (0 unless the calibration's
    ``unfused_layout_copies`` is on): one launch over the query-sized tensor (the context forward, dQ
    backward) and, where ``kv_elements`` > 0, two over dK and dV (:func:`strided_elementwise_time`)."""
    if not dev.cal.unfused_layout_copies:
        return 0.0
    kv = strided_elementwise_time(dev, kv_elements, launches=2) if kv_elements else 0.0
    return dev.cal.unfused_layout_copies * (strided_elementwise_time(dev, q_elements) + kv)


def _math_attention_time(dev: DeviceModel, batch: int, heads: int, kv_heads: int, seq_q: int, seq_kv: int,
                         head_dim: int, causal: bool, direction: str) -> float:
    """PyTorch's SDPA math backend: the sum of its kernels, :func:`math_attention_parts`."""
    return summed_parts(math_attention_parts, direction, dev, batch, heads, kv_heads, seq_q, seq_kv, head_dim,
                        causal=causal)


def math_attention_parts(dev: DeviceModel, batch: int, heads: int, kv_heads: int, seq_q: int, seq_kv: int,
                         head_dim: int, direction: str, causal: bool = True) -> list[tuple[str, float]]:
    """(kernel family, seconds) of each kernel PyTorch's SDPA math backend launches for bf16 inputs in the
    [b, s, h, d] storage models pass to SDPA (``q.view(b, s, h, d).transpose(1, 2)``), ``direction``
    ``fwd`` or ``bwd``; E = b·h·sq·skv score elements, Q = b·h·sq·d, Kx = b·h·skv·d (keys and values
    repeated to every query head), K = b·kv_heads·skv·d.

    Read from aten/src/ATen/native/transformers/attention.cpp ``_scaled_dot_product_attention_math``
    (torch 2.5 and later; the measurements ran 2.11) and checked kernel by kernel against a profile
    of the sweep on one H100 (validation/measurements/repeat/h100_attention_math_profile.json).
    Forward: q, k, v upcast to fp32 (``.to(kFloat)``: the unrolled dtype-converting copy, read 2 write
    4); q and kᵀ scaled by √scale (two vectorized fp32 multiplies); grouped keys and values repeated
    to every head (``repeat_interleave``, a non-vectorized copy of Kx each); the batched matmul's
    folding of the strided [b, h, s, d] views into contiguous [b·h, s, d] operands (three
    non-vectorized copies: q, kᵀ, v); QKᵀ as an fp32 (FFMA) batched GEMM writing E; with
    ``is_causal`` an sq x skv bool mask built (ones, tril, converted to a 0/−inf float mask) and added
    in place (``attn.add_(mask)``: a broadcast iterator, non-vectorized, read 4 write 4 per score);
    ``_safe_softmax``: the fp32 softmax (read 4 write 4), ``eq(-inf)`` (vectorized, read 4 write 1),
    ``all`` over each row (a reduction reading 1 byte per score) and ``where`` on the broadcast row
    flag (non-vectorized, read 4 write 4); PV as an fp32 batched GEMM; both outputs cast back to
    bf16 (the context, and the score matrix ``attn.to(origin_dtype)``, read 4 write 2 per score).
    Backward (autograd; ``_safe_softmax``'s derivative is the softmax backward): the context's
    gradient to fp32; the two GEMMs of PV; PyTorch's CUDA softmax backward, ``grad * output`` (a
    vectorized fp32 multiply: read 4, read 4, write 4) and the row kernel (read 4, read 4, write 4);
    the two GEMMs of QKᵀ; the scale's two multiplies on dQ and dK; the grouped heads' gradients
    summed back to kv_heads; dQ, dK, dV copied out of the folded layout (non-vectorized, four
    copies as profiled) and cast to bf16.

    Rates: every kernel class at the rate the profile fits for that class elsewhere -- the fp32 batched
    GEMMs on the CUDA cores by :func:`ffma_gemm_time` (its ``ffma_gemm`` constants fitted on that profile's
    GEMM kernels, validation/math42_fit.py), non-vectorized iterators by :func:`nonvectorized_time` and
    :func:`strided_elementwise_time`, the dtype-converting upcast by :func:`cast_to_fp32_time`,
    vectorized fp32 elementwise kernels at the ``add`` fraction, casts to bf16 at the ``copy``
    fraction, the softmax forward by its kernel model (:func:`elementwise_time`, causal rows'
    −inf scores at ``softmax_masked_cost`` as Megatron's −10000: an ASSUMPTION, both underflow
    exp to 0) and the row-reduction ``all`` at ``hbm_fraction``. Nothing else is fitted to math records.
    Registered on fresh draws 47 (H200) and 48 (H100), issue #12 session 42 (docs/validation.md)."""
    bh = batch * heads
    n = float(bh) * seq_q * seq_kv                     # score elements
    q, kx, k = float(bh) * seq_q * head_dim, float(bh) * seq_kv * head_dim, float(batch) * kv_heads * seq_kv * head_dim
    grouped = kv_heads != heads
    masked = 1.0 if causal else 0.0
    if direction == "fwd":
        mask_build = masked * seq_q * seq_kv * (1 + 2 + 5)   # ones (w1), tril (r1 w1), 0/-inf float mask (r1 w4)
        return [("gemm", ffma_gemm_time(dev, seq_q, seq_kv, head_dim, bh)
                 + ffma_gemm_time(dev, seq_q, head_dim, seq_kv, bh)),
                ("cast_to_fp32", cast_to_fp32_time(dev, q + 2 * k)),
                ("scale", memory_time(dev, 8.0 * (q + kx), launches=2, op="add")),
                ("layout_copy", strided_elementwise_time(dev, q + 2 * kx, launches=3)
                 + (strided_elementwise_time(dev, 2 * kx, launches=2) if grouped else 0.0)),
                ("mask", nonvectorized_time(dev, masked * 8.0 * n)
                 + (memory_time(dev, mask_build, launches=3) if causal else 0.0)),
                ("softmax_fwd", elementwise_time(dev, "softmax", bh * seq_q, seq_kv, "fp32",
                                                 masked=1.0 - causal_fraction(seq_q, seq_kv, causal))),
                ("safe_softmax", memory_time(dev, 5.0 * n, op="add") + memory_time(dev, n)
                 + nonvectorized_time(dev, 8.0 * n)),
                ("cast_to_bf16", memory_time(dev, 6.0 * (n + q), launches=2, op="copy"))]
    reduce = 4.0 * (2 * kx + 2 * k) if grouped else 0.0   # dK, dV summed over each group (read Kx, write K)
    return [("gemm", ffma_gemm_time(dev, seq_q, seq_kv, head_dim, bh)
             + ffma_gemm_time(dev, seq_kv, head_dim, seq_q, bh)
             + ffma_gemm_time(dev, seq_q, head_dim, seq_kv, bh)
             + ffma_gemm_time(dev, seq_kv, head_dim, seq_q, bh)),
            ("cast_to_fp32", cast_to_fp32_time(dev, q)),
            ("softmax_bwd_mul", softmax_backward_kernel_time(dev, n)),
            ("softmax_bwd", softmax_backward_kernel_time(dev, n)),
            ("scale", memory_time(dev, 8.0 * (q + kx), launches=2, op="add")),
            ("layout_copy", strided_elementwise_time(dev, q + 3 * kx if not grouped else q + kx, launches=4)),
            ("cast_to_bf16", memory_time(dev, 6.0 * (q + 2 * k), launches=3, op="copy")),
            ("small", memory_time(dev, reduce, launches=2))]


def nonvectorized_time(dev: DeviceModel, nbytes: float, cast: bool = False, launches: int = 1) -> float:
    """Seconds to stream ``nbytes`` (reads + writes) through a PyTorch TensorIterator kernel that
    cannot take the vectorized path (aten/src/ATen/native/cuda/CUDALoops.cuh): a broadcast or
    strided iterator (``elementwise_kernel<128, N>`` with offset calculators: ``masked_fill_`` with
    an [s, s] mask over [b·h, s, s] scores) or a mixed-dtype one (``unrolled_elementwise_kernel``:
    fp32 ``main_grad.add_(bf16 grad)``), at ``memory_op_fraction["nonvectorized"]``; a
    dtype-converting copy to a wider dtype (``.float()`` of bf16: unrolled, dynamic casts), ``cast``,
    at ``memory_op_fraction["cast_unrolled"]``. Both fitted on the ``torch_paths`` kernel suite
    (validation/harness/torch_paths.py); a GPU whose profile lacks them uses ``hbm_fraction``."""
    return memory_time(dev, nbytes, launches, op="cast_unrolled" if cast else "nonvectorized")


# bytes per element of the kernel memory_op_fraction["nonvectorized"] was fitted on (torch_paths
# masked_fill_broadcast: read 4, write 4), which turns that fraction into an element rate
NONVECTORIZED_FIT_BYTES = 8.0


def strided_elementwise_time(dev: DeviceModel, elements: float, launches: int = 1) -> float:
    """Seconds of PyTorch TensorIterator kernels on the non-vectorized path (``elementwise_kernel<128,
    4>`` with offset calculators: an input that is a strided view, such as a ``chunk`` half or Q/K
    sliced out of the fused QKV output) over ``elements`` elements in all, at the element rate the
    non-vectorized path sustains: the calibrated ``memory_op_fraction["nonvectorized"]`` re-expressed
    per element of the fp32 ``masked_fill_`` it was fitted on (NONVECTORIZED_FIT_BYTES). Measured:
    such kernels run at about one rate in *elements*, not bytes, whatever the element size (on one
    H200: fp32 masked_fill_ 347 and bf16->fp32 ``.float()`` 360 G elements/s alone; in the traced
    Megatron-local steps bf16 silu on a chunk half 356, silu backward 306, RoPE's strided multiplies
    343 G elements/s), so 2-byte kernels stream half the bytes per second 4-byte ones do. Floored by
    their bf16 bytes (read 2, write 2 per element) at the generic memory-bound fraction."""
    if elements <= 0:
        return 0.0
    issue = nonvectorized_time(dev, NONVECTORIZED_FIT_BYTES * elements, launches=0)
    return max(issue, 4.0 * elements / dev.hbm_Bps) + launches * memory_fixed_s(dev.cal)


# HBM bytes per output element of Megatron's eager SwiGLU (eager_swiglu_time's kernels), forward (silu r2 w2,
# product r4 w2) and backward (two products r4 w2 each, silu's backward r4 w2, the chunk's gradient
# r4 w4): what the step power model's memory activity counts
EAGER_SWIGLU_BYTES = {False: 10.0, True: 26.0}


def eager_swiglu_time(dev: DeviceModel, tokens: int, ffn: int, backward: bool = False) -> float:
    """Seconds of SwiGLU as Megatron-Core's MLP runs it without fused extensions (megatron/core/
    transformer/mlp.py ``glu``: ``x0, x1 = torch.chunk(x, 2, -1); silu(x0) * x1``, bf16) over
    ``tokens`` x ``ffn`` outputs. Forward: silu of the strided half x0 (non-vectorized:
    :func:`strided_elementwise_time`), the product (vectorized, read 2 + 2, write 2, at the ``add``
    fraction). Backward (autograd): grad·x1 and grad·silu(x0) (vectorized, as the product), silu's
    backward on the strided x0 (non-vectorized), and the chunk's gradient, both halves copied into
    the [tokens, 2·ffn] input gradient (CatArrayBatchedCopy: read 2, write 2 per element of it, at
    the copy fraction). Kernels as profiled in profiles/h200_plan_gemmtrace.json."""
    n = float(tokens) * ffn
    product = memory_time(dev, 6.0 * n, op="add")
    if not backward:
        return strided_elementwise_time(dev, n) + product
    return strided_elementwise_time(dev, n) + 2 * product + memory_time(dev, 8.0 * n, op="copy")


def masked_fill_time(dev: DeviceModel, scores: float) -> float:
    """Seconds of ``masked_fill_`` of ``scores`` fp32 elements in place by a broadcast bool mask
    (read 4, write 4 bytes each; the mask stays in L2), on the non-vectorized path."""
    return nonvectorized_time(dev, 8.0 * scores)


def cast_to_fp32_time(dev: DeviceModel, elements: float) -> float:
    """Seconds of ``.float()`` of ``elements`` bf16 values (read 2, write 4 bytes each), unrolled cast path."""
    return nonvectorized_time(dev, 6.0 * elements, cast=True)


def mixed_add_time(dev: DeviceModel, elements: float) -> float:
    """Seconds of an fp32 ``a.add_(b)`` with b bf16 over ``elements`` (read 4 + 2, write 4 bytes each):
    Megatron DDP's ``main_grad.add_(grad)``, on the non-vectorized (unrolled, mixed-dtype) path."""
    return nonvectorized_time(dev, 10.0 * elements)


def fp32_clone_time(dev: DeviceModel, elements: float) -> float:
    """Seconds of cloning ``elements`` fp32 values (a device-to-device copy: read 4, write 4 bytes each)."""
    return memory_time(dev, 8.0 * elements, op="copy")


def softmax_backward_kernel_time(dev: DeviceModel, elements: float, dtype: str = "fp32") -> float:
    """Seconds of one of the two kernels PyTorch's CUDA softmax backward runs over ``elements``
    (``grad * output``, then the row kernel): three passes of ``dtype`` each, vectorized, at the
    calibrated ``add`` fraction."""
    return memory_time(dev, 3.0 * DTYPE_BYTES[dtype] * elements, op="add")


def masked_softmax_factor(cal: Calibration, masked: float, kernel: str | None = None) -> float:
    """Factor on the row work of PyTorch's fp32 softmax forward when a fraction ``masked`` of its
    scores holds the mask value (-10000): 1 + masked·(c − 1), c the ``kernel``'s entry of
    ``softmax_masked_cost_by_kernel`` where the profile has one (issue #12 session 37, candidate
    membound76), else ``softmax_masked_cost``. Measured, not derived: on one H200
    (h200_instep_conditions.json) causally masked rows (masked ≈ ½) of 2048, 4096 and 8192 fp32
    scores ran 23%, 20% and 17% longer than N(0, 1) rows of the same shape, rows of 1024 (bound by
    HBM) 7%; the data-independent kernels beside it (.float(), masked_fill_, the softmax backward)
    did not change. At 16 random grid shapes per GPU with N(0, 1) twins (membound_random74/75) the
    warp kernel's rows ran 17-27% (H200) and 4-29% (H100) longer, the register kernels' 16-19% and
    9-18%: the cost differs by kernel. The mechanism inside the kernel is not isolated (the exponent
    of a masked score, -10000 minus the row's max, is far below expf's range, where its result
    underflows to 0)."""
    cost = cal.softmax_masked_cost_by_kernel.get(kernel, cal.softmax_masked_cost) if kernel else cal.softmax_masked_cost
    return 1.0 + masked * (cost - 1.0)


def memory_fixed_s(cal: Calibration) -> float:
    """Fixed seconds of one memory-bound kernel (elementwise, copy, norm, softmax) as CUDA events
    around it see it: ``memory_kernel_fixed_s`` where the profile fits it, else ``kernel_launch_s``
    (the one fixed cost every kernel family shared before issue #12 session 22). Events recorded
    on the stream just before and after the kernel (validation/harness/common.py time_fn, the
    GPU still busy with the L2 flush when the host issues them) time the device side only: the
    launch as the GPU front end runs it, the first loads' latency, the last block's tail; on
    H200 / H100 the smallest copies and GELUs of the random draws take 4.5 / 4.9 us where the
    joint fit of every kernel family put ``kernel_launch_s`` at 6.37 / 5.59 us."""
    return cal.memory_kernel_fixed_s or cal.kernel_launch_s


def memory_time(dev: DeviceModel, nbytes: float, launches: int = 1, op: str | None = None) -> float:
    """Time to stream ``nbytes`` (reads + writes) through HBM, plus ``launches`` fixed costs of a
    memory-bound kernel (:func:`memory_fixed_s`), seconds; ``op`` selects the kernel family's
    calibrated bandwidth fraction."""
    if nbytes <= 0:
        return 0.0
    frac = dev.cal.memory_op_fraction.get(op, dev.cal.hbm_fraction) if op else dev.cal.hbm_fraction
    return nbytes / (dev.accelerator.hbm_bandwidth_Bps * frac) + launches * memory_fixed_s(dev.cal)


def memcpy_time(dev: DeviceModel, nbytes: float) -> float:
    """Seconds of PyTorch's ``dst.copy_(src)`` of a contiguous tensor of the same dtype on one GPU
    (``nbytes`` read + written): aten/src/ATen/native/cuda/Copy.cu copy_device_to_device finds it
    ``memcpy_eligible`` (same dtype, conj and neg bits, contiguous after coalescing) and issues one
    cudaMemcpyAsync device-to-device instead of a TensorIterator kernel (the casts and strided
    copies keep :func:`memory_time` with ``op="copy"``). The bytes move at the ``copy`` fraction;
    the fixed cost is ``memory_op_fixed_s["copy"]`` where the profile fits it (the driver's copy
    kernel: no TensorIterator offset calculator or dtype dispatch, its own launch path), else
    :func:`memory_fixed_s` as before (issue #12 session 23: the smallest copies of the random draws
    take 4.3-4.6 / 4.7-4.9 us on H200 / H100, below the 5.15 / 5.14 us fixed cost of the
    elementwise kernels)."""
    if nbytes <= 0:
        return 0.0
    fixed = dev.cal.memory_op_fixed_s.get("copy", memory_fixed_s(dev.cal))
    return memory_time(dev, nbytes, launches=0, op="copy") + fixed


# PyTorch's LayerNorm and RMSNorm forward over the last dimension (aten/src/ATen/native/cuda/
# layer_norm_kernel.cu, vectorized_layer_norm_kernel; since torch 2.8 F.rms_norm on CUDA runs
# _fused_rms_norm, the same kernel with a sum of squares in place of Welford's update): one block of
# 128 threads per row, loads of 4-element vectors; a first pass reads the row and reduces it, a
# block-wide reduction follows, a second pass reads the row again and writes the output.
NORM_KINDS = ("layernorm", "rmsnorm")
NORM_BLOCK_THREADS = 128         # num_threads() of aten/src/ATen/native/cuda/thread_constants.h (CUDA)
NORM_VECTOR_ELEMENTS = 4         # vec_size of layer_norm_kernel.cu
NORM_BLOCKS_PER_SM = 16          # resident 128-thread blocks per SM: Hopper's 2048 threads per SM
# The HBM-bound and load-latency-bound rates combine as a power mean of this order (a soft knee: rows
# near it are partly both); 2 and 4 fit alike on the fit data, 2 chosen
NORM_COMBINE_ORDER = 2.0
# Starting values of a fit, and the values of a key a profile leaves out
NORM_FORWARD_START = {"fraction": 0.85, "reread_from_bytes": 8192.0, "reread_span_bytes": 8192.0,
                      "rmsnorm_load_latency_s": 0.3e-6, "layernorm_load_latency_s": 0.3e-6,
                      "rmsnorm_row_s": 0.0, "layernorm_row_s": 1.0e-6, "whole_waves": 0.0}


def norm_reread_fraction(nf: dict, row_bytes: float) -> float:
    """Fraction of a row's second read that comes from HBM rather than from on-chip caches, in [0, 1]:
    0 up to ``reread_from_bytes`` per row, rising linearly to 1 over ``reread_span_bytes`` (rows in
    flight x row bytes outgrow the caches). Fitted per GPU; the mechanism is inferred from rates, not
    isolated (h100/h200 kernels and row_kernels files: up to 25% lower rate past ~4-6 KiB per row)."""
    span = max(nf["reread_span_bytes"], 1.0)
    return min(max((row_bytes - nf["reread_from_bytes"]) / span, 0.0), 1.0)


def norm_forward_time(dev: DeviceModel, op: str, rows: int, row: int, dtype: str) -> float:
    """Seconds of PyTorch's LayerNorm or RMSNorm forward (``op``) over ``rows`` rows of ``row``
    elements of ``dtype``, with the profile's ``norm_forward`` parameters. The row is read twice (the
    second read from HBM by :func:`norm_reread_fraction`) and written once; those bytes move at the
    power mean (order NORM_COMBINE_ORDER) of two rates: ``fraction`` of HBM bandwidth, and Little's
    law over the loads in flight, min(rows, SMs x NORM_BLOCKS_PER_SM) resident blocks x 128 threads
    x one 4-element vector each per ``<op>_load_latency_s`` (the loaded latency over the loads a
    thread keeps in flight: fitted). Each wave of resident blocks adds ``<op>_row_s`` (the block's
    reductions: Welford for LayerNorm), plus one kernel launch. Fitted on h100/h200 kernels and
    row_kernels records (docs/measurements.md, "LayerNorm and RMSNorm")."""
    nf = {**NORM_FORWARD_START, **dev.cal.norm_forward}
    a = dev.accelerator
    size = DTYPE_BYTES[dtype]
    traffic = float(rows) * row * size * (2.0 + norm_reread_fraction(nf, row * size))
    slots = a.sm_count * NORM_BLOCKS_PER_SM
    in_flight = min(rows, slots) * NORM_BLOCK_THREADS * NORM_VECTOR_ELEMENTS * size
    k = NORM_COMBINE_ORDER

    def seconds_per_byte(flight: float) -> float:
        return ((1.0 / (a.hbm_bandwidth_Bps * nf["fraction"])) ** k
                + (nf[f"{op}_load_latency_s"] / flight) ** k) ** (1.0 / k)

    wave_s = nf[f"{op}_row_s"]
    if nf["whole_waves"] and rows > slots:
        # Little's law per wave of resident blocks (issue #12 session 23): the grid of ``rows``
        # blocks runs as floor(rows / slots) full waves and one tail of the remaining blocks; the
        # tail keeps only its own blocks' loads in flight (a latency-bound block takes as long
        # however few run beside it) and pays a whole wave's ``<op>_row_s``
        full, tail = divmod(rows, slots)
        per_row = traffic / rows
        body = full * slots * per_row * seconds_per_byte(in_flight)
        if tail:
            body += tail * per_row * seconds_per_byte(tail * NORM_BLOCK_THREADS * NORM_VECTOR_ELEMENTS * size)
        return body + (full + (1 if tail else 0)) * wave_s + memory_fixed_s(dev.cal)
    waves = max(1.0, rows / slots)
    return traffic * seconds_per_byte(in_flight) + waves * wave_s + memory_fixed_s(dev.cal)


# PyTorch's softmax forward over the last dimension (aten/src/ATen/native/cuda/SoftMax.cu,
# host_softmax, torch 2.4 on): rows of at most 2048 elements and 8 KiB run softmax_warp_forward
# (PersistentSoftmax.cuh: one warp per row, the row in registers); longer rows one thread block
# of min(row, 1024) threads per row (SoftMaxForward_getBlockSize): cunn_SoftMaxForwardReg while
# ceil(row / threads) < 10 (each thread keeps its elements in registers, one scalar load and one
# scalar store per element), else cunn_SoftMaxForwardSmem while the row fits the 48 KiB of shared
# memory a block may take and divides into 16-byte vectors (vector loads, the row cached in
# shared memory), else cunn_SoftMaxForward (vector loads, three passes over the row in memory).
SOFTMAX_KERNELS = ("warp", "reg", "reg_wide", "smem", "plain")
WARP_SOFTMAX_MAX_ROW = 2048
WARP_SOFTMAX_MAX_ROW_BYTES = 8192
SOFTMAX_MAX_BLOCK_THREADS = 1024
SOFTMAX_MAX_REGISTERS = 10
SHARED_MEM_PER_BLOCK = 48 * 1024   # bytes a block may take without opting in (CUDA, sm_70 on)
# From this register count on, cunn_SoftMaxForwardReg runs ~1.2x slower per register slot on H100
# and H200 (rows of 7168-9216 vs 3072-6144 in h100/h200_row_kernels.json, bf16 and fp32 alike):
# consistent with one 1024-thread block per SM instead of two once a thread holds more than 32
# registers (65536 per SM); the register counts themselves are not read from the binary
SOFTMAX_REG_WIDE_FROM = 7


def softmax_block_threads(row: int) -> int:
    """Threads of the block PyTorch's block-per-row softmax forward gives a row of ``row`` elements:
    min(row, 1024) rounded up to whole warps (SoftMaxForward_getBlockSize)."""
    return min(SOFTMAX_MAX_BLOCK_THREADS, -(-row // 32) * 32)


def torch_softmax_kernel(row: int, dtype: str) -> str:
    """Which of PyTorch's CUDA softmax forward kernels runs rows of ``row`` elements of ``dtype``
    (output of the same dtype): ``warp``, ``reg`` (``reg_wide`` from SOFTMAX_REG_WIDE_FROM registers
    per thread on), ``smem`` or ``plain`` (SOFTMAX_KERNELS)."""
    size = DTYPE_BYTES[dtype]
    if row <= WARP_SOFTMAX_MAX_ROW and row * size <= WARP_SOFTMAX_MAX_ROW_BYTES:
        return "warp"
    threads = softmax_block_threads(row)
    registers = -(-row // threads)
    if registers < SOFTMAX_MAX_REGISTERS:
        return "reg_wide" if registers >= SOFTMAX_REG_WIDE_FROM else "reg"
    reduction_bytes = threads // 32 * 4
    if row * size < SHARED_MEM_PER_BLOCK - reduction_bytes and row % max(1, int(16 // size)) == 0:
        return "smem"
    return "plain"


SOFTMAX_ELEMENT_RATE_KEY = {"plain": "smem"}   # not measured: costed as the shared-memory kernel


def softmax_rate_key(rates: dict, kernel: str, dtype: str = "bf16") -> str:
    """The ``softmax_elements_per_cycle`` entry a block kernel's rows of ``dtype`` run at: the kernel's own
    (``plain`` takes ``smem``'s), or its ``<key>_fp32`` entry for fp32 rows where the profile has one (issue #12
    session 36, candidate membound68: fp32 rows move twice the bytes per element through the load path and
    ran 4-28% slower than the bf16 rates give, h100/h200_row_kernels.json, membound_random68/69)."""
    key = SOFTMAX_ELEMENT_RATE_KEY.get(kernel, kernel)
    return f"{key}_fp32" if dtype == "fp32" and f"{key}_fp32" in rates else key


def softmax_element_rate(dev: DeviceModel, kernel: str, dtype: str = "bf16") -> float:
    """Elements per second a block-per-row softmax kernel (``reg``, ``reg_wide``, ``smem``; ``plain`` takes
    ``smem``'s) sustains with the GPU full of rows: SMs x boost clock x
    ``softmax_elements_per_cycle[kernel]`` (elements per SM per cycle, fitted). These kernels are
    bound by the SMs, not by HBM: H100 and H200 (132 SMs at 1.98 GHz, 3.35 vs 4.8 TB/s) run them at
    the same rate (h100_kernels.json, h200_kernels.json: 4096- and 8192-element rows ~260-320 G
    elements/s, 12288 and 16384 ~480-560 G)."""
    rates = dev.cal.softmax_elements_per_cycle
    per_cycle = rates[softmax_rate_key(rates, kernel, dtype)]
    a = dev.accelerator
    return a.sm_count * a.boost_clock_hz * per_cycle


def softmax_forward_time(dev: DeviceModel, rows: int, row: int, dtype: str, masked: float = 0.0) -> float:
    """Seconds of PyTorch's softmax forward over ``rows`` rows of ``row`` elements of ``dtype``
    (:func:`torch_softmax_kernel` picks the kernel), per element whatever the dtype: every kernel
    is bound by the SMs' work per element, not by bytes (fp32 rows cost what bf16 rows of as many
    elements cost, torch_paths.json), except where the profile has fp32 entries of its own
    (:func:`softmax_rate_key`, ``softmax_warp_cycles["fp32"]``; candidate membound68). The warp kernel
    costs bf16 rows in SM cycles where the profile fits ``softmax_warp_cycles``
    (:func:`softmax_warp_time`), else, and for fp32 rows, its elements
    as bf16 bytes (read + write) at the calibrated ``softmax`` fraction of HBM; the block kernels run at their element
    rate (:func:`softmax_element_rate`), the register kernel over the row padded to its register
    count (each of its 1024 threads steps through ``ceil(row / 1024)`` slots, predicated off past
    the row's end); every kernel is floored by streaming its bytes once each way at the vectorized
    copy rate (the global-memory kernel's second and third reads of a row hit on-chip caches). A
    fraction ``masked`` of fp32 scores set to -10000 by an attention mask costs the row work
    ``softmax_masked_cost`` times per score (:func:`masked_softmax_factor`; measured on fp32 rows,
    the dtype Megatron-Core's local attention runs its softmax in)."""
    kernel = torch_softmax_kernel(row, dtype)
    elements = float(rows) * row
    factor = masked_softmax_factor(dev.cal, masked, kernel) if dtype == "fp32" else 1.0   # measured on fp32 rows only
    stream = memory_time(dev, elements * DTYPE_BYTES[dtype] * 2, op="copy")
    if kernel == "warp":
        cycles = dev.cal.softmax_warp_cycles      # fitted on bf16 rows (session 22); fp32 rows where it has "fp32"
        if cycles and (dtype == "bf16" or (dtype == "fp32" and "fp32" in cycles)):
            return max(softmax_warp_time(dev, rows, row, factor, dtype) + memory_fixed_s(dev.cal), stream)
        work = memory_time(dev, elements * DTYPE_BYTES["bf16"] * ELEMENTWISE_PASSES["softmax"] * factor, op="softmax")
        return max(work, stream)
    if kernel.startswith("reg") and dev.cal.softmax_reg_cycles:      # candidate membound78 (issue #12 session 39)
        return max(softmax_reg_time(dev, kernel, rows, row, factor, dtype) + memory_fixed_s(dev.cal), stream)
    if kernel.startswith("reg"):
        threads = softmax_block_threads(row)
        elements = float(rows) * -(-row // threads) * threads
    elif dev.cal.softmax_wave_cycles:       # a profile fitted with waves (session 21)
        return max(softmax_block_waves_time(dev, kernel, rows, row, factor, dtype) + memory_fixed_s(dev.cal)
                   + softmax_plain_reread_s(dev, kernel, rows, row, dtype), stream)
    work = elements / softmax_element_rate(dev, kernel, dtype) * factor + memory_fixed_s(dev.cal)
    return max(work, stream)


# rows longer than this run softmax_warp_forward with 64 elements per thread (WARP_ITERATIONS =
# next_pow2(row) / 32), their own rate in softmax_warp_cycles ("element_wide")
WARP_SOFTMAX_WIDE_FROM = 1025


def softmax_warp_time(dev: DeviceModel, rows: int, row: int, factor: float = 1.0, dtype: str = "bf16") -> float:
    """Seconds of PyTorch's one-warp-per-row softmax forward (aten/src/ATen/native/cuda/
    PersistentSoftmax.cuh softmax_warp_forward, rows of at most 2048 elements) beyond its fixed
    cost, as SM cycles at the boost clock: ``softmax_warp_cycles`` ``kernel`` once (the first rows'
    load latency before any SM streams), plus per SM rows / SMs x (``row`` + row x ``element``)
    cycles, ``element_wide`` in place of ``element`` for rows of WARP_SOFTMAX_WIDE_FROM elements
    on; ``factor`` scales the row work (masked fp32 scores). The mechanism: each warp holds its
    whole row in registers, WARP_ITERATIONS = next_pow2(row) / 32 values per thread, loads it,
    reduces max and sum by warp shuffles and writes it; 128-thread blocks of 4 rows. The kernel is
    bound by the SMs, not by HBM: bf16 rows run at ~400 (H100) and ~450 (H200) G elements/s over
    1025-2048 elements and ~500-670 over 1024 where the two GPUs' HBM differ 1.43x
    (h100/h200_kernels.json, row_kernels.json, membound_random40/41.json); rows with 64 register
    slots per thread cost more per element than rows with 32 (fewer warps resident per SM to hide
    the load latency: register-limited occupancy, inferred from the rates, not read from the
    binary). Fitted per GPU by validation/membound_fit.py on bf16 rows, and used for bf16 rows only:
    fp32 rows (Megatron-Core's local attention scores, masked) keep the bytes form their masked cost
    was fitted with, bound by streaming their 8 bytes per element.

    ``latency`` (SM cycles per element of the row; issue #12 session 24, candidate membound47, absent:
    0) adds ``latency`` x ``row`` cycles once: the time one warp takes over its own row, which no
    number of SMs shortens (the last warps to start still pass over their whole row: load it
    element by element, WARP_ITERATIONS = next_pow2(row) / 32 values per lane, reduce, divide and
    store it). The grid's first rows and last rows pay it, not every row, so it stands in for the
    constant ``kernel`` term (which the membound47 fit takes to ~0): the few-row grids of the random
    draws take ~4.5-5 ns per element of the row whatever their count (H100 and H200 alike: 258 x
    1424 6.4 us, 604 x 1760 8.8 us, 1024 x 2048 10.5 us above the fixed cost on H100), where the
    constant form left rows of >1024 elements 15-25% short and rows of ~500-650 elements 10-23% long
    (membound_random40-46). The cycles per element are a fit (~6.9 on both GPUs), not read from
    the binary.

    ``fp32`` (issue #12 session 36, candidate membound68; absent: fp32 rows keep the bytes form) scales the
    per-element cycles (``element`` / ``element_wide`` and ``latency``) of fp32 rows: each lane loads and
    stores 4-byte elements, twice a bf16 row's bytes per element through the load path, and fp32 rows of few
    rows ran 12-41% slower than the bytes form gives (membound_random68/69)."""
    c = dev.cal.softmax_warp_cycles
    a = dev.accelerator
    scale = c["fp32"] if dtype == "fp32" else 1.0
    per_element = (c["element_wide"] if row >= WARP_SOFTMAX_WIDE_FROM else c["element"]) * scale
    cycles = c["kernel"] + float(rows) / a.sm_count * (c["row"] + row * per_element) * factor
    # issue #12 session 24 (candidate membound47): one warp's own pass over its row, ``latency`` SM cycles
    # per element of the row, paid once on top of the SMs' throughput (absent: 0, the committed model)
    cycles += c.get("latency", 0.0) * scale * row * factor
    return cycles / a.boost_clock_hz


def torch_silu_mul_time(dev: DeviceModel, tokens: int, hidden: int, dtype: str = "bf16") -> float:
    """Seconds of ``F.silu(x) * y`` as eager PyTorch runs it over [tokens, hidden] tensors (the
    kernel suite's ``silu_mul``, validation/harness/kernels.py bench_elem): two vectorized
    kernels, silu (read x, write s) at ``memory_op_fraction["silu"]`` with the fixed cost of a
    memory-bound kernel (:func:`memory_fixed_s`), and the product (read s and y, write the output)
    at the ``add`` fraction with ``memory_kernel_chained_s``: the fixed time a kernel queued right
    behind another adds inside the same pair of CUDA events (its launch overlaps the first kernel;
    its first loads' latency and tail remain). Measured: the smallest silu_mul records take
    8.1 / 9.0 us on H200 / H100 where one GELU of their size takes ~4.8 / ~5.2 us. The fused
    SwiGLU of a training step (simulator.lowering ``silu_mul``) stays one kernel at the
    ``silu_mul`` fraction."""
    n = float(tokens) * hidden * DTYPE_BYTES[dtype]
    return (memory_time(dev, 2.0 * n, op="silu") + memory_time(dev, 3.0 * n, launches=0, op="add")
            + dev.cal.memory_kernel_chained_s)


def softmax_reg_time(dev: DeviceModel, kernel: str, rows: int, row: int, factor: float = 1.0,
                     dtype: str = "bf16") -> float:
    """Seconds of PyTorch's register softmax forward (``reg`` / ``reg_wide``: one block of
    softmax_block_threads(row) threads per row, each thread holding ``slots`` = ceil(row / threads)
    values of it) over ``rows`` rows, beyond its fixed cost, as SM cycles at the boost clock: whole
    waves of SMs x (2048 // threads) blocks, each wave ``softmax_reg_cycles["<kernel>_wave"]`` cycles
    (a row's load latency and its two block-wide reductions, max and sum, paid once per wave) plus, per
    resident block, ``<kernel>_element`` cycles per element of the row and ``<kernel>_slot`` cycles per
    register slot; ``fp32`` (absent: 1) scales the element cycles of fp32 rows; ``factor`` scales the
    element and slot work (masked scores). Why (issue #12 session 39, candidate membound78): the
    committed form charges the row padded to whole slots (slots x threads elements at one rate), so
    rows just past a slot boundary cost as much as the full slot; on the development draws
    (membound_random40-77, bf16 and fp32 alike) rows of 10k+ take per SM ~1250 ns at 2.2k
    elements, rising ~0.16-0.25 ns per element within a slot count and ~100 ns per slot across a
    boundary (~500 ns per row of latency left at zero elements), and the padded form left rows with
    15-25% of their last slot empty 10-23% slow on both GPUs. The predicated-off slots cost their
    issue slots, not their loads. Cycles fitted (validation/membound78_fit.py), not read from the binary."""
    c = dev.cal.softmax_reg_cycles
    a = dev.accelerator
    threads = softmax_block_threads(row)
    slots = -(-row // threads)
    per_sm = max(1, 2048 // threads)
    waves = -(-rows // (a.sm_count * per_sm))
    element = c[f"{kernel}_element"] * (c.get("fp32", 1.0) if dtype == "fp32" else 1.0)
    block = (element * row + c[f"{kernel}_slot"] * slots) * factor
    return waves * (c[f"{kernel}_wave"] + per_sm * block) / a.boost_clock_hz


def softmax_plain_reread_s(dev: DeviceModel, kernel: str, rows: int, row: int, dtype: str) -> float:
    """Seconds PyTorch's global-memory softmax forward (``plain``: cunn_SoftMaxForward, rows too long for
    shared memory) spends re-reading rows from HBM: it reads each row three times (max, sum of
    exponentials, then the output pass), the second and third from on-chip caches while the resident
    blocks' rows fit there; ``softmax_plain_reread["passes"]`` such passes x the fraction of a row
    coming back from HBM (:func:`norm_reread_fraction` of the row's bytes with the entry's
    ``reread_from_bytes`` / ``reread_span_bytes``) x the rows' bytes at the achieved HBM rate. 0 for other
    kernels and where the profile has no entry (the committed profiles). Why (issue #12 session 39,
    candidate membound78): fp32 rows of 23-32k elements (92-128 KB per row, two resident 1024-thread blocks
    per SM: 184-256 KB against the SM's 256 KB of L1 and shared memory) ran 10-35% slower than the
    shared-memory rate gives on the H100 (membound_random69-77; H200 16-18% past ~30k), shorter rows and
    every bf16 row (at most 64 KB) within a few percent. Inferred from rates, fitted
    (validation/membound78_fit.py), not isolated by counters."""
    rr = dev.cal.softmax_plain_reread
    if kernel != "plain" or not rr:
        return 0.0
    row_bytes = float(row) * DTYPE_BYTES[dtype]
    return rr["passes"] * norm_reread_fraction(rr, row_bytes) * rows * row_bytes / dev.hbm_Bps


def softmax_block_waves_time(dev: DeviceModel, kernel: str, rows: int, row: int, factor: float = 1.0,
                             dtype: str = "bf16") -> float:
    """Seconds of PyTorch's shared-memory or global-memory softmax forward (one block of
    softmax_block_threads(row) threads per row, 2048 // threads blocks resident per SM) over
    ``rows`` rows: whole waves of SMs x blocks rows, each ``softmax_wave_cycles`` fixed cycles (block
    set-up, the first load's latency, the max and sum block reductions) plus the wave's elements per
    SM at ``softmax_elements_per_cycle``, at the boost clock; ``factor`` scales the element work
    (masked scores). Used where the profile fitted ``softmax_wave_cycles`` (a profile without it
    keeps the element rate its ``smem`` rate was fitted with). With no fixed cycles and whole waves
    it is the element rate alone. Where the profile has ``softmax_elements_per_cycle["scalar"]``
    (issue #12 session 24, candidate membound47) the global-memory kernel (``plain``) runs the
    scalar epilogue of its row (:func:`softmax_scalar_tail` of ``dtype``) at that rate and the rest at
    the ``smem`` rate: rows of 24.6-32K bf16 elements with 600-7500 such elements ran 10-27% slower
    than the shared-memory rate gives on H100 / H200 (membound_random42-46), rows of 24576 and 32768
    (none) within a few percent (row_kernels)."""
    a = dev.accelerator
    per_sm = max(1, 2048 // softmax_block_threads(row))
    waves = -(-rows // (a.sm_count * per_sm))
    rates = dev.cal.softmax_elements_per_cycle
    per_cycle = rates[softmax_rate_key(rates, kernel, dtype)]
    if kernel == "plain" and "scalar" in rates:
        # issue #12 session 24 (candidate membound47): cunn_SoftMaxForward's scalar epilogue
        tail = softmax_scalar_tail(row, DTYPE_BYTES[dtype], softmax_block_threads(row))
        work = (row - tail) / per_cycle + tail / rates["scalar"]
    else:
        work = row / per_cycle
    cycles = dev.cal.softmax_wave_cycles + per_sm * work * factor
    return waves * cycles / a.boost_clock_hz


def softmax_scalar_tail(row: int, size: int, threads: int) -> int:
    """Elements of a row that PyTorch's global-memory softmax forward (cunn_SoftMaxForward, SoftMax.cu)
    reads and writes one scalar at a time: its ilpReduce and WriteFpropResultsVectorized loops step
    over the row ILP = 16 / ``size`` elements per thread (one 16-byte vector) and ``threads`` threads
    at a time, and leave ``last = row % (ILP x threads)`` elements to a scalar epilogue loop (rows
    aligned to 16 bytes, as a contiguous row of a multiple of ILP elements is). In each of the
    kernel's three passes over the row (max, sum of exponentials, write) those elements take one load
    instruction each instead of one per ILP; a row of a multiple of ILP x threads elements has none."""
    ilp = max(1, 16 // size)
    return row % (ilp * threads)


def elementwise_time(dev: DeviceModel, op: str, tokens: int, hidden: int, dtype: str = "bf16",
                     backward: bool = False, masked: float = 0.0) -> float:
    """Time of a memory-bound op over a [tokens, hidden] tensor; backward moves ~1.5x the bytes.
    PyTorch's softmax forward is costed per kernel it runs (:func:`softmax_forward_time`), a
    fraction ``masked`` of its scores at ``softmax_masked_cost``; LayerNorm and RMSNorm forward by
    :func:`norm_forward_time` where the profile has ``norm_forward`` parameters."""
    if op == "silu_mul_eager":
        return eager_swiglu_time(dev, tokens, hidden, backward)
    if op == "softmax" and not backward:
        return softmax_forward_time(dev, tokens, hidden, dtype, masked)
    if op in NORM_KINDS and not backward and dev.cal.norm_forward:
        return norm_forward_time(dev, op, tokens, hidden, dtype)
    passes = ELEMENTWISE_PASSES[op] * (1.5 if backward else 1.0)
    nbytes = tokens * hidden * DTYPE_BYTES[dtype] * passes
    return memory_time(dev, nbytes, op=op)
