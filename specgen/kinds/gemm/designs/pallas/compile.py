"""The Pallas GEMM design's compile hook: Pallas's Mosaic lowering of a rendered TPU module's kernel, on a
CPU machine (`jax.jit(...).lower(lowering_platforms=("tpu",))`: jaxpr -> Mosaic MLIR in a tpu_custom_call).

A Mosaic GPU module (pallas:gpu_sm90) is lowered for CUDA instead, one result per config (the default,
then each size-selected variant, its `variant` set): the whole lowering jax runs in Python on a CPU
(jax 0.10.2: the SMEM allocation and its 232448 B limit, the kernel body (TMA, wgmma, the epilogue),
layout inference and the Mosaic GPU dialect lowering), so a body Mosaic GPU cannot lower fails the
config, then each backward GEMM of a `training` spec (`<kernel>[dgrad]`: its role's kernel). `compiler_smem` is the dynamic shared memory of the kernel's `gpu.launch` in the module the
lowering emitted (the `mosaic_gpu_v2` custom call's MLIR, deserialized), beside the plan's. What is
left (NVVM, ptxas: no registers or spills) runs in C++ only where a GPU is.

Lowering refuses what Mosaic cannot express (it refused 3-deep buffering: rule PAL003). libtpu's own
compile, and with it the VMEM the chip would allocate, needs a TPU: `compiler_smem` stays None and the
plan's VMEM figure is reported beside it. The problem is ragged against every block (two and a bit
blocks per dim), so the K-tail masks and edge blocks lower too. Imports jax: only `specgen compile`
imports this module.
"""

from __future__ import annotations

import math
import time
from types import ModuleType

from specgen.compile import CompileResult, compiler_message
from specgen.kinds.gemm.spec import GemmSpec
from specgen.spec.epilogue import b_columns
from specgen.targets import TargetInfo

BATCH = 2


def compile_module(module: ModuleType, target: TargetInfo, backward: bool = True) -> CompileResult | list[CompileResult]:
    if target.memory == "smem":
        return _lower_mgpu(module, target, backward)
    import jax
    import jax.numpy as jnp

    from specgen.kinds.gemm.designs.pallas.design import JNP_DTYPES

    meta = module.METADATA
    spec = GemmSpec.model_validate(module.SPEC)
    m, n, k = (2 * block + 3 for block in (module.BLOCK_M, module.BLOCK_N, module.BLOCK_K))
    if hasattr(module, "N_BLOCKS"):  # a gated N-major B: N a multiple of the blocks along N
        n = 2 * math.lcm(*module.N_BLOCKS)
    lead = (BATCH,) if spec.batch else ()
    bn = n * b_columns(spec)  # a gated epilogue's B holds gate and up columns

    def struct(shape: tuple[int, ...], dtype: object) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(shape, jnp.dtype(JNP_DTYPES[dtype]))  # type: ignore[index]

    args = [
        struct((*lead, m, k) if spec.a.major == "k" else (*lead, k, m), spec.a.dtype),
        struct((*lead, bn, k) if spec.b.major == "k" else (*lead, k, bn), spec.b.dtype),
    ]
    for arg in spec.runtime_args():
        shape = {"vec_m": (m,), "vec_n": (n,), "matrix": (*lead, m, n), "scalar": ()}[arg.shape]
        args.append(struct(shape, arg.dtype))
    start = time.perf_counter()
    try:
        lowered = jax.jit(lambda *xs: module._call(*xs, interpret=False)).trace(*args).lower(
            lowering_platforms=("tpu",))
        if "tpu_custom_call" not in lowered.as_text():
            raise RuntimeError("the lowered module holds no tpu_custom_call (the kernel did not lower to Mosaic)")
    except Exception as e:  # the lowering's own message is the useful part
        return CompileResult(meta["kernel"], target.name, meta["vmem_bytes"], None, time.perf_counter() - start,
                             compiler_message(e))
    return CompileResult(meta["kernel"], target.name, meta["vmem_bytes"], None, time.perf_counter() - start)


def _lower_mgpu(module: ModuleType, target: TargetInfo, backward: bool = True) -> list[CompileResult]:
    """Each config of the module (the default, then every size-selected variant, its result's `variant`
    set: the CLI shows `<kernel>[i]`) lowered for CUDA with that config forced, each beside its plan SMEM."""
    configs = [(None, module.CONFIG), *enumerate(module.VARIANT_CONFIGS)]
    rows = [_lower_mgpu_config(module, target, variant, cfg) for variant, cfg in configs]
    # the backward's GEMMs (spec: training; `<kernel>[dgrad]`), each its role's kernel beside its plan SMEM
    return rows + [_lower_mgpu_role(module, target, role) for role in (getattr(module, "TRAIN_GEMMS", {}) if backward else {})]


def _lower_mgpu_role(module: ModuleType, target: TargetInfo, role: str) -> CompileResult:
    """One backward GEMM of a Mosaic GPU module (`_gemm(role, ...)`) lowered for CUDA over a problem ragged against
    its tile (K long enough for every stage), with its operands in the role's stored majors; a batched module's over
    BATCH entries (the kernel its backward launches once for every entry)."""
    import jax

    from specgen.kinds.gemm.designs.pallas.design import JNP_DTYPES

    cfg, x_k, y_k, _, dtype = module.TRAIN_GEMMS[role]
    plan_smem = module.METADATA["training"]["gemms"][role]["smem_bytes"]
    p, q, r = 2 * cfg.tile_m + 3, 2 * cfg.tile_n + 3, (cfg.stages + 1) * cfg.tile_k + 3
    # a gated backward's forward_pre and recompute read B's 2N columns (gate and up); its recompute takes no bias
    gated = bool(module.METADATA["training"].get("gated")) and role in ("forward_pre", "recompute")
    qb = 2 * q if gated else q
    spec = GemmSpec.model_validate(module.SPEC)
    # an fp8 forward's pre GEMM reads the 8-bit A and B and the scales (and the bias), its recompute no dOut
    fp8 = "fp8_backward_dtype" in module.METADATA["training"] and role in ("forward_pre", "recompute")
    # the other chains' pre GEMM reads the chain's arguments (recompute: those of the ops before pre; its C f32), no dOut
    chain = "chain_pre_before" in module.METADATA["training"] and role in ("forward_pre", "recompute")
    xd, yd = (JNP_DTYPES[spec.a.dtype], JNP_DTYPES[spec.b.dtype]) if fp8 or chain else (dtype, dtype)
    lead = (BATCH,) if spec.batch else ()
    args = [jax.ShapeDtypeStruct(lead + ((p, r) if x_k else (r, p)), xd), jax.ShapeDtypeStruct(lead + ((qb, r) if y_k else (r, qb)), yd)]
    if fp8:
        args += [jax.ShapeDtypeStruct((p,) if a.shape == "vec_m" else (q,), JNP_DTYPES[a.dtype]) for a in spec.runtime_args()]
    elif chain:
        before = module.METADATA["training"]["chain_pre_before"]
        ops = spec.epilogue if role == "forward_pre" else spec.epilogue[:before]
        shapes = {"vec_m": (p,), "vec_n": (q,), "matrix": lead + (p, q), "scalar": ()}
        args += [jax.ShapeDtypeStruct(shapes[a.shape], JNP_DTYPES[a.dtype]) for op in ops for a in op.runtime_args()]
    elif role == "forward_pre" or (role == "recompute" and not gated):  # the bias, then dOut (recompute)
        args += [jax.ShapeDtypeStruct((q,), dtype) for a in spec.runtime_args() if a.shape == "vec_n"]
    if role == "recompute" and not fp8 and not chain:
        args += [jax.ShapeDtypeStruct(lead + (p, q), dtype)]
    start = time.perf_counter()
    name = f"{module.METADATA['kernel']}[{role}]"
    try:
        lowered = jax.jit(lambda *xs: module._gemm(role, p, q, r, *xs)).trace(*args).lower(lowering_platforms=("cuda",))
        smem = mosaic_gpu_launch_smem(lowered)
        if smem is None:
            raise RuntimeError("the lowered module holds no Mosaic GPU kernel launch (no mosaic_gpu_v2 gpu.launch)")
    except Exception as e:  # the lowering's own message is the useful part
        return CompileResult(name, target.name, plan_smem, None, time.perf_counter() - start, compiler_message(e))
    return CompileResult(name, target.name, plan_smem, smem, time.perf_counter() - start)


def _lower_mgpu_config(module: ModuleType, target: TargetInfo, variant: int | None, cfg: object) -> CompileResult:
    import functools

    import jax
    import jax.numpy as jnp

    from specgen.kinds.gemm.designs.pallas.design import JNP_DTYPES
    from specgen.spec.dtypes import DType

    meta = module.METADATA
    spec = GemmSpec.model_validate(module.SPEC)
    # Tails on every dim; K long enough for every stage (Mosaic GPU's pipeline allocates min(stages, K
    # steps) buffers, so a short K needs less SMEM than the plan's figure, which is its maximum). The
    # config is forced (`_launch(config=...)`), so the shape need not be one its bounds admit.
    m, n = 2 * cfg.tile_m + 3, 2 * cfg.tile_n + 3
    k = (cfg.stages + 1) * cfg.tile_k + 3
    lead = (BATCH,) if spec.batch else ()

    def struct(shape: tuple[int, ...], dtype: DType) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(shape, jnp.dtype(JNP_DTYPES[dtype]))

    bn = n * b_columns(spec)  # a gated epilogue's B holds gate and up columns
    args = [struct((*lead, m, k) if spec.a.major == "k" else (*lead, k, m), spec.a.dtype),
            struct((*lead, bn, k) if spec.b.major == "k" else (*lead, k, bn), spec.b.dtype)]
    for arg in spec.runtime_args():
        shape = {"vec_m": (m,), "vec_n": (n,), "matrix": (*lead, m, n), "scalar": ()}[arg.shape]
        args.append(struct(shape, DType.f32 if arg.shape == "scalar" else arg.dtype))
    start = time.perf_counter()
    try:  # a fresh jit each time: nothing cached stands in for this lowering
        lowered = jax.jit(functools.partial(module._launch, config=cfg)).trace(*args).lower(lowering_platforms=("cuda",))
        smem = mosaic_gpu_launch_smem(lowered)
        if smem is None:
            raise RuntimeError("the lowered module holds no Mosaic GPU kernel launch (no mosaic_gpu_v2 gpu.launch)")
    except Exception as e:  # the lowering's own message is the useful part
        return CompileResult(meta["kernel"], target.name, cfg.smem_bytes, None, time.perf_counter() - start,
                             compiler_message(e), variant=variant)
    return CompileResult(meta["kernel"], target.name, cfg.smem_bytes, smem, time.perf_counter() - start, variant=variant)


def mosaic_gpu_launch_smem(lowered: object) -> int | None:
    """The SMEM Mosaic GPU allocated: the `dynamic_shared_memory_size` of the `gpu.launch` in each
    `mosaic_gpu_v2` custom call of a lowered jit (its `module`: MLIR bytecode, read back in jax's own
    context with the Mosaic GPU dialect and its deserialization pass), the largest; None without one."""
    from jax._src.interpreters import mlir as jax_mlir
    from jax._src.lib.mlir import ir
    from jax.experimental.mosaic.gpu import core as mgpu_core
    from jax.experimental.mosaic.gpu import dialect as mgpu_dialect

    kernels = [ir.StringAttr(ir.DictAttr(op.attributes["mhlo.backend_config"])["module"]).value_bytes
               for op in _ops(lowered.compiler_ir("stablehlo").operation)  # type: ignore[attr-defined]
               if op.name == "stablehlo.custom_call"
               and ir.StringAttr(op.attributes["call_target_name"]).value == "mosaic_gpu_v2"]
    found = []
    for data in kernels:
        context = jax_mlir.make_ir_context()
        mgpu_dialect.register_dialect(context)
        context.allow_unregistered_dialects = True  # the stable_mosaic_gpu ops, until the serde pass reads them back
        with context, ir.Location.unknown():
            kernel = mgpu_core._run_serde_pass(ir.Module.parse(data), serialize=False, ir_version=None)
            for op in _ops(kernel.operation):
                if op.name == "gpu.launch":
                    size = op.opview.dynamicSharedMemorySize
                    found.append(ir.IntegerAttr(size.owner.attributes["value"]).value)
    return max(found, default=None)


def _ops(op: object):  # noqa: ANN202 - MLIR's own types
    """Every operation nested in `op` (not `op` itself), depth first."""
    for region in op.regions:  # type: ignore[attr-defined]
        for block in region.blocks:
            for inner in block.operations:
                yield inner.operation
                yield from _ops(inner.operation)
