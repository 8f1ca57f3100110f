//! Tree dump for snapshots (stub).
