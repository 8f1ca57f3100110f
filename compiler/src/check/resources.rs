//! Resources: what each rank of a plan needs (thread blocks, ops per block, connections,
//! scratch and staging memory), and the check against the limits of a GPU and the user.
//!
//! Memory per rank, for `slots` slots of `slot_bytes` bytes per connection end and a message
//! of `bytes` = NCCL count x element size, is reported as `a + b x bytes` ([`ScratchNeed`]):
//! - `a`, staging: `connections x slots x slot_bytes`, where `connections` counts connection
//!   *ends* on the rank, one per peer of each block: a block of several peers
//!   ([`plan::Block::send_also`], [`plan::Block::recv_also`]) has an end per peer, each
//!   with its own ring.
//!   An executor allocates at most one ring of `slots` slots per end (the receiving end's
//!   ring is the one peers write into; a sending end needs its own only when a proxy stages
//!   data, as over the network), so this bounds staging for every transport.
//! - `b`, scratch: scratch elements per count element, the sum of the scratch buffers'
//!   plan chunks over [`Plan::chunk_factor`], an exact [`Fraction`]. Scratch buffers are
//!   declared once for all ranks, so `b` is the same on every rank.
//!
//! `b x bytes` is exact when the count is a multiple of `chunk_factor`. Otherwise chunks
//! differ in size by one element, and [`Plan::scratch_bytes`], the figure executors allocate,
//! holds every scratch chunk at the largest size (less than one element per scratch chunk
//! above `b x bytes`) and, at counts where the plan runs padded
//! ([`crate::plan::sizes`]), the padded copies of `input` and `output`;
//! [`ScratchNeed::bytes`] uses that exact figure.

use crate::plan::{self, Plan};
use std::fmt;

/// Limits a plan must fit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Thread blocks per rank (one CTA each, all resident at once: an H100 has 132 SMs, an
    /// A100 108, so 108 fits every supported GPU).
    pub max_blocks: u32,
    /// Ops in one block (the interpreter's instruction index is bounded).
    pub max_ops_per_block: u32,
    /// Scratch plan chunks per rank, if the user bounds them.
    pub max_scratch_chunks: Option<u64>,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_blocks: 108,
            max_ops_per_block: 65536,
            max_scratch_chunks: None,
        }
    }
}

/// A non-negative fraction in lowest terms; a zero denominator never appears (`0/1` stands
/// in for a fraction over zero, matching [`crate::plan::chunk_range`], which gives empty
/// ranges when there are no chunks).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fraction {
    pub num: u64,
    pub den: u64,
}

impl Fraction {
    pub fn new(num: u64, den: u64) -> Fraction {
        if den == 0 {
            return Fraction { num: 0, den: 1 };
        }
        let g = gcd(num, den);
        Fraction {
            num: num / g,
            den: den / g,
        }
    }

    pub fn to_f64(self) -> f64 {
        self.num as f64 / self.den as f64
    }

    /// `self x n`, rounded up (saturating).
    pub fn mul_ceil(self, n: u64) -> u64 {
        let p = u128::from(self.num) * u128::from(n);
        u64::try_from(p.div_ceil(u128::from(self.den))).unwrap_or(u64::MAX)
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}

impl fmt::Display for Fraction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.den == 1 {
            write!(f, "{}", self.num)
        } else {
            write!(f, "{}/{}", self.num, self.den)
        }
    }
}

/// What one rank uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankResources {
    pub rank: u32,
    /// Thread blocks.
    pub blocks: u32,
    /// Ops in all blocks.
    pub ops: u64,
    /// Ops in the largest block, and that block (`None` without blocks).
    pub max_ops: u64,
    pub max_ops_block: Option<u32>,
    /// Scratch plan chunks (all scratch buffers).
    pub scratch_chunks: u64,
    /// The send peers, and the recv peers, of all the rank's blocks: its connection ends.
    pub send_connections: u32,
    pub recv_connections: u32,
}

impl RankResources {
    /// Connection ends on this rank (sending plus receiving).
    pub fn connections(&self) -> u32 {
        self.send_connections + self.recv_connections
    }

    /// This rank's memory as `a + b x bytes` (see the module docs).
    pub fn need(&self, scratch_per_element: Fraction, slots: u32, slot_bytes: u64) -> ScratchNeed {
        ScratchNeed {
            staging_bytes: u64::from(self.connections())
                .saturating_mul(u64::from(slots))
                .saturating_mul(slot_bytes),
            scratch_per_byte: scratch_per_element,
        }
    }
}

/// Memory of one rank as `a + b x bytes`, `bytes` being NCCL count x element size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScratchNeed {
    /// `a`: connection staging, independent of the message size.
    pub staging_bytes: u64,
    /// `b`: scratch bytes per message byte (= scratch elements per count element).
    pub scratch_per_byte: Fraction,
}

impl ScratchNeed {
    /// Exact bytes for `count` elements of `elem_size` bytes: staging plus
    /// [`Plan::scratch_bytes`].
    pub fn bytes(&self, plan: &Plan, count: u64, elem_size: u64) -> u64 {
        self.staging_bytes
            .saturating_add(plan.scratch_bytes(count, elem_size))
    }
}

impl fmt::Display for ScratchNeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} + {} × bytes",
            self.staging_bytes, self.scratch_per_byte
        )
    }
}

/// What every rank of a plan uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resources {
    pub ranks: Vec<RankResources>,
    /// Scratch elements per NCCL count element (`b`), the same on every rank.
    pub scratch_per_element: Fraction,
}

impl Resources {
    /// Rank `rank`'s memory as `a + b x bytes`.
    pub fn need(&self, rank: u32, slots: u32, slot_bytes: u64) -> Option<ScratchNeed> {
        self.ranks
            .get(rank as usize)
            .map(|r| r.need(self.scratch_per_element, slots, slot_bytes))
    }

    /// The largest need of any rank (all ranks share `b`, so the one with the most
    /// connections); `0 + b x bytes` for a plan without ranks.
    pub fn max_need(&self, slots: u32, slot_bytes: u64) -> ScratchNeed {
        self.ranks
            .iter()
            .map(|r| r.need(self.scratch_per_element, slots, slot_bytes))
            .max_by_key(|n| n.staging_bytes)
            .unwrap_or(ScratchNeed {
                staging_bytes: 0,
                scratch_per_byte: self.scratch_per_element,
            })
    }

    pub fn max_blocks(&self) -> u32 {
        self.ranks.iter().map(|r| r.blocks).max().unwrap_or(0)
    }

    pub fn max_ops_per_block(&self) -> u64 {
        self.ranks.iter().map(|r| r.max_ops).max().unwrap_or(0)
    }
}

/// A limit a plan exceeds; each names the rank, and the block or op where it can.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResourceError {
    #[error(
        "rank {rank} uses {blocks} thread blocks; the limit is {limit} (--max-blocks){}",
        first_over(*.limit, .at)
    )]
    TooManyBlocks {
        rank: u32,
        blocks: u32,
        limit: u32,
        /// Source of the first op of block `limit`, the first block over the limit.
        at: Option<String>,
    },
    #[error(
        "rank {rank}, block {block}{} has {ops} ops; the limit is {limit} (--max-ops-per-block)",
        starting(.at)
    )]
    TooManyOps {
        rank: u32,
        block: u32,
        ops: u64,
        limit: u32,
        /// Source of the block's first op.
        at: Option<String>,
    },
    #[error(
        "rank {rank} needs {chunks} scratch chunks; the limit is {limit} (--max-scratch-chunks){}",
        beyond(*.limit, .at)
    )]
    TooMuchScratch {
        rank: u32,
        chunks: u64,
        limit: u64,
        /// Location of the first op (in rank, block, op order) that touches a scratch chunk
        /// at or past the limit, counting all scratch buffers as one row; `None` when the
        /// chunks past the limit are declared but never touched.
        at: Option<String>,
    },
}

fn first_over(limit: u32, at: &Option<String>) -> String {
    match at {
        Some(src) => format!("; block {limit}, the first over it, starts at {src}"),
        None => String::new(),
    }
}

fn starting(at: &Option<String>) -> String {
    match at {
        Some(src) => format!(" (starting at {src})"),
        None => String::new(),
    }
}

fn beyond(limit: u64, at: &Option<String>) -> String {
    match at {
        Some(loc) => format!("; {loc} is the first to use scratch chunk {limit} or later"),
        None => String::new(),
    }
}

/// Counts what every rank of `plan` uses.
pub fn resources(plan: &Plan) -> Resources {
    let scratch_chunks = plan
        .buffers
        .iter()
        .skip(2)
        .fold(0u64, |sum, b| sum.saturating_add(b.chunks));
    let ranks = plan
        .gpus
        .iter()
        .enumerate()
        .map(|(r, gpu)| {
            let largest = gpu
                .blocks
                .iter()
                .enumerate()
                // The first of equally large blocks, for stable reports.
                .max_by_key(|&(i, b)| (b.ops.len(), std::cmp::Reverse(i)));
            // Every peer of a block is a connection end of its own.
            let count = |f: fn(&plan::Block) -> usize| {
                u32::try_from(gpu.blocks.iter().map(f).sum::<usize>()).unwrap_or(u32::MAX)
            };
            RankResources {
                rank: r as u32,
                blocks: u32::try_from(gpu.blocks.len()).unwrap_or(u32::MAX),
                ops: gpu.blocks.iter().map(|b| b.ops.len() as u64).sum(),
                max_ops: largest.map_or(0, |(_, b)| b.ops.len() as u64),
                max_ops_block: largest.map(|(i, _)| i as u32),
                scratch_chunks,
                send_connections: count(|b| b.send_peers().count()),
                recv_connections: count(|b| b.recv_peers().count()),
            }
        })
        .collect();
    Resources {
        ranks,
        scratch_per_element: Fraction::new(scratch_chunks, plan.chunk_factor),
    }
}

/// [`resources`], or the first limit exceeded, in rank order (per rank: blocks, then ops per
/// block), then scratch.
pub fn check_resources(plan: &Plan, limits: &Limits) -> Result<Resources, ResourceError> {
    let res = resources(plan);
    let first_op_source = |rank: u32, block: u32| {
        plan.gpus
            .get(rank as usize)
            .and_then(|g| g.blocks.get(block as usize))
            .and_then(|b| b.ops.first())
            .and_then(|op| plan.sources.get(op.source as usize))
            .cloned()
    };
    for r in &res.ranks {
        if r.blocks > limits.max_blocks {
            return Err(ResourceError::TooManyBlocks {
                rank: r.rank,
                blocks: r.blocks,
                limit: limits.max_blocks,
                at: first_op_source(r.rank, limits.max_blocks),
            });
        }
        let blocks = plan
            .gpus
            .get(r.rank as usize)
            .map_or(&[][..], |g| &g.blocks);
        for (b, block) in blocks.iter().enumerate() {
            let ops = block.ops.len() as u64;
            if ops > u64::from(limits.max_ops_per_block) {
                return Err(ResourceError::TooManyOps {
                    rank: r.rank,
                    block: b as u32,
                    ops,
                    limit: limits.max_ops_per_block,
                    at: first_op_source(r.rank, b as u32),
                });
            }
        }
    }
    // Every rank declares the same scratch, so rank 0 stands for all unless an op shows
    // which rank actually reaches past the limit.
    if let Some(limit) = limits.max_scratch_chunks
        && let Some(over) = res.ranks.first().filter(|r| r.scratch_chunks > limit)
    {
        let (rank, at) = match first_scratch_use_beyond(plan, limit) {
            Some((rank, loc)) => (rank, Some(loc)),
            None => (over.rank, None),
        };
        return Err(ResourceError::TooMuchScratch {
            rank,
            chunks: over.scratch_chunks,
            limit,
            at,
        });
    }
    Ok(res)
}

/// The rank and location of the first op touching a scratch chunk at index `limit` or
/// later, with scratch buffers laid end to end in declaration order.
fn first_scratch_use_beyond(plan: &Plan, limit: u64) -> Option<(u32, String)> {
    // Buffer index -> the scratch row index of its chunk 0 (input and output have none).
    let mut starts = vec![None; plan.buffers.len()];
    let mut at = 0u64;
    for (i, b) in plan.buffers.iter().enumerate().skip(2) {
        starts[i] = Some(at);
        at = at.saturating_add(b.chunks);
    }
    for (r, gpu) in plan.gpus.iter().enumerate() {
        for (b, block) in gpu.blocks.iter().enumerate() {
            for (i, op) in block.ops.iter().enumerate() {
                let beyond = [op.src, op.dst].into_iter().flatten().any(|s| {
                    starts
                        .get(s.buffer() as usize)
                        .copied()
                        .flatten()
                        .is_some_and(|start| {
                            start
                                .saturating_add(s.offset())
                                .saturating_add(u64::from(op.count))
                                > limit
                        })
                });
                if beyond {
                    let (r, b, i) = (r as u32, b as u32, i as u32);
                    return Some((r, plan::location(plan, r, b, Some(i))));
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::testing::Builder;
    use crate::plan::OpKind::{Copy, Recv, Send};
    use crate::plan::Slice;

    /// Two ranks, chunk factor 4, scratch `tmp` (6 chunks) and `acc` (2 chunks). Rank 0 has
    /// a sending block of 3 ops and a local block of 1; rank 1 a receiving block of 3 ops
    /// whose last op writes `acc` chunk 1, the last scratch chunk.
    fn plan_with_scratch() -> Plan {
        let mut b = Builder::new(2);
        b.chunk_factor(4);
        let tmp = b.scratch("tmp", 6);
        let acc = b.scratch("acc", 2);
        let s = b.block(0, 0, Some(1), None);
        let l = b.block(0, 0, None, None);
        let r = b.block(1, 0, None, Some(0));
        for _ in 0..3 {
            b.op(0, s, Send, &[]); // t.coll:1:1 .. 3:1
        }
        b.op_with(0, l, Copy, Some(Slice(0, 0)), Some(Slice(tmp, 2)), 4, &[]); // t.coll:4:1
        b.op(1, r, Recv, &[]); // t.coll:5:1
        b.op(1, r, Recv, &[]);
        b.op_with(1, r, Recv, None, Some(Slice(acc, 1)), 1, &[]); // t.coll:7:1
        b.build()
    }

    #[test]
    fn every_peer_of_a_block_is_a_connection_end() {
        // Rank 0 receives from ranks 1..4 and sends to them in one block: four ends a side.
        let mut b = Builder::new(5);
        let head = b.block(0, 0, Some(1), Some(1));
        b.op(0, head, crate::plan::OpKind::RecvReduceCopySend, &[]);
        for leaf in 1..5 {
            let x = b.block(leaf, 0, Some(0), Some(0));
            b.op(leaf, x, Send, &[]);
            b.op(leaf, x, Recv, &[]);
        }
        let mut plan = b.unchecked();
        plan.gpus[0].blocks[0].send_also = vec![2, 3, 4];
        plan.gpus[0].blocks[0].recv_also = vec![2, 3, 4];
        plan.validate().unwrap_or_else(|e| panic!("{e}"));
        let res = resources(&plan);
        assert_eq!(
            (res.ranks[0].send_connections, res.ranks[0].recv_connections),
            (4, 4)
        );
        assert_eq!(res.ranks[0].connections(), 8);
        assert_eq!(res.ranks[3].connections(), 2);
        assert_eq!(res.max_need(2, 100).staging_bytes, 8 * 2 * 100);
    }

    #[test]
    fn counts_blocks_ops_connections_and_scratch() {
        let plan = plan_with_scratch();
        let res = resources(&plan);
        assert_eq!(
            res.ranks[0],
            RankResources {
                rank: 0,
                blocks: 2,
                ops: 4,
                max_ops: 3,
                max_ops_block: Some(0),
                scratch_chunks: 8,
                send_connections: 1,
                recv_connections: 0,
            }
        );
        assert_eq!(res.ranks[1].connections(), 1);
        assert_eq!(res.max_blocks(), 2);
        assert_eq!(res.max_ops_per_block(), 3);
        // 8 scratch chunks over a chunk factor of 4: two scratch elements per element.
        assert_eq!(res.scratch_per_element, Fraction { num: 2, den: 1 });

        let need = res.max_need(8, 1 << 20);
        assert_eq!(need.staging_bytes, 8 << 20);
        assert_eq!(need.to_string(), "8388608 + 2 × bytes");
        assert_eq!(res.need(1, 8, 1 << 20), Some(need));
        assert_eq!(res.need(2, 8, 1 << 20), None);
        // Exact for counts the chunk factor divides; Plan::scratch_bytes otherwise.
        assert_eq!(need.bytes(&plan, 1024, 4), (8 << 20) + 2 * 1024 * 4);
        assert_eq!(
            plan.scratch_bytes(1024, 4),
            need.scratch_per_byte.mul_ceil(1024 * 4)
        );
        // At counts the chunk factor does not divide, the copy of input chunks 0..4 to
        // `tmp` chunks 2..6 joins chunks of different sizes, so the plan runs padded: the 8
        // scratch chunks at the largest size (256 elements at 1021..1023), and the padded
        // input and output (4 chunks of 256 each).
        for count in 1021..1024 {
            assert_eq!(plan.scratch_bytes(count, 4), (8 + 4 + 4) * 256 * 4);
        }
        assert!(plan.scratch_bytes(1023, 4) > need.scratch_per_byte.mul_ceil(1023 * 4));
    }

    #[test]
    fn fractions_are_reduced() {
        assert_eq!(Fraction::new(6, 4), Fraction { num: 3, den: 2 });
        assert_eq!(Fraction::new(6, 4).to_string(), "3/2");
        assert_eq!(Fraction::new(0, 4), Fraction { num: 0, den: 1 });
        assert_eq!(Fraction::new(5, 0), Fraction { num: 0, den: 1 });
        assert_eq!(Fraction::new(3, 2).mul_ceil(3), 5);
        assert_eq!(Fraction::new(3, 2).to_f64(), 1.5);
    }

    #[test]
    fn a_plan_within_the_limits_passes() {
        let plan = plan_with_scratch();
        assert!(check_resources(&plan, &Limits::default()).is_ok());
        let exact = Limits {
            max_blocks: 2,
            max_ops_per_block: 3,
            max_scratch_chunks: Some(8),
        };
        assert_eq!(check_resources(&plan, &exact), Ok(resources(&plan)));
    }

    #[test]
    fn too_many_blocks() {
        let limits = Limits {
            max_blocks: 1,
            ..Limits::default()
        };
        let e = check_resources(&plan_with_scratch(), &limits).err();
        assert_eq!(
            e.map(|e| e.to_string()).as_deref(),
            Some(
                "rank 0 uses 2 thread blocks; the limit is 1 (--max-blocks); \
                 block 1, the first over it, starts at t.coll:4:1"
            )
        );
    }

    #[test]
    fn too_many_ops_in_a_block() {
        let limits = Limits {
            max_ops_per_block: 2,
            ..Limits::default()
        };
        let e = check_resources(&plan_with_scratch(), &limits);
        assert_eq!(
            e,
            Err(ResourceError::TooManyOps {
                rank: 0,
                block: 0,
                ops: 3,
                limit: 2,
                at: Some("t.coll:1:1".into()),
            })
        );
        assert_eq!(
            e.err().map(|e| e.to_string()).as_deref(),
            Some(
                "rank 0, block 0 (starting at t.coll:1:1) has 3 ops; \
                 the limit is 2 (--max-ops-per-block)"
            )
        );
    }

    #[test]
    fn too_much_scratch() {
        let plan = plan_with_scratch();
        let limit = |chunks| Limits {
            max_scratch_chunks: Some(chunks),
            ..Limits::default()
        };
        // `tmp` chunks 2..6 are scratch chunks 2..6: rank 0's copy is the first past 5.
        let e = check_resources(&plan, &limit(5)).err();
        assert_eq!(
            e.map(|e| e.to_string()).as_deref(),
            Some(
                "rank 0 needs 8 scratch chunks; the limit is 5 (--max-scratch-chunks); \
                 rank 0, block 1, op 0 (t.coll:4:1) is the first to use scratch chunk 5 or later"
            )
        );
        // `acc` chunk 1 is scratch chunk 7, written only by rank 1.
        let e = check_resources(&plan, &limit(7)).err();
        assert_eq!(
            e,
            Some(ResourceError::TooMuchScratch {
                rank: 1,
                chunks: 8,
                limit: 7,
                at: Some("rank 1, block 0, op 2 (t.coll:7:1)".into()),
            })
        );
    }

    #[test]
    fn unused_scratch_past_the_limit_names_no_op() {
        let mut b = Builder::new(2);
        b.scratch("unused", 3);
        b.block(0, 0, None, None);
        let e = check_resources(
            &b.build(),
            &Limits {
                max_scratch_chunks: Some(0),
                ..Limits::default()
            },
        );
        assert_eq!(
            e.err().map(|e| e.to_string()).as_deref(),
            Some("rank 0 needs 3 scratch chunks; the limit is 0 (--max-scratch-chunks)")
        );
    }
}
