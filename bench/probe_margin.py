"""The speed probe's margin on a GPU: first-sight time against the timed loop's, per solution, and a memo attack.

``tklab.grading.child._bench`` refuses a kernel's speed when it runs more than ``PROBE_FACTOR`` times slower on
inputs it sees for the first time than in the timed loop (which rotates three sets it has seen). The factor
must sit above what honest kernels show and below what a kernel that remembers its inputs gains. This prints,
for each solution named (default: ch02, ch03, ch06, ch08) and for chapter 3's solution that remembers its inputs
and copies half of C on a repeat (``tests/test_redteam_isolation.py``'s ``_memo_variant``), the loop's median, the
probe's median and their ratio, running the GPU child's own code in this process (no sandbox: reading the
numbers is the point). Needs a GPU with NVRTC and CuPy.

    python bench/probe_margin.py [exercise ...]
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from tklab.grading import channel, child, judge, specs  # noqa: E402


def measure(exercise: str, path: Path, seed: int = 1234) -> dict:
    """The GPU child's run of ``path`` with timing, in this process; the speed frame it sends, and the time."""
    spec = specs.get(exercise)
    cases = list(spec.cases)
    inputs = judge.draw_inputs(spec, cases, seed)
    sent = bytearray()
    chan = channel.ChildIO(sent.extend, cases, lambda i: {k: v.copy() for k, v in inputs[i].items()}, seed)
    start = time.monotonic()
    child._run_cuda(spec, path, chan, True)
    speed = next((h for h, _ in channel.read_frames(bytes(sent)) if h.get("type") == "speed"), {})
    return {k: v for k, v in speed.items() if k != "type"} | {"seconds": round(time.monotonic() - start, 1)}


def main(argv: list[str]) -> int:
    from test_redteam_isolation import _memo_variant

    print(f"PROBE_FACTOR {child.PROBE_FACTOR}, slack {child._PROBE_SLACK_MS} ms")
    runs = [(specs.find(e).id, ROOT / specs.find(e).solution) for e in (argv or ["ch02", "ch03", "ch06", "ch08"])]
    memo = Path(tempfile.mkdtemp()) / "ch03_register_blocking.cu"
    memo.write_text(_memo_variant())
    runs.append(("ch03_register_blocking", memo))
    for ex, path in runs:
        got = measure(ex, path)
        ratio = got["fresh_ms"] / got["ms"] if got.get("ms") and got.get("fresh_ms") else None
        label = "memo attack" if path == memo else "solution"
        print(f"{ex} ({label}): {json.dumps(got)}" + (f"; first sight / loop = {ratio:.3f}" if ratio else ""),
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
