// coll's interpreter kernel: one CTA per (rank, thread block) of a plan, running that
// block's ops in order. Compiled at run time by NVRTC, once per element type and reduction
// operator, from one source string with no includes: abi.h (all the host shares with the
// kernel), this file (the protocols' invariants, then what both protocols use), bulk.cuh (the
// bulk protocol and direct messages), ll.cuh (the LL protocol), multi.cuh (blocks of several
// peers, in both protocols) and entries.cu (the entries and the copy-engine barrier), in that
// order (KERNEL_SOURCE in cuda/mod.rs).
//
// Three protocols, chosen by the host per call (CallMode.proto) from the size of the call's
// largest message; both sides of every connection use the same one for a whole call. The
// third, LL128 (lines of 120 bytes of data and a flag, for calls between LL's and bulk's;
// its invariants are in ll.cuh), runs LL's interpreter in entries of its own (`_ll128`), on
// slots of its own after LL's.
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
// Blocks of several peers (DBlock.nsend_conns or nrecv_conns above 1; the plan's send_also
// and recv_also): a block side's connection ends lie contiguously from send_conn (recv_conn),
// in the plan's order of its peers. Every op of the block that sends writes the same message
// into the slot of each send end, after waiting for room in each, and publishes each one's
// `sent` (bulk; LL: each line's flags); every op that receives waits for a message on each
// receive end and combines them in that order after its source: x = src (+) m(end 0) (+)
// m(end 1) ... (only reducing kinds receive from several ends, as the plan checks), then
// acknowledges each. Every end of one block side takes the same number of messages in every
// call, so their positions are always equal: the block keeps one position per side and stores
// it to every end. Such a block runs run_block_multi (multi.cuh) in either protocol, a simple
// interpreter over the ends whose slot addresses it keeps in shared memory, so the tuned
// single-peer interpreters (run_block, run_block_ll) are unchanged; only the `_multi`
// entries, which the host launches on a GPU with such a block (MODE_SEVERAL), hold it
// (entries.cu). Its messages never go direct (the host places none for its ops or their
// partners' ops).
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
// returns, and the host reports the rank, block and op. Every wait also gives up once the
// GPU's error record says another CTA failed or the host aborted (ErrorRec.failed, which the
// host may write while kernels run: CudaExecutor::abort).
//
// Per call, the user's buffers arrive as a kernel argument (CallArgs, by value): the input
// and output base pointers of every rank on this GPU. Scratch bases are fixed at plan load.
// An LL call of a rank with one plan block may also name where its input is copied from
// (CallArgs.pre, for a call of the other placement): each sub-CTA copies, before its first
// op, exactly the slices of the input its iterations touch, so no CTA waits for another.

// Vectors a thread moves per step of `move` (loads first, then stores).
#define MOVE_UNROLL 4

// Kernel-internal move kinds, beyond the host's op codes (OpCode in abi.h).
// A swap's half: exchanges the elements of `dst` (this rank's) and `out` (the peer's).
#define MOVE_SWAP 9
// Nothing to move: a direct receive whose data is already in place.
#define MOVE_NONE 255

__device__ __forceinline__ u64 now_ns() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Op `op`'s trace record (TraceRec), written by thread 0 of sub-CTA 0: `trace_mark` writes
// an end (`end` picks which), `trace_phase` phase `p` (0-2).
__device__ __forceinline__ void trace_mark(TraceRec* trace, u32 op, int end) {
    trace[op].ns[end] = now_ns();
    trace[op].cycles[end] = (u64)clock64();
}
__device__ __forceinline__ void trace_phase(TraceRec* trace, u32 op, int p) {
    trace[op].phase[p] = (u64)clock64();
}

// A release/acquire fence at system scope: what a flag's writer needs before publishing, and
// its reader after seeing it; lighter than __threadfence_system's sequentially consistent
// fence, which no wait here needs.
__device__ __forceinline__ void fence_acq_rel_sys() {
    asm volatile("fence.acq_rel.sys;" ::: "memory");
}

// An acquire load at system scope of a flag already seen to be current: what its reader
// needs, without the full fence's wait for this thread's own earlier stores to land (which
// at a bulk op's start cost about 1.7 us even with nothing outstanding). With the CTA
// barrier after it, every thread's later accesses follow the writer's release.
__device__ __forceinline__ void acquire_sys(const u64* p) {
    u64 v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    (void)v;
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

// Spins until *p >= want; false at the deadline or once `err->failed` is set (another CTA
// failed, or the host aborted), the caller records why. Thread 0 only. The failed word is
// read every 64 spins only, so a wait that is about to succeed is not slowed by it.
__device__ bool wait_at_least(const u64* p, u64 want, u64 deadline, const ErrorRec* err) {
    u32 spins = 0;
    while (ld_volatile(p) < want) {
        if (clock64() > (long long)deadline) return false;
        if ((++spins & 63u) == 0u && ld_volatile32(&err->failed)) return false;
    }
    return true;
}

// Records the first failure of this GPU's launch: where it waited, and for what. After the
// host's abort (failed == ERR_ABORTED) the first CTA to give up records its place with
// FAULT_ABORTED instead, so the host can name a rank; a failure recorded before the abort is
// kept as it was.
__device__ void fail_at(ErrorRec* err, u32 rank, u32 block, u32 op, u32 what) {
    const u32 prev = atomicCAS(&err->failed, 0u, ERR_FAILED);
    if (prev == 0u || (prev == ERR_ABORTED && atomicCAS(&err->what, 0u, FAULT_ABORTED) == 0u)) {
        err->rank = rank;
        err->block = block;
        err->op = op;
        if (prev == 0u) err->what = what;
        __threadfence_system();
    }
}

__device__ void fail(ErrorRec* err, const RankCtx* rc, const DBlock* b, u32 op, u32 what) {
    fail_at(err, rc->rank, b->block, op, what);
}

// What an op kind does with the block's connections (DOp.kind, an OpCode).
__device__ __forceinline__ bool kind_sends(u8 k) {
    return k == OP_SEND || k == OP_RECV_COPY_SEND || k == OP_RECV_REDUCE_SEND ||
           k == OP_RECV_REDUCE_COPY_SEND || k == OP_COPY_SEND;
}
__device__ __forceinline__ bool kind_recvs(u8 k) { return k >= OP_RECV && k <= OP_RECV_REDUCE_COPY_SEND; }

// The rank's buffer bases, in shared memory (ops index them at run time): input and output
// of this call, then the plan's scratch buffers. The caller synchronises the CTA.
__device__ __forceinline__ void load_bases(char** base, u64 in_base, u64 out_base, const RankCtx* rc) {
    if (threadIdx.x < MAX_BUFFERS) {
        base[threadIdx.x] = threadIdx.x == BUF_INPUT ? (char*)in_base
                          : threadIdx.x == BUF_OUTPUT ? (char*)out_base
                                             : (char*)rc->base[threadIdx.x];
    }
}

// Moves `n` elements for one op kind: 16-byte vector loads and stores when every pointer
// is 16-byte aligned (the common case), element by element for the rest.
template <typename T, int OP>
__device__ __forceinline__ void move(u8 kind, const T* src, T* dst, const T* in, T* out, u64 n) {
    // A copy onto itself: the input copy of an in-place program compiled out of place, in an
    // in-place call. It would cost a read and a write of the data for nothing.
    if (kind == OP_COPY && src == dst) return;
    if (kind == OP_COPY_SEND && src == dst) kind = OP_SEND;
    // MOVE_SWAP (a swap's half): exchanges the elements of `dst` (this rank's) and `out` (the
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
    // 16.7 us (bench/NOTES.md, Large calls). Each element is still read before it is written,
    // and different elements were never ordered (other threads run them in any order).
    const bool red = !(kind == OP_SEND || kind == OP_RECV || kind == OP_RECV_COPY_SEND ||
                       kind == OP_COPY || kind == OP_COPY_SEND || kind == MOVE_SWAP);
    const bool two = red || kind == MOVE_SWAP;
    const uint4* first = (kind == OP_RECV || kind == OP_RECV_COPY_SEND) ? i4 : kind == MOVE_SWAP ? d4 : s4;
    const uint4* second = kind == OP_REDUCE ? d4 : kind == MOVE_SWAP ? o4 : i4;
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
                    x.t[t] = kind == OP_REDUCE ? Red<T, OP>::f(b[j].t[t], a[j].t[t])
                                               : Red<T, OP>::f(a[j].t[t], b[j].t[t]);
            } else {
                x.u = a[j].u;
            }
            switch (kind) {
                case OP_SEND: o4[w] = x.u; break;
                case OP_RECV: case OP_COPY: d4[w] = x.u; break;
                case OP_RECV_COPY_SEND: case OP_COPY_SEND: d4[w] = x.u; o4[w] = x.u; break;
                case MOVE_SWAP: o4[w] = x.u; d4[w] = b[j].u; break;
                default:
                    if (kind != OP_RECV_REDUCE_SEND) d4[w] = x.u;
                    if (kind == OP_RECV_REDUCE_SEND || kind == OP_RECV_REDUCE_COPY_SEND) o4[w] = x.u;
                    break;
            }
        }
    }
    for (u64 v = v0; v < nv; v += blockDim.x) {
        Vec a, b, x;
        switch (kind) {
            case OP_SEND: o4[v] = s4[v]; break;
            case OP_RECV: d4[v] = i4[v]; break;
            case OP_RECV_COPY_SEND: a.u = i4[v]; d4[v] = a.u; o4[v] = a.u; break;
            case OP_COPY: d4[v] = s4[v]; break;
            case OP_COPY_SEND: a.u = s4[v]; d4[v] = a.u; o4[v] = a.u; break;
            case MOVE_SWAP: a.u = d4[v]; b.u = o4[v]; o4[v] = a.u; d4[v] = b.u; break;
            default:
                // Reductions: rrc, rrs, rrcs, re.
                a.u = s4[v];
                b.u = kind == OP_REDUCE ? d4[v] : i4[v];
#pragma unroll
                for (int j = 0; j < V; j++)
                    x.t[j] = kind == OP_REDUCE ? Red<T, OP>::f(b.t[j], a.t[j]) : Red<T, OP>::f(a.t[j], b.t[j]);
                if (kind != OP_RECV_REDUCE_SEND) d4[v] = x.u;
                if (kind == OP_RECV_REDUCE_SEND || kind == OP_RECV_REDUCE_COPY_SEND) o4[v] = x.u;
                break;
        }
    }
    for (u64 e = nv * V + threadIdx.x; e < n; e += blockDim.x) {
        T x;
        switch (kind) {
            case OP_SEND: out[e] = src[e]; break;
            case OP_RECV: dst[e] = in[e]; break;
            case OP_RECV_REDUCE_COPY: dst[e] = Red<T, OP>::f(src[e], in[e]); break;
            case OP_RECV_COPY_SEND: x = in[e]; dst[e] = x; out[e] = x; break;
            case OP_RECV_REDUCE_SEND: out[e] = Red<T, OP>::f(src[e], in[e]); break;
            case OP_RECV_REDUCE_COPY_SEND: x = Red<T, OP>::f(src[e], in[e]); dst[e] = x; out[e] = x; break;
            case OP_COPY: dst[e] = src[e]; break;
            case OP_REDUCE: dst[e] = Red<T, OP>::f(dst[e], src[e]); break;
            case OP_COPY_SEND: x = src[e]; dst[e] = x; out[e] = x; break;
            case MOVE_SWAP: x = dst[e]; dst[e] = out[e]; out[e] = x; break;
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

// Whether an op's pieces are sized by its source (sends, reduce-sends, local ops, copy-sends)
// rather than its destination (receives); both ends of a message cut chunks alike, so the
// two agree.
__device__ __forceinline__ bool sized_by_src(u8 kind) {
    return kind == OP_SEND || kind == OP_RECV_REDUCE_SEND || kind >= OP_COPY;
}

// An op's piece of one chunk at one iteration: where it starts in the source and in the
// destination buffer, and its length, all in elements.
struct Piece {
    u64 src, dst, n;
};

// The piece of source chunk `sp` and destination chunk `dp` that iteration `l` of an op of
// `kind` covers (every interpreter walks an op's chunks so).
__device__ __forceinline__ Piece piece_at(const Slicer& sl, ChunkPos sp, ChunkPos dp, u64 l, u8 kind) {
    u64 slo, shi, dlo, dhi;
    slice_at(sl, sp, l, &slo, &shi);
    slice_at(sl, dp, l, &dlo, &dhi);
    return Piece{slo, dlo, sized_by_src(kind) ? shi - slo : dhi - dlo};
}

// The chunk after `c`.
__device__ __forceinline__ ChunkPos next_chunk(ChunkPos c, u32 k) {
    return c.pos + 1 < k ? ChunkPos{c.slice, c.pos + 1} : ChunkPos{c.slice + 1, 0};
}

// Thread 0 of a block: waits until every op that op `i` depends on (in other blocks of the
// rank) has finished iteration `li`; false, after recording why, on a timeout or when
// another block has failed.
__device__ bool wait_deps(const DBlock* all, const DBlock* b, const DOp& op, const DDep* deps,
                          const u32* progress, u64 li, u64 deadline, ErrorRec* err,
                          const RankCtx* rc, u32 i) {
    for (u32 d = 0; d < op.ndeps; d++) {
        const u32 db = deps[op.dep_start + d].block;
        const u32 dop = deps[op.dep_start + d].op;
        const u32 dep = b->prog_base + db * b->nsub + b->sub;
        const u64 want = li * all[dep].nops + dop + 1;
        while ((u64)ld_volatile32(&progress[dep]) < want) {
            if (clock64() > (long long)deadline || ld_volatile32(&err->failed)) {
                fail(err, rc, b, i, FAULT_DEP);
                return false;
            }
        }
    }
    return true;
}
