"""Compiling a dense CuTe sm90 training module's kernels for sm_90a, shared by its training tests (plain, gated, fp8,
chains): each backward role's GEMM beside its plan SMEM, and each named pass (columns, chain) beside none."""

from __future__ import annotations

from specgen.targets import target_info

INFO = target_info("cute:sm90")


def compile_training(module, name: str, roles, passes: dict, ops: tuple[str, ...]) -> dict:
    """{role or pass: CompileResult}: `roles` through the module's training launcher, `passes` ({variant: launcher})
    through theirs, each with its SASS counts of `ops`; the disk cache is not filled (the caller's env picks it)."""
    from specgen.kinds.gemm.designs.cute_sm90.compile import compile_config

    kernels = module.METADATA["plan"][INFO.compute_capability]["training"]["kernels"]
    results = {role: compile_config(module._train_launcher, name, role, INFO, kernels[role]["smem_bytes"], True, False,
                                    ops=ops) for role in roles}
    return results | {v: compile_config(launcher, name, v, INFO, 0, True, False, ops=ops) for v, launcher in passes.items()}
