"""Rendering: deterministic bytes, write-if-different, --check, the manifest's ownership of outputs,
refused specs, module headers, speed, and that check/render import nothing heavy."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import jinja2
import pytest
from typer.testing import CliRunner

from specgen import __version__
from specgen.cli import app
from specgen.kinds.gemm import KIND
from specgen.registry import design_for
from specgen.render.catalogue import render_catalogue
from specgen.render.env import environment, float_literal, pylit
from specgen.render.writer import MANIFEST
from specgen.spec.load import load_paths

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()

KERNEL = """\
[[kernels]]
name = "{name}"
kind = "gemm"
description = "{description}"
a = {{ dtype = "f16", major = "k" }}
b = {{ dtype = "f16", major = "{b_major}" }}
out = {{ dtype = "f16" }}
epilogue = {epilogue}
tile = {{ m = 128, n = {n}, k = 64 }}
schedule = {{ persistent = {persistent} }}
pipeline = {{ ab_stages = {stages} }}
targets = ["triton:sm90", "triton:sm100"]
"""


def kernel(name: str, *, description: str = "a test kernel", b_major: str = "k", n: int = 128,
           persistent: bool = False, stages: int | str = '"auto"', epilogue: str = "[]") -> str:
    return KERNEL.format(name=name, description=description, b_major=b_major, n=n,
                         persistent=str(persistent).lower(), stages=stages, epilogue=epilogue)


def tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def mtimes(folder: Path) -> dict[str, int]:
    return {p.relative_to(folder).as_posix(): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


def render(*args: str):
    return runner.invoke(app, ["render", *args])


@pytest.fixture
def in_repo(monkeypatch):
    monkeypatch.chdir(ROOT)


# --- determinism and write-if-different ------------------------------------------------------------------
def test_rendering_is_deterministic(in_repo, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    assert render("--out", str(one)).exit_code == 0
    assert render("--out", str(two)).exit_code == 0
    assert tree(one) == tree(two)
    assert {"__init__.py", "triton/__init__.py", MANIFEST} <= set(tree(one))


def test_rendering_is_deterministic_across_processes(in_repo, tmp_path):
    here = tmp_path / "here"
    assert render("--out", str(here)).exit_code == 0
    for seed in ("0", "12345"):
        there = tmp_path / f"there{seed}"
        env = {**os.environ, "PYTHONHASHSEED": seed}
        r = subprocess.run([sys.executable, "-m", "specgen", "render", "--out", str(there)], cwd=ROOT, env=env,
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert tree(there) == tree(here)


def test_a_second_render_writes_nothing(in_repo, tmp_path):
    specs = load_paths([Path("specs")])
    first = render_catalogue(specs, tmp_path)
    assert first.report.written and not first.report.unchanged
    before = mtimes(tmp_path)
    time.sleep(0.01)
    second = render_catalogue(load_paths([Path("specs")]), tmp_path)
    assert second.report.written == [] and second.report.removed == []
    assert sorted(second.report.unchanged) == sorted(first.report.written)
    assert mtimes(tmp_path) == before
    r = render("--out", str(tmp_path))
    assert r.exit_code == 0 and f"0 written, {len(before)} unchanged, 0 removed" in r.stdout
    assert mtimes(tmp_path) == before


def test_only_changed_files_are_rewritten(tmp_path):
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "a.toml").write_text(kernel("alpha"))
    (specs / "b.toml").write_text(kernel("beta"))
    out = tmp_path / "out"
    assert render(str(specs), "--out", str(out)).exit_code == 0
    before = mtimes(out)
    (specs / "b.toml").write_text(kernel("beta", n=64))
    r = render(str(specs), "--out", str(out))
    assert r.exit_code == 0
    assert [line for line in r.stdout.splitlines() if line.startswith("wrote")] == [
        f"wrote {out / MANIFEST}", f"wrote {out / 'specs/beta.py'}", f"wrote {out / 'triton/beta.py'}",
    ]
    after = mtimes(out)
    assert after["triton/alpha.py"] == before["triton/alpha.py"]
    assert after["specs/alpha.py"] == before["specs/alpha.py"]
    assert after["triton/beta.py"] != before["triton/beta.py"]


# --- render --check --------------------------------------------------------------------------------------
def test_check_writes_nothing_and_fails_on_missing_outputs(in_repo, tmp_path):
    out = tmp_path / "out"
    r = render("--check", "--out", str(out))
    assert r.exit_code == 1
    assert not out.exists()
    assert f"stale: {out / 'triton/gemm_bf16.py'}" in r.stderr


def test_check_passes_when_up_to_date_and_fails_when_stale(in_repo, tmp_path):
    assert render("--out", str(tmp_path)).exit_code == 0
    r = render("--check", "--out", str(tmp_path))
    assert r.exit_code == 0, r.output
    assert "0 stale" in r.stdout
    module = tmp_path / "triton" / "gemm_bf16.py"
    edited = module.read_text() + "# hand edit\n"
    module.write_text(edited)
    r = render("--check", "--out", str(tmp_path))
    assert r.exit_code == 1 and f"stale: {module}" in r.stderr and "1 stale" in r.stdout
    assert module.read_text() == edited  # --check wrote nothing
    module.unlink()
    r = render("--check", "--out", str(tmp_path))
    assert r.exit_code == 1 and not module.exists()


def test_check_reports_outputs_that_would_be_removed(tmp_path):
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "a.toml").write_text(kernel("alpha"))
    (specs / "b.toml").write_text(kernel("beta"))
    out = tmp_path / "out"
    assert render(str(specs), "--out", str(out)).exit_code == 0
    (specs / "b.toml").unlink()
    r = render(str(specs), "--check", "--out", str(out))
    assert r.exit_code == 1
    assert f"stale (would be removed): {out / 'triton/beta.py'}" in r.stderr
    assert (out / "triton" / "beta.py").exists()


def test_committed_generated_package_is_up_to_date(in_repo):
    r = render("--check")
    assert r.exit_code == 0, r.output
    assert " 0 stale" in r.stdout


# --- the manifest owns what render wrote ----------------------------------------------------------------------
def test_outputs_no_spec_produces_are_removed_but_nothing_else(tmp_path):
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "a.toml").write_text(kernel("alpha"))
    (specs / "b.toml").write_text(kernel("beta", persistent=True))
    out = tmp_path / "out"
    assert render(str(specs), "--out", str(out)).exit_code == 0
    manifest = json.loads((out / MANIFEST).read_text())
    assert {"triton/alpha.py", "triton/beta.py"} <= set(manifest["files"])
    assert set(manifest["kernels"]) == {"alpha", "beta"}
    # files render never wrote, in and beside its folders
    (out / "triton" / "handwritten.py").write_text("x = 1\n")
    (out / "notes.txt").write_text("mine\n")
    (specs / "b.toml").unlink()
    r = render(str(specs), "--out", str(out))
    assert r.exit_code == 0
    assert f"removed {out / 'triton/beta.py'}" in r.stdout
    assert not (out / "triton" / "beta.py").exists()
    assert (out / "triton" / "alpha.py").exists()
    assert (out / "triton" / "handwritten.py").read_text() == "x = 1\n"
    assert (out / "notes.txt").read_text() == "mine\n"
    manifest = json.loads((out / MANIFEST).read_text())
    assert "triton/beta.py" not in manifest["files"] and "triton/alpha.py" in manifest["files"]
    assert set(manifest["kernels"]) == {"alpha"}
    assert manifest["specgen_version"] == __version__


def test_manifest_records_spec_file_hash_and_targets(in_repo, tmp_path):
    assert render("--out", str(tmp_path)).exit_code == 0
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    specs = load_paths([Path("specs")])
    assert set(manifest["kernels"]) == {ls.name for ls in specs}
    for ls in specs:
        entry = manifest["kernels"][ls.name]
        assert (entry["spec_file"], entry["spec_hash"]) == (ls.file, ls.spec_hash)
        assert set(entry["targets"]) == {str(t) for t in ls.spec.targets}
        for target, where in entry["targets"].items():
            design = design_for(ls.spec.kind, target)
            if not design.renders:  # a checked-only design
                assert where.startswith("skipped: ")
                continue
            # the module its design says serves the target (asked, so a new design needs no line here)
            served = [t for t in ls.spec.targets if design_for(ls.spec.kind, t) is design]
            (module,) = [rel for rel, ts in design.modules(ls.spec, served).items() if target in map(str, ts)]
            assert where == module and where.endswith((f"/{ls.name}.py", f"/{ls.name}_{target.split(':')[1]}.py"))
        if any(t.startswith("triton:") for t in entry["targets"]):
            assert entry["targets"]["triton:sm90"] == f"triton/{ls.name}.py"
        if "cute:sm90" in entry["targets"]:
            assert entry["targets"]["cute:sm90"] == f"cute/{ls.name}.py"
    assert manifest["files"] == sorted(manifest["files"])


def test_a_spec_failing_check_is_refused_and_its_module_kept(tmp_path):
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "a.toml").write_text(kernel("alpha"))
    (specs / "b.toml").write_text(kernel("beta"))
    out = tmp_path / "out"
    assert render(str(specs), "--out", str(out)).exit_code == 0
    kept = (out / "triton" / "alpha.py").read_bytes()
    before = mtimes(out)
    # 8 stages of 128x64 + 64x128 f16 tiles: 262144 B > 232448 B
    (specs / "a.toml").write_text(kernel("alpha", stages=8))
    (specs / "b.toml").write_text(kernel("beta", n=64))
    r = render(str(specs), "--out", str(out))
    assert r.exit_code == 1
    assert "refused alpha: it fails check (its previous outputs are kept)" in r.stderr
    assert "SMEM001" in r.stderr and "needs 262144 B of SMEM > 232448 B" in r.stderr
    assert (out / "triton" / "alpha.py").read_bytes() == kept
    assert mtimes(out)["triton/alpha.py"] == before["triton/alpha.py"]
    assert "triton/alpha.py" in json.loads((out / MANIFEST).read_text())["files"]
    assert mtimes(out)["triton/beta.py"] != before["triton/beta.py"]  # the others still render
    # --check fails while a spec is refused
    assert render(str(specs), "--check", "--out", str(out)).exit_code == 1


def test_a_spec_failing_check_on_first_render_writes_no_module(tmp_path):
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "a.toml").write_text(kernel("alpha", stages=8))
    out = tmp_path / "out"
    r = render(str(specs), "--out", str(out))
    assert r.exit_code == 1
    assert not (out / "triton" / "alpha.py").exists()


def test_render_refuses_to_run_on_load_errors(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(kernel("alpha").replace('dtype = "f16", major = "k" }\nb', 'dtype = "f99", major = "k" }\nb'))
    out = tmp_path / "out"
    r = render(str(bad), "--out", str(out))
    assert r.exit_code == 1 and "kernels[0].a.dtype" in r.stderr
    assert not out.exists()


# --- what a module says about itself ------------------------------------------------------------------------
def test_module_header_names_spec_file_hash_and_version(in_repo, tmp_path):
    assert render("--out", str(tmp_path)).exit_code == 0
    manifest = json.loads((tmp_path / "MANIFEST.json").read_text())
    for ls in load_paths([Path("specs")]):
        modules = {rel for rel in manifest["kernels"][ls.name]["targets"].values() if not rel.startswith("skipped")}
        assert modules, f"{ls.name} renders no module"
        for rel in modules:  # every backend's module (TPU-only specs have no Triton one)
            first = (tmp_path / rel).read_text().splitlines()[0]
            assert first == (f"# Generated by specgen {__version__} from {ls.file} "
                             f'(kernel "{ls.name}", spec {ls.spec_hash}).')
        assert ls.file.startswith("specs/")


def test_rendered_modules_are_valid_python(in_repo, tmp_path):
    assert render("--out", str(tmp_path)).exit_code == 0
    modules = sorted(tmp_path.rglob("*.py"))
    assert len(modules) >= 8
    for path in modules:
        compile(path.read_text(), str(path), "exec")


def test_description_lands_verbatim_in_the_docstring(tmp_path):
    text = "Quotes \" and ' and '' kept; {{ braces }}, {% raw %}, # hash, ünïcode \u2028 and tabs\tstay data."
    spec = tmp_path / "d.toml"
    spec.write_text(kernel("described", description=text.replace('"', '\\"').replace("\t", "\\t")
                           .replace("\u2028", "\\u2028")))
    out = tmp_path / "out"
    assert render(str(spec), "--out", str(out)).exit_code == 0
    source = (out / "triton" / "described.py").read_text()
    tree_ = ast.parse(source)
    doc = ast.get_docstring(tree_, clean=False)
    assert doc is not None and " ".join(text.split()) in " ".join(doc.split())
    # only imports, assignments and definitions at the top level: nothing the description could inject
    assert all(isinstance(n, (ast.Expr, ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign, ast.FunctionDef,
                              ast.If, ast.Try, ast.ClassDef)) for n in tree_.body)


@pytest.mark.parametrize(
    "epilogue",
    [
        # non-finite constants are refused at load (tests/test_hardening_values.py); the extremes render
        '[{ op = "scale", by = "scalar", value = 1e-45 }]',
        '[{ op = "scale", by = "scalar", value = -3.4028234663852886e38 }, { op = "clamp", min = -1e30, max = 3e38 }]',
        '[{ op = "bias", along = "m" }, { op = "residual", dtype = "f32", beta = 0.5 }, { op = "cast", dtype = "bf16" }]',
    ],
)
def test_epilogue_constants_render_as_python_literals(tmp_path, epilogue):
    spec = tmp_path / "e.toml"
    spec.write_text(kernel("consts", epilogue=epilogue))
    out = tmp_path / "out"
    assert render(str(spec), "--out", str(out)).exit_code == 0
    source = (out / "triton" / "consts.py").read_text()
    compile(source, "consts.py", "exec")
    if "1e-45" in epilogue:
        assert "acc = acc * 1e-45" in source


def test_float_literals_and_pylit():
    assert float_literal(1.0) == "1.0" and float_literal(1e-300) == "1e-300"
    assert float_literal(float("inf")) == 'float("inf")'
    assert float_literal(float("-inf")) == 'float("-inf")'
    assert float_literal(float("nan")) == 'float("nan")'
    data = {"b": [1, 2.5, "x"], "a": {"nested": None, "t": True}, "e": {}}
    text = pylit(data)
    assert eval(text) == data  # noqa: S307 - a literal we just built
    assert text == "{'b': [1, 2.5, 'x'], 'a': {'nested': None, 't': True}, 'e': {}}"  # fits: one line, order kept
    wide = {"b": list(range(30)), "a": {"nested": "x" * 120}}
    lines = pylit(wide).splitlines()
    assert eval(pylit(wide)) == wide  # noqa: S307
    assert lines[1] == "    'b': [" and "    'a': {" in lines  # one key a line, long values wrapped
    assert all(len(line) <= 110 for line in pylit({"k": list(range(60))}).splitlines())  # long lists wrap


def test_strict_undefined():
    env = environment(KIND)
    assert env.undefined is jinja2.StrictUndefined
    with pytest.raises(jinja2.UndefinedError):
        env.from_string("{{ not_given }}").render()
    with pytest.raises(jinja2.UndefinedError):
        env.from_string("{{ p.missing }}").render(p={"present": 1})
    with pytest.raises(jinja2.UndefinedError):
        env.from_string("{% for x in nothing %}{{ x }}{% endfor %}").render()
    assert env.from_string("{{ p.present }}").render(p={"present": 1}) == "1"


# --- speed ------------------------------------------------------------------------------------------------
def test_render_of_100_specs_writes_them_all(tmp_path):
    epilogues = [
        "[]",
        '[{ op = "bias", along = "n", dtype = "f16" }, { op = "activation", fn = "gelu_tanh" }]',
        '[{ op = "scale", by = "scalar" }, { op = "residual", dtype = "f16" }]',
        '[{ op = "scale", by = "rowcol" }, { op = "clamp", min = 0.0, max = 6.0 }]',
    ]
    text = "\n".join(
        kernel(f"k{i:03d}", b_major="k" if i % 2 else "mn", n=(64, 128, 256)[i % 3], persistent=i % 4 == 0,
               epilogue=epilogues[i % 4])
        for i in range(100)
    )
    spec = tmp_path / "many.toml"
    spec.write_text(text)
    start = time.process_time()  # CPU time: other processes on the machine do not count
    result = render_catalogue(load_paths([spec]), tmp_path / "out")
    seconds = time.process_time() - start
    # a module and a shared spec module per kernel; the manifest and the package's and folders' __init__.py
    assert result.refused == [] and len(result.report.written) == 2 * 100 + 4
    # Not a speed test: a bound 10x past an idle core's time (about 0.5 s), which only a blow-up crosses
    assert seconds < 10.0, seconds


# --- check and render import nothing heavy -------------------------------------------------------------------
def test_check_and_render_import_nothing_heavy(tmp_path):
    code = f"""
import sys
from specgen.cli import app
for args in (["check", "specs"], ["check", "--json", "--notes"], ["render", "specs", "--out", {str(tmp_path)!r}],
             ["render", "--check", "--out", {str(tmp_path)!r}], ["schema"]):
    try:
        app(args)
    except SystemExit as e:
        assert e.code == 0, (args, e.code)
heavy = sorted({{m.split(".")[0] for m in sys.modules}} & {{"torch", "triton", "jax", "jaxlib", "cutlass", "numpy"}})
assert not heavy, heavy
print("clean")
"""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().endswith("clean")
    assert (tmp_path / "triton" / "gemm_bf16.py").is_file()


def test_a_spec_path_cannot_break_out_of_the_header_comment(tmp_path: Path) -> None:
    """The spec file's name lands in a comment line: a newline in it must not start a line of code."""
    import json

    from kernels import MINIMAL_SPEC

    from specgen.render.catalogue import render_module
    from specgen.spec.load import load_text

    (loaded,) = load_text(json.dumps({"kernels": [MINIMAL_SPEC]}), "evil\nimport os; os.system('x')\n.json", ".json")
    text = render_module(loaded, loaded.spec.targets)
    first = text.splitlines()[0]
    assert first.startswith("# Generated by specgen") and "evil\\nimport os" in first
    assert not any(line.startswith("import os") for line in text.splitlines())
    compile(text, "k.py", "exec")
