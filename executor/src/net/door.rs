//! The door of a listening socket: admits only connections that prove the job's secret and
//! then say a well-formed hello, each within a bounded time, without letting any one
//! connection hold up the others.
//!
//! Every accepted connection is handled in its own short-lived thread: the handshake
//! ([`auth::accept`]), then the caller's fixed-format hello, both under one deadline (at most
//! [`HELLO_WAIT`] after accepting, never past the caller's deadline). A connection that fails
//! either is dropped and remembered as a refusal (the caller's error can then say why a peer
//! never showed up); nothing a stranger sends can fail the door's owner or delay it past its
//! deadline. At most [`MAX_PENDING`] connections are in their handshake at once; beyond that
//! new connections are closed at once (a flood of them cannot exhaust threads).
//!
//! Invariant: [`Door::next`] returns only connections whose peer proved the secret, with
//! their parsed hello, and returns `None` once the deadline has passed.

use super::auth::{self, JobSecret};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long one connection may take over its handshake and hello.
pub const HELLO_WAIT: Duration = Duration::from_secs(10);
/// Connections in their handshake at once.
pub const MAX_PENDING: usize = 64;
/// Refusals remembered for messages.
const KEEP: usize = 4;

type Hello<T> = dyn Fn(&mut TcpStream, Instant) -> Result<T, String> + Send + Sync;
type Outcome<T> = Result<(T, TcpStream, SocketAddr), String>;

/// See the module docs.
pub struct Door<'l, T> {
    listener: &'l TcpListener,
    secret: JobSecret,
    context: &'static str,
    hello: Arc<Hello<T>>,
    tx: mpsc::Sender<Outcome<T>>,
    rx: mpsc::Receiver<Outcome<T>>,
    pending: usize,
    refused: usize,
    reasons: Vec<String>,
}

impl<T> std::fmt::Debug for Door<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Door")
            .field("context", &self.context)
            .field("pending", &self.pending)
            .field("refused", &self.refused)
            .finish()
    }
}

impl<'l, T: Send + 'static> Door<'l, T> {
    /// A door on `listener` (made non-blocking) for connections of protocol `context`;
    /// `hello` reads a connection's hello (after its handshake) by the deadline it is given.
    pub fn new(
        listener: &'l TcpListener,
        secret: &JobSecret,
        context: &'static str,
        hello: impl Fn(&mut TcpStream, Instant) -> Result<T, String> + Send + Sync + 'static,
    ) -> std::io::Result<Door<'l, T>> {
        listener.set_nonblocking(true)?;
        let (tx, rx) = mpsc::channel();
        Ok(Door {
            listener,
            secret: secret.clone(),
            context,
            hello: Arc::new(hello),
            tx,
            rx,
            pending: 0,
            refused: 0,
            reasons: Vec::new(),
        })
    }

    /// The next admitted connection: its hello, the stream (blocking, no timeouts set) and
    /// the peer's address; `None` once `deadline` has passed.
    pub fn next(
        &mut self,
        deadline: Instant,
    ) -> std::io::Result<Option<(T, TcpStream, SocketAddr)>> {
        loop {
            if let Ok(outcome) = self.rx.try_recv() {
                if let Some(admitted) = self.settle(outcome)? {
                    return Ok(Some(admitted));
                }
                continue;
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            match self.listener.accept() {
                Ok((s, addr)) => self.admit(s, addr, deadline),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    // Waits on the workers, not just the clock: an admitted peer is taken
                    // as soon as its hello is read.
                    if let Ok(outcome) = self.rx.recv_timeout(Duration::from_millis(2))
                        && let Some(admitted) = self.settle(outcome)?
                    {
                        return Ok(Some(admitted));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                // Errors of one connection (it reset before we took it) are its own.
                Err(e) if is_per_connection(&e) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// A worker's outcome: the admitted connection, or `None` (noted as refused).
    fn settle(
        &mut self,
        outcome: Outcome<T>,
    ) -> std::io::Result<Option<(T, TcpStream, SocketAddr)>> {
        self.pending = self.pending.saturating_sub(1);
        match outcome {
            Ok((t, s, addr)) => {
                s.set_read_timeout(None)?;
                s.set_write_timeout(None)?;
                Ok(Some((t, s, addr)))
            }
            Err(why) => {
                self.refuse(why);
                Ok(None)
            }
        }
    }

    fn admit(&mut self, mut s: TcpStream, addr: SocketAddr, deadline: Instant) {
        if self.pending >= MAX_PENDING {
            self.refuse(format!(
                "{addr}: closed at once ({MAX_PENDING} connections were already in their handshake)"
            ));
            return;
        }
        self.pending += 1;
        let (secret, context, hello, tx) = (
            self.secret.clone(),
            self.context,
            Arc::clone(&self.hello),
            self.tx.clone(),
        );
        let until = deadline.min(Instant::now() + HELLO_WAIT);
        std::thread::spawn(move || {
            let outcome = (|| {
                s.set_nonblocking(false)
                    .map_err(|e| format!("{addr}: {e}"))?;
                auth::accept(&mut s, &secret, context, until)
                    .map_err(|e| format!("{addr}: {e}"))?;
                let t = hello(&mut s, until).map_err(|e| format!("{addr}: {e}"))?;
                Ok((t, s, addr))
            })();
            // The door may be gone (its owner finished): then this connection just closes.
            let _ = tx.send(outcome);
        });
    }

    /// Notes a connection refused (by the door or, after its hello, by the owner).
    pub fn refuse(&mut self, why: String) {
        self.refused += 1;
        if self.reasons.len() == KEEP {
            self.reasons.remove(0);
        }
        self.reasons.push(why);
    }

    /// How many connections were refused and the last few reasons, for an error message;
    /// `None` when none was.
    pub fn refusals(&self) -> Option<String> {
        (self.refused > 0).then(|| {
            let noun = if self.refused == 1 {
                "connection"
            } else {
                "connections"
            };
            format!(
                "{} {noun} refused (last: {})",
                self.refused,
                self.reasons.join("; ")
            )
        })
    }
}

fn is_per_connection(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::PermissionDenied
    )
}
