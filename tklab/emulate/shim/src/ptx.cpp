// The PTX instructions the course uses, on the CPU, with the hardware's fragment layouts.
//
// Layouts (lane = 4g + t; e = which 16-bit half of a register, low first) -- the same models as
// tklab/layouts.py, which are checked against what an H200 did (bench/results/layouts_h200.json):
//   mma.m16n8k16  A reg r: (row g + 8(r&1), k 2t + e + 8(r>>1))   B reg r: (k 2t + e + 8r, col g)
//                 C/D f32 reg i: (row g + 8(i/2), col 2t + i%2)
//   ldmatrix      reg m of lane 4g+t: row g of matrix m, elements 2t, 2t+1 (.trans: column g, rows 2t, 2t+1);
//                 the row addresses come from lanes 8m .. 8m+7
//   wgmma D       thread 32w + lane, reg i: (row 16w + g + 8((i%4)/2), col 8(i/4) + 2t + i%2)
// Asynchronous units act as late as the PTX ISA allows (docs/ARCHITECTURE.md, "The emulator's model of
// time"): cp.async data lands at the issuing thread's wait_group; a TMA load's box is poisoned and in
// flight from its issue until it lands (Launch::tma_order says when); a wgmma group's accumulators read as
// NaN and its operands stay "being read" until the wgmma.wait_group that retires it; a TMA store reads its
// source until the issuer's bulk wait. Touching any of these early is an "async" hazard.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "internal.h"

namespace tkemu {

static float elem16(int type, uint16_t h) { return type == ptx::BF16 ? bf16_to_f32(h) : f16_to_f32(h); }
static uint16_t half_of(uint64_t reg, int e) { return uint16_t(reg >> (16 * e)); }
static float f32_of(uint64_t reg) { return bits_f32(uint32_t(reg)); }
static uint64_t f32_bits64(float f) { return f32_bits(f); }

// ---- mma.sync ---------------------------------------------------------------------------------------------------
namespace {
struct MmaData {
    const uint64_t *a, *b, *c;
    uint64_t* const* d;
};
}  // namespace

void ptx::mma(int m, int n, int k, int dtype, int atype, int btype, int ctype, uint64_t* const* d, const uint64_t* a,
              const uint64_t* b, const uint64_t* c, bool a_row, bool b_col) {
    TKEMU_ENTER();
    if (m != 16 || n != 8 || (k != 16 && k != 8))
        not_emulated("mma.sync", "only the shapes m16n8k16 and m16n8k8 are emulated");
    if (!a_row || !b_col) not_emulated("mma.sync", "this shape takes .row.col operands");
    if ((atype != BF16 && atype != F16) || btype != atype)
        not_emulated("mma.sync", "only bf16 and f16 inputs (the same for A and B) are emulated");
    if ((dtype != F32 && dtype != F16) || (ctype != F32 && ctype != F16))
        not_emulated("mma.sync", "only f32 and f16 accumulators are emulated");
    MmaData data{a, b, c, d};
    Block* blk = t_block;
    if (g_trace_on && blk->cur->id % 32 == 0) trace_op(*blk, blk->cur->id, "mma", blk->cur->pc, 1);
    if (((blk->cur->id / 32) + 1) * 32 > blk->n)
        fail("invalid", "mma.sync needs a whole warp of 32 threads; this block has %d threads", blk->n);
    collective(32, 10, "mma.sync", 0xffffffffu, &data, [=](Block&, Rendezvous& rv) {
        double A[16][16] = {}, B[16][8] = {}, C[16][8] = {};
        for (int lane = 0; lane < 32; ++lane) {
            const auto* x = static_cast<MmaData*>(rv.data[lane]);
            const int g = lane / 4, t = lane % 4;
            for (int r = 0; r < k / 4; ++r)
                for (int e = 0; e < 2; ++e) {
                    const int row = k == 16 ? g + 8 * (r & 1) : g + 8 * r;
                    const int col = k == 16 ? 2 * t + e + 8 * (r >> 1) : 2 * t + e;
                    A[row][col] = elem16(atype, half_of(x->a[r], e));
                }
            for (int r = 0; r < k / 8; ++r)
                for (int e = 0; e < 2; ++e) B[2 * t + e + 8 * r][g] = elem16(btype, half_of(x->b[r], e));
            if (ctype == F32) {
                for (int i = 0; i < 4; ++i) C[g + 8 * (i / 2)][2 * t + i % 2] = f32_of(x->c[i]);
            } else {
                for (int r = 0; r < 2; ++r)
                    for (int e = 0; e < 2; ++e) C[g + 8 * r][2 * t + e] = f16_to_f32(half_of(x->c[r], e));
            }
        }
        float D[16][8];
        for (int i = 0; i < 16; ++i)
            for (int j = 0; j < 8; ++j) {
                double s = C[i][j];
                for (int kk = 0; kk < k; ++kk) s += A[i][kk] * B[kk][j];
                D[i][j] = float(s);
            }
        for (int lane = 0; lane < 32; ++lane) {
            const auto* x = static_cast<MmaData*>(rv.data[lane]);
            const int g = lane / 4, t = lane % 4;
            if (dtype == F32) {
                for (int i = 0; i < 4; ++i) *x->d[i] = f32_bits64(D[g + 8 * (i / 2)][2 * t + i % 2]);
            } else {
                for (int r = 0; r < 2; ++r)
                    *x->d[r] = uint64_t(f32_to_f16(D[g + 8 * r][2 * t])) |
                               (uint64_t(f32_to_f16(D[g + 8 * r][2 * t + 1])) << 16);
            }
        }
    });
}

// ---- ldmatrix / stmatrix / movmatrix ----------------------------------------------------------------------------
namespace {
struct MatData {
    uint64_t addr;
    uint64_t* const* d;
    const uint64_t* s;
};
}  // namespace

/// The rows of one ldmatrix or stmatrix (8 a matrix, each the 16 bytes at one lane's address): each address checked,
/// the rows traced, and each row's bytes marked in the race check's shadow as read (`write` false) or written by
/// the lane that named it.
static void matrix_rows(Block& b, Rendezvous& rv, int num, bool write, const char* what) {
    const int first = (b.cur->id / 32) * 32;
    for (int l = 0; l < 8 * num; ++l) {
        const uint64_t a = static_cast<MatData*>(rv.data[l])->addr;
        if (a % 16) fail("invalid", "%s: lane %d's row address 0x%llx is not 16-byte aligned", what, l, (unsigned long long)a);
        if (a >= ARENA_BYTES) fail("out_of_bounds", "%s: lane %d's row address 0x%llx is not a shared-memory address",
                                   what, l, (unsigned long long)a);
        smem_at(b, uint32_t(a), 16, what);
    }
    if (g_trace_on) {
        uint64_t rows[32];
        for (int l = 0; l < 8 * num; ++l) rows[l] = static_cast<MatData*>(rv.data[l])->addr;
        trace_matrix(b, first, num, rows, write, b.threads[first].pc);
    }
    for (int l = 0; l < 8 * num; ++l) {
        const int t = first + l;
        shadow_access(b, t, clock_of(b, t), uint32_t(static_cast<MatData*>(rv.data[l])->addr), 16, write,
                      b.threads[t].pc, what);
    }
}

/// ldmatrix (`store` false: shared memory -> each lane's registers) and stmatrix (true: the other way): lane l
/// holds elements (g, 2t) and (g, 2t + 1) of each 8 x 8 matrix (g = l / 4, t = l % 4), with .trans (2t, g) and
/// (2t + 1, g); the rows are at the addresses lanes 8m .. 8m + 7 name.
static void matrix_move(int num, bool trans, bool store, MatData data) {
    const char* op = store ? "stmatrix" : "ldmatrix";
    if (num != 1 && num != 2 && num != 4) not_emulated(op, "only .x1, .x2 and .x4");
    const char* what = trans ? (store ? "stmatrix.trans" : "ldmatrix.trans") : op;
    collective(32, store ? 12 : 11, what, 0xffffffffu, &data, [=](Block& b, Rendezvous& rv) {
        matrix_rows(b, rv, num, store, what);
        for (int lane = 0; lane < 32; ++lane) {
            const auto* x = static_cast<MatData*>(rv.data[lane]);
            const int g = lane / 4, t = lane % 4;
            for (int m = 0; m < num; ++m) {
                uint32_t r = 0;
                for (int e = 0; e < 2; ++e) {
                    const int row = trans ? 2 * t + e : g, col = trans ? g : 2 * t + e;
                    auto* at = b.arena + uint32_t(static_cast<MatData*>(rv.data[8 * m + row])->addr) + 2 * col;
                    uint16_t v = store ? half_of(x->s[m], e) : 0;
                    if (store) std::memcpy(at, &v, 2);
                    else std::memcpy(&v, at, 2);
                    r |= uint32_t(v) << (16 * e);
                }
                if (!store) *x->d[m] = r;
            }
        }
    });
}

void ptx::ldmatrix(int num, bool trans, uint64_t* const* d, uint64_t addr) {
    TKEMU_ENTER();
    matrix_move(num, trans, false, MatData{addr, d, nullptr});
}

void ptx::stmatrix(int num, bool trans, uint64_t addr, const uint64_t* s) {
    TKEMU_ENTER();
    matrix_move(num, trans, true, MatData{addr, nullptr, s});
}

void ptx::movmatrix(uint64_t* d, uint64_t s) {
    TKEMU_ENTER();
    struct Mv { uint64_t in; uint64_t* out; } mv{s, d};
    collective(32, 13, "movmatrix.trans", 0xffffffffu, &mv, [](Block&, Rendezvous& rv) {
        uint64_t in[32];
        for (int l = 0; l < 32; ++l) in[l] = static_cast<Mv*>(rv.data[l])->in;
        for (int l = 0; l < 32; ++l) {
            const int g = l / 4, t = l % 4;
            uint32_t r = 0;
            for (int e = 0; e < 2; ++e) {
                const int src = 4 * (2 * t + e) + g / 2;  // holds row 2t+e, columns 2(g/2), 2(g/2)+1
                r |= uint32_t(half_of(in[src], g % 2)) << (16 * e);
            }
            *static_cast<Mv*>(rv.data[l])->out = r;
        }
    });
}

// ---- cp.async ---------------------------------------------------------------------------------------------------
void complete_copy(Block& b, int t, uint32_t clk, uintptr_t pc, const Copy& c) {
    char* dst = smem_at(b, c.dst, c.bytes, "cp.async");
    shadow_access(b, t, clk, c.dst, c.bytes, true, pc, "the data of a cp.async");
    std::memcpy(dst, reinterpret_cast<const void*>(c.src), c.src_bytes);
    if (c.src_bytes < c.bytes) std::memset(dst + c.src_bytes, 0, c.bytes - c.src_bytes);
}

void ptx::cp_async(uint64_t dst, uint64_t src, int cp_size, int src_size) {
    TKEMU_ENTER();
    Block& b = *t_block;
    if (cp_size != 4 && cp_size != 8 && cp_size != 16) fail("invalid", "cp.async copies 4, 8 or 16 bytes, not %d", cp_size);
    if (src_size < 0 || src_size > cp_size) src_size = cp_size;
    if (dst % cp_size) fail("invalid", "cp.async: shared address 0x%llx is not %d-byte aligned", (unsigned long long)dst, cp_size);
    if (src % cp_size) fail("invalid", "cp.async: global address %p is not %d-byte aligned", (void*)src, cp_size);
    if (dst >= ARENA_BYTES) fail("out_of_bounds", "cp.async: 0x%llx is not a shared-memory address", (unsigned long long)dst);
    smem_at(b, uint32_t(dst), cp_size, "cp.async destination");
    if (src_size) global_check(uintptr_t(src), size_t(src_size), false, b.cur->pc, "the source of a cp.async");
    std::memset(b.arena + dst, 0xff, size_t(cp_size));  // garbage (NaN) until it lands at the issuer's wait_group
    b.cur->cp_open.push_back({uint32_t(dst), uintptr_t(src), uint32_t(cp_size), uint32_t(src_size)});
}

void ptx::cp_async_commit() {
    Thread& t = *t_block->cur;
    t.cp_groups.push_back(std::move(t.cp_open));
    t.cp_open.clear();
}

void ptx::cp_async_wait(int n) {
    TKEMU_ENTER();
    Block& b = *t_block;
    Thread& t = *b.cur;
    while (int(t.cp_groups.size()) > n) {
        for (const Copy& c : t.cp_groups.front()) complete_copy(b, t.id, clock_of(b, t.id), t.pc, c);
        t.cp_groups.pop_front();
    }
}

// ---- mbarrier -----------------------------------------------------------------------------------------------------
static MBar& mbar_get(Block& b, uint64_t addr, const char* what) {
    if (addr % 8) fail("invalid", "%s: mbarrier address 0x%llx is not 8-byte aligned", what, (unsigned long long)addr);
    if (addr >= ARENA_BYTES) fail("out_of_bounds", "%s: 0x%llx is not a shared-memory address", what, (unsigned long long)addr);
    smem_at(b, uint32_t(addr), 8, what);
    auto it = b.mbars.find(uint32_t(addr));
    if (it == b.mbars.end() || !it->second.valid)
        fail("invalid", "%s on %s, which is not an initialised mbarrier (mbarrier.init first, then __syncthreads())",
             what, smem_desc(b, uint32_t(addr)).c_str());
    if (b.race && b.cur) shadow_access(b, b.cur->id, clock_of(b, b.cur->id), uint32_t(addr), 8, false, b.cur->pc, what);
    return it->second;
}

static void tma_land(Block& b, uint32_t i);

static bool in_flight(const Block& b, const MBar& m) {
    for (uint32_t i : m.queued)
        if (!b.landed[i]) return true;
    return false;
}

static const char* const MBAR_WAIT = "an mbarrier wait";  // a polling thread's wait_what

/// Phase `m.phase` has just completed: every thread polling on this barrier whose wait it satisfies may see
/// it now, whatever later arrivals do before that thread looks again (they may complete the next phase too and
/// flip the parity back: more arrivals than the barrier counts). Its next poll returns true with this phase's
/// clocks -- the earliest answer the hardware can give, and the one that orders least.
static void latch_waiters(Block& b, uint32_t addr, const MBar& m) {
    for (Thread& t : b.threads) {
        if (t.state != POLLING || t.wait_what != MBAR_WAIT || t.wait_addr != addr || t.latched) continue;
        const bool done = t.wait_parity ? (m.phase & 1u) != (t.wait_detail & 1u) : uint32_t(t.wait_detail) != m.phase;
        if (!done) continue;
        t.latched = true;
        t.latched_bar = addr;
        t.latched_token = t.wait_detail;
        t.latched_phase = m.phase;
        t.latched_vc = m.vc_done;
    }
}

static void mbar_progress(Block& b, uint32_t addr, MBar& m) {
    if (b.launch->tma_order == ORDER_IN_ORDER && m.pending == 0)  // loads land as soon as their phase is armed
        for (size_t k = 0; k < m.queued.size(); ++k)
            if (!b.landed[m.queued[k]]) tma_land(b, m.queued[k]);
    if (m.pending == 0 && m.tx == 0) {
        m.phase++;
        if (g_trace_on) trace_mbar_phase(b, addr, m.phase);
        m.pending = m.expected;
        m.vc_done = m.vc_phase;
        m.vc_phase.clear();
        std::erase_if(m.queued, [&](uint32_t i) { return b.landed[i] != 0; });
        latch_waiters(b, addr, m);
        b.epoch++;
    } else if (m.pending == 0 && m.tx < 0) {
        fail("invalid", "mbarrier %s received %lld more transaction bytes than were announced with expect_tx",
             smem_desc(b, addr).c_str(), (long long)-m.tx);
    }
}

/// Land the loads a barrier still waits for, now (its waiter needs them: the last possible moment). Under
/// ORDER_REVERSED every load issued after the oldest of them lands too, newest first.
static bool force_land(Block& b, MBar& m) {
    uint32_t first = UINT32_MAX;
    for (uint32_t i : m.queued)
        if (!b.landed[i]) first = std::min(first, i);
    if (first == UINT32_MAX) return false;
    std::vector<uint32_t> bars;
    if (b.launch->tma_order == ORDER_REVERSED) {
        for (size_t i = b.inflight.size(); i-- > first;)
            if (!b.landed[i]) { tma_land(b, uint32_t(i)); bars.push_back(b.inflight[i].bar); }
    } else {
        for (size_t k = 0; k < m.queued.size(); ++k)
            if (!b.landed[m.queued[k]]) { bars.push_back(b.inflight[m.queued[k]].bar); tma_land(b, m.queued[k]); }
    }
    for (uint32_t a : bars) {
        auto it = b.mbars.find(a);
        if (it != b.mbars.end()) mbar_progress(b, a, it->second);
    }
    b.epoch++;
    return true;
}

bool land_all(Block& b) {
    std::vector<uint32_t> bars;
    const size_t n = b.inflight.size();
    try {
        for (size_t k = 0; k < n; ++k) {
            const size_t i = b.launch->tma_order == ORDER_REVERSED ? n - 1 - k : k;
            if (!b.landed[i]) { tma_land(b, uint32_t(i)); bars.push_back(b.inflight[i].bar); }
        }
        for (uint32_t a : bars) {
            auto it = b.mbars.find(a);
            if (it != b.mbars.end()) mbar_progress(b, a, it->second);
        }
    } catch (const std::runtime_error&) {  // reported already (fail outside a fiber throws)
        b.aborted = true;
        return false;
    }
    if (!bars.empty()) b.epoch++;
    return !bars.empty();
}

void mbar_complete_tx(Block& b, uint32_t bar, uint32_t bytes) {
    auto it = b.mbars.find(bar);
    if (it == b.mbars.end()) return;
    it->second.tx -= bytes;
}

void ptx::mbar_init(uint64_t addr, uint32_t count) {
    TKEMU_ENTER();
    Block& b = *t_block;
    if (addr % 8 || addr >= ARENA_BYTES) fail("invalid", "mbarrier.init: bad shared address 0x%llx", (unsigned long long)addr);
    char* p = smem_at(b, uint32_t(addr), 8, "mbarrier.init");
    if (count == 0 || count >= (1u << 20)) fail("invalid", "mbarrier.init with count %u (1 .. 2^20-1)", count);
    shadow_access(b, b.cur->id, clock_of(b, b.cur->id), uint32_t(addr), 8, true, b.cur->pc, "mbarrier.init");
    MBar m;
    m.valid = true;
    m.expected = m.pending = count;
    m.init_thread = b.cur->id;
    m.init_pc = g_interp ? b.cur->pc : pc_chain(b.cur->pc);
    b.mbars[uint32_t(addr)] = m;
    const uint64_t marker = 0x4d42415200000000ull | count;  // what a plain read of the barrier would see
    std::memcpy(p, &marker, 8);
}

/// An arrive hands back what the barrier protects: none of it may still be read by a wgmma group of the
/// arriving thread's warpgroup (the group reads until the wgmma.wait_group that retires it).
static void release_check(Block& b, uint32_t bar) {
    auto pit = b.protects.find(bar);
    if (pit == b.protects.end() || size_t(b.cur->id / 128) >= b.wgs.size()) return;
    const WgState& ws = b.wgs[b.cur->id / 128];
    const uint8_t mine = uint8_t(1u << ((b.cur->id % 128) / 32));
    auto check = [&](const WgGroup& g) {
        if (g.retired & mine) return;  // this warp waited for it (other warps' parts: their own arrives)
        for (const auto& s : g.spans)
            for (const auto& p : pit->second)
                if (s.first <= p.second && p.first <= s.second) {
                    const uint32_t at = std::max(s.first, p.first);
                    std::string filler;  // which load fills these bytes: names the stage (K or V, A or B)
                    for (size_t i = b.inflight.size(); i-- > 0 && filler.empty();) {
                        const TmaOp& o = b.inflight[i];
                        if (at >= o.smem && at < o.smem + o.extent) filler = ", which the TMA load" + pc_mark(o.pc) + " fills";
                    }
                    const Thread& me = *b.cur;
                    std::string waited;  // which wait left this group running (the chapter's wait<1> then release)
                    if (me.last_wgmma_wait > 0)
                        waited = " (its warp's last wgmma.wait_group " + std::to_string(me.last_wgmma_wait) +
                                 pc_mark(me.last_wgmma_wait_pc) + " leaves the " +
                                 std::to_string(me.last_wgmma_wait) + " most recent group" +
                                 (me.last_wgmma_wait == 1 ? "" : "s") + " running, and this is one of them)";
                    else if (me.last_wgmma_wait < 0)
                        waited = " (its warp has not waited for any wgmma group yet)";
                    const std::string msg =
                        "asynchronous hazard in " + block_desc(b) + ": " + thread_desc(b, b.cur->id) +
                        " hands back " + smem_desc(b, at) + filler + " (mbarrier arrive on " + smem_desc(b, bar) + ")" +
                        pc_mark(b.cur->pc) + " while the wgmma group that its warpgroup issued" + pc_mark(g.pc) +
                        " may still read it" + waited + ": a wgmma group reads its shared operands until the "
                        "wgmma.wait_group that retires it, so wait for the group (warpgroup::mma_async_wait) before "
                        "releasing its stage; the producer may refill the stage as soon as the arrive lands";
                    fail_json(error_json("async", msg));
                }
    };
    for (const WgGroup& g : ws.committed) check(g);
    check(ws.open);
}

uint64_t ptx::mbar_arrive(uint64_t addr, uint32_t count, uint32_t tx, bool expect_tx) {
    TKEMU_ENTER();
    Block& b = *t_block;
    MBar& m = mbar_get(b, addr, "mbarrier.arrive");
    release_check(b, uint32_t(addr));
    if (count > m.pending) force_land(b, m);  // the phase is armed: it completes once its loads land
    if (count > m.pending)
        fail("invalid", "mbarrier.arrive on %s: %u more arrival(s) than the %u this phase expects",
             smem_desc(b, uint32_t(addr)).c_str(), count - m.pending, m.expected);
    vc_join_into(b, m.vc_phase, b.cur->id);
    vc_tick(b, b.cur->id);
    if (expect_tx) m.tx += tx;
    m.pending -= count;
    if (g_trace_on) trace_mbar_arrive(b, uint32_t(addr));
    const uint64_t state = m.phase;
    mbar_progress(b, uint32_t(addr), m);
    b.epoch++;
    return state;
}

void ptx::mbar_expect_tx(uint64_t addr, uint32_t tx) {
    TKEMU_ENTER();
    Block& b = *t_block;
    MBar& m = mbar_get(b, addr, "mbarrier.expect_tx");
    m.tx += tx;
}

bool ptx::mbar_wait(uint64_t addr, uint64_t token, bool parity, bool try_wait) {
    TKEMU_ENTER();
    Block& b = *t_block;
    MBar& m = mbar_get(b, addr, try_wait ? "mbarrier.try_wait" : "mbarrier.test_wait");
    Thread& me = *b.cur;
    if (me.latched) {  // a phase this wait accepts completed while it polled (latch_waiters)
        me.latched = false;
        if (me.latched_bar == uint32_t(addr) && me.latched_token == token) {
            if (m.phase > me.latched_phase && b.phase_note.empty())
                b.phase_note = "mbarrier " + smem_desc(b, uint32_t(addr)) + " completed " +
                               std::to_string(m.phase - me.latched_phase) + " more phase(s) after the one that let " +
                               thread_desc(b, me.id) + " go" + pc_mark(me.pc) + ", before it looked again: it gets " +
                               "more arrivals than the " + std::to_string(m.expected) + " it counts per phase (does " +
                               "every thread arrive where one per warp should?), so a waiter can go after the first " +
                               "few arrivals, or miss its phase and hang";
            if (g_trace_on) trace_mbar_wait(b, uint32_t(addr), token);
            vc_acquire(b, me.id, me.latched_vc);
            me.waited_bar = uint32_t(addr);
            return true;
        }
    }
    auto complete = [&] { return parity ? (m.phase & 1u) != (token & 1u) : uint32_t(token) != m.phase; };
    bool done = complete();
    if (!done && m.pending == 0 && force_land(b, m)) done = complete();
    if (done) {
        if (g_trace_on) trace_mbar_wait(b, uint32_t(addr), token);
        vc_acquire(b, b.cur->id, m.vc_done);
        b.cur->waited_bar = uint32_t(addr);
        return true;
    }
    Thread& t = *b.cur;
    if (t.last_fail_epoch == b.epoch) t.idle_polls++;
    else { t.idle_polls = 0; t.last_fail_epoch = b.epoch; }
    t.wait_parity = parity;
    block_current(POLLING, MBAR_WAIT, addr, token);  // the others run; then "not yet" is the answer
    return false;
}

void ptx::mbar_inval(uint64_t addr) {
    TKEMU_ENTER();
    Block& b = *t_block;
    mbar_get(b, addr, "mbarrier.inval").valid = false;
}

// ---- TMA -------------------------------------------------------------------------------------------------------------
namespace {
struct EmuMap {  // the 128-byte layout tklab.emulate.tensormap writes
    char magic[8];
    uint64_t addr;
    uint64_t dims[5];
    uint64_t strides[4];
    uint32_t box[5];
    uint8_t rank, esize, swizzle16, dtype;
    int32_t slot;
    uint8_t pad[12];
};
static_assert(sizeof(EmuMap) == 128, "tensor map layout");
}  // namespace

static EmuMap read_map(const unsigned char* raw, int dims, const char* what) {
    EmuMap m;
    std::memcpy(&m, raw, sizeof m);
    if (std::memcmp(m.magic, "TKEMUTMA", 8) != 0)
        fail("invalid", "%s: the tensor map was not made by tklab.emulate.tensor_map (a GPU driver's CUtensorMap "
             "cannot be read on the CPU)", what);
    if (m.rank != dims)
        fail("invalid", "%s: a %d-D copy with a %d-D tensor map", what, dims, int(m.rank));
    return m;
}

static uint32_t swizzled(uint32_t a, int span) {
    if (!span) return a;
    const uint32_t mask = uint32_t(span / 16 - 1);
    return a ^ (((a >> 7) & mask) << 4);
}

static void reduce_add(int dtype, unsigned char* dst, const unsigned char* src) {
    switch (dtype) {
        case 7: { float a, c; std::memcpy(&a, dst, 4); std::memcpy(&c, src, 4); a += c; std::memcpy(dst, &a, 4); break; }
        case 9: { uint16_t a, c; std::memcpy(&a, dst, 2); std::memcpy(&c, src, 2);
                  a = f32_to_bf16(bf16_to_f32(a) + bf16_to_f32(c)); std::memcpy(dst, &a, 2); break; }
        case 6: { uint16_t a, c; std::memcpy(&a, dst, 2); std::memcpy(&c, src, 2);
                  a = f32_to_f16(f16_to_f32(a) + f16_to_f32(c)); std::memcpy(dst, &a, 2); break; }
        case 2: case 3: { uint32_t a, c; std::memcpy(&a, dst, 4); std::memcpy(&c, src, 4); a += c; std::memcpy(dst, &a, 4); break; }
        case 8: { double a, c; std::memcpy(&a, dst, 8); std::memcpy(&c, src, 8); a += c; std::memcpy(dst, &a, 8); break; }
        default: not_emulated("cp.reduce.async.bulk.tensor .add", "this element type");
    }
}

/// Call f(shared address, global address, inside the tensor) for every element of op's box.
template <typename F>
static void tma_for_each(const TmaOp& op, const EmuMap& m, F f) {
    const int span = m.swizzle16 * 16;
    const uint32_t box[5] = {m.box[0], op.dims > 1 ? m.box[1] : 1, op.dims > 2 ? m.box[2] : 1,
                             op.dims > 3 ? m.box[3] : 1, op.dims > 4 ? m.box[4] : 1};
    const uint32_t row_bytes = box[0] * m.esize;
    const uint32_t pitch = span ? uint32_t(span) : row_bytes;
    const uint64_t rows = uint64_t(box[1]) * box[2] * box[3] * box[4];
    for (uint64_t r = 0; r < rows; ++r) {
        uint64_t rest = r;
        int64_t coord[5];
        coord[0] = op.coords[0];
        bool row_in = true;
        uint64_t goff = 0;
        for (int d = 1; d < 5; ++d) {
            const uint64_t i = rest % box[d];
            rest /= box[d];
            coord[d] = (d < op.dims ? op.coords[d] : 0) + int64_t(i);
            if (d < op.dims) {
                if (coord[d] < 0 || uint64_t(coord[d]) >= m.dims[d]) row_in = false;
                else goff += uint64_t(coord[d]) * m.strides[d - 1];
            }
        }
        for (uint32_t c = 0; c < box[0]; ++c) {
            const int64_t x = coord[0] + c;
            const bool in = row_in && x >= 0 && uint64_t(x) < m.dims[0];
            f(swizzled(op.smem + uint32_t(r) * pitch + c * m.esize, span),
              uintptr_t(m.addr + goff + uint64_t(x) * m.esize), in);
        }
    }
}

static uint32_t box_bytes(const TmaOp& op, const EmuMap& m) {
    uint64_t n = m.box[0];
    for (int d = 1; d < op.dims; ++d) n *= m.box[d];
    return uint32_t(n * m.esize);
}

/// In-flight load i lands: its bytes (zeros outside the tensor) replace the poison, and its barrier
/// counts them.
static void tma_land(Block& b, uint32_t i) {
    const TmaOp op = b.inflight[i];
    b.landed[i] = 1;
    EmuMap m;
    std::memcpy(&m, op.map, sizeof m);
    static const unsigned char zero[16] = {};
    tma_for_each(op, m, [&](uint32_t s, uintptr_t g, bool in) {
        if (in) global_check(g, m.esize, false, op.pc, "a TMA load reading its tensor");
        std::memcpy(b.arena + s, in ? reinterpret_cast<const void*>(g) : zero, m.esize);
        if (b.race)
            for (uint32_t k = 0; k < m.esize; ++k) {
                Shadow& sh = b.shadow[s + k];
                sh.flags = 0;
                sh.wtid = uint16_t(op.issuer); sh.wclk = op.issuer_clock; sh.wpc = op.pc;
                sh.rtid = NONE;
            }
    });
    mbar_complete_tx(b, op.bar, box_bytes(op, m));
}

/// A TMA store (or reduction) reads its source and writes the tensor; the source's bytes are free again.
void tma_execute(Block& b, const TmaOp& op) {
    EmuMap m;
    std::memcpy(&m, op.map, sizeof m);
    const int t = b.cur ? b.cur->id : op.issuer;
    const uint32_t clk = clock_of(b, t);
    tma_for_each(op, m, [&](uint32_t s, uintptr_t g, bool in) {
        unsigned char* sp = reinterpret_cast<unsigned char*>(b.arena + s);
        if (b.race) {
            for (uint32_t k = 0; k < m.esize; ++k)
                if (b.shadow[s + k].areads) b.shadow[s + k].areads--;
            shadow_access(b, t, clk, s, m.esize, false, op.pc, "a TMA store reading its tile");
        }
        if (!in) return;  // stores clip at the tensor's edge
        global_check(g, m.esize, true, op.pc, "a TMA store writing its tensor");
        if (op.reduce) reduce_add(m.dtype, reinterpret_cast<unsigned char*>(g), sp);
        else std::memcpy(reinterpret_cast<void*>(g), sp, m.esize);
    });
}

static TmaOp make_tma(bool load, int dims, uint64_t smem, uint64_t map, const int32_t* coords, const char* what,
                      EmuMap& m) {
    Block& b = *t_block;
    if (dims < 1 || dims > 5) not_emulated(what, "tensor copies have 1 to 5 dimensions");
    TmaOp op{};
    op.load = load;
    op.dims = dims;
    op.smem = uint32_t(smem);
    std::memcpy(op.map, reinterpret_cast<const void*>(map), 128);
    m = read_map(op.map, dims, what);
    if (smem >= ARENA_BYTES) fail("out_of_bounds", "%s: 0x%llx is not a shared-memory address", what, (unsigned long long)smem);
    if (smem % 128) fail("invalid", "%s: shared address 0x%llx is not 128-byte aligned (TMA needs it)", what, (unsigned long long)smem);
    const int span = m.swizzle16 * 16;
    if (span && m.box[0] * m.esize > uint32_t(span))
        fail("invalid", "%s: a box row of %u bytes is wider than the %d-byte swizzle", what, m.box[0] * m.esize, span);
    const uint64_t rows = box_bytes(op, m) / (m.box[0] * m.esize);
    const uint32_t pitch = span ? uint32_t(span) : m.box[0] * m.esize;
    op.extent = uint32_t((rows - 1) * pitch + m.box[0] * m.esize);
    smem_at(b, op.smem, op.extent, what);
    for (int d = 0; d < dims; ++d) op.coords[d] = coords[d];
    op.issuer = b.cur->id;
    op.issuer_clock = clock_of(b, b.cur->id);
    op.pc = b.cur->pc;
    return op;
}

void ptx::tma_load(int dims, uint64_t dst, uint64_t map, const int32_t* coords, uint64_t bar) {
    TKEMU_ENTER();
    Block& b = *t_block;
    EmuMap em;
    TmaOp op = make_tma(true, dims, dst, map, coords, "cp.async.bulk.tensor (load)", em);
    op.bar = uint32_t(bar);
    MBar& m = mbar_get(b, bar, "cp.async.bulk.tensor's mbarrier");
    vc_join_into(b, m.vc_phase, b.cur->id);  // who waits on this phase sees the copy's data
    // From its issue on, the box belongs to the copy: it may be written at any moment until the phase
    // completes. Until it lands it holds garbage (0xff: NaN in every float type) and is marked in flight.
    tma_for_each(op, em, [&](uint32_t s, uintptr_t, bool) {
        shadow_access(b, op.issuer, op.issuer_clock, s, em.esize, true, op.pc, "a TMA load's destination", true);
        std::memset(b.arena + s, 0xff, em.esize);
        if (b.race)
            for (uint32_t k = 0; k < em.esize; ++k) b.shadow[s + k].flags |= SH_PENDING;
    });
    if (b.cur->waited_bar != UINT32_MAX && b.cur->waited_bar != uint32_t(bar)) {
        auto& spans = b.protects[b.cur->waited_bar];
        const std::pair<uint32_t, uint32_t> span{op.smem, op.smem + op.extent - 1};
        if (std::find(spans.begin(), spans.end(), span) == spans.end()) spans.push_back(span);
    }
    const uint32_t idx = uint32_t(b.inflight.size());
    b.inflight.push_back(op);
    b.landed.push_back(0);
    m.queued.push_back(idx);
    if (g_trace_on) trace_tma_issue(b, uint32_t(bar), op.smem);
    mbar_progress(b, uint32_t(bar), m);
    b.epoch++;
}

void ptx::tma_store(int dims, uint64_t map, const int32_t* coords, uint64_t src, int reduce) {
    TKEMU_ENTER();
    Block& b = *t_block;
    EmuMap em;
    TmaOp op = make_tma(false, dims, src, map, coords, "cp.async.bulk.tensor (store)", em);
    op.reduce = reduce;
    // The source is read at any moment until cp.async.bulk.wait_group.read: a write to it before then is a hazard.
    tma_for_each(op, em, [&](uint32_t s, uintptr_t, bool) {
        shadow_access(b, op.issuer, op.issuer_clock, s, em.esize, false, op.pc, "a TMA store (cp.async.bulk.tensor)",
                      true);
        if (b.race)
            for (uint32_t k = 0; k < em.esize; ++k)
                if (b.shadow[s + k].areads < 255) b.shadow[s + k].areads++;
    });
    b.cur->bulk_open.push_back(op);
}

void ptx::bulk_commit() {
    Thread& t = *t_block->cur;
    t.bulk_groups.push_back(std::move(t.bulk_open));
    t.bulk_open.clear();
}

void ptx::bulk_wait(int n, bool) {
    TKEMU_ENTER();
    Block& b = *t_block;
    Thread& t = *b.cur;
    while (int(t.bulk_groups.size()) > n) {
        for (const TmaOp& op : t.bulk_groups.front()) tma_execute(b, op);
        t.bulk_groups.pop_front();
    }
}

void flush_thread(Block& b, Thread& t) {
    // A TMA store reads its source until cp.async.bulk.wait_group.read returns in the thread that issued it; bulk
    // groups belong to that thread, so once it exits nobody can wait for them, and the block's shared memory may
    // be handed to the next block while the copy engine still reads it.
    const TmaOp* pending = !t.bulk_open.empty() ? &t.bulk_open.front()
                           : !t.bulk_groups.empty() && !t.bulk_groups.front().empty() ? &t.bulk_groups.front().front()
                                                                                       : nullptr;
    if (pending)
        fail_json(error_json("async", "asynchronous hazard in " + block_desc(b) + ": " + thread_desc(b, t.id) +
                                          " exits while the TMA store it issued" + pc_mark(pending->pc) +
                                          " may still read " + smem_desc(b, pending->smem) +
                                          ": wait with cp.async.bulk.wait_group.read 0 (tma::store_wait_read<0>) "
                                          "before the thread exits, or the block's shared memory can be reused "
                                          "under the copy"));
    for (auto& g : t.cp_groups)
        for (const Copy& c : g) complete_copy(b, t.id, clock_of(b, t.id), t.pc, c);
    for (const Copy& c : t.cp_open) complete_copy(b, t.id, clock_of(b, t.id), t.pc, c);
    t.cp_groups.clear();
    t.cp_open.clear();
    for (auto& g : t.bulk_groups)
        for (const TmaOp& op : g) tma_execute(b, op);
    for (const TmaOp& op : t.bulk_open) tma_execute(b, op);
    t.bulk_groups.clear();
    t.bulk_open.clear();
}

// ---- wgmma --------------------------------------------------------------------------------------------------------------
namespace {
struct WgData {
    int n, dtype, atype;
    uint64_t* const* d;
    void* const* dptr;  // where the thread keeps each accumulator register (written when the group retires)
    const uint64_t* a_regs;
    void* const* a_homes;  // where the thread keeps its A registers (RS form; nullptr entries: untracked)
    uint64_t a_desc, b_desc;
    int scale_d, scale_a, scale_b, tnsp_a, tnsp_b;
};

/// Shared address of element (mn, k) of a wgmma operand described by `desc` (16-bit elements).
uint32_t desc_addr(uint64_t desc, int mn, int k, bool mn_major) {
    const uint32_t start = uint32_t(desc & 0x3fff) << 4;
    const uint32_t lbo = uint32_t((desc >> 16) & 0x3fff) << 4;
    const uint32_t sbo = uint32_t((desc >> 32) & 0x3fff) << 4;
    const int code = int(desc >> 62);
    const int span = code == 1 ? 128 : code == 2 ? 64 : code == 3 ? 32 : 0;
    uint32_t a;
    if (!span) {
        if (!mn_major) a = start + (k / 8) * lbo + (mn / 8) * sbo + (mn % 8) * 16 + (k % 8) * 2;
        else a = start + (k / 8) * lbo + (mn / 8) * sbo + (k % 8) * 16 + (mn % 8) * 2;
        return a;
    }
    if (!mn_major) a = start + (mn / 8) * sbo + (mn % 8) * span + k * 2;
    else {
        const int per = span / 2;  // elements of M/N in one swizzled row
        a = start + (mn / per) * lbo + (k / 8) * sbo + (k % 8) * span + (mn % per) * 2;
    }
    return swizzled(a, span);
}
}  // namespace

constexpr uint32_t POISON32 = 0xffffffffu;  // what a pending accumulator register reads as (NaN)

/// Before a thread's part of a wgmma joins the instruction: an A register of it that is an accumulator of an
/// earlier, unretired group is read too early. (A's registers are read without a touch, as several wgmma may read
/// the same A registers; accumulating into the same accumulators with one shape is allowed as well.)
static void wgmma_register_check(Block& b, void* const* a_homes) {
    Thread& t = *b.cur;
    if (!a_homes || t.acc_hi == 0 || size_t(t.id / 128) >= b.wgs.size()) return;
    const WgState& ws = b.wgs[t.id / 128];
    for (int r = 0; r < 4; ++r)
        if (uintptr_t(a_homes[r]) - t.acc_lo < t.acc_hi - t.acc_lo && ws.pending.count(a_homes[r]))
            accumulator_touch(b, uintptr_t(a_homes[r]), 4, false, t.pc);
}

void ptx::wgmma(int n, int dtype, int atype, int btype, uint64_t* const* d, void* const* dptr, const uint64_t* a_regs,
                void* const* a_homes, uint64_t a_desc, uint64_t b_desc, int scale_d, int scale_a, int scale_b,
                int tnsp_a, int tnsp_b) {
    TKEMU_ENTER();
    Block& blk = *t_block;
    if (dtype != F32) not_emulated("wgmma.mma_async", "only f32 accumulators are emulated");
    if ((atype != BF16 && atype != F16) || btype != atype)
        not_emulated("wgmma.mma_async", "only bf16 and f16 inputs are emulated");
    if (n % 8 || n < 8 || n > 256) fail("invalid", "wgmma m64nNk16 needs N in 8..256, a multiple of 8 (got %d)", n);
    if (((blk.cur->id / 128) + 1) * 128 > blk.n)
        fail("invalid", "wgmma needs a whole warpgroup of 128 threads; this block has %d threads", blk.n);
    if (!a_regs) a_homes = nullptr;
    wgmma_register_check(blk, a_homes);
    WgData data{n, dtype, atype, d, dptr, a_regs, a_homes, a_desc, b_desc, scale_d, scale_a, scale_b, tnsp_a, tnsp_b};
    collective(128, 20, "wgmma.mma_async", 0xffffffffu, &data, [](Block& b, Rendezvous& rv) {
        const auto* x0 = static_cast<WgData*>(rv.data[0]);
        const int n = x0->n, first = (b.cur->id / 128) * 128;
        if (g_trace_on) trace_wgmma_instr(b, first, n);
        for (int t = 1; t < 128; ++t) {
            const auto* x = static_cast<WgData*>(rv.data[t]);
            if (x->n != n || x->b_desc != x0->b_desc || (!x0->a_regs && x->a_desc != x0->a_desc) ||
                x->scale_d != x0->scale_d || x->tnsp_a != x0->tnsp_a || x->tnsp_b != x0->tnsp_b)
                fail("invalid", "wgmma: the 128 threads of the warpgroup disagree on the shape, descriptors or flags "
                     "(thread %d differs from thread 0)", t);
        }
        if (((x0->b_desc >> 49) & 7) || (!x0->a_regs && ((x0->a_desc >> 49) & 7)))
            not_emulated("wgmma.mma_async", "descriptors with a non-zero base offset");
        WgState& ws = b.wgs[first / 128];
        WgGroup& group = ws.open;
        const int reader = first;  // the warpgroup's reads of shared memory are recorded as its first thread's
        const uint32_t clk = clock_of(b, reader);
        if (group.instrs++ == 0) {
            group.pc = pc_chain(b.threads[reader].pc);  // the learner's line, not the library's asm
            group.seq = ws.next_seq++;
        }
        const uintptr_t pc = group.pc;
        const size_t first_read = group.reads.size();
        auto load16 = [&](uint32_t a) {
            if (a + 2 > ARENA_BYTES) fail("out_of_bounds", "wgmma: operand address 0x%x is outside shared memory", a);
            smem_at(b, a, 2, "a wgmma operand");
            shadow_access(b, reader, clk, a, 2, false, pc, "wgmma.mma_async reading its operand", true);
            group.reads.push_back(a);
            uint16_t v;
            std::memcpy(&v, b.arena + a, 2);
            return v;
        };
        static thread_local double A[64][16], B[16][256];
        for (int m = 0; m < 64; ++m)
            for (int k = 0; k < 16; ++k) A[m][k] = 0;
        if (x0->a_regs) {
            for (int t = 0; t < 128; ++t) {
                const auto* x = static_cast<WgData*>(rv.data[t]);
                const int w = t / 32, lane = t % 32, g = lane / 4, tt = lane % 4;
                for (int r = 0; r < 4; ++r)
                    for (int e = 0; e < 2; ++e)
                        A[16 * w + g + 8 * (r & 1)][2 * tt + e + 8 * (r >> 1)] = elem16(x0->atype, half_of(x->a_regs[r], e));
                // The tensor cores read A's registers until the group retires: they are the group's until then.
                for (int r = 0; x->a_homes && r < 4; ++r) {
                    void* p = x->a_homes[r];
                    if (!p) continue;
                    auto [it, fresh] = ws.a_pending.try_emplace(p, group.seq);
                    if (fresh) ws.a_pending_in_warp[w]++;
                    if (fresh || it->second != group.seq) group.a_regs.push_back({p, 0, w});
                    it->second = group.seq;
                    Thread& th = b.threads[first + t];
                    const uintptr_t pa = uintptr_t(p);
                    if (th.a_hi == 0) th.a_lo = pa, th.a_hi = pa + 4;
                    else th.a_lo = std::min(th.a_lo, pa), th.a_hi = std::max(th.a_hi, pa + 4);
                }
            }
        } else {
            for (int m = 0; m < 64; ++m)
                for (int k = 0; k < 16; ++k) A[m][k] = elem16(x0->atype, load16(desc_addr(x0->a_desc, m, k, x0->tnsp_a)));
        }
        for (int k = 0; k < 16; ++k)
            for (int c = 0; c < n; ++c) B[k][c] = elem16(x0->atype, load16(desc_addr(x0->b_desc, c, k, x0->tnsp_b)));
        {  // the operands' extents, for release_check (A, then B: each one tile's bytes)
            const size_t a_end = x0->a_regs ? first_read : first_read + 64 * 16;
            auto span_of = [&](size_t from, size_t to) {
                if (from == to) return;
                auto [lo, hi] = std::minmax_element(group.reads.begin() + long(from), group.reads.begin() + long(to));
                const std::pair<uint32_t, uint32_t> s{*lo, *hi + 1};
                if (std::find(group.spans.begin(), group.spans.end(), s) == group.spans.end()) group.spans.push_back(s);
            };
            span_of(first_read, a_end);
            span_of(a_end, group.reads.size());
        }
        if (b.race)  // until the group retires, a write to what it read is a hazard
            for (size_t r = first_read; r < group.reads.size(); ++r)
                for (uint32_t k = 0; k < 2; ++k) {
                    uint8_t& c = b.shadow[group.reads[r] + k].areads;
                    if (c < 255) c++;
                }
        const double sa = x0->scale_a < 0 ? -1.0 : 1.0, sb = x0->scale_b < 0 ? -1.0 : 1.0;
        // The product is computed now, from what the operands hold now; the accumulators get it when the
        // group retires (wgmma.wait_group). Until then they read as NaN; an accumulator that an earlier
        // group still owns is chained (the same shape may accumulate into a pending accumulator).
        for (int t = 0; t < 128; ++t) {
            const auto* x = static_cast<WgData*>(rv.data[t]);
            const int w = t / 32, lane = t % 32, g = lane / 4, tt = lane % 4;
            for (int i = 0; i < n / 2; ++i) {
                const int row = 16 * w + g + 8 * ((i % 4) / 2), col = 8 * (i / 4) + 2 * tt + i % 2;
                void* p = x->dptr ? x->dptr[i] : nullptr;
                auto it = p ? ws.pending.find(p) : ws.pending.end();
                double s = 0.0;
                if (x0->scale_d) s = it != ws.pending.end() ? double(bits_f32(it->second.second)) : double(f32_of(*x->d[i]));
                for (int k = 0; k < 16; ++k) s += sa * A[row][k] * sb * B[k][col];
                const uint32_t bits = f32_bits(float(s));
                if (!p) {  // no address to write later (a PTX-local register): completes at issue
                    *x->d[i] = bits;
                    continue;
                }
                if (it == ws.pending.end()) {
                    ws.pending.emplace(p, std::make_pair(group.seq, bits));
                    ws.pending_in_warp[w]++;
                    group.acc.push_back({p, 0, w});
                } else {
                    if (it->second.first != group.seq) group.acc.push_back({p, 0, w});
                    it->second = {group.seq, bits};
                }
                *x->d[i] = POISON32;
                Thread& th = b.threads[first + t];
                const uintptr_t pa = uintptr_t(p);
                if (th.acc_hi == 0) th.acc_lo = pa, th.acc_hi = pa + 4;
                else th.acc_lo = std::min(th.acc_lo, pa), th.acc_hi = std::max(th.acc_hi, pa + 4);
            }
        }
    });
}

void ptx::wgmma_operands(bool begin) { t_block->cur->in_wgmma = begin; }

/// A register of group `seq` (an accumulator, or one of matrix A's) touched by the current thread too early.
[[noreturn]] static void register_hazard(Block& b, const WgState& ws, uint32_t seq, bool a_operand, bool write,
                                         uintptr_t pc) {
    Thread& t = *b.cur;
    const WgGroup* g = nullptr;
    for (const WgGroup& c : ws.committed)
        if (c.seq == seq) g = &c;
    if (!g && ws.open.seq == seq) g = &ws.open;
    t.pc = pc;
    pc = pc_chain(pc);  // native build: from the access (a library's line, often) out to the kernel's
    const std::string issued = " of the wgmma group that its warpgroup issued" + (g ? pc_mark(g->pc) : std::string()) +
                               " before the wgmma.wait_group that retires it: ";
    const char* wait = "wait first (warpgroup::mma_async_wait<N>, N = how many newer groups may still run)";
    const std::string msg =
        "asynchronous hazard in " + block_desc(b) + ": " + thread_desc(b, t.id) + (write ? " wrote" : " read") +
        (a_operand ? " a register of matrix A" + pc_mark(pc) + issued +
                         "the tensor cores read A's registers at any moment until then, so " + wait +
                         ", or touch them before issuing"
                   : " an accumulator register" + pc_mark(pc) + issued +
                         "the tensor cores write the accumulators at any moment until then, so " + wait);
    fail_json(error_json("async", msg));
}

void accumulator_touch(Block& b, uintptr_t a, size_t n, bool write, uintptr_t pc) {
    Thread& t = *b.cur;
    if (size_t(t.id / 128) >= b.wgs.size()) return;
    const WgState& ws = b.wgs[t.id / 128];
    for (uintptr_t p = a & ~uintptr_t(3); p < a + n; p += 4) {
        void* const key = reinterpret_cast<void*>(p);
        if (auto it = ws.pending.find(key); it != ws.pending.end())
            register_hazard(b, ws, it->second.first, false, write, pc);
        if (ws.a_pending.empty()) continue;
        if (auto it = ws.a_pending.find(key); it != ws.a_pending.end())
            register_hazard(b, ws, it->second, true, write, pc);
    }
}

void ptx::wgmma_fence() {}

void ptx::wgmma_commit() {
    Block& b = *t_block;
    Thread& t = *b.cur;
    WgState& ws = b.wgs[t.id / 128];
    if (g_trace_on) {
        TKEMU_ENTER();
        trace_wgmma_commit(b, t.id, t.wgmma_commits, ws.open.seq);
    }
    if (t.wgmma_commits++ == ws.commits) {  // the warpgroup's first thread to commit closes the group
        ws.open.index = ws.commits;
        ws.committed.push_back(std::move(ws.open));
        ws.open = WgGroup();
        ws.commits++;
        const uint8_t mine = uint8_t(1u << ((t.id % 128) / 32));
        int busy = 0;  // groups this thread's warp has not retired
        for (const WgGroup& g : ws.committed) busy += g.instrs > 0 && !(g.retired & mine);
        int seen = b.launch->max_wgmma_groups.load();
        while (busy > seen && !b.launch->max_wgmma_groups.compare_exchange_weak(seen, busy)) {
        }
    }
}

/// Warp w's part of the group is done (wgmma.wait_group orders only the warp that executes it): its threads'
/// accumulators get their values. The group's shared operands stay "being read" until every warp of the
/// warpgroup has retired its part; then its reads are recorded (as the first thread's of the warp that
/// retired it last, at its wait): a write that is not ordered after that wait races with them.
static void wgmma_retire(Block& b, WgState& ws, WgGroup& g, int w, int first, uintptr_t wait_pc) {
    if (g_trace_on) trace_wgmma_retire(b, first, g.seq, wait_pc);
    for (const AccSlot& a : g.acc) {
        if (a.warp != w) continue;
        auto it = ws.pending.find(a.ptr);
        if (it == ws.pending.end() || it->second.first != g.seq) continue;  // a later group owns it now
        std::memcpy(a.ptr, &it->second.second, 4);
        ws.pending.erase(it);
        ws.pending_in_warp[w]--;
    }
    for (const AccSlot& a : g.a_regs) {  // its register A operands, unless a later group reads them too
        if (a.warp != w) continue;
        auto it = ws.a_pending.find(a.ptr);
        if (it == ws.a_pending.end() || it->second != g.seq) continue;
        ws.a_pending.erase(it);
        ws.a_pending_in_warp[w]--;
    }
    g.retired |= uint8_t(1u << w);
    g.wait_clk[w] = clock_of(b, first);
    g.wait_pc[w] = wait_pc;
    if (g.retired != 0xf || !b.race) return;
    for (uint32_t a : g.reads)
        for (uint32_t k = 0; k < 2; ++k)
            if (b.shadow[a + k].areads) b.shadow[a + k].areads--;
    uint16_t rec = NONE;
    if (b.wg_retired.size() < NONE) {
        rec = uint16_t(b.wg_retired.size());
        const int wg0 = (first / 128) * 128;
        WgRetired r{};
        for (int k = 0; k < 4; ++k) r.tid[k] = uint16_t(wg0 + 32 * k), r.clk[k] = g.wait_clk[k], r.pc[k] = g.wait_pc[k];
        b.wg_retired.push_back(r);
    }
    const uint32_t clk = clock_of(b, first);
    for (uint32_t a : g.reads) {
        shadow_access(b, first, clk, a, 2, false, wait_pc, "");
        for (uint32_t k = 0; k < 2; ++k) {
            b.shadow[a + k].flags |= SH_WGMMA_READ;
            b.shadow[a + k].wgr = rec;
        }
    }
}

void ptx::wgmma_wait(int n) {
    TKEMU_ENTER();
    Block& blk = *t_block;
    if (n < 0 || n > 7) fail("invalid", "wgmma.wait_group %d: N is 0..7", n);
    // wgmma.wait_group is .sync.aligned: the warp's 32 lanes execute it together, and it waits for the groups
    // *this warp* committed -- not for the other three warps, which may not even have reached their wait.
    collective(32, 21, "wgmma.wait_group", 0xffffffffu, &n, [](Block& b, Rendezvous& rv) {
        const int first = (b.cur->id / 32) * 32, w = (first % 128) / 32;
        const int keep = *static_cast<int*>(rv.data[0]);
        WgState& ws = b.wgs[first / 128];
        const int committed = b.threads[first].wgmma_commits;  // by this warp (its lanes commit together)
        for (int t = first; t < first + 32 && t < b.n; ++t) {
            b.threads[t].last_wgmma_wait = keep;
            b.threads[t].last_wgmma_wait_pc = b.threads[first].pc;
        }
        for (WgGroup& g : ws.committed)
            if (g.index < committed - keep && !(g.retired & (1u << w)))
                wgmma_retire(b, ws, g, w, first, b.threads[first].pc);
        // A group leaves once every warp retired it; an empty one (a commit with no wgmma: nothing to read or
        // write) as soon as one warp did, so a warp that commits and waits alone does not pile them up.
        while (!ws.committed.empty() && (ws.committed.front().retired == 0xf ||
                                         (ws.committed.front().instrs == 0 && ws.committed.front().retired)))
            ws.committed.pop_front();
        if (ws.pending_in_warp[w] == 0)
            for (int t = first; t < first + 32 && t < b.n; ++t) b.threads[t].acc_lo = b.threads[t].acc_hi = 0;
        if (ws.a_pending_in_warp[w] == 0)
            for (int t = first; t < first + 32 && t < b.n; ++t) b.threads[t].a_lo = b.threads[t].a_hi = 0;
    });
    (void)blk;
}

void ptx::fence_proxy_async() {
    TKEMU_ENTER();
    Block& b = *t_block;
    b.cur->fence_clk = clock_of(b, b.cur->id);
    vc_tick(b, b.cur->id);
}

// ---- what a hazard report says ----------------------------------------------------------------------------------------
[[noreturn]] void async_hazard(Block& b, int t, uint32_t addr, bool write, uintptr_t pc, const char* what) {
    const Shadow& s = b.shadow[addr];
    std::string msg = "asynchronous hazard on " + smem_desc(b, addr) + " in " + block_desc(b) + ": " +
                      thread_desc(b, t) + (write ? " wrote it" : " read it") + pc_mark(pc) +
                      (what && *what ? std::string(" (") + what + ")" : std::string());
    if (s.flags & SH_PENDING) {
        const TmaOp* op = nullptr;
        for (size_t i = b.inflight.size(); i-- > 0;) {
            const TmaOp& o = b.inflight[i];
            if (!b.landed[i] && addr >= o.smem && addr < o.smem + o.extent) { op = &o; break; }
        }
        msg += " while the TMA load that " + (op ? thread_desc(b, op->issuer) + " issued" + pc_mark(op->pc)
                                                 : std::string("a thread issued")) +
               " is still in flight: a TMA load writes its box at any moment until the phase of its mbarrier" +
               (op ? " " + smem_desc(b, op->bar) : std::string()) + " completes";
        if (op && t < int(b.threads.size()) && b.threads[t].waited_bar == op->bar && op->issuer != t)
            // the reader did wait on that barrier: the load in flight is a later round's, a refill
            msg += ". " + thread_desc(b, t) + " did wait on that barrier: the load in flight is a later round's refill "
                   "of the stage, issued before the stage was handed back. Does the producer wait on the stage's "
                   "empty mbarrier (with this round's phase) before it refills it?";
        else
            msg += ", so wait on that barrier (for the phase parity of this round) before touching the box";
    } else {
        const WgGroup* grp = nullptr;
        int wg = -1;
        for (size_t w = 0; w < b.wgs.size() && !grp; ++w) {
            auto has = [&](const WgGroup& g) {
                for (uint32_t a : g.reads)
                    if (addr >= a && addr < a + 2) return true;
                return false;
            };
            for (const WgGroup& g : b.wgs[w].committed)
                if (has(g)) { grp = &g; wg = int(w); break; }
            if (!grp && has(b.wgs[w].open)) { grp = &b.wgs[w].open; wg = int(w); }
        }
        if (grp) {
            msg += " while the wgmma group that warpgroup " + std::to_string(wg) + " issued" + pc_mark(grp->pc) +
                   " may still read it: a wgmma group reads its shared operands at any moment until the "
                   "wgmma.wait_group that retires it (warpgroup::mma_async_wait), so wait for it before the bytes "
                   "are overwritten, and hand the stage back (mbarrier arrive / release) only after that wait";
        } else {
            const TmaOp* op = nullptr;
            for (const Thread& th : b.threads) {
                for (const auto& g : th.bulk_groups)
                    for (const TmaOp& o : g)
                        if (addr >= o.smem && addr < o.smem + o.extent) op = &o;
                for (const TmaOp& o : th.bulk_open)
                    if (addr >= o.smem && addr < o.smem + o.extent) op = &o;
            }
            msg += " while the TMA store that " + (op ? thread_desc(b, op->issuer) + " issued" + pc_mark(op->pc)
                                                      : std::string("a thread issued")) +
                   " may still read it: a TMA store reads its source at any moment until "
                   "cp.async.bulk.wait_group.read (tma::store_wait_read) returns in the issuing thread";
        }
    }
    fail_json(error_json("async", msg));
}

void ptx::setmaxnreg(bool, int n) {
    TKEMU_ENTER();
    if (n < 24 || n > 256 || n % 8) fail("invalid", "setmaxnreg takes 24..256 in steps of 8, not %d", n);
}

// ---- plain loads and stores written as PTX -------------------------------------------------------------------------------
uint64_t ptx::ld(int space, uint64_t addr, int bytes) {
    TKEMU_ENTER();
    Block& b = *t_block;
    uint64_t v = 0;
    if (space == 2) {
        char* p = static_cast<char*>(smem_ptr(addr, uint32_t(bytes), "ld.shared"));
        shadow_access(b, b.cur->id, clock_of(b, b.cur->id), uint32_t(addr), uint32_t(bytes), false, b.cur->pc, "ld.shared");
        if (g_trace_on) trace_access(b, b.cur->id, uintptr_t(p), size_t(bytes), false, false, b.cur->pc);
        std::memcpy(&v, p, size_t(bytes));
        return v;
    }
    if (g_trace_on) trace_access(b, b.cur->id, uintptr_t(addr), size_t(bytes), false, false, b.cur->pc);
    t_trace_skip = true;
    mem_check(reinterpret_cast<void*>(addr), size_t(bytes), false);
    t_trace_skip = false;
    std::memcpy(&v, reinterpret_cast<const void*>(addr), size_t(bytes));
    return v;
}

void ptx::st(int space, uint64_t addr, int bytes, uint64_t value) {
    TKEMU_ENTER();
    Block& b = *t_block;
    if (space == 2) {
        char* p = static_cast<char*>(smem_ptr(addr, uint32_t(bytes), "st.shared"));
        shadow_access(b, b.cur->id, clock_of(b, b.cur->id), uint32_t(addr), uint32_t(bytes), true, b.cur->pc, "st.shared");
        if (g_trace_on) trace_access(b, b.cur->id, uintptr_t(p), size_t(bytes), true, false, b.cur->pc);
        std::memcpy(p, &value, size_t(bytes));
        return;
    }
    if (g_trace_on) trace_access(b, b.cur->id, uintptr_t(addr), size_t(bytes), true, false, b.cur->pc);
    t_trace_skip = true;
    mem_check(reinterpret_cast<void*>(addr), size_t(bytes), true);
    t_trace_skip = false;
    std::memcpy(reinterpret_cast<void*>(addr), &value, size_t(bytes));
}

uint64_t ptx::cvta_to_shared(uint64_t generic) { return smem_addr(reinterpret_cast<const void*>(generic)); }
uint64_t ptx::cvta_shared_to_generic(uint64_t shared) {
    return uint64_t(reinterpret_cast<uintptr_t>(t_block->arena + shared));
}

}  // namespace tkemu
