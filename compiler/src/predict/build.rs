//! Building a [`Compiled`]: the plan's messages paired, each transfer, local op and combine
//! made an item with the bandwidth its step's sharing leaves it, the ops made a dataflow
//! graph, and every link direction's and GPU memory's whole load listed (see the module
//! docs of `predict.rs` for what each costs).

use super::{Compiled, Item, Load, LoadOf, Model, PredictError, Steps, dataflow};
use crate::dump::{OpClass, OpRef, transfers};
use crate::elaborate::Protocol;
use crate::ids::{LinkId, RankId};
use crate::plan::{Plan, location};
use crate::topology::{Route, Topology};
use std::collections::BTreeMap;

impl Compiled {
    /// Builds the size-independent part of the model: the ops' dataflow, and what each
    /// transfer and local op costs given what shares its link or memory in its step.
    pub fn new(
        plan: &Plan,
        topo: &Topology,
        steps: Steps<'_>,
        model: &Model,
    ) -> Result<Compiled, PredictError> {
        if plan.ranks as usize > topo.num_ranks() {
            return Err(PredictError::Ranks {
                plan: plan.ranks,
                topology: topo.name().to_string(),
                available: topo.num_ranks(),
            });
        }
        let step_of = |r: u32, b: u32, o: u32| {
            steps(r, b, o).ok_or_else(|| PredictError::Unscheduled {
                at: location(plan, r, b, Some(o)),
            })
        };
        // Every op's index, in plan order.
        let mut base: Vec<Vec<usize>> = Vec::with_capacity(plan.gpus.len());
        let mut total = 0usize;
        for gpu in &plan.gpus {
            let mut b = Vec::with_capacity(gpu.blocks.len());
            for block in &gpu.blocks {
                b.push(total);
                total += block.ops.len();
            }
            base.push(b);
        }
        let index = |at: OpRef| -> Option<usize> {
            let start = *base.get(at.rank as usize)?.get(at.block as usize)?;
            let len = plan.gpus[at.rank as usize].blocks[at.block as usize]
                .ops
                .len();
            ((at.op as usize) < len).then_some(start + at.op as usize)
        };
        let mut nodes: Vec<dataflow::Node> = Vec::with_capacity(total);
        for (at, _, op) in crate::dump::ops(plan) {
            step_of(at.rank, at.block, at.op)?;
            let mut waits = smallvec::SmallVec::new();
            if at.op > 0 {
                waits.extend(
                    index(OpRef {
                        op: at.op - 1,
                        ..at
                    })
                    .map(|i| i as u32),
                );
            }
            for d in &op.deps {
                waits.extend(
                    index(OpRef {
                        rank: at.rank,
                        block: d.block(),
                        op: d.op(),
                    })
                    .map(|i| i as u32),
                );
            }
            nodes.push(dataflow::Node {
                at,
                waits,
                from: smallvec::SmallVec::new(),
                sends: false,
                costs: smallvec::SmallVec::new(),
                combine: None,
            });
        }

        // Transfers by step, with their routes: one per message, so an op of a block of
        // several send peers has one to each.
        let messages = transfers(plan);
        let mut routes: BTreeMap<(u32, u32), Route> = BTreeMap::new();
        let mut by_step: BTreeMap<u32, Vec<(usize, Protocol)>> = BTreeMap::new();
        for (m, t) in messages.iter().enumerate() {
            let key = (t.from.rank, t.to.rank);
            if let std::collections::btree_map::Entry::Vacant(e) = routes.entry(key) {
                let route = topo.route(RankId(key.0), RankId(key.1)).ok_or_else(|| {
                    PredictError::NoRoute {
                        topology: topo.name().to_string(),
                        from: key.0,
                        to: key.1,
                    }
                })?;
                e.insert(route);
            }
            let block = plan
                .gpus
                .get(t.from.rank as usize)
                .and_then(|g| g.blocks.get(t.from.block as usize));
            let protocol = model
                .protocol
                .or_else(|| block.and_then(|b| b.protocol))
                .unwrap_or(plan.protocol);
            by_step
                .entry(step_of(t.from.rank, t.from.block, t.from.op)?)
                .or_default()
                .push((m, protocol));
        }

        let mut items: Vec<Item> = Vec::new();
        let add = |items: &mut Vec<Item>,
                   nodes: &mut Vec<dataflow::Node>,
                   at: OpRef,
                   item: Item,
                   sends: bool| {
            if let Some(i) = index(at) {
                nodes[i].costs.push(items.len() as u32);
                nodes[i].sends |= sends;
            }
            items.push(item);
        };
        // Each message's transfer item (every message gets one: a missing route is an error
        // above; `u32::MAX`, which costs nothing, only if that ever changed).
        let mut item_of = vec![u32::MAX; messages.len()];
        let mut link_loads: BTreeMap<(LinkId, bool), Vec<(u32, f64)>> = BTreeMap::new();
        let mut memory_loads: BTreeMap<u32, Vec<(u32, f64)>> = BTreeMap::new();
        for list in by_step.values() {
            // Who crosses each link, per direction, in this step: every transfer of an op
            // of several send peers counts, so they share the sender's egress.
            let mut users: BTreeMap<(LinkId, bool), u32> = BTreeMap::new();
            let dir_links = |route: &Route| -> Vec<(LinkId, bool)> {
                route
                    .links
                    .iter()
                    .zip(&route.devices)
                    .map(|(&l, &from)| (l, topo.link(l).is_some_and(|(a, _, _)| a == from)))
                    .collect()
            };
            for &(m, _) in list {
                let Some(t) = messages.get(m) else { continue };
                if let Some(route) = routes.get(&(t.from.rank, t.to.rank)) {
                    for key in dir_links(route) {
                        *users.entry(key).or_insert(0) += 1;
                    }
                }
            }
            for &(m, protocol) in list {
                let Some(t) = messages.get(m) else { continue };
                let Some(route) = routes.get(&(t.from.rank, t.to.rank)) else {
                    continue;
                };
                let (proto_us, eff) = model.protocol(protocol);
                let (shared, sharing) = dir_links(route)
                    .into_iter()
                    .filter_map(|key| {
                        let (_, _, link) = topo.link(key.0)?;
                        let n = users.get(&key).copied().unwrap_or(1).max(1);
                        Some((link.bandwidth_gbs / f64::from(n), n))
                    })
                    .fold((f64::INFINITY, 1), |a, b| if b.0 < a.0 { b } else { a });
                let bw = if shared.is_finite() {
                    shared
                } else {
                    route.bandwidth_gbs
                };
                let op = plan
                    .gpus
                    .get(t.from.rank as usize)
                    .and_then(|g| g.blocks.get(t.from.block as usize))
                    .and_then(|b| b.ops.get(t.from.op as usize));
                let offset = op.and_then(|o| o.src.or(o.dst)).map_or(0, |s| s.offset());
                let item = Item {
                    latency_us: route.latency_us + proto_us,
                    bandwidth_gbs: bw * eff,
                    offset,
                    count: u64::from(t.count),
                    sharing,
                };
                let id = items.len() as u32;
                for key in dir_links(route) {
                    if let Some((_, _, link)) = topo.link(key.0) {
                        link_loads
                            .entry(key)
                            .or_default()
                            .push((id, link.bandwidth_gbs * eff));
                    }
                }
                if let Some(slot) = item_of.get_mut(m) {
                    *slot = id;
                }
                add(&mut items, &mut nodes, t.from, item, true);
            }
        }
        // Each receiving op's messages, in the order it combines them (its block's
        // `recv_peers()`), each with the transfer that carries it.
        let mut edges: Vec<(usize, usize, u32, u32)> = Vec::with_capacity(messages.len());
        for (t, &item) in messages.iter().zip(&item_of) {
            if let (Some(from), Some(to)) = (index(t.from), index(t.to)) {
                let order = plan
                    .gpus
                    .get(t.to.rank as usize)
                    .and_then(|g| g.blocks.get(t.to.block as usize))
                    .and_then(|b| b.recv_peers().position(|p| p == t.from.rank))
                    .unwrap_or(usize::MAX);
                edges.push((to, order, from as u32, item));
            }
        }
        // Stable: a single-peer plan's messages stay in the order they were found.
        edges.sort_by_key(|&(to, order, _, _)| (to, order));
        for (to, _, from, item) in edges {
            nodes[to].from.push((from, item));
        }
        // Local work: local ops, and the combining of the messages of an op receiving
        // several, which reads each once: `k` messages cost what `k` reductions of the op's
        // bytes do (a reduce reads one input into its destination). Local work of one GPU in
        // one step shares its memory bandwidth, as transfers on one link share the link:
        // blocks copying side by side do not copy faster.
        let mut work: Vec<(OpRef, u32, bool, u32)> = Vec::new();
        let mut locals: BTreeMap<(u32, u32), u32> = BTreeMap::new();
        for (at, _, op) in crate::dump::ops(plan) {
            let received = index(at).map_or(0, |i| nodes[i].from.len());
            let (inputs, combine) = if OpClass::of(op.kind) == OpClass::Local {
                (1, false)
            } else if op.kind.receives() && received > 1 {
                (u32::try_from(received).unwrap_or(u32::MAX), true)
            } else {
                continue;
            };
            let step = step_of(at.rank, at.block, at.op)?;
            *locals.entry((step, at.rank)).or_insert(0) += 1;
            work.push((at, inputs, combine, step));
        }
        for (at, inputs, combine, step) in work {
            let Some(op) = plan
                .gpus
                .get(at.rank as usize)
                .and_then(|g| g.blocks.get(at.block as usize))
                .and_then(|b| b.ops.get(at.op as usize))
            else {
                continue;
            };
            let sharing = locals.get(&(step, at.rank)).copied().unwrap_or(1).max(1);
            let item = Item {
                latency_us: model.local_latency_us,
                bandwidth_gbs: model.local_bandwidth_gbs
                    / f64::from(inputs.saturating_mul(sharing)),
                offset: op.src.or(op.dst).map_or(0, |s| s.offset()),
                count: u64::from(op.count),
                sharing,
            };
            memory_loads.entry(at.rank).or_default().push((
                items.len() as u32,
                model.local_bandwidth_gbs / f64::from(inputs),
            ));
            if combine {
                if let Some(i) = index(at) {
                    nodes[i].combine = Some(items.len() as u32);
                }
                items.push(item);
            } else {
                add(&mut items, &mut nodes, at, item, false);
            }
        }
        let loads = link_loads
            .into_iter()
            .map(|((link, forward), items)| Load {
                of: LoadOf::Link { link, forward },
                items,
            })
            .chain(memory_loads.into_iter().map(|(rank, items)| Load {
                of: LoadOf::Memory { rank },
                items,
            }))
            .collect();
        let graph = dataflow::Graph::ordered(nodes).map_err(|at| PredictError::Unscheduled {
            at: location(plan, at.rank, at.block, Some(at.op)),
        })?;
        Ok(Compiled {
            collective: plan.collective.0,
            ranks: plan.ranks,
            chunk_factor: plan.chunk_factor,
            pipeline_bytes: model.pipeline_bytes,
            items,
            graph,
            loads,
        })
    }
}
