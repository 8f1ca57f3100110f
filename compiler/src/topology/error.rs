//! Errors of the topology model. Every message names what is wrong: the preset, the file,
//! the device or link, and for NCCL XML the element, the attribute and `line:col`.

use std::fmt;
use std::path::PathBuf;

/// The presets, as listed in error messages.
pub const PRESET_LIST: &str = "nvswitch:N, hgx-h200:N, cluster:NxG, ring:N";

/// A 1-based line and column in a file's text (columns count characters).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TextPos {
    pub line: u32,
    pub column: u32,
}

impl fmt::Display for TextPos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// Everything that can go wrong while building, reading or importing a topology.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TopologyError {
    /// The spec is neither a preset nor a `.json`/`.xml` path.
    #[error(
        "unknown topology preset \"{spec}\"; presets: {PRESET_LIST}{}",
        hint_text(hint)
    )]
    UnknownPreset { spec: String, hint: Option<String> },
    /// A preset name with a missing or out-of-range size.
    #[error("bad topology preset \"{spec}\": {reason}")]
    BadPreset { spec: String, reason: String },
    /// A size limit was exceeded (checked before anything large is allocated).
    #[error("topology too large: {count} {what} exceed the limit of {limit}")]
    TooLarge {
        what: &'static str,
        count: u64,
        limit: u64,
    },
    /// A topology file could not be read.
    #[error("cannot read topology file {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An error in the content of a named file; `path:line:col: ...` when it has a position.
    #[error("{}", in_file_text(path, source))]
    InFile {
        path: PathBuf,
        source: Box<TopologyError>,
    },
    /// An error in the XML of node `node` of a multi-node import.
    #[error("node {node}: {source}")]
    InNode {
        node: usize,
        source: Box<TopologyError>,
    },
    /// JSON that does not parse or does not match the format (serde's message).
    #[error("topology JSON {pos}: {message}")]
    Json { pos: TextPos, message: String },
    /// The JSON file declares a format version this build does not read.
    #[error("topology JSON: unsupported version {found} (this build reads version 1)")]
    JsonVersion { found: u32 },
    /// XML that is not well formed.
    #[error("NCCL topology XML {pos}: {message}")]
    XmlSyntax { pos: TextPos, message: String },
    /// Well-formed XML whose content is wrong: names the element and, where one is at
    /// fault, the attribute.
    #[error("NCCL topology XML {pos}: {}", xml_detail(element, attribute.as_deref(), message))]
    Xml {
        pos: TextPos,
        element: String,
        attribute: Option<String>,
        message: String,
    },
    /// Two devices of a file share an id.
    #[error("duplicate device id \"{id}\"")]
    DuplicateDevice { id: String },
    /// A link names a device id that no device has.
    #[error("link {index} names unknown device \"{id}\"")]
    UnknownDevice { index: usize, id: String },
    /// A device that cannot be built as described.
    #[error("bad device {device}: {reason}")]
    BadDevice { device: String, reason: String },
    /// A link with a bad bandwidth or latency, or both ends on one device.
    #[error("bad link {link}: {reason}")]
    BadLink { link: String, reason: String },
    /// No GPU at all.
    #[error("topology has no GPUs")]
    NoGpus,
    /// GPU ranks are not `0..n-1` exactly once, or not numbered node-major.
    #[error("bad GPU ranks: {0}")]
    BadRanks(String),
    /// Node ids are not `0..N-1`, or a device names a node that has no GPUs.
    #[error("bad node ids: {0}")]
    BadNodes(String),
    /// Nodes with different GPU counts.
    #[error(
        "irregular topology: node {node} has {count} GPUs but node {first_node} has {expected}; every node needs the same number of GPUs"
    )]
    Irregular {
        node: usize,
        count: usize,
        first_node: usize,
        expected: usize,
    },
}

impl TopologyError {
    /// The position in the file's text, for errors that have one.
    pub fn pos(&self) -> Option<TextPos> {
        match self {
            TopologyError::Json { pos, .. }
            | TopologyError::XmlSyntax { pos, .. }
            | TopologyError::Xml { pos, .. } => Some(*pos),
            TopologyError::InFile { source, .. } | TopologyError::InNode { source, .. } => {
                source.pos()
            }
            _ => None,
        }
    }

    /// Attaches a file path to an error found in that file's content.
    pub(crate) fn in_file(self, path: PathBuf) -> TopologyError {
        match self {
            e @ (TopologyError::Io { .. } | TopologyError::InFile { .. }) => e,
            e => TopologyError::InFile {
                path,
                source: Box::new(e),
            },
        }
    }
}

fn hint_text(hint: &Option<String>) -> String {
    match hint {
        Some(h) => format!("; {h}"),
        None => String::new(),
    }
}

fn xml_detail(element: &str, attribute: Option<&str>, message: &str) -> String {
    match attribute {
        Some(a) => format!("<{element}> attribute `{a}`: {message}"),
        None => format!("<{element}>: {message}"),
    }
}

fn in_file_text(path: &std::path::Path, source: &TopologyError) -> String {
    let p = path.display();
    match source {
        TopologyError::Json { pos, message } => format!("{p}:{pos}: {message}"),
        TopologyError::XmlSyntax { pos, message } => format!("{p}:{pos}: {message}"),
        TopologyError::Xml {
            pos,
            element,
            attribute,
            message,
        } => format!(
            "{p}:{pos}: {}",
            xml_detail(element, attribute.as_deref(), message)
        ),
        other => format!("{p}: {other}"),
    }
}
