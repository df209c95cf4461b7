"""One table from bench/ncu_flash_bwd.sh's text reports: the main backward kernel of each contender (the
longest launch in its report) with the numbers that explain a gap — time, tensor-pipe activity, issue
activity, the stall reasons per issued instruction, shared-memory and L2 reduction traffic.

    python bench/ncu_bwd_summary.py REPORT.txt ... [--out bench/results/ncu_bwd_<date>_<commit>.md]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tklab.profile.parse import to_base  # noqa: E402  (ncu's units -> seconds, bytes, cycles per second)

HEADER = re.compile(r"^  (\S.*?) \((\d+), (\d+), (\d+)\)x\((\d+), 1, 1\), Context")
METRIC = re.compile(r"^\s+([a-z0-9_]+__[\w.]+)\s+(.*?)\s+([\d,.]+)$")

#: (label, metric, scale, format)
ROWS = [
    ("duration under ncu (ms)", "gpu__time_duration.sum", 1e3, "{:.2f}"),
    ("GPC clock under ncu (GHz)", "gpc__cycles_elapsed.avg.per_second", 1e-9, "{:.2f}"),
    ("grid × threads", None, 1, ""),
    ("registers per thread", "launch__registers_per_thread", 1, "{:.0f}"),
    ("dynamic shared memory (KiB)", "launch__shared_mem_per_block_dynamic", 1 / 1024, "{:.0f}"),
    # (the wgmma-only cycle counter reads n/a with these sections; the shared pipe carries wgmma, no FP64 here)
    ("shared pipe (wgmma) active, % of active cycles", "sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active",
     1, "{:.1f}"),
    ("uniform pipe, % of peak", "sm__inst_executed_pipe_uniform.avg.pct_of_peak_sustained_active", 1, "{:.1f}"),
    ("XU pipe (exp2), % of peak", "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active", 1, "{:.1f}"),
    ("issue active, % of elapsed", "sm__issue_active.avg.pct_of_peak_sustained_elapsed", 1, "{:.1f}"),
    ("instructions executed (M)", "smsp__inst_executed.sum", 1e-6, "{:.0f}"),
    ("wgmma instructions (M)", "sm__inst_executed_pipe_tensor_op_gmma.sum", 1e-6, "{:.2f}"),
    ("shared wavefronts, LSU (M)", "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum", 1e-6, "{:.0f}"),
    ("L2 reduction sectors (M)", "lts__t_sectors_op_red.sum", 1e-6, "{:.0f}"),
    ("L2 atomic sectors (M)", "lts__t_sectors_op_atom.sum", 1e-6, "{:.0f}"),
    ("L2 throughput, % of peak", "lts__throughput.avg.pct_of_peak_sustained_elapsed", 1, "{:.1f}"),
    ("DRAM throughput, % of peak", "dram__throughput.avg.pct_of_peak_sustained_elapsed", 1, "{:.1f}"),
]
STALLS = ["barrier", "gmma", "long_scoreboard", "mio_throttle", "math_pipe_throttle", "wait", "short_scoreboard",
          "lg_throttle", "dispatch_stall", "branch_resolving", "no_instruction", "sleeping", "selected",
          "not_selected", "membar"]


def kernels(text: str) -> list[dict[str, object]]:
    """Every kernel block of the report (the details page and the raw page both), metrics as numbers."""
    out: list[dict[str, object]] = []
    for line in text.splitlines():
        m = HEADER.match(line)
        if m:
            out.append({"name": m.group(1), "grid": int(m.group(2)) * int(m.group(3)) * int(m.group(4)),
                        "threads": int(m.group(5)), "m": {}})
            continue
        m = METRIC.match(line)
        if m and out:
            out[-1]["m"][m.group(1)] = to_base(float(m.group(3).replace(",", "")), m.group(2))[0]  # type: ignore[index]
    return out


def main_kernel(path: Path) -> dict[str, object]:
    ks = [k for k in kernels(path.read_text(errors="replace")) if "gpu__time_duration.sum" in k["m"]]  # type: ignore[operator]
    if not ks:
        raise SystemExit(f"{path}: no kernel with a raw metrics page (was it written by bench/ncu_flash_bwd.sh?)")
    return max(ks, key=lambda k: k["m"]["gpu__time_duration.sum"])  # type: ignore[index]


def details(path: Path) -> str:
    """The main kernel's details page (its sections' tables, without ncu's advice paragraphs): what
    bench/results/ncu keeps of a report (the raw page is about 500 KB per report)."""
    name = str(main_kernel(path)["name"])
    lines = path.read_text(errors="replace").splitlines()
    start = next(i for i, line in enumerate(lines) if HEADER.match(line) and line.startswith(f"  {name} "))
    keep, advice = [lines[start]], False
    for line in lines[start + 1:]:
        if HEADER.match(line):
            break
        if re.match(r"^    (OPT|INF|WRN)\b", line):
            advice = True
            continue
        if advice and (line.startswith("          ") or not line.strip()):
            continue
        advice = False
        keep.append(line)
    return "\n".join(keep) + "\n"


def table(paths: list[Path]) -> list[str]:
    cols = [(re.sub(r"^ncu_bwd_|_[0-9a-f]{7}\.txt$", "", p.name), main_kernel(p)) for p in paths]
    lines = ["| | " + " | ".join(c for c, _ in cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for label, metric, scale, fmt in ROWS:
        cells = []
        for _, k in cols:
            if metric is None:
                cells.append(f"{k['grid']} × {k['threads']}")
            else:
                v = k["m"].get(metric)  # type: ignore[attr-defined]
                cells.append(fmt.format(v * scale) if v is not None else "–")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    for s in STALLS:
        name = f"smsp__average_warps_issue_stalled_{s}_per_issue_active.ratio"
        vals = [k["m"].get(name) for _, k in cols]  # type: ignore[attr-defined]
        if any(v for v in vals):
            lines.append(f"| stalled on {s.replace('_', ' ')}, warps per issue | "
                         + " | ".join(f"{v:.2f}" if v is not None else "–" for v in vals) + " |")
    lines.append("")
    lines += [f"- {c}: `{k['name'][:110]}`" for c, k in cols]
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("reports", nargs="+", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--keep", type=Path, help="write each report's main-kernel details page into this folder")
    args = ap.parse_args()
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        for path in args.reports:
            (args.keep / path.name).write_text(details(path))
    text = "\n".join(table(args.reports))
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
