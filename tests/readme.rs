//! The `.coll` examples of the READMEs are valid and already in `coll fmt`'s layout.
//!
//! Every fenced block of `README.md` and `algorithms/README.md` whose info string is `coll`
//! must parse, pass the checker, and come back unchanged from [`coll_lang::fmt::format`], so
//! a reader who copies one gets a file that `coll check` and `coll fmt --check` accept. A
//! block fenced as `coll fragment` is part of a program that cannot stand alone; it is
//! skipped, and counted, so every skip is visible in the document. Every fence must name its
//! language: an untagged block could hide `.coll` code from this test.

use coll_lang::fmt::format;

/// The documents whose examples are checked, with their text (rebuilt when they change).
const DOCS: [(&str, &str); 2] = [
    ("README.md", include_str!("../README.md")),
    (
        "algorithms/README.md",
        include_str!("../algorithms/README.md"),
    ),
];

/// One fenced block: where its first line is (1-based, in the document), its info string and
/// its text (every line ending in `\n`).
#[derive(Debug, PartialEq)]
struct Block {
    line: usize,
    info: String,
    text: String,
}

/// The fenced blocks of `doc` (named `name` in errors). A fence is a line that starts with
/// three backticks after any indentation; a block ends at the next line that is only the
/// three backticks. An unterminated block or an untagged fence is an error.
fn fenced(name: &str, doc: &str) -> Result<Vec<Block>, String> {
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in doc.lines().enumerate() {
        let trimmed = line.trim_start();
        match open.as_mut() {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    let info = info.trim();
                    if info.is_empty() {
                        return Err(format!(
                            "{name}:{}: a fence without a language (write ```coll, ```sh, ```text ...)",
                            i + 1
                        ));
                    }
                    open = Some(Block {
                        line: i + 2,
                        info: info.to_string(),
                        text: String::new(),
                    });
                }
            }
            Some(block) => {
                if trimmed.trim_end() == "```" {
                    blocks.extend(open.take());
                } else {
                    block.text.push_str(line);
                    block.text.push('\n');
                }
            }
        }
    }
    match open {
        Some(block) => Err(format!(
            "{name}:{}: fence not closed",
            block.line.saturating_sub(1)
        )),
        None => Ok(blocks),
    }
}

/// What checking one document's `coll` blocks found.
#[derive(Debug, Default)]
struct Report {
    checked: usize,
    fragments: usize,
    failures: Vec<String>,
}

/// Checks every `coll` block of `doc`: it loads (parse and check) and `format` leaves it
/// unchanged. A failure names the document line where the block goes wrong.
fn check_doc(name: &str, doc: &str) -> Result<Report, String> {
    let mut report = Report::default();
    for block in fenced(name, doc)? {
        let mut words = block.info.split_whitespace();
        if words.next() != Some("coll") {
            continue;
        }
        match words.collect::<Vec<_>>().as_slice() {
            [] => {}
            ["fragment"] => {
                report.fragments += 1;
                continue;
            }
            _ => {
                report.failures.push(format!(
                    "{name}:{}: unknown fence `{}` (```coll or ```coll fragment)",
                    block.line - 1,
                    block.info
                ));
                continue;
            }
        }
        report.checked += 1;
        let module = match coll_lang::load_bytes(name, block.text.clone().into_bytes()) {
            Ok(m) => m,
            Err(_) => {
                // Again with the lines above the block blanked, so the diagnostics name
                // document lines.
                let padded = "\n".repeat(block.line - 1) + &block.text;
                let why = match coll_lang::load_bytes(name, padded.into_bytes()) {
                    Err(e) => e.to_string(),
                    Ok(_) => "(it loads once padded?)".to_string(),
                };
                report.failures.push(format!(
                    "{name}:{}: the block does not load:\n{why}",
                    block.line
                ));
                continue;
            }
        };
        let want = format(&block.text, &module.program);
        if want != block.text {
            report
                .failures
                .push(first_difference(name, block.line, &block.text, &want));
        }
    }
    Ok(report)
}

/// The first line where `have` (a block starting at document line `line`) differs from the
/// canonical layout `want`.
fn first_difference(name: &str, line: usize, have: &str, want: &str) -> String {
    let mut h = have.lines();
    let mut w = want.lines();
    let mut i = 0;
    loop {
        match (h.next(), w.next()) {
            (Some(a), Some(b)) if a == b => i += 1,
            (a, b) => {
                return format!(
                    "{name}:{}: not formatted: the block has {:?}, coll fmt prints {:?}",
                    line + i,
                    a.unwrap_or("(end of block)"),
                    b.unwrap_or("(end of block)")
                );
            }
        }
    }
}

#[test]
fn readme_coll_blocks_load_and_are_formatted() {
    let mut failures = Vec::new();
    let mut checked = Vec::new();
    for (name, doc) in DOCS {
        match check_doc(name, doc) {
            Ok(r) => {
                failures.extend(r.failures);
                checked.push((name, r.checked, r.fragments));
            }
            Err(e) => failures.push(e),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The language tour must stay a checked block, not silently turn into a fragment.
    assert!(
        checked.iter().any(|&(n, c, _)| n == "README.md" && c >= 1),
        "README.md has no ```coll block: {checked:?}"
    );
    println!("coll blocks (checked, fragments skipped): {checked:?}");
}

#[test]
fn blocks_are_found_with_their_lines_and_info() {
    let doc = "# t\n\n```coll\ncollective x\n```\ntext\n  ```sh fragment\n  a\n\n  ```\n";
    let blocks = fenced("t.md", doc).expect("well-formed");
    assert_eq!(
        blocks,
        vec![
            Block {
                line: 4,
                info: "coll".into(),
                text: "collective x\n".into()
            },
            Block {
                line: 8,
                info: "sh fragment".into(),
                text: "  a\n\n".into()
            },
        ]
    );
    assert_eq!(
        fenced("t.md", "a\n```coll\nx\n").expect_err("unterminated"),
        "t.md:2: fence not closed"
    );
    assert!(
        fenced("t.md", "a\n\n```\nx\n```\n")
            .expect_err("untagged")
            .starts_with("t.md:3: a fence without a language"),
    );
}

const GOOD: &str = "collective allreduce ring(n) {
    chunks n;
    inplace;
}

for r in 0..n {
    copy input[r][0] -> input[(r + 1) % n];
}
";

#[test]
fn a_formatted_block_passes_and_fragments_are_counted() {
    let doc = format!("```coll\n{GOOD}```\n\n```coll fragment\nreduce a -> b\n```\n");
    let r = check_doc("d.md", &doc).expect("fences");
    assert_eq!((r.checked, r.fragments), (1, 1));
    assert!(r.failures.is_empty(), "{:?}", r.failures);
}

#[test]
fn an_unformatted_block_fails_naming_its_line() {
    // Two spaces before the comment on the block's third line, document line 4.
    let bad = GOOD.replace("inplace;", "inplace;  // x");
    let doc = format!("```coll\n{bad}```\n");
    let r = check_doc("d.md", &doc).expect("fences");
    assert_eq!(
        r.failures,
        vec![
            "d.md:4: not formatted: the block has \"    inplace;  // x\", coll fmt prints \"    inplace; // x\""
                .to_string()
        ]
    );
}

#[test]
fn a_block_that_does_not_load_fails_and_an_unknown_fence_is_named() {
    let doc = "```coll\ncollective allreduce r(n) {\n```\n\n```coll part\nx\n```\n";
    let r = check_doc("d.md", doc).expect("fences");
    assert_eq!(r.failures.len(), 2, "{:?}", r.failures);
    // The diagnostic names the document's line and column, not the block's.
    assert_eq!(
        r.failures[0].trim_end(),
        "d.md:2: the block does not load:\nd.md:2:28: error: expected `}`, found end of file"
    );
    assert_eq!(
        r.failures[1],
        "d.md:5: unknown fence `coll part` (```coll or ```coll fragment)"
    );
}
