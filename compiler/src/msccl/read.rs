//! MSCCL-IR import: the reader that turns the XML's elements into a plan, checking every
//! attribute and naming its line and column (the format and how each part maps to the plan:
//! the parent module's docs).

use super::*;

/// A step as written, before nops are folded and dependencies resolved.
#[derive(Clone, Debug)]
struct RawStep<'a, 'i> {
    node: Node<'a, 'i>,
    /// `None` for `nop`.
    kind: Option<OpKind>,
    src: (u32, i64),
    dst: (u32, i64),
    cnt: i64,
    /// `(depid, deps)` when `depid >= 0`.
    dep: Option<(u64, u64)>,
    hasdep: bool,
}

#[derive(Clone, Debug)]
struct RawBlock<'a, 'i> {
    node: Node<'a, 'i>,
    send: Option<u32>,
    recv: Option<u32>,
    chan: u32,
    steps: Vec<RawStep<'a, 'i>>,
}

/// A `<gpu>`: its element, `i_chunks`/`o_chunks`/`s_chunks` and blocks.
type RawGpu<'a, 'i> = (Node<'a, 'i>, [u64; 3], Vec<RawBlock<'a, 'i>>);

pub(super) struct Reader<'a, 'i> {
    pub(super) doc: &'a Document<'i>,
    pub(super) file: &'a str,
}

type R<T> = Result<T, MscclError>;

impl<'a, 'i> Reader<'a, 'i> {
    fn at(&self, byte: usize, element: &str, attribute: Option<&str>, what: String) -> MscclError {
        let p = self.doc.text_pos_at(byte);
        MscclError::Invalid {
            file: self.file.to_string(),
            line: p.row,
            col: p.col,
            element: element.to_string(),
            attribute: attribute.map(str::to_string),
            what,
        }
    }

    /// An error about `node` itself.
    fn node_err(&self, node: Node, element: &str, what: String) -> MscclError {
        self.at(node.range().start, element, None, what)
    }

    /// An error about attribute `attr` of `node` (at the attribute when present).
    fn attr_err(&self, node: Node, element: &str, attr: &str, what: String) -> MscclError {
        let byte = node
            .attributes()
            .find(|a| a.name() == attr)
            .map_or(node.range().start, |a| a.range().start);
        self.at(byte, element, Some(attr), what)
    }

    fn req<'n>(&self, node: Node<'n, 'i>, element: &str, attr: &str) -> R<&'n str> {
        node.attribute(attr).ok_or_else(|| {
            self.node_err(
                node,
                element,
                format!(
                    "attribute `{attr}` is missing (MSCCL's runtime requires it on <{}>)",
                    node.tag_name().name()
                ),
            )
        })
    }

    fn int(&self, node: Node, element: &str, attr: &str, text: &str) -> R<i64> {
        let t = text.trim();
        let digits = t.strip_prefix('-').unwrap_or(t);
        let parsed = if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            t.parse::<i64>().ok()
        } else {
            None
        };
        parsed.ok_or_else(|| {
            self.attr_err(node, element, attr, format!("`{text}` is not an integer"))
        })
    }

    fn req_int(&self, node: Node, element: &str, attr: &str) -> R<i64> {
        let text = self.req(node, element, attr)?;
        self.int(node, element, attr, text)
    }

    /// A required integer in `lo..=hi`; `why` explains the range.
    fn ranged(&self, node: Node, element: &str, attr: &str, lo: i64, hi: i64, why: &str) -> R<i64> {
        let v = self.req_int(node, element, attr)?;
        if v < lo || v > hi {
            return Err(self.attr_err(node, element, attr, format!("{v} is out of range: {why}")));
        }
        Ok(v)
    }

    fn flag(&self, node: Node, element: &str, attr: &str) -> R<Option<bool>> {
        match node.attribute(attr) {
            None => Ok(None),
            Some(t) => match self.int(node, element, attr, t)? {
                0 => Ok(Some(false)),
                1 => Ok(Some(true)),
                v => Err(self.attr_err(node, element, attr, format!("{v} is not 0 or 1"))),
            },
        }
    }

    fn req_flag(&self, node: Node, element: &str, attr: &str) -> R<bool> {
        self.req(node, element, attr)?;
        Ok(self.flag(node, element, attr)?.unwrap_or(false))
    }

    fn children<'n>(node: Node<'n, 'i>, tag: &'static str) -> impl Iterator<Item = Node<'n, 'i>> {
        node.children()
            .filter(move |c| c.is_element() && c.tag_name().name() == tag)
    }

    /// The whole algorithm: the plan and whether it also declares the other placement.
    pub(super) fn algo(&self) -> R<(Plan, bool)> {
        let root = self.doc.root_element();
        let el = "<algo>";
        if root.tag_name().name() != "algo" {
            return Err(self.node_err(
                root,
                &format!("<{}>", root.tag_name().name()),
                "the root element of MSCCL-IR is <algo>".into(),
            ));
        }
        let name = self.req(root, el, "name")?.to_string();
        let proto = self.req(root, el, "proto")?;
        let protocol = match proto {
            "Simple" => Protocol::Simple,
            "LL" => Protocol::Ll,
            // coll has no LL128 protocol yet; what the algorithm computes does not depend
            // on the protocol.
            "LL128" => Protocol::Simple,
            other => {
                return Err(self.attr_err(
                    root,
                    el,
                    "proto",
                    format!("unknown protocol `{other}` (MSCCL's are Simple, LL and LL128)"),
                ));
            }
        };
        let ngpus = self.ranged(root, el, "ngpus", 1, 65536, "ngpus is at least 1")?;
        let n = ngpus as u64;
        let nchannels = self.ranged(
            root,
            el,
            "nchannels",
            1,
            MAX_CHANNELS as i64,
            &format!("MSCCL's runtime has 1 to {MAX_CHANNELS} channels"),
        )?;
        let ncpl = self.ranged(
            root,
            el,
            "nchunksperloop",
            1,
            plan::MAX_PLAN_CELLS as i64,
            &format!(
                "a loop has 1 to {} chunks (coll's limit on plan chunks)",
                plan::MAX_PLAN_CELLS
            ),
        )? as u64;
        let coll = self.req(root, el, "coll")?;
        let kind = collective_from_name(coll).ok_or_else(|| {
            self.attr_err(
                root,
                el,
                "coll",
                format!(
                    "collective `{coll}` is not supported (allreduce, allgather, reducescatter, alltoall, broadcast, reduce, custom)"
                ),
            )
        })?;
        let inplace = self.req_flag(root, el, "inplace")?;
        let outofplace = self.flag(root, el, "outofplace")?;
        for attr in ["minBytes", "maxBytes"] {
            if let Some(t) = root.attribute(attr) {
                let v = self.int(root, el, attr, t)?;
                if v < 0 {
                    return Err(self.attr_err(root, el, attr, format!("{v} is negative")));
                }
            }
        }
        let m = size_multiplier(kind, n);
        if !ncpl.is_multiple_of(m) {
            return Err(self.attr_err(
                root,
                el,
                "nchunksperloop",
                format!(
                    "{ncpl} chunks do not divide among {n} ranks: MSCCL's {coll} cuts {n} × count elements into nchunksperloop chunks, so it must be a multiple of ngpus"
                ),
            ));
        }
        let k = ncpl / m;
        let expected = buffer_sizes(kind, n, k);

        // The gpus, by id.
        let mut gpus: Vec<Option<RawGpu>> = vec![None; n as usize];
        for g in Self::children(root, "gpu") {
            let ge = "<gpu>";
            let id = self.ranged(
                g,
                ge,
                "id",
                0,
                ngpus - 1,
                &format!("gpu ids are 0..{} (ngpus = {ngpus})", ngpus - 1),
            )? as u32;
            let gel = format!("gpu {id}");
            if gpus[id as usize].is_some() {
                return Err(self.attr_err(g, &gel, "id", format!("gpu {id} appears twice")));
            }
            let mut decl = [0u64; 3];
            for (i, attr) in ["i_chunks", "o_chunks", "s_chunks"].into_iter().enumerate() {
                decl[i] = self.ranged(
                    g,
                    &gel,
                    attr,
                    0,
                    plan::MAX_PLAN_CELLS as i64,
                    &format!(
                        "chunk counts are 0 to {} (coll's limit on plan chunks)",
                        plan::MAX_PLAN_CELLS
                    ),
                )? as u64;
            }
            if let Some((ein, eout)) = expected {
                for (i, attr, want) in [(0, "i_chunks", ein), (1, "o_chunks", eout)] {
                    if decl[i] != 0 && decl[i] != want {
                        return Err(self.attr_err(
                            g,
                            &gel,
                            attr,
                            format!(
                                "{} chunks, but a {coll} with nchunksperloop = {ncpl} on {n} gpus has {want} (or 0 when unused)",
                                decl[i]
                            ),
                        ));
                    }
                }
            }
            let blocks = self.blocks(g, id, n, nchannels as u64, &decl)?;
            gpus[id as usize] = Some((g, decl, blocks));
        }
        let mut gpus_ok = Vec::with_capacity(gpus.len());
        for (i, g) in gpus.into_iter().enumerate() {
            match g {
                Some(g) => gpus_ok.push(g),
                None => {
                    return Err(self.node_err(
                        root,
                        el,
                        format!("there is no <gpu id=\"{i}\"> (ngpus = {ngpus})"),
                    ));
                }
            }
        }

        let (in_chunks, out_chunks) = expected.unwrap_or_else(|| {
            (
                gpus_ok.iter().map(|g| g.1[0]).max().unwrap_or(0),
                gpus_ok.iter().map(|g| g.1[1]).max().unwrap_or(0),
            )
        });
        let scratch = gpus_ok.iter().map(|g| g.1[2]).max().unwrap_or(0);
        let mut buffers = vec![
            BufferDecl {
                name: "input".into(),
                chunks: in_chunks,
            },
            BufferDecl {
                name: "output".into(),
                chunks: out_chunks,
            },
        ];
        if scratch > 0 {
            buffers.push(BufferDecl {
                name: "scratch".into(),
                chunks: scratch,
            });
        }
        let mut sources = Vec::new();
        let mut rank_plans = Vec::with_capacity(gpus_ok.len());
        for (gid, (_, _, blocks)) in gpus_ok.iter().enumerate() {
            rank_plans.push(self.resolve(gid as u32, blocks, &mut sources)?);
        }
        let both = inplace && outofplace == Some(true);
        let plan = Plan {
            version: PLAN_VERSION,
            name,
            collective: Collective(kind),
            inplace: inplace && !both,
            ranks: n as u32,
            topology: format!("nvswitch:{n}"),
            protocol,
            chunk_factor: k,
            buffers,
            sources,
            gpus: rank_plans,
            schedule: None,
        };
        Ok((plan, both))
    }

    /// The `<tb>` elements of gpu `id`, by block id, with their raw steps.
    fn blocks(
        &self,
        g: Node<'a, 'i>,
        id: u32,
        n: u64,
        nchannels: u64,
        decl: &[u64; 3],
    ) -> R<Vec<RawBlock<'a, 'i>>> {
        let mut by_id: BTreeMap<u64, RawBlock> = BTreeMap::new();
        for tb in Self::children(g, "tb") {
            let gel = format!("gpu {id} tb");
            let t = self.ranged(
                tb,
                &gel,
                "id",
                0,
                i64::from(i32::MAX),
                "thread block ids are not negative",
            )? as u64;
            let tel = format!("gpu {id} tb {t}");
            if by_id.contains_key(&t) {
                return Err(self.attr_err(
                    tb,
                    &tel,
                    "id",
                    format!("thread block {t} appears twice on gpu {id}"),
                ));
            }
            let peer = |attr: &str| -> R<Option<u32>> {
                let p = self.ranged(
                    tb,
                    &tel,
                    attr,
                    -1,
                    n as i64 - 1,
                    &format!("a peer is -1 (none) or a gpu in 0..{}", n - 1),
                )?;
                if p == i64::from(id) {
                    return Err(self.attr_err(
                        tb,
                        &tel,
                        attr,
                        format!("gpu {id} cannot be its own peer"),
                    ));
                }
                Ok(u32::try_from(p).ok())
            };
            let send = peer("send")?;
            let recv = peer("recv")?;
            let chan = self.ranged(
                tb,
                &tel,
                "chan",
                0,
                nchannels as i64 - 1,
                &format!("chan must be below nchannels = {nchannels}"),
            )? as u32;
            let mut steps = Vec::new();
            for (pos, st) in Self::children(tb, "step").enumerate() {
                steps.push(self.step(st, id, t, pos, send, recv, decl)?);
            }
            if steps.len() > MAX_STEPS {
                return Err(self.node_err(
                    tb,
                    &tel,
                    format!(
                        "{} steps; MSCCL's runtime holds at most {MAX_STEPS} per thread block",
                        steps.len()
                    ),
                ));
            }
            by_id.insert(
                t,
                RawBlock {
                    node: tb,
                    send,
                    recv,
                    chan,
                    steps,
                },
            );
        }
        let mut blocks = Vec::with_capacity(by_id.len());
        for (i, (t, b)) in by_id.into_iter().enumerate() {
            if t != i as u64 {
                return Err(self.attr_err(
                    b.node,
                    &format!("gpu {id} tb {t}"),
                    "id",
                    format!("thread block {i} is missing on gpu {id}: ids must be 0, 1, 2, ... without gaps"),
                ));
            }
            blocks.push(b);
        }
        Ok(blocks)
    }

    #[allow(clippy::too_many_arguments)]
    fn step(
        &self,
        st: Node<'a, 'i>,
        gpu: u32,
        tb: u64,
        pos: usize,
        send: Option<u32>,
        recv: Option<u32>,
        decl: &[u64; 3],
    ) -> R<RawStep<'a, 'i>> {
        let el = format!("gpu {gpu} tb {tb} step {pos}");
        let s = self.req_int(st, &el, "s")?;
        if s != pos as i64 {
            return Err(self.attr_err(
                st,
                &el,
                "s",
                format!(
                    "step {s} is at position {pos}: MSCCL's runtime numbers steps by position, so steps must be numbered 0, 1, 2, ... for dependencies to mean what they say"
                ),
            ));
        }
        let ty = self.req(st, &el, "type")?;
        let kind = match ty {
            "nop" => None,
            t => Some(OpKind::from_name(t).ok_or_else(|| {
                self.attr_err(
                    st,
                    &el,
                    "type",
                    format!("unknown step type `{t}` (s, r, rcs, rrs, rrc, rrcs, cpy, re, nop)"),
                )
            })?),
        };
        let buf = |attr: &str| -> R<u32> {
            match self.req(st, &el, attr)? {
                "i" => Ok(0),
                "o" => Ok(1),
                "s" => Ok(2),
                b => Err(self.attr_err(st, &el, attr, format!("unknown buffer `{b}` (i, o or s)"))),
            }
        };
        let srcbuf = buf("srcbuf")?;
        let dstbuf = buf("dstbuf")?;
        let srcoff = self.req_int(st, &el, "srcoff")?;
        let dstoff = self.req_int(st, &el, "dstoff")?;
        let cnt = self.req_int(st, &el, "cnt")?;
        let depid = self.req_int(st, &el, "depid")?;
        let deps = self.req_int(st, &el, "deps")?;
        let hasdep = self.req_flag(st, &el, "hasdep")?;
        let dep = match depid {
            -1 => None,
            d if d < -1 => {
                return Err(self.attr_err(
                    st,
                    &el,
                    "depid",
                    format!("{d} is neither -1 (none) nor a thread block"),
                ));
            }
            d if d as u64 > MAX_DEP_BLOCK => {
                return Err(self.attr_err(
                    st,
                    &el,
                    "depid",
                    format!("thread block {d}: MSCCL's runtime stores dependencies on blocks 0..{MAX_DEP_BLOCK}"),
                ));
            }
            d => {
                if deps < 0 {
                    return Err(self.attr_err(
                        st,
                        &el,
                        "deps",
                        format!("{deps} is not a step, but depid names thread block {d}"),
                    ));
                }
                Some((d as u64, deps as u64))
            }
        };
        if let Some(kind) = kind {
            if cnt < 1 || cnt as u64 >= MAX_COUNT {
                return Err(self.attr_err(
                    st,
                    &el,
                    "cnt",
                    format!(
                        "{cnt} chunks: a step moves 1 to {} chunks in MSCCL's runtime",
                        MAX_COUNT - 1
                    ),
                ));
            }
            if kind.sends() && send.is_none() {
                return Err(self.attr_err(
                    st,
                    &el,
                    "type",
                    format!("`{ty}` sends, but thread block {tb} has no send peer (send=\"-1\")"),
                ));
            }
            if kind.receives() && recv.is_none() {
                return Err(self.attr_err(
                    st,
                    &el,
                    "type",
                    format!(
                        "`{ty}` receives, but thread block {tb} has no recv peer (recv=\"-1\")"
                    ),
                ));
            }
            let names = ["i", "o", "s"];
            let sizes = ["i_chunks", "o_chunks", "s_chunks"];
            for (used, b, off, battr, oattr) in [
                (kind.needs_src(), srcbuf, srcoff, "srcbuf", "srcoff"),
                (kind.needs_dst(), dstbuf, dstoff, "dstbuf", "dstoff"),
            ] {
                if !used {
                    continue;
                }
                if off < 0 {
                    return Err(self.attr_err(
                        st,
                        &el,
                        oattr,
                        format!("offset {off}: `{ty}` uses `{battr}`, so it needs a chunk index"),
                    ));
                }
                let have = decl[b as usize];
                // In i128: an offset near 2^63 must neither overflow nor wrap inside.
                let end = i128::from(off) + i128::from(cnt);
                if end > i128::from(have) {
                    return Err(self.attr_err(
                        st,
                        &el,
                        oattr,
                        format!(
                            "chunks {off}..{end} are outside `{}`, which has {} on gpu {gpu} ({} = {have})",
                            names[b as usize],
                            count(have as usize, "chunk"),
                            sizes[b as usize]
                        ),
                    ));
                }
                if off as u64 > MAX_OFFSET {
                    return Err(self.attr_err(
                        st,
                        &el,
                        oattr,
                        format!("offset {off} does not fit MSCCL's 16-bit offsets"),
                    ));
                }
            }
        }
        Ok(RawStep {
            node: st,
            kind,
            src: (srcbuf, srcoff),
            dst: (dstbuf, dstoff),
            cnt,
            dep,
            hasdep,
        })
    }

    /// Folds nops, resolves dependencies and builds the rank's blocks.
    fn resolve(&self, gpu: u32, blocks: &[RawBlock], sources: &mut Vec<String>) -> R<RankPlan> {
        // Op index of each real step, per block.
        let op_of: Vec<Vec<Option<u32>>> = blocks
            .iter()
            .map(|b| {
                let mut next = 0u32;
                b.steps
                    .iter()
                    .map(|s| {
                        s.kind.map(|_| {
                            next += 1;
                            next - 1
                        })
                    })
                    .collect()
            })
            .collect();
        // The op whose completion satisfies a wait for step `s` of block `t`: the first real
        // step at or after `s` with hasdep = 1 (the runtime's flags).
        let signal = |t: usize, s: usize| -> Option<(usize, u32)> {
            (s..blocks[t].steps.len()).find_map(|j| {
                let st = &blocks[t].steps[j];
                if st.kind.is_some() && st.hasdep {
                    op_of[t][j].map(|o| (j, o))
                } else {
                    None
                }
            })
        };
        let mut out = Vec::with_capacity(blocks.len());
        for (t, b) in blocks.iter().enumerate() {
            let mut ops = Vec::new();
            let mut pending: Vec<(Node, (u64, u64))> = Vec::new();
            // (dst, src buffer, count, chain length) of a fusable `re` just before.
            let mut fusable: Option<((u32, i64), u32, i64, usize)> = None;
            for (j, st) in b.steps.iter().enumerate() {
                let el = format!("gpu {gpu} tb {t} step {j}");
                let Some(kind) = st.kind else {
                    let Some(dep) = st.dep else {
                        return Err(self.attr_err(
                            st.node,
                            &el,
                            "depid",
                            "a nop step without a dependency does nothing, and MSCCL's runtime then numbers the steps after it one lower than written".into(),
                        ));
                    };
                    pending.push((st.node, dep));
                    continue;
                };
                if !pending.is_empty() && st.dep.is_none() {
                    return Err(self.attr_err(
                        st.node,
                        &el,
                        "depid",
                        "this step follows nop steps but has no dependency of its own; MSCCL's runtime refuses such a chain".into(),
                    ));
                }
                // The runtime fuses consecutive `re` steps into the same destination and
                // runs them with the last one's count.
                if kind == OpKind::Reduce {
                    match fusable {
                        Some((dst, srcbuf, cnt, len))
                            if dst == st.dst && srcbuf == st.src.0 && st.dep.is_none() =>
                        {
                            if cnt != st.cnt {
                                return Err(self.attr_err(
                                    st.node,
                                    &el,
                                    "cnt",
                                    format!(
                                        "MSCCL's runtime fuses this re step with the one before (same destination and source buffer, no dependency) and runs both with cnt {}, but the one before has cnt {cnt}",
                                        st.cnt
                                    ),
                                ));
                            }
                            fusable = (!st.hasdep && len + 1 < MAX_REDUCE_FUSION).then_some((
                                dst,
                                srcbuf,
                                cnt,
                                len + 1,
                            ));
                        }
                        _ => {
                            fusable = (!st.hasdep).then_some((st.dst, st.src.0, st.cnt, 1));
                        }
                    }
                } else {
                    fusable = None;
                }
                let me = op_of[t][j].unwrap_or(0);
                let mut deps: BTreeMap<u32, u32> = BTreeMap::new();
                for (node, (dt, ds)) in pending.drain(..).chain(st.dep.map(|d| (st.node, d))) {
                    let del = if node == st.node {
                        el.clone()
                    } else {
                        let k = b.steps.iter().position(|x| x.node == node).unwrap_or(j);
                        format!("gpu {gpu} tb {t} step {k}")
                    };
                    let Some(target) = blocks.get(dt as usize) else {
                        return Err(self.attr_err(
                            node,
                            &del,
                            "depid",
                            format!(
                                "gpu {gpu} has no thread block {dt} (it has {})",
                                count(blocks.len(), "thread block")
                            ),
                        ));
                    };
                    if ds as usize >= target.steps.len() {
                        return Err(self.attr_err(
                            node,
                            &del,
                            "deps",
                            format!(
                                "thread block {dt} of gpu {gpu} has no step {ds} (it has {})",
                                count(target.steps.len(), "step")
                            ),
                        ));
                    }
                    let Some((sj, op)) = signal(dt as usize, ds as usize) else {
                        return Err(self.attr_err(
                            node,
                            &del,
                            "deps",
                            format!(
                                "waits for step {ds} of thread block {dt}, but no step of that block at or after {ds} has hasdep=\"1\": MSCCL's runtime would wait forever"
                            ),
                        ));
                    };
                    if dt as usize == t {
                        if op < me {
                            // Program order already guarantees it.
                            continue;
                        }
                        return Err(self.attr_err(
                            node,
                            &del,
                            "deps",
                            format!("waits for step {sj} of its own thread block, which cannot run before it: MSCCL's runtime would wait forever"),
                        ));
                    }
                    let e = deps.entry(dt as u32).or_insert(op);
                    *e = (*e).max(op);
                }
                let p = self.doc.text_pos_at(st.node.range().start);
                sources.push(format!(
                    "{}:{}:{}: gpu {gpu} tb {t} step {j}",
                    self.file, p.row, p.col
                ));
                let slice = |(b, off): (u32, i64)| Slice(b, off.max(0) as u64);
                ops.push(Op {
                    kind,
                    src: kind.needs_src().then(|| slice(st.src)),
                    dst: kind.needs_dst().then(|| slice(st.dst)),
                    count: st.cnt as u32,
                    deps: deps.into_iter().map(|(b, o)| Dep(b, o)).collect(),
                    source: (sources.len() - 1) as u32,
                    group: None,
                });
            }
            // Trailing nops wait for nothing: the runtime drops them too.
            out.push(Block {
                id: t as u32,
                channel: b.chan,
                send_peer: b.send,
                recv_peer: b.recv,
                send_via: b.send.map(|_| Via::Switch),
                recv_via: b.recv.map(|_| Via::Switch),
                protocol: None,
                send_also: Vec::new(),
                recv_also: Vec::new(),
                ops,
            });
        }
        Ok(RankPlan {
            rank: gpu,
            blocks: out,
        })
    }
}
