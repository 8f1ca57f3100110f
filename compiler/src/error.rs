//! Errors of the compiler's stages after the front end. Each is reported as a
//! [`Diagnostic<CompileError>`](coll_lang::Diagnostic) whose span points at the `.coll` code
//! that caused it; notes carry the values of the loop variables and calls at that point.

/// What went wrong while elaborating or verifying a program.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    // --- elaboration: the program for a rank count and topology ---
    #[error("{what} rank count n = {n}")]
    UnsupportedRanks { n: usize, what: String },
    #[error("topology `{topology}` is not supported by this algorithm")]
    UnsupportedTopology { topology: String },
    #[error("the algorithm needs `{capability}`, which topology `{topology}` lacks")]
    MissingCapability {
        capability: String,
        topology: String,
    },
    #[error("rank {rank} is out of range: there are {n} ranks")]
    RankOutOfRange { rank: i64, n: usize },
    #[error("chunk {index} of `{buffer}` is out of range: it has {chunks} chunk{s} per rank", s = if *chunks == 1 { "" } else { "s" })]
    IndexOutOfRange {
        buffer: String,
        index: i64,
        chunks: u64,
    },
    #[error("empty or reversed range {start}..{end}")]
    BadRange { start: i64, end: i64 },
    #[error("division by zero")]
    DivisionByZero,
    #[error("integer overflow in `{op}`")]
    Overflow { op: String },
    #[error("shift by {amount} is out of range 0..64")]
    BadShift { amount: i64 },
    #[error("`{function}` of {value}: the argument must be positive")]
    NotPositive { function: String, value: i64 },
    #[error("`{function}({arg})` is out of range: {why}")]
    BuiltinOutOfRange {
        function: String,
        arg: i64,
        why: String,
    },
    #[error("{what} must be at least {min}, found {value}")]
    TooSmall { what: String, min: i64, value: i64 },
    #[error("{what} must be at most {max}, found {value}")]
    TooLarge { what: String, max: u64, value: u64 },
    #[error("loop step is zero")]
    ZeroStep,
    #[error("elaboration exceeded {limit} steps; is there an endless loop?")]
    StepLimit { limit: u64 },
    #[error("more than {limit} chunk operations")]
    OpLimit { limit: usize },
    #[error("calls nested deeper than {limit}; is there endless recursion?")]
    RecursionLimit { limit: usize },
    #[error("assertion failed")]
    AssertionFailed,
    #[error("source names {src} chunks but destination {dst}")]
    CountMismatch { src: u64, dst: u64 },
    #[error("`copy` from several ranks into one chunk; only `reduce` combines a group")]
    CopyFromGroup,
    #[error("source and destination both name several ranks")]
    GroupOnBothSides,
    #[error("a chunk reference without an index cannot be a source")]
    MissingIndex,
    #[error("this in-place algorithm cannot be compiled out of place: {why}")]
    NotOutOfPlace { why: String },
    #[error("writes to `input` in an out-of-place collective")]
    WriteToInput,
    #[error("function `{name}` ended without returning a value")]
    NoReturnValue { name: String },
    #[error("`expect` sources must be `input` chunks, found `{buffer}`")]
    ExpectSourceNotInput { buffer: String },
    #[error("`reduce` combines {buffer}[{rank}][{chunk}] with itself")]
    ReduceOntoItself {
        buffer: String,
        rank: u32,
        chunk: u64,
    },
    #[error("table index {index} is out of range: the table has {len} element{s}", s = if *len == 1 { "" } else { "s" })]
    TableIndexOutOfRange { index: i64, len: usize },
    #[error("unknown parameter `{name}`: {declared}")]
    UnknownParam { name: String, declared: String },
    #[error("`{name}` is read before it has a value")]
    ReadBeforeLet { name: String },
    // --- lowering ---
    #[error("no path from rank {from} to rank {to} in topology `{topology}`")]
    NoPath {
        from: u32,
        to: u32,
        topology: String,
    },
    #[error("`via {asked}` between rank {from} and rank {to}, which are connected by {found}")]
    ViaMismatch {
        asked: String,
        from: u32,
        to: u32,
        found: String,
    },
    // --- checks of the lowered plan ---
    #[error("the schedule deadlocks with {slots} slots per connection")]
    Deadlock { slots: u32 },
    #[error("{0}")]
    Resource(String),
    #[error("internal error: {0}")]
    Internal(String),

    // --- verification: the symbolic proof ---
    #[error("{buffer}[{rank}][{chunk}] does not hold the {collective} result")]
    Postcondition {
        collective: String,
        buffer: String,
        rank: u32,
        chunk: u64,
    },
    #[error("reads {buffer}[{rank}][{chunk}] before anything was written to it")]
    UninitialisedRead {
        buffer: String,
        rank: u32,
        chunk: u64,
    },
    #[error("contribution {contribution} would be combined twice into {buffer}[{rank}][{chunk}]")]
    ReducedTwice {
        contribution: String,
        buffer: String,
        rank: u32,
        chunk: u64,
    },
}
