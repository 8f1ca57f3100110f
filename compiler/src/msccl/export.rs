//! MSCCL-IR export: a plan written as the XML MSCCL's runtime loads (the format and how
//! each part maps to the plan: the parent module's docs).

use super::*;

/// Writes `plan` as MSCCL-IR XML (see the module docs). The plan must be valid.
pub fn export(plan: &Plan) -> Result<String, MscclError> {
    plan.validate().map_err(MscclError::Plan)?;
    // MSCCL-IR has no copy-send.
    let split;
    let plan = if plan
        .gpus
        .iter()
        .flat_map(|g| &g.blocks)
        .flat_map(|b| &b.ops)
        .any(|o| o.kind == OpKind::CopySend)
    {
        split = plan.with_copy_sends_split();
        &split
    } else {
        plan
    };
    let fail = |at: String, what: String| MscclError::Export { at, what };
    let kind = plan.collective.0;
    let coll = collective_name(kind).ok_or_else(|| {
        fail(
            "plan".into(),
            format!("MSCCL has no {} collective", kind.name()),
        )
    })?;
    let n = u64::from(plan.ranks);
    let k = plan.chunk_factor;
    let ncpl = k * size_multiplier(kind, n);
    let proto = match plan.protocol {
        Protocol::Simple => "Simple",
        Protocol::Ll => "LL",
    };
    // Scratch buffers end to end in `s`.
    let mut base = vec![0u64; plan.buffers.len()];
    let mut scratch = 0u64;
    for (b, decl) in plan.buffers.iter().enumerate().skip(2) {
        base[b] = scratch;
        scratch += decl.chunks;
    }
    if let Some((ein, eout)) = buffer_sizes(kind, n, k) {
        let (hin, hout) = (plan.buffers[0].chunks, plan.buffers[1].chunks);
        if (hin, hout) != (ein, eout) {
            return Err(fail(
                "plan".into(),
                format!(
                    "input and output hold {hin} and {hout} chunks; a {} with chunk factor {k} on {n} ranks has {ein} and {eout}",
                    kind.name()
                ),
            ));
        }
    }
    let mut nchannels = 1u64;
    for (r, gpu) in plan.gpus.iter().enumerate() {
        let mut per_channel: BTreeMap<u32, usize> = BTreeMap::new();
        for (b, block) in gpu.blocks.iter().enumerate() {
            let at = || plan::location(plan, r as u32, b as u32, None);
            if u64::from(block.channel) >= MAX_CHANNELS {
                return Err(fail(
                    at(),
                    format!(
                        "channel {}: MSCCL has channels 0..{}",
                        block.channel,
                        MAX_CHANNELS - 1
                    ),
                ));
            }
            // A thread block of MSCCL-IR has one send and one recv peer (`<tb send recv>`),
            // and its runtime moves each step's data on those two connections only.
            if block.several_peers() {
                let list = |peers: Vec<String>| match peers.is_empty() {
                    true => "none".to_string(),
                    false => peers.join(", "),
                };
                return Err(fail(
                    at(),
                    format!(
                        "has send peers {} and recv peers {}: an MSCCL-IR thread block has at \
                         most one of each, so a block of several peers cannot be written",
                        list(block.send_peers().map(|p| p.to_string()).collect()),
                        list(block.recv_peers().map(|p| p.to_string()).collect())
                    ),
                ));
            }
            nchannels = nchannels.max(u64::from(block.channel) + 1);
            *per_channel.entry(block.channel).or_default() += 1;
            if let Some(p) = block.protocol
                && p != plan.protocol
            {
                return Err(fail(
                    at(),
                    format!(
                        "uses protocol {} but the plan {}: MSCCL-IR has one protocol per algorithm",
                        p.name(),
                        plan.protocol.name()
                    ),
                ));
            }
        }
        if let Some((c, &m)) = per_channel.iter().find(|(_, m)| **m > 32) {
            return Err(fail(
                format!("rank {r}"),
                format!("{m} blocks on channel {c}: MSCCL's runtime allows 32 per channel"),
            ));
        }
    }
    let place = |b: u32, off: u64| -> (&'static str, u64) {
        match b {
            0 => ("i", off),
            1 => ("o", off),
            _ => ("s", base.get(b as usize).copied().unwrap_or(0) + off),
        }
    };
    let mut x = String::new();
    let _ = writeln!(
        x,
        "<algo name=\"{}\" proto=\"{proto}\" nchannels=\"{nchannels}\" nchunksperloop=\"{ncpl}\" ngpus=\"{n}\" coll=\"{coll}\" inplace=\"{}\" outofplace=\"{}\" minBytes=\"0\" maxBytes=\"0\">",
        crate::dump::xml_escape(&plan.name),
        u8::from(plan.inplace),
        u8::from(!plan.inplace),
    );
    for (r, gpu) in plan.gpus.iter().enumerate() {
        let _ = writeln!(
            x,
            "  <gpu id=\"{r}\" i_chunks=\"{}\" o_chunks=\"{}\" s_chunks=\"{scratch}\">",
            plan.buffers[0].chunks, plan.buffers[1].chunks
        );
        // XML step of each op: its index plus the nops inserted before it.
        let steps: Vec<Vec<u64>> = gpu
            .blocks
            .iter()
            .map(|b| {
                let mut at = 0u64;
                b.ops
                    .iter()
                    .map(|o| {
                        at += o.deps.len().saturating_sub(1) as u64;
                        at += 1;
                        at - 1
                    })
                    .collect()
            })
            .collect();
        let waited: BTreeSet<(u32, u32)> = gpu
            .blocks
            .iter()
            .flat_map(|b| {
                b.ops
                    .iter()
                    .flat_map(|o| o.deps.iter().map(|d| (d.block(), d.op())))
            })
            .collect();
        for (b, block) in gpu.blocks.iter().enumerate() {
            let peer = |p: Option<u32>| p.map_or(-1, i64::from);
            let _ = writeln!(
                x,
                "    <tb id=\"{b}\" send=\"{}\" recv=\"{}\" chan=\"{}\">",
                peer(block.send_peer),
                peer(block.recv_peer),
                block.channel
            );
            let total = steps[b].last().map_or(0, |s| s + 1);
            if total as usize > MAX_STEPS {
                return Err(fail(
                    plan::location(plan, r as u32, b as u32, None),
                    format!(
                        "{total} steps (nops included); MSCCL's runtime holds at most {MAX_STEPS} per thread block"
                    ),
                ));
            }
            let mut s = 0u64;
            for (i, op) in block.ops.iter().enumerate() {
                let at = || plan::location(plan, r as u32, b as u32, Some(i as u32));
                let dep_step = |d: &Dep| -> Result<(u32, u64), MscclError> {
                    if u64::from(d.block()) > MAX_DEP_BLOCK {
                        return Err(fail(
                            at(),
                            format!(
                                "depends on block {}: MSCCL's runtime names blocks 0..{MAX_DEP_BLOCK} in dependencies",
                                d.block()
                            ),
                        ));
                    }
                    Ok((d.block(), steps[d.block() as usize][d.op() as usize]))
                };
                for d in op.deps.iter().skip(1) {
                    let (db, ds) = dep_step(d)?;
                    let _ = writeln!(
                        x,
                        "      <step s=\"{s}\" type=\"nop\" srcbuf=\"i\" srcoff=\"-1\" dstbuf=\"o\" dstoff=\"-1\" cnt=\"0\" depid=\"{db}\" deps=\"{ds}\" hasdep=\"0\"/>"
                    );
                    s += 1;
                }
                let (depid, deps) = match op.deps.first() {
                    Some(d) => {
                        let (db, ds) = dep_step(d)?;
                        (i64::from(db), ds as i64)
                    }
                    None => (-1, -1),
                };
                if u64::from(op.count) >= MAX_COUNT {
                    return Err(fail(
                        at(),
                        format!(
                            "moves {} chunks; a step of MSCCL's runtime moves at most {}",
                            op.count,
                            MAX_COUNT - 1
                        ),
                    ));
                }
                // The side the op does not use mirrors the one it does, as MSCCLang writes it
                // when both ends use the same place.
                let (src, dst) = match (op.src, op.dst) {
                    (Some(a), Some(b)) => (a, b),
                    (Some(a), None) => (a, a),
                    (None, Some(b)) => (b, b),
                    (None, None) => return Err(fail(at(), "has neither src nor dst".into())),
                };
                let (sb, so) = place(src.buffer(), src.offset());
                let (db, dof) = place(dst.buffer(), dst.offset());
                if so.max(dof) > MAX_OFFSET {
                    return Err(fail(
                        at(),
                        format!("offset {} does not fit MSCCL's 16-bit offsets", so.max(dof)),
                    ));
                }
                let hasdep = u8::from(waited.contains(&(b as u32, i as u32)));
                let _ = writeln!(
                    x,
                    "      <step s=\"{s}\" type=\"{}\" srcbuf=\"{sb}\" srcoff=\"{so}\" dstbuf=\"{db}\" dstoff=\"{dof}\" cnt=\"{}\" depid=\"{depid}\" deps=\"{deps}\" hasdep=\"{hasdep}\"/>",
                    op.kind.name(),
                    op.count
                );
                s += 1;
                // The runtime fuses a `re` into the one before when both write the same place
                // from the same buffer and nothing waits between them, and runs the fused
                // steps with the last one's count.
                if i > 0 && op.kind == OpKind::Reduce && op.deps.is_empty() {
                    let prev = &block.ops[i - 1];
                    let key = |o: &Op| {
                        (
                            o.dst.map(|d| place(d.buffer(), d.offset())),
                            o.src.map(|d| place(d.buffer(), 0).0),
                        )
                    };
                    if prev.kind == OpKind::Reduce
                        && !waited.contains(&(b as u32, i as u32 - 1))
                        && key(prev) == key(op)
                        && prev.count != op.count
                    {
                        return Err(fail(
                            at(),
                            format!(
                                "MSCCL's runtime fuses this reduce with the one before (same destination and source buffer) and runs both with {} chunks, but the one before moves {}",
                                op.count, prev.count
                            ),
                        ));
                    }
                }
            }
            x.push_str("    </tb>\n");
        }
        x.push_str("  </gpu>\n");
    }
    x.push_str("</algo>\n");
    Ok(x)
}
