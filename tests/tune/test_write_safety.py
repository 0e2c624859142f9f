"""`specgen tune --write` never damages the spec file (issue 34): the new text is checked before the file
is touched and replaces it atomically, so a write error leaves the old file whole; the file's bytes outside
the tuned kernel's per_target tables stay as they were (CRLF line ends, a byte-order mark, JSON's own
indentation and escaping, a one-line flow YAML, a TOML inline array of kernels); a file it cannot write back
that way, or cannot write at all, is refused before any timing."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specgen.cli import app
from specgen.spec.load import load_file
from specgen.tune import writeback
from specgen.tune.writeback import WriteError, read_spec, write_back
from tests.tune.conftest import ROOT, SMALL, run_tune

EDITS = [(("per_target", "triton:sm90", "tile"), {"m": 128, "n": 128, "k": 64}),
         (("per_target", "triton:sm90", "triton", "num_warps"), 4)]
SUMMARY = ["triton:sm90 default: a tune"]
KERNEL = {"name": "k", "description": "caf\u00e9 \u2014 a kernel", "kind": "gemm", "a": {"dtype": "f16"},
          "b": {"dtype": "f16"}, "out": {"dtype": "f16"}, "tile": {"m": 128, "n": 256, "k": 64},
          "targets": ["triton:sm90"]}
# the knobs and shape tests/tune/conftest.py's SMALL space times, as CLI flags
KNOBS = [a for k, v in SMALL.items() for a in ("--knob", f"{k}={','.join(map(str, v))}")]


def _tuned(path: Path) -> None:
    """The file loads and carries the edits."""
    eff = load_file(path)[0].spec.for_target("triton:sm90")
    assert (eff.tile.n, eff.triton.num_warps) == (128, 4)


def _only_added(before: str, after: str) -> None:
    """`after` is `before` with text inserted only: every original character kept, in order."""
    it = iter(after)
    assert all(c in it for c in before), "an original character was changed or dropped"


def _no_temporaries(folder: Path) -> None:
    assert not [p.name for p in folder.iterdir() if p.name.endswith(".specgen-tmp")]


# --- the bytes a write keeps ----------------------------------------------------------------------------
def test_crlf_line_ends_and_a_bom_are_kept(spec_copy) -> None:
    path = spec_copy()
    lf = path.read_bytes()
    path.write_bytes(b"\xef\xbb\xbf" + lf.replace(b"\n", b"\r\n"))
    write_back(path, 0, EDITS, SUMMARY)
    data = path.read_bytes()
    assert data.startswith(b"\xef\xbb\xbf") and data.count(b"\n") == data.count(b"\r\n") > lf.count(b"\n")
    _only_added(lf.decode(), data[3:].decode().replace("\r\n", "\n"))
    _tuned(path)


@pytest.mark.parametrize("indent", [2, 4, "\t"])
def test_json_keeps_its_indentation_and_non_ascii(tmp_path: Path, indent) -> None:
    """Hand-written JSON (objects on one line inside an indented file, non-ASCII as is): only the new
    per_target value is inserted, in the file's indentation; a second write replaces that value alone."""
    pad = indent if isinstance(indent, str) else " " * indent
    lines = [f'{pad * 2}"{k}": {json.dumps(v, ensure_ascii=False)}' for k, v in KERNEL.items()]
    text = "{\n" + pad + '"kernels": [\n' + pad + "  {\n" + ",\n".join(lines) + "\n" + pad + "  }\n" + pad + "]\n}\n"
    path = tmp_path / "spec.json"
    path.write_text(text)
    write_back(path, 0, EDITS, SUMMARY)
    after = path.read_text()
    _only_added(text, after)
    assert "caf\u00e9 \u2014" in after and "\\u" not in after
    assert f'\n{pad * 2}"per_target": {{\n{pad * 3}"triton:sm90": {{\n' in after
    _tuned(path)
    write_back(path, 0, [(("per_target", "triton:sm90", "tile"), {"m": 64, "n": 128, "k": 64})], SUMMARY)
    again = path.read_text()
    assert again.replace('"m": 64', '"m": 128', 1) == after


def test_json_on_one_line_stays_on_one_line_and_escaped_stays_escaped(tmp_path: Path) -> None:
    path = tmp_path / "spec.json"
    text = json.dumps({"kernels": [KERNEL]})  # ensure_ascii: the file writes \u00e9
    path.write_text(text)
    write_back(path, 0, EDITS, SUMMARY)
    after = path.read_text()
    assert "\n" not in after and after.isascii() and after.startswith(text[:-3])
    _tuned(path)


@pytest.mark.parametrize(("suffix", "text", "kept"), [
    (".yaml", "{kernels: [{name: k, kind: gemm, a: {dtype: f16}, b: {dtype: f16}, out: {dtype: f16}, tile: {m: 128, "
              "n: 256, k: 64}, targets: ['triton:sm90'], description: 'a line well over eighty columns wide, to wrap'}]}\n", 4),
    (".toml", 'kernels = [{name = "k", kind = "gemm", a = {dtype = "f16"}, b = {dtype = "f16"}, out = {dtype = "f16"}, '
              'tile = {m = 128, n = 256, k = 64}, targets = ["triton:sm90"]}]\n', 3),
], ids=["one-line flow YAML", "TOML inline array of kernels"])
def test_a_kernel_written_on_one_line_stays_on_one_line(tmp_path: Path, suffix: str, text: str, kept: int) -> None:
    """Not re-wrapped at 80 columns (YAML), not turned into tables (TOML): the new keys go inside the line."""
    path = tmp_path / f"spec{suffix}"
    path.write_text(text)
    write_back(path, 0, EDITS, SUMMARY)
    after = path.read_text()
    assert after.count("\n") == 1 and after.startswith(text[:-kept])
    _tuned(path)


def test_a_yaml_layout_the_round_trip_would_change_is_refused_unwritten(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    text = "kernels:\n  - name: k\n    kind:     gemm\n    a: {dtype: f16}\n    b: {dtype: f16}\n    out: {dtype: f16}\n" \
           "    tile: {m: 128, n: 256, k: 64}\n    targets: ['triton:sm90']\n"
    path.write_text(text)
    with pytest.raises(WriteError, match="cannot keep this file's layout"):
        write_back(path, 0, EDITS, SUMMARY)
    assert path.read_text() == text


def test_mixed_line_ends_are_refused_unwritten(spec_copy) -> None:
    path = spec_copy()
    data = path.read_bytes().replace(b"\n", b"\r\n", 3)
    path.write_bytes(data)
    with pytest.raises(WriteError, match="mixes CRLF and LF"):
        write_back(path, 0, EDITS, SUMMARY)
    assert path.read_bytes() == data


def test_a_link_is_followed_and_kept(spec_copy, tmp_path: Path) -> None:
    real = spec_copy()
    link = tmp_path / "link.toml"
    link.symlink_to(real)
    write_back(link, 0, EDITS, SUMMARY)
    assert link.is_symlink() and os.readlink(link) == str(real)
    _tuned(real)


def test_the_file_mode_is_kept(spec_copy) -> None:
    path = spec_copy()
    path.chmod(0o640)
    write_back(path, 0, EDITS, SUMMARY)
    assert path.stat().st_mode & 0o777 == 0o640


# --- write errors ---------------------------------------------------------------------------------------
def test_a_write_error_midway_leaves_the_old_file_whole(spec_copy, monkeypatch) -> None:
    """A disk that fills up while the new text is written: the error is said, the spec is byte for byte
    what it was, and no temporary file is left beside it."""
    path = spec_copy()
    before = path.read_bytes()
    real_fsync = os.fsync

    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writeback.os, "fsync", full_disk)
    with pytest.raises(WriteError, match="No space left on device; the file is as it was"):
        write_back(path, 0, EDITS, SUMMARY)
    monkeypatch.setattr(writeback.os, "fsync", real_fsync)
    assert path.read_bytes() == before
    _no_temporaries(path.parent)


def test_a_file_size_limit_leaves_the_spec_whole(spec_copy, tmp_path: Path) -> None:
    """A real short write: the CLI in a process whose files may not grow past 4 KiB (RLIMIT_FSIZE, SIGXFSZ
    ignored so the write fails with EFBIG): exit 1 with the error, the spec untouched."""
    path = spec_copy()
    cache = tmp_path / "c.jsonl"
    run_tune(path, cache, overrides=SMALL)  # the timings --from-cache chooses from
    before = path.read_bytes()
    assert len(before) > 4096
    script = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
              "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096)); from specgen.cli import main; sys.argv = "
              f"{['specgen', 'tune', str(path), '--kernel', 'gemm_bf16', '--from-cache', '--write', '--cache', str(cache), '--target', 'triton:sm90', '--shapes', '8192x8192x8192', *KNOBS]!r}; main()")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "File too large; the file is as it was" in proc.stderr and "Traceback" not in proc.stderr
    assert path.read_bytes() == before
    _no_temporaries(path.parent)


def test_a_file_edited_during_the_tune_is_not_overwritten(spec_copy, tmp_path: Path, monkeypatch) -> None:
    path = spec_copy()
    real = writeback.read_spec

    def edited_meanwhile(p: Path):  # the user saves the file while the GPU times
        spec = real(p)
        path.write_text(path.read_text().replace("n = 256", "n = 128", 1))
        return spec

    monkeypatch.setattr(writeback, "read_spec", edited_meanwhile)
    edited = path.read_text().replace("n = 256", "n = 128", 1)
    with pytest.raises(WriteError, match="changed since the tune read it"):
        write_back(path, 0, EDITS, SUMMARY)
    assert path.read_text() == edited


# --- refused before any timing --------------------------------------------------------------------------
def _cli_tune(path: Path, cache: Path, *extra: str):
    return CliRunner().invoke(app, ["tune", str(path), "--kernel", "gemm_bf16", "--from-cache", "--cache", str(cache),
                                    "--target", "triton:sm90", "--shapes", "8192x8192x8192", *KNOBS, *extra])


def test_a_read_only_spec_is_refused_before_the_tune(spec_copy, tmp_path: Path) -> None:
    path = spec_copy()
    path.chmod(0o444)
    before = path.read_bytes()
    r = _cli_tune(path, tmp_path / "none.jsonl", "--write")  # no cache at all: the refusal comes first
    assert r.exit_code == 1 and f"--write: {path} is read-only" in r.output and "holds no timing" not in r.output
    assert path.read_bytes() == before


def test_a_read_only_folder_is_refused(spec_copy, monkeypatch) -> None:
    """The new file is written beside the old one: a folder it cannot write into is refused (checked
    through os.access, which root's 0555 folders would pass: the check itself is pinned)."""
    path = spec_copy()
    real = os.access
    monkeypatch.setattr(writeback.os, "access", lambda p, mode: not (Path(p) == path.parent and mode & os.W_OK)
                        and real(p, mode))
    with pytest.raises(WriteError, match="is read-only: --write writes the new"):
        read_spec(path)


def test_cli_write_keeps_crlf_and_says_what_it_wrote(spec_copy, tmp_path: Path) -> None:
    path = spec_copy()
    cache = tmp_path / "c.jsonl"
    run_tune(path, cache, overrides=SMALL)
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    r = _cli_tune(path, cache, "--write")
    assert r.exit_code == 0, r.output
    assert f"wrote 9 changes into {path}" in r.output
    assert path.read_bytes().count(b"\n") == path.read_bytes().count(b"\r\n")
    _tuned_default = load_file(path)[0].spec.for_target("triton:sm90")
    assert (_tuned_default.tile.n, _tuned_default.triton.num_warps) == (128, 4)


# --- the tuner's own comments ---------------------------------------------------------------------------
TUNED = """\
[[kernels]]
name = "k"
kind = "gemm"
a = { dtype = "f16" }
b = { dtype = "f16" }
out = { dtype = "f16" }
tile = { m = 128, n = 256, k = 64 }
targets = ["triton:sm90"]
# A hand-written note: triton:sm90 default: kept whatever the tuner does.

[[kernels.variants]]
when = { m_max = 16 }
tile = { m = 16, n = 64, k = 64 }

[kernels.per_target."triton:sm90"]
tile = { m = 128, n = 128, k = 64 }
# triton:sm90 default: specgen tune 2026-11-01 on GPU, shapes 8x8x8: tile.m = 128, tile.n = 128, tile.k = 64: 1.1x the incumbent
# triton:sm90 default: specgen tune 2026-11-02 on GPU, shapes 8x8x8: tile.m = 128, tile.n = 128, tile.k = 64: 1.2x the incumbent
# triton:sm90 default: specgen tune 2026-11-03 on GPU, shapes 8x8x8: tile.m = 64, tile.n = 128, tile.k = 64: 1.3x the incumbent
# triton:sm90 variant 0 (M <= 32): specgen tune 2026-11-03 on GPU, shapes 8x8x8: tile.m = 16, tile.n = 64, tile.k = 64: 1.3x the incumbent
# triton:sm90 variant 0 (M <= 16): specgen tune 2026-11-03 on GPU, shapes 8x8x8: tile.m = 16, tile.n = 64, tile.k = 64: 1.3x the incumbent
# cute:sm90 default: specgen tune 2026-11-03 on GPU, shapes 8x8x8: tile.m = 64, tile.n = 128, tile.k = 64: 1.3x the incumbent
"""


def test_tuner_comments_keep_one_per_existing_slot_describing_its_config() -> None:
    """The latest comment of each slot whose config it describes stays; older ones, ones for another config
    (tile.m = 64), for a variant whose bounds changed (M <= 32) or a target the kernel no longer lists
    (cute:sm90) go; the hand-written note stays, though it names a slot."""
    from specgen.tune.writeback import tidy_tuner_comments

    kept = tidy_tuner_comments(TUNED, ".toml", 0).splitlines()
    tuner = [ln for ln in kept if "specgen tune" in ln]
    assert tuner == [ln for ln in TUNED.splitlines() if "2026-11-02" in ln or "variant 0 (M <= 16)" in ln]
    assert "# A hand-written note: triton:sm90 default: kept whatever the tuner does." in kept
    assert [ln for ln in TUNED.splitlines() if "specgen tune" not in ln] == [ln for ln in kept if "specgen tune" not in ln]


def test_a_second_tune_replaces_its_own_comment(spec_copy, tmp_path: Path) -> None:
    """Two tunes of one slot to two winners: one comment for the slot, the second tune's."""
    path = spec_copy()
    cache = tmp_path / "c.jsonl"
    run_tune(path, cache, overrides={**SMALL, "tile.n": (256,)}, write=True)  # the fake GPU's best at n = 256
    first = [ln for ln in path.read_text().splitlines() if ln.startswith("# triton:sm90 default: specgen tune")]
    assert len(first) == 1 and "tile.n = 256" in first[0]
    run_tune(path, tmp_path / "c2.jsonl", overrides=SMALL, write=True)  # then its best of all, n = 128
    second = [ln for ln in path.read_text().splitlines() if ln.startswith("# triton:sm90 default: specgen tune")]
    assert len(second) == 1 and "tile.n = 128" in second[0]
