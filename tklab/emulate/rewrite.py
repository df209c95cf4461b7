"""Preprocessed CUDA → host C++: inline PTX, ``__shared__`` declarations and kernel entry points.

Works on the output of the preprocessing step (macros expanded, so an asm template built by macros,
as the tile library's wgmma wrappers are, is one string here), token by token:

- ``asm [volatile] (template : outputs : inputs : clobbers)`` → a C++ block (``ptx.translate``);
- ``__shared__ T x[..];`` → a reference into the block's shared-memory arena, placed when a thread first
  reaches it (``extern __shared__ T x[];`` → a pointer to the dynamic shared memory);
- after each ``__global__`` function's body: ``extern "C"`` entry points that unpack the argument array
  and report the parameter sizes (and the same for ``name_expressions`` at the end).

Public API: ``rewrite(text, name_expressions=()) -> Rewritten``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from . import ptx

_TOKEN = re.compile(
    r"""(?P<ws>[ \t\r\f\v]+|\n)
      | (?P<marker>^\#[^\n]*)
      | (?P<str>(?:u8|u|U|L)?"(?:\\.|[^"\\\n])*")
      | (?P<raw>R"(?P<delim>[^(\s]*)\((?:.|\n)*?\)(?P=delim)")
      | (?P<chr>(?:u8|u|U|L)?'(?:\\.|[^'\\\n])*')
      | (?P<id>[A-Za-z_]\w*)
      | (?P<num>\.?\d(?:[\w.]|[eEpP][+-])*)
      | (?P<punct>::|->\*?|\.\.\.|<<=|>>=|<=>|[<>!=+\-*/%&|^]=|&&|\|\||\+\+|--|<<|>>|\#\#
                 |[{}()\[\];:,.<>?~!+\-*/%&|^=\#])
      | (?P<other>.)""",
    re.X | re.M,
)


@dataclass
class Tok:
    kind: str
    text: str
    start: int
    end: int


@dataclass
class Rewritten:
    """The host C++ text, the kernels it defines (source name → entry symbol), and build-time notes."""

    text: str
    kernels: dict[str, str] = field(default_factory=dict)
    unsupported: list[str] = field(default_factory=list)
    asm_count: int = 0
    shared_count: int = 0


class RewriteError(ValueError):
    """The source has a construct the emulator cannot rewrite; the message says which and where."""


def tokenize(text: str) -> list[Tok]:
    toks = []
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup or "other"
        if kind in ("ws", "marker"):
            continue
        if kind == "raw":
            kind = "str"
        toks.append(Tok(kind, m.group(), m.start(), m.end()))
    return toks


def _unescape(lit: str) -> str:
    body = lit[lit.index('"') + 1:-1]
    out, i = [], 0
    simple = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "0": "\0", "a": "\a", "v": "\v"}
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            n = body[i + 1]
            if n in "01234567":
                j = i + 1
                while j < len(body) and j < i + 4 and body[j] in "01234567":
                    j += 1
                out.append(chr(int(body[i + 1:j], 8)))
                i = j
                continue
            if n == "x":
                j = i + 2
                while j < len(body) and body[j] in "0123456789abcdefABCDEF":
                    j += 1
                out.append(chr(int(body[i + 2:j], 16)))
                i = j
                continue
            out.append(simple.get(n, n))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _match(toks: list[Tok], i: int) -> int:
    """Index of the bracket closing the one at ``toks[i]``."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    open_, close = toks[i].text, pairs[toks[i].text]
    depth = 0
    for j in range(i, len(toks)):
        if toks[j].text == open_:
            depth += 1
        elif toks[j].text == close:
            depth -= 1
            if depth == 0:
                return j
    raise RewriteError(f"unbalanced {open_!r}")


def _split(toks: list[Tok], sep: str) -> list[list[Tok]]:
    parts: list[list[Tok]] = [[]]
    depth = 0
    for t in toks:
        if t.text in "([{":
            depth += 1
        elif t.text in ")]}":
            depth -= 1
        if t.text == sep and depth == 0:
            parts.append([])
        else:
            parts[-1].append(t)
    return parts


def _text(src: str, toks: list[Tok]) -> str:
    return src[toks[0].start:toks[-1].end] if toks else ""


# ---- asm -------------------------------------------------------------------------------------------------
def _asm(src: str, toks: list[Tok], i: int) -> tuple[int, int, str, list[str]]:
    """(start, end) character span of the asm statement at toks[i] and its replacement."""
    j = i + 1
    while toks[j].text in ("volatile", "__volatile__", "__volatile", "inline", "goto"):
        j += 1
    if toks[j].text != "(":
        raise RewriteError("asm without a parenthesised template")
    close = _match(toks, j)
    inner: list[Tok] = []
    for t in toks[j + 1:close]:  # at the top level of an asm statement "::" is two separators (no outputs)
        if t.text == "::":
            inner += [Tok("punct", ":", t.start, t.start + 1), Tok("punct", ":", t.start + 1, t.end)]
        else:
            inner.append(t)
    sections = _split(inner, ":")
    tmpl_toks = sections[0]
    if not tmpl_toks or any(t.kind != "str" for t in tmpl_toks):
        raise RewriteError(f"the asm template is not a string literal: {_text(src, tmpl_toks)!r}")
    template = "".join(_unescape(t.text) for t in tmpl_toks)
    operands: list[ptx.Operand] = []
    for sec_index, output in ((1, True), (2, False)):
        if len(sections) <= sec_index or not sections[sec_index]:
            continue
        for op in _split(sections[sec_index], ","):
            if not op:
                continue
            name = ""
            k = 0
            if op[0].text == "[":
                name = op[1].text
                k = 3
            if op[k].kind != "str" or op[k + 1].text != "(":
                raise RewriteError(f"cannot read the asm operand {_text(src, op)!r}")
            constraint = "".join(_unescape(t.text) for t in op[k:k + 1])
            end = _match(op, k + 1)
            expr = _text(src, op[k + 2:end])
            operands.append(ptx.Operand(constraint, expr, output, name))
    try:
        code = ptx.translate(template, operands)
    except ptx.PtxError as e:
        code = f'::tkemu::fail("invalid", "inline PTX the emulator cannot read: {_c(str(e))}")'
        return toks[i].start, toks[close].end, code, [f"{template.strip()} ({e})"]
    return toks[i].start, toks[close].end, code, ptx.unsupported(template)


def _c(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ").replace("%", "%%")


# ---- __shared__ ----------------------------------------------------------------------------------------------
_SPEC_DROP = {"static", "extern", "__tkemu_shared__", "volatile"}


def _shared(src: str, toks: list[Tok], i: int, scope_depth: int, counter: int) -> tuple[int, int, str]:
    start = i
    while start > 0 and toks[start - 1].text not in (";", "{", "}", ":") and toks[start - 1].kind != "str":
        start -= 1
    if start > 0 and toks[start - 1].text == ":" and start > 1 and toks[start - 2].text == ":":
        pass
    end = i
    depth = 0
    while end < len(toks):
        t = toks[end].text
        if t in "([{":
            depth += 1
        elif t in ")]}":
            depth -= 1
        elif t == ";" and depth == 0:
            break
        end += 1
    decl = [t for t in toks[start:end]]
    is_extern = any(t.text == "extern" for t in decl)
    body = [t for t in decl if t.text not in _SPEC_DROP]
    parts = _split_angles(body)
    # The first part is "spec declarator"; the declarator is the last name at depth 0 and its [..]s.
    first = parts[0]
    k = len(first)
    while k > 0 and first[k - 1].text == "]":
        depth = 0
        while k > 0:
            k -= 1
            if first[k].text == "]":
                depth += 1
            elif first[k].text == "[":
                depth -= 1
                if depth == 0:
                    break
    if k == 0 or first[k - 1].kind != "id":
        raise RewriteError(f"cannot read the __shared__ declaration {_text(src, decl)!r}")
    spec_toks = first[:k - 1]
    spec = " ".join(t.text for t in spec_toks)
    declarators = [(first[k - 1].text, " ".join(t.text for t in first[k:]))]
    for p in parts[1:]:
        stars = ""
        while p and p[0].text in ("*", "&"):
            stars += p[0].text
            p = p[1:]
        if not p or p[0].kind != "id":
            raise RewriteError(f"cannot read the __shared__ declaration {_text(src, decl)!r}")
        declarators.append((p[0].text, stars + "|" + " ".join(t.text for t in p[1:])))
    out = []
    global_scope = scope_depth == 0
    for n, (name, dims) in enumerate(declarators):
        stars, _, dims = dims.rpartition("|") if "|" in dims else ("", "", dims)
        if is_extern:
            base = re.sub(r"\balignas\s*\([^()]*(\([^()]*\))?[^()]*\)|__attribute__\s*\(\(.*?\)\)", " ", spec)
            line = (f"{'static thread_local ' if global_scope else ''}{base} {stars}* const {name} = "
                    f"reinterpret_cast<{base} {stars}*>(::tkemu::dynamic_shared());")
        else:
            s = f"__tkemu_sh_{counter}_{n}"
            fn = "shared_gvar" if global_scope else "shared_var"
            line = (f"struct {s} {{ {spec} {stars}{name} {dims}; }}; "
                    f"{'static thread_local ' if global_scope else ''}auto& {name} = "
                    f"::tkemu::{fn}<{s}>(\"{name}\", (decltype({s}::{name})*)nullptr)->{name};")
        out.append(line)
    return toks[start].start, toks[end].end, " ".join(out)


def _split_angles(toks: list[Tok]) -> list[list[Tok]]:
    """Split a declaration at its top-level commas (commas inside <>, (), [], {} do not count)."""
    parts: list[list[Tok]] = [[]]
    depth = 0
    for t in toks:
        if t.text in ("(", "[", "{", "<"):
            depth += 1
        elif t.text in (")", "]", "}", ">"):
            depth -= 1
        elif t.text == ">>":
            depth -= 2
        if t.text == "," and depth == 0:
            parts.append([])
        else:
            parts[-1].append(t)
    return parts


# ---- kernels ------------------------------------------------------------------------------------------------------
def _kernel(toks: list[Tok], i: int) -> tuple[str | None, int | None]:
    """(name, index of the body's closing brace) of the __global__ function at toks[i]; name None for a
    template or a declaration without a body."""
    back = i - 1
    while back >= 0 and (toks[back].kind == "str" or toks[back].text in ("extern", "static", "inline", "constexpr")):
        back -= 1
    is_template = back >= 0 and toks[back].text in (">", ">>")
    j = i + 1
    while j < len(toks) and toks[j].text != "(":
        if toks[j].text == "__attribute__" and toks[j + 1].text == "(":
            j = _match(toks, j + 1)
        j += 1
    name = toks[j - 1].text
    close = _match(toks, j)
    k = close + 1
    while k < len(toks) and toks[k].text not in ("{", ";"):
        k += 1
    if k >= len(toks) or toks[k].text == ";":
        return None, None
    end = _match(toks, k)
    return (None if is_template else name), end


def _entry(symbol: str, target: str) -> str:
    return (f' extern "C" void __tkemu_entry_{symbol}(void* const* a) {{ ::tkemu::invoke(&{target}, a); }}'
            f' extern "C" const int* __tkemu_sig_{symbol}() {{ return ::tkemu::signature(&{target}); }}')


def rewrite(text: str, name_expressions: tuple[str, ...] | list[str] = ()) -> Rewritten:
    """Rewrite preprocessed source (see the module docstring)."""
    toks = tokenize(text)
    edits: list[tuple[int, int, str]] = []
    result = Rewritten(text="")
    depth = 0  # brace depth, to tell namespace scope from function scope (approximately: any brace)
    scope: list[str] = []  # what each open brace is: "ns" (namespace / extern "C") or "other"
    i = 0
    n = len(toks)
    while i < n:
        t = toks[i]
        if t.text == "{":
            prev = toks[i - 1] if i else None
            is_ns = prev is not None and (prev.kind == "str" or (i >= 2 and toks[i - 2].text == "namespace")
                                          or prev.text == "namespace")
            scope.append("ns" if is_ns else "other")
            depth += 1
        elif t.text == "}":
            if scope:
                scope.pop()
            depth -= 1
        elif t.kind == "id" and t.text in ("asm", "__asm__", "__asm") and i + 1 < n and \
                toks[i + 1].text in ("(", "volatile", "__volatile__", "__volatile", "inline", "goto"):
            start, end, code, notes = _asm(text, toks, i)
            edits.append((start, end, code))
            result.asm_count += 1
            result.unsupported.extend(notes)
            while i < n and toks[i].end <= end:
                i += 1
            continue
        elif t.text == "__tkemu_shared__":
            function_scope = any(s == "other" for s in scope)
            start, end, code = _shared(text, toks, i, 1 if function_scope else 0, result.shared_count)
            edits.append((start, end, code))
            result.shared_count += 1
            while i < n and toks[i].end <= end:
                i += 1
            continue
        elif t.text == "__tkemu_global__":
            name, body_end = _kernel(toks, i)
            if name is not None and body_end is not None:
                symbol = name
                result.kernels[name] = symbol
                pos = toks[body_end].end
                edits.append((pos, pos, _entry(symbol, name)))
        i += 1
    out, last = [], 0
    for start, end, code in sorted(edits, key=lambda e: (e[0], e[1])):
        if start < last:
            continue
        out.append(text[last:start])
        out.append(code)
        last = end
    out.append(text[last:])
    tail = []
    for k, expr in enumerate(name_expressions):
        symbol = f"x{k}"
        result.kernels[expr] = symbol
        tail.append(_entry(symbol, expr.strip()))
    result.text = "".join(out) + "\n" + "\n".join(tail) + "\n"
    return result
