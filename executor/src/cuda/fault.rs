//! What went wrong on the device: after a call, each GPU's error record (written by the
//! first wait of the call that timed out, [`ErrorRec`]) is read back and turned into an
//! error naming the rank, block, op and `.coll` source line, or the copy-engine barrier.
//!
//! Invariants: a record with `failed == 0` means no wait of this GPU failed since the
//! executor was loaded; the first failure is kept (later ones do not overwrite it), so the
//! error names the wait that gave up first, not the ones that failed after it.

use super::CudaExecutor;
use super::abi::{ErrorRec, Fault};
use crate::error::ExecError;

impl CudaExecutor {
    /// Waits for coll's own streams, then [`check_error`](Self::check_error).
    pub fn finish(&self) -> Result<(), ExecError> {
        for gp in &self.gpus {
            gp.gpu.synchronize()?;
        }
        self.check_error()
    }

    /// Reports a rank that timed out in an earlier call, naming its op and source line. Call
    /// it once the streams the calls went to are synchronised.
    pub fn check_error(&self) -> Result<(), ExecError> {
        for gp in &self.gpus {
            let mut rec = ErrorRec::default();
            gp.region(gp.error)?
                .read(&gp.gpu, std::slice::from_mut(&mut rec))?;
            if rec.failed != 0 {
                let fault = Fault::from_code(rec.what);
                if fault == Some(Fault::Barrier) {
                    return Err(ExecError::Timeout {
                        at: format!("rank {} (a copy-engine call)", rec.rank),
                        waiting: "waiting for the other GPUs at the call's barrier".into(),
                        waited: self.timeout,
                    });
                }
                let what = match fault {
                    Some(Fault::Dep) => "waiting for a dependency",
                    Some(Fault::Recv) => "waiting to receive",
                    Some(Fault::Ready) => {
                        "waiting for the receiver to release its buffer (direct send)"
                    }
                    Some(Fault::SendSlot | Fault::Barrier) | None => "waiting for room to send",
                };
                return Err(ExecError::Timeout {
                    at: coll_compiler::plan::location(
                        &self.plan,
                        rec.rank,
                        rec.block,
                        Some(rec.op),
                    ),
                    waiting: what.into(),
                    waited: self.timeout,
                });
            }
        }
        Ok(())
    }
}
