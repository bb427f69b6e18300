"""The model catalog: every entry loads, matches its published size, and bad entries fail cleanly."""
from __future__ import annotations

import pytest

from hardware_specs.errors import SpecError, UnknownNameError
from models.catalog import list_models, load_model
from models.params import (active_params, attention_params, layer_params, mtp_params,
                           published_params_error, total_params)
from models.schema import ModelSpec

NAMES = list_models()

# Entries with no published parameter count, and why. Adding a name here is a deliberate act.
NO_PUBLISHED_COUNT = {
    "nemotron-8b": "only the label '8B' is published; the NeMo config has 8.54e9",
    "nemotron-22b": "never released; only the label '22B'; the NeMo config has 21.27e9",
}
# Entries whose source prints the count rounded coarser than 1% (published_params_precision set).
ROUNDED_FIGURES = {"gpt-1.7b", "gpt-3.6b", "gpt3-5b", "gpt3-20b",
                   # NVIDIA prints 31.6B, 120.6B and 550B (tests/test_hybrid.py checks them closer)
                   "nemotron-3-nano-30b-a3b", "nemotron-3-super-120b-a12b", "nemotron-3-ultra-550b-a55b"}

EXPECTED = {
    "gpt-1.7b", "gpt-3.6b", "gpt-7.5b", "gpt-18.4b", "gpt-39.1b", "gpt-76.1b", "gpt-145.6b",
    "gpt-310.1b", "gpt-529.6b", "gpt-1t", "gpt3-175b", "gpt-22b", "gpt-530b", "gpt3-5b", "gpt3-20b",
    "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b", "llama3-405b",
    "mixtral-8x7b", "mixtral-8x22b", "qwen2-57b-a14b", "qwen3-30b-a3b", "deepseek-v3",
    "nemotron-4-15b", "nemotron-4-340b", "nemotron-8b", "nemotron-22b",
    "nemotron-3-nano-30b-a3b", "nemotron-3-super-120b-a12b", "nemotron-3-ultra-550b-a55b",
}


def test_catalog_holds_the_expected_models():
    assert EXPECTED <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_entry_loads_under_its_file_name(name):
    m = load_model(name)
    assert isinstance(m, ModelSpec)
    assert m.name == name
    assert m.source.strip(), "every entry cites a source"


@pytest.mark.parametrize("name", NAMES)
def test_total_params_match_the_published_count(name):
    m = load_model(name)
    if name in NO_PUBLISHED_COUNT:
        assert m.published_params is None
        assert "published_params" in m.notes, "the entry says why it has no published count"
        return
    assert m.published_params is not None, f"{name}: no published_params and no exemption"
    err = published_params_error(m)
    assert err <= 0.01, (f"{name}: total_params {total_params(m):.4e} vs published "
                         f"{m.published_params:.4e} (gap beyond rounding {err:.2%})")


def test_rounded_figures_are_only_where_expected():
    assert {n for n in NAMES if load_model(n).published_params_precision} == ROUNDED_FIGURES


@pytest.mark.parametrize("name,count", [
    # parameter counts of the released checkpoints (safetensors) on Hugging Face
    ("llama2-7b", 6_738_415_616),
    ("llama2-13b", 13_015_864_320),
    ("llama2-70b", 68_976_648_192),
    ("llama3-8b", 8_030_261_248),
    ("llama3-70b", 70_553_706_496),
    ("mixtral-8x7b", 46_702_792_704),
])
def test_exact_counts_of_released_weights(name, count):
    assert total_params(load_model(name)) == count


@pytest.mark.parametrize("name", ["gpt-1.7b", "gpt-3.6b", "gpt-7.5b", "gpt-18.4b", "gpt-39.1b", "gpt-76.1b",
                                  "gpt-145.6b", "gpt-310.1b", "gpt-529.6b", "gpt-1t"])
def test_megatron_gpt_matches_the_paper_formula(name):
    """Narayanan et al. 2021: P = 12lh^2 (1 + 13/(12h) + (V+s)/(12lh)), plus the final LayerNorm (2h)."""
    m = load_model(name)
    l, h, v, s = m.num_layers, m.hidden, m.vocab, m.seq_len
    assert total_params(m) == 12 * l * h * h + 13 * l * h + (v + s) * h + 2 * h


@pytest.mark.parametrize("name,kv", [
    ("llama2-7b", 32), ("llama2-13b", 40), ("llama2-70b", 8), ("llama3-8b", 8), ("llama3-405b", 8),
    ("mixtral-8x7b", 8), ("qwen2-57b-a14b", 4), ("qwen3-30b-a3b", 4), ("nemotron-4-15b", 8),
    ("nemotron-4-340b", 8), ("gpt3-175b", 96),
])
def test_kv_heads(name, kv):
    assert load_model(name).kv_heads == kv


def test_gqa_attention_weights():
    m = load_model("llama3-8b")   # 32 query heads, 8 KV heads of 128
    assert attention_params(m) == 4096 * (32 + 2 * 8) * 128 + 32 * 128 * 4096


def test_explicit_head_dim():
    m = load_model("qwen3-30b-a3b")   # 32 heads x 128 = 4096 != hidden 2048
    assert m.dim_head == 128
    assert attention_params(m) == 2048 * (32 + 2 * 4) * 128 + 32 * 128 * 2048


@pytest.mark.parametrize("name,active,tol", [
    ("mixtral-8x7b", 12.9e9, 0.02),     # Mistral AI: 12.9B per token
    ("mixtral-8x22b", 39e9, 0.02),      # Mistral AI: 39B active
    ("qwen2-57b-a14b", 14e9, 0.03),     # A14B
    ("qwen3-30b-a3b", 3.3e9, 0.03),     # model card: 3.3B activated
])
def test_moe_active_params(name, active, tol):
    assert active_params(load_model(name)) == pytest.approx(active, rel=tol)


def test_deepseek_v3_main_model_and_mtp():
    m = load_model("deepseek-v3")
    assert [m.is_moe_layer(i) for i in range(4)] == [False, False, False, True]
    assert m.num_moe_layers == 58
    assert total_params(m, include_mtp=False) == pytest.approx(671e9, rel=0.01)   # "671B total"
    assert active_params(m, include_mtp=False) == pytest.approx(37e9, rel=0.03)   # "37B activated"
    assert mtp_params(m) == pytest.approx(11.5e9, rel=0.02)   # README_WEIGHTS.md: 11.5B unique MTP params
    assert total_params(m) == total_params(m, include_mtp=False) + mtp_params(m)
    assert active_params(m) == active_params(m, include_mtp=False) + mtp_params(m, active=True)


def test_mtp_absent_by_default():
    m = load_model("llama3-8b")
    assert m.mtp_layers == 0 and mtp_params(m) == 0
    assert total_params(m) == total_params(m, include_mtp=False)


def test_qwen2_moe_shared_expert():
    lp = layer_params(load_model("qwen2-57b-a14b"), 0)
    assert lp.num_experts == 64 and lp.dense_mlp == 0
    assert lp.expert == 3 * 3584 * 2560
    assert lp.shared_experts == 3 * 3584 * 20480


def test_dense_models_have_equal_total_and_active():
    for name in ("llama3-70b", "gpt3-175b", "nemotron-4-340b"):
        m = load_model(name)
        assert active_params(m) == total_params(m)


def test_published_params_error_allows_for_rounding():
    base = dict(name="t", num_layers=2, hidden=64, ffn_hidden=256, num_heads=4, vocab=1000, seq_len=128)
    m = ModelSpec(**base)
    n = total_params(m)
    assert published_params_error(m) is None
    assert published_params_error(ModelSpec(**base, published_params=n)) == 0.0
    off = ModelSpec(**base, published_params=n * 1.05)
    assert published_params_error(off) == pytest.approx(1 - 1 / 1.05)
    rounded = ModelSpec(**base, published_params=n * 1.05, published_params_precision=n * 0.2)
    assert published_params_error(rounded) == 0.0


# ---- bad inputs ---------------------------------------------------------------------------------

GOOD = """\
name: tiny
num_layers: 2
hidden: 64
ffn_hidden: 256
num_heads: 8
vocab: 1000
seq_len: 128
"""


def _load_yaml(tmp_path, text, stem="bad"):
    path = tmp_path / f"{stem}.yaml"
    path.write_text(text)
    return load_model(str(path))


def test_good_tmp_yaml_loads(tmp_path):
    assert _load_yaml(tmp_path, GOOD, "good").kv_heads == 8


def test_kv_heads_not_dividing_heads(tmp_path):
    with pytest.raises(SpecError) as exc:
        _load_yaml(tmp_path, GOOD + "num_kv_heads: 3\n")
    assert "bad.yaml" in str(exc.value) and "num_kv_heads 3 must divide num_heads 8" in str(exc.value)


def test_kv_heads_above_heads(tmp_path):
    with pytest.raises(SpecError, match="must divide"):
        _load_yaml(tmp_path, GOOD + "num_kv_heads: 16\n")


def test_top_k_above_experts(tmp_path):
    with pytest.raises(SpecError) as exc:
        _load_yaml(tmp_path, GOOD + "moe:\n  num_experts: 4\n  top_k: 8\n  expert_ffn_hidden: 128\n")
    assert "moe" in exc.value.field and "top_k 8 exceeds num_experts 4" in exc.value.reason


def test_hidden_not_divisible_by_heads(tmp_path):
    with pytest.raises(SpecError, match="not divisible by num_heads"):
        _load_yaml(tmp_path, GOOD.replace("num_heads: 8", "num_heads: 6"))


def test_first_dense_layers_beyond_depth(tmp_path):
    with pytest.raises(SpecError, match="first_dense_layers"):
        _load_yaml(tmp_path, GOOD + "moe:\n  num_experts: 4\n  top_k: 2\n  expert_ffn_hidden: 128\n"
                                    "  first_dense_layers: 3\n")


@pytest.mark.parametrize("extra,field", [
    ("mtp_layers: -1\n", "mtp_layers"),
    ("published_params_precision: 0\n", "published_params_precision"),
    ("activation: tanh\n", "activation"),
    ("num_expert: 8\n", "num_expert"),   # unknown field
])
def test_invalid_fields_are_named(tmp_path, extra, field):
    with pytest.raises(SpecError) as exc:
        _load_yaml(tmp_path, GOOD + extra)
    assert exc.value.field.endswith(field)


def test_missing_required_field(tmp_path):
    with pytest.raises(SpecError) as exc:
        _load_yaml(tmp_path, GOOD.replace("vocab: 1000\n", ""))
    assert exc.value.field.endswith("vocab")


def test_unknown_catalog_name_suggests():
    with pytest.raises(UnknownNameError) as exc:
        load_model("llama3-8")
    assert "llama3-8b" in exc.value.suggestions
