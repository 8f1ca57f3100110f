//! Sizes as people write them: `1000`, `4K`, `16M`, `1G`, with the suffixes powers of 1024
//! (nccl-tests' convention). Used for the executor's size-valued environment settings and
//! by the command line's size options.

/// Parses `1000`, `4K`, `16M`, `1G` (powers of 1024; lower-case suffixes too). A value that
/// overflows 64 bits is refused, never wrapped.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let (digits, mult) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|v| v.checked_mul(mult))
        .ok_or_else(|| format!("`{s}` is not a size (digits with an optional K, M or G)"))
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn suffixes_are_powers_of_1024() {
        assert_eq!(parse_size("1000"), Ok(1000));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("16m"), Ok(16 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("0"), Ok(0));
    }

    #[test]
    fn malformed_and_overflowing_sizes_are_refused() {
        for bad in ["", "K", "1.5M", "-1", "1T", " 1", "18446744073709551615K"] {
            let e = parse_size(bad).expect_err(bad);
            assert_eq!(
                e,
                format!("`{bad}` is not a size (digits with an optional K, M or G)")
            );
        }
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
    }
}
