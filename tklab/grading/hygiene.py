"""What a Python (numba) exercise file may contain, checked before it runs: kernels, not a harness of its own.

Why: the child imports the learner's module in the process that launches the kernel and sends the outputs,
so code that runs at import (or a kernel body in the CPU simulator, which is Python) shares that process.
A file could write answers into the result pipe, patch the timer, leave a thread or a process behind.
The sandbox bounds what such code can reach; these rules keep it from running at all, with a message a
learner can act on. An exercise file needs only: imports of numba, numpy and math; constants;
``@cuda.jit`` functions (device functions too); and, if it likes, an ``if __name__ == "__main__":`` block
(never run by the checker). Anywhere, double-underscore names, the builtins that reach files, code or
objects by name (``open``, ``exec``, ``getattr`` ...) and NumPy's file functions are refused.

Public API: ``problems(source, filename) -> list[str]`` (empty: nothing refused).
"""

from __future__ import annotations

import ast

ALLOWED_MODULES = frozenset({"numba", "numpy", "math", "__future__"})
_BUILTINS = frozenset({"open", "exec", "eval", "compile", "__import__", "getattr", "setattr", "delattr", "globals",
                       "locals", "vars", "input", "breakpoint", "memoryview", "help", "exit", "quit", "dir",
                       "classmethod", "staticmethod", "property", "super", "object", "type"})
_ATTRIBUTES = frozenset({"save", "savez", "savez_compressed", "savetxt", "tofile", "fromfile", "load", "loadtxt",
                         "genfromtxt", "fromregex", "open_memmap", "memmap", "ctypeslib", "ctypes", "lib", "os",
                         "sys", "system", "popen", "fdopen", "write", "testing", "f2py", "distutils", "DataSource",
                         "core", "config", "misc", "runtime", "cudadrv", "simulator", "np_support"})


#: ``@cuda.jit`` options an exercise may use (not ``link=``: that compiles in files from anywhere).
_JIT_OPTIONS = frozenset({"device", "fastmath", "lineinfo", "debug", "opt", "inline", "forceinline", "max_registers",
                          "boundscheck", "launch_bounds"})


def _main_guard(node: ast.stmt) -> bool:
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and isinstance(node.test.left, ast.Name)
            and node.test.left.id == "__name__")


def _simple(node: ast.AST) -> bool:
    """A module-level value: constants, names, attributes, arithmetic, tuples, calls of those."""
    allowed = (ast.Constant, ast.Name, ast.Attribute, ast.BinOp, ast.UnaryOp, ast.Tuple, ast.List, ast.Call,
               ast.Load, ast.operator, ast.unaryop, ast.keyword, ast.Subscript, ast.Slice)
    return all(isinstance(n, allowed) for n in ast.walk(node))


def _jit_decorator(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    names = []
    while isinstance(target, ast.Attribute):
        names.append(target.attr)
        target = target.value
    if isinstance(target, ast.Name):
        names.append(target.id)
    ok = bool(names) and names[0] == "jit" and all(n in ("cuda", "numba", "jit") for n in names)
    return ok and (not isinstance(node, ast.Call) or (all(_simple(a) for a in [*node.args, *node.keywords])
                                                      and all(k.arg in _JIT_OPTIONS for k in node.keywords)))


def _top_level(node: ast.stmt, plain_functions: bool = False) -> str | None:
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        return None
    if isinstance(node, ast.Import):
        bad = [a.name for a in node.names if a.name.split(".")[0] not in ALLOWED_MODULES]
        return f"imports {', '.join(bad)}: an exercise file may import only numba, numpy and math" if bad else None
    if isinstance(node, ast.ImportFrom):
        root = (node.module or "").split(".")[0]
        if node.level or root not in ALLOWED_MODULES:
            return f"imports from {node.module or '.'}: an exercise file may import only numba, numpy and math"
        return None
    if isinstance(node, ast.FunctionDef):
        if plain_functions:  # a drill: plain Python functions, no decorators at all
            if node.decorator_list:
                return f"decorates {node.name}: a drill file holds plain functions"
        elif not node.decorator_list or not all(_jit_decorator(d) for d in node.decorator_list):
            return (f"defines {node.name} without a plain @cuda.jit (options: {', '.join(sorted(_JIT_OPTIONS))}): "
                    "an exercise file holds kernels and device functions")
        if not all(_simple(d) for d in [*node.args.defaults, *(k for k in node.args.kw_defaults if k is not None)]):
            return f"{node.name}'s default arguments must be constants"
        return None
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if not all(isinstance(t, (ast.Name, ast.Tuple)) and all(isinstance(e, (ast.Name, ast.Tuple, ast.Store))
                                                                 for e in ast.walk(t)) for t in targets):
            return "assigns to something other than a name at module level (patching a module?)"
        if node.value is not None and not _simple(node.value):
            return "computes something at module level beyond constants"
        return None
    if _main_guard(node):
        return None
    return f"runs a {type(node).__name__.lower()} statement at import: an exercise file holds imports, " \
           "constants and @cuda.jit functions"


def problems(source: str, filename: str, plain_functions: bool = False) -> list[str]:
    """What this file does that an exercise file may not (``filename:line: ...``); [] when nothing.
    ``plain_functions``: a drill's file, whose functions are plain Python instead of ``@cuda.jit`` kernels."""
    try:
        tree = ast.parse(source, filename)
    except SyntaxError:
        return []  # the syntax check reports it
    found: list[str] = []
    checked: list[ast.AST] = []
    for node in tree.body:
        why = _top_level(node, plain_functions)
        if why:
            found.append(f"{filename}:{node.lineno}: {why}")
        if not _main_guard(node):
            checked.append(node)
    for top in checked:
        for n in ast.walk(top):
            line = getattr(n, "lineno", getattr(top, "lineno", 0))
            if isinstance(n, ast.Name) and (n.id.startswith("__") or n.id in _BUILTINS):
                found.append(f"{filename}:{line}: uses {n.id}, which an exercise file may not")
            elif isinstance(n, ast.Attribute) and (n.attr.startswith("__") or n.attr in _ATTRIBUTES):
                found.append(f"{filename}:{line}: uses .{n.attr}, which an exercise file may not")
            elif isinstance(n, (ast.ClassDef, ast.AsyncFunctionDef, ast.Global, ast.Nonlocal, ast.Yield,
                                ast.YieldFrom, ast.Await, ast.With, ast.Try)):
                found.append(f"{filename}:{line}: a {type(n).__name__.lower()} is not part of a kernel")
    return list(dict.fromkeys(found))[:5]
