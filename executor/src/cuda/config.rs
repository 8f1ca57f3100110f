//! How one call is cut for the kernel: its protocol (bulk or LL), how every chunk is sliced
//! into per-iteration pieces, how many sub-CTAs of each plan block run and with how many
//! threads. Pure functions of the plan's shape and the call's count, so they are tested here
//! without a GPU and the host and the kernel agree on every slice.
//!
//! Invariants: a bulk slice of the widest op fits one staging slot ([`super::SLOT_BYTES`])
//! and an LL slice one LL slot of lines; slice widths are multiples of `Slicing::align`
//! elements, so slices of aligned chunks stay 16-byte aligned; iterations beyond one round
//! of sub-CTAs come in whole rounds.

use super::{
    BULK_SUB_BYTES, LL_CALL_FACTOR, LL_SLOT_BYTES, LL_SUB_BYTES, SLOT_BYTES, Spread, THREADS,
};
use coll_compiler::plan::Plan;

/// Most sub-CTAs per plan block. One CTA moves ~10 GB/s over H200 NVLink and the bandwidth
/// grew linearly up to 32 (bench/results/2026-11-21-h200x2-split.md); each costs its own
/// staging (`SLOTS * SLOT_BYTES` per connection).
pub const MAX_SPLIT: u32 = 64;

/// Sub-CTAs per plan block: as many as fit the GPU with the most blocks (one CTA per SM),
/// at most `cap` ([`MAX_SPLIT`] unless the user pins it).
pub fn split_factor(plan: &Plan, spread: &Spread, sms: u32, cap: u32) -> u32 {
    let mut per_gpu = vec![0u32; spread.gpus.max(1) as usize];
    for (r, rp) in plan.gpus.iter().enumerate() {
        per_gpu[spread.gpu(r as u32) as usize] += rp.blocks.len() as u32;
    }
    let most = per_gpu.into_iter().max().unwrap_or(1).max(1);
    (sms / most).min(cap).max(1)
}

/// How the kernel cuts every chunk into per-iteration slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slicing {
    /// Iterations of each block's op list; iteration `l` runs on sub-CTA `l % nsub`.
    pub iters: u64,
    /// Slice widths are multiples of this many elements.
    pub align: u64,
}

/// The kernel's chunk positions and slicing, by value in its ABI ([`super::abi`]).
pub use super::abi::{ChunkPos, Slicer};

/// A plan chunk `c` of a logical buffer as the kernel finds it: its slice `c / k` and its
/// position `c % k` there, split once at load.
impl ChunkPos {
    /// Chunk `c` of a plan with chunk factor `k`; None when its slice does not fit 32 bits.
    pub fn of(c: u64, k: u64) -> Option<ChunkPos> {
        let k = k.max(1);
        Some(ChunkPos {
            slice: u32::try_from(c / k).ok()?,
            pos: (c % k) as u32,
        })
    }
}

/// A call's [`Slicing`] at `count` elements per slice of `k` chunks, with every division the
/// kernel's pieces need done here: chunk (slice, pos) covers `slice * count + pos * base +
/// min(pos, extra)` onwards, `base + 1` elements when `pos < extra` (width `w_long` per
/// iteration) and `base` otherwise (`w_short`). On the GPU these divisions took about 1 500
/// cycles of an 8-byte LL op's 2 300-2 900.
impl Slicer {
    /// The pieces of `sl` for `count` elements per slice of `k` chunks.
    pub fn new(count: u64, k: u32, sl: Slicing) -> Slicer {
        let k64 = u64::from(k.max(1));
        let (iters, align) = (sl.iters.max(1), sl.align.max(1));
        let width = |len: u64| len.div_ceil(iters).div_ceil(align) * align;
        let base = count / k64;
        Slicer {
            count,
            base,
            extra: count % k64,
            w_short: width(base),
            w_long: width(base + 1),
            iters: sl.iters,
            k: k.max(1),
            pad: 0,
        }
    }

    /// Elements `[lo, hi)` of chunk `c` that iteration `l` covers, as the kernel's `slice_at`.
    pub fn piece(&self, c: ChunkPos, l: u64) -> (u64, u64) {
        let longer = u64::from(c.pos) < self.extra;
        let start = u64::from(c.slice) * self.count
            + u64::from(c.pos) * self.base
            + if longer { u64::from(c.pos) } else { self.extra };
        let end = start + self.base + u64::from(longer);
        let w = if longer { self.w_long } else { self.w_short };
        ((start + l * w).min(end), (start + (l + 1) * w).min(end))
    }
}

/// Chunks in the largest op of `plan` (at least 1): what one message must carry.
pub fn widest_op(plan: &Plan) -> u64 {
    plan.gpus
        .iter()
        .flat_map(|g| &g.blocks)
        .flat_map(|b| &b.ops)
        .map(|o| u64::from(o.count))
        .max()
        .unwrap_or(1)
        .max(1)
}

/// The [`Slicing`] of a plan with chunk factor `k` whose largest op carries `widest` chunks
/// ([`widest_op`]), at `count` elements of `esize` bytes with `nsub` sub-CTAs, each given a
/// slice of a chunk once it gets at least `sub_bytes` ([`BULK_SUB_BYTES`]).
pub fn slicing(k: u64, widest: u64, esize: u64, nsub: u32, count: u64, sub_bytes: u64) -> Slicing {
    let chunk = count.div_ceil(k.max(1));
    let widest = widest.max(1);
    let slot_elems = (u64::from(SLOT_BYTES) / esize.max(1)).max(1);
    let mut align = (128 / esize.max(1)).max(1);
    while align > 1 && 2 * widest * align > slot_elems {
        align /= 2;
    }
    // A slice is at most ceil(chunk / iters) rounded up to `align`, i.e. below
    // chunk / iters + align: leaving `align` elements of room per chunk of the widest op
    // always fits. The fewest iterations that fit may be less (a chunk of exactly 8 slots
    // needs 8, not 9): search up to that bound.
    let bound = (widest * chunk)
        .div_ceil(slot_elems.saturating_sub(widest * align).max(1))
        .max(1);
    let fits = |iters: u64| widest * chunk.div_ceil(iters).div_ceil(align) * align <= slot_elems;
    let mut fit = (widest * chunk).div_ceil(slot_elems).max(1);
    while fit < bound && !fits(fit) {
        fit += 1;
    }
    let nsub = u64::from(nsub.max(1));
    // Iterations take turns on the sub-CTAs. Beyond one round, every round is made full:
    // 9 iterations on 8 sub-CTAs would have one run two full-width slices while the others
    // idle; 16 narrower ones take the same two rounds at half the width.
    let iters = if fit > nsub {
        fit.div_ceil(nsub) * nsub
    } else {
        // Give every sub-CTA a slice once a chunk is worth splitting (`sub_bytes` each).
        let worth = (chunk * esize) / sub_bytes.max(1);
        fit.max(worth.min(nsub))
    };
    Slicing { iters, align }
}

/// The data protocol of one call (see the module docs and the opening comment of
/// `kernel/common.cuh`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// Staging slots, a fence and a `sent` counter per message.
    Bulk,
    /// Data and flag in each 8-byte half of 16-byte lines, polled by the receiver.
    Ll,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Bulk => "bulk",
            Protocol::Ll => "ll",
        }
    }
}

/// When calls use LL, and how they spread over sub-CTAs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallLimits {
    /// Calls whose largest message is at most this many bytes use LL (0: never).
    pub max: u64,
    /// ... and whose larger user buffer is at most this many bytes ([`LL_CALL_FACTOR`]).
    pub call_max: u64,
    /// Data per sub-CTA per message ([`LL_SUB_BYTES`]).
    pub sub_bytes: u64,
    /// Bulk: a chunk is cut over the sub-CTAs once each gets at least this many bytes
    /// ([`BULK_SUB_BYTES`]).
    pub bulk_sub_bytes: u64,
}

impl CallLimits {
    pub fn new(max: u64) -> CallLimits {
        CallLimits {
            max,
            call_max: max.saturating_mul(LL_CALL_FACTOR),
            sub_bytes: LL_SUB_BYTES,
            bulk_sub_bytes: BULK_SUB_BYTES,
        }
    }
}

/// How a call of one count runs: its protocol, how chunks are sliced, how many CTAs each
/// plan block runs as and with how many threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallConfig {
    pub protocol: Protocol,
    pub slicing: Slicing,
    /// CTAs per plan block: sub-CTAs `0..active` (the others have no slice at this count).
    pub active: u32,
    pub threads: u32,
    /// Bytes of the call's largest message before slicing: what the threshold compares.
    pub message_bytes: u64,
}

/// Whether LL lines can carry the widest op: every chunk of a message starts on a fresh
/// line, so each may waste up to a line's 8 bytes; keep at least half a slot for data.
pub fn ll_fits(widest: u64, esize: u64) -> bool {
    2 * widest.max(1) * (8 + esize) <= u64::from(LL_SLOT_BYTES / 2)
}

/// The [`Slicing`] of an LL call: as [`slicing`], with a slot's data being half its lines'
/// bytes less a line per chunk, and a sub-CTA per `sub_bytes` ([`LL_SUB_BYTES`]) of the
/// widest message (so a thread carries about one line per message).
pub fn slicing_ll(
    k: u64,
    widest: u64,
    esize: u64,
    nsub: u32,
    count: u64,
    sub_bytes: u64,
) -> Slicing {
    let chunk = count.div_ceil(k.max(1));
    let widest = widest.max(1);
    let esize = esize.max(1);
    let room = u64::from(LL_SLOT_BYTES / 2).saturating_sub(8 * widest);
    let slot_elems = (room / esize).max(1);
    // 64 bytes: slices of an aligned chunk stay 8-byte aligned (one load per line).
    let mut align = (64 / esize).max(1);
    while align > 1 && 2 * widest * align > slot_elems {
        align /= 2;
    }
    let fit = (widest * chunk)
        .div_ceil(slot_elems.saturating_sub(widest * align).max(1))
        .max(1);
    let worth = (widest * chunk * esize) / sub_bytes.max(1);
    Slicing {
        iters: fit.max(worth.min(u64::from(nsub))),
        align,
    }
}

/// How a plan's chunks size its calls: chunk factor `k`, chunks of its largest op
/// ([`widest_op`]) and of its larger user buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkShape {
    pub k: u64,
    pub widest: u64,
    pub user_chunks: u64,
}

impl ChunkShape {
    pub fn of(plan: &Plan) -> ChunkShape {
        ChunkShape {
            k: plan.chunk_factor,
            widest: widest_op(plan),
            user_chunks: plan
                .buffers
                .iter()
                .take(2)
                .map(|b| b.chunks)
                .max()
                .unwrap_or(0),
        }
    }
}

/// The [`CallConfig`] of a call of `count` elements of `esize` bytes for a plan of shape `sh`,
/// run with `nsub` sub-CTAs per block: LL when the largest message (`widest` chunks) is at
/// most `ll.max` bytes, the larger user buffer at most `ll.call_max` and LL lines can carry
/// the op, bulk otherwise.
pub fn call_config(
    sh: ChunkShape,
    esize: u64,
    nsub: u32,
    count: u64,
    ll: CallLimits,
) -> CallConfig {
    let (k, widest) = (sh.k, sh.widest);
    let chunk = count.div_ceil(k.max(1));
    let message_bytes = chunk * widest.max(1) * esize;
    let call_bytes = chunk * sh.user_chunks * esize;
    let use_ll = ll.max > 0
        && message_bytes <= ll.max
        && call_bytes <= ll.call_max
        && ll_fits(widest, esize);
    let (protocol, slicing) = if use_ll {
        (
            Protocol::Ll,
            slicing_ll(k, widest, esize, nsub, count, ll.sub_bytes),
        )
    } else {
        (
            Protocol::Bulk,
            slicing(k, widest, esize, nsub, count, ll.bulk_sub_bytes),
        )
    };
    let active = slicing.iters.min(u64::from(nsub.max(1))).max(1) as u32;
    let threads = match protocol {
        Protocol::Bulk => THREADS,
        Protocol::Ll => {
            // Lines of the widest message one CTA carries per iteration: one thread each.
            let width = chunk.div_ceil(slicing.iters).div_ceil(slicing.align) * slicing.align;
            let lines = widest.max(1) * (width * esize).div_ceil(8);
            (lines.next_power_of_two().clamp(32, u64::from(THREADS))) as u32
        }
    };
    CallConfig {
        protocol,
        slicing,
        active,
        threads,
        message_bytes,
    }
}
