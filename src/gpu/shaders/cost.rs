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

use std::collections::HashMap;

use naga::{
    AddressSpace, BinaryOperator as B, Block, Expression, Function, Handle, Literal, LocalVariable,
    MathFunction as M, Module, ScalarKind, Span, Statement, TypeInner, UnaryOperator as U,
    valid::{Capabilities, FunctionInfo, ModuleInfo, ValidationFlags, Validator},
};

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

/// A scalar the interpreter knows.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Known {
    Bool(bool),
    U32(u32),
    I32(i32),
    F32(f32),
}

/// A local variable and the constant indices into it (`None`: some index
/// is data).
type Path = (Handle<LocalVariable>, Option<Vec<u32>>);

/// A store into a local variable: its constant path (`None`: some index
/// is data) and its node.
type Stored = (Option<Vec<u32>>, usize);

/// What the interpreter knows of a value.
#[derive(Debug, Clone, PartialEq)]
enum Val {
    /// A known scalar.
    K(Known),
    /// Known at compile time but not tracked (a vector or array constant).
    Const,
    /// Data: known only when the shader runs.
    Data,
    /// A pointer into a local variable.
    Local(Path),
    /// A pointer into a global variable of this address space.
    Global(AddressSpace),
    /// Not evaluated by an `Emit`: a constant or override expression of
    /// the function, folded when read.
    Unset,
}

impl Val {
    fn known(&self) -> bool {
        matches!(self, Val::K(_) | Val::Const)
    }

    fn bool(&self) -> Option<bool> {
        match self {
            Val::K(Known::Bool(b)) => Some(*b),
            _ => None,
        }
    }
}

/// An evaluated expression (or a store, a branch) whose cost is charged
/// only when something live depends on it.
#[derive(Debug, Clone)]
struct Node {
    /// What it computes, for reuse by an equal computation (empty: not
    /// reusable).
    key: String,
    /// The value id of a reusable computation.
    id: Option<u64>,
    cost: Cost,
    deps: Vec<usize>,
    /// Evaluated inside the hot loop.
    hot: bool,
    charged: bool,
}

/// How a block ended.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Flow {
    Normal,
    Break,
    Continue,
    Return,
}

/// A loop whose exit the interpreter could not decide.
struct Undecided;

/// One activation of a function.
#[derive(Clone)]
struct Frame {
    /// Value and node of each of the function's expressions.
    vals: Vec<(Val, Option<usize>)>,
    /// Value id of each evaluated expression (equal ids: equal values).
    ids: Vec<u64>,
    /// Value id of what each local element (by path) holds, where known.
    local_ids: HashMap<(Handle<LocalVariable>, Vec<u32>), u64>,
    /// Known values of whole local variables.
    locals: HashMap<Handle<LocalVariable>, Val>,
    /// The store nodes each local variable's loads depend on, by path.
    stores: HashMap<Handle<LocalVariable>, Vec<Stored>>,
    args: Vec<(Val, Option<usize>)>,
    ret: Option<(Val, Option<usize>)>,
    /// Inside branches on data: a store adds to, not replaces, what a
    /// load depends on.
    conditional: u32,
    /// Inside predicated branches: a store is a select.
    predicated: u32,
}

struct Interp<'m> {
    module: &'m Module,
    info: &'m ModuleInfo,
    overrides: &'m [(&'m str, f64)],
    /// Source range of the hot loop.
    hot: std::ops::Range<usize>,
    /// Source starts of the branches marked rare.
    rare: Vec<usize>,
    nodes: Vec<Node>,
    /// Nodes charged, in order (undone when a loop turns out undecided).
    charged: Vec<usize>,
    /// Whether the hot loop is running.
    recording: bool,
    hot_cost: Cost,
    hot_seen: bool,
    /// Slots charged to the hot loop by source offset.
    hot_trace: HashMap<usize, u64>,
    /// Source offset of each node.
    at: Vec<usize>,
    /// Reusable computations by key.
    cse: HashMap<String, usize>,
    /// The next value id.
    next_id: u64,
    /// Whether an exit of the innermost loop being decided happened under
    /// a branch on data.
    undecided_exit: Vec<bool>,
    steps: u64,
}

/// Most iterations the interpreter runs of one decided loop, and most
/// statements in all (beyond: treated as undecided).
const MAX_ITERATIONS: u32 = 1 << 14;
const MAX_STEPS: u64 = 1 << 24;

/// The cost of one run of `entry`'s hot loop in `src` (rendered WGSL),
/// with the pipeline `overrides`.
pub(crate) fn hot_loop(src: &str, entry: &str, overrides: &[(&str, f64)]) -> Result<Cost, String> {
    run(src, entry, overrides).map(|(c, _)| c)
}

/// [`hot_loop`] with its slots by source line (1-based, with the line's
/// text), for reading where a count comes from.
pub(crate) fn trace(
    src: &str,
    entry: &str,
    overrides: &[(&str, f64)],
) -> Result<Vec<(usize, u64, String)>, String> {
    let (_, by_offset) = run(src, entry, overrides)?;
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

fn run(
    src: &str,
    entry: &str,
    overrides: &[(&str, f64)],
) -> Result<(Cost, HashMap<usize, u64>), String> {
    let module = naga::front::wgsl::parse_str(src).map_err(|e| e.emit_to_string(src))?;
    let info = Validator::new(ValidationFlags::all(), Capabilities::all())
        .validate(&module)
        .map_err(|e| format!("{e:?}"))?;
    let mut markers = src.match_indices(MARKER).map(|(i, _)| i);
    let at = markers.next().ok_or("no `// cost: hot loop` marker")?;
    if markers.next().is_some() {
        return Err("more than one hot-loop marker".into());
    }
    let line_end = src[at..].find('\n').map_or(src.len(), |e| at + e);
    // The first loop after the marker, in any function.
    let mut hot: Option<std::ops::Range<usize>> = None;
    let bodies = module.functions.iter().map(|(_, f)| &f.body);
    for body in bodies.chain(module.entry_points.iter().map(|ep| &ep.function.body)) {
        walk(body, &mut |st, span| {
            if let (Statement::Loop { .. }, Some(r)) = (st, span.to_range())
                && r.start >= line_end
                && hot.as_ref().is_none_or(|h| r.start < h.start)
            {
                hot = Some(r);
            }
        });
    }
    let hot = hot.ok_or("no loop after the marker")?;
    // The first branch after each rare marker, in any function.
    let mut rare = Vec::new();
    for (at, _) in src.match_indices(RARE) {
        let line_end = src[at..].find('\n').map_or(src.len(), |e| at + e);
        let mut first: Option<usize> = None;
        let bodies = module.functions.iter().map(|(_, f)| &f.body);
        for body in bodies.chain(module.entry_points.iter().map(|ep| &ep.function.body)) {
            walk(body, &mut |st, span| {
                if let (Statement::If { .. }, Some(r)) = (st, span.to_range())
                    && r.start >= line_end
                    && first.is_none_or(|f| r.start < f)
                {
                    first = Some(r.start);
                }
            });
        }
        rare.push(first.ok_or("no `if` after a rare marker")?);
    }
    let (index, ep) = module
        .entry_points
        .iter()
        .enumerate()
        .find(|(_, ep)| ep.name == entry)
        .ok_or_else(|| format!("no entry point {entry}"))?;
    let mut it = Interp {
        module: &module,
        info: &info,
        overrides,
        hot,
        rare,
        nodes: Vec::new(),
        charged: Vec::new(),
        recording: false,
        hot_cost: Cost::default(),
        hot_seen: false,
        hot_trace: HashMap::new(),
        at: Vec::new(),
        cse: HashMap::new(),
        next_id: 0,
        undecided_exit: Vec::new(),
        steps: 0,
    };
    let f = &ep.function;
    // Invocation ids and other arguments are data.
    let mut frame = Frame::new(f, vec![(Val::Data, None); f.arguments.len()]);
    it.init_locals(&mut frame, f);
    let _ = it.exec(&mut frame, f, info.get_entry_point(index), &f.body);
    if !it.hot_seen {
        return Err(format!("{entry} never reaches its hot loop"));
    }
    Ok((it.hot_cost, it.hot_trace))
}

impl Frame {
    fn new(f: &Function, args: Vec<(Val, Option<usize>)>) -> Frame {
        Frame {
            vals: vec![(Val::Unset, None); f.expressions.len()],
            ids: vec![u64::MAX; f.expressions.len()],
            local_ids: HashMap::new(),
            locals: HashMap::new(),
            stores: HashMap::new(),
            args,
            ret: None,
            conditional: 0,
            predicated: 0,
        }
    }
}

impl Interp<'_> {
    /// Local variables start at their initializer (a constant
    /// expression), or zero.
    fn init_locals(&self, fr: &mut Frame, f: &Function) {
        for (l, var) in f.local_variables.iter() {
            let v = match var.init {
                Some(e) => self.value(fr, f, e).0,
                None => match self.module.types[var.ty].inner {
                    TypeInner::Scalar(s) => match s.kind {
                        ScalarKind::Uint => Val::K(Known::U32(0)),
                        ScalarKind::Sint => Val::K(Known::I32(0)),
                        ScalarKind::Float => Val::K(Known::F32(0.0)),
                        ScalarKind::Bool => Val::K(Known::Bool(false)),
                        _ => Val::Data,
                    },
                    // Arrays and structs are written element by element:
                    // their values are not tracked.
                    _ => Val::Data,
                },
            };
            fr.locals.insert(l, v);
        }
    }

    /// Whether a local variable is a scalar (whose value is tracked).
    fn is_scalar(&self, f: &Function, l: Handle<LocalVariable>) -> bool {
        matches!(
            self.module.types[f.local_variables[l].ty].inner,
            TypeInner::Scalar(_)
        )
    }

    fn width(&self, fi: &FunctionInfo, h: Handle<Expression>) -> u64 {
        match fi[h].ty.inner_with(&self.module.types) {
            TypeInner::Vector { size, .. } => *size as u64,
            _ => 1,
        }
    }

    fn is_float(&self, fi: &FunctionInfo, h: Handle<Expression>) -> bool {
        fi[h].ty.inner_with(&self.module.types).scalar_kind() == Some(ScalarKind::Float)
    }

    /// The value of a constant expression of the module.
    fn global(&self, h: Handle<Expression>) -> Val {
        match &self.module.global_expressions[h] {
            Expression::Literal(l) => literal(*l),
            Expression::Constant(c) => self.global(self.module.constants[*c].init),
            Expression::Override(o) => self.override_val(*o),
            _ => Val::Const,
        }
    }

    fn override_val(&self, o: Handle<naga::Override>) -> Val {
        let ov = &self.module.overrides[o];
        let name = ov.name.as_deref().unwrap_or("");
        match self.overrides.iter().find(|(n, _)| *n == name) {
            Some(&(_, v)) => match self.module.types[ov.ty].inner.scalar_kind() {
                Some(ScalarKind::Uint) => Val::K(Known::U32(v as u32)),
                Some(ScalarKind::Sint) => Val::K(Known::I32(v as i32)),
                Some(ScalarKind::Bool) => Val::K(Known::Bool(v != 0.0)),
                _ => Val::K(Known::F32(v as f32)),
            },
            None => ov.init.map_or(Val::Const, |i| self.global(i)),
        }
    }

    /// The value and node of an expression (evaluated, or one that needs
    /// no evaluation).
    fn value(&self, fr: &Frame, f: &Function, h: Handle<Expression>) -> (Val, Option<usize>) {
        let v = match &f.expressions[h] {
            Expression::Literal(l) => literal(*l),
            Expression::Constant(c) => self.global(self.module.constants[*c].init),
            Expression::Override(o) => self.override_val(*o),
            Expression::ZeroValue(_) => Val::Const,
            Expression::FunctionArgument(i) => {
                return fr
                    .args
                    .get(*i as usize)
                    .cloned()
                    .unwrap_or((Val::Data, None));
            }
            Expression::GlobalVariable(g) => Val::Global(self.module.global_variables[*g].space),
            Expression::LocalVariable(l) => Val::Local((*l, Some(Vec::new()))),
            _ => match &fr.vals[h.index()] {
                (Val::Unset, _) => self.fold(fr, f, h),
                v => return v.clone(),
            },
        };
        (v, None)
    }

    /// The value of an expression no `Emit` covers (a constant or
    /// override expression of the function).
    fn fold(&self, fr: &Frame, f: &Function, h: Handle<Expression>) -> Val {
        let v = |e| self.value(fr, f, e).0;
        match &f.expressions[h] {
            Expression::Unary { op, expr } => match v(*expr) {
                Val::K(k) => unary(*op, k).map_or(Val::Const, Val::K),
                _ => Val::Const,
            },
            Expression::Binary { op, left, right } => match (v(*left), v(*right)) {
                (Val::K(a), Val::K(b)) => binary(*op, a, b).map_or(Val::Const, Val::K),
                _ => Val::Const,
            },
            Expression::Select {
                condition,
                accept,
                reject,
            } => match v(*condition).bool() {
                Some(c) => v(if c { *accept } else { *reject }),
                None => Val::Const,
            },
            Expression::As {
                expr,
                kind,
                convert: Some(_),
            } => match v(*expr) {
                Val::K(k) => convert_to(k, *kind).map_or(Val::Const, Val::K),
                _ => Val::Const,
            },
            _ => Val::Const,
        }
    }

    /// A node costing `cost` that depends on `deps`.
    fn node(&mut self, cost: Cost, deps: Vec<usize>, at: usize) -> Option<usize> {
        if cost.is_zero() && deps.len() <= 1 {
            return deps.first().copied();
        }
        self.nodes.push(Node {
            key: String::new(),
            id: None,
            cost,
            deps,
            hot: self.recording,
            charged: false,
        });
        self.at.push(at);
        Some(self.nodes.len() - 1)
    }

    /// Charges a live node and everything it depends on.
    fn demand(&mut self, node: Option<usize>) {
        let mut stack: Vec<usize> = node.into_iter().collect();
        while let Some(n) = stack.pop() {
            if self.nodes[n].charged {
                continue;
            }
            self.nodes[n].charged = true;
            self.charged.push(n);

            if self.nodes[n].hot {
                let c = self.nodes[n].cost;
                self.hot_cost.add(&c);
                *self.hot_trace.entry(self.at[n]).or_default() += c.slots();
            }
            stack.extend(self.nodes[n].deps.iter().copied());
        }
    }

    /// Evaluates an emitted expression.
    fn eval(&mut self, fr: &mut Frame, f: &Function, fi: &FunctionInfo, h: Handle<Expression>) {
        let at = f.expressions.get_span(h).to_range().map_or(0, |r| r.start);
        let w = self.width(fi, h);
        let mut cost = Cost::default();
        let mut deps: Vec<Option<usize>> = Vec::new();
        let val = |s: &Self, fr: &Frame, e: Handle<Expression>| s.value(fr, f, e);
        let out = match &f.expressions[h] {
            Expression::Compose { components, .. } => {
                let vs: Vec<_> = components.iter().map(|&c| val(self, fr, c)).collect();
                let known = vs.iter().all(|(v, _)| v.known());
                deps.extend(vs.into_iter().map(|(_, n)| n));
                if known { Val::Const } else { Val::Data }
            }
            Expression::Access { base, index } => {
                let ((b, bn), (i, inode)) = (val(self, fr, *base), val(self, fr, *index));
                deps.extend([bn, inode]);
                match b {
                    Val::Local((l, path)) => Val::Local((
                        l,
                        match (path, i) {
                            (Some(mut p), Val::K(Known::U32(k))) => {
                                p.push(k);
                                Some(p)
                            }
                            (Some(mut p), Val::K(Known::I32(k))) => {
                                p.push(k as u32);
                                Some(p)
                            }
                            _ => None,
                        },
                    )),
                    g @ Val::Global(_) => g,
                    b if b.known() && i.known() => Val::Const,
                    _ => {
                        if !i.known() {
                            cost.local += 1;
                        }
                        Val::Data
                    }
                }
            }
            Expression::AccessIndex { base, index } => {
                let (b, bn) = val(self, fr, *base);
                deps.push(bn);
                match b {
                    Val::Local((l, path)) => Val::Local((
                        l,
                        path.map(|mut p| {
                            p.push(*index);
                            p
                        }),
                    )),
                    g @ Val::Global(_) => g,
                    b if b.known() => Val::Const,
                    _ => Val::Data,
                }
            }
            Expression::Splat { value, .. } | Expression::Swizzle { vector: value, .. } => {
                let (v, n) = val(self, fr, *value);
                deps.push(n);
                if v.known() { Val::Const } else { Val::Data }
            }
            Expression::Load { pointer } => {
                let (p, pn) = val(self, fr, *pointer);
                deps.push(pn);
                match p {
                    Val::Local((l, path)) => {
                        if path.is_none() {
                            cost.local += 1;
                        }
                        if let Some(stores) = fr.stores.get(&l) {
                            deps.extend(
                                stores
                                    .iter()
                                    .filter(|(sp, _)| overlaps(sp, &path))
                                    .map(|&(_, n)| Some(n)),
                            );
                        }
                        match path {
                            Some(p) if p.is_empty() && self.is_scalar(f, l) => {
                                fr.locals.get(&l).cloned().unwrap_or(Val::Data)
                            }
                            _ => Val::Data,
                        }
                    }
                    Val::Global(space) => {
                        match space {
                            AddressSpace::WorkGroup => cost.wg_load += 1,
                            AddressSpace::Uniform | AddressSpace::Immediate => cost.uniform += 1,
                            AddressSpace::Private | AddressSpace::Function => {}
                            _ => cost.global_load += 1,
                        }
                        Val::Data
                    }
                    _ => Val::Data,
                }
            }
            Expression::Unary { op, expr } => {
                let (v, n) = val(self, fr, *expr);
                match v {
                    Val::K(k) => unary(*op, k).map_or(Val::Const, Val::K),
                    v if v.known() => Val::Const,
                    _ => {
                        deps.push(n);
                        if !(*op == U::Negate && self.is_float(fi, h)) {
                            cost.alu += w;
                        }
                        Val::Data
                    }
                }
            }
            Expression::Binary { op, left, right } => {
                let ((a, an), (b, bn)) = (val(self, fr, *left), val(self, fr, *right));
                let logical = matches!(op, B::LogicalAnd | B::LogicalOr);
                // The operand that decides a logical operator alone.
                let decides = |x: &Val| match op {
                    B::LogicalAnd => x.bool() == Some(false),
                    B::LogicalOr => x.bool() == Some(true),
                    _ => false,
                };
                match (&a, &b) {
                    (Val::K(x), Val::K(y)) => binary(*op, *x, *y).map_or(Val::Const, Val::K),
                    (x, y) if x.known() && y.known() => Val::Const,
                    (x, _) if decides(x) => x.clone(),
                    (_, y) if decides(y) => y.clone(),
                    (x, _) if logical && x.known() => {
                        deps.push(bn);
                        b.clone()
                    }
                    (_, y) if logical && y.known() => {
                        deps.push(an);
                        a.clone()
                    }
                    _ => {
                        deps.extend([an, bn]);
                        cost.alu += w;
                        Val::Data
                    }
                }
            }
            Expression::Select {
                condition,
                accept,
                reject,
            } => {
                let (c, cn) = val(self, fr, *condition);
                match c.bool() {
                    Some(c) => {
                        let (v, n) = val(self, fr, if c { *accept } else { *reject });
                        deps.push(n);
                        v
                    }
                    None => {
                        let ((a, an), (r, rn)) = (val(self, fr, *accept), val(self, fr, *reject));
                        if c.known() && a.known() && r.known() {
                            Val::Const
                        } else {
                            deps.extend([cn, an, rn]);
                            cost.alu += w;
                            Val::Data
                        }
                    }
                }
            }
            Expression::Relational { argument, .. } => {
                let (v, n) = val(self, fr, *argument);
                if v.known() {
                    Val::Const
                } else {
                    deps.push(n);
                    cost.alu += self.width(fi, *argument);
                    Val::Data
                }
            }
            Expression::Math {
                fun,
                arg,
                arg1,
                arg2,
                ..
            } => {
                let args: Vec<_> = [Some(*arg), *arg1, *arg2]
                    .into_iter()
                    .flatten()
                    .map(|a| val(self, fr, a))
                    .collect();
                if args.iter().all(|(a, _)| a.known()) {
                    match (fun, &args[..]) {
                        (M::Min, [(Val::K(Known::U32(a)), _), (Val::K(Known::U32(b)), _)]) => {
                            Val::K(Known::U32(*a.min(b)))
                        }
                        (M::Max, [(Val::K(Known::U32(a)), _), (Val::K(Known::U32(b)), _)]) => {
                            Val::K(Known::U32(*a.max(b)))
                        }
                        _ => Val::Const,
                    }
                } else {
                    deps.extend(args.into_iter().map(|(_, n)| n));
                    let n = self.width(fi, *arg);
                    match fun {
                        M::Exp2 | M::Log2 | M::Sqrt | M::InverseSqrt | M::Sin | M::Cos => {
                            cost.alu += n;
                            cost.sfu += n;
                        }
                        M::Exp | M::Log | M::Tanh => {
                            cost.alu += 2 * n;
                            cost.sfu += n;
                        }
                        M::Pow => {
                            cost.alu += 3 * n;
                            cost.sfu += 2 * n;
                        }
                        M::Dot => {
                            cost.alu += n;
                            cost.fma += n - 1;
                        }
                        M::Fma => {
                            cost.alu += w;
                            cost.fma += w;
                        }
                        M::Clamp => cost.alu += 2 * w,
                        M::Length | M::Distance | M::Normalize => {
                            cost.alu += 2 * n + 1;
                            cost.sfu += 1;
                        }
                        _ => cost.alu += w,
                    }
                    Val::Data
                }
            }
            Expression::As {
                expr,
                kind,
                convert,
            } => {
                let (v, n) = val(self, fr, *expr);
                match (v, convert) {
                    (Val::K(k), Some(_)) => convert_to(k, *kind).map_or(Val::Const, Val::K),
                    (v, _) if v.known() => Val::Const,
                    _ => {
                        deps.push(n);
                        cost.alu += w;
                        Val::Data
                    }
                }
            }
            // Set by their statements.
            Expression::CallResult(_)
            | Expression::AtomicResult { .. }
            | Expression::WorkGroupUniformLoadResult { .. }
            | Expression::SubgroupBallotResult
            | Expression::SubgroupOperationResult { .. } => return,
            Expression::ArrayLength(_) => {
                cost.uniform += 1;
                Val::Data
            }
            _ => {
                cost.alu += 1;
                Val::Data
            }
        };
        let mut reused = None;
        let loaded = match &f.expressions[h] {
            Expression::Load { pointer } => match self.value(fr, f, *pointer).0 {
                Val::Local((l, Some(p))) => fr.local_ids.get(&(l, p)).copied(),
                _ => None,
            },
            _ => None,
        };
        let node = if out.known() {
            None
        } else if pure_expression(&f.expressions[h]) {
            // An equal computation already made is reused (a compiler's
            // common subexpressions and loop-invariant code).
            // Operands are known values, evaluated values (by id), or
            // values from elsewhere (arguments, call results) by node;
            // one with neither is not matched.
            let ops: Option<Vec<String>> = operands(&f.expressions[h])
                .into_iter()
                .map(|o| match self.value(fr, f, o) {
                    (v, _) if v.known() => Some(format!("{v:?}")),
                    _ if fr.ids[o.index()] != u64::MAX => Some(format!("#{}", fr.ids[o.index()])),
                    (_, Some(n)) => Some(format!("n{n}")),
                    _ => None,
                })
                .collect();
            self.next_id += 1;
            let key = match ops {
                Some(ops) => format!("{}:{ops:?}", h.index()),
                None => format!("unique {}", self.next_id),
            };
            match self.cse.get(&key) {
                Some(&n) if self.nodes.get(n).is_some_and(|node| node.key == key) => {
                    reused = self.nodes[n].id;
                    Some(n)
                }
                _ => {
                    let n = self.node(cost, deps.into_iter().flatten().collect(), at);
                    if let Some(n) = n
                        && self.nodes[n].key.is_empty()
                        && !cost.is_zero()
                    {
                        self.nodes[n].key.clone_from(&key);
                        self.nodes[n].id = Some(self.next_id);
                        self.cse.insert(key, n);
                    }
                    n
                }
            }
        } else {
            self.node(cost, deps.into_iter().flatten().collect(), at)
        };

        fr.vals[h.index()] = (out, node);
        // Each evaluation is a new value unless it reused an equal one or
        // reads a local element whose value is known by id.
        self.next_id += 1;
        fr.ids[h.index()] = reused.or(loaded).unwrap_or(self.next_id - 1);
    }

    /// Charges a side effect now: its own cost and what it depends on.
    fn effect(&mut self, cost: Cost, deps: Vec<Option<usize>>, at: usize) {
        let n = self.node(cost, deps.into_iter().flatten().collect(), at);
        if cost.is_zero() {
            // A bare dependency: charge it without a node of its own.
            self.demand(n);
        } else {
            self.demand(n);
        }
    }

    /// Runs a block; `Err` when an exit of the loop being decided depends
    /// on data.
    fn exec(
        &mut self,
        fr: &mut Frame,
        f: &Function,
        fi: &FunctionInfo,
        block: &Block,
    ) -> Result<Flow, Undecided> {
        for (st, span) in block.span_iter() {
            self.steps += 1;
            let at = span.to_range().map_or(0, |r| r.start);
            match st {
                Statement::Emit(range) => {
                    for h in range.clone() {
                        self.eval(fr, f, fi, h);
                    }
                }
                Statement::Block(b) => {
                    let flow = self.exec(fr, f, fi, b)?;
                    if flow != Flow::Normal {
                        return Ok(flow);
                    }
                }
                Statement::If {
                    condition,
                    accept,
                    reject,
                } => {
                    let (c, cn) = self.value(fr, f, *condition);
                    if let Some(c) = c.bool() {
                        let flow = self.exec(fr, f, fi, if c { accept } else { reject })?;
                        if flow != Flow::Normal {
                            return Ok(flow);
                        }
                        continue;
                    }
                    if self.rare.contains(&at) {
                        let branch = Cost {
                            branch: 1,
                            ..Cost::default()
                        };
                        self.effect(branch, vec![cn], at);
                        forget_stores(fr, f, [accept, reject]);
                        continue;
                    }
                    // A branch whose sides only compute and assign locals
                    // (the short-circuit `&&` and `||` lower to those) is
                    // predicated: no branch, a select per assignment.
                    let predicated = pure(f, accept) && pure(f, reject);
                    if predicated {
                        fr.predicated += 1;
                        self.effect(Cost::default(), vec![cn], at);
                    } else {
                        let branch = Cost {
                            branch: 1,
                            ..Cost::default()
                        };
                        self.effect(branch, vec![cn], at);
                    }
                    fr.conditional += 1;
                    for (side, b) in [accept, reject].into_iter().enumerate() {
                        // One select per assignment: charged on one side.
                        if predicated && side == 1 {
                            fr.predicated -= 1;
                        }
                        let flow = self.exec(fr, f, fi, b);
                        if predicated && side == 1 {
                            fr.predicated += 1;
                        }
                        if flow.is_err() {
                            fr.conditional -= 1;
                            if predicated {
                                fr.predicated -= 1;
                            }
                        }
                        if matches!(flow?, Flow::Break | Flow::Continue)
                            && let Some(last) = self.undecided_exit.last_mut()
                        {
                            *last = true;
                        }
                    }
                    fr.conditional -= 1;
                    if predicated {
                        fr.predicated -= 1;
                    }
                    // Either side may have run: what they assign is data.
                    forget_stores(fr, f, [accept, reject]);
                }
                Statement::Switch { selector, cases } => {
                    let (sel, sn) = self.value(fr, f, *selector);
                    if let Val::K(s) = sel {
                        let mut taken = false;
                        for case in cases {
                            let hit = match (case.value, s) {
                                (naga::SwitchValue::U32(c), Known::U32(s)) => c == s,
                                (naga::SwitchValue::I32(c), Known::I32(s)) => c == s,
                                (naga::SwitchValue::Default, _) => true,
                                _ => false,
                            };
                            if hit || taken {
                                taken = true;
                                let flow = self.exec(fr, f, fi, &case.body)?;
                                if flow == Flow::Break {
                                    break;
                                }
                                if flow != Flow::Normal {
                                    return Ok(flow);
                                }
                                if !case.fall_through {
                                    break;
                                }
                            }
                        }
                    } else {
                        let branch = Cost {
                            branch: 1,
                            ..Cost::default()
                        };
                        self.effect(branch, vec![sn], at);
                        fr.conditional += 1;
                        for case in cases {
                            let flow = self.exec(fr, f, fi, &case.body);
                            if flow.is_err() {
                                fr.conditional -= 1;
                            }
                            flow?;
                        }
                        fr.conditional -= 1;
                        forget_stores(fr, f, cases.iter().map(|c| &c.body));
                    }
                }
                Statement::Loop {
                    body,
                    continuing,
                    break_if,
                } => {
                    let hot = span.to_range().as_ref() == Some(&self.hot) && !self.recording;
                    if hot {
                        self.recording = true;
                        self.hot_seen = true;
                    }
                    let flow = self.run_loop(fr, f, fi, body, continuing, *break_if);
                    if hot {
                        self.recording = false;
                    }
                    if flow == Flow::Return {
                        return Ok(flow);
                    }
                }
                Statement::Break => return Ok(Flow::Break),
                Statement::Continue => return Ok(Flow::Continue),
                Statement::Return { value } => {
                    fr.ret = value.map(|v| self.value(fr, f, v));
                    return Ok(Flow::Return);
                }
                Statement::ControlBarrier(_) | Statement::MemoryBarrier(_) => {
                    let barrier = Cost {
                        barrier: 1,
                        ..Cost::default()
                    };
                    self.effect(barrier, vec![], at);
                }
                Statement::Store { pointer, value } => {
                    let ((p, pn), (v, vn)) =
                        (self.value(fr, f, *pointer), self.value(fr, f, *value));
                    match p {
                        Val::Local((l, path)) => {
                            let mut cost = Cost::default();
                            if path.is_none() {
                                cost.local += 1;
                            }
                            if fr.predicated > 0 {
                                cost.alu += 1;
                            }
                            // A store to a local is live when a load of it is.
                            let n = self.node(cost, [pn, vn].into_iter().flatten().collect(), at);

                            if path.as_ref().is_some_and(|p| p.is_empty()) && self.is_scalar(f, l) {
                                fr.locals.insert(l, v);
                            }
                            // What a load of this element reads, by value id.
                            match &path {
                                Some(p)
                                    if fr.conditional == 0 && fr.ids[value.index()] != u64::MAX =>
                                {
                                    fr.local_ids
                                        .retain(|(vl, vp), _| *vl != l || !vp.starts_with(p));
                                    fr.local_ids.insert((l, p.clone()), fr.ids[value.index()]);
                                }
                                _ => fr.local_ids.retain(|(vl, _), _| *vl != l),
                            }
                            let stores = fr.stores.entry(l).or_default();
                            if fr.conditional == 0
                                && let Some(p) = &path
                            {
                                stores.retain(|(sp, _)| {
                                    sp.as_ref().is_none_or(|s| !s.starts_with(p))
                                });
                            }
                            if let Some(n) = n {
                                stores.push((path, n));
                            }
                        }
                        Val::Global(space) => {
                            let mut cost = Cost::default();
                            match space {
                                AddressSpace::WorkGroup => cost.wg_store += 1,
                                AddressSpace::Private | AddressSpace::Function => {}
                                _ => cost.global_store += 1,
                            }
                            self.effect(cost, vec![pn, vn], at);
                        }
                        _ => {}
                    }
                }
                Statement::Atomic {
                    pointer,
                    value,
                    result,
                    ..
                } => {
                    let (pn, vn) = (self.value(fr, f, *pointer).1, self.value(fr, f, *value).1);
                    let cost = Cost {
                        alu: 1,
                        ..Cost::default()
                    };
                    self.effect(cost, vec![pn, vn], at);
                    if let Some(r) = result {
                        fr.vals[r.index()] = (Val::Data, None);
                    }
                }
                Statement::WorkGroupUniformLoad { pointer, result } => {
                    let pn = self.value(fr, f, *pointer).1;
                    let cost = Cost {
                        wg_load: 1,
                        barrier: 1,
                        ..Cost::default()
                    };
                    self.effect(cost, vec![pn], at);
                    fr.vals[result.index()] = (Val::Data, None);
                }
                Statement::Call {
                    function,
                    arguments,
                    result,
                } => {
                    let args: Vec<_> = arguments.iter().map(|&a| self.value(fr, f, a)).collect();
                    let callee = &self.module.functions[*function];

                    let mut inner = Frame::new(callee, args);
                    self.init_locals(&mut inner, callee);
                    let cfi = &self.info[*function];
                    self.undecided_exit.push(false);
                    let _ = self.exec(&mut inner, callee, cfi, &callee.body);
                    self.undecided_exit.pop();
                    if let Some(r) = result {
                        fr.vals[r.index()] = inner.ret.unwrap_or((Val::Data, None));
                        if fr.vals[r.index()].0 == Val::Unset {
                            fr.vals[r.index()].0 = Val::Data;
                        }
                    }
                }
                Statement::SubgroupBallot { result, .. }
                | Statement::SubgroupGather { result, .. }
                | Statement::SubgroupCollectiveOperation { result, .. } => {
                    let cost = Cost {
                        alu: 1,
                        ..Cost::default()
                    };
                    let n = self.node(cost, vec![], at);
                    fr.vals[result.index()] = (Val::Data, n);
                }
                _ => {}
            }
        }
        Ok(Flow::Normal)
    }

    /// Runs a loop to its end when every exit is decided, else one
    /// iteration with the variables it assigns unknown.
    fn run_loop(
        &mut self,
        fr: &mut Frame,
        f: &Function,
        fi: &FunctionInfo,
        body: &Block,
        continuing: &Block,
        break_if: Option<Handle<Expression>>,
    ) -> Flow {
        let saved = (
            fr.clone(),
            self.nodes.len(),
            self.charged.len(),
            self.hot_cost,
            self.hot_trace.clone(),
            self.steps,
        );
        if let Ok(flow) = self.decided_loop(fr, f, fi, body, continuing, break_if) {
            return flow;
        }
        // Undo: the frame, the nodes made and the charges since.
        let (frame, nodes, charged, hot_cost, hot_trace, steps) = saved;
        *fr = frame;
        for n in self.charged.drain(charged..) {
            if n < nodes {
                self.nodes[n].charged = false;
            }
        }
        self.nodes.truncate(nodes);
        self.at.truncate(nodes);
        (self.hot_cost, self.hot_trace, self.steps) = (hot_cost, hot_trace, steps);

        forget_stores(fr, f, [body, continuing]);
        // Each variable the loop assigns holds one (unknown) value at the
        // iteration's start.
        for b in [body, continuing] {
            walk(b, &mut |st, _| {
                if let Statement::Store { pointer, .. } = st
                    && let Expression::LocalVariable(l) = f.expressions[*pointer]
                {
                    self.next_id += 1;
                    fr.local_ids.insert((l, Vec::new()), self.next_id);
                }
            });
        }
        self.undecided_exit.push(false);
        let flow = self.exec(fr, f, fi, body).unwrap_or(Flow::Normal);
        if flow != Flow::Return {
            let _ = self.exec(fr, f, fi, continuing);
            if let Some(b) = break_if {
                let n = self.value(fr, f, b).1;
                let branch = Cost {
                    branch: 1,
                    ..Cost::default()
                };
                self.effect(branch, vec![n], 0);
            }
        }
        self.undecided_exit.pop();
        // Scalars the loop assigns (its counters, carried values) feed its
        // next iteration: live.
        let mut carried = Vec::new();
        for b in [body, continuing] {
            walk(b, &mut |st, _| {
                if let Statement::Store { pointer, .. } = st
                    && let Expression::LocalVariable(l) = f.expressions[*pointer]
                    && self.is_scalar(f, l)
                {
                    carried.push(l);
                }
            });
        }
        for l in carried {
            let nodes: Vec<usize> = fr
                .stores
                .get(&l)
                .map(|s| s.iter().map(|&(_, n)| n).collect())
                .unwrap_or_default();
            for n in nodes {
                self.demand(Some(n));
            }
        }
        if flow == Flow::Return {
            Flow::Return
        } else {
            Flow::Normal
        }
    }

    fn decided_loop(
        &mut self,
        fr: &mut Frame,
        f: &Function,
        fi: &FunctionInfo,
        body: &Block,
        continuing: &Block,
        break_if: Option<Handle<Expression>>,
    ) -> Result<Flow, Undecided> {
        // An exit test on data is an `if` with a `break`; a loop without
        // a break (or `break if`) is not decided here.
        if !has_break(body) && break_if.is_none() {
            return Err(Undecided);
        }
        for _ in 0..MAX_ITERATIONS {
            if self.steps > MAX_STEPS {
                return Err(Undecided);
            }
            self.undecided_exit.push(false);
            let flow = self.exec(fr, f, fi, body);
            let undecided = self.undecided_exit.pop() == Some(true);
            let flow = flow?;
            if undecided {
                return Err(Undecided);
            }
            match flow {
                Flow::Break => return Ok(Flow::Normal),
                Flow::Return => return Ok(Flow::Return),
                Flow::Normal | Flow::Continue => {}
            }
            self.undecided_exit.push(false);
            let flow = self.exec(fr, f, fi, continuing);
            self.undecided_exit.pop();
            flow?;
            if let Some(b) = break_if {
                match self.value(fr, f, b).0.bool() {
                    Some(true) => return Ok(Flow::Normal),
                    Some(false) => {}
                    None => return Err(Undecided),
                }
            }
        }
        Err(Undecided)
    }
}

/// Whether a store at path `a` may be what a load at path `b` reads (one
/// path a prefix of the other, or either dynamic).
fn overlaps(a: &Option<Vec<u32>>, b: &Option<Vec<u32>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.starts_with(b) || b.starts_with(a),
        _ => true,
    }
}

/// Calls `visit` on every statement of `block`, nested ones included.
fn walk(block: &Block, visit: &mut dyn FnMut(&Statement, &Span)) {
    for (st, span) in block.span_iter() {
        visit(st, span);
        match st {
            Statement::Block(b) => walk(b, visit),
            Statement::If { accept, reject, .. } => {
                walk(accept, visit);
                walk(reject, visit);
            }
            Statement::Switch { cases, .. } => {
                for c in cases {
                    walk(&c.body, visit);
                }
            }
            Statement::Loop {
                body, continuing, ..
            } => {
                walk(body, visit);
                walk(continuing, visit);
            }
            _ => {}
        }
    }
}

/// Whether an expression is arithmetic on its operands alone (no memory
/// read), so equal operands give an equal value.
fn pure_expression(e: &Expression) -> bool {
    matches!(
        e,
        Expression::Unary { .. }
            | Expression::Binary { .. }
            | Expression::Select { .. }
            | Expression::Math { .. }
            | Expression::As { .. }
            | Expression::Relational { .. }
            | Expression::Splat { .. }
            | Expression::Swizzle { .. }
            | Expression::Compose { .. }
    )
}

/// The operands of a [`pure_expression`].
fn operands(e: &Expression) -> Vec<Handle<Expression>> {
    match e {
        Expression::Unary { expr, .. } | Expression::As { expr, .. } => vec![*expr],
        Expression::Binary { left, right, .. } => vec![*left, *right],
        Expression::Select {
            condition,
            accept,
            reject,
        } => vec![*condition, *accept, *reject],
        Expression::Math {
            arg, arg1, arg2, ..
        } => [Some(*arg), *arg1, *arg2].into_iter().flatten().collect(),
        Expression::Relational { argument, .. } => vec![*argument],
        Expression::Splat { value, .. } => vec![*value],
        Expression::Swizzle { vector, .. } => vec![*vector],
        Expression::Compose { components, .. } => components.clone(),
        _ => Vec::new(),
    }
}

/// Whether a block only computes and assigns: no call, loop, exit,
/// barrier, or store to memory (local variables aside).
fn pure(f: &Function, block: &Block) -> bool {
    block.iter().all(|st| match st {
        Statement::Emit(_) => true,
        Statement::Store { pointer, .. } => {
            let mut p = *pointer;
            loop {
                match &f.expressions[p] {
                    Expression::Access { base, .. } | Expression::AccessIndex { base, .. } => {
                        p = *base
                    }
                    Expression::LocalVariable(_) => break true,
                    _ => break false,
                }
            }
        }
        Statement::Block(b) => pure(f, b),
        Statement::If { accept, reject, .. } => pure(f, accept) && pure(f, reject),
        _ => false,
    })
}

/// Whether `body` breaks out of its own loop anywhere (not from a nested
/// loop or switch).
fn has_break(body: &Block) -> bool {
    body.iter().any(|st| match st {
        Statement::Break => true,
        Statement::Block(b) => has_break(b),
        Statement::If { accept, reject, .. } => has_break(accept) || has_break(reject),
        _ => false,
    })
}

/// Marks every whole local variable the blocks store to as data.
fn forget_stores<'b>(fr: &mut Frame, f: &Function, blocks: impl IntoIterator<Item = &'b Block>) {
    for b in blocks {
        walk(b, &mut |st, _| {
            if let Statement::Store { pointer, .. } = st
                && let Expression::LocalVariable(l) = f.expressions[*pointer]
            {
                fr.locals.insert(l, Val::Data);
                fr.local_ids.retain(|(vl, _), _| *vl != l);
            }
        });
    }
}

fn literal(l: Literal) -> Val {
    match l {
        Literal::Bool(b) => Val::K(Known::Bool(b)),
        Literal::U32(u) => Val::K(Known::U32(u)),
        Literal::I32(i) => Val::K(Known::I32(i)),
        Literal::F32(x) => Val::K(Known::F32(x)),
        Literal::AbstractInt(i) => i32::try_from(i).map_or(Val::Const, |i| Val::K(Known::I32(i))),
        _ => Val::Const,
    }
}

fn unary(op: U, k: Known) -> Option<Known> {
    Some(match (op, k) {
        (U::LogicalNot, Known::Bool(b)) => Known::Bool(!b),
        (U::Negate, Known::I32(i)) => Known::I32(i.wrapping_neg()),
        (U::Negate, Known::F32(x)) => Known::F32(-x),
        (U::BitwiseNot, Known::U32(u)) => Known::U32(!u),
        (U::BitwiseNot, Known::I32(i)) => Known::I32(!i),
        _ => return None,
    })
}

fn binary(op: B, x: Known, y: Known) -> Option<Known> {
    use Known::*;
    let cmp = |o: std::cmp::Ordering| -> Option<Known> {
        use std::cmp::Ordering::*;
        Some(Bool(match op {
            B::Equal => o == Equal,
            B::NotEqual => o != Equal,
            B::Less => o == Less,
            B::LessEqual => o != Greater,
            B::Greater => o == Greater,
            B::GreaterEqual => o != Less,
            _ => return None,
        }))
    };
    Some(match (x, y) {
        (U32(a), U32(b)) => match op {
            B::Add => U32(a.wrapping_add(b)),
            B::Subtract => U32(a.wrapping_sub(b)),
            B::Multiply => U32(a.wrapping_mul(b)),
            B::Divide => U32(a.checked_div(b)?),
            B::Modulo => U32(a.checked_rem(b)?),
            B::And => U32(a & b),
            B::InclusiveOr => U32(a | b),
            B::ExclusiveOr => U32(a ^ b),
            B::ShiftLeft => U32(a.checked_shl(b)?),
            B::ShiftRight => U32(a.checked_shr(b)?),
            _ => return cmp(a.cmp(&b)),
        },
        (I32(a), I32(b)) => match op {
            B::Add => I32(a.wrapping_add(b)),
            B::Subtract => I32(a.wrapping_sub(b)),
            B::Multiply => I32(a.wrapping_mul(b)),
            B::Divide => I32(a.checked_div(b)?),
            B::Modulo => I32(a.checked_rem(b)?),
            _ => return cmp(a.cmp(&b)),
        },
        (F32(a), F32(b)) => match op {
            B::Add => F32(a + b),
            B::Subtract => F32(a - b),
            B::Multiply => F32(a * b),
            B::Divide => F32(a / b),
            _ => return cmp(a.partial_cmp(&b)?),
        },
        (Bool(a), Bool(b)) => match op {
            B::LogicalAnd | B::And => Bool(a && b),
            B::LogicalOr | B::InclusiveOr => Bool(a || b),
            B::Equal => Bool(a == b),
            B::NotEqual => Bool(a != b),
            _ => return None,
        },
        _ => return None,
    })
}

fn convert_to(k: Known, kind: ScalarKind) -> Option<Known> {
    let f = match k {
        Known::U32(u) => f64::from(u),
        Known::I32(i) => f64::from(i),
        Known::F32(x) => f64::from(x),
        Known::Bool(b) => f64::from(u8::from(b)),
    };
    Some(match kind {
        ScalarKind::Uint => Known::U32(f as u32),
        ScalarKind::Sint => Known::I32(f as i32),
        ScalarKind::Float => Known::F32(f as f32),
        ScalarKind::Bool => Known::Bool(f != 0.0),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(body: &str) -> Cost {
        let src = format!(
            "@group(0) @binding(0) var<storage, read> a: array<f32>;\n\
             @group(0) @binding(1) var<storage, read_write> o: array<f32>;\n\
             var<workgroup> w: array<vec4<f32>, 64>;\n\
             const R: u32 = 4u;\n\
             override FLAG: u32 = 0u;\n\
             @compute @workgroup_size(64)\n\
             fn main(@builtin(local_invocation_index) lid: u32) {{\n{body}\n}}\n"
        );
        hot_loop(&src, "main", &[("FLAG", 1.0)]).unwrap()
    }

    /// A data-bounded loop counts one iteration; a constant-bounded inner
    /// loop is unrolled and its constant branch folded; arithmetic on
    /// unknown data counts per component.
    #[test]
    fn counts_one_iteration_of_a_data_loop_with_unrolled_inner_loops() {
        let c = count(
            "var acc = vec4<f32>(0.0);
             let n = u32(a[0]);
             // cost: hot loop
             for (var j = 0u; j < n; j++) {
                 let x = w[j % 64u];
                 for (var r = 0u; r < R; r++) {
                     if FLAG == 1u {
                         acc = fma(x, x, acc);
                     } else {
                         acc += x;
                     }
                 }
             }
             o[0] = acc.x;",
        );
        // j < n and the branch on it, j % 64, j + 1; one workgroup load;
        // four vec4 FMAs.
        assert_eq!(c.wg_load, 1);
        assert_eq!(c.fma, 16);
        assert_eq!(c.branch, 1);
        assert_eq!(c.alu, 16 + 3);
        assert_eq!(c.slots(), 16 + 3 + 1 + 1);
    }

    /// A constant test inside an unrolled loop breaks out of that loop
    /// only; the outer loop, bounded by data, counts once.
    #[test]
    fn a_constant_break_leaves_only_its_loop() {
        let c = count(
            "var s = 0.0;
             // cost: hot loop
             for (var j = lid; j < 100u; j += 64u) {
                 for (var c = 0u; c < 4u; c++) {
                     if c >= 3u {
                         break;
                     }
                     s += a[j * 4u + c];
                 }
             }
             o[lid] = s;",
        );
        assert_eq!(c.global_load, 3);
        // j < 100, j + 64, j·4 once (a common subexpression), 3 × (+ c,
        // the add to s).
        assert_eq!(c.alu, 3 + 6);
        assert_eq!(c.branch, 1);
    }

    /// What reaches no store or branch costs nothing; loads of a local
    /// array at an unknown index go to local memory.
    #[test]
    fn dead_values_are_free_and_unknown_local_indices_are_local_memory() {
        let c = count(
            "var t: array<f32, 8>;
             // cost: hot loop
             for (var j = 0u; j < 8u; j++) {
                 let dead = a[j] * 3.0 + 1.0;
                 t[j] = a[j];
                 o[j] = t[lid % 8u];
             }",
        );
        assert_eq!(c.local, 8);
        assert_eq!(c.global_load, 8);
        assert_eq!(c.global_store, 8);
        // lid % 8 per iteration; `dead` is never used.
        assert_eq!(c.alu, 8);
    }

    /// A branch marked rare costs the branch, not its sides.
    #[test]
    fn rare_branches_count_as_not_taken() {
        let c = count(
            "var s = 0.0;
             // cost: hot loop
             for (var j = lid; j < 100u; j += 64u) {
                 let x = a[j];
                 // cost: rare
                 if x > 0.5 {
                     s += exp2(x) * 3.0;
                 }
             }
             o[lid] = s;",
        );
        assert_eq!((c.sfu, c.branch, c.global_load), (0, 2, 1));
        // j < 100, j + 64, x > 0.5.
        assert_eq!(c.alu, 3);
    }

    #[test]
    fn values_carried_out_of_the_loop_are_live() {
        let c = count(
            "var s: array<f32, 4>;
             let n = u32(a[0]);
             for (var b = 0u; b < n; b += 64u) {
                 var ss: array<f32, 4>;
                 // cost: hot loop
                 for (var j = 0u; j < n; j++) {
                     for (var r = 0u; r < R; r++) {
                         ss[r] += exp2(a[j + r]);
                     }
                 }
                 for (var r = 0u; r < R; r++) {
                     s[r] = fma(s[r], 2.0, ss[r]);
                 }
             }
             for (var r = 0u; r < R; r++) {
                 if lid < 7u {
                     o[r] = s[r];
                 }
             }",
        );
        assert_eq!(c.sfu, 4);
    }

    /// A hot loop's budget: the shader, its template, the (query, key)
    /// pairs one run of its hot loop serves, and the most issue slots per
    /// pair it may take (docs/gpu-cost.md, "Budgets").
    struct Budget {
        name: &'static str,
        shader: crate::gpu::shaders::ShaderId,
        template: Vec<(&'static str, u32)>,
        pairs: u64,
        slots_per_pair: f64,
    }

    /// Gaussian profile (the benchmarks').
    const GAUSSIAN: &[(&str, f64)] = &[("PROFILE", 0.0)];

    fn budgets() -> Vec<Budget> {
        use crate::gpu::plan::LOCAL_MEAN_WG;
        use crate::gpu::plan::local_mean::{
            IP_STEP_KEYS, IP_TILE_ROWS, LOCAL_MEAN_CHUNK, rows_per_thread,
        };
        use crate::gpu::shaders::ShaderId;
        // One run of the local mean's hot loop: a chunk of keys against
        // the invocation's rows.
        let pairs = (rows_per_thread(3) * LOCAL_MEAN_CHUNK) as u64;
        // The gaussian local mean at d = 3 with `qt` value columns, weight
        // form `form`, leave-one-out `excl`.
        let lm = |name, qt: u32, form: u32, excl: u32, budget| Budget {
            name,
            shader: ShaderId::LocalMean,
            template: vec![
                ("D", 3),
                ("QT", qt),
                ("QA", qt.max(1)),
                ("STAGE", 256),
                ("C", LOCAL_MEAN_CHUNK as u32),
                ("MASKED", 0),
                ("R", rows_per_thread(3) as u32),
                ("FORM", form),
                ("EXCL", excl),
            ],
            pairs,
            slots_per_pair: budget,
        };
        vec![
            lm("local mean d=3 q=1", 1, 0, 0, 15.0),
            lm("local mean d=3 q=2", 2, 0, 0, 15.0),
            lm("local mean d=3 q=4", 4, 0, 0, 15.0),
            lm("row sums d=3 (KDE)", 0, 0, 0, 15.0),
            lm("leave-one-out d=3 q=1", 1, 0, 1, 13.89),
            lm("row sums d=3, exact nearest key", 0, 1, 0, 11.55),
            Budget {
                name: "kNN d=128 k=16",
                shader: ShaderId::Knn,
                template: vec![("D", 128), ("K", 16), ("STAGE", 64), ("KB", 4)],
                pairs: 4,
                slots_per_pair: 327.75,
            },
            Budget {
                name: "inner-product tiles d=128 q=4",
                shader: ShaderId::LocalMeanIp,
                template: vec![("D", 128), ("QT", 4), ("QA", 4), ("QRES", 1)],
                pairs: (IP_STEP_KEYS * IP_TILE_ROWS / LOCAL_MEAN_WG) as u64,
                slots_per_pair: 222.09,
            },
            Budget {
                name: "attention d=64 (RI 4, BK 32)",
                shader: ShaderId::SoftmaxTiled,
                template: vec![("D4", 16), ("QA4", 16), ("BK", 32), ("RI", 4)],
                pairs: 4 * 32 / 4,
                slots_per_pair: 167.84,
            },
            Budget {
                name: "attention decoding d=64 (RI 1, BK 64)",
                shader: ShaderId::SoftmaxTiled,
                template: vec![("D4", 16), ("QA4", 16), ("BK", 64), ("RI", 1)],
                pairs: 64 / 4,
                slots_per_pair: 229.94,
            },
        ]
    }

    /// Every hot loop within its budget: a change that adds work per pair
    /// fails here without a GPU. docs/gpu-cost.md shows each row as this
    /// prints it (checked: a count that moves must be written there).
    #[test]
    fn hot_loops_within_their_budgets() {
        let doc = include_str!("../../../docs/gpu-cost.md");
        let mut over = Vec::new();
        for b in budgets() {
            let src = b.shader.render_for(&b.template, None).unwrap();
            let c = hot_loop(&src, b.shader.entry(), GAUSSIAN)
                .unwrap_or_else(|e| panic!("{}: {e}", b.name));
            let per = |n: u64| n as f64 / b.pairs as f64;
            let slots = per(c.slots());
            let row = format!(
                "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} |",
                b.name,
                slots,
                per(c.fma),
                per(c.sfu),
                per(c.wg_load),
                per(c.global_load),
                per(c.branch),
                b.slots_per_pair
            );
            println!("{row}");
            if !doc.lines().any(|l| l.trim() == row) {
                over.push(format!("docs/gpu-cost.md lacks the row {row}"));
            }
            // Budgets are counts to two decimals.
            if slots > b.slots_per_pair + 0.005 {
                // Where the slots go, line by line of the rendered source.
                for (line, n, text) in trace(&src, b.shader.entry(), GAUSSIAN).unwrap() {
                    println!("  {line:5} {:8.2}  {text}", per(n));
                }
                over.push(format!(
                    "{}: {slots:.2} slots per pair > {}",
                    b.name, b.slots_per_pair
                ));
            }
        }
        assert!(over.is_empty(), "{}", over.join("\n"));
    }
}
