//! Enqueues one call's per-GPU work on every GPU at once, from one host thread per GPU.
//!
//! A kernel launch costs the host 3–4 µs on 2 x H200 on an NVSwitch (`bench/launch_cost.cu`), and a
//! call of one process launches on each of its GPUs: done in turn, an eager call of 8 bytes on
//! 2 GPUs spends most of its time in the host (bench/NOTES.md, Small calls). Here GPU 0's part
//! runs on the caller's thread and GPU i's on worker i, all at once; the call returns when
//! every part has been enqueued, so stream order is what it was.
//!
//! Invariants:
//! - A job is posted to a worker by storing its number in the worker's `posted` word after
//!   the job's pointer; the worker stores the same number in `finished` once the job has
//!   returned. [`LaunchThreads::run`] does not return (nor unwind) before every worker it posted
//!   to has finished, so the borrowed job outlives every use of it.
//! - A worker spins on `posted` for [`LaunchThreads`]'s spin time after its last job (so calls in
//!   a row find it awake), then parks; it announces that in `parked` before re-reading
//!   `posted`, and the poster reads `parked` after storing `posted` (both sequentially
//!   consistent), so a posted job always wakes it.
//! - A call that finds a worker parked posts nothing: a parked thread takes tens of µs to run
//!   again (about 60 µs of a first call on 2 x H200, `bench/NOTES.md`, First call), more than
//!   the caller needs to enqueue every part itself. It runs every part on its own thread and
//!   wakes the parked workers, which then spin, so the calls after it find them awake.
//! - The threads are used from one thread at a time (it is not `Sync`).

use super::settings::LaunchMode;
use crate::error::ExecError;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

type Job<'a> = dyn Fn(usize) -> Result<(), ExecError> + Sync + 'a;

/// The fat pointer of the job being run, behind a thin one the workers can load atomically.
struct JobRef(*const Job<'static>);

struct Worker {
    posted: AtomicU64,
    finished: AtomicU64,
    parked: AtomicBool,
    job: AtomicPtr<JobRef>,
    result: Mutex<Result<(), ExecError>>,
}

struct Shared {
    workers: Vec<Worker>,
    stop: AtomicBool,
    spin: Duration,
}

/// Worker threads for GPUs 1.. of an executor (GPU 0's part runs on the caller's thread).
pub struct LaunchThreads {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    next: std::cell::Cell<u64>,
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

impl std::fmt::Debug for LaunchThreads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LaunchThreads({} workers)", self.threads.len())
    }
}

impl LaunchThreads {
    /// Starts `workers` threads (`coll-launch-1`, ...) that spin `spin` after each job.
    pub fn new(workers: usize, spin: Duration) -> Result<LaunchThreads, ExecError> {
        let shared = Arc::new(Shared {
            workers: (0..workers)
                .map(|_| Worker {
                    posted: AtomicU64::new(0),
                    finished: AtomicU64::new(0),
                    parked: AtomicBool::new(false),
                    job: AtomicPtr::new(std::ptr::null_mut()),
                    result: Mutex::new(Ok(())),
                })
                .collect(),
            stop: AtomicBool::new(false),
            spin,
        });
        let mut threads = Vec::with_capacity(workers);
        for w in 0..workers {
            let sh = Arc::clone(&shared);
            let t = std::thread::Builder::new()
                .name(format!("coll-launch-{}", w + 1))
                .spawn(move || work(&sh, w))
                .map_err(|e| ExecError::Gpu(format!("cannot start a launch thread: {e}")))?;
            threads.push(t);
        }
        Ok(LaunchThreads {
            shared,
            threads,
            next: std::cell::Cell::new(0),
            _not_sync: PhantomData,
        })
    }

    /// Workers (GPUs beyond the caller's).
    pub fn workers(&self) -> usize {
        self.threads.len()
    }

    /// Runs `job(0)` .. `job(parts - 1)` at once: part 0 on this thread, part i on worker
    /// i - 1 (parts beyond the workers run here after part 0). Returns once every part has
    /// returned: the first error by part, or Ok.
    pub fn run<F>(&self, parts: usize, job: F) -> Result<(), ExecError>
    where
        F: Fn(usize) -> Result<(), ExecError> + Sync,
    {
        let on_workers = parts.saturating_sub(1).min(self.workers());
        if on_workers == 0 {
            return (0..parts).try_for_each(&job);
        }
        let mut asleep = false;
        for (w, wk) in self.shared.workers[..on_workers].iter().enumerate() {
            if wk.parked.load(Ordering::SeqCst) {
                asleep = true;
                self.threads[w].thread().unpark();
            }
        }
        if asleep {
            // Every part runs, also after one has failed, as when the workers run them.
            let results: Vec<Result<(), ExecError>> = (0..parts)
                .map(|p| if p == 0 { job(0) } else { guarded(&job, p) })
                .collect();
            return results.into_iter().find(Result::is_err).unwrap_or(Ok(()));
        }
        let n = self.next.get() + 1;
        self.next.set(n);
        let dynjob: &Job<'_> = &job;
        // SAFETY: only the lifetime is erased; `Wait` below keeps this frame (and so `job`)
        // alive until every worker has stored `finished = n`, after its last use of it.
        let erased: *const Job<'static> = unsafe { std::mem::transmute(dynjob as *const Job<'_>) };
        let mut holder = JobRef(erased);
        let wait = Wait {
            shared: &self.shared,
            upto: on_workers,
            n,
        };
        for (w, wk) in self.shared.workers[..on_workers].iter().enumerate() {
            wk.job.store(&mut holder, Ordering::Release);
            wk.posted.store(n, Ordering::SeqCst);
            if wk.parked.load(Ordering::SeqCst) {
                self.threads[w].thread().unpark();
            }
        }
        let mine = job(0);
        // Every part runs, also after one has failed (as the workers' parts do).
        let extra: Vec<Result<(), ExecError>> = (on_workers + 1..parts).map(&job).collect();
        drop(wait);
        // In part order: 0, the workers' 1..=on_workers, then the caller's extra parts. A
        // result left unread after the first error is overwritten by that worker's next job
        // before anyone reads it.
        let theirs = self.shared.workers[..on_workers]
            .iter()
            .map(|wk| std::mem::replace(&mut *lock(&wk.result), Ok(())));
        std::iter::once(mine)
            .chain(theirs)
            .chain(extra)
            .find(Result::is_err)
            .unwrap_or(Ok(()))
    }
}

/// Waits (also while unwinding) until workers `..upto` have finished job `n`.
struct Wait<'a> {
    shared: &'a Shared,
    upto: usize,
    n: u64,
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        for wk in &self.shared.workers[..self.upto] {
            while wk.finished.load(Ordering::Acquire) < self.n {
                std::hint::spin_loop();
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned lock only means a job panicked, which `work` already turned into an error.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `job(part)`, a panic turned into an error (a part the caller runs for a worker panics as
/// the worker's would).
fn guarded(job: &Job<'_>, part: usize) -> Result<(), ExecError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(part))).unwrap_or_else(|_| {
        Err(ExecError::Gpu(format!(
            "the launch of part {part} panicked"
        )))
    })
}

fn work(sh: &Shared, w: usize) {
    let me = &sh.workers[w];
    let mut done = 0u64;
    loop {
        let mut since = Instant::now();
        let mut spins = 0u32;
        let n = loop {
            let n = me.posted.load(Ordering::Acquire);
            if n != done {
                break n;
            }
            if sh.stop.load(Ordering::Acquire) {
                return;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) && since.elapsed() >= sh.spin {
                me.parked.store(true, Ordering::SeqCst);
                if me.posted.load(Ordering::SeqCst) == done && !sh.stop.load(Ordering::SeqCst) {
                    std::thread::park();
                }
                me.parked.store(false, Ordering::SeqCst);
                since = Instant::now();
            } else {
                std::hint::spin_loop();
            }
        };
        let holder = me.job.load(Ordering::Acquire);
        // SAFETY: the poster stored a pointer to a live `JobRef` before `posted = n` (read
        // above with Acquire), and keeps it and the job alive until `finished = n` (Wait).
        let job = unsafe { &*(*holder).0 };
        *lock(&me.result) = guarded(job, w + 1);
        done = n;
        me.finished.store(n, Ordering::Release);
    }
}

impl Drop for LaunchThreads {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        for t in &self.threads {
            t.thread().unpark();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The launch threads an executor of `gpus` GPUs uses: none for one GPU or when `mode` is
/// off ([`LaunchMode::Auto`]: on where the process may run on at least `gpus` cores);
/// idle workers spin for `spin` before they park.
pub fn for_gpus(
    gpus: usize,
    mode: LaunchMode,
    spin: Duration,
) -> Result<Option<LaunchThreads>, ExecError> {
    let on = match mode {
        LaunchMode::On => true,
        LaunchMode::Off => false,
        LaunchMode::Auto => enough_cores(
            gpus,
            std::thread::available_parallelism().map_or(1, |n| n.get()),
        ),
    };
    if !on || gpus < 2 {
        return Ok(None);
    }
    LaunchThreads::new(gpus - 1, spin).map(Some)
}

/// Whether the launch threads are on by default: only where every GPU's thread can have a core
/// of its own, since a spinning worker that shares a core with the caller slows it down.
fn enough_cores(gpus: usize, cores: usize) -> bool {
    cores >= gpus
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// The thread names that ran each of `parts` parts in one call.
    fn names_of_a_call(l: &LaunchThreads, parts: usize) -> Vec<String> {
        let names = Mutex::new(vec![String::new(); parts]);
        l.run(parts, |p| {
            lock(&names)[p] = std::thread::current().name().unwrap_or("").to_string();
            Ok(())
        })
        .expect("call");
        lock(&names).clone()
    }

    /// Waits (up to 5 s) until every worker's `parked` is `want`.
    fn await_parked(l: &LaunchThreads, want: bool) {
        let t = Instant::now();
        while l
            .shared
            .workers
            .iter()
            .any(|w| w.parked.load(Ordering::SeqCst) != want)
        {
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "workers never parked = {want}"
            );
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    #[test]
    fn every_part_runs_once_per_call_on_its_own_thread() {
        // The workers spin through the whole test: every call finds them awake.
        let l = LaunchThreads::new(2, Duration::from_secs(30)).expect("threads");
        let hits: Vec<AtomicUsize> = (0..3).map(|_| AtomicUsize::new(0)).collect();
        for _ in 0..100 {
            l.run(3, |p| {
                hits[p].fetch_add(1, Ordering::Relaxed);
                Ok(())
            })
            .expect("call");
        }
        let counts: Vec<usize> = hits.iter().map(|h| h.load(Ordering::Relaxed)).collect();
        assert_eq!(counts, vec![100; 3]);
        let names = names_of_a_call(&l, 3);
        assert_eq!(&names[1..], ["coll-launch-1", "coll-launch-2"]);
        assert_ne!(names[0], "coll-launch-1");
    }

    #[test]
    fn a_call_that_finds_its_workers_parked_runs_every_part_itself_and_wakes_them() {
        let l = LaunchThreads::new(2, Duration::from_millis(300)).expect("threads");
        await_parked(&l, true);
        let here = std::thread::current().name().unwrap_or("").to_string();
        assert_eq!(names_of_a_call(&l, 3), vec![here.clone(); 3]);
        // Woken, they spin again: the next call finds them awake.
        await_parked(&l, false);
        let names = names_of_a_call(&l, 3);
        assert_eq!(names, [here.as_str(), "coll-launch-1", "coll-launch-2"]);
    }

    #[test]
    fn the_first_failing_part_is_reported_after_all_parts_returned() {
        let l = LaunchThreads::new(2, Duration::ZERO).expect("threads");
        let ran = AtomicUsize::new(0);
        let r = l.run(3, |p| {
            std::thread::sleep(Duration::from_millis(5));
            ran.fetch_add(1, Ordering::SeqCst);
            if p >= 1 {
                Err(ExecError::Gpu(format!("part {p}")))
            } else {
                Ok(())
            }
        });
        assert_eq!(ran.load(Ordering::SeqCst), 3);
        assert_eq!(
            r.expect_err("part 1 fails").to_string(),
            ExecError::Gpu("part 1".into()).to_string()
        );
        // The threads still work after a failed call.
        l.run(3, |_| Ok(())).expect("call");
    }

    #[test]
    fn a_panicking_part_is_an_error_not_a_hang() {
        // On a worker (spinning), and on the caller (the worker parked).
        for spin in [Duration::from_secs(30), Duration::ZERO] {
            let l = LaunchThreads::new(1, spin).expect("threads");
            if spin.is_zero() {
                await_parked(&l, true);
            }
            let r = l.run(2, |p| if p == 1 { panic!("boom") } else { Ok(()) });
            assert!(
                r.expect_err("part 1 panics")
                    .to_string()
                    .contains("the launch of part 1 panicked")
            );
            l.run(2, |_| Ok(())).expect("call");
        }
    }

    #[test]
    fn by_default_each_gpu_needs_a_core_of_its_own() {
        assert!(enough_cores(2, 2));
        assert!(enough_cores(8, 32));
        assert!(!enough_cores(8, 4));
    }

    #[test]
    fn one_gpu_or_off_needs_no_threads() {
        let spin = Duration::ZERO;
        assert!(for_gpus(1, LaunchMode::On, spin).expect("ok").is_none());
        assert!(for_gpus(1, LaunchMode::Auto, spin).expect("ok").is_none());
        assert!(for_gpus(4, LaunchMode::Off, spin).expect("ok").is_none());
        let t = for_gpus(4, LaunchMode::On, spin)
            .expect("ok")
            .expect("threads");
        assert_eq!(t.workers(), 3);
    }

    #[test]
    fn a_workers_error_comes_before_a_later_part_on_the_caller() {
        let l = LaunchThreads::new(1, Duration::ZERO).expect("threads");
        let r = l.run(3, |p| match p {
            0 => Ok(()),
            p => Err(ExecError::Gpu(format!("part {p}"))),
        });
        assert_eq!(
            r.expect_err("parts 1 and 2 fail").to_string(),
            ExecError::Gpu("part 1".into()).to_string()
        );
    }

    #[test]
    fn more_parts_than_workers_run_on_the_caller() {
        let l = LaunchThreads::new(1, Duration::ZERO).expect("threads");
        let hits: Vec<AtomicUsize> = (0..5).map(|_| AtomicUsize::new(0)).collect();
        l.run(5, |p| {
            hits[p].fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .expect("call");
        assert!(hits.iter().all(|h| h.load(Ordering::SeqCst) == 1));
    }
}
