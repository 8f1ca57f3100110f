//! The TCP backend: one stream per pair of processes, frames written as header + payload.
//!
//! Invariants: process `i` connects to every process below it and accepts every process
//! above it, so each pair has exactly one stream; a connecting process first sends
//! `COLN`, its process index and the process count, so the acceptor knows who it is and
//! refuses strangers. Streams have `TCP_NODELAY` (frames are latency-bound messages).

use super::{Backend, Frame, FrameRx, FrameTx, HEADER_BYTES, Link, NetError};
use crate::bootstrap::left;
use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

const MAGIC: [u8; 4] = *b"COLN";

/// TCP links, listening on `host` (an address the other processes can reach).
#[derive(Debug)]
pub struct TcpBackend {
    host: IpAddr,
    listener: Option<TcpListener>,
    me: u32,
    procs: u32,
}

impl TcpBackend {
    pub fn new(host: IpAddr) -> TcpBackend {
        TcpBackend {
            host,
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
                what: format!("endpoint `{text}` is not an address"),
            })?;
            let mut s = loop {
                match TcpStream::connect_timeout(&addr, left(deadline)) {
                    Ok(s) => break s,
                    Err(_) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    Err(_) => {
                        return Err(NetError::Unreachable {
                            peer: p,
                            addr: text,
                            timeout,
                        });
                    }
                }
            };
            let mut hello = MAGIC.to_vec();
            hello.extend_from_slice(&me.to_le_bytes());
            hello.extend_from_slice(&procs.to_le_bytes());
            s.write_all(&hello).map_err(io(p))?;
            streams[p as usize] = Some(s);
        }
        // Higher processes connect to us.
        listener
            .set_nonblocking(true)
            .map_err(|e| setup(format!("listener: {e}")))?;
        while let Some(missing) = (me + 1..procs).find(|&p| streams[p as usize].is_none()) {
            let accepted = crate::bootstrap::accept_until(&listener, deadline)
                .map_err(|e| setup(format!("accept: {e}")))?;
            let Some(mut s) = accepted else {
                return Err(NetError::Unreachable {
                    peer: missing,
                    addr: String::from_utf8_lossy(&blobs[missing as usize]).into_owned(),
                    timeout,
                });
            };
            // A stranger or a slow hello is dropped; the deadline bounds the wait.
            let mut h = [0u8; 12];
            let hello = s.read_exact(&mut h);
            if hello.is_err() {
                continue;
            }
            let word = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
            if h[0..4] != MAGIC {
                continue;
            }
            let (p, their_procs) = (word(4), word(8));
            if their_procs != procs || p <= me || p >= procs {
                return Err(NetError::Protocol {
                    peer: p,
                    what: format!(
                        "says it is process {p} of {their_procs}; this is process {me} of {procs}"
                    ),
                });
            }
            if streams[p as usize].is_some() {
                return Err(NetError::Protocol {
                    peer: p,
                    what: "connected twice".into(),
                });
            }
            streams[p as usize] = Some(s);
        }
        let mut links = Vec::new();
        for (p, s) in streams.into_iter().enumerate() {
            let Some(s) = s else { continue };
            let p = p as u32;
            s.set_nodelay(true).map_err(io(p))?;
            s.set_read_timeout(None).map_err(io(p))?;
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
    fn recv(&mut self) -> Result<Frame, NetError> {
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
            Frame::parse_header(&h).map_err(|what| NetError::Protocol { peer, what })?;
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::FrameKind;
    use std::net::Ipv4Addr;

    /// Three "processes" as threads: every pair gets one link and frames arrive intact.
    #[test]
    fn three_processes_link_in_pairs() {
        let host = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let mut backends: Vec<TcpBackend> = (0..3).map(|_| TcpBackend::new(host)).collect();
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
        assert_eq!(l20.rx.recv().expect("recv"), big);
        assert_eq!(l20.rx.recv().expect("recv").kind, FrameKind::Bye);
        // Dropping process 0's links ends the stream: process 2 sees it closed.
        links[0].clear();
        let l20 = links[2].iter_mut().find(|l| l.peer == 0).expect("link");
        assert!(matches!(l20.rx.recv(), Err(NetError::Closed { peer: 0 })));
    }

    #[test]
    fn an_absent_peer_is_named_after_the_timeout() {
        let host = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let mut b = TcpBackend::new(host);
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
