//! The values every layer shares: row states and their merge, normalized
//! rows, neighbour lists, validated attention inputs and MeanShift runs.
//!
//! A leaf module: it imports only `error` and `matrix`, so the backends
//! (`cpu`, `gpu`) can return these types without importing the public API
//! layer (`ops`, `cluster`, `sets`) that re-exports them.

mod heads;
mod loo_grad;
mod moments;
mod neighbours;
mod shift;
mod states;
mod variable;

pub(crate) use heads::{Attention, Heads};
pub(crate) use loo_grad::{GradStates, merge_record};
pub(crate) use moments::MomentLayout;
pub use neighbours::Neighbours;
pub use shift::Progress;
pub(crate) use shift::{SHIFT_FLOOR, Shift, ShiftOutcome, ShiftRun, shift_to};
pub use states::{RowNormalized, RowStates, merge_states};
pub(crate) use variable::{VariableKeys, VariablePass};
