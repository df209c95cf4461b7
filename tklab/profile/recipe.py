"""A launch written to a folder, so that another process (the one Nsight Compute profiles) can re-create it.

Why a recipe and not the launch itself: ncu can only profile a process it starts, and GPU memory does not
travel between processes. So the parent writes down everything the launch is made of:

- the kernel: its cubin and mangled name (``module.cubin``, ``kernel.name``), grid, block, dynamic shared
  memory;
- its memory: every GPU array argument becomes a byte range of device memory, copied to a file. Ranges
  that overlap (a view and its base, a tensor map and the array it describes) are merged into one buffer,
  so aliasing is kept; each buffer keeps its address modulo 4096, so alignment is kept too;
- its arguments: scalars and structs as their packed bytes; pointers as (buffer, offset); tklab tensor
  maps as their plan (shape, strides, box, swizzle), re-encoded in the child around the new address.

The child (``python -m tklab.profile.child DIR``) allocates the buffers, uploads the bytes, rebuilds the
arguments and launches. Raw structs passed as bytes are copied verbatim: an address hidden inside one
would point into the parent's memory, so ``capture`` refuses pointer-sized raw values for pointer parameters
it cannot trace.

Files: ``recipe.json``, ``kernel.cubin``, ``buffer_<i>.bin``.
Public API: ``Recipe``, ``Buffer``, ``Arg``, ``capture(prepared, folder)``, ``merge_ranges(ranges)``,
``array_range(obj)``, ``build(folder)`` (child side) → a launchable ``tklab.run.launch.Prepared``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..run import gpu

ALIGN = 4096  # buffers keep their address modulo this: every alignment a kernel may rely on


@dataclass(frozen=True)
class Buffer:
    """A range of the parent's device memory: ``start`` (the address it had), ``size`` in bytes."""

    start: int
    size: int


@dataclass(frozen=True)
class Arg:
    """One kernel argument: ``kind`` is "bytes" (``data``, hex), "pointer" or "tensor_map" (``buffer``,
    ``offset``; ``plan`` for a tensor map)."""

    kind: str
    data: str = ""
    buffer: int = -1
    offset: int = 0
    plan: dict[str, Any] | None = None


@dataclass
class Recipe:
    kernel: str  # mangled name in the cubin
    display: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    args: list[Arg]
    buffers: list[Buffer]
    warmup: int = 2
    arch: str = ""
    source_name: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "recipe.json").write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, folder: Path) -> Recipe:
        d = json.loads((folder / "recipe.json").read_text())
        return cls(kernel=d["kernel"], display=d["display"], grid=tuple(d["grid"]), block=tuple(d["block"]),
                   shared_mem=int(d["shared_mem"]), args=[Arg(**a) for a in d["args"]],
                   buffers=[Buffer(**b) for b in d["buffers"]], warmup=int(d.get("warmup", 2)),
                   arch=d.get("arch", ""), source_name=d.get("source_name", ""), extra=d.get("extra", {}))


def merge_ranges(ranges: Sequence[tuple[int, int]]) -> tuple[list[Buffer], list[tuple[int, int]]]:
    """Merge overlapping [start, end) ranges into buffers; for each input, (buffer index, offset in it).

    Ranges that only touch (one ends where the next starts) stay apart: they are separate arrays.
    """
    order = sorted(range(len(ranges)), key=lambda i: (ranges[i][0], -ranges[i][1]))
    merged: list[list[int]] = []
    owner = [0] * len(ranges)
    for i in order:
        start, end = ranges[i]
        if merged and start < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, max(end, start)])
        owner[i] = len(merged) - 1
    buffers = [Buffer(s, e - s) for s, e in merged]
    return buffers, [(owner[i], ranges[i][0] - buffers[owner[i]].start) for i in range(len(ranges))]


def _extent(ptr: int, itemsize: int, shape: Sequence[int], strides: Sequence[int]) -> tuple[int, int]:
    """[first, last+1) bytes an array with byte ``strides`` touches; an empty array touches nothing."""
    if any(int(n) == 0 for n in shape):
        return ptr, ptr
    lo = sum(min(0, (int(n) - 1) * int(s)) for n, s in zip(shape, strides, strict=True))
    hi = sum(max(0, (int(n) - 1) * int(s)) for n, s in zip(shape, strides, strict=True))
    return ptr + lo, ptr + hi + itemsize


def array_range(obj: Any) -> tuple[int, int] | None:
    """[start, end) of the device memory behind a torch CUDA tensor or a ``__cuda_array_interface__`` array."""
    if hasattr(obj, "data_ptr") and hasattr(obj, "stride") and getattr(obj, "is_cuda", False):  # torch
        size = int(obj.element_size())
        return _extent(int(obj.data_ptr()), size, tuple(obj.shape), [s * size for s in obj.stride()])
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is None:
        return None
    import numpy as np

    itemsize = np.dtype(cai["typestr"]).itemsize
    shape = tuple(int(n) for n in cai["shape"])
    strides = cai.get("strides")
    if strides is None:  # C-contiguous
        strides, acc = [], itemsize
        for n in reversed(shape):
            strides.insert(0, acc)
            acc *= n
    return _extent(int(cai["data"][0]), itemsize, shape, strides)


def tensor_map_range(plan: Any) -> tuple[int, int]:
    from ..run.tma import DTYPES

    cols, *outer = plan.dims  # rank 2 (a matrix) up to rank 5 ([batch, heads, seq, d] is rank 4)
    last = sum((n - 1) * stride for n, stride in zip(outer, plan.strides, strict=True))
    return plan.address, plan.address + last + cols * DTYPES[plan.dtype][0]


def _raw_pointer_range(address: int) -> tuple[int, int]:
    """[address, end of its allocation): what a raw device address passed as an int may reach."""
    from cuda.bindings import driver
    base, size = gpu.check(driver.cuMemGetAddressRange(address), f"looking up device address {address:#x}")
    return address, int(base) + int(size)


def _read_device(start: int, size: int) -> memoryview:
    """A host copy of device memory (a view of one numpy buffer: large arguments are not copied twice)."""
    import numpy as np
    from cuda.bindings import driver
    host = np.empty(max(size, 1), dtype=np.uint8)
    if size:
        gpu.check(driver.cuMemcpyDtoH(host.ctypes.data, start, size), "copying an argument's memory to the host")
    return memoryview(host)[:size]


def capture(prepared: Any, folder: Path, *, warmup: int = 2,
            read: Callable[[int, int], bytes | memoryview] | None = None,
            raw_range: Callable[[int], tuple[int, int]] | None = None) -> Recipe:
    """Write ``prepared`` (a ``tklab.run.launch.Prepared``) to ``folder``; see the module docstring.

    ``read(start, size)`` copies device memory (default: the driver); ``raw_range(address)`` finds the
    allocation behind a raw address (default: ``cuMemGetAddressRange``). Both are parameters for tests.
    """
    import numpy as np

    from ..run.tma import TensorMap

    kernel = getattr(prepared, "kernel", None)
    if kernel is None:
        raise TypeError("tklab.profile needs a launch made by kernel.prepare(grid, block, args): it re-creates the "
                        "launch in a separate process, so it must know the kernel and its arguments")
    raw_range = raw_range or _raw_pointer_range
    params = kernel.params
    packed = list(prepared.packed)
    if params is not None and len(params) != len(packed):
        params = None
    ranges: list[tuple[int, int]] = []
    pending: list[tuple[str, int | None, dict[str, Any] | None]] = []  # kind, range index, plan
    for i, value in enumerate(prepared.args):
        param = params[i] if params else None
        if isinstance(value, TensorMap):
            ranges.append(tensor_map_range(value.plan))
            plan = {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(value.plan).items()}
            pending.append(("tensor_map", len(ranges) - 1, plan))
        elif (r := array_range(value)) is not None:
            ranges.append(r)
            pending.append(("pointer", len(ranges) - 1, None))
        elif param is not None and param.pointer and isinstance(value, int) and not isinstance(value, bool) and value:
            ranges.append(raw_range(int(value)))
            pending.append(("pointer", len(ranges) - 1, None))
        else:
            if hasattr(value, "as_kernel_arg") or isinstance(value, (bytes, bytearray, np.void)):
                if param is not None and param.pointer:
                    raise TypeError(f"{prepared.name}: argument {i} is a pointer given as raw bytes; tklab.profile "
                                    "cannot tell which memory it points to: pass the array itself")
            pending.append(("bytes", None, None))
    buffers, where = merge_ranges(ranges)
    args = []
    for (kind, ri, plan), raw in zip(pending, packed, strict=True):
        if kind == "bytes":
            args.append(Arg("bytes", data=bytes(raw).hex()))
        else:
            b, off = where[ri]  # type: ignore[index]
            args.append(Arg(kind, buffer=b, offset=off, plan=plan))
    recipe = Recipe(kernel=kernel.name, display=kernel.display_name, grid=tuple(prepared.grid),
                    block=tuple(prepared.block), shared_mem=int(prepared.shared_mem), args=args, buffers=buffers,
                    warmup=warmup, arch=kernel.module.arch, source_name=kernel.module.program)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kernel.cubin").write_bytes(kernel.module.cubin)
    if read is None:
        if buffers:
            gpu.synchronize()  # the arguments' memory as the launch would see it, after earlier work finished
        read = _read_device
    for i, buf in enumerate(buffers):
        (folder / f"buffer_{i}.bin").write_bytes(read(buf.start, buf.size))
    recipe.save(folder)
    return recipe


def placement(buffer: Buffer, base: int) -> int:
    """Where a buffer's first byte goes in an allocation at ``base`` (of ``size + 2*ALIGN`` bytes): the
    same address modulo ``ALIGN`` as in the parent."""
    aligned = -(-base // ALIGN) * ALIGN
    return aligned + buffer.start % ALIGN


def build(folder: Path) -> tuple[Recipe, Any]:
    """Child side: allocate and fill the buffers, rebuild the arguments, and return (recipe, launch)."""
    import dataclasses

    import numpy as np
    from cuda.bindings import driver

    from ..run import launch, tma

    recipe = Recipe.load(folder)
    gpu.ensure_current()
    module = gpu.check(driver.cuModuleLoadData((folder / "kernel.cubin").read_bytes()), "loading the kernel's cubin")
    func = gpu.check(driver.cuModuleGetFunction(module, recipe.kernel.encode()), f"finding {recipe.kernel}")
    if recipe.shared_mem > 48 * 1024:
        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        gpu.check(driver.cuFuncSetAttribute(func, attr, recipe.shared_mem), "raising the dynamic shared-memory limit")
    starts = []
    for i, buf in enumerate(recipe.buffers):
        base = int(gpu.check(driver.cuMemAlloc(buf.size + 2 * ALIGN), f"allocating buffer {i} ({buf.size} B)"))
        start = placement(buf, base)
        data = np.fromfile(folder / f"buffer_{i}.bin", dtype=np.uint8)
        if data.size != buf.size:
            raise ValueError(f"buffer_{i}.bin holds {data.size} bytes, the recipe says {buf.size}")
        if buf.size:
            gpu.check(driver.cuMemcpyHtoD(start, data.ctypes.data, buf.size), f"uploading buffer {i}")
        starts.append(start)
    packed = []
    for a in recipe.args:
        if a.kind == "bytes":
            packed.append(bytes.fromhex(a.data))
        elif a.kind == "pointer":
            packed.append(np.uint64(starts[a.buffer] + a.offset).tobytes())
        elif a.kind == "tensor_map":
            fields = {f.name for f in dataclasses.fields(tma.Plan)}
            plan = {k: tuple(v) if isinstance(v, list) else v for k, v in (a.plan or {}).items() if k in fields}
            plan["address"] = starts[a.buffer] + a.offset
            packed.append(tma._encode(tma.Plan(**plan)))
        else:
            raise ValueError(f"unknown argument kind {a.kind!r} in the recipe")
    gpu.check(driver.cuCtxSynchronize(), "uploading the arguments")
    return recipe, launch.Prepared(recipe.display, func, recipe.grid, recipe.block, recipe.shared_mem, 0, packed, ())
