//! Communicators spread over processes: rank 0's listener, made by `ncclGetUniqueId` and
//! named in the id, the rendezvous where every rank proves the id's secret and learns where
//! every other rank lives, and the mesh that links this communicator's processes for the
//! GPU executor (CUDA IPC handles and remote messages).
//!
//! Two rendezvous, both authenticated by the id's secret (coll's job-secret handshake):
//! first one per rank, at rank 0's listener ([`ranks`]), which yields every rank's host,
//! process and device; then one per process, for the mesh ([`mesh`]), at an address rank 0
//! chose and put in its rank blob.
//!
//! Invariants: a listener stays registered under its id's secret until the communicator's
//! rank 0 has served its rendezvous; every rank of a communicator ends its rendezvous with
//! the same list of [`RankInfo`]; a communicator is served by coll only when its processes
//! own contiguous, equal blocks of ranks, as the executor places them
//! ([`coll_executor::net::mesh::Placement`]).

use crate::error::{Error, Result};
use crate::select::GpuIdentity;
use coll_executor::bootstrap::{self, Launch};
use coll_executor::net::auth::JobSecret;
use coll_executor::net::mesh::{Grant, Mesh, Placement};
use coll_executor::net::tcp::TcpBackend;
use coll_executor::sync::lock;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

/// Rank 0 listeners by their id's secret.
static ROOTS: LazyLock<Mutex<HashMap<[u8; 32], Arc<TcpListener>>>> =
    LazyLock::new(Default::default);

/// Listens for a new id's rendezvous on `host` (any free port); its address.
pub fn listen(secret: [u8; 32], host: IpAddr) -> Result<SocketAddr> {
    let l = TcpListener::bind(SocketAddr::new(host, 0))
        .map_err(|e| Error::system(format!("bootstrap listener on {host}: {e}")))?;
    let addr = l
        .local_addr()
        .map_err(|e| Error::system(format!("bootstrap listener: {e}")))?;
    lock(&ROOTS).insert(secret, Arc::new(l));
    Ok(addr)
}

/// Drops the listener of `secret` if no rendezvous took it (a split's proposed child id
/// that another process's id won over, [`crate::exchange`]).
pub fn unlisten(secret: &[u8; 32]) {
    lock(&ROOTS).remove(secret);
}

/// Where a rank lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankInfo {
    pub host: String,
    pub pid: u32,
    pub device: i32,
    /// Rank 0's only: where the mesh of the communicator's processes meets.
    pub mesh: Option<SocketAddr>,
    /// The rank's GPU as its process sees it, where CUDA could say (naming the machine for
    /// the built-in tuning tables, [`crate::select::machine_of`]).
    pub gpu: Option<GpuIdentity>,
}

impl RankInfo {
    fn encode(&self) -> Vec<u8> {
        let host = &self.host.as_bytes()[..self.host.len().min(255)];
        let mut b = vec![host.len() as u8];
        b.extend_from_slice(host);
        b.extend_from_slice(&self.pid.to_le_bytes());
        b.extend_from_slice(&self.device.to_le_bytes());
        let mesh = self.mesh.map(|a| a.to_string()).unwrap_or_default();
        b.push(mesh.len() as u8);
        b.extend_from_slice(mesh.as_bytes());
        if let Some(g) = &self.gpu {
            let name = &g.name.as_bytes()[..g.name.len().min(255)];
            b.push(name.len() as u8);
            b.extend_from_slice(name);
            b.extend_from_slice(&g.uuid);
            b.push(u8::from(g.nvlinked));
        }
        b
    }

    fn decode(b: &[u8]) -> Option<RankInfo> {
        let (&hl, rest) = b.split_first()?;
        let host = std::str::from_utf8(rest.get(..hl as usize)?)
            .ok()?
            .to_string();
        let rest = rest.get(hl as usize..)?;
        let pid = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?);
        let device = i32::from_le_bytes(rest.get(4..8)?.try_into().ok()?);
        let (&ml, rest) = rest.get(8..)?.split_first()?;
        let mesh = std::str::from_utf8(rest.get(..ml as usize)?).ok()?;
        let mesh = if mesh.is_empty() {
            None
        } else {
            Some(mesh.parse().ok()?)
        };
        let rest = rest.get(ml as usize..)?;
        // The GPU's identity follows where the rank's process knew it; nothing may follow it.
        let gpu = match rest.split_first() {
            None => None,
            Some((&nl, rest)) => {
                let name = std::str::from_utf8(rest.get(..nl as usize)?).ok()?;
                let rest = rest.get(nl as usize..)?;
                let uuid: [u8; 16] = rest.get(..16)?.try_into().ok()?;
                let nvlinked = match rest.get(16..)? {
                    [0] => false,
                    [1] => true,
                    _ => return None,
                };
                Some(GpuIdentity {
                    name: name.to_string(),
                    uuid,
                    nvlinked,
                })
            }
        };
        Some(RankInfo {
            host,
            pid,
            device,
            mesh,
            gpu,
        })
    }
}

/// This host's name (for telling processes of one host from those of others).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// One local rank's part in the rendezvous.
#[derive(Clone, Debug)]
pub struct Joining {
    pub rank: u32,
    pub device: i32,
}

/// The rank-level rendezvous for the local ranks `local` of a communicator of `nranks`
/// with `secret`, rank 0 listening at `root`; every rank's [`RankInfo`], in rank order.
pub fn ranks(
    secret: [u8; 32],
    root: SocketAddr,
    nranks: u32,
    local: &[Joining],
    host_ip: IpAddr,
    timeout: Duration,
) -> Result<Vec<RankInfo>> {
    let job = JobSecret::from_bytes(secret);
    let host = hostname();
    let pid = std::process::id();
    let devices: Vec<i32> = local.iter().map(|j| j.device).collect();
    let gpus = crate::select::identities(&devices);
    let handles: Vec<_> = local
        .iter()
        .zip(gpus)
        .map(|(j, gpu)| {
            let (job, host, j) = (job.clone(), host.clone(), j.clone());
            let listener = (j.rank == 0).then(|| lock(&ROOTS).remove(&secret));
            std::thread::spawn(move || -> Result<Vec<Vec<u8>>> {
                let mut info = RankInfo {
                    host,
                    pid,
                    device: j.device,
                    mesh: None,
                    gpu,
                };
                let boot = |e: bootstrap::BootstrapError| {
                    Error::new(crate::abi::NcclResult::RemoteError, e.to_string())
                };
                match listener {
                    Some(Some(l)) => {
                        // The mesh's port: free now, taken again by the mesh's rendezvous.
                        let free = TcpListener::bind(SocketAddr::new(host_ip, 0))
                            .and_then(|s| s.local_addr())
                            .map_err(|e| Error::system(format!("mesh port: {e}")))?;
                        info.mesh = Some(free);
                        bootstrap::serve(&l, nranks, &job, &info.encode(), timeout).map_err(boot)
                    }
                    Some(None) => Err(Error::usage(
                        "rank 0 of a communicator spread over processes must be initialised in \
                         the process whose ncclGetUniqueId made its id",
                    )),
                    None => bootstrap::join(root, j.rank, nranks, &job, &info.encode(), timeout)
                        .map_err(boot),
                }
            })
        })
        .collect();
    let mut all = None;
    for h in handles {
        let blobs = h
            .join()
            .map_err(|_| Error::internal("a bootstrap thread panicked"))??;
        all.get_or_insert(blobs);
    }
    let blobs = all.ok_or_else(|| Error::internal("no local rank"))?;
    blobs
        .iter()
        .enumerate()
        .map(|(r, b)| {
            RankInfo::decode(b).ok_or_else(|| {
                Error::new(
                    crate::abi::NcclResult::RemoteError,
                    format!("rank {r} sent a malformed rank blob"),
                )
            })
        })
        .collect()
}

/// Which process owns each rank (processes numbered by their lowest rank), or why the
/// executor cannot place them.
pub fn processes(info: &[RankInfo]) -> std::result::Result<(Vec<u32>, u32), String> {
    let mut keys: Vec<(&str, u32)> = Vec::new();
    let mut owner = Vec::with_capacity(info.len());
    for i in info {
        let key = (i.host.as_str(), i.pid);
        let p = match keys.iter().position(|k| *k == key) {
            Some(p) => p,
            None => {
                keys.push(key);
                keys.len() - 1
            }
        };
        owner.push(p as u32);
    }
    let (n, procs) = (info.len() as u32, keys.len() as u32);
    let placement = Placement::new(n, procs).ok_or("no process")?;
    if owner
        .iter()
        .enumerate()
        .any(|(r, &p)| placement.owner(r as u32) != p)
    {
        return Err(format!(
            "its {n} ranks are spread over {procs} processes in blocks coll does not place \
             (each process must own a contiguous, equal block)"
        ));
    }
    Ok((owner, procs))
}

/// The mesh of this communicator's processes: process `me` of `procs`.
#[allow(clippy::too_many_arguments)]
pub fn mesh(
    secret: [u8; 32],
    meet: SocketAddr,
    me: u32,
    procs: u32,
    nranks: u32,
    host_ip: IpAddr,
    timeout: Duration,
) -> Result<Arc<Mesh>> {
    let job = JobSecret::from_bytes(secret);
    let launch = Launch {
        rank: me,
        size: procs,
        rendezvous: meet.to_string(),
        launcher: "an NCCL communicator",
        port_file: None,
        secret: job.clone(),
    };
    let mut backend = TcpBackend::new(host_ip, job);
    Mesh::establish(&launch, &mut backend, nranks, Grant::LOOSE, timeout)
        .map(Arc::new)
        .map_err(|e| {
            Error::new(
                crate::abi::NcclResult::RemoteError,
                format!("process {me}: {e}"),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(host: &str, pid: u32) -> RankInfo {
        RankInfo {
            host: host.into(),
            pid,
            device: 0,
            mesh: None,
            gpu: None,
        }
    }

    #[test]
    fn rank_blobs_round_trip() {
        let i = RankInfo {
            host: "node7".into(),
            pid: 4242,
            device: 3,
            mesh: Some("10.0.0.7:41000".parse().expect("address")),
            gpu: Some(GpuIdentity {
                name: "NVIDIA H200".into(),
                uuid: [9; 16],
                nvlinked: true,
            }),
        };
        let blob = i.encode();
        assert_eq!(RankInfo::decode(&blob), Some(i.clone()));
        let plain = info("n", 1);
        assert_eq!(RankInfo::decode(&plain.encode()), Some(plain));
        assert_eq!(RankInfo::decode(&[5, b'a']), None);
        // A cut identity, or bytes after it, are refused.
        assert_eq!(RankInfo::decode(&blob[..blob.len() - 1]), None);
        let mut long = blob.clone();
        long.push(0);
        assert_eq!(RankInfo::decode(&long), None);
        let mut flag = blob;
        *flag.last_mut().expect("a flag") = 2;
        assert_eq!(RankInfo::decode(&flag), None);
    }

    #[test]
    fn ranks_meet_at_the_listener_of_their_id_and_prove_its_secret() {
        let secret = [7u8; 32];
        let host: IpAddr = [127, 0, 0, 1].into();
        let root = listen(secret, host).expect("listener");
        let local = [
            Joining { rank: 0, device: 0 },
            Joining { rank: 1, device: 1 },
        ];
        let infos =
            ranks(secret, root, 2, &local, host, Duration::from_secs(10)).expect("rendezvous");
        assert_eq!(infos.len(), 2);
        assert_eq!((infos[0].device, infos[1].device), (0, 1));
        assert_eq!(infos[0].pid, std::process::id());
        assert!(infos[0].mesh.is_some() && infos[1].mesh.is_none());
        // A rank with another secret is refused at once by a serving rank 0.
        let other = listen([9u8; 32], host).expect("listener");
        let rank0 = std::thread::spawn(move || {
            let zero = [Joining { rank: 0, device: 0 }];
            ranks([9u8; 32], other, 2, &zero, host, Duration::from_secs(3))
        });
        let joiner = [Joining { rank: 1, device: 0 }];
        let e = ranks([8u8; 32], other, 2, &joiner, host, Duration::from_secs(3))
            .err()
            .map(|e| e.message);
        assert!(
            e.as_deref().is_some_and(|e| e.contains("job secret")),
            "{e:?}"
        );
        let missing = rank0.join().expect("rank 0").err().map(|e| e.message);
        assert!(
            missing
                .as_deref()
                .is_some_and(|e| e.contains("did not join")),
            "{missing:?}"
        );
        // Rank 0's listener went with its rendezvous.
        let e = ranks(secret, root, 2, &local[..1], host, Duration::from_secs(1))
            .err()
            .map(|e| e.message);
        assert!(
            e.as_deref()
                .is_some_and(|e| e.contains("must be initialised in the process")),
            "{e:?}"
        );
    }

    #[test]
    fn processes_must_own_contiguous_equal_blocks() {
        let torchrun = [info("a", 1), info("a", 2), info("b", 3), info("b", 4)];
        assert_eq!(processes(&torchrun), Ok((vec![0, 1, 2, 3], 4)));
        let two_each = [info("a", 1), info("a", 1), info("b", 2), info("b", 2)];
        assert_eq!(processes(&two_each), Ok((vec![0, 0, 1, 1], 2)));
        let interleaved = [info("a", 1), info("b", 2), info("a", 1), info("b", 2)];
        assert!(processes(&interleaved).is_err());
    }
}
