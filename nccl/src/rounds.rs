//! Rounds of a clique's local members: each member deposits one entry per round, the deposit
//! that completes a round carries it out, and every member waits for its outcome. The calls
//! of a batch ([`crate::clique`]) and the `ncclCommSplit`s of a clique ([`crate::split`])
//! meet this way, whether one thread drives every member (a group) or one thread each.
//!
//! Invariants: round `n` holds at most one entry per member and is carried out once, when it
//! holds all of them, outside the lock; it is removed once every member has taken its
//! outcome; after [`Rounds::abort`] every wait that has no outcome yet gives up at once.

use coll_executor::sync::lock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug)]
struct Round<E, O> {
    entries: Vec<Option<E>>,
    outcome: Option<O>,
    /// Members that have taken the outcome.
    taken: usize,
}

/// Why a wait ended without an outcome.
#[derive(Debug, PartialEq, Eq)]
pub enum Unmet {
    /// The round is not there (taken by every member already: a caller's bug).
    Gone,
    /// These members (indices) made no entry within the timeout.
    Missing(Vec<usize>),
    /// [`Rounds::abort`] was called.
    Aborted,
}

/// The rounds of one clique's members (see the module docs).
#[derive(Debug)]
pub struct Rounds<E, O> {
    /// Per member: the number of its next round.
    next: Vec<AtomicU64>,
    rounds: Mutex<HashMap<u64, Round<E, O>>>,
    done: Condvar,
    aborted: AtomicBool,
}

impl<E: Clone, O: Clone> Rounds<E, O> {
    pub fn new(members: usize) -> Rounds<E, O> {
        Rounds {
            next: (0..members).map(|_| AtomicU64::new(0)).collect(),
            rounds: Mutex::new(HashMap::new()),
            done: Condvar::new(),
            aborted: AtomicBool::new(false),
        }
    }

    /// Deposits member `m`'s entry in its next round; the deposit that completes the round
    /// runs `complete` on the entries (in member order) and keeps its outcome. Returns the
    /// round, to [`wait`](Self::wait) for.
    pub fn deposit(&self, m: usize, entry: E, complete: impl FnOnce(Vec<E>) -> O) -> u64 {
        let seq = self.next[m].fetch_add(1, Ordering::SeqCst);
        let full = {
            let mut rounds = lock(&self.rounds);
            let round = rounds.entry(seq).or_insert_with(|| Round {
                entries: vec![None; self.next.len()],
                outcome: None,
                taken: 0,
            });
            round.entries[m] = Some(entry);
            round
                .entries
                .iter()
                .all(Option::is_some)
                .then(|| round.entries.clone())
        };
        if let Some(entries) = full {
            let outcome = complete(entries.into_iter().flatten().collect());
            if let Some(round) = lock(&self.rounds).get_mut(&seq) {
                round.outcome = Some(outcome);
            }
            self.done.notify_all();
        }
        seq
    }

    /// Waits up to `timeout` for round `seq`'s outcome.
    pub fn wait(&self, seq: u64, timeout: Duration) -> Result<O, Unmet> {
        let deadline = Instant::now() + timeout;
        let mut rounds = lock(&self.rounds);
        loop {
            let Some(round) = rounds.get_mut(&seq) else {
                return Err(Unmet::Gone);
            };
            if let Some(outcome) = round.outcome.clone() {
                round.taken += 1;
                if round.taken == self.next.len() {
                    rounds.remove(&seq);
                }
                return Ok(outcome);
            }
            if self.aborted.load(Ordering::SeqCst) {
                return Err(Unmet::Aborted);
            }
            let now = Instant::now();
            if now >= deadline {
                let missing = (round.entries.iter().enumerate())
                    .filter(|(_, e)| e.is_none())
                    .map(|(i, _)| i)
                    .collect();
                return Err(Unmet::Missing(missing));
            }
            rounds = self
                .done
                .wait_timeout(rounds, deadline - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }

    /// Whether [`abort`](Self::abort) was called.
    pub fn aborted(&self) -> bool {
        self.aborted.load(Ordering::SeqCst)
    }

    /// Makes every wait without an outcome give up now, and every later one.
    pub fn abort(&self) {
        // Set under the lock, so no waiter misses the wake-up between its check and its wait.
        {
            let _rounds = lock(&self.rounds);
            self.aborted.store(true, Ordering::SeqCst);
        }
        self.done.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_last_deposit_completes_the_round_and_every_member_takes_its_outcome() {
        let r: Arc<Rounds<u32, u32>> = Arc::new(Rounds::new(2));
        assert_eq!(r.deposit(1, 20, |_| unreachable!("incomplete")), 0);
        assert_eq!(r.deposit(0, 1, |e| e.iter().sum()), 0);
        assert_eq!(r.wait(0, Duration::from_secs(1)), Ok(21));
        assert_eq!(r.wait(0, Duration::from_secs(1)), Ok(21));
        assert_eq!(r.wait(0, Duration::from_secs(1)), Err(Unmet::Gone));
    }

    #[test]
    fn a_wait_names_the_members_missing_at_its_timeout() {
        let r: Rounds<u32, u32> = Rounds::new(3);
        let seq = r.deposit(1, 7, |_| 0);
        assert_eq!(
            r.wait(seq, Duration::from_millis(20)),
            Err(Unmet::Missing(vec![0, 2]))
        );
    }
}
