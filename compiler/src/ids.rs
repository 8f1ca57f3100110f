//! Typed indices. Every arena and graph in the compiler is indexed by its own newtype, so a
//! rank can never be used where an op or a link is meant. Invariant: an id is only valid
//! for the collection that issued it.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub u32);

        impl $name {
            pub fn new(i: usize) -> Self {
                // Collections are bounded far below u32::MAX by the compiler's limits.
                $name(u32::try_from(i).unwrap_or(u32::MAX))
            }

            pub fn index(self) -> usize {
                self.0 as usize
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

id!(
    /// A rank: one GPU (or one simulated GPU) taking part in the collective.
    RankId,
    "rank "
);
id!(
    /// A device in the topology graph (GPU, switch, NIC, CPU, PCIe switch).
    DeviceId,
    "device "
);
id!(
    /// A link in the topology graph.
    LinkId,
    "link "
);
id!(
    /// A chunk operation produced by elaboration, in program order.
    OpId,
    "op "
);
id!(
    /// A channel of a lowered schedule.
    ChannelId,
    "channel "
);
