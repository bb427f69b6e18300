"""Reading published-run rows: what each column says, what is filled and how the note says so."""
import csv

import pytest

from hardware_specs.errors import MeshcastError, SpecError
from validation.published import (catalog_name, cluster_for, compare_row, model_from_row, parse_ffn,
                                  plan_from_row, published_csvs)

MORE = published_csvs()[1]


def _rows() -> list[dict]:
    with open(MORE, newline="") as f:
        return list(csv.DictReader(f))


def _first(pred) -> tuple[int, dict]:
    return next((i, r) for i, r in enumerate(_rows()) if pred(r))


def test_ffn_cell_forms():
    assert parse_ffn("28672") == (28672, None)
    assert parse_ffn("12288 dense / 1536 expert") == (12288, 1536)
    assert parse_ffn("2880 expert") == (None, 2880)
    with pytest.raises(SpecError):
        parse_ffn("lots")


def test_model_names_map_to_the_catalog():
    assert catalog_name("LLAMA3.1_405B") == catalog_name("Llama3.1-405B") == "llama3-405b"
    assert catalog_name("Grok-1 314B (MoE)") == "grok-1"
    assert catalog_name("DeepSeekV3 (tokendrop)") == "deepseek-v3"
    assert catalog_name("MPT-7b") is None


def test_gpus_map_to_their_catalog_cluster_and_unknown_ones_are_named():
    assert cluster_for("GB200 (NVL72)") == "gb200-nvl72" and cluster_for("B200") == "dgx-b200"
    assert cluster_for("GB300 (NVL72)") == "gb300-nvl72" and cluster_for("B300 (DGX-B300)") == "dgx-b300"
    with pytest.raises(MeshcastError, match="no catalog cluster"):
        cluster_for("TPU v5p")


def test_fsdp_text_is_zero3_under_plain_pytorch():
    _, row = _first(lambda r: r["zero_stage"].startswith("3 (FSDP"))
    plan = plan_from_row(row, model_from_row(row))
    assert plan.zero_stage == 3 and plan.framework == "pytorch"


def test_moe_row_by_name_takes_the_catalog_model_and_notes_fills():
    i, row = _first(lambda r: r["model"] == "Qwen3_30B_a3B" and r["gpu"].startswith("GB200") and not r["vp"])
    fills: list = []
    m = model_from_row(row, fills)
    assert m.moe.num_experts == 128 and m.moe.top_k == 8 and m.moe.expert_ffn_hidden == 768
    c = compare_row(i, row, None)
    assert "model: catalog qwen3-30b-a3b" in c.note and "vp" not in c.note       # pp=1: vp is moot
    assert c.plan["ep"] == int(row["ep"])


def test_mxfp8_is_costed_as_fp8_and_says_so():
    i, row = _first(lambda r: r["dtype"] == "MXFP8" and r["gpu"].startswith("GB200") and r["model"] == "LLAMA3_70B")
    c = compare_row(i, row, None)
    assert c.plan["precision"] == "fp8" and "MXFP8 costed as FP8" in c.note
    assert c.plan["fp8_recipe"] == "mxfp8"


def test_fp8_recipe_read_from_the_dtype():
    """MXFP8 / FP8-MX rows run Megatron-Bridge's bf16_with_mxfp8_mixed (mxfp8), FP8-CS its current-scaling
    recipe (tensorwise; "FP8-CS (FP8-MX)" quotes the CS figure first); a plain FP8 names none (delayed)."""
    from validation.published import row_fp8_recipe
    assert row_fp8_recipe({"dtype": "MXFP8"}, "fp8") == "mxfp8"
    assert row_fp8_recipe({"dtype": "FP8-MX"}, "fp8") == "mxfp8"
    assert row_fp8_recipe({"dtype": "FP8-CS (FP8-MX)"}, "fp8") == "tensorwise"
    assert row_fp8_recipe({"dtype": "FP8"}, "fp8") is None
    assert row_fp8_recipe({"dtype": "BF16"}, "bf16") is None


def test_nvfp4_rows_are_read_and_ultras_recipe_skipped_with_the_reason():
    _, row = _first(lambda r: r["dtype"] == "NVFP4" and r["gpu"].startswith("GB200") and r["model"].startswith("LLAMA"))
    fills: list = []
    assert plan_from_row(row, model_from_row(row), fills).precision == "nvfp4"
    assert any("bf16_with_nvfp4_mixed" in f for f in fills)
    _, row = _first(lambda r: r["model"] == "Nemotron_3_Ultra")
    with pytest.raises(MeshcastError, match="HSDP"):
        compare_row(0, row, None)


@pytest.mark.parametrize("name, catalog", [("Nemotron_3_Nano", "nemotron-3-nano-30b-a3b"),
                                           ("Nemotron_3_Super", "nemotron-3-super-120b-a12b")])
def test_nemotron3_rows_run_the_hybrid_catalog_model(name, catalog):
    i, row = _first(lambda r: r["model"] == name and r["dtype"] == "MXFP8" and r["gpu"].startswith("GB300"))
    c = compare_row(i, row, None)
    assert f"model: catalog {catalog}" in c.note and c.plan["ep"] == int(row["ep"])
    assert 0.5 < c.predicted / c.published < 2.0      # evaluated, not tuned: docs/validation.md has the errors


def test_missing_micro_batch_takes_the_recipe_default():
    _, row = _first(lambda r: r["source"].startswith("NVIDIA-NeMo/Megatron-Bridge") and r["model"] == "LLAMA3_70B"
                    and r["gpu"].startswith("GB200") and r["dtype"] != "NVFP4")
    fills: list = []
    plan = plan_from_row({**row, "micro_batch": ""}, model_from_row(row), fills)
    assert plan.mbs == 1 and any("micro_batch not stated: 1" in f for f in fills)
