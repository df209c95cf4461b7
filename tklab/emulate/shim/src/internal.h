// The emulator runtime's internal state: one Launch per kernel launch, one Block per OS worker thread
// (reused), one Thread (fiber) per CUDA thread of the block being run.
#pragma once

#if defined(__APPLE__) && !defined(_XOPEN_SOURCE)  // macOS declares the (deprecated) ucontext calls only then
#error "build the emulator runtime with -D_XOPEN_SOURCE=700 -D_DARWIN_C_SOURCE (tklab.emulate.hostos.defines)"
#endif
#include <pthread.h>
#include <ucontext.h>

#include <atomic>
#include <cstdint>
#include <stdexcept>  // std::runtime_error (GCC 13 no longer brings it in through other headers)
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "../include/tkemu/half_types.h"
#include "../include/tkemu/runtime.h"

namespace tkemu {

constexpr uint32_t ARENA_BYTES = 256 * 1024;  // the shared window: 18-bit addresses, as wgmma descriptors hold
constexpr uint32_t RESERVED = 1024;            // addresses below this are never handed out (like the GPU's 1 KB)
constexpr size_t STACK_BYTES = 512 * 1024;     // each CUDA thread's emulated stack (registers, local arrays)
constexpr uint16_t NONE = 0xffff;
constexpr int IDLE_POLL_LIMIT = 1000;  // polls that see no change before "deadlock"

enum State : int { RUNNABLE = 0, BLOCKED = 1, POLLING = 2, EXITED = 3 };
/// When an in-flight TMA load lands (tkemu_launch's flags >> 2; tklab.emulate's tma_order=).
enum TmaOrder : int { ORDER_IN_ORDER = 0, ORDER_DELAYED = 1, ORDER_REVERSED = 2 };
// Shadow flags of one shared byte.
constexpr uint8_t SH_PENDING = 1;  // an in-flight TMA load will write it (Shadow::pend: which one)
constexpr uint8_t SH_GENERIC = 2;  // last written by a thread's ordinary store (the generic proxy)
constexpr uint8_t SH_WGMMA_READ = 4;  // last read by a wgmma group, recorded where it retired

/// A queued copy that lands in shared memory later (cp.async, TMA).
struct Copy {
    uint32_t dst;       // shared address
    uintptr_t src;      // global address
    uint32_t bytes;
    uint32_t src_bytes;  // cp.async: bytes actually read (the rest is zero-filled)
};
/// A queued TMA operation (load into shared memory / store or reduce into global memory).
struct TmaOp {
    bool load;
    int dims;
    uint32_t smem;
    uint32_t bar;
    int reduce;
    int32_t coords[5];
    unsigned char map[128];
    int issuer;
    uint32_t issuer_clock;
    uint32_t extent;  // shared bytes from smem the box spans
    uintptr_t pc;
};

/// One accumulator register of a pending wgmma group: where the thread keeps it, and the value it gets at
/// retirement.
struct AccSlot {
    void* ptr;
    uint32_t bits;
    int warp;  // the warp of the warpgroup (0..3) whose thread holds it: that warp's wait_group retires it
};
/// A wgmma group (the wgmma.mma_async instructions between two commits) of one warpgroup.
struct WgGroup {
    std::vector<AccSlot> acc;     // what retiring it writes
    std::vector<AccSlot> a_regs;  // the register A operands it reads (bits unused): retiring it frees them
    std::vector<uint32_t> reads;  // the 2-byte shared elements its instructions read (with repeats)
    std::vector<std::pair<uint32_t, uint32_t>> spans;  // [first, last byte] of each operand it reads
    uintptr_t pc = 0;             // its first instruction
    uint32_t seq = 0;
    int instrs = 0;
    int index = 0;                // its place in the warpgroup's commit order (0: the first group committed)
    uint8_t retired = 0;          // the warps (bit w) whose wgmma.wait_group has retired their part of it
    uint32_t wait_clk[4] = {0, 0, 0, 0};  // each warp's first thread's clock at that wait ...
    uintptr_t wait_pc[4] = {0, 0, 0, 0};  // ... and where it waited
};
/// A wgmma group whose every warp has retired it: a write to what it read must be ordered after all four
/// waits (each warp's wait orders only that warp), not only after the last one.
struct WgRetired {
    uint16_t tid[4];   // each warp's first thread
    uint32_t clk[4];   // its clock at the wait
    uintptr_t pc[4];   // the wait
};
/// A warpgroup's wgmma groups in flight: the one being issued and the committed ones, oldest first.
struct WgState {
    WgGroup open;
    std::deque<WgGroup> committed;
    std::unordered_map<void*, std::pair<uint32_t, uint32_t>> pending;  // accumulator -> (seq of its group, value)
    std::unordered_map<void*, uint32_t> a_pending;  // register A operand -> seq of the newest group reading it
    uint32_t next_seq = 1;
    int commits = 0;
    int pending_in_warp[4] = {0, 0, 0, 0};  // entries of `pending` each warp holds
    int a_pending_in_warp[4] = {0, 0, 0, 0};  // ... and of `a_pending`
};

struct Thread {
    ucontext_t ctx;
    char* stack = nullptr;
    uint3 tid{};
    int id = 0;
    int state = EXITED;
    const char* wait_what = "";
    uint64_t wait_addr = 0;
    uint64_t wait_detail = 0;
    uint64_t poll_epoch = 0;
    uint64_t last_fail_epoch = ~uint64_t(0);
    int idle_polls = 0;  // failed polls in a row with nothing changed in between
    uint64_t accesses = 0;
    uintptr_t pc = 0;  // where the thread last entered the runtime (for messages)
    std::vector<Copy> cp_open;
    std::deque<std::vector<Copy>> cp_groups;
    std::vector<TmaOp> bulk_open;
    std::deque<std::vector<TmaOp>> bulk_groups;
    int wgmma_commits = 0;   // wgmma.commit_group executed by this thread
    uint32_t fence_clk = 0;  // its clock at its last fence.proxy.async (0: never)
    uint32_t waited_bar = UINT32_MAX;  // the mbarrier its last successful wait was on
    // An mbarrier wait that saw a phase complete while it polled (wait_addr/wait_detail, parity or not): the
    // hardware's wait may return at that moment even if later arrivals complete further phases before the
    // thread looks again, so the answer is kept (with that phase's clocks) for its next poll.
    bool wait_parity = false;
    bool latched = false;
    uint32_t latched_bar = 0;
    uint64_t latched_token = 0;
    uint32_t latched_phase = 0;  // the barrier's completed phases when it was latched
    std::vector<uint32_t> latched_vc;
    uintptr_t acc_lo = 0, acc_hi = 0;  // where its pending wgmma accumulators lie (0, 0: none)
    uintptr_t a_lo = 0, a_hi = 0;      // ... and the register A operands of its warpgroup's pending groups
    bool in_wgmma = false;             // inside a wgmma asm statement: its own operand traffic is no touch
    int red_pred = 0;
    int red_result[3] = {0, 0, 0};
    uintptr_t last_bar_pc = 0;         // where it last passed a barrier (__syncthreads, bar.sync)
    int last_wgmma_wait = -1;          // N of its warp's last wgmma.wait_group (-1: none yet) ...
    uintptr_t last_wgmma_wait_pc = 0;  // ... and where it was
};

/// Where a warp (32) or warpgroup (128) meets for one collective operation.
struct Rendezvous {
    int kind = -1;
    const char* what = "";
    uint64_t expected[2] = {0, 0};
    uint64_t arrived[2] = {0, 0};
    int n_expected = 0, n_arrived = 0;
    void* data[128] = {};
    uint32_t mask = 0;
};

struct NamedBarrier {
    int expected = 0;
    int arrived = 0;
    bool whole_block = false;
    std::vector<int> waiters;
    std::vector<int> arrivers;
};

struct MBar {
    bool valid = false;
    uint32_t expected = 0, pending = 0;
    int64_t tx = 0;
    uint32_t phase = 0;
    std::vector<uint32_t> queued;  // in-flight TMA loads (Block::inflight indices) that complete on this barrier
    std::vector<uint32_t> vc_phase, vc_done;
    int init_thread = -1;
    uintptr_t init_pc = 0;  // where it was initialised: how a message names it (its bytes have no name)
};

struct SharedAlloc {
    std::string name;
    uint32_t offset, size;
    const void* key;
    ShapeInfo shape{0, -1, {0, 0, 0, 0}};
};

/// One shadow entry per byte of shared memory: the last write and the last read (thread, its clock, pc).
struct Shadow {
    uint16_t wtid, rtid;
    uint32_t wclk, rclk;
    uint8_t flags;   // SH_*
    uint8_t areads;  // asynchronous readers in flight (wgmma groups, TMA stores): a write now is a hazard
    uint16_t wgr;    // SH_WGMMA_READ: the Block::wg_retired record of the group that read it (NONE: none)
    uintptr_t wpc, rpc;
};

struct Launch;

struct Block {
    char* arena = nullptr;
    Shadow* shadow = nullptr;
    uint32_t limit = 0;       // usable shared bytes (dynamic + static)
    uint32_t dyn_bytes = 0;
    uint32_t static_top = 0;  // next free byte for function-scope __shared__
    uint32_t global_bottom = 0;
    std::vector<SharedAlloc> allocs;
    std::vector<SharedAlloc> gallocs;  // namespace-scope __shared__: placed once per worker, kept across blocks
    uint32_t gbottom = RESERVED + 227 * 1024;
    std::vector<Thread> threads;
    std::vector<char*> stacks;
    int n = 0;  // threads in this block
    int exited = 0;
    ucontext_t sched;
    Thread* cur = nullptr;
    uint64_t epoch = 0;
    NamedBarrier bars[16];
    std::vector<Rendezvous> warp_rv, wg_rv;
    std::unordered_map<uint32_t, MBar> mbars;
    std::vector<TmaOp> inflight;   // every TMA load issued in this block, in issue order
    std::vector<uint8_t> landed;   // ... and whether it has landed
    std::vector<WgState> wgs;      // per warpgroup
    std::vector<WgRetired> wg_retired;  // retired wgmma groups' waits (Shadow::wgr)
    std::string phase_note;  // a barrier that ran phases ahead of a waiter: said with the block's race/async error
    // What each mbarrier hands back, as learnt: a thread waited on it, then issued a TMA load into these bytes.
    std::unordered_map<uint32_t, std::vector<std::pair<uint32_t, uint32_t>>> protects;
    std::vector<uint32_t> vc;  // n x n vector clocks (race detection)
    bool race = false;
    bool aborted = false;
    uint3 bid{};
    Launch* launch = nullptr;
    char* altstack = nullptr;
    uint64_t serial = 0;          // which block run this is (run_block counts them): the interpreter's state is per run
    void* interp = nullptr;       // the interpreter's per-worker state (interp.cpp), kept across blocks and launches
};

struct Launch {
    void (*entry)(void* const*) = nullptr;
    void* const* args = nullptr;
    dim3 grid, block;
    uint32_t dyn_smem = 0;
    int arch = 90;
    bool race = true;
    bool reverse = false;
    int tma_order = ORDER_DELAYED;
    uint32_t smem_limit = 0;  // usable shared bytes per block (tkemu_launch's flags >> 8, in KB)
    std::atomic<int> max_wgmma_groups{0};  // most committed, unretired wgmma groups of one warpgroup
    double deadline = 0;
    std::atomic<bool> failed{false};
    std::atomic<long> next_block{0};
    std::mutex mu;
    std::string error;     // JSON of the first error
    std::string warnings;  // JSON list items
    int n_warnings = 0;
    std::vector<pthread_t> workers;
};

extern thread_local Block* t_block;
extern Launch* g_launch;
/// A launch of the PTX interpreter (interp.cpp) is running: code addresses are instruction numbers (INSTR_TAG), no
/// native kernel code exists, and every global address must lie inside a mapped buffer.
extern bool g_interp;
constexpr uintptr_t INSTR_TAG = uintptr_t(1) << 62;

// runtime.cpp
[[noreturn]] void fail_json(const std::string& json);
std::string json_str(const std::string& s);
std::string error_json(const std::string& kind, const std::string& message);
std::string thread_desc(const Block& b, int t);
std::string block_desc(const Block& b);
std::string smem_desc(const Block& b, uint32_t addr);
std::string pc_mark(uintptr_t pc);
std::string offset_of(uintptr_t pc);  // a code address as its hex offset in its module ("" if none)
uintptr_t pc_chain(uintptr_t fallback);  // this call's chain of kernel frames, as a pc for pc_mark
void warn(const std::string& kind, const std::string& message, uintptr_t pc);
void block_current(int state, const char* what, uint64_t addr, uint64_t detail);
void wake(Block& b, int t);
void collective(int scope, int kind, const char* what, unsigned mask, void* data,
                const std::function<void(Block&, Rendezvous&)>& exec);
char* smem_at(Block& b, uint32_t addr, uint32_t bytes, const char* what);
void global_check(uintptr_t addr, size_t bytes, bool write, uintptr_t pc, const char* what);
void shadow_access(Block& b, int t, uint32_t clk, uint32_t addr, uint32_t bytes, bool write, uintptr_t pc,
                   const char* what, bool async = false);
[[noreturn]] void async_hazard(Block& b, int t, uint32_t addr, bool write, uintptr_t pc, const char* what);
uint32_t clock_of(Block& b, int t);
void vc_join_into(Block& b, std::vector<uint32_t>& dst, int t);  // dst = max(dst, VC_t)
void vc_acquire(Block& b, int t, const std::vector<uint32_t>& src);
void vc_tick(Block& b, int t);
void vc_sync_group(Block& b, const std::vector<int>& members);
void complete_copy(Block& b, int t, uint32_t clk, uintptr_t pc, const Copy& c);
void check_deadline_now(Block& b);  // the launch's time limit (and an abort elsewhere) seen from a running thread
bool global_in_buffer(uintptr_t addr, size_t bytes);  // inside one mapped argument buffer

// ptx.cpp
void tma_execute(Block& b, const TmaOp& op);
void mbar_complete_tx(Block& b, uint32_t bar, uint32_t bytes);
void flush_thread(Block& b, Thread& t);
void accumulator_touch(Block& b, uintptr_t a, size_t n, bool write, uintptr_t pc);  // reports if a is pending
bool land_all(Block& b);  // lands every in-flight TMA load (the scheduler, when nothing else can move)

// trace.cpp (tklab.trace): every hook is called as `if (g_trace_on) trace_...(...)`
extern bool g_trace_on;
extern thread_local bool t_trace_skip;  // an access the runtime makes for a PTX instruction it traced itself
void trace_launch_begin(Launch& L);
void trace_launch_end(Launch& L);
void trace_block_begin(Block& b, long linear);
void trace_block_end(Block& b);
void trace_access(Block& b, int t, uintptr_t a, size_t n, bool write, bool atomic, uintptr_t pc);
void trace_matrix(Block& b, int first, int num, const uint64_t* rows, bool store, uintptr_t pc);
void trace_op(Block& b, int t, const char* kind, uintptr_t pc, int warps);
void trace_barrier_arrive(Block& b, int t);
void trace_barrier_release(Block& b, int id, const std::vector<int>& waiters, const std::vector<int>& arrivers);
void trace_mbar_arrive(Block& b, uint32_t bar);
void trace_mbar_phase(Block& b, uint32_t bar, uint32_t completed);
void trace_mbar_wait(Block& b, uint32_t bar, uint64_t token);
void trace_tma_issue(Block& b, uint32_t bar, uint32_t smem);
void trace_wgmma_instr(Block& b, int first, int n);
void trace_wgmma_commit(Block& b, int t, int k, uint32_t seq);  // k: the thread's commits so far
void trace_wgmma_retire(Block& b, int first, uint32_t seq, uintptr_t pc);

}  // namespace tkemu

#define TKEMU_ENTER() \
    do { if (!::tkemu::g_interp && ::tkemu::t_block && ::tkemu::t_block->cur) \
             ::tkemu::t_block->cur->pc = uintptr_t(__builtin_return_address(0)); } while (0)
