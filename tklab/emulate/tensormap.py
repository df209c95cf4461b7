"""TMA tensor maps for CPU emulation, from NumPy arrays.

A GPU tensor map (``tklab.run.tma``) is made by the driver and is opaque; the emulator reads its own
128-byte format instead, which the kernel receives by value exactly like a ``CUtensorMap``. The map
holds the array, not an address: the address is filled in at launch, once the array has been copied
into the emulator's bounds-checked memory.

``tensor_map(array, tile, swizzle=None, dtype=None)`` mirrors ``tklab.run.tma.tensor_map`` (a 2-D map whose
box is one swizzle panel of the tile); ``TensorMap(array, box=(...), swizzle=...)`` describes any 1-5-D
box directly (innermost dimension first, as PTX counts).

Public API: ``TensorMap``, ``tensor_map(...)``.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from ..run import tma as gpu_tma

_DTYPE_CODES = {"uint8": 0, "uint16": 1, "uint32": 2, "int32": 3, "uint64": 4, "int64": 5, "float16": 6,
                "float32": 7, "float64": 8, "bfloat16": 9}


class TensorMap:
    """A tensor map over a NumPy array: dimensions innermost first, box per copy, swizzle span in bytes."""

    def __init__(self, array: np.ndarray, box: tuple[int, ...], *, swizzle: int = 0, dtype: str | None = None,
                 tile: tuple[int, int] | None = None, dims: tuple[int, ...] | None = None,
                 strides: tuple[int, ...] | None = None):
        if not isinstance(array, np.ndarray):
            raise TypeError(f"an emulated tensor map needs a NumPy array, not {type(array).__name__}")
        if not array.flags.c_contiguous:
            raise gpu_tma.TmaError("the array must be C-contiguous")
        name = dtype or array.dtype.name
        if name not in _DTYPE_CODES:
            raise gpu_tma.TmaError(f"element type {name} is not one TMA moves here ({', '.join(_DTYPE_CODES)})")
        itemsize = 2 if name == "bfloat16" else np.dtype(name).itemsize
        if itemsize != array.dtype.itemsize:
            raise gpu_tma.TmaError(f"dtype {name} has {itemsize}-byte elements, the array {array.dtype.itemsize}")
        if swizzle not in (0, 16, 32, 64, 128):
            raise gpu_tma.TmaError(f"swizzle must be 0, 16, 32, 64 or 128 bytes, not {swizzle}")
        dims = tuple(int(d) for d in (dims or reversed(array.shape)))
        self.strides = tuple(int(x) for x in (strides if strides is not None else
                                              [int(x) for x in reversed(array.strides)][1:]))
        if not 1 <= len(dims) <= 5 or len(box) != len(dims):
            raise gpu_tma.TmaError(f"a {len(dims)}-D array needs a box of {len(dims)} sizes (1-5 dimensions)")
        if any(not 1 <= b <= 256 for b in box):
            raise gpu_tma.TmaError(f"box {box}: every box dimension is 1..256 elements")
        if (box[0] * itemsize) % 16:
            raise gpu_tma.TmaError(f"a box row must be a multiple of 16 bytes, got {box[0]} x {itemsize} B")
        if swizzle >= 32 and box[0] * itemsize > swizzle:
            raise gpu_tma.TmaError(f"a {swizzle}B swizzle allows box rows of at most {swizzle} bytes")
        self.array, self.box, self.swizzle, self.dtype = array, tuple(box), swizzle, name
        self.itemsize, self.dims = itemsize, dims
        self.tile = tile

    @property
    def tile_bytes(self) -> int:
        """Bytes one tile load delivers (for a map made by ``tensor_map``), else one box."""
        if self.tile is not None:
            return self.tile[0] * self.tile[1] * self.itemsize
        return int(np.prod(self.box)) * self.itemsize

    def encode(self, address: int, slot: int) -> bytes:
        """The 128 bytes the kernel receives, with the array at ``address`` (emulator memory)."""
        strides = list(self.strides)
        raw = b"TKEMUTMA" + struct.pack("<Q", address)
        raw += struct.pack("<5Q", *(list(self.dims) + [1] * (5 - len(self.dims))))
        raw += struct.pack("<4Q", *(strides + [0] * (4 - len(strides))))
        raw += struct.pack("<5I", *(list(self.box) + [1] * (5 - len(self.box))))
        span = 0 if self.swizzle == 16 else self.swizzle
        raw += struct.pack("<BBBBi", len(self.dims), self.itemsize, span // 16, _DTYPE_CODES[self.dtype], slot)
        return raw.ljust(128, b"\0")

    def __repr__(self) -> str:
        return f"emulate.TensorMap({self.dtype}, dims {self.dims}, box {self.box}, swizzle {self.swizzle} B)"


def tensor_map(array: np.ndarray, tile: tuple[int, int], *, swizzle: int | None = None,
               dtype: str | None = None, fold: bool = False) -> TensorMap:
    """Like ``tklab.run.tma.tensor_map`` for a NumPy array (same checks, same rank and box; no driver)."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"an emulated tensor map needs a NumPy array, not {type(array).__name__}")
    name = dtype or array.dtype.name
    if name not in gpu_tma.DTYPES:
        raise gpu_tma.TmaError(f"TMA tensor maps here support {', '.join(gpu_tma.DTYPES)}; got {name}")
    itemsize = gpu_tma.DTYPES[name][0]
    if itemsize != array.dtype.itemsize:
        raise gpu_tma.TmaError(f"{name} has {itemsize}-byte elements, the array {array.dtype.itemsize}-byte ones")
    p = gpu_tma.plan(16 * 1024, tuple(array.shape), tuple(int(s) for s in array.strides), name, tuple(tile),
                     swizzle, fold=fold)  # the GPU's checks; the address is filled in at launch
    return TensorMap(array, tuple(p.box), swizzle=p.swizzle, dtype=name, tile=(p.tile[0], p.tile[1]),
                     dims=tuple(p.dims), strides=tuple(p.strides))


def is_map(value: Any) -> bool:
    return isinstance(value, TensorMap)
