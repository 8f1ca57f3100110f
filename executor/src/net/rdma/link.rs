//! One RDMA link's state machine: credits, pieces, control messages, keepalive and the two
//! halves the proxy holds. It drives a [`Transport`] (an RC queue pair with its rings, or in
//! tests an in-memory stand-in), so all of it runs without an adapter.

use super::super::{Frame, FrameLimits, FrameRx, FrameTx, HEADER_BYTES, Link, NetError};
use super::verbs::STATUS_RETRY_EXCEEDED;
use super::wire::{self, Imm, Reassembly, RecvWindow, SendWindow};
use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Send-queue entries beyond the data slots, for control messages.
pub(super) const CONTROL_WRS: u32 = 8;
/// Receive requests kept posted per link (see "Credits" in the module docs).
pub(super) fn recv_depth(slots: u32) -> u32 {
    2 * slots + 4
}

/// Kinds of send work requests, in `wr_id`.
const WR_DATA: u64 = 0;
const WR_CREDIT: u64 = 1;
const WR_HELLO: u64 = 2;
const WR_PING: u64 = 3;

/// One work completion, as the link needs it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Completion {
    pub(super) wr_id: u64,
    /// `Err((ibv_wc_status, vendor error))` for a failed work request.
    pub(super) status: Result<(), (u32, u32)>,
    pub(super) byte_len: u32,
    /// The immediate value in host order, if the completion carries one.
    pub(super) imm: Option<u32>,
}

/// What a link needs of its queue pair and rings. Offsets are into the link's staging ring
/// (ours) and receive ring (the peer's, same shape, for writes; ours for reads).
pub(super) trait Transport: Send + 'static {
    /// Posts an RDMA write with immediate `imm` (host order) of staging bytes
    /// `[at, at + len)` into the peer's receive ring at `at`, asking for a completion with
    /// `wr_id`; `len == 0` carries only the immediate.
    ///
    /// # Safety
    /// The staging bytes must stay unmodified until that completion is polled, and the
    /// peer's ring bytes must be ours to write (a credit for their slot).
    unsafe fn write_imm(&mut self, wr_id: u64, at: usize, len: u32, imm: u32) -> io::Result<()>;
    /// Posts one receive request (no buffer: the writer places the data).
    fn post_recv(&mut self) -> io::Result<()>;
    /// Appends completed sends to `out`.
    fn poll_send(&mut self, out: &mut Vec<Completion>) -> io::Result<()>;
    /// Appends completed receives to `out`.
    fn poll_recv(&mut self, out: &mut Vec<Completion>) -> io::Result<()>;
    /// Runs `f` on receive-ring bytes `[at, at + len)`; `None` if out of the ring.
    ///
    /// # Safety
    /// Nothing may write those bytes meanwhile: the slot's piece arrived and its credit has
    /// not been returned.
    unsafe fn read_ring<R>(&self, at: usize, len: usize, f: impl FnOnce(&[u8]) -> R) -> Option<R>;
    /// Runs `f` on staging bytes `[at, at + len)`; `None` if out of the ring.
    ///
    /// # Safety
    /// Nothing may read those bytes meanwhile: the write that last read them completed.
    unsafe fn fill_staging(
        &mut self,
        at: usize,
        len: usize,
        f: impl FnOnce(&mut [u8]),
    ) -> Option<()>;
    /// Names the peer's end in an error ("RDMA queue pair 1234").
    fn describe(&self) -> String;
}

/// Why a link stopped working; kept so that every later call says the same.
#[derive(Clone, Debug)]
pub(super) enum Broken {
    /// The peer stopped acknowledging: its process is gone.
    Closed,
    Io(String),
    Protocol(String),
}

impl Broken {
    pub(super) fn into_error(self, peer: u32) -> NetError {
        match self {
            Broken::Closed => NetError::Closed { peer },
            Broken::Io(what) => NetError::Io {
                peer,
                source: io::Error::other(what),
            },
            Broken::Protocol(what) => NetError::Protocol { peer, what },
        }
    }

    fn from_status(op: &str, (status, vendor): (u32, u32)) -> Broken {
        if status == STATUS_RETRY_EXCEEDED {
            Broken::Closed
        } else {
            Broken::Io(format!(
                "{op} failed: {} (vendor error {vendor:#x})",
                super::verbs::status_str(status)
            ))
        }
    }
}

/// One stage of [`Conn::progress`].
type Step<T> = fn(&mut Conn<T>) -> Result<(), Broken>;

/// A piece polled from the receive queue, not yet copied out.
#[derive(Clone, Copy, Debug)]
struct Arrived {
    slot: u16,
    first: bool,
    last: bool,
    len: u32,
}

/// One link's state, shared by its two halves under a mutex.
#[derive(Debug)]
pub(super) struct Conn<T: Transport> {
    pub(super) peer: u32,
    t: T,
    slot_bytes: usize,
    tx: SendWindow,
    rx: RecvWindow,
    reasm: Reassembly,
    arrived: VecDeque<Arrived>,
    sq_inflight: u32,
    sq_depth: u32,
    hello_seen: bool,
    hello_done: bool,
    ping_inflight: bool,
    broken: Option<Broken>,
    scratch: Vec<Completion>,
}

impl<T: Transport> Conn<T> {
    /// A link to `peer` over `t`, whose receive requests are already posted.
    pub(super) fn new(peer: u32, t: T, slots: u32, slot_bytes: u32) -> Conn<T> {
        Conn {
            peer,
            t,
            slot_bytes: slot_bytes as usize,
            tx: SendWindow::new(slots),
            rx: RecvWindow::new(slots),
            reasm: Reassembly::new(slot_bytes as usize),
            arrived: VecDeque::new(),
            sq_inflight: 0,
            sq_depth: slots + CONTROL_WRS,
            hello_seen: false,
            hello_done: false,
            ping_inflight: false,
            broken: None,
            scratch: Vec::new(),
        }
    }

    fn fail(&mut self, b: Broken) -> NetError {
        self.broken = Some(b.clone());
        b.into_error(self.peer)
    }

    /// Polls both completion queues and sends owed credits; reports a broken link.
    fn progress(&mut self) -> Result<(), NetError> {
        // Receive first: pieces that arrived before a failure are still delivered.
        let steps: [Step<T>; 3] = [Conn::poll_recv, Conn::poll_send, Conn::flush_credits];
        for step in steps {
            if self.broken.is_none()
                && let Err(b) = step(self)
            {
                self.broken = Some(b);
            }
        }
        match &self.broken {
            Some(b) => Err(b.clone().into_error(self.peer)),
            None => Ok(()),
        }
    }

    fn poll_recv(&mut self) -> Result<(), Broken> {
        let mut wcs = std::mem::take(&mut self.scratch);
        let r = loop {
            wcs.clear();
            if let Err(e) = self.t.poll_recv(&mut wcs) {
                break Err(Broken::Io(format!("polling receives: {e}")));
            }
            if wcs.is_empty() {
                break Ok(());
            }
            if let Err(b) = wcs.iter().try_for_each(|c| self.on_recv(c)) {
                break Err(b);
            }
        };
        self.scratch = wcs;
        r
    }

    fn on_recv(&mut self, c: &Completion) -> Result<(), Broken> {
        c.status.map_err(|s| Broken::from_status("receive", s))?;
        self.t
            .post_recv()
            .map_err(|e| Broken::Io(format!("reposting a receive: {e}")))?;
        let imm = c
            .imm
            .ok_or_else(|| Broken::Protocol("a receive completion without immediate".into()))?;
        match Imm::decode(imm).map_err(Broken::Protocol)? {
            Imm::Data { slot, first, last } => {
                self.rx.arrive(slot).map_err(Broken::Protocol)?;
                self.arrived.push_back(Arrived {
                    slot,
                    first,
                    last,
                    len: c.byte_len,
                });
            }
            Imm::Credit(n) => self.tx.grant(n).map_err(Broken::Protocol)?,
            Imm::Hello => self.hello_seen = true,
            Imm::Ping => {}
        }
        Ok(())
    }

    fn poll_send(&mut self) -> Result<(), Broken> {
        let mut wcs = std::mem::take(&mut self.scratch);
        let r = loop {
            wcs.clear();
            if let Err(e) = self.t.poll_send(&mut wcs) {
                break Err(Broken::Io(format!("polling sends: {e}")));
            }
            if wcs.is_empty() {
                break Ok(());
            }
            if let Err(b) = wcs.iter().try_for_each(|c| self.on_send(c)) {
                break Err(b);
            }
        };
        self.scratch = wcs;
        r
    }

    fn on_send(&mut self, c: &Completion) -> Result<(), Broken> {
        self.sq_inflight = self.sq_inflight.saturating_sub(1);
        c.status.map_err(|s| Broken::from_status("write", s))?;
        match c.wr_id {
            WR_DATA => self.tx.written().map_err(Broken::Protocol)?,
            WR_HELLO => self.hello_done = true,
            WR_PING => self.ping_inflight = false,
            _ => {}
        }
        Ok(())
    }

    fn flush_credits(&mut self) -> Result<(), Broken> {
        if let Some(n) = self.rx.owed() {
            self.send_credit(n)?;
        }
        Ok(())
    }

    /// Returns `n` credits now, or later when the send queue is full.
    fn send_credit(&mut self, n: u32) -> Result<(), Broken> {
        if self.sq_inflight >= self.sq_depth || self.broken.is_some() {
            self.rx.unsent(n);
            return Ok(());
        }
        self.control(Imm::Credit(n), WR_CREDIT)
    }

    /// A zero-length write with immediate: credit, hello or ping.
    fn control(&mut self, imm: Imm, wr_id: u64) -> Result<(), Broken> {
        // SAFETY: a zero-length write reads no staging byte and writes no ring byte.
        unsafe { self.t.write_imm(wr_id, 0, 0, imm.encode()) }
            .map_err(|e| Broken::Io(format!("posting a control message: {e}")))?;
        self.sq_inflight += 1;
        Ok(())
    }

    /// Sends the connect-time hello.
    pub(super) fn hello(&mut self) -> Result<(), NetError> {
        self.control(Imm::Hello, WR_HELLO)
            .map_err(|b| b.into_error(self.peer))
    }

    /// Writes piece `p` of a frame if a credit, a staging slot and a send-queue entry are
    /// free; `Ok(false)` if not yet.
    fn try_send(
        &mut self,
        header: &[u8; HEADER_BYTES],
        payload: &[u8],
        p: wire::Piece,
    ) -> Result<bool, NetError> {
        self.progress()?;
        if self.sq_inflight >= self.sq_depth {
            return Ok(false);
        }
        let Some(slot) = self.tx.take() else {
            return Ok(false);
        };
        let at = usize::from(slot) * self.slot_bytes;
        // SAFETY: the window handed out this slot only after the write that last read it
        // completed, so the adapter is done with these bytes.
        let filled = unsafe {
            self.t
                .fill_staging(at, p.len, |dst| wire::fill(header, payload, p, dst))
        };
        if filled.is_none() {
            return Err(self.fail(Broken::Io(format!("slot {slot} outside the staging ring"))));
        }
        let imm = Imm::Data {
            slot,
            first: p.first,
            last: p.last,
        };
        // SAFETY: the staging bytes stay untouched until this write's completion (the window
        // again); the peer's slot `slot` is ours to write by the credit `take` used.
        let posted = unsafe { self.t.write_imm(WR_DATA, at, p.len as u32, imm.encode()) };
        if let Err(e) = posted {
            return Err(self.fail(Broken::Io(format!("posting a write: {e}"))));
        }
        self.sq_inflight += 1;
        Ok(true)
    }

    /// The next whole frame among the pieces that arrived, copying each piece out of its
    /// slot and returning the slot.
    fn next_frame(&mut self, limits: &FrameLimits) -> Result<Option<Frame>, NetError> {
        while let Some(a) = self.arrived.pop_front() {
            match self.take_piece(a, limits) {
                Ok(Some(f)) => return Ok(Some(f)),
                Ok(None) => {}
                Err(b) => return Err(self.fail(b)),
            }
        }
        Ok(None)
    }

    fn take_piece(&mut self, a: Arrived, limits: &FrameLimits) -> Result<Option<Frame>, Broken> {
        let len = a.len as usize;
        if len > self.slot_bytes {
            return Err(Broken::Protocol(format!(
                "{len} bytes written into a slot of {}",
                self.slot_bytes
            )));
        }
        let reasm = &mut self.reasm;
        // SAFETY: the piece in slot `a.slot` arrived (the window checked its order) and its
        // credit goes back only below, so the peer does not write these bytes meanwhile.
        let fed = unsafe {
            self.t
                .read_ring(usize::from(a.slot) * self.slot_bytes, len, |bytes| {
                    reasm.feed(a.first, a.last, bytes, limits)
                })
        };
        let frame = fed
            .ok_or_else(|| Broken::Protocol(format!("slot {} outside the ring", a.slot)))?
            .map_err(Broken::Protocol)?;
        if let Some(n) = self.rx.consume().map_err(Broken::Protocol)? {
            self.send_credit(n)?;
        }
        Ok(frame)
    }

    /// Asks the peer's adapter for an acknowledgement, unless one is pending.
    fn ping(&mut self) -> Result<(), NetError> {
        if self.ping_inflight || self.sq_inflight >= self.sq_depth || self.broken.is_some() {
            return Ok(());
        }
        if let Err(b) = self.control(Imm::Ping, WR_PING) {
            return Err(self.fail(b));
        }
        self.ping_inflight = true;
        Ok(())
    }
}

impl<T: Transport> Drop for Conn<T> {
    fn drop(&mut self) {
        // Destroying the queue pair drops posted writes: let them finish (a `Bye` just sent
        // must arrive), but never wait on a dead peer for long, nor at all on a link that
        // never came up (a failed connect drops every link).
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.hello_seen
            && self.sq_inflight > 0
            && self.broken.is_none()
            && Instant::now() < deadline
        {
            if self.progress().is_ok() && self.sq_inflight > 0 {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }
}

/// Waits until every link's peer said hello and every hello of ours was acknowledged, or
/// fails naming the first peer that did not by `deadline`.
pub(super) fn await_hellos<T: Transport>(
    conns: &mut [Conn<T>],
    deadline: Instant,
    timeout: Duration,
) -> Result<(), NetError> {
    let unreachable = |c: &Conn<T>| NetError::Unreachable {
        peer: c.peer,
        addr: c.t.describe(),
        timeout,
    };
    let mut backoff = Backoff::default();
    loop {
        let mut waiting = None;
        for c in conns.iter_mut().filter(|c| !(c.hello_seen && c.hello_done)) {
            match c.progress() {
                Err(NetError::Closed { .. }) => return Err(unreachable(c)),
                Err(e) => return Err(e),
                Ok(()) if !(c.hello_seen && c.hello_done) => waiting = waiting.or(Some(&*c)),
                Ok(()) => {}
            }
        }
        match waiting {
            None => return Ok(()),
            Some(c) if Instant::now() >= deadline => return Err(unreachable(c)),
            Some(_) => backoff.wait(),
        }
    }
}

/// The two halves of a connected link.
pub(super) fn link<T: Transport>(c: Conn<T>, keepalive: Duration) -> Link {
    let peer = c.peer;
    let conn = Arc::new(Mutex::new(c));
    Link {
        peer,
        tx: Box::new(RdmaTx {
            peer,
            conn: conn.clone(),
        }),
        rx: Box::new(RdmaRx {
            peer,
            conn,
            keepalive,
        }),
    }
}

fn lock<T: Transport>(
    conn: &Mutex<Conn<T>>,
    peer: u32,
) -> Result<MutexGuard<'_, Conn<T>>, NetError> {
    conn.lock().map_err(|_| NetError::Io {
        peer,
        source: io::Error::other("link state poisoned by a panic in another thread"),
    })
}

/// Polling without burning a core for long: spin, then yield, then sleep briefly. Latency
/// stays low while traffic flows; an idle link costs little.
#[derive(Debug, Default)]
struct Backoff(u32);

impl Backoff {
    fn wait(&mut self) {
        match self.0 {
            0..100 => std::hint::spin_loop(),
            100..1000 => std::thread::yield_now(),
            _ => std::thread::sleep(Duration::from_micros(50)),
        }
        self.0 = self.0.saturating_add(1);
    }
}

struct RdmaTx<T: Transport> {
    peer: u32,
    conn: Arc<Mutex<Conn<T>>>,
}

impl<T: Transport> FrameTx for RdmaTx<T> {
    fn send(&mut self, frame: &Frame) -> Result<(), NetError> {
        let header = frame.header();
        let slot_bytes = lock(&self.conn, self.peer)?.slot_bytes;
        for p in wire::pieces(frame.payload.len(), slot_bytes) {
            let mut backoff = Backoff::default();
            while !lock(&self.conn, self.peer)?.try_send(&header, &frame.payload, p)? {
                backoff.wait();
            }
        }
        Ok(())
    }
}

struct RdmaRx<T: Transport> {
    peer: u32,
    conn: Arc<Mutex<Conn<T>>>,
    keepalive: Duration,
}

impl<T: Transport> FrameRx for RdmaRx<T> {
    fn recv(&mut self, limits: &FrameLimits) -> Result<Frame, NetError> {
        let mut backoff = Backoff::default();
        let mut idle_since = Instant::now();
        loop {
            {
                let mut c = lock(&self.conn, self.peer)?;
                let polled = c.progress();
                if let Some(f) = c.next_frame(limits)? {
                    return Ok(f);
                }
                polled?;
                if idle_since.elapsed() >= self.keepalive {
                    c.ping()?;
                    idle_since = Instant::now();
                }
            }
            backoff.wait();
        }
    }
}

#[cfg(test)]
mod tests;
