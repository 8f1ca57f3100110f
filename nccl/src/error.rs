//! Errors inside the library and the NCCL result code each becomes at the C boundary.

use crate::abi::NcclResult;
use coll_executor::{AbortCause, ExecError};

/// A failed call: the code NCCL's API returns and the text `ncclGetLastError` gives.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    pub code: NcclResult,
    pub message: String,
}

impl Error {
    pub fn new(code: NcclResult, message: impl Into<String>) -> Error {
        Error {
            code,
            message: message.into(),
        }
    }

    /// A caller's mistake: a null pointer, a bad rank or count.
    pub fn argument(message: impl Into<String>) -> Error {
        Error::new(NcclResult::InvalidArgument, message)
    }

    /// A call made in the wrong state (an aborted communicator, an unmatched group end).
    pub fn usage(message: impl Into<String>) -> Error {
        Error::new(NcclResult::InvalidUsage, message)
    }

    pub fn internal(message: impl Into<String>) -> Error {
        Error::new(NcclResult::InternalError, message)
    }

    pub fn system(message: impl Into<String>) -> Error {
        Error::new(NcclResult::SystemError, message)
    }
}

impl From<ExecError> for Error {
    fn from(e: ExecError) -> Error {
        let code = match &e {
            ExecError::Driver { .. } | ExecError::Gpu(_) => NcclResult::UnhandledCudaError,
            ExecError::Peer { .. }
            | ExecError::Timeout { .. }
            | ExecError::Aborted {
                cause: AbortCause::Peer(_),
                ..
            } => NcclResult::RemoteError,
            // Calls of a communicator its owner aborted: a call in the wrong state.
            ExecError::Aborted {
                cause: AbortCause::Caller,
                ..
            } => NcclResult::InvalidUsage,
            ExecError::InputSize { .. }
            | ExecError::RankCount { .. }
            | ExecError::Unsupported { .. }
            | ExecError::Root { .. } => NcclResult::InvalidArgument,
            _ => NcclResult::InternalError,
        };
        Error::new(code, e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_faults_become_the_codes_nccl_gives_them() {
        let timeout = ExecError::Timeout {
            at: "rank 1, block 0, op 2 (ring.coll:7:5)".into(),
            waiting: "waiting to receive".into(),
            waited: std::time::Duration::from_secs(5),
        };
        let e = Error::from(timeout);
        assert_eq!(e.code, NcclResult::RemoteError);
        assert!(
            e.message
                .starts_with("rank 1, block 0, op 2 (ring.coll:7:5) waited 5s")
        );
        let peer = Error::from(ExecError::Aborted {
            rank: 0,
            at: "rank 0, block 1, op 0 (ring.coll:9:5)".into(),
            cause: AbortCause::Peer("process 1 (rank 1) died".into()),
        });
        assert_eq!(peer.code, NcclResult::RemoteError);
        assert_eq!(
            peer.message,
            "rank 0, block 1, op 0 (ring.coll:9:5): the call was aborted because process 1 \
             (rank 1) died"
        );
        let owner = Error::from(ExecError::Aborted {
            rank: 0,
            at: "rank 0".into(),
            cause: AbortCause::Caller,
        });
        assert_eq!(owner.code, NcclResult::InvalidUsage);
    }
}
