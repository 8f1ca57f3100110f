//! The host side of the interpreter kernel's ABI, generated at build time from the kernel's
//! header (`kernel/abi.h`) by `executor/build.rs` (with `abi_gen.rs`): every struct the
//! host hands the kernel or reads back (`#[repr(C)]`, [`bytemuck::Pod`]), and every constant,
//! op code, flag bit, protocol and fault code the two sides share. Nothing here is written by
//! hand but the conversions from the compiler's and the executor's own types, so a change to
//! the header changes both sides at once.
//!
//! Invariants: each struct has the header's fields in order with no padding, and the build
//! asserts its size, alignment and every field's offset as C lays them out; the header's
//! `static_assert`s pin the same sizes on the kernel's side (NVRTC checks them).

use coll_compiler::plan::OpKind;

// Generated: the consts, enums and `#[repr(C)]` structs of `kernel/abi.h`, with their layout
// asserts.
include!(concat!(env!("OUT_DIR"), "/abi.rs"));

impl From<OpKind> for OpCode {
    fn from(k: OpKind) -> OpCode {
        match k {
            OpKind::Send => OpCode::Send,
            OpKind::Recv => OpCode::Recv,
            OpKind::RecvReduceCopy => OpCode::RecvReduceCopy,
            OpKind::RecvCopySend => OpCode::RecvCopySend,
            OpKind::RecvReduceSend => OpCode::RecvReduceSend,
            OpKind::RecvReduceCopySend => OpCode::RecvReduceCopySend,
            OpKind::Copy => OpCode::Copy,
            OpKind::Reduce => OpCode::Reduce,
            OpKind::CopySend => OpCode::CopySend,
        }
    }
}

impl From<super::Protocol> for Proto {
    fn from(p: super::Protocol) -> Proto {
        match p {
            super::Protocol::Bulk => Proto::Bulk,
            super::Protocol::Ll => Proto::Ll,
            super::Protocol::Ll128 => Proto::Ll128,
        }
    }
}

// The generator, compiled here only for its unit tests (build.rs runs it).
#[cfg(test)]
#[path = "abi_gen.rs"]
mod abi_gen;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_kind_has_its_own_code_and_the_order_the_kernel_relies_on() {
        // The kernel tests kinds by ranges of codes (abi.h's OpCode): check each range
        // against what the plan says the kind does.
        let mut codes: Vec<u8> = OpKind::ALL
            .iter()
            .map(|&k| OpCode::from(k).code())
            .collect();
        for &k in &OpKind::ALL {
            let c = OpCode::from(k).code();
            assert_eq!(OpCode::from_code(c), Some(OpCode::from(k)));
            let recvs = (OpCode::Recv.code()..=OpCode::RecvReduceCopySend.code()).contains(&c);
            assert_eq!(k.receives(), recvs, "{k:?}");
            let sends = [
                OpCode::Send,
                OpCode::RecvCopySend,
                OpCode::RecvReduceSend,
                OpCode::RecvReduceCopySend,
                OpCode::CopySend,
            ]
            .contains(&OpCode::from(k));
            assert_eq!(k.sends(), sends, "{k:?}");
            let reads_src = c == OpCode::Send.code()
                || c == OpCode::RecvReduceCopy.code()
                || c >= OpCode::RecvReduceSend.code();
            assert_eq!(k.needs_src(), reads_src, "{k:?}");
            let writes_dst = c != OpCode::Send.code() && c != OpCode::RecvReduceSend.code();
            assert_eq!(k.needs_dst(), writes_dst, "{k:?}");
        }
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), OpKind::ALL.len());
        assert_eq!(OpCode::ALL.len(), OpKind::ALL.len());
    }

    #[test]
    fn codes_read_back_as_their_values_and_nothing_else() {
        for f in Fault::ALL {
            assert_eq!(Fault::from_code(u32::from(f)), Some(f));
        }
        assert_eq!(Fault::from_code(0), None);
        assert_eq!(Fault::from_code(7), None);
        assert_eq!(Fault::from_code(6), Some(Fault::Aborted));
        assert_ne!(ERR_FAILED, ERR_ABORTED);
        assert_eq!(Proto::from(super::super::Protocol::Ll).code(), 1);
        assert_eq!(Proto::from(super::super::Protocol::Bulk).code(), 0);
        assert_eq!(Proto::from(super::super::Protocol::Ll128).code(), 2);
        assert_eq!(OpCode::from_code(9), None);
    }

    #[test]
    fn flag_bits_are_distinct_and_pairs_sit_at_their_shifts() {
        let bits = [
            DOP_AWAITED,
            DOP_DIRECT_SEND_APART,
            DOP_DIRECT_RECV_APART,
            DOP_DIRECT_SEND_ALIASED,
            DOP_DIRECT_RECV_ALIASED,
            DOP_DIRECT_TO_OUTPUT,
            DOP_SWAP_APART,
            DOP_SWAP_ALIASED,
            DOP_SWAP_SECOND,
        ];
        assert_eq!(
            bits.iter().fold(0, |a, b| a | b).count_ones() as usize,
            bits.len()
        );
        // The kernel finds a pair's send bit at its shift, the receive bit after it, and the
        // swap bit at DOP_SWAP_SHIFT + shift / 2.
        for (shift, send, recv, swap) in [
            (
                DOP_APART_SHIFT,
                DOP_DIRECT_SEND_APART,
                DOP_DIRECT_RECV_APART,
                DOP_SWAP_APART,
            ),
            (
                DOP_ALIASED_SHIFT,
                DOP_DIRECT_SEND_ALIASED,
                DOP_DIRECT_RECV_ALIASED,
                DOP_SWAP_ALIASED,
            ),
        ] {
            assert_eq!(
                (send, recv, swap),
                (1 << shift, 2 << shift, 1 << (DOP_SWAP_SHIFT + shift / 2))
            );
        }
        assert_eq!(MODE_PROGRESS | MODE_DIRECT | MODE_ALIASED, 7);
        assert_eq!(RELEASE_AT_START & REL_MASK, RELEASE_AT_START);
        assert_eq!(REL_MASK << REL_ALIASED_SHIFT >> REL_ALIASED_SHIFT, REL_MASK);
    }

    #[test]
    fn structs_are_plain_bytes_the_kernel_reads() {
        // A DOp as the host encodes it, byte for byte as the kernel's layout puts it.
        let op = DOp {
            kind: OpCode::CopySend.code(),
            src_buf: 1,
            dst_buf: 2,
            ndeps: 3,
            count: 0x0403_0201,
            peer: ChunkPos { slice: 7, pos: 9 },
            ..DOp::default()
        };
        let b = bytemuck::bytes_of(&op);
        assert_eq!(b.len(), 48);
        assert_eq!(&b[..8], &[8, 1, 2, 3, 1, 2, 3, 4]);
        assert_eq!(&b[32..40], &[7, 0, 0, 0, 9, 0, 0, 0]);
        assert_eq!(
            std::mem::size_of::<CallArgs>(),
            8 * (3 * MAX_LOCAL + 2 * MAX_DIRECT)
        );
        assert!(CallArgs::default().peer_out.iter().all(|&p| p == 0));
    }

    #[test]
    fn the_kernel_source_is_its_files_in_order_each_from_a_line_start() {
        let src = super::super::KERNEL_SOURCE;
        assert!(src.starts_with(concat!("#line 1 \"abi.h\"\n", include_str!("kernel/abi.h"))));
        let mut at = 0;
        for f in [
            "common.cuh",
            "bulk.cuh",
            "ll.cuh",
            "multi.cuh",
            "entries.cu",
        ] {
            let mark = format!("\n#line 1 \"{f}\"\n");
            let Some(i) = src[at..].find(&mark) else {
                panic!("{f} is not after the files before it");
            };
            at += i + mark.len();
        }
    }
}
