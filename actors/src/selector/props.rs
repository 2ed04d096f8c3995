//! Property tests of the selector: claims that hold for every selector, checked on
//! random well-formed trees (printed as text and parsed back), random messages, and
//! random or mutated text.
//!
//! - **Round trip**: a tree printed as text parses, evaluates as the tree does on every
//!   message, and prints the same again.
//! - **NOT negates**: `NOT (s)` never matches a message `s` matches, and is unknown
//!   exactly when `s` is.
//! - **AND and OR commute**: `(s) AND (t)` ≡ `(t) AND (s)`, `(s) OR (t)` ≡ `(t) OR (s)`.
//! - **IS NULL is never unknown**, `IS NOT NULL` is its negation, and `(s) IS NULL` holds
//!   exactly when `s` is unknown.
//! - **LIKE** agrees with a plain dynamic-programming matcher.
//! - **No panic**: parsing random text, and mutations of valid selectors, returns a
//!   value or an error whose column lies in the text; evaluating random trees over
//!   random headers (any strings) returns a value.

use proptest::prelude::*;
use proptest::sample::select;

use super::eval;
use super::parse::{ArithOp, CmpOp, Expr, Field, LikePattern, Literal};
use super::testing::TestMessage;
use super::{Selector, Truth};

/// Header names the trees read (identifiers), and the ones only messages have.
const NAMES: [&str; 6] = ["a", "b", "kind", "flag", "n", "JMSXGroupID"];
const MESSAGE_NAMES: [&str; 8] = [
    "a",
    "b",
    "kind",
    "flag",
    "n",
    "JMSXGroupID",
    "type",
    "correlation-id",
];
/// Values that hit the conversions: integers, decimals, booleans, odd strings.
const VALUES: [&str; 18] = [
    "1",
    "-3",
    "10",
    "2.5",
    "1e3",
    "0",
    "abc",
    "",
    "true",
    "FALSE",
    "instance:1",
    "x%y",
    "a_b",
    "9223372036854775807",
    "0x10",
    "image",
    "it's",
    " 1",
];

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        ..ProptestConfig::default()
    }
}

fn lit(l: Literal) -> Expr {
    Expr::Literal(l)
}

fn header() -> impl Strategy<Value = Expr> {
    prop_oneof![
        4 => select(NAMES.to_vec()).prop_map(|n| Expr::Field(Field::Header(n.to_string()))),
        1 => Just(Expr::Field(Field::Type)),
        1 => Just(Expr::Field(Field::CorrelationId)),
    ]
}

fn string() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => select(VALUES.to_vec()).prop_map(str::to_string),
        1 => "[a-z0-9%_:.' -]{0,4}",
    ]
}

fn cmp_op() -> impl Strategy<Value = CmpOp> {
    select(vec![
        CmpOp::Eq,
        CmpOp::Ne,
        CmpOp::Lt,
        CmpOp::Le,
        CmpOp::Gt,
        CmpOp::Ge,
    ])
}

/// The operators of one chain: all additive or all multiplicative, as the parser builds
/// them (a chain mixing them would print as text with another meaning).
fn arith_ops() -> impl Strategy<Value = Vec<ArithOp>> {
    prop_oneof![
        prop::collection::vec(select(vec![ArithOp::Add, ArithOp::Sub]), 1..3),
        prop::collection::vec(select(vec![ArithOp::Mul, ArithOp::Div]), 1..3),
    ]
}

/// Numbers: literals, numeric fields, headers, numeric strings, arithmetic on them.
fn number() -> BoxedStrategy<Expr> {
    let leaf = prop_oneof![
        3 => (-20i64..20).prop_map(|n| lit(Literal::Int(n))),
        1 => select(vec![i64::MIN, i64::MAX, 0]).prop_map(|n| lit(Literal::Int(n))),
        2 => (-100.0f64..100.0).prop_map(|x| lit(Literal::Float(x))),
        1 => select(vec![1e300, -2.5e-7, 0.0, -0.0]).prop_map(|x| lit(Literal::Float(x))),
        1 => Just(lit(Literal::Null)),
        1 => select(vec![Field::Priority, Field::Timestamp, Field::Expiration]).prop_map(Expr::Field),
        1 => select(vec!["5", "2.5", "x"]).prop_map(|s| lit(Literal::Str(s.into()))),
        4 => header(),
    ];
    leaf.prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            3 => (inner.clone(), arith_ops(), prop::collection::vec(inner.clone(), 2))
                .prop_map(|(first, ops, operands)| Expr::Arith {
                    first: Box::new(first),
                    rest: ops.into_iter().zip(operands).collect(),
                }),
            1 => inner.clone().prop_map(|e| Expr::Neg(Box::new(e))),
            1 => inner.prop_map(|e| Expr::Plus(Box::new(e))),
        ]
    })
    .boxed()
}

/// Strings: literals, string fields, headers.
fn text() -> BoxedStrategy<Expr> {
    prop_oneof![
        2 => string().prop_map(|s| lit(Literal::Str(s))),
        1 => select(vec![Field::MessageId, Field::DeliveryMode]).prop_map(Expr::Field),
        3 => header(),
    ]
    .boxed()
}

fn value() -> BoxedStrategy<Expr> {
    prop_oneof![number(), text()].boxed()
}

fn like_pattern() -> impl Strategy<Value = LikePattern> {
    (
        "[ab%_\\\\!':]{0,6}",
        prop_oneof![Just(None), Just(Some('\\')), Just(Some('!'))],
    )
        .prop_filter_map("the pattern ends with its escape", |(source, escape)| {
            LikePattern::compile(&source, escape).ok()
        })
}

/// Well-formed conditions (what the parser accepts as a whole selector).
fn condition() -> BoxedStrategy<Expr> {
    let b = |e: Expr| Box::new(e);
    let leaf = prop_oneof![
        4 => (cmp_op(), value(), value())
            .prop_map(move |(op, l, r)| Expr::Compare { op, left: b(l), right: b(r) }),
        1 => (select(vec![CmpOp::Eq, CmpOp::Ne]), header(), any::<bool>())
            .prop_map(move |(op, l, r)| Expr::Compare { op, left: b(l), right: b(lit(Literal::Bool(r))) }),
        2 => (value(), number(), number(), any::<bool>()).prop_map(move |(v, low, high, negated)| {
            Expr::Between { value: b(v), low: b(low), high: b(high), negated }
        }),
        2 => (text(), prop::collection::vec(string(), 1..4), any::<bool>())
            .prop_map(move |(v, list, negated)| Expr::In { value: b(v), list, negated }),
        2 => (text(), like_pattern(), any::<bool>())
            .prop_map(move |(v, pattern, negated)| Expr::Like { value: b(v), pattern, negated }),
        2 => (value(), any::<bool>()).prop_map(move |(v, negated)| Expr::IsNull { value: b(v), negated }),
        1 => any::<bool>().prop_map(|x| lit(Literal::Bool(x))),
        1 => Just(lit(Literal::Null)),
        1 => header(),
    ];
    leaf.prop_recursive(4, 24, 3, move |inner| {
        prop_oneof![
            2 => prop::collection::vec(inner.clone(), 2..4).prop_map(Expr::Or),
            2 => prop::collection::vec(inner.clone(), 2..4).prop_map(Expr::And),
            2 => inner.clone().prop_map(|e| Expr::Not(Box::new(e))),
            1 => (select(vec![CmpOp::Eq, CmpOp::Ne]), inner.clone(), inner)
                .prop_map(move |(op, l, r)| Expr::Compare { op, left: b(l), right: b(r) }),
        ]
    })
    .boxed()
}

fn message_with(value: BoxedStrategy<String>) -> impl Strategy<Value = TestMessage> {
    (
        prop::collection::vec((select(MESSAGE_NAMES.to_vec()), value), 0..9),
        0u8..=9,
        -5i64..5,
        any::<bool>(),
        prop_oneof![Just(0i64), -5i64..5],
        select(vec!["ID:ebb-1", "5", ""]),
    )
        .prop_map(
            |(headers, priority, timestamp_ms, persistent, expiration_ms, id)| TestMessage {
                headers: headers
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
                message_id: id.to_string(),
                priority,
                timestamp_ms,
                persistent,
                expiration_ms,
            },
        )
}

fn message() -> impl Strategy<Value = TestMessage> {
    message_with(string().boxed())
}

fn messages() -> impl Strategy<Value = Vec<TestMessage>> {
    prop::collection::vec(message(), 1..5)
}

fn parsed(text: &str) -> Result<Selector, TestCaseError> {
    Selector::parse(text).map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))
}

/// Parses `text`; either way, nothing panics and an error's column lies in the text.
fn parse_anything(text: &str, message: &TestMessage) -> Result<(), TestCaseError> {
    match Selector::parse(text) {
        Ok(s) => {
            let t = s.evaluate(message);
            prop_assert_eq!(s.matches(message), t == Truth::True);
        }
        Err(e) => {
            prop_assert!(
                e.column >= 1 && e.column <= text.chars().count() + 1,
                "{}",
                e
            );
            prop_assert!(!e.message.is_empty());
        }
    }
    Ok(())
}

/// `source` matches `subject` by dynamic programming over (pattern, subject)
/// prefixes: the reference the iterative matcher is checked against.
fn like_reference(source: &str, escape: Option<char>, subject: &str) -> bool {
    enum T {
        Char(char),
        One,
        Any,
    }
    let mut pattern = Vec::new();
    let mut chars = source.chars();
    while let Some(c) = chars.next() {
        pattern.push(match c {
            c if Some(c) == escape => T::Char(chars.next().expect("compiled")),
            '%' => T::Any,
            '_' => T::One,
            c => T::Char(c),
        });
    }
    let s: Vec<char> = subject.chars().collect();
    // m[i][j]: the first i pattern tokens match the first j characters.
    let mut m = vec![vec![false; s.len() + 1]; pattern.len() + 1];
    m[0][0] = true;
    for (i, t) in pattern.iter().enumerate() {
        for j in 0..=s.len() {
            m[i + 1][j] = match t {
                T::Any => m[i][j] || (j > 0 && m[i + 1][j - 1]),
                T::One => j > 0 && m[i][j - 1],
                T::Char(c) => j > 0 && m[i][j - 1] && s[j - 1] == *c,
            };
        }
    }
    m[pattern.len()][s.len()]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn printed_trees_parse_back_and_evaluate_the_same(ast in condition(), ms in messages()) {
        let text = ast.to_string();
        let selector = parsed(&text)?;
        for m in &ms {
            prop_assert_eq!(selector.evaluate(m), eval::truth(&ast, m), "{}", text);
        }
        // Printing is stable: the parsed tree prints as the text it came from.
        let again = super::parse::parse(&text).map(|e| e.to_string());
        let again = again.map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(super::parse::parse(&again).map(|e| e.to_string()), Ok(again.clone()));
    }

    /// What `required_headers` says a store may filter on is necessary: a message the
    /// selector matches always has those header values (so a scan that filters on
    /// them in SQL never misses a match).
    #[test]
    fn required_headers_never_exclude_a_match(ast in condition(), ms in messages()) {
        let text = ast.to_string();
        let s = parsed(&text)?;
        let required = s.required_headers();
        for m in &ms {
            if !s.matches(m) {
                continue;
            }
            for (name, values) in &required {
                let first = m.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v);
                prop_assert!(first.is_some_and(|v| values.contains(v)), "{} needs {}", text, name);
            }
        }
    }

    #[test]
    fn not_negates(ast in condition(), ms in messages()) {
        let text = ast.to_string();
        let s = parsed(&text)?;
        let not = parsed(&format!("NOT ({text})"))?;
        for m in &ms {
            let (t, n) = (s.evaluate(m), not.evaluate(m));
            prop_assert_eq!(n, !t);
            prop_assert!(!(s.matches(m) && not.matches(m)));
            prop_assert_eq!(n == Truth::Unknown, t == Truth::Unknown);
        }
    }

    #[test]
    fn and_and_or_commute(s in condition(), t in condition(), ms in messages()) {
        let (s, t) = (s.to_string(), t.to_string());
        let st_and = parsed(&format!("({s}) AND ({t})"))?;
        let ts_and = parsed(&format!("({t}) AND ({s})"))?;
        let st_or = parsed(&format!("({s}) OR ({t})"))?;
        let ts_or = parsed(&format!("({t}) OR ({s})"))?;
        let (s, t) = (parsed(&s)?, parsed(&t)?);
        for m in &ms {
            prop_assert_eq!(st_and.evaluate(m), ts_and.evaluate(m));
            prop_assert_eq!(st_or.evaluate(m), ts_or.evaluate(m));
            prop_assert_eq!(st_and.evaluate(m), s.evaluate(m).and(t.evaluate(m)));
            prop_assert_eq!(st_or.evaluate(m), s.evaluate(m).or(t.evaluate(m)));
        }
    }

    #[test]
    fn is_null_is_never_unknown(v in value(), c in condition(), ms in messages()) {
        let v = v.to_string();
        let is_null = parsed(&format!("{v} IS NULL"))?;
        let is_not_null = parsed(&format!("{v} IS NOT NULL"))?;
        let c_text = c.to_string();
        let c_is_null = parsed(&format!("({c_text}) IS NULL"))?;
        let c = parsed(&c_text)?;
        for m in &ms {
            let t = is_null.evaluate(m);
            prop_assert_ne!(t, Truth::Unknown);
            prop_assert_eq!(is_not_null.evaluate(m), !t);
            prop_assert_eq!(c_is_null.evaluate(m) == Truth::True, c.evaluate(m) == Truth::Unknown);
        }
    }

    #[test]
    fn like_agrees_with_the_reference(
        pattern in like_pattern(),
        subject in "[ab%_\\\\!':é]{0,8}",
    ) {
        let text = Expr::Like {
            value: Box::new(Expr::Field(Field::Header("x".into()))),
            pattern: pattern.clone(),
            negated: false,
        }
        .to_string();
        let selector = parsed(&text)?;
        let m = TestMessage::with(&[("x", &subject)]);
        let want = like_reference(&pattern.source, pattern.escape, &subject);
        prop_assert_eq!(pattern.matches(&subject), want);
        prop_assert_eq!(selector.matches(&m), want, "{}", text);
    }

    #[test]
    fn random_text_never_panics(text in any::<String>(), m in message()) {
        parse_anything(&text, &m)?;
    }

    #[test]
    fn token_soup_never_panics(
        words in prop::collection::vec(select(vec![
            "a", "JMSType", "JMSRedelivered", "'x'", "'", "''", "1", "-", "+", "*", "/", "0x1F",
            "1.5e3", ".5", "010", "1e", "(", ")", ",", "=", "<>", "<", ">=", "NOT", "AND", "OR",
            "BETWEEN", "LIKE", "ESCAPE", "IN", "IS", "NULL", "TRUE", "'%\\'", "é", "#", "!=",
        ]), 0..24),
        m in message(),
    ) {
        parse_anything(&words.join(" "), &m)?;
        parse_anything(&words.concat(), &m)?;
    }

    #[test]
    fn mutated_selectors_never_panic(
        ast in condition(),
        edits in prop::collection::vec((any::<usize>(), 0u8..4, any::<char>()), 1..4),
        m in message(),
    ) {
        let mut text: Vec<char> = ast.to_string().chars().collect();
        for (at, kind, c) in edits {
            let i = at % (text.len() + 1);
            match kind {
                0 if i < text.len() => {
                    text.remove(i);
                }
                1 => text.insert(i, c),
                2 => text.truncate(i),
                _ => {
                    let tail: Vec<char> = text[i..].to_vec();
                    text.extend(tail);
                }
            }
        }
        let text: String = text.into_iter().collect();
        parse_anything(&text, &m)?;
    }

    #[test]
    fn evaluation_over_any_headers_never_panics(
        ast in condition(),
        m in message_with(any::<String>().boxed()),
    ) {
        let t = eval::truth(&ast, &m);
        let selector = parsed(&ast.to_string())?;
        prop_assert_eq!(selector.evaluate(&m), t);
        prop_assert_eq!(selector.matches(&m), t == Truth::True);
    }
}

/// Inputs that once were, or could be, trouble: replayed on every run. Each parses or
/// is refused with a column inside the text.
#[test]
fn seed_corpus() {
    let corpus = [
        "'",
        "''",
        "'''",
        "(",
        ")",
        "((",
        "NOT",
        "NOT NOT",
        "a LIKE",
        "a LIKE '%' ESCAPE",
        "a LIKE '%' ESCAPE ''",
        "0x",
        "0x8000000000000000",
        "1e",
        "1e+",
        ".",
        "..5",
        "5..",
        "-",
        "--1",
        "a IN (",
        "a IN ()",
        "a BETWEEN 1 AND",
        "a IS",
        "a IS NOT",
        "a NOT",
        "\u{0}",
        "é",
        "a = 'é",
        "JMS",
        "JMSX",
        "$",
        "_",
        "a = 1 OR",
        "a = - - - -",
        "9999999999999999999999999 = a",
        "a = 1e999",
        "a = 1e-999",
    ];
    let m = TestMessage::with(&[("a", "1")]);
    let mut parsed = 0;
    for text in corpus {
        parse_anything(text, &m).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        parsed += usize::from(Selector::parse(text).is_ok());
    }
    // Only the identifiers alone, the huge integer and the float that underflows to 0.
    assert_eq!(parsed, 6);
    assert_eq!(
        Selector::parse("a = 1e999").unwrap_err().to_string(),
        "invalid selector at column 5: number out of range"
    );
    assert_eq!(
        Selector::parse("9999999999999999999999999 = a")
            .unwrap()
            .evaluate(&m),
        Truth::False
    );
}
