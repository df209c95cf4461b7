"""Everything chapters 07 and 08 need from an H100/H200, in one command of about four to five minutes.

    GIT_COMMIT=<sha> PYTHONPATH=$PWD python3 bench/ch07_ch08_gpu.py      # results in $OUT (or bench/results/...)
    python bench/ch07_ch08_gpu.py --merge OUT/recorded.json              # later, anywhere: the notebooks' numbers
                                                                         # into bench/results/recorded.json

Each part runs in a child process with a time limit, so a kernel that hangs costs its part's limit, not the
run, and the report says which part it was:
  sanitize   (in the background while compile and check run) compute-sanitizer memcheck, racecheck and
             synccheck, each over one small case of every new kernel (CuPy only: quick to start)
  compile    every kernel for sm_90a: registers, spills, ptxas serialization warnings (C75xx), launch facts
  check      every kernel on fresh random inputs against an exact (copies) or float64 (GEMMs) reference,
             awkward shapes included (1000^3, 4096x4000x1032, a persistent grid of 2 clusters walking 32
             tiles); the two exercises' reference solutions through tklab.check (static checks, run, speed)
  time_copy  the three ways to copy and the ring's stage sweep, beside a device copy, three rounds
  time_gemm  the chapter-08 progression and cuBLAS at 4096^3 and 8192^3: three methods x three rounds
Writes 5 files: summary.md (read this), results.json (everything), recorded.json (the notebooks' keys, in
bench/results/recorded.json's format), sanitize.txt (the sanitizers' reports), log.txt (each child's output).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tklab import recorded  # noqa: E402
from tklab.paths import solution  # noqa: E402

LIMITS = {"compile": 150, "check_copy": 90, "check_gemm": 150, "check_cluster": 60, "time_copy": 90,
          "time_gemm": 200, "sanitize": 170}
CHECKS = ("check_copy", "check_gemm", "check_cluster")
SANITIZERS = ("memcheck", "racecheck", "synccheck")


# ---- the parts (each runs in a child: --part NAME --json FILE) --------------------------------------------
def part_compile() -> dict[str, Any]:
    import gemm_wgmma

    import tklab
    from tklab import gemm

    steps = dict(gemm.STEPS) | gemm_wgmma.VARIANTS
    out: dict[str, Any] = {"gemm": gemm_wgmma.compile_facts(steps), "other": []}
    sources = [("tma_copy.cu", ()), *[("ch07_tma_ring.cu", (f"-DSTAGES={s}",)) for s in (1, 2, 3, 4, 6, 8)],
               ("ch08_wgmma.cu", ("-DC_TYPE=float",))]
    for name, opts in sources:
        mod = tklab.compile(solution(name).read_text(), arch="sm_90a", name=name, options=opts)
        for k in mod.kernels:
            kern = mod[k]
            out["other"].append({"file": name, "options": list(opts), "kernel": k, "registers": kern.registers,
                                 "spill": kern.spill_bytes, "serialization_warnings":
                                 [ln for ln in mod.log.splitlines() if "C75" in ln]})
    return out


def _gemm_checks(names: list[str], multi_tile: list[str]) -> list[dict[str, Any]]:
    import gemm_wgmma
    import torch

    from tklab import gemm

    steps = dict(gemm.STEPS) | gemm_wgmma.VARIANTS
    out: list[dict[str, Any]] = []
    for name in names:
        for shape in gemm_wgmma.shapes_for(steps[name]):
            print(f"check {name} {shape} ...", flush=True)
            out += gemm_wgmma.check(steps[name], [shape])
            print(f"    {out[-1]}", flush=True)
    for name in multi_tile:  # few clusters walking many tiles: the ring and the staging tiles are reused
        print(f"check {name} 1000^3 on 2 clusters ...", flush=True)
        a = torch.randn(1000, 1000, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(1000, 1000, device="cuda", dtype=torch.bfloat16)
        c = torch.full((1000, 1000), float("nan"), device="cuda", dtype=torch.bfloat16)
        gemm.prepare(a, b, c, step=name, max_clusters=2)()
        torch.cuda.synchronize()
        e = gemm.errors(c, a, b)
        out.append({"step": name, "shape": [1000, 1000, 1000], "note": "2 clusters", "rel": e.rel,
                    "unwritten": e.unwritten, "first_wrong": e.first_wrong, "ok": e.ok()})
        print(f"    {out[-1]}", flush=True)
    return out


def _exercise(ex: str) -> dict[str, Any]:
    import tklab
    from tklab import specs

    print(f"check exercise {ex} (reference solution) ...", flush=True)
    r = tklab.check(ex, ROOT / specs.get(ex).solution, timeout=150)
    print(str(r), flush=True)
    return {"passed": r.passed, "run": r.run_status, "speed": r.speed, "report": str(r)}


def part_check_copy() -> dict[str, Any]:
    """The three ways and the ring (every stage count of the sweep) on exact copies, ragged shapes included."""
    import cupy as cp

    from tklab import tma_copy

    res: dict[str, Any] = {"copy": [], "exercises": {}}
    rng = cp.random.default_rng()
    for way in tma_copy.WAYS:
        for shape in ((64, 64), (256, 192), (4096, 4096)):
            src = rng.standard_normal(shape, dtype=cp.float32)
            dst = cp.full_like(src, cp.nan)
            tma_copy.prepare_way(way, src, dst)()
            cp.cuda.runtime.deviceSynchronize()
            res["copy"].append({"kernel": way, "shape": list(shape), "ok": bool(cp.array_equal(src, dst))})
            print(res["copy"][-1], flush=True)
    for stages in (1, 2, 3, 4, 6, 8):
        for shape in ((100, 68), (1, 4), (3000, 1000), (4096, 4096)):
            src = rng.standard_normal(shape, dtype=cp.float32)
            big = cp.full((shape[0] + 1, shape[1]), cp.nan, dtype=cp.float32)  # a guard row after the output
            tma_copy.prepare_ring(src, big[: shape[0]], stages)()
            cp.cuda.runtime.deviceSynchronize()
            ok = bool(cp.array_equal(src, big[: shape[0]])) and bool(cp.isnan(big[shape[0]]).all())
            res["copy"].append({"kernel": f"ring, {stages} stages", "shape": list(shape), "ok": ok})
            print(res["copy"][-1], flush=True)
    res["exercises"]["ch07_tma_ring"] = _exercise("ch07_tma_ring")
    return res


def part_check_gemm() -> dict[str, Any]:
    """Steps 1-4 and the variants on tile shapes (persistent: awkward shapes too), and exercise ch08."""
    names = ["1_one_warpgroup", "1_one_warpgroup_2stages", "2_warp_specialised", "2_in_flight_1", "3_persistent",
             "4_l2_order"]
    return {"gemm": _gemm_checks(names, ["3_persistent"]), "exercises": {"ch08_wgmma": _exercise("ch08_wgmma")}}


def part_check_cluster() -> dict[str, Any]:
    """Step 5 (clusters, multicast) alone: if it hangs or faults, the other checks have their results."""
    return {"gemm": _gemm_checks(["5_cluster"], ["5_cluster"])}


def part_sanitize_cases() -> dict[str, Any]:
    """Small cases of every new kernel, CuPy only (run under compute-sanitizer); a quick sanity check each."""
    import cupy as cp

    from tklab import gemm, tma_copy
    from tklab.run.arrays import bf16_random, bf16_to_float32

    rng = cp.random.default_rng(1)
    done = []
    for way in tma_copy.WAYS:
        src = rng.standard_normal((64, 128), dtype=cp.float32)
        dst = cp.zeros_like(src)
        tma_copy.prepare_way(way, src, dst)()
        cp.cuda.runtime.deviceSynchronize()
        done.append((f"copy {way}", bool(cp.array_equal(src, dst))))
    for stages, shape in ((1, (64, 64)), (2, (100, 68)), (3, (300, 200))):
        src = rng.standard_normal(shape, dtype=cp.float32)
        dst = cp.zeros_like(src)
        tma_copy.prepare_ring(src, dst, stages)()
        cp.cuda.runtime.deviceSynchronize()
        done.append((f"ring {stages} stages {shape}", bool(cp.array_equal(src, dst))))
    cases = [("1_one_warpgroup", (64, 256, 128), None), ("2_warp_specialised", (128, 256, 128), None),
             ("3_persistent", (200, 264, 136), None), ("3_persistent", (300, 520, 136), 1),
             ("5_cluster", (300, 520, 136), 1), ("5_cluster", (520, 264, 72), None)]
    for name, (m, n, k), clusters in cases:
        a, b = bf16_random((m, k), rng), bf16_random((k, n), rng)
        c = cp.zeros((m, n), cp.uint16)
        gemm.prepare(a, b, c, step=name, max_clusters=clusters)()
        cp.cuda.runtime.deviceSynchronize()
        ref = cp.matmul(bf16_to_float32(a), bf16_to_float32(b))
        err = float(cp.abs(bf16_to_float32(c) - ref).max() / cp.abs(ref).max())
        done.append((f"gemm {name} {m}x{n}x{k}" + (f" ({clusters} cluster)" if clusters else ""), err < 2e-2))
    for what, ok in done:
        print(f"sanitize case {what}: {'ok' if ok else 'WRONG'}", flush=True)
    return {"cases": [{"case": w, "ok": ok} for w, ok in done]}


def part_time_copy() -> dict[str, Any]:
    from tklab import tma_copy

    return {"ways": tma_copy.measure_ways(), "ring": tma_copy.measure_ring()}


def part_time_gemm() -> dict[str, Any]:
    """The progression; only the steps whose checks passed (TKLAB_STEPS, set by the parent) are timed."""
    import gemm_wgmma

    from tklab import gemm

    steps = dict(gemm.STEPS) | gemm_wgmma.VARIANTS
    chosen = os.environ.get("TKLAB_STEPS")
    if chosen is not None:
        steps = {k: v for k, v in steps.items() if k in chosen.split(",")}
    return gemm.progression((4096, 8192), 3, steps, target_ms=100.0)


PARTS = {"compile": part_compile, "check_copy": part_check_copy, "check_gemm": part_check_gemm,
         "check_cluster": part_check_cluster, "sanitize_cases": part_sanitize_cases, "time_copy": part_time_copy,
         "time_gemm": part_time_gemm}


# ---- the parent ----------------------------------------------------------------------------------------
def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.setdefault("TKLAB_COMMIT", recorded.commit())
    env.setdefault("GIT_COMMIT", env["TKLAB_COMMIT"])
    return env


def _child(part: str, tmp: Path, prefix: tuple[str, ...] = ()) -> tuple[list[str], Path]:
    out = tmp / f"{part}-{len(prefix)}-{time.monotonic_ns()}.json"
    return [*prefix, sys.executable, str(Path(__file__).resolve()), "--part", part, "--json", str(out)], out


def _finish(proc: subprocess.Popen, out: Path, limit: float, started: float) -> dict[str, Any]:
    try:
        text, _ = proc.communicate(timeout=max(1.0, limit - (time.monotonic() - started)))
        status = "done" if proc.returncode == 0 else f"exit {proc.returncode}"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        text, _ = proc.communicate()
        status = f"TIMEOUT after {limit:.0f} s (killed)"
    result = json.loads(out.read_text()) if out.exists() else None
    return {"status": status, "seconds": round(time.monotonic() - started, 1), "output": text or "",
            "result": result}


def _run(part: str, tmp: Path, log: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    cmd, out = _child(part, tmp)
    print(f"[{time.strftime('%H:%M:%S')}] {part} ...", flush=True)
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env() | (env or {}),
                            start_new_session=True, cwd=ROOT)
    r = _finish(proc, out, LIMITS[part], started)
    print(f"    {part}: {r['status']} in {r['seconds']} s", flush=True)
    log.append(f"===== {part}: {r['status']} in {r['seconds']} s\n{r['output'][-20000:]}")
    return r


def _sanitizer_binary() -> str | None:
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for p in ("/usr/local/cuda/bin/compute-sanitizer", "/usr/local/cuda/compute-sanitizer/compute-sanitizer"):
        if Path(p).exists():
            return p
    return None


def _start_sanitizers(tmp: Path) -> dict[str, Any]:
    binary = _sanitizer_binary()
    if binary is None:
        return {}
    running = {}
    for tool in SANITIZERS:
        prefix = (binary, "--tool", tool, "--error-exitcode", "17", "--print-limit", "30")
        if tool == "memcheck":
            prefix += ("--report-api-errors", "no")
        cmd, out = _child("sanitize_cases", tmp, prefix)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(),
                                start_new_session=True, cwd=ROOT)
        running[tool] = (proc, out, time.monotonic())
    return running


def _sanitizer_verdict(r: dict[str, Any]) -> str:
    text = r["output"]
    if r["status"].startswith("TIMEOUT"):
        return r["status"]
    summary = [ln for ln in text.splitlines() if "ERROR SUMMARY" in ln or "RACECHECK SUMMARY" in ln]
    wrong = [ln for ln in text.splitlines() if ln.startswith("sanitize case") and "WRONG" in ln]
    return f"{r['status']}; {' '.join(summary) or 'no summary line'}" + (f"; {len(wrong)} cases WRONG" if wrong else "")


def _summary(res: dict[str, Any], commit: str, device: str) -> str:
    from tklab import gemm

    lines = [f"# Chapters 07-08 on the GPU — {datetime.date.today().isoformat()}", "",
             f"- device: {device}; commit: {commit}; {datetime.datetime.now().isoformat(timespec='seconds')}",
             f"- NVRTC: {res.get('nvrtc') or recorded.nvrtc()} (its ptxas schedules the kernels' SASS)",
             "- parts: " + ", ".join(f"{k} {v['status']} ({v['seconds']} s)" for k, v in res["parts"].items()), ""]
    comp = (res["parts"].get("compile") or {}).get("result")
    if comp:
        bad = [f for f in comp["gemm"] if f["spill"] or f["serialization_warnings"]]
        bad += [f for f in comp["other"] if f["spill"] or f["serialization_warnings"]]
        lines += ["## compile", "", f"- {len(comp['gemm']) + len(comp['other'])} kernels; spills or C75xx warnings: "
                  f"{bad or 'none'}", ""]
    checks = {p: (res["parts"].get(p) or {}) for p in CHECKS}
    gemm_cases = [c for r in checks.values() for c in ((r.get("result") or {}).get("gemm") or [])]
    copy_cases = [c for r in checks.values() for c in ((r.get("result") or {}).get("copy") or [])]
    exercises = {k: v for r in checks.values() for k, v in ((r.get("result") or {}).get("exercises") or {}).items()}
    if any(checks.values()):
        fails = [c for c in gemm_cases + copy_cases if not c["ok"]]
        lines += ["## correctness", "", f"- GEMM cases: {len(gemm_cases)}, copy cases: {len(copy_cases)}, "
                  f"failed: {len(fails)}"]
        lines += [f"  - FAIL {json.dumps(c)}" for c in fails]
        lines += [f"- part {p} did not finish: {r['status']} (see log.txt for the last case it started)"
                  for p, r in checks.items() if r and r["status"] != "done"]
        worst = max((c["rel"] for c in gemm_cases if "rel" in c), default=float("nan"))
        lines += [f"- worst GEMM relative error: {worst:.2e}"]
        for ex, r in exercises.items():
            sp = r.get("speed") or {}
            lines.append(f"- exercise {ex}: passed={r['passed']} run={r['run']} ratio={sp.get('ratio')} "
                         f"target={sp.get('target')}")
        lines.append("")
    if res.get("sanitizers"):
        lines += ["## sanitizers", ""] + [f"- {t}: {v}" for t, v in res["sanitizers"].items()] + [""]
    tc = (res["parts"].get("time_copy") or {}).get("result")
    if tc:
        w, ring = tc["ways"], tc["ring"]
        lines += ["## copies (GB/s, read + write; median of 3 rounds)", "",
                  f"- {w['rows']} x {w['cols']} fp32: " + ", ".join(f"{k}: {w[f'{k}_gbps']:.0f}" for k in
                                                                    ("per_thread", "cp_async", "tma", "device_copy")),
                  f"- ring ({ring['blocks']} blocks, {ring['stage_kb']} KB stages): " +
                  ", ".join(f"{s}: {g:.0f}" for s, g in zip(ring["stages"], ring["gbps"], strict=True)) +
                  f"; device copy {ring['device_copy_gbps']:.0f}", ""]
    tg = (res["parts"].get("time_gemm") or {}).get("result")
    if tg:
        lines += ["## GEMM progression vs cuBLAS", "", gemm.METHOD_TEXT, "", gemm.table(tg), ""]
        goal = []
        for n in tg["sizes"]:
            for m in tg["methods"]:
                rs = gemm.ratios(tg, gemm.FINAL, n, m)
                goal.append(f"{n}³ {m}: {min(rs):.3f}–{max(rs):.3f}" if rs else f"{n}³ {m}: —")
        ok = all(min(gemm.ratios(tg, gemm.FINAL, n, m) or [0]) >= 1.0 for n in tg["sizes"] for m in tg["methods"])
        lines += [f"- goal (final step {gemm.FINAL} ≥ 1.00× cuBLAS in every method and round): "
                  f"{'MET' if ok else 'not met'} — " + "; ".join(goal), ""]
    return "\n".join(lines) + "\n"


def _recorded(res: dict[str, Any], device: str, commit: str) -> dict[str, Any]:
    """The notebooks' keys, in bench/results/recorded.json's format."""
    from tklab import gemm

    date = datetime.date.today().isoformat()
    rec: dict[str, Any] = {}

    def put(key: str, values: dict[str, Any]) -> None:
        rec[key] = {"values": values, "device": device, "date": date, "commit": commit}

    tc = (res["parts"].get("time_copy") or {}).get("result")
    if tc:
        put("ch07.copy_ways", tc["ways"])
        put("ch07.ring_stages", tc["ring"])
    tg = (res["parts"].get("time_gemm") or {}).get("result")
    if tg:
        put("ch08.progression", tg)
        for name, values in gemm.records(tg).items():
            if name in gemm.STEPS:
                put(f"ch08.{name}", values)
    return rec


def _device_name() -> str:
    try:
        from tklab import gpu

        return gpu.name() if gpu.available() else "no GPU"
    except Exception:  # noqa: BLE001 - a summary without a device name is still a summary
        return "unknown device"


def merge(fragment: Path, target: Path) -> list[str]:
    """Copy the keys of a run's recorded.json into ``target`` (bench/results/recorded.json): what the
    notebooks show on machines without a GPU. Keys already there are replaced."""
    data = json.loads(target.read_text()) if target.exists() else {}
    new = json.loads(fragment.read_text())
    bad = [k for k, v in new.items() if not {"values", "device", "date", "commit"} <= set(v)]
    if bad:
        raise ValueError(f"{fragment} is not a recorded.json fragment (entries without values/device/date/commit: "
                         f"{bad})")
    data.update(new)
    target.write_text(json.dumps(dict(sorted(data.items())), indent=1, default=float) + "\n")
    return sorted(new)


def _passed_steps(res: dict[str, Any]) -> list[str]:
    """Steps whose every check passed (a step that failed or hung is not timed: it could hang again)."""
    import gemm_wgmma

    from tklab import gemm

    cases: dict[str, list[bool]] = {}
    for p in CHECKS:
        r = res["parts"].get(p)
        if r is None and p in ("check_gemm", "check_cluster"):
            return list(dict(gemm.STEPS) | gemm_wgmma.VARIANTS)  # checks skipped on purpose: time everything
        for c in ((r or {}).get("result") or {}).get("gemm") or []:
            cases.setdefault(c["step"], []).append(bool(c["ok"]))
    return [s for s, oks in cases.items() if oks and all(oks)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=list(PARTS), help="(internal) run one part here and write --json")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--merge", type=Path, help="merge a recorded.json written by a run into bench/results/")
    ap.add_argument("--skip", default="", help="comma-separated parts to skip (e.g. sanitize,time_copy)")
    args = ap.parse_args()
    if args.part:
        try:
            result = PARTS[args.part]()
        except Exception:  # noqa: BLE001 - the parent reports the traceback
            traceback.print_exc()
            return 1
        args.json.write_text(json.dumps(result, default=float))
        return 0
    if args.merge:
        target = ROOT / "bench" / "results" / "recorded.json"
        print(f"merged into {target}: {', '.join(merge(args.merge, target))}")
        return 0

    skip = set(filter(None, args.skip.split(",")))
    commit = recorded.commit()
    out_dir = Path(os.environ["OUT"]) if os.environ.get("OUT") else \
        ROOT / "bench" / "results" / f"ch07_ch08_{datetime.date.today().isoformat()}_{commit}"
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    log: list[str] = []
    res: dict[str, Any] = {"commit": commit, "nvrtc": recorded.nvrtc(), "parts": {}, "sanitizers": {}}
    with tempfile.TemporaryDirectory(prefix="ch0708-") as tmp_name:
        tmp = Path(tmp_name)
        sanitizers = {} if "sanitize" in skip else _start_sanitizers(tmp)
        if "sanitize" not in skip and not sanitizers:
            res["sanitizers"] = {t: "compute-sanitizer not found" for t in SANITIZERS}
        for part in ("compile", *CHECKS):
            if part not in skip:
                res["parts"][part] = _run(part, tmp, log)
        sanitize_text = []
        for tool, (proc, out, t0) in sanitizers.items():  # the timing parts need a quiet GPU
            r = _finish(proc, out, LIMITS["sanitize"], t0)
            res["sanitizers"][tool] = _sanitizer_verdict(r)
            print(f"    {tool}: {res['sanitizers'][tool]}", flush=True)
            sanitize_text.append(f"===== {tool}: {r['status']} in {r['seconds']} s\n{r['output'][-30000:]}")
        if "time_copy" not in skip:
            res["parts"]["time_copy"] = _run("time_copy", tmp, log)
        if "time_gemm" not in skip:
            res["parts"]["time_gemm"] = _run("time_gemm", tmp, log, {"TKLAB_STEPS": ",".join(_passed_steps(res))})
    device = _device_name()
    summary = _summary(res, commit, device)
    res["seconds"] = round(time.monotonic() - started, 1)
    for part in res["parts"].values():
        part.pop("output", None)  # kept in log.txt
    (out_dir / "summary.md").write_text(summary)
    (out_dir / "results.json").write_text(json.dumps(res, indent=1, default=float))
    (out_dir / "recorded.json").write_text(json.dumps(_recorded(res, device, commit), indent=1, default=float))
    (out_dir / "sanitize.txt").write_text("\n".join(sanitize_text) or "not run\n")
    (out_dir / "log.txt").write_text("\n".join(log))
    print(summary)
    print(f"done in {res['seconds']} s; files in {out_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
