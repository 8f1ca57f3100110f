// The bulk protocol (and direct messages): see common.cuh for its invariants.

// Runs one block: the whole op list once per iteration, each iteration covering 1/iters of
// every chunk (as NCCL loops its ring over slices), so every message fits one slot and the
// plan's schedule, checked deadlock-free with two slots per connection, holds per iteration.
template <typename T, int OP>
__device__ void run_block(const DBlock* all, const DBlock* b, const DOp* ops, const DDep* deps,
                          DConn* conns, const RankCtx* ranks, u32* progress, u64 in_base,
                          u64 out_base, const Slicer& sl, u32 slot_bytes,
                          u32 nslots, ErrorRec* err, u64 timeout, TraceRec* trace, u32 dshift,
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
    // Direct calls: how far this CTA's sender may store into its buffers (see common.cuh).
    const u32 relsh = dshift == DOP_ALIASED_SHIFT ? REL_ALIASED_SHIFT : 0u;
    const u32 rstart = (blk.rel_start >> relsh) & REL_MASK;
    const bool per_iter = dshift && rcv && rstart != RELEASE_AT_START;
    const u64 rbase = recv_pos;
    if (dshift && rcv && !per_iter && threadIdx.x == 0) {
        const u64 nit = blk.sub < sl.iters ? (sl.iters - blk.sub + blk.nsub - 1) / blk.nsub : 0;
        st_volatile((u64*)rcv_.ready, rbase + nit * blk.nrecv);
    }
    u64 rseen = 0;      // sender: the last value of `ready` read
    u32 released = 0;   // receiver: receives of this iteration released so far
    const u32 me = blk.prog_base + blk.block * blk.nsub + blk.sub;
    u64 li = 0;
    for (u64 l = blk.sub; l < sl.iters; l += blk.nsub, li++) {
        const bool first = li == 0, last = l + blk.nsub >= sl.iters;
        if (per_iter && threadIdx.x == 0) {
            released = rstart;
            if (released > 0) st_volatile((u64*)rcv_.ready, rbase + li * blk.nrecv + released);
        }
        for (u32 i = 0; i < blk.nops; i++) {
            const DOp op = ops[blk.op_start + i];
            const bool sends = kind_sends(op.kind), recvs = kind_recvs(op.kind);
            const bool dsend = dshift && sends && ((op.flags >> dshift) & 1u);
            const bool drecv = dshift && recvs && ((op.flags >> (dshift + 1)) & 1u);
            const bool swap = dsend && ((op.flags >> (DOP_SWAP_SHIFT + (dshift >> 1))) & 1u);
            if (threadIdx.x == 0) {
                abort_flag = 0;
                // Trace: when the op first starts waiting, and when its last slice is done.
                if (trace && blk.sub == 0 && first) trace_mark(trace, blk.op_start + i, 0);
                u64 deadline = clock64() + timeout;
                if (!wait_deps(all, b, op, deps, progress, li, deadline, err, rc, i)) abort_flag = 1;
                if (!abort_flag && recvs && !wait_at_least((const u64*)rcv_.sent, recv_pos + 1, deadline, err)) {
                    fail(err, rc, b, i, FAULT_RECV);
                    abort_flag = 1;
                }
                if (!abort_flag && dsend && rseen <= send_pos) {
                    if (!wait_at_least((const u64*)scv.ready, send_pos + 1, deadline, err)) {
                        fail(err, rc, b, i, FAULT_READY);
                        abort_flag = 1;
                    }
                    rseen = ld_volatile((const u64*)scv.ready);
                }
                const bool room = sends && !dsend && send_pos >= nslots;
                if (!abort_flag && room &&
                    !wait_at_least((const u64*)scv.acked, send_pos - nslots + 1, deadline, err)) {
                    fail(err, rc, b, i, FAULT_SEND_SLOT);
                    abort_flag = 1;
                }
                // Acquire: what the flags read above publish (a message, a free slot, a
                // released buffer) is visible to the whole CTA after the barrier. One acquire
                // load per flag waited for; a fence only after waiting on other blocks.
                if (op.ndeps > 0) {
                    fence_acq_rel_sys();
                } else if (!abort_flag) {
                    if (recvs) acquire_sys((const u64*)rcv_.sent);
                    if (dsend) acquire_sys((const u64*)scv.ready);
                    if (room) acquire_sys((const u64*)scv.acked);
                }
                if (trace && blk.sub == 0 && first) trace_phase(trace, blk.op_start + i, 0);
            }
            __syncthreads();
            if (abort_flag) return;
            T* in = recvs && !drecv ? (T*)((char*)rcv_.slots + (recv_pos % nslots) * (u64)slot_bytes) : 0;
            T* out = sends && !dsend ? (T*)((char*)scv.slots + (send_pos % nslots) * (u64)slot_bytes) : 0;
            // A direct receive's data is already in `dst`: a plain receive has nothing left
            // to move, a receive-and-forward sends it on from there.
            const u8 kind = drecv ? (op.kind == OP_RECV_COPY_SEND ? OP_SEND : MOVE_NONE) : op.kind;
            T* target = dsend ? (T*)((op.flags & DOP_DIRECT_TO_OUTPUT) ? peer_out : peer_in) : 0;
            // The op's message is the concatenation of its chunks' slices (in a slot), or
            // each chunk's slice at its place in the receiver's buffer (direct).
            u64 moff = 0;
            ChunkPos sp = op.src, dp = op.dst, pp = op.peer;
            for (u32 c = 0; c < op.count && kind != MOVE_NONE; c++) {
                const Piece p = piece_at(sl, sp, dp, l, op.kind);
                T* src = (T*)base[op.src_buf] + p.src;
                T* dst = (T*)base[op.dst_buf] + p.dst;
                const u64 n = p.n;
                if (drecv) src = dst;
                // Only the pointers this kind uses take part (and decide the alignment).
                const bool use_src =
                    kind == OP_SEND || kind == OP_RECV_REDUCE_COPY || kind >= OP_RECV_REDUCE_SEND;
                const bool use_dst = kind != OP_SEND && kind != OP_RECV_REDUCE_SEND;
                T* o = out ? out + moff : 0;
                if (dsend) {
                    u64 plo, phi;
                    slice_at(sl, pp, l, &plo, &phi);
                    o = target + plo;
                }
                if (swap) {
                    // This side's half of the piece; the cut keeps both halves aligned.
                    const u64 h = n / 2 / (16 / sizeof(T)) * (16 / sizeof(T));
                    const u64 at = (op.flags & DOP_SWAP_SECOND) ? h : 0;
                    move<T, OP>(MOVE_SWAP, 0, src + at, 0, o + at, (op.flags & DOP_SWAP_SECOND) ? n - h : h);
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
                ((u64*)((char*)scv.slots + (u64)nslots * slot_bytes))[send_pos % nslots] = moff * sizeof(T);
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
                const u32 rj = per_iter ? (op.rel >> relsh) & REL_MASK : released;
                // The fence publishes this op's stores: to the peer (sends), to buffers a
                // peer will then store into (a release of receives), to blocks that wait
                // for this op. An op that only receives publishes nothing but `acked`: its
                // loads of the slot have returned (their values were stored before the
                // barrier), so the slot may be overwritten with no fence, as NCCL posts a
                // receive and as run_block_ll acknowledges.
                if (sends || rj != released || (op.flags & DOP_AWAITED)) fence_acq_rel_sys();
                if (sends) st_volatile((u64*)scv.sent, send_pos);
                if (recvs) st_volatile((u64*)rcv_.acked, recv_pos);
                if (rj != released) {
                    // This op's reads and writes are done (the barrier above): release the
                    // receives that waited for them.
                    released = rj;
                    st_volatile((u64*)rcv_.ready, rbase + li * blk.nrecv + rj);
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

