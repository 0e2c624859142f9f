"""`specgen compile --export DIR` holds render's rules for --out (specgen/kinds/gemm/designs/cute_export/export.py): it
writes only what its MANIFEST.json owns, never through a link, never over a file it did not write, never
into the root, a system folder, a file or the current folder that is not an export; an export is whole or
nothing (a failed kernel, a full disk, a kill) and the next run cleans what a killed one left.

The CuTe DSL's compile is faked (`compile_config` writes small .h/.o files where `export_to_c` would),
as are the rendered module and the DSL's runtime library: each export takes milliseconds. The real
export runs end to end in test_export.py."""

from __future__ import annotations

import errno
import fcntl
import importlib.util
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from specgen.cli import app
from specgen.kinds.gemm.designs.cute_export import export as ex

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "specs" / "gemm_bf16.toml"  # gemm_bf16 (9 configs) and gemm_small_bf16, on sm90 and sm100
GEN = "specgen compile --export"
pytestmark = pytest.mark.skipif(importlib.util.find_spec("cutlass") is None,
                                reason="compile --export needs the CuTe DSL installed (it is faked here)")


class Killed(BaseException):
    """kill -9 in-process: nothing of specgen's catches it, as nothing runs after a real one."""


def fake_compile(state: dict):
    def compile_config(module, kernel, tag, variant, cute_dir: Path) -> None:
        if kernel.name == state["fail"]:
            raise RuntimeError("the DSL refused it\nsecond line")
        version = state["version"]
        (cute_dir / f"{kernel.name}_{tag}.h").write_text(f"// {version} {kernel.name} {tag}\n")
        (cute_dir / f"{kernel.name}_{tag}.o").write_bytes(b"\x7fELF" + version.encode())
        if version == "v1" and tag == "default":  # a file v2 no longer writes: removed by v2
            (cute_dir / f"{kernel.name}_retired.o").write_bytes(b"\x7fELF retired")
        state["compiled"] += 1
    return compile_config


@pytest.fixture
def state(monkeypatch, tmp_path) -> dict:
    """The fake DSL (`version` goes into every file it writes; `fail` names a kernel it refuses) and the
    placeholders of the rendered modules the export checks for."""
    s = {"version": "v1", "fail": "", "compiled": 0, "gen": tmp_path / "gen", "spec": SPEC, "small": tmp_path / "small.toml"}
    text = SPEC.read_text()
    s["small"].write_text(text[text.index('[[kernels]]\nname = "gemm_small_bf16"'):])  # one kernel, one config
    for name in ("gemm_bf16", "gemm_small_bf16", "gemm_bf16_sm100", "gemm_small_bf16_sm100"):
        (s["gen"] / "cute").mkdir(parents=True, exist_ok=True)
        (s["gen"] / "cute" / f"{name}.py").write_text("# placeholder\n")
    lib = tmp_path / "libfake.a"
    lib.write_bytes(b"!<arch>\n")
    monkeypatch.setattr(ex, "compile_config", fake_compile(s))
    monkeypatch.setattr(ex, "_rendered_module", lambda path, ls: SimpleNamespace())
    monkeypatch.setattr(ex, "dsl_runtime_library", lambda: lib)
    monkeypatch.setattr("specgen.runtime.cute.cutlass_version", lambda: "4.8.1")
    return s


def export(state: dict, out: object, *targets: str):
    args = ["compile", str(state["spec"]), "--out", str(state["gen"]), "--export", str(out)]
    for t in targets or ("cute:sm90",):
        args += ["--target", t]
    return CliRunner().invoke(app, args)


def refused(r, code: int = 1) -> str:
    """Exit 1 (what DIR holds, a write) or 2 (DIR itself): one `error: ` line, no traceback."""
    assert r.exit_code == code, (r.exit_code, r.output, r.exception)
    assert isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1 and "Traceback" not in r.output, r.stderr
    return r.stderr.removeprefix("error: ").rstrip("\n")


def tree(root: Path) -> dict[str, object]:
    """Every entry under root, hidden ones too: a file's bytes, a link's target."""
    out: dict[str, object] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(folder) / name
            rel = p.relative_to(root).as_posix()
            out[rel] = f"-> {os.readlink(p)}" if p.is_symlink() else p.read_bytes() if p.is_file() else "/"
    return out


def consistent(out: Path, version: str) -> None:
    """A complete export of `version`: its manifest lists exactly the files there, and nothing was left
    over (no stage, no commit, no temporary)."""
    manifest = json.loads((out / "MANIFEST.json").read_text())
    assert manifest["generator"] == GEN and manifest["complete"] is True
    on_disk = {rel for rel, v in tree(out).items() if v != "/" and rel != "MANIFEST.json"}
    assert set(manifest["files"]) == on_disk
    assert not [rel for rel in tree(out) if rel.startswith(".") or "/." in rel]
    assert (out / "cute" / "gemm_small_bf16_default.h").read_text().startswith(f"// {version} ")
    assert (out / "cute" / "gemm_small_bf16_retired.o").exists() == (version == "v1")


# --- what it writes ---------------------------------------------------------------------------------------------
def test_the_manifest_is_specgens_and_lists_every_file(state, tmp_path):
    out = tmp_path / "out"
    r = export(state, out)
    assert r.exit_code == 0 and "2 exported, 0 failed -> " in r.stdout, r.output
    consistent(out, "v1")
    state["version"] = "v2"
    assert export(state, out).exit_code == 0
    consistent(out, "v2")  # v1's retired object is removed: the manifest owned it


def test_files_it_never_wrote_are_kept(state, tmp_path):
    out = tmp_path / "out"
    assert export(state, out).exit_code == 0
    (out / "README.md").write_text("mine\n")
    (out / "cute" / "notes.txt").write_text("mine too\n")
    state["version"] = "v2"
    assert export(state, out).exit_code == 0
    assert (out / "README.md").read_text() == "mine\n" and (out / "cute" / "notes.txt").read_text() == "mine too\n"
    assert not (out / "cute" / "gemm_small_bf16_retired.o").exists()


def test_an_export_from_before_the_generator_field_is_still_its_own(state, tmp_path):
    out = tmp_path / "out"
    assert export(state, out).exit_code == 0
    manifest = json.loads((out / "MANIFEST.json").read_text())
    legacy = {"nvidia_cutlass_dsl": "4.8.1", "kernels": manifest["kernels"]}  # what specgen wrote before
    (out / "MANIFEST.json").write_text(json.dumps(legacy, indent=2) + "\n")
    for retired in (out / "cute").glob("*_retired.o"):  # not a config: the legacy manifest cannot own them
        retired.unlink()
    state["version"] = "v2"
    r = export(state, out)
    assert r.exit_code == 0, r.output
    consistent(out, "v2")


def test_each_arch_is_its_own_export_and_both_are_written_or_neither(state, tmp_path):
    out = tmp_path / "out"
    assert export(state, out, "cute:sm90", "cute:sm100").exit_code == 0
    assert sorted(p.name for p in out.iterdir()) == ["sm100", "sm90"]
    for arch in ("sm90", "sm100"):
        consistent(out / arch, "v1")
    before = tree(out)
    state.update(version="v2", fail="gemm_small_bf16")  # fails on both archs, after gemm_bf16 compiled
    r = export(state, out, "cute:sm90", "cute:sm100")
    assert r.exit_code == 1 and "nothing written to" in r.stdout
    assert tree(out) == before


# --- reported inputs: each refused, nothing written, before anything compiles -------------------------------
@pytest.mark.parametrize("name", ["CMakeLists.txt", "MANIFEST.json", "cute/gemm_bf16_default.o", "src/gemm_bf16.cpp"])
def test_a_users_file_is_never_overwritten(state, tmp_path, name):
    out = tmp_path / "out"
    (out / name).parent.mkdir(parents=True)
    (out / name).write_text("the user's\n")
    before = tree(out)
    msg = refused(export(state, out))
    assert msg == (f"{out / name} exists and was not written by {GEN}: move it or choose another --export folder "
                   "(nothing was written)")
    assert tree(out) == before and state["compiled"] == 0


def test_a_render_manifest_is_not_an_export(state, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "MANIFEST.json").write_text(json.dumps({"files": [], "kernels": {}}))  # render's, not the export's
    assert "MANIFEST.json exists and was not written by" in refused(export(state, out))


@pytest.mark.parametrize("link", ["cute", "lib", "include", "CMakeLists.txt"])
def test_a_link_inside_dir_is_refused(state, tmp_path, link):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep").write_text("x\n")
    out.mkdir()
    (out / link).symlink_to(elsewhere / "keep" if link == "CMakeLists.txt" else elsewhere)
    before, outside = tree(out), tree(elsewhere)
    msg = refused(export(state, out))
    assert msg == (f"{out / link} is a link (to {os.readlink(out / link)}): {GEN} writes nothing through a link: "
                   "remove it or choose another --export folder (nothing was written)")
    assert tree(out) == before and tree(elsewhere) == outside


def test_an_arch_folder_that_is_a_link_is_refused(state, tmp_path):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    elsewhere.mkdir()
    out.mkdir()
    (out / "sm90").symlink_to(elsewhere)
    assert "is a link" in refused(export(state, out, "cute:sm90", "cute:sm100"))
    assert not list(elsewhere.iterdir()) and sorted(p.name for p in out.iterdir()) == ["sm90"]


def test_a_manifest_listing_a_path_outside_is_refused(state, tmp_path):
    out = tmp_path / "out"
    assert export(state, out).exit_code == 0
    manifest = json.loads((out / "MANIFEST.json").read_text())
    manifest["files"].append("../victim")
    (out / "MANIFEST.json").write_text(json.dumps(manifest))
    (tmp_path / "victim").write_text("x\n")
    assert "lists '../victim', which is not a plain relative path inside --export" in refused(export(state, out))
    assert (tmp_path / "victim").read_text() == "x\n"


@pytest.fixture
def nothing_written(monkeypatch, state):
    """For DIR that must be refused before anything: whatever the export would do next fails the test."""
    def boom(*args, **kwargs):
        raise AssertionError("the export went on past a DIR it must refuse")
    for name in ("locked", "atomic_write", "compile_config"):
        monkeypatch.setattr(ex, name, boom)
    return state


@pytest.mark.parametrize(("raw", "msg"), [
    ("", "--export '': the empty path names no folder: name a folder of its own, e.g. --export out/kernels"),
    ("/", "--export /: the filesystem root is never an export folder: name a folder of its own, e.g. --export out/kernels"),
    ("/usr/lib", "--export /usr/lib: /usr/lib is a system folder: name a folder of its own, e.g. --export out/kernels"),
    ("/etc/specgen", "--export /etc/specgen: /etc/specgen is a system folder: name a folder of its own, e.g. --export out/kernels"),
    ("/tmp", "--export /tmp: /tmp is a system folder: name a folder of its own, e.g. --export out/kernels"),
])
def test_the_root_a_system_folder_and_the_empty_path_are_refused(nothing_written, raw, msg):
    assert refused(export(nothing_written, raw), 2) == msg


def test_lib_through_its_link_and_home_are_system_folders(nothing_written):
    if Path("/lib").is_symlink():  # merged /usr: /lib -> usr/lib
        assert refused(export(nothing_written, "/lib"), 2).startswith("--export /lib: /usr/lib is a system folder")
    home = Path(os.path.expanduser("~")).resolve()
    assert refused(export(nothing_written, home), 2) == f"--export {home}: {home} is a system folder: name a " \
                                                         "folder of its own, e.g. --export out/kernels"


def test_a_file_is_not_a_folder(nothing_written, tmp_path):
    f = tmp_path / "file"
    f.write_text("x\n")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    advice = "name a folder of its own, e.g. --export out/kernels (specgen creates it)"
    assert refused(export(nothing_written, f), 2) == f"--export {f} is a file, not a folder: {advice}"
    assert refused(export(nothing_written, f / "sub"), 2) == f"--export {f / 'sub'}: {f} is a file, not a folder: {advice}"
    assert "is a link to nothing, not a folder" in refused(export(nothing_written, tmp_path / "dangling"), 2)
    assert f.read_text() == "x\n"


def test_the_current_folder_only_when_it_already_holds_an_export(state, tmp_path, monkeypatch):
    project = tmp_path / "project"
    (project / "out").mkdir(parents=True)
    monkeypatch.chdir(project)
    no = "holds no export of specgen (no MANIFEST.json of specgen compile --export): name a folder of its own"
    assert refused(export(state, "."), 2) == f"--export . is the current folder, and {no}, e.g. --export out/kernels"
    monkeypatch.chdir(project / "out")
    assert refused(export(state, ".."), 2).startswith(f"--export .. is a folder above the current one, and {no}")
    assert not list(project.rglob("*.json"))
    monkeypatch.chdir(project)
    assert export(state, "out").exit_code == 0
    monkeypatch.chdir(project / "out")
    state["version"] = "v2"
    r = export(state, ".")
    assert r.exit_code == 0, r.output
    consistent(project / "out", "v2")
    assert refused(export(state, ""), 2).startswith("--export '': the empty path")  # '' is never `.`


# --- whole or nothing -----------------------------------------------------------------------------------------
def test_a_failed_kernel_writes_nothing(state, tmp_path):
    out = tmp_path / "out"
    assert export(state, out).exit_code == 0
    before = tree(out)
    state.update(version="v2", fail="gemm_small_bf16")
    r = export(state, out)
    assert r.exit_code == 1
    assert "FAILED gemm_small_bf16 @ cute:sm90: RuntimeError: the DSL refused it" in r.stdout
    assert f"1 compiled, 1 failed: nothing written to {out}" in r.stdout
    assert tree(out) == before
    fresh = tmp_path / "new" / "kernels"
    assert export(state, fresh).exit_code == 1 and not (tmp_path / "new").exists()  # not even the folder


def test_a_full_disk_on_any_write_leaves_the_previous_export(state, tmp_path, monkeypatch):
    """ENOSPC on the k-th file specgen writes (the header, a launcher, the CMake file, the manifest, ...);
    then the DSL's own write failing: each time the previous export is intact and nothing is left over."""
    out, saved = tmp_path / "out", tmp_path / "saved"
    state["spec"] = state["small"]
    assert export(state, out).exit_code == 0
    shutil.copytree(out, saved)
    before = tree(out)
    state["version"] = "v2"
    real = ex.atomic_write
    for k in range(1, 50):
        shutil.rmtree(out)
        shutil.copytree(saved, out)
        calls = [0]

        def full(path, data, k=k, calls=calls):
            calls[0] += 1
            if calls[0] == k:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
            real(path, data)
        monkeypatch.setattr(ex, "atomic_write", full)
        r = export(state, out)
        monkeypatch.setattr(ex, "atomic_write", real)
        if calls[0] < k:  # every write of the run has failed once
            break
        msg = refused(r)
        assert "No space left on device" in msg, msg
        if msg.endswith(f"nothing was written: {out} keeps what it held"):  # while staging
            assert tree(out) == before
        else:  # the manifest's rewrite once the stage is complete: the old export, the new one staged
            assert msg.endswith(f"it stays staged in {out / '.specgen-commit'}: run the same command again to finish it")
            assert {k: v for k, v in tree(out).items() if not k.startswith(".")} == before
        assert export(state, out).exit_code == 0
        consistent(out, "v2")
    else:
        pytest.fail("the export kept writing")
    assert k > 5 and r.exit_code == 0

    monkeypatch.setattr(ex, "atomic_write", real)
    state.update(version="v3", spec=SPEC)
    dsl = ex.compile_config

    def dsl_full(module, kernel, tag, variant, cute_dir):
        if tag == "variant3":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(cute_dir / f"{kernel.name}_{tag}.o"))
        dsl(module, kernel, tag, variant, cute_dir)
    monkeypatch.setattr(ex, "compile_config", dsl_full)
    r = export(state, out)
    assert r.exit_code == 1 and "FAILED gemm_bf16 @ cute:sm90: OSError: [Errno 28] No space left on device" in r.stdout
    consistent(out, "v2")


SCRIPT = """
import os, signal, sys
from pathlib import Path
from types import SimpleNamespace
import specgen.kinds.gemm.designs.cute_export.export as ex
import specgen.runtime.cute as rc
budget, lib, version = int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
def compile_config(module, kernel, tag, variant, cute_dir):
    (cute_dir / f"{kernel.name}_{tag}.h").write_text(f"// {version} {kernel.name} {tag}\\n")
    (cute_dir / f"{kernel.name}_{tag}.o").write_bytes(b"\\x7fELF" + version.encode())
ex.compile_config, ex.dsl_runtime_library = compile_config, lambda: lib
ex._rendered_module, rc.cutlass_version = lambda path, ls: SimpleNamespace(), lambda: "4.8.1"
steps, real = [0], os.replace
def replace(*args, **kwargs):
    steps[0] += 1
    if steps[0] == budget:  # SIGKILL just before this rename: nothing runs after it
        os.kill(os.getpid(), signal.SIGKILL)
    return real(*args, **kwargs)
os.replace = replace
from specgen.cli import app
app(sys.argv[4:])
"""


def run_script(state: dict, out: Path, budget: int, lib: Path, version: str, fsize: int | None = None):
    def limit() -> None:  # a file past `fsize` bytes: EFBIG (Python ignores SIGXFSZ)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-c", SCRIPT, str(budget), str(lib), version, "compile", str(SPEC), "--out",
                           str(state["gen"]), "--export", str(out), "--target", "cute:sm90"],
                          env=env, capture_output=True, text=True, timeout=120, preexec_fn=limit if fsize else None)


def test_a_file_size_limit_in_a_real_process_leaves_the_previous_export(state, tmp_path):
    """RLIMIT_FSIZE below the runtime library's size: its copy into the stage fails with EFBIG."""
    out, lib = tmp_path / "out", tmp_path / "big.a"
    lib.write_bytes(b"!<arch>\n" + bytes(256 * 1024))
    assert export(state, out).exit_code == 0
    before = tree(out)
    r = run_script(state, out, 0, lib, "v2", fsize=128 * 1024)
    assert r.returncode == 1 and r.stderr.startswith("error: cannot write the export into --export"), r.stderr
    assert "File too large" in r.stderr and "Traceback" not in r.stderr
    assert tree(out) == before
    state["version"] = "v2"
    assert export(state, out).exit_code == 0
    consistent(out, "v2")


def test_sigkill_after_the_commit_point_is_finished_by_the_next_run(state, tmp_path):
    """kill -9 halfway through moving the staged files in: the manifest says so ("complete": false, and
    owns the old and the new files), and the next run finishes the move before its own export."""
    out, lib = tmp_path / "out", tmp_path / "lib.a"
    lib.write_bytes(b"!<arch>\n")
    assert export(state, out).exit_code == 0
    # the stage's 5 writes, its rename to the commit, the manifest's rewrite, then 10 files moved in
    r = run_script(state, out, 17, lib, "v2")
    assert r.returncode == -signal.SIGKILL
    manifest = json.loads((out / "MANIFEST.json").read_text())
    assert manifest["complete"] is False and (out / ".specgen-commit").is_dir()
    assert {rel for rel, v in tree(out).items() if v != "/" and not rel.startswith(".")} - {"MANIFEST.json"} <= set(
        manifest["files"])
    state["version"] = "v2"
    assert export(state, out).exit_code == 0
    consistent(out, "v2")


def killer(real, steps: list[int], budget: int):
    """`real`, counted with every other call it shares `steps` with: the budget-th call is killed."""
    def step(*args, **kwargs):
        steps[0] += 1
        if steps[0] == budget:
            raise Killed
        return real(*args, **kwargs)
    return step


def test_killed_before_each_rename_or_removal_it_converges(state, tmp_path, monkeypatch):
    """In-process kill before every os.replace or os.unlink of a run in turn: after each, DIR holds the
    old export, the new one, or a manifest marked incomplete beside the staged rest; the next run converges."""
    out = tmp_path / "out"
    state["spec"] = state["small"]
    assert export(state, out).exit_code == 0
    saved = tmp_path / "saved"
    shutil.copytree(out, saved)
    old = tree(out)
    state["version"] = "v2"
    fresh = tmp_path / "fresh"
    assert export(state, fresh).exit_code == 0
    new = tree(fresh)
    seen = set()
    for budget in range(1, 200):
        shutil.rmtree(out)
        shutil.copytree(saved, out)
        steps = [0]
        with monkeypatch.context() as m:
            m.setattr(os, "replace", killer(os.replace, steps, budget))
            m.setattr(os, "unlink", killer(os.unlink, steps, budget))
            try:
                r = export(state, out)
            except Killed:
                r = None
        if r is not None:  # finished within the budget: every point has been tried
            assert r.exit_code == 0
            break
        now = tree(out)
        manifest = json.loads((out / "MANIFEST.json").read_text())
        visible = {k: v for k, v in now.items() if not k.startswith(".")}
        if manifest["complete"]:
            assert visible in (old, new), budget
            seen.add("old" if visible == old else "new")
        else:
            seen.add("marked")
            assert (out / ".specgen-commit").is_dir()
            assert {k for k, v in visible.items() if v != "/"} - {"MANIFEST.json"} <= set(manifest["files"])
        assert export(state, out).exit_code == 0, budget
        assert tree(out) == new, budget
    else:
        pytest.fail("the export never finished")
    assert seen == {"old", "marked"} and budget > 12  # "new": the run that finished


def test_leftovers_of_killed_runs_are_removed(state, tmp_path):
    out = tmp_path / "out"
    assert export(state, out).exit_code == 0
    (out / ".specgen-tmp-999999" / "cute").mkdir(parents=True)  # a stage killed while it compiled
    (out / ".specgen-tmp-999999" / "cute" / "x.o").write_bytes(b"half")
    (out / ".MANIFEST.json.999999.specgen-tmp").write_text("{")  # an atomic write killed before its rename
    state["version"] = "v2"
    assert export(state, out).exit_code == 0
    consistent(out, "v2")


def test_a_second_concurrent_export_is_refused(state, tmp_path):
    out = tmp_path / "out"
    assert export(state, out).exit_code == 0
    before = tree(out)
    fd = os.open(out, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what a running export (or render) holds
        state["version"] = "v2"
        assert refused(export(state, out)) == (f"another specgen render or compile --export is writing into {out}; "
                                               "wait for it to finish and run this one again")
        assert tree(out) == before
    finally:
        os.close(fd)
    assert export(state, out).exit_code == 0


def test_dir_itself_may_be_a_link_to_a_folder(state, tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "out").symlink_to(tmp_path / "real")
    assert export(state, tmp_path / "out").exit_code == 0
    consistent(tmp_path / "real", "v1")
