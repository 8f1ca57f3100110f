//! The canonical layout (stub).
