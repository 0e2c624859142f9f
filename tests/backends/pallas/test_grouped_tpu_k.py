"""The grouped Pallas TPU kernel with groups along K (`groups.ragged = "k"`, the weight gradient: megablox's `tgmm`;
templates/grouped/pallas/tpu_k.jinja) in Pallas's strict TPU interpreter on the CPU (uninitialized VMEM and reads
past an array's end are NaN, so an unmasked K tail or an out[g] left unwritten shows), against the grouped kind's
float64 per-group loop (specgen/kinds/grouped/testing/ragged_k.py) and jax.lax.ragged_dot_general with the
contracting dim ragged; lowered to Mosaic for TPU on the CPU (the design's compile hook). No TPU here: nothing ran
natively. One shape per form serves every group case (one compile; the M-/N-major form's
cases against ragged_dot_general too): M = 20 (one block), N = 100 (one block, 100 of its 128 lanes), K = 37
over 8-row K blocks (5 K tiles, the last partial) for the M-/N-major forms, K = 200 over 128-lane ones (a K tail)
for a K-major operand; K rows past the last group hold NaN in both operands."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from backends.pallas.test_grouped_tpu import render
from specgen.check import check_all
from specgen.kinds.gemm.testing.data import tolerance
from specgen.kinds.grouped.designs.pallas.compile import compile_module
from specgen.kinds.grouped.designs.pallas.design import tpu_memory
from specgen.kinds.grouped.spec import GroupedSpec
from specgen.kinds.grouped.testing.ragged_k import ragged_k
from specgen.kinds.grouped.testing.tpu_specs import TPU_RAGGED_K_FORMS
from specgen.resolve import resolve
from specgen.runtime.grouped_jax import k_group_metadata
from specgen.spec.load import load_text
from specgen.spec.models import parse_target
from specgen.targets import TARGETS

jax = pytest.importorskip("jax")
jnp = jax.numpy

M, N = 20, 100
JNP = {"f32": jnp.float32, "bf16": jnp.bfloat16}

# Group sizes over K (37 rows with 8-row K tiles; 200 with 128-lane ones, scaled below), six groups each (one
# compile a form): empty groups first, in the middle (two in a row) and last, a K tile shared by three groups, all
# empty.
CASES = {
    "ragged_shared_by_3": (3, 2, 2, 9, 0, 14),
    "empty_first_middle_last": (0, 6, 0, 0, 13, 0),
    "all_empty": (0, 0, 0, 0, 0, 0),
}


def k_of(spec: dict) -> int:
    return 37 if spec["tile"]["k"] == 8 else 200


def sizes_for(spec: dict, case: str) -> tuple[int, ...]:
    sizes = CASES[case]
    return sizes if k_of(spec) == 37 else tuple(s * 5 + (s % 3) for s in sizes)


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    folder = tmp_path_factory.mktemp("grouped_tpu_k")
    return {name: render(s, folder) for name, s in TPU_RAGGED_K_FORMS.items()}


class Problem:
    """A (M, K) and B (K, N) logical, NaN in the K rows past the last group, stored in the spec's majors; the
    epilogue's arguments (a per-group bias (G, N), a scalar)."""

    def __init__(self, spec: dict, sizes: tuple[int, ...], m: int = M, n: int = N, k: int | None = None) -> None:
        k = k_of(spec) if k is None else k
        rng = np.random.default_rng(len(sizes) * 1000 + k)
        self.spec, self.sizes = spec, sizes
        used = min(sum(sizes), k)
        a = rng.standard_normal((m, k)) / 3
        b = rng.standard_normal((k, n))
        a[:, used:] = np.nan  # K rows past the last group are never part of a product
        b[used:] = np.nan
        dt = JNP[spec["a"]["dtype"]]
        self.a_logical, self.b_logical = jnp.asarray(a, dt), jnp.asarray(b, dt)
        self.a = self.a_logical if spec["a"]["major"] == "k" else self.a_logical.T
        self.b = self.b_logical.T if spec["b"]["major"] == "k" else self.b_logical
        self.args: list[tuple[str, object]] = []
        for arg in GroupedSpec.model_validate(spec).runtime_args():
            if arg.shape == "group_n":
                self.args.append((arg.name, jnp.asarray(rng.standard_normal((len(sizes), n)), jnp.float32)))
            else:
                self.args.append((arg.name, 0.75))

    def index(self) -> jax.Array:
        values = np.cumsum(self.sizes) if self.spec["groups"]["index"] == "offs" else np.asarray(self.sizes)
        return jnp.asarray(values, jnp.int32)

    def call(self, module: object, **kw: object) -> jax.Array:
        return getattr(module, self.spec["name"])(self.a, self.b, self.index(), *(v for _, v in self.args), **kw)

    def reference(self) -> np.ndarray:
        def f64(x: object) -> torch.Tensor:
            return torch.from_numpy(np.asarray(jnp.asarray(x, jnp.float32), np.float64))

        args = {name: v if isinstance(v, float) else f64(v) for name, v in self.args}
        return ragged_k(self.spec, f64(self.a_logical), f64(self.b_logical), torch.from_numpy(np.array(self.index())),
                        args).numpy()


def ragged_dot_general(a: jax.Array, b: jax.Array, sizes: jax.Array) -> jax.Array:
    """jax.lax.ragged_dot_general with the contracting dim ragged: lhs (K, M), rhs (K, N) -> (G, M, N)."""
    dims = jax.lax.RaggedDotDimensionNumbers(dot_dimension_numbers=(((0,), (0,)), ((), ())),
                                             lhs_ragged_dimensions=[0], rhs_group_dimensions=[])
    return jax.lax.ragged_dot_general(a, b, sizes, dims, preferred_element_type=jnp.float32)


# The f32 forms (each operand's K axis on sublanes and on lanes); the bf16 form is lowered below, and its kernel runs
# in bf16 in the training tests (wgrad and dbias over M- and N-major operands): its numerics here would cost a compile.
@pytest.mark.parametrize("name", [n for n, s in TPU_RAGGED_K_FORMS.items() if s["a"]["dtype"] == "f32"])
def test_every_group_case_against_the_float64_loop(modules, name):
    """Every case, one compile (the entry's jitted call takes new sizes of the same shapes without retracing); the
    M-/N-major form against jax.lax.ragged_dot_general too (its group_sizes meaning; on NaN-free copies: it multiplies
    the rows past the groups by zero)."""
    spec, mod = TPU_RAGGED_K_FORMS[name], modules[name]
    tol = tolerance(spec)
    for case in CASES:
        p = Problem(spec, sizes_for(spec, case))
        got = np.asarray(p.call(mod).astype(jnp.float32), np.float64)
        assert got.shape == (len(p.sizes), M, N) and not np.isnan(got).any(), f"{case}: an out[g] unwritten or NaN read"
        np.testing.assert_allclose(got, p.reference(), rtol=tol["rtol"], atol=tol["atol"], err_msg=f"{name} {case}")
        if name == "gtk_mn_mn":
            a, b = jnp.nan_to_num(p.a), jnp.nan_to_num(p.b)  # (K, M), (K, N) as stored
            np.testing.assert_allclose(np.asarray(mod.gtk_mn_mn(a, b, p.index())),
                                       np.asarray(ragged_dot_general(a, b, p.index())), rtol=1e-5, atol=1e-5, err_msg=case)
    assert mod._call._cache_size() == 1


def test_edge_shapes(modules):
    """M = 1 and K = 0 (every out[g] the epilogue of zeros: the bias row through SiLU, times alpha), and the caller's
    `out` checked (its values never show: every element is written)."""
    name = "gtk_k_k_bias"
    spec, mod = TPU_RAGGED_K_FORMS[name], modules[name]
    for m, k, sizes in ((1, 200, (70, 0, 130)), (M, 0, (0, 0))):
        p = Problem(spec, sizes, m=m, k=k)
        got = np.asarray(p.call(mod, out=jnp.full((len(sizes), m, N), jnp.nan, jnp.float32)))
        assert got.shape == (len(sizes), m, N)
        np.testing.assert_allclose(got, p.reference(), rtol=1e-5, atol=1e-5, err_msg=f"{m} {k} {sizes}")
    p = Problem(spec, (3, 4))
    with pytest.raises(ValueError, match=r"argument 'out' is \(2, 20, 101\) float32, expected \(2, 20, 100\)"):
        p.call(mod, out=jnp.zeros((2, M, N + 1), jnp.float32))
    with pytest.raises(TypeError, match="argument 'offs' is int64|argument 'offs' is float32"):
        mod.gtk_k_k_bias(p.a, p.b, jnp.asarray([3.0, 7.0]), *(v for _, v in p.args))


def test_differentiating_raises_naming_the_arguments(modules):
    spec = TPU_RAGGED_K_FORMS["gtk_mn_mn"]
    p = Problem(spec, (5, 6))
    with pytest.raises(NotImplementedError, match="gtk_mn_mn"):
        jax.grad(lambda a: modules["gtk_mn_mn"].gtk_mn_mn(a, p.b, p.index()).sum())(p.a)


def test_metadata_visits_each_group_in_order_and_empty_groups_once():
    """k_group_metadata: each group's K tiles in order, an empty group one visit (its out[g] is written), the visits
    within the static bound cdiv(K, block_k) + G - 1 whatever the sizes, the spare ones marked G on the last tile."""
    rng = np.random.default_rng(38)
    meta = jax.jit(k_group_metadata, static_argnums=(1, 2))
    for i in range(60):
        g, k, bk = ((5, 37, 8), (3, 50, 16), (1, 5, 4))[i % 3]
        sizes = rng.integers(-2, 20, g) * (rng.random(g) < 0.7)
        offsets, groups, tiles = (np.asarray(x) for x in meta(jnp.asarray(sizes, jnp.int32), k, bk))
        assert len(groups) == -(-k // bk) + g - 1
        real = groups < g
        assert (np.diff(groups) >= 0).all() and set(groups[real]) == set(range(g))  # every group, in order
        for gi in range(g):
            start, end = offsets[gi], offsets[gi + 1]
            want = list(range(start // bk, (end - 1) // bk + 1)) if end > start else [tiles[groups == gi][0]]
            assert list(tiles[groups == gi]) == want and tiles.min() >= 0 and tiles.max() < -(-k // bk)
        assert (tiles[~real] == tiles[real][-1]).all()


# --- check, the VMEM plan and Mosaic lowering (no TPU needed) ------------------------------------------------
def test_the_forms_check_clean_with_the_ragged_k_vmem_plan():
    """Every form checks clean on both TPU targets (GRP203, which refused groups along K, is retired) and its VMEM
    figure is the plan's: A and B blocks double-buffered, the (tile.m, tile.n) output block double-buffered and no
    caller's-out block (a ragged-K kernel writes every out[g]), the f32 accumulator, a bias row's (8, 128)-tiled
    block."""
    for spec in TPU_RAGGED_K_FORMS.values():
        (loaded,) = load_text(__import__("json").dumps({"kernels": [spec]}), f"<test:{spec['name']}>", ".json")
        assert [d for d in check_all([loaded]) if d.severity == "error"] == []
        s = GroupedSpec.model_validate(spec)
        t, ab = s.tile, s.a.dtype.bytes
        bias = 2 * 32 * t.n if any(op["op"] == "bias" for op in spec["epilogue"]) else 0
        want = 2 * (t.m * t.k + t.k * t.n) * ab + 2 * t.m * t.n * s.out.dtype.bytes + t.m * t.n * 4 + bias
        assert tpu_memory(s, 16 << 20, 2).total == want
        assert resolve(s, parse_target("pallas:tpu_v6e")).budget.total == want


@pytest.mark.parametrize("name", list(TPU_RAGGED_K_FORMS))
def test_every_form_lowers_to_mosaic_for_tpu(modules, name):
    """The compile hook's ragged problem (two and a bit blocks a dim, 3 groups of K rows) lowers to a Mosaic
    tpu_custom_call: the K masks on sublanes and lanes, the group-indexed out block and bias row."""
    result = compile_module(modules[name], TARGETS["pallas:tpu_v6e"])
    assert result.error == "", result.error
    assert modules[name].METADATA["groups"]["ragged"] == "k"
