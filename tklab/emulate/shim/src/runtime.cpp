// The emulator runtime: launches, blocks of fibers, barriers and warp collectives, shared memory, the
// checks (out-of-bounds global accesses, shared-memory races, deadlocks, time limit) and the error
// reports the Python side turns into messages.
//
// Kernels are compiled with -fsanitize=thread, but no ThreadSanitizer runtime is linked: the
// __tsan_read*/__tsan_write* calls the compiler inserts before every memory access land here, which is
// how every global access is bounds-checked against its argument and every shared access is checked
// for races (vector clocks: an access races when another thread's access to the same byte is not
// ordered before it by a barrier, an mbarrier wait, or a warp-wide operation).
#include <dlfcn.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstring>
#include <thread>
#include <type_traits>

#include "internal.h"

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

namespace tkemu {

thread_local Block* t_block = nullptr;
Launch* g_launch = nullptr;
bool g_interp = false;

static std::mutex g_out_mu;
static std::string g_output;

// ---- global buffers: one slot of a large reserved region per kernel argument --------------------------------
constexpr int SLOTS = 64;
// 2 GB per slot, the buffer half way in; smaller under an address-space limit (a sandboxed check gets 4 GB).
static uintptr_t SLOT_BYTES = uintptr_t(1) << 31;
#define SLOT_BASE (SLOT_BYTES / 4)  // where a buffer starts in its slot: a gap before it, more after it
static uintptr_t g_lo = 0;
struct Buffer {
    uintptr_t base = 0;
    size_t bytes = 0;
    bool mapped = false;
};
static Buffer g_buffers[SLOTS];

static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ---- JSON and descriptions -------------------------------------------------------------------------------
std::string json_str(const std::string& s) {
    std::string o = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') { o += '\\'; o += c; }
        else if (c == '\n') o += "\\n";
        else if (static_cast<unsigned char>(c) < 0x20) { char buf[8]; snprintf(buf, 8, "\\u%04x", c); o += buf; }
        else o += c;
    }
    return o + "\"";
}

// Call chains kept for messages (pc_chain): a pc with CHAIN_TAG set is an index into this table.
constexpr uintptr_t CHAIN_TAG = uintptr_t(1) << 63;
constexpr size_t CHAIN_DEPTH = 6, CHAIN_LIMIT = 1 << 16;
static std::mutex g_chain_mu;
static std::vector<std::array<uintptr_t, CHAIN_DEPTH>> g_chains;

uintptr_t pc_chain(uintptr_t fallback) {
    if (g_interp) return fallback;  // an instruction number: its .loc chain already names the learner's line
    void* frames[16];
    const int n = backtrace(frames, 16);
    Dl_info self{};
    dladdr(reinterpret_cast<void*>(&pc_chain), &self);
    std::array<uintptr_t, CHAIN_DEPTH> chain{};
    size_t k = 0;
    for (int i = 0; i < n && k < CHAIN_DEPTH; ++i) {  // the kernel module's frames, innermost first
        Dl_info info{};
        if (dladdr(frames[i], &info) && info.dli_fbase != self.dli_fbase) chain[k++] = uintptr_t(frames[i]);
    }
    std::lock_guard<std::mutex> lock(g_chain_mu);
    if (!k || g_chains.size() >= CHAIN_LIMIT) return fallback;
    g_chains.push_back(chain);
    return CHAIN_TAG | (g_chains.size() - 1);
}

std::string offset_of(uintptr_t pc) {
    Dl_info info;
    if (pc && dladdr(reinterpret_cast<void*>(pc), &info) && info.dli_fname) {
        char buf[32];
        snprintf(buf, sizeof buf, "%lx", static_cast<unsigned long>(pc - 1 - uintptr_t(info.dli_fbase)));
        return buf;
    }
    return "";
}

std::string pc_mark(uintptr_t pc) {
    if (!pc) return "";
    if ((pc & INSTR_TAG) && !(pc & CHAIN_TAG)) {  // "@@I:n@@": instruction n of the interpreted PTX
        char buf[48];
        snprintf(buf, sizeof buf, "@@I:%lu@@", static_cast<unsigned long>(pc & ~INSTR_TAG));
        return buf;
    }
    std::string offs;
    if (pc & CHAIN_TAG) {  // "@@PC:a|b|c@@": the message names the first of them in the learner's file
        std::array<uintptr_t, CHAIN_DEPTH> chain{};
        {
            std::lock_guard<std::mutex> lock(g_chain_mu);
            const size_t i = pc & ~CHAIN_TAG;
            if (i < g_chains.size()) chain = g_chains[i];
        }
        for (uintptr_t f : chain) {
            const std::string o = offset_of(f);
            if (!o.empty()) offs += (offs.empty() ? "" : "|") + o;
        }
    } else {
        offs = offset_of(pc);
    }
    return offs.empty() ? "" : "@@PC:" + offs + "@@";
}

static std::string dims3(uint3 v, dim3 of) {
    char buf[64];
    if (of.y == 1 && of.z == 1) snprintf(buf, sizeof buf, "(%u)", v.x);
    else if (of.z == 1) snprintf(buf, sizeof buf, "(%u, %u)", v.x, v.y);
    else snprintf(buf, sizeof buf, "(%u, %u, %u)", v.x, v.y, v.z);
    return buf;
}

std::string thread_desc(const Block& b, int t) {
    return "thread " + dims3(b.threads[t].tid, b.launch->block);
}
std::string block_desc(const Block& b) { return "block " + dims3(b.bid, b.launch->grid); }

std::string smem_desc(const Block& b, uint32_t addr) {
    std::string what;
    for (const auto& a : b.allocs) {
        if (addr >= a.offset && addr < a.offset + a.size) {
            char buf[96];
            snprintf(buf, sizeof buf, "@@S:%u:%u@@", unsigned(&a - b.allocs.data()), addr - a.offset);
            what = buf;
            break;
        }
    }
    if (what.empty()) {
        char buf[64];
        snprintf(buf, sizeof buf, "shared address 0x%x", addr);
        what = buf;
    }
    // An mbarrier's bytes have no name of their own (a field of a struct in dynamic shared memory): say where
    // the kernel initialised it, which names it in the learner's words.
    auto it = b.mbars.find(addr);
    if (it != b.mbars.end() && it->second.init_pc) what += " (the mbarrier initialised" + pc_mark(it->second.init_pc) + ")";
    return what;
}

static std::string allocs_json(const Block& b) {
    std::string o = "[";
    for (size_t i = 0; i < b.allocs.size(); ++i) {
        const auto& a = b.allocs[i];
        char buf[160];
        snprintf(buf, sizeof buf, ", \"offset\": %u, \"size\": %u, \"elem\": %d, \"dims\": [%d, %d, %d, %d], \"rank\": %d}",
                 a.offset, a.size, a.shape.elem, a.shape.dims[0], a.shape.dims[1], a.shape.dims[2], a.shape.dims[3],
                 a.shape.rank);
        o += (i ? ", " : "") + std::string("{\"name\": ") + json_str(a.name) + buf;
    }
    return o + "]";
}

std::string error_json(const std::string& kind, const std::string& message) {
    Block* b = t_block;
    const bool note = b && !b->phase_note.empty() && (kind == "race" || kind == "async");
    std::string o = "{\"kind\": " + json_str(kind) + ", \"message\": " +
                    json_str(!note ? message
                             : message + (message.ends_with('?') || message.ends_with('.') ? " " : ". ") + "Note: " +
                                   b->phase_note);
    if (b) {
        o += ", \"block\": [" + std::to_string(b->bid.x) + ", " + std::to_string(b->bid.y) + ", " +
             std::to_string(b->bid.z) + "]";
        if (b->cur) {
            const uint3 t = b->cur->tid;
            o += ", \"thread\": [" + std::to_string(t.x) + ", " + std::to_string(t.y) + ", " + std::to_string(t.z) + "]";
        }
        o += ", \"shared\": " + allocs_json(*b);
    }
    return o + "}";
}

[[noreturn]] static void abort_to_scheduler() {
    Block* b = t_block;
    b->aborted = true;
    setcontext(&b->sched);
    std::abort();
}

static void record_error(const std::string& json) {
    Launch* L = g_launch;
    std::lock_guard<std::mutex> lock(L->mu);
    if (!L->failed.exchange(true)) L->error = json;
}

[[noreturn]] void fail_json(const std::string& json) {
    record_error(json);
    Block* b = t_block;
    if (b && b->cur) abort_to_scheduler();
    throw std::runtime_error("tkemu failure outside a fiber");
}

static std::string vformat(const char* fmt, va_list ap) {
    char buf[4096];
    vsnprintf(buf, sizeof buf, fmt, ap);
    return buf;
}

void fail(const char* kind, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::string msg = vformat(fmt, ap);
    va_end(ap);
    Block* b = t_block;
    if (b && b->cur) msg = thread_desc(*b, b->cur->id) + " of " + block_desc(*b) + ": " + msg + pc_mark(b->cur->pc);
    fail_json(error_json(kind, msg));
}

void not_emulated(const char* instruction, const char* why) {
    fail("not_emulated", "the PTX instruction `%s` is not emulated on the CPU (%s)", instruction, why);
}

void warn(const std::string& kind, const std::string& message, uintptr_t pc) {
    Launch* L = g_launch;
    std::lock_guard<std::mutex> lock(L->mu);
    if (L->n_warnings >= 8) return;
    if (L->warnings.find(json_str(kind)) != std::string::npos) return;  // one of each kind is enough
    L->n_warnings++;
    L->warnings += (L->warnings.empty() ? "" : ", ") + std::string("{\"kind\": ") + json_str(kind) +
                   ", \"message\": " + json_str(message + pc_mark(pc)) +
                   (t_block ? ", \"shared\": " + allocs_json(*t_block) : std::string()) + "}";
}

// ---- scheduling --------------------------------------------------------------------------------------------
static void yield_to_scheduler() {
    Block* b = t_block;
    Thread* t = b->cur;
    swapcontext(&t->ctx, &b->sched);
    // resumed: the scheduler has set threadIdx
}

void block_current(int state, const char* what, uint64_t addr, uint64_t detail) {
    Block* b = t_block;
    Thread* t = b->cur;
    t->state = state;
    t->wait_what = what;
    t->wait_addr = addr;
    t->wait_detail = detail;
    if (state == POLLING) t->poll_epoch = b->epoch;
    yield_to_scheduler();
}

void wake(Block& b, int t) {
    if (b.threads[t].state != EXITED) b.threads[t].state = RUNNABLE;
}

void yield_now() {
    Block* b = t_block;
    if (!b || !b->cur) return;
    b->cur->state = RUNNABLE;
    yield_to_scheduler();
}

static void check_deadline(Block& b);
void check_deadline_now(Block& b) { check_deadline(b); }

static void check_deadline(Block& b) {
    if (b.launch->deadline > 0 && now() > b.launch->deadline) {
        std::string msg = "the time limit ran out while running " + block_desc(b) +
                          " (an endless loop, or a spin-wait on a value no thread ever writes?)";
        if (b.cur && g_interp)  // the interpreter watches the clock itself: it knows the instruction that was running
            msg = thread_desc(b, b.cur->id) + " of " + block_desc(b) + " was still running" + pc_mark(b.cur->pc) +
                  " when the time limit ran out: an endless loop (a loop whose bound never changes, a spin-wait on a "
                  "value no thread writes)?";
        else if (b.cur)
            msg = thread_desc(b, b.cur->id) + " of " + block_desc(b) + " was running" + pc_mark(b.cur->pc) +
                  ": the time limit ran out (an endless loop, or a spin-wait on a value no thread writes?)";
        fail_json(error_json("timeout", msg));
    }
    if (b.launch->failed.load() && b.cur) abort_to_scheduler();
}

// ---- vector clocks ----------------------------------------------------------------------------------------
uint32_t clock_of(Block& b, int t) { return b.race ? b.vc[size_t(t) * b.n + t] : 0; }

void vc_join_into(Block& b, std::vector<uint32_t>& dst, int t) {
    if (!b.race) return;
    if (dst.size() != size_t(b.n)) dst.assign(b.n, 0);
    const uint32_t* v = &b.vc[size_t(t) * b.n];
    for (int i = 0; i < b.n; ++i) dst[i] = std::max(dst[i], v[i]);
}
void vc_acquire(Block& b, int t, const std::vector<uint32_t>& src) {
    if (!b.race || src.size() != size_t(b.n)) return;
    uint32_t* v = &b.vc[size_t(t) * b.n];
    for (int i = 0; i < b.n; ++i) v[i] = std::max(v[i], src[i]);
}
void vc_tick(Block& b, int t) {
    if (b.race) b.vc[size_t(t) * b.n + t]++;
}
void vc_sync_group(Block& b, const std::vector<int>& members) {
    if (!b.race) return;
    std::vector<uint32_t> j(b.n, 0);
    for (int t : members) vc_join_into(b, j, t);
    for (int t : members) {
        std::memcpy(&b.vc[size_t(t) * b.n], j.data(), sizeof(uint32_t) * b.n);
        vc_tick(b, t);
    }
}

// ---- barriers ---------------------------------------------------------------------------------------------
static void release_barrier(Block& b, NamedBarrier& nb) {
    if (g_trace_on) trace_barrier_release(b, int(&nb - b.bars), nb.waiters, nb.arrivers);
    std::vector<int> members = nb.waiters;
    members.insert(members.end(), nb.arrivers.begin(), nb.arrivers.end());
    int count = 0, all = 1, any = 0;  // __syncthreads_count / _and / _or over this generation
    for (int t : members) {
        count += b.threads[t].red_pred;
        all &= b.threads[t].red_pred;
        any |= b.threads[t].red_pred;
    }
    for (int t : members) {
        b.threads[t].red_result[0] = count;
        b.threads[t].red_result[1] = all;
        b.threads[t].red_result[2] = any;
        b.threads[t].red_pred = 0;
    }
    if (b.race) {
        std::vector<uint32_t> j(b.n, 0);
        for (int t : members) vc_join_into(b, j, t);
        for (int t : nb.waiters) std::memcpy(&b.vc[size_t(t) * b.n], j.data(), sizeof(uint32_t) * b.n);
        for (int t : members) vc_tick(b, t);
    }
    for (int t : nb.waiters) wake(b, t);
    nb.waiters.clear();
    nb.arrivers.clear();
    nb.arrived = 0;
    nb.expected = 0;
    nb.whole_block = false;
    b.epoch++;
}

static bool barrier_complete(const Block& b, const NamedBarrier& nb) {
    const int exited = nb.whole_block ? b.exited : 0;  // exited threads count as arrived at __syncthreads
    return nb.arrived > 0 && nb.arrived + exited >= nb.expected;
}

static void barrier_arrive(unsigned id, int count, bool wait) {
    Block* b = t_block;
    Thread* t = b->cur;
    if (id >= 16) fail("invalid", "barrier id %u: the hardware has named barriers 0..15", id);
    if (count > 0 && count % 32) fail("invalid", "bar.sync/bar.arrive thread count %d is not a multiple of 32", count);
    NamedBarrier& nb = b->bars[id];
    const int expected = count > 0 ? count : b->n;
    if (nb.arrived == 0) {
        nb.expected = expected;
        nb.whole_block = count <= 0;
    } else if (nb.expected != expected) {
        fail("invalid", "barrier %u used with %d threads while other threads wait on it with %d", id, expected,
             nb.expected);
    }
    nb.arrived++;
    if (g_trace_on) trace_barrier_arrive(*b, t->id);
    (wait ? nb.waiters : nb.arrivers).push_back(t->id);
    if (barrier_complete(*b, nb)) {
        release_barrier(*b, nb);
        return;
    }
    if (wait) {
        const char* what = id == 0 && count <= 0 ? "__syncthreads()" : "a named barrier (bar.sync)";
        block_current(BLOCKED, what, id, 0);
    }
}

void bar_sync(unsigned id, int count) {
    TKEMU_ENTER();
    barrier_arrive(id, count, true);
    if (Block* b = t_block; b && b->cur) b->cur->last_bar_pc = b->cur->pc;
}
void bar_arrive(unsigned id, int count) {
    TKEMU_ENTER();
    if (count <= 0) fail("invalid", "bar.arrive needs a thread count");
    barrier_arrive(id, count, false);
}

int bar_red(int op, unsigned id, int pred) {
    TKEMU_ENTER();
    Block* b = t_block;
    b->cur->red_pred = pred != 0;
    barrier_arrive(id, 0, true);
    return b->cur->red_result[op];
}

// ---- warp collectives -----------------------------------------------------------------------------------------
void collective(int scope, int kind, const char* what, unsigned mask, void* data,
                const std::function<void(Block&, Rendezvous&)>& exec) {
    Block* b = t_block;
    Thread* me = b->cur;
    const int group = me->id / scope, first = group * scope;
    Rendezvous& rv = scope == 32 ? b->warp_rv[group] : b->wg_rv[group];
    const int pos = me->id - first;
    if (scope == 32 && !((mask >> pos) & 1u))
        fail("invalid", "%s with mask 0x%08x does not include this thread's lane %d", what, mask, pos);
    if (rv.n_arrived == 0) {
        rv.kind = kind;
        rv.what = what;
        rv.mask = mask;
        rv.expected[0] = rv.expected[1] = 0;
        rv.n_expected = 0;
        for (int i = 0; i < scope; ++i) {
            const int t = first + i;
            if (t >= b->n) break;
            if (scope == 32 && !((mask >> i) & 1u)) continue;
            rv.expected[i / 64] |= uint64_t(1) << (i % 64);
            rv.n_expected++;
        }
    } else if (rv.kind != kind) {
        fail("invalid", "%s is not what the rest of its %s is doing: they wait at %s (divergent warp-wide code)",
             what, scope == 32 ? "warp" : "warpgroup", rv.what);
    } else if (scope == 32 && rv.mask != mask) {
        fail("invalid", "%s with mask 0x%08x while other lanes of the warp use mask 0x%08x", what, mask, rv.mask);
    }
    for (int i = 0; i < scope; ++i) {
        const int t = first + i;
        if (t < b->n && ((rv.expected[i / 64] >> (i % 64)) & 1u) && b->threads[t].state == EXITED)
            fail("deadlock", "%s waits for %s %d of its %s, which has already exited", what,
                 scope == 32 ? "lane" : "thread", i, scope == 32 ? "warp" : "warpgroup");
    }
    rv.data[pos] = data;
    rv.arrived[pos / 64] |= uint64_t(1) << (pos % 64);
    rv.n_arrived++;
    if (rv.n_arrived == rv.n_expected) {
        exec(*b, rv);
        std::vector<int> members;
        for (int i = 0; i < scope; ++i)
            if ((rv.expected[i / 64] >> (i % 64)) & 1u) members.push_back(first + i);
        vc_sync_group(*b, members);
        for (int t : members)
            if (t != me->id) wake(*b, t);
        rv.n_arrived = 0;
        rv.arrived[0] = rv.arrived[1] = 0;
        rv.kind = -1;
        b->epoch++;
        return;
    }
    block_current(BLOCKED, what, uint64_t(first), 0);
}

namespace {
struct ShflData {
    uint64_t value, result;
    int mode, lane, width;
};
}  // namespace

uint64_t shfl(unsigned mask, uint64_t value, int mode, int lane, int width) {
    TKEMU_ENTER();
    ShflData d{value, 0, mode, lane, width};
    collective(32, 1, "a warp shuffle (__shfl_sync)", mask, &d, [](Block&, Rendezvous& rv) {
        for (int i = 0; i < 32; ++i) {
            if (!((rv.expected[0] >> i) & 1u)) continue;
            auto* di = static_cast<ShflData*>(rv.data[i]);
            const int w = (di->width <= 0 || di->width > 32) ? 32 : di->width;
            const int base = i & ~(w - 1);
            int src = i;
            switch (di->mode) {
                case 0: src = base + (di->lane & (w - 1)); break;
                case 1: src = (i - base) >= di->lane ? i - di->lane : i; break;
                case 2: src = (i - base) + di->lane < w ? i + di->lane : i; break;
                default: src = ((i ^ di->lane) - base) < w && ((i ^ di->lane) >= base) ? (i ^ di->lane) : i; break;
            }
            const bool have = (rv.expected[0] >> src) & 1u;
            di->result = have ? static_cast<ShflData*>(rv.data[src])->value : di->value;
        }
    });
    return d.result;
}

namespace {
struct VoteData {
    uint64_t value;
    int pred;
    unsigned result;
    int flag;
};
}  // namespace

unsigned vote(unsigned mask, int pred, int mode) {
    TKEMU_ENTER();
    VoteData d{0, pred != 0, 0, 0};
    collective(32, 2, mode == 0 ? "__ballot_sync" : mode == 1 ? "__any_sync" : "__all_sync", mask, &d,
               [mode](Block&, Rendezvous& rv) {
                   unsigned ballot = 0;
                   for (int i = 0; i < 32; ++i)
                       if (((rv.expected[0] >> i) & 1u) && static_cast<VoteData*>(rv.data[i])->pred) ballot |= 1u << i;
                   const unsigned all = unsigned(rv.expected[0]);
                   const unsigned r = mode == 0 ? ballot : mode == 1 ? unsigned(ballot != 0) : unsigned(ballot == all);
                   for (int i = 0; i < 32; ++i)
                       if ((rv.expected[0] >> i) & 1u) static_cast<VoteData*>(rv.data[i])->result = r;
               });
    return d.result;
}

unsigned match_any(unsigned mask, uint64_t value) {
    TKEMU_ENTER();
    VoteData d{value, 0, 0, 0};
    collective(32, 3, "__match_any_sync", mask, &d, [](Block&, Rendezvous& rv) {
        for (int i = 0; i < 32; ++i) {
            if (!((rv.expected[0] >> i) & 1u)) continue;
            auto* di = static_cast<VoteData*>(rv.data[i]);
            unsigned m = 0;
            for (int j = 0; j < 32; ++j)
                if (((rv.expected[0] >> j) & 1u) && static_cast<VoteData*>(rv.data[j])->value == di->value) m |= 1u << j;
            di->result = m;
        }
    });
    return d.result;
}

unsigned match_all(unsigned mask, uint64_t value, int* pred) {
    TKEMU_ENTER();
    VoteData d{value, 0, 0, 0};
    collective(32, 4, "__match_all_sync", mask, &d, [](Block&, Rendezvous& rv) {
        bool same = true;
        int first = -1;
        for (int i = 0; i < 32; ++i) {
            if (!((rv.expected[0] >> i) & 1u)) continue;
            if (first < 0) first = i;
            same = same && static_cast<VoteData*>(rv.data[i])->value == static_cast<VoteData*>(rv.data[first])->value;
        }
        for (int i = 0; i < 32; ++i) {
            if (!((rv.expected[0] >> i) & 1u)) continue;
            auto* di = static_cast<VoteData*>(rv.data[i]);
            di->result = same ? unsigned(rv.expected[0]) : 0u;
            di->flag = same;
        }
    });
    if (pred) *pred = d.flag;
    return d.result;
}

void syncwarp(unsigned mask) {
    TKEMU_ENTER();
    collective(32, 5, "__syncwarp", mask, nullptr, [](Block&, Rendezvous&) {});
}

int ptx_laneid() { return t_block->cur->id % 32; }
int ptx_warpid() { return t_block->cur->id / 32; }

unsigned activemask() {
    Block* b = t_block;
    const int first = (b->cur->id / 32) * 32;
    unsigned m = 0;
    for (int i = 0; i < 32 && first + i < b->n; ++i)
        if (b->threads[first + i].state != EXITED) m |= 1u << i;
    return m;
}

// ---- shared memory --------------------------------------------------------------------------------------------
uint32_t smem_addr(const void* p) {
    TKEMU_ENTER();
    Block* b = t_block;
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    if (!b || a < uintptr_t(b->arena) || a >= uintptr_t(b->arena) + ARENA_BYTES)
        fail("invalid", "__cvta_generic_to_shared / smem address of a pointer that is not in shared memory (%p)", p);
    return uint32_t(a - uintptr_t(b->arena));
}

bool is_shared(const void* p) {
    Block* b = t_block;
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    return b && a >= uintptr_t(b->arena) && a < uintptr_t(b->arena) + ARENA_BYTES;
}

char* smem_at(Block& b, uint32_t addr, uint32_t bytes, const char* what) {
    const uint64_t end = uint64_t(addr) + bytes;
    const bool low = addr >= RESERVED && end <= b.static_top;
    const bool high = addr >= b.global_bottom && end <= RESERVED + b.limit;
    if (!low && !high) {
        fail("out_of_bounds", "%s: shared address 0x%x (%u bytes) is outside the block's shared memory "
             "(0x%x..0x%x in use)", what, addr, bytes, RESERVED, b.static_top);
    }
    return b.arena + addr;
}

void* smem_ptr(uint64_t addr, uint32_t bytes, const char* what) {
    Block* b = t_block;
    if (addr >= ARENA_BYTES) fail("out_of_bounds", "%s: 0x%llx is not a shared-memory address", what, (unsigned long long)addr);
    return smem_at(*b, uint32_t(addr), bytes, what);
}

void* dynamic_shared() {
    Block* b = t_block;
    return b->arena + RESERVED;
}

static void* shared_alloc(const void* key, size_t size, size_t align, const char* name, bool top,
                          const ShapeInfo* shape) {
    Block* b = t_block;
    for (const auto& a : (top ? b->gallocs : b->allocs))
        if (a.key == key) return b->arena + a.offset;
    if (align < 16) align = 16;
    uint32_t off;
    if (!top) {
        off = uint32_t((b->static_top + align - 1) / align * align);
        if (off + size > b->global_bottom)
            fail("invalid", "out of shared memory: __shared__ %s (%zu bytes) does not fit beside %u bytes of dynamic "
                 "and %u bytes of other static shared memory (at most %u per block on this GPU)", name, size,
                 b->dyn_bytes, b->static_top - RESERVED - b->dyn_bytes, b->limit);
        b->static_top = off + uint32_t(size);
        b->allocs.push_back({name, off, uint32_t(size), key, shape ? *shape : ShapeInfo{0, -1, {0, 0, 0, 0}}});
    } else {
        off = uint32_t((b->gbottom - size) / align * align);
        if (off < b->static_top) fail("invalid", "out of shared memory for __shared__ %s", name);
        b->gbottom = off;
        b->global_bottom = std::min(b->global_bottom, off);
        b->gallocs.push_back({name, off, uint32_t(size), key, shape ? *shape : ShapeInfo{0, -1, {0, 0, 0, 0}}});
        b->allocs.push_back(b->gallocs.back());
    }
    return b->arena + off;
}
void* shared_static(const void* key, size_t size, size_t align, const char* name, const ShapeInfo* shape) {
    return shared_alloc(key, size, align, name, false, shape);
}
void* shared_global(const void* key, size_t size, size_t align, const char* name, const ShapeInfo* shape) {
    return shared_alloc(key, size, align, name, true, shape);
}

// ---- race detection on shared memory --------------------------------------------------------------------------
static const char* kind_text(bool first_write, bool second_write) {
    if (first_write && second_write) return "write-after-write";
    if (first_write) return "read-after-write";
    return "write-after-read";
}

void shadow_access(Block& b, int t, uint32_t clk, uint32_t addr, uint32_t bytes, bool write, uintptr_t pc,
                   const char* what, bool async) {
    if (!b.race) return;
    const uint32_t* vct = &b.vc[size_t(t) * b.n];
    for (uint32_t i = 0; i < bytes; ++i) {
        Shadow& s = b.shadow[addr + i];
        // Asynchronous hazards first: a load in flight will still write this byte, or a wgmma group / TMA
        // store in flight may still read it.
        if ((s.flags & SH_PENDING) || (write && s.areads)) async_hazard(b, t, addr + i, write, pc, what);
        if (async && !write && (s.flags & SH_GENERIC) && s.wtid != NONE && s.wclk > b.threads[s.wtid].fence_clk) {
            const std::string msg =
                "missing fence.proxy.async on " + smem_desc(b, addr + i) + " in " + block_desc(b) + ": " +
                thread_desc(b, s.wtid) + " wrote it with an ordinary store" + pc_mark(s.wpc) + ", and " +
                (what && *what ? std::string(what) : std::string("the async proxy")) + " reads it" + pc_mark(pc) +
                " (issued by " + thread_desc(b, t) + "), with no fence.proxy.async (tk::fence_proxy_async()) by the "
                "writing thread in between: TMA and wgmma read shared memory through the async proxy, which does not "
                "see ordinary stores without that fence";
            fail_json(error_json("async", msg));
        }
        int other = -1;
        bool other_write = false;
        uintptr_t other_pc = 0;
        if (write && (s.flags & SH_WGMMA_READ) && s.wgr != NONE) {  // after every warp's wait, not only the last
            const WgRetired& r = b.wg_retired[s.wgr];
            for (int w = 0; w < 4 && other < 0; ++w)
                if (r.tid[w] != t && vct[r.tid[w]] < r.clk[w]) other = r.tid[w], other_pc = r.pc[w];
        }
        if (other < 0 && s.wtid != NONE && s.wtid != t && vct[s.wtid] < s.wclk) {
            other = s.wtid; other_write = true; other_pc = s.wpc;
        } else if (other < 0 && write && s.rtid != NONE && s.rtid != t && vct[s.rtid] < s.rclk) {
            other = s.rtid; other_write = false; other_pc = s.rpc;
        }
        if (other >= 0 && !other_write && (s.flags & SH_WGMMA_READ)) {
            const std::string msg =
                "asynchronous hazard (write-after-read) on " + smem_desc(b, addr + i) + " in " + block_desc(b) + ": " +
                "a wgmma group read it until the wgmma.wait_group" + pc_mark(other_pc) + " of " +
                thread_desc(b, other) + "'s warp retired it (each warp's wait retires only that warp's part of the "
                "group), and " + thread_desc(b, t) + " wrote it" + pc_mark(pc) +
                (what && *what ? std::string(" (") + what + ")" : std::string()) +
                " with nothing ordering that wait before the write: was the stage handed back (mbarrier arrive / "
                "release) or refilled before every warp's wgmma group that reads it was waited for (a __syncthreads() "
                "or one arrive per warp after the wait)?";
            fail_json(error_json("async", msg));
        }
        if (other >= 0) {
            const std::string where = smem_desc(b, addr + i);
            const bool same_warp = other / 32 == t / 32;
            // Interpreted, code addresses are instruction numbers: a second access that lies before the first in
            // the code was made on a later pass of a loop (the next iteration's write racing this one's read).
            // ... and one that follows the first in the code with a barrier this thread passed between them (in
            // the code) was made on a different pass too: the barrier would have ordered the same pass.
            const auto index = [](uintptr_t p) { return (p & INSTR_TAG) && !(p >> 63) ? int64_t(p & ~INSTR_TAG) : -1; };
            const int64_t now_i = index(pc), other_i = index(other_pc), bar_i = index(b.threads[t].last_bar_pc);
            const bool across = now_i >= 0 && other_i >= 0 &&
                                (now_i < other_i || (bar_i > other_i && bar_i < now_i));
            std::string msg = "shared-memory race (" + std::string(kind_text(other_write, write)) + ") on " + where +
                              " in " + block_desc(b) + ": " + thread_desc(b, other) +
                              (other_write ? " wrote it" : " read it") + pc_mark(other_pc) + ", and " +
                              thread_desc(b, t) + (write ? " wrote it" : " read it") + pc_mark(pc) +
                              (what && *what ? std::string(" (") + what + ")" : std::string()) +
                              ", with nothing ordering the two: " +
                              (write && what && std::strstr(what, "TMA load") && !other_write
                                   ? std::string("the refill of a stage must come after every read of it: the readers "
                                                 "hand the stage back with an mbarrier arrive made after all their "
                                                 "reads (one lane arriving for its warp needs a __syncwarp() before "
                                                 "it), and the producer waits on that barrier, with this round's "
                                                 "phase, before it refills") :
                               same_warp ? "a missing __syncthreads() (or mbarrier wait) between them, or, if only "
                                           "this warp reaches them (one role's branch), a __syncwarp(): both are "
                                           "lanes of one warp"
                                         : "a missing __syncthreads() (or mbarrier wait) between them") +
                              (across ? ". The two were made on different passes of the loop (the second lies "
                                        "before the first in the code, or a barrier between them in the code did "
                                        "not order them): the race crosses iterations, one thread an iteration ahead "
                                        "of the other; a barrier after the last access of an iteration, before the "
                                        "loop comes round to the first, orders them"
                                      : "");
            fail_json(error_json("race", msg));
        }
        if (!write && s.wtid == NONE && s.rtid == NONE) {
            warn("uninitialized", thread_desc(b, t) + " of " + block_desc(b) + " read " + smem_desc(b, addr + i) +
                 " before any thread wrote it (shared memory starts as garbage; is a copy or a __syncthreads() "
                 "missing?)", pc);
        }
        if (write) {
            s.wtid = uint16_t(t); s.wclk = clk; s.wpc = pc;
            s.rtid = NONE;
            s.flags = uint8_t((async ? s.flags & ~SH_GENERIC : s.flags | SH_GENERIC) & ~SH_WGMMA_READ);
        } else {
            s.rtid = uint16_t(t); s.rclk = clk; s.rpc = pc;
            s.flags &= uint8_t(~SH_WGMMA_READ);
        }
    }
}

// ---- global bounds ----------------------------------------------------------------------------------------------
bool global_in_buffer(uintptr_t addr, size_t bytes) {
    if (!g_lo || addr - g_lo >= SLOTS * SLOT_BYTES) return false;
    const Buffer& buf = g_buffers[(addr - g_lo) / SLOT_BYTES];
    return buf.mapped && addr >= buf.base && addr + bytes <= buf.base + buf.bytes && addr + bytes >= addr;
}

// The array an address far outside every argument most likely ran off: the mapped one nearest below it (-1: none).
static int nearest_below(uintptr_t addr) {
    int near = -1;
    for (int s = 0; s < SLOTS; ++s)
        if (g_buffers[s].mapped && g_buffers[s].base <= addr && (near < 0 || g_buffers[s].base > g_buffers[near].base))
            near = s;
    return near;
}

void global_check(uintptr_t addr, size_t bytes, bool write, uintptr_t pc, const char* what) {
    // Native kernels also touch their own stack and the runtime's memory, so addresses outside every slot pass
    // here; an interpreted kernel has nothing but its buffers, so there they do not.
    if (!g_interp && (!g_lo || addr - g_lo >= SLOTS * SLOT_BYTES)) return;
    if (g_interp && (!g_lo || addr - g_lo >= SLOTS * SLOT_BYTES)) {
        // Far outside every argument: name the array it most likely ran off (the nearest one below it), as a
        // native kernel's fault there is named.
        Block* b = t_block;
        const std::string who = b && b->cur ? thread_desc(*b, b->cur->id) + " of " + block_desc(*b) : "a thread";
        const std::string note = what && *what ? std::string(" (") + what + ")" : std::string();
        const int near = nearest_below(addr);
        char buf[200];
        if (near >= 0) {
            snprintf(buf, sizeof buf, " %s %zu bytes at address %#lx, far outside the kernel's arrays: @@G:%d:%lld:%zu@@",
                     write ? "wrote" : "read", bytes, static_cast<unsigned long>(addr), near,
                     (long long)(addr - g_buffers[near].base), bytes);
            fail_json(error_json("out_of_bounds", who + buf + pc_mark(pc) + note));
        }
        snprintf(buf, sizeof buf, " %s %zu bytes at address %#lx, which is in none of the kernel's arrays",
                 write ? "wrote" : "read", bytes, static_cast<unsigned long>(addr));
        fail_json(error_json("invalid_address", who + buf + pc_mark(pc) + note));
    }
    const int slot = int((addr - g_lo) / SLOT_BYTES);
    const Buffer& buf = g_buffers[slot];
    if (buf.mapped && addr >= buf.base && addr + bytes <= buf.base + buf.bytes) return;
    Block* b = t_block;
    char mark[96];
    snprintf(mark, sizeof mark, "@@G:%d:%lld:%zu@@", slot, (long long)(addr - (g_lo + slot * SLOT_BYTES + SLOT_BASE)),
             bytes);
    std::string msg = (b && b->cur ? thread_desc(*b, b->cur->id) + " of " + block_desc(*b) : std::string("a thread")) +
                      (write ? " wrote " : " read ") + std::to_string(bytes) + " bytes at " + mark + pc_mark(pc) +
                      (what && *what ? std::string(" (") + what + ")" : std::string());
    fail_json(error_json("out_of_bounds", msg));
}

static inline void on_access(void* p, size_t n, bool write, uintptr_t pc, bool atomic = false) {
    Block* b = t_block;
    if (!b || !b->cur) return;
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const Thread& t = *b->cur;
    if (((a + n > t.acc_lo && a < t.acc_hi) || (a + n > t.a_lo && a < t.a_hi)) && !t.in_wgmma)
        accumulator_touch(*b, a, n, write, pc);
    const uintptr_t s = a - uintptr_t(b->arena);
    if (s < ARENA_BYTES) {
        if (s < RESERVED || s + n > RESERVED + b->limit || (s + n > b->static_top && s < b->global_bottom)) {
            b->cur->pc = pc;
            fail("out_of_bounds", "%s %zu bytes at shared address 0x%lx, outside the block's shared memory "
                 "(0x%x..0x%x in use)", write ? "wrote" : "read", n, (unsigned long)s, RESERVED, b->static_top);
        }
        if (b->race && !atomic)  // atomics never race with each other
            shadow_access(*b, b->cur->id, clock_of(*b, b->cur->id), uint32_t(s), uint32_t(n), write, pc, "");
        if (g_trace_on && !t_trace_skip) trace_access(*b, b->cur->id, a, n, write, atomic, pc);
    } else if (g_lo && a - g_lo < SLOTS * SLOT_BYTES) {
        global_check(a, n, write, pc, "");
        if (g_trace_on && !t_trace_skip) trace_access(*b, b->cur->id, a, n, write, atomic, pc);
    }
    if ((++b->cur->accesses & 0xfff) == 0) {  // let spin-waiting threads make way, and watch the clock
        b->cur->pc = pc;
        check_deadline(*b);
        yield_now();
    }
}

void mem_check(const void* p, size_t bytes, bool write) {
    on_access(const_cast<void*>(p), bytes, write, uintptr_t(__builtin_return_address(0)));
}

// ---- atomics -----------------------------------------------------------------------------------------------------
template <typename T>
static T cas_loop(void* p, const std::function<T(T)>& f) {
    T* q = static_cast<T*>(p);
    T old = __atomic_load_n(q, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(q, &old, f(old), false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
    }
    return old;
}

// The operations 32- and 64-bit words share, on the width's own types (U: the word, F: its float for A_FADD /
// A_DADD); atomicSub/Inc/Dec exist for 32-bit words only, as in CUDA. False: not an operation of this width.
template <typename U, typename F>
static bool atomic_word(void* p, int op, U x, U cmp, uint64_t& old) {
    using S = std::make_signed_t<U>;
    static_assert(sizeof(U) == sizeof(F));
    U* q = static_cast<U*>(p);
    auto fl = [](U u) { F f; std::memcpy(&f, &u, sizeof f); return f; };
    auto bits = [](F f) { U u; std::memcpy(&u, &f, sizeof u); return u; };
    switch (op) {
        case A_ADD: old = __atomic_fetch_add(q, x, __ATOMIC_SEQ_CST); return true;
        case A_EXCH: old = __atomic_exchange_n(q, x, __ATOMIC_SEQ_CST); return true;
        case A_AND: old = __atomic_fetch_and(q, x, __ATOMIC_SEQ_CST); return true;
        case A_OR: old = __atomic_fetch_or(q, x, __ATOMIC_SEQ_CST); return true;
        case A_XOR: old = __atomic_fetch_xor(q, x, __ATOMIC_SEQ_CST); return true;
        case A_MIN_S: old = cas_loop<U>(p, [&](U o) { return S(o) < S(x) ? o : x; }); return true;
        case A_MAX_S: old = cas_loop<U>(p, [&](U o) { return S(o) > S(x) ? o : x; }); return true;
        case A_MIN_U: old = cas_loop<U>(p, [&](U o) { return o < x ? o : x; }); return true;
        case A_MAX_U: old = cas_loop<U>(p, [&](U o) { return o > x ? o : x; }); return true;
        case A_CAS: {
            U expected = cmp;
            __atomic_compare_exchange_n(q, &expected, x, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
            old = expected;
            return true;
        }
        default: break;
    }
    if (op == (sizeof(U) == 4 ? A_FADD : A_DADD)) {
        old = cas_loop<U>(p, [&](U o) { return bits(fl(o) + fl(x)); });
        return true;
    }
    if constexpr (sizeof(U) == 4) {
        switch (op) {
            case A_SUB: old = __atomic_fetch_sub(q, x, __ATOMIC_SEQ_CST); return true;
            case A_INC: old = cas_loop<U>(p, [&](U o) { return o >= x ? 0u : o + 1; }); return true;
            case A_DEC: old = cas_loop<U>(p, [&](U o) { return (o == 0 || o > x) ? x : o - 1; }); return true;
            default: break;
        }
    }
    return false;
}

uint64_t atomic_rmw(void* p, int bytes, int op, uint64_t v, uint64_t cmp) {
    on_access(p, size_t(bytes), true, uintptr_t(__builtin_return_address(0)), true);
    uint64_t old = 0;
    if (bytes == 4) {
        const uint32_t x = uint32_t(v);
        if (atomic_word<uint32_t, float>(p, op, x, uint32_t(cmp), old)) return old;
        if (op == A_HADD2 || op == A_BADD2) return cas_loop<uint32_t>(p, [&](uint32_t o) {
            uint32_t r = 0;
            for (int h = 0; h < 2; ++h) {
                const uint16_t a = uint16_t(o >> (16 * h)), c = uint16_t(x >> (16 * h));
                const uint16_t s = op == A_HADD2 ? f32_to_f16(f16_to_f32(a) + f16_to_f32(c))
                                                 : f32_to_bf16(bf16_to_f32(a) + bf16_to_f32(c));
                r |= uint32_t(s) << (16 * h);
            }
            return r;
        });
    } else if (bytes == 8) {
        if (atomic_word<uint64_t, double>(p, op, v, cmp, old)) return old;
    } else if (bytes == 2) {
        switch (op) {
            case A_HADD: case A_BADD: return cas_loop<uint16_t>(p, [&](uint16_t o) {
                const uint16_t c = uint16_t(v);
                return op == A_HADD ? f32_to_f16(f16_to_f32(o) + f16_to_f32(c)) : f32_to_bf16(bf16_to_f32(o) + bf16_to_f32(c));
            });
            case A_CAS: {
                uint16_t expected = uint16_t(cmp);
                __atomic_compare_exchange_n(static_cast<uint16_t*>(p), &expected, uint16_t(v), false, __ATOMIC_SEQ_CST,
                                            __ATOMIC_SEQ_CST);
                return expected;
            }
            default: break;
        }
    }
    fail("not_emulated", "atomic operation %d on %d bytes", op, bytes);
}

// ---- misc ------------------------------------------------------------------------------------------------------------
long long clock64() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}
uint64_t globaltimer() { return uint64_t(clock64()); }
void trap() {
    TKEMU_ENTER();
    fail("trap", "the kernel executed __trap() / trap");
}
void assert_fail(const char* expr, const char* file, int line) {
    TKEMU_ENTER();
    fail("assert", "assertion `%s` failed (%s:%d)", expr, file, line);
}
int device_printf(const char* fmt, ...) {
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    std::lock_guard<std::mutex> lock(g_out_mu);
    if (g_output.size() < (1u << 20)) g_output += buf;
    return n;
}

// ---- running blocks -------------------------------------------------------------------------------------------------
static void fiber_main() {
    Block* b = t_block;
    Thread* t = b->cur;
    b->launch->entry(b->launch->args);
    TKEMU_ENTER();
    flush_thread(*b, *t);
    t->state = EXITED;
    b->exited++;
    b->epoch++;
    for (auto& nb : b->bars)
        if (nb.whole_block && barrier_complete(*b, nb)) release_barrier(*b, nb);
    swapcontext(&t->ctx, &b->sched);
    std::abort();
}

static Block* worker_block(int slot, const Launch& L) {
    static std::mutex mu;
    static std::vector<Block*> pool;
    std::lock_guard<std::mutex> lock(mu);
    while (int(pool.size()) <= slot) pool.push_back(new Block());
    Block* b = pool[slot];
    if (!b->arena) {
        void* arena = mmap(nullptr, ARENA_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        void* shadow = mmap(nullptr, sizeof(Shadow) * ARENA_BYTES, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        b->arena = static_cast<char*>(arena);
        b->shadow = static_cast<Shadow*>(shadow);
        b->altstack = static_cast<char*>(std::malloc(1 << 16));
    }
    const int n = int(L.block.x * L.block.y * L.block.z);
    while (int(b->stacks.size()) < n) {
        void* s = mmap(nullptr, STACK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        mprotect(s, 4096, PROT_NONE);  // guard page: a stack overflow faults instead of corrupting a neighbour
        b->stacks.push_back(static_cast<char*>(s));
    }
    return b;
}

static void run_block(Block& b, uint3 bid) {
    Launch& L = *b.launch;
    b.serial++;
    b.bid = bid;
    b.n = int(L.block.x * L.block.y * L.block.z);
    b.exited = 0;
    b.aborted = false;
    b.epoch = 0;
    b.limit = std::min<uint32_t>(L.smem_limit ? L.smem_limit : (L.arch >= 90 ? 227 : 163) * 1024, 227 * 1024);
    b.dyn_bytes = L.dyn_smem;
    b.static_top = RESERVED + ((L.dyn_smem + 15) / 16) * 16;
    b.global_bottom = std::min<uint32_t>(RESERVED + b.limit, b.gbottom);
    b.allocs.clear();
    if (L.dyn_smem) b.allocs.push_back({"dynamic shared memory", RESERVED, L.dyn_smem, nullptr});
    for (const auto& g : b.gallocs) b.allocs.push_back(g);
    if (b.static_top > b.global_bottom) {
        record_error(error_json("invalid", "out of shared memory: " + std::to_string(L.dyn_smem) + " bytes of dynamic "
                                "shared memory do not fit (at most " + std::to_string(b.limit) + " bytes per block)"));
        b.aborted = true;
        return;
    }
    for (auto& nb : b.bars) nb = NamedBarrier();
    b.mbars.clear();
    b.warp_rv.assign((b.n + 31) / 32, Rendezvous());
    b.wg_rv.assign((b.n + 127) / 128, Rendezvous());
    std::memset(b.arena, 0xff, RESERVED + b.limit);  // shared memory starts as garbage: NaN in every float type
    b.race = L.race;
    if (b.race) {
        b.vc.assign(size_t(b.n) * b.n, 0);
        for (int t = 0; t < b.n; ++t) b.vc[size_t(t) * b.n + t] = 1;
        const Shadow clean{NONE, NONE, 0, 0, 0, 0, NONE, 0, 0};
        std::fill(b.shadow, b.shadow + RESERVED + b.limit, clean);
    }
    b.inflight.clear();
    b.landed.clear();
    b.wgs.assign((b.n + 127) / 128, WgState());
    b.wg_retired.clear();
    b.phase_note.clear();
    b.protects.clear();
    blockIdx = bid;
    blockDim = L.block;
    gridDim = L.grid;
    b.threads.assign(b.n, Thread());
    for (int i = 0; i < b.n; ++i) {
        Thread& t = b.threads[i];
        t.id = i;
        t.tid = {unsigned(i % L.block.x), unsigned((i / L.block.x) % L.block.y), unsigned(i / (L.block.x * L.block.y))};
        t.stack = b.stacks[i];
        t.state = RUNNABLE;
        getcontext(&t.ctx);
        t.ctx.uc_stack.ss_sp = t.stack;
        t.ctx.uc_stack.ss_size = STACK_BYTES;
        t.ctx.uc_link = &b.sched;
        makecontext(&t.ctx, fiber_main, 0);
    }
    int live = b.n;
    auto run = [&](Thread& t) {  // one thread, on until it yields, waits, exits or fails
        b.cur = &t;
        threadIdx = t.tid;
        t.state = RUNNABLE;
        swapcontext(&b.sched, &t.ctx);
        b.cur = nullptr;
        if (t.state == EXITED) live--;
        if (L.failed.load()) b.aborted = true;
    };
    while (live > 0 && !b.aborted) {
        bool ran = false;
        for (int k = 0; k < b.n && !b.aborted; ++k) {
            const int i = L.reverse ? b.n - 1 - k : k;
            Thread& t = b.threads[i];
            if (t.state == RUNNABLE || (t.state == POLLING && t.poll_epoch != b.epoch)) {
                run(t);
                ran = true;
            }
        }
        if (b.aborted) break;
        if (!ran && live > 0 && land_all(b)) continue;  // what was in flight lands: waiters may go on
        if (!ran && live > 0) {
            // Only pollers are left and nothing changed: give them their "not yet" (a test_wait used as a
            // probe goes on), until they have polled too long with nothing changing: then it is a deadlock.
            for (int i = 0; i < b.n && !b.aborted; ++i) {
                Thread& t = b.threads[i];
                if (t.state != POLLING || t.idle_polls >= IDLE_POLL_LIMIT) continue;
                run(t);
                ran = true;
            }
            if (b.aborted) break;
        }
        if (!ran && live > 0) {
            // Nobody can move: describe who waits for what, grouped.
            std::string msg = "deadlock in " + block_desc(b) + ": no thread can make progress.";
            int i = 0;
            int shown = 0;
            while (i < b.n && shown < 6) {
                Thread& t = b.threads[i];
                if (t.state == EXITED) { ++i; continue; }
                int j = i;
                while (j + 1 < b.n && b.threads[j + 1].state == t.state && b.threads[j + 1].wait_what == t.wait_what &&
                       b.threads[j + 1].wait_addr == t.wait_addr)
                    ++j;
                char range[64];
                if (j > i) snprintf(range, sizeof range, "threads %d..%d", i, j);
                else snprintf(range, sizeof range, "thread %d", i);
                msg += std::string(" ") + range + " wait at " + t.wait_what;
                if (t.wait_what && std::strstr(t.wait_what, "mbarrier")) {
                    auto it = b.mbars.find(uint32_t(t.wait_addr));
                    msg += " on " + smem_desc(b, uint32_t(t.wait_addr));
                    if (it != b.mbars.end()) {
                        const MBar& m = it->second;
                        char buf[200];
                        snprintf(buf, sizeof buf, " for phase parity %u (it has completed %u phase%s; the current one "
                                 "still expects %u of %u arrivals and %lld transaction bytes)", unsigned(t.wait_detail & 1),
                                 m.phase, m.phase == 1 ? "" : "s", m.pending, m.expected, (long long)m.tx);
                        msg += buf;
                    }
                } else if (t.wait_what && std::strstr(t.wait_what, "barrier")) {
                    const NamedBarrier& nb = b.bars[t.wait_addr & 15];
                    char buf[160];
                    snprintf(buf, sizeof buf, " (barrier %u: %d of %d threads arrived%s)", unsigned(t.wait_addr),
                             nb.arrived + (nb.whole_block ? b.exited : 0), nb.expected,
                             b.exited ? ", counting threads that already exited" : "");
                    msg += buf;
                }
                msg += pc_mark(t.pc) + ";";
                shown++;
                i = j + 1;
            }
            if (b.exited) msg += " " + std::to_string(b.exited) + " threads have exited.";
            record_error(error_json("deadlock", msg));
            b.aborted = true;
            break;
        }
        if (b.launch->deadline > 0 && now() > b.launch->deadline) {
            record_error(error_json("timeout", "the time limit ran out while running " + block_desc(b) +
                                    " (threads keep polling a wait that never completes?)"));
            b.aborted = true;
        }
    }
    b.cur = nullptr;
}

// The handlers a launch replaced (installed once per launch by the launching thread, put back at its end).
static struct sigaction g_old_segv, g_old_bus, g_old_alarm;
#ifdef TKEMU_WATCHDOG_SIGNAL  // macOS has no real-time signals (tklab.emulate.hostos chooses; portable mode too)
static const int WATCHDOG_SIGNAL = TKEMU_WATCHDOG_SIGNAL;
#else
static const int WATCHDOG_SIGNAL = SIGRTMIN + 7;
#endif

static uintptr_t interrupted_pc(void* uc) {
    const auto* ctx = static_cast<const ucontext_t*>(uc);
#if defined(__APPLE__) && defined(__x86_64__)  // Mach-O: uc_mcontext is a pointer to the thread state
    return uintptr_t(ctx->uc_mcontext->__ss.__rip) + 1;
#elif defined(__APPLE__) && defined(__aarch64__) && !defined(__arm64e__)
    return uintptr_t(ctx->uc_mcontext->__ss.__pc) + 1;
#elif defined(__APPLE__)
    (void)ctx;
    return 0;
#elif defined(__x86_64__)
    return uintptr_t(ctx->uc_mcontext.gregs[REG_RIP]) + 1;  // +1: pc_mark() subtracts one (return addresses)
#elif defined(__aarch64__)
    return uintptr_t(ctx->uc_mcontext.pc) + 1;
#else
    (void)ctx;
    return 0;
#endif
}

static void on_watchdog(int, siginfo_t*, void* uc) {
    Block* b = t_block;
    // Not in a kernel thread, or already on the way out (a second signal may arrive while setcontext
    // unblocks it: answering it again would recurse): nothing to do.
    if (!b || !b->cur || b->aborted) return;
    const std::string msg = thread_desc(*b, b->cur->id) + " of " + block_desc(*b) + " was still running" +
                            pc_mark(interrupted_pc(uc)) + " when the time limit ran out: an endless loop (a loop "
                            "whose bound never changes, a spin-wait on a value no thread writes)?";
    record_error(error_json("timeout", msg));
    b->aborted = true;
    setcontext(&b->sched);
}

static void on_fault(int sig, siginfo_t* info, void* uc) {
    Block* b = t_block;
    if (!b || !b->cur) {
        // Not a kernel's fault: put back the previous handlers and let the fault happen again there.
        sigaction(SIGSEGV, &g_old_segv, nullptr);
        sigaction(SIGBUS, &g_old_bus, nullptr);
        return;
    }
    const uintptr_t a = reinterpret_cast<uintptr_t>(info->si_addr);
    std::string msg;
    const uintptr_t stack = uintptr_t(b->cur->stack);
    if (a >= stack && a < stack + 4096) {
        msg = thread_desc(*b, b->cur->id) + " of " + block_desc(*b) + ": stack overflow (its local arrays and "
              "registers need more than the emulator's " + std::to_string(STACK_BYTES / 1024) + " KB)";
    } else if (g_lo && a - g_lo < SLOTS * SLOT_BYTES) {
        global_check(a, 1, false, interrupted_pc(uc), "");  // reports and does not return
    } else {
        // Far outside every argument: name the array it most likely ran off (the nearest one below it).
        const int near = nearest_below(a);
        char buf[200];
        if (near >= 0) {
            snprintf(buf, sizeof buf, " made an access at address %p, far outside the kernel's arrays: @@G:%d:%lld:1@@",
                     info->si_addr, near, (long long)(a - g_buffers[near].base));
            msg = thread_desc(*b, b->cur->id) + " of " + block_desc(*b) + buf + pc_mark(interrupted_pc(uc));
            record_error(error_json("out_of_bounds", msg));
            b->aborted = true;
            setcontext(&b->sched);
        }
        snprintf(buf, sizeof buf, ": invalid memory access at address %p (%s); a pointer that is not one of the "
                 "kernel's arguments, or one far outside them?", info->si_addr, sig == SIGBUS ? "bus error" : "segfault");
        msg = thread_desc(*b, b->cur->id) + " of " + block_desc(*b) + buf + pc_mark(interrupted_pc(uc));
    }
    record_error(error_json("invalid_address", msg));
    b->aborted = true;
    setcontext(&b->sched);
}

static void worker(Launch* L, int slot) {
    Block* b = worker_block(slot, *L);
    b->launch = L;
    t_block = b;
    stack_t ss{};
    ss.ss_sp = b->altstack;
    ss.ss_size = 1 << 16;
    stack_t old_ss{};
    sigaltstack(&ss, &old_ss);
    {
        std::lock_guard<std::mutex> lock(L->mu);
        L->workers.push_back(pthread_self());
    }
    const long total = long(L->grid.x) * L->grid.y * L->grid.z;
    for (;;) {
        const long i = L->next_block.fetch_add(1);
        if (i >= total || L->failed.load()) break;
        const uint3 bid = {unsigned(i % L->grid.x), unsigned((i / L->grid.x) % L->grid.y),
                           unsigned(i / (long(L->grid.x) * L->grid.y))};
        if (g_trace_on) trace_block_begin(*b, i);
        run_block(*b, bid);
        if (g_trace_on) trace_block_end(*b);
        if (b->aborted) break;
    }
    {
        std::lock_guard<std::mutex> lock(L->mu);
        L->workers.erase(std::remove(L->workers.begin(), L->workers.end(), pthread_self()), L->workers.end());
    }
    sigaltstack(&old_ss, nullptr);
    t_block = nullptr;
}

}  // namespace tkemu

using namespace tkemu;

// ---- the C interface the Python side calls -------------------------------------------------------------------------
extern "C" {

int tkemu_abi_version() { return 1; }
uint64_t tkemu_slot_bytes() { return SLOT_BYTES; }

void* tkemu_buffer_map(int slot, uint64_t bytes) {
    if (!g_lo) {
        struct rlimit lim {};
        if (getrlimit(RLIMIT_AS, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
            uintptr_t s = uintptr_t(1) << 31;
            while (s > (uintptr_t(16) << 20) && s * SLOTS > lim.rlim_cur / 2) s /= 2;
            SLOT_BYTES = s;
        }
        void* r = mmap(nullptr, SLOTS * SLOT_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (r == MAP_FAILED) return nullptr;
        g_lo = reinterpret_cast<uintptr_t>(r);
    }
    if (slot < 0 || slot >= SLOTS || bytes > SLOT_BYTES - SLOT_BASE - (uintptr_t(1) << 20)) return nullptr;
    Buffer& b = g_buffers[slot];
    const uintptr_t base = g_lo + slot * SLOT_BYTES + SLOT_BASE;
    const size_t page = 4096, len = (std::max<uint64_t>(bytes, 1) + page - 1) / page * page;
    if (mmap(reinterpret_cast<void*>(base), len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
             0) == MAP_FAILED)
        return nullptr;
    b.base = base;
    b.bytes = bytes;
    b.mapped = true;
    return reinterpret_cast<void*>(base);
}

void tkemu_buffer_unmap(int slot) {
    if (slot < 0 || slot >= SLOTS || !g_buffers[slot].mapped) return;
    Buffer& b = g_buffers[slot];
    const size_t page = 4096, len = (std::max<size_t>(b.bytes, 1) + page - 1) / page * page;
    mmap(reinterpret_cast<void*>(b.base), len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    b.mapped = false;
}

static std::string g_last_error, g_last_warnings, g_last_output, g_last_stats;

int tkemu_launch(void (*entry)(void* const*), void* const* args, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                 unsigned by, unsigned bz, unsigned dyn_smem, int arch, int workers, int flags, double time_limit) {
    Launch L;
    L.entry = entry;
    L.args = args;
    L.grid = dim3(gx, gy, gz);
    L.block = dim3(bx, by, bz);
    L.dyn_smem = dyn_smem;
    L.arch = arch;
    L.race = flags & 1;
    L.reverse = flags & 2;
    L.tma_order = (flags >> 2) & 3;
    L.smem_limit = uint32_t((flags >> 8) & 0x3ff) * 1024;  // KB, from tklab.course.limits (0: the arch's default)
    L.deadline = time_limit > 0 ? now() + time_limit : 0;
    g_launch = &L;
    if (g_trace_on) trace_launch_begin(L);
    {
        std::lock_guard<std::mutex> lock(g_chain_mu);
        g_chains.clear();
    }
    {
        std::lock_guard<std::mutex> lock(g_out_mu);
        g_output.clear();
    }
    const long total = long(gx) * gy * gz;
    const int n = int(std::max<long>(1, std::min<long>(workers, total)));
    // Fault and watchdog handlers for the whole launch (signal dispositions are per process).
    struct sigaction sa {};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_old_segv);
    sigaction(SIGBUS, &sa, &g_old_bus);
    struct sigaction wd {};
    wd.sa_sigaction = on_watchdog;
    wd.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&wd.sa_mask);
    sigaction(WATCHDOG_SIGNAL, &wd, &g_old_alarm);
    // The watchdog interrupts a thread stuck in a loop that never returns to the runtime.
    std::mutex wd_mu;
    std::condition_variable wd_cv;
    bool done = false;
    std::thread watchdog;
    if (time_limit > 0) {
        watchdog = std::thread([&] {
            std::unique_lock<std::mutex> lock(wd_mu);
            const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(time_limit + 0.5);
            while (!done) {
                if (wd_cv.wait_until(lock, until) == std::cv_status::timeout && !done) {
                    std::lock_guard<std::mutex> l2(L.mu);
                    if (!L.failed.load())  // once the error is recorded the workers stop on their own
                        for (pthread_t t : L.workers) pthread_kill(t, WATCHDOG_SIGNAL);
                    lock.unlock();
                    std::this_thread::sleep_for(std::chrono::milliseconds(200));
                    lock.lock();
                }
            }
        });
    }
    if (n == 1) {
        worker(&L, 0);
    } else {
        std::vector<std::thread> pool;
        for (int i = 0; i < n; ++i) pool.emplace_back(worker, &L, i);
        for (auto& t : pool) t.join();
    }
    if (watchdog.joinable()) {
        {
            std::lock_guard<std::mutex> lock(wd_mu);
            done = true;
        }
        wd_cv.notify_all();
        watchdog.join();
    }
    sigaction(WATCHDOG_SIGNAL, &g_old_alarm, nullptr);
    sigaction(SIGSEGV, &g_old_segv, nullptr);
    sigaction(SIGBUS, &g_old_bus, nullptr);
    if (g_trace_on) trace_launch_end(L);
    g_last_error = L.error;
    g_last_warnings = "[" + L.warnings + "]";
    g_last_stats = "{\"wgmma_max_in_flight\": " + std::to_string(L.max_wgmma_groups.load()) + "}";
    {
        std::lock_guard<std::mutex> lock(g_out_mu);
        g_last_output = g_output;
    }
    g_launch = nullptr;
    return L.failed.load() ? 1 : 0;
}

const char* tkemu_error() { return g_last_error.c_str(); }
const char* tkemu_stats() { return g_last_stats.c_str(); }
const char* tkemu_warnings() { return g_last_warnings.c_str(); }
const char* tkemu_output() { return g_last_output.c_str(); }

// ---- ThreadSanitizer's instrumentation entry points, implemented as the emulator's access checks ----------------------
#define TKEMU_RET uintptr_t(__builtin_return_address(0))
void __tsan_init() {}
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
void __tsan_vptr_update(void**, void*) {}
void __tsan_vptr_read(void**) {}
void __tsan_ignore_thread_begin() {}
void __tsan_ignore_thread_end() {}
#define TKEMU_TSAN(n)                                                                                        \
    void __tsan_read##n(void* a) { on_access(a, n, false, TKEMU_RET); }                                    \
    void __tsan_write##n(void* a) { on_access(a, n, true, TKEMU_RET); }                                    \
    void __tsan_unaligned_read##n(void* a) { on_access(a, n, false, TKEMU_RET); }                          \
    void __tsan_unaligned_write##n(void* a) { on_access(a, n, true, TKEMU_RET); }                          \
    void __tsan_volatile_read##n(void* a) { on_access(a, n, false, TKEMU_RET); }                           \
    void __tsan_volatile_write##n(void* a) { on_access(a, n, true, TKEMU_RET); }                           \
    void __tsan_unaligned_volatile_read##n(void* a) { on_access(a, n, false, TKEMU_RET); }                 \
    void __tsan_unaligned_volatile_write##n(void* a) { on_access(a, n, true, TKEMU_RET); }                 \
    void __tsan_read##n##_pc(void* a, void* pc) { on_access(a, n, false, uintptr_t(pc)); }                 \
    void __tsan_write##n##_pc(void* a, void* pc) { on_access(a, n, true, uintptr_t(pc)); }
TKEMU_TSAN(1)
TKEMU_TSAN(2)
TKEMU_TSAN(4)
TKEMU_TSAN(8)
TKEMU_TSAN(16)
#undef TKEMU_TSAN
void __tsan_read_range(void* a, unsigned long n) { on_access(a, n, false, TKEMU_RET); }
void __tsan_write_range(void* a, unsigned long n) { on_access(a, n, true, TKEMU_RET); }
void* __tsan_memcpy(void* d, const void* s, unsigned long n) {
    on_access(const_cast<void*>(s), n, false, TKEMU_RET);
    on_access(d, n, true, TKEMU_RET);
    return std::memcpy(d, s, n);
}
void* __tsan_memmove(void* d, const void* s, unsigned long n) {
    on_access(const_cast<void*>(s), n, false, TKEMU_RET);
    on_access(d, n, true, TKEMU_RET);
    return std::memmove(d, s, n);
}
void* __tsan_memset(void* d, int c, unsigned long n) {
    on_access(d, n, true, TKEMU_RET);
    return std::memset(d, c, n);
}

}  // extern "C"
