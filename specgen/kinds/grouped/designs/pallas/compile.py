"""The grouped Pallas TPU design's compile hook: Pallas's Mosaic lowering of a rendered module's kernel on a CPU
machine (`jax.jit(...).lower(lowering_platforms=("tpu",))`: jaxpr -> Mosaic MLIR in a tpu_custom_call), as the
dense Pallas design's hook does for its TPU modules. libtpu's own compile, and with it the VMEM the chip would
allocate, needs a TPU: `compiler_smem` stays None and the plan's VMEM figure is reported beside it.

The problem is ragged against every block (two and a bit blocks per dim, 3 groups; N two blocks for a gated
N-major B, whose launcher takes N a multiple of the block), with and without the
caller's `out` for an untouched tail (the base block is a second input then), so the K-tail masks, the edge blocks
and both store paths lower; a ragged-K kernel lowers the same sizes as A (M, K) and B (K, N) in their stored majors
over 3 groups of K rows. Imports jax: only `specgen compile` imports this module."""

from __future__ import annotations

import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from specgen.compile import CompileResult, compiler_message
from specgen.kinds.grouped.spec import GroupedSpec
from specgen.spec.dtypes import DType
from specgen.spec.epilogue import b_columns
from specgen.targets import TargetInfo

GROUPS = 3


def problem_structs(spec: GroupedSpec, m: int, n: int, k: int) -> tuple[Callable[..., Any], list[Any]]:
    """(struct(shape, dtype), the entry's arguments as jax.ShapeDtypeStructs): A (m, k), B over GROUPS groups in its
    stored major (2n columns with a gated epilogue), the index (GROUPS,) int32, the epilogue's arguments (a scalar as f32). The grouped Mosaic GPU
    design's hook lowers the same problem."""
    import jax
    import jax.numpy as jnp

    from specgen.kinds.grouped.designs.pallas.design import JNP_DTYPES

    def struct(shape: tuple[int, ...], dtype: DType) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(shape, jnp.dtype(JNP_DTYPES[dtype]))

    bn = n * b_columns(spec)  # a gated epilogue's B holds gate and up columns
    args = [struct((m, k), spec.a.dtype),
            struct((GROUPS, bn, k) if spec.b.major == "k" else (GROUPS, k, bn), spec.b.dtype),
            struct((GROUPS,), DType.int32)]
    for arg in spec.runtime_args():
        shape = {"group_n": (GROUPS, n), "vec_m": (m,), "scalar": ()}[arg.shape]
        args.append(struct(shape, DType.f32 if arg.shape == "scalar" else arg.dtype))
    return struct, args


def compile_module(module: ModuleType, target: TargetInfo) -> CompileResult:
    import jax

    meta = module.METADATA
    spec = GroupedSpec.model_validate(module.SPEC)
    m, n, k = (2 * block + 3 for block in (module.BLOCK_M, module.BLOCK_N, module.BLOCK_K))
    if meta.get("gated") and spec.b.major == "mn":  # the up half's blocks start at N: N a multiple of the block
        n = 2 * module.BLOCK_N
    struct, args = problem_structs(spec, m, n, k)
    if spec.groups.ragged == "k":  # the weight gradient: A (M, K) and B (K, N) in their stored majors, out (G, M, N)
        args = [struct((m, k) if spec.a.major == "k" else (k, m), spec.a.dtype),
                struct((n, k) if spec.b.major == "k" else (k, n), spec.b.dtype), *args[2:]]
    start = time.perf_counter()
    try:
        # untouched: without the caller's `out`, then with it (passed last: the base block is one more input)
        for base in ([()] if spec.groups.tail == "zero" or spec.groups.ragged == "k" else [(), (struct((m, n), spec.out.dtype),)]):
            def call(*xs: object, with_out: bool = bool(base)) -> object:
                return module._call(*xs[:-1], xs[-1], interpret=False) if with_out else module._call(
                    *xs, None, interpret=False)

            lowered = jax.jit(call).trace(*args, *base).lower(lowering_platforms=("tpu",))
            if "tpu_custom_call" not in lowered.as_text():
                raise RuntimeError("the lowered module holds no tpu_custom_call (the kernel did not lower to Mosaic)")
    except Exception as e:  # the lowering's own message is the useful part
        return CompileResult(meta["kernel"], target.name, meta["vmem_bytes"], None, time.perf_counter() - start,
                             compiler_message(e))
    return CompileResult(meta["kernel"], target.name, meta["vmem_bytes"], None, time.perf_counter() - start)
