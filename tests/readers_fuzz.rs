//! Property tests of the command-line tool's `.npy` and CSV readers:
//! every input gives a typed error or the right array, never a panic, and
//! nothing is allocated beyond what the file can hold.
//!
//! CI runs proptest's default number of cases (256 per property). For a
//! long local run, raise it:
//! `PROPTEST_CASES=200000 cargo test --release --test readers_fuzz`.

#[path = "../src/bin/locus/delimited.rs"]
#[allow(dead_code)]
mod delimited;
#[path = "../src/bin/locus/npy/mod.rs"]
mod npy;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use ndarray::{ArrayD, IxDyn};
use proptest::prelude::*;

use delimited::HeaderRule;

/// The system allocator, recording the largest single allocation the
/// current thread asks for while recording is on.
struct Watching;

thread_local! {
    static LARGEST: Cell<Option<usize>> = const { Cell::new(None) };
}

fn note(size: usize) {
    // `try_with`: the thread-local may be gone while a thread exits.
    let _ = LARGEST.try_with(|l| {
        if let Some(m) = l.get() {
            l.set(Some(m.max(size)));
        }
    });
}

// SAFETY: every call is forwarded to `System` unchanged.
unsafe impl GlobalAlloc for Watching {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Watching = Watching;

/// Runs `f`, returning its result and the largest allocation it made.
fn watched<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.with(|l| l.set(Some(0)));
    let out = f();
    let largest = LARGEST.with(|l| l.replace(None)).unwrap_or(0);
    (out, largest)
}

/// The most a read of `file_len` bytes may allocate at once: the array
/// (8 bytes per element at most, elements at least 1 byte each) or the
/// read buffer, whichever is larger, with room for small bookkeeping.
fn allowance(file_len: usize) -> usize {
    8 * file_len + 128 * 1024
}

/// A `.npy` file: the given header text, padded as NumPy pads it.
fn npy_file(version: u8, dict: &str, data: &[u8]) -> Vec<u8> {
    let pre = if version == 1 { 10 } else { 12 };
    let total = (pre + dict.len() + 1).div_ceil(64) * 64;
    let hlen = total - pre;
    let mut out = b"\x93NUMPY".to_vec();
    out.extend_from_slice(&[version, 0]);
    if version == 1 {
        out.extend_from_slice(&(hlen as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(hlen as u32).to_le_bytes());
    }
    out.extend_from_slice(dict.as_bytes());
    out.resize(out.len() + hlen - dict.len() - 1, b' ');
    out.push(b'\n');
    out.extend_from_slice(data);
    out
}

/// The header dict in one of the spellings writers use.
fn dict(descr: &str, fortran: bool, shape: &[usize], style: u8) -> String {
    let q = if style & 1 == 0 { '\'' } else { '"' };
    let colon = if style & 2 == 0 { ": " } else { " : " };
    let dims = match shape {
        [d] => format!("({d},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let fortran = if fortran { "True" } else { "False" };
    let items = [
        format!("{q}descr{q}{colon}{q}{descr}{q}"),
        format!("{q}fortran_order{q}{colon}{fortran}"),
        format!("{q}shape{q}{colon}{dims}"),
    ];
    let order: [usize; 3] = if style & 4 == 0 { [0, 1, 2] } else { [2, 0, 1] };
    let body = order
        .iter()
        .map(|&i| items[i].as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let trailing = if style & 8 == 0 { ", " } else { "" };
    format!("{{{body}{trailing}}}")
}

/// Element types, their type strings, and an element's bytes from an
/// integer value `v` (small enough for every type).
const DTYPES: [&str; 10] = ["f4", "f8", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8"];

fn encode(dtype: &str, v: i64, big: bool) -> Vec<u8> {
    let mut b = match dtype {
        "f4" => (v as f32).to_le_bytes().to_vec(),
        "f8" => (v as f64).to_le_bytes().to_vec(),
        "i1" => (v as i8).to_le_bytes().to_vec(),
        "i2" => (v as i16).to_le_bytes().to_vec(),
        "i4" => (v as i32).to_le_bytes().to_vec(),
        "i8" => v.to_le_bytes().to_vec(),
        "u1" => (v as u8).to_le_bytes().to_vec(),
        "u2" => (v as u16).to_le_bytes().to_vec(),
        "u4" => (v as u32).to_le_bytes().to_vec(),
        _ => (v as u64).to_le_bytes().to_vec(),
    };
    if big {
        b.reverse();
    }
    b
}

fn shapes() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0usize..6, 1..=3)
}

proptest! {
    /// Valid files in every spelling, dtype, byte order and memory order
    /// read back to the array that was written.
    #[test]
    fn npy_valid_files_read_back(
        shape in shapes(),
        dtype in prop::sample::select(DTYPES.to_vec()),
        big in any::<bool>(),
        fortran in any::<bool>(),
        style in 0u8..16,
        version in 1u8..=3,
        seed in any::<u64>(),
    ) {
        let len: usize = shape.iter().product();
        // Values in 0..100 fit every dtype.
        let values: Vec<i64> = (0..len as u64)
            .map(|i| ((seed.wrapping_mul(i + 1) >> 7) % 100) as i64)
            .collect();
        // The logical (C-order) array; the file holds it in file order.
        let want = ArrayD::from_shape_vec(IxDyn(&shape), values).unwrap();
        let stored: Vec<i64> = if fortran {
            want.t().iter().copied().collect()
        } else {
            want.iter().copied().collect()
        };
        let order = if dtype.ends_with('1') { '|' } else if big { '>' } else { '<' };
        let big = big && !dtype.ends_with('1');
        let descr = format!("{order}{dtype}");
        let data: Vec<u8> = stored.iter().flat_map(|&v| encode(dtype, v, big)).collect();
        let bytes = npy_file(version, &dict(&descr, fortran, &shape, style), &data);
        let labels = npy::i64_from_bytes(&bytes).unwrap();
        prop_assert_eq!(&labels, &want);
        let floats = npy::f32_from_bytes(&bytes);
        if dtype.starts_with('f') {
            prop_assert_eq!(floats.unwrap(), want.mapv(|v| v as f32));
        } else {
            prop_assert!(matches!(floats, Err(npy::NpyError::Dtype(_))));
        }
    }

    /// Any header text, any claimed shape, any truncation or extension:
    /// a typed error or an array whose data the file holds, never a panic
    /// and never an allocation beyond what the file can hold.
    #[test]
    fn npy_hostile_files_never_panic_or_overallocate(
        shape in prop::collection::vec(prop_oneof![
            0usize..5,
            Just(usize::MAX),
            Just(1usize << 40),
            Just(4_294_967_295usize),
        ], 0..4),
        dtype in prop::sample::select(vec!["<f4", "<f8", "|u1", "<i8", ">f4", "<c8", "O", "<U3", "<f16", "|b1", "<f2"]),
        style in 0u8..16,
        version in 0u8..=4,
        data_len in 0usize..200,
        cut in prop::option::of(any::<prop::sample::Index>()),
        junk in prop::collection::vec(any::<u8>(), 0..40),
        mutate in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let text = dict(dtype, false, &shape, style);
        let mut bytes = npy_file(version.clamp(1, 3), &text, &vec![0u8; data_len]);
        if version == 0 || version == 4 {
            bytes[6] = version;
        }
        // One byte changed anywhere, then cut or extended.
        let i = mutate.index(bytes.len());
        bytes[i] = byte;
        if let Some(cut) = cut {
            let keep = cut.index(bytes.len() + 1);
            bytes.truncate(keep);
        }
        bytes.extend_from_slice(&junk);
        let ((a, b), largest) = watched(|| {
            (npy::f32_from_bytes(&bytes), npy::i64_from_bytes(&bytes))
        });
        prop_assert!(largest <= allowance(bytes.len()), "allocated {largest} for {} bytes", bytes.len());
        if let Ok(a) = a {
            prop_assert!(a.len() * 2 <= bytes.len());
        }
        if let Ok(b) = b {
            prop_assert!(b.len() <= bytes.len());
        }
    }

    /// Arbitrary bytes: never a panic.
    #[test]
    fn npy_random_bytes_never_panic(mut bytes in prop::collection::vec(any::<u8>(), 0..300), magic in any::<bool>()) {
        if magic && bytes.len() >= 8 {
            bytes[..6].copy_from_slice(b"\x93NUMPY");
            bytes[6] = 1;
        }
        let (_, largest) = watched(|| (npy::f32_from_bytes(&bytes).is_ok(), npy::i64_from_bytes(&bytes).is_ok()));
        prop_assert!(largest <= allowance(bytes.len()));
    }

    /// Tables written in any of the accepted spellings (BOM, quotes,
    /// spaces, CRLF, comments, blank lines, a header) read back exactly.
    #[test]
    fn csv_tables_read_back(
        rows in 1usize..8,
        cols in 1usize..5,
        cells in prop::collection::vec(any::<f32>().prop_filter("finite", |v| v.is_finite()), 40),
        bom in any::<bool>(),
        crlf in any::<bool>(),
        quote in any::<bool>(),
        spaces in any::<bool>(),
        header in any::<bool>(),
        comment in any::<bool>(),
        blank in any::<bool>(),
    ) {
        let nl = if crlf { "\r\n" } else { "\n" };
        let mut text = String::new();
        if bom {
            text.push('\u{feff}');
        }
        if comment {
            text += "# written by a test";
            text += nl;
        }
        if header {
            let names: Vec<String> = (0..cols).map(|j| format!("col{j}")).collect();
            text += &names.join(",");
            text += nl;
        }
        for i in 0..rows {
            let fields: Vec<String> = (0..cols)
                .map(|j| {
                    let v = format!("{:?}", cells[(i * cols + j) % cells.len()]);
                    let v = if quote { format!("\"{v}\"") } else { v };
                    if spaces { format!(" {v} ") } else { v }
                })
                .collect();
            text += &fields.join(",");
            if comment {
                text += " # row";
            }
            text += nl;
            if blank {
                text += nl;
            }
        }
        let t = delimited::read(text.as_bytes(), HeaderRule::Auto, delimited::f32_field).unwrap();
        prop_assert_eq!(t.data.dim(), (rows, cols));
        for i in 0..rows {
            for j in 0..cols {
                prop_assert_eq!(t.data[[i, j]].to_bits(), cells[(i * cols + j) % cells.len()].to_bits());
            }
        }
        // Line numbers count every line of the text.
        let first = 1 + usize::from(comment) + usize::from(header);
        prop_assert_eq!(t.lines[0], first);
        // Forcing the reading of the first row agrees with detection, or
        // refuses the non-numbers.
        let forced = delimited::read(text.as_bytes(), if header { HeaderRule::Header } else { HeaderRule::NoHeader }, delimited::f32_field).unwrap();
        prop_assert_eq!(forced, t);
    }

    /// A first row that is partly numbers is never taken silently: an
    /// error naming its line and the options, unless one is given.
    #[test]
    fn csv_half_numeric_first_rows_are_refused(
        good in prop::collection::vec(-1e6f32..1e6, 1..4),
        bad in prop::sample::select(vec!["2x", "", "x", "1,2", "--", "nan?", "0x10"]),
        at in any::<prop::sample::Index>(),
    ) {
        let mut first: Vec<String> = good.iter().map(|v| format!("{v:?}")).collect();
        let bad_field = if bad.contains(',') { format!("\"{bad}\"") } else { bad.to_string() };
        first.insert(at.index(first.len() + 1), bad_field);
        let cols = first.len();
        let second = vec!["1"; cols].join(",");
        let text = format!("{}\n{second}\n", first.join(","));
        let e = delimited::read(text.as_bytes(), HeaderRule::Auto, delimited::f32_field).unwrap_err();
        prop_assert!(e.contains("line 1") && e.contains("--header") && e.contains("--no-header"), "{}", e);
        let t = delimited::read(text.as_bytes(), HeaderRule::Header, delimited::f32_field).unwrap();
        prop_assert_eq!(t.data.dim(), (1, cols));
        prop_assert!(delimited::read(text.as_bytes(), HeaderRule::NoHeader, delimited::f32_field).is_err());
    }

    /// Arbitrary bytes and arbitrary text: a typed error or a table, never
    /// a panic; every row has the same width.
    #[test]
    fn csv_random_input_never_panics(
        bytes in prop::collection::vec(any::<u8>(), 0..200),
        text in "[0-9eE+\\-., \"#\\n\\r\\tinfa]{0,120}",
        rule in prop::sample::select(vec![HeaderRule::Auto, HeaderRule::Header, HeaderRule::NoHeader]),
    ) {
        for input in [bytes.as_slice(), text.as_bytes()] {
            let (r, largest) = watched(|| delimited::read(input, rule, delimited::f32_field));
            prop_assert!(largest <= allowance(input.len()));
            if let Ok(t) = r {
                prop_assert_eq!(t.lines.len(), t.data.nrows());
            }
            let _ = delimited::read(input, rule, delimited::i64_field);
        }
    }
}

#[test]
fn npy_forged_headers_from_the_field_are_refused() {
    // Double-quoted keys, a space before the colon, a repeated key: each
    // once slipped past a size check and asked for 4 TB.
    let huge = "(100000000000, 10)";
    for text in [
        format!("{{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": {huge}}}"),
        format!("{{'descr': '<f4', 'fortran_order': False, 'shape' : {huge}, }}"),
        format!("{{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), 'shape': {huge}, }}"),
        format!("{{'shape': {huge}, 'descr': '<f4', 'fortran_order': False}}"),
    ] {
        let bytes = npy_file(1, &text, &[0u8; 16]);
        let (r, largest) = watched(|| npy::f32_from_bytes(&bytes));
        let e = r.unwrap_err().to_string();
        assert!(
            e.contains("truncated or corrupt") || e.contains("given twice"),
            "{text}: {e}"
        );
        assert!(largest <= allowance(bytes.len()), "{text}: {largest}");
    }
}

#[test]
fn csv_first_rows_that_once_were_dropped() {
    let read = |t: &str| delimited::read(t.as_bytes(), HeaderRule::Auto, delimited::f32_field);
    // A byte-order mark before numbers: data, not a header.
    assert_eq!(read("\u{feff}1,2\n3,4\n").unwrap().data.nrows(), 2);
    // An empty cell or a typo in the first row: an error naming line 1.
    for t in ["1,\n3,4\n", "1,2x\n3,4\n", "x,2024\n3,4\n"] {
        let e = read(t).unwrap_err();
        assert!(e.contains("line 1"), "{t:?}: {e}");
    }
    // Quoted numbers are numbers.
    assert_eq!(
        read("\"1\",\"2\"\n3,\"4\"\n").unwrap().data,
        ndarray::array![[1.0f32, 2.0], [3.0, 4.0]]
    );
}
