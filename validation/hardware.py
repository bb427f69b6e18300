"""Which catalog hardware a measurement file ran on: from ``info.gpu`` or a user override."""
from __future__ import annotations

from hardware_specs.catalog import (Hardware, accelerator_for_device_name, list_accelerators, list_clusters,
                                    load_accelerator, load_cluster, load_hardware, load_node)
from hardware_specs.errors import MeshcastError, UnknownNameError
from validation.records import MeasurementFile


def hardware_for(mf: MeasurementFile, override: str | None = None) -> Hardware:
    """The smallest catalog cluster of the file's accelerator that holds ``info.world`` GPUs on
    one node (measurements run inside one node), or the cluster/accelerator named by ``override``."""
    world = mf.world
    if override and override in list_clusters():
        hw = load_hardware(override, world)
        _check_same_accelerator(mf, override, hw.accelerator.name)
        return hw
    if override:
        if override not in list_accelerators():
            raise UnknownNameError("hardware", override, list_clusters() + list_accelerators())
        acc = load_accelerator(override)
        _check_same_accelerator(mf, override, acc.name)
    else:
        acc = accelerator_for_device_name(mf.gpu)
    best = None
    for name in list_clusters():
        cluster = load_cluster(name)
        node = load_node(cluster.node)
        if node.accelerator != acc.name or node.gpus_per_node < world:
            continue
        if best is None or node.gpus_per_node < best[1]:
            best = (name, node.gpus_per_node)
    if best is None:
        raise UnknownNameError("hardware", f"a node of {acc.name} with {world} GPUs", list_clusters())
    return load_hardware(best[0], world)


def _check_same_accelerator(mf: MeasurementFile, override: str, name: str) -> None:
    """An override names the hardware of a file that does not say (or says in words the catalog does
    not know); one that contradicts a known ``info.gpu`` is an error, not a silent re-labelling."""
    try:
        ran_on = accelerator_for_device_name(mf.gpu).name if mf.gpu else None
    except UnknownNameError:
        return
    if ran_on and ran_on != name:
        raise MeshcastError("hardware", f"{mf.path} ran on {mf.gpu} ({ran_on}); --hardware {override} names {name}: "
                                        "measurements are compared on the GPU they ran on (to test a transfer to "
                                        "another GPU: meshcast calibrate --transfer)")
