//! What each op takes and answers, declared once: the handlers refuse the
//! parameters an op does not take by [`params`], and `openapi` describes
//! the requests and answers from [`params`] and [`answer`]. A test runs
//! every op and checks that its answer has exactly the declared fields, of
//! the declared kinds, in the declared order.
//!
//! Imports: `super::wire`.

use super::wire::{Answer, Field};

/// The routes that compute: the six query ops on a set, and MeanShift.
pub const OPS: [&str; 7] = [
    "local-mean",
    "row-states",
    "density",
    "log-density",
    "classify",
    "knn",
    "mean-shift",
];

/// Every parameter a query op may take (JSON body or query string).
pub const PARAMS: [&str; 6] = ["kernel", "bandwidth", "blocks", "degree", "k", "max_iter"];

/// The parameters `op` takes (a subset of [`PARAMS`]).
pub fn params(op: &str) -> &'static [&'static str] {
    match op {
        "knn" => &["k"],
        "local-mean" => &["kernel", "bandwidth", "blocks", "degree"],
        "mean-shift" => &["kernel", "bandwidth", "blocks", "max_iter"],
        _ => &["kernel", "bandwidth", "blocks"],
    }
}

/// The JSON field of an op's points: `points` for MeanShift, `queries`
/// for the ops on a set.
pub fn points_field(op: &str) -> &'static str {
    if op == "mean-shift" {
        "points"
    } else {
        "queries"
    }
}

/// The kind of an answer's field (as [`Field`]'s variants).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Numbers written from `f32` (an empty neighbourhood's NaN as `null`).
    F32,
    /// Numbers written from `f64` (NaN as `null`).
    F64,
    /// Positions: written from `f32`, or from `f64` where the points were
    /// centred before rounding and the positions are moved back.
    Position,
    /// Integers.
    I64,
    /// A non-negative count.
    Count,
    /// A number.
    Number,
    /// A boolean.
    Flag,
}

/// One declared field of an answer.
#[derive(Debug, Clone, Copy)]
pub struct FieldSpec {
    /// Its name.
    pub name: &'static str,
    /// Its kind.
    pub kind: Kind,
    /// Its axes (0 for a scalar).
    pub rank: usize,
    /// Whether every answer has it (or only some: degree 1's slopes).
    pub always: bool,
    /// What it is (the description's text).
    pub about: &'static str,
}

const fn f(name: &'static str, kind: Kind, rank: usize, about: &'static str) -> FieldSpec {
    FieldSpec {
        name,
        kind,
        rank,
        always: true,
        about,
    }
}

const fn some(name: &'static str, kind: Kind, rank: usize, about: &'static str) -> FieldSpec {
    FieldSpec {
        name,
        kind,
        rank,
        always: false,
        about,
    }
}

use Kind::{Count, F32, F64, Flag, I64, Number, Position};

/// The fields of `op`'s answer, in the order they are written.
pub fn answer(op: &str) -> &'static [FieldSpec] {
    match op {
        "local-mean" => {
            const A: &[FieldSpec] = &[
                f(
                    "values",
                    F32,
                    2,
                    "the local means (degree 1: the fitted values), M×q",
                ),
                some("slopes", F32, 3, "degree 1: the local slopes, M×q×d"),
                f(
                    "empty_rows",
                    Count,
                    0,
                    "queries with no key in reach (their row is null)",
                ),
                some(
                    "rank_deficient_rows",
                    Count,
                    0,
                    "degree 1: queries whose local fit is rank deficient",
                ),
            ];
            A
        }
        "row-states" => {
            const A: &[FieldSpec] = &[
                f(
                    "max_log_weight",
                    F32,
                    1,
                    "the largest log-weight of each query, M",
                ),
                f("sum", F64, 1, "the sum of the shifted weights, M"),
                f(
                    "weighted",
                    F64,
                    2,
                    "the shifted weighted sums of the values, M×q",
                ),
            ];
            A
        }
        "density" => {
            const A: &[FieldSpec] = &[f("density", F64, 1, "the density at each query, M")];
            A
        }
        "log-density" => {
            const A: &[FieldSpec] = &[f("log_density", F64, 1, "its logarithm, M")];
            A
        }
        "classify" => {
            const A: &[FieldSpec] = &[
                f("labels", I64, 1, "the class of each query, M"),
                f("proba", F32, 2, "the class probabilities, M×C"),
                f("classes", I64, 1, "the label of each column of proba, C"),
                f("empty_rows", Count, 0, "queries with no key in reach"),
            ];
            A
        }
        "knn" => {
            const A: &[FieldSpec] = &[
                f(
                    "distances",
                    F32,
                    2,
                    "the distances to the k nearest keys, M×k",
                ),
                f("indices", I64, 2, "their rows in the set, M×k"),
            ];
            A
        }
        "mean-shift" => {
            const A: &[FieldSpec] = &[
                f(
                    "modes",
                    Position,
                    2,
                    "the modes found, C×d (float64 where the points came as float64 and were centred: moved back)",
                ),
                f("labels", I64, 1, "the mode of each point, N"),
                f("populations", I64, 1, "the points of each mode, C"),
                f("iterations", Count, 0, "iterations run"),
                f("converged", Flag, 0, "whether every point converged"),
                f("bandwidth", Number, 0, "the bandwidth used"),
            ];
            A
        }
        _ => &[],
    }
}

/// A field's kind and axes.
fn shape_of(field: &Field) -> (Kind, usize) {
    match field {
        Field::F32(a) => (Kind::F32, a.ndim()),
        Field::F64(a) => (Kind::F64, a.ndim()),
        Field::I64(a) => (Kind::I64, a.ndim()),
        Field::Count(_) => (Kind::Count, 0),
        Field::Number(_) => (Kind::Number, 0),
        Field::Flag(_) => (Kind::Flag, 0),
    }
}

/// Checks `a` against `op`'s declaration: every field declared, of its
/// kind and axes, in the declared order, and every field that is always
/// there present.
pub fn conforms(op: &str, a: &Answer) -> Result<(), String> {
    let declared = answer(op);
    let mut next = 0;
    for (name, field) in &a.fields {
        let Some(i) = declared[next..].iter().position(|s| s.name == *name) else {
            return Err(format!("{op}: field {name:?} undeclared or out of order"));
        };
        let spec = &declared[next + i];
        if let Some(skipped) = declared[next..next + i].iter().find(|s| s.always) {
            return Err(format!("{op}: field {:?} missing", skipped.name));
        }
        let (kind, rank) = shape_of(field);
        let kind_ok = match spec.kind {
            Kind::Position => matches!(kind, Kind::F32 | Kind::F64),
            k => k == kind,
        };
        if !kind_ok || rank != spec.rank {
            return Err(format!(
                "{op}: field {name:?} is {:?}, declared {:?} of {} axes",
                shape_of(field),
                spec.kind,
                spec.rank
            ));
        }
        next += i + 1;
    }
    match declared[next..].iter().find(|s| s.always) {
        Some(s) => Err(format!("{op}: field {:?} missing", s.name)),
        None => Ok(()),
    }
}
