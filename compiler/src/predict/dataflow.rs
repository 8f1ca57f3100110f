//! The model's timing: every op of a plan timed from when what it waits for is done, as a
//! dataflow, rather than the schedule's synchronous rounds summed.
//!
//! An op begins when the op before it in its block and its deps have ended. Then:
//! - a *local* op (copy, reduce) ends its cost after it begins;
//! - an op that only *sends* starts all its transfers (one per send peer of its block) when
//!   it begins and ends when the slowest has ended; each transfer's first bytes reach its
//!   receiver one latency after the op begins, and its message has arrived when that
//!   transfer has ended;
//! - an op that only *receives* (storing or combining what arrives, overlapped with the
//!   transfer) ends when it has begun and every message it receives has arrived (one per
//!   receive peer of its block), i.e. no earlier than the last to arrive; one that combines
//!   several messages also combines them at its GPU's memory bandwidth as they stream in
//!   (its *combine* cost), ending no earlier than that work after the first bytes are
//!   there, nor than one pipeline round of it after the last message has arrived;
//! - a *fused* op that receives and sends streams: the GPU executor forwards each slice of
//!   a message as it lands, so it begins sending once it has begun and the first bytes of
//!   every message it receives are there, and each of its transfers ends no earlier than
//!   its own cost (or its combine cost, if slower: it forwards what it has combined) after
//!   that, nor earlier than one latency and one pipeline round
//!   ([`super::Model::pipeline_bytes`]) after its messages have all arrived whole; the op
//!   ends with its last transfer.
//!
//! The plan's time is the latest end (which [`super::Compiled`] bounds below by the busiest
//! link's whole load). Links and memory are shared as the schedule's steps
//! say ([`super::Compiled::new`]: a transfer's bandwidth is divided among the step's
//! transfers on its busiest link). A connection's bounded slots are not modelled: the
//! deadlock simulation proves the plan runs with them, and the time assumes a sender is not
//! held back by them.
//!
//! Invariants: every time is a [`Time`], a fixed part and a size-proportional part kept
//! apart, so that the prediction splits exactly into the two ([`super::Compiled::parts`]);
//! nodes come in an order where every node follows the nodes it waits for and the senders of
//! what it receives, so one pass times them all; a node's `from` names, per message, a cost
//! of the sending node's `costs` (the transfer carrying it), so a receiver of an op sending
//! to several peers waits for its own transfer, not the op's slowest.

use crate::dump::OpRef;
use std::ops::Add;

/// A point in time or a duration, µs: the part that does not depend on the size (latencies)
/// and the part that does (bytes over bandwidth). Compared by their sum.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Time {
    pub latency_us: f64,
    pub transfer_us: f64,
}

impl Time {
    pub const ZERO: Time = Time {
        latency_us: 0.0,
        transfer_us: 0.0,
    };

    pub fn total(self) -> f64 {
        self.latency_us + self.transfer_us
    }

    /// The later of two times (the first on a tie).
    fn later(self, other: Time) -> Time {
        if other.total() > self.total() {
            other
        } else {
            self
        }
    }
}

impl Add for Time {
    type Output = Time;
    fn add(self, o: Time) -> Time {
        Time {
            latency_us: self.latency_us + o.latency_us,
            transfer_us: self.transfer_us + o.transfer_us,
        }
    }
}

/// One op of the plan as the dataflow sees it. Indices are into [`Graph::nodes`] (for
/// `waits` and the senders of `from`) and into the caller's cost list (for `costs`,
/// `combine` and the transfers of `from`).
#[derive(Clone, Debug)]
pub struct Node {
    pub at: OpRef,
    /// Nodes that end before this one begins: the op before it in its block, its deps.
    pub waits: smallvec::SmallVec<[u32; 2]>,
    /// The messages this op receives, in the order it combines them: the sending node, and
    /// the cost (one of that node's `costs`) of the transfer carrying the message here.
    pub from: smallvec::SmallVec<[(u32, u32); 1]>,
    /// Whether it sends (else its costs are local work, or it has none).
    pub sends: bool,
    /// Its costs: a transfer per message it sends (one per send peer), or its local work.
    pub costs: smallvec::SmallVec<[u32; 1]>,
    /// The cost of combining the messages it receives, for an op receiving several: local
    /// work that streams alongside them rather than after them.
    pub combine: Option<u32>,
}

/// The plan's ops in an order where each follows what it waits for.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    pub nodes: Vec<Node>,
}

/// What one cost is at a size: the fixed part, and the transfer of the whole message and
/// of one pipeline slot of it (for a fused op's tail).
#[derive(Clone, Copy, Debug, Default)]
pub struct Cost {
    pub latency_us: f64,
    pub transfer_us: f64,
    pub slot_us: f64,
}

/// Why an op ended when it did ([`Timed::why`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// Nothing held it back: it began at time zero.
    First,
    /// Node `.0` (the op before it in its block, or a dep) had to end first.
    Waited(u32),
    /// It receives node `.0`'s message and ended when that arrived (the last of its
    /// messages to arrive).
    Message(u32),
    /// It forwards node `.0`'s message as it streams in, and began when its first bytes did
    /// (the last of its messages to begin arriving).
    StreamStart(u32),
    /// It forwards node `.0`'s message, and its last pipeline round came after the message
    /// ended (the last of its messages to arrive).
    StreamEnd(u32),
}

impl Why {
    /// The node that held it back, if any.
    pub fn node(self) -> Option<u32> {
        match self {
            Why::First => None,
            Why::Waited(n) | Why::Message(n) | Why::StreamStart(n) | Why::StreamEnd(n) => Some(n),
        }
    }
}

/// Every node's times at one size.
#[derive(Clone, Debug)]
pub struct Timed {
    pub begin: Vec<Time>,
    pub end: Vec<Time>,
    pub why: Vec<Why>,
}

impl Timed {
    /// The node that ends last, and its end (the plan's time); on a tie the later node in
    /// the graph's order, so a receive that ends with its sender's message is taken.
    pub fn last(&self) -> Option<(u32, Time)> {
        let mut best: Option<(u32, Time)> = None;
        for (i, &e) in self.end.iter().enumerate() {
            if best.is_none_or(|(_, b)| e.total() >= b.total()) {
                best = Some((i as u32, e));
            }
        }
        best
    }

    /// The chain of nodes that bounds the plan's time, first to last.
    pub fn critical_path(&self) -> Vec<u32> {
        let mut path = Vec::new();
        let mut at = self.last().map(|(n, _)| n);
        while let Some(n) = at {
            path.push(n);
            at = self.why[n as usize].node();
            // A node's cause always precedes it in the graph's order, so this ends; the
            // length check guards a graph built otherwise.
            if path.len() > self.end.len() {
                break;
            }
        }
        path.reverse();
        path
    }
}

impl Graph {
    /// The graph of `nodes`, whose `waits` and `from` index `nodes` itself, put in an order
    /// where each node follows those it waits for and receives from (Kahn's algorithm, the
    /// most recently freed node first). `Err` with an op on a cycle: such ops never run (a
    /// plan that deadlocks).
    pub fn ordered(nodes: Vec<Node>) -> Result<Graph, OpRef> {
        let n = nodes.len();
        // Successors as one flat list, `succ[start[p]..start[p + 1]]` for node `p`.
        let mut indeg = vec![0u32; n];
        let mut start = vec![0u32; n + 1];
        let before = |node: &Node| -> smallvec::SmallVec<[u32; 4]> {
            node.waits
                .iter()
                .copied()
                .chain(node.from.iter().map(|&(s, _)| s))
                .collect()
        };
        for node in &nodes {
            for p in before(node) {
                if (p as usize) < n {
                    start[p as usize + 1] += 1;
                }
            }
        }
        for i in 0..n {
            start[i + 1] += start[i];
        }
        let mut fill = start.clone();
        let mut succ = vec![0u32; start[n] as usize];
        for (i, node) in nodes.iter().enumerate() {
            for p in before(node) {
                if (p as usize) < n {
                    succ[fill[p as usize] as usize] = i as u32;
                    fill[p as usize] += 1;
                    indeg[i] += 1;
                }
            }
        }
        drop(fill);
        let mut ready: Vec<u32> = (0..n as u32)
            .rev()
            .filter(|&i| indeg[i as usize] == 0)
            .collect();
        let mut order: Vec<u32> = Vec::with_capacity(n);
        while let Some(i) = ready.pop() {
            order.push(i);
            let (a, z) = (start[i as usize] as usize, start[i as usize + 1] as usize);
            for &j in succ[a..z].iter().rev() {
                indeg[j as usize] -= 1;
                if indeg[j as usize] == 0 {
                    ready.push(j);
                }
            }
        }
        if order.len() < n {
            let stuck = (0..n).find(|&i| indeg[i] > 0).unwrap_or(0);
            return Err(nodes[stuck].at);
        }
        let mut new_index = vec![0u32; n];
        for (k, &i) in order.iter().enumerate() {
            new_index[i as usize] = k as u32;
        }
        let mut slots: Vec<Option<Node>> = nodes.into_iter().map(Some).collect();
        let nodes = order
            .iter()
            .filter_map(|&i| slots[i as usize].take())
            .map(|mut node| {
                let renumber = |p: &mut u32| *p = new_index.get(*p as usize).copied().unwrap_or(*p);
                node.waits.iter_mut().for_each(renumber);
                node.from.iter_mut().for_each(|(s, _)| renumber(s));
                node
            })
            .collect();
        Ok(Graph { nodes })
    }

    /// Times every node, with `cost(i)` the cost of cost index `i` at this size.
    pub fn time(&self, cost: impl Fn(u32) -> Cost) -> Timed {
        self.run(cost, true)
    }

    /// The latest end of any node and that node ([`Timed::last`]), without keeping every
    /// node's begin and cause: what a prediction needs, in less memory.
    pub fn last(&self, cost: impl Fn(u32) -> Cost) -> Option<(u32, Time)> {
        self.run(cost, false).last()
    }

    /// Times every node; `trace`: also keep each node's begin and cause (else those lists
    /// are left empty).
    fn run(&self, cost: impl Fn(u32) -> Cost, trace: bool) -> Timed {
        let n = self.nodes.len();
        let kept = if trace { n } else { 0 };
        let mut begin = vec![Time::ZERO; kept];
        let mut end = vec![Time::ZERO; n];
        // When each node began its own work (a fused one: once its messages' first bytes
        // were there), and when the messages a fused node forwards had all arrived (zero for
        // others): what each of its transfers' ends follows from.
        let mut start = vec![Time::ZERO; n];
        let mut input = vec![Time::ZERO; n];
        let mut why = vec![Why::First; kept];
        let whole = |c: Cost| Time {
            latency_us: c.latency_us,
            transfer_us: c.transfer_us,
        };
        let slot = |c: Cost| Time {
            latency_us: c.latency_us,
            transfer_us: c.slot_us,
        };
        // The first bytes and the end of the message that node `s` sends over its transfer
        // `c`: each transfer of a node sending to several peers arrives on its own.
        let arrival = |s: u32, c: u32, start: &[Time], input: &[Time]| -> (Time, Time) {
            let s = s as usize;
            let Some(sender) = self.nodes.get(s) else {
                return (Time::ZERO, Time::ZERO);
            };
            let began = start.get(s).copied().unwrap_or_default();
            let c = cost(c);
            // A fused sender forwards what it has combined: no faster than it combines.
            let pace = sender.combine.map(&cost).unwrap_or_default();
            let first = began
                + Time {
                    latency_us: c.latency_us,
                    transfer_us: 0.0,
                };
            let mut last = began + whole(c).later(whole(pace));
            if !sender.from.is_empty() {
                let tail = input.get(s).copied().unwrap_or_default() + slot(c).later(slot(pace));
                last = last.later(tail);
            }
            (first, last)
        };
        for (i, node) in self.nodes.iter().enumerate() {
            let (mut b, mut w) = (Time::ZERO, Why::First);
            for &p in &node.waits {
                let t = end.get(p as usize).copied().unwrap_or_default();
                if t.total() > b.total() {
                    (b, w) = (t, Why::Waited(p));
                }
            }
            // The costs: the slowest transfer it sends (all start together), or its local
            // work (summed: one op's local work is done in order), and the slowest slot.
            let (mut own, mut round) = (Time::ZERO, Time::ZERO);
            for &c in &node.costs {
                let c = cost(c);
                own = if node.sends {
                    own.later(whole(c))
                } else {
                    own + whole(c)
                };
                round = round.later(slot(c));
            }
            let pace = node.combine.map(&cost);
            let (mut e, mut ew);
            if let Some(&(s0, _)) = node.from.first() {
                // The messages: the first bytes of the last to begin arriving, and the end
                // of the last to arrive.
                let (mut head, mut head_from) = (Time::ZERO, s0);
                let (mut all, mut all_from) = (Time::ZERO, s0);
                for &(s, c) in &node.from {
                    let (f, t) = arrival(s, c, &start, &input);
                    if f.total() > head.total() {
                        (head, head_from) = (f, s);
                    }
                    if t.total() > all.total() {
                        (all, all_from) = (t, s);
                    }
                }
                if node.sends {
                    if head.total() > b.total() {
                        (b, w) = (head, Why::StreamStart(head_from));
                    }
                    if let Some(p) = pace {
                        own = own.later(whole(p));
                        round = round.later(slot(p));
                    }
                    e = b + own;
                    ew = w;
                    let tail = all + round;
                    if tail.total() > e.total() {
                        (e, ew) = (tail, Why::StreamEnd(all_from));
                    }
                    input[i] = all;
                } else {
                    e = b + own;
                    ew = w;
                    if all.total() > b.total() {
                        (e, ew) = (all + own, Why::Message(all_from));
                    }
                    if let Some(p) = pace {
                        // Combined as the messages stream in: the work from their first
                        // bytes, or its last pipeline round after the last message.
                        e = (e + slot(p)).later(b.later(head) + whole(p));
                    }
                }
            } else {
                e = b + own;
                ew = w;
            }
            if trace {
                begin[i] = b;
                why[i] = ew;
            }
            end[i] = e;
            start[i] = b;
        }
        Timed { begin, end, why }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smallvec::smallvec;

    fn node(op: u32, waits: &[u32], from: &[(u32, u32)], sends: bool, costs: &[u32]) -> Node {
        Node {
            at: OpRef {
                rank: 0,
                block: 0,
                op,
            },
            waits: waits.iter().copied().collect(),
            from: from.iter().copied().collect(),
            sends,
            costs: costs.iter().copied().collect(),
            combine: None,
        }
    }

    const HOP: Cost = Cost {
        latency_us: 2.0,
        transfer_us: 100.0,
        slot_us: 1.0,
    };

    /// A chain of sends forwarded by fused ops streams: each hop adds a latency and a slot,
    /// not the whole transfer; the same hops through plain receives and sends store and
    /// forward, a whole transfer each.
    #[test]
    fn fused_forwards_stream_and_store_and_forward_does_not() {
        let g = Graph {
            nodes: vec![
                node(0, &[], &[], true, &[0]),
                node(1, &[], &[(0, 0)], true, &[0]),
                node(2, &[], &[(1, 0)], true, &[0]),
                node(3, &[], &[(2, 0)], false, &[]),
            ],
        };
        let t = g.time(|_| HOP);
        let (last, end) = t.last().expect("nodes");
        assert_eq!(last, 3);
        // The first hop whole, then two more latencies and slots.
        assert_eq!(
            end,
            Time {
                latency_us: 6.0,
                transfer_us: 102.0
            }
        );
        assert_eq!(t.why[1], Why::StreamEnd(0));
        assert_eq!(t.why[3], Why::Message(2));
        assert_eq!(t.critical_path(), vec![0, 1, 2, 3]);

        // Store and forward: a receive, then a send from the same block.
        let g = Graph {
            nodes: vec![
                node(0, &[], &[], true, &[0]),
                node(1, &[], &[(0, 0)], false, &[]),
                node(2, &[1], &[], true, &[0]),
                node(3, &[], &[(2, 0)], false, &[]),
            ],
        };
        let t = g.time(|_| HOP);
        assert_eq!(
            t.last().map(|(_, e)| e),
            Some(Time {
                latency_us: 4.0,
                transfer_us: 200.0
            })
        );
        assert_eq!(t.why[2], Why::Waited(1));
    }

    /// A fused op cannot end before its own transfer, and cannot begin before its block lets
    /// it: a busy block delays the forward past the message's first bytes.
    #[test]
    fn a_fused_op_waits_for_its_block_and_its_own_transfer() {
        let slow = Cost {
            latency_us: 2.0,
            transfer_us: 500.0,
            slot_us: 1.0,
        };
        let g = Graph {
            nodes: vec![
                node(0, &[], &[], true, &[0]),
                // Busy with local work for 50 µs first.
                node(1, &[], &[], false, &[1]),
                node(2, &[1], &[(0, 0)], true, &[2]),
            ],
        };
        let local = Cost {
            latency_us: 0.0,
            transfer_us: 50.0,
            slot_us: 50.0,
        };
        let t = g.time(|c| [HOP, local, slow][c as usize]);
        assert_eq!(t.why[2], Why::Waited(1));
        assert_eq!(t.begin[2].total(), 50.0);
        assert_eq!(t.end[2].total(), 552.0);
        assert_eq!(t.critical_path(), vec![1, 2]);
    }

    /// An op sending to two peers starts both transfers at once and ends with the slower;
    /// each receiver waits for its own transfer. A receive of both messages (a reducing
    /// receive of two peers) ends with the later, and names it.
    #[test]
    fn several_peers_send_at_once_and_wait_for_the_last() {
        let fast = Cost {
            latency_us: 1.0,
            transfer_us: 10.0,
            slot_us: 10.0,
        };
        let slow = Cost {
            latency_us: 1.0,
            transfer_us: 30.0,
            slot_us: 30.0,
        };
        let g = Graph {
            nodes: vec![
                // Sends over cost 0 (fast) and cost 1 (slow).
                node(0, &[], &[], true, &[0, 1]),
                node(1, &[], &[(0, 0)], false, &[]),
                node(2, &[], &[(0, 1)], false, &[]),
                // Sends over cost 2 (fast).
                node(3, &[], &[], true, &[2]),
                // Receives from node 3 and node 0's slow transfer.
                node(4, &[], &[(3, 2), (0, 1)], false, &[]),
            ],
        };
        let t = g.time(|c| [fast, slow, fast][c as usize]);
        assert_eq!(t.end[0].total(), 31.0);
        assert_eq!(t.end[1].total(), 11.0);
        assert_eq!(t.end[2].total(), 31.0);
        assert_eq!(t.end[4].total(), 31.0);
        assert_eq!(t.why[4], Why::Message(0));
        assert_eq!(t.why[1], Why::Message(0));
    }

    /// A fused op of two receive peers starts forwarding once the first bytes of both are
    /// there, and combining them at memory speed paces what it forwards: a combine slower
    /// than its transfer makes the transfer end later, and a plain receive of two ends no
    /// earlier than its combine's work after the first bytes.
    #[test]
    fn a_combine_of_several_messages_streams_and_paces() {
        let send = Cost {
            latency_us: 1.0,
            transfer_us: 10.0,
            slot_us: 1.0,
        };
        let late = Cost {
            latency_us: 5.0,
            transfer_us: 10.0,
            slot_us: 1.0,
        };
        let combine = Cost {
            latency_us: 0.0,
            transfer_us: 40.0,
            slot_us: 2.0,
        };
        let mut fused = node(2, &[], &[(0, 0), (1, 1)], true, &[2]);
        fused.combine = Some(3);
        let mut plain = node(4, &[], &[(0, 0), (1, 1)], false, &[]);
        plain.combine = Some(3);
        let g = Graph {
            nodes: vec![
                node(0, &[], &[], true, &[0]),
                node(1, &[], &[], true, &[1]),
                fused,
                node(3, &[], &[(2, 2)], false, &[]),
                plain,
            ],
        };
        let t = g.time(|c| [send, late, send, combine][c as usize]);
        // First bytes: 1 and 5 µs; the stream starts at 5, paced by the combine's 40.
        assert_eq!(t.why[2], Why::StreamStart(1));
        assert_eq!(t.begin[2].total(), 5.0);
        assert_eq!(t.end[2].total(), 45.0);
        // Its receiver gets the message when the paced transfer ends.
        assert_eq!(t.end[3].total(), 45.0);
        // The plain receive: messages whole at 11 and 15, combined from 5 µs for 40.
        assert_eq!(t.end[4].total(), 45.0);
        assert_eq!(t.why[4], Why::Message(1));
    }

    #[test]
    fn times_keep_their_parts_apart() {
        let a = Time {
            latency_us: 1.0,
            transfer_us: 2.0,
        };
        let b = Time {
            latency_us: 3.5,
            transfer_us: 0.0,
        };
        assert_eq!((a + b).total(), 6.5);
        assert_eq!(a.later(b), b);
        assert_eq!(b.later(a), b);
        let n: Node = Node {
            at: OpRef {
                rank: 1,
                block: 2,
                op: 3,
            },
            waits: smallvec![],
            from: smallvec![],
            sends: false,
            costs: smallvec![],
            combine: None,
        };
        let t = Graph { nodes: vec![n] }.time(|_| HOP);
        assert_eq!(t.last(), Some((0, Time::ZERO)));
        assert_eq!(t.why[0], Why::First);
    }
}
