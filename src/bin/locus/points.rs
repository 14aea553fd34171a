//! Points centred before they are rounded to `f32`, as the Python package
//! centres float64 arrays: points read as `f64` (a float64 `.npy`, CSV
//! text) are moved to their keys' mean in `f64`, then rounded once, so a
//! common offset costs no accuracy. `1e7 + x` rounded to `f32` keeps one
//! significant digit of `x` (the spacing of `f32` near 10⁷ is 1);
//! `x − mean` keeps seven.
//!
//! Only ops that a common shift of keys and queries leaves unchanged are
//! centred (distances, kernels, densities, neighbours, local means of
//! values; not the haversine metric, not attention; MeanShift's binned
//! seeds by whole cells only, [`Shift`]); an output that is
//! itself a position (the keys' own local mean, MeanShift's modes, local
//! PCA's means, imputed or generated points) gets the offset added back in
//! `f64` and is written in the precision the points came in: float64 to a
//! `.npy` where a point file was read as `f64` ([`write_positions`]).
//! Files of `f32` points are used as they are when every point file of
//! the command is `f32`: rounding them loses nothing. Data already near 0
//! is not moved ([`Offset::of`]), so its `f32` entries, and every result,
//! are as without centring.

use std::path::Path;

use ndarray::{Array2, ArrayView2, Zip};

use crate::error::{CliError, CliResult};
use crate::io::{self, Input, Points};

/// Per column, what was subtracted from the points in `f64` before they
/// were rounded to `f32`.
#[derive(Debug, Clone, PartialEq)]
pub struct Offset(Vec<f64>);

impl Offset {
    /// Where to centre `keys`: per column, the mean rounded to a multiple
    /// of the power of two at or above the column's range (a constant
    /// column: its value). The centred points are then within about one
    /// range of 0, as accurate in `f32` as around their mean. A column is
    /// moved only where that gains precision (its largest magnitude at
    /// least halves), so data already near 0 (a mean within half that
    /// power of two, or values in `[0, 1)`) is not moved at all.
    /// `missing`: NaN entries are left out (a column without any value:
    /// 0). `None` where nothing moves. The entries are finite (or
    /// NaN with `missing`): the reader refused any other.
    pub fn of<T: Copy + Into<f64>>(keys: ArrayView2<'_, T>, missing: bool) -> Option<Offset> {
        let d = keys.ncols();
        let seen = |v: f64| !(missing && v.is_nan());
        // Row by row (the points are row-major): the least and largest
        // value and the count of each column, then the sum of each value's
        // excess over its column's least, so the mean neither overflows
        // near the ends of the f64 range nor misses a constant column's
        // own value.
        let (mut count, mut lo, mut hi) = (
            vec![0usize; d],
            vec![f64::INFINITY; d],
            vec![f64::NEG_INFINITY; d],
        );
        let values = || {
            keys.rows()
                .into_iter()
                .map(|row| row.into_iter().map(|&v| v.into()))
        };
        for row in values() {
            for (c, v) in row.enumerate().filter(|&(_, v)| seen(v)) {
                count[c] += 1;
                lo[c] = lo[c].min(v);
                hi[c] = hi[c].max(v);
            }
        }
        let mut excess = vec![0.0f64; d];
        for row in values() {
            for (c, v) in row.enumerate().filter(|&(_, v)| seen(v)) {
                excess[c] += v - lo[c];
            }
        }
        let offset: Vec<f64> = (0..d)
            .map(|c| {
                if count[c] == 0 {
                    return 0.0;
                }
                let mean = lo[c] + excess[c] / count[c] as f64;
                let width = hi[c] - lo[c];
                let o = if width > 0.0 {
                    let step = width.log2().ceil().exp2();
                    (mean / step).round_ties_even() * step
                } else {
                    mean
                };
                // Moved only where that gains precision: the column's
                // largest magnitude at least halves (values in [0, 1),
                // whose mean rounds to 1, stay where they are).
                let big = lo[c].abs().max(hi[c].abs());
                let moved = (lo[c] - o).abs().max((hi[c] - o).abs());
                if moved <= big / 2.0 { o + 0.0 } else { 0.0 }
            })
            .collect();
        (offset.iter().all(|o| o.is_finite()) && offset.iter().any(|&o| o != 0.0))
            .then_some(Offset(offset))
    }

    /// The offset rounded to whole cells of side `side` (`None` where that
    /// moves nothing, or `side` is not a positive number).
    pub fn in_whole_cells(&self, side: f64) -> Option<Offset> {
        if !(side > 0.0 && side.is_finite()) {
            return None;
        }
        let moved: Vec<f64> = self
            .0
            .iter()
            .map(|o| (o / side).round_ties_even() * side)
            .collect();
        (moved.iter().all(|o| o.is_finite()) && moved.iter().any(|&o| o != 0.0))
            .then_some(Offset(moved))
    }

    /// The offset of each column.
    pub fn columns(&self) -> &[f64] {
        &self.0
    }

    /// Positions computed on the centred points, moved back in place:
    /// `a + offset` in `f64`.
    pub fn restore(&self, a: &mut Array2<f64>) {
        for mut row in a.rows_mut() {
            row.iter_mut().zip(&self.0).for_each(|(v, o)| *v += o);
        }
    }
}

/// How a command's points were rounded: the offset subtracted (`None`:
/// none), and whether any point file was read as `f64` (positions then go
/// back to a `.npy` as float64, the precision they came in).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Centring {
    offset: Option<Offset>,
    wide: bool,
}

impl Centring {
    /// The offset subtracted, if any.
    pub fn offset(&self) -> Option<&Offset> {
        self.offset.as_ref()
    }
}

/// Which common shifts of its points leave an op's results unchanged
/// (any, for every metric but haversine): the points are centred only by
/// such a shift.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Shift {
    /// Distances, kernels, densities, neighbours, local means.
    Invariant,
    /// Whole cells of this side only: MeanShift's binned seeds lie on a
    /// grid of cells from the origin.
    WholeCells(f64),
    /// None: the haversine metric (latitude and longitude are not a
    /// translation space); binned seeds on cells not known before the
    /// run. Points are rounded as they are.
    Matters,
}

impl Shift {
    /// [`Shift::Matters`] for the haversine metric.
    pub fn of_metric(metric: locus::Metric) -> Shift {
        match metric {
            locus::Metric::Haversine => Shift::Matters,
            _ => Shift::Invariant,
        }
    }
}

/// Point files of one command, read and rounded to `f32` together.
pub struct Loaded<const N: usize> {
    /// What was subtracted, and the points' precision.
    pub centring: Centring,
    /// The keys.
    pub keys: Input,
    /// The other point files, in the order asked (`None`: not given).
    pub others: [Option<Input>; N],
}

/// Reads the keys (`keys`: option and path) and the other point files of
/// a command (queries, seeds, …; `None` when not given), each of the keys'
/// dimension, and rounds them to `f32`: centred on the keys' mean in `f64`
/// where any of them was read as `f64` and `shift` allows it
/// ([`Offset::of`]). `missing`: NaN marks a missing entry (imputation).
///
/// # Errors
/// As [`io::read_points`], the first in the order given; a file whose
/// columns differ from the keys'; a value too large for `f32` as it is,
/// or even centred.
pub fn load<const N: usize>(
    keys: (&'static str, &Path),
    others: [(&'static str, Option<&Path>); N],
    shift: Shift,
    missing: bool,
) -> CliResult<Loaded<N>> {
    let (flag, path) = keys;
    let key_points = io::read_points(flag, path, missing)?;
    let other_points = first_error(others.map(|(flag, path)| {
        path.map(|p| io::read_points(flag, p, missing).map(|r| (flag, p, r)))
            .transpose()
    }))?;
    let all: Vec<&Points> = std::iter::once(&key_points)
        .chain(other_points.iter().flatten().map(|(_, _, p)| p))
        .collect();
    let centring = centring_for(&key_points, &all, shift, missing);
    let offset = centring.offset();
    let keys = Input {
        flag,
        path: path.to_path_buf(),
        data: rounded(flag, path, key_points, offset)?,
    };
    let others = first_error(other_points.map(|p| {
        p.map(|(flag, path, p)| {
            // The dimension first: the offset is one per key column.
            let (rows, cols) = p.dim();
            if cols != keys.cols() {
                return Err(CliError::input(format!(
                    "shape mismatch: {flag} {} ({rows}×{cols}) and {keys} must have the same number of columns",
                    path.display()
                )));
            }
            let data = rounded(flag, path, p, offset)?;
            Ok(Input {
                flag,
                path: path.to_path_buf(),
                data,
            })
        })
        .transpose()
    }))?;
    Ok(Loaded {
        centring,
        keys,
        others,
    })
}

/// [`load`] of the keys (`--keys`) and optional queries (`--queries`):
/// the centring, the keys, the queries.
///
/// # Errors
/// As [`load`].
pub fn keys_and_queries(
    keys: &Path,
    queries: Option<&Path>,
    shift: Shift,
) -> CliResult<(Centring, Input, Option<Input>)> {
    let Loaded {
        centring,
        keys,
        others: [queries],
    } = load(("--keys", keys), [("--queries", queries)], shift, false)?;
    Ok((centring, keys, queries))
}

/// How to round the points `all` of a command (the keys among them):
/// centred on [`Offset::of`] the keys where any of them was read as `f64`
/// and `shift` allows it; not where all are `f32` (rounding them loses
/// nothing).
pub fn centring_for(keys: &Points, all: &[&Points], shift: Shift, missing: bool) -> Centring {
    let wide = all.iter().any(|p| p.is_wide());
    let offset = match keys {
        _ if shift == Shift::Matters || !wide => None,
        Points::Wide { values, .. } => Offset::of(values.view(), missing),
        Points::Narrow(a) => Offset::of(a.view(), missing),
    };
    let offset = match shift {
        Shift::WholeCells(side) => offset.and_then(|o| o.in_whole_cells(side)),
        _ => offset,
    };
    Centring { offset, wide }
}

/// Each `Ok` result, or the first error.
fn first_error<T, const N: usize>(results: [CliResult<Option<T>>; N]) -> CliResult<[Option<T>; N]> {
    let mut failed = None;
    let out = results.map(|r| {
        r.unwrap_or_else(|e| {
            failed.get_or_insert(e);
            None
        })
    });
    failed.map_or(Ok(out), Err)
}

/// `points` as `f32`: minus `offset` in `f64` then rounded once, or as
/// read (an `f32` file as it is; CSV text correctly rounded; `f64` values
/// rounded once).
///
/// # Errors
/// A value too large for `f32` as it is, or even centred, naming the
/// entry (and the CSV line).
pub fn rounded(
    flag: &str,
    path: &Path,
    points: Points,
    offset: Option<&Offset>,
) -> CliResult<Array2<f32>> {
    to_f32(points, offset).map_err(|t| {
        let centred = offset.map_or(String::new(), |_| {
            " even centred on the keys' mean (the points span more than f32 holds)".to_string()
        });
        CliError::input(format!(
            "{flag} {}: value {:e} at {} is too large for f32{centred}",
            path.display(),
            t.value,
            io::entry(t.pos, &t.shape, t.lines.as_deref())
        ))
    })
}

/// An entry too large for `f32` (as it is, or once centred).
#[derive(Debug)]
pub struct TooLarge {
    /// Its row-major position among the points.
    pub pos: usize,
    /// Its value as given.
    pub value: f64,
    /// The points' rows and columns.
    pub shape: [usize; 2],
    /// CSV: the text line of each row.
    pub lines: Option<Vec<usize>>,
}

/// `points` as `f32` ([`rounded`] without the message): `f32` points
/// without an offset as they are; CSV text without an offset correctly
/// rounded from the text; otherwise `values − offset` in `f64` (the values
/// without one), rounded once. NaN stays NaN.
///
/// # Errors
/// The first entry whose result is too large for `f32`.
pub fn to_f32(points: Points, offset: Option<&Offset>) -> Result<Array2<f32>, TooLarge> {
    let (values, rounded, lines) = match points {
        Points::Narrow(a) => match offset {
            None => return Ok(a),
            Some(_) => (a.mapv(f64::from), None, None),
        },
        Points::Wide {
            values,
            rounded,
            lines,
        } => (values, rounded, lines),
    };
    let (rows, cols) = values.dim();
    let too_large = |pos: usize, lines: Option<Vec<usize>>| TooLarge {
        pos,
        value: values.iter().nth(pos).copied().unwrap_or(f64::INFINITY),
        shape: [rows, cols],
        lines,
    };
    if let (None, Some(r)) = (offset, rounded) {
        // CSV: each value rounded from its text.
        return match r.iter().position(|x| x.is_infinite()) {
            Some(pos) => Err(too_large(pos, lines)),
            None => Ok(r),
        };
    }
    let mut out = Array2::<f32>::zeros((rows, cols));
    match offset {
        Some(o) => Zip::from(out.rows_mut())
            .and(values.rows())
            .for_each(|mut to, from| {
                for ((t, &v), &c) in to.iter_mut().zip(from).zip(o.columns()) {
                    *t = (v - c) as f32;
                }
            }),
        None => Zip::from(&mut out)
            .and(&values)
            .for_each(|t, &v| *t = v as f32),
    }
    let flat = out.as_slice().expect("standard layout"); // ok: made above
    match flat.iter().position(|x| x.is_infinite()) {
        Some(pos) => Err(too_large(pos, lines)),
        None => Ok(out),
    }
}

/// Writes positions computed on the points `centring` describes, in the
/// precision the points came in: with an offset, moved back in `f64` and
/// written as float64 (`.npy` `<f8`, the shortest `.csv` text of each
/// `f64`); without one, a `.npy` as float64 where a point file was read
/// as `f64` and as `f32` otherwise, a `.csv` as every output (`f32` text).
/// `given`: points as read, written in place of the positions where they
/// are not NaN (imputation's observed entries; the output is then `f64`,
/// so they keep every digit; `f32` ones in a `.csv` as their shortest
/// decimal).
pub fn write_positions(
    flag: &str,
    path: &Path,
    positions: ArrayView2<'_, f32>,
    centring: &Centring,
    given: Option<&Points>,
) -> CliResult<()> {
    let npy = io::Format::of(flag, path)? == io::Format::Npy;
    if centring.offset.is_none() && !(centring.wide && npy) && given.is_none() {
        return io::write_array(flag, path, positions);
    }
    // Text: each f32 result as its shortest decimal (its precision), then
    // moved back, rather than every binary digit of it.
    let positions = match npy {
        true => positions.mapv(f64::from),
        false => positions.mapv(as_written),
    };
    let mut out = positions;
    if let Some(o) = &centring.offset {
        o.restore(&mut out);
    }
    let given = given.map(|g| match (g, npy) {
        (Points::Narrow(x), false) => x.mapv(as_written),
        (g, _) => g.to_f64(),
    });
    if let Some(g) = &given {
        Zip::from(&mut out).and(g).for_each(|v, &g| {
            if !g.is_nan() {
                *v = g;
            }
        });
    }
    io::write_array(flag, path, out.view())
}

/// The decimal an `f32` reads as (its shortest text), in `f64`: `0.7f32`
/// is `0.7`, not `0.699999988079071`.
pub fn as_written(x: f32) -> f64 {
    format!("{x}").parse().unwrap_or(f64::from(x))
}

/// [`write_positions`] to `path` when the optional output was given.
pub fn write_positions_if(
    flag: &str,
    path: Option<&Path>,
    positions: ArrayView2<'_, f32>,
    centring: &Centring,
) -> CliResult<()> {
    path.map_or(Ok(()), |p| {
        write_positions(flag, p, positions, centring, None)
    })
}

/// Where a plot draws the origin of the centred points: the offset of
/// the first two coordinates (0 where nothing was moved), added in `f64`
/// to each point drawn.
pub fn plot_origin(centring: &Centring) -> [f64; 2] {
    let o = centring.offset.as_ref().map_or(&[][..], |o| o.columns());
    [
        o.first().copied().unwrap_or(0.0),
        o.get(1).copied().unwrap_or(0.0),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    #[test]
    fn the_offset_is_the_mean_on_a_power_of_two_grid() {
        // Range 2 → step 2: the mean 1e7 + 0.5 rounds to 1e7.
        let x = array![[1e7 - 0.5, 3.0], [1e7 + 1.5, 3.0]];
        let o = Offset::of(x.view(), false).unwrap();
        assert_eq!(o.columns(), &[1e7, 3.0]);
        // Near 0 (mean within half a step): nothing moves.
        assert_eq!(Offset::of(array![[-1.0], [1.5]].view(), false), None);
        // Nor where moving gains nothing: values in [0, 1) whose mean
        // rounds to 1, tiny values beside ones (their f32 spacing near
        // -1 would be coarser than near 0).
        assert_eq!(Offset::of(array![[0.1], [0.9], [0.7]].view(), false), None);
        let tiny = array![[1e-7], [2e-7], [1.0], [1.0], [1.0]];
        assert_eq!(Offset::of(tiny.view(), false), None);
        // No -0.0 beside a column that moves.
        let z = array![[-0.5, 1e7], [0.25, 1e7 + 1.0]];
        let o = Offset::of(z.view(), false).unwrap();
        assert!(o.columns()[0] == 0.0 && o.columns()[0].is_sign_positive());
        // Missing entries are left out; an empty column is 0.
        let m = array![[f64::NAN, 5e6], [f64::NAN, 5e6 + 1.0]];
        let o = Offset::of(m.view(), true).unwrap();
        assert_eq!(o.columns(), &[0.0, 5e6]);
        // A constant column far out: its value, exactly.
        let c = Array2::from_elem((1000, 1), 1e306);
        assert_eq!(Offset::of(c.view(), false).unwrap().columns(), &[1e306]);
        assert_eq!(as_written(0.7), 0.7);
        assert!(as_written(f32::NAN).is_nan());
        // Binned seeds: whole cells only.
        assert_eq!(o.in_whole_cells(3.0).unwrap().columns(), &[0.0, 5e6 + 1.0]);
        assert_eq!(Offset(vec![1.0]).in_whole_cells(4.0), None);
        assert_eq!(o.in_whole_cells(0.0), None);
        // Restored positions carry the offset in f64.
        let mut back = array![[1.0, 0.25]];
        o.restore(&mut back);
        assert_eq!(back, array![[1.0, 5e6 + 0.25]]);
    }
}
