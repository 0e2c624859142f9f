"""The grouped Pallas TPU kernel's gated epilogue (halves, B (G, 2N, K) K-major: GRP204) in Pallas's strict TPU
interpreter on the CPU (no TPU here: uninitialized VMEM and reads past an array's end are NaN), against the grouped
kind's float64 per-group loop, and lowered for TPU on the CPU (Mosaic MLIR in a tpu_custom_call; libtpu's own
compile needs a TPU). The forms (specgen/kinds/grouped/testing/tpu_specs.py TPU_GATED_FORMS): SwiGLU with a bias
after it and an untouched tail (offs), the erf GeGLU in bf16 (tail zero), GeGLU-tanh with a router scale after it.

N = 130 and K = 200 over 8x128x128 blocks: an N tail in both halves (the up block of the last N block reads the
rows of half 1 past N, never half 0's) and a K tail; M = 21 rows in three row tiles, empty groups, a tile shared by
three groups; M = 1. Few cases a form: the interpreter runs every grid step on the CPU."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from backends.pallas.test_grouped_tpu import CASES, Problem, render, tolerance
from specgen.kinds.grouped.testing.tpu_specs import TPU_GATED_FORMS as FORMS

M, N = 21, 130


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    folder = tmp_path_factory.mktemp("grouped_tpu_gated")
    return {name: render(s, folder) for name, s in FORMS.items()}


@pytest.mark.parametrize("name", list(FORMS))
def test_gated_forms_match_the_float64_loop(modules, name):
    """out[rows of g] = fn(a @ gate[g]) * (a @ up[g]) (then the bias row of g, or the router scale): empty groups
    in a row, a tile shared by three groups. The untouched form writes into a NaN-poisoned out: the groups' rows
    take no NaN (from the poison or from B's rows past N), every other row keeps the poison."""
    spec, module = FORMS[name], modules[name]
    problem = Problem(spec)
    untouched = spec["groups"]["tail"] == "untouched"
    poison = jnp.full((M, N), jnp.nan, problem.dtype)
    for case in ("ragged_tile_shared_by_3", "empty_middle_consecutive"):
        sizes = CASES[case]
        got = problem.call(module, sizes, out=poison)
        want, written = problem.reference(sizes)
        assert got.shape == (M, N) and not np.isnan(got[written]).any(), case
        assert np.isnan(got[~written]).all() if untouched else written.all(), case
        np.testing.assert_allclose(got[written], want[written], err_msg=case, **tolerance(spec))
    assert module._build.cache_info().currsize == 1  # one shape: one kernel for every case


def test_one_row_and_k_below_one_block(modules):
    """M = 1 (a block of one row) and K = 40 < tile.k, its row in the first group or the last or none."""
    spec = FORMS["gt_geglu_tanh_router"]
    problem = Problem(spec, m=1, k=40, g=3)
    for sizes in ((1, 0, 0), (0, 0, 1), (0, 0, 0)):
        want, written = problem.reference(sizes)
        got = problem.call(modules["gt_geglu_tanh_router"], sizes)
        np.testing.assert_allclose(got[written], want[written], **tolerance(spec))
        assert not got[~written].any()  # tail zero


def test_b_with_an_odd_row_count_is_refused_naming_it(modules):
    spec = FORMS["gt_geglu_tanh_router"]
    problem = Problem(spec)
    fn = getattr(modules["gt_geglu_tanh_router"], spec["name"])
    with pytest.raises(ValueError, match=r"b.shape\[1\] = 259 must be even"):
        fn(problem.a, problem.b[:, :-1], problem.index(CASES["no_tail"]), *(v for _, v in problem.args))


@pytest.mark.parametrize("name", list(FORMS))
def test_gated_forms_lower_to_mosaic_for_tpu(modules, name):
    """The design's compile hook: B's (G, 2, N, K) view read by two (tile.n, tile.k) blocks, the two dots and the
    two accumulators lower to a tpu_custom_call (3 groups, blocks ragged on every dim; with and without out)."""
    from specgen.kinds.grouped.designs.pallas.compile import compile_module
    from specgen.targets import TARGETS

    module = modules[name]
    assert module.METADATA["gated"] == "halves" and "(G, 2N, K)" in module.__doc__
    result = compile_module(module, TARGETS["pallas:tpu_v6e"])
    assert result.error == "", result.error
