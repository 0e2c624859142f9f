"""Compile once per specialization, then launch the compiled kernel directly.

`JITFunction.run` re-binds and re-specializes every argument on every call (13 us on the H200). The
generated launcher already knows the argument types (the spec fixes dtypes and layouts) and computes
the specialization key itself: integers on `== 1` / `% 16 == 0` exactly as Triton does, pointers are
always 16-byte aligned (the guards enforce it). The first call for a key goes through the JIT (which
also fills Triton's disk cache, shared with `specgen compile`); later calls go straight to the
compiled kernel's launcher. Under TRITON_INTERPRET=1 every call goes through the JIT, which the
interpreter replaces; with launch hooks installed (profilers such as proton) calls go through the JIT
too, so the hooks see every launch.

A repeat call with the same tensors (the serving case) goes one step further. Triton's launcher
expands each TMA kernel's host-side descriptors into encoded CUtensorMaps plus shapes and strides in
Python on every call, and its C launch reads each pointer through `data_ptr()` and
cuPointerGetAttribute; the generated launcher instead keys everything the launch's arguments depend
on (`args_key`), and the launch built for a key (by running Triton's own wrapper once, Expander) is
kept, tensors as addresses, and relaunched by `launch_cached` straight into the C `launch`: a repeat
call builds no descriptor, encodes nothing and expands no argument.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable

import torch
import triton

from specgen.runtime.guards import refuse_interpreter_bf16
from specgen.runtime.triton.descriptors import with_descriptor_cache

_get_stream = torch._C._cuda_getCurrentRawStream if torch.cuda.is_available() else None
_current_device = torch._C._cuda_getDevice if torch.cuda.is_available() else None
_runtime_knobs = triton.knobs.runtime
INTERPRET_NUM_SMS = 3  # a few programs, so the interpreter walks the persistent loop for real


def _hooks_active() -> bool:
    """Whether a launch hook is installed: hooks are HookChains (a list of calls) in recent Triton,
    plain callables or None before. Inlined: it runs on every launch."""
    enter, leave = _runtime_knobs.launch_enter_hook, _runtime_knobs.launch_exit_hook
    return bool(getattr(enter, "calls", enter) or getattr(leave, "calls", leave))


_CALL_36 = ["self", "gridX", "gridY", "gridZ", "stream", "function", "args"]
_CALL_39 = ["self", "gridX", "gridY", "gridZ", "stream", "function", "kernel_metadata", "launch_metadata",
            "launch_enter_hook", "launch_exit_hook", "args"]
MAX_EXPANDED = 256  # expanded launches per launcher; cleared whole when full (a serving loop reuses a handful)


def _echo(*args):
    return args


def _address(x):
    """A tensor as the C launch reads it (its data_ptr; ours are on the current CUDA device, the guards
    checked), anything else as it is. Cached launches hold addresses, never tensors: a cache entry
    must not keep a caller's tensor (or a replaced workspace) alive."""
    return x.data_ptr() if isinstance(x, torch.Tensor) else x


def recording_copy(wrapper) -> tuple[Callable, Callable] | None:
    """(C launch, recorder) for Triton's tensordesc wrapper (`inner`, which closes over the C `launcher`
    and returns its result): the recorder is the same code with `launcher` replaced by a function
    returning its arguments, so it returns exactly what the wrapper would pass to the C launch.
    None for a wrapper of any other shape."""
    code = getattr(wrapper, "__code__", None)
    if code is None or "launcher" not in code.co_freevars or not wrapper.__closure__:
        return None
    cells = list(wrapper.__closure__)
    i = code.co_freevars.index("launcher")
    c_launch = cells[i].cell_contents
    cells[i] = types.CellType(_echo)
    return c_launch, types.FunctionType(code, wrapper.__globals__, wrapper.__name__, wrapper.__defaults__,
                                        tuple(cells))


class Expander:
    """Builds a kernel's launch once and keeps the C launch's arguments after the stream, tensors as
    addresses: a repeat launch calls `c_launch(gx, gy, gz, stream, *rest)`. For TMA kernels it runs
    Triton's own tensordesc wrapper (a recording copy, its encoder caching, descriptors.py), so a
    repeat launch builds and encodes no descriptor and expands no argument; for pointer kernels (whose
    launch is the C function itself) the recorder hands the arguments back as they are.

    `flat`: Triton 3.6 passes the kernel arguments flat after its 13 base arguments (`leading` here
    is the nine after the stream); 3.9 passes them as one sequence after its base arguments."""

    def __init__(self, c_launch: Callable, recorder: Callable, leading: tuple, flat: bool) -> None:
        self.c_launch, self.recorder, self.leading, self.flat = c_launch, recorder, leading, flat

    def __call__(self, gx: int, gy: int, gz: int, stream: int, kernel_args: tuple) -> tuple | None:
        """The C launch's arguments after the stream for these kernel arguments (constexpr slots
        included), or None where the wrapper did not hand them over as expected."""
        n = 4 + len(self.leading)
        if self.flat:
            final = self.recorder(gx, gy, gz, stream, *self.leading, *kernel_args)
            if type(final) is not tuple or len(final) < n or final[4:n] != self.leading:
                return None
            return (*self.leading, *map(_address, final[n:]))
        final = self.recorder(gx, gy, gz, stream, *self.leading, kernel_args)
        if type(final) is not tuple or len(final) != n + 1 or final[4:n] != self.leading:
            return None
        return (*self.leading, tuple(map(_address, final[n])))


def _recorder(run_launch, launch) -> tuple[Callable, Callable] | None:
    """(C launch, recorder) for a launcher's `launch` attribute: the C function itself (a kernel
    without descriptors) with an echo, or Triton's tensordesc wrapper with its recording copy (of
    `launch`, the copy whose encoder caches). None for a Python launch of any other shape."""
    if getattr(run_launch, "__code__", None) is None:
        return run_launch, _echo
    if launch is run_launch:  # with_descriptor_cache did not recognise it
        return None
    return recording_copy(launch)


def direct_launch(compiled) -> tuple[Callable, tuple, Expander | None]:
    """(launch, leading arguments, expander) for a compiled kernel: launch(gx, gy, gz, stream, *leading,
    *args); the expander (launchers of a Triton shape we know, else None) builds a launch that calls
    the C function with everything expanded, skipping Triton's Python wrapper altogether.

    Triton 3.6's CudaLauncher.__call__(gridX, gridY, gridZ, stream, function, *args) only adds scratch
    buffers and two flags before calling its C `launch`; for kernels that need no scratch we call that
    C function with the same arguments (about 1 us less per call on the H200). Triton 3.9's
    __call__(gridX, gridY, gridZ, stream, function, kernel_metadata, launch_metadata, enter, exit,
    *args) calls `launch(..., global_scratch, profile_scratch, arg_annotations, kernel_signature,
    args)`. Any other launcher shape goes through `CompiledKernel.run`, the call JITFunction.run
    itself makes, and gets no expander.
    """
    run = compiled.run
    params = list(inspect.signature(type(run).__call__).parameters)
    no_scratch = getattr(run, "global_scratch_size", 1) == 0 and getattr(run, "profile_scratch_size", 1) == 0
    if params == _CALL_36 and no_scratch:
        # TMA kernels: the launch encodes each descriptor; ours caches the encodings (descriptors.py)
        leading = (compiled.function, run.launch_cooperative_grid, run.launch_pdl,
                   None, None, compiled.packed_metadata, None, None, None)
        launch = with_descriptor_cache(run.launch)
        rec = _recorder(run.launch, launch)
        expander = None
        if rec is not None and (rec[1] is _echo or launch.__globals__.get("_BASE_ARGS_FORMAT_LEN") == 4 + len(leading)):
            expander = Expander(rec[0], rec[1], leading, flat=True)
        return launch, leading, expander
    if params == _CALL_39 and no_scratch and not getattr(run, "gsan_enabled", True):
        rec = _recorder(run.launch, with_descriptor_cache(run.launch))
        expander = None
        if rec is not None and hasattr(run, "arg_annotations") and hasattr(run, "kernel_signature"):
            expander = Expander(rec[0], rec[1], (compiled.function, run.launch_cooperative_grid, run.launch_pdl,
                                                 compiled.packed_metadata, None, None, None, None, None,
                                                 run.arg_annotations, run.kernel_signature), flat=False)
        return run, (compiled.function, compiled.packed_metadata, None, None, None), expander
    return run, (compiled.function, compiled.packed_metadata, None, None, None), None


class TritonLauncher:
    def __init__(self, kernel: triton.JITFunction, name: str, configs: dict[int, dict[str, int]],
                 variants: tuple[dict[int, dict[str, int]], ...] = ()) -> None:
        self.kernel = kernel
        self.name = name
        # A or B is bf16 (the module sets it): refused under the CPU interpreter (guards.refuse_interpreter_bf16)
        self.bf16_dot = False
        self.configs = configs
        self.variants = variants  # size-selected variants' launch configs, per compute capability
        # (device, key) -> (launch, leading args, constexpr slots, SM count, expander or None)
        self._compiled: dict[tuple[int, tuple], tuple[Callable, tuple, tuple, int, Expander | None]] = {}
        # (stream, args key) -> (C launch, all its arguments: grid, stream, then the kernel's):
        # launches built once (launch_cached); the args key starts with the device
        self._expanded: dict[tuple[int, tuple], tuple[Callable, tuple]] = {}
        self._devices: dict[int, tuple[dict[str, int], int]] = {}
        # (device, stream, atomic) -> (f32 partials, int32 arrival counters), for split-K configs
        self._workspaces: dict[tuple[int, int, bool], tuple[torch.Tensor, torch.Tensor]] = {}

    def device_config(self, device: int) -> tuple[dict[str, int], int]:
        """(launch config, SM count) for a device, by its compute capability."""
        if device not in self._devices:
            if device < 0:
                self._devices[device] = (next(iter(self.configs.values())), INTERPRET_NUM_SMS)
            else:
                major, minor = torch.cuda.get_device_capability(device)
                cc = major * 10 + minor
                if cc not in self.configs:
                    have = ", ".join(f"sm_{c}" for c in self.configs)
                    raise RuntimeError(f"{self.name}: rendered for {have} (the spec's targets); cuda:{device} is sm_{cc}. "
                                       f"Add its target to the spec and re-render.")
                sms = torch.cuda.get_device_properties(device).multi_processor_count
                self._devices[device] = (self.configs[cc], sms)
        return self._devices[device]

    def fast_path_ready(self, device: int, key: tuple) -> bool:
        """Whether the next call with this key launches the cached compiled kernel directly."""
        return (device, key) in self._compiled

    def num_sms(self, device: int) -> int:
        return self.device_config(device)[1]

    def workspace(self, device: int, tiles: int, split_k: int, tile_elems: int,
                  atomic: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """The split-K workspace for a launch of `tiles` output tiles: f32 partials (split_k tiles of
        `tile_elems` per output tile, or one with atomics) and one int32 arrival counter per tile.

        Cached per (device, stream, reduction): launches on one stream run in order, so they can share
        it; other streams get their own. Counters (and atomic partials) start at zero and every launch
        leaves them at zero (the last program of each tile resets its own). A launch that needs more
        gets new zeroed buffers (at least twice the old, so a growing workload reallocates rarely);
        the old ones go back to the caching allocator in stream order, and every cached launch (which
        holds the old addresses) is dropped, so launch_cached may skip this call. A config without split-K
        (split_k == 1) gets the cached buffers as they are: its kernel never touches them."""
        stream = _get_stream(device) if device >= 0 else 0
        key = (device, stream, atomic)
        entry = self._workspaces.get(key)
        if split_k == 1:
            tiles = 0
        floats = tiles * tile_elems * (1 if atomic else split_k)
        if entry is None or entry[0].numel() < floats or entry[1].numel() < tiles:
            old_floats, old_tiles = (entry[0].numel(), entry[1].numel()) if entry is not None else (0, 0)
            where = torch.device("cuda", device) if device >= 0 else torch.device("cpu")
            entry = (torch.zeros(max(floats, 2 * old_floats, 1), dtype=torch.float32, device=where),
                     torch.zeros(max(tiles, 2 * old_tiles, 1), dtype=torch.int32, device=where))
            self._workspaces[key] = entry
            # Cached launches carry the old buffers' addresses: drop them all (rare: growth doubles).
            self._expanded.clear()
        return entry

    def launch_cached(self, args_key: tuple, device: int) -> bool:
        """Launch the kernel built earlier for `args_key` on the current stream, if there is one;
        False (nothing launched) otherwise. `args_key` is the generated launcher's tuple of everything
        the launch's arguments depend on: the device, each operand's address, the shapes and strides its
        descriptors and pointers use, the integers and the scalars' bits. The compiled kernel's key (the
        variant, chosen by M, N and K, and the specializations of those integers), the grid and the
        workspace's layout are functions of them, so the generated launcher builds none of those on a
        hit. Dtypes are the spec's (the guards admit no other), and the workspace buffers are this
        launcher's own per device and stream (replacing them drops every cached launch), so equal keys
        on one stream mean equal arguments: a changed pointer, shape, stride, variant or device is
        another key, never a stale hit."""
        if device < 0 or _current_device() != device or _hooks_active():
            return False
        hit = self._expanded.get((_get_stream(device), args_key))
        if hit is None:
            return False
        hit[0](*hit[1])  # the C launch, its whole argument tuple (grid and stream first)
        return True

    def __call__(self, device: int, key: tuple, grid: tuple[int, int, int] | int, args: tuple,
                 constexprs: dict[str, object], persistent: bool = False, variant: int | None = None,
                 args_key: tuple | None = None) -> None:
        """Launch over `grid` (for persistent kernels: the tile count, capped at the SM count). `key`
        includes the variant, whose constexprs and launch config compile a kernel of their own. With an
        `args_key` the direct launch is built once and kept for launch_cached."""
        entry = self._compiled.get((device, key))
        if entry is not None and _current_device() == device and not _hooks_active():
            launch, leading, slots, num_sms, expander = entry
            if persistent:
                grid = (min(grid, num_sms), 1, 1)
            stream = _get_stream(device)
            if args_key is not None and expander is not None:
                rest = expander(grid[0], grid[1], grid[2], stream, args + slots)
                if rest is not None:
                    if len(self._expanded) >= MAX_EXPANDED:
                        self._expanded.clear()
                    launch_args = (grid[0], grid[1], grid[2], stream, *rest)
                    self._expanded[(stream, args_key)] = (expander.c_launch, launch_args)
                    expander.c_launch(*launch_args)
                    return
            launch(grid[0], grid[1], grid[2], stream, *leading, *args, *slots)
            return
        self._launch_jit(device, key, grid, args, constexprs, persistent, variant)

    def _launch_jit(self, device: int, key: tuple, grid: tuple[int, int, int] | int, args: tuple,
                    constexprs: dict[str, object], persistent: bool, variant: int | None = None) -> None:
        config, num_sms = self.device_config(device)
        if variant is not None:  # the variant's config for the same compute capability
            config = self.variants[variant][next(cc for cc, c in self.configs.items() if c is config)]
        if persistent:
            grid = (min(grid, num_sms), 1, 1)
        if device < 0:
            if self.bf16_dot:
                refuse_interpreter_bf16(self.name)
            self.kernel[grid](*args, **constexprs, **config)
            return
        with torch.cuda.device(device):
            compiled = self.kernel[grid](*args, **constexprs, **config)
            launch, leading, expander = direct_launch(compiled)
        # Constexpr parameters keep their slots in a direct launch (the launcher skips them).
        slots = (None,) * (len(self.kernel.arg_names) - len(args))
        self._compiled[(device, key)] = (launch, leading, slots, num_sms, expander)
