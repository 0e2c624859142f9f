"""CuTe sm100 (tcgen05) on this CPU machine: there is no Blackwell GPU here, so the design is verified by
compiling for sm_100a and reading the SASS, nothing else (no numerics, no speed).

- every catalogue kernel with a cute:sm100 target compiles, every config of it, through `specgen compile
  --target cute:sm100 --sass` (the real CLI, in a subprocess);
- the SASS: exactly the TMA loads one load site per operand issues (one UTMALDG per 128-byte box of the
  operand's stage: one for K-major tiles of 128 bytes of K, more where an MN-major tile is wider than the
  128-byte swizzle), UTCHMMA for 16-bit inputs and UTCQMMA for fp8, UTMASTG, zero LDL/STL, registers
  per thread reported;
- the plan's SMEM and TMEM equal what the compiled kernel allocates (launch SMEM + static; the PTX's
  tcgen05.alloc columns);
- the generated source has one TMA-load site per operand inside one rolled producer loop;
- a spec with every epilogue op, fp8 e5m2 with both majors, and clusters with multicast compile spill-free.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kernels import MINIMAL_SPEC, load_target_module

from specgen.kinds.gemm.designs.cute_sm100.compile import compile_module, tmem_alloc_columns
from specgen.kinds.gemm.designs.cute_sm100.design import epilogue_tile, tmem_columns
from specgen.kinds.gemm.designs.cute_sm100.design import tmem_alloc_columns as plan_tmem
from specgen.registry import design_for
from specgen.resolve import resolve
from specgen.spec.load import load_paths, load_text
from specgen.spec.models import parse_target
from specgen.targets import target_info

ROOT = Path(__file__).resolve().parents[3]
# one worker: the module-scoped compile of the catalogue (every config, tens of seconds) is built once, not once on
# each xdist worker its tests land on
pytestmark = pytest.mark.xdist_group("cute_sm100_catalogue")
SM90, SM100 = parse_target("cute:sm90"), parse_target("cute:sm100")
DESIGN = design_for("gemm", "cute:sm100")
SPECS = {ls.name: ls for ls in load_paths([ROOT / "specs"])}
CATALOGUE = {name for name, ls in SPECS.items() if any(str(t) == "cute:sm100" for t in ls.spec.targets)}
# the dense kind's (the grouped kind's cute:sm100 kernels compile here too; tests/grouped/test_cute_sm100.py reads
# their SASS: TMA loads, predicated vector stores)
DENSE = {name for name in CATALOGUE if SPECS[name].spec.kind == "gemm"}

EVERY_OP = [
    {"op": "bias", "along": "m", "dtype": "bf16", "name": "bias_m"},
    {"op": "bias", "along": "n", "dtype": "f32", "name": "bias_n"},
    {"op": "scale", "by": "scalar"},
    {"op": "scale", "by": "scalar", "value": 0.5},
    {"op": "scale", "by": "row"},
    {"op": "scale", "by": "col"},
    {"op": "scale", "by": "rowcol"},
    {"op": "activation", "fn": "gelu"},
    {"op": "activation", "fn": "silu"},
    {"op": "residual", "dtype": "bf16", "beta": 0.5},
    {"op": "clamp", "min": -4.0, "max": 4.0},
    {"op": "cast", "dtype": "f16"},
]


def tma_boxes_per_stage(spec) -> int:
    """UTMALDG instructions one load site per operand issues per stage: one per 128 bytes of the box's
    contiguous extent (the 128-byte swizzle bounds a box's inner dimension; PTX / the Driver API's
    cuTensorMapEncodeTiled), i.e. 1 + 1 for the K-major tiles the CUTLASS reference loads."""
    t = spec.tile
    pair = 2 if spec.cute.two_cta else 1

    def boxes(major: str, rows: int, dtype) -> int:
        return math.ceil((t.k if major == "k" else rows) * dtype.bytes / 128)

    return boxes(spec.a.major, t.m, spec.a.dtype) + boxes(spec.b.major, t.n // pair, spec.b.dtype)


def run_cli(*args: str, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "SPECGEN_CUTE_CACHE": str(cache)}
    return subprocess.run([sys.executable, "-m", "specgen", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    cache = tmp_path_factory.mktemp("cute-sm100-cache")
    proc = run_cli("compile", "--target", "cute:sm100", "--sass", "--json", cache=cache)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def _config_spec(row: dict):
    """The effective spec a compiled row was built from (its variant's, where it is one)."""
    name, _, rest = row["kernel"].partition("[variant ")
    ls = SPECS[name]
    variant = int(rest.rstrip("]")) if rest else None
    return ls.spec.for_target(SM100, variant) if variant is not None else ls.spec.for_target(SM100)


def test_every_catalogue_cute_sm100_config_compiles_with_the_plans_smem_and_tmem(compiled):
    assert {r["kernel"] for r in compiled if "[" not in r["kernel"]} == CATALOGUE
    assert len(CATALOGUE) >= 7
    for r in compiled:
        assert not r["error"], r
        assert r["target"] == "cute:sm100"
        assert r["cpu_seconds"] > 0, r  # reported (a budget belongs in a benchmark, not a test)
        assert r["compiler_smem"] == r["plan_smem"] <= 232448, r
        assert r["resources"]["tmem_columns"] == r["resources"]["plan_tmem_columns"] > 0, r


def test_catalogue_configs_are_2cta_with_a_1cta_variant_and_deep_fp8_staging():
    for name in DENSE - {"gemm_small_bf16"}:
        spec = SPECS[name].spec
        default = resolve(spec, SM100)
        assert default.spec.cute.two_cta and default.spec.cluster.m == 2, name
        assert default.spec.tile.m == 128 and default.spec.tile.n in (128, 256), name  # 256x128 or 256x256 MMA
        assert any(not v.spec.cute.two_cta for v in default.variants), name
    fp8 = resolve(SPECS["gemm_fp8_rowwise"].spec, SM100)
    assert (fp8.spec.tile.m, fp8.spec.tile.n, fp8.spec.tile.k) == (128, 128, 128)  # 256x128x128 per pair
    assert fp8.ab_stages == 8  # `auto`: as deep as SMEM allows, no bf16-tuned cap


def test_sass_one_load_site_per_operand_tcgen05_mma_tma_store_and_no_spills(compiled):
    for r in (r for r in compiled if r["kernel"].split("[")[0] in DENSE):
        sass, spec = r["sass"], _config_spec(r)
        assert sass["UTMALDG"] == tma_boxes_per_stage(spec), r
        mma, other = ("UTCQMMA", "UTCHMMA") if spec.a.dtype.bytes == 1 else ("UTCHMMA", "UTCQMMA")
        assert sass[mma] > 0 and sass[other] == 0, r
        assert sass["UTMASTG"] > 0, r
        assert sass["LDL"] == 0 and sass["STL"] == 0, r
        assert r["resources"]["registers"] > 0 and r["resources"]["frame_bytes"] == 0, r


def test_generated_source_has_one_rolled_producer_loop_with_one_load_site_per_operand():
    for name in DENSE:
        text = (ROOT / "generated" / "cute" / f"{name}_sm100.py").read_text()
        assert text.count("cute.copy(tma_a,") == 1 and text.count("cute.copy(tma_b,") == 1, name
        producer = text[text.index("if warp == TMA_WARP:\n        # ====="):text.index("if warp == MMA_WARP:")]
        assert producer.count("for _k in cutlass.range(k_tiles, unroll=1):") == 1, name
        loop = producer[producer.index("for _k in"):]
        assert "is_leader" not in loop and "cluster_crd" not in loop, name  # predicates hoisted
        assert "range_constexpr" not in producer, name  # no unrolled prologue


def test_tmem_alloc_columns_reads_the_ptx():
    ptx = "\tmov.b32 \t%r192, 256;\n\ttcgen05.alloc.cta_group::2.sync.aligned.shared::cta.b32 \t[%r4+104], %r192;\n"
    assert tmem_alloc_columns(ptx) == 256
    assert tmem_alloc_columns("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r4], 128;") == 128
    assert tmem_alloc_columns("no alloc") is None


def loaded(spec: dict):
    (ls,) = load_text(json.dumps({"kernels": [spec]}), f"<test:{spec['name']}>", ".json")
    return ls


def render_and_import(spec: dict, tmp_path: Path):
    module, text = load_target_module(spec, "cute:sm100", tmp_path, "_specgen_cute_sm100_test_")
    assert Path(module.__file__).name == f"{spec['name']}_sm100.py"
    return module, text


def test_modules_serve_sm100_only():
    spec = loaded({**MINIMAL_SPEC, "targets": ["cute:sm90", "cute:sm100"]}).spec
    assert DESIGN.modules(spec, [SM90, SM100]) == {"cute/k_sm100.py": [SM100]}
    assert DESIGN.modules(spec, [SM90]) == {}


def test_plan_tmem_and_epilogue_tile_follow_the_cutlass_helpers():
    def spec(m, n, two, out="bf16"):
        return loaded({**MINIMAL_SPEC, "tile": {"m": m, "n": n, "k": 64}, "out": {"dtype": out},
                       "cluster": {"m": 2 if two else 1, "n": 1}, "cute": {"two_cta": two}}).spec
    assert tmem_columns(spec(128, 256, True)) == 256 and tmem_columns(spec(64, 256, True)) == 128
    assert tmem_columns(spec(64, 128, False)) == 128
    assert plan_tmem(256, 2) == 512 and plan_tmem(96, 2) == 256 and plan_tmem(8, 1) == 32
    assert epilogue_tile(spec(128, 256, True)) == (128, 32)
    assert epilogue_tile(spec(64, 128, False)) == (64, 64)
    assert epilogue_tile(spec(64, 128, True)) == (64, 64)  # 2x2 epilogue warps over a 64-row CTA tile


# every epilogue op (vectors gathered per subtile, a residual read at its subtile), each A/B major, fp8
# e4m3 / e5m2, 1-CTA and 2-CTA, clusters multicasting A (cluster.n = 2) and B (a 4x1 cluster of pairs)
SHAPES = [
    ("ops_2cta", {"epilogue": EVERY_OP, "tile": {"m": 128, "n": 128, "k": 64}, "cluster": {"m": 2, "n": 1},
                  "cute": {"two_cta": True}, "a": {"dtype": "bf16", "major": "mn"}, "b": {"dtype": "bf16", "major": "mn"}}),
    ("ops_1cta_mcast", {"epilogue": EVERY_OP, "tile": {"m": 128, "n": 64, "k": 64}, "cluster": {"m": 1, "n": 2},
                        "batch": True, "schedule": {"persistent": True, "group_m": 8, "raster": "along_m"}}),
    ("e5m2_mn", {"a": {"dtype": "fp8_e5m2", "major": "mn"}, "b": {"dtype": "fp8_e5m2", "major": "mn"},
                 "epilogue": [{"op": "scale", "by": "rowcol"}], "tile": {"m": 128, "n": 128, "k": 128},
                 "cluster": {"m": 4, "n": 1}, "cute": {"two_cta": True}}),
    ("e4m3_m64", {"a": {"dtype": "fp8_e4m3", "major": "k"}, "b": {"dtype": "fp8_e4m3", "major": "k"},
                  "tile": {"m": 64, "n": 128, "k": 128}, "cluster": {"m": 2, "n": 2}, "cute": {"two_cta": True}}),
]


@pytest.mark.parametrize(("name", "changes"), SHAPES, ids=[s[0] for s in SHAPES])
def test_shapes_and_every_op_compile_spill_free_with_the_plans_smem_and_tmem(name, changes, tmp_path):
    spec = {**MINIMAL_SPEC, "name": name, "targets": ["cute:sm100"], "out": {"dtype": "bf16"}, **changes}
    module, text = render_and_import(spec, tmp_path)
    (r,) = compile_module(module, target_info(SM100), sass=True, fill_cache=False)
    assert not r.error, r.error
    assert r.compiler_smem == r.plan_smem, r
    assert r.resources["tmem_columns"] == r.resources["plan_tmem_columns"], r
    assert r.sass["UTMALDG"] == tma_boxes_per_stage(loaded(spec).spec), r.sass
    assert r.sass["LDL"] == 0 and r.sass["STL"] == 0, r.sass
    assert r.sass["UTCQMMA" if loaded(spec).spec.a.dtype.bytes == 1 else "UTCHMMA"] > 0, r.sass


def test_smem_budget_counts_the_epilogue_staging_this_template_allocates():
    """SMEM001 over this design's `memory`: 7 A/B stages of a 128x128x64 bf16 tile (7 x 32768 B + 2048 B
    of barriers and alignment pad) would fit the 232448 B per block alone; the two 128x32 bf16 epilogue
    subtiles (16384 B) the template stages beside them do not; 6 stages do."""
    from specgen.check import check_spec

    def smem_errors(stages: int) -> list:
        spec = {**MINIMAL_SPEC, "name": "budget", "targets": ["cute:sm100"], "tile": {"m": 128, "n": 128, "k": 64},
                "pipeline": {"ab_stages": stages}}
        return [d for d in check_spec(loaded(spec)) if d.rule == "SMEM001" and d.severity == "error"]

    r = resolve(loaded({**MINIMAL_SPEC, "name": "budget", "targets": ["cute:sm100"], "tile": {"m": 128, "n": 128, "k": 64},
                        "pipeline": {"ab_stages": 7}}).spec, SM100)
    assert r.budget.epilogue_bytes == 2 * 128 * 32 * 2 and r.budget.reserve == 2048
    assert r.budget.total - r.budget.epilogue_bytes <= 232448 < r.budget.total
    assert smem_errors(6) == []
    (d,) = smem_errors(7)
    assert "epilogue 16384" in d.message, d.message


def test_the_jax_entrys_xla_abi_kernel_compiles_for_sm100a(tmp_path):
    """The JAX entry (shared templates/gemm/cute/jax_host.jinja) of an sm100 module: its XLA-ABI kernel compiles
    for sm_100a with the SM count passed as a constant (148, no device to ask): TMA, UTCQMMA, no spills.
    (tests/backends/cute/test_cute_jax.py traces every generated module's entry, the sm100 ones included.)"""
    from specgen.compile import load_rendered
    from specgen.kinds.gemm.designs.cubin import sass_counts
    from specgen.kinds.gemm.designs.cute_sm100.compile import SASS_OPS

    module = load_rendered(ROOT / "generated" / "cute" / "gemm_fp8_rowwise_sm100.py", "_specgen_sm100_jax_test")
    compiled = module._jax_entry().compile(None, (), 148, f"--keep-cubin --dump-dir {tmp_path}")
    cubin = compiled.artifacts.CUBIN
    if isinstance(cubin, bytes):
        (tmp_path / "k.cubin").write_bytes(cubin)
        cubin = tmp_path / "k.cubin"
    counts, local = sass_counts(str(cubin), SASS_OPS)
    assert counts["UTMALDG"] > 0 and counts["UTMASTG"] > 0 and counts["UTCQMMA"] > 0
    assert counts["LDL"] == counts["STL"] == 0 and local["spill_store_bytes"] == 0
