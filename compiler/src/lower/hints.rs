//! Warnings about `with channel` hints the lowering cannot honour. A hint is never
//! silently dropped: the lowering keeps every hinted transfer on its channel (the
//! compiler's channels, `channels.rs`, move only unhinted ones), so what it cannot honour
//! is what the hint asks beyond that: a hint that puts a send on another channel than the
//! receive whose chunks it forwards. A block serves one channel, so the two cannot fuse into
//! one recv-copy-send (or recv-reduce-send), and the forwarded data waits for a second
//! block. (A hint on a local copy or reduce is honoured: it picks the block of its channel,
//! e.g. a block apart from the transfers.)
//!
//! Invariant: one warning per statement and kind, in source order, each on the span of the
//! statement that carries the hint.

use super::{Chunks, Lowering, ROp};
use coll_lang::Span;
use rustc_hash::FxHashSet as HashSet;
use std::collections::BTreeMap;

/// A warning on a line of the program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    /// The statement it is about.
    pub span: Span,
    pub message: String,
}

/// The warnings of the folded ops `ranks` (see the module docs).
pub(super) fn warnings(l: &Lowering<'_>, ranks: &[Vec<ROp>]) -> Vec<Warning> {
    let hinted = hinted_statements(l);
    if hinted.is_empty() {
        return Vec::new();
    }
    let mut out = Found::new();
    for (r, ops) in ranks.iter().enumerate() {
        rank_warnings(l, r as u32, ops, &hinted, &mut out);
    }
    out.into_values().collect()
}

/// Warnings keyed by (span start, kind), so they come out in source order; the first
/// rank to find one words it.
pub(super) type Found = BTreeMap<(usize, u8), Warning>;

/// The warnings of rank `r`'s folded ops, added to `out` where not found before.
pub(super) fn rank_warnings(
    l: &Lowering<'_>,
    r: u32,
    ops: &[ROp],
    hinted: &HashSet<Span>,
    out: &mut Found,
) {
    let span_of = |source: u32| l.spans.get(source as usize).copied();
    // Hinted sends that forward a receive of another channel, where none of that receive's
    // forwards shares its channel: a receive fuses with one forward at most, so when one
    // does, the others run apart whatever their channels (a tree node with two children).
    let chunks = Chunks::new(l, r, l.e.inplace);
    let mut writer: Vec<usize> = vec![usize::MAX; chunks.total as usize];
    // Per forwarded receive (by op index), its forwarding sends (by op index).
    let mut forwards: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (i, op) in ops.iter().enumerate() {
        if let (Some(src), Some(_), None) = (op.src, op.send, op.group) {
            let w = chunks.ids(src, op.count).map(|c| writer[c as usize]).next();
            if let Some(w) = w.filter(|&w| w != usize::MAX)
                && let x = &ops[w]
                && x.recv.is_some()
                && x.group.is_none()
                && x.dst == op.src
                && x.count == op.count
            {
                forwards.entry(w).or_default().push(i);
            }
        }
        if let Some(d) = op.writes() {
            for c in chunks.ids(d, op.count) {
                writer[c as usize] = i;
            }
        }
    }
    for (w, sends) in forwards {
        let recv = &ops[w];
        if sends.iter().any(|&i| ops[i].channel == recv.channel) {
            continue;
        }
        for i in sends {
            let op = &ops[i];
            if let (Some(span), Some(from)) = (span_of(op.source), span_of(recv.source))
                && (hinted.contains(&span) || hinted.contains(&from))
            {
                let at = if hinted.contains(&span) { span } else { from };
                out.entry((at.start as usize, 1))
                    .or_insert_with(|| Warning {
                        span: at,
                        message: format!(
                            "`with channel` cannot be honoured together with fusion: rank {r} \
                             receives on channel {} and forwards the same chunks on channel {} \
                             (a block serves one channel), so the receive and the send run as \
                             two ops in two blocks; give both statements the same channel",
                            recv.channel, op.channel
                        ),
                    });
            }
        }
    }
}

/// The statements with a `with channel` hint, by span (the header's `channel E;` is a
/// default, not a hint on a statement).
pub(super) fn hinted_statements(l: &Lowering<'_>) -> HashSet<Span> {
    l.e.ops
        .iter()
        .filter(|op| op.channel != u16::MAX)
        .map(|op| op.span)
        .collect()
}
