"""What a generated module's backward (a spec's `training` section) calls at run time: its launch of a backward
kernel with the launch config of the device's compute capability, the choice of each GEMM's form (TMA where the
operands' layouts allow, pointer loads for any strides), and the checks of what autograd hands it.

The backward kernels launch through Triton's JIT, which specializes on the strides (and, for the TMA form, the
descriptors' boxes) it is given; a backward launches three GEMMs of M x N x K each, next to which the JIT's
per-launch cost (some microseconds) is small.
"""

from __future__ import annotations

import torch

from specgen.runtime.guards import INT32_SPAN, INTERPRET, refuse_interpreter_bf16
from specgen.runtime.torch.training import (  # noqa: F401  (the modules call them as _tr.*)
    backward_sizes,
    needs_grad,
    out_refused,
    refuse_fp8_grad,
)
from specgen.runtime.triton.descriptors import descriptor

_CAPABILITY: dict[int, int] = {}


def capability(device: int) -> int:
    """The CUDA device's compute capability as one number (90 for sm_90), cached."""
    cc = _CAPABILITY.get(device)
    if cc is None:
        major, minor = torch.cuda.get_device_capability(device)
        cc = _CAPABILITY[device] = major * 10 + minor
    return cc


def config_for(kernel: str, configs: dict[int, dict[str, int]], device: int) -> dict[str, int]:
    """The launch config (warps, stages) for a device by its compute capability (the first under the interpreter)."""
    if device < 0:
        return next(iter(configs.values()))
    cc = capability(device)
    if cc not in configs:
        have = ", ".join(f"sm_{c}" for c in configs)
        raise RuntimeError(f"{kernel}: the backward was rendered for {have} (the spec's targets); cuda:{device} is "
                           f"sm_{cc}. Add its target to the spec and re-render.")
    return configs[cc]


def _span(t: torch.Tensor, per_matrix: bool = False) -> int:
    """The largest element offset a kernel addresses in `t` (pointer kernels index in 32 bits); `per_matrix`: within
    one matrix of a batch (a batched kernel steps its batches by int64 offsets)."""
    dims = list(zip(t.shape, t.stride(), strict=True))
    return sum((n - 1) * abs(s) for n, s in (dims[-2:] if per_matrix else dims) if n)


def launch(kernel: str, jit: object, config: dict[str, int], tiles: dict[str, int], grid: int | tuple[int, ...],
           args: tuple, bf16: bool, per_matrix: bool = False, **constexprs: object) -> None:
    """Launch one backward kernel over `grid` programs (the JIT specializes and caches it); `per_matrix`: a batched
    kernel's, whose 32-bit indexing spans one matrix of each batch."""
    if bf16:
        refuse_interpreter_bf16(kernel)
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor) and _span(a, per_matrix) >= INT32_SPAN:
            raise ValueError(f"{kernel}: a backward operand (argument {i}, shape {tuple(a.shape)}, strides {a.stride()}) "
                             f"spans {_span(a)} elements; the backward kernels index within a matrix in 32 bits "
                             f"(< {INT32_SPAN}): split the call")
    jit[grid if isinstance(grid, tuple) else (grid,)](*args, **tiles, **constexprs, FAST_MATH=not INTERPRET, **config)  # type: ignore[index]


def tma_operand(v: torch.Tensor, rows: int, cols: int, store: bool = False) -> tuple[object, bool] | None:
    """A TMA descriptor reading matrix `v` in (rows, cols) boxes, and whether it is built over v's transpose (v
    stored column-major: the kernel reads boxes of the transpose and transposes them in SMEM); None where TMA
    cannot read v as it lies (no unit stride, a base or leading stride not a multiple of 16 bytes, for a `store` a
    row's extent not one either, rows that overlap, such as a broadcast row's stride 0: a descriptor's rows follow
    one another, an empty v). A batch of
    matrices (batch, r, c) gets a 3-D descriptor with boxes of one batch (1, rows, cols), where its batch stride
    is a multiple of 16 bytes and its batches do not overlap (one batch: any batch stride, never stepped)."""
    if v.numel() == 0 or v.data_ptr() % 16:
        return None
    size = v.element_size()
    for t, (r, c), flipped in ((v, (rows, cols), False), (v.mT, (cols, rows), True)):
        # a store's row extent a multiple of 16 bytes too: it writes a row's last 16 bytes whole (guards._needs_copy)
        if (t.stride(-1) == 1 and t.stride(-2) >= t.shape[-1] and (t.stride(-2) * size) % 16 == 0
                and not (store and (t.shape[-1] * size) % 16)):
            if t.dim() == 2:
                return descriptor(t, list(t.shape), list(t.stride()), [r, c]), flipped
            span = t.shape[1] * t.stride(1)  # a batch's rows, one after another
            if t.shape[0] == 1:
                return descriptor(t, list(t.shape), [span, t.stride(1), 1], [1, r, c]), flipped
            if t.stride(0) >= span and (t.stride(0) * size) % 16 == 0:
                return descriptor(t, list(t.shape), list(t.stride()), [1, r, c]), flipped
    return None


# The TMA form runs one program per SM over the tiles (persistent); the interpreter's "SMs" are 3, so its
# programs walk several tiles each and uneven counts of them, as a GPU's do.
PERSISTENT = True
TMA_STORES = True  # the TMA form's outputs through TMA stores where their layouts allow
INTERPRETER_SMS = 3
_SMS: dict[int, int] = {}


def sm_count(device: int) -> int:
    """The CUDA device's multiprocessor count, cached (INTERPRETER_SMS under the interpreter)."""
    if device < 0:
        return INTERPRETER_SMS
    n = _SMS.get(device)
    if n is None:
        n = _SMS[device] = torch.cuda.get_device_properties(device).multi_processor_count
    return n


# A row band of the gradient's column pass is at least this many rows (its partial sums are f32, one row a band).
BAND_MIN_ROWS = 512
PROGRAMS_PER_SM = 8


def row_bands(M: int, cols: int, block_m: int, device: int) -> tuple[int, int]:
    """(bands, rows per band) for the column pass over an M-row gradient with `cols` column programs: enough bands
    for about PROGRAMS_PER_SM programs an SM (a 16384 x 4096 gradient has 128 column programs: 8 bands on 132
    SMs), none shorter than BAND_MIN_ROWS; rows per band a multiple of block_m."""
    bands = max(1, min(PROGRAMS_PER_SM * sm_count(device) // max(cols, 1), M // BAND_MIN_ROWS))
    per_band = -(-M // bands)
    rows_per = max(block_m, -(-per_band // block_m) * block_m)
    return (-(-M // rows_per) if M else 1), rows_per


def _reads_tma(device: int) -> bool:
    """Whether the device has TMA (sm_90 and later; the interpreter runs the TMA form too)."""
    return device < 0 or capability(device) >= 90


def gemm(kernel: str, forms: tuple[object, object], configs: dict[int, dict[str, int]], tiles: dict[str, int],
         device: int, x: torch.Tensor, y: torch.Tensor, c: torch.Tensor, tensors: tuple, strides: tuple,
         tma_stores: bool, bf16: bool, gated: str = "", epilogue: dict[str, object] | None = None) -> None:
    """C (P, Q) = X (P, R) @ Y (R, Q) with a role's epilogue over the output tiles: the TMA form (`forms[0]`,
    persistent) where the device has TMA and both operands' layouts allow it, else the pointer form, which takes
    any strides. A TMA form with `tma_stores` stores C through TMA too where C's layout allows it (either major).
    `tensors`: the role's own (after C in the kernels' parameters), `strides`: those of its matrix among them
    (after C's). `gated` (a gated epilogue's layout, for the GEMM that computes pre): Y has 2 Q columns, gate and
    up; an interleaved tile reads them as one box of 2 BLOCK_Q columns. Batched (x, y and c of 3 dims, the batch
    first): C[i] = X[i] @ Y[i] for each batch i, the pointer form one program a tile and batch, the TMA form's
    programs walking batch x tiles (its 3-D descriptors' boxes of one batch), each matrix's strides with its batch
    stride first. `epilogue`: the recompute GEMM's epilogue knobs for its TMA form (EPI_SPLIT, DOUT_TMA, G_TMA,
    DOUT_EARLY: templates/gemm/triton/recompute.jinja), dOut being tensors[0]; its descriptors are built here
    (recompute_descriptors)."""
    (P, R), Q = x.shape[-2:], y.shape[-1] // (2 if gated else 1)
    batch = x.shape[0] if x.dim() == 3 else 0  # 0: not batched
    BP, BQ, BR = tiles["BLOCK_P"], tiles["BLOCK_Q"], tiles["BLOCK_R"]
    grid = -(-P // BP) * -(-Q // BQ)
    config = config_for(kernel, configs, device)
    xd = yd = None
    if R and _reads_tma(device):
        xd = tma_operand(x, BP, BR)
        yd = tma_operand(y, BR, 2 * BQ if gated == "interleaved" else BQ) if xd else None
    if not (xd and yd):
        launch(kernel, forms[1], config, tiles, (grid, batch) if batch else grid,
               (x, y, c, *tensors, P, Q, R, *x.stride(), *y.stride(), *c.stride(), *strides), bf16, per_matrix=bool(batch))
        return
    stores: dict[str, bool] = {}
    dst: object = c
    if tma_stores:
        cd = tma_operand(c, BP, BQ, store=True) if TMA_STORES else None
        stores = {"D_TMA": cd is not None, "D_T": bool(cd and cd[1])}
        dst = cd[0] if cd else c
    if epilogue is not None:
        dst, tensors, stores = recompute_descriptors(epilogue, c, tensors, BP, BQ, gated)
    if PERSISTENT:
        grid = min(grid * max(batch, 1), sm_count(device))
    launch(kernel, forms[0], config, tiles, grid, (xd[0], yd[0], dst, *tensors, P, Q, R, *((batch,) if batch else ()),
                                                   *c.stride(), *strides), bf16, per_matrix=bool(batch), X_T=xd[1],
           Y_T=yd[1], **stores)


def recompute_descriptors(knobs: dict[str, object], g: torch.Tensor, tensors: tuple, BP: int, BQ: int,
                          gated: str) -> tuple[object, tuple, dict[str, object]]:
    """(G's argument, the role's tensors, the constexprs) for the recompute GEMM's TMA form with epilogue `knobs`:
    dOut (tensors[0]) as a descriptor of BP x BQ / EPI_SPLIT boxes where DOUT_TMA and dOut lies row-major as TMA
    reads it, G (g) as one where G_TMA and g allows a TMA store (gated halves: a 3-D descriptor over g viewed
    (M, 2, N), boxes (BP, 1, BQ / EPI_SPLIT), so each half's box clips at N); else that knob off (pointers). A dOut
    asked for by TMA that falls back to pointer loads turns G_TMA off too: a pointer-loaded dOut's layout conversion
    scratch beside G's staging box can pass sm_90's SMEM (245,784 B with triton 3.6 at 256 x 128, EPI_SPLIT 2, rows
    of 136 elements)."""
    out = dict(knobs)
    sub = BQ // int(knobs["EPI_SPLIT"])  # type: ignore[call-overload]
    # (a TMA box's rows at least 16 bytes: a narrower subtile reads and stores by pointers)
    dst: object = g
    if out["DOUT_TMA"]:
        dd = tma_operand(tensors[0], BP, sub) if sub * tensors[0].element_size() >= 16 else None
        out["DOUT_TMA"] = bool(dd and not dd[1])
        if out["DOUT_TMA"]:
            tensors = (dd[0], *tensors[1:])  # type: ignore[index]
        else:
            out["G_TMA"] = False
    if out["G_TMA"]:
        gd = None
        if gated:
            N, size = g.shape[1] // 2, g.element_size()
            if (g.stride(1) == 1 and g.data_ptr() % 16 == 0 and (g.stride(0) * size) % 16 == 0
                    and (N * size) % 16 == 0 and g.shape[0] and N):
                gd = descriptor(g, [g.shape[0], 2, N], [g.stride(0), N, 1], [BP, 1, sub])
        else:
            t = tma_operand(g, BP, sub, store=True)
            gd = t[0] if t and not t[1] else None
        gd = gd if sub * g.element_size() >= 16 else None
        out["G_TMA"] = gd is not None
        dst = gd if gd is not None else g
    return dst, tensors, out


def flat(v: torch.Tensor) -> torch.Tensor:
    """A vector argument ((M,), (M, 1), (1, N), any strides) as the chain's kernels read it: flat and contiguous."""
    return v.reshape(-1) if v.is_contiguous() else v.contiguous().reshape(-1)


def chain_pass(kernel: str, jit: object, sums: object, config: dict[str, int], tiles: dict[str, int], device: int,
               grad: torch.Tensor, pre: torch.Tensor | None, g: torch.Tensor | None, g2: torch.Tensor | None,
               inputs: tuple, strides: tuple, outputs: tuple, bf16: bool) -> None:
    """The chain pass over grad (M x N): G into g (and g2: an fp8 forward's second; g and g2 alike laid out) where
    given, and each argument's
    gradient in `outputs` ((name, kind, tensor or None): "matrix" written in place, "cols" / "rows" summed as f32
    partials (a row a band / a row a column block) that the sums kernel adds in order into the tensor)."""
    *lead, M, N = grad.shape  # batched: (batch, M, N), every batch's rows (the grid's third axis)
    batch = lead[0] if lead else 1
    BM, BN = tiles["BLOCK_M"], tiles["BLOCK_N"]
    cols = -(-N // BN)
    bands, rows_per = row_bands(M, cols * batch, BM, device)
    ptrs: list = []
    out_strides: list = []
    needs: dict[str, bool] = {}
    partials: list = []
    none = (0,) * grad.dim()  # an absent matrix's strides
    for name, kind, dst in outputs:
        needs[f"need_{name}"] = dst is not None
        if dst is None:
            ptrs.append(grad)
            out_strides += list(none) if kind == "matrix" else [0]
        elif kind == "matrix":
            ptrs.append(dst)
            out_strides += list(dst.stride())
        else:
            # batched: a row per band and batch (batch-major), or a column per row and batch (b M + row): the sums
            # kernel adds the partials of every batch into the vector's gradient
            part = torch.empty((batch * bands, N) if kind == "cols" else (cols, batch * M), device=grad.device,
                               dtype=torch.float32)
            ptrs.append(part)
            out_strides.append(part.stride(0))
            partials.append((part if kind == "cols" else part.view(cols * batch, M), dst.view(-1)))
    launch(kernel, jit, config, tiles, (cols, bands, batch) if grad.dim() == 3 else (cols, bands),
           (grad, grad if pre is None else pre, grad if g is None else g, grad if g2 is None else g2, *inputs, *ptrs, M, N,
            rows_per, *grad.stride(), *(pre.stride() if pre is not None else none),
            *(next(x for x in (g, g2) if x is not None).stride() if g is not None or g2 is not None else none), *strides,
            *out_strides),
           bf16, per_matrix=grad.dim() == 3, FORM_G=g is not None, FORM_G2=g2 is not None, **needs)
    for part, dst in partials:  # the partials' sums, in order
        launch(kernel, sums, config, {"BLOCK_N": BN}, (-(-part.shape[1] // BN),), (part, dst, part.shape[0], part.shape[1],
                                                                                  part.stride(0)), False)
