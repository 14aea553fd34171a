//! The `.npy` header (format versions 1, 2 and 3): its magic, version
//! and length checked against the file, the dictionary parsed as the
//! Python literal it is (either quote style, any spacing, every key
//! exactly once), the dtype and shape it names; and the errors of the
//! whole reader.
//!
//! Imports: none of the reader's (`mod.rs` reads the data after it).

use std::fmt;
use std::io::{self, Read};

/// The largest header accepted (NumPy itself refuses more than 10 000
/// bytes by default).
const MAX_HEADER: usize = 1 << 20;

/// What a `.npy` file failed on.
#[derive(Debug)]
pub enum NpyError {
    /// Not a `.npy` file, or a header or size that does not hold together.
    Format(String),
    /// A dtype this reader does not take for this use.
    Dtype(String),
    /// An element that cannot be converted: the reason, and its index
    /// (C order, one entry per axis of the file's shape).
    Value {
        /// The element's index.
        at: Vec<usize>,
        /// What is wrong with it.
        reason: String,
    },
    /// The array does not fit in memory.
    Alloc(String),
    /// Reading failed.
    Io(io::Error),
}

impl fmt::Display for NpyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NpyError::Format(m) => write!(f, "not a valid .npy file: {m}"),
            NpyError::Dtype(m) | NpyError::Alloc(m) => f.write_str(m),
            NpyError::Value { at, reason } => write!(f, "{reason} at index {at:?}"),
            NpyError::Io(e) => write!(f, "cannot read: {e}"),
        }
    }
}

impl From<io::Error> for NpyError {
    fn from(e: io::Error) -> Self {
        match e.kind() {
            io::ErrorKind::UnexpectedEof => {
                NpyError::Format("the file ends before its header says it does".into())
            }
            _ => NpyError::Io(e),
        }
    }
}

fn format_err<T>(msg: impl Into<String>) -> Result<T, NpyError> {
    Err(NpyError::Format(msg.into()))
}

/// The kind of an element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// IEEE float (`f`, 2, 4 or 8 bytes).
    Float,
    /// Signed integer (`i`).
    Int,
    /// Unsigned integer (`u`).
    UInt,
    /// Boolean (`b`, one byte).
    Bool,
}

/// An element type: kind, size in bytes, byte order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dtype {
    /// Float, signed, unsigned or bool.
    pub kind: Kind,
    /// Bytes per element.
    pub size: usize,
    /// Stored big-endian.
    pub big_endian: bool,
}

impl Dtype {
    /// Parses a NumPy type string such as `<f4`, `|u1`, `>i8`.
    fn parse(descr: &str) -> Result<Dtype, NpyError> {
        let unsupported = || {
            Err(NpyError::Dtype(format!(
                "unsupported dtype {descr:?} (expected a float or integer type)"
            )))
        };
        let mut chars = descr.chars();
        let (order, rest) = match chars.next() {
            Some(c @ ('<' | '>' | '|' | '=')) => (c, chars.as_str()),
            _ => (cfg_endian(), descr),
        };
        let mut rest_chars = rest.chars();
        let kind = match rest_chars.next() {
            Some('f') => Kind::Float,
            Some('i') => Kind::Int,
            Some('u') => Kind::UInt,
            Some('b') => Kind::Bool,
            _ => return unsupported(),
        };
        let Ok(size) = rest_chars.as_str().parse::<usize>() else {
            return unsupported();
        };
        let valid = match kind {
            Kind::Float => matches!(size, 2 | 4 | 8),
            Kind::Int | Kind::UInt => matches!(size, 1 | 2 | 4 | 8),
            Kind::Bool => size == 1,
        };
        if !valid {
            return unsupported();
        }
        let big_endian = match order {
            '>' => true,
            '=' => cfg!(target_endian = "big"),
            _ => false,
        };
        Ok(Dtype {
            kind,
            size,
            big_endian,
        })
    }
}

fn cfg_endian() -> char {
    if cfg!(target_endian = "big") {
        '>'
    } else {
        '<'
    }
}

/// A parsed `.npy` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The element type.
    pub dtype: Dtype,
    /// The type string as written.
    pub descr: String,
    /// Column-major data.
    pub fortran_order: bool,
    /// The shape (empty for a scalar).
    pub shape: Vec<usize>,
    /// Elements (the product of the shape).
    pub len: usize,
}

/// Reads the header from `r` (positioned at the start of the file) and
/// checks that the rest of the file, `file_len` bytes in all, holds exactly
/// the data the shape needs. `r` is left at the first data byte.
///
/// # Errors
/// [`NpyError::Format`] for anything malformed or inconsistent,
/// [`NpyError::Dtype`] for an element type that is not a number.
pub fn read_header(r: &mut impl Read, file_len: u64) -> Result<Header, NpyError> {
    let mut pre = [0u8; 8];
    if file_len < 10 {
        return format_err("the file is too short for a .npy header");
    }
    r.read_exact(&mut pre)?;
    if &pre[..6] != b"\x93NUMPY" {
        return format_err("no .npy magic string at the start");
    }
    let (len, start) = match pre[6] {
        1 => {
            let mut b = [0u8; 2];
            r.read_exact(&mut b)?;
            (usize::from(u16::from_le_bytes(b)), 10u64)
        }
        2 | 3 => {
            let mut b = [0u8; 4];
            r.read_exact(&mut b)?;
            let l = u32::from_le_bytes(b);
            (usize::try_from(l).unwrap_or(usize::MAX), 12u64)
        }
        v => return format_err(format!("unknown format version {v}.{}", pre[7])),
    };
    if len > MAX_HEADER {
        return format_err(format!(
            "header of {len} bytes (at most {MAX_HEADER} are accepted)"
        ));
    }
    if start + len as u64 > file_len {
        return format_err(format!(
            "header of {len} bytes but the file holds {}",
            file_len.saturating_sub(start)
        ));
    }
    let mut text = vec![0u8; len];
    r.read_exact(&mut text)?;
    // Version 3 is UTF-8, the others Latin-1; a valid header is ASCII.
    let Ok(text) = std::str::from_utf8(&text) else {
        return format_err("the header is not ASCII text");
    };
    let header = parse_dict(text)?;
    let have = file_len - start - len as u64;
    let need = (header.len as u64).checked_mul(header.dtype.size as u64);
    match need {
        Some(need) if need == have => Ok(header),
        Some(need) if need > have => format_err(format!(
            "truncated or corrupt: the header's shape {:?} needs {need} bytes of data but the file holds {have}",
            header.shape
        )),
        Some(need) => format_err(format!(
            "corrupt: the header's shape {:?} needs {need} bytes of data but the file holds {have} (extra data after the array)",
            header.shape
        )),
        None => format_err(format!(
            "truncated or corrupt: the header's shape {:?} is larger than any file",
            header.shape
        )),
    }
}

/// Parses the header's Python dict literal:
/// `{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }`.
fn parse_dict(text: &str) -> Result<Header, NpyError> {
    let mut p = Parser {
        s: text.as_bytes(),
        i: 0,
    };
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    p.expect(b'{')?;
    loop {
        p.skip_ws();
        if p.eat(b'}') {
            break;
        }
        let key = p.string()?;
        p.skip_ws();
        p.expect(b':')?;
        p.skip_ws();
        let dup = match key.as_str() {
            "descr" => descr.replace(p.descr()?).is_some(),
            "fortran_order" => fortran.replace(p.boolean()?).is_some(),
            "shape" => shape.replace(p.tuple()?).is_some(),
            other => return format_err(format!("unexpected header key {other:?}")),
        };
        if dup {
            return format_err(format!("header key {key:?} given twice"));
        }
        p.skip_ws();
        if p.eat(b'}') {
            break;
        }
        p.expect(b',')?;
    }
    p.skip_ws();
    if p.i != p.s.len() {
        return format_err("unexpected text after the header's dict");
    }
    let (Some(descr), Some(fortran_order), Some(shape)) = (descr, fortran, shape) else {
        return format_err("the header lacks one of 'descr', 'fortran_order', 'shape'");
    };
    let dtype = Dtype::parse(&descr)?;
    let len = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| {
            NpyError::Format(format!(
                "truncated or corrupt: the header's shape {shape:?} is larger than any file"
            ))
        })?;
    Ok(Header {
        dtype,
        descr,
        fortran_order,
        shape,
        len,
    })
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn skip_ws(&mut self) {
        while self.s.get(self.i).is_some_and(u8::is_ascii_whitespace) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.s.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: u8) -> Result<(), NpyError> {
        if self.eat(c) {
            return Ok(());
        }
        format_err(format!(
            "header: expected '{}' at byte {}",
            char::from(c),
            self.i
        ))
    }

    /// A quoted string (either quote; no escapes in a valid header).
    fn string(&mut self) -> Result<String, NpyError> {
        let q = match self.s.get(self.i) {
            Some(&q @ (b'\'' | b'"')) => q,
            _ => return format_err(format!("header: expected a quoted key at byte {}", self.i)),
        };
        let from = self.i + 1;
        let Some(len) = self.s[from..].iter().position(|&c| c == q) else {
            return format_err("header: unterminated string");
        };
        self.i = from + len + 1;
        let s = &self.s[from..from + len];
        if s.contains(&b'\\') {
            return format_err("header: escapes in strings are not supported");
        }
        Ok(String::from_utf8_lossy(s).into_owned())
    }

    /// A type string; a structured dtype (a list) is refused.
    fn descr(&mut self) -> Result<String, NpyError> {
        if self.s.get(self.i) == Some(&b'[') {
            return Err(NpyError::Dtype(
                "unsupported dtype: a structured array (expected a float or integer type)".into(),
            ));
        }
        self.string()
    }

    fn boolean(&mut self) -> Result<bool, NpyError> {
        for (word, v) in [(&b"True"[..], true), (&b"False"[..], false)] {
            if self.s[self.i..].starts_with(word) {
                self.i += word.len();
                return Ok(v);
            }
        }
        format_err("header: 'fortran_order' must be True or False")
    }

    /// A tuple of non-negative integers, e.g. `()`, `(5,)`, `(3, 2)`.
    fn tuple(&mut self) -> Result<Vec<usize>, NpyError> {
        self.expect(b'(')?;
        let mut dims = Vec::new();
        loop {
            self.skip_ws();
            if self.eat(b')') {
                return Ok(dims);
            }
            let from = self.i;
            while self.s.get(self.i).is_some_and(u8::is_ascii_digit) {
                self.i += 1;
            }
            let digits = std::str::from_utf8(&self.s[from..self.i]).unwrap_or_default();
            if digits.is_empty() {
                return format_err("header: 'shape' must be a tuple of non-negative integers");
            }
            // Python 2 wrote long integers with a suffix.
            self.eat(b'L');
            let Ok(d) = digits.parse::<usize>() else {
                return format_err(format!(
                    "truncated or corrupt: shape dimension {digits} is larger than any file"
                ));
            };
            dims.push(d);
            self.skip_ws();
            if self.eat(b')') {
                return Ok(dims);
            }
            self.expect(b',')?;
        }
    }
}

/// The length in bytes of the `.npy` file at the start of `bytes` (header
/// and data), so that files sent one after the other can be split: the
/// header is parsed and checked as [`read_header`] does, and its data must
/// lie within `bytes`.
///
/// # Errors
/// As [`read_header`]; data that would run past the end of `bytes`.
pub fn part_len(bytes: &[u8]) -> Result<usize, NpyError> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return format_err("no .npy magic string at the start");
    }
    let (len, start): (usize, usize) = match bytes[6] {
        1 => (usize::from(u16::from_le_bytes([bytes[8], bytes[9]])), 10),
        2 | 3 if bytes.len() >= 12 => {
            let l = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
            (usize::try_from(l).unwrap_or(usize::MAX), 12)
        }
        v => return format_err(format!("unknown format version {v}.{}", bytes[7])),
    };
    let Some(text) = start
        .checked_add(len)
        .filter(|&end| len <= MAX_HEADER && end <= bytes.len())
        .map(|end| &bytes[start..end])
    else {
        return format_err(format!("a header of {len} bytes does not fit"));
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return format_err("the header is not ASCII text");
    };
    let header = parse_dict(text)?;
    (header.len as u64)
        .checked_mul(header.dtype.size as u64)
        .and_then(|need| u64::try_from(start + len).ok()?.checked_add(need))
        .filter(|&end| end <= bytes.len() as u64)
        .map(|end| end as usize)
        .ok_or_else(|| {
            NpyError::Format(format!(
                "truncated or corrupt: the header's shape {:?} needs more data than was sent",
                header.shape
            ))
        })
}
