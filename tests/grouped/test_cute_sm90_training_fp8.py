"""The grouped CuTe sm90 design's backward of an fp8 forward (issue 38's "fp8 forward with a bf16 backward", session 32;
specgen/kinds/grouped/designs/cute_sm90/training.py) on the CPU: CUTE_FP8_TRAINING_FORMS (e4m3 with the rowwise scales,
a per-group bias and GELU-tanh, preact and recompute; e5m2 with SiLU into f16; e4m3 x e5m2 with an f32 bias alone) check
clean (TRN001 lifted on cute:sm90; still refusing other dtypes, naming them); pre is the fp8 ragged-M companion with the
scales and the bias, dgrad and wgrad the 16-bit companions whose Config rows read OUT_DTYPE operands; every kernel of
the preact GELU module (pre's QGMMA, dgrad's and wgrad's HGMMA, the columns pass's act_rows and its fp8 grad_cols in
16-byte vectors and an element at a time), the recompute and e5m2 forms' pre GEMMs and the bias-only grad_cols compile
for sm_90a with the plan's SMEM and no spills (one test, one compile a kernel); and the host side (every compiled function stood in for by
torch code of what its kernel computes, reading its operands in the layouts its fake arguments declare) gives the
float64 gradients of the dequantized operands A scale_a and B[g] scale_b[g] and of the bias, into NaN-poisoned
buffers, refusing an fp8 operand or a scale that requires grad as the grouped Triton module does. The numerics run on
the GPU: tests/gpu/test_grouped_training_cute_fp8_gpu.py."""

from __future__ import annotations

import json
import os

import pytest
import torch

from grouped.test_cute_sm90_training import _wide_accesses
from specgen.check import check_all
from specgen.kinds.grouped.designs.cute_sm90.design import DESIGN
from specgen.kinds.grouped.testing.reference import group_bounds
from specgen.kinds.grouped.testing.specs import CUTE_FP8_TRAINING_FORMS
from specgen.kinds.grouped.testing.training import close, fp8_reference, fp8_train_inputs
from specgen.render.catalogue import render_modules
from specgen.resolve import resolve
from specgen.spec.load import load_text
from specgen.targets import target_info

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
FORMS = CUTE_FP8_TRAINING_FORMS
FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def _load(s: dict):
    (ls,) = load_text(json.dumps({"kernels": [s]}), f"<test:{s['name']}>", ".json")
    return ls


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, tuple[object, str]]:
    """Each form's module, rendered and imported once: name -> (module, text)."""
    from specgen.compile import load_rendered

    out = {}
    root = tmp_path_factory.mktemp("cute_grouped_fp8_train")
    for name, s in FORMS.items():
        ((rel, text),) = render_modules(_load(s), _load(s).spec.targets).items()
        path = root / f"{name}.py"
        path.write_text(text)
        out[name] = (load_rendered(path, f"_specgen_test_cute_fp8_train_{name}"), text)
    return out


def test_each_form_checks_clean_and_trn001_refuses_the_other_dtypes() -> None:
    """TRN001 lifted for an fp8 forward on cute:sm90 (it refused it before session 32); a 16-bit forward whose output
    is of another dtype is still refused, naming the dtypes and the fp8 form it takes; the companions' own rules."""
    for s in FORMS.values():
        assert [d for d in check_all([_load(s)]) if d.severity == "error"] == [], s["name"]
    s = {**FORMS["cgt_fp8_e4m3_gelu_preact"], "a": {"dtype": "f16", "major": "k"}, "b": {"dtype": "f16", "major": "k"},
         "epilogue": [{"op": "bias", "dtype": "bf16"}, {"op": "activation", "fn": "gelu_tanh"}]}
    (trn,) = [d for d in check_all([_load(s)]) if d.rule == "TRN001"]
    assert all(w in trn.message for w in ("a.dtype = f16, b.dtype = f16, out.dtype = bf16", "or fp8 A and B with an f16 "
                                          "or bf16 output", "cute:sm90")), trn.message
    # the companions are checked as the GEMMs they are: dgrad at 256x256x128 in 16 bits (2 x 131072 B of stages) is
    # SMEM001 at training.dgrad, pre at the same tile in fp8 (65536 B a stage) is not
    base = FORMS["cgt_fp8_e4m3_gelu_preact"]
    for role, smem in (("dgrad", True), ("pre", False)):
        s = {**base, "training": {"save": "preact", role: {"tile": {"m": 256, "n": 256, "k": 128}}}}
        found = [d for d in check_all([_load(s)]) if d.rule == "SMEM001"]
        assert bool(found) == smem and all(d.variant == "backward dgrad" and "2 x 131072" in d.message for d in found), found


def test_each_role_is_its_companions_plan(rendered) -> None:
    """pre: the fp8 ragged-M companion with the scales and the bias (the forward's operand types); dgrad (B^T read
    MN-major) and wgrad (ragged K over M- / N-major operands): the 16-bit companions, OUT_DTYPE operands in their
    Config rows; the module's autograd layer refuses grads of the scales and the fp8 operands."""
    for name, s in FORMS.items():
        ls = _load(s)
        r = resolve(ls.spec, ls.spec.targets[0])
        t = DESIGN.plan(ls, ls.spec.targets, {str(ls.spec.targets[0]): r}).training
        acts = len(s["epilogue"]) > 1 and s["epilogue"][-1]["op"] == "activation"
        assert t.fp8 and list(t.roles) == ((["forward_pre"] if s["training"]["save"] == "preact" else ["recompute"])
                                           if acts else []) + ["dgrad", "wgrad"]
        bias = ["bias"] if any(op["op"] == "bias" for op in s["epilogue"]) else []
        assert t.chain_args == ("scale_a", "scale_b", *bias) and t.gemm_args == t.chain_args
        out = {"bf16": "BFloat16", "f16": "Float16"}[s["out"]["dtype"]]
        for role, q in t.roles.items():
            wide = role in ("dgrad", "wgrad")
            assert t.operand_dtype(role) == ("OUT_DTYPE" if wide else "")
            assert (q.a.cutlass_dtype, q.b.cutlass_dtype) == ((out, out) if wide else (
                {"fp8_e4m3": "Float8E4M3FN", "fp8_e5m2": "Float8E5M2"}[s["a"]["dtype"]],
                {"fp8_e4m3": "Float8E4M3FN", "fp8_e5m2": "Float8E5M2"}[s["b"]["dtype"]])), (name, role)
            assert [a.name for a in q.args] == ([] if wide else ["scale_a", "scale_b", *bias])
        module, text = rendered[name]
        assert module.METADATA["plan"][90]["training"]["fp8_backward_dtype"] == {"BFloat16": "bfloat16", "Float16": "float16"}[out]
        for role, cfg in module.TRAIN_CONFIGS.items():
            wide = role in ("dgrad", "wgrad")
            assert (cfg.a_dtype, cfg.b_dtype) == ((module.OUT_DTYPE,) * 2 if wide else (module.A_DTYPE, module.B_DTYPE))
            assert cfg.operands[1] is cfg.a_dtype and cfg.operands[3] is cfg.b_dtype
        assert module._cols_launcher.configs[-2:] == ("grad_cols", "grad_cols_v")  # both G, even without an activation
        assert '_tr.refuse_fp8_grad("' + name + '", (inputs[0], inputs[1], inputs[3], inputs[4]))' in text
        assert "b16 = _tr.tma_ready(b.to(torch." in text and "a16 = _tr.tma_ready(a.to(torch." in text


def test_every_kernel_compiles_with_the_plans_smem_and_no_spills(rendered, monkeypatch, tmp_path) -> None:
    """One test (one xdist worker compiles): the preact GELU module's three GEMMs (pre on the fp8 QGMMA path; dgrad
    and wgrad on the 16-bit HGMMA path: their 16-bit SMEM stages are what the plan counts) and its columns pass
    (act_rows in vectors; grad_cols forming both G in vectors and an element at a time), the recompute form's pre GEMM
    (64-row tile), the e5m2 form's pre GEMM and the bias-only form's grad_cols (U = dOut, no pre read)."""
    from specgen.kinds.gemm.designs.cute_sm90.compile import compile_config

    monkeypatch.setenv("SPECGEN_CUTE_CACHE", str(tmp_path / "cache"))
    target = target_info("cute:sm90")
    compiled = (("cgt_fp8_e4m3_gelu_preact", ("forward_pre", "dgrad", "wgrad"), ("act_rows_v", "grad_cols_v", "grad_cols")),
                ("cgt_fp8_e4m3_gelu_recompute", ("recompute",), ()),  # pre in the output's dtype, a 64-row tile
                ("cgt_fp8_e5m2_silu_f16", ("forward_pre",), ()),
                ("cgt_fp8_mixed_bias_only", (), ("grad_cols_v",)))
    for name, roles, cols in compiled:
        module = rendered[name][0]
        t = module.METADATA["plan"][90]["training"]
        for role in roles:
            r = compile_config(module._train_launcher, name, role, target, t["kernels"][role]["smem_bytes"], True, False)
            assert not r.error, r
            assert r.compiler_smem == r.plan_smem <= 232448, r
            mma = "HGMMA" if role in ("dgrad", "wgrad") else "QGMMA"  # fp8 wgmma for pre, 16-bit for dgrad and wgrad
            assert r.sass["UTMALDG"] > 0 and r.sass[mma] > 0 and r.sass["UTMASTG"] > 0, (role, r.sass)
            assert r.spills.stores == 0 and r.sass["LDL"] == 0 and r.sass["STL"] == 0, r
        for c in cols:  # SIMT, no SMEM; the "_v" variants load and store 16 bytes a thread and row (scale_b's too)
            r = compile_config(module._cols_launcher, name, c, target, 0, True, False, more=_wide_accesses)
            assert not r.error and r.compiler_smem == 0 and r.sass["HGMMA"] == 0 and r.sass["STL"] == 0, r
            assert (r.resources["ldg128"] > 0 and r.resources["stg128"] > 0) == c.endswith("_v"), (c, r.resources)


# --- the host side on the CPU: each compiled function replaced by a torch stand-in of what its kernel computes
def _stand_ins(module, spec: dict):
    """(train entry, cols entry, the columns variants run): CuteLauncher.entry replacements computing each role in f32."""
    act = next((op["fn"] for op in spec["epilogue"] if op["op"] == "activation"), "")
    fn = {"gelu_tanh": lambda v: torch.nn.functional.gelu(v, approximate="tanh"), "silu": torch.nn.functional.silu}.get(act)
    wide = {"BFloat16": torch.bfloat16, "Float16": torch.float16}[module.OUT_DTYPE.__name__]

    def pitch_ok(t, dim):  # a TMA operand: unit stride along `dim`, 16-byte strides elsewhere
        return t.stride(dim) == 1 and all(s * t.element_size() % 16 == 0 for i, s in enumerate(t.stride()) if i != dim)

    def train(device, role, cfg):
        assert cfg is module.TRAIN_CONFIGS[role]

        def run(a, b, index, sa, sb, *rest):
            out, bias = rest[-2], (rest[0] if len(rest) == 3 else None)
            if role in ("dgrad", "wgrad"):  # 16-bit copies of the fp8 operands, and G in the output's dtype
                assert a.dtype == b.dtype == wide, (role, a.dtype, b.dtype)
            if role == "wgrad":  # a (M', rows) M'-major, b (rows, N') N'-major, out (G, M', N')
                assert pitch_ok(a, 0) and pitch_ok(b, 1) and pitch_ok(out, 2)
                for g, (s, e) in enumerate(group_bounds(spec, index, a.shape[1])):
                    out[g] = (a[:, s:e].float() @ b[s:e].float()).to(out.dtype)
                return
            assert pitch_ok(a, 1) and pitch_ok(b, 1 if cfg.b_k else 2) and pitch_ok(out, 1)
            bounds = group_bounds(spec, index, a.shape[0])
            for g, (s, e) in enumerate(bounds):
                acc = a[s:e].float() @ b[g].float()
                if role != "dgrad":  # pre: the scales on the accumulator, then the bias
                    assert a.dtype in FP8 and b.dtype in FP8, (a.dtype, b.dtype)  # the forward's operands
                    acc = acc * sa[s:e, None] * sb[g][None, :] + (bias[g].float() if bias is not None else 0.0)
                out[s:e] = acc.to(out.dtype)
            if role == "dgrad":
                out[bounds[-1][1]:] = 0  # rows past the last group
        return run, 1

    variants: list[str] = []

    def cols(device, variant, cfg):
        mode = variant.removesuffix("_v")

        def run(src, pre, dst, sums, index, gbias, dst2, sa, sb):
            variants.append(variant)
            bounds = group_bounds(spec, index, src.shape[0])
            for g, (s, e) in enumerate(bounds):
                if mode == "act_rows":
                    dst[s:e] = fn(pre[s:e].float()).to(dst.dtype)
                    continue
                u = src[s:e].float()
                if fn is not None:
                    with torch.enable_grad():
                        x = pre[s:e].float().requires_grad_()
                        (u,) = torch.autograd.grad(fn(x), x, u)
                dst[s:e] = (u * sb[g][None, :]).to(dst.dtype)  # G_b: dgrad's
                dst2[s:e] = (u * sa[s:e, None]).to(dst2.dtype)  # G_a: wgrad's
                if any(op["op"] == "bias" for op in spec["epilogue"]):
                    sums[g] = u.sum(0).to(sums.dtype)
            if mode == "act_rows" and spec["groups"]["tail"] == "zero":
                dst[bounds[-1][1]:] = 0
        return run, 1

    return train, cols, variants


@pytest.mark.parametrize("sizes", [[0, 37, 0, 70, 1, 0], [0, 1]], ids=["empty_first_middle_last", "m1"])
@pytest.mark.parametrize("name", sorted(FORMS))
def test_the_host_side_gives_the_dequantized_operands_gradients(name, sizes, rendered, monkeypatch) -> None:
    """_backward into NaN-poisoned buffers (dA, dB in the output's dtype; the scales none) and the bias's gradient
    through autograd, the kernels stood in for, against float64 autograd of the per-group loop over the dequantized
    operands; N and K off 16 bytes (the padded-buffer paths: N = 40, K = 24 on; N = 21, K = 13 off); an fp8 operand or a
    scale that requires grad is refused, naming it."""
    from specgen.runtime import guards

    module, _ = rendered[name]
    spec = FORMS[name]
    monkeypatch.setattr(guards, "INTERPRET", True)  # CPU tensors: device -1
    train, cols, variants = _stand_ins(module, spec)
    for launcher, entry in ((module._train_launcher, train), (module._cols_launcher, cols)):
        monkeypatch.setattr(launcher, "entry", entry)
        monkeypatch.setattr(launcher, "ready", {})
    acts = spec["epilogue"][-1]["op"] == "activation"
    stores_pre = acts and spec["training"]["save"] == "preact"
    for n, k in ((40, 24), (21, 13)):
        variants.clear()
        args = fp8_train_inputs(spec, sizes, 5, n, k, seed=3)
        wide = module.TRAIN_CONFIGS["dgrad"].a_dtype
        grad = torch.randn(args["a"].shape[0], n, generator=torch.Generator().manual_seed(4)).to(
            {"BFloat16": torch.bfloat16, "Float16": torch.float16}[wide.__name__])
        want_out, want = fp8_reference(spec, args, grad)
        end = sum(sizes)
        if not stores_pre:  # the forward's own kernel (recompute, no activation): stood in by the reference
            out = torch.cat([want_out.to(grad.dtype), grad.new_zeros(5, n)])
            monkeypatch.setattr(module, "_run", lambda *xs, out=out: out.clone())
        pre = module._forward_train(*args.values())[1] if stores_pre else None
        if stores_pre:
            close(module._forward_train(*args.values())[0][:end], want_out, 2e-2, "out")
        bufs = {"da": torch.full(args["a"].shape, float("nan"), dtype=grad.dtype),
                "db": torch.full_like(args["b"], float("nan"), dtype=grad.dtype)}
        if "bias" in args:
            bufs["dbias"] = torch.full_like(args["bias"], float("nan"))
        got = module._backward(grad, *args.values(), pre, **bufs)
        assert [t is bufs.get(f"d{m}") for m, t in zip(("a", "b", "sa", "sb", "bias"), got, strict=False)] == [
            True, True, False, False, True][:len(got)]
        assert got[2].numel() == got[3].numel() == 0  # the scales: none
        for m, t in (("a", got[0]), ("b", got[1]), *((("bias", got[4]),) if "bias" in args else ())):
            assert not t.isnan().any(), f"d{m}"
            close(t, want[m], 2e-2, f"d{m} ({n}, {k})")
        assert not got[0][end:].any(), "dA past the last group"
        for g in (g for g, s in enumerate(sizes) if s == 0):
            assert not got[1][g].any() and ("bias" not in args or not got[4][g].any()), f"empty group {g}"
        assert variants and all(v.endswith("_v") == (n % module.COLS_VEC == 0) for v in variants), variants
        if "bias" in args:  # the bias's gradient through autograd (the fp8 operands and scales without grad)
            leaf = args["bias"].clone().requires_grad_()
            getattr(module, name)(*list(args.values())[:-1], leaf).backward(grad)
            close(leaf.grad, want["bias"], 2e-2, "dbias (autograd)")
    with pytest.raises(RuntimeError, match=rf"a \({spec['a']['dtype']}\) requires grad.*_backward\(grad, \.\.\.\)"):
        getattr(module, name)(args["a"].clone().requires_grad_(), *list(args.values())[1:])
    scale = args["scale_b"].clone().requires_grad_()
    with pytest.raises(RuntimeError, match="scale_b requires grad, but an fp8 forward's dequantization scales"):
        getattr(module, name)(args["a"], args["b"], args["index"], args["scale_a"], scale, *list(args.values())[5:])
