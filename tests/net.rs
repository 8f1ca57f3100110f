//! No stranger joins a multi-process job: the attacks a process reachable over the network
//! could mount on a job's rendezvous and links, each played on loopback against the real
//! bootstrap and mesh. Strangers (no secret) are dropped while the job goes on and succeeds
//! within its time; a process of the job that breaks the protocol (an oversized frame, a
//! flood past its credits) has its link closed and is named, without anything of the
//! claimed size being held; text from a peer is escaped before anyone prints it.

use coll_executor::bootstrap::{self, BootstrapError};
use coll_executor::net::auth::{self, JobSecret};
use coll_executor::net::mesh::{Failure, Grant, Mesh};
use coll_executor::net::tcp::{self, TcpBackend};
use coll_executor::net::{Backend, Frame, FrameKind, Link};
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

fn secret() -> JobSecret {
    JobSecret::from_bytes([0x42; JobSecret::BYTES])
}

fn listener() -> (TcpListener, SocketAddr) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let a = l.local_addr().expect("addr");
    (l, a)
}

/// What a stranger got back before rank 0 closed on it.
fn drain(mut s: TcpStream) -> Vec<u8> {
    let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    got
}

/// The hello the bootstrap used to trust: `COLB`, version 1, rank, size, then a blob.
fn forged_hello(rank: u32, size: u32, blob: &[u8]) -> Vec<u8> {
    let mut h = b"COLB".to_vec();
    for v in [1, rank, size, blob.len() as u32] {
        h.extend_from_slice(&v.to_le_bytes());
    }
    h.extend_from_slice(blob);
    h
}

/// A forged hello claiming rank 1, sent before the real rank 1: once the attacker became
/// process 1 and received every peer's blob. Now it gets nothing, and the real rank 1 joins.
#[test]
fn a_forged_hello_without_the_secret_gets_nothing() {
    let (l, addr) = listener();
    let t = Duration::from_secs(10);
    let start = Instant::now();
    let attacker = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.write_all(&forged_hello(1, 2, b"evil")).expect("write");
        drain(s)
    });
    // Even one that speaks the handshake but guesses the secret is turned away.
    let guesser = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).expect("connect");
        let wrong = JobSecret::from_bytes([0x41; JobSecret::BYTES]);
        let e = auth::connect(
            &mut s,
            &wrong,
            bootstrap::CONTEXT,
            Instant::now() + Duration::from_secs(5),
        )
        .expect_err("wrong secret");
        // Gives up (a stranger that lingers is dropped at the handshake's deadline).
        let _ = s.shutdown(std::net::Shutdown::Write);
        (e.to_string(), drain(s))
    });
    std::thread::sleep(Duration::from_millis(200));
    let peer = std::thread::spawn(move || bootstrap::join(addr, 1, 2, &secret(), b"one", t));
    let all = bootstrap::serve(&l, 2, &secret(), b"zero", t).expect("the job goes on");
    assert_eq!(all, vec![b"zero".to_vec(), b"one".to_vec()]);
    assert_eq!(peer.join().expect("thread").expect("rank 1"), all);
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(attacker.join().expect("thread"), Vec::<u8>::new());
    let (why, got) = guesser.join().expect("thread");
    assert_eq!(why, "the other side does not know this job's secret");
    // The handshake's answer carries a proof over nonces, nothing of the job's blobs.
    assert!(!got.windows(4).any(|w| w == b"zero"), "{got:?}");
}

/// A hello that would once abort the whole job (20 bytes of another version) is dropped and
/// the job completes.
#[test]
fn a_bad_20_byte_hello_does_not_fail_the_job() {
    let (l, addr) = listener();
    let t = Duration::from_secs(10);
    let bad = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).expect("connect");
        let mut h = forged_hello(1, 2, b"");
        h[4..8].copy_from_slice(&7u32.to_le_bytes());
        assert_eq!(h.len(), 20);
        s.write_all(&h).expect("write");
        drain(s)
    });
    std::thread::sleep(Duration::from_millis(100));
    let peer = std::thread::spawn(move || bootstrap::join(addr, 1, 2, &secret(), b"p", t));
    let all = bootstrap::serve(&l, 2, &secret(), b"r", t).expect("the job goes on");
    assert_eq!(all, vec![b"r".to_vec(), b"p".to_vec()]);
    assert_eq!(peer.join().expect("thread").expect("rank 1"), all);
    assert_eq!(bad.join().expect("thread"), Vec::<u8>::new());
}

/// One byte every 300 ms restarted a per-read timeout forever. Now the drip neither delays
/// the real peers nor holds rank 0 past its timeout.
#[test]
fn a_slow_drip_hello_holds_nothing_up() {
    let drip = |addr: SocketAddr| {
        std::thread::spawn(move || {
            let Ok(mut s) = TcpStream::connect(addr) else {
                return;
            };
            for b in b"COLA\x01\x00\x00\x00" {
                if s.write_all(&[*b]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(300));
            }
        })
    };
    // The real peers are served while the drip goes on.
    let (l, addr) = listener();
    let t = Duration::from_secs(10);
    let d = drip(addr);
    std::thread::sleep(Duration::from_millis(100));
    let start = Instant::now();
    let peer = std::thread::spawn(move || bootstrap::join(addr, 1, 2, &secret(), b"p", t));
    bootstrap::serve(&l, 2, &secret(), b"r", t).expect("the job goes on");
    peer.join().expect("thread").expect("rank 1");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    d.join().expect("drip");

    // With a rank missing, rank 0 gives up at its timeout, drip or not.
    let (l, addr) = listener();
    let d = drip(addr);
    let start = Instant::now();
    let t = Duration::from_millis(1200);
    let e = bootstrap::serve(&l, 2, &secret(), b"r", t).expect_err("rank 1 never comes");
    let took = start.elapsed();
    assert!(
        took >= t && took < t + Duration::from_millis(800),
        "{took:?}"
    );
    assert!(
        matches!(&e, BootstrapError::Missing { missing, .. } if missing == &[1]),
        "{e}"
    );
    assert!(
        e.to_string()
            .starts_with("rank 0: rank 1 did not join within 1.2s (size 2)"),
        "{e}"
    );
    d.join().expect("drip");
}

const HOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// Processes 0..n of a mesh, each a TcpBackend with `secret`, connected by threads; plus
/// what `extra` does meanwhile against the endpoints.
fn link_up(
    n: u32,
    extra: impl FnOnce(&[Vec<u8>]) + Send,
) -> Vec<Result<Vec<Link>, coll_executor::net::NetError>> {
    let mut backends: Vec<TcpBackend> = (0..n).map(|_| TcpBackend::new(HOST, secret())).collect();
    let blobs: Vec<Vec<u8>> = backends
        .iter_mut()
        .enumerate()
        .map(|(i, b)| b.endpoint(i as u32, n).expect("endpoint"))
        .collect();
    std::thread::scope(|s| {
        let hs: Vec<_> = backends
            .iter_mut()
            .map(|b| {
                let blobs = &blobs;
                s.spawn(move || b.connect(blobs, Duration::from_secs(10)))
            })
            .collect();
        extra(&blobs);
        hs.into_iter().map(|h| h.join().expect("thread")).collect()
    })
}

fn addr_of(blob: &[u8]) -> SocketAddr {
    String::from_utf8_lossy(blob).parse().expect("an address")
}

/// Strangers connecting to a process's mesh port, as the old hello (`COLN`, claiming
/// process 2) or with a wrong secret, are dropped; the real processes link and talk.
#[test]
fn a_stranger_cannot_join_the_mesh() {
    let start = Instant::now();
    let mut strangers = Vec::new();
    let links = link_up(3, |blobs| {
        let target = addr_of(&blobs[0]);
        let mut old = b"COLN".to_vec();
        old.extend_from_slice(&2u32.to_le_bytes());
        old.extend_from_slice(&3u32.to_le_bytes());
        let mut s = TcpStream::connect(target).expect("connect");
        s.write_all(&old).expect("write");
        strangers.push(s);
        let mut s = TcpStream::connect(target).expect("connect");
        let wrong = JobSecret::from_bytes([7; JobSecret::BYTES]);
        let e = auth::connect(
            &mut s,
            &wrong,
            tcp::CONTEXT,
            Instant::now() + Duration::from_secs(5),
        );
        assert!(e.is_err());
    });
    let mut links: Vec<Vec<Link>> = links
        .into_iter()
        .map(|l| l.expect("the real processes link up"))
        .collect();
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    for (me, ls) in links.iter().enumerate() {
        let peers: Vec<u32> = ls.iter().map(|l| l.peer).collect();
        let want: Vec<u32> = (0..3).filter(|&p| p != me as u32).collect();
        assert_eq!(peers, want);
    }
    let f = Frame::new(FrameKind::Data, 0, 4, 0, vec![1, 2, 3]);
    let l20 = links[2].iter_mut().find(|l| l.peer == 0).expect("link");
    l20.tx.send(&f).expect("send");
    let l02 = links[0].iter_mut().find(|l| l.peer == 2).expect("link");
    let limits = coll_executor::net::FrameLimits::for_data(16);
    assert_eq!(l02.rx.recv(&limits).expect("recv"), f);
    // Process 0 hung up on the stranger without a word.
    for s in strangers {
        assert_eq!(drain(s), Vec::<u8>::new());
    }
}

/// A process of a 2-process job that proves the secret and then misbehaves: process 1 played
/// by hand over a raw socket against the real process 0, whose mesh grants `grant`.
struct Rogue {
    mesh: Mesh,
    s: TcpStream,
}

fn rogue(grant: Grant) -> Rogue {
    let mut b = TcpBackend::new(HOST, secret());
    let blob0 = b.endpoint(0, 2).expect("endpoint");
    let target = addr_of(&blob0);
    let connecting = std::thread::spawn(move || {
        b.connect(&[blob0, b"unused".to_vec()], Duration::from_secs(10))
    });
    let mut s = TcpStream::connect(target).expect("connect");
    auth::connect(
        &mut s,
        &secret(),
        tcp::CONTEXT,
        Instant::now() + Duration::from_secs(5),
    )
    .expect("knows the secret");
    // "Process 1 of 2, calling process 0."
    for v in [1u32, 2, 0] {
        s.write_all(&v.to_le_bytes()).expect("hello");
    }
    let links = connecting.join().expect("thread").expect("linked");
    // Two ranks, one per process: rank 1 -> rank 0 on channel 0 is the plan's connection.
    let mesh = Mesh::from_links(0, 2, "tcp", links, 2, grant);
    Rogue { mesh, s }
}

fn grant(slots: u64, max_message: u64) -> Grant {
    Grant {
        slots,
        max_message,
        conns: Some(BTreeSet::from([(1, 0, 0)])),
    }
}

fn header(kind: FrameKind, channel: u32, from: u32, to: u32, len: u64) -> Vec<u8> {
    let mut h = Frame::new(kind, channel, from, to, Vec::new()).header();
    h[16..24].copy_from_slice(&len.to_le_bytes());
    h.to_vec()
}

/// Waits (bounded) for the mesh to record a failure.
fn failure_of(mesh: &Mesh) -> Failure {
    let start = Instant::now();
    loop {
        if let Some(f) = mesh.failure() {
            return f;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "no failure seen");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// One Data frame claiming 2^36 bytes made the receiver allocate 64 GiB and abort. Now it
/// is refused from its header: the link is closed, the process named, nothing allocated.
#[test]
fn an_oversized_data_frame_closes_only_that_link() {
    let Rogue { mesh, mut s } = rogue(grant(2, 4096));
    s.write_all(&header(FrameKind::Data, 0, 1, 0, 1 << 36))
        .expect("header");
    let f = failure_of(&mesh);
    assert_eq!(
        f.to_string(),
        "process 1 broke the protocol (a Data frame of 68719476736 bytes, more than the 4096 \
         this process granted); its link was closed"
    );
    // The link is closed from process 0's side: the rogue sees its end.
    assert_eq!(drain(s), Vec::<u8>::new());
    assert_eq!(mesh.take(1, 0, 0), None);
}

/// A flood of frames on a connection the plan does not use grew an inbox to gigabytes; on
/// a connection it uses, past the slots granted, likewise. Both are now protocol errors
/// after at most the granted messages.
#[test]
fn a_frame_flood_is_stopped_at_the_grant() {
    let Rogue { mesh, mut s } = rogue(grant(2, 64));
    let mut flood = Vec::new();
    for _ in 0..1000 {
        flood.extend(header(FrameKind::Data, 9, 1, 0, 8));
        flood.extend([0xab; 8]);
    }
    let _ = s.write_all(&flood);
    assert_eq!(
        failure_of(&mesh).to_string(),
        "process 1 broke the protocol (data on connection 1 -> 0 on channel 9, which it has \
         no grant for); its link was closed"
    );
    assert_eq!(mesh.take(1, 0, 9), None);

    let Rogue { mesh, mut s } = rogue(grant(2, 64));
    let mut flood = Vec::new();
    for _ in 0..1000 {
        flood.extend(header(FrameKind::Data, 0, 1, 0, 8));
        flood.extend([0xcd; 8]);
    }
    let _ = s.write_all(&flood);
    assert_eq!(
        failure_of(&mesh).to_string(),
        "process 1 broke the protocol (message 3 on connection 1 -> 0 on channel 0, while 2 \
         slots were granted and 0 credited back); its link was closed"
    );
    // Only the granted messages were kept.
    assert_eq!(mesh.take(1, 0, 0), Some(vec![0xcd; 8]));
    assert_eq!(mesh.take(1, 0, 0), Some(vec![0xcd; 8]));
    assert_eq!(mesh.take(1, 0, 0), None);
}

/// Within its credits a peer may go on: a slot credited back admits one more message.
#[test]
fn credits_returned_admit_more_messages() {
    let Rogue { mesh, mut s } = rogue(grant(1, 64));
    let msg = |b: u8| {
        let mut m = header(FrameKind::Data, 0, 1, 0, 4);
        m.extend([b; 4]);
        m
    };
    s.write_all(&msg(1)).expect("first");
    let start = Instant::now();
    let first = loop {
        if let Some(m) = mesh.take(1, 0, 0) {
            break m;
        }
        assert!(start.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(2));
    };
    assert_eq!(first, vec![1; 4]);
    mesh.credit(1, 1, 0, 0);
    s.write_all(&msg(2)).expect("second");
    let start = Instant::now();
    let second = loop {
        if let Some(m) = mesh.take(1, 0, 0) {
            break m;
        }
        assert!(start.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(2));
    };
    assert_eq!(second, vec![2; 4]);
    assert_eq!(mesh.failure(), None);
}

/// A peer's failure text with terminal escape codes was printed raw; now it is escaped and
/// bounded.
#[test]
fn remote_error_text_is_escaped() {
    let Rogue { mesh, mut s } = rogue(grant(2, 64));
    let text = "rank 1 failed\x1b[2J\x1b]0;pwned\x07\r\nfake prompt $ ";
    let mut f = header(FrameKind::Abort, 0, 0, 0, text.len() as u64);
    f.extend(text.as_bytes());
    s.write_all(&f).expect("abort");
    let shown = failure_of(&mesh).to_string();
    assert_eq!(
        shown,
        "process 1 failed: rank 1 failed\\u{1b}[2J\\u{1b}]0;pwned\\u{7}\\r\\nfake prompt $ "
    );
    assert!(!shown.chars().any(char::is_control), "{shown:?}");
}

/// `coll run --procs` leaves its rendezvous port in a directory only its user can enter,
/// under a name nobody can guess in advance.
#[cfg(unix)]
#[test]
fn the_procs_rendezvous_directory_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let d = coll_cli::procs::private_dir().expect("dir");
    let mode = std::fs::metadata(d.path())
        .expect("meta")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700, "{mode:o}");
    assert_ne!(
        d.path(),
        coll_cli::procs::private_dir().expect("dir").path()
    );
}

/// The grants a run makes from its plan (its connections, slots and longest message) admit
/// everything an honest run sends: every shipped algorithm split over 2 processes on
/// loopback, rooted ones for a root other than 0 (whose ranks are relabelled), exact.
#[test]
fn plan_grants_admit_every_honest_run() {
    use coll_compiler::topology::Topology;
    use coll_executor::cpu::{CpuExecutor, RunOptions};
    use coll_executor::dtype::{DType, ReduceOp};
    let mut runs = 0;
    for path in coll_tests::coll_files("algorithms") {
        let m =
            coll_lang::load(coll_tests::source(&path)).unwrap_or_else(|d| panic!("{}", d.render()));
        let Some(spec) = coll_tests::preset(&m, 4) else {
            continue;
        };
        let topo = Topology::parse(&spec).expect("preset");
        let Ok(c) = coll_compiler::compile(&m, &topo, &coll_compiler::CompileOptions::default())
        else {
            continue;
        };
        let slots = coll_compiler::DEFAULT_SLOTS;
        let exec = CpuExecutor::new(c.into_plan(), slots);
        let o = RunOptions {
            count: 1003,
            op: ReduceOp::Sum,
            root: 1,
            timeout: Duration::from_secs(10),
            stall: None,
        };
        let plan = exec.plan();
        let longest = (0..plan.buffers.len())
            .map(|b| plan.buffer_elements(b, o.count))
            .max()
            .unwrap_or(0);
        let grant = Grant::for_plan(plan, u64::from(slots), longest * 4);
        let meshes =
            coll_executor::net::mesh::loopback_granting(2, 4, &grant, o.timeout).expect("loopback");
        let reports: Vec<_> = std::thread::scope(|s| {
            let hs: Vec<_> = meshes
                .into_iter()
                .map(|mut mesh| {
                    let (exec, o) = (&exec, &o);
                    s.spawn(move || {
                        coll_executor::harness::run_checked_part(
                            exec,
                            &mut mesh,
                            DType::F32,
                            o,
                            false,
                        )
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().expect("thread")).collect()
        });
        for r in reports {
            let r = r.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(r.wrong, Some(0), "{}", path.display());
        }
        runs += 1;
    }
    assert!(runs >= 12, "only {runs} algorithms ran");
}
