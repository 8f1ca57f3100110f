//! The connections between the ranks of a CPU run ([`World`]): bounded FIFOs between ranks of
//! this process, the mesh's proxy for ranks of others, and the signals that wake a rank when a
//! message or room arrives (the invariants are `mod.rs`'s).

use crate::dtype::Element;
use crate::net::mesh::{Failure, Mesh, Placement};
use crate::sync::{Signal, lock};
use coll_compiler::plan::Plan;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// One connection `rank -> peer` on a channel, as this process sees it.
pub(super) enum Conn<T> {
    /// Both ends in this process: a bounded FIFO of messages.
    Local(Mutex<VecDeque<Vec<T>>>),
    /// The receiver lives in process `proc`: messages go to the proxy, which counts them
    /// against the credits the receiver returned.
    Out { proc: u32 },
    /// The sender lives in process `proc`: messages come from the proxy's inbox, and each one
    /// taken returns a credit.
    In { proc: u32 },
}

/// The remote side of a multi-process run.
pub(super) struct Net<'a> {
    pub(super) mesh: &'a Mesh,
    pub(super) place: Placement,
    /// Plan position -> physical rank (rooted collectives are relabelled).
    pub(super) shift: u32,
}

impl Net<'_> {
    /// The process that runs plan position `p`.
    pub(super) fn owner(&self, p: u32) -> u32 {
        self.place.owner((p + self.shift) % self.place.ranks)
    }
}

/// The connections and signals of the ranks this process runs.
pub(super) struct World<'a, T> {
    pub(super) conns: HashMap<(u32, u32, u32), Conn<T>>,
    pub(super) signals: &'a [Signal],
    pub(super) slots: usize,
    pub(super) net: Option<Net<'a>>,
}

impl<'a, T> World<'a, T> {
    pub(super) fn new(
        plan: &Plan,
        slots: usize,
        signals: &'a [Signal],
        net: Option<Net<'a>>,
    ) -> Self {
        let mut conns = HashMap::new();
        let here = |r: u32| net.as_ref().is_none_or(|n| n.owner(r) == n.mesh.me());
        let owner = |r: u32| net.as_ref().map_or(0, |n| n.owner(r));
        for (r, gpu) in plan.gpus.iter().enumerate() {
            let r = r as u32;
            // Every connection has exactly one sending block, so listing the send side of
            // each block lists every connection once, several-peer blocks included.
            for b in &gpu.blocks {
                for q in b.send_peers() {
                    let conn = match (here(r), here(q)) {
                        (true, true) => Conn::Local(Mutex::new(VecDeque::with_capacity(slots))),
                        (true, false) => Conn::Out { proc: owner(q) },
                        (false, true) => Conn::In { proc: owner(r) },
                        (false, false) => continue,
                    };
                    conns.insert((r, q, b.channel), conn);
                }
            }
        }
        World {
            conns,
            signals,
            slots,
            net,
        }
    }

    pub(super) fn wake_all(&self) {
        self.signals.iter().for_each(Signal::notify);
    }

    pub(super) fn wake(&self, rank: u32) {
        if let Some(s) = self.signals.get(rank as usize) {
            s.notify();
        }
    }

    pub(super) fn failure(&self) -> Option<Failure> {
        self.net.as_ref().and_then(|n| n.mesh.failure())
    }
}

impl<T: Element> World<'_, T> {
    /// Whether connection `key` has room for one more message.
    pub(super) fn room(&self, key: (u32, u32, u32)) -> bool {
        match self.conns.get(&key) {
            Some(Conn::Local(q)) => lock(q).len() < self.slots,
            Some(Conn::Out { .. }) => self
                .net
                .as_ref()
                .is_some_and(|n| n.mesh.in_flight(key.0, key.1, key.2) < self.slots as u64),
            _ => false,
        }
    }

    /// Whether a message of connection `key` has arrived (to be taken by this rank only).
    pub(super) fn arrived(&self, key: (u32, u32, u32)) -> bool {
        match self.conns.get(&key) {
            Some(Conn::Local(q)) => !lock(q).is_empty(),
            Some(Conn::In { .. }) => self
                .net
                .as_ref()
                .is_some_and(|n| n.mesh.arrived(key.0, key.1, key.2)),
            _ => false,
        }
    }

    /// Takes the next message of connection `key` and frees its slot.
    pub(super) fn take(&self, key: (u32, u32, u32)) -> Option<Vec<T>> {
        let (from, to, channel) = key;
        match self.conns.get(&key)? {
            Conn::Local(q) => {
                let m = lock(q).pop_front()?;
                // A slot freed: the sender may go on.
                self.wake(from);
                Some(m)
            }
            Conn::In { proc } => {
                let net = self.net.as_ref()?;
                let bytes = net.mesh.take(from, to, channel)?;
                net.mesh.credit(*proc, from, to, channel);
                Some(bytemuck::pod_collect_to_vec::<u8, T>(&bytes))
            }
            Conn::Out { .. } => None,
        }
    }

    /// Puts a message on connection `key` (room was checked).
    pub(super) fn put(&self, key: (u32, u32, u32), msg: Vec<T>) {
        let (from, to, channel) = key;
        match self.conns.get(&key) {
            Some(Conn::Local(q)) => {
                lock(q).push_back(msg);
                self.wake(to);
            }
            Some(Conn::Out { proc }) => {
                if let Some(net) = &self.net {
                    let bytes = bytemuck::cast_slice::<T, u8>(&msg).to_vec();
                    net.mesh.send_data(*proc, from, to, channel, bytes);
                }
            }
            _ => {}
        }
    }
}
