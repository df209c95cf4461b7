"""The on-disk compile cache.

A compile costs 1-3 s; a notebook re-runs cells constantly, so results are kept on disk keyed by
everything that can change the output: the source, the options, the target arch, the *contents* of the
headers on the include path (editing a tile-library header invalidates every kernel that may include
it) and the toolchain version. A hit costs a hash and a file read: milliseconds.

Location: ``$TKLAB_CACHE_DIR`` or ``~/.cache/tklab``; ``TKLAB_NO_CACHE=1`` turns it off.
Public API: ``key(...)``, ``load(key)``, ``store(key, entry)``, ``cache_dir()``, ``clear()``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

_HEADER_SUFFIXES = {".cuh", ".h", ".hpp", ".inl", ".inc"}
# (path, mtime_ns, size) -> sha256 digest; avoids re-reading unchanged headers on every compile.
_file_digests: dict[tuple[str, int, int], str] = {}


def cache_dir() -> Path:
    return Path(os.environ.get("TKLAB_CACHE_DIR", Path.home() / ".cache" / "tklab"))


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


def key(*, source: str, options: Iterable[str], arch: str, header_dirs: Iterable[str | Path],
        toolchain: str, name_expressions: Iterable[str] = ()) -> str:
    """The cache key: a sha256 over everything that determines the compiler's output."""
    h = hashlib.sha256()
    for part in (source, "\0".join(options), arch, "\0".join(name_expressions), toolchain,
                 headers_digest(header_dirs)):
        h.update(part.encode())
        h.update(b"\x1f")
    return h.hexdigest()


def load(k: str) -> dict | None:
    """The cached entry (``meta`` dict plus ``cubin``/``ptx``), or None on a miss."""
    if not enabled():
        return None
    d = cache_dir() / k[:2] / k
    try:
        meta = json.loads((d / "meta.json").read_text())
        meta["cubin"] = (d / "module.cubin").read_bytes()
        meta["ptx"] = (d / "module.ptx").read_text()
    except (OSError, ValueError):
        return None
    return meta


def store(k: str, entry: dict) -> None:
    """Write an entry atomically (a temp folder renamed into place), so readers never see half."""
    if not enabled():
        return
    final = cache_dir() / k[:2] / k
    if final.exists():
        return
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=".tmp-"))
    try:
        meta = {x: v for x, v in entry.items() if x not in ("cubin", "ptx")}
        (tmp / "module.cubin").write_bytes(entry["cubin"])
        (tmp / "module.ptx").write_text(entry["ptx"])
        (tmp / "meta.json").write_text(json.dumps(meta))
        os.replace(tmp, final)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)


def clear() -> None:
    shutil.rmtree(cache_dir(), ignore_errors=True)
