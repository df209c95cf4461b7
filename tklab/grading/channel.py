"""The pipe between a checking parent and the child that runs a learner's exercise: what may cross it.

The child sends frames: a 4-byte length, a JSON header (``type``, ``nbytes``, fields), then ``nbytes`` of
payload (outputs are raw ``.npy`` arrays, never pickles). The parent reads them with ``read_frames``
and ``array_from`` (dtype and shape checked), so nothing malformed is ever taken for a result. The child
also prints ``STAGE`` lines on stdout as it goes, so the parent can say where a hang or crash happened.

Every frame carries the run's key: 32 random hex digits the parent hands the child on a pipe of their own,
which the child reads and closes first thing, before it imports or loads any learner code (``read_key``).
A frame without the key did not come from the harness (a file that writes into the pipe at import, say)
and the parent refuses the whole run (``tklab.grading.judge``).

Public API: ``frame``, ``read_frames``, ``ChannelError``, ``array_from``, ``ChildIO`` (the child's side:
the parent's cases and inputs in, frames out), ``read_key``, ``STAGE``, ``PTX_FILE``, ``SPEC_FILE``.
"""

from __future__ import annotations

import io
import json
import os
import struct
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

#: Prefix of the progress lines a child prints on stdout.
STAGE = "@@tklab-stage "
#: The file in the run's folder holding the PTX the checking process compiled: the program an emulated child runs.
PTX_FILE = "program.ptx"
#: The file in the run's folder holding a copy of the exercise's spec (the sandbox hides ``solutions/``).
SPEC_FILE = "exercise_spec.py"

_HEADER = struct.Struct(">I")
_MAX_HEADER = 1 << 16


def frame(message: str, payload: bytes = b"", /, **fields: Any) -> bytes:
    """One message: a 4-byte length, a JSON header (``type``, ``nbytes``, fields), then ``nbytes`` of payload."""
    head = json.dumps({**fields, "type": message, "nbytes": len(payload)}, default=str).encode()
    return _HEADER.pack(len(head)) + head + payload


class ChannelError(ValueError):
    """The bytes on the channel are not what a runner child sends."""


def read_frames(data: bytes) -> list[tuple[dict[str, Any], bytes]]:
    """Split the channel's bytes into (header, payload) pairs; raises ChannelError on anything malformed."""
    out = []
    pos = 0
    while pos < len(data):
        if pos + _HEADER.size > len(data):
            raise ChannelError("a message is cut short")
        (n,) = _HEADER.unpack_from(data, pos)
        if n > _MAX_HEADER or pos + _HEADER.size + n > len(data):
            raise ChannelError("a message header is cut short or too long")
        try:
            head = json.loads(data[pos + _HEADER.size:pos + _HEADER.size + n])
        except ValueError:
            raise ChannelError("a message header is not JSON") from None
        if not isinstance(head, dict) or not isinstance(head.get("type"), str) or \
                not isinstance(head.get("nbytes"), int) or head["nbytes"] < 0:
            raise ChannelError("a message header lacks its type or size")
        start = pos + _HEADER.size + n
        end = start + head["nbytes"]
        if end > len(data):
            raise ChannelError(f"a {head['type']!r} message is cut short")
        out.append((head, bytes(data[start:end])))
        pos = end
    return out


def array_from(payload: bytes, shape: tuple[int, ...], dtype: str, what: str) -> np.ndarray:
    """A raw ``.npy`` payload as an array of exactly ``shape`` and ``dtype``; no pickles, no objects."""
    try:
        arr = np.lib.format.read_array(io.BytesIO(payload), allow_pickle=False)
    except Exception as e:  # noqa: BLE001 - whatever is wrong with the bytes, they are not an array
        raise ChannelError(f"{what} is not array data ({type(e).__name__})") from None
    if arr.dtype != np.dtype(dtype) or arr.shape != tuple(shape):
        raise ChannelError(f"{what} came back as {arr.dtype}{list(arr.shape)}, not {np.dtype(dtype)}{list(shape)}")
    return arr


def read_key(fd: int) -> str:
    """The run's key, read from ``fd`` and the descriptor closed (the child does it before any learner code)."""
    data = b""
    while len(data) < 64:
        chunk = os.read(fd, 64)
        if not chunk:
            break
        data += chunk
    os.close(fd)
    return data.decode("ascii", "replace").strip()


class ChildIO:
    """The child's side of a run: the parent's cases and inputs in, frames out (each carrying the run's key)."""

    def __init__(self, write: Callable[[bytes], Any], cases: Sequence[dict[str, int]],
                 inputs: Callable[[int], dict[str, np.ndarray]], bench_seed: int = 0, key: str = ""):
        self._write, self.cases, self._inputs, self.bench_seed = write, list(cases), inputs, bench_seed
        self._key = key

    @classmethod
    def from_folder(cls, fd: int, folder: Path, bench_seed: int, key: str = "") -> ChildIO:
        cases = json.loads((folder / "cases.json").read_text())
        out = os.fdopen(fd, "wb", buffering=0)

        def inputs(i: int) -> dict[str, np.ndarray]:
            return {p.name.split("-", 2)[2][:-4]: np.load(p, allow_pickle=False)
                    for p in sorted(folder.glob(f"case-{i}-*.npy"))}

        def write(data: bytes) -> None:
            out.write(data)

        return cls(write, cases, inputs, bench_seed, key)

    def inputs(self, i: int) -> dict[str, np.ndarray]:
        return self._inputs(i)

    def send(self, message: str, payload: bytes = b"", /, **fields: Any) -> None:
        self._write(frame(message, payload, **fields, key=self._key))

    def send_outputs(self, i: int, arrays: dict[str, np.ndarray]) -> None:
        for name, arr in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.ascontiguousarray(arr), allow_pickle=False)
            self.send("output", buf.getvalue(), case=i, name=name)


