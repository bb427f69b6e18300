"""Issue #12 item 5: every published row read as its source means it. One test per reading fix:
the row with that field is read as the source states it, or skipped saying what the source leaves
unstated (tests/test_mixed_precision_layers.py: the mechanism the Nemotron 3 Super fix needs)."""
import csv

import pytest

from hardware_specs.errors import MeshcastError
from validation.published import (NARAYANAN_ZERO3, compare_row, model_from_row, plan_from_row, published_csvs,
                                  row_release)

RUNS, MORE = published_csvs()


def _rows(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _first(path, pred) -> tuple[int, dict]:
    return next((i, r) for i, r in enumerate(_rows(path)) if pred(r))


def test_narayanan_zero3_rows_are_read_and_say_what_the_paper_leaves_unstated():
    """Narayanan et al. 2021 Table 2's ZeRO-3 rows ran DeepSpeed inside unpublished Megatron-LM code,
    release and ZeRO-3 settings unstated: they stay in the figures (a known mismatch is reported,
    not removed), each carrying that note; the PTD-P rows of the same table carry none."""
    zero3 = [(i, r) for i, r in enumerate(_rows(RUNS)) if "Table 2" in r["source"] and r["zero_stage"] == "3"]
    assert len(zero3) == 6
    for i, row in zero3:
        c = compare_row(i, row, None)
        assert c.plan["zero_stage"] == 3 and NARAYANAN_ZERO3 in c.note
        assert c.plan["framework"] == "deepspeed-0.3"      # the 2021 releases' ZeRO-3
    i, row = _first(RUNS, lambda r: "Table 2" in r["source"] and r["tp"] == "8")
    c = compare_row(i, row, None)
    assert c.plan["framework"] == "megatron-core-local" and abs(c.error) < 0.1
    assert NARAYANAN_ZERO3 not in c.note


def test_a_row_the_source_footnotes_as_a_regression_is_skipped():
    """Megatron-Bridge's 26.06.01 GPT-OSS table carries the footnote 'Performance regression in
    GPT-OSS 120B pre-training is a known issue': that row is skipped; 26.06's is read."""
    i, row = _first(MORE, lambda r: r["model"] == "GPT OSS 120B" and row_release(r) == "26.06.01")
    with pytest.raises(MeshcastError, match="cudnn-frontend#256"):
        compare_row(i, row, None)
    i, row = _first(MORE, lambda r: r["model"] == "GPT OSS 120B" and row_release(r) == "26.06")
    assert compare_row(i, row, None).plan["precision"] == "fp8"
    assert row_release({"notes": "release 26.04.01 NeMo container; pre-training"}) == "26.04.01"
    assert row_release({"notes": "no release named"}) == ""


def test_nemotron3_super_nvfp4_rows_keep_the_recipes_bf16_layers_and_modules():
    """Megatron-Bridge's Super NVFP4 runs keep the last 14 hybrid layers in bf16 and attention,
    LatentMoE projections in bf16, Mamba out_proj in MXFP8 (nemotron_3_super_bf16_with_nvfp4_mixed,
    te_quant.cfg); Llama NVFP4 rows (bf16_with_nvfp4_mixed) quantize every layer."""
    _, row = _first(MORE, lambda r: r["model"] == "Nemotron_3_Super" and r["dtype"] == "NVFP4")
    fills: list = []
    plan = plan_from_row(row, model_from_row(row, fills), fills)
    assert plan.precision == "nvfp4" and plan.bf16_layers == (0, 14)
    assert dict(plan.gemm_precision) == {"attention.qkv": "bf16", "attention.out": "bf16", "moe.latent_down": "bf16",
                                         "moe.latent_up": "bf16", "mamba.out_proj": "fp8"}
    assert any("te_quant.cfg" in f and "last 14" in f for f in fills)
    _, row = _first(MORE, lambda r: r["model"] == "Nemotron_3_Super" and r["dtype"] == "MXFP8")
    assert plan_from_row(row, model_from_row(row)).bf16_layers is None
    _, row = _first(MORE, lambda r: r["model"].startswith("LLAMA") and r["dtype"] == "NVFP4")
    plan = plan_from_row(row, model_from_row(row))
    assert plan.bf16_layers is None and plan.gemm_precision is None


def test_llm_foundry_rows_read_its_triton_flash_attention_as_an_sm80_flash_kernel():
    """llm-foundry's benchmark tables ran attn_impl triton (v0.3.0, triton-pre-mlir): costed as
    the sm80-class FlashAttention-2 kernel, and the note says the Triton kernel is not modelled."""
    i, row = _first(MORE, lambda r: "llm-foundry" in r["source"] and r["gpu"].startswith("H100")
                    and r["dtype"] == "amp_bf16")
    c = compare_row(i, row, None)
    assert c.plan["attention"] == "flash" and "attn_impl triton" in c.note and "not modelled" in c.note
