//! The abstract interpreter behind [`hot_loop`](super::hot_loop): runs an
//! entry point with constants known and data unknown, and charges what
//! the live expressions of the hot loop cost (module docs of `cost`).

mod eval;
mod ir;
mod values;

use std::collections::HashMap;

use naga::{
    AddressSpace, Block, Expression, Function, Handle, LocalVariable, Module, ScalarKind,
    Statement, TypeInner,
    valid::{Capabilities, FunctionInfo, ModuleInfo, ValidationFlags, Validator},
};

use super::{Cost, MARKER, RARE};
use ir::{has_break, pure, stored_locals, walk};
use values::{Known, Stored, Val, binary, convert_to, literal, unary};

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

/// Parses, validates and interprets `entry`: the hot loop's cost and its
/// slots by source offset.
pub(super) fn run(
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
    /// Forgets what is known of these local variables (assigned where
    /// the interpreter cannot follow: a branch on data, a loop run once).
    fn forget(&mut self, locals: &[Handle<LocalVariable>]) {
        for &l in locals {
            self.locals.insert(l, Val::Data);
            self.local_ids.retain(|(vl, _), _| *vl != l);
        }
    }

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

    /// Charges a side effect now: its own cost and what it depends on.
    fn effect(&mut self, cost: Cost, deps: Vec<Option<usize>>, at: usize) {
        // (A cost-free effect on one value makes no node: that value is
        // charged itself.)
        let n = self.node(cost, deps.into_iter().flatten().collect(), at);
        self.demand(n);
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
                        self.effect(Cost::BRANCH, vec![cn], at);
                        fr.forget(&stored_locals(f, [accept, reject]));
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
                        self.effect(Cost::BRANCH, vec![cn], at);
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
                    fr.forget(&stored_locals(f, [accept, reject]));
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
                        self.effect(Cost::BRANCH, vec![sn], at);
                        fr.conditional += 1;
                        for case in cases {
                            let flow = self.exec(fr, f, fi, &case.body);
                            if flow.is_err() {
                                fr.conditional -= 1;
                            }
                            flow?;
                        }
                        fr.conditional -= 1;
                        fr.forget(&stored_locals(f, cases.iter().map(|c| &c.body)));
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

        let assigned = stored_locals(f, [body, continuing]);
        fr.forget(&assigned);
        // Each variable the loop assigns holds one (unknown) value at the
        // iteration's start.
        for &l in &assigned {
            self.next_id += 1;
            fr.local_ids.insert((l, Vec::new()), self.next_id);
        }
        self.undecided_exit.push(false);
        let flow = self.exec(fr, f, fi, body).unwrap_or(Flow::Normal);
        if flow != Flow::Return {
            let _ = self.exec(fr, f, fi, continuing);
            if let Some(b) = break_if {
                let n = self.value(fr, f, b).1;
                self.effect(Cost::BRANCH, vec![n], 0);
            }
        }
        self.undecided_exit.pop();
        // What the loop assigns (its counters, carried values, the sums it
        // hands to the code after it) feeds its next iteration or its
        // result: live.
        let carried = assigned;
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
