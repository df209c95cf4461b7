"""Access patterns the bank explorer offers, as plain functions: state in, 32 byte offsets out."""

from __future__ import annotations

import ast
from collections.abc import Callable

from ..models import layouts

PATTERNS = ("stride", "broadcast", "tile row walk", "tile column walk", "expression", "function")

_ALLOWED = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Name, ast.Load, ast.Add, ast.Sub, ast.Mult,
            ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.LShift, ast.RShift, ast.BitAnd, ast.BitOr, ast.BitXor,
            ast.USub,
            ast.IfExp, ast.Compare, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq, ast.Invert, ast.Call)
_FUNCS = {"min": min, "max": max, "abs": abs}


def expression_offsets(expr: str) -> list[int]:
    """Evaluate an integer expression of ``lane`` (e.g. ``"4 * (lane * 33 % 64)"``) for lanes 0..31.

    Only arithmetic, comparisons, ``x if c else y`` and min/max/abs are allowed; ``None`` results are
    not possible here (use a function for lanes that sit out).
    """
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as e:
        raise ValueError(f"cannot read the expression {expr!r}: {e.msg}") from None
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED):
            raise ValueError(f"the expression may use lane, numbers and arithmetic only, not {type(node).__name__}")
        if isinstance(node, ast.Name) and node.id not in ("lane", *_FUNCS):
            raise ValueError(f"unknown name {node.id!r} in the expression: only 'lane' is defined")
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in _FUNCS):
            raise ValueError("the expression may call min, max and abs only")
    code = compile(tree, "<pattern>", "eval")
    out = []
    for lane in range(32):
        v = eval(code, {"__builtins__": {}}, {"lane": lane, **_FUNCS})  # noqa: S307 - checked AST above
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"the expression gives {v!r} for lane {lane}; it must give an integer byte offset "
                             "(// divides integers)")
        out.append(v)
    return out


def bank_pattern(pattern: str = "stride", *, width: int = 4, stride: int = 1, group: int = 1, cols: int = 64,
                 padding: int = 0, swizzle: str = "none", column: int = 0, expression: str = "4 * lane",
                 fn: Callable[[int], int | None] | None = None) -> list[int | None]:
    """The 32 lanes' byte offsets for one explorer state.

    - ``stride``: lane l reads element ``l * stride`` (elements of ``width`` bytes);
    - ``broadcast``: ``group`` consecutive lanes share an element, groups ``stride`` elements apart;
    - ``tile row walk`` / ``tile column walk``: a bf16 tile ``cols`` wide whose rows are padded by
      ``padding`` bytes; the warp reads consecutive ``width``-byte pieces of the rows, or one piece
      (``column``, counted in pieces) of 32 consecutive rows;
    - ``expression``: an arithmetic expression of ``lane``; ``function``: ``fn(lane)`` (None = sits out).

    Every offset then goes through ``layouts.swizzle(offset, swizzle)``.
    """
    if pattern not in PATTERNS:
        raise ValueError(f"unknown pattern {pattern!r}; choose one of {', '.join(PATTERNS)}")
    offs: list[int | None]
    if pattern == "stride":
        offs = [lane * stride * width for lane in range(32)]
    elif pattern == "broadcast":
        if group < 1:
            raise ValueError(f"lanes per element must be at least 1, not {group}")
        offs = [(lane // group) * stride * width for lane in range(32)]
    elif pattern in ("tile row walk", "tile column walk"):
        row = 2 * cols
        if width > row:
            raise ValueError(f"a {width}-byte access does not fit in a row of {cols} bf16 ({row} bytes)")
        if padding < 0:
            raise ValueError(f"padding must be >= 0 bytes, not {padding}")
        pitch = row + padding
        if pattern == "tile row walk":
            offs = [(lane * width // row) * pitch + lane * width % row for lane in range(32)]
        else:
            if not 0 <= column * width < row:
                raise ValueError(f"column {column} of {width}-byte pieces is outside a {row}-byte row")
            offs = [lane * pitch + column * width for lane in range(32)]
    elif pattern == "expression":
        offs = list(expression_offsets(expression))
    else:
        if fn is None:
            raise ValueError("the 'function' pattern needs a function of the lane: bank_explorer(fn=...)")
        offs = []
        for lane in range(32):
            v = fn(lane)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                try:
                    v = int(v)  # numpy integers
                except (TypeError, ValueError):
                    raise ValueError(f"fn({lane}) returned {v!r}; it must return a byte offset or None") from None
            offs.append(v)
    if swizzle != "none":
        for lane, o in enumerate(offs):
            if o is not None and o < 0:
                raise ValueError(f"lane {lane}: offset {o} is negative")
        offs = [None if o is None else layouts.swizzle(o, swizzle) for o in offs]
    return offs
