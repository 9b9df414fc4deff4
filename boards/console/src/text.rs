//! Numbers as text with integer arithmetic only, so that a firmware does not link core's float
//! formatting (about 15 KB of flash), and the same digits come out on every target.

use core::fmt::{self, Write};

/// Writes a non-negative `x` with at most 6 decimals, trailing zeros dropped (`0.8`, `0.95`, `1`).
/// A value that parses back to the same `f32` in Rust (and so in `host`'s command line) for
/// every setting the firmware and the console print; `boards/firmware-common`'s build scripts
/// check this for the fixed settings.
pub fn write_decimal(w: &mut impl Write, x: f32) -> fmt::Result {
    let scaled = (x as f64 * 1e6 + 0.5) as u64;
    let (int, mut frac) = (scaled / 1_000_000, scaled % 1_000_000);
    write!(w, "{int}")?;
    if frac > 0 {
        let mut digits = 6;
        while frac % 10 == 0 {
            frac /= 10;
            digits -= 1;
        }
        write!(w, ".{frac:0digits$}")?;
    }
    Ok(())
}

/// Writes `num / den` rounded to `decimals` places (at most 3), e.g. `12.34`; `den == 0`
/// writes `0`.
pub fn write_ratio(w: &mut impl Write, num: u64, den: u64, decimals: u32) -> fmt::Result {
    if den == 0 {
        return w.write_str("0");
    }
    let decimals = decimals.min(3);
    let scale = 10u128.pow(decimals);
    let scaled = (u128::from(num) * scale + u128::from(den) / 2) / u128::from(den);
    let (int, frac) = (scaled / scale, scaled % scale);
    write!(w, "{int}")?;
    if decimals > 0 {
        write!(w, ".{frac:0width$}", width = decimals as usize)?;
    }
    Ok(())
}

/// Writes `s` with its newline, carriage return, tab, backslash and other control characters
/// escaped (`\n`, `\r`, `\t`, `\\`, `\x1b`), so that a template or a value fits on one line.
pub fn write_escaped(w: &mut impl Write, s: &str) -> fmt::Result {
    for c in s.chars() {
        match c {
            '\n' => w.write_str("\\n")?,
            '\r' => w.write_str("\\r")?,
            '\t' => w.write_str("\\t")?,
            '\\' => w.write_str("\\\\")?,
            c if c.is_control() => write!(w, "\\x{:02x}", c as u32)?,
            c => w.write_char(c)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::String;

    fn text(f: impl FnOnce(&mut String) -> fmt::Result) -> String {
        let mut s = String::new();
        f(&mut s).unwrap();
        s
    }

    #[test]
    fn decimals_round_trip_through_rust_parsing() {
        for x in [0.0f32, 0.8, 0.95, 1.0, 0.5, 1.25, 0.123457, 2.0, 10.0, 0.000001] {
            let s = text(|w| write_decimal(w, x));
            assert_eq!(s.parse::<f32>().unwrap(), x, "{x} -> {s}");
        }
        assert_eq!(text(|w| write_decimal(w, 0.8)), "0.8");
        assert_eq!(text(|w| write_decimal(w, 1.0)), "1");
        assert_eq!(text(|w| write_decimal(w, 0.95)), "0.95");
    }

    #[test]
    fn ratios_round_half_up() {
        assert_eq!(text(|w| write_ratio(w, 1, 3, 2)), "0.33");
        assert_eq!(text(|w| write_ratio(w, 2, 3, 2)), "0.67");
        assert_eq!(text(|w| write_ratio(w, 10, 4, 1)), "2.5");
        assert_eq!(text(|w| write_ratio(w, 7, 1, 0)), "7");
        assert_eq!(text(|w| write_ratio(w, 5, 0, 2)), "0");
        assert_eq!(text(|w| write_ratio(w, u64::MAX, 1, 3)), "18446744073709551615.000");
    }

    #[test]
    fn escapes_control_characters() {
        assert_eq!(text(|w| write_escaped(w, "User: {line}\nBot:")), "User: {line}\\nBot:");
        assert_eq!(text(|w| write_escaped(w, "a\tb\\c\x1b\r")), "a\\tb\\\\c\\x1b\\r");
    }
}
