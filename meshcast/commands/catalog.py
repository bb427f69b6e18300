"""``meshcast catalog``: list or show the models, accelerators, nodes and clusters meshcast knows."""
from __future__ import annotations

import argparse

from hardware_specs import (list_accelerators, list_clusters, list_nodes, load_accelerator, load_cluster,
                            load_node)
from hardware_specs.errors import UnknownNameError
from meshcast.commands.common import emit_json
from models import list_models, load_model, total_params

KINDS = {"models": (list_models, load_model), "accelerators": (list_accelerators, load_accelerator),
         "nodes": (list_nodes, load_node), "clusters": (list_clusters, load_cluster)}


def add_parser(sub) -> None:
    p = sub.add_parser("catalog", help="list or show catalog entries",
                       description="List the catalog (models, accelerators, nodes, clusters) or show one entry.")
    p.add_argument("kind", nargs="?", choices=list(KINDS), help="which catalog (default: all)")
    p.add_argument("name", nargs="?", help="an entry to show in full")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.name:
        lister, loader = KINDS[args.kind]
        if args.name not in lister():
            raise UnknownNameError(args.kind, args.name, lister())
        entry = loader(args.name).model_dump()
        if args.kind == "models":
            entry["total_params"] = total_params(loader(args.name))
        if args.json:
            emit_json(entry)
        else:
            for k, v in entry.items():
                print(f"{k}: {v}")
        return 0
    kinds = [args.kind] if args.kind else list(KINDS)
    listing = {k: KINDS[k][0]() for k in kinds}
    if args.json:
        emit_json(listing)
    else:
        for k, names in listing.items():
            print(f"{k} ({len(names)}): {', '.join(names)}")
    return 0
