"""Tensor maps for the Tensor Memory Accelerator (TMA), built from a CuPy array or a torch tensor.

A Hopper kernel copies a tile between global and shared memory with one instruction
(``cp.async.bulk.tensor``), given a *tensor map*: a 128-byte descriptor made on the host that says where
the tensor is, its shape and strides, the box (tile) one copy moves, and how the copy swizzles the box
in shared memory. The kernel takes it by value as ``const __grid_constant__ CUtensorMap tmap``.

The shared-memory layout the copy produces is the tile library's ``st`` (``cuda/tk/types/shared/st.cuh``):
a swizzled tile of R x C elements is stored as *panels* one swizzle span wide (S bytes = E elements),
panel after panel; TMA writes one panel per copy, so the box is (R, E) and a tile load issues C/E
copies. That is also the layout WGMMA reads, which is why the swizzle is chosen here from the tile
width exactly as the device-side ``default_swizzle`` chooses it. Without swizzle the tile is plain
row-major and one copy moves it whole; ``swizzle=16`` selects the *interleaved* layout of
``tk::interleave`` (16-byte panels, no XOR: WGMMA's no-swizzle operand layout).

Public API: ``tensor_map(array, tile, *, swizzle=None, dtype=None, fold=False) -> TensorMap``, ``TensorMap``
(``.as_kernel_arg()`` gives the 128 raw bytes), ``TmaError``, ``plan(...)`` (the checks and numbers
alone, no GPU needed), ``pick_swizzle(tile_cols, itemsize)``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from math import prod
from typing import Any

#: Element types TMA can move here, by dtype name → (bytes per element, CUtensorMapDataType name).
DTYPES: dict[str, tuple[int, str]] = {
    "bfloat16": (2, "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16"),
    "float16": (2, "CU_TENSOR_MAP_DATA_TYPE_FLOAT16"),
    "float32": (4, "CU_TENSOR_MAP_DATA_TYPE_FLOAT32"),
}
#: Swizzle span in bytes → CUtensorMapSwizzle name. 0: none (row-major tile, one box per tile);
#: 16: 16-byte panels without XOR (the layout WGMMA calls *interleaved*; ``tk::interleave`` on the device).
SWIZZLES: dict[int, str] = {
    0: "CU_TENSOR_MAP_SWIZZLE_NONE",
    16: "CU_TENSOR_MAP_SWIZZLE_NONE",
    32: "CU_TENSOR_MAP_SWIZZLE_32B",
    64: "CU_TENSOR_MAP_SWIZZLE_64B",
    128: "CU_TENSOR_MAP_SWIZZLE_128B",
}
MAX_BOX = 256  # TMA moves at most 256 elements along each box dimension


class TmaError(ValueError):
    """The tensor or tile cannot be described to TMA; the message says which rule failed."""


def pick_swizzle(tile_cols: int, itemsize: int) -> int:
    """The widest swizzle span (bytes) dividing a tile row, as the device's ``default_swizzle`` picks it.

    Wide spans spread a column of 16-byte chunks over more banks, so 128 B is best when it fits; 0 means
    no swizzle (rows that are not a multiple of 32 bytes).
    """
    row = tile_cols * itemsize
    for span in (128, 64, 32):
        if row % span == 0:
            return span
    return 0


@dataclass(frozen=True)
class Plan:
    """Everything ``cuTensorMapEncodeTiled`` is given, computed and checked without a GPU."""

    dtype: str
    address: int
    dims: tuple[int, ...]  # (columns, rows, ...outer): innermost first, as the driver and PTX count them
    strides: tuple[int, ...]  # bytes between consecutive indices of dims[1], dims[2], ...
    box: tuple[int, ...]  # (columns, rows, 1, ...) one copy moves: one slab of the tile
    swizzle: int  # bytes: 0 (none), 16 (interleaved), 32, 64, 128
    tile: tuple[int, int]  # (rows, columns) of the shared tile the kernel loads

    @property
    def rank(self) -> int:
        """Dimensions of the tensor map (2 for a matrix; 4 for [batch, heads, seq, d])."""
        return len(self.dims)

    @property
    def row_stride(self) -> int:
        """Bytes between rows."""
        return self.strides[0]

    @property
    def copies_per_tile(self) -> int:
        """How many TMA copies fill one tile (slabs x row blocks)."""
        return (self.tile[1] // self.box[0]) * (self.tile[0] // self.box[1])

    @property
    def tile_bytes(self) -> int:
        """Bytes one tile load delivers: what the kernel's mbarrier must expect."""
        return self.tile[0] * self.tile[1] * DTYPES[self.dtype][0]


def _describe(array: Any, dtype: str | None) -> tuple[int, tuple[int, ...], tuple[int, ...], str]:
    """(address, shape, strides in bytes, dtype name) of a CuPy array, torch tensor or CUDA-array-like."""
    if hasattr(array, "data_ptr") and hasattr(array, "stride"):  # torch: bf16 has no numpy typestr
        name = str(array.dtype).replace("torch.", "")
        size = array.element_size()
        return (int(array.data_ptr()), tuple(array.shape), tuple(s * size for s in array.stride()),
                dtype or name)
    cai = getattr(array, "__cuda_array_interface__", None)
    if cai is None:
        raise TmaError(f"cannot build a tensor map for a {type(array).__name__}: pass a CuPy array or a "
                       "torch CUDA tensor")
    import numpy as np

    np_dtype = np.dtype(getattr(array, "dtype", cai["typestr"]))
    shape = tuple(int(s) for s in cai["shape"])
    strides = cai.get("strides")
    if strides is None:  # C-contiguous
        strides, acc = [], np_dtype.itemsize
        for s in reversed(shape):
            strides.insert(0, acc)
            acc *= s
    name = dtype or np_dtype.name
    return int(cai["data"][0]), shape, tuple(int(s) for s in strides), name


MAX_RANK = 5  # TMA tensor maps have 1 to 5 dimensions


def plan(address: int, shape: tuple[int, ...], strides: tuple[int, ...], dtype: str,
         tile: tuple[int, int], swizzle: int | None = None, *, fold: bool = False) -> Plan:
    """Check a tensor (shape, byte strides) and tile against TMA's rules; say what to encode.

    The tile covers the last two dimensions (rows, columns). Leading dimensions stay dimensions of the
    map, with a box of 1 along each: a kernel names them in its coordinate (``tk::coord4{b, h, r, c}``),
    and a tile that runs past the end of one matrix (a head, say) reads zeros and writes nothing there,
    instead of spilling into the next matrix. ``fold=True`` folds contiguous leading dimensions into the
    rows instead (one tall matrix; tiles may then straddle two matrices).
    """
    if dtype not in DTYPES:
        raise TmaError(f"TMA tensor maps here support {', '.join(DTYPES)}; got {dtype} (for bf16 data in a "
                       "uint16 CuPy array pass dtype='bfloat16')")
    itemsize = DTYPES[dtype][0]
    if len(shape) < 2:
        raise TmaError(f"need a matrix (2 or more dimensions), got shape {shape}")
    if strides[-1] != itemsize:
        raise TmaError(f"the last dimension must be contiguous (stride {itemsize} B), got {strides[-1]} B")
    if fold:
        for i in range(len(shape) - 2):
            if strides[i] != strides[i + 1] * shape[i + 1]:
                raise TmaError(f"dimension {i} of shape {shape} cannot be folded into rows (strides {strides})")
        shape, strides = (prod(shape[:-1]), shape[-1]), (strides[-2], strides[-1])
    if len(shape) > MAX_RANK:
        raise TmaError(f"TMA tensor maps have at most {MAX_RANK} dimensions, got shape {shape}")
    if address % 16:
        raise TmaError(f"the tensor's address must be 16-byte aligned (it is {address:#x})")
    cols = shape[-1]
    outer = tuple(reversed(strides[:-1]))  # byte strides of rows, then the leading dims, innermost first
    for s in outer:
        if s % 16:
            raise TmaError(f"every stride but the last must be a multiple of 16 bytes, got {s} B in strides "
                           f"{strides} ({cols} columns of {itemsize} B): pad the rows")
    tr, tc = tile
    if tr % 8 or tc % 8 or tr <= 0 or tc <= 0:
        raise TmaError(f"tile {tile}: rows and columns must be positive multiples of 8")
    if (tc * itemsize) % 16:
        raise TmaError(f"a tile row must be a multiple of 16 bytes, got {tc} x {itemsize} B")
    span = pick_swizzle(tc, itemsize) if swizzle is None else swizzle
    if span not in SWIZZLES:
        raise TmaError(f"swizzle must be None (auto), 0 (none), 16 (interleaved), 32, 64 or 128; got {swizzle}")
    if span and (tc * itemsize) % span:
        raise TmaError(f"a tile row of {tc * itemsize} B is not a whole number of {span}-byte swizzle spans")
    box_cols, box_rows = (span // itemsize if span else tc), min(tr, MAX_BOX)
    if box_cols > MAX_BOX:
        raise TmaError(f"an unswizzled tile row of {tc} elements exceeds TMA's {MAX_BOX}-element box")
    if tr % box_rows:
        raise TmaError(f"tile rows {tr} must be a multiple of {box_rows} (TMA boxes are at most {MAX_BOX})")
    dims = tuple(reversed(shape))
    box = (box_cols, box_rows) + (1,) * (len(shape) - 2)
    return Plan(dtype, address, dims, outer, box, span, (tr, tc))


class TensorMap:
    """A TMA descriptor for one tensor and one tile shape; pass it to a kernel like any argument.

    Keep the tensor alive while kernels use the map: the map holds its address, not a reference the
    GPU can follow.
    """

    def __init__(self, array: Any, tile: tuple[int, int], *, swizzle: int | None = None,
                 dtype: str | None = None, fold: bool = False):
        address, shape, strides, name = _describe(array, dtype)
        self.plan, self._raw = _planned(address, shape, strides, name, tuple(tile), swizzle, fold)  # type: ignore[arg-type]
        self._array = array  # keeps the memory alive as long as the map

    @property
    def swizzle(self) -> int:
        """Swizzle span in bytes (0 none, 16 interleaved); the kernel's shared tile must use the same."""
        return self.plan.swizzle

    @property
    def tile_bytes(self) -> int:
        """Bytes one tile load brings: the kernel's ``expect_tx`` count."""
        return self.plan.tile_bytes

    def as_kernel_arg(self) -> bytes:
        """The 128 raw bytes of the CUtensorMap, packed by value into the kernel's parameters."""
        return self._raw

    def __repr__(self) -> str:
        p = self.plan
        shape = "x".join(str(d) for d in reversed(p.dims))
        return (f"TensorMap({p.dtype}, {shape}, tile {p.tile[0]}x{p.tile[1]}, "
                f"box {p.box[1]}x{p.box[0]}, swizzle {p.swizzle} B)")


@functools.lru_cache(maxsize=256)
def _planned(address: int, shape: tuple[int, ...], strides: tuple[int, ...], name: str, tile: tuple[int, int],
             swizzle: int | None, fold: bool) -> tuple[Plan, bytes]:
    """``plan`` and the driver's descriptor for them, remembered: a descriptor is a function of these values alone
    (the address included, not the memory behind it), and a training step asks for the same few maps every layer
    and step; checking and encoding them again cost each call tens of microseconds. No array is held."""
    p = plan(address, shape, strides, name, tile, swizzle, fold=fold)
    return p, _encode(p)


def _encode(p: Plan) -> bytes:
    """Call the driver's ``cuTensorMapEncodeTiled`` and return the descriptor's bytes."""
    from cuda.bindings import driver

    (err,) = driver.cuInit(0)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise TmaError(f"the CUDA driver is not usable here ({err.name}): tensor maps need a GPU")
    err, tmap = driver.cuTensorMapEncodeTiled(
        getattr(driver.CUtensorMapDataType, DTYPES[p.dtype][1]),
        p.rank,
        p.address,
        [driver.cuuint64_t(d) for d in p.dims],
        [driver.cuuint64_t(s) for s in p.strides],
        [driver.cuuint32_t(b) for b in p.box],
        [driver.cuuint32_t(1)] * p.rank,
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(driver.CUtensorMapSwizzle, SWIZZLES[p.swizzle]),
        driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    )
    if err != driver.CUresult.CUDA_SUCCESS:
        raise TmaError(f"cuTensorMapEncodeTiled refused {p}: {err.name}")
    return b"".join(int(q).to_bytes(8, "little") for q in tmap.opaque)


def tensor_map(array: Any, tile: tuple[int, int], *, swizzle: int | None = None,
               dtype: str | None = None, fold: bool = False) -> TensorMap:
    """A tensor map that moves ``tile = (rows, cols)`` tiles of ``array`` (CuPy or torch, on the GPU).

    Arrays of 3 to 5 dimensions keep their leading dimensions (see ``plan``): a ``[B, H, N, d]`` tensor
    gives a rank-4 map whose tiles never cross from one head into the next; ``fold=True`` folds them.

    ``swizzle``: None picks the widest span dividing the tile row (as the device tile does); 0 means
    none, 16 interleaved, 32/64/128 force a span. ``dtype`` overrides the element type (bf16 held as
    uint16).
    """
    return TensorMap(array, tile, swizzle=swizzle, dtype=dtype, fold=fold)
