//! NCCL through cudarc, for `coll bench --vs-nccl` and `--overlap`: one process, one rank per
//! GPU, coll's streams, group calls as nccl-tests makes them, and NCCL's own configurations
//! ([`NcclConfig`]): buffers from `ncclMemAlloc` as nccl-tests allocates them ([`MemBuffers`]),
//! unregistered or registered as symmetric windows ([`Nccl::register_symmetric`]), and
//! communicators with a CTA policy ([`CtaPolicy`], [`Nccl::init_policy`]).
//!
//! Invariants: a [`Nccl`] owns one communicator per GPU, destroyed on drop after its windows
//! are deregistered; a [`MemBuffers`] owns one send and one receive buffer per GPU, freed on
//! drop, and must outlive every communicator that registered them. Every NCCL entry point
//! newer than 2.18 is looked up before it is called ([`has_symbol`]): cudarc's bindings are
//! NCCL 2.30's and would panic on a missing symbol; an older library gets an error naming
//! the call. NCCL reads its settings from the process environment when it initialises; this
//! module never writes it: the `coll` binary switches NVLink multicast off ([`NVLS_VAR`]) at
//! start, as on every machine measured (2 × H200 on an NVSwitch, NVLink multicast off), and a
//! program that calls [`Nccl::init`] itself says what it wants there before it starts any
//! thread.

use coll_executor::ExecError;
use coll_executor::cuda::device::Gpu;
use coll_executor::dtype::{DType, ReduceOp};
use coll_lang::builtins::CollectiveKind;
use cudarc::nccl::{result, sys};
use std::ffi::{CStr, c_int, c_void};

/// NCCL's switch for NVLink multicast (NVLS), which it would pick on an NVSwitch machine;
/// `0` turns it off.
pub const NVLS_VAR: &str = "NCCL_NVLS_ENABLE";

/// `NCCL_WIN_COLL_SYMMETRIC` of NCCL 2.27 and later: a window every rank registers at the
/// same offsets, which NCCL's symmetric kernels read and write directly.
pub const WIN_COLL_SYMMETRIC: c_int = 0x01;
/// The first NCCL with symmetric windows (`ncclCommWindowRegister`).
pub const SYMMETRIC_SINCE: i32 = 22700;
/// The first NCCL with the zero-CTA policy (collectives on the copy engines).
pub const ZERO_CTA_SINCE: i32 = 22800;
/// `NCCL_CONFIG_UNDEF_INT`: a config field NCCL fills with its default.
const UNDEF_INT: c_int = c_int::MIN;
/// The config version written ([`config_2_28`]): NCCL 2.28.3's, so that 2.28 reads every
/// field up to `nvlinkCentricSched` and a later NCCL treats the newer ones as unset.
pub const CONFIG_VERSION: u32 = 22803;

fn nccl_err(what: &str, e: impl std::fmt::Debug) -> ExecError {
    ExecError::Gpu(format!("NCCL {what}: {e:?}"))
}

/// `Ok` for `ncclSuccess`, else an error naming `what`, the code and NCCL's last message.
fn check(what: &str, r: sys::ncclResult_t) -> Result<(), ExecError> {
    if r == sys::ncclResult_t::ncclSuccess {
        return Ok(());
    }
    if !has_symbol("ncclGetLastError") {
        return Err(ExecError::Gpu(format!("NCCL {what}: {r:?}")));
    }
    // SAFETY: ncclGetLastError takes a null communicator for the thread's last error and
    // returns a NUL-terminated string it owns (or null).
    let last = unsafe {
        let p = sys::ncclGetLastError(std::ptr::null_mut());
        if p.is_null() {
            String::new()
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    let last = if last.is_empty() {
        String::new()
    } else {
        format!(" ({last})")
    };
    Err(ExecError::Gpu(format!("NCCL {what}: {r:?}{last}")))
}

/// What [`Nccl::init`] and [`version`] say when NCCL cannot be loaded.
pub const NO_NCCL: &str = "NCCL (libnccl.so.2) not found: put its lib directory on \
    LD_LIBRARY_PATH (e.g. from `pip install nvidia-nccl-cu12`)";

/// Whether the NCCL library can be loaded (cudarc panics on its first use otherwise).
pub fn present() -> bool {
    // SAFETY: loading NCCL runs only its library initialisers, as any program using it does.
    unsafe { sys::is_culib_present() }
}

/// Whether the loaded NCCL exports `name` (false when NCCL cannot be loaded).
pub fn has_symbol(name: &str) -> bool {
    if !present() {
        return false;
    }
    // SAFETY: the library is present (checked above), so `culib` loads it without panicking;
    // the symbol is only looked up, never called through this type.
    unsafe {
        sys::culib()
            .get::<unsafe extern "C" fn()>(name.as_bytes())
            .is_ok()
    }
}

/// An error naming `call` when the loaded NCCL lacks it.
fn need(call: &str) -> Result<(), ExecError> {
    if !present() {
        Err(ExecError::Gpu(NO_NCCL.into()))
    } else if has_symbol(call) {
        Ok(())
    } else {
        Err(ExecError::Gpu(format!(
            "NCCL {call}: not in the loaded libnccl (too old)"
        )))
    }
}

/// NCCL's version as an integer (e.g. 22803) and as text.
pub fn version() -> Result<(i32, String), ExecError> {
    if !present() {
        return Err(ExecError::Gpu(NO_NCCL.into()));
    }
    let v = result::get_nccl_version().map_err(|e| nccl_err("version", e))?;
    Ok((v, format!("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100)))
}

/// How NCCL ran beside coll: the measured configurations, best first in no particular way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NcclConfig {
    /// `ncclCommInitAll`, buffers from `ncclMemAlloc`, unregistered (nccl-tests' `-R 0`).
    Default,
    /// The same buffers registered as symmetric windows (nccl-tests' `-R 2`).
    Symmetric,
    /// A communicator with the zero-CTA policy on the symmetric buffers (allgather and
    /// alltoall: the copy engines move the data, no SM runs).
    ZeroCta,
}

impl NcclConfig {
    pub const ALL: [NcclConfig; 3] = [
        NcclConfig::Default,
        NcclConfig::Symmetric,
        NcclConfig::ZeroCta,
    ];

    /// `default`, `symmetric`, `zero-cta`.
    pub fn name(self) -> &'static str {
        match self {
            NcclConfig::Default => "default",
            NcclConfig::Symmetric => "symmetric",
            NcclConfig::ZeroCta => "zero-cta",
        }
    }

    /// The configuration of [`name`](Self::name).
    pub fn from_name(s: &str) -> Option<NcclConfig> {
        NcclConfig::ALL.into_iter().find(|c| c.name() == s)
    }
}

/// A communicator's CTA policy (NCCL 2.27+: `NCCL_CTA_POLICY_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CtaPolicy {
    /// NCCL's default.
    Default = 0,
    /// Fewer CTAs where that costs little bandwidth, leaving SMs to concurrent work.
    Efficiency = 1,
    /// No CTAs where the copy engines can do the work (symmetric windows, 2.28+).
    Zero = 2,
}

impl CtaPolicy {
    /// `default`, `efficiency`, `zero`.
    pub fn name(self) -> &'static str {
        match self {
            CtaPolicy::Default => "default",
            CtaPolicy::Efficiency => "efficiency",
            CtaPolicy::Zero => "zero",
        }
    }
}

/// The communicator config `NCCL_CONFIG_INITIALIZER` of NCCL 2.28.3 makes, with `policy`:
/// size of 2.28's struct (cudarc's is 2.30's, whose first fields are 2.28's; 2.28 copies
/// `size` bytes, at most its own struct's), magic, version [`CONFIG_VERSION`], every other
/// field unset (`INT_MIN`, null) so NCCL applies its defaults.
pub fn config_2_28(policy: CtaPolicy) -> sys::ncclConfig_t {
    sys::ncclConfig_t {
        size: std::mem::offset_of!(sys::ncclConfig_t, graphUsageMode),
        magic: 0xcafe_beef,
        version: CONFIG_VERSION,
        blocking: UNDEF_INT,
        cgaClusterSize: UNDEF_INT,
        minCTAs: UNDEF_INT,
        maxCTAs: UNDEF_INT,
        netName: std::ptr::null(),
        splitShare: UNDEF_INT,
        trafficClass: UNDEF_INT,
        commName: std::ptr::null(),
        collnetEnable: UNDEF_INT,
        CTAPolicy: policy as c_int,
        shrinkShare: UNDEF_INT,
        nvlsCTAs: UNDEF_INT,
        nChannelsPerNetPeer: UNDEF_INT,
        nvlinkCentricSched: UNDEF_INT,
        graphUsageMode: UNDEF_INT,
        numRmaCtx: UNDEF_INT,
        maxP2pPeers: UNDEF_INT,
    }
}

/// One send and one receive buffer per GPU from `ncclMemAlloc` (cuMem memory mapped for
/// every peer, what nccl-tests allocates), freed on drop.
#[derive(Debug)]
pub struct MemBuffers {
    /// Per rank: (send, receive) device addresses.
    ptrs: Vec<(u64, u64)>,
    send_bytes: u64,
    recv_bytes: u64,
}

impl MemBuffers {
    /// `send_bytes` and `recv_bytes` on each of `gpus`.
    pub fn alloc(gpus: &[&Gpu], send_bytes: u64, recv_bytes: u64) -> Result<MemBuffers, ExecError> {
        need("ncclMemAlloc")?;
        let mut bufs = MemBuffers {
            ptrs: Vec::with_capacity(gpus.len()),
            send_bytes: send_bytes.max(1),
            recv_bytes: recv_bytes.max(1),
        };
        for g in gpus {
            // ncclMemAlloc allocates on the thread's current device.
            g.context()
                .bind_to_thread()
                .map_err(|e| nccl_err("ncclMemAlloc: binding the GPU", e))?;
            let mut pair = [0u64; 2];
            for (slot, bytes) in pair.iter_mut().zip([bufs.send_bytes, bufs.recv_bytes]) {
                let mut p: *mut c_void = std::ptr::null_mut();
                // SAFETY: `p` is a valid out-pointer; NCCL allocates `bytes` on the current
                // device, bound above.
                check("ncclMemAlloc", unsafe {
                    sys::ncclMemAlloc(&mut p, bytes as usize)
                })?;
                *slot = p as u64;
            }
            bufs.ptrs.push((pair[0], pair[1]));
        }
        Ok(bufs)
    }

    /// Per rank: (send, receive) device addresses.
    pub fn bases(&self) -> &[(u64, u64)] {
        &self.ptrs
    }
}

impl Drop for MemBuffers {
    fn drop(&mut self) {
        for &(s, r) in &self.ptrs {
            for p in [s, r] {
                if p != 0 {
                    // SAFETY: each address came from ncclMemAlloc and is freed once; users
                    // synchronise their streams and drop communicators first (module docs).
                    let _ = unsafe { sys::ncclMemFree(p as *mut c_void) };
                }
            }
        }
    }
}

/// One communicator per GPU, and the windows registered in them.
#[derive(Debug)]
pub struct Nccl {
    comms: Vec<sys::ncclComm_t>,
    /// Per communicator, its registered windows.
    windows: Vec<Vec<sys::ncclWindow_t>>,
    /// Whether `ncclAlltoAll` exists (2.28+); else alltoall is grouped sends and receives.
    alltoall_api: bool,
}

// SAFETY: NCCL communicators may be used from any thread as long as calls on one are not
// concurrent; `Nccl` only makes calls through `&mut self`-free methods from one thread.
unsafe impl Send for Nccl {}

impl Nccl {
    fn of(comms: Vec<sys::ncclComm_t>) -> Nccl {
        let windows = vec![Vec::new(); comms.len()];
        Nccl {
            comms,
            windows,
            alltoall_api: has_symbol("ncclAlltoAll"),
        }
    }

    /// Creates communicators over `ordinals` (rank i on GPU `ordinals[i]`), NCCL's default
    /// configuration.
    pub fn init(ordinals: &[usize]) -> Result<Nccl, ExecError> {
        if !present() {
            return Err(ExecError::Gpu(NO_NCCL.into()));
        }
        let devs: Vec<i32> = ordinals.iter().map(|&o| o as i32).collect();
        let mut comms = vec![std::ptr::null_mut(); devs.len()];
        // SAFETY: `comms` has room for one communicator per device in `devs`.
        unsafe { result::comm_init_all(comms.as_mut_ptr(), devs.len() as i32, devs.as_ptr()) }
            .map_err(|e| nccl_err("ncclCommInitAll", e))?;
        Ok(Nccl::of(comms))
    }

    /// Creates communicators over `gpus` (rank i on `gpus[i]`) with `policy`, as nccl-tests
    /// does: a unique id, then `ncclCommInitRankConfig` per rank in one group.
    pub fn init_policy(gpus: &[&Gpu], policy: CtaPolicy) -> Result<Nccl, ExecError> {
        if !present() {
            return Err(ExecError::Gpu(NO_NCCL.into()));
        }
        need("ncclCommInitRankConfig")?;
        let mut id = sys::ncclUniqueId { internal: [0; 128] };
        // SAFETY: `id` is a valid out-pointer.
        check("ncclGetUniqueId", unsafe { sys::ncclGetUniqueId(&mut id) })?;
        let n = gpus.len() as c_int;
        let mut comms: Vec<sys::ncclComm_t> = vec![std::ptr::null_mut(); gpus.len()];
        let mut configs: Vec<sys::ncclConfig_t> =
            gpus.iter().map(|_| config_2_28(policy)).collect();
        result::group_start().map_err(|e| nccl_err("group start", e))?;
        let started = comms
            .iter_mut()
            .zip(configs.iter_mut())
            .zip(gpus)
            .enumerate()
            .try_for_each(|(r, ((comm, config), g))| {
                // ncclCommInitRankConfig takes the thread's current device.
                g.context()
                    .bind_to_thread()
                    .map_err(|e| nccl_err("ncclCommInitRankConfig: binding the GPU", e))?;
                // SAFETY: `comm` and `config` are valid for the call (they outlive the group,
                // which NCCL finishes in group end below); `id` was made by ncclGetUniqueId.
                check("ncclCommInitRankConfig", unsafe {
                    sys::ncclCommInitRankConfig(comm, n, id, r as c_int, config)
                })
            });
        let ended = result::group_end()
            .map(|_| ())
            .map_err(|e| nccl_err("group end (ncclCommInitRankConfig)", e));
        let made = Nccl::of(comms);
        started.and(ended)?;
        if made.comms.iter().any(|c| c.is_null()) {
            return Err(ExecError::Gpu(
                "NCCL ncclCommInitRankConfig: a communicator was not created".into(),
            ));
        }
        Ok(made)
    }

    /// Registers `bufs` (every rank's send and receive buffer, whole) as symmetric windows in
    /// every communicator, in one group; they stay registered until
    /// [`deregister`](Self::deregister) or drop. `bufs` must outlive `self`. A communicator
    /// that cannot make symmetric windows (NCCL then registers nothing and says nothing) is
    /// an error naming the rank, with nothing left registered.
    pub fn register_symmetric(&mut self, bufs: &MemBuffers) -> Result<(), ExecError> {
        need("ncclCommWindowRegister")?;
        need("ncclCommWindowDeregister")?;
        let n = self.comms.len();
        if bufs.ptrs.len() != n {
            return Err(ExecError::Gpu(format!(
                "NCCL ncclCommWindowRegister: {} buffer pairs for {n} communicators",
                bufs.ptrs.len()
            )));
        }
        // NCCL writes the windows at group end: their slots stay put until then (the vector
        // is neither grown nor moved in between).
        let mut wins: Vec<sys::ncclWindow_t> = vec![std::ptr::null_mut(); 2 * n];
        let slots = wins.as_mut_ptr();
        result::group_start().map_err(|e| nccl_err("group start", e))?;
        let mut registered = Ok(());
        for (r, &comm) in self.comms.iter().enumerate() {
            let (s, d) = bufs.ptrs[r];
            for (j, (p, bytes)) in [(s, bufs.send_bytes), (d, bufs.recv_bytes)]
                .into_iter()
                .enumerate()
            {
                // SAFETY: `p` is `bytes` of ncclMemAlloc memory of this communicator's GPU
                // (MemBuffers' invariant), alive while registered (this method's contract);
                // slot 2r + j is inside `wins`, which outlives the group.
                let rc = unsafe {
                    sys::ncclCommWindowRegister(
                        comm,
                        p as *mut c_void,
                        bytes as usize,
                        slots.add(2 * r + j),
                        WIN_COLL_SYMMETRIC,
                    )
                };
                registered = registered.and(check("ncclCommWindowRegister", rc));
            }
        }
        let ended = result::group_end()
            .map(|_| ())
            .map_err(|e| nccl_err("group end (ncclCommWindowRegister)", e));
        let mut missing = None;
        for (i, &w) in wins.iter().enumerate() {
            if w.is_null() {
                missing = missing.or(Some(i / 2));
            } else {
                self.windows[i / 2].push(w);
            }
        }
        let made = registered.and(ended).and_then(|()| match missing {
            None => Ok(()),
            Some(r) => Err(ExecError::Gpu(format!(
                "NCCL ncclCommWindowRegister: no symmetric window made for rank {r} (NCCL makes \
                 them only with cuMem memory, every GPU reaching every other directly, on one \
                 node, and windows enabled)"
            ))),
        });
        if made.is_err() {
            // Whatever did register goes, so the communicator runs unregistered again.
            let _ = self.deregister();
        }
        made
    }

    /// Deregisters every window (a local call of each rank, as nccl-tests makes it).
    pub fn deregister(&mut self) -> Result<(), ExecError> {
        let mut out = Ok(());
        for (r, &comm) in self.comms.iter().enumerate() {
            for win in self.windows[r].drain(..) {
                // SAFETY: `win` was registered in `comm` and is deregistered once.
                let rc = unsafe { sys::ncclCommWindowDeregister(comm, win) };
                out = out.and(check("ncclCommWindowDeregister", rc));
            }
        }
        out
    }

    /// Enqueues one collective on every GPU's stream (a group call); `bufs[r]` is rank r's
    /// (send, receive) device pointers, `gpus[r]` its GPU.
    ///
    /// # Safety
    /// `gpus` are the GPUs of [`init`](Self::init)'s ordinals, in order; each pointer of
    /// `bufs[r]` is live device memory of `gpus[r]`, as large as NCCL's `kind` needs for
    /// `count` elements of `dtype` (for alltoall `count` per peer on both sides), and stays
    /// alive and otherwise untouched until the call has run on `gpus[r]`'s stream.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn launch(
        &self,
        gpus: &[&Gpu],
        kind: CollectiveKind,
        bufs: &[(u64, u64)],
        count: usize,
        dtype: DType,
        op: ReduceOp,
        root: u32,
    ) -> Result<(), ExecError> {
        let dt = match dtype {
            DType::F32 => sys::ncclDataType_t::ncclFloat32,
            DType::F64 => sys::ncclDataType_t::ncclFloat64,
            DType::F16 => sys::ncclDataType_t::ncclFloat16,
            DType::Bf16 => sys::ncclDataType_t::ncclBfloat16,
            DType::I32 => sys::ncclDataType_t::ncclInt32,
            DType::I64 => sys::ncclDataType_t::ncclInt64,
            DType::U8 => sys::ncclDataType_t::ncclUint8,
        };
        let rop = match op {
            ReduceOp::Sum => sys::ncclRedOp_t::ncclSum,
            ReduceOp::Prod => sys::ncclRedOp_t::ncclProd,
            ReduceOp::Min => sys::ncclRedOp_t::ncclMin,
            ReduceOp::Max => sys::ncclRedOp_t::ncclMax,
            ReduceOp::Avg => sys::ncclRedOp_t::ncclAvg,
        };
        let n = self.comms.len();
        if gpus.len() != n || bufs.len() != n {
            return Err(ExecError::Gpu(format!(
                "NCCL {}: {} GPUs and {} buffer pairs for {n} communicators",
                kind.name(),
                gpus.len(),
                bufs.len()
            )));
        }
        let esize = dtype.size() as u64;
        result::group_start().map_err(|e| nccl_err("group start", e))?;
        let enqueued = self.comms.iter().enumerate().try_for_each(|(r, comm)| {
            let (s, d) = bufs[r];
            let stream = gpus[r].stream().cu_stream() as sys::cudaStream_t;
            let (sp, dp) = (s as *const c_void, d as *mut c_void);
            // SAFETY: the pointers are live device memory of rank r's GPU, sized for `count`
            // elements as NCCL defines the collective (this function's contract), the
            // communicator belongs to that GPU, and the group is closed after the loop.
            let res = unsafe {
                match kind {
                    CollectiveKind::AllReduce => {
                        result::all_reduce(sp, dp, count, dt, rop, *comm, stream).map(|_| ())
                    }
                    CollectiveKind::AllGather => {
                        result::all_gather(sp, dp, count, dt, *comm, stream).map(|_| ())
                    }
                    CollectiveKind::ReduceScatter => {
                        result::reduce_scatter(sp, dp, count, dt, rop, *comm, stream).map(|_| ())
                    }
                    CollectiveKind::Broadcast => {
                        result::broadcast(sp, dp, count, dt, root as i32, *comm, stream).map(|_| ())
                    }
                    CollectiveKind::Reduce => {
                        result::reduce(sp, dp, count, dt, rop, root as i32, *comm, stream)
                            .map(|_| ())
                    }
                    CollectiveKind::SendRecv => {
                        let to = (r + 1) % n;
                        let from = (r + n - 1) % n;
                        result::send(sp, count, dt, to as i32, *comm, stream)
                            .and_then(|_| result::recv(dp, count, dt, from as i32, *comm, stream))
                            .map(|_| ())
                    }
                    CollectiveKind::AllToAll if self.alltoall_api => {
                        // As nccl-tests with NCCL 2.28+: the collective, which symmetric
                        // windows and the zero-CTA policy apply to.
                        sys::ncclAlltoAll(sp, dp, count, dt, *comm, stream)
                            .result()
                            .map(|_| ())
                    }
                    CollectiveKind::AllToAll => {
                        // As nccl-tests before 2.28: grouped sends and receives of `count` per peer.
                        let mut out = Ok(());
                        for q in 0..n {
                            let off = q as u64 * count as u64 * esize;
                            out = out
                                .and_then(|_| {
                                    result::send(
                                        (s + off) as *const c_void,
                                        count,
                                        dt,
                                        q as i32,
                                        *comm,
                                        stream,
                                    )
                                    .map(|_| ())
                                })
                                .and_then(|_| {
                                    result::recv(
                                        (d + off) as *mut c_void,
                                        count,
                                        dt,
                                        q as i32,
                                        *comm,
                                        stream,
                                    )
                                    .map(|_| ())
                                });
                        }
                        out
                    }
                    CollectiveKind::Custom => Ok(()),
                }
            };
            res.map_err(|e| nccl_err(kind.name(), e))
        });
        // The group is closed whatever failed, so the next call starts a group of its own.
        let ended = result::group_end()
            .map(|_| ())
            .map_err(|e| nccl_err("group end", e));
        enqueued.and(ended)
    }
}

impl Drop for Nccl {
    fn drop(&mut self) {
        let _ = self.deregister();
        for c in &self.comms {
            // SAFETY: each communicator came from ncclCommInitAll and is destroyed once;
            // callers synchronise their streams before dropping.
            let _ = unsafe { result::comm_destroy(*c) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_is_nccl_2_28s_initializer() {
        let c = config_2_28(CtaPolicy::Zero);
        // 2.28's struct: size_t, two unsigned, four int, a pointer, two int, a pointer, six
        // int: 80 bytes on a 64-bit machine (no padding), a prefix of cudarc's 2.30 layout.
        assert_eq!(c.size, 80);
        assert_eq!(
            std::mem::offset_of!(sys::ncclConfig_t, nvlinkCentricSched) + 4,
            c.size
        );
        assert_eq!((c.magic, c.version), (0xcafe_beef, 22803));
        assert_eq!(c.CTAPolicy, 2);
        assert_eq!(config_2_28(CtaPolicy::Efficiency).CTAPolicy, 1);
        for v in [
            c.blocking,
            c.cgaClusterSize,
            c.minCTAs,
            c.maxCTAs,
            c.splitShare,
            c.trafficClass,
            c.collnetEnable,
            c.shrinkShare,
            c.nvlsCTAs,
            c.nChannelsPerNetPeer,
            c.nvlinkCentricSched,
        ] {
            assert_eq!(v, i32::MIN);
        }
        assert!(c.netName.is_null() && c.commName.is_null());
    }

    #[test]
    fn missing_calls_are_named() {
        if present() {
            assert!(has_symbol("ncclGetVersion"));
            assert!(!has_symbol("ncclNoSuchCall"));
            let e = need("ncclNoSuchCall").expect_err("no such call");
            assert_eq!(
                e.to_string(),
                "GPU: NCCL ncclNoSuchCall: not in the loaded libnccl (too old)"
            );
        } else {
            assert!(!has_symbol("ncclGetVersion"));
            let e = need("ncclMemAlloc").expect_err("no NCCL");
            assert!(e.to_string().contains("libnccl.so.2) not found"), "{e}");
            let e = MemBuffers::alloc(&[], 1, 1).expect_err("no NCCL");
            assert!(e.to_string().contains("libnccl.so.2) not found"), "{e}");
        }
    }

    #[test]
    fn configurations_have_names() {
        for c in NcclConfig::ALL {
            assert_eq!(NcclConfig::from_name(c.name()), Some(c));
        }
        assert_eq!(NcclConfig::from_name("zero-cta"), Some(NcclConfig::ZeroCta));
        assert_eq!(NcclConfig::from_name("fast"), None);
        assert_eq!(CtaPolicy::Efficiency.name(), "efficiency");
    }
}
