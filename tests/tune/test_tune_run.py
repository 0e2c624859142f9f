"""The tuner's orchestration on a CPU, the GPU replaced by a deterministic timing function keyed by config
(fakes.py): it finds the fastest config, keeps the incumbent when nothing beats it, loses nothing when
killed, stops on its budget with the best so far, and re-applies from the cache with no GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from specgen.kinds.gemm.problem import Shape
from specgen.spec.load import load_file
from specgen.tune.cache import Cache
from specgen.tune.measure import local
from tests.tune.conftest import SMALL, run_tune
from tests.tune.fakes import BEST, FakeTimer, fake_calls, fake_us


def _best_config(report) -> dict:
    (slot,) = report.slots
    flats = [slot.flats[k] for k in slot.flats if k not in slot.failed]
    return min(flats, key=lambda f: fake_us(f, Shape(8192, 8192, 8192)))


def test_picks_the_fastest_and_writes_it(spec_copy, tmp_path: Path) -> None:
    path = spec_copy()
    r = run_tune(path, tmp_path / "c.jsonl", overrides=SMALL, write=True)
    (slot,) = r.slots
    assert len(slot.kept) == 25 and len(slot.failed) == 2 and slot.timed == 23  # fakes.failing_compile: 64x128, 4 warps
    best = _best_config(r)
    assert slot.winner == {"tile.m": 128, "tile.n": 128, "tile.k": 64, "triton.num_warps": 4, "pipeline.ab_stages": 4}
    assert (best["tile"]["n"], best["triton"]["num_warps"]) == (BEST["n"], BEST["num_warps"])
    assert slot.score > 1.05 and slot.score_lo > 1.0
    eff = load_file(path)[0].spec.for_target("triton:sm90")
    assert (eff.tile.n, eff.triton.num_warps, eff.pipeline.ab_stages) == (128, 4, 4)
    assert "specgen tune 2026-11-25 on Fake H200" in path.read_text()


def test_the_grouped_kind_tunes(spec_copy, tmp_path: Path) -> None:
    """`specgen tune` takes the grouped kind (issue 37): its shapes (GxMxNxK with the size distribution) and its
    Triton design's knobs, the fake GPU's fastest config picked and written into the grouped spec."""
    path = spec_copy("grouped.toml")
    assert load_file(path)[1].name == "moe_bf16"
    r = run_tune(path, tmp_path / "c.jsonl", kernel=1, shapes="8x1024x4096x4096:skewed", overrides=SMALL, write=True)
    (slot,) = r.slots  # the default config (the shape's 8192 rows pass the decode variant's M <= 64)
    assert slot.winner == {"tile.m": 128, "tile.n": 128, "tile.k": 64, "triton.num_warps": 4, "pipeline.ab_stages": 4}
    eff = load_file(path)[1].spec.for_target("triton:sm90")
    assert (eff.tile.m, eff.tile.n, eff.triton.num_warps, eff.pipeline.ab_stages) == (128, 128, 4, 4)


def test_a_candidate_that_cannot_launch_is_its_verdict_not_the_end(spec_copy, tmp_path: Path) -> None:
    """The driver refuses some configs at launch (Triton's OutOfResources: the H100 run of 2026-11-25):
    the tune records the error, times the rest, and a resumed run does not try that config again."""
    inner = local(fake_calls, FakeTimer())
    refused: list[dict] = []

    def measurer(cand, inc, target, shape, rounds):
        if cand["tile"]["n"] == 128 and cand["triton"]["num_warps"] == 8:
            refused.append(cand)
            raise RuntimeError("out of resource: shared memory, Required: 262176, Hardware limit: 232448")
        return inner(cand, inc, target, shape, rounds)

    path = spec_copy()
    r = run_tune(path, tmp_path / "c.jsonl", overrides=SMALL, measurer=measurer,
                 shapes="8192x8192x8192,4096x4096x4096")
    (slot,) = r.slots
    launch = [e for e in slot.failed.values() if e.startswith("RuntimeError: out of resource")]
    assert len(launch) == 6 and len(refused) == 6  # tile.m 2 x ab_stages 3, each once: not at its second shape
    assert slot.winner == {"tile.m": 128, "tile.n": 128, "tile.k": 64, "triton.num_warps": 4, "pipeline.ab_stages": 4}
    again = run_tune(path, tmp_path / "c.jsonl", overrides=SMALL, measurer=measurer,
                     shapes="8192x8192x8192,4096x4096x4096")
    assert len(refused) == 6 and again.slots[0].winner == slot.winner  # read from the cache, not relaunched


def test_incumbent_kept_when_nothing_is_faster(spec_copy, tmp_path: Path) -> None:
    path = spec_copy()
    # a space whose every config is slower than the incumbent on the fake GPU (wider N, more warps)
    r = run_tune(path, tmp_path / "c.jsonl", overrides={"tile.n": (256,), "triton.num_warps": (8,),
                                                       "pipeline.ab_stages": (3, 5)}, write=True)
    before = path.read_text()
    (slot,) = r.slots
    assert slot.timed >= 2 and slot.winner is None and r.edits == []
    assert path.read_text() == before
    assert "kept the incumbent" in r.summary[0]


class Killed(BaseException):
    """A kill reaches the tuner as a BaseException (Ctrl-C's KeyboardInterrupt), never as a candidate's failure."""


def test_resume_after_a_kill_loses_nothing(spec_copy, tmp_path: Path) -> None:
    cache = tmp_path / "c.jsonl"
    timer, calls = FakeTimer(), []

    def dies_after_7(*args):
        if len(calls) == 7:
            raise Killed
        calls.append(args)
        return local(fake_calls, timer)(*args)

    with pytest.raises(Killed):
        run_tune(spec_copy(), cache, overrides=SMALL, measurer=dies_after_7)
    kept = Cache(cache)
    assert sum(e.kind == "time" for e in kept.entries.values()) == 7  # each result on disk as it landed
    with cache.open("a") as f:
        f.write('{"kind": "time", "key": "cut sho')  # the line a kill cut short
    second = FakeTimer()
    r = run_tune(spec_copy(), cache, overrides=SMALL, measurer=local(fake_calls, second))
    (slot,) = r.slots
    assert r.measured == slot.timed - 7 and second.cycles == r.measured and r.compiled == 0
    assert Cache(cache).skipped == 1
    fresh = run_tune(spec_copy("gemm_bf16.toml"), tmp_path / "fresh.jsonl", overrides=SMALL)
    assert slot.winner == fresh.slots[0].winner


def test_budget_stops_with_the_best_so_far(spec_copy, tmp_path: Path) -> None:
    ticks = iter(range(10_000))
    r = run_tune(spec_copy(), tmp_path / "c.jsonl", overrides=SMALL, budget_s=5.5, clock=lambda: next(ticks))
    (slot,) = r.slots
    assert r.budget_stop and r.measured == 5 and slot.timed == 5  # the clock ticks once per check: 1..5 <= 5.5
    assert slot.winner is not None  # the best of the five measured, the incumbent among them
    assert slot.score > 1.0


def test_from_cache_reapplies_without_a_gpu(spec_copy, tmp_path: Path) -> None:
    cache = tmp_path / "c.jsonl"
    tuned = spec_copy()
    run_tune(tuned, cache, overrides=SMALL, write=True)
    other = tmp_path / "again" / "gemm_bf16.toml"
    other.parent.mkdir()
    other.write_text(Path(__file__).resolve().parents[2].joinpath("specs/gemm_bf16.toml").read_text())
    r = run_tune(other, cache, overrides=SMALL, write=True, from_cache=True)
    assert r.machine is not None and r.machine.gpu == "Fake H200" and r.measured == 0
    assert other.read_text() == tuned.read_text()
    # those timings were taken under the write flush: a --from-cache --flush read finds none of them
    from specgen.spec.models import parse_target
    from specgen.tune.run import TuneError, tune

    with pytest.raises(TuneError, match="with the L2 flushed by read"):
        tune(load_file(other)[0], [parse_target("triton:sm90")], [Shape(8192, 8192, 8192)], cache=Cache(cache),
             machine=None, compiler=None, measurer=None, overrides=SMALL, l2_flush="read")


def test_a_failing_spec_is_refused_before_any_work(tmp_path: Path) -> None:
    from specgen.tune.run import TuneError

    bad = tmp_path / "bad.toml"
    bad.write_text('[[kernels]]\nname = "k"\nkind = "gemm"\na = { dtype = "bf16" }\nb = { dtype = "bf16" }\n'
                   'out = { dtype = "bf16" }\ntile = { m = 256, n = 256, k = 128 }\npipeline = { ab_stages = 6 }\n'
                   'targets = ["triton:sm90"]\n')
    with pytest.raises(TuneError, match="SMEM001"):
        run_tune(bad, tmp_path / "c.jsonl")


def test_timings_are_kept_per_l2_flush_and_old_keys_stay_valid() -> None:
    """`tune --flush read` times with the L2 left clean (bench --flush): its timings get keys of their own,
    while a write-flush timing keys as it did before the flush was a choice (a committed H100 cache's entries
    recompute to their recorded keys, so `--from-cache` still finds them)."""
    from specgen.tune.cache import Entry, time_key

    root = Path(__file__).resolve().parents[2]
    lines = (root / "bench/results/2026-11-26-h100-s13-tune15-cache.jsonl").read_text().splitlines()
    timed = [e for e in map(Entry.model_validate_json, lines) if e.kind == "time"]
    assert timed and all(e.machine is not None and e.machine.l2_flush == "write" for e in timed)
    for e in timed[:5]:
        assert time_key(e.semantics, e.target, e.shape, e.config_key, e.incumbent_key, e.machine) == e.key
        clean = e.machine.model_copy(update={"l2_flush": "read"})
        assert time_key(e.semantics, e.target, e.shape, e.config_key, e.incumbent_key, clean) != e.key
