//! Transfers and postconditions: one chunk operation from evaluated operands, with its
//! shape, range and aliasing checks, and the `expect` lines of `ensure`.

use super::*;

impl Interp<'_, '_> {
    /// One chunk operation from evaluated operands (with their spans). Inlined into its one
    /// caller, which runs it for every transfer: the operands are not copied for a call.
    #[inline(always)]
    pub(super) fn transfer(
        &mut self,
        op: TransferOp,
        (s, src_span): (ChunkVal, Span),
        (d, dst_span): (ChunkVal, Span),
        via: Option<Via>,
        hints: &[Hint],
        span: Span,
    ) -> R<()> {
        let ir = self.ir;
        let Some((s_index, s_count)) = s.index else {
            return Err(self.error(CompileError::MissingIndex, src_span));
        };
        let (d_index, d_count) = d.index.unwrap_or((s_index, s_count));
        if s_count != d_count {
            return Err(self
                .error(
                    CompileError::CountMismatch {
                        src: u64::from(s_count),
                        dst: u64::from(d_count),
                    },
                    src_span,
                )
                .with_label(format!("{s_count} chunk{}", plural(s_count)))
                .with_secondary(dst_span, format!("{d_count} chunk{}", plural(d_count)))
                .into());
        }
        // A destination that left out its index takes the source's, which must fit.
        if d.index.is_none() {
            let last = i64::from(d_index) + i64::from(d_count) - 1;
            self.check_index(d.buffer, last, dst_span).map_err(|e| {
                Box::new(e.with_note(format!(
                    "the destination leaves out its index, so it takes the source's: {}",
                    show_range(d_index, d_count)
                )))
            })?;
        }
        if s.ranks.is_multi() && d.ranks.is_multi() {
            return Err(self
                .error(CompileError::GroupOnBothSides, src_span)
                .with_label(format!("ranks {}..{}", s.ranks.start, s.ranks.end))
                .with_secondary(
                    dst_span,
                    format!("ranks {}..{}", d.ranks.start, d.ranks.end),
                )
                .into());
        }
        if op == TransferOp::Copy && s.ranks.is_multi() {
            return Err(self
                .error(CompileError::CopyFromGroup, src_span)
                .with_label(format!("ranks {}..{}", s.ranks.start, s.ranks.end))
                .into());
        }
        if op == TransferOp::Reduce && !s.ranks.is_multi() && !d.ranks.is_multi() {
            self.reduce_onto_itself(s.loc(s_index), d.loc(d_index), src_span, dst_span, span)?;
        }
        if d.buffer == BufId::INPUT && !self.setup.inplace {
            return Err(self
                .error(CompileError::WriteToInput, dst_span)
                .with_label("written here")
                .with_note(
                    "declare `inplace;` in the header, or write to `output` or a scratch buffer",
                )
                .into());
        }
        let (mut channel, mut pipeline, mut protocol) = (u16::MAX, 0, None);
        for h in hints {
            match *h {
                Hint::Channel(e) => {
                    channel = self.hint_int("channel", e, 0, ir.expr(e).1)? as u16;
                }
                Hint::Pipeline(e) => {
                    pipeline = self.hint_int("pipeline", e, 1, ir.expr(e).1)? as u16;
                }
                Hint::Protocol(p) => protocol = Some(p),
                Hint::Instances(e) => {
                    return Err(self.error(
                        CompileError::Internal("instances on a transfer".into()),
                        ir.expr(e).1,
                    ));
                }
            }
        }
        if self.ops_before + self.ops.len() >= self.setup.options.op_limit {
            let limit = self.setup.options.op_limit;
            return Err(self
                .error(CompileError::OpLimit { limit }, span)
                .with_label("the operation past the limit")
                .with_note(format!(
                    "checking and compiling keep about {} bytes per operation: {} at this limit; raise it with `--op-limit OPS`",
                    super::super::BYTES_PER_OP,
                    super::super::memory_estimate(limit as u64)
                ))
                .into());
        }
        if self.setup.options.capture_op == Some(self.ops_before + self.ops.len()) {
            self.captured = self.context();
        }
        self.ops.push(ChunkOp {
            kind: op,
            src: s.loc(s_index),
            dst: d.loc(d_index),
            count: s_count,
            via,
            protocol,
            channel,
            pipeline,
            span,
        });
        // A block is complete (`made` is at least 1: an op was just pushed).
        let made = self.ops.len();
        if made.is_multiple_of(super::super::STREAM_BLOCK)
            && let (Some(sink), Some(header)) = (self.sink.as_mut(), &self.header)
        {
            sink(header, &self.ops[made - super::super::STREAM_BLOCK..]);
        }
        Ok(())
    }

    /// A one-to-one `reduce` whose source and destination are the same chunk (by name, or
    /// through the in-place aliasing of `input` and `output`) would add a chunk's value to
    /// itself: an error, as every combination of a contribution already held is.
    pub(super) fn reduce_onto_itself(
        &self,
        s: Loc,
        d: Loc,
        src_span: Span,
        dst_span: Span,
        span: Span,
    ) -> R<()> {
        let setup = self.setup;
        let k = self.k;
        let phys = |l: Loc| {
            crate::layout::alias(
                setup.kind,
                setup.inplace,
                k,
                l.buffer.index(),
                u64::from(l.ranks.start),
                u64::from(l.index),
            )
        };
        if s.ranks.start != d.ranks.start || phys(s) != phys(d) {
            return Ok(());
        }
        let ir = self.ir;
        let mut e = self
            .error(
                CompileError::ReduceOntoItself {
                    buffer: ir.buffer_name(d.buffer).to_string(),
                    rank: d.ranks.start,
                    chunk: u64::from(d.index),
                },
                span,
            )
            .with_label("source and destination are the same chunk");
        if s.buffer != d.buffer {
            e = e
                .with_secondary(
                    src_span,
                    format!(
                        "{}[{}][{}]",
                        ir.buffer_name(s.buffer),
                        s.ranks.start,
                        s.index
                    ),
                )
                .with_secondary(
                    dst_span,
                    format!(
                        "{}[{}][{}]",
                        ir.buffer_name(d.buffer),
                        d.ranks.start,
                        d.index
                    ),
                )
                .with_note("in place, `input` and `output` share storage, so these are one chunk");
        }
        Err(e
            .with_note("combining what a chunk already holds counts it twice; a `reduce` needs another chunk as its source")
            .into())
    }

    pub(super) fn expect(&mut self, dst: ExprId, srcs: &[ExprId], span: Span) -> R<()> {
        let ir = self.ir;
        let d = self.chunk(dst)?;
        let Some((d_index, d_count)) = d.index else {
            return Err(self.error(CompileError::MissingIndex, ir.expr(dst).1));
        };
        let mut locs = Vec::with_capacity(srcs.len());
        for &e in srcs {
            let s = self.chunk(e)?;
            let e_span = ir.expr(e).1;
            if s.buffer != BufId::INPUT {
                return Err(self.error(
                    CompileError::ExpectSourceNotInput {
                        buffer: ir.buffer_name(s.buffer).to_string(),
                    },
                    e_span,
                ));
            }
            let Some((s_index, s_count)) = s.index else {
                return Err(self.error(CompileError::MissingIndex, e_span));
            };
            if s_count != d_count {
                return Err(self.error(
                    CompileError::CountMismatch {
                        src: u64::from(s_count),
                        dst: u64::from(d_count),
                    },
                    span,
                ));
            }
            locs.push(s.loc(s_index));
        }
        self.expects.push(Expect {
            dst: d.loc(d_index),
            count: d_count,
            srcs: locs,
            span,
        });
        Ok(())
    }
}
