//! What the scheduler records in a plan: the candidates' names (channels, order, packing),
//! how each candidate fared, and the chosen one ([`ScheduleNote`]); chosen in `choose.rs`.
//!
//! Invariant of a [`ScheduleNote`]: `candidates` is not empty and exactly one of them has
//! `chosen` set; its `order`, `packing` and `channels` are the note's
//! ([`ScheduleNote::check`]).

use crate::check::Limits;
use serde::{Deserialize, Serialize};

/// The order of each rank's ops before blocks are formed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Order {
    /// As the program wrote them (after folding).
    Program,
    /// A list schedule of the hazard DAG of whole transfers, critical path first.
    Dependence,
    /// The same with each send and receive a node of its own.
    DependenceSplit,
}

/// How ops are placed in blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Packing {
    /// A new connection joins the first block of its channel with that side free.
    FirstFit,
    /// A block per connection side, receive and send sides of different peers merged
    /// where they fuse.
    PerConnection,
    /// [`Packing::PerConnection`], also merging a receive from a peer with a send back to
    /// it where they fuse.
    PerConnectionEcho,
    /// [`Packing::PerConnection`] with local ops in blocks of their own, one per chain of
    /// local ops writing the same chunks, while the block limit allows.
    LocalApart,
}

impl Order {
    pub fn name(self) -> &'static str {
        match self {
            Order::Program => "program",
            Order::Dependence => "dependence",
            Order::DependenceSplit => "dependence-split",
        }
    }
}

impl Packing {
    pub fn name(self) -> &'static str {
        match self {
            Packing::FirstFit => "first-fit",
            Packing::PerConnection => "per-connection",
            Packing::PerConnectionEcho => "per-connection-echo",
            Packing::LocalApart => "local-apart",
        }
    }
}

/// Where transfers without a `with channel` hint travel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Channels {
    /// On the program's default channel (per instance): one connection per pair of ranks.
    #[default]
    Program,
    /// On channels the compiler gives them (`channels.rs`): independent streams between a
    /// pair on connections of their own.
    Compiler,
    /// On a channel per chunk (`channels.rs`): each chunk's path, forwards included, on
    /// one channel.
    Chunks,
    /// [`Channels::Chunks`] after every transfer of several chunks is cut into transfers of
    /// one (`split.rs`), so a rank can forward part of what it received, or send what it
    /// received with what it held, each piece fused with the receive that brought it.
    Split,
    /// Transfers cut into chunks as for [`Channels::Split`] and scratch renamed before
    /// copies are folded (`rename.rs`): a write that overwrites a scratch chunk holding an
    /// earlier value goes to a fresh version of it, so only the data's own dependences
    /// order the ops. Channels are the compiler's, with more connections per pair
    /// (`channels::RENAMED_PER_PAIR`).
    Renamed,
}

impl Channels {
    pub fn name(self) -> &'static str {
        match self {
            Channels::Program => "program",
            Channels::Compiler => "compiler",
            Channels::Chunks => "chunks",
            Channels::Split => "split",
            Channels::Renamed => "renamed",
        }
    }

    /// What it adds to a description of a schedule (`program order, first-fit blocks{}`).
    pub fn describe(self) -> &'static str {
        match self {
            Channels::Program => "",
            Channels::Compiler => ", the compiler's channels",
            Channels::Chunks => ", a channel per chunk",
            Channels::Split => ", a channel per chunk with transfers cut into chunks",
            Channels::Renamed => {
                ", the compiler's channels with transfers cut into chunks and scratch renamed"
            }
        }
    }

    /// Whether it is the default, which the plan's JSON leaves out.
    pub fn is_program(&self) -> bool {
        *self == Channels::Program
    }
}

/// One candidate schedule and how it fared.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Candidate {
    pub order: Order,
    pub packing: Packing,
    #[serde(default, skip_serializing_if = "Channels::is_program")]
    pub channels: Channels,
    /// Blocks of one rank that receive or send the same chunks one peer after another made
    /// one block of several peers (`merge_peers.rs`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub several_peers: bool,
    /// Rounds of the deadlock simulation, when it completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rounds: Option<u32>,
    /// Blocks over all ranks, when it was lowered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks: Option<u32>,
    /// Predicted time in ns at each of [`super::PREDICT_SIZES`], when it was costed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub predicted_ns: Vec<u64>,
    /// Why it was rejected or not tried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected: Option<String>,
    #[serde(default)]
    pub chosen: bool,
}

/// Whether a flag is off (the JSON leaves it out).
fn is_false(b: &bool) -> bool {
    !*b
}

/// What the scheduler did: the chosen candidate, every candidate, and notes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleNote {
    pub order: Order,
    pub packing: Packing,
    #[serde(default, skip_serializing_if = "Channels::is_program")]
    pub channels: Channels,
    /// The chosen candidate's blocks of several peers ([`Candidate::several_peers`]).
    #[serde(default, skip_serializing_if = "is_false")]
    pub several_peers: bool,
    /// Whether sends were hoisted (off when asked, or after a deadlock).
    pub hoisted: bool,
    /// Rounds of the chosen plan in the deadlock simulation.
    pub rounds: u32,
    pub candidates: Vec<Candidate>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl ScheduleNote {
    /// Checks the invariant in the module docs.
    pub fn check(&self) -> Result<(), String> {
        let chosen: Vec<&Candidate> = self.candidates.iter().filter(|c| c.chosen).collect();
        match chosen[..] {
            [c] if c.order == self.order
                && c.packing == self.packing
                && c.channels == self.channels
                && c.several_peers == self.several_peers =>
            {
                Ok(())
            }
            [_] => Err(
                "the chosen candidate differs from the note's order, packing, channels or peers"
                    .into(),
            ),
            _ => Err(format!(
                "{} of {} candidates are marked chosen, not one",
                chosen.len(),
                self.candidates.len()
            )),
        }
    }
}

/// What the choice needs besides the program: the compile's slots and limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleContext {
    /// Slots per connection for the deadlock simulation.
    pub slots: u32,
    pub limits: Limits,
}

impl Default for ScheduleContext {
    fn default() -> Self {
        ScheduleContext {
            slots: crate::DEFAULT_SLOTS,
            limits: Limits::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(order: Order, chosen: bool) -> Candidate {
        Candidate {
            order,
            packing: Packing::FirstFit,
            channels: Channels::Program,
            several_peers: false,
            rounds: Some(3),
            blocks: Some(2),
            predicted_ns: vec![1, 2, 3],
            rejected: None,
            chosen,
        }
    }

    #[test]
    fn a_note_names_the_one_chosen_candidate() {
        let mut note = ScheduleNote {
            order: Order::Dependence,
            packing: Packing::FirstFit,
            channels: Channels::Program,
            several_peers: false,
            hoisted: true,
            rounds: 3,
            candidates: vec![
                candidate(Order::Program, false),
                candidate(Order::Dependence, true),
            ],
            notes: Vec::new(),
        };
        assert_eq!(note.check(), Ok(()));
        let differs = Err(
            "the chosen candidate differs from the note's order, packing, channels or peers".into(),
        );
        note.several_peers = true;
        assert_eq!(note.check(), differs);
        note.several_peers = false;
        note.order = Order::Program;
        assert_eq!(note.check(), differs);
        note.candidates[1].chosen = false;
        assert_eq!(
            note.check(),
            Err("0 of 2 candidates are marked chosen, not one".into())
        );
    }
}
