"""What a learner's CUDA file may ``#include``: the tile library, CUDA's own headers and its own folder.

Why: the compilers read every file an ``#include`` names, with the rights of whoever runs them. NVRTC runs
in the checking process (the grader's user) and resolves a quoted name against the *current folder*; the
emulator's g++ takes absolute paths. So ``#include "/srv/class/solutions/ch02.cu"``, a classmate's file,
``../`` escapes or ``#include "/dev/zero"`` (a compiler that never finishes) would all be read. A checked
file's includes are therefore read before any compiler sees it (``check``), every one refused unless it
is a plain relative name that resolves, wherever the compiler could look, only inside the allowed folders.
A name built by a macro (``#include NAME``), ``#embed``, ``#pragma GCC dependency`` and ``__has_include``
of a path outside are refused as well: what the compiler would open must be readable from the text.

The same scan gives the compile cache the files a source pulls in from outside the hashed header folders
(``included_files``), so a cache key covers every included file's content.

Public API: ``IncludeRefused``, ``directives(source)``, ``refuse_outside(source, program, *, own_dir,
allowed, search)``, ``included_files(source, search)``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath


class IncludeRefused(ValueError):
    """An ``#include`` (or another way of reading a file when compiling) names something outside the allowed folders."""


@dataclass(frozen=True)
class Directive:
    """One file-reading directive: its line, its kind (``include``, ``embed``, ...), the name (None: not a
    literal name, e.g. a macro) and whether it was ``<...>``."""

    line: int
    kind: str
    name: str | None
    angled: bool
    text: str


_DIRECTIVE = re.compile(r"^\s*(?:#|%:|\?\?=)\s*(include_next|include|import|embed|pragma)\b(.*)$")
_LITERAL = re.compile(r'^\s*(?:"([^"\n]*)"|<([^>\n]*)>)')
_HAS_INCLUDE = re.compile(r'__has_include(?:_next)?\s*\(\s*(?:"([^"\n]*)"|<([^>\n]*)>)?')
_DEPENDENCY = re.compile(r"\bdependency\b|\binclude_alias\b")


def _strip_comments(source: str) -> str:
    """The source with line continuations joined (line numbers kept by padding) and comments blanked."""
    out, i, n = [], 0, len(source)
    while i < n:
        c = source[i]
        if c == "\\" and source.startswith("\n", i + 1):
            out.append(" ")  # a continued line: one logical line; the newline moves to the end of it
            i += 2
            continue
        if source.startswith("//", i):
            j = source.find("\n", i)
            j = n if j < 0 else j
            i = j
            continue
        if source.startswith("/*", i):
            j = source.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(" " + "\n" * source.count("\n", i, j))
            i = j
            continue
        if c in "\"'":
            j = i + 1
            while j < n and source[j] != c and source[j] != "\n":
                j += 2 if source[j] == "\\" else 1
            out.append(source[i:j + 1])
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def directives(source: str) -> list[Directive]:
    """Every directive of ``source`` that reads a file, in every ``#if`` branch (a branch another compiler
    takes counts too: the emulator's g++ and NVRTC see different macros)."""
    found = []
    for no, line in enumerate(_strip_comments(source).splitlines(), 1):
        m = _DIRECTIVE.match(line)
        if m:
            kind, rest = m.group(1), m.group(2)
            if kind == "pragma":
                if _DEPENDENCY.search(rest):
                    found.append(Directive(no, "pragma", None, False, line.strip()))
                continue
            lit = _LITERAL.match(rest)
            name = None if lit is None else (lit.group(1) if lit.group(1) is not None else lit.group(2))
            found.append(Directive(no, kind, name, bool(lit and lit.group(2) is not None), line.strip()))
        for h in _HAS_INCLUDE.finditer(line):
            name = h.group(1) if h.group(1) is not None else h.group(2)
            found.append(Directive(no, "__has_include", name, h.group(2) is not None, line.strip()))
    return found


def _inside(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == r or r in path.parents for r in roots)


def _problem(d: Directive) -> str | None:
    if d.kind == "embed":
        return "#embed is not allowed in an exercise file"
    if d.kind == "pragma":
        return "this #pragma reads another file; it is not allowed in an exercise file"
    if d.name is None:
        if d.kind == "__has_include":
            return None
        return "the file name must be written out (\"name.cuh\" or <name.h>), not made by a macro"
    if not d.name.strip():
        return "the file name is empty"
    p = PurePosixPath(d.name)
    if p.is_absolute() or d.name.startswith("~"):
        return "an absolute path; only the tile library, CUDA's headers and your own folder may be included"
    if ".." in p.parts:
        return "'..' leaves the allowed folders; only the tile library, CUDA's headers and your own folder " \
               "may be included"
    return None


def refuse_outside(source: str, program: str, *, own_dir: Path | None, allowed: Sequence[Path],
                   search: Sequence[Path], _depth: int = 0) -> None:
    """Raise ``IncludeRefused`` (naming the line) unless every file-reading directive of ``source`` stays
    inside ``allowed`` (plus ``own_dir``, the learner's folder).

    ``search``: every folder a compiler could resolve a name in (the current folder, the include path);
    a name is refused when, in any of them, it names a file (after symlinks) outside the allowed folders.
    Files of ``own_dir`` that are included are read in turn (the tile library and CUDA's headers are trusted).
    """
    roots = [Path(a).resolve() for a in allowed]
    own = Path(own_dir).resolve() if own_dir is not None else None
    if own is not None:
        roots.append(own)
    places = [Path(s) for s in dict.fromkeys([*(own and [own] or []), *search])]
    for d in directives(source):
        why = _problem(d)
        if why is None and d.name:
            for place in places:
                cand = place / d.name
                try:
                    if not cand.exists():
                        continue
                    real = cand.resolve()
                except (OSError, RuntimeError):
                    why = "it cannot be resolved (a symbolic link loop?)"
                    break
                if not _inside(real, roots):
                    why = (f"it would read {place.name or place}/{d.name}, outside the tile library, CUDA's headers "
                           "and your own folder")
                    break
                if not real.is_file():
                    why = "it is not a regular file"
                    break
                if own is not None and _inside(real, [own]) and d.kind != "__has_include" and _depth < 8:
                    try:
                        text = real.read_text(encoding="utf-8", errors="replace")[:1 << 20]
                    except OSError:
                        continue
                    refuse_outside(text, f"{real.name}", own_dir=own, allowed=allowed, search=search,
                                   _depth=_depth + 1)
        if why:
            raise IncludeRefused(f"{program}:{d.line}: error: `{d.text[:120]}` refused: {why}")


def included_files(source: str, search: Sequence[Path], *, trusted: Sequence[Path] = (),
                   _seen: set[Path] | None = None) -> list[Path]:
    """The files the literal ``#include`` names of ``source`` resolve to in ``search`` (every candidate, in
    order), followed recursively; files under ``trusted`` (folders hashed whole by the caller) are left out.
    For cache keys (``tklab.toolchain.cache.key``)."""
    seen = _seen if _seen is not None else set()
    skip = [Path(t).resolve() for t in trusted]
    out: list[Path] = []
    for d in directives(source):
        if d.kind not in ("include", "include_next", "import") or not d.name:
            continue
        for place in search:
            cand = Path(place) / d.name
            try:
                if not cand.is_file():
                    continue
                real = cand.resolve()
            except (OSError, RuntimeError):
                continue
            if real in seen or _inside(real, skip):
                continue
            seen.add(real)
            out.append(real)
            try:
                text = real.read_text(encoding="utf-8", errors="replace")[:1 << 20]
            except OSError:
                continue
            out += included_files(text, [real.parent, *search], trusted=trusted, _seen=seen)
    return out
