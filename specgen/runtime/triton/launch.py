"""Compile once per specialization, then launch the compiled kernel directly.

`JITFunction.run` re-binds and re-specializes every argument on every call (13 us on the H200). The
generated launcher already knows the argument types (the spec fixes dtypes and layouts) and computes
the specialization key itself: integers on `== 1` / `% 16 == 0` exactly as Triton does, pointers are
always 16-byte aligned (the guards enforce it). The first call for a key goes through the JIT (which
also fills Triton's disk cache, shared with `specgen compile`); later calls go straight to the
compiled kernel's launcher. Under TRITON_INTERPRET=1 every call goes through the JIT, which the
interpreter replaces; with launch hooks installed (profilers such as proton) calls go through the JIT
too, so the hooks see every launch.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch
import triton

from specgen.runtime.triton.descriptors import with_descriptor_cache

_get_stream = torch._C._cuda_getCurrentRawStream if torch.cuda.is_available() else None
_current_device = torch._C._cuda_getDevice if torch.cuda.is_available() else None
_runtime_knobs = triton.knobs.runtime
INTERPRET_NUM_SMS = 3  # a few programs, so the interpreter walks the persistent loop for real


def _active(hook: object) -> bool:
    """Launch hooks are HookChains (a list of calls) in recent Triton, plain callables or None before."""
    return bool(getattr(hook, "calls", hook))


def _hooks_active() -> bool:
    return _active(_runtime_knobs.launch_enter_hook) or _active(_runtime_knobs.launch_exit_hook)


def direct_launch(compiled) -> tuple[Callable, tuple]:
    """(launch, leading arguments) for a compiled kernel: launch(gx, gy, gz, stream, *leading, *args).

    Triton 3.6's CudaLauncher.__call__(gridX, gridY, gridZ, stream, function, *args) only adds scratch
    buffers and two flags before calling its C `launch`; for kernels that need no scratch we call that
    C function with the same arguments (about 1 us less per call on the H200). Any other launcher
    shape goes through `CompiledKernel.run`, the call JITFunction.run itself makes.
    """
    run = compiled.run
    params = list(inspect.signature(type(run).__call__).parameters)
    if (params == ["self", "gridX", "gridY", "gridZ", "stream", "function", "args"]
            and getattr(run, "global_scratch_size", 1) == 0 and getattr(run, "profile_scratch_size", 1) == 0):
        # TMA kernels: the launch encodes each descriptor; ours caches the encodings (descriptors.py)
        return with_descriptor_cache(run.launch), (compiled.function, run.launch_cooperative_grid, run.launch_pdl,
                                                   None, None, compiled.packed_metadata, None, None, None)
    return run, (compiled.function, compiled.packed_metadata, None, None, None)


class TritonLauncher:
    def __init__(self, kernel: triton.JITFunction, name: str, configs: dict[int, dict[str, int]],
                 variants: tuple[dict[int, dict[str, int]], ...] = ()) -> None:
        self.kernel = kernel
        self.name = name
        self.configs = configs
        self.variants = variants  # size-selected variants' launch configs, per compute capability
        # (device, key) -> (launch, leading args, constexpr slots, SM count)
        self._compiled: dict[tuple[int, tuple], tuple[Callable, tuple, tuple, int]] = {}
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
        the old ones go back to the caching allocator in stream order. A config without split-K
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
        return entry

    def __call__(self, device: int, key: tuple, grid: tuple[int, int, int] | int, args: tuple,
                 constexprs: dict[str, object], persistent: bool = False, variant: int | None = None) -> None:
        """Launch over `grid` (for persistent kernels: the tile count, capped at the SM count). `key`
        includes the variant, whose constexprs and launch config compile a kernel of their own."""
        entry = self._compiled.get((device, key))
        if entry is not None and _current_device() == device and not _hooks_active():
            launch, leading, slots, num_sms = entry
            if persistent:
                grid = (min(grid, num_sms), 1, 1)
            launch(grid[0], grid[1], grid[2], _get_stream(device), *leading, *args, *slots)
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
            self.kernel[grid](*args, **constexprs, **config)
            return
        with torch.cuda.device(device):
            compiled = self.kernel[grid](*args, **constexprs, **config)
            launch, leading = direct_launch(compiled)
        # Constexpr parameters keep their slots in a direct launch (the launcher skips them).
        slots = (None,) * (len(self.kernel.arg_names) - len(args))
        self._compiled[(device, key)] = (launch, leading, slots, num_sms)
