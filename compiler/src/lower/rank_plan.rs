//! Steps 3 to 5 of the lowering for one rank (see `mod.rs`): its folded ops, in the order
//! given, placed in blocks (`blocks.rs`), sends hoisted and receives fused with the sends
//! that forward them, then each op's waits on other blocks.
//!
//! Invariant: the rank's ops keep their relative order within every block, and every op
//! waits for the last op of each other block it conflicts with (RAW, WAW, WAR) in the order
//! given, so the rank's conflicting accesses happen in that order.

use super::{Chunks, LowerOptions, Lowering, Packing, ROp, Writers};
use super::{blocks, copy_send};
use crate::elaborate::Protocol;
use crate::plan::{Block, Dep, Op, OpKind, RankPlan, Slice};

impl Lowering<'_> {
    /// Steps 3 to 5 for one rank's folded ops, in the order given.
    pub(super) fn schedule_rank(
        &self,
        rank: u32,
        ops: &[ROp],
        options: &LowerOptions,
        packing: Packing,
        max_blocks: u32,
    ) -> Result<RankPlan, String> {
        // Op indices are stored as u32 below (`fused_into`).
        if ops.len() >= NOT_FUSED as usize {
            return Err(format!(
                "rank {rank}: {} ops, too many to schedule",
                ops.len()
            ));
        }
        let chunks = Chunks::new(self, rank, self.e.inplace);
        // A plan made out of place from an in-place program is also checked, and ordered, in
        // the numbering an in-place call of it sees.
        let in_place = self.e.from_in_place.then(|| Chunks::new(self, rank, true));
        // Who last wrote each op's source before it (program order), for hoisting and fusion.
        // Op indices fit in a `u32` below `NO_WRITER` (checked above).
        let mut last_writer: Vec<u32> = vec![NO_WRITER; chunks.total as usize];
        let mut src_writers = Writers {
            start: Vec::with_capacity(ops.len() + 1),
            flat: Vec::with_capacity(ops.len()),
        };
        src_writers.start.push(0);
        // Whether all ops give one protocol, and whether any is a copy, read here for passes
        // that a rank of one block (a ring's) would otherwise make over all its ops again.
        let first_protocol = ops.first().map(|o| o.protocol);
        let mut all_agree = true;
        let mut any_copy = false;
        for (i, op) in ops.iter().enumerate() {
            all_agree &= Some(op.protocol) == first_protocol;
            any_copy |= op.kind == OpKind::Copy;
            let flat = &mut src_writers.flat;
            if let Some(s) = op.src
                && op.count == 1
            {
                // One chunk (most ops): its writer, if any, without the loop's checks.
                let x = last_writer[chunks.id(s, 0) as usize];
                if x != NO_WRITER {
                    flat.push(x);
                }
            } else if let Some(s) = op.src {
                let from = flat.len();
                for c in chunks.ids(s, op.count) {
                    let x = last_writer[c as usize];
                    if x != NO_WRITER && flat[from..].last() != Some(&x) {
                        flat.push(x);
                    }
                }
                if flat.len() - from > 1 {
                    let mut w = flat.split_off(from);
                    w.sort_unstable();
                    w.dedup();
                    flat.extend(w);
                }
            }
            src_writers.start.push(flat.len());
            if let Some(d) = op.dst.filter(|_| op.kind.needs_dst()) {
                // `i` is below `NO_WRITER` (checked above).
                chunks.set_each(&mut last_writer, d, op.count, i as u32);
            }
        }

        // Step 3: blocks (`blocks.rs`).
        let (mut blocks, block_of) = match packing {
            Packing::FirstFit => blocks::first_fit(ops, &chunks),
            Packing::PerConnection | Packing::PerConnectionEcho | Packing::LocalApart => {
                let by_side = |limit: u32| {
                    blocks::per_connection(
                        ops,
                        &chunks,
                        &src_writers,
                        packing == Packing::PerConnectionEcho,
                        limit,
                    )
                };
                // Local ops apart need blocks of their own: where the sides alone fill the
                // limit (all-to-all at n = 64: 126 sides, 108 blocks) they give up room for
                // the local chains first, else every local op stays in a transfer's block.
                let reserve = if packing == Packing::LocalApart {
                    blocks::local_chains(ops, &chunks).min(max_blocks / 4)
                } else {
                    0
                };
                let placed = match by_side(max_blocks - reserve) {
                    Err(_) if reserve > 0 => by_side(max_blocks),
                    placed => placed,
                }
                .map_err(|why| format!("rank {rank}: {why}"))?;
                if packing == Packing::LocalApart {
                    blocks::locals_apart(ops, &chunks, placed, max_blocks)
                } else {
                    placed
                }
            }
        };

        // Step 4a: hoist sends whose data comes from their own block. Each send passes the
        // ops just above it that neither send nor write its data; building the new order in
        // one pass keeps the cost proportional to how far sends move.
        if options.hoist_sends {
            let one_block = blocks.len() == 1;
            for b in &mut blocks {
                let mut order: Vec<usize> = Vec::with_capacity(b.ops.len());
                let mut passed: Vec<usize> = Vec::new();
                for &i in &b.ops {
                    let op = &ops[i];
                    // In a rank of one block every writer is in the send's block.
                    let hoistable = op.kind == OpKind::Send
                        && (one_block
                            || (src_writers.of(i).iter())
                                .all(|&w| block_of[w as usize] == block_of[i]));
                    if hoistable {
                        let writers = src_writers.of(i);
                        // The send's chunk ids, once for every op it may pass (no source
                        // overlaps nothing, as in `Chunks::overlap`).
                        let read = op.src.map(|s| chunks.ids(s, op.count));
                        while let Some(&above) = order.last() {
                            let a = &ops[above];
                            let blocks_it = a.kind.sends()
                                || writers.contains(&(above as u32))
                                || a.dst.filter(|_| a.kind.needs_dst()).is_some_and(|d| {
                                    read.as_ref().is_some_and(|r| chunks.touches(d, a.count, r))
                                });
                            if blocks_it {
                                break;
                            }
                            passed.push(above);
                            order.pop();
                        }
                    }
                    order.push(i);
                    while let Some(p) = passed.pop() {
                        order.push(p);
                    }
                }
                b.ops = order;
            }
        }

        // Liveness of each op's destination after it, for recv-reduce-send: computed on the
        // first receive-reduce that fuses (a pass over the rank's ops that plain receives,
        // as in an allgather, never need).
        let mut dead_after: Option<Vec<bool>> = None;

        // Step 4b: fuse receive + send of the same chunks.
        // Per op, the op it fused into, or `NOT_FUSED`: 4 bytes an op, cleared for every
        // rank (an `Option<usize>` took 16, most of the time `memset` spent).
        let mut fused_into: Vec<u32> = vec![NOT_FUSED; ops.len()];
        let mut kinds: Vec<OpKind> = ops.iter().map(|o| o.kind).collect();
        if options.fuse {
            for b in &blocks {
                for w in b.ops.windows(2) {
                    let (a, s) = (w[0], w[1]);
                    if fused_into[a] != NOT_FUSED {
                        continue;
                    }
                    let (ra, rs) = (&ops[a], &ops[s]);
                    let fusable = matches!(kinds[a], OpKind::Recv | OpKind::RecvReduceCopy)
                        && rs.kind == OpKind::Send
                        && ra.dst == rs.src
                        && ra.count == rs.count
                        && src_writers.of(s) == [a as u32];
                    if !fusable {
                        continue;
                    }
                    // The stored result may be dropped only when nothing needs it after the
                    // fused op: not later in program order (`dead_after`), and not an op
                    // between the two that the hoisted send passed and that now runs after.
                    // Looked at only for a receive-reduce whose result is dead after: a
                    // receive fuses the same either way, and the ops between may be many.
                    let read_between = || {
                        // No destination overlaps nothing (`Chunks::overlap`).
                        let Some(written) = ra.dst.map(|d| chunks.ids(d, ra.count)) else {
                            return false;
                        };
                        ops.get(a + 1..s).unwrap_or_default().iter().any(|o| {
                            let hit = |x: Option<Slice>| {
                                x.is_some_and(|x| chunks.touches(x, o.count, &written))
                            };
                            hit(o.src.filter(|_| o.kind.needs_src()))
                                || hit(o.dst.filter(|_| o.kind.reduces()))
                        })
                    };
                    kinds[a] = match kinds[a] {
                        OpKind::Recv => OpKind::RecvCopySend,
                        _ if dead_after.get_or_insert_with(|| chunks.dead_after(ops))[s]
                            && !read_between() =>
                        {
                            OpKind::RecvReduceSend
                        }
                        _ => OpKind::RecvReduceCopySend,
                    };
                    // `a` is an op index, below `NOT_FUSED` (checked above).
                    fused_into[s] = a as u32;
                }
            }
        }

        // Step 4c: a send and a later copy of the same chunks in a block become one copy-send,
        // which reads the data once and runs the copy beside the send (`copy_send.rs`).
        // Filled only where there are copies to fuse (most ranks of most plans have none
        // left after folding): empty, it reads as no op's.
        let mut fused_dst: Vec<Option<Slice>> = Vec::new();
        // Fusion (step 4b) turns only receives into other kinds: `kinds` holds a copy
        // exactly when `ops` does.
        if options.fuse && any_copy {
            fused_dst = vec![None; ops.len()];
            let views: Vec<&Chunks<'_>> =
                std::iter::once(&chunks).chain(in_place.as_ref()).collect();
            copy_send::copy_sends(
                ops,
                &blocks,
                &block_of,
                &views,
                &mut kinds,
                &mut fused_into,
                &mut fused_dst,
            );
        }

        // Final positions, which only the dependencies of step 5 read: those order ops of
        // different blocks, so a rank of one block (a ring's) needs none.
        let several = blocks.len() > 1;
        let mut pos: Vec<(u32, u32)> = if several {
            vec![(0, 0); ops.len()]
        } else {
            Vec::new()
        };
        let mut out: Vec<Block> = Vec::with_capacity(blocks.len());
        for (bi, b) in blocks.iter().enumerate() {
            let mut idx = 0u32;
            // The block's protocol, where all its ops give the same one: checked in this pass
            // (a list of them per block cost a pass of its own).
            let first: Option<Option<Protocol>> = b.ops.first().map(|&i| ops[i].protocol);
            let mut agree = true;
            if several {
                for &i in &b.ops {
                    agree &= Some(ops[i].protocol) == first;
                    if fused_into[i] == NOT_FUSED {
                        pos[i] = (bi as u32, idx);
                        idx += 1;
                    }
                }
            } else {
                // The only block holds every op (each op is placed in one), so its ops agree
                // when all the rank's do, checked in the writers' pass; it needs no
                // positions, only its size, from the fusion marks (4 bytes an op, in order,
                // instead of every op through the block's list).
                agree = all_agree;
                // At most `ops.len()`, below `NOT_FUSED` (checked above).
                idx = fused_into.iter().filter(|&&f| f == NOT_FUSED).count() as u32;
            }
            for &i in b.ops.iter().filter(|_| several) {
                if let Some(a) = fused_owner(fused_into[i]) {
                    pos[i] = pos[a];
                }
            }
            let protocol = match first {
                Some(Some(p)) if agree => Some(p),
                _ => None,
            };
            out.push(Block {
                id: bi as u32,
                channel: b.channel,
                send_peer: b.send.map(|(q, _)| q),
                recv_peer: b.recv.map(|(p, _)| p),
                send_via: b.send.map(|(_, v)| v),
                recv_via: b.recv.map(|(_, v)| v),
                protocol,
                send_also: Vec::new(),
                recv_also: Vec::new(),
                // Sized exactly: plans are large, and fused ops take no place of their own.
                ops: Vec::with_capacity(idx as usize),
            });
        }

        // Step 5: dependencies, in program order.
        let placed = Placed {
            ops,
            kinds: &kinds,
            fused_into: &fused_into,
            pos: &pos,
        };
        let mut deps = if several {
            placed.dependencies(&chunks, false)
        } else {
            Vec::new()
        };
        if let Some(aliased) = in_place.as_ref().filter(|_| several) {
            // Also order the accesses that alias in an in-place call, except those of the
            // input copies the conversion made, which such a call makes onto themselves.
            for (d, extra) in deps.iter_mut().zip(placed.dependencies(aliased, true)) {
                d.extend(extra);
            }
        }

        for (bi, b) in blocks.iter().enumerate() {
            for &i in &b.ops {
                if fused_into[i] != NOT_FUSED {
                    continue;
                }
                let op = &ops[i];
                let kind = kinds[i];
                // Keep the latest op per block. Most ops wait for none (every op of a rank
                // of one block): no lists to sort and fold for them.
                let latest: Box<[Dep]> = match deps.get_mut(i).map(std::mem::take) {
                    Some(mut d) if !d.is_empty() => {
                        d.sort_unstable();
                        let mut latest: Vec<Dep> = Vec::new();
                        for x in d {
                            match latest.last_mut() {
                                Some(l) if l.0 == x.0 => *l = x,
                                _ => latest.push(x),
                            }
                        }
                        latest.into()
                    }
                    _ => Box::default(),
                };
                out[bi].ops.push(Op {
                    kind,
                    src: op.src.filter(|_| kind.needs_src()),
                    dst: fused_dst
                        .get(i)
                        .copied()
                        .flatten()
                        .or(op.dst)
                        .filter(|_| kind.needs_dst()),
                    count: op.count,
                    deps: latest,
                    source: op.source,
                    group: op.group,
                });
            }
        }
        Ok(RankPlan { rank, blocks: out })
    }
}

/// `fused_into`'s mark of an op that fused into none.
pub(super) const NOT_FUSED: u32 = u32::MAX;

/// `last_writer`'s mark of a chunk no op wrote yet (`NOT_FUSED`'s value: op indices are
/// checked to be below it).
const NO_WRITER: u32 = NOT_FUSED;

/// The op that an op with `fused_into` entry `f` fused into, if any.
fn fused_owner(f: u32) -> Option<usize> {
    (f != NOT_FUSED).then_some(f as usize)
}

/// One rank's ops after blocks, hoisting and fusion: what step 5 reads.
struct Placed<'a> {
    ops: &'a [ROp],
    kinds: &'a [OpKind],
    fused_into: &'a [u32],
    /// (block, index in block) of each op; a fused op has its owner's.
    pos: &'a [(u32, u32)],
}

impl Placed<'_> {
    /// Per op, the ops of other blocks it must wait for (RAW, WAW, WAR) under the chunk
    /// numbering `chunks`; `skip_self_copies` ignores copies whose source and destination are
    /// the same chunks there.
    fn dependencies(&self, chunks: &Chunks<'_>, skip_self_copies: bool) -> Vec<Vec<Dep>> {
        let ops = self.ops;
        let mut deps: Vec<Vec<Dep>> = vec![Vec::new(); ops.len()];
        let mut writer: Vec<Option<(u32, u32)>> = vec![None; chunks.total as usize];
        let mut readers: Vec<Vec<(u32, u32)>> = vec![Vec::new(); chunks.total as usize];
        // One buffer for every op's wants: most ops have none left after the filter below.
        let mut want: Vec<(u32, u32)> = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            let owner = fused_owner(self.fused_into[i]).unwrap_or(i);
            let me = self.pos[owner];
            let kind = self.kinds[owner];
            if skip_self_copies && chunks.copies_onto_itself(op) {
                continue;
            }
            want.clear();
            // A send fused into the receive before it reads what that receive wrote; a copy
            // fused into a copy-send reads and writes as it did on its own.
            let fused = self.fused_into[i] != NOT_FUSED;
            let reads = if fused && op.kind != OpKind::Copy {
                None
            } else {
                op.src.filter(|_| kind.needs_src())
            };
            if let Some(s) = reads {
                for c in chunks.ids(s, op.count) {
                    if let Some(w) = writer[c as usize] {
                        want.push(w);
                    }
                    readers[c as usize].push(me);
                }
            }
            let writes = op
                .dst
                .filter(|_| kind.needs_dst() && (!fused || op.kind == OpKind::Copy));
            if let Some(d) = writes {
                for c in chunks.ids(d, op.count) {
                    if let Some(w) = writer[c as usize] {
                        want.push(w);
                    }
                    want.append(&mut readers[c as usize]);
                    writer[c as usize] = Some(me);
                }
            }
            want.retain(|&(b, _)| b != me.0);
            deps[owner].extend(want.iter().map(|&(b, o)| Dep(b, o)));
        }
        deps
    }
}
