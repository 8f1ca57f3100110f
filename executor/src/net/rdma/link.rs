//! One RDMA link's state machine: credits, pieces, control messages, keepalive and the two
//! halves the proxy holds. It drives a [`Transport`] (an RC queue pair with its rings, or in
//! tests an in-memory stand-in), so all of it runs without an adapter.

use super::super::{Frame, FrameRx, FrameTx, HEADER_BYTES, Link, NetError};
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
    fn next_frame(&mut self) -> Result<Option<Frame>, NetError> {
        while let Some(a) = self.arrived.pop_front() {
            match self.take_piece(a) {
                Ok(Some(f)) => return Ok(Some(f)),
                Ok(None) => {}
                Err(b) => return Err(self.fail(b)),
            }
        }
        Ok(None)
    }

    fn take_piece(&mut self, a: Arrived) -> Result<Option<Frame>, Broken> {
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
                    reasm.feed(a.first, a.last, bytes)
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
    fn recv(&mut self) -> Result<Frame, NetError> {
        let mut backoff = Backoff::default();
        let mut idle_since = Instant::now();
        loop {
            {
                let mut c = lock(&self.conn, self.peer)?;
                let polled = c.progress();
                if let Some(f) = c.next_frame()? {
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
mod tests {
    //! The link against an in-memory adapter pair that behaves like RC queue pairs: a write
    //! reads the sender's staging bytes and lands in the receiver's ring only when one of
    //! the two polls (latency), needs a posted receive request (else it waits, as with
    //! unlimited RNR retries), completes on the sender's side after landing, fails with
    //! RETRY_EXC_ERR towards a side that is gone, and is lost if its sender is destroyed
    //! first.

    use super::*;
    use crate::net::FrameKind;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[derive(Debug, Default)]
    struct Side {
        ring: Vec<u8>,
        staging: Vec<u8>,
        recvs: u32,
        /// Writes from the other side, not yet landed: (wr_id, offset, length, imm).
        incoming: VecDeque<(u64, usize, u32, u32)>,
        recv_done: VecDeque<Completion>,
        send_done: VecDeque<Completion>,
        gone: bool,
    }

    #[derive(Debug)]
    struct Fake {
        wire: Arc<Mutex<[Side; 2]>>,
        me: usize,
    }

    fn ok(wr_id: u64, byte_len: u32, imm: Option<u32>) -> Completion {
        Completion {
            wr_id,
            status: Ok(()),
            byte_len,
            imm,
        }
    }

    impl Fake {
        fn pair(ring_bytes: usize) -> (Fake, Fake) {
            let side = || Side {
                ring: vec![0; ring_bytes],
                staging: vec![0; ring_bytes],
                ..Side::default()
            };
            let wire = Arc::new(Mutex::new([side(), side()]));
            (
                Fake {
                    wire: wire.clone(),
                    me: 0,
                },
                Fake { wire, me: 1 },
            )
        }

        fn wire(&self) -> MutexGuard<'_, [Side; 2]> {
            self.wire.lock().expect("fake wire")
        }
    }

    impl Drop for Fake {
        fn drop(&mut self) {
            if let Ok(mut w) = self.wire.lock() {
                let (me, peer) = (self.me, 1 - self.me);
                w[me].gone = true;
                // Our writes not yet landed die with our queue pair.
                w[peer].incoming.clear();
                // Writes towards us fail at their senders.
                let failed: Vec<_> = w[me].incoming.drain(..).collect();
                for (wr_id, ..) in failed {
                    w[peer].send_done.push_back(Completion {
                        status: Err((STATUS_RETRY_EXCEEDED, 0)),
                        ..ok(wr_id, 0, None)
                    });
                }
            }
        }
    }

    /// Lands the writes waiting for side `dst`, as far as it has receive requests, reading
    /// the sender's staging bytes now (not at posting): a staging slot refilled too early
    /// would corrupt the frame.
    fn land(w: &mut [Side; 2], dst: usize) {
        let [a, b] = w;
        let (to, from) = if dst == 0 { (a, b) } else { (b, a) };
        while to.recvs > 0 {
            let Some((wr_id, at, len, imm)) = to.incoming.pop_front() else {
                break;
            };
            let n = len as usize;
            to.ring[at..at + n].copy_from_slice(&from.staging[at..at + n]);
            to.recvs -= 1;
            to.recv_done.push_back(ok(0, len, Some(imm)));
            from.send_done.push_back(ok(wr_id, 0, None));
        }
    }

    impl Transport for Fake {
        unsafe fn write_imm(
            &mut self,
            wr_id: u64,
            at: usize,
            len: u32,
            imm: u32,
        ) -> io::Result<()> {
            let mut w = self.wire();
            let peer = 1 - self.me;
            if w[peer].gone {
                w[self.me].send_done.push_back(Completion {
                    status: Err((STATUS_RETRY_EXCEEDED, 0)),
                    ..ok(wr_id, 0, None)
                });
            } else {
                w[peer].incoming.push_back((wr_id, at, len, imm));
            }
            Ok(())
        }

        fn post_recv(&mut self) -> io::Result<()> {
            self.wire()[self.me].recvs += 1;
            Ok(())
        }

        fn poll_send(&mut self, out: &mut Vec<Completion>) -> io::Result<()> {
            let mut w = self.wire();
            land(&mut w, 1 - self.me);
            out.extend(w[self.me].send_done.drain(..));
            Ok(())
        }

        fn poll_recv(&mut self, out: &mut Vec<Completion>) -> io::Result<()> {
            let mut w = self.wire();
            land(&mut w, self.me);
            out.extend(w[self.me].recv_done.drain(..));
            Ok(())
        }

        unsafe fn read_ring<R>(
            &self,
            at: usize,
            len: usize,
            f: impl FnOnce(&[u8]) -> R,
        ) -> Option<R> {
            self.wire()[self.me].ring.get(at..at + len).map(f)
        }

        unsafe fn fill_staging(
            &mut self,
            at: usize,
            len: usize,
            f: impl FnOnce(&mut [u8]),
        ) -> Option<()> {
            self.wire()[self.me].staging.get_mut(at..at + len).map(f)
        }

        fn describe(&self) -> String {
            format!("fake queue pair {}", 1 - self.me)
        }
    }

    const SLOTS: u32 = 4;
    const SLOT_BYTES: u32 = 256;

    type Wire = Arc<Mutex<[Side; 2]>>;

    /// Two connected links (process 0 and 1) over a fake adapter pair, and the wire.
    fn pair(keepalive: Duration) -> (Link, Link, Wire) {
        let (mut a, mut b) = Fake::pair((SLOTS * SLOT_BYTES) as usize);
        let wire = a.wire.clone();
        for _ in 0..recv_depth(SLOTS) {
            a.post_recv().expect("post");
            b.post_recv().expect("post");
        }
        let mut conns = [
            Conn::new(1, a, SLOTS, SLOT_BYTES),
            Conn::new(0, b, SLOTS, SLOT_BYTES),
        ];
        for c in &mut conns {
            c.hello().expect("hello");
        }
        await_hellos(
            &mut conns,
            Instant::now() + Duration::from_secs(5),
            Duration::from_secs(5),
        )
        .expect("hellos");
        let [a, b] = conns;
        (link(a, keepalive), link(b, keepalive), wire)
    }

    /// Runs `f` on its own thread and fails the test if it takes more than 20 s: a broken
    /// link may leave a sender blocked for good, which must read as a failure, not a hang.
    fn within(f: impl FnOnce() + Send + 'static) {
        let (done, wait) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            f();
            let _ = done.send(());
        });
        match wait.recv_timeout(Duration::from_secs(20)) {
            Ok(()) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("still running after 20 s"),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!("the test panicked"),
        }
    }

    fn frame(len: usize, tag: u32) -> Frame {
        let payload = (0..len).map(|i| (i as u32 * 31 + tag) as u8).collect();
        Frame::new(FrameKind::Data, tag, 0, 1, payload)
    }

    /// Frames of every awkward size, far larger than the ring too, cross in both directions
    /// at once, whole and in order: credits, slots and reassembly in motion.
    #[test]
    fn frames_cross_a_link_both_ways_whole_and_in_order() {
        within(|| {
            let (mut a, mut b, _wire) = pair(Duration::from_secs(1));
            let slot = SLOT_BYTES as usize - HEADER_BYTES;
            let sizes = [0, 1, slot - 1, slot, slot + 1, 3 * 256, 10_000, 100_000];
            let frames: Vec<Frame> = sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| frame(n, i as u32))
                .collect();
            std::thread::scope(|s| {
                let (a_tx, b_tx) = (&mut a.tx, &mut b.tx);
                let frames = &frames;
                s.spawn(move || {
                    frames
                        .iter()
                        .try_for_each(|f| a_tx.send(f))
                        .expect("a sends")
                });
                s.spawn(move || {
                    frames
                        .iter()
                        .rev()
                        .try_for_each(|f| b_tx.send(f))
                        .expect("b sends")
                });
                for f in frames {
                    assert_eq!(&b.rx.recv().expect("b receives"), f);
                }
                for f in frames.iter().rev() {
                    assert_eq!(&a.rx.recv().expect("a receives"), f);
                }
            });
        });
    }

    /// A sender with no credits waits for the receiver instead of overrunning its ring.
    #[test]
    fn a_sender_waits_for_credits() {
        within(|| {
            let (mut a, mut b, _wire) = pair(Duration::from_secs(1));
            let big = frame(20 * SLOT_BYTES as usize, 7);
            let sent = AtomicBool::new(false);
            std::thread::scope(|s| {
                let (tx, big, sent) = (&mut a.tx, &big, &sent);
                s.spawn(move || {
                    tx.send(big).expect("send");
                    sent.store(true, Ordering::SeqCst);
                });
                std::thread::sleep(Duration::from_millis(100));
                assert!(
                    !sent.load(Ordering::SeqCst),
                    "20 slots went into a ring of 4"
                );
                assert_eq!(&b.rx.recv().expect("recv"), big);
            });
            assert!(sent.load(Ordering::SeqCst));
        });
    }

    /// A `Bye` sent right before the sender drops its link still arrives: the drop waits for
    /// the write to land instead of destroying it in flight.
    #[test]
    fn a_bye_sent_before_dropping_arrives() {
        let (mut a, mut b, _wire) = pair(Duration::from_secs(1));
        a.tx.send(&Frame::new(FrameKind::Bye, 0, 0, 1, Vec::new()))
            .expect("send");
        std::thread::scope(|s| {
            s.spawn(move || drop(a));
            std::thread::sleep(Duration::from_millis(20));
            assert_eq!(b.rx.recv().expect("the bye").kind, FrameKind::Bye);
        });
    }

    /// A peer that is gone shows as Closed, to an idle receiver (through its ping) and to a
    /// sender, never as a hang.
    #[test]
    fn a_dead_peer_is_closed_not_a_hang() {
        let (mut a, b, _wire) = pair(Duration::from_millis(50));
        drop(b);
        let t = Instant::now();
        let err = a.rx.recv().expect_err("peer gone");
        assert!(matches!(err, NetError::Closed { peer: 1 }), "{err:?}");
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        let err = a.tx.send(&frame(10, 1)).expect_err("peer gone");
        assert!(matches!(err, NetError::Closed { peer: 1 }), "{err:?}");
    }

    /// Garbage from the peer is a protocol error naming it, and stays one.
    #[test]
    fn a_malformed_immediate_is_a_protocol_error() {
        let (_a, mut b, wire) = pair(Duration::from_secs(1));
        // A write from process 0 that bypasses its link: a reserved bit set.
        wire.lock().expect("wire")[1]
            .incoming
            .push_back((99, 0, 0, 1 << 27));
        let err = b.rx.recv().expect_err("malformed");
        assert!(matches!(err, NetError::Protocol { peer: 0, .. }), "{err:?}");
        assert!(
            err.to_string()
                .contains("malformed immediate value 0x08000000"),
            "{err}"
        );
        let again = b.rx.recv().expect_err("still broken");
        assert_eq!(again.to_string(), err.to_string());
    }

    /// A peer that never says hello is unreachable after the timeout, named.
    #[test]
    fn a_silent_peer_is_unreachable() {
        let (mut a, b) = Fake::pair((SLOTS * SLOT_BYTES) as usize);
        for _ in 0..recv_depth(SLOTS) {
            a.post_recv().expect("post");
        }
        let mut conns = [Conn::new(1, a, SLOTS, SLOT_BYTES)];
        conns[0].hello().expect("hello");
        let t = Duration::from_millis(100);
        let err = await_hellos(&mut conns, Instant::now() + t, t).expect_err("silent peer");
        assert!(
            matches!(err, NetError::Unreachable { peer: 1, .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("fake queue pair 1"), "{err}");
        drop(conns);
        drop(b);
    }
}
