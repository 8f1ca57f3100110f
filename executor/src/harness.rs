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
    dispatch(exec, None, dtype, o, inplace)
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
    dispatch(exec, Some(mesh), dtype, o, inplace)
}

fn dispatch(
    exec: &CpuExecutor,
    mesh: Option<&mut Mesh>,
    dtype: DType,
    o: &RunOptions,
    inplace: bool,
) -> Result<Report, ExecError> {
    match dtype {
        DType::F32 => typed::<f32>(exec, mesh, o, inplace),
        DType::F64 => typed::<f64>(exec, mesh, o, inplace),
        DType::F16 => typed::<f16>(exec, mesh, o, inplace),
        DType::Bf16 => typed::<bf16>(exec, mesh, o, inplace),
        DType::I32 => typed::<i32>(exec, mesh, o, inplace),
        DType::I64 => typed::<i64>(exec, mesh, o, inplace),
        DType::U8 => typed::<u8>(exec, mesh, o, inplace),
    }
}

fn typed<T: Element>(
    exec: &CpuExecutor,
    mut mesh: Option<&mut Mesh>,
    o: &RunOptions,
    inplace: bool,
) -> Result<Report, ExecError> {
    let plan = exec.plan();
    let n = plan.ranks;
    let kind = plan.collective.0;
    let mine = match &mesh {
        None => 0..n,
        Some(m) => Placement::new(n, m.procs())
            .ok_or(ExecError::Procs {
                procs: m.procs(),
                ranks: n,
            })?
            .ranks_of(m.me()),
    };
    let first = mine.start as usize;
    let (in_elems, out_elems) = exec.sizes(o.count);
    // Every rank's input: the reference needs them all, even for one process's share.
    let inputs: Vec<Vec<T>> = (0..n).map(|r| fill(o.op, n, r, in_elems)).collect();
    let local = &inputs[mine.start as usize..mine.end as usize];
    let start = Instant::now();
    let outputs = if inplace {
        let layout = |r: usize| in_place_layout(kind, r as u32, o.count, in_elems, out_elems);
        let mut bufs: Vec<Vec<T>> = local
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
            .collect();
        match mesh.as_deref_mut() {
            None => exec.run_in_place(&mut bufs, o)?,
            Some(m) => exec.run_part_in_place(m, &mut bufs, o)?,
        }
        let elapsed = start.elapsed();
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
        let outs = match mesh {
            None => exec.run(local, o)?,
            Some(m) => exec.run_part(m, local, o)?,
        };
        (outs, start.elapsed())
    };
    let (outputs, elapsed) = outputs;
    let (wrong, checked) = check_ranks(kind, &inputs, mine.start, &outputs, o.count, o.op, o.root);
    Ok(Report {
        elapsed,
        wrong,
        checked,
    })
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
