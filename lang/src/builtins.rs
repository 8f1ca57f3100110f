//! The fixed vocabulary of the language: keywords, collective kinds, topologies,
//! capabilities, hints, protocols, types and built-in functions. The checker and the
//! compiler's evaluator both read these tables, so a name means the same everywhere.

/// Words that cannot be used as identifiers. `copy`, `reduce` and `step` are not among them:
/// they start a statement or follow a loop's range, where a name cannot stand, so
/// programs may also use them as names (`let step = 2;`). `break` and `continue` are
/// reserved, and rejected as unsupported statements. `then` is read as a keyword only
/// inside a conditional expression.
pub const KEYWORDS: &[&str] = &[
    "collective",
    "fn",
    "let",
    "for",
    "in",
    "break",
    "continue",
    "while",
    "if",
    "else",
    "return",
    "assert",
    "via",
    "with",
    "expect",
    "true",
    "false",
    "and",
    "or",
    "not",
];

pub fn is_keyword(s: &str) -> bool {
    KEYWORDS.contains(&s)
}

/// The collective a program declares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CollectiveKind {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    Broadcast,
    Reduce,
    SendRecv,
    Custom,
}

impl CollectiveKind {
    pub const ALL: [CollectiveKind; 8] = [
        CollectiveKind::AllReduce,
        CollectiveKind::AllGather,
        CollectiveKind::ReduceScatter,
        CollectiveKind::AllToAll,
        CollectiveKind::Broadcast,
        CollectiveKind::Reduce,
        CollectiveKind::SendRecv,
        CollectiveKind::Custom,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CollectiveKind::AllReduce => "allreduce",
            CollectiveKind::AllGather => "allgather",
            CollectiveKind::ReduceScatter => "reducescatter",
            CollectiveKind::AllToAll => "alltoall",
            CollectiveKind::Broadcast => "broadcast",
            CollectiveKind::Reduce => "reduce",
            CollectiveKind::SendRecv => "sendrecv",
            CollectiveKind::Custom => "custom",
        }
    }

    pub fn from_name(s: &str) -> Option<CollectiveKind> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }

    /// Chunks of (input, output) per rank for `n` ranks and chunk factor `k`; a product past
    /// `u64::MAX` saturates there, which every size limit then refuses.
    pub fn buffer_chunks(self, n: u64, k: u64) -> (u64, u64) {
        let nk = n.saturating_mul(k);
        match self {
            CollectiveKind::AllGather => (k, nk),
            CollectiveKind::ReduceScatter => (nk, k),
            CollectiveKind::AllToAll => (nk, nk),
            _ => (k, k),
        }
    }
}

/// Topology families a header may name in `topology`.
pub const TOPOLOGIES: &[&str] = &["nvswitch", "hgx", "cluster", "ring", "any"];
/// Capabilities a header may name in `needs`.
pub const CAPABILITIES: &[&str] = &["switch", "net"];
/// Channel kinds after `via`.
pub const CHANNEL_KINDS: &[&str] = &["switch", "nvlink", "net"];
/// Protocols for the `protocol` hint.
pub const PROTOCOLS: &[&str] = &["simple", "ll"];
/// Hints allowed on a transfer (`with ...`).
pub const TRANSFER_HINTS: &[&str] = &["channel", "pipeline", "protocol"];
/// Hints allowed in the header; `instances` only there.
pub const HEADER_HINTS: &[&str] = &["channel", "pipeline", "protocol", "instances"];
/// Header items that are not hints.
pub const HEADER_ITEMS: &[&str] = &[
    "chunks",
    "inplace",
    "outofplace",
    "ranks",
    "topology",
    "needs",
    "scratch",
    "param",
    "ensure",
];
/// The buffers every program has.
pub const BUFFERS: &[&str] = &["input", "output"];
/// Integer constants every program sees (besides the header's rank-count name).
pub const CONSTANTS: &[&str] = &["nodes", "gpus_per_node", "root"];

/// Types of values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Type {
    Int,
    Bool,
    Buffer,
    Chunk,
    /// A table of ints (`[0, 2, 1, 3]`), read with `t[i]`.
    Table,
}

impl Type {
    pub fn name(self) -> &'static str {
        match self {
            Type::Int => "int",
            Type::Bool => "bool",
            Type::Buffer => "buffer",
            Type::Chunk => "chunk",
            Type::Table => "table",
        }
    }

    pub fn from_name(s: &str) -> Option<Type> {
        [
            Type::Int,
            Type::Bool,
            Type::Buffer,
            Type::Chunk,
            Type::Table,
        ]
        .into_iter()
        .find(|t| t.name() == s)
    }
}

/// A built-in function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Builtin {
    Log2,
    CeilLog2,
    Min,
    Max,
    Abs,
    IsPow2,
    Node,
    Local,
    Rank,
}

impl Builtin {
    pub const ALL: [Builtin; 9] = [
        Builtin::Log2,
        Builtin::CeilLog2,
        Builtin::Min,
        Builtin::Max,
        Builtin::Abs,
        Builtin::IsPow2,
        Builtin::Node,
        Builtin::Local,
        Builtin::Rank,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Builtin::Log2 => "log2",
            Builtin::CeilLog2 => "ceil_log2",
            Builtin::Min => "min",
            Builtin::Max => "max",
            Builtin::Abs => "abs",
            Builtin::IsPow2 => "is_pow2",
            Builtin::Node => "node",
            Builtin::Local => "local",
            Builtin::Rank => "rank",
        }
    }

    pub fn from_name(s: &str) -> Option<Builtin> {
        Self::ALL.into_iter().find(|b| b.name() == s)
    }

    /// Number of `int` arguments.
    pub fn arity(self) -> usize {
        match self {
            Builtin::Min | Builtin::Max | Builtin::Rank => 2,
            _ => 1,
        }
    }

    pub fn returns(self) -> Type {
        match self {
            Builtin::IsPow2 => Type::Bool,
            _ => Type::Int,
        }
    }
}
