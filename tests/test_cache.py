"""The compile cache heals itself: damaged entries are rebuilt, an unwritable cache costs a warning, not
the compile. Each case plants the damage a full disk, a killed process or a stray edit leaves behind."""

from __future__ import annotations

import json
import os
import uuid
import warnings
from pathlib import Path

import pytest

import tklab
from tklab import cache


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TKLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TKLAB_NO_CACHE", raising=False)
    cache._warned.clear()


def _src() -> str:
    return f'// {uuid.uuid4()}\nextern "C" __global__ void f(int* x) {{ x[threadIdx.x] = 42; }}\n'


def _entry(mod: tklab.Module) -> Path:
    d = cache.cache_dir() / mod.key[:2] / mod.key
    assert (d / "meta.json").is_file()
    return d


DAMAGE = {
    "garbage meta.json": lambda d: (d / "meta.json").write_text("\x00garbage{"),
    "truncated meta.json": lambda d: (d / "meta.json").write_text((d / "meta.json").read_text()[:7]),
    "empty object meta.json": lambda d: (d / "meta.json").write_text("{}"),
    "meta.json a list": lambda d: (d / "meta.json").write_text("[1, 2]"),
    "wrong type in meta.json": lambda d: (d / "meta.json").write_text(json.dumps(
        {**json.loads((d / "meta.json").read_text()), "lowered": "nope"})),
    "garbage cubin": lambda d: (d / "module.cubin").write_bytes(b"not an elf" * 20),
    "truncated cubin": lambda d: (d / "module.cubin").write_bytes((d / "module.cubin").read_bytes()[:10]),
    "empty PTX": lambda d: (d / "module.ptx").write_text(""),
    "missing cubin": lambda d: (d / "module.cubin").unlink(),
    "PTX not UTF-8": lambda d: (d / "module.ptx").write_bytes(b"\xff\xfe\x00"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_entry_is_discarded_and_rebuilt(damage):
    src = _src()
    first = tklab.compile(src, arch="sm_80")
    d = _entry(first)
    DAMAGE[damage](d)
    assert cache.load(first.key) is None  # a bad entry is a miss ...
    assert not d.exists()  # ... and is removed, so it can be replaced
    second = tklab.compile(src, arch="sm_80")
    assert not second.cached and second.kernels == ["f"] and second.cubin == first.cubin
    assert second.registers > 0  # cuobjdump/ptxas data usable again
    third = tklab.compile(src, arch="sm_80")
    assert third.cached and third.cubin == first.cubin  # the rebuilt entry is stored and read back


def test_damaged_entry_in_place_is_replaced_by_the_next_compile():
    """Without an explicit load in between: compile itself discards and rewrites the bad entry."""
    src = _src()
    first = tklab.compile(src, arch="sm_80")
    (_entry(first) / "meta.json").write_text("{}")
    again = tklab.compile(src, arch="sm_80")
    assert not again.cached and again.kernels == ["f"]
    assert tklab.compile(src, arch="sm_80").cached


def test_read_only_cache_dir_compiles_without_caching_and_warns_once(tmp_path, monkeypatch):
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders; the file case below covers the same path")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    monkeypatch.setenv("TKLAB_CACHE_DIR", str(ro))
    with pytest.warns(cache.CacheWarning, match="without caching"):
        mod = tklab.compile(_src(), arch="sm_80")
    assert mod.kernels == ["f"] and not mod.cached


def test_unwritable_cache_for_root_too(monkeypatch):
    """Root ignores folder permissions, so the refusal is planted where the cache creates its folder."""
    def refuse(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(cache.tempfile, "mkdtemp", refuse)
    with pytest.warns(cache.CacheWarning, match="Permission denied"):
        mod = tklab.compile(_src(), arch="sm_80")
    assert mod.kernels == ["f"] and not mod.cached


def test_cache_dir_that_is_a_file_compiles_without_caching_and_warns_once(tmp_path, monkeypatch):
    f = tmp_path / "not-a-folder"
    f.write_text("I am a file")
    monkeypatch.setenv("TKLAB_CACHE_DIR", str(f))
    with pytest.warns(cache.CacheWarning, match="without caching") as record:
        a = tklab.compile(_src(), arch="sm_80")
        b = tklab.compile(_src(), arch="sm_80")
    assert a.kernels == b.kernels == ["f"] and not a.cached and not b.cached
    assert len([w for w in record if issubclass(w.category, cache.CacheWarning)]) == 1
    assert f.read_text() == "I am a file"


def test_empty_cache_dir_variable_means_the_default(tmp_path, monkeypatch):
    monkeypatch.setenv("TKLAB_CACHE_DIR", "")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "tklab"
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", cache.CacheWarning)
        tklab.compile(_src(), arch="sm_80")
    assert not [p for p in tmp_path.iterdir() if p.name != "home"]  # nothing written into the working folder
    assert any((tmp_path / "home" / ".cache" / "tklab").iterdir())


def test_store_is_atomic_and_leaves_no_temporary_folders():
    mod = tklab.compile(_src(), arch="sm_80")
    parent = _entry(mod).parent
    assert not [p for p in parent.iterdir() if p.name.startswith(".tmp-")]
    assert cache.store(mod.key, {"cubin": b"x", "ptx": "y", "log": "", "lowered": {}, "seconds": 0.0})
    assert cache.load(mod.key)["cubin"] == mod.cubin  # an existing good entry is not replaced


def test_problem_names_what_is_wrong():
    good = {"log": "", "lowered": {}, "seconds": 1.0}
    elf = b"\x7fELF" + bytes(100)
    ptx = ".version 8.0\n.target sm_80\n"
    assert cache.problem(good, elf, ptx) is None
    assert "lacks 'log'" in cache.problem({}, elf, ptx)
    assert "ELF" in cache.problem(good, b"junk", ptx)
    assert "PTX" in cache.problem(good, elf, "")


def test_one_process_builds_the_emulators_runtime_and_the_others_wait_for_it(tmp_path, monkeypatch):
    """On a cold cache, callers asking for the emulator's runtime at once (pytest's workers, checks started together)
    get one build: the others wait for it and take it, instead of each compiling the same library (issue 44, item 7).
    The compiler is stood in by one that takes half a second, so the callers overlap."""
    import threading
    import time

    from tklab.emulate import build

    try:
        cc = build.find()
    except Exception as e:  # noqa: BLE001 - no C++ compiler: the emulator is not built here at all
        pytest.skip(f"no C++ compiler for the emulator: {e}")
    monkeypatch.setenv("TKLAB_CACHE_DIR", str(tmp_path))
    calls: list[str] = []

    def compiler(argv: list[str], what: str, program: str, **limits: bool) -> str:
        calls.append(what)
        time.sleep(0.5)
        Path(argv[argv.index("-o") + 1]).write_bytes(b"\x7fELF built once")
        return ""

    monkeypatch.setattr(build, "_run", compiler)
    got: list[Path] = []
    callers = [threading.Thread(target=lambda: got.append(build.runtime_library(cc))) for _ in range(4)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    assert calls == ["building the emulator runtime"], calls
    assert len(got) == 4 and len(set(got)) == 1 and got[0].read_bytes() == b"\x7fELF built once"
