"""The CuTe modules' JAX entry on a Hopper GPU: for every catalogue kernel, `<name>_jax` under jax.jit gives
bit for bit what the torch launcher gives on the same data (the same kernel: same config, same K order;
padded extents only add zero products), on aligned shapes and on tails (M = 1, odd N, K not a 16-byte
multiple, K = 0); the compiled XLA program is one custom call with no copy around it where the shapes
are aligned; the entry composes inside a larger jitted function; a second module object reads the
compiled kernel from the disk cache. The conformance suite's `cute-sm90-jax` row runs the shared cases.

Marked `gpu`: CI (CPU only) deselects them; gpu/run.sh runs them.
"""

from __future__ import annotations

import importlib
import os
import time

import pytest

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch shares the GPU in this process

import torch  # noqa: E402

pytestmark = pytest.mark.gpu

NAMES = ["gemm_bf16", "gemm_small_bf16", "gemm_bias_gelu_bf16", "gemm_relu_f16", "bmm_bf16", "gemm_fp8_rowwise",
         "gemm_residual_bf16"]
# (40, 1000, 3000): gemm_bf16's M <= 64, N <= 4096 variant splits K across its cluster
SHAPES = [(256, 512, 256), (1, 24, 40), (200, 136, 96), (517, 264, 1040), (64, 64, 0), (40, 1000, 3000)]


def module(name: str):
    return importlib.import_module(f"generated.cute.{name}")


def _args(mod, M: int, N: int, K: int, gen: torch.Generator) -> list:
    """The torch launcher's arguments (logical shapes, the spec's major modes), as test_cute_gpu builds them."""
    from gpu.test_cute_gpu import build_args

    return build_args(mod.SPEC, M, N, K, gen)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("M", "N", "K"), SHAPES)
def test_jax_entry_equals_the_torch_launcher_bit_for_bit(name: str, M: int, N: int, K: int) -> None:
    import jax

    mod = module(name)
    gen = torch.Generator(device="cuda").manual_seed(M * 7 + N * 3 + K)
    args = _args(mod, M, N, K, gen)
    want = getattr(mod, name)(*args)
    got = getattr(mod, f"{name}_jax_torch")(*args)  # DLPack in and out, jax.jit inside
    torch.cuda.synchronize()
    assert got.shape == want.shape and got.dtype == want.dtype
    assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)), \
        f"{name} {M}x{N}x{K}: max |diff| {(got.float() - want.float()).abs().max().item()}"
    assert jax.default_backend() == "gpu"


def test_aligned_call_compiles_to_one_custom_call_without_copies() -> None:
    import jax
    import jax.numpy as jnp

    mod = module("gemm_bias_gelu_bf16")
    a, w, bias = jnp.ones((512, 256), jnp.bfloat16), jnp.ones((768, 256), jnp.bfloat16), jnp.zeros((768,), jnp.bfloat16)
    hlo = jax.jit(mod.gemm_bias_gelu_bf16_jax).lower(a, w, bias).compile().as_text()
    assert hlo.count("custom-call(") == 1 and "CuteDSLRT_NvJaxCutlassCall" in hlo
    assert " copy(" not in hlo and " pad(" not in hlo and " transpose(" not in hlo


def test_the_entry_composes_inside_jit_and_on_xlas_stream() -> None:
    """Inside a larger jitted function (XLA orders the custom call with its neighbours on its stream):
    relu(x) @ w.T through the kernel, then a scale, equals the same through XLA's dot within bf16 rounding."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    mod = module("gemm_bf16")
    key = jax.random.PRNGKey(0)
    x = jax.random.normal(key, (1000, 512), jnp.bfloat16)
    w = jax.random.normal(jax.random.split(key)[0], (768, 512), jnp.bfloat16)
    ours = jax.jit(lambda x, w: mod.gemm_bf16_jax(jax.nn.relu(x), w).astype(jnp.float32) * 2)(x, w)
    xla = jax.jit(lambda x, w: jnp.dot(jax.nn.relu(x), w.T, preferred_element_type=jnp.float32).astype(jnp.bfloat16)
                  .astype(jnp.float32) * 2)(x, w)
    np.testing.assert_allclose(np.asarray(ours), np.asarray(xla), rtol=2e-2, atol=2e-1)


def test_a_fresh_entry_reads_the_disk_cache(tmp_path, monkeypatch) -> None:
    """Compile once into an empty cache; a fresh entry of the same module loads it (no compile) and runs."""
    import jax.numpy as jnp

    from specgen.runtime import cute_jax

    monkeypatch.setenv("SPECGEN_CUTE_CACHE", str(tmp_path))
    mod = module("gemm_small_bf16")
    e = mod._jax_entry()
    fresh = cute_jax.CuteJaxEntry(e.launcher, e.host, e.configs, e.operands, e.a_major, e.b_major, e.batch,
                                  e.out.dtype, e.variants)
    start = time.perf_counter()
    a, b = jnp.ones((128, 64), jnp.bfloat16), jnp.ones((64, 64), jnp.bfloat16)
    first = fresh(a, b).block_until_ready()
    cold = time.perf_counter() - start
    assert list(tmp_path.glob("*-jax-*.o"))
    again = cute_jax.CuteJaxEntry(e.launcher, e.host, e.configs, e.operands, e.a_major, e.b_major, e.batch,
                                  e.out.dtype, e.variants)
    monkeypatch.setattr(again, "object", lambda *a: pytest.fail("compiled although the disk cache had it"))
    start = time.perf_counter()
    second = again(a, b).block_until_ready()
    warm = time.perf_counter() - start
    assert bool((first == second).all()) and float(first[0, 0]) == 64.0
    print(f"gemm_small_bf16_jax first call: cold {cold:.2f} s, from the disk cache {warm:.2f} s")
