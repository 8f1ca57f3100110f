//! Where everything a plan needs on the GPUs lies: one placer ([`Layout::new`]) lays out every
//! region of every GPU's arena (connection staging and flags, scratch and placement staging
//! of its ranks, instruction arrays, progress words, counters, error record, trace) before
//! anything is allocated. The arena allocated for a GPU is its layout's [`GpuLayout::total`],
//! and loading takes the regions in the layout's order, checking each offset
//! (`setup::claim`), so the size reported and the size taken are one computation.
//! Pure: tested without a GPU.
//!
//! Invariants:
//! - Every GPU's regions, in [`Layout::regions`] order, tile `0 .. total` exactly: each
//!   starts where the one before ends (`at + region_size(bytes)`, on
//!   [`REGION_ALIGN`](super::device::REGION_ALIGN)), the first at 0, the last ending at
//!   `total`.
//! - The order within an arena is the order regions are taken: first the connections, in
//!   plan order (sending rank, block, its send peers in
//!   [`send_peers`](coll_compiler::plan::Block::send_peers) order, sub-CTA), each taking its bulk slots, LL lines and
//!   `sent` word on the receiver's GPU and its `acked` and `ready` words on the sender's;
//!   then, for a one-shot allreduce, each rank's one-shot region on its GPU, in plan order
//!   ([`super::oneshot`]); then per rank of the GPU (in plan order) its scratch buffers and placement staging; then
//!   the instruction arrays and the GPU's words. Every process of a group lays out every
//!   GPU the same way, so a connection's region is at the same offset in all of them.
//! - Array regions hold exactly as many entries as [`super::encode`] writes for the GPU
//!   (the counts are computed from the plan the same way; a test checks the two agree).
//! - Scratch holds every chunk at the largest size of any count up to the largest
//!   ([`Plan::scratch_elements`]), and a rank's staging region the larger of what placement
//!   staging and padded staging need ([`coll_compiler::plan::sizes`]): a call that runs
//!   padded is always of the plan's own placement, so it never needs both at once.

use super::abi::{CallCounters, DBlock, DConn, DDep, DOp, ErrorRec, RankCtx, TraceRec};
use super::device::region_size;
use super::oneshot::region_bytes;
use super::{LL_SLOT_BYTES, LL_SLOTS, Spread, staging_bytes};
use coll_compiler::plan::Plan;
use coll_compiler::plan::sizes::Padding;

/// One connection's LL region per sub-CTA: its LL slots, then as many LL128 slots of the same
/// size (the kernel finds those at `ll + LL_SLOTS * LL_SLOT_BYTES`).
pub const LL_REGION_BYTES: u64 = 2 * LL_SLOTS as u64 * LL_SLOT_BYTES as u64;

/// A connection: (sending plan rank, receiving plan rank, channel, sub-CTA).
pub type ConnKey = (u32, u32, u32, u32);

/// Where one region lies in its arena: `bytes` asked for, at offset `at`; it takes
/// [`region_size(bytes)`](region_size) of the arena.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Place {
    pub at: u64,
    pub bytes: u64,
}

impl Place {
    /// The offset of the next region.
    pub fn end(&self) -> u64 {
        self.at + region_size(self.bytes)
    }
}

/// One connection's regions: `slots`, `ll` and `sent` in the receiver's arena, `acked`
/// (16 bytes: `acked`, then `ready`) in the sender's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnPlaces {
    pub key: ConnKey,
    /// The GPUs (spread indices) of the sender and the receiver.
    pub send_gpu: usize,
    pub recv_gpu: usize,
    pub slots: Place,
    pub ll: Place,
    pub sent: Place,
    pub acked: Place,
}

/// One plan rank's regions on its GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankPlaces {
    pub rank: u32,
    /// `(buffer, place)` of each scratch buffer (buffers 2..), sized for the largest count.
    pub scratch: Vec<(usize, Place)>,
    /// Placement staging ([`super::placement::staging_elems`]) or padded staging
    /// ([`Padding::max_staging_elems`]), whichever is larger, when the plan needs either.
    pub staging: Option<Place>,
}

/// Counts of a GPU's instruction arrays.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArrayCounts {
    /// Block entries: each local plan block once per sub-CTA.
    pub blocks: u64,
    pub ops: u64,
    pub deps: u64,
    /// Connection ends: one per sub-CTA of each block's send and receive peer.
    pub conns: u64,
    /// Local ranks.
    pub ranks: u64,
}

/// One GPU's arena.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuLayout {
    /// The ranks on this GPU, in plan order (their slot order).
    pub ranks: Vec<RankPlaces>,
    pub counts: ArrayCounts,
    pub blocks: Place,
    pub ops: Place,
    pub deps: Place,
    pub conns: Place,
    /// The ranks' `RankCtx` entries (room for one when the GPU has none).
    pub ctxs: Place,
    /// One progress word per block entry.
    pub progress: Place,
    pub counters: Place,
    pub error: Place,
    /// One trace record per op (room for one when the GPU has none).
    pub trace: Place,
    /// The arena's size: where its last region ends.
    pub total: u64,
}

/// Every GPU's arena for one plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Every connection, in the order its regions are taken.
    pub conns: Vec<ConnPlaces>,
    /// Per plan rank: its GPU (spread index) and one-shot region ([`super::oneshot`]), when
    /// the plan has them.
    pub oneshot: Vec<Option<(usize, Place)>>,
    /// Per GPU of the spread.
    pub gpus: Vec<GpuLayout>,
}

/// Hands out consecutive regions of one arena.
#[derive(Default)]
struct Cursor(u64);

impl Cursor {
    fn take(&mut self, bytes: u64) -> Place {
        let p = Place { at: self.0, bytes };
        self.0 = p.end();
        p
    }
}

impl Layout {
    /// Lays out `plan` spread as `spread` with `nsub` sub-CTAs per block and bulk slots of
    /// `slot_bytes` ([`super::config::slot_bytes`]), for counts up to
    /// `max_count` of `esize`-byte elements and `staging_elems` elements of placement
    /// staging per rank (0: none; the region also serves padded calls, and is made large
    /// enough for them), with one-shot regions of parts of `oneshot_lines` lines (0: none,
    /// [`super::oneshot::region_lines`]).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        plan: &Plan,
        spread: &Spread,
        nsub: u32,
        slot_bytes: u32,
        esize: u64,
        max_count: u64,
        staging_elems: u64,
        oneshot_lines: u64,
    ) -> Layout {
        let s = u64::from(nsub.max(1));
        let g = spread.gpus.max(1) as usize;
        let staging_elems = staging_elems.max(Padding::of(plan).max_staging_elems(plan, max_count));
        let mut at: Vec<Cursor> = (0..g).map(|_| Cursor::default()).collect();
        let mut conns = Vec::new();
        for (r, rp) in plan.gpus.iter().enumerate() {
            let (r, send_gpu) = (r as u32, spread.gpu(r as u32) as usize);
            // Every connection of a block of several send peers too (one per peer).
            for (b, q) in rp
                .blocks
                .iter()
                .flat_map(|b| b.send_peers().map(move |q| (b, q)))
            {
                let recv_gpu = spread.gpu(q) as usize;
                for sub in 0..nsub {
                    let slots = at[recv_gpu].take(staging_bytes(slot_bytes));
                    let ll = at[recv_gpu].take(LL_REGION_BYTES);
                    let sent = at[recv_gpu].take(8);
                    let acked = at[send_gpu].take(16);
                    conns.push(ConnPlaces {
                        key: (r, q, b.channel, sub),
                        send_gpu,
                        recv_gpu,
                        slots,
                        ll,
                        sent,
                        acked,
                    });
                }
            }
        }
        let oneshot = (0..plan.ranks)
            .map(|p| {
                let gi = spread.gpu(p) as usize;
                (oneshot_lines > 0)
                    .then(|| (gi, at[gi].take(region_bytes(plan.ranks, oneshot_lines))))
            })
            .collect();
        let gpus = at
            .into_iter()
            .enumerate()
            .map(|(gi, mut cur)| {
                let local: Vec<u32> = (0..plan.ranks)
                    .filter(|&p| spread.gpu(p) as usize == gi)
                    .collect();
                let ranks = local
                    .iter()
                    .map(|&rank| RankPlaces {
                        rank,
                        scratch: (2..plan.buffers.len())
                            .map(|b| (b, cur.take(plan.scratch_elements(b, max_count) * esize)))
                            .collect(),
                        staging: (staging_elems > 0).then(|| cur.take(staging_elems * esize)),
                    })
                    .collect();
                let counts = array_counts(plan, &local, s);
                let sized = |n: u64, one: usize| n * one as u64;
                let blocks = cur.take(sized(counts.blocks, size_of::<DBlock>()));
                let ops = cur.take(sized(counts.ops, size_of::<DOp>()));
                let deps = cur.take(sized(counts.deps, size_of::<DDep>()));
                let conns = cur.take(sized(counts.conns, size_of::<DConn>()));
                let ctxs = cur.take(sized(counts.ranks.max(1), size_of::<RankCtx>()));
                let progress = cur.take(counts.blocks.max(1) * 4);
                let counters = cur.take(size_of::<CallCounters>() as u64);
                let error = cur.take(size_of::<ErrorRec>() as u64);
                let trace = cur.take(sized(counts.ops.max(1), size_of::<TraceRec>()));
                GpuLayout {
                    ranks,
                    counts,
                    blocks,
                    ops,
                    deps,
                    conns,
                    ctxs,
                    progress,
                    counters,
                    error,
                    trace,
                    total: cur.0,
                }
            })
            .collect();
        Layout {
            conns,
            oneshot,
            gpus,
        }
    }

    /// Each GPU's arena size: what is allocated, and reported before allocating.
    pub fn totals(&self) -> Vec<u64> {
        self.gpus.iter().map(|g| g.total).collect()
    }

    /// The connection regions in GPU `gi`'s arena, in order: `(place, what)`.
    pub fn conn_regions(&self, gi: usize) -> Vec<(Place, &'static str)> {
        let mut out = Vec::new();
        for c in &self.conns {
            if c.recv_gpu == gi {
                out.extend([
                    (c.slots, "slots"),
                    (c.ll, "LL and LL128 lines"),
                    (c.sent, "sent"),
                ]);
            }
            if c.send_gpu == gi {
                out.push((c.acked, "acked"));
            }
        }
        out
    }

    /// The one-shot regions in GPU `gi`'s arena, in order.
    pub fn oneshot_regions(&self, gi: usize) -> Vec<(Place, &'static str)> {
        (self.oneshot.iter().flatten())
            .filter(|&&(g, _)| g == gi)
            .map(|&(_, p)| (p, "one-shot region"))
            .collect()
    }
}

impl GpuLayout {
    /// The regions after the connections', in order: `(place, what)`.
    pub fn own_regions(&self) -> Vec<(Place, &'static str)> {
        let mut out = Vec::new();
        for r in &self.ranks {
            out.extend(r.scratch.iter().map(|&(_, p)| (p, "scratch")));
            out.extend(r.staging.map(|p| (p, "placement or padded staging")));
        }
        out.extend([
            (self.blocks, "blocks"),
            (self.ops, "ops"),
            (self.deps, "deps"),
            (self.conns, "connections"),
            (self.ctxs, "ranks"),
            (self.progress, "progress"),
            (self.counters, "counters"),
            (self.error, "error record"),
            (self.trace, "trace"),
        ]);
        out
    }
}

impl Layout {
    /// Every region of GPU `gi`'s arena, in order.
    pub fn regions(&self, gi: usize) -> Vec<(Place, &'static str)> {
        let mut out = self.conn_regions(gi);
        out.extend(self.oneshot_regions(gi));
        if let Some(g) = self.gpus.get(gi) {
            out.extend(g.own_regions());
        }
        out
    }
}

/// The instruction arrays' counts for the ranks `local` of `plan` at `s` sub-CTAs per block.
fn array_counts(plan: &Plan, local: &[u32], s: u64) -> ArrayCounts {
    let blocks = || {
        local
            .iter()
            .filter_map(|&r| plan.gpus.get(r as usize))
            .flat_map(|rp| &rp.blocks)
    };
    ArrayCounts {
        blocks: s * blocks().count() as u64,
        ops: blocks().map(|b| b.ops.len() as u64).sum(),
        deps: blocks()
            .flat_map(|b| &b.ops)
            .map(|o| o.deps.len() as u64)
            .sum(),
        conns: s * blocks()
            .map(|b| (b.send_peers().count() + b.recv_peers().count()) as u64)
            .sum::<u64>(),
        ranks: local.len() as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::{LL_SLOT_BYTES, LL_SLOTS, SLOT_BYTES, SLOTS, shipped_plan};

    fn ring(n: usize) -> Plan {
        shipped_plan("allreduce_ring.coll", n)
    }

    fn sizes(plan: &Plan, gpus: u32, nsub: u32, staging_elems: u64) -> Vec<u64> {
        let sp = Spread::new(plan, gpus, 0);
        Layout::new(plan, &sp, nsub, SLOT_BYTES, 4, 1 << 20, staging_elems, 0).totals()
    }

    /// What one connection end takes per sub-CTA on the receiving GPU and the sending one
    /// together: bulk slots, LL and LL128 lines and the two counters.
    fn staging() -> u64 {
        region_size(u64::from(SLOTS * SLOT_BYTES))
            + region_size(LL_REGION_BYTES)
            + region_size(8)
            + region_size(16)
    }

    #[test]
    fn arena_holds_staging_scratch_and_instructions() {
        // Ring on 2 GPUs: each GPU ends one incoming connection (the bulk slots, the LL slots, a
        // flag) and one outgoing (a flag), and holds one block of 3 ops.
        let sizes2 = sizes(&ring(2), 2, 1, 0);
        let staging = staging();
        for s in &sizes2 {
            assert!(*s > staging && *s < staging + 64 * 1024, "{sizes2:?}");
        }
        // Eight ranks on two GPUs: four connections end on each.
        let sizes8 = sizes(&ring(8), 2, 1, 0);
        assert!(sizes8.iter().all(|&s| s > 4 * staging), "{sizes8:?}");
    }

    #[test]
    fn arena_grows_with_the_split() {
        // Every sub-CTA has its own staging and flags: 16 subs need at least 16 times the
        // staging of one.
        let one = sizes(&ring(2), 2, 1, 0);
        let many = sizes(&ring(2), 2, 16, 0);
        let staging = staging();
        for (a, b) in one.iter().zip(&many) {
            assert!(*b >= *a + 15 * staging, "{one:?} -> {many:?}");
        }
    }

    #[test]
    fn ll_lines_are_part_of_the_arena() {
        // Per sub-CTA of every connection, the receiver holds LL_SLOTS slots of LL lines and
        // as many of LL128 lines: the
        // 16 sub-CTAs of the 2-rank ring add exactly 15 more connection ends than one, each
        // with its LL slots (and the instruction arrays grow by a few hundred bytes).
        let one = sizes(&ring(2), 2, 1, 0);
        let many = sizes(&ring(2), 2, 16, 0);
        for (a, b) in one.iter().zip(&many) {
            let grown = b - a;
            assert!(
                grown >= 15 * staging() && grown < 15 * staging() + 16 * 1024,
                "{one:?} -> {many:?}"
            );
        }
        // LL and LL128 together cost a quarter of bulk staging.
        assert_eq!(u64::from(SLOTS * SLOT_BYTES) / LL_REGION_BYTES, 4);
        assert_eq!(LL_REGION_BYTES, 2 * u64::from(LL_SLOTS * LL_SLOT_BYTES));
    }

    #[test]
    fn placement_staging_is_part_of_the_arena() {
        let r = ring(2);
        let without = sizes(&r, 2, 1, 0);
        let with = sizes(&r, 2, 1, 1 << 20);
        for (a, b) in without.iter().zip(&with) {
            assert_eq!(*b, *a + region_size(4 << 20), "{without:?} -> {with:?}");
        }
    }

    #[test]
    fn padded_staging_and_the_largest_scratch_chunks_are_part_of_the_arena() {
        // Ring allreduce on 2 ranks with its first local-or-sent source moved one chunk
        // over: the plan now joins chunks of different classes, so calls of some counts run
        // padded, and each rank's staging region holds the padded input and output.
        let ring = ring(2);
        let mut moved = ring.clone();
        let k = moved.chunk_factor;
        assert!(k > 1, "ring of 2 has a chunk factor of {k}");
        let op = moved.gpus[0].blocks[0]
            .ops
            .iter_mut()
            .find(|o| o.src.is_some())
            .expect("an op with a source");
        let src = op.src.expect("checked");
        let shifted = if src.offset() > 0 {
            src.offset() - 1
        } else {
            src.offset() + 1
        };
        op.src = Some(coll_compiler::plan::Slice(src.buffer(), shifted));
        assert!(Padding::of(&moved).ever());
        assert!(!Padding::of(&ring).ever());
        // The ring is in place: at a max count of 1 << 20 (a multiple of k), one padded
        // buffer of 1 << 20 elements of 4 bytes; out of place, input and output apart.
        assert!(ring.inplace);
        let without = sizes(&ring, 2, 1, 0);
        let with = sizes(&moved, 2, 1, 0);
        for (a, b) in without.iter().zip(&with) {
            assert_eq!(*b, *a + region_size(4 << 20), "{without:?} -> {with:?}");
        }
        moved.inplace = false;
        let apart = sizes(&moved, 2, 1, 0);
        for (a, b) in without.iter().zip(&apart) {
            assert_eq!(
                *b,
                *a + region_size(2 * (4 << 20)),
                "{without:?} -> {apart:?}"
            );
        }
        moved.inplace = true;
        // A larger placement staging is kept as it is: one region serves both.
        let placed = sizes(&moved, 2, 1, 3 << 20);
        for (a, b) in without.iter().zip(&placed) {
            assert_eq!(
                *b,
                *a + region_size(4 * (3 << 20)),
                "{without:?} -> {placed:?}"
            );
        }
        // Scratch at the largest chunk size: 3 scratch chunks at chunk factor 1 and a max
        // count of 1001 hold 3 x 1001 elements; 6 at chunk factor 2 hold 6 x 501 (ceil
        // 1001 / 2), not 3 x 501 + 3 x 500 as at the count itself.
        let mut rs = ring.clone();
        rs.chunk_factor = 1;
        rs.buffers.push(coll_compiler::plan::BufferDecl {
            name: "tmp".into(),
            chunks: 3,
        });
        let sp = Spread::new(&rs, 2, 0);
        let scratch = |plan: &Plan| {
            Layout::new(plan, &sp, 1, SLOT_BYTES, 4, 1001, 0, 0).gpus[0].ranks[0]
                .scratch
                .iter()
                .map(|(_, p)| p.bytes)
                .sum::<u64>()
        };
        assert_eq!(scratch(&rs), 3 * 1001 * 4);
        rs.chunk_factor = 2;
        rs.buffers[2].chunks = 6;
        assert_eq!(scratch(&rs), 6 * 501 * 4);
    }

    /// The regions the placer hands out tile each arena: each starts where the last ended,
    /// and the last ends at the total, which is therefore exactly what loading takes.
    #[test]
    fn regions_tile_each_arena_up_to_its_total() {
        for (file, n, gpus, nsub, staging, oneshot) in [
            ("allreduce_ring.coll", 2, 2, 1, 0, 0),
            ("allreduce_ring.coll", 8, 2, 4, 1 << 10, 0),
            ("allreduce_ring.coll", 4, 4, 16, 0, 0),
            ("broadcast_ring.coll", 4, 2, 3, 0, 0),
            ("allreduce_ring.coll", 2, 4, 2, 0, 0),
            ("allreduce_oneshot.coll", 4, 2, 2, 0, 1025),
            ("allreduce_allpairs.coll", 3, 3, 1, 1 << 10, 7),
        ] {
            let plan = shipped_plan(file, n);
            let sp = Spread::new(&plan, gpus, 0);
            let lay = Layout::new(&plan, &sp, nsub, SLOT_BYTES, 2, 4099, staging, oneshot);
            assert_eq!(lay.gpus.len(), gpus as usize);
            for gi in 0..gpus as usize {
                let mut end = 0;
                let mut sum = 0;
                for (p, what) in lay.regions(gi) {
                    assert_eq!(p.at, end, "{file} GPU {gi}: {what} at {}", p.at);
                    assert_eq!(p.at % crate::cuda::device::REGION_ALIGN, 0);
                    end = p.end();
                    sum += region_size(p.bytes);
                }
                assert_eq!(end, lay.gpus[gi].total, "{file} GPU {gi}");
                assert_eq!(sum, lay.gpus[gi].total, "{file} GPU {gi}");
            }
            // Every connection once per sub-CTA of every sending block.
            let sends: usize = plan
                .gpus
                .iter()
                .flat_map(|g| &g.blocks)
                .map(|b| b.send_peers().count())
                .sum();
            assert_eq!(lay.conns.len(), sends * nsub as usize, "{file}");
            // A one-shot region per rank, on its GPU, when asked for.
            let regions: usize = (0..gpus as usize)
                .map(|gi| lay.oneshot_regions(gi).len())
                .sum();
            assert_eq!(regions, if oneshot > 0 { n } else { 0 }, "{file}");
            for (p, o) in lay.oneshot.iter().enumerate() {
                if let Some((gi, place)) = o {
                    assert_eq!(*gi, sp.gpu(p as u32) as usize);
                    assert_eq!(place.bytes, region_bytes(n as u32, oneshot));
                }
            }
        }
    }

    #[test]
    fn a_connections_regions_sit_on_its_two_gpus() {
        // Ring on 2 ranks, 2 GPUs: rank 0 sends to 1, so its slots are on GPU 1 and its
        // `acked` on GPU 0, each GPU's first connection region at offset 0.
        let r = ring(2);
        let sp = Spread::new(&r, 2, 0);
        let lay = Layout::new(&r, &sp, 1, SLOT_BYTES, 4, 1 << 20, 0, 0);
        let c = lay
            .conns
            .iter()
            .find(|c| c.key.0 == 0)
            .expect("rank 0 sends");
        assert_eq!((c.send_gpu, c.recv_gpu), (0, 1));
        assert_eq!(c.slots.at, 0);
        assert_eq!(c.slots.bytes, staging_bytes(SLOT_BYTES));
        assert_eq!(c.ll.at, region_size(staging_bytes(SLOT_BYTES)));
        assert_eq!(c.sent.bytes, 8);
        assert_eq!(c.acked.bytes, 16);
        // Arrays: rank 0's blocks, each with a send and a receive end.
        let g = &lay.gpus[0];
        let blocks = &r.gpus[0].blocks;
        assert_eq!(g.counts.blocks, blocks.len() as u64);
        assert_eq!(
            g.counts.ops,
            blocks.iter().map(|b| b.ops.len() as u64).sum::<u64>()
        );
        assert_eq!(
            (g.counts.conns, g.counts.ranks),
            (2 * blocks.len() as u64, 1)
        );
        assert_eq!(g.blocks.bytes, g.counts.blocks * size_of::<DBlock>() as u64);
    }

    #[test]
    fn a_gpu_without_ranks_still_has_its_words() {
        // Two ranks on four GPUs: GPUs 1 and 3 run none, yet have room for one rank entry,
        // one progress word and one trace record.
        let r = ring(2);
        let lay = Layout::new(&r, &Spread::new(&r, 4, 0), 1, SLOT_BYTES, 4, 64, 0, 0);
        let empty = &lay.gpus[1];
        assert!(empty.ranks.is_empty());
        assert_eq!(empty.counts, ArrayCounts::default());
        assert_eq!(empty.ctxs.bytes, size_of::<RankCtx>() as u64);
        assert_eq!(empty.progress.bytes, 4);
    }
}
