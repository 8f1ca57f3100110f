//! NCCL-best per size and the nccl-tests table of `coll bench`.
//!
//! NCCL-best, per size and placement, is the fastest of NCCL's configurations that ran
//! ([`NcclConfig`]: default, symmetric windows, zero-CTA); every ratio the table prints, the
//! record keeps and `--summary` judges is NCCL-best's time over coll's (above 1: coll is
//! faster).
//!
//! The table's first nineteen columns keep their places (scripts under `bench/` read them by
//! position): size, count, type, redop, root, coll's time, algbw, busbw and #wrong out of
//! place and in place, NCCL-best's time and busbw out of place and in place, and the two
//! ratios. NCCL's raw columns follow: each configuration's time out of place, then in place
//! (zero-CTA only where it ran), then which configuration was best.

use super::nccl::NcclConfig;
use super::record::Placement;
use super::sweep::{BenchReport, Row, Timing};
use coll_executor::cuda::Protocol;
use coll_executor::cuda::direct::CallDirect;
use coll_executor::dtype::{DType, ReduceOp};
use coll_lang::builtins::CollectiveKind;

impl Row {
    /// A row of coll's figures alone; NCCL's are filled in by their passes.
    pub fn new(size: u64, count: u64, out_of_place: Timing, in_place: Timing) -> Row {
        Row {
            size,
            count,
            protocol: Protocol::Bulk,
            direct_out: CallDirect::Off,
            direct_in: CallDirect::Off,
            ce_out: false,
            ce_in: false,
            oneshot: false,
            out_of_place,
            in_place,
            nccl_out_of_place: None,
            nccl_in_place: None,
            nccl_symmetric_out_of_place: None,
            nccl_symmetric_in_place: None,
            nccl_zero_cta_out_of_place: None,
            nccl_zero_cta_in_place: None,
        }
    }

    /// coll's figures of `place`.
    pub fn coll(&self, place: Placement) -> &Timing {
        match place {
            Placement::OutOfPlace => &self.out_of_place,
            Placement::InPlace => &self.in_place,
        }
    }

    /// NCCL's figures of `config` and `place`, where that ran.
    pub fn nccl(&self, config: NcclConfig, place: Placement) -> Option<&Timing> {
        use {NcclConfig as C, Placement as P};
        match (config, place) {
            (C::Default, P::OutOfPlace) => self.nccl_out_of_place.as_ref(),
            (C::Default, P::InPlace) => self.nccl_in_place.as_ref(),
            (C::Symmetric, P::OutOfPlace) => self.nccl_symmetric_out_of_place.as_ref(),
            (C::Symmetric, P::InPlace) => self.nccl_symmetric_in_place.as_ref(),
            (C::ZeroCta, P::OutOfPlace) => self.nccl_zero_cta_out_of_place.as_ref(),
            (C::ZeroCta, P::InPlace) => self.nccl_zero_cta_in_place.as_ref(),
        }
    }

    /// The slot of [`nccl`](Self::nccl).
    pub fn nccl_mut(&mut self, config: NcclConfig, place: Placement) -> &mut Option<Timing> {
        use {NcclConfig as C, Placement as P};
        match (config, place) {
            (C::Default, P::OutOfPlace) => &mut self.nccl_out_of_place,
            (C::Default, P::InPlace) => &mut self.nccl_in_place,
            (C::Symmetric, P::OutOfPlace) => &mut self.nccl_symmetric_out_of_place,
            (C::Symmetric, P::InPlace) => &mut self.nccl_symmetric_in_place,
            (C::ZeroCta, P::OutOfPlace) => &mut self.nccl_zero_cta_out_of_place,
            (C::ZeroCta, P::InPlace) => &mut self.nccl_zero_cta_in_place,
        }
    }

    /// NCCL-best of `place`: the fastest configuration that ran (the first of
    /// [`NcclConfig::ALL`] on a tie), None when NCCL did not run.
    pub fn nccl_best(&self, place: Placement) -> Option<(NcclConfig, &Timing)> {
        NcclConfig::ALL
            .into_iter()
            .filter_map(|c| self.nccl(c, place).map(|t| (c, t)))
            .fold(
                None,
                |best: Option<(NcclConfig, &Timing)>, (c, t)| match best {
                    Some((_, b)) if b.time_us <= t.time_us => best,
                    _ => Some((c, t)),
                },
            )
    }
}

/// NCCL-best's time over coll's for `place` (None: NCCL did not run).
pub fn ratio(row: &Row, place: Placement) -> Option<f64> {
    row.nccl_best(place)
        .map(|(_, t)| t.time_us / row.coll(place).time_us.max(1e-9))
}

/// The configurations that ran at any size of `r`, in [`NcclConfig::ALL`]'s order.
fn configs_run(r: &BenchReport) -> Vec<NcclConfig> {
    NcclConfig::ALL
        .into_iter()
        .filter(|&c| {
            r.rows.iter().any(|x| {
                x.nccl(c, Placement::OutOfPlace).is_some()
                    || x.nccl(c, Placement::InPlace).is_some()
            })
        })
        .collect()
}

/// The nccl-tests table as the module docs describe it.
pub fn table(
    kind: CollectiveKind,
    dtype: DType,
    op: ReduceOp,
    root: u32,
    r: &BenchReport,
) -> String {
    let configs = configs_run(r);
    let nccl = !configs.is_empty();
    let mut s = String::new();
    s.push_str("|           |           |      |       |      | out-of-place                                     | in-place                                         |");
    if nccl {
        s.push_str(" NCCL-best out-of-place  | NCCL-best in-place      | NCCL-best / coll time |");
        for p in ["oop (us)", "ip (us)"] {
            for _ in &configs {
                s.push_str(&format!(" NCCL {p:<5} |"));
            }
        }
        s.push_str(" NCCL-best, out / in |");
    }
    s.push('\n');
    s.push_str("|      size |     count | type | redop | root |  time (us) | algbw (GB/s) | busbw (GB/s) | #wrong |  time (us) | algbw (GB/s) | busbw (GB/s) | #wrong |");
    if nccl {
        s.push_str(
            "  time (us) | busbw (GB/s) |  time (us) | busbw (GB/s) | out-of-place | in-place |",
        );
        for _ in 0..2 {
            for c in &configs {
                s.push_str(&format!(" {:>10} |", c.name()));
            }
        }
        s.push_str(" configuration       |");
    }
    s.push('\n');
    s.push_str("|----------:|----------:|------|-------|-----:|-----------:|-------------:|-------------:|-------:|-----------:|-------------:|-------------:|-------:|");
    if nccl {
        s.push_str(
            "-----------:|-------------:|-----------:|-------------:|-------------:|---------:|",
        );
        s.push_str(&"-----------:|".repeat(2 * configs.len()));
        s.push_str("---------------------|");
    }
    s.push('\n');
    let root = if matches!(kind, CollectiveKind::Broadcast | CollectiveKind::Reduce) {
        root.to_string()
    } else {
        "-1".into()
    };
    let cols = |t: &Timing| {
        format!(
            " {:>10.2} | {:>12.2} | {:>12.2} | {:>6} |",
            t.time_us,
            t.algbw,
            t.busbw,
            t.wrong.map_or("n/a".into(), |w| w.to_string())
        )
    };
    let (oop, ip) = (Placement::OutOfPlace, Placement::InPlace);
    for x in &r.rows {
        s.push_str(&format!(
            "| {:>9} | {:>9} | {:<4} | {:<5} | {:>4} |",
            x.size,
            x.count,
            dtype.name(),
            op.name(),
            root,
        ));
        s.push_str(&cols(&x.out_of_place));
        s.push_str(&cols(&x.in_place));
        if nccl {
            match (x.nccl_best(oop), x.nccl_best(ip), ratio(x, oop), ratio(x, ip)) {
                (Some((_, a)), Some((_, b)), Some(ra), Some(rb)) => s.push_str(&format!(
                    " {:>10.2} | {:>12.2} | {:>10.2} | {:>12.2} | {ra:>12.2} | {rb:>8.2} |",
                    a.time_us, a.busbw, b.time_us, b.busbw,
                )),
                _ => s.push_str("          - |            - |          - |            - |            - |        - |"),
            }
            for p in [oop, ip] {
                for &c in &configs {
                    match x.nccl(c, p) {
                        Some(t) => s.push_str(&format!(" {:>10.2} |", t.time_us)),
                        None => s.push_str("          - |"),
                    }
                }
            }
            let name = |p| x.nccl_best(p).map_or("-", |(c, _)| c.name());
            s.push_str(&format!(
                " {:<19} |",
                format!("{} / {}", name(oop), name(ip))
            ));
        }
        s.push('\n');
    }
    s
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A timing of `time_us` (bandwidths as if of 1 MB).
    pub(crate) fn t(time_us: f64) -> Timing {
        Timing {
            time_us,
            algbw: 1.0 / time_us * 1e6 / 1e9 * 1e3,
            busbw: 2.0 / time_us * 1e3,
            wrong: Some(0),
            host_us: None,
            host_split_us: None,
        }
    }

    /// A row of coll `coll` µs both ways and NCCL's configurations as given, out of place
    /// (in place: the same plus 1 µs).
    pub(crate) fn row(size: u64, coll: f64, nccl: &[(NcclConfig, f64)]) -> Row {
        let mut x = Row::new(size, size / 4, t(coll), t(coll + 1.0));
        for &(c, us) in nccl {
            *x.nccl_mut(c, Placement::OutOfPlace) = Some(t(us));
            *x.nccl_mut(c, Placement::InPlace) = Some(t(us + 1.0));
        }
        x
    }

    #[test]
    fn nccl_best_is_the_fastest_configuration_that_ran() {
        use NcclConfig::*;
        let x = row(
            1024,
            10.0,
            &[(Default, 20.0), (Symmetric, 15.0), (ZeroCta, 16.0)],
        );
        let (c, best) = x.nccl_best(Placement::OutOfPlace).expect("ran");
        assert_eq!((c, best.time_us), (Symmetric, 15.0));
        assert_eq!(ratio(&x, Placement::OutOfPlace), Some(1.5));
        // In place: 16 / 11.
        let r = ratio(&x, Placement::InPlace).expect("ran");
        assert!((r - 16.0 / 11.0).abs() < 1e-12, "{r}");
        // A tie keeps the earlier configuration; nothing run, nothing best.
        let x = row(1024, 10.0, &[(Default, 20.0), (Symmetric, 20.0)]);
        assert_eq!(
            x.nccl_best(Placement::OutOfPlace).map(|b| b.0),
            Some(Default)
        );
        let x = row(1024, 10.0, &[]);
        assert_eq!(x.nccl_best(Placement::InPlace).map(|b| b.0), None);
        assert_eq!(ratio(&x, Placement::InPlace), None);
        // Zero-CTA alone (say the others failed) is best by default.
        let x = row(1024, 10.0, &[(ZeroCta, 30.0)]);
        assert_eq!(
            x.nccl_best(Placement::OutOfPlace).map(|b| b.0),
            Some(ZeroCta)
        );
    }

    /// A sweep of `rows` with made-up setup figures.
    pub(crate) fn report(rows: Vec<Row>) -> BenchReport {
        BenchReport {
            rows,
            mode: "eager".into(),
            graph_launches: None,
            calls_per_graph: None,
            compile_ms: 0.0,
            load_ms: 250.0,
            first_call_ms: 0.25,
            second_call_ms: 0.125,
            graph_capture_ms: None,
            graph_first_launch_ms: None,
            graph_second_launch_ms: None,
            allocated_bytes: vec![150 << 20, 150 << 20],
            reported_bytes: vec![149 << 20, 149 << 20],
            module_bytes: vec![0, 0],
            ll_max: 0,
            direct: Default::default(),
            launch_threads: 1,
            alias_safe: true,
            nccl_version: Some("2.28.3".into()),
            nccl_init_ms: Some(450.0),
            nccl_first_call_ms: Some(1.5),
            nccl_bytes: Some(vec![900 << 20, 900 << 20]),
            nccl_notes: Vec::new(),
            store_ceiling_gbs: Some(363.0),
            one_way: None,
            launch_floor_us: Some(6.0),
            ceiling_error: None,
            trace_json: None,
        }
    }

    #[test]
    fn the_table_keeps_its_columns_and_adds_nccls_raw_ones() {
        use NcclConfig::*;
        let r = report(vec![
            row(
                1 << 20,
                10.0,
                &[(Default, 20.0), (Symmetric, 15.0), (ZeroCta, 12.0)],
            ),
            row(2 << 20, 20.0, &[(Default, 30.0), (Symmetric, 35.0)]),
        ]);
        let text = table(CollectiveKind::AllGather, DType::F32, ReduceOp::Sum, 0, &r);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 5, "{text}");
        assert!(
            lines[0].contains("NCCL-best out-of-place")
                && lines[0].contains("NCCL oop (us) | NCCL oop (us)"),
            "{}",
            lines[0]
        );
        let heads: Vec<&str> = lines[1].split('|').map(str::trim).collect();
        assert_eq!(
            &heads[20..28],
            [
                "default",
                "symmetric",
                "zero-cta",
                "default",
                "symmetric",
                "zero-cta",
                "configuration",
                ""
            ]
        );
        let cells =
            |l: &str| -> Vec<String> { l.split('|').map(|c| c.trim().to_string()).collect() };
        let a = cells(lines[3]);
        // Columns 14..19 (1-based after the leading `|`): NCCL-best's time and busbw out of
        // place and in place, then the ratios against NCCL-best.
        assert_eq!(&a[1..6], ["1048576", "262144", "f32", "sum", "-1"]);
        assert_eq!(
            &a[14..20],
            ["12.00", "166.67", "13.00", "153.85", "1.20", "1.18"]
        );
        assert_eq!(
            &a[20..27],
            [
                "20.00",
                "15.00",
                "12.00",
                "21.00",
                "16.00",
                "13.00",
                "zero-cta / zero-cta"
            ]
        );
        let b = cells(lines[4]);
        assert_eq!(
            &b[14..20],
            ["30.00", "66.67", "31.00", "64.52", "1.50", "1.48"]
        );
        assert_eq!(
            &b[20..27],
            [
                "30.00",
                "35.00",
                "-",
                "31.00",
                "36.00",
                "-",
                "default / default"
            ]
        );
        // Every line below the group labels has as many cells.
        assert!(
            lines[1..].iter().all(|l| l.matches('|').count() == 27),
            "{text}"
        );
        // Without NCCL: the nineteen columns' first thirteen only.
        let r = report(vec![row(8, 5.0, &[])]);
        let text = table(CollectiveKind::AllReduce, DType::F32, ReduceOp::Sum, 0, &r);
        assert!(
            text.lines().skip(1).all(|l| l.matches('|').count() == 14),
            "{text}"
        );
        assert!(!text.contains("NCCL"), "{text}");
    }
}
