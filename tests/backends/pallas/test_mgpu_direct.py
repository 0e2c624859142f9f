"""The Mosaic GPU torch entry's direct path (`specgen/runtime/mgpu_torch.py`), on the CPU: every shipped
Mosaic GPU kernel, at the shapes `_direct` sends straight to the compiled kernel, lowers for CUDA to the
one custom call on the program's arguments that the direct launch needs (the launch itself, its numerics
and its CUDA-graph capture are GPU tests: tests/gpu/test_cuda_graphs_gpu.py); a program with anything
else (the jitted entry's padding) is refused, so those calls keep the DLPack path."""

from __future__ import annotations

import importlib

import pytest

jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")
jnp = jax.numpy

from specgen.runtime import mgpu_torch as mt  # noqa: E402

MODULES = ["gemm_bf16", "gemm_bias_gelu_bf16", "gemm_fp8_rowwise", "gemm_residual_bf16", "bmm_bf16",
           "gemm_relu_f16", "gemm_small_bf16"]
# a decode shape (a size-selected variant where the module has them) and a prefill one
SHAPES = [(16, 4096, 2048), (1024, 2048, 1024)]


def _structs(mod, m: int, n: int, k: int) -> tuple[object, list]:
    """The kernel `_direct` builds at (m, n, k) and the structs it lowers it at (vectors padded to whole
    tiles, a scalar as one subtile row of f32), read off the module's spec."""
    spec, cfg = mod.SPEC, mod._config_for(m, n, k)
    a_ext, b_ext, out_ext = mod._extents(cfg, m, n, k)
    assert out_ext == (m, n)
    dt = {"bf16": jnp.bfloat16, "f16": jnp.float16, "f32": jnp.float32, "fp8_e4m3": jnp.float8_e4m3fn}
    lead = (3,) if spec["batch"] else ()
    structs = [jax.ShapeDtypeStruct(lead + a_ext, dt[spec["a"]["dtype"]]),
               jax.ShapeDtypeStruct(lead + b_ext, dt[spec["b"]["dtype"]])]
    for op in spec["epilogue"]:
        if op["op"] == "bias":
            structs.append(jax.ShapeDtypeStruct((-(-n // cfg.tile_n) * cfg.tile_n,), dt[op["dtype"]]))
        elif op["op"] == "scale" and op["by"] == "rowcol":
            structs += [jax.ShapeDtypeStruct((-(-m // cfg.tile_m) * cfg.tile_m,), jnp.float32),
                        jax.ShapeDtypeStruct((-(-n // cfg.tile_n) * cfg.tile_n,), jnp.float32)]
        elif op["op"] == "scale" and op["by"] == "scalar":
            structs.append(jax.ShapeDtypeStruct((cfg.epi_n,), jnp.float32))
        elif op["op"] == "residual":
            structs.append(jax.ShapeDtypeStruct(lead + (m, n), jnp.bfloat16))
    kernel = mod._build(cfg, *lead, m, n, k, m, n, 132, frozenset())
    return kernel, structs


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", MODULES)
def test_shipped_kernels_lower_to_one_launchable_call(name: str, shape) -> None:
    mod = importlib.import_module(f"generated.pallas.gpu_sm90.{name}")
    kernel, structs = _structs(mod, *shape)
    asm = mt.module_bytes(kernel, structs)
    assert asm, f"{name} {shape}: the kernel's program is not one Mosaic GPU call on its arguments"
    assert len(asm) > 1000  # a serialized module, not an empty attribute


def test_a_program_with_more_than_the_kernel_is_refused() -> None:
    """The jitted entry pads K = 200 to whole swizzle rows (jnp.pad before the call): not launchable direct."""
    mod = importlib.import_module("generated.pallas.gpu_sm90.gemm_bf16")
    a = jax.ShapeDtypeStruct((64, 200), jnp.bfloat16)
    b = jax.ShapeDtypeStruct((128, 200), jnp.bfloat16)
    assert mod._extents(mod._config_for(64, 128, 200), 64, 128, 200)[0] != (64, 200)
    assert mt.module_bytes(mod._launch, [a, b]) is None


def test_vectors_are_flattened_and_padded_to_whole_tiles() -> None:
    v = torch.arange(16, dtype=torch.float32)
    padded = mt.vector(v.reshape(16, 1), "m", 16, 64, torch.float32, -1)
    assert padded.shape == (64,) and padded[:16].tolist() == list(range(16))  # past 16: rows the store clips
    assert padded.data_ptr() != v.data_ptr()
    assert mt.vector(v.reshape(1, 16), "n", 16, 16, torch.float32, -1).data_ptr() == v.data_ptr()  # no copy
    # the other orientation is refused, as `runtime.jax.vector` refuses it on the DLPack path
    assert mt.vector(v.reshape(1, 16), "m", 16, 16, torch.float32, -1) is None
    assert mt.vector(v.reshape(16, 1), "n", 16, 16, torch.float32, -1) is None
    assert mt.vector(v, "n", 16, 16, torch.float16, -1) is None  # the wrong dtype: the DLPack path raises
    assert mt.vector(v[::2], "n", 8, 8, torch.float32, -1) is None  # strided: the DLPack path copies it
    assert mt.vector(v, "n", 15, 16, torch.float32, -1) is None
    assert mt.scalar(True, 8, 0) is None and mt.scalar(torch.ones(1), 8, 0) is None
