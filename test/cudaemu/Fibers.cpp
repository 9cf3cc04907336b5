//===- Fibers.cpp - Kernel launches as fibers -------------------*- C++ -*-===//
//
// Part of the mtc project.
//
//===----------------------------------------------------------------------===//
//
// A launch runs its blocks in order. Each block's threads are fibers on
// stacks of their own (mmap'd once, a guard page under each), switched by a
// few instructions of x86-64 assembly. The scheduler starts every thread in
// turn; a thread runs until it finishes or waits at a barrier, and the
// scheduler goes round the waiting threads until all have finished. A round
// in which no thread arrived anywhere, passed a barrier or finished is a
// deadlock: the launch is abandoned and reported, as a GPU would report a
// kernel that never ends (the fibers are dropped where they stand).
//
// Barriers count the threads that have not exited: a thread that returns
// early no longer holds up __syncthreads or its warp's exchanges, as on
// current GPUs. A warp exchange whose source lane has exited is reported
// (its value is undefined on a GPU) and gives all-ones bits.
//
// MTC_CUDAEMU_REVERSE=1 starts a block's threads from the last one, which
// turns a missing barrier (a thread reading what another writes before the
// same barrier) into different results.
//
// Built with ThreadSanitizer (-fsanitize=thread), every thread of a block
// is a ThreadSanitizer fiber of its own, and switching fibers orders
// nothing. What orders two threads' accesses is what orders them on a GPU:
// __syncthreads (and its reductions) for the block, __syncwarp for a warp,
// the end of a launch for the next one. Shuffles, ballots, WMMA and
// mma.sync / ldmatrix make the lanes converge but order no memory, as the
// PTX ISA defines only bar.sync and bar.warp.sync to. So a thread reading
// or writing what another thread of its block writes, with no such barrier
// between them, is reported as a data race, whatever order the fibers ran
// in. The emulation's own bookkeeping (barrier counts, exchange slots, the
// 0xff fill of fresh shared memory) is hidden from it. Blocks are ordered
// one after the other, so races between blocks are not seen.
//
//===----------------------------------------------------------------------===//

#include "Emulation.h"
#include "Kernel.h"

#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();
/// Not instrumented, so not entered or left in ThreadSanitizer's view:
/// what switches fibers (a function entered on one fiber's call stack
/// would be left on another's), and what never returns.
#define MTC_CUDAEMU_NO_TSAN __attribute__((no_sanitize_thread))
#else
#define MTC_CUDAEMU_NO_TSAN
#endif

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mtc::cudaemu {

// switchFiber(&from, to): saves the callee-saved registers and the floating
// point control words on the current stack, stores its pointer in *from,
// and continues on the stack `to` (one that switchFiber saved, or one
// prepared by Stack::prepare).
extern "C" void mtcEmuSwitchFiber(void **from, void *to);
extern "C" void mtcEmuFiberStart();
asm(R"(
    .text
    .globl mtcEmuSwitchFiber
    .type mtcEmuSwitchFiber, @function
mtcEmuSwitchFiber:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size mtcEmuSwitchFiber, .-mtcEmuSwitchFiber

    .globl mtcEmuFiberStart
    .type mtcEmuFiberStart, @function
mtcEmuFiberStart:
    movq %r12, %rdi
    call mtcEmuFiberMain
    ud2
    .size mtcEmuFiberStart, .-mtcEmuFiberStart
    .section .note.GNU-stack,"",@progbits
    .text
)");

namespace {

constexpr unsigned kMaxThreads = 1024;
/// Per thread: the kernels' local arrays are small, but the WMMA emulation
/// keeps whole tiles in every lane.
constexpr size_t kStackBytes = 256 * 1024;

/// A cp.async copy waiting for its group to complete.
struct AsyncCopy {
  void *dst;
  const void *src;
  size_t bytes, zfill;
};

struct Fiber {
  void *sp = nullptr;
  ThreadState state{};
  bool done = false;
  unsigned warp = 0;
  const void *stackBottom = nullptr; ///< for AddressSanitizer
  size_t stackBytes = 0;
  void *fakeStack = nullptr;
  void *race = nullptr;                          ///< its ThreadSanitizer fiber
  std::vector<std::vector<AsyncCopy>> committed; ///< oldest group first
  std::vector<AsyncCopy> open;                   ///< since the last commit
};

/// A barrier's arrivals, and the results of the last two rounds (a thread
/// reads its round's result after the next round may have started).
struct Barrier {
  unsigned arrived = 0;
  unsigned generation = 0;
  unsigned live = 0;
  // Block barriers.
  int orValue = 0, andValue = 1, count = 0;
  int result[2] = {0, 0};
  // Warp exchanges.
  uint64_t values[2][32] = {};
  /// warpGather's: lane l's `bytes` at l * bytes (every lane of one
  /// gather gives as many), so that the warp's are copied out at once.
  unsigned char blobs[2][32 * kGatherBytes] = {};
  unsigned present[2] = {0, 0};
  unsigned ballot[2] = {0, 0};
};

struct BlockRun {
  std::vector<Fiber> fibers;
  Barrier block;
  std::vector<Barrier> warps;
  unsigned live = 0;
  bool progress = false;
  void *schedulerSp = nullptr;
  const void *schedulerBottom = nullptr; ///< for AddressSanitizer
  size_t schedulerBytes = 0;
  void *schedulerFakeStack = nullptr;
  Fiber *running = nullptr;
  void *schedulerRace = nullptr; ///< the scheduler's ThreadSanitizer fiber
  const std::function<void()> *body = nullptr;
  unsigned char *shared = nullptr;
  std::vector<const void *> freshStatics; ///< filled by this block
  bool failed = false;                    ///< a thread broke a rule (reported)
};

thread_local BlockRun *tBlock = nullptr;
const ThreadState kOutside{};

/// The stacks, reused by every launch.
class Stacks {
public:
  ~Stacks() {
    if (base)
      munmap(base, count * slot());
  }
  /// The top of stack `i` prepared to start mtcEmuFiberStart with
  /// `fiber` in r12.
  void *prepare(unsigned i, Fiber *fiber) {
    fiber->stackBytes = kStackBytes;
    if (!base) {
      count = kMaxThreads;
      void *p = mmap(nullptr, count * slot(), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) {
        std::perror("cuda emulation: mmap of the fiber stacks");
        std::abort();
      }
      base = static_cast<unsigned char *>(p);
      for (unsigned s = 0; s < count; ++s)
        mprotect(base + s * slot(), page(), PROT_NONE);
    }
    auto *top = reinterpret_cast<uint64_t *>(base + (i + 1) * slot());
    fiber->stackBottom = base + i * slot() + page();
    // mtcEmuSwitchFiber pops: control words, r15..r12, rbx, rbp, then
    // returns into mtcEmuFiberStart with the stack 16-byte aligned.
    uint64_t *sp = top - 10;
    sp[0] = initialControlWords();
    sp[1] = 0;                                 // r15
    sp[2] = 0;                                 // r14
    sp[3] = 0;                                 // r13
    sp[4] = reinterpret_cast<uint64_t>(fiber); // r12
    sp[5] = 0;                                 // rbx
    sp[6] = 0;                                 // rbp
    sp[7] = reinterpret_cast<uint64_t>(&mtcEmuFiberStart);
    return sp;
  }

private:
  static size_t page() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }
  static size_t slot() { return kStackBytes + page(); }
  static uint64_t initialControlWords() {
    uint32_t mxcsr;
    uint16_t x87;
    asm volatile("stmxcsr %0" : "=m"(mxcsr));
    asm volatile("fnstcw %0" : "=m"(x87));
    return mxcsr | (static_cast<uint64_t>(x87) << 32);
  }
  unsigned char *base = nullptr;
  unsigned count = 0;
};

Stacks &stacks() {
  static Stacks instance;
  return instance;
}

// AddressSanitizer must be told when the stack changes under it: before a
// switch, the stack being switched to (and where to keep this one's fake
// frames, null for a fiber that ends), after one, that it landed.
#if defined(__SANITIZE_ADDRESS__)
void beforeSwitch(void **fakeStack, const void *bottom, size_t bytes) {
  __sanitizer_start_switch_fiber(fakeStack, bottom, bytes);
}
void afterSwitch(void *fakeStack, const void **fromBottom = nullptr,
                 size_t *fromBytes = nullptr) {
  __sanitizer_finish_switch_fiber(fakeStack, fromBottom, fromBytes);
}
#else
void beforeSwitch(void **, const void *, size_t) {}
void afterSwitch(void *, const void ** = nullptr, size_t * = nullptr) {}
#endif

// ThreadSanitizer: the fiber of each thread slot, what orders the threads'
// accesses, and the emulation's bookkeeping kept out of its sight.
#if defined(__SANITIZE_THREAD__)
/// The ThreadSanitizer fiber of thread slot `i`, made once and kept.
void *raceFibers[kMaxThreads] = {};
void *raceFiber(unsigned i) {
  if (!raceFibers[i])
    raceFibers[i] = __tsan_create_fiber(0);
  return raceFibers[i];
}
/// A fiber dropped where it stands (a failed launch) may be inside
/// Bookkeeping: the slot gets a fresh one.
void dropRaceFiber(unsigned i) {
  if (raceFibers[i])
    __tsan_destroy_fiber(raceFibers[i]);
  raceFibers[i] = nullptr;
}
void *currentRaceFiber() { return __tsan_get_current_fiber(); }
void nameRaceFiber(void *fiber, const ThreadState &s) {
  char name[96];
  std::snprintf(name, sizeof name, "thread (%u,%u,%u) of block (%u,%u,%u)",
                s.thread.x, s.thread.y, s.thread.z, s.block.x, s.block.y,
                s.block.z);
  __tsan_set_fiber_name(fiber, name);
}
/// Immediately before a switch: the switch orders nothing.
MTC_CUDAEMU_NO_TSAN void raceSwitch(void *fiber) {
  __tsan_switch_to_fiber(fiber, __tsan_switch_to_fiber_no_sync);
}
void raceRelease(void *sync) { __tsan_release(sync); }
void raceAcquire(void *sync) { __tsan_acquire(sync); }
/// While one lives, the calling fiber's reads and writes go unchecked.
struct Bookkeeping {
  Bookkeeping() { __tsan_ignore_thread_begin(); }
  ~Bookkeeping() { __tsan_ignore_thread_end(); }
  Bookkeeping(const Bookkeeping &) = delete;
  Bookkeeping &operator=(const Bookkeeping &) = delete;
};
#else
void *raceFiber(unsigned) { return nullptr; }
void dropRaceFiber(unsigned) {}
void *currentRaceFiber() { return nullptr; }
void nameRaceFiber(void *, const ThreadState &) {}
void raceSwitch(void *) {}
void raceRelease(void *) {}
void raceAcquire(void *) {}
struct Bookkeeping {
  Bookkeeping() {} // user-provided: a scope of its own, not an unused variable
};
#endif

/// What the fibers acquire when they start (the host's work before the
/// block) and release when they finish (for the host after the block).
char blockStartSync, blockEndSync;
/// What __syncthreads and each warp's __syncwarp release and acquire, one
/// per parity of the barrier's round (a thread that has passed a round
/// may reach the next before a slower one has resumed from it).
char blockSync[2];
char warpSync[kMaxThreads / 32][2];

/// The fiber running now (written by the scheduler as it switches).
Fiber *runningFiber(const BlockRun &run) {
  return __atomic_load_n(&run.running, __ATOMIC_RELAXED);
}

/// Back to the scheduler; returns when the scheduler resumes this fiber.
void yieldToScheduler() {
  BlockRun &run = *tBlock;
  Fiber &self = *runningFiber(run);
  beforeSwitch(&self.fakeStack, run.schedulerBottom, run.schedulerBytes);
  raceSwitch(run.schedulerRace);
  mtcEmuSwitchFiber(&self.sp, run.schedulerSp);
  afterSwitch(self.fakeStack);
}

/// Passes `b` (everyone alive has arrived): publishes the round's results.
void release(Barrier &b) {
  // Block barriers' reductions: or in bit 0, and in bit 1, the count above.
  b.result[b.generation & 1] =
      (b.orValue & 1) | (b.andValue << 1) | (b.count << 2);
  b.orValue = 0;
  b.andValue = 1;
  b.count = 0;
  b.arrived = 0;
  ++b.generation;
  // The next round writes the other half of the warp exchange; clear it.
  const unsigned next = b.generation & 1;
  b.present[next] = 0;
  b.ballot[next] = 0;
  tBlock->progress = true;
}

/// Arrives at `b` and waits until its round has passed. A barrier that
/// orders memory gives its pair of sync objects, `sync`: what the thread
/// did before it happens before what every thread does after.
unsigned arriveAndWait(Barrier &b, char *sync = nullptr) {
  BlockRun &run = *tBlock;
  const unsigned generation = b.generation;
  if (sync)
    raceRelease(&sync[generation & 1]);
  {
    Bookkeeping hidden;
    ++b.arrived;
    run.progress = true;
    if (b.arrived == b.live)
      release(b);
    while (b.generation == generation)
      yieldToScheduler();
  }
  if (sync)
    raceAcquire(&sync[generation & 1]);
  return generation & 1;
}

/// A finished thread no longer holds up the barriers it would arrive at.
void leave(Barrier &b) {
  --b.live;
  if (b.live > 0 && b.arrived == b.live)
    release(b);
}

std::string describe(const char *name, dim3 grid, dim3 block, size_t shared) {
  return std::string(name) + "<<<(" + std::to_string(grid.x) + "," +
         std::to_string(grid.y) + "," + std::to_string(grid.z) + "), (" +
         std::to_string(block.x) + "," + std::to_string(block.y) + "," +
         std::to_string(block.z) + "), " + std::to_string(shared) + ">>>";
}

bool reverseOrder() {
  static const bool reverse = [] {
    const char *v = std::getenv("MTC_CUDAEMU_REVERSE");
    return v && *v && *v != '0';
  }();
  return reverse;
}

/// Runs one block; false on a deadlock or a broken rule (reported).
bool runBlock(BlockRun &run, const char *what) {
  const unsigned threads = static_cast<unsigned>(run.fibers.size());
  for (unsigned i = 0; i < threads; ++i)
    run.fibers[i].sp = stacks().prepare(i, &run.fibers[i]);
  run.schedulerRace = currentRaceFiber();
  raceRelease(&blockStartSync);
  const bool reverse = reverseOrder();
  bool ok = true;
  while (ok && run.live > 0) {
    run.progress = false;
    for (unsigned n = 0; n < threads; ++n) {
      Fiber &f = run.fibers[reverse ? threads - 1 - n : n];
      if (f.done)
        continue;
      __atomic_store_n(&run.running, &f, __ATOMIC_RELAXED);
      // Read before ThreadSanitizer takes what runs for the fiber's.
      void *const sp = f.sp;
      beforeSwitch(&run.schedulerFakeStack, f.stackBottom, f.stackBytes);
      raceSwitch(f.race);
      mtcEmuSwitchFiber(&run.schedulerSp, sp);
      afterSwitch(run.schedulerFakeStack);
      __atomic_store_n(&run.running, nullptr, __ATOMIC_RELAXED);
    }
    if (run.failed) {
      ok = false;
    } else if (!run.progress && run.live > 0) {
      unsigned atBlock = run.block.arrived, atWarp = 0;
      for (const Barrier &w : run.warps)
        atWarp += w.arrived;
      complain((std::string("deadlock in ") + what + ": " +
                std::to_string(atBlock) + " threads wait at __syncthreads, " +
                std::to_string(atWarp) + " at warp operations, " +
                std::to_string(threads - run.live) + " have exited")
                   .c_str());
      ok = false;
    }
  }
  for (unsigned i = 0; !ok && i < threads; ++i)
    if (!run.fibers[i].done)
      dropRaceFiber(i);
  raceAcquire(&blockEndSync);
  return ok;
}

/// Opted-in dynamic shared memory per kernel (cudaFuncSetAttribute).
std::map<const void *, size_t> &sharedLimits() {
  static std::map<const void *, size_t> limits;
  return limits;
}

/// Sets `run` up for block (bx, by, bz): fresh barriers, every thread's
/// fiber, the dynamic shared memory filled with 0xff.
void startBlock(BlockRun &run, dim3 grid, dim3 block, uint3 blockIndex,
                size_t sharedBytes) {
  const unsigned threads = static_cast<unsigned>(run.fibers.size());
  run.block = Barrier{};
  run.block.live = threads;
  for (unsigned w = 0; w < run.warps.size(); ++w) {
    run.warps[w] = Barrier{};
    run.warps[w].live = std::min<unsigned>(32, threads - w * 32);
  }
  run.live = threads;
  std::memset(run.shared, 0xff, sharedBytes);
  run.freshStatics.clear();
  unsigned t = 0;
  for (unsigned z = 0; z < block.z; ++z)
    for (unsigned y = 0; y < block.y; ++y)
      for (unsigned x = 0; x < block.x; ++x, ++t) {
        Fiber &f = run.fibers[t];
        f = Fiber{};
        f.state.thread = make_uint3(x, y, z);
        f.state.block = blockIndex;
        f.state.blockSize = block;
        f.state.gridSize = grid;
        f.state.linear = t;
        f.warp = t / 32;
        f.race = raceFiber(t);
        nameRaceFiber(f.race, f.state);
      }
}

/// Runs every block of a validated launch, in order.
void runLaunch(const std::string &what, dim3 grid, dim3 block,
               size_t sharedBytes, const std::function<void()> &body) {
  // Exactly the bytes asked for, so that AddressSanitizer sees a kernel
  // reading past them.
  void *bytes = nullptr;
  if (posix_memalign(&bytes, 128, sharedBytes == 0 ? 1 : sharedBytes)) {
    complain("out of host memory for a block's shared memory");
    setLastError(cudaErrorMemoryAllocation);
    return;
  }
  std::unique_ptr<unsigned char, decltype(&std::free)> shared(
      static_cast<unsigned char *>(bytes), &std::free);
  const unsigned threads = block.x * block.y * block.z;
  BlockRun run;
  run.body = &body;
  run.shared = shared.get();
  run.fibers.resize(threads);
  run.warps.resize((threads + 31) / 32);
  BlockRun *outer = tBlock;
  tBlock = &run;
  bool ok = true;
  for (unsigned bz = 0; ok && bz < grid.z; ++bz)
    for (unsigned by = 0; ok && by < grid.y; ++by)
      for (unsigned bx = 0; ok && bx < grid.x; ++bx) {
        startBlock(run, grid, block, make_uint3(bx, by, bz), sharedBytes);
        ok = runBlock(run, what.c_str());
      }
  tBlock = outer;
  if (!ok)
    setLastError(cudaErrorLaunchFailure);
}

} // namespace

// Never returns: ThreadSanitizer would see it entered once more with each
// block its fiber runs, and the fiber's call stack grow without end.
extern "C" MTC_CUDAEMU_NO_TSAN void mtcEmuFiberMain(Fiber *fiber) {
  raceAcquire(&blockStartSync); // before the first read of the host's state
  BlockRun &run = *tBlock;
  afterSwitch(nullptr, &run.schedulerBottom, &run.schedulerBytes);
  (*run.body)();
  raceRelease(&blockEndSync);
  void *schedulerRace, *schedulerSp;
  const void *schedulerBottom;
  size_t schedulerBytes;
  {
    // Ends before the switch: the fiber never returns from it, and its
    // ThreadSanitizer fiber runs the same slot's thread of the next block.
    Bookkeeping hidden;
    schedulerRace = run.schedulerRace;
    schedulerSp = run.schedulerSp;
    schedulerBottom = run.schedulerBottom;
    schedulerBytes = run.schedulerBytes;
    const bool pending =
        !fiber->open.empty() ||
        std::any_of(fiber->committed.begin(), fiber->committed.end(),
                    [](const std::vector<AsyncCopy> &g) { return !g.empty(); });
    if (pending) {
      complain("a thread exited with cp.async copies it never waited for");
      run.failed = true;
    }
    fiber->done = true;
    --run.live;
    run.progress = true;
    leave(run.block);
    leave(run.warps[fiber->warp]);
  }
  beforeSwitch(nullptr, schedulerBottom, schedulerBytes);
  raceSwitch(schedulerRace);
  mtcEmuSwitchFiber(&fiber->sp, schedulerSp);
  __builtin_unreachable();
}

const ThreadState &current() {
  const Fiber *running = tBlock ? runningFiber(*tBlock) : nullptr;
  return running ? running->state : kOutside;
}

int blockBarrier(int predicate, Reduce reduce) {
  Barrier &b = tBlock->block;
  const int p = predicate != 0;
  int word;
  {
    Bookkeeping hidden;
    b.orValue |= p;
    b.andValue &= p;
    b.count += p;
  }
  const unsigned round = arriveAndWait(b, blockSync);
  {
    Bookkeeping hidden;
    word = b.result[round];
  }
  switch (reduce) {
  case Reduce::Or:
    return word & 1;
  case Reduce::And:
    return (word >> 1) & 1;
  case Reduce::Count:
    return word >> 2;
  case Reduce::None:
    break;
  }
  return 0;
}

void warpBarrier() {
  BlockRun &run = *tBlock;
  const Fiber &self = *runningFiber(run);
  arriveAndWait(run.warps[self.warp], warpSync[self.warp]);
}

uint64_t warpExchange(uint64_t value, int source, int predicate,
                      unsigned *ballot) {
  Bookkeeping hidden;
  BlockRun &run = *tBlock;
  Fiber &self = *runningFiber(run);
  Barrier &w = run.warps[self.warp];
  const unsigned lane = self.state.linear % 32;
  const unsigned half = w.generation & 1;
  w.values[half][lane] = value;
  w.present[half] |= 1u << lane;
  if (predicate)
    w.ballot[half] |= 1u << lane;
  const unsigned round = arriveAndWait(w);
  if (ballot)
    *ballot = w.ballot[round];
  if (source < 0)
    return 0;
  if (!(w.present[round] >> source & 1u)) {
    complain("a warp exchange read a lane that has exited or does not exist");
    return ~uint64_t(0);
  }
  return w.values[round][source];
}

void warpGather(const void *mine, size_t bytes, void *all) {
  Bookkeeping hidden;
  if (bytes > kGatherBytes) {
    complain("warpGather: more bytes a lane than the emulation holds");
    tBlock->failed = true;
    return;
  }
  BlockRun &run = *tBlock;
  Fiber &self = *runningFiber(run);
  Barrier &w = run.warps[self.warp];
  const unsigned lane = self.state.linear % 32;
  const unsigned half = w.generation & 1;
  std::memcpy(w.blobs[half] + lane * bytes, mine, bytes);
  w.present[half] |= 1u << lane;
  const unsigned round = arriveAndWait(w);
  std::memcpy(all, w.blobs[round], 32 * bytes);
  for (unsigned l = 0; l < 32; ++l)
    if (!(w.present[round] >> l & 1u))
      std::memset(static_cast<unsigned char *>(all) + l * bytes, 0xff, bytes);
}

bool withinLaunchBounds(unsigned long long maxThreads, const char *kernel) {
  const dim3 size = current().blockSize;
  const unsigned long long threads =
      static_cast<unsigned long long>(size.x) * size.y * size.z;
  if (threads <= maxThreads)
    return true;
  Bookkeeping hidden;
  complain((std::string(kernel) + ": a launch of " + std::to_string(threads) +
            " threads a block, over the " + std::to_string(maxThreads) +
            " of its __launch_bounds__")
               .c_str());
  tBlock->failed = true;
  return false;
}

void checkWmmaMatrix(const void *p, size_t ldmBytes, const char *what) {
  if (reinterpret_cast<uintptr_t>(p) % 32 == 0 && ldmBytes % 16 == 0)
    return;
  Bookkeeping hidden;
  complain((std::string(what) + ": the pointer must be 256-bit aligned and "
                                "the leading dimension a multiple of 16 "
                                "bytes")
               .c_str());
  tBlock->failed = true;
}

void ldmatrixX4(uint32_t (&r)[4], const void *row, bool trans) {
  const unsigned char *rows[32];
  warpGather(&row, sizeof row, rows);
  for (const unsigned char *p : rows)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) {
      // Also a lane that has exited (its address reads as all ones).
      Bookkeeping hidden;
      complain("ldmatrix: every lane must give a 16-byte aligned row");
      tBlock->failed = true;
      r[0] = r[1] = r[2] = r[3] = 0u;
      return;
    }
  auto at = [&](int matrix, int rowIndex, int column) {
    uint16_t value;
    std::memcpy(&value, rows[8 * matrix + rowIndex] + 2 * column, sizeof value);
    return static_cast<uint32_t>(value);
  };
  const int lane = laneId(), g = lane / 4, t = lane % 4;
  for (int j = 0; j < 4; ++j)
    r[j] = trans ? at(j, 2 * t, g) | at(j, 2 * t + 1, g) << 16
                 : at(j, g, 2 * t) | at(j, g, 2 * t + 1) << 16;
}

void asyncCopy(void *dst, const void *src, size_t bytes, size_t zfill) {
  if ((bytes != 4 && bytes != 8 && bytes != 16) || zfill > bytes ||
      reinterpret_cast<uintptr_t>(dst) % bytes != 0 ||
      reinterpret_cast<uintptr_t>(src) % bytes != 0) {
    Bookkeeping hidden;
    complain("__pipeline_memcpy_async: the size must be 4, 8 or 16 bytes, "
             "both addresses aligned to it and zfill at most the size");
    tBlock->failed = true;
    return;
  }
  runningFiber(*tBlock)->open.push_back({dst, src, bytes, zfill});
}

void asyncCommit() {
  Fiber &self = *runningFiber(*tBlock);
  self.committed.push_back(std::move(self.open));
  self.open.clear();
}

// The copies are the waiting thread's writes of the shared memory and reads
// of the source as ThreadSanitizer sees them.
void asyncWait(size_t prior) {
  Fiber &self = *runningFiber(*tBlock);
  const size_t done =
      self.committed.size() > prior ? self.committed.size() - prior : 0;
  for (size_t g = 0; g < done; ++g)
    for (const AsyncCopy &c : self.committed[g]) {
      const size_t copied = c.bytes - c.zfill;
      std::memcpy(c.dst, c.src, copied);
      std::memset(static_cast<unsigned char *>(c.dst) + copied, 0, c.zfill);
    }
  self.committed.erase(self.committed.begin(), self.committed.begin() + done);
}

void *dynamicShared() { return tBlock ? tBlock->shared : nullptr; }

void freshShared(void *address, size_t bytes) {
  Bookkeeping hidden; // no thread writes the fill on a GPU
  if (!tBlock ||
      std::find(tBlock->freshStatics.begin(), tBlock->freshStatics.end(),
                address) != tBlock->freshStatics.end())
    return;
  std::memset(address, 0xff, bytes);
  tBlock->freshStatics.push_back(address);
}

void setSharedLimit(const void *kernel, size_t bytes) {
  sharedLimits()[kernel] = bytes;
}

void submitLaunch(const void *kernel, const char *name, dim3 grid, dim3 block,
                  size_t sharedBytes, cudaStream_t stream,
                  std::function<void()> threadBody) {
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  const std::string what = describe(name, grid, block, sharedBytes);
  if (threads == 0 || threads > kMaxThreads || block.z > 64 || grid.x == 0 ||
      grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 ||
      grid.z > 65535) {
    complain(("invalid launch configuration: " + what).c_str());
    setLastError(cudaErrorInvalidConfiguration);
    return;
  }
  auto limit = sharedLimits().find(kernel);
  const size_t allowed =
      limit != sharedLimits().end() && limit->second > 48 * 1024 ? limit->second
                                                                 : 48 * 1024;
  if (sharedBytes > allowed) {
    complain(("dynamic shared memory over the kernel's limit of " +
              std::to_string(allowed) + " bytes: " + what)
                 .c_str());
    setLastError(cudaErrorInvalidValue);
    return;
  }
  cudaError_t queued =
      enqueue(stream, [what, grid, block, sharedBytes,
                       body = std::move(threadBody)] {
        runLaunch(what, grid, block, sharedBytes, body);
      });
  if (queued != cudaSuccess)
    setLastError(queued);
}

} // namespace mtc::cudaemu
