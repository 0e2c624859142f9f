"""What a user can type at `specgen bench` and `specgen tune`, and the files they name (issue 34): every bad
input ends in one `error:` line (exit 2 for usage, 1 for a file that is not what it should be), never a
traceback, and nothing the command does not own is written. README's measuring examples run as written."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specgen.cli import app
from specgen.kinds.gemm.problem import MODEL_SHAPES
from specgen.kinds.gemm.spec import GemmSpec
from specgen.tune.cache import Cache, CacheError
from tests.tune.conftest import SMALL, run_tune

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
KNOBS = [a for k, v in SMALL.items() for a in ("--knob", f"{k}={','.join(map(str, v))}")]


def cli(*args: str, cwd: Path | None = None):
    return CliRunner().invoke(app, list(args))


def said(result, code: int) -> str:
    """The run ended with `code` and a clean message: no traceback, nothing raised past the CLI."""
    assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    return result.output


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "gemm_bf16.toml"
    shutil.copyfile(ROOT / "specs" / "gemm_bf16.toml", path)
    return path


def tune(spec: Path, *extra: str):
    return cli("tune", str(spec), "--kernel", "gemm_bf16", "--from-cache", "--cache", str(spec.parent / "c.jsonl"),
               "--target", "triton:sm90", *extra)


# --- --shapes and --knob --------------------------------------------------------------------------------
@pytest.mark.parametrize(("shapes", "says"), [
    ("\uff11\uff12\uff18x128x128", "is not MxNxK or BxMxNxK with positive integers in ASCII digits"),  # fullwidth
    ("\u00b2x128x128", "in ASCII digits"),  # '²'.isdigit() is true and int('²') raises
    ("4294967296x8x8", "a size past 2147483647, the largest a launcher takes (int32)"),
    ("9" * 5000 + "x8x8", "a size past 2147483647"),  # past int()'s 4300 digits
    ("", "--shapes '' names no shape"),
    (" , ", "names no shape"),
    ("0x8x8", "positive integers"),
    ("8x8", "is not MxNxK"),
])
def test_bad_shapes_are_usage_errors(spec: Path, shapes: str, says: str) -> None:
    assert says in said(tune(spec, "--shapes", shapes), 2)
    assert says in said(cli("bench", str(spec), "--shapes", shapes), 2)


@pytest.mark.parametrize(("knob", "says"), [
    ("tile.n=\uff11\uff12\uff18", "is no value of tile.n (Input should be a valid integer)"),
    ("tile.n=--64", "'--64' is no value of tile.n"),
    ("tile.n=abc", "'abc' is no value of tile.n"),  # an error, not a candidate check rejects later
    ("tile.n=0", "(Input should be greater than or equal to 1)"),
    ("tile.n.x=64", "is not SECTION.KEY=V1,V2"),
    ("tile=64", "is not SECTION.KEY=V1,V2"),
    ("tiles.n=64", "is not SECTION.KEY=V1,V2"),
    ("tile.q=64", "tile has no field 'q' (its fields: m, n, k)"),
    ("triton.swap_ab=1", "(Input should be a valid boolean)"),
    ("schedule.raster=diagonal", "'diagonal' is no value of schedule.raster"),
    ("tile.n=", "is not SECTION.KEY=V1,V2"),
])
def test_bad_knobs_are_usage_errors(spec: Path, knob: str, says: str) -> None:
    assert says in said(tune(spec, "--knob", knob), 2)


def test_knob_values_keep_their_types() -> None:
    from specgen.tune.space import parse_knobs

    assert parse_knobs(["pipeline.ab_stages=auto,3", "cute.mma_warpgroups=none,2", "cute.schedule=pingpong"], GemmSpec) == {
        "pipeline.ab_stages": ("auto", 3), "cute.mma_warpgroups": (None, 2), "cute.schedule": ("pingpong",)}


@pytest.mark.parametrize(("flag", "value", "says"), [
    ("--budget", "0", "0.0 is not a positive number of minutes"),
    ("--budget", "-5", "-5.0 is not a positive number of minutes"),
    ("--budget", "nan", "nan is not a positive number of minutes"),
    ("--workers", "-3", "--workers"),
    ("--workers", "0", "--workers"),
    ("--rounds", "1", "--rounds"),
])
def test_numbers_that_make_no_sense_are_refused(spec: Path, flag: str, value: str, says: str) -> None:
    assert says in said(tune(spec, flag, value), 2)


# --- bench --compare ------------------------------------------------------------------------------------
def _record() -> Path:
    return next(p for p in sorted((ROOT / "bench" / "results").glob("*.json"))
                if json.loads(p.read_text()).get("schema") == "specgen.bench/1")


@pytest.mark.parametrize(("content", "says"), [
    (None, "cannot read {path}: No such file or directory"),
    ("[1, 2]", "is not a specgen.bench/1 record written by `specgen bench --json` (it holds a JSON list)"),
    ('{"rows": []}', "(it holds a JSON object without a schema)"),
    ('{"schema": "other/2"}', "(its schema is 'other/2')"),
    ('{"schema": "specgen.bench/1", "rows": 3}', "is a specgen.bench/1 record this specgen cannot read"),
    (b"\x89PNG\r\n\x1a\n\x00\xff", "is not a bench record: not JSON text"),
    ("folder", "is a folder, not a bench record"),
])
def test_compare_says_what_a_file_is(tmp_path: Path, content, says: str) -> None:
    path = tmp_path / "b.json"
    if content == "folder":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    out = said(cli("bench", "--compare", str(_record()), str(path)), 1)
    assert "error: --compare: " in out and says.format(path=path) in out


def test_bench_refuses_an_output_it_cannot_write_before_running(tmp_path: Path, spec: Path) -> None:
    assert "--json" in said(cli("bench", str(spec), "--json", str(tmp_path)), 2)  # a folder
    assert "is a folder: name a file (nothing was run)" in said(cli("bench", str(spec), "--png", str(tmp_path)), 2)


# --- the tune cache -------------------------------------------------------------------------------------
@pytest.mark.parametrize(("content", "says"), [
    (b"\x00\xffbinary\x8d", "is not a specgen tune cache: byte 1 is not UTF-8 text (a binary file?)"),
    (b"[1, 2]\n", "is not a specgen tune cache: line 1 holds a JSON array"),
    (b'{"a": 1}\n', "line 1 holds a JSON object without a tuner entry's fields"),
    (b"# my notes\nnot json\n", "is not a specgen tune cache: line 1 is not a JSON line"),
    ("folder", "is a folder: name a file"),
])
def test_a_file_that_is_no_cache_is_refused_and_left_alone(spec: Path, content, says: str) -> None:
    cache = spec.parent / "c.jsonl"
    if content == "folder":
        cache.mkdir()
    else:
        cache.write_bytes(content)
    out = said(tune(spec, "--write"), 1)
    assert f"error: --cache {cache} " in out and says in out
    assert content == "folder" or cache.read_bytes() == content  # never appended to


def test_entries_of_another_version_are_said_not_as_no_timing(spec: Path) -> None:
    cache = spec.parent / "c.jsonl"
    cache.write_text('{"kind": "time", "key": "x", "field_of_the_future": 1}\n' * 3)
    out = said(tune(spec), 1)
    assert "holds no timing of gemm_bf16" in out and "3 entries of another specgen version (skipped)" in out


def test_a_line_cut_by_a_kill_is_skipped_and_not_continued(tmp_path: Path, spec: Path) -> None:
    cache = tmp_path / "c.jsonl"
    run_tune(spec, cache, overrides=SMALL)
    whole = cache.read_text()
    cache.write_text(whole + '{"kind":"time","key":"abc","sem')  # a kill mid-line
    c = Cache(cache)
    assert c.skipped == 1 and len(c.entries) == len(Cache(tmp_path / "none").entries) + whole.count("\n")
    c.put(next(iter(c.entries.values())))
    lines = cache.read_text().splitlines()
    assert lines[-2] == '{"kind":"time","key":"abc","sem' and Cache(cache).skipped == 1  # its own line


def test_cache_error_is_a_value_error() -> None:
    assert issubclass(CacheError, ValueError)


# --- spec files ---------------------------------------------------------------------------------------------
def test_a_bom_spec_is_tuned_and_written_with_its_bom(tmp_path: Path, spec: Path) -> None:
    run_tune(spec, spec.parent / "c.jsonl", overrides=SMALL)
    spec.write_bytes(b"\xef\xbb\xbf" + spec.read_bytes())
    out = said(tune(spec, "--shapes", "8192x8192x8192", *KNOBS, "--write"), 0)
    assert "wrote 9 changes into" in out and spec.read_bytes().startswith(b"\xef\xbb\xbf# Plain bf16 GEMM")


def test_a_toml_inline_array_of_kernels_is_tuned_and_written(tmp_path: Path) -> None:
    path = tmp_path / "inline.toml"
    path.write_text('kernels = [{name = "gemm_bf16", kind = "gemm", a = {dtype = "bf16"}, b = {dtype = "bf16"}, '
                    'out = {dtype = "bf16"}, tile = {m = 128, n = 256, k = 64}, schedule = {persistent = true}, '
                    'triton = {num_warps = 8}, targets = ["triton:sm90"]}]\n')
    run_tune(path, tmp_path / "c.jsonl", overrides=SMALL)
    out = said(tune(path, "--shapes", "8192x8192x8192", *KNOBS, "--write"), 0)
    assert "wrote" in out and path.read_text().count("\n") == 1
    from specgen.spec.load import load_file

    assert load_file(path)[0].spec.for_target("triton:sm90").tile.n == 128


def test_a_target_without_a_tune_space_is_skipped_with_a_note(spec: Path) -> None:
    run_tune(spec, spec.parent / "c.jsonl", overrides=SMALL)
    r = cli("tune", str(spec), "--kernel", "gemm_bf16", "--from-cache", "--cache", str(spec.parent / "c.jsonl"),
            "--shapes", "8192x8192x8192", *KNOBS)
    out = said(r, 0)
    assert "gemm_bf16 @ cute:sm100: skipped: its design declares no tune space" in out
    only = cli("tune", str(spec), "--kernel", "gemm_bf16", "--from-cache", "--target", "cute:sm100")
    assert "no target of gemm_bf16 to tune: cute:sm100 has no tune space" in said(only, 1)


def test_compile_only_leaves_no_temporary_folder(spec: Path, tmp_path: Path, monkeypatch) -> None:
    import tempfile

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    # the in-process compile sets TRITON_INTERPRET=0 for itself: restored after, so that this worker's later
    # interpreter tests still run on the CPU
    monkeypatch.setenv("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "0"))
    r = cli("tune", str(spec), "--kernel", "gemm_bf16", "--target", "triton:sm90", "--compile-only", "--workers", "1",
            "--shapes", "8192x8192x8192", "--knob", "tile.m=128", "--knob", "tile.n=128", "--knob", "tile.k=64",
            "--knob", "triton.num_warps=8", "--knob", "pipeline.ab_stages=3")
    assert "compiled 2 candidates (" in said(r, 0)  # (the incumbent and the one knob config)
    assert list(scratch.iterdir()) == []  # its compile caches and modules were 1-4 MB a run


# --- README's measuring examples, as written ------------------------------------------------------------
def _measuring_examples() -> list[str]:
    text = README.read_text()
    section = text[text.index("## Measuring and tuning"):]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None
    return [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]


def test_readmes_measuring_examples_run_as_written(tmp_path: Path, monkeypatch) -> None:
    """In a copy of the catalogue's specs with a tune cache from a fake GPU (this machine has none): the
    GPU commands end in the no-GPU message, `--compare` compares, `--from-cache --write` writes."""
    examples = _measuring_examples()
    assert [shlex.split(e)[:2] for e in examples] == [["specgen", "bench"]] * 2 + [["specgen", "tune"]] * 2
    (tmp_path / "specs").mkdir()
    spec = tmp_path / "specs" / "gemm_bf16.toml"
    # the catalogue's gemm_bf16 on one tunable target and one without a tune space, without its variants:
    # the commands as written, on a spec whose from-cache tune takes seconds (the catalogue's takes ~30 s)
    spec.write_text('[[kernels]]\nname = "gemm_bf16"\nkind = "gemm"\na = { dtype = "bf16" }\nb = { dtype = "bf16" }\n'
                    'out = { dtype = "bf16" }\ntile = { m = 128, n = 256, k = 64 }\nschedule = { persistent = true }\n'
                    'targets = ["triton:sm90", "cute:sm100"]\n')
    shutil.copyfile(_record(), tmp_path / "before.json")
    shutil.copyfile(_record(), tmp_path / "after.json")
    run_tune(spec, tmp_path / ".specgen" / "tune-cache.jsonl", overrides=None, shapes=",".join(map(str, MODEL_SHAPES)))
    monkeypatch.chdir(tmp_path)
    before = spec.read_text()
    results = [cli(*shlex.split(e)[1:]) for e in examples]
    for r in results[0], results[2]:  # timing needs a CUDA GPU
        assert "this machine has none" in said(r, 2)
    assert "A/A" in said(results[1], 0) or said(results[1], 0)
    out = said(results[3], 0)
    assert "cute:sm100: skipped: its design declares no tune space" in out and f"into {Path('specs/gemm_bf16.toml')}" in out
    assert spec.read_text() != before and not (tmp_path / "out.json").exists()


@pytest.mark.parametrize(("export", "says"), [
    ("/", "--export /: the filesystem root is never an export folder"),
    ("", "--export '': the empty path names no folder"),
    ("FILE", "is a file, not a folder"),
])
def test_an_export_folder_that_can_never_be_one_is_refused_first(tmp_path: Path, spec: Path, monkeypatch,
                                                                 export: str, says: str) -> None:
    """Before anything is compiled or even looked for (this folder has no rendered modules): exit 2."""
    monkeypatch.chdir(tmp_path)
    target = str(spec) if export == "FILE" else export
    out = said(cli("compile", str(spec), "--export", target, "--target", "cute:sm90"), 2)
    assert says in out and "run `specgen render` first" not in out
    assert spec.read_text() == (ROOT / "specs" / "gemm_bf16.toml").read_text()
