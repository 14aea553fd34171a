//! What the interpreter knows of a value, and the arithmetic it folds
//! on known scalars.

use naga::{
    AddressSpace, BinaryOperator as B, Handle, Literal, LocalVariable, ScalarKind,
    UnaryOperator as U,
};

/// A scalar the interpreter knows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Known {
    Bool(bool),
    U32(u32),
    I32(i32),
    F32(f32),
}

/// A local variable and the constant indices into it (`None`: some index
/// is data).
pub(super) type Path = (Handle<LocalVariable>, Option<Vec<u32>>);

/// A store into a local variable: its constant path (`None`: some index
/// is data) and its node.
pub(super) type Stored = (Option<Vec<u32>>, usize);

/// What the interpreter knows of a value.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Val {
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
    pub(super) fn known(&self) -> bool {
        matches!(self, Val::K(_) | Val::Const)
    }

    pub(super) fn bool(&self) -> Option<bool> {
        match self {
            Val::K(Known::Bool(b)) => Some(*b),
            _ => None,
        }
    }
}

pub(super) fn literal(l: Literal) -> Val {
    match l {
        Literal::Bool(b) => Val::K(Known::Bool(b)),
        Literal::U32(u) => Val::K(Known::U32(u)),
        Literal::I32(i) => Val::K(Known::I32(i)),
        Literal::F32(x) => Val::K(Known::F32(x)),
        Literal::AbstractInt(i) => i32::try_from(i).map_or(Val::Const, |i| Val::K(Known::I32(i))),
        _ => Val::Const,
    }
}

pub(super) fn unary(op: U, k: Known) -> Option<Known> {
    Some(match (op, k) {
        (U::LogicalNot, Known::Bool(b)) => Known::Bool(!b),
        (U::Negate, Known::I32(i)) => Known::I32(i.wrapping_neg()),
        (U::Negate, Known::F32(x)) => Known::F32(-x),
        (U::BitwiseNot, Known::U32(u)) => Known::U32(!u),
        (U::BitwiseNot, Known::I32(i)) => Known::I32(!i),
        _ => return None,
    })
}

pub(super) fn binary(op: B, x: Known, y: Known) -> Option<Known> {
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

pub(super) fn convert_to(k: Known, kind: ScalarKind) -> Option<Known> {
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
