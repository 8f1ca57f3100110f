//! Chunk sizes at a count, and the counts at which a plan runs on padded buffers. Every size
//! function of a plan is here: [`chunk_range`] and [`chunk_start`] (also exported from
//! [`crate::plan`]), [`Plan::elements`], [`Plan::buffer_elements`],
//! [`Plan::scratch_elements`] and [`Plan::scratch_bytes`].
//!
//! At NCCL count `count`, chunk `c` of a buffer has class `c % k` (`k` the chunk factor) and
//! holds `count / k` elements, one more when its class is below the remainder
//! `e = count % k` ([`chunk_range`]). Every op moves chunk `a + i` of its
//! source to chunk `b + i` of its destination, and every message the chunks of its sender
//! to those of its receiver; when `a % k != b % k` the two chunks differ in size exactly at
//! the remainders `e` with `min < e <= max` of their two classes. [`Padding::of`] collects
//! those remainders over every op and message of a plan.
//!
//! A plan runs at every count, in one of two ways ([`Padding::run_count`]):
//! - *exact*, at `count` itself with every buffer laid out as the plan docs say, when no op
//!   or message of the plan joins chunks of different sizes at `count % k`: always when `k`
//!   divides the count, and at every count for plans whose moves keep each chunk's class
//!   (all shipped algorithms). Nothing is copied or allocated beyond the plan's buffers.
//! - *padded*, otherwise: at the padded count `k * ceil(count / k)` ([`padded_count`]),
//!   where every chunk holds `ceil(count / k)` elements, on padded copies of the user's
//!   `input` and `output`: each user chunk is copied to the start of its padded chunk before
//!   the plan runs and back after ([`pad_copies`]); the padding elements are zero on the CPU
//!   and unspecified on a GPU, and are never copied out.
//!
//! Why padded runs are exact: at a multiple of `k` no two chunks differ in size, and each
//! element position of a chunk is an independent run of the proved, symbolic plan. Every
//! collective maps class `j` of its inputs to class `j` of its outputs (allgather's output
//! chunk `r * k + j` is chunk `j` of rank `r`'s input, and so on), so position `p` of an
//! output chunk of class `j` is computed from position `p` of input chunks of class `j`,
//! which for `p` below the chunk's size at `count` hold the user's data. In-place aliasing
//! ([`crate::layout::alias`]) moves chunks by whole slices, so it keeps classes too.
//!
//! Scratch buffers are allocated at the largest chunk size, `ceil(count / k)` elements per
//! chunk ([`Plan::scratch_elements`]), which holds them in either way of running; padded
//! runs also need per rank the padded `input` and `output` ([`padded_staging`]), counted by
//! [`Padding::staging_elems`] and included in [`Plan::scratch_bytes`].
//!
//! Invariant of [`Padding`]: `mismatched` holds sorted, disjoint, non-adjacent ranges of
//! remainders inside `1..k`; a remainder is in one exactly when some op or message of the
//! plan joins chunks of different sizes at counts with that remainder.

use super::Plan;
use crate::layout::in_place_layout;
use std::collections::BTreeMap;
use std::ops::Range;

/// The elements of chunks `[start, end)` of a slice of `elems` elements cut into `chunks`
/// chunks: sizes differ by at most one, the first `elems % chunks` chunks holding the extra.
pub fn chunk_range(elems: u64, chunks: u64, start: u64, end: u64) -> Range<u64> {
    if chunks == 0 {
        return 0..0;
    }
    let base = elems / chunks;
    let extra = elems % chunks;
    let at = |c: u64| c * base + c.min(extra);
    at(start.min(chunks))..at(end.min(chunks))
}

/// The element offset where plan chunk `c` of any buffer starts, for slices of `count`
/// elements and `k` chunks.
pub fn chunk_start(count: u64, k: u64, c: u64) -> u64 {
    if k == 0 {
        return 0;
    }
    (c / k) * count + chunk_range(count, k, 0, c % k).end
}

impl Plan {
    /// The elements that plan chunks `[start, start + n)` of any buffer cover, for NCCL count
    /// `count`. Every executor resolves offsets with this function.
    pub fn elements(&self, count: u64, start: u64, n: u64) -> Range<u64> {
        chunk_start(count, self.chunk_factor, start)
            ..chunk_start(count, self.chunk_factor, start + n)
    }

    /// Elements of buffer `b` per rank, for NCCL count `count`.
    pub fn buffer_elements(&self, b: usize, count: u64) -> u64 {
        self.buffers
            .get(b)
            .map_or(0, |buf| chunk_start(count, self.chunk_factor, buf.chunks))
    }

    /// Elements allocated for scratch buffer `b` per rank, for counts up to `count`: its
    /// chunks at the largest chunk size, `ceil(count / k)`, which holds the buffer both at
    /// `count` and at its padded count (the module docs).
    pub fn scratch_elements(&self, b: usize, count: u64) -> u64 {
        let width = padded_count(count, self.chunk_factor) / self.chunk_factor.max(1);
        self.buffers
            .get(b)
            .map_or(0, |buf| buf.chunks.saturating_mul(width))
    }

    /// Bytes per rank beyond the user's buffers for NCCL count `count` of `elem_size`-byte
    /// elements: the scratch buffers ([`Plan::scratch_elements`]) and, at counts where the
    /// plan runs padded, its padded staging ([`Padding::staging_elems`]). Exactly what
    /// an executor allocates for a call of `count`.
    pub fn scratch_bytes(&self, count: u64, elem_size: u64) -> u64 {
        let scratch = (2..self.buffers.len()).fold(0u64, |a, b| {
            a.saturating_add(self.scratch_elements(b, count))
        });
        let padding = Padding::of(self).staging_elems(self, count);
        scratch.saturating_add(padding).saturating_mul(elem_size)
    }
}

/// The padded count of `count` for chunk factor `k`: the least multiple of `k` at or above
/// `count` (saturating), at which every chunk holds `ceil(count / k)` elements.
pub fn padded_count(count: u64, k: u64) -> u64 {
    let k = k.max(1);
    count.div_ceil(k).saturating_mul(k)
}

/// The remainders of the count at which a plan joins chunks of different sizes (see the
/// module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Padding {
    k: u64,
    mismatched: Vec<Range<u64>>,
}

impl Padding {
    /// The analysis of `plan`: every op's source against its destination, and every message's
    /// sending chunks against its receiving ones (sends and receives of a connection paired
    /// in order, as [`Plan::validate`] pairs them; a block of several peers has a connection
    /// per peer). Linear in the plan's messages.
    pub fn of(plan: &Plan) -> Padding {
        let k = plan.chunk_factor.max(1);
        let mut spans = Vec::new();
        // Per connection (from, to, channel): the first chunk of each sending op's message,
        // in order; likewise the first chunk each receiving op lands or combines it on.
        let mut sends: BTreeMap<(u32, u32, u32), Vec<(u64, u64)>> = BTreeMap::new();
        let mut recvs: BTreeMap<(u32, u32, u32), Vec<u64>> = BTreeMap::new();
        for (r, gpu) in plan.gpus.iter().enumerate() {
            let r = r as u32;
            for block in &gpu.blocks {
                for op in &block.ops {
                    let n = u64::from(op.count);
                    if let (Some(s), Some(d)) = (op.src, op.dst) {
                        mismatch_spans(k, s.offset(), d.offset(), n, &mut spans);
                    }
                    // A send's message is its source (a forwarding receive's, its
                    // destination, which the receive has just joined to the message).
                    let anchor = op.src.or(op.dst).map(|s| s.offset());
                    // Every peer of a block gets (or gives) its own message, each a chunk
                    // pair to compare.
                    if let (true, Some(a)) = (op.kind.sends(), anchor) {
                        for q in block.send_peers() {
                            sends.entry((r, q, block.channel)).or_default().push((a, n));
                        }
                    }
                    if let (true, Some(a)) = (op.kind.receives(), anchor) {
                        for p in block.recv_peers() {
                            recvs.entry((p, r, block.channel)).or_default().push(a);
                        }
                    }
                }
            }
        }
        for (key, sent) in &sends {
            for (&(a, n), &b) in sent.iter().zip(recvs.get(key).into_iter().flatten()) {
                mismatch_spans(k, a, b, n, &mut spans);
            }
        }
        spans.sort_by_key(|s| (s.start, s.end));
        let mut mismatched: Vec<Range<u64>> = Vec::new();
        for s in spans {
            match mismatched.last_mut() {
                Some(last) if s.start <= last.end => last.end = last.end.max(s.end),
                _ => mismatched.push(s),
            }
        }
        Padding { k, mismatched }
    }

    /// The chunk factor the analysis is for.
    pub fn chunk_factor(&self) -> u64 {
        self.k
    }

    /// The remainders of the count (sorted, disjoint ranges) at which the plan runs padded.
    pub fn mismatched(&self) -> &[Range<u64>] {
        &self.mismatched
    }

    /// Whether some count makes the plan run padded.
    pub fn ever(&self) -> bool {
        !self.mismatched.is_empty()
    }

    /// Whether the plan runs padded at `count`.
    pub fn needed(&self, count: u64) -> bool {
        let e = count % self.k;
        let i = self.mismatched.partition_point(|r| r.end <= e);
        self.mismatched.get(i).is_some_and(|r| r.contains(&e))
    }

    /// The count the plan runs at for a call of `count`: `count` itself, or its
    /// [`padded_count`] where the plan runs padded.
    pub fn run_count(&self, count: u64) -> u64 {
        if self.needed(count) {
            padded_count(count, self.k)
        } else {
            count
        }
    }

    /// Elements of padded staging per rank that a call of `count` needs: the padded `input`
    /// and `output` ([`padded_staging`]), or 0 when the call runs exact.
    pub fn staging_elems(&self, plan: &Plan, count: u64) -> u64 {
        if self.needed(count) {
            padded_staging(plan, 0, padded_count(count, self.k)).len
        } else {
            0
        }
    }

    /// The most [`staging_elems`](Self::staging_elems) of any count up to `max_count`: what
    /// an executor sized for `max_count` allocates per rank.
    pub fn max_staging_elems(&self, plan: &Plan, max_count: u64) -> u64 {
        if self.ever() && max_count > 0 {
            // Padded sizes grow with the count; the padded count of `max_count` is the
            // largest any smaller count pads to.
            padded_staging(plan, 0, padded_count(max_count, self.k)).len
        } else {
            0
        }
    }
}

/// Adds to `out` the remainders at which chunks `a + i` and `b + i` (`i < n`) differ in
/// size for chunk factor `k`.
fn mismatch_spans(k: u64, a: u64, b: u64, n: u64, out: &mut Vec<Range<u64>>) {
    let (a, b) = (a % k, b % k);
    if a == b {
        return;
    }
    // Classes repeat every k chunks: the first k pairs are all there are. Walk them in runs
    // where neither class wraps past k - 1 (at most three runs).
    let m = n.min(k);
    let mut i = 0;
    while i < m {
        let (x, y) = ((a + i) % k, (b + i) % k);
        let len = (m - i).min(k - x).min(k - y);
        // Pair j of the run differs for remainders in (lo + j, hi + j]; consecutive ones
        // overlap, so the run's union is (lo, hi + len - 1].
        let (lo, hi) = (x.min(y), x.max(y));
        out.push(lo + 1..hi + len);
        i += len;
    }
}

/// Where a padded run keeps one rank's `input` and `output`, in elements of its padded
/// staging: both in one buffer in NCCL's in-place layout for an in-place plan, one after the
/// other for an out-of-place plan, so that the padded call is always of the plan's own
/// placement and needs no placement copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PaddedStaging {
    /// Elements of the staging.
    pub len: u64,
    /// Where the padded `input` starts.
    pub input_at: u64,
    /// Where the padded `output` starts.
    pub output_at: u64,
}

/// The padded staging of rank `rank` at padded count `padded` (see [`PaddedStaging`]); its
/// length is the same for every rank.
pub fn padded_staging(plan: &Plan, rank: u32, padded: u64) -> PaddedStaging {
    let (i, o) = (
        plan.buffer_elements(0, padded),
        plan.buffer_elements(1, padded),
    );
    if plan.inplace {
        let lay = in_place_layout(plan.collective.0, rank, padded, i, o);
        PaddedStaging {
            len: lay.len,
            input_at: lay.input_at,
            output_at: lay.output_at,
        }
    } else {
        PaddedStaging {
            len: i.saturating_add(o),
            input_at: 0,
            output_at: i,
        }
    }
}

/// A strided copy in elements: `rows` rows of `len` elements, row `i` from
/// `src + i * src_pitch` to `dst + i * dst_pitch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Strided {
    pub src: u64,
    pub dst: u64,
    pub len: u64,
    pub rows: u64,
    pub src_pitch: u64,
    pub dst_pitch: u64,
}

impl Strided {
    /// The same copy the other way.
    pub fn reversed(self) -> Strided {
        Strided {
            src: self.dst,
            dst: self.src,
            src_pitch: self.dst_pitch,
            dst_pitch: self.src_pitch,
            ..self
        }
    }

    /// Each row's (source, destination) offsets.
    pub fn row_offsets(self) -> impl Iterator<Item = (u64, u64)> {
        (0..self.rows).map(move |i| (self.src + i * self.src_pitch, self.dst + i * self.dst_pitch))
    }
}

/// The copies that move a buffer of `chunks` plan chunks from its layout at `count` to its
/// padded layout (every chunk `ceil(count / k)` elements, [`padded_count`]), both from
/// offset 0; [`Strided::reversed`] copies back. Chunks of one class lie at the same stride
/// in both layouts (a slice apart), so each class is one strided copy; the classes below the
/// remainder are each other's neighbours in both, so they share one. Empty chunks copy
/// nothing.
pub fn pad_copies(count: u64, k: u64, chunks: u64) -> Vec<Strided> {
    let k = k.max(1);
    let padded = padded_count(count, k);
    let width = padded / k;
    let e = count % k;
    // Chunks of class j in a buffer of `chunks` chunks.
    let rows = |j: u64| chunks.saturating_sub(j).div_ceil(k);
    let class = |j: u64, classes: u64| Strided {
        src: chunk_start(count, k, j),
        dst: j * width,
        len: chunk_start(count, k, j + classes) - chunk_start(count, k, j),
        rows: rows(j),
        src_pitch: count,
        dst_pitch: padded,
    };
    if e == 0 {
        // Both layouts are the same.
        let len = chunk_start(count, k, chunks);
        return (len > 0)
            .then_some(Strided {
                src: 0,
                dst: 0,
                len,
                rows: 1,
                src_pitch: 0,
                dst_pitch: 0,
            })
            .into_iter()
            .collect();
    }
    let mut out = Vec::new();
    let mut j = 0;
    // The long classes together, when every slice has all of them.
    if e > 1 && rows(0) == rows(e - 1) {
        out.push(class(0, e));
        j = e;
    }
    while j < k.min(chunks) {
        out.push(class(j, 1));
        j += 1;
    }
    out.retain(|c| c.len > 0 && c.rows > 0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::testing::Builder;
    use crate::plan::{OpKind, Slice, chunk_range};

    /// Elements of chunk `c` at `count` (chunk factor `k`).
    fn size(count: u64, k: u64, c: u64) -> u64 {
        chunk_range(count, k, c % k, c % k + 1).count() as u64
    }

    #[test]
    fn spans_are_the_remainders_where_two_runs_of_chunks_differ() {
        // Against the sizes themselves, for every pair of runs up to k = 7.
        for k in 1..=7u64 {
            for a in 0..2 * k {
                for b in 0..2 * k {
                    for n in 1..=k + 2 {
                        let mut spans = Vec::new();
                        mismatch_spans(k, a, b, n, &mut spans);
                        for count in [0, 1, k - 1, k, 3 * k, 3 * k + 1, 5 * k + k / 2, 7 * k - 1] {
                            let differ =
                                (0..n).any(|i| size(count, k, a + i) != size(count, k, b + i));
                            let e = count % k;
                            let found = spans.iter().any(|r| r.contains(&e));
                            assert_eq!(
                                found, differ,
                                "k {k} a {a} b {b} n {n} count {count}: {spans:?}"
                            );
                            assert!(
                                spans
                                    .iter()
                                    .all(|r| r.start >= 1 && r.end <= k && r.start < r.end)
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_plan_that_keeps_classes_never_pads() {
        // Chunk factor 4: input chunks 0..4 to scratch chunks 4..8 and back, and a message
        // from scratch chunk 5 into output chunk 1: every move keeps its class.
        let mut b = Builder::new(2);
        b.chunk_factor(4);
        let tmp = b.scratch("tmp", 8);
        let s = b.block(0, 0, Some(1), None);
        let r = b.block(1, 0, None, Some(0));
        b.op_with(
            0,
            s,
            OpKind::Copy,
            Some(Slice(0, 0)),
            Some(Slice(tmp, 4)),
            4,
            &[],
        );
        b.op_with(0, s, OpKind::Send, Some(Slice(tmp, 5)), None, 1, &[]);
        b.op_with(1, r, OpKind::Recv, None, Some(Slice(1, 1)), 1, &[]);
        let plan = b.build();
        let p = Padding::of(&plan);
        assert!(!p.ever());
        assert!(p.mismatched().is_empty());
        for count in 0..20 {
            assert!(!p.needed(count));
            assert_eq!(p.run_count(count), count);
            assert_eq!(p.staging_elems(&plan, count), 0);
        }
        assert_eq!(p.max_staging_elems(&plan, 1 << 20), 0);
    }

    #[test]
    fn a_plan_pads_where_a_copy_or_a_message_changes_class() {
        // Chunk factor 4. A local copy of input chunk 0 to scratch chunk 2 differs at
        // remainders 1 and 2; a message from input chunk 3 into output chunk 1 at 2 and 3;
        // the receiving side of each message counts, not its own block's other ops.
        let mut b = Builder::new(2);
        b.chunk_factor(4);
        let tmp = b.scratch("tmp", 4);
        let s = b.block(0, 0, Some(1), None);
        let l = b.block(0, 1, None, None);
        let r = b.block(1, 0, None, Some(0));
        b.op_with(
            0,
            l,
            OpKind::Copy,
            Some(Slice(0, 0)),
            Some(Slice(tmp, 2)),
            1,
            &[],
        );
        let plan_copy = b.build();
        let p = Padding::of(&plan_copy);
        assert_eq!(p.mismatched(), std::slice::from_ref(&(1..3)));
        b.op_with(0, s, OpKind::Send, Some(Slice(0, 3)), None, 1, &[]);
        b.op_with(1, r, OpKind::Recv, None, Some(Slice(1, 1)), 1, &[]);
        let plan = b.build();
        let p = Padding::of(&plan);
        assert_eq!(p.chunk_factor(), 4);
        assert_eq!(p.mismatched(), std::slice::from_ref(&(1..4)));
        assert!(p.ever());
        // Multiples of 4 run exact, every other count padded to the next multiple.
        for count in 0..40u64 {
            let padded = count % 4 != 0;
            assert_eq!(p.needed(count), padded, "count {count}");
            assert_eq!(
                p.run_count(count),
                if padded { count.div_ceil(4) * 4 } else { count }
            );
        }
        // Out of place: padded input (4 chunks) then padded output (4 chunks).
        assert_eq!(p.staging_elems(&plan, 9), 12 + 12);
        assert_eq!(p.staging_elems(&plan, 8), 0);
        assert_eq!(p.max_staging_elems(&plan, 9), 24);
        assert_eq!(
            padded_staging(&plan, 1, 12),
            PaddedStaging {
                len: 24,
                input_at: 0,
                output_at: 12
            }
        );
        // The plan's scratch bytes: 4 chunks at the largest size (3 elements at count 9),
        // plus the padded staging.
        assert_eq!(plan.scratch_bytes(9, 4), (4 * 3 + 24) * 4);
        assert_eq!(plan.scratch_bytes(8, 4), 4 * 2 * 4);
        assert_eq!(plan.scratch_elements(2, 9), 12);
    }

    #[test]
    fn a_message_pads_only_where_its_two_ends_differ() {
        // Chunk factor 3: a send of input chunk 0 into output chunk 1 differs only at
        // remainder 1 (sizes b+1, b); at remainder 2 both are b+1.
        let mut b = Builder::new(2);
        b.chunk_factor(3);
        let s = b.block(0, 0, Some(1), None);
        let r = b.block(1, 0, None, Some(0));
        b.op_with(0, s, OpKind::Send, Some(Slice(0, 0)), None, 1, &[]);
        b.op_with(1, r, OpKind::Recv, None, Some(Slice(1, 1)), 1, &[]);
        let p = Padding::of(&b.build());
        assert_eq!(p.mismatched(), std::slice::from_ref(&(1..2)));
        assert!(p.needed(7) && !p.needed(8) && !p.needed(9));
        assert_eq!(p.run_count(7), 9);
        assert_eq!(p.run_count(8), 8);
    }

    #[test]
    fn every_peer_of_a_block_has_its_own_message() {
        // Chunk factor 3: rank 0 sends input chunk 0 to ranks 1 and 2 in one op; rank 1
        // lands it on output chunk 0 (same class), rank 2 on output chunk 1 (differs at
        // remainder 1). Then rank 0 combines one message from each on input chunk 0: rank
        // 1's is its chunk 0, rank 2's its chunk 2 (differs at remainder 2).
        let mut b = Builder::new(3);
        b.chunk_factor(3);
        let head = b.block(0, 0, Some(1), Some(1));
        b.op_with(0, head, OpKind::Send, Some(Slice(0, 0)), None, 1, &[]);
        b.op_with(
            0,
            head,
            OpKind::RecvReduceCopy,
            Some(Slice(0, 0)),
            Some(Slice(0, 0)),
            1,
            &[],
        );
        for (leaf, at, from) in [(1, 0, 0), (2, 1, 2)] {
            let x = b.block(leaf, 0, Some(0), Some(0));
            b.op_with(leaf, x, OpKind::Recv, None, Some(Slice(1, at)), 1, &[]);
            b.op_with(leaf, x, OpKind::Send, Some(Slice(0, from)), None, 1, &[]);
        }
        let mut plan = b.unchecked();
        plan.gpus[0].blocks[0].send_also = vec![2];
        plan.gpus[0].blocks[0].recv_also = vec![2];
        plan.validate().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            Padding::of(&plan).mismatched(),
            std::slice::from_ref(&(1..3))
        );
        // Only rank 2's messages change class: with it as rank 1's twin, nothing pads.
        let ops = &mut plan.gpus[2].blocks[0].ops;
        ops[0].dst = Some(Slice(1, 0));
        ops[1].src = Some(Slice(0, 0));
        assert!(!Padding::of(&plan).ever());
    }

    #[test]
    fn padded_staging_of_an_in_place_plan_follows_nccl() {
        let mut b = Builder::new(4);
        b.chunk_factor(2);
        let mut plan = b.build();
        plan.inplace = true;
        plan.collective = crate::plan::Collective(coll_lang::builtins::CollectiveKind::AllGather);
        plan.buffers[0].chunks = 2;
        plan.buffers[1].chunks = 8;
        // Rank 3's input is its slice of the one buffer.
        assert_eq!(
            padded_staging(&plan, 3, 6),
            PaddedStaging {
                len: 24,
                input_at: 18,
                output_at: 0
            }
        );
    }

    #[test]
    fn a_padded_call_is_of_the_plans_own_placement() {
        // Whatever the collective, placement and rank, the padded staging places with no
        // copies and no placement staging, at the buffers it names.
        use crate::gpu::placement::{CallShape, rank_call};
        use coll_lang::builtins::CollectiveKind::*;
        let n = 4u32;
        for kind in [
            AllReduce,
            AllGather,
            ReduceScatter,
            AllToAll,
            Broadcast,
            Reduce,
        ] {
            for inplace in [false, true] {
                let mut plan = Builder::new(n).chunk_factor(3).build();
                plan.collective = crate::plan::Collective(kind);
                plan.inplace = inplace;
                let slices = |b: u64| match (kind, b) {
                    (AllGather, 1) | (ReduceScatter, 0) | (AllToAll, _) => u64::from(n),
                    _ => 1,
                };
                plan.buffers[0].chunks = 3 * slices(0);
                plan.buffers[1].chunks = 3 * slices(1);
                let padded = 12;
                let shape = CallShape {
                    count: padded,
                    esize: 2,
                    in_elems: plan.buffer_elements(0, padded),
                    out_elems: plan.buffer_elements(1, padded),
                };
                for rank in 0..n {
                    let at = padded_staging(&plan, rank, padded);
                    assert!(at.input_at + shape.in_elems <= at.len);
                    assert!(at.output_at + shape.out_elems <= at.len);
                    let base = 1 << 20;
                    let bufs = (base + at.input_at * 2, base + at.output_at * 2);
                    let call = rank_call(&plan, rank, &shape, bufs, false, None)
                        .unwrap_or_else(|e| panic!("{kind:?} inplace={inplace}: {e}"));
                    assert_eq!(call.before, None, "{kind:?} inplace={inplace} rank {rank}");
                    assert_eq!(call.after, None);
                    assert_eq!((call.input, call.output), bufs);
                }
            }
        }
    }

    /// Applies `copies` from `src` into `dst`.
    fn apply(copies: &[Strided], src: &[u64], dst: &mut [u64]) {
        for c in copies {
            for (s, d) in c.row_offsets() {
                let (s, d, n) = (s as usize, d as usize, c.len as usize);
                dst[d..d + n].copy_from_slice(&src[s..s + n]);
            }
        }
    }

    #[test]
    fn pad_copies_put_each_chunk_at_the_start_of_its_padded_chunk_and_back() {
        for k in 1..=6u64 {
            for chunks in [1, k, 2 * k, 3 * k + 1, 4 * k - 1] {
                for count in 0..4 * k + 3 {
                    let padded = padded_count(count, k);
                    assert_eq!(padded % k, 0);
                    assert!(padded >= count && padded < count + k);
                    let width = padded / k;
                    let len = chunk_start(count, k, chunks) as usize;
                    let user: Vec<u64> = (1..=len as u64).collect();
                    let copies = pad_copies(count, k, chunks);
                    let mut pad = vec![0; (chunks * width) as usize];
                    apply(&copies, &user, &mut pad);
                    for c in 0..chunks {
                        let from = chunk_start(count, k, c);
                        let n = chunk_start(count, k, c + 1) - from;
                        for p in 0..width {
                            let want = if p < n { user[(from + p) as usize] } else { 0 };
                            assert_eq!(
                                pad[(c * width + p) as usize],
                                want,
                                "k {k} chunks {chunks} count {count} chunk {c} at {p}"
                            );
                        }
                    }
                    let back: Vec<Strided> = copies.iter().map(|c| c.reversed()).collect();
                    let mut again = vec![0; len];
                    apply(&back, &pad, &mut again);
                    assert_eq!(again, user, "k {k} chunks {chunks} count {count}");
                    // One copy per class at most, and one for the long classes together.
                    let e = count % k;
                    if e > 1 && chunks % k == 0 {
                        assert_eq!(copies.len() as u64, 1 + if count >= k { k - e } else { 0 });
                    }
                }
            }
        }
    }
}
