//! Bootstrap of a multi-process run: which rank this process is, how many there are, and a
//! TCP rendezvous at which every rank hands rank 0 a blob (addresses, IPC handles) and gets
//! back everyone's, in rank order.
//!
//! Invariants: every rank of a run uses the same `size`, rendezvous address and
//! [`JobSecret`]; rank 0 answers only once all `size - 1` peers have joined, each exactly
//! once, so every rank ends with the same `size` blobs. Every connection proves the secret
//! ([`auth`]) before anything else is read from it, and rank 0 admits connections through a
//! [`Door`](crate::net::door): a stranger, a connection that fails or drags out its handshake
//! or hello, or a hello that does not fit (another size, a rank out of range or already
//! joined) is refused and dropped, and rank 0 keeps waiting for the real peers. Every wait is
//! bounded by one deadline: a rank that never comes is named in the error (with what was
//! refused meanwhile), nothing blocks past the timeout.
//!
//! Wire format after the handshake (little-endian u32s): a peer sends `VERSION, rank, size,
//! len` and `len` bytes (at most [`MAX_BLOB`]); rank 0 answers `ACCEPTED` then `len, bytes`
//! for every rank from 0 to `size - 1`, or `REFUSED` then `len, text` (at most
//! [`MAX_REFUSAL`] bytes) saying why, and closes.

use crate::net::auth::{self, AuthError, JobSecret};
use crate::net::door::Door;
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

const VERSION: u32 = 2;
const ACCEPTED: u32 = 0;
const REFUSED: u32 = 1;
/// What the handshake's proofs are bound to (a mesh link's proof does not open this).
pub const CONTEXT: &str = "bootstrap";
/// A blob larger than this is refused.
pub const MAX_BLOB: u32 = 64 << 20;
/// The longest reason rank 0 gives a refused peer.
pub const MAX_REFUSAL: u32 = 1024;
/// Port used when the launcher gives an address but no port (torchrun's default).
pub const DEFAULT_PORT: u16 = 29500;

#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("launcher environment: {0}")]
    Env(String),
    #[error("rendezvous address `{addr}`: {reason}")]
    Address { addr: String, reason: String },
    #[error("rank 0 cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(
        "rank 0: {} did not join within {timeout:?} (size {size}){}",
        rank_list(missing),
        refused.as_ref().map_or(String::new(), |r| format!("; {r}"))
    )]
    Missing {
        missing: Vec<u32>,
        size: u32,
        timeout: Duration,
        /// Connections refused meanwhile, and why (the last few).
        refused: Option<String>,
    },
    #[error("rank {rank}: rank 0 at {addr} was not reachable within {timeout:?}")]
    Unreachable {
        rank: u32,
        addr: SocketAddr,
        timeout: Duration,
    },
    #[error("rank {rank}: {what}")]
    Protocol { rank: u32, what: String },
}

fn rank_list(r: &[u32]) -> String {
    let shown: Vec<String> = r.iter().take(16).map(u32::to_string).collect();
    let more = if r.len() > 16 {
        format!(" and {} more", r.len() - 16)
    } else {
        String::new()
    };
    let noun = if r.len() == 1 { "rank" } else { "ranks" };
    format!("{noun} {}{more}", shown.join(", "))
}

/// Every variable [`launch_from_env`] reads: what a program that starts `coll` processes
/// itself sets or clears.
pub const LAUNCH_VARS: [&str; 15] = [
    "RANK",
    "WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_RANK",
    "PMI_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "COLL_RENDEZVOUS",
    "COLL_RENDEZVOUS_PORT_FILE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "COLL_NET_HOST",
    "COLL_JOB_SECRET",
    "COLL_JOB_SECRET_FILE",
];

/// Who this process is, as the launcher said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    pub rank: u32,
    pub size: u32,
    /// Where rank 0 listens, `host:port`.
    pub rendezvous: String,
    /// The launcher the variables came from (for messages).
    pub launcher: &'static str,
    /// `COLL_RENDEZVOUS_PORT_FILE`: rank 0 writes the port it listens on here once it
    /// listens (so a rendezvous on port 0 lets the system pick a free one and the starter of
    /// the other ranks read it; `coll run --procs` does this, in a directory only its user
    /// can enter).
    pub port_file: Option<std::path::PathBuf>,
    /// The job's secret: every connection between its processes proves it.
    pub secret: JobSecret,
}

/// Reads the launcher's variables: torchrun (`RANK`, `WORLD_SIZE`), Open MPI
/// (`OMPI_COMM_WORLD_RANK/SIZE`), PMI (`PMI_RANK/SIZE`: MPICH, Intel MPI), Slurm
/// (`SLURM_PROCID`, `SLURM_NTASKS`), first found wins. The rendezvous is
/// `COLL_RENDEZVOUS` (`host:port`), else `MASTER_ADDR` and `MASTER_PORT` (port 29500 when
/// unset). The job's secret is `COLL_JOB_SECRET` (64 hex digits), else the contents of the
/// file `COLL_JOB_SECRET_FILE` (which only its owner may read); a launched process without
/// one is refused, as anyone who can reach the rendezvous could otherwise join the job.
/// `Ok(None)`: no launcher, a single-process run.
pub fn launch_from_env(
    get: impl Fn(&str) -> Option<String>,
) -> Result<Option<Launch>, BootstrapError> {
    const LAUNCHERS: [(&str, &str, &str); 4] = [
        ("torchrun", "RANK", "WORLD_SIZE"),
        ("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
        ("PMI", "PMI_RANK", "PMI_SIZE"),
        ("Slurm", "SLURM_PROCID", "SLURM_NTASKS"),
    ];
    let Some((launcher, rank_var, size_var)) =
        LAUNCHERS.into_iter().find(|(_, r, _)| get(r).is_some())
    else {
        return Ok(None);
    };
    let num = |var: &str| -> Result<u32, BootstrapError> {
        let v = get(var).ok_or_else(|| {
            BootstrapError::Env(format!("{rank_var} is set but {var} is not ({launcher})"))
        })?;
        v.trim()
            .parse()
            .map_err(|_| BootstrapError::Env(format!("{var}=`{v}` is not a number ({launcher})")))
    };
    let (rank, size) = (num(rank_var)?, num(size_var)?);
    if size == 0 || rank >= size {
        return Err(BootstrapError::Env(format!(
            "{rank_var}={rank} is not below {size_var}={size} ({launcher})"
        )));
    }
    let rendezvous = match get("COLL_RENDEZVOUS") {
        Some(a) => a,
        None => {
            let host = get("MASTER_ADDR").ok_or_else(|| {
                BootstrapError::Env(format!(
                    "{launcher} started {size} ranks but neither COLL_RENDEZVOUS (host:port) nor \
                     MASTER_ADDR says where rank 0 listens"
                ))
            })?;
            let port = get("MASTER_PORT").unwrap_or_else(|| DEFAULT_PORT.to_string());
            if host.contains(':') && !host.starts_with('[') {
                format!("[{host}]:{port}")
            } else {
                format!("{host}:{port}")
            }
        }
    };
    let secret = match (get("COLL_JOB_SECRET"), get("COLL_JOB_SECRET_FILE")) {
        (Some(hex), _) => JobSecret::from_hex(&hex)
            .map_err(|e| BootstrapError::Env(format!("COLL_JOB_SECRET: {e}")))?,
        (None, Some(path)) => JobSecret::from_file(std::path::Path::new(&path))
            .map_err(|e| BootstrapError::Env(format!("COLL_JOB_SECRET_FILE: {e}")))?,
        (None, None) => {
            return Err(BootstrapError::Env(format!(
                "{launcher} started {size} ranks but no job secret was given: set \
                 COLL_JOB_SECRET to the same 64 hex digits in every process (for example \
                 `openssl rand -hex 32`), or COLL_JOB_SECRET_FILE to a file holding them; \
                 without one anyone who reaches the rendezvous could join the job"
            )));
        }
    };
    Ok(Some(Launch {
        rank,
        size,
        rendezvous,
        launcher,
        port_file: get("COLL_RENDEZVOUS_PORT_FILE").map(Into::into),
        secret,
    }))
}

/// Resolves `host:port` to the first address it names.
pub fn resolve(addr: &str) -> Result<SocketAddr, BootstrapError> {
    let bad = |reason: String| BootstrapError::Address {
        addr: addr.to_string(),
        reason,
    };
    addr.to_socket_addrs()
        .map_err(|e| bad(e.to_string()))?
        .next()
        .ok_or_else(|| bad("names no address".into()))
}

/// Runs the rendezvous for `launch`: rank 0 listens, the others join. Returns every rank's
/// blob in rank order.
pub fn rendezvous(
    launch: &Launch,
    blob: &[u8],
    timeout: Duration,
) -> Result<Vec<Vec<u8>>, BootstrapError> {
    let addr = resolve(&launch.rendezvous)?;
    if launch.rank == 0 {
        let listener =
            TcpListener::bind(addr).map_err(|source| BootstrapError::Listen { addr, source })?;
        if let Some(path) = &launch.port_file {
            let port = listener
                .local_addr()
                .map_err(|source| BootstrapError::Listen { addr, source })?
                .port();
            write_port(path, port)
                .map_err(|e| BootstrapError::Env(format!("{}: {e}", path.display())))?;
        }
        serve(&listener, launch.size, &launch.secret, blob, timeout)
    } else {
        join(
            addr,
            launch.rank,
            launch.size,
            &launch.secret,
            blob,
            timeout,
        )
    }
}

/// Writes `port` to `path`: into a new file only this user can read, renamed into place, so a
/// reader never sees half a number and nobody else's file is written through.
fn write_port(path: &std::path::Path, port: u16) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    o.open(&tmp)?.write_all(port.to_string().as_bytes())?;
    std::fs::rename(&tmp, path)
}

fn put(buf: &mut Vec<u8>, v: u32) {
    buf.extend_from_slice(&v.to_le_bytes());
}

fn get_u32(s: &mut TcpStream, deadline: Instant) -> std::io::Result<u32> {
    let mut b = [0u8; 4];
    auth::read_exact_by(s, &mut b, deadline)?;
    Ok(u32::from_le_bytes(b))
}

/// A `len, bytes` blob of at most `max` bytes, by `deadline`.
fn get_blob(s: &mut TcpStream, max: u32, deadline: Instant) -> std::io::Result<Vec<u8>> {
    let len = get_u32(s, deadline)?;
    if len > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a blob of {len} bytes (at most {max})"),
        ));
    }
    let mut v = vec![0u8; len as usize];
    auth::read_exact_by(s, &mut v, deadline)?;
    Ok(v)
}

/// Tells a peer why it was refused (best effort: it may be gone) and closes its connection.
fn refuse(mut s: TcpStream, why: &str) {
    let text = &why.as_bytes()[..why.len().min(MAX_REFUSAL as usize)];
    let mut m = Vec::new();
    put(&mut m, REFUSED);
    put(&mut m, text.len() as u32);
    m.extend_from_slice(text);
    let _ = auth::write_all_by(&mut s, &m, Instant::now() + Duration::from_secs(1));
}

/// Time left before `deadline`, at least 1 ms (a zero socket timeout means "none").
pub(crate) fn left(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

/// A peer's hello: rank, size, blob.
type Hello = (u32, u32, Vec<u8>);

/// Rank 0's side on an already bound listener: waits for ranks 1..size, each proving
/// `secret`, then sends every rank all blobs.
pub fn serve(
    listener: &TcpListener,
    size: u32,
    secret: &JobSecret,
    blob: &[u8],
    timeout: Duration,
) -> Result<Vec<Vec<u8>>, BootstrapError> {
    let deadline = Instant::now() + timeout;
    let proto = |what: String| BootstrapError::Protocol { rank: 0, what };
    let mut door = Door::new(
        listener,
        secret,
        CONTEXT,
        |s, until| -> Result<Hello, String> {
            let err = |e: std::io::Error| format!("hello: {e}");
            let version = get_u32(s, until).map_err(err)?;
            if version != VERSION {
                let why = format!("it speaks bootstrap version {version}, rank 0 speaks {VERSION}");
                if let Ok(c) = s.try_clone() {
                    refuse(c, &why);
                }
                return Err(why);
            }
            let (rank, their_size) = (
                get_u32(s, until).map_err(err)?,
                get_u32(s, until).map_err(err)?,
            );
            Ok((rank, their_size, get_blob(s, MAX_BLOB, until).map_err(err)?))
        },
    )
    .map_err(|e| proto(format!("listener: {e}")))?;
    let mut blobs: Vec<Option<Vec<u8>>> = vec![None; size as usize];
    let mut peers: Vec<(u32, TcpStream)> = Vec::new();
    blobs[0] = Some(blob.to_vec());
    while peers.len() + 1 < size as usize {
        let admitted = door
            .next(deadline)
            .map_err(|e| proto(format!("accept: {e}")))?;
        let Some(((rank, their_size, data), s, addr)) = admitted else {
            let missing = (0..size).filter(|&r| blobs[r as usize].is_none()).collect();
            return Err(BootstrapError::Missing {
                missing,
                size,
                timeout,
                refused: door.refusals(),
            });
        };
        // Knowing the secret makes it one of ours, not a right one: a hello that does not
        // fit closes its own connection and the wait for the real rank goes on.
        let wrong = if their_size != size {
            Some(format!(
                "it says rank {rank} of {their_size}, but rank 0 was started with {size} ranks"
            ))
        } else if rank == 0 || rank >= size {
            Some(format!("it says it is rank {rank} of {size}"))
        } else if blobs[rank as usize].is_some() {
            Some(format!("rank {rank} has already joined"))
        } else {
            None
        };
        if let Some(why) = wrong {
            refuse(s, &why);
            door.refuse(format!("{addr}: {why}"));
            continue;
        }
        blobs[rank as usize] = Some(data);
        peers.push((rank, s));
    }
    let all: Vec<Vec<u8>> = blobs.into_iter().map(Option::unwrap_or_default).collect();
    let mut reply = Vec::new();
    put(&mut reply, ACCEPTED);
    for b in &all {
        put(&mut reply, b.len() as u32);
        reply.extend_from_slice(b);
    }
    for (rank, s) in &mut peers {
        auth::write_all_by(s, &reply, deadline)
            .map_err(|e| proto(format!("answering rank {rank}: {e}")))?;
    }
    Ok(all)
}

/// A peer's side: connects to rank 0 and proves `secret` (retrying until the deadline, as
/// rank 0 may start later), sends its blob and reads everyone's.
pub fn join(
    addr: SocketAddr,
    rank: u32,
    size: u32,
    secret: &JobSecret,
    blob: &[u8],
    timeout: Duration,
) -> Result<Vec<Vec<u8>>, BootstrapError> {
    let deadline = Instant::now() + timeout;
    let proto = |what: String| BootstrapError::Protocol { rank, what };
    let mut s = loop {
        let tried = TcpStream::connect_timeout(&addr, left(deadline))
            .map_err(AuthError::Io)
            .and_then(|mut s| {
                auth::connect(&mut s, secret, CONTEXT, deadline)?;
                Ok(s)
            });
        match tried {
            Ok(s) => break s,
            // Something answers there that does not know the secret: waiting will not help.
            Err(e @ (AuthError::BadProof | AuthError::NotAPeer | AuthError::Version(_))) => {
                return Err(proto(format!(
                    "the rendezvous {addr}: {e} (is the job secret the same in every process?)"
                )));
            }
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => {
                return Err(BootstrapError::Unreachable {
                    rank,
                    addr,
                    timeout,
                });
            }
        }
    };
    let mut hello = Vec::with_capacity(16 + blob.len());
    for v in [VERSION, rank, size, blob.len() as u32] {
        put(&mut hello, v);
    }
    hello.extend_from_slice(blob);
    auth::write_all_by(&mut s, &hello, deadline)
        .map_err(|e| proto(format!("sending to rank 0: {e}")))?;
    let answer = (|| -> std::io::Result<Result<Vec<Vec<u8>>, String>> {
        match get_u32(&mut s, deadline)? {
            ACCEPTED => Ok(Ok((0..size)
                .map(|_| get_blob(&mut s, MAX_BLOB, deadline))
                .collect::<std::io::Result<Vec<_>>>()?)),
            REFUSED => {
                let why = get_blob(&mut s, MAX_REFUSAL, deadline)?;
                Ok(Err(String::from_utf8_lossy(&why).into_owned()))
            }
            other => Ok(Err(format!("an answer of kind {other}"))),
        }
    })();
    match answer {
        Ok(Ok(blobs)) => Ok(blobs),
        Ok(Err(why)) => Err(proto(format!(
            "rank 0 refused this process: {}",
            crate::net::printable(&why, MAX_REFUSAL as usize)
        ))),
        Err(e) if auth::is_timeout(&e) => Err(proto(format!(
            "rank 0 did not answer within {timeout:?} (are all {size} ranks started?)"
        ))),
        Err(e) => Err(proto(format!(
            "rank 0 closed the rendezvous early ({e}): it probably failed"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::io::Read;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn secret() -> JobSecret {
        JobSecret::from_hex(HEX).expect("hex")
    }

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn launchers_are_recognised() {
        let l = launch_from_env(env(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "8"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "1234"),
            ("COLL_JOB_SECRET", HEX),
        ]))
        .expect("ok")
        .expect("torchrun");
        assert_eq!(
            (l.rank, l.size, l.rendezvous.as_str(), l.launcher),
            (3, 8, "10.0.0.1:1234", "torchrun")
        );
        let l = launch_from_env(env(&[
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("COLL_RENDEZVOUS", "node0:4000"),
            ("COLL_JOB_SECRET", HEX),
        ]))
        .expect("ok")
        .expect("mpi");
        assert_eq!(
            (l.rank, l.size, l.rendezvous.as_str()),
            (1, 2, "node0:4000")
        );
        let l = launch_from_env(env(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "4"),
            ("MASTER_ADDR", "::1"),
            ("COLL_JOB_SECRET", HEX),
        ]))
        .expect("ok")
        .expect("slurm");
        assert_eq!(
            (l.launcher, l.rendezvous.as_str()),
            ("Slurm", "[::1]:29500")
        );
        assert_eq!(l.secret, secret());
        assert_eq!(launch_from_env(env(&[])).expect("ok"), None);
    }

    #[test]
    fn a_launched_process_without_a_secret_is_refused() {
        let e = launch_from_env(env(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "h"),
        ]))
        .expect_err("no secret");
        let text = e.to_string();
        assert!(
            text.starts_with("launcher environment: torchrun started 2 ranks but no job secret")
                && text.contains("COLL_JOB_SECRET")
                && text.contains("COLL_JOB_SECRET_FILE"),
            "{text}"
        );
        let e = launch_from_env(env(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "h"),
            ("COLL_JOB_SECRET", "hunter2"),
        ]))
        .expect_err("not hex");
        // The message does not repeat the value.
        assert_eq!(
            e.to_string(),
            "launcher environment: COLL_JOB_SECRET: a job secret is 64 hexadecimal digits; \
             this one has 7"
        );
    }

    #[test]
    fn bad_launcher_variables_say_which() {
        let e = launch_from_env(env(&[
            ("PMI_RANK", "4"),
            ("PMI_SIZE", "4"),
            ("MASTER_ADDR", "h"),
        ]))
        .expect_err("rank too big");
        assert_eq!(
            e.to_string(),
            "launcher environment: PMI_RANK=4 is not below PMI_SIZE=4 (PMI)"
        );
        let e = launch_from_env(env(&[("RANK", "x"), ("WORLD_SIZE", "2")])).expect_err("nan");
        assert!(e.to_string().contains("RANK=`x` is not a number"), "{e}");
        let e = launch_from_env(env(&[("RANK", "0"), ("WORLD_SIZE", "2")])).expect_err("no addr");
        assert!(e.to_string().contains("MASTER_ADDR"), "{e}");
    }

    #[test]
    fn every_rank_gets_every_blob_in_rank_order() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let size = 5u32;
        let t = Duration::from_secs(10);
        let joins: Vec<_> = (1..size)
            .map(|r| {
                std::thread::spawn(move || {
                    join(addr, r, size, &secret(), format!("rank{r}").as_bytes(), t)
                })
            })
            .collect();
        let root = serve(&listener, size, &secret(), b"rank0", t).expect("root");
        let want: Vec<Vec<u8>> = (0..size).map(|r| format!("rank{r}").into_bytes()).collect();
        assert_eq!(root, want);
        for j in joins {
            assert_eq!(j.join().expect("thread").expect("peer"), want);
        }
    }

    #[test]
    fn a_missing_rank_is_named_after_the_timeout() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let t = Duration::from_millis(1500);
        let peer = std::thread::spawn(move || join(addr, 1, 3, &secret(), b"one", t));
        let start = Instant::now();
        let e = serve(&listener, 3, &secret(), b"zero", t).expect_err("rank 2 never comes");
        assert!(start.elapsed() < Duration::from_secs(10));
        assert_eq!(
            e.to_string(),
            "rank 0: rank 2 did not join within 1.5s (size 3)"
        );
        // The peer that came learns that rank 0 gave up, within its own timeout.
        let e = peer.join().expect("thread").expect_err("no answer");
        assert!(e.to_string().starts_with("rank 1: rank 0 "), "{e}");
    }

    #[test]
    fn an_absent_rank_zero_is_an_error_after_the_timeout() {
        // A port that was just free: nobody listens there.
        let addr = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("port");
        let start = Instant::now();
        let e =
            join(addr, 2, 4, &secret(), b"", Duration::from_millis(300)).expect_err("no rank 0");
        assert!(
            start.elapsed() >= Duration::from_millis(300)
                && start.elapsed() < Duration::from_secs(10)
        );
        assert_eq!(
            e.to_string(),
            format!("rank 2: rank 0 at {addr} was not reachable within 300ms")
        );
    }

    #[test]
    fn mismatched_sizes_and_duplicates_are_refused_without_failing_the_job() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let t = Duration::from_secs(5);
        let wrong = std::thread::spawn(move || join(addr, 1, 4, &secret(), b"", t));
        let root = std::thread::spawn(move || serve(&listener, 3, &secret(), b"0", t));
        // The misfit learns why at once; rank 0 still takes the real ranks.
        let e = wrong.join().expect("thread").expect_err("size mismatch");
        assert_eq!(
            e.to_string(),
            "rank 1: rank 0 refused this process: it says rank 1 of 4, but rank 0 was \
             started with 3 ranks"
        );
        let first = std::thread::spawn(move || join(addr, 1, 3, &secret(), b"1", t));
        std::thread::sleep(Duration::from_millis(300));
        let twin = join(addr, 1, 3, &secret(), b"x", t).expect_err("duplicate");
        assert_eq!(
            twin.to_string(),
            "rank 1: rank 0 refused this process: rank 1 has already joined"
        );
        let two = join(addr, 2, 3, &secret(), b"2", t).expect("rank 2");
        let want = vec![b"0".to_vec(), b"1".to_vec(), b"2".to_vec()];
        assert_eq!(two, want);
        assert_eq!(first.join().expect("thread").expect("rank 1"), want);
        assert_eq!(root.join().expect("thread").expect("root"), want);
    }

    #[test]
    fn refusals_are_named_when_a_rank_never_comes() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let t = Duration::from_millis(1500);
        let stranger = std::thread::spawn(move || {
            let other = JobSecret::from_bytes([1; JobSecret::BYTES]);
            join(addr, 1, 2, &other, b"", t)
        });
        let e = serve(&listener, 2, &secret(), b"", t).expect_err("nobody came");
        let text = e.to_string();
        let head = "rank 0: rank 1 did not join within 1.5s (size 2); 1 connection refused (last: 127.0.0.1:";
        assert!(
            text.starts_with(head)
                && text.ends_with(": the handshake was cut off: unexpected end of file)"),
            "{text}"
        );
        let e = stranger.join().expect("thread").expect_err("wrong secret");
        assert_eq!(
            e.to_string(),
            format!(
                "rank 1: the rendezvous {addr}: the other side does not know this job's secret \
                 (is the job secret the same in every process?)"
            )
        );
    }

    #[test]
    fn a_stray_connection_does_not_count_as_a_rank() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let t = Duration::from_secs(5);
        let stray = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).expect("connect");
            let _ = s.write_all(b"GET / HTTP/1.0\r\nHost: rank0\r\nAccept: */*\r\n\r\n");
            // Nothing comes back to a stranger but the end of the connection.
            let mut got = Vec::new();
            let _ = s.read_to_end(&mut got);
            got
        });
        let peer = std::thread::spawn(move || join(addr, 1, 2, &secret(), b"p", t));
        let all = serve(&listener, 2, &secret(), b"r", t).expect("root");
        assert_eq!(all, vec![b"r".to_vec(), b"p".to_vec()]);
        assert_eq!(peer.join().expect("thread").expect("peer"), all);
        assert_eq!(stray.join().expect("stray"), Vec::<u8>::new());
    }
}
