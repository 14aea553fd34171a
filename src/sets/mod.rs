//! Prepared sets: keys kept on an engine's backend and queried many times,
//! from many threads. [`KeySet`] (keys, values, labels: local means,
//! densities, classes, local models, kNN) and [`AttentionSet`] (attention
//! keys and values: `attend`) are one concept, the backend's prepared keys
//! ([`PreparedKeys`](crate::backend::PreparedKeys),
//! [`PreparedAttention`](crate::backend::PreparedAttention)) kept across
//! calls; a one-shot op prepares the same keys for its one call and runs
//! the same code (`ops/`). Key sets coalesce concurrent small requests
//! (`batch.rs`).

mod attention_set;
mod batch;
mod key_set;

pub use attention_set::AttentionSet;
pub use batch::{BatchStats, Batching};
pub use key_set::{Classification, KeySet, KeySetBuilder, KeySetOptions};
