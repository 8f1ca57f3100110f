//! Hand-built plans for the dump and cost-model tests (test builds only). They are built
//! here, not lowered from `.coll` files, so these tests do not move when lowering does.
//! Every plan built here passes [`Plan::validate`].

use crate::elaborate::Protocol;
use crate::plan::{
    Block, BufferDecl, Collective, Dep, Op, OpKind, PLAN_VERSION, Plan, RankPlan, Slice, Via,
};
use coll_lang::builtins::CollectiveKind;

const INPUT: u32 = 0;

fn op(kind: OpKind, src: Option<Slice>, dst: Option<Slice>, source: u32) -> Op {
    Op {
        kind,
        src,
        dst,
        count: 1,
        deps: Box::default(),
        source,
        group: None,
    }
}

/// Ring allreduce over `n >= 2` ranks, in place, one chunk per rank per slice: one block
/// per rank sending to `r+1` and receiving from `r-1` on channel 0, `2(n-1)` transfers each
/// (send, `n-2` recv-reduce-send, recv-reduce-copy-send, `n-2` recv-copy-send, recv).
pub(crate) fn ring_allreduce(n: u32, via: Via) -> Plan {
    let c = |x: i64| Some(Slice(INPUT, x.rem_euclid(i64::from(n)) as u64));
    let mut gpus = Vec::new();
    for r in 0..n {
        let ri = i64::from(r);
        let mut ops = vec![op(OpKind::Send, c(ri - 1), None, 0)];
        for s in 1..i64::from(n) - 1 {
            ops.push(op(OpKind::RecvReduceSend, c(ri - 1 - s), None, 0));
        }
        ops.push(op(OpKind::RecvReduceCopySend, c(ri), c(ri), 0));
        for t in 0..i64::from(n) - 2 {
            ops.push(op(OpKind::RecvCopySend, None, c(ri - 1 - t), 1));
        }
        ops.push(op(OpKind::Recv, None, c(ri + 1), 1));
        gpus.push(RankPlan {
            rank: r,
            blocks: vec![Block {
                id: 0,
                channel: 0,
                send_peer: Some((r + 1) % n),
                recv_peer: Some((r + n - 1) % n),
                send_via: Some(via),
                recv_via: Some(via),
                protocol: None,
                send_also: Vec::new(),
                recv_also: Vec::new(),
                ops,
            }],
        });
    }
    Plan {
        version: PLAN_VERSION,
        name: "ring".into(),
        collective: Collective(CollectiveKind::AllReduce),
        inplace: true,
        ranks: n,
        topology: format!("nvswitch:{n}"),
        protocol: Protocol::Simple,
        chunk_factor: u64::from(n),
        buffers: vec![
            BufferDecl {
                name: "input".into(),
                chunks: u64::from(n),
            },
            BufferDecl {
                name: "output".into(),
                chunks: u64::from(n),
            },
        ],
        sources: vec!["ring.coll:5:5".into(), "ring.coll:8:5".into()],
        gpus,
        schedule: None,
    }
}

/// [`ring_allreduce`] for 3 ranks plus, per rank, a second block of local work with deps
/// on the ring block: copy the rank's own chunk to scratch once it is reduced (after
/// `b0:2`), then reduce it into the output after the last receive (`b0:4`); rank 0's
/// reduce carries group id 1 and its block the LL protocol.
pub(crate) fn ring3() -> Plan {
    let mut plan = ring_allreduce(3, Via::Switch);
    plan.buffers.push(BufferDecl {
        name: "tmp".into(),
        chunks: 1,
    });
    plan.sources.push("ring.coll:11:3".into());
    let tmp = plan.buffers.len() as u32 - 1;
    for (r, gpu) in plan.gpus.iter_mut().enumerate() {
        let own = Some(Slice(INPUT, r as u64));
        let mut copy = op(OpKind::Copy, own, Some(Slice(tmp, 0)), 2);
        copy.deps = Box::new([Dep(0, 2)]);
        let mut reduce = op(
            OpKind::Reduce,
            Some(Slice(tmp, 0)),
            Some(Slice(1, r as u64)),
            2,
        );
        reduce.deps = Box::new([Dep(0, 4), Dep(0, 3)]);
        if r == 0 {
            reduce.group = Some(1);
        }
        gpu.blocks.push(Block {
            id: 1,
            channel: 1,
            send_peer: None,
            recv_peer: None,
            send_via: None,
            recv_via: None,
            protocol: (r == 0).then_some(Protocol::Ll),
            send_also: Vec::new(),
            recv_also: Vec::new(),
            ops: vec![copy, reduce],
        });
    }
    plan
}

/// Allreduce of one chunk on three ranks through a head of several peers (as
/// tests/inputs/plans/ok_head_several_peers_3.json): rank 0's one block receives from ranks 1
/// and 2, combines, stores and sends the sum to both in one recv-reduce-copy-send; ranks 1
/// and 2 send their chunk and receive the sum.
pub(crate) fn head_of_three() -> Plan {
    let mut plan = chain_broadcast(3, true);
    plan.name = "head_of_three".into();
    plan.collective = Collective(CollectiveKind::AllReduce);
    plan.sources = vec!["head.coll:1:1".into(), "head.coll:2:1".into()];
    let chunk = Some(Slice(INPUT, 0));
    let block = |send: u32, recv: u32, ops: Vec<Op>| Block {
        id: 0,
        channel: 0,
        send_peer: Some(send),
        recv_peer: Some(recv),
        send_via: Some(Via::Switch),
        recv_via: Some(Via::Switch),
        protocol: None,
        send_also: Vec::new(),
        recv_also: Vec::new(),
        ops,
    };
    let mut head = block(1, 1, vec![op(OpKind::RecvReduceCopySend, chunk, chunk, 0)]);
    head.send_also = vec![2];
    head.recv_also = vec![2];
    let leaf = || {
        block(
            0,
            0,
            vec![
                op(OpKind::Send, chunk, None, 0),
                op(OpKind::Recv, None, chunk, 1),
            ],
        )
    };
    plan.gpus = vec![
        RankPlan {
            rank: 0,
            blocks: vec![head],
        },
        RankPlan {
            rank: 1,
            blocks: vec![leaf()],
        },
        RankPlan {
            rank: 2,
            blocks: vec![leaf()],
        },
    ];
    plan
}

#[test]
fn fixtures_are_valid_plans() {
    for n in 2..=8 {
        assert_eq!(ring_allreduce(n, Via::Switch).validate(), Ok(()));
    }
    assert_eq!(ring3().validate(), Ok(()));
    assert_eq!(head_of_three().validate(), Ok(()));
}

/// Broadcast of one chunk from rank 0 down the chain `0 -> 1 -> ... -> n-1` (`n >= 3`), in
/// place. `fused`: each middle rank forwards with one receive-copy-send op; else it receives
/// in one block and sends from another after it (store and forward), with a dep.
pub(crate) fn chain_broadcast(n: u32, fused: bool) -> Plan {
    let chunk = Some(Slice(INPUT, 0));
    let block = |id: u32, send: Option<u32>, recv: Option<u32>, ops: Vec<Op>| Block {
        id,
        channel: 0,
        send_peer: send,
        recv_peer: recv,
        send_via: send.map(|_| Via::Switch),
        recv_via: recv.map(|_| Via::Switch),
        protocol: None,
        send_also: Vec::new(),
        recv_also: Vec::new(),
        ops,
    };
    let mut gpus = Vec::new();
    for r in 0..n {
        let blocks = if r == 0 {
            vec![block(
                0,
                Some(1),
                None,
                vec![op(OpKind::Send, chunk, None, 0)],
            )]
        } else if r == n - 1 {
            vec![block(
                0,
                None,
                Some(r - 1),
                vec![op(OpKind::Recv, None, chunk, 0)],
            )]
        } else if fused {
            vec![block(
                0,
                Some(r + 1),
                Some(r - 1),
                vec![op(OpKind::RecvCopySend, None, chunk, 0)],
            )]
        } else {
            let mut send = op(OpKind::Send, chunk, None, 0);
            send.deps = Box::new([Dep(0, 0)]);
            vec![
                block(0, None, Some(r - 1), vec![op(OpKind::Recv, None, chunk, 0)]),
                block(1, Some(r + 1), None, vec![send]),
            ]
        };
        gpus.push(RankPlan { rank: r, blocks });
    }
    Plan {
        version: PLAN_VERSION,
        name: "chain".into(),
        collective: Collective(CollectiveKind::Broadcast),
        inplace: true,
        ranks: n,
        topology: format!("nvswitch:{n}"),
        protocol: Protocol::Simple,
        chunk_factor: 1,
        buffers: vec![
            BufferDecl {
                name: "input".into(),
                chunks: 1,
            },
            BufferDecl {
                name: "output".into(),
                chunks: 1,
            },
        ],
        sources: vec!["chain.coll:3:5".into()],
        gpus,
        schedule: None,
    }
}

/// Two ranks; rank 0 sends chunk `c` to rank 1 on channel `c` for `c` in 0 and 1, each
/// channel a block of its own on both ranks (so the two transfers share the link from rank
/// 0 to rank 1 whenever they overlap in time).
pub(crate) fn two_channel_sends() -> Plan {
    let mut plan = chain_broadcast(3, true);
    plan.name = "two-channels".into();
    plan.ranks = 2;
    plan.topology = "nvswitch:2".into();
    plan.chunk_factor = 2;
    for b in &mut plan.buffers {
        b.chunks = 2;
    }
    let side = |c: u64, send: bool| {
        let chunk = Some(Slice(INPUT, c));
        Block {
            id: c as u32,
            channel: c as u32,
            send_peer: send.then_some(1),
            recv_peer: (!send).then_some(0),
            send_via: send.then_some(Via::Switch),
            recv_via: (!send).then_some(Via::Switch),
            protocol: None,
            send_also: Vec::new(),
            recv_also: Vec::new(),
            ops: vec![if send {
                op(OpKind::Send, chunk, None, 0)
            } else {
                op(OpKind::Recv, None, chunk, 0)
            }],
        }
    };
    plan.collective = Collective(CollectiveKind::Custom);
    plan.gpus = vec![
        RankPlan {
            rank: 0,
            blocks: vec![side(0, true), side(1, true)],
        },
        RankPlan {
            rank: 1,
            blocks: vec![side(0, false), side(1, false)],
        },
    ];
    plan
}
