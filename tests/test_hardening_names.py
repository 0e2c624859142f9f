"""Names in specs (issue 5): every kernel or argument name either renders a module that compiles and
computes the right numbers, or is refused at load with an error naming its field.

The reserved sets in specgen/spec/names.py are held to the templates mechanically: every rendered
variant is tokenized, and what it emits that is not derived from a spec name must be exactly the
reserved set (no missing entry, no stale one).
"""

from __future__ import annotations

import ast
import io
import itertools
import json
import keyword
import re
import tokenize

import pytest
import torch
from backends.cute.gated_forms import dense_sm90
from backends.cute.gated_forms import sm100 as cute_sm100_gated
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kernels import catalogue, interpreter_variant, load_module, triton_only

from specgen.kinds.grouped.testing.cute_sm100_specs import CUTE_SM100_FORMS as GROUPED_CUTE_SM100_FORMS
from specgen.kinds.grouped.testing.mgpu_specs import MGPU_FORMS as GROUPED_MGPU_FORMS
from specgen.kinds.grouped.testing.mgpu_specs import (
    MGPU_FP8_TRAINING_FORMS as GROUPED_MGPU_FP8_TRAINING_FORMS,
)
from specgen.kinds.grouped.testing.mgpu_specs import (
    MGPU_GATED_TRAINING_FORMS as GROUPED_MGPU_GATED_TRAINING_FORMS,
)
from specgen.kinds.grouped.testing.mgpu_specs import MGPU_RAGGED_K_FORMS as GROUPED_MGPU_RAGGED_K_FORMS
from specgen.kinds.grouped.testing.mgpu_specs import MGPU_TRAINING_FORMS as GROUPED_MGPU_TRAINING_FORMS
from specgen.kinds.grouped.testing.specs import CUTE_FORMS as GROUPED_CUTE_FORMS
from specgen.kinds.grouped.testing.specs import CUTE_FP8_TRAINING_FORMS as GROUPED_CUTE_FP8_TRAINING_FORMS
from specgen.kinds.grouped.testing.specs import CUTE_RAGGED_K_FORMS as GROUPED_CUTE_RAGGED_K_FORMS
from specgen.kinds.grouped.testing.specs import CUTE_TRAINING_FORMS as GROUPED_CUTE_TRAINING_FORMS
from specgen.kinds.grouped.testing.specs import FORMS as GROUPED_FORMS
from specgen.kinds.grouped.testing.specs import RAGGED_K_FORMS as GROUPED_RAGGED_K_FORMS
from specgen.kinds.grouped.testing.tpu_specs import TPU_FORMS as GROUPED_TPU_FORMS
from specgen.kinds.grouped.testing.tpu_specs import TPU_GATED_FORMS as GROUPED_TPU_GATED_FORMS
from specgen.kinds.grouped.testing.tpu_specs import TPU_RAGGED_K_FORMS as GROUPED_TPU_RAGGED_K_FORMS
from specgen.kinds.grouped.testing.tpu_specs import TPU_TRAINING_FORMS as GROUPED_TPU_TRAINING_FORMS
from specgen.registry import design_for
from specgen.render.catalogue import render_module, render_modules
from specgen.resolve import resolve
from specgen.spec.load import SpecError, load_paths, load_text
from specgen.spec.names import ARG_DERIVED, KERNEL_DERIVED, MODULE_NAMES, RESERVED, derived_names
from specgen.targets import TARGETS, Backend

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")

BASE = interpreter_variant(catalogue()["gemm_bf16"])
EVERY_OP = [
    {"op": "bias", "along": "n", "dtype": "f16"}, {"op": "bias", "along": "m", "name": "bm"},
    {"op": "scale", "by": "scalar", "value": 2.0}, {"op": "scale", "by": "scalar"},
    {"op": "scale", "by": "row"}, {"op": "scale", "by": "col"}, {"op": "scale", "by": "rowcol"},
    *({"op": "activation", "fn": f} for f in ("relu", "gelu", "gelu_tanh", "silu", "sigmoid")),
    {"op": "residual", "dtype": "f16"}, {"op": "residual", "dtype": "f16", "beta": 0.5, "name": "r2"},
    {"op": "clamp", "min": -1.0, "max": 1.0}, {"op": "clamp", "min": 0.0}, {"op": "clamp", "max": 0.0},
    {"op": "cast", "dtype": "f16"},
]


def spec_of(name: str = "kern", epilogue: list | None = None, **changes: object) -> dict:
    s = json.loads(json.dumps(BASE))
    s.update(name=name, epilogue=epilogue or [], targets=["triton:sm90", "triton:sm100"], description="")
    s.update(changes)
    return s


def load_one(spec: dict):
    (ls,) = load_text(json.dumps({"kernels": [spec]}), "<test>", ".json")
    return ls


def refusal(spec: dict):
    with pytest.raises(SpecError) as info:
        load_one(spec)
    return info.value.issues


def variants():
    """The catalogue's Triton and CuTe modules and every epilogue op under every schedule form."""
    for s in catalogue().values():
        triton = triton_only(s)
        if triton["targets"]:  # (the TPU-only specs render Pallas modules only: pallas_variants)
            yield triton
    for i, (persistent, tma, batch, raster, sub, flat) in enumerate(itertools.product([False, True], repeat=6)):
        yield spec_of(f"v{i}", EVERY_OP, batch=batch,
                      schedule={"persistent": persistent, "raster": "along_n" if raster else "along_m", "group_m": 8},
                      triton={"num_warps": 8, "tma": tma, "epilogue_subtile": sub, "flatten": flat})
    # 32-bit operands (input_precision) and a 16-bit accumulator (out_dtype)
    yield spec_of("v_f32", EVERY_OP[:3], a={"dtype": "f32", "major": "k"}, b={"dtype": "f32", "major": "k"},
                  out={"dtype": "f32"})
    yield spec_of("v_acc16", EVERY_OP[:3], accumulator="f16")
    # the CuTe sm90 modules: the catalogue's, and every op under each schedule form
    for s in catalogue().values():
        if "cute:sm90" in s["targets"]:
            yield {**s, "name": f"{s['name']}_cute", "targets": ["cute:sm90"]}
    for i, (persistent, batch, raster) in enumerate(itertools.product([False, True], repeat=3)):
        yield spec_of(f"c{i}", EVERY_OP, batch=batch, targets=["cute:sm90"], tile={"m": 128, "n": 128, "k": 64},
                      schedule={"persistent": persistent, "raster": "along_n" if raster else "along_m", "group_m": 8})
    # the ping-pong schedule, and CuTe size-selected variants (one of them ping-pong)
    yield spec_of("c_pingpong", EVERY_OP, targets=["cute:sm90"], tile={"m": 128, "n": 128, "k": 64},
                  cute={"schedule": "pingpong"})
    yield spec_of("c_sizes", EVERY_OP[:3], targets=["cute:sm90"], tile={"m": 128, "n": 256, "k": 64},
                  variants=[{"when": {"m_max": 64}, "tile": {"m": 64, "n": 128, "k": 64}},
                            {"when": {"n_max": 2048}, "tile": {"m": 128, "n": 128, "k": 64},
                             "cute": {"schedule": "pingpong"}}])
    # CuTe split-K in the cluster (its handoff barriers, partials and DSMEM stores), swapped and not
    yield spec_of("c_split", EVERY_OP[:3], targets=["cute:sm90"], tile={"m": 128, "n": 128, "k": 64}, per_target={},
                  variants=[{"when": {"m_max": 16}, "tile": {"m": 16, "n": 64, "k": 64}, "cute": {"swap_ab": True},
                             "schedule": {"split_k": 2}},
                            {"when": {"m_max": 64}, "tile": {"m": 64, "n": 64, "k": 64}, "schedule": {"split_k": 3}}])
    # the CuTe sm100 modules: the catalogue's, and every op on 1-CTA and 2-CTA tiles, batched or not
    for s in catalogue().values():
        if "cute:sm100" in s["targets"]:
            yield {**s, "name": f"{s['name']}_sm100", "targets": ["cute:sm100"]}
    for i, (two, batch) in enumerate(itertools.product([False, True], repeat=2)):
        yield spec_of(f"b{i}", EVERY_OP, batch=batch, targets=["cute:sm100"], tile={"m": 128, "n": 128, "k": 64},
                      cluster={"m": 2 if two else 1, "n": 1}, cute={"two_cta": two}, schedule={"group_m": 8},
                      variants=[{"when": {"m_max": 64}, "tile": {"m": 128, "n": 64, "k": 64},
                                 "cluster": {"m": 1, "n": 1}, "cute": {"two_cta": False}}])
    # the CuTe sm100 backward (spec: training; the sm90 module's host and columns pass on the tcgen05 kernel): both save
    # modes, 1-CTA and 2-CTA, a gated op's (halves) and an fp8 forward's
    for save, two in (("preact", False), ("recompute", True)):
        yield spec_of(f"b_train_{save}", [{"op": "bias"}, {"op": "activation", "fn": "gelu_tanh"}], targets=["cute:sm100"],
                      tile={"m": 128, "n": 128, "k": 64}, cluster={"m": 2 if two else 1, "n": 1}, cute={"two_cta": two},
                      a={"dtype": "bf16", "major": "k"}, b={"dtype": "bf16", "major": "k"}, out={"dtype": "bf16"},
                      per_target={}, variants=[], training={"save": save})
        yield spec_of(f"b_ftrain_{save}", [{"op": "scale", "by": "rowcol"}, {"op": "bias", "dtype": "bf16"},
                                            {"op": "activation", "fn": "relu"}], targets=["cute:sm100"],
                      tile={"m": 128, "n": 128, "k": 128}, a={"dtype": "fp8_e4m3", "major": "k"},
                      b={"dtype": "fp8_e5m2", "major": "k"}, out={"dtype": "bf16"}, per_target={}, variants=[],
                      training={"save": save})
        yield spec_of(f"b_gtrain_{save}", [{"op": "gated", "fn": "silu", "layout": "halves"}, {"op": "bias"}],
                      targets=["cute:sm100"], tile={"m": 128, "n": 128, "k": 64}, a={"dtype": "bf16", "major": "k"},
                      b={"dtype": "bf16", "major": "k"}, out={"dtype": "bf16"}, per_target={}, variants=[],
                      training={"save": save})
    # size-selected variants (the launcher's selection locals), with TMA boxes and with pointers
    for tma in (False, True):
        yield spec_of(f"v_sizes_{tma}", EVERY_OP[:3], schedule={"persistent": tma},
                      triton={"num_warps": 8, "tma": tma},
                      variants=[{"when": {"m_max": 16}, "tile": {"m": 16, "n": 64, "k": 64}},
                                {"when": {"m_max": 64, "n_max": 1024}, "tile": {"m": 64, "n": 64, "k": 64}}])
    # the grouped kind's Triton modules: every template branch (index formats, tails, B majors, epilogue ops)
    yield from GROUPED_FORMS.values()
    yield from GROUPED_RAGGED_K_FORMS.values()  # (the weight gradient's: TMA boxes and masked pointers)
    yield from GROUPED_TPU_FORMS.values()  # and its Pallas TPU modules
    yield from GROUPED_TPU_GATED_FORMS.values()  # (their gated epilogue)
    yield from GROUPED_TPU_RAGGED_K_FORMS.values()  # (the weight gradient's: groups along K)
    yield from GROUPED_TPU_TRAINING_FORMS.values()  # (their backward: a custom_vjp and the companions' kernels)
    yield from GROUPED_CUTE_FORMS.values()  # and its CuTe sm90 modules
    yield from GROUPED_CUTE_RAGGED_K_FORMS.values()  # (their ragged K: the weight gradient)
    yield from GROUPED_CUTE_TRAINING_FORMS.values()  # (their backward: the companions' kernels, the columns pass)
    yield from GROUPED_CUTE_FP8_TRAINING_FORMS.values()  # (an fp8 forward's: both G, the 16-bit A and B copies)
    yield from GROUPED_MGPU_FORMS.values()  # and its Mosaic GPU modules
    yield from GROUPED_MGPU_RAGGED_K_FORMS.values()  # (the weight gradient's: groups along K)
    yield from GROUPED_MGPU_TRAINING_FORMS.values()  # (their backward: a custom_vjp and the companions' kernels)
    yield from GROUPED_MGPU_GATED_TRAINING_FORMS.values()  # (a gated op's backward: pre and G over B's 2N columns)
    yield from GROUPED_MGPU_FP8_TRAINING_FORMS.values()  # (an fp8 forward's: the scales, the converted A and B)
    yield from GROUPED_CUTE_SM100_FORMS.values()  # and its CuTe sm100 modules
    # a backward of the other chains (spec: training; the dense Triton design's chain pass) in both save modes, every
    # op, and an fp8 forward's (rowwise scales, the dequantized operands' gradients)
    chain = [op for op in EVERY_OP if op["op"] != "activation"][:-1] + [{"op": "activation", "fn": "gelu_tanh"},
                                                                      {"op": "cast", "dtype": "f16"}]
    for save in ("preact", "recompute"):
        yield spec_of(f"v_train_{save}", chain, training={"save": save})
        # the CuTe sm90 design's chain pass (session 33): the same chain, unbatched; and the CuTe sm100 design's
        yield spec_of(f"c_train_chain_{save}", chain, targets=["cute:sm90"], tile={"m": 128, "n": 128, "k": 64},
                      cute={"mma_warpgroups": 2}, per_target={}, variants=[], training={"save": save})
        yield spec_of(f"b_train_chain_{save}", chain, targets=["cute:sm100"], tile={"m": 128, "n": 128, "k": 64},
                      per_target={}, variants=[], training={"save": save})
    # the batched backward (batch = true): the GEMMs' batch strides and rebased pointers, the streaming passes' batch
    # axis, for the chain pass, the columns pass and a gated epilogue's
    for save in ("preact", "recompute"):
        yield spec_of(f"v_train_batch_{save}", chain, batch=True, training={"save": save})
        yield spec_of(f"v_train_batch_gelu_{save}", [{"op": "bias"}, {"op": "activation", "fn": "gelu"}], batch=True,
                      training={"save": save})
    yield spec_of("v_train_batch_gated", [{"op": "gated", "fn": "silu", "layout": "interleaved"}, {"op": "bias"}],
                  batch=True, training={"save": "preact"}, per_target={}, variants=[])
    yield spec_of("v_train_fp8", [{"op": "scale", "by": "rowcol"}, {"op": "bias", "dtype": "bf16"}],
                  a={"dtype": "fp8_e4m3", "major": "k"}, b={"dtype": "fp8_e4m3", "major": "k"},
                  tile={"m": 64, "n": 64, "k": 64}, training={"save": "preact"})
    # the CuTe sm90 design's (G_b and G_a from the fp8 columns kernel, the 16-bit copies), both save modes, with and
    # without a bias and an activation
    for save, chain in (("preact", [{"op": "bias", "dtype": "bf16"}, {"op": "activation", "fn": "gelu_tanh"}]),
                        ("recompute", [{"op": "activation", "fn": "relu"}]), ("preact", [])):
        yield spec_of(f"c_train_fp8_{save}_{len(chain)}", [{"op": "scale", "by": "rowcol"}, *chain],
                      a={"dtype": "fp8_e4m3", "major": "k"}, b={"dtype": "fp8_e5m2", "major": "k"}, out={"dtype": "bf16"},
                      tile={"m": 128, "n": 128, "k": 128}, targets=["cute:sm90"], training={"save": save})
    # ... batched (session 34: the columns pass over the batches' rows, scale_a for each batch)
    yield spec_of("c_train_fp8_batch", [{"op": "scale", "by": "rowcol"}, {"op": "bias", "dtype": "bf16"},
                                        {"op": "activation", "fn": "relu"}], batch=True,
                  a={"dtype": "fp8_e4m3", "major": "k"}, b={"dtype": "fp8_e4m3", "major": "k"}, out={"dtype": "bf16"},
                  tile={"m": 128, "n": 128, "k": 128}, targets=["cute:sm90"], training={"save": "recompute"})
    # the grouped Triton design's fp8 forward's backward (its rowwise scales, G twice), both save modes
    for save in ("preact", "recompute"):
        yield {"name": f"g_train_fp8_{save}", "kind": "grouped", "a": {"dtype": "fp8_e5m2", "major": "k"},
               "b": {"dtype": "fp8_e4m3", "major": "k"}, "out": {"dtype": "bf16"}, "groups": {"index": "offs"},
               "epilogue": [{"op": "scale", "by": "rowcol"}, {"op": "bias", "dtype": "bf16"},
                            {"op": "activation", "fn": "gelu"}], "tile": {"m": 64, "n": 64, "k": 64},
               "targets": ["triton:sm90"], "training": {"save": save}}
    yield from {**dense_sm90(), **cute_sm100_gated()}.values()  # the CuTe designs' gated epilogues (both kinds)
    # the CuTe sm90 gated backward (spec: training after a gated op): both save modes, both layouts, a bias after it
    for save, layout in (("preact", "halves"), ("recompute", "interleaved"), ("preact", "interleaved")):
        yield spec_of(f"c_gtrain_{save}_{layout}", [{"op": "gated", "fn": "silu", "layout": layout}, {"op": "bias"}],
                      a={"dtype": "bf16", "major": "k"}, b={"dtype": "bf16", "major": "k"}, out={"dtype": "bf16"},
                      targets=["cute:sm90"], tile={"m": 128, "n": 128, "k": 64}, per_target={}, variants=[],
                      training={"save": save})
    # split-K (its workspace, counters and reduction), both reductions, batched and not, both schedules
    for tma, batch in ((False, False), (True, True)):
        yield spec_of(f"v_split_{tma}", EVERY_OP[:3], batch=batch, schedule={"persistent": tma, "split_k": 2},
                      triton={"num_warps": 8, "tma": tma},
                      variants=[{"when": {"m_max": 16}, "tile": {"m": 16, "n": 64, "k": 64},
                                 "schedule": {"split_k": 4, "split_k_reduction": "atomic"}}])


def emitted_names(text: str) -> set[str]:
    """Every identifier token that is not an attribute (`tl.load`'s `load`) nor a keyword."""
    out, prev = set(), None
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.NAME and not (prev is not None and prev.string == ".") and not keyword.iskeyword(tok.string):
            out.add(tok.string)
        if tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
            prev = tok
    return out


def _scope(nodes: list[ast.AST]) -> tuple[set[str], set[str], list[ast.AST]]:
    """(names bound, names read, nested functions) of one function scope, not looking inside the nested
    functions' bodies (their decorators and defaults belong to this scope)."""
    bound: set[str] = set()
    used: set[str] = set()
    nested: list[ast.AST] = []
    stack = list(nodes)
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Name):
            (bound.add if isinstance(n.ctx, ast.Store) else used.add)(n.id)
        if isinstance(n, (ast.FunctionDef, ast.Lambda)):
            nested.append(n)
            if isinstance(n, ast.FunctionDef):
                bound.add(n.name)
                stack.extend(n.decorator_list)
            stack.extend(n.args.defaults + [d for d in n.args.kw_defaults if d is not None])
        else:
            stack.extend(ast.iter_child_nodes(n))
    return bound, used, nested


def _free_names(fn: ast.FunctionDef | ast.Lambda, outer: set[str]) -> set[str]:
    """The names a function (and the functions nested in it) reads from the module or the builtins."""
    args = {a.arg for a in fn.args.args + fn.args.kwonlyargs + fn.args.posonlyargs}
    args |= {a.arg for a in (fn.args.vararg, fn.args.kwarg) if a is not None}  # *refs, **kw
    bound, used, nested = _scope(fn.body if isinstance(fn.body, list) else [fn.body])
    scope = outer | args | bound
    free = used - scope
    for inner in nested:
        free |= _free_names(inner, scope)
    return free


def module_level_names(text: str) -> set[str]:
    """Names the module binds at its top level, and the free names its functions read (globals, builtins)."""
    tree = ast.parse(text)
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.add(node.name)
            out |= {n.id for d in node.decorator_list for n in ast.walk(d) if isinstance(n, ast.Name)}
            if isinstance(node, ast.FunctionDef):
                out |= _free_names(node, set())
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names}
        else:
            out |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    return out


def pallas_variants():
    """The catalogue's Pallas TPU and Mosaic GPU modules (Mosaic GPU's also with its size-selected variants)
    and every epilogue op in every layout, batched or not, for both."""
    for s in catalogue().values():
        for memory in ("vmem", "smem"):
            targets = [t for t in s["targets"] if TARGETS[t].backend is Backend.pallas and TARGETS[t].memory == memory]
            if targets:
                yield {**s, "targets": targets, "variants": [], "per_target": {}}
        if "pallas:gpu_sm90" in s["targets"]:  # as shipped: its size-selected variants (the config choice)
            yield {**s, "name": f"{s['name']}_mgpu", "targets": ["pallas:gpu_sm90"],
                   "per_target": {k: v for k, v in s.get("per_target", {}).items() if k == "pallas:gpu_sm90"}}
    for i, (batch, a, b, target) in enumerate(itertools.product([False, True], ["k", "mn"], ["k", "mn"],
                                                                ["pallas:tpu_v5e", "pallas:gpu_sm90"])):
        # (Mosaic GPU: a 2-CTA cluster along M or N, and both rasters)
        gpu = {} if target.endswith("v5e") else {"cluster": {"m": 2, "n": 1} if a == "k" else {"m": 1, "n": 2},
                                                 "schedule": {"raster": "along_n" if b == "k" else "along_m"}}
        yield spec_of(f"p{i}", EVERY_OP, batch=batch, a={"dtype": "f16", "major": a}, b={"dtype": "f16", "major": b},
                      tile={"m": 128, "n": 128, "k": 128 if target.endswith("v5e") else 64}, targets=[target], **gpu)
    # Mosaic GPU's gated epilogue: both layouts (interleaved K-major), batched or not, the rest of the chain after it
    for i, (layout, b, batch) in enumerate((("halves", "mn", False), ("interleaved", "k", True))):
        yield spec_of(f"pg{i}", [{"op": "gated", "fn": "silu", "layout": layout}, *EVERY_OP[:6], *EVERY_OP[12:]],
                      batch=batch, a={"dtype": "f16", "major": "k"}, b={"dtype": "f16", "major": b},
                      tile={"m": 128, "n": 128, "k": 64}, targets=["pallas:gpu_sm90"], cluster={"m": 1, "n": 1},
                      per_target={}, variants=[])
    # a TPU backward (spec: training) in both save modes, each chain's form, either major
    for i, (save, chain, a) in enumerate(itertools.product(["preact", "recompute"], [EVERY_OP[:1] + EVERY_OP[7:8],
                                                                                  EVERY_OP[7:8], EVERY_OP[:1], []], ["k", "mn"])):
        yield spec_of(f"t{i}", chain, a={"dtype": "f16", "major": a}, b={"dtype": "f16", "major": "mn" if i % 3 else "k"},
                      tile={"m": 128, "n": 128, "k": 128}, targets=["pallas:tpu_v5e"], training={"save": save})
    # a Mosaic GPU backward (spec: training): the same forms, every major pair (the transposed stores)
    for i, (save, chain, a) in enumerate(itertools.product(["preact", "recompute"], [EVERY_OP[:1] + EVERY_OP[7:8],
                                                                                  EVERY_OP[7:8], EVERY_OP[:1], []], ["k", "mn"])):
        yield spec_of(f"tg{i}", chain, a={"dtype": "f16", "major": a}, b={"dtype": "f16", "major": "mn" if i % 3 else "k"},
                      tile={"m": 128, "n": 128, "k": 64}, targets=["pallas:gpu_sm90"], cluster={"m": 1, "n": 1},
                      per_target={}, variants=[], training={"save": save})
    # a Mosaic GPU gated backward: both layouts in both save modes, with the bias after the gate and without
    for i, (save, layout) in enumerate(itertools.product(["preact", "recompute"], ["halves", "interleaved"])):
        yield spec_of(f"tgg{i}", [{"op": "gated", "fn": "silu", "layout": layout}, *(EVERY_OP[:1] if i % 2 else [])],
                      a={"dtype": "f16", "major": "k"}, b={"dtype": "f16", "major": "k"}, tile={"m": 128, "n": 128, "k": 64},
                      targets=["pallas:gpu_sm90"], cluster={"m": 1, "n": 1}, per_target={}, variants=[],
                      training={"save": save})

    # a TPU gated backward (halves): both save modes, a bias after the gate or not, either major of A and of B
    for i, (save, a, b) in enumerate(itertools.product(["preact", "recompute"], ["k", "mn"], ["k", "mn"])):
        yield spec_of(f"tgt{i}", [{"op": "gated", "fn": "silu", "layout": "halves"}, *(EVERY_OP[:1] if i % 3 else [])],
                      a={"dtype": "f16", "major": a}, b={"dtype": "f16", "major": b}, tile={"m": 128, "n": 128, "k": 128},
                      targets=["pallas:tpu_v5e"], training={"save": save})
    # a TPU fp8 forward's backward: the rowwise scales, then a bias and an activation or neither, both save modes
    for i, (save, rest) in enumerate(itertools.product(["preact", "recompute"], [EVERY_OP[:1] + EVERY_OP[7:8], []])):
        yield spec_of(f"tf8{i}", [EVERY_OP[6], *rest], a={"dtype": "fp8_e4m3", "major": "k"},
                      b={"dtype": "fp8_e4m3", "major": "mn" if i % 2 else "k"}, out={"dtype": "bf16"},
                      tile={"m": 128, "n": 128, "k": 128}, targets=["pallas:tpu_v7x"], training={"save": save})
    # a TPU and a Mosaic GPU backward of the other chains (session 33): every op in both save modes (Mosaic GPU's
    # recompute without the residuals before pre), and a chain no op of reads a value
    for i, (save, chain) in enumerate((("preact", EVERY_OP), ("recompute", EVERY_OP), ("recompute", EVERY_OP[12:14]))):
        yield spec_of(f"tch{i}", chain, a={"dtype": "f16", "major": "k"}, b={"dtype": "f16", "major": "mn"},
                      tile={"m": 128, "n": 128, "k": 128}, targets=["pallas:tpu_v5e"], training={"save": save})
        yield spec_of(f"tchg{i}", [op for op in chain if save == "preact" or op["op"] != "residual" or i == 2],
                      a={"dtype": "f16", "major": "k"}, b={"dtype": "f16", "major": "mn"}, tile={"m": 128, "n": 128, "k": 64},
                      targets=["pallas:gpu_sm90"], cluster={"m": 1, "n": 1}, per_target={}, variants=[],
                      training={"save": save})
    # a Mosaic GPU fp8 forward's backward: the same chains, both save modes
    for i, (save, rest) in enumerate(itertools.product(["preact", "recompute"], [EVERY_OP[:1] + EVERY_OP[7:8], []])):
        yield spec_of(f"tgf8{i}", [EVERY_OP[6], *rest], a={"dtype": "fp8_e4m3", "major": "k"},
                      b={"dtype": "fp8_e4m3", "major": "k"}, out={"dtype": "bf16"}, tile={"m": 128, "n": 128, "k": 64},
                      targets=["pallas:gpu_sm90"], cluster={"m": 1, "n": 1}, per_target={}, variants=[],
                      training={"save": save})
    # a batched forward's backward on both (session 33; batch_backward.jinja's `_per_batch`): every op's chain pass
    # (preact), a gated op with a bias (recompute), a bias and an activation
    for i, (target, save, chain) in enumerate((("pallas:tpu_v5e", "preact", EVERY_OP),
                                               ("pallas:tpu_v5e", "recompute", [{"op": "gated", "fn": "silu", "layout": "halves"}, *EVERY_OP[:1]]),
                                               ("pallas:gpu_sm90", "preact", EVERY_OP),
                                               ("pallas:gpu_sm90", "recompute", EVERY_OP[:1] + EVERY_OP[7:8]))):
        gpu = {"cluster": {"m": 1, "n": 1}, "per_target": {}, "variants": []} if target.endswith("sm90") else {}
        yield spec_of(f"tb{i}", chain, batch=True, a={"dtype": "f16", "major": "k"}, b={"dtype": "f16", "major": "k"},
                      tile={"m": 128, "n": 128, "k": 128 if target.endswith("v5e") else 64}, targets=[target],
                      training={"save": save}, **gpu)
    # ... and a batched fp8 forward's on both (session 34): the scales, a bias and an activation, both save modes
    for i, (target, save) in enumerate((("pallas:tpu_v7x", "preact"), ("pallas:gpu_sm90", "recompute"))):
        gpu = {"cluster": {"m": 1, "n": 1}, "per_target": {}, "variants": []} if target.endswith("sm90") else {}
        yield spec_of(f"tbf8{i}", [EVERY_OP[6], *EVERY_OP[:1], *EVERY_OP[7:8]], batch=True,
                      a={"dtype": "fp8_e4m3", "major": "k"}, b={"dtype": "fp8_e4m3", "major": "k"}, out={"dtype": "bf16"},
                      tile={"m": 128, "n": 128, "k": 128 if target.endswith("v7x") else 64}, targets=[target],
                      training={"save": save}, **gpu)
    # ... and the TPU gated forward alone with B N-major (its N check), batched
    yield spec_of("tgf", [{"op": "gated", "fn": "silu", "layout": "halves"}, *EVERY_OP[:1]], batch=True,
                  a={"dtype": "f16", "major": "k"}, b={"dtype": "f16", "major": "mn"}, tile={"m": 128, "n": 128, "k": 128},
                  targets=["pallas:tpu_v5e"])


def render_pallas_module(ls) -> str:
    """The one kernel module the Pallas design renders for the spec's targets (a Mosaic GPU module comes
    with its package's __init__.py)."""
    design = design_for(ls.spec.kind, "pallas:tpu_v5e")
    assert design is not None
    files = design.render(ls, ls.spec.targets, {str(t): resolve(ls.spec, t) for t in ls.spec.targets})
    (text,) = [text for path, text in files.items() if not path.endswith("__init__.py")]
    return text


@pytest.fixture(scope="module")
def rendered() -> list[tuple[object, str]]:
    """Every design's modules: Triton, CuTe, Pallas TPU and Mosaic GPU."""
    out = []
    for s in variants():
        ls = load_one(s)
        out.extend((ls, text) for text in render_modules(ls, ls.spec.targets).values())
    for s in pallas_variants():
        ls = load_one(s)
        out.append((ls, render_pallas_module(ls)))
    return out


def user_names(ls) -> set[str]:
    names = {ls.spec.name, f"_{ls.spec.name}_kernel", f"{ls.spec.name}_torch", f"{ls.spec.name}_jax",
             f"{ls.spec.name}_jax_torch", *(p.format(ls.spec.name) for p in KERNEL_DERIVED)}
    for arg in ls.spec.runtime_args():
        names |= {arg.name, *derived_names(arg.name)}
    return names


# --- the reserved sets are exactly what the templates emit ----------------------------------------------
def test_reserved_names_are_exactly_the_identifiers_the_templates_emit(rendered):
    emitted: set[str] = set()
    for ls, text in rendered:
        emitted |= {n for n in emitted_names(text) - user_names(ls) if not n.startswith("__")}
    assert emitted - RESERVED == set(), "templates emit names that specgen/spec/names.py does not reserve"
    assert RESERVED - emitted == set(), "names.py reserves names no template emits any more"


def test_module_names_are_exactly_the_module_level_identifiers(rendered):
    emitted: set[str] = set()
    for ls, text in rendered:
        emitted |= {n for n in module_level_names(text) - user_names(ls) if not n.startswith("__")}
    assert emitted == set(MODULE_NAMES)


@pytest.mark.parametrize("op", [
    {"op": "bias", "along": "n", "name": "qq"}, {"op": "bias", "along": "m", "name": "qq"},
    {"op": "scale", "by": "scalar", "name": "qq"}, {"op": "scale", "by": "row", "name": "qq"},
    {"op": "scale", "by": "col", "name": "qq"}, {"op": "residual", "dtype": "f16", "name": "qq"},
])
@pytest.mark.parametrize(("persistent", "tma", "batch"), [(False, False, False), (True, True, True), (True, False, True)])
def test_derived_names_follow_the_declared_patterns(op, persistent, tma, batch):
    """Every identifier built from an argument's name is one of ARG_DERIVED; the kernel's own derived
    name is `_<name>_kernel`: the collision checks at load see every name a spec brings in."""
    ls = load_one(spec_of("zkz", [op], batch=batch, schedule={"persistent": persistent},
                          triton={"num_warps": 4, "tma": tma}))
    names = emitted_names(render_module(ls, ls.spec.targets))
    assert {n for n in names if "qq" in n} <= {"qq", *derived_names("qq")}
    assert {n for n in names if "zkz" in n} == {"zkz", "_zkz_kernel"}


@pytest.mark.parametrize("op", [
    {"op": "bias", "along": "n", "name": "qq"}, {"op": "bias", "along": "m", "name": "qq"},
    {"op": "scale", "by": "scalar", "name": "qq"}, {"op": "scale", "by": "row", "name": "qq"},
    {"op": "scale", "by": "col", "name": "qq"}, {"op": "residual", "dtype": "f16", "name": "qq"},
])
@pytest.mark.parametrize("batch", [False, True])
def test_cute_derived_names_follow_the_declared_patterns(op, batch):
    """The CuTe modules build names from an argument's by the same ARG_DERIVED patterns ("m{}", "r_{}")."""
    ls = load_one(spec_of("zkz", [op], batch=batch, targets=["cute:sm90"], tile={"m": 128, "n": 128, "k": 64}))
    (text,) = render_modules(ls, ls.spec.targets).values()
    names = emitted_names(text)
    assert {n for n in names if "qq" in n} <= {"qq", *derived_names("qq")}
    assert {n for n in names if "zkz" in n} == {"zkz", "zkz_jax", "zkz_jax_torch"}  # the JAX entry and its torch door


# --- refused names, each with its field -------------------------------------------------------------------
ARG_REFUSED = sorted((RESERVED - {"a", "b", "out"}) | set(keyword.kwlist) | set(keyword.softkwlist)
                     | {"__init__", "__x", "bad-name", "1x", "x y", "é", "x" * 65})
KERNEL_REFUSED = sorted(MODULE_NAMES | set(keyword.kwlist) | set(keyword.softkwlist)
                        | {"__init__", "__main__", "__x", "CON", "nul", "Com1", "bad.name", "x" * 65})


@pytest.mark.parametrize("name", ARG_REFUSED)
def test_reserved_argument_names_are_refused_naming_the_field(name):
    (issue,) = refusal(spec_of("kern", [{"op": "bias", "along": "n", "name": name}]))
    assert issue.path == "kernels[0].epilogue[0].name", issue


@pytest.mark.parametrize("name", KERNEL_REFUSED)
def test_reserved_kernel_names_are_refused_naming_the_field(name):
    (issue,) = refusal(spec_of(name))
    assert issue.path == "kernels[0].name", issue


@pytest.mark.parametrize(("epilogue", "clash"), [
    ([{"op": "bias", "name": "x1"}, {"op": "bias", "along": "m", "name": "x1_v"}], "x1_v"),
    ([{"op": "residual", "dtype": "f16", "name": "r"}, {"op": "scale", "by": "scalar", "name": "s_r"}], "s_r"),
    ([{"op": "scale", "by": "row", "name": "q_ptr"}, {"op": "bias", "name": "q"}], "q_ptr"),
    ([{"op": "residual", "dtype": "f16", "name": "c"}, {"op": "bias", "name": "stride_cm"}], "stride_cm"),
])
def test_derived_names_may_not_collide_with_another_argument(epilogue, clash):
    (issue,) = refusal(spec_of("kern", epilogue))
    assert issue.path == "kernels[0]" and f"the name '{clash}'" in issue.message


@pytest.mark.parametrize("name", ["o", "a_", "ask", "A"])
def test_names_whose_derived_names_are_reserved_are_refused(name):
    # o -> stride_om (the output's stride), ask -> mask, A -> mA (CuTe's global A), a_ -> a__ptr is fine
    # but a_ is not reserved ("stride" itself is reserved now: a CuTe local; ARG_REFUSED covers it)
    problem = refusal if any(d in RESERVED for d in derived_names(name)) else None
    if problem:
        (issue,) = problem(spec_of("kern", [{"op": "residual", "dtype": "f16", "name": name}]))
        assert "derives" in issue.message and issue.path == "kernels[0].epilogue[0].name"
    else:
        load_one(spec_of("kern", [{"op": "residual", "dtype": "f16", "name": name}]))


def test_case_only_kernel_name_clashes_are_refused(tmp_path):
    # gemm.py and Gemm.py are one file on macOS and Windows
    (tmp_path / "s.json").write_text(json.dumps({"kernels": [spec_of("Gemm"), spec_of("gemm")]}))
    with pytest.raises(SpecError, match="differs only in case from 'Gemm'"):
        load_paths([tmp_path])


# --- accepted names render, compile and compute -----------------------------------------------------------
def adjacent(name: str, i: int) -> str:
    """A name one step from a reserved one, what a user would write next to it: the three forms
    (`name_`, swapped case, `my_name`) taken in turn down the sorted list, so each reserved name is met once
    and each form about a third of the time (every form of every name was ~3,300 renders: two minutes of CI)."""
    return (f"{name}_", name.swapcase(), f"my_{name}")[i % 3]


KERNEL_LOCALS = sorted(RESERVED - MODULE_NAMES - {"_"})
ADJACENT = sorted({adjacent(r, i) for i, r in enumerate(sorted(RESERVED | set(keyword.kwlist) | set(keyword.softkwlist)))})


def loads(spec: dict):
    """The loaded spec, or None where the spec is refused."""
    try:
        return load_one(spec)
    except SpecError:
        return None


def test_reserved_adjacent_names_render_and_compile():
    """Every reserved-adjacent name that loads, as a kernel name and as an argument of each kind, renders
    a module that compiles; kernel names may be the kernel's locals (they live at module level)."""
    kernels = [n for n in ADJACENT + KERNEL_LOCALS if loads(spec_of(n))]
    args = [n for n in ADJACENT if loads(numeric_spec("kern", [n, "p1", "p2", "p3"], "f16", False, False))]
    assert len(kernels) > len(ADJACENT) // 2 and len(args) > len(ADJACENT) // 2
    for i in range(max(len(kernels), -(-len(args) // 4))):
        names = args[4 * i : 4 * i + 4]
        names += [f"p{j}" for j in range(4 - len(names))]
        kernel = kernels[i % len(kernels)]
        ls = loads(numeric_spec(kernel, names, "f16", i % 2 == 1, i % 4 == 1))
        # two of these names derive the same name: each one on its own, then
        loaded = [ls] if ls is not None else [load_one(numeric_spec(kernel, [n, "p1", "p2", "p3"], "f16", False, False)) for n in names]
        for ls_ in loaded:
            compile(render_module(ls_, ls_.spec.targets), f"{kernel}.py", "exec")


def run_case(module, spec: dict, seed: int) -> None:
    """Call the rendered kernel on seeded data with a NaN-poisoned output; compare with float64."""
    g = torch.Generator().manual_seed(seed)
    dt = getattr(torch, {"f16": "float16", "f32": "float32"}[spec["a"]["dtype"]])
    m, n, k = 37, 40, 56  # ragged M, N and K tiles; K rows 16-byte aligned for TMA
    a = torch.randn(m, k, generator=g).to(dt)
    b = torch.randn(n, k, generator=g).to(dt).t()  # K-major B: (K, N), K contiguous
    ref = a.double() @ b.double()
    args = []
    for op in spec["epilogue"]:
        if op["op"] == "bias":
            v = torch.randn(n, generator=g)
            ref = ref + v.double()[None, :]
        elif op["op"] == "scale" and op["by"] == "row":
            v = torch.rand(m, generator=g) + 0.5
            ref = ref * v.double()[:, None]
        elif op["op"] == "residual":
            v = torch.randn(m, n, generator=g)
            ref = ref + op["beta"] * v.double()
        else:  # scalar scale
            v = 0.75
            ref = ref * v
        args.append(v)
    out = torch.full((m, n), float("nan"), dtype=dt)
    module_fn = getattr(module, spec["name"])
    result = module_fn(a, b, *args, out=out)
    assert result is out and not out.isnan().any(), "output elements never written"
    tol = 2e-2 if dt is torch.float16 else 2e-4
    torch.testing.assert_close(out.double(), ref.to(dt).double(), atol=tol, rtol=tol)


def numeric_spec(kernel: str, names: list[str], dtype: str, persistent: bool, tma: bool) -> dict:
    ops = [{"op": "bias", "along": "n", "dtype": "f32", "name": names[0]},
           {"op": "scale", "by": "row", "name": names[1]},
           {"op": "residual", "dtype": "f32", "beta": 0.5, "name": names[2]},
           {"op": "scale", "by": "scalar", "name": names[3]}]
    return spec_of(kernel, ops, a={"dtype": dtype, "major": "k"}, b={"dtype": dtype, "major": "k"},
                   out={"dtype": dtype}, tile={"m": 16, "n": 32, "k": 32},
                   schedule={"persistent": persistent, "group_m": 2}, triton={"num_warps": 4, "tma": tma})


@pytest.mark.parametrize(("kernel", "names"), [
    ("acc", ["offs_", "acc_", "Acc", "tile"]),         # the kernel named like its accumulator ("offs" is the grouped kind's group index)
    ("offs_m", ["torch_", "tl_", "matches", "Case"]),
    ("device", ["M_", "Kb", "x1", "out_"]),
    ("result", ["bias", "row_scale", "c", "alpha"]),   # the defaults
])
def test_reserved_adjacent_names_compute_the_right_result(kernel_dir, kernel, names):
    for dtype, persistent in (("f32", False), ("f16", True)):
        spec = numeric_spec(f"{kernel}" if dtype == "f32" else f"{kernel}_h", names, dtype, persistent, persistent)
        load_one(spec)
        run_case(load_module(spec, kernel_dir), spec, seed=len(kernel))


# --- random identifiers -----------------------------------------------------------------------------------
identifiers = st.one_of(
    st.from_regex(re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,30}"), fullmatch=True),
    st.sampled_from(sorted(RESERVED | set(keyword.kwlist) | set(keyword.softkwlist))),
    st.sampled_from(ADJACENT),
    st.builds(lambda r, p: p.format(r), st.sampled_from(sorted(RESERVED)), st.sampled_from(ARG_DERIVED)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kernel=identifiers, names=st.lists(identifiers, min_size=4, max_size=4), persistent=st.booleans())
def test_random_names_load_and_compile_or_are_refused(kernel, names, persistent):
    spec = numeric_spec(kernel, names, "f32", persistent, persistent)
    try:
        ls = load_one(spec)
    except SpecError as e:
        assert e.issues and all(i.path.startswith("kernels[0]") for i in e.issues)
        return
    compile(render_module(ls, ls.spec.targets), f"{kernel}.py", "exec")


_SEEN: set[str] = set()


# Mostly names that load (the refusals are the test above's business): drawing every name from the mix
# above leaves too few valid specs for hypothesis's filter budget.
plain_identifiers = st.one_of(st.from_regex(re.compile(r"[A-Za-z][A-Za-z0-9_]{0,30}"), fullmatch=True),
                              st.sampled_from(ADJACENT))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.filter_too_much])
@given(kernel=plain_identifiers, names=st.lists(plain_identifiers, min_size=4, max_size=4, unique=True),
       dtype=st.sampled_from(["f16", "f32"]),
       persistent=st.booleans())
def test_random_names_compute_the_right_result(kernel_dir, kernel, names, dtype, persistent):
    spec = numeric_spec(kernel, names, dtype, persistent, persistent)
    try:
        load_one(spec)
    except SpecError:
        assume(False)
    assume(kernel.lower() not in _SEEN)  # one spec per torch custom op name per process
    _SEEN.add(kernel.lower())
    run_case(load_module(spec, kernel_dir), spec, seed=len(kernel) + 7)
