"""The Pallas GEMM design's compile hook: Pallas's Mosaic lowering of a rendered TPU module's kernel, on a
CPU machine (`jax.jit(...).lower(lowering_platforms=("tpu",))`: jaxpr -> Mosaic MLIR in a tpu_custom_call).

A Mosaic GPU module (pallas:gpu_sm90) is lowered for CUDA instead, with Mosaic GPU's SMEM limit set to
1 byte: its refusal carries the exact SMEM the kernel allocates (`compiler_smem`, beside the plan's), one
result per config (the default, then each size-selected variant, its `variant` set). On
a machine without a GPU that needs absl-py and the jax-cuda12 plugin/pjrt wheels (not CI's install).

Lowering refuses what Mosaic cannot express (it refused 3-deep buffering: rule PAL003). libtpu's own
compile, and with it the VMEM the chip would allocate, needs a TPU: `compiler_smem` stays None and the
plan's VMEM figure is reported beside it. The problem is ragged against every block (two and a bit
blocks per dim), so the K-tail masks and edge blocks lower too. Imports jax: only `specgen compile`
imports this module.
"""

from __future__ import annotations

import re
import time
from types import ModuleType

from specgen.compile import CompileResult, compiler_message
from specgen.kinds.gemm.spec import GemmSpec
from specgen.targets import TargetInfo

BATCH = 2


def compile_module(module: ModuleType, target: TargetInfo) -> CompileResult | list[CompileResult]:
    if target.memory == "smem":
        return _lower_mgpu(module, target)
    import jax
    import jax.numpy as jnp

    from specgen.kinds.gemm.designs.pallas.design import JNP_DTYPES

    meta = module.METADATA
    spec = GemmSpec.model_validate(module.SPEC)
    m, n, k = (2 * block + 3 for block in (module.BLOCK_M, module.BLOCK_N, module.BLOCK_K))
    lead = (BATCH,) if spec.batch else ()

    def struct(shape: tuple[int, ...], dtype: object) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(shape, jnp.dtype(JNP_DTYPES[dtype]))  # type: ignore[index]

    args = [
        struct((*lead, m, k) if spec.a.major == "k" else (*lead, k, m), spec.a.dtype),
        struct((*lead, n, k) if spec.b.major == "k" else (*lead, k, n), spec.b.dtype),
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


def _lower_mgpu(module: ModuleType, target: TargetInfo) -> list[CompileResult]:
    """Each config of the module (the default, then every size-selected variant, its result's `variant`
    set: the CLI shows `<kernel>[i]`) lowered for CUDA with that config forced, each beside its plan SMEM."""
    configs = [(None, module.CONFIG), *enumerate(module.VARIANT_CONFIGS)]
    return [_lower_mgpu_config(module, target, variant, cfg) for variant, cfg in configs]


def _lower_mgpu_config(module: ModuleType, target: TargetInfo, variant: int | None, cfg: object) -> CompileResult:
    import functools

    import jax
    import jax.numpy as jnp
    from jax.experimental.mosaic.gpu import core as mgpu_core

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

    args = [struct((*lead, m, k) if spec.a.major == "k" else (*lead, k, m), spec.a.dtype),
            struct((*lead, n, k) if spec.b.major == "k" else (*lead, k, n), spec.b.dtype)]
    for arg in spec.runtime_args():
        shape = {"vec_m": (m,), "vec_n": (n,), "matrix": (*lead, m, n), "scalar": ()}[arg.shape]
        args.append(struct(shape, DType.f32 if arg.shape == "scalar" else arg.dtype))
    start = time.perf_counter()
    try:
        traced = jax.jit(functools.partial(module._launch, config=cfg)).trace(*args)
        with mgpu_core.artificial_shared_memory_limit(1):
            traced.lower(lowering_platforms=("cuda",))
        raise RuntimeError("Mosaic GPU accepted a 1-byte SMEM limit: the module holds no Mosaic GPU kernel")
    except Exception as e:
        hit = re.search(r"smem_bytes=(\d+)", str(e))
        if hit:
            return CompileResult(meta["kernel"], target.name, cfg.smem_bytes, int(hit.group(1)), time.perf_counter() - start,
                                 variant=variant)
        return CompileResult(meta["kernel"], target.name, cfg.smem_bytes, None, time.perf_counter() - start,
                             compiler_message(e), variant=variant)
