"""The Mosaic GPU (pallas:gpu_sm90) modules on a CPU machine: every catalogue spec with that target renders
a module that imports without a GPU (the jax CI installs), whose plan figures are the ones check resolved
and whose SMEM figure is what Mosaic GPU allocated when the module was lowered for CUDA (the record);
the launcher's trace-time shapes (padding for TMA's tiled view, M = 1, K = 0) and errors naming the
argument; refusal without a CUDA device and for arrays spread over several devices. Numerics run on the
H200: tests/gpu/test_pallas_gpu.py."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from backends.pallas.common import CATALOGUE, MGPU_GATED_FORMS, catalogue_config, jnp_dtype
from specgen.compile import load_rendered
from specgen.kinds.gemm.designs.pallas.design import is_mgpu_target
from specgen.kinds.gemm.spec import GemmSpec
from specgen.registry import design_for
from specgen.resolve import resolve
from specgen.spec.load import load_text

ROOT = Path(__file__).resolve().parents[3]
MGPU = {name: spec for name, spec in CATALOGUE.items() if "pallas:gpu_sm90" in spec["targets"]}
RECORD = ROOT / "bench" / "results" / "2026-11-22-cpu-mgpu-smem-catalogue.jsonl"


def render(spec: dict, tmp: Path):
    """Render the spec's Mosaic GPU module into `tmp` and import it; also return what check resolved."""
    (loaded,) = load_text(json.dumps({"kernels": [spec]}), f"<test:{spec['name']}>", ".json")
    (target,) = [t for t in loaded.spec.targets if is_mgpu_target(t)]
    resolved = resolve(loaded.spec, target)
    design = design_for(loaded.spec.kind, "pallas:tpu_v5e")
    files = design.render(loaded, [target], {str(target): resolved})
    assert set(files) == {f"pallas/gpu_sm90/{spec['name']}.py", "pallas/gpu_sm90/__init__.py"}
    path = tmp / f"mgpu_{spec['name']}.py"
    path.write_text(files[f"pallas/gpu_sm90/{spec['name']}.py"])
    return load_rendered(path, f"_specgen_mgpu_test_{spec['name']}"), resolved


@pytest.fixture(scope="module")
def modules(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mgpu")
    return {name: render(spec, tmp) for name, spec in MGPU.items()}


def structs(spec: dict, M: int, N: int, K: int, batch: int = 3) -> list:
    s = GemmSpec.model_validate(spec)
    lead = (batch,) if s.batch else ()
    bn = 2 * N if s.epilogue and s.epilogue[0].op == "gated" else N  # gate and up columns
    args: list = [jax.ShapeDtypeStruct((*lead, M, K) if s.a.major == "k" else (*lead, K, M), jnp_dtype(s.a.dtype.value)),
                  jax.ShapeDtypeStruct((*lead, bn, K) if s.b.major == "k" else (*lead, K, bn), jnp_dtype(s.b.dtype.value))]
    for arg in s.runtime_args():
        shape = {"vec_m": (M,), "vec_n": (N,), "matrix": (*lead, M, N), "scalar": ()}[arg.shape]
        args.append(jax.ShapeDtypeStruct(shape, jnp_dtype("f32" if arg.shape == "scalar" else arg.dtype.value)))
    return args


def test_the_catalogue_has_mosaic_gpu_specs() -> None:
    assert set(MGPU) == {"gemm_bf16", "gemm_small_bf16", "gemm_bias_gelu_bf16", "gemm_relu_f16", "bmm_bf16",
                         "gemm_fp8_rowwise", "gemm_residual_bf16", "linear_gelu_train_mgpu"}


@pytest.mark.parametrize("name", sorted(MGPU))
def test_module_imports_without_a_gpu_with_the_plan_check_resolved(modules, name: str) -> None:
    mod, resolved = modules[name]
    assert jax.default_backend() == "cpu"
    assert mod.METADATA["targets"] == ["pallas:gpu_sm90"]
    assert mod.CONFIG.smem_bytes == mod.METADATA["smem_bytes"] == resolved.budget.total
    # every config (the default, then each size-selected variant) is the one check resolved and checked
    assert len(mod.VARIANT_CONFIGS) == len(resolved.variants) == len(mod.METADATA["variants"])
    for cfg, r in zip((mod.CONFIG, *mod.VARIANT_CONFIGS), (resolved, *resolved.variants), strict=True):
        assert (r.spec.tile.m, r.spec.tile.n, r.spec.tile.k) == (cfg.tile_m, cfg.tile_n, cfg.tile_k)
        assert r.ab_stages == cfg.stages and min(1, cfg.stages - 1) == cfg.wgmma_in_flight
        assert cfg.smem_bytes == r.budget.total and (cfg.cluster_m, cfg.cluster_n) == (r.spec.cluster.m, r.spec.cluster.n)
        assert cfg.wg_n * mod.WARPGROUPS == cfg.tile_n


def test_plan_smem_is_what_mosaic_gpu_allocated_when_lowered() -> None:
    """The record: each catalogue module lowered for CUDA (Mosaic GPU's own figure, from its SMEM-limit
    error at a 1-byte limit) by the SMEM probe (bench/mgpu_smem_probe.py until issue 21, in git history) --catalogue; the H200 test does it live."""
    rows = [json.loads(line) for line in RECORD.read_text().splitlines() if line.startswith('{"kernel"')]
    # (the training kernel, later than the record, is lowered live: tests/backends/pallas/test_training_mgpu.py)
    assert {r["kernel"] for r in rows} == set(MGPU) - {"linear_gelu_train_mgpu"}
    for row in rows:
        assert row["lowered"] == row["plan"] == load_rendered(
            ROOT / "generated" / "pallas" / "gpu_sm90" / f"{row['kernel']}.py", f"_mgpu_rec_{row['kernel']}").CONFIG.smem_bytes


SHAPES = [(256, 512, 256), (1, 256, 512), (130, 100, 1000), (517, 264, 1040), (96, 320, 0), (0, 64, 64)]


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
@pytest.mark.parametrize("name", ["gemm_bf16", "bmm_bf16", "gemm_residual_bf16", "gemm_fp8_rowwise"])
def test_traced_shapes_cover_tails_m1_and_empty_k(modules, name: str, shape) -> None:
    """Tracing the jitted call (no lowering, no GPU) runs every launcher branch: TMA padding of ragged
    extents, the sliced result, K = 0 and an empty output."""
    mod, _ = modules[name]
    M, N, K = shape
    args = structs(MGPU[name], M, N, K)
    out = jax.eval_shape(mod._call, *args)
    lead = (3,) if MGPU[name]["batch"] else ()
    assert out.shape == (*lead, M, N) and out.dtype == jnp_dtype(MGPU[name]["out"]["dtype"])


CLUSTERED = [("bmm_bf16", {"cluster": {"m": 2, "n": 1}}),
             ("gemm_residual_bf16", {"cluster": {"m": 1, "n": 2}, "schedule": {"raster": "along_n"}}),
             ("gemm_fp8_rowwise", {"cluster": {"m": 2, "n": 1}, "schedule": {"group_m": 4}})]


@pytest.mark.parametrize(("name", "over"), CLUSTERED, ids=[n for n, _ in CLUSTERED])
def test_clusters_and_raster_render_lower_and_trace(tmp_path, name: str, over: dict) -> None:
    """A 2-CTA cluster (spec: cluster) renders a kernel launched in pairs whose shared operand is loaded
    by TMA multicast (B for a pair along M, A along N), and schedule.raster picks planar_snake's minor
    dim; lowered for CUDA on this CPU machine, Mosaic GPU allocates exactly the plan's SMEM (the cluster
    barriers take the bytes the plain ones did), and tracing covers tails, M = 1 and K = 0."""
    from specgen.kinds.gemm.designs.pallas.compile import compile_module
    from specgen.targets import TARGETS

    spec = catalogue_config(name, over)
    mod, resolved = render(spec, tmp_path)
    cfg = mod.CONFIG
    assert (spec["cluster"]["m"], spec["cluster"]["n"]) == (cfg.cluster_m, cfg.cluster_n)
    assert (1 if spec.get("schedule", {}).get("raster") == "along_n" else 0) == cfg.raster_dim
    text = Path(mod.__file__).read_text()
    assert "cluster=(cluster,) if cluster > 1 else ()," in text and 'cluster_names=("cluster",) if cluster > 1' in text
    # the shared operand's spec, and only it, loads collectively across the pair
    assert 'a_shared, b_shared = ("cluster",) if cfg.cluster_n > 1 else (), ("cluster",) if cfg.cluster_m > 1 else ()' in text
    lines = text.splitlines()
    for side in "ab":
        at = next(i for i, ln in enumerate(lines) if ln.strip().startswith(f"{side}_spec = plgpu.BlockSpec("))
        assert f"collective_axes={side}_shared)" in lines[at + 1]
    (r,) = compile_module(mod, TARGETS["pallas:gpu_sm90"])
    assert (r.compiler_smem, r.error) == (cfg.smem_bytes, "") and resolved.budget.total == cfg.smem_bytes
    for M, N, K in SHAPES:
        out = jax.eval_shape(mod._call, *structs(spec, M, N, K))
        assert out.shape == ((3,) if spec["batch"] else ()) + (M, N)


SWAPPED = [("gemm_bf16", {"tile": {"m": 8, "n": 128, "k": 128}}),
           ("gemm_fp8_rowwise", {"tile": {"m": 16, "n": 128, "k": 256}}),
           ("bmm_bf16", {"tile": {"m": 16, "n": 256, "k": 64}}),  # batched, B stored (K, N)
           ("gemm_relu_f16", {"tile": {"m": 32, "n": 128, "k": 64}}),  # f16, B stored (K, N)
           ("gemm_residual_bf16", {"tile": {"m": 16, "n": 128, "k": 64}})]  # A stored (K, M), a residual


@pytest.mark.parametrize(("name", "over"), SWAPPED, ids=[n for n, _ in SWAPPED])
def test_swap_ab_renders_lowers_and_traces(tmp_path, name: str, over: dict) -> None:
    """`pallas.swap_ab`: the kernel issues wgmma on B's rows and A's tile_m rows (out^T's tile) and stores
    out's subtiles (and reads a residual's) through the slot's transposed view; lowered for CUDA on this CPU machine, Mosaic GPU
    allocates exactly the plan's SMEM (the swap moves no buffer), and tracing covers tails, M = 1, K = 0.
    Numerics: tests/gpu/test_mgpu_swap_ab_gpu.py."""
    from specgen.kinds.gemm.designs.pallas.compile import compile_module
    from specgen.targets import TARGETS

    spec = catalogue_config(name, {"pallas": {"swap_ab": True}, "cluster": {"m": 1, "n": 1},
                                   "pipeline": {"ab_stages": "auto"}, **over})
    mod, resolved = render(spec, tmp_path)
    cfg = mod.CONFIG
    assert cfg.swap_ab and (cfg.tile_m, cfg.tile_n) == (over["tile"]["m"], over["tile"]["n"])
    text = Path(mod.__file__).read_text()
    assert "acc_shape = (cfg.wg_n, cfg.tile_m) if cfg.swap_ab else (cfg.tile_m, cfg.wg_n)" in text
    assert "out_smem.at[wg, slot].T[...] = y" in text
    (r,) = compile_module(mod, TARGETS["pallas:gpu_sm90"])
    assert (r.compiler_smem, r.error) == (cfg.smem_bytes, "") and resolved.budget.total == cfg.smem_bytes
    for M, N, K in SHAPES:
        out = jax.eval_shape(mod._call, *structs(spec, M, N, K))
        assert out.shape == ((3,) if spec["batch"] else ()) + (M, N)


@pytest.mark.parametrize("name", list(MGPU_GATED_FORMS))
def test_gated_forms_render_lower_and_trace(tmp_path, name: str) -> None:
    """A gated epilogue (B (K, 2N) viewed with a gate / up axis, a gate and an up tile a step, two accumulators):
    lowered for CUDA on this CPU machine, Mosaic GPU allocates exactly the plan's SMEM (two B buffers a stage);
    tracing covers tails, M = 1, K = 0 and an empty output; an odd column count of B is refused, naming b."""
    from specgen.kinds.gemm.designs.pallas.compile import compile_module
    from specgen.targets import TARGETS

    spec = MGPU_GATED_FORMS[name]
    mod, resolved = render(spec, tmp_path)
    cfg = mod.CONFIG
    (r,) = compile_module(mod, TARGETS["pallas:gpu_sm90"])
    assert (r.compiler_smem, r.error) == (cfg.smem_bytes, "") and resolved.budget.total == cfg.smem_bytes
    assert "plgpu.wgmma(up_ref, a_op" in Path(mod.__file__).read_text()
    for M, N, K in SHAPES:
        out = jax.eval_shape(mod._call, *structs(spec, M, N, K))
        assert out.shape == ((3,) if spec["batch"] else ()) + (M, N)
    a, b, *rest = structs(spec, 40, 128, 64)
    odd = jax.ShapeDtypeStruct(b.shape[:-2] + ((255, 64) if spec["b"]["major"] == "k" else (64, 255)), b.dtype)
    with pytest.raises(ValueError, match="= 255 must be even: the gated epilogue reads gate and up columns"):
        jax.eval_shape(mod._call, a, odd, *rest)


def test_swap_ab_sweeps_for_decode_slots_only() -> None:
    """`specgen tune`'s Mosaic GPU space: a slot serving M <= 64 sweeps swap_ab with 8- to 32-row tiles (the
    unswapped small tiles are check's MMA001 refusals), a prefill slot neither."""
    from specgen.kinds.gemm.designs.pallas.design import DESIGN
    from specgen.kinds.gemm.sections import When

    tune_space = DESIGN.tune_space
    from specgen.targets import TARGETS

    spec = GemmSpec.model_validate(MGPU["gemm_bf16"])
    decode, prefill = tune_space(spec, TARGETS["pallas:gpu_sm90"], When(m_max=16)), tune_space(spec, TARGETS["pallas:gpu_sm90"])
    assert decode["pallas.swap_ab"] == (False, True) and {8, 16, 32} <= set(decode["tile.m"])
    assert "pallas.swap_ab" not in prefill and min(prefill["tile.m"]) == 64


def test_unswapped_modules_render_no_swap_code(modules) -> None:
    """A module none of whose configs swaps renders the plain kernel only (the swap's branches are absent)."""
    for name, (mod, _) in modules.items():
        configs = (mod.CONFIG, *mod.VARIANT_CONFIGS)
        assert ("cfg.swap_ab" in Path(mod.__file__).read_text()) == any(c.swap_ab for c in configs), name


def test_tma_extents() -> None:
    from specgen.runtime import mgpu

    # within one tile, or a whole number of tiles; contiguous dims a multiple of 16 bytes (8 bf16)
    assert [mgpu.tma_extent(e, 64, 8) for e in (1, 8, 60, 64, 100, 128, 1000, 1024, 0)] == \
        [8, 8, 64, 64, 128, 128, 1024, 1024, 8]
    assert [mgpu.tma_extent(e, 8, 1) for e in (1, 7, 8, 9, 1000, 1001)] == [1, 7, 8, 16, 1000, 1008]
    x = jnp.ones((2, 3))
    assert mgpu.pad(x, (2, 3)) is x
    np.testing.assert_array_equal(mgpu.pad(x, (4, 5))[2:], 0)


def test_trace_time_errors_name_the_argument(modules) -> None:
    mod, _ = modules["gemm_bias_gelu_bf16"]
    a, w, bias = (jnp.zeros((64, 128), jnp.bfloat16), jnp.zeros((256, 128), jnp.bfloat16), jnp.zeros((256,), jnp.bfloat16))
    with pytest.raises(TypeError, match="gemm_bias_gelu_bf16: argument 'a' is float32, expected bfloat16"):
        mod._call(a.astype(jnp.float32), w, bias)
    with pytest.raises(ValueError, match=r"argument 'b' has shape \(256, 64\), expected \(256, 128\)"):
        mod._call(a, w[:, :64], bias)
    with pytest.raises(ValueError, match="argument 'a' has shape .* expected rank 2"):
        mod._call(a[None], w, bias)
    with pytest.raises(ValueError, match=r"argument 'bias' has shape \(255,\)"):
        mod._call(a, w, bias[:255])
    with pytest.raises(TypeError, match="argument 'a' must be a jax.Array"):
        mod.gemm_bias_gelu_bf16(np.zeros((64, 128)), w, bias)
    mod_r, _ = modules["gemm_residual_bf16"]  # A is M-major: (K, M)
    with pytest.raises(ValueError, match=r"argument 'c' has shape \(32, 64\), expected \(64, 32\)"):
        mod_r._call(jnp.zeros((128, 64), jnp.bfloat16), jnp.zeros((32, 128), jnp.bfloat16), 0.5,
                    jnp.zeros((32, 64), jnp.bfloat16))


def test_a_call_without_a_cuda_device_says_so(modules) -> None:
    import torch

    mod, _ = modules["gemm_bf16"]
    a, w = jnp.zeros((64, 128), jnp.bfloat16), jnp.zeros((256, 128), jnp.bfloat16)
    with pytest.raises(RuntimeError, match="gemm_bf16: Mosaic GPU kernels run on an sm90 CUDA device; jax's "
                                           "default backend is 'cpu'"):
        mod.gemm_bf16(a, w)
    with pytest.raises(RuntimeError, match="sm90 CUDA device"):  # the torch entry refuses before converting
        mod.gemm_bf16_torch(torch.zeros(64, 128, dtype=torch.bfloat16), torch.zeros(256, 128, dtype=torch.bfloat16).t())


def test_torch_to_jax_on_cpu_tensors_and_its_errors() -> None:
    """CPU tensors take jax's own DLPack import (the short path is CUDA's): the arrays alias the tensors,
    a transposed view is read in its stored layout, and a tensor that is not contiguous in the layout
    the kernel reads, or not a tensor, is refused naming the argument."""
    import torch

    from specgen.runtime import jax as rt

    a = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    w = torch.arange(8, dtype=torch.float32).reshape(2, 4)
    ja, jw = rt.torch_to_jax("f", (("a", a, False), ("b", w.t(), True)))
    assert ja.shape == (3, 4) and jw.shape == (2, 4)
    np.testing.assert_array_equal(np.asarray(jw), w.numpy())
    assert ja.unsafe_buffer_pointer() == a.data_ptr()
    with pytest.raises(ValueError, match=r"f: argument 'b' must be contiguous along dim 0 \(stride 1, the spec's major"):
        rt.torch_to_jax("f", (("a", a, False), ("b", w, True)))
    # a legal view jax cannot share (padded rows, a strided vector, an offset base) is copied, once
    padded = torch.zeros(3, 7)[:, :4]
    padded.copy_(a)
    offset = torch.zeros(13)[1:].view(3, 4)
    offset.copy_(a)
    jp, jo, jv = rt.torch_to_jax("f", (("a", padded, False), ("c", offset, False), ("v", torch.arange(8.0)[::2], None)))
    np.testing.assert_array_equal(np.asarray(jp), a.numpy())
    np.testing.assert_array_equal(np.asarray(jo), a.numpy())
    np.testing.assert_array_equal(np.asarray(jv), [0.0, 2.0, 4.0, 6.0])
    with pytest.raises(TypeError, match="f: argument 'a' must be a torch.Tensor, got ndarray"):
        rt.torch_to_jax("f", (("a", a.numpy(), False),))


def test_arrays_on_several_devices_are_refused(tmp_path) -> None:
    """A concrete array spread over two devices raises before anything is traced (the kernel sees one
    device's memory; `jax.shard_map` hands it per-device shards instead)."""
    code = textwrap.dedent(f"""
        import os
        os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
        import jax, jax.numpy as jnp, numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        from specgen.compile import load_rendered
        mod = load_rendered({str(ROOT / "generated" / "pallas" / "gpu_sm90" / "gemm_bf16.py")!r}, "m")
        mesh = Mesh(np.array(jax.devices()), ("x",))
        a = jax.device_put(jnp.zeros((64, 128), jnp.bfloat16), NamedSharding(mesh, P("x", None)))
        w = jnp.zeros((256, 128), jnp.bfloat16)
        try:
            mod.gemm_bf16(a, w)
        except ValueError as e:
            print("REFUSED", e)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert "REFUSED gemm_bf16: argument 'a' is spread over 2 devices; call gemm_bf16 inside jax.shard_map" in \
        out.stdout, out.stderr[-2000:]


def test_the_compile_hook_reports_mosaic_gpus_smem(modules) -> None:
    """`specgen compile` on a Mosaic GPU module lowers it for CUDA on this CPU machine (jax 0.10.2 with
    absl-py lowers Mosaic GPU without a GPU or the CUDA plugin) and reports the SMEM Mosaic GPU allocates:
    it equals the plan's."""
    from specgen.kinds.gemm.designs.pallas.compile import compile_module
    from specgen.targets import TARGETS

    mod, _ = modules["gemm_residual_bf16"]
    results = compile_module(mod, TARGETS["pallas:gpu_sm90"])  # the default, then each variant
    assert [(r.kernel, r.variant) for r in results] == [("gemm_residual_bf16", None)] + [
        ("gemm_residual_bf16", i) for i in range(len(mod.VARIANT_CONFIGS))]
    for r, cfg in zip(results, (mod.CONFIG, *mod.VARIANT_CONFIGS), strict=True):
        assert (r.target, r.plan_smem) == ("pallas:gpu_sm90", cfg.smem_bytes)
        assert (r.compiler_smem, r.error) == (cfg.smem_bytes, "")
