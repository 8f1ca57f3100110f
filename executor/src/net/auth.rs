//! The job secret and the handshake that proves it: what keeps a stranger out of a
//! multi-process job.
//!
//! Every process of a job knows one [`JobSecret`] (32 random bytes: `coll run --procs` makes
//! one and hands it to its children; under a launcher every process is given the same one).
//! Every TCP connection of the job (the bootstrap's and the mesh's) opens with a handshake in
//! which each side proves that it knows the secret without sending it, before either side
//! reads anything else from the connection:
//!
//! ```text
//! connector -> acceptor  "COLA", version: u32, nc: [u8; 32]
//! acceptor -> connector  "COLA", version: u32, na: [u8; 32],
//!                        HMAC(secret, "acceptor" | context | nc | na)
//! connector -> acceptor  HMAC(secret, "connector" | context | na | nc)
//! ```
//!
//! `nc` and `na` are fresh random nonces, so no proof can be replayed on another connection;
//! the role names differ, so one side's proof cannot be reflected back as the other's;
//! `context` names the protocol that follows ("bootstrap", "tcp mesh"), so a proof for one is
//! worthless for the other (each string is length-prefixed inside the HMAC). Proofs are
//! HMAC-SHA256, compared in constant time.
//!
//! Invariants: a secret's bytes appear in no `Debug` output, message or error (only
//! [`JobSecret::to_hex`] spells them, for handing to a child process); every message of the
//! handshake has a fixed size; every read and write ends by one deadline for the whole
//! exchange, however the peer doles its bytes out.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const MAGIC: [u8; 4] = *b"COLA";
const VERSION: u32 = 1;
const NONCE: usize = 32;
const PROOF: usize = 32;

/// Why a secret could not be had or a handshake failed. Never carries secret material.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("the system's random source failed: {0}")]
    Random(String),
    #[error("a job secret is {} hexadecimal digits; {reason}", 2 * JobSecret::BYTES)]
    Hex { reason: String },
    #[error("secret file {}: {reason}", path.display())]
    File {
        path: std::path::PathBuf,
        reason: String,
    },
    #[error("the handshake did not complete within {0:?}")]
    Timeout(Duration),
    #[error("the handshake was cut off: {0}")]
    Io(#[source] std::io::Error),
    #[error("the other side does not speak the coll handshake")]
    NotAPeer,
    #[error("the other side speaks handshake version {0}, this is {VERSION}")]
    Version(u32),
    #[error("the other side does not know this job's secret")]
    BadProof,
}

/// The secret every process of one job shares. 32 bytes from the operating system's random
/// source; `Debug` shows nothing of it and equality is compared in constant time.
#[derive(Clone)]
pub struct JobSecret([u8; JobSecret::BYTES]);

impl JobSecret {
    /// Bytes of a secret.
    pub const BYTES: usize = 32;

    /// A fresh secret from the operating system.
    pub fn generate() -> Result<JobSecret, AuthError> {
        let mut b = [0u8; Self::BYTES];
        getrandom::fill(&mut b).map_err(|e| AuthError::Random(e.to_string()))?;
        Ok(JobSecret(b))
    }

    pub fn from_bytes(bytes: [u8; Self::BYTES]) -> JobSecret {
        JobSecret(bytes)
    }

    /// Parses 64 hexadecimal digits (either case; surrounding whitespace is ignored). The
    /// error says what is wrong without repeating the text.
    pub fn from_hex(text: &str) -> Result<JobSecret, AuthError> {
        let t = text.trim().as_bytes();
        if t.len() != 2 * Self::BYTES {
            return Err(AuthError::Hex {
                reason: format!("this one has {}", t.len()),
            });
        }
        let digit = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        };
        let mut b = [0u8; Self::BYTES];
        for (i, pair) in t.chunks_exact(2).enumerate() {
            match (digit(pair[0]), digit(pair[1])) {
                (Some(h), Some(l)) => b[i] = h << 4 | l,
                _ => {
                    return Err(AuthError::Hex {
                        reason: format!("character {} or {} is not one", 2 * i + 1, 2 * i + 2),
                    });
                }
            }
        }
        Ok(JobSecret(b))
    }

    /// Reads a secret in hex from a file only its owner can read (a secret in a file others
    /// can read is no secret: that is refused, as ssh refuses such keys).
    pub fn from_file(path: &std::path::Path) -> Result<JobSecret, AuthError> {
        let bad = |reason: String| AuthError::File {
            path: path.to_path_buf(),
            reason,
        };
        let mut f = std::fs::File::open(path).map_err(|e| bad(e.to_string()))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = f
                .metadata()
                .map_err(|e| bad(e.to_string()))?
                .permissions()
                .mode();
            if mode & 0o077 != 0 {
                return Err(bad(format!(
                    "others may read it (mode {:o}); `chmod 600` it",
                    mode & 0o777
                )));
            }
        }
        // A secret is 64 digits and a newline: anything much longer is not one.
        let mut text = String::new();
        (&mut f)
            .take(4096)
            .read_to_string(&mut text)
            .map_err(|e| bad(e.to_string()))?;
        JobSecret::from_hex(&text).map_err(|e| bad(e.to_string()))
    }

    /// The secret in lower-case hex: what a launcher hands its processes (through the
    /// environment or a private file, never the command line, which other users can see).
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn proof(
        &self,
        role: &str,
        context: &str,
        first: &[u8],
        second: &[u8],
    ) -> Result<Hmac<Sha256>, AuthError> {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.0)
            .map_err(|_| AuthError::Random("HMAC refused a 32-byte key".into()))?;
        for part in [role.as_bytes(), context.as_bytes()] {
            // Length-prefixed, so no two (role, context) pairs feed the same bytes.
            m.update(&(part.len() as u32).to_le_bytes());
            m.update(part);
        }
        m.update(first);
        m.update(second);
        Ok(m)
    }
}

impl std::fmt::Debug for JobSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JobSecret(<redacted>)")
    }
}

impl PartialEq for JobSecret {
    fn eq(&self, other: &JobSecret) -> bool {
        // Every byte is looked at, whatever differs first.
        self.0
            .iter()
            .zip(other.0.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

impl Eq for JobSecret {}

/// Reads exactly `buf.len()` bytes by `deadline`: each read waits at most the time left, so
/// a peer sending one byte at a time cannot stretch the wait (a per-read timeout would restart
/// with every byte).
pub fn read_exact_by(s: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> std::io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        s.set_read_timeout(Some(left))?;
        match s.read(&mut buf[at..]) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => at += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if is_timeout(&e) => return Err(std::io::ErrorKind::TimedOut.into()),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes all of `buf` by `deadline`.
pub fn write_all_by(s: &mut TcpStream, buf: &[u8], deadline: Instant) -> std::io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        s.set_write_timeout(Some(left))?;
        match s.write(&buf[at..]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => at += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if is_timeout(&e) => return Err(std::io::ErrorKind::TimedOut.into()),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Whether a socket error means its timeout ran out (Unix says `WouldBlock`).
pub fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

fn io_err(started: Instant, deadline: Instant) -> impl Fn(std::io::Error) -> AuthError {
    move |e| {
        if is_timeout(&e) {
            AuthError::Timeout(deadline.saturating_duration_since(started))
        } else {
            AuthError::Io(e)
        }
    }
}

fn nonce() -> Result<[u8; NONCE], AuthError> {
    let mut n = [0u8; NONCE];
    getrandom::fill(&mut n).map_err(|e| AuthError::Random(e.to_string()))?;
    Ok(n)
}

fn opening(nonce: &[u8; NONCE]) -> [u8; 8 + NONCE] {
    let mut m = [0u8; 8 + NONCE];
    m[..4].copy_from_slice(&MAGIC);
    m[4..8].copy_from_slice(&VERSION.to_le_bytes());
    m[8..].copy_from_slice(nonce);
    m
}

/// Checks the other side's opening; returns its nonce.
fn their_nonce(m: &[u8; 8 + NONCE]) -> Result<[u8; NONCE], AuthError> {
    if m[..4] != MAGIC {
        return Err(AuthError::NotAPeer);
    }
    let version = u32::from_le_bytes([m[4], m[5], m[6], m[7]]);
    if version != VERSION {
        return Err(AuthError::Version(version));
    }
    let mut n = [0u8; NONCE];
    n.copy_from_slice(&m[8..]);
    Ok(n)
}

/// The connecting side of the handshake on a fresh connection; `Ok` once the acceptor has
/// proven it knows `secret` (and this side has sent its own proof).
pub fn connect(
    s: &mut TcpStream,
    secret: &JobSecret,
    context: &str,
    deadline: Instant,
) -> Result<(), AuthError> {
    let io = io_err(Instant::now(), deadline);
    let nc = nonce()?;
    write_all_by(s, &opening(&nc), deadline).map_err(&io)?;
    let mut m = [0u8; 8 + NONCE];
    read_exact_by(s, &mut m, deadline).map_err(&io)?;
    let na = their_nonce(&m)?;
    let mut proof = [0u8; PROOF];
    read_exact_by(s, &mut proof, deadline).map_err(&io)?;
    secret
        .proof("acceptor", context, &nc, &na)?
        .verify_slice(&proof)
        .map_err(|_| AuthError::BadProof)?;
    let mine = secret
        .proof("connector", context, &na, &nc)?
        .finalize()
        .into_bytes();
    write_all_by(s, &mine, deadline).map_err(&io)
}

/// The accepting side of the handshake on a fresh connection; `Ok` once the connector has
/// proven it knows `secret`. Reads nothing but the handshake's fixed-size messages.
pub fn accept(
    s: &mut TcpStream,
    secret: &JobSecret,
    context: &str,
    deadline: Instant,
) -> Result<(), AuthError> {
    let io = io_err(Instant::now(), deadline);
    let mut m = [0u8; 8 + NONCE];
    // The magic alone first: a stranger speaking another protocol is dropped at once.
    read_exact_by(s, &mut m[..4], deadline).map_err(&io)?;
    if m[..4] != MAGIC {
        return Err(AuthError::NotAPeer);
    }
    read_exact_by(s, &mut m[4..], deadline).map_err(&io)?;
    let nc = their_nonce(&m)?;
    let na = nonce()?;
    let mut answer = opening(&na).to_vec();
    answer.extend_from_slice(
        &secret
            .proof("acceptor", context, &nc, &na)?
            .finalize()
            .into_bytes(),
    );
    write_all_by(s, &answer, deadline).map_err(&io)?;
    let mut proof = [0u8; PROOF];
    read_exact_by(s, &mut proof, deadline).map_err(&io)?;
    secret
        .proof("connector", context, &na, &nc)?
        .verify_slice(&proof)
        .map_err(|_| AuthError::BadProof)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let c = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (a, _) = l.accept().expect("accept");
        (c, a)
    }

    fn secret(byte: u8) -> JobSecret {
        JobSecret::from_bytes([byte; JobSecret::BYTES])
    }

    /// Runs both sides; returns (connector's result, acceptor's result).
    fn shake(
        c_secret: JobSecret,
        a_secret: JobSecret,
        c_ctx: &'static str,
        a_ctx: &'static str,
    ) -> (Result<(), AuthError>, Result<(), AuthError>) {
        let (mut c, mut a) = pair();
        let deadline = Instant::now() + Duration::from_secs(5);
        let acc = std::thread::spawn(move || accept(&mut a, &a_secret, a_ctx, deadline));
        let con = connect(&mut c, &c_secret, c_ctx, deadline);
        drop(c);
        (con, acc.join().expect("thread"))
    }

    #[test]
    fn both_sides_prove_the_same_secret() {
        let (c, a) = shake(secret(7), secret(7), "bootstrap", "bootstrap");
        assert!(c.is_ok() && a.is_ok(), "{c:?} {a:?}");
    }

    #[test]
    fn a_different_secret_or_context_fails_on_both_sides() {
        let (c, a) = shake(secret(1), secret(2), "bootstrap", "bootstrap");
        assert!(matches!(c, Err(AuthError::BadProof)), "{c:?}");
        // The connector hangs up without a proof: the acceptor never admits it.
        assert!(a.is_err(), "{a:?}");
        let (c, a) = shake(secret(1), secret(1), "bootstrap", "tcp mesh");
        assert!(matches!(c, Err(AuthError::BadProof)), "{c:?}");
        assert!(a.is_err(), "{a:?}");
    }

    #[test]
    fn a_stranger_gets_nothing_past_the_handshake() {
        let (mut c, mut a) = pair();
        let deadline = Instant::now() + Duration::from_secs(5);
        let acc = std::thread::spawn(move || accept(&mut a, &secret(3), "bootstrap", deadline));
        c.write_all(b"GET / HTTP/1.0\r\n\r\n..................")
            .expect("write");
        let e = acc.join().expect("thread").expect_err("not a peer");
        assert_eq!(
            e.to_string(),
            "the other side does not speak the coll handshake"
        );
        // A stranger that copies the opening but cannot prove the secret.
        let (mut c, mut a) = pair();
        let acc = std::thread::spawn(move || accept(&mut a, &secret(3), "bootstrap", deadline));
        c.write_all(&opening(&[9; NONCE])).expect("write");
        let mut answer = [0u8; 8 + NONCE + PROOF];
        c.read_exact(&mut answer).expect("answer");
        c.write_all(&[0u8; PROOF]).expect("forged proof");
        let e = acc.join().expect("thread").expect_err("forged");
        assert!(matches!(e, AuthError::BadProof), "{e}");
    }

    #[test]
    fn a_slow_drip_ends_at_the_deadline_not_per_byte() {
        let (mut c, mut a) = pair();
        let start = Instant::now();
        let deadline = start + Duration::from_millis(600);
        let acc = std::thread::spawn(move || accept(&mut a, &secret(3), "bootstrap", deadline));
        // One byte every 150 ms: each would restart a per-read timeout of 600 ms.
        let drip = std::thread::spawn(move || {
            for b in opening(&[1; NONCE]) {
                if c.write_all(&[b]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(150));
            }
        });
        let e = acc.join().expect("thread").expect_err("too slow");
        assert!(matches!(e, AuthError::Timeout(_)), "{e}");
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(550) && took < Duration::from_millis(1500),
            "{took:?}"
        );
        drip.join().expect("drip");
    }

    #[test]
    fn secrets_parse_from_hex_and_never_show() {
        let hex = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF";
        let s = JobSecret::from_hex(&format!(" {hex}\n")).expect("valid");
        assert_eq!(s.to_hex(), hex.to_lowercase());
        assert_eq!(format!("{s:?}"), "JobSecret(<redacted>)");
        assert_eq!(s, JobSecret::from_hex(&hex.to_lowercase()).expect("valid"));
        assert_ne!(s, secret(0));
        let e = JobSecret::from_hex("abc").expect_err("short");
        assert_eq!(
            e.to_string(),
            "a job secret is 64 hexadecimal digits; this one has 3"
        );
        let bad = format!("{}zz", &hex[..62]);
        let e = JobSecret::from_hex(&bad).expect_err("not hex");
        assert_eq!(
            e.to_string(),
            "a job secret is 64 hexadecimal digits; character 63 or 64 is not one"
        );
        let a = JobSecret::generate().expect("random");
        let b = JobSecret::generate().expect("random");
        assert_ne!(a, b);
        assert_eq!(a.to_hex().len(), 64);
    }

    #[cfg(unix)]
    #[test]
    fn a_secret_file_others_can_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("coll-auth-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("secret");
        let s = secret(0xab);
        std::fs::write(&path, format!("{}\n", s.to_hex())).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let e = JobSecret::from_file(&path).expect_err("world-readable");
        assert!(
            e.to_string()
                .ends_with("others may read it (mode 644); `chmod 600` it"),
            "{e}"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        assert_eq!(JobSecret::from_file(&path).expect("private"), s);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
