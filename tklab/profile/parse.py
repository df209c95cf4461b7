"""Reading Nsight Compute's CSV output: one record of metrics per profiled kernel launch.

Two layouts exist, and both are read:

- ``--page raw`` (what ``tklab.profile`` asks for): a header row (launch columns such as ``"ID"``,
  ``"Kernel Name"``, ``"Grid Size"``, then one column per metric, e.g. ``"dram__bytes_read.sum"``), a row
  of units (empty under the launch columns), then one row per launch.
- ``--page details``: one row per metric, with ``"Metric Name"``, ``"Metric Unit"`` and ``"Metric Value"``.

Values are normalised to base units, whatever ``--print-units`` ncu used: ``"1,234.5"`` with unit
``"Kbyte"`` becomes 1234500.0 bytes, ``"usecond"`` becomes seconds, ``"Ghz"`` cycles per second. Text
values (a device name) stay text; ``"n/a"`` and empty cells are left out. Lines ncu prints around the
table (``==PROF==``, ``==WARNING==``, the program's own output) are ignored.

Public API: ``parse_csv(text) -> list[KernelRecord]``, ``select(records, kernel=None)``, ``KernelRecord``,
``to_base(value, unit) -> (number, unit)``.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field

#: Launch columns of the raw page (everything without a ``__`` in its name is treated the same way).
LAUNCH_COLUMNS = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
                  "Block Size", "Grid Size", "Device", "CC")

_SI = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "m": 1e-3, "u": 1e-6, "n": 1e-9, "p": 1e-12}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}
# Base words of ncu's units, longest first so "wavefront" is not read as a prefixed "front".
_WORDS = ("instruction", "transaction", "wavefront", "register", "request", "second", "sector", "thread",
          "cycle", "block", "byte", "inst", "warp", "flop", "hz", "op")


@dataclass
class KernelRecord:
    """The metrics of one profiled launch, in base units (bytes, seconds, cycles, cycles/second, %)."""

    id: str
    kernel: str
    grid: tuple[int, ...] | None = None
    block: tuple[int, ...] | None = None
    metrics: dict[str, float | str] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)

    def number(self, name: str) -> float | None:
        value = self.metrics.get(name)
        return value if isinstance(value, float) else None


#: The short time units ncu writes with ``--print-units base`` (seen on the H200, ncu 2025.3: "ns", "byte/s").
_SHORT = {"s": (1.0, "second"), "ms": (1e-3, "second"), "us": (1e-6, "second"), "ns": (1e-9, "second")}


def _scale(word_with_prefix: str) -> tuple[float, str] | None:
    if word_with_prefix in _SHORT:
        return _SHORT[word_with_prefix]
    for word in _WORDS:
        if word_with_prefix.lower().endswith(word):
            prefix = word_with_prefix[: len(word_with_prefix) - len(word)]
            if word == "hz" and prefix.upper() in ("K", "M", "G", "T"):  # ncu writes Khz, Mhz, Ghz
                prefix = prefix.upper()
            if prefix in _SI:
                return _SI[prefix], word
            if prefix in _BINARY:
                return _BINARY[prefix], word
    return None


def to_base(value: float, unit: str) -> tuple[float, str]:
    """``value`` in ``unit`` (``"Mbyte"``, ``"usecond"``, ``"Gbyte/second"``, ``"%"``) → in base units.

    Units ncu does not scale (``%``, ``""``, unknown words) are returned unchanged.
    """
    unit = unit.strip()
    if not unit or unit == "%":
        return value, unit
    parts = unit.split("/")
    if len(parts) > 2:
        return value, unit
    num = _scale(parts[0])
    if num is None:
        return value, unit
    factor, words = num[0], num[1]
    if len(parts) == 2:
        den = _scale(parts[1])
        if den is None:
            return value, unit
        factor /= den[0]
        words = f"{words}/{den[1]}"
    if words == "hz":
        words = "cycle/second"
    return value * factor, words


_NUMBER = re.compile(r"^[+-]?(\d{1,3}(,\d{3})+|\d+)?(\.\d*)?([eE][+-]?\d+)?$")


def _value(text: str) -> float | str | None:
    s = text.strip()
    if not s or s.lower() in ("n/a", "nan", "-"):
        return None
    if _NUMBER.match(s) and any(c.isdigit() for c in s):
        return float(s.replace(",", ""))
    return s


def _dims(text: str) -> tuple[int, ...] | None:
    nums = re.findall(r"\d+", text or "")
    return tuple(int(n) for n in nums) if nums else None


def _table(text: str) -> list[list[str]]:
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    return list(csv.reader(io.StringIO("\n".join(lines))))


def _put(rec: KernelRecord, name: str, raw: str, unit: str) -> None:
    value = _value(raw)
    if value is None:
        return
    if isinstance(value, float):
        value, unit = to_base(value, unit)
    rec.metrics[name] = value
    rec.units[name] = unit


def parse_csv(text: str) -> list[KernelRecord]:
    """Every launch in ncu's CSV output (raw or details page), in the order ncu printed them."""
    rows = _table(text)
    if not rows:
        return []
    header = rows[0]
    if "Metric Name" in header and "Metric Value" in header:
        return _details(header, rows[1:])
    if "ID" not in header or "Kernel Name" not in header:
        raise ValueError("not Nsight Compute CSV output: no header with \"ID\" and \"Kernel Name\" columns")
    units: list[str] = [""] * len(header)
    out = []
    for row in rows[1:]:
        cells = dict(zip(header, row, strict=False))
        if not cells.get("ID", "").strip():  # the units row
            units = row + [""] * (len(header) - len(row))
            continue
        rec = KernelRecord(cells["ID"].strip(), cells.get("Kernel Name", ""), _dims(cells.get("Grid Size", "")),
                           _dims(cells.get("Block Size", "")))
        for i, name in enumerate(header):
            if "__" in name and i < len(row):
                _put(rec, name, row[i], units[i])
        out.append(rec)
    return out


def _details(header: list[str], rows: list[list[str]]) -> list[KernelRecord]:
    by_id: dict[str, KernelRecord] = {}
    for row in rows:
        cells = dict(zip(header, row, strict=False))
        key = cells.get("ID", "").strip()
        if not key:
            continue
        rec = by_id.get(key)
        if rec is None:
            rec = by_id[key] = KernelRecord(key, cells.get("Kernel Name", ""), _dims(cells.get("Grid Size", "")),
                                            _dims(cells.get("Block Size", "")))
        name = cells.get("Metric Name", "").strip()
        if name:
            _put(rec, name, cells.get("Metric Value", ""), cells.get("Metric Unit", ""))
    return list(by_id.values())


def select(records: list[KernelRecord], kernel: str | None = None) -> KernelRecord:
    """The one launch of ``kernel`` (a name, or the start of a demangled signature) in ``records``."""
    found = records
    if kernel is not None:
        found = [r for r in records if r.kernel == kernel or r.kernel.split("(")[0].split("<")[0].strip()
                 .split(" ")[-1] == kernel]
    if len(found) == 1:
        return found[0]
    names = ", ".join(sorted({r.kernel for r in records})) or "none"
    if not found:
        raise LookupError(f"ncu's output holds no launch of {kernel!r} (kernels profiled: {names})")
    raise LookupError(f"ncu's output holds {len(found)} launches{f' of {kernel!r}' if kernel else ''}; "
                      f"pick one (kernels: {names})")
