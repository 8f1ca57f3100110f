//! What coll puts in an `ncclUniqueId`.
//!
//! Layout of the 128 bytes (all integers little-endian):
//!
//! | bytes | field |
//! |---|---|
//! | 0..8 | magic `COLLID01`: an id made by this library |
//! | 8..40 | the communicator's secret: 32 random bytes from the operating system |
//! | 40..64 | where rank 0's bootstrap listens: byte 40 the family (4 or 6, 0 for none), 41..43 the port, 43..59 the address (IPv4 in its first 4 bytes) |
//! | 64..128 | the real NCCL's unique id, when one was made with it (see below), else zero |
//!
//! The real NCCL's id is embedded so that a communicator whose calls coll forwards can
//! create the real communicator beside its own on every rank. NCCL's own id uses only its
//! first bytes (a magic number and rank 0's socket address); it is embedded only when its
//! last 64 bytes are zero, so nothing of it is ever cut off.
//!
//! Invariant: the secret is never printed ([`crate::abi::UniqueId`]'s `Debug` hides it) and
//! two ids made by [`CollId::new`] differ with overwhelming probability, so the secret also
//! names the communicator within a process.

use crate::abi::{UNIQUE_ID_BYTES, UniqueId};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

const MAGIC: &[u8; 8] = b"COLLID01";
const SECRET: std::ops::Range<usize> = 8..40;
const ADDR: usize = 40;
const REAL: std::ops::Range<usize> = 64..128;

/// Why an id could not be made or read.
#[derive(Debug, thiserror::Error)]
pub enum IdError {
    #[error("the operating system gave no random bytes for the communicator's secret: {0}")]
    Random(String),
    #[error("the unique id was not made by ncclGetUniqueId of this library (bad magic)")]
    Foreign,
}

/// A decoded id.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct CollId {
    pub secret: [u8; 32],
    /// Where rank 0's bootstrap listens, for communicators spread over processes.
    pub addr: Option<SocketAddr>,
    /// The real NCCL's id, when one was embedded.
    pub real: Option<UniqueId>,
}

impl std::fmt::Debug for CollId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CollId")
            .field("real", &self.real.is_some())
            .finish_non_exhaustive()
    }
}

impl CollId {
    /// A fresh id with a random secret, embedding `real` when it fits (module docs).
    pub fn new(real: Option<UniqueId>, addr: Option<SocketAddr>) -> Result<CollId, IdError> {
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).map_err(|e| IdError::Random(e.to_string()))?;
        let real = real.filter(|r| r.bytes()[REAL].iter().all(|&b| b == 0));
        Ok(CollId { secret, addr, real })
    }

    pub fn encode(&self) -> UniqueId {
        let mut b = [0u8; UNIQUE_ID_BYTES];
        b[..8].copy_from_slice(MAGIC);
        b[SECRET].copy_from_slice(&self.secret);
        if let Some(a) = self.addr {
            b[ADDR + 1..ADDR + 3].copy_from_slice(&a.port().to_le_bytes());
            match a.ip() {
                IpAddr::V4(ip) => {
                    b[ADDR] = 4;
                    b[ADDR + 3..ADDR + 7].copy_from_slice(&ip.octets());
                }
                IpAddr::V6(ip) => {
                    b[ADDR] = 6;
                    b[ADDR + 3..ADDR + 19].copy_from_slice(&ip.octets());
                }
            }
        }
        if let Some(r) = self.real {
            b[REAL].copy_from_slice(&r.bytes()[..REAL.len()]);
        }
        UniqueId::from_bytes(&b)
    }

    pub fn decode(id: &UniqueId) -> Result<CollId, IdError> {
        let b = id.bytes();
        if &b[..8] != MAGIC {
            return Err(IdError::Foreign);
        }
        let mut secret = [0u8; 32];
        secret.copy_from_slice(&b[SECRET]);
        let port = u16::from_le_bytes([b[ADDR + 1], b[ADDR + 2]]);
        let addr = match b[ADDR] {
            4 => {
                let o: [u8; 4] = b[ADDR + 3..ADDR + 7].try_into().unwrap_or_default();
                Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::from(o)), port))
            }
            6 => {
                let o: [u8; 16] = b[ADDR + 3..ADDR + 19].try_into().unwrap_or_default();
                Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(o)), port))
            }
            _ => None,
        };
        let real = b[REAL].iter().any(|&x| x != 0).then(|| {
            let mut r = [0u8; UNIQUE_ID_BYTES];
            r[..REAL.len()].copy_from_slice(&b[REAL]);
            UniqueId::from_bytes(&r)
        });
        Ok(CollId { secret, addr, real })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_differ() {
        let mut real = [0u8; UNIQUE_ID_BYTES];
        real[..36].copy_from_slice(&[7u8; 36]);
        let at: SocketAddr = "10.1.2.3:29500".parse().expect("address");
        let a = CollId::new(Some(UniqueId::from_bytes(&real)), Some(at)).expect("random bytes");
        let b =
            CollId::new(None, Some("[fe80::1]:7".parse().expect("address"))).expect("random bytes");
        assert_ne!(a.secret, b.secret);
        assert_eq!(CollId::decode(&a.encode()).expect("ours"), a);
        assert_eq!(CollId::decode(&b.encode()).expect("ours"), b);
        assert_eq!(a.real.map(|r| r.bytes()), Some(real));
        assert_eq!(a.addr, Some(at));
        assert!(!format!("{a:?}").contains('7'));
    }

    #[test]
    fn a_real_id_that_would_be_cut_is_not_embedded() {
        let full = [1u8; UNIQUE_ID_BYTES];
        let id = CollId::new(Some(UniqueId::from_bytes(&full)), None).expect("random bytes");
        assert_eq!(id.real, None);
    }

    #[test]
    fn foreign_ids_are_refused() {
        let id = UniqueId::from_bytes(&[0u8; UNIQUE_ID_BYTES]);
        assert!(matches!(CollId::decode(&id), Err(IdError::Foreign)));
    }
}
