"""tklab.attention's launches remembered (tklab.run.launch_memo), on a machine without a GPU: the kernels compiled
for sm_90a with NVRTC as everywhere, the driver stubbed, torch replaced by tensors that have only what the launch
path reads (addresses handed back like torch's caching allocator does). What is asserted: a repeated call launches
the very bytes a fresh ``prepare`` packs, another address or layout is packed anew, a bad layout is still refused
after a good one was remembered, and nothing remembered holds an array. Why: ~1 ms of host work per forward+backward
made the tiny GPT's steps 1.7x SDPA's (bench/results/attention_host_*.md)."""

from __future__ import annotations

import gc
import sys
import types
import weakref
from collections.abc import Iterator
from math import prod
from typing import Any

import pytest

from tklab.kernels import attention as fwd
from tklab.kernels import attention_bwd as bwd
from tklab.run import launch, tma
from tklab.run.launch_memo import LaunchMemo
from tklab.run.limits import SHARED_OPTIN


class _DType:
    def __init__(self, name: str, size: int) -> None:
        self.name, self.size = name, size

    def __str__(self) -> str:
        return f"torch.{self.name}"


_BF16, _F32, _I32 = _DType("bfloat16", 2), _DType("float32", 4), _DType("int32", 4)


class _Allocator:
    """Addresses by size, a freed block handed back first (as torch's caching allocator does step after step)."""

    def __init__(self) -> None:
        self.next, self.free = 1 << 32, {}  # type: ignore[var-annotated]

    def take(self, size: int) -> int:
        size = -(-size // 1024) * 1024
        if self.free.get(size):
            return self.free[size].pop()
        self.next += size
        return self.next - size


_ALLOC = _Allocator()


class _Tensor:
    """A CUDA tensor's surface as the launch path reads it."""

    is_cuda, device = True, "cuda:0"

    def __init__(self, shape: tuple[int, ...], strides: tuple[int, ...] | None = None, dtype: _DType = _BF16,
                 address: int | None = None) -> None:
        self.shape, self.dtype = tuple(shape), dtype
        if strides is None:
            strides = tuple(prod(shape[i + 1:]) for i in range(len(shape)))
        self._strides, self._size = tuple(strides), prod(shape) * dtype.size
        self._own = address is None
        self._address = _ALLOC.take(self._size) if address is None else address

    def data_ptr(self) -> int:
        return self._address

    def stride(self) -> tuple[int, ...]:
        return self._strides

    def element_size(self) -> int:
        return self.dtype.size

    def __del__(self) -> None:
        if self._own:
            _ALLOC.free.setdefault(-(-self._size // 1024) * 1024, []).append(self._address)


@pytest.fixture
def stubbed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, tuple[bytes, ...]]]]:
    """torch and the driver stubbed; yields the launches made, as (kernel, packed bytes)."""
    torch = types.ModuleType("torch")
    torch.bfloat16, torch.float32, torch.int32 = _BF16, _F32, _I32  # type: ignore[attr-defined]
    torch.empty = lambda shape, dtype, device: _Tensor(shape, dtype=dtype)  # type: ignore[attr-defined]
    torch.empty_strided = lambda shape, strides, dtype, device: _Tensor(shape, strides, dtype)  # type: ignore[attr-defined]
    torch.zeros = torch.empty  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setattr(tma, "_encode", lambda plan: plan.address.to_bytes(8, "little") + bytes(120))

    class Loaded:
        def __init__(self) -> None:
            self.functions: dict[str, Any] = {}
            self.param_sizes: dict[str, Any] = {}
            self.smem_limit: dict[str, int] = {}

        def function(self, name: str) -> Any:
            self.param_sizes[name] = None  # the parameters' sizes from the source's declaration
            return self.functions.setdefault(name, object())

    modules: dict[int, Loaded] = {}
    monkeypatch.setattr(launch, "_loaded", lambda module: modules.setdefault(id(module), Loaded()))
    monkeypatch.setattr(launch.gpu, "ensure_current", lambda: None)
    monkeypatch.setattr(launch, "_static_shared", lambda func, kernel: 0)
    monkeypatch.setattr(launch.gpu, "properties",
                        lambda: types.SimpleNamespace(max_shared_per_block_optin=SHARED_OPTIN[90]))
    monkeypatch.setattr(launch, "driver", None, raising=False)
    from cuda.bindings import driver

    monkeypatch.setattr(driver, "cuFuncSetAttribute", lambda *a: (driver.CUresult.CUDA_SUCCESS,), raising=False)
    made: list[tuple[str, tuple[bytes, ...]]] = []
    monkeypatch.setattr(launch.Prepared, "__call__", lambda self, sync=False: made.append((self.name, self.packed)))
    fwd.LAUNCHES.clear()
    tma._planned.cache_clear()
    yield made
    fwd.LAUNCHES.clear()


def _qkv(b: int = 2, h: int = 2, n: int = 256, d: int = 64) -> tuple[_Tensor, ...]:
    """q, k, v as the tiny GPT makes them: strided views of one [b, n, 3, h, d] tensor."""
    base = _Tensor((b, n, 3, h, d))
    strides = (n * 3 * h * d, d, 3 * h * d, 1)
    views = tuple(_Tensor((b, h, n, d), strides, address=base.data_ptr() + i * h * d * 2) for i in range(3))
    for x in views:
        x.base = base  # type: ignore[attr-defined]  # the views keep their storage
    return views


def test_the_memo_keeps_the_most_recently_used() -> None:
    m = LaunchMemo(size=2)
    m.put("a", 1), m.put("b", 2)
    assert m.get("a") == 1  # a is now the most recent
    m.put("c", 3)
    assert m.get("b") is None and m.get("a") == 1 and m.get("c") == 3 and len(m) == 2
    assert (m.hits, m.misses) == (3, 1)
    with pytest.raises(ValueError, match="at least one"):
        LaunchMemo(size=0)


def test_a_repeated_forward_launches_what_a_fresh_prepare_packs(stubbed: list[Any]) -> None:
    q, k, v = _qkv()
    o, lse = fwd.flash_fwd(q, k, v, causal=True)
    first = stubbed[-1]
    del o, lse  # their blocks come back for the next call's outputs
    o, lse = fwd.flash_fwd(q, k, v, causal=True)
    assert fwd.LAUNCHES.hits >= 2 and stubbed[-1] == first  # the layout's checks and the launch, remembered
    fresh = fwd.prepare(q, k, v, o, lse, causal=True)
    assert (fresh.name, fresh.packed) == first
    o2, lse2 = fwd.flash_fwd(q, k, v, causal=True)  # the first outputs alive: new addresses, packed anew
    assert stubbed[-1][1][3][:8] == o2.data_ptr().to_bytes(8, "little") != o.data_ptr().to_bytes(8, "little")
    assert stubbed[-1][1][4] == lse2.data_ptr().to_bytes(8, "little")
    before = fwd.LAUNCHES.misses
    fwd.flash_fwd(q, k, v, causal=False)  # another option: packed anew, and it differs in the causal flag
    assert fwd.LAUNCHES.misses > before and stubbed[-1] != first


def test_another_address_is_packed_anew(stubbed: list[Any]) -> None:
    q, k, v = _qkv()
    fwd.flash_fwd(q, k, v)
    q2, k2, v2 = _qkv()  # the first three are alive: new addresses
    fwd.flash_fwd(q2, k2, v2)
    (_, a), (_, b) = stubbed[-2:]
    assert a[0] != b[0] and a[0][:8] == q.data_ptr().to_bytes(8, "little") and b[0][:8] == q2.data_ptr().to_bytes(
        8, "little")


def test_a_bad_layout_is_refused_after_a_good_one_was_remembered(stubbed: list[Any]) -> None:
    q, k, v = _qkv()
    fwd.flash_fwd(q, k, v)
    bad = _Tensor((2, 2, 256, 64), (256 * 68, 256 * 68 // 2, 68, 1))  # rows of 68 elements: not 16-byte strides
    with pytest.raises(ValueError, match="multiples of 8"):
        fwd.flash_fwd(bad, k, v)
    with pytest.raises(ValueError, match="same shape"):
        fwd.flash_fwd(q, _Tensor((2, 2, 128, 64)), v)
    with pytest.raises(ValueError, match="positive finite"):
        fwd.flash_fwd(q, k, v, scale=-1.0)
    with pytest.raises(ValueError, match="head dimension"):
        q32 = _Tensor((1, 1, 64, 32))
        bwd.flash_bwd(q32, q32, q32, q32, _Tensor((1, 1, 64), dtype=_F32), q32)


def test_a_repeated_backward_launches_what_a_fresh_one_packs(stubbed: list[Any]) -> None:
    q, k, v = _qkv()
    o, lse = fwd.flash_fwd(q, k, v, causal=True)
    do = _Tensor(q.shape)
    grads = bwd.flash_bwd(q, k, v, o, lse, do, causal=True)
    first = stubbed[-3:]
    assert [name for name, _ in first] == ["flash_bwd_prep", "flash_bwd", "flash_bwd_dq"]
    del grads
    hits = fwd.LAUNCHES.hits
    dq, dk, dv = bwd.flash_bwd(q, k, v, o, lse, do, causal=True)
    assert fwd.LAUNCHES.hits == hits + 2 and stubbed[-3:] == first
    fresh = bwd.prepare(q, k, v, o, lse, do, dq, dk, dv, causal=True)  # its own scratch: other addresses there
    assert [p.name for p in fresh.prepared] == [name for name, _ in first]
    # flash_bwd's arguments (tensor maps of q, k, v, dO, dK, dV) are the same bytes; dQ's scratch is elsewhere
    assert fresh.prepared[1].packed[1:6] == first[1][1][1:6]


def test_the_slots_mode_is_never_remembered(stubbed: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[int] = []
    monkeypatch.setattr(bwd, "free_device_bytes", lambda like: checked.append(1) or 1 << 40)
    q, k, v = _qkv(n=128)
    o, lse = fwd.flash_fwd(q, k, v)
    options = {"SWAPAB": 0, "DQ_MODE": 2}
    for _ in range(2):
        bwd.flash_bwd(q, k, v, o, lse, _Tensor(q.shape), **options)
    assert len(checked) == 2  # its free-memory check ran on each call


def test_nothing_remembered_holds_an_array(stubbed: list[Any]) -> None:
    q, k, v = _qkv()
    o, lse = fwd.flash_fwd(q, k, v)
    bwd.flash_bwd(q, k, v, o, lse, _Tensor(q.shape))
    alive = [weakref.ref(x) for x in (q, k, v, o, lse)]
    del q, k, v, o, lse
    gc.collect()
    assert len(fwd.LAUNCHES) >= 4 and all(ref() is None for ref in alive)


def test_the_backward_packs_its_scratch_where_it_is_now(stubbed: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    kept: list[tuple[Any, ...]] = []
    made = bwd.gpu_scratch
    monkeypatch.setattr(bwd, "gpu_scratch", lambda *a: kept.append(made(*a)) or kept[-1])  # each call's stays alive
    q, k, v = _qkv()
    o, lse = fwd.flash_fwd(q, k, v)
    do = _Tensor(q.shape)
    for _ in range(3):
        grads = bwd.flash_bwd(q, k, v, o, lse, do)
        delta, dq_acc, _turns = kept[-1]
        main = stubbed[-2][1]  # flash_bwd's: tensor maps of q, k, v, dO, dK, dV, the dQ accumulator, the statistics
        assert main[6][:8] == dq_acc.data_ptr().to_bytes(8, "little")
        assert main[7][:8] == delta.data_ptr().to_bytes(8, "little")
        assert main[4][:8] == grads[1].data_ptr().to_bytes(8, "little")
        del grads
    assert len({d.data_ptr() for d, _, _ in kept}) == 3
