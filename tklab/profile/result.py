"""What a profile says: the handful of numbers that explain a kernel, and one sentence naming its limiter.

Everything here is derived from the metrics of one launch (``parse.KernelRecord.metrics``, base units) plus
what ncu cannot know: the useful FLOPs of the launch (given, or counted from FP32 instructions) and the
ceilings of the GPU (``tklab.run.ceilings``). Derivation happens on read, so a profile recorded once is
re-read with the current rules, and the same metrics always give the same sentence.

How the limiter is named (``ProfileResult.limiter``):

1. The units that can limit a kernel, each as % busy: tensor pipe, FMA pipe, shared-memory pipe
   (wavefronts), DRAM, L2. The busiest one at or above ``BOUND_PCT`` (60 %, where Nsight Compute itself
   starts calling a throughput high) is the limiter: "shared-memory bound: the shared pipe is 87 % busy,
   1.5 wavefronts per FFMA".
2. Else, if the schedulers issue on ``ISSUE_BOUND_PCT`` of cycles, the kernel is issue bound.
3. Else it is latency bound: named with the busiest unit and the stall reason warps spend most cycles on.

Public API: ``ProfileResult``, ``Limiter``, ``Stall``, ``BOUND_PCT``, ``STALL_TEXT``, ``M`` (metric names).
"""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

BOUND_PCT = 60.0
ISSUE_BOUND_PCT = 80.0


class M:
    """Metric names read by ``ProfileResult``, each with the alternatives ncu versions use (first found wins)."""

    duration = ("gpu__time_duration.sum",)
    sm_clock = ("sm__cycles_elapsed.avg.per_second", "smsp__cycles_elapsed.avg.per_second")
    sm_cycles = ("sm__cycles_elapsed.avg", "sm__cycles_elapsed.max")
    sm_count = ("device__attribute_multiprocessor_count", "launch__sm_count")
    dram_read = ("dram__bytes_read.sum", "dram__bytes_op_read.sum")
    dram_write = ("dram__bytes_write.sum", "dram__bytes_op_write.sum")
    dram_pct = ("dram__throughput.avg.pct_of_peak_sustained_elapsed",
                "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed")
    l2_bytes = ("lts__t_bytes.sum",)
    l2_pct = ("lts__throughput.avg.pct_of_peak_sustained_elapsed",)
    l2_hit = ("lts__t_sector_hit_rate.pct",)
    # Tensor pipe: the generic metric covers mma.sync (HMMA) and wgmma (HGMMA); the op-specific ones are
    # read when it is missing, and the busier one counts.
    tensor_pct = ("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",)
    tensor_op_pct = ("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
                     "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active")
    fma_pct = ("sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
               "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active")
    issue_pct = ("sm__inst_issued.avg.pct_of_peak_sustained_active",
                 "smsp__issue_active.avg.pct_of_peak_sustained_active")
    hmma = ("sm__inst_executed_pipe_tensor_op_hmma.sum", "smsp__inst_executed_pipe_tensor_op_hmma.sum")
    gmma = ("sm__inst_executed_pipe_tensor_op_gmma.sum", "smsp__inst_executed_pipe_tensor_op_gmma.sum")
    ffma = ("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",)
    fadd = ("smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",)
    fmul = ("smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",)
    shared_wavefronts = ("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",)
    shared_wavefronts_ld = ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",)
    shared_wavefronts_st = ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",)
    shared_conflicts_ld = ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",)
    shared_conflicts_st = ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",)
    shared_ld = ("smsp__inst_executed_op_shared_ld.sum",)
    shared_st = ("smsp__inst_executed_op_shared_st.sum",)
    ldsm = ("smsp__inst_executed_op_ldsm.sum",)
    stsm = ("smsp__inst_executed_op_stsm.sum",)
    shared_pct = ("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed",
                  "l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed")
    occupancy = ("sm__warps_active.avg.pct_of_peak_sustained_active",)
    occupancy_theoretical = ("sm__maximum_warps_per_active_cycle_pct",)
    registers = ("launch__registers_per_thread",)
    waves = ("launch__waves_per_multiprocessor",)
    # On a tie the first named is the limit, as in tklab.models.occupancy: hard caps before chosen resources.
    limits = {"warps": "launch__occupancy_limit_warps", "blocks": "launch__occupancy_limit_blocks",
              "registers": "launch__occupancy_limit_registers", "shared memory": "launch__occupancy_limit_shared_mem"}
    cycles_per_issue = ("smsp__average_warp_latency_per_inst_issued.ratio",)


#: Stall families, best first: cycles per issued instruction (counters), cycles per warp, PC samples.
STALL_FAMILIES = (
    ("cycles per issued instruction",
     re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$")),
    ("cycles per warp", re.compile(r"^smsp__average_warp_latency_issue_stalled_(\w+?)(?:\.ratio)?$")),
    ("samples", re.compile(r"^smsp__pcsamp_warps_issue_stalled_(\w+?)$")),
)

#: What each stall reason means, in a learner's words.
STALL_TEXT = {
    "barrier": "a barrier (__syncthreads)",
    "long_scoreboard": "global memory (long scoreboard)",
    "short_scoreboard": "shared memory or MUFU results (short scoreboard)",
    "mio_throttle": "a full shared-memory queue (MIO throttle)",
    "lg_throttle": "a full global load/store queue (LG throttle)",
    "math_pipe_throttle": "an oversubscribed math pipe",
    "wait": "fixed-latency dependencies (wait)",
    "not_selected": "their turn: ready, another warp issued (not selected)",
    "selected": "nothing: issuing (selected)",
    "dispatch_stall": "dispatch",
    "no_instruction": "instruction fetch (no instruction)",
    "branch_resolving": "branch resolution",
    "membar": "a memory barrier",
    "sleeping": "sleep (nanosleep, or a warp waiting for its group)",
    "tex_throttle": "a full texture queue",
    "drain": "stores draining at exit",
    "imc_miss": "constant-cache misses",
    "misc": "other reasons (misc)",
}


_READ: set[str] = set()  # filled below, once M is complete


@dataclass(frozen=True)
class Stall:
    """One warp-stall reason: its value in the family's unit and its share of all stall values."""

    reason: str
    value: float
    share: float

    @property
    def text(self) -> str:
        return STALL_TEXT.get(self.reason, self.reason.replace("_", " "))


@dataclass(frozen=True)
class Limiter:
    """``kind``: "tensor", "fma", "shared", "dram", "l2", "issue", "latency" or "unknown"."""

    kind: str
    sentence: str


def metric_names() -> set[str]:
    """Every metric name ``ProfileResult`` reads (besides the stall families, matched by pattern)."""
    return {n for v in vars(M).values() if isinstance(v, tuple) for n in v} | set(M.limits.values())


def read_here(name: str) -> bool:
    """Does ``ProfileResult`` read this metric? (What a recorded profile keeps.)"""
    return name in _READ or any(rx.match(name) for _, rx in STALL_FAMILIES)


def _first(metrics: dict[str, Any], names: tuple[str, ...]) -> float | None:
    for n in names:
        v = metrics.get(n)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return None


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.0f} %"


def _share(x: float) -> str:
    return f"{100 * x:.0f} %"


def _si(x: float | None, unit: str) -> str:
    if x is None:
        return "—"
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def _reading(names: tuple[str, ...], doc: str | None = None) -> Any:
    """A property that reads one metric: the first of ``names`` that ncu reported (None if it reported none)."""
    return property(lambda self: self.get(names), doc=doc)


@dataclass
class ProfileResult:
    """One kernel launch profiled with Nsight Compute, and where the numbers came from.

    ``metrics`` holds every metric ncu reported (base units); the properties read the few that matter.
    ``flops`` is the launch's useful work if given (else ``counted_flops`` from FP32 instructions is used).
    """

    kernel: str
    metrics: dict[str, Any]
    device: str = ""
    flops: float | None = None
    peak: str = "fp32_simt"
    grid: tuple[int, ...] | None = None
    block: tuple[int, ...] | None = None
    shared_mem: int | None = None
    key: str | None = None
    label: str | None = None
    live: bool = True
    date: str = ""
    commit: str = ""
    ncu_version: str = ""
    note: str = ""  # why a recorded profile is shown (no GPU, no ncu, no permission)
    keep: tuple[str, ...] = ()  # metrics asked for by name (metrics=): stored with the ones read here
    raw_csv: str | None = field(default=None, repr=False)
    report_path: str | None = None
    bound_pct: ClassVar[float] = BOUND_PCT  # the picture draws its line here (it imports nothing from profile/)

    # ---- plain numbers ----------------------------------------------------------------------------
    def get(self, names: tuple[str, ...]) -> float | None:
        """The first of ``names`` that ncu reported as a number."""
        return _first(self.metrics, names)

    def _total(self, *parts: tuple[str, ...]) -> float | None:
        """The sum of the metrics ncu reported among ``parts`` (each the names of one; one it did not report adds
        nothing); None when it reported none of them."""
        values = [self.get(names) for names in parts]
        return None if all(v is None for v in values) else sum(v or 0.0 for v in values)

    def _per_second(self, amount: float | None) -> float | None:
        """``amount`` over the launch's duration, in units of 10^12 a second (TB/s for bytes)."""
        d = self.duration_s
        return amount / d / 1e12 if amount is not None and d else None

    duration_s = _reading(M.duration)

    @property
    def ms(self) -> float | None:
        d = self.duration_s
        return None if d is None else d * 1e3

    @property
    def counted_flops(self) -> float | None:
        """FP32 FLOPs the SASS executed (2 per FFMA, 1 per FADD/FMUL, per thread); None if ncu did not count."""
        ffma, fadd, fmul = self.get(M.ffma), self.get(M.fadd), self.get(M.fmul)
        if ffma is None and fadd is None and fmul is None:
            return None
        return 2 * (ffma or 0.0) + (fadd or 0.0) + (fmul or 0.0)

    @property
    def work_flops(self) -> float | None:
        """The FLOPs the rates use: given ones, else counted FP32 ones (when nonzero)."""
        if self.flops:
            return self.flops
        counted = self.counted_flops
        return counted if counted else None

    @property
    def flops_source(self) -> str:
        if self.flops:
            return "given"
        return "counted by ncu (FP32 FFMA×2 + FADD + FMUL)" if self.work_flops else "unknown (pass flops=)"

    @property
    def tflops(self) -> float | None:
        f, d = self.work_flops, self.duration_s
        return f / d / 1e12 if f and d else None

    @property
    def dram_bytes(self) -> float | None:
        return self._total(M.dram_read, M.dram_write)

    @property
    def dram_tbps(self) -> float | None:
        return self._per_second(self.dram_bytes)

    l2_bytes = _reading(M.l2_bytes)

    @property
    def l2_tbps(self) -> float | None:
        return self._per_second(self.l2_bytes)

    @property
    def intensity(self) -> float | None:
        """FLOPs per DRAM byte: the kernel's x on the roofline."""
        f, b = self.work_flops, self.dram_bytes
        return f / b if f and b else None

    # ---- utilisation --------------------------------------------------------------------------------
    @property
    def tensor_pct(self) -> float | None:
        generic = self.get(M.tensor_pct)
        ops = [v for n in M.tensor_op_pct if (v := self.get((n,))) is not None]
        cands = [v for v in (generic, *ops) if v is not None]
        return max(cands) if cands else None

    @property
    def fma_pct(self) -> float | None:
        cands = [v for n in M.fma_pct if (v := self.get((n,))) is not None]
        return max(cands) if cands else None

    issue_pct = _reading(M.issue_pct)

    @property
    def shared_wavefronts(self) -> float | None:
        total = self.get(M.shared_wavefronts)
        return total if total is not None else self._total(M.shared_wavefronts_ld, M.shared_wavefronts_st)

    @property
    def bank_conflicts(self) -> float | None:
        return self._total(M.shared_conflicts_ld, M.shared_conflicts_st)

    @property
    def shared_instructions(self) -> float | None:
        """Warp-wide shared-memory instructions: LDS/STS and ldmatrix/stmatrix."""
        return self._total(M.shared_ld, M.shared_st, M.ldsm, M.stsm)

    @property
    def shared_pct(self) -> float | None:
        """% of elapsed cycles the shared-memory pipe moved a wavefront (1 per SM per cycle at most)."""
        measured = self.get(M.shared_pct)
        if measured is not None:
            return measured
        w, sms, cycles = self.shared_wavefronts, self.get(M.sm_count), self.get(M.sm_cycles)
        return 100.0 * w / (sms * cycles) if w is not None and sms and cycles else None

    @property
    def ffma_instructions(self) -> float | None:
        """Warp-level FFMA instructions (thread count / 32: exact when every lane takes part)."""
        t = self.get(M.ffma)
        return t / 32 if t else None

    @property
    def mma_instructions(self) -> float | None:
        return self._total(M.hmma, M.gmma)

    dram_pct = _reading(M.dram_pct)
    l2_pct = _reading(M.l2_pct)
    occupancy_pct = _reading(M.occupancy)
    occupancy_theoretical_pct = _reading(M.occupancy_theoretical)

    @property
    def occupancy_limit(self) -> tuple[str, int] | None:
        """(resource, blocks per SM) of the resource that allows the fewest resident blocks."""
        limits = {k: v for k, n in M.limits.items() if (v := self.get((n,))) is not None}
        if not limits:
            return None
        name = min(limits, key=lambda k: limits[k])
        return name, int(limits[name])

    def units_busy(self) -> dict[str, float]:
        """% busy of each unit that can limit a kernel (those ncu reported)."""
        busy = {"tensor pipe": self.tensor_pct, "FMA pipe": self.fma_pct, "shared memory": self.shared_pct,
                "DRAM": self.dram_pct, "L2": self.l2_pct}
        return {k: v for k, v in busy.items() if v is not None}

    # ---- stalls ---------------------------------------------------------------------------------------
    @property
    def stall_unit(self) -> str:
        return self._stall_family()[0]

    def _stall_family(self) -> tuple[str, dict[str, float]]:
        for unit, rx in STALL_FAMILIES:
            found: dict[str, float] = {}
            for name, value in self.metrics.items():
                m = rx.match(name)
                if m and isinstance(value, float) and not m.group(1).endswith("_not_issued"):
                    found[m.group(1)] = value
            if found:
                return unit, found
        return "", {}

    @property
    def stalls(self) -> list[Stall]:
        """Stall reasons, largest first; shares are of the cycles spent waiting ("selected", the issue cycle
        itself, is listed but not counted as waiting)."""
        _, found = self._stall_family()
        total = sum(v for r, v in found.items() if v > 0 and r != "selected")
        ordered = sorted(found.items(), key=lambda kv: (-kv[1], kv[0]))
        return [Stall(r, v, v / total if total else 0.0) for r, v in ordered if v > 0]

    def top_stalls(self, n: int = 3, *, waiting_only: bool = True) -> list[Stall]:
        """The ``n`` largest reasons; ``waiting_only`` leaves out "selected" (the issue cycle itself)."""
        return [s for s in self.stalls if not (waiting_only and s.reason == "selected")][:n]

    # ---- against the ceilings -------------------------------------------------------------------------
    def ceilings(self) -> Any:
        """This device's ``tklab.run.ceilings.Ceilings`` (None if unknown and not measurable here)."""
        from ..run import ceilings

        for key, c in ceilings.KNOWN.items():
            if key in self.device:
                return c
        try:
            return ceilings.for_device(self.device) if self.device else None
        except Exception:  # noqa: BLE001 - an unknown GPU without CuPy: no ceilings, not an error
            return None

    @property
    def peak_tflops(self) -> float | None:
        c = self.ceilings()
        return getattr(c, f"{self.peak}_tflops", None) if c is not None else None

    @property
    def copy_tbps(self) -> float | None:
        c = self.ceilings()
        return c.copy_tbps if c is not None else None

    # ---- the verdict -----------------------------------------------------------------------------------
    def _shared_detail(self) -> str:
        w = self.shared_wavefronts
        per = []
        if w:
            # Per unit of the kernel's main work: the larger of its tensor-core and FFMA counts (the tensor
            # count of an fp32 kernel is not zero on the H200: 67M against 2.1G FFMA for chapter 02's).
            mma, ffma = self.mma_instructions or 0, self.ffma_instructions or 0
            if mma and mma >= ffma:
                per.append(f"{w / mma:.2g} wavefronts per tensor-core instruction")
            elif ffma:
                per.append(f"{w / ffma:.2g} wavefronts per FFMA")
            if self.shared_instructions:
                per.append(f"{w / self.shared_instructions:.2g} per shared-memory instruction")
            conflicts = self.bank_conflicts
            if conflicts is not None:
                per.append(f"bank conflicts {_share(conflicts / w)} of wavefronts")
        return (", " + ", ".join(per)) if per else ""

    @property
    def limiter(self) -> Limiter:
        busy = self.units_busy()
        if not busy:
            return Limiter("unknown", "not enough counters to name a limiter (ncu reported no unit utilisation)")
        unit = max(busy, key=lambda k: busy[k])
        value = busy[unit]
        if value >= BOUND_PCT:
            if unit == "shared memory":
                return Limiter("shared", f"shared-memory bound: the shared pipe is {value:.0f} % busy"
                               + self._shared_detail())
            if unit == "tensor pipe":
                rate = f" ({self.tflops:.0f} TFLOP/s)" if self.tflops else ""
                return Limiter("tensor", f"tensor-core bound: the tensor pipe is {value:.0f} % busy{rate}")
            if unit == "FMA pipe":
                rate = f" ({self.tflops:.1f} TFLOP/s)" if self.tflops else ""
                return Limiter("fma", f"FMA bound: the FMA pipe is {value:.0f} % busy{rate}")
            if unit == "DRAM":
                rate = f" ({self.dram_tbps:.2f} TB/s)" if self.dram_tbps else ""
                return Limiter("dram", f"memory bound: DRAM is {value:.0f} % busy{rate}")
            return Limiter("l2", f"L2 bound: the L2 cache is {value:.0f} % busy")
        issue = self.issue_pct
        if issue is not None and issue >= ISSUE_BOUND_PCT:
            return Limiter("issue", f"issue bound: the schedulers issue on {issue:.0f} % of cycles while no unit is "
                           f"{BOUND_PCT:.0f} % busy (busiest: {unit}, {value:.0f} %): fewer instructions per result")
        text = f"latency bound: no unit reaches {BOUND_PCT:.0f} % busy (busiest: {unit}, {value:.0f} %)"
        top = self.top_stalls(1)
        if top:
            text += f"; warps mostly wait on {top[0].text}, {_share(top[0].share)} of stall cycles"
        waves = self.get(M.waves)
        occ = self.occupancy_pct
        if waves is not None and waves < 0.5:
            blocks = math.prod(self.grid) if self.grid else None
            count = f"{blocks} block{'s' if blocks != 1 else ''}" if blocks else "its blocks"
            text += f"; with {count} the grid is under half a wave, so most SMs sit idle"
        elif occ is not None and occ < 25:
            text += f"; only {occ:.0f} % occupancy to hide it"
        return Limiter("latency", text)

    # ---- presentation ------------------------------------------------------------------------------------
    @property
    def origin(self) -> str:
        ncu = f", ncu {self.ncu_version}" if self.ncu_version else ""
        if self.live:
            return f"measured now on {self.device or 'this GPU'}{ncu}, --clock-control none"
        why = f" ({self.note})" if self.note else ""
        return f"recorded on {self.device}, {self.date}, commit {self.commit}{ncu}{why}"

    def rows(self) -> list[tuple[str, str]]:
        """The compact table: (what, value) pairs, in reading order."""
        out: list[tuple[str, str]] = []
        launch = []
        if self.grid:
            launch.append(f"grid {self.grid}")
        if self.block:
            launch.append(f"block {self.block}")
        regs = self.get(M.registers)
        if regs is not None:
            launch.append(f"{regs:.0f} registers/thread")
        waves = self.get(M.waves)
        if waves is not None:
            launch.append(f"{waves:.2f} waves")
        out.append(("kernel", f"{self.label or self.kernel}" + (f" — {', '.join(launch)}" if launch else "")))
        out.append(("duration", "—" if self.ms is None else f"{self.ms:.4g} ms (one launch under ncu, caches flushed)"))
        if self.tflops is not None:
            peak = self.peak_tflops
            kind = self.peak.replace("_", " ")
            vs = f" = {_share(self.tflops / peak)} of the {kind} ceiling ({peak:g})" if peak else ""
            src = "" if self.flops else " (FLOPs counted by ncu)"
            out.append(("compute", f"{self.tflops:.3g} TFLOP/s{vs}{src}"))
        else:
            out.append(("compute", "— (pass flops= for a rate)"))
        if self.dram_bytes is not None:
            vs = f" = {_share(self.dram_tbps / self.copy_tbps)} of a copy ({self.copy_tbps:.3g} TB/s)" \
                if self.dram_tbps is not None and self.copy_tbps else ""
            rate = f", {self.dram_tbps:.3g} TB/s{vs}" if self.dram_tbps is not None else ""
            out.append(("DRAM", f"{_si(self.get(M.dram_read), 'B')} read + {_si(self.get(M.dram_write), 'B')} "
                                f"written{rate}"))
        if self.l2_bytes is not None:
            hit = self.get(M.l2_hit)
            rate = f", {self.l2_tbps:.3g} TB/s" if self.l2_tbps else ""
            hits = f", {hit:.0f} % hit rate" if hit is not None else ""
            out.append(("L2", f"{_si(self.l2_bytes, 'B')} moved{rate}{hits}"))
        out.append(("pipes busy", f"tensor {_pct(self.tensor_pct)}, FMA {_pct(self.fma_pct)}, "
                                  f"issue {_pct(self.issue_pct)} (of active cycles)"))
        w = self.shared_wavefronts
        if w is not None:
            out.append(("shared memory", f"{_pct(self.shared_pct)} busy; {_si(w, '')} wavefronts"
                        + self._shared_detail().replace(", bank", "; bank")))
        occ = self.occupancy_pct
        if occ is not None or self.occupancy_theoretical_pct is not None:
            lim = self.occupancy_limit
            text = f"{_pct(occ)} achieved of {_pct(self.occupancy_theoretical_pct)} theoretical"
            if lim:
                text += f" (limit: {lim[0]}, {lim[1]} block{'s' if lim[1] != 1 else ''}/SM)"
            out.append(("occupancy", text))
        top = self.top_stalls(3)
        if top:
            out.append(("warps wait on", "; ".join(f"{s.text} {_share(s.share)}" for s in top)))
        out.append(("limiter", self.limiter.sentence))
        return out

    def __str__(self) -> str:
        width = max(len(k) for k, _ in self.rows())
        lines = [f"{k:>{width}}  {v}" for k, v in self.rows()]
        return "\n".join(lines + [f"{'':>{width}}  [{self.origin}]"])

    __repr__ = __str__

    def svg(self) -> str:
        """The picture: roofline point, how busy each unit is, warp-stall reasons."""
        from ..widgets.profile_view import profile_svg

        return profile_svg(self)

    def _repr_html_(self) -> str:
        body = "".join(f"<tr><th style='text-align:right'>{html.escape(k)}</th>"
                       f"<td style='text-align:left'>{html.escape(v)}</td></tr>" for k, v in self.rows()[:-1])
        return (f"<div><p><b>{html.escape(self.limiter.sentence)}</b></p><table>{body}</table>"
                f"<p style='color:#666;font-size:90%'>{html.escape(self.origin)}</p>{self._picture_img()}</div>")

    def _picture_img(self) -> str:
        """The picture as a PNG <img> (inline SVG in HTML is shown as text by an untrusted notebook)."""
        import base64

        from ..widgets.raster import svg_png, svg_size

        svg = self.svg()
        width, _ = svg_size(svg)
        data = base64.b64encode(svg_png(svg)).decode()
        return f"<img alt='profile picture' width='{width:g}' src='data:image/png;base64,{data}'/>"

    # ---- storage -------------------------------------------------------------------------------------------
    def to_record(self) -> dict[str, Any]:
        """What ``tklab.profile`` stores for a chapter: everything needed to rebuild this result (the metrics
        read here, the stall reasons and those asked for by name; the raw CSV keeps the rest)."""
        metrics = {k: v for k, v in sorted(self.metrics.items()) if read_here(k) or k in self.keep}
        return {"kernel": self.kernel, "label": self.label, "device": self.device, "flops": self.flops,
                "peak": self.peak, "grid": list(self.grid) if self.grid else None,
                "block": list(self.block) if self.block else None, "shared_mem": self.shared_mem,
                "date": self.date, "commit": self.commit, "ncu": self.ncu_version, "keep": list(self.keep),
                "metrics": metrics}

    @classmethod
    def from_record(cls, key: str, rec: dict[str, Any], *, note: str = "") -> ProfileResult:
        return cls(kernel=rec["kernel"], metrics=dict(rec["metrics"]), device=rec.get("device", "?"),
                   flops=rec.get("flops"), peak=rec.get("peak", "fp32_simt"),
                   grid=tuple(rec["grid"]) if rec.get("grid") else None,
                   block=tuple(rec["block"]) if rec.get("block") else None, shared_mem=rec.get("shared_mem"),
                   key=key, label=rec.get("label"), live=False, date=rec.get("date", "?"),
                   commit=rec.get("commit", "?"), ncu_version=rec.get("ncu", ""), note=note,
                   keep=tuple(rec.get("keep", ())))


_READ.update(metric_names())


@dataclass
class Missing:
    """What a chapter shows when it can neither profile here nor read a recorded profile."""

    key: str
    reason: str

    def __str__(self) -> str:
        return f"{self.key}: no profile ({self.reason}), and none recorded yet: run this notebook on a GPU with ncu"

    __repr__ = __str__

    def _repr_html_(self) -> str:
        return f"<p><i>{html.escape(str(self))}</i></p>"
