"""The hardware catalog: every entry loads and is plausible, and bad input fails with a named field."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from hardware_specs import (MeshcastError, SpecError, UnknownNameError, accelerator_for_device_name,
                            list_accelerators, list_clusters, list_nodes, load_accelerator,
                            load_cluster, load_hardware, load_node)
from hardware_specs.catalog import CATALOG_DIR

MEASUREMENTS_DIR = Path(__file__).resolve().parents[1] / "validation" / "measurements"

ALL_FILES = sorted(CATALOG_DIR.glob("*/*.yaml"))
HOPPER_BLACKWELL = [a for a in list_accelerators()
                    if load_accelerator(a).family in ("nvidia-hopper", "nvidia-blackwell")]

# A minimal valid accelerator entry, for building broken variants in tmp_path.
GOOD_ACCELERATOR = {
    "name": "toy", "vendor": "acme", "family": "acme-1", "device_names": ["ACME Toy"],
    "peak_flops_dense": {"bf16": 1.0e+12},
    "hbm_capacity_bytes": 1.0e+9, "hbm_bandwidth_Bps": 1.0e+11, "l2_bytes": 1.0e+6,
    "sram_per_sm_bytes": 65536, "sm_count": 4, "boost_clock_hz": 1.0e+9, "tdp_w": 100,
    "sources": {k: "test" for k in ("peak_flops_dense", "hbm_capacity_bytes", "hbm_bandwidth_Bps",
                                    "l2_bytes", "sram_per_sm_bytes", "sm_count", "boost_clock_hz",
                                    "tdp_w")},
}


def _write(tmp_path: Path, data: dict, name: str = "toy.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


# --- every entry loads, resolves and is named after its file -------------------------------------

def test_catalog_is_populated():
    assert {"a100-40gb-sxm", "a100-80gb-sxm", "h100-sxm", "h100-pcie", "h200-sxm", "b200", "gb200",
            "b300", "gb300", "mi250x", "mi300x", "l40s"} <= set(list_accelerators())
    assert {"dgx-a100", "dgx-a100-40gb", "dgx-h100", "hgx-h100-pcie", "dgx-h200", "dgx-b200",
            "gb200-nvl72-tray", "dgx-b300", "gb300-nvl72-tray", "frontier-mi250x", "mi300x-node", "l40s-node", "h100-sxm-1gpu",
            "h200-sxm-1gpu", "h200-sxm-2gpu"} <= set(list_nodes())
    assert {"dgx-a100-superpod", "dgx-a100-40gb-superpod", "dgx-h100", "dgx-h200", "dgx-b200",
            "gb200-nvl72", "dgx-b300", "gb300-nvl72", "frontier", "mi300x-cluster", "l40s-cluster", "dgx-h100-half-ib",
            "h100-1gpu", "h200-1gpu", "h200-2gpu"} <= set(list_clusters())


@pytest.mark.parametrize("path", ALL_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_catalog_file_loads_under_its_own_name(path):
    loader = {"accelerators": load_accelerator, "nodes": load_node, "clusters": load_cluster}
    entry = loader[path.parent.name](path.stem)
    assert entry.name == path.stem
    assert loader[path.parent.name](str(path)) == entry  # by path, too


_NUMBERISH = re.compile(r"^[-+]?(\d[\d_]*)?\.?\d*([eE][-+]?\d+)?$")


def _strings(node):
    if isinstance(node, dict):
        for v in node.values():
            yield from _strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from _strings(v)
    elif isinstance(node, str):
        yield node


@pytest.mark.parametrize("path", ALL_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_numbers_are_yaml_numbers_not_strings(path):
    # PyYAML (YAML 1.1) reads 3.35e12 as a *string*; pydantic would coerce it silently. Write 3.35e+12.
    raw = yaml.safe_load(path.read_text())
    bad = [s for s in _strings(raw) if s and _NUMBERISH.match(s) and any(c.isdigit() for c in s)]
    assert not bad, f"{path.name}: numbers written as strings: {bad}"


@pytest.mark.parametrize("name", list_nodes())
def test_every_node_accelerator_resolves(name):
    node = load_node(name)
    acc = load_accelerator(node.accelerator)
    assert acc.name == node.accelerator


@pytest.mark.parametrize("name", list_clusters())
def test_every_cluster_resolves_to_hardware(name):
    hw = load_hardware(name)
    assert hw.node.name == hw.cluster.node
    assert hw.accelerator.name == hw.node.accelerator
    assert hw.num_gpus == hw.cluster.num_nodes * hw.node.gpus_per_node


# --- plausibility of the figures -----------------------------------------------------------------

@pytest.mark.parametrize("name", list_accelerators())
def test_bf16_peak_at_least_fp32(name):
    peaks = load_accelerator(name).peak_flops_dense
    assert peaks.bf16 is not None and peaks.fp32 is not None
    assert peaks.bf16 >= peaks.fp32
    if peaks.tf32 is not None:
        assert peaks.bf16 >= peaks.tf32 >= peaks.fp32


BLACKWELL_ULTRA = ("b300", "gb300")


@pytest.mark.parametrize("name", HOPPER_BLACKWELL)
def test_fp8_is_twice_bf16_on_hopper_and_blackwell(name):
    peaks = load_accelerator(name).peak_flops_dense
    assert peaks.fp8 == pytest.approx(2 * peaks.bf16, rel=1e-3)
    if peaks.fp4 is not None:
        # Blackwell Ultra's tensor cores run dense NVFP4 at 3x FP8 (15 PF on GB300, 13.5 on HGX B300;
        # NVIDIA Blackwell Ultra blog and HGX B300 specifications), Blackwell's at 2x
        ratio = 3 if name in BLACKWELL_ULTRA else 2
        assert peaks.fp4 == pytest.approx(ratio * peaks.fp8, rel=1e-3)


def test_fp4_only_on_blackwell():
    for name in list_accelerators():
        acc = load_accelerator(name)
        assert (acc.peak_flops_dense.fp4 is not None) == (acc.family == "nvidia-blackwell"), name


@pytest.mark.parametrize("node, per_direction", [
    ("dgx-a100", 300e9), ("dgx-a100-40gb", 300e9),     # NVLink 3: 600 GB/s bidirectional
    ("dgx-h100", 450e9), ("dgx-h200", 450e9),          # NVLink 4: 900 GB/s bidirectional
    ("dgx-b200", 900e9), ("gb200-nvl72-tray", 900e9),  # NVLink 5: 1.8 TB/s bidirectional
])
def test_nvlink_bandwidth_is_per_direction(node, per_direction):
    link = load_node(node).intra_node
    assert link.kind == "nvlink"
    assert link.bandwidth_per_direction_Bps == per_direction


def test_nvl72_domain_spans_the_rack():
    tray = load_node("gb200-nvl72-tray")
    assert tray.gpus_per_node == 4 and tray.intra_node.domain_gpus == 72
    assert tray.host_link.kind == "c2c"


def test_mi250x_is_modelled_per_gcd():
    acc = load_accelerator("mi250x")
    assert acc.sm_count == 110                          # CUs of one GCD, not 220
    assert acc.hbm_capacity_bytes == 64 * 2**30
    assert "GCD" in acc.notes
    assert load_node("frontier-mi250x").gpus_per_node == 8  # 4 packages = 8 GCDs


def test_superpod_holds_the_megatron_3072_gpu_runs():
    assert load_hardware("dgx-a100-superpod", 3072).num_gpus == 3072


def test_half_ib_what_if_differs_only_in_nics():
    full, half = load_cluster("dgx-h100"), load_cluster("dgx-h100-half-ib")
    assert (full.node, full.num_nodes) == (half.node, half.num_nodes)
    assert half.tiers[0].nics_per_node * 2 == full.tiers[0].nics_per_node


def test_calibration_machines_have_no_tiers():
    for name, gpus in (("h100-1gpu", 1), ("h200-1gpu", 1), ("h200-2gpu", 2)):
        hw = load_hardware(name)
        assert hw.cluster.tiers == [] and hw.cluster.num_nodes == 1 and hw.num_gpus == gpus


def test_calibration_profiles_only_where_profiles_exist():
    profiles = {n: load_accelerator(n).calibration_profile for n in list_accelerators()}
    assert profiles["h100-sxm"] == "h100-sxm" and profiles["h200-sxm"] == "h200-sxm"
    assert {n for n, p in profiles.items() if p} == {"h100-sxm", "h200-sxm"}


# --- device names --------------------------------------------------------------------------------

@pytest.mark.parametrize("device_name, expected", [
    ("NVIDIA H200", "h200-sxm"), ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA H100 PCIe", "h100-pcie"),
    ("NVIDIA A100-SXM4-80GB", "a100-80gb-sxm"), ("NVIDIA A100-SXM4-40GB", "a100-40gb-sxm"),
    ("NVIDIA B200", "b200"), ("NVIDIA GB200", "gb200"), ("NVIDIA L40S", "l40s"),
    ("NVIDIA B300 SXM6 AC", "b300"), ("NVIDIA GB300", "gb300"),
    ("AMD Instinct MI300X", "mi300x"), ("AMD Instinct MI250X", "mi250x"),
    ("AMD Instinct MI250X / MI250", "mi250x"),
])
def test_accelerator_for_device_name(device_name, expected):
    assert accelerator_for_device_name(device_name).name == expected


def test_device_names_are_unique_across_the_catalog():
    seen: dict[str, str] = {}
    for name in list_accelerators():
        for dev in load_accelerator(name).device_names:
            assert dev not in seen, f"{dev!r} claimed by {seen.get(dev)} and {name}"
            seen[dev] = name


def test_unknown_device_name_raises():
    with pytest.raises(UnknownNameError) as exc:
        accelerator_for_device_name("NVIDIA H201")
    assert exc.value.field == "info.gpu"


def test_measurement_files_match_the_catalog():
    files = sorted(MEASUREMENTS_DIR.glob("*.json")) if MEASUREMENTS_DIR.is_dir() else []
    if not files:
        pytest.skip("no measurement files in validation/measurements")
    for path in files:
        info = json.loads(path.read_text()).get("info", {})
        acc = accelerator_for_device_name(info["gpu"])
        if "sm_count" in info:
            assert info["sm_count"] == acc.sm_count, path.name
        if "l2_bytes" in info:
            assert info["l2_bytes"] == acc.l2_bytes, path.name
        if "total_memory_bytes" in info:  # CUDA-visible memory sits just below the physical capacity
            assert 0.97 * acc.hbm_capacity_bytes <= info["total_memory_bytes"] <= acc.hbm_capacity_bytes


# --- errors name the file, the line or the field -------------------------------------------------

def test_malformed_yaml_names_the_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: toy\nvendor: acme\npeak_flops_dense: {bf16: 1.0e+12\nsm_count: 4\n")
    with pytest.raises(SpecError) as exc:
        load_accelerator(str(path))
    assert "line 4" in str(exc.value)
    assert exc.value.field == str(path)


def test_missing_source_names_the_field(tmp_path):
    data = dict(GOOD_ACCELERATOR, sources={k: v for k, v in GOOD_ACCELERATOR["sources"].items()
                                           if k != "tdp_w"})
    with pytest.raises(SpecError) as exc:
        load_accelerator(str(_write(tmp_path, data)))
    assert "'tdp_w'" in str(exc.value) and "sources" in str(exc.value)


def test_good_toy_entry_loads(tmp_path):
    assert load_accelerator(str(_write(tmp_path, GOOD_ACCELERATOR))).name == "toy"


@pytest.mark.parametrize("where", ["top", "nested"])
def test_unknown_field_is_rejected_by_name(tmp_path, where):
    data = dict(GOOD_ACCELERATOR)
    if where == "top":
        data["hbm_bandwith_Bps"] = 1.0
        expected = "hbm_bandwith_Bps"
    else:
        data["peak_flops_dense"] = {"bf16": 1.0e+12, "int8": 2.0e+12}
        expected = "peak_flops_dense.int8"
    with pytest.raises(SpecError) as exc:
        load_accelerator(str(_write(tmp_path, data)))
    assert exc.value.field.endswith(expected)
    assert "unknown field" in exc.value.reason


def test_unknown_field_in_a_node_link(tmp_path):
    node = yaml.safe_load((CATALOG_DIR / "nodes" / "dgx-h100.yaml").read_text())
    node["intra_node"]["bandwidth_Bps"] = 1.0
    with pytest.raises(SpecError) as exc:
        load_node(str(_write(tmp_path, node)))
    assert exc.value.field.endswith("intra_node.bandwidth_Bps")


@pytest.mark.parametrize("loader, typo, suggestion", [
    (load_accelerator, "h100-sxn", "h100-sxm"),
    (load_node, "dgx-h10", "dgx-h100"),
    (load_cluster, "dgx-a100-superpd", "dgx-a100-superpod"),
])
def test_unknown_name_suggests_a_close_match(loader, typo, suggestion):
    with pytest.raises(UnknownNameError) as exc:
        loader(typo)
    assert suggestion in exc.value.suggestions
    assert f"did you mean '{suggestion}'" in str(exc.value)


def test_unknown_node_of_a_cluster_file(tmp_path):
    path = _write(tmp_path, {"name": "c", "node": "dgx-h1000", "num_nodes": 1, "sources": {}})
    with pytest.raises(UnknownNameError):
        load_hardware(str(path))


# --- load_hardware: GPU counts -------------------------------------------------------------------

@pytest.mark.parametrize("gpus", [1004, 12])
def test_partial_nodes_are_rejected(gpus):
    with pytest.raises(MeshcastError) as exc:
        load_hardware("dgx-h100", gpus)
    assert exc.value.field == "gpus"
    assert "whole number" in exc.value.reason


def test_whole_nodes_are_accepted():
    # 1000 GPUs = 125 whole 8-GPU nodes, so it is a valid request on dgx-h100.
    assert load_hardware("dgx-h100", 1000).num_gpus == 1000
    assert load_hardware("dgx-h100", 4).gpus_per_node == 4   # part of one node is fine


@pytest.mark.parametrize("gpus", [0, -8, 16384 + 8])
def test_impossible_gpu_counts_are_rejected(gpus):
    with pytest.raises(MeshcastError) as exc:
        load_hardware("dgx-h100", gpus)
    assert exc.value.field == "gpus"
