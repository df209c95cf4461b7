"""Writing a launch down so another process can re-create it: memory ranges, aliasing, alignment, arguments.

No GPU here: arrays are stand-ins with a ``__cuda_array_interface__`` at made-up addresses, and device reads
go through the ``read=`` hook (it returns bytes derived from the address, so a test can tell ranges apart).
The GPU-side rebuild is checked in test_profile_gpu.py.
"""

from __future__ import annotations

import numpy as np
import pytest

import tklab
from tklab import launch, tma
from tklab.profile import recipe

SRC = r"""
extern "C" __global__ void axpy(float* y, const float* x, float a, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}
struct __align__(8) Pair { float* p; int n; };
extern "C" __global__ void by_struct(Pair pair) { if (threadIdx.x < pair.n) pair.p[threadIdx.x] = 0.f; }
struct __align__(64) Map128 { unsigned long long opaque[16]; };  // a CUtensorMap by value: 128 bytes
extern "C" __global__ void tma_copy(const __grid_constant__ Map128 map, float* out, int n) { out[0] = n; }
"""


class DeviceArray:
    """A stand-in for a CuPy array: only what launchers read (``__cuda_array_interface__``)."""

    def __init__(self, address: int, shape: tuple[int, ...], typestr: str = "<f4",
                 strides: tuple[int, ...] | None = None):
        self.__cuda_array_interface__ = {"data": (address, False), "shape": shape, "typestr": typestr,
                                         "strides": strides, "version": 3}


@pytest.fixture(scope="module")
def module() -> tklab.Module:
    return tklab.compile(SRC, arch="sm_90a", name="recipe_test.cu")


def _prepared(kernel: tklab.Kernel, args: tuple, packed: list[bytes], *, grid=(4, 1, 1), block=(128, 1, 1),
              shared_mem: int = 0) -> launch.Prepared:
    """A prepared launch as kernel.prepare() builds it (prepare itself needs a GPU to load the module)."""
    return launch.Prepared(kernel.display_name, None, grid, block, shared_mem, 0, packed, args, kernel)


def _fake_read(start: int, size: int) -> bytes:
    return bytes((start + i) % 251 for i in range(size))


def test_merge_ranges_keeps_overlaps_together_and_neighbours_apart() -> None:
    buffers, where = recipe.merge_ranges([(1000, 2000), (1500, 1600), (2000, 2100), (5000, 5000), (1800, 2050)])
    assert buffers == [recipe.Buffer(1000, 1100), recipe.Buffer(5000, 0)]
    # (2000, 2100) only touches the first range but overlaps (1800, 2050), so all three share a buffer.
    assert where == [(0, 0), (0, 500), (0, 1000), (1, 0), (0, 800)]
    buffers, where = recipe.merge_ranges([(0, 256), (256, 512)])
    assert len(buffers) == 2 and where == [(0, 0), (1, 0)]


def test_array_range_follows_shape_and_strides() -> None:
    assert recipe.array_range(DeviceArray(4096, (3, 4))) == (4096, 4096 + 48)
    # A column of a 4x8 float matrix: 4 elements 32 bytes apart.
    assert recipe.array_range(DeviceArray(8192 + 8, (4,), strides=(32,))) == (8200, 8200 + 3 * 32 + 4)
    # A reversed view starts below its pointer.
    assert recipe.array_range(DeviceArray(8192 + 36, (10,), strides=(-4,))) == (8192, 8192 + 40)
    assert recipe.array_range(DeviceArray(4096, (0, 5))) == (4096, 4096)
    assert recipe.array_range(np.zeros(3)) is None


def test_capture_writes_memory_arguments_and_aliases(tmp_path, module) -> None:
    k = module["axpy"]
    base = 0x7F00_0000_0100  # 256-aligned, not 4096-aligned: the child must keep that
    y = DeviceArray(base, (1024,))
    x = DeviceArray(base + 2048, (1024,))  # a view into the same allocation, overlapping y's tail
    packed = [np.uint64(base).tobytes(), np.uint64(base + 2048).tobytes(), np.float32(2.0).tobytes(),
              np.int32(1024).tobytes()]
    run = _prepared(k, (y, x, np.float32(2.0), np.int32(1024)), packed, shared_mem=64)
    rec = recipe.capture(run, tmp_path, warmup=3, read=_fake_read)
    assert rec.buffers == [recipe.Buffer(base, 2048 + 4096)]
    assert [a.kind for a in rec.args] == ["pointer", "pointer", "bytes", "bytes"]
    assert (rec.args[0].buffer, rec.args[0].offset, rec.args[1].offset) == (0, 0, 2048)
    assert bytes.fromhex(rec.args[3].data) == np.int32(1024).tobytes()
    assert (tmp_path / "kernel.cubin").read_bytes() == module.cubin
    assert (tmp_path / "buffer_0.bin").read_bytes() == _fake_read(base, 6144)
    back = recipe.Recipe.load(tmp_path)
    assert back == rec and (back.kernel, back.grid, back.block, back.shared_mem, back.warmup) == \
        ("axpy", (4, 1, 1), (128, 1, 1), 64, 3)


def test_child_placement_keeps_alignment_inside_the_allocation() -> None:
    for start in (0x1000, 0x7F00_0000_0100, 0x7F00_0000_0FF0):
        buf = recipe.Buffer(start, 1000)
        for base in (0x5000_0000, 0x5000_0200, 0x5000_0F00):
            at = recipe.placement(buf, base)
            assert at % recipe.ALIGN == start % recipe.ALIGN
            assert base <= at and at + buf.size <= base + buf.size + 2 * recipe.ALIGN


def test_tensor_map_is_captured_as_its_plan(tmp_path, module) -> None:
    k = module["tma_copy"]
    addr = 0x7F00_0010_0000
    tmap = tma.TensorMap.__new__(tma.TensorMap)  # built without the driver: the plan is all a recipe needs
    tmap.plan = tma.plan(addr, (128, 64), (256, 4), "float32", (32, 32))
    tmap._raw = bytes(128)
    out = DeviceArray(addr + 128 * 256 - 64, (4,))  # overlaps the map's tensor: one buffer for both
    packed = [tmap.as_kernel_arg(), np.uint64(addr + 128 * 256 - 64).tobytes(), np.int32(7).tobytes()]
    rec = recipe.capture(_prepared(k, (tmap, out, np.int32(7)), packed), tmp_path, read=_fake_read)
    assert rec.buffers == [recipe.Buffer(addr, 128 * 256)]
    arg = rec.args[0]
    assert arg.kind == "tensor_map" and (arg.buffer, arg.offset) == (0, 0)
    assert arg.plan["dims"] == [64, 128] and arg.plan["box"] == list(tmap.plan.box) and arg.plan["swizzle"] == 128
    assert (rec.args[1].buffer, rec.args[1].offset) == (0, 128 * 256 - 64)


def test_a_rank_4_tensor_map_covers_every_head_and_batch() -> None:
    """[batch, heads, seq, d] maps (chapter 10) reach the last element of the last head, not only the first row."""
    b, h, n, d = 2, 3, 80, 64
    addr = 0x7F00_0020_0000
    strides = (h * n * d * 2, n * d * 2, d * 2, 2)  # bf16, contiguous
    p = tma.plan(addr, (b, h, n, d), strides, "bfloat16", (64, 64))
    assert recipe.tensor_map_range(p) == (addr, addr + b * h * n * d * 2)
    padded = tma.plan(addr, (b, h, n, d), (h * n * 256, n * 256, 256, 2), "bfloat16", (64, 64))  # rows padded
    assert recipe.tensor_map_range(padded) == (addr, addr + (b * h * n - 1) * 256 + d * 2)


def test_capture_refuses_what_it_cannot_re_create(tmp_path, module) -> None:
    with pytest.raises(TypeError, match=r"kernel.prepare\(grid, block, args\)"):
        recipe.capture(lambda: None, tmp_path)
    k = module["axpy"]
    packed = [bytes(8), bytes(8), np.float32(1).tobytes(), np.int32(1).tobytes()]
    run = _prepared(k, (bytes(8), bytes(8), np.float32(1), np.int32(1)), packed)
    with pytest.raises(TypeError, match="argument 0 is a pointer given as raw bytes"):
        recipe.capture(run, tmp_path, read=_fake_read)
    # A struct passed by value is copied byte for byte (an address inside it cannot be traced: documented).
    raw = bytes(range(16))
    rec = recipe.capture(_prepared(module["by_struct"], (raw,), [raw]), tmp_path, read=_fake_read)
    assert rec.args == [recipe.Arg("bytes", data=raw.hex())] and rec.buffers == []


def test_a_raw_address_reaches_to_the_end_of_its_allocation(tmp_path, module) -> None:
    k = module["axpy"]
    packed = [np.uint64(0x9000).tobytes(), np.uint64(0xA000).tobytes(), np.float32(1).tobytes(),
              np.int32(1).tobytes()]
    allocations = {0x9000: (0x8000, 0x2000), 0xA000: (0xA000, 0x100)}

    def raw_range(address: int) -> tuple[int, int]:
        start, size = allocations[address]
        return address, start + size

    run = _prepared(k, (0x9000, 0xA000, np.float32(1), np.int32(1)), packed)
    rec = recipe.capture(run, tmp_path, read=_fake_read, raw_range=raw_range)
    # 0x9000..0xA000 and 0xA000..0xA100 only touch: two buffers.
    assert rec.buffers == [recipe.Buffer(0x9000, 0x1000), recipe.Buffer(0xA000, 0x100)]
