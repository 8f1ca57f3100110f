//! Unit tests of [`super`], apart so the module itself stays short.

use super::*;
use ffi::ibv_qp_attr_mask as m;

#[test]
fn relaxed_ordering_falls_back_only_where_it_is_refused() {
    assert!(retry_without_relaxed(Some(libc::EINVAL)));
    assert!(retry_without_relaxed(Some(libc::EOPNOTSUPP)));
    assert!(
        !retry_without_relaxed(Some(libc::ENOMEM)),
        "out of memory stays an error"
    );
    assert!(!retry_without_relaxed(Some(libc::EPERM)));
    assert!(!retry_without_relaxed(None));
    let a = access(true, true);
    assert_ne!(
        a.0 & ffi::ibv_access_flags::IBV_ACCESS_RELAXED_ORDERING.0,
        0
    );
    assert_ne!(a.0 & ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0, 0);
    let a = access(false, false);
    assert_eq!(a.0, ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0);
}

#[test]
fn queue_pair_transitions_set_what_their_masks_name() {
    let (a, mask) = init_attr(1);
    assert_eq!(a.qp_state, ffi::ibv_qp_state::IBV_QPS_INIT);
    assert_eq!(a.port_num, 1);
    assert_ne!(
        a.qp_access_flags & ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0,
        0
    );
    assert_eq!(mask.0 & m::IBV_QP_ACCESS_FLAGS.0, m::IBV_QP_ACCESS_FLAGS.0);

    let roce = Remote {
        qpn: 77,
        psn: 0x123456,
        lid: 0,
        gid: [7; 16],
        global: true,
        mtu: ffi::IBV_MTU_1024,
    };
    let (a, mask) = rtr_attr(2, &roce, 3);
    assert_eq!(a.qp_state, ffi::ibv_qp_state::IBV_QPS_RTR);
    assert_eq!(
        (a.dest_qp_num, a.rq_psn, a.path_mtu),
        (77, 0x123456, ffi::IBV_MTU_1024)
    );
    assert_eq!((a.ah_attr.is_global, a.ah_attr.port_num), (1, 2));
    assert_eq!(a.ah_attr.grh.sgid_index, 3);
    // SAFETY: reading the byte view of a GID we wrote as bytes.
    assert_eq!(unsafe { a.ah_attr.grh.dgid.raw }, [7; 16]);
    for need in [
        m::IBV_QP_AV,
        m::IBV_QP_DEST_QPN,
        m::IBV_QP_RQ_PSN,
        m::IBV_QP_PATH_MTU,
    ] {
        assert_eq!(mask.0 & need.0, need.0);
    }
    let ib = Remote {
        lid: 5,
        global: false,
        ..roce
    };
    let (a, _) = rtr_attr(1, &ib, 0);
    assert_eq!((a.ah_attr.is_global, a.ah_attr.dlid), (0, 5));

    let (a, mask) = rts_attr(0xabcdef, 17);
    assert_eq!(
        (a.sq_psn, a.timeout, a.retry_cnt, a.rnr_retry),
        (0xabcdef, 17, 7, 7)
    );
    assert_eq!(mask.0 & m::IBV_QP_SQ_PSN.0, m::IBV_QP_SQ_PSN.0);
}
