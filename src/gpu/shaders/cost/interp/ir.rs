//! Walks over naga's IR the interpreter needs: statements nested in a
//! block, what an expression reads, which branches are only arithmetic.

use naga::{Block, Expression, Function, Handle, LocalVariable, Span, Statement};

/// Whether a store at path `a` may be what a load at path `b` reads (one
/// path a prefix of the other, or either dynamic).
pub(super) fn overlaps(a: &Option<Vec<u32>>, b: &Option<Vec<u32>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.starts_with(b) || b.starts_with(a),
        _ => true,
    }
}

/// Calls `visit` on every statement of `block`, nested ones included.
pub(super) fn walk(block: &Block, visit: &mut dyn FnMut(&Statement, &Span)) {
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
pub(super) fn pure_expression(e: &Expression) -> bool {
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
pub(super) fn operands(e: &Expression) -> Vec<Handle<Expression>> {
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
pub(super) fn pure(f: &Function, block: &Block) -> bool {
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
pub(super) fn has_break(body: &Block) -> bool {
    body.iter().any(|st| match st {
        Statement::Break => true,
        Statement::Block(b) => has_break(b),
        Statement::If { accept, reject, .. } => has_break(accept) || has_break(reject),
        _ => false,
    })
}

/// The whole local variables the blocks store to (an access chain's
/// stores into arrays and structs aside).
pub(super) fn stored_locals<'b>(
    f: &Function,
    blocks: impl IntoIterator<Item = &'b Block>,
) -> Vec<Handle<LocalVariable>> {
    let mut out = Vec::new();
    for b in blocks {
        walk(b, &mut |st, _| {
            if let Statement::Store { pointer, .. } = st
                && let Expression::LocalVariable(l) = f.expressions[*pointer]
            {
                out.push(l);
            }
        });
    }
    out
}
