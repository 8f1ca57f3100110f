//! Unit tests of [`super`], apart so the module itself stays short.

use super::*;
use crate::net::FrameKind;

const LIMITS: FrameLimits = FrameLimits {
    data: 1 << 20,
    barrier: 1 << 20,
    abort: 1 << 20,
};

/// A first piece whose header claims 64 GiB is refused from the header: nothing of that
/// size is reserved.
#[test]
fn a_header_beyond_the_grant_is_refused_before_reserving() {
    let mut h = Frame::new(FrameKind::Data, 0, 0, 1, Vec::new()).header();
    h[16..24].copy_from_slice(&(1u64 << 36).to_le_bytes());
    let mut piece = h.to_vec();
    piece.resize(256, 0);
    let e = Reassembly::new(256)
        .feed(true, false, &piece, &LIMITS)
        .expect_err("too long");
    assert_eq!(
        e,
        "a Data frame of 68719476736 bytes, more than the 1048576 this process granted"
    );
}

#[test]
fn immediates_round_trip_and_reserved_bits_are_rejected() {
    let all = [
        Imm::Data {
            slot: 0,
            first: true,
            last: true,
        },
        Imm::Data {
            slot: 65535,
            first: false,
            last: true,
        },
        Imm::Data {
            slot: 7,
            first: true,
            last: false,
        },
        Imm::Data {
            slot: 8,
            first: false,
            last: false,
        },
        Imm::Credit(1),
        Imm::Credit(MAX_CREDIT),
        Imm::Hello,
        Imm::Ping,
    ];
    let codes: BTreeSet<u32> = all.iter().map(|i| i.encode()).collect();
    assert_eq!(codes.len(), all.len(), "two immediates share a code");
    for i in all {
        assert_eq!(Imm::decode(i.encode()), Ok(i));
    }
    // A data piece with a reserved bit, a credit of nothing, a hello with a payload.
    for v in [
        1 << 16,
        1 << 27,
        CLASS_CREDIT << CLASS_SHIFT,
        (CLASS_HELLO << CLASS_SHIFT) | 1,
    ] {
        let err = Imm::decode(v).expect_err("malformed");
        assert!(err.contains("malformed immediate"), "{err}");
    }
}

#[test]
fn the_sender_never_has_more_than_slots_pieces_out() {
    let mut w = SendWindow::new(3);
    assert_eq!([w.take(), w.take(), w.take()], [Some(0), Some(1), Some(2)]);
    assert!(!w.can_send());
    assert_eq!(
        w.take(),
        None,
        "a fourth piece would overrun the peer's ring"
    );
    // Credits without local completions: the staging slot is still being read.
    w.grant(1).expect("grant");
    assert_eq!(w.take(), None);
    w.written().expect("written");
    assert_eq!(w.take(), Some(0), "slots wrap around");
    assert_eq!(w.credits(), 0);
    // More credits than pieces out is the peer's bug, and is caught.
    w.grant(3).expect("grant");
    let err = w.grant(1).expect_err("over-grant");
    assert!(
        err.contains("returned 1 credits while 0 of 3 were out"),
        "{err}"
    );
    for _ in 0..3 {
        w.written().expect("written");
    }
    assert!(w.written().is_err(), "more completions than writes");
}

#[test]
fn the_receiver_returns_credits_in_batches_and_checks_order() {
    let mut r = RecvWindow::new(4);
    r.arrive(0).expect("slot 0");
    r.arrive(1).expect("slot 1");
    let err = r.arrive(3).expect_err("skipped slot 2");
    assert!(err.contains("slot 3, expected slot 2"), "{err}");
    assert_eq!(r.consume(), Ok(None), "batch of 2 not complete");
    assert_eq!(r.consume(), Ok(Some(2)));
    assert!(r.consume().is_err(), "nothing left to consume");
    // The ring is full after 4 unreturned pieces: a fifth overruns it.
    let mut r = RecvWindow::new(4);
    for s in 0..4 {
        r.arrive(s).expect("fits");
    }
    let err = r.arrive(0).expect_err("overrun");
    assert!(err.contains("overruns the ring of 4 slots"), "{err}");
    // Credits that could not be sent are sent with the next batch.
    assert_eq!(r.consume(), Ok(None));
    assert_eq!(r.consume(), Ok(Some(2)));
    r.unsent(2);
    assert_eq!(r.consume(), Ok(Some(3)));
}

/// Sender and receiver windows driven together through many frames never overrun the
/// ring and never stall: the credit rule in motion.
#[test]
fn windows_in_lockstep_move_every_piece() {
    for slots in [1, 2, 3, 8] {
        let mut tx = SendWindow::new(slots);
        let mut rx = RecvWindow::new(slots);
        let mut in_flight = std::collections::VecDeque::new();
        let mut credits_back = std::collections::VecDeque::new();
        let (mut sent, mut got) = (0u32, 0u32);
        let mut steps = 0;
        while got < 100 {
            steps += 1;
            assert!(steps < 10_000, "stalled at {got} of 100 with {slots} slots");
            if sent < 100
                && let Some(s) = tx.take()
            {
                in_flight.push_back(s);
                tx.written().expect("local completion");
                sent += 1;
            }
            if let Some(n) = credits_back.pop_front() {
                tx.grant(n).expect("grant");
            }
            // The receiver consumes every other step, so the ring fills up at times.
            if steps % 2 == 0
                && let Some(s) = in_flight.pop_front()
            {
                rx.arrive(s).expect("arrive");
                if let Some(n) = rx.consume().expect("consume") {
                    credits_back.push_back(n);
                }
                got += 1;
            }
        }
    }
}

fn frame(len: usize) -> Frame {
    let payload = (0..len).map(|i| (i * 7 + len) as u8).collect();
    Frame::new(FrameKind::Data, 3, 1, 2, payload)
}

/// Frames of awkward sizes go through slots and come back whole.
#[test]
fn fragments_reassemble_to_the_frame() {
    let slot = 256;
    for len in [
        0,
        1,
        slot - HEADER_BYTES - 1,
        slot - HEADER_BYTES,
        slot - HEADER_BYTES + 1,
        10_000,
    ] {
        let f = frame(len);
        let ps: Vec<Piece> = pieces(len, slot).collect();
        assert_eq!(ps.len(), (HEADER_BYTES + len).div_ceil(slot), "len {len}");
        assert!(ps[0].first && ps.iter().skip(1).all(|p| !p.first));
        assert!(ps.last().is_some_and(|p| p.last));
        let mut r = Reassembly::new(slot);
        let mut out = None;
        for p in &ps {
            let mut buf = vec![0xee; slot];
            fill(&f.header(), &f.payload, *p, &mut buf);
            assert!(out.is_none(), "frame completed before its last piece");
            out = r
                .feed(p.first, p.last, &buf[..p.len], &LIMITS)
                .expect("feed");
        }
        assert_eq!(out.as_ref(), Some(&f), "len {len}");
    }
}

#[test]
fn malformed_pieces_are_protocol_errors() {
    let slot = 256;
    let f = frame(1000);
    let mut bufs = Vec::new();
    for p in pieces(1000, slot) {
        let mut b = vec![0; p.len];
        fill(&f.header(), &f.payload, p, &mut b);
        bufs.push((p, b));
    }
    let feed_err = |steps: &[(bool, bool, &[u8])]| -> String {
        let mut r = Reassembly::new(slot);
        for (first, last, b) in steps {
            if let Err(e) = r.feed(*first, *last, b, &LIMITS) {
                return e;
            }
        }
        panic!("no error for {} pieces", steps.len());
    };
    let (p0, b0) = (&bufs[0].0, &bufs[0].1[..]);
    let (_, b1) = (&bufs[1].0, &bufs[1].1[..]);
    assert!(feed_err(&[(false, false, b1)]).contains("outside a frame"));
    assert!(feed_err(&[(true, false, b0), (true, false, b0)]).contains("began inside"));
    assert!(feed_err(&[(true, false, &b0[..10])]).contains("no frame header"));
    assert!(feed_err(&[(true, false, &b0[..100])]).contains("100 bytes where 256"));
    assert!(feed_err(&[(true, true, b0)]).contains("cut short"));
    assert!(feed_err(&[(true, false, &[0; 300])]).contains("slots of 256"));
    let mut bad_kind = b0.to_vec();
    bad_kind[0] = 99;
    assert!(feed_err(&[(p0.first, false, &bad_kind)]).contains("unknown frame kind"));
    let small = frame(0);
    let mut b = vec![0; HEADER_BYTES];
    fill(
        &small.header(),
        &[],
        pieces(0, slot).next().expect("one piece"),
        &mut b,
    );
    assert!(feed_err(&[(true, false, &b)]).contains("not marked last"));
}

fn endpoint() -> Endpoint {
    Endpoint {
        me: 1,
        procs: 3,
        lid: 0x1234,
        link_layer: 2,
        mtu: 5,
        gid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8],
        slots: 16,
        slot_bytes: 1 << 17,
        peers: vec![
            PeerEntry {
                qpn: 0x11,
                psn: 0xabcdef,
                ring_addr: 0x7f00_0000_1000,
                rkey: 9,
            },
            PeerEntry::default(),
            PeerEntry {
                qpn: 0x22,
                psn: 1,
                ring_addr: u64::MAX,
                rkey: u32::MAX,
            },
        ],
    }
}

#[test]
fn endpoint_blobs_round_trip() {
    let e = endpoint();
    let b = e.encode();
    assert_eq!(b.len(), BLOB_HEADER + 3 * BLOB_ENTRY);
    assert_eq!(Endpoint::decode(&b), Ok(e));
}

#[test]
fn damaged_endpoint_blobs_are_rejected_with_reasons() {
    let b = endpoint().encode();
    for cut in [0, 10, BLOB_HEADER - 1] {
        let err = Endpoint::decode(&b[..cut]).expect_err("truncated header");
        assert!(err.contains("truncated"), "{err}");
    }
    let err = Endpoint::decode(&b[..b.len() - 1]).expect_err("truncated entries");
    assert!(err.contains("for 3 processes is truncated"), "{err}");
    let err = Endpoint::decode(b"127.0.0.1:4000 and some more bytes of a tcp endpoint!!")
        .expect_err("a tcp endpoint");
    assert!(err.contains("not an RDMA endpoint"), "{err}");
    let mut v2 = b.clone();
    v2[4] = 2;
    assert!(
        Endpoint::decode(&v2)
            .expect_err("version")
            .contains("version 2")
    );
    let mut mtu = b.clone();
    mtu[17] = 9;
    assert!(
        Endpoint::decode(&mtu)
            .expect_err("mtu")
            .contains("MTU code 9")
    );
    let mut me = b.clone();
    me[8] = 3;
    assert!(
        Endpoint::decode(&me)
            .expect_err("me")
            .contains("process 3 of 3")
    );
    let mut psn = b;
    psn[BLOB_HEADER + 7] = 1;
    assert!(Endpoint::decode(&psn).expect_err("psn").contains("24 bits"));
}

#[test]
fn ring_shapes_are_bounded() {
    assert!(check_ring(16, 1 << 17).is_ok());
    assert!(check_ring(0, 4096).is_err());
    assert!(check_ring(MAX_SLOTS + 1, 4096).is_err());
    assert!(
        check_ring(4, 64).is_err(),
        "a slot must hold a header and then some"
    );
    assert!(check_ring(4, MAX_SLOT_BYTES + 1).is_err());
}

#[test]
fn device_choice_says_what_was_looked_for() {
    let names = vec!["mlx5_0".to_string(), "mlx5_1".to_string()];
    assert_eq!(select_device(&names, None), Ok(0));
    assert_eq!(select_device(&names, Some("mlx5_1")), Ok(1));
    let err = select_device(&names, Some("nonexistent")).expect_err("absent");
    assert_eq!(
        err,
        "COLL_IB_HCA=nonexistent names no device; ibverbs lists mlx5_0, mlx5_1"
    );
    let err = select_device(&[], None).expect_err("none");
    assert!(err.starts_with("looked for the first RDMA device (COLL_IB_HCA is unset)"));
    assert!(
        err.contains("no RDMA adapter") && err.contains("tcp backend"),
        "{err}"
    );
    let err = select_device(&[], Some("mlx5_0")).expect_err("none");
    assert!(
        err.starts_with("COLL_IB_HCA=mlx5_0 but ibverbs lists no RDMA device"),
        "{err}"
    );
}

#[test]
fn gid_choice_prefers_roce_v2_ipv4() {
    let zero = [0u8; 16];
    let link_local = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
    let v4 = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1];
    let rows = [
        GidRow {
            index: 0,
            kind: 1,
            gid: link_local,
        },
        GidRow {
            index: 1,
            kind: 2,
            gid: link_local,
        },
        GidRow {
            index: 2,
            kind: 1,
            gid: v4,
        },
        GidRow {
            index: 3,
            kind: 2,
            gid: v4,
        },
        GidRow {
            index: 4,
            kind: 2,
            gid: zero,
        },
    ];
    assert_eq!(choose_gid(&rows, 2, None).map(|r| r.index), Ok(3));
    assert_eq!(choose_gid(&rows[..3], 2, None).map(|r| r.index), Ok(1));
    assert_eq!(choose_gid(&rows[..1], 2, None).map(|r| r.index), Ok(0));
    assert_eq!(
        choose_gid(&rows, 1, None).map(|r| r.index),
        Ok(0),
        "InfiniBand: index 0"
    );
    assert_eq!(choose_gid(&rows, 2, Some(2)).map(|r| r.index), Ok(2));
    let err = choose_gid(&rows, 2, Some(9)).expect_err("absent index");
    assert!(
        err.contains("COLL_IB_GID_INDEX=9 is not in the port's GID table"),
        "{err}"
    );
    assert!(choose_gid(&rows[4..], 2, None).is_err(), "only a zero GID");
}
