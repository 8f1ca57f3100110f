//! Which protocol the GPU executor runs a call in: LL (data and flag in each 8-byte half of
//! 16-byte lines, no fences: the least latency, at part of the link's bandwidth) or bulk
//! (staging slots and fences). The choice is per call, by its size, for the whole plan: the
//! plan's own protocol and its blocks' hints are not read. The executor decides with
//! [`LlLimits::uses_ll`]; the model-fit test (`tests/model_fit.rs`) costs recorded
//! measurements by the same rule. The scheduler does not use it yet: it costs every size in
//! the plan's protocol. The executor's third protocol, LL128, serves some of the calls this
//! rule leaves to bulk (`coll_executor::cuda::config::CallLimits::ll128`); the model has no
//! LL128 costs and prices those calls as bulk.
//!
//! Invariants: every function here is pure and total (no panics, saturating arithmetic); a
//! count of 0 uses LL whenever the plan's widest op fits LL's lines and the limits are not 0.

use crate::plan::Plan;

/// Calls whose largest message is at most this many bytes use LL, by default. Measured on
/// 2 x H200 (bench/results/2026-11-22-h200x2-ll.md): LL and bulk meet at 1 MiB messages (2
/// MiB ring allreduce calls on 2 ranks); LL is 25% faster at 512 KiB messages.
pub const LL_MAX_BYTES: u64 = 512 * 1024;

/// Calls whose larger user buffer (input or output, per rank) exceeds this many times the
/// message threshold (4 MiB by default) use bulk whatever their message size: LL sends a
/// flag with every 8 bytes of data, so on calls this large its bandwidth costs more than its
/// latency saves. Measured on 4 x H200 (bench/results/2026-11-22-h200x4.md, raw log
/// 2026-11-22-h200x4/proto.md): ring allreduce with 16 instances has 512 KiB messages up to
/// 32 MiB calls on 4 ranks, and LL was 1.15x faster than bulk at 4 MiB but 0.93x at 8 MiB and
/// 0.61x at 32 MiB; with 1 instance, and on 2 ranks, the two met at 2-4 MiB.
pub const LL_CALL_FACTOR: u64 = 8;

/// LL staging per connection and sub-CTA comes in slots of this many bytes of 16-byte lines,
/// each line carrying 8 bytes of data.
pub const LL_SLOT_BYTES: u32 = 16 * 1024;

/// Chunks in the largest op of `plan` (at least 1): what one message must carry.
pub fn widest_op(plan: &Plan) -> u64 {
    plan.gpus
        .iter()
        .flat_map(|g| &g.blocks)
        .flat_map(|b| &b.ops)
        .map(|o| u64::from(o.count))
        .max()
        .unwrap_or(1)
        .max(1)
}

/// How a plan's chunks size its calls: chunk factor `k`, chunks of its largest op
/// ([`widest_op`]) and of its larger user buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkShape {
    pub k: u64,
    pub widest: u64,
    pub user_chunks: u64,
}

impl ChunkShape {
    pub fn of(plan: &Plan) -> ChunkShape {
        ChunkShape {
            k: plan.chunk_factor,
            widest: widest_op(plan),
            user_chunks: plan
                .buffers
                .iter()
                .take(2)
                .map(|b| b.chunks)
                .max()
                .unwrap_or(0),
        }
    }

    /// Bytes of the call's largest message and of its larger user buffer, for `count`
    /// elements of `esize` bytes.
    pub fn bytes(self, esize: u64, count: u64) -> (u64, u64) {
        let chunk = count.div_ceil(self.k.max(1));
        (
            chunk
                .saturating_mul(self.widest.max(1))
                .saturating_mul(esize),
            chunk.saturating_mul(self.user_chunks).saturating_mul(esize),
        )
    }
}

/// Whether LL lines can carry the widest op: every chunk of a message starts on a fresh
/// line, so each may waste up to a line's 8 bytes; keep at least half a slot for data.
pub fn ll_fits(widest: u64, esize: u64) -> bool {
    2 * widest.max(1) * (8 + esize) <= u64::from(LL_SLOT_BYTES / 2)
}

/// When calls use LL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LlLimits {
    /// Calls whose largest message is at most this many bytes use LL (0: never).
    pub max: u64,
    /// ... and whose larger user buffer is at most this many bytes.
    pub call_max: u64,
}

impl LlLimits {
    /// The limits for a message threshold of `max` bytes ([`LL_CALL_FACTOR`] times that for
    /// the call).
    pub fn new(max: u64) -> LlLimits {
        LlLimits {
            max,
            call_max: max.saturating_mul(LL_CALL_FACTOR),
        }
    }

    /// Whether a call of `count` elements of `esize` bytes of a plan of shape `sh` runs in
    /// LL: its largest message at most [`max`](Self::max), its larger buffer at most
    /// [`call_max`](Self::call_max), and its widest op fits LL's lines.
    pub fn uses_ll(self, sh: ChunkShape, esize: u64, count: u64) -> bool {
        let (message, call) = sh.bytes(esize, count);
        self.max > 0 && message <= self.max && call <= self.call_max && ll_fits(sh.widest, esize)
    }
}

impl Default for LlLimits {
    fn default() -> LlLimits {
        LlLimits::new(LL_MAX_BYTES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RING: ChunkShape = ChunkShape {
        k: 2,
        widest: 1,
        user_chunks: 2,
    };

    #[test]
    fn ll_up_to_the_message_and_call_limits() {
        let ll = LlLimits::default();
        // f32: 1 MiB calls of a 2-chunk plan send 512 KiB messages, LL's largest.
        assert!(ll.uses_ll(RING, 4, 1 << 18));
        assert!(!ll.uses_ll(RING, 4, (1 << 18) + 2));
        // Small messages, but a buffer over 4 MiB: bulk.
        let many = ChunkShape {
            k: 64,
            widest: 1,
            user_chunks: 64,
        };
        assert!(ll.uses_ll(many, 4, 1 << 20));
        assert!(!ll.uses_ll(many, 4, (1 << 20) + 64));
        assert!(!LlLimits::new(0).uses_ll(RING, 4, 2));
        assert!(ll.uses_ll(RING, 4, 0));
    }

    #[test]
    fn ops_too_wide_for_lines_run_bulk() {
        let wide = ChunkShape {
            k: 1024,
            widest: 512,
            user_chunks: 1024,
        };
        assert!(!ll_fits(512, 4));
        assert!(!LlLimits::default().uses_ll(wide, 4, 1024));
        assert!(ll_fits(1, 8));
    }
}
