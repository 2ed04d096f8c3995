//! Evaluation of a selector's tree against a message, with SQL's three-valued logic
//! (the rules are in the documentation of [`super`]).
//!
//! Two mutually recursive walks: [`truth`] for an expression in a condition's place
//! and [`value`] for one in a value's place. Values borrow from the message and the
//! tree ([`Value::Str`] is a `&str`), so evaluation allocates nothing; numbers are read
//! from header strings in place. Recursion depth is bounded by the parser's nesting
//! limit.

use std::cmp::Ordering;

use super::parse::{ArithOp, CmpOp, Expr, Field, Literal};
use super::{Fields, Truth};

/// A value during evaluation. NULL is a value (a missing header, or the result of
/// arithmetic that has none).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Value<'a> {
    Null,
    Bool(bool),
    Num(Num),
    Str(&'a str),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    fn as_f64(self) -> f64 {
        match self {
            Num::Int(n) => n as f64,
            Num::Float(x) => x,
        }
    }
}

/// The number a string reads as: `[+-]digits[.digits][(e|E)[+-]digits]` (digits on at
/// least one side of the `.`), nothing else (no spaces, no `inf`/`NaN`, no hex). An
/// integer when it has neither `.` nor exponent (an `f64` if too large for `i64`).
pub(crate) fn parse_number(s: &str) -> Option<Num> {
    let b = s.as_bytes();
    let mut i = 0;
    if matches!(b.first(), Some(b'+' | b'-')) {
        i = 1;
    }
    let int_digits = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
    i += int_digits;
    let mut integer = true;
    let mut frac_digits = 0;
    if b.get(i) == Some(&b'.') {
        integer = false;
        i += 1;
        frac_digits = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        i += frac_digits;
    }
    if int_digits + frac_digits == 0 {
        return None;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        integer = false;
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let exp_digits = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        if exp_digits == 0 {
            return None;
        }
        i += exp_digits;
    }
    if i != b.len() {
        return None;
    }
    if integer {
        if let Ok(n) = s.parse::<i64>() {
            return Some(Num::Int(n));
        }
    }
    s.parse::<f64>().ok().map(Num::Float)
}

/// A string as a boolean: `true` or `false`, any case.
fn parse_bool(s: &str) -> Option<bool> {
    if s.eq_ignore_ascii_case("true") {
        Some(true)
    } else if s.eq_ignore_ascii_case("false") {
        Some(false)
    } else {
        None
    }
}

/// A value in a numeric context: a number, or a string that reads as one; `None` for
/// NULL and for a type mismatch.
fn numeric(v: Value<'_>) -> Option<Num> {
    match v {
        Value::Num(n) => Some(n),
        Value::Str(s) => parse_number(s),
        Value::Null | Value::Bool(_) => None,
    }
}

/// `e` as a condition.
pub(crate) fn truth<F: Fields + ?Sized>(e: &Expr, m: &F) -> Truth {
    match e {
        Expr::Or(items) => {
            let mut acc = Truth::False;
            for item in items {
                acc = acc.or(truth(item, m));
                if acc == Truth::True {
                    break;
                }
            }
            acc
        }
        Expr::And(items) => {
            let mut acc = Truth::True;
            for item in items {
                acc = acc.and(truth(item, m));
                if acc == Truth::False {
                    break;
                }
            }
            acc
        }
        Expr::Not(e) => !truth(e, m),
        Expr::Compare { op, left, right } => compare(value(left, m), *op, value(right, m)),
        Expr::Between {
            value: v,
            low,
            high,
            negated,
        } => {
            let v = value(v, m);
            let t = compare(value(low, m), CmpOp::Le, v).and(compare(v, CmpOp::Le, value(high, m)));
            negate_if(t, *negated)
        }
        Expr::In {
            value: v,
            list,
            negated,
        } => {
            let t = match value(v, m) {
                Value::Null => Truth::Unknown,
                Value::Str(s) => list.iter().any(|x| x == s).into(),
                _ => Truth::False,
            };
            negate_if(t, *negated)
        }
        Expr::Like {
            value: v,
            pattern,
            negated,
        } => {
            let t = match value(v, m) {
                Value::Null => Truth::Unknown,
                Value::Str(s) => pattern.matches(s).into(),
                _ => Truth::False,
            };
            negate_if(t, *negated)
        }
        Expr::IsNull { value: v, negated } => {
            (matches!(value(v, m), Value::Null) != *negated).into()
        }
        Expr::Literal(_) | Expr::Field(_) | Expr::Arith { .. } | Expr::Neg(_) | Expr::Plus(_) => {
            as_truth(value(e, m))
        }
    }
}

fn negate_if(t: Truth, negated: bool) -> Truth {
    if negated {
        !t
    } else {
        t
    }
}

/// A value in a condition's place: a boolean (or a string `true`/`false`) is itself,
/// NULL unknown, anything else false (a type mismatch).
fn as_truth(v: Value<'_>) -> Truth {
    match v {
        Value::Null => Truth::Unknown,
        Value::Bool(b) => b.into(),
        Value::Str(s) => parse_bool(s).map_or(Truth::False, Truth::from),
        Value::Num(_) => Truth::False,
    }
}

/// `e` as a value.
pub(crate) fn value<'a, F: Fields + ?Sized>(e: &'a Expr, m: &'a F) -> Value<'a> {
    match e {
        Expr::Literal(l) => match l {
            Literal::Null => Value::Null,
            Literal::Bool(b) => Value::Bool(*b),
            Literal::Int(n) => Value::Num(Num::Int(*n)),
            Literal::Float(x) => Value::Num(Num::Float(*x)),
            Literal::Str(s) => Value::Str(s),
        },
        Expr::Field(f) => field(f, m),
        Expr::Arith { first, rest } => {
            let mut acc = numeric(value(first, m));
            for (op, operand) in rest {
                let x = numeric(value(operand, m));
                acc = match (acc, x) {
                    (Some(a), Some(b)) => arith(a, *op, b),
                    _ => None,
                };
            }
            acc.map_or(Value::Null, Value::Num)
        }
        Expr::Neg(e) => numeric(value(e, m))
            .map(|n| match n {
                Num::Int(i) => i.checked_neg().map_or(Num::Float(-(i as f64)), Num::Int),
                Num::Float(x) => Num::Float(-x),
            })
            .map_or(Value::Null, Value::Num),
        Expr::Plus(e) => numeric(value(e, m)).map_or(Value::Null, Value::Num),
        Expr::Or(_)
        | Expr::And(_)
        | Expr::Not(_)
        | Expr::Compare { .. }
        | Expr::Between { .. }
        | Expr::In { .. }
        | Expr::Like { .. }
        | Expr::IsNull { .. } => match truth(e, m) {
            Truth::True => Value::Bool(true),
            Truth::False => Value::Bool(false),
            Truth::Unknown => Value::Null,
        },
    }
}

fn field<'a, F: Fields + ?Sized>(f: &'a Field, m: &'a F) -> Value<'a> {
    let header = |name: &str| m.header(name).map_or(Value::Null, Value::Str);
    match f {
        Field::Header(name) => header(name),
        Field::Type => header("type"),
        Field::CorrelationId => header("correlation-id"),
        Field::Priority => Value::Num(Num::Int(i64::from(m.priority()))),
        Field::MessageId => Value::Str(m.message_id()),
        Field::Timestamp => Value::Num(Num::Int(m.timestamp_ms())),
        Field::DeliveryMode => Value::Str(if m.persistent() {
            "PERSISTENT"
        } else {
            "NON_PERSISTENT"
        }),
        Field::Expiration => Value::Num(Num::Int(m.expiration_ms())),
    }
}

/// `a op b`; `None` (NULL) for division by zero. Integers stay exact until they
/// overflow (then `f64`); a quotient is an integer only when the division is exact.
fn arith(a: Num, op: ArithOp, b: Num) -> Option<Num> {
    if let (Num::Int(x), Num::Int(y)) = (a, b) {
        let exact = match op {
            ArithOp::Add => x.checked_add(y),
            ArithOp::Sub => x.checked_sub(y),
            ArithOp::Mul => x.checked_mul(y),
            ArithOp::Div if y == 0 => return None,
            ArithOp::Div => match x.checked_rem(y) {
                Some(0) => x.checked_div(y),
                _ => None,
            },
        };
        if let Some(n) = exact {
            return Some(Num::Int(n));
        }
    }
    let (x, y) = (a.as_f64(), b.as_f64());
    Some(Num::Float(match op {
        ArithOp::Add => x + y,
        ArithOp::Sub => x - y,
        ArithOp::Mul => x * y,
        ArithOp::Div if y == 0.0 => return None,
        ArithOp::Div => x / y,
    }))
}

/// Compares two numbers: integers exactly, otherwise as `f64` (NaN compares unequal
/// to everything).
fn compare_num(a: Num, op: CmpOp, b: Num) -> Truth {
    let ord = match (a, b) {
        (Num::Int(x), Num::Int(y)) => Some(x.cmp(&y)),
        _ => a.as_f64().partial_cmp(&b.as_f64()),
    };
    let Some(ord) = ord else {
        return (op == CmpOp::Ne).into();
    };
    match op {
        CmpOp::Eq => ord == Ordering::Equal,
        CmpOp::Ne => ord != Ordering::Equal,
        CmpOp::Lt => ord == Ordering::Less,
        CmpOp::Le => ord != Ordering::Greater,
        CmpOp::Gt => ord == Ordering::Greater,
        CmpOp::Ge => ord != Ordering::Less,
    }
    .into()
}

/// Compares booleans: only `=` and `<>`; ordering them is a type mismatch (false).
fn compare_bool(a: bool, op: CmpOp, b: bool) -> Truth {
    match op {
        CmpOp::Eq => (a == b).into(),
        CmpOp::Ne => (a != b).into(),
        _ => Truth::False,
    }
}

/// `a op b` with JMS's rules: unknown when either is NULL; strings convert to numbers
/// against numbers (and to each other's number for `<`, ...), to booleans against
/// booleans; what does not convert is false.
pub(crate) fn compare(a: Value<'_>, op: CmpOp, b: Value<'_>) -> Truth {
    match (a, b) {
        (Value::Null, _) | (_, Value::Null) => Truth::Unknown,
        (Value::Num(x), Value::Num(y)) => compare_num(x, op, y),
        (Value::Str(x), Value::Str(y)) => match op {
            CmpOp::Eq => (x == y).into(),
            CmpOp::Ne => (x != y).into(),
            _ => match (parse_number(x), parse_number(y)) {
                (Some(x), Some(y)) => compare_num(x, op, y),
                _ => Truth::False,
            },
        },
        (Value::Str(s), Value::Num(y)) => {
            parse_number(s).map_or(Truth::False, |x| compare_num(x, op, y))
        }
        (Value::Num(x), Value::Str(s)) => {
            parse_number(s).map_or(Truth::False, |y| compare_num(x, op, y))
        }
        (Value::Bool(x), Value::Bool(y)) => compare_bool(x, op, y),
        (Value::Str(s), Value::Bool(y)) => {
            parse_bool(s).map_or(Truth::False, |x| compare_bool(x, op, y))
        }
        (Value::Bool(x), Value::Str(s)) => {
            parse_bool(s).map_or(Truth::False, |y| compare_bool(x, op, y))
        }
        (Value::Bool(_), Value::Num(_)) | (Value::Num(_), Value::Bool(_)) => Truth::False,
    }
}
