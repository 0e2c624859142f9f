"""What `specgen render` may touch in a user's project: only the outputs of the specs it was given
(removal of others is --prune), only regular files inside --out that it wrote (the manifest is
validated first), the umask's file mode, no shadowing packages, no overwritten user files, one render
at a time, clear errors on an unwritable --out, and convergence after a kill -9 at any instant."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_render import kernel, mtimes, tree
from typer.testing import CliRunner

from specgen.cli import app
from specgen.render.writer import MANIFEST

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def render(*args: str):
    return runner.invoke(app, ["render", *args])


def two_specs(tmp_path: Path) -> tuple[Path, Path]:
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "a.toml").write_text(kernel("alpha"))
    (specs / "b.toml").write_text(kernel("beta"))
    out = tmp_path / "out"
    r = render(str(specs), "--out", str(out))
    assert r.exit_code == 0, r.output
    return specs, out


# --- what a render of some spec files may remove ------------------------------------------------------------
def test_rendering_one_spec_file_keeps_every_other_output(tmp_path):
    specs, out = two_specs(tmp_path)
    before = tree(out)
    r = render(str(specs / "a.toml"), "--out", str(out))
    assert r.exit_code == 0, r.output
    assert "removed" not in r.stdout.replace("0 removed", "")
    assert tree(out) == before  # beta's module and its manifest entry stay
    assert render(str(specs / "a.toml"), "--check", "--out", str(out)).exit_code == 0


def test_a_kernel_renamed_in_a_given_file_loses_its_old_module(tmp_path):
    specs, out = two_specs(tmp_path)
    (specs / "a.toml").write_text(kernel("alpha2"))
    r = render(str(specs / "a.toml"), "--out", str(out))
    assert r.exit_code == 0, r.output
    assert f"removed {out / 'triton/alpha.py'} (no spec in the given paths produces it)" in r.stdout
    assert sorted(p.name for p in (out / "triton").glob("*.py")) == ["__init__.py", "alpha2.py", "beta.py"]
    manifest = json.loads((out / MANIFEST).read_text())
    assert set(manifest["kernels"]) == {"alpha2", "beta"}


def test_outputs_of_specs_outside_the_given_paths_need_prune(tmp_path):
    specs, out = two_specs(tmp_path)
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    (elsewhere / "c.toml").write_text(kernel("gamma"))
    assert render(str(elsewhere), "--out", str(out)).exit_code == 0
    assert (out / "triton" / "alpha.py").exists() and (out / "triton" / "gamma.py").exists()
    r = render(str(specs), "--out", str(out))  # specs/ does not own gamma: it stays
    assert r.exit_code == 0 and (out / "triton" / "gamma.py").exists()
    r = render(str(specs), "--prune", "--out", str(out))
    assert r.exit_code == 0, r.output
    assert f"removed {out / 'triton/gamma.py'} (--prune: no given spec produces it)" in r.stdout
    assert not (out / "triton" / "gamma.py").exists() and (out / "triton" / "alpha.py").exists()


def test_inputs_that_come_out_empty_remove_nothing(tmp_path):
    specs, out = two_specs(tmp_path)
    before = tree(out)
    for spec in specs.iterdir():
        spec.unlink()
    r = render(str(specs), "--out", str(out))
    assert "removed " not in r.stdout
    assert tree(out) == before


# --- the manifest is validated before anything is written ---------------------------------------------------
@pytest.mark.parametrize("entry", ["../victim.txt", "ABSOLUTE", "triton", "triton/../../victim.txt", "link.py"])
def test_a_manifest_pointing_elsewhere_is_refused_before_any_write(tmp_path, entry):
    specs, out = two_specs(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (out / "link.py").symlink_to(victim)
    manifest = json.loads((out / MANIFEST).read_text())
    manifest["files"].append(str(victim) if entry == "ABSOLUTE" else entry)
    (out / MANIFEST).write_text(json.dumps(manifest))
    (specs / "b.toml").unlink()
    (specs / "a.toml").write_text(kernel("alpha", n=64))
    before = tree(out)
    r = render(str(specs), "--prune", "--out", str(out))
    assert r.exit_code == 1
    assert f"{out / MANIFEST} lists" in r.stderr and "fix or remove the manifest (nothing was written)" in r.stderr
    assert "Traceback" not in r.output
    assert victim.read_text() == "precious\n"
    assert tree(out) == before  # not one module written


def test_a_manifest_that_is_not_json_is_refused(tmp_path):
    specs, out = two_specs(tmp_path)
    (out / MANIFEST).write_text("{ not json")
    r = render(str(specs), "--out", str(out))
    assert r.exit_code == 1 and f"{out / MANIFEST} cannot be read" in r.stderr


def test_an_owned_file_edited_past_its_header_is_kept(tmp_path):
    specs, out = two_specs(tmp_path)
    (out / "triton" / "beta.py").write_text("my own code now\n")
    (specs / "b.toml").unlink()
    r = render(str(specs), "--out", str(out))
    assert r.exit_code == 0, r.output
    assert f"kept {out / 'triton/beta.py'}: it no longer starts with specgen's generated header" in r.stdout
    assert (out / "triton" / "beta.py").read_text() == "my own code now\n"
    assert "triton/beta.py" not in json.loads((out / MANIFEST).read_text())["files"]


# --- modes, user files, shadowing -----------------------------------------------------------------------------
def test_files_get_the_umasks_mode(tmp_path):
    old = os.umask(0o022)
    try:
        _, out = two_specs(tmp_path)
    finally:
        os.umask(old)
    modes = {rel: (out / rel).stat().st_mode & 0o777 for rel in tree(out)}
    assert set(modes.values()) == {0o644}, modes


def test_a_users_init_is_never_overwritten(tmp_path):
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "a.toml").write_text(kernel("alpha"))
    out = tmp_path / "myproject" / "kernels"
    out.mkdir(parents=True)
    (out / "__init__.py").write_text("from .helpers import *\n")
    r = render(str(specs), "--out", str(out))
    assert r.exit_code == 0, r.output
    assert (out / "__init__.py").read_text() == "from .helpers import *\n"
    assert f"kept {out / '__init__.py'}: an __init__.py specgen did not write" in r.stdout
    assert "__init__.py" not in json.loads((out / MANIFEST).read_text())["files"]
    assert (out / "triton" / "alpha.py").is_file()
    assert render(str(specs), "--check", "--out", str(out)).exit_code == 0


def test_a_users_module_in_the_way_is_refused(tmp_path):
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "a.toml").write_text(kernel("alpha"))
    out = tmp_path / "out"
    (out / "triton").mkdir(parents=True)
    (out / "triton" / "alpha.py").write_text("x = 1\n")
    r = render(str(specs), "--out", str(out))
    assert r.exit_code == 1
    assert f"{out / 'triton/alpha.py'} exists and was not written by specgen" in r.stderr
    assert (out / "triton" / "alpha.py").read_text() == "x = 1\n" and not (out / MANIFEST).exists()


@pytest.mark.parametrize("where", [".", "triton", "torch"])
def test_an_out_that_would_shadow_a_module_is_refused(tmp_path, monkeypatch, where):
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "a.toml").write_text(kernel("alpha"))
    monkeypatch.chdir(tmp_path)
    r = render("specs", "--out", where)
    assert r.exit_code == 1
    # --out . makes each backend folder a top-level package: the message names the installed module it shadows
    shadowed = {".": "triton", "triton": "triton", "torch": "torch"}[where]
    assert f"shadows the `{shadowed}` module" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["specs"]


# --- headers and manifest do not depend on the working directory ----------------------------------------------
def test_check_from_a_subfolder_agrees(tmp_path, monkeypatch):
    project = tmp_path / "project"
    shutil.copytree(ROOT / "specs", project / "specs")
    (project / "pyproject.toml").write_text("[project]\nname = 'mine'\n")
    monkeypatch.chdir(project)
    assert render("--out", "generated").exit_code == 0
    first = tree(project / "generated")
    assert b"from specs/gemm_bf16.toml" in first["triton/gemm_bf16.py"]
    monkeypatch.chdir(project / "specs")
    r = render(".", "--check", "--out", "../generated")
    assert r.exit_code == 0, r.output
    monkeypatch.chdir(tmp_path)
    r = render("project/specs", "--check", "--out", "project/generated")
    assert r.exit_code == 0, r.output
    assert render("project/specs", "--out", "project/generated").exit_code == 0
    assert tree(project / "generated") == first


def test_the_committed_catalogue_checks_from_the_specs_folder(monkeypatch):
    monkeypatch.chdir(ROOT / "specs")
    r = render(".", "--check", "--out", "../generated")
    assert r.exit_code == 0, r.output


# --- one render at a time, unwritable --out -------------------------------------------------------------------
def test_a_second_concurrent_render_is_refused(tmp_path):
    specs, out = two_specs(tmp_path)
    fd = os.open(out, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what a running render holds
        (specs / "a.toml").write_text(kernel("alpha", n=64))
        before = tree(out)
        r = render(str(specs), "--out", str(out))
        assert r.exit_code == 1
        assert f"another specgen render is writing into {out}" in r.stderr
        assert tree(out) == before
    finally:
        os.close(fd)
    assert render(str(specs), "--out", str(out)).exit_code == 0


def read_only_folder(tmp_path: Path) -> Path:
    """A folder this process cannot write into: chmod 555, or sysfs when the tests run as root (root
    ignores a folder's write bits; nothing may be created in /sys)."""
    if os.geteuid() == 0:
        return Path("/sys/kernel")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    return ro


@pytest.mark.parametrize("case", ["read-only folder", "read-only parent", "a file", "under a file"])
def test_an_unwritable_out_is_a_clear_error(tmp_path, case):
    (tmp_path / "a.toml").write_text(kernel("alpha"))
    (tmp_path / "file").write_text("not a folder\n")
    ro = read_only_folder(tmp_path)
    listing = sorted(p.name for p in ro.iterdir())
    out = {"read-only folder": ro, "read-only parent": ro / "specgen_out",
           "a file": tmp_path / "file", "under a file": tmp_path / "file" / "out"}[case]
    try:
        r = render(str(tmp_path / "a.toml"), "--out", str(out))
    finally:
        if ro.is_relative_to(tmp_path):
            ro.chmod(0o755)
    assert r.exit_code == 1, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)  # no traceback
    assert r.stderr.startswith("error: ") and (str(out) in r.stderr or str(out.parent) in r.stderr), r.stderr
    assert sorted(p.name for p in ro.iterdir()) == listing
    assert (tmp_path / "file").read_text() == "not a folder\n"


# --- crash safety: kill -9 at random instants, then the next render converges ----------------------------------
def test_renders_killed_at_random_points_converge(tmp_path):
    specs = tmp_path / "specs"
    specs.mkdir()
    many = lambda prefix: "\n".join(kernel(f"{prefix}{i:03d}", n=(64, 128)[i % 2]) for i in range(40))  # noqa: E731
    (specs / "k.toml").write_text(many("old"))
    out, fresh = tmp_path / "out", tmp_path / "fresh"
    cmd = [sys.executable, "-m", "specgen", "render", str(specs), "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    assert subprocess.run(cmd, env=env, capture_output=True).returncode == 0
    (specs / "k.toml").write_text(many("new"))  # every kernel renamed: every old module must go
    start = time.perf_counter()
    assert subprocess.run([*cmd[:-1], str(fresh)], env=env, capture_output=True).returncode == 0
    duration = time.perf_counter() - start
    rng = random.Random(6)
    for _ in range(6):
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.3, 1.0) * duration)
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        # whatever it left, every module in --out is owned by the manifest or was there before
        if (out / MANIFEST).exists():
            owned = set(json.loads((out / MANIFEST).read_text())["files"])
            assert {p for p in tree(out) if p != MANIFEST and not Path(p).name.startswith(".")} <= owned
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert tree(out) == tree(fresh)  # exactly the specs' outputs: no stale module, no leaked temporary
    assert not [p for p in out.rglob(".*") if p.is_file()]
    before = mtimes(out)
    assert subprocess.run(cmd, env=env, capture_output=True).returncode == 0 and mtimes(out) == before


def test_a_manifest_from_before_sources_still_scopes_removal(tmp_path):
    specs, out = two_specs(tmp_path)
    manifest = json.loads((out / MANIFEST).read_text())
    del manifest["sources"]  # what specgen wrote before it recorded each file's spec
    (out / MANIFEST).write_text(json.dumps(manifest))
    (specs / "b.toml").unlink()
    r = render(str(specs), "--out", str(out))
    assert r.exit_code == 0, r.output
    assert f"removed {out / 'triton/beta.py'}" in r.stdout and (out / "triton" / "alpha.py").exists()
    assert f"removed {out / 'specs/beta.py'}" in r.stdout and (out / "specs" / "alpha.py").exists()
    assert json.loads((out / MANIFEST).read_text())["sources"] == {"specs/alpha.py": "specs/a.toml",
                                                                  "triton/alpha.py": "specs/a.toml"}


KILLER = """
import os, signal, sys
steps, budget = [0], int(sys.argv[1])
real_replace, real_unlink = os.replace, os.unlink
def counted(real):
    def step(*args, **kwargs):
        steps[0] += 1
        if steps[0] > budget:  # SIGKILL just before this write or removal: nothing runs after it
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    return step
os.replace, os.unlink = counted(real_replace), counted(real_unlink)
from specgen.cli import app
app(sys.argv[2:])
"""


def test_a_render_killed_before_each_of_its_writes_converges(tmp_path):
    """Kill -9 before every replace or unlink in turn (a temporary file written and not yet renamed
    leaks each time); the next render removes the leak and converges to exactly the specs' outputs."""
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "k.toml").write_text("\n".join(kernel(f"old{i}") for i in range(3)))
    out, fresh, saved = tmp_path / "out", tmp_path / "fresh", tmp_path / "saved"
    assert render(str(specs), "--out", str(out)).exit_code == 0
    shutil.copytree(out, saved)
    (specs / "k.toml").write_text("\n".join(kernel(f"new{i}", n=64) for i in range(3)))
    assert render(str(specs), "--out", str(fresh)).exit_code == 0
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    killed = 0
    for budget in range(20):
        shutil.rmtree(out)
        shutil.copytree(saved, out)
        r = subprocess.run([sys.executable, "-c", KILLER, str(budget), "render", str(specs), "--out", str(out)],
                           env=env, capture_output=True, text=True, timeout=120)
        if r.returncode == 0:  # the render finished within the budget: every point has been tried
            break
        assert r.returncode == -signal.SIGKILL, r.stderr
        killed += 1
        owned = set(json.loads((out / MANIFEST).read_text())["files"])
        assert {p for p in tree(out) if p != MANIFEST and not Path(p).name.startswith(".")} <= owned, budget
        r = render(str(specs), "--out", str(out))
        assert r.exit_code == 0, r.output
        assert tree(out) == tree(fresh), budget
        assert not [p for p in out.rglob(".*") if p.is_file()]
    assert killed >= 3 + 3 + 2  # writes of the new modules, removals of the old ones, two manifests
