//! Channels by the compiler (candidates of `choose.rs`): transfers without a `with channel`
//! hint get their channel from the data dependences instead of all sharing one, by level
//! ([`assign`], below) or by chunk ([`by_chunk`], which keeps each chunk's path on one
//! channel, as MSCCL does).
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
//! the one free the soonest ([`RENAMED_PER_PAIR`] channels for programs with scratch renamed). So messages at one level between one pair (independent
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
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::collections::BTreeSet;

/// Channels one group of messages (one pair, one home channel) may spread over.
pub const MAX_PER_PAIR: u32 = 4;

/// The same for programs with scratch renamed (`rename.rs`): their steps send several
/// independent chunks to one peer at once (Bruck's all-to-all sends n / 2 at every step),
/// and each needs a connection of its own to fuse with the send that forwards it.
pub const RENAMED_PER_PAIR: u32 = CHUNK_CHANNELS;

/// A message: (sender rank, index of its send), (receiver rank, index of its receive).
type Message = ((u32, usize), (u32, usize));

/// Per op of each rank, the index of the receive it forwards, if it does.
type Forwarded = Vec<Vec<Option<usize>>>;

/// What both ways of giving channels start from: the free messages ([`free_messages`], in
/// receiver order) and, per send, the receive on its rank that wrote exactly its source
/// ([`forwarded_from`]); `None` when no message is free.
fn free_and_forwarded(
    l: &Lowering<'_>,
    ranks: &[Vec<ROp>],
    hinted: &HashSet<u32>,
    groups: bool,
) -> Option<(Vec<Message>, Forwarded)> {
    let messages = free_messages(ranks, hinted, groups);
    (!messages.is_empty()).then(|| (messages, forwarded_from(l, ranks)))
}

/// `messages` by the level of their send, then sender order (producers before what they
/// forward).
fn by_level(mut messages: Vec<Message>, levels: &[Vec<u32>]) -> Vec<Message> {
    messages.sort_by_key(|&((r, i), _)| (levels[r as usize][i], r, i));
    messages
}

/// The messages of `ranks` whose send and receive both carry no hint (their source is not
/// in `hinted`) and are not switch-group ops (unless `groups`), in receiver order.
fn free_messages(ranks: &[Vec<ROp>], hinted: &HashSet<u32>, groups: bool) -> Vec<Message> {
    let grouped = |op: &ROp| op.group.is_some() && !groups;
    let free = |op: &ROp| !grouped(op) && !hinted.contains(&op.source);
    // Messages per group, in the sender's order.
    let mut sends: HashMap<(u32, u32, u32), Vec<(u32, usize)>> = HashMap::default();
    for (r, ops) in ranks.iter().enumerate() {
        for (i, op) in ops.iter().enumerate() {
            if let (false, Some((q, _))) = (grouped(op), op.send) {
                sends
                    .entry((r as u32, q, op.channel))
                    .or_default()
                    .push((r as u32, i));
            }
        }
    }
    let mut messages: Vec<Message> = Vec::new();
    let mut taken: HashMap<(u32, u32, u32), usize> = HashMap::default();
    for (r, ops) in ranks.iter().enumerate() {
        for (i, op) in ops.iter().enumerate() {
            let Some((p, _)) = op.recv.filter(|_| !grouped(op)) else {
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
    messages
}

/// The channel numbering of the module docs, for groups of at most `per_group` channels.
struct Numbering {
    first: u32,
    home_rank: HashMap<u32, u32>,
    per_group: u32,
}

impl Numbering {
    fn new(ranks: &[Vec<ROp>], messages: &[Message], per_group: u32) -> Numbering {
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
        let home_rank = homes
            .iter()
            .enumerate()
            .map(|(k, &h)| (h, k as u32))
            .collect();
        Numbering {
            first,
            home_rank,
            per_group,
        }
    }

    /// Channel `index` (below `per_group`) of the groups whose home channel is `home`.
    fn channel(&self, home: u32, index: u32) -> u32 {
        if index == 0 {
            home
        } else {
            let home_rank = self.home_rank.get(&home).copied().unwrap_or(0);
            self.first + (index - 1) + home_rank * (self.per_group - 1)
        }
    }
}

/// The folded ops `ranks` with channels given by the compiler to transfers whose source
/// is not in `hinted`, or `None` when that changes nothing; `levels` are the ops' levels
/// ([`super::schedule::levels`]).
pub(super) fn assign(
    l: &Lowering<'_>,
    ranks: &[Vec<ROp>],
    levels: &[Vec<u32>],
    hinted: &HashSet<u32>,
    per_pair: u32,
) -> Option<Vec<Vec<ROp>>> {
    let per_pair = per_pair.clamp(1, CHUNK_CHANNELS);
    let (messages, forwarded) = free_and_forwarded(l, ranks, hinted, false)?;
    let numbering = Numbering::new(ranks, &messages, per_pair);
    let messages = by_level(messages, levels);
    // Per group, per channel index: the level after its last message, if it has one.
    let mut busy: HashMap<(u32, u32, u32), Vec<Option<u32>>> = HashMap::default();
    // Channel index each receive got, to keep a forwarding chain on it.
    let mut index_of_recv: HashMap<(u32, usize), u32> = HashMap::default();
    let mut out = ranks.to_vec();
    let mut changed = false;
    for ((sr, si), (rr, ri)) in messages {
        let send = &ranks[sr as usize][si];
        let home = send.channel;
        let level = levels[sr as usize][si];
        let slots = busy
            .entry((sr, rr, home))
            .or_insert_with(|| vec![None; per_pair as usize]);
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
        let channel = numbering.channel(home, k as u32);
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
fn forwarded_from(l: &Lowering<'_>, ranks: &[Vec<ROp>]) -> Forwarded {
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

/// Channels a chunk's path may spread over in [`by_chunk`], per home channel.
pub const CHUNK_CHANNELS: u32 = 16;

/// Channels by chunk (a candidate beside [`assign`], as MSCCL gives each chunk a channel):
/// a message that forwards what its sender received (exactly: [`forwarded_from`]) takes
/// the channel of the message it forwards, any other the channel its source's chunk
/// offset gives (modulo [`CHUNK_CHANNELS`]). So a chunk's whole path (a reduce-scatter
/// ring, a hand-off to another phase, its way back) is on one channel, where a receive
/// fuses with whichever send forwards it; with [`assign`]'s channels a receive side
/// carrying the chunks a rank passes on along a ring also carries the one it hands to
/// another peer, and only one of those pairs of sides can share a block. Same numbering
/// and invariant as [`assign`]; `None` when no receive side has that conflict (no two of
/// its messages are forwarded to different sets of peers: a ring passes everything on to
/// one peer, a tree node every message to the same children), where a channel per chunk
/// would only add connections, or when nothing changes. With `always`, also without that
/// conflict, and switch-group ops too: a head node's receives of one chunk then share a
/// channel apart from the results it gets back, which blocks of several peers
/// (`merge_peers.rs`) need (no executor runs a group as one op, so its members may move).
pub(super) fn by_chunk(
    l: &Lowering<'_>,
    ranks: &[Vec<ROp>],
    levels: &[Vec<u32>],
    hinted: &HashSet<u32>,
    always: bool,
) -> Option<Vec<Vec<ROp>>> {
    let (messages, forwarded) = free_and_forwarded(l, ranks, hinted, always)?;
    // Per receive (rank, index), the peers its data is forwarded to; then per receive side
    // (rank, peer, channel), the first such set seen and whether another differs.
    let mut forwards: HashMap<(u32, usize), BTreeSet<u32>> = HashMap::default();
    for (r, ops) in ranks.iter().enumerate() {
        for (op, from) in ops.iter().zip(&forwarded[r]) {
            if let (Some(ri), Some((q, _))) = (*from, op.send) {
                forwards.entry((r as u32, ri)).or_default().insert(q);
            }
        }
    }
    let mut side_forwards: HashMap<(u32, u32, u32), &BTreeSet<u32>> = HashMap::default();
    let split = forwards.iter().any(|(&(r, ri), peers)| {
        let op = &ranks[r as usize][ri];
        let side = (r, op.recv.map_or(u32::MAX, |(p, _)| p), op.channel);
        *side_forwards.entry(side).or_insert(peers) != peers
    });
    if !split && !always {
        return None;
    }
    let numbering = Numbering::new(ranks, &messages, CHUNK_CHANNELS);
    // A forward comes after the receive it forwards (its level is higher), so messages in
    // level order meet the message they forward first.
    let messages = by_level(messages, levels);
    let mut index_of_recv: HashMap<(u32, usize), u32> = HashMap::default();
    let mut out = ranks.to_vec();
    let mut changed = false;
    for ((sr, si), (rr, ri)) in messages {
        let send = &ranks[sr as usize][si];
        let own = send
            .src
            .map_or(0, |s| (s.1 % u64::from(CHUNK_CHANNELS)) as u32);
        let k = forwarded[sr as usize][si]
            .and_then(|r| index_of_recv.get(&(sr, r)).copied())
            .unwrap_or(own);
        index_of_recv.insert((rr, ri), k);
        let channel = numbering.channel(send.channel, k);
        if channel != send.channel {
            changed = true;
            out[sr as usize][si].channel = channel;
            out[rr as usize][ri].channel = channel;
        }
    }
    changed.then_some(out)
}
