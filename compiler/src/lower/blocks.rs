//! Step 3 of the lowering: one rank's ops placed in thread blocks, two ways.
//!
//! Both keep the plan's block invariants: a block has at most one send peer, one recv peer
//! and one channel, and a connection side (peer, channel, direction) belongs to exactly one
//! block, so its messages stay in order. A local op goes to the block that last wrote its
//! data (else its destination's, else the first block of its channel, else a new one).
//! - [`first_fit`]: a new connection joins the first block of its channel with that side
//!   free, which gives rings one block per rank per channel, but also packs unrelated send
//!   and receive peers together, serialising phases that could overlap.
//! - [`per_connection`]: each connection side gets its own block; then a receive side and a
//!   send side of one channel share a block when that lets receives fuse with the sends
//!   that forward them (recv-copy-send, recv-reduce-send ...), greedily by how many such
//!   pairs they have, then by how close the order puts such a send to its receive. With `echo` off, only sides of different peers merge (a chain); with
//!   it on, also a receive from a peer and a send back to it, which fuses a tree's turn at
//!   its root but serialises both directions of an exchange; over `max_blocks`, the
//!   least-loaded complementary blocks of a channel merge.
//! - [`locals_apart`] (after [`per_connection`]): each chain of local ops (a local op
//!   that writes chunks a local op of such a chain wrote last joins it) gets a block of its
//!   own while the rank has fewer than `max_blocks`, so the reductions of different chunks
//!   run side by side instead of in the blocks of the receives that fed them, one after the
//!   other. Blocks left empty are dropped.

use super::{Chunks, ROp};
use crate::plan::{OpKind, Via};
use rustc_hash::FxHashMap as HashMap;

/// Blocks and, per op, the index of its block.
pub(super) type Placement = (Vec<BlockB>, Vec<usize>);

/// The block a local op joins: the last writer of its source, else of its destination,
/// else the first block of its channel.
fn local_block(
    op: &ROp,
    chunks: &Chunks<'_>,
    writer_block: &[usize],
    blocks: &[BlockB],
) -> Option<usize> {
    let written = |s: crate::plan::Slice| {
        chunks
            .ids(s, op.count)
            .find_map(|c| Some(writer_block[c as usize]).filter(|&b| b != usize::MAX))
    };
    op.src
        .and_then(written)
        .or_else(|| op.dst.and_then(written))
        .or_else(|| blocks.iter().position(|b| b.channel == op.channel))
}

/// The block of each (peer, channel) one way, as [`first_fit`] gives them out.
#[derive(Default)]
struct Owners {
    of: HashMap<(u32, u32), usize>,
    /// The last one looked up: consecutive sends (receives) mostly go to one peer on one
    /// channel, and this runs for every op of every rank.
    last: Option<((u32, u32), usize)>,
}

impl Owners {
    /// The block of `key`, made by `new` on its first use.
    fn owner(&mut self, key: (u32, u32), new: impl FnOnce() -> usize) -> usize {
        match self.last {
            Some((k, b)) if k == key => b,
            _ => {
                let b = *self.of.entry(key).or_insert_with(new);
                self.last = Some((key, b));
                b
            }
        }
    }
}

/// The original packing (see the module docs).
pub(super) fn first_fit(ops: &[ROp], chunks: &Chunks<'_>) -> Placement {
    let mut blocks: Vec<BlockB> = Vec::new();
    let (mut sends, mut recvs) = (Owners::default(), Owners::default());
    let mut writer_block: Vec<usize> = vec![usize::MAX; chunks.total as usize];
    let mut block_of = Vec::with_capacity(ops.len());
    for op in ops {
        let b = if let Some((q, via)) = op.send {
            sends.owner((q, op.channel), || {
                let b = blocks
                    .iter()
                    .position(|b| b.channel == op.channel && b.send.is_none())
                    .unwrap_or_else(|| new_block(&mut blocks, op.channel));
                blocks[b].send = Some((q, via));
                b
            })
        } else if let Some((p, via)) = op.recv {
            recvs.owner((p, op.channel), || {
                let b = blocks
                    .iter()
                    .position(|b| b.channel == op.channel && b.recv.is_none())
                    .unwrap_or_else(|| new_block(&mut blocks, op.channel));
                blocks[b].recv = Some((p, via));
                b
            })
        } else {
            local_block(op, chunks, &writer_block, &blocks)
                .unwrap_or_else(|| new_block(&mut blocks, op.channel))
        };
        if let Some(d) = op.dst.filter(|_| op.kind.needs_dst()) {
            chunks.set_each(&mut writer_block, d, op.count, b);
        }
        block_of.push(b);
    }
    fill_ops(&mut blocks, &block_of);
    (blocks, block_of)
}

/// Lists each block's ops in rank order from `block_of`.
fn fill_ops(blocks: &mut [BlockB], block_of: &[usize]) {
    // A rank of one block (a ring's): every op, in order, without a look at `block_of`.
    if let [only] = blocks {
        only.ops = (0..block_of.len()).collect();
        return;
    }
    // Sized first: a rank's thousands of ops grew each list by doubling, copying it.
    let mut sizes = vec![0usize; blocks.len()];
    for &b in block_of {
        if let Some(n) = sizes.get_mut(b) {
            *n += 1;
        }
    }
    for (b, n) in blocks.iter_mut().zip(sizes) {
        b.ops.clear();
        b.ops.reserve_exact(n);
    }
    for (i, &b) in block_of.iter().enumerate() {
        blocks[b].ops.push(i);
    }
}

/// A connection side: (peer, channel, sends).
type Side = (u32, u32, bool);

/// The packing by connection side (see the module docs); `Err` says why it does not fit in
/// `max_blocks`.
pub(super) fn per_connection(
    ops: &[ROp],
    chunks: &Chunks<'_>,
    src_writers: &super::Writers,
    echo: bool,
    max_blocks: u32,
) -> Result<Placement, String> {
    // Sides in order of first use, with their route.
    let mut side_of: HashMap<Side, usize> = HashMap::default();
    let mut sides: Vec<(Side, Via)> = Vec::new();
    let mut op_side: Vec<Option<usize>> = Vec::with_capacity(ops.len());
    for op in ops {
        let side = op
            .send
            .map(|(q, v)| ((q, op.channel, true), v))
            .or(op.recv.map(|(p, v)| ((p, op.channel, false), v)));
        op_side.push(side.map(|(s, v)| {
            *side_of.entry(s).or_insert_with(|| {
                sides.push((s, v));
                sides.len() - 1
            })
        }));
    }
    // Fusible (receive side, send side) pairs: a send of exactly what one receive wrote;
    // how many, and the fewest ops between such a receive and its send.
    let mut fusible: HashMap<(usize, usize), (u32, usize)> = HashMap::default();
    for (s, op) in ops.iter().enumerate() {
        if op.kind != OpKind::Send {
            continue;
        }
        if let &[a] = src_writers.of(s) {
            let a = a as usize;
            let r = &ops[a];
            if matches!(r.kind, OpKind::Recv | OpKind::RecvReduceCopy)
                && r.dst == op.src
                && r.count == op.count
                && r.channel == op.channel
                && let (Some(rs), Some(ss)) = (op_side[a], op_side[s])
            {
                let e = fusible.entry((rs, ss)).or_insert((0, usize::MAX));
                e.0 += 1;
                e.1 = e.1.min(s - a);
            }
        }
    }
    // Most fusions first; among equals, the send the order puts closest to its receive: a
    // dependence order puts first the send with the longest path after it (a tree's
    // broadcast to its deepest subtree), so that is the one the receive forwards at once.
    let mut pairs: Vec<((usize, usize), (u32, usize))> = fusible.into_iter().collect();
    pairs.sort_unstable_by_key(|&((r, s), (k, gap))| (std::cmp::Reverse(k), gap, r, s));
    // Group of each side: sides merged for fusion share one.
    let mut group: Vec<usize> = (0..sides.len()).collect();
    let mut merged = vec![false; sides.len()];
    for ((r, s), _) in pairs {
        // Not a receive and a send of the same peer: one block for both directions of an
        // exchange would make each rank of it wait for the other.
        let same_peer = sides[r].0.0 == sides[s].0.0;
        if !merged[r] && !merged[s] && (echo || !same_peer) {
            merged[r] = true;
            merged[s] = true;
            group[s] = r;
        }
    }
    // Blocks in order of first use.
    let mut blocks: Vec<BlockB> = Vec::new();
    let mut block_of_group: Vec<usize> = vec![usize::MAX; sides.len()];
    let mut writer_block: Vec<usize> = vec![usize::MAX; chunks.total as usize];
    let mut block_of = Vec::with_capacity(ops.len());
    for (i, op) in ops.iter().enumerate() {
        let b = match op_side[i] {
            Some(side) => {
                let g = group[side];
                if block_of_group[g] == usize::MAX {
                    block_of_group[g] = new_block(&mut blocks, op.channel);
                }
                let b = block_of_group[g];
                let ((peer, _, sends), via) = sides[side];
                if sends {
                    blocks[b].send = Some((peer, via));
                } else {
                    blocks[b].recv = Some((peer, via));
                }
                b
            }
            None => local_block(op, chunks, &writer_block, &blocks)
                .unwrap_or_else(|| new_block(&mut blocks, op.channel)),
        };
        if let Some(d) = op.dst.filter(|_| op.kind.needs_dst()) {
            chunks.set_each(&mut writer_block, d, op.count, b);
        }
        block_of.push(b);
    }
    // Over the limit: merge the least-loaded send-only and recv-only blocks of a channel.
    while blocks.len() > max_blocks as usize {
        let mut load = vec![0usize; blocks.len()];
        for &b in &block_of {
            load[b] += 1;
        }
        let mut best: Option<(usize, usize, usize)> = None;
        for (a, x) in blocks.iter().enumerate() {
            for (b, y) in blocks.iter().enumerate().skip(a + 1) {
                let fits = x.channel == y.channel
                    && (x.send.is_none() || y.send.is_none())
                    && (x.recv.is_none() || y.recv.is_none());
                if fits && best.is_none_or(|(_, _, l)| load[a] + load[b] < l) {
                    best = Some((a, b, load[a] + load[b]));
                }
            }
        }
        let Some((a, b, _)) = best else {
            return Err(format!(
                "{} blocks by connection side, over the limit of {max_blocks}",
                blocks.len()
            ));
        };
        let gone = blocks.remove(b);
        blocks[a].send = blocks[a].send.or(gone.send);
        blocks[a].recv = blocks[a].recv.or(gone.recv);
        for x in &mut block_of {
            if *x == b {
                *x = a;
            } else if *x > b {
                *x -= 1;
            }
        }
    }
    fill_ops(&mut blocks, &block_of);
    Ok((blocks, block_of))
}

/// How many blocks [`locals_apart`] would open: the local ops that start a chain (write no
/// chunk that a local op wrote last).
pub(super) fn local_chains(ops: &[ROp], chunks: &Chunks<'_>) -> u32 {
    let mut by_local = vec![false; chunks.total as usize];
    let mut heads = 0u32;
    for op in ops {
        let local = op.send.is_none() && op.recv.is_none() && op.group.is_none();
        let Some(d) = op.writes() else { continue };
        if local && !chunks.ids(d, op.count).any(|c| by_local[c as usize]) {
            heads = heads.saturating_add(1);
        }
        for c in chunks.ids(d, op.count) {
            by_local[c as usize] = local;
        }
    }
    heads
}

/// Moves local ops to blocks of their own (see the module docs), keeping the placement of
/// the others.
pub(super) fn locals_apart(
    ops: &[ROp],
    chunks: &Chunks<'_>,
    placed: Placement,
    max_blocks: u32,
) -> Placement {
    let (mut blocks, mut block_of) = placed;
    let first_new = blocks.len();
    // Per chunk: the block made here whose local op wrote it last, if the last writer was one.
    let mut chain: Vec<usize> = vec![usize::MAX; chunks.total as usize];
    for (i, op) in ops.iter().enumerate() {
        let local = op.send.is_none() && op.recv.is_none() && op.group.is_none();
        if local {
            let joined = op.writes().and_then(|d| {
                chunks
                    .ids(d, op.count)
                    .map(|c| chain[c as usize])
                    .find(|&b| b != usize::MAX)
            });
            block_of[i] = match joined {
                Some(b) => b,
                None if blocks.len() < max_blocks as usize => new_block(&mut blocks, op.channel),
                None => block_of[i],
            };
        }
        if let Some(d) = op.writes() {
            let b = block_of[i];
            let mark = if b >= first_new { b } else { usize::MAX };
            for c in chunks.ids(d, op.count) {
                chain[c as usize] = mark;
            }
        }
    }
    // Drop the blocks no op is in any more, renumbering the rest.
    let mut used = vec![false; blocks.len()];
    for &b in &block_of {
        used[b] = true;
    }
    let mut new_index = Vec::with_capacity(blocks.len());
    let mut next = 0usize;
    for &u in &used {
        new_index.push(next);
        next += usize::from(u);
    }
    let mut k = 0;
    blocks.retain(|_| {
        k += 1;
        used[k - 1]
    });
    for b in &mut block_of {
        *b = new_index[*b];
    }
    fill_ops(&mut blocks, &block_of);
    (blocks, block_of)
}

/// A block being formed: its channel, its connection sides, its ops (indices).
#[derive(Debug)]
pub(super) struct BlockB {
    pub(super) channel: u32,
    pub(super) send: Option<(u32, Via)>,
    pub(super) recv: Option<(u32, Via)>,
    pub(super) ops: Vec<usize>,
}

pub(super) fn new_block(blocks: &mut Vec<BlockB>, channel: u32) -> usize {
    blocks.push(BlockB {
        channel,
        send: None,
        recv: None,
        ops: Vec::new(),
    });
    blocks.len() - 1
}
