"""Inline PTX → C++ calls into the emulator: one ``asm`` statement at a time, parsed, never matched as a whole.

An ``asm volatile("template" : outputs : inputs : clobbers)`` statement becomes a C++ block that loads
every operand's bits into ``__r[i]`` (``%i`` in the template), runs each PTX instruction of the template
(``.reg`` declarations become locals, ``@p`` guards become ``if``), and writes the outputs back. An
instruction with no CPU implementation compiles to a call that stops the kernel with
"the PTX instruction X is not emulated" when (and only when) a thread executes it.

Public API: ``translate(template, operands) -> str`` (the C++ block), ``Operand``, ``unsupported(template)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..run.signature import split_top, strip_comments

_TYPES = {"f32": 0, "f16": 1, "bf16": 2, "f64": 3, "tf32": 4, "s32": 5, "u32": 6}
_SPECIAL = {
    "%laneid": "uint64_t(::tkemu::ptx_laneid())", "%warpid": "uint64_t(::tkemu::ptx_warpid())",
    "%tid.x": "uint64_t(threadIdx.x)", "%tid.y": "uint64_t(threadIdx.y)", "%tid.z": "uint64_t(threadIdx.z)",
    "%ntid.x": "uint64_t(blockDim.x)", "%ntid.y": "uint64_t(blockDim.y)", "%ntid.z": "uint64_t(blockDim.z)",
    "%ctaid.x": "uint64_t(blockIdx.x)", "%ctaid.y": "uint64_t(blockIdx.y)", "%ctaid.z": "uint64_t(blockIdx.z)",
    "%nctaid.x": "uint64_t(gridDim.x)", "%nctaid.y": "uint64_t(gridDim.y)", "%nctaid.z": "uint64_t(gridDim.z)",
    "%smid": "uint64_t(0)", "%nsmid": "uint64_t(1)", "%clock": "uint64_t(uint32_t(::tkemu::clock64()))",
    "%clock64": "uint64_t(::tkemu::clock64())", "%globaltimer": "uint64_t(::tkemu::globaltimer())",
    "%lanemask_lt": "uint64_t((1u << ::tkemu::ptx_laneid()) - 1u)",
    "%lanemask_eq": "uint64_t(1u << ::tkemu::ptx_laneid())",
}


@dataclass(frozen=True)
class Operand:
    """One ``"constraint"(expression)`` of an asm statement; ``name`` for ``[name] "r"(x)`` operands."""

    constraint: str
    expr: str
    output: bool
    name: str = ""


class PtxError(ValueError):
    """The asm statement itself cannot be read (not: an instruction we do not emulate)."""


def _cstr(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


def _split_top(text: str) -> list[str]:
    """``text`` split on commas outside ``{}``, ``[]`` and ``()`` (a vector operand or an address holds commas)."""
    return split_top(text, ",", "{}[]()")


def _statements(text: str) -> list[str]:
    """PTX statements in order; ``{`` and ``}`` (scopes) come out as statements of their own."""
    out, cur = [], []
    depth_vec = 0  # braces inside an operand list ({%0, %1}) are not scopes
    for ch in strip_comments(text):
        stmt = "".join(cur).strip()
        if ch == "{" and not stmt:
            out.append("{")
            continue
        if ch == "}" and not stmt and depth_vec == 0:
            out.append("}")
            continue
        if ch == "{":
            depth_vec += 1
        elif ch == "}":
            depth_vec -= 1
        if ch == ";" and depth_vec == 0:
            if stmt:
                out.append(stmt)
            cur = []
            continue
        cur.append(ch)
    rest = "".join(cur).strip()
    if rest:
        out.append(rest)
    return out


class _Block:
    """Generates the C++ for one asm statement."""

    def __init__(self, template: str, operands: list[Operand]):
        self.template = template
        self.ops = operands
        self.names = {op.name: i for i, op in enumerate(operands) if op.name}
        self.locals: dict[str, str] = {}
        self.code: list[str] = []
        self.tmp = 0
        self.bound: set[int] = set()  # input operands bound by reference (``__iN``): their homes are needed

    # ---- operands -------------------------------------------------------------------------------------
    def reg(self, tok: str) -> str:
        """An lvalue/rvalue C++ expression of type uint64_t for one scalar PTX operand."""
        tok = tok.strip()
        if m := re.fullmatch(r"%(\d+)", tok):
            i = int(m.group(1))
            if i >= len(self.ops):
                raise PtxError(f"operand %{i} does not exist (the statement has {len(self.ops)} operands)")
            return f"__r[{i}]"
        if m := re.fullmatch(r"%\[(\w+)\]", tok):
            if m.group(1) not in self.names:
                raise PtxError(f"operand %[{m.group(1)}] does not exist")
            return f"__r[{self.names[m.group(1)]}]"
        if tok in self.locals:
            return self.locals[tok]
        if tok in _SPECIAL:
            return _SPECIAL[tok]
        if tok == "_":
            return "__sink"
        if m := re.fullmatch(r"([+-]?)0[fF]([0-9a-fA-F]{8})", tok):
            bits = int(m.group(2), 16) ^ (0x80000000 if m.group(1) == "-" else 0)
            return f"uint64_t({bits}ull)"
        if m := re.fullmatch(r"([+-]?)0[dD]([0-9a-fA-F]{16})", tok):
            return f"uint64_t(0x{m.group(2)}ull)"
        if re.fullmatch(r"[+-]?(0[xX][0-9a-fA-F]+|\d+)[uU]?", tok):
            return f"uint64_t(int64_t({tok.rstrip('uU')}))"
        if re.fullmatch(r"[+-]?\d+\.\d*([eE][+-]?\d+)?", tok):
            return f"::tkemu::to_bits(float({tok}))"
        raise PtxError(f"cannot read the operand {tok!r}")

    def vec(self, tok: str) -> list[str]:
        tok = tok.strip()
        if tok.startswith("{") and tok.endswith("}"):
            return [self.reg(t) for t in _split_top(tok[1:-1])]
        return [self.reg(tok)]

    def addr(self, tok: str) -> str:
        """``[%1]``, ``[%1+16]``, ``[name]`` → the address value."""
        tok = tok.strip()
        if not (tok.startswith("[") and tok.endswith("]")):
            raise PtxError(f"expected an address [..], got {tok!r}")
        inner = tok[1:-1].strip()
        m = re.fullmatch(r"(.+?)\s*([+-])\s*(0[xX][0-9a-fA-F]+|\d+)", inner)
        if m:
            return f"({self.reg(m.group(1))} {m.group(2)} uint64_t({m.group(3)}))"
        return self.reg(inner)

    def ptrs(self, regs: list[str]) -> str:
        name = f"__p{self.tmp}"
        self.tmp += 1
        self.code.append(f"uint64_t* const {name}[] = {{{', '.join('&' + r for r in regs)}}};")
        return name

    def homes(self, regs: list[str]) -> str:
        """An array of the C++ variables' addresses behind registers (``nullptr`` for PTX locals and for inputs
        that are not lvalues): where an asynchronous instruction (wgmma) writes its result later, or keeps
        reading its register A operand until its group retires."""
        homes = []
        for r in regs:
            m = re.fullmatch(r"__r\[(\d+)\]", r)
            if not m:
                homes.append("nullptr")
            elif self.ops[int(m.group(1))].output:
                homes.append(f"static_cast<void*>(&__o{m.group(1)})")
            elif not self.ops[int(m.group(1))].constraint[:1].isdigit():
                self.bound.add(int(m.group(1)))
                homes.append(f"::tkemu::home_of<decltype(__i{m.group(1)})>(__i{m.group(1)})")
            else:
                homes.append("nullptr")
        name = f"__h{self.tmp}"
        self.tmp += 1
        self.code.append(f"void* const {name}[] = {{{', '.join(homes)}}};")
        return name

    def vals(self, regs: list[str]) -> str:
        name = f"__v{self.tmp}"
        self.tmp += 1
        self.code.append(f"const uint64_t {name}[] = {{{', '.join(regs)}}};")
        return name

    def emit(self, line: str) -> None:
        self.code.append(line)

    # ---- statements -------------------------------------------------------------------------------------
    def statement(self, stmt: str) -> None:
        if stmt in ("{", "}"):
            self.emit(stmt)
            return
        if stmt.startswith(".reg"):
            m = re.fullmatch(r"\.reg\s+\.(\w+)\s+(.+)", stmt)
            if not m:
                raise PtxError(f"cannot read the declaration {stmt!r}")
            for name in _split_top(m.group(2)):
                rm = re.fullmatch(r"(%?\w+)<(\d+)>", name)
                names = [f"{rm.group(1)}{i}" for i in range(int(rm.group(2)))] if rm else [name]
                for n in names:
                    var = "__l_" + re.sub(r"\W", "_", n)
                    self.locals[n] = var
                    self.emit(f"uint64_t {var} = 0;")
            return
        guard = ""
        if m := re.match(r"@(!?)(%?[\w\[\]]+)\s+", stmt):
            guard = f"if ({'!' if m.group(1) else ''}({self.reg(m.group(2))} & 1)) "
            stmt = stmt[m.end():]
        parts = stmt.split(None, 1)
        opcode, rest = parts[0], (parts[1] if len(parts) > 1 else "")
        args = _split_top(rest)
        before = len(self.code)
        try:
            self.instruction(opcode, args, stmt)
        except PtxError:
            raise
        except (IndexError, KeyError, ValueError) as e:
            raise PtxError(f"cannot read `{stmt}`: {e}") from None
        body = self.code[before:]
        del self.code[before:]
        self.emit(guard + "{ " + " ".join(body) + " }")

    def instruction(self, opcode: str, a: list[str], text: str) -> None:  # noqa: C901 - one table of instructions
        mods = opcode.split(".")
        head = mods[0]
        ms = set(mods[1:])
        T = "::tkemu::ptx::"
        if head == "mma":
            shape = next(x for x in mods if re.fullmatch(r"m\d+n\d+k\d+", x))
            m, n, k = map(int, re.findall(r"\d+", shape))
            types = [x for x in mods if x in _TYPES]
            if len(types) != 4:
                return self.not_emulated(text, "mma.sync with these types")
            d, aa, b, c = (self.vec(x) for x in a[:4])
            self.emit(f"{T}mma({m}, {n}, {k}, {_TYPES[types[0]]}, {_TYPES[types[1]]}, {_TYPES[types[2]]}, "
                      f"{_TYPES[types[3]]}, {self.ptrs(d)}, {self.vals(aa)}, {self.vals(b)}, {self.vals(c)}, "
                      f"{'true' if 'row' in ms else 'false'}, {'true' if 'col' in ms else 'false'});")
        elif head == "ldmatrix":
            num = int(next(x for x in mods if re.fullmatch(r"x[124]", x))[1:])
            self.emit(f"{T}ldmatrix({num}, {'true' if 'trans' in ms else 'false'}, {self.ptrs(self.vec(a[0]))}, "
                      f"{self.addr(a[1])});")
        elif head == "stmatrix":
            num = int(next(x for x in mods if re.fullmatch(r"x[124]", x))[1:])
            self.emit(f"{T}stmatrix({num}, {'true' if 'trans' in ms else 'false'}, {self.addr(a[0])}, "
                      f"{self.vals(self.vec(a[1]))});")
        elif head == "movmatrix":
            self.emit(f"{T}movmatrix(&{self.reg(a[0])}, {self.reg(a[1])});")
        elif opcode.startswith("cp.async.bulk.tensor") or opcode.startswith("cp.reduce.async.bulk.tensor"):
            self.tensor_copy(mods, ms, a, text)
        elif opcode.startswith("cp.async.bulk.commit_group"):
            self.emit(f"{T}bulk_commit();")
        elif opcode.startswith("cp.async.bulk.wait_group"):
            self.emit(f"{T}bulk_wait(int({self.reg(a[0])}), {'true' if 'read' in ms else 'false'});")
        elif opcode.startswith("cp.async.bulk"):
            self.not_emulated(text, "non-tensor bulk copies")
        elif opcode == "cp.async.commit_group":
            self.emit(f"{T}cp_async_commit();")
        elif opcode == "cp.async.wait_group":
            self.emit(f"{T}cp_async_wait(int({self.reg(a[0])}));")
        elif opcode == "cp.async.wait_all":
            self.emit(f"{T}cp_async_commit(); {T}cp_async_wait(0);")
        elif head == "cp" and len(mods) > 1 and mods[1] == "async":
            if "mbarrier" in ms:
                return self.not_emulated(text, "cp.async.mbarrier.arrive")
            hint = "L2::cache_hint" in ms
            has_size = len(a) > 4 or (len(a) == 4 and not hint)
            src_size = self.reg(a[3]) if has_size else "uint64_t(-1)"
            self.emit(f"{T}cp_async({self.addr(a[0])}, {self.addr(a[1])}, int({self.reg(a[2])}), "
                      f"int(int64_t({src_size})));")
        elif head == "mbarrier":
            self.mbarrier(mods, ms, a, text)
        elif head == "fence" and "proxy" in ms and any(m.startswith("async") for m in mods[2:]):
            self.emit(f"{T}fence_proxy_async();")
        elif head in ("fence", "membar") or opcode.startswith("prefetch") or head == "griddepcontrol":
            pass
        elif head == "wgmma":
            self.wgmma(mods, ms, a, text)
        elif head == "setmaxnreg":
            self.emit(f"{T}setmaxnreg({'true' if 'inc' in ms else 'false'}, int({self.reg(a[0])}));")
        elif head in ("bar", "barrier"):
            if "warp" in ms:
                self.emit(f"::tkemu::syncwarp(uint32_t({self.reg(a[0])}));")
            elif ms & {"red"}:
                self.not_emulated(text, "bar.red")
            else:
                count = f"int({self.reg(a[1])})" if len(a) > 1 else "0"
                fn = "bar_arrive" if "arrive" in ms else "bar_sync"
                self.emit(f"::tkemu::{fn}(unsigned({self.reg(a[0])}), {count});")
        elif head in ("ex2", "lg2", "rcp", "rsqrt", "sqrt", "tanh", "sin", "cos") and ("f32" in ms):
            fn = {"ex2": "std::exp2(x)", "lg2": "std::log2(x)", "rcp": "1.0f / x", "rsqrt": "1.0f / std::sqrt(x)",
                  "sqrt": "std::sqrt(x)", "tanh": "std::tanh(x)", "sin": "std::sin(x)", "cos": "std::cos(x)"}[head]
            x = self.reg(a[1])
            self.emit(f"{{ const float x = ::tkemu::from_bits<float>({x}); {self.reg(a[0])} = "
                      f"uint64_t(::tkemu::to_bits<float>({fn})); }}")
        elif head == "mov":
            self.mov(mods, a)
        elif head == "setp":
            self.setp(mods, a, text)
        elif head == "selp":
            w = _width(mods)
            self.emit(f"{self.reg(a[0])} = (({self.reg(a[3])}) & 1) ? {_mask(self.reg(a[1]), w)} : "
                      f"{_mask(self.reg(a[2]), w)};")
        elif head in ("add", "sub", "mul", "and", "or", "xor", "shl", "shr", "min", "max") and len(a) == 3:
            self.alu(head, mods, a, text)
        elif head == "not":
            w = _width(mods)
            self.emit(f"{self.reg(a[0])} = {_mask('~' + self.reg(a[1]), w)};")
        elif head == "cvt":
            self.cvt(mods, a, text)
        elif head == "cvta":
            if "to" in ms and "shared" in ms:
                self.emit(f"{self.reg(a[0])} = {T}cvta_to_shared({self.reg(a[1])});")
            elif "shared" in ms:
                self.emit(f"{self.reg(a[0])} = {T}cvta_shared_to_generic({self.reg(a[1])});")
            else:
                self.emit(f"{self.reg(a[0])} = {self.reg(a[1])};")
        elif head in ("ld", "st"):
            self.ldst(head, mods, ms, a, text)
        elif head == "elect":
            outs = a[0].split("|")
            code = "{ const unsigned __m = ::tkemu::activemask(); const unsigned __b = ::tkemu::vote(__m, 1, 0); " \
                   "const unsigned __leader = unsigned(__builtin_ctz(__b)); "
            if len(outs) == 2:
                code += f"{self.reg(outs[0])} = __leader; "
            code += f"{self.reg(outs[-1])} = uint64_t(__leader == unsigned(::tkemu::ptx_laneid())); }}"
            self.emit(code)
        elif head == "activemask":
            self.emit(f"{self.reg(a[0])} = ::tkemu::activemask();")
        elif head == "nanosleep":
            self.emit("::tkemu::yield_now();")
        elif head in ("trap", "brkpt"):
            self.emit("::tkemu::trap();")
        else:
            self.not_emulated(text, "no CPU implementation")

    def not_emulated(self, text: str, why: str) -> None:
        self.emit(f"::tkemu::not_emulated({_cstr(text)}, {_cstr(why)});")

    # ---- families -----------------------------------------------------------------------------------------
    def tensor_copy(self, mods: list[str], ms: set[str], a: list[str], text: str) -> None:
        dims = int(next(x for x in mods if re.fullmatch(r"[1-5]d", x))[0])
        if "im2col" in ms or "multicast::cluster" in ms:
            return self.not_emulated(text, "im2col / multicast tensor copies")
        reduce = mods[0] == "cp" and mods[1] == "reduce"
        if reduce and "add" not in ms:
            return self.not_emulated(text, "tensor reductions other than .add")

        def map_and_coords(tok: str) -> tuple[str, str]:
            inner = _split_top(tok.strip()[1:-1])
            coords = self.vec(inner[1])
            if len(coords) != dims:
                raise PtxError(f"a {dims}-D copy with {len(coords)} coordinates")
            name = f"__c{self.tmp}"
            self.tmp += 1
            self.emit(f"const int32_t {name}[] = {{{', '.join(f'int32_t(uint32_t({c}))' for c in coords)}}};")
            return self.reg(inner[0]), name

        if mods[mods.index("tensor") + 2].startswith("shared"):  # .Nd.shared::cluster.global: a load
            m, c = map_and_coords(a[1])
            self.emit(f"::tkemu::ptx::tma_load({dims}, {self.addr(a[0])}, {m}, {c}, {self.addr(a[2])});")
        else:
            m, c = map_and_coords(a[0])
            self.emit(f"::tkemu::ptx::tma_store({dims}, {m}, {c}, {self.addr(a[1])}, {1 if reduce else 0});")

    def mbarrier(self, mods: list[str], ms: set[str], a: list[str], text: str) -> None:
        T = "::tkemu::ptx::"
        op = mods[1]
        if op == "init":
            self.emit(f"{T}mbar_init({self.addr(a[0])}, uint32_t({self.reg(a[1])}));")
        elif op == "arrive" and "expect_tx" in ms:
            count = f"uint32_t({self.reg(a[3])})" if len(a) > 3 else "1u"
            tx = f"uint32_t({self.reg(a[2])})"
            self.emit(f"{self.reg(a[0])} = {T}mbar_arrive({self.addr(a[1])}, {count}, {tx}, true);")
        elif op == "arrive" and not ms & {"noComplete"}:
            count = f"uint32_t({self.reg(a[2])})" if len(a) > 2 else "1u"
            self.emit(f"{self.reg(a[0])} = {T}mbar_arrive({self.addr(a[1])}, {count}, 0u, false);")
        elif op == "expect_tx":
            self.emit(f"{T}mbar_expect_tx({self.addr(a[0])}, uint32_t({self.reg(a[1])}));")
        elif op in ("try_wait", "test_wait"):
            parity = "parity" in ms
            self.emit(f"{self.reg(a[0])} = uint64_t({T}mbar_wait({self.addr(a[1])}, {self.reg(a[2])}, "
                      f"{'true' if parity else 'false'}, {'true' if op == 'try_wait' else 'false'}));")
        elif op == "inval":
            self.emit(f"{T}mbar_inval({self.addr(a[0])});")
        else:
            self.not_emulated(text, "this mbarrier operation")

    def wgmma(self, mods: list[str], ms: set[str], a: list[str], text: str) -> None:
        T = "::tkemu::ptx::"
        if "fence" in ms:
            self.emit(f"{T}wgmma_fence();")
            return
        if "commit_group" in ms:
            self.emit(f"{T}wgmma_commit();")
            return
        if "wait_group" in ms:
            self.emit(f"{T}wgmma_wait(int({self.reg(a[0])}));")
            return
        shape = next((x for x in mods if re.fullmatch(r"m64n\d+k\d+", x)), None)
        types = [x for x in mods if x in _TYPES]
        if shape is None or not shape.endswith("k16") or len(types) != 3 or "sp" in ms:
            return self.not_emulated(text, "wgmma shapes other than m64nNk16 with bf16/f16 inputs")
        n = int(re.findall(r"\d+", shape)[1])
        d = self.vec(a[0])
        if len(d) != n // 2:
            raise PtxError(f"wgmma m64n{n}k16 with f32 accumulators has {n // 2} of them, not {len(d)}")
        rs = a[1].strip().startswith("{")
        if rs:
            avec = self.vec(a[1])
            if len(avec) != 4:
                raise PtxError(f"wgmma with matrix A in registers names 4 of them, not {len(avec)}")
            areg, ahome, adesc = self.vals(avec), self.homes(avec), "uint64_t(0)"
            rest = a[2:]
            bdesc, scale_d, sa, sb = rest[0], rest[1], rest[2], rest[3]
            tnsp_a, tnsp_b = "0", (rest[4] if len(rest) > 4 else "0")
        else:
            areg, ahome, adesc = "nullptr", "nullptr", self.reg(a[1])
            rest = a[2:]
            bdesc, scale_d, sa, sb = rest[0], rest[1], rest[2], rest[3]
            tnsp_a, tnsp_b = (rest[4] if len(rest) > 4 else "0"), (rest[5] if len(rest) > 5 else "0")
        self.emit(f"{T}wgmma({n}, {_TYPES[types[0]]}, {_TYPES[types[1]]}, {_TYPES[types[2]]}, {self.ptrs(d)}, "
                  f"{self.homes(d)}, "
                  f"{areg}, {ahome}, {adesc}, {self.reg(bdesc)}, int({self.reg(scale_d)} & 1), "
                  f"int(int64_t({self.reg(sa)})), int(int64_t({self.reg(sb)})), int({self.reg(tnsp_a)}), "
                  f"int({self.reg(tnsp_b)}));")

    def mov(self, mods: list[str], a: list[str]) -> None:
        w = _width(mods)
        dst, src = a[0].strip(), a[1].strip()
        if src.startswith("{"):  # pack: mov.b64 d, {lo, hi}
            parts = self.vec(src)
            piece = w // len(parts)
            expr = " | ".join(f"({_mask(p, piece)} << {piece * i})" for i, p in enumerate(parts))
            self.emit(f"{self.reg(dst)} = {expr};")
        elif dst.startswith("{"):  # unpack
            parts = self.vec(dst)
            piece = w // len(parts)
            s = self.reg(src)
            for i, p in enumerate(parts):
                self.emit(f"{p} = {_mask(f'({s} >> {piece * i})', piece)};")
        else:
            self.emit(f"{self.reg(dst)} = {_mask(self.reg(src), w)};")

    def setp(self, mods: list[str], a: list[str], text: str) -> None:
        cmp, ty = mods[1], mods[-1]
        x, y = self.reg(a[1]), self.reg(a[2])
        if ty.startswith("f"):
            cast = "::tkemu::from_bits<float>" if ty == "f32" else "::tkemu::from_bits<double>"
            x, y = f"{cast}({x})", f"{cast}({y})"
        elif ty.startswith("s"):
            bits = int(ty[1:])
            x, y = f"int{bits}_t({x})", f"int{bits}_t({y})"
        else:
            bits = int(ty[1:]) if ty[1:].isdigit() else 32
            x, y = f"uint{bits}_t({x})", f"uint{bits}_t({y})"
        ops = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "lo": "<", "ls": "<=",
               "hi": ">", "hs": ">=", "equ": "==", "neu": "!=", "ltu": "<", "leu": "<=", "gtu": ">", "geu": ">="}
        if cmp not in ops:
            return self.not_emulated(text, f"setp.{cmp}")
        outs = a[0].split("|")
        self.emit(f"{self.reg(outs[0])} = uint64_t(({x}) {ops[cmp]} ({y}));")
        if len(outs) > 1:
            self.emit(f"{self.reg(outs[1])} = uint64_t(!(({x}) {ops[cmp]} ({y})));")

    def alu(self, head: str, mods: list[str], a: list[str], text: str) -> None:
        ty = mods[-1]
        d, x, y = self.reg(a[0]), self.reg(a[1]), self.reg(a[2])
        if ty in ("f32", "f64"):
            c = "float" if ty == "f32" else "double"
            sym = {"add": "+", "sub": "-", "mul": "*"}.get(head)
            if sym is None and head in ("min", "max"):
                self.emit(f"{d} = uint64_t(::tkemu::to_bits<{c}>(std::f{head}(::tkemu::from_bits<{c}>({x}), "
                          f"::tkemu::from_bits<{c}>({y}))));")
                return
            if sym is None:
                return self.not_emulated(text, f"{head}.{ty}")
            self.emit(f"{d} = uint64_t(::tkemu::to_bits<{c}>(::tkemu::from_bits<{c}>({x}) {sym} "
                      f"::tkemu::from_bits<{c}>({y})));")
            return
        w = _width(mods)
        signed = ty.startswith("s")
        cx, cy = (f"int64_t(int{w}_t({x}))", f"int64_t(int{w}_t({y}))") if signed and w in (16, 32, 64) else (x, y)
        if head in ("min", "max"):
            rel = "<" if head == "min" else ">"
            self.emit(f"{d} = {_mask(f'uint64_t(({cx}) {rel} ({cy}) ? ({cx}) : ({cy}))', w)};")
            return
        if head == "mul":
            if "wide" in mods:
                self.emit(f"{d} = uint64_t(({cx}) * ({cy}));")
                return
            if "hi" in mods:
                return self.not_emulated(text, "mul.hi")
        sym = {"add": "+", "sub": "-", "mul": "*", "and": "&", "or": "|", "xor": "^", "shl": "<<", "shr": ">>"}[head]
        if head == "shr" and signed:
            self.emit(f"{d} = {_mask(f'uint64_t(({cx}) >> ({y} & 63))', w)};")
        elif head in ("shl", "shr"):
            self.emit(f"{d} = {_mask(f'(({_mask(x, w)}) {sym} ({y} & 63))', w)};")
        else:
            self.emit(f"{d} = {_mask(f'uint64_t(({cx}) {sym} ({cy}))', w)};")

    def cvt(self, mods: list[str], a: list[str], text: str) -> None:
        types = [m for m in mods[1:] if re.fullmatch(r"(f|s|u|b)\d+|bf16x2|f16x2|bf16|f16|tf32", m)]
        d = self.reg(a[0])
        if len(types) == 2 and types[0] in ("bf16x2", "f16x2") and types[1] == "f32" and len(a) == 3:
            conv = "::tkemu::f32_to_bf16" if types[0] == "bf16x2" else "::tkemu::f32_to_f16"
            hi, lo = self.reg(a[1]), self.reg(a[2])  # d = {hi: a, lo: b}
            self.emit(f"{d} = (uint64_t({conv}(::tkemu::from_bits<float>({hi}))) << 16) | "
                      f"uint64_t({conv}(::tkemu::from_bits<float>({lo})));")
            return
        if len(types) != 2:
            return self.not_emulated(text, "this conversion")
        to, frm = types
        s = self.reg(a[1])
        value = {
            "f32": f"::tkemu::from_bits<float>({s})", "f64": f"::tkemu::from_bits<double>({s})",
            "bf16": f"::tkemu::bf16_to_f32(uint16_t({s}))", "f16": f"::tkemu::f16_to_f32(uint16_t({s}))",
        }.get(frm)
        if value is None and frm[0] in "sub":
            bits = int(frm[1:])
            value = f"int{bits}_t({s})" if frm[0] == "s" else f"uint{bits}_t({s})"
        if value is None:
            return self.not_emulated(text, "this conversion")
        rn = "rni" in mods or "rn" in mods
        out = {
            "f32": f"uint64_t(::tkemu::to_bits<float>(float({value})))",
            "f64": f"uint64_t(::tkemu::to_bits<double>(double({value})))",
            "bf16": f"uint64_t(::tkemu::f32_to_bf16(float({value})))",
            "f16": f"uint64_t(::tkemu::f32_to_f16(float({value})))",
        }.get(to)
        if out is None and to[0] in "sub":
            bits = int(to[1:])
            v = f"std::nearbyint({value})" if rn and frm[0] == "f" else value
            out = _mask(f"uint64_t(int64_t({v}))", bits)
        if out is None:
            return self.not_emulated(text, "this conversion")
        self.emit(f"{d} = {out};")

    def ldst(self, head: str, mods: list[str], ms: set[str], a: list[str], text: str) -> None:
        space = 2 if "shared" in ms or "shared::cta" in ms else 1 if "global" in ms else 0
        if ms & {"param", "local", "const"}:
            return self.not_emulated(text, f"{head} from this state space")
        w = _width(mods) // 8
        vn = next((int(m[1:]) for m in mods if re.fullmatch(r"v[248]", m)), 1)
        if head == "ld":
            regs, addr = self.vec(a[0]), self.addr(a[1])
            for i, r in enumerate(regs):
                self.emit(f"{r} = ::tkemu::ptx::ld({space}, {addr} + {i * w}, {w});")
        else:
            addr, regs = self.addr(a[0]), self.vec(a[1])
            for i, r in enumerate(regs):
                self.emit(f"::tkemu::ptx::st({space}, {addr} + {i * w}, {w}, {r});")
        if vn != len(regs):
            raise PtxError(f"`{text}`: .v{vn} with {len(regs)} registers")


def _width(mods: list[str]) -> int:
    for m in reversed(mods):
        if mm := re.fullmatch(r"[bsuf](8|16|32|64)", m):
            return int(mm.group(1))
        if m == "pred":
            return 1
    return 32


def _mask(expr: str, bits: int) -> str:
    if bits >= 64:
        return f"uint64_t({expr})"
    return f"(uint64_t({expr}) & {hex((1 << bits) - 1)}ull)"


_LOAD = {"r": "::tkemu::reg_in", "l": "::tkemu::reg_in", "h": "::tkemu::reg_in", "c": "::tkemu::reg_in",
         "f": "::tkemu::reg_f", "d": "::tkemu::reg_d", "n": "::tkemu::reg_in", "i": "::tkemu::reg_in"}
_STORE = {"f": "::tkemu::reg_out_f", "d": "::tkemu::reg_out_d"}


def translate(template: str, operands: list[Operand]) -> str:
    """The C++ statement that does what the asm statement does (see the module docstring)."""
    block = _Block(template, operands)
    statements = _statements(template)
    if not statements:  # asm("" : "+f"(x)): pins a register for the compiler, does nothing
        return "do { } while (0)"
    for stmt in statements:
        block.statement(stmt)
    pre, post = [], []
    nops = max(len(operands), 1)
    pre.append(f"uint64_t __r[{nops}] = {{}}; uint64_t __sink = 0; (void)__sink;")
    for i, op in enumerate(operands):
        letter = op.constraint.lstrip("=+&")[:1]
        if op.output:
            pre.append(f"auto&& __o{i} = ({op.expr});")
            if op.constraint.startswith("+"):
                pre.append(f"__r[{i}] = {_LOAD.get(letter, '::tkemu::reg_in')}(__o{i});")
            post.append(f"{_STORE.get(letter, '::tkemu::reg_out')}(__o{i}, __r[{i}]);")
        elif letter.isdigit():
            tied = int(op.constraint)
            pre.append(f"__r[{i}] = __r[{tied}] = ::tkemu::reg_in(({op.expr}));")
        elif i in block.bound:  # a register A operand: its home is tracked while the wgmma reads it
            pre.append(f"auto&& __i{i} = ({op.expr}); __r[{i}] = {_LOAD.get(letter, '::tkemu::reg_in')}(__i{i});")
        else:
            pre.append(f"__r[{i}] = {_LOAD.get(letter, '::tkemu::reg_in')}(({op.expr}));")
    if "wgmma.mma_async" in template:  # its operand loads and stores are the instruction's, not a touch
        pre.insert(1, "::tkemu::ptx::wgmma_operands(true);")
        post.append("::tkemu::ptx::wgmma_operands(false);")
    return "do { " + " ".join(pre + block.code + post) + " } while (0)"


def unsupported(template: str) -> list[str]:
    """Instructions of ``template`` that compile to a "not emulated" stop (for warnings at build time)."""
    block = _Block(template, [Operand("r", "0", False)] * 256)
    out = []
    for stmt in _statements(template):
        before = len(block.code)
        try:
            block.statement(stmt)
        except PtxError as e:
            out.append(f"{stmt} ({e})")
            continue
        if any("not_emulated" in c for c in block.code[before:]):
            out.append(stmt)
    return out
