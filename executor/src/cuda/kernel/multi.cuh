// Blocks of several peers, in both protocols: see common.cuh for their invariants. A simple
// interpreter, apart from the tuned single-peer ones (run_block, run_block_ll) so that their
// code, registers and speed stay as they are: thread 0 waits for every end, then the CTA moves
// the data with a plain loop over the ends.

// Moves `n` elements of one op of a block of several peers (bulk), or of a local op (copy,
// reduce) of such a block: x = src (when the kind reads it) combined with each receive end's
// message in order (the first message itself when there is no source; dst (+) src for a
// reduce), stored into dst when the kind stores and into every send end's slot. `ins[c] +
// in_off` is receive end c's part of the message (nin ends, 0 when the op does not receive),
// `outs[c] + out_off` send end c's (nout). An element (or 16-byte vector) is read and written
// by one thread only, so nothing inside needs a barrier. Out of line, as ll_op_multi, so that
// its loop has registers of its own (inlined, run_block_multi spilled more).
template <typename T, int OP>
__device__ __noinline__ void move_multi(u8 kind, const T* src, T* dst, const u64* ins, u32 nin,
                                        u64 in_off, const u64* outs, u32 nout, u64 out_off, u64 n) {
    const bool reads = kind == OP_SEND || kind == OP_RECV_REDUCE_COPY || kind >= OP_RECV_REDUCE_SEND;
    // A copy onto itself, or a copy-send's copy, stores nothing locally (as in `move`).
    const bool stores = kind != OP_SEND && kind != OP_RECV_REDUCE_SEND &&
                        !((kind == OP_COPY_SEND || kind == OP_COPY) && (const T*)dst == src);
    const bool re = kind == OP_REDUCE;
    constexpr int V = 16 / sizeof(T);
    union Vec {
        uint4 u;
        T t[V];
    };
    unsigned long long bits = (reads ? (unsigned long long)src : 0ull) |
                              (stores ? (unsigned long long)dst : 0ull) | in_off | out_off;
    for (u32 c = 0; c < nin; c++) bits |= ins[c];
    for (u32 c = 0; c < nout; c++) bits |= outs[c];
    const u64 nv = (bits % 16 == 0) ? n / V : 0;
    for (u64 v = threadIdx.x; v < nv; v += blockDim.x) {
        Vec x;
        x.u = reads ? ((const uint4*)src)[v] : ((const uint4*)(ins[0] + in_off))[v];
        for (u32 c = reads ? 0 : 1; c < nin; c++) {
            Vec y;
            y.u = ((const uint4*)(ins[c] + in_off))[v];
#pragma unroll
            for (int j = 0; j < V; j++) x.t[j] = Red<T, OP>::f(x.t[j], y.t[j]);
        }
        if (re) {
            Vec y;
            y.u = ((const uint4*)dst)[v];
#pragma unroll
            for (int j = 0; j < V; j++) x.t[j] = Red<T, OP>::f(y.t[j], x.t[j]);
        }
        if (stores) ((uint4*)dst)[v] = x.u;
        for (u32 c = 0; c < nout; c++) ((uint4*)(outs[c] + out_off))[v] = x.u;
    }
    for (u64 e = nv * V + threadIdx.x; e < n; e += blockDim.x) {
        T x = reads ? src[e] : ((const T*)(ins[0] + in_off))[e];
        for (u32 c = reads ? 0 : 1; c < nin; c++) x = Red<T, OP>::f(x, ((const T*)(ins[c] + in_off))[e]);
        if (re) x = Red<T, OP>::f(dst[e], x);
        if (stores) dst[e] = x;
        for (u32 c = 0; c < nout; c++) ((T*)(outs[c] + out_off))[e] = x;
    }
}

// ll_op for an op of a block of several peers: each line's value is the source's (when the
// kind reads it) combined with the line of every receive end in order (the first end's line
// itself when there is no source), unpacked into the destination when the kind stores and
// stored into every send end's slot. `ins[c] + in_off` is receive end c's slot of this
// message (nin ends, 0 when the op does not receive), `outs[c] + out_off` send end c's (nout).
// False when this thread's wait failed.
template <typename T, int OP>
__device__ __noinline__ bool ll_op_multi(const DOp& op, char* const* base, const Slicer& sl, u64 l,
                                         const u64* ins, u32 nin, u64 in_off, u32 rflag,
                                         const u64* outs, u32 nout, u64 out_off, u32 sflag,
                                         u32 slot_lines, bool clean, u64 deadline,
                                         const ErrorRec* err) {
    constexpr u32 V = 8 / sizeof(T);
    const u8 kind = op.kind;
    const bool reads = kind == OP_SEND || kind == OP_RECV_REDUCE_COPY || kind >= OP_RECV_REDUCE_SEND;
    const bool writes = kind != OP_SEND && kind != OP_RECV_REDUCE_SEND;
    u64 line0 = 0;
    ChunkPos sp = op.src, dp = op.dst;
    for (u32 c = 0; c < op.count; c++, sp = next_chunk(sp, sl.k), dp = next_chunk(dp, sl.k)) {
        const Piece p = piece_at(sl, sp, dp, l, kind);
        const T* src = (const T*)base[op.src_buf] + p.src;
        T* dst = (T*)base[op.dst_buf] + p.dst;
        const u64 n = p.n;
        const u64 nl = (n + V - 1) / V;
        // A copy-send onto itself stores nothing locally (as in ll_op).
        const bool stores = writes && !(kind == OP_COPY_SEND && (const T*)dst == src);
        for (u64 j = threadIdx.x; j < nl; j += blockDim.x) {
            const u64 e = j * V;
            const u32 ne = (u32)(n - e < V ? n - e : V);
            const u64 at = LL_LINE_BYTES * (line0 + j);
            u64 x = reads ? ll_pack(src + e, ne) : 0;
            for (u32 r = 0; r < nin; r++) {
                u64 y;
                if (!ll_load((const u32*)(ins[r] + in_off + at), rflag, &y, deadline, err)) return false;
                x = (reads || r > 0) ? ll_reduce<T, OP>(x, y) : y;
            }
            if (stores) ll_unpack(dst + e, x, ne);
            for (u32 s = 0; s < nout; s++) ll_store((u32*)(outs[s] + out_off + at), x, sflag);
        }
        line0 += nl;
    }
    // A clean round (common.cuh): every send end's unused lines get the current flag.
    if (nout > 0 && clean) {
        for (u64 j = line0 + threadIdx.x; j < slot_lines; j += blockDim.x) {
            for (u32 s = 0; s < nout; s++) ll_store((u32*)(outs[s] + out_off + LL_LINE_BYTES * j), 0, sflag);
        }
    }
    return true;
}

// Runs a block of several peers over the call's protocol (LL: CallMode.proto is PROTO_LL):
// the same iterations, slices and op order as run_block and run_block_ll, and the same
// messages on each connection end as they send and take, so the peer's block runs either
// of them unchanged. Per op: thread 0 waits for the op's dependencies, for a message on every
// receive end (bulk; LL: each thread polls its own lines) and for room on every send end, and
// the barrier passes that on; the CTA moves the data; after a barrier thread 0 publishes
// `sent` on every send end (bulk, after a fence), `acked` on every receive end and progress.
// Not inlined: its registers and code stay out of the single-peer interpreters' way.
template <typename T, int OP, bool LL>
__device__ __noinline__ void run_block_multi(const DBlock* all, const DBlock* b, const DOp* ops,
                                             const DDep* deps, DConn* conns, const RankCtx* ranks,
                                             u32* progress, u64 in_base, u64 out_base, u64 pre,
                                             Slicer sl_arg, u32 slot_bytes, u32 nslots,
                                             CallMode m_arg, ErrorRec* err, u64 timeout,
                                             TraceRec* trace) {
    const DBlock blk = *b;
    const RankCtx* rc = &ranks[blk.rank_slot];
    __shared__ int abort_flag;
    __shared__ char* base[MAX_BUFFERS];
    // The call's slicer and mode, read from shared memory where used rather than held in
    // registers (this interpreter spilled more with them there). Passed by value: taking the
    // address of the entry's parameters moved them to local memory for the whole entry, the
    // single-peer interpreters' reads included.
    __shared__ Slicer sl;
    __shared__ CallMode m;
    if (threadIdx.x == 0) {
        sl = sl_arg;
        m = m_arg;
    }
    // The slots (bulk) or LL slots of the receive ends, then from MAX_BLOCK_CONNS the send
    // ends': in shared memory, read at every element (the host keeps both counts within).
    __shared__ u64 ends[2 * MAX_BLOCK_CONNS];
    const u32 nrc = blk.nrecv_conns, nsc = blk.nsend_conns;
    DConn* rcv = nrc > 0 ? &conns[blk.recv_conn] : 0;
    DConn* sc = nsc > 0 ? &conns[blk.send_conn] : 0;
    load_bases(base, in_base, out_base, rc);
    for (u32 c = threadIdx.x; c < nrc; c += blockDim.x) ends[c] = LL ? rcv[c].ll : rcv[c].slots;
    for (u32 c = threadIdx.x; c < nsc; c += blockDim.x) ends[MAX_BLOCK_CONNS + c] = LL ? sc[c].ll : sc[c].slots;
    __syncthreads();
    if (LL && pre) {
        // The input copy of an LL call of a single-block rank, as in run_block_ll.
        for (u64 l = blk.sub; l < sl.iters; l += blk.nsub) {
            ChunkPos cp{0, 0};
            for (u32 c = 0; c < m.in_chunks; c++, cp = next_chunk(cp, sl.k)) {
                u64 lo, hi;
                slice_at(sl, cp, l, &lo, &hi);
                move_multi<T, OP>(OP_COPY, (const T*)pre + lo, (T*)in_base + lo, 0, 0, 0, 0, 0, 0, hi - lo);
            }
        }
        __syncthreads();
    }
    // Every end of a side is at the same position (common.cuh).
    u64 send_pos = sc ? sc->pos : 0;
    u64 recv_pos = rcv ? rcv->pos : 0;
    const u64 nslot = LL ? (u64)m.ll_slots : (u64)nslots;
    const u64 slot_size = LL ? (u64)m.ll_slot_bytes : (u64)slot_bytes;
    const u32 slot_shift = __ffs(m.ll_slots) - 1;
    const u32 me = blk.prog_base + blk.block * blk.nsub + blk.sub;
    u64 li = 0;
    for (u64 l = blk.sub; l < sl.iters; l += blk.nsub, li++) {
        const bool first = li == 0, last = l + blk.nsub >= sl.iters;
        for (u32 i = 0; i < blk.nops; i++) {
            const DOp op = ops[blk.op_start + i];
            const bool sends = kind_sends(op.kind), recvs = kind_recvs(op.kind);
            const u32 nin = recvs ? nrc : 0, nout = sends ? nsc : 0;
            const bool tr = trace && threadIdx.x == 0 && blk.sub == 0 && first;
            const u64 deadline = clock64() + timeout;
            if (threadIdx.x == 0) {
                abort_flag = 0;
                if (tr) trace_mark(trace, blk.op_start + i, 0);
                if (!wait_deps(all, b, op, deps, progress, li, deadline, err, rc, i)) abort_flag = 1;
                for (u32 c = 0; !LL && !abort_flag && c < nin; c++) {
                    if (!wait_at_least((const u64*)rcv[c].sent, recv_pos + 1, deadline, err)) {
                        fail(err, rc, b, i, FAULT_RECV);
                        abort_flag = 1;
                    }
                }
                for (u32 c = 0; !abort_flag && send_pos >= nslot && c < nout; c++) {
                    if (!wait_at_least((const u64*)sc[c].acked, send_pos - nslot + 1, deadline, err)) {
                        fail(err, rc, b, i, FAULT_SEND_SLOT);
                        abort_flag = 1;
                    }
                }
                // Acquire: what the flags read above and the other blocks' progress publish is
                // visible to the whole CTA after the barrier (LL: only progress needs it, as in
                // run_block_ll; its lines carry their own flags). One acquire load per flag
                // waited for, as run_block; a fence only after waiting on other blocks.
                if (op.ndeps > 0) {
                    fence_acq_rel_sys();
                } else if (!LL && !abort_flag) {
                    for (u32 c = 0; c < nin; c++) acquire_sys((const u64*)rcv[c].sent);
                    for (u32 c = 0; send_pos >= nslot && c < nout; c++) acquire_sys((const u64*)sc[c].acked);
                }
                if (tr) trace_phase(trace, blk.op_start + i, 0);
            }
            __syncthreads();
            if (abort_flag) return;
            const u64 in_off = (recv_pos % nslot) * slot_size;
            const u64 out_off = (send_pos % nslot) * slot_size;
            bool ok = true;
            if (LL && (sends || recvs)) {
                const u64 se = send_pos + m.ll_epoch;
                const bool clean = ((se >> slot_shift) & (LL_CLEAN_ROUNDS - 1)) == LL_CLEAN_ROUNDS - 1;
                ok = ll_op_multi<T, OP>(op, base, sl, l, ends, nin, in_off, ll_flag(recv_pos + m.ll_epoch),
                                        ends + MAX_BLOCK_CONNS, nout, out_off, ll_flag(se),
                                        m.ll_slot_bytes / LL_LINE_BYTES, clean, deadline, err);
                if (!ok) fail(err, rc, b, i, FAULT_RECV);
            } else {
                // The message is the concatenation of its chunks' slices, as in run_block.
                u64 moff = 0;
                ChunkPos sp = op.src, dp = op.dst;
                for (u32 c = 0; c < op.count; c++, sp = next_chunk(sp, sl.k), dp = next_chunk(dp, sl.k)) {
                    const Piece p = piece_at(sl, sp, dp, l, op.kind);
                    T* src = (T*)base[op.src_buf] + p.src;
                    T* dst = (T*)base[op.dst_buf] + p.dst;
                    const u64 n = p.n;
                    // Local ops (copy, reduce) too, with no ends.
                    const u64 at = moff * sizeof(T);
                    move_multi<T, OP>(op.kind, src, dst, ends, nin, in_off + at, ends + MAX_BLOCK_CONNS, nout,
                                      out_off + at, n);
                    moff += n;
                }
                // Each message's length, after its end's slots (for the host proxy).
                if (threadIdx.x == 0) {
                    for (u32 c = 0; c < nout; c++)
                        ((u64*)(ends[MAX_BLOCK_CONNS + c] + nslot * slot_size))[send_pos % nslot] = moff * sizeof(T);
                }
            }
            if (!ok) abort_flag = 1;
            if (tr) trace_phase(trace, blk.op_start + i, 1);
            // Release, as in run_block: the barrier orders every thread's stores before thread
            // 0's fence (bulk always; LL only for an op another block waits for).
            __syncthreads();
            if (tr) trace_phase(trace, blk.op_start + i, 2);
            if (abort_flag) return;
            if (sends) send_pos++;
            if (recvs) recv_pos++;
            if (threadIdx.x == 0) {
                if (!LL || (op.flags & DOP_AWAITED)) fence_acq_rel_sys();
                for (u32 c = 0; !LL && c < nout; c++) st_volatile((u64*)sc[c].sent, send_pos);
                // Every thread's reads of the slots are done (the barrier above).
                for (u32 c = 0; c < nin; c++) st_volatile((u64*)rcv[c].acked, recv_pos);
                if (!LL || (m.flags & MODE_PROGRESS)) *(volatile u32*)&progress[me] = (u32)(li * blk.nops + i + 1);
                if (trace && blk.sub == 0 && last) trace_mark(trace, blk.op_start + i, 1);
            }
        }
    }
    if (threadIdx.x == 0) {
        // Every end of a side has taken as many messages (common.cuh); LL's `seen` is left as
        // it was, a value `acked` has reached.
        for (u32 c = 0; c < nsc; c++) sc[c].pos = send_pos;
        for (u32 c = 0; c < nrc; c++) rcv[c].pos = recv_pos;
    }
}
