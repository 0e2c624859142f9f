"""Context for templates/triton/gemm.py.jinja: the plan plus the argument bookkeeping the launcher
needs (which integers Triton specializes, which strides the kernel takes), as names and numbers."""

from __future__ import annotations

from dataclasses import asdict

from specgen.plan.triton import TritonPlan


def _stride(param: str, var: str, dim: int, batch: bool = False) -> dict[str, object]:
    """A stride parameter: the kernel's name for it, and which dim of which tensor's stride() it is."""
    return {"param": param, "var": var, "dim": dim, "batch": batch}


def triton_context(p: TritonPlan) -> dict[str, object]:
    lead_a = -2 if p.a_major == "k" else -1
    lead_b = -1 if p.b_major == "k" else -2
    strides: list[dict[str, object]] = []
    if not p.tma:
        if p.batch:
            strides.append(_stride("stride_ab", "sa", 0, batch=True))
        strides.append(_stride("stride_a", "sa", lead_a))
        if p.batch:
            strides.append(_stride("stride_bb", "sb", 0, batch=True))
        strides.append(_stride("stride_b", "sb", lead_b))
        if p.batch:
            strides.append(_stride("stride_ob", "so", 0, batch=True))
        strides.append(_stride("stride_om", "so", -2))
    for arg in p.args:
        if arg.role == "matrix":
            if p.batch:
                strides.append(_stride(f"stride_{arg.name}b", f"s_{arg.name}", 0, batch=True))
            strides.append(_stride(f"stride_{arg.name}m", f"s_{arg.name}", -2))
    # Batch strides (and the batch count) may pass 2**31: never specialized, only their width is keyed.
    no_specialize = [s["param"] for s in strides if s["batch"]] + (["BATCH"] if p.batch and p.persistent else [])
    if p.persistent:
        no_specialize.append("NUM_SMS")  # a device fact, not a problem size: one compile serves every GPU
    signature = _signature(p, strides)
    schema = [[a.name, "float" if a.role == "scalar" else "Tensor"] for a in (p.a, p.b, *p.args)]
    return {
        "p": p,
        "plan": asdict(p),
        "strides": strides,
        "no_specialize": no_specialize,
        "op_schema": schema,
        "signature": signature,
        "uses_tanh": any(op["op"] == "activation" and op["fn"] in ("gelu_tanh", "silu", "sigmoid") for op in p.epilogue),
    }


def _desc(dtype_sig: str, block: list[str]) -> str:
    return f"tensordesc<{dtype_sig}[{', '.join(block)}]>"


def _signature(p: TritonPlan, strides: list[dict[str, object]]) -> dict[str, str]:
    """Parameter name -> Triton type string, in declaration order (constexprs as "constexpr")."""
    sig: dict[str, str] = {}
    bm, bn, bk = str(p.block_m), str(p.block_n), str(p.block_k)
    lead = ["1"] if p.batch else []
    if p.tma:
        sig["a_desc"] = _desc(p.a.dtype.info.triton_sig, [*lead, bm, bk] if p.a_major == "k" else [*lead, bk, bm])
        sig["b_desc"] = _desc(p.b.dtype.info.triton_sig, [*lead, bn, bk] if p.b_major == "k" else [*lead, bk, bn])
        out_n = str(p.block_n // 2) if p.epilogue_subtile else bn
        sig["out_desc"] = _desc(p.out.dtype.info.triton_sig, [*lead, bm, out_n])
    else:
        for side in (p.a, p.b, p.out):
            sig[f"{side.name}_ptr"] = "*" + side.dtype.info.triton_sig
    for arg in p.args:
        sig[arg.name if arg.role == "scalar" else f"{arg.name}_ptr"] = (
            "fp32" if arg.role == "scalar" else "*" + arg.dtype.info.triton_sig
        )
    sig.update(M="i32", N="i32", K="i32")
    if p.batch and p.persistent:
        sig["BATCH"] = "i32"
    for s in strides:
        sig[str(s["param"])] = "i32"
    if p.persistent:
        sig["NUM_SMS"] = "i32"
    sig.update(BLOCK_M="constexpr", BLOCK_N="constexpr", BLOCK_K="constexpr", GROUP_M="constexpr", FAST_MATH="constexpr")
    return sig
