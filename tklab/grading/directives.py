"""One preprocessor view: a learner's CUDA file may not add preprocessor directives beyond its template's.

Why: the checked program must be the same program on every compiler that reads the file. NVRTC builds what
the static checks read and a GPU runs; the emulator's host build, a GPU's hazard run and a grader's machine
read the same text with other predefined macros. A file that says ``#if !defined(__x86_64__)`` hands one
compiler a wrong kernel and another a right one, and a ``#define`` or ``#pragma`` can do the same through a
predefined macro. So the directives of a learner's file are compared, before any compiler reads it, with those
of the exercise's template: the stub ``python -m tklab exercises`` generates from ``solutions/<id>/<id>.cu``, and the
solution itself (a ``#pragma unroll`` inside a marked region is part of the answer). Both are derived here at
check time (``tklab.grading.exercises.render``), never stored. A learner may keep, move or delete the template's
directives; one whose normalised text the template does not have (more often than the template has it) is
refused, naming its line.

What counts, in every branch of every conditional (a branch another compiler takes counts too):

- every directive: ``#`` (or ``%:``, or ``??=``) first on a logical line after whitespace and comments, with
  continued lines joined and comments blanked, so ``#  if``, ``# /*x*/ define`` and ``%:define`` are the
  ``#if`` and ``#define`` they are; its text normalised to ``#keyword rest`` with whitespace collapsed;
- ``_Pragma("...")`` and ``__pragma(...)`` anywhere in the code, as the ``#pragma ...`` they stand for;
- ``#include`` too. The include check (``tklab.toolchain.includes``) already confines what may be read; counting
  includes here closes what it allows on purpose, a header from the learner's own folder, whose directives this
  comparison would not see. Everything an exercise needs comes in through its template's includes.

Where compilers could disagree on where a comment, a string or a line ends (trigraphs, which C++17 dropped and
older modes keep; a backslash followed by spaces before the newline, which GCC still reads as a continued line;
raw string literals, inside skipped blocks), the file is scanned once per way of reading it (``VIEWS``) and a
directive any of them sees counts.

One exception keeps the template's tuning knobs tunable: a ``#define NAME <integer>`` guarded by ``#ifndef
NAME`` in the template (``STAGES``, ``ROWS``) may be given another integer. An integer is the same on every
compiler.

Public API: ``Directive``, ``View``, ``VIEWS``, ``scan(text, view)``, ``template_counts(spec)``,
``added(spec, source, program)``.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ..paths import REPO


@dataclass(frozen=True)
class View:
    """One way a compiler may read the characters of a file before it finds its directives."""

    trigraphs: bool  # ``??=`` is ``#``, ``??/`` is ``\`` ...
    loose_splice: bool  # a backslash, spaces, then a newline continues the line (GCC)
    raw_strings: bool  # ``R"x( ... )x"`` is one string, newlines and all

    def note(self) -> str:
        """How this view differs from plain C++17, for a message ("" for plain C++17)."""
        parts = (["trigraphs replaced"] if self.trigraphs else []) + \
            (["a backslash before trailing spaces continuing the line"] if self.loose_splice else []) + \
            (["raw strings not recognised"] if not self.raw_strings else [])
        return ", ".join(parts)


PLAIN = View(trigraphs=False, loose_splice=False, raw_strings=True)
#: Every way of reading a file that some compiler (or mode) has; plain C++17 first.
VIEWS = tuple([PLAIN] + [View(t, s, r) for t in (False, True) for s in (False, True) for r in (True, False)
                         if View(t, s, r) != PLAIN])

_TRIGRAPHS = {"=": "#", "/": "\\", "'": "^", "(": "[", ")": "]", "!": "|", "<": "{", ">": "}", "-": "~"}
_RAW_PREFIXES = {"R", "LR", "uR", "UR", "u8R"}
_STRING_PREFIXES = {"L", "u", "U", "u8"}
_PRAGMA_OPERATORS = {"_Pragma", "__pragma"}


@dataclass(frozen=True)
class Directive:
    """One directive (or pragma operator) as found: its physical line, normalised text, and how it was spelled."""

    line: int
    text: str
    spelled: str


def _translated(text: str, view: View) -> list[tuple[str, int, int]]:
    """Phases 1-2 of translation: (character, raw start, line) with trigraphs replaced (``view``) and continued
    lines joined; raw positions let a raw string be read from the untranslated text, as the standard says."""
    out: list[tuple[str, int, int]] = []
    i, n, line = 0, len(text), 1
    while i < n:
        c, j = text[i], i + 1
        if view.trigraphs and text.startswith("??", i) and i + 2 < n and text[i + 2] in _TRIGRAPHS:
            c, j = _TRIGRAPHS[text[i + 2]], i + 3
        if c == "\\":
            k = j
            while view.loose_splice and k < n and text[k] in " \t\f\v":
                k += 1
            if k < n and text[k] == "\n":
                i, line = k + 1, line + 1
                continue
        out.append((c, i, line))
        line += c == "\n"
        i = j
    return out


class _Lexer:
    """Just enough of a C++ lexer to tell directives from comments, strings and code, in one ``View``."""

    def __init__(self, text: str, view: View) -> None:
        self.raw, self.view = text, view
        self.chars = _translated(text, view)
        self.i = 0
        self.found: list[Directive] = []

    def at(self, k: int = 0) -> str:
        """The character ``k`` ahead ("\\0" past the end, which matches nothing the lexer looks for)."""
        j = self.i + k
        return self.chars[j][0] if j < len(self.chars) else "\0"

    def line(self) -> int:
        return self.chars[min(self.i, len(self.chars) - 1)][2] if self.chars else 1

    def run(self) -> list[Directive]:
        line_start = True
        while self.i < len(self.chars):
            c = self.at()
            if c == "\n":
                line_start = True
                self.i += 1
            elif c in " \t\f\v\r":
                self.i += 1
            elif c == "/" and self.at(1) in "/*":
                line_start = self.comment() or line_start
            elif line_start and (c == "#" or (c == "%" and self.at(1) == ":")):
                self.directive()
            else:
                line_start = False
                self.token()
        return self.found

    def comment(self) -> bool:
        """Skip a comment; True when it held a newline (what follows may start a directive)."""
        if self.at(1) == "/":
            while self.i < len(self.chars) and self.at() != "\n":
                self.i += 1
            return False
        self.i += 2
        newline = False
        while self.i < len(self.chars) and not (self.at() == "*" and self.at(1) == "/"):
            newline = newline or self.at() == "\n"
            self.i += 1
        self.i += 2
        return newline

    def quoted(self) -> str:
        """A string or character literal from its opening quote, ended by its quote or (unterminated) the line."""
        quote, start = self.at(), self.i
        self.i += 1
        while self.i < len(self.chars) and self.at() not in (quote, "\n"):
            self.i += 2 if self.at() == "\\" else 1
        if self.at() == quote:
            self.i += 1
        return "".join(ch for ch, _, _ in self.chars[start:self.i])

    def raw_string(self) -> None:
        """A raw string from its opening quote: read in the untranslated text, up to ``)delim"``."""
        start = self.chars[self.i][1] + 1
        open_paren = self.raw.find("(", start)
        delim = self.raw[start:open_paren] if open_paren >= 0 else ""
        if open_paren < 0 or len(delim) > 16 or any(ch in delim for ch in ' ()\\\t\v\f\n"'):
            self.quoted()  # not a raw string after all: the quote starts an ordinary one
            return
        end = self.raw.find(")" + delim + '"', open_paren + 1)
        end = len(self.raw) if end < 0 else end + len(delim) + 2
        while self.i < len(self.chars) and self.chars[self.i][1] < end:
            self.i += 1

    def token(self) -> None:
        c = self.at()
        if c.isalpha() or c == "_" or c == "$" or ord(c) > 127:
            start = self.i
            while self.i < len(self.chars) and (self.at().isalnum() or self.at() in "_$" or ord(self.at()) > 127):
                self.i += 1
            word = "".join(ch for ch, _, _ in self.chars[start:self.i])
            if self.at() == '"' and word in _RAW_PREFIXES and self.view.raw_strings:
                self.raw_string()
            elif self.at() in "\"'" and word in _STRING_PREFIXES | _RAW_PREFIXES:
                self.quoted()
            elif word in _PRAGMA_OPERATORS:
                self.pragma_operator(word, self.chars[start][2])
        elif c.isdigit() or (c == "." and self.at(1).isdigit()):
            self.number()
        elif c in "\"'":
            self.quoted()
        else:
            self.i += 1

    def number(self) -> None:
        """A preprocessing number: digits, letters, dots, exponent signs and C++14 digit separators."""
        self.i += 1
        while self.i < len(self.chars):
            c = self.at()
            if c in "eEpP" and self.at(1) in "+-":
                self.i += 2
            elif c == "'" and (self.at(1).isalnum() or self.at(1) == "_"):
                self.i += 2
            elif c.isalnum() or c in "._":
                self.i += 1
            else:
                return

    def directive(self) -> None:
        """From ``#`` (or ``%:``) to the end of its logical line, comments blanked and strings kept."""
        line, start = self.line(), self.i
        self.i += 1 if self.at() == "#" else 2
        body: list[str] = []
        while self.i < len(self.chars) and self.at() != "\n":
            c = self.at()
            if c == "/" and self.at(1) in "/*":
                self.comment()
                body.append(" ")
            elif c in "\"'":
                body.append(self.quoted())
            else:
                body.append(c)
                self.i += 1
        text = " ".join("".join(body).split())
        if not text:
            return  # the null directive: it does nothing
        spelled = " ".join("".join(ch for ch, _, _ in self.chars[start:self.i]).split())
        self.found.append(Directive(line, "#" + text, spelled))

    def pragma_operator(self, word: str, line: int) -> None:
        """``_Pragma("text")`` (or ``__pragma(text)``): the ``#pragma text`` it stands for."""
        start = self.i
        while self.at() in " \t\f\v\r\n" or (self.at() == "/" and self.at(1) in "/*"):
            if self.at() == "/":
                self.comment()
            else:
                self.i += 1
        if self.at() != "(":
            return
        self.i += 1
        depth, parts = 1, []
        while self.i < len(self.chars) and depth:
            c = self.at()
            if c in "\"'":
                parts.append(self.quoted())
                continue
            depth += (c == "(") - (c == ")")
            if depth:
                parts.append(c)
            self.i += 1
        inner = "".join(parts).strip()
        m = re.fullmatch(r'L?"((?:[^"\\]|\\.)*)"', inner)
        content = re.sub(r'\\(["\\])', r"\1", m.group(1)) if m else inner
        spelled = " ".join((word + "".join(ch for ch, _, _ in self.chars[start:self.i])).split())
        self.found.append(Directive(line, " ".join(("#pragma " + content).split()), spelled))


def scan(text: str, view: View = PLAIN) -> list[Directive]:
    """Every directive and pragma operator of ``text`` as ``view`` reads it, in order."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return list(_scan(text, _deciding(text, view)))


#: A backslash (or its trigraph) with spaces before the newline: the only text a loose splice reads otherwise.
_LOOSE = re.compile(r"(?:\\|\?\?/)[ \t\f\v]+\n")
#: What can join characters or stand for others before a raw string's prefix meets its quote.
_JOINING = re.compile(r"\\[ \t\f\v]*\n|\?\?")


def _deciding(text: str, view: View) -> View:
    """``view`` with the readings ``text`` gives them no occasion to differ on set as plain C++17: trigraphs where
    no ``??`` occurs, a loose splice where no backslash has spaces before its newline, raw strings where no raw
    prefix can meet a quote. Views that agree here find the same directives, so a file is lexed once per
    distinct reading instead of once per view (``VIEWS`` has eight)."""
    raw = view.raw_strings or ('R"' not in text and not _JOINING.search(text))
    return View(trigraphs=view.trigraphs and "??" in text, loose_splice=view.loose_splice and bool(_LOOSE.search(text)),
                raw_strings=raw)


@functools.lru_cache(maxsize=64)
def _scan(text: str, view: View) -> tuple[Directive, ...]:
    return tuple(_Lexer(text, view).run())


_KNOB = re.compile(r"#define (\w+) (\d+)")


def _knobs(found: list[Directive]) -> frozenset[str]:
    """Names the template defines as ``#ifndef NAME / #define NAME <integer> / #endif``: tuning knobs."""
    texts = [d.text for d in found]
    out = set()
    for a, b, c in zip(texts, texts[1:], texts[2:], strict=False):
        m = _KNOB.fullmatch(b)
        if m and a == f"#ifndef {m.group(1)}" and c == "#endif":
            out.add(m.group(1))
    return frozenset(out)


def _key(text: str, knobs: frozenset[str]) -> str:
    """What is compared: the text, with a knob's integer left out (another integer is the same knob)."""
    m = _KNOB.fullmatch(text)
    return f"#define {m.group(1)} <integer>" if m and m.group(1) in knobs else text


@dataclass(frozen=True)
class _Template:
    allowed: Counter[str]  # most times each key occurs in the stub or the solution
    order: tuple[str, ...]  # the solution's keys in order: which of several equal ones a learner added
    knobs: frozenset[str]


@functools.cache
def _template(solution: str, name: str, suffix: str) -> _Template:
    from .exercises import render

    stub = scan(render(solution, name, suffix))
    full = scan(solution)
    knobs = _knobs(full) | _knobs(stub)
    counts = [Counter(_key(d.text, knobs) for d in found) for found in (stub, full)]
    return _Template(counts[0] | counts[1], tuple(_key(d.text, knobs) for d in full), knobs)


def template_counts(spec: Any) -> Counter[str] | None:
    """How often each directive may occur in ``spec``'s exercise file (None: its solution is not in this copy)."""
    t = _template_of(spec)
    return None if t is None else Counter(t.allowed)


def _template_of(spec: Any) -> _Template | None:
    from .exercises import source_name

    path = REPO / spec.solution
    if not path.is_file():
        return None
    return _template(path.read_text(), source_name(spec), path.suffix)


def _blamed(found: list[Directive], keys: list[str], t: _Template) -> list[Directive]:
    """The directives beyond the template's counts: of several equal ones, those that do not line up with the
    solution's order first, then the last ones."""
    matched: set[int] = set()
    for block in difflib.SequenceMatcher(None, t.order, keys, autojunk=False).get_matching_blocks():
        matched.update(range(block.b, block.b + block.size))
    out = []
    for key, n in Counter(keys).items():
        extra = n - t.allowed[key]
        if extra > 0:
            at = [i for i, k in enumerate(keys) if k == key]
            ranked = [i for i in at if i not in matched] + [i for i in reversed(at) if i in matched]
            out += [found[i] for i in ranked[:extra]]
    return out


def added(spec: Any, source: str, program: str) -> list[str]:
    """One message per directive of ``source`` beyond its template's ([]: none, or no solution to compare with
    in this copy), each naming ``program``'s line. Every ``VIEWS`` reading counts."""
    t = _template_of(spec)
    if t is None:
        return []
    seen: dict[tuple[int, str], str] = {}
    for view in VIEWS:
        found = scan(source, view)
        for d in _blamed(found, [_key(d.text, t.knobs) for d in found], t):
            if (d.line, d.text) not in seen:
                how = f" (written `{d.spelled}`)" if d.spelled != d.text else ""
                if view != PLAIN:
                    how += f" (as a compiler reads it with {view.note()})"
                seen[(d.line, d.text)] = (
                    f"{program}:{d.line}: error: `{d.text}`{how}: a preprocessor directive the exercise's template "
                    "does not have; the checked program must be the same on every compiler, so conditionals, "
                    "#define, #pragma and #include are limited to the template's (keep, move or delete those)")
    return [seen[k] for k in sorted(seen)]
