"""`specgen compile` on this CPU machine: every catalogue Triton kernel (and each of its size-selected
variants) compiles for each of its targets (triton.compile for a GPUTarget), and the plan's SMEM estimate stays within 10% of what the
compiler allocated; every training module's backward kernels (`<kernel>[role]`) compile for sm_90, one training
spec's for sm_100; every Pallas TPU module lowers for each of its TPU targets (Mosaic lowering). Runs the real CLI in a subprocess: compiling needs the interpreter off, which
the rest of the CPU suite keeps on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from specgen.spec.load import load_paths
from specgen.targets import TARGETS

ROOT = Path(__file__).resolve().parents[1]


def run_compile(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1"}
    return subprocess.run([sys.executable, "-m", "specgen", "compile", "--json", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_every_catalogue_kernel_compiles_with_plan_smem_within_10_percent() -> None:
    tpus = [arg for name, t in TARGETS.items() if t.memory == "vmem" for arg in ("--target", name)]
    # sm_90 with the training modules' backward kernels, sm_100 their forwards (one training spec's backward for
    # sm_100: test_a_training_backward_compiles_for_sm100; the backward's 38 kernels on both cost ~34 s of CPU)
    rows = []
    for args in (("--target", "triton:sm90", *tpus), ("--target", "triton:sm100", "--forward-only")):  # CuTe: tests/backends/cute
        proc = run_compile(*args)
        rows += (found := [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")])
        # the one failed row is a verdict, not a compile error: a backward kernel that spills (below); the CLI exits 1
        assert proc.returncode == (1 if any(r["error"] for r in found) else 0), proc.stdout + proc.stderr
    assert not any("[" in r["kernel"] for r in rows if r["target"] == "triton:sm100"), "--forward-only"
    specs = load_paths([ROOT / "specs"])
    backward = [r for r in rows if r["target"].startswith("triton:") and "[" in r["kernel"]]  # `<kernel>[role]`
    every = [r for r in rows if r["target"].startswith("triton:") and r not in backward]
    triton = [r for r in every if r["variant"] is None]
    expected = {(ls.name, str(t)) for ls in specs for t in ls.spec.targets if t.backend.value == "triton"}
    assert {(r["kernel"], r["target"]) for r in triton} == expected
    assert {r["target"] for r in triton} == {"triton:sm90", "triton:sm100"}
    for r in triton:
        assert not r["error"], r
        # Triton adds a few 8-byte mbarriers per stage on top of the buffers the plan counts.
        assert abs(r["plan_smem"] - r["compiler_smem"]) <= 0.10 * r["compiler_smem"], r
        assert r["compiler_smem"] <= 232448, r
    # every size-selected variant (split-K ones included) compiles too, within the plan's budget (the
    # plan is an upper bound there: small-M tiles pipeline one buffer fewer, a split-K store may reuse
    # the drained pipeline)
    variants = {(r["kernel"], r["target"], r["variant"]) for r in every if r["variant"] is not None}
    assert variants == {(ls.name, str(t), i) for ls in specs for t in ls.spec.targets if t.backend.value == "triton"
                        for i in range(len(ls.spec.variants_on(t)))}
    assert any(v[0] == "gemm_bf16" for v in variants) and any(v[0] == "gemm_fp8_rowwise" for v in variants)
    for r in every:
        assert not r["error"], r
        assert r["compiler_smem"] <= min(r["plan_smem"] + 256, 232448), r
    # every training module's backward kernels compile too (kernels/gemm/designs/triton/compile_backward.py), each
    # as an nn.Linear layer launches it, within the SMEM the GPU has: the GEMMs (dgrad, wgrad, and forward_pre or
    # recompute where the epilogue has an activation) at their plan SMEM, the streaming kernels (grad_cols,
    # act_rows) planned at 0. The dense plan is backward.jinja's persistent kernel's (options.for_backward): dgrad's
    # and wgrad's TMA-store staging and a flattened forward_pre's or recompute's pointer-store scratch beside the
    # pipeline (212,992 and 180,224 B planned; triton 3.9: 213,016 / 213,048 and 180,248 compiled; the preact
    # forward_pre at 128 x 256 x 64 over 4 stages 229,376).
    roles: dict[tuple[str, str], set[str]] = {}
    for r in backward:
        kernel, role = r["kernel"].rstrip("]").split("[")
        roles.setdefault((kernel, r["target"]), set()).add(role)
        assert r["compiler_smem"] is not None and r["compiler_smem"] <= 232448, r
        assert r["registers"] and (r["plan_smem"] > 0) == (role in ("forward_pre", "recompute", "dgrad", "wgrad")), r
        assert 0 <= r["compiler_smem"] - r["plan_smem"] <= 256, r  # the plan, barriers aside
        # a spill is a verdict, reported failed with its bytes: none here (check settles each backward GEMM's near
        # verdict with this kernel's compile: specs/training.toml's gated recompute GEMM on 128 x 128 spilled 140 B
        # with triton 3.9 until its epilogue went to column subtiles, 178 registers, in session 34)
        assert not r["error"], r
    trains = {(ls.name, str(t)): ls.spec for ls in specs if ls.spec.training is not None for t in ls.spec.targets
              if str(t) == "triton:sm90"}
    assert set(roles) == set(trains)
    for key, spec in trains.items():
        assert {"dgrad", "wgrad"} <= roles[key], key
        acts = any(op.op in ("activation", "gated") for op in spec.epilogue)
        assert acts == bool(roles[key] & {"forward_pre", "recompute"}), key
    pallas = [r for r in rows if r not in every and r not in backward]
    # Pallas TPU modules lower for TPU (Mosaic); libtpu's compile, and its VMEM figure, need a TPU.
    assert {(r["kernel"], r["target"]) for r in pallas} == {
        (ls.name, str(t)) for ls in specs for t in ls.spec.targets if TARGETS[str(t)].memory == "vmem"}
    for r in pallas:
        assert not r["error"] and r["compiler_smem"] is None and r["plan_smem"] > 0, r


def test_a_training_backward_compiles_for_sm100(tmp_path: Path) -> None:
    """One training spec's backward kernels for sm_100 (tcgen05; the catalogue test compiles every training module's
    for sm_90): the gated recompute GEMM, dgrad and wgrad in their TMA forms as an nn.Linear layer launches them."""
    text = (ROOT / "specs" / "training.toml").read_text()
    start = text.index('name = "mlp_up_swiglu_train_recompute_bf16"')
    (tmp_path / "one.toml").write_text("[[kernels]]\n" + text[start:text.index("[[kernels]]", start)])
    proc = run_compile("--target", "triton:sm100", str(tmp_path / "one.toml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {r["kernel"]: r for r in (json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{"))}
    name = "mlp_up_swiglu_train_recompute_bf16"
    assert set(rows) == {name, *(f"{name}[{role}]" for role in ("recompute", "dgrad", "wgrad"))}
    for r in rows.values():
        assert not r["error"] and r["registers"] and r["target"] == "triton:sm100", r
        assert r["plan_smem"] > 0 and r["compiler_smem"] <= 232448, r


BATCHED_TRAINING = """[[kernels]]
name = "bmm_chain_train_bf16"
kind = "gemm"
a = { dtype = "bf16", major = "k" }
b = { dtype = "bf16", major = "k" }
out = { dtype = "bf16" }
batch = true
epilogue = [{ op = "bias", along = "m", dtype = "bf16" }, { op = "residual", dtype = "bf16" },
            { op = "activation", fn = "silu" }, { op = "scale", by = "col" }]
training = { save = "preact" }
tile = { m = 128, n = 128, k = 64 }
schedule = { persistent = true }
triton = { num_warps = 8 }
targets = ["triton:sm90"]
"""


def test_a_batched_training_backward_compiles_for_sm90(tmp_path: Path) -> None:
    """A batched spec's backward (batch = true; not in the catalogue) as an nn.Linear layer's batch of 2 launches it:
    forward_pre with the batch's residual rebased per tile and its 3-D TMA descriptors, the chain pass and its sums
    over the batch axis, dgrad and wgrad per batch (TMA loads and stores of one batch's boxes), each at its plan SMEM
    (barriers aside) with no spill."""
    (tmp_path / "bmm.toml").write_text(BATCHED_TRAINING)
    env = {**os.environ, "SPECGEN_NO_COMPILE": "1"}
    render = subprocess.run([sys.executable, "-m", "specgen", "render", "--no-compile", "--out", str(tmp_path / "gen"),
                             str(tmp_path / "bmm.toml")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert render.returncode == 0, render.stdout + render.stderr
    proc = run_compile("--out", str(tmp_path / "gen"), "--target", "triton:sm90", str(tmp_path / "bmm.toml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {r["kernel"]: r for r in (json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{"))}
    name = "bmm_chain_train_bf16"
    assert set(rows) == {name, *(f"{name}[{role}]" for role in ("forward_pre", "chain", "sums", "dgrad", "wgrad"))}
    for r in rows.values():
        assert not r["error"] and r["registers"] and not r["spills"]["store_bytes"], r
        assert 0 <= r["compiler_smem"] - r["plan_smem"] <= 256, r


def test_compile_fails_cleanly_on_a_missing_module(tmp_path: Path) -> None:
    proc = run_compile("--out", str(tmp_path), "specs/gemm_bf16.toml")
    assert proc.returncode == 1
    assert "run `specgen render` first" in proc.stderr


def test_compile_rejects_an_unknown_target() -> None:
    proc = run_compile("--target", "triton:sm75")
    assert proc.returncode == 2
    assert "known targets" in proc.stderr


def test_compile_says_what_to_install_without_triton() -> None:
    script = ("import sys; sys.modules['triton'] = None; import importlib.util as u; "
              "u.find_spec = lambda name, *a: None if name == 'triton' else __import__('importlib.machinery')"
              ".machinery.PathFinder.find_spec(name); from specgen.cli import main; sys.argv = ['specgen', 'compile']; main()")
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "pip install 'specgen[triton]'" in proc.stderr


def test_compile_refuses_a_module_rendered_from_another_spec(tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    text = (ROOT / "specs" / "gemm_bf16.toml").read_text()
    (specs / "gemm_bf16.toml").write_text(text)
    out = tmp_path / "out"
    render = subprocess.run([sys.executable, "-m", "specgen", "render", "--out", str(out), str(specs)], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert render.returncode == 0, render.stdout + render.stderr
    (specs / "gemm_bf16.toml").write_text(text.replace("group_m = 8", "group_m = 4"))  # the spec changes
    proc = subprocess.run([sys.executable, "-m", "specgen", "compile", "--json", "--out", str(out), str(specs)],
                          cwd=tmp_path, env={**os.environ, "TRITON_INTERPRET": "0"}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"{out / 'triton' / 'gemm_bf16.py'} was rendered from spec" in proc.stderr
    assert "run `specgen render` first" in proc.stderr and not proc.stdout.strip()
