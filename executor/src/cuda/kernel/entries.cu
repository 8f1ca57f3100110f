// The kernel's entries (two per element type, operator and protocol for bulk and LL, one for
// LL128, the one-shot allreduce, the avg scaling per element type, the copy-engine barrier),
// after abi.h, common.cuh, bulk.cuh, ll.cuh, multi.cuh and oneshot.cuh. Of each bulk or LL interpreter's two entries, the plain one runs every block on the tuned
// single-peer interpreter (run_block, run_block_ll); the `_multi` one, which the host launches
// on a GPU with a block of several peers (CallMode.flags MODE_SEVERAL), runs such blocks on
// run_block_multi and the others as the plain one does. Apart, so that the plain entries'
// code and speed are those of an interpreter with no several-peer path at all: in the LL
// entry, a branch on the block's peer counts (a load to wait for) and the call behind it
// cost small calls 0.1-0.25 us (ring allreduce, 2 ranks on one H100, calls of 6-7.5 us).
// Which entries one compile holds: the COLL_DTYPE_*, COLL_OP_*, COLL_AUX, COLL_PROTO_* and
// COLL_ENTRIES_* defines below (none: every entry).

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
// (CallMode.flags MODE_DIRECT, MODE_ALIASED): its shift, or 0 when none is.
__device__ __forceinline__ u32 direct_shift(const CallMode& m) {
    return (m.flags & MODE_DIRECT) ? ((m.flags & MODE_ALIASED) ? DOP_ALIASED_SHIFT : DOP_APART_SHIFT) : 0u;
}

template <typename T>
__device__ void scale_one(T* out, u64 len, u32 n) {
    for (u64 e = blockIdx.x * (u64)blockDim.x + threadIdx.x; e < len; e += (u64)gridDim.x * blockDim.x) {
        out[e] = Div<T>::f(out[e], n);
    }
}

// Progress words need clearing only when some op reads them (CallMode.flags MODE_PROGRESS).
// Three entries per type and operator, one per protocol (the host picks by the call's; bulk
// and LL each with its `_multi` twin, above, which LL128 calls never need): a small call
// loads only the LL path's code, a few tens of KiB, rather than an entry of about 100 KiB
// holding both (worth about 0.1 us a graph call, bench/NOTES.md, Protocols: LL and bulk).
//
// Which entries one compile holds (a load compiles them as units, in parallel: NVRTC's time
// is the slowest unit's rather than the sum), selected by defines; every selection left out
// means all of its kind, so the source with no define holds every entry:
// - element type: COLL_DTYPE_<T> (F32, F16, BF16, I32, F64, I64, U8), below;
// - operator: COLL_OP_<OP> (SUM, PROD, MIN, MAX) holds that operator's interpreters only;
//   COLL_AUX holds the avg scaling and the copy-engine barrier only; neither: all of them;
// - protocol: COLL_PROTO_BULK, COLL_PROTO_LL, COLL_PROTO_LL128 hold that protocol's
//   interpreters (LL128's has no `_multi` twin); none: all three;
// - twins: COLL_ENTRIES_PLAIN holds the plain entries only, COLL_ENTRIES_MULTI the `_multi`
//   ones only; neither: both. A plan with no block of several peers loads no `_multi` entry,
//   so its load compiles units of half the code.
#if defined(COLL_OP_SUM) || defined(COLL_OP_PROD) || defined(COLL_OP_MIN) ||                  \
    defined(COLL_OP_MAX) || defined(COLL_AUX)
#define COLL_SELECTED_UNIT
#endif
#define ENTRY_ARGS                                                                                  \
    const DBlock *b, const DOp *o, const DDep *d, DConn *c, const RankCtx *r, u32 *p,             \
        CallCounters *cnt, CallArgs args, Slicer sl, u32 sb, u32 ns, ErrorRec *e, u64 t,          \
        TraceRec *tr, CallMode m
#if !defined(COLL_PROTO_BULK) && !defined(COLL_PROTO_LL) && !defined(COLL_PROTO_LL128)
#define COLL_PROTO_ALL
#endif
#if (defined(COLL_PROTO_BULK) || defined(COLL_PROTO_ALL)) && !defined(COLL_ENTRIES_MULTI)
#define BULK_PLAIN(T, NAME, OPN, OPI)                                                                \
    extern "C" __global__ void __launch_bounds__(MAX_THREADS) coll_##NAME##_##OPN(ENTRY_ARGS) {     \
        const DBlock* mine = &b[entry_of(blockIdx.x, m)];                                            \
        u64 in_base, out_base, pre;                                                                  \
        pick(args, mine->rank_slot, &in_base, &out_base, &pre);                                      \
        const u32 ds = direct_shift(m);                                                              \
        u64 pin = 0, pout = 0;                                                                       \
        if (ds && mine->send_conn >= 0) pick_peer(args, c[mine->send_conn].peer, &pin, &pout);       \
        run_block<T, OPI>(b, mine, o, d, c, r, p, in_base, out_base, sl, sb, ns, e, t, tr, ds, pin,  \
                          pout);                                                                     \
        if (m.flags & MODE_PROGRESS) end_call(p, &cnt->done, m);                                     \
    }
#else
#define BULK_PLAIN(T, NAME, OPN, OPI)
#endif
#if (defined(COLL_PROTO_BULK) || defined(COLL_PROTO_ALL)) && !defined(COLL_ENTRIES_PLAIN)
#define BULK_MULTI(T, NAME, OPN, OPI)                                                                \
    extern "C" __global__ void __launch_bounds__(MAX_THREADS) coll_##NAME##_##OPN##_multi(ENTRY_ARGS) { \
        const DBlock* mine = &b[entry_of(blockIdx.x, m)];                                            \
        u64 in_base, out_base, pre;                                                                  \
        pick(args, mine->rank_slot, &in_base, &out_base, &pre);                                      \
        if (mine->nsend_conns > 1 || mine->nrecv_conns > 1) {                                        \
            run_block_multi<T, OPI, false>(b, mine, o, d, c, r, p, in_base, out_base, 0, sl, sb, ns, \
                                           m, e, t, tr);                                             \
        } else {                                                                                     \
            const u32 ds = direct_shift(m);                                                          \
            u64 pin = 0, pout = 0;                                                                   \
            if (ds && mine->send_conn >= 0) pick_peer(args, c[mine->send_conn].peer, &pin, &pout);   \
            run_block<T, OPI>(b, mine, o, d, c, r, p, in_base, out_base, sl, sb, ns, e, t, tr, ds,   \
                              pin, pout);                                                            \
        }                                                                                            \
        if (m.flags & MODE_PROGRESS) end_call(p, &cnt->done, m);                                     \
    }
#else
#define BULK_MULTI(T, NAME, OPN, OPI)
#endif
#if (defined(COLL_PROTO_LL) || defined(COLL_PROTO_LL128) || defined(COLL_PROTO_ALL)) &&         \
    !defined(COLL_ENTRIES_MULTI)
#define LL_ENTRY(T, NAME, OPN, OPI, SUFFIX, W)                                                       \
    extern "C" __global__ void __launch_bounds__(MAX_THREADS) coll_##NAME##_##OPN##SUFFIX(ENTRY_ARGS) { \
        const DBlock* mine = &b[entry_of(blockIdx.x, m)];                                            \
        u64 in_base, out_base, pre;                                                                  \
        pick(args, mine->rank_slot, &in_base, &out_base, &pre);                                      \
        run_block_ll<T, OPI, W>(b, mine, o, d, c, r, p, in_base, out_base, pre, sl, m, e, t, tr);    \
        if (m.flags & MODE_PROGRESS) end_call(p, &cnt->done, m);                                     \
    }
#endif
#if (defined(COLL_PROTO_LL) || defined(COLL_PROTO_ALL)) && !defined(COLL_ENTRIES_MULTI)
#define LL_PLAIN(T, NAME, OPN, OPI) LL_ENTRY(T, NAME, OPN, OPI, _ll, false)
#else
#define LL_PLAIN(T, NAME, OPN, OPI)
#endif
// LL128 in entries (and units) of its own: in LL's unit it doubled that unit's NVRTC time,
// the slowest of a load's. LL128 calls have no block of several peers: no `_multi` twin.
#if (defined(COLL_PROTO_LL128) || defined(COLL_PROTO_ALL)) && !defined(COLL_ENTRIES_MULTI)
#define LL128_PLAIN(T, NAME, OPN, OPI) LL_ENTRY(T, NAME, OPN, OPI, _ll128, true)
#else
#define LL128_PLAIN(T, NAME, OPN, OPI)
#endif
#if (defined(COLL_PROTO_LL) || defined(COLL_PROTO_ALL)) && !defined(COLL_ENTRIES_PLAIN)
#define LL_MULTI(T, NAME, OPN, OPI)                                                                  \
    extern "C" __global__ void __launch_bounds__(MAX_THREADS)                                        \
        coll_##NAME##_##OPN##_ll_multi(ENTRY_ARGS) {                                                 \
        const DBlock* mine = &b[entry_of(blockIdx.x, m)];                                            \
        u64 in_base, out_base, pre;                                                                  \
        pick(args, mine->rank_slot, &in_base, &out_base, &pre);                                      \
        if (mine->nsend_conns > 1 || mine->nrecv_conns > 1) {                                        \
            run_block_multi<T, OPI, true>(b, mine, o, d, c, r, p, in_base, out_base, pre, sl, sb, ns, \
                                          m, e, t, tr);                                              \
        } else {                                                                                     \
            run_block_ll<T, OPI, false>(b, mine, o, d, c, r, p, in_base, out_base, pre, sl, m, e, t,  \
                                        tr);                                                         \
        }                                                                                            \
        if (m.flags & MODE_PROGRESS) end_call(p, &cnt->done, m);                                     \
    }
#else
#define LL_MULTI(T, NAME, OPN, OPI)
#endif
// The one-shot allreduce (oneshot.cuh), in the plain LL unit: every load has that unit, and
// the entry is small.
#if (defined(COLL_PROTO_LL) || defined(COLL_PROTO_ALL)) && !defined(COLL_ENTRIES_MULTI)
#define ONESHOT(T, NAME, OPN, OPI)                                                                   \
    extern "C" __global__ void __launch_bounds__(ONESHOT_THREADS)                                    \
        coll_##NAME##_##OPN##_oneshot(OneShotArgs a) {                                               \
        oneshot<T, OPI>(a);                                                                          \
    }
#else
#define ONESHOT(T, NAME, OPN, OPI)
#endif
#define MAIN(T, NAME, OPN, OPI)                                                                      \
    BULK_PLAIN(T, NAME, OPN, OPI)                                                                    \
    BULK_MULTI(T, NAME, OPN, OPI) LL_PLAIN(T, NAME, OPN, OPI) LL_MULTI(T, NAME, OPN, OPI)          \
    LL128_PLAIN(T, NAME, OPN, OPI) ONESHOT(T, NAME, OPN, OPI)
#if !defined(COLL_SELECTED_UNIT) || defined(COLL_OP_SUM)
#define SUM_ENTRIES(T, NAME) MAIN(T, NAME, sum, 0)
#else
#define SUM_ENTRIES(T, NAME)
#endif
#if !defined(COLL_SELECTED_UNIT) || defined(COLL_OP_PROD)
#define PROD_ENTRIES(T, NAME) MAIN(T, NAME, prod, 1)
#else
#define PROD_ENTRIES(T, NAME)
#endif
#if !defined(COLL_SELECTED_UNIT) || defined(COLL_OP_MIN)
#define MIN_ENTRIES(T, NAME) MAIN(T, NAME, min, 2)
#else
#define MIN_ENTRIES(T, NAME)
#endif
#if !defined(COLL_SELECTED_UNIT) || defined(COLL_OP_MAX)
#define MAX_ENTRIES(T, NAME) MAIN(T, NAME, max, 3)
#else
#define MAX_ENTRIES(T, NAME)
#endif
// avg: divides every output element of the local ranks by the rank count.
#if !defined(COLL_SELECTED_UNIT) || defined(COLL_AUX)
#define SCALE_ENTRY(T, NAME)                                                                       \
    extern "C" __global__ void coll_##NAME##_scale(CallArgs args, u32 nranks, u64 out_elems, u32 n) { \
        _Pragma("unroll") for (u32 j = 0; j < MAX_LOCAL; j++) {                                    \
            if (j < nranks) scale_one<T>((T*)args.output[j], out_elems, n);                        \
        }                                                                                          \
    }
#else
#define SCALE_ENTRY(T, NAME)
#endif
#define KERNELS(T, NAME)                                                                           \
    SUM_ENTRIES(T, NAME)                                                                           \
    PROD_ENTRIES(T, NAME)                                                                          \
    MIN_ENTRIES(T, NAME)                                                                           \
    MAX_ENTRIES(T, NAME)                                                                           \
    SCALE_ENTRY(T, NAME)

// A load compiles one element type's entries, named by a define (-DCOLL_DTYPE_F32, ...):
// NVRTC's time grows with the entries (every type's together took tens of seconds). With no
// such define, every type's entries are compiled (the kernel test checks them all).
#if !defined(COLL_DTYPE_F32) && !defined(COLL_DTYPE_F16) && !defined(COLL_DTYPE_BF16) &&        \
    !defined(COLL_DTYPE_I32) && !defined(COLL_DTYPE_F64) && !defined(COLL_DTYPE_I64) &&         \
    !defined(COLL_DTYPE_U8)
#define COLL_DTYPE_ALL
#endif
#if defined(COLL_DTYPE_ALL) || defined(COLL_DTYPE_F32)
KERNELS(float, f32)
#endif
#if defined(COLL_DTYPE_ALL) || defined(COLL_DTYPE_F16)
KERNELS(F16, f16)
#endif
#if defined(COLL_DTYPE_ALL) || defined(COLL_DTYPE_BF16)
KERNELS(BF16, bf16)
#endif
#if defined(COLL_DTYPE_ALL) || defined(COLL_DTYPE_I32)
KERNELS(int, i32)
#endif
#if defined(COLL_DTYPE_ALL) || defined(COLL_DTYPE_F64)
KERNELS(double, f64)
#endif
#if defined(COLL_DTYPE_ALL) || defined(COLL_DTYPE_I64)
KERNELS(long long, i64)
#endif
#if defined(COLL_DTYPE_ALL) || defined(COLL_DTYPE_U8)
KERNELS(unsigned char, u8)
#endif

#if !defined(COLL_SELECTED_UNIT) || defined(COLL_AUX)
// Copy-engine calls (copy_engine.rs) run no interpreter: each GPU's stream runs this
// barrier, the call's copies, and this barrier again. Each GPU counts its barriers in a word
// of its own memory (CallCounters.barriers); the barrier's one thread raises it and waits
// until every GPU's word has reached the same count. Before the copies: every rank has
// reached the call, so its stream's earlier work on the buffers is done; after them: every
// copy into this GPU's buffers is done.
extern "C" __global__ void coll_barrier(BarrierArgs a) {
    const u64 v = ld_volatile((const u64*)a.mine) + 1;
    // Release: what this stream did before (the copies) is visible before the count.
    fence_acq_rel_sys();
    st_volatile((u64*)a.mine, v);
    const u64 deadline = clock64() + a.timeout;
    for (u32 i = 0; i < a.n && i < MAX_DIRECT; i++) {
        while (ld_volatile((const u64*)a.all[i]) < v) {
            if (clock64() > (long long)deadline || ld_volatile32(&((const ErrorRec*)a.err)->failed)) {
                fail_at((ErrorRec*)a.err, a.rank, ERR_NO_BLOCK, 0, FAULT_BARRIER);
                return;
            }
        }
    }
    fence_acq_rel_sys();
}
#endif
