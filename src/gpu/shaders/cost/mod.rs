//! Counting what a GPU would execute in a shader's hot loop, from its
//! naga IR (`docs/gpu-cost.md`): no GPU needed.
//!
//! A small abstract interpreter walks an entry point with every template
//! constant, generated constant and pipeline override known and every
//! datum (buffer contents, invocation ids) unknown. Loops whose trip count
//! it can decide are run to the end (a driver unrolls them: no loop
//! overhead, and local arrays indexed by unrolled counters stay in
//! registers); a loop whose exit depends on data runs one iteration with
//! every variable it assigns unknown. Expressions whose operands are all
//! known are folded (free), and so are expressions whose value reaches no
//! store, branch or barrier (dead code, which a driver removes). Each
//! other expression costs what an NVIDIA warp issues for it, per vector
//! component:
//!
//! | IR | slots |
//! |---|---|
//! | arithmetic, comparison, select, conversion, `fma`, `min`, `max`, … | 1 |
//! | `exp2`, `log2`, `sqrt`, `inverseSqrt`, `sin`, `cos` | 1 (+1 SFU op) |
//! | `exp`, `log` | 2 (+1 SFU op) |
//! | `dot` of n components | n |
//! | float negation | 0 (a source modifier) |
//! | workgroup-memory load or store (any width up to `vec4`) | 1 |
//! | storage-buffer load or store | 1 |
//! | uniform load | 0 (a constant-bank operand; counted apart) |
//! | a branch on unknown data (both sides are counted) | 1 |
//! | a local array indexed by unknown data (local memory) | 1 |
//! | a barrier | 1 |
//!
//! The hot loop of a shader is the first loop after a `// cost: hot loop`
//! comment; [`hot_loop`] returns the cost of running that loop statement
//! once as above (all its iterations when they are decided, else one). A
//! branch after a `// cost: rare` comment is counted as not taken.

mod interp;

#[cfg(test)]
mod budgets;
#[cfg(test)]
mod tests;

/// The marker of a hot loop: a comment before its `for`.
pub(crate) const MARKER: &str = "// cost: hot loop";
/// The marker of a branch on data that is rarely taken (a key entering a
/// top-k list, a step that re-measures): a comment before its `if`. Its
/// sides are left out of the count (the branch itself costs 1); the
/// documentation gives what a taken branch costs.
pub(crate) const RARE: &str = "// cost: rare";

/// Operations counted in one run of a hot loop.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Cost {
    /// Arithmetic, comparison, select, conversion and math issue slots
    /// (transcendentals included, one slot each).
    pub alu: u64,
    /// Of `alu`: fused multiply-adds (a `dot` of n components: n − 1).
    pub fma: u64,
    /// Transcendental (SFU) operations: `exp2`, `log2`, `sqrt`, …
    pub sfu: u64,
    /// Workgroup-memory loads.
    pub wg_load: u64,
    /// Workgroup-memory stores.
    pub wg_store: u64,
    /// Storage-buffer loads.
    pub global_load: u64,
    /// Storage-buffer stores.
    pub global_store: u64,
    /// Uniform loads (not issue slots of their own).
    pub uniform: u64,
    /// Branches on unknown data.
    pub branch: u64,
    /// Local-memory accesses (arrays indexed by unknown data).
    pub local: u64,
    /// Barriers.
    pub barrier: u64,
}

impl Cost {
    /// One branch on data.
    const BRANCH: Cost = Cost {
        alu: 0,
        fma: 0,
        sfu: 0,
        wg_load: 0,
        wg_store: 0,
        global_load: 0,
        global_store: 0,
        uniform: 0,
        branch: 1,
        local: 0,
        barrier: 0,
    };

    /// Issue slots: everything but uniform loads.
    pub(crate) fn slots(&self) -> u64 {
        self.alu
            + self.wg_load
            + self.wg_store
            + self.global_load
            + self.global_store
            + self.branch
            + self.local
            + self.barrier
    }

    fn add(&mut self, o: &Cost) {
        self.alu += o.alu;
        self.fma += o.fma;
        self.sfu += o.sfu;
        self.wg_load += o.wg_load;
        self.wg_store += o.wg_store;
        self.global_load += o.global_load;
        self.global_store += o.global_store;
        self.uniform += o.uniform;
        self.branch += o.branch;
        self.local += o.local;
        self.barrier += o.barrier;
    }

    fn is_zero(&self) -> bool {
        *self == Cost::default()
    }
}

/// The cost of one run of `entry`'s hot loop in `src` (rendered WGSL),
/// with the pipeline `overrides`.
pub(crate) fn hot_loop(src: &str, entry: &str, overrides: &[(&str, f64)]) -> Result<Cost, String> {
    interp::run(src, entry, overrides).map(|(c, _)| c)
}

/// [`hot_loop`] with its slots by source line (1-based, with the line's
/// text), for reading where a count comes from.
pub(crate) fn trace(
    src: &str,
    entry: &str,
    overrides: &[(&str, f64)],
) -> Result<Vec<(usize, u64, String)>, String> {
    let (_, by_offset) = interp::run(src, entry, overrides)?;
    let mut lines: std::collections::BTreeMap<usize, u64> = Default::default();
    for (at, n) in by_offset {
        *lines
            .entry(src[..at].matches('\n').count() + 1)
            .or_default() += n;
    }
    Ok(lines
        .into_iter()
        .map(|(line, n)| {
            let text = src.lines().nth(line - 1).unwrap_or("").trim().to_string();
            (line, n, text)
        })
        .collect())
}
