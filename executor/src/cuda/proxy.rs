//! The host proxy of GPU remote channels: connections whose ends run in different processes
//! across a network (a `net` hop of the topology) are staged in pinned host memory that the
//! kernel reads and writes as it does peer memory, and a proxy thread per process moves the
//! messages through the process's [`Mesh`] (TCP or RDMA underneath).
//!
//! The kernel does not know: a connection end is still `(slots, sent, acked)`, only here the
//! three live in host memory of the kernel's own process. On the sending side the kernel
//! fills slot `k % SLOTS`, records its length and publishes `sent = k + 1`; the proxy forwards
//! the message and, as the receiver returns credits, publishes `acked`. On the receiving side
//! the proxy writes arriving message `k` into slot `k % SLOTS` and publishes `sent = k + 1`;
//! as the kernel publishes `acked`, the proxy returns credits.
//!
//! The same thread watches the group: when the [`Mesh`] records a failure (a peer process
//! died, broke the protocol or aborted), it aborts this process's executor
//! ([`Aborter::abort`]) so the local waits end at once with an error naming the peer,
//! instead of at the call's timeout, and stops; it also stops when the executor is aborted
//! by its owner. The timeout stays the fallback for a peer that hangs without failing.
//!
//! Invariants: one [`NetEnd`] per (connection, sub-CTA) end in this process, a block of
//! several peers having a connection per peer (each forwarded on its own); counters are
//! absolute across calls, like the kernel's; a message is forwarded only after the kernel
//! published it, and written into a slot only when the sender held a credit for it, so slot
//! `k % SLOTS` is free when message `k` arrives.

use super::device::{Gpu, HostMapped};
use super::fault::Aborter;
use super::{MAX_SPLIT, SLOT_BYTES, SLOTS};
use crate::error::{AbortCause, ExecError};
use crate::net::mesh::{Mesh, Placement};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often the proxy looks at the mesh's failure (a lock) and the executor's abort.
const WATCH_EVERY: Duration = Duration::from_millis(1);

/// Byte offsets in an end's host memory: room for the largest slots, one length per slot,
/// then the counters. Slots of a plan's own size ([`NetEnd::slot_bytes`]) start at 0 and its
/// lengths right after them, where the kernel writes them; the counters stay here.
const LENS_MAX_AT: usize = (SLOTS * SLOT_BYTES) as usize;
pub const SENT_AT: usize = LENS_MAX_AT + 8 * SLOTS as usize;
pub const ACKED_AT: usize = SENT_AT + 64;
pub const END_BYTES: usize = ACKED_AT + 64;

/// The channel the mesh carries sub-CTA `sub` of plan channel `channel` on: every sub-CTA
/// of a split block is a connection of its own. A run's grant must name these
/// ([`Mesh`]'s [`crate::net::mesh::Grant::for_split_plan`] with [`MAX_SPLIT`]).
pub fn wire_channel(channel: u32, sub: u32) -> u32 {
    channel * MAX_SPLIT + sub
}

/// What a run of `plan` over processes lets the mesh deliver to this process: every
/// connection of the plan on each of its sub-channels ([`wire_channel`]), [`SLOTS`]
/// messages of at most one slot each.
pub fn grant(plan: &coll_compiler::plan::Plan) -> crate::net::mesh::Grant {
    crate::net::mesh::Grant::for_split_plan(
        plan,
        u64::from(SLOTS),
        u64::from(SLOT_BYTES),
        MAX_SPLIT,
    )
}

/// Which side of a connection this process runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    Send,
    Recv,
}

/// One end of a remote connection in this process.
#[derive(Debug)]
pub struct NetEnd {
    pub side: Side,
    /// `(from, to, channel)` as the mesh names it (channel includes the sub-CTA).
    pub key: (u32, u32, u32),
    /// The process at the other end.
    pub peer: u32,
    pub mem: HostMapped,
    /// Bytes of each slot: the plan's ([`super::config::slot_bytes`]), as the kernel uses.
    slot_bytes: usize,
    /// Messages forwarded (send side) or delivered (receive side).
    moved: u64,
    /// Credits published to the kernel (send side) or returned to the sender (receive side).
    credits: u64,
}

impl NetEnd {
    pub fn new(
        gpu: &Gpu,
        side: Side,
        key: (u32, u32, u32),
        peer: u32,
        slot_bytes: u32,
    ) -> Result<NetEnd, ExecError> {
        if slot_bytes > SLOT_BYTES {
            return Err(ExecError::Gpu(format!(
                "slots of {slot_bytes} bytes: at most {SLOT_BYTES}"
            )));
        }
        Ok(NetEnd {
            side,
            key,
            peer,
            mem: HostMapped::new(gpu, END_BYTES)?,
            slot_bytes: slot_bytes as usize,
            moved: 0,
            credits: 0,
        })
    }

    /// `(slots, sent, acked)` device addresses for the kernel's connection entry.
    pub fn kernel_view(&self) -> (u64, u64, u64) {
        let d = self.mem.dev();
        (d, d + SENT_AT as u64, d + ACKED_AT as u64)
    }

    /// Moves what can move now; returns whether anything did.
    fn pump(&mut self, mesh: &Mesh, buf: &mut Vec<u8>) -> bool {
        let (from, to, ch) = self.key;
        let mut busy = false;
        match self.side {
            Side::Send => {
                let published = self.mem.load(SENT_AT);
                while self.moved < published {
                    let slot = (self.moved % u64::from(SLOTS)) as usize;
                    let lens_at = SLOTS as usize * self.slot_bytes;
                    let len = (self.mem.load(lens_at + 8 * slot) as usize).min(self.slot_bytes);
                    // SAFETY: the kernel wrote this slot before publishing `published`, and
                    // rewrites it only after the credit this message returns (`ACKED_AT`).
                    unsafe { self.mem.read(slot * self.slot_bytes, buf, len) };
                    mesh.send_data(self.peer, from, to, ch, std::mem::take(buf));
                    self.moved += 1;
                    busy = true;
                }
                let returned = mesh.returned(from, to, ch);
                if returned > self.credits {
                    self.credits = returned;
                    self.mem.store(ACKED_AT, returned);
                    busy = true;
                }
            }
            Side::Recv => {
                while let Some(bytes) = mesh.take(from, to, ch) {
                    let slot = (self.moved % u64::from(SLOTS)) as usize;
                    let len = bytes.len().min(self.slot_bytes);
                    // SAFETY: the peer sent this message on a credit, so the kernel has consumed
                    // the slot's last message, and reads this one only after `SENT_AT` below.
                    unsafe { self.mem.write(slot * self.slot_bytes, &bytes[..len]) };
                    self.moved += 1;
                    self.mem.store(SENT_AT, self.moved);
                    busy = true;
                }
                let consumed = self.mem.load(ACKED_AT);
                while self.credits < consumed {
                    mesh.credit(self.peer, from, to, ch);
                    self.credits += 1;
                    busy = true;
                }
            }
        }
        busy
    }
}

/// The proxy thread of this process's GPU remote channels; stops on drop.
#[derive(Debug)]
pub struct Proxy {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Proxy {
    /// Starts pumping `ends` through `mesh` until dropped, a peer process fails (then it
    /// aborts through `abort`) or the executor is aborted.
    /// `place` names the failed process's ranks in the error.
    pub fn start(
        mut ends: Vec<NetEnd>,
        mesh: Arc<Mesh>,
        abort: Arc<Aborter>,
        place: Option<Placement>,
    ) -> Proxy {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = std::thread::spawn(move || {
            let mut buf = Vec::new();
            let mut idle = 0u32;
            let mut watched = Instant::now();
            while !flag.load(Ordering::Acquire) {
                if watched.elapsed() >= WATCH_EVERY {
                    watched = Instant::now();
                    if watch(&mesh, &abort, place.as_ref()) {
                        return;
                    }
                }
                let mut busy = false;
                for e in &mut ends {
                    busy |= e.pump(&mesh, &mut buf);
                }
                // Spin while traffic flows; back off to short sleeps when idle, so an idle
                // executor costs almost nothing and a new call is seen within ~50 µs.
                if busy {
                    idle = 0;
                } else {
                    idle = idle.saturating_add(1);
                    if idle < 1000 {
                        std::hint::spin_loop();
                    } else {
                        std::thread::sleep(Duration::from_micros(50));
                    }
                }
            }
        });
        Proxy {
            stop,
            handle: Some(handle),
        }
    }
}

/// Whether the proxy should stop: the executor was aborted (then the other processes are
/// told, so their calls end too instead of timing out), or a peer failed (then the executor
/// is aborted here, naming the peer).
fn watch(mesh: &Mesh, abort: &Aborter, place: Option<&Placement>) -> bool {
    match abort.cause() {
        Some(AbortCause::Caller) => {
            mesh.abort("its executor was aborted by its owner");
            return true;
        }
        Some(AbortCause::Peer(_)) => return true,
        None => {}
    }
    match mesh.failure() {
        None => false,
        Some(f) => {
            // A failed enqueue of the abort leaves the timeout to end the waits; the proxy
            // stops either way, since the peer is gone.
            let _ = abort.abort(AbortCause::Peer(f.describe(place)));
            true
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::mesh::loopback;
    use std::time::Instant;

    /// An aborter of no GPUs: the watch's logic without a device.
    fn aborter() -> Arc<Aborter> {
        Arc::new(Aborter::new(&[]).expect("no GPU to open"))
    }

    fn until(what: &str, done: impl Fn() -> bool) {
        let start = Instant::now();
        while !done() {
            assert!(start.elapsed() < Duration::from_secs(10), "{what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A run over processes is granted every connection its proxies send on: each sub-CTA
    /// of each channel of each network block (a plan whose compiler-chosen channels go past
    /// 0 was refused with "no grant" when the grant named plan channels alone).
    #[test]
    fn the_grant_names_every_wire_channel_the_proxies_use() {
        let topo = coll_compiler::topology::Topology::parse("cluster:2x4").expect("preset");
        let plan = crate::shipped::plan_of("alltoall_2step.coll", &topo, "")
            .expect("compiles")
            .into_inner();
        let grant = grant(&plan);
        let conns = grant
            .conns
            .as_ref()
            .expect("a plan's grant names connections");
        let mut channels = std::collections::BTreeSet::new();
        let mut checked = 0;
        for (r, rp) in plan.gpus.iter().enumerate() {
            for (b, q) in rp
                .blocks
                .iter()
                .flat_map(|b| b.send_peers().map(move |q| (b, q)))
            {
                channels.insert(b.channel);
                for sub in 0..MAX_SPLIT {
                    let key = (r as u32, q, wire_channel(b.channel, sub));
                    assert!(
                        conns.contains(&key),
                        "{key:?} (channel {}, sub {sub})",
                        b.channel
                    );
                    checked += 1;
                }
            }
        }
        assert!(channels.len() > 1, "the plan uses channels {channels:?}");
        assert!(checked > 0);
        assert_eq!(grant.slots, u64::from(SLOTS));
    }

    /// A block of several peers sends on a connection per peer: the grant names each one's
    /// wire channels.
    #[test]
    fn the_grant_names_every_peer_of_a_block_of_several() {
        let plan = crate::cuda::fixture_plan("ok_head_several_peers_3.json");
        let grant = grant(&plan);
        let conns = grant.conns.expect("a plan's grant names connections");
        let mut checked = 0;
        for (r, rp) in plan.gpus.iter().enumerate() {
            for (b, q) in rp
                .blocks
                .iter()
                .flat_map(|b| b.send_peers().map(move |q| (b, q)))
            {
                for sub in 0..MAX_SPLIT {
                    let key = (r as u32, q, wire_channel(b.channel, sub));
                    assert!(conns.contains(&key), "{key:?}");
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 4 * MAX_SPLIT);
    }

    #[test]
    fn a_peers_failure_aborts_the_executor_naming_the_peer() {
        let mut meshes = loopback(2, 2, Duration::from_secs(10)).expect("loopback mesh");
        let other = meshes.pop().expect("process 1");
        let mine = Arc::new(meshes.pop().expect("process 0"));
        let abort = aborter();
        let place = Placement::new(2, 2);
        let proxy = Proxy::start(Vec::new(), Arc::clone(&mine), Arc::clone(&abort), place);
        assert!(abort.cause().is_none());
        other.abort("rank 1 timed out");
        until("the proxy saw the peer's failure", || {
            abort.cause().is_some()
        });
        assert_eq!(
            abort.cause(),
            Some(&AbortCause::Peer(
                "process 1 (rank 1) failed: rank 1 timed out".into()
            ))
        );
        // The thread stopped by itself; dropping the proxy joins it at once.
        drop(proxy);
    }

    #[test]
    fn an_owners_abort_is_passed_on_to_the_other_processes() {
        let mut meshes = loopback(2, 2, Duration::from_secs(10)).expect("loopback mesh");
        let other = meshes.pop().expect("process 1");
        let mine = Arc::new(meshes.pop().expect("process 0"));
        let abort = aborter();
        let _proxy = Proxy::start(Vec::new(), mine, Arc::clone(&abort), Placement::new(2, 2));
        abort.abort(AbortCause::Caller).expect("no GPU to write");
        until("process 1 heard of the abort", || other.failure().is_some());
        let f = other.failure().expect("failed");
        assert_eq!(f.proc(), 0);
        assert_eq!(
            f.to_string(),
            "process 0 failed: its executor was aborted by its owner"
        );
        // The first cause is kept.
        abort
            .abort(AbortCause::Peer("later".into()))
            .expect("no GPU");
        assert_eq!(abort.cause(), Some(&AbortCause::Caller));
    }
}
