"""The encoded-TMA-descriptor cache (specgen/runtime/triton/descriptors.py): a hit only for exactly the
same address, shape, strides, dtype, box and kernel metadata; any change encodes afresh. Runs Triton's
own tensordesc wrapper (3.7+: the encoder in its closure) and a 3.6-shaped one (the encoder a module
global) on the CPU with a counting encoder in place of cuTensorMapEncodeTiled."""

from __future__ import annotations

import pytest
import torch

from specgen.runtime.triton.descriptors import caching_encoder, descriptor, with_descriptor_cache


class Encoder:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __call__(self, arg, metadata=None, *rest):
        self.calls.append((arg.base.data_ptr(), tuple(arg.shape), tuple(arg.strides), tuple(arg.block_shape),
                           arg.base.dtype))
        return [("map", len(self.calls)), *arg.shape, *arg.strides]


META = {"swizzle": 128, "elem_size": 2, "elem_type": 6, "block_size": [16, 32], "fp4_padded": False}


def desc(t: torch.Tensor, block=(16, 32)):
    return descriptor(t, list(t.shape), list(t.stride()), list(block))


def test_same_descriptor_hits_and_every_change_encodes_afresh() -> None:
    enc = Encoder()
    cached = caching_encoder(enc)
    big = torch.zeros(256, 128, dtype=torch.float16)
    a = big[:64, :64]
    first = cached(desc(a), META)
    assert cached(desc(a), META) is first and len(enc.calls) == 1
    changed = {
        "address": desc(big[64:128, :64]),
        "shape": desc(big[:48, :64]),
        "strides": descriptor(a, [64, 64], [64, 1], [16, 32]),  # the same base, another leading stride
        "dtype": desc(torch.zeros(64, 64, dtype=torch.bfloat16)),
        "box": desc(a, (32, 32)),
    }
    for what, d in changed.items():
        got = cached(d, META)
        assert got is not first and got[0] == ("map", len(enc.calls)), what
    assert len(enc.calls) == 1 + len(changed)
    assert cached(desc(a), dict(META)) is not first  # another kernel's metadata: another key
    assert cached(desc(a), META) is first  # and the original still hits


def test_the_cache_is_bounded() -> None:
    from specgen.runtime.triton import descriptors

    enc = Encoder()
    cached = caching_encoder(enc)
    big = torch.zeros(descriptors.MAX_CACHED + 8, 8, dtype=torch.float16)
    for i in range(descriptors.MAX_CACHED + 8):
        cached(desc(big[i:i + 1], (1, 8)), META)
    assert len(cached.cache) <= descriptors.MAX_CACHED


def test_tritons_own_wrapper_gets_a_caching_copy() -> None:
    driver = pytest.importorskip("triton.backends.driver")
    impl = getattr(driver, "wrap_handle_tensordesc_impl", None)
    if impl is None:
        pytest.fail("Triton's tensordesc wrapper moved: with_descriptor_cache needs a look")
    enc = Encoder()
    launched: list[tuple] = []
    inner = impl(lambda *args: launched.append(args), {0: "tensordesc<fp16[16, 32]>", 1: "i32"}, [META], enc)
    wrapped = with_descriptor_cache(inner)
    assert wrapped is not inner
    a = torch.zeros(64, 64, dtype=torch.float16)
    for _ in range(3):
        wrapped(1, 1, 1, (desc(a), 7))
    assert len(enc.calls) == 1 and len(launched) == 3
    wrapped(1, 1, 1, (desc(a[:32]), 7))  # a changed shape
    assert len(enc.calls) == 2
    inner(1, 1, 1, (desc(a), 7))  # the original wrapper keeps encoding every call
    assert len(enc.calls) == 3


def test_a_triton_3_6_shaped_wrapper_gets_a_caching_copy() -> None:
    enc = Encoder()
    scope: dict = {"make_tensordesc_arg": enc}
    exec("def wrap(launcher, meta):\n"
         "    def inner(*args):\n"
         "        return launcher(*args[:1], *make_tensordesc_arg(args[1], meta), *args[2:])\n"
         "    return inner\n", scope)
    launched: list[tuple] = []
    inner = scope["wrap"](lambda *args: launched.append(args), META)
    wrapped = with_descriptor_cache(inner)
    a = torch.zeros(64, 64, dtype=torch.float16)
    wrapped(0, desc(a), 5)
    wrapped(0, desc(a), 5)
    assert len(enc.calls) == 1 and launched[0] == launched[1]
    wrapped(0, descriptor(a, [64, 32], [64, 1], [16, 32]), 5)  # a changed shape
    assert len(enc.calls) == 2 and scope["make_tensordesc_arg"] is enc  # the module's global untouched


def test_a_c_launcher_is_left_alone() -> None:
    assert with_descriptor_cache(len) is len
