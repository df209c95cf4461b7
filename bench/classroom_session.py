"""What one student's session costs on a CPU node: a Jupyter server, and a kernel running each chapter.

    python bench/classroom_session.py                  # every chapter; writes $OUT (else bench/results/)
    python bench/classroom_session.py 00 04            # some chapters

Sizes the CPU profile of deploy/jupyterhub/values.yaml (docs/CLASSROOM.md): a JupyterLab server is started
as a student's pod starts it, and its memory is read once it answers; then each chapter runs top to bottom
in a fresh kernel (as a student running all its cells does, GPU cells showing recorded results), and the
kernel's peak memory (resident set, sampled every 0.1 s, its child processes included) and CPU seconds
are recorded. Writes ``classroom_session_<date>_<commit>.{json,md}`` with the machine, commit and date.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return os.environ.get("GIT_COMMIT", "unknown")


def _tree_rss(p: psutil.Process) -> int:
    total = 0
    for q in [p, *p.children(recursive=True)]:
        try:
            total += q.memory_info().rss
        except psutil.Error:
            pass
    return total


def server_memory() -> dict[str, Any]:
    """RSS of a JupyterLab server that answered its first API call (no kernel yet)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as home:
        proc = subprocess.Popen([sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}",
                                 "--ServerApp.token=t", f"--ServerApp.root_dir={ROOT}", "--allow-root"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "HOME": home})
        try:
            for _ in range(600):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token=t", timeout=2)
                    break
                except OSError:
                    time.sleep(0.1)
            urllib.request.urlopen(f"http://127.0.0.1:{port}/lab?token=t", timeout=30).read()  # what a student loads
            time.sleep(1.0)
            return {"server_rss_mb": round(_tree_rss(psutil.Process(proc.pid)) / 2**20)}
        finally:
            proc.terminate()
            proc.wait(30)


def run_chapter(path: Path) -> dict[str, Any]:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=1200, allow_errors=True, resources={"metadata": {"path": str(path.parent)}})
    peak, stop = [0], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            km = client.km
            pid = getattr(getattr(km, "provisioner", None), "pid", None) if km is not None else None
            if pid:
                try:
                    peak[0] = max(peak[0], _tree_rss(psutil.Process(pid)))
                except psutil.Error:
                    pass
            time.sleep(0.1)

    watcher = threading.Thread(target=sample, daemon=True)
    t0 = time.monotonic()
    watcher.start()
    cpu = 0.0
    with client.setup_kernel():
        pid = client.km.provisioner.pid
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index)
        try:
            t = psutil.Process(pid).cpu_times()
            cpu = t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    stop.set()
    watcher.join()
    errors = sum(o.get("output_type") == "error" for c in nb.cells for o in c.get("outputs", []))
    return {"wall_s": round(time.monotonic() - t0, 1), "kernel_cpu_s": round(cpu, 1),
            "kernel_peak_rss_mb": round(peak[0] / 2**20), "cells_with_errors": errors}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("chapters", nargs="*", help="chapter numbers (default: every notebook)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--warm", action="store_true", help="keep the compile cache of earlier runs (default: start "
                    "with an empty one, as a student's first session does)")
    args = ap.parse_args(list(sys.argv[1:] if argv is None else argv))
    scratch = tempfile.TemporaryDirectory()
    if not args.warm:
        os.environ["TKLAB_CACHE_DIR"] = str(Path(scratch.name) / "tklab-cache")
    books = sorted((ROOT / "notebooks").glob("*.ipynb"))
    if args.chapters:
        books = [b for b in books if any(b.name.startswith(c) for c in args.chapters)]
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.machine())
    result: dict[str, Any] = {"machine": f"{cpu}, {os.cpu_count()} cores, "
                              f"{psutil.virtual_memory().total / 2**30:.0f} GiB", "commit": _commit(),
                              "date": datetime.date.today().isoformat(), "load_avg_1min_at_start": os.getloadavg()[0],
                              "compile_cache": "warm (earlier runs)" if args.warm else "empty at the start",
                              **server_memory(), "chapters": {}}
    with tempfile.TemporaryDirectory() as tmp:  # run copies: whatever a chapter writes lands in a scratch folder
        for b in books:
            print(f"running {b.name} …", file=sys.stderr, flush=True)
            copy = Path(tmp) / b.name
            copy.write_bytes(b.read_bytes())
            result["chapters"][b.name] = run_chapter(copy)
    out = args.out or Path(os.environ.get("OUT") or ROOT / "bench" / "results")
    out.mkdir(parents=True, exist_ok=True)
    stem = f"classroom_session_{result['date']}_{result['commit']}" + ("_warm" if args.warm else "")
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [f"# One student's session on a CPU node ({result['date']}, commit {result['commit']})", "",
             f"{result['machine']}; 1-minute load average at the start {result['load_avg_1min_at_start']:.1f} "
             "(a shared machine: wall times are upper bounds, CPU seconds are the kernel's own). Compile cache: "
             f"{result['compile_cache']}; the chapters run one after the other in one session.", "",
             f"JupyterLab server, ready, no kernel: {result['server_rss_mb']} MB resident.", "",
             "| chapter | wall s | kernel CPU s | kernel peak MB | cells with errors |", "|---|---|---|---|---|"]
    lines += [f"| {k} | {v['wall_s']} | {v['kernel_cpu_s']} | {v['kernel_peak_rss_mb']} | {v['cells_with_errors']} |"
              for k, v in result["chapters"].items()]
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    scratch.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
