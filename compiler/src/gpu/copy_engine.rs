//! Copy-engine eligibility: which calls of a plan are nothing but copies of data that is
//! final when the call starts (an all-to-all, a sendrecv, a broadcast or an all-gather of two
//! ranks), so that an executor may run them as plain copies between the ranks' buffers, on
//! the GPUs' copy engines instead of an interpreter kernel's stores, and those copies in
//! bytes for one call ([`extents`]).
//!
//! A plan qualifies, for one placement of a call, when every op is a send, receive, copy or
//! copy-send between `input` and `output`; every message pairs a send with a receive of the
//! same chunk count cut alike (as [`direct`](super::direct) pairs them); and on each rank no
//! element an op reads is written by any op of the rank, and no element is written twice.
//! Then every op's data is final at the call's start and every destination is written once
//! and read by nothing of the call: the copies may run all at once, in any order, once every
//! rank has reached the call, and the call is done once every copy is. An op's chunks are
//! consecutive, so each is one contiguous range of elements ([`CeCopy`]).
//!
//! Invariant of [`CeCopy`]: `src` and `dst` name `input` (0) or `output` (1), and the ranges
//! they name hold the same number of elements at every count.

use super::{messages, op_at, phys};
use crate::plan::{OpKind, Plan, chunk_start};
use std::collections::HashSet;

/// One copy of a copy-engine call: chunks `[src.1, src.1 + chunks)` of buffer `src.0` of
/// rank `from` to chunks `[dst.1, ..)` of buffer `dst.0` of rank `to` (`from == to`: a local
/// copy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CeCopy {
    pub from: u32,
    pub to: u32,
    pub src: (u8, u64),
    pub dst: (u8, u64),
    pub chunks: u32,
}

/// The copies that make up a call of `plan` when it qualifies (see the module docs) with
/// `input` and `output` apart (`aliased` false) or aliased in NCCL's in-place layout;
/// `None` otherwise. Copies of a chunk onto itself are left out.
pub fn ce_copies(plan: &Plan, aliased: bool) -> Option<Vec<CeCopy>> {
    let aliased = aliased || plan.inplace;
    let k = plan.chunk_factor;
    let phys = |rank, s, c| phys(plan, aliased, rank, s, c);
    let mut out = Vec::new();
    // Per rank: elements read, elements written.
    let mut reads: Vec<HashSet<(usize, u64)>> = vec![HashSet::new(); plan.gpus.len()];
    let mut writes: Vec<HashSet<(usize, u64)>> = vec![HashSet::new(); plan.gpus.len()];
    for (r, rp) in plan.gpus.iter().enumerate() {
        let rank = r as u32;
        for b in &rp.blocks {
            for op in &b.ops {
                let local = match op.kind {
                    OpKind::Send | OpKind::Recv => None,
                    OpKind::Copy | OpKind::CopySend => Some((op.src?, op.dst?)),
                    _ => return None,
                };
                if op.kind.needs_src() {
                    let s = op.src?;
                    if s.buffer() > 1 {
                        return None;
                    }
                    reads[r].extend((0..u64::from(op.count)).map(|c| phys(rank, s, c)));
                }
                let written = match (op.kind, local) {
                    (OpKind::Recv, _) => op.dst,
                    // A copy onto itself writes nothing (the kernel skips it too).
                    (_, Some((s, d))) if phys(rank, s, 0) != phys(rank, d, 0) => {
                        if s.offset() % k != d.offset() % k {
                            return None;
                        }
                        out.push(CeCopy {
                            from: rank,
                            to: rank,
                            src: (s.buffer() as u8, s.offset()),
                            dst: (d.buffer() as u8, d.offset()),
                            chunks: op.count,
                        });
                        Some(d)
                    }
                    _ => None,
                };
                if let Some(d) = written {
                    if d.buffer() > 1 {
                        return None;
                    }
                    for c in 0..u64::from(op.count) {
                        if !writes[r].insert(phys(rank, d, c)) {
                            return None;
                        }
                    }
                }
            }
        }
    }
    if reads
        .iter()
        .zip(&writes)
        .any(|(rd, wr)| !rd.is_disjoint(wr))
    {
        return None;
    }
    // Every send must have its receive.
    let pairs = messages(plan);
    if pairs.len() != plan.sending_ops() {
        return None;
    }
    for (s, r) in pairs {
        let (sop, rop) = (op_at(plan, s)?, op_at(plan, r)?);
        let (src, dst) = (sop.src?, rop.dst?);
        if rop.kind != OpKind::Recv
            || sop.count != rop.count
            || src.offset() % k != dst.offset() % k
        {
            return None;
        }
        out.push(CeCopy {
            from: s.0,
            to: r.0,
            src: (src.buffer() as u8, src.offset()),
            dst: (dst.buffer() as u8, dst.offset()),
            chunks: sop.count,
        });
    }
    Some(out)
}

/// Whether each of `gpus` GPUs (`gpu_of` a rank's) copies to at most one other GPU.
pub fn one_peer_gpu(copies: &[CeCopy], gpus: u32, gpu_of: impl Fn(u32) -> u32) -> bool {
    (0..gpus).all(|g| {
        let peers: HashSet<u32> = copies
            .iter()
            .filter(|c| gpu_of(c.from) == g && gpu_of(c.to) != g)
            .map(|c| gpu_of(c.to))
            .collect();
        peers.len() <= 1
    })
}

/// One copy of a call in bytes: from `src` to `dst`, enqueued on the GPU of rank `from`;
/// `to` is the rank written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub from: u32,
    pub to: u32,
    pub src: u64,
    pub dst: u64,
    pub bytes: u64,
}

/// The copies of a call of `count` elements of `esize` bytes, with each rank's `input` and
/// `output` at `bufs[rank]` (every rank's), as byte extents; copies that continue one another
/// (the instances of one exchange) are merged, and empty ones left out. `k` is the plan's
/// chunk factor. Each rank's copies come in shift order, to rank + 1 first, then + 2, ...
/// (its own last): a GPU's copies run one after another on its stream, and in that order
/// every step is a permutation, as in an all-to-all, so no rank receives from all at once.
pub fn extents(
    copies: &[CeCopy],
    k: u64,
    count: u64,
    esize: u64,
    bufs: &[(u64, u64)],
) -> Vec<Extent> {
    let at = |rank: u32, (buffer, chunk): (u8, u64)| {
        let base = bufs
            .get(rank as usize)
            .map_or(0, |&(i, o)| if buffer == 0 { i } else { o });
        base + chunk_start(count, k, chunk) * esize
    };
    let mut v: Vec<Extent> = copies
        .iter()
        .map(|c| Extent {
            from: c.from,
            to: c.to,
            src: at(c.from, c.src),
            dst: at(c.to, c.dst),
            bytes: (chunk_start(count, k, c.src.1 + u64::from(c.chunks))
                - chunk_start(count, k, c.src.1))
                * esize,
        })
        .filter(|e| e.bytes > 0 && e.src != e.dst)
        .collect();
    let n = bufs.len().max(1) as u32;
    let shift = |e: &Extent| (e.to + n - e.from % n) % n;
    v.sort_by_key(|e| (e.from, (shift(e) + n - 1) % n, e.src, e.dst));
    let mut out: Vec<Extent> = Vec::with_capacity(v.len());
    for e in v {
        match out.last_mut() {
            Some(l)
                if (l.from, l.to) == (e.from, e.to)
                    && l.src + l.bytes == e.src
                    && l.dst + l.bytes == e.dst =>
            {
                l.bytes += e.bytes;
            }
            _ => out.push(e),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testing::shipped_plan as plan;
    use super::*;

    #[test]
    fn alltoall_is_one_copy_per_pair_and_its_own_chunk() {
        for n in [2u32, 4] {
            let p = plan("alltoall.coll", n as usize);
            let mut c = ce_copies(&p, false).expect("alltoall qualifies out of place");
            c.sort_by_key(|c| (c.from, c.to));
            // Rank r's chunk q of input goes to chunk r of q's output, its own included.
            let want: Vec<CeCopy> = (0..n)
                .flat_map(|r| {
                    (0..n).map(move |q| CeCopy {
                        from: r,
                        to: q,
                        src: (0, u64::from(q)),
                        dst: (1, u64::from(r)),
                        chunks: 1,
                    })
                })
                .collect();
            assert_eq!(c, want, "n = {n}");
            // In place a rank's chunk is sent and received into: it does not qualify.
            assert_eq!(ce_copies(&p, true), None, "n = {n}");
        }
    }

    #[test]
    fn two_rank_broadcast_allgather_and_sendrecv_qualify_forwarding_and_reducing_do_not() {
        for f in [
            "broadcast_ring.coll",
            "allgather_ring.coll",
            "sendrecv.coll",
        ] {
            let p = plan(f, 2);
            assert!(ce_copies(&p, false).is_some(), "{f}");
        }
        // In place, the broadcast root's copy onto itself drops out: one copy is left.
        let p = plan("broadcast_ring.coll", 2);
        assert_eq!(ce_copies(&p, true).map(|c| c.len()), Some(1));
        // Three ranks of a ring forward what they receive; allreduce reduces.
        for (f, n) in [
            ("broadcast_ring.coll", 3),
            ("allgather_ring.coll", 3),
            ("allreduce_ring.coll", 2),
            ("allreduce_allpairs.coll", 2),
            ("reducescatter_ring.coll", 2),
        ] {
            assert_eq!(ce_copies(&plan(f, n), false), None, "{f} n = {n}");
        }
    }

    #[test]
    fn each_rank_copies_in_shift_order_and_gpus_count_their_peers() {
        let p = plan("alltoall.coll", 4);
        let c = ce_copies(&p, false).expect("qualifies");
        let bufs: Vec<(u64, u64)> = (0..4u64)
            .map(|r| (r << 32, (r << 32) + (1 << 20)))
            .collect();
        let e = extents(&c, 1, 1000, 4, &bufs);
        let order: Vec<(u32, u32)> = e.iter().map(|x| (x.from, x.to)).collect();
        assert_eq!(
            order,
            vec![
                (0, 1),
                (0, 2),
                (0, 3),
                (0, 0),
                (1, 2),
                (1, 3),
                (1, 0),
                (1, 1),
                (2, 3),
                (2, 0),
                (2, 1),
                (2, 2),
                (3, 0),
                (3, 1),
                (3, 2),
                (3, 3)
            ]
        );
        // One GPU per rank: three peers each. Two ranks on each of two GPUs: one peer GPU.
        assert!(!one_peer_gpu(&c, 4, |r| r));
        assert!(one_peer_gpu(&c, 2, |r| r / 2));
        let two = ce_copies(&plan("alltoall.coll", 2), false).expect("qualifies");
        assert!(one_peer_gpu(&two, 2, |r| r));
    }

    #[test]
    fn extents_are_bytes_of_whole_ops_and_instances_merge() {
        // Two ranks, k = 2 (one op per instance half), count 10 f32: chunks of 5 elements.
        let cp = |from, to, src, dst, chunks| CeCopy {
            from,
            to,
            src,
            dst,
            chunks,
        };
        // The last copies a chunk onto itself: left out.
        let copies = [
            cp(0, 1, (0, 2), (1, 0), 1),
            cp(0, 1, (0, 3), (1, 1), 1),
            cp(1, 1, (0, 0), (0, 0), 2),
        ];
        let bufs = [(0x1000, 0x2000), (0x9000, 0xa000)];
        let e = extents(&copies, 2, 10, 4, &bufs);
        assert_eq!(
            e,
            vec![Extent {
                from: 0,
                to: 1,
                src: 0x1000 + 10 * 4,
                dst: 0xa000,
                bytes: 40
            }]
        );
        // Uneven chunks (count 11, k 2: 6 and 5 elements): sizes follow the chunk positions.
        let e = extents(&copies[..1], 2, 11, 4, &bufs);
        assert_eq!(e[0].bytes, 24);
        assert_eq!(e[0].src, 0x1000 + 11 * 4);
    }
}
