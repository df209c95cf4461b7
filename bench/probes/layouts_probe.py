"""Push lane/register identities through the real instructions and record what comes out.

Every experiment records raw inputs and raw outputs (register words, shared-memory images), so the
committed table ``bench/results/layouts_h200.json`` is evidence that any model can be checked against;
``tests/test_layouts.py`` checks ``tklab.models.layouts`` against every experiment, exactly.

    python3 bench/probes/layouts_probe.py [--family mma|ldmatrix|stmatrix|wgmma|tma ...] [--out PATH]

Families (each launch is one warp, or one warpgroup for wgmma, or one block for TMA):
- mma: mma.sync.m16n8k16 (bf16 and f16 → f32) with one operand carrying distinct integers and the
  other a 0/1 selector, plus random small-integer products (all exact in f32);
- ldmatrix: x1/x2/x4, with and without .trans, from shared memory whose 16-bit word h holds h, with
  rows at shuffled addresses; stmatrix: x1/x2/x4 of distinct register values, shared memory dumped;
- wgmma: m64nNk16 for N = 8..256 (A from registers, B from shared memory, no swizzle), encoded so that
  D[m][n] = m + 64 n, plus random products at N = 64 and 256;
- tma: 2-D tile copies of a uint16 tensor whose element (r, c) holds r * cols + c + 1, for each swizzle,
  box rows narrower than the swizzle span, an offset box and a box hanging off the tensor's edge.
"""

from __future__ import annotations

import argparse
import json
import random
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

from tklab import layouts  # noqa: E402

FAMILIES = ("mma", "ldmatrix", "stmatrix", "wgmma", "tma")
WGMMA_N = list(range(8, 257, 8))


def bf16_bits(x: float) -> int:
    """bf16 bit pattern of a small integer (exact: the top 16 bits of the f32)."""
    return struct.unpack("<I", struct.pack("<f", float(x)))[0] >> 16


def f16_bits(x: float) -> int:
    return struct.unpack("<H", struct.pack("<e", float(x)))[0]


def pack(lo: int, hi: int) -> int:
    return (lo & 0xFFFF) | ((hi & 0xFFFF) << 16)


# --------------------------------------------------------------------------------------------- sources
def mma_source() -> str:
    parts = []
    for dt in ("bf16", "f16"):
        parts.append(f"""
extern "C" __global__ void probe_mma_{dt}(const unsigned* a, const unsigned* b, const float* c, float* d) {{
  // Experiment blockIdx.x: lane l feeds its registers a[.., l, 0..3], b[.., l, 0..1], c[.., l, 0..3].
  const int l = threadIdx.x, e = blockIdx.x;
  const unsigned* A = a + (e * 32 + l) * 4;
  const unsigned* B = b + (e * 32 + l) * 2;
  const float* C = c + (e * 32 + l) * 4;
  float d0, d1, d2, d3;
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.{dt}.{dt}.f32 {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, "
               "{{%8, %9}}, {{%10, %11, %12, %13}};"
               : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
               : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "r"(B[0]), "r"(B[1]),
                 "f"(C[0]), "f"(C[1]), "f"(C[2]), "f"(C[3]));
  float* D = d + (e * 32 + l) * 4;
  D[0] = d0; D[1] = d1; D[2] = d2; D[3] = d3;
}}
""")
    return "".join(parts)


def matrix_source() -> str:
    parts = []
    for num in (1, 2, 4):
        regs = ", ".join(f"%{i}" for i in range(num))
        outs = ", ".join(f'"=r"(r[{i}])' for i in range(num))
        for trans in (False, True):
            t = ".trans" if trans else ""
            parts.append(f"""
extern "C" __global__ void probe_ldmatrix_x{num}{'_trans' if trans else ''}(const int* rows, unsigned* out) {{
  __shared__ __align__(128) unsigned short s[2048];  // 4 KiB; 16-bit word h holds h
  for (int h = threadIdx.x; h < 2048; h += 32) s[h] = (unsigned short)h;
  __syncwarp();
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(s)) + rows[threadIdx.x];
  unsigned r[4] = {{0, 0, 0, 0}};
  asm volatile("ldmatrix.sync.aligned.m8n8.x{num}{t}.shared.b16 {{{regs}}}, [%{num}];" : {outs} : "r"(a) : "memory");
  for (int i = 0; i < 4; ++i) out[threadIdx.x * 4 + i] = r[i];
}}
""")
        ins = ", ".join(f"%{i + 1}" for i in range(num))
        srcs = ", ".join(['"r"(a)'] + [f'"r"(regs[threadIdx.x * 4 + {i}])' for i in range(num)])
        parts.append(f"""
extern "C" __global__ void probe_stmatrix_x{num}(const int* rows, const unsigned* regs, unsigned short* dump) {{
  __shared__ __align__(128) unsigned short s[2048];
  for (int h = threadIdx.x; h < 2048; h += 32) s[h] = 0xFFFF;
  __syncwarp();
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(s)) + rows[threadIdx.x];
  asm volatile("stmatrix.sync.aligned.m8n8.x{num}.shared.b16 [%0], {{{ins}}};" :: {srcs} : "memory");
  __syncwarp();
  for (int h = threadIdx.x; h < 2048; h += 32) dump[h] = s[h];
}}
""")
    return "".join(parts)


def wgmma_source(ns: list[int]) -> str:
    parts = []
    for n in ns:
        nd = n // 2
        dnames = [f"d{i}" for i in range(nd)]
        decl = "  float " + ", ".join(f"{x} = 0.f" for x in dnames) + ";"
        dlist = ", ".join(f"%{i}" for i in range(nd))
        outs = ", ".join(f'"+f"({x})' for x in dnames)
        stores = "\n".join(f"  d[t * {nd} + {i}] = {x};" for i, x in enumerate(dnames))
        parts.append(f"""
extern "C" __global__ void __launch_bounds__(128) probe_wgmma_n{n}(const unsigned* a, const uint4* bimg, int chunks,
                                                               unsigned long long desc_fields, float* d) {{
  // One warpgroup: A (64x16 bf16) from registers a[t][0..3], B (16x{n}) from shared memory, copied in
  // from bimg; the descriptor's strides come in desc_fields, its start address is added here.
  extern __shared__ __align__(1024) unsigned char smem[];
  const int t = threadIdx.x;
  uint4* s4 = reinterpret_cast<uint4*>(smem);
  for (int i = t; i < chunks; i += 128) s4[i] = bimg[i];
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic writes → async proxy (wgmma)
  __syncthreads();
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const unsigned long long desc = desc_fields | (unsigned long long)((addr & 0x3FFFF) >> 4);
  const unsigned a0 = a[t * 4 + 0], a1 = a[t * 4 + 1], a2 = a[t * 4 + 2], a3 = a[t * 4 + 3];
{decl}
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{nd + 5}, 0;\\n"
               "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {{{dlist}}}, "
               "{{%{nd}, %{nd + 1}, %{nd + 2}, %{nd + 3}}}, %{nd + 4}, p, 1, 1, 0;\\n}}"
               : {outs}
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(0) : "memory");
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
{stores}
}}
""")
    return "".join(parts)


def tma_source() -> str:
    return r"""
extern "C" __global__ void probe_tma(const unsigned long long* tmap, int x0, int y0, int nbytes, int dump_bytes,
                                     unsigned short* out, int* status) {
  // One thread asks the copy engine for the box at (x0, y0); everyone waits on an mbarrier, then the
  // block dumps dump_bytes of shared memory (pre-filled with 0xFFFF, so untouched bytes show).
  extern __shared__ unsigned char raw[];
  const unsigned raw_addr = static_cast<unsigned>(__cvta_generic_to_shared(raw));
  const unsigned pad = (1024 - (raw_addr & 1023)) & 1023;  // the box goes to a 1024-byte-aligned address
  unsigned char* box = raw + pad;
  const unsigned dst = raw_addr + pad;
  const unsigned bar = dst + dump_bytes;  // an 8-byte mbarrier right after the dumped region
  unsigned short* b16 = reinterpret_cast<unsigned short*>(box);
  for (int i = threadIdx.x; i < dump_bytes / 2; i += blockDim.x) b16[i] = 0xFFFF;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bar) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long state;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;"
                 : "=l"(state) : "r"(bar), "r"(nbytes) : "memory");
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(dst), "l"(tmap), "r"(x0), "r"(y0), "r"(bar) : "memory");
    (void)state;
  }
  unsigned done = 0;
  for (long long spin = 0; !done && spin < (1LL << 24); ++spin)
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\nselp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done) : "r"(bar) : "memory");
  if (threadIdx.x == 0) status[0] = done ? 1 : -1;
  __syncthreads();
  for (int i = threadIdx.x; i < dump_bytes / 2; i += blockDim.x) out[i] = b16[i];
}
"""


def _kernels(source: str, name: str) -> Any:
    return common.load(common.build_cubin(source, name))


# ------------------------------------------------------------------------------------------ experiments
def mma_experiments(dt: str, seed: int = 7) -> list[dict[str, Any]]:
    """Register inputs for each experiment (built with the current model; recorded raw)."""
    A, B, C = layouts.fragment("mma.m16n8k16", "A"), layouts.fragment("mma.m16n8k16", "B"), \
        layouts.fragment("mma.m16n8k16", "C")
    bits = bf16_bits if dt == "bf16" else f16_bits
    rng = random.Random(seed)

    def regs_from(frag: layouts.Fragment, mat: list[list[float]]) -> list[list[int]]:
        out = []
        for lane in range(32):
            vals = [bits(mat[r][c]) for r, c in (frag.coords(lane, i) for i in range(frag.elements))]
            out.append([pack(vals[2 * j], vals[2 * j + 1]) for j in range(frag.elements // 2)])
        return out

    def cregs(mat: list[list[float]]) -> list[list[float]]:
        return [[float(mat[r][c]) for r, c in (C.coords(lane, i) for i in range(4))] for lane in range(32)]

    zeros_a = [[0.0] * 16 for _ in range(16)]
    zeros_b = [[0.0] * 8 for _ in range(16)]
    zeros_c = [[0.0] * 8 for _ in range(16)]
    exps = []
    # A carries lane identities: element (lane, i) holds 1 + 8 lane + i (raw, not via the model).
    a_id = [[pack(bits(1 + 8 * lane + 2 * j), bits(2 + 8 * lane + 2 * j)) for j in range(4)] for lane in range(32)]
    for j in (0, 1):
        sel = [[1.0 if k == 8 * j + n else 0.0 for n in range(8)] for k in range(16)]
        exps.append({"name": f"A identities, B selects k = {8 * j}..{8 * j + 7}", "a": a_id,
                     "b": regs_from(B, sel), "c": cregs(zeros_c)})
    b_id = [[pack(bits(1 + 4 * lane + 2 * j), bits(2 + 4 * lane + 2 * j)) for j in range(2)] for lane in range(32)]
    eye = [[1.0 if r == k else 0.0 for k in range(16)] for r in range(16)]
    exps.append({"name": "B identities, A = identity", "a": regs_from(A, eye), "b": b_id, "c": cregs(zeros_c)})
    c_id = [[float(1 + 4 * lane + i) for i in range(4)] for lane in range(32)]
    exps.append({"name": "C identities, A = B = 0", "a": regs_from(A, zeros_a), "b": regs_from(B, zeros_b), "c": c_id})
    for i in range(3):
        ra = [[float(rng.randint(-3, 3)) for _ in range(16)] for _ in range(16)]
        rb = [[float(rng.randint(-3, 3)) for _ in range(8)] for _ in range(16)]
        rc = [[float(rng.randint(-8, 8)) for _ in range(8)] for _ in range(16)]
        exps.append({"name": f"random product #{i}", "a": regs_from(A, ra), "b": regs_from(B, rb), "c": cregs(rc)})
    return exps


def run_mma() -> dict[str, Any]:
    import cupy as cp
    import numpy as np

    mod = _kernels(mma_source(), "probe_mma.cu")
    out = {}
    for dt in ("bf16", "f16"):
        exps = mma_experiments(dt)
        n = len(exps)
        a = cp.asarray(np.array([e["a"] for e in exps], dtype=np.uint32))
        b = cp.asarray(np.array([e["b"] for e in exps], dtype=np.uint32))
        c = cp.asarray(np.array([e["c"] for e in exps], dtype=np.float32))
        d = cp.full((n, 32, 4), np.nan, dtype=cp.float32)
        mod.get_function(f"probe_mma_{dt}")((n,), (32,), (a, b, c, d))
        dh = cp.asnumpy(d)
        for e, de in zip(exps, dh, strict=True):
            e["d"] = [[float(x) for x in lane] for lane in de]
        out[dt] = exps
    return out


def _rows(num: int, rng: random.Random) -> list[int]:
    """Row addresses for lanes 0..8*num-1: distinct shuffled 16-byte slots; other lanes get slot 0's."""
    slots = rng.sample(range(256), 8 * num)
    return [16 * s for s in slots] + [16 * slots[0]] * (32 - 8 * num)


def run_matrix() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    import cupy as cp
    import numpy as np

    mod = _kernels(matrix_source(), "probe_matrix.cu")
    rng = random.Random(11)
    lds, sts = [], []
    for num in (1, 2, 4):
        for trans in (False, True):
            rows = _rows(num, rng)
            out = cp.zeros((32, 4), dtype=cp.uint32)
            mod.get_function(f"probe_ldmatrix_x{num}{'_trans' if trans else ''}")(
                (1,), (32,), (cp.asarray(np.array(rows, np.int32)), out))
            lds.append({"num": num, "trans": trans, "rows": rows, "out": cp.asnumpy(out).tolist()})
        rows = _rows(num, rng)
        regs = [[pack(1 + 8 * lane + 2 * j, 2 + 8 * lane + 2 * j) for j in range(4)] for lane in range(32)]
        dump = cp.zeros(2048, dtype=cp.uint16)
        mod.get_function(f"probe_stmatrix_x{num}")(
            (1,), (32,), (cp.asarray(np.array(rows, np.int32)), cp.asarray(np.array(regs, np.uint32)), dump))
        sts.append({"num": num, "rows": rows, "regs": regs, "smem": cp.asnumpy(dump).tolist()})
    return lds, sts


def wgmma_inputs(n: int, kind: str, rng: random.Random) -> tuple[list, bytes, list, list]:
    """A registers, the B shared-memory image, and the A and B matrices behind them.

    B (16 x n, K-major) is stored without swizzle as core matrices of 8 n-rows x 16 bytes: the N step
    between core matrices is 128 bytes, the K step (k = 0..7 → 8..15) is 16 n bytes.
    """
    A = layouts.fragment(f"wgmma.m64n{n}k16", "A")
    if kind == "encoded":
        # D[m][n] = m + 64 n: k = 0 carries 64 n (first K core matrix), k = 8..13 the bits of m (second).
        amat = [[0.0] * 16 for _ in range(64)]
        bmat = [[0.0] * n for _ in range(16)]
        for m in range(64):
            amat[m][0] = 1.0
            for b in range(6):
                amat[m][8 + b] = float((m >> b) & 1)
        for col in range(n):
            bmat[0][col] = 64.0 * col
            for b in range(6):
                bmat[8 + b][col] = float(1 << b)
    else:
        amat = [[float(rng.randint(-2, 2)) for _ in range(16)] for _ in range(64)]
        bmat = [[float(rng.randint(-2, 2)) for _ in range(n)] for _ in range(16)]
    regs = []
    for t in range(128):
        vals = [bf16_bits(amat[r][c]) for r, c in (A.coords(t, i) for i in range(8))]
        regs.append([pack(vals[2 * j], vals[2 * j + 1]) for j in range(4)])
    img = bytearray(32 * n)
    for k in range(16):
        for col in range(n):
            off = layouts.interleaved_offset(col, k, lbo=16 * n, sbo=128)
            img[off:off + 2] = struct.pack("<H", bf16_bits(bmat[k][col]))
    return regs, bytes(img), amat, bmat


def run_wgmma() -> list[dict[str, Any]]:
    import cupy as cp
    import numpy as np

    mod = _kernels(wgmma_source(WGMMA_N), "probe_wgmma.cu")
    rng = random.Random(5)
    results: list[dict[str, Any]] = []
    works: dict[int, str] = {}
    jobs = [(n, "encoded") for n in WGMMA_N] + [(64, "random"), (256, "random")]
    for n, kind in jobs:
        regs, img, amat, bmat = wgmma_inputs(n, kind, rng)
        # Two readings of the descriptor's stride fields; the PTX ISA says LBO is the K step (K-major).
        variants = [("LBO=K step", 16 * n, 128), ("LBO=N step", 128, 16 * n)]
        if n in works:
            variants = [v for v in variants if v[0] == works[n]]
        for variant, lbo, sbo in variants:
            fields = ((lbo >> 4) << 16) | ((sbo >> 4) << 32)
            d = cp.full((128, n // 2), np.nan, dtype=cp.float32)
            fn = mod.get_function(f"probe_wgmma_n{n}")
            fn((1,), (128,), (cp.asarray(np.array(regs, np.uint32)), cp.asarray(np.frombuffer(img, np.uint8)),
                             np.int32(len(img) // 16), np.uint64(fields), d), shared_mem=len(img))
            dh = cp.asnumpy(d)
            expect = np.array(amat) @ np.array(bmat)
            dfrag = layouts.fragment(f"wgmma.m64n{n}k16", "D")
            got = np.full((64, n), np.nan)
            for t in range(128):
                for i in range(n // 2):
                    got[dfrag.coords(t, i)] = dh[t, i]
            ok = bool(np.array_equal(got, expect))
            results.append({"n": n, "kind": kind, "variant": variant, "lbo": lbo, "sbo": sbo,
                            "model_agrees": ok, "a": regs, "b_image": img.hex(),
                            "d": [[float(x) for x in row] for row in dh]})
            print(f"  wgmma n={n:3d} {kind:7s} {variant}: model {'agrees' if ok else 'DIFFERS'}", flush=True)
            if ok:
                works[n] = variant
                break
    return results


TMA_CASES = [  # swizzle, box_rows, box_cols, x0 (col), y0 (row)
    ("none", 8, 64, 0, 0), ("none", 16, 8, 8, 5), ("32B", 16, 16, 0, 0), ("64B", 16, 32, 0, 0),
    ("128B", 64, 64, 0, 0), ("128B", 16, 32, 32, 8), ("64B", 16, 16, 0, 0), ("32B", 8, 8, 0, 0),
    ("128B", 16, 64, 200, 7), ("128B", 8, 64, 64, 3),
]
TMA_SHAPE = (128, 256)  # rows, cols of the uint16 source tensor


def run_tma() -> list[dict[str, Any]]:
    import cupy as cp
    import numpy as np
    from cuda.bindings import driver as drv

    mod = _kernels(tma_source(), "probe_tma.cu")
    fn = mod.get_function("probe_tma")
    rows, cols = TMA_SHAPE
    src = (cp.arange(rows * cols, dtype=cp.uint32) + 1).astype(cp.uint16).reshape(rows, cols)
    (err,) = drv.cuInit(0)
    swz = {"none": "NONE", "32B": "32B", "64B": "64B", "128B": "128B"}
    out = []
    for mode, br, bc, x0, y0 in TMA_CASES:
        err, tmap = drv.cuTensorMapEncodeTiled(
            drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, int(src.data.ptr),
            [drv.cuuint64_t(cols), drv.cuuint64_t(rows)], [drv.cuuint64_t(cols * 2)],
            [drv.cuuint32_t(bc), drv.cuuint32_t(br)], [drv.cuuint32_t(1), drv.cuuint32_t(1)],
            drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            getattr(drv.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{swz[mode]}"),
            drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_NONE,
            drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
        if err != drv.CUresult.CUDA_SUCCESS:
            out.append({"swizzle": mode, "box_rows": br, "box_cols": bc, "x0": x0, "y0": y0, "error": err.name})
            continue
        tm = cp.asarray(np.array([int(q) for q in tmap.opaque], dtype=np.uint64))
        nbytes = br * bc * 2
        dump = max(2 * nbytes, 2048)
        o = cp.zeros(dump // 2, dtype=cp.uint16)
        status = cp.zeros(1, dtype=cp.int32)
        fn((1,), (128,), (tm, np.int32(x0), np.int32(y0), np.int32(nbytes), np.int32(dump), o, status),
           shared_mem=dump + 1024 + 16)
        cp.cuda.runtime.deviceSynchronize()
        out.append({"swizzle": mode, "box_rows": br, "box_cols": bc, "x0": x0, "y0": y0,
                    "global_rows": rows, "global_cols": cols, "value": "r * global_cols + c + 1 (0: out of bounds)",
                    "status": int(status.get()[0]), "smem": cp.asnumpy(o).tolist()})
        print(f"  tma {mode:5s} box {br}x{bc} at ({y0},{x0}): status {out[-1]['status']}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", nargs="*", default=list(FAMILIES), choices=FAMILIES)
    ap.add_argument("--out", default=str(common.ROOT / "bench/results/layouts_h200.json"))
    ap.add_argument("--commit", default=None)
    ap.add_argument("--isolate", action="store_true", help="run each family in its own process (a crash "
                    "in one, e.g. an illegal instruction, then spares the others)")
    args = ap.parse_args()
    path = Path(args.out)
    table = json.loads(path.read_text()) if path.exists() else {}
    if args.isolate:
        for fam in args.family:
            cmd = [sys.executable, __file__, "--family", fam, "--out", args.out]
            if args.commit:
                cmd += ["--commit", args.commit]
            r = subprocess.run(cmd, timeout=120)
            print(f"family {fam}: exit {r.returncode}", flush=True)
        return
    table["what"] = "raw inputs/outputs of fragment probes (bench/probes/layouts_probe.py)"
    table["machine"] = common.machine(args.commit)
    for fam in args.family:
        print(f"{fam} ...", flush=True)
        if fam == "mma":
            table["mma"] = run_mma()
        elif fam in ("ldmatrix", "stmatrix"):
            table["ldmatrix"], table["stmatrix"] = run_matrix()
        elif fam == "wgmma":
            table["wgmma"] = run_wgmma()
        elif fam == "tma":
            table["tma"] = run_tma()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(table, separators=(",", ":")) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
