//! A bounded cache, least recently used first out: how a clique keeps its loaded executors
//! ([`crate::clique`]), each of which holds GPU memory, so that a job with ever new
//! point-to-point patterns or sizes does not grow GPU memory without limit.
//!
//! The policy knows nothing of GPUs: the caller says which values may go
//! ([`Lru::insert`]'s `evictable`), and drops what it gets back outside its own locks (an
//! executor's drop waits for its GPUs).
//!
//! Invariants: at most `bound` values are held once an insert returns, unless every other
//! value was refused by `evictable` (then as few as it allowed); every value taken out (by
//! eviction or by replacement under its key) is returned to the caller, never dropped here;
//! `tick` grows with every use, so the least recently used value has the smallest tick.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;

/// Values by key, at most `bound` of them (see the module docs).
#[derive(Debug)]
pub struct Lru<K, V> {
    bound: usize,
    tick: u64,
    /// Value and the tick of its last use.
    map: HashMap<K, (V, u64)>,
}

impl<K: Eq + Hash + Clone, V> Lru<K, V> {
    /// A cache of at most `bound` values (at least 1).
    pub fn new(bound: usize) -> Lru<K, V> {
        Lru {
            bound: bound.max(1),
            tick: 0,
            map: HashMap::new(),
        }
    }

    pub fn bound(&self) -> usize {
        self.bound
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The value of `key`, marked as used now.
    pub fn get<Q: Eq + Hash + ?Sized>(&mut self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        self.tick += 1;
        let tick = self.tick;
        self.map.get_mut(key).map(|(v, t)| {
            *t = tick;
            &*v
        })
    }

    /// Every value, in no order (for aborts and error polls, which touch all of them).
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.map.values().map(|(v, _)| v)
    }

    /// Puts `value` under `key` as used now; returns what it replaced under that key and,
    /// while the cache is over its bound, the least recently used values `evictable` lets
    /// go (never the one just put in).
    pub fn insert(&mut self, key: K, value: V, evictable: impl Fn(&V) -> bool) -> Vec<V> {
        self.tick += 1;
        let mut out: Vec<V> = self
            .map
            .insert(key.clone(), (value, self.tick))
            .map(|(v, _)| v)
            .into_iter()
            .collect();
        while self.map.len() > self.bound {
            let oldest = self
                .map
                .iter()
                .filter(|(k, (v, _))| **k != key && evictable(v))
                .min_by_key(|(_, (_, t))| *t)
                .map(|(k, _)| k.clone());
            let Some(k) = oldest else { break };
            if let Some((v, _)) = self.map.remove(&k) {
                out.push(v);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_value_goes_first() {
        let mut c: Lru<&str, u32> = Lru::new(2);
        assert!(c.insert("a", 1, |_| true).is_empty());
        assert!(c.insert("b", 2, |_| true).is_empty());
        // A use of `a` makes `b` the oldest.
        assert_eq!(c.get(&"a"), Some(&1));
        assert_eq!(c.insert("c", 3, |_| true), vec![2]);
        assert_eq!(c.len(), 2);
        assert_eq!(c.get(&"b"), None);
        assert_eq!(c.insert("d", 4, |_| true), vec![1]);
        let mut left: Vec<u32> = c.values().copied().collect();
        left.sort_unstable();
        assert_eq!(left, vec![3, 4]);
    }

    #[test]
    fn a_value_the_caller_keeps_is_skipped_and_the_next_oldest_goes() {
        let mut c: Lru<u32, u32> = Lru::new(2);
        c.insert(1, 10, |_| true);
        c.insert(2, 20, |_| true);
        // 10 is the oldest but kept (pinned, in a clique): 20 goes.
        assert_eq!(c.insert(3, 30, |v| *v != 10), vec![20]);
        // Nothing may go: the cache holds one more than its bound until something may.
        assert!(c.insert(4, 40, |_| false).is_empty());
        assert_eq!(c.len(), 3);
        // The next insert brings it back to its bound, oldest first.
        assert_eq!(c.insert(5, 50, |_| true), vec![10, 30]);
        assert_eq!(c.len(), 2);
        assert_eq!(c.get(&4), Some(&40));
    }

    #[test]
    fn a_replaced_value_is_returned_and_the_new_one_stays() {
        let mut c: Lru<u32, u32> = Lru::new(1);
        c.insert(1, 10, |_| true);
        // Reloading under the same key: the old value comes back, nothing else goes.
        assert_eq!(c.insert(1, 11, |_| true), vec![10]);
        assert_eq!(c.get(&1), Some(&11));
        // A bound of one never evicts the value just put in.
        assert_eq!(c.insert(2, 20, |_| true), vec![11]);
        assert_eq!(c.get(&2), Some(&20));
        assert_eq!(Lru::<u32, u32>::new(0).bound(), 1);
    }

    #[test]
    fn any_sequence_of_uses_stays_within_the_bound() {
        let mut c: Lru<u64, u64> = Lru::new(3);
        let mut x = 12345u64;
        for _ in 0..2000 {
            // A small LCG: keys 0..16 in a scrambled order, some used again before insert.
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let k = (x >> 33) % 16;
            if c.get(&k).is_none() {
                let out = c.insert(k, k, |_| true);
                assert!(out.len() <= 1, "{out:?}");
            }
            assert!(c.len() <= 3);
        }
    }
}
