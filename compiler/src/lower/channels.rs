//! Channels by the compiler (a candidate of `choose.rs`): transfers without a `with channel`
//! hint get their channel from the data dependences instead of all sharing one.
//!
//! A *message* is a plain send and the receive that gets it (the k-th send and the k-th
//! receive of one connection, as emission and folding keep them). Messages between one
//! (sender, receiver) pair on one home channel (the channel emission gave them: the
//! program's default plus the instance's offset) form a *group*. Each message has a level,
//! the earliest round it could run in if no connection were ever busy
//! ([`super::schedule::levels`]). Within a group, messages are given channels greedily in
//! order of level: the channel the message's data arrived on at the sender when it
//! forwards a received chunk (so a chain keeps one channel and its receives still fuse with
//! their sends), else the free channel (all of its messages at lower levels) that was busy
//! the latest, else a new channel while the group has fewer than [`MAX_PER_PAIR`], else
//! the one free the soonest. So messages at one level between one pair (independent
//! streams: the two trees of a double tree, passes over different chunks) travel on
//! different connections, while a dependent chain stays on one.
//!
//! Channel numbers: index 0 of a group is its home channel; index `k > 0` is
//! `first + (k - 1) + home_rank × (MAX_PER_PAIR - 1)`, where `first` is one above every
//! channel the plan uses and `home_rank` the home channel's position among all home
//! channels, so no two groups of one pair share a new channel and no hinted channel is
//! taken.
//!
//! Invariant: both ops of a message get the same channel and every connection's messages
//! keep their relative order at both ends, so the k-th send of each new connection still
//! pairs with its k-th receive. Hinted transfers and switch-group ops keep their channel.

use super::{Chunks, Lowering, ROp};
use std::collections::{BTreeSet, HashMap, HashSet};

/// Channels one group of messages (one pair, one home channel) may spread over.
pub const MAX_PER_PAIR: u32 = 4;

/// A message: (sender rank, index of its send), (receiver rank, index of its receive).
type Message = ((u32, usize), (u32, usize));

/// The folded ops `ranks` with channels given by the compiler to transfers whose source
/// is not in `hinted`, or `None` when that changes nothing; `levels` are the ops' levels
/// ([`super::schedule::levels`]).
pub(super) fn assign(
    l: &Lowering<'_>,
    ranks: &[Vec<ROp>],
    levels: &[Vec<u32>],
    hinted: &HashSet<u32>,
) -> Option<Vec<Vec<ROp>>> {
    let free = |op: &ROp| op.group.is_none() && !hinted.contains(&op.source);
    // Messages per group, in the sender's order.
    let mut sends: HashMap<(u32, u32, u32), Vec<(u32, usize)>> = HashMap::new();
    for (r, ops) in ranks.iter().enumerate() {
        for (i, op) in ops.iter().enumerate() {
            if let (None, Some((q, _))) = (op.group, op.send) {
                sends
                    .entry((r as u32, q, op.channel))
                    .or_default()
                    .push((r as u32, i));
            }
        }
    }
    let mut messages: Vec<Message> = Vec::new();
    let mut taken: HashMap<(u32, u32, u32), usize> = HashMap::new();
    for (r, ops) in ranks.iter().enumerate() {
        for (i, op) in ops.iter().enumerate() {
            let Some((p, _)) = op.recv.filter(|_| op.group.is_none()) else {
                continue;
            };
            let key = (p, r as u32, op.channel);
            let k = taken.entry(key).or_default();
            if let Some(&s) = sends.get(&key).and_then(|list| list.get(*k)) {
                let (sr, si) = s;
                if free(&ranks[sr as usize][si]) && free(op) {
                    messages.push((s, (r as u32, i)));
                }
            }
            *k += 1;
        }
    }
    if messages.is_empty() {
        return None;
    }
    // Per send: the receive on its rank that wrote exactly its source, if one did.
    let forwarded = forwarded_from(l, ranks);
    // Channel numbering (module docs).
    let homes: BTreeSet<u32> = messages
        .iter()
        .map(|&((r, i), _)| ranks[r as usize][i].channel)
        .collect();
    let first = ranks
        .iter()
        .flatten()
        .map(|op| op.channel)
        .max()
        .unwrap_or(0)
        + 1;
    let home_rank: HashMap<u32, u32> = homes
        .iter()
        .enumerate()
        .map(|(k, &h)| (h, k as u32))
        .collect();
    let channel_of = |home: u32, index: u32| {
        if index == 0 {
            home
        } else {
            first + (index - 1) + home_rank.get(&home).copied().unwrap_or(0) * (MAX_PER_PAIR - 1)
        }
    };
    // Messages by level, then sender order (producers before what they forward).
    messages.sort_by_key(|&((r, i), _)| (levels[r as usize][i], r, i));
    // Per group, per channel index: the level after its last message, if it has one.
    let mut busy: HashMap<(u32, u32, u32), [Option<u32>; MAX_PER_PAIR as usize]> = HashMap::new();
    // Channel index each receive got, to keep a forwarding chain on it.
    let mut index_of_recv: HashMap<(u32, usize), u32> = HashMap::new();
    let mut out = ranks.to_vec();
    let mut changed = false;
    for ((sr, si), (rr, ri)) in messages {
        let send = &ranks[sr as usize][si];
        let home = send.channel;
        let level = levels[sr as usize][si];
        let slots = busy.entry((sr, rr, home)).or_default();
        let is_free = |k: usize, slots: &[Option<u32>]| slots[k].is_none_or(|b| b <= level);
        let preferred = forwarded[sr as usize][si]
            .and_then(|r| index_of_recv.get(&(sr, r)).copied())
            .map(|k| k as usize)
            .filter(|&k| is_free(k, slots));
        let latest_free = (0..slots.len())
            .filter(|&k| slots[k].is_some() && is_free(k, slots))
            .max_by_key(|&k| (slots[k], std::cmp::Reverse(k)));
        let unopened = (0..slots.len()).find(|&k| slots[k].is_none());
        let soonest = (0..slots.len()).min_by_key(|&k| (slots[k], k));
        let Some(k) = preferred.or(latest_free).or(unopened).or(soonest) else {
            continue;
        };
        slots[k] = Some(slots[k].map_or(level, |b| b.max(level)) + 1);
        index_of_recv.insert((rr, ri), k as u32);
        let channel = channel_of(home, k as u32);
        if channel != home {
            changed = true;
            out[sr as usize][si].channel = channel;
            out[rr as usize][ri].channel = channel;
        }
    }
    changed.then_some(out)
}

/// Per rank, per op: for a send, the receive before it on its rank that last wrote exactly
/// its source (same chunks), when that receive is the only writer.
fn forwarded_from(l: &Lowering<'_>, ranks: &[Vec<ROp>]) -> Vec<Vec<Option<usize>>> {
    ranks
        .iter()
        .enumerate()
        .map(|(r, ops)| {
            let chunks = Chunks::new(l, r as u32, l.e.inplace);
            let mut writer: Vec<usize> = vec![usize::MAX; chunks.total as usize];
            let mut out = Vec::with_capacity(ops.len());
            for op in ops {
                let from = op
                    .send
                    .and(op.src)
                    .and_then(|s| {
                        let mut ws = chunks.ids(s, op.count).map(|c| writer[c as usize]);
                        let w = ws.next()?;
                        ws.all(|x| x == w).then_some(w)
                    })
                    .filter(|&w| w != usize::MAX && ops[w].recv.is_some() && ops[w].dst == op.src);
                out.push(from);
                if let Some(d) = op.writes() {
                    for c in chunks.ids(d, op.count) {
                        writer[c as usize] = out.len() - 1;
                    }
                }
            }
            out
        })
        .collect()
}
