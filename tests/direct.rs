//! Direct messages (`coll_compiler::gpu::direct`) against a model of the GPU kernel's
//! protocol, run on the CPU. Every op of a plan is one step, and blocks take steps in a
//! random order: a block first starts (publishing the releases it has from the start), then
//! runs its ops, each once its dependencies are done and its message has arrived. A direct
//! send stores into the receiver's memory the moment it runs, which it may only once the
//! receiver has released that message (`ready`); any other send waits for one of two slots.
//! After each op a block publishes the releases its table gives.
//!
//! Whatever the order, a plan must compute with direct messages what it computes with every
//! message in a slot, and must never stall. An early store into elements the receiving rank
//! still reads changes what it reads (every chunk starts with a distinct value), and a
//! release that waits on its own sender stalls. Checked for every shipped algorithm (as
//! written and made out of place, one and three instances, 2 to 5 ranks), and for random
//! programs as `tests/lowering.rs` makes them, in both placements the analysis covers: `input`
//! and `output` apart, and aliased as in place (in-place plans, and out-of-place plans that
//! [`in_place_safe`] lets run in place). About a third of the random programs have a direct
//! message. A run of 20 000 cases of each property passed; 1 000 run here. Both failures
//! show when the analysis is broken on purpose: every release at the start gives wrong
//! outputs, and no order check for releases gives stalls (in-place alltoall at n = 2).
//!
//! A chunk holds two values, its two halves, so that a swap (`DirectOps::swaps`) is modelled
//! as the kernel runs it: each side's send exchanges its half of every chunk between its own
//! source and the peer's target, whenever it runs; every other op moves both halves.

#[path = "common/programs.rs"]
#[allow(dead_code)]
mod programs;

use coll_compiler::gpu::direct::{DirectOps, Half, direct_ops};
use coll_compiler::gpu::placement::in_place_safe;
use coll_compiler::layout::alias;
use coll_compiler::plan::{OpKind, Plan, Slice};
use coll_compiler::topology::Topology;
use coll_compiler::{CompileOptions, compile};
use programs::{elaborated, program, rewritten};
use proptest::prelude::*;
use std::collections::{HashMap, VecDeque};

/// A chunk's two halves.
type Val = [i64; 2];

/// One rank's memory: physical (buffer, chunk) -> value.
type Memory = Vec<HashMap<(usize, u64), Val>>;

/// xorshift64*: the schedule's random choices, from a seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    }
}

/// A message in flight: its data in a slot, or `None` when the sender stored it in place.
type Message = Option<Vec<Val>>;

/// A connection (sender, receiver, channel): messages in order, and how many the receiver
/// has released to direct stores.
#[derive(Default)]
struct Conn {
    queue: VecDeque<Message>,
    sent: u64,
    consumed: u64,
    ready: u64,
}

struct Model<'a> {
    plan: &'a Plan,
    aliased: bool,
    direct: Option<&'a DirectOps>,
}

impl Model<'_> {
    fn phys(&self, rank: u32, s: Slice, c: u32) -> (usize, u64) {
        alias(
            self.plan.collective.0,
            self.aliased,
            self.plan.chunk_factor,
            s.buffer() as usize,
            u64::from(rank),
            s.offset() + u64::from(c),
        )
    }

    /// Every chunk of every buffer of every rank, with a value no other chunk has.
    fn initial(&self) -> Memory {
        (0..self.plan.ranks)
            .map(|r| {
                let mut m = HashMap::new();
                for (b, decl) in self.plan.buffers.iter().enumerate() {
                    for i in 0..decl.chunks {
                        let p = self.phys(r, Slice(b as u32, i), 0);
                        let v = i64::from(r) * 1_000_003 + p.0 as i64 * 10_007 + p.1 as i64 + 1;
                        m.insert(p, [v, -v]);
                    }
                }
                m
            })
            .collect()
    }

    /// Every rank's `output`, chunk by chunk.
    fn outputs(&self, mem: &Memory) -> Vec<Vec<Val>> {
        let chunks = self.plan.buffers.get(1).map_or(0, |b| b.chunks);
        (0..self.plan.ranks)
            .map(|r| {
                (0..chunks)
                    .map(|i| mem[r as usize][&self.phys(r, Slice(1, i), 0)])
                    .collect()
            })
            .collect()
    }

    /// Runs the plan once in the order `seed` draws; every rank's output, or where it stalled.
    fn run(&self, seed: u64) -> Result<Vec<Vec<Val>>, String> {
        let plan = self.plan;
        let mut mem = self.initial();
        let mut rng = Rng(seed | 1);
        let mut conns: HashMap<(u32, u32, u32), Conn> = HashMap::new();
        // (rank, block index) -> next op, None before the block has started.
        let blocks: Vec<(u32, usize)> = plan
            .gpus
            .iter()
            .enumerate()
            .flat_map(|(r, g)| (0..g.blocks.len()).map(move |b| (r as u32, b)))
            .collect();
        let mut pc: Vec<Option<usize>> = vec![None; blocks.len()];
        let index: HashMap<(u32, u32), usize> = blocks
            .iter()
            .enumerate()
            .map(|(i, &(r, b))| ((r, plan.gpus[r as usize].blocks[b].id), i))
            .collect();
        let release =
            |conns: &mut HashMap<(u32, u32, u32), Conn>, r: u32, b: usize, after: Option<usize>| {
                let Some(d) = self.direct else { return };
                let blk = &plan.gpus[r as usize].blocks[b];
                let nrecv = blk.ops.iter().filter(|o| o.kind.receives()).count() as u64;
                let value = match (d.releases(r, blk), after) {
                    (None, None) => nrecv,
                    (None, Some(_)) => return,
                    (Some((start, _)), None) => u64::from(start),
                    (Some((_, table)), Some(j)) => u64::from(table[j]),
                };
                for p in blk.recv_peers() {
                    let c = conns.entry((p, r, blk.channel)).or_default();
                    c.ready = c.ready.max(value);
                }
            };
        loop {
            let mut enabled = Vec::new();
            for (i, &(r, b)) in blocks.iter().enumerate() {
                let blk = &plan.gpus[r as usize].blocks[b];
                let Some(at) = pc[i] else {
                    enabled.push(i);
                    continue;
                };
                let Some(op) = blk.ops.get(at) else { continue };
                let deps_done = op.deps.iter().all(|d| {
                    index
                        .get(&(r, d.block()))
                        .is_some_and(|&j| pc[j].is_some_and(|x| x > d.op() as usize))
                });
                // A block of several peers waits for a message from each, and room on each.
                let arrived = !op.kind.receives()
                    || (blk.recv_peer.is_some()
                        && blk.recv_peers().all(|p| {
                            conns
                                .get(&(p, r, blk.channel))
                                .is_some_and(|c| c.sent > c.consumed)
                        }));
                let room = !op.kind.sends()
                    || (blk.send_peer.is_some()
                        && blk.send_peers().all(|q| {
                            let c = conns.get(&(r, q, blk.channel));
                            let (sent, consumed, ready) =
                                c.map_or((0, 0, 0), |c| (c.sent, c.consumed, c.ready));
                            match self
                                .direct
                                .and_then(|d| d.sends.get(&(r, blk.id, at as u32)))
                            {
                                Some(_) => ready > sent,
                                None => sent < consumed + 2,
                            }
                        }));
                if deps_done && arrived && room {
                    enabled.push(i);
                }
            }
            if enabled.is_empty() {
                let stuck: Vec<String> = blocks
                    .iter()
                    .zip(&pc)
                    .filter(|&(&(r, b), p)| {
                        p.is_none_or(|p| p < plan.gpus[r as usize].blocks[b].ops.len())
                    })
                    .map(|(&(r, b), p)| format!("rank {r} block {b} at op {p:?}"))
                    .collect();
                if stuck.is_empty() {
                    return Ok(self.outputs(&mem));
                }
                return Err(format!("stalled: {}", stuck.join(", ")));
            }
            let i = enabled[rng.below(enabled.len())];
            let (r, b) = blocks[i];
            let Some(at) = pc[i] else {
                pc[i] = Some(0);
                release(&mut conns, r, b, None);
                continue;
            };
            self.step(&mut mem, &mut conns, r, b, at)?;
            pc[i] = Some(at + 1);
            release(&mut conns, r, b, Some(at));
        }
    }

    /// Op `at` of block `b` of rank `r`, all of it at once.
    fn step(
        &self,
        mem: &mut Memory,
        conns: &mut HashMap<(u32, u32, u32), Conn>,
        r: u32,
        b: usize,
        at: usize,
    ) -> Result<(), String> {
        let blk = &self.plan.gpus[r as usize].blocks[b];
        let op = &blk.ops[at];
        let me = (r, blk.id, at as u32);
        // One message from each receive peer, in the order they combine.
        let mut all_in: Vec<Message> = Vec::new();
        if op.kind.receives() {
            for p in blk.recv_peers() {
                let c = conns.entry((p, r, blk.channel)).or_default();
                c.consumed += 1;
                all_in.push(c.queue.pop_front().flatten());
            }
        }
        let extra: Vec<Message> = all_in.iter().skip(1).cloned().collect();
        let incoming: Option<Message> = all_in.into_iter().next();
        if extra.iter().any(Option::is_none) {
            return Err(format!(
                "rank {r} block {b} op {at}: a message of a block of several peers went direct"
            ));
        }
        let direct_recv = self.direct.is_some_and(|d| d.recvs.contains_key(&me));
        if let Some(m) = &incoming
            && m.is_none() != direct_recv
        {
            return Err(format!(
                "rank {r} block {b} op {at}: the two ends disagree on direct"
            ));
        }
        let n = op.count;
        let read = |mem: &Memory, s: Option<Slice>, c: u32| {
            s.map(|s| mem[r as usize][&self.phys(r, s, c)])
        };
        let mut out = Vec::new();
        let mut writes = Vec::new();
        for c in 0..n {
            let src = read(mem, op.src.filter(|_| op.kind.needs_src()), c);
            let dst = read(mem, op.dst, c);
            // The received value: from the slot, or where the sender stored it.
            let add = |a: Option<Val>, b: Option<Val>| {
                a.zip(b)
                    .map(|(a, b)| [a[0].wrapping_add(b[0]), a[1].wrapping_add(b[1])])
            };
            let mut got = match &incoming {
                Some(Some(v)) => v.get(c as usize).copied(),
                Some(None) => dst,
                None => None,
            };
            // The further peers' messages, added after the first (only reducing kinds have
            // them, and the sum does not depend on the order here).
            for m in extra.iter().flatten() {
                got = add(got, m.get(c as usize).copied());
            }
            let (to_dst, to_out) = match op.kind {
                OpKind::Send => (None, src),
                OpKind::Recv => (got, None),
                OpKind::RecvReduceCopy => (add(src, got), None),
                OpKind::RecvCopySend => (got, got),
                OpKind::RecvReduceSend => (None, add(src, got)),
                OpKind::RecvReduceCopySend => (add(src, got), add(src, got)),
                OpKind::Copy => (src, None),
                OpKind::Reduce => (add(dst, src), None),
                OpKind::CopySend => (src, src),
            };
            if let (Some(v), Some(d)) = (to_dst, op.dst) {
                writes.push((self.phys(r, d, c), v));
            }
            if op.kind.sends() {
                out.push(
                    to_out.ok_or_else(|| format!("rank {r} block {b} op {at}: nothing to send"))?,
                );
            }
        }
        for (p, v) in writes {
            mem[r as usize].insert(p, v);
        }
        if op.kind.sends() {
            let q = blk.send_peer.ok_or("a send without a peer")?;
            // Further send peers get the same message in a slot (never direct).
            for q in blk.send_also.iter().copied() {
                let c = conns.entry((r, q, blk.channel)).or_default();
                c.sent += 1;
                c.queue.push_back(Some(out.clone()));
            }
            let target = self.direct.and_then(|d| d.sends.get(&me));
            let swap = self.direct.and_then(|d| d.swaps.get(&me));
            let msg = match (target, swap) {
                (Some(t), Some(half)) => {
                    // This side's half of every chunk changes places with the peer's.
                    let h = usize::from(*half == Half::Second);
                    let src = op.src.ok_or("a swap without a source")?;
                    for c in 0..n {
                        let mine = self.phys(r, src, c);
                        let theirs = self.phys(q, Slice(u32::from(t.buffer), t.offset), c);
                        let a = mem[r as usize][&mine][h];
                        let b = mem[q as usize][&theirs][h];
                        mem[r as usize].entry(mine).or_default()[h] = b;
                        mem[q as usize].entry(theirs).or_default()[h] = a;
                    }
                    None
                }
                (Some(t), None) => {
                    for (c, v) in out.iter().enumerate() {
                        let p = self.phys(q, Slice(u32::from(t.buffer), t.offset), c as u32);
                        mem[q as usize].insert(p, *v);
                    }
                    None
                }
                (None, _) => Some(out),
            };
            let c = conns.entry((r, q, blk.channel)).or_default();
            c.sent += 1;
            c.queue.push_back(msg);
        }
        Ok(())
    }
}

/// Every placement the analysis covers for `plan`: aliased for in-place plans and for
/// out-of-place ones that run in place without staging, apart for out-of-place ones.
fn placements(plan: &Plan) -> Vec<bool> {
    let mut v = Vec::new();
    if !plan.inplace {
        v.push(false);
    }
    if plan.inplace || in_place_safe(plan) {
        v.push(true);
    }
    v
}

/// `plan` with direct messages computes what it computes with slots, in `orders` random
/// orders per placement; the number of direct messages seen, and of swaps among them.
fn agrees(plan: &Plan, orders: u64) -> Result<(usize, usize), String> {
    let mut seen = (0, 0);
    for aliased in placements(plan) {
        let d = direct_ops(plan, aliased);
        seen.0 += d.sends.len();
        seen.1 += d.swaps.len();
        let slots = Model {
            plan,
            aliased,
            direct: None,
        };
        let want = slots.run(7)?;
        let with = Model {
            plan,
            aliased,
            direct: Some(&d),
        };
        for seed in 0..orders {
            let got = with.run(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5eed)?;
            if got != want {
                return Err(format!(
                    "placement {}: order {seed} computes {got:?}, slots {want:?}",
                    if aliased { "aliased" } else { "apart" }
                ));
            }
        }
    }
    Ok(seen)
}

fn shipped(file: &str, n: u32, instances: u32, out_of_place: bool) -> Option<Plan> {
    let path = coll_tests::root().join("algorithms").join(file);
    let m = coll_lang::load(coll_tests::source(&path)).ok()?;
    let spec = if file.contains("hier") || file.contains("2step") {
        if !n.is_multiple_of(2) {
            return None;
        }
        format!("cluster:2x{}", n / 2)
    } else {
        format!("nvswitch:{n}")
    };
    let topo = Topology::parse(&spec).ok()?;
    let mut o = CompileOptions::default();
    o.elaborate.instances = Some(instances);
    o.elaborate.out_of_place = out_of_place;
    compile(&m, &topo, &o)
        .ok()
        .map(|c| c.into_plan().into_inner())
}

#[test]
fn shipped_algorithms_compute_the_same_with_direct_messages_in_any_order() {
    let (mut direct, mut swaps) = (0, 0);
    let mut plans = 0;
    for path in coll_tests::coll_files("algorithms") {
        let file = path
            .file_name()
            .and_then(|f| f.to_str())
            .unwrap_or_default()
            .to_string();
        for n in 2..=5 {
            for instances in [1, 3] {
                for out_of_place in [false, true] {
                    let Some(plan) = shipped(&file, n, instances, out_of_place) else {
                        continue;
                    };
                    plans += 1;
                    let (d, sw) = agrees(&plan, 12).unwrap_or_else(|e| {
                        panic!("{file} n={n} x{instances} out_of_place={out_of_place}: {e}")
                    });
                    direct += d;
                    swaps += sw;
                }
            }
        }
    }
    // The check is only as good as the messages it covers.
    assert!(plans > 100, "{plans} plans");
    assert!(direct > 1000, "{direct} direct messages");
    // In-place alltoall and sendrecv swap at n = 2 (and alltoall's shift n / 2 at n = 4).
    assert!(swaps >= 20, "{swaps} swaps");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_programs_compute_the_same_with_direct_messages(src in program(false)) {
        let (e, file, topo) = elaborated(&src, &Default::default())?;
        let Ok(plan) = rewritten(&e, &topo, &file, &src) else { return Ok(()) };
        agrees(&plan, 8).map_err(|m| TestCaseError::fail(format!("{m}\n{src}")))?;
    }

    #[test]
    fn random_in_place_programs_compute_the_same_with_direct_messages(src in program(true)) {
        let (e, file, topo) = elaborated(&src, &Default::default())?;
        let Ok(plan) = rewritten(&e, &topo, &file, &src) else { return Ok(()) };
        agrees(&plan, 8).map_err(|m| TestCaseError::fail(format!("{m}\n{src}")))?;
    }
}
