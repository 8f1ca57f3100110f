//! Comments (stub).
