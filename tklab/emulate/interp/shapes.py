"""The shapes of a kernel's ``__shared__`` arrays, so a message can say ``As[3][7]`` instead of ``As (+124 bytes)``.

PTX keeps a shared array as bytes (``.shared .align 4 .b8 _ZZ11smem_matmulE2As[4096]``); the element type and the
extents are in the source. This reads each ``__shared__ T name[A][B];`` declaration, evaluates its extents from
integer literals, ``#define``s, ``constexpr``/``const`` integers, the ``-D`` options and the integers the module
exports, and keeps a shape only when it accounts for exactly the symbol's bytes. It names elements in messages; it
decides nothing.

Public API: ``shared_shapes(source, options, constants) -> dict[name, (elem_bytes, dims)]``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence

_ELEM = {"char": 1, "signed char": 1, "unsigned char": 1, "bool": 1, "int8_t": 1, "uint8_t": 1, "short": 2,
         "unsigned short": 2, "int16_t": 2, "uint16_t": 2, "half": 2, "__half": 2, "bf16": 2, "__nv_bfloat16": 2,
         "int": 4, "unsigned": 4, "unsigned int": 4, "int32_t": 4, "uint32_t": 4, "float": 4, "long long": 8,
         "unsigned long long": 8, "int64_t": 8, "uint64_t": 8, "double": 8, "float2": 8, "int2": 8, "uint2": 8,
         "half2": 4, "__half2": 4, "bf16_2": 4, "__nv_bfloat162": 4, "float4": 16, "int4": 16, "uint4": 16,
         "long": 8, "unsigned long": 8, "size_t": 8}
_DECL = re.compile(r"__shared__\s+(?:alignas\s*\(\s*\d+\s*\)\s+|__align__\s*\(\s*\d+\s*\)\s+)?"
                   r"((?:const\s+|volatile\s+)*(?:unsigned\s+|signed\s+)?(?:long\s+long|[A-Za-z_][\w:]*))\s+"
                   r"([A-Za-z_]\w*)\s*((?:\[[^\]\[]+\]\s*)+);")
_CONST = re.compile(r"(?:constexpr|const|static\s+constexpr|static\s+const)\s+(?:int|unsigned|int32_t|uint32_t|"
                    r"size_t|long)\s+([A-Za-z_]\w*)\s*=\s*([^;{}]+);")
_DEFINE = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)\s+([^\n/]+)", re.M)


def _eval(expr: str, names: dict[str, int]) -> int | None:
    try:
        tree = ast.parse(expr.strip().replace("/", "//").replace("////", "//"), mode="eval")
    except SyntaxError:
        return None

    def ev(n: ast.AST) -> int:
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return n.value
        if isinstance(n, ast.Name) and n.id in names:
            return names[n.id]
        if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)):
            a, b = ev(n.left), ev(n.right)
            return {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}.get(type(n.op), 0) if not isinstance(
                n.op, (ast.FloorDiv, ast.Mod)) else (a // b if isinstance(n.op, ast.FloorDiv) else a % b)
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -ev(n.operand)
        raise ValueError
    try:
        return ev(tree)
    except (ValueError, ZeroDivisionError, RecursionError):
        return None


def _names(source: str, options: Sequence[str], constants: dict[str, int]) -> dict[str, int]:
    names = dict(constants)
    for o in options:
        m = re.match(r"-D\s*([A-Za-z_]\w*)(?:=(.*))?$", str(o))
        if m:
            v = _eval(m.group(2) or "1", names)
            if v is not None:
                names[m.group(1)] = v
    for _ in range(2):  # definitions in terms of earlier ones
        for m in list(_DEFINE.finditer(source)) + list(_CONST.finditer(source)):
            if m.group(1) in names:
                continue
            v = _eval(re.sub(r"\b(\d+)[uUlL]+\b", r"\1", m.group(2)), names)
            if v is not None:
                names[m.group(1)] = v
    return names


def shared_shapes(source: str, options: Sequence[str] = (), constants: dict[str, int] | None = None
                  ) -> dict[str, tuple[int, tuple[int, ...]]]:
    """``name -> (element bytes, extents)`` for every ``__shared__`` array declared with evaluable extents."""
    text = re.sub(r"/\*.*?\*/", " ", source, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    names = _names(text, options, constants or {})
    out: dict[str, tuple[int, tuple[int, ...]]] = {}
    seen: set[str] = set()
    for m in _DECL.finditer(text):
        base = re.sub(r"\b(const|volatile)\b", "", m.group(1)).strip()
        base = re.sub(r"\s+", " ", base)
        elem = _ELEM.get(base)
        dims = [_eval(d, names) for d in re.findall(r"\[([^\]\[]+)\]", m.group(3))]
        name = m.group(2)
        if name in seen:  # declared twice (two kernels): shapes may differ, keep neither unless equal
            if name in out and elem and None not in dims and out[name] != (elem, tuple(dims)):  # type: ignore[arg-type]
                del out[name]
            continue
        seen.add(name)
        if elem and dims and None not in dims and all(d > 0 for d in dims):  # type: ignore[operator]
            out[name] = (elem, tuple(dims))  # type: ignore[arg-type]
    return out
