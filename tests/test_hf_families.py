"""Hugging Face import of the Llama-shaped families (Phi-3, OLMo-2, Granite, Gemma-2, Nemotron,
gpt-oss): parameter counts against the published ones, notes for what is not modelled, and
config folders / hub-cache entries as --model."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from hardware_specs.errors import MeshcastError, SpecError
from meshcast.cli import main
from models.catalog import load_model
from models.hf_import import load_hf_config, resolve_hf_model
from models.params import active_params, total_params

DATA = Path(__file__).parent / "data" / "hf"

# config -> published total parameters (model cards on Hugging Face: the safetensors' count)
PUBLISHED = [
    ("phi3_mini_4k.json", 3_821_079_552),       # microsoft/Phi-3-mini-4k-instruct "3.82B"
    ("olmo2_7b.json", 7.30e9),                  # allenai/OLMo-2-1124-7B "7.3B"
    ("granite_3_0_8b.json", 8_170_864_640),     # ibm-granite/granite-3.0-8b-base "8.17B"
    ("gemma2_9b.json", 9_241_705_984),          # google/gemma-2-9b "9.24B"
    ("gpt_oss_20b.json", 20.91e9),              # openai/gpt-oss-20b model card: 20.91B total
    ("nemotron4_15b.json", 15.6e9),             # nvidia Nemotron-4 15B report: 15.6B
]


@pytest.mark.parametrize("sample,published", PUBLISHED)
def test_parameter_counts_match_the_published(sample, published):
    assert total_params(load_hf_config(DATA / sample)) == pytest.approx(published, rel=0.01)


def test_gemma2_shape():
    m = load_hf_config(DATA / "gemma2_9b.json")
    assert m.head_dim == 256 and m.hidden == 3584 and m.num_heads * m.head_dim != m.hidden
    assert m.activation == "geglu" and m.tied_embeddings and m.kv_heads == 8
    assert "soft-capping" in m.notes and "21 of 42 layers" in m.notes


def test_gpt_oss_moe_biases_and_window():
    m = load_hf_config(DATA / "gpt_oss_20b.json")
    assert m.moe.num_experts == 32 and m.moe.top_k == 4 and m.moe.expert_ffn_hidden == 2880
    assert m.linear_bias and m.head_dim == 64 and not m.tied_embeddings
    assert "attention sinks" in m.notes and "12 of 24 layers" in m.notes
    # the model card's 3.61B active parameters leave out the input embedding
    assert active_params(m) - m.vocab * m.hidden == pytest.approx(3.61e9, rel=0.01)


def test_gpt_oss_120b_from_the_20b_config(tmp_path):
    cfg = json.loads((DATA / "gpt_oss_20b.json").read_text())
    cfg.update(num_hidden_layers=36, num_local_experts=128, layer_types=["sliding_attention", "full_attention"] * 18)
    m = load_hf_config(_write(tmp_path, cfg))
    assert total_params(m) == pytest.approx(116.83e9, rel=0.01)                   # model card: 116.83B
    assert active_params(m) - m.vocab * m.hidden == pytest.approx(5.13e9, rel=0.01)  # and 5.13B active


def test_family_notes():
    assert "QK-norm" in load_hf_config(DATA / "olmo2_7b.json").notes
    granite = load_hf_config(DATA / "granite_3_0_8b.json")
    assert "multipliers" in granite.notes and granite.tied_embeddings and granite.kv_heads == 8
    phi3 = load_hf_config(DATA / "phi3_mini_4k.json")
    assert phi3.activation == "swiglu" and "2047 tokens" in phi3.notes


def test_bad_layer_types_name_the_field(tmp_path):
    cfg = json.loads((DATA / "gpt_oss_20b.json").read_text())
    cfg["layer_types"] = ["linear_attention"] * 24
    with pytest.raises(SpecError) as exc:
        load_hf_config(_write(tmp_path, cfg))
    assert exc.value.field.endswith(": layer_types")


def _write(tmp_path: Path, cfg: dict, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cfg))
    return path


def _cache_entry(root: Path, org: str, name: str, sample: str) -> Path:
    """A hub-cache entry as huggingface_hub lays it out: refs/main names the snapshot."""
    repo = root / f"models--{org}--{name}"
    rev = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(rev)
    _write(repo / "snapshots" / rev, json.loads((DATA / sample).read_text()))
    return repo


def test_config_folder_and_cache_entry(tmp_path, monkeypatch):
    folder = tmp_path / "my-olmo"
    _write(folder, json.loads((DATA / "olmo2_7b.json").read_text()))
    assert resolve_hf_model(str(folder)) == folder / "config.json"
    assert load_model(str(folder)).name == "my-olmo"
    cache = tmp_path / "hub"
    repo = _cache_entry(cache, "google", "gemma-2-9b", "gemma2_9b.json")
    assert load_model(str(repo)).name == "gemma-2-9b"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    m = load_model("google/gemma-2-9b")
    assert m.name == "gemma-2-9b" and m.head_dim == 256


def test_repo_id_not_in_cache_is_one_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(MeshcastError) as exc:
        load_model("acme/not-cached-7b")
    assert exc.value.field == "model" and "never downloads" in exc.value.reason
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SpecError, match="no config.json"):
        load_model(str(empty))


def test_simulate_and_catalog_take_a_cached_model(tmp_path, monkeypatch, capsys):
    _cache_entry(tmp_path, "openai", "gpt-oss-20b", "gpt_oss_20b.json")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    code = main(["catalog", "--model", "openai/gpt-oss-20b", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["model"]["moe"]["num_experts"] == 32
    code = main(["simulate", "--model", "openai/gpt-oss-20b", "--cluster", "dgx-h100", "--gpus", "8",
                 "--expert-model-parallel-size", "8", "--tp", "1", "--gbs", "8", "--seq", "4096", "--json"])
    out = capsys.readouterr().out
    assert code == 0 and json.loads(out)["step_time_s"] > 0
