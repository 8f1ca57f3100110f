//! The resolved program: the checked AST with every name turned into a slot, a constant, a
//! buffer or a function id, stored in arenas with typed handles so the interpreter never
//! looks a name up by string.
//!
//! Invariants: every [`ExprId`]/[`StmtId`] indexes [`Ir::exprs`]/[`Ir::stmts`]; a [`Slot`]
//! indexes the frame of the code it appears in (a function's frame, or the body's, header's
//! or `ensure`'s frame), whose size is the matching `*_slots` count; every [`FnId`] indexes
//! [`Ir::functions`].

use coll_lang::Span;
use coll_lang::ast::{BinOp, TransferOp, UnOp};
use coll_lang::builtins::Builtin;

macro_rules! handle {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub struct $name(pub u32);
        impl $name {
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }
    };
}

handle!(
    /// An expression in [`Ir::exprs`].
    ExprId
);
handle!(
    /// A statement in [`Ir::stmts`].
    StmtId
);
handle!(
    /// A user function in [`Ir::functions`].
    FnId
);
handle!(
    /// A variable's place in its frame.
    Slot
);
handle!(
    /// A buffer: 0 is `input`, 1 is `output`, then the scratch buffers in header order.
    BufId
);

impl BufId {
    pub const INPUT: BufId = BufId(0);
    pub const OUTPUT: BufId = BufId(1);
}

/// Program-wide integers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Constant {
    RankCount,
    Nodes,
    GpusPerNode,
    Root,
    /// The header's `param` at this index of [`Ir::params`].
    Param(u32),
}

#[derive(Clone, Debug)]
pub enum Expr {
    Int(i64),
    Bool(bool),
    Local(Slot),
    /// A `let` of the body's top level read from a function: a slot of the body's frame.
    TopLevel(Slot, String),
    Const(Constant),
    Buffer(BufId),
    Unary(UnOp, ExprId),
    Binary(BinOp, ExprId, ExprId),
    Builtin(Builtin, Vec<ExprId>),
    Call(FnId, Vec<ExprId>),
    /// A chunk reference, or `t[i]` when `buffer` evaluates to a table (then `ranks` is
    /// `Sel::One` and `index` is `None`: the checker allows nothing else).
    Chunk {
        buffer: ExprId,
        ranks: Sel,
        index: Option<Sel>,
    },
    If {
        cond: ExprId,
        then: ExprId,
        els: ExprId,
    },
    Table(Vec<ExprId>),
}

#[derive(Clone, Copy, Debug)]
pub enum Sel {
    One(ExprId),
    All,
    Range(ExprId, ExprId),
}

/// A hint on a transfer or in the header, with its value still to evaluate.
#[derive(Clone, Copy, Debug)]
pub enum Hint {
    Channel(ExprId),
    Pipeline(ExprId),
    Instances(ExprId),
    Protocol(Protocol),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Simple,
    Ll,
}

impl Protocol {
    pub fn from_name(s: &str) -> Option<Protocol> {
        match s {
            "simple" => Some(Protocol::Simple),
            "ll" => Some(Protocol::Ll),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Protocol::Simple => "simple",
            Protocol::Ll => "ll",
        }
    }
}

/// The channel kind a transfer asks for with `via`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Via {
    Switch,
    NvLink,
    Net,
}

impl Via {
    pub fn from_name(s: &str) -> Option<Via> {
        match s {
            "switch" => Some(Via::Switch),
            "nvlink" => Some(Via::NvLink),
            "net" => Some(Via::Net),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Via::Switch => "switch",
            Via::NvLink => "nvlink",
            Via::Net => "net",
        }
    }
}

#[derive(Clone, Debug)]
pub enum Stmt {
    Let(Slot, ExprId),
    Assign(Slot, ExprId),
    /// Each source in turn into `dst` (only a `reduce` has several).
    Transfer {
        op: TransferOp,
        srcs: Vec<ExprId>,
        dst: ExprId,
        via: Option<Via>,
        hints: Vec<Hint>,
    },
    For {
        var: Slot,
        start: ExprId,
        end: ExprId,
        step: Option<ExprId>,
        body: Vec<StmtId>,
    },
    While {
        cond: ExprId,
        body: Vec<StmtId>,
    },
    If {
        cond: ExprId,
        then: Vec<StmtId>,
        els: Vec<StmtId>,
    },
    Return(Option<ExprId>),
    Assert(ExprId),
    Expect {
        dst: ExprId,
        srcs: Vec<ExprId>,
    },
    Call(FnId, Vec<ExprId>),
}

#[derive(Clone, Debug)]
pub struct Function {
    pub name: String,
    pub params: Vec<Slot>,
    /// Parameter names, for the call context shown in errors.
    pub param_names: Vec<String>,
    pub returns_value: bool,
    pub body: Vec<StmtId>,
    pub slots: usize,
    pub span: Span,
}

/// A scratch buffer declared in the header.
#[derive(Clone, Debug)]
pub struct Scratch {
    pub name: String,
    pub size: ExprId,
    pub span: Span,
}

/// A `param` of the header.
#[derive(Clone, Debug)]
pub struct Param {
    pub name: String,
    /// Evaluated in the header's frame when the caller gives no value.
    pub default: ExprId,
    pub span: Span,
}

/// Names of loop variables per slot of a frame, for error notes.
pub type SlotNames = Vec<Option<String>>;

#[derive(Clone, Debug, Default)]
pub struct Ir {
    pub exprs: Vec<(Expr, Span)>,
    pub stmts: Vec<(Stmt, Span)>,
    pub functions: Vec<Function>,
    /// Loop-variable names of each function's frame, by slot.
    pub function_slot_names: Vec<SlotNames>,
    pub body: Vec<StmtId>,
    pub body_slots: usize,
    pub body_slot_names: SlotNames,
    pub ensure: Vec<StmtId>,
    pub ensure_slots: usize,
    pub ensure_slot_names: SlotNames,
    pub scratch: Vec<Scratch>,
    /// In header order; a default may read the ones before it.
    pub params: Vec<Param>,
    /// Header expressions run in a frame of their own with no slots.
    pub chunks: Option<ExprId>,
    pub ranks: Option<ExprId>,
    pub header_hints: Vec<(Hint, Span)>,
}

impl Ir {
    pub fn expr(&self, id: ExprId) -> &(Expr, Span) {
        &self.exprs[id.index()]
    }

    pub fn stmt(&self, id: StmtId) -> &(Stmt, Span) {
        &self.stmts[id.index()]
    }

    pub fn buffer_name(&self, b: BufId) -> &str {
        match b.index() {
            0 => "input",
            1 => "output",
            i => self
                .scratch
                .get(i - 2)
                .map_or("scratch", |s| s.name.as_str()),
        }
    }
}

/// `copy` or `reduce`.
pub type OpKind = TransferOp;
