//! The ports of other projects' algorithms in `bench/ports/` (the scheduler's benchmark, see
//! `bench/ports/README.md`): none carries a channel hint, since the compiler must find the
//! schedule itself, and each compiles for 8 ranks on its preset and computes its collective
//! on the CPU executor, every element checked, in both placements, with its default
//! parameters and the other settings in `PARAMS`.

use coll_compiler::topology::Topology;
use coll_compiler::{CompileOptions, compile};
use coll_executor::cpu::{CpuExecutor, RunOptions};
use coll_executor::dtype::DType;
use coll_executor::harness::run_checked;

/// A port's text without its comments.
fn code(text: &str) -> String {
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn ports_carry_no_channel_hint() {
    let ports = coll_tests::coll_files("bench/ports");
    assert!(ports.len() >= 12, "{} ports", ports.len());
    for p in &ports {
        let text = std::fs::read_to_string(p).expect("readable");
        let code = code(&text);
        let words: Vec<&str> = code.split_whitespace().collect();
        let hinted = words
            .windows(2)
            .any(|w| w[0] == "with" && w[1].starts_with("channel"))
            || words
                .windows(2)
                .any(|w| w[0] == "channel" && !w[1].starts_with('='));
        assert!(!hinted, "{} carries a channel hint", p.display());
    }
}

/// Parameter values other than the defaults that the ports' originals use (the binomial
/// tree's second tree) or that change the schedule's shape (the torus's columns).
const PARAMS: &[(&str, &str, i64)] = &[
    ("allreduce_binomial_tree.coll", "trees", 2),
    ("allreduce_torus2d.coll", "cols", 2),
];

#[test]
fn ports_compute_their_collective() {
    for p in coll_tests::coll_files("bench/ports") {
        let file = p.file_name().and_then(|f| f.to_str()).unwrap_or_default();
        let mut settings = vec![None];
        settings.extend(
            PARAMS
                .iter()
                .filter(|(f, _, _)| *f == file)
                .map(|&(_, name, value)| Some((name, value))),
        );
        for param in settings {
            let m = coll_lang::load(coll_tests::source(&p))
                .unwrap_or_else(|d| panic!("{}", d.render()));
            let spec = coll_tests::preset(&m, 8).expect("a preset for 8 ranks");
            let topo = Topology::parse(&spec).expect("preset");
            let mut options = CompileOptions::default();
            if let Some((name, value)) = param {
                options.elaborate.params.insert(name.to_string(), value);
            }
            let plan = compile(&m, &topo, &options)
                .unwrap_or_else(|d| panic!("{} {param:?} on {spec}: {}", p.display(), d.render()))
                .into_plan();
            let exec = CpuExecutor::new(plan, coll_compiler::DEFAULT_SLOTS);
            let o = RunOptions {
                count: 1003,
                ..RunOptions::default()
            };
            for inplace in [false, true] {
                let r = run_checked(&exec, DType::F32, &o, inplace).unwrap_or_else(|e| {
                    panic!("{} {param:?} in place {inplace}: {e}", p.display())
                });
                assert_eq!(
                    r.wrong,
                    Some(0),
                    "{} {param:?} in place {inplace}",
                    p.display()
                );
            }
        }
    }
}

/// Every parameter setting above names a port that declares it.
#[test]
fn port_parameters_name_declared_parameters() {
    for (file, name, _) in PARAMS {
        let path = coll_tests::root().join("bench/ports").join(file);
        let text = std::fs::read_to_string(&path).expect("readable");
        assert!(
            code(&text).contains(&format!("param {name} =")),
            "{file} declares no parameter {name}"
        );
    }
}
