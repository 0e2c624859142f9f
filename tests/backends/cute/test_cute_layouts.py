"""The epilogue's coordinates, checked at trace time on the CPU: for every thread of the consumer
warpgroups, the (row, column) the epilogue assigns to each accumulator element of each subtile (the
identity subtile partitioned like the register -> SMEM copy's source, plus the subtile's origin) is
the coordinate the wgmma accumulator layout gives that register. Bias, scale and residual operands
are gathered by these coordinates, so a mismatch would fuse the wrong row or column."""

from __future__ import annotations

from pathlib import Path

import pytest

from specgen.compile import load_rendered
from specgen.runtime.cute import dsl_arch

ROOT = Path(__file__).resolve().parents[3]


RENDERED = {  # configs rendered from a minimal spec: (tile, cute options)
    "pingpong": ({"m": 128, "n": 128, "k": 64}, {"schedule": "pingpong"}),
    "swapped": ({"m": 16, "n": 64, "k": 64}, {"swap_ab": True}),  # out^T's 64x16 tile, stored M-major
    "swapped_pingpong": ({"m": 32, "n": 128, "k": 64}, {"swap_ab": True, "schedule": "pingpong"}),
}


@pytest.mark.parametrize("name", ["gemm_bias_gelu_bf16", "gemm_relu_f16", "gemm_small_bf16", *RENDERED])
def test_epilogue_coordinates_are_the_accumulators(name: str, tmp_path) -> None:
    """Per config: the catalogue's defaults (cooperative, two and one warpgroups), a ping-pong one,
    whose warpgroups each hold a whole 128x128 tile (thread indices within the warpgroup), and swapped
    ones (swap_ab: the transposing stmatrix copy into M-major subtiles, in the kernel's coordinates)."""
    if name in RENDERED:
        import json

        from kernels import MINIMAL_SPEC

        from specgen.render.catalogue import render_modules
        from specgen.spec.load import load_text

        tile, options = RENDERED[name]
        spec = {**MINIMAL_SPEC, "name": name, "targets": ["cute:sm90"], "tile": tile, "cute": options}
        (ls,) = load_text(json.dumps({"kernels": [spec]}), "<test>", ".json")
        (text,) = render_modules(ls, ls.spec.targets).values()
        (tmp_path / f"{name}.py").write_text(text)
        m = load_rendered(tmp_path / f"{name}.py")
        assert m.CONFIG.tile_threads == 128 and m.CONFIG.pingpong == (options.get("schedule") == "pingpong")
        assert m.CONFIG.operands[4].is_m_major_c() == options.get("swap_ab", False)
    else:
        m = load_rendered(ROOT / "generated" / "cute" / f"{name}.py")
    cfg = m.CONFIG
    import cutlass
    import cutlass.cute as cute

    found: dict[str, int] = {}

    @cute.jit
    def probe():
        tiled_mma = m.make_tiled_mma(cfg)
        r2s = m.make_r2s_copy(cfg, tiled_mma)
        tile = cute.make_identity_tensor((cfg.tile_m, cfg.tile_n))
        subtiles = cute.zipped_divide(tile, (cfg.epi_m, cfg.epi_n))
        sub_grid = cute.make_layout(subtiles.shape[1], stride=(subtiles.shape[1][1], 1))
        checked, wrong = 0, 0
        for t in cutlass.range_constexpr(0, cfg.tile_threads, 9):
            truth = r2s.retile(tiled_mma.get_slice(t).partition_C(tile))  # register order, as the kernel reads it
            crd = r2s.get_slice(t).partition_S(cute.make_identity_tensor((cfg.epi_m, cfg.epi_n)))
            size = cute.size(crd)
            for s in cutlass.range_constexpr(cute.size(subtiles, mode=[1])):
                origin = sub_grid.get_hier_coord(s)
                for i in cutlass.range_constexpr(size):
                    want = truth[s * size + i]
                    got = (origin[0] * cfg.epi_m + crd[i][0], origin[1] * cfg.epi_n + crd[i][1])
                    checked += 1
                    if cutlass.const_expr((want[0], want[1]) != got):
                        wrong += 1
        found.update(checked=checked, wrong=wrong)

    with dsl_arch(m.ARCH):
        cute.compile(probe)
    threads = len(range(0, cfg.tile_threads, 9))
    assert found == {"checked": threads * cfg.tile_m * cfg.tile_n // cfg.tile_threads, "wrong": 0}


@pytest.mark.parametrize("raster", ["along_m", "along_n"])
def test_tile_order_is_grouped_like_the_spec_says(raster: str, tmp_path) -> None:
    """schedule.group_m = 4 over 8 x 8 tiles: along_m walks down a band of 4 tile rows, then right;
    along_n walks across a band of 4 tile columns, then down (Triton's grouped ordering)."""
    import json

    from kernels import MINIMAL_SPEC

    from specgen.render.catalogue import render_modules
    from specgen.spec.load import load_text

    spec = {**MINIMAL_SPEC, "name": f"order_{raster}", "targets": ["cute:sm90"],
            "schedule": {"persistent": True, "group_m": 4, "raster": raster}}
    (ls,) = load_text(json.dumps({"kernels": [spec]}), "<test>", ".json")
    (text,) = render_modules(ls, ls.spec.targets).values()
    (tmp_path / "order.py").write_text(text)
    m = load_rendered(tmp_path / "order.py")
    import cutlass
    import cutlass.cute as cute

    order: list[tuple[int, int]] = []

    @cute.jit
    def probe():
        layout = m.make_raster(m.CONFIG, (8, 8, 1))
        for i in cutlass.range_constexpr(64):
            c = m.cluster_at(m.CONFIG, i, layout.shape)
            order.append((c[0], c[1]))

    with dsl_arch(m.ARCH):
        cute.compile(probe)
    first = order[:9]
    if raster == "along_m":
        assert first == [(0, 0), (1, 0), (2, 0), (3, 0), (0, 1), (1, 1), (2, 1), (3, 1), (0, 2)]
        assert order[32] == (4, 0)
    else:
        assert first == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3), (2, 0)]
        assert order[32] == (0, 4)
    assert sorted(order) == [(i, j) for i in range(8) for j in range(8)]


@pytest.mark.parametrize(("raster", "group_m"), [("along_m", 1), ("along_n", 1), ("along_m", 4), ("along_n", 4)])
def test_tile_order_covers_ragged_grids_once(raster: str, group_m: int, tmp_path) -> None:
    """The kernel's own persistent schedule (make_raster, cluster_at) over 11 x 5 tiles and 2 batches, a 2x1
    cluster (6 x 5 clusters): exactly as many work indices as clusters (no padding cluster: one would
    stream an operand for tiles past M or N), every cluster of every batch exactly once, the last band
    holding what is left, and group_m = 1 walks a row (along_m: N fastest) or a column (along_n)."""
    import json

    from kernels import MINIMAL_SPEC

    from specgen.render.catalogue import render_modules
    from specgen.spec.load import load_text

    spec = {**MINIMAL_SPEC, "name": f"ragged_{raster}_{group_m}", "targets": ["cute:sm90"], "cluster": {"m": 2, "n": 1},
            "schedule": {"persistent": True, "group_m": group_m, "raster": raster}}
    (ls,) = load_text(json.dumps({"kernels": [spec]}), "<test>", ".json")
    (text,) = render_modules(ls, ls.spec.targets).values()
    (tmp_path / "ragged.py").write_text(text)
    m = load_rendered(tmp_path / "ragged.py")
    import cutlass
    import cutlass.cute as cute

    order: list[tuple[int, int, int]] = []
    count: list[int] = []

    @cute.jit
    def probe():
        layout = m.make_raster(m.CONFIG, (11, 5, 2))  # clusters: 6 x 5 x 2
        count.append(cute.size(layout))
        for i in cutlass.range_constexpr(cute.size(layout)):
            c = m.cluster_at(m.CONFIG, i, layout.shape)
            order.append((c[0], c[1], c[2]))

    with dsl_arch(m.ARCH):
        cute.compile(probe)
    assert count == [6 * 5 * 2]
    assert sorted(order) == [(i, j, b) for i in range(6) for j in range(5) for b in range(2)]
    if group_m == 4:  # the last band: 2 rows of 5 (along_m), 1 column of 6 (along_n), then batch 1
        last = order[20:30] if raster == "along_m" else order[24:30]
        assert last == ([(4, 0, 0), (5, 0, 0), (4, 1, 0), (5, 1, 0), (4, 2, 0), (5, 2, 0), (4, 3, 0), (5, 3, 0),
                         (4, 4, 0), (5, 4, 0)] if raster == "along_m" else [(i, 4, 0) for i in range(6)])
        assert order[30] == (0, 0, 1)
    if group_m == 1:
        assert order[:3] == ([(0, 0, 0), (0, 1, 0), (0, 2, 0)] if raster == "along_m" else [(0, 0, 0), (1, 0, 0), (2, 0, 0)])
