//! The proxy: a process's links, its threads and what they delivered (being written).
