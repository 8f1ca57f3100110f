//! An in-place program compiled as an out-of-place plan ([`Options::out_of_place`]).
//!
//! In place, `input` and `output` are one buffer (see [`crate::layout::alias`]). The
//! out-of-place program first copies each rank's input to where that buffer keeps it in
//! `output`, then runs the program with every `input` and `output` chunk renamed to its
//! place in `output`. The lowering's copy folding then removes the copies the program does
//! not need (a chunk first read is read from `input`, a chunk first overwritten is never
//! copied), so the plan reads the input in place of a copy. The result is proved again like
//! any program.
//!
//! Supported where the shared buffer is the output: allreduce, broadcast, reduce and
//! allgather. Reducescatter's shared buffer is its input, which an out-of-place call must
//! leave unchanged; custom collectives name their own layout.
//!
//! [`Options::out_of_place`]: super::Options::out_of_place

use super::{BufId, ChunkOp, Elaborated, Loc, OpKind, RankRange};
use crate::error::CompileError;
use coll_lang::Diagnostic;
use coll_lang::builtins::CollectiveKind;

/// Whether the program with header `summary` is in place and its collective lets it be
/// compiled out of place (see the module docs): what executors do by default.
pub fn convertible(summary: &coll_lang::check::Summary) -> bool {
    summary.inplace
        && matches!(
            summary.kind,
            CollectiveKind::AllReduce
                | CollectiveKind::Broadcast
                | CollectiveKind::Reduce
                | CollectiveKind::AllGather
        )
}

/// Rewrites the in-place program `e` as an out-of-place one (nothing to do when it already
/// is).
pub fn make_out_of_place(e: &mut Elaborated) -> Result<(), Box<Diagnostic<CompileError>>> {
    if !e.inplace {
        return Ok(());
    }
    let unsupported = |why: &str| {
        Box::new(
            Diagnostic::new(
                CompileError::NotOutOfPlace {
                    why: why.to_string(),
                },
                e.header_span,
            )
            .with_label("this in-place algorithm"),
        )
    };
    let input_at_rank = match e.kind {
        CollectiveKind::AllReduce | CollectiveKind::Broadcast | CollectiveKind::Reduce => false,
        CollectiveKind::AllGather => true,
        CollectiveKind::ReduceScatter => {
            return Err(unsupported(
                "its one buffer is the input, which an out-of-place call leaves unchanged",
            ));
        }
        _ => {
            return Err(unsupported(
                "the collective has no in-place layout to start from",
            ));
        }
    };
    let k = e.chunk_factor;
    // Where chunk `index` of `loc`'s buffer lives in `output` on `rank`.
    let place = |buffer: BufId, rank: u32, index: u32| -> Option<u32> {
        if buffer == BufId::INPUT && input_at_rank {
            u32::try_from(u64::from(rank) * k + u64::from(index)).ok()
        } else {
            Some(index)
        }
    };
    let mut ops: Vec<ChunkOp> = Vec::with_capacity(e.ops.len() + e.n as usize);
    let input_chunks = e.buffers[BufId::INPUT.index()].chunks;
    for r in 0..e.n {
        for i in 0..input_chunks as u32 {
            let at = place(BufId::INPUT, r, i).ok_or_else(|| unsupported("too many chunks"))?;
            ops.push(ChunkOp {
                kind: OpKind::Copy,
                src: Loc {
                    buffer: BufId::INPUT,
                    ranks: RankRange::one(r),
                    index: i,
                },
                dst: Loc {
                    buffer: BufId::OUTPUT,
                    ranks: RankRange::one(r),
                    index: at,
                },
                count: 1,
                via: None,
                protocol: None,
                channel: u16::MAX,
                pipeline: 0,
                span: e.header_span,
            });
        }
    }
    for op in &e.ops {
        let mut op = *op;
        for loc in [&mut op.src, &mut op.dst] {
            if loc.buffer != BufId::INPUT && loc.buffer != BufId::OUTPUT {
                continue;
            }
            if loc.buffer == BufId::INPUT && input_at_rank && loc.ranks.is_multi() {
                return Err(Box::new(
                    Diagnostic::new(
                        CompileError::NotOutOfPlace {
                            why: "`input` of several ranks at once has no one place in `output`"
                                .to_string(),
                        },
                        op.span,
                    )
                    .with_label("names `input` of several ranks"),
                ));
            }
            loc.index = place(loc.buffer, loc.ranks.start, loc.index)
                .ok_or_else(|| unsupported("too many chunks"))?;
            loc.buffer = BufId::OUTPUT;
        }
        ops.push(op);
    }
    e.ops = ops;
    e.inplace = false;
    e.from_in_place = true;
    Ok(())
}
