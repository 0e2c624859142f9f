"""The grouped kind's Pallas Mosaic GPU design (specgen/kinds/grouped/designs/pallas_mgpu) on a CPU machine: every
form of specgen/kinds/grouped/testing/mgpu_specs.py and the catalogue's grouped Mosaic GPU modules render, and
their kernels lower for CUDA here (the real lowering jax runs in Python: the kernel body, layout inference, the
SMEM allocation; the compile hook's), with Mosaic GPU allocating exactly the plan's SMEM; the shapes the
launcher traces (tails, M = 1, 256 groups, G = 1, an empty output); the group metadata's tail visits; check's
rules on both sides (the dense Mosaic GPU rules it reuses, MGP001-MGP003, fp8's); errors naming the argument; refusal
without a CUDA device. Numerics run on the GPU: tests/gpu/test_grouped_mgpu_gpu.py."""

from __future__ import annotations

import importlib
import json
import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specgen.check import check_all
from specgen.compile import load_rendered
from specgen.kinds.grouped.designs.pallas_mgpu.compile import compile_module
from specgen.kinds.grouped.spec import GroupedSpec
from specgen.kinds.grouped.testing.mgpu_specs import MGPU_FORMS, mgpu_form
from specgen.registry import design_for
from specgen.resolve import resolve
from specgen.runtime.grouped_jax import group_row_starts, row_visits_bound
from specgen.spec.load import load_text
from specgen.targets import TARGETS

CATALOGUE = ("moe_bf16", "moe_down_router_bf16", "moe_up_bias_silu_bf16", "moe_gate_up_swiglu_bf16")


def loaded(spec: dict):
    (ls,) = load_text(json.dumps({"kernels": [spec]}), f"<test:{spec['name']}>", ".json")
    return ls


def render(spec: dict, folder) -> object:
    ls = loaded(spec)
    (target,) = ls.spec.targets
    design = design_for("grouped", target)
    assert design is not None and design.name == "Pallas Mosaic GPU grouped"
    files = design.render(ls, [target], {str(target): resolve(ls.spec, target)})
    assert set(files) == {f"pallas/gpu_sm90/{spec['name']}.py", "pallas/gpu_sm90/__init__.py"}
    path = folder / f"{spec['name']}.py"
    path.write_text(files[f"pallas/gpu_sm90/{spec['name']}.py"])
    return load_rendered(path, f"_specgen_grouped_mgpu_cpu_{spec['name']}")


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    folder = tmp_path_factory.mktemp("grouped_mgpu_cpu")
    return {name: render(s, folder) for name, s in MGPU_FORMS.items()}


def structs(spec: dict, m: int, n: int, k: int, g: int) -> list:
    s = GroupedSpec.model_validate(spec)
    dt = jnp.dtype({"bf16": jnp.bfloat16, "f16": jnp.float16, "fp8_e4m3": jnp.float8_e4m3fn,
                    "fp8_e5m2": jnp.float8_e5m2}[s.a.dtype.value])
    bn = 2 * n if s.epilogue and s.epilogue[0].op == "gated" else n  # gate and up columns
    args = [jax.ShapeDtypeStruct((m, k), dt), jax.ShapeDtypeStruct((g, bn, k) if s.b.major == "k" else (g, k, bn), dt),
            jax.ShapeDtypeStruct((g,), jnp.int32)]
    for arg in s.runtime_args():
        shape = {"group_n": (g, n), "vec_m": (m,), "scalar": ()}[arg.shape]
        dtype = jnp.float32 if arg.shape == "scalar" else jnp.dtype({"f32": jnp.float32, "bf16": jnp.bfloat16,
                                                                      "f16": jnp.float16}[arg.dtype.value])
        args.append(jax.ShapeDtypeStruct(shape, dtype))
    return args


# --- lowering for CUDA (the compile hook) -------------------------------------------------------------------
@pytest.mark.parametrize("name", list(MGPU_FORMS))
def test_each_form_lowers_for_cuda_with_the_plans_smem(modules, name):
    """Every config of the module (the default, then each size-selected variant) lowers with exactly the SMEM its
    plan says, the figure check resolved for it."""
    mod = modules[name]
    results = compile_module(mod, TARGETS["pallas:gpu_sm90"])
    configs = [mod.CONFIG, *mod.VARIANT_CONFIGS]
    assert [r.variant for r in results] == [None, *range(len(mod.VARIANT_CONFIGS))]
    for r, cfg in zip(results, configs, strict=True):
        assert r.error == "" and r.compiler_smem == r.plan_smem == cfg.smem_bytes
    assert mod.METADATA["smem_bytes"] == mod.CONFIG.smem_bytes
    resolved = resolve(loaded(MGPU_FORMS[name]).spec, TARGETS["pallas:gpu_sm90"])
    for ctx, cfg in zip([resolved, *resolved.variants], configs, strict=True):
        assert ctx.budget.total == cfg.smem_bytes and ctx.ab_stages == cfg.stages and ctx.spec.tile.m == cfg.tile_m
    assert [v.get("when") for v in mod.METADATA["variants"]] == [v["when"] for v in MGPU_FORMS[name].get("variants", [])]


@pytest.mark.parametrize("name", CATALOGUE)
def test_catalogue_modules_lower_for_cuda(name):
    """The catalogue modules: the default and the decode variant (M <= 64: a 64-row tile) lower with their SMEM."""
    mod = importlib.import_module(f"generated.pallas.gpu_sm90.{name}")
    results = compile_module(mod, TARGETS["pallas:gpu_sm90"])
    assert [r.error for r in results] == [""] * (1 + len(mod.VARIANT_CONFIGS)) and len(results) == 2
    assert [r.compiler_smem for r in results] == [c.smem_bytes for c in (mod.CONFIG, *mod.VARIANT_CONFIGS)]
    assert mod.METADATA["targets"] == ["pallas:gpu_sm90"] and mod.METADATA["kind"] == "grouped"
    assert mod._config_for(64, 4096, 7168) is mod.VARIANT_CONFIGS[0] and mod.VARIANT_CONFIGS[0].tile_m == 64
    assert mod._config_for(65, 4096, 7168) is mod.CONFIG


def test_variants_are_picked_by_the_total_rows_when_the_call_traces(modules):
    """The first variant whose bounds hold runs, M counting every group's rows (a static shape: nothing is read
    from the device): M <= 64 the 64x256 tile, M <= 256 the 64x128 one (6 steps, N-major bands of 4), else the
    default; the lowered kernel allocates the chosen config's SMEM, and new group sizes of a shape reuse it."""
    from specgen.kinds.gemm.designs.pallas.compile import mosaic_gpu_launch_smem

    name = "gm_variants_untouched_k"
    mod, spec = modules[name], MGPU_FORMS[name]
    v0, v1 = mod.VARIANT_CONFIGS
    assert (v0.tile_m, v0.tile_n, v1.tile_n, v1.stages, v1.raster_dim, v1.group_m) == (64, 256, 128, 6, 1, 4)
    n, k = 4096, 7168  # K past every config's depth: each allocates all its stages
    for m, g, want in ((1, 1, v0), (42, 16, v0), (64, 32, v0), (65, 32, v1), (256, 8, v1), (257, 8, mod.CONFIG),
                       (4096, 32, mod.CONFIG)):
        assert mod._config_for(m, n, k) is want
        lowered = jax.jit(lambda *xs, mod=mod: mod._launch(*xs)).trace(*structs(spec, m, n, k, g)).lower(
            lowering_platforms=("cuda",))
        assert mosaic_gpu_launch_smem(lowered) == want.smem_bytes, m


SHAPES = [(517, 300, 200, 6), (1, 300, 200, 3), (256, 256, 128, 256), (517, 300, 200, 1), (64, 4096, 7168, 32)]


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{m}x{n}x{k}g{g}" for m, n, k, g in SHAPES])
def test_launcher_shapes_lower(modules, shape):
    """Tails on M, N and K (N and K padded for TMA), M = 1, 256 groups, G = 1, decode's 2 rows an expert: the
    launcher's branches and the kernel at those shapes lower (the untouched forms with the caller's `out` too)."""
    from specgen.kinds.gemm.designs.pallas.compile import mosaic_gpu_launch_smem

    m, n, k, g = shape
    for name in ("gm_plain_untouched_mn", "gm_every_op_k"):
        mod, spec = modules[name], MGPU_FORMS[name]
        kw = {} if spec["groups"]["tail"] == "zero" else {"out": jax.ShapeDtypeStruct((m, n), jnp.bfloat16)}
        lowered = jax.jit(lambda *xs, mod=mod, **kw: mod._launch(*xs, **kw)).trace(
            *structs(spec, m, n, k, g), **kw).lower(lowering_platforms=("cuda",))
        assert mosaic_gpu_launch_smem(lowered) <= mod.CONFIG.smem_bytes
        out = jax.eval_shape(mod._call, *structs(spec, m, n, k, g))
        assert out.shape == (m, n) and out.dtype == jnp.bfloat16


def test_an_empty_output_traces_without_a_kernel(modules):
    mod = modules["gm_plain_zero_k"]
    assert jax.eval_shape(mod._call, *structs(MGPU_FORMS["gm_plain_zero_k"], 0, 256, 64, 2)).shape == (0, 256)


# --- the group metadata: visits from each group's first row ------------------------------------------------------
def test_row_start_visits_store_every_row_once_from_8_row_aligned_tiles():
    """group_row_starts, read as the kernel reads it (its first `used` visits) (row = lo rounded down to 8, hi = min(end, row + tile), the tile
    loaded from min(row, the last whole row tile)): every group row is stored exactly once, by a visit of its own
    group, and with the tail every row past the groups once by a tail visit (none without); each store lies in its
    visit's loaded tile, which starts on 8 rows and ends within the whole row tiles per-row vectors are padded to;
    and the static count is row_visits_bound's (a bound too small would leave rows unstored). Sizes drawn to stress
    the bound too: many groups starting one row past an 8-row boundary."""
    rng = random.Random(37)
    metadata = jax.jit(group_row_starts, static_argnums=(1, 2, 3))
    for draw in range(32):  # shapes from a few (each compiles the jitted metadata once), sizes free
        rows, block, g = rng.choice([1, 63, 200, 1000]), rng.choice([64, 128]), rng.choice([1, 5, 40])
        if draw % 4 == 0:  # every group block + 1 rows: each starts off the 8-row grid, spans one visit more
            sizes = [block + 1] * g
        else:
            sizes = [rng.choice([0, 0, 1, 2, 9, -3, rng.randint(0, 200)]) for _ in range(g)]
        for tail in (False, True):
            off, grp, lo, used = (np.asarray(x) for x in metadata(jnp.asarray(sizes, jnp.int32), rows, block, tail))
            assert len(grp) == len(lo) == row_visits_bound(rows, g, block, tail)
            # the visits that store rows come first (the kernel walks those `used` only), the left-over ones after
            (used,) = used.tolist()
            assert (lo[:used] < rows).all() and (lo[used:] == rows).all() and (grp[used:] == g).all()
            whole = -(-rows // block) * block
            hits = np.zeros(rows, int)
            for group, first in zip(grp[:used].tolist(), lo[:used].tolist(), strict=True):
                row = first // 8 * 8
                tile0 = min(row, whole - block)
                hi = min(off[group + 1] if group < g else rows, row + block)
                assert tile0 % 8 == 0 and tile0 >= 0 and tile0 + block <= max(whole, block)
                if hi > first:
                    assert tile0 <= first and hi <= tile0 + block and (off[group] <= first if group < g else tail)
                    hits[first:hi] += 1
            assert (hits == (1 if tail else (np.arange(rows) < off[g]))).all(), (rows, block, sizes, tail)


# --- check ---------------------------------------------------------------------------------------------------
def findings(**changes: object) -> set[tuple[str, str]]:
    spec = {**mgpu_form("gm_rule"), **{k: list(v) if isinstance(v, tuple) else v for k, v in changes.items()}}
    return {(d.rule, d.severity) for d in check_all([loaded(spec)]) if d.target == "pallas:gpu_sm90"}


def errors(**changes: object) -> set[str]:
    return {rule for rule, sev in findings(**changes) if sev == "error"}


def test_variants_render_here_and_each_is_checked_by_every_rule():
    """CFG003 both sides: size-selected variants render on pallas:gpu_sm90 (its jitted call picks one) and are
    refused on the TPU design's module (one config); a variant's own config is checked by the rules (a 32-column
    subtile row in a variant: MGP002, reported at the variant)."""
    variants = [{"when": {"m_max": 64}, "tile": {"m": 64, "n": 256, "k": 128}}]  # K whole 128-lane tiles (PAL001)
    both = {**mgpu_form("gm_rule"), "targets": ["pallas:gpu_sm90", "pallas:tpu_v5e"], "variants": variants,
            "per_target": {"pallas:tpu_v5e": {"tile": {"m": 128, "n": 256, "k": 256}}}}
    got = [(d.rule, d.target) for d in check_all([loaded(both)]) if d.severity == "error"]
    assert got == [("CFG003", "pallas:tpu_v5e")], got
    bad = {**mgpu_form("gm_rule"), "variants": [{"when": {"m_max": 64}, "tile": {"m": 64, "n": 64, "k": 64}}]}
    (d,) = [d for d in check_all([loaded(bad)]) if d.severity == "error"]
    assert d.rule == "MGP002" and "32 x 2 B = 64 B" in d.message and "M <= 64" in d.variant


def test_the_forms_check_clean():
    for spec in MGPU_FORMS.values():
        assert [d for d in check_all([loaded(spec)]) if d.severity == "error"] == []


@pytest.mark.parametrize(("changes", "rule"), [
    ({"tile": {"m": 128, "n": 64, "k": 64}}, "MGP002"),  # 32-column bf16 subtile rows: 64 B
    ({"tile": {"m": 32, "n": 128, "k": 64}}, "MMA001"),  # wgmma rows of 64
    ({"tile": {"m": 128, "n": 200, "k": 64}}, "PAL006"),  # warpgroup halves of 100
    ({"tile": {"m": 128, "n": 128, "k": 24}}, "PAL008"),  # no swizzle divides 48 B of K
    ({"tile": {"m": 128, "n": 256, "k": 128}, "pipeline": {"ab_stages": 4}}, "SMEM001"),
    ({"epilogue": ({"op": "activation", "fn": "gelu"},)}, "PAL009"),  # erf: no layout rule
    ({"epilogue": ({"op": "gated", "fn": "gelu", "layout": "halves"},)}, "PAL009"),  # GeGLU's erf form too
    # an interleaved gated B N-major: its gate columns are 2 elements apart along the contiguous dim (no TMA view)
    ({"b": {"dtype": "bf16", "major": "mn"}, "epilogue": ({"op": "gated", "fn": "silu", "layout": "interleaved"},)},
     "MGP003"),
])
def test_rules_refuse_what_does_not_fit_or_lower(changes, rule):
    assert rule in errors(**changes)
    assert rule not in errors()


def test_gated_checks_clean_on_both_layouts_and_its_limits_name_the_numbers():
    """A gated epilogue renders here (no EPI001; the TPU design beside it refuses its interleaved B: GRP204): halves on either B
    major, interleaved K-major, SiLU and GELU-tanh, a bias after it. MGP003 names the interleaved N-major B's 4-byte
    gate column step and fp8 operands; PAL009 the erf GeGLU."""
    gated = ({"op": "gated", "fn": "silu", "layout": "interleaved"}, {"op": "bias", "dtype": "bf16"})
    assert errors(epilogue=gated) == set()
    assert errors(b={"dtype": "bf16", "major": "mn"}, epilogue=({"op": "gated", "fn": "gelu_tanh", "layout": "halves"},)) == set()
    both = {**mgpu_form("gm_rule", epilogue=gated), "targets": ["pallas:gpu_sm90", "pallas:tpu_v5e"],
            "per_target": {"pallas:tpu_v5e": {"tile": {"m": 128, "n": 256, "k": 256}}}}
    got = {(d.rule, d.target) for d in check_all([loaded(both)]) if d.severity == "error"}
    assert got == {("GRP204", "pallas:tpu_v5e")}, got  # the TPU kernel renders halves K-major only
    bad = mgpu_form("gm_rule", b="mn", epilogue=gated)
    (d,) = [d for d in check_all([loaded(bad)]) if d.rule == "MGP003"]
    assert "gate column j is B's column 2j, 4 B from the next" in d.message and 'b.major = "k"' in d.hint
    fp8 = mgpu_form("gm_rule", dtype="fp8_e4m3", out="bf16", tile={"m": 128, "n": 128, "k": 128}, epilogue=gated[:1])
    assert {d.rule for d in check_all([loaded(fp8)]) if d.severity == "error"} == {"MGP003"}


def test_a_gated_launcher_lowers_off_the_tile_and_refuses_an_odd_b(modules):
    """The gated forms at M, N and K off the tile (each half of B padded on its own), M = 1: the kernel lowers with at
    most its plan's SMEM and returns (M, N) from B's 2N columns; B with an odd column count is refused, naming b."""
    from specgen.kinds.gemm.designs.pallas.compile import mosaic_gpu_launch_smem

    for name, (m, n, k, g) in (("gm_gated_il_f16_k", (517, 300, 200, 6)), ("gm_gated_halves_mn", (1, 136, 72, 3))):
        mod, spec = modules[name], MGPU_FORMS[name]
        xs = structs(spec, m, n, k, g)
        lowered = jax.jit(lambda *xs, mod=mod: mod._launch(*xs)).trace(*xs).lower(lowering_platforms=("cuda",))
        assert mosaic_gpu_launch_smem(lowered) <= mod.CONFIG.smem_bytes
        assert jax.eval_shape(mod._call, *xs).shape == (m, n)
    a, b, offs = structs(MGPU_FORMS["gm_gated_il_f16_k"], 40, 128, 64, 3)
    odd = jax.ShapeDtypeStruct((3, 255, 64), b.dtype)
    with pytest.raises(ValueError, match=r"b.shape\[1\] = 255 must be even: the gated epilogue reads gate and up"):
        jax.eval_shape(modules["gm_gated_il_f16_k"]._call, a, odd, offs)


def test_own_rules_refuse_what_is_not_rendered():
    base = mgpu_form("gm_rule")
    for changes, rule in ((dict(groups={"index": "offs", "tail": "untouched", "ragged": "k"}, b={"dtype": "bf16", "major": "mn"},
                                tile={"m": 128, "n": 128, "k": 32}), "MGP001"),  # ragged K renders: its tile.k rule
                          (dict(cluster={"m": 2, "n": 1}), "MGP003"),
                          (dict(pallas={"vmem_limit_bytes": 1 << 20}), "OPT001")):
        spec = {**base, **changes}
        got = {d.rule for d in check_all([loaded(spec)]) if d.severity == "error" and d.target == "pallas:gpu_sm90"}
        assert rule in got, (changes, got)
    assert not {"MGP001", "MGP002", "MGP003", "OPT001"} & errors()


def test_rule_messages_carry_the_numbers():
    spec = mgpu_form("gm_rule", tile={"m": 128, "n": 64, "k": 64})
    (d,) = [d for d in check_all([loaded(spec)]) if d.rule == "MGP002"]
    assert "32 x 2 B = 64 B" in d.message and "128-byte" in d.message and "tile.n >= 128" in d.hint


def test_fp8_checks_clean_k_major_and_is_refused_mn_major():
    """fp8 renders (e4m3 or e5m2, with its rowwise scales first): clean with B K-major; an MN-major fp8 B is MAJ001's
    (wgmma transposes 16-bit operands only), an e4m3 x e5m2 mix PAL004's (without a compile: the model's verdict, jax
    0.10's), an fp8 out MGP002's (a 64-column subtile row of 1-byte elements is 64 B,
    not 128)."""
    fp8 = dict(a={"dtype": "fp8_e4m3", "major": "k"}, b={"dtype": "fp8_e4m3", "major": "k"}, out={"dtype": "bf16"},
               tile={"m": 128, "n": 256, "k": 128}, epilogue=[{"op": "scale", "by": "rowcol"}])
    assert errors(**fp8) == set()
    assert errors(**{**fp8, "a": {"dtype": "fp8_e5m2", "major": "k"}, "b": {"dtype": "fp8_e5m2", "major": "k"}}) == set()
    assert errors(**{**fp8, "b": {"dtype": "fp8_e4m3", "major": "mn"}}) == {"MAJ001"}
    assert errors(**{**fp8, "b": {"dtype": "fp8_e5m2", "major": "k"}}) == {"PAL004"}  # the mix: jax 0.10 refuses it
    assert "MGP002" in errors(**{**fp8, "out": {"dtype": "fp8_e4m3"}})


# --- the entry -------------------------------------------------------------------------------------------------
def test_bad_arguments_raise_naming_them(modules):
    mod = modules["gm_every_op_k"]
    m, n, k, g = 40, 256, 64, 3
    a = jnp.zeros((m, k), jnp.bfloat16)
    b = jnp.zeros((g, n, k), jnp.bfloat16)
    offs = jnp.asarray([10, 20, 40], jnp.int32)
    bias, router, colw = jnp.zeros((g, n), jnp.bfloat16), jnp.ones((m,), jnp.float32), jnp.ones((g, n), jnp.float32)
    call = mod._call
    with pytest.raises(TypeError, match="'offs' is float32, expected int32"):
        jax.eval_shape(call, a, b, offs.astype(jnp.float32), bias, router, colw, 0.5)
    with pytest.raises(ValueError, match=r"'bias' has shape \(256,\), expected \(G, N\) = \(3, 256\)"):
        jax.eval_shape(call, a, b, offs, bias[0], router, colw, 0.5)
    with pytest.raises(ValueError, match="'b' has shape"):
        jax.eval_shape(call, a[:, :32], b, offs, bias, router, colw, 0.5)
    with pytest.raises(RuntimeError, match="Mosaic GPU kernels run on an sm90 CUDA device"):
        mod.gm_every_op_k(a, b, offs, bias, router, colw, 0.5)


def test_fp8_bad_arguments_raise_naming_them(modules):
    """The fp8 module's checks: an operand in another dtype, scale_b without its group dim, scale_a's length."""
    name = "gm_fp8_rowcol_silu_k"
    call, spec = modules[name]._call, MGPU_FORMS[name]
    a, b, offs, sa, sb = structs(spec, 40, 256, 128, 3)
    with pytest.raises(TypeError, match="'a' is bfloat16, expected float8_e4m3fn"):
        jax.eval_shape(call, jax.ShapeDtypeStruct(a.shape, jnp.bfloat16), b, offs, sa, sb)
    with pytest.raises(ValueError, match=r"'scale_b' has shape \(256,\), expected \(G, N\) = \(3, 256\)"):
        jax.eval_shape(call, a, b, offs, sa, jax.ShapeDtypeStruct((256,), jnp.float32))
    with pytest.raises(ValueError, match="'scale_a' has shape"):
        jax.eval_shape(call, a, b, offs, jax.ShapeDtypeStruct((39,), jnp.float32), sb)


def test_the_torch_entry_is_what_bench_calls_and_refuses_without_a_gpu(modules):
    """`specgen bench` times `<name>_torch` (the dense Mosaic GPU design's torch_entry: the call, then a device sync);
    on a machine without a CUDA device it raises before converting anything."""
    import torch

    mod = modules["gm_plain_untouched_mn"]
    design = design_for("grouped", "pallas:gpu_sm90")
    assert design.torch_entry.__func__ is design_for("gemm", "pallas:gpu_sm90").torch_entry.__func__
    a, b = torch.zeros(8, 64, dtype=torch.bfloat16), torch.zeros(2, 64, 256, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="gm_plain_untouched_mn: Mosaic GPU kernels run on an sm90 CUDA device"):
        design.torch_entry(mod, "gm_plain_untouched_mn")(a, b, torch.tensor([4, 8], dtype=torch.int32))


def test_the_direct_launchs_metadata_kernel_equals_the_jitted_programs():
    """The torch entry's direct launch computes the group metadata in one Triton kernel (runtime/grouped_metadata.py,
    run here by the Triton interpreter) from the sizes or from offs: value for value runtime/grouped_jax.py's, over
    random sizes (negative, empty, past M; up to 300 groups: more than one visit block), both tails, both tile
    heights."""
    import torch

    from specgen.runtime import grouped_jax as gj
    from specgen.runtime import grouped_metadata as gm

    rng = random.Random(22)
    metadata = jax.jit(gj.group_row_starts, static_argnums=(1, 2, 3))
    for draw in range(12):  # shapes from a few (each compiles the jitted metadata once), sizes free
        g, rows, block = (300, 1, 7, 40)[draw % 4], rng.choice([1, 130, 900]), rng.choice([64, 128])
        sizes = [rng.choice([0, 0, 1, 2, -3, rng.randint(0, 300)]) for _ in range(g)]
        offs = torch.tensor(np.cumsum(sizes), dtype=torch.int32)  # what a negative size does to offs: a step back
        for tail in (False, True):
            want = metadata(jnp.asarray(sizes, jnp.int32), rows, block, tail)
            for got in (gm.group_row_starts(torch.tensor(sizes, dtype=torch.int32), rows, block, tail),
                        gm.group_row_starts(offs, rows, block, tail, from_offs=True)):
                for x, y in zip(want, got, strict=True):
                    assert y.dtype == torch.int32 and np.array_equal(np.asarray(x), y.numpy()), (sizes, rows, block, tail)
