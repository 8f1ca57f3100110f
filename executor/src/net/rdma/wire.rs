//! The RDMA backend's bookkeeping, free of verbs so that it is tested without a device:
//! immediate-data encoding, the endpoint blob, the send and receive windows (slots and
//! credits), splitting frames into slot-sized pieces and putting them back together, and the
//! choice of device. The layouts and rules are those of the parent module's docs.

use super::super::{Frame, FrameLimits, HEADER_BYTES};
use std::collections::BTreeSet;

/// What one immediate value says (see "Immediate data" in the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Imm {
    /// A piece of a frame was written into receive slot `slot`.
    Data { slot: u16, first: bool, last: bool },
    /// The peer consumed `n` of our pieces; we may send `n` more.
    Credit(u32),
    /// Sent once per link at connect: the peer's queue pair is up in both directions.
    Hello,
    /// Keepalive of an idle receiver; carries nothing.
    Ping,
}

const CLASS_SHIFT: u32 = 30;
const CLASS_DATA: u32 = 0;
const CLASS_CREDIT: u32 = 1;
const CLASS_HELLO: u32 = 2;
const CLASS_PING: u32 = 3;
const FIRST: u32 = 1 << 29;
const LAST: u32 = 1 << 28;
const LOW30: u32 = (1 << 30) - 1;
/// The most credits one credit message returns (its count field is 30 bits).
pub(super) const MAX_CREDIT: u32 = LOW30;
/// The most slots a ring has: a slot index travels in 16 bits.
pub const MAX_SLOTS: u32 = 1 << 16;

impl Imm {
    /// The 32-bit value, in host order (the verbs layer converts to and from the wire's
    /// big-endian order).
    pub(super) fn encode(self) -> u32 {
        match self {
            Imm::Data { slot, first, last } => {
                (CLASS_DATA << CLASS_SHIFT)
                    | if first { FIRST } else { 0 }
                    | if last { LAST } else { 0 }
                    | u32::from(slot)
            }
            Imm::Credit(n) => (CLASS_CREDIT << CLASS_SHIFT) | (n & LOW30),
            Imm::Hello => CLASS_HELLO << CLASS_SHIFT,
            Imm::Ping => CLASS_PING << CLASS_SHIFT,
        }
    }

    /// Decodes a value; reserved bits that are set, or a credit of 0, are protocol errors.
    pub(super) fn decode(v: u32) -> Result<Imm, String> {
        let bad = || format!("malformed immediate value {v:#010x}");
        match v >> CLASS_SHIFT {
            CLASS_DATA => {
                if v & (LOW30 & !(FIRST | LAST) & !0xffff) != 0 {
                    return Err(bad());
                }
                Ok(Imm::Data {
                    slot: (v & 0xffff) as u16,
                    first: v & FIRST != 0,
                    last: v & LAST != 0,
                })
            }
            CLASS_CREDIT if v & LOW30 != 0 => Ok(Imm::Credit(v & LOW30)),
            CLASS_HELLO if v & LOW30 == 0 => Ok(Imm::Hello),
            CLASS_PING if v & LOW30 == 0 => Ok(Imm::Ping),
            _ => Err(bad()),
        }
    }
}

/// The sender's view of the peer's receive ring.
///
/// Invariant: `credits + unconsumed pieces + credits in flight back == slots`; a piece is sent
/// only with a credit in hand, so the peer's ring is never overrun. A staging slot is reused
/// only once the write that last read it has completed locally (`local_inflight < slots`;
/// completions come back in posting order on an RC queue pair).
#[derive(Debug)]
pub(super) struct SendWindow {
    slots: u32,
    next: u32,
    credits: u32,
    local_inflight: u32,
}

impl SendWindow {
    pub(super) fn new(slots: u32) -> SendWindow {
        SendWindow {
            slots,
            next: 0,
            credits: slots,
            local_inflight: 0,
        }
    }

    /// Whether one more piece may be written now.
    pub(super) fn can_send(&self) -> bool {
        self.credits > 0 && self.local_inflight < self.slots
    }

    /// Takes the next slot (the same index in our staging ring and the peer's receive ring).
    pub(super) fn take(&mut self) -> Option<u16> {
        if !self.can_send() {
            return None;
        }
        let slot = self.next;
        self.next = (self.next + 1) % self.slots;
        self.credits -= 1;
        self.local_inflight += 1;
        // `slots <= MAX_SLOTS`, so every index fits in 16 bits.
        Some(slot as u16)
    }

    /// The write of one piece completed locally: its staging slot may be refilled.
    pub(super) fn written(&mut self) -> Result<(), String> {
        self.local_inflight = self
            .local_inflight
            .checked_sub(1)
            .ok_or("a write completed that was never posted")?;
        Ok(())
    }

    /// The peer returned `n` credits.
    pub(super) fn grant(&mut self, n: u32) -> Result<(), String> {
        match self.credits.checked_add(n) {
            Some(c) if c <= self.slots => {
                self.credits = c;
                Ok(())
            }
            _ => Err(format!(
                "peer returned {n} credits while {} of {} were out",
                self.slots - self.credits,
                self.slots
            )),
        }
    }

    #[cfg(test)]
    pub(super) fn credits(&self) -> u32 {
        self.credits
    }
}

/// The receiver's view of its own ring: which slot comes next and how many consumed slots
/// have not been handed back yet.
///
/// Credit rule: consumed slots are returned in batches of `batch` (at least 1, at most
/// `slots`). A sender blocks only when all `slots` pieces are out; then fewer than `batch`
/// sit consumed-but-unreturned here, so at least one is unconsumed or its credit is in
/// flight, and consuming it reaches a batch: credits cannot deadlock.
#[derive(Debug)]
pub(super) struct RecvWindow {
    slots: u32,
    expect: u32,
    freed: u32,
    batch: u32,
    arrived: u32,
}

impl RecvWindow {
    pub(super) fn new(slots: u32) -> RecvWindow {
        RecvWindow {
            slots,
            expect: 0,
            freed: 0,
            batch: (slots / 2).max(1),
            arrived: 0,
        }
    }

    /// A piece arrived in `slot`: it must be the next slot of the ring, and the ring must
    /// have room (else the sender broke the credit rule).
    pub(super) fn arrive(&mut self, slot: u16) -> Result<(), String> {
        if u32::from(slot) != self.expect {
            return Err(format!(
                "piece written into slot {slot}, expected slot {}",
                self.expect
            ));
        }
        if self.arrived + self.freed >= self.slots {
            return Err(format!(
                "piece into slot {slot} overruns the ring of {} slots",
                self.slots
            ));
        }
        self.expect = (self.expect + 1) % self.slots;
        self.arrived += 1;
        Ok(())
    }

    /// The oldest arrived piece was copied out; returns the credits to send now, if a batch
    /// is complete.
    pub(super) fn consume(&mut self) -> Result<Option<u32>, String> {
        self.arrived = self
            .arrived
            .checked_sub(1)
            .ok_or("consumed a piece that never arrived")?;
        self.freed += 1;
        Ok(self.owed())
    }

    /// Credits due now (a complete batch), taken out of the window.
    pub(super) fn owed(&mut self) -> Option<u32> {
        if self.freed >= self.batch {
            let n = self.freed.min(MAX_CREDIT);
            self.freed -= n;
            Some(n)
        } else {
            None
        }
    }

    /// Credits that could not be sent (the send queue was full) go back to be sent later.
    pub(super) fn unsent(&mut self, n: u32) {
        self.freed += n;
    }
}

/// One piece of a frame: bytes `[offset, offset + len)` of header ++ payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Piece {
    pub(super) offset: usize,
    pub(super) len: usize,
    pub(super) first: bool,
    pub(super) last: bool,
}

/// The pieces of a frame of `payload` bytes in slots of `slot_bytes` bytes: every piece but
/// the last fills its slot.
pub(super) fn pieces(payload: usize, slot_bytes: usize) -> impl Iterator<Item = Piece> {
    let total = HEADER_BYTES + payload;
    let slot_bytes = slot_bytes.max(1);
    (0..total.div_ceil(slot_bytes)).map(move |i| {
        let offset = i * slot_bytes;
        let len = slot_bytes.min(total - offset);
        Piece {
            offset,
            len,
            first: i == 0,
            last: offset + len == total,
        }
    })
}

/// Copies piece `p` of header ++ payload into `dst` (at least `p.len` bytes).
pub(super) fn fill(header: &[u8; HEADER_BYTES], payload: &[u8], p: Piece, dst: &mut [u8]) {
    let end = p.offset + p.len;
    let mut at = 0;
    if p.offset < HEADER_BYTES {
        let h = &header[p.offset..end.min(HEADER_BYTES)];
        dst[..h.len()].copy_from_slice(h);
        at = h.len();
    }
    if end > HEADER_BYTES {
        let from = p.offset.max(HEADER_BYTES) - HEADER_BYTES;
        let part = &payload[from..end - HEADER_BYTES];
        dst[at..at + part.len()].copy_from_slice(part);
    }
}

/// Puts frames back together from pieces, checking that each piece has the length and flags
/// that the frame's header implies.
#[derive(Debug)]
pub(super) struct Reassembly {
    slot_bytes: usize,
    /// The frame being filled and how many payload bytes it still lacks.
    partial: Option<(Frame, usize)>,
}

impl Reassembly {
    pub(super) fn new(slot_bytes: usize) -> Reassembly {
        Reassembly {
            slot_bytes,
            partial: None,
        }
    }

    /// Takes one piece (the bytes the peer wrote into a slot); returns a frame when `bytes`
    /// completed one. A first piece whose header claims more than `limits` grant is refused
    /// before anything is reserved for the frame.
    pub(super) fn feed(
        &mut self,
        first: bool,
        last: bool,
        bytes: &[u8],
        limits: &FrameLimits,
    ) -> Result<Option<Frame>, String> {
        if bytes.len() > self.slot_bytes {
            return Err(format!(
                "piece of {} bytes in slots of {}",
                bytes.len(),
                self.slot_bytes
            ));
        }
        let (mut frame, missing, data) = match (first, self.partial.take()) {
            (true, None) => {
                let Some((h, data)) = bytes.split_first_chunk::<HEADER_BYTES>() else {
                    return Err(format!(
                        "first piece of {} bytes holds no frame header",
                        bytes.len()
                    ));
                };
                let (frame, len) = Frame::parse_header(h, limits)?;
                let len = usize::try_from(len).map_err(|_| format!("frame of {len} bytes"))?;
                (frame, len, data)
            }
            (false, Some((frame, missing))) => (frame, missing, bytes),
            (true, Some(_)) => return Err("a new frame began inside another".into()),
            (false, None) => return Err("a continuation piece arrived outside a frame".into()),
        };
        // Every piece but the last fills its slot, so the length is known in advance.
        let want = self
            .slot_bytes
            .min(missing + if first { HEADER_BYTES } else { 0 });
        if bytes.len() != want {
            return Err(format!(
                "piece of {} bytes where {want} were due",
                bytes.len()
            ));
        }
        if frame.payload.capacity() == 0 {
            frame.payload.reserve_exact(missing);
        }
        frame.payload.extend_from_slice(data);
        let missing = missing - data.len();
        match (missing == 0, last) {
            (true, true) => Ok(Some(frame)),
            (false, false) => {
                self.partial = Some((frame, missing));
                Ok(None)
            }
            (true, false) => Err("frame complete but its last piece is not marked last".into()),
            (false, true) => Err(format!("frame cut short: {missing} bytes missing")),
        }
    }
}

/// Bytes of the endpoint blob's header.
pub(super) const BLOB_HEADER: usize = 48;
/// Bytes of one per-peer entry of the endpoint blob.
pub(super) const BLOB_ENTRY: usize = 24;
const BLOB_MAGIC: [u8; 4] = *b"COLR";
const BLOB_VERSION: u16 = 1;

/// What a process publishes: its port's address and, for every peer, the queue pair and
/// receive ring that peer is to use (see "Endpoint blob" in the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Endpoint {
    pub(super) me: u32,
    pub(super) procs: u32,
    pub(super) lid: u16,
    /// `IBV_LINK_LAYER_*` of the port: Ethernet (RoCE) needs the GID in every packet.
    pub(super) link_layer: u8,
    /// The port's active MTU as `ibv_mtu` (1 = 256 … 5 = 4096).
    pub(super) mtu: u8,
    pub(super) gid: [u8; 16],
    pub(super) slots: u32,
    pub(super) slot_bytes: u32,
    /// Indexed by peer; the entry at `me` is all zero.
    pub(super) peers: Vec<PeerEntry>,
}

/// What process `me` prepared for one peer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct PeerEntry {
    pub(super) qpn: u32,
    /// 24-bit packet sequence number the queue pair starts sending with.
    pub(super) psn: u32,
    pub(super) ring_addr: u64,
    pub(super) rkey: u32,
}

impl Endpoint {
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(BLOB_HEADER + BLOB_ENTRY * self.peers.len());
        b.extend_from_slice(&BLOB_MAGIC);
        b.extend_from_slice(&BLOB_VERSION.to_le_bytes());
        b.extend_from_slice(&self.lid.to_le_bytes());
        b.extend_from_slice(&self.me.to_le_bytes());
        b.extend_from_slice(&self.procs.to_le_bytes());
        b.push(self.link_layer);
        b.push(self.mtu);
        b.extend_from_slice(&[0; 6]);
        b.extend_from_slice(&self.gid);
        b.extend_from_slice(&self.slots.to_le_bytes());
        b.extend_from_slice(&self.slot_bytes.to_le_bytes());
        for e in &self.peers {
            b.extend_from_slice(&e.qpn.to_le_bytes());
            b.extend_from_slice(&e.psn.to_le_bytes());
            b.extend_from_slice(&e.ring_addr.to_le_bytes());
            b.extend_from_slice(&e.rkey.to_le_bytes());
            b.extend_from_slice(&[0; 4]);
        }
        b
    }

    /// Decodes a blob, checking it is whole and self-consistent; the error says what is
    /// wrong (the caller names the process).
    pub(super) fn decode(b: &[u8]) -> Result<Endpoint, String> {
        if b.len() < BLOB_HEADER {
            return Err(format!(
                "RDMA endpoint of {} bytes is truncated (its header alone is {BLOB_HEADER})",
                b.len()
            ));
        }
        if b[0..4] != BLOB_MAGIC {
            return Err("endpoint is not an RDMA endpoint (is every process using rdma?)".into());
        }
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| u64::from(u32_at(i)) | (u64::from(u32_at(i + 4)) << 32);
        let version = u16_at(4);
        if version != BLOB_VERSION {
            return Err(format!(
                "RDMA endpoint version {version}, this build speaks {BLOB_VERSION}"
            ));
        }
        let procs = u32_at(12);
        let want = usize::try_from(procs)
            .ok()
            .and_then(|p| p.checked_mul(BLOB_ENTRY))
            .and_then(|n| n.checked_add(BLOB_HEADER));
        if want != Some(b.len()) {
            return Err(format!(
                "RDMA endpoint of {} bytes for {procs} processes is truncated or padded",
                b.len()
            ));
        }
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[24..40]);
        let e = Endpoint {
            lid: u16_at(6),
            me: u32_at(8),
            procs,
            link_layer: b[16],
            mtu: b[17],
            gid,
            slots: u32_at(40),
            slot_bytes: u32_at(44),
            peers: (0..procs as usize)
                .map(|p| {
                    let at = BLOB_HEADER + p * BLOB_ENTRY;
                    PeerEntry {
                        qpn: u32_at(at),
                        psn: u32_at(at + 4),
                        ring_addr: u64_at(at + 8),
                        rkey: u32_at(at + 16),
                    }
                })
                .collect(),
        };
        if e.me >= procs {
            return Err(format!("endpoint of process {} of {procs}", e.me));
        }
        if !(1..=5).contains(&e.mtu) {
            return Err(format!("endpoint with MTU code {}", e.mtu));
        }
        check_ring(e.slots, e.slot_bytes)?;
        if let Some(p) = e.peers.iter().position(|x| x.psn > 0xff_ffff) {
            return Err(format!(
                "packet sequence number for process {p} exceeds 24 bits"
            ));
        }
        Ok(e)
    }
}

/// The smallest slot: a frame header and some payload.
pub const MIN_SLOT_BYTES: u32 = 256;
/// The largest slot: one RDMA write of at most 1 GiB.
pub const MAX_SLOT_BYTES: u32 = 1 << 30;

/// Checks a ring shape: 1..=MAX_SLOTS slots of MIN_SLOT_BYTES..=MAX_SLOT_BYTES bytes.
pub(super) fn check_ring(slots: u32, slot_bytes: u32) -> Result<(), String> {
    if !(1..=MAX_SLOTS).contains(&slots) {
        return Err(format!("{slots} slots (1 to {MAX_SLOTS})"));
    }
    if !(MIN_SLOT_BYTES..=MAX_SLOT_BYTES).contains(&slot_bytes) {
        return Err(format!(
            "slots of {slot_bytes} bytes ({MIN_SLOT_BYTES} to {MAX_SLOT_BYTES})"
        ));
    }
    Ok(())
}

/// Which device of `names` (as ibverbs lists them) to open: `wanted` (from `COLL_IB_HCA`)
/// or else the first. The error is the text of a `NetError::NoDevice`: what was looked for,
/// what exists, and what to do.
pub(super) fn select_device(names: &[String], wanted: Option<&str>) -> Result<usize, String> {
    const WHY: &str = "this machine has no RDMA adapter, or its kernel driver or the \
                       user-space provider (Debian: ibverbs-providers) is missing; \
                       use the tcp backend instead";
    match wanted {
        None if names.is_empty() => Err(format!(
            "looked for the first RDMA device (COLL_IB_HCA is unset) but ibverbs lists \
             none: {WHY}"
        )),
        None => Ok(0),
        Some(w) => names.iter().position(|n| n == w).ok_or_else(|| {
            if names.is_empty() {
                format!("COLL_IB_HCA={w} but ibverbs lists no RDMA device at all: {WHY}")
            } else {
                format!(
                    "COLL_IB_HCA={w} names no device; ibverbs lists {}",
                    names.join(", ")
                )
            }
        }),
    }
}

/// One row of a port's GID table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct GidRow {
    pub(super) index: u32,
    /// `IBV_GID_TYPE_*`: 0 IB, 1 RoCE v1, 2 RoCE v2.
    pub(super) kind: u32,
    pub(super) gid: [u8; 16],
}

const GID_TYPE_ROCE_V2: u32 = 2;
const LINK_LAYER_ETHERNET: u8 = 2;

/// The GID index to address this port by: `wanted` (COLL_IB_GID_INDEX) if the table has it;
/// on InfiniBand index 0; on Ethernet (RoCE) the first RoCE v2 GID that maps an IPv4
/// address, else the first RoCE v2 GID, else the first non-zero one (what NCCL picks too).
pub(super) fn choose_gid(
    rows: &[GidRow],
    link_layer: u8,
    wanted: Option<u32>,
) -> Result<GidRow, String> {
    let listed: BTreeSet<u32> = rows.iter().map(|r| r.index).collect();
    if let Some(w) = wanted {
        return rows.iter().find(|r| r.index == w).copied().ok_or_else(|| {
            format!("COLL_IB_GID_INDEX={w} is not in the port's GID table (indices {listed:?})")
        });
    }
    let nonzero = |r: &&GidRow| r.gid != [0; 16];
    let v4_mapped = |r: &&GidRow| r.gid[..10] == [0; 10] && r.gid[10..12] == [0xff, 0xff];
    let pick = if link_layer == LINK_LAYER_ETHERNET {
        let v2 = || {
            rows.iter()
                .filter(nonzero)
                .filter(|r| r.kind == GID_TYPE_ROCE_V2)
        };
        v2().find(v4_mapped)
            .or_else(|| v2().next())
            .or_else(|| rows.iter().find(nonzero))
    } else {
        rows.iter().find(|r| r.index == 0)
    };
    pick.copied()
        .ok_or_else(|| "the port's GID table has no usable entry".into())
}

#[cfg(test)]
mod tests;
