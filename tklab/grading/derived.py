"""Solutions derived from a chapter's kernel: a design exercise's solution as the chapter kernel plus a patch.

A design exercise asks the learner for what a chapter's kernel does in a new setting (``ch08_warp_specialized``:
chapter 08's warp-specialised GEMM; ``ch10_gqa``: chapter 10's attention with grouped K/V heads). Its solution is
that kernel with a few changes, so it is not kept as a hand copy: ``solutions/<id>/<id>.patch`` holds the changes,
and the solution beside it, ``<id>.cu`` (still a file: the checker, the hints, the planted suites and the tests read
it, and the learner's ``exercises/<id>.cu`` is generated from it as from any solution), is what the patch makes of
the kernel. ``python -m tklab exercises --check`` fails when the two disagree, so a change to the chapter's kernel
reaches the exercise or is seen. A kernel's variant kept out of its exercise (an option measured slower, e.g.
chapter 10's persistent grid) is derived the same way: ``solutions/variants/<name>.patch`` makes
``variants/<name>.cu``, which holds no region for a learner, so it is no exercise.

A patch file: ``#`` comment lines (why the exercise differs), optionally one ``# fixed: NAME=VALUE ...`` line, then
a unified diff whose ``---`` line names the kernel and whose ``+++`` line the solution, both relative to
``solutions/``. ``fixed`` settles the kernel's build options first, the way a compile with ``-DNAME=VALUE`` would
but in the text (``resolve``): each ``#if``/``#ifdef``/``#ifndef`` ... ``#elif``/``#else``/``#endif`` whose
condition names only fixed options keeps the branch taken, without its directives; any other stays as written. So
the patch holds only what the exercise changes, not the options it leaves out. Hunks apply exactly (no fuzz), at
their line or, when the kernel gained or lost lines before them, at the nearest place their lines stand.

``python -m tklab exercises --derive`` writes every derived solution; ``--repatch`` writes each patch from its
solution as it is (after editing the solution by hand, e.g. when the kernel changed where a hunk applies).

Public API: ``patches(solutions)``, ``derive(patch, solutions)``, ``problems(solutions)``, ``write(solutions)``,
``repatch(solutions)``, ``resolve(text, fixed)``, ``apply(text, diff, name)``, ``PatchError``, ``SUFFIX``.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path

SUFFIX = ".patch"
VARIANTS = "variants"  # solutions/variants/: kernels' variants, not exercises
_FIXED = re.compile(r"^#\s*fixed:\s*(.*)$")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_DIRECTIVE = re.compile(r"^\s*#\s*(if|ifdef|ifndef|elif|else|endif)\b(.*)$")
_TOKEN = re.compile(r"\s*(defined|[A-Za-z_]\w*|\d+|==|!=|<=|>=|&&|\|\||[!()<>+\-*])")


class PatchError(ValueError):
    """A patch file that cannot be read, or whose hunks no longer apply to the kernel it names."""


@dataclass(frozen=True)
class Patch:
    """One patch file, read: its comment lines, the fixed options, the kernel and the solution (paths relative to
    ``solutions/``) and its diff's lines (from the ``---`` line on)."""

    path: Path
    comments: tuple[str, ...]
    fixed: dict[str, int]
    base: str
    target: str
    diff: tuple[str, ...]


def read(path: Path) -> Patch:
    """The patch file at ``path`` (raises PatchError naming the file and what is missing)."""
    lines = path.read_text().splitlines()
    comments: list[str] = []
    fixed: dict[str, int] = {}
    start = 0
    while start < len(lines) and not lines[start].startswith("--- "):
        line = lines[start]
        if m := _FIXED.match(line):
            for item in m.group(1).split():
                name, _, value = item.partition("=")
                if not name.isidentifier() or not value.lstrip("-").isdigit():
                    raise PatchError(f"{path}:{start + 1}: 'fixed:' takes NAME=INTEGER items, not {item!r}")
                fixed[name] = int(value)
        elif line.startswith("#") or not line.strip():
            comments.append(line)
        else:
            raise PatchError(f"{path}:{start + 1}: before the diff only '#' comment lines may stand, not {line!r}")
        start += 1
    if start + 1 >= len(lines) or not lines[start + 1].startswith("+++ "):
        raise PatchError(f"{path}: no unified diff ('--- <kernel>' then '+++ <solution>', relative to solutions/)")
    base = lines[start][4:].split("\t")[0].strip()
    target = lines[start + 1][4:].split("\t")[0].strip()
    return Patch(path, tuple(comments), fixed, base, target, tuple(lines[start:]))


def patches(solutions: Path) -> list[Patch]:
    """Every patch of an exercise folder (``solutions/<id>/<id>.patch``) and of a kernel's variant kept out of the
    exercises (``solutions/variants/<name>.patch``: an option measured slower, beside the kernel it extends), read."""
    return [read(p) for p in sorted(solutions.glob(f"*/*{SUFFIX}"))
            if p.stem == p.parent.name or p.parent.name == VARIANTS]


def _condition(expr: str, fixed: dict[str, int]) -> bool | None:
    """A directive's condition evaluated with the fixed options (None: it names something not fixed)."""
    expr = expr.split("//", 1)[0]
    tokens, pos = [], 0
    while pos < len(expr.rstrip()):
        m = _TOKEN.match(expr, pos)
        if not m:
            return None
        tokens.append(m.group(1))
        pos = m.end()
    out: list[str] = []
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t == "defined":
            name = tokens[i + 2] if i + 1 < len(tokens) and tokens[i + 1] == "(" else tokens[i + 1]
            if name not in fixed:
                return None
            out.append("1")
            i += 4 if tokens[i + 1] == "(" else 2
            continue
        if t[0].isalpha() or t[0] == "_":
            if t not in fixed:
                return None
            out.append(str(fixed[t]))
        else:
            out.append({"&&": " and ", "||": " or ", "!": " not "}.get(t, t))
        i += 1
    try:
        return bool(eval("".join(out), {"__builtins__": {}}, {}))  # noqa: S307 -- integers and operators only
    except SyntaxError as e:
        raise PatchError(f"cannot evaluate the condition {expr.strip()!r} with {fixed}") from e


def resolve(text: str, fixed: dict[str, int]) -> str:
    """``text`` with every conditional on fixed options settled: the branch taken kept, its directives gone."""
    if not fixed:
        return text
    out: list[str] = []
    # One frame per open #if: (known, keeping this branch, a branch was taken, the enclosing frames keep lines).
    stack: list[list[bool | None]] = []

    def live() -> bool:
        return all(bool(f[3]) for f in stack) and all(f[1] for f in stack if f[0])

    for line in text.splitlines(keepends=True):
        m = _DIRECTIVE.match(line)
        kind, rest = (m.group(1), m.group(2).strip()) if m else ("", "")
        if kind in ("if", "ifdef", "ifndef"):
            outer = live()
            if kind == "if":
                cond = _condition(rest, fixed)
            else:
                name = rest.split()[0] if rest else ""
                cond = (name in fixed) == (kind == "ifdef") if name in fixed else None
            stack.append([cond is not None, bool(cond), bool(cond), outer])
            if cond is None and outer:
                out.append(line)
            continue
        if kind in ("elif", "else", "endif"):
            if not stack:
                raise PatchError(f"#{kind} without an #if: {line.strip()!r}")
            frame = stack[-1]
            if kind == "endif":
                stack.pop()
                if not frame[0] and live():
                    out.append(line)
                continue
            if not frame[0]:
                if kind == "elif" and _condition(rest, fixed) is not None:
                    raise PatchError(f"#elif on a fixed option after an #if on others: {line.strip()!r}")
                if frame[3] and all(f[1] for f in stack[:-1] if f[0]):
                    out.append(line)
                continue
            cond = True if kind == "else" else _condition(rest, fixed)
            if cond is None:
                raise PatchError(f"#elif on options not fixed after an #if on fixed ones: {line.strip()!r}")
            frame[1] = bool(cond) and not frame[2]
            frame[2] = bool(frame[2]) or bool(cond)
            continue
        if live():
            out.append(line)
    if stack:
        raise PatchError("an #if is never closed by #endif")
    return "".join(out)


def apply(text: str, diff: tuple[str, ...] | list[str], name: str) -> str:
    """``text`` with the unified diff's hunks applied: each hunk's old lines must stand in it exactly, at the line
    the hunk names or the nearest place after the previous hunk (raises PatchError naming the hunk)."""
    lines = text.splitlines()
    out: list[str] = []
    pos = 0  # lines[:pos] are done
    i = next((k for k, d in enumerate(diff) if d.startswith("@@")), len(diff))
    while i < len(diff):
        m = _HUNK.match(diff[i])
        if not m:
            raise PatchError(f"{name}: line {i + 1} of the diff is not a hunk's '@@' line: {diff[i]!r}")
        head, i = diff[i], i + 1
        old: list[str] = []
        new: list[str] = []
        while i < len(diff) and not diff[i].startswith("@@"):
            d = diff[i]
            if d.startswith("\\"):
                i += 1
                continue
            tag, body = (d[0], d[1:]) if d else (" ", "")
            if tag in " -":
                old.append(body)
            if tag in " +":
                new.append(body)
            if tag not in " -+":
                raise PatchError(f"{name}: line {i + 1} of the diff starts with neither ' ', '-' nor '+': {d!r}")
            i += 1
        want = int(m.group(1)) - 1 if old else int(m.group(1))
        places = [k for k in range(pos, len(lines) - len(old) + 1) if lines[k:k + len(old)] == old]
        if not places:
            raise PatchError(f"{name}: the hunk {head!r} no longer applies: its {len(old)} old lines (from "
                             f"{old[0]!r}) are not in the kernel after line {pos}" if old else
                             f"{name}: the hunk {head!r} inserts past the kernel's end")
        at = min(places, key=lambda k: abs(k - want))
        out.extend(lines[pos:at])
        out.extend(new)
        pos = at + len(old)
    out.extend(lines[pos:])
    return "\n".join(out) + "\n"


def derive(patch: Patch, solutions: Path) -> str:
    """The solution ``patch`` makes of its kernel (fixed options settled, then the hunks applied)."""
    base = solutions / patch.base
    if not base.is_file():
        raise PatchError(f"{patch.path}: the kernel it patches, {base}, does not exist")
    name = patch.path.relative_to(solutions).as_posix() if patch.path.is_relative_to(solutions) else str(patch.path)
    return apply(resolve(base.read_text(), patch.fixed), patch.diff, name)


def problems(solutions: Path) -> list[str]:
    """Why some derived solution is not what its patch makes of its kernel (empty: all are)."""
    out = []
    for p in patches(solutions):
        target = solutions / p.target
        try:
            text = derive(p, solutions)
        except PatchError as e:
            out.append(f"{e} (edit {p.target} by hand, then `python -m tklab exercises --repatch`)")
            continue
        if not target.is_file() or target.read_text() != text:
            out.append(f"{p.target}: not what {p.path.name} makes of {p.base} (`python -m tklab exercises --derive` "
                       "writes it; to keep edits made to it instead, `--repatch`)")
    return out


def write(solutions: Path) -> list[str]:
    """Write every derived solution that differs from what its patch makes; the ones written."""
    written = []
    for p in patches(solutions):
        target, text = solutions / p.target, derive(p, solutions)
        if not target.is_file() or target.read_text() != text:
            target.write_text(text)
            written.append(p.target)
    return written


def diff_text(patch: Patch, solutions: Path) -> str:
    """The patch file that makes ``patch.target`` as it is now from its kernel (comments and options kept)."""
    kernel = resolve((solutions / patch.base).read_text(), patch.fixed).splitlines()
    solution = (solutions / patch.target).read_text().splitlines()
    head = list(patch.comments)
    if patch.fixed:
        head.append("# fixed: " + " ".join(f"{k}={v}" for k, v in patch.fixed.items()))
    body = difflib.unified_diff(kernel, solution, patch.base, patch.target, lineterm="")
    return "\n".join([*head, *body]) + "\n"


def repatch(solutions: Path) -> list[str]:
    """Rewrite every patch from its solution as it is now; the patches that changed."""
    changed = []
    for p in patches(solutions):
        text = diff_text(p, solutions)
        if p.path.read_text() != text:
            p.path.write_text(text)
            changed.append(p.path.relative_to(solutions).as_posix())
    return changed
