"""``meshcast catalog``: list or show the models, accelerators, nodes and clusters meshcast knows."""
from __future__ import annotations

import argparse

from hardware_specs import (list_accelerators, list_clusters, list_nodes, load_accelerator, load_cluster,
                            load_node)
from hardware_specs.errors import UnknownNameError
from meshcast.commands.common import emit_json
from models import list_models, load_model, total_params
from simulator.frameworks import FRAMEWORKS, get_framework

KINDS = {"models": (list_models, load_model), "accelerators": (list_accelerators, load_accelerator),
         "nodes": (list_nodes, load_node), "clusters": (list_clusters, load_cluster),
         "frameworks": (lambda: list(FRAMEWORKS), get_framework)}


def add_parser(sub) -> None:
    """Register the catalog subcommand."""
    p = sub.add_parser("catalog", help="list or show catalog entries",
                       description="List the catalog (models, accelerators, nodes, clusters, frameworks) or show one entry.")
    p.add_argument("kind", nargs="?", choices=list(KINDS), help="which catalog (default: all)")
    p.add_argument("name", nargs="?", help="an entry to show in full")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """List the catalogs or show one entry."""
    if args.name:
        lister, loader = KINDS[args.kind]
        if args.name not in lister():
            raise UnknownNameError(args.kind, args.name, lister())
        entry = loader(args.name).model_dump()
        if args.kind == "models":
            entry["total_params"] = total_params(loader(args.name))
        _emit(args.json, entry, (f"{k}: {v}" for k, v in entry.items()))
        return 0
    listing = {k: KINDS[k][0]() for k in ([args.kind] if args.kind else KINDS)}
    _emit(args.json, listing, (f"{k} ({len(v)}): {', '.join(v)}" for k, v in listing.items()))
    return 0


def _emit(as_json: bool, obj, lines) -> None:
    if as_json:
        emit_json(obj)
    else:
        print("\n".join(lines))
