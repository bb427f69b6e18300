"""Hardware catalog: accelerators, nodes and clusters as cited YAML, with their schemas."""
from hardware_specs.catalog import (Hardware, accelerator_for_device_name, list_accelerators,
                                    list_clusters, list_nodes, load_accelerator, load_cluster,
                                    load_hardware, load_node)
from hardware_specs.errors import MeshcastError, PlanError, SpecError, UnknownNameError
from hardware_specs.schema import Accelerator, Cluster, Node, ScaleOutTier

__all__ = ["Accelerator", "Cluster", "Hardware", "MeshcastError", "Node", "PlanError", "ScaleOutTier",
           "SpecError", "UnknownNameError", "accelerator_for_device_name", "list_accelerators",
           "list_clusters", "list_nodes", "load_accelerator", "load_cluster", "load_hardware", "load_node"]
