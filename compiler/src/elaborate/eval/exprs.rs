//! Expressions: values, checked arithmetic, built-ins, tables and chunk selectors.

use super::*;

impl Interp<'_, '_> {
    // ----- expressions -----

    /// An integer expression's value. The two common cases inline at the caller (a rank or
    /// index selector runs for every transfer): an expression with code, and a local that
    /// holds an integer (`r` of `input[r]`); the rest in `int_node`, whose frame is large.
    #[inline]
    pub(super) fn int(&mut self, e: ExprId) -> R<i64> {
        if let Some(code) = self.codes.get(e.index()).and_then(|c| c.as_deref()) {
            return self.run_int(code);
        }
        if let Expr::Local(slot) = self.ir.expr(e).0
            && let Some(v) = self.local_int_value(slot)
        {
            return Ok(v);
        }
        self.int_node(e)
    }

    /// `int` of an expression without code: node by node.
    #[inline(never)]
    fn int_node(&mut self, e: ExprId) -> R<i64> {
        // Integer leaves and arithmetic without building a `Value`: most of elaboration's
        // time goes to index expressions such as `(r - s - 1) % n`. The same operations
        // and errors as `eval` (`arith`), only faster.
        let ir = self.ir;
        match &ir.expr(e).0 {
            Expr::Int(v) => return Ok(*v),
            // A local holding an integer returned in `int`, this function's only caller.
            Expr::Const(Constant::RankCount) => return Ok(i64::from(self.n)),
            &Expr::Binary(op, a, b) if is_arith(op) => {
                let x = self.int(a)?;
                let y = self.int(b)?;
                return self.arith(op, x, y, b, ir.expr(e).1);
            }
            _ => {}
        }
        match self.eval(e)? {
            Value::Int(v) => Ok(v),
            other => Err(self.error(
                CompileError::Internal(format!("expected an int, found {other:?}")),
                self.ir.expr(e).1,
            )),
        }
    }

    /// Runs an integer expression's [`IntOp`] code: what `int` does node by node, in the
    /// same order, with the same errors.
    #[inline(never)]
    fn run_int(&mut self, code: &[IntOp]) -> R<i64> {
        let mut stack = [0i64; INT_STACK];
        let mut top = 0;
        for op in code {
            // `int_code` balances the code: an operator always has its values below it.
            let v = match *op {
                IntOp::Int(v) => v,
                IntOp::Local(slot, e) => self.local_int(slot, e)?,
                IntOp::RankCount => i64::from(self.n),
                IntOp::Arith(op, b, e) => {
                    top -= 2;
                    self.quick(op, stack[top], stack[top + 1], b, e)?
                }
                IntOp::ArithInt(op, y, b, e) => {
                    top -= 1;
                    self.quick(op, stack[top], y, b, e)?
                }
                IntOp::ArithRankCount(op, b, e) => {
                    top -= 1;
                    self.quick(op, stack[top], i64::from(self.n), b, e)?
                }
                IntOp::ArithLocal(op, slot, b, e) => {
                    let y = self.local_int(slot, b)?;
                    top -= 1;
                    self.quick(op, stack[top], y, b, e)?
                }
                IntOp::Other(e) => self.int(e)?,
            };
            stack[top] = v;
            top += 1;
        }
        Ok(stack[0])
    }

    /// `x op y` of [`IntOp::Arith`] and the like: the common operators where they cannot
    /// fail, inline; `arith` for the rest and for every error.
    #[inline]
    fn quick(&self, op: BinOp, x: i64, y: i64, b: ExprId, e: ExprId) -> R<i64> {
        match quick_arith(op, x, y) {
            Some(v) => Ok(v),
            None => self.arith(op, x, y, b, self.ir.expr(e).1),
        }
    }

    /// Local `slot` where it holds an integer; else what `int` makes of `e`, its reference.
    fn local_int(&mut self, slot: Slot, e: ExprId) -> R<i64> {
        match self.local_int_value(slot) {
            Some(v) => Ok(v),
            None => self.int(e),
        }
    }

    /// The integer local `slot` of the current frame holds, if it holds one.
    #[inline(always)]
    fn local_int_value(&self, slot: Slot) -> Option<i64> {
        match self.frames.last().and_then(|f| f.vars.get(slot.index())) {
            Some(Value::Int(v)) => Some(*v),
            _ => None,
        }
    }

    pub(super) fn bool(&mut self, e: ExprId) -> R<bool> {
        match self.eval(e)? {
            Value::Bool(v) => Ok(v),
            other => Err(self.error(
                CompileError::Internal(format!("expected a bool, found {other:?}")),
                self.ir.expr(e).1,
            )),
        }
    }

    pub(super) fn chunk(&mut self, e: ExprId) -> R<ChunkVal> {
        // A reference that names its buffer (nearly all do) without a `Value` on the way:
        // what `eval` does for it, in a smaller frame.
        let ir = self.ir;
        if let (
            Expr::Chunk {
                buffer,
                ranks,
                index,
            },
            span,
        ) = ir.expr(e)
            && let Expr::Buffer(buf) = ir.expr(*buffer).0
        {
            let ranks = self.rank_sel(*ranks)?;
            let index = match index {
                Some(s) => Some(self.index_sel(buf, *s, *span)?),
                None => None,
            };
            return Ok(ChunkVal {
                buffer: buf,
                ranks,
                index,
            });
        }
        match self.eval(e)? {
            Value::Chunk(c) => Ok(c),
            other => Err(self.error(
                CompileError::Internal(format!("expected a chunk, found {other:?}")),
                self.ir.expr(e).1,
            )),
        }
    }

    pub(super) fn eval(&mut self, id: ExprId) -> R<Value> {
        let ir = self.ir;
        let (e, span) = ir.expr(id);
        let span = *span;
        Ok(match e {
            Expr::Int(v) => Value::Int(*v),
            Expr::Bool(b) => Value::Bool(*b),
            Expr::Local(slot) => self
                .frames
                .last()
                .and_then(|f| f.vars.get(slot.index()).cloned())
                .unwrap_or(Value::Unit),
            Expr::TopLevel(slot, name) => {
                let vars = match self.mode {
                    Mode::Body => self.frames.first().map(|f| &f.vars),
                    Mode::Ensure => Some(&self.body_vars),
                    // Header expressions run before the body.
                    Mode::Header => None,
                };
                match vars.and_then(|v| v.get(slot.index())) {
                    Some(Value::Unit) | None => {
                        return Err(self
                            .error(CompileError::ReadBeforeLet { name: name.clone() }, span)
                            .with_label("read here")
                            .with_note(match self.mode {
                                Mode::Header => "the header is evaluated before the body, so a function called there sees none of its variables",
                                _ => "its `let` has not run yet: a function reads the body's top-level variables as they are when it is called",
                            })
                            .into());
                    }
                    Some(v) => v.clone(),
                }
            }
            Expr::Const(c) => Value::Int(match c {
                Constant::RankCount => i64::from(self.n),
                Constant::Nodes => to_i64(self.setup.facts.nodes),
                Constant::GpusPerNode => to_i64(self.setup.facts.gpus_per_node),
                Constant::Root => i64::from(self.root),
                Constant::Param(i) => match self.params.get(*i as usize) {
                    Some(&v) => v,
                    // Only through a function a default calls: the checker sees to the rest.
                    None => {
                        let name = ir.params.get(*i as usize).map_or("", |p| p.name.as_str());
                        return Err(self
                            .error(
                                CompileError::ReadBeforeLet {
                                    name: name.to_string(),
                                },
                                span,
                            )
                            .with_label("read here")
                            .with_note(
                                "a parameter's default may use only the parameters declared before it",
                            )
                            .into());
                    }
                },
            }),
            Expr::Buffer(b) => Value::Buffer(*b),
            Expr::Unary(op, x) => match op {
                UnOp::Not => Value::Bool(!self.bool(*x)?),
                UnOp::BitNot => Value::Int(!self.int(*x)?),
                UnOp::Neg => {
                    let v = self.int(*x)?;
                    Value::Int(v.checked_neg().ok_or_else(|| {
                        self.error(CompileError::Overflow { op: "-".into() }, span)
                    })?)
                }
            },
            Expr::Binary(op, a, b) => self.binary(*op, *a, *b, span)?,
            Expr::Builtin(b, args) => self.builtin(*b, args, span)?,
            Expr::If { cond, then, els } => {
                let branch = if self.bool(*cond)? { *then } else { *els };
                return self.eval(branch);
            }
            Expr::Table(items) => {
                let mut t = Vec::with_capacity(items.len());
                for &x in items {
                    t.push(self.int(x)?);
                }
                Value::Table(t.into())
            }
            Expr::Call(f, args) => {
                let v = self.call(*f, args, span)?;
                if v == Value::Unit {
                    return Err(self.error(
                        CompileError::Internal("a procedure used as a value".into()),
                        span,
                    ));
                }
                v
            }
            Expr::Chunk {
                buffer,
                ranks,
                index,
            } => {
                let buf = match self.eval(*buffer)? {
                    Value::Buffer(b) => b,
                    Value::Table(t) => return self.table_index(&t, *ranks, index.is_some(), span),
                    _ => {
                        return Err(self.error(
                            CompileError::Internal("not a buffer".into()),
                            ir.expr(*buffer).1,
                        ));
                    }
                };
                let ranks = self.rank_sel(*ranks)?;
                let index = match index {
                    Some(s) => Some(self.index_sel(buf, *s, span)?),
                    None => None,
                };
                Value::Chunk(ChunkVal {
                    buffer: buf,
                    ranks,
                    index,
                })
            }
        })
    }

    /// `t[i]`: the element, or an error naming the index and the table's length.
    pub(super) fn table_index(
        &mut self,
        t: &[i64],
        ranks: Sel,
        second: bool,
        span: Span,
    ) -> R<Value> {
        let (Sel::One(e), false) = (ranks, second) else {
            return Err(self.error(
                CompileError::Internal("a table read with a selector".into()),
                span,
            ));
        };
        let i = self.int(e)?;
        match usize::try_from(i).ok().and_then(|u| t.get(u)) {
            Some(&v) => Ok(Value::Int(v)),
            None => Err(self
                .error(
                    CompileError::TableIndexOutOfRange {
                        index: i,
                        len: t.len(),
                    },
                    span,
                )
                .with_label(format!("index {i}"))
                .into()),
        }
    }

    pub(super) fn binary(&mut self, op: BinOp, a: ExprId, b: ExprId, span: Span) -> R<Value> {
        // Short-circuit first.
        match op {
            BinOp::And => return Ok(Value::Bool(self.bool(a)? && self.bool(b)?)),
            BinOp::Or => return Ok(Value::Bool(self.bool(a)? || self.bool(b)?)),
            BinOp::Eq | BinOp::Ne => {
                let x = self.eval(a)?;
                let y = self.eval(b)?;
                return Ok(Value::Bool((x == y) == (op == BinOp::Eq)));
            }
            _ => {}
        }
        let x = self.int(a)?;
        let y = self.int(b)?;
        if is_arith(op) {
            return self.arith(op, x, y, b, span).map(Value::Int);
        }
        Ok(match op {
            BinOp::Lt => Value::Bool(x < y),
            BinOp::Le => Value::Bool(x <= y),
            BinOp::Gt => Value::Bool(x > y),
            BinOp::Ge => Value::Bool(x >= y),
            _ => {
                return Err(self.error(CompileError::Internal("unreachable operator".into()), span));
            }
        })
    }

    /// `x op y` for an integer operator ([`is_arith`]), checked; `b` is the right operand,
    /// which a division by zero or a bad shift blames.
    fn arith(&self, op: BinOp, x: i64, y: i64, b: ExprId, span: Span) -> R<i64> {
        let overflow = |s: &Self| {
            s.error(
                CompileError::Overflow {
                    op: op.symbol().into(),
                },
                span,
            )
        };
        Ok(match op {
            BinOp::Add => x.checked_add(y).ok_or_else(|| overflow(self))?,
            BinOp::Sub => x.checked_sub(y).ok_or_else(|| overflow(self))?,
            BinOp::Mul => x.checked_mul(y).ok_or_else(|| overflow(self))?,
            BinOp::Div | BinOp::Rem => {
                if y == 0 {
                    let at = self.ir.expr(b).1;
                    return Err(self
                        .error(CompileError::DivisionByZero, at)
                        .with_label("this is zero")
                        .into());
                }
                let r = if op == BinOp::Div {
                    x.checked_div_euclid(y)
                } else {
                    x.checked_rem_euclid(y)
                };
                r.ok_or_else(|| overflow(self))?
            }
            BinOp::BitAnd => x & y,
            BinOp::BitOr => x | y,
            BinOp::BitXor => x ^ y,
            BinOp::Shl | BinOp::Shr => {
                if !(0..64).contains(&y) {
                    return Err(self.error(CompileError::BadShift { amount: y }, self.ir.expr(b).1));
                }
                if op == BinOp::Shl {
                    let v = x << y;
                    if v >> y != x {
                        return Err(overflow(self));
                    }
                    v
                } else {
                    x >> y
                }
            }
            _ => {
                return Err(self.error(
                    CompileError::Internal("not an integer operator".into()),
                    span,
                ));
            }
        })
    }

    pub(super) fn builtin(&mut self, b: Builtin, args: &[ExprId], span: Span) -> R<Value> {
        let mut v = [0i64; 2];
        for (slot, &a) in v.iter_mut().zip(args) {
            *slot = self.int(a)?;
        }
        let [x, y] = v;
        let positive = |s: &Self, x: i64| {
            if x > 0 {
                Ok(())
            } else {
                Err(s.error(
                    CompileError::NotPositive {
                        function: b.name().into(),
                        value: x,
                    },
                    span,
                ))
            }
        };
        let facts = self.setup.facts;
        let gpn = to_i64(facts.gpus_per_node.max(1));
        let out_of_range = |s: &Self, arg: i64, why: String| {
            s.error(
                CompileError::BuiltinOutOfRange {
                    function: b.name().into(),
                    arg,
                    why,
                },
                span,
            )
        };
        Ok(match b {
            Builtin::Log2 => {
                positive(self, x)?;
                Value::Int(63 - i64::from(x.leading_zeros()))
            }
            Builtin::CeilLog2 => {
                positive(self, x)?;
                let f = 63 - i64::from(x.leading_zeros());
                Value::Int(if x & (x - 1) == 0 { f } else { f + 1 })
            }
            Builtin::Min => Value::Int(x.min(y)),
            Builtin::Max => Value::Int(x.max(y)),
            Builtin::Abs => Value::Int(
                x.checked_abs()
                    .ok_or_else(|| self.error(CompileError::Overflow { op: "abs".into() }, span))?,
            ),
            Builtin::IsPow2 => Value::Bool(x > 0 && x & (x - 1) == 0),
            Builtin::Node | Builtin::Local => {
                if !(0..i64::from(self.n)).contains(&x) {
                    return Err(out_of_range(self, x, format!("there are {} ranks", self.n)));
                }
                Value::Int(if b == Builtin::Node { x / gpn } else { x % gpn })
            }
            Builtin::Rank => {
                let nodes = to_i64(facts.nodes);
                if !(0..nodes).contains(&x) {
                    return Err(out_of_range(self, x, format!("there are {nodes} nodes")));
                }
                if !(0..gpn).contains(&y) {
                    return Err(out_of_range(
                        self,
                        y,
                        format!("there are {gpn} GPUs per node"),
                    ));
                }
                Value::Int(x * gpn + y)
            }
        })
    }

    #[inline]
    pub(super) fn rank(&self, v: i64, span: Span) -> R<u32> {
        if (0..i64::from(self.n)).contains(&v) {
            Ok(v as u32)
        } else {
            Err(self.rank_error(v, span))
        }
    }

    /// Apart from [`Interp::rank`], so that its check stays a few instructions inline.
    #[cold]
    #[inline(never)]
    fn rank_error(&self, v: i64, span: Span) -> Box<Diag> {
        self.error(
            CompileError::RankOutOfRange {
                rank: v,
                n: self.n as usize,
            },
            span,
        )
    }

    /// Inlined: `chunk` calls it for every transfer's two references.
    #[inline(always)]
    pub(super) fn rank_sel(&mut self, s: Sel) -> R<RankRange> {
        let ir = self.ir;
        Ok(match s {
            Sel::All => RankRange {
                start: 0,
                end: self.n,
            },
            Sel::One(e) => {
                let v = self.int(e)?;
                RankRange::one(self.rank(v, ir.expr(e).1)?)
            }
            Sel::Range(a, b) => {
                let (start, last) = self.sel_bounds(a, b, Self::rank)?;
                RankRange {
                    start,
                    end: last + 1,
                }
            }
        })
    }

    /// Evaluates the ends of `a..b`, rejects an empty range, then checks the
    /// first and last elements (`a`, then `b - 1`) with `check`.
    pub(super) fn sel_bounds(
        &mut self,
        a: ExprId,
        b: ExprId,
        check: impl Fn(&Self, i64, Span) -> R<u32>,
    ) -> R<(u32, u32)> {
        let ir = self.ir;
        let (x, y) = (self.int(a)?, self.int(b)?);
        if x >= y {
            return Err(self.error(
                CompileError::BadRange { start: x, end: y },
                ir.expr(a).1.to(ir.expr(b).1),
            ));
        }
        let first = check(self, x, ir.expr(a).1)?;
        let last = check(self, y - 1, ir.expr(b).1)?;
        Ok((first, last))
    }

    pub(super) fn chunks_of(&self, buf: BufId) -> u64 {
        self.buffers.get(buf.index()).map_or(0, |b| b.chunks)
    }

    #[inline]
    pub(super) fn check_index(&self, buf: BufId, v: i64, span: Span) -> R<u32> {
        let chunks = self.chunks_of(buf);
        if v >= 0 && (v as u64) < chunks {
            Ok(v as u32)
        } else {
            Err(self.index_error(buf, v, chunks, span))
        }
    }

    /// Apart from [`Interp::check_index`], so that its check stays a few instructions inline.
    #[cold]
    #[inline(never)]
    fn index_error(&self, buf: BufId, v: i64, chunks: u64, span: Span) -> Box<Diag> {
        self.error(
            CompileError::IndexOutOfRange {
                buffer: self.ir.buffer_name(buf).to_string(),
                index: v,
                chunks,
            },
            span,
        )
    }

    /// `span` is the whole reference's, for `*` of an empty buffer. Inlined: `chunk` calls
    /// it for every transfer's source.
    #[inline(always)]
    pub(super) fn index_sel(&mut self, buf: BufId, s: Sel, span: Span) -> R<(u32, u32)> {
        let ir = self.ir;
        Ok(match s {
            Sel::All if self.chunks_of(buf) == 0 => {
                return Err(self.error(
                    CompileError::IndexOutOfRange {
                        buffer: self.ir.buffer_name(buf).to_string(),
                        index: 0,
                        chunks: 0,
                    },
                    span,
                ));
            }
            Sel::All => (0, u32::try_from(self.chunks_of(buf)).unwrap_or(u32::MAX)),
            Sel::One(e) => {
                let v = self.int(e)?;
                (self.check_index(buf, v, ir.expr(e).1)?, 1)
            }
            Sel::Range(a, b) => {
                let (start, last) =
                    self.sel_bounds(a, b, |this, v, span| this.check_index(buf, v, span))?;
                (start, last - start + 1)
            }
        })
    }
}

/// Values on [`Interp::run_int`]'s stack, at most; deeper expressions are evaluated node by
/// node.
const INT_STACK: usize = 8;

/// Nesting that [`int_code`] follows, at most: it recurses.
const INT_NESTING: usize = 32;

/// One step of an integer expression's postfix code ([`int_codes`]).
#[derive(Clone, Copy, Debug)]
pub(super) enum IntOp {
    Int(i64),
    /// A local variable; the expression, for what `int` does with a slot holding no integer.
    Local(Slot, ExprId),
    RankCount,
    /// `x op y` of the two values on top; the right operand and the operator's expression,
    /// for errors.
    Arith(BinOp, ExprId, ExprId),
    /// `Arith` of the value on top and a right operand that is a literal, the rank count or
    /// a local, given here instead of by a step of its own (the same value, in the same
    /// order: a third of the steps of `(r - s - 1) % n`).
    ArithInt(BinOp, i64, ExprId, ExprId),
    ArithRankCount(BinOp, ExprId, ExprId),
    ArithLocal(BinOp, Slot, ExprId, ExprId),
    /// Anything else, through `int`.
    Other(ExprId),
}

/// Postfix code per expression, for the integer arithmetic `int` evaluates: one loop over a
/// few steps instead of a call per node (`(r - s - 1) % n` has seven), which was most of
/// elaboration's time. `None` where there is no arithmetic at the top, or the expression is
/// too deep.
pub(super) fn int_codes(ir: &Ir) -> Vec<Option<Box<[IntOp]>>> {
    (0..ir.exprs.len())
        .map(|i| {
            let e = ExprId(u32::try_from(i).ok()?);
            if !matches!(ir.expr(e).0, Expr::Binary(op, ..) if is_arith(op)) {
                return None;
            }
            let mut code = Vec::new();
            int_code(ir, e, 0, 0, &mut code)?;
            Some(code.into())
        })
        .collect()
}

/// Appends `e`'s code to `code`, with `depth` values already on the stack; `None` when it
/// needs more than [`INT_STACK`] values or [`INT_NESTING`] levels.
fn int_code(ir: &Ir, e: ExprId, depth: usize, level: usize, code: &mut Vec<IntOp>) -> Option<()> {
    if depth >= INT_STACK || level > INT_NESTING {
        return None;
    }
    let op = match ir.expr(e).0 {
        Expr::Int(v) => IntOp::Int(v),
        Expr::Local(slot) => IntOp::Local(slot, e),
        Expr::Const(Constant::RankCount) => IntOp::RankCount,
        Expr::Binary(op, a, b) if is_arith(op) => {
            int_code(ir, a, depth, level + 1, code)?;
            // The same limits whether or not the right operand takes a step of its own.
            if depth + 1 >= INT_STACK || level + 1 > INT_NESTING {
                return None;
            }
            match ir.expr(b).0 {
                Expr::Int(v) => IntOp::ArithInt(op, v, b, e),
                Expr::Const(Constant::RankCount) => IntOp::ArithRankCount(op, b, e),
                Expr::Local(slot) => IntOp::ArithLocal(op, slot, b, e),
                _ => {
                    int_code(ir, b, depth + 1, level + 1, code)?;
                    IntOp::Arith(op, b, e)
                }
            }
        }
        _ => IntOp::Other(e),
    };
    code.push(op);
    Some(())
}

/// `op` on `x` and `y` where it is addition, subtraction, multiplication, or division or
/// remainder by a positive number, and does not overflow: what `Interp::arith` gives
/// then; `None` for everything else (other operators, and every case `arith` reports).
fn quick_arith(op: BinOp, x: i64, y: i64) -> Option<i64> {
    match op {
        BinOp::Add => x.checked_add(y),
        BinOp::Sub => x.checked_sub(y),
        BinOp::Mul => x.checked_mul(y),
        BinOp::Rem if y > 0 => Some(x.rem_euclid(y)),
        BinOp::Div if y > 0 => Some(x.div_euclid(y)),
        _ => None,
    }
}

/// Whether `op` maps two integers to an integer.
fn is_arith(op: BinOp) -> bool {
    matches!(
        op,
        BinOp::Add
            | BinOp::Sub
            | BinOp::Mul
            | BinOp::Div
            | BinOp::Rem
            | BinOp::BitAnd
            | BinOp::BitOr
            | BinOp::BitXor
            | BinOp::Shl
            | BinOp::Shr
    )
}
