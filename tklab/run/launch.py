"""Launch a compiled kernel on CuPy arrays, PyTorch CUDA tensors and Python/numpy scalars.

Arguments are checked *before* the launch, against the parameter sizes the driver reports and the
types the source declares: a wrong count, a host array, a float64 array for a ``float*``, or a number
that does not fit its ``int`` are Python errors naming the parameter, not a silent corruption or a
crashed notebook. Dynamic shared memory above 48 KB is opted into automatically.

Public API: ``launch(kernel, grid, block, args, *, shared_mem=0, stream=None, sync=False)``,
``prepare(...)`` → ``Prepared`` (pack once, launch many times: for timing short kernels),
``LaunchError``, ``device_pointer(obj)``.
"""

from __future__ import annotations

import ctypes
import functools
import os
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import gpu
from .signature import POINTEES, SCALARS, Param


class LaunchError(RuntimeError):
    """A kernel could not be launched, or failed while running; the message names the kernel."""


_DEFAULT_SMEM = 48 * 1024


def _dims(value: Any, what: str) -> tuple[int, int, int]:
    dims = (value,) if isinstance(value, (int, np.integer, float)) else tuple(value)
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, (int, np.integer)) and d >= 1 for d in dims):
        raise ValueError(f"{what} must be a positive int or a tuple of 1-3 positive ints, got {value!r}")
    return tuple(int(d) for d in dims) + (1,) * (3 - len(dims))  # type: ignore[return-value]


def check_launch(name: str, grid: Any, block: Any, args: Any) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid, block) as 3-tuples, or the learner-facing error for a launch no GPU (or emulator) could start."""
    g, b = _dims(grid, "grid"), _dims(block, "block")
    if b[0] * b[1] * b[2] > 1024:
        raise ValueError(f"{name}: a block has at most 1024 threads, got {b} = {b[0] * b[1] * b[2]}")
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"{name}: pass the kernel's arguments as a tuple: k(grid, block, (a, b, n))")
    return g, b


def check_count(name: str, params: Sequence[Param] | None, expected: int, got: int) -> None:
    """A TypeError naming the declaration when a launch passes the wrong number of arguments."""
    if got != expected:
        decl = ", ".join(f"{p.ctype} {p.name}" for p in params) if params else f"{expected} parameters"
        raise TypeError(f"{name}({decl}) takes {expected} arguments, got {got}")


def device_pointer(obj: Any) -> tuple[int, str | None] | None:
    """(address, dtype name) of a GPU array-like, or None if ``obj`` is not one.

    Knows ``data_ptr()`` (PyTorch CUDA tensors: asked first, since torch builds its ``__cuda_array_interface__``
    in Python on every access, a cost every launch argument paid) and ``__cuda_array_interface__`` (CuPy, Numba).
    """
    if getattr(obj, "is_cuda", False) and hasattr(obj, "data_ptr"):
        return int(obj.data_ptr()), str(obj.dtype).replace("torch.", "")
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        dtype = _typestr_name(cai["typestr"])
        if hasattr(obj, "dtype") and not isinstance(obj.dtype, np.dtype):  # a library's own dtype (bf16)
            dtype = str(obj.dtype).replace("torch.", "")
        return int(cai["data"][0]), dtype
    return None


@functools.lru_cache(maxsize=64)
def _typestr_name(typestr: str) -> str | None:
    """NumPy's name for an array-interface typestr ("<f4" -> "float32"), or None; cached: NumPy builds the name
    anew on every ``dtype.name``."""
    try:
        return np.dtype(typestr).name
    except TypeError:
        return None


def _is_host_array(obj: Any) -> bool:
    return isinstance(obj, np.ndarray) or (hasattr(obj, "data_ptr") and not getattr(obj, "is_cuda", True))


def _describe(i: int, param: Param | None) -> str:
    if param is None:
        return f"argument {i}"
    return f"argument {i} ('{param.ctype} {param.name}')"


def _pack(kernel_name: str, i: int, value: Any, param: Param | None, size: int | None) -> bytes:
    """The bytes the kernel receives for one parameter."""

    def where() -> str:  # the parameter, named in an error (built only then: a launch packs every argument)
        return f"{kernel_name}: {_describe(i, param)}"

    if hasattr(value, "as_kernel_arg"):
        raw = bytes(value.as_kernel_arg())
    elif isinstance(value, (bytes, bytearray, np.void)):
        raw = bytes(value)
    elif (ptr := device_pointer(value)) is not None:
        if param is not None and not param.pointer:
            raise TypeError(f"{where()} is declared as a value, but a GPU array was passed")
        addr, dtype = ptr
        allowed = POINTEES.get(param.base) if param is not None else None
        if allowed and dtype and dtype not in allowed:
            raise TypeError(f"{where()} expects {param.base} data ({'/'.join(allowed)}), "  # type: ignore[union-attr]
                            f"but the array holds {dtype}; convert it first (e.g. .astype(...))")
        raw = np.uint64(addr).tobytes()
    elif _is_host_array(value):
        raise TypeError(f"{where()} is a host (CPU) array; kernels need GPU memory: use cupy.asarray(x) "
                        "or tensor.cuda()")
    elif isinstance(value, (bool, int, float, np.generic)):
        if param is not None and param.pointer:
            if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
                raw = np.uint64(value).tobytes()  # a raw device address
            else:
                raise TypeError(f"{where()} is a pointer, but {type(value).__name__} {value!r} was passed")
        else:
            raw = _pack_scalar(where, value, param, size)
    else:
        raise TypeError(f"{where()}: cannot pass a {type(value).__name__} to a kernel (pass a CuPy array, a "
                        "torch CUDA tensor, a number, or an object with as_kernel_arg())")
    if size is not None and len(raw) != size:
        raise TypeError(f"{where()} takes {size} bytes, but the value packs to {len(raw)} bytes")
    return raw


@functools.cache
def _int_bounds(dtype: np.dtype) -> tuple[int, int]:
    """(min, max) of an integer dtype (np.iinfo builds an object per call)."""
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _pack_scalar(where: Callable[[], str], value: Any, param: Param | None, size: int | None) -> bytes:
    if param is not None and param.ctype in SCALARS:
        dtype = SCALARS[param.ctype]
    elif isinstance(value, np.generic):
        dtype = value.dtype
    elif isinstance(value, bool):
        dtype = np.dtype(np.bool_)
    elif isinstance(value, int):
        dtype = np.dtype(np.int64 if size == 8 else np.int32)
    else:
        dtype = np.dtype(np.float64 if size == 8 else np.float32)
    if dtype.kind in "iub":
        if isinstance(value, (float, np.floating)) and not float(value).is_integer():
            raise TypeError(f"{where()} is an integer, but {value!r} was passed")
        bounds = _int_bounds(dtype) if dtype.kind != "b" else None
        if bounds is not None and not bounds[0] <= int(value) <= bounds[1]:
            raise OverflowError(f"{where()}: {value} does not fit in {dtype.name}")
        return np.array(int(value), dtype=dtype).tobytes()
    return np.array(value, dtype=dtype).tobytes()


class _Loaded:
    """A module loaded into the current context, and its functions."""

    def __init__(self, cubin: bytes):
        from cuda.bindings import driver

        gpu.ensure_current()
        self.handle = gpu.check(driver.cuModuleLoadData(cubin), "loading the module (cuModuleLoadData)")
        self.functions: dict[str, Any] = {}
        self.param_sizes: dict[str, list[int] | None] = {}
        self.smem_limit: dict[str, int] = {}

    def function(self, name: str) -> Any:
        from cuda.bindings import driver

        if name not in self.functions:
            self.functions[name] = gpu.check(driver.cuModuleGetFunction(self.handle, name.encode()),
                                             f"finding kernel {name}")
            self.param_sizes[name] = _param_sizes(self.functions[name])
        return self.functions[name]


#: Each compiled module's driver handle, loaded on its first launch; launch's own state, kept beside the
#: Module (weakly: a Module no one holds is freed with its entry) rather than written onto it.
_LOADED: weakref.WeakKeyDictionary[Any, _Loaded] = weakref.WeakKeyDictionary()


def _loaded(module: Any) -> _Loaded:
    """The module loaded into the current context (loaded now if this is its first launch)."""
    if module not in _LOADED:
        _LOADED[module] = _Loaded(module.cubin)
    return _LOADED[module]


def _param_sizes(func: Any) -> list[int] | None:
    from cuda.bindings import driver

    if not hasattr(driver, "cuFuncGetParamInfo"):
        return None
    sizes = []
    for i in range(4096):
        err, _offset, size = driver.cuFuncGetParamInfo(func, i)
        if err != driver.CUresult.CUDA_SUCCESS:
            break
        sizes.append(int(size))
    return sizes


def _stream_handle(stream: Any) -> int:
    if stream is None:
        return 0
    for attr in ("ptr", "cuda_stream", "handle"):
        if hasattr(stream, attr):
            return int(getattr(stream, attr))
    return int(stream)


class Prepared:
    """A launch with its arguments packed once: calling it only calls ``cuLaunchKernel``.

    Use it where host overhead matters (timing a kernel that runs for a fraction of a millisecond): the
    checks and packing of ``launch()`` cost tens of microseconds per call, a prepared launch a few.
    The arrays passed stay referenced here, so they cannot be freed while the launch can still run.
    """

    def __init__(self, name: str, func: Any, grid: tuple[int, int, int], block: tuple[int, int, int],
                 shared_mem: int, stream: int, packed: list[bytes], keep_alive: Sequence[Any], kernel: Any = None):
        self.name, self.func, self.grid, self.block = name, func, grid, block
        self.shared_mem, self.stream, self._keep_alive = int(shared_mem), stream, tuple(keep_alive)
        # What re-creates this launch in another process (tklab.profile): the kernel, the arguments as given
        # and as packed.
        self.kernel, self.args, self.packed = kernel, tuple(keep_alive), tuple(packed)
        # Each argument lives in its own 16-byte-aligned buffer; kernelParams points at them.
        self._buffers = [ctypes.create_string_buffer(raw, max(len(raw), 16)) for raw in packed]
        self._pointers = (ctypes.c_void_p * max(len(self._buffers), 1))(*map(ctypes.addressof, self._buffers))
        self._params = ctypes.addressof(self._pointers) if self._buffers else 0

    def detached(self) -> Prepared:
        """The same launch, same bytes, holding none of the arrays: for a caller that keeps its arrays alive for
        each call itself (``launch_memo``); calling it after they are freed launches on freed memory."""
        return Prepared(self.name, self.func, self.grid, self.block, self.shared_mem, self.stream, list(self.packed),
                        (), self.kernel)

    def __call__(self, sync: bool = False) -> None:
        from cuda.bindings import driver

        err, = driver.cuLaunchKernel(self.func, *self.grid, *self.block, self.shared_mem, self.stream,
                                     self._params, 0)
        if err != driver.CUresult.CUDA_SUCCESS:
            try:
                gpu.check((err,), "launch")
            except gpu.CudaError as e:
                raise LaunchError(f"{self.name} could not be launched with grid={self.grid}, block={self.block}, "
                                  f"shared_mem={self.shared_mem}: {e}") from None
        if sync or os.environ.get("TKLAB_SYNC", "") in ("1", "true", "yes"):
            try:
                gpu.synchronize()
            except gpu.CudaError as e:
                raise LaunchError(f"{self.name} failed while running: {e}. After a fault like an illegal "
                                  "address the GPU context is unusable: restart the Python kernel.") from None


def prepare(kernel: Any, grid: Any, block: Any, args: Sequence[Any] = (), *, shared_mem: int = 0,
            stream: Any = None) -> Prepared:
    """Check and pack a launch of ``kernel`` (a ``tklab.Kernel``) without running it."""
    from cuda.bindings import driver

    g, b = check_launch(kernel.display_name, grid, block, args)
    loaded = _loaded(kernel.module)
    gpu.ensure_current()
    func = loaded.function(kernel.name)
    sizes = loaded.param_sizes[kernel.name]
    params = kernel.params
    expected = len(sizes) if sizes is not None else (len(params) if params is not None else None)
    if expected is not None:
        check_count(kernel.display_name, params, expected, len(args))
    if params is not None and sizes is not None and len(params) != len(sizes):
        params = None  # the declaration we found is not the one compiled (overloads, macros): trust sizes
    packed = [_pack(kernel.display_name, i, a, params[i] if params else None, sizes[i] if sizes else None)
              for i, a in enumerate(args)]
    if shared_mem > _DEFAULT_SMEM and loaded.smem_limit.get(kernel.name, _DEFAULT_SMEM) < shared_mem:
        limit = gpu.properties().max_shared_per_block_optin
        static = _static_shared(func, kernel)
        if shared_mem + static > limit:
            raise LaunchError(f"{kernel.display_name}: {shared_mem} B dynamic + {static} B static shared memory "
                              f"exceeds this GPU's {limit} B per block")
        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        gpu.check(driver.cuFuncSetAttribute(func, attr, shared_mem), "raising the dynamic shared-memory limit")
        loaded.smem_limit[kernel.name] = shared_mem
    return Prepared(kernel.display_name, func, g, b, shared_mem, _stream_handle(stream), packed, args, kernel)


def _static_shared(func: Any, kernel: Any) -> int:
    """A loaded kernel's static shared memory as the driver counts it against the per-block limit (its
    CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: the kernel's own, without the kilobyte the system reserves in every block,
    which a cubin for sm_90 lays out; 0 for chapter 11's backward on the H200, whose 232448 B dynamic the driver
    takes); the compiler's figure where the driver does not say."""
    from cuda.bindings import driver

    attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES
    err, value = driver.cuFuncGetAttribute(attr, func)
    return int(value) if err == driver.CUresult.CUDA_SUCCESS else int(kernel.shared_bytes)


def launch(kernel: Any, grid: Any, block: Any, args: Sequence[Any] = (), *, shared_mem: int = 0,
           stream: Any = None, sync: bool = False) -> None:
    """Launch ``kernel`` (a ``tklab.Kernel``); see the module docstring."""
    prepare(kernel, grid, block, args, shared_mem=shared_mem, stream=stream)(sync=sync)
