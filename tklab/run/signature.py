"""Read a kernel's parameter list from its CUDA source, so launches can be checked and scalars packed.

The driver tells us each parameter's size (``cuFuncGetParamInfo``) but not its type; the source does.
Knowing that ``n`` is an ``int`` and ``alpha`` a ``float`` lets ``k(grid, block, (x, 3, 0.5))`` pack
Python numbers correctly and reject a float64 array passed where ``float*`` is declared.

Public API: ``find(source, kernel_name) -> list[Param] | None``, ``Param``, ``SCALARS``; the two pieces of reading
C++ text the emulator's asm reader shares: ``strip_comments(text)``, ``split_top(text, sep, brackets)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

#: C scalar types a kernel parameter may have → numpy dtype used to pack a Python number.
SCALARS: dict[str, np.dtype] = {
    **{t: np.dtype(np.int32) for t in ("int", "signed", "signed int", "int32_t", "unsigned", "unsigned int",
                                        "uint32_t", "uint")},
    **{t: np.dtype(np.int64) for t in ("long", "long long", "int64_t", "long int", "ptrdiff_t")},
    **{t: np.dtype(np.uint64) for t in ("unsigned long", "unsigned long long", "uint64_t", "size_t")},
    **{t: np.dtype(np.int16) for t in ("short", "int16_t")},
    **{t: np.dtype(np.uint16) for t in ("unsigned short", "uint16_t")},
    **{t: np.dtype(np.int8) for t in ("char", "signed char", "int8_t")},
    **{t: np.dtype(np.uint8) for t in ("unsigned char", "uint8_t")},
    "bool": np.dtype(np.bool_),
    "float": np.dtype(np.float32),
    "double": np.dtype(np.float64),
}
SCALARS["unsigned int"] = np.dtype(np.uint32)
SCALARS["unsigned"] = np.dtype(np.uint32)
SCALARS["uint32_t"] = np.dtype(np.uint32)
SCALARS["uint"] = np.dtype(np.uint32)

#: Pointee types → the array dtypes that may be passed for them (by dtype name, so bf16 needs no import).
POINTEES: dict[str, tuple[str, ...]] = {
    "float": ("float32",), "double": ("float64",), "int": ("int32",), "int32_t": ("int32",),
    "unsigned": ("uint32",), "unsigned int": ("uint32",), "uint32_t": ("uint32",),
    "__half": ("float16",), "half": ("float16",), "__nv_bfloat16": ("bfloat16", "uint16", "int16"),
    "bf16": ("bfloat16", "uint16", "int16"), "int8_t": ("int8",), "uint8_t": ("uint8",),
    "float4": ("float32",), "float2": ("float32",), "int64_t": ("int64",), "long long": ("int64",),
}

_QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "restrict", "__grid_constant__", "struct"}


@dataclass(frozen=True)
class Param:
    """One declared parameter: its type as written (qualifiers dropped) and name."""

    ctype: str
    name: str
    pointer: bool

    @property
    def base(self) -> str:
        """The type without pointer stars: ``float`` for ``const float* __restrict__``."""
        return self.ctype.replace("*", "").strip()


def strip_comments(text: str) -> str:
    """``text`` with its ``/* */`` and ``//`` comments replaced by a space each."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def split_top(text: str, sep: str = ",", brackets: str = "<>()[]") -> list[str]:
    """``text`` split on ``sep`` where no pair of ``brackets`` (openers and closers alternating) is open: template
    arguments, calls and PTX operand lists may hold a comma. Parts come stripped; an empty last part is dropped."""
    opens, closes = brackets[0::2], brackets[1::2]
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in opens:
            depth += 1
        elif ch in closes:
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    tail = "".join(cur).strip()
    if tail:
        parts.append(tail)
    return parts


def _parse_param(text: str) -> Param:
    text = re.sub(r"\[\s*\d*\s*\]", "*", text.strip())  # float a[] → float* a
    text = re.sub(r"__align__\s*\(\s*\d+\s*\)", " ", text)
    m = re.match(r"^(.*?)([A-Za-z_]\w*)\s*$", text, re.S)
    if not m or not m.group(1).strip():
        return Param(ctype=" ".join(text.split()), name="", pointer="*" in text)
    ctype, name = m.group(1), m.group(2)
    words = [w for w in re.split(r"\s+", ctype.replace("*", " * ").replace("&", " & ")) if w]
    words = [w for w in words if w not in _QUALIFIERS]
    ctype = " ".join(words).replace(" *", "*")
    return Param(ctype=ctype, name=name, pointer="*" in ctype)


def find(source: str, kernel: str) -> list[Param] | None:
    """Parameters of ``__global__ ... kernel(...)`` in ``source``, or None if no such declaration."""
    src = strip_comments(source)
    pat = re.compile(r"__global__\b(?:[^;{(]|\([^()]*\))*?\b" + re.escape(kernel) + r"\s*\(", re.S)
    m = pat.search(src)
    if not m:
        return None
    i, depth = m.end(), 1
    start = i
    while i < len(src) and depth:
        depth += {"(": 1, ")": -1}.get(src[i], 0)
        i += 1
    body = src[start:i - 1].strip()
    if not body or body == "void":
        return []
    return [_parse_param(p) for p in split_top(body)]
