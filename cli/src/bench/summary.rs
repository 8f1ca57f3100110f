//! `coll bench --summary FILE.jsonl`: per machine, the latest commit's figures of every case
//! in a record file ([`super::record`]) and whether each of its targets holds
//! ([`super::target`]), as Markdown.
//!
//! Which figures count: per machine, the commit of its most recent line; per case, that
//! commit's most recent run (its lines share a date). Cases of one group are judged together,
//! the fastest case (out of place and in place apart) counting at each size. Cases and
//! machines appear in the order the file first names them.

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

/// The latest run per case of the latest commit of `machine`'s records.
fn latest<'a>(records: &'a [Record], machine: &str) -> Vec<&'a Record> {
    let mine: Vec<&Record> = records
        .iter()
        .filter(|r| r.machine.name == machine)
        .collect();
    let Some(newest) = mine.iter().max_by(|a, b| a.date.cmp(&b.date)) else {
        return Vec::new();
    };
    let commit = &newest.commit;
    let of_commit: Vec<&Record> = mine
        .iter()
        .copied()
        .filter(|r| &r.commit == commit)
        .collect();
    of_commit
        .iter()
        .copied()
        .filter(|r| {
            let last = of_commit
                .iter()
                .filter(|o| o.case == r.case)
                .map(|o| o.date.as_str())
                .max()
                .unwrap_or_default();
            r.date == last
        })
        .collect()
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

/// The Markdown summary of `records`.
pub fn summary(records: &[Record]) -> String {
    let mut s = String::new();
    let machines = firsts(records.iter(), |r| r.machine.name.clone());
    for machine in machines {
        let rows = latest(records, &machine);
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
            let label = if cases.len() > 1 {
                format!("{g} (fastest of {})", cases.join(", "))
            } else {
                g.clone()
            };
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
    /// Runs `coll bench --summary FILE`: prints [`summary`] of the file.
    pub fn bench_summary(&mut self, path: &Path) -> u8 {
        match record::read(path) {
            Ok(records) if records.is_empty() => {
                let _ = writeln!(self.err, "error: {}: no records", path.display());
                EXIT_FAILURE
            }
            Ok(records) => {
                let _ = write!(self.out, "{}", summary(&records));
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
        let text = summary(&records);
        assert!(
            text.contains("| allgather | ratio >= 1.1 for 32M..1G | 32 MiB 1.05 (1.05) | **no** |"),
            "{text}"
        );
        // Zero-CTA, slower here, changes nothing; without the symmetric figure it holds.
        let records = lines_of(CASE, &[(Default, 20.0), (ZeroCta, 25.0)]);
        let text = summary(&records);
        assert!(
            text.contains("| allgather | ratio >= 1.1 for 32M..1G | 32 MiB 2.00 (1.91) | yes |"),
            "{text}"
        );
    }
}
