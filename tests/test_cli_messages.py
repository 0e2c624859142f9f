"""The CLI as a user reads it: one diagnostic format for check and render, `check --json` (notes only
with --notes, load errors as JSON), one "no renderer yet" summary per render, `--version`, flags
shown as flags, plurals, where each rule applies, the guard's hint for a weight stored (N, K), and a
compile failure that shows the compiler's message."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_render import kernel
from typer.testing import CliRunner

from specgen import __version__
from specgen.cli import app
from specgen.registry import design_for
from specgen.runtime.guards import matrix
from specgen.spec.load import load_paths

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, list(args))


def test_check_and_render_print_a_failing_rule_the_same_way(tmp_path):
    spec = tmp_path / "deep.toml"
    spec.write_text(kernel("deep", stages=8))  # 8 x (128x64 + 64x128) f16 = 262144 B > 232448 B
    checked = run("check", str(spec))
    rendered = run("render", str(spec), "--out", str(tmp_path / "out"))
    assert checked.exit_code == rendered.exit_code == 1
    out = checked.stdout.splitlines()
    at = next(i for i, line in enumerate(out) if line.startswith("error ") and " SMEM001 " in line)
    lines = out[at:at + 2]  # the refusal and its hint
    assert lines[0].startswith(f"error {spec}:11:14 SMEM001 deep @ triton:sm90: needs 262144 B of SMEM")
    assert lines[1].startswith("    hint:")
    for line in lines:
        assert line in rendered.stderr.splitlines()


def test_check_json_shows_notes_only_with_notes(tmp_path):
    spec = tmp_path / "k.toml"
    spec.write_text(kernel("k"))
    # fits both its targets: nothing to say without --notes but the model's near-boundary verdicts (this suite
    # checks with --no-compile: tests/conftest.py), each a warning that says so
    plain = json.loads(run("check", "--json", str(spec)).stdout)
    assert all(d["source"] == "model" and d["severity"] == "warning" for d in plain)
    noted = json.loads(run("check", "--json", "--notes", str(spec)).stdout)
    assert {d["severity"] for d in noted if d.get("source") != "model"} == {"note"}


def test_check_json_reports_load_errors_as_json(tmp_path):
    spec = tmp_path / "bad.toml"
    spec.write_text(kernel("k").replace('dtype = "f16", major = "k" }\nb', 'dtype = "f17", major = "k" }\nb'))
    r = run("check", "--json", str(spec))
    assert r.exit_code == 1
    (row,) = json.loads(r.stdout)
    assert (row["file"], row["line"], row["column"], row["rule"], row["severity"]) == (str(spec), 5, 7, "LOAD", "error")
    assert row["field"] == "kernels[0].a.dtype" and "f17" in row["message"]


def test_render_says_once_which_targets_have_no_renderer(monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    r = run("render", "--out", str(tmp_path))
    assert r.exit_code == 0, r.output
    lines = [line for line in r.stdout.splitlines() if "no renderer" in line]
    # the catalogue's targets whose design is checked only (none since the CuTe sm100 design), from the registry
    unrendered = sorted({str(t) for ls in load_paths([Path("specs")]) for t in ls.spec.targets
                         if not design_for(ls.spec.kind, t).renders})
    assert len(lines) == (1 if unrendered else 0)
    if unrendered:
        assert lines[0].startswith(f"checked only, no renderer yet in specgen {__version__}: {', '.join(unrendered)} (")
        assert re.search(r"\(\d+ targets of \d+ specs\)$", lines[0])


def test_version_flag_and_plurals(tmp_path):
    r = run("--version")
    assert (r.exit_code, r.stdout) == (0, f"specgen {__version__}\n")
    spec = tmp_path / "one.toml"
    # cute:sm100: no near-boundary verdict on this kernel (Triton's would be warnings under --no-compile)
    one = kernel("one").replace('targets = ["triton:sm90", "triton:sm100"]', 'targets = ["cute:sm100"]')
    spec.write_text(one)
    assert re.search(r"^1 spec, 1 target: 0 errors, 0 warnings \(\d+ ms\)$", run("check", str(spec)).stdout, re.M)
    spec.write_text(one + one.replace('"one"', '"two"'))
    assert re.search(r"^2 specs, 2 targets: 0 errors, 0 warnings", run("check", str(spec)).stdout, re.M)
    spec.write_text(kernel("one") + kernel("two"))
    assert re.search(r"^2 specs, 4 targets: 0 errors, \d+ warnings", run("check", str(spec)).stdout, re.M)


@pytest.mark.parametrize("command", ["check", "render", "compile"])
def test_flags_read_as_flags_in_help(command):
    r = run(command, "--help")
    assert r.exit_code == 0
    assert "<bool>" not in r.stdout
    flag = {"check": "--json", "render": "--check", "compile": "--json"}[command]
    assert re.search(rf"^  {flag}\s+\w", r.stdout, re.M), r.stdout


def test_rules_say_where_each_applies():
    lines = {line.split()[0]: line for line in run("rules").stdout.splitlines()}
    assert lines["TMEM001"].endswith("[cute sm100]")  # tensor memory exists only on tcgen05
    assert lines["DT003"].endswith("[pallas tpu_v5e, tpu_v5p, tpu_v6e, tpu_v7x]")
    assert lines["POW001"].endswith("[triton sm90, sm100]")
    assert "pallas gpu_sm90" in lines["SMEM001"] and "triton sm90, sm100" in lines["SMEM001"]


def test_the_guard_names_w_t_for_a_weight_stored_n_k():
    w = torch.randn(64, 32, dtype=torch.float16)  # an nn.Linear weight: (N, K), K contiguous
    assert matrix("lin", "b", w.t(), torch.float16, 2, 0, -1).shape == (32, 64)  # k-major b: w.t() fits
    with pytest.raises(ValueError, match=r"argument 'b' must be contiguous along dim 0") as e:
        matrix("lin", "b", w.t().contiguous(), torch.float16, 2, 0, -1)
    assert "pass w.t()" in str(e.value) and ".contiguous()" not in str(e.value)
    with pytest.raises(ValueError, match=r'w\.t\(\)\.contiguous\(\) for a weight stored \(N, K\)'):
        matrix("lin", "b", w.t(), torch.float16, 2, 1, -1)  # an mn-major b wants (K, N) row-major


@pytest.mark.slow
def test_a_compile_failure_shows_the_compilers_message(tmp_path):
    assert run("render", str(ROOT / "specs" / "gemm_bf16.toml"), "--out", str(tmp_path)).exit_code == 0
    module = tmp_path / "triton" / "gemm_bf16.py"
    module.write_text(module.read_text().replace("acc = tl.dot(a, b, acc)", "acc = tl.dot(a, b, acc) + no_such_name"))
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    r = subprocess.run([sys.executable, "-m", "specgen", "compile", "--json", "--out", str(tmp_path), "--target",
                        "triton:sm90", str(ROOT / "specs" / "gemm_bf16.toml")], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    rows = {(row := json.loads(line))["kernel"]: row for line in r.stdout.splitlines() if line.startswith("{")}
    row = rows["gemm_bf16"]
    assert row["error"].startswith("CompilationError: at ")
    assert "no_such_name" in row["error"] and "not defined" in row["error"], row["error"]
