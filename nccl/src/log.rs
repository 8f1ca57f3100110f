//! The library's log lines, on stderr as NCCL writes its own (`host:pid:tid [dev] NCCL
//! WARN ...`), filtered by `NCCL_DEBUG`.
//!
//! Invariant: a line logged with [`Log::once`] is written at most once per process for its
//! key, so a training loop that forwards the same call a million times logs it once.

use crate::settings::LogLevel;
use std::collections::HashSet;
use std::sync::Mutex;

#[derive(Debug)]
pub struct Log {
    level: LogLevel,
    seen: Mutex<HashSet<String>>,
}

impl Log {
    pub fn new(level: LogLevel) -> Log {
        Log {
            level,
            seen: Mutex::new(HashSet::new()),
        }
    }

    pub fn enabled(&self, level: LogLevel) -> bool {
        level <= self.level
    }

    /// Writes `line` at `level`.
    pub fn line(&self, level: LogLevel, line: &str) {
        if !self.enabled(level) {
            return;
        }
        let tag = match level {
            LogLevel::Version | LogLevel::Info => "INFO",
            LogLevel::Warn => "WARN",
            LogLevel::Trace => "TRACE",
        };
        eprintln!("{}: coll NCCL {tag} {line}", std::process::id());
    }

    /// Writes `line` at `level` the first time `key` is seen.
    pub fn once(&self, level: LogLevel, key: &str, line: &str) {
        if !self.enabled(level) {
            return;
        }
        let first = coll_executor::sync::lock(&self.seen).insert(key.to_string());
        if first {
            self.line(level, line);
        }
    }

    /// Whether `key` was logged with [`Log::once`] (for tests).
    pub fn seen(&self, key: &str) -> bool {
        coll_executor::sync::lock(&self.seen).contains(key)
    }
}
