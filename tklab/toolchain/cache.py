"""The on-disk compile cache, which heals itself.

A compile costs 1-3 s; a notebook re-runs cells constantly, so results are kept on disk keyed by
everything that can change the output: the source, the options, the target arch, the *contents* of the
headers on the include path (editing a tile-library header invalidates every kernel that may include
it) and the toolchain version. A hit costs a hash and a file read: milliseconds.

Why it validates what it reads: a cache that trusts its files turns one bad write (a full disk, a killed
process, a stray edit) into a source that fails for good. Every entry is checked on read (meta fields
and types, an ELF cubin, a PTX module with a target); a bad one is deleted and reported as a miss, so
the next compile rebuilds it. Included files outside the header folders (a quoted name NVRTC finds in
the current folder) are hashed too (``included_digest``), so every included file is part of the key.
Entries are written into a temporary folder and renamed into place.
When the cache cannot be written (a read-only folder, ``TKLAB_CACHE_DIR`` naming a file), compiling
goes on without caching, with one warning per folder.

Location: ``$TKLAB_CACHE_DIR`` (unset or empty: ``~/.cache/tklab``); ``TKLAB_NO_CACHE=1`` turns it off.
Public API: ``key(...)``, ``load(key)``, ``store(key, entry)``, ``cache_dir()``, ``clear()``,
``CacheWarning``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..paths import cache_dir

_HEADER_SUFFIXES = {".cuh", ".h", ".hpp", ".inl", ".inc"}
# (path, mtime_ns, size) -> sha256 digest; avoids re-reading unchanged headers on every compile.
_file_digests: dict[tuple[str, int, int], str] = {}
# Folders already warned about (one warning each, not one per compile).
_warned: set[str] = set()

#: What a stored ``meta.json`` must hold, and of which type.
META_FIELDS: dict[str, type | tuple[type, ...]] = {"log": str, "lowered": dict, "seconds": (int, float)}


class CacheWarning(UserWarning):
    """The compile cache could not be used as asked; compiling goes on without it."""


def enabled() -> bool:
    return os.environ.get("TKLAB_NO_CACHE", "") not in ("1", "true", "yes")


def _file_digest(path: Path) -> str:
    st = path.stat()
    k = (str(path), st.st_mtime_ns, st.st_size)
    d = _file_digests.get(k)
    if d is None:
        d = hashlib.sha256(path.read_bytes()).hexdigest()
        _file_digests[k] = d
    return d


def headers_digest(dirs: Iterable[str | Path]) -> str:
    """Hash of every header file under the given folders (names and contents)."""
    h = hashlib.sha256()
    for d in dirs:
        root = Path(d)
        if not root.is_dir():
            continue
        for p in sorted(root.rglob("*")):
            if p.suffix in _HEADER_SUFFIXES and p.is_file():
                h.update(str(p.relative_to(root)).encode())
                h.update(_file_digest(p).encode())
    return h.hexdigest()


def included_digest(source: str, header_dirs: Iterable[str | Path]) -> str:
    """Hash of every file ``source`` includes from outside ``header_dirs`` (names and contents): NVRTC reads
    a quoted name from the current folder, so a file there (or one it includes) is part of the output."""
    from .includes import included_files

    dirs = [Path(d) for d in header_dirs]
    h = hashlib.sha256()
    for p in included_files(source, [Path.cwd(), *dirs], trusted=dirs):
        h.update(str(p).encode())
        try:
            h.update(_file_digest(p).encode())
        except OSError:
            h.update(b"unreadable")
    return h.hexdigest()


def key(*, source: str, options: Iterable[str], arch: str, header_dirs: Iterable[str | Path],
        toolchain: str, name_expressions: Iterable[str] = ()) -> str:
    """The cache key: a sha256 over everything that determines the compiler's output, the content of every
    included file among it (the header folders' files, and any other file the source includes)."""
    header_dirs = list(header_dirs)
    h = hashlib.sha256()
    for part in (source, "\0".join(options), arch, "\0".join(name_expressions), toolchain,
                 headers_digest(header_dirs), included_digest(source, header_dirs)):
        h.update(part.encode())
        h.update(b"\x1f")
    return h.hexdigest()


def _entry_dir(k: str) -> Path:
    return cache_dir() / k[:2] / k


def problem(meta: Any, cubin: bytes, ptx: str) -> str | None:
    """Why a stored entry cannot be used (None: it can)."""
    if not isinstance(meta, dict):
        return "meta.json is not an object"
    for name, kind in META_FIELDS.items():
        if name not in meta:
            return f"meta.json lacks {name!r}"
        if not isinstance(meta[name], kind) or isinstance(meta[name], bool):
            return f"meta.json's {name!r} has the wrong type"
    if not all(isinstance(a, str) and isinstance(b, str) for a, b in meta["lowered"].items()):
        return "meta.json's 'lowered' is not a map of names"
    if len(cubin) < 64 or cubin[:4] != b"\x7fELF":
        return "module.cubin is not an ELF file"
    if ".target" not in ptx or ".version" not in ptx:
        return "module.ptx is not a PTX module"
    return None


def _discard(d: Path, why: str) -> None:
    """Remove a bad entry so the next store can replace it; an entry that cannot be removed stays a miss."""
    shutil.rmtree(d, ignore_errors=True)
    if d.exists():
        _warn_once(d.parent, f"a damaged compile-cache entry ({d}: {why}) could not be removed; it is ignored")


def load(k: str) -> dict | None:
    """The cached entry (``meta`` dict plus ``cubin``/``ptx``), or None on a miss (a bad entry is a miss)."""
    if not enabled():
        return None
    d = _entry_dir(k)
    if not d.is_dir():
        return None
    try:
        meta = json.loads((d / "meta.json").read_text())
        cubin = (d / "module.cubin").read_bytes()
        ptx = (d / "module.ptx").read_text()
    except (OSError, ValueError) as e:
        _discard(d, f"unreadable: {e}")
        return None
    why = problem(meta, cubin, ptx)
    if why:
        _discard(d, why)
        return None
    meta["cubin"], meta["ptx"] = cubin, ptx
    return meta


def _warn_once(where: Path, text: str) -> None:
    if str(where) in _warned:
        return
    _warned.add(str(where))
    warnings.warn(f"tklab: {text}", CacheWarning, stacklevel=3)


def store(k: str, entry: dict) -> bool:
    """Write an entry atomically (a temp folder renamed into place), so readers never see half of one.

    Returns whether the entry is now in the cache. A cache that cannot be written costs a warning (once
    per folder), never the compile.
    """
    if not enabled():
        return False
    root = cache_dir()
    final = _entry_dir(k)
    tmp: Path | None = None
    try:
        if final.is_dir():
            return True  # another process stored it first; load() validates it
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=".tmp-"))
        meta = {x: v for x, v in entry.items() if x not in ("cubin", "ptx")}
        (tmp / "module.cubin").write_bytes(entry["cubin"])
        (tmp / "module.ptx").write_text(entry["ptx"])
        (tmp / "meta.json").write_text(json.dumps(meta))
        os.replace(tmp, final)
        tmp = None
        return True
    except OSError as e:
        if final.is_dir():  # lost a race with another writer: theirs is as good as ours
            return True
        _warn_once(root, f"cannot write the compile cache in {root} ({type(e).__name__}: {e.strerror or e}); "
                   "compiling without caching (set TKLAB_CACHE_DIR to a writable folder, or TKLAB_NO_CACHE=1)")
        return False
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def clear() -> None:
    shutil.rmtree(cache_dir(), ignore_errors=True)
