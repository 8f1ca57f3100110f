//! Multi-process runs: `coll run` started by a launcher (mpirun, srun, torchrun: see
//! [`coll_executor::bootstrap`]) runs its share of the ranks and reaches the others through
//! remote channels ([`coll_executor::net`]); `coll run --procs N` starts N such processes on
//! this machine itself.
//!
//! Ranks are placed in contiguous blocks ([`Placement`]). Every process compiles the same
//! plan, fills every rank's input (the reference needs them) and checks its own ranks'
//! outputs; process 0 gathers the reports and prints the one summary line.
//!
//! Every connection of a run proves the job's secret ([`JobSecret`]): under a launcher it
//! comes from `COLL_JOB_SECRET` or `COLL_JOB_SECRET_FILE` (see
//! [`bootstrap::launch_from_env`]); `--procs` makes a fresh one and hands it to its
//! children in their environment (never their command line, which other users can read).
//! Each process grants its peers only what its plan sends it ([`Grant`]).

use crate::Env;
use coll_executor::ExecError;
use coll_executor::bootstrap::{self, BootstrapError, Launch};
use coll_executor::cpu::{CpuExecutor, RunOptions};
use coll_executor::cuda::SetupReport;
use coll_executor::cuda::run::GpuRun;
use coll_executor::dtype::DType;
use coll_executor::harness::{self, Report};
use coll_executor::net::auth::{AuthError, JobSecret};
use coll_executor::net::mesh::{Grant, Mesh, MeshError, Placement};
use coll_executor::net::tcp::TcpBackend;
use coll_executor::net::{Backend, NetError};
use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Why this process's share of a multi-process run, or the run `--procs` started, failed.
/// Each message names the process (and its ranks or GPU) where one is known.
#[derive(Debug, thiserror::Error)]
pub enum ProcsError {
    #[error("COLL_NET_HOST=`{value}` is not an IP address")]
    NetHost { value: String },
    #[error("no route toward the rendezvous {peer}: {source}")]
    NoRoute {
        peer: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Rendezvous(#[from] BootstrapError),
    #[error("unknown --net `{0}`; one of tcp, rdma")]
    UnknownNet(String),
    #[error("this coll was built without RDMA support; rebuild with `--features rdma`")]
    NoRdma,
    /// The RDMA backend's settings.
    #[error(transparent)]
    Net(#[from] NetError),
    #[error("{procs} processes for a {ranks}-rank plan: each process needs at least one rank")]
    Placement { procs: u32, ranks: u32 },
    #[error("process {process}: {source}")]
    Connect { process: u32, source: MeshError },
    /// A call failed; `ranks` says which ranks the process runs, `gpu` on which GPU.
    #[error("process {process} ({ranks}{}): {source}", gpu.map_or(String::new(), |g| format!(", GPU {g}")))]
    Run {
        process: u32,
        ranks: String,
        gpu: Option<usize>,
        source: ExecError,
    },
    #[error("process {process} is number {local} on its machine but --gpus names {gpus} GPUs")]
    GpuIndex {
        process: u32,
        local: usize,
        gpus: usize,
    },
    #[error("process {process}: the mesh is still in use after the run")]
    MeshInUse { process: u32 },
    /// `why` is the mesh's account of the process that failed, with its ranks.
    #[error("process {process}: gathering results: {why}")]
    Gather { process: u32, why: String },
    #[error("process {process}: a malformed report came back")]
    Malformed { process: u32 },
    #[error("cannot find this executable: {0}")]
    Exe(std::io::Error),
    #[error("cannot start process {process}: {source}")]
    Start {
        process: u32,
        source: std::io::Error,
    },
    #[error("{}: {source}", dir.display())]
    TempDir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot make a job secret: {0}")]
    Secret(AuthError),
    /// What went wrong with the started processes, each.
    #[error("{}", join(.0))]
    Children(Vec<ChildProblem>),
}

/// What went wrong with one process `--procs` started.
#[derive(Debug, thiserror::Error)]
pub enum ChildProblem {
    #[error("process {process} was killed ({status})")]
    Killed {
        process: u32,
        status: std::process::ExitStatus,
    },
    #[error("process {process}: {source}")]
    Wait {
        process: u32,
        source: std::io::Error,
    },
    #[error("process {process} was still running after {limit:?} and was stopped")]
    Overran { process: u32, limit: Duration },
}

fn join(problems: &[ChildProblem]) -> String {
    let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
    text.join("; ")
}

/// The remote-channel backends `--net` names.
pub const NETS: [&str; 2] = ["tcp", "rdma"];

/// The remote channels of a run: the `--net` backend, and the environment its settings come
/// from (`COLL_NET_HOST`; the RDMA backend's `COLL_IB_*`).
#[derive(Clone, Copy, Debug)]
pub struct Net<'a> {
    /// One of [`NETS`].
    pub name: &'a str,
    pub env: &'a Env,
}

/// The process's index on its machine, as the launcher says (`LOCAL_RANK`), if it does.
pub fn local_rank(env: &Env) -> Option<usize> {
    env.get("LOCAL_RANK").and_then(|v| v.trim().parse().ok())
}

/// The address this machine uses toward `peer`, which is where other processes can reach
/// it (a UDP "connect" picks the route without sending anything). `COLL_NET_HOST` in `env`
/// overrides.
pub fn host_toward(peer: SocketAddr, env: &Env) -> Result<IpAddr, ProcsError> {
    if let Some(h) = env.get("COLL_NET_HOST") {
        return h.parse().map_err(|_| ProcsError::NetHost {
            value: h.to_string(),
        });
    }
    coll_executor::net::local_ip_toward(peer).map_err(|source| ProcsError::NoRoute { peer, source })
}

/// The backend `net` names, for this process of `launch`.
pub fn backend(net: Net<'_>, launch: &Launch) -> Result<Box<dyn Backend>, ProcsError> {
    match net.name {
        "tcp" => {
            let rendezvous = bootstrap::resolve(&launch.rendezvous)?;
            Ok(Box::new(TcpBackend::new(
                host_toward(rendezvous, net.env)?,
                launch.secret.clone(),
            )))
        }
        "rdma" => rdma_backend(net.env),
        other => Err(ProcsError::UnknownNet(other.to_string())),
    }
}

#[cfg(feature = "rdma")]
fn rdma_backend(env: &Env) -> Result<Box<dyn Backend>, ProcsError> {
    use coll_executor::net::rdma::{RdmaBackend, RdmaConfig};
    let config = RdmaConfig::from_lookup(|k| env.lookup(k))?;
    Ok(Box::new(RdmaBackend::new(config)))
}

#[cfg(not(feature = "rdma"))]
fn rdma_backend(_env: &Env) -> Result<Box<dyn Backend>, ProcsError> {
    Err(ProcsError::NoRdma)
}

/// What one process of a multi-process run ends with.
#[derive(Debug)]
pub struct Share {
    /// Every process's report combined (process 0 only): wrong elements of every call, the
    /// time of the steady-state calls (of the first when there is only one).
    pub total: Option<Report>,
    /// This process's ranks only, every call.
    pub local: Report,
    /// Bootstrap and connection time (made once, before the first call).
    pub setup: Duration,
    /// The first call's time, slowest process (process 0 only).
    pub first: Option<Duration>,
    /// Calls after the first.
    pub iters: u32,
    pub placement: Placement,
    pub backend: &'static str,
}

/// Runs this process's share of a checked run, `1 + iters` calls: connects (eagerly, once),
/// runs, and gathers the reports at process 0; `slots` is what `exec` was made with (peers
/// are granted that many messages per connection). Errors name the process and its ranks.
#[allow(clippy::too_many_arguments)]
pub fn run_share(
    exec: &CpuExecutor,
    slots: u32,
    launch: &Launch,
    net: Net<'_>,
    dtype: DType,
    o: &RunOptions,
    inplace: bool,
    iters: u32,
) -> Result<Share, ProcsError> {
    let n = exec.plan().ranks;
    let placement = placement(n, launch)?;
    let me = launch.rank;
    // A message is a range of one buffer: none is longer than the longest buffer.
    let plan = exec.plan();
    let longest = (0..plan.buffers.len())
        .map(|b| plan.buffer_elements(b, o.count))
        .max()
        .unwrap_or(0);
    let grant = Grant::for_plan(
        plan,
        u64::from(slots.max(1)),
        longest.saturating_mul(dtype.size() as u64),
    );
    let mut mesh = connect(launch, net, n, grant, o.timeout)?;
    let (first, later) = harness::run_checked_part_again(exec, &mut mesh, dtype, o, inplace, iters)
        .map_err(|source| ProcsError::Run {
            process: me,
            ranks: placement.describe(me),
            gpu: None,
            source,
        })?;
    let steady = Report {
        elapsed: later.unwrap_or(first.elapsed),
        wrong: first.wrong.map(|_| 0),
        checked: 0,
    };
    gather(mesh, placement, &first, &steady, iters, o.timeout)
}

/// `coll run --backend cuda` for this process's share: one GPU per process (`gpus[i]` for
/// the process that is i-th on its machine, `local` (`LOCAL_RANK`, [`local_rank`]) or the
/// process index, else GPU `local` modulo the GPUs present), connections between processes
/// through CUDA IPC (peer memory), or the host proxy over `net` where the topology puts a
/// network between them.
pub fn run_share_cuda(
    plan: coll_compiler::plan::ValidPlan,
    launch: &Launch,
    net: Net<'_>,
    local: Option<usize>,
    dtype: DType,
    o: &GpuRun,
) -> Result<(Share, SetupReport), ProcsError> {
    let n = plan.ranks;
    let placement = placement(n, launch)?;
    let me = launch.rank;
    let local = local.unwrap_or(launch.rank as usize);
    let ordinal = match o.gpus.get(local) {
        Some(&g) => g,
        None if !o.gpus.is_empty() => {
            return Err(ProcsError::GpuIndex {
                process: me,
                local,
                gpus: o.gpus.len(),
            });
        }
        None => local % coll_executor::cuda::device::device_count().max(1),
    };
    // The GPU proxy moves one slot's bytes per message, `SLOTS` per connection, on a
    // channel of its own per sub-CTA.
    let grant = coll_executor::cuda::proxy::grant(&plan);
    let mesh = std::sync::Arc::new(connect(launch, net, n, grant, o.settings.timeout)?);
    let run = GpuRun {
        gpus: vec![ordinal],
        ..o.clone()
    };
    let r = coll_executor::cuda::run::run_checked_group(
        plan,
        dtype,
        &run,
        std::sync::Arc::clone(&mesh),
    )
    .map_err(|source| ProcsError::Run {
        process: me,
        ranks: placement.describe(me),
        gpu: Some(ordinal),
        source,
    })?;
    let first = Report {
        elapsed: r.first_call,
        wrong: r.report.wrong.map(|_| 0),
        checked: 0,
    };
    let mesh =
        std::sync::Arc::try_unwrap(mesh).map_err(|_| ProcsError::MeshInUse { process: me })?;
    let share = gather(
        mesh,
        placement,
        &first,
        &r.report,
        o.iters,
        o.settings.timeout,
    )?;
    Ok((share, r.setup))
}

fn placement(n: u32, launch: &Launch) -> Result<Placement, ProcsError> {
    Placement::new(n, launch.size).ok_or(ProcsError::Placement {
        procs: launch.size,
        ranks: n,
    })
}

fn connect(
    launch: &Launch,
    net: Net<'_>,
    ranks: u32,
    grant: Grant,
    timeout: Duration,
) -> Result<Mesh, ProcsError> {
    let mut backend = backend(net, launch)?;
    Mesh::establish(launch, backend.as_mut(), ranks, grant, timeout).map_err(|source| {
        ProcsError::Connect {
            process: launch.rank,
            source,
        }
    })
}

/// Gathers every process's first-call and steady-state reports at process 0 and closes the
/// mesh.
fn gather(
    mesh: Mesh,
    placement: Placement,
    first_local: &Report,
    steady_local: &Report,
    iters: u32,
    timeout: Duration,
) -> Result<Share, ProcsError> {
    let me = mesh.me();
    let mut payload = first_local.to_bytes();
    payload.extend(steady_local.to_bytes());
    let parts = mesh
        .barrier(&payload, timeout)
        .map_err(|f| ProcsError::Gather {
            process: me,
            why: f.describe(Some(&placement)),
        })?;
    let (mut firsts, mut steadies) = (Vec::new(), Vec::new());
    for b in &parts {
        let (a, z) = b.split_at(b.len().min(24));
        match (Report::from_bytes(a), Report::from_bytes(z)) {
            (Some(a), Some(z)) => {
                firsts.push(a);
                steadies.push(z);
            }
            _ => return Err(ProcsError::Malformed { process: me }),
        }
    }
    let (first, total) = if me == 0 {
        let first = Report::combine(&firsts);
        let mut total = Report::combine(&steadies);
        // #wrong counts every call: the first included.
        total.wrong = first.wrong.zip(total.wrong).map(|(a, b)| a + b);
        total.checked += first.checked;
        (Some(first.elapsed), Some(total))
    } else {
        (None, None)
    };
    let setup = mesh.setup;
    let backend = mesh.backend();
    mesh.close();
    Ok(Share {
        total,
        local: Report {
            wrong: first_local
                .wrong
                .zip(steady_local.wrong)
                .map(|(a, b)| a + b),
            ..first_local.clone()
        },
        setup,
        first,
        iters,
        placement,
        backend,
    })
}

/// `argv` without `--procs N` / `--procs=N`: what each started process runs.
pub fn child_args(argv: &[OsString]) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut skip = false;
    for a in argv.iter().skip(1) {
        if skip {
            skip = false;
            continue;
        }
        match a.to_str() {
            Some("--procs") => skip = true,
            Some(s) if s.starts_with("--procs=") => {}
            _ => out.push(a.clone()),
        }
    }
    out
}

/// A new directory only this user can enter (mode 0700) under an unpredictable name in the
/// system's temporary directory, removed when dropped: where process 0 of `--procs` leaves
/// its port, out of reach of other users (who could otherwise read it, or create the file
/// first and send the other processes to a port of theirs).
pub fn private_dir() -> Result<tempfile::TempDir, ProcsError> {
    let mut b = tempfile::Builder::new();
    b.prefix("coll-procs-");
    #[cfg(unix)]
    b.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700));
    b.tempdir().map_err(|source| ProcsError::TempDir {
        dir: std::env::temp_dir(),
        source,
    })
}

/// The port process 0 wrote into `file` in `dir`, once it is there: a regular file owned by
/// whoever owns `dir` (this user), else nothing is believed.
fn read_port(dir: &Path, file: &Path) -> Option<u16> {
    let meta = std::fs::symlink_metadata(file).ok()?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let owner = std::fs::metadata(dir).ok()?.uid();
        if meta.uid() != owner {
            return None;
        }
    }
    if !meta.is_file() || meta.len() > 16 {
        return None;
    }
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

/// Starts `procs` processes of this executable with `args`, as a launcher would (`RANK`,
/// `WORLD_SIZE`, `COLL_RENDEZVOUS` on loopback and a fresh `COLL_JOB_SECRET`; the rest of
/// the environment, such as `NCCL_NVLS_ENABLE`, is kept), and waits for them. Returns the
/// exit code: the worst of theirs, 1 when one was killed. Gives up after `limit`, killing
/// what is left, so nothing outlives it.
pub fn spawn_local(procs: u32, args: &[OsString], limit: Duration) -> Result<u8, ProcsError> {
    let exe = std::env::current_exe().map_err(ProcsError::Exe)?;
    let secret = JobSecret::generate().map_err(ProcsError::Secret)?;
    let start = |rank: u32, rendezvous: &str, port_file: Option<&Path>| {
        let mut cmd = Command::new(&exe);
        cmd.args(args);
        // Other launchers' variables would not describe this run.
        for var in bootstrap::LAUNCH_VARS {
            if !matches!(
                var,
                "RANK" | "WORLD_SIZE" | "COLL_RENDEZVOUS" | "COLL_NET_HOST"
            ) {
                cmd.env_remove(var);
            }
        }
        // Through the environment, which only this user can read (argv is public).
        cmd.env("RANK", rank.to_string())
            .env("WORLD_SIZE", procs.to_string())
            .env("COLL_RENDEZVOUS", rendezvous)
            .env("COLL_JOB_SECRET", secret.to_hex());
        if let Some(f) = port_file {
            cmd.env("COLL_RENDEZVOUS_PORT_FILE", f);
        }
        cmd.spawn().map_err(|source| ProcsError::Start {
            process: rank,
            source,
        })
    };
    // Process 0 listens on a port the system picks and writes it down; the others start
    // once it is known (no window in which another program could take a port we chose).
    let dir = private_dir()?;
    let port_file = dir.path().join("rendezvous-port");
    let mut children: Vec<(u32, Child)> = vec![(0, start(0, "127.0.0.1:0", Some(&port_file))?)];
    let deadline = Instant::now() + limit;
    let port = loop {
        if let Some(p) = read_port(dir.path(), &port_file) {
            break Some(p);
        }
        let exited = matches!(children[0].1.try_wait(), Ok(Some(_)));
        if exited || Instant::now() >= deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    drop(dir);
    if let Some(port) = port {
        for rank in 1..procs {
            match start(rank, &format!("127.0.0.1:{port}"), None) {
                Ok(c) => children.push((rank, c)),
                Err(e) => {
                    for (_, c) in &mut children {
                        let _ = c.kill();
                        let _ = c.wait();
                    }
                    return Err(e);
                }
            }
        }
    }
    let deadline = Instant::now() + limit;
    let mut code = 0u8;
    let mut problems = Vec::new();
    while !children.is_empty() {
        let mut i = 0;
        while i < children.len() {
            let (rank, child) = &mut children[i];
            match child.try_wait() {
                Ok(Some(status)) => {
                    match status.code() {
                        Some(c) => code = code.max(c.clamp(0, 255) as u8),
                        None => {
                            code = code.max(1);
                            problems.push(ChildProblem::Killed {
                                process: *rank,
                                status,
                            });
                        }
                    }
                    children.swap_remove(i);
                }
                Ok(None) => i += 1,
                Err(e) => {
                    problems.push(ChildProblem::Wait {
                        process: *rank,
                        source: e,
                    });
                    children.swap_remove(i);
                }
            }
        }
        if children.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            for (rank, c) in &mut children {
                let _ = c.kill();
                let _ = c.wait();
                problems.push(ChildProblem::Overran {
                    process: *rank,
                    limit,
                });
            }
            code = code.max(1);
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if problems.is_empty() {
        Ok(code)
    } else {
        Err(ProcsError::Children(problems))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_args_drop_procs_in_both_spellings() {
        let argv: Vec<OsString> = ["coll", "run", "a.coll", "--procs", "4", "--ranks", "8"]
            .iter()
            .map(OsString::from)
            .collect();
        let want: Vec<OsString> = ["run", "a.coll", "--ranks", "8"]
            .iter()
            .map(OsString::from)
            .collect();
        assert_eq!(child_args(&argv), want);
        let argv: Vec<OsString> = ["coll", "run", "--procs=2", "a.coll"]
            .iter()
            .map(OsString::from)
            .collect();
        assert_eq!(child_args(&argv), [OsString::from("run"), "a.coll".into()]);
    }

    #[cfg(unix)]
    #[test]
    fn the_rendezvous_directory_is_private_and_unpredictable() {
        use std::os::unix::fs::PermissionsExt;
        let a = private_dir().expect("dir");
        let b = private_dir().expect("dir");
        assert_ne!(a.path(), b.path());
        let mode = std::fs::metadata(a.path())
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700, "{mode:o}");
        let name = a
            .path()
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        // A random tail, not the process id and count of before.
        assert!(name.starts_with("coll-procs-") && name.len() > 16, "{name}");
        // Only a plain file with a number is believed.
        let f = a.path().join("rendezvous-port");
        assert_eq!(read_port(a.path(), &f), None);
        std::fs::write(&f, "4242").expect("write");
        assert_eq!(read_port(a.path(), &f), Some(4242));
        std::fs::remove_file(&f).expect("rm");
        std::os::unix::fs::symlink(b.path(), &f).expect("link");
        assert_eq!(read_port(a.path(), &f), None);
        let path = a.path().to_path_buf();
        drop(a);
        assert!(!path.exists());
    }

    #[test]
    fn the_host_toward_loopback_is_loopback() {
        let h = host_toward("127.0.0.1:9".parse().expect("addr"), &Env::default()).expect("route");
        assert!(h.is_loopback(), "{h}");
    }

    #[test]
    fn the_environment_chooses_the_host_and_the_local_rank() {
        let peer = "127.0.0.1:9".parse().expect("addr");
        let env: Env = [("COLL_NET_HOST", "10.1.2.3"), ("LOCAL_RANK", " 3 ")]
            .into_iter()
            .collect();
        let host = host_toward(peer, &env).expect("an address");
        assert_eq!(host, IpAddr::from([10, 1, 2, 3]));
        assert_eq!(local_rank(&env), Some(3));
        let env: Env = [("COLL_NET_HOST", "node0")].into_iter().collect();
        let e = host_toward(peer, &env).expect_err("not an address");
        assert_eq!(e.to_string(), "COLL_NET_HOST=`node0` is not an IP address");
        assert_eq!(local_rank(&env), None);
    }

    #[test]
    fn errors_name_the_process_its_ranks_and_its_gpu() {
        let run = |gpu| ProcsError::Run {
            process: 2,
            ranks: "ranks 4-5".into(),
            gpu,
            source: ExecError::Gpu("out of memory".into()),
        };
        assert_eq!(
            run(Some(1)).to_string(),
            "process 2 (ranks 4-5, GPU 1): GPU: out of memory"
        );
        assert_eq!(
            run(None).to_string(),
            "process 2 (ranks 4-5): GPU: out of memory"
        );
        let e = ProcsError::Children(vec![
            ChildProblem::Overran {
                process: 1,
                limit: Duration::from_secs(2),
            },
            ChildProblem::Wait {
                process: 3,
                source: std::io::Error::other("gone"),
            },
        ]);
        assert_eq!(
            e.to_string(),
            "process 1 was still running after 2s and was stopped; process 3: gone"
        );
    }
}
