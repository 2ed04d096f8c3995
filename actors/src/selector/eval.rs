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
            let (v, low, high) = (value(v, m), value(low, m), value(high, m));
            if *negated {
                // JMS: `x NOT BETWEEN a AND b` is `x < a OR x > b` (so a value that is
                // no number is false, not true), as ActiveMQ's `createNotBetween`.
                compare(v, CmpOp::Lt, low).or(compare(v, CmpOp::Gt, high))
            } else {
                compare(low, CmpOp::Le, v).and(compare(v, CmpOp::Le, high))
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selector::testing::eval;
    use crate::selector::Truth::{False, True, Unknown};

    fn t(s: &str) -> Truth {
        eval(s, &[])
    }

    #[test]
    fn header_strings_read_as_numbers() {
        assert_eq!(parse_number("10"), Some(Num::Int(10)));
        assert_eq!(parse_number("-3"), Some(Num::Int(-3)));
        assert_eq!(parse_number("+3"), Some(Num::Int(3)));
        assert_eq!(parse_number("007"), Some(Num::Int(7)));
        assert_eq!(parse_number("2.5"), Some(Num::Float(2.5)));
        assert_eq!(parse_number("7."), Some(Num::Float(7.0)));
        assert_eq!(parse_number(".5"), Some(Num::Float(0.5)));
        assert_eq!(parse_number("1e3"), Some(Num::Float(1000.0)));
        assert_eq!(parse_number("-1.5E-2"), Some(Num::Float(-0.015)));
        assert_eq!(
            parse_number("9223372036854775808"),
            Some(Num::Float(9223372036854775808.0))
        );
        for not_a_number in [
            "", "abc", "-", "+", ".", "1e", "1e+", " 1", "1 ", "0x10", "inf", "NaN", "1.2.3",
            "1,5", "--1", "e5",
        ] {
            assert_eq!(parse_number(not_a_number), None, "{not_a_number:?}");
        }
    }

    #[test]
    fn truth_tables() {
        // (x, y, x AND y, x OR y) with NULL as unknown, as JMS 1.1 §3.8.1.2.
        let table = [
            ("TRUE", "TRUE", True, True),
            ("TRUE", "FALSE", False, True),
            ("TRUE", "NULL", Unknown, True),
            ("FALSE", "TRUE", False, True),
            ("FALSE", "FALSE", False, False),
            ("FALSE", "NULL", False, Unknown),
            ("NULL", "TRUE", Unknown, True),
            ("NULL", "FALSE", False, Unknown),
            ("NULL", "NULL", Unknown, Unknown),
        ];
        for (x, y, and, or) in table {
            assert_eq!(t(&format!("{x} AND {y}")), and, "{x} AND {y}");
            assert_eq!(t(&format!("{x} OR {y}")), or, "{x} OR {y}");
        }
        assert_eq!(t("NOT TRUE"), False);
        assert_eq!(t("NOT FALSE"), True);
        assert_eq!(t("NOT NULL"), Unknown);
        // The same through missing headers.
        assert_eq!(t("missing = 1 AND 1 = 1"), Unknown);
        assert_eq!(t("missing = 1 AND 1 = 2"), False);
        assert_eq!(t("missing = 1 OR 1 = 1"), True);
        assert_eq!(t("missing = 1 OR 1 = 2"), Unknown);
        assert_eq!(t("NOT (missing = 1)"), Unknown);
        assert_eq!(t("NOT NOT missing"), Unknown);
    }

    #[test]
    fn null_makes_comparisons_and_arithmetic_unknown() {
        for s in [
            "missing = 1",
            "missing <> 1",
            "missing < 1",
            "missing = 'x'",
            "missing <> 'x'",
            "missing = TRUE",
            "missing = missing",
            "missing + 1 = 1",
            "1 + missing > 0",
            "-missing < 0",
            "NULL = NULL",
            "NULL <> 1",
            "missing IN ('a')",
            "missing NOT IN ('a')",
            "missing LIKE '%'",
            "missing NOT LIKE '%'",
            "missing BETWEEN 1 AND 2",
            "missing NOT BETWEEN 1 AND 2",
            "1 BETWEEN missing AND 2",
            "missing",
        ] {
            assert_eq!(t(s), Unknown, "{s}");
        }
        assert_eq!(t("missing IS NULL"), True);
        assert_eq!(t("missing IS NOT NULL"), False);
        assert_eq!(t("(missing + 1) IS NULL"), True);
        assert_eq!(eval("a IS NULL", &[("a", "")]), False);
        assert_eq!(eval("a IS NOT NULL", &[("a", "")]), True);
        assert_eq!(t("NULL IS NULL"), True);
        assert_eq!(t("(missing = 1) IS NULL"), True);
        assert_eq!(t("(1 = 1) IS NULL"), False);
    }

    #[test]
    fn comparisons_of_numbers_and_numeric_headers() {
        let n = &[("n", "10")];
        for (s, want) in [
            ("n = 10", True),
            ("n = 10.0", True),
            ("n <> 10", False),
            ("n <> 11", True),
            ("n > 9", True),
            ("n > 10", False),
            ("n >= 10", True),
            ("n < 10", False),
            ("n <= 10", True),
            ("n < 10.5", True),
            ("10 = n", True),
            ("9 < n", True),
            ("n = '10'", True),
            ("n = '10.0'", False),
            ("n > '9'", True),
            ("n < '9'", False),
        ] {
            assert_eq!(eval(s, n), want, "{s} with n=10");
        }
        assert_eq!(eval("n = 1", &[("n", "1.0")]), True);
        assert_eq!(eval("n = 1000", &[("n", "1e3")]), True);
        assert_eq!(eval("n > -1", &[("n", "-0.5")]), True);
        assert_eq!(t("1 = 1.0"), True);
        assert_eq!(t("9007199254740993 = 9007199254740992"), False);
        assert_eq!(t("9007199254740993 = 9007199254740992.0"), True);
    }

    #[test]
    fn mismatched_types_compare_false() {
        let s = &[("s", "abc"), ("flag", "true"), ("yes", "yes")];
        for c in [
            "s = 1",
            "s <> 1",
            "s > 1",
            "1 < s",
            "s < 'z'",
            "'a' < 'b'",
            "s >= s",
            "'10' < '9x'",
            "TRUE < FALSE",
            "TRUE = 1",
            "1 <> TRUE",
            "yes = TRUE",
            "yes <> TRUE",
            "flag > FALSE",
            "s BETWEEN 'a' AND 'z'",
            "s BETWEEN 1 AND 2",
            "JMSPriority IN ('4')",
            "JMSPriority LIKE '4'",
            "(s = 'abc') LIKE 'true'",
            "(1 + 1) IN ('2')",
        ] {
            assert_eq!(eval(c, s), False, "{c}");
        }
        // ... so their negations are true, but for NOT BETWEEN, which JMS defines as
        // `s < 1 OR s > 2`: false for a value that is no number (as ActiveMQ).
        assert_eq!(eval("NOT (s = 1)", s), True);
        assert_eq!(eval("s NOT BETWEEN 1 AND 2", s), False);
        assert_eq!(eval("JMSPriority NOT IN ('4')", s), True);
    }

    #[test]
    fn strings_compare_exactly_and_order_only_as_numbers() {
        let h = &[("kind", "image"), ("a", "10"), ("b", "9"), ("c", "10")];
        assert_eq!(eval("kind = 'image'", h), True);
        assert_eq!(eval("kind = 'Image'", h), False);
        assert_eq!(eval("kind <> 'video'", h), True);
        assert_eq!(eval("kind = 'image '", h), False);
        assert_eq!(eval("a > b", h), True);
        assert_eq!(eval("a = b", h), False);
        assert_eq!(eval("a = c", h), True);
        assert_eq!(eval("'10' > '9'", h), True);
        assert_eq!(eval("'1.0' = '1'", h), False);
        assert_eq!(eval("'1.0' >= '1'", h), True);
        assert_eq!(eval("'it''s' = x", &[("x", "it's")]), True);
    }

    #[test]
    fn booleans_and_boolean_strings() {
        for (value, alone, eq_true, not) in [
            ("true", True, True, False),
            ("TRUE", True, True, False),
            ("False", False, False, True),
            ("yes", False, False, True),
            ("1", False, False, True),
            ("", False, False, True),
        ] {
            let h = &[("flag", value)];
            assert_eq!(eval("flag", h), alone, "flag={value:?}");
            assert_eq!(eval("flag = TRUE", h), eq_true, "flag={value:?}");
            assert_eq!(eval("NOT flag", h), not, "flag={value:?}");
        }
        assert_eq!(eval("flag = FALSE", &[("flag", "false")]), True);
        assert_eq!(eval("flag <> FALSE", &[("flag", "true")]), True);
        assert_eq!(eval("flag AND 1 = 1", &[("flag", "true")]), True);
        assert_eq!(eval("flag = 'true'", &[("flag", "TRUE")]), False);
        assert_eq!(t("(1 = 1) = TRUE"), True);
        assert_eq!(t("(1 = 2) <> (2 = 3)"), False);
        assert_eq!(t("TRUE = TRUE"), True);
        assert_eq!(t("TRUE"), True);
        assert_eq!(t("FALSE"), False);
        assert_eq!(t("NULL"), Unknown);
    }

    #[test]
    fn arithmetic() {
        let n = &[("n", "10"), ("s", "abc"), ("f", "2.5")];
        for s in [
            "n + 1 = 11",
            "n - 15 = -5",
            "n * 2 = 20",
            "n / 5 = 2",
            "n / 4 = 2.5",
            "7 / 2 = 3.5",
            "-7 / 2 = -3.5",
            "6 / -3 = -2",
            "f * 2 = 5",
            "f + n = 12.5",
            "-n = -10",
            "- -n = 10",
            "+n = 10",
            "+'5' = 5",
            "'5' + '6' = 11",
            "2 + 3 * 4 = 14",
            "(2 + 3) * 4 = 20",
            "10 - 2 - 3 = 5",
            "8 / 2 / 2 = 2",
            "2 * 3 / 4 = 1.5",
            "JMSPriority + 1 = 5",
            // Exact integers, then f64 past i64.
            "9223372036854775807 - 1 = 9223372036854775806",
            "9223372036854775807 + 1 = 9223372036854775808.0",
            "9223372036854775807 * 2 = 1.8446744073709552e19",
            "-9223372036854775807 - 1 = -9223372036854775808",
            "-(-9223372036854775808) = 9223372036854775808.0",
            "-9223372036854775808 / -1 = 9223372036854775808.0",
            "1e308 * 10 > 1e308",
        ] {
            assert_eq!(eval(s, n), True, "{s}");
        }
        for s in [
            "n / 0 = 1",
            "n / 0.0 = 1",
            "n / (n - 10) > 0",
            "s + 1 = 1",
            "-s = 0",
            "+s = 0",
            "n + NULL = 1",
        ] {
            assert_eq!(eval(s, n), Unknown, "{s}");
        }
        // NaN (inf - inf) is unequal to everything.
        assert_eq!(t("1e308 * 10 - 1e308 * 10 = 0"), False);
        assert_eq!(t("1e308 * 10 - 1e308 * 10 <> 0"), True);
    }

    #[test]
    fn between() {
        let n = &[("n", "10"), ("s", "m")];
        assert_eq!(eval("n BETWEEN 5 AND 10", n), True);
        assert_eq!(eval("n BETWEEN 10 AND 10", n), True);
        assert_eq!(eval("n BETWEEN 11 AND 20", n), False);
        assert_eq!(eval("n BETWEEN 20 AND 5", n), False);
        assert_eq!(eval("n NOT BETWEEN 11 AND 20", n), True);
        assert_eq!(eval("n NOT BETWEEN 5 AND 10", n), False);
        assert_eq!(eval("n BETWEEN 9.5 AND '10.5'", n), True);
        assert_eq!(eval("n + 1 BETWEEN 2 * 5 AND 12", n), True);
        assert_eq!(eval("n BETWEEN 1 AND NULL", n), Unknown);
        assert_eq!(eval("n BETWEEN 20 AND NULL", n), False);
        assert_eq!(eval("n NOT BETWEEN 20 AND NULL", n), True);
        assert_eq!(eval("s BETWEEN 'a' AND 'z'", n), False);
    }

    #[test]
    fn in_lists() {
        let h = &[("kind", "image")];
        assert_eq!(eval("kind IN ('image', 'video')", h), True);
        assert_eq!(eval("kind IN ('video')", h), False);
        assert_eq!(eval("kind NOT IN ('image', 'video')", h), False);
        assert_eq!(eval("kind NOT IN ('video', 'IMAGE')", h), True);
        assert_eq!(eval("kind in ('x', 'y', 'image')", h), True);
        assert_eq!(eval("x IN ('')", &[("x", "")]), True);
        assert_eq!(eval("n IN ('1')", &[("n", "1.0")]), False);
    }

    #[test]
    fn like() {
        let h = &[("kind", "image"), ("name", "a_b"), ("plain", "ab")];
        assert_eq!(eval("kind LIKE 'im%'", h), True);
        assert_eq!(eval("kind LIKE 'im_ge'", h), True);
        assert_eq!(eval("kind LIKE 'IM%'", h), False);
        assert_eq!(eval("kind NOT LIKE 'im%'", h), False);
        assert_eq!(eval("kind NOT LIKE 'v%'", h), True);
        assert_eq!(eval(r"name LIKE 'a\_%' ESCAPE '\'", h), True);
        assert_eq!(eval(r"plain LIKE 'a\_%' ESCAPE '\'", h), False);
        assert_eq!(eval("plain LIKE 'a_%'", h), True);
        assert_eq!(eval(r"name NOT LIKE 'a\_%' ESCAPE '\'", h), False);
        assert_eq!(eval("name LIKE 'a!_b' ESCAPE '!'", h), True);
        assert_eq!(eval("name LIKE 'a''b'", &[("name", "a'b")]), True);
        assert_eq!(eval("JMSMessageID LIKE 'ID:%'", h), True);
    }

    #[test]
    fn comparison_kernel_directly() {
        // Pairs the parser cannot produce from literals alone.
        assert_eq!(
            compare(Value::Num(Num::Int(1)), CmpOp::Eq, Value::Bool(true)),
            False
        );
        assert_eq!(
            compare(Value::Bool(true), CmpOp::Ne, Value::Num(Num::Int(1))),
            False
        );
        assert_eq!(
            compare(Value::Str("true"), CmpOp::Eq, Value::Bool(true)),
            True
        );
        assert_eq!(
            compare(Value::Bool(false), CmpOp::Eq, Value::Str("FALSE")),
            True
        );
        assert_eq!(
            compare(Value::Str("x"), CmpOp::Eq, Value::Bool(true)),
            False
        );
        assert_eq!(compare(Value::Null, CmpOp::Eq, Value::Bool(true)), Unknown);
        assert_eq!(
            compare(
                Value::Num(Num::Float(f64::NAN)),
                CmpOp::Ne,
                Value::Num(Num::Float(f64::NAN))
            ),
            True
        );
        assert_eq!(arith(Num::Int(1), ArithOp::Div, Num::Int(0)), None);
        assert_eq!(arith(Num::Float(1.0), ArithOp::Div, Num::Float(-0.0)), None);
        assert_eq!(
            arith(Num::Int(7), ArithOp::Div, Num::Int(2)),
            Some(Num::Float(3.5))
        );
        assert_eq!(
            arith(Num::Int(i64::MIN), ArithOp::Div, Num::Int(-1)),
            Some(Num::Float(9223372036854775808.0))
        );
        assert_eq!(as_truth(Value::Num(Num::Int(1))), False);
        assert_eq!(as_truth(Value::Str("tRuE")), True);
    }
}
