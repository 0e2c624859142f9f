"""Check's settle step (specgen/settle.py): a modelled verdict within its rule's margin of the boundary is
settled by the compiler where installed (cached on disk, tagged `(compiler)`), else stays the model's with a
warning saying how to settle it (`(model)`); `--no-compile` keeps check analytic. The margins come from the
compiled grid records (tests/data/): recomputed here."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specgen import settle
from specgen.check import check_specs
from specgen.cli import app
from specgen.kinds.gemm.designs.cute_sm90.design import register_estimate
from specgen.kinds.gemm.designs.cute_sm90.rules import REGISTER_MARGIN
from specgen.resolve import resolve
from specgen.rules.finding import Margin
from specgen.rules.table import run_rules
from specgen.spec.load import load_paths, load_text

ROOT = Path(__file__).resolve().parents[1]
RECORD = json.loads((ROOT / "tests" / "data" / "grid_cute_sm90.json").read_text())["cases"]
CASES = {c["spec"]["name"]: c for c in RECORD}


def loaded(name: str):
    (ls,) = load_text(json.dumps({"kernels": [CASES[name]["spec"]]}), f"<grid:{name}>", ".json")
    return ls


def fitting_spec(name: str) -> dict:
    """The grid spec with its pipeline depth left to the planner: SMEM fits (the record's 6 stages of a 192-wide
    tile did not), so REG001 decides alone (a config refused for a definite reason compiles nothing)."""
    return {**CASES[name]["spec"], "pipeline": {"ab_stages": "auto"}}


def fitting(name: str):
    (ls,) = load_text(json.dumps({"kernels": [fitting_spec(name)]}), f"<grid:{name}>", ".json")
    return ls


def excess(name: str) -> int:
    ls = loaded(name)
    est = register_estimate(ls.spec.for_target(ls.spec.targets[0]))
    return est.total - est.budget


@pytest.fixture(autouse=True)
def compiling(monkeypatch):
    """These tests settle with the (stand-in or real) compiler: not the suite's `--no-compile` default."""
    monkeypatch.delenv("SPECGEN_NO_COMPILE", raising=False)


# --- the margin, from the record ----------------------------------------------------------------------------
def test_reg001_cute_sm90_margin_is_the_models_measured_error_over_the_grid_record():
    """Estimate minus 232 where ptxas disagreed with the model: the spilling kernels it accepts sit 15 under and
    at the limit (0: cprobe_pp128x192_rowcol_fp8, re-recorded in session 28: 16 B spilled over today's templates),
    both near; the spill-free kernels it refuses sit 1..21 over (12 of them), then 37 and 40 (40 above, with the
    held-out 33 below), the rest far. Session 28 recompiled the whole record over its templates: cgrid_17_0156 (21
    over, 248 B) and cgrid_19_0065 (14 over, 16 B) now build spill-free at 230 registers, cgrid_17_0109 (21 over,
    past the SMEM limit) now spills 328 B too: one 21 out, a 14 and a 21 in, both near."""
    rows = [(excess(name), c["compiler"]["verdict"] == "spill") for name, c in CASES.items()
            if c["compiler"]["verdict"] != "error"]
    assert len(rows) == 557
    false_accepts = sorted(e for e, spilled in rows if spilled and e <= 0)
    false_rejects = sorted(e for e, spilled in rows if not spilled and e > 0)
    assert false_accepts == [-15, 0]
    assert false_rejects == [1, 1, 3, 3, 7, 8, 8, 10, 13, 14, 19, 21, 37, 40, 48, 58, 93, 138]
    assert Margin(below=64, above=40, unit="registers") == REGISTER_MARGIN
    assert all(REGISTER_MARGIN.near(232 + e, 232) for e in false_accepts)  # no accept the compiler refuses is far
    assert sum(REGISTER_MARGIN.near(232 + e, 232) for e in false_rejects) == 14


# Held out: seeds 101-104 of tests/grids/cute_sm90.py (35 random specs each), drawn after the register model
# was final and compiled with the DSL 4.8.1 on 2026-11-27 (16 CPU cores of the GPU machine): the kernels the
# model accepted and ptxas spilled. They set the margin's lower side.
HELD_OUT_SPILLS = {103: ["cgrid_103_0001", "cgrid_103_0003", "cgrid_103_0009", "cgrid_103_0020"],
                   104: ["cgrid_104_0013", "cgrid_104_0022"]}


def held_out_excesses(held: dict[int, list[str]]) -> list[int]:
    """The register estimate minus 232 of each named spec of tests/grids/cute_sm90.py's seeds (35 specs each)."""
    sys.path.insert(0, str(ROOT / "tests" / "grids"))
    import cute_sm90 as grid  # tests/grids is no package

    excesses = []
    for seed, names in held.items():
        specs = {s["name"]: s for s in grid.grid(35, seed)}
        for name in names:
            (ls,) = load_text(json.dumps({"kernels": [specs[name]]}), f"<grid:{name}>", ".json")
            est = register_estimate(ls.spec.for_target(ls.spec.targets[0]))
            excesses.append(round(est.total - est.budget))
    return excesses


def test_reg001_margin_covers_the_held_out_spills():
    excesses = held_out_excesses(HELD_OUT_SPILLS)
    assert sorted(excesses) == [-63, -61, -56, -51, -23, -10]  # every one accepted by the model, the lowest 63 under
    assert all(REGISTER_MARGIN.near(232 + e, 232) for e in excesses)  # so each is settled by the compiler now


# Held out: seeds 109-112 (35 each), drawn after the margin was 64 under / 24 over and compiled on 2026-11-27:
# 0 false accepts with the compiler, and two spill-free kernels the model refused far over (137 and 33): the
# second moved the upper side to 40 (the record's 37 and 40 with it); the first stays a far refusal.
HELD_OUT_CLEAN = {109: ["cgrid_109_0024"], 110: ["cgrid_110_0021"]}


def test_reg001_margin_covers_the_held_out_clean_refusal_it_was_widened_for():
    excesses = held_out_excesses(HELD_OUT_CLEAN)
    assert excesses == [137, 33]
    assert [REGISTER_MARGIN.near(232 + e, 232) for e in excesses] == [False, True]


def test_margin_edges_on_both_sides():
    m = REGISTER_MARGIN
    assert [m.near(232 + d, 232) for d in (-65, -64, 0, 1, 40, 41)] == [False, True, True, True, True, False]


@pytest.mark.parametrize(("name", "accepted", "near"), [
    ("cgrid_17_0191", True, True),  # 15 under: a near accept (ptxas spilled 1392 B; SMEM001 refuses it too)
    ("cgrid_17_0208", False, True),  # 1 over: a near refusal (spill-free)
    ("cgrid_17_0109", False, True),  # 21 over (past the SMEM limit; spills 328 B since session 28's recompile)
    ("cgrid_17_0042", False, True),  # 37 over
    ("cgrid_17_0064", False, False),  # 93 over: a far refusal, the model's
])
def test_reg001_says_near_on_both_sides(name, accepted, near):
    ls = loaded(name)
    r = resolve(ls.spec, ls.spec.targets[0])
    (f,) = [f for f in run_rules(r, near=True) if f.rule == "REG001"]
    assert (f.near is not None) == near
    if near:
        assert f.near.accepted == accepted
    # the model's plain verdicts (library calls, the grid replays) are as before: no near accept
    assert [g.rule for g in run_rules(r) if g.rule == "REG001"] == ([] if accepted else ["REG001"])


def test_a_far_accept_has_no_finding():
    far = next(n for n in CASES if CASES[n]["compiler"]["verdict"] == "ok" and excess(n) < -16)
    ls = loaded(far)
    assert not [f for f in run_rules(resolve(ls.spec, ls.spec.targets[0]), near=True) if f.rule == "REG001"]


# --- the settle step, with a stand-in compiler ------------------------------------------------------------
@pytest.fixture
def fake_compiler(monkeypatch, tmp_path):
    """A compiler that is installed and reports `result`; counts its compiles."""
    monkeypatch.setenv("SPECGEN_SETTLE_CACHE", str(tmp_path / "settle"))
    monkeypatch.setattr(settle, "compiler_versions", lambda probe: {"fake-compiler": "1.0"})
    calls: list[dict] = []
    state = {"result": {"error": "", "spill_bytes": 16, "registers": 232}}

    def run(job):
        calls.append(job)
        return state["result"], True

    monkeypatch.setattr(settle, "_run_probe", run)
    return calls, state


def reg001(report):
    return [d for d in report.diagnostics if d.rule == "REG001"]


def test_the_compiler_settles_a_near_accept_and_a_second_check_compiles_nothing(fake_compiler):
    calls, _ = fake_compiler
    (d,) = reg001(first := check_specs([fitting("cgrid_17_0191")], settle="compile"))
    assert (d.severity, d.source, d.label) == ("error", "compiler", "REG001 (compiler)")
    assert d.message.startswith("16 bytes spilled (ptxas, 232 registers a thread) (the model: a consumer thread")
    assert len(calls) == 1 and first.settled.compiled == 1 and first.settled.cached == 0
    again = check_specs([fitting("cgrid_17_0191")], settle="compile")
    assert len(calls) == 1 and again.settled.compiled == 0 and again.settled.cached == 1
    assert reg001(again) == reg001(first)
    job = calls[0]
    assert job["target"] == "cute:sm90" and job["spec"]["name"] == "settle_probe" and "per_target" not in job["spec"]


def test_the_compiler_accepting_a_near_refusal_drops_it(fake_compiler):
    calls, state = fake_compiler
    state["result"] = {"error": "", "spill_bytes": 0, "registers": 230}
    assert reg001(check_specs([loaded("cgrid_17_0208")], settle="compile")) == []
    state["result"] = {"error": "DSLRuntimeError: boom"}
    (d,) = reg001(check_specs([fitting("cgrid_17_0109")], settle="compile"))
    assert d.severity == "error" and d.message.startswith("the config does not compile: DSLRuntimeError: boom")


def test_one_config_in_two_kernels_compiles_once(fake_compiler):
    calls, _ = fake_compiler
    report = check_specs([fitting("cgrid_17_0191"), fitting("cgrid_17_0191")], settle="compile")
    assert len(calls) == 1 and len(reg001(report)) == 2 and report.settled.near == 2


def test_a_failed_probe_leaves_the_models_verdict_and_is_not_cached(fake_compiler, monkeypatch):
    calls, state = fake_compiler
    monkeypatch.setattr(settle, "_run_probe", lambda job: (calls.append(job), ({"probe_failed": "nvdisasm"}, False))[1])
    (d,) = reg001(check_specs([fitting("cgrid_17_0191")], settle="compile"))
    assert (d.severity, d.source) == ("warning", "model") and "nvdisasm" in d.hint
    check_specs([fitting("cgrid_17_0191")], settle="compile")
    assert len(calls) == 2


def test_without_the_compiler_a_near_verdict_says_so_and_how_to_settle_it(monkeypatch):
    monkeypatch.setattr(settle, "compiler_versions", lambda probe: None)  # the core install
    monkeypatch.setattr(settle, "_run_probe", lambda job: pytest.fail("compiled without a compiler"))
    (acc,) = reg001(check_specs([fitting("cgrid_17_0191")], settle="compile"))
    assert (acc.severity, acc.source) == ("warning", "model")
    assert acc.message.startswith("near the boundary (within 64 registers under to 40 over the limit")
    assert "pip install 'specgen[cute]'" in acc.hint and "specgen compile" in acc.hint
    (rej,) = reg001(check_specs([loaded("cgrid_17_0208")], settle="compile"))
    assert (rej.severity, rej.source) == ("error", "model") and "near the boundary" in rej.message


def test_a_config_refused_for_a_definite_reason_compiles_nothing(fake_compiler):
    calls, _ = fake_compiler
    report = check_specs([loaded("cgrid_17_0191")], settle="compile")  # 6 stages of 192x192: SMEM001, far
    assert [d.rule for d in report.diagnostics] == ["SMEM001"] and calls == [] and report.settled.near == 0
    (rej,) = reg001(check_specs([loaded("cgrid_17_0109")], settle="compile"))  # SMEM001 too: REG001 21 over
    assert (rej.severity, rej.source) == ("error", "") and "near" not in rej.message and calls == []


def test_far_verdicts_are_untagged_and_the_model_mode_is_unchanged(fake_compiler):
    calls, _ = fake_compiler
    (far,) = reg001(check_specs([loaded("cgrid_17_0064")], settle="compile"))
    assert far.source == "" and far.label == "REG001" and "source" not in far.as_dict()
    (plain,) = reg001(check_specs([loaded("cgrid_17_0208")]))  # the library default: the model's verdict
    assert plain.source == "" and "near" not in plain.message
    assert calls == []


def test_check_no_compile_keeps_it_analytic(monkeypatch, tmp_path):
    monkeypatch.setattr(settle, "_run_probe", lambda job: pytest.fail("--no-compile compiled"))
    spec = tmp_path / "near.json"
    spec.write_text(json.dumps({"kernels": [fitting_spec("cgrid_17_0191")]}))
    r = CliRunner().invoke(app, ["check", str(spec), "--no-compile"])
    assert "1 spec, 1 target: 0 errors, 1 warning" in r.output, r.output  # REG001, near: the model accepts it
    assert "REG001 (model)" in r.output and "without --no-compile" in r.output and "settled" not in r.output


def test_a_cold_check_says_what_it_compiled(fake_compiler, tmp_path):
    spec = tmp_path / "near.json"
    spec.write_text(json.dumps({"kernels": [fitting_spec("cgrid_17_0191")]}))
    r = CliRunner().invoke(app, ["check", str(spec)])
    assert r.exit_code == 1 and "REG001 (compiler)" in r.output
    assert "settled 1 near-boundary verdict with the compiler: compiled 1 config in" in r.output
    again = CliRunner().invoke(app, ["check", str(spec)])
    assert "settled" not in again.output and "REG001 (compiler)" in again.output


# --- import hygiene: a warm cache or --no-compile imports no compiler ----------------------------------------
HYGIENE = """
import sys
from specgen.cli import app
try:
    app({args!r})
except SystemExit as e:
    assert e.code == 0, e.code
heavy = sorted({{m.split(".")[0] for m in sys.modules}} & {{"torch", "triton", "jax", "jaxlib", "cutlass"}})
assert not heavy, heavy
print("clean")
"""


def warm_catalogue_cache(folder: Path) -> int:
    """The catalogue's near-boundary configs' verdicts, as a compile would have cached them (spill-free)."""
    os.environ["SPECGEN_SETTLE_CACHE"] = str(folder)
    try:
        resolved = [resolve(ls.spec, t) for ls in load_paths([ROOT / "specs"]) for t in ls.spec.targets]
        near = [(one, f) for r in resolved for one in (r, *r.variants, *r.companions) for f in run_rules(one, near=True)
                if f.near]
        for one, _ in near:
            probe = one.design.compile_probe()
            versions = settle.compiler_versions(probe) or pytest.skip(f"{probe.extra}'s compiler is not installed")
            config = settle.standalone(one)
            settle._write_cache(settle.cache_key(config, versions, settle.backward_role(one)),
                                {"probe": {"error": "", "spill_bytes": 0}})
    finally:
        del os.environ["SPECGEN_SETTLE_CACHE"]
    return len(near)


@pytest.mark.parametrize("args", [["check", "specs"], ["check", "specs", "--no-compile"]])
def test_check_of_the_catalogue_warm_or_analytic_imports_no_compiler(tmp_path, args):
    # the catalogue's cute:sm90 configs 64 or fewer registers under 232 (or over by 40 at most) and every
    # Triton config from 16 estimated registers up (REG001) or within SMEM001's margin
    # 48 the six grouped kernels' and the dense gated one's (REG001 and SMEM001 on triton:sm90 and sm100, default
    # and decode configs); 28 specs/training.toml's (its three forwards' REG001 and SMEM001, and its backward GEMMs':
    # forward_pre or recompute, dgrad, wgrad, each REG001 and SMEM001; the plain Linear's dgrad and wgrad, on
    # triton:sm90 and on triton:sm100); 32 the two gated training kernels' (8 each on triton:sm90 and sm100: the
    # forward's, forward_pre's or recompute's, dgrad's and wgrad's REG001 and SMEM001); 1 the gated MoE kernel's
    # cute:sm90 decode variant (REG001: 184 estimated of 232); 2 the CuTe training kernel's (REG001: its forward's, and
    # since session 34 its forward_pre's, ruled with the bias and tanh GELU its kernel applies: 162 estimated of 232 with
    # the tanh's `hoist_near`, 137 when its companion had no epilogue); 14 the grouped
    # training kernel's (moe_up_gelu_train_bf16: its forward's and its backward GEMMs' REG001, and SMEM001 but its
    # wgrad's, whose 128x128x64 tile over 3 stages is far under the limit since session 30, on triton:sm90 and sm100); 2 the
    # cute:sm90 configs whose SiLU / tanh GELU would hold its tanh for the whole tile past 232 registers (REG001's
    # `hoist_near`: gemm_bias_gelu_bf16's variant 4, 128x112 on one warpgroup, 165 + 112; moe_up_bias_silu_bf16's
    # default, 128x256 on two, 160 + 128; both compile spill-free, nvidia-cutlass-dsl 4.8.1); 2 moe_wgrad_bf16's
    # (session 30: 128x128x64 over 3 stages and 4 warps, REG001 on triton:sm90 and sm100: a 128-register accumulator
    # a thread)
    assert warm_catalogue_cache(tmp_path) == 248
    env = {**{k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "SPECGEN_NO_COMPILE")},
           "SPECGEN_SETTLE_CACHE": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", HYGIENE.format(args=args)], cwd=ROOT, env=env, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().endswith("clean") and "settled" not in r.stdout


# --- one real compile: the CuTe DSL settles the catalogue's near config ----------------------------------
@pytest.mark.skipif(importlib.util.find_spec("cutlass") is None, reason="needs nvidia-cutlass-dsl")
def test_the_cute_dsl_settles_a_near_reg001_verdict(monkeypatch, tmp_path):
    """gemm_bias_gelu_bf16 on cute:sm90: its default config (128x192, bias and tanh GELU: the model estimates
    226 of 232 registers), its variant 6 (176) and its variant 4 (165, but its tanh GELU's tanh for the whole
    128x112 tile would take 112 more: REG001's `hoist_near`) are near; sm_90a's ptxas builds all three spill-free
    (nvidia-cutlass-dsl 4.8.1: the default at 230 registers, 0 spill bytes), so the compiler's verdicts drop
    the finding. About 30 s of CPU."""
    monkeypatch.setenv("SPECGEN_SETTLE_CACHE", str(tmp_path))
    (whole,) = [ls for ls in load_paths([ROOT / "specs"]) if ls.name == "gemm_bias_gelu_bf16"]
    spec = whole.spec.model_dump(mode="json", exclude_none=True) | {"targets": ["cute:sm90"]}  # its Triton configs aside
    spec["per_target"] = {"cute:sm90": spec["per_target"]["cute:sm90"]}
    (ls,) = load_text(json.dumps({"kernels": [spec]}), "<catalogue>", ".json")
    calls = []
    real = settle._run_probe
    monkeypatch.setattr(settle, "_run_probe", lambda job: (calls.append(job), real(job))[1])
    report = check_specs([ls], settle="compile")
    assert len(calls) == 3 and report.settled.compiled == 3 and not reg001(report)
    entries = [json.loads(p.read_text()) for p in tmp_path.glob("*.json")]
    assert len(entries) == 3 and all(e["probe"]["error"] == "" and e["probe"]["spill_bytes"] == 0 for e in entries)
    assert max(e["probe"]["registers"] for e in entries) > 200
    assert not reg001(check_specs([ls], settle="compile")) and len(calls) == 3  # the second check: from the cache


# --- one real compile: a Triton backward GEMM's verdict is settled by its own kernel -----------------------
@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")
def test_a_triton_backward_gemms_near_verdict_compiles_its_own_kernel(monkeypatch, tmp_path):
    """The Triton design's backward GEMMs are backward.jinja's kernels (persistent; dgrad's output tile staged for
    its TMA store beside the pipeline), not the forward kernel at their config: linear_bias_train_bf16's dgrad
    (near: 212,992 B planned of 232,448) is settled by compiling the training module's dgrad kernel, whose SMEM
    the plan matches (triton 3.9: 213,016 B; the forward kernel at that config takes 147,456 + barriers)."""
    monkeypatch.setenv("SPECGEN_SETTLE_CACHE", str(tmp_path))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    (ls,) = [ls for ls in load_paths([ROOT / "specs" / "training.toml"]) if ls.name == "linear_bias_train_bf16"]
    (dgrad,) = [c for c in resolve(ls.spec, ls.spec.targets[0]).companions if c.companion == "dgrad"]
    (near,) = [f for f in run_rules(dgrad, near=True) if f.rule == "SMEM001" and f.near]
    assert settle.backward_role(dgrad) == "dgrad" and settle.standalone(dgrad)["training"]  # the training spec's
    jobs = []
    real = settle._run_probe
    monkeypatch.setattr(settle, "_run_probe", lambda job: (jobs.append(job), real(job))[1])
    (verdict,), stats = settle.settle([(dgrad, near)])
    assert verdict.finding is None and verdict.source == "compiler" and stats.compiled == 1
    assert [job["role"] for job in jobs] == ["dgrad"]
    (entry,) = [json.loads(p.read_text()) for p in tmp_path.glob("*.json")]
    assert entry["role"] == "dgrad" and 0 <= entry["probe"]["smem"] - dgrad.budget.total <= 256, entry["probe"]


TRITON_RECORDS = ("grid_triton.jsonl", "grid_triton_3.6.jsonl")  # triton 3.9.0 and 3.6.0, seed 17


def triton_cases():
    """(record, estimate, plan SMEM, capacity, compiler SMEM, spilled) of every compiled case of both records."""
    from specgen.kinds.gemm.designs.triton.rules import fma_operand_registers

    for record in TRITON_RECORDS:
        for line in (ROOT / "tests" / "data" / record).read_text().splitlines():
            c = json.loads(line)
            if c["compiler_smem"] is None:
                continue
            (ls,) = load_text(json.dumps({"kernels": [c["spec"]]}), "<grid>", ".json")
            r = resolve(ls.spec, ls.spec.targets[0])
            need = r.acc_registers + fma_operand_registers(r)
            yield record, need, r.budget.total, r.budget.capacity, c["compiler_smem"], c["spill_stores"] > 0


def test_triton_margins_are_the_models_measured_error_over_both_records():
    """triton/rules.py `register_findings` and triton/design.py `smem_margin`, recomputed: the lowest estimate
    ptxas spilled at and the highest it did not; the most the compiler allocated over the plan and the most
    it allocated under it where the kernel fits."""
    from specgen.kinds.gemm.designs.triton.design import TritonGemm
    from specgen.kinds.gemm.designs.triton.rules import REGISTER_MARGIN, TRITON_REGISTERS

    cases = list(triton_cases())
    assert len(cases) == 2000
    lowest_spill = min(need for _, need, *_, spilled in cases if spilled)
    highest_clean = max(need for _, need, *_, spilled in cases if not spilled)
    assert (lowest_spill, highest_clean) == (16, 256)
    measured = Margin(below=TRITON_REGISTERS - lowest_spill, above=highest_clean - TRITON_REGISTERS, unit="registers")
    assert measured == REGISTER_MARGIN
    under = max(smem - plan for _, _, plan, _, smem, _ in cases)
    over = max(plan - smem for _, _, plan, cap, smem, _ in cases if smem <= cap)
    assert TritonGemm.smem_margin == Margin(below=under, above=over, unit="bytes") == Margin(131136, 24560, "bytes")
    # every case the model alone gets wrong is near the boundary: settled by the compiler, never a silent verdict
    for _, need, plan, cap, smem, spilled in cases:
        if spilled and need <= TRITON_REGISTERS or not spilled and need > TRITON_REGISTERS:
            assert REGISTER_MARGIN.near(need, TRITON_REGISTERS)
        if (plan <= cap) != (smem <= cap):
            assert TritonGemm.smem_margin.near(plan, cap)


# --- one real compile: a CuTe sm90 forward_pre's verdict is settled by its own kernel ------------------------
def test_a_cute_forward_pres_near_verdict_compiles_its_own_kernel(monkeypatch, tmp_path):
    """The CuTe sm90 design's forward_pre is its kernel with pre's stores beside out's, more registers than the
    forward at the companion's config: a gated 128x192x64 tile (REG001 near: ~231 of 232 registers) compiles clean as
    a forward and spills 4 bytes as forward_pre (nvidia-cutlass-dsl 4.8.1, sm_90a; session 32: check in compile mode
    had passed it, `specgen compile` failed it). Settled by the role's kernel: REG001 from the compiler."""
    monkeypatch.setenv("SPECGEN_SETTLE_CACHE", str(tmp_path))
    spec = {"name": "g192", "kind": "gemm", "a": {"dtype": "bf16", "major": "k"}, "b": {"dtype": "bf16", "major": "k"},
            "out": {"dtype": "bf16"}, "epilogue": [{"op": "gated", "fn": "silu", "layout": "halves"}],
            "tile": {"m": 128, "n": 192, "k": 64}, "cute": {"mma_warpgroups": 2}, "cluster": {"m": 2, "n": 1},
            "pipeline": {"epilogue_stages": 1}, "schedule": {"persistent": True, "group_m": 8}, "targets": ["cute:sm90"],
            "training": {"save": "preact"}}
    (ls,) = load_text(json.dumps({"kernels": [spec]}), "<test>", ".json")
    (pre,) = [c for c in resolve(ls.spec, ls.spec.targets[0]).companions if c.companion == "forward_pre"]
    assert settle.backward_role(pre) == "forward_pre"
    errors = [d for d in check_specs([ls], settle="compile").diagnostics if d.severity == "error"]
    assert [(d.rule, d.variant) for d in errors] == [("REG001", "backward forward_pre")], [str(d) for d in errors]
    assert "spilled" in errors[0].message


def test_a_cute_sm100_companion_is_settled_by_its_roles_kernel():
    """The CuTe sm100 backward runs the tcgen05 kernel by role as sm90's does (forward_pre stores pre beside out): a
    near verdict of one of its companions would be settled by compiling that role's kernel, which its compile hook
    takes (`role`, as the probe passes it: specgen/probe.py)."""
    import inspect

    from specgen.kinds.gemm.designs.cute_sm100.compile import compile_module

    spec = {"name": "s100", "kind": "gemm", "a": {"dtype": "bf16", "major": "k"}, "b": {"dtype": "bf16", "major": "k"},
            "out": {"dtype": "bf16"}, "epilogue": [{"op": "bias", "dtype": "bf16"}, {"op": "activation", "fn": "gelu_tanh"}],
            "tile": {"m": 128, "n": 256, "k": 64}, "targets": ["cute:sm100"], "training": {"save": "recompute"}}
    (ls,) = load_text(json.dumps({"kernels": [spec]}), "<test>", ".json")
    roles = {c.companion: settle.backward_role(c) for c in resolve(ls.spec, ls.spec.targets[0]).companions}
    assert roles == {"recompute": "recompute", "dgrad": "dgrad", "wgrad": "wgrad"}, roles
    assert "role" in inspect.signature(compile_module).parameters
