//! One-shot allreduce calls: a plan that is a one-shot allreduce
//! ([`coll_compiler::gpu::oneshot::is_oneshot`]: every rank sends its whole input to every
//! other rank, and nothing else crosses) runs its calls of at most
//! [`GpuSettings::oneshot_max`](super::GpuSettings::oneshot_max) bytes as `kernel/oneshot.cuh`
//! rather than on the interpreter: each rank stores its input as LL lines into a region of
//! every other rank's arena and combines what it receives in rank order. No instructions, no
//! slicing, no acknowledgements: a call costs about what one exchange over the link does.
//!
//! Invariants:
//! - Every rank's region lies in its GPU's arena ([`super::layout`]) and holds
//!   [`region_bytes`]: two parities of `n` parts of `lines` LL lines, then
//!   [`ONESHOT_CTAS`] call counters, zero when allocated.
//! - A call uses the one-shot only when every rank's region is addressable from every GPU of
//!   this process (one process, or a group whose arenas are all mapped), each GPU's local
//!   ranks fit [`ONESHOT_MAX_RANKS`] and its CTAs its SMs, and the call's bytes fit a part;
//!   every rank of a call decides alike (the same plan, settings and count), so the kernel's
//!   counters move together on every rank.

use super::abi::{LL_LINE_BYTES, ONESHOT_CTAS, ONESHOT_MAX_RANKS};
use super::call::StreamHandle;
use super::device::{Gpu, TypedKernels};
use super::{CallArgs, CallInfo, CudaExecutor, GpuSettings, HostSplit, OneShotArgs, Protocol};
use crate::dtype::ReduceOp;
use crate::error::ExecError;
use coll_compiler::gpu::oneshot::is_oneshot;
use coll_compiler::plan::Plan;
use cudarc::driver::sys;
use std::time::Instant;

/// LL lines of one (parity, source) part of a rank's region for `plan`, loaded for counts up
/// to `max_count` of `esize`-byte elements with `set`: 0 when the plan gets no region (not a
/// one-shot allreduce, more ranks than [`ONESHOT_MAX_RANKS`], or the one-shot turned off).
pub fn region_lines(plan: &Plan, set: &GpuSettings, esize: u64, max_count: u64) -> u64 {
    let bytes = set.oneshot_max.min(max_count.saturating_mul(esize));
    if bytes == 0 || plan.ranks as usize > ONESHOT_MAX_RANKS || !is_oneshot(plan) {
        return 0;
    }
    bytes.div_ceil(8)
}

/// Bytes of one rank's region of a plan of `n` ranks with parts of `lines` lines.
pub fn region_bytes(n: u32, lines: u64) -> u64 {
    2 * u64::from(n) * lines * LL_LINE_BYTES as u64 + 8 * ONESHOT_CTAS as u64
}

/// A loaded plan's one-shot calls: every rank's region as this process addresses it.
#[derive(Clone, Debug)]
pub struct OneShot {
    /// Per plan rank.
    pub inbox: Vec<u64>,
    /// Lines of one part.
    pub lines: u64,
}

impl OneShot {
    /// The one-shot of a load whose ranks' regions are at `inbox` (0: not addressable here)
    /// with parts of `lines` lines, on GPUs of `sms` SMs holding at most `local` ranks each;
    /// `None` where the invariants of the module docs do not hold.
    pub fn new(inbox: Vec<u64>, lines: u64, local: usize, sms: u32) -> Option<OneShot> {
        let fits = local <= ONESHOT_MAX_RANKS && local * ONESHOT_CTAS <= sms as usize;
        (lines > 0 && fits && !inbox.is_empty() && inbox.iter().all(|&a| a != 0))
            .then_some(OneShot { inbox, lines })
    }

    /// Sets the call counters of every local rank of `gpus` (a plan of `n` ranks) to
    /// `epoch`, the LL epoch test hook ([`GpuSettings::ll_epoch`]), so a short run crosses a
    /// clean call and the flags' wrap; nothing when it is 0 (the counters are allocated zero).
    pub(super) fn start_counters(
        &self,
        gpus: &[super::GpuPlan],
        n: u32,
        epoch: u64,
    ) -> Result<(), ExecError> {
        if epoch == 0 {
            return Ok(());
        }
        let at = region_bytes(n, self.lines) - 8 * ONESHOT_CTAS as u64;
        for g in gpus {
            for &p in &g.local_ranks {
                let Some(&base) = self.inbox.get(p as usize) else {
                    continue;
                };
                // SAFETY: the counters are the last ONESHOT_CTAS words of rank p's region,
                // live in its GPU's arena (this GPU's own: p is local), and no call runs yet.
                unsafe { g.gpu.upload(base + at, &[epoch; ONESHOT_CTAS]) }?;
            }
            g.gpu.synchronize()?;
        }
        Ok(())
    }

    /// Whether a call of `bytes` fits one part.
    pub fn serves(&self, bytes: u64) -> bool {
        bytes.div_ceil(8) <= self.lines
    }
}

/// One GPU's part of a one-shot call, taken from the executor so that the parts may run on
/// the launch threads.
struct Part<'a> {
    gpu: &'a Gpu,
    kernels: &'a TypedKernels,
    stream: StreamHandle,
    error: u64,
    local_ranks: &'a [u32],
}

impl CudaExecutor {
    /// Enqueues a call of `count` elements as a one-shot allreduce (`os`, which serves it) on
    /// `streams` with user rank q's (send, receive) in `bufs[q]`, then the avg scaling.
    ///
    /// # Safety
    /// As [`enqueue_raw`](CudaExecutor::enqueue_raw); `count` is at most the count the plan
    /// was loaded for.
    pub(super) unsafe fn enqueue_oneshot(
        &self,
        os: &OneShot,
        streams: &[sys::CUstream],
        bufs: &[(u64, u64)],
        count: u64,
        op: ReduceOp,
        started: Instant,
    ) -> Result<CallInfo, ExecError> {
        let n = self.plan.ranks;
        let mut inbox = [0u64; ONESHOT_MAX_RANKS];
        for (to, &from) in inbox.iter_mut().zip(&os.inbox) {
            *to = from;
        }
        let cycles = (self.timeout.as_secs_f64() * 2.0e9) as u64;
        let parts: Vec<Part<'_>> = (self.gpus.iter().zip(streams))
            .map(|(gp, &stream)| Part {
                gpu: &gp.gpu,
                kernels: &gp.kernels,
                stream: StreamHandle(stream),
                error: gp.error.ptr(),
                local_ranks: &gp.local_ranks,
            })
            .collect();
        let spread = &self.spread;
        let part = |i: usize| -> Result<(), ExecError> {
            let g = &parts[i];
            let mut a = OneShotArgs {
                inbox,
                input: [0; ONESHOT_MAX_RANKS],
                output: [0; ONESHOT_MAX_RANKS],
                rank: [0; ONESHOT_MAX_RANKS],
                count,
                lines: os.lines,
                err: g.error,
                timeout: cycles,
                nranks: n,
                pad: 0,
            };
            for (slot, &p) in g.local_ranks.iter().enumerate().take(ONESHOT_MAX_RANKS) {
                let (send, recv) = bufs[spread.user(p) as usize];
                (a.input[slot], a.output[slot], a.rank[slot]) = (send, recv, p);
            }
            let local = g.local_ranks.len() as u32;
            // SAFETY: the regions in `inbox` are every rank's live one-shot region as this
            // GPU addresses them (`OneShot::new` took them from the arenas, all reachable),
            // of `os.lines` lines a part; the buffers are the caller's of `count` elements
            // (contract); the error record is this GPU's; `stream` is its (contract).
            unsafe { g.kernels.launch_oneshot(g.gpu, g.stream.0, op, local, &a) }?;
            if op == ReduceOp::Avg {
                // The scaling's argument only for avg calls: most calls skip its 1.8 KiB.
                let mut scale = CallArgs::default();
                scale.output[..ONESHOT_MAX_RANKS].copy_from_slice(&a.output);
                // SAFETY: as above; the outputs hold `count` elements.
                unsafe {
                    g.kernels
                        .launch_scale(g.gpu, g.stream.0, &scale, local, count, n)
                }?;
            }
            Ok(())
        };
        let prepared = Instant::now();
        match &self.launch_threads {
            Some(l) => l.run(parts.len(), part),
            None => (0..parts.len()).try_for_each(part),
        }?;
        Ok(CallInfo {
            algorithm: self.plan.name.clone(),
            collective: self.plan.collective.0,
            count,
            protocol: Protocol::Ll,
            ctas_per_block: ONESHOT_CTAS as u32,
            direct: super::direct::CallDirect::Off,
            staged_because: None,
            copy_engines: false,
            oneshot: true,
            host: HostSplit {
                prepare: prepared - started,
                enqueue: prepared.elapsed(),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::shipped_plan;

    #[test]
    fn only_one_shot_allreduces_get_regions_sized_for_the_largest_call() {
        let set = GpuSettings::default();
        let one = shipped_plan("allreduce_oneshot.coll", 4);
        // 64 KiB at most, or the largest call when smaller.
        assert_eq!(region_lines(&one, &set, 4, 1 << 30), set.oneshot_max / 8);
        assert_eq!(region_lines(&one, &set, 4, 3), 2);
        let off = GpuSettings {
            oneshot_max: 0,
            ..GpuSettings::default()
        };
        assert_eq!(region_lines(&one, &off, 4, 1 << 30), 0);
        let ring = shipped_plan("allreduce_ring.coll", 4);
        assert_eq!(region_lines(&ring, &set, 4, 1 << 30), 0);
        let many = shipped_plan("allreduce_oneshot.coll", ONESHOT_MAX_RANKS + 1);
        assert_eq!(region_lines(&many, &set, 4, 1 << 30), 0);
        // Two parities of four parts of 8 192 lines, and 16 counters.
        assert_eq!(region_bytes(4, 8192), 2 * 4 * 8192 * 16 + 128);
    }

    #[test]
    fn the_tuning_settings_of_a_one_shot_plan_keep_it_one() {
        // `coll bench --auto` tries the one-shot with blocks of several peers (one receive of
        // every peer a rank) and with 16 instances (each message cut in 16): still one shot.
        let topo = coll_compiler::topology::Topology::parse("nvswitch:4").expect("preset");
        for settings in [crate::shipped::SEVERAL_PEERS, "instances=16", ""] {
            let plan = crate::shipped::plan_of("allreduce_oneshot.coll", &topo, settings)
                .expect("compiles")
                .into_inner();
            assert!(is_oneshot(&plan), "{settings}");
        }
        let ring = crate::shipped::plan_of("allreduce_ring.coll", &topo, "instances=16")
            .expect("compiles")
            .into_inner();
        assert!(!is_oneshot(&ring));
    }

    #[test]
    fn a_region_out_of_reach_or_too_many_ctas_turn_it_off() {
        assert!(OneShot::new(vec![1 << 20, 2 << 20], 8, 2, 132).is_some());
        assert!(OneShot::new(vec![1 << 20, 0], 8, 2, 132).is_none());
        assert!(OneShot::new(vec![1 << 20, 2 << 20], 0, 2, 132).is_none());
        // Nine local ranks, or 16 CTAs each beyond the SMs.
        assert!(OneShot::new(vec![1; 9], 8, 9, 1000).is_none());
        assert!(OneShot::new(vec![1; 8], 8, 8, 100).is_none());
        let os = OneShot::new(vec![1, 2], 8, 2, 132).expect("serves");
        assert!(os.serves(64) && !os.serves(65));
    }
}
