//! `coll bench --summary FILE.jsonl`: per machine, the latest commit's figures of every case
//! in a record file ([`super::record`]) and whether each of its targets holds
//! ([`super::target`]), as Markdown.
//!
//! Which figures count: per machine, the commit of its most recent line; per case, that
//! commit's most recent run (a run's lines share a date). With `--medians`, a case run
//! several times (each its own process, as NCCL's eager time swings from one process to the
//! next) counts as the median of its runs per size and placement instead: coll's time and
//! NCCL-best's apart, the ratio of the two medians, the setup figures of its latest run, and
//! any wrong element of any run. Cases of one group are judged together, the fastest case
//! (out of place and in place apart) counting at each size. Cases and machines appear in the
//! order the file first names them.

use super::record::{self, Placement, Record};
use super::target::{Holds, Target};
use crate::output::Ctx;
use crate::{EXIT_FAILURE, EXIT_OK};
use std::path::Path;

/// `items` in first-seen order of `key`, without repeats.
fn firsts<'a, T, K: PartialEq>(items: impl Iterator<Item = &'a T>, key: impl Fn(&T) -> K) -> Vec<K>
where
    T: 'a,
{
    let mut v: Vec<K> = Vec::new();
    for i in items {
        let k = key(i);
        if !v.contains(&k) {
            v.push(k);
        }
    }
    v
}

/// The median of `v` (the mean of the middle two for an even count); None when empty.
fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// The latest run per case of the latest commit of `machine`'s records or (`medians`) every
/// run of it, a case run several times folded into one line per size and placement (the
/// module docs), in file order; with each line, how many runs it stands for.
fn latest(records: &[Record], machine: &str, medians: bool) -> Vec<(Record, usize)> {
    let mine: Vec<&Record> = records
        .iter()
        .filter(|r| r.machine.name == machine)
        .collect();
    let Some(newest) = mine.iter().max_by(|a, b| a.date.cmp(&b.date)) else {
        return Vec::new();
    };
    let mut of_commit: Vec<&Record> = mine
        .iter()
        .copied()
        .filter(|r| r.commit == newest.commit)
        .collect();
    if !medians {
        // Each case's latest run only, whole (an earlier run's other sizes drop out too).
        let last_of = |case: &str| {
            (of_commit.iter())
                .filter(|o| o.case == case)
                .map(|o| o.date.clone())
                .max()
                .unwrap_or_default()
        };
        of_commit = (of_commit.iter().copied())
            .filter(|r| r.date == last_of(&r.case))
            .collect();
    }
    let mut out: Vec<(Record, usize)> = Vec::new();
    for (i, r) in of_commit.iter().enumerate() {
        let same =
            |o: &&&Record| o.case == r.case && o.size == r.size && o.placement == r.placement;
        // Each (case, size, placement) once, where it first appears.
        if of_commit[..i].iter().any(|o| same(&o)) {
            continue;
        }
        let runs: Vec<&Record> = of_commit.iter().filter(same).copied().collect();
        let Some(last) = runs.iter().copied().max_by(|a, b| a.date.cmp(&b.date)) else {
            continue;
        };
        let mut m = last.clone();
        if runs.len() > 1 {
            let of =
                |f: fn(&Record) -> Option<f64>| median(runs.iter().filter_map(|r| f(r)).collect());
            m.time_us = of(|r| Some(r.time_us)).unwrap_or(m.time_us);
            m.algbw = of(|r| Some(r.algbw)).unwrap_or(m.algbw);
            m.busbw = of(|r| Some(r.busbw)).unwrap_or(m.busbw);
            m.nccl_time_us = of(|r| r.nccl_time_us);
            m.nccl_algbw = of(|r| r.nccl_algbw);
            m.nccl_busbw = of(|r| r.nccl_busbw);
            m.ratio = m.nccl_time_us.map(|t| t / m.time_us);
            m.wrong = runs.iter().filter_map(|r| r.wrong).max();
        }
        out.push((m, runs.len()));
    }
    out
}

/// Per (size, placement), the fastest of `records`.
fn fastest<'a>(records: &[&'a Record]) -> Vec<&'a Record> {
    let mut best: Vec<&Record> = Vec::new();
    for &r in records {
        match best
            .iter_mut()
            .find(|b| b.size == r.size && b.placement == r.placement)
        {
            Some(b) if r.time_us < b.time_us => *b = r,
            Some(_) => {}
            None => best.push(r),
        }
    }
    best.sort_by_key(|r| (r.size, r.placement == Placement::InPlace));
    best
}

/// `lo–hi` of `values` with `digits` decimals (`–` when empty).
fn span(values: impl Iterator<Item = f64>, digits: usize) -> String {
    let v: Vec<f64> = values.collect();
    let (lo, hi) = v
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &x| {
            (l.min(x), h.max(x))
        });
    if v.is_empty() {
        "–".into()
    } else if format!("{lo:.digits$}") == format!("{hi:.digits$}") {
        format!("{lo:.digits$}")
    } else {
        format!("{lo:.digits$}–{hi:.digits$}")
    }
}

/// The Markdown summary of `records`; `medians`: cases run several times count as their
/// medians (the module docs).
pub fn summary(records: &[Record], medians: bool) -> String {
    let mut s = String::new();
    let machines = firsts(records.iter(), |r| r.machine.name.clone());
    for machine in machines {
        let lines = latest(records, &machine, medians);
        let rows: Vec<&Record> = lines.iter().map(|(r, _)| r).collect();
        let Some(newest) = rows.iter().max_by(|a, b| a.date.cmp(&b.date)) else {
            continue;
        };
        s.push_str(&format!(
            "## {}: commit {}, {}\n\n| case | target | measured | holds |\n|---|---|---|---|\n",
            newest.machine.describe(),
            newest.commit,
            newest.date
        ));
        let groups = firsts(rows.iter().copied(), |r| {
            r.group.clone().unwrap_or_else(|| r.case.clone())
        });
        let (mut held, mut judged) = (0, 0);
        for g in &groups {
            let members: Vec<&Record> = rows
                .iter()
                .copied()
                .filter(|r| r.group.as_ref().unwrap_or(&r.case) == g)
                .collect();
            let cases = firsts(members.iter().copied(), |r| r.case.clone());
            let best = fastest(&members);
            let targets = firsts(members.iter().flat_map(|r| r.targets.iter()), String::clone);
            let mut label = if cases.len() > 1 {
                format!("{g} (fastest of {})", cases.join(", "))
            } else {
                g.clone()
            };
            let runs = (lines.iter())
                .filter(|(r, _)| r.group.as_ref().unwrap_or(&r.case) == g)
                .map(|&(_, n)| n)
                .max()
                .unwrap_or(1);
            if runs > 1 {
                label.push_str(&format!(", median of {runs} runs"));
            }
            if targets.is_empty() {
                let mut measured = format!("busbw {} GB/s", span(best.iter().map(|r| r.busbw), 1));
                if best.iter().any(|r| r.ratio.is_some()) {
                    measured.push_str(&format!(
                        ", ratio {}",
                        span(best.iter().filter_map(|r| r.ratio), 2)
                    ));
                }
                s.push_str(&format!("| {label} | – | {measured} | – |\n"));
            }
            for t in &targets {
                judged += 1;
                let (measured, holds) = match t.parse::<Target>() {
                    Ok(target) => {
                        let v = target.judge(&best, cases.len() > 1);
                        (v.measured, v.holds.to_string())
                    }
                    Err(e) => ("–".to_string(), format!("**{e}**")),
                };
                if holds == Holds::Yes.to_string() {
                    held += 1;
                }
                s.push_str(&format!("| {label} | {t} | {measured} | {holds} |\n"));
            }
        }
        let wrong: u64 = rows.iter().filter_map(|r| r.wrong).sum();
        let bad: Vec<String> = firsts(
            rows.iter()
                .copied()
                .filter(|r| r.wrong.is_some_and(|w| w > 0)),
            |r| r.case.clone(),
        );
        let cases = firsts(rows.iter().copied(), |r| r.case.clone()).len();
        s.push_str(&format!(
            "\n{cases} case{}, {held} of {judged} targets hold; #wrong {wrong} over every checked size{}\n\n",
            if cases == 1 { "" } else { "s" },
            if bad.is_empty() {
                String::new()
            } else {
                format!(" (wrong in {})", bad.join(", "))
            }
        ));
    }
    s
}

impl Ctx<'_> {
    /// Runs `coll bench --summary FILE [--medians]`: prints [`summary`] of the file.
    pub fn bench_summary(&mut self, path: &Path, medians: bool) -> u8 {
        match record::read(path) {
            Ok(records) if records.is_empty() => {
                let _ = writeln!(self.err, "error: {}: no records", path.display());
                EXIT_FAILURE
            }
            Ok(records) => {
                let _ = write!(self.out, "{}", summary(&records, medians));
                EXIT_OK
            }
            Err(e) => {
                let _ = writeln!(self.err, "error: {e}");
                EXIT_FAILURE
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::nccl::NcclConfig::*;
    use super::super::record::tests::{CASE, lines_of};
    use super::*;

    #[test]
    fn targets_are_judged_against_nccl_best() {
        // coll 10 µs; NCCL's default 20 µs would make it 2×, but symmetric windows take
        // 10.5 µs: 1.05× out of place, short of 1.1.
        let records = lines_of(CASE, &[(Default, 20.0), (Symmetric, 10.5)]);
        let text = summary(&records, false);
        assert!(
            text.contains("| allgather | ratio >= 1.1 for 32M..1G | 32 MiB 1.05 (1.05) | **no** |"),
            "{text}"
        );
        // Zero-CTA, slower here, changes nothing; without the symmetric figure it holds.
        let records = lines_of(CASE, &[(Default, 20.0), (ZeroCta, 25.0)]);
        let text = summary(&records, false);
        assert!(
            text.contains("| allgather | ratio >= 1.1 for 32M..1G | 32 MiB 2.00 (1.91) | yes |"),
            "{text}"
        );
    }

    #[test]
    fn with_medians_a_case_run_several_times_counts_as_its_median() {
        // coll 10 µs each run; NCCL-best 9, 12 and 11.5 µs in three processes. The latest
        // run alone would be 0.90x; the medians (11.5 over 10) make 1.15x.
        let mut records = Vec::new();
        for (t, date) in [(12.0, "10:00"), (11.5, "10:01"), (9.0, "10:02")] {
            for mut r in lines_of(CASE, &[(Default, t)]) {
                r.date = format!("2026-11-24T{date}:00Z");
                records.push(r);
            }
        }
        let text = summary(&records, true);
        assert!(
            text.contains(
                "| allgather, median of 3 runs | ratio >= 1.1 for 32M..1G | 32 MiB 1.15 (1.14) | yes |"
            ),
            "{text}"
        );
        // Without --medians, or run once, the latest run counts.
        let once: Vec<Record> = records.iter().skip(4).cloned().collect();
        let text = summary(&once, true);
        assert_eq!(summary(&records, false), text);
        assert!(
            text.contains("| allgather | ratio >= 1.1 for 32M..1G | 32 MiB 0.90 (0.91) | **no** |"),
            "{text}"
        );
        assert_eq!(median(vec![3.0, 1.0, 2.0, 10.0]), Some(2.5));
        assert_eq!(median(Vec::new()), None);
    }
}
