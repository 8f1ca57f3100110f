//! How long the front end takes on every shipped algorithm: read + parse + check, and the
//! formatter, median of many runs (release build).
//!
//! `cargo bench --bench parse` (from the workspace root).

use std::time::{Duration, Instant};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files: Vec<_> = std::fs::read_dir(root.join("algorithms"))
        .expect("algorithms/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "coll"))
        .collect();
    files.sort();
    println!("| algorithm | bytes | parse | parse + check | fmt |");
    println!("|---|---|---|---|---|");
    for path in files {
        let text = std::fs::read_to_string(&path).expect("readable");
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let file = coll_lang::SourceFile::new(name.clone(), text.clone());
        let runs = 2000;
        let time = |f: &dyn Fn()| {
            median(
                (0..runs)
                    .map(|_| {
                        let t = Instant::now();
                        f();
                        t.elapsed()
                    })
                    .collect(),
            )
        };
        let parse = time(&|| {
            std::hint::black_box(coll_lang::parse(&file).is_ok());
        });
        let load = time(&|| {
            std::hint::black_box(coll_lang::load(file.clone()).is_ok());
        });
        let program = coll_lang::parse(&file).expect("shipped algorithms parse");
        let fmt = time(&|| {
            std::hint::black_box(coll_lang::fmt::format(&text, &program));
        });
        println!(
            "| {name} | {} | {:.1} µs | {:.1} µs | {:.1} µs |",
            text.len(),
            parse.as_secs_f64() * 1e6,
            load.as_secs_f64() * 1e6,
            fmt.as_secs_f64() * 1e6
        );
    }
}
