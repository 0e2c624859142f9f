"""The grouped Pallas Mosaic GPU kernel with groups along K (`groups.ragged = "k"`, the weight gradient;
templates/grouped/pallas/grouped_mgpu_k.py.jinja) on a CPU machine: every form of
specgen/kinds/grouped/testing/mgpu_specs.py's MGPU_RAGGED_K_FORMS renders, and each config of it (the default, a
size-selected variant) lowers for CUDA here (jax 0.10.2's whole Python lowering: the kernel body, layout inference,
the SMEM allocation) with Mosaic GPU allocating exactly the plan's SMEM; the launcher's shapes (M, N and K off
every tile, M = 1, K = 0, G = 1) lower; the entry's glue (the group offsets, the K tiles each group walks, TMA's
padding, the bias rows, the result sliced back) runs against the float64 per-group loop with the kernel replaced by
a jnp model of its contract (each group's K tiles at whole-tile coordinates, the rows outside the group selected
away, NaN in the K rows past the last group); and check's MGP001 (its cases: rule_cases_grouped_mgpu.py). The
kernel's numerics and speed run on a Hopper GPU: tests/gpu/test_grouped_mgpu_k_gpu.py, gpu/bench_grouped_mgpu_k.py."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from backends.pallas.test_grouped_mgpu import loaded, render
from specgen.check import check_all
from specgen.kinds.gemm.designs.pallas.compile import mosaic_gpu_launch_smem
from specgen.kinds.gemm.testing.data import tolerance
from specgen.kinds.grouped.designs.pallas_mgpu.compile import compile_module
from specgen.kinds.grouped.testing.data import CASES
from specgen.kinds.grouped.testing.mgpu_specs import MGPU_RAGGED_K_FORMS
from specgen.kinds.grouped.testing.ragged_k import RaggedKProblem, ragged_k
from specgen.resolve import resolve
from specgen.targets import TARGETS

TARGET = TARGETS["pallas:gpu_sm90"]
JNP = {"bf16": jnp.bfloat16, "f16": jnp.float16, "f32": jnp.float32}
FROM_TORCH = {torch.bfloat16: jnp.bfloat16, torch.float16: jnp.float16, torch.float32: jnp.float32}


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    folder = tmp_path_factory.mktemp("grouped_mgpu_k_cpu")
    return {name: render(s, folder) for name, s in MGPU_RAGGED_K_FORMS.items()}


def structs(spec: dict, m: int, n: int, k: int, g: int) -> list:
    """The entry's arguments: A and B in their stored majors, the index, the epilogue's (bias (G, N), a scalar)."""
    dt = JNP[spec["a"]["dtype"]]
    args = [jax.ShapeDtypeStruct((m, k) if spec["a"]["major"] == "k" else (k, m), dt),
            jax.ShapeDtypeStruct((n, k) if spec["b"]["major"] == "k" else (k, n), dt), jax.ShapeDtypeStruct((g,), jnp.int32)]
    for op in spec["epilogue"]:
        if op["op"] == "bias":
            args.append(jax.ShapeDtypeStruct((g, n), JNP[op["dtype"]]))
        elif op["op"] == "scale" and op["value"] is None:
            args.append(jax.ShapeDtypeStruct((), jnp.float32))
    return args


# --- lowering for CUDA (the compile hook) -------------------------------------------------------------------
@pytest.mark.parametrize("name", list(MGPU_RAGGED_K_FORMS))
def test_each_config_lowers_for_cuda_with_the_plans_smem(modules, name):
    mod = modules[name]
    results = compile_module(mod, TARGET)
    configs = [mod.CONFIG, *mod.VARIANT_CONFIGS]
    assert [r.variant for r in results] == [None, *range(len(mod.VARIANT_CONFIGS))]
    for r, cfg in zip(results, configs, strict=True):
        assert r.error == "" and r.compiler_smem == r.plan_smem == cfg.smem_bytes
    resolved = resolve(loaded(MGPU_RAGGED_K_FORMS[name]).spec, TARGET)
    for ctx, cfg in zip([resolved, *resolved.variants], configs, strict=True):
        assert ctx.budget.total == cfg.smem_bytes and ctx.ab_stages == cfg.stages and ctx.spec.tile.k == cfg.tile_k
    assert mod.METADATA["groups"]["ragged"] == "k" and mod.METADATA["kind"] == "grouped"


def test_launcher_shapes_lower(modules):
    """M = 1 and K = 0 (A, B and out padded for TMA; every group empty) with the per-group bias and a runtime
    scalar: the kernel lowers with at most its plan's SMEM (the compile hook's problem has M, N and K off every
    tile), and the result is (G, M, N), for M, N and K off every tile and G = 1 too."""
    name = "gkm_k_k_bias_f16"
    mod, spec = modules[name], MGPU_RAGGED_K_FORMS[name]
    lowered = jax.jit(mod._launch).trace(*structs(spec, 1, 200, 0, 2)).lower(lowering_platforms=("cuda",))
    assert mosaic_gpu_launch_smem(lowered) <= mod.CONFIG.smem_bytes
    for m, n, k, g in ((1, 200, 0, 2), (300, 520, 777, 5), (70, 128, 64, 1)):
        out = jax.eval_shape(mod._call, *structs(spec, m, n, k, g))
        assert out.shape == (g, m, n) and out.dtype == jnp.float32
    assert jax.eval_shape(mod._call, *structs(spec, 30, 40, 50, 0)).shape == (0, 30, 40)  # G = 0: no kernel


# --- the entry's glue, the kernel replaced by a jnp model -----------------------------------------------------
def kernel_model(mod, spec: dict):
    """`_build` as a jnp model of the kernel's contract: for each group, the K tiles `_k_tiles` gives (whole-tile
    coordinates, zeros past the operands' padded extents as TMA reads them), each tile's rows outside the group
    selected away in A and B, f32 products, then the epilogue on the whole (G, M tiles, N tiles) output with bias
    row g from its flat (G x n_pad) vector and a scalar from its broadcast copy, cast and cut to out's extents."""
    a_mn, b_mn = spec["a"]["major"] == "mn", spec["b"]["major"] == "mn"
    out_dt = JNP[spec["out"]["dtype"]]

    def build(cfg, m, n_pad, g_total, out_rows, out_cols, sms, varying):
        tk, rows = cfg.tile_k, -(-m // cfg.tile_m) * cfg.tile_m

        def kernel(offsets, a, b, *args):
            f32 = jnp.float32
            a = (a.T if a_mn else a).astype(f32)  # (M, K) as padded
            b = (b if b_mn else b.T).astype(f32)  # (K, N)
            ks = (-(-a.shape[1] // tk) + 1) * tk
            a = jnp.pad(a, ((0, rows - a.shape[0]), (0, ks - a.shape[1])))
            b = jnp.pad(b, ((0, ks - b.shape[0]), (0, n_pad - b.shape[1])))

            def group(start, end):
                first, steps = mod._k_tiles(start, end, tk)

                def step(s, acc):
                    k0 = (first + s) * tk
                    keep = (k0 + jnp.arange(tk) >= start) & (k0 + jnp.arange(tk) < end)
                    at = jnp.where(keep[None, :], jax.lax.dynamic_slice_in_dim(a, k0, tk, 1), 0.0)
                    bt = jnp.where(keep[:, None], jax.lax.dynamic_slice_in_dim(b, k0, tk, 0), 0.0)
                    return acc + jnp.matmul(at, bt, precision="highest")

                return jax.lax.fori_loop(0, steps, step, jnp.zeros((rows, n_pad), f32))

            x = jax.vmap(group)(offsets[:-1], offsets[1:])  # (G, rows, n_pad)
            vals = iter(args)
            for op in spec["epilogue"]:
                if op["op"] == "bias":
                    x = x + next(vals).reshape(g_total, 1, n_pad).astype(f32)
                elif op["op"] == "activation":
                    assert op["fn"] == "silu"
                    x = x * jax.nn.sigmoid(x)
                else:
                    assert op["op"] == "scale" and op["value"] is None
                    x = x * next(vals)[0]
            return x.astype(out_dt)[:, :out_rows, :out_cols]

        return kernel

    return build


# The grouped testing kit's cases, spread over the forms (each case a shape: one trace of the model each)
GLUE_CASES = {"gkm_mn_mn": ("ragged", "no_groups"),  # empty groups in a row: the ragged_dot_general test's
              "gkm_k_k_bias_f16": ("empty_first", "all_empty", "k_tail_strided"),
              "gkm_mn_k_variant": ("empty_last", "tile_shared_by_4")}


@pytest.mark.parametrize("name", list(MGPU_RAGGED_K_FORMS))
def test_the_glue_against_the_float64_loop_with_a_model_kernel(modules, name, monkeypatch):
    """Empty groups first / last / all, a K tile shared by four groups, K off the tile, no groups: every out[g] matches the loop (an empty group's the epilogue of zeros), and the NaN in the K
    rows past the last group reaches no product."""
    mod, spec = modules[name], MGPU_RAGGED_K_FORMS[name]
    monkeypatch.setattr(mod, "_build", kernel_model(mod, spec))
    for case in GLUE_CASES[name]:
        problem = RaggedKProblem(spec, CASES[case], case)
        a, b, _ = problem.operands()  # torch (M, K) and (K, N) views in the spec's majors
        used = sum(CASES[case].sizes)
        a, b = a.float().clone(), b.float().clone()
        a[:, used:], b[used:] = float("nan"), float("nan")  # K rows past the last group: never in a product
        index = problem.index()
        args = problem.epilogue_args()
        stored_a = a if spec["a"]["major"] == "k" else a.t()
        stored_b = b.t() if spec["b"]["major"] == "k" else b
        dt = JNP[spec["a"]["dtype"]]
        got = mod._call(jnp.asarray(stored_a.contiguous().numpy(), dt), jnp.asarray(stored_b.contiguous().numpy(), dt),
                        jnp.asarray(index.numpy()), *(jnp.asarray(v.float().numpy(), FROM_TORCH[v.dtype])
                                                      if isinstance(v, torch.Tensor) else v for _, v in args))
        g = len(CASES[case].sizes)
        assert got.shape == (g, problem.m, CASES[case].n) and got.dtype == JNP[spec["out"]["dtype"]]
        want = ragged_k(spec, a.double(), b.double(), index, {n: v.double() if isinstance(v, torch.Tensor) else v
                                                               for n, v in args})
        got64 = np.asarray(got.astype(jnp.float32), np.float64)
        assert not np.isnan(got64).any(), case
        np.testing.assert_allclose(got64, want.numpy(), err_msg=case, **tolerance(spec))


def test_the_entry_means_what_ragged_dot_general_computes(modules, monkeypatch):
    """jax.lax.ragged_dot_general with the contracting dim ragged (lhs (K, M), rhs (K, N): x and dy as stored, the
    form's majors) on the CPU, against the entry with the model kernel: the same (G, M, N), empty groups' zeros and
    sizes off the tile included (K rows past the last group hold zeros here: what the peer does with them is its own)."""
    mod, spec = modules["gkm_mn_mn"], MGPU_RAGGED_K_FORMS["gkm_mn_mn"]
    monkeypatch.setattr(mod, "_build", kernel_model(mod, spec))
    key = jax.random.key(26)
    x = jax.random.normal(key, (150, 70), jnp.bfloat16)  # (K, M)
    dy = jax.random.normal(jax.random.fold_in(key, 1), (150, 90), jnp.bfloat16)  # (K, N)
    numbers = jax.lax.RaggedDotDimensionNumbers(dot_dimension_numbers=(((0,), (0,)), ((), ())),
                                                lhs_ragged_dimensions=[0], rhs_group_dimensions=[])
    sizes = jnp.asarray([0, 65, 0, 0, 3, 70, 0], jnp.int32)  # empty first, two in a row, last; 12 rows past them
    want = jax.lax.ragged_dot_general(x, dy, sizes, numbers, preferred_element_type=jnp.float32)
    got = mod._call(x, dy, sizes)
    np.testing.assert_allclose(np.asarray(got.astype(jnp.float32)), np.asarray(want), **tolerance(spec))


def test_the_torch_entry_glue_with_a_model_kernel(modules, monkeypatch):
    """`<name>_torch` takes torch._grouped_mm's 2-D x 2-D layout (A (M, K), B (K, N) as views of the stored
    tensors: here both K-major, B an (N, K) tensor passed transposed), the index, a (G, N) bias and a scalar,
    shares them with jax through DLPack (CPU tensors here; the device check skipped) and writes out (G, M, N)."""
    name = "gkm_k_k_bias_f16"
    mod, spec = modules[name], MGPU_RAGGED_K_FORMS[name]
    monkeypatch.setattr(mod, "_build", kernel_model(mod, spec))
    monkeypatch.setattr(mod._mg, "require_gpu", lambda fn: None)
    problem = RaggedKProblem(spec, CASES["empty_middle_consecutive"], "torch")
    a, b, _ = problem.operands()
    index, args = problem.index(), problem.epilogue_args()
    a, b = a.contiguous(), b.t().contiguous().t()  # (M, K) row-major; (K, N) viewing an (N, K) tensor
    out = torch.full((len(CASES["empty_middle_consecutive"].sizes), problem.m, CASES["empty_middle_consecutive"].n),
                     float("nan"), dtype=torch.float32)
    assert mod.gkm_k_k_bias_f16_torch(a, b, index, *(v for _, v in args), out=out) is out
    want = ragged_k(spec, a.double(), b.double(), index, {n: v.double() if isinstance(v, torch.Tensor) else v
                                                           for n, v in args})
    np.testing.assert_allclose(out.double().numpy(), want.numpy(), **tolerance(spec))


# --- check ---------------------------------------------------------------------------------------------------
def test_the_forms_check_clean_and_ragged_k_is_refused_only_where_it_does_not_lower():
    """The forms pass check; MGP001 refuses a tile.k that is no multiple of 64 with an operand stored K-rows-first
    (its boundary cases, and a K-major B's tile.n / 2: rule_cases_grouped_mgpu.py; lowered, such a tile fails
    Mosaic GPU's layout cast of the (32, 128) edge tile); the TPU's grouped kernel takes ragged K too (session 26:
    GRP203, which refused it, is retired)."""
    for spec in MGPU_RAGGED_K_FORMS.values():
        assert [d for d in check_all([loaded(spec)]) if d.severity == "error"] == []
    bad = {**MGPU_RAGGED_K_FORMS["gkm_mn_mn"], "tile": {"m": 128, "n": 128, "k": 32}}
    (d,) = [d for d in check_all([loaded(bad)]) if d.severity == "error"]
    assert d.rule == "MGP001" and "tile.k = 32" in d.message
    tpu = {**MGPU_RAGGED_K_FORMS["gkm_mn_mn"], "targets": ["pallas:tpu_v5e"], "tile": {"m": 128, "n": 256, "k": 128}}
    assert [d for d in check_all([loaded(tpu)]) if d.severity == "error"] == []
