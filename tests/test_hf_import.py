"""Hugging Face config.json import: sample configs match the catalog; bad configs fail cleanly."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hardware_specs.errors import SpecError
from models.catalog import load_model
from models.hf_import import DEFAULT_SEQ_CAP, load_hf_config
from models.params import active_params, total_params

DATA = Path(__file__).parent / "data" / "hf"

# sample config -> the catalog entry of the same architecture
TWINS = [
    ("llama3_8b.json", "llama3-8b"),
    ("llama3_1_8b_rope_parameters.json", "llama3-8b"),
    ("mixtral_8x7b.json", "mixtral-8x7b"),
    ("qwen2_57b_a14b.json", "qwen2-57b-a14b"),
    ("qwen3_30b_a3b.json", "qwen3-30b-a3b"),
    ("deepseek_v3.json", "deepseek-v3"),
    ("nemotron4_15b.json", "nemotron-4-15b"),
]
# what the catalog adds beyond the architecture
NOT_ARCHITECTURE = {"name", "seq_len", "source", "notes", "published_params", "published_params_precision"}


def _arch(m):
    return {k: v for k, v in m.model_dump().items() if k not in NOT_ARCHITECTURE}


@pytest.mark.parametrize("sample,entry", TWINS)
def test_sample_matches_its_catalog_twin(sample, entry):
    imported = load_hf_config(DATA / sample)
    catalog = load_model(entry)
    assert _arch(imported) == _arch(catalog)
    assert total_params(imported) == total_params(catalog)
    assert active_params(imported) == active_params(catalog)
    assert total_params(imported) == pytest.approx(catalog.published_params, rel=0.01)


def test_every_sample_config_imports():
    for path in sorted(DATA.glob("*.json")):
        m = load_hf_config(path)
        assert total_params(m) > 0 and str(path) in m.source


def test_load_model_dispatches_json_paths():
    assert load_model(str(DATA / "mixtral_8x7b.json")) == load_hf_config(DATA / "mixtral_8x7b.json")


def test_gpt2_old_field_names():
    m = load_hf_config(DATA / "gpt2.json")   # n_layer, n_embd, n_head, n_positions, no n_inner
    assert (m.num_layers, m.hidden, m.num_heads, m.ffn_hidden, m.seq_len) == (12, 768, 12, 3072, 1024)
    assert m.position == "learned" and m.tied_embeddings and m.linear_bias and m.activation == "gelu"
    assert total_params(m) == 124_439_808   # GPT-2 small as released


def test_activation_mapping():
    assert load_hf_config(DATA / "llama3_8b.json").activation == "swiglu"          # silu, gated
    assert load_hf_config(DATA / "nemotron4_15b.json").activation == "squared_relu"  # relu2
    assert load_hf_config(DATA / "nemotron4_15b.json").norm == "layernorm"


def test_seq_len_is_capped():
    m = load_hf_config(DATA / "llama3_1_8b_rope_parameters.json")   # max_position_embeddings 131072
    assert m.seq_len == DEFAULT_SEQ_CAP == 8192
    assert "131072" in m.notes
    assert load_hf_config(DATA / "nemotron4_15b.json").seq_len == 4096   # below the cap: kept


def test_rope_spellings_do_not_change_the_model(tmp_path):
    base = json.loads((DATA / "llama3_8b.json").read_text())
    variants = [
        {**base, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}},
        {**{k: v for k, v in base.items() if k != "rope_scaling"},
         "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}},
    ]
    ref = _arch(load_hf_config(DATA / "llama3_8b.json"))
    for i, cfg in enumerate(variants):
        path = tmp_path / f"v{i}.json"
        path.write_text(json.dumps(cfg))
        assert _arch(load_hf_config(path)) == ref


def test_qwen2_qkv_bias_and_shared_expert():
    m = load_hf_config(DATA / "qwen2_57b_a14b.json")
    assert m.qkv_bias is True and m.linear_bias is False
    assert m.moe.shared_experts == 1 and m.moe.shared_expert_ffn_hidden == 20480


def test_deepseek_mla_mtp_and_dense_layers():
    m = load_hf_config(DATA / "deepseek_v3.json")
    assert m.mla.q_lora_rank == 1536 and m.mla.kv_lora_rank == 512
    assert m.num_kv_heads is None and m.mtp_layers == 1
    assert m.moe.first_dense_layers == 3 and m.num_moe_layers == 58


# ---- names --------------------------------------------------------------------------------------

def test_name_from_folder_of_config_json(tmp_path):
    folder = tmp_path / "Meta-Llama-3-8B"
    folder.mkdir()
    shutil.copy(DATA / "llama3_8b.json", folder / "config.json")
    assert load_hf_config(folder / "config.json").name == "Meta-Llama-3-8B"
    assert load_hf_config(folder).name == "Meta-Llama-3-8B"   # a folder works too


def test_name_from_hf_cache_snapshot(tmp_path):
    snap = tmp_path / "models--mistralai--Mixtral-8x7B-v0.1" / "snapshots" / ("ab12" * 10)
    snap.mkdir(parents=True)
    shutil.copy(DATA / "mixtral_8x7b.json", snap / "config.json")
    assert load_hf_config(snap / "config.json").name == "Mixtral-8x7B-v0.1"


def test_name_from_name_or_path_then_stem():
    assert load_hf_config(DATA / "qwen2_57b_a14b.json").name == "Qwen2-57B-A14B"
    assert load_hf_config(DATA / "qwen3_30b_a3b.json").name == "qwen3_30b_a3b"
    assert load_hf_config(DATA / "qwen3_30b_a3b.json", name="q3").name == "q3"


# ---- layer patterns -----------------------------------------------------------------------------

def _write(tmp_path, cfg, stem="cfg"):
    path = tmp_path / f"{stem}.json"
    path.write_text(json.dumps(cfg))
    return path


@pytest.mark.parametrize("step", [1, 2, 3])
def test_qwen_decoder_sparse_step_matches_hf_rule(tmp_path, step):
    cfg = {**json.loads((DATA / "qwen3_30b_a3b.json").read_text()), "decoder_sparse_step": step}
    m = load_hf_config(_write(tmp_path, cfg))
    hf = [(i + 1) % step == 0 for i in range(m.num_layers)]
    assert [m.is_moe_layer(i) for i in range(m.num_layers)] == hf


@pytest.mark.parametrize("first_k,freq", [(0, 1), (3, 1), (3, 2), (1, 3), (4, 2)])
def test_deepseek_moe_layer_freq_matches_hf_rule(tmp_path, first_k, freq):
    cfg = {**json.loads((DATA / "deepseek_v3.json").read_text()),
           "first_k_dense_replace": first_k, "moe_layer_freq": freq}
    m = load_hf_config(_write(tmp_path, cfg))
    hf = [i >= first_k and i % freq == 0 for i in range(m.num_layers)]
    assert [m.is_moe_layer(i) for i in range(m.num_layers)] == hf


def test_deepseek_without_q_lora(tmp_path):
    cfg = {**json.loads((DATA / "deepseek_v3.json").read_text()), "q_lora_rank": None}
    assert load_hf_config(_write(tmp_path, cfg)).mla.q_lora_rank is None


def test_llama_attention_bias_is_qkv_bias_with_a_note(tmp_path):
    cfg = {**json.loads((DATA / "llama3_8b.json").read_text()), "attention_bias": True}
    m = load_hf_config(_write(tmp_path, cfg))
    assert m.qkv_bias is True and m.linear_bias is False and "attention_bias" in m.notes


# ---- errors -------------------------------------------------------------------------------------

def _error(path) -> SpecError:
    with pytest.raises(SpecError) as exc:
        load_hf_config(path)
    assert str(path) in str(exc.value)
    return exc.value


def test_missing_file(tmp_path):
    err = _error(tmp_path / "nope.json")
    assert "cannot read file" in err.reason


def test_malformed_json(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"model_type": "llama",\n "hidden_size": }')
    err = _error(path)
    assert "malformed JSON at line 2" in err.reason


def test_top_level_not_an_object(tmp_path):
    assert "JSON object" in _error(_write(tmp_path, [1, 2])).reason


def test_unknown_model_type(tmp_path):
    err = _error(_write(tmp_path, {"model_type": "bert", "hidden_size": 768}))
    assert err.field.endswith("model_type") and "'bert'" in err.reason and "llama" in err.reason


def test_missing_model_type(tmp_path):
    err = _error(_write(tmp_path, {"hidden_size": 768}))
    assert err.field.endswith("model_type") and "missing" in err.reason


@pytest.mark.parametrize("sample,drop,named", [
    ("llama3_8b.json", "num_hidden_layers", "num_hidden_layers"),
    ("llama3_8b.json", "intermediate_size", "intermediate_size"),
    ("llama3_8b.json", "vocab_size", "vocab_size"),
    ("mixtral_8x7b.json", "num_local_experts", "num_local_experts"),
    ("qwen2_57b_a14b.json", "moe_intermediate_size", "moe_intermediate_size"),
    ("deepseek_v3.json", "kv_lora_rank", "kv_lora_rank"),
    ("gpt2.json", "n_embd", "hidden_size"),
])
def test_missing_required_field(tmp_path, sample, drop, named):
    cfg = json.loads((DATA / sample).read_text())
    del cfg[drop]
    err = _error(_write(tmp_path, cfg))
    assert err.field.endswith(named) and "missing required field" in err.reason


@pytest.mark.parametrize("sample,change,named,reason", [
    ("llama3_8b.json", {"hidden_size": "4096"}, "hidden_size", "integer"),
    ("llama3_8b.json", {"num_key_value_heads": 3}, "num_key_value_heads", "must divide"),
    ("llama3_8b.json", {"num_hidden_layers": 0}, "num_hidden_layers", "greater than 0"),
    ("llama3_8b.json", {"tie_word_embeddings": "no"}, "tie_word_embeddings", "true or false"),
    ("llama3_8b.json", {"hidden_act": "tanh"}, "hidden_act", "not supported"),
    ("mixtral_8x7b.json", {"num_experts_per_tok": 9}, "num_experts_per_tok", "exceeds num_experts"),
    ("qwen3_30b_a3b.json", {"mlp_only_layers": [0, 1]}, "mlp_only_layers", "not supported"),
])
def test_invalid_values_name_the_hf_field(tmp_path, sample, change, named, reason):
    cfg = {**json.loads((DATA / sample).read_text()), **change}
    err = _error(_write(tmp_path, cfg))
    assert err.field.endswith(named) and reason in err.reason


# ---- other supported families, checked against the released checkpoints' parameter counts ----------

@pytest.mark.parametrize("cfg,count", [
    # EleutherAI/pythia-160m: GPT-NeoX, untied, biases, LayerNorm
    ({"model_type": "gpt_neox", "num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12,
      "intermediate_size": 3072, "vocab_size": 50304, "max_position_embeddings": 2048, "hidden_act": "gelu",
      "rotary_pct": 0.25, "tie_word_embeddings": False, "use_parallel_residual": True}, 162_322_944),
    # mistralai/Mistral-7B-v0.1
    ({"model_type": "mistral", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
      "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000, "hidden_act": "silu",
      "max_position_embeddings": 32768, "sliding_window": 4096, "tie_word_embeddings": False}, 7_241_732_096),
    # Qwen/Qwen2-7B: QKV bias
    ({"model_type": "qwen2", "num_hidden_layers": 28, "hidden_size": 3584, "num_attention_heads": 28,
      "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064, "hidden_act": "silu",
      "max_position_embeddings": 131072, "tie_word_embeddings": False}, 7_615_616_512),
])
def test_other_families_count_like_their_checkpoints(tmp_path, cfg, count):
    assert total_params(load_hf_config(_write(tmp_path, cfg))) == count


def test_missing_max_position_embeddings_defaults_with_a_note(tmp_path):
    cfg = json.loads((DATA / "llama3_8b.json").read_text())
    del cfg["max_position_embeddings"]
    m = load_hf_config(_write(tmp_path, cfg))
    assert m.seq_len == DEFAULT_SEQ_CAP and "max_position_embeddings" in m.notes
