"""The dense CuTe sm90 design's gated epilogue (SwiGLU, GeGLU) on a Hopper GPU: the forms of
tests/backends/cute/gated_forms.py (the catalogue's mlp_up_swiglu_bf16 rendered for cute:sm90 with its decode
variant, an interleaved GeGLU-tanh on ping-pong warpgroups, a batched erf-GeGLU on a 2x1 cluster with a residual)

- on every shape of the shared GPU numerics (tests/gpu/test_numerics_gpu.py: NaN-poisoned outputs, tails on M, N
  and K, M = 1, padded strides) against the float64 reference, the gated op read with the wrong layout or fn failing
  the same tolerance (the shared mutants);
- the SwiGLU module at odd shapes (both its configs) against float64 and against the eager MLP over cuBLAS
  (silu(h[:, :N]) * h[:, N:]), its output NaN-poisoned first and every element written; the interleaved form against
  silu's GeGLU-tanh peer the same way;
- the launcher's guards: an odd count of B columns, or an out whose N is not half of them, raises before launch;
- the JAX entry bit for bit equal to the torch launcher on aligned and tail shapes (B's gate and up halves padded
  apart where N is no whole 16 bytes).

Marked `gpu`: CI (CPU only) deselects them. The CuTe DSL must be installed on the GPU machine.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch shares the GPU in this process

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from backends.cute.gated_forms import dense_sm90  # noqa: E402
from kernels import load_target_module  # noqa: E402

from gpu.test_numerics_gpu import GpuNumerics, gpu_modules  # noqa: E402, F401 (gpu_modules: the fixture GpuNumerics reads)
from specgen.kinds.gemm.spec import GemmSpec  # noqa: E402
from specgen.kinds.gemm.testing.reference import REFERENCES  # noqa: E402

pytestmark = pytest.mark.gpu

FORMS = dense_sm90()
# (M, N, K): M = 1 and 40 (the decode variant, M <= 64), tails on every dim (N odd: 16-byte out rows staged), a large one
SHAPES = [(1, 256, 512), (40, 136, 1040), (200, 144, 96), (517, 264, 1040), (77, 131, 200), (3000, 2048, 2064)]


class TestGatedCuteSm90Numerics(GpuNumerics):
    # the shared numerics read plain data with every default spelled out (a form built here spells out only its own)
    VARIANTS = {name: GemmSpec.model_validate({**spec, "name": f"{name}_num"}).model_dump(mode="json")
                for name, spec in FORMS.items()}


_LOADED: dict[str, object] = {}


@pytest.fixture
def loaded(tmp_path_factory):
    def get(name: str):
        if name not in _LOADED:
            _LOADED[name] = load_target_module(FORMS[name], "cute:sm90", tmp_path_factory.mktemp(name),
                                               "_specgen_gated_cute_gpu_")[0]
        return _LOADED[name]

    return get


def _peer(h: torch.Tensor, fn: str, layout: str) -> torch.Tensor:
    """The eager gated MLP over a GEMM's 2N columns (gate, up by the layout)."""
    n = h.shape[-1] // 2
    gate, up = (h[..., :n], h[..., n:]) if layout == "halves" else (h[..., 0::2], h[..., 1::2])
    act = F.silu(gate) if fn == "silu" else F.gelu(gate, approximate="tanh" if fn == "gelu_tanh" else "none")
    return act * up


@pytest.mark.parametrize("name", ["cg_mlp_up_swiglu", "cg_il_gelu_tanh_pingpong"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gated_module_matches_float64_and_the_eager_mlp(loaded, name: str, shape: tuple[int, int, int]) -> None:
    mod = loaded(name)
    spec = mod.SPEC
    fn = getattr(mod, spec["name"])
    M, N, K = shape
    gen = torch.Generator(device="cuda").manual_seed(M * 7 + N)
    x = torch.randn(M, K, generator=gen, device="cuda").to(torch.bfloat16)
    w = (torch.randn(2 * N, K, generator=gen, device="cuda") / K**0.5).to(torch.bfloat16)  # (2N, K): K-major B
    args = [x, w.t()]
    if any(op["op"] == "scale" and op["by"] == "row" for op in spec["epilogue"]):
        args.append(torch.rand(M, generator=gen, device="cuda") + 0.5)
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    got = fn(*args, out=out)
    torch.cuda.synchronize()
    assert got is out and not out.isnan().any(), "output elements never written"
    extra = {"row_scale": args[2].double()} if len(args) > 2 else {}
    ref = REFERENCES["gemm"](spec["epilogue"], x.double(), w.t().double(), extra)
    scale = ref.abs().max().item() + 1.0
    err = (out.double() - ref).abs().max().item()
    assert err <= 2e-2 * scale, f"{name} {shape}: max |err| {err:.4g}"
    op = spec["epilogue"][0]
    peer = _peer((x @ w.t()).float(), op["fn"], op["layout"])
    if len(args) > 2:
        peer = peer * args[2].float()[:, None]
    assert (out.float() - peer).abs().max().item() <= 3e-2 * scale
    want = 0 if M <= 64 and mod.VARIANT_CONFIGS else None  # the decode variant's config ran
    assert (torch.cuda.current_device(), want) in mod._launcher.ready
    assert torch.equal(fn(*args), out)  # the direct-launch path after the first call: the same bits


def test_guards_refuse_an_odd_b_width_or_an_out_of_another_n(loaded) -> None:
    mod = loaded("cg_mlp_up_swiglu")
    fn = getattr(mod, mod.SPEC["name"])
    x = torch.randn(64, 128, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(257, 128, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"b.shape\[1\] = 257 must be even"):
        fn(x, w.t())
    w = torch.randn(256, 128, device="cuda", dtype=torch.bfloat16)
    wrong = torch.empty(64, 256, device="cuda", dtype=torch.bfloat16)
    assert mod._lean(x, w.t(), wrong) is None  # the TVM-FFI path's guard hands it to the full check
    assert mod._lean(x, w.t(), None) is not None  # ... and takes a good call itself
    with pytest.raises(ValueError, match="out"):
        fn(x, w.t(), out=torch.empty(64, 256, device="cuda", dtype=torch.bfloat16))  # N is 128, not 256
    assert fn(x, w.t()).shape == (64, 128)


@pytest.mark.parametrize(("M", "N", "K"), [(256, 512, 256), (1, 24, 40), (200, 100, 96), (64, 64, 0)])
def test_jax_entry_equals_the_torch_launcher_bit_for_bit(loaded, M: int, N: int, K: int) -> None:
    import jax

    for name in ("cg_mlp_up_swiglu", "cg_il_gelu_tanh_pingpong"):
        mod = loaded(name)
        kernel = mod.SPEC["name"]
        gen = torch.Generator(device="cuda").manual_seed(M * 7 + N * 3 + K)
        x = torch.randn(M, K, generator=gen, device="cuda").to(torch.bfloat16)
        w = (torch.randn(2 * N, K, generator=gen, device="cuda") / max(K, 1) ** 0.5).to(torch.bfloat16)
        args = [x, w.t()] + ([torch.rand(M, generator=gen, device="cuda") + 0.5] if "pingpong" in name else [])
        want = getattr(mod, kernel)(*args)
        got = getattr(mod, f"{kernel}_jax_torch")(*args)
        torch.cuda.synchronize()
        assert got.shape == want.shape == (M, N) and got.dtype == want.dtype
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)), \
            f"{name} {M}x{N}x{K}: max |diff| {(got.float() - want.float()).abs().max().item()}"
    assert jax.default_backend() == "gpu"
