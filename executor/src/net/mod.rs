//! Remote channels: how messages move between processes (on one machine or several).
//!
//! Every backend carries the same *proxy protocol*: a link joins two processes and carries
//! [`Frame`]s in both directions, in order. A process's proxy (see [`mesh`]) owns its links;
//! executors never touch a socket or a queue pair, they hand the proxy frames and read what
//! it delivered. So the TCP backend, which runs everywhere, exercises exactly the path the
//! RDMA backend uses.
//!
//! Frames (all integers little-endian): a 24-byte header `kind: u32, channel: u32, from: u32,
//! to: u32, len: u64`, then `len` payload bytes.
//! - `Data`: one message of connection `from -> to` on `channel` (ranks, not processes).
//! - `Credit`: the receiver `to` of connection `from -> to` freed one slot; the sender may
//!   have at most `slots` messages unacknowledged per connection.
//! - `Barrier`: a process reached barrier number `channel`; the payload is what it
//!   contributes (every process gets every contribution).
//! - `Abort`: the sending process failed; the payload is its error, in words.
//! - `Bye`: the sending process closes the link on purpose. A link that ends without `Bye`
//!   means the peer died, and every rank waiting on it fails naming it.
//!
//! Every frame's length is checked against what the receiver granted ([`FrameLimits`])
//! before anything of its payload is read or allocated: a frame claiming more is a protocol
//! error that closes that link only. TCP connections prove the job's secret ([`auth`])
//! before either side reads anything else from them.
//!
//! Invariants: frames on one link arrive in the order they were sent and are never
//! duplicated; a backend reports a broken link as [`NetError::Closed`] or [`NetError::Io`],
//! never by blocking forever: a TCP read ends when the peer's process ends (its sockets close
//! with it); RDMA, where a dead peer is silent, pings an idle peer and fails the link when
//! the ping is not acknowledged within the transport timeout.

pub mod auth;
pub mod door;
pub mod mesh;
#[cfg(feature = "rdma")]
pub mod rdma;
pub mod tcp;

use std::time::Duration;

/// What a frame says (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum FrameKind {
    Data = 1,
    Credit = 2,
    Barrier = 3,
    Abort = 4,
    Bye = 5,
}

impl FrameKind {
    fn from_u32(v: u32) -> Option<FrameKind> {
        Some(match v {
            1 => FrameKind::Data,
            2 => FrameKind::Credit,
            3 => FrameKind::Barrier,
            4 => FrameKind::Abort,
            5 => FrameKind::Bye,
            _ => return None,
        })
    }
}

/// One unit of the proxy protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub kind: FrameKind,
    pub channel: u32,
    pub from: u32,
    pub to: u32,
    pub payload: Vec<u8>,
}

/// Bytes of an encoded frame header.
pub const HEADER_BYTES: usize = 24;
/// A frame claiming more payload than this is a protocol error whatever was granted.
pub const MAX_PAYLOAD: u64 = 1 << 36;

/// The most payload a receiver takes in one frame of each kind: what it granted its peer.
/// A frame claiming more is refused from its header, before any of it is allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameLimits {
    /// The largest message of any connection.
    pub data: u64,
    /// The largest barrier contribution.
    pub barrier: u64,
    /// The longest failure text.
    pub abort: u64,
}

impl FrameLimits {
    /// Barrier contributions are reports and handle tables: kilobytes.
    pub const BARRIER: u64 = 16 << 20;
    /// Failure texts are a few lines (senders cut theirs to [`MAX_ABORT_TEXT`]).
    pub const ABORT: u64 = 64 << 10;

    /// Messages of at most `data` bytes, the usual barrier and abort bounds.
    pub fn for_data(data: u64) -> FrameLimits {
        FrameLimits {
            data: data.min(MAX_PAYLOAD),
            barrier: Self::BARRIER,
            abort: Self::ABORT,
        }
    }

    /// The most payload a frame of `kind` may carry.
    pub fn max(&self, kind: FrameKind) -> u64 {
        match kind {
            FrameKind::Data => self.data,
            FrameKind::Barrier => self.barrier,
            FrameKind::Abort => self.abort,
            FrameKind::Credit | FrameKind::Bye => 0,
        }
    }
}

/// The most bytes of failure text a process sends its peers.
pub const MAX_ABORT_TEXT: usize = 4096;

impl Frame {
    pub fn new(kind: FrameKind, channel: u32, from: u32, to: u32, payload: Vec<u8>) -> Frame {
        Frame {
            kind,
            channel,
            from,
            to,
            payload,
        }
    }

    /// The encoded header of this frame.
    pub fn header(&self) -> [u8; HEADER_BYTES] {
        let mut h = [0u8; HEADER_BYTES];
        h[0..4].copy_from_slice(&(self.kind as u32).to_le_bytes());
        h[4..8].copy_from_slice(&self.channel.to_le_bytes());
        h[8..12].copy_from_slice(&self.from.to_le_bytes());
        h[12..16].copy_from_slice(&self.to.to_le_bytes());
        h[16..24].copy_from_slice(&(self.payload.len() as u64).to_le_bytes());
        h
    }

    /// Decodes a header: the frame (payload still empty) and the payload length, which is
    /// within `limits` for its kind (else the error says by how much it is not).
    pub fn parse_header(
        h: &[u8; HEADER_BYTES],
        limits: &FrameLimits,
    ) -> Result<(Frame, u64), String> {
        let word = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let kind = FrameKind::from_u32(word(0))
            .ok_or_else(|| format!("unknown frame kind {}", word(0)))?;
        let mut len = [0u8; 8];
        len.copy_from_slice(&h[16..24]);
        let len = u64::from_le_bytes(len);
        let max = limits.max(kind).min(MAX_PAYLOAD);
        if len > max {
            return Err(format!(
                "a {kind:?} frame of {len} bytes, more than the {max} this process granted"
            ));
        }
        Ok((
            Frame::new(kind, word(4), word(8), word(12), Vec::new()),
            len,
        ))
    }
}

/// Errors of remote channels. `peer` is always a process index.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("process {peer} closed the connection without saying goodbye (it died or was killed)")]
    Closed { peer: u32 },
    #[error("process {peer}: {source}")]
    Io {
        peer: u32,
        #[source]
        source: std::io::Error,
    },
    #[error("process {peer}: protocol error: {what}")]
    Protocol { peer: u32, what: String },
    #[error("process {peer} was not reachable within {timeout:?} at {addr}")]
    Unreachable {
        peer: u32,
        addr: String,
        timeout: Duration,
    },
    #[error("{backend} setup: {what}")]
    Setup { backend: &'static str, what: String },
    #[error("no RDMA device: {0}")]
    NoDevice(String),
}

/// The sending half of a link.
pub trait FrameTx: Send {
    /// Sends one frame; returns once the backend has taken it (the payload may be reused).
    fn send(&mut self, frame: &Frame) -> Result<(), NetError>;
}

/// The receiving half of a link.
pub trait FrameRx: Send {
    /// The next frame; blocks until one arrives or the link breaks. A frame longer than
    /// `limits` allow for its kind is a [`NetError::Protocol`], found before its payload is
    /// read.
    fn recv(&mut self, limits: &FrameLimits) -> Result<Frame, NetError>;

    /// Closes the link from this side after a protocol error (the peer sees it end). A
    /// backend without a way to do so leaves it to the end of the process.
    fn close(&mut self) {}
}

/// `text` from another process made safe to print: control characters (terminal escape
/// sequences, carriage returns) and bidirectional overrides are written as escapes, and at
/// most `max_chars` characters are kept.
pub fn printable(text: &str, max_chars: usize) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    for c in chars.by_ref().take(max_chars) {
        let bidi = matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if c.is_control() || bidi {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    let rest = chars.count();
    if rest > 0 {
        out.push_str(&format!("... ({rest} more characters)"));
    }
    out
}

/// A connected link to process `peer`.
pub struct Link {
    pub peer: u32,
    pub tx: Box<dyn FrameTx>,
    pub rx: Box<dyn FrameRx>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link").field("peer", &self.peer).finish()
    }
}

/// A way to connect processes. Setup is two steps around the bootstrap: [`Backend::endpoint`]
/// makes this process reachable and says how (a blob the bootstrap hands every process),
/// then [`Backend::connect`] links this process to every other from their blobs.
pub trait Backend {
    fn name(&self) -> &'static str;
    /// Makes this process (`me` of `procs`) reachable; returns what peers need to reach it.
    fn endpoint(&mut self, me: u32, procs: u32) -> Result<Vec<u8>, NetError>;
    /// Connects to every other process; `blobs[p]` is process p's endpoint. Returns one link
    /// per other process, in process order. Fails naming a process that is not reachable
    /// within `timeout`.
    fn connect(&mut self, blobs: &[Vec<u8>], timeout: Duration) -> Result<Vec<Link>, NetError>;
}

/// The local address this host uses to reach `peer` (the routing table's choice, found by
/// connecting a UDP socket, which sends nothing): what to tell peers to connect to.
pub fn local_ip_toward(peer: std::net::SocketAddr) -> std::io::Result<std::net::IpAddr> {
    let any: std::net::SocketAddr = if peer.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let s = std::net::UdpSocket::bind(any)?;
    s.connect(peer)?;
    Ok(s.local_addr()?.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_text_is_escaped_and_bounded() {
        assert_eq!(
            printable("red \u{1b}[31mALERT\u{1b}[0m\r\nok \u{202e}txt", 100),
            "red \\u{1b}[31mALERT\\u{1b}[0m\\r\\nok \\u{202e}txt"
        );
        assert_eq!(printable("rank 2: `recv` é", 100), "rank 2: `recv` é");
        assert_eq!(printable("abcdef", 4), "abcd... (2 more characters)");
    }

    #[test]
    fn headers_beyond_the_grant_are_refused_before_the_payload() {
        let limits = FrameLimits::for_data(1024);
        let mut f = Frame::new(FrameKind::Data, 1, 2, 3, vec![0; 1024]);
        let (g, len) = Frame::parse_header(&f.header(), &limits).expect("within");
        assert_eq!(
            (g.kind, g.channel, g.from, g.to, len),
            (FrameKind::Data, 1, 2, 3, 1024)
        );
        f.payload.push(0);
        let e = Frame::parse_header(&f.header(), &limits).expect_err("one byte more");
        assert_eq!(
            e,
            "a Data frame of 1025 bytes, more than the 1024 this process granted"
        );
        let mut h = Frame::new(FrameKind::Data, 0, 0, 0, Vec::new()).header();
        h[16..24].copy_from_slice(&(1u64 << 36).to_le_bytes());
        let e = Frame::parse_header(&h, &limits).expect_err("64 GiB");
        assert!(e.contains("68719476736 bytes"), "{e}");
        let credit = Frame::new(FrameKind::Credit, 0, 0, 0, vec![1]);
        assert!(Frame::parse_header(&credit.header(), &limits).is_err());
    }
}
