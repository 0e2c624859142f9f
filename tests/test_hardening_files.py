"""Files and parsers (issue 5): whatever a path names and whatever a file holds, `specgen check` and
`specgen render` exit 1 with `file:line:column: message` (never a traceback, a hang, or exit 0 on
nothing); duplicate keys, non-UTF-8 bytes, YAML aliases, paths that name no spec, and user text that
would drive the terminal are each said as what they are."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specgen.cli import app
from specgen.spec.load import SpecError, load_paths, load_text
from specgen.spec.positions import toml_positions

ROOT = Path(__file__).resolve().parents[1]
GOOD = (ROOT / "specs" / "gemm_bf16.toml").read_text()


def cli(*args: str):
    return CliRunner().invoke(app, list(args))


def refused(result) -> str:
    """The run ended in exit 1 with a clean message: no traceback, nothing raised past the CLI."""
    assert result.exit_code == 1, (result.exit_code, result.output, result.exception)
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    return result.output


def issues(text: str, suffix: str):
    with pytest.raises(SpecError) as info:
        load_text(text, f"spec{suffix}", suffix)
    return info.value.issues


# --- duplicate keys ----------------------------------------------------------------------------------
def test_duplicate_json_keys_name_both_positions():
    text = '{"kernels": [\n  {"name": "x",\n   "kind": "gemm",\n   "name": "y"}]}'
    (issue,) = issues(text, ".json")
    assert (issue.line, issue.column, issue.path) == (4, 4, "kernels[0].name")
    assert "duplicate key 'name' (first at line 2, column 4)" in issue.message


def test_duplicate_yaml_keys_name_both_positions():
    text = "kernels:\n  - name: x\n    tile: {m: 128, n: 64}\n    tile: {m: 64}\n"
    (issue,) = issues(text, ".yaml")
    assert (issue.line, issue.column) == (4, 5)
    assert "duplicate key 'tile' (first at line 3, column 5)" in issue.message


def test_duplicate_nested_yaml_keys():
    (issue,) = issues("kernels:\n  - tile: {m: 128, m: 64}\n", ".yaml")
    assert (issue.line, issue.column) == (2, 20) and "first at line 2, column 12" in issue.message


# --- encodings ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("data", "line", "column"), [
    (b'[[kernels]]\nname = "caf\xe9"\n', 2, 12),                  # Latin-1
    (b"\xff\xfe\x00\x00garbage", 1, 1),                            # binary
    (b'{"kernels": [\n\n  {"description": "\xe2\x82 ok"}]}', 3, 20),  # a truncated UTF-8 sequence
])
def test_non_utf8_files_name_the_first_bad_byte(tmp_path, data, line, column):
    for suffix in (".toml", ".json", ".yaml"):
        f = tmp_path / f"bad{suffix}"
        f.write_bytes(data)
        with pytest.raises(SpecError) as info:
            load_paths([f])
        (issue,) = info.value.issues
        assert (issue.file, issue.line, issue.column) == (str(f), line, column)
        assert issue.message.startswith(f"not UTF-8: byte 0x{data[data.index(next(b for b in data if b >= 0x80).to_bytes(1, 'big'))]:02x}")


def test_a_utf8_bom_is_accepted(tmp_path):
    f = tmp_path / "bom.toml"
    f.write_bytes(b"\xef\xbb\xbf" + GOOD.encode())
    assert load_paths([f])


# --- YAML aliases ----------------------------------------------------------------------------------------
def test_yaml_alias_bomb_is_refused_unexpanded(tmp_path):
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 12)]
    lines += ["kernels: *a11"]
    f = tmp_path / "bomb.yaml"
    f.write_text("\n".join(lines) + "\n")
    start = time.process_time()
    out = refused(cli("check", str(f)))
    assert time.process_time() - start < 10.0  # expanded, the bomb holds 9^12 strings: it would never end
    assert f"{f}:2:10: YAML aliases (*name) are not allowed" in out


def test_yaml_merge_keys_are_aliases_too():
    (issue,) = issues("base: &b {m: 128}\nkernels:\n  - <<: *b\n", ".yaml")
    assert (issue.line, issue.column) == (3, 9) and "aliases" in issue.message


# --- paths that name no spec -----------------------------------------------------------------------------
def test_a_folder_named_like_a_spec_file_is_an_error(tmp_path):
    (tmp_path / "x.toml").mkdir()
    out = refused(cli("check", str(tmp_path / "x.toml")))
    assert "the folder holds no spec files" in out


def test_render_of_an_empty_folder_removes_nothing(tmp_path):
    specs, out_dir = tmp_path / "specs", tmp_path / "out"
    specs.mkdir()
    (specs / "k.toml").write_text(GOOD)
    assert cli("render", str(specs), "--out", str(out_dir)).exit_code == 0
    owned = sorted(p.name for p in (out_dir / "triton").iterdir())
    (tmp_path / "empty.toml").mkdir()
    (tmp_path / "empty").mkdir()
    for path in ("empty.toml", "empty"):
        refused(cli("render", str(tmp_path / path), "--out", str(out_dir)))
    assert sorted(p.name for p in (out_dir / "triton").iterdir()) == owned


def test_a_symlink_loop_is_said_to_be_one(tmp_path):
    loop = tmp_path / "loop.toml"
    os.symlink(loop, loop)
    r = cli("check", str(loop))
    assert r.exit_code == 2 and "symlink loop" in r.output and "no such file" not in r.output
    folder = tmp_path / "specs"
    folder.mkdir()
    (folder / "k.toml").write_text(GOOD)
    os.symlink(folder / "a.toml", folder / "b.toml")
    os.symlink(folder / "b.toml", folder / "a.toml")
    out = refused(cli("check", str(folder)))
    assert "symlink loop" in out


def test_a_dangling_link_is_said_to_be_one(tmp_path):
    link = tmp_path / "gone.toml"
    os.symlink(tmp_path / "nowhere.toml", link)
    r = cli("check", str(link))
    assert r.exit_code == 2 and "dangling symlink" in r.output


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX only")
def test_a_fifo_is_not_read(tmp_path):
    fifo = tmp_path / "pipe.toml"
    os.mkfifo(fifo)
    assert "not a regular file" in refused(cli("check", str(fifo)))


# --- messages ------------------------------------------------------------------------------------------
def test_user_text_is_quoted_inertly(tmp_path):
    f = tmp_path / "evil.json"
    kernel = json.loads(json.dumps({"name": "k9", "kind": "gemm", "a": {"dtype": "bf16"}, "b": {"dtype": "bf16"},
                                    "out": {"dtype": "bf16"}, "tile": {"m": 128, "n": 128, "k": 64},
                                    "targets": ["triton:sm90\n\x1b[2Jerror forged"]}))
    kernel["x\nerror: forged line\x1b[31m"] = 1
    f.write_text(json.dumps({"kernels": [kernel]}))
    out = refused(cli("check", str(f)))
    assert "\x1b" not in out and "\nerror: forged" not in out and "\nerror forged" not in out
    assert "\\x1b[31m" in out and "\\n" in out
    assert all(line.startswith("error ") for line in out.splitlines())


@pytest.mark.parametrize(("text", "suffix", "says"), [
    ("", ".yaml", "the file is empty"),
    ("# only a comment\n", ".yaml", "the file is empty"),
    ("", ".toml", "the file is empty"),
    ("null", ".json", "the file is empty"),
    ("- 1\n- 2\n", ".yaml", "the file holds a list"),
    ("[1, 2]", ".json", "the file holds a list"),
    ('"text"', ".json", "the file holds str"),
    ("kernels: [5]\n", ".yaml", "expected a table (mapping) of fields"),
])
def test_files_of_the_wrong_shape_say_what_a_spec_file_holds(text, suffix, says):
    found = issues(text, suffix)
    message = " ".join(i.message for i in found)
    assert says in message and "instance of" not in message and "SpecFile" not in message


# --- hostile files: never a traceback ------------------------------------------------------------------------
HOSTILE: dict[str, bytes] = {
    "binary.toml": bytes(range(256)) * 4,
    "nul.toml": b'[[kernels]]\nname = "a\x00b"\n',
    "latin1.yaml": "kernels:\n  - name: caf\xe9\n".encode("latin-1"),
    "empty.json": b"",
    "spaces.yaml": b"   \n\n",
    "huge_int.toml": b"[[kernels]]\nname = " + b"9" * 5000 + b"\n",
    "huge_int.json": b'{"kernels": [{"tile": {"m": ' + b"9" * 5000 + b"}}]}",
    "huge_int.yaml": b"kernels:\n  - tile: {m: " + b"9" * 5000 + b"}\n",
    "huge_float.json": b'{"kernels": [{"tile": {"m": 1e99999}}]}',
    "deep.json": b"[" * 100_000 + b"]" * 100_000,
    "deep.yaml": b"[" * 20_000 + b"]" * 20_000,
    "deep.toml": b"x = " + b"[" * 20_000 + b"]" * 20_000,
    "deep_table.toml": b"[" + b".".join([b"a"] * 5000) + b"]\n",
    "surrogate.json": b'{"kernels": [{"name": "\\ud800", "description": "\\udfff"}]}',
    "tags.yaml": b"kernels: !!python/object:os.system [ls]\n",
    "binary_tag.yaml": b"kernels:\n  - name: !!binary aGVsbG8=\n",
    "timestamp.yaml": b"kernels:\n  - name: 2001-12-14\n",
    "set.yaml": b"kernels: !!set {a, b}\n",
    "complex_key.yaml": b"? [a, b]\n: 1\n",
    "int_keys.yaml": b"1: 2\nkernels: []\n",
    "datetime.toml": b"kernels = 1979-05-27T07:32:00Z\n",
    "string.json": b'"kernels"',
    "control.yaml": b"kernels:\x07\n",
    "long_line.toml": b'[[kernels]]\nname = "' + b"n" * 2_000_000 + b'"\n',
    "many_errors.json": json.dumps({"kernels": [{"tile": {"m": "x"}}] * 2000}).encode(),
    "crlf.toml": GOOD.replace("\n", "\r\n").replace('name = "gemm_bf16"', 'name = "__init__"').encode(),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
@pytest.mark.parametrize("command", ["check", "render"])
def test_hostile_files_exit_1_with_a_clean_message(tmp_path, name, command):
    f = tmp_path / name
    f.write_bytes(HOSTILE[name])
    args = [command, str(f)] + (["--out", str(tmp_path / "out")] if command == "render" else [])
    out = refused(cli(*args))
    assert out.startswith(f"error {f}:"), out[:300]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.py"))
    assert len(out) < 400_000


# --- size ------------------------------------------------------------------------------------------------
def test_toml_positions_are_linear_in_the_file_size():
    """The position scanner used to copy the rest of the text at each table header and the whole prefix
    at each multi-line string: quadratic, a 50 MB file never finished. 40k headers now take well
    under a second of work."""
    text = '[[kernels]]\nname = "x"\ndescription = """a\nb"""\n' * 40_000
    start = time.process_time()
    positions = toml_positions(text)
    assert time.process_time() - start < 3.0
    assert positions[("kernels", 39_999, "description")] == (40_000 * 4 - 1, 1)


def test_files_over_the_size_limit_are_refused_unread(tmp_path, monkeypatch):
    import specgen.spec.load as load

    monkeypatch.setattr(load, "MAX_FILE_BYTES", 1000)
    f = tmp_path / "big.toml"
    f.write_text(GOOD + "#" * 1000)
    with pytest.raises(SpecError, match=r"bytes > 1000, the largest spec file specgen reads"):
        load_paths([f])
