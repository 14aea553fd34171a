//! One field of an op's answer (an array, a count, a number or a flag)
//! and its JSON form; `wire` writes answers of them as JSON or `.npy`,
//! `arrow` as Arrow IPC.
//!
//! Imports: none of the service's modules.

use ndarray::{ArrayD, ArrayViewD};
use serde::Serialize;

/// One field of an answer.
pub enum Field {
    /// An array of `f32` (NaN written as `null` in JSON).
    F32(ArrayD<f32>),
    /// An array of `f64`.
    F64(ArrayD<f64>),
    /// An array of integers.
    I64(ArrayD<i64>),
    /// A count.
    Count(usize),
    /// A number.
    Number(f64),
    /// A flag.
    Flag(bool),
}

impl Field {
    pub fn is_array(&self) -> bool {
        matches!(self, Field::F32(_) | Field::F64(_) | Field::I64(_))
    }
}

/// An array written as nested JSON lists, without a copy.
struct Nested<'a, T>(ArrayViewD<'a, T>);

impl<T: Serialize> Serialize for Nested<'_, T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.ndim() {
            0 => self.0.iter().next().serialize(s),
            1 => s.collect_seq(self.0.iter()),
            _ => s.collect_seq(self.0.outer_iter().map(Nested)),
        }
    }
}

impl Serialize for Field {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Field::F32(a) => Nested(a.view()).serialize(s),
            Field::F64(a) => Nested(a.view()).serialize(s),
            Field::I64(a) => Nested(a.view()).serialize(s),
            Field::Count(n) => n.serialize(s),
            Field::Number(x) => x.serialize(s),
            Field::Flag(b) => b.serialize(s),
        }
    }
}
