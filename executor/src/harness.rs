//! Runs a plan on generated data and checks every element against the reference: what
//! `coll run` and the numeric tests do.

use crate::cpu::{CpuExecutor, RunOptions};
use crate::dtype::{DType, Element};
use crate::error::ExecError;
use crate::reference::{check, fill, in_place_layout};
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

/// Fills inputs, runs (in place when asked) and counts wrong elements.
pub fn run_checked(
    exec: &CpuExecutor,
    dtype: DType,
    o: &RunOptions,
    inplace: bool,
) -> Result<Report, ExecError> {
    match dtype {
        DType::F32 => typed::<f32>(exec, o, inplace),
        DType::F64 => typed::<f64>(exec, o, inplace),
        DType::F16 => typed::<f16>(exec, o, inplace),
        DType::Bf16 => typed::<bf16>(exec, o, inplace),
        DType::I32 => typed::<i32>(exec, o, inplace),
        DType::I64 => typed::<i64>(exec, o, inplace),
        DType::U8 => typed::<u8>(exec, o, inplace),
    }
}

fn typed<T: Element>(
    exec: &CpuExecutor,
    o: &RunOptions,
    inplace: bool,
) -> Result<Report, ExecError> {
    let plan = exec.plan();
    let n = plan.ranks;
    let kind = plan.collective.0;
    let (in_elems, out_elems) = exec.sizes(o.count);
    let inputs: Vec<Vec<T>> = (0..n).map(|r| fill(o.op, n, r, in_elems)).collect();
    let start = Instant::now();
    let outputs = if inplace {
        let layout = |r: usize| in_place_layout(kind, r as u32, o.count, in_elems, out_elems);
        let mut bufs: Vec<Vec<T>> = inputs
            .iter()
            .enumerate()
            .map(|(r, input)| {
                let lay = layout(r);
                let mut b = vec![T::zero(); lay.len as usize];
                let at = lay.input_at as usize;
                if let Some(dst) = b.get_mut(at..at + input.len()) {
                    dst.copy_from_slice(input);
                }
                b
            })
            .collect();
        exec.run_in_place(&mut bufs, o)?;
        let elapsed = start.elapsed();
        let outs: Vec<Vec<T>> = bufs
            .into_iter()
            .enumerate()
            .map(|(r, b)| {
                let at = layout(r).output_at as usize;
                b.get(at..at + out_elems as usize)
                    .map(<[T]>::to_vec)
                    .unwrap_or_default()
            })
            .collect();
        (outs, elapsed)
    } else {
        let outs = exec.run(&inputs, o)?;
        (outs, start.elapsed())
    };
    let (outputs, elapsed) = outputs;
    let (wrong, checked) = check(kind, &inputs, &outputs, o.count, o.op, o.root);
    Ok(Report {
        elapsed,
        wrong,
        checked,
    })
}
