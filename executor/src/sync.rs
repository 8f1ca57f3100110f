//! Small synchronisation pieces shared by the executors and the proxy.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Locks `m`. A poisoned lock only means another thread panicked while holding it; the
/// executors keep their data consistent at every unlock, so it is used as is.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Wakes a waiting rank when something it may wait for happens. The generation only grows;
/// a waiter reads it before looking for work and sleeps only while it is unchanged, so no
/// wake-up between the look and the sleep is lost.
#[derive(Debug, Default)]
pub struct Signal {
    generation: Mutex<u64>,
    cv: Condvar,
}

impl Signal {
    pub fn notify(&self) {
        *lock(&self.generation) += 1;
        self.cv.notify_all();
    }

    pub fn generation(&self) -> u64 {
        *lock(&self.generation)
    }

    /// Sleeps until the generation moves past `seen`, `stop` says so, or `timeout` passes.
    pub fn wait_past(&self, seen: u64, timeout: Duration, stop: impl Fn() -> bool) {
        let guard = lock(&self.generation);
        if *guard == seen {
            let _ = self
                .cv
                .wait_timeout_while(guard, timeout, |g| *g == seen && !stop())
                .map_err(|e| e.into_inner());
        }
    }
}
