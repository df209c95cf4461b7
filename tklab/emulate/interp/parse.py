"""PTX text → a syntax tree: module variables, functions, their statements, scopes and source locations.

This reads what NVRTC (or numba's NVVM) emitted, not what a learner typed: the grammar is PTX's, with
inline-asm blocks as nested ``{ }`` scopes that declare their own registers and labels. Nothing here knows
what an instruction means; ``decode`` gives it meaning and ``interp.cpp`` executes it.

``.loc`` lines (``-lineinfo``) become ``Loc`` records with their ``inlined_at`` chain, so a statement inside
the tile library knows the learner's line that called it. ``.section`` blocks (debug strings) are skipped.

Public API: ``parse(text) -> Module``, ``Module``, ``Function``, ``Statement``, ``Operand``, ``VarDecl``,
``RegDecl``, ``Label``, ``Loc``, ``PtxSyntaxError``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


class PtxSyntaxError(ValueError):
    """The PTX text cannot be read (a compiler we do not know, or text that is not PTX)."""


@dataclass(frozen=True)
class Loc:
    """A ``.loc``: file number, line, column, and the location it was inlined at (index into ``Module.locs``)."""

    file: int
    line: int
    col: int
    inlined_at: int = -1


@dataclass
class Operand:
    """One operand as written. ``kind``: reg (a name: register, symbol or label, resolved later), imm (an
    integer), fimm (a float's bits, ``width`` 32 or 64), dimm (a decimal float), vec (``items``), addr (``base``
    name or None, ``offset``; ``items`` holds a TMA coordinate vector), list (``( a, b )`` of a call), pair
    (``p|q``), sink (``_``), str (a string literal)."""

    kind: str
    name: str = ""
    value: int = 0
    fvalue: float = 0.0
    width: int = 0
    neg: bool = False
    items: list[Operand] = field(default_factory=list)
    base: str | None = None
    offset: int = 0


@dataclass
class Statement:
    opcode: str
    operands: list[Operand]
    guard: str | None
    guard_neg: bool
    loc: int
    line: int
    scope: int


@dataclass
class RegDecl:
    type: str
    names: list[str]
    scope: int


@dataclass
class Label:
    name: str
    scope: int


@dataclass
class VarDecl:
    """A variable: ``space`` (global, const, shared, local, param), element ``type``, ``count`` (None: a
    scalar; 0: ``[]``, an extern array), ``init`` (a list of Operands, flattened), ``align``."""

    space: str
    type: str
    name: str
    count: int | None
    align: int
    init: list[Operand] | None
    extern: bool
    line: int
    scope: int = 0
    vector: int = 1

    @property
    def elem_bytes(self) -> int:
        return type_bytes(self.type) * self.vector

    @property
    def size(self) -> int:
        return self.elem_bytes * (1 if self.count is None else self.count)


@dataclass
class Function:
    name: str
    entry: bool
    params: list[VarDecl]
    rets: list[VarDecl]
    body: list[Statement | RegDecl | Label | VarDecl | str]  # str: "{" or "}" (a nested scope)
    directives: dict[str, list[int]]
    defined: bool
    line: int


@dataclass
class Module:
    version: str
    target: str
    address_size: int
    variables: list[VarDecl]
    functions: list[Function]
    files: dict[int, str]
    locs: list[Loc]

    def function(self, name: str) -> Function:
        for f in self.functions:
            if f.name == name and f.defined:
                return f
        raise KeyError(name)

    @property
    def entries(self) -> list[Function]:
        return [f for f in self.functions if f.entry and f.defined]


_TYPE_BYTES = {"b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2, "b32": 4, "u32": 4,
               "s32": 4, "f32": 4, "f16x2": 4, "bf16x2": 4, "tf32": 4, "b64": 8, "u64": 8, "s64": 8, "f64": 8,
               "pred": 1, "b128": 16, "e4m3": 1, "e5m2": 1, "e4m3x2": 2, "e5m2x2": 2}


def type_bytes(t: str) -> int:
    try:
        return _TYPE_BYTES[t.lstrip(".")]
    except KeyError:
        raise PtxSyntaxError(f"unknown PTX type .{t.lstrip('.')}") from None


# ---- tokens ------------------------------------------------------------------------------------------------
_TOKEN = re.compile(r"""
  (?P<ws>[ \t\r\n]+)
| (?P<str>"(?:[^"\\\n]|\\.)*")
| (?P<num>0[fF][0-9a-fA-F]{8}|0[dD][0-9a-fA-F]{16}|0[xX][0-9a-fA-F]+U?|\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|\d+U?)
| (?P<id>[%$A-Za-z_.](?:[\w$.]|::)*)
| (?P<p>[{}\[\](),;:+\-|!@=<>*])
""", re.X)

_LINE_DIRECTIVES = (".loc", ".file", ".version", ".target", ".address_size", ".maxntid", ".reqntid", ".minnctapersm",
                    ".maxnreg", ".maxnctapersm", ".explicitcluster", ".reqnctapercluster", ".maxclusterrank",
                    ".noreturn", ".abi_preserve", ".abi_preserve_control")


_LOC = re.compile(r"(\d+)\s+(\d+)\s+(\d+)"
                  r"(?:\s*,\s*function_name\s+[\w$.]+\s*,\s*inlined_at\s+(\d+)\s+(\d+)\s+(\d+))?")


@dataclass
class _Tok:
    kind: str
    text: str
    line: int


def _strip_block_comments(text: str) -> str:
    return re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)


class _Parser:
    def __init__(self, text: str):
        self.files: dict[int, str] = {}
        self.locs: list[Loc] = []
        self.loc_index: dict[Loc, int] = {}
        self.version = self.target = ""
        self.address_size = 64
        self.toks: list[_Tok] = []
        self._lex(text)
        self.i = 0

    # -- lexing: line directives become 'dir' tokens; everything else is tokenised ----------------------------
    def _lex(self, text: str) -> None:
        text = _strip_block_comments(text)
        lines = text.split("\n")
        skip_depth = 0
        for n, raw in enumerate(lines, start=1):
            line = raw.split("//", 1)[0] if '"' not in raw else _cut_comment(raw)
            s = line.strip()
            if skip_depth:  # inside a .section { ... } block
                skip_depth += s.count("{") - s.count("}")
                continue
            if s.startswith(".section"):
                skip_depth = s.count("{") - s.count("}")
                if skip_depth == 0 and "{" not in s:
                    skip_depth = 0  # a section header on its own line; its braces follow
                    self._pending_section = True
                continue
            if getattr(self, "_pending_section", False):
                if s.startswith("{"):
                    skip_depth = s.count("{") - s.count("}")
                    self._pending_section = False
                    continue
                self._pending_section = False
            if not s:
                continue
            head = s.split(None, 1)[0]
            if head in _LINE_DIRECTIVES:
                self._line_directive(head, s, n)
                continue
            pos = 0
            while pos < len(line):
                m = _TOKEN.match(line, pos)
                if not m:
                    raise PtxSyntaxError(f"PTX line {n}: cannot read {line[pos:pos + 20]!r}")
                pos = m.end()
                kind = m.lastgroup or ""
                if kind == "ws":
                    continue
                self.toks.append(_Tok(kind, m.group(0), n))
        self.toks.append(_Tok("eof", "", len(lines)))

    def _line_directive(self, head: str, s: str, n: int) -> None:
        rest = s[len(head):].strip().rstrip(";").strip()
        if head == ".version":
            self.version = rest
        elif head == ".target":
            self.target = rest
        elif head == ".address_size":
            self.address_size = int(rest)
        elif head == ".file":
            m = re.match(r'(\d+)\s+"((?:[^"\\]|\\.)*)"', rest)
            if m:
                self.files[int(m.group(1))] = m.group(2)
        elif head == ".loc":
            m = _LOC.match(rest)
            if not m:
                raise PtxSyntaxError(f"PTX line {n}: cannot read .loc {rest!r}")
            parent = -1
            if m.group(4):
                parent = self._loc_index_of(self._chain_parent(int(m.group(4)), int(m.group(5)), int(m.group(6))))
            loc = Loc(int(m.group(1)), int(m.group(2)), int(m.group(3)), parent)
            self.toks.append(_Tok("loc", str(self._loc_index_of(loc)), n))
        else:  # performance directives of the function being declared
            nums = [int(x) for x in re.findall(r"\d+", rest)]
            self.toks.append(_Tok("perf", head + " " + ",".join(map(str, nums)), n))

    def _chain_parent(self, file: int, line: int, col: int) -> Loc:
        # an inlined_at names a location that is itself inside the function that was inlined into: it is the
        # most recent .loc with that file/line/col, whatever its own chain (that is how NVVM prints chains)
        for idx in range(len(self.locs) - 1, -1, -1):
            c = self.locs[idx]
            if (c.file, c.line, c.col) == (file, line, col):
                return c
        return Loc(file, line, col, -1)

    def _loc_index_of(self, loc: Loc) -> int:
        idx = self.loc_index.get(loc)
        if idx is None:
            idx = self.loc_index[loc] = len(self.locs)
            self.locs.append(loc)
        return idx

    # -- token helpers ------------------------------------------------------------------------------------------
    def peek(self, k: int = 0) -> _Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def next(self) -> _Tok:
        t = self.toks[self.i]
        self.i += 1
        return t

    def expect(self, text: str) -> _Tok:
        t = self.next()
        if t.text != text:
            raise PtxSyntaxError(f"PTX line {t.line}: expected {text!r}, found {t.text!r}")
        return t

    def at(self, text: str) -> bool:
        return self.peek().text == text

    # -- module ---------------------------------------------------------------------------------------------------
    def module(self) -> Module:
        variables: list[VarDecl] = []
        functions: list[Function] = []
        self.loc = -1
        while self.peek().kind != "eof":
            t = self.peek()
            if t.kind in ("loc", "perf"):
                self.next()
                continue
            if t.text == ";":
                self.next()
                continue
            # linkage words, then .entry/.func or a variable
            quals: list[str] = []
            while self.peek().text in (".visible", ".extern", ".weak", ".common"):
                quals.append(self.next().text)
            if self.at(".entry") or self.at(".func"):
                functions.append(self.function(quals))
            elif self.peek().text in (".global", ".const", ".shared", ".local", ".tex", ".surfref", ".texref",
                                      ".samplerref"):
                variables.append(self.var_decl(".extern" in quals, scope=0))
            elif self.at(".pragma"):
                self._skip_statement()
            else:
                raise PtxSyntaxError(f"PTX line {t.line}: unexpected {t.text!r} at module level")
        return Module(self.version, self.target, self.address_size, variables, functions, self.files, self.locs)

    def _skip_statement(self) -> None:
        while not self.at(";") and self.peek().kind != "eof":
            self.next()
        self.next()

    def var_decl(self, extern: bool, scope: int) -> VarDecl:
        line = self.peek().line
        space = self.next().text.lstrip(".")
        align, vector, vtype = 0, 1, None
        while self.peek().text.startswith(".") and self.peek().kind == "id":
            w = self.next().text
            if w == ".align":
                align = int(self.next().text)
            elif w in (".v2", ".v4", ".v8"):
                vector = int(w[2:])
            elif w.lstrip(".") in _TYPE_BYTES:
                vtype = w.lstrip(".")
            elif w in (".ptr", ".global", ".shared", ".const", ".local"):  # .param .ptr.global: attributes
                continue
            else:
                continue
        if vtype is None:
            raise PtxSyntaxError(f"PTX line {line}: a variable without a type")
        name = self.next().text
        count: int | None = None
        while self.at("["):
            self.next()
            if self.at("]"):
                count = 0
            else:
                n = int(self.next().text.rstrip("U"), 0)
                count = n if count is None else count * n
            self.expect("]")
        init = None
        if self.at("="):
            self.next()
            init = self._initializer()
        if self.at(";"):
            self.next()
        return VarDecl(space, vtype, name, count, align or type_bytes(vtype) * vector, init, extern, line, scope,
                       vector)

    def _initializer(self) -> list[Operand]:
        if self.at("{"):
            self.next()
            items: list[Operand] = []
            while not self.at("}"):
                items += self._initializer()
                if self.at(","):
                    self.next()
            self.next()
            return items
        return [self.operand()]

    def function(self, quals: list[str]) -> Function:
        line = self.peek().line
        entry = self.next().text == ".entry"
        rets: list[VarDecl] = []
        if self.at("("):  # .func's return values
            rets = self._param_list()
        name = self.next().text
        params = self._param_list() if self.at("(") else []
        directives: dict[str, list[int]] = {}
        while self.peek().kind == "perf" or self.peek().kind == "loc" or self.at(".noreturn"):
            t = self.next()
            if t.kind == "perf":
                head, _, nums = t.text.partition(" ")
                directives[head] = [int(x) for x in nums.split(",") if x]
        if self.at(";"):  # a declaration (.extern .func vprintf ...)
            self.next()
            return Function(name, entry, params, rets, [], directives, False, line)
        body = self._body()
        return Function(name, entry, params, rets, body, directives, True, line)

    def _param_list(self) -> list[VarDecl]:
        self.expect("(")
        out: list[VarDecl] = []
        while not self.at(")"):
            if self.at(","):
                self.next()
                continue
            if not self.at(".param") and not self.at(".reg"):
                raise PtxSyntaxError(f"PTX line {self.peek().line}: expected a .param, found {self.peek().text!r}")
            out.append(self.var_decl(False, 0))
        self.next()
        return out

    def _body(self) -> list[Statement | RegDecl | Label | VarDecl | str]:
        body: list[Statement | RegDecl | Label | VarDecl | str] = []
        self.expect("{")
        depth = 1
        scopes = [0]
        counter = 0
        while depth:
            t = self.peek()
            if t.kind == "eof":
                raise PtxSyntaxError("PTX ends inside a function body")
            if t.kind == "loc":
                self.next()
                self.loc = int(t.text)
                continue
            if t.kind == "perf":
                self.next()
                continue
            if t.text == "{":
                self.next()
                depth += 1
                counter += 1
                scopes.append(counter)
                body.append("{")
                continue
            if t.text == "}":
                self.next()
                depth -= 1
                scopes.pop()
                if depth:
                    body.append("}")
                continue
            if t.text == ";":
                self.next()
                continue
            scope = scopes[-1]
            if t.text == ".reg":
                body.append(self._reg_decl(scope))
                continue
            if t.text in (".local", ".shared", ".param", ".const", ".global"):
                body.append(self.var_decl(False, scope))
                continue
            if t.text == ".pragma":
                self._skip_statement()
                continue
            if self.peek(1).text == ":" and t.kind == "id" and not t.text.startswith("."):
                self.next()
                self.next()
                body.append(Label(t.text, scope))
                continue
            body.append(self._statement(scope))
        return body

    def _reg_decl(self, scope: int) -> RegDecl:
        self.next()
        vector = 1
        while self.peek().text in (".v2", ".v4"):
            vector = int(self.next().text[2:])
        rtype = self.next().text.lstrip(".")
        if rtype not in _TYPE_BYTES:
            raise PtxSyntaxError(f"PTX line {self.peek().line}: unknown register type .{rtype}")
        if vector != 1:
            raise PtxSyntaxError(f"PTX line {self.peek().line}: vector registers (.reg .v{vector}) are not read")
        names: list[str] = []
        while True:
            name = self.next().text
            if self.at("<"):
                self.next()
                n = int(self.next().text)
                self.expect(">")
                names += [f"{name}{k}" for k in range(n)]
            else:
                names.append(name)
            if self.at(","):
                self.next()
                continue
            break
        self.expect(";")
        return RegDecl(rtype, names, scope)

    def _statement(self, scope: int) -> Statement:
        line = self.peek().line
        guard, neg = None, False
        if self.at("@"):
            self.next()
            if self.at("!"):
                self.next()
                neg = True
            guard = self.next().text
        op = self.next()
        if op.kind != "id":
            raise PtxSyntaxError(f"PTX line {op.line}: expected an instruction, found {op.text!r}")
        operands: list[Operand] = []
        while not self.at(";"):
            if self.peek().kind == "eof":
                raise PtxSyntaxError(f"PTX line {line}: statement without ';'")
            operands.append(self.operand())
            if self.at(","):
                self.next()
        self.next()
        return Statement(op.text, operands, guard, neg, self.loc, line, scope)

    def operand(self) -> Operand:
        t = self.peek()
        if t.text in ("{", "("):  # a vector {a, b} or a call's argument list (a, b)
            self.next()
            close, kind = ("}", "vec") if t.text == "{" else (")", "list")
            items: list[Operand] = []
            while not self.at(close):
                items.append(self.operand())
                if self.at(","):
                    self.next()
            self.next()
            return Operand(kind, items=items)
        if t.text == "[":
            return self._address()
        if t.text == "!":
            self.next()
            o = self.operand()
            o.neg = not o.neg
            return o
        if t.text == "-" and self.peek(1).kind == "num":
            self.next()
            o = self._number(self.next())
            if o.kind == "imm":
                o.value = -o.value
            elif o.kind == "dimm":
                o.fvalue = -o.fvalue
            else:
                o.value ^= 1 << (o.width - 1)
            return o
        if t.kind == "num":
            return self._number(self.next())
        if t.kind == "str":
            self.next()
            return Operand("str", name=t.text[1:-1])
        if t.kind == "id":
            self.next()
            if t.text == "_":
                return Operand("sink")
            if self.at("|"):
                self.next()
                other = self.next().text
                return Operand("pair", items=[Operand("reg", name=t.text), Operand("reg", name=other)])
            if self.at("+") and self.peek(1).kind == "num":  # sym+8 as an initializer or mov operand
                self.next()
                return Operand("addr", base=t.text, offset=int(self.next().text.rstrip("U"), 0), name="symoff")
            return Operand("reg", name=t.text)
        raise PtxSyntaxError(f"PTX line {t.line}: cannot read operand {t.text!r}")

    def _number(self, t: _Tok) -> Operand:
        s = t.text
        if s[:2] in ("0f", "0F"):
            return Operand("fimm", value=int(s[2:], 16), width=32)
        if s[:2] in ("0d", "0D"):
            return Operand("fimm", value=int(s[2:], 16), width=64)
        if "." in s or ("e" in s.lower() and not s.lower().startswith("0x")):
            return Operand("dimm", fvalue=float(s))
        return Operand("imm", value=int(s.rstrip("U"), 0))

    def _address(self) -> Operand:
        self.expect("[")
        base: str | None = None
        offset = 0
        items: list[Operand] = []
        sign = 1
        while not self.at("]"):
            t = self.next()
            if t.text == ",":
                if self.at("{"):
                    items = self.operand().items
                else:  # [a, b]: a second operand inside the brackets (e.g. .im2col offsets): kept as items
                    items.append(self.operand())
                continue
            if t.text == "+":
                sign = 1
                continue
            if t.text == "-":
                sign = -sign
                continue
            if t.kind == "num":
                offset += sign * int(t.text.rstrip("U"), 0)
                sign = 1
            elif t.kind == "id":
                base = t.text
            else:
                raise PtxSyntaxError(f"PTX line {t.line}: cannot read address part {t.text!r}")
        self.next()
        return Operand("addr", base=base, offset=offset, items=items)


def _cut_comment(line: str) -> str:
    out, in_str, i = [], False, 0
    while i < len(line):
        c = line[i]
        if c == '"':
            in_str = not in_str
        if not in_str and line.startswith("//", i):
            break
        out.append(c)
        i += 1
    return "".join(out)


def parse(text: str) -> Module:
    """Read PTX (see the module docstring); raises ``PtxSyntaxError`` naming the line it cannot read."""
    return _Parser(text).module()
