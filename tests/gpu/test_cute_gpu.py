"""The CuTe sm90 catalogue on a real Hopper GPU: numerics against a float64 reference in the kernels'
own dtypes (bf16, f16, fp8), poisoned outputs inside a NaN guard band, edge shapes (M = 1, tails on
M, N and K, K = 0), dtype variants (f16, fp8 e4m3 / e5m2), every epilogue op, the direct call after
the first, the disk cache, and torch.compile.

Marked `gpu`: CI (CPU only) deselects them; gpu/run.sh runs them on the H200 (CuTe DSL
installed with ../shared/tools/gpu-wheel-bundle).
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
NAMES = ["gemm_bf16", "gemm_small_bf16", "gemm_bias_gelu_bf16", "gemm_relu_f16", "bmm_bf16", "gemm_fp8_rowwise",
         "gemm_residual_bf16"]
# (M, N, K): M = 1, tails on every dim, K not a multiple of tile.k; N and K multiples of 16 so that TMA
# rows are 16-byte multiples for every dtype.
SHAPES = [(1, 256, 512), (200, 144, 96), (517, 264, 1040), (1024, 1024, 1024), (3000, 2048, 2064)]
# wide N: past the catalogue's N <= 4096 variants (gemm_bf16's ping-pong default, gemm_fp8_rowwise's 128x128), and N > 8192
WIDE = [(130, 4112, 136), (72, 8208, 264)]
TORCH = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32, "fp8_e4m3": torch.float8_e4m3fn,
         "fp8_e5m2": torch.float8_e5m2}


def module(name: str):
    return importlib.import_module(f"generated.cute.{name}")


def rendered(spec: dict, tmp: Path, variants: list[dict] = ()):
    """Render a spec variant's cute:sm90 module into `tmp` and import it: the spec's own config (its
    catalogue per-target tables and size-selected variants dropped), with `variants` if given."""
    from kernels import load_target_module

    spec = {**spec, "targets": ["cute:sm90"], "per_target": {}, "variants": list(variants)}
    return load_target_module(spec, "cute:sm90", tmp, "_specgen_cute_gpu_")[0]


def operand(dtype: str, rows: int, cols: int, batch: int | None, contiguous_last: bool, gen) -> torch.Tensor:
    """A (rows, cols) operand contiguous along cols (or rows), its leading stride padded to 16 elements
    (TMA needs 16-byte strides: a 1-row column-major matrix has a leading stride of 1 otherwise)."""
    lead = (batch,) if batch else ()
    inner, outer = (cols, rows) if contiguous_last else (rows, cols)
    padded = -(-inner // 16) * 16
    x = torch.randn((*lead, outer, padded), generator=gen, device="cuda").to(TORCH[dtype])[..., :inner]
    return x if contiguous_last else x.transpose(-1, -2)


def build_args(spec: dict, M: int, N: int, K: int, gen) -> list:
    batch = 3 if spec["batch"] else None
    args: list = [operand(spec["a"]["dtype"], M, K, batch, spec["a"]["major"] == "k", gen),
                  operand(spec["b"]["dtype"], K, N, batch, spec["b"]["major"] != "k", gen)]
    for op in spec["epilogue"]:
        if op["op"] == "bias":
            args.append(torch.randn(M if op["along"] == "m" else N, generator=gen, device="cuda").to(TORCH[op["dtype"]]))
        elif op["op"] == "scale" and op["by"] == "rowcol":
            args += [torch.rand(M, 1, generator=gen, device="cuda") + 0.5, torch.rand(1, N, generator=gen, device="cuda") + 0.5]
        elif op["op"] == "scale" and op["by"] in ("row", "col"):
            args.append(torch.rand(M if op["by"] == "row" else N, generator=gen, device="cuda") + 0.5)
        elif op["op"] == "scale" and op["value"] is None:
            args.append(0.75)
        elif op["op"] == "residual":
            args.append(torch.randn((batch, M, N) if batch else (M, N), generator=gen, device="cuda").to(TORCH[op["dtype"]]))
    return args


def reference(spec: dict, args: list) -> torch.Tensor:
    acc = args[0].double() @ args[1].double()
    rest = list(args[2:])
    for op in spec["epilogue"]:
        kind = op["op"]
        if kind == "bias":
            v = rest.pop(0).double().reshape(-1)
            acc = acc + (v[None, :] if op["along"] == "n" else v[:, None])
        elif kind == "scale" and op["by"] == "rowcol":
            sa, sb = rest.pop(0).double().reshape(-1), rest.pop(0).double().reshape(-1)
            acc = acc * sa[:, None] * sb[None, :]
        elif kind == "scale" and op["by"] == "row":
            acc = acc * rest.pop(0).double()[:, None]
        elif kind == "scale" and op["by"] == "col":
            acc = acc * rest.pop(0).double()[None, :]
        elif kind == "scale":
            acc = acc * (op["value"] if op["value"] is not None else rest.pop(0))
        elif kind == "activation":
            acc = {"relu": torch.relu, "silu": torch.nn.functional.silu, "sigmoid": torch.sigmoid,
                   "gelu": torch.nn.functional.gelu,
                   "gelu_tanh": lambda t: torch.nn.functional.gelu(t, approximate="tanh")}[op["fn"]](acc)
        elif kind == "residual":
            acc = acc + op["beta"] * rest.pop(0).double()
        elif kind == "clamp":
            acc = acc.clamp(op["min"], op["max"])
        else:  # cast
            acc = acc.to(TORCH[op["dtype"]]).double()
    return acc


def guarded_out(shape: tuple[int, ...], dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """A NaN-poisoned `out` view with a NaN guard band of one row above and below and 8 columns (16
    bytes and more) either side: (buffer, view). Bases and row strides stay 16-byte aligned."""
    *lead, M, N = shape
    buf = torch.full((*lead, M + 2, N + 16), float("nan"), device="cuda", dtype=dtype)
    return buf, buf[..., 1:M + 1, 8:N + 8]


def check(mod, fn, spec: dict, M: int, N: int, K: int, seed: int) -> None:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    args = build_args(spec, M, N, K, gen)
    out_dtype = TORCH[spec["out"]["dtype"]]
    shape = (3, M, N) if spec["batch"] else (M, N)
    buf, out = guarded_out(shape, out_dtype)
    got = fn(*args, out=out)
    torch.cuda.synchronize()
    assert got.data_ptr() == out.data_ptr()
    assert not torch.isnan(out).any(), "some output elements were never written"
    band = torch.ones_like(buf, dtype=torch.bool)
    band[..., 1:M + 1, 8:N + 8] = False
    assert torch.isnan(buf[band]).all(), "the kernel wrote outside `out`"
    ref = reference(spec, args)
    scale = ref.abs().max().item() + 1.0
    tol = {torch.bfloat16: 2e-2, torch.float16: 5e-3}.get(out_dtype, 2e-2) * scale
    err = (out.double() - ref).abs().max().item()
    assert err <= tol, f"{spec['name']} {(M, N, K)}: max |err| {err:.4g} > {tol:.4g}"
    again = fn(*args)  # the direct call on the loaded kernel, allocating out
    torch.cuda.synchronize()
    assert torch.equal(again, out)
    assert mod._launcher._fns, "the call should have loaded a compiled kernel"


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("shape", SHAPES + WIDE, ids=lambda s: "x".join(map(str, s)))
def test_catalogue_matches_float64_reference(name: str, shape: tuple[int, int, int]) -> None:
    mod = module(name)
    check(mod, getattr(mod, name), mod.SPEC, *shape, seed=hash((name, shape)) % 2**31)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("n", [29, 300])
def test_out_in_a_wider_buffer_keeps_the_columns_past_n(name: str, n: int) -> None:
    """out = the first N columns of a wider buffer whose rows are 16-byte multiples (nothing for the guards to
    stage), N x 2 bytes not one: a TMA store box reaching past N must leave the caller's columns there alone."""
    mod = module(name)
    spec = mod.SPEC
    M, K = 37, 64
    gen = torch.Generator(device="cuda").manual_seed(n)
    args = build_args(spec, M, n, K, gen)
    dt = TORCH[spec["out"]["dtype"]]
    per = 16 // dt.itemsize
    cols = -(-(n + 3) // per) * per  # at least 3 of the caller's columns past N in every row
    buf = torch.full((*((3,) if spec["batch"] else ()), M + 2, cols), float("nan"), device="cuda", dtype=dt)
    out = buf[..., 1:M + 1, :n]
    got = getattr(mod, name)(*args, out=out)
    torch.cuda.synchronize()
    assert got.data_ptr() == out.data_ptr() and not torch.isnan(out).any()
    band = torch.ones_like(buf, dtype=torch.bool)
    band[..., 1:M + 1, :n] = False
    written = (~torch.isnan(buf) & band).nonzero()[:6].tolist()
    assert not written, f"the kernel wrote outside `out` (N = {n}, rows of {cols}): at {written}"
    ref = reference(spec, args)
    err = (out.double() - ref).abs().max().item()
    assert err <= 2e-2 * (ref.abs().max().item() + 1.0), err


@pytest.mark.parametrize("name", NAMES)
def test_empty_k_gives_the_epilogue_of_zero(name: str) -> None:
    mod = module(name)
    check(mod, getattr(mod, name), mod.SPEC, 130, 136, 0, seed=1)


@pytest.mark.parametrize("dtype", ["f16", "fp8_e4m3", "fp8_e5m2"])
def test_dtype_variants(dtype: str, tmp_path: Path) -> None:
    spec = dict(module("gemm_bf16").SPEC)
    spec.update(name=f"gemm_{dtype}_cute", a={"dtype": dtype, "major": "k"}, b={"dtype": dtype, "major": "k"},
                out={"dtype": "bf16"}, tile={"m": 128, "n": 256, "k": 128 if dtype.startswith("fp8") else 64})
    mod = rendered(spec, tmp_path)
    for shape in SHAPES:
        check(mod, getattr(mod, spec["name"]), mod.SPEC, *shape, seed=7)


EVERY_OP = [
    {"op": "bias", "along": "m", "dtype": "bf16", "name": "bias_m"},
    {"op": "bias", "along": "n", "dtype": "f32", "name": "bias_n"},
    {"op": "scale", "by": "scalar"}, {"op": "scale", "by": "scalar", "value": 0.5},
    {"op": "scale", "by": "row"}, {"op": "scale", "by": "col"},
    {"op": "activation", "fn": "gelu"}, {"op": "residual", "dtype": "bf16", "beta": 0.5},
    {"op": "activation", "fn": "silu"}, {"op": "clamp", "min": -0.5, "max": 2.0}, {"op": "cast", "dtype": "f16"},
    {"op": "activation", "fn": "sigmoid"}, {"op": "scale", "by": "rowcol"}, {"op": "activation", "fn": "relu"},
    {"op": "activation", "fn": "gelu_tanh"},
]


def test_every_epilogue_op(tmp_path: Path) -> None:
    spec = dict(module("gemm_bf16").SPEC)
    spec.update(name="every_op_cute", epilogue=EVERY_OP, tile={"m": 128, "n": 128, "k": 64})
    mod = rendered(spec, tmp_path)
    for shape in SHAPES:
        check(mod, mod.every_op_cute, mod.SPEC, *shape, seed=3)


NARROW = {"tile": {"m": 128, "n": 112, "k": 64}}


@pytest.mark.parametrize("name, config", [
    ("gemm_bf16", NARROW),
    ("gemm_bf16", {**NARROW, "cute": {"mma_warpgroups": 1}, "tile": {"m": 64, "n": 112, "k": 64}}),
    ("gemm_bf16", {**NARROW, "cute": {"schedule": "pingpong"}, "cluster": {"m": 2, "n": 1}}),
    ("gemm_bias_gelu_bf16", NARROW),
    ("gemm_fp8_rowwise", {"tile": {"m": 128, "n": 112, "k": 128}}),
    ("gemm_residual_bf16", NARROW),
    ("gemm_bf16", {"tile": {"m": 64, "n": 48, "k": 64}}),
    ("gemm_bf16", {"tile": {"m": 128, "n": 80, "k": 64}, "cute": {"mma_warpgroups": 2}}),
], ids=lambda x: x if isinstance(x, str) else "-".join(f"{k}{v}" for k, v in x.items()).replace(" ", ""))
def test_tiles_of_16_column_subtiles_match_float64_reference(name: str, config: dict, tmp_path: Path) -> None:
    """A tile whose width is no multiple of 32 (112: 14336 / 112 = 128 tiles, one wave; 48; 80) stores its
    epilogue in 16-column subtiles: every shape (tails on M, N and K, N past one tile row), with the
    catalogue's epilogues (bias, the fp8 scales along N, a residual), one or two warpgroups, ping-pong in
    a cluster. (With 32-column subtiles a 64x48 tile compiled and stored garbage columns.)"""
    spec = {**module(name).SPEC, **config, "name": f"{name}_narrow"}
    mod = rendered(spec, tmp_path)
    assert mod.CONFIG.tile_n % 32 == 16 and mod.CONFIG.epi_n == 16
    for shape in SHAPES + WIDE + [(128, 14336, 4096)]:
        check(mod, getattr(mod, spec["name"]), mod.SPEC, *shape, seed=31)


PINGPONG = {"cute": {"schedule": "pingpong"}, "tile": {"m": 128, "n": 128, "k": 64}}


@pytest.mark.parametrize("name, config", [
    ("gemm_bf16", PINGPONG),
    ("gemm_bf16", {**PINGPONG, "cluster": {"m": 2, "n": 1}}),
    ("gemm_bf16", {**PINGPONG, "tile": {"m": 64, "n": 256, "k": 64}, "cluster": {"m": 1, "n": 2}}),
    ("gemm_relu_f16", PINGPONG),
    ("bmm_bf16", PINGPONG),
    ("gemm_residual_bf16", PINGPONG),
    ("gemm_fp8_rowwise", {**PINGPONG, "tile": {"m": 128, "n": 128, "k": 128}}),
], ids=lambda x: x if isinstance(x, str) else "-".join(f"{k}{v}" for k, v in x.items()).replace(" ", ""))
def test_pingpong_matches_float64_reference(name: str, config: dict, tmp_path: Path) -> None:
    """Two consumer warpgroups taking alternate tiles: every shape (M = 1: one tile, the second warpgroup
    idle; tails; more tiles than SMs) and the catalogue kernels' epilogues."""
    spec = {**module(name).SPEC, **config, "name": f"{name}_pingpong"}
    mod = rendered(spec, tmp_path)
    assert mod.CONFIG.pingpong
    for shape in SHAPES + [(4096, 4096, 512)]:
        check(mod, getattr(mod, spec["name"]), mod.SPEC, *shape, seed=11)


def test_pingpong_every_epilogue_op(tmp_path: Path) -> None:
    spec = dict(module("gemm_bf16").SPEC)
    spec.update(name="every_op_pingpong", epilogue=EVERY_OP, **PINGPONG)
    mod = rendered(spec, tmp_path)
    for shape in SHAPES:
        check(mod, mod.every_op_pingpong, mod.SPEC, *shape, seed=5)


SPLIT = {"schedule": {"split_k": 2}, "tile": {"m": 64, "n": 64, "k": 64}}
# decode-like shapes with a long K (K tiles split unevenly: 4104 = 64 x 64 + 8) and a K of two tiles (an
# empty split at split_k = 3 or 4), beside the usual shapes
SPLIT_SHAPES = SHAPES + WIDE + [(1, 4096, 8200), (64, 1000, 14336), (33, 2056, 4104), (5, 520, 96)]


@pytest.mark.parametrize("name, config", [
    ("gemm_bf16", SPLIT),
    ("gemm_bf16", {**SPLIT, "schedule": {"split_k": 3}, "cluster": {"m": 2, "n": 1}}),
    ("gemm_bf16", {**SPLIT, "schedule": {"split_k": 4, "persistent": False}}),
    ("gemm_bf16", {"schedule": {"split_k": 2}, "tile": {"m": 128, "n": 128, "k": 64}, "cute": {"mma_warpgroups": 2}}),
    ("gemm_bf16", {**SPLIT, "tile": {"m": 16, "n": 128, "k": 64}, "cute": {"swap_ab": True}}),
    ("gemm_bias_gelu_bf16", {**SPLIT, "tile": {"m": 32, "n": 64, "k": 64}, "cute": {"swap_ab": True}}),
    ("gemm_relu_f16", SPLIT),
    ("bmm_bf16", SPLIT),
    ("gemm_residual_bf16", SPLIT),
    ("gemm_fp8_rowwise", {**SPLIT, "tile": {"m": 16, "n": 128, "k": 128}, "cute": {"swap_ab": True}}),
], ids=lambda x: x if isinstance(x, str) else "-".join(f"{k}{v}" for k, v in x.items()).replace(" ", ""))
def test_split_k_matches_float64_reference(name: str, config: dict, tmp_path: Path) -> None:
    """Split-K in the cluster: its third dim's CTAs each reduce a share of K and meet in split 0's SMEM.
    Every shape (M = 1, tails on M, N and K, K of two tiles with an empty split, more tiles than
    clusters), every catalogue epilogue, swapped and not, 2x1 clusters, two consumer warpgroups, not
    persistent; `check` also compares a second call bit for bit (the sum runs in split order)."""
    spec = {**module(name).SPEC, **config, "name": f"{name}_split"}
    mod = rendered(spec, tmp_path)
    assert mod.CONFIG.split_k == config["schedule"]["split_k"]
    for shape in SPLIT_SHAPES:
        check(mod, getattr(mod, spec["name"]), mod.SPEC, *shape, seed=29)
    check(mod, getattr(mod, spec["name"]), mod.SPEC, 130, 136, 0, seed=1)  # K = 0: the epilogue of zero


def test_a_launch_past_grid_z_walks_the_tiles(tmp_path: Path) -> None:
    """A config that is not persistent launches a cluster per tile, up to grid z's 65535 CTAs (before this
    was capped, 129 x 256 tiles split in two asked for 66048 and the launch failed); past it, its
    clusters walk the tiles as the persistent schedule's do."""
    spec = {**module("gemm_bf16").SPEC, **SPLIT, "schedule": {"split_k": 2, "persistent": False}, "name": "many_tiles"}
    mod = rendered(spec, tmp_path)
    assert not mod.CONFIG.persistent and mod.CONFIG.launch_clusters == 65535 // 2
    check(mod, mod.many_tiles, mod.SPEC, 8256, 16384, 128, seed=37)


def test_split_k_is_bit_identical_across_runs_and_streams(tmp_path: Path) -> None:
    spec = {**module("gemm_bf16").SPEC, **SPLIT, "schedule": {"split_k": 4}, "name": "split_repeat"}
    mod = rendered(spec, tmp_path)
    gen = torch.Generator(device="cuda").manual_seed(31)
    a = torch.randn(48, 14336, generator=gen, device="cuda").to(torch.bfloat16)
    w = torch.randn(4096, 14336, generator=gen, device="cuda").to(torch.bfloat16)
    first = mod.split_repeat(a, w.t())
    runs = [mod.split_repeat(a, w.t()) for _ in range(5)]
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        runs.append(mod.split_repeat(a, w.t()))
    side.synchronize()
    assert all(torch.equal(r, first) for r in runs)
    ref = (a.double() @ w.double().t())
    assert (first.double() - ref).abs().max().item() <= 2e-2 * (ref.abs().max().item() + 1.0)


class Spy:
    """Stands in for a module's launcher, recording the config index of each call: its `ready` stays
    empty, so every call asks `entry`."""

    def __init__(self, launcher):
        self.launcher, self.variants, self.ready = launcher, [], {}

    def entry(self, device, variant, cfg):
        self.variants.append(variant)
        return self.launcher.entry(device, variant, cfg)

    def __getattr__(self, name):
        return getattr(self.launcher, name)


def test_variants_run_the_config_their_bounds_pick(tmp_path: Path, monkeypatch) -> None:
    """A spec with three size-selected variants (cooperative 64x128, ping-pong 128x128 with a 2x1
    cluster, cooperative 128x128 with two warpgroups) before the 128x256 default: each shape runs the
    first variant whose bounds hold, and each matches the reference."""
    spec = dict(module("gemm_bias_gelu_bf16").SPEC)
    spec.update(name="variants_cute")
    mod = rendered(spec, tmp_path, variants=[
        {"when": {"m_max": 16}, "tile": {"m": 64, "n": 128, "k": 64}},
        {"when": {"m_max": 1024, "k_max": 1024}, **PINGPONG, "cluster": {"m": 2, "n": 1}},
        {"when": {"n_max": 1024}, "tile": {"m": 128, "n": 128, "k": 64}, "cute": {"mma_warpgroups": 2}},
    ])
    assert len(mod.VARIANT_CONFIGS) == 3 and mod.VARIANT_CONFIGS[1].pingpong
    spy = Spy(mod._launcher)
    monkeypatch.setattr(mod, "_launcher", spy)
    cases = [((1, 256, 512), 0), ((200, 144, 96), 1), ((517, 264, 1040), 2), ((1024, 1024, 1024), 1),
             ((3000, 2048, 2064), None), ((2048, 1024, 4096), 2)]
    for shape, want in cases:
        spy.variants.clear()
        check(mod, mod.variants_cute, mod.SPEC, *shape, seed=13)
        assert spy.variants == [want, want], (shape, spy.variants)
    assert set(mod._launcher._fns) == {None, 0, 1, 2}


SWAPPED = {"cute": {"swap_ab": True}, "tile": {"m": 16, "n": 64, "k": 64}}


@pytest.mark.parametrize("name, config", [
    ("gemm_bf16", SWAPPED),
    ("gemm_bf16", {"cute": {"swap_ab": True, "schedule": "pingpong"}, "tile": {"m": 32, "n": 128, "k": 64}}),
    ("gemm_bf16", {**SWAPPED, "tile": {"m": 64, "n": 128, "k": 64}, "cluster": {"m": 1, "n": 2}}),
    ("gemm_bf16", {**SWAPPED, "cluster": {"m": 2, "n": 1}}),
    ("gemm_bias_gelu_bf16", SWAPPED),
    ("gemm_relu_f16", SWAPPED),
    ("bmm_bf16", SWAPPED),
    ("gemm_residual_bf16", {**SWAPPED, "tile": {"m": 32, "n": 64, "k": 64}}),
    ("gemm_fp8_rowwise", {**SWAPPED, "tile": {"m": 16, "n": 128, "k": 128}}),
], ids=lambda x: x if isinstance(x, str) else "-".join(f"{k}{v}" for k, v in x.items()).replace(" ", ""))
def test_swap_ab_matches_float64_reference(name: str, config: dict, tmp_path: Path) -> None:
    """out^T = B^T A^T (B's tile on wgmma's rows, out^T's subtiles stored M-major): every shape (M = 1,
    tails on M, N and K, wide N, M far past the tile), with each catalogue kernel's epilogue (bias and
    the fp8 scales gathered along the swapped dims, an A column-major residual kernel, batch)."""
    spec = {**module(name).SPEC, **config, "name": f"{name}_swapped"}
    mod = rendered(spec, tmp_path)
    assert mod.CONFIG.swap_ab and mod.CONFIG.tile_m == config["tile"]["n"]  # the kernel's tile is out^T's
    for shape in SHAPES + WIDE:
        check(mod, getattr(mod, spec["name"]), mod.SPEC, *shape, seed=17)
    check(mod, getattr(mod, spec["name"]), mod.SPEC, 130, 136, 0, seed=1)  # K = 0: the epilogue of zero


def test_swap_ab_every_epilogue_op(tmp_path: Path) -> None:
    spec = dict(module("gemm_bf16").SPEC)
    spec.update(name="every_op_swapped", epilogue=EVERY_OP, cute={"swap_ab": True}, tile={"m": 32, "n": 64, "k": 64})
    mod = rendered(spec, tmp_path)
    for shape in SHAPES:
        check(mod, mod.every_op_swapped, mod.SPEC, *shape, seed=19)


def test_swapped_variants_run_beside_an_unswapped_default(tmp_path: Path, monkeypatch) -> None:
    """Decode variants that swap A and B (M <= 16: 16x64; M <= 64: ping-pong 32x128) before the
    unswapped default, in one module: each shape runs the config its bounds pick and matches."""
    spec = dict(module("gemm_bias_gelu_bf16").SPEC)
    spec.update(name="swapped_variants_cute")
    mod = rendered(spec, tmp_path, variants=[
        {"when": {"m_max": 16}, **SWAPPED},
        {"when": {"m_max": 64}, "cute": {"swap_ab": True, "schedule": "pingpong"}, "tile": {"m": 32, "n": 128, "k": 64}},
    ])
    assert [c.swap_ab for c in mod.VARIANT_CONFIGS] == [True, True] and not mod.CONFIG.swap_ab
    spy = Spy(mod._launcher)
    monkeypatch.setattr(mod, "_launcher", spy)
    for shape, want in [((1, 4096, 4096), 0), ((16, 1000, 520), 0), ((17, 264, 1040), 1), ((64, 8208, 264), 1),
                        ((65, 256, 512), None)]:
        spy.variants.clear()
        check(mod, mod.swapped_variants_cute, mod.SPEC, *shape, seed=23)
        assert spy.variants == [want, want], (shape, spy.variants)


def test_torch_compile_fullgraph() -> None:
    mod = module("gemm_bias_gelu_bf16")
    gen = torch.Generator(device="cuda").manual_seed(0)
    a, b, bias = build_args(mod.SPEC, 256, 512, 128, gen)

    @torch.compile(fullgraph=True)
    def layer(a, b, bias):
        return mod.gemm_bias_gelu_bf16(a, b, bias) * 2.0

    torch.testing.assert_close(layer(a, b, bias), mod.gemm_bias_gelu_bf16(a, b, bias) * 2.0)


def test_guards_on_the_gpu() -> None:
    mod = module("gemm_bf16")
    a = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="argument 'b' must be contiguous along dim 0"):
        mod.gemm_bf16(a, b)  # B must be K-major: b.t() of a row-major weight
    with pytest.raises(TypeError, match="argument 'a' must have dtype torch.bfloat16"):
        mod.gemm_bf16(a.half(), b.t())
    # What TMA cannot take in place is staged by the launcher (one copy), not refused: output rows of
    # N = 60 elements (120 bytes), and an A whose base is one element (2 bytes) past an aligned one.
    want = a.double() @ b[:60].double().t()
    torch.testing.assert_close(mod.gemm_bf16(a, b[:60].t()).double(), want, atol=5e-2, rtol=1e-2)
    off = torch.randn(4097, device="cuda", dtype=torch.bfloat16)[1:].view(64, 64)
    off.copy_(a)
    torch.testing.assert_close(mod.gemm_bf16(off, b.t()).double(), a.double() @ b.double().t(), atol=5e-2, rtol=1e-2)
