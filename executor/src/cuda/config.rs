//! How one call is cut for the kernel: its protocol (bulk, LL or LL128), how every chunk is sliced
//! into per-iteration pieces, how many sub-CTAs of each plan block run and with how many
//! threads. Pure functions of the plan's shape and the call's count, so they are tested here
//! without a GPU and the host and the kernel agree on every slice.
//!
//! Invariants: a bulk slice of the widest op fits one staging slot (the plan's
//! [`slot_bytes`], at most [`super::SLOT_BYTES`])
//! and an LL or LL128 slice one slot of its lines; slice widths are multiples of `Slicing::align`
//! elements, so slices of aligned chunks stay 16-byte aligned; iterations beyond one round
//! of sub-CTAs come in whole rounds.

use super::GpuSettings;
use super::{
    BULK_SUB_BYTES, LL_MAX_BYTES, LL_MAX_BYTES_BESIDE_LL128, LL_SLOT_BYTES, LL_SUB_BYTES,
    LL128_MAX_BYTES, LL128_MAX_BYTES_WIDE, LL128_SUB_BYTES, SLOT_BUDGET_BYTES, SLOT_BYTES, SLOTS,
    SlotSize, Spread, THREADS,
};
use coll_compiler::plan::Plan;
use coll_lang::builtins::CollectiveKind;

/// Most sub-CTAs per plan block (the default cap, and the most any cap gives: the proxy
/// numbers a block's sub-channels below it). One CTA moves ~10 GB/s over H200 NVLink and
/// the bandwidth grew linearly up to 32 (bench/results/2026-11-21-h200x2-split.md); an LL
/// call of 1 MiB needs about 133 slot-loads per message, which 128 sub-CTAs move in two
/// rounds and 64 in three: 128 took such calls 8–19% faster and one-block calls of 256 MiB
/// and more 3–4% (bench/results/2026-11-28-h200x2-split-cap.md). Each costs its own
/// staging (`SLOTS * SLOT_BYTES` per connection).
pub const MAX_SPLIT: u32 = 128;

/// Sub-CTAs per plan block: as many as fit the GPU with the most blocks (one CTA per SM),
/// at most `cap` ([`MAX_SPLIT`] unless the user pins it lower) and never more than
/// [`MAX_SPLIT`].
pub fn split_factor(plan: &Plan, spread: &Spread, sms: u32, cap: u32) -> u32 {
    let mut per_gpu = vec![0u32; spread.gpus.max(1) as usize];
    for (r, rp) in plan.gpus.iter().enumerate() {
        per_gpu[spread.gpu(r as u32) as usize] += rp.blocks.len() as u32;
    }
    let most = per_gpu.into_iter().max().unwrap_or(1).max(1);
    (sms / most).min(cap).clamp(1, MAX_SPLIT)
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
pub use coll_compiler::gpu::protocol::{ChunkShape, LlLimits, ll_fits, widest_op};

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

/// Bytes of each bulk staging slot of a plan split `nsub` ways: as `set`, or
/// [`SLOT_BYTES`] halved (once) where the GPU receiving most connections would hold more than
/// [`SLOT_BUDGET_BYTES`] of slots with it. Every process of a group computes the same from
/// the same plan, split and setting (the arena sizes they exchange would differ otherwise).
pub fn slot_bytes(plan: &Plan, spread: &Spread, nsub: u32, set: SlotSize) -> u32 {
    match set {
        SlotSize::Bytes(b) => b,
        SlotSize::Auto => {
            let mut incoming = vec![0u64; spread.gpus.max(1) as usize];
            for rp in &plan.gpus {
                for q in rp.blocks.iter().flat_map(|b| b.send_peers()) {
                    incoming[spread.gpu(q) as usize] += u64::from(nsub.max(1));
                }
            }
            let most = incoming.into_iter().max().unwrap_or(0);
            if most * u64::from(SLOTS) * u64::from(SLOT_BYTES) > SLOT_BUDGET_BYTES {
                SLOT_BYTES / 2
            } else {
                SLOT_BYTES
            }
        }
    }
}

/// The [`Slicing`] of a plan with chunk factor `k` whose largest op carries `widest` chunks
/// ([`widest_op`]), at `count` elements of `esize` bytes with `nsub` sub-CTAs, each given a
/// slice of a chunk once it gets at least `sub_bytes` ([`BULK_SUB_BYTES`]), in slots of
/// `slot_bytes` ([`slot_bytes`]).
pub fn slicing(
    k: u64,
    widest: u64,
    esize: u64,
    nsub: u32,
    count: u64,
    sub_bytes: u64,
    slot_bytes: u32,
) -> Slicing {
    let chunk = count.div_ceil(k.max(1));
    let widest = widest.max(1);
    let slot_elems = (u64::from(slot_bytes) / esize.max(1)).max(1);
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
    /// 120 bytes of data and a flag in each 128-byte line, polled by the receiver's warps.
    Ll128,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Bulk => "bulk",
            Protocol::Ll => "ll",
            Protocol::Ll128 => "ll128",
        }
    }
}

/// When calls use LL or LL128, and how they spread over sub-CTAs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallLimits {
    /// Which calls use LL: the largest message and the larger buffer at most these.
    pub protocol: LlLimits,
    /// Which of the others use LL128 (max 0: none; the host sets it only for plans whose
    /// every connection joins two NVLinked GPUs, with no block of several peers).
    pub ll128: LlLimits,
    /// Data per sub-CTA per message ([`LL_SUB_BYTES`]).
    pub sub_bytes: u64,
    /// LL128: data per sub-CTA per message ([`LL128_SUB_BYTES`]).
    pub ll128_sub_bytes: u64,
    /// Bulk: a chunk is cut over the sub-CTAs once each gets at least this many bytes
    /// ([`BULK_SUB_BYTES`]).
    pub bulk_sub_bytes: u64,
    /// Bulk: bytes of each staging slot ([`slot_bytes`]).
    pub slot_bytes: u32,
}

impl CallLimits {
    /// LL up to a message threshold of `max` bytes, no LL128.
    pub fn new(max: u64) -> CallLimits {
        CallLimits {
            protocol: LlLimits::new(max),
            ll128: LlLimits::new(0),
            sub_bytes: LL_SUB_BYTES,
            ll128_sub_bytes: LL128_SUB_BYTES,
            bulk_sub_bytes: BULK_SUB_BYTES,
            slot_bytes: SLOT_BYTES,
        }
    }

    /// Sets LL128's threshold to `ll128_max` (0: never; in a group, the one every process
    /// agreed on) and LL's from `set` or its rule for the plan, which depends on it
    /// ([`ll_auto_max`]): so every process of a group runs each call in one protocol.
    /// `proxied`: connections the host forwards, bulk only.
    pub fn agree_ll128(&mut self, plan: &Plan, set: &GpuSettings, ll128_max: u64, proxied: bool) {
        let ll_max = set.ll_max.or_auto(|| ll_auto_max(plan.ranks, ll128_max));
        self.ll128 = LlLimits::new(ll128_max);
        self.protocol = LlLimits::new(if proxied { 0 } else { ll_max });
    }
}

/// LL128's message threshold where none is set ([`super::Threshold::Auto`]) for a plan of
/// `ranks` ranks computing `collective`: [`LL128_MAX_BYTES`] below 4 ranks,
/// [`LL128_MAX_BYTES_WIDE`] from 4 (more steps, each bulk handshake dearer), and never for
/// alltoall, whose bulk calls store every message straight into the receiver's output and
/// beat LL128 wherever LL ends (0.57-0.95x on 2 and 4 x H200, bench/NOTES.md, Protocols).
pub fn ll128_auto_max(ranks: u32, collective: CollectiveKind) -> u64 {
    match collective {
        CollectiveKind::AllToAll => 0,
        _ if ranks >= 4 => LL128_MAX_BYTES_WIDE,
        _ => LL128_MAX_BYTES,
    }
}

/// LL's message threshold where none is set ([`super::Threshold::Auto`]) for a plan of
/// `ranks` ranks whose calls run LL128 up to `ll128_max` bytes (0: never):
/// [`LL_MAX_BYTES_BESIDE_LL128`] from 4 ranks where LL128 serves, else [`LL_MAX_BYTES`].
pub fn ll_auto_max(ranks: u32, ll128_max: u64) -> u64 {
    if ranks >= 4 && ll128_max > 0 {
        LL_MAX_BYTES_BESIDE_LL128
    } else {
        LL_MAX_BYTES
    }
}

/// Bytes of data in one LL128 line (the rest is its flag).
pub const LL128_LINE_DATA: u64 = super::abi::LL128_LINE_BYTES as u64 - 8;

/// Bytes of data an LL128 slot carries: whole lines of [`LL128_LINE_DATA`].
pub const LL128_SLOT_DATA: u64 =
    LL_SLOT_BYTES as u64 / super::abi::LL128_LINE_BYTES as u64 * LL128_LINE_DATA;

/// Whether LL128 lines can carry the widest op: as [`ll_fits`], each chunk of a message may
/// waste up to a line's data; keep at least half a slot for data.
pub fn ll128_fits(widest: u64, esize: u64) -> bool {
    2 * widest.max(1) * (LL128_LINE_DATA + esize) <= LL128_SLOT_DATA
}

/// The [`Slicing`] of an LL128 call: as [`slicing_ll`], with a slot's data being its lines'
/// 120 bytes each less a line per chunk, a sub-CTA per `sub_bytes` ([`LL128_SUB_BYTES`]) of
/// the widest message, and beyond one round of sub-CTAs whole rounds (as [`slicing`]).
pub fn slicing_ll128(
    k: u64,
    widest: u64,
    esize: u64,
    nsub: u32,
    count: u64,
    sub_bytes: u64,
) -> Slicing {
    let lines = LineSlots {
        data: LL128_SLOT_DATA,
        line: LL128_LINE_DATA,
        whole_rounds: true,
    };
    lines.slicing(k, widest, esize, nsub, count, sub_bytes)
}

/// How a line protocol's slot holds a message: `data` bytes of it at most, of which each
/// chunk may waste up to a `line` (every chunk starts on a fresh line).
struct LineSlots {
    data: u64,
    line: u64,
    /// Beyond one round of sub-CTAs, whole rounds of iterations (as bulk's [`slicing`]).
    whole_rounds: bool,
}

impl LineSlots {
    /// The fewest iterations whose slices of the widest op fit a slot, at least one per
    /// `sub_bytes` of the widest message up to `nsub`; widths in multiples of 64 bytes where
    /// they fit (slices of an aligned chunk stay 8-byte aligned: one load per word).
    fn slicing(
        &self,
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
        let room = self.data.saturating_sub(self.line * widest);
        let slot_elems = (room / esize).max(1);
        let mut align = (64 / esize).max(1);
        while align > 1 && 2 * widest * align > slot_elems {
            align /= 2;
        }
        let fit = (widest * chunk)
            .div_ceil(slot_elems.saturating_sub(widest * align).max(1))
            .max(1);
        let nsub = u64::from(nsub.max(1));
        let worth = (widest * chunk * esize) / sub_bytes.max(1);
        let iters = if self.whole_rounds && fit > nsub {
            fit.div_ceil(nsub) * nsub
        } else {
            fit.max(worth.min(nsub))
        };
        Slicing { iters, align }
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
    let lines = LineSlots {
        data: u64::from(LL_SLOT_BYTES / 2),
        line: 8,
        whole_rounds: false,
    };
    lines.slicing(k, widest, esize, nsub, count, sub_bytes)
}

/// The [`CallConfig`] of a call of `count` elements of `esize` bytes for a plan of shape `sh`,
/// run with `nsub` sub-CTAs per block: LL where `ll.protocol` says so ([`LlLimits::uses_ll`]:
/// the largest message, `widest` chunks, and the larger user buffer within its limits, and
/// LL lines can carry the op), else LL128 where `ll.ll128`'s limits say so and its lines can
/// carry the op ([`ll128_fits`]), bulk otherwise.
pub fn call_config(
    sh: ChunkShape,
    esize: u64,
    nsub: u32,
    count: u64,
    ll: CallLimits,
) -> CallConfig {
    let (k, widest) = (sh.k, sh.widest);
    let chunk = count.div_ceil(k.max(1));
    let (message_bytes, _) = sh.bytes(esize, count);
    let use_ll = ll.protocol.uses_ll(sh, esize, count);
    let use_ll128 = !use_ll && {
        let (message, call) = sh.bytes(esize, count);
        ll.ll128.max > 0
            && message <= ll.ll128.max
            && call <= ll.ll128.call_max
            && ll128_fits(widest, esize)
    };
    let (protocol, slicing) = if use_ll {
        (
            Protocol::Ll,
            slicing_ll(k, widest, esize, nsub, count, ll.sub_bytes),
        )
    } else if use_ll128 {
        (
            Protocol::Ll128,
            slicing_ll128(k, widest, esize, nsub, count, ll.ll128_sub_bytes),
        )
    } else {
        (
            Protocol::Bulk,
            slicing(
                k,
                widest,
                esize,
                nsub,
                count,
                ll.bulk_sub_bytes,
                ll.slot_bytes,
            ),
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
        Protocol::Ll128 => {
            // Lines of the widest message one CTA carries per iteration: eight threads each.
            let width = chunk.div_ceil(slicing.iters).div_ceil(slicing.align) * slicing.align;
            let lines = widest.max(1) * (width * esize).div_ceil(LL128_LINE_DATA);
            ((8 * lines)
                .next_power_of_two()
                .clamp(32, u64::from(THREADS))) as u32
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::{LL_CALL_FACTOR, LL_MAX_BYTES, THREADS, Threshold};
    use coll_compiler::topology::Topology;
    use coll_compiler::{CompileOptions, compile};

    fn ring(n: usize) -> Plan {
        ring_x(n, None)
    }

    /// The shipped ring on `n` ranks, with the header's instances or `instances`.
    fn ring_x(n: usize, instances: Option<u32>) -> Plan {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../algorithms/allreduce_ring.coll"
        );
        let m =
            coll_lang::load_bytes(path, std::fs::read(path).expect("ring ships")).expect("valid");
        let topo = Topology::parse(&format!("nvswitch:{n}")).expect("preset");
        let mut o = CompileOptions::default();
        o.elaborate.instances = instances;
        compile(&m, &topo, &o)
            .expect("compiles")
            .into_plan()
            .into_inner()
    }

    fn spread(p: &Plan, g: u32) -> Spread {
        Spread::new(p, g, 0)
    }

    /// The kernel's `chunk_start` and `slice_of`, to check the host's slicing against.
    fn kernel_slice(count: u64, k: u64, c: u64, l: u64, sl: Slicing) -> (u64, u64) {
        let start = |c: u64| (c / k) * count + (c % k) * (count / k) + (c % k).min(count % k);
        let (s, e) = (start(c), start(c + 1));
        let w = (e - s).div_ceil(sl.iters).div_ceil(sl.align) * sl.align;
        ((s + l * w).min(e), (s + (l + 1) * w).min(e))
    }

    #[test]
    fn the_kernels_division_free_pieces_are_the_slices() {
        // Slicer does the divisions once per call on the host; its pieces must be exactly
        // the slices the host plans with, for every chunk and iteration.
        for k in [1u64, 2, 3, 7, 8, 64] {
            for count in [0u64, 1, 5, 63, 64, 4099, 1_000_003, 1 << 33] {
                for (iters, align) in [(1, 1), (1, 32), (3, 1), (8, 4), (16, 3), (5, 128)] {
                    let sl = Slicing { iters, align };
                    let s = Slicer::new(count, k as u32, sl);
                    for c in 0..3 * k {
                        let pos = ChunkPos::of(c, k).expect("small chunk");
                        for l in 0..iters {
                            assert_eq!(
                                s.piece(pos, l),
                                kernel_slice(count, k, c, l, sl),
                                "count {count} k {k} {sl:?} chunk {c} iteration {l}"
                            );
                        }
                    }
                }
            }
        }
        assert_eq!(ChunkPos::of(17, 8), Some(ChunkPos { slice: 2, pos: 1 }));
        assert_eq!(ChunkPos::of(8 << 32, 8), None);
    }

    #[test]
    fn slices_fit_a_slot_and_stay_aligned() {
        let plan = ring(2);
        let k = plan.chunk_factor;
        for (esize, slot_bytes) in [1u64, 2, 4, 8]
            .into_iter()
            .flat_map(|e| [SLOT_BYTES, SLOT_BYTES / 2, 4096].map(|b| (e, b)))
        {
            let slot = u64::from(slot_bytes) / esize;
            // 1 GiB once gave odd widths (130 945 f32): every slice after the first unaligned.
            for count in [1u64, 4099, 1_000_003, 1 << 22, (1 << 30) / esize, 3 << 26] {
                let sl = slicing(
                    k,
                    widest_op(&plan),
                    esize,
                    16,
                    count,
                    BULK_SUB_BYTES,
                    slot_bytes,
                );
                assert_eq!((sl.align * esize) % 16, 0, "{sl:?}");
                let mut covered = 0;
                for c in 0..k {
                    for l in 0..sl.iters {
                        let (lo, hi) = kernel_slice(count, k, c, l, sl);
                        assert!(hi - lo <= slot, "count {count} esize {esize}: {sl:?}");
                        if count % (k * 16) == 0 {
                            assert_eq!((lo * esize) % 16, 0, "count {count}: {sl:?} l {l}");
                        }
                        covered += hi - lo;
                    }
                }
                assert_eq!(covered, count, "{sl:?}");
                assert!(
                    sl.iters <= 16 || sl.iters.is_multiple_of(16),
                    "uneven rounds: {sl:?}"
                );
            }
        }
        // A chunk of exactly 8 slots takes 8 iterations, one round of 8 sub-CTAs (it took
        // 9, two rounds, with the first and widest slice on one sub-CTA).
        let chunk = 8 * u64::from(SLOT_BYTES) / 4;
        assert_eq!(
            slicing(32, 1, 4, 8, 32 * chunk, BULK_SUB_BYTES, SLOT_BYTES).iters,
            8
        );
        // Beyond a round, full rounds: 17 slots' worth on 8 sub-CTAs is 24 iterations.
        assert_eq!(
            slicing(
                32,
                1,
                4,
                8,
                32 * (chunk * 17 / 8),
                BULK_SUB_BYTES,
                SLOT_BYTES
            )
            .iters,
            24
        );
    }

    #[test]
    fn slots_halve_where_a_gpu_would_hold_more_than_the_budget() {
        // The 16-instance ring on 2 GPUs: 16 connections end on each GPU, each split 8 ways:
        // 128 pairs of 512 KiB slots (128 MiB) are over the 64 MiB budget; split 4 ways, at it.
        let x16 = ring_x(2, Some(16));
        let sp = spread(&x16, 2);
        assert_eq!(slot_bytes(&x16, &sp, 8, SlotSize::Auto), SLOT_BYTES / 2);
        assert_eq!(slot_bytes(&x16, &sp, 4, SlotSize::Auto), SLOT_BYTES);
        // One block a rank split 128 ways holds as many.
        let one = ring(2);
        assert_eq!(
            slot_bytes(&one, &spread(&one, 2), 128, SlotSize::Auto),
            SLOT_BYTES / 2
        );
        assert_eq!(
            slot_bytes(&one, &spread(&one, 2), 64, SlotSize::Auto),
            SLOT_BYTES
        );
        // Both ranks on one GPU: it receives both connections.
        assert_eq!(
            slot_bytes(&one, &spread(&one, 1), 64, SlotSize::Auto),
            SLOT_BYTES / 2
        );
        // A size set is kept, whatever the plan.
        let set = SlotSize::Bytes(64 << 10);
        assert_eq!(slot_bytes(&x16, &sp, 8, set), 64 << 10);
        // The calls of a plan slice to its slots: a 1 GiB f32 bulk call of the x16 ring
        // takes twice the iterations with half the slot.
        let sh = ChunkShape::of(&x16);
        let at = |slot_bytes: u32| {
            let limits = CallLimits {
                slot_bytes,
                ..CallLimits::new(0)
            };
            call_config(sh, 4, 8, 1 << 28, limits).slicing.iters
        };
        assert_eq!(at(SLOT_BYTES / 2), 2 * at(SLOT_BYTES));
    }

    #[test]
    fn small_calls_use_ll_and_large_ones_bulk() {
        let r = ring(2);
        let sh = ChunkShape::of(&r);
        let w = sh.widest;
        // f32 ring allreduce on 2 ranks: the largest message is half the call.
        let at =
            |bytes: u64, ll_max: u64| call_config(sh, 4, 64, bytes / 4, CallLimits::new(ll_max));
        assert_eq!(at(8, LL_MAX_BYTES).protocol, Protocol::Ll);
        assert_eq!(at(64 << 10, LL_MAX_BYTES).message_bytes, 32 << 10);
        assert_eq!(at(2 * LL_MAX_BYTES, LL_MAX_BYTES).protocol, Protocol::Ll);
        assert_eq!(
            at(2 * LL_MAX_BYTES + 8, LL_MAX_BYTES).protocol,
            Protocol::Bulk
        );
        assert_eq!(at(1 << 30, LL_MAX_BYTES).protocol, Protocol::Bulk);
        // 0 turns LL off; a huge threshold uses it at every size.
        assert_eq!(at(8, 0).protocol, Protocol::Bulk);
        assert_eq!(at(1 << 30, u64::MAX).protocol, Protocol::Ll);
        // Tiny calls: one CTA of one warp per block; 64 KiB: 32 CTAs of 1 KiB of data, a line
        // per thread.
        let tiny = at(8, LL_MAX_BYTES);
        assert_eq!((tiny.active, tiny.threads, tiny.slicing.iters), (1, 32, 1));
        let mid = at(64 << 10, LL_MAX_BYTES);
        assert_eq!((mid.active, mid.threads), (32, 128));
        // Bulk keeps its full CTAs.
        assert_eq!(at(1 << 30, LL_MAX_BYTES).threads, THREADS);
        // An op too wide for LL lines (a line per chunk lost to padding) stays bulk.
        assert!(ll_fits(w, 8));
        assert!(!ll_fits(1024, 4));
        assert_eq!(
            call_config(
                ChunkShape { widest: 1024, ..sh },
                4,
                64,
                8,
                CallLimits::new(u64::MAX)
            )
            .protocol,
            Protocol::Bulk
        );
        // More bytes per sub-CTA spread a call over fewer, with more threads each.
        let narrow = call_config(
            sh,
            4,
            64,
            (64 << 10) / 4,
            CallLimits {
                sub_bytes: 4096,
                ..CallLimits::new(LL_MAX_BYTES)
            },
        );
        assert_eq!((narrow.active, narrow.threads), (8, 512));
    }

    #[test]
    fn large_calls_use_bulk_even_when_their_messages_are_small() {
        // 16 instances of the ring on 4 ranks: 64 chunks, so a 32 MiB call has 512 KiB
        // messages, small enough for LL, yet LL moved it at 0.61x bulk's speed.
        let sh = ChunkShape::of(&ring_x(4, Some(16)));
        let at = |bytes: u64| call_config(sh, 4, 64, bytes / 4, CallLimits::new(LL_MAX_BYTES));
        let big = at(32 << 20);
        assert!(big.message_bytes <= LL_MAX_BYTES, "{big:?}");
        assert_eq!(big.protocol, Protocol::Bulk);
        let cap = LL_CALL_FACTOR * LL_MAX_BYTES;
        assert_eq!(cap, 4 << 20);
        assert_eq!(at(cap).protocol, Protocol::Ll);
        assert_eq!(at(cap + 64 * 4).protocol, Protocol::Bulk);
        // The one knob moves both limits: COLL_GPU_LL_MAX=1G uses LL for a 1 GiB call.
        let ll = |bytes: u64| call_config(sh, 4, 64, bytes / 4, CallLimits::new(1 << 30)).protocol;
        assert_eq!(ll(1 << 30), Protocol::Ll);
    }

    #[test]
    fn ll_slices_fit_a_slot_of_lines_and_stay_aligned() {
        let plan = ring(2);
        let k = plan.chunk_factor;
        let lines = u64::from(LL_SLOT_BYTES / 16);
        for esize in [1u64, 2, 4, 8] {
            for widest in [1u64, 3, 8, 64] {
                for count in [0u64, 1, 3, 4099, 65_537, 1 << 20, 3 << 22] {
                    for nsub in [1u32, 7, 64] {
                        let sh = ChunkShape {
                            k,
                            widest,
                            user_chunks: k,
                        };
                        let c = call_config(sh, esize, nsub, count, CallLimits::new(u64::MAX));
                        let sl = c.slicing;
                        assert_eq!(c.protocol, Protocol::Ll);
                        assert!(c.active >= 1 && c.active <= nsub, "{c:?}");
                        assert!(c.threads.is_power_of_two() && (32..=THREADS).contains(&c.threads));
                        assert_eq!((sl.align * esize) % 8, 0, "{sl:?} esize {esize}");
                        let mut covered = 0;
                        for l in 0..sl.iters {
                            // The widest message of iteration l: `widest` chunks, each
                            // starting on a fresh line.
                            let mut need = 0;
                            for c in 0..k {
                                let (lo, hi) = kernel_slice(count, k, c, l, sl);
                                if count % (k * 8) == 0 {
                                    assert_eq!((lo * esize) % 8, 0, "count {count}: {sl:?}");
                                }
                                need = need.max(((hi - lo) * esize).div_ceil(8));
                                covered += hi - lo;
                            }
                            assert!(
                                widest * need <= lines,
                                "esize {esize} widest {widest} count {count}: {sl:?}"
                            );
                        }
                        assert_eq!(covered, count, "{sl:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn protocol_thresholds_follow_the_rank_count_and_skip_alltoall() {
        use CollectiveKind::*;
        assert_eq!(ll128_auto_max(2, AllReduce), 1 << 20);
        assert_eq!(ll128_auto_max(3, Broadcast), 1 << 20);
        assert_eq!(ll128_auto_max(4, AllGather), 4 << 20);
        assert_eq!(ll128_auto_max(8, ReduceScatter), 4 << 20);
        assert_eq!(ll128_auto_max(2, AllToAll), 0);
        assert_eq!(ll128_auto_max(8, AllToAll), 0);
        assert_eq!(ll_auto_max(2, 1 << 20), 512 << 10);
        assert_eq!(ll_auto_max(4, 4 << 20), 256 << 10);
        assert_eq!(ll_auto_max(4, 0), 512 << 10);

        // The 4-rank ring allreduce by default: LL to 1 MiB calls (256 KiB messages), LL128
        // from 2 to 16 MiB (4 MiB messages), bulk from 32 MiB; a threshold set by hand holds.
        let plan = ring(4);
        let sh = ChunkShape::of(&plan);
        let protocol = |set: &GpuSettings, bytes: u64| {
            let mut ll = CallLimits::new(0);
            ll.agree_ll128(
                &plan,
                set,
                set.ll128_max.or_auto(|| ll128_auto_max(4, AllReduce)),
                false,
            );
            call_config(sh, 4, 64, bytes / 4, ll).protocol
        };
        let auto = GpuSettings::default();
        let by_size: Vec<Protocol> = [1u64 << 20, 2 << 20, 16 << 20, 32 << 20]
            .iter()
            .map(|&b| protocol(&auto, b))
            .collect();
        use Protocol::*;
        assert_eq!(by_size, [Ll, Ll128, Ll128, Bulk]);
        let set = GpuSettings {
            ll_max: Threshold::Bytes(512 << 10),
            ll128_max: Threshold::Bytes(0),
            ..GpuSettings::default()
        };
        assert_eq!(
            (protocol(&set, 2 << 20), protocol(&set, 4 << 20)),
            (Ll, Bulk)
        );
        // Proxied connections stay bulk whatever the thresholds.
        let mut ll = CallLimits::new(0);
        ll.agree_ll128(&plan, &auto, 0, true);
        assert_eq!(call_config(sh, 4, 64, 256, ll).protocol, Bulk);
    }

    #[test]
    fn ll128_serves_the_calls_between_ll_and_bulk_where_allowed() {
        let sh = ChunkShape::of(&ring(2));
        let lim = CallLimits {
            ll128: LlLimits::new(4 << 20),
            ..CallLimits::new(LL_MAX_BYTES)
        };
        // f32 ring allreduce on 2 ranks: the largest message is half the call.
        let at = |bytes: u64| call_config(sh, 4, 64, bytes / 4, lim);
        assert_eq!(at(8).protocol, Protocol::Ll);
        assert_eq!(at(2 * LL_MAX_BYTES).protocol, Protocol::Ll);
        assert_eq!(at(2 * LL_MAX_BYTES + 8).protocol, Protocol::Ll128);
        assert_eq!(at(8 << 20).protocol, Protocol::Ll128);
        assert_eq!(at((8 << 20) + 8).protocol, Protocol::Bulk);
        // Off unless the host allows it (CallLimits::new), and its own call cap.
        let none = call_config(sh, 4, 64, (4 << 20) / 4, CallLimits::new(LL_MAX_BYTES));
        assert_eq!(none.protocol, Protocol::Bulk);
        let x16 = ChunkShape::of(&ring_x(4, Some(16)));
        let big = call_config(x16, 4, 64, (64 << 20) / 4, lim);
        assert!(big.message_bytes <= 4 << 20, "{big:?}");
        assert_eq!(big.protocol, Protocol::Bulk);
        // Eight threads a line: a 2 MiB call's 1 MiB message takes two rounds of 64 sub-CTAs
        // (a slot carries under 15 KiB), 8 KiB each: 69 lines, 552 threads, a full CTA.
        let mid = at(2 << 20);
        assert_eq!(mid.protocol, Protocol::Ll128);
        assert_eq!((mid.active, mid.threads), (64, THREADS));
        // An op too wide for LL128's lines stays bulk.
        assert!(ll128_fits(sh.widest, 8) && !ll128_fits(64, 4));
        let wide = ChunkShape { widest: 64, ..sh };
        assert_eq!(
            call_config(wide, 4, 64, (4 << 20) / 4, lim).protocol,
            Protocol::Bulk
        );
    }

    #[test]
    fn ll128_slices_fit_a_slot_of_lines() {
        let plan = ring(2);
        let k = plan.chunk_factor;
        let lines = u64::from(LL_SLOT_BYTES) / 128;
        let lim = CallLimits {
            ll128: LlLimits::new(u64::MAX),
            ..CallLimits::new(0)
        };
        for esize in [1u64, 2, 4, 8] {
            for widest in [1u64, 3, 8, 32] {
                for count in [1u64, 3, 4099, 65_537, 1 << 20, 3 << 22] {
                    for nsub in [1u32, 7, 64] {
                        let sh = ChunkShape {
                            k,
                            widest,
                            user_chunks: k,
                        };
                        let c = call_config(sh, esize, nsub, count, lim);
                        let sl = c.slicing;
                        assert_eq!(c.protocol, Protocol::Ll128);
                        assert!(c.active >= 1 && c.active <= nsub, "{c:?}");
                        assert!(c.threads.is_power_of_two() && (32..=THREADS).contains(&c.threads));
                        assert!(
                            sl.iters <= u64::from(nsub) || sl.iters.is_multiple_of(u64::from(nsub))
                        );
                        let mut covered = 0;
                        for l in 0..sl.iters {
                            // Each of the widest message's chunks starts on a fresh line of
                            // 120 bytes of data.
                            let mut need = 0;
                            for c in 0..k {
                                let (lo, hi) = kernel_slice(count, k, c, l, sl);
                                need = need.max(((hi - lo) * esize).div_ceil(LL128_LINE_DATA));
                                covered += hi - lo;
                            }
                            assert!(
                                widest * need <= lines,
                                "esize {esize} widest {widest} count {count}: {sl:?}"
                            );
                        }
                        assert_eq!(covered, count, "{sl:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn blocks_split_to_fill_the_sms_up_to_the_cap() {
        // Ring: one block per rank. 2 ranks on 2 GPUs of 132 SMs: capped.
        assert_eq!(
            split_factor(&ring(2), &spread(&ring(2), 2), 132, MAX_SPLIT),
            MAX_SPLIT
        );
        // 8 ranks on one GPU of 20 SMs: 8 blocks there, 20 / 8 = 2 CTAs each.
        assert_eq!(
            split_factor(&ring(8), &spread(&ring(8), 1), 20, MAX_SPLIT),
            2
        );
        // A pinned cap wins below the SM bound, never above it.
        assert_eq!(split_factor(&ring(2), &spread(&ring(2), 2), 132, 8), 8);
        assert_eq!(split_factor(&ring(8), &spread(&ring(8), 1), 20, 100), 2);
        // The SMs of a bigger GPU never take it past the proxy's numbering.
        assert_eq!(
            split_factor(&ring(2), &spread(&ring(2), 2), 1000, 500),
            MAX_SPLIT
        );
        // More blocks than SMs still runs each block once.
        assert_eq!(
            split_factor(&ring(8), &spread(&ring(8), 1), 4, MAX_SPLIT),
            1
        );
        assert_eq!(split_factor(&ring(2), &spread(&ring(2), 2), 132, 0), 1);
    }
}
