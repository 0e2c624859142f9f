"""The CuTe training benches' pieces that need no GPU nor cutlass (bench/cute_train_tiles.py --layer gated,
gpu/bench_backward_epilogue.py --design cute): the gated candidates go through check's rules (the refused ones refused
by the rule that says why, none timed), each accepted one renders its role's row with the role and majors of the
module's own and a distinct config within the SMEM budget, and the plain GEMM the recompute epilogue is measured
against (its dgrad row at the recompute's config, the gated tile twice as wide) plans the recompute's SMEM. Rendering
only: the modules are not imported (their timing and compiles: `gpu/run_cute_train_bench.sh [fill]`)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
SMEM_LIMIT = 232448  # per block on sm_90


def _script(name: str, rel: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / rel)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tiles():
    return _script("cute_train_tiles", "bench/cute_train_tiles.py")


@pytest.fixture(scope="module")
def gated():
    """bench/train_step.py's GATED_CUTE (loaded from its file: `bench` here is the tests' package)."""
    return _script("train_step", "bench/train_step.py").GATED_CUTE


def _rendered_row(tiles, gated: dict, save: str, role: str) -> dict:
    """GATED_CUTE's own row for the role, as a dict (Config stands in: the module is not imported)."""
    from specgen.render.catalogue import render_modules
    from specgen.spec.load import load_text

    spec = {**gated, "name": "gated_row", "training": {**gated["training"], "save": save}}
    (ls,) = load_text(json.dumps({"kernels": [spec]}), "<test>", ".json")
    ((_, text),) = render_modules(ls, ls.spec.targets).items()
    return tiles.config_row(SimpleNamespace(Config=dict), text, role)


@pytest.mark.parametrize(("save", "refused"), [
    ("preact", {"coop_s4e2": "SMEM001", "pp64x256": "REG001", "coop_128x256": "REG001"}),
    ("recompute", {"coop_s5": "SMEM001", "coop_128x256": "REG001"}),
])
def test_gated_candidates_checked(tiles, gated, save, refused):
    role = tiles.GATED_ROLE[save]
    own = _rendered_row(tiles, gated, save, role)
    m = SimpleNamespace(Config=dict, TRAIN_CONFIGS={role: own})
    cands, refusals, same = tiles.gated_candidates(m, save, gated)
    assert {k.split("@")[1]: v[0].split(":")[0] for k, v in refusals.items()} == refused
    assert all(len(v) == len(set(v)) for v in refusals.values())  # each finding once
    assert not same and 1 <= len(cands) <= 8
    assert set(cands) | set(refusals) == {f"{role}@{n}" for n in tiles.GATED_CANDIDATES[role]}
    rows = list(cands.values())
    assert all(m.TRAIN_CONFIGS[k] == c for k, c in cands.items())  # added under their keys
    assert all(c != own for c in rows) and len({json.dumps(c, sort_keys=True) for c in rows}) == len(rows)
    for c in rows:
        # cooperative: two warpgroups share a tile; ping-pong (the role's own schedule): one a tile, two in turn
        assert (c["role"], c["a_k"], c["b_k"], c["mma_warpgroups"]) == (role, True, True, 1 if c["pingpong"] else 2)
        assert c["smem_bytes"] <= SMEM_LIMIT
        # the struct the kernel declares (the design's plan of the row): a stage holds B's gate and up tiles
        assert c["smem_bytes"] == tiles.smem(SimpleNamespace(**c), gated=True)


def test_plain_row_matches_recompute_smem(tiles, gated):
    """The plain GEMM bench_backward_epilogue.py pairs with the gated recompute: B's 2N columns as one plain GEMM,
    the tile twice as wide over the same stages, epilogue and cluster: the same SMEM as the gated tile's."""
    rec = _rendered_row(tiles, gated, "recompute", "recompute")
    plain = {**rec, "role": "dgrad", "tile_n": 2 * rec["tile_n"]}
    assert tiles.smem(SimpleNamespace(**plain)) == rec["smem_bytes"]
    bench = _script("bench_backward_epilogue", "gpu/bench_backward_epilogue.py")
    assert bench.CUTE_PLAIN.split("@")[0] == "dgrad"  # the module's epilogue-free role
    assert bench.CUTE_NAMES["gated"] == tiles.GATED_NAMES["recompute"]  # one render, one disk-cache entry for both
