//! [`Plan::validate`]: every invariant the plan module's docs state, checked once, so
//! that back-ends accept only a [`super::ValidPlan`].

use super::*;

impl Plan {
    /// Checks every invariant in the module docs.
    pub fn validate(&self) -> Result<(), PlanError> {
        let invalid = |at: String, what: String| PlanError::Invalid { at, what };
        if self.version != PLAN_VERSION {
            return Err(PlanError::Version {
                found: self.version,
            });
        }
        if let Some(note) = &self.schedule {
            note.check()
                .map_err(|what| invalid("schedule".into(), what))?;
        }
        if self.chunk_factor > MAX_PLAN_CELLS {
            return Err(invalid(
                "plan".into(),
                format!(
                    "chunk_factor {} is over the limit of {MAX_PLAN_CELLS} plan chunks",
                    self.chunk_factor
                ),
            ));
        }
        let cells = self.buffers.iter().fold(0u64, |a, b| {
            a.saturating_add(b.chunks.saturating_mul(u64::from(self.ranks)))
        });
        if cells > MAX_PLAN_CELLS {
            return Err(invalid(
                "plan".into(),
                format!(
                    "buffers of {cells} plan chunks over {} ranks are over the limit of {MAX_PLAN_CELLS}",
                    self.ranks
                ),
            ));
        }
        if self.gpus.len() != self.ranks as usize {
            return Err(invalid(
                "plan".into(),
                format!(
                    "declares {} ranks but has {} gpus",
                    self.ranks,
                    self.gpus.len()
                ),
            ));
        }
        if self.buffers.len() < 2 {
            return Err(invalid(
                "plan".into(),
                "needs at least the input and output buffers".into(),
            ));
        }
        // Connection (from, to, channel) -> (sending block, receiving block).
        let mut senders: BTreeMap<(u32, u32, u32), u32> = BTreeMap::new();
        let mut receivers: BTreeMap<(u32, u32, u32), u32> = BTreeMap::new();
        for (r, gpu) in self.gpus.iter().enumerate() {
            let r = r as u32;
            if gpu.rank != r {
                return Err(invalid(
                    format!("gpu {r}"),
                    format!("has rank {}; ranks must be in order", gpu.rank),
                ));
            }
            for (b, block) in gpu.blocks.iter().enumerate() {
                let b = b as u32;
                let at = || location(self, r, b, None);
                if block.id != b {
                    return Err(invalid(
                        at(),
                        format!("has id {}; block ids must be 0, 1, 2, ...", block.id),
                    ));
                }
                for (first, also, role) in [
                    (block.send_peer, &block.send_also, "send"),
                    (block.recv_peer, &block.recv_also, "recv"),
                ] {
                    if first.is_none() && !also.is_empty() {
                        return Err(invalid(
                            at(),
                            format!("has further {role} peers but no {role} peer"),
                        ));
                    }
                    let peers: Vec<u32> = first.into_iter().chain(also.iter().copied()).collect();
                    for (k, &p) in peers.iter().enumerate() {
                        if p >= self.ranks || p == r {
                            return Err(invalid(
                                at(),
                                format!("{role} peer {p} is not another rank in 0..{}", self.ranks),
                            ));
                        }
                        if peers[..k].contains(&p) {
                            return Err(invalid(at(), format!("names {role} peer {p} twice")));
                        }
                    }
                }
                for q in block.send_peers() {
                    if let Some(other) = senders.insert((r, q, block.channel), b) {
                        return Err(invalid(
                            at(),
                            format!(
                                "sends to rank {q} on channel {} as block {other} does: a connection has one block per side",
                                block.channel
                            ),
                        ));
                    }
                }
                for p in block.recv_peers() {
                    if let Some(other) = receivers.insert((p, r, block.channel), b) {
                        return Err(invalid(
                            at(),
                            format!(
                                "receives from rank {p} on channel {} as block {other} does: a connection has one block per side",
                                block.channel
                            ),
                        ));
                    }
                }
                for (i, op) in block.ops.iter().enumerate() {
                    let at = || location(self, r, b, Some(i as u32));
                    if op.source as usize >= self.sources.len() {
                        return Err(invalid(
                            at(),
                            format!("source index {} is out of range", op.source),
                        ));
                    }
                    if op.count == 0 {
                        return Err(invalid(at(), "moves zero chunks".into()));
                    }
                    if op.kind.sends() && block.send_peer.is_none() {
                        return Err(invalid(
                            at(),
                            format!("{} in a block without a send peer", op.kind.long_name()),
                        ));
                    }
                    if op.kind.receives() && block.recv_peer.is_none() {
                        return Err(invalid(
                            at(),
                            format!("{} in a block without a recv peer", op.kind.long_name()),
                        ));
                    }
                    if op.kind.receives() && !op.kind.reduces() && !block.recv_also.is_empty() {
                        return Err(invalid(
                            at(),
                            format!(
                                "{} in a block of several recv peers: only a reducing receive combines several messages",
                                op.kind.long_name()
                            ),
                        ));
                    }
                    for (slice, needed, role) in [
                        (op.src, op.kind.needs_src(), "src"),
                        (op.dst, op.kind.needs_dst(), "dst"),
                    ] {
                        match (slice, needed) {
                            (None, true) => {
                                return Err(invalid(
                                    at(),
                                    format!("{} needs a {role}", op.kind.long_name()),
                                ));
                            }
                            (Some(_), false) if role == "dst" => {
                                return Err(invalid(
                                    at(),
                                    format!("{} takes no {role}", op.kind.long_name()),
                                ));
                            }
                            (Some(s), _) => {
                                let Some(buf) = self.buffers.get(s.buffer() as usize) else {
                                    return Err(invalid(
                                        at(),
                                        format!(
                                            "{role} names buffer {} of {}",
                                            s.buffer(),
                                            self.buffers.len()
                                        ),
                                    ));
                                };
                                // Checked: a hostile offset near 2^64 must not wrap
                                // back inside the buffer.
                                let end = s.offset().checked_add(u64::from(op.count));
                                if end.is_none_or(|e| e > buf.chunks) {
                                    return Err(invalid(
                                        at(),
                                        format!(
                                            "{role} chunks {}..{} are outside `{}` ({} chunks)",
                                            s.offset(),
                                            u128::from(s.offset()) + u128::from(op.count),
                                            buf.name,
                                            buf.chunks
                                        ),
                                    ));
                                }
                            }
                            (None, false) => {}
                        }
                    }
                    for d in &op.deps {
                        let ok = d.block() != b
                            && gpu
                                .blocks
                                .get(d.block() as usize)
                                .is_some_and(|x| (d.op() as usize) < x.ops.len());
                        if !ok {
                            return Err(invalid(
                                at(),
                                format!(
                                    "depends on block {} op {}, which does not exist (or is its own block)",
                                    d.block(),
                                    d.op()
                                ),
                            ));
                        }
                    }
                }
            }
        }
        // Pair sends and receives per connection, in order.
        for (&(from, to, chan), &sb) in &senders {
            let sends: Vec<(u32, u32)> = self.gpus[from as usize].blocks[sb as usize]
                .ops
                .iter()
                .enumerate()
                .filter(|(_, o)| o.kind.sends())
                .map(|(i, o)| (i as u32, o.count))
                .collect();
            let Some(&rb) = receivers.get(&(from, to, chan)) else {
                if let Some(&(i, _)) = sends.first() {
                    return Err(PlanError::Unmatched {
                        at: location(self, from, sb, Some(i)),
                        what: format!("send to rank {to} on channel {chan}"),
                        missing: "receive".into(),
                        peer: to,
                    });
                }
                continue;
            };
            let recvs: Vec<(u32, u32)> = self.gpus[to as usize].blocks[rb as usize]
                .ops
                .iter()
                .enumerate()
                .filter(|(_, o)| o.kind.receives())
                .map(|(i, o)| (i as u32, o.count))
                .collect();
            for k in 0..sends.len().max(recvs.len()) {
                match (sends.get(k), recvs.get(k)) {
                    (Some(&(si, sc)), Some(&(ri, rc))) if sc != rc => {
                        return Err(invalid(
                            location(self, from, sb, Some(si)),
                            format!(
                                "sends {sc} chunks but {} receives {rc}",
                                location(self, to, rb, Some(ri))
                            ),
                        ));
                    }
                    (Some(_), Some(_)) => {}
                    (Some(&(si, _)), None) => {
                        return Err(PlanError::Unmatched {
                            at: location(self, from, sb, Some(si)),
                            what: format!(
                                "send #{k} to rank {to} on channel {chan} (rank {from} sends {} messages there, rank {to} receives {})",
                                sends.len(),
                                recvs.len()
                            ),
                            missing: "receive".into(),
                            peer: to,
                        });
                    }
                    (None, Some(&(ri, _))) => {
                        return Err(PlanError::Unmatched {
                            at: location(self, to, rb, Some(ri)),
                            what: format!(
                                "receive #{k} from rank {from} on channel {chan} (rank {from} sends {} messages there, rank {to} receives {})",
                                sends.len(),
                                recvs.len()
                            ),
                            missing: "send".into(),
                            peer: from,
                        });
                    }
                    (None, None) => {}
                }
            }
        }
        for (&(from, to, chan), &rb) in &receivers {
            if !senders.contains_key(&(from, to, chan)) {
                let first = self.gpus[to as usize].blocks[rb as usize]
                    .ops
                    .iter()
                    .position(|o| o.kind.receives());
                if let Some(i) = first {
                    return Err(PlanError::Unmatched {
                        at: location(self, to, rb, Some(i as u32)),
                        what: format!("receive from rank {from} on channel {chan}"),
                        missing: "send".into(),
                        peer: from,
                    });
                }
            }
        }
        Ok(())
    }
}
