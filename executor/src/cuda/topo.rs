//! `--topo auto`: the topology of this machine's GPUs, from what CUDA reports about every
//! ordered pair of them.
//!
//! CUDA tells whether two GPUs can reach each other's memory and whether they share native
//! atomics; it does not tell link counts or speeds. So the result is coarse on purpose: GPUs
//! that reach every peer with native atomics (NVLink, directly or through NVSwitch) become
//! the `nvswitch:N` preset; anything else becomes GPUs on one host over PCIe. For a finer
//! picture, pass the XML that NCCL writes with `NCCL_TOPO_DUMP_FILE` as `--topo`.

use super::device::{device_count, gpu_err};
use crate::ExecError;
use coll_compiler::topology::Topology;
use cudarc::driver::sys;

/// What CUDA says about GPU `from` reaching GPU `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PeerLink {
    /// Peer loads and stores work.
    pub access: bool,
    /// Atomics on the peer's memory are native: NVLink, not PCIe.
    pub native_atomics: bool,
}

/// Whether every GPU of `peers` reaches every other with peer access and native atomics
/// (NVLink, directly or through NVSwitch); true of one GPU or none.
pub fn nvlink_everywhere(peers: &[Vec<PeerLink>]) -> bool {
    let g = peers.len();
    (0..g).all(|a| {
        (0..g).all(|b| {
            a == b
                || peers[a]
                    .get(b)
                    .is_some_and(|p| p.access && p.native_atomics)
        })
    })
}

/// The topology of GPUs whose pairwise links are `peers[from][to]` (the diagonal is unused).
pub fn topology_from_peers(peers: &[Vec<PeerLink>]) -> Result<Topology, ExecError> {
    let g = peers.len();
    if g == 0 {
        return Err(ExecError::Gpu(
            "--topo auto: no GPU found (no CUDA driver, or it sees no device)".into(),
        ));
    }
    if nvlink_everywhere(peers) {
        return Topology::parse(&format!("nvswitch:{g}"))
            .map_err(|e| ExecError::Gpu(format!("--topo auto: {e}")));
    }
    // Every GPU on one host bridge: routes between GPUs go through PCIe.
    let mut devices = vec![r#"{"id": "cpu", "kind": "cpu", "node": 0}"#.to_string()];
    let mut links = Vec::new();
    for i in 0..g {
        devices.push(format!(r#"{{"id": "g{i}", "kind": "gpu", "node": 0}}"#));
        links.push(format!(
            r#"{{"between": ["g{i}", "cpu"], "kind": "pcie", "bandwidth_gbs": 32, "latency_us": 1}}"#
        ));
    }
    let json = format!(
        r#"{{"name": "pcie:{g}", "devices": [{}], "links": [{}]}}"#,
        devices.join(", "),
        links.join(", ")
    );
    Topology::from_json(&json).map_err(|e| ExecError::Gpu(format!("--topo auto: {e}")))
}

/// Asks the driver about every ordered pair of this machine's GPUs.
pub fn local_peers() -> Result<Vec<Vec<PeerLink>>, ExecError> {
    let g = device_count();
    let mut devs = Vec::with_capacity(g);
    for i in 0..g {
        let mut d: sys::CUdevice = 0;
        // SAFETY: the driver is loaded and initialised (device_count succeeded) and `d` is an
        // out-parameter we own; `i` is below the device count.
        let r = unsafe { sys::cuDeviceGet(&mut d, i as i32) };
        if r != sys::cudaError_enum::CUDA_SUCCESS {
            return Err(gpu_err("cuDeviceGet", r));
        }
        devs.push(d);
    }
    let attr = |a: sys::CUdevice, b: sys::CUdevice, what| -> Result<bool, ExecError> {
        let mut v = 0i32;
        // SAFETY: plain query with valid device handles and an out-parameter we own.
        let r = unsafe { sys::cuDeviceGetP2PAttribute(&mut v, what, a, b) };
        if r != sys::cudaError_enum::CUDA_SUCCESS {
            return Err(gpu_err("cuDeviceGetP2PAttribute", r));
        }
        Ok(v != 0)
    };
    let mut peers = vec![vec![PeerLink::default(); g]; g];
    for (a, &da) in devs.iter().enumerate() {
        for (b, &db) in devs.iter().enumerate() {
            if a != b {
                peers[a][b] = PeerLink {
                    access: attr(
                        da,
                        db,
                        sys::CUdevice_P2PAttribute::CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED,
                    )?,
                    native_atomics: attr(
                        da,
                        db,
                        sys::CUdevice_P2PAttribute::CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED,
                    )?,
                };
            }
        }
    }
    Ok(peers)
}

/// The topology of this machine's GPUs (see the module docs for what it can tell).
pub fn local_topology() -> Result<Topology, ExecError> {
    topology_from_peers(&local_peers()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use coll_compiler::ids::RankId;
    use coll_compiler::topology::{Family, RouteKind};

    fn matrix(g: usize, link: PeerLink) -> Vec<Vec<PeerLink>> {
        vec![vec![link; g]; g]
    }

    #[test]
    fn nvlink_everywhere_is_an_nvswitch_node() {
        let nv = PeerLink {
            access: true,
            native_atomics: true,
        };
        let t = topology_from_peers(&matrix(2, nv)).expect("topology");
        assert_eq!(t.name(), "nvswitch:2");
        assert_eq!(t.families(), vec![Family::NvSwitch]);
    }

    #[test]
    fn one_pcie_pair_makes_it_pcie() {
        let nv = PeerLink {
            access: true,
            native_atomics: true,
        };
        let mut m = matrix(4, nv);
        m[1][2].native_atomics = false;
        let t = topology_from_peers(&m).expect("topology");
        assert_eq!(t.num_ranks(), 4);
        assert!(!t.has_switch());
        let route = t.route(RankId::new(0), RankId::new(3)).expect("route");
        assert_eq!(route.kind, RouteKind::Pcie);
    }

    #[test]
    fn no_gpu_says_so() {
        let e = topology_from_peers(&[]).expect_err("no GPU");
        assert!(e.to_string().contains("no GPU found"), "{e}");
    }
}
