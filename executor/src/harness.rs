//! Runs a plan on generated data and checks every element against the reference: what
//! `coll run` and the numeric tests do.

use crate::cpu::{CpuExecutor, RunOptions};
use crate::dtype::{DType, Element};
use crate::error::ExecError;
use crate::net::mesh::{Mesh, Placement};
use crate::reference::{check_ranks, fill, in_place_layout};
use half::{bf16, f16};
use std::time::{Duration, Instant};

/// The outcome of one checked run.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    pub elapsed: Duration,
    /// Elements that differ from the reference (nccl-tests' `#wrong`); `None` when the
    /// collective has no reference (custom).
    pub wrong: Option<u64>,
    /// Elements checked.
    pub checked: u64,
}

impl Report {
    /// 24 bytes: wrong (`u64::MAX` for none), checked, elapsed in ns; for gathering the
    /// reports of a multi-process run at process 0.
    pub fn to_bytes(&self) -> Vec<u8> {
        [
            self.wrong.unwrap_or(u64::MAX),
            self.checked,
            self.elapsed.as_nanos() as u64,
        ]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect()
    }

    pub fn from_bytes(b: &[u8]) -> Option<Report> {
        let word = |i: usize| -> Option<u64> {
            Some(u64::from_le_bytes(
                b.get(i * 8..i * 8 + 8)?.try_into().ok()?,
            ))
        };
        let wrong = word(0)?;
        Some(Report {
            wrong: (wrong != u64::MAX).then_some(wrong),
            checked: word(1)?,
            elapsed: Duration::from_nanos(word(2)?),
        })
    }

    /// The reports of every process as one: wrong and checked add up, the time is the
    /// slowest process's.
    pub fn combine(parts: &[Report]) -> Report {
        Report {
            elapsed: parts.iter().map(|r| r.elapsed).max().unwrap_or_default(),
            wrong: parts
                .iter()
                .try_fold(0u64, |acc, r| r.wrong.map(|w| acc + w)),
            checked: parts.iter().map(|r| r.checked).sum(),
        }
    }
}

/// Fills inputs, runs (in place when asked) and counts wrong elements.
pub fn run_checked(
    exec: &CpuExecutor,
    dtype: DType,
    o: &RunOptions,
    inplace: bool,
) -> Result<Report, ExecError> {
    dispatch(exec, None, dtype, o, inplace, 0).map(|(r, _)| r)
}

/// [`run_checked`] for this process's share of a multi-process run: fills and checks only
/// the ranks this process runs; the report covers those ranks.
pub fn run_checked_part(
    exec: &CpuExecutor,
    mesh: &mut Mesh,
    dtype: DType,
    o: &RunOptions,
    inplace: bool,
) -> Result<Report, ExecError> {
    dispatch(exec, Some(mesh), dtype, o, inplace, 0).map(|(r, _)| r)
}

/// [`run_checked_part`], then `again` more calls on the same data, timed but not checked
/// (each checked call fills and computes the reference for every rank, which would swamp a
/// timing); returns the checked call's report and the mean time of the others.
pub fn run_checked_part_again(
    exec: &CpuExecutor,
    mesh: &mut Mesh,
    dtype: DType,
    o: &RunOptions,
    inplace: bool,
    again: u32,
) -> Result<(Report, Option<Duration>), ExecError> {
    dispatch(exec, Some(mesh), dtype, o, inplace, again)
}

fn dispatch(
    exec: &CpuExecutor,
    mesh: Option<&mut Mesh>,
    dtype: DType,
    o: &RunOptions,
    inplace: bool,
    again: u32,
) -> Result<(Report, Option<Duration>), ExecError> {
    match dtype {
        DType::F32 => typed::<f32>(exec, mesh, o, inplace, again),
        DType::F64 => typed::<f64>(exec, mesh, o, inplace, again),
        DType::F16 => typed::<f16>(exec, mesh, o, inplace, again),
        DType::Bf16 => typed::<bf16>(exec, mesh, o, inplace, again),
        DType::I32 => typed::<i32>(exec, mesh, o, inplace, again),
        DType::I64 => typed::<i64>(exec, mesh, o, inplace, again),
        DType::U8 => typed::<u8>(exec, mesh, o, inplace, again),
    }
}

fn typed<T: Element>(
    exec: &CpuExecutor,
    mut mesh: Option<&mut Mesh>,
    o: &RunOptions,
    inplace: bool,
    again: u32,
) -> Result<(Report, Option<Duration>), ExecError> {
    let plan = exec.plan();
    let n = plan.ranks;
    let kind = plan.collective.0;
    let place = match &mesh {
        None => None,
        Some(m) => Some(Placement::new(n, m.procs()).ok_or(ExecError::Procs {
            procs: m.procs(),
            ranks: n,
        })?),
    };
    let mine = match (&mesh, &place) {
        (Some(m), Some(p)) => p.ranks_of(m.me()),
        _ => 0..n,
    };
    let first = mine.start as usize;
    let (in_elems, out_elems) = exec.sizes(o.count);
    // Every rank's input: the reference needs them all, even for one process's share.
    let inputs: Vec<Vec<T>> = (0..n).map(|r| fill(o.op, n, r, in_elems)).collect();
    let local = &inputs[mine.start as usize..mine.end as usize];
    let mut steady = None;
    let layout = |r: usize| in_place_layout(kind, r as u32, o.count, in_elems, out_elems);
    let mut bufs: Vec<Vec<T>> = if inplace {
        local
            .iter()
            .enumerate()
            .map(|(i, input)| {
                let lay = layout(first + i);
                let mut b = vec![T::zero(); lay.len as usize];
                let at = lay.input_at as usize;
                if let Some(dst) = b.get_mut(at..at + input.len()) {
                    dst.copy_from_slice(input);
                }
                b
            })
            .collect()
    } else {
        Vec::new()
    };
    let initial = (inplace && again > 0).then(|| bufs.clone());
    // Processes start each timed stretch together: filling inputs and computing the
    // reference take each process a different time, which is not the collective's.
    let together = |mesh: &mut Option<&mut Mesh>| -> Result<(), ExecError> {
        match mesh.as_deref_mut() {
            Some(m) => m
                .barrier(&[], o.timeout)
                .map(|_| ())
                .map_err(|f| ExecError::Peer {
                    at: format!("process {}", m.me()),
                    waiting: "waiting for the others to start a call".into(),
                    reason: f.describe(place.as_ref()),
                }),
            None => Ok(()),
        }
    };
    together(&mut mesh)?;
    let start = Instant::now();
    let outputs = if inplace {
        match mesh.as_deref_mut() {
            None => exec.run_in_place(&mut bufs, o)?,
            Some(m) => exec.run_part_in_place(m, &mut bufs, o)?,
        }
        let elapsed = start.elapsed();
        if let Some(initial) = initial {
            together(&mut mesh)?;
            let mut spent = Duration::ZERO;
            for _ in 0..again {
                let mut b = initial.clone();
                let t = Instant::now();
                match mesh.as_deref_mut() {
                    None => exec.run_in_place(&mut b, o)?,
                    Some(m) => exec.run_part_in_place(m, &mut b, o)?,
                }
                spent += t.elapsed();
            }
            steady = Some(spent / again);
        }
        let outs: Vec<Vec<T>> = bufs
            .into_iter()
            .enumerate()
            .map(|(i, b)| {
                let at = layout(first + i).output_at as usize;
                b.get(at..at + out_elems as usize)
                    .map(<[T]>::to_vec)
                    .unwrap_or_default()
            })
            .collect();
        (outs, elapsed)
    } else {
        let outs = match mesh.as_deref_mut() {
            None => exec.run(local, o)?,
            Some(m) => exec.run_part(m, local, o)?,
        };
        let elapsed = start.elapsed();
        if again > 0 {
            together(&mut mesh)?;
            let t = Instant::now();
            for _ in 0..again {
                match mesh.as_deref_mut() {
                    None => exec.run(local, o)?,
                    Some(m) => exec.run_part(m, local, o)?,
                };
            }
            steady = Some(t.elapsed() / again);
        }
        (outs, elapsed)
    };
    let (outputs, elapsed) = outputs;
    let (wrong, checked) = check_ranks(kind, &inputs, mine.start, &outputs, o.count, o.op, o.root);
    Ok((
        Report {
            elapsed,
            wrong,
            checked,
        },
        steady,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_travel_and_combine() {
        let a = Report {
            elapsed: Duration::from_micros(5),
            wrong: Some(2),
            checked: 10,
        };
        let b = Report {
            elapsed: Duration::from_micros(9),
            wrong: Some(0),
            checked: 7,
        };
        assert_eq!(Report::from_bytes(&a.to_bytes()), Some(a.clone()));
        assert_eq!(Report::from_bytes(&a.to_bytes()[..20]), None);
        let all = Report::combine(&[a.clone(), b]);
        assert_eq!(all.wrong, Some(2));
        assert_eq!(all.checked, 17);
        assert_eq!(all.elapsed, Duration::from_micros(9));
        let custom = Report { wrong: None, ..a };
        assert_eq!(Report::from_bytes(&custom.to_bytes()), Some(custom.clone()));
        assert_eq!(Report::combine(&[custom]).wrong, None);
    }
}
