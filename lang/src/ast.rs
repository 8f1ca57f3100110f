//! The syntax tree of a `.coll` file, as written.
//!
//! Invariants: every node carries the [`Span`] of the source text it was parsed from, and a
//! parent's span covers its children's. Parentheses are kept ([`ExprKind::Paren`]) so the
//! formatter can reproduce them; they carry no meaning. Names are not resolved here: the
//! checker ([`crate::check`]) resolves and type-checks them.

use crate::source::Span;

/// A whole file: header, functions and body statements in source order.
#[derive(Clone, Debug)]
pub struct Program {
    pub items: Vec<Item>,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum Item {
    Collective(Header),
    Function(Function),
    Stmt(Stmt),
}

impl Item {
    pub fn span(&self) -> Span {
        match self {
            Item::Collective(h) => h.span,
            Item::Function(f) => f.span,
            Item::Stmt(s) => s.span,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ident {
    pub name: String,
    pub span: Span,
}

/// The names of `names`, separated by `, `.
pub fn join_names(names: &[Ident]) -> String {
    names
        .iter()
        .map(|n| n.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `collective KIND NAME(PARAMS) { ITEMS }`
#[derive(Clone, Debug)]
pub struct Header {
    /// The collective kind as written; the checker validates it.
    pub kind: Ident,
    pub name: Ident,
    /// The rank-count parameter(s); exactly one is valid.
    pub params: Vec<Ident>,
    pub items: Vec<HeaderItem>,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct HeaderItem {
    pub kind: HeaderItemKind,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum HeaderItemKind {
    /// `chunks E;`
    Chunks(Expr),
    /// `inplace;`
    InPlace,
    /// `outofplace;`
    OutOfPlace,
    /// `ranks B;`
    Ranks(Expr),
    /// `topology a, b;`
    Topology(Vec<Ident>),
    /// `needs switch;`
    Needs(Vec<Ident>),
    /// `scratch NAME[E];`
    Scratch { name: Ident, size: Expr },
    /// `param NAME = DEFAULT;`: an integer the caller may set (`--param NAME=V`).
    Param { name: Ident, default: Expr },
    /// `instances E;`, `pipeline E;`, `protocol P;`, `channel E;`
    Hint(Hint),
    /// `ensure { ... }`
    Ensure(Block),
}

impl HeaderItemKind {
    /// The keyword that starts the item, for messages.
    pub fn keyword(&self) -> &str {
        match self {
            HeaderItemKind::Chunks(_) => "chunks",
            HeaderItemKind::InPlace => "inplace",
            HeaderItemKind::OutOfPlace => "outofplace",
            HeaderItemKind::Ranks(_) => "ranks",
            HeaderItemKind::Topology(_) => "topology",
            HeaderItemKind::Needs(_) => "needs",
            HeaderItemKind::Scratch { .. } => "scratch",
            HeaderItemKind::Param { .. } => "param",
            HeaderItemKind::Hint(h) => &h.name.name,
            HeaderItemKind::Ensure(_) => "ensure",
        }
    }
}

/// `NAME VALUE`, e.g. `pipeline 4` or `protocol ll`. A protocol value is parsed as a name
/// expression; the checker interprets it.
#[derive(Clone, Debug)]
pub struct Hint {
    pub name: Ident,
    pub value: Expr,
    pub span: Span,
}

/// `fn NAME(PARAMS) [-> TYPE] { BODY }`
#[derive(Clone, Debug)]
pub struct Function {
    pub name: Ident,
    pub params: Vec<Param>,
    pub ret: Option<TypeName>,
    pub body: Block,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct Param {
    pub name: Ident,
    pub ty: Option<TypeName>,
    pub span: Span,
}

/// A type as written (`int`, `bool`, `buffer`, `chunk`); the checker validates the name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeName {
    pub name: Ident,
}

#[derive(Clone, Debug)]
pub struct Block {
    pub stmts: Vec<Stmt>,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct Stmt {
    pub kind: StmtKind,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransferOp {
    Copy,
    Reduce,
}

impl TransferOp {
    pub fn keyword(self) -> &'static str {
        match self {
            TransferOp::Copy => "copy",
            TransferOp::Reduce => "reduce",
        }
    }
}

#[derive(Clone, Debug)]
pub enum StmtKind {
    /// `let NAME = VALUE;`
    Let { name: Ident, value: Expr },
    /// `NAME = VALUE;`
    Assign { name: Ident, value: Expr },
    /// `copy|reduce SRC, ... -> DST [via KIND] [with HINTS];`: `srcs` is never empty; only a
    /// `reduce` may have several (the checker says so), combined into `DST` one after another.
    Transfer {
        op: TransferOp,
        srcs: Vec<Expr>,
        dst: Expr,
        via: Option<Ident>,
        hints: Vec<Hint>,
    },
    /// `for VAR in START..END [step STEP] BODY`
    For {
        var: Ident,
        start: Expr,
        end: Expr,
        step: Option<Expr>,
        body: Block,
    },
    /// `while COND BODY`
    While { cond: Expr, body: Block },
    /// `if COND THEN [else ELSE]`
    If {
        cond: Expr,
        then: Block,
        els: Option<Else>,
    },
    /// `return [VALUE];`
    Return(Option<Expr>),
    /// `assert COND;`
    Assert(Expr),
    /// `expect DST == SRC, SRC...;`
    Expect { dst: Expr, srcs: Vec<Expr> },
    /// `f(args);` (the expression is always a call)
    Call(Expr),
    /// A function definition where only top-level ones are allowed; kept so the checker can
    /// report it (the parser accepts it to recover well).
    Function(Box<Function>),
}

#[derive(Clone, Debug)]
pub enum Else {
    Block(Block),
    If(Box<Stmt>),
}

#[derive(Clone, Debug)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum ExprKind {
    Int(i64),
    Bool(bool),
    Name(Ident),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    Call {
        func: Ident,
        args: Vec<Expr>,
    },
    /// `BUF[..][..]`, or `TABLE[i]` (the checker tells them apart by the name's type).
    Chunk(Box<ChunkRef>),
    Paren(Box<Expr>),
    /// `if COND then A else B`
    If {
        cond: Box<Expr>,
        then: Box<Expr>,
        els: Box<Expr>,
    },
    /// `[a, b, ...]`: a table of ints, at most [`crate::limits::MAX_TABLE_LEN`] elements.
    Table(Vec<Expr>),
}

/// `BUF[RANKS]` or `BUF[RANKS][INDEX]`
#[derive(Clone, Debug)]
pub struct ChunkRef {
    pub buffer: Ident,
    pub ranks: Selector,
    /// `None` only where the index may be left out (a transfer's destination).
    pub index: Option<Selector>,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum Selector {
    One(Expr),
    /// `*`
    All(Span),
    /// `a..b`
    Range(Expr, Expr),
}

impl Selector {
    pub fn is_multi(&self) -> bool {
        !matches!(self, Selector::One(_))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnOp {
    Neg,
    BitNot,
    Not,
}

impl UnOp {
    pub fn symbol(self) -> &'static str {
        match self {
            UnOp::Neg => "-",
            UnOp::BitNot => "~",
            UnOp::Not => "not",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Or,
    And,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    BitOr,
    BitXor,
    BitAnd,
    Shl,
    Shr,
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

impl BinOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Or => "or",
            BinOp::And => "and",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::BitOr => "|",
            BinOp::BitXor => "^",
            BinOp::BitAnd => "&",
            BinOp::Shl => "<<",
            BinOp::Shr => ">>",
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
        }
    }

    /// Binding power: higher binds tighter. `not` sits between `and` (2) and comparisons (4).
    pub fn precedence(self) -> u8 {
        match self {
            BinOp::Or => 1,
            BinOp::And => 2,
            BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => 4,
            BinOp::BitOr => 5,
            BinOp::BitXor => 6,
            BinOp::BitAnd => 7,
            BinOp::Shl | BinOp::Shr => 8,
            BinOp::Add | BinOp::Sub => 9,
            BinOp::Mul | BinOp::Div | BinOp::Rem => 10,
        }
    }

    pub fn is_comparison(self) -> bool {
        self.precedence() == 4
    }
}

/// Precedence of the prefix `not` operand: it takes a comparison or tighter.
pub const NOT_PRECEDENCE: u8 = 3;
/// Precedence of prefix `-` and `~`: tighter than every binary operator.
pub const UNARY_PRECEDENCE: u8 = 11;
