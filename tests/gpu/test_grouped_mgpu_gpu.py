"""On an H100/H200 with jax[cuda]: the grouped kind's Pallas Mosaic GPU kernel (pallas:gpu_sm90,
specgen/kinds/grouped/designs/pallas_mgpu), every form of specgen/kinds/grouped/testing/mgpu_specs.py and the
catalogue's grouped Mosaic GPU modules:

- against the grouped kind's float64 per-group loop and against jax.lax.ragged_dot, under jax.jit, over one
  shape with M, N and K tails (M = 517 over 128- and 64-row tiles, N = 300, K = 200: padded for TMA) and group
  sizes with empty groups first, in the middle, last and everywhere, one group holding every row, tiles shared
  by 3 and 4 groups, tiny and skewed groups; then G = 1, M = 1, 256 groups of 0-2 rows;
- the untouched tail with a NaN-poisoned `out`: every row no group holds keeps the NaN, none leaks into a
  group's rows (the kernel's own output is a fresh buffer: a row a store missed is checked by value against the
  loop, a row written by another group's visit differs from the loop there);
- new group sizes reuse the compiled kernel;
- size-selected variants: the variant form's three configs, each where M (every group's rows) picks it, under
  jax.jit over the grouped testing kit's ragged cases and decode's sizes, with a NaN-poisoned `out`; the catalogue
  modules' decode variant (M <= 64) against the loop, moe_bf16's also against ragged_dot under jit;
- the catalogue modules' torch entry at aligned shapes (decode's and a prefill one): a direct launch, bit for bit
  the jitted program's, captured in a CUDA graph whose replays take new group sizes;
- gated epilogues (the gm_gated_* forms: halves on both B majors, interleaved, SiLU and GELU-tanh, with and without a
  bias or router scale after them): every case above through the jax entry, and `<name>_torch` with B the gate_up
  weight, at an aligned shape (the direct launch, a NaN-poisoned `out`) and an unaligned one (M, N and K off the
  tile) into an `out` view with NaN guard rows and columns around it, against the float64 loop;
- fp8 (e4m3 and e5m2 forms, the catalogue's moe_fp8_rowwise): the rowwise scales then the chain against the loop
  through the jax entry (the cases above), and moe_fp8_rowwise_torch, direct and through DLPack, against the loop
  and torch._scaled_grouped_mm with a NaN-poisoned out and empty groups.

Marked `gpu`: CI (CPU only) deselects them.
"""

from __future__ import annotations

import importlib
import itertools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from backends.pallas.test_grouped_tpu import CASES, Problem
from backends.pallas.test_grouped_tpu import tolerance as tpu_tolerance

from specgen.compile import load_rendered
from specgen.kinds.gemm.designs.pallas.design import JNP_DTYPES
from specgen.kinds.grouped.spec import GroupedSpec
from specgen.kinds.grouped.testing.mgpu_specs import MGPU_FORMS
from specgen.kinds.grouped.testing.reference import DECODE_SIZES, RAGGED_SIZES, grouped
from specgen.registry import design_for
from specgen.resolve import resolve
from specgen.spec.dtypes import DType
from specgen.spec.load import load_text

pytestmark = pytest.mark.gpu

M, N, K, G = 517, 300, 200, 6
# Group sizes over 517 rows (128-row tiles 0-127, ..., 512-516; 64-row tiles for gm_every_op_k).
SIZES = {
    **{name: tuple(s * 20 for s in sizes) for name, sizes in CASES.items() if sum(sizes) <= 21},  # 420 rows a case
    "shared_by_3_and_4": (120, 3, 2, 3, 200, 150),  # tile 0 ends in group 1; tile 0/1 boundary shared by 0-3
    "tiny_then_big": (1, 2, 0, 1, 500, 13),
    "skewed_tail": (0, 400, 1, 0, 0, 0),
    "every_row_last": (0, 0, 0, 0, 0, 517),
}


def tolerance(spec: dict) -> dict[str, float]:
    """bf16: the TPU test's (one bf16 ulp either way); f16 out: a few f16 ulps (2**-11 relative) over the f32 sums
    (the TPU test's other figure is f32's)."""
    return {"atol": 4e-3, "rtol": 4e-3} if spec["out"]["dtype"] == "f16" else tpu_tolerance(spec)


def render(spec: dict, folder, prefix: str = "grouped_mgpu") -> object:
    """The spec's pallas:gpu_sm90 module, rendered into `folder` and loaded (as `_specgen_<prefix>_<name>`)."""
    (loaded,) = load_text(json.dumps({"kernels": [spec]}), f"<test:{spec['name']}>", ".json")
    (target,) = loaded.spec.targets
    files = design_for("grouped", target).render(loaded, [target], {str(target): resolve(loaded.spec, target)})
    path = folder / f"{spec['name']}.py"
    path.write_text(files[f"pallas/gpu_sm90/{spec['name']}.py"])
    return load_rendered(path, f"_specgen_{prefix}_{spec['name']}")


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    folder = tmp_path_factory.mktemp("grouped_mgpu")
    return {name: render(s, folder) for name, s in MGPU_FORMS.items()}


def check(problem: Problem, module: object, sizes: tuple[int, ...], **kw: object) -> np.ndarray:
    got = problem.call(module, sizes, **kw)
    want, written = problem.reference(sizes)
    np.testing.assert_allclose(got[written], want[written], err_msg=str(sizes), **tolerance(problem.spec))
    if problem.spec["groups"]["tail"] == "zero":
        assert written.all() and not got[int(min(sum(max(s, 0) for s in sizes), problem.m)):].any()
    return got


@pytest.mark.parametrize("name", list(MGPU_FORMS))
def test_every_group_case_against_the_float64_loop(modules, name):
    problem = Problem(MGPU_FORMS[name], m=M, n=N, k=K, g=G)
    for sizes in SIZES.values():
        check(problem, modules[name], sizes)
    assert modules[name]._build.cache_info().currsize == 1  # new sizes of one shape: one kernel


@pytest.mark.parametrize("name", ["gm_plain_zero_k", "gm_plain_untouched_mn"])
def test_matches_ragged_dot_under_jit(modules, name):
    spec = MGPU_FORMS[name]
    problem, module = Problem(spec, m=M, n=N, k=K, g=G), modules[name]
    fn = jax.jit(lambda a, b, index: getattr(module, spec["name"])(a, b, index))
    for sizes in SIZES.values():
        sizes_arr = jnp.asarray(sizes, jnp.int32)
        want = jax.lax.ragged_dot(problem.a, problem.b_logical, sizes_arr, preferred_element_type=jnp.float32)
        got = np.asarray(fn(problem.a, problem.b, problem.index(sizes)).astype(jnp.float32))
        rows = min(sum(sizes), M)
        np.testing.assert_allclose(got[:rows], np.asarray(want)[:rows], err_msg=str(sizes), **tolerance(spec))
        if spec["groups"]["tail"] == "zero":
            assert not got[rows:].any()
    assert fn._cache_size() == 1


def test_untouched_tail_keeps_a_nan_poisoned_out(modules):
    spec = MGPU_FORMS["gm_plain_untouched_mn"]
    problem = Problem(spec, m=M, n=N, k=K, g=G)
    poison = jnp.full((M, N), jnp.nan, problem.dtype)
    for sizes in (SIZES["empty_last"], SIZES["all_empty"], SIZES["skewed_tail"], SIZES["tiny_then_big"]):
        got = check(problem, modules["gm_plain_untouched_mn"], sizes, out=poison)
        _, written = problem.reference(sizes)
        assert np.isnan(got[~written]).all() and not np.isnan(got[written]).any()


@pytest.mark.parametrize("name", list(MGPU_FORMS))
def test_one_group_one_row_and_many_tiny_groups(modules, name):
    spec, module = MGPU_FORMS[name], modules[name]
    check(Problem(spec, m=M, n=N, k=K, g=1), module, (M,))  # G = 1: the dense GEMM
    check(Problem(spec, m=M, n=N, k=K, g=1), module, (100,))
    one = Problem(spec, m=1, n=N, k=K, g=3)
    for sizes in ((1, 0, 0), (0, 0, 1), (0, 0, 0)):
        check(one, module, sizes)
    rng = np.random.default_rng(256)
    tiny = Problem(spec, m=512, n=256, k=128, g=256)  # 256 groups of 0-2 rows: at most 512
    for _ in range(2):
        sizes = tuple(int(s) for s in rng.integers(0, 3, 256))
        check(tiny, module, sizes)


CATALOGUE = ["moe_bf16", "moe_down_router_bf16", "moe_up_bias_silu_bf16", "moe_fp8_rowwise"]
GATED_CATALOGUE = ["moe_gate_up_swiglu_bf16"]  # B (G, K, 2N), interleaved: the jax entry's tests below


@pytest.mark.parametrize("name", CATALOGUE + GATED_CATALOGUE)
def test_catalogue_modules(name):
    """The rendered catalogue modules (generated/pallas/gpu_sm90/) against the loop, DeepSeek-like skew."""
    module = importlib.import_module(f"generated.pallas.gpu_sm90.{name}")
    spec = module.SPEC
    problem = Problem(spec, m=1000, n=512, k=384, g=8)
    for sizes in ((300, 0, 1, 250, 0, 0, 400, 49), (0, 0, 0, 0, 0, 0, 0, 999), (7, 0, 0, 0, 0, 0, 0, 0)):
        check(problem, module, sizes)


def test_torch_entry_against_torch_grouped_mm_with_a_poisoned_out():
    """`moe_bf16_torch` (what `specgen bench` times) on torch tensors in torch._grouped_mm's layout: the groups' rows
    equal torch._grouped_mm's, and with a NaN-poisoned `out` the rows past the last group keep the NaN."""
    import torch

    module = importlib.import_module("generated.pallas.gpu_sm90.moe_bf16")
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(1000, 384, generator=gen, device="cuda").to(torch.bfloat16) / 384 ** 0.5
    w = torch.randn(8, 512, 384, generator=gen, device="cuda").to(torch.bfloat16)
    offs = torch.tensor([300, 300, 301, 551, 551, 551, 951, 990], dtype=torch.int32, device="cuda")
    want = torch._grouped_mm(a, w.transpose(-2, -1), offs=offs).float()
    got = module.moe_bf16_torch(a, w.transpose(-2, -1), offs)
    torch.testing.assert_close(got[:990].float(), want[:990], atol=2e-2, rtol=2e-2)
    out = torch.full((1000, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
    assert module.moe_bf16_torch(a, w.transpose(-2, -1), offs, out=out) is out
    torch.cuda.synchronize()
    assert out[990:].isnan().all() and not out[:990].isnan().any()
    torch.testing.assert_close(out[:990].float(), want[:990], atol=2e-2, rtol=2e-2)


VARIANT_CASES = {**RAGGED_SIZES, "decode": DECODE_SIZES}


@pytest.mark.parametrize("case", list(VARIANT_CASES))
def test_size_selected_variants_under_jit_against_the_float64_loop(modules, case):
    """gm_variants_untouched_k over M = every group's rows + 1: the jitted call picks the 64x256 variant (M <= 64:
    decode, all empty, shared tiles), the 64x128 one with 6 steps and N-major bands (M <= 256) or the 128x256
    default; the groups' rows match the loop, the row past them keeps out's NaN."""
    name = "gm_variants_untouched_k"
    spec, module = MGPU_FORMS[name], modules[name]
    sizes = tuple(VARIANT_CASES[case])
    problem = Problem(spec, m=sum(sizes) + 1, n=N, k=K, g=len(sizes))
    v0, v1 = module.VARIANT_CONFIGS
    want_cfg = v0 if problem.m <= 64 else v1 if problem.m <= 256 else module.CONFIG
    assert module._config_for(problem.m, N, K) is want_cfg
    fn = jax.jit(lambda *xs, out: getattr(module, name)(*xs, out=out))
    poison = jnp.full((problem.m, N), jnp.nan, problem.dtype)
    got = np.asarray(fn(problem.a, problem.b, problem.index(sizes), *(v for _, v in problem.args), out=poison)
                     .astype(jnp.float32))
    want, written = problem.reference(sizes)
    np.testing.assert_allclose(got[written], want[written], err_msg=case, **tolerance(spec))
    assert np.isnan(got[~written]).all() and not np.isnan(got[written]).any()


@pytest.mark.parametrize("name", CATALOGUE + GATED_CATALOGUE)
def test_catalogue_decode_variant(name):
    """The catalogue modules at decode sizes (M <= 64: their decode variant, a 64-row tile) against the loop:
    32 experts of 2 rows, and decode's uneven sizes over 64 rows (rows past the groups untouched); moe_bf16 under
    jax.jit against jax.lax.ragged_dot too."""
    module = importlib.import_module(f"generated.pallas.gpu_sm90.{name}")
    problem = Problem(module.SPEC, m=64, n=512, k=384, g=32)
    assert module._config_for(64, 512, 384) is module.VARIANT_CONFIGS[0]
    uneven = tuple(DECODE_SIZES) + (0,) * (32 - len(DECODE_SIZES))
    for sizes in ((2,) * 32, uneven):
        check(problem, module, sizes)
    if name == "moe_bf16":
        fn = jax.jit(module.moe_bf16)
        for sizes in ((2,) * 32, uneven):
            want = jax.lax.ragged_dot(problem.a, problem.b_logical, jnp.asarray(sizes, jnp.int32),
                                      preferred_element_type=jnp.float32)
            got = np.asarray(fn(problem.a, problem.b, problem.index(sizes)).astype(jnp.float32))
            rows = sum(sizes)
            np.testing.assert_allclose(got[:rows], np.asarray(want)[:rows], err_msg=str(sizes),
                                       **tolerance(module.SPEC))
        assert fn._cache_size() == 1


def _torch_problem(spec: dict, m: int, n: int, k: int, g: int, seed: int) -> tuple[list, dict]:
    """A (M, K), the (G, N, K) weight passed transposed (B (G, K, N) logical), in the spec's operand dtype, the
    epilogue's arguments as the torch entry takes them (a per-group bias or scale (G, N), a per-row router weight
    or fp8's scale_a (M,) f32, each in its dtype), on the GPU."""
    import torch

    dtype = getattr(torch, JNP_DTYPES[DType(spec["a"]["dtype"])])
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = (torch.randn(m, k, generator=gen, device="cuda") / k ** 0.5).to(dtype)
    w = torch.randn(g, n, k, generator=gen, device="cuda").to(dtype)
    args = {}
    for arg in GroupedSpec.model_validate(spec).runtime_args():
        if arg.shape == "group_n":
            args[arg.name] = torch.randn(g, n, generator=gen, device="cuda").to(getattr(torch, JNP_DTYPES[arg.dtype]))
        else:
            args[arg.name] = torch.rand(m, generator=gen, device="cuda") + 0.5
    return [a, w.transpose(-2, -1)], args


def _reference(spec: dict, a, b, offs, args: dict):

    want, written = grouped(spec, a.cpu().double(), b.cpu().double(), offs.cpu(),
                            {name: v.double().cpu() for name, v in args.items()})
    return want.to("cuda"), written.to("cuda")


# Aligned shapes (the direct path): decode's 64 rows over 32 experts (the decode variant), and a prefill one.
DIRECT_SHAPES = [(64, 512, 384, 32), (512, 512, 384, 8)]


def _offs(shape, which: int):
    import torch

    m, _, _, g = shape
    if g == 32:
        sizes = [(2,) * 32, tuple(DECODE_SIZES) + (0,) * 16, (0,) * 31 + (60,)][which]
    else:
        sizes = [(100, 0, 37, 128, 64, 1, 90, 50), (0, 200, 3, 0, 77, 130, 0, 90), (0,) * 8][which]
    return torch.tensor(list(itertools.accumulate(sizes)), dtype=torch.int32, device="cuda")


@pytest.mark.parametrize("shape", DIRECT_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", CATALOGUE)
def test_torch_entry_goes_direct_and_a_captured_graph_replays_new_group_sizes(name, shape, monkeypatch):
    """`<name>_torch` at aligned shapes launches the compiled kernel itself (no jax dispatch): bit for bit the
    jitted program's result through DLPack; captured in a CUDA graph with a NaN-poisoned `out`, each replay with new
    group sizes (and new A) copied into the captured tensors equals an eager call and the float64 loop on the
    groups' rows, and keeps the NaN in the rows past the last group (the kernel stores the groups' rows only)."""
    import torch

    module = importlib.import_module(f"generated.pallas.gpu_sm90.{name}")
    fn, spec = getattr(module, f"{name}_torch"), module.SPEC
    m, n, k, g = shape
    (a, b), args = _torch_problem(spec, m, n, k, g, seed=g)
    offs = _offs(shape, 0)
    with monkeypatch.context() as patch:  # the same call through DLPack and the jitted program
        patch.setattr(module, "_direct", lambda *_: None)
        jitted = fn(a, b, offs, *args.values())
    module._DIRECT.clear()
    eager = fn(a, b, offs, *args.values())
    torch.cuda.synchronize()
    assert [v for v in module._DIRECT.values() if v is not None], f"{name} {shape}: the call did not go direct"
    rows = int(offs[-1])
    assert torch.equal(eager[:rows], jitted[:rows]), f"{name} {shape}: the direct launch differs from the jitted one"
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as torch's graph docs ask
        fn(a, b, offs, *args.values(), out=out)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(a, b, offs, *args.values(), out=out)
    for which in (1, 2, 0):
        offs.copy_(_offs(shape, which))
        a.copy_(_torch_problem(spec, m, n, k, g, seed=which + 100)[0][0])
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        want, written = _reference(spec, a, b, offs, args)
        assert torch.equal(out[written], fn(a, b, offs, *args.values())[written]), f"{name} {shape} {which}"
        assert out[~written].isnan().all() and not out[written].isnan().any(), f"{name} {shape} {which}"
        err = (out[written].double() - want[written]).abs()
        assert bool((err <= 2e-2 + 2e-2 * want[written].abs()).all()), f"{name} {shape} {which}: {err.max():.4g}"


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "dlpack"])
def test_fp8_torch_entry_against_scaled_grouped_mm_and_the_loop(direct, monkeypatch):
    """moe_fp8_rowwise_torch (e4m3 A and K-major B, scale_a (M,), scale_b (G, N), bf16 out) at a prefill and a decode
    shape with empty groups (first, middle, last) and rows past the last group: the groups' rows match the float64
    loop (the scales applied to the f32 sums) and torch._scaled_grouped_mm on the same tensors; with a NaN-poisoned
    `out` the rows past the groups keep the NaN and none leaks into a group's rows. `direct`: the compiled kernel
    launched on torch's stream; else the DLPack path through the jitted program."""
    import torch

    module = importlib.import_module("generated.pallas.gpu_sm90.moe_fp8_rowwise")
    spec = module.SPEC
    if not direct:
        monkeypatch.setattr(module, "_direct", lambda *_: None)
    module._DIRECT.clear()
    for (m, n, k, g), sizes in (((1024, 512, 640, 8), (0, 300, 1, 0, 250, 77, 0, 390)),
                                ((64, 512, 384, 32), (2,) * 14 + (0,) * 17 + (5,))):
        (a, b), args = _torch_problem(spec, m, n, k, g, seed=m)
        offs = torch.tensor(list(itertools.accumulate(sizes)), dtype=torch.int32, device="cuda")
        rows = int(offs[-1])
        want, written = _reference(spec, a, b, offs, args)
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        assert module.moe_fp8_rowwise_torch(a, b, offs, *args.values(), out=out) is out
        peer = torch._scaled_grouped_mm(a, b, args["scale_a"], args["scale_b"], offs=offs, out_dtype=torch.bfloat16)
        torch.cuda.synchronize()
        assert bool(written[:rows].all()) and not bool(written[rows:].any())
        assert out[rows:].isnan().all() and not out[:rows].isnan().any(), (m, sizes)
        err = (out[:rows].double() - want[:rows]).abs()
        assert bool((err <= 2e-2 + 2e-2 * want[:rows].abs()).all()), f"{(m, n, k, g)}: {err.max():.4g}"
        torch.testing.assert_close(out[:rows].float(), peer[:rows].float(), atol=2e-2, rtol=2e-2)
    assert bool([v for v in module._DIRECT.values() if v is not None]) == direct


GATED = [name for name, s in MGPU_FORMS.items() if s["epilogue"] and s["epilogue"][0]["op"] == "gated"]
BAND = 3  # NaN rows above and below a banded `out` and columns beside it


@pytest.mark.parametrize("name", GATED)
def test_gated_torch_entry_direct_and_into_a_guard_banded_out(modules, name):
    """A gated form's `<name>_torch` with B the gate_up weight in torch._grouped_mm's layout ((G, 2N, K) passed
    transposed where B is K-major; (G, K, 2N) as stored where N-major): at an aligned shape (N and K whole tiles) with
    empty groups first, in the middle and last it launches the compiled kernel directly into a NaN-poisoned `out`; at
    M, N and K off the tile it writes (DLPack, the jitted program) into an `out` view inside a NaN storage with guard
    rows and columns. The groups' rows match the float64 loop (act(gate) * up, then the chain), rows past the groups
    keep the NaN where the tail is untouched (zeros where it is zero), and no guard element is written."""
    import torch

    spec, module = MGPU_FORMS[name], modules[name]
    fn = getattr(module, f"{name}_torch")
    dtype = getattr(torch, JNP_DTYPES[DType(spec["a"]["dtype"])])
    module._DIRECT.clear()
    for (m, n, k), sizes, banded in (((512, 256, 128), (0, 100, 0, 37, 128, 64, 1, 0), False),
                                     ((517, 300, 200), (3, 0, 250, 0, 1, 200), True)):
        g = len(sizes)
        gen = torch.Generator(device="cuda").manual_seed(m)
        a = (torch.randn(m, k, generator=gen, device="cuda") / k ** 0.5).to(dtype)
        w = torch.randn(g, 2 * n, k, generator=gen, device="cuda").to(dtype)  # gate_up_proj: (G, 2N, K)
        b = w.transpose(-2, -1) if spec["b"]["major"] == "k" else w.transpose(-2, -1).contiguous()
        args = {}
        for arg in GroupedSpec.model_validate(spec).runtime_args():
            args[arg.name] = (torch.randn(g, n, generator=gen, device="cuda").to(getattr(torch, JNP_DTYPES[arg.dtype]))
                              if arg.shape == "group_n" else torch.rand(m, generator=gen, device="cuda") + 0.5)
        index = torch.tensor(list(itertools.accumulate(sizes)) if spec["groups"]["index"] == "offs" else sizes,
                             dtype=torch.int32, device="cuda")
        out_dtype = getattr(torch, JNP_DTYPES[DType(spec["out"]["dtype"])])
        storage = torch.full((m + 2 * BAND, n + BAND) if banded else (m, n), float("nan"), dtype=out_dtype, device="cuda")
        out = storage[BAND:BAND + m, :n] if banded else storage
        assert fn(a, b, index, *args.values(), out=out) is out
        torch.cuda.synchronize()
        want, written = grouped(spec, a.cpu().double(), b.cpu().double(), index.cpu(),
                                {k_: v.double().cpu() for k_, v in args.items()})
        got = out.cpu().double()
        assert not got[written].isnan().any() and got[~written].isnan().all(), (name, m, sizes)
        err = (got[written] - want[written]).abs()
        tol = tolerance(spec)
        assert bool((err <= tol["atol"] + tol["rtol"] * want[written].abs()).all()), f"{name} {m}: {err.max():.4g}"
        if banded:  # the guard rows and columns around the view keep their NaN
            guard = torch.ones_like(storage, dtype=torch.bool)
            guard[BAND:BAND + m, :n] = False
            assert storage[guard].isnan().all(), f"{name}: a store left the out view"
    assert [v for v in module._DIRECT.values() if v is not None], f"{name}: the aligned call did not go direct"
