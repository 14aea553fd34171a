//! The cost of one expression: folded when its operands are known, reused
//! when an equal one was made, else charged by kind and vector width.

use naga::{
    AddressSpace, BinaryOperator as B, Expression, Function, Handle, MathFunction as M,
    UnaryOperator as U, valid::FunctionInfo,
};

use super::ir::{operands, overlaps, pure_expression};
use super::values::{Known, Val, binary, convert_to, unary};
use super::{Cost, Frame, Interp};

impl Interp<'_> {
    /// Evaluates an emitted expression.
    pub(super) fn eval(
        &mut self,
        fr: &mut Frame,
        f: &Function,
        fi: &FunctionInfo,
        h: Handle<Expression>,
    ) {
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
}
