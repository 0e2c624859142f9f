"""The generated JAX launcher around the Pallas TPU kernel: jit, trace-time argument checks that name
the argument, the cached jitted callable, what the pallas_call is given (grid, blocks, VMEM limit,
dimension semantics), the torch entry point through DLPack, and placement over several devices."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from backends.pallas.common import TPU_CATALOGUE, Data, reference, render_module, tolerance

SPEC = TPU_CATALOGUE["gemm_bias_gelu_tpu"]  # bias (N,) bf16 + gelu_tanh, tile 256x256x512, B K-major
M, N, K = 300, 280, 600  # two blocks each way, ragged


@pytest.fixture(scope="module")
def module(tmp_path_factory: pytest.TempPathFactory):
    return render_module(SPEC, tmp_path_factory.mktemp("pallas_launcher"))


@pytest.fixture(scope="module")
def data():
    d = Data(SPEC, M, N, K)
    a, b = d.operands()
    ((_, bias),) = d.epilogue_args()
    return a, b, bias


def pallas_calls(jaxpr) -> list:
    out = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "pallas_call":
            out.append(eqn)
        for value in eqn.params.values():
            inner = getattr(value, "jaxpr", value)
            if hasattr(inner, "eqns"):
                out.extend(pallas_calls(inner))
    return out


def test_jit_compatible_cached_and_correct(module, data) -> None:
    a, b, bias = data
    fn = module.gemm_bias_gelu_tpu
    first = fn(a, b, bias)
    before = module._call._cache_size()
    fn(a, b, bias)
    assert module._call._cache_size() == before, "a second call with the same shapes compiled again"
    again = fn(a, b, bias.reshape(1, N))  # a (1, N) bias gives the same result
    jitted = jax.jit(fn)(a, b, bias)
    np.testing.assert_array_equal(np.asarray(first, np.float32), np.asarray(again, np.float32))
    np.testing.assert_array_equal(np.asarray(first, np.float32), np.asarray(jitted, np.float32))
    np.testing.assert_allclose(np.asarray(first, np.float64), reference(SPEC, a, b, [("bias", bias)]).numpy(),
                               **tolerance(SPEC))


def test_pallas_call_gets_the_plans_blocks_grid_and_vmem_limit(module, data) -> None:
    a, b, bias = data
    (eqn,) = pallas_calls(jax.make_jaxpr(module.gemm_bias_gelu_tpu)(a, b, bias).jaxpr)
    params = eqn.params["compiler_params"]
    assert params.vmem_limit_bytes == module.VMEM_LIMIT_BYTES == module.METADATA["vmem_limit_bytes"]
    assert module.METADATA["vmem_bytes"] <= module.VMEM_LIMIT_BYTES  # never the chip's default scoped limit
    assert params.dimension_semantics == ("parallel", "parallel", "arbitrary")
    grid = eqn.params["grid_mapping"]
    assert grid.grid == (2, 2, 2)
    blocks = [tuple(getattr(d, "block_size", d) for d in bm.block_shape) for bm in grid.block_mappings]
    assert blocks == [(256, 512), (256, 512), (1, 256), (256, 256)]  # a, b (N, K), bias (1, N), out


def test_small_problems_use_blocks_as_large_as_the_arrays(module) -> None:
    d = Data(SPEC, 1, 40, 7, tag="small")
    a, b = d.operands()
    ((_, bias),) = d.epilogue_args()
    (eqn,) = pallas_calls(jax.make_jaxpr(module.gemm_bias_gelu_tpu)(a, b, bias).jaxpr)
    blocks = [tuple(getattr(x, "block_size", x) for x in bm.block_shape) for bm in eqn.params["grid_mapping"].block_mappings]
    assert blocks == [(1, 7), (40, 7), (1, 40), (1, 40)]


BAD = {
    "a dtype": (lambda a, b, bias: (a.astype(jnp.float32), b, bias), TypeError,
                "gemm_bias_gelu_tpu: argument 'a' is float32, expected bfloat16"),
    "a rank": (lambda a, b, bias: (a[None], b, bias), ValueError, "argument 'a' has shape (1, 300, 600), expected rank 2"),
    "b K": (lambda a, b, bias: (a, b[:, :-1], bias), ValueError,
            "argument 'b' has shape (280, 599), expected (280, 600) from the other arguments"),
    "b dtype": (lambda a, b, bias: (a, b.astype(jnp.float16), bias), TypeError, "argument 'b' is float16"),
    "bias length": (lambda a, b, bias: (a, b, bias[:-1]), ValueError,
                    "argument 'bias' has shape (279,), expected (280,) or (1, 280)"),
    "bias dtype": (lambda a, b, bias: (a, b, bias.astype(jnp.float32)), TypeError, "argument 'bias' is float32"),
    "numpy a": (lambda a, b, bias: (np.asarray(a), b, bias), TypeError, "argument 'a' must be a jax.Array"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_arguments_raise_naming_the_argument(module, data, case) -> None:
    change, error, message = BAD[case]
    with pytest.raises(error) as info:
        module.gemm_bias_gelu_tpu(*change(*data))
    assert message in str(info.value)
    if case != "numpy a":  # (an outer jit turns numpy arrays into jax values: that call is fine)
        with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):  # at trace time
            jax.jit(module.gemm_bias_gelu_tpu)(*change(*data))


def test_torch_entry_shares_memory_and_matches(module, data) -> None:
    from specgen.runtime.jax import from_torch

    a, b, bias = data
    ta = torch.from_dlpack(a)  # (M, K) row-major
    w = torch.from_dlpack(b)  # the weight (N, K); the launcher takes it as w.t(), K-major (K, N)
    tbias = torch.from_dlpack(bias)
    assert from_torch("f", "b", w.t(), transpose=True).unsafe_buffer_pointer() == w.data_ptr()  # no copy
    got = module.gemm_bias_gelu_tpu_torch(ta, w.t(), tbias)
    assert isinstance(got, torch.Tensor) and got.shape == (M, N) and got.dtype == torch.bfloat16
    want = np.asarray(module.gemm_bias_gelu_tpu(a, b, bias), np.float32)
    np.testing.assert_array_equal(got.float().numpy(), want)
    with pytest.raises(ValueError, match=r"argument 'b' must be contiguous along dim 0 \(stride 1, the spec's major mode"):
        module.gemm_bias_gelu_tpu_torch(ta, w.t().contiguous(), tbias)  # row-major (K, N): not K-major
    with pytest.raises(TypeError, match="argument 'bias' must be a torch.Tensor"):
        module.gemm_bias_gelu_tpu_torch(ta, w.t(), [0.0] * N)


SHARDED = textwrap.dedent("""
    import importlib.util, json, sys
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    spec = importlib.util.spec_from_file_location("m", sys.argv[1])
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    assert len(jax.devices()) == 4
    rng = np.random.default_rng(0)
    a = jnp.asarray(rng.standard_normal((512, 600)) / 25, jnp.bfloat16)
    b = jnp.asarray(rng.standard_normal((280, 600)), jnp.bfloat16)
    bias = jnp.asarray(rng.standard_normal(280), jnp.bfloat16)
    single = m.gemm_bias_gelu_tpu(a, b, bias)
    mesh = jax.make_mesh((4,), ("x",))
    a_sharded = jax.device_put(a, NamedSharding(mesh, P("x", None)))
    try:
        m.gemm_bias_gelu_tpu(a_sharded, b, bias)
        error = ""
    except ValueError as e:
        error = str(e)
    f = jax.shard_map(m.gemm_bias_gelu_tpu, mesh=mesh, in_specs=(P("x", None), P(), P()), out_specs=P("x", None))
    out = f(a_sharded, b, bias)
    print(json.dumps({"error": error, "devices": len(out.sharding.device_set),
                      "equal": bool(np.array_equal(np.asarray(out, np.float32), np.asarray(single, np.float32)))}))
""")


def test_multi_device_arrays_raise_unless_under_shard_map(module, tmp_path: Path) -> None:
    """Four CPU devices, in a subprocess so the flag does not touch this process's jax."""
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"}
    script = tmp_path / "sharded.py"
    script.write_text(SHARDED)
    proc = subprocess.run([sys.executable, str(script), module.__file__], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "argument 'a' is spread over 4 devices; call gemm_bias_gelu_tpu inside jax.shard_map" in result["error"]
    assert result["devices"] == 4 and result["equal"]


def test_ab_stages_become_pallas_buffering(tmp_path: Path) -> None:
    """pipeline.ab_stages = 1 buffers A and B once (pl.Buffered(1)); the plan's VMEM counts 1. (3 would
    not lower: PAL003.)"""
    spec = {**SPEC, "name": "buffered1", "pipeline": {**SPEC["pipeline"], "ab_stages": 1}}
    module = render_module(spec, tmp_path)
    assert module.AB_BUFFERS == 1 and "A/B 1 x " in module.METADATA["vmem_breakdown"]
    d = Data(spec, 40, 130, 1100, tag="buffered")
    a, b = d.operands()
    ((_, bias),) = d.epilogue_args()
    (eqn,) = pallas_calls(jax.make_jaxpr(module.buffered1)(a, b, bias).jaxpr)
    modes = [getattr(bm, "pipeline_mode", None) for bm in eqn.params["grid_mapping"].block_mappings]
    assert [getattr(m, "buffer_count", None) for m in modes[:2]] == [1, 1]
    np.testing.assert_allclose(np.asarray(module.buffered1(a, b, bias), np.float64),
                               reference(spec, a, b, [("bias", bias)]).numpy(), **tolerance(spec))
