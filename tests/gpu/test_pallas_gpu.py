"""On an H100/H200 with jax[cuda]: the rendered Mosaic GPU (pallas:gpu_sm90) catalogue and the SMEM model.

- numerics of every catalogue spec with that target against the float64 reference, in the kernels' own
  dtypes (bf16, f16, fp8 e4m3), edge shapes (M = 1, tails on M, N and K, K = 0, ragged extents that the
  launcher pads), the output's memory poisoned with NaN first (a tile the kernel forgot stays NaN);
- the plan's SMEM figure equals what Mosaic GPU allocates for each rendered kernel (lowered here, on the
  device), and the model against live lowerings of JAX's own warp-specialized Hopper matmul;
- the launcher: jax.jit of the public function, trace-time errors naming the argument, the torch entry
  through DLPack sharing memory both ways.

Marked `gpu`: CI (CPU only) deselects them; gpu/run.sh runs them on the H200.
"""

from __future__ import annotations

import importlib
import re

import pytest

pytestmark = pytest.mark.gpu

NAMES = ["gemm_bf16", "gemm_small_bf16", "gemm_bias_gelu_bf16", "gemm_relu_f16", "bmm_bf16", "gemm_fp8_rowwise",
         "gemm_residual_bf16"]
# (M, N, K): aligned; M = 1; tails on every dim within TMA's tiled view; ragged extents the launcher pads
# (K = 1000, N = 100: neither within one swizzle tile nor a whole number of them); K = 0.
SHAPES = [(256, 512, 256), (1, 256, 512), (200, 144, 96), (517, 264, 1040), (130, 100, 1000), (1024, 1024, 1024),
          (96, 320, 0)]
CONFIGS = [(128, 128, 64, 4), (128, 128, 64, 5), (128, 256, 64, 4), (128, 256, 64, 2), (128, 128, 128, 3)]


def module(name: str):
    return importlib.import_module(f"generated.pallas.gpu_sm90.{name}")


def spec_of(name: str) -> dict:
    from backends.pallas.common import CATALOGUE

    return CATALOGUE[name]


def run_poisoned(fn, out_shape, out_dtype, *args):
    """Fill the allocator's free memory with NaN in the output's size first, so that the kernel's output
    lands on NaN-filled memory (XLA's allocator reuses the freed block): an unwritten tile shows."""
    import jax.numpy as jnp

    poison = jnp.full(out_shape, jnp.nan, out_dtype)
    poison.block_until_ready()
    poison.delete()
    return fn(*args)


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
@pytest.mark.parametrize("name", NAMES)
def test_numerics_against_float64(name: str, shape) -> None:
    check_numerics(spec_of(name), getattr(module(name), name), shape)


# More tiles than SMs, so a persistent CTA visits several, each with a K loop of one step (K <= tile.k): the grouped
# Mosaic GPU kernel failed to launch there (a slot held for delay_release was never released, the loads ran on into
# the next visit); the dense kernel pipelines the same way.
ONE_STEP = [(4096, 2048, 64), (2304, 4096, 48)]


@pytest.mark.parametrize("shape", ONE_STEP, ids=[f"{m}x{n}x{k}" for m, n, k in ONE_STEP])
@pytest.mark.parametrize("name", ["gemm_bf16", "gemm_fp8_rowwise"])
def test_persistent_visits_with_a_one_step_k_loop(name: str, shape) -> None:
    assert module(name).CONFIG.persistent and module(name).CONFIG.tile_k >= shape[2]
    check_numerics(spec_of(name), getattr(module(name), name), shape)


# 2-CTA clusters (TMA multicast of the shared operand) and the column-band raster, rendered here from
# catalogue specs: the same numerics on the same shapes (pairs past the last tile row / column included).
CLUSTERED = [("gemm_bias_gelu_bf16", {"cluster": {"m": 2, "n": 1}}),
             ("bmm_bf16", {"cluster": {"m": 2, "n": 1}}),
             ("gemm_residual_bf16", {"cluster": {"m": 1, "n": 2}, "schedule": {"raster": "along_n"}}),
             ("gemm_fp8_rowwise", {"cluster": {"m": 1, "n": 2}})]


def render_overrides(folder, entries) -> dict:
    """Each (catalogue name, overrides) rendered for pallas:gpu_sm90 by the design itself (no check): the spec
    and its module, by label."""
    import json

    from backends.pallas.common import catalogue_config

    from specgen.compile import load_rendered
    from specgen.registry import design_for
    from specgen.resolve import resolve
    from specgen.spec.load import load_text

    mods = {}
    for i, (name, over) in enumerate(entries):
        spec = catalogue_config(name, {**over, "targets": ["pallas:gpu_sm90"]})
        (loaded,) = load_text(json.dumps({"kernels": [spec]}), f"<test:{name}>", ".json")
        (target,) = loaded.spec.targets
        files = design_for("gemm", "pallas:tpu_v5e").render(loaded, [target], {str(target): resolve(loaded.spec, target)})
        path = folder / f"override_{i}_{name}.py"
        path.write_text(files[f"pallas/gpu_sm90/{name}.py"])
        mods[f"{name}-{i}"] = (spec, load_rendered(path, f"_override_{i}_{name}"))
    return mods


@pytest.fixture(scope="module")
def clustered(tmp_path_factory):
    return {label.rsplit("-", 1)[0]: m for label, m in render_overrides(tmp_path_factory.mktemp("clustered"), CLUSTERED).items()}


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
@pytest.mark.parametrize("name", [n for n, _ in CLUSTERED])
def test_clustered_numerics_against_float64(clustered, name: str, shape) -> None:
    spec, mod = clustered[name]
    assert mod.CONFIG.cluster_m * mod.CONFIG.cluster_n == 2
    check_numerics(spec, getattr(mod, name), shape)


# e4m3 x e5m2 (PAL004 leaves the mix to the installed jax: 0.10.2 refuses to lower it, 0.11.2 lowers it):
# where this jax lowers it, it computes what the float64 reference does, on the same shapes
MIXED_FP8 = [("gemm_fp8_rowwise", {"b": {"dtype": "fp8_e5m2", "major": "k"}}),
             ("gemm_fp8_rowwise", {"a": {"dtype": "fp8_e5m2", "major": "k"}})]


@pytest.fixture(scope="module")
def mixed_fp8(tmp_path_factory):
    return render_overrides(tmp_path_factory.mktemp("mixed"), MIXED_FP8)


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
@pytest.mark.parametrize("label", [f"{n}-{i}" for i, (n, _) in enumerate(MIXED_FP8)])
def test_mixed_fp8_numerics_against_float64(mixed_fp8, label: str, shape) -> None:
    spec, mod = mixed_fp8[label]
    assert spec["a"]["dtype"] != spec["b"]["dtype"]
    check_numerics(spec, getattr(mod, label.rsplit("-", 1)[0]), shape)


# an fp8 output after a cast to bf16 (PAL009 leaves the bf16 -> fp8 conversion to the installed jax too)
BF16_THEN_FP8 = [("gemm_fp8_rowwise", {"out": {"dtype": "fp8_e4m3"}, "epilogue": [
    {"op": "scale", "by": "scalar", "value": 0.5}, {"op": "cast", "dtype": "bf16"}]})]


@pytest.mark.parametrize("shape", SHAPES[:4], ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES[:4]])
def test_bf16_cast_before_an_fp8_store_against_float64(tmp_path_factory, shape) -> None:
    ((spec, mod),) = render_overrides(tmp_path_factory.mktemp("castfp8"), BF16_THEN_FP8).values()
    check_numerics(spec, mod.gemm_fp8_rowwise, shape)


# A module of two size-selected variants beside a clustered default (tests/backends/pallas/
# test_mgpu_variants.py's SPEC: M <= 16 on 64x64 tiles 8 deep; M <= 128 and N <= 4096 on 64x128 tiles, not
# persistent; else 128x256 in 2x1 clusters), with a bias and a scalar: each shape on one side of a bound,
# with tails on M, N and K, and the config each must run (None: the default).
VARIANT_SHAPES = [((1, 264, 520), 0), ((16, 100, 1000), 0), ((16, 8, 64), 0), ((17, 300, 136), 1),
                  ((64, 72, 4096), 1), ((128, 4096, 200), 1), ((128, 4100, 136), None), ((129, 264, 520), None),
                  ((517, 1000, 1040), None), ((7, 4097, 0), 0)]


@pytest.fixture(scope="module")
def two_variants(tmp_path_factory):
    import json

    from backends.pallas.test_mgpu_module import render
    from backends.pallas.test_mgpu_variants import SPEC

    from specgen.kinds.gemm.spec import GemmSpec

    spec = GemmSpec.model_validate(SPEC).model_dump(mode="json")  # every field spelled (the Data helper reads them)
    mod, _ = render(json.loads(json.dumps(spec)), tmp_path_factory.mktemp("variants"))
    return spec, mod


@pytest.mark.parametrize(("shape", "want"), VARIANT_SHAPES, ids=[f"{m}x{n}x{k}" for (m, n, k), _ in VARIANT_SHAPES])
def test_variant_numerics_against_float64(two_variants, shape, want) -> None:
    """Each shape runs the config its bounds pick (asserted) and matches float64 on NaN-poisoned memory."""
    spec, mod = two_variants
    assert mod._config_for(*shape) == (mod.CONFIG if want is None else mod.VARIANT_CONFIGS[want])
    check_numerics(spec, mod.mgpu_two_variants, shape)


@pytest.fixture(scope="module")
def batched_variants(tmp_path_factory):
    import json

    from backends.pallas.test_mgpu_module import render
    from backends.pallas.test_mgpu_variants import SPEC_BATCHED

    from specgen.kinds.gemm.spec import GemmSpec

    spec = GemmSpec.model_validate(SPEC_BATCHED).model_dump(mode="json")
    mod, _ = render(json.loads(json.dumps(spec)), tmp_path_factory.mktemp("batched_variants"))
    return spec, mod


# Batched (3), f16, both operands M/N-major, row scale + residual: a 1x2-cluster variant for M <= 64, a
# 128x64 variant for N <= 512, a 128x128 default; both sides of each bound, tails, K = 0.
BATCHED_SHAPES = [((1, 300, 520), 0), ((64, 72, 64), 0), ((37, 1000, 130), 0), ((65, 512, 100), 1),
                  ((300, 40, 1040), 1), ((65, 513, 100), None), ((200, 1000, 0), None)]


@pytest.mark.parametrize(("shape", "want"), BATCHED_SHAPES, ids=[f"{m}x{n}x{k}" for (m, n, k), _ in BATCHED_SHAPES])
def test_batched_variant_numerics_against_float64(batched_variants, shape, want) -> None:
    spec, mod = batched_variants
    assert mod._config_for(*shape) == (mod.CONFIG if want is None else mod.VARIANT_CONFIGS[want])
    check_numerics(spec, mod.mgpu_batched_variants, shape)


def test_variant_torch_entry(two_variants) -> None:
    """The torch entry calls the same jitted entry: a decode shape and a prefill shape, against float64."""
    import torch

    _, mod = two_variants
    gen = torch.Generator(device="cuda").manual_seed(1)
    for M in (3, 100, 300):
        a = torch.randn(M, 256, device="cuda", generator=gen).bfloat16()
        w = torch.randn(520, 256, device="cuda", generator=gen).div_(16).bfloat16()
        bias = torch.randn(520, device="cuda", generator=gen).bfloat16()
        out = mod.mgpu_two_variants_torch(a, w.t(), bias, 0.5)
        want = (a.double() @ w.double().t() + bias.double()) * 0.5
        torch.testing.assert_close(out.double(), want, atol=3e-2, rtol=2e-2)


@pytest.fixture(scope="module")
def gated_modules(tmp_path_factory):
    """The gated forms' modules, rendered for pallas:gpu_sm90 by the design itself, by name."""
    import json

    from backends.pallas.common import MGPU_GATED_FORMS

    from specgen.compile import load_rendered
    from specgen.registry import design_for
    from specgen.resolve import resolve
    from specgen.spec.load import load_text

    folder, mods = tmp_path_factory.mktemp("mgpu_gated"), {}
    for name, spec in MGPU_GATED_FORMS.items():
        (loaded,) = load_text(json.dumps({"kernels": [spec]}), f"<test:{name}>", ".json")
        (target,) = loaded.spec.targets
        files = design_for("gemm", target).render(loaded, [target], {str(target): resolve(loaded.spec, target)})
        (folder / f"{name}.py").write_text(files[f"pallas/gpu_sm90/{name}.py"])
        mods[name] = load_rendered(folder / f"{name}.py", f"_gated_{name}")
    return mods


GATED_SHAPES = [(256, 512, 256), (1, 256, 512), (517, 264, 1040), (130, 100, 1000), (96, 320, 0)]


@pytest.mark.parametrize("shape", GATED_SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in GATED_SHAPES])
@pytest.mark.parametrize("name", ["mgpu_gated_halves_bias", "mgpu_gated_il_f16_batch", "mgpu_gated_halves_mn_residual"])
def test_gated_numerics_against_float64(gated_modules, name: str, shape) -> None:
    """The dense kernel's gated epilogue (both layouts, both B majors, a bias or residual after it, batched, f16):
    fn(gate) * up then the chain, against float64 on NaN-poisoned memory, at aligned shapes, M = 1, tails on every
    dim, N and K the launcher pads (each half of B on its own) and K = 0."""
    from backends.pallas.common import MGPU_GATED_FORMS

    spec = MGPU_GATED_FORMS[name]
    check_numerics(spec, getattr(gated_modules[name], name), shape)


def check_numerics(spec: dict, fn, shape) -> None:
    import numpy as np
    from backends.pallas.common import Data, f64, jnp_dtype, reference

    M, N, K = shape
    data = Data(spec, M, N, K, batch=3, tag="mgpu")
    a, b = data.operands()
    args = data.epilogue_args()
    out_shape = (*data.batch, M, N)
    out = run_poisoned(fn, out_shape, jnp_dtype(spec["out"]["dtype"]), a, b, *[v for _, v in args])
    assert out.shape == out_shape and out.dtype == jnp_dtype(spec["out"]["dtype"])
    got = f64(out.astype("float32"))
    assert not got.isnan().any(), "the kernel left part of the output unwritten (NaN poison) or produced NaN"
    want = reference(spec, a, b, args)
    # The output dtype's rounding, relative to each element and to the result's scale (a sum of K
    # products that cancels keeps the absolute error of its terms; fp8 wgmma accumulates in a
    # narrower adder than f32): bf16 2**-7, f16 2**-10, e4m3 2**-4, e5m2 2**-3, with margin.
    eps = {"bf16": 1e-2, "f16": 2e-3, "f32": 2e-3, "fp8_e4m3": 7e-2, "fp8_e5m2": 1.3e-1}[spec["out"]["dtype"]]
    scale = float(want.abs().max()) + 1.0 if want.numel() else 1.0
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=eps, atol=eps * scale)


@pytest.mark.parametrize("name", NAMES)
def test_plan_smem_is_what_mosaic_gpu_allocates(name: str) -> None:
    """Lower the rendered kernel in each of its configs (the default, then each size-selected variant,
    forced) with Mosaic GPU's SMEM limit set to 1 byte: its error carries the exact figure it would
    allocate; the plan (and `specgen check`) must say the same."""
    import functools

    import jax
    import jax.numpy as jnp
    from backends.pallas.common import Data
    from jax.experimental.mosaic.gpu import core as mgpu_core

    mod = module(name)
    spec = spec_of(name)
    # K long enough for every stage of every config (Mosaic GPU allocates min(stages, K steps) buffers:
    # a short K needs less than the plan, which is the most it allocates; compile.py does the same)
    data = Data(spec, 512, 512, 4096, batch=2)
    args = [*data.operands(), *[v for _, v in data.epilogue_args()]]
    arrays = [jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x)) for x in args if not isinstance(x, float)]
    assert mod.CONFIG.smem_bytes == mod.METADATA["smem_bytes"]
    for cfg in (mod.CONFIG, *mod.VARIANT_CONFIGS):
        launch = functools.partial(mod._launch, config=cfg)

        def call(*xs, launch=launch):
            it = iter(xs)
            return launch(*[x if isinstance(x, float) else next(it) for x in args])

        with mgpu_core.artificial_shared_memory_limit(1), pytest.raises(Exception) as err:
            jax.jit(call).trace(*arrays).lower()
        got = int(re.search(r"smem_bytes=(\d+)", str(err.value)).group(1))
        assert got == cfg.smem_bytes, cfg


def test_jit_of_the_public_function_and_trace_time_errors() -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    mod = module("gemm_bias_gelu_bf16")
    a = jnp.ones((128, 256), jnp.bfloat16)
    w = jnp.ones((512, 256), jnp.bfloat16)
    bias = jnp.zeros((512,), jnp.bfloat16)
    out = jax.jit(mod.gemm_bias_gelu_bf16)(a, w, bias)
    np.testing.assert_allclose(np.asarray(out.astype(jnp.float32)), 256.0, rtol=1e-2)
    with pytest.raises(TypeError, match="argument 'a' is float32"):
        mod.gemm_bias_gelu_bf16(a.astype(jnp.float32), w, bias)
    with pytest.raises(ValueError, match="argument 'b' has shape"):
        mod.gemm_bias_gelu_bf16(a, w[:, :128], bias)
    with pytest.raises(ValueError, match="argument 'bias' has shape"):
        mod.gemm_bias_gelu_bf16(a, w, bias[:10])


def test_torch_entry_shares_memory_through_dlpack() -> None:
    import jax
    import torch

    from specgen.runtime import jax as rt

    mod = module("gemm_bf16")
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(300, 256, device="cuda", generator=gen).bfloat16()
    w = torch.randn(520, 256, device="cuda", generator=gen).bfloat16()
    ja = rt.from_torch("t", "a", a, transpose=False)
    assert ja.unsafe_buffer_pointer() == a.data_ptr()  # torch -> jax: no copy
    out = mod.gemm_bf16_torch(a, w.t())
    assert out.is_cuda and out.shape == (300, 520) and out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), (a.double() @ w.double().t()).float(), atol=1e-1, rtol=1e-2)
    j = jax.numpy.ones((64, 64), jax.numpy.bfloat16)
    assert rt.to_torch(j).data_ptr() == j.unsafe_buffer_pointer()  # jax -> torch: no copy


def test_torch_entry_short_path_shares_memory_and_orders_streams() -> None:
    """The torch entry's short DLPack path (one stream handshake per call, capsules without one): the
    arrays alias the tensors, and work torch queued on a side stream just before the call (filling A and
    B) is seen by the kernel; the result is ready on torch's stream (read right after, no sync)."""
    import torch

    from specgen.runtime import jax as rt

    mod = module("gemm_bias_gelu_bf16")
    a = torch.empty(2048, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.empty(768, 1024, device="cuda", dtype=torch.bfloat16)
    bias = torch.empty(768, device="cuda", dtype=torch.bfloat16)
    ja, jw, jb = rt.torch_to_jax("t", (("a", a, False), ("w", w, False), ("bias", bias, False)))
    assert (ja.unsafe_buffer_pointer(), jw.unsafe_buffer_pointer(), jb.unsafe_buffer_pointer()) == \
        (a.data_ptr(), w.data_ptr(), bias.data_ptr())
    side = torch.cuda.Stream()
    for round_ in range(3):
        with torch.cuda.stream(side):
            torch.cuda._sleep(20_000_000)  # keep the stream busy, so a missing handshake reads stale data
            a.normal_(generator=torch.Generator(device="cuda").manual_seed(round_))
            w.normal_(generator=torch.Generator(device="cuda").manual_seed(100 + round_)).mul_(1 / 32)
            bias.normal_(generator=torch.Generator(device="cuda").manual_seed(200 + round_))
            out = mod.gemm_bias_gelu_bf16_torch(a, w.t(), bias)
            want = torch.nn.functional.gelu(a.double() @ w.double().t() + bias.double(), approximate="tanh")
            torch.testing.assert_close(out.double(), want, atol=3e-2, rtol=2e-2)
    torch.cuda.synchronize()


@pytest.mark.parametrize("config", CONFIGS, ids=[str(c) for c in CONFIGS])
def test_mgpu_smem_model_matches_a_live_lowering(config) -> None:
    import jax
    import jax.numpy as jnp
    from backends.pallas.test_mgpu_smem import model
    from jax.experimental.pallas.ops.gpu import hopper_matmul_mgpu as hm

    from specgen.targets import SM90

    tm, tn, tk, steps = config
    want = model(tm, tn, tk, steps)
    cfg = hm.TuningConfig(tile_m=tm, tile_n=tn, tile_k=tk, max_concurrent_steps=steps, epi_tile_m=64, epi_tile_n=64)
    a = jax.ShapeDtypeStruct((4096, 4096), jnp.bfloat16)
    if want <= SM90.smem_per_block:
        jax.jit(lambda x, y: hm.matmul(x, y, None, cfg)).lower(a, a).compile()
        return
    with pytest.raises(Exception, match=re.escape(f"smem_bytes={want} > max_smem_bytes={SM90.smem_per_block}")):
        jax.jit(lambda x, y: hm.matmul(x, y, None, cfg)).lower(a, a).compile()
