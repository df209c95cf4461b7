"""A parsed PTX module → the interpreter's program: flat arrays of fixed-size records that ``interp.cpp`` loads.

Every register of every function gets a slot (a thread holds one 64-bit slot per register); every operand
becomes a record (a register slot, an immediate, a vector of records, an address, a symbol's address, a
special register, a branch target); every instruction becomes one record naming its opcode (the list in
``shim/src/interp_ops.def``), its types and its modifiers as bits. What is decoded here is only what the
instruction *is*; what it *does* is in ``interp.cpp``.

An instruction this decoder cannot give meaning to is not an error here: it becomes ``NOT_MODELLED`` with its
text, and stops the launch with "not modelled: <opcode>" only if a thread executes it (so a kernel whose
unusual instruction sits on a path the launch never takes still runs).

Public API: ``decode(module, names=...) -> Program``, ``Program`` (its ``arrays()`` for the C++ side, ``entry()``,
``kernel_params()``, ``loc_chain()``), ``OPS``, ``TYPES``, ``DecodeError``.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .parse import Function, Label, Loc, Module, Operand, RegDecl, Statement, VarDecl, type_bytes

_DEF = Path(__file__).resolve().parent.parent / "shim" / "src" / "interp_ops.def"
_def_text = _DEF.read_text()
OPS: dict[str, int] = {m: i for i, m in enumerate(re.findall(r"^OP\((\w+)\)", _def_text, re.M))}
TYPES: dict[str, int] = {m.lower(): i for i, m in enumerate(re.findall(r"^TYPE\((\w+),", _def_text, re.M))}
#: The encoding's name: part of every cache key that holds a decoded program.
VERSION = "1"

# Operand kinds (interp.cpp: enum Kind)
K_REG, K_IMM, K_VEC, K_ADDR, K_SYM, K_SPECIAL, K_LABEL, K_SINK = 1, 2, 3, 4, 5, 6, 7, 8
K_NEG = 0x80  # a negated predicate operand (!p)

# Modifier bits of Instr.mod (interp.cpp reads the same layout)
CMP_SHIFT, CMP_MASK = 0, 0x1F
BOOL_SHIFT = 5            # 2 bits: 0 none, 1 and, 2 or, 3 xor
RND_SHIFT = 7             # 3 bits: 0 none, 1 rn, 2 rz, 3 rm, 4 rp, 5 rna
M_RINT = 1 << 10          # integer rounding (.rni, .rzi, ...)
M_FTZ = 1 << 11
M_SAT = 1 << 12
M_APPROX = 1 << 13
M_RELU = 1 << 14
HL_SHIFT = 15             # 2 bits: 0 lo/none, 1 hi, 2 wide
SPACE_SHIFT = 17          # 3 bits: state space
VEC_SHIFT = 20            # 2 bits: 0 scalar, 1 v2, 2 v4, 3 v8
M_GUARD_NEG = 1 << 22
M_TRANS = 1 << 23
SUB_SHIFT = 24            # 5 bits: a sub-operation (atom op, shfl mode, vote mode, ...)
M_FLAG = 1 << 29          # an instruction-specific flag (cvta .to, bar.red .popc, bulk .read, parity waits ...)
M_FLAG2 = 1 << 30
M_NAN = 1 << 31           # min/max .NaN

SPACES = {"": 0, "generic": 0, "global": 1, "shared": 2, "local": 3, "param": 4, "const": 5}
CMPS = {c: i for i, c in enumerate(("eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs", "equ", "neu", "ltu",
                                    "leu", "gtu", "geu", "num", "nan"))}
ROUNDINGS = {"rn": 1, "rz": 2, "rm": 3, "rp": 4, "rna": 5}
ATOM_OPS = {o: i for i, o in enumerate(("add", "inc", "dec", "min", "max", "and", "or", "xor", "exch", "cas"))}
SPECIALS = {name: i for i, name in enumerate((
    "%tid.x", "%tid.y", "%tid.z", "%ntid.x", "%ntid.y", "%ntid.z", "%ctaid.x", "%ctaid.y", "%ctaid.z",
    "%nctaid.x", "%nctaid.y", "%nctaid.z", "%laneid", "%warpid", "%nwarpid", "%smid", "%nsmid", "%gridid",
    "%lanemask_eq", "%lanemask_le", "%lanemask_lt", "%lanemask_ge", "%lanemask_gt", "%clock", "%clock_hi",
    "%clock64", "%globaltimer", "%globaltimer_lo", "%globaltimer_hi", "%dynamic_smem_size", "%total_smem_size",
    "%aggr_smem_size", "%cluster_ctarank", "%cluster_nctarank", "%is_explicit_cluster", "%clusterid.x",
    "%clusterid.y", "%clusterid.z", "%nclusterid.x", "%nclusterid.y", "%nclusterid.z", "%cluster_ctaid.x",
    "%cluster_ctaid.y", "%cluster_ctaid.z", "%cluster_nctaid.x", "%cluster_nctaid.y", "%cluster_nctaid.z"))}
_SPECIAL_ALIASES = {"%tid": "%tid.x", "%ntid": "%ntid.x", "%ctaid": "%ctaid.x", "%nctaid": "%nctaid.x"}

INSTR = np.dtype([("op", "<u2"), ("t", "u1"), ("t2", "u1"), ("mod", "<u4"), ("guard", "<i4"), ("loc", "<i4"),
                  ("a", "<u4"), ("n", "<u2"), ("x", "<u2"), ("line", "<u4"), ("y", "<u4")])
OPERAND = np.dtype([("kind", "u1"), ("t", "u1"), ("n", "<u2"), ("reg", "<i4"), ("imm", "<i8")])
SYMBOL = np.dtype([("space", "u1"), ("flags", "u1"), ("elem", "<u2"), ("size", "<u4"), ("align", "<u4"),
                   ("init", "<u4"), ("init_len", "<u4"), ("func", "<i4"), ("name", "<u4"), ("dims", "<i4", (4,)),
                   ("rank", "<i4"), ("offset", "<u4")])
FUNCTION = np.dtype([("first", "<u4"), ("count", "<u4"), ("params", "<u4"), ("n_params", "<u4"), ("rets", "<u4"),
                     ("n_rets", "<u4"), ("local_bytes", "<u4"), ("param_bytes", "<u4"), ("entry", "<u4"),
                     ("name", "<u4")])
SYM_EXTERN = 1  # an extern (dynamic) shared array
SYM_ENTRY_PARAM = 2
SYM_CALL_PARAM = 4  # a .param declared in a function body (a call's argument or return value)
SYM_FUNC_PARAM = 8  # a .func's own parameter or return value


#: PTX's arithmetic instructions and their opcodes (the carry forms are refused, not modelled).
ARITHMETIC = {"add": "ADD", "sub": "SUB", "mul": "MUL", "mad": "MAD", "fma": "FMA", "div": "DIV", "rem": "REM",
              "abs": "ABS", "neg": "NEG", "min": "MIN", "max": "MAX", "and": "AND", "or": "OR", "xor": "XOR",
              "not": "NOT", "cnot": "CNOT", "shl": "SHL", "shr": "SHR", "bfe": "BFE", "bfi": "BFI", "brev": "BREV",
              "popc": "POPC", "clz": "CLZ", "mul24": "MUL24", "mad24": "MAD24", "sad": "SAD", "rcp": "RCP",
              "sqrt": "SQRT", "rsqrt": "RSQRT", "sin": "SIN", "cos": "COS", "lg2": "LG2", "ex2": "EX2", "tanh": "TANH",
              "copysign": "COPYSIGN", "selp": "SELP", "addc": "ADD", "subc": "SUB", "madc": "MAD"}


class DecodeError(ValueError):
    """The PTX uses something the interpreter cannot even represent (e.g. recursion); says what."""


@dataclass
class Symbol:
    name: str
    space: str
    size: int
    align: int
    init: bytes = b""
    func: int = -1
    flags: int = 0
    elem: int = 0
    dims: tuple[int, ...] = ()
    display: str = ""
    offset: int = 0  # params, locals and call arguments: where in their area (a frame's param or local bytes)
    ptype: str = ""  # the PTX type it was declared with (.u32, .b8 ...)
    count: int | None = None  # its array length (None: a scalar)


@dataclass
class Program:
    """A decoded module: what ``interp.cpp`` loads (``arrays``), and what Python needs to launch and explain."""

    instrs: list[tuple] = field(default_factory=list)
    operands: list[tuple] = field(default_factory=list)
    symbols: list[Symbol] = field(default_factory=list)
    functions: list[dict] = field(default_factory=list)
    strings: list[str] = field(default_factory=list)
    n_regs: int = 0
    locs: list[Loc] = field(default_factory=list)
    files: dict[int, str] = field(default_factory=dict)
    texts: list[str] = field(default_factory=list)  # each instruction's PTX text (messages, counts)
    opnames: list[str] = field(default_factory=list)  # each instruction's PTX opcode
    constants: dict[str, int] = field(default_factory=dict)  # integer .global constants the kernel exports

    def entry(self, name: str) -> int:
        for i, f in enumerate(self.functions):
            if f["name"] == name and f["entry"]:
                return i
        raise KeyError(name)

    @property
    def kernels(self) -> list[str]:
        return [f["name"] for f in self.functions if f["entry"]]

    def kernel_params(self, name: str) -> list[Symbol]:
        f = self.functions[self.entry(name)]
        return self.symbols[f["params"]:f["params"] + f["n_params"]]

    def loc_chain(self, loc: int) -> list[Loc]:
        """A location and the ones it was inlined at, innermost first."""
        out: list[Loc] = []
        while 0 <= loc < len(self.locs) and len(out) < 64:
            out.append(self.locs[loc])
            loc = self.locs[loc].inlined_at
        return out

    def string(self, s: str) -> int:
        self.strings.append(s)
        return len(self.strings) - 1

    def arrays(self) -> dict[str, np.ndarray | bytes]:
        """The records ``interp.cpp``'s ``tkemu_interp_load`` takes."""
        syms = np.zeros(len(self.symbols), SYMBOL)
        blob = bytearray()
        for i, s in enumerate(self.symbols):
            dims = list(s.dims[:4]) + [0] * (4 - len(s.dims[:4]))
            syms[i] = (SPACES[s.space], s.flags, s.elem, s.size, s.align, len(blob), len(s.init), s.func,
                       self.string(s.display or s.name), dims, len(s.dims) if s.dims else -1, s.offset)
            blob += s.init
        funcs = np.zeros(len(self.functions), FUNCTION)
        for i, f in enumerate(self.functions):
            funcs[i] = (f["first"], f["count"], f["params"], f["n_params"], f["rets"], f["n_rets"],
                        f["local_bytes"], f["param_bytes"], int(f["entry"]), self.string(f["name"]))
        text = b"".join(s.encode("utf-8", "replace") + b"\0" for s in self.strings)
        return {"instrs": np.array(self.instrs, INSTR) if self.instrs else np.zeros(0, INSTR),
                "operands": np.array(self.operands, OPERAND) if self.operands else np.zeros(0, OPERAND),
                "symbols": syms, "functions": funcs, "init": bytes(blob), "strings": text}


# ---- helpers --------------------------------------------------------------------------------------------------
_TYPE_WORDS = set(TYPES) - {"none"}


def _types(parts: list[str]) -> list[str]:
    return [p for p in parts if p in _TYPE_WORDS]


def _space(parts: list[str]) -> int:
    for p in parts:
        base = p.split("::", 1)[0]
        if base in ("global", "shared", "local", "param", "const"):
            return SPACES[base]
    return 0


def _vec(parts: list[str]) -> int:
    for p in parts:
        if p in ("v2", "v4", "v8"):
            return {"v2": 1, "v4": 2, "v8": 3}[p]
    return 0


def _rounding(parts: list[str]) -> int:
    mod = 0
    for p in parts:
        if p in ROUNDINGS:
            mod |= ROUNDINGS[p] << RND_SHIFT
        elif p in ("rni", "rzi", "rmi", "rpi"):
            mod |= (ROUNDINGS[p[:2]] << RND_SHIFT) | M_RINT
    return mod


def _common(parts: list[str]) -> int:
    mod = _rounding(parts)
    for p in parts:
        if p == "ftz":
            mod |= M_FTZ
        elif p in ("sat", "satfinite"):
            mod |= M_SAT
        elif p == "approx":
            mod |= M_APPROX
        elif p == "relu":
            mod |= M_RELU
        elif p == "hi":
            mod |= 1 << HL_SHIFT
        elif p == "wide":
            mod |= 2 << HL_SHIFT
        elif p == "NaN":
            mod |= M_NAN
    return mod


class _Decoder:
    def __init__(self, module: Module, names: dict[str, str] | None):
        self.m = module
        self.p = Program(locs=list(module.locs), files=dict(module.files))
        self.names = names or {}
        self.global_syms: dict[str, int] = {}
        self.func_index: dict[str, int] = {}

    # -- symbols ---------------------------------------------------------------------------------------------------
    def _symbol(self, v: VarDecl, func: int, flags: int = 0) -> int:
        init = b""
        if v.init is not None and v.space in ("global", "const"):
            init = self._init_bytes(v)
        size = v.size
        if v.count == 0:
            flags |= SYM_EXTERN
        display = self.names.get(v.name) or _demangle_local(v.name)
        sym = Symbol(v.name, v.space, size, v.align, init, func, flags, v.elem_bytes, (), display, 0, v.type, v.count)
        self.p.symbols.append(sym)
        return len(self.p.symbols) - 1

    def _init_bytes(self, v: VarDecl) -> bytes:
        assert v.init is not None
        out = bytearray()
        t = v.type
        nb = type_bytes(t)
        for o in v.init:
            if o.kind == "imm":
                out += (o.value & ((1 << (8 * nb)) - 1)).to_bytes(nb, "little")
            elif o.kind == "fimm":
                out += o.value.to_bytes(o.width // 8, "little")[:nb].ljust(nb, b"\0")
            elif o.kind == "dimm":
                out += struct.pack("<f" if nb == 4 else "<d", o.fvalue) if nb in (4, 8) else bytes(nb)
            else:  # an address of another symbol (generic(sym)): not known before launch; zero here
                out += bytes(nb)
        return bytes(out.ljust(v.size, b"\0")[:v.size])

    # -- module ----------------------------------------------------------------------------------------------------
    def run(self) -> Program:
        for v in self.m.variables:
            idx = self._symbol(v, -1)
            self.global_syms[v.name] = idx
            if v.space == "global" and v.count is None and v.init and len(v.init) == 1 and v.init[0].kind == "imm":
                self.p.constants[v.name] = v.init[0].value
        defined = [f for f in self.m.functions if f.defined]
        for i, f in enumerate(defined):
            self.func_index[f.name] = i
        for f in self.m.functions:  # declared-only functions: only vprintf is known
            if not f.defined and f.name not in self.func_index:
                self.func_index.setdefault(f.name, -1)
        self.p.functions = [{} for _ in defined]
        # registers: one slot each, across functions (a call does not recurse: _check_calls)
        for i, f in enumerate(defined):
            self._function(i, f)
        self._check_calls(defined)
        return self.p

    def _check_calls(self, defined: list[Function]) -> None:
        calls: dict[str, set[str]] = {f.name: set() for f in defined}
        for f in defined:
            for s in f.body:
                if isinstance(s, Statement) and s.opcode.split(".")[0] == "call":
                    for o in s.operands:
                        if o.kind == "reg" and o.name in calls:
                            calls[f.name].add(o.name)
        seen: set[str] = set()

        def visit(name: str, stack: tuple[str, ...]) -> None:
            if name in stack:
                raise DecodeError(f"the function {name} calls itself (recursion): the interpreter gives each "
                                  "function one set of registers, so recursion is not modelled")
            if name in seen:
                return
            seen.add(name)
            for c in calls.get(name, ()):
                visit(c, stack + (name,))

        for f in defined:
            visit(f.name, ())

    def _function(self, index: int, f: Function) -> None:
        p = self.p
        regs: list[dict[str, tuple[int, str]]] = [{}]
        scope_regs: dict[int, dict[str, tuple[int, str]]] = {0: regs[0]}
        # parameters and return values are symbols of this function
        param_first = len(p.symbols)
        param_off = 0
        for v in f.params:
            flags = SYM_ENTRY_PARAM if f.entry else SYM_FUNC_PARAM
            idx = self._symbol(v, index, flags)
            param_off = (param_off + v.align - 1) // v.align * v.align
            p.symbols[idx].offset = param_off  # its place in the param area
            param_off += v.size
        ret_first = len(p.symbols)
        for v in f.rets:
            idx = self._symbol(v, index, SYM_FUNC_PARAM)
            param_off = (param_off + v.align - 1) // v.align * v.align
            p.symbols[idx].offset = param_off
            param_off += v.size
        # first pass: scopes, registers, labels, body symbols
        labels: dict[int, dict[str, int]] = {0: {}}
        local_syms: dict[int, dict[str, int]] = {0: {}}
        instr_no = len(p.instrs)
        local_off = 0
        call_param_off = param_off
        items: list[tuple[Statement, int]] = []
        for item in f.body:
            if item == "{":
                continue
            if item == "}":
                continue
            if isinstance(item, RegDecl):
                table = scope_regs.setdefault(item.scope, {})
                for n in item.names:
                    table[n] = (p.n_regs, item.type)
                    p.n_regs += 1
            elif isinstance(item, Label):
                labels.setdefault(item.scope, {})[item.name] = instr_no
            elif isinstance(item, VarDecl):
                table2 = local_syms.setdefault(item.scope, {})
                if item.space == "local":
                    idx = self._symbol(item, index)
                    local_off = (local_off + item.align - 1) // item.align * item.align
                    p.symbols[idx].offset = local_off
                    local_off += item.size
                elif item.space == "param":
                    idx = self._symbol(item, index, SYM_CALL_PARAM)
                    call_param_off = (call_param_off + item.align - 1) // item.align * item.align
                    p.symbols[idx].offset = call_param_off
                    call_param_off += item.size
                else:  # a function-scope .shared / .global / .const: a module symbol with a local name
                    idx = self._symbol(item, -1)
                table2[item.name] = idx
            elif isinstance(item, Statement):
                items.append((item, instr_no))
                instr_no += 1
        # scope parents: recompute from the body's brace structure
        parent = {0: -1}
        stack = [0]
        counter = 0
        for item in f.body:
            if item == "{":
                counter += 1
                parent[counter] = stack[-1]
                stack.append(counter)
            elif item == "}":
                stack.pop()
        self._parent = parent
        self._scope_regs = scope_regs
        self._labels = labels
        self._local_syms = local_syms
        self._func = index
        self._param_syms = {v.name: param_first + k for k, v in enumerate(f.params)}
        self._param_syms.update({v.name: ret_first + k for k, v in enumerate(f.rets)})
        p.functions[index] = {"name": f.name, "entry": f.entry, "first": len(p.instrs), "count": len(items),
                              "params": param_first, "n_params": len(f.params), "rets": ret_first,
                              "n_rets": len(f.rets), "local_bytes": local_off, "param_bytes": call_param_off,
                              "maxntid": f.directives.get(".maxntid") or f.directives.get(".reqntid") or []}
        for st, _no in items:
            self._instruction(st)

    # -- name resolution -------------------------------------------------------------------------------------------
    def _scoped(self, table: dict[int, dict[str, Any]], name: str, scope: int) -> Any:
        """``name`` as ``scope`` or the nearest scope around it declares it in ``table`` (PTX's ``{ }`` nesting: an
        inner declaration hides an outer one); None where none does."""
        s = scope
        while s >= 0:
            hit = table.get(s, {}).get(name)
            if hit is not None:
                return hit
            s = self._parent.get(s, -1)
        return None

    def _reg(self, name: str, scope: int) -> tuple[int, str] | None:
        return self._scoped(self._scope_regs, name, scope)

    def _label(self, name: str, scope: int) -> int | None:
        return self._scoped(self._labels, name, scope)

    def _sym(self, name: str, scope: int) -> int | None:
        hit = self._scoped(self._local_syms, name, scope)
        if hit is not None:
            return hit
        if name in self._param_syms:
            return self._param_syms[name]
        return self.global_syms.get(name)

    # -- operands --------------------------------------------------------------------------------------------------
    def _operand(self, o: Operand, scope: int, t: str | None = None) -> tuple:
        """One operand record (kind, t, n, reg, imm); vectors append their items first and point at them."""
        neg = K_NEG if o.neg else 0
        if o.kind == "reg":
            name = _SPECIAL_ALIASES.get(o.name, o.name)
            r = self._reg(name, scope)
            if r is not None:
                return (K_REG | neg, TYPES.get(r[1], 0), 0, r[0], 0)
            if name in SPECIALS:
                return (K_SPECIAL, 0, SPECIALS[name], -1, 0)
            lab = self._label(name, scope)
            if lab is not None:
                return (K_LABEL, 0, 0, -1, lab)
            sym = self._sym(name, scope)
            if sym is not None:
                return (K_SYM, 0, 0, sym, 0)
            if name in self.func_index:
                return (K_LABEL, 0, 1, self.func_index[name], 0)  # a function (call target)
            raise DecodeError(f"unknown name {name!r} in the PTX")
        if o.kind == "imm":
            return (K_IMM, 0, 0, -1, _i64(o.value))
        if o.kind == "fimm":
            bits = o.value
            if t == "f64" and o.width == 32:
                bits = struct.unpack("<Q", struct.pack("<d", struct.unpack("<f", o.value.to_bytes(4, "little"))[0]))[0]
            return (K_IMM, 0, 0, -1, _i64(bits))
        if o.kind == "dimm":
            if t == "f64":
                bits = struct.unpack("<q", struct.pack("<d", o.fvalue))[0]
            else:
                bits = struct.unpack("<I", struct.pack("<f", o.fvalue))[0]
            return (K_IMM, 0, 0, -1, bits)
        if o.kind == "sink":
            return (K_SINK, 0, 0, -1, 0)
        if o.kind == "vec":
            start = self._vector(o.items, scope, t)
            return (K_VEC, 0, len(o.items), start, 0)
        if o.kind == "pair":
            start = self._vector(o.items, scope, t)
            return (K_VEC, 0, 2, start, 0)
        if o.kind == "list":
            start = self._vector(o.items, scope, t)
            return (K_VEC, 0, len(o.items), start, 0)
        if o.kind == "addr":
            base_reg, sym = -1, 0
            if o.base is not None:
                r = self._reg(o.base, scope)
                if r is not None:
                    base_reg = r[0]
                else:
                    s = self._sym(o.base, scope)
                    if s is None:
                        raise DecodeError(f"unknown name {o.base!r} in an address")
                    sym = s + 1
            if o.name == "symoff":  # sym+8 outside brackets: the symbol's address plus an offset
                return (K_SYM, 0, 0, sym - 1, o.offset)
            return (K_ADDR, 0, sym & 0xFFFF, base_reg if sym == 0 else sym - 1, _i64(o.offset)) if sym <= 0xFFFF \
                else (K_ADDR, 1, 0, sym - 1, _i64(o.offset))
        if o.kind == "str":
            return (K_IMM, 0, 0, -1, self.p.string(o.name))
        raise DecodeError(f"cannot encode operand kind {o.kind}")

    def _vector(self, items: list[Operand], scope: int, t: str | None) -> int:
        recs = [self._operand(it, scope, t) for it in items]
        start = len(self.p.operands)
        self.p.operands.extend(recs)
        return start

    # -- instructions ----------------------------------------------------------------------------------------------
    def _emit(self, st: Statement, op: str, t: str = "none", t2: str = "none", mod: int = 0, x: int = 0, y: int = 0,
              operands: list[tuple] | None = None, ptypes: list[str | None] | None = None) -> None:
        p = self.p
        guard = -1
        if st.guard is not None:
            r = self._reg(st.guard, st.scope)
            if r is None:
                raise DecodeError(f"PTX line {st.line}: unknown guard predicate {st.guard}")
            guard = r[0]
            if st.guard_neg:
                mod |= M_GUARD_NEG
        recs = operands
        if recs is None:
            recs = []
            for k, o in enumerate(st.operands):
                pt = ptypes[k] if ptypes and k < len(ptypes) else (t if t != "none" else None)
                recs.append(self._operand(o, st.scope, pt))
        a = len(p.operands)
        p.operands.extend(recs)
        p.instrs.append((OPS[op], TYPES.get(t, 0), TYPES.get(t2, 0), mod & 0xFFFFFFFF, guard, st.loc, a, len(recs),
                         x & 0xFFFF, st.line, y & 0xFFFFFFFF))
        p.texts.append(_text(st))
        p.opnames.append(st.opcode)

    def _unmodelled(self, st: Statement, why: str) -> None:
        self._emit(st, "NOT_MODELLED", y=self.p.string(f"{st.opcode}: {why}"), operands=[])

    def _instruction(self, st: Statement) -> None:
        parts = st.opcode.split(".")
        base = parts[0]
        mods = parts[1:]
        handler = self._arith if base in ARITHMETIC else getattr(self, "_op_" + base.replace("-", "_"), None)
        if handler is None:
            self._unmodelled(st, "this instruction is not modelled by the interpreter")
            return
        try:
            handler(st, mods)
        except DecodeError as e:
            self._unmodelled(st, str(e))

    # data movement ------------------------------------------------------------------------------------------------
    def _op_mov(self, st: Statement, mods: list[str]) -> None:
        ts = _types(mods)
        self._emit(st, "MOV", ts[-1] if ts else "b32")

    def _op_cvt(self, st: Statement, mods: list[str]) -> None:
        ts = _types(mods)
        if len(ts) != 2:
            raise DecodeError("cvt needs a destination and a source type")
        if ts[0] in ("e4m3x2", "e5m2x2") or ts[1] in ("e4m3x2", "e5m2x2"):
            raise DecodeError("fp8 conversions are not modelled")
        self._emit(st, "CVT", ts[0], ts[1], _common(mods))

    def _op_cvta(self, st: Statement, mods: list[str]) -> None:
        to = "to" in mods
        self._emit(st, "CVTA", _types(mods)[-1] if _types(mods) else "u64", mod=(_space(mods) << SPACE_SHIFT) |
                   (M_FLAG if to else 0))

    def _op_isspacep(self, st: Statement, mods: list[str]) -> None:
        self._emit(st, "ISSPACEP", "pred", mod=_space(mods) << SPACE_SHIFT)

    def _op_ld(self, st: Statement, mods: list[str]) -> None:
        ts = _types(mods)
        mod = (_space(mods) << SPACE_SHIFT) | (_vec(mods) << VEC_SHIFT)
        if "volatile" in mods or "acquire" in mods or "relaxed" in mods:
            mod |= M_FLAG
        if len(st.operands) > 2:  # a cache-policy operand: dropped
            st = Statement(st.opcode, st.operands[:2], st.guard, st.guard_neg, st.loc, st.line, st.scope)
        self._emit(st, "LD", ts[-1] if ts else "b32", mod=mod)

    _op_ldu = _op_ld

    def _op_st(self, st: Statement, mods: list[str]) -> None:
        ts = _types(mods)
        mod = (_space(mods) << SPACE_SHIFT) | (_vec(mods) << VEC_SHIFT)
        if len(st.operands) > 2:
            st = Statement(st.opcode, st.operands[:2], st.guard, st.guard_neg, st.loc, st.line, st.scope)
        self._emit(st, "ST", ts[-1] if ts else "b32", mod=mod)

    def _op_prmt(self, st: Statement, mods: list[str]) -> None:
        modes = {"f4e": 1, "b4e": 2, "rc8": 3, "ecl": 4, "ecr": 5, "rc16": 6}
        sub = next((modes[m] for m in mods if m in modes), 0)
        self._emit(st, "PRMT", "b32", mod=sub << SUB_SHIFT)

    # arithmetic ---------------------------------------------------------------------------------------------------
    def _arith(self, st: Statement, mods: list[str]) -> None:
        """The arithmetic instructions (``ARITHMETIC``): one opcode each; the types pick integer, float or packed-half
        semantics, the modifiers rounding, saturation, .hi/.wide and the rest."""
        ts = _types(mods)
        if not ts:
            raise DecodeError(f"{st.opcode}: no type")
        if "cc" in mods or st.opcode.split(".")[0] in ("addc", "subc", "madc"):
            raise DecodeError("carry arithmetic (.cc, addc) is not modelled")
        self._emit(st, ARITHMETIC[st.opcode.split(".")[0]], ts[0], ts[1] if len(ts) > 1 else "none", _common(mods))

    def _op_bfind(self, st: Statement, mods: list[str]) -> None:
        self._emit(st, "BFIND", _types(mods)[-1], mod=M_FLAG if "shiftamt" in mods else 0)

    def _op_shf(self, st: Statement, mods: list[str]) -> None:
        mod = (M_FLAG if "r" in mods else 0) | (M_FLAG2 if "clamp" in mods else 0)
        self._emit(st, "SHF", "b32", mod=mod)

    def _op_lop3(self, st: Statement, mods: list[str]) -> None:
        if len(st.operands) != 5:
            raise DecodeError("lop3 with a predicate output is not modelled")
        self._emit(st, "LOP3", "b32")

    def _op_testp(self, st: Statement, mods: list[str]) -> None:
        kinds = {"finite": 0, "infinite": 1, "number": 2, "notanumber": 3, "normal": 4, "subnormal": 5}
        sub = next((kinds[m] for m in mods if m in kinds), 0)
        self._emit(st, "TESTP", _types(mods)[-1], mod=sub << SUB_SHIFT)

    def _compare(self, mods: list[str]) -> int:
        mod = _common(mods)
        for m in mods:
            if m in CMPS:
                mod |= CMPS[m] << CMP_SHIFT
            elif m in ("and", "or", "xor"):
                mod |= {"and": 1, "or": 2, "xor": 3}[m] << BOOL_SHIFT
        return mod

    def _op_setp(self, st: Statement, mods: list[str]) -> None:
        ts = _types(mods)
        self._emit(st, "SETP", ts[-1], mod=self._compare(mods),
                   ptypes=[None, ts[-1], ts[-1], None])

    def _op_set(self, st: Statement, mods: list[str]) -> None:
        ts = _types(mods)
        self._emit(st, "SET", ts[0], ts[1] if len(ts) > 1 else ts[0], self._compare(mods),
                   ptypes=[None, ts[-1], ts[-1], None])

    def _op_slct(self, st: Statement, mods: list[str]) -> None:
        ts = _types(mods)
        self._emit(st, "SLCT", ts[0], ts[1], _common(mods), ptypes=[None, ts[0], ts[0], ts[1]])

    # control ------------------------------------------------------------------------------------------------------
    def _op_bra(self, st: Statement, mods: list[str]) -> None:
        if not st.operands or st.operands[0].kind != "reg":
            raise DecodeError("an indirect branch (brx) is not modelled")
        self._emit(st, "BRA")

    def _op_call(self, st: Statement, mods: list[str]) -> None:
        ops = st.operands
        rets: Operand | None = None
        if ops and ops[0].kind == "list":
            rets, ops = ops[0], ops[1:]
        if not ops or ops[0].kind != "reg":
            raise DecodeError("an indirect call is not modelled")
        target = ops[0].name
        args = ops[1] if len(ops) > 1 and ops[1].kind == "list" else Operand("list")
        if target == "vprintf":
            recs = [self._operand(args, st.scope), self._operand(rets or Operand("list"), st.scope)]
            self._emit(st, "VPRINTF", operands=recs)
            return
        idx = self.func_index.get(target, -1)
        if idx < 0:
            raise DecodeError(f"a call of {target}, whose code is not in the module, is not modelled")
        recs = [(K_LABEL, 0, 1, idx, 0), self._operand(args, st.scope),
                self._operand(rets or Operand("list"), st.scope)]
        self._emit(st, "CALL", operands=recs)

    def _op_ret(self, st: Statement, mods: list[str]) -> None:
        self._emit(st, "RET")

    def _op_exit(self, st: Statement, mods: list[str]) -> None:
        self._emit(st, "EXIT")

    def _op_trap(self, st: Statement, mods: list[str]) -> None:
        self._emit(st, "TRAP")

    _op_brkpt = _op_trap

    # synchronisation ----------------------------------------------------------------------------------------------
    def _op_bar(self, st: Statement, mods: list[str]) -> None:
        if mods and mods[0] == "warp":
            self._emit(st, "BAR_WARP_SYNC")
            return
        if "red" in mods:
            sub = {"popc": 0, "and": 1, "or": 2}[next(m for m in mods if m in ("popc", "and", "or"))]
            self._emit(st, "BAR_RED", _types(mods)[-1] if _types(mods) else "u32", mod=sub << SUB_SHIFT)
            return
        if "arrive" in mods:
            self._emit(st, "BAR_ARRIVE")
            return
        self._emit(st, "BAR_SYNC")

    def _op_barrier(self, st: Statement, mods: list[str]) -> None:
        if "cluster" in mods:
            raise DecodeError("cluster barriers are not modelled (the emulator runs one block of a cluster at a time)")
        self._op_bar(st, mods)

    def _op_membar(self, st: Statement, mods: list[str]) -> None:
        self._emit(st, "FENCE")

    def _op_fence(self, st: Statement, mods: list[str]) -> None:
        if "proxy" in mods and "async" in " ".join(mods):
            self._emit(st, "FENCE_PROXY_ASYNC")
        else:
            self._emit(st, "FENCE")

    def _op_shfl(self, st: Statement, mods: list[str]) -> None:
        modes = {"idx": 0, "up": 1, "down": 2, "bfly": 3}
        sub = next((modes[m] for m in mods if m in modes), 0)
        if "sync" not in mods:
            raise DecodeError("shfl without .sync (pre-Volta) is not modelled")
        self._emit(st, "SHFL", "b32", mod=sub << SUB_SHIFT)

    def _op_vote(self, st: Statement, mods: list[str]) -> None:
        modes = {"ballot": 0, "any": 1, "all": 2, "uni": 3}
        sub = next((modes[m] for m in mods if m in modes), 0)
        self._emit(st, "VOTE", _types(mods)[-1] if _types(mods) else "pred", mod=sub << SUB_SHIFT)

    def _op_match(self, st: Statement, mods: list[str]) -> None:
        self._emit(st, "MATCH", _types(mods)[-1], mod=(M_FLAG if "all" in mods else 0))

    def _op_redux(self, st: Statement, mods: list[str]) -> None:
        ops = {"add": 0, "min": 3, "max": 4, "and": 5, "or": 6, "xor": 7}
        sub = next((ops[m] for m in mods if m in ops), 0)
        self._emit(st, "REDUX", _types(mods)[-1], mod=sub << SUB_SHIFT)

    def _op_activemask(self, st: Statement, mods: list[str]) -> None:
        self._emit(st, "ACTIVEMASK", "b32")

    def _op_elect(self, st: Statement, mods: list[str]) -> None:
        self._emit(st, "ELECT")

    def _op_nanosleep(self, st: Statement, mods: list[str]) -> None:
        self._emit(st, "NANOSLEEP")

    def _op_setmaxnreg(self, st: Statement, mods: list[str]) -> None:
        self._emit(st, "SETMAXNREG", mod=M_FLAG if "inc" in mods else 0)

    def _nop(self, st: Statement, mods: list[str]) -> None:
        self._emit(st, "NOP", operands=[])

    _op_prefetch = _op_prefetchu = _op_applypriority = _op_discard = _op_pmevent = _nop

    def _op_griddepcontrol(self, st: Statement, mods: list[str]) -> None:
        self._emit(st, "NOP", operands=[])

    def _op_createpolicy(self, st: Statement, mods: list[str]) -> None:
        rec = self._operand(st.operands[0], st.scope)
        self._emit(st, "MOV", "b64", operands=[rec, (K_IMM, 0, 0, -1, 0)])

    # atomics ------------------------------------------------------------------------------------------------------
    def _atomic(self, st: Statement, mods: list[str], op: str) -> None:
        ts = _types(mods)
        sub = next((ATOM_OPS[m] for m in mods if m in ATOM_OPS), None)
        if sub is None:
            raise DecodeError("an atomic operation without a known operation")
        if _vec(mods):
            raise DecodeError("vector atomics are not modelled")
        t = ts[-1] if ts else "b32"
        mod = (_space(mods) << SPACE_SHIFT) | (sub << SUB_SHIFT)
        ops = st.operands
        if len(ops) > (4 if sub == ATOM_OPS["cas"] else 3) - (1 if op == "RED" else 0):  # a cache policy
            st = Statement(st.opcode, ops[:(4 if sub == ATOM_OPS["cas"] else 3) - (1 if op == "RED" else 0)],
                           st.guard, st.guard_neg, st.loc, st.line, st.scope)
        self._emit(st, op, t, mod=mod)

    def _op_atom(self, st: Statement, mods: list[str]) -> None:
        self._atomic(st, mods, "ATOM")

    def _op_red(self, st: Statement, mods: list[str]) -> None:
        if "async" in mods:
            raise DecodeError("red.async (remote shared memory of a cluster) is not modelled")
        self._atomic(st, mods, "RED")

    # tensor cores -------------------------------------------------------------------------------------------------
    def _op_mma(self, st: Statement, mods: list[str]) -> None:
        shape = next((m for m in mods if re.fullmatch(r"m\d+n\d+k\d+", m)), "")
        m, n, k = (int(x) for x in re.findall(r"\d+", shape)) if shape else (0, 0, 0)
        ts = _types(mods)
        if len(ts) != 4:
            raise DecodeError("mma.sync with these types is not modelled")
        a_row, b_col = "row" in mods, "col" in mods
        flags = (M_FLAG if a_row else 0) | (M_FLAG2 if b_col else 0)
        self._emit(st, "MMA", ts[0], ts[1], mod=flags, x=m | (n << 8), y=k | (TYPES[ts[2]] << 8) | (TYPES[ts[3]] << 16))

    def _op_ldmatrix(self, st: Statement, mods: list[str]) -> None:
        num = next((int(m[1:]) for m in mods if m in ("x1", "x2", "x4")), 1)
        if "m8n8" not in mods:
            raise DecodeError("ldmatrix shapes other than m8n8 are not modelled")
        self._emit(st, "LDMATRIX", mod=(M_TRANS if "trans" in mods else 0) | (_space(mods) << SPACE_SHIFT), x=num)

    def _op_stmatrix(self, st: Statement, mods: list[str]) -> None:
        num = next((int(m[1:]) for m in mods if m in ("x1", "x2", "x4")), 1)
        if "m8n8" not in mods:
            raise DecodeError("stmatrix shapes other than m8n8 are not modelled")
        self._emit(st, "STMATRIX", mod=(M_TRANS if "trans" in mods else 0) | (_space(mods) << SPACE_SHIFT), x=num)

    def _op_movmatrix(self, st: Statement, mods: list[str]) -> None:
        self._emit(st, "MOVMATRIX")

    def _op_wgmma(self, st: Statement, mods: list[str]) -> None:
        sub = mods[0] if mods else ""
        if sub == "fence":
            self._emit(st, "WGMMA_FENCE")
        elif sub == "commit_group":
            self._emit(st, "WGMMA_COMMIT")
        elif sub == "wait_group":
            self._emit(st, "WGMMA_WAIT")
        elif sub == "mma_async":
            shape = next((m for m in mods if re.fullmatch(r"m64n\d+k\d+", m)), "")
            if not shape:
                raise DecodeError("this wgmma shape is not modelled")
            n = int(re.findall(r"\d+", shape)[1])
            k = int(re.findall(r"\d+", shape)[2])
            ts = _types(mods)
            if len(ts) != 3 or k != 16:
                raise DecodeError("wgmma with these types is not modelled (bf16/f16 inputs, f32 accumulators)")
            if "sp" in mods:
                raise DecodeError("sparse wgmma is not modelled")
            self._emit(st, "WGMMA", ts[0], ts[1], x=n, y=TYPES[ts[2]])
        else:
            raise DecodeError(f"wgmma.{sub} is not modelled")

    # async copies and barriers ------------------------------------------------------------------------------------
    def _op_cp(self, st: Statement, mods: list[str]) -> None:
        if not mods:
            raise DecodeError("cp")
        if mods[0] == "async":
            rest = mods[1:]
            if rest[:1] == ["commit_group"]:
                self._emit(st, "CP_ASYNC_COMMIT")
            elif rest[:1] in (["wait_group"], ["wait_all"]):
                self._emit(st, "CP_ASYNC_WAIT", mod=M_FLAG if rest[0] == "wait_all" else 0)
            elif rest[:1] == ["bulk"]:
                self._bulk(st, rest[1:], reduce=False)
            elif rest[:1] in (["ca"], ["cg"]):
                ops = st.operands[:4]
                if len(ops) == 4 and ops[3].kind not in ("imm", "reg"):
                    ops = ops[:3]
                st2 = Statement(st.opcode, ops, st.guard, st.guard_neg, st.loc, st.line, st.scope)
                self._emit(st2, "CP_ASYNC", mod=_space(mods) << SPACE_SHIFT)
            elif rest[:1] == ["mbarrier"]:
                raise DecodeError("cp.async.mbarrier.arrive is not modelled")
            else:
                raise DecodeError("this form of cp.async is not modelled")
        elif mods[0] == "reduce":
            if mods[1:3] == ["async", "bulk"]:
                self._bulk(st, mods[3:], reduce=True)
            else:
                raise DecodeError("this form of cp.reduce is not modelled")
        else:
            raise DecodeError(f"cp.{mods[0]} is not modelled")

    def _bulk(self, st: Statement, mods: list[str], reduce: bool) -> None:
        if mods[:1] == ["commit_group"]:
            self._emit(st, "BULK_COMMIT")
            return
        if mods[:1] == ["wait_group"]:
            self._emit(st, "BULK_WAIT", mod=M_FLAG if "read" in mods else 0)
            return
        if mods[:1] != ["tensor"]:
            raise DecodeError("plain bulk copies (cp.async.bulk without .tensor) are not modelled")
        dims = int(mods[1][0]) if len(mods) > 1 and mods[1].endswith("d") else 0
        if any(m.startswith("multicast") for m in mods):
            raise DecodeError("TMA multicast is not modelled (the emulator runs one block of a cluster at a time)")
        if "im2col" in mods:
            raise DecodeError("im2col TMA is not modelled")
        joined = ".".join(mods)
        load = "global.mbarrier" in joined or joined.startswith(f"tensor.{mods[1]}.shared")
        if load and not reduce:  # [dst], [map, {coords}], [mbar] -> dst, map, coords, mbar
            dst, src, bar = st.operands[:3]
            self._emit(st, "TMA_LOAD", x=dims, operands=[self._operand(dst, st.scope), *self._tensor(src, st),
                                                       self._operand(bar, st.scope)])
        else:  # [map, {coords}], [src] -> map, coords, src
            dst, src = st.operands[:2]
            self._emit(st, "TMA_STORE", x=dims, mod=M_FLAG if reduce else 0,
                       operands=[*self._tensor(dst, st), self._operand(src, st.scope)])

    def _tensor(self, o: Operand, st: Statement) -> list[tuple]:
        """``[map, {c0, c1, ...}]``: the map's address (a register) and the coordinates (a vector)."""
        if o.kind != "addr" or not o.items:
            raise DecodeError("a TMA operand without a tensor map and coordinates")
        base = Operand("addr", base=o.base, offset=o.offset)
        return [self._operand(base, st.scope), self._operand(Operand("vec", items=o.items), st.scope)]

    def _op_mbarrier(self, st: Statement, mods: list[str]) -> None:
        sub = mods[0] if mods else ""
        if any(m.startswith("shared::cluster") for m in mods):
            raise DecodeError("an mbarrier of another block of the cluster is not modelled")
        space = _space(mods) << SPACE_SHIFT
        if sub == "init":
            self._emit(st, "MBAR_INIT", mod=space)
        elif sub == "arrive":
            if "noComplete" in mods or "arrive_drop" in mods:
                raise DecodeError("this form of mbarrier.arrive is not modelled")
            self._emit(st, "MBAR_ARRIVE", mod=space | (M_FLAG if "expect_tx" in mods else 0))
        elif sub == "expect_tx":
            self._emit(st, "MBAR_EXPECT_TX", mod=space)
        elif sub in ("try_wait", "test_wait"):
            mod = space | (M_FLAG if "parity" in mods else 0) | (M_FLAG2 if sub == "try_wait" else 0)
            ops = st.operands[:3]
            st2 = Statement(st.opcode, ops, st.guard, st.guard_neg, st.loc, st.line, st.scope)
            self._emit(st2, "MBAR_WAIT", mod=mod)
        elif sub == "inval":
            self._emit(st, "MBAR_INVAL", mod=space)
        else:
            raise DecodeError(f"mbarrier.{sub} is not modelled")


def _i64(v: int) -> int:
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >= 1 << 63 else v


def _text(st: Statement) -> str:
    def op(o: Operand) -> str:
        if o.kind == "reg":
            return ("!" if o.neg else "") + o.name
        if o.kind in ("vec", "list", "pair"):
            inner = ", ".join(op(i) for i in o.items)
            if o.kind == "pair":
                return "|".join(op(i) for i in o.items)
            return "{" + inner + "}" if o.kind == "vec" else "(" + inner + ")"
        if o.kind == "addr":
            inner = (o.base or "") + (f"+{o.offset}" if o.offset else "") if o.base else str(o.offset)
            if o.items:
                inner += ", {" + ", ".join(op(i) for i in o.items) + "}"
            return "[" + inner + "]"
        if o.kind == "imm":
            return str(o.value)
        if o.kind == "fimm":
            return ("0f%08X" if o.width == 32 else "0d%016X") % o.value
        if o.kind == "sink":
            return "_"
        return str(o.fvalue) if o.kind == "dimm" else o.name
    guard = f"@{'!' if st.guard_neg else ''}{st.guard} " if st.guard else ""
    return f"{guard}{st.opcode} " + ", ".join(op(o) for o in st.operands)


def _demangle_local(name: str) -> str:
    """``_ZZ11smem_matmulE2As`` → ``As`` (a function-scope variable); other names as they are."""
    m = re.match(r"^_ZZ.*E(\d+)([A-Za-z_]\w*)$", name)
    if m and len(m.group(2)) == int(m.group(1)):
        return m.group(2)
    m = re.match(r"^_ZZ.*E(\d+)([A-Za-z_]\w*?)(_\d+)?$", name)
    if m:
        return m.group(2)[:int(m.group(1))]
    return name


def decode(module: Module, names: dict[str, str] | None = None) -> Program:
    """Decode a parsed module (see the module docstring). ``names``: display names for symbols."""
    return _Decoder(module, names).run()
