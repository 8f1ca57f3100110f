// The host-kernel ABI of coll's interpreter kernel: every struct the host hands the kernel (by
// pointer or by value) or reads back from it, and every number both sides must agree on: op
// codes, flag bits, protocols, fault codes, limits. It is the one source of both sides: the
// kernel source starts with this file, and executor/build.rs generates the Rust side (the
// executor's `cuda::abi` module) from it, so a change here changes both or fails the build.
//
// The generator reads a restricted subset and fails the build, naming the line, on anything
// else:
// - `typedef` of the fixed-width integer names below (and no other);
// - `#define NAME VALUE`, an integer constant expression of literals, earlier names, casts to
//   the fixed-width types, parentheses and + - * / << >> & | ~. A value of type int (no cast,
//   no suffix) is a size or count, usize in Rust; any other keeps its type (u32 for a `u`
//   suffix, u64 for `ull`, the cast's type);
// - `enum NAME : TYPE {` with one `PREFIX_NAME = VALUE,` a line, one PREFIX_ for all, then
//   `};`: a Rust enum NAME of TYPE with the variants in CamelCase, prefix dropped;
// - `struct NAME {` with one `TYPE field;` or `TYPE field[LEN];` a line, of the fixed-width
//   types and earlier structs, then `};` and `static_assert(sizeof(NAME) == BYTES, "...");`.
//   No implicit padding: every field lies at a multiple of its alignment and the size is a
//   multiple of the struct's, so the layout is the plain sum of the fields in C and in Rust.
//   NVRTC checks the static_assert against the compiler's layout, the generator against its
//   own, and the generated Rust asserts every field's offset;
// - `//` comments: those right before an item or field, and after it on its line, become its
//   Rust docs.
// Device addresses are u64 fields, cast where the kernel uses them, so no layout depends on
// the compiler's pointer type.

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef int i32;

// Buffers a plan rank may have, by index (DOp.src_buf, dst_buf): its input, its output, then
// scratch buffers.
#define MAX_BUFFERS 8
// The index of a rank's input (CallArgs.input).
#define BUF_INPUT 0
// The index of a rank's output (CallArgs.output).
#define BUF_OUTPUT 1
// Ranks one GPU may hold (CallArgs' size: 3 x 32 x 8 = 768 bytes of the 4 KiB of kernel
// arguments).
#define MAX_LOCAL 32
// Ranks a plan may have for direct sends (CallArgs.peer_in and peer_out: 2 x 64 x 8 = 1 KiB
// more), and GPUs a copy-engine barrier waits for.
#define MAX_DIRECT 64
// Connections one side of a plan block may have (DBlock.nsend_conns, nrecv_conns): a block
// of several peers (the plan's send_also, recv_also) keeps each side's slot addresses in a
// table of this many entries in shared memory; the host refuses a plan with more.
#define MAX_BLOCK_CONNS 64
// Threads per CTA at most (the host's THREADS): the compiler keeps registers within what a
// CTA of this many threads may use, or the launch fails.
#define MAX_THREADS 512
// Bytes of one LL line, {data lo, flag, data hi, flag}: 8 bytes of data, each 4-byte half
// beside its copy of the message's flag, written by one 16-byte store. LL slots
// (CallMode.ll_slot_bytes) hold whole lines.
#define LL_LINE_BYTES 16
// Bytes of one LL128 line: 15 eight-byte words of data, then the message's flag, written by
// eight threads' 16-byte stores of one warp instruction. LL128 slots are as many and as large
// as LL slots and lie right after them in the connection's LL region.
#define LL128_LINE_BYTES 128
// Ranks a one-shot call serves at most (OneShotArgs), and CTAs and threads per local rank
// of its launch, fixed for every call so that line j of a rank's message is always written
// by the same CTA, (j / ONESHOT_THREADS) % ONESHOT_CTAS, whose own counter numbers it.
#define ONESHOT_MAX_RANKS 8
#define ONESHOT_CTAS 16
#define ONESHOT_THREADS 512
// A one-shot call whose counter's calls of one parity reach a multiple of this rewrites every
// line of its regions (zeros past its message), so no line keeps a flag long enough for the
// 32-bit flag to come round to it again.
#define ONESHOT_CLEAN_CALLS ((u64)1 << 20)

// What an op does (DOp.kind), as the plan's op kinds. The kernel relies on the order: the
// receiving kinds are OP_RECV to OP_RECV_REDUCE_COPY_SEND, those that read their source are
// OP_SEND, OP_RECV_REDUCE_COPY and every kind from OP_RECV_REDUCE_SEND on, and the kinds from
// OP_COPY on size a piece by their source.
enum OpCode : u8 {
    // s: the source to the send peer.
    OP_SEND = 0,
    // r: the message into the destination.
    OP_RECV = 1,
    // rrc: the message combined with the source, into the destination.
    OP_RECV_REDUCE_COPY = 2,
    // rcs: the message into the destination and on to the send peer.
    OP_RECV_COPY_SEND = 3,
    // rrs: the message combined with the source, on to the send peer (nothing stored).
    OP_RECV_REDUCE_SEND = 4,
    // rrcs: the message combined with the source, into the destination and on.
    OP_RECV_REDUCE_COPY_SEND = 5,
    // cpy: the source into the destination.
    OP_COPY = 6,
    // re: the destination combined with the source, into the destination.
    OP_REDUCE = 7,
    // cs: the source to the send peer and into the destination.
    OP_COPY_SEND = 8,
};

// Which protocol a call's messages use (CallMode.proto; the host launches that entry).
enum Proto : u32 {
    // Staging slots, a fence and a `sent` counter per message.
    PROTO_BULK = 0,
    // 16-byte lines of 8 bytes of data and two copies of the message's flag.
    PROTO_LL = 1,
    // 128-byte lines of 120 bytes of data and the message's flag (entries of its own).
    PROTO_LL128 = 2,
};

// What a CTA waited for when it gave up (ErrorRec.what).
enum Fault : u32 {
    // An op of another block of its rank that the op depends on.
    FAULT_DEP = 1,
    // A message to receive.
    FAULT_RECV = 2,
    // Room to send: the receiver's acknowledgment of an earlier message in the slot.
    FAULT_SEND_SLOT = 3,
    // A direct send: the receiver's release of its buffer (`ready`).
    FAULT_READY = 4,
    // A copy-engine call's barrier (ErrorRec.block is ERR_NO_BLOCK).
    FAULT_BARRIER = 5,
    // Any wait that saw the host's abort (ErrorRec.failed == ERR_ABORTED): recorded by the
    // first CTA that gave up because of it.
    FAULT_ABORTED = 6,
};

// ErrorRec.failed: a CTA failed and recorded where (the first to swap it from 0 wins).
#define ERR_FAILED ((u32)1)
// ErrorRec.failed: the host aborted the executor (it writes this word alone, from a stream
// of its own, while kernels run); every wait then gives up.
#define ERR_ABORTED ((u32)2)

// ErrorRec.block of a failure outside any plan block (a copy-engine call's barrier).
#define ERR_NO_BLOCK ((u32)0xffffffff)
// ErrorRec.block of a one-shot call, which runs no plan block.
#define ERR_ONESHOT ((u32)0xfffffffe)

// DBlock.send_conn and recv_conn of a block without that connection.
#define NO_CONN ((i32)-1)

// DOp.flags: an op of another block of this rank depends on this one (the LL path fences
// before publishing its progress only then).
#define DOP_AWAITED ((u32)1 << 0)
// Direct messages (executor/src/cuda/direct.rs) take a pair of DOp.flags bits per placement
// of the call, send then receive: from this bit with input and output apart,
#define DOP_APART_SHIFT ((u32)1)
// and from this one with them aliased.
#define DOP_ALIASED_SHIFT ((u32)3)
// The op's send is direct in a call with input and output apart.
#define DOP_DIRECT_SEND_APART ((u32)1 << DOP_APART_SHIFT)
// The op's receive is direct in a call with input and output apart.
#define DOP_DIRECT_RECV_APART ((u32)2 << DOP_APART_SHIFT)
// The op's send is direct in a call with input and output aliased.
#define DOP_DIRECT_SEND_ALIASED ((u32)1 << DOP_ALIASED_SHIFT)
// The op's receive is direct in a call with input and output aliased.
#define DOP_DIRECT_RECV_ALIASED ((u32)2 << DOP_ALIASED_SHIFT)
// A direct send's target is the receiver's output (else its input).
#define DOP_DIRECT_TO_OUTPUT ((u32)1 << 5)
// A direct send that is a swap takes the bit DOP_SWAP_SHIFT + (its pair's shift) / 2:
#define DOP_SWAP_SHIFT ((u32)6)
// a swap with input and output apart,
#define DOP_SWAP_APART ((u32)1 << (DOP_SWAP_SHIFT + DOP_APART_SHIFT / 2))
// a swap with them aliased.
#define DOP_SWAP_ALIASED ((u32)1 << (DOP_SWAP_SHIFT + DOP_ALIASED_SHIFT / 2))
// A swap's side that takes each piece's second half.
#define DOP_SWAP_SECOND ((u32)1 << 8)

// DOp.rel and DBlock.rel_start hold two 16-bit counts of receives released, the low half for
// calls with input and output apart, the high half (from this bit) for aliased ones.
#define REL_ALIASED_SHIFT ((u32)16)
// One half of DOp.rel or DBlock.rel_start.
#define REL_MASK ((u32)0xffff)
// A half of DBlock.rel_start: every receive of the block released at call start.
#define RELEASE_AT_START ((u32)0xffff)

// CallMode.flags: some op waits on another block's progress, so progress words are published
// and cleared at the end of the call.
#define MODE_PROGRESS ((u32)1 << 0)
// CallMode.flags: direct messages on (bulk calls of one process).
#define MODE_DIRECT ((u32)1 << 1)
// CallMode.flags: the call's input and output alias (direct ops use the aliased DOp bits).
#define MODE_ALIASED ((u32)1 << 2)
// CallMode.flags: a block of this GPU has several peers (DBlock.nsend_conns or nrecv_conns
// above 1): the host launches the `_multi` entries, which run such blocks.
#define MODE_SEVERAL ((u32)1 << 3)

// A plan chunk c of a logical buffer (slices of `count` elements, k chunks each) as its slice
// c / k and position c % k in it, split by the host once at load: the kernel then finds a
// chunk's elements with no division (Slicer).
struct ChunkPos {
    // c / k.
    u32 slice;
    // c % k.
    u32 pos;
};
static_assert(sizeof(ChunkPos) == 8, "ChunkPos");

// How a call cuts chunks into per-iteration slices, from the host per call: chunk (slice, pos)
// covers elements [slice * count + pos * base + min(pos, extra), + base + (pos < extra)), and
// iteration l of `iters` its piece [l * w, (l + 1) * w) with w = w_long for the longer chunks
// (pos < extra), else w_short. Dividing on the GPU cost an LL op about 1 500 of its
// 2 300-2 900 cycles (bench/NOTES.md, Small calls).
struct Slicer {
    // Elements per slice of a logical buffer.
    u64 count;
    // count / k.
    u64 base;
    // count % k.
    u64 extra;
    // ceil(base / iters), rounded up to the alignment.
    u64 w_short;
    // ceil((base + 1) / iters), rounded up likewise.
    u64 w_long;
    // Iterations of each block's op list.
    u64 iters;
    // Chunks per slice.
    u32 k;
    // Zero.
    u32 pad;
};
static_assert(sizeof(Slicer) == 56, "Slicer");

// One op of a block.
struct DOp {
    // An OpCode.
    u8 kind;
    // The source's buffer (BUF_INPUT, BUF_OUTPUT, then scratch).
    u8 src_buf;
    // The destination's buffer.
    u8 dst_buf;
    // Ops of other blocks this one waits for: the DDep entries from dep_start.
    u8 ndeps;
    // Plan chunks.
    u32 count;
    // The op's first source chunk in the logical buffers.
    ChunkPos src;
    // The op's first destination chunk.
    ChunkPos dst;
    // Its first DDep entry.
    u32 dep_start;
    // DOP_AWAITED, DOP_DIRECT_SEND_APART and the other DOP_ bits.
    u32 flags;
    // A direct send: the receiving op's first chunk in the target buffer.
    ChunkPos peer;
    // Direct calls whose block releases per iteration: receives released once this op is
    // done (halves as DBlock.rel_start).
    u32 rel;
    // Zero.
    u32 pad;
};
static_assert(sizeof(DOp) == 48, "DOp");

// An op another op waits for: op `op` of block `block` of the same rank.
struct DDep {
    // The block's id.
    u32 block;
    // The op's index in it.
    u32 op;
};
static_assert(sizeof(DDep) == 8, "DDep");

// One CTA: sub-CTA `sub` of `nsub` of a plan block. The sub-CTAs of a block take turns over
// the slices (slice l goes to sub l % nsub), each with its own connections, so a block moves
// data with nsub CTAs at once; sub j of one block only ever waits for sub j of another,
// because every block cuts chunks into the same slices.
struct DBlock {
    // Index into the per-GPU rank contexts (and CallArgs' per-slot arrays).
    u32 rank_slot;
    // Block id within its rank.
    u32 block;
    // Its first op in the op array.
    u32 op_start;
    // Its ops.
    u32 nops;
    // Index (in this array and in the progress words) of the rank's block 0, sub 0.
    u32 prog_base;
    // Its first sending connection's end, an index into the connections; NO_CONN when none.
    // A block of several send peers has nsend_conns ends from here, in the plan's order of
    // its peers (send_peer, then send_also), each taking every message the block sends.
    i32 send_conn;
    // Its first receiving connection's end, likewise: nrecv_conns ends from here (recv_peer,
    // then recv_also), whose messages every receive combines in that order.
    i32 recv_conn;
    // Which sub-CTA of the plan block this entry is.
    u32 sub;
    // Sub-CTA entries of each plan block.
    u32 nsub;
    // Receiving ops (per iteration).
    u32 nrecv;
    // Direct calls: receives released at each iteration's start (halves as DOp.rel), or
    // RELEASE_AT_START: every receive released at call start.
    u32 rel_start;
    // Sending connection ends from send_conn: 0 without one, more than 1 for a block of
    // several send peers (at most MAX_BLOCK_CONNS).
    u16 nsend_conns;
    // Receiving connection ends from recv_conn, likewise.
    u16 nrecv_conns;
};
static_assert(sizeof(DBlock) == 48, "DBlock");

// One end of a connection (rank -> peer, channel, sub-CTA).
struct DConn {
    // The staging slots, in the receiver's memory (or host memory, proxied), then one message
    // length per slot.
    u64 slots;
    // The `sent` counter (u64), in the receiver's memory.
    u64 sent;
    // The `acked` counter (u64), in the sender's memory.
    u64 acked;
    // Messages done by the local side, across calls.
    u64 pos;
    // The LL slots, then the LL128 slots, in the receiver's memory.
    u64 ll;
    // LL sender: the last value of `acked` it read, across calls.
    u64 seen;
    // The `ready` word (u64), in the sender's memory next to `acked`: the position up to which
    // the receiver has released its buffers (direct calls).
    u64 ready;
    // The receiving rank (plan position).
    u32 peer;
    // Zero.
    u32 pad;
};
static_assert(sizeof(DConn) == 64, "DConn");

// Per local rank, fixed at load.
struct RankCtx {
    // Scratch buffers' addresses (0 and 1, input and output, come from CallArgs).
    u64 base[MAX_BUFFERS];
    // The plan rank.
    u32 rank;
    // Zero.
    u32 pad;
};
static_assert(sizeof(RankCtx) == 72, "RankCtx");

// One call's user buffers, per local rank slot: what the plan's `input` and `output` are.
// Passed by value.
struct CallArgs {
    // Each local rank's input (buffer BUF_INPUT).
    u64 input[MAX_LOCAL];
    // Each local rank's output (buffer BUF_OUTPUT).
    u64 output[MAX_LOCAL];
    // LL calls of single-block ranks: where the plan's input is copied from before the ops run
    // (0: no copy), by each sub-CTA for exactly the slices it will touch.
    u64 pre[MAX_LOCAL];
    // Direct calls: every rank's input, by plan position.
    u64 peer_in[MAX_DIRECT];
    // Direct calls: every rank's output, by plan position.
    u64 peer_out[MAX_DIRECT];
};
static_assert(sizeof(CallArgs) == 1792, "CallArgs");

// How a call runs (by value, the same on every GPU of the call).
struct CallMode {
    // A Proto.
    u32 proto;
    // CTAs per plan block: sub-CTAs 0..active.
    u32 active;
    // Sub-CTA entries per plan block in the block array.
    u32 nsub;
    // MODE_PROGRESS, MODE_DIRECT, MODE_ALIASED, MODE_SEVERAL.
    u32 flags;
    // Bytes of each LL slot, whole lines (LL_LINE_BYTES); LL128 slots are as large.
    u32 ll_slot_bytes;
    // LL slots per connection: a power of two, at most 1024 (see the LL protocol's clean
    // rounds).
    u32 ll_slots;
    // Added to every LL message number (tests start near a wrap).
    u64 ll_epoch;
    // Chunks of the plan's input buffer (for CallArgs.pre).
    u32 in_chunks;
    // Zero.
    u32 pad;
};
static_assert(sizeof(CallMode) == 40, "CallMode");

// The first failure of a GPU's launch, which the host reads back once the streams are done
// (or copies out on a stream of its own while they run: a record whose `failed` is set but
// whose `what` is still 0 is being written).
struct ErrorRec {
    // Nonzero once a CTA failed (ERR_FAILED) or the host aborted (ERR_ABORTED): every wait
    // polls it and gives up.
    u32 failed;
    // The plan rank that failed.
    u32 rank;
    // Its block (ERR_NO_BLOCK for a copy-engine call's barrier).
    u32 block;
    // The op's index in the block.
    u32 op;
    // What it waited for: a Fault.
    u32 what;
    // Zero.
    u32 pad;
};
static_assert(sizeof(ErrorRec) == 24, "ErrorRec");

// Per GPU, beside its instructions.
struct CallCounters {
    // CTAs of the current call that finished: the last one clears this and the progress words.
    u32 done;
    // Zero.
    u32 pad;
    // Copy-engine barriers passed, equal on every GPU between calls.
    u64 barriers;
};
static_assert(sizeof(CallCounters) == 16, "CallCounters");

// One op's trace record, written by thread 0 of sub-CTA 0 when a call is traced (an op that
// never ran keeps zeros).
struct TraceRec {
    // Start and end on the GPU's global timer (ns).
    u64 ns[2];
    // Start and end on the SM's cycle counter.
    u64 cycles[2];
    // The cycle counter where the op's first iteration had waited for its inputs and room,
    // moved thread 0's part, and passed the barrier after it.
    u64 phase[3];
    // Zero.
    u64 pad;
};
static_assert(sizeof(TraceRec) == 64, "TraceRec");

// The argument of a one-shot allreduce (by value): every rank stores its whole input as LL
// lines into a region of every other rank's, then adds what it receives in rank order.
struct OneShotArgs {
    // Every rank's one-shot region (by plan position), as this GPU addresses it: 2 parities
    // x nranks sources x `lines` LL lines, then ONESHOT_CTAS call counters (u64).
    u64 inbox[ONESHOT_MAX_RANKS];
    // Per local rank slot: the caller's input.
    u64 input[ONESHOT_MAX_RANKS];
    // Per local rank slot: the caller's output (the input, in place).
    u64 output[ONESHOT_MAX_RANKS];
    // Per local rank slot: its plan rank.
    u32 rank[ONESHOT_MAX_RANKS];
    // Elements of the call.
    u64 count;
    // LL lines of one (parity, source) part of a region.
    u64 lines;
    // This GPU's ErrorRec.
    u64 err;
    // Clock cycles a wait may take.
    u64 timeout;
    // Ranks of the call.
    u32 nranks;
    // Zero.
    u32 pad;
};
static_assert(sizeof(OneShotArgs) == 264, "OneShotArgs");

// The argument of a copy-engine call's barrier (by value).
struct BarrierArgs {
    // This GPU's count of barriers passed (a CallCounters.barriers).
    u64 mine;
    // Every GPU's count (this one's too), by GPU index.
    u64 all[MAX_DIRECT];
    // GPUs taking part.
    u32 n;
    // This GPU's first rank, for the error record.
    u32 rank;
    // Clock cycles before the barrier gives up.
    u64 timeout;
    // This GPU's ErrorRec.
    u64 err;
};
static_assert(sizeof(BarrierArgs) == 544, "BarrierArgs");
