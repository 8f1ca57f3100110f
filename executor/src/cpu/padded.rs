//! The copies of a padded run on the CPU ([`coll_compiler::plan::sizes`]): each rank's input
//! into a zeroed padded input before the plan runs at the padded count, each output chunk
//! out of the padded output after. Pure: the same [`pad_copies`] the GPU executor enqueues.
//!
//! Invariant: a padded buffer holds every chunk of the plan's buffer at `ceil(count / k)`
//! elements, the user's chunk at its start and zeros after it.

use crate::dtype::Element;
use coll_compiler::plan::Plan;
use coll_compiler::plan::sizes::{Strided, pad_copies, padded_count};

/// The padded inputs of `inputs` (each `input` at `count`) for `plan`.
pub(super) fn pad_inputs<T: Element>(plan: &Plan, count: u64, inputs: &[&[T]]) -> Vec<Vec<T>> {
    let k = plan.chunk_factor;
    let copies = pad_copies(count, k, chunks(plan, 0));
    let elems = plan.buffer_elements(0, padded_count(count, k)) as usize;
    inputs
        .iter()
        .map(|input| {
            let mut p = vec![T::zero(); elems];
            copy_strided(&copies, input, &mut p);
            p
        })
        .collect()
}

/// The outputs at `count` of the padded `outputs` of `plan`.
pub(super) fn unpad_outputs<T: Element>(
    plan: &Plan,
    count: u64,
    outputs: &[Vec<T>],
) -> Vec<Vec<T>> {
    let copies: Vec<Strided> = pad_copies(count, plan.chunk_factor, chunks(plan, 1))
        .into_iter()
        .map(Strided::reversed)
        .collect();
    let elems = plan.buffer_elements(1, count) as usize;
    outputs
        .iter()
        .map(|p| {
            let mut out = vec![T::zero(); elems];
            copy_strided(&copies, p, &mut out);
            out
        })
        .collect()
}

fn chunks(plan: &Plan, b: usize) -> u64 {
    plan.buffers.get(b).map_or(0, |x| x.chunks)
}

/// Applies `copies` (element offsets) from `src` into `dst`; rows outside either are skipped
/// (the copies of [`pad_copies`] fit the buffers they were made for).
fn copy_strided<T: Copy>(copies: &[Strided], src: &[T], dst: &mut [T]) {
    for c in copies {
        for (s, d) in c.row_offsets() {
            let (s, d, n) = (s as usize, d as usize, c.len as usize);
            if let (Some(from), Some(to)) = (src.get(s..s + n), dst.get_mut(d..d + n)) {
                to.copy_from_slice(from);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        let path = format!(
            "{}/../algorithms/allgather_ring.coll",
            env!("CARGO_MANIFEST_DIR")
        );
        let m = coll_lang::load_bytes(&path, std::fs::read(&path).expect("ships")).expect("valid");
        let topo = coll_compiler::topology::Topology::parse("nvswitch:2").expect("preset");
        let mut plan = coll_compiler::compile(&m, &topo, &coll_compiler::CompileOptions::default())
            .expect("compiles")
            .into_plan()
            .into_inner();
        // Three chunks per slice, so that chunks differ in size at most counts.
        plan.chunk_factor = 3;
        plan.buffers[0].chunks = 3;
        plan.buffers[1].chunks = 6;
        plan
    }

    #[test]
    fn inputs_pad_to_whole_chunks_and_outputs_come_back() {
        let plan = plan();
        // Count 7 in chunks of 3, 2, 2: padded to 9 in chunks of 3 with zeros after.
        let input: Vec<i32> = (1..=7).collect();
        let padded = pad_inputs(&plan, 7, &[&input]);
        assert_eq!(padded, vec![vec![1, 2, 3, 4, 5, 0, 6, 7, 0]]);
        // An output of two slices: 18 padded elements back to 14.
        let out: Vec<i32> = (1..=18).collect();
        let back = unpad_outputs(&plan, 7, &[out]);
        assert_eq!(
            back,
            vec![vec![1, 2, 3, 4, 5, 7, 8, 10, 11, 12, 13, 14, 16, 17]]
        );
    }
}
