//! Step 4c of the lowering: a send and a later copy of the same chunks in one block become
//! one copy-send, which reads the data once and runs the copy beside the send.
//!
//! Invariant: a copy fuses only into a send before it in its block, with nothing between
//! that writes its source or touches its destination, and only when no op of another block
//! before it (program order) wrote its source or touched its destination, so it may run
//! at the send's place.

use super::rank_plan::NOT_FUSED;
use super::{BlockB, Chunks, ROp};
use crate::plan::{OpKind, Slice};

/// How many ops back in its block a copy looks for a send to fuse into.
const COPY_SEND_REACH: usize = 256;

/// Step 4c. A copy fuses into a send of the same chunks before it in its block (the nearest
/// one, with no op between that writes the copy's source or touches its destination). The
/// copy then runs at the send's place, earlier than before; that is safe when it has no
/// dependency on another block, i.e. no op of another block before it in program order
/// wrote its source or touched its destination. (Never into a send after it: the copy
/// would run later, after ops of other blocks it must precede; the differential test in
/// `tests/lowering.rs` found such a deadlock.) Chunks are
/// compared in every numbering of `views` (the plan's, and the in-place one of a plan made
/// out of place from an in-place program, whose copies onto themselves there are skipped).
#[allow(clippy::too_many_arguments)]
pub(super) fn copy_sends(
    ops: &[ROp],
    blocks: &[BlockB],
    block_of: &[usize],
    views: &[&Chunks<'_>],
    kinds: &mut [OpKind],
    fused_into: &mut [u32],
    fused_dst: &mut [Option<Slice>],
) {
    // Only copies fuse; most ranks of most plans have none left after folding (ring
    // allreduce at n = 1024 spent 3% of its check here finding that out).
    if !kinds.contains(&OpKind::Copy) {
        return;
    }
    // Whether each op touches chunks another block touched before it in program order.
    let mut foreign = vec![false; ops.len()];
    for (vi, v) in views.iter().enumerate() {
        // Per chunk: the block that touched (wrote) it first, and whether others did too.
        let mut touched: Vec<Option<(usize, bool)>> = vec![None; v.total as usize];
        let mut wrote: Vec<Option<(usize, bool)>> = vec![None; v.total as usize];
        let other = |s: Option<(usize, bool)>, b: usize| s.is_some_and(|(f, m)| m || f != b);
        let note = |s: &mut Option<(usize, bool)>, b: usize| {
            *s = Some(match *s {
                None => (b, false),
                Some((f, m)) => (f, m || f != b),
            });
        };
        for (i, op) in ops.iter().enumerate() {
            if vi > 0 && v.copies_onto_itself(op) {
                continue;
            }
            let b = block_of[i];
            let (src, dst) = (op.reads_src(), op.writes());
            foreign[i] |= src
                .is_some_and(|s| v.ids(s, op.count).any(|c| other(wrote[c as usize], b)))
                || dst.is_some_and(|d| v.ids(d, op.count).any(|c| other(touched[c as usize], b)));
            for c in src.into_iter().flat_map(|s| v.ids(s, op.count)) {
                note(&mut touched[c as usize], b);
            }
            for c in dst.into_iter().flat_map(|d| v.ids(d, op.count)) {
                note(&mut touched[c as usize], b);
                note(&mut wrote[c as usize], b);
            }
        }
    }
    // Whether op `z` writes the copy's source or touches its destination, in any numbering.
    let conflicts = |z: &ROp, c: &ROp| {
        views.iter().any(|v| {
            let src_hit = z
                .writes()
                .is_some_and(|w| v.overlap(w, z.count, c.src, c.count));
            let dst_hit = z
                .writes()
                .into_iter()
                .chain(z.reads())
                .any(|x| v.overlap(x, z.count, c.dst, c.count));
            src_hit || dst_hit
        })
    };
    let free = |i: usize, fused_into: &[u32], fused_dst: &[Option<Slice>]| {
        fused_into[i] == NOT_FUSED && fused_dst[i].is_none()
    };
    for b in blocks {
        for p in 0..b.ops.len() {
            let ci = b.ops[p];
            let c = &ops[ci];
            if kinds[ci] != OpKind::Copy || c.group.is_some() || foreign[ci] {
                continue;
            }
            if !free(ci, fused_into, fused_dst)
                || c.src
                    .is_none_or(|s| views[0].overlap(s, c.count, c.dst, c.count))
            {
                continue;
            }
            let matches = |si: usize, fused_into: &[u32], fused_dst: &[Option<Slice>]| {
                let s = &ops[si];
                kinds[si] == OpKind::Send
                    && free(si, fused_into, fused_dst)
                    && s.src == c.src
                    && s.count == c.count
                    && s.group.is_none()
                    && s.protocol == c.protocol
            };
            let mut send = None;
            // A bounded look back keeps lowering linear in the ops of a block.
            for q in (p.saturating_sub(COPY_SEND_REACH)..p).rev() {
                let zi = b.ops[q];
                if matches(zi, fused_into, fused_dst) {
                    send = Some(zi);
                    break;
                }
                if conflicts(&ops[zi], c) {
                    break;
                }
            }
            if let Some(si) = send {
                kinds[si] = OpKind::CopySend;
                // An op index: `schedule_rank` checked they fit below `NOT_FUSED`.
                fused_into[ci] = si as u32;
                fused_dst[si] = c.dst;
            }
        }
    }
}
