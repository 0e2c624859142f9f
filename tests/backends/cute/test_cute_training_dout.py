"""The CuTe sm90 recompute GEMM's dOut ring (session 34; templates/gemm/cute/dout_sm90.jinja, the plan's `dout_ring` in
specgen/kinds/gemm/designs/cute_sm90/training.py) on this CPU machine. No GPU runs here (numerics:
tests/gpu/test_training_cute_gpu.py and test_training_cute_gated_gpu.py), so:

- the plan counts the ring to the byte (2 mbarriers and a 1024-aligned subtile a buffer, + 2 ordering the ping-pong
  warpgroups), as many buffers as the room the rest leaves up to 4, at least 2; an `auto` A/B depth drops where those 2
  do not fit beside it; check refuses an explicit depth that no longer fits (SMEM001, with the numbers and the depth
  that fits); only the recompute GEMM that reads dOut has one (dgrad, wgrad, an fp8 forward's and the other chains'
  recompute none);
- an act recompute (relu, no bias: no other global load in its epilogue) compiles for sm_90a on both schedules
  (ping-pong 128x128, one warpgroup a tile; cooperative 128x256, two warpgroups a tile) with the plan's SMEM to the
  byte and no spills: its SASS has one TMA load (UTMALDG) more than the plain GEMM's per epilogue subtile of the tile
  (the loader warp's, unrolled) and no global load (LDG) at all, dOut read from SMEM (LDS); the plain GEMM traced with
  the ping-pong recompute's config (a benchmark's, gpu/bench_recompute_schedule.py) allocates the same SMEM and loads
  no dOut."""

from __future__ import annotations

import json

import pytest
from backends.cute.training_compiles import INFO
from kernels import load_target_module

from specgen.check import check_all
from specgen.kinds.gemm.designs.cute_sm90.design import DESIGN
from specgen.kinds.gemm.designs.cute_sm90.smem import row_smem
from specgen.kinds.gemm.designs.cute_sm90.training import DOUT_STAGES
from specgen.resolve import resolve
from specgen.spec.load import load_text
from specgen.spec.models import parse_target

TARGET = parse_target("cute:sm90")
CAPACITY = 232448  # an H100 / H200 block's SMEM
TILE = {"m": 128, "n": 128, "k": 64}
# the two schedules the design renders for the recompute GEMM (training.pre), each compiled below
FORMS = {"pingpong": {"tile": TILE, "schedule": "pingpong"}, "coop256": {"tile": {"m": 128, "n": 256, "k": 64}}}


def spec(name: str, pre: dict, epilogue: list | None = None, **more) -> dict:
    return {"name": name, "kind": "gemm", "a": {"dtype": "bf16", "major": "k"}, "b": {"dtype": "bf16", "major": "k"},
            "out": {"dtype": "bf16"}, "targets": ["cute:sm90"], "tile": TILE, "schedule": {"persistent": True},
            "epilogue": epilogue if epilogue is not None else [{"op": "activation", "fn": "relu"}],
            "training": {"save": "recompute", "pre": pre, "dgrad": {"tile": pre.get("tile", TILE)}}, **more}


def load(s: dict):
    (ls,) = load_text(json.dumps({"kernels": [s]}), f"<test:{s['name']}>", ".json")
    return ls


def gemms(ls):
    r = resolve(ls.spec, TARGET)
    return DESIGN.plan(ls, [TARGET], {"cute:sm90": r}).training.gemms, {c.companion: c for c in r.companions}


def test_the_plan_counts_the_ring_to_the_byte_and_only_the_recompute_that_reads_dout_has_one() -> None:
    for name, pre in FORMS.items():
        g, by_role = gemms(load(spec(name, pre)))
        rec, dgrad = g["recompute"].config, g["dgrad"].config  # dgrad: the same tile and stages, no ring
        assert rec.dout_stages == DOUT_STAGES[1] if name == "pingpong" else rec.dout_stages == DOUT_STAGES[0], (name, rec)
        subtile = rec.epi_m * rec.epi_n * 2
        assert rec.smem_bytes == by_role["recompute"].budget.total  # what SMEM001 checks
        assert "dOut subtiles" in rec.smem_breakdown and "dOut" not in dgrad.smem_breakdown
        # beside the plain GEMM's struct: the ring's buffers (its mbarriers inside the same 1024-byte barrier block);
        # ping-pong keeps two epilogue sets (the warpgroups') where cooperative dgrad has one at this tile too
        assert rec.ab_stages == dgrad.ab_stages and dgrad.dout_stages == 0, name
        epi = (2 if rec.pingpong else 1) * rec.epi_stages * subtile - (2 if dgrad.pingpong else 1) * dgrad.epi_stages * dgrad.epi_m * dgrad.epi_n * 2
        assert rec.smem_bytes - dgrad.smem_bytes == rec.dout_stages * subtile + epi, (name, rec.smem_breakdown, dgrad.smem_breakdown)
        assert rec.smem_bytes <= CAPACITY and CAPACITY - rec.smem_bytes < subtile or rec.dout_stages == DOUT_STAGES[1]
        # a Config row's own struct (`row_smem`: what bench/cute_train_tiles.py sizes its candidate rows with) is the plan's
        assert [row_smem(c, CAPACITY).total for c in (rec, dgrad)] == [rec.smem_bytes, dgrad.smem_bytes], name
    # an fp8 forward's and another chain's recompute store pre (no dOut read): no ring
    chain = [{"op": "bias"}, {"op": "scale", "by": "scalar"}, {"op": "activation", "fn": "silu"}]
    g, _ = gemms(load(spec("cdr_chain", FORMS["pingpong"], chain)))
    assert all(x.config.dout_stages == 0 for x in g.values())


def test_auto_stages_drop_for_the_ring_and_check_refuses_an_explicit_depth_that_no_longer_fits() -> None:
    # 128x192 (two warpgroups, 128x32 subtiles): 5 A/B stages of 40960 B fit the plain GEMM (223232 B), not beside 2
    # of the ring's 8192-byte subtiles (239616 B)
    pre = {"tile": {"m": 128, "n": 192, "k": 64}}
    g, _ = gemms(load(spec("cdr_auto", pre)))
    assert (g["dgrad"].config.ab_stages, g["recompute"].config.ab_stages) == (5, 4)
    assert g["recompute"].config.dout_stages == DOUT_STAGES[1]  # 4 A/B stages leave room for the most
    ls = load(spec("cdr_five", {**pre, "ab_stages": 5}))
    errors = [d for d in check_all([ls]) if d.severity == "error"]
    assert [(d.rule, "backward recompute" in str(d)) for d in errors] == [("SMEM001", True)], errors
    assert "239616 B" in str(errors[0]) and "dOut subtiles 16384" in str(errors[0]) and "ab_stages = 4 fits" in str(errors[0])


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """{form: (module, {"recompute" | "plain": CompileResult})}: the recompute GEMM, and on ping-pong the plain GEMM at
    its config too (one compile fewer: the cooperative form's A/B loads are the same count, cluster 1x1)."""
    from specgen.kinds.gemm.designs.cute_sm90.compile import SASS_OPS, compile_config

    folder = tmp_path_factory.mktemp("cute_dout")
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECGEN_CUTE_CACHE", str(folder / "cache"))
        mp.setenv("CUTE_DSL_ARCH", "sm_90a")
        for name, pre in FORMS.items():
            module, _ = load_target_module(spec(f"cdr_{name}", pre), "cute:sm90", folder, f"_specgen_test_cute_dout_{name}_")
            cfg = module.TRAIN_CONFIGS["recompute"]
            module.TRAIN_CONFIGS["plain"] = cfg._replace(role="dgrad")  # the GEMM it rides on, at its config
            out[name] = (module, {key: compile_config(module._train_launcher, name, key, INFO, cfg.smem_bytes, True, False,
                                                      ops=(*SASS_OPS, "LDG", "LDS", "FENCE"))
                                  for key in ("recompute", "plain")[:2 if name == "pingpong" else 1]})
    return out


def test_the_recompute_loads_dout_by_tma_and_reads_it_from_smem_on_both_schedules(compiled) -> None:
    for name, (module, results) in compiled.items():
        cfg = module.TRAIN_CONFIGS["recompute"]
        assert cfg.pingpong is (name == "pingpong") and cfg.mma_warpgroups == (1 if name == "pingpong" else 2), cfg
        for key, r in results.items():
            assert not r.error, (name, key, r)
            assert r.compiler_smem == r.plan_smem == cfg.smem_bytes, (name, key, r)  # the ring allocated either way
            assert r.sass["LDL"] == 0 and r.sass["STL"] == 0, (name, key, r.sass)
        rec, plain = results["recompute"].sass, compiled["pingpong"][1]["plain"].sass
        subtiles = (cfg.tile_m // cfg.epi_m) * (cfg.tile_n // cfg.epi_n)
        assert rec["UTMALDG"] == plain["UTMALDG"] + subtiles, (name, rec, plain)  # the loader warp's, one a subtile
        assert rec["LDG"] == 0 and plain["LDG"] == 0, (name, rec)  # no global load of dOut (relu, no bias: none else)
        assert rec["LDS"] > 0 and plain["LDS"] == 0, (name, rec, plain)  # dOut's elements read from the ring
        assert rec["UTMASTG"] == plain["UTMASTG"], (name, rec, plain)  # G's subtiles stored as the product's
        assert name != "pingpong" or rec["HGMMA"] == plain["HGMMA"], (name, rec, plain)  # the same mainloop
        # a proxy fence after each subtile's reads, before its buffer is freed for the next TMA write: without it ptxas
        # left a loaded register's use (its LDS's completion) after the arrive, and G took a few elements of the next
        # subtile's dOut (the interleaved GeGLU recompute, session 35)
        assert name != "pingpong" or rec["FENCE"] >= plain["FENCE"] + subtiles, (name, rec, plain)
