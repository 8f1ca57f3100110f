//! Errors inside the library and the NCCL result code each becomes at the C boundary.

use crate::abi::NcclResult;
use coll_executor::ExecError;

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
            ExecError::Peer { .. } | ExecError::Timeout { .. } => NcclResult::RemoteError,
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
