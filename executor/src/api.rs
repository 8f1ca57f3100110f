//! The front door: from a `.coll` program to a validated plan, in one call.
//!
//! ```no_run
//! use coll_executor::api::{self, Program};
//! use coll_executor::cpu::{CpuExecutor, RunOptions};
//!
//! # fn main() -> Result<(), coll_executor::ExecError> {
//! // Parse, prove, lower and check ring allreduce for 4 ranks on an NVSwitch machine.
//! let plan = Program::from_file("algorithms/allreduce_ring.coll")?.compile(4, "nvswitch:4")?;
//! // On the CPU reference executor (on GPUs: `cuda::Comm::new(plan, &[0, 1, 2, 3], ..)`).
//! let exec = CpuExecutor::new(plan, 2);
//! let inputs: Vec<Vec<f32>> = (0..4).map(|r| vec![r as f32; 1024]).collect();
//! let out = exec.run(&inputs, &RunOptions { count: 1024, ..RunOptions::default() })?;
//! assert!(out.iter().all(|rank| rank.iter().all(|&v| v == 6.0)));
//! # Ok(())
//! # }
//! ```
//!
//! Every failure of parsing, checking, proving or lowering comes back as
//! [`ExecError::Compile`] with the diagnostics rendered as the command line prints them:
//! `path:line:col`, the message and an excerpt of the `.coll` source.

use crate::error::ExecError;
use coll_compiler::topology::Topology;
use coll_compiler::{CompileOptions, compile};
use std::collections::BTreeMap;
use std::path::Path;

pub use coll_compiler::plan::{Plan, PlanError, ValidPlan};

/// A parsed and type-checked `.coll` program, ready to compile for any rank count.
#[derive(Clone, Debug)]
pub struct Program {
    module: coll_lang::Module,
    /// Values for the program's `param`s, set with [`Program::param`].
    params: BTreeMap<String, i64>,
}

impl Program {
    /// Reads and checks the program in `path` (named by that path in diagnostics).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Program, ExecError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| ExecError::Io {
            path: path.display().to_string(),
            what: e.to_string(),
        })?;
        Self::from_bytes(&path.display().to_string(), bytes)
    }

    /// Checks the program in `source`; `name` is what diagnostics call the file.
    pub fn from_source(name: &str, source: &str) -> Result<Program, ExecError> {
        Self::from_bytes(name, source.as_bytes().to_vec())
    }

    fn from_bytes(name: &str, bytes: Vec<u8>) -> Result<Program, ExecError> {
        coll_lang::load_bytes(name, bytes)
            .map(|module| Program {
                module,
                params: BTreeMap::new(),
            })
            .map_err(|d| ExecError::Compile(d.render()))
    }

    /// Sets the program's parameter `name` (declared `param NAME = DEFAULT;` in its header),
    /// as `--param NAME=VALUE` does on the command line. A name the program does not declare
    /// is an error when compiling, naming the declared ones.
    pub fn param(mut self, name: &str, value: i64) -> Program {
        self.params.insert(name.to_string(), value);
        self
    }

    /// Elaborates for `ranks` ranks on `topology` (a preset such as `nvswitch:8` or
    /// `cluster:2x8`, see [`Topology::parse`]), proves the result is the declared
    /// collective, lowers it and checks the schedules: a plan any executor takes.
    pub fn compile(&self, ranks: u32, topology: &str) -> Result<ValidPlan, ExecError> {
        let topo = Topology::parse(topology).map_err(|e| ExecError::Compile(e.to_string()))?;
        if topo.num_ranks() != ranks as usize {
            return Err(ExecError::Compile(format!(
                "topology {topology} has {} ranks, not {ranks}",
                topo.num_ranks()
            )));
        }
        self.compile_for(&topo, &CompileOptions::default())
    }

    /// [`compile`](Self::compile) for a topology built or read elsewhere (our JSON format,
    /// NCCL's topology XML), with explicit options; the rank count is the topology's.
    /// Parameters set with [`param`](Self::param) apply unless `options` sets them too.
    pub fn compile_for(
        &self,
        topology: &Topology,
        options: &CompileOptions,
    ) -> Result<ValidPlan, ExecError> {
        let mut options = options.clone();
        for (name, &value) in &self.params {
            options
                .elaborate
                .params
                .entry(name.clone())
                .or_insert(value);
        }
        compile(&self.module, topology, &options)
            .map(coll_compiler::Compiled::into_plan)
            .map_err(|d| ExecError::Compile(d.render()))
    }
}
