//! Transfers cut into chunks (the candidates with [`super::Channels::Split`]): every
//! transfer of several plan chunks becomes one transfer per chunk, in order, before the
//! channels per chunk are given (`channels::by_chunk`).
//!
//! Why: a fused op forwards exactly what it received. A rank that receives a shard and
//! passes on one chunk of it (the 2D torus going from its rows to its columns), or sends
//! what it received together with chunks it held (the torus going back to its rows,
//! Bruck's all-to-all at every step), can fuse nothing while a transfer is one message;
//! cut into chunks, each forwarded chunk's receive fuses with its send and the rest travel
//! beside it on their own channels. The cost model weighs the extra messages against the
//! rounds saved, as for every candidate.
//!
//! Invariant: a send and the receive that gets it are cut alike (both have the same count,
//! and both or neither belong to a switch group), and the pieces keep the transfer's place
//! in each rank's list, so the k-th send of every connection still pairs with its k-th
//! receive and the plan moves the same chunks between the same ranks.

use super::ROp;
use crate::plan::Slice;

/// Whether `op` is a transfer `split_transfers` cuts: one side of a transfer of several
/// chunks that is not a switch-group op (those stay one multicast or load-reduce).
fn cut(op: &ROp) -> bool {
    op.count > 1 && op.group.is_none() && (op.send.is_some() || op.recv.is_some())
}

/// `op` as one op per chunk, in order, each moving that chunk of its source and destination.
pub(super) fn pieces(op: &ROp) -> impl Iterator<Item = ROp> + '_ {
    (0..u64::from(op.count)).map(move |i| {
        let at = |s: Option<Slice>| s.map(|Slice(b, o)| Slice(b, o + i));
        ROp {
            src: at(op.src),
            dst: at(op.dst),
            count: 1,
            ..op.clone()
        }
    })
}

/// `ranks` with every transfer of several chunks cut into transfers of one, in place; `None`
/// when no transfer moves more than one chunk.
pub(super) fn split_transfers(ranks: &[Vec<ROp>]) -> Option<Vec<Vec<ROp>>> {
    if !ranks.iter().flatten().any(cut) {
        return None;
    }
    let len = |op: &ROp| if cut(op) { op.count as usize } else { 1 };
    Some(
        ranks
            .iter()
            .map(|ops| {
                let mut out = Vec::with_capacity(ops.iter().map(len).sum());
                for op in ops {
                    if cut(op) {
                        out.extend(pieces(op));
                    } else {
                        out.push(op.clone());
                    }
                }
                out
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{OpKind, Via};

    fn transfer(kind: OpKind, count: u32, send: bool, group: Option<u32>) -> ROp {
        let peer = Some((1, Via::Switch));
        ROp {
            kind,
            src: send.then_some(Slice(0, 4)),
            dst: (!send).then_some(Slice(1, 8)),
            count,
            send: if send { peer } else { None },
            recv: if send { None } else { peer },
            channel: 0,
            source: 3,
            group,
            protocol: None,
        }
    }

    #[test]
    fn transfers_of_several_chunks_are_cut_in_place_and_the_rest_kept() {
        let local = ROp::local(OpKind::Copy, (Slice(0, 0), Slice(1, 0)), 3, 0, 0, None);
        let ranks = vec![
            vec![
                local.clone(),
                transfer(OpKind::Send, 3, true, None),
                transfer(OpKind::Send, 2, true, Some(0)),
            ],
            vec![transfer(OpKind::Recv, 3, false, None)],
        ];
        let cut = split_transfers(&ranks).expect("a transfer of 3 chunks is cut");
        // The local copy and the switch-group send stay whole, around the three pieces.
        let shape: Vec<_> = cut[0].iter().map(|o| (o.kind, o.count, o.src)).collect();
        assert_eq!(
            shape,
            [
                (OpKind::Copy, 3, Some(Slice(0, 0))),
                (OpKind::Send, 1, Some(Slice(0, 4))),
                (OpKind::Send, 1, Some(Slice(0, 5))),
                (OpKind::Send, 1, Some(Slice(0, 6))),
                (OpKind::Send, 2, Some(Slice(0, 4))),
            ]
        );
        let dsts: Vec<_> = cut[1].iter().map(|o| (o.count, o.dst, o.source)).collect();
        assert_eq!(
            dsts,
            [
                (1, Some(Slice(1, 8)), 3),
                (1, Some(Slice(1, 9)), 3),
                (1, Some(Slice(1, 10)), 3)
            ]
        );
    }

    #[test]
    fn nothing_to_cut_is_none() {
        let ranks = vec![vec![
            transfer(OpKind::Send, 1, true, None),
            transfer(OpKind::Send, 4, true, Some(2)),
        ]];
        assert!(split_transfers(&ranks).is_none());
    }
}
