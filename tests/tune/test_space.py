"""Enumeration and pruning agree with `specgen check`: every kept candidate, written into the spec file,
checks clean; every rejected one fails check with the errors the tuner recorded."""

from __future__ import annotations

from pathlib import Path

import pytest

from specgen.check import check_spec
from specgen.kinds.gemm.spec import GemmSpec
from specgen.spec.load import load_file
from specgen.spec.models import parse_target
from specgen.tune.space import SpaceError, candidate_spec, edits, enumerate_candidates, parse_knobs
from specgen.tune.writeback import write_back


@pytest.mark.parametrize(("target", "slot"), [("triton:sm90", None), ("cute:sm90", None), ("pallas:gpu_sm90", None),
                                              ("triton:sm90", 2), ("pallas:gpu_sm90", 0), ("cute:sm90", 0)])
def test_pruning_agrees_with_check(spec_copy, target: str, slot: int | None, tmp_path: Path) -> None:
    """Slot 0 of cute:sm90 serves M <= 16: its space sweeps swap_ab with 16- and 32-row tiles, which check
    refuses unswapped (MMA001). Under the suite's --no-compile (tests/conftest.py) check and tune keep the
    model's near-boundary refusals (with the compiler, both leave them to it: test_shared_verdicts.py)."""
    path = spec_copy()
    loaded = load_file(path)[0]
    c = enumerate_candidates(loaded, parse_target(target), slot)
    assert c.kept[0] == c.incumbent  # the incumbent is always a candidate, first
    assert c.kept and c.rejected, "the design's space should straddle the envelope on this spec"
    assert len(c.kept) + len(c.rejected) == len({str(sorted(x.items())) for x in c.kept + [r for r, _ in c.rejected]})
    for config in c.kept[:6]:  # written through the file writer, loaded back, checked: no error
        out = tmp_path / f"kept{len(config)}.toml"
        out.write_text(path.read_text())
        write_back(out, 0, edits(loaded.spec, parse_target(target), slot, config), [])
        assert not [d for d in check_spec(load_file(out)[0], settle="analytic") if d.severity == "error"], config
    for config, errors in c.rejected:
        again = [d for d in check_spec(candidate_spec(loaded, parse_target(target), slot, config), settle="analytic")
                 if d.severity == "error"]
        assert again and {d.rule for d in again} == {d.rule for d in errors}


def test_shared_tile_is_written_for_the_modules_targets(spec_copy) -> None:
    """Triton's sm90 and sm100 share one module and so one tile (CFG001): a tile goes to both tables."""
    loaded = load_file(spec_copy())[0]
    e = edits(loaded.spec, parse_target("triton:sm90"), None, {"tile.m": 128, "tile.n": 128, "tile.k": 64,
                                                               "triton.num_warps": 4})
    paths = {p for p, _ in e}
    assert ("per_target", "triton:sm90", "tile") in paths and ("per_target", "triton:sm100", "tile") in paths
    assert ("per_target", "triton:sm90", "triton", "num_warps") in paths
    assert ("per_target", "triton:sm100", "triton", "num_warps") not in paths  # warps are per compute capability


@pytest.mark.parametrize(("target", "config"), [
    # the session-10 tune's winner: every CuTe variant that left its schedule or cluster to the default
    # (M <= 64 and M <= 128 swapped, N <= 4096) ran ping-pong in 2x1 clusters after the default was written
    ("cute:sm90", {"tile.m": 128, "tile.n": 192, "tile.k": 64, "cluster.m": 2, "cute.schedule": "pingpong"}),
    # Triton's variants are the kernel's own list, shared by both Triton targets: pinning copies it first
    ("triton:sm90", {"tile.m": 128, "tile.n": 128, "tile.k": 64, "triton.num_warps": 4, "pipeline.ab_stages": 3}),
])
def test_a_new_default_leaves_every_variant_as_it_was(spec_copy, target: str, config: dict, tmp_path: Path) -> None:
    path = spec_copy()
    before = load_file(path)[0].spec
    write_back(path, 0, edits(before, parse_target(target), None, config), [])
    after = load_file(path)[0].spec
    for t in before.targets:
        assert len(after.variants_on(t)) == len(before.variants_on(t))
        for i in range(len(before.variants_on(t))):
            assert after.for_target(t, i).model_dump() == before.for_target(t, i).model_dump(), (t, i)
    got = after.for_target(parse_target(target))
    assert {k: getattr(getattr(got, k.split(".")[0]), k.split(".")[1]) for k in config} == config
    assert not [d for d in check_spec(load_file(path)[0]) if d.severity == "error"]


def test_a_variant_that_reads_an_unset_field_is_not_silently_retuned(spec_copy) -> None:
    """`cute.mma_warpgroups` unset means "chosen by the tile": a variant cannot be pinned to it in a spec file."""
    spec = load_file(spec_copy())[0].spec
    with pytest.raises(SpaceError, match=r"variant \d reads cute.mma_warpgroups unset"):
        edits(spec, parse_target("cute:sm90"), None, {"cute.mma_warpgroups": 2})


def test_knob_parsing_errors_name_the_item() -> None:
    assert parse_knobs(["tile.n=128,256", "cute.schedule=pingpong"], GemmSpec) == {"tile.n": (128, 256),
                                                                         "cute.schedule": ("pingpong",)}
    assert parse_knobs(["cute.swap_ab=false,true"], GemmSpec) == {"cute.swap_ab": (False, True)}
    with pytest.raises(SpaceError, match="'tiles.n=1'"):
        parse_knobs(["tiles.n=1"], GemmSpec)
    with pytest.raises(SpaceError, match="'tile.n'"):
        parse_knobs(["tile.n"], GemmSpec)
