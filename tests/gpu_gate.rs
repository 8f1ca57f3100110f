//! Whether a GPU test may run here: without a GPU it skips (CI has none), and with
//! `COLL_REQUIRE_GPU=1` in the environment, as on a GPU machine, whatever it needs and misses
//! fails it with the reason, so a run there can never pass by skipping.

use coll_executor::cuda::device::{self, NO_NVRTC};
use std::io::Write;

/// The switch that turns every skip into a failure (see the module docs).
pub const REQUIRE_GPU: &str = "COLL_REQUIRE_GPU";

/// What this machine has for the GPU tests.
#[derive(Debug)]
pub struct Found {
    pub driver: bool,
    pub gpus: usize,
    pub nvrtc: bool,
}

/// Why a test that uses `need` GPUs cannot run on `found`, if it cannot: `Err` (the test
/// fails) when `require`d, else `Ok(Some(reason))` (it skips). NVRTC is checked only when
/// required: without it a kernel cached on disk still loads, and a load that needs it fails
/// with its own message.
pub fn missing(found: &Found, need: usize, require: bool) -> Result<Option<String>, String> {
    let why = if !found.driver {
        Some("no GPU: no CUDA driver (libcuda.so)".to_string())
    } else if found.gpus == 0 {
        Some("no GPU: the CUDA driver sees no device".to_string())
    } else if found.gpus < need {
        Some(format!("{} GPUs, and the test needs {need}", found.gpus))
    } else if require && !found.nvrtc {
        Some(NO_NVRTC.to_string())
    } else {
        None
    };
    match why {
        Some(why) if require => Err(format!("{REQUIRE_GPU}=1, but {why}")),
        why => Ok(why),
    }
}

/// Every GPU of this machine when there are at least `need`, or `None` after saying why the
/// test skips; panics instead of skipping with `COLL_REQUIRE_GPU=1`.
pub fn gpus(test: &str, need: usize) -> Option<Vec<usize>> {
    let require = std::env::var(REQUIRE_GPU).is_ok_and(|v| v.trim() == "1");
    let found = Found {
        driver: device::driver_present(),
        gpus: device::device_count(),
        nvrtc: device::nvrtc_present(),
    };
    match missing(&found, need, require) {
        Err(why) => panic!("{test}: {why}"),
        Ok(Some(why)) => {
            // Straight to stderr, past the test harness's capture, so CI logs show the skip.
            let _ = writeln!(std::io::stderr(), "{test}: skipped: {why}");
            None
        }
        Ok(None) => Some((0..found.gpus).collect()),
    }
}

/// Holds `stream` (of `gpu`'s context) back until the returned word is set to 1: a rank that
/// never reaches its call, for the tests of aborts and timeouts.
pub fn hold_stream(
    gpu: &device::Gpu,
    stream: &coll_executor::cuda::cudarc::driver::CudaStream,
) -> device::HostMapped {
    use coll_executor::cuda::cudarc::driver::sys;
    let gate = device::HostMapped::new(gpu, 8).expect("pinned word");
    gpu.context().bind_to_thread().expect("bind");
    // SAFETY: a live stream of this GPU's context; the word is pinned host memory mapped into
    // it (DEVICEMAP), alive until the stream has passed the wait (the tests release and
    // synchronise it before dropping the gate).
    unsafe {
        sys::cuStreamWaitValue32_v2(
            stream.cu_stream(),
            gate.dev(),
            1,
            sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32,
        )
    }
    .result()
    .expect("cuStreamWaitValue32");
    gate
}
