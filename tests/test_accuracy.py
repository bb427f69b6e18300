"""Accuracy on the committed GPU measurements and published runs, so it cannot regress.

Targets come from the calibration issue. Where a target is met, the test asserts the target.
Where it is not yet met, a strict xfail records the target (it starts failing the day the target
is reached, so the test is then promoted) and a ratchet asserts today's figure does not get
worse. Today's figures are in docs/validation.md.
"""
from functools import lru_cache
from pathlib import Path

import pytest

from simulator.calibration import calibration_for
from validation.accuracy import PLAIN_ROOFLINE, evaluate, summarize
from validation.fit import host_bound
from validation.hardware import hardware_for
from validation.published import published_csvs
from validation.records import load_measurements

ROOT = Path(__file__).resolve().parent.parent
MEAS = ROOT / "validation" / "measurements"
PUBLISHED, PUBLISHED_MORE = published_csvs()     # ../shared/validation, else the committed copies
MEMORY_BOUND = ("add", "gelu", "layernorm", "rmsnorm", "silu_mul", "softmax")


@lru_cache(maxsize=None)
def results(name: str, baseline: bool = False) -> tuple:
    mf = load_measurements(MEAS / name)
    hw = hardware_for(mf)
    cal = PLAIN_ROOFLINE if baseline else calibration_for(hw.accelerator)[0]
    # the host-bound tiny-model steps fit the host parameters: they are not a test of them
    res, unsupported = evaluate(mf, hw, cal, [i for i, r in enumerate(mf.records) if not host_bound(r)])
    assert not unsupported
    return tuple(res)


@lru_cache(maxsize=None)
def stats(name: str, baseline: bool = False) -> dict:
    return {k.kind: k for k in summarize(list(results(name, baseline)))}


@pytest.mark.parametrize("name", ["h100_kernels.json", "h200_kernels.json"])
@pytest.mark.parametrize("kind", ["gemm", "attention_fwd", "attention_fwd_bwd"])
def test_kernels_within_10_percent(name, kind):
    assert stats(name)[kind].mape <= 0.10


@pytest.mark.parametrize("name", ["h100_kernels.json", "h200_kernels.json"])
def test_memory_bound_ops_within_10_percent_pooled(name):
    s = stats(name)
    errs = [s[k].mape * s[k].count for k in MEMORY_BOUND]
    assert sum(errs) / sum(s[k].count for k in MEMORY_BOUND) <= 0.10


@pytest.mark.parametrize("name", ["h100_kernels.json", "h200_kernels.json"])
def test_meshcast_beats_plain_roofline_by_far(name):
    ours, base = stats(name), stats(name, baseline=True)
    for kind in ("gemm", "attention_fwd", "attention_fwd_bwd", "train_step"):
        assert ours[kind].mape < base[kind].mape / 2


@pytest.mark.parametrize("name", ["h100_kernels.json", "h200_kernels.json"])
@pytest.mark.parametrize("kind", ["layernorm", "gelu", "add", "silu_mul"])
def test_memory_bound_kinds_within_10_percent_each(name, kind):
    assert stats(name)[kind].mape <= 0.10


@pytest.mark.parametrize("name,kind,ratchet", [("h100_kernels.json", "softmax", 0.058), ("h200_kernels.json", "softmax", 0.057),
                                               ("h100_kernels.json", "rmsnorm", 0.069), ("h200_kernels.json", "rmsnorm", 0.047)])
def test_memory_bound_ratchets(name, kind, ratchet):
    # softmax and rmsnorm were alone above 10% once (docs/validation.md); fit data: 5.7 / 5.6% and 6.8 / 4.6% since
    # session 23's membound42 fit (the ratchets, at 12 / 11 / 15 / 12%, tightened to today's figures)
    assert stats(name)[kind].mape <= ratchet


@pytest.mark.parametrize("name,limit", [("h100_kernels.json", 0.05), ("h200_kernels.json", 0.062)])
def test_copy_within_5_percent(name, limit):
    # H200 6.1% since session 24 adopted membound46: a contiguous copy_ is one cudaMemcpyAsync with its own fixed
    # cost (4.56 us, fitted on every suite and draws 40-45; it won draw 46, copy 4.5 -> 2.7%); this suite's copies
    # of 1-8 MiB, timed the same way on the first H200 machine, took 0.8-1.2 us longer than the draws' (later
    # machines) and are predicted 9-14% fast (5% before)
    assert stats(name)["copy"].mape <= limit


TRAIN_FILES = ["h100_kernels.json", "h200_kernels.json", "h200_train_extra.json", "h200_host_phases.json",
               "h200x2_train.json", "h200x2_train_large.json", "h200x2_host_phases.json"]
# held-out steps where host and GPU take similar time, predicted before they were measured
# (validation/measurements/logs/prereg_train_transition.txt), on two machines
# (session 23, the memory-bound and GEMM candidates adopted: h200_train_transition 15.0 -> 15.5%,
# h200_host_phases_transition 5.0 -> 5.2%, _c 2.0 -> 2.03%, _d 9.0 -> 9.2%: steps already predicted too fast,
# their memory-bound kernels' fixed cost 6.37 -> 5.15 us)
TRANSITION_FILES = {"h200_train_transition.json": 0.155, "h200x2_train_transition.json": 0.12,
                    "h200_host_phases_transition.json": 0.0525, "h200x2_host_phases_transition.json": 0.18,
                    "h200_host_phases_transition_c.json": 0.0206, "h200x2_host_phases_transition_c.json": 0.10,
                    "h200_host_phases_transition_d.json": 0.092, "h200x2_host_phases_transition_d.json": 0.24}
# DDP's peak on two GPUs holds 0-13 extra bytes per parameter from run to run (docs/validation.md)
MEMORY_RATCHETS = {"h200x2_host_phases_transition_c.json": 0.092, "h200x2_host_phases_transition_d.json": 0.064}
# validate and simulate share one fit verdict (simulator.memory.fits_in: live bytes x 1.05 + 1 GiB
# workspace within the memory the GPU showed). It misses one step: DDP 32 x 4096, micro-batch 2 on
# 2xH200 peaked at 135.0 GiB of 139.8 GiB and ran; the allowance puts it at 143.1 GiB (docs/validation.md)
FIT_VERDICT_MISSES = {"h200x2_train.json": 1}


@pytest.mark.parametrize("name", [n for n in TRAIN_FILES + list(TRANSITION_FILES) if n not in MEMORY_RATCHETS])
def test_train_step_memory_and_fit_verdict(name):
    s = stats(name)["train_step"]
    assert s.memory_mape <= 0.05
    assert s.fit_correct == s.fit_total - FIT_VERDICT_MISSES.get(name, 0)


@pytest.mark.xfail(strict=True, reason="one verdict wrong: the workspace + fragmentation allowance at 97% full")
def test_every_fit_verdict_right():
    assert all(stats(n)["train_step"].fit_correct == stats(n)["train_step"].fit_total
               for n in TRAIN_FILES + list(TRANSITION_FILES))


def test_validate_uses_simulates_fit_verdict():
    """validate's verdict is simulate's (same bytes, same function) when the capacity is the catalog's."""
    from simulator.memory import fits_in
    for r in results("h200x2_train.json"):
        p = r.prediction
        assert p.fits == fits_in(p.total_memory_bytes, load_hw_capacity("h200x2_train.json"))


def load_hw_capacity(name: str) -> float:
    return hardware_for(load_measurements(MEAS / name)).accelerator.hbm_capacity_bytes


@pytest.mark.parametrize("name,ratchet", MEMORY_RATCHETS.items())
def test_train_step_memory_ratchet_and_fit_verdict(name, ratchet):
    s = stats(name)["train_step"]
    assert s.memory_mape <= ratchet
    assert s.fit_correct == s.fit_total


@pytest.mark.parametrize("world", [1, 2])
def test_train_step_memory_pooled_within_5_percent(world):
    errs = [abs(r.memory_error) for name in TRAIN_FILES + list(TRANSITION_FILES)
            if load_measurements(MEAS / name).world == world
            for r in results(name) if r.record["kind"] == "train_step" and r.memory_error is not None]
    assert sum(errs) / len(errs) <= 0.05


@pytest.mark.parametrize("name", TRAIN_FILES)
def test_train_step_time_within_10_percent(name):
    assert stats(name)["train_step"].mape <= 0.10


@pytest.mark.parametrize("name,ratchet", TRANSITION_FILES.items())
def test_transition_train_step_ratchet(name, ratchet):
    # host-GPU transition steps move by up to 37% between two machines (docs/validation.md)
    assert stats(name)["train_step"].mape <= ratchet


def _pooled_time_mape(world: int) -> float:
    errs = [abs(r.time_error) for name in TRAIN_FILES + list(TRANSITION_FILES)
            if load_measurements(MEAS / name).world == world
            for r in results(name) if r.record["kind"] == "train_step" and r.time_error is not None]
    return sum(errs) / len(errs)


def test_one_gpu_train_steps_pooled_within_10_percent():
    # 5.2% -> 5.35% with session 16's norm kernel model (the isolated LayerNorm kernels 8-10% -> 4%; the steps'
    # fp32 LayerNorms are predicted faster, and these steps were already predicted too fast)
    # -> 5.40% with the H200 GEMM call's fitted launch 7.07 -> 6.23 us (issue #12 session 17, fitted on the H200's own tiny GEMMs; the profiled steps' in-step GEMMs move closer too, linear +1.4 -> +1.0% summed): these steps were already predicted too fast
    # -> 5.73% with session 23's adoption of the memory-bound candidate membound42 (memory-bound kernels' fixed cost
    # 6.37 -> 5.15 us, the isolated-kernel figure: it won the pre-registered kernel draws 42 and 43, and the steps,
    # predicted too fast already, lose 0.3 points) and the GEMM candidate gemm32
    # -> 5.75% with session 24's adoption of membound46 (the norm forward in whole waves: the steps' fp32 LayerNorms
    # past one wave are costed a little faster, and these steps were already predicted too fast)
    assert _pooled_time_mape(1) <= 0.0576         # 5.75% today (README, docs/validation.md; 5.7% before the step power model)


def test_two_gpu_train_steps_pooled_ratchet():
    assert _pooled_time_mape(2) <= 0.1331         # 13.3% today (13.2% before session 23's membound42 / gemm32 adoption; +0.005 points with membound46, session 24)


REPEAT_FILES = ["repeat/h200x2_transition_repeat_pass1.json", "repeat/h200x2_transition_repeat_pass2.json",
                "repeat/h200x2_transition_repeat_pinned.json"]


@pytest.mark.parametrize("world", [1, 2])
def test_train_steps_against_the_mean_of_repeated_runs(world):
    # a case measured several times (other machines, other runs) is judged against its mean:
    # host-influenced steps spread by up to 26% (coefficient of variation) from run to run
    from validation.accuracy import repeat_stats
    names = [n for n in TRAIN_FILES + list(TRANSITION_FILES) + REPEAT_FILES
             if load_measurements(MEAS / n).world == world and "H200" in load_measurements(MEAS / n).gpu]
    rs = [r for n in names for r in results(n) if r.record["kind"] == "train_step"]
    [s] = repeat_stats(rs)
    assert s.cases >= (9 if world == 1 else 18)
    assert s.mape_vs_mean <= (0.0373 if world == 1 else 0.0777)    # 3.7% / 7.8% today (target 10%; 3.1% / 7.6% before
    # session 23's membound42 / gemm32 adoption: memory-bound kernels cheaper in steps predicted too fast; 1 GPU 2.8% before
    # session 16's norm kernel model, 2.9% before session 17's H200 GEMM launch refit: a cheaper GEMM call in steps
    # already predicted too fast)


@pytest.mark.xfail(strict=True, reason="two-GPU steps pooled over all held-out files: 13.3% (docs/validation.md)")
def test_two_gpu_train_steps_pooled_target():
    assert _pooled_time_mape(2) <= 0.10


@pytest.mark.parametrize("kind", ["all_reduce", "all_to_all", "broadcast", "send_recv"])
def test_collectives_within_15_percent(kind):
    assert stats("h200x2_collectives.json")[kind].mape <= 0.15


@pytest.mark.parametrize("kind,ratchet", [("all_gather", 0.17), ("reduce_scatter", 0.185)])
def test_two_gpu_collective_ratchets(kind, ratchet):
    # fitted jointly with the four-GPU run, two-GPU all-gather and reduce-scatter lost 3 points
    # each (13.6 -> 16.8%, 14.9 -> 18.1%; docs/validation.md): today's figure must not get worse
    assert stats("h200x2_collectives.json")[kind].mape <= ratchet


@pytest.mark.xfail(strict=True, reason="two-GPU all-gather 16.8%, reduce-scatter 18.1% (docs/validation.md)")
def test_two_gpu_collectives_all_within_15_percent():
    assert all(stats("h200x2_collectives.json")[k].mape <= 0.15 for k in ("all_gather", "reduce_scatter"))


FOUR_GPU_REPEAT = "repeat/h200x4_collectives_repeat.json"   # never fitted: the first 4-GPU run is


@pytest.mark.parametrize("kind", ["all_reduce", "all_to_all"])
def test_four_gpu_collectives_within_10_percent(kind):
    assert stats(FOUR_GPU_REPEAT)[kind].mape <= 0.10


@pytest.mark.parametrize("kind,ratchet", [("all_gather", 0.16), ("broadcast", 0.145), ("reduce_scatter", 0.15),
                                          ("send_recv", 0.18)])
def test_four_gpu_collective_ratchets(kind, ratchet):
    # the repeat 4-GPU run, held out (predicted before the extension: 15-28% per kind); the
    # first run predicts the repeat no better than 14-22% per kind (run-to-run noise)
    assert stats(FOUR_GPU_REPEAT)[kind].mape <= ratchet


@pytest.mark.xfail(strict=True, reason="4-GPU repeat: all-gather 15.6%, broadcast 13.9%, reduce-scatter 14.7%, "
                                       "send/recv 17.3% (target 10%; docs/validation.md)")
def test_four_gpu_collectives_all_within_10_percent():
    assert all(s.mape <= 0.10 for s in stats(FOUR_GPU_REPEAT).values())


@pytest.mark.skipif(not PUBLISHED.exists(), reason="shared/validation not beside the checkout")
def test_published_runs():
    from validation.published import compare_published, per_source
    done, skipped = compare_published(PUBLISHED)
    assert len(done) >= 50      # 46 + the 4 FlashAttention-2 rows of Dao 2023 Table 1
    src = per_source(done)
    assert src["korthikanti2022"]["mape"] <= 0.15
    # nemo 13.3 -> 17.7% with the H100 cuDNN attention fit (session 12: its rows were -2% median, now +7.5%,
    # predicted fast); a ratchet, the 15% target unmet
    # -> 13.16% with Nemotron-8B/22B read as the catalog models their names name (256,000-token vocabulary, not
    # the columns' 51,200 fallback: validation/published.CATALOG_MODELS); their rows +31.8 -> +12.1%, +45.3 -> +9.3%
    # -> 13.38% with session 23's membound42 / gemm32 profiles (18.02% before the Nemotron reading)
    assert src["nemo"]["mape"] <= 0.1339      # 17.67 -> 17.79% with session 16's norm kernel model
    assert src["megatron-llama"]["mape"] <= 0.15
    assert src["flashattention2"]["mape"] <= 0.15
    ptdp = [abs(c.error) for c in done if c.plan["zero_stage"] != 3 and "narayanan" in c.source.lower()]
    assert sum(ptdp) / len(ptdp) <= 0.15
    # ratchet: DeepSpeed ZeRO-3 rows of Narayanan Table 2 are far off (docs/validation.md)
    # 17.26 -> 14.70% with the 2021 ZeRO-3 gather's per-rank copy-out costed (torch's list all_gather:
    # one copy per data-parallel rank, simulator/zero3_2021.gather_buffer_s)
    # -> 13.59% with NeMo's Nemotron-8B/22B read as the catalog models their names name (256k vocabulary)
    # -> 13.77% with session 23's membound42 / gemm32 profiles (the per-rank copies cost a memory-bound kernel's
    # fixed cost, 5.14 us since, not 5.59: Narayanan 18.9 -> 19.2%; NeMo 13.2 -> 13.4%)
    # -> 13.88% since session 39 adopted m78copy (the A100 rows borrow the H100's batched-GEMM law, layout copies and
    # softmax: Narayanan 19.1 -> 19.4%)
    assert sum(abs(c.error) for c in done) / len(done) <= 0.1388       # 0.2206 before misaligned GEMMs' narrow loads


def test_published_runs_more():
    """The 244 rows of published_runs_more.csv (Blackwell, MoE, FP8/MXFP8, FSDP): nobody fitted on
    them. Ratchets on today's figures (docs/validation.md); every skip names an actionable reason."""
    from validation.published import compare_published, per_source
    done, skipped = compare_published(PUBLISHED_MORE)
    assert len(done) >= 233 and len(done) + len(skipped) == 244
    before = [c for c in done if not c.model.startswith("Nemotron_3")]
    src = per_source(before)
    assert src["dgxc-benchmarking"]["mape"] <= 0.11
    # 11.38 -> 7.42% with llm-foundry's Triton FlashAttention measured on an H100 (session 26, backend triton_fa)
    # -> 7.34% with its blocks costed in launch order and each head_dim's compiled kernel fitted apart (session 27)
    assert src["llm-foundry"]["mape"] <= 0.0735
    # 66 rows on GB200/B300/GB300 (was 18 at 33.2%: Qwen3-235B at -80% until NVL72 runs took the
    # NVLink domain the Megatron-Bridge harness places them on); GPT-OSS BF16 +47% to +81% dominate now;
    # 76 with the 10 NVFP4 Llama rows (nvfp4 plan precision, 8.4% on them): 15.9% -> 14.9%;
    # MTP in the step model (DeepSeek-V3 rows): 14.9% -> 14.6%, the file without Nemotron 3 13.2 -> 13.1%
    # without the 26.06.01 GPT-OSS row its source footnotes as a regression (+74.8%): 13.7%;
    # with each row's Megatron-Bridge recipe read (validation/bridge_recipes.py: MoE A2A overlap,
    # TP comm overlap, Megatron-FSDP): 13.2%, the file without Nemotron 3 12.6 -> 12.5%
    # MoE token routing (simulator/moe_dispatch.py; HybridEP, router fusion, static budget read from the
    # recipes): megatron-bridge 13.2 -> 12.2%, the file without Nemotron 3 12.45 -> 11.8%, all rows 15.4 -> 13.9%
    # TE's expert GEMMs one cuBLAS call per local expert (lowering.expert_gemm_time): megatron-bridge 12.2 -> 11.8%,
    # the file without Nemotron 3 11.8 -> 11.6%, all rows 14.0 -> 12.9% (with the Mamba training path)
    # -> 14.5% with the H100 cuDNN attention fit transferred to Blackwell (session 12: GB200 rows +10 -> +20% median)
    # -> 14.37% with the recipes' recompute modules costed (mla_up_proj, moe_act, layernorm; session 20)
    # -> 15.10% with Blackwell Ultra's doubled SFU exponential rate (B300/GB300 attention faster; session 23:
    # a datasheet fact, its rows already too fast; GB300/GB200 predicted ratios move toward the published ones)
    # -> 14.76% with TE's per-expert MXFP8 quantize kernels (lowering.fp8_quantize_launches; session 23)
    # -> 14.46% with the FP8 rows' current-scaling recipe read (FP8_CS configs) and its amax pass costed (session 23)
    # -> 14.51% with session 23's membound42 / gemm32 profiles (memory-bound kernels' fixed cost 6.37 -> 5.15 us;
    # 14.37 -> 14.39% alone)
    # -> 14.97% with TE's fp8 quantization passes on Blackwell (session 24: MXFP8's column-wise copy 14.49 -> 13.92%
    # alone; no weight-gradient quantize pass where fp8 GEMMs take any layout, rows too fast made faster)
    assert src["megatron-bridge"]["mape"] <= 0.1498
    # H100 rows at their power-limited clock (session 11): the file without Nemotron 3 11.6 -> 11.3%
    # -> 12.0% with the H100 cuDNN attention fit (session 12; dgxc 10.3 -> 8.7%, megatron-bridge 11.8 -> 14.5%)
    # -> 12.00% with session 16's norm kernel model (11.967% before)
    # -> 11.94% with the recipes' recompute modules costed (session 20)
    # -> 12.14% with Blackwell Ultra's doubled SFU exponential rate (session 23)
    # -> 12.02% with TE's per-expert MXFP8 quantize kernels (session 23) -> 11.91% with current scaling's amax pass
    # -> 11.93% with session 23's membound42 / gemm32 profiles too -> 11.96% with its split-K L2 operand floor (gemm36;
    # llm-foundry 11.32 -> 11.39%) -> 12.12% with TE's fp8 quantization passes on Blackwell (session 24)
    # -> 12.07% with the experts of tp = 2, etp = 1 plans on their own shard's rows (Qwen3 235B token-drop GB200)
    # -> 10.36% with llm-foundry's Triton FlashAttention measured on an H100 (session 26, backend triton_fa)
    # -> 10.33% with triton_fa's blocks in launch order and its head_dim kernels fitted apart (session 27)
    assert sum(abs(c.error) for c in before) / len(before) <= 0.1034   # narrow-load misaligned GEMMs: 0.12458 -> 0.12454
    # with the 24 Nemotron 3 rows (hybrid Mamba-2 blocks; 58.7%, every one predicted too fast): 17.9%;
    # with MTP (Super: two repeated depths, bf16) 16.4%; with issue #12's GEMM structure 16.1%; with
    # Super NVFP4's bf16 layers and modules read and the footnoted regression row skipped 15.6%;
    # with the Megatron-Bridge recipes read 15.4%
    # -> 14.0% with the routing costed on each rank's sequence-parallel shard (moe_dispatch.local_tokens)
    # -> 12.9% (Mamba training path, TE's per-expert GEMMs) -> 12.6% with H100 rows at their power-limited clock
    # -> 13.4% with the H100 cuDNN attention fit (session 12)
    # -> 13.40% with the Megatron-Bridge recipes' recompute modules costed (session 20)
    # -> 13.62% with Blackwell Ultra's doubled SFU exponential rate (session 23)
    # -> 13.36% with TE's per-expert MXFP8 quantize kernels (session 23) -> 13.26% with current scaling's amax pass
    # -> 13.29% with session 23's membound42 / gemm32 profiles too -> 13.32% with the split-K L2 operand floor (gemm36)
    # -> 13.54% with TE's fp8 quantization passes on Blackwell (session 24: 12.96% with MXFP8's column-wise copy alone)
    # -> 14.62% with the experts of tp = 2, etp = 1 plans on their own sequence-parallel shard's rows (session 24,
    # moe_dispatch.dispatched_tokens: Nemotron 3 Super GB200 +9..+15 -> +46..+53%, its expert work had been costed twice)
    # -> 12.69% with llm-foundry's Triton FlashAttention measured on an H100 (session 26, backend triton_fa)
    # -> 12.66% with triton_fa's blocks in launch order and its head_dim kernels fitted apart (session 27)
    assert sum(abs(c.error) for c in done) / len(done) <= 0.1267
    allowed = ("zero_stage: Megatron-Bridge's Nemotron 3 Ultra", "framework: MaxText", "precision: pytorch: fp8",
               "measured: Megatron-Bridge docs/performance-summary-archive.md")
    assert all(s.reason.startswith(allowed) for s in skipped), {s.reason for s in skipped}
    assert not [s for s in skipped if s.reason.startswith("gpu:")]     # every B300 / GB300 row has hardware


@lru_cache(maxsize=None)
def _published_both() -> tuple:
    from validation.published import compare_published
    return compare_published([PUBLISHED, PUBLISHED_MORE])


# issue #12 item 5, figures of both CSVs together (314 rows; test data, never fitted; docs/validation.md)
# after the recompute fix of session 4 (recomputed forwards no longer re-run backward-phase ops):
# korthikanti 2.8 -> 2.9%, llm-foundry 13.2 -> 13.3%, narayanan 37.7 -> 37.9%, overall 15.20 -> 15.24%;
# with the 10 NVFP4 rows read (nvfp4 plan precision): 260 rows, overall 15.24 -> 14.98%,
# megatron-bridge and Blackwell 15.9 -> 14.9% (76 rows); with MTP in the step model (the DeepSeek-V3
# rows' depth on the last stage) 14.9 -> 14.6%, MoE 19.7 -> 19.2%, overall (260 rows) 15.0 -> 14.9%;
# GEMM structure of issue #12 (split-K fix-up, alignment, operand-load cap, refit on seed 21 of the
# second random run) on top: dgxc-benchmarking 10.1 -> 10.4%, flashattention2 12.3 -> 12.95%,
# megatron-llama 14.3 -> 14.45%, nemo 13.7 -> 13.8% (up: the refit moves every GEMM and, through
# gemm_peak_fraction.bf16, the attention rate); korthikanti 2.9 -> 2.4%, llm-foundry 13.3 -> 12.9%,
# narayanan 37.9 -> 37.3%, megatron-bridge 14.6 -> 14.5%, overall (260 rows) 14.9 -> 14.7%
# session 23's membound42 / gemm32 profiles (memory-bound kernels cheaper, unaligned GEMMs re-costed): dgxc-benchmarking
# 8.76 -> 8.79%, nemo 17.79 -> 18.02%, megatron-bridge 14.37 -> 14.39%, megatron-llama 11.05 -> 11.08% (all predicted
# too fast already), llm-foundry 11.33 -> 11.32%; then DeepSpeed 2021's per-rank gather copies (narayanan 24.7 ->
# 19.2%) and NeMo's Nemotron-8B/22B read from the catalog (nemo 18.0 -> 13.4%); megatron-bridge 14.51% with the
# Blackwell and FP8 mechanisms below
PUBLISHED_SOURCE_RATCHETS = {"dgxc-benchmarking": 0.0879, "flashattention2": 0.13, "korthikanti2022": 0.025,
                             "llm-foundry": 0.0735, "megatron-bridge": 0.1482, "megatron-llama": 0.1108,
                             "narayanan2021": 0.1941, "nemo": 0.1339}
# narayanan2021 19.10 -> 19.41%, korthikanti2022 2.40 -> 2.42% with session 39's adoption of m78copy (the Megatron
# local attention's batched GEMMs, layout copies and softmax, measured on H100/H200, borrowed by the A100 rows)
# megatron-bridge (without Nemotron 3) 14.97 -> 14.82% with MoE experts at etp = 1 < tp on their own shard's rows
# (session 24, moe_dispatch.dispatched_tokens: Qwen3 235B token-drop GB200 -22.5 -> +10.9%)
# H100 cuDNN attention fitted on H100 kernels (session 12; before, H100 had no cuDNN parameters and costed it as
# FlashAttention-2), transferred to Blackwell: dgxc-benchmarking 10.28 -> 8.72%, megatron-llama 14.66 -> 10.97%,
# but nemo 13.33 -> 17.67% (its H100 rows now predicted fast, median +7.5%) and megatron-bridge 11.79 -> 14.53%
# (GB200 rows, too fast already, faster); a measured kernel model, kept (nothing fitted to a row); megatron-llama
# 10.97 -> 11.05% and llm-foundry 11.42 -> 11.47% with session 16's norm kernel model (norms predicted faster)   # nemo 13.80 -> 13.68% (narrow-load misaligned GEMMs)
# megatron-bridge 12.17 -> 11.79%, dgxc-benchmarking 10.37 -> 10.33% with Transformer Engine's expert GEMMs run one
# cuBLAS call per local expert (lowering.expert_gemm_time, session 11)
# H100 rows at the clock their average power allows (the H100 step_power, h100_sustained_power.json, session 11;
# nothing fitted to a row): llm-foundry 12.12 -> 11.42%, nemo 13.68 -> 13.33%, dgxc-benchmarking 10.33 -> 10.28%,
# but megatron-llama 14.45 -> 14.66% (its H100 rows were predicted slow already; a lower clock slows them more)
# narayanan2021 37.3 -> 25.1%: its ZeRO-3 rows read with DeepSpeed's 2021 ZeRO-3 (deepspeed-0.3, session 9);
# -> 24.7% costed in fp16 (DeepSpeed had no bf16 before v0.5.x); megatron-bridge 13.2 -> 12.2% with MoE token
# routing (simulator/moe_dispatch.py). dgxc-benchmarking 10.34 -> 10.46% with it (Grok-1's tp4 rows), then 10.37%
# once the routing is costed on each rank's sequence-parallel shard (moe_dispatch.local_tokens), inside its ratchet
# megatron-bridge 14.53 -> 14.37% with the recipes' recompute_modules costed (session 20: DeepSeek-V3's mla_up_proj,
# GPT-OSS GB200 BF16's and Nemotron 3 Super B300 NVFP4's moe_act and layernorm; lowering.recomputed); no other source moves
# narayanan2021 24.7 -> 18.9%: DeepSpeed 2021's per-parameter gather passes torch.distributed.all_gather a list of
# dp output views, and ProcessGroupNCCL copies the flat result out one rank's slice at a time (dp copies per gather,
# each a memory-bound kernel's fixed cost: zero3_2021.gather_buffer_s); its ZeRO-3 rows +34..+143% -> +28..+83%;
# no other source moves
# nemo 17.79 -> 13.16%: NeMo 24.07's Nemotron-8B and Nemotron-22B read as the catalog models their names name
# (models/catalog/nemotron-8b.yaml, nemotron-22b.yaml: the 256,000-token Nemotron vocabulary; rebuilt from the
# columns they had the 51,200 fallback, 6-11% short of the FLOPs per token NeMo's own table counts)
# megatron-bridge 14.37 -> 15.10% with Blackwell Ultra's doubled SFU exponential rate (session 23: NVIDIA's "Making
# Softmax More Efficient with NVIDIA Blackwell Ultra"; B300/GB300 attention faster, rows already too fast, worse;
# kept: a datasheet fact, not a fit); no other source moves
# megatron-bridge 15.10 -> 14.76% with TE's per-expert MXFP8 quantize kernels (session 23: GroupedLinear's split_quantize
# launches one kernel per local expert for every FP8 recipe but delayed scaling); no other source moves
# megatron-bridge 14.76 -> 14.46% with the FP8 rows' current-scaling recipe (FP8_CS configs) and its amax pass (session 23)
# megatron-bridge 14.49 -> 14.97% with TE's fp8 quantization passes as it runs them on Blackwell (session 24: MXFP8
# writes the row-wise and the column-wise copy, 14.49 -> 13.92% alone; the weight-gradient GEMM has no pass of its own
# where fp8 GEMMs take any layout, lowering.non_tn_fp8_gemm, which makes rows already too fast faster); no other source moves


def test_published_coverage_and_figures_ratchet():
    """Rows read and the figures quoted in docs/validation.md, so neither can slip back. The rows
    read before Mamba-2 blocks were modelled keep their own ratchets; the 15 Nemotron 3 rows added
    then (Nano and Super, MXFP8) have theirs, and the totals hold both."""
    from validation.published import per_regime, per_source
    done, skipped = _published_both()
    assert len(done) + len(skipped) == 314 and len(done) >= 283
    nemotron3 = [c for c in done if c.model.startswith("Nemotron_3")]
    before = [c for c in done if not c.model.startswith("Nemotron_3")]
    # 58.7% -> 45.1% with MTP in the step model (Super 67.4 -> 48.1%; Nano has no MTP: 37.7%); 44.3% with
    # issue #12's GEMM structure; 41.3% with Super NVFP4's bf16 layers and modules (te_quant.cfg); 38.8% with the
    # SSD scan's Triton kernels measured (h200_ssd_scan.json, fitted --only ssd, transferred to h100-sxm)
    # -> 32.6% with MoE token routing (simulator/moe_dispatch.py: HybridEP's routing-map all-gather, router, host sync)
    # -> 33.4% with the routing on each rank's sequence-parallel shard (Super's tp2 rows, already too fast, faster)
    # -> 31.7% with the Mamba training path as Megatron-Core runs it (gate fused into the scan, conv1d recomputed
    # in backward, layout copies with mbs > 1) -> 23.6% with TE's expert GEMMs one cuBLAS call per local expert
    # -> 26.2% with the H100 cuDNN attention fit transferred to Blackwell (session 12) -> 26.28% with session 16's
    # norm kernel model (its RMSNorms predicted faster)
    # -> 26.09% with the recipes' recompute modules costed (session 20: Super B300 NVFP4's moe_act, layernorm)
    # -> 26.51% with Blackwell Ultra's doubled SFU exponential rate (session 23: its B300/GB300 rows faster)
    # -> 25.01% with TE's per-expert MXFP8 quantize kernels (session 23: one kernel per local expert for every
    # FP8 recipe but delayed scaling, cast.cpp multi_tensor_quantize_impl; Super B300 at 64 local experts most)
    # -> 25.15% with session 23's membound42 / gemm32 profiles (26.11% with them alone)
    # -> 25.91% with TE's fp8 quantization passes on Blackwell (session 24: MXFP8's column-wise copy, 25.12 ->
    # 23.52% alone; no wgrad quantize pass where fp8 GEMMs take any layout, which makes these rows faster)
    # -> 36.80% with the experts of a tp = 2, etp = 1 plan running their own sequence-parallel shard's rows (session
    # 24, moe_dispatch.dispatched_tokens: Super GB200's expert GEMMs, activation and all-to-all were costed twice;
    # its 7 rows +9..+15 -> +46..+53%, now as far off as its GB300 / B300 rows)
    # -> 32.95% with the SSD scan's backward bytes counted kernel by kernel (session 25: simulator.ssm.ssd_kernel_bytes,
    # checked on a registered H200 draw; every row 3-5 points slower, still too fast)
    assert len(nemotron3) == 24 and sum(abs(c.error) for c in nemotron3) / len(nemotron3) <= 0.3296
    assert all(c.error > 0 for c in nemotron3)                                  # every one predicted too fast
    # 18.7% -> 17.4% (MTP) -> 17.2% (GEMM) -> 16.7% (Super NVFP4 read as run, regression row skipped)
    # -> 16.6% (each Megatron-Bridge row's recipe read: validation/bridge_recipes.py; narrow-load misaligned
    # GEMMs: 16.602 -> 16.595%, without Nemotron 3 14.311 -> 14.302%)
    # -> 16.4% (the SSD scan's kernels measured and fitted, session 8)
    # -> 15.4% (Narayanan's ZeRO-3 rows under DeepSpeed's 2021 per-parameter gathers; without Nemotron 3 13.3%)
    # -> 15.2% (llm-foundry's MPTs with their learned positions and biases, no ALiBi: read from v0.3.0)
    # -> 14.4% (MoE token routing as Megatron-Core's dispatchers run it, simulator/moe_dispatch.py; without
    # Nemotron 3 13.0 -> 12.7%); routing on each rank's sequence-parallel shard: 14.44%, without Nemotron 3 12.68%
    # -> 14.29% (Mamba training path) -> 13.50% (TE's expert GEMMs one cuBLAS call per local expert; without
    # Nemotron 3 12.68 -> 12.56%) -> 13.25% (H100 rows at their power-limited clock; without Nemotron 3 12.30%)
    # -> 14.1% (H100 cuDNN attention fitted on H100 kernels, session 12, transferred to Blackwell; without
    # Nemotron 3 12.30 -> 12.98%: megatron-llama 14.7 -> 11.0%, dgxc 10.3 -> 8.7%, nemo 13.3 -> 17.7%,
    # megatron-bridge 11.8 -> 14.5%)
    # -> 14.08% with the Megatron-Bridge recipes' recompute modules costed (session 20: mla_up_proj, moe_act,
    # layernorm; plan.recompute_modules)
    # -> 13.58% with the 2021 ZeRO-3 gather's per-rank copy-out costed (Narayanan's six DeepSpeed rows; torch's
    # list all_gather copies the result out one data-parallel rank at a time: zero3_2021.gather_buffer_s)
    # -> 13.39% with NeMo's rows read as the catalog models their names name (Nemotron-8B/22B's 256k vocabulary)
    # -> 13.43% with session 23's membound42 / gemm32 profiles
    # -> (on 14.04%: 14.26% with Blackwell Ultra's doubled SFU exponential rate, B300/GB300 attention faster,
    # compute.DeviceModel.exp_per_s; 14.05% with TE's per-expert MXFP8 quantize kernels, lowering.fp8_quantize_launches;
    # 13.97% with the FP8 rows' current-scaling recipe read from their Megatron-Bridge configs and its amax pass)
    # -> 13.38% all together -> 13.40% with session 23's split-K L2 operand floor (gemm36; llm-foundry 11.32 -> 11.39%)
    # -> 13.58% with TE's fp8 quantization passes on Blackwell (session 24: 13.38 -> 13.10% with MXFP8's column-wise
    # copy alone; -> 13.58% with no weight-gradient quantize pass on Blackwell, a fact that makes rows too fast faster)
    # -> 14.46% with MoE experts at etp = 1 < tp taking their own shard's rows (session 24, dispatched_tokens:
    # Nemotron 3 Super GB200 +9..+15 -> +46..+53%, Qwen3 235B token-drop GB200 -22.5 -> +10.9%)
    # -> 14.14% with the SSD scan's backward bytes counted kernel by kernel (session 25; the Nemotron 3 rows)
    # -> 12.87% with llm-foundry's Triton FlashAttention as a backend of its own, measured on an H100 under today's
    # Triton held to mma.sync (session 26: llm-foundry 11.38 -> 7.42%; its long-sequence H100 rows +46..+60% ->
    # -27..-34%, the proxy kernel slower than the original toolchain's there; A100 rows unchanged)
    # -> 12.85% with triton_fa's blocks in launch order and its head_dim kernels fitted apart (session 27:
    # llm-foundry 7.42 -> 7.34%)
    # -> 12.88% with session 39's adoption of m78copy (Narayanan's A100 rows 19.1 -> 19.4%, Korthikanti 2.40 -> 2.42%)
    assert sum(abs(c.error) for c in done) / len(done) <= 0.1288
    # -> 13.01% with session 16's norm kernel model (12.98% before) -> 12.97% with the recipes' recompute modules
    # -> 12.42% with the 2021 ZeRO-3 gather's per-rank copy-out costed -> 12.21% with NeMo's Nemotron-8B/22B
    # read from the catalog (256k vocabulary) -> 12.25% with session 23's membound42 / gemm32 profiles -> 12.29%
    # with the Blackwell Ultra exponential rate, per-expert MXFP8 quantize kernels and current scaling's amax pass
    # -> 12.31% with the split-K L2 operand floor (gemm36) -> 12.44% with TE's fp8 quantization passes on Blackwell
    # -> 12.39% with MoE experts at etp = 1 < tp on their own shard's rows (Qwen3 235B token-drop GB200 -22.5 -> +10.9%)
    # -> 11.01% with llm-foundry's Triton FlashAttention measured on an H100 (session 26, backend triton_fa)
    # -> 10.99% with triton_fa's blocks in launch order and its head_dim kernels fitted apart (session 27)
    # -> 11.01% with session 39's adoption of m78copy (Narayanan's A100 rows)
    assert len(before) == 259 and sum(abs(c.error) for c in before) / len(before) <= 0.1102
    src = per_source(before)
    for name, ratchet in PUBLISHED_SOURCE_RATCHETS.items():
        assert src[name]["mape"] <= ratchet + 5e-4, name
    regime = per_regime(before)
    # Megatron-Bridge recipes read: MoE 18.05 -> 16.3% (A2A overlap of the MXFP8 recipes), Blackwell 13.7 -> 13.2%
    # MoE token routing (simulator/moe_dispatch.py): MoE 16.3 -> 14.8%, Blackwell 13.2 -> 12.2%
    # TE's expert GEMMs one cuBLAS call per local expert: MoE 14.8 -> 14.2%, Blackwell 12.2 -> 11.8%
    # H100 cuDNN attention fit, transferred to Blackwell (session 12): MoE 14.2 -> 15.8%, Blackwell 11.8 -> 14.5%
    # session 16's norm kernel model: MoE 15.84 -> 15.86%
    # the recipes' recompute modules costed (session 20): MoE 15.86 -> 15.62%, Blackwell 14.53 -> 14.37%
    # Blackwell Ultra's doubled SFU exponential rate (session 23): MoE 15.62 -> 16.13%, Blackwell 14.37 -> 15.10%
    # TE's per-expert MXFP8 quantize kernels (session 23): MoE 16.13 -> 15.63%, Blackwell 15.10 -> 14.76%
    # current scaling's amax pass on the FP8 rows (session 23): Blackwell 14.76 -> 14.46%
    # with session 23's membound42 / gemm32 profiles too: MoE 15.70%, Blackwell 14.51%
    # TE's fp8 quantization passes on Blackwell (session 24): MoE 15.69 -> 16.04%, Blackwell 14.49 -> 14.97%
    # MoE experts at etp = 1 < tp on their own shard's rows (session 24): MoE 16.04 -> 15.81%, Blackwell 14.97 -> 14.82%
    assert regime["moe"]["count"] >= 51 and regime["moe"]["mape"] <= 0.1581
    assert regime["blackwell"]["count"] >= 75 and regime["blackwell"]["mape"] <= 0.1482


def test_bridge_rows_read_their_recipe():
    """Every Megatron-Bridge row names the recipe its settings were read from, or says none was read;
    the MXFP8 MoE recipes with moe_a2a_overlap read as ep_comm_overlap (validation/bridge_recipes.py)."""
    done, _ = _published_both()
    bridge = [c for c in done if "Megatron-Bridge" in c.source]
    read = [c for c in bridge if "recipe Megatron-Bridge v0." in c.note]
    assert len(bridge) == 99 and len(read) >= 87
    assert all(c in read or "no Megatron-Bridge performance recipe read" in c.note for c in bridge)
    a2a = [c for c in read if c.plan["ep_comm_overlap"]]
    assert len(a2a) >= 16 and all("full_iteration" in c.note for c in a2a)


def test_published_uses_90_percent_of_rows():
    """283 of 314 rows (90.1%); the other 31 are skipped with the reason (micro-batch or tp not
    stated, MaxText, FlashAttention-1, a figure its source footnotes as a regression, ...)."""
    done, skipped = _published_both()
    assert len(done) >= 0.9 * (len(done) + len(skipped))


def test_published_no_source_over_20_percent():
    """Issue #12's per-source target over every row: met again since session 25 (Megatron-Bridge 19.2%, was
    20.15% since session 24; Narayanan 19.1% the next highest)."""
    from validation.published import per_source
    done, _ = _published_both()
    assert all(v["mape"] <= 0.20 for v in per_source(done).values())


@pytest.mark.xfail(strict=True, reason="overall 12.9%, MoE 21.3%, Blackwell 19.2% (Nemotron 3 33.0%, GPT-OSS BF16 "
                                       "too fast); every source within 20% (Megatron-Bridge 19.2%, Narayanan 19.1%); "
                                       "without Nemotron 3: 11.0%, MoE 15.8%, Blackwell 14.8%")
def test_published_targets_overall_source_moe_blackwell():
    from validation.published import per_regime, per_source
    done, _ = _published_both()
    assert sum(abs(c.error) for c in done) / len(done) <= 0.12
    assert all(v["mape"] <= 0.20 for v in per_source(done).values())
    regime = per_regime(done)
    assert regime["moe"]["mape"] <= 0.15 and regime["blackwell"]["mape"] <= 0.15


def test_published_blackwell_and_moe_all_rows_ratchet():
    """Over every row, Nemotron 3 included: Blackwell 14.65% met the issue's 15% in session 11; with
    the H100 cuDNN attention fit of session 12 transferred to Blackwell it is 17.4% (the rows were
    predicted too fast already); MoE 17.2 -> 19.2%. Neither meets its target (the xfail above)."""
    from validation.published import per_regime
    done, _ = _published_both()
    regime = per_regime(done)
    # the Megatron-Bridge recipes' recompute modules costed (session 20): Blackwell 17.38 -> 17.21%, MoE 19.19 -> 18.97%
    # Blackwell Ultra's doubled SFU exponential rate (session 23; B300/GB300 attention faster, their rows already too
    # fast): Blackwell 17.21 -> 17.86%, MoE 18.97 -> 19.45% (GB300 12.99 -> 14.20%, B300 27.54 -> 28.12%, GB200 unchanged)
    # TE's per-expert MXFP8 quantize kernels (session 23): Blackwell 17.86 -> 17.25%, MoE 19.45 -> 18.63%
    # current scaling's amax pass on the FP8 rows (session 23): Blackwell 17.25 -> 17.02%
    # with session 23's membound42 / gemm32 profiles too: Blackwell 17.09%, MoE 18.73%
    # TE's fp8 quantization passes on Blackwell (session 24): MXFP8's column-wise copy alone Blackwell 17.07 -> 16.25%,
    # MoE 18.70 -> 17.77%; with no weight-gradient quantize pass on Blackwell (rows too fast made faster) 17.62%, 19.20%
    # MoE experts at etp = 1 < tp on their own sequence-parallel shard's rows (session 24, dispatched_tokens; Nemotron 3
    # Super GB200's expert work had been costed twice): Blackwell 17.62 -> 20.15%, MoE 19.20 -> 22.53%
    # the SSD scan's backward bytes counted kernel by kernel (session 25): Blackwell 20.15 -> 19.21%, MoE 22.53 -> 21.30%
    assert regime["blackwell"]["count"] == 99 and regime["blackwell"]["mape"] <= 0.1922   # 17.38% since session 16's norms
    assert regime["moe"]["count"] == 75 and regime["moe"]["mape"] <= 0.2130   # 19.17 -> 19.19%: session 16's norms


def test_published_layer_times_within_10_percent():
    from validation.published import compare_layer_times
    rows = compare_layer_times(PUBLISHED.parent / "published_layer_times.csv")
    assert len(rows) == 15
    assert sum(abs(c.error) for c in rows) / len(rows) <= 0.045     # 4.4% today (3.3% before the GEMM refit)


# ---- issue #12: beyond the fitted shapes (held-out random GEMMs) and clocks under sustained load

def _gemm_pairs(name: str, cal=None):
    from validation.predict import predict_record
    mf = load_measurements(MEAS / name)
    hw = hardware_for(mf)
    cal = cal or calibration_for(hw.accelerator)[0]
    return [(r, predict_record(r, hw, cal).time_s) for r in mf.records]


def test_random_gemm_set_is_held_out():
    from simulator.calibration import profile_fitted_on
    assert "h100_gemm_random.json" not in {Path(f).name for f in profile_fitted_on("h100-sxm")}


# today's figures (docs/validation.md, "GEMMs beyond the fitted shapes"); before split-K the set was
# at 55% (small-MN large-K 106%); before the split-K fix-up / alignment / operand-load structure and
# the fit on seed 21 of the second run: all 22.5, misaligned 23.2, large 10.5 (those two rose: see
# the doc; 57 of the 156 records of this first run are flagged as interference, time_max/time_min > 3)
RANDOM_GEMM_RATCHET = {"all": 0.196, "small_mn_large_k": 0.213, "fp8_small": 0.332, "misaligned": 0.128,
                       "large": 0.133, "other": 0.132}


@pytest.mark.parametrize("regime", sorted(RANDOM_GEMM_RATCHET))
def test_random_gemm_set_ratchet(regime):
    from validation.gemm_regimes import mape_by_regime
    count, mape = mape_by_regime(_gemm_pairs("h100_gemm_random.json"))[regime]
    assert count >= 10
    assert mape <= RANDOM_GEMM_RATCHET[regime]


@pytest.mark.xfail(strict=True, reason="target of issue #12: the held-out random GEMMs within 10%")
def test_random_gemm_set_within_10_percent():
    from validation.gemm_regimes import mape_by_regime
    assert mape_by_regime(_gemm_pairs("h100_gemm_random.json"))["all"][1] <= 0.10


def test_sustained_and_burst_gemms():
    """Burst records at the burst rate, sustained windows at the power-limited clock (in fit: the
    power model's parameters come from this file), and the sustained clock is what makes it."""
    from dataclasses import replace
    from collections import defaultdict
    pairs = _gemm_pairs("h100_sustained.json")
    errs = defaultdict(list)
    for rec, pred in pairs:
        errs[rec["regime"]].append(abs(pred / rec["time_s"] - 1))
    assert sum(errs["burst"]) / len(errs["burst"]) <= 0.03
    assert sum(errs["after_sustained"]) / len(errs["after_sustained"]) <= 0.03
    assert len(errs["sustained"]) >= 40 and sum(errs["sustained"]) / len(errs["sustained"]) <= 0.03
    mf = load_measurements(MEAS / "h100_sustained.json")
    cal = calibration_for(hardware_for(mf).accelerator)[0]
    burst_only = _gemm_pairs("h100_sustained.json", replace(cal, sustained_clock_fraction={}, step_power={}))
    worse = [abs(p / r["time_s"] - 1) for r, p in burst_only if r["regime"] == "sustained"]
    assert sum(worse) / len(worse) > 0.10


# ---- collectives: a separate, later two-GPU run (held out; docs/measurements.md) ---------------
def _separate_run_by_kind(name: str, min_bytes: int = 0) -> dict:
    from validation.accuracy import evaluate as _ev
    mf = load_measurements(ROOT / f"validation/measurements/repeat/h200x2_collectives_{name}.json")
    hw = hardware_for(mf)
    res, _ = _ev(mf, hw, calibration_for(hw.accelerator)[0])
    out = {}
    for r in res:
        if r.record["bytes"] >= min_bytes:
            out.setdefault(r.record["kind"], []).append(abs(r.time_error))
    return {k: sum(v) / len(v) for k, v in out.items()}


def _run4_by_kind(min_bytes: int = 0):
    return _separate_run_by_kind("run4", min_bytes)


def test_collectives_separate_run_ratchet():
    # per kind, all sizes: 15.5 / 38.9 / 23.3 / 15.3 / 39.7 / 9.6 %; >= 4 MiB: 6.1-15.4 %
    today = {"all_gather": 0.156, "all_reduce": 0.39, "all_to_all": 0.234, "broadcast": 0.154,
             "reduce_scatter": 0.398, "send_recv": 0.097}
    got = _run4_by_kind()
    assert all(got[k] <= v for k, v in today.items())
    assert max(_run4_by_kind(4 << 20).values()) <= 0.155


# two later separate runs (session 7: run6, run7 on fresh 2xH200 machines; never fitted), all sizes and
# >= 4 MiB per kind, today's profile: the small-message latency moves between machines (33-67 us) and
# the profile sits in the slow mode (its fit run's); at >= 4 MiB all-to-all is predicted 8-12% slow
# at 1-4 GiB in every run, the fit run included (17-20% before its own block was taken as a concurrent
# copy, comm.self_copy_in_series; docs/validation.md, "Collectives on 2xH200")
LATER_RUNS_TODAY = {
    "run6": ({"all_gather": 0.196, "all_reduce": 0.171, "all_to_all": 0.285, "broadcast": 0.21,
              "reduce_scatter": 0.267, "send_recv": 0.144},
             {"all_gather": 0.161, "all_reduce": 0.164, "all_to_all": 0.302, "broadcast": 0.05,
              "reduce_scatter": 0.15, "send_recv": 0.11}),
    "run7": ({"all_gather": 0.20, "all_reduce": 0.13, "all_to_all": 0.619, "broadcast": 0.183,
              "reduce_scatter": 0.438, "send_recv": 0.209},
             {"all_gather": 0.095, "all_reduce": 0.159, "all_to_all": 0.085, "broadcast": 0.045,
              "reduce_scatter": 0.18, "send_recv": 0.228}),
    # run8 (session 11, a fresh 2xH200 machine): measured before the all-to-all change above and first
    # evaluated after it was merged (9.5 -> 9.3% all sizes, 10.4 -> 9.7% >= 4 MiB): all-to-all within the
    # issue's 10% on a run nobody developed on; all-gather 31% / send-recv 36% (this machine's small-message
    # mode: the other runs' median predicts it no better, 23% / 35%)
    "run8": ({"all_gather": 0.312, "all_reduce": 0.192, "all_to_all": 0.093, "broadcast": 0.288,
              "reduce_scatter": 0.207, "send_recv": 0.359},
             {"all_gather": 0.204, "all_reduce": 0.137, "all_to_all": 0.097, "broadcast": 0.097,
              "reduce_scatter": 0.147, "send_recv": 0.17}),
}


@pytest.mark.parametrize("run", sorted(LATER_RUNS_TODAY))
def test_collectives_later_runs_ratchet(run):
    every, large = LATER_RUNS_TODAY[run]
    got, got_large = _separate_run_by_kind(run), _separate_run_by_kind(run, 4 << 20)
    assert all(got[k] <= v + 5e-4 for k, v in every.items()) and set(got) == set(every)
    assert all(got_large[k] <= v + 5e-4 for k, v in large.items())


@pytest.mark.xfail(strict=True, reason="later 2-GPU runs: every kind <= 10% is below the machines' reproducibility "
                                       "(run7's floor averages 19.9%); all-to-all 1-4 GiB predicted 8-12% slow")
def test_collectives_later_runs_target():
    assert all(max(_separate_run_by_kind(run).values()) <= 0.10 for run in LATER_RUNS_TODAY)


# meshcast's per-kind MAPE on a held-out run over the reproducibility floor of that run (the MAPE
# of the median of the other runs), today's values (docs/measurements.md)
FLOOR_RATIO_TODAY = {
    "run4": {"all_gather": 0.47, "all_reduce": 0.77, "all_to_all": 1.02, "broadcast": 0.99,
             "reduce_scatter": 1.52, "send_recv": 0.80},
    "run5": {"all_gather": 0.75, "all_reduce": 0.86, "all_to_all": 1.54, "broadcast": 0.69,
             "reduce_scatter": 1.39, "send_recv": 0.94},
}


@pytest.mark.parametrize("run", sorted(FLOOR_RATIO_TODAY))
def test_collectives_reproducibility_floor(run):
    """A held-out run against the floor of what the other runs predict of it: the floor averages
    well above the issue's 10% per kind (that target is below the measurements' reproducibility),
    and the profile's ratio to the floor per kind is pinned at today's values."""
    from validation.collective_spread import reproducibility_floor
    floor = reproducibility_floor(run)
    assert set(floor) == set(FLOOR_RATIO_TODAY[run])
    assert sum(floor.values()) / len(floor) > 0.15
    model = _separate_run_by_kind(run)
    assert all(model[k] / floor[k] <= FLOOR_RATIO_TODAY[run][k] for k in floor)


@pytest.mark.xfail(strict=True, reason="reduce-scatter 1.51x / 1.38x the reproducibility floor on the held-out runs "
                                       "(4-16 MiB predicted 25-37% slow in every run: its fitted fixed cost, not "
                                       "an NCCL choice); all-to-all 1.53x on run5 "
                                       "(two modes across machines, ~35 vs ~75 us, the profile in the slow one)")
def test_collectives_at_the_reproducibility_floor():
    from validation.collective_spread import reproducibility_floor
    for run in FLOOR_RATIO_TODAY:
        floor = reproducibility_floor(run)
        model = _separate_run_by_kind(run)
        assert all(model[k] <= floor[k] * 1.05 for k in floor)


@pytest.mark.xfail(strict=True, reason="separate 2-GPU run: all-reduce 38.9%, reduce-scatter 39.7% (small-message "
                                       "latency 33 vs 55 us between machines), target 10% per kind")
def test_collectives_separate_run_target():
    assert max(_run4_by_kind().values()) <= 0.10
