//! The named key sets ("collections"): each a prepared [`KeySet`] with its
//! optional per-key weights and its bounded request queue, held behind an
//! [`Arc`] that a replacement swaps atomically — a request in flight keeps
//! the set it started on, and a new one is swapped in only once prepared.
//!
//! A set's keys given in `f64` (JSON numbers, a float64 `.npy`, Arrow
//! float64, a float64 or CSV file at start) are centred on their mean
//! before they are rounded to `f32`, as the command-line tool and the
//! Python package centre float64 points ([`Centre`]); its queries are
//! moved by the same offset, in `f64`, whatever type they come in.
//!
//! Imports: nothing of the service (the data, the engine and the
//! registry); `crate::{io, points}` for the centring.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use locus::{Engine, Error, KeySet, KeySetOptions};
use ndarray::{Array1, Array2};
use tokio::sync::Semaphore;

use crate::io::Points;
use crate::points::{Offset, to_f32};

/// Most characters in a set's name.
pub const MAX_NAME: usize = 64;

/// Checks a set name: 1 to 64 of `A-Z a-z 0-9 _ - .`.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "set name {name:?}: use 1 to {MAX_NAME} letters, digits, '_', '-' or '.'"
        ))
    }
}

/// Where points are moved before they are rounded to `f32`.
#[derive(Debug, Clone)]
pub enum Centre {
    /// By a set's offset (its keys were centred by it); `None`: not at
    /// all.
    On(Option<Offset>),
    /// To their own mean ([`Offset::of`]) where they came as `f64`: a
    /// set's keys, MeanShift's points. `f32` points are rounded as they
    /// are (rounding them loses nothing), as are points already near 0
    /// (the offset is then `None`).
    OwnMean,
}

impl Centre {
    /// `points` centred and rounded ([`rounded`]), and the offset
    /// subtracted; `what` and `noun` name them in errors (`queries`,
    /// `query`).
    ///
    /// # Errors
    /// A value too large for `f32` (even centred).
    pub fn apply(
        &self,
        what: &str,
        noun: &str,
        points: Points,
    ) -> Result<(Array2<f32>, Option<Offset>), String> {
        let offset = self.offset_for(&points);
        Ok((rounded(what, noun, points, offset.as_ref())?, offset))
    }

    /// What is subtracted from `points`.
    pub fn offset_for(&self, points: &Points) -> Option<Offset> {
        match (self, points) {
            (Centre::On(o), _) => o.clone(),
            (Centre::OwnMean, Points::Wide { values, .. }) => Offset::of(values.view(), false),
            (Centre::OwnMean, Points::Narrow(_)) => None,
        }
    }
}

/// Points as `f32`: `offset` subtracted in `f64`, then rounded once
/// (`f32` points without an offset as they are, CSV text as the tool
/// rounds it: `points::to_f32`).
///
/// # Errors
/// A value too large for `f32` (even centred), naming its row and column.
pub fn rounded(
    what: &str,
    noun: &str,
    points: Points,
    offset: Option<&Offset>,
) -> Result<Array2<f32>, String> {
    if let Some(o) = offset
        && o.columns().len() != points.dim().1
    {
        return Err(format!(
            "{what}: {} coordinates; the keys have {}",
            points.dim().1,
            o.columns().len()
        ));
    }
    to_f32(points, offset).map_err(|t| {
        let (r, c) = (t.pos / t.shape[1].max(1), t.pos % t.shape[1].max(1));
        let v = t.value;
        let o = offset.map_or(0.0, |o| o.columns()[c]);
        if o == 0.0 {
            format!("{what}: {noun} {r} column {c} is {v:e}, not a finite 32-bit float")
        } else {
            format!(
                "{what}: {noun} {r} column {c} is {v:e}, {:e} once moved by the offset {o:e}: not a finite 32-bit float even centred",
                v - o
            )
        }
    })
}

/// The arrays of a set before it is prepared.
pub struct SetData {
    /// `N × d`, centred by `offset`.
    pub keys: Array2<f32>,
    /// What was subtracted from the keys in `f64` before they were
    /// rounded to `f32` ([`Centre::OwnMean`]), and is subtracted from
    /// every query.
    pub offset: Option<Offset>,
    /// `N × q`, for local means and row states.
    pub values: Option<Array2<f32>>,
    /// `N` class labels, for classification.
    pub labels: Option<Array1<i64>>,
    /// `N` non-negative weights of the density estimate.
    pub weights: Option<Array1<f32>>,
}

/// The keys and weights of a weighted set: its densities are the
/// engine's weighted estimate over them.
pub struct Weighted {
    /// The keys (a copy kept beside the prepared ones).
    pub keys: Array2<f32>,
    /// One weight per key.
    pub weights: Array1<f32>,
}

/// One named set.
pub struct Entry {
    /// The prepared keys, values and labels.
    pub set: KeySet,
    /// What was subtracted from the keys (and is from each query) before
    /// rounding to `f32`.
    pub offset: Option<Offset>,
    /// Per-key weights, if given.
    pub weighted: Option<Weighted>,
    /// One permit per request admitted on this set (waiting in its batch
    /// or computing); none left: 429.
    pub queue: Arc<Semaphore>,
    /// The queue's size.
    pub queue_depth: usize,
}

impl Entry {
    /// Requests admitted on the set now.
    pub fn in_queue(&self) -> usize {
        self.queue_depth
            .saturating_sub(self.queue.available_permits())
    }
}

/// `weights` checked against `n` keys: finite, non-negative, not all zero.
fn check_weights(weights: &Array1<f32>, n: usize) -> Result<(), Error> {
    let bad = |reason: String| Error::InvalidParameter {
        name: "weights",
        reason,
    };
    if weights.len() != n {
        return Err(bad(format!("{} weights for {n} keys", weights.len())));
    }
    if let Some(i) = weights.iter().position(|w| !w.is_finite() || *w < 0.0) {
        return Err(bad(format!(
            "weight {i} is {}; weights are finite and non-negative",
            weights[i]
        )));
    }
    if weights.iter().all(|w| *w == 0.0) {
        return Err(bad("every weight is 0".into()));
    }
    Ok(())
}

impl SetData {
    /// Prepares the set on `engine` (checks as [`KeySetBuilder::build`](locus::KeySetBuilder::build),
    /// and the weights); blocks while the keys are made resident.
    pub fn build(
        self,
        engine: &Engine,
        options: KeySetOptions,
        queue_depth: usize,
    ) -> Result<Entry, Error> {
        let mut b = engine.prepare(self.keys.view()).options(options);
        if let Some(v) = &self.values {
            b = b.values(v.view());
        }
        if let Some(l) = &self.labels {
            b = b.labels(l.view());
        }
        let set = b.build()?;
        let weighted = match self.weights {
            Some(weights) => {
                check_weights(&weights, self.keys.nrows())?;
                Some(Weighted {
                    keys: self.keys,
                    weights,
                })
            }
            None => None,
        };
        Ok(Entry {
            set,
            offset: self.offset,
            weighted,
            queue: Arc::new(Semaphore::new(queue_depth)),
            queue_depth,
        })
    }
}

/// The sets by name.
#[derive(Default)]
pub struct Registry {
    map: RwLock<BTreeMap<String, Arc<Entry>>>,
}

impl Registry {
    /// The set called `name`.
    pub fn get(&self, name: &str) -> Option<Arc<Entry>> {
        self.read().get(name).cloned()
    }

    /// Puts `entry` under `name`; whether it replaced one.
    pub fn insert(&self, name: String, entry: Entry) -> bool {
        let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
        map.insert(name, Arc::new(entry)).is_some()
    }

    /// Drops the set called `name`; whether there was one. Requests in
    /// flight on it finish on it.
    pub fn remove(&self, name: &str) -> bool {
        let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
        map.remove(name).is_some()
    }

    /// Every set, by name.
    pub fn list(&self) -> Vec<(String, Arc<Entry>)> {
        self.read()
            .iter()
            .map(|(k, v)| (k.clone(), Arc::clone(v)))
            .collect()
    }

    /// The names, for messages.
    pub fn names(&self) -> Vec<String> {
        self.read().keys().cloned().collect()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<Entry>>> {
        self.map.read().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        for ok in ["a", "set-1", "my_set.v2", &"x".repeat(MAX_NAME)] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a/b", "a b", "é", &"x".repeat(MAX_NAME + 1)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_replaced_set_lives_on_in_the_requests_that_hold_it() {
        let e = Engine::cpu();
        let data = |v: f32| SetData {
            keys: ndarray::array![[0.0f32], [1.0]],
            offset: None,
            values: Some(ndarray::array![[v], [v]]),
            labels: None,
            weights: Some(ndarray::array![1.0, 2.0]),
        };
        let r = Registry::default();
        let o = KeySetOptions::default();
        assert!(!r.insert("s".into(), data(1.0).build(&e, o, 4).unwrap()));
        let held = r.get("s").unwrap();
        assert!(r.insert("s".into(), data(2.0).build(&e, o, 4).unwrap()));
        let k = locus::Kernel::gaussian(1.0).unwrap();
        let q = ndarray::array![[0.5f32]];
        assert_eq!(
            held.set.local_mean(&k, q.view()).unwrap().values[[0, 0]],
            1.0
        );
        let now = r.get("s").unwrap();
        assert_eq!(
            now.set.local_mean(&k, q.view()).unwrap().values[[0, 0]],
            2.0
        );
        assert!(r.remove("s") && !r.remove("s"));
        let mut bad = data(1.0);
        bad.weights = Some(ndarray::array![1.0, -1.0]);
        assert!(bad.build(&e, o, 4).is_err());
    }
}
