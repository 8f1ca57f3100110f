// One-shot allreduce: a plan whose every rank sends its whole input to every other rank and
// combines what it receives (executor/src/cuda/oneshot.rs says which plans and calls) runs,
// for small calls, as this kernel rather than the interpreter: no instructions to load, no
// slicing, no acknowledgements.
//
// Each GPU launches ONESHOT_CTAS CTAs of ONESHOT_THREADS threads per local rank, for every
// call alike. Thread t of CTA c takes lines j = (k * ONESHOT_CTAS + c) * ONESHOT_THREADS + t
// of the message (8 bytes of elements each): it stores its own line, with the call's flag,
// into part (parity, me) of every other rank's region, polls line j of part (parity, q) of
// its own region for every other rank q, and stores the combination of all n lines, taken in
// rank order on every rank (so every rank's output is the same to the bit), at j of its
// output. In place, the thread that reads element e is the only one that writes it.
//
// Invariants:
// - A rank's region holds two parities of n parts of `lines` lines, then ONESHOT_CTAS counters:
//   counter c counts the one-shot calls that CTA c of this rank ran. Every call launches every
//   CTA and every rank runs the same calls, so counter c is the same on every rank at a
//   call's start; the call's flag is ll_flag(counter) and its parity the counter's low bit.
// - A sender is at most one call ahead of any receiver: it finishes call i only once every
//   other rank has stored its lines of call i, i.e. has finished call i - 1. So a store of
//   call i + 1 (the other parity) never lands on lines of call i still being read, and one of
//   call i + 2 only on lines of call i, long read.
// - Line j of a part is always written by the same CTA of the sender (the fixed launch), so its
//   flags come from one counter and never repeat while the counter moves by less than
//   2^32 - 1; a clean call (ONESHOT_CLEAN_CALLS) rewrites every line of the regions, so none
//   stays unwritten that long.

template <typename T, int OP>
__device__ void oneshot(const OneShotArgs& a) {
    constexpr u32 V = 8 / sizeof(T);
    const u32 slot = blockIdx.x / ONESHOT_CTAS, cta = blockIdx.x % ONESHOT_CTAS;
    // This CTA's rank, buffers and region: constant indices into the by-value argument.
    u32 me = 0;
    u64 inp = 0, outp = 0;
#pragma unroll
    for (u32 s = 0; s < ONESHOT_MAX_RANKS; s++) {
        if (s == slot) {
            me = a.rank[s];
            inp = a.input[s];
            outp = a.output[s];
        }
    }
    u64 mine = 0;
#pragma unroll
    for (u32 q = 0; q < ONESHOT_MAX_RANKS; q++) {
        if (q == me) mine = a.inbox[q];
    }
    const u32 n = a.nranks;
    const u64 part_words = a.lines * LL_LINE_WORDS;
    u64* const counter = (u64*)(mine + 2 * (u64)n * a.lines * LL_LINE_BYTES) + cta;
    const u64 c = ld_volatile(counter);
    const u32 flag = ll_flag(c);
    const u64 parity = c & 1;
    const u64 total = (a.count + V - 1) / V;
    const bool clean = ((c >> 1) & (ONESHOT_CLEAN_CALLS - 1)) == ONESHOT_CLEAN_CALLS - 1;
    const u64 upto = clean ? a.lines : total;
    const u64 deadline = clock64() + a.timeout;
    ErrorRec* const err = (ErrorRec*)a.err;
    const T* in = (const T*)inp;
    T* out = (T*)outp;
    bool ok = true;
    for (u64 j = (u64)cta * ONESHOT_THREADS + threadIdx.x; ok && j < upto;
         j += (u64)ONESHOT_CTAS * ONESHOT_THREADS) {
        const u64 e = j * V;
        const u32 ne = j < total ? (u32)(a.count - e < V ? a.count - e : V) : 0u;
        const u64 own = ne ? ll_pack(in + e, ne) : 0;
        const u64 at = (parity * n + me) * part_words + j * LL_LINE_WORDS;
#pragma unroll
        for (u32 q = 0; q < ONESHOT_MAX_RANKS; q++) {
            if (q < n && q != me) ll_store((u32*)a.inbox[q] + at, own, flag);
        }
        if (j >= total) continue;
        u64 acc = 0;
#pragma unroll
        for (u32 q = 0; q < ONESHOT_MAX_RANKS; q++) {
            if (q >= n) break;
            u64 v = own;
            if (q != me) {
                const u32* line = (const u32*)mine + (parity * n + q) * part_words + j * LL_LINE_WORDS;
                if (!ll_load(line, flag, &v, deadline, err)) {
                    fail_at(err, me, ERR_ONESHOT, 0, FAULT_RECV);
                    ok = false;
                    break;
                }
            }
            acc = q == 0 ? v : ll_reduce<T, OP>(acc, v);
        }
        if (ok) ll_unpack(out + e, acc, ne);
    }
    // Every thread has read the counter; the next call's CTA reads the new one.
    __syncthreads();
    if (threadIdx.x == 0) st_volatile(counter, c + 1);
}
