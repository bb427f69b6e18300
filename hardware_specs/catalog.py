"""Catalog access: load accelerators, nodes and clusters by name or YAML path."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from hardware_specs.errors import UnknownNameError
from hardware_specs.schema import Accelerator, Cluster, Node
from hardware_specs.yamlio import catalog_names, load_entry

CATALOG_DIR = Path(__file__).parent / "catalog"
PROFILE_DIR = Path(__file__).parent / "profiles"


@lru_cache(maxsize=None)
def load_accelerator(name_or_path: str) -> Accelerator:
    """The accelerator named ``name_or_path`` (catalog name or YAML file)."""
    return load_entry(name_or_path, CATALOG_DIR / "accelerators", Accelerator, "accelerator")


@lru_cache(maxsize=None)
def load_node(name_or_path: str) -> Node:
    """The node named ``name_or_path`` (catalog name or YAML file)."""
    return load_entry(name_or_path, CATALOG_DIR / "nodes", Node, "node")


@lru_cache(maxsize=None)
def load_cluster(name_or_path: str) -> Cluster:
    """The cluster named ``name_or_path`` (catalog name or YAML file)."""
    return load_entry(name_or_path, CATALOG_DIR / "clusters", Cluster, "cluster")


def list_accelerators() -> list[str]:
    """Catalog names of the accelerators."""
    return catalog_names(CATALOG_DIR / "accelerators")


def list_nodes() -> list[str]:
    """Catalog names of the nodes."""
    return catalog_names(CATALOG_DIR / "nodes")


def list_clusters() -> list[str]:
    """Catalog names of the clusters."""
    return catalog_names(CATALOG_DIR / "clusters")


def accelerator_for_device_name(device_name: str) -> Accelerator:
    """The catalog accelerator whose ``device_names`` include ``device_name`` (torch's name)."""
    for name in list_accelerators():
        acc = load_accelerator(name)
        if device_name in acc.device_names:
            return acc
    known = [d for n in list_accelerators() for d in load_accelerator(n).device_names]
    raise UnknownNameError("info.gpu", device_name, known)


@dataclass(frozen=True)
class Hardware:
    """A resolved system: cluster, its node and accelerator, and the GPUs in use."""

    cluster: Cluster
    node: Node
    accelerator: Accelerator
    num_gpus: int

    @property
    def gpus_per_node(self) -> int:
        return min(self.node.gpus_per_node, self.num_gpus)


def load_hardware(cluster: str, num_gpus: int | None = None) -> Hardware:
    """Resolve ``cluster`` (name or YAML) with its node and accelerator; ``num_gpus`` defaults
    to the whole cluster."""
    from hardware_specs.errors import MeshcastError

    c = load_cluster(cluster)
    node = load_node(c.node)
    acc = load_accelerator(node.accelerator)
    total = c.num_nodes * node.gpus_per_node
    gpus = total if num_gpus is None else num_gpus
    if gpus <= 0:
        raise MeshcastError("gpus", f"must be positive, got {gpus}")
    if gpus > total:
        raise MeshcastError("gpus", f"{gpus} GPUs requested but cluster {c.name!r} has {total} "
                            f"({c.num_nodes} nodes x {node.gpus_per_node})")
    if gpus > node.gpus_per_node and gpus % node.gpus_per_node:
        raise MeshcastError("gpus", f"{gpus} is not a whole number of {node.gpus_per_node}-GPU nodes")
    return Hardware(cluster=c, node=node, accelerator=acc, num_gpus=gpus)
