"""Run-time helper of generated CuTe DSL modules: compile once, cache on disk, call directly.

`CuteLauncher` owns one module's compiled kernels, one per config (the default, `variant` None, and
each size-selected variant by index). The first call of a config (per process) looks for it in
the disk cache (`$SPECGEN_CUTE_CACHE`, default `~/.cache/specgen/cute`), keyed by the module's
source hash, the arch and the cutlass DSL version; on a miss it runs `cute.compile` over the module's
fake tensors (dynamic M, N, K, batch and leading strides: one compile serves every problem size) and
exports the result there (`export_to_c`, an object file `load_module` reads back). With TVM-FFI
(`apache-tvm-ffi` installed) the compiled function takes torch tensors directly and reads torch's
current stream; without it, each call wraps its tensors with `from_dlpack` (slower host path, and
not exercised by the CPU suite: install TVM-FFI).

Without TVM-FFI there is no disk cache: 4.8.1's plain C export cannot describe this signature
("Unsupported argument for c function"), so each process compiles once in memory.

`specgen compile` (kinds/gemm/designs/cute_sm90/compile.py) fills the same cache on a machine without a GPU.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

TVM_FFI = importlib.util.find_spec("tvm_ffi") is not None


def cache_dir() -> Path:
    return Path(os.environ.get("SPECGEN_CUTE_CACHE", Path.home() / ".cache" / "specgen" / "cute"))


def cutlass_version() -> str:
    from importlib.metadata import version

    return version("nvidia-cutlass-dsl")


def compile_options(arch: str, tvm_ffi: bool, extra: str = "") -> str:
    opts = f"--gpu-arch {arch}"
    if tvm_ffi:
        opts += " --enable-tvm-ffi"
    return f"{opts} {extra}".strip()


class CuteLauncher:
    """One module's kernels: `entry(device, variant, cfg)` gives the compiled function of that config
    (None: the default; else an index into the module's VARIANT_CONFIGS), which takes the host
    function's arguments (torch tensors and Python numbers; the stream is torch's current one), and
    the launch's cluster count; `ready` keeps both per device and config."""

    def __init__(self, name: str, source_file: str, arch: str, host_fn: Callable,
                 fake_args: Callable[[int | None], tuple], variants: int = 0,
                 configs: tuple[str, ...] | None = None):
        self.name, self.arch = name, arch
        self.host_fn, self.fake_args = host_fn, fake_args
        # every config, default first; or named ones (a backward's roles: the host function's Constexpr `variant`)
        self.configs: tuple[int | str | None, ...] = configs if configs is not None else (None, *range(variants))
        self._fns: dict[int | None, Any] = {}
        self._lock = threading.Lock()
        # (device, config) -> (the compiled function, the launch's cluster count): filled by `entry` on a
        # config's first call on a device and read by the generated launcher directly, so a repeat call is
        # one dict lookup before the launch. The function takes the host function's arguments; the config
        # index (its Constexpr parameter) is baked into it, not passed.
        self.ready: dict[tuple[int, int | None], tuple[Callable[..., Any], int]] = {}
        self.source = Path(source_file).read_bytes()

    def key(self, variant: int | None = None) -> str:
        """Module bytes (spec and template both land in them), config, arch, DSL version, call convention."""
        h = hashlib.sha256(self.source)
        h.update(f"|{variant}|{self.arch}|{cutlass_version()}|tvm_ffi={TVM_FFI}".encode())
        return f"{self.name}-{self.arch}-{self.tag(variant)}-{h.hexdigest()[:16]}"

    @staticmethod
    def tag(variant: int | None) -> str:
        return "default" if variant is None else variant if isinstance(variant, str) else f"variant{variant}"

    def symbol(self, variant: int | None = None) -> str:
        return f"specgen_{self.name}_{self.tag(variant)}"

    def cache_path(self, variant: int | None = None) -> Path:
        return cache_dir() / f"{self.key(variant)}.o"

    def compile(self, variant: int | None = None, options: str = "") -> Any:
        """cute.compile of one config over the fake tensors (no GPU needed); returns the JIT-compiled function."""
        import cutlass.cute as cute

        with dsl_arch(self.arch):
            return cute.compile(self.host_fn, *self.fake_args(variant),
                                options=compile_options(self.arch, TVM_FFI, options))

    def export(self, compiled: Any, variant: int | None = None) -> Path:
        """Write one config's compiled kernel into the disk cache (atomically: a racing process loses nothing)."""
        path = self.cache_path(variant)
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=path.parent, prefix=f".{path.stem}.") as tmp:
            obj = Path(tmp) / "kernel.o"
            compiled.export_to_c(str(obj), function_name=self.symbol(variant))
            os.replace(obj, path)
        return path

    def load(self, variant: int | None = None) -> Any:
        """One config's compiled function: from this process, else the disk cache, else compiled and
        cached. A cache that cannot be read or written costs a compile per process, never a failed call."""
        fn = self._fns.get(variant)
        if fn is not None:
            return fn
        with self._lock:
            if variant not in self._fns:
                path = self.cache_path(variant)
                fn = self._load(path, variant) if TVM_FFI and path.is_file() else None
                if fn is None:
                    compiled = self.compile(variant)
                    try:  # the DSL exports only TVM-FFI functions of this signature (4.8.1)
                        fn = self._load(self.export(compiled, variant), variant) if TVM_FFI else None
                    except OSError as e:
                        warnings.warn(f"{self.name}: CuTe disk cache not written ({e}); compiled in memory only",
                                      RuntimeWarning, stacklevel=3)
                    fn = fn or compiled
                self._fns[variant] = fn
        return self._fns[variant]

    def _load(self, path: Path, variant: int | None) -> Any:
        from cutlass.cute.runtime import load_module

        try:
            return getattr(load_module(str(path), enable_tvm_ffi=TVM_FFI), self.symbol(variant))
        except Exception as e:  # a truncated or foreign file: recompile rather than fail the call
            warnings.warn(f"{self.name}: ignoring unreadable CuTe cache entry {path} ({type(e).__name__}: {e})",
                          RuntimeWarning, stacklevel=3)
            return None

    def entry(self, device: int, variant: int | None, cfg: Any) -> tuple[Callable[..., Any], int]:
        """A config's compiled function (loaded or compiled on first use) and its launch's cluster count on
        `device` (`grid_clusters`), kept in `ready` for the calls after this one."""
        hit = self.ready.get((device, variant))
        if hit is None:
            import torch

            fn = self._fns.get(variant) or self.load(variant)
            if not TVM_FFI:  # tensors through DLPack and torch's current stream, per call
                fn = _dlpack_call(fn)
            sms = torch.cuda.get_device_properties(device).multi_processor_count
            hit = self.ready[(device, variant)] = (fn, grid_clusters(cfg, sms))
        return hit


def grid_clusters(cfg: Any, sms: int) -> int:
    """How many clusters a launch of `cfg` (a module's Config) holds along grid z: a persistent config one per
    `cluster_size` SMs, another one per tile up to `launch_clusters` (past it its clusters walk the tiles)."""
    return max(1, sms // cfg.cluster_size) if cfg.persistent else cfg.launch_clusters


@contextmanager
def dsl_arch(arch: str) -> Iterator[None]:
    """The DSL checks instructions against its own arch setting (CUTE_DSL_ARCH as read when cutlass
    was imported, else the GPU's, else sm_100a): this module's arch while tracing, then the default."""
    from cutlass.cutlass_dsl import CuTeDSL

    env = CuTeDSL._get_dsl().envar
    env.arch = arch
    try:
        yield
    finally:
        del env.arch  # back to the construction-time setting (or lazy detection)


def _dlpack_call(fn: Callable[..., Any]) -> Callable[..., None]:
    """`fn` called the way a build without TVM-FFI takes its arguments (`_to_cute`)."""

    def call(*args: Any) -> None:
        fn(*_to_cute(args))

    return call


def _to_cute(args: tuple) -> list[Any]:
    """Without TVM-FFI: tensors through DLPack, then torch's current stream."""
    import torch
    from cutlass.cute.runtime import from_dlpack

    # dynamic shapes and strides with the stride-1 dim static, as the fake tensors were compiled; detached,
    # since DLPack refuses a tensor that requires grad (a weight under torch.no_grad(): the call is legal)
    out: list[Any] = [from_dlpack(a.detach(), assumed_align=16).mark_layout_dynamic() if isinstance(a, torch.Tensor)
                      else a for a in args]
    from cuda.bindings.driver import CUstream

    out.append(CUstream(torch.cuda.current_stream().cuda_stream))
    return out


def zero_operand(t: Any, lead: tuple[int, ...], rows: int, k_major: bool, torch_rows_first: bool) -> Any:
    """A zero operand with K = 16 standing in for an empty K (TMA cannot describe a zero extent):
    `rows` is its M (for A) or N (for B); `torch_rows_first` says the torch shape is (.., rows, K) (A)
    rather than (.., K, rows) (B); strides keep the spec's major mode and 16-byte alignment."""
    k = 16
    padded = -(-rows // 16) * 16
    if k_major:
        z = t.new_zeros((*lead, rows, k))  # K contiguous
        return z if torch_rows_first else z.transpose(-1, -2)
    z = t.new_zeros((*lead, k, padded))[..., :rows]  # rows contiguous, leading stride padded to 16
    return z.transpose(-1, -2) if torch_rows_first else z
