//! Bootstrap of a multi-process run: which rank this process is, how many there are, and a
//! TCP rendezvous at which every rank hands rank 0 a blob (addresses, IPC handles) and gets
//! back everyone's, in rank order.
//!
//! Invariants: every rank of a run uses the same `size` and rendezvous address; rank 0
//! answers only once all `size - 1` peers have joined, each exactly once, so every rank ends
//! with the same `size` blobs. Every wait is bounded by one deadline: a rank that never comes
//! is named in the error, nothing blocks past the timeout.
//!
//! Wire format (little-endian u32s): a peer sends `MAGIC, VERSION, rank, size, len` and `len`
//! bytes; rank 0 answers with `len, bytes` for every rank from 0 to `size - 1`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

const MAGIC: u32 = u32::from_le_bytes(*b"COLB");
const VERSION: u32 = 1;
/// A blob larger than this is refused (a stray connection, not a peer).
const MAX_BLOB: u32 = 64 << 20;
/// How long rank 0 waits for one connection's hello before dropping it.
const HELLO_WAIT: Duration = Duration::from_secs(10);
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
        "rank 0: {} did not join within {timeout:?} (size {size})",
        rank_list(missing)
    )]
    Missing {
        missing: Vec<u32>,
        size: u32,
        timeout: Duration,
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
pub const LAUNCH_VARS: [&str; 13] = [
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
    /// the other ranks read it; `coll run --procs` does this).
    pub port_file: Option<std::path::PathBuf>,
}

/// Reads the launcher's variables: torchrun (`RANK`, `WORLD_SIZE`), Open MPI
/// (`OMPI_COMM_WORLD_RANK/SIZE`), PMI (`PMI_RANK/SIZE`: MPICH, Intel MPI), Slurm
/// (`SLURM_PROCID`, `SLURM_NTASKS`), first found wins. The rendezvous is
/// `COLL_RENDEZVOUS` (`host:port`), else `MASTER_ADDR` and `MASTER_PORT` (port 29500 when
/// unset). `Ok(None)`: no launcher, a single-process run.
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
    Ok(Some(Launch {
        rank,
        size,
        rendezvous,
        launcher,
        port_file: get("COLL_RENDEZVOUS_PORT_FILE").map(Into::into),
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
            // Written aside and renamed, so a reader never sees half a number.
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, port.to_string())
                .and_then(|()| std::fs::rename(&tmp, path))
                .map_err(|e| BootstrapError::Env(format!("{}: {e}", path.display())))?;
        }
        serve(&listener, launch.size, blob, timeout)
    } else {
        join(addr, launch.rank, launch.size, blob, timeout)
    }
}

fn put(buf: &mut Vec<u8>, v: u32) {
    buf.extend_from_slice(&v.to_le_bytes());
}

fn get_u32(s: &mut TcpStream) -> std::io::Result<u32> {
    let mut b = [0u8; 4];
    s.read_exact(&mut b)?;
    Ok(u32::from_le_bytes(b))
}

fn get_blob(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let len = get_u32(s)?;
    if len > MAX_BLOB {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("blob of {len} bytes"),
        ));
    }
    let mut v = vec![0u8; len as usize];
    s.read_exact(&mut v)?;
    Ok(v)
}

/// Time left before `deadline`, at least 1 ms (a zero socket timeout means "none").
pub(crate) fn left(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

/// The next connection on non-blocking `listener`, made blocking with a read timeout that
/// ends by `deadline` (and within [`HELLO_WAIT`]: a peer speaks right after connecting, so a
/// silent connection must not hold the door); `None` once the deadline has passed.
pub(crate) fn accept_until(
    listener: &TcpListener,
    deadline: Instant,
) -> std::io::Result<Option<TcpStream>> {
    loop {
        if Instant::now() >= deadline {
            return Ok(None);
        }
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false)?;
                s.set_read_timeout(Some(left(deadline).min(HELLO_WAIT)))?;
                return Ok(Some(s));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Rank 0's side on an already bound listener: waits for ranks 1..size, then sends every
/// rank all blobs.
pub fn serve(
    listener: &TcpListener,
    size: u32,
    blob: &[u8],
    timeout: Duration,
) -> Result<Vec<Vec<u8>>, BootstrapError> {
    let deadline = Instant::now() + timeout;
    let proto = |what: String| BootstrapError::Protocol { rank: 0, what };
    listener
        .set_nonblocking(true)
        .map_err(|e| proto(format!("listener: {e}")))?;
    let mut blobs: Vec<Option<Vec<u8>>> = vec![None; size as usize];
    let mut peers: Vec<(u32, TcpStream)> = Vec::new();
    blobs[0] = Some(blob.to_vec());
    while peers.len() + 1 < size as usize {
        let accepted =
            accept_until(listener, deadline).map_err(|e| proto(format!("accept: {e}")))?;
        let Some(mut s) = accepted else {
            let missing = (0..size).filter(|&r| blobs[r as usize].is_none()).collect();
            return Err(BootstrapError::Missing {
                missing,
                size,
                timeout,
            });
        };
        // A connection that is not a peer (or a slow one) is dropped, not fatal: the
        // deadline still bounds the wait for the real ones.
        let hello = (|| -> std::io::Result<(u32, u32, u32, Vec<u8>)> {
            if get_u32(&mut s)? != MAGIC {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "not a coll peer",
                ));
            }
            let (v, r, n) = (get_u32(&mut s)?, get_u32(&mut s)?, get_u32(&mut s)?);
            Ok((v, r, n, get_blob(&mut s)?))
        })();
        let Ok((version, rank, their_size, data)) = hello else {
            continue;
        };
        if version != VERSION {
            return Err(proto(format!(
                "rank {rank} speaks bootstrap version {version}, this is {VERSION}"
            )));
        }
        if their_size != size {
            return Err(proto(format!(
                "rank {rank} was started with {their_size} ranks, rank 0 with {size}"
            )));
        }
        if rank == 0 || rank >= size {
            return Err(proto(format!("a peer says it is rank {rank} of {size}")));
        }
        if blobs[rank as usize].is_some() {
            return Err(proto(format!("rank {rank} joined twice")));
        }
        blobs[rank as usize] = Some(data);
        peers.push((rank, s));
    }
    let all: Vec<Vec<u8>> = blobs.into_iter().map(Option::unwrap_or_default).collect();
    let mut reply = Vec::new();
    for b in &all {
        put(&mut reply, b.len() as u32);
        reply.extend_from_slice(b);
    }
    for (rank, s) in &mut peers {
        s.set_write_timeout(Some(left(deadline)))
            .and_then(|()| s.write_all(&reply))
            .map_err(|e| proto(format!("answering rank {rank}: {e}")))?;
    }
    Ok(all)
}

/// A peer's side: connects to rank 0 (retrying until the deadline, as rank 0 may start
/// later), sends its blob and reads everyone's.
pub fn join(
    addr: SocketAddr,
    rank: u32,
    size: u32,
    blob: &[u8],
    timeout: Duration,
) -> Result<Vec<Vec<u8>>, BootstrapError> {
    let deadline = Instant::now() + timeout;
    let mut s = loop {
        match TcpStream::connect_timeout(&addr, left(deadline)) {
            Ok(s) => break s,
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
    let proto = |what: String| BootstrapError::Protocol { rank, what };
    let mut hello = Vec::with_capacity(20 + blob.len());
    for v in [MAGIC, VERSION, rank, size, blob.len() as u32] {
        put(&mut hello, v);
    }
    hello.extend_from_slice(blob);
    s.set_write_timeout(Some(left(deadline)))
        .and_then(|()| s.write_all(&hello))
        .map_err(|e| proto(format!("sending to rank 0: {e}")))?;
    s.set_read_timeout(Some(left(deadline)))
        .map_err(|e| proto(format!("socket: {e}")))?;
    (0..size)
        .map(|_| get_blob(&mut s))
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|e| {
            let what = if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) {
                format!("rank 0 did not answer within {timeout:?} (are all {size} ranks started?)")
            } else {
                format!("rank 0 closed the rendezvous early ({e}): it probably failed")
            };
            proto(what)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

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
        ]))
        .expect("ok")
        .expect("slurm");
        assert_eq!(
            (l.launcher, l.rendezvous.as_str()),
            ("Slurm", "[::1]:29500")
        );
        assert_eq!(launch_from_env(env(&[])).expect("ok"), None);
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
                std::thread::spawn(move || join(addr, r, size, format!("rank{r}").as_bytes(), t))
            })
            .collect();
        let root = serve(&listener, size, b"rank0", t).expect("root");
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
        let peer = std::thread::spawn(move || join(addr, 1, 3, b"one", t));
        let start = Instant::now();
        let e = serve(&listener, 3, b"zero", t).expect_err("rank 2 never comes");
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
        let e = join(addr, 2, 4, b"", Duration::from_millis(300)).expect_err("no rank 0");
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
    fn mismatched_sizes_and_duplicates_are_refused() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let t = Duration::from_secs(5);
        let _peer = std::thread::spawn(move || join(addr, 1, 4, b"", t));
        let e = serve(&listener, 3, b"", t).expect_err("size mismatch");
        assert_eq!(
            e.to_string(),
            "rank 0: rank 1 was started with 4 ranks, rank 0 with 3"
        );

        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let _twins: Vec<_> = (0..2)
            .map(|_| std::thread::spawn(move || join(addr, 1, 3, b"", t)))
            .collect();
        let e = serve(&listener, 3, b"", t).expect_err("duplicate");
        assert_eq!(e.to_string(), "rank 0: rank 1 joined twice");
    }

    #[test]
    fn a_stray_connection_does_not_count_as_a_rank() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let t = Duration::from_secs(5);
        let stray = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).expect("connect");
            let _ = s.write_all(b"GET / HTTP/1.0\r\n\r\n");
        });
        stray.join().expect("stray");
        let peer = std::thread::spawn(move || join(addr, 1, 2, b"p", t));
        let all = serve(&listener, 2, b"r", t).expect("root");
        assert_eq!(all, vec![b"r".to_vec(), b"p".to_vec()]);
        assert_eq!(peer.join().expect("thread").expect("peer"), all);
    }
}
