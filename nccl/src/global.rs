//! Process-wide state: the settings read from the environment once, the log, and the real
//! NCCL, loaded at its first use.
//!
//! This module and `entry` are the library's binary boundary: the only code that reads the
//! process environment (NCCL's libraries are configured that way).
//!
//! Invariant: the settings never change after the first call; the real NCCL is loaded at
//! most once, and never when `COLL_NCCL_FORWARD=0`.

use crate::error::{Error, Result};
use crate::log::Log;
use crate::real::{self, LoadError, RealNccl};
use crate::settings::{LogLevel, Settings};
use std::sync::{Arc, OnceLock};

#[derive(Debug)]
pub struct Global {
    pub settings: Settings,
    pub log: Arc<Log>,
    real: OnceLock<std::result::Result<Arc<RealNccl>, String>>,
    library_path: Option<String>,
}

static GLOBAL: OnceLock<std::result::Result<Global, String>> = OnceLock::new();

/// The process's state, made at the first call from the environment.
pub fn global() -> Result<&'static Global> {
    GLOBAL
        .get_or_init(|| {
            let settings = Settings::from_lookup(|k| std::env::var(k).ok())
                .map_err(|e| format!("coll's NCCL library: {e}"))?;
            let log = Arc::new(Log::new(settings.log));
            // As NCCL, the version line only when NCCL_DEBUG asks for it (VERSION, INFO, TRACE).
            let level = if settings.log == LogLevel::Version {
                LogLevel::Version
            } else {
                LogLevel::Info
            };
            log.once(
                level,
                "version",
                &format!(
                    "coll {} presenting NCCL version 2.28.3",
                    env!("CARGO_PKG_VERSION")
                ),
            );
            Ok(Global {
                settings,
                log,
                real: OnceLock::new(),
                library_path: std::env::var("LD_LIBRARY_PATH").ok(),
            })
        })
        .as_ref()
        .map_err(|e| Error::usage(e.clone()))
}

impl Global {
    /// The state of a process with `settings`, for unit tests (no environment read; the
    /// real NCCL never loads unless the settings name it).
    #[cfg(test)]
    pub fn with_settings(settings: Settings) -> Global {
        Global {
            log: Arc::new(Log::new(settings.log)),
            settings,
            real: OnceLock::new(),
            library_path: None,
        }
    }

    /// The real NCCL, loading it on first use.
    pub fn real(&self) -> Result<&Arc<RealNccl>> {
        self.real
            .get_or_init(|| {
                if !self.settings.forward {
                    return Err(LoadError::Disabled.to_string());
                }
                let ours = crate::entry::ncclGetVersion as *const () as usize;
                let candidates = real::candidates(self.library_path.as_deref());
                let r = RealNccl::find(self.settings.real.as_deref(), &candidates, ours)
                    .map_err(|e| e.to_string())?;
                self.log.line(
                    LogLevel::Info,
                    &format!(
                        "real NCCL {} loaded from {}",
                        r.version().unwrap_or(0),
                        r.path.display()
                    ),
                );
                Ok(Arc::new(r))
            })
            .as_ref()
            .map_err(|e| Error::usage(e.clone()))
    }

    /// The real NCCL if it is already loaded (never loads it).
    pub fn real_if_loaded(&self) -> Option<&Arc<RealNccl>> {
        self.real.get().and_then(|r| r.as_ref().ok())
    }
}
