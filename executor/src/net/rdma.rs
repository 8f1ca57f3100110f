//! The RDMA (ibverbs) backend: one reliable-connected (RC) queue pair per pair of processes,
//! frames written with RDMA WRITE WITH IMMEDIATE into a ring of receive slots at the peer.
//! Built with cargo feature `rdma`; it carries the same proxy protocol as the TCP backend
//! (see the parent module), so everything above a link is tested over TCP.
//!
//! Layout: `wire` holds the bookkeeping (no verbs), `link` a link's state machine over a
//! small transport trait, `verbs` the owned verbs handles and the raw calls (`unsafe` lives
//! there, in `link` where it calls its transport, and in the transport glue here).
//!
//! # Use
//! [`RdmaConfig::from_lookup`] reads these variables from the lookup it is given (the `coll`
//! binary passes its environment; the library never reads the process environment itself):
//! - `COLL_IB_HCA=NAME[:PORT]`: the device (as `ibv_devices` lists it) and port (default 1);
//!   unset, the first device. No device, or no device of that name, is
//!   [`NetError::NoDevice`] saying what was looked for and what exists.
//! - `COLL_IB_GID_INDEX=N`: the GID to address the port by. Unset: index 0 on InfiniBand;
//!   on RoCE the first RoCE v2 GID holding an IPv4 address (NCCL's choice too).
//! - `COLL_IB_TIMEOUT=N` (default 17): transport timeout exponent, 4.096 us * 2^N per try, 7
//!   retries; a peer that answers nothing for that long (about 4 s at 17) is taken for dead.
//! - `COLL_IB_SLOTS=N` (default 16) and `COLL_IB_SLOT_BYTES=N` (default 128 KiB): each link
//!   registers a receive ring and a send staging ring of N slots each (4 MiB a peer at the
//!   defaults). Every process must use the same values; a mismatch fails at connect.
//!
//! The device needs a port in state ACTIVE and, in the process, a locked-memory limit
//! (`ulimit -l`) large enough for the rings.
//!
//! # Setup
//! [`Backend::endpoint`] opens the device, allocates a protection domain and, per peer, a send
//! and a receive completion queue, an RC queue pair moved to INIT, a receive ring, a staging
//! ring, and posts the receive requests. The blob it returns (see *Endpoint blob*) tells every
//! peer where its queue pair and ring are. [`Backend::connect`] moves each queue pair to RTR
//! (towards the peer's QP number, PSN, LID/GID, at the smaller of the two MTUs) and RTS,
//! sends each peer a `Hello` and waits, at most `timeout`, for every peer's `Hello` and for
//! its own to be acknowledged: a returned link works in both directions. A peer that never
//! says hello is [`NetError::Unreachable`].
//!
//! # Slot ring
//! A link's receive ring is `slots` slots of `slot_bytes` bytes, contiguous, registered for
//! remote write; slot `i` is at `ring + i * slot_bytes`. The sender has a staging ring of the
//! same shape in its own memory: piece `k` of the link goes from staging slot `k % slots` to
//! receive slot `k % slots`. A frame (24-byte header, then payload: the bytes TCP would send)
//! is cut into pieces of `slot_bytes`; every piece but the last fills its slot, so the length
//! of each piece follows from the header and is checked on arrival (`byte_len` of the
//! completion). Receive requests carry no buffer: the write placed the data.
//!
//! # Immediate data
//! Every write carries a 32-bit immediate (big-endian on the wire):
//! - bits 31..30 class: 0 data, 1 credit, 2 hello, 3 ping;
//! - data: bit 29 first (the slot begins with a frame header), bit 28 last (the frame ends in
//!   this slot), bits 27..16 zero, bits 15..0 the slot index (so at most 65536 slots);
//! - credit: bits 29..0 the number of slots returned (at least 1);
//! - hello, ping: bits 29..0 zero. A set reserved bit is a protocol error.
//!
//! # Credits
//! A sender holds one credit per free slot of the peer's ring (`slots` at start) and writes a
//! piece only with a credit in hand, so the ring is never overrun; pieces must arrive in
//! slot order, which the receiver checks. A slot belongs to the receiver from the completion
//! of the write into it until it has copied the piece out; then it counts as freed, and freed
//! slots go back in one credit message per `max(slots / 2, 1)` (see `wire::RecvWindow` for why
//! that cannot deadlock). Control messages (credit, hello, ping) are zero-length writes with
//! immediate into the ring's base, carrying no data. A staging slot is refilled only after
//! the local completion of the write that last read it.
//!
//! Receive requests: each process keeps `2 * slots + 4` posted per link and reposts one per
//! receive completion it polls. Data in flight is at most `slots` pieces, credit messages at
//! most `slots` (each returns at least one credit of at most `slots` outstanding), hello at
//! most one and ping at most one (a new ping waits for the last one's completion). Pings to a
//! process that stops polling for a long while use up its requests one a second; then the
//! adapters' receiver-not-ready retries, which are unlimited, hold the writes until it polls
//! again: nothing is lost, only delayed.
//!
//! # Liveness
//! Verbs do not tell a receiver that its peer died. A receiver idle for a second sends a
//! ping; the peer's adapter acknowledges it without the peer's process, and when the process
//! is gone its queue pair is gone and the ping exhausts its retries: the link reports
//! [`NetError::Closed`], within about a second plus the transport timeout. A failed write is
//! reported the same way. Dropping both halves of a link waits (at most 2 s) for posted
//! writes to complete, so a `Bye` sent just before is delivered.
//!
//! # Endpoint blob
//! Little-endian. Header (48 bytes): `"COLR"`, version `u16` (1), LID `u16`, process `u32`,
//! process count `u32`, link layer `u8`, active MTU `u8` (`ibv_mtu`), 6 zero bytes, GID
//! `[u8; 16]`, slots `u32`, slot bytes `u32`. Then one 24-byte entry per process, for the peer
//! of that index (all zero at the process's own index): QP number `u32`, PSN `u32` (24 bits),
//! ring address `u64`, ring rkey `u32`, 4 zero bytes. A blob of any other length is
//! rejected as truncated.
//!
//! # Memory registration
//! Rings are page-aligned host memory registered with `IBV_ACCESS_RELAXED_ORDERING` (PCIe
//! relaxed ordering: faster on many root complexes; the adapter still writes a completion
//! only after its data, which is all the receiver relies on). Where registration with it
//! fails with EINVAL or EOPNOTSUPP, as older kernels and drivers do, it is retried without;
//! [`RdmaBackend::relaxed_ordering`] says which happened.
//!
//! GPU data reaches a link as frames in host memory (host staging: the proxy copies out of
//! and into GPU memory), and the link copies frames into its rings. GPUDirect RDMA, where the adapter reads and writes
//! GPU memory itself, is prepared but not used: [`RdmaBackend::register_dmabuf`] registers a
//! dma-buf exported by the GPU driver (`cuMemGetHandleForAddressRange` with
//! `CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD`, CUDA 11.7+, Linux 5.12+) through
//! `ibv_reg_dmabuf_mr`; a data path that writes from such a region straight into the peer's
//! ring (and a ring in GPU memory) is the next step.
//!
//! # What is verified
//! No machine of this project has an RDMA adapter (the GPU machines' kernels load mlx5, but
//! their containers see no device). Tested without one:
//! - the bookkeeping of `wire` (slots, credits, pieces, immediates, blobs, device and GID
//!   choice) and of `verbs` that needs no device (QP attributes and masks, the relaxed
//!   ordering fallback rule);
//! - the link state machine of `link` end to end against an in-memory adapter pair that
//!   behaves like RC queue pairs (latency, receive requests, completions, retry-exceeded
//!   towards a dead side, writes lost with a destroyed sender): frames of every size both ways
//!   at once, credit back-pressure, a `Bye` surviving a drop, a dead peer seen as `Closed`,
//!   malformed immediates, a silent peer at connect;
//! - the setup errors of a machine without a device or with a wrong `COLL_IB_HCA`.
//!
//! Not run anywhere yet: every verb against a real device (opening it, registration with
//! and without relaxed ordering, QP transitions on InfiniBand and RoCE, posting and polling,
//! the dma-buf hook), the GID and MTU choices on real fabrics, timing under real latency, and
//! the hello's tolerance of a peer slow to reach RTR (it relies on the transport retries:
//! about 4 s at the default timeout). Treat the backend as unproven until a two-node run on
//! real adapters passes the TCP backend's tests.

mod link;
mod verbs;
mod wire;

pub use wire::{MAX_SLOT_BYTES, MAX_SLOTS, MIN_SLOT_BYTES};

use super::{Backend, Link, NetError};
use link::{Completion, Conn};
use std::hash::{BuildHasher, Hasher};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};
use verbs::{Context, Cq, HostRegion, Pd, PortInfo, Qp, Remote};
use wire::{Endpoint, GidRow, PeerEntry};

const BACKEND: &str = "rdma";
/// `IBV_PORT_ACTIVE`.
const PORT_ACTIVE: u32 = 4;
/// `IBV_LINK_LAYER_ETHERNET`: RoCE, addressed by GID.
const LINK_LAYER_ETHERNET: u8 = 2;

fn setup(what: impl Into<String>) -> NetError {
    NetError::Setup {
        backend: BACKEND,
        what: what.into(),
    }
}

/// Settings of the RDMA backend (see the module docs for the environment variables).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RdmaConfig {
    /// Device name; `None`: the first device.
    pub hca: Option<String>,
    pub port: u8,
    pub gid_index: Option<u32>,
    /// Transport timeout exponent (1..=31).
    pub timeout: u8,
    pub slots: u32,
    pub slot_bytes: u32,
    /// How long a receiver waits idle before it checks the peer with a ping.
    pub keepalive: Duration,
}

impl Default for RdmaConfig {
    fn default() -> RdmaConfig {
        RdmaConfig {
            hca: None,
            port: 1,
            gid_index: None,
            timeout: 17,
            slots: 16,
            slot_bytes: 128 << 10,
            keepalive: Duration::from_secs(1),
        }
    }
}

impl RdmaConfig {
    /// Settings from `get` (an environment); a malformed value is a setup error naming it.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<RdmaConfig, NetError> {
        fn num<T: std::str::FromStr>(var: &str, v: &str) -> Result<T, NetError> {
            v.trim()
                .parse()
                .map_err(|_| setup(format!("{var}={v} is not a valid number")))
        }
        let mut c = RdmaConfig::default();
        if let Some(v) = get("COLL_IB_HCA").filter(|v| !v.trim().is_empty()) {
            let v = v.trim();
            let (name, port) = match v.split_once(':') {
                Some((n, p)) => (n, Some(p)),
                None => (v, None),
            };
            if let Some(p) = port {
                c.port = p.parse().map_err(|_| {
                    setup(format!(
                        "COLL_IB_HCA={v}: the port after `:` must be a number"
                    ))
                })?;
            }
            c.hca = Some(name.to_string());
        }
        if let Some(v) = get("COLL_IB_GID_INDEX") {
            c.gid_index = Some(num("COLL_IB_GID_INDEX", &v)?);
        }
        if let Some(v) = get("COLL_IB_TIMEOUT") {
            c.timeout = num("COLL_IB_TIMEOUT", &v)?;
        }
        if let Some(v) = get("COLL_IB_SLOTS") {
            c.slots = num("COLL_IB_SLOTS", &v)?;
        }
        if let Some(v) = get("COLL_IB_SLOT_BYTES") {
            c.slot_bytes = num("COLL_IB_SLOT_BYTES", &v)?;
        }
        c.check()?;
        Ok(c)
    }

    fn check(&self) -> Result<(), NetError> {
        wire::check_ring(self.slots, self.slot_bytes)
            .map_err(|e| setup(format!("COLL_IB_SLOTS/COLL_IB_SLOT_BYTES: {e}")))?;
        if !(1..=31).contains(&self.timeout) {
            return Err(setup(format!("COLL_IB_TIMEOUT={} (1 to 31)", self.timeout)));
        }
        if self.port == 0 {
            return Err(setup("port 0 does not exist (ports count from 1)"));
        }
        Ok(())
    }
}

/// Names of the RDMA devices ibverbs sees (empty where there is none, or no kernel support).
pub fn device_names() -> Vec<String> {
    verbs::DeviceList::get()
        .map(|l| l.names())
        .unwrap_or_default()
}

/// RDMA links over ibverbs (see the module docs).
#[derive(Debug)]
pub struct RdmaBackend {
    cfg: RdmaConfig,
    opened: Option<Opened>,
    relaxed: Option<bool>,
}

/// The device state between `endpoint` and `connect`.
#[derive(Debug)]
struct Opened {
    me: u32,
    procs: u32,
    pd: Arc<Pd>,
    port: PortInfo,
    gid: GidRow,
    /// Indexed by process; `None` at `me`.
    pending: Vec<Option<Pending>>,
}

/// One peer's queue pair and rings, before the peer's blob is known.
#[derive(Debug)]
struct Pending {
    qp: Qp,
    send_cq: Arc<Cq>,
    recv_cq: Arc<Cq>,
    ring: HostRegion,
    staging: HostRegion,
    psn: u32,
}

impl RdmaBackend {
    pub fn new(cfg: RdmaConfig) -> RdmaBackend {
        RdmaBackend {
            cfg,
            opened: None,
            relaxed: None,
        }
    }

    /// After [`Backend::endpoint`]: whether every ring was registered with
    /// `IBV_ACCESS_RELAXED_ORDERING` (`false`: the device refused it and the fallback is in
    /// use).
    pub fn relaxed_ordering(&self) -> Option<bool> {
        self.relaxed
    }

    /// GPUDirect RDMA hook, not used by the data path (see "Memory registration" in the
    /// module docs): registers `len` bytes at `offset` of the dma-buf `fd`, mapped at `iova`
    /// in the caller's address space, for local and remote write, with relaxed ordering where
    /// the device accepts it. Needs [`Backend::endpoint`] first (it opens the device).
    /// Unverified on hardware.
    pub fn register_dmabuf(
        &self,
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        iova: u64,
    ) -> Result<DmabufRegion, NetError> {
        let opened = self
            .opened
            .as_ref()
            .ok_or_else(|| setup("register_dmabuf needs endpoint() first: no device is open"))?;
        let (mr, relaxed) = opened
            .pd
            .dmabuf_region(fd.as_raw_fd(), offset, len, iova)
            .map_err(|e| setup(e.to_string()))?;
        Ok(DmabufRegion { mr, relaxed })
    }

    fn open(&self, me: u32, procs: u32) -> Result<Opened, NetError> {
        let cfg = &self.cfg;
        cfg.check()?;
        if me >= procs {
            return Err(setup(format!("process {me} of {procs}")));
        }
        let list = verbs::DeviceList::get();
        let names = list.as_ref().map(|l| l.names()).unwrap_or_default();
        let i = wire::select_device(&names, cfg.hca.as_deref()).map_err(|mut what| {
            // The listing itself failed (ENOSYS: the kernel has no RDMA support): same
            // advice, plus the reason.
            if let Err(e) = &list {
                what.push_str(&format!(" (ibv_get_device_list: {e})"));
            }
            NetError::NoDevice(what)
        })?;
        let name = names
            .get(i)
            .ok_or_else(|| NetError::NoDevice(format!("device {i} vanished")))?;
        let ctx = list
            .and_then(|l| l.open(i, name))
            .map_err(|e| setup(format!("cannot open device {name}: {e}")))?;
        let ctx = Arc::new(ctx);
        let port = ctx
            .port(cfg.port)
            .map_err(|e| setup(format!("{name} port {}: {e}", cfg.port)))?;
        if port.state != PORT_ACTIVE {
            return Err(setup(format!(
                "{name} port {} is not active (state {}): check its link with ibstat",
                cfg.port, port.state
            )));
        }
        let rows = ctx
            .gid_table(cfg.port, port.gid_table_len)
            .map_err(|e| setup(format!("{name} port {} GID table: {e}", cfg.port)))?;
        let gid = wire::choose_gid(&rows, port.link_layer, cfg.gid_index)
            .map_err(|e| setup(format!("{name} port {}: {e}", cfg.port)))?;
        let pd = Arc::new(
            ctx.alloc_pd()
                .map_err(|e| setup(format!("{name}: protection domain: {e}")))?,
        );
        let pending = (0..procs)
            .map(|p| (p != me).then(|| self.prepare(&ctx, &pd, p)).transpose())
            .collect::<Result<_, _>>()?;
        Ok(Opened {
            me,
            procs,
            pd,
            port,
            gid,
            pending,
        })
    }

    /// Queue pair (in INIT, receive requests posted) and rings for peer `p`.
    fn prepare(&self, ctx: &Arc<Context>, pd: &Arc<Pd>, p: u32) -> Result<Pending, NetError> {
        let cfg = &self.cfg;
        let fail = |what: &str, e: std::io::Error| {
            setup(format!("{}: {what} for process {p}: {e}", ctx.name))
        };
        let (sq, rq) = (cfg.slots + link::CONTROL_WRS, link::recv_depth(cfg.slots));
        let send_cq = Arc::new(
            ctx.create_cq(sq)
                .map_err(|e| fail("send completion queue", e))?,
        );
        let recv_cq = Arc::new(
            ctx.create_cq(rq)
                .map_err(|e| fail("receive completion queue", e))?,
        );
        let qp = pd
            .create_rc_qp(send_cq.clone(), recv_cq.clone(), sq, rq)
            .map_err(|e| fail("queue pair", e))?;
        qp.modify(verbs::init_attr(cfg.port))
            .map_err(|e| fail("queue pair to INIT", e))?;
        let bytes = cfg.slots as usize * cfg.slot_bytes as usize;
        let ring = pd
            .host_region(bytes, true)
            .map_err(|e| fail("receive ring (check ulimit -l)", e))?;
        let staging = pd
            .host_region(bytes, false)
            .map_err(|e| fail("staging ring (check ulimit -l)", e))?;
        for _ in 0..rq {
            qp.post_recv(0).map_err(|e| fail("posting receives", e))?;
        }
        Ok(Pending {
            qp,
            send_cq,
            recv_cq,
            ring,
            staging,
            psn: random_psn(p),
        })
    }
}

/// A starting packet sequence number (24 bits), different per connection and run so that
/// stale packets of an earlier run are not taken for ours.
fn random_psn(peer: u32) -> u32 {
    let mut h = std::hash::RandomState::new().build_hasher();
    h.write_u32(peer);
    h.write_u32(std::process::id());
    (h.finish() as u32) & 0xff_ffff
}

/// GPU memory registered through dma-buf; see [`RdmaBackend::register_dmabuf`]. Deregistered
/// when dropped.
#[derive(Debug)]
pub struct DmabufRegion {
    mr: verbs::Mr,
    relaxed: bool,
}

impl DmabufRegion {
    pub fn lkey(&self) -> u32 {
        self.mr.lkey()
    }

    pub fn rkey(&self) -> u32 {
        self.mr.rkey()
    }

    /// Whether the device took `IBV_ACCESS_RELAXED_ORDERING` for this region.
    pub fn relaxed_ordering(&self) -> bool {
        self.relaxed
    }
}

impl Backend for RdmaBackend {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn endpoint(&mut self, me: u32, procs: u32) -> Result<Vec<u8>, NetError> {
        self.opened = None;
        self.relaxed = None;
        let o = self.open(me, procs)?;
        let peers = o
            .pending
            .iter()
            .map(|p| {
                p.as_ref().map_or(PeerEntry::default(), |p| PeerEntry {
                    qpn: p.qp.qpn(),
                    psn: p.psn,
                    ring_addr: p.ring.addr(),
                    rkey: p.ring.rkey(),
                })
            })
            .collect();
        let blob = Endpoint {
            me,
            procs,
            lid: o.port.lid,
            link_layer: o.port.link_layer,
            mtu: o.port.active_mtu as u8,
            gid: o.gid.gid,
            slots: self.cfg.slots,
            slot_bytes: self.cfg.slot_bytes,
            peers,
        }
        .encode();
        self.relaxed = Some(
            o.pending
                .iter()
                .flatten()
                .all(|p| p.ring.relaxed && p.staging.relaxed),
        );
        self.opened = Some(o);
        Ok(blob)
    }

    fn connect(&mut self, blobs: &[Vec<u8>], timeout: Duration) -> Result<Vec<Link>, NetError> {
        let deadline = Instant::now() + timeout;
        let mut o = self
            .opened
            .take()
            .ok_or_else(|| setup("connect called before endpoint"))?;
        let (me, procs) = (o.me, o.procs);
        if blobs.len() != procs as usize {
            return Err(setup(format!(
                "{} endpoints for {procs} processes",
                blobs.len()
            )));
        }
        let cfg = &self.cfg;
        let mut conns = Vec::new();
        for (p, pending) in o.pending.iter_mut().enumerate() {
            let Some(pending) = pending.take() else {
                continue;
            };
            let p = p as u32;
            let protocol = |what: String| NetError::Protocol { peer: p, what };
            let e = Endpoint::decode(&blobs[p as usize]).map_err(protocol)?;
            if (e.me, e.procs) != (p, procs) {
                return Err(protocol(format!(
                    "endpoint says process {} of {}; expected process {p} of {procs}",
                    e.me, e.procs
                )));
            }
            if (e.slots, e.slot_bytes) != (cfg.slots, cfg.slot_bytes) {
                return Err(protocol(format!(
                    "rings of {} slots of {} bytes, this process uses {} of {}: set the same \
                     COLL_IB_SLOTS and COLL_IB_SLOT_BYTES everywhere",
                    e.slots, e.slot_bytes, cfg.slots, cfg.slot_bytes
                )));
            }
            let mine = e.peers[me as usize];
            let remote = Remote {
                qpn: mine.qpn,
                psn: mine.psn,
                lid: e.lid,
                gid: e.gid,
                global: o.port.link_layer == LINK_LAYER_ETHERNET || e.lid == 0,
                mtu: o.port.active_mtu.min(u32::from(e.mtu)),
            };
            let fail = |what: &str, err: std::io::Error| {
                setup(format!("queue pair to process {p}: {what}: {err}"))
            };
            pending
                .qp
                .modify(verbs::rtr_attr(cfg.port, &remote, o.gid.index))
                .map_err(|e| fail("INIT to RTR", e))?;
            pending
                .qp
                .modify(verbs::rts_attr(pending.psn, cfg.timeout))
                .map_err(|e| fail("RTR to RTS", e))?;
            let t = Verbs {
                qp: pending.qp,
                send_cq: pending.send_cq,
                recv_cq: pending.recv_cq,
                ring: pending.ring,
                staging: pending.staging,
                remote_qpn: mine.qpn,
                remote_ring: mine.ring_addr,
                remote_rkey: mine.rkey,
            };
            let mut c = Conn::new(p, t, cfg.slots, cfg.slot_bytes);
            c.hello()?;
            conns.push(c);
        }
        // Both directions of every link work once each peer's hello arrived and ours was
        // acknowledged.
        link::await_hellos(&mut conns, deadline, timeout)?;
        let keepalive = cfg.keepalive;
        Ok(conns
            .into_iter()
            .map(|c| link::link(c, keepalive))
            .collect())
    }
}

/// The real transport: a peer's RC queue pair, its completion queues and the two rings.
/// Field order: the queue pair is destroyed before the rings it reads and writes are
/// deregistered.
#[derive(Debug)]
struct Verbs {
    qp: Qp,
    send_cq: Arc<Cq>,
    recv_cq: Arc<Cq>,
    ring: HostRegion,
    staging: HostRegion,
    remote_qpn: u32,
    remote_ring: u64,
    remote_rkey: u32,
}

/// Whether `[at, at + len)` lies in a region of `size` bytes.
fn inside(at: usize, len: usize, size: usize) -> bool {
    at.checked_add(len).is_some_and(|end| end <= size)
}

impl link::Transport for Verbs {
    unsafe fn write_imm(
        &mut self,
        wr_id: u64,
        at: usize,
        len: u32,
        imm: u32,
    ) -> std::io::Result<()> {
        if !inside(at, len as usize, self.staging.size()) {
            return Err(std::io::Error::other(format!(
                "write of {len} bytes at {at} outside the ring"
            )));
        }
        let w = verbs::WriteImm {
            wr_id,
            local: self.staging.addr() + at as u64,
            lkey: self.staging.lkey(),
            len,
            remote: self.remote_ring + at as u64,
            rkey: self.remote_rkey,
            imm,
        };
        // SAFETY: in bounds (checked above; the peer's ring has our shape, checked at
        // connect); the caller keeps the staging bytes unmodified until the completion and
        // owns the remote slot by a credit.
        unsafe { self.qp.post_write_imm(&w) }
    }

    fn post_recv(&mut self) -> std::io::Result<()> {
        self.qp.post_recv(0)
    }

    fn poll_send(&mut self, out: &mut Vec<Completion>) -> std::io::Result<()> {
        self.send_cq.poll(out, 16)
    }

    fn poll_recv(&mut self, out: &mut Vec<Completion>) -> std::io::Result<()> {
        self.recv_cq.poll(out, 16)
    }

    unsafe fn read_ring<R>(&self, at: usize, len: usize, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        // SAFETY: in bounds, and the caller guarantees the adapter does not write the bytes
        // while `f` reads them.
        inside(at, len, self.ring.size()).then(|| f(unsafe { self.ring.slice(at, len) }))
    }

    unsafe fn fill_staging(
        &mut self,
        at: usize,
        len: usize,
        f: impl FnOnce(&mut [u8]),
    ) -> Option<()> {
        // SAFETY: in bounds, and the caller guarantees the adapter does not read the bytes
        // while `f` writes them.
        inside(at, len, self.staging.size()).then(|| f(unsafe { self.staging.slice_mut(at, len) }))
    }

    fn describe(&self) -> String {
        format!("RDMA queue pair {}", self.remote_qpn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    /// On a machine without an adapter (this project's and CI's) setup fails with a message
    /// that says what was looked for and what to do; on one with an adapter it gets through.
    #[test]
    fn without_a_device_setup_fails_saying_so() {
        let mut b = RdmaBackend::new(RdmaConfig::default());
        let r = b.endpoint(0, 2);
        if device_names().is_empty() {
            let err = r.expect_err("no RDMA device here");
            assert!(matches!(err, NetError::NoDevice(_)), "{err:?}");
            let msg = err.to_string();
            assert!(
                msg.starts_with(
                    "no RDMA device: looked for the first RDMA device (COLL_IB_HCA is unset) \
                     but ibverbs lists none: this machine has no RDMA adapter"
                ),
                "{msg}"
            );
            assert!(msg.contains("use the tcp backend instead"), "{msg}");
        } else {
            let blob = r.expect("setup on a machine with an RDMA device");
            assert!(Endpoint::decode(&blob).is_ok());
        }
    }

    #[test]
    fn a_named_device_that_is_absent_is_named() {
        let cfg = RdmaConfig::from_lookup(env(&[("COLL_IB_HCA", "nonexistent")])).expect("cfg");
        assert_eq!(cfg.hca.as_deref(), Some("nonexistent"));
        let err = RdmaBackend::new(cfg)
            .endpoint(1, 2)
            .expect_err("no device is called nonexistent");
        assert!(matches!(err, NetError::NoDevice(_)), "{err:?}");
        let msg = err.to_string();
        assert!(
            msg.starts_with("no RDMA device: COLL_IB_HCA=nonexistent "),
            "{msg}"
        );
        for name in device_names() {
            assert!(msg.contains(&name), "{msg} should list {name}");
        }
    }

    #[test]
    fn the_environment_is_read_and_checked() {
        let cfg = RdmaConfig::from_lookup(env(&[
            ("COLL_IB_HCA", "mlx5_2:2"),
            ("COLL_IB_GID_INDEX", "3"),
            ("COLL_IB_TIMEOUT", "20"),
            ("COLL_IB_SLOTS", "8"),
            ("COLL_IB_SLOT_BYTES", "65536"),
        ]))
        .expect("valid settings");
        assert_eq!(
            cfg,
            RdmaConfig {
                hca: Some("mlx5_2".into()),
                port: 2,
                gid_index: Some(3),
                timeout: 20,
                slots: 8,
                slot_bytes: 65536,
                ..RdmaConfig::default()
            }
        );
        let defaults = RdmaConfig::from_lookup(env(&[])).expect("defaults");
        assert_eq!(defaults, RdmaConfig::default());
        let bad = |vars: &'static [(&'static str, &'static str)], want: &str| {
            let err = RdmaConfig::from_lookup(env(vars)).expect_err("invalid");
            assert!(
                matches!(
                    err,
                    NetError::Setup {
                        backend: "rdma",
                        ..
                    }
                ),
                "{err:?}"
            );
            assert!(err.to_string().contains(want), "{err} lacks {want}");
        };
        bad(
            &[("COLL_IB_GID_INDEX", "two")],
            "COLL_IB_GID_INDEX=two is not a valid number",
        );
        bad(
            &[("COLL_IB_HCA", "mlx5_0:x")],
            "COLL_IB_HCA=mlx5_0:x: the port after",
        );
        bad(&[("COLL_IB_HCA", "mlx5_0:0")], "port 0 does not exist");
        bad(&[("COLL_IB_TIMEOUT", "40")], "COLL_IB_TIMEOUT=40 (1 to 31)");
        bad(&[("COLL_IB_SLOTS", "0")], "0 slots");
        bad(&[("COLL_IB_SLOT_BYTES", "16")], "slots of 16 bytes");
    }

    #[test]
    fn misuse_is_a_setup_error_not_a_crash() {
        let mut b = RdmaBackend::new(RdmaConfig::default());
        let err = b
            .connect(&[Vec::new(), Vec::new()], Duration::from_millis(10))
            .expect_err("connect before endpoint");
        assert_eq!(
            err.to_string(),
            "rdma setup: connect called before endpoint"
        );
        let err = b.endpoint(2, 2).expect_err("process 2 of 2");
        assert_eq!(err.to_string(), "rdma setup: process 2 of 2");
        let stdin = std::io::stdin();
        let err = b
            .register_dmabuf(stdin.as_fd(), 0, 4096, 0)
            .expect_err("no device open");
        assert!(err.to_string().contains("needs endpoint() first"), "{err}");
        let bad = RdmaConfig {
            slots: MAX_SLOTS + 1,
            ..RdmaConfig::default()
        };
        let err = RdmaBackend::new(bad)
            .endpoint(0, 2)
            .expect_err("ring too large");
        assert!(err.to_string().contains("slots (1 to 65536)"), "{err}");
    }

    use std::os::fd::AsFd;
}
