// coll's interpreter kernel: one CTA per (rank, thread block) of a plan, running that
// block's ops in order. Compiled at run time by NVRTC (no headers needed), once per element
// type and reduction operator.
//
// Two protocols, chosen by the host per call (CallMode.proto) from the size of the call's
// largest message; both sides of every connection use the same one for a whole call.
//
// Bulk (pipelined): a connection (rank -> peer, channel) owns SLOTS staging slots in the
// receiver's memory. Every block runs its op list `iters` times, each time on one slice of
// every chunk, sized so an op's message fits one slot; message k goes to slot k % SLOTS.
// The sender waits until the receiver has acknowledged message k - SLOTS, writes it with
// peer stores, fences, then publishes `sent = k + 1` in the receiver's memory; the receiver
// waits for `sent > k`, consumes the slot and publishes `acked = k + 1` in the sender's
// memory.
//
// LL (low latency, for small messages): the connection also owns LL slots (ll_slots of
// ll_slot_bytes) in the receiver's memory, made of 16-byte lines {data lo, flag, data hi,
// flag}: 8 bytes of payload, each 8-byte half written at once by one 16-byte store. The
// flag of message k is ll_flag(k + ll_epoch), never 0, so a line holds message k exactly
// when both its flags equal it: the receiver polls the lines themselves (no `sent` word, no
// fence, no CTA barrier between receiving, reducing and forwarding a line), and each thread
// works on its own lines. Every chunk of a message starts on a fresh line, so a line never
// mixes two chunks and both sides agree on the layout from the chunk sizes alone. Slot
// reuse is gated by the same `acked` counter as bulk: a sender waits for
// `acked >= k - ll_slots + 1` before writing message k into slot k % ll_slots. Flags repeat
// every 2^32 - 1 messages, so a line a short message left unwritten could in principle look
// current much later: in one round of ll_slots messages every LL_CLEAN_ROUNDS rounds the
// sender also writes the unused lines of each slot with the current flag (as NCCL's LL
// does), so no line is ever older than 2 * LL_CLEAN_ROUNDS * ll_slots messages, below
// 2^32 - 1 for ll_slots <= 1024 (a power of two; the host passes 8).
//
// Direct (bulk calls of one process, where the host knows every rank's buffers): a message
// whose receive the host proved safe to fill early (executor/src/cuda/direct.rs) is stored
// by the sender straight into the receiver's input or output instead of a slot; the receiver
// only waits for `sent` and acknowledges. A sender may store message k only once the
// receiving CTA has published `ready` > k in the sender's memory: the position up to which
// its receives are released. A block whose receives are all released from the start
// publishes the call's last position + 1 when it starts (its stream's earlier work, which may
// still read those buffers, is done by then); otherwise it publishes per iteration, at the
// start and after each op, as far as the host's table says (DBlock.rel_start, DOp.rel): a
// receive is released once the ops of its rank that read or write its elements first have
// finished. Positions agree on both sides at every call boundary, and `ready` only grows.
// Direct messages take no slot, so they wait for no acknowledgment. A swap (direct.rs) is a
// direct send whose target is the receiver's own send's data, in a pair exchange of an
// in-place call: each side exchanges half of every piece in place, loading both halves and
// storing each into the other's place, once the peer has released at call start; each
// side's receive then only waits for the peer's `sent`.
//
// Both protocols share the connection's position (messages sent or received, `pos`) and
// `acked`, so calls of either protocol follow each other with no handshake. Counters are
// absolute and never reset, so buffers never need clearing between calls.
//
// Cross-block dependencies inside a rank use per-block progress counters, which start every
// call at zero: the last CTA of a launch to finish clears them (and the count of finished
// CTAs), so a call needs nothing from the host but its launch and can be replayed from a
// CUDA graph. Plans without cross-block dependencies never read them and skip that step.
// A launch runs `active` CTAs per plan block (sub-CTAs 0..active of its nsub), as many as
// the call has slices. Every wait is bounded: on timeout the CTA records where it was and
// returns, and the host reports the rank, block and op.
//
// Per call, the user's buffers arrive as a kernel argument (CallArgs, by value): the input
// and output base pointers of every rank on this GPU. Scratch bases are fixed at plan load.
// An LL call of a rank with one plan block may also name where its input is copied from
// (CallArgs.pre, for a call of the other placement): each sub-CTA copies, before its first
// op, exactly the slices of the input its iterations touch, so no CTA waits for another.

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

#define MAX_BUFFERS 8
// Ranks one GPU may hold (CallArgs' size: 3 x 32 x 8 = 768 bytes of the 4 KiB of arguments).
#define MAX_LOCAL 32
// Ranks a plan may have for direct sends (CallArgs.peer_*: 2 x 64 x 8 = 1 KiB more).
#define MAX_DIRECT 64

// A plan chunk c of a logical buffer (slices of `count` elements, k chunks each) as its
// slice c / k and position c % k in it, split by the host once at load: the kernel then
// finds a chunk's elements with no division (Slicer).
struct ChunkPos {
    u32 slice;
    u32 pos;
};

// How this call cuts chunks into per-iteration slices, from the host per call (config.rs
// Slicer): chunk (slice, pos) covers elements [slice * count + pos * base + min(pos, extra),
// + base + (pos < extra)), and iteration l of `iters` its piece [l * w, (l + 1) * w) with w
// = w_long for the longer chunks (pos < extra), else w_short. Dividing on the GPU cost an
// LL op about 1 500 of its 2 300-2 900 cycles (bench/NOTES.md section 22).
struct Slicer {
    u64 count;
    u64 base;     // count / k
    u64 extra;    // count % k
    u64 w_short;  // ceil(base / iters), rounded up to the alignment
    u64 w_long;   // ceil((base + 1) / iters), rounded up likewise
    u64 iters;
    u32 k;
    u32 pad;
};

struct DOp {
    u8 kind;      // 0 s, 1 r, 2 rrc, 3 rcs, 4 rrs, 5 rrcs, 6 cpy, 7 re, 8 cs
    u8 src_buf;
    u8 dst_buf;
    u8 ndeps;
    u32 count;    // plan chunks
    ChunkPos src; // the op's first chunk in the logical buffers, as (slice, pos)
    ChunkPos dst;
    u32 dep_start;
    u32 flags;    // bit 0: an op of another block of this rank depends on this one;
                  // bits 1, 2: its send / receive is direct with input and output apart,
                  // bits 3, 4: the same with them aliased; bit 5: a direct send's target
                  // is the receiver's output (else its input); bits 6, 7: the direct send
                  // is a swap, apart / aliased; bit 8: a swap's side takes each piece's
                  // second half
    ChunkPos peer; // a direct send: the receiving op's first chunk in the target buffer
    u32 rel;      // blocks releasing per iteration: receives released once this op is done
                  // (low 16 bits input and output apart, high 16 aliased)
    u32 pad;
};

// One CTA: sub-CTA `sub` of `nsub` of a plan block. The sub-CTAs of a block take turns over
// the slices (slice l goes to sub l % nsub), each with its own connections, so a block moves
// data with nsub CTAs at once; sub j of one block only ever waits for sub j of another,
// because every block cuts chunks into the same slices.
struct DBlock {
    u32 rank_slot;   // index into the per-GPU rank contexts
    u32 block;       // block id within its rank
    u32 op_start;
    u32 nops;
    u32 prog_base;   // index (in this array and in `progress`) of the rank's block 0, sub 0
    int send_conn;   // index into `conns`, -1 when none
    int recv_conn;
    u32 sub;
    u32 nsub;
    u32 nrecv;       // receiving ops (per iteration)
    u32 rel_start;   // receives released at each iteration's start (halves as DOp.rel);
                     // 0xffff: every receive released at call start
};

struct DConn {
    char* slots;                 // in the receiver's memory (or host memory, proxied); then lengths
    u64* sent;                   // in the receiver's memory
    u64* acked;                  // in the sender's memory
    u64 pos;                     // pieces done by the local side, across calls
    char* ll;                    // LL slots, in the receiver's memory
    u64 seen;                    // LL sender: the last value of `acked` it read, across calls
    u64* ready;                  // in the sender's memory: the position up to which the
                                 // receiver has released its buffers (direct calls)
    u32 peer;                    // the receiving rank (plan position)
    u32 pad;
};

struct RankCtx {
    char* base[MAX_BUFFERS];     // scratch base pointers (0 and 1 come from CallArgs)
    u32 rank;
    u32 pad;
};

// One call's user buffers, per local rank slot: what the plan's `input` and `output` are.
struct CallArgs {
    u64 input[MAX_LOCAL];
    u64 output[MAX_LOCAL];
    // LL calls of single-block ranks: where the plan's input is copied from before the ops
    // run (0: no copy), by each sub-CTA for exactly the slices it will touch.
    u64 pre[MAX_LOCAL];
    // Direct calls: every rank's input and output, by plan position.
    u64 peer_in[MAX_DIRECT];
    u64 peer_out[MAX_DIRECT];
};

// How this call runs (by value, the same on every GPU of the call).
struct CallMode {
    u32 proto;                   // 0 bulk, 1 LL
    u32 active;                  // CTAs per plan block: sub-CTAs 0..active
    u32 nsub;                    // sub-CTA entries per plan block in the block array
    u32 flags;                   // bit 0: some op waits on another block's progress;
                                 // bit 1: direct sends on (bulk, one process); bit 2: the
                                 // call's input and output alias (use flag bits 3, 4)
    u32 ll_slot_bytes;
    u32 ll_slots;                // a power of two
    u64 ll_epoch;                // added to every LL message number (tests start near a wrap)
    u32 in_chunks;               // chunks of the plan's input buffer (for CallArgs.pre)
    u32 pad;
};

// Vectors a thread moves per step of `move` (loads first, then stores).
#define MOVE_UNROLL 4
// Threads per CTA at most (the host's THREADS): the compiler keeps registers within what a
// CTA of this many threads may use, or the launch fails.
#define MAX_THREADS 512

// A clean round every this many rounds of a connection's LL slots (see the header).
#define LL_CLEAN_ROUNDS (1ull << 20)

struct ErrorRec {
    u32 failed;
    u32 rank;
    u32 block;
    u32 op;
    u32 what;                    // 1 dep, 2 recv, 3 send slot, 4 direct send's `ready`,
                                 // 5 a copy-engine call's barrier (block 0xffffffff)
    u32 pad;
};

__device__ __forceinline__ u64 now_ns() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Op `op`'s trace record (TRACE_WORDS in trace.rs), written by thread 0 of sub-CTA 0: {start
// ns, end ns, start cycles, end cycles}, then the cycle counter where the op's first
// iteration had {waited for its inputs and room, moved thread 0's part, passed the barrier
// after it}. `trace_mark` writes an end (`end` picks which), `trace_phase` phase `p` (0-2).
#define TRACE_WORDS 8
__device__ __forceinline__ void trace_mark(u64* trace, u32 op, int end) {
    trace[TRACE_WORDS * (u64)op + end] = now_ns();
    trace[TRACE_WORDS * (u64)op + 2 + end] = (u64)clock64();
}
__device__ __forceinline__ void trace_phase(u64* trace, u32 op, int p) {
    trace[TRACE_WORDS * (u64)op + 4 + p] = (u64)clock64();
}

// A release/acquire fence at system scope: what a flag's writer needs before publishing, and
// its reader after seeing it; lighter than __threadfence_system's sequentially consistent
// fence, which no wait here needs.
__device__ __forceinline__ void fence_acq_rel_sys() {
    asm volatile("fence.acq_rel.sys;" ::: "memory");
}

__device__ __forceinline__ u64 ld_volatile(const u64* p) {
    return *(volatile const u64*)p;
}

__device__ __forceinline__ void st_volatile(u64* p, u64 v) {
    *(volatile u64*)p = v;
}

__device__ __forceinline__ u32 ld_volatile32(const u32* p) {
    return *(volatile const u32*)p;
}

// ---- element types: arithmetic through float for the 16-bit ones ----

struct F16 { u16 v; };
struct BF16 { u16 v; };

__device__ __forceinline__ float to_f(F16 x) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.v));
    return f;
}
__device__ __forceinline__ F16 from_f(float f, F16) {
    F16 r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.v) : "f"(f));
    return r;
}
__device__ __forceinline__ float to_f(BF16 x) {
    return __uint_as_float(((u32)x.v) << 16);
}
__device__ __forceinline__ BF16 from_f(float f, BF16) {
    u32 u = __float_as_uint(f);
    BF16 r;
    if ((u & 0x7fffffff) > 0x7f800000) {
        r.v = (u16)((u >> 16) | 0x40);  // NaN stays NaN
    } else {
        r.v = (u16)((u + 0x7fff + ((u >> 16) & 1)) >> 16);  // round to nearest even
    }
    return r;
}

template <typename T, int OP> struct Red;
// OP: 0 sum (and avg), 1 prod, 2 min, 3 max
template <typename T> struct Red<T, 0> { __device__ static T f(T a, T b) { return a + b; } };
template <typename T> struct Red<T, 1> { __device__ static T f(T a, T b) { return a * b; } };
template <typename T> struct Red<T, 2> { __device__ static T f(T a, T b) { return b < a ? b : a; } };
template <typename T> struct Red<T, 3> { __device__ static T f(T a, T b) { return b > a ? b : a; } };
#define HALF_RED(H)                                                                            \
    template <> struct Red<H, 0> { __device__ static H f(H a, H b) { return from_f(to_f(a) + to_f(b), H()); } }; \
    template <> struct Red<H, 1> { __device__ static H f(H a, H b) { return from_f(to_f(a) * to_f(b), H()); } }; \
    template <> struct Red<H, 2> { __device__ static H f(H a, H b) { return to_f(b) < to_f(a) ? b : a; } }; \
    template <> struct Red<H, 3> { __device__ static H f(H a, H b) { return to_f(b) > to_f(a) ? b : a; } };
HALF_RED(F16)
HALF_RED(BF16)

template <typename T> struct Div {
    __device__ static T f(T a, u32 n) { return a / (T)n; }
};
template <> struct Div<F16> {
    __device__ static F16 f(F16 a, u32 n) { return from_f(to_f(a) / (float)n, F16()); }
};
template <> struct Div<BF16> {
    __device__ static BF16 f(BF16 a, u32 n) { return from_f(to_f(a) / (float)n, BF16()); }
};

// ---- waits ----

// Spins until *p >= want, or records a timeout. Thread 0 only.
__device__ bool wait_at_least(const u64* p, u64 want, u64 deadline) {
    while (ld_volatile(p) < want) {
        if (clock64() > (long long)deadline) return false;
    }
    return true;
}

// Records the first failure of this GPU's launch: where it waited, and for what.
__device__ void fail_at(ErrorRec* err, u32 rank, u32 block, u32 op, u32 what) {
    if (atomicCAS(&err->failed, 0u, 1u) == 0u) {
        err->rank = rank;
        err->block = block;
        err->op = op;
        err->what = what;
        __threadfence_system();
    }
}

__device__ void fail(ErrorRec* err, const RankCtx* rc, const DBlock* b, u32 op, u32 what) {
    fail_at(err, rc->rank, b->block, op, what);
}

// What an op kind does with the block's connections (kind codes in DOp).
__device__ __forceinline__ bool kind_sends(u8 k) { return k == 0 || k == 3 || k == 4 || k == 5 || k == 8; }
__device__ __forceinline__ bool kind_recvs(u8 k) { return k >= 1 && k <= 5; }

// The rank's buffer bases, in shared memory (ops index them at run time): input and output
// of this call, then the plan's scratch buffers. The caller synchronises the CTA.
__device__ __forceinline__ void load_bases(char** base, u64 in_base, u64 out_base, const RankCtx* rc) {
    if (threadIdx.x < MAX_BUFFERS) {
        base[threadIdx.x] = threadIdx.x == 0 ? (char*)in_base
                          : threadIdx.x == 1 ? (char*)out_base
                                             : rc->base[threadIdx.x];
    }
}

// Moves `n` elements for one op kind: 16-byte vector loads and stores when every pointer
// is 16-byte aligned (the common case), element by element for the rest.
template <typename T, int OP>
__device__ __forceinline__ void move(u8 kind, const T* src, T* dst, const T* in, T* out, u64 n) {
    // A copy onto itself: the input copy of an in-place program compiled out of place, in an
    // in-place call. It would cost a read and a write of the data for nothing.
    if (kind == 6 && src == dst) return;
    if (kind == 8 && src == dst) kind = 0;
    // Kind 9 (a swap's half): exchanges the elements of `dst` (this rank's) and `out` (the
    // peer's).
    constexpr int V = 16 / sizeof(T);
    union Vec {
        uint4 u;
        T t[V];
    };
    const unsigned long long bits = (unsigned long long)src | (unsigned long long)dst |
                                    (unsigned long long)in | (unsigned long long)out;
    const u64 nv = (bits % 16 == 0) ? n / V : 0;
    const uint4* s4 = (const uint4*)src;
    const uint4* i4 = (const uint4*)in;
    uint4* d4 = (uint4*)dst;
    uint4* o4 = (uint4*)out;
    // MOVE_UNROLL vectors per thread at a time, every load issued before the first store: a
    // loop of load-then-store waits one memory latency per vector (the compiler cannot move
    // a load above a store that may alias it), which made a 64 KiB slice per CTA take
    // 16.7 us (bench/NOTES.md section 16). Each element is still read before it is written,
    // and different elements were never ordered (other threads run them in any order).
    const bool red = !(kind == 0 || kind == 1 || kind == 3 || kind == 6 || kind == 8 || kind == 9);
    const bool two = red || kind == 9;
    const uint4* first = (kind == 1 || kind == 3) ? i4 : kind == 9 ? d4 : s4;
    const uint4* second = kind == 7 ? d4 : kind == 9 ? o4 : i4;
    const u64 stride = blockDim.x;
    u64 v0 = threadIdx.x;
    for (; v0 + (MOVE_UNROLL - 1) * stride < nv; v0 += MOVE_UNROLL * stride) {
        Vec a[MOVE_UNROLL], b[MOVE_UNROLL];
#pragma unroll
        for (int j = 0; j < MOVE_UNROLL; j++) a[j].u = first[v0 + j * stride];
        if (two) {
#pragma unroll
            for (int j = 0; j < MOVE_UNROLL; j++) b[j].u = second[v0 + j * stride];
        }
#pragma unroll
        for (int j = 0; j < MOVE_UNROLL; j++) {
            const u64 w = v0 + j * stride;
            Vec x;
            if (red) {
#pragma unroll
                for (int t = 0; t < V; t++)
                    x.t[t] = kind == 7 ? Red<T, OP>::f(b[j].t[t], a[j].t[t]) : Red<T, OP>::f(a[j].t[t], b[j].t[t]);
            } else {
                x.u = a[j].u;
            }
            switch (kind) {
                case 0: o4[w] = x.u; break;
                case 1: case 6: d4[w] = x.u; break;
                case 3: case 8: d4[w] = x.u; o4[w] = x.u; break;
                case 9: o4[w] = x.u; d4[w] = b[j].u; break;
                default:
                    if (kind != 4) d4[w] = x.u;
                    if (kind == 4 || kind == 5) o4[w] = x.u;
                    break;
            }
        }
    }
    for (u64 v = v0; v < nv; v += blockDim.x) {
        Vec a, b, x;
        switch (kind) {
            case 0: o4[v] = s4[v]; break;
            case 1: d4[v] = i4[v]; break;
            case 3: a.u = i4[v]; d4[v] = a.u; o4[v] = a.u; break;
            case 6: d4[v] = s4[v]; break;
            case 8: a.u = s4[v]; d4[v] = a.u; o4[v] = a.u; break;
            case 9: a.u = d4[v]; b.u = o4[v]; o4[v] = a.u; d4[v] = b.u; break;
            default:
                // Reductions: 2 rrc, 4 rrs, 5 rrcs, 7 re.
                a.u = s4[v];
                b.u = kind == 7 ? d4[v] : i4[v];
#pragma unroll
                for (int j = 0; j < V; j++) x.t[j] = kind == 7 ? Red<T, OP>::f(b.t[j], a.t[j]) : Red<T, OP>::f(a.t[j], b.t[j]);
                if (kind != 4) d4[v] = x.u;
                if (kind == 4 || kind == 5) o4[v] = x.u;
                break;
        }
    }
    for (u64 e = nv * V + threadIdx.x; e < n; e += blockDim.x) {
        T x;
        switch (kind) {
            case 0: out[e] = src[e]; break;
            case 1: dst[e] = in[e]; break;
            case 2: dst[e] = Red<T, OP>::f(src[e], in[e]); break;
            case 3: x = in[e]; dst[e] = x; out[e] = x; break;
            case 4: out[e] = Red<T, OP>::f(src[e], in[e]); break;
            case 5: x = Red<T, OP>::f(src[e], in[e]); dst[e] = x; out[e] = x; break;
            case 6: dst[e] = src[e]; break;
            case 7: dst[e] = Red<T, OP>::f(dst[e], src[e]); break;
            case 8: x = src[e]; dst[e] = x; out[e] = x; break;
            case 9: x = dst[e]; dst[e] = out[e]; out[e] = x; break;
        }
    }
}

// The piece of chunk `c` that iteration `l` covers: [lo, hi) elements (Slicer). Widths are
// multiples of the host's alignment, so pieces of an aligned chunk stay 16-byte aligned.
__device__ __forceinline__ void slice_at(const Slicer& s, ChunkPos c, u64 l, u64* lo, u64* hi) {
    const bool longer = c.pos < s.extra;
    const u64 start = (u64)c.slice * s.count + (u64)c.pos * s.base + (longer ? (u64)c.pos : s.extra);
    const u64 end = start + s.base + (longer ? 1 : 0);
    const u64 w = longer ? s.w_long : s.w_short;
    const u64 a = start + l * w, b = a + w;
    *lo = a < end ? a : end;
    *hi = b < end ? b : end;
}

// The chunk after `c`.
__device__ __forceinline__ ChunkPos next_chunk(ChunkPos c, u32 k) {
    return c.pos + 1 < k ? ChunkPos{c.slice, c.pos + 1} : ChunkPos{c.slice + 1, 0};
}

// Thread 0 of a block: waits until every op that op `i` depends on (in other blocks of the
// rank) has finished iteration `li`; false, after recording why, on a timeout or when
// another block has failed.
__device__ bool wait_deps(const DBlock* all, const DBlock* b, const DOp& op, const u32* deps,
                          const u32* progress, u64 li, u64 deadline, ErrorRec* err,
                          const RankCtx* rc, u32 i) {
    for (u32 d = 0; d < op.ndeps; d++) {
        const u32 db = deps[2 * (op.dep_start + d)];
        const u32 dop = deps[2 * (op.dep_start + d) + 1];
        const u32 dep = b->prog_base + db * b->nsub + b->sub;
        const u64 want = li * all[dep].nops + dop + 1;
        while ((u64)ld_volatile32(&progress[dep]) < want) {
            if (clock64() > (long long)deadline || ld_volatile32(&err->failed)) {
                fail(err, rc, b, i, 1);
                return false;
            }
        }
    }
    return true;
}

// Runs one block: the whole op list once per iteration, each iteration covering 1/iters of
// every chunk (as NCCL loops its ring over slices), so every message fits one slot and the
// plan's schedule, checked deadlock-free with two slots per connection, holds per iteration.
template <typename T, int OP>
__device__ void run_block(const DBlock* all, const DBlock* b, const DOp* ops, const u32* deps,
                          DConn* conns, const RankCtx* ranks, u32* progress, u64 in_base,
                          u64 out_base, const Slicer& sl, u32 slot_bytes,
                          u32 nslots, ErrorRec* err, u64 timeout, u64* trace, u32 dshift,
                          u64 peer_in, u64 peer_out) {
    // The block and its connections held in registers, as in run_block_ll.
    const DBlock blk = *b;
    const RankCtx* rc = &ranks[blk.rank_slot];
    __shared__ int abort_flag;
    __shared__ char* base[MAX_BUFFERS];
    load_bases(base, in_base, out_base, rc);
    __syncthreads();
    DConn* sc = blk.send_conn >= 0 ? &conns[blk.send_conn] : 0;
    DConn* rcv = blk.recv_conn >= 0 ? &conns[blk.recv_conn] : 0;
    const DConn scv = sc ? *sc : DConn{};
    const DConn rcv_ = rcv ? *rcv : DConn{};
    u64 send_pos = scv.pos;
    u64 recv_pos = rcv_.pos;
    // Direct calls: how far this CTA's sender may store into its buffers (see the header).
    const u32 relsh = dshift == 3 ? 16u : 0u;
    const u32 rstart = (blk.rel_start >> relsh) & 0xffffu;
    const bool per_iter = dshift && rcv && rstart != 0xffffu;
    const u64 rbase = recv_pos;
    if (dshift && rcv && !per_iter && threadIdx.x == 0) {
        const u64 nit = blk.sub < sl.iters ? (sl.iters - blk.sub + blk.nsub - 1) / blk.nsub : 0;
        st_volatile(rcv_.ready, rbase + nit * blk.nrecv);
    }
    u64 rseen = 0;      // sender: the last value of `ready` read
    u32 released = 0;   // receiver: receives of this iteration released so far
    const u32 me = blk.prog_base + blk.block * blk.nsub + blk.sub;
    u64 li = 0;
    for (u64 l = blk.sub; l < sl.iters; l += blk.nsub, li++) {
        const bool first = li == 0, last = l + blk.nsub >= sl.iters;
        if (per_iter && threadIdx.x == 0) {
            released = rstart;
            if (released > 0) st_volatile(rcv_.ready, rbase + li * blk.nrecv + released);
        }
        for (u32 i = 0; i < blk.nops; i++) {
            const DOp op = ops[blk.op_start + i];
            const bool sends = kind_sends(op.kind), recvs = kind_recvs(op.kind);
            const bool dsend = dshift && sends && ((op.flags >> dshift) & 1u);
            const bool drecv = dshift && recvs && ((op.flags >> (dshift + 1)) & 1u);
            const bool swap = dsend && ((op.flags >> (6 + (dshift >> 1))) & 1u);
            if (threadIdx.x == 0) {
                abort_flag = 0;
                // Trace: when the op first starts waiting, and when its last slice is done.
                if (trace && blk.sub == 0 && first) trace_mark(trace, blk.op_start + i, 0);
                u64 deadline = clock64() + timeout;
                if (!wait_deps(all, b, op, deps, progress, li, deadline, err, rc, i)) abort_flag = 1;
                if (!abort_flag && recvs && !wait_at_least(rcv_.sent, recv_pos + 1, deadline)) {
                    fail(err, rc, b, i, 2);
                    abort_flag = 1;
                }
                if (!abort_flag && dsend && rseen <= send_pos) {
                    if (!wait_at_least(scv.ready, send_pos + 1, deadline)) {
                        fail(err, rc, b, i, 4);
                        abort_flag = 1;
                    }
                    rseen = ld_volatile(scv.ready);
                }
                if (!abort_flag && sends && !dsend && send_pos >= nslots &&
                    !wait_at_least(scv.acked, send_pos - nslots + 1, deadline)) {
                    fail(err, rc, b, i, 3);
                    abort_flag = 1;
                }
                // Acquire: what the flags read above publish (a message, a free slot, a
                // released buffer) is visible to the whole CTA after the barrier.
                fence_acq_rel_sys();
                if (trace && blk.sub == 0 && first) trace_phase(trace, blk.op_start + i, 0);
            }
            __syncthreads();
            if (abort_flag) return;
            T* in = recvs && !drecv ? (T*)(rcv_.slots + (recv_pos % nslots) * (u64)slot_bytes) : 0;
            T* out = sends && !dsend ? (T*)(scv.slots + (send_pos % nslots) * (u64)slot_bytes) : 0;
            // A direct receive's data is already in `dst`: a plain receive has nothing left
            // to move, a receive-and-forward sends it on from there.
            const u8 kind = drecv ? (op.kind == 3 ? 0 : 255) : op.kind;
            T* target = dsend ? (T*)((op.flags & 32u) ? peer_out : peer_in) : 0;
            // The op's message is the concatenation of its chunks' slices (in a slot), or
            // each chunk's slice at its place in the receiver's buffer (direct).
            u64 moff = 0;
            ChunkPos sp = op.src, dp = op.dst, pp = op.peer;
            for (u32 c = 0; c < op.count && kind != 255; c++) {
                u64 slo, shi, dlo, dhi;
                slice_at(sl, sp, l, &slo, &shi);
                slice_at(sl, dp, l, &dlo, &dhi);
                T* src = (T*)base[op.src_buf] + slo;
                T* dst = (T*)base[op.dst_buf] + dlo;
                // Sends and reduce-sends size the message by their source, receives by
                // their destination; both sides cut chunks the same way.
                u64 n = (op.kind == 0 || op.kind == 4 || op.kind >= 6) ? shi - slo : dhi - dlo;
                if (drecv) src = dst;
                // Only the pointers this kind uses take part (and decide the alignment).
                const bool use_src = kind == 0 || kind == 2 || kind >= 4;
                const bool use_dst = kind != 0 && kind != 4;
                T* o = out ? out + moff : 0;
                if (dsend) {
                    u64 plo, phi;
                    slice_at(sl, pp, l, &plo, &phi);
                    o = target + plo;
                }
                if (swap) {
                    // This side's half of the piece; the cut keeps both halves aligned.
                    const u64 h = n / 2 / (16 / sizeof(T)) * (16 / sizeof(T));
                    const u64 at = (op.flags & 256u) ? h : 0;
                    move<T, OP>(9, 0, src + at, 0, o + at, (op.flags & 256u) ? n - h : h);
                } else {
                    move<T, OP>(kind, use_src ? src : 0, use_dst ? dst : 0, in ? in + moff : 0, o, n);
                }
                moff += n;
                sp = next_chunk(sp, sl.k);
                dp = next_chunk(dp, sl.k);
                pp = next_chunk(pp, sl.k);
            }
            // The message's length, after the slots: the host proxy of a connection across
            // the network forwards only that much (published by the fence and `sent` below).
            if (sends && !dsend && threadIdx.x == 0)
                ((u64*)(scv.slots + (u64)nslots * slot_bytes))[send_pos % nslots] = moff * sizeof(T);
            const bool tr = trace && threadIdx.x == 0 && blk.sub == 0 && first;
            if (tr) trace_phase(trace, blk.op_start + i, 1);
            // Release, as NCCL posts a step: the barrier orders every thread's stores before
            // thread 0's fence, which is cumulative, so one fence (not one per thread) makes
            // them visible before the flags below.
            __syncthreads();
            if (tr) trace_phase(trace, blk.op_start + i, 2);
            if (sends) send_pos++;
            if (recvs) recv_pos++;
            if (threadIdx.x == 0) {
                fence_acq_rel_sys();
                if (sends) st_volatile(scv.sent, send_pos);
                if (recvs) st_volatile(rcv_.acked, recv_pos);
                if (per_iter) {
                    // This op's reads and writes are done (the barrier above): release the
                    // receives that waited for them.
                    const u32 rj = (op.rel >> relsh) & 0xffffu;
                    if (rj != released) {
                        released = rj;
                        st_volatile(rcv_.ready, rbase + li * blk.nrecv + rj);
                    }
                }
                *(volatile u32*)&progress[me] = (u32)(li * blk.nops + i + 1);
                if (trace && blk.sub == 0 && last) trace_mark(trace, blk.op_start + i, 1);
            }
        }
    }
    if (threadIdx.x == 0) {
        if (sc) sc->pos = send_pos;
        if (rcv) rcv->pos = recv_pos;
    }
}

// ---- LL protocol ----

// The flag of LL message number `e` (message number + epoch): 1 .. 2^32 - 1, never the 0 of
// memory no message has written yet.
__device__ __forceinline__ u32 ll_flag(u64 e) {
    return (u32)(e % 0xffffffffull) + 1u;
}

// One line: both halves {data, flag} in one 16-byte store, as NCCL's LL. No fence: the
// receiver trusts a half only when its own flag is current, and 8-byte halves are atomic.
__device__ __forceinline__ void ll_store(u32* line, u64 v, u32 flag) {
    asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(line), "r"((u32)v),
                 "r"(flag), "r"((u32)(v >> 32)), "r"(flag)
                 : "memory");
}

// Polls one line until both halves carry `flag`; false on timeout or when another CTA
// has failed (the caller records which).
__device__ __forceinline__ bool ll_load(const u32* line, u32 flag, u64* v, u64 deadline,
                                        const ErrorRec* err) {
    u32 d0, f0, d1, f1;
    u32 spins = 0;
    while (true) {
        asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                     : "=r"(d0), "=r"(f0), "=r"(d1), "=r"(f1)
                     : "l"(line)
                     : "memory");
        if (f0 == flag && f1 == flag) break;
        if ((++spins & 255u) == 0u &&
            (clock64() > (long long)deadline || ld_volatile32(&err->failed))) {
            return false;
        }
    }
    *v = (u64)d0 | ((u64)d1 << 32);
    return true;
}

// A line's 8 bytes as elements.
template <typename T> union LLine {
    u64 u;
    T t[8 / sizeof(T)];
};

// Elements [0, ne) at p as a line's payload (zeros past ne): one 8-byte load when aligned.
template <typename T>
__device__ __forceinline__ u64 ll_pack(const T* p, u32 ne) {
    constexpr u32 V = 8 / sizeof(T);
    if (ne == V && (unsigned long long)p % 8 == 0) return *(const u64*)p;
    LLine<T> x;
    x.u = 0;
#pragma unroll
    for (u32 j = 0; j < V; j++) {
        if (j < ne) x.t[j] = p[j];
    }
    return x.u;
}

// Stores the first ne elements of a payload at p.
template <typename T>
__device__ __forceinline__ void ll_unpack(T* p, u64 v, u32 ne) {
    constexpr u32 V = 8 / sizeof(T);
    if (ne == V && (unsigned long long)p % 8 == 0) {
        *(u64*)p = v;
        return;
    }
    LLine<T> x;
    x.u = v;
#pragma unroll
    for (u32 j = 0; j < V; j++) {
        if (j < ne) p[j] = x.t[j];
    }
}

// Element-wise Red(a, b) of two payloads (the same argument order as `move`).
template <typename T, int OP>
__device__ __forceinline__ u64 ll_reduce(u64 a, u64 b) {
    LLine<T> x, y, r;
    x.u = a;
    y.u = b;
#pragma unroll
    for (u32 j = 0; j < 8 / sizeof(T); j++) r.t[j] = Red<T, OP>::f(x.t[j], y.t[j]);
    return r.u;
}

// One communicating op (kinds 0-5) of one iteration over LL lines. Each thread takes lines
// j = tid, tid + blockDim, ... of each chunk's part; a receiving thread waits for its own
// line only. False when this thread's wait failed.
template <typename T, int OP>
__device__ bool ll_op(const DOp& op, char* const* base, const Slicer& sl, u64 l,
                      const u32* rlines, u32 rflag, u32* slines, u32 sflag, u32 slot_lines,
                      bool clean, u64 deadline, const ErrorRec* err) {
    constexpr u32 V = 8 / sizeof(T);
    const u8 kind = op.kind;
    const bool sends = kind_sends(kind), recvs = kind_recvs(kind);
    u64 line0 = 0;
    ChunkPos sp = op.src, dp = op.dst;
    for (u32 c = 0; c < op.count; c++, sp = next_chunk(sp, sl.k), dp = next_chunk(dp, sl.k)) {
        u64 slo, shi, dlo, dhi;
        slice_at(sl, sp, l, &slo, &shi);
        slice_at(sl, dp, l, &dlo, &dhi);
        const T* src = (const T*)base[op.src_buf] + slo;
        T* dst = (T*)base[op.dst_buf] + dlo;
        // As in bulk: sends and reduce-sends size the message by their source, receives by
        // their destination; both sides cut chunks the same way.
        const u64 n = (kind == 0 || kind == 4 || kind == 8) ? shi - slo : dhi - dlo;
        const u64 nl = (n + V - 1) / V;
        for (u64 j = threadIdx.x; j < nl; j += blockDim.x) {
            const u64 e = j * V;
            const u32 ne = (u32)(n - e < V ? n - e : V);
            u64 own = 0, in = 0, x = 0;
            // The local operand first: its load overlaps the wait for the peer's line.
            if (kind == 0 || kind == 2 || kind >= 4) own = ll_pack(src + e, ne);
            if (recvs && !ll_load(rlines + 4 * (line0 + j), rflag, &in, deadline, err)) return false;
            switch (kind) {
                case 0: x = own; break;
                case 1: ll_unpack(dst + e, in, ne); break;
                case 2: x = ll_reduce<T, OP>(own, in); ll_unpack(dst + e, x, ne); break;
                case 3: x = in; ll_unpack(dst + e, x, ne); break;
                case 4: x = ll_reduce<T, OP>(own, in); break;
                case 8:
                    x = own;
                    if ((const T*)dst != src) ll_unpack(dst + e, own, ne);
                    break;
                default: x = ll_reduce<T, OP>(own, in); ll_unpack(dst + e, x, ne); break;
            }
            if (sends) ll_store(slines + 4 * (line0 + j), x, sflag);
        }
        line0 += nl;
    }
    if (sends && clean) {
        for (u64 j = line0 + threadIdx.x; j < slot_lines; j += blockDim.x) ll_store(slines + 4 * j, 0, sflag);
    }
    return true;
}

// Ensures *seen >= want, re-reading *p (`acked`) into it only when the cached value is
// short: usually a slot has been free since long before, and the read would sit on the
// critical path. False at the deadline or when another CTA has failed. Any thread.
__device__ __forceinline__ bool wait_room(const u64* p, u64* seen, u64 want, u64 deadline,
                                         const ErrorRec* err) {
    u32 spins = 0;
    while (*seen < want) {
        *seen = ld_volatile(p);
        if ((++spins & 255u) == 0u && (clock64() > (long long)deadline || ld_volatile32(&err->failed))) {
            return false;
        }
    }
    return true;
}

// Runs one block over LL: the same iterations, slices and op order as `run_block`. Per op,
// one CTA barrier at its end (before the acknowledgment and progress are published, and so
// that the next op sees this op's writes); a second one before it only when it waits for
// another block. Fences only before publishing progress that another block reads.
template <typename T, int OP>
__device__ void run_block_ll(const DBlock* all, const DBlock* b, const DOp* ops, const u32* deps,
                             DConn* conns, const RankCtx* ranks, u32* progress, u64 in_base,
                             u64 out_base, u64 pre, const Slicer& sl, const CallMode& m,
                             ErrorRec* err, u64 timeout, u64* trace) {
    // The block's fields, and below its connections' flag pointers, held in registers: the
    // op loop stores to global memory, after which the compiler would load them again, a
    // dependent L2 round trip (about 500 cycles) before each op's own load.
    const DBlock blk = *b;
    const RankCtx* rc = &ranks[blk.rank_slot];
    __shared__ int abort_flag;
    __shared__ char* base[MAX_BUFFERS];
    load_bases(base, in_base, out_base, rc);
    if (threadIdx.x == 0) abort_flag = 0;
    __syncthreads();
    if (pre) {
        // The input copy of an out-of-place call of an in-place plan (or the reverse), done
        // here rather than as a copy before the launch: this sub-CTA copies exactly the
        // slices of every input chunk that its iterations touch, and no other CTA of the
        // rank touches them (the host sends only single-block ranks this way).
        for (u64 l = blk.sub; l < sl.iters; l += blk.nsub) {
            ChunkPos cp{0, 0};
            for (u32 c = 0; c < m.in_chunks; c++, cp = next_chunk(cp, sl.k)) {
                u64 lo, hi;
                slice_at(sl, cp, l, &lo, &hi);
                move<T, OP>(6, (const T*)pre + lo, (T*)in_base + lo, 0, 0, hi - lo);
            }
        }
        __syncthreads();
    }
    DConn* sc = blk.send_conn >= 0 ? &conns[blk.send_conn] : 0;
    DConn* rcv = blk.recv_conn >= 0 ? &conns[blk.recv_conn] : 0;
    u64* const sacked = sc ? sc->acked : 0;
    u64* const racked = rcv ? rcv->acked : 0;
    u64 send_pos = sc ? sc->pos : 0;
    u64 recv_pos = rcv ? rcv->pos : 0;
    u64 seen = sc ? sc->seen : 0;
    u32* sll = sc ? (u32*)sc->ll : 0;
    const u32* rll = rcv ? (const u32*)rcv->ll : 0;
    const u32 slot_lines = m.ll_slot_bytes / 16;
    const u32 slot_shift = __ffs(m.ll_slots) - 1;
    const u64 slot_mask = m.ll_slots - 1;
    const u32 me = blk.prog_base + blk.block * blk.nsub + blk.sub;
    u64 li = 0;
    for (u64 l = blk.sub; l < sl.iters; l += blk.nsub, li++) {
        const bool first = li == 0, last = l + blk.nsub >= sl.iters;
        // Each op's instruction is loaded while the op before it runs.
        DOp next = blk.nops > 0 ? ops[blk.op_start] : DOp{};
        for (u32 i = 0; i < blk.nops; i++) {
            const DOp op = next;
            if (i + 1 < blk.nops) next = ops[blk.op_start + i + 1];
            const bool sends = kind_sends(op.kind), recvs = kind_recvs(op.kind);
            const u64 deadline = clock64() + timeout;
            if (trace && threadIdx.x == 0 && blk.sub == 0 && first) trace_mark(trace, blk.op_start + i, 0);
            if (op.ndeps > 0) {
                if (threadIdx.x == 0) {
                    if (!wait_deps(all, b, op, deps, progress, li, deadline, err, rc, i)) abort_flag = 1;
                    // Acquire: the other block fenced before publishing its progress.
                    __threadfence();
                }
                __syncthreads();
                if (abort_flag) return;
            }
            bool ok = true;
            if (sends && send_pos >= m.ll_slots &&
                !wait_room(sacked, &seen, send_pos - m.ll_slots + 1, deadline, err)) {
                fail(err, rc, b, i, 3);
                ok = false;
            }
            const bool tr = trace && threadIdx.x == 0 && blk.sub == 0 && first;
            if (tr) trace_phase(trace, blk.op_start + i, 0);
            if (ok && (sends || recvs)) {
                const u64 se = send_pos + m.ll_epoch;
                const bool clean = ((se >> slot_shift) & (LL_CLEAN_ROUNDS - 1)) == LL_CLEAN_ROUNDS - 1;
                const u32* rl = recvs ? rll + (recv_pos & slot_mask) * (u64)slot_lines * 4 : 0;
                u32* wl = sends ? sll + (send_pos & slot_mask) * (u64)slot_lines * 4 : 0;
                if (!ll_op<T, OP>(op, base, sl, l, rl, ll_flag(recv_pos + m.ll_epoch), wl,
                                  ll_flag(se), slot_lines, clean, deadline, err)) {
                    fail(err, rc, b, i, 2);
                    ok = false;
                }
            } else if (ok) {
                // Local ops: copy, reduce.
                ChunkPos sp = op.src, dp = op.dst;
                for (u32 c = 0; c < op.count; c++, sp = next_chunk(sp, sl.k), dp = next_chunk(dp, sl.k)) {
                    u64 slo, shi, dlo, dhi;
                    slice_at(sl, sp, l, &slo, &shi);
                    slice_at(sl, dp, l, &dlo, &dhi);
                    move<T, OP>(op.kind, (T*)base[op.src_buf] + slo, (T*)base[op.dst_buf] + dlo, 0, 0,
                                shi - slo);
                }
            }
            if (!ok) abort_flag = 1;
            if (tr) trace_phase(trace, blk.op_start + i, 1);
            // Release for the blocks that wait on this op (this rank's other blocks, same GPU).
            if (op.flags & 1u) __threadfence();
            __syncthreads();
            if (tr) trace_phase(trace, blk.op_start + i, 2);
            if (abort_flag) return;
            if (sends) send_pos++;
            if (recvs) recv_pos++;
            if (threadIdx.x == 0) {
                // Every thread's loads of the slot have returned (their values were used
                // before the barrier), so the slot may be overwritten: no fence needed.
                if (recvs) st_volatile(racked, recv_pos);
                if (m.flags & 1u) *(volatile u32*)&progress[me] = (u32)(li * blk.nops + i + 1);
                if (trace && blk.sub == 0 && last) trace_mark(trace, blk.op_start + i, 1);
            }
        }
    }
    if (threadIdx.x == 0) {
        if (sc) {
            sc->pos = send_pos;
            sc->seen = seen;
        }
        if (rcv) rcv->pos = recv_pos;
    }
}

// The entry of the block array (and of `progress`) that CTA `cta` of this launch runs:
// sub-CTA cta % active of plan block cta / active.
__device__ __forceinline__ u32 entry_of(u32 cta, const CallMode& m) {
    return (cta / m.active) * m.nsub + cta % m.active;
}

// The end of every CTA's part of a call: the last CTA of the launch to get here clears the
// progress counters (one per launched CTA) and the finished count, so the next call starts
// from zero with no host work. Every other CTA is past its last progress read or write by
// then.
__device__ void end_call(u32* progress, u32* done, const CallMode& m) {
    __shared__ int last;
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        last = atomicAdd(done, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (last) {
        for (u32 i = threadIdx.x; i < gridDim.x; i += blockDim.x) progress[entry_of(i, m)] = 0;
        if (threadIdx.x == 0) *done = 0;
        __threadfence();
    }
}

// The base pointers of local rank `slot` from the by-value argument, read with constant
// offsets (a run-time index into kernel parameters would copy them to local memory).
__device__ __forceinline__ void pick(const CallArgs& a, u32 slot, u64* in, u64* out, u64* pre) {
    u64 i = 0, o = 0, p = 0;
#pragma unroll
    for (u32 j = 0; j < MAX_LOCAL; j++) {
        if (j == slot) {
            i = a.input[j];
            o = a.output[j];
            p = a.pre[j];
        }
    }
    *in = i;
    *out = o;
    *pre = p;
}

// Rank `peer`'s input and output from the by-value argument (constant offsets, as `pick`).
__device__ __forceinline__ void pick_peer(const CallArgs& a, u32 peer, u64* in, u64* out) {
    u64 i = 0, o = 0;
#pragma unroll
    for (u32 j = 0; j < MAX_DIRECT; j++) {
        if (j == peer) {
            i = a.peer_in[j];
            o = a.peer_out[j];
        }
    }
    *in = i;
    *out = o;
}

// Which pair of DOp.flags bits says an op's send and receive are direct in this call
// (CallMode.flags bits 1, 2), or 0 when none is.
__device__ __forceinline__ u32 direct_shift(const CallMode& m) {
    return (m.flags & 2u) ? ((m.flags & 4u) ? 3u : 1u) : 0u;
}

template <typename T>
__device__ void scale_one(T* out, u64 len, u32 n) {
    for (u64 e = blockIdx.x * (u64)blockDim.x + threadIdx.x; e < len; e += (u64)gridDim.x * blockDim.x) {
        out[e] = Div<T>::f(out[e], n);
    }
}

// Progress words need clearing only when some op reads them (CallMode.flags bit 0).
// Two entries per type and operator, one per protocol (the host picks by the call's): a
// small call loads only the LL path's code, a few tens of KiB, rather than an entry of about
// 100 KiB holding both (worth about 0.1 us a graph call, bench/NOTES.md section 21).
#define ENTRY_ARGS                                                                                  \
    const DBlock *b, const DOp *o, const u32 *d, DConn *c, const RankCtx *r, u32 *p, u32 *done,   \
        CallArgs args, Slicer sl, u32 sb, u32 ns, ErrorRec *e, u64 t, u64 *tr, CallMode m
#define MAIN(T, NAME, OPN, OPI)                                                                      \
    extern "C" __global__ void __launch_bounds__(MAX_THREADS) coll_##NAME##_##OPN(ENTRY_ARGS) {     \
        const DBlock* mine = &b[entry_of(blockIdx.x, m)];                                            \
        u64 in_base, out_base, pre;                                                                  \
        pick(args, mine->rank_slot, &in_base, &out_base, &pre);                                      \
        const u32 ds = direct_shift(m);                                                              \
        u64 pin = 0, pout = 0;                                                                       \
        if (ds && mine->send_conn >= 0) pick_peer(args, c[mine->send_conn].peer, &pin, &pout);       \
        run_block<T, OPI>(b, mine, o, d, c, r, p, in_base, out_base, sl, sb, ns, e, t, tr, ds, pin,  \
                          pout);                                                                     \
        if (m.flags & 1u) end_call(p, done, m);                                                      \
    }                                                                                                \
    extern "C" __global__ void __launch_bounds__(MAX_THREADS) coll_##NAME##_##OPN##_ll(ENTRY_ARGS) { \
        const DBlock* mine = &b[entry_of(blockIdx.x, m)];                                            \
        u64 in_base, out_base, pre;                                                                  \
        pick(args, mine->rank_slot, &in_base, &out_base, &pre);                                      \
        run_block_ll<T, OPI>(b, mine, o, d, c, r, p, in_base, out_base, pre, sl, m, e, t, tr);       \
        if (m.flags & 1u) end_call(p, done, m);                                                      \
    }
// avg: divides every output element of the local ranks by the rank count.
#define KERNELS(T, NAME)                                                                           \
    MAIN(T, NAME, sum, 0)                                                                          \
    MAIN(T, NAME, prod, 1)                                                                         \
    MAIN(T, NAME, min, 2)                                                                          \
    MAIN(T, NAME, max, 3)                                                                          \
    extern "C" __global__ void coll_##NAME##_scale(CallArgs args, u32 nranks, u64 out_elems, u32 n) { \
        _Pragma("unroll") for (u32 j = 0; j < MAX_LOCAL; j++) {                                    \
            if (j < nranks) scale_one<T>((T*)args.output[j], out_elems, n);                        \
        }                                                                                          \
    }

KERNELS(float, f32)
KERNELS(F16, f16)
KERNELS(BF16, bf16)
KERNELS(int, i32)
KERNELS(double, f64)
KERNELS(long long, i64)
KERNELS(unsigned char, u8)

// Copy-engine calls (copy_engine.rs) run no interpreter: each GPU's stream runs this
// barrier, the call's copies, and this barrier again. Each GPU counts its barriers in a word
// of its own memory; the barrier's one thread raises it and waits until every GPU's word has
// reached the same count. Before the copies: every rank has reached the call, so its stream's earlier work on
// the buffers is done; after them: every copy into this GPU's buffers is done.
struct BarrierArgs {
    u64* mine;
    u64* all[MAX_DIRECT];        // every GPU's word (this one's too)
    u32 n;
    u32 rank;                    // this GPU's first rank, for the error record
    u64 timeout;
    ErrorRec* err;
};

extern "C" __global__ void coll_barrier(BarrierArgs a) {
    const u64 v = ld_volatile(a.mine) + 1;
    // Release: what this stream did before (the copies) is visible before the count.
    fence_acq_rel_sys();
    st_volatile(a.mine, v);
    const u64 deadline = clock64() + a.timeout;
    for (u32 i = 0; i < a.n && i < MAX_DIRECT; i++) {
        while (ld_volatile(a.all[i]) < v) {
            if (clock64() > (long long)deadline || ld_volatile32(&a.err->failed)) {
                fail_at(a.err, a.rank, 0xffffffffu, 0, 5);
                return;
            }
        }
    }
    fence_acq_rel_sys();
}

// The SM-store ceiling: every thread of the grid copies 16-byte words from this GPU's memory
// into a peer's with plain stores, as fast as the SMs issue them. No protocol, no flags: the
// most any store-based transfer between the two GPUs can reach (issue 10's yardstick).
extern "C" __global__ void coll_store_ceiling(uint4* dst, const uint4* src, u64 n) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x)
        dst[i] = src[i];
}
