// Trace mode (tklab.trace): what each static instruction did, warp by warp, and a per-warp timeline on a logical
// clock. Off by default: every hook in runtime.cpp/ptx.cpp is `if (g_trace_on) trace_...(...)`, one load and a
// branch when off.
//
// Accesses: each thread's k-th execution of an instruction (its pc) joins its warp's k-th execution of it (the
// SIMT reading of a converged warp); at the block's end each warp-wide execution becomes a pattern: the 32 lanes'
// addresses minus the lowest one rounded down to 128 bytes (a shift that changes neither bank wavefronts nor
// 32-byte sectors), counted per pattern. Python (tklab.trace.analyze) turns patterns into wavefronts through the
// bank model and into sectors.
//
// Logical clock: each thread's clock counts its memory accesses and runtime calls; a wait ends at the later of
// its own clock and the clock at which what it waits for happened: the last arrival at a barrier; for an
// mbarrier phase, its last arrive and each TMA load's issue + tma_latency; for a wgmma group, the tensor cores'
// finish (groups of a warpgroup one after another, wgmma_cost per N column of each instruction).
#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <tuple>
#include <string>
#include <unordered_map>
#include <vector>

#include "internal.h"

namespace tkemu {

bool g_trace_on = false;
thread_local bool t_trace_skip = false;

namespace {

enum EvKind { EV_BARRIER = 0, EV_MBAR = 1, EV_TMA_ISSUE = 2, EV_TMA_DONE = 3, EV_WG_ISSUE = 4, EV_WG_RETIRE = 5 };

struct Config {
    int max_blocks = 0;   // 0: every block
    int max_events = 200000;
    int event_blocks = 2;  // blocks whose timeline is kept
    uint64_t tma_latency = 600;
    uint64_t wgmma_cost = 1;  // steps per N column of one m64nNk16
};

struct Group {
    int64_t addr[32];
    uint32_t mask = 0;
};

struct PatInfo {
    uint64_t count = 0;
    int64_t base = 0;
    int block = 0, warp = 0;
};

struct VecHash {
    size_t operator()(const std::vector<int64_t>& v) const {
        size_t h = 1469598103934665603ull;
        for (int64_t x : v) h = (h ^ size_t(x)) * 1099511628211ull;
        return h;
    }
};

/// One static access instruction (its pc) and the patterns of its warp-wide executions.
struct Instr {
    bool shared = false;
    std::string op;  // ld, st, atom, ldmatrix, stmatrix
    int width = 0;   // bytes per lane; for ldmatrix/stmatrix the number of matrices
    uint64_t lane_execs = 0;
    uint64_t warps = 0;  // warps (of all traced blocks) that executed it
    std::unordered_map<std::vector<int64_t>, PatInfo, VecHash> pats;
};

struct Ev {
    int block, warp, kind;
    uint64_t t, end;
    int64_t id;
    uintptr_t pc;
    int thread;
};

struct WgTrace {
    std::unordered_map<uint32_t, uint64_t> done;  // group seq -> when the tensor cores finish it
    uint64_t last_done = 0;
    uint64_t open_cost = 0;
    std::vector<uint32_t> seq_of;  // the warpgroup's k-th commit -> the seq of the group it closed
};

struct MbTrace {
    uint64_t ready = 0;    // the current phase: latest arrive / TMA completion so far
    uint64_t done[2] = {0, 0};  // by phase parity: when that phase completed
};

struct BlockTrace {
    bool on = false, events = false;
    int linear = 0;
    std::vector<uint64_t> clk, arrived;
    std::unordered_map<uint64_t, uint32_t> nexec;              // (pc, thread) -> executions so far
    std::unordered_map<uint64_t, std::vector<Group>> groups;  // (pc, warp) -> its warp-wide executions
    std::unordered_map<uint64_t, std::pair<std::string, int>> kinds;  // (pc, warp) -> (op, width); shared in hi bit
    std::unordered_map<uint32_t, MbTrace> mbars;
    std::vector<WgTrace> wgs;
    // Lanes of one warp doing the same thing make one event: a thread's n-th (kind, id) joins its warp's n-th.
    std::map<std::tuple<int, int, int64_t>, uint32_t> nth;            // (thread, kind, id) -> events so far
    std::map<std::tuple<int, int, int64_t, uint32_t>, size_t> merged;  // (warp, kind, id, n) -> index in g_events
    std::set<std::tuple<uintptr_t, std::string, int>> op_warps;       // (pc, kind, warp) that ran an op
    std::map<std::pair<int, uint32_t>, uint32_t> wait_n;               // (thread, mbarrier) -> its waits so far
    std::set<std::tuple<int, uint32_t, uint32_t>> wait_seen;           // (warp, mbarrier, n) counted
};

Config g_cfg;
std::mutex g_mu;
std::map<uintptr_t, Instr> g_instrs;  // key: pc (shared and global never share a pc)
std::map<std::pair<uintptr_t, std::string>, uint64_t> g_ops;  // (pc, kind) -> warp executions
std::map<std::pair<uintptr_t, std::string>, uint64_t> g_op_warps;  // (pc, kind) -> warps (of all blocks) that ran it
std::vector<Ev> g_events;
int g_blocks_traced = 0;
bool g_events_full = false;
std::string g_json;
thread_local BlockTrace t_tr;

constexpr uint64_t SHARED_BIT = uint64_t(1) << 62;

// A key holds a pc in its low 48 bits: a native code address (below 2^47), or an interpreted instruction number
// with bit 47 set (INSTR_TAG itself lies above those bits); pc_of_key undoes it.
constexpr uint64_t KEY_INSTR = uint64_t(1) << 47;
inline uint64_t key(uintptr_t pc, int who) {
    const uint64_t p = (pc & INSTR_TAG) ? (KEY_INSTR | (uint64_t(pc) & (KEY_INSTR - 1))) : uint64_t(pc);
    return p ^ (uint64_t(who) << 48);
}
inline uintptr_t pc_of_key(uint64_t k) {
    const uint64_t p = k & ((uint64_t(1) << 48) - 1);
    return (p & KEY_INSTR) ? uintptr_t(INSTR_TAG | (p & (KEY_INSTR - 1))) : uintptr_t(p);
}

uint64_t& clk(Block& b, int t) {
    (void)b;
    return t_tr.clk[size_t(t)];
}

void event(Block& b, int t, int kind, uint64_t start, uint64_t end, int64_t id, uintptr_t pc) {
    if (!t_tr.events) return;
    (void)b;
    const int warp = t / 32;
    const uint32_t n = t_tr.nth[{t, kind, id}]++;
    auto it = t_tr.merged.find({warp, kind, id, n});
    if (it != t_tr.merged.end()) {  // another lane of the warp: the warp's event spans both
        Ev& e = g_events[it->second];
        e.t = std::max(e.t, start);  // the warp is there when its last lane is
        e.end = std::max(e.end, end);
        return;
    }
    if (int(g_events.size()) >= g_cfg.max_events) { g_events_full = true; return; }
    t_tr.merged[{warp, kind, id, n}] = g_events.size();
    g_events.push_back({t_tr.linear, warp, kind, start, end, id, pc, t});
}

std::string pc_text(uintptr_t pc) {
    // The interpreter's instruction number ("I<n>": its .loc chain names the learner's line); natively the
    // innermost kernel-module frame's offset, then (from a call chain taken once) its callers: Python names the
    // first in the learner's file.
    if ((pc & INSTR_TAG) && !(pc >> 63)) return "I" + std::to_string(pc & ~INSTR_TAG);
    const std::string m = pc_mark(pc_chain(pc));
    const std::string own = offset_of(pc);
    if (m.size() > 9) return own + "|" + m.substr(7, m.size() - 9);
    return own;
}

std::unordered_map<uintptr_t, std::string> g_pc_text;  // filled at first sight of a pc, under a fiber

void note_pc(uintptr_t pc, bool mine = true) {  // mine: pc is where the running fiber is (its chain is pc's)
    if (g_pc_text.find(pc) == g_pc_text.end())
        g_pc_text.emplace(pc, (mine || (pc & INSTR_TAG)) ? pc_text(pc) : offset_of(pc));
}

void record(Block& b, int t, uintptr_t pc, int64_t addr, bool shared, const char* op, int width) {
    const uint32_t k = t_tr.nexec[key(pc, t)]++;
    const uint64_t gk = key(pc, t / 32) | (shared ? SHARED_BIT : 0);
    auto& gs = t_tr.groups[gk];
    if (gs.size() <= k) {
        gs.resize(k + 1);
        if (gs.size() == 1) {
            t_tr.kinds.emplace(gk, std::make_pair(std::string(op), width));
            std::lock_guard<std::mutex> lock(g_mu);
            note_pc(pc);
        }
    }
    Group& g = gs[k];
    g.addr[t % 32] = addr;
    g.mask |= 1u << (t % 32);
    (void)b;
}

}  // namespace

// ---- hooks ---------------------------------------------------------------------------------------------------------
void trace_launch_begin(Launch& L) {
    (void)L;
    std::lock_guard<std::mutex> lock(g_mu);
    g_instrs.clear();
    g_ops.clear();
    g_op_warps.clear();
    g_events.clear();
    g_pc_text.clear();
    g_blocks_traced = 0;
    g_events_full = false;
    g_json.clear();
}

void trace_block_begin(Block& b, long linear) {
    BlockTrace& tr = t_tr;
    tr = BlockTrace();
    tr.on = g_cfg.max_blocks <= 0 || linear < g_cfg.max_blocks;
    if (!tr.on) return;
    tr.linear = int(linear);
    tr.events = linear < g_cfg.event_blocks;
    const int n = int(b.launch->block.x * b.launch->block.y * b.launch->block.z);
    tr.clk.assign(size_t(n), 0);
    tr.arrived.assign(size_t(n), 0);
    tr.wgs.assign(size_t((n + 127) / 128), WgTrace());
}

void trace_block_end(Block& b) {
    (void)b;
    BlockTrace& tr = t_tr;
    if (!tr.on) return;
    std::lock_guard<std::mutex> lock(g_mu);
    g_blocks_traced++;
    for (const auto& [pc, kind, warp] : tr.op_warps) g_op_warps[{pc, kind}]++;
    for (auto& [gk, gs] : tr.groups) {
        const bool shared = gk & SHARED_BIT;
        const uint64_t k = gk & ~SHARED_BIT;
        const uintptr_t pc = pc_of_key(k);
        const int warp = int(k >> 48);
        const auto& kind = tr.kinds[gk];
        Instr& ins = g_instrs[pc];
        ins.shared = shared;
        ins.op = kind.first;
        ins.width = kind.second;
        ins.warps++;
        for (const Group& g : gs) {
            if (!g.mask) continue;
            int64_t lo = INT64_MAX;
            for (int l = 0; l < 32; ++l)
                if (g.mask >> l & 1) lo = std::min(lo, g.addr[l]), ins.lane_execs++;
            // Shared: a shift by whole words (and by the access's alignment) keeps every bank's distinct words;
            // global: a shift by whole 128-byte lines keeps the sectors.
            const int64_t align = !shared ? 128 : ins.op.find("matrix") != std::string::npos ? 16
                                                                                          : std::max(4, ins.width);
            const int64_t base = lo - ((lo % align) + align) % align;
            std::vector<int64_t> pat(32);
            for (int l = 0; l < 32; ++l) pat[size_t(l)] = (g.mask >> l & 1) ? g.addr[l] - base : -1;
            auto [it, fresh] = ins.pats.try_emplace(std::move(pat));
            if (fresh) it->second = {0, shared ? base : 0, tr.linear, warp};
            it->second.count++;
        }
    }
    tr = BlockTrace();
}

void trace_access(Block& b, int t, uintptr_t a, size_t n, bool write, bool atomic, uintptr_t pc) {
    if (!t_tr.on) return;
    t_tr.clk[size_t(t)]++;
    const uintptr_t s = a - uintptr_t(b.arena);
    const bool shared = s < ARENA_BYTES;
    record(b, t, pc, shared ? int64_t(s) : int64_t(a), shared, atomic ? "atom" : write ? "st" : "ld", int(n));
}

void trace_matrix(Block& b, int first, int num, const uint64_t* rows, bool store, uintptr_t pc) {
    if (!t_tr.on) return;
    for (int l = 0; l < 32; ++l) {
        t_tr.clk[size_t(first + l)]++;
        if (l < 8 * num) record(b, first + l, pc, int64_t(rows[l]), true, store ? "stmatrix" : "ldmatrix", num);
    }
    trace_op(b, first, store ? "stmatrix" : "ldmatrix", pc, 1);
}

void trace_op(Block& b, int t, const char* kind, uintptr_t pc, int warps) {
    (void)b;
    (void)t;
    if (!t_tr.on) return;
    std::lock_guard<std::mutex> lock(g_mu);
    note_pc(pc);
    g_ops[{pc, kind}] += uint64_t(warps);
    for (int w = 0; w < warps; ++w) t_tr.op_warps.insert({pc, kind, t / 32 + w});
}

void trace_tick(Block& b, int t) {
    (void)b;
    if (t_tr.on) t_tr.clk[size_t(t)]++;
}

void trace_barrier_arrive(Block& b, int t) {
    if (!t_tr.on) return;
    t_tr.arrived[size_t(t)] = ++clk(b, t);
}

void trace_barrier_release(Block& b, int id, const std::vector<int>& waiters, const std::vector<int>& arrivers) {
    if (!t_tr.on) return;
    uint64_t at = 0;
    for (int t : waiters) at = std::max(at, t_tr.arrived[size_t(t)]);
    for (int t : arrivers) at = std::max(at, t_tr.arrived[size_t(t)]);
    for (int t = 0; t < b.n; ++t)
        if (b.threads[size_t(t)].state == EXITED) at = std::max(at, t_tr.clk[size_t(t)]);
    std::lock_guard<std::mutex> lock(g_mu);
    for (int t : waiters) {
        const uint64_t start = t_tr.arrived[size_t(t)];
        clk(b, t) = std::max(clk(b, t), at);
        if (t % 32 == 0 || std::find(waiters.begin(), waiters.end(), t - t % 32) == waiters.end())
            event(b, t, EV_BARRIER, start, at, id, b.threads[size_t(t)].pc);
        note_pc(b.threads[size_t(t)].pc, b.cur && b.cur->id == t);
    }
}

void trace_mbar_arrive(Block& b, uint32_t bar) {
    if (!t_tr.on || !b.cur) return;
    MbTrace& m = t_tr.mbars[bar];
    m.ready = std::max(m.ready, ++clk(b, b.cur->id));
}

void trace_mbar_phase(Block& b, uint32_t bar, uint32_t completed) {
    (void)b;
    if (!t_tr.on) return;
    MbTrace& m = t_tr.mbars[bar];
    m.done[(completed - 1) & 1] = m.ready;  // `completed` phases so far: the last one's index is completed - 1
    m.ready = 0;
}

void trace_mbar_wait(Block& b, uint32_t bar, uint64_t token) {
    if (!t_tr.on || !b.cur) return;
    const int t = b.cur->id;
    const uint64_t ready = t_tr.mbars[bar].done[token & 1];
    const uint64_t start = ++clk(b, t);
    clk(b, t) = std::max(start, ready);
    std::lock_guard<std::mutex> lock(g_mu);
    note_pc(b.cur->pc);
    event(b, t, EV_MBAR, start, clk(b, t), int64_t(bar), b.cur->pc);
    const uint32_t n = t_tr.wait_n[{t, bar}]++;
    if (t_tr.wait_seen.insert({t / 32, bar, n}).second) {  // the warp's n-th wait on it: count it once
        g_ops[{b.cur->pc, "mbarrier_wait"}] += 1;
        t_tr.op_warps.insert({b.cur->pc, "mbarrier_wait", t / 32});
    }
}

void trace_tma_issue(Block& b, uint32_t bar, uint32_t smem) {
    if (!t_tr.on || !b.cur) return;
    const int t = b.cur->id;
    const uint64_t at = ++clk(b, t);
    MbTrace& m = t_tr.mbars[bar];
    m.ready = std::max(m.ready, at + g_cfg.tma_latency);
    std::lock_guard<std::mutex> lock(g_mu);
    note_pc(b.cur->pc);
    event(b, t, EV_TMA_ISSUE, at, at, int64_t(smem), b.cur->pc);
    event(b, t, EV_TMA_DONE, at + g_cfg.tma_latency, at + g_cfg.tma_latency, int64_t(smem), b.cur->pc);
    g_ops[{b.cur->pc, "tma"}] += 1;
    t_tr.op_warps.insert({b.cur->pc, "tma", t / 32});
}

void trace_wgmma_instr(Block& b, int first, int n) {
    if (!t_tr.on) return;
    t_tr.wgs[size_t(first / 128)].open_cost += uint64_t(n) * g_cfg.wgmma_cost;
    for (int t = first; t < first + 128 && t < b.n; ++t) clk(b, t)++;
    trace_op(b, first, "wgmma", b.threads[size_t(first)].pc, 4);
}

void trace_wgmma_commit(Block& b, int t, int k, uint32_t seq) {
    if (!t_tr.on) return;
    WgTrace& w = t_tr.wgs[size_t(t / 128)];
    const uint64_t at = ++clk(b, t);
    const bool closes = k >= int(w.seq_of.size());
    if (closes) w.seq_of.push_back(seq);
    else seq = w.seq_of[size_t(k)];
    if (closes) {
        const uint64_t start = std::max(at, w.last_done);
        w.last_done = start + w.open_cost;
        w.done[seq] = w.last_done;
        w.open_cost = 0;
    }
    if (t % 32 == 0 && b.cur) {
        std::lock_guard<std::mutex> lock(g_mu);
        note_pc(b.cur->pc);
        event(b, t, EV_WG_ISSUE, at, at, int64_t(seq), b.cur->pc);
    }
}

/// ``first`` is the first thread of the warp whose wgmma.wait_group retired its part of group ``seq`` (each warp
/// retires its own part: see wgmma_retire in ptx.cpp), so the event lands on that warp's timeline.
void trace_wgmma_retire(Block& b, int first, uint32_t seq, uintptr_t pc) {
    if (!t_tr.on) return;
    WgTrace& w = t_tr.wgs[size_t(first / 128)];
    auto it = w.done.find(seq);
    const uint64_t done = it == w.done.end() ? 0 : it->second;
    std::lock_guard<std::mutex> lock(g_mu);
    note_pc(pc, false);
    for (int t = first; t < first + 32 && t < b.n; ++t) {
        const uint64_t start = clk(b, t);
        clk(b, t) = std::max(start, done);
        if (t % 32 == 0) event(b, t, EV_WG_RETIRE, std::max(start, done), std::max(start, done), int64_t(seq), pc);
    }
}

// ---- the result, as JSON -------------------------------------------------------------------------------------------
void trace_launch_end(Launch& L) {
    (void)L;
    std::lock_guard<std::mutex> lock(g_mu);
    std::string o = "{\"blocks_traced\":" + std::to_string(g_blocks_traced) +
                    ",\"events_full\":" + (g_events_full ? "true" : "false") + ",\"instrs\":[";
    bool first = true;
    for (const auto& [pc, ins] : g_instrs) {
        o += first ? "" : ",";
        first = false;
        o += "{\"pc\":\"" + g_pc_text[pc] + "\",\"shared\":" + (ins.shared ? "true" : "false") + ",\"op\":\"" + ins.op +
             "\",\"width\":" + std::to_string(ins.width) + ",\"lane_execs\":" + std::to_string(ins.lane_execs) +
             ",\"warps\":" + std::to_string(ins.warps) +
             ",\"pats\":[";
        bool pf = true;
        for (const auto& [pat, info] : ins.pats) {
            o += pf ? "[" : ",[";
            pf = false;
            o += std::to_string(info.count) + "," + std::to_string(info.block) + "," + std::to_string(info.warp) + ",[";
            for (size_t l = 0; l < pat.size(); ++l) {
                o += l ? "," : "";
                o += pat[l] < 0 ? "null" : std::to_string(pat[l] + info.base);
            }
            o += "]]";
        }
        o += "]}";
    }
    o += "],\"ops\":[";
    first = true;
    for (const auto& [k, n] : g_ops) {
        o += first ? "" : ",";
        first = false;
        o += "[\"" + g_pc_text[k.first] + "\",\"" + k.second + "\"," + std::to_string(n) + "," +
             std::to_string(g_op_warps[k]) + "]";
    }
    o += "],\"events\":[";
    static const char* names[] = {"barrier_wait", "mbarrier_wait", "tma_issue", "tma_complete", "wgmma_issue",
                                  "wgmma_retire"};
    first = true;
    for (const Ev& e : g_events) {
        o += first ? "" : ",";
        first = false;
        o += "[" + std::to_string(e.block) + "," + std::to_string(e.warp) + "," + std::to_string(e.t) + ",\"" +
             names[e.kind] + "\"," + std::to_string(e.end) + "," + std::to_string(e.id) + ",\"" + g_pc_text[e.pc] +
             "\"]";
    }
    o += "]}";
    g_json = std::move(o);
}

}  // namespace tkemu

extern "C" {
void tkemu_trace_config(int on, int max_blocks, int event_blocks, int max_events, int tma_latency, int wgmma_cost) {
    tkemu::g_trace_on = on != 0;
    tkemu::g_cfg.max_blocks = max_blocks;
    tkemu::g_cfg.event_blocks = event_blocks;
    tkemu::g_cfg.max_events = max_events;
    tkemu::g_cfg.tma_latency = uint64_t(std::max(0, tma_latency));
    tkemu::g_cfg.wgmma_cost = uint64_t(std::max(0, wgmma_cost));
}
const char* tkemu_trace() { return tkemu::g_json.c_str(); }
}
