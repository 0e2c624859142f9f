"""The torch entry of a Pallas training module (a spec's `training` section; TPU and Mosaic GPU) as a differentiable
torch op (issue 38). With grad on and a tensor that requires grad, `specgen::<kernel>_torch_train_<spec hash>` runs
jax.vjp of the jitted JAX entry (the module's custom_vjp: its forward rule, preact's forward_pre or recompute's
forward) on the tensors (DLPack) with respect to those tensors, returning out and a handle (an int64 scalar) to the
JAX pullback's residuals it keeps in `_PENDING` until the handle is freed (with the autograd graph that saves it);
`specgen::<kernel>_torch_backward_<spec hash>` applies that pullback to the output's gradient (the backward's
kernels); torch.library.register_autograd joins them, as the Triton and CuTe modules' ops are joined
(runtime/torch/ops.py). Eager calls run the same implementations through an autograd.Function (`_eager_function`),
skipping the dispatcher's custom-op trips; torch.compile takes the ops. Without grad (torch.compile's inference
graphs) the plain op `specgen::<kernel>_torch_<spec hash>` runs the entry's forward. Every op has a fake
implementation, so torch.compile(fullgraph=True) takes the entry with no graph break. Imported by generated code on
its first torch call (or at its import where torch is already imported; under torch.compile the module's
`_torch_entry` runs at trace time).

A step's host work (session 35): the tensors' DLPack imports by jax's own call (runtime/jax.py's bridges), one jitted
forward returning the pullback's residuals as flat arrays (the arguments among them not copied through XLA), one
jitted apply of the pullback rebuilt from them (`_programs`)."""

from __future__ import annotations

import functools
import itertools
import weakref
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import torch

from specgen.runtime import jax as _rt
from specgen.runtime.torch.ops import register_backward, register_custom_op
from specgen.runtime.torch.training import out_refused, refuse_fp8_grad

# The interpret modes calls have passed (None: the default; True, False, an InterpretParams), by index: the ops'
# schema takes the index (an int).
_MODES: list[object] = [None]
# The pullbacks (apply program, residuals) of the calls whose backward may still run, by handle (the train op's
# second output); a handle's finalizer drops its entry.
_PENDING: dict[int, Any] = {}
_HANDLES = itertools.count(1)


@torch._dynamo.assume_constant_result
def mode_index(mode: object) -> int:
    """`mode`'s index in _MODES, added on first use (under torch.compile at trace time: a constant of the graph)."""
    for i, known in enumerate(_MODES):
        if known is mode or (type(known) is type(mode) and known == mode):
            return i
    _MODES.append(mode)
    return len(_MODES) - 1


class Entry:
    """One module's differentiable torch entry. `args`: its arguments in order, (name, transpose) each (transpose:
    True where the JAX entry takes the tensor's last two dims swapped (its stored layout), False as it is, None a
    vector, "scalar" a runtime scalar: a Python number, no gradient); `call(mode, *xs)`: the jitted JAX entry on the
    stored arrays; `out_dtype`: a jnp dtype; `gated`: out's N is half B's last dim; `fp8`: a and b are 8-bit (no
    gradient through autograd: refuse_fp8_grad). A grouped module's (a (M, K), b (G, K, N), the group index: a
    vector, int32, so never differentiated) takes the same entry: out (M, N) as the dense module's."""

    def __init__(self, kernel: str, spec_hash: str, args: tuple[tuple[str, Any], ...], call: Callable[..., jax.Array],
                 out_dtype: Any, gated: bool, fp8: bool) -> None:
        self.kernel, self.args, self.call, self.gated, self.fp8 = kernel, args, call, gated, fp8
        self.out_dtype = getattr(torch, jnp.dtype(out_dtype).name)
        self.tensors = tuple(i for i, (_, how) in enumerate(args) if how != "scalar")
        schema = [[name, "float" if how == "scalar" else "Tensor"] for name, how in args]
        self.op = register_custom_op(f"{kernel}_torch", spec_hash, self._forward, self._forward_fake,
                                     [*schema, ["mode", "int"]])
        self.train_op = register_custom_op(f"{kernel}_torch_train", spec_hash, self._train_forward, self._train_fake,
                                           [*schema, ["wrt", "int"], ["mode", "int"]], "(Tensor, Tensor)")
        needs = [[f"need_{args[i][0]}", "bool"] for i in self.tensors]
        self.backward_op = register_custom_op(f"{kernel}_torch_backward", spec_hash, self._backward, self._backward_fake,
                                              [["grad", "Tensor"], ["handle", "Tensor"], *schema, *needs, ["wrt", "int"],
                                               ["mode", "int"]],
                                              "(" + ", ".join(["Tensor"] * len(self.tensors)) + ")")
        register_backward(f"{kernel}_torch_train", spec_hash, self._autograd_backward, self._setup_context)
        self.function = _eager_function(self)

    def needed(self, *xs: object, out: object = None) -> bool:
        """Whether the torch entry takes the op: grad mode on and a tensor that requires grad, or torch.compile
        tracing (the op is opaque there; the eager path runs JAX, which dynamo cannot trace). A caller's `out` (a
        grouped module's) keeps the module's own path, and is refused with a tensor that requires grad."""
        grad = torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in xs)
        if out is not None:
            if grad:
                raise out_refused(self.kernel)
            return False
        return grad or torch.compiler.is_compiling()

    def __call__(self, *xs: Any, interpret: object = None) -> torch.Tensor:
        """The train op where grad is on and a tensor requires grad (`wrt`: those tensors, a bit each in the order of
        self.tensors), else the plain op."""
        wrt = sum(1 << j for j, i in enumerate(self.tensors) if xs[i].requires_grad) if torch.is_grad_enabled() else 0
        if not wrt:
            return self.op(*xs, mode_index(interpret))
        if torch.compiler.is_compiling():
            return self.train_op(*xs, wrt, mode_index(interpret))[0]
        return self.function.apply(*xs, wrt, mode_index(interpret))[0]

    def arrays(self, xs: tuple) -> list[Any]:
        """The arguments as the JAX entry's (stored layouts; a scalar as it is)."""
        out = [x if how == "scalar" else None for x, (_, how) in zip(xs, self.args, strict=True)]
        tensors = tuple((self.args[i][0], xs[i], self.args[i][1]) for i in self.tensors)
        for i, arr in zip(self.tensors, _rt.torch_to_jax(self.kernel, tensors), strict=True):
            out[i] = arr
        return out

    def _forward(self, *xs_mode: Any) -> torch.Tensor:
        *xs, mode = xs_mode
        return _rt.to_torch(self.call(_MODES[mode], *self.arrays(tuple(xs))))

    def _forward_fake(self, *xs_mode: Any) -> torch.Tensor:
        a, b = xs_mode[0], xs_mode[1]  # A (..., M, K), B (..., K, N or 2N): the logical shapes
        return a.new_empty((*a.shape[:-1], b.shape[-1] // 2 if self.gated else b.shape[-1]), dtype=self.out_dtype)

    def _wrt(self, wrt: int) -> tuple[int, ...]:
        """The argument positions of the tensors in the bit mask `wrt`."""
        return tuple(i for j, i in enumerate(self.tensors) if wrt >> j & 1)

    def _train_forward(self, *xs_wrt_mode: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """out, and the handle of the pullback (jax.vjp with respect to the tensors in `wrt`) kept in _PENDING."""
        *xs, wrt, mode = xs_wrt_mode
        arrays = self.arrays(tuple(xs))
        forward, apply = _programs(self.call, self._wrt(wrt), mode, _signature(arrays))
        out, residuals = forward(arrays)
        key = next(_HANDLES)
        _PENDING[key] = apply, residuals
        handle = torch.tensor(key, dtype=torch.int64)
        weakref.finalize(handle, _PENDING.pop, key, None)
        return _rt.to_torch(out), handle

    def _train_fake(self, *xs_wrt_mode: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return self._forward_fake(*xs_wrt_mode[:-1]), torch.empty((), dtype=torch.int64, device="cpu")

    def _setup_context(self, ctx: Any, inputs: tuple, output: Any) -> None:
        if self.fp8:  # no gradient to the 8-bit operands (autograd would round it to fp8) nor to the scales
            for name, t in zip(("a", "b"), inputs, strict=False):
                if t.requires_grad:
                    raise RuntimeError(
                        f"{self.kernel}: {name} ({t.dtype}) requires grad, but autograd would round its gradient to fp8; "
                        "the backward's gradients are those of the dequantized operands (a scale_a, b scale_b): take them "
                        f"from jax.vjp of the JAX entry {self.kernel} (the straight-through step of your quantization), or "
                        "detach it")
            refuse_fp8_grad(self.kernel, (None, None, *(x for x, (name, _) in zip(inputs, self.args, strict=False)
                                                         if name in ("scale_a", "scale_b"))))
        ctx.save_for_backward(output[1], *(inputs[i] for i in self.tensors))
        ctx.mark_non_differentiable(output[1])
        ctx.set_materialize_grads(False)  # the handle's gradient stays None
        ctx.scalars = tuple(x for x, (_, how) in zip(inputs, self.args, strict=False) if how == "scalar")
        ctx.wrt, ctx.mode = inputs[-2], inputs[-1]

    def _autograd_backward(self, ctx: Any, grad: torch.Tensor | None, _handle_grad: Any, eager: bool = False) -> tuple:
        """The inputs' gradients: the backward op (eager: its implementation, called directly)."""
        need = ctx.needs_input_grad
        if grad is None:  # out took no part in what is differentiated (grads are not materialized)
            return (None,) * len(need)
        handle, *saved = ctx.saved_tensors
        xs, tensors, scalars = [], iter(saved), iter(ctx.scalars)
        for _, how in self.args:
            xs.append(next(scalars) if how == "scalar" else next(tensors))
        run = self._backward if eager else self.backward_op
        grads = iter(run(grad, handle, *xs, *(need[i] for i in self.tensors), ctx.wrt, ctx.mode))
        out = [next(grads) if i in self.tensors else None for i in range(len(self.args))]
        return (*(g if n else None for g, n in zip(out, need, strict=False)), None, None)

    def _backward(self, grad: torch.Tensor, handle: torch.Tensor, *rest: Any) -> tuple[torch.Tensor, ...]:
        """The gradients of the tensors asked for (need_*), each shaped and strided as its argument; an empty tensor
        for one not asked for: the train op's pullback (its handle) on the output's gradient, imported through DLPack
        (any view: copied where it is not contiguous, as autograd's expanded gradient of a sum)."""
        n = len(self.args)
        xs, needs, wrt = rest[:n], rest[n:-2], rest[-2]  # (the mode is the pullback's)
        out = {i: xs[i].new_empty(0) for i in self.tensors}
        asked = [i for i, need in zip(self.tensors, needs, strict=True) if need]
        if asked:
            pending = _PENDING.get(int(handle))
            positions = self._wrt(wrt)
            if pending is None or not set(asked) <= set(positions):
                raise RuntimeError(f"{self.kernel}: the backward's residuals are gone (its handle was freed) or it asks "
                                   f"for gradients the forward did not record: run backward on the graph of this call")
            apply, residuals = pending
            grads = apply(residuals, _rt.torch_to_jax(self.kernel, (("grad", grad, None),))[0])
            for i in asked:
                t = _rt.to_torch(grads[positions.index(i)])
                t = t.transpose(-1, -2) if self.args[i][1] is True else t.reshape(xs[i].shape)
                if t.stride() != xs[i].stride() and xs[i].numel() > 1:  # in the argument's strides (the fake's)
                    t = torch.empty_like(xs[i], dtype=t.dtype).copy_(t)
                out[i] = t
        return tuple(out[i] for i in self.tensors)

    def _backward_fake(self, grad: torch.Tensor, handle: torch.Tensor, *rest: Any) -> tuple[torch.Tensor, ...]:
        n = len(self.args)
        xs, needs = rest[:n], rest[n:-2]
        dtype = self.out_dtype if self.fp8 else None  # fp8's dA and dB: the output's dtype (refused in autograd)
        return tuple(torch.empty_like(xs[i], dtype=dtype if i < 2 else None) if need else xs[i].new_empty(0)
                     for i, need in zip(self.tensors, needs, strict=True))


def _eager_function(entry: Entry) -> type[torch.autograd.Function]:
    """The train op's eager form: an autograd.Function running the op's implementation, setup and backward (the
    backward op's implementation) directly, without the dispatcher's two custom-op trips (torch.library's Python
    autograd wrapper, its redispatch and the backward op's dispatch). forward takes ctx (no setup_context: apply
    would bind the arguments through inspect.signature each call). torch.compile takes the ops (Entry.__call__)."""
    def forward(ctx: Any, *xs_wrt_mode: Any) -> tuple[torch.Tensor, torch.Tensor]:
        output = entry._train_forward(*xs_wrt_mode)
        entry._setup_context(ctx, xs_wrt_mode, output)
        return output

    def backward(ctx: Any, grad: torch.Tensor | None, handle_grad: Any) -> tuple:
        return entry._autograd_backward(ctx, grad, handle_grad, eager=True)

    return type(f"specgen_{entry.kernel}_torch_train", (torch.autograd.Function,),
                {"forward": staticmethod(forward), "backward": staticmethod(backward)})


def _signature(arrays: list[Any]) -> tuple:
    """The shapes and dtypes a jitted program is traced for (a runtime scalar: its Python type)."""
    return tuple((x.shape, x.dtype) if isinstance(x, jax.Array) else type(x) for x in arrays)


@functools.cache
def _programs(call: Callable[..., jax.Array], wrt: tuple[int, ...], mode: int, signature: tuple) -> tuple:
    """Two programs for one entry, argument set `wrt`, interpret mode and signature. `forward(arrays)`: out and the
    leaves of jax.vjp's pullback (its residuals) with respect to the arguments at `wrt`; `apply(leaves, g)`: the
    pullback rebuilt from them (its tree read at forward's trace, one per signature) applied to the output's gradient.
    Flat leaves, not the pullback's pytree: jit neither rebuilds the pytree from its output nor flattens it again as
    the apply's argument. A leaf that is an argument (a and b, saved for dgrad and wgrad) is not an output of the
    jitted forward (XLA would copy it) but taken from the arguments."""
    tree: list[Any] = []  # the pullback's treedef and, per leaf, the argument it is (None: an output)

    def traced(*xs: Any) -> tuple:
        def of(*ws: Any) -> jax.Array:
            full = list(xs)
            for i, w in zip(wrt, ws, strict=True):
                full[i] = w
            return call(_MODES[mode], *full)

        out, pullback = jax.vjp(of, *(xs[i] for i in wrt))
        leaves, treedef = jax.tree_util.tree_flatten(pullback)
        args = [next((j for j, x in enumerate(xs) if leaf is x), None) for leaf in leaves]
        tree[:] = [treedef, args]
        return out, [leaf for leaf, j in zip(leaves, args, strict=True) if j is None]

    jitted = jax.jit(traced)

    def forward(arrays: list[Any]) -> tuple[jax.Array, list[Any]]:
        out, made = jitted(*arrays)
        made = iter(made)
        return out, [next(made) if j is None else arrays[j] for j in tree[1]]

    def apply(leaves: list[Any], g: jax.Array) -> tuple:
        return jax.tree_util.tree_unflatten(tree[0], leaves)(g)

    return forward, jax.jit(apply)
