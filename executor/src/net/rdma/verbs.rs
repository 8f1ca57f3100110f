//! Owned handles over the raw verbs of `ibverbs-sys`, each destroyed by `Drop` after what
//! depends on it (a handle holds an `Arc` of its parent: QP -> CQs, PD -> context), and the
//! few calls the backend makes. All `unsafe` of the backend lives here.
//!
//! Why not the safe `ibverbs` crate: its objects borrow their context (`QueuePair<'res>`), so a
//! link cannot own them as the `'static` boxes the proxy holds; it exposes no raw handles, so
//! the verbs it lacks (RDMA write with immediate, `ibv_reg_mr` with relaxed ordering,
//! `ibv_reg_dmabuf_mr`) could not be applied to its objects; and its destructors panic when a
//! destroy verb fails. Its `-sys` crate is what we use; it vendors rdma-core's headers.

use super::link::Completion;
use super::wire::GidRow;
use ibverbs_sys as ffi;
use std::alloc::Layout;
use std::ffi::CStr;
use std::io;
use std::ptr::{self, NonNull};
use std::sync::Arc;

/// Reads `errno` after a verb that returned NULL or -1.
fn last_error() -> io::Error {
    io::Error::last_os_error()
}

/// A verb that returns an errno value (0 on success).
fn check(rc: i32) -> io::Result<()> {
    match rc {
        0 => Ok(()),
        e if e > 0 => Err(io::Error::from_raw_os_error(e)),
        _ => Err(last_error()),
    }
}

/// The RDMA devices ibverbs sees. An error here (`ENOSYS`: no kernel RDMA support) means
/// the same to a user as an empty list, and the caller says so.
#[derive(Debug)]
pub(super) struct DeviceList {
    list: NonNull<*mut ffi::ibv_device>,
    n: usize,
}

impl DeviceList {
    pub(super) fn get() -> io::Result<DeviceList> {
        let mut n = 0i32;
        // SAFETY: `n` is a valid out-pointer; the returned array is owned by us until
        // `ibv_free_device_list` (in Drop).
        let list = unsafe { ffi::ibv_get_device_list(&mut n) };
        let list = NonNull::new(list).ok_or_else(last_error)?;
        Ok(DeviceList {
            list,
            n: usize::try_from(n).unwrap_or(0),
        })
    }

    fn device(&self, i: usize) -> Option<*mut ffi::ibv_device> {
        // SAFETY: the array holds `n` device pointers (plus a NULL terminator) and lives as
        // long as `self`.
        (i < self.n).then(|| unsafe { *self.list.as_ptr().add(i) })
    }

    /// Device names, in list order (a nameless device, which ibverbs never makes, is "?").
    pub(super) fn names(&self) -> Vec<String> {
        (0..self.n)
            .map(|i| {
                let Some(d) = self.device(i) else {
                    return "?".into();
                };
                // SAFETY: `d` is a live device of the list; the name is a NUL-terminated
                // string owned by the device, copied before the list is freed.
                let name = unsafe { ffi::ibv_get_device_name(d) };
                if name.is_null() {
                    return "?".into();
                }
                // SAFETY: non-NULL and NUL-terminated (see above).
                unsafe { CStr::from_ptr(name) }
                    .to_string_lossy()
                    .into_owned()
            })
            .collect()
    }

    /// Opens device `i`. The context stays valid after the list is freed (the device is
    /// reference-counted by ibverbs).
    pub(super) fn open(&self, i: usize, name: &str) -> io::Result<Context> {
        let d = self
            .device(i)
            .ok_or_else(|| io::Error::other(format!("no device {i}")))?;
        // SAFETY: `d` is a live device of this list.
        let ctx = unsafe { ffi::ibv_open_device(d) };
        let ctx = NonNull::new(ctx).ok_or_else(last_error)?;
        Ok(Context {
            ctx,
            name: name.to_string(),
        })
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: the list came from `ibv_get_device_list` and is freed once.
        unsafe { ffi::ibv_free_device_list(self.list.as_ptr()) }
    }
}

/// An open device.
#[derive(Debug)]
pub(super) struct Context {
    ctx: NonNull<ffi::ibv_context>,
    pub(super) name: String,
}

// SAFETY: ibverbs contexts are thread-safe (libibverbs serialises what needs it); the handle
// is only a pointer to the library's object.
unsafe impl Send for Context {}
// SAFETY: as for Send: every verb we call on a context may be called from any thread.
unsafe impl Sync for Context {}

/// What the backend needs of a port.
#[derive(Clone, Copy, Debug)]
pub(super) struct PortInfo {
    pub(super) state: u32,
    pub(super) lid: u16,
    pub(super) link_layer: u8,
    pub(super) active_mtu: u32,
    pub(super) gid_table_len: u32,
}

impl Context {
    pub(super) fn port(&self, port: u8) -> io::Result<PortInfo> {
        let mut attr = ffi::ibv_port_attr::default();
        // SAFETY: `attr` is a zeroed, full-size `ibv_port_attr`; the exported (compat) symbol
        // writes only its prefix `_compat_ibv_port_attr` (state .. link_layer, everything
        // read below).
        let rc = unsafe {
            ffi::ibv_query_port(
                self.ctx.as_ptr(),
                port,
                (&mut attr as *mut ffi::ibv_port_attr).cast(),
            )
        };
        check(rc)?;
        Ok(PortInfo {
            state: attr.state,
            lid: attr.lid,
            link_layer: attr.link_layer,
            active_mtu: attr.active_mtu,
            gid_table_len: u32::try_from(attr.gid_tbl_len).unwrap_or(0),
        })
    }

    /// The port's valid GID entries.
    pub(super) fn gid_table(&self, port: u8, len: u32) -> io::Result<Vec<GidRow>> {
        let mut rows = vec![ffi::ibv_gid_entry::default(); len as usize];
        // SAFETY: `rows` holds `rows.len()` entries of the size passed; the call writes at
        // most that many.
        let n = unsafe {
            ffi::_ibv_query_gid_table(
                self.ctx.as_ptr(),
                rows.as_mut_ptr(),
                rows.len(),
                0,
                size_of::<ffi::ibv_gid_entry>(),
            )
        };
        let n = usize::try_from(n)
            .map_err(|_| io::Error::from_raw_os_error(i32::try_from(-n).unwrap_or(0)))?;
        Ok(rows
            .iter()
            .take(n)
            .filter(|e| e.port_num == u32::from(port))
            .map(|e| GidRow {
                index: e.gid_index,
                kind: e.gid_type,
                // SAFETY: every bit pattern of the union is a valid byte array.
                gid: unsafe { e.gid.raw },
            })
            .collect())
    }

    pub(super) fn alloc_pd(self: &Arc<Self>) -> io::Result<Pd> {
        // SAFETY: the context is open; the PD is freed in Drop before the context (it holds
        // an Arc of it).
        let pd = unsafe { ffi::ibv_alloc_pd(self.ctx.as_ptr()) };
        let pd = NonNull::new(pd).ok_or_else(last_error)?;
        Ok(Pd {
            pd,
            _ctx: self.clone(),
        })
    }

    pub(super) fn create_cq(self: &Arc<Self>, entries: u32) -> io::Result<Cq> {
        let entries = i32::try_from(entries).map_err(|_| io::Error::other("CQ too large"))?;
        // SAFETY: no completion channel, no user context: plain arguments.
        let cq = unsafe {
            ffi::ibv_create_cq(
                self.ctx.as_ptr(),
                entries,
                ptr::null_mut(),
                ptr::null_mut(),
                0,
            )
        };
        let cq = NonNull::new(cq).ok_or_else(last_error)?;
        Ok(Cq {
            cq,
            _ctx: self.clone(),
        })
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: every child (PD, CQ) holds an Arc of this context, so none is alive. A
        // failure cannot be reported from Drop and leaves nothing for us to do.
        let _ = unsafe { ffi::ibv_close_device(self.ctx.as_ptr()) };
    }
}

/// A protection domain.
#[derive(Debug)]
pub(super) struct Pd {
    pd: NonNull<ffi::ibv_pd>,
    _ctx: Arc<Context>,
}

// SAFETY: as for Context: verbs on a PD may be called from any thread.
unsafe impl Send for Pd {}
// SAFETY: as above.
unsafe impl Sync for Pd {}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: QPs and MRs hold an Arc of the PD, so none is alive.
        let _ = unsafe { ffi::ibv_dealloc_pd(self.pd.as_ptr()) };
    }
}

/// Whether a registration that failed with `errno` is worth retrying without
/// `IBV_ACCESS_RELAXED_ORDERING`: older kernels and drivers reject the optional flag outright
/// (EINVAL, EOPNOTSUPP) instead of ignoring it.
pub(super) fn retry_without_relaxed(errno: Option<i32>) -> bool {
    matches!(errno, Some(libc::EINVAL | libc::EOPNOTSUPP))
}

/// The access we register host memory with: local write always, remote write for receive
/// rings.
pub(super) fn access(remote_write: bool, relaxed: bool) -> ffi::ibv_access_flags {
    let mut a = ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE;
    if remote_write {
        a |= ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE;
    }
    if relaxed {
        a |= ffi::ibv_access_flags::IBV_ACCESS_RELAXED_ORDERING;
    }
    a
}

impl Pd {
    /// Registers `len` bytes with `access`, first with relaxed ordering and, where that is
    /// refused, without it. Returns the MR and whether relaxed ordering is on.
    fn register(
        &self,
        what: &str,
        reg: impl Fn(ffi::ibv_access_flags) -> *mut ffi::ibv_mr,
        remote_write: bool,
    ) -> io::Result<(NonNull<ffi::ibv_mr>, bool)> {
        if let Some(mr) = NonNull::new(reg(access(remote_write, true))) {
            return Ok((mr, true));
        }
        let first = last_error();
        if !retry_without_relaxed(first.raw_os_error()) {
            return Err(io::Error::new(
                first.kind(),
                format!("registering {what}: {first}"),
            ));
        }
        NonNull::new(reg(access(remote_write, false)))
            .map(|mr| (mr, false))
            .ok_or_else(|| {
                let e = last_error();
                io::Error::new(
                    e.kind(),
                    format!("registering {what}: {e} (and with relaxed ordering: {first})"),
                )
            })
    }

    /// Host memory of `len` bytes (page-aligned, zeroed), registered.
    pub(super) fn host_region(
        self: &Arc<Self>,
        len: usize,
        remote_write: bool,
    ) -> io::Result<HostRegion> {
        let buf = HostBuf::new(len)?;
        let base = buf.ptr.as_ptr();
        let (mr, relaxed) = self.register(
            &format!("{len} bytes of host memory"),
            |a| {
                // SAFETY: `base..base+len` is a live allocation owned by the region, which
                // deregisters the MR before freeing it (field order in HostRegion).
                unsafe { ffi::ibv_reg_mr(self.pd.as_ptr(), base.cast(), len, a.0 as i32) }
            },
            remote_write,
        )?;
        Ok(HostRegion {
            mr: Mr {
                mr,
                _pd: self.clone(),
            },
            buf,
            relaxed,
        })
    }

    /// Registers `len` bytes at `offset` of the dma-buf `fd` (GPU memory exported by the
    /// driver) for remote write. See `RdmaBackend::register_dmabuf`.
    pub(super) fn dmabuf_region(
        self: &Arc<Self>,
        fd: i32,
        offset: u64,
        len: usize,
        iova: u64,
    ) -> io::Result<(Mr, bool)> {
        let (mr, relaxed) = self.register(
            &format!("dma-buf {fd} ({len} bytes at {offset})"),
            |a| {
                // SAFETY: plain arguments; the kernel checks that `fd` is a dma-buf covering
                // `offset..offset+len` and fails the call otherwise.
                unsafe {
                    ffi::ibv_reg_dmabuf_mr(self.pd.as_ptr(), offset, len, iova, fd, a.0 as i32)
                }
            },
            true,
        )?;
        Ok((
            Mr {
                mr,
                _pd: self.clone(),
            },
            relaxed,
        ))
    }

    /// An RC queue pair over `send` and `recv`, in state RESET.
    pub(super) fn create_rc_qp(
        self: &Arc<Self>,
        send: Arc<Cq>,
        recv: Arc<Cq>,
        max_send_wr: u32,
        max_recv_wr: u32,
    ) -> io::Result<Qp> {
        let mut init = ffi::ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: send.cq.as_ptr(),
            recv_cq: recv.cq.as_ptr(),
            srq: ptr::null_mut(),
            cap: ffi::ibv_qp_cap {
                max_send_wr,
                max_recv_wr,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: ffi::ibv_qp_type::IBV_QPT_RC,
            // Every work request we post asks for a completion itself.
            sq_sig_all: 0,
        };
        // SAFETY: `init` is fully initialised and names live CQs; the QP holds Arcs of the
        // CQs and the PD, so it is destroyed before them.
        let qp = unsafe { ffi::ibv_create_qp(self.pd.as_ptr(), &mut init) };
        let qp = NonNull::new(qp).ok_or_else(last_error)?;
        Ok(Qp {
            qp,
            _pd: self.clone(),
            _send: send,
            _recv: recv,
        })
    }
}

/// A memory registration.
#[derive(Debug)]
pub(super) struct Mr {
    mr: NonNull<ffi::ibv_mr>,
    _pd: Arc<Pd>,
}

// SAFETY: an MR handle is immutable after registration; reading its keys from any thread is
// fine, and deregistration happens once, in Drop.
unsafe impl Send for Mr {}
// SAFETY: as above.
unsafe impl Sync for Mr {}

impl Mr {
    pub(super) fn lkey(&self) -> u32 {
        // SAFETY: the MR is registered until Drop.
        unsafe { self.mr.as_ref() }.lkey
    }

    pub(super) fn rkey(&self) -> u32 {
        // SAFETY: as above.
        unsafe { self.mr.as_ref() }.rkey
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered once, deregistered once; the QPs that used it were destroyed
        // first (the link drops its QP before its regions).
        let _ = unsafe { ffi::ibv_dereg_mr(self.mr.as_ptr()) };
    }
}

/// Page-aligned zeroed host memory, only ever touched through raw pointers (the adapter
/// reads and writes it behind the compiler's back).
#[derive(Debug)]
struct HostBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: a plain allocation; who may touch which bytes when is the link's protocol, enforced
// under its mutex.
unsafe impl Send for HostBuf {}
// SAFETY: as above.
unsafe impl Sync for HostBuf {}

impl HostBuf {
    fn new(len: usize) -> io::Result<HostBuf> {
        let layout = Layout::from_size_align(len.max(1), 4096)
            .map_err(|e| io::Error::other(format!("{len} bytes: {e}")))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr)
            .ok_or_else(|| io::Error::new(io::ErrorKind::OutOfMemory, format!("{len} bytes")))?;
        Ok(HostBuf { ptr, layout })
    }
}

impl Drop for HostBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// Registered host memory. Field order matters: the MR is deregistered before the memory
/// is freed.
#[derive(Debug)]
pub(super) struct HostRegion {
    mr: Mr,
    buf: HostBuf,
    pub(super) relaxed: bool,
}

impl HostRegion {
    pub(super) fn addr(&self) -> u64 {
        self.buf.ptr.as_ptr() as u64
    }

    pub(super) fn size(&self) -> usize {
        self.buf.layout.size()
    }

    pub(super) fn lkey(&self) -> u32 {
        self.mr.lkey()
    }

    pub(super) fn rkey(&self) -> u32 {
        self.mr.rkey()
    }

    /// The bytes `[at, at + len)`.
    ///
    /// # Safety
    /// The range must lie in the region, and the adapter must not write it while the slice
    /// lives: for a receive slot, between its completion and the credit that returns it.
    pub(super) unsafe fn slice(&self, at: usize, len: usize) -> &[u8] {
        // SAFETY: the caller guarantees bounds and that nothing writes the bytes meanwhile.
        unsafe { std::slice::from_raw_parts(self.buf.ptr.as_ptr().add(at), len) }
    }

    /// The bytes `[at, at + len)`, to fill.
    ///
    /// # Safety
    /// The range must lie in the region, and the adapter must not read it while the slice
    /// lives: for a staging slot, after the completion of the write that last read it.
    #[allow(clippy::mut_from_ref)] // the region is shared adapter memory; the caller owns the range
    pub(super) unsafe fn slice_mut(&self, at: usize, len: usize) -> &mut [u8] {
        // SAFETY: the caller guarantees bounds and exclusive use of the range.
        unsafe { std::slice::from_raw_parts_mut(self.buf.ptr.as_ptr().add(at), len) }
    }
}

/// A completion queue.
#[derive(Debug)]
pub(super) struct Cq {
    cq: NonNull<ffi::ibv_cq>,
    _ctx: Arc<Context>,
}

// SAFETY: as for Context; each CQ is polled under its link's mutex.
unsafe impl Send for Cq {}
// SAFETY: as above.
unsafe impl Sync for Cq {}

/// The text of a work-completion status.
pub(super) fn status_str(status: u32) -> String {
    // SAFETY: returns a static NUL-terminated string for any value.
    let s = unsafe { ffi::ibv_wc_status_str(status) };
    if s.is_null() {
        return format!("status {status}");
    }
    // SAFETY: non-NULL static string.
    unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
}

/// `IBV_WC_RETRY_EXC_ERR`: the peer stopped acknowledging (its process is gone).
pub(super) const STATUS_RETRY_EXCEEDED: u32 = ffi::ibv_wc_status::IBV_WC_RETRY_EXC_ERR;

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: QPs using this CQ hold an Arc of it, so none is alive.
        let _ = unsafe { ffi::ibv_destroy_cq(self.cq.as_ptr()) };
    }
}

impl Cq {
    /// Appends up to `max` (at most 16) completions to `out`.
    pub(super) fn poll(&self, out: &mut Vec<Completion>, max: usize) -> io::Result<()> {
        const BATCH: usize = 16;
        // SAFETY: `ibv_wc` is plain integers; all-zero is a valid value.
        let mut wcs: [ffi::ibv_wc; BATCH] = unsafe { std::mem::zeroed() };
        let cq = self.cq.as_ptr();
        // SAFETY: the CQ is alive; its context pointer is set by ibverbs at creation.
        let poll = unsafe { (*(*cq).context).ops.poll_cq };
        let poll = poll.ok_or_else(|| io::Error::from_raw_os_error(libc::ENOSYS))?;
        let want = max.min(BATCH) as i32;
        // SAFETY: `wcs` has room for `want` entries; the provider writes at most that many.
        let n = unsafe { poll(cq, want, wcs.as_mut_ptr()) };
        let n = usize::try_from(n).map_err(|_| io::Error::other("ibv_poll_cq failed"))?;
        out.extend(wcs.iter().take(n).map(|wc| Completion {
            wr_id: wc.wr_id(),
            status: wc.error().map_or(Ok(()), Err),
            byte_len: wc.len() as u32,
            imm: wc.imm_data().map(u32::from_be),
        }));
        Ok(())
    }
}

/// An RC queue pair.
#[derive(Debug)]
pub(super) struct Qp {
    qp: NonNull<ffi::ibv_qp>,
    _pd: Arc<Pd>,
    _send: Arc<Cq>,
    _recv: Arc<Cq>,
}

// SAFETY: as for Context; each QP is used under its link's mutex.
unsafe impl Send for Qp {}
// SAFETY: as above.
unsafe impl Sync for Qp {}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: created once, destroyed once, before its CQs and PD (it holds their Arcs).
        let _ = unsafe { ffi::ibv_destroy_qp(self.qp.as_ptr()) };
    }
}

/// Where a peer's queue pair is (from its endpoint blob).
#[derive(Clone, Copy, Debug)]
pub(super) struct Remote {
    pub(super) qpn: u32,
    pub(super) psn: u32,
    pub(super) lid: u16,
    pub(super) gid: [u8; 16],
    /// Address with a GRH (RoCE, or a peer without a LID).
    pub(super) global: bool,
    pub(super) mtu: u32,
}

/// One RDMA write with immediate: `len` bytes at `local` (under `lkey`) to `remote` (under
/// `rkey`), announced by `imm` (host order); `len == 0` sends only the immediate.
#[derive(Clone, Copy, Debug)]
pub(super) struct WriteImm {
    pub(super) wr_id: u64,
    pub(super) local: u64,
    pub(super) lkey: u32,
    pub(super) len: u32,
    pub(super) remote: u64,
    pub(super) rkey: u32,
    pub(super) imm: u32,
}

/// Attributes of the INIT transition: the port, and remote writes allowed into our rings.
pub(super) fn init_attr(port: u8) -> (ffi::ibv_qp_attr, ffi::ibv_qp_attr_mask) {
    use ffi::ibv_qp_attr_mask as m;
    let attr = ffi::ibv_qp_attr {
        qp_state: ffi::ibv_qp_state::IBV_QPS_INIT,
        pkey_index: 0,
        port_num: port,
        qp_access_flags: access(true, false).0,
        ..Default::default()
    };
    (
        attr,
        m::IBV_QP_STATE | m::IBV_QP_PKEY_INDEX | m::IBV_QP_PORT | m::IBV_QP_ACCESS_FLAGS,
    )
}

/// Attributes of the RTR transition towards `r`, sending from GID index `sgid_index`.
pub(super) fn rtr_attr(
    port: u8,
    r: &Remote,
    sgid_index: u32,
) -> (ffi::ibv_qp_attr, ffi::ibv_qp_attr_mask) {
    use ffi::ibv_qp_attr_mask as m;
    let mut ah = ffi::ibv_ah_attr {
        dlid: r.lid,
        sl: 0,
        src_path_bits: 0,
        is_global: u8::from(r.global),
        port_num: port,
        ..Default::default()
    };
    if r.global {
        ah.grh = ffi::ibv_global_route {
            dgid: ffi::ibv_gid { raw: r.gid },
            flow_label: 0,
            sgid_index: sgid_index as u8,
            hop_limit: 255,
            traffic_class: 0,
        };
    }
    let attr = ffi::ibv_qp_attr {
        qp_state: ffi::ibv_qp_state::IBV_QPS_RTR,
        path_mtu: r.mtu,
        dest_qp_num: r.qpn,
        rq_psn: r.psn,
        // We issue no RDMA reads or atomics, but 0 is rejected by some drivers.
        max_dest_rd_atomic: 1,
        // 12: 0.64 ms before a receiver-not-ready retry.
        min_rnr_timer: 12,
        ah_attr: ah,
        ..Default::default()
    };
    (
        attr,
        m::IBV_QP_STATE
            | m::IBV_QP_AV
            | m::IBV_QP_PATH_MTU
            | m::IBV_QP_DEST_QPN
            | m::IBV_QP_RQ_PSN
            | m::IBV_QP_MAX_DEST_RD_ATOMIC
            | m::IBV_QP_MIN_RNR_TIMER,
    )
}

/// Attributes of the RTS transition: our PSN, the transport timeout exponent (4.096 us *
/// 2^timeout per try, 7 retries), and unlimited receiver-not-ready retries (7), since a
/// receiver that is slow to repost is not dead.
pub(super) fn rts_attr(psn: u32, timeout: u8) -> (ffi::ibv_qp_attr, ffi::ibv_qp_attr_mask) {
    use ffi::ibv_qp_attr_mask as m;
    let attr = ffi::ibv_qp_attr {
        qp_state: ffi::ibv_qp_state::IBV_QPS_RTS,
        sq_psn: psn,
        timeout,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 1,
        ..Default::default()
    };
    (
        attr,
        m::IBV_QP_STATE
            | m::IBV_QP_SQ_PSN
            | m::IBV_QP_TIMEOUT
            | m::IBV_QP_RETRY_CNT
            | m::IBV_QP_RNR_RETRY
            | m::IBV_QP_MAX_QP_RD_ATOMIC,
    )
}

impl Qp {
    pub(super) fn qpn(&self) -> u32 {
        // SAFETY: the QP is alive; `qp_num` is set at creation and never changes.
        unsafe { self.qp.as_ref() }.qp_num
    }

    pub(super) fn modify(
        &self,
        (mut attr, mask): (ffi::ibv_qp_attr, ffi::ibv_qp_attr_mask),
    ) -> io::Result<()> {
        // SAFETY: `attr` is initialised for every field `mask` names.
        check(unsafe { ffi::ibv_modify_qp(self.qp.as_ptr(), &mut attr, mask.0 as i32) })
    }

    /// Posts one receive request with no buffer: an RDMA write with immediate consumes it
    /// and reports its immediate value (the data went to the address the writer named).
    pub(super) fn post_recv(&self, wr_id: u64) -> io::Result<()> {
        let mut wr = ffi::ibv_recv_wr {
            wr_id,
            next: ptr::null_mut(),
            sg_list: ptr::null_mut(),
            num_sge: 0,
        };
        let mut bad = ptr::null_mut();
        let qp = self.qp.as_ptr();
        // SAFETY: the QP is alive; its context is set by ibverbs at creation.
        let post = unsafe { (*(*qp).context).ops.post_recv };
        let post = post.ok_or_else(|| io::Error::from_raw_os_error(libc::ENOSYS))?;
        // SAFETY: `wr` is a single, fully initialised request with no scatter list.
        check(unsafe { post(qp, &mut wr, &mut bad) })
    }

    /// Posts `w`, asking for a completion.
    ///
    /// # Safety
    /// `w.local..w.local+w.len` must stay registered and unmodified until the completion of
    /// `w.wr_id` is polled; `w.remote..w.remote+w.len` must lie in the peer's ring slot this
    /// piece owns.
    pub(super) unsafe fn post_write_imm(&self, w: &WriteImm) -> io::Result<()> {
        let mut sge = ffi::ibv_sge {
            addr: w.local,
            length: w.len,
            lkey: w.lkey,
        };
        let mut wr = ffi::ibv_send_wr {
            wr_id: w.wr_id,
            next: ptr::null_mut(),
            sg_list: if w.len == 0 {
                ptr::null_mut()
            } else {
                &mut sge
            },
            num_sge: i32::from(w.len != 0),
            opcode: ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM,
            send_flags: ffi::ibv_send_flags::IBV_SEND_SIGNALED.0,
            __bindgen_anon_1: ffi::ibv_send_wr__bindgen_ty_1 {
                imm_data: w.imm.to_be(),
            },
            wr: ffi::ibv_send_wr__bindgen_ty_2 {
                rdma: ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
                    remote_addr: w.remote,
                    rkey: w.rkey,
                },
            },
            ..Default::default()
        };
        let mut bad = ptr::null_mut();
        let qp = self.qp.as_ptr();
        // SAFETY: the QP is alive; its context is set by ibverbs at creation.
        let post = unsafe { (*(*qp).context).ops.post_send };
        let post = post.ok_or_else(|| io::Error::from_raw_os_error(libc::ENOSYS))?;
        // SAFETY: `wr` and `sge` are fully initialised and outlive the call (the provider
        // copies them into the send queue); the caller guarantees the buffers.
        check(unsafe { post(qp, &mut wr, &mut bad) })
    }
}

#[cfg(test)]
mod tests;
