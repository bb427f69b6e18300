"""``meshcast catalog``: list or show the models, accelerators, nodes and clusters meshcast knows.

``catalog --model X`` shows a model as meshcast parses it (a catalog name, a YAML, a Hugging
Face config.json, its folder or its hub-cache entry) with its parameter counts;
``--accelerator X`` and ``--cluster X`` show one hardware entry.
"""
from __future__ import annotations

import argparse

from meshcast.commands.common import emit_json

KINDS = ("models", "accelerators", "nodes", "clusters", "frameworks")


def add_parser(sub) -> None:
    """Register the catalog subcommand."""
    p = sub.add_parser("catalog", help="list the catalog, or show a model (parsed, with parameter counts) or hardware",
                       description="List the catalog (models, accelerators, nodes, clusters) or show one entry. "
                                   "--model also takes a model YAML, a Hugging Face config.json, its folder or "
                                   "an ORG/NAME in the local Hugging Face cache, and prints the parsed shape and "
                                   "its parameter counts.")
    p.add_argument("kind", nargs="?", choices=KINDS, help="which catalog to list (default: all)")
    p.add_argument("name", nargs="?", help="an entry of that catalog to show in full")
    p.add_argument("--model", help="show this model as parsed, with parameter counts")
    p.add_argument("--accelerator", help="show this accelerator")
    p.add_argument("--node", help="show this node")
    p.add_argument("--cluster", help="show this cluster")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=run)


def _loaders() -> dict:
    from hardware_specs import (list_accelerators, list_clusters, list_nodes, load_accelerator, load_cluster,
                                load_node)
    from models import list_models, load_model
    from simulator.frameworks import FRAMEWORKS, get_framework

    return {"models": (list_models, load_model), "accelerators": (list_accelerators, load_accelerator),
            "nodes": (list_nodes, load_node), "clusters": (list_clusters, load_cluster),
            "frameworks": (lambda: list(FRAMEWORKS), get_framework)}


def run(args: argparse.Namespace) -> int:
    """List the catalogs, or show one entry."""
    from hardware_specs.errors import MeshcastError, UnknownNameError

    shown = [(kind, getattr(args, flag)) for kind, flag in
             (("models", "model"), ("accelerators", "accelerator"), ("nodes", "node"), ("clusters", "cluster"))
             if getattr(args, flag)]
    if args.name:
        if not args.kind:
            raise MeshcastError("kind", "name the catalog first: meshcast catalog models NAME")
        lister, _ = _loaders()[args.kind]
        if args.name not in lister():
            raise UnknownNameError(args.kind, args.name, lister())
        shown.append((args.kind, args.name))
    if len(shown) > 1:
        raise MeshcastError("catalog", "show one entry at a time (one of NAME, --model, --accelerator, --node, --cluster)")
    if shown:
        kind, name = shown[0]
        if kind == "models":
            _show_model(name, args.json)
        else:
            entry = _loaders()[kind][1](name).model_dump()
            _emit(args.json, {"kind": kind, "entry": entry}, (f"{k}: {v}" for k, v in entry.items()))
        return 0
    listing = {k: _loaders()[k][0]() for k in ([args.kind] if args.kind else KINDS)}
    _emit(args.json, listing, (f"{k} ({len(v)}): {', '.join(v)}" for k, v in listing.items()))
    return 0


def model_summary(model) -> dict:
    """The parsed shape of a :class:`models.ModelSpec` and its parameter counts (docs/json.md)."""
    from models.params import (active_params, embedding_params, layer_params, mtp_params, norm_params,
                               published_params_error, total_params)

    shape = {k: v for k, v in model.model_dump().items() if k not in ("moe", "mla")}
    mla_head = model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim if model.mla else None
    shape.update(num_kv_heads=model.kv_heads, head_dim=mla_head or model.dim_head, gated_mlp=model.gated_mlp,
                 moe=model.moe.model_dump() if model.moe else None, mla=model.mla.model_dump() if model.mla else None,
                 num_moe_layers=model.num_moe_layers)
    kinds = {}
    for i in range(model.num_layers):
        key = f"{model.layer_kind(i)}_layer"
        if key not in kinds:
            lp = layer_params(model, i)
            kinds[key] = {"count": 0, "total": lp.total, "attention": lp.attention, "norms": lp.norms,
                          "dense_mlp": lp.dense_mlp, "router": lp.router, "one_expert": lp.expert,
                          "routed_experts": lp.expert * lp.num_experts, "shared_experts": lp.shared_experts,
                          "active": lp.active + (lp.expert * model.moe.top_k if lp.num_experts else 0)}
            if model.hybrid:
                kinds[key].update(mamba=lp.mamba, latent_projections=lp.latent)
        kinds[key]["count"] += 1
    emb = model.vocab * model.hidden
    params = {"total": total_params(model), "active_per_token": active_params(model),
              "embedding": emb, "output_head": 0 if model.tied_embeddings else emb,
              "position_embedding": embedding_params(model) - emb - (0 if model.tied_embeddings else emb),
              "final_norm": norm_params(model), "per_layer": kinds, "mtp": mtp_params(model),
              "published": model.published_params, "published_error": published_params_error(model)}
    return {"model": shape, "params": params}


def _show_model(name: str, as_json: bool) -> None:
    from models import load_model

    summary = model_summary(load_model(name))
    if as_json:
        emit_json({"kind": "model", **summary}, "catalog")
    else:
        print(format_model(summary))


def _count(n: float) -> str:
    """A parameter count as 8.03B, 70.6M or 4,096."""
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if n >= scale:
            return f"{n / scale:.3g}{unit}" if n < 100 * scale else f"{n / scale:.1f}{unit}"
    return f"{n:,.0f}"


def format_model(summary: dict) -> str:
    """The text view of :func:`model_summary`."""
    m, p = summary["model"], summary["params"]
    kv = ("MLA" if m["mla"] else "MHA" if m["num_kv_heads"] == m["num_heads"]
          else "MQA" if m["num_kv_heads"] == 1 else "GQA")
    lines = [f"{m['name']} ({m['family']})",
             f"  layers {m['num_layers']}, hidden {m['hidden']}, heads {m['num_heads']}, kv heads {m['num_kv_heads']} "
             f"({kv}), head dim {m['head_dim']}, ffn {m['ffn_hidden']}, vocab {m['vocab']}, seq {m['seq_len']}",
             f"  {m['norm']}, {m['activation']}{' (gated)' if m['gated_mlp'] else ''}, position {m['position']}, "
             f"{'tied' if m['tied_embeddings'] else 'untied'} embeddings, "
             f"biases: {'all linears' if m['linear_bias'] else 'QKV only' if m['qkv_bias'] else 'none'}"]
    if m["moe"]:
        e = m["moe"]
        lines.append(f"  MoE: {e['num_experts']} experts, top-{e['top_k']}, expert ffn {e['expert_ffn_hidden']}, "
                     f"{e['shared_experts']} shared, {m['num_moe_layers']} MoE layers (first {e['first_dense_layers']} "
                     f"dense, every {e['layer_frequency']})")
    if m["mla"]:
        lines.append("  MLA: " + ", ".join(f"{k} {v}" for k, v in m["mla"].items()))
    if m["hybrid_pattern"]:
        s = m["mamba"]
        lines.append(f"  hybrid: {m['hybrid_pattern']} (M Mamba-2, * attention, - MLP, E MoE)")
        if s:
            lines.append(f"  Mamba-2: {s['num_heads']} heads x {s['head_dim']}, state {s['state_size']}, "
                         f"{s['n_groups']} groups, conv {s['conv_kernel']}, chunk {s['chunk_size']}")
    if m["moe"] and m["moe"].get("latent_size"):
        lines.append(f"  LatentMoE: experts at latent size {m['moe']['latent_size']}")
    if m["mtp_layers"]:
        lines.append(f"  multi-token prediction modules: {m['mtp_layers']}")
    lines.append(f"parameters: {_count(p['total'])} total ({p['total']:,}), {_count(p['active_per_token'])} active per token")
    lines.append(f"  embedding {_count(p['embedding'])}, output head {_count(p['output_head'])}"
                 + (f", positions {_count(p['position_embedding'])}" if p["position_embedding"] else "")
                 + (f", MTP {_count(p['mtp'])}" if p["mtp"] else ""))
    for key, k in p["per_layer"].items():
        parts = [f"attention {_count(k['attention'])}", f"norms {_count(k['norms'])}"]
        if k.get("mamba"):
            parts = [f"mamba {_count(k['mamba'])}", f"norms {_count(k['norms'])}"]
        elif k["dense_mlp"] or not k["routed_experts"]:
            parts += [f"mlp {_count(k['dense_mlp'])}"]
        else:
            parts += [
                f"router {_count(k['router'])}", f"experts {_count(k['routed_experts'])} ({_count(k['one_expert'])} each)",
                f"shared {_count(k['shared_experts'])}"]
        lines.append(f"  {key.replace('_', ' ')} x{k['count']}: {_count(k['total'])} ({', '.join(parts)})")
    if p["published"]:
        lines.append(f"  published {_count(p['published'])}: {p['published_error']:.1%} off after the figure's rounding")
    for label in ("source", "notes"):
        if m[label]:
            lines.append(f"{label}: {m[label]}")
    return "\n".join(lines)


def _emit(as_json: bool, obj, lines) -> None:
    if as_json:
        emit_json(obj, "catalog")
    else:
        print("\n".join(lines))
