"""The grouped kind beside its kernels: its spec model's refusals, check and render on a grouped spec, its
problem for bench and tune, and the run-time helpers its entries use to choose 64-bit indexing."""

from __future__ import annotations

import json

import pytest
import torch

from specgen.bench.problem import ShapeError
from specgen.check import check_all
from specgen.kinds.grouped import problem
from specgen.kinds.grouped.spec import GroupedSpec
from specgen.kinds.grouped.testing.specs import BASE, spec
from specgen.runtime.grouped import INT32_SPAN, last_offset, needs_int64
from specgen.spec.load import SpecError, load_text


def load(**changes: object):
    s = {**json.loads(json.dumps(BASE)), "name": "g_kind", **changes}
    return load_text(json.dumps({"kernels": [s]}), "<test>", ".json")


def refusal(**changes: object) -> str:
    with pytest.raises(SpecError) as info:
        load(**changes)
    (issue,) = info.value.issues
    return f"{issue.path}: {issue.message}"


# --- the spec ---------------------------------------------------------------------------------------------
def test_a_grouped_spec_loads_with_the_gemm_sections_and_its_defaults():
    (ls,) = load()
    s = ls.spec
    assert isinstance(s, GroupedSpec) and s.kind == "grouped"
    assert (s.groups.index, s.groups.tail, s.schedule.persistent) == ("offs", "untouched", True)
    assert (s.tile.m, s.pipeline.ab_stages) == (16, "auto")


@pytest.mark.parametrize(("changes", "says"), [
    ({"epilogue": [{"op": "scale", "by": "rowcol"}, {"op": "scale", "by": "rowcol"}]},
     "two epilogue arguments are named 'scale_a'"),
    ({"epilogue": [{"op": "scale", "by": "rowcol", "name": "s"}]}, "by = 'rowcol' takes two arguments"),
    ({"epilogue": [{"op": "bias", "name": "scale_b"}, {"op": "scale", "by": "rowcol"}]},
     "two epilogue arguments are named 'scale_b'"),
    ({"epilogue": [{"op": "bias", "name": "offs"}]}, "'offs'"),
    ({"epilogue": [{"op": "scale", "by": "row", "name": "group_sizes"}]}, "'group_sizes'"),
    ({"epilogue": [{"op": "bias", "along": "n"}]}, "along"),  # a grouped bias is per group: no `along`
    ({"epilogue": [{"op": "residual", "dtype": "f16"}]}, "residual"),
    ({"groups": {"index": "cumsum"}}, "groups.index"),
    ({"groups": {"tail": "garbage"}}, "groups.tail"),
])
def test_the_spec_refuses_what_the_kind_does_not_mean(changes, says):
    assert says in refusal(**changes)


def test_every_target_is_served_and_an_unserved_one_would_be_refused_when_the_spec_loads(monkeypatch):
    """Every target has a grouped design now (cute:sm100 the last, kinds/grouped/designs/cute_sm100); the spec
    still refuses a target none serves, naming those that are served (shown by taking cute:sm100 off the list)."""
    from specgen.kinds.grouped import spec as grouped_spec
    from specgen.targets import TARGETS

    assert tuple(TARGETS) == grouped_spec.SERVED_TARGETS
    monkeypatch.setattr(grouped_spec, "SERVED_TARGETS", tuple(t for t in TARGETS if t != "cute:sm100"))
    assert ("target 'cute:sm100': no grouped design serves it yet (the grouped designs serve triton:sm90, "
            "triton:sm100, cute:sm90, pallas:tpu_v5e") in refusal(targets=["cute:sm100"])


def test_column_scales_are_per_group():
    """A column scale is each group's own, (G, N), and fp8 rowwise scaling takes torch._scaled_grouped_mm's pair:
    scale_a (M,), scale_b (G, N)."""
    (ls,) = load(epilogue=[{"op": "scale", "by": "rowcol"}, {"op": "scale", "by": "col", "name": "w"}])
    assert [(a.name, a.shape, a.dtype) for a in ls.spec.runtime_args()] == [
        ("scale_a", "vec_m", "f32"), ("scale_b", "group_n", "f32"), ("w", "group_n", "f32")]


def test_check_and_render_a_grouped_spec(tmp_path):
    from specgen.render.catalogue import render_modules

    (ls,) = load(a={"dtype": "f16", "major": "mn"}, schedule={"persistent": False})
    found = {(d.rule, d.severity, d.target) for d in check_all([ls]) if d.rule.startswith("GRP00")}
    assert found == {(r, sev, t) for t in ("triton:sm90", "triton:sm100")
                     for r, sev in (("GRP001", "error"), ("GRP002", "warning"))}
    (ok,) = load()
    assert [d for d in check_all([ok]) if d.severity == "error"] == []
    ((path, text),) = render_modules(ok, ok.spec.targets).items()
    assert path == "triton/g_kind.py" and "def g_kind(" in text and "_CONSTEXPRS_64" in text
    compile(text, path, "exec")


def test_check_notes_say_why_the_other_targets_cannot_serve_the_spec():
    (ls,) = load()  # a 16x16x16 tile: below every wgmma and tcgen05 M
    notes = {d.target: d.message for d in check_all([ls], notes=True) if d.rule == "TARGET"}
    assert notes["cute:sm100"] == "cannot serve: MMA002 MMA M = 16 (tile.m 16) is not one of (64, 128) for cta_group::1"


def test_each_design_serves_the_mma_families_its_options_declare():
    """The spec refuses unserved targets from the options modules' MMA families (it imports no design): they
    must be the designs' own keys (the `pallas` section serves the TPU design and the Mosaic GPU one, which has
    no options module of its own)."""
    from importlib import import_module

    from specgen.kinds import grouped
    from specgen.kinds.grouped.spec import DESIGN_OPTIONS

    keys = {(b, m) for package in grouped.DESIGN_PACKAGES for _, b, m in import_module(f"{package}.design").DESIGN.keys}
    assert keys == {(options.BACKEND, m) for options in DESIGN_OPTIONS for m in options.MMA}


# --- the problem ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dist", [0, 1, 2])
def test_group_sizes_sum_to_the_rows_and_follow_the_distribution(dist):
    shape = problem.Shape(32, 128, 4096, 7168, dist)
    sizes = problem.group_sizes(shape, seed=3)
    assert len(sizes) == 32 and sum(sizes) == 32 * 128 and min(sizes) >= 0
    assert sizes == problem.group_sizes(shape, seed=3)  # seeded
    if dist == 0:
        assert set(sizes) == {128}
    elif dist == 1:
        assert max(sizes) > 3 * 128 and sizes != problem.group_sizes(shape, seed=4)  # skewed
    else:
        assert sizes[3::4] == [0] * 8 and min(sizes[0::4]) > 0


def test_shapes_parse_print_and_count():
    (even, skewed) = problem.parse_shapes("32x128x4096x7168, 8x1024x14336x4096:skewed")
    assert (str(even), str(skewed)) == ("32x128x4096x7168", "8x1024x14336x4096:skewed")
    assert problem.shape(tuple(skewed)) == skewed
    assert problem.flops(even) == 2 * 32 * 128 * 4096 * 7168
    s = GroupedSpec.model_validate(spec("g_bytes", epilogue=[{"op": "bias", "dtype": "f16"}]))
    decode = problem.Shape(32, 2, 4096, 7168)
    weights = 32 * 7168 * 4096 * 2
    assert problem.bytes_moved(s, decode) == 64 * 7168 * 2 + weights + 64 * 4096 * 2 + 4 * 32 + 32 * 4096 * 2
    assert problem.record_shape(decode) == ((64, 4096, 7168), 32)
    for bad in ("32x128x4096", "32x128x4096x7168:uniform", "0x1x2x3", "x", "65536x65536x1x1"):
        with pytest.raises(ShapeError):
            problem.parse_shapes(bad)


# --- 64-bit indexing: the launcher's choice, on each side of 2^31 -----------------------------------------------
def test_64_bit_indexing_starts_where_an_offset_reaches_2_to_the_31():
    fits = torch.empty((2**20, 2**11), device="meta")  # offsets 0 .. 2^31 - 1
    past = torch.empty((2**20 + 1, 2**11), device="meta")
    assert last_offset(fits) == INT32_SPAN - 1 and not needs_int64(fits)
    assert last_offset(past) >= INT32_SPAN and needs_int64(fits, past)
    # B's group stride: 512 groups of a (2048, 2048) weight end at offset 2^31 - 1; a 513th passes it
    b = torch.empty((513, 2048, 2048), device="meta").transpose(-1, -2)
    assert needs_int64(b) and not needs_int64(b[:512])
    assert last_offset(torch.empty((0, 5), device="meta")) == 0


F32 = {"a": {"dtype": "f32", "major": "k"}, "b": {"dtype": "f32", "major": "k"}, "out": {"dtype": "f32"}}
# e5m2, which torch._scaled_grouped_mm refuses: torch._grouped_mm on bf16 copies (it runs on the CPU), the leading
# rowwise scales after it, then a bias and a per-group column scale in eager torch, within bf16's rounding
E5M2 = {"a": {"dtype": "fp8_e5m2", "major": "k"}, "b": {"dtype": "fp8_e5m2", "major": "k"}, "out": {"dtype": "bf16"},
        "tile": {"m": 16, "n": 16, "k": 32}}
PEER_CASES = [
    (spec(f"g_peer_{index}", **F32, groups={"index": index}, epilogue=[
        {"op": "bias", "dtype": "f32"}, {"op": "scale", "by": "row"}, {"op": "activation", "fn": "silu"}]),
     "torch._grouped_mm + eager epilogue", 1e-5) for index in ("offs", "sizes")
] + [(spec("g_peer_e5m2", **E5M2, epilogue=[{"op": "scale", "by": "rowcol"}, {"op": "bias", "dtype": "f32"},
                                            {"op": "scale", "by": "col"}]),
      "torch._grouped_mm on bf16 copies + eager epilogue", 2e-2)]


@pytest.mark.parametrize(("s", "name", "tol"), PEER_CASES, ids=[c[0]["name"] for c in PEER_CASES])
def test_the_peer_computes_what_the_spec_means_on_the_cpu(s, name, tol):
    """bench's peer (torch._grouped_mm, then the epilogue in eager torch, a per-group operand gathered to the rows)
    against the float64 per-group loop, with CPU tensors (its `inputs` are CUDA's)."""
    from specgen.kinds.grouped.testing.data import CASES, GroupedProblem
    from specgen.kinds.grouped.testing.reference import grouped

    model = GroupedSpec.model_validate(s)
    assert problem.peer_name(model, model.targets[0]) == name
    p = GroupedProblem(s, CASES["empty_middle_consecutive"], "peer")
    a, b, _ = p.operands()
    index = p.index()
    args = p.epilogue_args()
    got = problem.peer_call(model, model.targets[0], (a, b, index, *(v for _, v in args)))()
    want, written = grouped(s, a, b, index, dict(args))
    torch.testing.assert_close(got.double()[written], want[written], rtol=tol, atol=tol)


def test_size_variants_render_on_triton_and_are_refused_on_the_tpu():
    """The Triton and CuTe designs' launchers (and the Mosaic GPU design's jitted call) pick a variant by M; the TPU
    design renders one config a module (CFG003)."""
    (ls,) = load(targets=["triton:sm90", "pallas:tpu_v5e"],
                 variants=[{"when": {"m_max": 16}, "tile": {"m": 16, "n": 32, "k": 16}, "triton": {"swap_ab": True}}])
    refused = [d for d in check_all([ls]) if d.rule == "CFG003"]
    assert [(d.target, d.severity) for d in refused] == [("pallas:tpu_v5e", "error")]
    assert ("rendered by the Triton grouped, CuTe sm90 grouped, CuTe sm100 grouped and Pallas Mosaic GPU grouped designs "
            "only") in refused[0].message


def test_a_render_that_skipped_check_refuses_an_m_major_a():
    from specgen.render.catalogue import render_modules

    (ls,) = load(a={"dtype": "f16", "major": "mn"})
    with pytest.raises(ValueError, match="reads A K-major only"):
        render_modules(ls, ls.spec.targets)


def test_the_fp8_peer_passes_torchs_own_checks():
    """bench's fp8 peer is torch._scaled_grouped_mm (no CPU kernel: its meta function checks the call here): B as
    the transposed (G, N, K) weight, scale_a (M,), scale_b (G, N), a bf16 (M, N) result; an N-major B, which
    GRP102 refuses on sm90, torch refuses too."""
    s = GroupedSpec.model_validate(spec("g_fp8_peer", a={"dtype": "fp8_e4m3", "major": "k"},
                                        b={"dtype": "fp8_e4m3", "major": "k"}, out={"dtype": "bf16"},
                                        tile={"m": 16, "n": 16, "k": 32},
                                        epilogue=[{"op": "scale", "by": "rowcol"}, {"op": "activation", "fn": "silu"}]))
    assert problem.peer_name(s, s.targets[0]) == "torch._scaled_grouped_mm + eager epilogue"
    m, n, k, g = 40, 32, 64, 3
    a = torch.empty(m, k, dtype=torch.float8_e4m3fn, device="meta")
    b = torch.empty(g, n, k, dtype=torch.float8_e4m3fn, device="meta").transpose(-1, -2)
    rest = (torch.empty(g, dtype=torch.int32, device="meta"), torch.empty(m, device="meta"), torch.empty(g, n, device="meta"))
    out = problem.peer_call(s, s.targets[0], (a, b, *rest))()
    assert (out.shape, out.dtype) == ((m, n), torch.bfloat16)
    with pytest.raises(RuntimeError, match="mat_b tensor to be column major"):
        problem.peer_call(s, s.targets[0], (a, b.contiguous(), *rest))()
    plain = GroupedSpec.model_validate({**s.model_dump(mode="json"), "epilogue": []})
    assert problem.peer_name(plain, s.targets[0]) == "torch._scaled_grouped_mm"  # scales of ones
