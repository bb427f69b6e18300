"""Attention backends as separate kernels (issue #12 item 3): the harness's case list
(validation/harness/attention_backends.py) and, with torch present, its Megatron-local pattern."""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _harness():
    spec = importlib.util.spec_from_file_location("attention_backends",
                                                  ROOT / "validation" / "harness" / "attention_backends.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


H = _harness()


def test_case_list_is_well_formed():
    cs = H.cases()
    keys = {"set", "seq", "head_dim", "causal", "batch", "heads", "kv_heads", "backend", "direction", "layout"}
    seen = set()
    for c in cs:
        assert set(c) == keys
        assert c["set"] in ("sweep", "random")
        assert c["backend"] in H.BACKENDS and c["direction"] in ("fwd", "fwd_bwd")
        assert 512 <= c["seq"] <= 16384 and c["head_dim"] in (64, 128)
        assert all(isinstance(c[k], int) and c[k] >= 1 for k in ("batch", "heads", "kv_heads", "seq"))
        assert c["heads"] % c["kv_heads"] == 0
        assert c["layout"] == ("sbhd" if c["backend"] == "unfused_torch" else c["layout"])
        assert c["layout"] in ("bshd", "bhsd", "sbhd")
        key = tuple(sorted(c.items()))
        assert key not in seen, c
        seen.add(key)
    # every SDPA backend runs every shape, forward and forward+backward
    shapes = {tuple((k, c[k]) for k in ("set", "seq", "head_dim", "causal", "batch", "heads", "kv_heads")) for c in cs}
    for shp in shapes:
        for be in H.SDPA_BACKENDS:
            for d in ("fwd", "fwd_bwd"):
                assert dict(shp, backend=be, direction=d, layout="bshd") in cs
    assert {c["set"] for c in cs} == {"sweep", "random"}
    assert any(c["kv_heads"] < c["heads"] for c in cs if c["set"] == "sweep")
    assert {c["causal"] for c in cs} == {True, False}


def test_random_set_is_seeded_and_held_out():
    a, b = H.random_shapes(), H.random_shapes()
    assert a == b                                       # seeded: the same draw every time
    assert H.random_shapes(seed=H.RANDOM_SEED + 1) != a
    sweep = {(s["seq"], s["head_dim"], s["batch"], s["heads"]) for s in H.sweep_shapes()}
    assert not any((s["seq"], s["head_dim"], s["batch"], s["heads"]) in sweep for s in a)
    assert any(s["seq"] % 128 for s in a)              # some unaligned sequence lengths


def test_estimated_time_within_budget():
    """The whole section on one H200 at the harness's conservative rates (flash/cuDNN 200 TFLOP/s,
    efficient 100, math 30 ps per score element, backward 2.4-4.5x) fits 4 minutes with room."""
    total = H.estimate_total_s()
    assert total <= 0.75 * H.BUDGET_S, total
    for c in H.cases():
        t = H.estimate_call_s(c)
        assert 0.5e-3 <= t <= 0.2, (c, t)               # each call ~1-100 ms (a factor 2 of slack)


def test_shape_rule():
    b, h, kv = H.shape(16384, 128)
    assert (b, h, kv) == (1, 6, 6)
    b, h, kv = H.shape(1024, 64, group=4)
    assert h == 32 and kv == 8 and b * h * 1024 ** 2 == pytest.approx(H.SCORES[64], rel=0.02)
    assert H.fwd_flops(dict(batch=1, heads=2, seq=4, head_dim=8, causal=True)) == 4 * 2 * 16 * 8 * 0.5


@pytest.mark.parametrize("causal", [True, False])
def test_unfused_torch_pattern_matches_sdpa_math(causal):
    """Megatron's local pattern computes attention (GQA, both masks), in Megatron's [s, b, h, d]."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    torch.manual_seed(0)
    c = dict(batch=2, heads=4, kv_heads=2, seq=64, head_dim=32, causal=causal, backend="unfused_torch")
    q, k, v = (torch.randn(64, 2, n, 32, dtype=torch.float64).permute(1, 2, 0, 3) for n in (4, 2, 2))
    got = H.build_forward(c, q, k, v)()                               # [s, b, h, d]
    ref = F.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), is_causal=causal)
    assert torch.allclose(got.permute(1, 2, 0, 3), ref, atol=1e-5)
    assert math.isfinite(float(got.abs().sum()))


def test_small_run_on_cpu(tmp_path):
    """The whole GPU path on CPU with tiny shapes: every case gives a timed or an unsupported record."""
    pytest.importorskip("torch")
    import json
    import subprocess
    import sys
    out = tmp_path / "a.json"
    subprocess.run([sys.executable, str(ROOT / "validation" / "harness" / "attention_backends.py"), "--small",
                    "--out", str(out)], check=True, capture_output=True, timeout=300)
    recs = json.loads(out.read_text())["records"]
    assert len(recs) == len(H.cases(small=True))
    for r in recs:
        assert (r["time_s"] is None) == bool(r.get("unsupported") or r.get("oom")), r
        if r.get("unsupported"):
            assert r["reason"]
