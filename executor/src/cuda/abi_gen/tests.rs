//! The generator on small headers: layouts, values, docs, and the errors that stop the build.

use super::{GenError, generate};

const TYPES: &str = "typedef unsigned char u8;\ntypedef unsigned short u16;\n\
                     typedef unsigned int u32;\ntypedef unsigned long long u64;\n\
                     typedef int i32;\n";

/// The Rust of `body` after the usual typedefs (lines 1-5).
fn rust(body: &str) -> String {
    match generate(&format!("{TYPES}{body}"), "test.h") {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    }
}

/// The error on `body` after the usual typedefs, as `abi.h:LINE: message`.
fn error(body: &str) -> String {
    match generate(&format!("{TYPES}{body}"), "test.h") {
        Ok(r) => panic!("generated:\n{r}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_shipped_header_generates_every_struct_with_its_layout() {
    let r = match generate(include_str!("../kernel/abi.h"), "abi.h") {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    };
    for s in [
        "ChunkPos",
        "Slicer",
        "DOp",
        "DDep",
        "DBlock",
        "DConn",
        "RankCtx",
        "CallArgs",
        "CallMode",
        "ErrorRec",
        "CallCounters",
        "TraceRec",
        "BarrierArgs",
    ] {
        assert!(r.contains(&format!("pub struct {s} {{")), "{s}");
    }
    assert!(r.contains("const _: () = assert!(::core::mem::size_of::<DOp>() == 48);"));
    assert!(r.contains("const _: () = assert!(::core::mem::offset_of!(DOp, peer) == 32);"));
    assert!(
        r.contains("const _: () = assert!(::core::mem::offset_of!(CallMode, ll_epoch) == 24);")
    );
    assert!(r.contains("pub input: [u64; MAX_LOCAL],"));
    assert!(r.contains("pub const DOP_SWAP_ALIASED: u32 = 0x80;"));
    assert!(r.contains("pub const NO_CONN: i32 = -1;"));
    assert!(r.contains("    RecvReduceCopySend = 5,"));
}

#[test]
fn fields_lie_at_their_c_offsets_and_nested_structs_keep_their_alignment() {
    let r = rust(
        "#define N 4\n\
         struct Inner {\n    u32 a;\n    u32 b;\n};\n\
         static_assert(sizeof(Inner) == 8, \"Inner\");\n\
         struct Outer {\n    u8 x;\n    u8 y;\n    u16 z;\n    Inner inner;\n    u32 w[N];\n    \
         u32 pad;\n    u64 big;\n};\n\
         static_assert(sizeof(Outer) == 40, \"Outer\");\n",
    );
    for (field, off) in [
        ("x", 0),
        ("y", 1),
        ("z", 2),
        ("inner", 4),
        ("w", 12),
        ("pad", 28),
        ("big", 32),
    ] {
        assert!(
            r.contains(&format!("offset_of!(Outer, {field}) == {off});")),
            "{field} at {off}:\n{r}"
        );
    }
    assert!(r.contains("size_of::<Outer>() == 40);"));
    assert!(r.contains("align_of::<Outer>() == 8);"));
    assert!(r.contains("align_of::<Inner>() == 4);"));
    assert!(r.contains("pub w: [u32; N],"));
    assert!(r.contains("pub inner: Inner,"));
    assert!(r.contains("#[repr(C)]\n#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod"));
}

#[test]
fn implicit_padding_is_refused_with_the_bytes_to_add() {
    assert_eq!(
        error("struct S {\n    u8 a;\n    u32 b;\n};\n"),
        "abi.h:8: struct S: field `b` would start at byte 1 but needs alignment 4: add 3 bytes \
         of explicit padding before it"
    );
    assert_eq!(
        error("struct S {\n    u64 a;\n    u32 b;\n};\n"),
        "abi.h:9: struct S ends at byte 12 but its alignment is 8: add 4 bytes of explicit \
         padding at its end"
    );
}

#[test]
fn every_struct_needs_a_size_assert_that_matches_c() {
    assert_eq!(
        error("struct S {\n    u32 a;\n};\n#define X 1\n"),
        "abi.h:9: struct S (line 6) must be followed by `static_assert(sizeof(S) == 4, \"S\");`"
    );
    assert_eq!(
        error("struct S {\n    u32 a;\n};\n"),
        "abi.h:8: struct S (line 6) must be followed by `static_assert(sizeof(S) == 4, \"S\");`"
    );
    assert_eq!(
        error("struct S {\n    u32 a;\n    u32 b;\n};\nstatic_assert(sizeof(S) == 12, \"S\");\n"),
        "abi.h:10: struct S is 8 bytes by C's layout rules, not 12"
    );
    assert_eq!(
        error("static_assert(sizeof(T) == 4, \"T\");\n"),
        "abi.h:6: `T` is not a struct above"
    );
}

#[test]
fn anything_outside_the_subset_names_its_line() {
    let outside = "abi.h:6: outside the subset abi.h may use (typedef, #define, enum, struct, \
                   static_assert, comments)";
    assert_eq!(error("union U {\n"), outside);
    assert_eq!(error("u32 global;\n"), outside);
    assert_eq!(
        error("#include <cstdint>\n"),
        "abi.h:6: only `#define NAME VALUE` is supported"
    );
    assert_eq!(
        error("/* block */\n"),
        "abi.h:6: only `//` comments are supported"
    );
    assert_eq!(
        error("struct S {\n    u64* p;\n};\n"),
        "abi.h:7: expected `TYPE NAME;`, `TYPE NAME[LEN];` or `};`"
    );
    assert_eq!(
        error("struct S {\n    float f;\n};\n"),
        "abi.h:7: `float` is neither a fixed-width type nor a struct above"
    );
    assert_eq!(
        error("struct S {\n    u32 type;\n};\n"),
        "abi.h:7: field `type` is a Rust keyword"
    );
    assert_eq!(
        error("struct S {\n    u32 a[0];\n};\n"),
        "abi.h:7: array length `0`: a positive literal or a #define"
    );
    assert_eq!(
        error("struct S {\n    u32 a;\n"),
        "abi.h:6: struct S has no `};`"
    );
    assert_eq!(error("struct S {\n};\n"), "abi.h:7: struct S has no fields");
    assert_eq!(
        error("#define A 1 @\n"),
        "abi.h:6: unexpected character `@`"
    );
}

#[test]
fn typedefs_must_give_each_fixed_width_name_its_c_type() {
    let e = generate("typedef unsigned int u64;\n", "t.h").map_err(|e| e.to_string());
    assert_eq!(
        e,
        Err("abi.h:1: typedef u64 must name `unsigned long long`, not `unsigned int`".into())
    );
    let e = generate("typedef float f32;\n", "t.h").map_err(|e| e.to_string());
    assert_eq!(
        e,
        Err(
            "abi.h:1: typedef `f32`: only u8, u16, u32, u64, i8, i16, i32 and i64 may be \
             defined"
                .into()
        )
    );
    // A type the header never declared is not a type.
    let e = generate("struct S {\n    u32 a;\n};\n", "t.h").map_err(|e| e.to_string());
    assert_eq!(
        e,
        Err("abi.h:2: `u32` is neither a fixed-width type nor a struct above".into())
    );
}

#[test]
fn defines_take_c_types_and_values() {
    let r = rust(
        "#define A ((u32)1 << 31)\n#define B (A | 2u)\n#define C ((i32)-1)\n\
         #define D 0xffffffff\n#define E ((u32)-1)\n#define F (10 / 3 + 2 * 2)\n\
         #define G (1ull << 40)\n#define H (~(u32)0 >> 28)\n#define I (F - 1)\n",
    );
    for line in [
        "pub const A: u32 = 0x80000000;",
        "pub const B: u32 = 0x80000002;",
        "pub const C: i32 = -1;",
        "pub const D: u32 = 0xffffffff;",
        "pub const E: u32 = 0xffffffff;",
        "pub const F: usize = 7;",
        "pub const G: u64 = 0x10000000000;",
        "pub const H: u32 = 0xf;",
        "pub const I: usize = 6;",
    ] {
        assert!(r.contains(line), "{line}:\n{r}");
    }
}

#[test]
fn constant_expressions_that_c_would_not_hold_are_refused() {
    assert_eq!(
        error("#define A (1 << 31)\n"),
        "abi.h:6: the value 2147483648 overflows i32"
    );
    assert_eq!(
        error("#define A ((u32)1 << 32)\n"),
        "abi.h:6: shift of 1 by 32 in u32"
    );
    assert_eq!(
        error("#define A (-1)\n"),
        "abi.h:6: #define A: a value of type int is a size (usize); cast a negative one"
    );
    assert_eq!(
        error("#define A (B + 1)\n"),
        "abi.h:6: `B` is not a #define of an earlier line"
    );
    assert_eq!(error("#define A (1 / 0)\n"), "abi.h:6: division by zero");
    assert_eq!(
        error("#define A (1 + 2\n"),
        "abi.h:6: expected `)` at the end of the line"
    );
    assert_eq!(
        error("#define A 1 2\n"),
        "abi.h:6: unexpected `2` after the value"
    );
    assert_eq!(
        error("#define A 1ul\n"),
        "abi.h:6: literal `1ul`: only the suffixes u, ll and ull are supported"
    );
    assert_eq!(error("#define A\n"), "abi.h:6: #define A has no value");
    assert_eq!(
        error("#define A 1\n#define A 2\n"),
        "abi.h:7: `A` is already defined on line 6"
    );
}

#[test]
fn enums_become_rust_enums_with_their_codes() {
    let r = rust(
        "// What it is.\nenum Kind : u8 {\n    // The first.\n    KIND_FIRST_ONE = 0,\n    \
         KIND_SECOND = (1 << 3),\n};\n",
    );
    assert!(r.contains("/// What it is.\n#[repr(u8)]\n"), "{r}");
    assert!(
        r.contains("pub enum Kind {\n    /// The first.\n    FirstOne = 0,\n"),
        "{r}"
    );
    assert!(
        r.contains("    /// The kernel's `KIND_SECOND`.\n    Second = 8,\n"),
        "{r}"
    );
    assert!(
        r.contains("pub const fn from_code(code: u8) -> Option<Kind> {"),
        "{r}"
    );
    assert!(r.contains("            8 => Some(Kind::Second),"), "{r}");
    assert!(r.contains("impl From<Kind> for u8 {"), "{r}");
    assert!(
        r.contains("pub const ALL: [Kind; 2] = [Kind::FirstOne, Kind::Second];"),
        "{r}"
    );
}

#[test]
fn enum_values_must_be_distinct_prefixed_and_fit() {
    assert_eq!(
        error("enum K : u8 {\n    K_A = 0,\n    L_B = 1,\n};\n"),
        "abi.h:8: enumerator `L_B`: every value of enum K starts with K_"
    );
    assert_eq!(
        error("enum K : u8 {\n    K_A = 1,\n    K_B = 1,\n};\n"),
        "abi.h:8: K_B: the value 1 is also A's"
    );
    assert_eq!(
        error("enum K : u8 {\n    K_A = 256,\n};\n"),
        "abi.h:7: K_A = 256 does not fit u8"
    );
    assert_eq!(
        error("enum K : u8 {\n    NOPREFIX = 1,\n};\n"),
        "abi.h:7: enumerator `NOPREFIX` needs a PREFIX_ (as OP_SEND)"
    );
    assert_eq!(
        error("enum K : u8 {\n};\n"),
        "abi.h:7: enum K has no values"
    );
    assert_eq!(
        error("enum K : u8 {\n    K_A = 1,\n"),
        "abi.h:6: enum K has no `};`"
    );
    assert_eq!(
        error("enum K {\n"),
        "abi.h:6: expected `enum NAME : TYPE {`"
    );
}

#[test]
fn comments_right_before_an_item_become_its_escaped_docs() {
    let r = rust(
        "// Detached: a blank line follows.\n\n// Kept, with [brackets], <angles> and a*b,\n\
         // but `[code]` as written.\n#define A 1 // and a trailing one.\n",
    );
    assert!(!r.contains("Detached"), "{r}");
    assert!(
        r.contains(
            "/// Kept, with \\[brackets\\], \\<angles\\> and a\\*b,\n/// but `[code]` as \
             written.\n/// and a trailing one.\npub const A: usize = 1;"
        ),
        "{r}"
    );
    // An item with no comment still gets a line of docs.
    assert!(rust("#define B 2\n").contains("/// The kernel's `B`.\npub const B"));
}

#[test]
fn errors_display_as_the_header_line() {
    let e = GenError {
        line: 42,
        msg: "bad".into(),
    };
    assert_eq!(e.to_string(), "abi.h:42: bad");
}
