"""The grouped Mosaic GPU design's compile hook: the module's kernel, in each of its configs (the default and every
size-selected variant), lowered for CUDA on a CPU machine, as the dense Mosaic GPU hook lowers its configs
(kinds/gemm/designs/pallas/compile.py: the whole lowering jax runs in Python, the kernel body, layout inference,
the SMEM allocation and its limit; `compiler_smem` is the dynamic shared memory of the kernel's launch, beside
the plan's). What is left (NVVM, ptxas) runs only where a GPU is.

The problem is ragged against every tile (two and a bit tiles per dim, K past the pipeline's depth, 3 groups), with
and without the caller's `out` for an untouched tail, so the K and N tails, the store ladder and both tail paths
lower; a ragged-K kernel (the weight gradient) lowers the same sizes as A (M, K) and B (K, N) in their stored
majors, K every group's rows. A training module's backward GEMMs follow (`backward`), a row `<kernel>[role]` each:
the role's launcher (`_pre_call`, `_dgrad_call`, `_wgrad_call`: the module's kernel copied at the companion's config)
lowered alone over the same ragged sizes against its tile, beside the companion's plan SMEM. Imports jax: only
`specgen compile` imports this module."""

from __future__ import annotations

import functools
import time
from types import ModuleType

from specgen.compile import CompileResult, compiler_message
from specgen.kinds.gemm.designs.pallas.compile import mosaic_gpu_launch_smem
from specgen.kinds.grouped.designs.pallas.compile import problem_structs
from specgen.kinds.grouped.spec import GroupedSpec
from specgen.targets import TargetInfo


def compile_module(module: ModuleType, target: TargetInfo, backward: bool = True) -> list[CompileResult]:
    """Each config of the module (the default, then every size-selected variant, its result's `variant` set: the
    CLI shows `<kernel>[i]`) lowered for CUDA with that config forced, each beside its plan SMEM; then, for a training
    module (unless `backward` is False), each backward GEMM (`<kernel>[role]`)."""
    configs = [(None, module.CONFIG), *enumerate(getattr(module, "VARIANT_CONFIGS", ()))]
    roles = module.METADATA.get("training", {}).get("gemms", {}) if backward else {}
    return [_lower_config(module, target, variant, cfg) for variant, cfg in configs] + [
        _lower_role(module, target, role) for role in roles]


ROLE_PREFIX = {"forward_pre": "_pre", "recompute": "_pre", "dgrad": "_dgrad", "wgrad": "_wgrad"}


def _lower_role(module: ModuleType, target: TargetInfo, role: str) -> CompileResult:
    """One backward GEMM's launcher lowered alone for CUDA: (varying, sizes, x, y[, bias]) over 3 groups of ragged rows,
    x and y in the shapes the backward passes them (pre: A and B as stored, a gated B's 2N columns one plain GEMM's, an
    fp8 forward's 8-bit with its scales; dgrad: G (M, N) and B as stored, of the output's dtype (an fp8 forward's
    converted); wgrad: x (M, P) and y (M, Q), the groups' rows its K)."""
    import jax
    import jax.numpy as jnp

    from specgen.kinds.gemm.designs.pallas.design import JNP_DTYPES
    from specgen.kinds.grouped.designs.pallas.compile import GROUPS

    meta, name = module.METADATA, f"{module.METADATA['kernel']}[{role}]"
    gemm, prefix = meta["training"]["gemms"][role], ROLE_PREFIX[role]
    cfg = getattr(module, f"{prefix.upper()}_CONFIG")
    spec = GroupedSpec.model_validate(module.SPEC)
    dt = jnp.dtype(module.OPERAND)
    p, q, r = 2 * cfg.tile_m + 3, 2 * cfg.tile_n + 3, (cfg.stages + 1) * cfg.tile_k + 3  # rows, columns, reduction

    def struct(shape: tuple[int, ...], dtype: object = dt) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(shape, dtype)

    if role == "wgrad":  # out[g] (P, Q) = x[rows of g]^T @ y[rows of g]: the groups' r rows are its K
        args = [struct((r, p)), struct((r, q))]
    else:  # ragged M over p rows: x (p, r) K-major, y (G, q, r) K-major or (G, r, q), the pre GEMM's bias (G, q)
        y = (GROUPS, q, r) if gemm["b_major"] == "k" else (GROUPS, r, q)
        gated = any(op.op == "gated" for op in spec.epilogue)  # pre over B's 2N columns, the bias after the gate (jnp)
        bias = [struct((GROUPS, q), jnp.dtype(JNP_DTYPES[op.dtype])) for op in spec.epilogue if op.op == "bias"
                ] if prefix == "_pre" and not gated else []
        if prefix == "_pre" and spec.a.dtype.is_fp8:  # an fp8 forward's pre: A and B 8-bit, scale_a (M,), scale_b (G, N)
            fp8 = [jnp.dtype(JNP_DTYPES[spec.a.dtype]), jnp.dtype(JNP_DTYPES[spec.b.dtype])]
            args = [struct((p, r), fp8[0]), struct(y, fp8[1]), struct((p,), jnp.float32), struct((GROUPS, q), jnp.float32), *bias]
        else:
            args = [struct((p, r)), struct(y), *bias]
    start = time.perf_counter()
    try:
        launch = functools.partial(getattr(module, f"{prefix}_call"), frozenset())
        lowered = jax.jit(launch).trace(struct((GROUPS,), jnp.int32), *args).lower(lowering_platforms=("cuda",))
        smem = mosaic_gpu_launch_smem(lowered)
        if smem is None:
            raise RuntimeError("the lowered module holds no Mosaic GPU kernel launch (no mosaic_gpu_v2 gpu.launch)")
    except Exception as e:  # the lowering's own message is the useful part
        return CompileResult(name, target.name, gemm["smem_bytes"], None, time.perf_counter() - start, compiler_message(e))
    return CompileResult(name, target.name, gemm["smem_bytes"], smem, time.perf_counter() - start)


def _lower_config(module: ModuleType, target: TargetInfo, variant: int | None, cfg: object) -> CompileResult:
    import jax

    meta = module.METADATA
    spec = GroupedSpec.model_validate(module.SPEC)
    m, n, k = 2 * cfg.tile_m + 3, 2 * cfg.tile_n + 3, (cfg.stages + 1) * cfg.tile_k + 3
    struct, args = problem_structs(spec, m, n, k)  # the TPU hook's problem: 3 groups
    if spec.groups.ragged == "k":  # the weight gradient: A (M, K) and B (K, N) in their stored majors, out (G, M, N)
        args = [struct((m, k) if spec.a.major == "k" else (k, m), spec.a.dtype),
                struct((n, k) if spec.b.major == "k" else (k, n), spec.b.dtype), *args[2:]]
    start, smem = time.perf_counter(), None
    launch = functools.partial(module._launch, config=cfg)  # forced: the shape need not be one its bounds admit
    try:  # untouched: without the caller's `out`, then with it; a fresh jit each time (nothing cached stands in)
        for base in ([None] if spec.groups.tail == "zero" or spec.groups.ragged == "k" else [None, struct((m, n), spec.out.dtype)]):
            def call(*xs: object, with_out: bool = base is not None) -> object:
                return launch(*xs[:-1], out=xs[-1]) if with_out else launch(*xs)

            lowered = jax.jit(call).trace(*args, *([] if base is None else [base])).lower(lowering_platforms=("cuda",))
            smem = mosaic_gpu_launch_smem(lowered)
            if smem is None:
                raise RuntimeError("the lowered module holds no Mosaic GPU kernel launch (no mosaic_gpu_v2 gpu.launch)")
    except Exception as e:  # the lowering's own message is the useful part
        return CompileResult(meta["kernel"], target.name, cfg.smem_bytes, None, time.perf_counter() - start,
                             compiler_message(e), variant=variant)
    return CompileResult(meta["kernel"], target.name, cfg.smem_bytes, smem, time.perf_counter() - start, variant=variant)
