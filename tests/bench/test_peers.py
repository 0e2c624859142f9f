"""The peers `specgen bench` times against compute what the spec means: the eager torch program and the
XLA one, on CPU tensors, against the float64 reference (specgen/kinds/gemm/testing/reference.py), for
every bf16/f16 kernel of the catalogue (fp8's `torch._scaled_mm` needs a GPU)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from specgen.kinds.gemm.peers import _eager_chain, _to_jax, _xla_chain
from specgen.kinds.gemm.testing.reference import gemm
from specgen.spec.load import load_paths

ROOT = Path(__file__).resolve().parents[2]
SPECS = [ls for ls in load_paths([ROOT / "specs"])
         if ls.spec.kind == "gemm" and ls.spec.a.dtype.bytes == 2 and not ls.spec.batch]


def _args(spec, m: int = 48, n: int = 40, k: int = 32) -> tuple:
    g = torch.Generator().manual_seed(0)
    dt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
    a = torch.randn(m, k, generator=g).to(dt[spec.a.dtype.value])
    b = torch.randn(k, n, generator=g).to(dt[spec.b.dtype.value])
    rest = []
    for arg in spec.runtime_args():
        if arg.shape == "scalar":
            rest.append(0.5)
        elif arg.shape == "matrix":
            rest.append(torch.randn(m, n, generator=g).to(dt[arg.dtype.value]))
        else:
            rest.append(torch.randn(m if arg.shape == "vec_m" else n, generator=g).to(dt[arg.dtype.value]))
    return a, b, *rest


@pytest.mark.parametrize("ls", SPECS, ids=[ls.name for ls in SPECS])
def test_eager_and_xla_peers_match_the_reference(ls) -> None:
    spec = ls.spec
    args = _args(spec)
    names = [arg.name for arg in spec.runtime_args()]
    ref = gemm([op.model_dump() for op in spec.epilogue], args[0], args[1], dict(zip(names, args[2:], strict=True)))
    scale = ref.abs().max().item()
    eager = _eager_chain(spec)(*args)
    assert eager.dtype == {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[spec.out.dtype.value]
    assert (eager.double() - ref).abs().max().item() <= 2e-2 * scale
    import jax.numpy as jnp

    jargs = [_to_jax(x) for x in args]  # what the bench hands XLA: tensors by DLPack, scalars as they are
    xla = np.asarray(_xla_chain(spec)(*jargs).astype(jnp.float32))
    assert np.abs(xla - ref.numpy()).max() <= 2e-2 * scale


def test_build_module_writes_what_render_writes(tmp_path: Path) -> None:
    """A Pallas target renders a package (its `__init__.py` beside the module): the bench and the tuner's
    compile jobs write both and import the module (the H100 tune of 2026-11-25 failed every Mosaic GPU
    candidate on the first of them)."""
    from specgen.bench.workloads import build_module
    from specgen.spec.models import parse_target

    (ls,) = [s for s in load_paths([ROOT / "specs" / "gemm_bf16.toml"]) if s.name == "gemm_bf16"]
    module = build_module(ls, parse_target("pallas:gpu_sm90"), tmp_path, "_test_build_module_pallas")
    assert (tmp_path / "pallas" / "gpu_sm90" / "__init__.py").is_file()
    assert module.METADATA["kernel"] == "gemm_bf16" and callable(module.gemm_bf16)


def test_xla_peer_takes_transposed_operands_as_stored() -> None:
    """A K-major B (a weight stored (N, K), passed as w.t()) and an MN-major A reach XLA as their storage,
    no copy, transposed back inside the jitted program; the result is the reference's."""
    import jax.numpy as jnp

    from specgen.kinds.gemm.peers import _xla_operands

    (ls,) = [s for s in SPECS if s.name == "gemm_bf16"]
    g = torch.Generator().manual_seed(1)
    x = torch.randn(32, 48, generator=g).to(torch.bfloat16)  # A = x.t(): (48, 32), MN-major
    w = torch.randn(40, 32, generator=g).to(torch.bfloat16)  # B = w.t(): (32, 40), K-major
    stored, flags = _xla_operands((x.t(), w.t()))
    assert flags == (True, True)
    assert stored[0].data_ptr() == x.data_ptr() and stored[1].data_ptr() == w.data_ptr()
    assert stored[0].is_contiguous() and stored[1].is_contiguous()
    got = np.asarray(_xla_chain(ls.spec, flags)(*(_to_jax(t) for t in stored)).astype(jnp.float32))
    ref = x.t().double() @ w.t().double()
    assert np.abs(got - ref.numpy()).max() <= 2e-2 * ref.abs().max().item()
    assert _xla_operands((x.t().contiguous(), w))[1] == (False, False)  # row-major operands go as they are


def test_catalogue_kernel_finds_one_kernel_by_name(tmp_path: Path) -> None:
    """The gpu/ scripts' lookup: the shipped kernel by name; a name that is absent, or in two files, says so."""
    from specgen.bench.workloads import catalogue_kernel

    root = Path(__file__).resolve().parents[2]
    assert catalogue_kernel("gemm_bias_gelu_bf16", root / "specs").spec.epilogue
    with pytest.raises(ValueError, match="no_such_kernel: 0 kernels of that name"):
        catalogue_kernel("no_such_kernel", root / "specs")
    text = (root / "specs" / "gemm_bf16.toml").read_text()
    (tmp_path / "a.toml").write_text(text)
    (tmp_path / "b.toml").write_text(text)
    with pytest.raises(ValueError, match="gemm_bf16: 2 kernels of that name"):
        catalogue_kernel("gemm_bf16", tmp_path)
