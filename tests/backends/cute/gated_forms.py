"""The CuTe designs' gated epilogue forms (SwiGLU, GeGLU: out = act(gate) * up over B's 2N columns), shared by the
CPU compile tests (tests/backends/cute/test_cute_gated.py: check, render, compile for sm_90a / sm_100a, SASS) and the
GPU numerics (tests/gpu/test_gated_cute_gpu.py: the dense sm90 forms against float64 and the eager MLP).

Dense cute:sm90: the catalogue's `mlp_up_swiglu_bf16` on cute:sm90 (halves SwiGLU, 128x128x64 over two warpgroups
and its decode variant's 64x64x128 on one), an interleaved GeGLU-tanh on a ping-pong 64x128 tile with a per-row scale,
and a batched f16 erf-GeGLU (halves) on a 2x1 cluster (B multicast) with a residual. Dense cute:sm100:
`mlp_up_swiglu_bf16` (its two configs: gate and up TMEM accumulators of 128 and 64 columns, two stages each) and an
interleaved erf-GeGLU f16 on a 2x1 cluster with a residual. Grouped cute:sm100: the catalogue's
`moe_gate_up_swiglu_bf16` (interleaved) and a halves SwiGLU with a per-group bias and a zeroed tail."""

from __future__ import annotations

import json

from kernels import catalogue

SWIGLU = {"op": "gated", "fn": "silu", "layout": "halves"}
BF16 = {"a": {"dtype": "bf16", "major": "k"}, "b": {"dtype": "bf16", "major": "k"}, "out": {"dtype": "bf16"}}
F16 = {"a": {"dtype": "f16", "major": "k"}, "b": {"dtype": "f16", "major": "k"}, "out": {"dtype": "f16"}}


def _on(spec: dict, target: str, name: str, **per_target: object) -> dict:
    """A catalogue spec on `target` alone, renamed, with `per_target` as that target's table."""
    spec = json.loads(json.dumps(spec))
    return {**spec, "name": name, "targets": [target], "per_target": {target: per_target} if per_target else {}}


def _dense(name: str, target: str, **fields: object) -> dict:
    return {"name": name, "kind": "gemm", **BF16, "targets": [target], **fields}


def dense_sm90() -> dict[str, dict]:
    mlp = catalogue()["mlp_up_swiglu_bf16"]
    return {s["name"]: s for s in (
        _on(mlp, "cute:sm90", "cg_mlp_up_swiglu", cute={"mma_warpgroups": 2},
            variants=[{"when": {"m_max": 64}, "tile": {"m": 64, "n": 64, "k": 128}, "cute": {"mma_warpgroups": 1}}]),
        _dense("cg_il_gelu_tanh_pingpong", "cute:sm90", tile={"m": 64, "n": 128, "k": 64},
               cute={"schedule": "pingpong"}, epilogue=[{"op": "gated", "fn": "gelu_tanh", "layout": "interleaved"},
                                                        {"op": "scale", "by": "row"}]),
        _dense("cg_halves_gelu_cluster_batch", "cute:sm90", **F16, batch=True, cluster={"m": 2, "n": 1},
               tile={"m": 128, "n": 64, "k": 64}, cute={"mma_warpgroups": 2},
               epilogue=[{"op": "gated", "fn": "gelu", "layout": "halves"}, {"op": "residual", "dtype": "f16"}]),
    )}


def sm100() -> dict[str, dict]:
    mlp, moe = catalogue()["mlp_up_swiglu_bf16"], catalogue("grouped")["moe_gate_up_swiglu_bf16"]
    return {s["name"]: s for s in (
        _on(mlp, "cute:sm100", "cg100_mlp_up_swiglu"),
        _dense("cg100_il_gelu_cluster", "cute:sm100", **F16, cluster={"m": 2, "n": 1}, tile={"m": 128, "n": 64, "k": 64},
               epilogue=[{"op": "gated", "fn": "gelu", "layout": "interleaved"}, {"op": "residual", "dtype": "f16"}]),
        _on(moe, "cute:sm100", "cg100_moe_gate_up_swiglu"),
        {"name": "cg100_grouped_halves_bias", "kind": "grouped", **BF16, "targets": ["cute:sm100"],
         "groups": {"index": "sizes", "tail": "zero"}, "tile": {"m": 128, "n": 128, "k": 64},
         "epilogue": [SWIGLU, {"op": "bias", "dtype": "bf16"}]},
    )}
