//! The proxy: one process's links to every other process, the threads that drive them and
//! what they delivered.
//!
//! A process runs one proxy thread that writes every outgoing frame (executors hand it
//! frames through a queue and never block on a socket) and one reader thread per link that
//! files incoming frames: data into the inbox of its connection, credits into the count of
//! returned slots, barrier arrivals, aborts and goodbyes. Readers wake the rank a frame
//! concerns through [`Mesh::signals`].
//!
//! What a peer may send is bounded by what this process granted ([`Grant`]): data only on
//! the plan's connections (any between the plan's ranks when the grant lists none), each
//! message within the grant's size, and never more messages on a connection than the slots
//! granted beyond the ones this process has credited back; barrier contributions once each,
//! in order, at most one barrier ahead; credits only for messages sent. A frame outside
//! these bounds is a protocol error: the link is closed and the failure names the peer, so
//! memory held for a peer never exceeds what was granted. Failure text from a peer is
//! escaped ([`printable`]) before anyone prints it.
//!
//! Invariants: inbox queues hold messages of one connection `(from, to, channel)` in send
//! order; `sent`, `returned`, `received` and `credited` per connection only grow, across
//! calls, with `returned <= sent` and `received <= credited + slots`; the first failure (a
//! peer that died, aborted or broke the protocol) is kept, replaced only by a death seen
//! directly, and every rank is woken when it is set.
//! A link whose peer said `Bye` ends quietly; any other end is a failure naming the peer.

use super::{Backend, Frame, FrameKind, FrameLimits, Link, MAX_ABORT_TEXT, NetError, printable};
use crate::bootstrap::{self, BootstrapError, Launch};
use crate::sync::{Signal, lock};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::ops::Range;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Which process owns which ranks: contiguous blocks, rank `r` in process
/// `r * procs / ranks`, so a `cluster:NxG` plan run with N processes puts one node in each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    pub ranks: u32,
    pub procs: u32,
}

impl Placement {
    /// `procs` must be between 1 and `ranks`.
    pub fn new(ranks: u32, procs: u32) -> Option<Placement> {
        (procs >= 1 && procs <= ranks).then_some(Placement { ranks, procs })
    }

    pub fn owner(&self, rank: u32) -> u32 {
        (u64::from(rank) * u64::from(self.procs) / u64::from(self.ranks)) as u32
    }

    /// The ranks process `p` owns: `owner(r) >= p` exactly when `r >= ceil(p * ranks /
    /// procs)`, so the block starts there and ends where process `p + 1`'s starts.
    pub fn ranks_of(&self, p: u32) -> Range<u32> {
        let start =
            |p: u32| (u64::from(p) * u64::from(self.ranks)).div_ceil(u64::from(self.procs)) as u32;
        start(p)..start(p + 1).min(self.ranks)
    }

    /// `ranks 4-7` or `rank 3`, for messages.
    pub fn describe(&self, p: u32) -> String {
        let r = self.ranks_of(p);
        if r.len() == 1 {
            format!("rank {}", r.start)
        } else {
            format!("ranks {}-{}", r.start, r.end - 1)
        }
    }
}

/// Why the mesh stopped working.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Process `proc` stopped answering: its link ended without a goodbye (it died or was
    /// killed) or broke, or it never reached a barrier. `what` completes "process P ...".
    Died { proc: u32, what: String },
    /// Process `proc` failed and said why.
    Aborted { proc: u32, what: String },
}

impl Failure {
    pub fn proc(&self) -> u32 {
        match self {
            Failure::Died { proc, .. } | Failure::Aborted { proc, .. } => *proc,
        }
    }

    /// In words, naming the process and, when `place` is known, its ranks: every error that
    /// reports a failure of another process says it this way.
    pub fn describe(&self, place: Option<&Placement>) -> String {
        let p = self.proc();
        let who = match place {
            Some(pl) => format!("process {p} ({})", pl.describe(p)),
            None => format!("process {p}"),
        };
        match self {
            Failure::Died { what, .. } => format!("{who} {what}"),
            Failure::Aborted { what, .. } => format!("{who} failed: {what}"),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe(None))
    }
}

type Conn = (u32, u32, u32);

/// What this process lets its peers send it (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// Messages a sender may have unacknowledged on one connection (the executor's slots).
    pub slots: u64,
    /// The largest message, in bytes, of any connection.
    pub max_message: u64,
    /// The connections `(from, to, channel)` data may arrive on; `None`: any between two of
    /// the plan's ranks.
    pub conns: Option<BTreeSet<(u32, u32, u32)>>,
}

impl Grant {
    /// Loose bounds for tests and experiments: 65536 slots of up to 1 GiB on any connection.
    pub const LOOSE: Grant = Grant {
        slots: 1 << 16,
        max_message: 1 << 30,
        conns: None,
    };

    /// What a run of `plan` needs: the plan's connections (every peer of a block of several:
    /// [`Block::recv_peers`](coll_compiler::plan::Block::recv_peers)), `slots` per
    /// connection, messages of at most `max_message` bytes.
    pub fn for_plan(plan: &coll_compiler::plan::Plan, slots: u64, max_message: u64) -> Grant {
        Grant::for_split_plan(plan, slots, max_message, 1)
    }

    /// [`for_plan`](Self::for_plan) for an executor that splits each of the plan's channels
    /// into `split` sub-channels, sending on channel `channel * split + sub` for every
    /// `sub < split` (the GPU executor's proxy: `cuda::proxy::wire_channel`).
    pub fn for_split_plan(
        plan: &coll_compiler::plan::Plan,
        slots: u64,
        max_message: u64,
        split: u32,
    ) -> Grant {
        let split = split.max(1);
        // Each receive connection once per receiving block and peer: a block of several
        // receive peers is granted every one of its connections, not only the first.
        let conns = plan
            .gpus
            .iter()
            .flat_map(|g| g.blocks.iter().map(move |b| (g.rank, b)))
            .flat_map(|(r, b)| b.recv_peers().map(move |p| (p, r, b.channel)))
            .flat_map(|(p, r, c)| (0..split).map(move |sub| (p, r, c * split + sub)))
            .collect();
        Grant {
            slots,
            max_message,
            conns: Some(conns),
        }
    }
}

#[derive(Default)]
struct State {
    inbox: HashMap<Conn, VecDeque<Vec<u8>>>,
    /// Messages sent and slots returned per connection, across calls.
    sent: HashMap<Conn, u64>,
    returned: HashMap<Conn, u64>,
    /// Messages received and slots credited back per connection, across calls.
    received: HashMap<Conn, u64>,
    credited: HashMap<Conn, u64>,
    /// Barriers this process has entered, and barrier frames taken from each peer.
    entered: u32,
    barriers_from: HashMap<u32, u32>,
    /// Barrier number -> contributions by process.
    barriers: HashMap<u32, HashMap<u32, Vec<u8>>>,
    failure: Option<Failure>,
}

struct Shared {
    /// The plan's rank count.
    ranks: u32,
    grant: Grant,
    state: Mutex<State>,
    /// Woken on barrier arrivals and failures (for [`Mesh::barrier`]).
    changed: Condvar,
    /// One per rank of the run, indexed by plan rank.
    signals: Vec<Signal>,
}

impl Shared {
    fn fail(&self, f: Failure) {
        {
            let mut s = lock(&self.state);
            // A death seen directly says more than another process's account of it.
            let replace = matches!(
                (&s.failure, &f),
                (None, _) | (Some(Failure::Aborted { .. }), Failure::Died { .. })
            );
            if replace {
                s.failure = Some(f);
            }
        }
        self.changed.notify_all();
        self.signals.iter().for_each(Signal::notify);
    }

    fn wake(&self, rank: u32) {
        if let Some(s) = self.signals.get(rank as usize) {
            s.notify();
        }
    }
}

/// A process's connections to every other process of a run.
pub struct Mesh {
    me: u32,
    procs: u32,
    backend: &'static str,
    shared: Arc<Shared>,
    out: Option<mpsc::Sender<(u32, Frame)>>,
    proxy: Option<std::thread::JoinHandle<()>>,
    next_barrier: std::sync::atomic::AtomicU32,
    /// Time spent connecting (bootstrap included).
    pub setup: Duration,
}

impl std::fmt::Debug for Mesh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mesh")
            .field("me", &self.me)
            .field("procs", &self.procs)
            .field("backend", &self.backend)
            .finish()
    }
}

/// Errors of building a mesh.
#[derive(Debug, thiserror::Error)]
pub enum MeshError {
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
    #[error(transparent)]
    Net(#[from] NetError),
}

impl Mesh {
    /// Bootstraps and connects this process (`launch.rank` of `launch.size`) to every other
    /// one through `backend`; `ranks` is the plan's rank count (one signal each); peers may
    /// send what `grant` allows.
    pub fn establish(
        launch: &Launch,
        backend: &mut dyn Backend,
        ranks: u32,
        grant: Grant,
        timeout: Duration,
    ) -> Result<Mesh, MeshError> {
        let start = Instant::now();
        let blob = backend.endpoint(launch.rank, launch.size)?;
        let blobs = bootstrap::rendezvous(launch, &blob, timeout)?;
        let links = backend.connect(&blobs, timeout.saturating_sub(start.elapsed()))?;
        let mut mesh = Mesh::from_links(
            launch.rank,
            launch.size,
            backend.name(),
            links,
            ranks,
            grant,
        );
        mesh.setup = start.elapsed();
        Ok(mesh)
    }

    /// Starts the proxy over already connected links (one per other process), taking from
    /// peers what `grant` allows.
    pub fn from_links(
        me: u32,
        procs: u32,
        backend: &'static str,
        links: Vec<Link>,
        ranks: u32,
        grant: Grant,
    ) -> Mesh {
        let limits = FrameLimits::for_data(grant.max_message);
        let shared = Arc::new(Shared {
            ranks,
            grant,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            signals: (0..ranks).map(|_| Signal::default()).collect(),
        });
        let mut txs = HashMap::new();
        for link in links {
            let Link { peer, tx, mut rx } = link;
            txs.insert(peer, tx);
            let shared = Arc::clone(&shared);
            // Readers are detached: one blocks until its peer closes, which may be when
            // that process exits; it holds nothing this process waits for.
            std::thread::spawn(move || {
                loop {
                    match rx.recv(&limits) {
                        Ok(f) => match deliver(&shared, peer, f) {
                            Ok(true) => {}
                            Ok(false) => return,
                            Err(what) => {
                                rx.close();
                                shared.fail(Failure::Died {
                                    proc: peer,
                                    what: format!(
                                        "broke the protocol ({what}); its link was closed"
                                    ),
                                });
                                return;
                            }
                        },
                        Err(NetError::Protocol { what, .. }) => {
                            rx.close();
                            shared.fail(Failure::Died {
                                proc: peer,
                                what: format!("broke the protocol ({what}); its link was closed"),
                            });
                            return;
                        }
                        Err(NetError::Closed { .. }) => {
                            shared.fail(Failure::Died {
                                proc: peer,
                                what: "died: it closed its connection without saying goodbye"
                                    .into(),
                            });
                            return;
                        }
                        Err(e) => {
                            shared.fail(Failure::Died {
                                proc: peer,
                                what: format!("died: its link broke ({e})"),
                            });
                            return;
                        }
                    }
                }
            });
        }
        let (out, queue) = mpsc::channel::<(u32, Frame)>();
        let proxy_shared = Arc::clone(&shared);
        let proxy = std::thread::spawn(move || {
            for (peer, frame) in queue {
                let Some(tx) = txs.get_mut(&peer) else {
                    continue;
                };
                if let Err(e) = tx.send(&frame) {
                    proxy_shared.fail(Failure::Died {
                        proc: peer,
                        what: format!("died: its link broke ({e})"),
                    });
                }
            }
        });
        Mesh {
            me,
            procs,
            backend,
            shared,
            out: Some(out),
            proxy: Some(proxy),
            next_barrier: std::sync::atomic::AtomicU32::new(0),
            setup: Duration::ZERO,
        }
    }

    pub fn me(&self) -> u32 {
        self.me
    }

    pub fn procs(&self) -> u32 {
        self.procs
    }

    pub fn backend(&self) -> &'static str {
        self.backend
    }

    /// One signal per plan rank, woken when something for that rank arrives.
    pub fn signals(&self) -> &[Signal] {
        &self.shared.signals
    }

    /// Queues a frame for process `proc`; the proxy sends it in order.
    pub fn send(&self, proc: u32, frame: Frame) {
        if let Some(out) = &self.out
            && out.send((proc, frame)).is_err()
        {
            self.shared.fail(Failure::Died {
                proc: self.me,
                what: "lost its proxy thread (it stopped)".into(),
            });
        }
    }

    /// The next message of connection `from -> to` on `channel`, if one arrived.
    pub fn take(&self, from: u32, to: u32, channel: u32) -> Option<Vec<u8>> {
        lock(&self.shared.state)
            .inbox
            .get_mut(&(from, to, channel))
            .and_then(VecDeque::pop_front)
    }

    /// Whether a message of connection `from -> to` on `channel` has arrived and waits to be
    /// taken ([`Mesh::take`]); the executor checks every connection of an op before taking
    /// from any.
    pub fn arrived(&self, from: u32, to: u32, channel: u32) -> bool {
        lock(&self.shared.state)
            .inbox
            .get(&(from, to, channel))
            .is_some_and(|q| !q.is_empty())
    }

    /// Sends one message of connection `from -> to` on `channel` to process `proc`.
    pub fn send_data(&self, proc: u32, from: u32, to: u32, channel: u32, bytes: Vec<u8>) {
        *lock(&self.shared.state)
            .sent
            .entry((from, to, channel))
            .or_default() += 1;
        self.send(proc, Frame::new(FrameKind::Data, channel, from, to, bytes));
    }

    /// Slots of connection `from -> to` on `channel` its receiver has freed so far.
    pub fn returned(&self, from: u32, to: u32, channel: u32) -> u64 {
        lock(&self.shared.state)
            .returned
            .get(&(from, to, channel))
            .copied()
            .unwrap_or(0)
    }

    /// Returns one slot of connection `from -> to` on `channel` to its sender in `proc`.
    pub fn credit(&self, proc: u32, from: u32, to: u32, channel: u32) {
        // Counted before it is sent: the sender may use the slot as soon as it arrives.
        *lock(&self.shared.state)
            .credited
            .entry((from, to, channel))
            .or_default() += 1;
        self.send(
            proc,
            Frame::new(FrameKind::Credit, channel, from, to, Vec::new()),
        );
    }

    /// Messages of connection `from -> to` on `channel` sent and not yet acknowledged.
    pub fn in_flight(&self, from: u32, to: u32, channel: u32) -> u64 {
        let s = lock(&self.shared.state);
        let key = (from, to, channel);
        let sent = s.sent.get(&key).copied().unwrap_or(0);
        sent.saturating_sub(s.returned.get(&key).copied().unwrap_or(0))
    }

    pub fn failure(&self) -> Option<Failure> {
        lock(&self.shared.state).failure.clone()
    }

    /// Tells every other process this one failed (they stop instead of timing out); at most
    /// [`MAX_ABORT_TEXT`] bytes of `what` are sent.
    pub fn abort(&self, what: &str) {
        let mut cut = what.len().min(MAX_ABORT_TEXT);
        while !what.is_char_boundary(cut) {
            cut -= 1;
        }
        for p in (0..self.procs).filter(|&p| p != self.me) {
            self.send(
                p,
                Frame::new(FrameKind::Abort, 0, 0, 0, what.as_bytes()[..cut].to_vec()),
            );
        }
    }

    /// Waits until every process reached this barrier; each contributes `payload` and gets
    /// every contribution, in process order (an all-gather: IPC handles, reports).
    /// Every process must call its barriers in the same order (they are numbered).
    pub fn barrier(&self, payload: &[u8], timeout: Duration) -> Result<Vec<Vec<u8>>, Failure> {
        let no = self
            .next_barrier
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        {
            let mut s = lock(&self.shared.state);
            s.entered = s.entered.max(no + 1);
        }
        for p in (0..self.procs).filter(|&p| p != self.me) {
            self.send(
                p,
                Frame::new(FrameKind::Barrier, no, self.me, p, payload.to_vec()),
            );
        }
        let deadline = Instant::now() + timeout;
        let mut s = lock(&self.shared.state);
        loop {
            if let Some(f) = &s.failure {
                return Err(f.clone());
            }
            let arrived = s.barriers.get(&no).map_or(0, HashMap::len);
            if arrived + 1 >= self.procs as usize {
                let mut got = s.barriers.remove(&no).unwrap_or_default();
                got.insert(self.me, payload.to_vec());
                return Ok((0..self.procs)
                    .map(|p| got.remove(&p).unwrap_or_default())
                    .collect());
            }
            let now = Instant::now();
            if now >= deadline {
                let missing = (0..self.procs)
                    .find(|p| {
                        *p != self.me && !s.barriers.get(&no).is_some_and(|b| b.contains_key(p))
                    })
                    .unwrap_or(0);
                return Err(Failure::Died {
                    proc: missing,
                    what: format!("did not reach barrier {no} within {timeout:?}"),
                });
            }
            s = self
                .shared
                .changed
                .wait_timeout(s, deadline - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }

    /// Says goodbye to every process and waits until the proxy has sent everything.
    pub fn close(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        for p in (0..self.procs).filter(|&p| p != self.me) {
            self.send(p, Frame::new(FrameKind::Bye, 0, self.me, p, Vec::new()));
        }
        drop(self.out.take());
        if let Some(h) = self.proxy.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Mesh {
    fn drop(&mut self) {
        if self.out.is_some() {
            self.shutdown();
        }
    }
}

/// Meshes of `procs` processes played by threads of this one, linked over TCP on loopback:
/// the whole remote path (proxy, frames, credits) without starting processes. For tests
/// and experiments on one machine.
pub fn loopback(procs: u32, ranks: u32, timeout: Duration) -> Result<Vec<Mesh>, NetError> {
    loopback_granting(procs, ranks, &Grant::LOOSE, timeout)
}

/// [`loopback`] with every process granting its peers `grant`.
pub fn loopback_granting(
    procs: u32,
    ranks: u32,
    grant: &Grant,
    timeout: Duration,
) -> Result<Vec<Mesh>, NetError> {
    use super::tcp::TcpBackend;
    let host = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
    let secret = super::auth::JobSecret::generate().map_err(|e| NetError::Setup {
        backend: "tcp",
        what: e.to_string(),
    })?;
    let mut backends: Vec<TcpBackend> = (0..procs)
        .map(|_| TcpBackend::new(host, secret.clone()))
        .collect();
    let blobs = backends
        .iter_mut()
        .enumerate()
        .map(|(i, b)| b.endpoint(i as u32, procs))
        .collect::<Result<Vec<_>, _>>()?;
    let links = std::thread::scope(|s| {
        let handles: Vec<_> = backends
            .iter_mut()
            .map(|b| {
                let blobs = &blobs;
                s.spawn(move || b.connect(blobs, timeout))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(NetError::Setup {
                        backend: "tcp",
                        what: "a connecting thread panicked".into(),
                    })
                })
            })
            .collect::<Result<Vec<_>, _>>()
    })?;
    Ok(links
        .into_iter()
        .enumerate()
        .map(|(i, l)| Mesh::from_links(i as u32, procs, "tcp", l, ranks, grant.clone()))
        .collect())
}

/// Files one incoming frame from process `peer`; `Ok(false)` when the link is done
/// (goodbye), `Err` when the frame is outside what this process granted (see the module
/// docs), saying how.
fn deliver(shared: &Shared, peer: u32, f: Frame) -> Result<bool, String> {
    let conn = (f.from, f.to, f.channel);
    let name = || format!("{} -> {} on channel {}", f.from, f.to, f.channel);
    match f.kind {
        FrameKind::Data => {
            // Which process plays which plan rank is the executor's business (rooted plans
            // are relabelled), so the grant names connections, not their owners.
            let granted = match &shared.grant.conns {
                Some(c) => c.contains(&conn),
                None => f.from < shared.ranks && f.to < shared.ranks,
            };
            if !granted {
                return Err(format!(
                    "data on connection {}, which it has no grant for",
                    name()
                ));
            }
            let mut s = lock(&shared.state);
            let credited = s.credited.get(&conn).copied().unwrap_or(0);
            let received = s.received.entry(conn).or_default();
            *received += 1;
            if *received > credited.saturating_add(shared.grant.slots) {
                return Err(format!(
                    "message {} on connection {}, while {} slots were granted and {credited} \
                     credited back",
                    *received,
                    name(),
                    shared.grant.slots
                ));
            }
            s.inbox.entry(conn).or_default().push_back(f.payload);
            drop(s);
            shared.wake(f.to);
        }
        FrameKind::Credit => {
            // Only a connection this process sent on has anything to credit.
            let mut s = lock(&shared.state);
            let sent = s.sent.get(&conn).copied().unwrap_or(0);
            let returned = s.returned.entry(conn).or_default();
            if *returned >= sent {
                return Err(format!(
                    "a credit for connection {} beyond the {sent} messages sent",
                    name()
                ));
            }
            *returned += 1;
            drop(s);
            shared.wake(f.from);
        }
        FrameKind::Barrier => {
            let mut s = lock(&shared.state);
            let seen = s.barriers_from.get(&peer).copied().unwrap_or(0);
            // A peer finishes barrier n only with this process's contribution to it, so it
            // can be at most one barrier ahead; and each link carries each barrier once.
            if f.channel != seen || f.channel > s.entered {
                return Err(format!(
                    "barrier {} where barrier {seen} was due (this process entered {})",
                    f.channel, s.entered
                ));
            }
            s.barriers_from.insert(peer, seen + 1);
            s.barriers
                .entry(f.channel)
                .or_default()
                .insert(peer, f.payload);
            drop(s);
            shared.changed.notify_all();
        }
        FrameKind::Abort => shared.fail(Failure::Aborted {
            proc: peer,
            what: printable(&String::from_utf8_lossy(&f.payload), MAX_ABORT_TEXT),
        }),
        FrameKind::Bye => return Ok(false),
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_lists_every_receive_peer_of_a_block() {
        // Rank 0's one block receives from ranks 1 and 2 and sends to both.
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/inputs/plans/ok_head_several_peers_3.json"
        );
        let text = std::fs::read_to_string(path).expect("the fixture ships");
        let plan = coll_compiler::plan::ValidPlan::from_json(&text).expect("valid");
        let grant = Grant::for_plan(&plan, 2, 64);
        let all: BTreeSet<Conn> = [(1, 0, 0), (2, 0, 0), (0, 1, 0), (0, 2, 0)].into();
        assert_eq!(grant.conns, Some(all));
        // Split in two: every connection on both sub-channels.
        let split = Grant::for_split_plan(&plan, 2, 64, 2);
        let all: BTreeSet<Conn> = [(1, 0), (2, 0), (0, 1), (0, 2)]
            .into_iter()
            .flat_map(|(p, r)| [(p, r, 0), (p, r, 1)])
            .collect();
        assert_eq!(split.conns, Some(all));
    }

    #[test]
    fn placement_gives_contiguous_blocks() {
        let p = Placement::new(8, 3).expect("valid");
        let owners: Vec<u32> = (0..8).map(|r| p.owner(r)).collect();
        assert_eq!(owners, [0, 0, 0, 1, 1, 1, 2, 2]);
        assert_eq!(p.ranks_of(1), 3..6);
        assert_eq!(p.describe(2), "ranks 6-7");
        assert_eq!(Placement::new(4, 4).expect("valid").describe(3), "rank 3");
        assert!(Placement::new(2, 3).is_none());
        assert!(Placement::new(2, 0).is_none());
        // The blocks tile the ranks and agree with `owner`, whatever the shapes.
        for ranks in 1..40 {
            for procs in 1..=ranks {
                let p = Placement::new(ranks, procs).expect("valid");
                let mut next = 0;
                for q in 0..procs {
                    let r = p.ranks_of(q);
                    assert_eq!(r.start, next, "{ranks} ranks, {procs} procs, process {q}");
                    assert!(!r.is_empty(), "{ranks} ranks, {procs} procs, process {q}");
                    assert!(r.clone().all(|x| p.owner(x) == q));
                    next = r.end;
                }
                assert_eq!(next, ranks);
            }
        }
    }

    #[test]
    fn failures_name_the_process_and_its_ranks() {
        let place = Placement::new(8, 4).expect("valid");
        let died = Failure::Died {
            proc: 2,
            what: "died: it closed its connection without saying goodbye".into(),
        };
        assert_eq!(
            died.describe(Some(&place)),
            "process 2 (ranks 4-5) died: it closed its connection without saying goodbye"
        );
        let failed = Failure::Aborted {
            proc: 1,
            what: "rank 2 timed out".into(),
        };
        assert_eq!(failed.to_string(), "process 1 failed: rank 2 timed out");
    }
}
