"""The trace held to Nsight Compute: the counters a trace predicts, named as ncu names them, and the rule
that compares them (used by the tests on recorded profiles and by the live GPU test).

What is compared, per shared-memory operation kind (``ld``: ``ld.shared`` + ldmatrix wavefronts, which ncu counts
together in ``..._op_ld``; ``st``; ``ldsm``: ldmatrix instructions):

- instructions: the trace's warp-wide executions x ``scale`` (the recorded launch's size over the traced one)
  equal ncu's ``smsp__inst_executed_op_shared_ld/st`` and ``..._op_ldsm`` exactly;
- wavefronts per instruction: ncu's reading rounds to the trace's, and is at most ``SLACK`` above it. In a whole
  kernel ncu counts 0.02-9 % more shared wavefronts than the bank model gives (recorded on the H200:
  ``bench/results/profiles.json``, ``ncu_chapters_h200.json``); the bank model's one-instruction probes
  (``bench/results/banks_h200.json``) read exact, so the excess is what else the L1 data pipe served meanwhile.

Public API: ``predicted(trace)``, ``compare(trace, metrics, scale)``, ``SLACK``.
"""

from __future__ import annotations

from typing import Any

from .model import Trace

SLACK = 0.10
INSTR = {"ld": "smsp__inst_executed_op_shared_ld.sum", "st": "smsp__inst_executed_op_shared_st.sum",
         "ldsm": "smsp__inst_executed_op_ldsm.sum"}
WAVES = {"ld": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
         "st": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"}


def predicted(trace: Trace) -> dict[str, int]:
    """The trace's totals under ncu's metric names (wavefronts of ldmatrix count with loads, of stmatrix with
    stores, as ncu counts them; ldmatrix is not a shared ld instruction for ncu)."""
    out = dict.fromkeys([*INSTR.values(), *WAVES.values()], 0)
    for s in trace.shared:
        kind = "ld" if s.op in ("ld", "ldmatrix") else "st" if s.op in ("st", "stmatrix") else None
        if kind is None:
            continue
        out[WAVES[kind]] += s.wavefronts
        if s.op == "ldmatrix":
            out[INSTR["ldsm"]] += s.executions
        elif s.op in ("ld", "st"):
            out[INSTR[s.op]] += s.executions
    return out


def compare(trace: Trace, metrics: dict[str, Any], scale: float) -> list[str]:
    """What does not hold (empty: the trace agrees with ncu as the module docstring says)."""
    mine = predicted(trace)
    bad = []
    for name in INSTR.values():
        if name in metrics and mine[name] * scale != float(metrics[name]):
            bad.append(f"{name}: trace {mine[name]} x {scale:g} = {mine[name] * scale:g}, ncu {metrics[name]:g}")
    for kind, name in WAVES.items():
        instrs = float(metrics.get(INSTR[kind], 0)) + (float(metrics.get(INSTR["ldsm"], 0)) if kind == "ld" else 0)
        if name not in metrics or instrs == 0:
            continue
        mine_instrs = mine[INSTR[kind]] + (mine[INSTR["ldsm"]] if kind == "ld" else 0)
        per_trace = mine[name] / mine_instrs if mine_instrs else 0.0
        per_ncu = float(metrics[name]) / instrs
        if round(per_ncu) != round(per_trace) or not 0 <= per_ncu - per_trace <= SLACK * per_trace:
            bad.append(f"{name} per instruction: trace {per_trace:.4g}, ncu {per_ncu:.4g}")
    return bad
