"""`specgen check` over many files (specgen/check_batch.py, issue 36): file by file, in worker processes or in
this one, it prints the same bytes and exits with the same code as checking them all at once. Behaviour only:
no timing is asserted."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from specgen import check_batch, settle
from specgen.check import check_specs
from specgen.check_batch import (
    Emoji,
    check_files,
    diagnostic_lines,
    variant_lines,
    write_lines,
    write_segments,
)
from specgen.spec.load import load_paths

ROOT = Path(__file__).resolve().parent.parent


def _generator():
    spec = importlib.util.spec_from_file_location("check_speed", ROOT / "bench" / "check_speed.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def many(tmp_path_factory) -> Path:
    """Drawn kernels (bench/check_speed.py, seeded) in JSON files, and copies of the catalogue in TOML."""
    import random

    gen = _generator()
    folder = tmp_path_factory.mktemp("many")
    r, bases = random.Random(7), gen.catalogue()
    for f in range(4):
        kernels = []
        for i in range(12):
            while not gen.valid(k := gen.kernel(r, r.choice(bases), f"k{f}_{i}")):
                pass
            kernels.append(k)
        (folder / f"d{f}.json").write_text(json.dumps({"kernels": kernels}, indent=1) + "\n")
    gen.copies(folder, 22)  # two copies of the catalogue's 11 kernels: c00000.toml, c00001.toml
    return folder


def _check(args: list[str], workers: str, cwd: Path = ROOT) -> tuple[int, str, str]:
    env = {**os.environ, "SPECGEN_CHECK_WORKERS": workers, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "specgen", "check", *args], cwd=cwd, env=env, capture_output=True,
                       text=True)
    return r.returncode, re.sub(r" \(\d+ ms\)\n\Z", " (N ms)\n", r.stdout), r.stderr


@pytest.mark.parametrize("flags", [["--no-compile"], ["--no-compile", "--json"], ["--no-compile", "--notes"]],
                         ids=["plain", "json", "notes"])
def test_file_by_file_and_in_workers_prints_what_all_at_once_prints(many, flags):
    serial = _check([str(many), *flags], "0")
    assert serial[0] == 1 and "SMEM001" in serial[1] and ("--json" in flags or "\nvariants " in serial[1])
    for workers in ("1", "2"):
        assert _check([str(many), *flags], workers) == serial


def test_a_load_error_or_a_shared_name_is_reported_as_all_at_once_reports_it(many, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in many.iterdir():
        (broken / f.name).write_text(f.read_text())
    (broken / "d1.json").write_text((many / "d1.json").read_text().replace('"m": 128', '"m": "128"', 1))
    serial = _check([str(broken), "--no-compile"], "0")
    assert serial[0] == 1 and "Input should be a valid integer" in serial[2]
    assert _check([str(broken), "--no-compile"], "2") == serial
    assert _check([str(broken), "--no-compile", "--json"], "2") == _check([str(broken), "--no-compile", "--json"], "0")
    (broken / "d1.json").write_text((many / "d1.json").read_text())
    (broken / "e.toml").write_text((ROOT / "specs" / "tpu.toml").read_text() + (ROOT / "specs" / "tpu.toml").read_text())
    serial = _check([str(broken), "--no-compile"], "0")
    assert serial[0] == 1 and "is already used" in serial[2]
    assert _check([str(broken), "--no-compile"], "2") == serial


def _serial_text(paths: list[Path], settle_mode: str) -> tuple[list[str], object]:
    specs = load_paths(paths)
    report = check_specs(specs, settle=settle_mode)
    lines = [t for d in report.diagnostics for t, _ in diagnostic_lines(d)]
    return lines + [t for s in specs for t in variant_lines(s, report.resolved)], report.settled


def _batch_text(batch) -> list[str]:
    text = "".join(t for c in batch.chunks for t, _ in c.diagnostics) + "".join(t for c in batch.chunks for t, _ in c.variants)
    return text.splitlines()


@pytest.mark.parametrize("workers", [1, 2])
def test_near_verdicts_are_settled_once_for_the_run(monkeypatch, tmp_path, workers):
    """The catalogue's near cute:sm90 configs, twice over: each config compiled once (a stand-in compiler), the
    chunks that waited for it made again; a second run reads them all from the cache."""
    monkeypatch.setenv("SPECGEN_SETTLE_CACHE", str(tmp_path / "settle"))
    monkeypatch.setattr(settle, "compiler_versions", lambda probe: {"fake-compiler": "1.0"})
    calls: list[dict] = []

    def run(job):
        calls.append(job)
        spills = 16 if len(calls) % 2 else 0  # some configs spill, some do not
        return {"error": "", "spill_bytes": spills, "registers": 232}, True

    monkeypatch.setattr(settle, "_run_probe", run)
    gen = _generator()
    gen.copies(tmp_path, 22)
    files = sorted(tmp_path.glob("*.toml"))
    batch = check_files(files, workers, False, "compile", False, Emoji())
    compiled = len(calls)
    assert compiled > 0 and batch.settled.compiled == compiled and batch.settled.near > compiled
    assert len({json.dumps(c, sort_keys=True) for c in calls}) == compiled  # no config compiled twice
    lines, stats = _serial_text(files, "compile")  # now from the cache
    assert len(calls) == compiled and stats.cached == compiled
    assert _batch_text(batch) == lines
    again = check_files(files, workers, False, "compile", False, Emoji())
    assert len(calls) == compiled and again.settled.compiled == 0 and again.settled.cached == compiled
    assert _batch_text(again) == lines


def test_a_file_that_fails_or_a_shared_name_sends_the_run_the_serial_way(tmp_path):
    (tmp_path / "a.toml").write_text((ROOT / "specs" / "tpu.toml").read_text())
    (tmp_path / "b.toml").write_text((ROOT / "specs" / "tpu.toml").read_text())
    assert check_files(sorted(tmp_path.glob("*.toml")), 1, False, "analytic", False, Emoji()) is None
    (tmp_path / "b.toml").write_text("kernels = 3\n")
    assert check_files(sorted(tmp_path.glob("*.toml")), 1, False, "analytic", False, Emoji()) is None


def test_few_bytes_go_the_serial_way_unless_workers_are_asked_for(monkeypatch):
    monkeypatch.delenv(check_batch.WORKERS_ENV, raising=False)
    assert check_batch.workers_for([ROOT / "specs"]) is None  # the catalogue: checked all at once, in-process
    monkeypatch.setenv(check_batch.WORKERS_ENV, "2")
    files, workers = check_batch.workers_for([ROOT / "specs"])
    assert workers == 2 and [f.name for f in files] == ["catalogue.toml", "gemm_bf16.toml", "grouped.toml", "mlp.toml",
                                                          "tpu.toml", "training.toml"]
    monkeypatch.setenv(check_batch.WORKERS_ENV, "0")
    assert check_batch.workers_for([ROOT / "specs"]) is None
    assert check_batch.workers_for([ROOT / "no-such-folder"]) is None  # the serial way says what is wrong


@pytest.mark.parametrize("text", ["error a.json:100:7 X k @ t: m", "plain", ":smile: and :thumbs_up:", "tab\there",
                                  "caf\u00e9", "[red]not markup[/red]", "a:1234:b :100-text: c", ""])
def test_one_write_prints_what_rich_prints(text):
    lines = [(text, "red"), ("    hint: " + text, ""), ("x:100:y", "yellow")]
    ours, rich = io.StringIO(), io.StringIO()
    write_lines(Console(file=ours, highlight=False, soft_wrap=True), lines)
    console = Console(file=rich, highlight=False, soft_wrap=True)
    for t, style in lines:
        console.print(t, style=style, markup=False)
    assert ours.getvalue() == rich.getvalue()
    segs = check_batch.segments(lines, Emoji.of(console))
    again = io.StringIO()
    write_segments(Console(file=again, highlight=False, soft_wrap=True), segs)
    assert again.getvalue() == rich.getvalue()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(list("ab:1 0-\n") + ["100", "smile", "text", "emoji", "thumbs_up"]),
                         max_size=12).map("".join), max_size=8).map("\n".join))
def test_emoji_codes_replace_as_rich_replaces_them(text):
    """Only the lines that may hold an emoji's code go through rich's pass: the text reads as one pass over all."""
    from rich._emoji_replace import _emoji_replace

    for variant in (None, "text"):
        assert Emoji(True, variant)(text) == _emoji_replace(text, default_variant=variant)


def test_a_position_on_line_100_prints_as_written(tmp_path):
    """rich would print `:100:` as an emoji: the CLI's consoles replace no emoji codes."""
    lines = (ROOT / "specs" / "gemm_bf16.toml").read_text().splitlines()
    tile = next(i for i, line in enumerate(lines) if line.startswith("tile = "))
    head = next(i for i, line in enumerate(lines) if line.startswith("[[kernels]]"))
    lines[tile] = "tile = { m = 24, n = 256, k = 64 }"  # a tile no MMA takes: a finding at its line
    lines[head:head] = ["#"] * (99 - tile)  # which is now line 100
    (tmp_path / "s.toml").write_text("\n".join(lines) + "\n")
    code, out, _ = _check([str(tmp_path / "s.toml"), "--no-compile"], "0")
    assert code == 1
    assert "s.toml:100:" in out, out
    assert "\U0001f4af" not in out  # rich's :100: emoji
