//! The TCP backend: one stream per pair of processes, frames written as header + payload.
//!
//! Invariants: process `i` connects to every process below it and accepts every process
//! above it, so each pair has exactly one stream. Every stream opens with the job's
//! handshake ([`auth`]); then the connecting process says who it is and whom it meant to
//! reach (`from, procs, to`: three little-endian u32s). The acceptor admits it only through a
//! [`Door`]: a connection that cannot prove the secret, or says something that does not fit
//! (another job's size, a process that is not above this one, one already connected), is
//! dropped and the acceptor keeps waiting for the real peer until its deadline. Streams have
//! `TCP_NODELAY` (frames are latency-bound messages).

use super::auth::{self, JobSecret};
use super::door::Door;
use super::{Backend, Frame, FrameLimits, FrameRx, FrameTx, HEADER_BYTES, Link, NetError};
use crate::bootstrap::left;
use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// What the handshake's proofs are bound to: a bootstrap proof does not open a mesh link.
pub const CONTEXT: &str = "tcp mesh";

/// TCP links, listening on `host` (an address the other processes can reach), open only to
/// processes that know `secret`.
#[derive(Debug)]
pub struct TcpBackend {
    host: IpAddr,
    secret: JobSecret,
    listener: Option<TcpListener>,
    me: u32,
    procs: u32,
}

impl TcpBackend {
    pub fn new(host: IpAddr, secret: JobSecret) -> TcpBackend {
        TcpBackend {
            host,
            secret,
            listener: None,
            me: 0,
            procs: 0,
        }
    }
}

fn io(peer: u32) -> impl Fn(std::io::Error) -> NetError {
    move |source| NetError::Io { peer, source }
}

fn setup(what: String) -> NetError {
    NetError::Setup {
        backend: "tcp",
        what,
    }
}

impl Backend for TcpBackend {
    fn name(&self) -> &'static str {
        "tcp"
    }

    fn endpoint(&mut self, me: u32, procs: u32) -> Result<Vec<u8>, NetError> {
        let listener = TcpListener::bind((self.host, 0))
            .map_err(|e| setup(format!("cannot listen on {}: {e}", self.host)))?;
        let addr = listener
            .local_addr()
            .map_err(|e| setup(format!("listener address: {e}")))?;
        self.listener = Some(listener);
        self.me = me;
        self.procs = procs;
        Ok(addr.to_string().into_bytes())
    }

    fn connect(&mut self, blobs: &[Vec<u8>], timeout: Duration) -> Result<Vec<Link>, NetError> {
        let deadline = Instant::now() + timeout;
        let (me, procs) = (self.me, self.procs);
        let listener = self
            .listener
            .take()
            .ok_or_else(|| setup("connect called before endpoint".into()))?;
        if blobs.len() != procs as usize {
            return Err(setup(format!(
                "{} endpoints for {procs} processes",
                blobs.len()
            )));
        }
        let mut streams: Vec<Option<TcpStream>> = (0..procs).map(|_| None).collect();
        // Lower processes listen for us: connect to each, retrying while it starts up.
        for p in 0..me {
            let text = String::from_utf8_lossy(&blobs[p as usize]).into_owned();
            let addr: SocketAddr = text.parse().map_err(|_| NetError::Protocol {
                peer: p,
                what: format!(
                    "endpoint `{}` is not an address",
                    super::printable(&text, 64)
                ),
            })?;
            streams[p as usize] = Some(self.dial(p, addr, deadline, timeout)?);
        }
        // Higher processes connect to us.
        let mut door = Door::new(&listener, &self.secret, CONTEXT, |s, until| {
            let mut h = [0u8; 12];
            auth::read_exact_by(s, &mut h, until).map_err(|e| format!("hello: {e}"))?;
            let word = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
            Ok((word(0), word(4), word(8)))
        })
        .map_err(|e| setup(format!("listener: {e}")))?;
        while let Some(missing) = (me + 1..procs).find(|&p| streams[p as usize].is_none()) {
            let admitted = door
                .next(deadline)
                .map_err(|e| setup(format!("accept: {e}")))?;
            let Some(((p, their_procs, to), s, addr)) = admitted else {
                let mut addr = String::from_utf8_lossy(&blobs[missing as usize]).into_owned();
                if let Some(why) = door.refusals() {
                    addr = format!("{addr} ({why})");
                }
                return Err(NetError::Unreachable {
                    peer: missing,
                    addr,
                    timeout,
                });
            };
            // Knowing the secret makes it one of ours, not a right one: a hello that does
            // not fit this run closes its own connection, nothing else.
            if their_procs != procs || to != me || p <= me || p >= procs {
                door.refuse(format!(
                    "{addr}: says it is process {p} of {their_procs} calling process {to}; \
                     this is process {me} of {procs}"
                ));
                continue;
            }
            if streams[p as usize].is_some() {
                door.refuse(format!("{addr}: a second connection from process {p}"));
                continue;
            }
            streams[p as usize] = Some(s);
        }
        let mut links = Vec::new();
        for (p, s) in streams.into_iter().enumerate() {
            let Some(s) = s else { continue };
            let p = p as u32;
            s.set_nodelay(true).map_err(io(p))?;
            s.set_read_timeout(None).map_err(io(p))?;
            s.set_write_timeout(None).map_err(io(p))?;
            let rx = s.try_clone().map_err(io(p))?;
            links.push(Link {
                peer: p,
                tx: Box::new(TcpTx {
                    peer: p,
                    w: BufWriter::with_capacity(1 << 16, s),
                }),
                rx: Box::new(TcpRx {
                    peer: p,
                    r: BufReader::with_capacity(1 << 16, rx),
                }),
            });
        }
        Ok(links)
    }
}

impl TcpBackend {
    /// Connects to process `p` at `addr` and proves the secret; retries while `p` is not
    /// listening yet or cut the connection (its door was busy), until `deadline`.
    fn dial(
        &self,
        p: u32,
        addr: SocketAddr,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<TcpStream, NetError> {
        let (me, procs) = (self.me, self.procs);
        loop {
            let tried = TcpStream::connect_timeout(&addr, left(deadline))
                .map_err(auth::AuthError::Io)
                .and_then(|mut s| {
                    auth::connect(&mut s, &self.secret, CONTEXT, deadline)?;
                    Ok(s)
                });
            match tried {
                Ok(mut s) => {
                    let mut hello = me.to_le_bytes().to_vec();
                    hello.extend_from_slice(&procs.to_le_bytes());
                    hello.extend_from_slice(&p.to_le_bytes());
                    auth::write_all_by(&mut s, &hello, deadline).map_err(io(p))?;
                    return Ok(s);
                }
                // A process that proves a different secret is another job's: no retry helps.
                Err(
                    e @ (auth::AuthError::BadProof
                    | auth::AuthError::NotAPeer
                    | auth::AuthError::Version(_)),
                ) => {
                    return Err(NetError::Protocol {
                        peer: p,
                        what: format!(
                            "at {addr}: {e} (is the job secret the same in every process?)"
                        ),
                    });
                }
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(_) => {
                    return Err(NetError::Unreachable {
                        peer: p,
                        addr: addr.to_string(),
                        timeout,
                    });
                }
            }
        }
    }
}

struct TcpTx {
    peer: u32,
    w: BufWriter<TcpStream>,
}

impl FrameTx for TcpTx {
    fn send(&mut self, frame: &Frame) -> Result<(), NetError> {
        let peer = self.peer;
        self.w.write_all(&frame.header()).map_err(io(peer))?;
        self.w.write_all(&frame.payload).map_err(io(peer))?;
        self.w.flush().map_err(io(peer))
    }
}

struct TcpRx {
    peer: u32,
    r: BufReader<TcpStream>,
}

impl FrameRx for TcpRx {
    fn recv(&mut self, limits: &FrameLimits) -> Result<Frame, NetError> {
        let peer = self.peer;
        let mut h = [0u8; HEADER_BYTES];
        if let Err(e) = self.r.read_exact(&mut h) {
            return Err(match e.kind() {
                std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset => {
                    NetError::Closed { peer }
                }
                _ => NetError::Io { peer, source: e },
            });
        }
        let (mut frame, len) =
            Frame::parse_header(&h, limits).map_err(|what| NetError::Protocol { peer, what })?;
        // Within the grant, so this allocation is one the receiver agreed to.
        frame.payload = vec![0u8; len as usize];
        self.r.read_exact(&mut frame.payload).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                NetError::Closed { peer }
            } else {
                NetError::Io { peer, source: e }
            }
        })?;
        Ok(frame)
    }

    fn close(&mut self) {
        let _ = self.r.get_ref().shutdown(std::net::Shutdown::Both);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::FrameKind;
    use std::net::Ipv4Addr;

    fn secret() -> JobSecret {
        JobSecret::from_bytes([5; JobSecret::BYTES])
    }

    const ANY: FrameLimits = FrameLimits {
        data: 1 << 20,
        barrier: 1 << 20,
        abort: 1 << 20,
    };

    /// Three "processes" as threads: every pair gets one link and frames arrive intact.
    #[test]
    fn three_processes_link_in_pairs() {
        let host = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let mut backends: Vec<TcpBackend> =
            (0..3).map(|_| TcpBackend::new(host, secret())).collect();
        let blobs: Vec<Vec<u8>> = backends
            .iter_mut()
            .enumerate()
            .map(|(i, b)| b.endpoint(i as u32, 3).expect("endpoint"))
            .collect();
        let links: Vec<Vec<Link>> = std::thread::scope(|s| {
            let hs: Vec<_> = backends
                .iter_mut()
                .map(|b| {
                    let blobs = &blobs;
                    s.spawn(move || b.connect(blobs, Duration::from_secs(10)))
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().expect("thread").expect("connect"))
                .collect()
        });
        for (me, ls) in links.iter().enumerate() {
            let peers: Vec<u32> = ls.iter().map(|l| l.peer).collect();
            let want: Vec<u32> = (0..3).filter(|&p| p != me as u32).collect();
            assert_eq!(peers, want);
        }
        let mut links = links;
        let big = Frame::new(
            FrameKind::Data,
            7,
            0,
            2,
            (0..200_000u32).map(|i| i as u8).collect(),
        );
        let l02 = links[0].iter_mut().find(|l| l.peer == 2).expect("link");
        l02.tx.send(&big).expect("send");
        l02.tx
            .send(&Frame::new(FrameKind::Bye, 0, 0, 2, Vec::new()))
            .expect("send");
        let l20 = links[2].iter_mut().find(|l| l.peer == 0).expect("link");
        assert_eq!(l20.rx.recv(&ANY).expect("recv"), big);
        assert_eq!(l20.rx.recv(&ANY).expect("recv").kind, FrameKind::Bye);
        // Dropping process 0's links ends the stream: process 2 sees it closed.
        links[0].clear();
        let l20 = links[2].iter_mut().find(|l| l.peer == 0).expect("link");
        assert!(matches!(
            l20.rx.recv(&ANY),
            Err(NetError::Closed { peer: 0 })
        ));
    }

    #[test]
    fn an_absent_peer_is_named_after_the_timeout() {
        let host = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let mut b = TcpBackend::new(host, secret());
        let mine = b.endpoint(0, 2).expect("endpoint");
        let err = b
            .connect(&[mine, b"127.0.0.1:1".to_vec()], Duration::from_millis(300))
            .expect_err("process 1 never connects");
        assert!(
            matches!(err, NetError::Unreachable { peer: 1, .. }),
            "{err}"
        );
        assert!(
            err.to_string().contains("process 1 was not reachable"),
            "{err}"
        );
    }
}
