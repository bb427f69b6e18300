"""validate --published on Blackwell Ultra and the layouts of the source frameworks (issue #12 item 5):
the hardware a GPU string names, the pipeline layout and NVLink placement Megatron-Bridge uses, and the
FlashAttention-2 runs as the FlashAttention repo configures them; every filled value named in the note."""
import pytest

from hardware_specs.catalog import load_hardware
from hardware_specs.errors import MeshcastError
from validation.published import (compare_row, cluster_for, deepseek_v3_split, harness_placement,
                                  model_from_row, plan_from_row)

MB = "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md"
FA2 = "Dao 2023 'FlashAttention-2' (arXiv:2307.08691) Table 1"


@pytest.mark.parametrize("gpu, cluster", [
    ("GB300 (NVL72)", "gb300-nvl72"), ("B300 (DGX-B300)", "dgx-b300"), ("GB200 (NVL72)", "gb200-nvl72"),
    ("B200 (DGX-B200)", "dgx-b200"), ("H100-80GB SXM (DGX Cloud)", "dgx-h100")])
def test_gpu_strings_map_to_their_own_hardware(gpu, cluster):
    assert cluster_for(gpu) == cluster
    assert load_hardware(cluster, 8).accelerator.name == {"gb300-nvl72": "gb300", "dgx-b300": "b300",
                                                          "gb200-nvl72": "gb200", "dgx-b200": "b200",
                                                          "dgx-h100": "h100-sxm"}[cluster]


def test_blackwell_ultra_differs_from_blackwell_where_the_datasheets_do():
    gb300, gb200 = load_hardware("gb300-nvl72", 72).accelerator, load_hardware("gb200-nvl72", 72).accelerator
    assert gb300.peak_flops("bf16") == gb200.peak_flops("bf16")        # same BF16/FP8 tensor rate
    assert gb300.peak_flops("fp4") == pytest.approx(1.5 * gb200.peak_flops("fp4"))   # 15 vs 10 PF dense
    assert gb300.hbm_capacity_bytes > 1.5 * gb200.hbm_capacity_bytes * 0.99       # 288 vs 186 GiB
    assert load_hardware("gb300-nvl72", 256).cluster.tiers[0].nic_bandwidth_per_direction_Bps == 100e9


@pytest.mark.parametrize("pp, vp, split", [
    # Megatron-Bridge recipes/deepseek/h100/deepseek_v3.py _get_deepseek_v3_pipeline_layout
    (4, 1, (16, 16, 16, 13)), (8, 1, (8,) * 7 + (5,)), (4, 2, (16, 16, 16, 13)),
    (16, 1, (4,) * 15 + (1,)), (8, 2, (8,) * 7 + (5,)), (4, 4, (16, 16, 16, 13)),
    # perf_recipes/deepseek/gb300/deepseek_v3.py: pp=2 vp=8 'Et*4|(t*4|)*14tmL'
    (2, 8, (32, 29)),
])
def test_deepseek_v3_split_is_the_recipe_layout(pp, vp, split):
    assert deepseek_v3_split(61, pp, vp) == split
    assert sum(split) == 61


def _mb_deepseek(**cells) -> dict:
    row = {"source": MB, "model": "DeepSeekV3", "layers": "61", "seq_len": "4096", "gpu": "GB300 (NVL72)",
           "num_gpus": "256", "tp": "1", "pp": "2", "vp": "8", "cp": "1", "ep": "32", "global_batch": "4096",
           "micro_batch": "1", "dtype": "MXFP8", "tokens_per_sec_per_gpu": "6304", "notes": ""}
    row.update(cells)
    return row


def test_deepseek_v3_row_takes_the_recipe_layout_and_says_so():
    fills: list[str] = []
    row = _mb_deepseek()
    plan = plan_from_row(row, model_from_row(row, fills), fills)
    assert plan.layers_per_stage == (32, 29)
    assert any("pipeline layout" in f and "[32, 29]" in f for f in fills)


def test_nvl72_runs_see_the_nvlink_domain_the_harness_places_them_on():
    from simulator.comm import fabric_from_hardware, job_domain_gpus
    fills: list[str] = []
    hw = load_hardware("gb300-nvl72", 256)
    assert harness_placement(hw, "megatron-bridge", fills) is hw          # the fabric places every job itself
    assert fills and "segment" in fills[0] and "NVLink domain 64" in fills[0]
    assert fabric_from_hardware(hw).levels[0].span_gpus == 64              # 64 trays -> --segment 16 -> 64 GPUs
    assert job_domain_gpus(72, 4, 8) == 8                                  # 2 trays: one segment of 2
    assert job_domain_gpus(72, 4, 144) == 72                               # 36 trays: two whole racks
    assert job_domain_gpus(72, 4, 100) == 20                               # 25 trays: segments of 5
    assert job_domain_gpus(8, 8, 256) == 8                                 # 8-GPU nodes: the node
    untouched: list[str] = []
    harness_placement(load_hardware("gb200-nvl72", 256), "nemo", untouched)
    assert not untouched                                                  # the note is Megatron-Bridge's


def test_expert_all_to_all_of_a_256_gpu_job_stays_on_nvlink():
    """ep=64 on 256 GB300s: each 64-GPU segment is one rack's NVLink domain, so the expert
    all-to-all never leaves it (before, blocks of 72 straddled racks and it ran over InfiniBand)."""
    from simulator.comm import collective_time, fabric_from_hardware
    fab = fabric_from_hardware(load_hardware("gb300-nvl72", 256))
    inside = collective_time(fab, "all_to_all", 64e6, 64)
    ib = collective_time(fab, "all_to_all", 64e6, 128)
    assert inside < ib / 3


def test_row_note_names_every_filled_value():
    c = compare_row(0, _mb_deepseek(), None)
    assert c.moe and c.accelerator == "gb300" and c.family == "nvidia-blackwell"
    for word in ("pipeline layout", "NVLink domain 64", "zero_stage not stated"):
        assert word in c.note, word


def _fa2(model: str, seq: str) -> dict:
    hidden, layers = ("2048", "24") if "1.3B" in model else ("2560", "32")
    return {"source": FA2, "model": model, "layers": layers, "hidden": hidden, "seq_len": seq,
            "gpu": "A100-80GB SXM", "num_gpus": "8", "dtype": "FP16/BF16", "measured_tflops_per_gpu": "200",
            "notes": ""}


@pytest.mark.parametrize("model, seq, heads, mbs, gbs", [
    ("GPT3-1.3B [FlashAttention-2]", "2048", 16, 8, 512), ("GPT3-1.3B [FlashAttention-2]", "8192", 16, 4, 128),
    ("GPT3-2.7B [FlashAttention-2]", "2048", 20, 4, 512), ("GPT3-2.7B [FlashAttention-2]", "8192", 20, 4, 128)])
def test_flashattention2_rows_run_as_the_repo_configures_them(model, seq, heads, mbs, gbs):
    fills: list[str] = []
    row = _fa2(model, seq)
    m = model_from_row(row, fills)
    plan = plan_from_row(row, m, fills)
    assert m.num_heads == heads and m.hidden // m.num_heads == 128
    assert (plan.tp, plan.pp, plan.mbs, plan.gbs, plan.attention, plan.framework) == (1, 1, mbs, gbs, "flash",
                                                                                         "pytorch")
    assert gbs * int(seq) == 1 << 20 and any("FlashAttention repo" in f for f in fills)


@pytest.mark.parametrize("model, reason", [
    ("GPT3-1.3B [FlashAttention]", "FlashAttention-1"), ("GPT3-1.3B [no FlashAttention (baseline)]", "baseline")])
def test_flashattention_rows_without_a_model_are_skipped_with_the_reason(model, reason):
    row = _fa2(model, "2048")
    with pytest.raises(MeshcastError) as exc:
        plan_from_row(row, model_from_row(row, []), [])
    assert exc.value.field == "attention" and reason in exc.value.reason


def test_megatron_edge_stages_may_give_one_chunk_to_embedding_or_loss():
    """Llama 3.1 405B at pp=16 vp=8 (Megatron-Bridge's GB200 recipe): --account-for-embedding/loss
    makes 128 chunks of one 'layer' each, so the first and last rank hold 7 decoder layers in 8 chunks.
    Megatron-Core runs it; a framework without that accounting still needs vp layers per stage."""
    from models.catalog import load_model
    from simulator.plan import ParallelPlan, PlanError, resolve_plan
    model = load_model("llama3-405b")
    plan = resolve_plan(model, ParallelPlan(tp=4, pp=16, vp=8, mbs=1, gbs=1536, seq=8192,
                                            framework="megatron-core"), 256)
    assert plan.layers_per_stage == (7,) + (8,) * 14 + (7,)
    with pytest.raises(PlanError, match="vp=8 exceeds"):       # a middle stage short of vp layers
        resolve_plan(model, ParallelPlan(tp=4, pp=16, vp=8, mbs=1, gbs=1536, seq=8192, framework="megatron-core",
                                         layers_per_stage=(8, 7) + (8,) * 13 + (7,)), 256)
