//! A plan encoded as one GPU's program: the instruction arrays the interpreter kernel walks
//! (`DBlock`, `DOp`, `DDep`, `DConn`, `RankCtx`, in [`super::abi`]'s layout), from the
//! plan, its direct-message sets ([`super::direct`]) and the device addresses of the
//! regions the layout placed ([`super::layout`]). Pure: tested without a GPU, on fake
//! addresses.
//!
//! Invariants of a [`Program`]:
//! - Its ranks are the plan ranks on the GPU, in plan order; `ctxs[slot]` is rank
//!   `local_ranks[slot]`'s.
//! - Each plan block of each rank, in order, has `nsub` consecutive entries in `blocks`
//!   (sub-CTAs `0..nsub`); its ops are `ops[op_start .. op_start + nops]`, shared by its
//!   sub-CTAs; an op's dependencies are `deps[dep_start .. dep_start + ndeps]`, naming
//!   (block, op) of the same rank; `prog_base` is the index of the rank's first entry.
//! - Every `send_conn`/`recv_conn` other than [`NO_CONN`](super::abi::NO_CONN) indexes
//!   `conns`, one entry per end, in block order; a connection's two ends (on the sender's and
//!   the receiver's GPU) name the same `slots`, `sent`, `acked` and `ll` addresses.
//! - A block side's ends are contiguous: `nsend_conns` of them from `send_conn`, one per peer
//!   in [`Block::send_peers`](coll_compiler::plan::Block::send_peers) order (likewise
//!   `nrecv_conns` from `recv_conn`, [`Block::recv_peers`](coll_compiler::plan::Block::recv_peers)),
//!   0 and [`NO_CONN`](super::abi::NO_CONN) without a peer, at most
//!   [`MAX_BLOCK_CONNS`](super::abi::MAX_BLOCK_CONNS); every end starts at position 0, so the
//!   ends of one side stay at equal positions (the kernel's several-peer path relies on it).
//! - No op of a block of several peers carries a direct flag ([`super::direct`] places none
//!   there, checked here too): the kernel runs such blocks without direct stores.
//! - `op_index[i]` is (rank, block, op) of `ops[i]`; the array lengths are the layout's
//!   [`ArrayCounts`](super::layout::ArrayCounts) for the GPU.

use super::abi::{self, DBlock, DConn, DDep, DOp, MAX_BUFFERS, OpCode, RankCtx};
use super::direct::{self, DirectOps};
use super::layout::ConnKey;
use super::proxy::Side;
use super::{ChunkPos, Spread};
use crate::error::ExecError;
use coll_compiler::plan::{Block, Plan};
use std::collections::{HashMap, HashSet};

/// The device addresses of one connection's regions ([`super::layout::ConnPlaces`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnAddrs {
    pub slots: u64,
    pub sent: u64,
    pub acked: u64,
    pub ll: u64,
}

/// The kernel's `(slots, sent, acked)` of each end in this process of a connection the host
/// proxy forwards.
pub type NetViews = HashMap<(ConnKey, Side), (u64, u64, u64)>;

/// The device addresses a GPU's program points at.
#[derive(Clone, Debug, Default)]
pub struct Addrs {
    /// Every connection's regions in the GPUs' arenas.
    pub conns: HashMap<ConnKey, ConnAddrs>,
    /// Ends of connections the host proxy forwards, in pinned host memory: the kernel's
    /// `(slots, sent, acked)` ([`super::proxy::NetEnd::kernel_view`]). They take the place
    /// of `conns` for their side.
    pub net: NetViews,
    /// Per plan rank on the GPU: its scratch buffers' addresses (buffers 2..; 0 elsewhere).
    pub scratch: HashMap<u32, [u64; MAX_BUFFERS]>,
}

impl Addrs {
    /// The kernel's entry for one end of connection `key`.
    fn end(&self, key: ConnKey, side: Side) -> Result<DConn, ExecError> {
        // Proxied ends have no LL lines: calls of plans with any stay bulk
        // ([`super::CudaExecutor::ll_max`]). Nor `ready`: such connections never go direct.
        let (slots, sent, acked, ll, ready) = match self.net.get(&(key, side)) {
            Some(&(slots, sent, acked)) => (slots, sent, acked, 0, 0),
            None => self
                .conns
                .get(&key)
                .map(|m| (m.slots, m.sent, m.acked, m.ll, m.acked + 8))
                .ok_or_else(|| ExecError::Gpu("missing connection".into()))?,
        };
        Ok(DConn {
            slots,
            sent,
            acked,
            pos: 0,
            ll,
            seen: 0,
            ready,
            peer: key.1,
            pad: 0,
        })
    }
}

/// The messages that skip staging, for either placement of a call ([`direct`]).
#[derive(Clone, Debug, Default)]
pub struct DirectSets {
    /// With `input` and `output` apart.
    pub apart: DirectOps,
    /// With them aliased.
    pub aliased: DirectOps,
}

impl DirectSets {
    /// The op's direct flags (`DOP_*`) and its send's target chunk in the receiver.
    fn flags(&self, at: direct::OpAt) -> (u32, u64) {
        let (apart, aliased) = (&self.apart, &self.aliased);
        let mut f = 0;
        let mut off = 0;
        // A send's target is its receive's first chunk, the same in both sets.
        if let Some(t) = apart.sends.get(&at).or(aliased.sends.get(&at)) {
            if t.buffer == 1 {
                f |= abi::DOP_DIRECT_TO_OUTPUT;
            }
            off = t.offset;
        }
        if apart.sends.contains_key(&at) {
            f |= abi::DOP_DIRECT_SEND_APART;
        }
        if aliased.sends.contains_key(&at) {
            f |= abi::DOP_DIRECT_SEND_ALIASED;
        }
        for (set, bit) in [
            (apart, abi::DOP_SWAP_APART),
            (aliased, abi::DOP_SWAP_ALIASED),
        ] {
            if let Some(&half) = set.swaps.get(&at) {
                f |= bit;
                if half == direct::Half::Second {
                    f |= abi::DOP_SWAP_SECOND;
                }
            }
        }
        if apart.recvs.contains_key(&at) {
            f |= abi::DOP_DIRECT_RECV_APART;
        }
        if aliased.recvs.contains_key(&at) {
            f |= abi::DOP_DIRECT_RECV_ALIASED;
        }
        (f, off)
    }
}

/// One GPU's program: what is uploaded into its arena, and what the host keeps to launch it
/// and read its trace.
#[derive(Clone, Debug, Default)]
pub struct Program {
    pub blocks: Vec<DBlock>,
    pub ops: Vec<DOp>,
    pub deps: Vec<DDep>,
    pub conns: Vec<DConn>,
    pub ctxs: Vec<RankCtx>,
    /// (rank, block, op) of each entry of `ops`.
    pub op_index: Vec<(u32, u32, u32)>,
    /// Plan ranks on this GPU, in slot order.
    pub local_ranks: Vec<u32>,
    /// Plan blocks on this GPU (`blocks.len() / nsub`).
    pub plan_blocks: u32,
    /// Whether any op waits on another block's progress.
    pub needs_progress: bool,
    /// Whether a block has several peers on a side: calls launch the kernel's `_multi`
    /// entries ([`abi::MODE_SEVERAL`]).
    pub several: bool,
}

// A block side's end count travels in a u16 (DBlock.nsend_conns, nrecv_conns).
const _: () = assert!(abi::MAX_BLOCK_CONNS <= u16::MAX as usize);

/// The connection ends of each sub-CTA of block `b` of rank `r`, (send, receive): one per
/// peer of the side; an error when a side has more than the kernel's
/// [`MAX_BLOCK_CONNS`](abi::MAX_BLOCK_CONNS) (its table of a block's ends).
pub fn block_ends(r: u32, b: &Block) -> Result<(u16, u16), ExecError> {
    let (send, recv) = (b.send_peers().count(), b.recv_peers().count());
    let most = send.max(recv);
    if most > abi::MAX_BLOCK_CONNS {
        return Err(ExecError::Gpu(format!(
            "rank {r} block {}: {most} peers on one side; the GPU kernel takes at most {}",
            b.id,
            abi::MAX_BLOCK_CONNS
        )));
    }
    // Both at most MAX_BLOCK_CONNS, far below u16::MAX.
    Ok((send as u16, recv as u16))
}

/// Encodes the ranks of `plan` that `spread` puts on GPU `gi`, at `nsub` sub-CTAs per block.
pub fn program(
    plan: &Plan,
    spread: &Spread,
    gi: usize,
    nsub: u32,
    direct: &DirectSets,
    addrs: &Addrs,
) -> Result<Program, ExecError> {
    let local_ranks: Vec<u32> = (0..plan.ranks)
        .filter(|&p| spread.gpu(p) as usize == gi)
        .collect();
    let mut p = Program::default();
    for (slot, &r) in local_ranks.iter().enumerate() {
        let rp = plan
            .gpus
            .get(r as usize)
            .ok_or_else(|| ExecError::Gpu(format!("rank {r} is not in the plan")))?;
        // This rank's block 0, sub 0, in the block array (and progress array).
        let prog_base = p.blocks.len() as u32;
        // (block, op) pairs some op of another block waits on.
        let awaited: HashSet<(u32, u32)> = rp
            .blocks
            .iter()
            .flat_map(|b| {
                b.ops.iter().flat_map(move |op| {
                    op.deps
                        .iter()
                        .filter(move |d| d.block() != b.id)
                        .map(|d| (d.block(), d.op()))
                })
            })
            .collect();
        for b in &rp.blocks {
            let op_start = p.ops.len() as u32;
            // Direct releases of this block, per placement: at call start, or per
            // iteration before the first op and after each.
            let tables = [direct.apart.releases(r, b), direct.aliased.releases(r, b)];
            let half = |t: &direct::ReleaseTable, j: Option<usize>| match (t, j) {
                (None, _) => abi::RELEASE_AT_START,
                (Some((start, _)), None) => *start,
                (Some((_, after)), Some(j)) => after.get(j).copied().unwrap_or(0),
            };
            let packed = |j: Option<usize>| {
                half(&tables[0], j) | (half(&tables[1], j) << abi::REL_ALIASED_SHIFT)
            };
            for (oi, op) in b.ops.iter().enumerate() {
                p.op_index.push((r, b.id, oi as u32));
                let (src_buf, src_off) = op.src.map_or((0, 0), |s| (s.buffer() as u8, s.offset()));
                let (dst_buf, dst_off) = op.dst.map_or((0, 0), |s| (s.buffer() as u8, s.offset()));
                let (dflags, peer_off) = direct.flags((r, b.id, oi as u32));
                if b.several_peers() && dflags != 0 {
                    return Err(ExecError::Gpu(format!(
                        "rank {r} block {} op {oi}: a direct message on a block of several \
                         peers, which the GPU kernel runs without direct stores",
                        b.id
                    )));
                }
                let pos = |off: u64| {
                    ChunkPos::of(off, plan.chunk_factor).ok_or_else(|| {
                        ExecError::Gpu(format!(
                            "rank {r} block {} op {oi}: chunk {off} is beyond the GPU \
                             kernel's 32-bit slice index",
                            b.id
                        ))
                    })
                };
                let awaited = if awaited.contains(&(b.id, oi as u32)) {
                    abi::DOP_AWAITED
                } else {
                    0
                };
                p.ops.push(DOp {
                    kind: OpCode::from(op.kind).code(),
                    src_buf,
                    dst_buf,
                    ndeps: op.deps.len().min(255) as u8,
                    count: op.count,
                    src: pos(src_off)?,
                    dst: pos(dst_off)?,
                    dep_start: p.deps.len() as u32,
                    flags: awaited | dflags,
                    peer: pos(peer_off)?,
                    rel: packed(Some(oi)),
                    pad: 0,
                });
                p.deps.extend(op.deps.iter().map(|d| DDep {
                    block: d.block(),
                    op: d.op(),
                }));
            }
            let (nsend_conns, nrecv_conns) = block_ends(r, b)?;
            for sub in 0..nsub {
                // One entry per end of a connection this sub-CTA uses, each side's together.
                let mut ends = |keys: &mut dyn Iterator<Item = ConnKey>,
                                side: Side|
                 -> Result<i32, ExecError> {
                    let first = p.conns.len() as i32;
                    let mut any = false;
                    for key in keys {
                        p.conns.push(addrs.end(key, side)?);
                        any = true;
                    }
                    Ok(if any { first } else { abi::NO_CONN })
                };
                let send_conn = ends(
                    &mut b.send_peers().map(|q| (r, q, b.channel, sub)),
                    Side::Send,
                )?;
                let recv_conn = ends(
                    &mut b.recv_peers().map(|q| (q, r, b.channel, sub)),
                    Side::Recv,
                )?;
                p.blocks.push(DBlock {
                    rank_slot: slot as u32,
                    block: b.id,
                    op_start,
                    nops: b.ops.len() as u32,
                    prog_base,
                    send_conn,
                    recv_conn,
                    sub,
                    nsub,
                    nrecv: b.ops.iter().filter(|o| o.kind.receives()).count() as u32,
                    rel_start: packed(None),
                    nsend_conns,
                    nrecv_conns,
                });
            }
        }
        // Scratch buffers of this rank, for the largest count; `input` and `output` come
        // with each call.
        p.ctxs.push(RankCtx {
            rank: r,
            base: addrs.scratch.get(&r).copied().unwrap_or_default(),
            ..RankCtx::default()
        });
    }
    p.plan_blocks = p.blocks.len() as u32 / nsub.max(1);
    p.needs_progress = p.ops.iter().any(|o| o.ndeps > 0);
    p.several = p
        .blocks
        .iter()
        .any(|b| b.nsend_conns > 1 || b.nrecv_conns > 1);
    p.local_ranks = local_ranks;
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::layout::Layout;
    use crate::cuda::shipped_plan;

    /// Fake addresses: every connection's regions at distinct numbers, scratch likewise.
    fn fake_addrs(plan: &Plan, layout: &Layout) -> Addrs {
        let mut a = Addrs::default();
        for (i, c) in layout.conns.iter().enumerate() {
            let base = (i as u64 + 1) << 32;
            a.conns.insert(
                c.key,
                ConnAddrs {
                    slots: base + c.slots.at,
                    sent: base + c.sent.at,
                    acked: base + c.acked.at,
                    ll: base + c.ll.at,
                },
            );
        }
        for r in 0..plan.ranks {
            let mut base = [0; MAX_BUFFERS];
            for (b, slot) in base.iter_mut().enumerate().skip(2) {
                *slot = (u64::from(r) << 40) | (b as u64) << 8;
            }
            a.scratch.insert(r, base);
        }
        a
    }

    #[test]
    fn a_shipped_ring_encodes_as_its_layout_counts_with_paired_connections() {
        let plan = shipped_plan("allreduce_ring.coll", 4);
        for (gpus, nsub) in [(4u32, 1u32), (2, 3), (1, 2)] {
            let sp = Spread::new(&plan, gpus, 0);
            let lay = Layout::new(&plan, &sp, nsub, crate::cuda::SLOT_BYTES, 4, 1 << 20, 0, 0);
            let addrs = fake_addrs(&plan, &lay);
            let progs: Vec<Program> = (0..gpus as usize)
                .map(|gi| program(&plan, &sp, gi, nsub, &DirectSets::default(), &addrs))
                .collect::<Result<_, _>>()
                .expect("encodes");
            let mut sends = HashMap::new();
            let mut recvs = HashMap::new();
            for (gi, p) in progs.iter().enumerate() {
                let c = lay.gpus[gi].counts;
                assert_eq!(p.blocks.len() as u64, c.blocks, "GPU {gi} of {gpus}");
                assert_eq!(p.ops.len() as u64, c.ops);
                assert_eq!(p.deps.len() as u64, c.deps);
                assert_eq!(p.conns.len() as u64, c.conns);
                assert_eq!(p.ctxs.len() as u64, c.ranks);
                assert_eq!(p.op_index.len(), p.ops.len());
                assert_eq!(p.plan_blocks * nsub, p.blocks.len() as u32);
                assert_eq!(p.local_ranks.len(), 4 / gpus as usize);
                for (slot, (ctx, &r)) in p.ctxs.iter().zip(&p.local_ranks).enumerate() {
                    assert_eq!(ctx.rank, r, "slot {slot}");
                    assert_eq!(ctx.base, addrs.scratch[&r]);
                }
                for (i, b) in p.blocks.iter().enumerate() {
                    let r = p.local_ranks[b.rank_slot as usize];
                    let pb = &plan.gpus[r as usize].blocks[b.block as usize];
                    assert_eq!(b.sub, i as u32 % nsub);
                    assert_eq!(b.nops as usize, pb.ops.len());
                    assert_eq!(p.blocks[b.prog_base as usize].rank_slot, b.rank_slot);
                    assert_eq!(p.blocks[b.prog_base as usize].sub, 0);
                    for (oi, op) in pb.ops.iter().enumerate() {
                        let d = &p.ops[(b.op_start as usize) + oi];
                        assert_eq!(
                            p.op_index[b.op_start as usize + oi],
                            (r, b.block, oi as u32)
                        );
                        assert_eq!(d.count, op.count);
                        assert_eq!(d.ndeps as usize, op.deps.len());
                        let deps = &p.deps[d.dep_start as usize..][..op.deps.len()];
                        for (dd, od) in deps.iter().zip(&op.deps) {
                            assert_eq!((dd.block, dd.op), (od.block(), od.op()));
                        }
                    }
                    let key = |peer: u32| (peer, pb.channel, b.sub);
                    if let Some(q) = pb.send_peer {
                        let e = p.conns[b.send_conn as usize];
                        assert_eq!(e.peer, q);
                        sends.insert((r, key(q)), e);
                    } else {
                        assert_eq!(b.send_conn, abi::NO_CONN);
                    }
                    if let Some(q) = pb.recv_peer {
                        let e = p.conns[b.recv_conn as usize];
                        assert_eq!(e.peer, r);
                        recvs.insert((q, key(r)), e);
                    } else {
                        assert_eq!(b.recv_conn, abi::NO_CONN);
                    }
                }
            }
            // Every connection's two ends, on whichever GPUs, share its regions.
            assert_eq!(sends.len(), lay.conns.len());
            assert_eq!(recvs.len(), sends.len());
            for (k, s) in &sends {
                let r = recvs[k];
                assert_eq!(
                    (s.slots, s.sent, s.acked, s.ll),
                    (r.slots, r.sent, r.acked, r.ll)
                );
                assert_eq!(s.ready, s.acked + 8);
                assert_ne!(s.slots, 0);
            }
        }
    }

    #[test]
    fn a_block_of_several_peers_has_each_sides_ends_together_in_peer_order() {
        // Rank 0's one block receives from ranks 1 and 2 (in that order) and sends to both.
        let plan = crate::cuda::fixture_plan("ok_head_several_peers_3.json");
        for (gpus, nsub) in [(1u32, 1u32), (1, 2), (3, 1), (3, 3)] {
            let sp = Spread::new(&plan, gpus, 0);
            let lay = Layout::new(&plan, &sp, nsub, crate::cuda::SLOT_BYTES, 4, 4099, 0, 0);
            // Every connection of every peer is laid out, once per sub-CTA.
            assert_eq!(lay.conns.len() as u32, 4 * nsub);
            let addrs = fake_addrs(&plan, &lay);
            for gi in 0..gpus as usize {
                let p =
                    program(&plan, &sp, gi, nsub, &DirectSets::default(), &addrs).expect("encodes");
                assert_eq!(p.conns.len() as u64, lay.gpus[gi].counts.conns);
                // The `_multi` entries only where rank 0, the block of several peers, runs.
                assert_eq!(p.several, p.local_ranks.contains(&0), "GPU {gi} of {gpus}");
                for b in &p.blocks {
                    let r = p.local_ranks[b.rank_slot as usize];
                    let pb = &plan.gpus[r as usize].blocks[b.block as usize];
                    let sends: Vec<u32> = pb.send_peers().collect();
                    let recvs: Vec<u32> = pb.recv_peers().collect();
                    assert_eq!(usize::from(b.nsend_conns), sends.len());
                    assert_eq!(usize::from(b.nrecv_conns), recvs.len());
                    assert_eq!(r == 0, sends.len() == 2 && recvs.len() == 2);
                    // Each end is its connection's, in the block's peer order.
                    for (c, &q) in sends.iter().enumerate() {
                        let e = p.conns[b.send_conn as usize + c];
                        let a = addrs.conns[&(r, q, pb.channel, b.sub)];
                        assert_eq!((e.peer, e.slots, e.sent), (q, a.slots, a.sent));
                    }
                    for (c, &q) in recvs.iter().enumerate() {
                        let e = p.conns[b.recv_conn as usize + c];
                        let a = addrs.conns[&(q, r, pb.channel, b.sub)];
                        assert_eq!((e.peer, e.slots, e.acked), (r, a.slots, a.acked));
                        assert_eq!(e.pos, 0);
                    }
                }
            }
        }
        // A direct flag on such a block is refused: the kernel runs it without direct stores.
        let sp = Spread::new(&plan, 1, 0);
        let lay = Layout::new(&plan, &sp, 1, crate::cuda::SLOT_BYTES, 4, 64, 0, 0);
        let mut sets = DirectSets::default();
        sets.apart.recvs.insert((0, 0, 0), direct::Release::Start);
        let e = program(&plan, &sp, 0, 1, &sets, &fake_addrs(&plan, &lay))
            .expect_err("a direct receive on a block of several peers");
        assert!(
            e.to_string()
                .contains("a direct message on a block of several peers"),
            "{e}"
        );
        // More peers on a side than the kernel's table holds is an error too.
        let mut wide = plan.clone();
        wide.gpus[0].blocks[0].send_also = (0..abi::MAX_BLOCK_CONNS as u32).collect();
        let e = block_ends(0, &wide.gpus[0].blocks[0]).expect_err("too many peers");
        assert!(e.to_string().contains("65 peers on one side"), "{e}");
        assert_eq!(
            block_ends(0, &plan.gpus[0].blocks[0]).expect("fits"),
            (2, 2)
        );
    }

    #[test]
    fn a_missing_connection_or_a_chunk_past_32_bits_is_an_error() {
        let plan = shipped_plan("allreduce_ring.coll", 2);
        let sp = Spread::new(&plan, 2, 0);
        let e = program(&plan, &sp, 0, 1, &DirectSets::default(), &Addrs::default())
            .expect_err("no addresses");
        assert_eq!(
            e.to_string(),
            ExecError::Gpu("missing connection".into()).to_string()
        );
        let mut far = plan.clone();
        far.chunk_factor = 1;
        let op = far.gpus[0].blocks[0]
            .ops
            .iter_mut()
            .find(|o| o.src.is_some())
            .expect("an op with a source");
        let src = op.src.expect("checked");
        op.src = Some(coll_compiler::plan::Slice(src.buffer(), 1 << 33));
        let lay = Layout::new(&far, &sp, 1, crate::cuda::SLOT_BYTES, 4, 64, 0, 0);
        let e = program(
            &far,
            &sp,
            0,
            1,
            &DirectSets::default(),
            &fake_addrs(&far, &lay),
        )
        .expect_err("past 32 bits");
        assert!(
            e.to_string()
                .contains("chunk 8589934592 is beyond the GPU kernel's 32-bit slice index"),
            "{e}"
        );
    }

    #[test]
    fn proxied_ends_point_at_host_memory_without_ll_lines() {
        let plan = shipped_plan("allreduce_ring.coll", 2);
        let sp = Spread::new(&plan, 2, 0);
        let lay = Layout::new(&plan, &sp, 1, crate::cuda::SLOT_BYTES, 4, 64, 0, 0);
        let mut addrs = fake_addrs(&plan, &lay);
        let key = lay.conns[0].key;
        addrs.net.insert((key, Side::Send), (0x10, 0x20, 0x30));
        let p = program(&plan, &sp, 0, 1, &DirectSets::default(), &addrs).expect("encodes");
        let send = p
            .blocks
            .iter()
            .find(|b| b.send_conn != abi::NO_CONN)
            .expect("a send");
        let e = p.conns[send.send_conn as usize];
        assert_eq!(
            (e.slots, e.sent, e.acked, e.ll, e.ready),
            (0x10, 0x20, 0x30, 0, 0)
        );
    }
}
