"""On an H100/H200 with jax[cuda]: the grouped Pallas Mosaic GPU kernel with groups along K (`groups.ragged = "k"`,
the weight gradient; templates/grouped/pallas/grouped_mgpu_k.py.jinja), every form of
specgen/kinds/grouped/testing/mgpu_specs.py's MGPU_RAGGED_K_FORMS, under jax.jit:

- against the float64 per-group loop (specgen/kinds/grouped/testing/ragged_k.py `ragged_k`) over one shape with M,
  N and K off every tile (M = 300, N = 520, K = 777: padded for TMA) and group sizes with empty groups first, in
  the middle, last, all of them, sizes off the tile, a K tile shared by five groups, whole tiles; the K rows past
  the last group hold NaN in A and B (the kernel's edge tile must select them away, not multiply them by 0), and
  every out[g] is checked, an empty group's the epilogue of zeros; new group sizes reuse the compiled kernel;
- against jax.lax.ragged_dot_general with the contracting dim ragged (lhs (K, M), rhs (K, N): the same arrays);
- G = 1 holding every row (the dense GEMM), M = 1, K = 0 (every group empty), the variant form's variant config
  (K <= 256, one- and two-step K loops) and default, and the torch entry through DLPack into an `out`.

Marked `gpu`: CI (CPU only) deselects them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from specgen.kinds.gemm.testing.data import tolerance as kit_tolerance
from specgen.kinds.grouped.testing.mgpu_specs import MGPU_RAGGED_K_FORMS
from specgen.kinds.grouped.testing.ragged_k import ragged_k

pytestmark = pytest.mark.gpu

M, N, K, G = 300, 520, 777, 5
SIZES = {
    "ragged": (100, 37, 250, 0, 300),  # 687 rows: 90 past the last group
    "empty_first": (0, 200, 64, 413, 1),
    "empty_middle": (129, 0, 0, 300, 255),
    "empty_last": (333, 311, 0, 0, 0),
    "all_empty": (0, 0, 0, 0, 0),
    "shared_by_5": (1, 2, 1, 3, 700),  # K tile 0 holds five groups' rows
    "whole_tiles": (128, 64, 192, 0, 256),
    "one_holds_all": (0, 0, 777, 0, 0),
}
DTYPES = {"bf16": jnp.bfloat16, "f16": jnp.float16, "f32": jnp.float32}


def tolerance(spec: dict) -> dict[str, float]:
    """The dense kind's (one bf16 ulp; f32 sums), but an f32 out after an activation: the kernel runs tanh as
    tanh.approx.f32 (approx_math, as every Mosaic GPU kernel here), about 2**-11 relative."""
    if spec["out"]["dtype"] == "f32" and any(op["op"] == "activation" for op in spec["epilogue"]):
        return {"atol": 2e-3, "rtol": 2e-3}
    return kit_tolerance(spec)


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    folder = tmp_path_factory.mktemp("grouped_mgpu_k")
    from gpu.test_grouped_mgpu_gpu import render

    return {name: render(s, folder, "grouped_mgpu_k") for name, s in MGPU_RAGGED_K_FORMS.items()}


class Problem:
    """A (M, K) and B (K, N) of one spec in its dtypes, stored in its majors; NaN in the K rows past `used`."""

    def __init__(self, spec: dict, m: int, n: int, k: int, g: int, seed: int = 0) -> None:
        self.spec, self.m, self.n, self.k, self.g = spec, m, n, k, g
        rng = np.random.default_rng(seed)
        self.dtype = DTYPES[spec["a"]["dtype"]]
        self.a64 = rng.standard_normal((m, k)) / 16.0  # each out[g] sums up to K products: O(1) results
        self.b64 = rng.standard_normal((k, n))
        self.bias = rng.standard_normal((g, n)).astype(np.float32)

    def operands(self, used: int) -> tuple[jax.Array, jax.Array]:
        a, b = self.a64.copy(), self.b64.copy()
        a[:, used:], b[used:] = np.nan, np.nan  # never part of a product
        a = jnp.asarray(a, self.dtype)
        b = jnp.asarray(b, self.dtype)
        return (a if self.spec["a"]["major"] == "k" else a.T.copy()), (b.T.copy() if self.spec["b"]["major"] == "k" else b)

    def index(self, sizes: tuple[int, ...]) -> jax.Array:
        s = np.asarray(sizes, np.int32)
        return jnp.asarray(np.cumsum(s).astype(np.int32) if self.spec["groups"]["index"] == "offs" else s)

    def args(self) -> list[object]:
        out = []
        for op in self.spec["epilogue"]:
            if op["op"] == "bias":
                out.append(jnp.asarray(self.bias, DTYPES[op["dtype"]]))
            elif op["op"] == "scale" and op["value"] is None:
                out.append(0.75)
        return out

    def reference(self, sizes: tuple[int, ...]) -> np.ndarray:
        """The float64 loop over the operands as the kernel gets them (rounded to the dtype)."""
        a, b = self.operands(sum(sizes))
        a = np.asarray((a if self.spec["a"]["major"] == "k" else a.T).astype(jnp.float32), np.float64)
        b = np.asarray((b.T if self.spec["b"]["major"] == "k" else b).astype(jnp.float32), np.float64)
        named = []
        for op, v in zip([op for op in self.spec["epilogue"] if op["op"] == "bias" or (op["op"] == "scale" and op["value"] is None)],
                         self.args(), strict=True):
            name = op["name"] or "alpha"
            named.append((name, torch.from_numpy(np.asarray(v.astype(jnp.float32), np.float64)) if isinstance(v, jax.Array) else v))
        index = torch.from_numpy(np.array(self.index(sizes)))
        return ragged_k(self.spec, torch.from_numpy(a), torch.from_numpy(b), index, dict(named)).numpy()

    def call(self, module: object, sizes: tuple[int, ...], **kw: object) -> np.ndarray:
        a, b = self.operands(sum(sizes))
        fn = getattr(module, self.spec["name"])
        return np.asarray(fn(a, b, self.index(sizes), *self.args(), **kw).astype(jnp.float32), np.float64)


def check(problem: Problem, module: object, sizes: tuple[int, ...]) -> np.ndarray:
    got = problem.call(module, sizes)
    assert got.shape == (len(sizes), problem.m, problem.n)
    assert not np.isnan(got).any(), f"{int(np.isnan(got).sum())} NaN in out: {sizes}"
    np.testing.assert_allclose(got, problem.reference(sizes), err_msg=str(sizes), **tolerance(problem.spec))
    return got


@pytest.mark.parametrize("name", list(MGPU_RAGGED_K_FORMS))
def test_every_group_case_against_the_float64_loop(modules, name):
    problem = Problem(MGPU_RAGGED_K_FORMS[name], M, N, K, G)
    for sizes in SIZES.values():
        check(problem, modules[name], sizes)
    assert modules[name]._build.cache_info().currsize == 1  # new sizes of one shape: one kernel


def test_matches_ragged_dot_general_under_jit(modules):
    """lhs (K, M) and rhs (K, N) as the kernel takes them (M- and N-major), the contracting dim ragged."""
    spec = MGPU_RAGGED_K_FORMS["gkm_mn_mn"]
    module, problem = modules["gkm_mn_mn"], Problem(spec, M, N, K, G, seed=1)
    numbers = jax.lax.RaggedDotDimensionNumbers(dot_dimension_numbers=(((0,), (0,)), ((), ())),
                                                lhs_ragged_dimensions=[0], rhs_group_dimensions=[])
    peer = jax.jit(lambda a, b, s: jax.lax.ragged_dot_general(a, b, s, numbers, preferred_element_type=jnp.float32))
    fn = jax.jit(module.gkm_mn_mn)
    for sizes in SIZES.values():
        a, b = problem.operands(K)  # no NaN rows: the peer's handling of rows past the groups is its own
        s = jnp.asarray(sizes, jnp.int32)
        np.testing.assert_allclose(np.asarray(fn(a, b, s).astype(jnp.float32)), np.asarray(peer(a, b, s)),
                                   err_msg=str(sizes), **tolerance(spec))
    assert fn._cache_size() == 1


@pytest.mark.parametrize("name", list(MGPU_RAGGED_K_FORMS))
def test_dense_one_row_and_no_rows(modules, name):
    spec, module = MGPU_RAGGED_K_FORMS[name], modules[name]
    check(Problem(spec, M, N, K, 1), module, (K,))  # G = 1: the dense GEMM
    check(Problem(spec, M, N, K, 1), module, (700,))
    check(Problem(spec, 1, N, 200, 3), module, (0, 150, 50))  # M = 1
    check(Problem(spec, M, 200, 0, 2), module, (0, 0))  # K = 0: every group empty, the epilogue of zeros


def test_the_variant_and_the_default_by_total_rows(modules):
    """K (every group's rows) <= 256 picks the 64x128x64 2-stage variant (a group of <= 64 rows: a one-step K loop,
    its wgmma waited for each step), else the 128x128x128 default."""
    spec, module = MGPU_RAGGED_K_FORMS["gkm_mn_k_variant"], modules["gkm_mn_k_variant"]
    assert module._config_for(M, N, 256) is module.VARIANT_CONFIGS[0] and module._config_for(M, N, 257) is module.CONFIG
    small = Problem(spec, M, N, 256, 6)
    for sizes in ((64, 0, 1, 63, 100, 28), (0, 0, 0, 0, 0, 256), (3, 5, 7, 11, 13, 17), (64, 64, 64, 64, 0, 0)):
        check(small, module, sizes)


def test_the_torch_entry_writes_into_out(modules):
    spec, module = MGPU_RAGGED_K_FORMS["gkm_mn_mn"], modules["gkm_mn_mn"]
    problem = Problem(spec, M, N, K, G, seed=2)
    sizes = SIZES["ragged"]
    a, b = problem.operands(sum(sizes))
    ta = torch.from_dlpack(a).t()  # (M, K): the (K, M) input passed transposed, torch._grouped_mm's 2-D x 2-D form
    tb = torch.from_dlpack(b)
    offs_or_sizes = torch.tensor(sizes, dtype=torch.int32, device="cuda")
    out = torch.full((G, M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
    got = module.gkm_mn_mn_torch(ta, tb, offs_or_sizes, out=out)
    assert got is out
    np.testing.assert_allclose(out.double().cpu().numpy(), problem.reference(sizes), **tolerance(spec))
