"""The CuTe modules' JAX entry (`<name>_jax`, specgen/runtime/cute_jax.py) on this CPU machine: every
catalogue kernel traces under `jax.eval_shape` to one custom call with the padded extents TMA needs
(tails, M = 1, K = 0, batch, variants picked by size), trace-time errors name the argument, a CPU
lowering is refused with the reason, arrays over several devices raise unless under `jax.shard_map`
(4 CPU devices, in a subprocess), and the XLA-ABI kernel compiles for sm_90a (SASS with TMA and wgmma, no
spills) once per config however many threads ask, then comes from the disk cache. Numerics run on
the GPU: tests/gpu/test_cute_jax_gpu.py and the conformance row `cute-sm90-jax`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specgen.compile import load_rendered
from specgen.runtime import cute_jax
from specgen.spec.load import load_paths

ROOT = Path(__file__).resolve().parents[3]
GENERATED = ROOT / "generated" / "cute"
# the dense kind's CuTe modules (the grouped kind's have their own tests: tests/grouped/test_cute_sm90.py)
GROUPED = {ls.name for ls in load_paths([ROOT / "specs"]) if ls.spec.kind != "gemm"}
NAMES = sorted(p.stem for p in GENERATED.glob("*.py")
               if p.stem != "__init__" and p.stem.removesuffix("_sm100") not in GROUPED)  # sm100 modules: <name>_sm100


@pytest.fixture(scope="module")
def modules() -> dict:
    return {n: load_rendered(GENERATED / f"{n}.py", f"_specgen_cute_jax_test_{n}") for n in NAMES}


def structs(mod, m: int, n: int, k: int, batch: int = 3) -> list:
    """Abstract arguments in the entry's stored layouts (scalars as Python floats)."""
    e = mod._jax_entry()
    lead = (batch,) if e.batch else ()
    shapes = {"a": lead + ((m, k) if e.a_major == "k" else (k, m)), "b": lead + ((n, k) if e.b_major == "k" else (k, n)),
              "vec_m": (m,), "vec_n": (n,), "matrix": lead + (m, n)}
    return [0.5 if o.role == "scalar" else jax.ShapeDtypeStruct(shapes[o.role], o.jnp_dtype) for o in e.operands]


def traced_call(mod, args: list) -> tuple[jax.ShapeDtypeStruct, list]:
    """The output struct and the custom calls (their params and input shapes) of one traced call."""
    fn = getattr(mod, f"{mod.METADATA['kernel']}_jax")
    scalars = {i: a for i, a in enumerate(args) if isinstance(a, float)}
    arrays = [a for a in args if not isinstance(a, float)]

    def call(*xs):
        it = iter(xs)
        return fn(*[scalars[i] if i in scalars else next(it) for i in range(len(args))])

    out = jax.eval_shape(call, *arrays)
    calls = []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive is cute_jax.cute_call_p:
                calls.append((eqn.params, [tuple(v.aval.shape) for v in eqn.invars]))
            for sub in jax.core.subjaxprs(eqn) if hasattr(jax.core, "subjaxprs") else ():
                walk(sub)
            for p in eqn.params.values():
                if hasattr(p, "jaxpr"):
                    walk(p.jaxpr)

    walk(jax.make_jaxpr(call)(*arrays).jaxpr)
    return out, calls


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("m", "n", "k"), [(256, 512, 128), (1, 24, 16), (129, 257, 40), (7, 8, 0)])
def test_every_catalogue_kernel_traces_to_one_call_with_tma_extents(modules, name: str, m: int, n: int, k: int):
    mod = modules[name]
    e = mod._jax_entry()
    out, calls = traced_call(mod, structs(mod, m, n, k))
    lead = (3,) if e.batch else ()
    assert (out.shape, out.dtype) == (lead + (m, n), e.out.jnp_dtype)
    (params, shapes), = calls
    unit = {o.role: 16 // o.jnp_dtype.itemsize for o in (*e.operands, e.out) if o.role in ("a", "b", "out")}
    up = lambda x, u: -(-x // u) * u  # noqa: E731
    k_unit = np.lcm.reduce([unit[r] for r, major in (("a", e.a_major), ("b", e.b_major)) if major == "k"] or [1])
    kp = up(k, k_unit) if k else max(16, k_unit)  # an empty K runs as 16 zeros
    mp = m if e.a_major == "k" else up(m, unit["a"])
    np_ = up(n, np.lcm(unit["out"], unit["b"] if e.b_major != "k" else 1))
    assert params["shape"] == lead + (mp, np_)  # the smallest extents of whole 16-byte units
    assert shapes[0] == lead + ((mp, kp) if e.a_major == "k" else (kp, mp))
    assert shapes[1] == lead + ((np_, kp) if e.b_major == "k" else (kp, np_))
    if (m, n, k) == (256, 512, 128):  # aligned: nothing padded, the kernel reads the caller's arrays
        assert (mp, np_, kp) == (m, n, k)


def test_variants_are_picked_by_size_as_the_torch_launcher_picks(modules):
    """gemm_fp8_rowwise's launcher chain: `if M <= 16: 0 elif M <= 128: 1 elif M <= 512 and N <= 2048: 2
    elif M <= 1024 and N <= 4096: 3 elif N <= 4096: 4 else default`."""
    mod = modules["gemm_fp8_rowwise"]
    assert "elif M <= 1024 and N <= 4096:" in Path(mod.__file__).read_text()
    for (m, n, k), want in [((16, 8192, 8192), 0), ((17, 8192, 8192), 1), ((128, 4096, 64), 1), ((129, 2048, 8192), 2),
                            ((512, 2048, 2048), 2), ((513, 2048, 2048), 3), ((129, 4096, 8192), 3),
                            ((1024, 2048, 2048), 3), ((1025, 4096, 64), 4), ((129, 8192, 8192), None),
                            ((8192, 8192, 8192), None)]:
        (params, _), = traced_call(mod, structs(mod, m, n, k))[1]
        assert params["variant"] == want, (m, n, k)


def test_trace_time_errors_name_the_argument(modules):
    g = modules["gemm_bias_gelu_bf16"].gemm_bias_gelu_bf16_jax
    a, w, bias = jnp.zeros((64, 128), jnp.bfloat16), jnp.zeros((256, 128), jnp.bfloat16), jnp.zeros((256,), jnp.bfloat16)
    with pytest.raises(TypeError, match="gemm_bias_gelu_bf16: argument 'a' is float32, expected bfloat16"):
        jax.eval_shape(g, a.astype(jnp.float32), w, bias)
    with pytest.raises(ValueError, match=r"argument 'b' has shape \(256, 64\), expected \(256, 128\)"):
        jax.eval_shape(g, a, w[:, :64], bias)
    with pytest.raises(ValueError, match="argument 'a' has shape .* expected rank 2"):
        jax.eval_shape(g, a[None], w, bias)
    with pytest.raises(ValueError, match=r"argument 'bias' has shape \(255,\)"):
        jax.eval_shape(g, a, w, bias[:255])
    with pytest.raises(TypeError, match="argument 'a' must be a jax.Array, got ndarray"):
        g(np.zeros((64, 128)), w, bias)
    with pytest.raises(TypeError, match=r"takes 3 arguments \(a, b, bias\), got 2"):
        modules["gemm_bias_gelu_bf16"]._jax_entry()(a, w)
    r = modules["gemm_residual_bf16"].gemm_residual_bf16_jax  # A is M-major: stored (K, M)
    a_t, b, c = jnp.zeros((128, 64), jnp.bfloat16), jnp.zeros((32, 128), jnp.bfloat16), jnp.zeros((64, 32), jnp.bfloat16)
    with pytest.raises(ValueError, match=r"argument 'c' has shape \(32, 64\), expected \(64, 32\)"):
        jax.eval_shape(lambda a, b, c: r(a, b, 0.5, c), a_t, b, c.T)
    with pytest.raises(TypeError, match="argument 'alpha' must be a concrete number .* got a traced value"):
        jax.eval_shape(lambda a, b, s, c: r(a, b, s, c), a_t, b, jnp.float32(0.5), c)
    with pytest.raises(TypeError, match="argument 'alpha' must be a number or a one-element array, got str"):
        r(a_t, b, "0.5", c)
    with pytest.raises(ValueError, match="argument 'alpha' must be finite, got nan"):
        r(a_t, b, float("nan"), c)
    assert jax.eval_shape(lambda a, b, c: r(a, b, np.float32(2.0), c), a_t, b, c).shape == (64, 32)


def test_a_cpu_lowering_is_refused_with_the_reason(modules):
    g = modules["gemm_bf16"].gemm_bf16_jax
    a, w = jnp.zeros((64, 128), jnp.bfloat16), jnp.zeros((256, 128), jnp.bfloat16)
    with pytest.raises(RuntimeError, match="gemm_bf16: CuTe kernels run on a CUDA sm_90a device; this "
                                           "computation is being compiled for cpu"):
        g(a, w)
    with pytest.raises(RuntimeError, match="CUDA sm_90a device"):
        jax.jit(lambda a, w: g(a, w) + 1)(a, w)


SHARDED = textwrap.dedent("""
    import json, sys
    import jax, jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P
    from specgen.compile import load_rendered
    mod = load_rendered(sys.argv[1], "m")
    mesh = jax.make_mesh((4,), ("x",))
    a = jax.device_put(jnp.zeros((256, 128), jnp.bfloat16), NamedSharding(mesh, P("x", None)))
    w, bias = jnp.zeros((512, 128), jnp.bfloat16), jnp.zeros((512,), jnp.bfloat16)
    try:
        mod.gemm_bias_gelu_bf16_jax(a, w, bias)
        error = ""
    except ValueError as e:
        error = str(e)
    f = jax.shard_map(mod.gemm_bias_gelu_bf16_jax, mesh=mesh, in_specs=(P("x", None), P(), P()),
                      out_specs=P("x", None))
    out = jax.eval_shape(f, a, w, bias)
    shard = [e for e in jax.make_jaxpr(f)(a, w, bias).jaxpr.eqns[0].params["jaxpr"].eqns][0]
    inner = [q for q in shard.params["jaxpr"].eqns if q.primitive.name == "specgen_cute_call"][0]
    try:
        jax.jit(f)(a, w, bias)
        lowered = ""
    except RuntimeError as e:
        lowered = str(e)
    print(json.dumps({"error": error, "shape": list(out.shape), "per_shard": list(inner.params["shape"]),
                      "lowered": lowered}))
""")


def test_several_devices_only_under_shard_map(tmp_path):
    """Four CPU devices (a subprocess: the flag must precede jax's start): a sharded array raises naming
    the argument; under jax.shard_map each device's call sees its shard (M / 4 rows)."""
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": str(ROOT)}
    script = tmp_path / "sharded.py"
    script.write_text(SHARDED)
    proc = subprocess.run([sys.executable, str(script), str(GENERATED / "gemm_bias_gelu_bf16.py")], env=env,
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "argument 'a' is spread over 4 devices; call gemm_bias_gelu_bf16 inside jax.shard_map" in r["error"]
    assert r["shape"] == [256, 512] and r["per_shard"] == [64, 512]
    assert "CuTe kernels run on a CUDA sm_90a device" in r["lowered"]


@pytest.mark.parametrize(("name", "scalars"), [("gemm_bias_gelu_bf16", ()), ("gemm_residual_bf16", (0.5,))])
def test_the_xla_abi_kernel_compiles_for_sm90a_without_a_gpu(modules, tmp_path, name: str, scalars: tuple):
    """The kernel XLA calls is the torch launcher's kernel: TMA loads and stores, wgmma, no spills."""
    from specgen.kinds.gemm.designs.cubin import nvdisasm, sass_counts
    from specgen.kinds.gemm.designs.cute_sm90.compile import SASS_OPS

    e = modules[name]._jax_entry()
    compiled = e.compile(None, scalars, 132, f"--keep-cubin --dump-dir {tmp_path}")
    assert bytes(compiled.dump_to_object("cutlass_call"))[:4] == b"\x7fELF"
    if nvdisasm() is None:
        pytest.fail("nvdisasm missing: the [test] extra installs nvidia-cuda-nvdisasm")
    cubin = compiled.artifacts.CUBIN
    if isinstance(cubin, bytes):
        (tmp_path / "k.cubin").write_bytes(cubin)
        cubin = tmp_path / "k.cubin"
    counts, local = sass_counts(str(cubin), SASS_OPS)
    assert counts["UTMALDG"] > 0 and counts["UTMASTG"] > 0 and counts["HGMMA"] > 0
    assert local["spill_store_bytes"] == local["spill_load_bytes"] == 0


def test_one_compile_per_config_across_threads_then_the_disk_cache(modules, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECGEN_CUTE_CACHE", str(tmp_path))
    mod = modules["gemm_bf16"]
    fresh = lambda: cute_jax.CuteJaxEntry(mod._launcher, mod._jax_host, (mod.CONFIG, *mod.VARIANT_CONFIGS),  # noqa: E731
                                          mod._jax_entry().operands, "k", "k", False, "BFloat16", ())
    e = fresh()
    calls = []

    def slow_object(*args):
        calls.append(args)
        time.sleep(0.2)
        return b"\x7fELF-object"

    monkeypatch.setattr(e, "object", slow_object)
    results = []
    threads = [threading.Thread(target=lambda: results.append(e.module(None, (), 66))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(set(results)) == 1
    assert e.cache_path(None, (), 66).read_bytes() == b"\x7fELF-object"
    assert e.cache_path(None, (), 66) != e.cache_path(None, (), 132) != e.cache_path(0, (), 132)
    again = fresh()  # another process: the disk cache, no compile
    monkeypatch.setattr(again, "object", lambda *a: pytest.fail("compiled although the disk cache had it"))
    assert again.module(None, (), 66) == results[0]
