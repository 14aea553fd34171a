//! Comma-separated numbers: read with the `csv` crate (quoted fields, any
//! line ending) and written with the shortest text that reads back to the
//! same value; self-contained so the tests can include it.
//!
//! A UTF-8 byte-order mark is skipped; `#` starts a comment (outside
//! quotes) that runs to the end of the line; blank lines are skipped;
//! fields are trimmed. Whether the first row is a header is decided by a
//! [`HeaderRule`]: automatically, a first row is a header only when none
//! of its fields is a number, and a first row with some numeric and some
//! other fields is an error, since either reading of it could be wrong.

use std::io::{self, Write};

use csv::{ReaderBuilder, Trim};
use ndarray::{Array2, ArrayView, Dimension, Ix1, Ix2};

/// Whether the first row is a header.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum HeaderRule {
    /// A header when none of its fields is a number; data when all are;
    /// an error otherwise.
    #[default]
    Auto,
    /// The first row is a header, whatever it holds.
    Header,
    /// The first row is data.
    NoHeader,
}

/// A table read from text: `rows × cols` entries (row-major) and the
/// 1-based line each row came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Table<T> {
    /// The entries.
    pub data: Array2<T>,
    /// The text line of each row.
    pub lines: Vec<usize>,
}

/// Removes a leading byte-order mark and `#` comments (outside double
/// quotes), and ends every line with `\n` (CRLF and CR too). A line left
/// blank becomes a single space, so that the CSV reader sees (and counts)
/// every line and line numbers stay right.
fn strip(text: &[u8]) -> Vec<u8> {
    let text = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text);
    let mut out = Vec::with_capacity(text.len() + text.len() / 8);
    let mut lines = text
        .split(|&c| c == b'\n')
        .flat_map(|l| {
            let l = l.strip_suffix(b"\r").unwrap_or(l);
            l.split(|&c| c == b'\r')
        })
        .peekable();
    while let Some(line) = lines.next() {
        let start = out.len();
        let mut quoted = false;
        for &c in line {
            match c {
                b'#' if !quoted => break,
                b'"' => {
                    quoted = !quoted;
                    out.push(c);
                }
                _ => out.push(c),
            }
        }
        if out[start..].iter().all(u8::is_ascii_whitespace) {
            out.truncate(start);
            out.push(b' ');
        }
        if lines.peek().is_some() {
            out.push(b'\n');
        }
    }
    out
}

fn is_number(field: &str) -> bool {
    unquote(field).parse::<f64>().is_ok()
}

/// A field the CSV reader left quoted because of spaces around the quotes
/// (`1, "2"`), unquoted.
fn unquote(field: &str) -> std::borrow::Cow<'_, str> {
    match field
        .strip_prefix('"')
        .and_then(|f| f.strip_suffix('"'))
        .map(str::trim)
    {
        Some(inner) if !inner.contains('"') => inner.into(),
        Some(inner) => inner.replace("\"\"", "\"").into(),
        None => field.into(),
    }
}

/// Reads a table, converting each field with `conv` (`Err` says what is
/// wrong with it).
///
/// # Errors
/// Text that is not UTF-8, a malformed CSV record, rows of unequal length,
/// a first row that is part numbers and part not under
/// [`HeaderRule::Auto`], a field `conv` refuses, or a table too large for
/// memory. Messages name the 1-based line (and field).
pub fn read<T: Clone>(
    text: &[u8],
    rule: HeaderRule,
    conv: impl Fn(&str) -> Result<T, String>,
) -> Result<Table<T>, String> {
    let clean = strip(text);
    let mut reader = ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(Trim::All)
        .from_reader(clean.as_slice());
    let mut data = Vec::new();
    let mut lines = Vec::new();
    // Columns, and the line that set them.
    let mut width: Option<(usize, usize)> = None;
    let mut record = csv::StringRecord::new();
    let mut first = true;
    loop {
        let more = reader
            .read_record(&mut record)
            .map_err(|e| match e.kind() {
                csv::ErrorKind::Utf8 { pos, .. } => format!(
                    "not UTF-8 text (line {})",
                    pos.as_ref().map_or(0, |p| p.line())
                ),
                _ => format!("malformed CSV: {e}"),
            })?;
        if !more {
            break;
        }
        let line = record.position().map_or(0, |p| p.line() as usize);
        if record.iter().all(str::is_empty) && record.len() <= 1 {
            continue; // a blank (or comment-only) line
        }
        if first {
            first = false;
            // Numbers say data, text says header; a field the converter
            // takes without being a number (a missing value, with missing
            // values allowed: empty, `NA`) says neither.
            let neutral = |f: &str| !is_number(f) && conv(&unquote(f)).is_ok();
            let text = |f: &str| !is_number(f) && !neutral(f);
            let numbers = record.iter().filter(|f| is_number(f)).count();
            let texts = record.iter().filter(|f| text(f)).count();
            let numeric = record.len() - texts;
            let header = match rule {
                HeaderRule::Header => true,
                HeaderRule::NoHeader => false,
                HeaderRule::Auto if numbers == 0 && texts > 0 => true,
                HeaderRule::Auto if texts == 0 => false,
                HeaderRule::Auto => {
                    let bad: Vec<String> = record
                        .iter()
                        .enumerate()
                        .filter(|(_, f)| text(f))
                        .map(|(j, f)| format!("field {} {f:?}", j + 1))
                        .collect();
                    return Err(format!(
                        "line {line} is neither a header nor a row of numbers ({} of {} fields are numbers; {} not); \
                         pass --header or --no-header to say which it is",
                        numeric,
                        record.len(),
                        bad.join(", ")
                    ));
                }
            };
            if header {
                width = Some((record.len(), line));
                continue;
            }
        }
        match width {
            Some((w, from)) if record.len() != w => {
                return Err(format!(
                    "ragged row: line {line} has {} fields but line {from} has {w}",
                    record.len()
                ));
            }
            Some(_) => {}
            None => width = Some((record.len(), line)),
        }
        if data.try_reserve(record.len()).is_err() || lines.try_reserve(1).is_err() {
            return Err(format!("too large for memory (at line {line})"));
        }
        for (j, f) in record.iter().enumerate() {
            let v = conv(&unquote(f)).map_err(|why| {
                let what = if f.is_empty() {
                    "an empty field".to_string()
                } else {
                    format!("{f:?}")
                };
                format!("line {line}, field {}: {what} {why}", j + 1)
            })?;
            data.push(v);
        }
        lines.push(line);
    }
    let cols = width.map_or(0, |(w, _)| w);
    let data = Array2::from_shape_vec((lines.len(), cols), data).map_err(|e| e.to_string())?;
    Ok(Table { data, lines })
}

/// Converts a field to `f32`, correctly rounded (parsed as `f32`, not
/// through `f64`, which could round twice), refusing finite values too
/// large for `f32` (NaN and infinities pass, for the caller to locate).
pub fn f32_field(f: &str) -> Result<f32, String> {
    let x: f32 = f.parse().map_err(|_| "is not a number".to_string())?;
    if x.is_infinite()
        && let Ok(v) = f.parse::<f64>()
        && v.is_finite()
    {
        return Err(format!("is too large for f32 (value {v:e})"));
    }
    Ok(x)
}

/// As [`f32_field`], with a missing value — an empty field, `NA` or `nan`
/// in any case — read as NaN.
pub fn f32_or_missing_field(f: &str) -> Result<f32, String> {
    if f.is_empty() || f.eq_ignore_ascii_case("na") || f.eq_ignore_ascii_case("nan") {
        return Ok(f32::NAN);
    }
    f32_field(f)
}

/// Converts a field to `f64` and to the correctly rounded `f32` (each
/// parsed from the text, so neither rounds twice), for points that are
/// centred in `f64` before they are rounded. A finite value too large for
/// `f32` is infinite in the `f32`, for the caller to refuse where it uses
/// that; NaN and infinities pass, for the caller to locate.
pub fn wide_field(f: &str) -> Result<(f32, f64), String> {
    let v: f64 = f.parse().map_err(|_| "is not a number".to_string())?;
    let x: f32 = f.parse().map_err(|_| "is not a number".to_string())?;
    Ok((x, v))
}

/// As [`wide_field`], with a missing value read as NaN (as
/// [`f32_or_missing_field`]).
pub fn wide_or_missing_field(f: &str) -> Result<(f32, f64), String> {
    if f.is_empty() || f.eq_ignore_ascii_case("na") || f.eq_ignore_ascii_case("nan") {
        return Ok((f32::NAN, f64::NAN));
    }
    wide_field(f)
}

/// Converts a field to `i64`: an integer, or a number with no fractional
/// part below 2⁵³ in magnitude (`3`, `3.0`, `3e2`).
pub fn i64_field(f: &str) -> Result<i64, String> {
    if let Ok(v) = f.parse::<i64>() {
        return Ok(v);
    }
    let v: f64 = f.parse().map_err(|_| "is not a number".to_string())?;
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 9_007_199_254_740_992.0 {
        Ok(v as i64)
    } else {
        Err("is not an integer".to_string())
    }
}

/// A value that can be written as a CSV field.
pub trait Field: Copy {
    /// Writes the value as CSV text that reads back to the same value.
    fn write_csv(self, out: &mut impl Write) -> io::Result<()>;
}

impl Field for f32 {
    fn write_csv(self, out: &mut impl Write) -> io::Result<()> {
        // `{:?}` is the shortest text that parses back to the same f32,
        // with an exponent for very large or small values.
        write!(out, "{self:?}")
    }
}

impl Field for f64 {
    fn write_csv(self, out: &mut impl Write) -> io::Result<()> {
        // The shortest text that parses back to the same f64.
        write!(out, "{self:?}")
    }
}

impl Field for i64 {
    fn write_csv(self, out: &mut impl Write) -> io::Result<()> {
        write!(out, "{self}")
    }
}

/// Writes a 1-D (as one column) or 2-D array as CSV: one row per line,
/// fields separated by commas, no header.
///
/// # Errors
/// An array of more than two axes, or a failed write.
pub fn write<T: Field, D: Dimension>(w: &mut impl Write, a: ArrayView<'_, T, D>) -> io::Result<()> {
    let m = match a.ndim() {
        1 => {
            let v = a.into_dimensionality::<Ix1>().map_err(io::Error::other)?;
            let n = v.len();
            v.into_shape_with_order((n, 1)).map_err(io::Error::other)?
        }
        2 => a.into_dimensionality::<Ix2>().map_err(io::Error::other)?,
        n => {
            return Err(io::Error::other(format!(
                "a {n}-D array cannot be written as CSV; use .npy"
            )));
        }
    };
    for row in m.rows() {
        for (j, &v) in row.iter().enumerate() {
            if j > 0 {
                w.write_all(b",")?;
            }
            v.write_csv(w)?;
        }
        w.write_all(b"\n")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csv(text: &str) -> Result<Table<f32>, String> {
        read(text.as_bytes(), HeaderRule::Auto, f32_field)
    }

    #[test]
    fn csv_header_comments_and_blank_lines() {
        let t = csv("# made by hand\nx, y\n\n1,2 # first\n3.5,-4e-3\n").unwrap();
        assert_eq!(t.data, ndarray::array![[1.0, 2.0], [3.5, -4e-3]]);
        assert_eq!(t.lines, [4, 5]);
    }

    #[test]
    fn csv_errors_name_the_line() {
        let e = csv("1,2\n3,4\n5\n").unwrap_err();
        assert!(
            e.contains("ragged row: line 3 has 1 fields but line 1 has 2"),
            "{e}"
        );
        let e = csv("a,b\n1,2\n3,x\n").unwrap_err();
        assert!(e.contains("line 3, field 2"), "{e}");
    }

    #[test]
    fn missing_fields_say_neither_header_nor_data() {
        let read_missing = |t: &str| read(t.as_bytes(), HeaderRule::Auto, f32_or_missing_field);
        // Headers with a sodium column or a blank index name.
        for text in ["Na,K,Cl\n1,2,3\n", ",a,b\n1,2,3\n"] {
            let t = read_missing(text).unwrap();
            assert_eq!(t.data.nrows(), 1, "{text}");
        }
        // A first row of numbers and missing values is data.
        for text in ["NA,NA,NA\n1,2,3\n", "NA,2,\n1,2,3\n", "NA,nan,1\n1,2,3\n"] {
            let t = read_missing(text).unwrap();
            assert_eq!(t.data.nrows(), 2, "{text}");
            assert!(t.data[[0, 0]].is_nan());
        }
        // Numbers beside text are neither.
        assert!(read_missing("a,1,NA\n1,2,3\n").is_err());
        // Without missing values allowed, NA is text.
        let t = csv("NA,K\n1,2\n").unwrap();
        assert_eq!(t.data.nrows(), 1);
    }

    #[test]
    fn csv_text_round_trips_f32() {
        for v in [0.1f32, 1.0 / 3.0, 1e-30, 3.4e38, -0.0, 16_777_217.0] {
            let mut s = Vec::new();
            v.write_csv(&mut s).unwrap();
            let back: f32 = std::str::from_utf8(&s).unwrap().parse().unwrap();
            assert_eq!(back.to_bits(), v.to_bits(), "{v}");
        }
    }
}
