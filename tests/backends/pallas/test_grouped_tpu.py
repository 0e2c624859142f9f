"""Numerics of the grouped kind's Pallas TPU kernel (specgen/kinds/grouped/designs/pallas) in Pallas's strict TPU
interpreter on the CPU (uninitialized VMEM and reads past an array's end are NaN, so an unmasked K tail or a row
left unwritten shows): against the grouped kind's float64 per-group loop (specgen/kinds/grouped/testing/
reference.py), against jax.lax.ragged_dot, and at G = 1 against the dense kind's Pallas TPU kernel.

One shape per spec form (M = 21 rows, N = 130, K = 200 over 8x128x128 blocks: three row tiles, an N tail and a K
tail) serves every group-size case, so the cases reuse one compiled kernel: empty groups first, in the middle
(several in a row), last and everywhere, a group holding every row, a row tile shared by three and by four
groups, no tail, sizes summing past M (clamped, as ragged_dot drops those rows). Then M = 1 with K below one
block, both B majors, both index formats, tail zero and untouched (with a NaN-poisoned `out` whose tail must stay
bit-equal, and without), f32 and bf16, and jit with new group sizes reusing the compiled kernel. fp8 (e5m2, and
e4m3 A x e5m2 B as v7x's MXU takes them) with torch._scaled_grouped_mm's rowwise scales (scale_b (G, N) per group) or
a per-group column scale, both B majors, on 32-row blocks (8-bit operands' sublane tile), lowered for TPU too."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from backends.pallas.common import render_module as render_dense
from specgen.compile import load_rendered
from specgen.kinds.grouped.designs.pallas.design import JNP_DTYPES
from specgen.kinds.grouped.spec import GroupedSpec
from specgen.kinds.grouped.testing.reference import grouped
from specgen.kinds.grouped.testing.tpu_specs import TPU_FORMS, TPU_FP8_FORMS, TPU_TILE
from specgen.registry import design_for
from specgen.resolve import resolve
from specgen.runtime.grouped_jax import group_metadata
from specgen.spec.dtypes import DType
from specgen.spec.load import load_text

M, N, K, G = 21, 130, 200, 6


FORMS = TPU_FORMS

# Group sizes over M = 21 rows, 8-row tiles (tiles 0-7, 8-15, 16-20).
CASES = {
    "ragged_tile_shared_by_3": (3, 0, 5, 1, 2, 9),  # tile 1: groups 3, 4 and 5
    "tile_shared_by_4": (2, 1, 3, 2, 8, 4),  # tile 0: groups 0-3
    "empty_first": (0, 4, 7, 2, 3, 4),
    "empty_middle_consecutive": (5, 0, 0, 0, 6, 9),
    "empty_last": (7, 9, 3, 0, 0, 0),
    "all_empty": (0, 0, 0, 0, 0, 0),
    "one_group_holds_every_row": (0, 0, 21, 0, 0, 0),
    "no_tail": (4, 4, 4, 4, 4, 1),
}
# The bf16 forms run three of them (each call interprets every grid step: the box's CPU time is shared).
FEW = ("ragged_tile_shared_by_3", "empty_middle_consecutive", "all_empty")


def cases(spec: dict) -> dict[str, tuple[int, ...]]:
    return {c: CASES[c] for c in FEW} if spec["a"]["dtype"] == "bf16" else CASES


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    folder = tmp_path_factory.mktemp("grouped_tpu")
    return {name: render(s, folder) for name, s in FORMS.items()}


def render(spec: dict, folder: Path) -> object:
    """The spec's TPU module, rendered from what check resolves and imported under a unique name."""
    (loaded,) = load_text(json.dumps({"kernels": [spec]}), f"<test:{spec['name']}>", ".json")
    targets = list(loaded.spec.targets)
    design = design_for("grouped", targets[0])
    assert design is not None and design.name == "Pallas TPU grouped"
    (text,) = design.render(loaded, targets, {str(t): resolve(loaded.spec, t) for t in targets}).values()
    path = folder / f"{spec['name']}.py"
    path.write_text(text)
    return load_rendered(path, f"_specgen_grouped_tpu_{spec['name']}")


class Problem:
    """Seeded operands of one form and shape: A (M, K), B (G, K, N) (G, K, 2N gated) logical and in the stored layout, the
    epilogue's arguments (a per-group bias (G, N), a per-row scale (M,), scalars), all as jax arrays."""

    def __init__(self, spec: dict, m: int = M, n: int = N, k: int = K, g: int = G) -> None:
        rng = np.random.default_rng(zlib.crc32(f"{spec['name']}/{m}/{n}/{k}/{g}".encode()))
        dt = jnp.dtype(JNP_DTYPES[DType(spec["a"]["dtype"])])
        self.spec, self.m, self.n, self.dtype = spec, m, n, dt
        self.a = jnp.asarray(rng.standard_normal((m, k)) / np.sqrt(k), dt)
        bn = 2 * n if spec["epilogue"] and spec["epilogue"][0]["op"] == "gated" else n  # gate and up columns
        self.b_logical = jnp.asarray(rng.standard_normal((g, k, bn)), JNP_DTYPES[DType(spec["b"]["dtype"])])
        self.b = self.b_logical if spec["b"]["major"] == "mn" else jnp.swapaxes(self.b_logical, 1, 2)
        self.args: list[tuple[str, object]] = []
        for arg in GroupedSpec.model_validate(spec).runtime_args():
            if arg.shape == "group_n":
                self.args.append((arg.name, jnp.asarray(rng.standard_normal((g, n)), JNP_DTYPES[arg.dtype])))
            elif arg.shape == "vec_m":
                self.args.append((arg.name, jnp.asarray(rng.random(m) + 0.5, jnp.float32)))
            else:
                self.args.append((arg.name, 0.75))

    def index(self, sizes: tuple[int, ...]) -> jax.Array:
        values = np.cumsum(sizes) if self.spec["groups"]["index"] == "offs" else np.asarray(sizes)
        return jnp.asarray(values, jnp.int32)

    def call(self, module: object, sizes: tuple[int, ...], **kw: object) -> np.ndarray:
        fn = getattr(module, self.spec["name"])
        return np.asarray(fn(self.a, self.b, self.index(sizes), *(v for _, v in self.args), **kw).astype(jnp.float32))

    def reference(self, sizes: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """(float64 result, rows written) by the grouped kind's per-group loop."""
        def f64(x: object) -> torch.Tensor:
            return torch.from_numpy(np.asarray(jnp.asarray(x, jnp.float32), np.float64))

        args = {name: v if isinstance(v, float) else f64(v) for name, v in self.args}
        out, written = grouped(self.spec, f64(self.a), f64(self.b_logical), torch.from_numpy(np.array(self.index(sizes))),
                               args)
        return out.numpy(), written.numpy()


def tolerance(spec: dict) -> dict[str, float]:
    """f32: the f32 sums' rounding; bf16: one bf16 ulp (2**-7 relative) either way."""
    return {"atol": 2e-2, "rtol": 2e-2} if spec["out"]["dtype"] == "bf16" else {"atol": 1e-5, "rtol": 1e-5}


# --- against the float64 per-group loop ---------------------------------------------------------------------
@pytest.mark.parametrize("name", list(FORMS))
def test_every_group_case_against_the_float64_loop(modules, name):
    """Every case through one compiled kernel per form: the rows the spec writes match the loop; with
    tail = "zero" that is every row (the tail is zero)."""
    spec = FORMS[name]
    problem = Problem(spec)
    for case, sizes in cases(spec).items():
        got = problem.call(modules[name], sizes)
        want, written = problem.reference(sizes)
        assert written.sum() == (M if spec["groups"]["tail"] == "zero" else sum(sizes))
        np.testing.assert_allclose(got[written], want[written], err_msg=case, **tolerance(spec))
    assert modules[name]._build.cache_info().currsize == 1  # one shape: one kernel for every case


@pytest.mark.parametrize("name", ["gt_offs_untouched_mn", "gt_bf16_bias_k"])
def test_untouched_tail_keeps_the_callers_out(modules, name):
    """tail = "untouched" with `out`: the result holds out's values bit for bit in every row no group holds (a
    NaN poison here, which must not leak into the groups' rows); without `out`, the groups' rows are the same."""
    spec = FORMS[name]
    problem = Problem(spec)
    poison = jnp.full((M, N), jnp.nan, problem.dtype)
    for sizes in (CASES["tile_shared_by_4"], CASES["all_empty"], (2, 1, 3, 2, 1, 0)):
        got = problem.call(modules[name], sizes, out=poison)
        want, written = problem.reference(sizes)
        assert np.isnan(got[~written]).all() and not np.isnan(got[written]).any()
        np.testing.assert_allclose(got[written], want[written], **tolerance(spec))
        np.testing.assert_array_equal(problem.call(modules[name], sizes)[written], got[written])


def test_zero_tail_ignores_out_and_writes_every_row(modules):
    problem = Problem(FORMS["gt_plain_zero_k"])
    sizes = CASES["empty_last"]
    got = problem.call(modules["gt_plain_zero_k"], sizes, out=jnp.full((M, N), jnp.nan, jnp.float32))
    np.testing.assert_array_equal(got, problem.call(modules["gt_plain_zero_k"], sizes))
    assert not got[sum(sizes):].any()


@pytest.mark.parametrize("name", ["gt_plain_zero_k", "gt_every_op_zero_mn"])
def test_one_row_with_k_below_one_block(tmp_path, name):
    """M = 1 (a block of one row: as large as its array) and K = 40 < tile.k, in its first group or its last."""
    module = render(FORMS[name], tmp_path)
    problem = Problem(FORMS[name], m=1, k=40, g=3)
    for sizes in ((1, 0, 0), (0, 0, 1), (0, 0, 0)):
        want, written = problem.reference(sizes)
        np.testing.assert_allclose(problem.call(module, sizes)[written], want[written], **tolerance(FORMS[name]))


# --- fp8 ------------------------------------------------------------------------------------------------------
# Over M = 70 rows and 32-row tiles (0-31, 32-63, 64-69): groups sharing tiles with empty ones between them and a
# tail, one group holding every row, six one-row groups in one tile (then a tail of 64 rows); then M = 1 with K = 40
# below one block, in a middle group and in none.
FP8_SIZES = ((20, 0, 33, 10, 0, 7), (0, 0, 70, 0, 0, 0), (1, 1, 1, 1, 1, 1))


@pytest.mark.parametrize("name", list(TPU_FP8_FORMS))
def test_fp8_forms_against_the_float64_loop_and_lowered_for_tpu(tmp_path, name):
    """fp8 operands as the MXU takes them (DT003): the loop over the fp8 values in float64 with the scales (rowwise
    scale_a (M,) and per-group scale_b (G, N); a per-group column scale), the groups' rows within the output's
    rounding; an untouched tail keeps a NaN-poisoned out bit for bit and no NaN leaks into the groups' rows; a zero
    tail is zero; the module lowers to Mosaic for its TPU target."""
    from specgen.kinds.grouped.designs.pallas.compile import compile_module
    from specgen.targets import TARGETS

    spec = TPU_FP8_FORMS[name]
    module = render(spec, tmp_path)
    untouched = spec["groups"]["tail"] == "untouched"
    out_dt = jnp.dtype(JNP_DTYPES[DType(spec["out"]["dtype"])])
    tol = tolerance(spec) if spec["out"]["dtype"] == "bf16" else {"atol": 1e-4, "rtol": 1e-4}
    for m, k, all_sizes in ((70, 200, FP8_SIZES), (1, 40, ((0, 0, 1, 0, 0, 0), (0,) * 6))):
        problem = Problem(spec, m=m, k=k)
        assert problem.a.dtype == jnp.dtype(JNP_DTYPES[DType(spec["a"]["dtype"])])
        assert problem.b.dtype == jnp.dtype(JNP_DTYPES[DType(spec["b"]["dtype"])])
        poison = jnp.full((m, N), jnp.nan, out_dt)
        for sizes in all_sizes:
            got = problem.call(module, sizes, **({"out": poison} if untouched else {}))
            want, written = problem.reference(sizes)
            assert written.sum() == (min(sum(sizes), m) if untouched else m)
            assert not np.isnan(got[written]).any(), sizes
            np.testing.assert_allclose(got[written], want[written], err_msg=str(sizes), **tol)
            if untouched:
                assert np.isnan(got[~written]).all(), sizes
            else:
                assert not got[min(sum(sizes), m):].any(), sizes
    target = spec["targets"][-1]
    result = compile_module(module, TARGETS[target])
    assert result.error == "", (target, result.error)


# --- against jax.lax.ragged_dot --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["gt_plain_zero_k", "gt_bf16_plain_mn"])
def test_matches_ragged_dot(modules, name):
    """Tail zero is ragged_dot's meaning: every row equal, also where the sizes sum past M (rows past M dropped)."""
    spec = FORMS[name]
    problem = Problem(spec)
    for sizes in (*cases(spec).values(), (10, 10, 10, 0, 0, 0), (30, 0, 0, 0, 0, 0)):
        want = jax.lax.ragged_dot(problem.a, problem.b_logical, jnp.asarray(sizes, jnp.int32),
                                  preferred_element_type=jnp.float32).astype(problem.dtype)
        np.testing.assert_allclose(problem.call(modules[name], sizes), np.asarray(want.astype(jnp.float32)),
                                   err_msg=str(sizes), **tolerance(spec))


# --- G = 1 is the dense kind's kernel ---------------------------------------------------------------------
@pytest.mark.parametrize(("name", "epilogue"), [
    ("gt_plain_zero_k", []),
    ("gt_offs_untouched_mn", [{"op": "bias", "along": "n", "dtype": "f32"}, {"op": "activation", "fn": "silu"}]),
])
def test_one_group_equals_the_dense_kernel(modules, tmp_path, name, epilogue):
    spec = FORMS[name]
    dense = render_dense({"name": f"gd_{name}", "kind": "gemm", "a": spec["a"], "b": spec["b"], "out": spec["out"],
                          "tile": TPU_TILE, "targets": ["pallas:tpu_v5e"], "epilogue": epilogue}, tmp_path)
    problem = Problem(spec, g=1)
    args = [v if isinstance(v, float) else v.reshape(N) for _, v in problem.args]  # (1, N): the dense (N,) bias
    want = getattr(dense, f"gd_{name}")(problem.a, problem.b[0], *args)
    np.testing.assert_array_equal(problem.call(modules[name], (M,)), np.asarray(want))


# --- jit, the group metadata, the plain interpreter, errors ---------------------------------------------------
def test_jit_takes_new_group_sizes_without_recompiling(modules):
    spec = FORMS["gt_plain_zero_k"]
    module, problem = modules["gt_plain_zero_k"], Problem(spec)
    fn = jax.jit(lambda a, b, sizes: getattr(module, spec["name"])(a, b, sizes))
    for sizes in (CASES[c] for c in FEW):
        want, _ = problem.reference(sizes)
        got = np.asarray(fn(problem.a, problem.b, jnp.asarray(sizes, jnp.int32)))
        np.testing.assert_allclose(got, want, **tolerance(spec))
    assert fn._cache_size() == 1


def test_the_plain_interpreter_gives_the_same_rows(modules):
    problem = Problem(FORMS["gt_every_op_zero_mn"])
    sizes = CASES["tile_shared_by_4"]
    strict = problem.call(modules["gt_every_op_zero_mn"], sizes)
    np.testing.assert_allclose(problem.call(modules["gt_every_op_zero_mn"], sizes, interpret=True), strict, rtol=1e-6,
                               atol=1e-6)


@pytest.mark.parametrize("tail_visits", [False, True])
def test_group_metadata_visits_each_group_tile_in_order(tail_visits):
    """Each group's row tiles in order, within the static bound; the visits left over take the tiles past the
    last group (where the kernel writes them) and then repeat the last tile."""
    block, rows = 8, 37
    metadata = jax.jit(group_metadata, static_argnums=(1, 2, 3))
    for sizes in ((3, 0, 5, 1, 2, 9), (0, 0, 0), (40, 0, 0), (0, 37), (1,) * 5, (8, 8, 8)):
        offsets, groups, tiles = (np.asarray(x) for x in metadata(jnp.asarray(sizes, jnp.int32), rows, block,
                                                                 tail_visits))
        ends = np.minimum(np.cumsum(sizes), rows)
        np.testing.assert_array_equal(offsets, [0, *ends])
        want = [(g, t) for g in range(len(sizes)) if ends[g] > offsets[g]
                for t in range(offsets[g] // block, (ends[g] - 1) // block + 1)]
        used = -(-int(ends[-1]) // block)
        spare = list(range(used, -(-rows // block))) if tail_visits else []
        got = list(zip(groups.tolist(), tiles.tolist(), strict=True))
        assert len(got) == -(-rows // block) + len(sizes) - 1
        assert got[:len(want)] == want
        assert [t for g, t in got[len(want):len(want) + len(spare)]] == spare
        assert all(g == len(sizes) for g, _ in got[len(want):])
        assert len({t for _, t in got[len(want) + len(spare):]}) <= 1


def test_bad_arguments_raise_naming_them(modules):
    spec = FORMS["gt_every_op_zero_mn"]
    module, problem = modules["gt_every_op_zero_mn"], Problem(spec)
    fn = getattr(module, spec["name"])
    bias, router = problem.args[0][1], problem.args[1][1]
    sizes = jnp.asarray(CASES["empty_first"], jnp.int32)
    with pytest.raises(TypeError, match="'group_sizes' is float32, expected int32"):
        fn(problem.a, problem.b, sizes.astype(jnp.float32), bias, router, 0.5)
    with pytest.raises(ValueError, match=r"'group_sizes' has shape \(5,\), expected \(6,\)"):
        fn(problem.a, problem.b, sizes[:5], bias, router, 0.5)
    with pytest.raises(ValueError, match=r"'bias' has shape \(130,\), expected \(G, N\) = \(6, 130\)"):
        fn(problem.a, problem.b, sizes, bias[0], router, 0.5)
    with pytest.raises(ValueError, match=r"argument 'out' is \(21, 129\) float32"):
        fn(problem.a, problem.b, sizes, bias, router, 0.5, out=jnp.zeros((M, N - 1), jnp.float32))
    with pytest.raises(ValueError, match="'b' has shape"):
        fn(problem.a[:, :7], problem.b, sizes, bias, router, 0.5)
    with pytest.raises(ValueError, match="K = 0 columns"):
        fn(problem.a[:, :0], problem.b[:, :0], sizes, bias, router, 0.5)
    with pytest.raises(TypeError, match="'alpha' must be a number"):
        fn(problem.a, problem.b, sizes, bias, router, "0.5")


# --- Mosaic lowering (the design's compile hook: no TPU needed) ----------------------------------------------
@pytest.mark.parametrize("name", list(FORMS))
def test_every_form_lowers_to_mosaic_for_tpu(modules, name):
    """Every template branch lowers to a Mosaic tpu_custom_call (ragged blocks, 3 groups; an untouched tail both
    with and without the caller's out): what the interpreter does not check (block shapes, scalar prefetch, the
    per-group bias row's (1, block_n) block) Mosaic's lowering does."""
    from specgen.kinds.grouped.designs.pallas.compile import compile_module
    from specgen.targets import TARGETS

    result = compile_module(modules[name], TARGETS["pallas:tpu_v6e"])
    assert result.error == "", result.error


def test_differentiating_raises_naming_the_arguments(modules):
    """No derivative rule yet: jax.grad refuses when traced, naming what is differentiated (not the group index)."""
    spec = FORMS["gt_plain_zero_k"]
    fn, problem = getattr(modules["gt_plain_zero_k"], spec["name"]), Problem(spec)
    sizes = jnp.asarray(CASES["empty_first"], jnp.int32)
    with pytest.raises(NotImplementedError, match="argument 'a' is being differentiated"):
        jax.grad(lambda a: fn(a, problem.b, sizes).sum())(problem.a)
