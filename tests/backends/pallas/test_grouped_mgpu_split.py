"""The grouped Mosaic GPU forward's split last wave (templates/grouped/pallas/mgpu_m.jinja; the module's
`_tail_splits`, `_tail_plan`, `_whole_tile`, `_split_part`) on a CPU machine: which K splits a shape admits; the two
loops' schedule over many (real visits, N tiles, CTAs) cases, evaluated by the module's own jnp functions (each
real tile once, whole or as S parts, the parts one a CTA after every whole tile, each part's semaphore and workspace
rows the ones its last part waits on and reads, the visits past the groups after the real tiles); the catalogue kernels lowered for
CUDA (jax's Python lowering, the compile hook's) with the split's S = 2 and S = 4 K loops, its semaphore signal
and wait, and SMEM equal to the plan's (the partials move between registers and GMEM: no SMEM), and without them
where K admits no split; the direct torch launch's program carrying the semaphores (zero-filled) and the
partials as the compiled kernel's own scratch. Numerics run on the GPU: tests/gpu/test_grouped_mgpu_split_gpu.py."""

from __future__ import annotations

import functools
import importlib
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specgen.kinds.gemm.designs.pallas.compile import mosaic_gpu_launch_smem
from specgen.runtime import mgpu_torch as mt


def module(name: str = "moe_bf16"):
    return importlib.import_module(f"generated.pallas.gpu_sm90.{name}")


def test_splits_take_whole_k_parts_of_two_steps_or_more():
    mod = module()
    cfg = mod.CONFIG  # tile_k 64, one wgmma group in flight
    assert mod.TAIL_SPLIT == 4
    assert mod._tail_splits(cfg, 14336, 132) == (2, 4)  # Mixtral down: 224 steps
    assert mod._tail_splits(cfg, 6 * 64, 132) == (2,)  # 6 steps: 4 does not divide them
    assert mod._tail_splits(cfg, 8 * 64 - 5, 132) == (2, 4)  # a K tail: 8 steps, the last part's last one short
    assert mod._tail_splits(cfg, 3 * 64, 132) == ()  # 3 steps: no part of two
    assert mod._tail_splits(cfg, 2 * 64, 132) == ()  # 2 steps: parts of one
    assert mod._tail_splits(cfg, 16 * 64, 3) == (2,)  # S <= the grid
    assert mod._tail_splits(cfg, 16 * 64, 1) == ()
    deep = cfg._replace(wgmma_in_flight=2)  # a part keeps more steps than the wgmma groups in flight
    assert mod._tail_splits(deep, 4 * 64, 132) == () and mod._tail_splits(deep, 6 * 64, 132) == (2,)


CASES = list(itertools.product((0, 1, 3, 9, 33, 70), (1, 2, 7, 56), (1, 3, 16, 132)))
LONGEST = (70 + 5) * 56  # the most whole-tile items of a case: 5 visits past the groups


@functools.partial(jax.jit, static_argnums=(0, 1))
def schedule(splits, cfg, real, n_tiles, programs):
    """`_tail_plan`, `_whole_tile` over items 0..LONGEST - 1 and `_split_part` over 0..131 (the kernel's own
    functions), traced once a split set and config: the case's values are arguments, so every case reuses it."""
    mod = module()
    plan = mod._tail_plan(real, n_tiles, programs, splits)
    tiles_real, full, items, parts = plan
    whole = mod._whole_tile(jnp.arange(LONGEST, dtype=jnp.int32), tiles_real, full, real, n_tiles, cfg)
    return plan, whole, mod._split_part(jnp.arange(132, dtype=jnp.int32), full, parts, real, n_tiles, cfg)


@pytest.mark.parametrize("splits", [(2, 4), (2,), ()], ids=str)
def test_the_schedule_runs_each_tile_once_and_splits_only_the_last_wave(splits):
    """The kernel's two loops over every case (the visits past the groups 0 or 5, both rasters): the whole tiles'
    loop (CTA c running items c, c + P, ..., plgpu.nd_loop, up to the static bound) runs each real (visit, N tile)
    but a split's once, then each spare visit's tiles once; the split loop (item j on CTA j) runs each split tile's
    S parts once, each part signalling the semaphore its last part waits on and its last part reading the
    workspace rows the others wrote."""
    split_cases = 0
    for (real, n_tiles, programs), spare_visits, raster in itertools.product(CASES, (0, 5), (0, 1)):
        visits = max(real + spare_visits, 1)
        used = real + spare_visits  # the metadata's storing visits: the serving ones, then the tail's
        programs = min(programs, visits * n_tiles)
        cfg = module().CONFIG._replace(raster_dim=raster, group_m=3)
        plan, whole, split = schedule(splits, cfg, jnp.int32(real), jnp.int32(n_tiles), jnp.int32(programs))
        tiles_real, full, items, parts = (int(x) for x in plan)
        case = (real, n_tiles, programs, splits)
        bound = visits * n_tiles
        t, vi, ni = (np.asarray(x)[:bound] for x in whole)
        live = t < used * n_tiles
        rem = tiles_real % programs
        fits = [s for s in splits if rem and rem * s <= programs]
        assert parts == (max(fits) if fits else 1), case  # the largest S that fits, else none
        assert full == tiles_real - (rem if fits else 0) and (not fits or full % programs == 0), case
        assert items == (rem * parts if fits else 0) and items <= programs, case
        split_cases += bool(fits)
        # the whole tiles' loop: the real tiles below `full` once, none of the split ones, then the spare visits
        assert sorted(t[t < tiles_real]) == list(range(full)), case
        pairs = sorted(zip(vi[t < tiles_real].tolist(), ni[t < tiles_real].tolist(), strict=True))
        st, part, svi, sni = (np.asarray(x)[:items] for x in split)
        pairs += sorted(set(zip(svi.tolist(), sni.tolist(), strict=True)))
        assert sorted(pairs) == [(v, n) for v in range(real) for n in range(n_tiles)], case
        spare = sorted(zip(vi[live & (t >= tiles_real)].tolist(), ni[live & (t >= tiles_real)].tolist(), strict=True))
        assert spare == [(v, n) for v in range(real, used) for n in range(n_tiles)], case
        assert (np.nonzero(t < tiles_real)[0] < full).all(), case  # the real ones first: no CTA idles among them
        if not fits:
            continue
        # the split loop: CTA j runs item j; each split tile's S parts once, on neighbouring CTAs
        assert sorted(st.tolist()) == sorted(list(range(full, tiles_real)) * parts), case
        for tile in range(full, tiles_real):
            ctas = np.nonzero(st == tile)[0]
            assert sorted(part[ctas]) == list(range(parts)), case
            last = ctas[part[ctas] == parts - 1][0]
            for c in ctas:  # each part signals its last part's semaphore; the last reads its workspace rows
                q = part[c]
                assert c - q + parts - 1 == last and last - (parts - 1) + q == c, case
    assert split_cases > (60 if splits else -1) and (split_cases == 0) == (splits == ())


def _lowered(mod, m: int, n: int, k: int, g: int) -> tuple[str, object]:
    """The Mosaic GPU module's text (the lowering's, before the compile hook's serialization) and the lowered
    program of the module's jitted entry at these shapes (A and B K-major as stored, the spec's arguments)."""
    from jax._src.pallas.mosaic_gpu import pallas_call_registration as registration

    from specgen.kinds.gemm.designs.pallas.design import JNP_DTYPES
    from specgen.kinds.grouped.spec import GroupedSpec

    spec = GroupedSpec.model_validate(mod.SPEC)
    dt = jnp.dtype(JNP_DTYPES[spec.a.dtype])
    bn = 2 * n if spec.epilogue and spec.epilogue[0].op == "gated" else n
    args = [jax.ShapeDtypeStruct((m, k), dt), jax.ShapeDtypeStruct((g, bn, k), dt), jax.ShapeDtypeStruct((g,), jnp.int32)]
    for arg in spec.runtime_args():
        shape = {"group_n": (g, n), "vec_m": (m,), "scalar": ()}[arg.shape]
        args.append(jax.ShapeDtypeStruct(shape, jnp.float32 if arg.shape != "group_n" else jnp.dtype(JNP_DTYPES[arg.dtype])))
    texts = []
    lower = registration.lowering.lower_pipelined_jaxpr_to_module

    def keep(*a, **kw):
        result = lower(*a, **kw)
        texts.append(str(result.module.operation))
        return result

    registration.lowering.lower_pipelined_jaxpr_to_module = keep
    try:
        lowered = jax.jit(mod._launch).trace(*args).lower(lowering_platforms=("cuda",))
    finally:
        registration.lowering.lower_pipelined_jaxpr_to_module = lower
    (text,) = texts
    return text, lowered


@pytest.mark.parametrize("name", ["moe_bf16", "moe_gate_up_swiglu_bf16", "moe_fp8_rowwise", "moe_down_router_bf16"])
def test_catalogue_kernels_lower_with_both_splits_and_the_plans_smem(name):
    """M = 1000 over 8 groups, N = 512, K = 16 tile_k steps (S = 2 and 4 both divide them): three K loops in the
    kernel (the whole tile's, S = 2's, S = 4's: three times one loop's wgmma), a signal and a wait at GPU scope
    for each split, SMEM the plan's; at K = 5 steps (2 and 4 divide neither) no split renders (moe_bf16: one
    lowering more, the rest as its)."""
    mod = module(name)
    cfg = mod._config_for(1000, 512, 16 * mod.CONFIG.tile_k)
    assert cfg == mod.CONFIG
    text, lowered = _lowered(mod, 1000, 512, 16 * cfg.tile_k, 8)
    assert mosaic_gpu_launch_smem(lowered) == cfg.smem_bytes
    assert text.count("red.release.gpu.global.add") == 2 and text.count("atom.relaxed.gpu.global.cas") == 2
    assert text.count("fence.acquire.gpu") == 2
    if name != "moe_bf16":
        return
    plain, lowered = _lowered(mod, 1000, 512, 5 * cfg.tile_k, 8)
    assert mosaic_gpu_launch_smem(lowered) == cfg.smem_bytes
    assert "red.release" not in plain and text.count("wgmma.mma_async") == 3 * plain.count("wgmma.mma_async") > 0


def test_the_direct_launch_runs_the_split_with_its_own_scratch():
    """The kernel `_direct` compiles: with a split, jax's zero-filled semaphores (2 a CTA) and the partials output
    (a tile a CTA) are the compiled program's scratch, the program still the one call on its arguments; without one,
    no scratch."""
    mod = module()
    m, n, g = 1000, 512, 8
    cfg = mod._config_for(m, n, 1024)
    visits = mod._gj.row_visits_bound(m, g, cfg.tile_m, mod.TAIL_ZERO)
    programs = min(132, visits * n // cfg.tile_n)
    for k, splits in ((1024, True), (192, False)):
        structs = [jax.ShapeDtypeStruct(s, d) for s, d in (((g + 1,), jnp.int32), ((visits,), jnp.int32), ((visits,), jnp.int32),
                                                            ((1,), jnp.int32), ((m, k), jnp.bfloat16), ((g, n, k), jnp.bfloat16))]
        found = mt.program(mod._build(cfg, m, n, k, g, n, 132, frozenset()), structs)
        assert found is not None and found.args == 6 and len(found.asm) > 1000
        if splits:
            assert found.zeroed == (((programs * mod.WARPGROUPS,), "i32"),)
            assert found.scratch == (((programs * cfg.tile_m, cfg.tile_n), "f32", None), ((programs * mod.WARPGROUPS,), "i32", 6))
        else:
            assert found.zeroed == () and found.scratch == ()


def test_the_serving_visits_are_the_storing_ones_less_the_tails():
    """With tail zero the metadata's `used` counts the tail's visits too (after the groups'); the kernel's split
    plans over the visits that serve a group, `serving_visits` of `used` (runtime/grouped_jax.py): the count of
    visits whose group is below G, which come first, over random sizes (empty, negative, past M) and both heights."""
    from specgen.runtime import grouped_jax as gj

    rng = np.random.default_rng(31)
    metadata = jax.jit(gj.group_row_starts, static_argnums=(1, 2, 3))
    serving = jax.jit(gj.serving_visits, static_argnums=(2, 3))
    for _ in range(40):
        g, rows, block = int(rng.choice([1, 3, 8, 33])), int(rng.choice([1, 9, 130, 1000])), int(rng.choice([64, 128]))
        sizes = rng.choice([0, 0, 1, 7, -2, int(rng.integers(0, 400))], size=g).astype(np.int32)
        offsets, groups, _, used = metadata(jnp.asarray(sizes), rows, block, True)
        got = int(serving(used[0], offsets[g], rows, block))
        groups = np.asarray(groups)
        assert got == int((groups < g).sum()) and (groups[:got] < g).all(), (sizes, rows, block)
        assert (groups[got:int(used[0])] == g).all(), (sizes, rows, block)  # then the tail's, all of them
