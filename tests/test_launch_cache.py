"""The TMA launchers' cached launches (specgen/runtime/triton/launch.py: Expander, launch_cached): on the
CPU, with a recording fake in place of Triton's C `launch` and a fake encoder in place of
cuTensorMapEncodeTiled.

- The launch built once and the launch repeated from the cache both pass the C launch, argument for
  argument, what Triton's own launcher would (its CudaLauncher.__call__ and tensordesc wrapper, run
  for real: Triton 3.9's installed one, a minimal 3.6-shaped one, and Triton 3.6's own source where
  SPECGEN_TRITON36_DRIVER names its triton/backends/nvidia/driver.py), tensors given as the addresses
  the C launch would read from them.
- The generated launchers' args key changes with every input the launch's arguments depend on (equal
  keys always mean equal arguments), and not otherwise; a stale entry is never launched.
- Pointer kernels (whose launch is the C function itself) get the same cached launch.
- The cache is bounded, per stream, and bypassed under launch hooks or on another device; a replaced
  split-K workspace drops every cached launch.
"""

from __future__ import annotations

import ast
import os
import types
from pathlib import Path

import pytest
import torch

from specgen.runtime.triton import launch as L
from specgen.runtime.triton.descriptors import descriptor

META = [{"swizzle": 128, "elem_size": 2, "elem_type": 6, "block_size": [16, 32], "fp4_padded": False},
        {"swizzle": 64, "elem_size": 2, "elem_type": 6, "block_size": [32, 32], "fp4_padded": False}]
SIGNATURE = {0: "tensordesc<fp16[16, 32]>", 1: "tensordesc<fp16[32, 32]>", 2: "*fp32", 3: "i32", 4: "fp32",
             5: "constexpr"}
FUNCTION, PACKED = 0xF00D, (4, 1, 49152)


def encoder(calls: list):
    """cuTensorMapEncodeTiled's stand-in: the 'map' names everything it was built from."""

    def encode(arg, metadata, *rest):
        calls.append(arg)
        if metadata is None:
            return [arg.base, *arg.shape, *arg.strides]
        return [("map", arg.base.data_ptr(), tuple(arg.shape), tuple(arg.strides), tuple(metadata["block_size"])),
                *arg.shape, *arg.strides]

    return encode


def address(x):
    if isinstance(x, torch.Tensor):
        return x.data_ptr()
    if isinstance(x, (list, tuple)):
        return tuple(address(v) for v in x)
    return x


class CLaunch:
    """A recording stand-in for Triton's C `launch` (like it, no Python code object)."""

    def __init__(self, recorded: list) -> None:
        self.recorded = recorded

    def __call__(self, *args):
        self.recorded.append(args)


def holds_tensor(x) -> bool:
    return isinstance(x, torch.Tensor) or isinstance(x, (list, tuple)) and any(map(holds_tensor, x))


# --- Triton launchers of each shape, with a recording C launch ---------------------------------------

def launcher_39(c_launch, encode, signature=SIGNATURE, meta=META):
    """Triton 3.9's CudaLauncher (its __call__ and tensordesc wrapper, the installed ones)."""
    from triton.backends.driver import wrap_handle_tensordesc_impl
    from triton.backends.nvidia.driver import CudaLauncher

    cls = type("CudaLauncher39", (), {"__call__": CudaLauncher.__call__})
    run = cls()
    run.launch = wrap_handle_tensordesc_impl(c_launch, signature, meta, encode)
    run.num_ctas, run.gsan_enabled = 1, False
    run.global_scratch_size = run.profile_scratch_size = 0
    run.global_scratch_align = run.profile_scratch_align = 1
    run.launch_cooperative_grid, run.launch_pdl = False, True
    run.arg_annotations, run.kernel_signature = ["annotations"], b"signature"
    return run


# The shape of Triton 3.6's launcher (triton/backends/nvidia/driver.py): the C launch takes 13 base
# arguments then the kernel's, expanded flat; the wrapper finds `make_tensordesc_arg` among its globals.
SHAPE_36 = """
_BASE_ARGS_FORMAT_LEN = 13


def wrap_handle_tensordesc(launcher, signature, tensordesc_meta):
    tensordesc_indices = {i for i, sig in enumerate(signature.values()) if sig.startswith("tensordesc")}

    def inner(*args):
        final_args = list(args[:_BASE_ARGS_FORMAT_LEN])
        tensordesc_idx = 0
        for i, arg in enumerate(args[_BASE_ARGS_FORMAT_LEN:]):
            if i in tensordesc_indices:
                final_args.extend(make_tensordesc_arg(arg, tensordesc_meta[tensordesc_idx]))
                tensordesc_idx += 1
            else:
                final_args.append(arg)
        return launcher(*final_args)

    return inner


class CudaLauncher:
    def __call__(self, gridX, gridY, gridZ, stream, function, *args):
        self.launch(gridX, gridY, gridZ, stream, function, self.launch_cooperative_grid, self.launch_pdl,
                    None, None, *args)
"""


def source_36() -> str | None:
    """Triton 3.6's own _BASE_ARGS_FORMAT(_LEN), wrap_handle_tensordesc and CudaLauncher, taken from its
    driver.py (SPECGEN_TRITON36_DRIVER; nothing of it is kept in this repository)."""
    path = os.environ.get("SPECGEN_TRITON36_DRIVER")
    if not path or not Path(path).is_file():
        return None
    text = Path(path).read_text()
    wanted = {"_BASE_ARGS_FORMAT", "_BASE_ARGS_FORMAT_LEN", "wrap_handle_tensordesc", "CudaLauncher"}
    parts = [ast.get_source_segment(text, node) for node in ast.parse(text).body
             if getattr(node, "name", None) in wanted
             or isinstance(node, ast.Assign) and any(getattr(t, "id", "") in wanted for t in node.targets)]
    return "\n\n".join(parts) if len(parts) == len(wanted) else None


def launcher_36(c_launch, encode, source: str = SHAPE_36, signature=SIGNATURE, meta=META):
    scope: dict = {"make_tensordesc_arg": encode, "_allocation": types.SimpleNamespace(
        _allocator=None, _profile_allocator=None)}
    exec(compile(source, "<triton 3.6 shape>", "exec"), scope)
    cls = scope["CudaLauncher"]
    run = cls.__new__(cls)  # its __init__ compiles the C launcher
    # a kernel without descriptors: its launch is the C function itself, as Triton leaves it
    run.launch = scope["wrap_handle_tensordesc"](c_launch, signature, meta) if meta else c_launch
    run.num_ctas = 1
    run.global_scratch_size = run.profile_scratch_size = 0
    run.global_scratch_align = run.profile_scratch_align = 1
    run.launch_cooperative_grid, run.launch_pdl = False, True
    return run


SHAPES = ["3.9", "3.6-shaped"] + (["3.6 source"] if source_36() else [])


def make_run(shape: str, c_launch, encode, signature=SIGNATURE, meta=META):
    if shape == "3.9":
        return launcher_39(c_launch, encode, signature, meta)
    return launcher_36(c_launch, encode, SHAPE_36 if shape == "3.6-shaped" else source_36(), signature, meta)


def call_reference(run, gx, gy, gz, stream, kernel_args) -> None:
    """Triton's own path (both versions): CompiledKernel.run(grid, stream, function, packed metadata,
    launch metadata, hooks, *args)."""
    run(gx, gy, gz, stream, FUNCTION, PACKED, None, None, None, *kernel_args)


@pytest.fixture
def gpu_free(monkeypatch):
    """Device 0 current, stream 77, no launch hooks; Triton's active driver a stand-in (3.9's
    __call__ reads it)."""
    import triton

    monkeypatch.setattr(L, "_current_device", lambda: 0)
    monkeypatch.setattr(L, "_get_stream", lambda device: 77)
    monkeypatch.setattr(triton.runtime.driver, "_active", types.SimpleNamespace(), raising=False)


def kernel_args(a, b, ws, m=7, alpha=0.5):
    return (descriptor(a, list(a.shape), [a.stride(0), 1], [16, 32]),
            descriptor(b, list(b.shape), [b.stride(0), 1], [32, 32]), ws, m, alpha)


def make_launcher(shape: str, recorded: list, encoded: list):
    run = make_run(shape, CLaunch(recorded), encoder(encoded))
    compiled = types.SimpleNamespace(run=run, function=FUNCTION, packed_metadata=PACKED)
    launch, leading, expander = L.direct_launch(compiled)
    assert expander is not None, f"the Triton {shape} launcher shape is not recognised"
    kernel = types.SimpleNamespace(arg_names=["a_desc", "b_desc", "ws_ptr", "M", "alpha", "BLOCK"])
    tl = L.TritonLauncher(kernel, "t", {90: {"num_warps": 4, "num_stages": 3}})
    tl._compiled[(0, ("key",))] = (launch, leading, (None,), 132, expander)
    return tl, run


@pytest.mark.parametrize("shape", SHAPES)
def test_built_and_cached_launches_pass_what_tritons_launcher_passes(shape, gpu_free) -> None:
    recorded: list = []
    encoded: list = []
    tl, run = make_launcher(shape, recorded, encoded)
    a, b = torch.zeros(64, 64, dtype=torch.float16), torch.zeros(64, 96, dtype=torch.float16)
    ws = torch.zeros(16)
    args = kernel_args(a, b, ws)

    call_reference(run, 132, 1, 1, 77, args + (None,))  # the persistent grid capped at 132 SMs
    reference = address(recorded.pop())

    args_key = (0, ("key",), a.data_ptr(), 64, b.data_ptr(), 96)
    tl(0, ("key",), 300, args, {}, persistent=True, args_key=args_key)
    built = recorded.pop()
    assert address(built) == reference
    assert tl.launch_cached(args_key, 0)
    repeated = recorded.pop()
    # the grid (capped at the SM count) and stream included: the grid is a function of the key's sizes
    assert repeated == built and repeated[:4] == (132, 1, 1, 77) and address(repeated) == reference
    assert not holds_tensor(repeated)  # addresses only: the cache keeps no caller's tensor alive
    assert len(encoded) == 2 + 2  # the reference's two encodings, the built launch's two, none when repeated


@pytest.mark.parametrize("shape", SHAPES)
def test_a_new_key_builds_afresh_and_never_launches_a_stale_entry(shape, gpu_free) -> None:
    recorded: list = []
    tl, run = make_launcher(shape, recorded, [])
    big = torch.zeros(256, 128, dtype=torch.float16)
    b, ws = torch.zeros(64, 96, dtype=torch.float16), torch.zeros(16)
    first_key = (0, ("key",), big.data_ptr(), 64)
    tl(0, ("key",), (4, 1, 1), kernel_args(big[:64, :64], b, ws), {}, args_key=first_key)
    first = recorded.pop()
    other = big[64:128, :64]  # another address, the same shape
    assert not tl.launch_cached((0, ("key",), other.data_ptr(), 64), 0) and not recorded
    tl(0, ("key",), (4, 1, 1), kernel_args(other, b, ws), {}, args_key=(0, ("key",), other.data_ptr(), 64))
    second = recorded.pop()
    call_reference(run, 4, 1, 1, 77, kernel_args(other, b, ws) + (None,))
    assert address(second) == address(recorded.pop()) and second != first
    assert tl.launch_cached(first_key, 0) and recorded.pop() == first  # both kept


@pytest.mark.parametrize("shape", SHAPES)
def test_pointer_kernels_cached_launch_passes_what_tritons_launcher_passes(shape, gpu_free) -> None:
    recorded: list = []
    signature = {0: "*fp16", 1: "*fp16", 2: "i32", 3: "fp32", 4: "constexpr"}
    run = make_run(shape, CLaunch(recorded), encoder([]), signature, [])
    launch, leading, expander = L.direct_launch(types.SimpleNamespace(run=run, function=FUNCTION,
                                                                      packed_metadata=PACKED))
    assert expander is not None and expander.recorder is L._echo
    tl = L.TritonLauncher(types.SimpleNamespace(arg_names=["a", "b", "M", "alpha", "BLOCK"]), "t", {90: {}})
    tl._compiled[(0, ("key",))] = (launch, leading, (None,), 132, expander)
    a, b = torch.zeros(8, dtype=torch.float16), torch.zeros(8, dtype=torch.float16)
    call_reference(run, 3, 2, 1, 77, (a, b, 5, 0.25, None))
    reference = address(recorded.pop())
    args_key = (0, ("key",), a.data_ptr(), b.data_ptr(), 5, 0.25)
    tl(0, ("key",), (3, 2, 1), (a, b, 5, 0.25), {}, args_key=args_key)
    assert address(recorded[-1]) == reference and not holds_tensor(recorded[-1])
    assert tl.launch_cached(args_key, 0) and recorded[-1] == recorded[-2]


def test_the_cache_is_bounded_per_stream_and_bypassed_under_hooks_or_another_device(gpu_free, monkeypatch) -> None:
    recorded: list = []
    tl, _ = make_launcher("3.9", recorded, [])
    a, b, ws = torch.zeros(64, 64, dtype=torch.float16), torch.zeros(64, 96, dtype=torch.float16), torch.zeros(16)
    for i in range(L.MAX_EXPANDED + 5):
        tl(0, ("key",), (1, 1, 1), kernel_args(a, b, ws, m=i), {}, args_key=(0, ("key",), i))
        assert len(tl._expanded) <= L.MAX_EXPANDED
    assert len(recorded) == L.MAX_EXPANDED + 5
    key = (0, ("key",), L.MAX_EXPANDED + 4)
    assert tl.launch_cached(key, 0)
    monkeypatch.setattr(L, "_get_stream", lambda device: 78)  # another stream: its own entries
    assert not tl.launch_cached(key, 0)
    monkeypatch.setattr(L, "_get_stream", lambda device: 77)
    monkeypatch.setattr(L, "_current_device", lambda: 1)  # another current device
    assert not tl.launch_cached(key, 0)
    monkeypatch.setattr(L, "_current_device", lambda: 0)
    monkeypatch.setattr(L, "_hooks_active", lambda: True)  # profilers see every launch through the JIT
    assert not tl.launch_cached(key, 0)
    assert not tl.launch_cached(key, -1)  # the interpreter never has cached launches
    n = len(recorded)
    monkeypatch.setattr(L, "_hooks_active", lambda: False)
    assert tl.launch_cached(key, 0) and len(recorded) == n + 1


def test_a_replaced_workspace_drops_every_cached_launch(gpu_free) -> None:
    tl, _ = make_launcher("3.9", [], [])
    a, b = torch.zeros(64, 64, dtype=torch.float16), torch.zeros(64, 96, dtype=torch.float16)
    ws, counts = tl.workspace(-1, 4, 2, 16, False)
    tl(0, ("key",), (1, 1, 1), kernel_args(a, b, ws), {}, args_key=(0, ("key",), "small"))
    assert tl._expanded
    assert tl.workspace(-1, 4, 2, 16, False)[0] is ws and tl._expanded  # reused: kept
    tl.workspace(-1, 400, 2, 16, False)  # grown: the old buffers' addresses are gone
    assert not tl._expanded


def test_unknown_launcher_shapes_get_no_expander() -> None:
    class Other:
        def __call__(self, grid, stream, *args):
            pass

    run = Other()
    run.global_scratch_size = run.profile_scratch_size = 0
    launch, leading, expander = L.direct_launch(types.SimpleNamespace(run=run, function=1, packed_metadata=PACKED))
    assert launch is run and expander is None
    # 3.9-shaped with global scratch: Triton's own __call__ allocates it, so no direct launch
    run39 = launcher_39(CLaunch([]), encoder([]))
    run39.global_scratch_size = 64
    launch, _, expander = L.direct_launch(types.SimpleNamespace(run=run39, function=1, packed_metadata=PACKED))
    assert launch is run39 and expander is None


# --- the generated launchers' args key ----------------------------------------------------------------

class KeySpy:
    """Stands in for a generated module's `_launcher`: records each call's args key and launch
    arguments (launch_cached finds nothing, so every call reaches __call__); the workspace is real."""

    def __init__(self, real) -> None:
        self.real, self.seen = real, []

    def launch_cached(self, args_key, device) -> bool:
        self.last_key = args_key
        return False

    def workspace(self, *args):
        return self.real.workspace(*args)

    def num_sms(self, device):
        return self.real.num_sms(device)

    def __call__(self, device, key, grid, args, constexprs, persistent=False, variant=None, args_key=None):
        assert args_key is self.last_key
        self.seen.append((args_key, expansion(key, args)))


def expansion(key, args) -> tuple:
    """What the launch's arguments are made of: each descriptor's address, shape, strides and box, each
    tensor's address, each number's exact value (floats by their bits), under the compiled kernel's key."""
    out = [key]
    for x in args:
        if hasattr(x, "block_shape"):
            out.append((x.base.data_ptr(), x.base.dtype, tuple(x.shape), tuple(x.strides), tuple(x.block_shape)))
        elif isinstance(x, torch.Tensor):
            out.append(x.data_ptr())
        elif isinstance(x, float):
            out.append(x.hex())
        else:
            out.append(x)
    return tuple(out)


def check_keys(spy: KeySpy) -> None:
    """Equal args keys always came with equal launch arguments, and different ones with different."""
    by_key: dict = {}
    by_expansion: dict = {}
    for args_key, exp in spy.seen:
        assert by_key.setdefault(args_key, exp) == exp, "one args key, two different launches: a stale hit"
        assert by_expansion.setdefault(exp, args_key) == args_key, "the same launch under two keys"


def spied(module, monkeypatch) -> KeySpy:
    spy = KeySpy(module._launcher)
    monkeypatch.setattr(module, "_launcher", spy)
    return spy


def test_gemm_bf16_args_key_follows_every_input(monkeypatch) -> None:
    from generated.triton import gemm_bf16 as mod

    spy = spied(mod, monkeypatch)
    # each case changes one thing; where it is a stride, the tensor keeps its address (a view of the
    # same buffer), so only the stride tells the launches apart
    abuf, wbuf = torch.zeros(64 * 1024, dtype=torch.bfloat16), torch.zeros(4096 * 1024, dtype=torch.bfloat16)
    obuf = torch.empty(64 * 4160, dtype=torch.bfloat16)
    a, a_wide = abuf[:64 * 512].view(64, 512), abuf.view(64, 1024)[:, :512]
    w, w_wide = wbuf[:4096 * 512].view(4096, 512), wbuf.view(4096, 1024)[:, :512]
    out, out_wide = obuf[:64 * 4096].view(64, 4096), obuf.view(64, 4160)[:, :4096]
    assert a.data_ptr() == a_wide.data_ptr() and w.data_ptr() == w_wide.data_ptr()
    assert out.data_ptr() == out_wide.data_ptr()
    calls = {
        "base": (a, w.t(), out),
        "again": (a, w.t(), out),
        "a address": (abuf[512:512 + 64 * 512].view(64, 512), w.t(), out),
        "a stride": (a_wide, w.t(), out),
        "b address": (a, w[64:].t(), obuf[:64 * 4032].view(64, 4032)),
        "b stride": (a, w_wide.t(), out),
        "out address": (a, w.t(), obuf[64:64 + 64 * 4096].view(64, 4096)),
        "out stride": (a, w.t(), out_wide),
        "M (another variant)": (a[:16], w.t(), out[:16]),
        "M (same variant)": (a[:48], w.t(), out[:48]),
        "N": (a, w[:2048].t(), obuf[:64 * 2048].view(64, 2048)),
        "N, same out stride": (a, w[:2048].t(), out[:, :2048]),
        "K": (abuf[:64 * 256].view(64, 256), w[:, :256].t(), out),
        "M = 1": (a[:1], w.t(), out[:1]),
        "a second M = 1 row": (a[1:2], w.t(), out[1:2]),
    }
    keys = {}
    for what, (x, y, o) in calls.items():
        mod._run(x, y, o)
        keys[what] = spy.seen[-1][0]
    assert keys["again"] == keys["base"]
    others = [k for what, k in keys.items() if what != "again"]
    assert len(set(others)) == len(others), "an input that changes the launch left the args key unchanged"
    check_keys(spy)


def test_batched_and_epilogue_args_keys(monkeypatch) -> None:
    from generated.triton import bmm_bf16, gemm_fp8_rowwise

    spy = spied(bmm_bf16, monkeypatch)
    abuf = torch.zeros(3 * 80 * 64, dtype=torch.bfloat16)
    a, roomy = abuf[:3 * 64 * 64].view(3, 64, 64), abuf.view(3, 80, 64)[:, :64]  # one address, two batch strides
    b = torch.zeros(3, 64, 128, dtype=torch.bfloat16)
    out = torch.empty(3, 64, 128, dtype=torch.bfloat16)
    for x, y, o in ((a, b, out), (a, b, out), (a[:2], b[:2], out[:2]), (roomy, b, out), (a, b, out[:, :, :64])):
        bmm_bf16._run(x, y[..., :o.shape[-1]], o)
    keys = [k for k, _ in spy.seen]
    assert keys[0] == keys[1] and len(set(keys[1:])) == 4
    check_keys(spy)

    spy = spied(gemm_fp8_rowwise, monkeypatch)
    dt = gemm_fp8_rowwise.SPEC["a"]["dtype"]
    assert dt.startswith("fp8")
    fp8 = torch.float8_e4m3fn if dt == "fp8_e4m3" else torch.float8_e5m2
    a8, w8 = torch.zeros(32, 256, dtype=fp8), torch.zeros(512, 256, dtype=fp8)
    o8 = torch.empty(32, 512, dtype=getattr(torch, {"bf16": "bfloat16", "f16": "float16"}[
        gemm_fp8_rowwise.SPEC["out"]["dtype"]]))
    sa_, sb_ = torch.ones(32), torch.ones(512)
    for s_a, s_b in ((sa_, sb_), (sa_, sb_), (sa_.clone(), sb_), (sa_, sb_.clone())):
        gemm_fp8_rowwise._run(a8, w8.t(), s_a, s_b, o8)
    keys = [k for k, _ in spy.seen]
    assert keys[0] == keys[1] and len(set(keys[1:])) == 3  # each scale vector's address is in the key
    check_keys(spy)


def test_a_scalar_is_keyed_by_its_exact_bits(load_kernel, monkeypatch) -> None:
    from kernels import MINIMAL_SPEC

    spec = {**MINIMAL_SPEC, "name": "launch_key_scalar", "a": {"dtype": "f16", "major": "k"},
            "b": {"dtype": "f16", "major": "k"}, "out": {"dtype": "f16"},
            "epilogue": [{"op": "scale", "by": "scalar"}]}
    mod = load_kernel(spec)
    assert mod.SPEC["triton"]["tma"]
    spy = spied(mod, monkeypatch)
    a, w, out = torch.zeros(32, 64, dtype=torch.float16), torch.zeros(64, 64, dtype=torch.float16), \
        torch.empty(32, 64, dtype=torch.float16)
    for alpha in (0.5, 0.5, 0.25, 0.0, -0.0):
        mod._run(a, w.t(), alpha, out)
    keys = [k for k, _ in spy.seen]
    assert keys[0] == keys[1] and len(set(keys[1:])) == 4  # 0.0 and -0.0 differ in their bits
    check_keys(spy)


def test_hooks_are_seen_in_every_form_triton_has_had(monkeypatch) -> None:
    from triton.knobs import HookChain

    def knobs(enter, leave):
        monkeypatch.setattr(L, "_runtime_knobs", types.SimpleNamespace(launch_enter_hook=enter, launch_exit_hook=leave))

    knobs(HookChain(), HookChain(reversed=True))
    assert not L._hooks_active()
    chain = HookChain()
    chain.add(lambda metadata: None)
    knobs(HookChain(), chain)
    assert L._hooks_active()
    knobs(chain, HookChain())
    assert L._hooks_active()
    knobs(None, None)  # before HookChain: None or a plain callable
    assert not L._hooks_active()
    knobs(print, None)
    assert L._hooks_active()


def test_pointer_kernels_args_keys(monkeypatch) -> None:
    from generated.triton import gemm_residual_bf16, gemm_small_bf16

    spy = spied(gemm_small_bf16, monkeypatch)
    abuf, obuf = torch.zeros(64 * 128, dtype=torch.bfloat16), torch.empty(64 * 160, dtype=torch.bfloat16)
    a, a_wide = abuf[:64 * 64].view(64, 64), abuf.view(64, 128)[:, :64]
    out, out_wide = obuf[:64 * 96].view(64, 96), obuf.view(64, 160)[:, :96]
    wbuf = torch.zeros(96 * 128, dtype=torch.bfloat16)
    w, w_wide = wbuf[:96 * 64].view(96, 64), wbuf.view(96, 128)[:, :64]
    for x, y, o in ((a, w.t(), out), (a, w.t(), out), (a_wide, w.t(), out), (a, w_wide.t(), out),
                    (a, w.t(), out_wide), (a[:32], w.t(), out[:32]), (a, w[:48].t(), out[:, :48]),
                    (abuf[64:64 + 64 * 64].view(64, 64), w.t(), out)):
        gemm_small_bf16._run(x, y, o)
    keys = [k for k, _ in spy.seen]
    assert keys[0] == keys[1] and len(set(keys[1:])) == len(keys) - 1
    check_keys(spy)

    spy = spied(gemm_residual_bf16, monkeypatch)
    a = torch.zeros(64, 32, dtype=torch.bfloat16).t()  # (32, 64), M-major
    b = torch.zeros(48, 64, dtype=torch.bfloat16).t()  # (K, N), K-major
    cbuf = torch.zeros(32 * 64, dtype=torch.bfloat16)
    c, c_wide = cbuf[:32 * 48].view(32, 48), cbuf.view(32, 64)[:, :48]
    out = torch.empty(32, 48, dtype=torch.bfloat16)
    for alpha, cc in ((0.5, c), (0.5, c), (2.0, c), (0.0, c), (-0.0, c), (0.5, c_wide)):
        gemm_residual_bf16._run(a, b, alpha, cc, out)
    keys = [k for k, _ in spy.seen]
    assert keys[0] == keys[1] and len(set(keys[1:])) == len(keys) - 1  # alpha's bits, c's stride
    check_keys(spy)


def test_another_dtype_never_reaches_the_cache(monkeypatch) -> None:
    """The args key leaves dtypes out because the guards admit only the spec's: a tensor of another
    dtype (here the same bytes reinterpreted, so address, shape and strides all match) raises first."""
    from generated.triton import gemm_bf16 as mod

    spy = spied(mod, monkeypatch)
    a, w, out = torch.zeros(64, 64, dtype=torch.bfloat16), torch.zeros(64, 64, dtype=torch.bfloat16), \
        torch.empty(64, 64, dtype=torch.bfloat16)
    mod._run(a, w.t(), out)
    assert len(spy.seen) == 1
    for x, y, o in ((a.view(torch.float16), w.t(), out), (a, w.view(torch.float16).t(), out),
                    (a, w.t(), out.view(torch.float16))):
        with pytest.raises(TypeError, match="dtype"):
            mod._run(x, y, o)
    assert len(spy.seen) == 1


@pytest.mark.parametrize("name", ["gemm_small_bf16", "gemm_bf16", "bmm_bf16"])
def test_the_guard_hands_the_key_what_it_read(name) -> None:
    """`_check` returns the strides and addresses of a, b and out it read (the args key is built from
    them, reading no tensor twice), and `_validate` (the slow path) returns the same for the same
    tensors: the launcher never keys on figures of another tensor."""
    import importlib

    mod = importlib.import_module(f"generated.triton.{name}")
    batch = (3,) if name.startswith("bmm") else ()
    a = torch.zeros(*batch, 48, 64, dtype=torch.bfloat16)
    b = torch.zeros(*batch, 80, 64, dtype=torch.bfloat16).transpose(-1, -2)  # (K, N) in the spec's major mode
    if mod.SPEC["b"]["major"] != "k":
        b = b.contiguous()
    out = torch.empty(*batch, 48, 80, dtype=torch.bfloat16)
    fast, slow = mod._check(a, b, out), mod._validate(a, b, out)
    assert fast == slow and fast[-6:] == (a.stride(), b.stride(), out.stride(), a.data_ptr(), b.data_ptr(),
                                          out.data_ptr())
    made = mod._check(a, b, None)  # the output it allocates, and that output's figures
    assert made[-6:] == (a.stride(), b.stride(), made[-7].stride(), a.data_ptr(), b.data_ptr(), made[-7].data_ptr())
