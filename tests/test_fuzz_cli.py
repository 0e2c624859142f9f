"""Fuzzing every command's arguments and the files they read (issue 34): whatever a user types, and whatever
the spec, cache and record files hold, a command ends with exit 0, 1 or 2 and its own message, never a
traceback, and changes no file outside what it owns (render's --out, compile's --export folder, bench's
--json / --png, tune's --cache with its modules folder and, with --write, the spec).

Each example runs in a fresh sandbox folder (a one-kernel spec under specs/, a tune cache from the fake GPU,
a bench record, a folder, a link to a folder outside the sandbox's owned paths); every path an argument
names lies inside it, so nothing here can write outside the test's temporary folder. Left out: `tune --ray`
and `--ray-address` (they start a Ray cluster) and `tune --compile-only` (compiles every candidate: minutes).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from specgen.cli import app
from tests.tune.conftest import SMALL, run_tune

ROOT = Path(__file__).resolve().parents[1]
SPEC = """\
[[kernels]]
name = "k"
kind = "gemm"
a = { dtype = "f16" }
b = { dtype = "f16" }
out = { dtype = "f16" }
tile = { m = 128, n = 128, k = 64 }
schedule = { persistent = true }
triton = { num_warps = 8 }
targets = ["triton:sm90", "cute:sm100"]
"""
RECORD = next(p for p in sorted((ROOT / "bench" / "results").glob("*.json")) if b'"specgen.bench/1"' in p.read_bytes()[:200])


def _cache_bytes() -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "k.toml"
        spec.write_text(SPEC)
        run_tune(spec, Path(tmp) / "c.jsonl", overrides=SMALL)
        return (Path(tmp) / "c.jsonl").read_bytes()


CACHE = _cache_bytes()

# --- what a user types ------------------------------------------------------------------------------------
PATHS = ["specs", "specs/k.toml", "k", "missing.toml", "folder", "link", "cache.jsonl", "record.json", "", ".",
         "specs/../specs/k.toml", "notes.txt"]
OUTS = ["out", "generated", "folder", "link", "specs", "specs/k.toml", "", ".", "new/deep/dir", "notes.txt"]
NUMBERS = ["0", "-1", "-3", "1", "2", "3", "20", "1e9", "nan", "inf", "\uff13", "\u00b2", "9" * 30, "0x10", ""]
SHAPES = ["8192x8192x8192", "16x8192x8192,1x1x1", "2x8x8x8", "", ",", "0x1x1", "4294967296x8x8", "\uff11x1x1",
          "axbxc", "8x8", "1x1x1x1x1", "-1x2x3"]
KNOBS = ["tile.n=128,256", "tile.n=--64", "tile.n=abc", "tile.n.x=1", "tile=1", "pipeline.ab_stages=auto,3",
         "cute.schedule=pingpong", "triton.swap_ab=true,false", "tile.n=\uff11\uff12\uff18", "=", "tile.q=1",
         "tile.m=64,128", "schedule.raster=along_n"]
TARGETS = ["triton:sm90", "cute:sm100", "cute:sm90", "pallas:gpu_sm90", "triton:sm12", "triton", "", "TRITON:SM90"]

text = st.text(max_size=12)


def value(choices: list[str]) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(choices), text)


FLAGS: dict[str, dict[str, st.SearchStrategy]] = {
    "check": {"--json": st.none(), "--notes": st.none()},
    "render": {"--out": value(OUTS), "--check": st.none(), "--prune": st.none()},
    "compile": {"--out": value(OUTS), "--target": value(TARGETS), "--json": st.none(), "--sass": st.none(),
                "--export": value(OUTS)},
    "schema": {"--markdown": st.none()},
    "rules": {},
    "version": {},
    "bench": {"--target": value(TARGETS), "--shapes": value(SHAPES), "--json": value(OUTS), "--png": value(OUTS),
              "--compare": st.tuples(value(PATHS), value(PATHS)), "--rounds": value(NUMBERS),
              "--flush": value(["write", "read", "READ", "none"])},
    "tune": {"--kernel": value(["k", "x", ""]), "--target": value(TARGETS), "--shapes": value(SHAPES),
             "--budget": value(NUMBERS), "--write": st.none(), "--from-cache": st.none(), "--cache": value(PATHS + OUTS),
             "--workers": value(NUMBERS), "--knob": value(KNOBS), "--rounds": value(NUMBERS), "--verify": st.none(),
             "--flush": value(["write", "read", "x"])},
}
POSITIONAL = {"check": PATHS, "render": PATHS, "compile": PATHS, "bench": PATHS, "tune": PATHS}


# A tune that reaches the cache and the writer: the knobs and shape the cache's timings are for, --write.
TUNE_BASE = ["tune", "specs/k.toml", "--from-cache", "--cache", "cache.jsonl", "--target", "triton:sm90", "--shapes",
             "8192x8192x8192", *[a for k, v in SMALL.items() for a in ("--knob", f"{k}={','.join(map(str, v))}")],
             "--write"]


@st.composite
def invocations(draw, command: str) -> list[str]:
    args = [command]
    if command == "tune" and draw(st.booleans()):
        args = list(TUNE_BASE)  # then random flags on top (a later flag wins, a knob adds)
    elif command in POSITIONAL:
        args += draw(st.one_of(st.just(["specs/k.toml"]), st.lists(value(POSITIONAL[command]), max_size=2)))
    for flag in draw(st.lists(st.sampled_from(sorted(FLAGS[command])), max_size=3)) if FLAGS[command] else []:
        v = draw(FLAGS[command][flag])
        args += [flag] if v is None else [flag, *v] if isinstance(v, tuple) else [flag, v]
    return args


# --- what the files hold -------------------------------------------------------------------------------------
def mutated(good: bytes) -> st.SearchStrategy[bytes]:
    """The good bytes, cut, with bytes flipped or inserted, or replaced by random bytes."""
    cut = st.integers(0, len(good)).map(lambda n: good[:n])
    flipped = st.tuples(st.integers(0, len(good) - 1), st.integers(0, 255)).map(
        lambda t: good[: t[0]] + bytes([t[1]]) + good[t[0] + 1:])
    inserted = st.tuples(st.integers(0, len(good)), st.binary(min_size=1, max_size=8)).map(
        lambda t: good[: t[0]] + t[1] + good[t[0]:])
    return st.one_of(st.just(good), st.just(good), cut, flipped, inserted, st.binary(max_size=64),
                     st.sampled_from([b"\xef\xbb\xbf" + good, good.replace(b"\n", b"\r\n"), b"[1, 2]\n", b"{}"]))


files = st.fixed_dictionaries({"specs/k.toml": mutated(SPEC.encode()), "cache.jsonl": mutated(CACHE),
                               "record.json": mutated(RECORD.read_bytes())})


def sandbox(root: Path, contents: dict[str, bytes]) -> None:
    (root / "specs").mkdir()
    (root / "folder").mkdir()
    (root / "elsewhere").mkdir()  # what `link` points at: never owned by any command here
    (root / "elsewhere" / "keep.txt").write_text("a user's file")
    (root / "link").symlink_to(root / "elsewhere")
    (root / "notes.txt").write_text("a user's notes")
    for rel, data in contents.items():
        (root / rel).write_bytes(data)


def snapshot(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            out[rel] = ("link:" + os.readlink(p) if p.is_symlink() else "dir" if p.is_dir()
                        else hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def _after(args: list[str], flag: str) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args[:-1]) if a == flag]


def owned(args: list[str]) -> list[str]:
    """The paths (relative to the sandbox) the command may change: each owns a folder or file it names."""
    command = args[0]
    if command == "render":
        return _after(args, "--out")[-1:] or ["generated"]
    if command == "compile":
        return _after(args, "--export")[-1:]
    if command == "bench":
        return _after(args, "--json")[-1:] + _after(args, "--png")[-1:]
    if command == "tune":
        cache = (_after(args, "--cache")[-1:] or [".specgen/tune-cache.jsonl"])[0]
        paths = [cache, str(Path(cache).parent / "modules"), str(Path(cache).parent)]
        if "--write" in args:
            paths += [a for a in args[1:] if a.endswith(".toml")] + ["specs/k.toml"]
        return paths
    return []


def inside(rel: str, owners: list[str], root: Path) -> bool:
    real = (root / rel).resolve() if not (root / rel).is_symlink() else (root / rel).parent.resolve() / Path(rel).name
    for o in owners:
        base = (root / o).resolve()  # ('' or '.': the user named the current folder, which the command then owns)
        if real == base or base in real.parents:
            return True
    return False


EXAMPLES = {"version": 5, "rules": 5, "schema": 10}  # commands with (almost) no arguments: a few examples


@pytest.mark.parametrize("command", sorted(FLAGS))
def test_no_command_prints_a_traceback_or_touches_what_it_does_not_own(command: str) -> None:
    @settings(max_examples=EXAMPLES.get(command, 50), deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(invocations(command), files)
    def run(args: list[str], contents: dict[str, bytes]) -> None:
        _run(args, contents)

    run()


def _run(args: list[str], contents: dict[str, bytes]) -> None:
    with tempfile.TemporaryDirectory(prefix="specgen-fuzz-") as tmp:
        root = Path(tmp).resolve()
        sandbox(root, contents)
        before = snapshot(root)
        with contextlib.chdir(root):
            result = CliRunner().invoke(app, args)
        assert result.exception is None or isinstance(result.exception, SystemExit), (args, repr(result.exception),
                                                                                       result.output[-2000:])
        assert result.exit_code in (0, 1, 2), (args, result.exit_code, result.output[-2000:])
        assert "Traceback" not in result.output, (args, result.output[-2000:])
        after = snapshot(root)
        owners = owned(args)
        changed = sorted(rel for rel in set(before) | set(after) if before.get(rel) != after.get(rel))
        # the folders on the way to a path the user named (render --out new/deep/dir makes new and new/deep, as
        # mkdir -p does): new folders only, nothing in them but the way down
        made = {rel for rel in changed if rel not in before and after.get(rel) == "dir"
                and any(Path(rel) in Path(o).parents for o in owners)}
        assert all(inside(rel, owners, root) or rel in made for rel in changed), (args, changed, owners)
        assert (root / "elsewhere" / "keep.txt").read_text() == "a user's file"
        assert (root / "notes.txt").read_text() == "a user's notes"
    shutil.rmtree(root, ignore_errors=True)


def test_render_into_a_new_deep_folder_makes_only_the_way_down() -> None:
    """The case the fuzz drew now and then (render --out new/deep/dir): the folders on the way are made, nothing else
    outside the named folder changes."""
    _run(["render", "specs/k.toml", "--out", "new/deep/dir"],
         {"specs/k.toml": SPEC.encode(), "cache.jsonl": CACHE, "record.json": RECORD.read_bytes()})
