//! Multi-process runs as users start them: `coll run --procs N`, and processes started by
//! hand with a launcher's variables (as mpirun, srun or torchrun would), linked over TCP on
//! loopback. Every shipped algorithm runs across processes with every element checked; a
//! process killed mid-run makes every other one fail promptly naming it and the op it waited
//! at; a stalled one makes them time out; a missing one is named after the timeout.
//!
//! (A test target of `coll-cli`, the package of the `coll` binary, so that it can start it.)

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn coll() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_coll"));
    c.current_dir(root());
    // The parent environment may come from a launcher; these tests say what they want.
    for var in coll_executor::bootstrap::LAUNCH_VARS {
        c.env_remove(var);
    }
    c
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(".."))
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A port nobody listens on right now, for a rendezvous.
/// Held by every test that starts processes on the network: `free_port` hands out a port
/// that is free when asked, and a test beside it whose processes bind ports of their own
/// could take it before the launcher-started ranks listen on it.
static NETWORK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn network() -> std::sync::MutexGuard<'static, ()> {
    // A test that failed while holding it leaves it poisoned; the next still runs alone.
    NETWORK.lock().unwrap_or_else(|e| e.into_inner())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// The job secret the launcher-started runs here share.
const SECRET: &str = "5ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7";

/// Starts one process of a launcher-started run: `coll ARGS` with the launcher's `env` (and
/// the job's secret).
fn launched(args: &[&str], env: &[(&str, String)]) -> Child {
    let mut c = coll();
    c.args(args).env("COLL_JOB_SECRET", SECRET);
    for (k, v) in env {
        c.env(k, v);
    }
    c.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn")
}

/// Waits for `child` at most `limit`; kills it past that (a hang is a failure, not a stuck
/// test run).
fn wait_for(mut child: Child, limit: Duration) -> (Output, Duration) {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                break;
            }
        }
    }
    let took = start.elapsed();
    (child.wait_with_output().expect("output"), took)
}

#[test]
fn procs_four_runs_ring_allreduce_exactly() {
    let _network = network();
    let o = coll()
        .args([
            "run",
            "algorithms/allreduce_ring.coll",
            "--ranks",
            "8",
            "--count",
            "100003",
            "--procs",
            "4",
            "--iters",
            "3",
        ])
        .output()
        .expect("coll runs");
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert!(out.contains("4 processes over tcp"), "{out}");
    assert!(
        out.contains("first call") && out.contains("mean of 3 calls"),
        "{out}"
    );
    assert!(out.ends_with("#wrong 0\n"), "{out}");
    // Only process 0 prints the summary.
    assert_eq!(out.lines().count(), 1, "{out}");
}

/// Every shipped algorithm, split over 2 processes and over one process per rank, in and out
/// of place, with a reduction that is not a sum where there is one.
#[test]
fn every_shipped_algorithm_runs_across_processes() {
    let _network = network();
    let mut failures = Vec::new();
    let mut runs = 0;
    for entry in std::fs::read_dir(root().join("algorithms")).expect("algorithms/") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|x| x != "coll") {
            continue;
        }
        let name = format!(
            "algorithms/{}",
            path.file_name()
                .map(|f| f.to_string_lossy())
                .unwrap_or_default()
        );
        // Hierarchical algorithms run on a cluster: one process per node is the natural cut.
        let topo = if name.contains("hier") || name.contains("2step") {
            "cluster:2x2"
        } else {
            "nvswitch:4"
        };
        for (procs, inplace, op) in [("2", false, "max"), ("4", true, "sum")] {
            let mut args = vec![
                "run",
                &name,
                "--ranks",
                "4",
                "--topo",
                topo,
                "--count",
                "1001",
                "--dtype",
                "bf16",
                "--op",
                op,
                "--procs",
                procs,
                "--timeout",
                "20",
            ];
            if inplace {
                args.push("--inplace");
            }
            let o = coll().args(&args).output().expect("coll runs");
            runs += 1;
            let (out, err) = text(&o);
            if o.status.code() != Some(0) || !(out.contains("#wrong 0") || out.contains("n/a")) {
                failures.push(format!("{}: {out}{err}", args.join(" ")));
            }
        }
    }
    assert!(runs >= 30, "only {runs} runs");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Processes started as Slurm would (SLURM_PROCID/NTASKS, MASTER_ADDR/PORT), one node of a
/// cluster each, running the hierarchical allreduce over 4 "nodes".
#[test]
fn launcher_started_processes_run_a_cluster_plan() {
    let _network = network();
    let port = free_port().to_string();
    let children: Vec<Child> = (0..4)
        .map(|r| {
            launched(
                &[
                    "run",
                    "algorithms/allreduce_hier.coll",
                    "--ranks",
                    "8",
                    "--topo",
                    "cluster:4x2",
                    "--count",
                    "65536",
                ],
                &[
                    ("SLURM_PROCID", r.to_string()),
                    ("SLURM_NTASKS", "4".to_string()),
                    ("MASTER_ADDR", "127.0.0.1".to_string()),
                    ("MASTER_PORT", port.clone()),
                ],
            )
        })
        .collect();
    for (r, c) in children.into_iter().enumerate() {
        let (o, _) = wait_for(c, Duration::from_secs(60));
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(0), "process {r}: {out}{err}");
        if r == 0 {
            assert!(out.contains("4 processes over tcp"), "{out}");
            assert!(out.contains("#wrong 0"), "{out}");
        } else {
            assert!(out.is_empty(), "process {r} printed {out}");
        }
    }
}

/// The fault multi-process runs must report: one process killed while the others wait on
/// it. Every other process fails well before its timeout, naming the dead process, its
/// ranks, and the op it was waiting at with its source line.
#[test]
fn a_killed_process_is_named_by_every_other() {
    let _network = network();
    let port = free_port().to_string();
    let mut children: Vec<Child> = (0..4)
        .map(|r| {
            launched(
                &[
                    "run",
                    "algorithms/allreduce_ring.coll",
                    "--ranks",
                    "8",
                    "--count",
                    "4096",
                    "--timeout",
                    "60",
                    // Rank 5 (process 2) never runs, so everyone ends up waiting on it.
                    "--inject-stall",
                    "5",
                ],
                &[
                    ("RANK", r.to_string()),
                    ("WORLD_SIZE", "4".to_string()),
                    ("COLL_RENDEZVOUS", format!("127.0.0.1:{port}")),
                ],
            )
        })
        .collect();
    // Long enough to connect and block; the others cannot finish without rank 5.
    std::thread::sleep(Duration::from_millis(1500));
    let mut victim = children.remove(2);
    victim.kill().expect("kill process 2");
    let _ = victim.wait();
    for (i, c) in children.into_iter().enumerate() {
        let p = if i < 2 { i } else { i + 1 };
        let (o, took) = wait_for(c, Duration::from_secs(30));
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(1), "process {p}: {out}{err}");
        assert!(
            took < Duration::from_secs(20),
            "process {p} took {took:?} to notice"
        );
        assert!(
            err.contains("process 2 (ranks 4-5) died"),
            "process {p}: {err}"
        );
        // What the op really waited for: a message, or (a receive-and-forward whose
        // message had come) room to send to a rank stuck behind the dead one.
        assert!(
            (err.contains("was waiting to receive from rank")
                || err.contains("was waiting for room to send to rank"))
                && err.contains("(algorithms/allreduce_ring.coll:"),
            "process {p}: {err}"
        );
    }
}

/// A process that stops answering (but stays alive) makes its peers time out naming the op
/// and line they waited at; nothing hangs past the timeout.
#[test]
fn a_stalled_process_times_out_everyone() {
    let _network = network();
    let start = Instant::now();
    let o = coll()
        .args([
            "run",
            "algorithms/allreduce_ring.coll",
            "--ranks",
            "4",
            "--count",
            "1000",
            "--procs",
            "4",
            "--inject-stall",
            "2",
            "--timeout",
            "2",
        ])
        .output()
        .expect("coll runs");
    let took = start.elapsed();
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert!(took < Duration::from_secs(15), "took {took:?}");
    assert!(
        // Whichever rank gives up first (each waits on its ring neighbour, all towards the
        // stalled rank 2: to receive from it, or for room to send to it) names the op and
        // line.
        err.contains("waited")
            && (err.contains("without progress (waiting to receive from rank")
                || err.contains("without progress (waiting for room to send to rank"))
            && err.contains("(algorithms/allreduce_ring.coll:"),
        "{err}"
    );
    // Every process reports, each naming itself.
    for p in 0..4 {
        assert!(
            err.contains(&format!("error: process {p} (rank {p})")),
            "{err}"
        );
    }
}

/// A process that never starts is named after the timeout.
#[test]
fn a_missing_process_is_named_after_the_timeout() {
    let _network = network();
    let port = free_port().to_string();
    let children: Vec<Child> = (0..3)
        .map(|r| {
            launched(
                &[
                    "run",
                    "algorithms/allreduce_ring.coll",
                    "--ranks",
                    "4",
                    "--count",
                    "100",
                    "--timeout",
                    "2",
                ],
                &[
                    ("OMPI_COMM_WORLD_RANK", r.to_string()),
                    ("OMPI_COMM_WORLD_SIZE", "4".to_string()),
                    ("COLL_RENDEZVOUS", format!("127.0.0.1:{port}")),
                ],
            )
        })
        .collect();
    for (r, c) in children.into_iter().enumerate() {
        let (o, took) = wait_for(c, Duration::from_secs(30));
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(1), "process {r}: {out}{err}");
        assert!(took < Duration::from_secs(15), "process {r} took {took:?}");
        if r == 0 {
            assert!(err.contains("rank 3 did not join within"), "{err}");
        } else {
            assert!(
                err.contains("process") && err.contains("rank 0"),
                "process {r}: {err}"
            );
        }
    }
}

#[test]
fn procs_bad_values_are_usage_errors() {
    let o = coll()
        .args([
            "run",
            "algorithms/allreduce_ring.coll",
            "--ranks",
            "2",
            "--procs",
            "3",
        ])
        .output()
        .expect("coll runs");
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}{err}");
    assert!(
        err.contains("--procs 3 must be between 1 and the rank count (2)"),
        "{err}"
    );
    let o = coll()
        .args([
            "run",
            "algorithms/allreduce_ring.coll",
            "--ranks",
            "2",
            "--procs",
            "2",
            "--net",
            "rdma",
        ])
        .output()
        .expect("coll runs");
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    if cfg!(feature = "rdma") {
        // No machine here has an RDMA device: the error says so.
        assert!(err.contains("RDMA"), "{err}");
    } else {
        assert!(err.contains("built without RDMA support"), "{err}");
    }
}

/// Why network namespaces cannot be made here, or `None` when they can.
fn namespaces_unavailable() -> Option<String> {
    for tool in ["unshare", "nsenter", "ip"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Some(format!("`{tool}` is not installed"));
        }
    }
    match Command::new("unshare")
        .args(["-rn", "ip", "link", "add", "probe0", "type", "bridge"])
        .output()
    {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "`unshare -rn` cannot make a network namespace with a bridge here: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Some(format!("`unshare` does not run: {e}")),
    }
}

/// Every algorithm with each process in its own network namespace, joined by veth pairs on a
/// bridge: the hierarchical ones with one "node" per namespace, over 2 and 4 nodes. Only the test's own namespaces (inside
/// an unprivileged user namespace) are touched; where they cannot be made the test says why
/// and passes.
#[test]
fn algorithms_run_across_network_namespaces() {
    let _network = network();
    if let Some(why) = namespaces_unavailable() {
        println!("skipped: {why}");
        return;
    }
    let script = root().join("tests/scripts/netns_run.sh");
    // The hierarchical ones over 2 and 4 nodes; every other algorithm over 2 namespaces.
    let mut cases: Vec<(&str, String, &str, &str)> = vec![
        (
            "2",
            "algorithms/allreduce_hier.coll".into(),
            "4",
            "cluster:2x2",
        ),
        (
            "4",
            "algorithms/allreduce_hier.coll".into(),
            "8",
            "cluster:4x2",
        ),
        (
            "4",
            "algorithms/alltoall_2step.coll".into(),
            "8",
            "cluster:4x2",
        ),
    ];
    for entry in std::fs::read_dir(root().join("algorithms")).expect("algorithms/") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name.ends_with(".coll") && !name.contains("hier") && !name.contains("2step") {
            cases.push(("2", format!("algorithms/{name}"), "4", "nvswitch:4"));
        }
    }
    assert!(cases.len() >= 15, "{} cases", cases.len());
    for (procs, algo, ranks, topo) in &cases {
        let (procs, algo, ranks, topo) = (*procs, algo.as_str(), *ranks, *topo);
        let o = Command::new("unshare")
            .current_dir(root())
            .arg("-rn")
            .arg("bash")
            .arg(&script)
            .arg(procs)
            .arg(env!("CARGO_BIN_EXE_coll"))
            .args([
                "run",
                algo,
                "--ranks",
                ranks,
                "--topo",
                topo,
                "--count",
                "65537",
                "--timeout",
                "30",
            ])
            .output()
            .expect("unshare runs");
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(0), "{algo} on {topo}: {out}{err}");
        assert!(
            out.contains(&format!("{procs} processes over tcp")) && out.contains("#wrong 0"),
            "{algo} on {topo}: {out}{err}"
        );
        assert_eq!(
            out.matches("== process").count(),
            procs.parse::<usize>().expect("number"),
            "{out}"
        );
    }
}
