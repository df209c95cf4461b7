"""The host work of a launch's arguments, on a machine without a GPU (the driver's encode stubbed): tensor-map
descriptors remembered by their values, without holding an array; torch tensors read through ``data_ptr()``,
never through torch's per-access ``__cuda_array_interface__``. Why: tklab.attention's calls spent milliseconds a
training step on such work (bench/attention_host.py measures it on a GPU)."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import numpy as np
import pytest

from tklab.run import launch, tma


class _DeviceArray:
    """A C-contiguous device array as ``__cuda_array_interface__`` describes it (no device behind it)."""

    def __init__(self, shape: tuple[int, ...], dtype: Any, address: int) -> None:
        self.shape, self.dtype, self.address = shape, np.dtype(dtype), address

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.address, False), "version": 3}


@pytest.fixture
def encodes(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []

    def encode(plan: Any) -> bytes:
        calls.append(plan)
        return plan.address.to_bytes(8, "little") + bytes(120)

    monkeypatch.setattr(tma, "_encode", encode)
    tma._planned.cache_clear()
    yield calls
    tma._planned.cache_clear()


def test_the_same_map_is_encoded_once(encodes: list[Any]) -> None:
    a = _DeviceArray((4, 256, 64), np.float32, 1 << 32)
    first, again = tma.tensor_map(a, (64, 64)), tma.tensor_map(a, (64, 64))
    assert len(encodes) == 1 and first.as_kernel_arg() == again.as_kernel_arg()
    tma.tensor_map(a, (32, 64))  # another box
    tma.tensor_map(_DeviceArray((4, 256, 64), np.float32, 2 << 32), (64, 64))  # another address
    tma.tensor_map(_DeviceArray((4, 128, 64), np.float32, 1 << 32), (64, 64))  # another shape, same address
    assert len(encodes) == 4
    assert {p.address for p in encodes} == {1 << 32, 2 << 32}


def test_a_map_keeps_its_array_and_the_memory_holds_none(encodes: list[Any]) -> None:
    a = _DeviceArray((256, 64), np.float32, 3 << 32)
    alive = weakref.ref(a)
    m = tma.tensor_map(a, (64, 64))
    del a
    gc.collect()
    assert alive() is not None  # the map holds it while kernels may use it
    del m
    gc.collect()
    assert alive() is None  # the remembered descriptor does not


def test_a_refused_map_is_refused_again(encodes: list[Any]) -> None:
    a = _DeviceArray((256, 63), np.float32, 4 << 32)  # 252-byte rows: TMA needs 16-byte row strides
    for _ in range(2):
        with pytest.raises(tma.TmaError):
            tma.tensor_map(a, (64, 32))
    assert encodes == []


class _TorchLike:
    """A torch CUDA tensor's surface: data_ptr(), is_cuda, a dtype of its own, and an array interface that refuses
    (as torch's does for a tensor that requires grad) and counts its uses."""

    reads = 0

    def __init__(self, address: int) -> None:
        self.address, self.is_cuda, self.dtype = address, True, "torch.bfloat16"

    def data_ptr(self) -> int:
        return self.address

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        _TorchLike.reads += 1
        raise RuntimeError("Can't get __cuda_array_interface__ on Variable that requires grad")


def test_a_torch_tensor_is_read_through_data_ptr() -> None:
    t = _TorchLike(5 << 32)
    assert launch.device_pointer(t) == (5 << 32, "bfloat16")
    assert _TorchLike.reads == 0


def test_array_interface_objects_keep_their_numpy_names() -> None:
    assert launch.device_pointer(_DeviceArray((8,), np.float32, 6 << 32)) == (6 << 32, "float32")
    assert launch.device_pointer(_DeviceArray((8,), np.uint16, 7 << 32)) == (7 << 32, "uint16")
    assert launch.device_pointer(3) is None and launch.device_pointer(np.zeros(2)) is None
