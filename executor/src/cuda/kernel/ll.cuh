// The LL and LL128 protocols: see common.cuh for LL's invariants, below for LL128's.

// A clean round every this many rounds of a connection's LL slots (see common.cuh).
#define LL_CLEAN_ROUNDS (1ull << 20)
// 32-bit words of one line: {data lo, flag, data hi, flag}.
#define LL_LINE_WORDS (LL_LINE_BYTES / 4)

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

// One op that sends or receives, of one iteration over LL lines. Each thread takes lines
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
        const Piece p = piece_at(sl, sp, dp, l, kind);
        const T* src = (const T*)base[op.src_buf] + p.src;
        T* dst = (T*)base[op.dst_buf] + p.dst;
        const u64 n = p.n;
        const u64 nl = (n + V - 1) / V;
        for (u64 j = threadIdx.x; j < nl; j += blockDim.x) {
            const u64 e = j * V;
            const u32 ne = (u32)(n - e < V ? n - e : V);
            u64 own = 0, in = 0, x = 0;
            // The local operand first: its load overlaps the wait for the peer's line.
            if (kind == OP_SEND || kind == OP_RECV_REDUCE_COPY || kind >= OP_RECV_REDUCE_SEND)
                own = ll_pack(src + e, ne);
            if (recvs && !ll_load(rlines + LL_LINE_WORDS * (line0 + j), rflag, &in, deadline, err)) return false;
            switch (kind) {
                case OP_SEND: x = own; break;
                case OP_RECV: ll_unpack(dst + e, in, ne); break;
                case OP_RECV_REDUCE_COPY: x = ll_reduce<T, OP>(own, in); ll_unpack(dst + e, x, ne); break;
                case OP_RECV_COPY_SEND: x = in; ll_unpack(dst + e, x, ne); break;
                case OP_RECV_REDUCE_SEND: x = ll_reduce<T, OP>(own, in); break;
                case OP_COPY_SEND:
                    x = own;
                    if ((const T*)dst != src) ll_unpack(dst + e, own, ne);
                    break;
                default: x = ll_reduce<T, OP>(own, in); ll_unpack(dst + e, x, ne); break;
            }
            if (sends) ll_store(slines + LL_LINE_WORDS * (line0 + j), x, sflag);
        }
        line0 += nl;
    }
    if (sends && clean) {
        for (u64 j = line0 + threadIdx.x; j < slot_lines; j += blockDim.x) ll_store(slines + LL_LINE_WORDS * j, 0, sflag);
    }
    return true;
}

// ---- LL128: 128-byte lines, 15 words of data and the flag in the last word ----
//
// A line is written by eight consecutive threads of a warp, 16 bytes each, in one store
// instruction (lane 7 of the eight writes its data word and the flag), and read back the same
// way; NVLink delivers a warp's 128-byte line whole, so a reader that sees the flag sees the
// line's data of the same instruction (as NCCL's LL128, which runs only over NVLink: the
// host uses LL128 only for calls whose every connection joins two GPUs). A thread's warp
// polls its four lines together and stops once no flag lane sees an old flag (a vote).
// Flags are 63-bit message numbers + 1: never 0 (unwritten memory) and never repeated, so
// LL128 needs no clean rounds. Elements are laid out word by word: word w of a message's
// chunk holds its elements [w * V, w * V + V), line j its words [15 j, 15 j + 15); every
// chunk starts on a fresh line, as in LL.

// 64-bit words of one LL128 line, and of its data.
#define LL128_WORDS (LL128_LINE_BYTES / 8)
#define LL128_DATA (LL128_WORDS - 1)

// The flag of LL128 message number `e` (message number + epoch).
__device__ __forceinline__ u64 ll128_flag(u64 e) {
    return (e & 0x7fffffffffffffffull) + 1ull;
}

// Element count of word `w` of a piece of `n` elements (0 past its end).
template <typename T>
__device__ __forceinline__ u32 word_elems(u64 w, u64 n) {
    constexpr u32 V = 8 / sizeof(T);
    const u64 e = w * V;
    return e >= n ? 0u : (u32)(n - e < V ? n - e : V);
}

// One op that sends or receives, of one iteration over LL128 lines: as `ll_op`, with each
// group of eight threads taking lines g, g + groups, ... of each chunk's part. Every thread
// of the CTA must call it (the polls vote per warp). False when this warp's wait failed.
template <typename T, int OP>
__device__ bool ll128_op(const DOp& op, char* const* base, const Slicer& sl, u64 l,
                         const u64* rlines, u64 rflag, u64* slines, u64 sflag, u64 deadline,
                         const ErrorRec* err) {
    constexpr u32 V = 8 / sizeof(T);
    const u8 kind = op.kind;
    const bool sends = kind_sends(kind), recvs = kind_recvs(kind);
    const bool reads_own = kind == OP_SEND || kind == OP_RECV_REDUCE_COPY || kind >= OP_RECV_REDUCE_SEND;
    const u32 lane = threadIdx.x & 7;
    const bool flagger = lane == 7;
    const u64 groups = blockDim.x >> 3;
    u64 line0 = 0;
    ChunkPos sp = op.src, dp = op.dst;
    for (u32 c = 0; c < op.count; c++, sp = next_chunk(sp, sl.k), dp = next_chunk(dp, sl.k)) {
        const Piece p = piece_at(sl, sp, dp, l, kind);
        const T* src = (const T*)base[op.src_buf] + p.src;
        T* dst = (T*)base[op.dst_buf] + p.dst;
        const u64 n = p.n;
        const u64 nw = (n + V - 1) / V;
        const u64 nl = (nw + LL128_DATA - 1) / LL128_DATA;
        // Warp-uniform bounds: a warp's four groups take four consecutive lines.
        for (u64 jw = (threadIdx.x >> 5) * 4; jw < nl; jw += groups) {
            const u64 j = jw + ((threadIdx.x >> 3) & 3);
            const bool act = j < nl;
            const u64 w0 = j * LL128_DATA + 2 * lane, w1 = w0 + 1;
            const u32 n0 = act ? word_elems<T>(w0, n) : 0u;
            const u32 n1 = act && !flagger ? word_elems<T>(w1, n) : 0u;
            u64 own0 = 0, own1 = 0, in0 = 0, in1 = 0;
            // The local operand first: its load overlaps the wait for the peer's line.
            if (reads_own) {
                if (n0) own0 = ll_pack(src + w0 * V, n0);
                if (n1) own1 = ll_pack(src + w1 * V, n1);
            }
            if (recvs) {
                const u64* line = rlines + LL128_WORDS * (line0 + j) + 2 * lane;
                u32 spins = 0;
                while (true) {
                    u64 a = 0, b = 0;
                    if (act) {
                        asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];"
                                     : "=l"(a), "=l"(b)
                                     : "l"(line)
                                     : "memory");
                    }
                    if (!__any_sync(0xffffffffu, act && flagger && b != rflag)) {
                        in0 = a;
                        in1 = b;
                        break;
                    }
                    if ((++spins & 255u) == 0u &&
                        __any_sync(0xffffffffu, clock64() > (long long)deadline ||
                                                    ld_volatile32(&err->failed) != 0u)) {
                        return false;
                    }
                }
            }
            u64 x0 = 0, x1 = 0;
            switch (kind) {
                case OP_SEND: x0 = own0; x1 = own1; break;
                case OP_RECV: x0 = in0; x1 = in1; break;
                case OP_RECV_COPY_SEND: x0 = in0; x1 = in1; break;
                case OP_COPY_SEND: x0 = own0; x1 = own1; break;
                default:
                    x0 = ll_reduce<T, OP>(own0, in0);
                    x1 = ll_reduce<T, OP>(own1, in1);
                    break;
            }
            const bool stores = kind == OP_RECV || kind == OP_RECV_REDUCE_COPY || kind == OP_RECV_COPY_SEND ||
                                kind == OP_RECV_REDUCE_COPY_SEND ||
                                (kind == OP_COPY_SEND && (const T*)dst != src);
            if (stores) {
                if (n0) ll_unpack(dst + w0 * V, x0, n0);
                if (n1) ll_unpack(dst + w1 * V, x1, n1);
            }
            if (sends && act) {
                u64* line = slines + LL128_WORDS * (line0 + j) + 2 * lane;
                const u64 y = flagger ? sflag : x1;
                asm volatile("st.volatile.global.v2.u64 [%0], {%1,%2};" ::"l"(line), "l"(x0), "l"(y)
                             : "memory");
            }
        }
        line0 += nl;
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

// Runs one block over LL, or with W over LL128 (its own entries, so that the LL entries'
// code and registers are LL's alone: with LL128 behind a run-time branch in them, 8-byte LL
// calls took 0.1-0.2 us more in CUDA graphs): the same iterations, slices and op order as
// `run_block`. Per op,
// one CTA barrier at its end (before the acknowledgment and progress are published, and so
// that the next op sees this op's writes); a second one before it only when it waits for
// another block. Fences only before publishing progress that another block reads.
template <typename T, int OP, bool W>
__device__ void run_block_ll(const DBlock* all, const DBlock* b, const DOp* ops, const DDep* deps,
                             DConn* conns, const RankCtx* ranks, u32* progress, u64 in_base,
                             u64 out_base, u64 pre, const Slicer& sl, const CallMode& m,
                             ErrorRec* err, u64 timeout, TraceRec* trace) {
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
                move<T, OP>(OP_COPY, (const T*)pre + lo, (T*)in_base + lo, 0, 0, hi - lo);
            }
        }
        __syncthreads();
    }
    DConn* sc = blk.send_conn >= 0 ? &conns[blk.send_conn] : 0;
    DConn* rcv = blk.recv_conn >= 0 ? &conns[blk.recv_conn] : 0;
    u64* const sacked = sc ? (u64*)sc->acked : 0;
    u64* const racked = rcv ? (u64*)rcv->acked : 0;
    u64 send_pos = sc ? sc->pos : 0;
    u64 recv_pos = rcv ? rcv->pos : 0;
    u64 seen = sc ? sc->seen : 0;
    u32* sll = sc ? (u32*)sc->ll : 0;
    const u32* rll = rcv ? (const u32*)rcv->ll : 0;
    const u32 slot_lines = m.ll_slot_bytes / LL_LINE_BYTES;
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
                fail(err, rc, b, i, FAULT_SEND_SLOT);
                ok = false;
            }
            const bool tr = trace && threadIdx.x == 0 && blk.sub == 0 && first;
            if (tr) trace_phase(trace, blk.op_start + i, 0);
            if (W && (sends || recvs)) {
                // The op's polls vote per warp, so a warp runs it whole or not at all (a
                // thread whose wait for room failed has recorded why; the CTA stops below).
                if (__all_sync(0xffffffffu, ok)) {
                    // Its slots follow the LL slots in the same region, as large and as many.
                    const u64 region = (u64)m.ll_slots * m.ll_slot_bytes;
                    const u64 slot_words = m.ll_slot_bytes / 8;
                    const u64* rl = recvs ? (const u64*)((const char*)rll + region) +
                                                (recv_pos & slot_mask) * slot_words
                                          : 0;
                    u64* wl = sends ? (u64*)((char*)sll + region) + (send_pos & slot_mask) * slot_words : 0;
                    if (!ll128_op<T, OP>(op, base, sl, l, rl, ll128_flag(recv_pos + m.ll_epoch), wl,
                                         ll128_flag(send_pos + m.ll_epoch), deadline, err)) {
                        fail(err, rc, b, i, FAULT_RECV);
                        ok = false;
                    }
                }
            } else if (ok && (sends || recvs)) {
                const u64 se = send_pos + m.ll_epoch;
                const bool clean = ((se >> slot_shift) & (LL_CLEAN_ROUNDS - 1)) == LL_CLEAN_ROUNDS - 1;
                const u32* rl = recvs ? rll + (recv_pos & slot_mask) * (u64)slot_lines * LL_LINE_WORDS : 0;
                u32* wl = sends ? sll + (send_pos & slot_mask) * (u64)slot_lines * LL_LINE_WORDS : 0;
                if (!ll_op<T, OP>(op, base, sl, l, rl, ll_flag(recv_pos + m.ll_epoch), wl,
                                  ll_flag(se), slot_lines, clean, deadline, err)) {
                    fail(err, rc, b, i, FAULT_RECV);
                    ok = false;
                }
            } else if (ok) {
                // Local ops: copy, reduce.
                ChunkPos sp = op.src, dp = op.dst;
                for (u32 c = 0; c < op.count; c++, sp = next_chunk(sp, sl.k), dp = next_chunk(dp, sl.k)) {
                    const Piece p = piece_at(sl, sp, dp, l, op.kind);
                    move<T, OP>(op.kind, (T*)base[op.src_buf] + p.src, (T*)base[op.dst_buf] + p.dst, 0, 0,
                                p.n);
                }
            }
            if (!ok) abort_flag = 1;
            if (tr) trace_phase(trace, blk.op_start + i, 1);
            // Release for the blocks that wait on this op (this rank's other blocks, same GPU).
            if (op.flags & DOP_AWAITED) __threadfence();
            __syncthreads();
            if (tr) trace_phase(trace, blk.op_start + i, 2);
            if (abort_flag) return;
            if (sends) send_pos++;
            if (recvs) recv_pos++;
            if (threadIdx.x == 0) {
                // Every thread's loads of the slot have returned (their values were used
                // before the barrier), so the slot may be overwritten: no fence needed.
                if (recvs) st_volatile(racked, recv_pos);
                if (m.flags & MODE_PROGRESS) *(volatile u32*)&progress[me] = (u32)(li * blk.nops + i + 1);
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
