//! Scratch renaming (the candidates with [`super::Channels::Renamed`]): a write that
//! overwrites a scratch chunk holding an earlier value goes to a fresh copy of that chunk,
//! a *version*, and every later read of the chunk reads the version last written.
//!
//! Why: a program that reuses a scratch buffer orders every write after the reads of the
//! value before it (write after read) and after the earlier write (write after write),
//! though no data flows between them. Bruck's all-to-all refills the positions of its work
//! buffer at every step: a position's receive must wait for that position's send, so its
//! longest chain of hazards holds 2 log2 n transfers where its data needs log2 n. Renamed,
//! only the data's own dependences remain, and copy folding then lets each receive land
//! where the next send reads it.
//!
//! Versions are whole buffers appended to the program's buffer list (`{name}'1`,
//! `{name}'2`, ...), each as large as the buffer it copies, and a chunk keeps its offset in
//! every version, so a run of chunks written together stays a run. A buffer gets at most
//! [`MAX_VERSIONS`] versions (a chunk written more often than that reuses its last one, with
//! the hazards that brings), and the plan keeps only the versions some op touches. Renaming
//! runs only where transfers are cut into chunks (`split.rs`): a transfer of several chunks
//! may read chunks of different versions, which one contiguous slice cannot name.
//!
//! Invariant: every op reads the location that holds, at that point of the rank's program
//! order, the value the program's op read; `input` and `output` are never renamed, and
//! neither is a chunk that a switch-group op touches (its members must agree on offsets) or
//! that an op combines in place. Renaming only changes where ops read and write, never their
//! order or their messages, so both ends of every connection still agree.

use super::ROp;
use crate::elaborate::{BufId, Buffer, Elaborated};
use crate::plan::{OpKind, Slice};
use coll_lang::ast::TransferOp;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

/// Versions a scratch buffer gets at most: Bruck's all-to-all at n = 16 writes a work
/// position at most five times (its rotation and four steps).
pub const MAX_VERSIONS: u32 = 4;

/// Chunk writes over all ranks above which renaming is not tried (it runs only where
/// transfers are cut into chunks, which has a limit of the same size).
const WRITE_LIMIT: u64 = super::choose::SPLIT_OP_LIMIT as u64;

/// For each buffer of `e`, the versions renaming would give it: for a scratch buffer, one
/// fewer than the most copies (transfers or local) into one of its chunks on one rank, at
/// most [`MAX_VERSIONS`]; 0 for `input` and `output`. `None` when no buffer gets one, or the
/// program writes more than a few thousand chunks.
pub(super) fn versions(e: &Elaborated) -> Option<Vec<u32>> {
    // Only scratch buffers get versions: without one, no pass over the program (memory-
    // bound: about 20 ms at n = 1024 for ring allreduce).
    if e.buffers.len() <= 2 {
        return None;
    }
    let scratch = |b: BufId| b.index() >= 2;
    let mut total = 0u64;
    for op in &e.ops {
        if op.kind == TransferOp::Copy && scratch(op.dst.buffer) {
            total += u64::from(op.count) * u64::from(op.dst.ranks.len());
        }
    }
    if total == 0 || total > WRITE_LIMIT {
        return None;
    }
    let mut writes: HashMap<(u32, u32, u32), u32> = HashMap::default();
    let mut out = vec![0u32; e.buffers.len()];
    for op in &e.ops {
        if op.kind != TransferOp::Copy || !scratch(op.dst.buffer) {
            continue;
        }
        for r in op.dst.ranks.ranks() {
            for i in op.dst.index..op.dst.index + op.count {
                let w = writes.entry((op.dst.buffer.0, r.0, i)).or_insert(0);
                *w += 1;
                let b = op.dst.buffer.index();
                out[b] = out[b].max((*w - 1).min(MAX_VERSIONS));
            }
        }
    }
    out.iter().any(|&v| v > 0).then_some(out)
}

/// `e` with the versions `versions` asks for appended to its buffers, and for each buffer
/// the indices of its versions in order (empty for most).
pub(super) fn with_versions(e: &Elaborated, versions: &[u32]) -> (Elaborated, Vec<Vec<u32>>) {
    let mut e = e.clone();
    let declared = e.buffers.len();
    let mut of = vec![Vec::new(); declared];
    for (b, &v) in versions.iter().enumerate().take(declared) {
        for k in 1..=v {
            of[b].push(e.buffers.len() as u32);
            let Buffer { name, chunks } = &e.buffers[b];
            e.buffers.push(Buffer {
                name: format!("{name}'{k}"),
                chunks: *chunks,
            });
        }
    }
    of.resize(e.buffers.len(), Vec::new());
    (e, of)
}

/// What renaming knows of one rank's scratch chunks.
struct State<'a> {
    /// Buffer -> its versions' buffer indices.
    versions: &'a [Vec<u32>],
    /// (buffer, offset) -> the version holding its value (0: the buffer itself), for every
    /// renamable chunk written so far. A chunk's versions are given out in order and its
    /// value is always in the last one given, so this is also how many it has had.
    current: HashMap<(u32, u64), u32>,
    /// Chunks never renamed.
    frozen: HashSet<(u32, u64)>,
    /// Whether some op now reads or writes a version.
    changed: bool,
}

impl State<'_> {
    fn renamable(&self, c: (u32, u64)) -> bool {
        self.versions
            .get(c.0 as usize)
            .is_some_and(|v| !v.is_empty())
            && !self.frozen.contains(&c)
    }

    fn current(&self, c: (u32, u64)) -> u32 {
        self.current.get(&c).copied().unwrap_or(0)
    }

    /// The version each chunk of `s` (`count` chunks) holds its value in, if they agree.
    fn read_version(&self, Slice(b, o): Slice, count: u32) -> Option<u32> {
        agree((0..u64::from(count)).map(|i| self.current((b, o + i))))
    }

    /// The version a write of each chunk of `s` goes to, if they agree: a chunk written
    /// before gets a version it has not had, while there are any.
    fn write_version(&self, Slice(b, o): Slice, count: u32) -> Option<u32> {
        let max = self.versions.get(b as usize).map_or(0, |v| v.len() as u32);
        agree((0..u64::from(count)).map(|i| {
            let c = (b, o + i);
            match self.current.get(&c) {
                Some(&v) if self.renamable(c) && v < max => v + 1,
                _ => self.current(c),
            }
        }))
    }

    /// `s` in version `v`.
    fn at(&mut self, s: Slice, v: u32) -> Slice {
        if v == 0 {
            return s;
        }
        self.changed = true;
        Slice(self.versions[s.0 as usize][v as usize - 1], s.1)
    }

    /// Where `op` reads `s` from, or `None` when its chunks are in several versions.
    fn read(&mut self, s: Slice, count: u32) -> Option<Slice> {
        let v = self.read_version(s, count)?;
        Some(self.at(s, v))
    }

    /// `op` renamed, or `None` when its chunks are of several versions (then it must be cut).
    fn rename(&mut self, op: &ROp) -> Option<ROp> {
        let mut out = op.clone();
        if let Some(s) = op.reads_src() {
            out.src = Some(self.read(s, op.count)?);
        }
        let Some(d) = op.writes() else {
            return Some(out);
        };
        // Combined in place (a local reduce, or a receive-reduce into its own source): it
        // stays where its value is.
        let in_place = op.kind == OpKind::Reduce || op.reads_src() == Some(d);
        let v = if in_place {
            self.read_version(d, op.count)?
        } else {
            self.write_version(d, op.count)?
        };
        out.dst = Some(self.at(d, v));
        if in_place && op.kind != OpKind::Reduce {
            out.src = out.dst;
        }
        for i in 0..u64::from(op.count) {
            let c = (d.0, d.1 + i);
            if self.renamable(c) {
                self.current.insert(c, v);
            }
        }
        Some(out)
    }
}

/// The one value `vs` holds, if they all agree (and there is one).
fn agree(vs: impl Iterator<Item = u32>) -> Option<u32> {
    let mut one = None;
    for v in vs {
        if *one.get_or_insert(v) != v {
            return None;
        }
    }
    one
}

/// One rank's ops (transfers already cut into chunks) with scratch renamed, local ops of
/// several chunks cut where their chunks are of different versions; `None` when a transfer
/// of several chunks would need cutting, or nothing was renamed.
pub(super) fn rename_rank(ops: &[ROp], versions: &[Vec<u32>]) -> Option<Vec<ROp>> {
    let mut frozen = HashSet::default();
    for op in ops.iter().filter(|o| o.group.is_some()) {
        for s in [op.src, op.dst].into_iter().flatten() {
            for i in 0..u64::from(op.count) {
                frozen.insert((s.0, s.1 + i));
            }
        }
    }
    let mut st = State {
        versions,
        current: HashMap::default(),
        frozen,
        changed: false,
    };
    let mut out = Vec::with_capacity(ops.len());
    for op in ops {
        if let Some(r) = st.rename(op) {
            out.push(r);
            continue;
        }
        let local = op.send.is_none() && op.recv.is_none();
        if !local || op.count < 2 {
            return None;
        }
        for piece in super::split::pieces(op) {
            out.push(st.rename(&piece)?);
        }
    }
    st.changed.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Via;

    /// Buffers: 0 input, 1 output, 2 scratch `s` with versions 3 and 4.
    fn versions() -> Vec<Vec<u32>> {
        vec![vec![], vec![], vec![3, 4], vec![], vec![]]
    }

    fn send(src: Slice, count: u32) -> ROp {
        ROp {
            kind: OpKind::Send,
            src: Some(src),
            dst: None,
            count,
            send: Some((1, Via::Switch)),
            recv: None,
            channel: 0,
            source: 0,
            group: None,
            protocol: None,
        }
    }

    fn recv(kind: OpKind, src: Option<Slice>, dst: Slice, count: u32) -> ROp {
        ROp {
            kind,
            src,
            dst: Some(dst),
            count,
            send: None,
            recv: Some((1, Via::Switch)),
            channel: 0,
            source: 0,
            group: None,
            protocol: None,
        }
    }

    fn copy(src: Slice, dst: Slice, count: u32) -> ROp {
        ROp::local(OpKind::Copy, (src, dst), count, 0, 0, None)
    }

    fn shape(ops: &[ROp]) -> Vec<(OpKind, Option<Slice>, Option<Slice>, u32)> {
        ops.iter()
            .map(|o| (o.kind, o.src, o.dst, o.count))
            .collect()
    }

    #[test]
    fn an_overwrite_goes_to_a_new_version_and_later_reads_follow_it() {
        let s = |o| Slice(2, o);
        let ops = [
            copy(Slice(0, 0), s(0), 2),
            send(s(0), 2),
            recv(OpKind::Recv, None, s(0), 2),
            send(s(0), 2),
            recv(OpKind::Recv, None, s(0), 2),
            recv(OpKind::Recv, None, s(0), 2),
            copy(s(0), Slice(1, 0), 2),
        ];
        let out = rename_rank(&ops, &versions()).expect("renamed");
        assert_eq!(
            shape(&out),
            [
                // The first write of a chunk stays where it is.
                (OpKind::Copy, Some(Slice(0, 0)), Some(s(0)), 2),
                (OpKind::Send, Some(s(0)), None, 2),
                (OpKind::Recv, None, Some(Slice(3, 0)), 2),
                (OpKind::Send, Some(Slice(3, 0)), None, 2),
                (OpKind::Recv, None, Some(Slice(4, 0)), 2),
                // Out of versions: the last one is reused, hazards and all.
                (OpKind::Recv, None, Some(Slice(4, 0)), 2),
                (OpKind::Copy, Some(Slice(4, 0)), Some(Slice(1, 0)), 2),
            ]
        );
    }

    #[test]
    fn accumulations_stay_where_their_value_is_and_output_is_never_renamed() {
        let s = |o| Slice(2, o);
        let ops = [
            copy(Slice(0, 0), s(0), 1),
            recv(OpKind::Recv, None, s(0), 1),
            recv(OpKind::RecvReduceCopy, Some(s(0)), s(0), 1),
            ROp::local(OpKind::Reduce, (Slice(0, 1), s(0)), 1, 0, 0, None),
            copy(s(0), Slice(1, 0), 1),
            copy(Slice(0, 1), Slice(1, 0), 1),
        ];
        let out = rename_rank(&ops, &versions()).expect("renamed");
        let v1 = Some(Slice(3, 0));
        assert_eq!(
            shape(&out),
            [
                (OpKind::Copy, Some(Slice(0, 0)), Some(s(0)), 1),
                (OpKind::Recv, None, v1, 1),
                (OpKind::RecvReduceCopy, v1, v1, 1),
                (OpKind::Reduce, Some(Slice(0, 1)), v1, 1),
                (OpKind::Copy, v1, Some(Slice(1, 0)), 1),
                (OpKind::Copy, Some(Slice(0, 1)), Some(Slice(1, 0)), 1),
            ]
        );
    }

    #[test]
    fn a_local_copy_over_chunks_of_two_versions_is_cut_and_a_transfer_is_not() {
        let s = |o| Slice(2, o);
        let ops = vec![
            copy(Slice(0, 0), s(0), 2),
            send(s(1), 1),
            recv(OpKind::Recv, None, s(1), 1),
            copy(s(0), Slice(1, 0), 2),
        ];
        let out = rename_rank(&ops, &versions()).expect("renamed");
        assert_eq!(
            shape(&out[3..]),
            [
                (OpKind::Copy, Some(s(0)), Some(Slice(1, 0)), 1),
                (OpKind::Copy, Some(Slice(3, 1)), Some(Slice(1, 1)), 1),
            ]
        );
        let mut sends = ops;
        sends[3] = send(s(0), 2);
        assert!(rename_rank(&sends, &versions()).is_none());
    }

    #[test]
    fn nothing_overwritten_is_nothing_renamed() {
        let s = |o| Slice(2, o);
        let ops = [copy(Slice(0, 0), s(0), 2), send(s(0), 2)];
        assert!(rename_rank(&ops, &versions()).is_none());
    }
}
