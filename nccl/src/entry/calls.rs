//! The collective and point-to-point calls.

use super::{boundary, submit, types};
use crate::route::Spec;
use coll_lang::builtins::CollectiveKind;
use std::ffi::{c_int, c_void};

#[allow(clippy::too_many_arguments)]
fn spec(
    kind: CollectiveKind,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: c_int,
    op: c_int,
    root: c_int,
    stream: *mut c_void,
) -> crate::error::Result<Spec> {
    // Operators mean nothing to collectives that only move data; NCCL ignores them there.
    let op = if crate::route::reduces(kind) { op } else { 0 };
    let (dtype, op) = types(datatype, op)?;
    let root = u32::try_from(root)
        .map_err(|_| crate::error::Error::argument(format!("root or peer {root}")))?;
    Ok(Spec {
        kind,
        send: send as u64,
        recv: recv as u64,
        count: count as u64,
        dtype,
        op,
        root,
        stream: stream as usize,
        is_recv: false,
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclAllReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    op: c_int,
    comm: *mut c_void,
    stream: *mut c_void,
) -> c_int {
    boundary("ncclAllReduce", |g| {
        let s = spec(
            CollectiveKind::AllReduce,
            sendbuff,
            recvbuff,
            count,
            datatype,
            op,
            0,
            stream,
        )?;
        submit(g, comm, s)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclAllGather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    sendcount: usize,
    datatype: c_int,
    comm: *mut c_void,
    stream: *mut c_void,
) -> c_int {
    boundary("ncclAllGather", |g| {
        let s = spec(
            CollectiveKind::AllGather,
            sendbuff,
            recvbuff,
            sendcount,
            datatype,
            0,
            0,
            stream,
        )?;
        submit(g, comm, s)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclReduceScatter(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    recvcount: usize,
    datatype: c_int,
    op: c_int,
    comm: *mut c_void,
    stream: *mut c_void,
) -> c_int {
    boundary("ncclReduceScatter", |g| {
        let s = spec(
            CollectiveKind::ReduceScatter,
            sendbuff,
            recvbuff,
            recvcount,
            datatype,
            op,
            0,
            stream,
        )?;
        submit(g, comm, s)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclAlltoAll(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    comm: *mut c_void,
    stream: *mut c_void,
) -> c_int {
    boundary("ncclAlltoAll", |g| {
        let s = spec(
            CollectiveKind::AllToAll,
            sendbuff,
            recvbuff,
            count,
            datatype,
            0,
            0,
            stream,
        )?;
        submit(g, comm, s)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclBroadcast(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    root: c_int,
    comm: *mut c_void,
    stream: *mut c_void,
) -> c_int {
    boundary("ncclBroadcast", |g| {
        let s = spec(
            CollectiveKind::Broadcast,
            sendbuff,
            recvbuff,
            count,
            datatype,
            0,
            root,
            stream,
        )?;
        submit(g, comm, s)
    })
}

/// The in-place broadcast of NCCL's older API.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclBcast(
    buff: *mut c_void,
    count: usize,
    datatype: c_int,
    root: c_int,
    comm: *mut c_void,
    stream: *mut c_void,
) -> c_int {
    boundary("ncclBcast", |g| {
        let s = spec(
            CollectiveKind::Broadcast,
            buff,
            buff,
            count,
            datatype,
            0,
            root,
            stream,
        )?;
        submit(g, comm, s)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    op: c_int,
    root: c_int,
    comm: *mut c_void,
    stream: *mut c_void,
) -> c_int {
    boundary("ncclReduce", |g| {
        let s = spec(
            CollectiveKind::Reduce,
            sendbuff,
            recvbuff,
            count,
            datatype,
            op,
            root,
            stream,
        )?;
        submit(g, comm, s)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclSend(
    sendbuff: *const c_void,
    count: usize,
    datatype: c_int,
    peer: c_int,
    comm: *mut c_void,
    stream: *mut c_void,
) -> c_int {
    boundary("ncclSend", |g| {
        let s = spec(
            CollectiveKind::SendRecv,
            sendbuff,
            std::ptr::null_mut(),
            count,
            datatype,
            0,
            peer,
            stream,
        )?;
        submit(g, comm, s)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclRecv(
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    peer: c_int,
    comm: *mut c_void,
    stream: *mut c_void,
) -> c_int {
    boundary("ncclRecv", |g| {
        let s = Spec {
            is_recv: true,
            ..spec(
                CollectiveKind::SendRecv,
                std::ptr::null(),
                recvbuff,
                count,
                datatype,
                0,
                peer,
                stream,
            )?
        };
        submit(g, comm, s)
    })
}
