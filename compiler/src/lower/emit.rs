//! Steps 1 and 2 of the lowering (see the parent module): the program's chunk operations,
//! replicated over instances and cut into pipeline pieces, become per-rank ops over the
//! topology's routes, each with its source index.
//!
//! Invariant: ops are pushed in program order on every rank, a send and its receive
//! together, so the k-th send on a connection (rank, peer, channel) pairs with the peer's
//! k-th receive on it (which `schedule.rs` relies on to find transfers again).

use super::{Diag, Lowering, ROp};
use crate::elaborate::{ChunkOp, OpKind as TransferKind, Via as ViaHint};
use crate::error::CompileError;
use crate::layout::alias;
use crate::plan::{OpKind, Slice, Via};
use coll_lang::{Diagnostic, Span};

impl Lowering<'_> {
    pub(super) fn source(&mut self, span: Span) -> u32 {
        if let Some((s, i)) = self.last_source
            && s == span
        {
            return i;
        }
        if let Some(&i) = self.source_of.get(&span) {
            self.last_source = Some((span, i));
            return i;
        }
        let i = self.sources.len() as u32;
        self.sources.push(self.file.location(span));
        self.spans.push(span);
        self.source_of.insert(span, i);
        self.last_source = Some((span, i));
        i
    }

    pub(super) fn pipeline_of(&self, op: &ChunkOp) -> u64 {
        if op.pipeline > 0 {
            u64::from(op.pipeline)
        } else {
            u64::from(self.e.pipeline.max(1))
        }
    }

    /// Step 1: instances, pipelined regions, pieces.
    pub(super) fn emit_all(&mut self) -> Result<(), Diag> {
        let e = self.e;
        let ops = &e.ops;
        for instance in 0..e.instances {
            let mut start = 0;
            while start < ops.len() {
                let p = self.pipeline_of(&ops[start]);
                let mut end = start + 1;
                while end < ops.len() && self.pipeline_of(&ops[end]) == p {
                    end += 1;
                }
                for piece in 0..p {
                    for op in &ops[start..end] {
                        self.emit_pieces(op, instance, piece, p)?;
                    }
                }
                start = end;
            }
        }
        Ok(())
    }

    fn emit_pieces(&mut self, op: &ChunkOp, instance: u32, piece: u64, p: u64) -> Result<(), Diag> {
        let g = self.pieces;
        let part = self.depth; // plan chunks per instance part of a chunk
        let size = part / p;
        let base_channel = if op.channel == u16::MAX {
            self.e.channel.unwrap_or(0)
        } else {
            u32::from(op.channel)
        };
        let channel = base_channel + instance * self.channels_per_instance;
        let at = |index: u32, o: u64| {
            u64::from(index + o as u32) * g + u64::from(instance) * part + piece * size
        };
        if g == 1 {
            // No splitting: one unit covers the whole range.
            return self.emit_unit(
                op,
                u64::from(op.src.index),
                u64::from(op.dst.index),
                op.count,
                channel,
            );
        }
        for o in 0..u64::from(op.count) {
            self.emit_unit(
                op,
                at(op.src.index, o),
                at(op.dst.index, o),
                size as u32,
                channel,
            )?;
        }
        Ok(())
    }

    fn via(&mut self, op: &ChunkOp, from: u32, to: u32) -> Result<Via, Diag> {
        let topo = self.topo;
        let from_routes = self.routes[from as usize]
            .get_or_insert_with(|| super::routes_from(topo, from, &super::Peers::Many));
        let route = from_routes.get(to as usize).copied().flatten();
        // Routes are found up front only to the peers a rank was seen to send to: ask the
        // topology itself before reporting that there is none.
        let route = route.or_else(|| {
            super::routes_from(topo, from, &super::Peers::Few([to].into_iter().collect()))
                .get(to as usize)
                .copied()
                .flatten()
        });
        let Some(via) = route else {
            return Err(Box::new(
                Diagnostic::new(
                    CompileError::NoPath {
                        from,
                        to,
                        topology: topo.name().to_string(),
                    },
                    op.span,
                )
                .with_label("this transfer")
                .with_note(format!(
                    "the operation: {}",
                    crate::verify::describe_op(self.e, op)
                )),
            ));
        };
        let fits = match op.via {
            None => true,
            Some(ViaHint::Switch) => via == Via::Switch,
            Some(ViaHint::NvLink) => matches!(via, Via::Nvlink | Via::Switch),
            Some(ViaHint::Net) => via == Via::Net,
        };
        if !fits {
            let asked = op.via.map_or("", |v| v.name());
            return Err(Box::new(
                Diagnostic::new(
                    CompileError::ViaMismatch {
                        asked: asked.to_string(),
                        from,
                        to,
                        found: via.name().to_string(),
                    },
                    op.span,
                )
                .with_label(format!("asks for `via {asked}`"))
                .with_note(format!(
                    "the operation: {}",
                    crate::verify::describe_op(self.e, op)
                )),
            ));
        }
        Ok(via)
    }

    fn push(&mut self, rank: u32, op: ROp) {
        self.ranks[rank as usize].push(op);
    }

    /// Step 2: one program transfer (one piece) -> per-rank ops.
    fn emit_unit(
        &mut self,
        op: &ChunkOp,
        src_at: u64,
        dst_at: u64,
        count: u32,
        channel: u32,
    ) -> Result<(), Diag> {
        let source = self.source(op.span);
        let src = Slice(op.src.buffer.0, src_at);
        let dst = Slice(op.dst.buffer.0, dst_at);
        let local = |kind: OpKind, s: Slice, d: Slice| {
            ROp::local(kind, (s, d), count, channel, source, op.protocol)
        };
        let reduce = op.kind == TransferKind::Reduce;
        let (sr, dr) = (op.src.ranks, op.dst.ranks);
        let multi = sr.is_multi() || dr.is_multi();
        let group = if multi {
            self.groups += 1;
            Some(self.groups - 1)
        } else {
            None
        };
        let k = self.e.chunk_factor * self.pieces;
        let same = |r: u32, a: Slice, b: Slice| {
            alias(
                self.e.kind,
                self.e.inplace,
                k,
                a.0 as usize,
                u64::from(r),
                a.1,
            ) == alias(
                self.e.kind,
                self.e.inplace,
                k,
                b.0 as usize,
                u64::from(r),
                b.1,
            )
        };
        if sr.is_multi() {
            // Many-to-one reduce: dst := combination of the sources.
            let d = dr.start;
            let d_in = (sr.start..sr.end).contains(&d);
            let mut first_received = !d_in;
            if d_in && !same(d, src, dst) {
                self.push(d, local(OpKind::Copy, src, dst));
            }
            for s in sr.start..sr.end {
                if s == d {
                    continue;
                }
                let kind = if first_received {
                    first_received = false;
                    OpKind::Recv
                } else {
                    OpKind::RecvReduceCopy
                };
                self.pair(op, s, d, src, dst, kind, count, channel, source, group)?;
            }
            return Ok(());
        }
        let s = sr.start;
        for d in dr.start..dr.end {
            if d == s {
                // A rank's own chunk in a one-to-one or one-to-many op.
                if !same(s, src, dst) {
                    let kind = if reduce { OpKind::Reduce } else { OpKind::Copy };
                    self.push(s, local(kind, src, dst));
                }
                continue;
            }
            let kind = if reduce {
                OpKind::RecvReduceCopy
            } else {
                OpKind::Recv
            };
            self.pair(op, s, d, src, dst, kind, count, channel, source, group)?;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn pair(
        &mut self,
        op: &ChunkOp,
        from: u32,
        to: u32,
        src: Slice,
        dst: Slice,
        kind: OpKind,
        count: u32,
        channel: u32,
        source: u32,
        group: Option<u32>,
    ) -> Result<(), Diag> {
        let via = self.via(op, from, to)?;
        self.push(
            from,
            ROp {
                kind: OpKind::Send,
                src: Some(src),
                dst: None,
                count,
                send: Some((to, via)),
                recv: None,
                channel,
                source,
                group,
                protocol: op.protocol,
            },
        );
        self.push(
            to,
            ROp {
                kind,
                src: (kind == OpKind::RecvReduceCopy).then_some(dst),
                dst: Some(dst),
                count,
                send: None,
                recv: Some((from, via)),
                channel,
                source,
                group,
                protocol: op.protocol,
            },
        );
        Ok(())
    }
}
