//! JMS message selectors: the SQL-92 conditional subset of JMS 1.1 §3.8.1, as ActiveMQ
//! reads it, parsed once when a consumer subscribes and evaluated for every message
//! offered to it.
//!
//! A selector is parsed ([`Selector::parse`]) into a small syntax tree: a hand-written
//! lexer and recursive-descent parser in `parse.rs` (no parser dependency: this is the
//! one place where a client's text becomes broker logic). It is evaluated against
//! anything that implements [`Fields`] (a [`TopicMessage`] does) with SQL's
//! three-valued logic ([`Truth`], `eval.rs`); a message is selected only when the
//! selector is [`Truth::True`] ([`Selector::matches`]).
//!
//! ## The language
//! - Literals: strings in single quotes (`''` is a quote inside), exact numerics
//!   (`57`, `-957`, `57L`), approximate numerics (`7.`, `.5`, `-95.7`, `6.02e23`,
//!   `1E-3`), hex (`0x1F`, as ActiveMQ), `TRUE`, `FALSE`, `NULL`.
//! - Identifiers follow Java's rules (a letter, `_` or `$`, then letters, digits, `_`,
//!   `$`; "letter" is Unicode alphabetic) and are case-sensitive; keywords (`NULL TRUE
//!   FALSE NOT AND OR BETWEEN LIKE IN IS ESCAPE`) are case-insensitive and reserved.
//! - Operators, lowest precedence first: `OR`; `AND`; `NOT`; one comparison
//!   (`= <> < > <= >=`, `[NOT] BETWEEN a AND b`, `[NOT] IN ('a', ...)` with string
//!   literals only, `[NOT] LIKE 'pattern' [ESCAPE 'c']`, `IS [NOT] NULL`); `+ -`;
//!   `* /`; unary `+ -`; parentheses.
//!
//! ## Identifiers and JMS fields
//! An identifier names a user header, looked up by exact name ([`Fields::header`]; the
//! first header of that name when it repeats). These name message fields instead:
//! `JMSPriority` (number 0..=9), `JMSMessageID` (string), `JMSTimestamp` (number, epoch
//! ms), `JMSDeliveryMode` (`'PERSISTENT'` or `'NON_PERSISTENT'`), `JMSExpiration`
//! (number, epoch ms, 0 = never), and, through headers as ActiveMQ's STOMP mapping has
//! them, `JMSType` (header `type`) and `JMSCorrelationID` (header `correlation-id`).
//! `JMSX...` names (`JMSXGroupID`, `JMSXGroupSeq`, ...) are user headers. Any other
//! name starting with `JMS` is refused at parse time ("unknown JMS field
//! JMSRedelivered"): `JMSRedelivered`, `JMSReplyTo` and `JMSDestination` are not
//! supported, and a selector that silently never matched would be worse than an error.
//!
//! ## Values and conversions
//! A header's value is a string. Deliberately, as ActiveMQ with
//! `convertStringExpressions`: in a numeric context (compared with a number, in
//! arithmetic, `BETWEEN` with numbers, or `<`, `<=`, `>`, `>=` between two strings) a
//! string that reads as a number (`[+-]digits[.digits][e[+-]digits]`, no spaces; an
//! integer if it has neither `.` nor exponent) is that number; one that does not is a
//! type mismatch. STOMP headers are always strings, so without this no numeric selector
//! could ever match a STOMP message. In a boolean context (`flag = TRUE`, `flag AND
//! ...`, `NOT flag`, a header alone) the strings `true` and `false` (any case) are
//! booleans. Otherwise strings compare only with `=` and `<>`, exactly (case-sensitive,
//! `'1.0' = '1'` is false).
//!
//! Integers are `i64` with exact `+ - *`; on overflow the result is an `f64`. `/` of
//! two integers is an integer when it divides exactly, an `f64` otherwise (`7 / 2` is
//! `3.5`: ActiveMQ divides as doubles). An integer compared with a float compares as
//! `f64`. An integer literal too large for `i64` is an `f64`.
//!
//! ## Three-valued logic (JMS 1.1 §3.8.1.2)
//! A missing header is NULL. A comparison or arithmetic with NULL is unknown (NULL),
//! as are division by zero and arithmetic on a value that is not a number. `AND`,
//! `OR` and `NOT` follow SQL's truth tables. `IS [NOT] NULL` is never unknown. A
//! comparison of values of types that do not convert is false (JMS: "comparison of
//! non-like type values yields false"), as is `<` (etc.) between booleans or between
//! strings that are not both numbers. `x IN (...)` and `x LIKE ...` are unknown when
//! `x` is NULL and false when it is not a string. `NOT IN` and `NOT LIKE` are the
//! negations of their positive forms (unknown stays unknown); `x NOT BETWEEN a AND b`
//! is `x < a OR x > b`, as JMS defines it (so false, not true, for a value that is no
//! number; ActiveMQ's `createNotBetween`). A value used as a condition is true or
//! false if it is a boolean (or a string `true` / `false`), unknown if NULL, false
//! otherwise. Comments are skipped as in ActiveMQ's grammar: `--` to the end of the
//! line, and `/* ... */`.
//!
//! ## What the parser refuses
//! Besides malformed text (an unterminated string, an unknown character, a missing
//! operand, trailing input, an empty selector), with the 1-based column (in
//! characters) of the offending token:
//! - a selector that is not a condition where that can be seen from the text: a
//!   number, string or arithmetic expression at the top or as an operand of `AND`,
//!   `OR`, `NOT` (`3 + 4`, `'abc'`, `JMSPriority`, `NOT 1`); a header alone is a
//!   condition (read as a boolean);
//! - a condition where a number is needed (`(a = 1) + 2`, `-TRUE`);
//! - chained comparisons (`a = b = c`: write parentheses);
//! - an integer with a leading zero (`010`: ActiveMQ would read it as octal, which
//!   nobody means), a hex literal above `i64::MAX`, a float literal beyond `f64`
//!   (`1e999`), `!=` (use `<>`);
//! - a `LIKE` pattern that ends with its escape character, an `ESCAPE` that is not one
//!   character;
//! - unknown `JMS...` fields (above);
//! - hostile input: more than [`MAX_SELECTOR_BYTES`] bytes, or parentheses, `NOT`s and
//!   unary signs nested deeper than [`MAX_NESTING`] (so neither parsing nor evaluation
//!   can exhaust the stack; `AND`/`OR` and arithmetic chains are kept flat and do not
//!   count).
//!
//! An empty selector is an error here; a caller that treats an absent or empty
//! `selector` header as "no selector" (as JMS does) decides that before parsing.
//!
//! ## Cost
//! Evaluation does not allocate: header lookups take the name as `&str`, values borrow
//! from the message and the tree, numbers are read from header strings in place.
//! `LIKE` patterns are compiled at parse time and matched iteratively in O(n·m) worst
//! case (no backtracking blow-up on `%a%a%a...`).

mod eval;
mod parse;
#[cfg(test)]
mod props;

use std::fmt;

use crate::message::TopicMessage;

/// The longest selector accepted, in bytes (ActiveMQ has no limit; a selector is
/// client input, kept for the life of a subscription).
pub const MAX_SELECTOR_BYTES: usize = 4096;

/// How deep parentheses, `NOT`s and unary signs may nest (together). Deeper is refused
/// so that parsing and evaluation (both recursive) stay within a small, fixed stack.
pub const MAX_NESTING: usize = 64;

/// A parsed selector: its text as given and its syntax tree. Cheap to evaluate, safe to
/// share between threads.
#[derive(Debug, Clone)]
pub struct Selector {
    text: String,
    expr: parse::Expr,
}

impl Selector {
    /// Parses `text` (see the module documentation for the language and for what is
    /// refused). Errors carry the 1-based column, in characters, of the offending
    /// token and what was expected there.
    pub fn parse(text: &str) -> Result<Selector, SelectorError> {
        let expr = parse::parse(text)?;
        Ok(Selector {
            text: text.to_owned(),
            expr,
        })
    }

    /// The text as given.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// True only when the selector evaluates to [`Truth::True`] for `message`: false
    /// and unknown do not match, as JMS.
    pub fn matches(&self, message: &impl Fields) -> bool {
        self.evaluate(message) == Truth::True
    }

    /// The three-valued result for `message`. Does not allocate.
    pub fn evaluate(&self, message: &impl Fields) -> Truth {
        eval::truth(&self.expr, message)
    }

    /// What a message must have for this selector to match it, as far as a store can
    /// test it without the selector: `(header, values)` pairs, each meaning "the first
    /// header `header` is one of `values`" (all of them must hold). Taken from the
    /// terms of the selector's top-level `AND` (or the whole selector) of the forms
    /// `header = 'text'`, `'text' = header` and `header IN ('a', 'b')` on a user
    /// header, `JMSType` or `JMSCorrelationID` (a string literal compared with a header,
    /// always a string, is true exactly when they are equal: see the module documentation). Empty when
    /// no term has such a form. A necessary condition, never a sufficient one: the
    /// selector must still be evaluated on what passes.
    pub fn required_headers(&self) -> Vec<(String, Vec<String>)> {
        let terms: Vec<&parse::Expr> = match &self.expr {
            parse::Expr::And(terms) => terms.iter().collect(),
            other => vec![other],
        };
        terms.into_iter().filter_map(required_header).collect()
    }
}

/// The header and values one term requires (see [`Selector::required_headers`]).
fn required_header(term: &parse::Expr) -> Option<(String, Vec<String>)> {
    use parse::{CmpOp, Expr, Field, Literal};
    let name = |e: &Expr| match e {
        Expr::Field(Field::Header(h)) => Some(h.clone()),
        Expr::Field(Field::Type) => Some("type".to_string()),
        Expr::Field(Field::CorrelationId) => Some("correlation-id".to_string()),
        _ => None,
    };
    match term {
        Expr::Compare {
            op: CmpOp::Eq,
            left,
            right,
        } => match (left.as_ref(), right.as_ref()) {
            (field, Expr::Literal(Literal::Str(v))) | (Expr::Literal(Literal::Str(v)), field) => {
                Some((name(field)?, vec![v.clone()]))
            }
            _ => None,
        },
        Expr::In {
            value,
            list,
            negated: false,
        } => Some((name(value)?, list.clone())),
        _ => None,
    }
}

impl fmt::Display for Selector {
    /// The text as given.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The result of a condition under SQL's three-valued logic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Truth {
    True,
    False,
    /// NULL as a condition: from a missing header, or a comparison, arithmetic or
    /// division by zero involving one.
    Unknown,
}

impl Truth {
    /// SQL `AND`: false if either is false, else unknown if either is unknown.
    pub fn and(self, other: Truth) -> Truth {
        match (self, other) {
            (Truth::False, _) | (_, Truth::False) => Truth::False,
            (Truth::True, Truth::True) => Truth::True,
            _ => Truth::Unknown,
        }
    }

    /// SQL `OR`: true if either is true, else unknown if either is unknown.
    pub fn or(self, other: Truth) -> Truth {
        match (self, other) {
            (Truth::True, _) | (_, Truth::True) => Truth::True,
            (Truth::False, Truth::False) => Truth::False,
            _ => Truth::Unknown,
        }
    }
}

impl From<bool> for Truth {
    fn from(b: bool) -> Truth {
        if b {
            Truth::True
        } else {
            Truth::False
        }
    }
}

impl std::ops::Not for Truth {
    type Output = Truth;

    /// SQL `NOT`: unknown stays unknown.
    fn not(self) -> Truth {
        match self {
            Truth::True => Truth::False,
            Truth::False => Truth::True,
            Truth::Unknown => Truth::Unknown,
        }
    }
}

/// What a selector reads from a message. Every method is a plain read: evaluation
/// calls them once per use of the field, and never allocates itself.
pub trait Fields {
    /// The first user header named `name` (exact, case-sensitive), if any. STOMP header
    /// values are strings. Also answers `JMSType` (as `type`) and `JMSCorrelationID`
    /// (as `correlation-id`).
    fn header(&self, name: &str) -> Option<&str>;
    /// `JMSMessageID`: the broker-assigned message id.
    fn message_id(&self) -> &str;
    /// `JMSPriority`, 0..=9.
    fn priority(&self) -> u8;
    /// `JMSTimestamp`: when the broker accepted the message, epoch ms.
    fn timestamp_ms(&self) -> i64;
    /// `JMSDeliveryMode`: `'PERSISTENT'` when true, `'NON_PERSISTENT'` when false.
    fn persistent(&self) -> bool;
    /// `JMSExpiration`: absolute, epoch ms; 0 = never.
    fn expiration_ms(&self) -> i64;
}

impl Fields for TopicMessage {
    fn header(&self, name: &str) -> Option<&str> {
        self.payload
            .headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn message_id(&self) -> &str {
        &self.message_id
    }

    fn priority(&self) -> u8 {
        self.priority
    }

    fn timestamp_ms(&self) -> i64 {
        self.payload.timestamp_ms
    }

    fn persistent(&self) -> bool {
        self.persistent
    }

    fn expiration_ms(&self) -> i64 {
        self.expiration
    }
}

/// Why a selector was refused: where (`column`, 1-based, in characters of the text;
/// one past the last character when the text ended too soon) and what was expected.
/// The text is stable: a STOMP `ERROR` frame may carry it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid selector at column {column}: {message}")]
pub struct SelectorError {
    /// 1-based, in characters (not bytes).
    pub column: usize,
    pub message: String,
}

impl SelectorError {
    pub(crate) fn new(column: usize, message: impl Into<String>) -> Self {
        Self {
            column,
            message: message.into(),
        }
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! A message for tests: headers in order, the JMS fields as plain values.

    use super::{Fields, Selector, Truth};

    #[derive(Debug, Clone, Default)]
    pub struct TestMessage {
        pub headers: Vec<(String, String)>,
        pub message_id: String,
        pub priority: u8,
        pub timestamp_ms: i64,
        pub persistent: bool,
        pub expiration_ms: i64,
    }

    impl TestMessage {
        pub fn with(headers: &[(&str, &str)]) -> Self {
            Self {
                headers: headers
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                message_id: "ID:ebb-1".into(),
                priority: 4,
                timestamp_ms: 1_700_000_000_000,
                persistent: true,
                expiration_ms: 0,
            }
        }
    }

    /// `selector` evaluated against a message with `headers` (and the defaults of
    /// [`TestMessage::with`]); panics if it does not parse.
    pub fn eval(selector: &str, headers: &[(&str, &str)]) -> Truth {
        Selector::parse(selector)
            .unwrap_or_else(|e| panic!("{selector:?}: {e}"))
            .evaluate(&TestMessage::with(headers))
    }

    /// The error `selector` is refused with, as `(column, message)`; panics if it parses.
    pub fn refused(selector: &str) -> (usize, String) {
        match Selector::parse(selector) {
            Ok(s) => panic!("{selector:?} parsed: {s:?}"),
            Err(e) => (e.column, e.message),
        }
    }

    impl Fields for TestMessage {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        }
        fn message_id(&self) -> &str {
            &self.message_id
        }
        fn priority(&self) -> u8 {
            self.priority
        }
        fn timestamp_ms(&self) -> i64 {
            self.timestamp_ms
        }
        fn persistent(&self) -> bool {
            self.persistent
        }
        fn expiration_ms(&self) -> i64 {
            self.expiration_ms
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::testing::{eval, refused, TestMessage};
    use super::*;

    /// The header values a store may filter a scan on: the equality and `IN` terms of
    /// the top-level `AND` on headers; nothing for other forms.
    #[test]
    fn required_headers_come_from_the_top_level_and() {
        let required = |s: &str| Selector::parse(s).unwrap().required_headers();
        let pair = |n: &str, v: &[&str]| {
            (
                n.to_string(),
                v.iter().map(|v| v.to_string()).collect::<Vec<_>>(),
            )
        };
        assert_eq!(required("kind = 'image'"), vec![pair("kind", &["image"])]);
        assert_eq!(
            required("'eu' = region AND size > 10 AND color IN ('red', 'blue')"),
            vec![pair("region", &["eu"]), pair("color", &["red", "blue"])]
        );
        assert_eq!(
            required("JMSType = 'car' AND JMSCorrelationID = 'instance:1'"),
            vec![
                pair("type", &["car"]),
                pair("correlation-id", &["instance:1"])
            ]
        );
        for none in [
            "kind = 'a' OR kind = 'b'",
            "NOT kind = 'a'",
            "kind <> 'a'",
            "kind NOT IN ('a')",
            "n = 5",
            "JMSMessageID = 'ID:1'",
            "kind LIKE 'im%'",
        ] {
            assert_eq!(required(none), vec![], "{none}");
        }
    }

    #[test]
    fn jms_fields() {
        let mut m = TestMessage::with(&[
            ("type", "car"),
            ("correlation-id", "instance:1"),
            ("JMSXGroupID", "g1"),
            ("JMSPriority", "0"),
        ]);
        m.priority = 7;
        m.expiration_ms = 1_700_000_060_000;
        let yes = |s: &str, m: &TestMessage| {
            let selector = Selector::parse(s).unwrap();
            assert_eq!(selector.evaluate(m), Truth::True, "{s}");
        };
        yes("JMSPriority = 7", &m);
        yes("JMSPriority > 4 AND JMSPriority <= 9", &m);
        yes("JMSMessageID = 'ID:ebb-1'", &m);
        yes("JMSTimestamp = 1700000000000", &m);
        yes("JMSTimestamp BETWEEN 1600000000000 AND 1800000000000", &m);
        yes("JMSExpiration - JMSTimestamp = 60000", &m);
        yes("JMSDeliveryMode = 'PERSISTENT'", &m);
        yes("JMSType = 'car'", &m);
        yes("JMSXGroupID = 'g1'", &m);
        // The header colon must survive (RabbitMQ's STOMP plugin once split on it).
        yes("JMSCorrelationID = 'instance:1'", &m);
        m.persistent = false;
        yes("JMSDeliveryMode = 'NON_PERSISTENT'", &m);
        let bare = TestMessage::with(&[]);
        yes("JMSType IS NULL AND JMSCorrelationID IS NULL", &bare);
        yes("JMSExpiration = 0", &bare);
        assert_eq!(
            Selector::parse("JMSType = 'car'").unwrap().evaluate(&bare),
            Truth::Unknown
        );
    }

    #[test]
    fn unsupported_jms_fields_are_refused() {
        for (text, column, name) in [
            ("JMSRedelivered = TRUE", 1, "JMSRedelivered"),
            ("JMSDestination = 'x'", 1, "JMSDestination"),
            ("a = 1 OR JMSReplyTo IS NULL", 10, "JMSReplyTo"),
        ] {
            assert_eq!(refused(text), (column, format!("unknown JMS field {name}")));
        }
    }

    #[test]
    fn headers_are_exact_and_the_first_one_wins() {
        let h = &[("kind", "image"), ("kind", "video"), ("Size", "3")];
        assert_eq!(eval("kind = 'image'", h), Truth::True);
        assert_eq!(eval("kind = 'video'", h), Truth::False);
        assert_eq!(eval("Kind = 'image'", h), Truth::Unknown);
        assert_eq!(eval("Size = 3", h), Truth::True);
        assert_eq!(eval("size = 3", h), Truth::Unknown);
    }

    #[test]
    fn matches_only_when_true() {
        let selector = Selector::parse("kind = 'image'").unwrap();
        assert_eq!(selector.text(), "kind = 'image'");
        assert_eq!(selector.to_string(), "kind = 'image'");
        assert!(selector.matches(&TestMessage::with(&[("kind", "image")])));
        assert!(!selector.matches(&TestMessage::with(&[("kind", "video")])));
        assert!(!selector.matches(&TestMessage::with(&[])));
        assert_eq!(selector.evaluate(&TestMessage::with(&[])), Truth::Unknown);
        let negated = Selector::parse("NOT (kind = 'image')").unwrap();
        assert!(!negated.matches(&TestMessage::with(&[])));
    }

    #[test]
    fn a_topic_message_is_fields() {
        let message = TopicMessage {
            id: Some(3),
            message_id: "ID:ebb-42".into(),
            persistent: false,
            priority: 9,
            expiration: 1_000,
            payload: Arc::new(ebb_store::Payload {
                timestamp_ms: 500,
                headers: vec![
                    ("kind".into(), "image".into()),
                    ("correlation-id".into(), "instance:1".into()),
                    ("kind".into(), "video".into()),
                    ("type".into(), "thumb".into()),
                ],
                ..Default::default()
            }),
            charge: None,
            origin: None,
            redeliveries: 0,
        };
        assert_eq!(message.header("kind"), Some("image"));
        assert_eq!(message.header("missing"), None);
        assert_eq!(Fields::message_id(&message), "ID:ebb-42");
        assert_eq!(Fields::priority(&message), 9);
        assert_eq!(message.timestamp_ms(), 500);
        assert!(!Fields::persistent(&message));
        assert_eq!(message.expiration_ms(), 1_000);
        let selector = Selector::parse(
            "kind = 'image' AND JMSCorrelationID = 'instance:1' AND JMSType LIKE 'th%' \
             AND JMSDeliveryMode = 'NON_PERSISTENT' AND JMSPriority = 9 \
             AND JMSTimestamp = 500 AND JMSExpiration = 1000 AND JMSMessageID = 'ID:ebb-42'",
        )
        .unwrap();
        assert!(selector.matches(&message));
    }

    #[test]
    fn truth_operations() {
        use Truth::*;
        assert_eq!(!True, False);
        assert_eq!(!Unknown, Unknown);
        assert_eq!(True.and(Unknown), Unknown);
        assert_eq!(False.and(Unknown), False);
        assert_eq!(True.or(Unknown), True);
        assert_eq!(False.or(Unknown), Unknown);
        assert_eq!(Truth::from(true), True);
    }

    #[test]
    fn a_selector_is_shareable() {
        fn send_sync<T: Send + Sync + Clone>() {}
        send_sync::<Selector>();
        let selector = Selector::parse("a = 1").unwrap();
        let copy = selector.clone();
        assert_eq!(copy.text(), selector.text());
        assert_eq!(
            copy.evaluate(&TestMessage::with(&[("a", "1")])),
            Truth::True
        );
    }

    /// Counts this thread's allocations while `COUNTING` is set, so a test can show
    /// that evaluation allocates nothing (other threads' tests are not counted).
    mod counting {
        use std::alloc::{GlobalAlloc, Layout, System};
        use std::cell::Cell;

        thread_local! {
            pub static COUNTING: Cell<bool> = const { Cell::new(false) };
            pub static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
        }

        pub struct Counting;

        // SAFETY: forwards to `System`; the thread-locals are `const`-initialized
        // `Cell`s without destructors, so touching them cannot allocate or recurse.
        unsafe impl GlobalAlloc for Counting {
            unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
                if COUNTING.with(Cell::get) {
                    ALLOCATIONS.with(|a| a.set(a.get() + 1));
                }
                System.alloc(layout)
            }
            unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
                System.dealloc(ptr, layout)
            }
        }

        #[global_allocator]
        static GLOBAL: Counting = Counting;

        /// Allocations `f` makes on this thread.
        pub fn allocations(f: impl FnOnce()) -> usize {
            ALLOCATIONS.with(|a| a.set(0));
            COUNTING.with(|c| c.set(true));
            f();
            COUNTING.with(|c| c.set(false));
            ALLOCATIONS.with(Cell::get)
        }
    }

    #[test]
    fn evaluation_does_not_allocate() {
        let message = TestMessage::with(&[
            ("kind", "image"),
            ("size", "1048576"),
            ("ratio", "1.5"),
            ("flag", "TRUE"),
            ("name", "a_b"),
        ]);
        let selectors: Vec<Selector> = [
            "kind = 'image' AND size > 1024 * 1024 - 1",
            "ratio BETWEEN 1 AND 2 OR missing IS NULL",
            "flag AND NOT (kind IN ('video', 'audio'))",
            r"name LIKE 'a\_%' ESCAPE '\' AND JMSMessageID LIKE 'ID:%'",
            "JMSDeliveryMode = 'PERSISTENT' AND JMSPriority / 2 = 2 AND -size < 0",
        ]
        .iter()
        .map(|s| Selector::parse(s).unwrap())
        .collect();
        let mut matched = 0;
        let n = counting::allocations(|| {
            for s in &selectors {
                matched += usize::from(s.matches(&message));
            }
        });
        assert_eq!(matched, selectors.len());
        assert_eq!(n, 0);
        // The counter counts: parsing allocates.
        assert!(counting::allocations(|| drop(Selector::parse("a = 1"))) > 0);
    }
}
