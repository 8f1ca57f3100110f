//! Unit tests of [`super`], apart so the module itself stays short.

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
    unsafe fn write_imm(&mut self, wr_id: u64, at: usize, len: u32, imm: u32) -> io::Result<()> {
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

    unsafe fn read_ring<R>(&self, at: usize, len: usize, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
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
                assert_eq!(
                    &b.rx
                        .recv(&crate::net::FrameLimits::for_data(1 << 30))
                        .expect("b receives"),
                    f
                );
            }
            for f in frames.iter().rev() {
                assert_eq!(
                    &a.rx
                        .recv(&crate::net::FrameLimits::for_data(1 << 30))
                        .expect("a receives"),
                    f
                );
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
            assert_eq!(
                &b.rx
                    .recv(&crate::net::FrameLimits::for_data(1 << 30))
                    .expect("recv"),
                big
            );
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
        assert_eq!(
            b.rx.recv(&crate::net::FrameLimits::for_data(1 << 30))
                .expect("the bye")
                .kind,
            FrameKind::Bye
        );
    });
}

/// A peer that is gone shows as Closed, to an idle receiver (through its ping) and to a
/// sender, never as a hang.
#[test]
fn a_dead_peer_is_closed_not_a_hang() {
    let (mut a, b, _wire) = pair(Duration::from_millis(50));
    drop(b);
    let t = Instant::now();
    let err =
        a.rx.recv(&crate::net::FrameLimits::for_data(1 << 30))
            .expect_err("peer gone");
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
    let err =
        b.rx.recv(&crate::net::FrameLimits::for_data(1 << 30))
            .expect_err("malformed");
    assert!(matches!(err, NetError::Protocol { peer: 0, .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("malformed immediate value 0x08000000"),
        "{err}"
    );
    let again =
        b.rx.recv(&crate::net::FrameLimits::for_data(1 << 30))
            .expect_err("still broken");
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
