//! Hand-built plans for the checks' tests: `input` and `output` have 4 chunks,
//! [`Builder::op`] moves their chunk 0 ([`Builder::op_with`] takes slices), and every op gets
//! its own source line `t.coll:L:1`, L counting from 1 in the order ops are added, so
//! messages can be matched against it.

use crate::elaborate::Protocol;
use crate::plan::{
    Block, BufferDecl, Collective, Dep, Op, OpKind, PLAN_VERSION, Plan, RankPlan, Slice,
};
use coll_lang::builtins::CollectiveKind;

#[derive(Debug)]
pub(crate) struct Builder {
    plan: Plan,
}

impl Builder {
    pub(crate) fn new(ranks: u32) -> Builder {
        Builder {
            plan: Plan {
                version: PLAN_VERSION,
                name: "test".into(),
                collective: Collective(CollectiveKind::AllReduce),
                inplace: false,
                ranks,
                topology: format!("nvswitch:{ranks}"),
                protocol: Protocol::Simple,
                chunk_factor: 1,
                buffers: vec![
                    BufferDecl {
                        name: "input".into(),
                        chunks: 4,
                    },
                    BufferDecl {
                        name: "output".into(),
                        chunks: 4,
                    },
                ],
                sources: Vec::new(),
                gpus: (0..ranks)
                    .map(|rank| RankPlan {
                        rank,
                        blocks: Vec::new(),
                    })
                    .collect(),
                schedule: None,
            },
        }
    }

    pub(crate) fn chunk_factor(&mut self, k: u64) -> &mut Builder {
        self.plan.chunk_factor = k;
        self
    }

    /// Adds a scratch buffer of `chunks` chunks; returns its buffer index.
    pub(crate) fn scratch(&mut self, name: &str, chunks: u64) -> u32 {
        self.plan.buffers.push(BufferDecl {
            name: name.into(),
            chunks,
        });
        (self.plan.buffers.len() - 1) as u32
    }

    /// Adds a block to `rank`; returns its id.
    pub(crate) fn block(
        &mut self,
        rank: u32,
        channel: u32,
        send_peer: Option<u32>,
        recv_peer: Option<u32>,
    ) -> u32 {
        let blocks = &mut self.plan.gpus[rank as usize].blocks;
        let id = blocks.len() as u32;
        blocks.push(Block {
            id,
            channel,
            send_peer,
            recv_peer,
            send_via: None,
            recv_via: None,
            protocol: None,
            send_also: Vec::new(),
            recv_also: Vec::new(),
            ops: Vec::new(),
        });
        id
    }

    /// Appends an op of `kind` to a block; returns its index in the block.
    pub(crate) fn op(&mut self, rank: u32, block: u32, kind: OpKind, deps: &[(u32, u32)]) -> u32 {
        let src = kind.needs_src().then_some(Slice(0, 0));
        let dst = kind.needs_dst().then_some(Slice(1, 0));
        self.op_with(rank, block, kind, src, dst, 1, deps)
    }

    /// Appends an op with explicit slices and count.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn op_with(
        &mut self,
        rank: u32,
        block: u32,
        kind: OpKind,
        src: Option<Slice>,
        dst: Option<Slice>,
        count: u32,
        deps: &[(u32, u32)],
    ) -> u32 {
        let source = self.plan.sources.len() as u32;
        self.plan.sources.push(format!("t.coll:{}:1", source + 1));
        let ops = &mut self.plan.gpus[rank as usize].blocks[block as usize].ops;
        ops.push(Op {
            kind,
            src,
            dst,
            count,
            deps: deps.iter().map(|&(b, o)| Dep(b, o)).collect(),
            source,
            group: None,
        });
        (ops.len() - 1) as u32
    }

    /// The plan as built, valid or not.
    pub(crate) fn unchecked(&self) -> Plan {
        self.plan.clone()
    }

    /// The plan, which must pass [`Plan::validate`].
    pub(crate) fn build(&self) -> Plan {
        if let Err(e) = self.plan.validate() {
            panic!("test plan is invalid: {e}");
        }
        self.plan.clone()
    }
}

/// Ring allreduce on one channel: rank `r` sends to `r + 1` and receives from `r - 1` in one
/// block of `2n - 1` ops (send, n-2 recv-reduce-sends, recv-reduce-copy-send, n-2
/// recv-copy-sends, recv), as NCCL's ring runs it.
pub(crate) fn ring(n: u32) -> Plan {
    let mut b = Builder::new(n);
    // One source line for the whole ring keeps the plan small at n = 1024.
    b.plan.sources.push("ring.coll:1:1".into());
    for r in 0..n {
        let blk = b.block(r, 0, Some((r + 1) % n), Some((r + n - 1) % n));
        let mut kinds = vec![OpKind::Send];
        kinds.extend(std::iter::repeat_n(OpKind::RecvReduceSend, n as usize - 2));
        kinds.push(OpKind::RecvReduceCopySend);
        kinds.extend(std::iter::repeat_n(OpKind::RecvCopySend, n as usize - 2));
        kinds.push(OpKind::Recv);
        let ops = &mut b.plan.gpus[r as usize].blocks[blk as usize].ops;
        ops.extend(kinds.into_iter().map(|kind| Op {
            kind,
            src: kind.needs_src().then_some(Slice(0, 0)),
            dst: kind.needs_dst().then_some(Slice(1, 0)),
            count: 1,
            deps: Box::default(),
            source: 0,
            group: None,
        }));
    }
    b.build()
}

/// The shipped algorithms (`algorithms/*.coll`), in name order.
pub fn shipped_algorithms() -> Vec<std::path::PathBuf> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../algorithms");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .expect("the algorithms folder")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "coll"))
        .collect();
    paths.sort();
    paths
}
