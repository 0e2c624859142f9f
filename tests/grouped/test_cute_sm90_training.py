"""The grouped CuTe sm90 design's training (its backward: specgen/kinds/grouped/designs/cute_sm90/training.py,
templates/grouped/cute/train_sm90.jinja) on the CPU: CUTE_TRAINING_FORMS (preact with a per-group bias and GELU, offs,
B K-major, a zeroed tail; recompute with ReLU, sizes, B N-major; the plain GEMM with a bias only; SwiGLU halves + bias
preact and GeGLU-tanh interleaved recompute, issue 38) pass check (TRN001 among its rules) and render each backward GEMM
from its companion's plan (its Config row: the companion's tile, stages, SMEM and majors); every kernel of their
modules compiles for sm_90a through `cute.compile` over fake tensors with the plan's SMEM and no spills (one compile
per kernel, shared by the assertions), the columns pass's "_v" variants with 16-byte loads and stores. TRN001 refuses
other dtypes on cute:sm90 (a gated op's too), and a gated backward on cute:sm100, naming them (an fp8 forward's
backward, rendered since session 32: tests/grouped/test_cute_sm90_training_fp8.py). The numerics run on the GPU:
tests/gpu/test_grouped_training_cute_gpu.py."""

from __future__ import annotations

import json
import os

import pytest

from specgen.check import check_all
from specgen.kinds.grouped.designs.cute_sm90.design import DESIGN
from specgen.kinds.grouped.testing.specs import CUTE_TRAINING_FORMS
from specgen.render.catalogue import render_modules
from specgen.resolve import resolve
from specgen.spec.load import load_text
from specgen.targets import target_info

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")


def _load(s: dict):
    (ls,) = load_text(json.dumps({"kernels": [s]}), f"<test:{s['name']}>", ".json")
    return ls


def _errors(s: dict) -> list:
    return [d for d in check_all([_load(s)]) if d.severity == "error"]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, tuple[object, str]]:
    """Each form's module, rendered and imported once: name -> (module, text)."""
    from specgen.compile import load_rendered

    out = {}
    root = tmp_path_factory.mktemp("cute_grouped_train")
    for name, s in CUTE_TRAINING_FORMS.items():
        ((rel, text),) = render_modules(_load(s), _load(s).spec.targets).items()
        assert rel == f"cute/{name}.py"
        path = root / f"{name}.py"
        path.write_text(text)
        out[name] = (load_rendered(path, f"_specgen_test_cute_train_{name}"), text)
    return out


@pytest.mark.parametrize("name", sorted(CUTE_TRAINING_FORMS))
def test_each_form_checks_without_errors(name):
    assert _errors(CUTE_TRAINING_FORMS[name]) == []


def _wide_accesses(compiled) -> dict[str, int]:
    """The 16-byte global loads and stores in a compiled kernel's SASS (compile_config's `more`)."""
    import re
    import subprocess
    import tempfile
    from pathlib import Path

    from specgen.kinds.gemm.designs.cubin import nvdisasm

    cubin = compiled.artifacts.CUBIN
    with tempfile.TemporaryDirectory() as d:
        if isinstance(cubin, bytes):
            (Path(d) / "k.cubin").write_bytes(cubin)
            cubin = Path(d) / "k.cubin"
        text = subprocess.run([nvdisasm(), "-c", str(cubin)], capture_output=True, text=True, check=True).stdout
    return {"ldg128": len(re.findall(r"\bLDG\.E\.128\b", text)), "stg128": len(re.findall(r"\bSTG\.E\.128\b", text))}


# (form, its columns pass's modes, whether their element variants compile too (the "_v" ones always: the same kernel
# at vec = 1 is compiled for the gated forms only, to keep the cost small), the backward GEMMs compiled: the gated
# form's pre GEMM over 2N is the new one, its dgrad and wgrad the kernels the other forms compile at other tiles)
COMPILED = (("cgt_preact_bias_gelu", ("act_rows", "grad_cols"), False, ("forward_pre", "dgrad", "wgrad")),
            ("cgt_recompute_relu", ("grad_cols",), False, ("recompute", "dgrad", "wgrad")),
            ("cgt_bias_only", ("grad_sums",), False, ()),
            ("cgt_swiglu_halves_bias", ("act_rows", "grad_cols"), True, ("forward_pre",)),
            ("cgt_geglu_il_recompute", ("grad_cols",), True, ()))


def test_every_backward_kernel_compiles_with_the_plans_smem_and_no_spills(rendered, monkeypatch, tmp_path):
    """One test (one xdist worker compiles): each backward GEMM of the preact and recompute forms, the gated preact
    form's pre GEMM (B's 2N columns, two warpgroups) and every form's columns pass in 16-byte vectors (the gated forms'
    an element at a time too; the forwards are the grouped kernel tests/grouped/test_cute_sm90.py compiles)."""
    from specgen.kinds.gemm.designs.cute_sm90.compile import compile_config

    monkeypatch.setenv("SPECGEN_CUTE_CACHE", str(tmp_path / "cache"))
    target = target_info("cute:sm90")
    for name, modes, elements, roles in COMPILED:
        module = rendered[name][0]
        t = module.METADATA["plan"][90]["training"]
        assert module._cols_launcher.configs == tuple(v for m in modes for v in (m, m + "_v"))
        cols = [v for v in module._cols_launcher.configs if elements or v.endswith("_v")]
        for role in roles:  # the GEMMs: TMA loads, wgmma, the plan's SMEM; TMA stores, of every subtile into dB[g] (wgrad,
            # the ragged-K kernel) or of those inside the groups' rows (ragged M: pre, dgrad; predicated stores beside)
            r = compile_config(module._train_launcher, name, role, target, t["kernels"][role]["smem_bytes"], True, False)
            assert not r.error, r
            assert r.compiler_smem == r.plan_smem <= 232448, r
            assert r.sass["UTMALDG"] > 0 and r.sass["HGMMA"] > 0, (role, r.sass)
            assert r.sass["UTMASTG"] > 0, (role, r.sass)
            assert r.spills.stores == 0 and r.sass["LDL"] == 0 and r.sass["STL"] == 0, r
        for c in cols:  # the columns pass: SIMT, no SMEM; the "_v" variants load and store 16 bytes a thread and row
            r = compile_config(module._cols_launcher, name, c, target, 0, True, False, more=_wide_accesses)
            assert not r.error and r.compiler_smem == 0 and r.sass["HGMMA"] == 0 and r.sass["STL"] == 0, r
            wide = r.resources["ldg128"] > 0 and r.resources["stg128"] > 0  # (grad_sums stores only its 16-byte sums)
            assert wide == c.endswith("_v"), (c, r.resources)


def test_each_role_is_its_companions_plan(rendered):
    """dgrad reads B in the other major (G @ B[g]^T), zeroing rows past the groups; wgrad is the ragged-K kernel over
    M- / N-major operands; pre is the ragged-M kernel with the bias only. Each Config row's SMEM is the companion's
    (recompute's: pre in the output's dtype, at most the f32 companion check ruled)."""
    for s in CUTE_TRAINING_FORMS.values():
        ls = _load(s)
        r = resolve(ls.spec, ls.spec.targets[0])
        plan = DESIGN.plan(ls, ls.spec.targets, {str(ls.spec.targets[0]): r}).training
        companions = {c.companion: c for c in r.companions}
        assert list(plan.roles) == list(companions)
        b_k = s["b"]["major"] == "k"
        dgrad, wgrad = plan.roles["dgrad"], plan.roles["wgrad"]
        assert (dgrad.a_major, dgrad.b_major, dgrad.tail_zero, dgrad.ragged_k) == ("k", "mn" if b_k else "k", True, False)
        assert (wgrad.a_major, wgrad.b_major, wgrad.ragged_k, wgrad.k_align) == ("mn", "mn", True, 1)
        assert dgrad.epilogue == [] and wgrad.epilogue == []
        for role, q in plan.roles.items():
            c = companions[role]
            assert (q.config.tile_m, q.config.tile_n, q.config.tile_k, q.config.ab_stages) == (
                c.spec.tile.m, c.spec.tile.n, c.spec.tile.k, c.ab_stages)
            assert q.config.smem_bytes == c.budget.total if role != "recompute" else q.config.smem_bytes <= c.budget.total
            assert q.out.cutlass_dtype == {"bf16": "BFloat16", "f16": "Float16"}[s["out"]["dtype"]]
        pre = plan.roles.get("forward_pre") or plan.roles.get("recompute")
        gated = s["epilogue"][0]["op"] == "gated"
        assert plan.gated == (s["epilogue"][0]["layout"] if gated else "")
        if pre is not None:  # a gated op's pre: the plain GEMM over B's 2N columns (the bias, after the gate, is act_rows')
            assert [op["op"] for op in pre.epilogue] == [op["op"] for op in s["epilogue"] if op["op"] == "bias" and not gated]
            assert not pre.tail_zero and not pre.gated and pre.b_major == "k" if gated else not pre.tail_zero


def test_the_module_reads_as_the_companions_kernels_beside_the_forward(rendered):
    module, text = rendered["cgt_preact_bias_gelu"]
    for sfx in ("", "_pre", "_dgrad", "_wgrad"):
        assert f"def grouped_host{sfx}(" in text and f"def grouped_kernel{sfx}(" in text and f"def _fake_args{sfx}(" in text
    assert list(module.TRAIN_CONFIGS) == ["forward_pre", "dgrad", "wgrad"]
    assert module.TRAIN_CONFIGS["dgrad"].b_k is False and module.TRAIN_CONFIGS["forward_pre"].b_k is True
    assert module.config("wgrad") is module.TRAIN_CONFIGS["wgrad"] and module.config(None) is module.CONFIG
    assert module._train_launcher.configs == ("forward_pre", "dgrad", "wgrad")
    assert module._cols_launcher.configs == ("act_rows", "act_rows_v", "grad_cols", "grad_cols_v")
    assert "register_autograd" not in text and 'register_backward("cgt_preact_bias_gelu_train"' in text
    assert "ctx.save_for_backward(*inputs, output[1])" in text  # save = "preact": pre saved
    _, rec = rendered["cgt_recompute_relu"]
    assert "ctx.save_for_backward(*inputs, None)" in rec and "pre = _pre(a, b, group_sizes, M, N, K, G)" in rec
    assert "for i in range(g):  # the groups before g: sizes, not ends" in rec
    gated, text = rendered["cgt_swiglu_halves_bias"]
    assert gated.METADATA["plan"][90]["training"]["gated"] == "halves"
    assert "def train_host(a: cute.Tensor, b: cute.Tensor, offs: cute.Tensor, out: cute.Tensor" in text  # no GEMM reads the bias
    assert "pre = _pre(a, b, offs, M, 2 * N, K, G)  # gate and up" in text and "N = _g.halved(kernel" in text
    assert "half = N // vec" in text and "acc = acc + bias_frag.load()" in text
    _, il = rendered["cgt_geglu_il_recompute"]
    assert "every_other = cute.make_layout((1, vec), stride=(0, 2))" in il and "half = N // vec" not in il


@pytest.mark.parametrize(("change", "says"), [
    ({"out": {"dtype": "f32"}, "epilogue": [{"op": "gated", "fn": "silu", "layout": "halves"}], "cute": {"mma_warpgroups": 2}},
     "a.dtype = bf16, b.dtype = bf16, out.dtype = f32"),
    ({"a": {"dtype": "f16", "major": "k"}, "b": {"dtype": "f16", "major": "k"}},
     "a.dtype = f16, b.dtype = f16, out.dtype = bf16"),
    ({"out": {"dtype": "f32"}}, "a.dtype = bf16, b.dtype = bf16, out.dtype = f32"),
])
def test_trn001_refuses_what_the_cute_backward_does_not_render(change, says):
    s = {**CUTE_TRAINING_FORMS["cgt_preact_bias_gelu"], **change}
    errors = [d for d in _errors(s) if d.rule == "TRN001"]
    assert errors and says in errors[0].message and "cute:sm90" in errors[0].message, errors


def test_trn001_passes_the_gated_backward_on_sm90_and_refuses_it_on_sm100():
    """Both sides of the rule for a gated op: cute:sm90 renders its backward (both layouts, check clean: the forms
    above), cute:sm100 renders no backward at all, naming the designs that do (CuTe sm90 among them)."""
    s = CUTE_TRAINING_FORMS["cgt_swiglu_halves_bias"]
    assert not [d for d in _errors(s) if d.rule == "TRN001"]
    errors = [d for d in _errors({**s, "targets": ["cute:sm100"], "cute": {}}) if d.rule == "TRN001"]
    assert errors and "cute:sm100" in errors[0].message and "CuTe sm90" in errors[0].message, errors


# --- the host side on the CPU: each compiled function replaced by a torch stand-in of what its kernel computes,
# reading its operands only in the layouts its fake arguments declare (so a wrong transpose, major or pitch fails)
def _bounds(spec: dict, index, rows: int) -> list[tuple[int, int]]:
    from specgen.kinds.grouped.testing.reference import group_bounds

    return group_bounds(spec, index, rows)


def _act(spec: dict, x):
    import torch.nn.functional as F

    fn = next(op["fn"] for op in spec["epilogue"] if op["op"] in ("activation", "gated"))
    return {"gelu_tanh": lambda v: F.gelu(v, approximate="tanh"), "relu": F.relu, "silu": F.silu}[fn](x)


def _gate_up(spec: dict, n: int):
    """The gate's and up's columns of a gated pre or G (2N columns) in the forward's layout (None without a gated op)."""
    op = spec["epilogue"][0]
    if op["op"] != "gated":
        return None
    return (slice(0, n), slice(n, 2 * n)) if op["layout"] == "halves" else (slice(0, 2 * n, 2), slice(1, 2 * n, 2))


def _stand_ins(module, spec: dict):
    """(train entry, cols entry): CuteLauncher.entry replacements whose functions compute each role in f32."""
    import torch

    def pitch_ok(t, dim):  # a TMA operand: unit stride along `dim`, 16-byte strides elsewhere
        return t.stride(dim) == 1 and all(s * t.element_size() % 16 == 0 for i, s in enumerate(t.stride()) if i != dim)

    def train(device, role, cfg):
        assert cfg is module.TRAIN_CONFIGS[role]

        def run(a, b, index, *rest):
            out = rest[-2]
            bias = rest[0] if len(rest) == 3 else None
            if role == "wgrad":  # a (M', rows) M'-major, b (rows, N') N'-major, out (G, M', N')
                assert pitch_ok(a, 0) and pitch_ok(b, 1) and pitch_ok(out, 2)
                for g, (s, e) in enumerate(_bounds(spec, index, a.shape[1])):
                    out[g] = (a[:, s:e].float() @ b[s:e].float()).to(out.dtype)
                return
            assert pitch_ok(a, 1) and pitch_ok(b, 1 if cfg.b_k else 2) and pitch_ok(out, 1)
            bounds = _bounds(spec, index, a.shape[0])
            for g, (s, e) in enumerate(bounds):
                acc = a[s:e].float() @ b[g].float()
                out[s:e] = (acc + bias[g].float() if role != "dgrad" and bias is not None else acc).to(out.dtype)
            if role == "dgrad":
                out[bounds[-1][1]:] = 0  # rows past the last group
        return run, 1

    from specgen.runtime.torch.training import vectors_in_place

    def cols(device, variant, cfg):
        mode = variant.removesuffix("_v")

        def run(src, pre, dst, sums, index, bias):
            m, n = src.shape  # src (M, N) fixes N; a gated op's pre (and G in grad_cols) hold 2N columns
            matrices = (src, pre, dst, sums, bias)
            if variant.endswith("_v"):  # the variant's fake arguments: 16-byte pitches and bases, N whole vectors
                assert n % module.COLS_VEC == 0 and all(vectors_in_place(t, module.COLS_VEC) for t in matrices), variant
            assert all(t.stride(-1) == 1 for t in matrices)
            variants.append(variant)
            split = _gate_up(spec, n)
            bounds = _bounds(spec, index, m)
            for g, (s, e) in enumerate(bounds):
                if mode == "act_rows":
                    if split:
                        y = _act(spec, pre[s:e, split[0]].float()) * pre[s:e, split[1]].float()
                        dst[s:e] = (y + bias[g].float() if bias is not dst else y).to(dst.dtype)
                    else:
                        dst[s:e] = _act(spec, pre[s:e].float()).to(dst.dtype)
                    continue
                if mode == "grad_cols" and split:
                    with torch.enable_grad():  # (the backward op runs without grad mode)
                        gate, up = (pre[s:e, c].float().requires_grad_() for c in split)
                        dgate, dup = torch.autograd.grad(_act(spec, gate) * up, (gate, up), src[s:e].float())
                    dst[s:e, split[0]], dst[s:e, split[1]] = dgate.to(dst.dtype), dup.to(dst.dtype)
                    grad = src[s:e].float()  # the bias (after the gate) sums dOut
                elif mode == "grad_cols":
                    with torch.enable_grad():
                        x = pre[s:e].float().requires_grad_()
                        (grad,) = torch.autograd.grad(_act(spec, x), x, src[s:e].float())
                    dst[s:e] = grad.to(dst.dtype)
                else:
                    grad = src[s:e].float()
                if any(op["op"] == "bias" for op in spec["epilogue"]):
                    sums[g] = grad.sum(0).to(sums.dtype)
            if mode == "act_rows" and spec["groups"]["tail"] == "zero":
                dst[bounds[-1][1]:] = 0
        return run, 1

    variants: list[str] = []
    return train, cols, variants


CASES = {"first_middle_last_empty": [0, 37, 0, 0, 70, 1, 0], "one_holds_all": [0, 0, 101, 0], "m1": [0, 1]}


@pytest.mark.parametrize("nk", [(40, 24), (21, 13)])  # N and K on and off 16 bytes (the padded-buffer paths)
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("name", sorted(CUTE_TRAINING_FORMS))
def test_the_host_side_gives_float64_gradients_through_autograd(name, case, nk, rendered, monkeypatch):
    """Autograd through the op (the host code that lays out G, dgrad's B^T, wgrad's A^T / G^T and dB's layout, the
    padded buffers, rows past the groups, empty groups), the kernels stood in for: float64 of the per-group loop."""
    import torch

    from specgen.kinds.grouped.testing.training import close, reference_grads, train_inputs
    from specgen.runtime import guards

    module, _ = rendered[name]
    spec = CUTE_TRAINING_FORMS[name]
    monkeypatch.setattr(guards, "INTERPRET", True)  # CPU tensors: device -1
    train, cols, variants = _stand_ins(module, spec)
    monkeypatch.setattr(module._train_launcher, "entry", train)
    monkeypatch.setattr(module._train_launcher, "ready", {})
    monkeypatch.setattr(module._cols_launcher, "entry", cols)
    monkeypatch.setattr(module._cols_launcher, "ready", {})
    monkeypatch.setattr(module._launcher, "entry", lambda *_: (_ for _ in ()).throw(AssertionError("the forward's kernel")))
    n, k = nk
    if spec["epilogue"][0]["op"] == "gated" and n % 2:
        n += 1  # (the gated forms: N = 40 and 22, 2N columns on and off 16 bytes)
    args = train_inputs(spec, CASES[case], 5, n, k, seed=3)
    grad = torch.randn(args["a"].shape[0], n, generator=torch.Generator().manual_seed(4)).to(args["a"].dtype)
    leaves = {m: (t.clone().requires_grad_() if m != "index" else t) for m, t in args.items()}
    acts = any(op["op"] in ("activation", "gated") for op in spec["epilogue"])
    if acts and spec["training"]["save"] == "preact":
        out = getattr(module, name)(*leaves.values())
    else:  # the forward's own kernel (recompute, no activation): stood in by the reference
        monkeypatch.setattr(module, "_run", lambda *xs: reference_grads(spec, args, grad)[0].to(args["a"].dtype))
        out = getattr(module, name)(*leaves.values())
    out.backward(grad)
    want_out, written, want = reference_grads(spec, args, grad)
    close(out.float()[written], want_out[written], 2e-2, "out")
    end = sum(CASES[case])
    assert not leaves["a"].grad[end:].any()
    for m in want:
        got = leaves[m].grad
        assert got.stride() == leaves[m].stride(), f"d{m}: the argument's layout"
        close(got, want[m], 2e-2, f"d{m}")
    for g in (g for g, s in enumerate(CASES[case]) if s == 0):
        assert not leaves["b"].grad[g].any() and ("bias" not in leaves or not leaves["bias"].grad[g].any())
    # the columns pass in 16-byte vectors where N is whole vectors (every buffer the backward makes is 16-byte aligned)
    assert variants and all(v.endswith("_v") == (n % module.COLS_VEC == 0) for v in variants), variants
    # NaN-poisoned buffers are written everywhere
    pre = module._forward_train(*args.values())[1] if acts and spec["training"]["save"] == "preact" else None
    bufs = {f"d{m}": torch.full_like(args[m], float("nan")) for m in args if m != "index"}
    got = module._backward(grad, *args.values(), pre, **bufs)
    for t, m in zip(got, [m for m in args if m != "index"], strict=True):
        assert t is bufs[f"d{m}"] and not t.isnan().any(), f"d{m}"
        close(t, want[m], 2e-2, f"poisoned d{m}")
    if acts and n % module.COLS_VEC == 0:  # dOut at an odd row pitch, read in place: the element variant, same gradients
        variants.clear()
        odd = torch.empty(grad.shape[0], n + 1, dtype=grad.dtype)[:, :n].copy_(grad)
        for t, m in zip(module._backward(odd, *args.values(), pre), [m for m in args if m != "index"], strict=True):
            close(t, want[m], 2e-2, f"odd-pitch d{m}")
        assert variants and not any(v.endswith("_v") for v in variants), variants
