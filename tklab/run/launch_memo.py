"""Packed launches remembered by the values their bytes are made of, so that a repeated call only launches.

Why: a training step calls the course's attention with the same shapes every layer and step, and PyTorch's
caching allocator hands back the same addresses step after step. Checking the arguments, building tensor maps
and packing the parameters again cost ~1 ms a forward+backward on the H100 (bench/attention_host.py), several
times the kernels' own time at the tiny GPT's shapes. A launch's parameter bytes are a function of the
arrays' addresses, shapes, strides and dtypes and of the call's options: a caller that keys an entry by all
of them gets back exactly the bytes a fresh ``prepare`` would pack.

An entry holds no array (``Prepared.detached``): keeping tensors alive here would keep their memory from being
reused, which is both a leak and the end of the hits. Safe because the caller holds its arrays for the call,
and the driver copies the parameters when ``cuLaunchKernel`` returns.

    memo = LaunchMemo(); memo.get(key) -> value or None; memo.put(key, value) -> value   (least recently used out)
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Any


class LaunchMemo:
    """A bounded map, least recently used first out; ``hits`` and ``misses`` count ``get``'s answers."""

    def __init__(self, size: int = 256) -> None:
        if size < 1:
            raise ValueError(f"a LaunchMemo holds at least one entry, got size={size}")
        self.size, self.hits, self.misses = size, 0, 0
        self._entries: OrderedDict[Hashable, Any] = OrderedDict()

    def get(self, key: Hashable) -> Any:
        """The value put under ``key``, or None."""
        value = self._entries.get(key)
        if value is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return value

    def put(self, key: Hashable, value: Any) -> Any:
        """Remember ``value`` under ``key`` (dropping the least recently used entry when full); returns it."""
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)
        return value

    def clear(self) -> None:
        """Forget every entry and the counts."""
        self._entries.clear()
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)
