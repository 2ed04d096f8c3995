//! The selector's lexer and recursive-descent parser, and its syntax tree.
//!
//! The text is first cut into tokens (each with its 1-based column in characters),
//! then parsed top-down through the precedence levels (OR list → AND list → `NOT` →
//! comparison → additive chain → multiplicative chain → unary → primary). `AND`/`OR`
//! lists and arithmetic chains are built by loops into flat nodes, so only
//! parentheses, `NOT` and unary signs make the parser (and later the evaluator)
//! recurse deeper; those are counted against [`MAX_NESTING`]. A parenthesis costs one
//! pass through every level (eight stack frames: about 3 KiB optimized, 23 KiB in an
//! unoptimized build), so the deepest selector needs about 200 KiB of stack (1.5 MiB
//! unoptimized), within the 2 MiB a spawned thread has by default (a test checks it).
//! Each parsed expression carries a static [`Kind`] so that
//! what can never be a condition (`3 + 4`, `'abc'`) is refused here rather than never
//! matching.
//!
//! The tree prints back as selector text (`Display`, fully parenthesized), which the
//! property tests parse again.

use std::fmt;

use super::{SelectorError, MAX_NESTING, MAX_SELECTOR_BYTES};

// ---------------------------------------------------------------------------------
// Syntax tree

/// A selector expression. Conditions and values share one type: a parenthesized
/// condition may be compared (`(a = 1) = TRUE`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Expr {
    /// Two or more operands.
    Or(Vec<Expr>),
    /// Two or more operands.
    And(Vec<Expr>),
    Not(Box<Expr>),
    Compare {
        op: CmpOp,
        left: Box<Expr>,
        right: Box<Expr>,
    },
    Between {
        value: Box<Expr>,
        low: Box<Expr>,
        high: Box<Expr>,
        negated: bool,
    },
    In {
        value: Box<Expr>,
        /// One or more string literals, as written.
        list: Vec<String>,
        negated: bool,
    },
    Like {
        value: Box<Expr>,
        pattern: LikePattern,
        negated: bool,
    },
    IsNull {
        value: Box<Expr>,
        negated: bool,
    },
    /// `first op1 x1 op2 x2 ...`, evaluated left to right.
    Arith {
        first: Box<Expr>,
        rest: Vec<(ArithOp, Expr)>,
    },
    Neg(Box<Expr>),
    /// Unary `+`: the operand as a number.
    Plus(Box<Expr>),
    Literal(Literal),
    Field(Field),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArithOp {
    Add,
    Sub,
    Mul,
    Div,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Literal {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

/// What an identifier reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Field {
    /// A user header by exact name (also `JMSX...`).
    Header(String),
    Priority,
    MessageId,
    Timestamp,
    /// Header `type`.
    Type,
    /// Header `correlation-id`.
    CorrelationId,
    DeliveryMode,
    Expiration,
}

/// What a part of a selector gets wrong; [`SelectorError`] adds where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ParseError {
    /// A `JMS...` identifier that names no JMS field this broker reads.
    #[error("unknown JMS field {0}")]
    UnknownJmsField(String),
    /// A LIKE pattern whose last character is its escape character.
    #[error("the LIKE pattern ends with its escape character")]
    EndsWithEscape,
    /// A LIKE run holding `_` longer than [`MAX_WILD_RUN`] characters.
    #[error("a LIKE pattern's run between two '%' that holds '_' is longer than {MAX_WILD_RUN} characters")]
    WildRunTooLong,
}

impl Field {
    /// The field an identifier names; `Err` for an unsupported `JMS...` name.
    fn from_identifier(name: &str) -> Result<Field, ParseError> {
        Ok(match name {
            "JMSPriority" => Field::Priority,
            "JMSMessageID" => Field::MessageId,
            "JMSTimestamp" => Field::Timestamp,
            "JMSType" => Field::Type,
            "JMSCorrelationID" => Field::CorrelationId,
            "JMSDeliveryMode" => Field::DeliveryMode,
            "JMSExpiration" => Field::Expiration,
            n if n.starts_with("JMS") && !n.starts_with("JMSX") => {
                return Err(ParseError::UnknownJmsField(n.to_owned()))
            }
            n => Field::Header(n.to_owned()),
        })
    }
}

/// A `LIKE` pattern, compiled at parse time: `%` any sequence, `_` one character, the
/// escape character makes the next character literal.
///
/// Matching takes time linear in the subject, whatever the pattern (issue 35, point
/// 9: a backtracking matcher took ~2.4·10⁸ steps for a 4 KB `%aaaa…ab` against a 60 KB
/// header, on the destination's thread). The pattern is cut at its `%`s into runs:
/// the first run must match at the start, the last at the end, and each run between
/// is found at its leftmost place after the one before (enough, since a `%` absorbs
/// whatever lies between). A run without `_` is found with `str::find` (linear); a run
/// with `_` with a bit-parallel scan (Shift-And), one pass over the subject, at most
/// [`MAX_WILD_RUN`] characters long so that its masks stay a few words.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LikePattern {
    /// As written (without quotes), for printing.
    pub(crate) source: String,
    pub(crate) escape: Option<char>,
    /// Runs of `%` are collapsed to one.
    tokens: Vec<LikeToken>,
    /// The runs between `%`s (the first and last may be empty).
    runs: Vec<Run>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LikeToken {
    Char(char),
    One,
    Any,
}

/// The longest run of a `LIKE` pattern between two `%`s that holds a `_`, in
/// characters (runs without `_` have no limit but the selector's length).
pub(crate) const MAX_WILD_RUN: usize = 256;

/// A run of a pattern between `%`s: characters and `_`s.
#[derive(Debug, Clone, PartialEq)]
struct Run {
    tokens: Vec<LikeToken>,
    /// Without `_`: the run as text, found with `str::find`.
    literal: Option<String>,
    /// With `_`: Shift-And masks, bit `j` set when token `j` accepts the character:
    /// for `_` (in `one`) or per character of the run (`chars`, sorted).
    one: Vec<u64>,
    chars: Vec<(char, Vec<u64>)>,
}

impl Run {
    fn new(tokens: Vec<LikeToken>) -> Result<Run, ParseError> {
        let literal: Option<String> = tokens
            .iter()
            .map(|t| match t {
                LikeToken::Char(c) => Some(*c),
                _ => None,
            })
            .collect();
        let (mut one, mut chars) = (Vec::new(), Vec::<(char, Vec<u64>)>::new());
        if literal.is_none() {
            if tokens.len() > MAX_WILD_RUN {
                return Err(ParseError::WildRunTooLong);
            }
            let words = tokens.len().div_ceil(64);
            one = vec![0; words];
            for (j, token) in tokens.iter().enumerate() {
                let mask = match token {
                    LikeToken::One => &mut one,
                    LikeToken::Char(c) => match chars.binary_search_by_key(c, |(k, _)| *k) {
                        Ok(i) => &mut chars[i].1,
                        Err(i) => {
                            chars.insert(i, (*c, vec![0; words]));
                            &mut chars[i].1
                        }
                    },
                    LikeToken::Any => unreachable!("runs hold no '%'"),
                };
                mask[j / 64] |= 1 << (j % 64);
            }
        }
        Ok(Run {
            tokens,
            literal,
            one,
            chars,
        })
    }

    /// Whether the run's tokens accept `chars` one for one.
    fn accepts(&self, mut chars: impl Iterator<Item = char>) -> bool {
        self.tokens.iter().all(|t| match (t, chars.next()) {
            (LikeToken::One, Some(_)) => true,
            (LikeToken::Char(x), Some(c)) => *x == c,
            _ => false,
        })
    }

    /// Byte length of the run matched at the start of `subject`, if it matches there.
    fn prefix_of(&self, subject: &str) -> Option<usize> {
        let mut end = 0;
        for token in &self.tokens {
            let c = subject[end..].chars().next()?;
            match token {
                LikeToken::Char(x) if *x != c => return None,
                _ => end += c.len_utf8(),
            }
        }
        Some(end)
    }

    /// Byte index where the run matched at the end of `subject` starts, if it matches
    /// there.
    fn suffix_of(&self, subject: &str) -> Option<usize> {
        let mut start = subject.len();
        for token in self.tokens.iter().rev() {
            let c = subject[..start].chars().next_back()?;
            match token {
                LikeToken::Char(x) if *x != c => return None,
                _ => start -= c.len_utf8(),
            }
        }
        Some(start)
    }

    /// The byte index just after the leftmost place the run matches in `subject`.
    fn find_end(&self, subject: &str) -> Option<usize> {
        if let Some(literal) = &self.literal {
            return subject.find(literal.as_str()).map(|at| at + literal.len());
        }
        let last = self.tokens.len() - 1;
        let words = self.one.len();
        let mut state = vec![0u64; words];
        for (at, c) in subject.char_indices() {
            let accepts = self
                .chars
                .binary_search_by_key(&c, |(k, _)| *k)
                .ok()
                .map(|i| &self.chars[i].1);
            let mut carry = 1; // a match may start at every character
            for w in 0..words {
                let shifted = (state[w] << 1) | carry;
                carry = state[w] >> 63;
                let mask = self.one[w] | accepts.map_or(0, |m| m[w]);
                state[w] = shifted & mask;
            }
            if state[last / 64] & (1 << (last % 64)) != 0 {
                return Some(at + c.len_utf8());
            }
        }
        None
    }
}

impl LikePattern {
    /// Compiles `source`; `Err` when it ends with its escape character, or a run with
    /// `_` is longer than [`MAX_WILD_RUN`].
    pub(crate) fn compile(source: &str, escape: Option<char>) -> Result<LikePattern, ParseError> {
        let mut tokens = Vec::with_capacity(source.len());
        let mut chars = source.chars();
        while let Some(c) = chars.next() {
            let token = if Some(c) == escape {
                match chars.next() {
                    Some(next) => LikeToken::Char(next),
                    None => return Err(ParseError::EndsWithEscape),
                }
            } else if c == '%' {
                LikeToken::Any
            } else if c == '_' {
                LikeToken::One
            } else {
                LikeToken::Char(c)
            };
            if token == LikeToken::Any && tokens.last() == Some(&LikeToken::Any) {
                continue;
            }
            tokens.push(token);
        }
        let runs = tokens
            .split(|t| *t == LikeToken::Any)
            .map(|run| Run::new(run.to_vec()))
            .collect::<Result<Vec<Run>, ParseError>>()?;
        Ok(LikePattern {
            source: source.to_owned(),
            escape,
            tokens,
            runs,
        })
    }

    /// True when `subject` matches the whole pattern, in time linear in `subject` (see
    /// the type's documentation); no allocation but a run's scan state.
    pub(crate) fn matches(&self, subject: &str) -> bool {
        let (first, rest) = self.runs.split_first().expect("split yields a run");
        let Some((last, middle)) = rest.split_last() else {
            // No `%`: the whole subject, one for one.
            let mut chars = subject.chars();
            return first.accepts(&mut chars) && chars.next().is_none();
        };
        let Some(start) = first.prefix_of(subject) else {
            return false;
        };
        let Some(end) = last.suffix_of(&subject[start..]).map(|at| start + at) else {
            return false;
        };
        let mut from = start;
        for run in middle {
            match run.find_end(&subject[from..end]) {
                Some(after) => from += after,
                None => return false,
            }
        }
        true
    }
}

// ---------------------------------------------------------------------------------
// Printing (fully parenthesized; parses back to an equivalent tree)

fn write_quoted(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    f.write_str("'")?;
    for part in s.split_inclusive('\'') {
        f.write_str(part)?;
        if part.ends_with('\'') {
            f.write_str("'")?;
        }
    }
    f.write_str("'")
}

impl fmt::Display for CmpOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CmpOp::Eq => "=",
            CmpOp::Ne => "<>",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        })
    }
}

impl fmt::Display for ArithOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ArithOp::Add => "+",
            ArithOp::Sub => "-",
            ArithOp::Mul => "*",
            ArithOp::Div => "/",
        })
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Field::Header(name) => name,
            Field::Priority => "JMSPriority",
            Field::MessageId => "JMSMessageID",
            Field::Timestamp => "JMSTimestamp",
            Field::Type => "JMSType",
            Field::CorrelationId => "JMSCorrelationID",
            Field::DeliveryMode => "JMSDeliveryMode",
            Field::Expiration => "JMSExpiration",
        })
    }
}

impl fmt::Display for Literal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Literal::Null => f.write_str("NULL"),
            Literal::Bool(true) => f.write_str("TRUE"),
            Literal::Bool(false) => f.write_str("FALSE"),
            Literal::Int(n) => write!(f, "{n}"),
            // Debug keeps a `.` or an exponent, so it reads back as a float.
            Literal::Float(x) => write!(f, "{x:?}"),
            Literal::Str(s) => write_quoted(f, s),
        }
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let not = |negated: &bool| if *negated { "NOT " } else { "" };
        match self {
            Expr::Or(items) | Expr::And(items) => {
                let sep = if matches!(self, Expr::Or(_)) {
                    " OR "
                } else {
                    " AND "
                };
                f.write_str("(")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(sep)?;
                    }
                    write!(f, "{item}")?;
                }
                f.write_str(")")
            }
            Expr::Not(e) => write!(f, "(NOT {e})"),
            Expr::Compare { op, left, right } => write!(f, "({left} {op} {right})"),
            Expr::Between {
                value,
                low,
                high,
                negated,
            } => write!(f, "({value} {}BETWEEN {low} AND {high})", not(negated)),
            Expr::In {
                value,
                list,
                negated,
            } => {
                write!(f, "({value} {}IN (", not(negated))?;
                for (i, s) in list.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write_quoted(f, s)?;
                }
                f.write_str("))")
            }
            Expr::Like {
                value,
                pattern,
                negated,
            } => {
                write!(f, "({value} {}LIKE ", not(negated))?;
                write_quoted(f, &pattern.source)?;
                if let Some(c) = pattern.escape {
                    f.write_str(" ESCAPE ")?;
                    write_quoted(f, c.encode_utf8(&mut [0; 4]))?;
                }
                f.write_str(")")
            }
            Expr::IsNull { value, negated } => {
                write!(f, "({value} IS {}NULL)", not(negated))
            }
            Expr::Arith { first, rest } => {
                write!(f, "({first}")?;
                for (op, e) in rest {
                    write!(f, " {op} {e}")?;
                }
                f.write_str(")")
            }
            // A sign right before a number literal would be read as part of it.
            Expr::Neg(e) if matches!(**e, Expr::Literal(Literal::Int(_) | Literal::Float(_))) => {
                write!(f, "(-({e}))")
            }
            Expr::Neg(e) => write!(f, "(-{e})"),
            Expr::Plus(e) => write!(f, "(+{e})"),
            Expr::Literal(l) => write!(f, "{l}"),
            Expr::Field(field) => write!(f, "{field}"),
        }
    }
}

// ---------------------------------------------------------------------------------
// Lexer

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keyword {
    Null,
    True,
    False,
    Not,
    And,
    Or,
    Between,
    Like,
    In,
    Is,
    Escape,
}

impl Keyword {
    const ALL: [(&'static str, Keyword); 11] = [
        ("NULL", Keyword::Null),
        ("TRUE", Keyword::True),
        ("FALSE", Keyword::False),
        ("NOT", Keyword::Not),
        ("AND", Keyword::And),
        ("OR", Keyword::Or),
        ("BETWEEN", Keyword::Between),
        ("LIKE", Keyword::Like),
        ("IN", Keyword::In),
        ("IS", Keyword::Is),
        ("ESCAPE", Keyword::Escape),
    ];

    fn of(word: &str) -> Option<Keyword> {
        Self::ALL
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(word))
            .map(|(_, k)| *k)
    }

    fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, k)| *k == self)
            .map_or("?", |(name, _)| name)
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok<'a> {
    Ident(&'a str),
    Keyword(Keyword),
    Str(String),
    /// A decimal or hex integer literal, unsigned (a `-` before it is an operator).
    Int {
        value: u64,
        hex: bool,
    },
    /// A float literal, or a decimal integer too large for `u64`.
    Float(f64),
    LParen,
    RParen,
    Comma,
    Cmp(CmpOp),
    Plus,
    Minus,
    Star,
    Slash,
    End,
}

#[derive(Debug, Clone)]
struct Token<'a> {
    tok: Tok<'a>,
    /// 1-based, in characters.
    column: usize,
    /// The source text of the token (empty for `End`).
    text: &'a str,
}

fn is_ident_start(c: char) -> bool {
    c.is_alphabetic() || c == '_' || c == '$'
}

fn is_ident_part(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '$'
}

/// A short, quoted rendering of a token for messages.
fn quote_token(text: &str) -> String {
    const MAX: usize = 24;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("'{}...'", &text[..cut]),
        None => format!("'{text}'"),
    }
}

/// The value of a float literal (digits, `.`, exponent: always valid for Rust), or an
/// error if it is too large for `f64` (it would be infinite).
fn float_literal(text: &str, column: usize) -> Result<f64, SelectorError> {
    text.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite())
        .ok_or_else(|| SelectorError::new(column, "number out of range"))
}

struct Lexer<'a> {
    text: &'a str,
    /// Byte offset of the next character.
    pos: usize,
    /// Column of the next character.
    column: usize,
}

impl<'a> Lexer<'a> {
    fn peek(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    fn peek2(&self) -> Option<char> {
        let mut it = self.text[self.pos..].chars();
        it.next();
        it.next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        self.column += 1;
        Some(c)
    }

    fn eat_while(&mut self, f: impl Fn(char) -> bool) {
        while self.peek().is_some_and(&f) {
            self.bump();
        }
    }

    /// Skips white space and comments: `-- ...` to the end of the line and
    /// `/* ... */`, as ActiveMQ's selector grammar does (its `SKIP` rules). An
    /// unterminated `/*` is an error.
    fn skip_blanks(&mut self) -> Result<(), SelectorError> {
        loop {
            self.eat_while(char::is_whitespace);
            match (self.peek(), self.peek2()) {
                (Some('-'), Some('-')) => self.eat_while(|c| c != '\n'),
                (Some('/'), Some('*')) => {
                    let column = self.column;
                    self.bump();
                    self.bump();
                    loop {
                        match (self.peek(), self.peek2()) {
                            (Some('*'), Some('/')) => {
                                self.bump();
                                self.bump();
                                break;
                            }
                            (Some(_), _) => {
                                self.bump();
                            }
                            (None, _) => {
                                return Err(SelectorError::new(
                                    column,
                                    "unterminated comment: `/*` without `*/`",
                                ))
                            }
                        }
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    fn tokens(mut self) -> Result<Vec<Token<'a>>, SelectorError> {
        let mut out = Vec::new();
        loop {
            self.skip_blanks()?;
            let (start, column) = (self.pos, self.column);
            let Some(c) = self.peek() else {
                out.push(Token {
                    tok: Tok::End,
                    column,
                    text: "",
                });
                return Ok(out);
            };
            let tok = match c {
                '\'' => self.string()?,
                c if c.is_ascii_digit() => self.number()?,
                '.' if self.peek2().is_some_and(|d| d.is_ascii_digit()) => self.number()?,
                c if is_ident_start(c) => {
                    self.eat_while(is_ident_part);
                    let word = &self.text[start..self.pos];
                    match Keyword::of(word) {
                        Some(k) => Tok::Keyword(k),
                        None => Tok::Ident(word),
                    }
                }
                _ => {
                    self.bump();
                    match c {
                        '(' => Tok::LParen,
                        ')' => Tok::RParen,
                        ',' => Tok::Comma,
                        '+' => Tok::Plus,
                        '-' => Tok::Minus,
                        '*' => Tok::Star,
                        '/' => Tok::Slash,
                        '=' => Tok::Cmp(CmpOp::Eq),
                        '<' => match self.peek() {
                            Some('>') => {
                                self.bump();
                                Tok::Cmp(CmpOp::Ne)
                            }
                            Some('=') => {
                                self.bump();
                                Tok::Cmp(CmpOp::Le)
                            }
                            _ => Tok::Cmp(CmpOp::Lt),
                        },
                        '>' => match self.peek() {
                            Some('=') => {
                                self.bump();
                                Tok::Cmp(CmpOp::Ge)
                            }
                            _ => Tok::Cmp(CmpOp::Gt),
                        },
                        '!' if self.peek() == Some('=') => {
                            return Err(SelectorError::new(
                                column,
                                "unexpected '!=': not-equal is written '<>'",
                            ))
                        }
                        '"' => {
                            return Err(SelectorError::new(
                                column,
                                "unexpected character '\"': strings are in single quotes",
                            ))
                        }
                        c => {
                            return Err(SelectorError::new(
                                column,
                                format!("unexpected character {c:?}"),
                            ))
                        }
                    }
                }
            };
            out.push(Token {
                tok,
                column,
                text: &self.text[start..self.pos],
            });
        }
    }

    /// A string literal from its opening quote; `''` is a quote.
    fn string(&mut self) -> Result<Tok<'a>, SelectorError> {
        let column = self.column;
        self.bump();
        let mut s = String::new();
        loop {
            match self.bump() {
                None => return Err(SelectorError::new(column, "unterminated string")),
                Some('\'') if self.peek() == Some('\'') => {
                    self.bump();
                    s.push('\'');
                }
                Some('\'') => return Ok(Tok::Str(s)),
                Some(c) => s.push(c),
            }
        }
    }

    /// A numeric literal: hex `0x1F[L]`, integer `57[L]`, float `7.`, `.5`, `6.02e23`.
    fn number(&mut self) -> Result<Tok<'a>, SelectorError> {
        let (start, column) = (self.pos, self.column);
        let tok = if self.peek() == Some('0') && matches!(self.peek2(), Some('x' | 'X')) {
            self.bump();
            self.bump();
            let digits_at = self.pos;
            self.eat_while(|c| c.is_ascii_hexdigit());
            let digits = &self.text[digits_at..self.pos];
            if digits.is_empty() {
                return Err(SelectorError::new(column, "expected hex digits after '0x'"));
            }
            let value = u64::from_str_radix(digits, 16)
                .ok()
                .filter(|v| *v <= i64::MAX as u64 + 1)
                .ok_or_else(|| SelectorError::new(column, "hex literal out of range"))?;
            if matches!(self.peek(), Some('l' | 'L')) {
                self.bump();
            }
            Tok::Int { value, hex: true }
        } else {
            self.eat_while(|c| c.is_ascii_digit());
            let mut float = false;
            if self.peek() == Some('.') {
                float = true;
                self.bump();
                self.eat_while(|c| c.is_ascii_digit());
            }
            if matches!(self.peek(), Some('e' | 'E')) {
                float = true;
                let exponent_column = self.column;
                self.bump();
                if matches!(self.peek(), Some('+' | '-')) {
                    self.bump();
                }
                if !self.peek().is_some_and(|c| c.is_ascii_digit()) {
                    return Err(SelectorError::new(
                        exponent_column,
                        "expected digits in the exponent",
                    ));
                }
                self.eat_while(|c| c.is_ascii_digit());
            }
            let text = &self.text[start..self.pos];
            if float {
                Tok::Float(float_literal(text, column)?)
            } else {
                if text.len() > 1 && text.starts_with('0') {
                    return Err(SelectorError::new(
                        column,
                        format!(
                            "a number may not start with 0 ({}): ActiveMQ would read it as octal",
                            quote_token(text)
                        ),
                    ));
                }
                if matches!(self.peek(), Some('l' | 'L')) {
                    self.bump();
                }
                match text.parse::<u64>() {
                    Ok(value) => Tok::Int { value, hex: false },
                    Err(_) => Tok::Float(float_literal(text, column)?),
                }
            }
        };
        if let Some(c) = self.peek().filter(|c| is_ident_part(*c) || *c == '.') {
            return Err(SelectorError::new(
                self.column,
                format!("unexpected character {c:?} after a number"),
            ));
        }
        Ok(tok)
    }
}

// ---------------------------------------------------------------------------------
// Parser

/// What an expression is known to be before any message is seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A comparison, a logical operator, `TRUE`/`FALSE`.
    Condition,
    /// `NULL`: anything, always NULL.
    Null,
    /// A header: a string that may read as a number or a boolean.
    Header,
    /// A number literal or a numeric JMS field.
    Number,
    Arithmetic,
    /// A string literal or a string JMS field.
    Str,
}

impl Kind {
    fn describe(self) -> &'static str {
        match self {
            Kind::Condition => "a condition",
            Kind::Null => "NULL",
            Kind::Header => "a header",
            Kind::Number => "a number",
            Kind::Arithmetic => "an arithmetic expression",
            Kind::Str => "a string",
        }
    }
}

/// An expression with its static kind and the column where it starts.
struct Parsed {
    expr: Expr,
    kind: Kind,
    column: usize,
}

struct Parser<'a> {
    tokens: Vec<Token<'a>>,
    pos: usize,
    depth: usize,
}

/// Parses a whole selector (see the module documentation of [`super`]).
pub(crate) fn parse(text: &str) -> Result<Expr, SelectorError> {
    if text.len() > MAX_SELECTOR_BYTES {
        let column = text
            .char_indices()
            .take_while(|(i, _)| *i < MAX_SELECTOR_BYTES)
            .count()
            + 1;
        return Err(SelectorError::new(
            column,
            format!("the selector is longer than {MAX_SELECTOR_BYTES} bytes"),
        ));
    }
    let tokens = Lexer {
        text,
        pos: 0,
        column: 1,
    }
    .tokens()?;
    if tokens.len() == 1 {
        return Err(SelectorError::new(1, "empty selector"));
    }
    let mut parser = Parser {
        tokens,
        pos: 0,
        depth: 0,
    };
    let parsed = parser.list(Keyword::Or)?;
    let parsed = condition(parsed, "the selector")?;
    let next = parser.peek();
    if next.tok != Tok::End {
        return Err(SelectorError::new(
            next.column,
            format!(
                "unexpected {} after a complete expression",
                quote_token(next.text)
            ),
        ));
    }
    Ok(parsed.expr)
}

/// `parsed`, if it may be a condition (`what` needs one).
fn condition(parsed: Parsed, what: &str) -> Result<Parsed, SelectorError> {
    match parsed.kind {
        Kind::Condition | Kind::Null | Kind::Header => Ok(parsed),
        kind => Err(SelectorError::new(
            parsed.column,
            format!("{what} must be a condition, not {}", kind.describe()),
        )),
    }
}

/// `parsed`, if it may be a number (`what` needs one).
fn number(parsed: Parsed, what: &str) -> Result<Parsed, SelectorError> {
    match parsed.kind {
        Kind::Condition => Err(SelectorError::new(
            parsed.column,
            format!("{what} needs a number, not a condition"),
        )),
        _ => Ok(parsed),
    }
}

impl<'a> Parser<'a> {
    fn peek(&self) -> &Token<'a> {
        &self.tokens[self.pos]
    }

    fn next(&mut self) -> Token<'a> {
        let t = self.tokens[self.pos].clone();
        if t.tok != Tok::End {
            self.pos += 1;
        }
        t
    }

    fn at_keyword(&self, k: Keyword) -> bool {
        self.peek().tok == Tok::Keyword(k)
    }

    /// What the previous token was, for "expected ... after 'X'".
    fn after(&self) -> String {
        match self.pos.checked_sub(1).map(|i| &self.tokens[i]) {
            None => String::new(),
            Some(Token {
                tok: Tok::Keyword(k),
                ..
            }) => format!(" after '{}'", k.name()),
            Some(t) => format!(" after {}", quote_token(t.text)),
        }
    }

    fn error_here(&self, message: impl Into<String>) -> SelectorError {
        SelectorError::new(self.peek().column, message)
    }

    /// One more level of nesting, opened by the token at `column`.
    fn enter(&mut self, column: usize) -> Result<(), SelectorError> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(SelectorError::new(
                column,
                format!("nesting deeper than {MAX_NESTING} (parentheses, NOT, unary signs)"),
            ));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    /// `item (k item)*` where an item is an AND list (for OR) or a `not` (for AND).
    /// (The levels of the grammar call each other directly, without wrappers or
    /// closures: each call is a stack frame, and a parenthesis goes through them all.)
    fn list(&mut self, k: Keyword) -> Result<Parsed, SelectorError> {
        let first = if k == Keyword::Or {
            self.list(Keyword::And)?
        } else {
            self.not()?
        };
        if !self.at_keyword(k) {
            return Ok(first);
        }
        let column = first.column;
        let what = format!("an operand of {}", k.name());
        let mut items = vec![condition(first, &what)?.expr];
        while self.at_keyword(k) {
            self.next();
            let item = if k == Keyword::Or {
                self.list(Keyword::And)?
            } else {
                self.not()?
            };
            items.push(condition(item, &what)?.expr);
        }
        let expr = if k == Keyword::Or {
            Expr::Or(items)
        } else {
            Expr::And(items)
        };
        Ok(Parsed {
            expr,
            kind: Kind::Condition,
            column,
        })
    }

    fn not(&mut self) -> Result<Parsed, SelectorError> {
        if !self.at_keyword(Keyword::Not) {
            return self.comparison();
        }
        let column = self.next().column;
        self.enter(column)?;
        let operand = condition(self.not()?, "the operand of NOT")?;
        self.leave();
        Ok(Parsed {
            expr: Expr::Not(Box::new(operand.expr)),
            kind: Kind::Condition,
            column,
        })
    }

    fn comparison(&mut self) -> Result<Parsed, SelectorError> {
        let left = self.chain(true)?;
        let column = left.column;
        let value = Box::new(left.expr);
        let expr = match self.peek().tok.clone() {
            Tok::Cmp(op) => {
                self.next();
                let right = self.chain(true)?;
                Expr::Compare {
                    op,
                    left: value,
                    right: Box::new(right.expr),
                }
            }
            Tok::Keyword(Keyword::Is) => {
                self.next();
                let negated = self.at_keyword(Keyword::Not);
                if negated {
                    self.next();
                }
                if !self.at_keyword(Keyword::Null) {
                    return Err(self.error_here(format!("expected 'NULL'{}", self.after())));
                }
                self.next();
                Expr::IsNull { value, negated }
            }
            Tok::Keyword(k @ (Keyword::Not | Keyword::Between | Keyword::In | Keyword::Like)) => {
                let negated = k == Keyword::Not;
                if negated {
                    self.next();
                }
                let Tok::Keyword(k @ (Keyword::Between | Keyword::In | Keyword::Like)) =
                    self.peek().tok
                else {
                    return Err(self.error_here("expected 'BETWEEN', 'IN' or 'LIKE' after 'NOT'"));
                };
                self.next();
                match k {
                    Keyword::Between => self.between(value, negated)?,
                    Keyword::In => self.in_list(value, negated)?,
                    _ => self.like(value, negated)?,
                }
            }
            _ => {
                return Ok(Parsed {
                    expr: *value,
                    kind: left.kind,
                    column,
                })
            }
        };
        Ok(Parsed {
            expr,
            kind: Kind::Condition,
            column,
        })
    }

    fn between(&mut self, value: Box<Expr>, negated: bool) -> Result<Expr, SelectorError> {
        let low = self.chain(true)?;
        if !self.at_keyword(Keyword::And) {
            return Err(self.error_here(format!("expected 'AND' in BETWEEN{}", self.after())));
        }
        self.next();
        let high = self.chain(true)?;
        Ok(Expr::Between {
            value,
            low: Box::new(low.expr),
            high: Box::new(high.expr),
            negated,
        })
    }

    fn in_list(&mut self, value: Box<Expr>, negated: bool) -> Result<Expr, SelectorError> {
        if self.peek().tok != Tok::LParen {
            return Err(self.error_here("expected '(' after 'IN'"));
        }
        self.next();
        let mut list = Vec::new();
        loop {
            match self.peek().tok.clone() {
                Tok::Str(s) => {
                    self.next();
                    list.push(s);
                }
                _ => {
                    return Err(self.error_here(format!(
                        "expected a string literal in the IN list{}",
                        self.after()
                    )))
                }
            }
            match self.peek().tok {
                Tok::Comma => {}
                Tok::RParen => {
                    self.next();
                    break;
                }
                _ => return Err(self.error_here("expected ',' or ')' in the IN list")),
            }
            self.next();
        }
        Ok(Expr::In {
            value,
            list,
            negated,
        })
    }

    fn like(&mut self, value: Box<Expr>, negated: bool) -> Result<Expr, SelectorError> {
        let Tok::Str(source) = self.peek().tok.clone() else {
            return Err(self.error_here("expected a string literal after 'LIKE'"));
        };
        let pattern_column = self.next().column;
        let mut escape = None;
        if self.at_keyword(Keyword::Escape) {
            self.next();
            let Tok::Str(e) = self.peek().tok.clone() else {
                return Err(self.error_here("expected a string literal after 'ESCAPE'"));
            };
            let mut chars = e.chars();
            let (Some(c), None) = (chars.next(), chars.next()) else {
                return Err(self.error_here("ESCAPE takes exactly one character"));
            };
            self.next();
            escape = Some(c);
        }
        let pattern = LikePattern::compile(&source, escape)
            .map_err(|m| SelectorError::new(pattern_column, m.to_string()))?;
        Ok(Expr::Like {
            value,
            pattern,
            negated,
        })
    }

    /// An arithmetic chain: additive (`+ -` over multiplicative chains) or
    /// multiplicative (`* /` over unary expressions).
    fn chain(&mut self, additive: bool) -> Result<Parsed, SelectorError> {
        let op_at = |t: &Tok| match t {
            Tok::Plus if additive => Some(ArithOp::Add),
            Tok::Minus if additive => Some(ArithOp::Sub),
            Tok::Star if !additive => Some(ArithOp::Mul),
            Tok::Slash if !additive => Some(ArithOp::Div),
            _ => None,
        };
        let first = if additive {
            self.chain(false)?
        } else {
            self.unary()?
        };
        let Some(mut op) = op_at(&self.peek().tok) else {
            return Ok(first);
        };
        let column = first.column;
        let mut rest = Vec::new();
        let first = number(first, "arithmetic")?;
        loop {
            self.next();
            let operand = if additive {
                self.chain(false)?
            } else {
                self.unary()?
            };
            rest.push((op, number(operand, "arithmetic")?.expr));
            match op_at(&self.peek().tok) {
                Some(next) => op = next,
                None => break,
            }
        }
        Ok(Parsed {
            expr: Expr::Arith {
                first: Box::new(first.expr),
                rest,
            },
            kind: Kind::Arithmetic,
            column,
        })
    }

    fn unary(&mut self) -> Result<Parsed, SelectorError> {
        let negate = match self.peek().tok {
            Tok::Minus => true,
            Tok::Plus => false,
            _ => return self.primary(),
        };
        let column = self.next().column;
        self.enter(column)?;
        // A sign right before a number literal is part of it (so -9223372036854775808
        // is i64::MIN).
        if let Tok::Int { value, .. } = self.peek().tok {
            if negate && value <= i64::MAX as u64 + 1 {
                self.next();
                self.leave();
                return Ok(Parsed {
                    expr: Expr::Literal(Literal::Int((value as i64).wrapping_neg())),
                    kind: Kind::Number,
                    column,
                });
            }
        }
        let operand = number(self.unary()?, "a sign")?;
        self.leave();
        let expr = match (negate, operand.expr) {
            (true, Expr::Literal(Literal::Float(x))) => Expr::Literal(Literal::Float(-x)),
            (true, e) => Expr::Neg(Box::new(e)),
            (false, e) => Expr::Plus(Box::new(e)),
        };
        let kind = match expr {
            Expr::Literal(_) => Kind::Number,
            _ => Kind::Arithmetic,
        };
        Ok(Parsed { expr, kind, column })
    }

    fn primary(&mut self) -> Result<Parsed, SelectorError> {
        let token = self.peek().clone();
        let column = token.column;
        let (expr, kind) = match token.tok {
            Tok::Ident(name) => {
                let field = Field::from_identifier(name)
                    .map_err(|m| SelectorError::new(column, m.to_string()))?;
                let kind = match field {
                    Field::Header(_) | Field::Type | Field::CorrelationId => Kind::Header,
                    Field::Priority | Field::Timestamp | Field::Expiration => Kind::Number,
                    Field::MessageId | Field::DeliveryMode => Kind::Str,
                };
                (Expr::Field(field), kind)
            }
            Tok::Str(s) => (Expr::Literal(Literal::Str(s)), Kind::Str),
            Tok::Int { value, hex } => {
                let literal = match i64::try_from(value) {
                    Ok(n) => Literal::Int(n),
                    Err(_) if hex => {
                        return Err(SelectorError::new(column, "hex literal out of range"))
                    }
                    Err(_) => Literal::Float(value as f64),
                };
                (Expr::Literal(literal), Kind::Number)
            }
            Tok::Float(x) => (Expr::Literal(Literal::Float(x)), Kind::Number),
            Tok::Keyword(Keyword::True) => (Expr::Literal(Literal::Bool(true)), Kind::Condition),
            Tok::Keyword(Keyword::False) => (Expr::Literal(Literal::Bool(false)), Kind::Condition),
            Tok::Keyword(Keyword::Null) => (Expr::Literal(Literal::Null), Kind::Null),
            Tok::LParen => {
                self.next();
                self.enter(column)?;
                let inner = self.list(Keyword::Or)?;
                if self.peek().tok != Tok::RParen {
                    return Err(self
                        .error_here(format!("expected ')' to close the '(' at column {column}")));
                }
                self.next();
                self.leave();
                return Ok(Parsed {
                    expr: inner.expr,
                    kind: inner.kind,
                    column,
                });
            }
            _ => {
                let message = match self.pos {
                    0 => "expected an expression".to_string(),
                    _ => format!("expected a value{}", self.after()),
                };
                return Err(SelectorError::new(column, message));
            }
        };
        self.next();
        Ok(Parsed { expr, kind, column })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selector::testing::{eval, refused};
    use crate::selector::{Selector, Truth};

    fn expr(text: &str) -> Expr {
        parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
    }

    fn like(pattern: &str, escape: Option<char>, subject: &str) -> bool {
        LikePattern::compile(pattern, escape)
            .unwrap()
            .matches(subject)
    }

    #[test]
    fn errors_name_the_column_and_what_was_expected() {
        let cases: &[(&str, usize, &str)] = &[
            ("JMSType =", 10, "expected a value after '='"),
            ("a = AND b", 5, "expected a value after '='"),
            ("a = 1 AND", 10, "expected a value after 'AND'"),
            ("kind = 'image", 8, "unterminated string"),
            ("a # 1", 3, "unexpected character '#'"),
            (
                "a = \"x\"",
                5,
                "unexpected character '\"': strings are in single quotes",
            ),
            ("a != 1", 3, "unexpected '!=': not-equal is written '<>'"),
            ("a = 1 b", 7, "unexpected 'b' after a complete expression"),
            ("a = 1 = 2", 7, "unexpected '=' after a complete expression"),
            ("", 1, "empty selector"),
            ("  \t ", 1, "empty selector"),
            (")", 1, "expected an expression"),
            ("(a = 1", 7, "expected ')' to close the '(' at column 1"),
            (
                "3 + 4",
                1,
                "the selector must be a condition, not an arithmetic expression",
            ),
            ("'abc'", 1, "the selector must be a condition, not a string"),
            ("57", 1, "the selector must be a condition, not a number"),
            (
                "-a",
                1,
                "the selector must be a condition, not an arithmetic expression",
            ),
            (
                "JMSPriority",
                1,
                "the selector must be a condition, not a number",
            ),
            (
                "NOT 1",
                5,
                "the operand of NOT must be a condition, not a number",
            ),
            (
                "a = 1 OR 'x'",
                10,
                "an operand of OR must be a condition, not a string",
            ),
            (
                "2 * 3 AND a",
                1,
                "an operand of AND must be a condition, not an arithmetic expression",
            ),
            (
                "(a = 1) + 2 > 0",
                1,
                "arithmetic needs a number, not a condition",
            ),
            ("-TRUE = a", 2, "a sign needs a number, not a condition"),
            (
                "JMSRedelivered = TRUE",
                1,
                "unknown JMS field JMSRedelivered",
            ),
            (
                "a = 1 AND JMSReplyTo IS NULL",
                11,
                "unknown JMS field JMSReplyTo",
            ),
            (
                "a LIKE 'x' ESCAPE 'ab'",
                19,
                "ESCAPE takes exactly one character",
            ),
            (
                "a LIKE 'x' ESCAPE 1",
                19,
                "expected a string literal after 'ESCAPE'",
            ),
            (
                r"a LIKE 'x\' ESCAPE '\'",
                8,
                "the LIKE pattern ends with its escape character",
            ),
            ("a LIKE b", 8, "expected a string literal after 'LIKE'"),
            (
                "a IN (1)",
                7,
                "expected a string literal in the IN list after '('",
            ),
            (
                "a IN ('x',)",
                11,
                "expected a string literal in the IN list after ','",
            ),
            ("a IN ('x' 'y')", 11, "expected ',' or ')' in the IN list"),
            ("a IN 'x'", 6, "expected '(' after 'IN'"),
            (
                "a NOT x",
                7,
                "expected 'BETWEEN', 'IN' or 'LIKE' after 'NOT'",
            ),
            ("a IS 1", 6, "expected 'NULL' after 'IS'"),
            ("a IS NOT TRUE", 10, "expected 'NULL' after 'NOT'"),
            (
                "a BETWEEN 1 OR 2",
                13,
                "expected 'AND' in BETWEEN after '1'",
            ),
            (
                "010 = a",
                1,
                "a number may not start with 0 ('010'): ActiveMQ would read it as octal",
            ),
            ("a = 1.2.3", 8, "unexpected character '.' after a number"),
            ("a = 12abc", 7, "unexpected character 'a' after a number"),
            ("1e = a", 2, "expected digits in the exponent"),
            ("0x = a", 1, "expected hex digits after '0x'"),
            ("a = 0x8000000000000000", 5, "hex literal out of range"),
            ("a = 0x10000000000000000", 5, "hex literal out of range"),
            ("a = -1e999", 6, "number out of range"),
            // Columns count characters, not bytes.
            ("é = 'ü' #", 9, "unexpected character '#'"),
        ];
        for (text, column, message) in cases {
            assert_eq!(
                refused(text),
                (*column, message.to_string()),
                "selector {text:?}"
            );
        }
    }

    #[test]
    fn the_error_prints_as_the_brief_shows() {
        let e = Selector::parse("JMSType =").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid selector at column 10: expected a value after '='"
        );
    }

    #[test]
    fn long_messages_quote_a_shortened_token() {
        let text = format!("a = 1 {}", "b".repeat(40));
        assert_eq!(
            refused(&text),
            (
                7,
                format!(
                    "unexpected '{}...' after a complete expression",
                    "b".repeat(24)
                )
            )
        );
    }

    #[test]
    fn length_limit_is_4096_bytes() {
        let at_limit = format!("a = '{}'", "x".repeat(MAX_SELECTOR_BYTES - 6));
        assert_eq!(at_limit.len(), MAX_SELECTOR_BYTES);
        let long_value = "x".repeat(MAX_SELECTOR_BYTES - 6);
        assert_eq!(eval(&at_limit, &[("a", &long_value)]), Truth::True);

        let over = format!("a = '{}'", "x".repeat(MAX_SELECTOR_BYTES - 5));
        assert_eq!(
            refused(&over),
            (4097, "the selector is longer than 4096 bytes".to_string())
        );
        // The column counts characters: 2-byte characters put byte 4096 at column 2049.
        let wide = "é".repeat(3000);
        assert_eq!(
            refused(&wide),
            (2049, "the selector is longer than 4096 bytes".to_string())
        );
    }

    #[test]
    fn comments_are_skipped_as_activemq_does() {
        assert_eq!(
            eval("kind = 'image' -- a comment\n", &[("kind", "image")]),
            Truth::True
        );
        assert_eq!(
            eval(
                "kind = /* inline */ 'image' -- to the end",
                &[("kind", "image")]
            ),
            Truth::True
        );
        assert_eq!(
            eval("n = 3 -- 2\n AND m = 1", &[("n", "3"), ("m", "1")]),
            Truth::True
        );
        assert_eq!(
            refused("kind = 'a' /* open"),
            (12, "unterminated comment: `/*` without `*/`".to_string())
        );
    }

    #[test]
    fn nesting_limit_is_64_parentheses_nots_and_signs_together() {
        let parens = |n: usize| format!("{}a = 1{}", "(".repeat(n), ")".repeat(n));
        assert_eq!(eval(&parens(64), &[("a", "1")]), Truth::True);
        let deep = "nesting deeper than 64 (parentheses, NOT, unary signs)".to_string();
        assert_eq!(refused(&parens(65)), (65, deep.clone()));

        let nots = |n: usize| format!("{}a", "NOT ".repeat(n));
        assert_eq!(eval(&nots(64), &[("a", "true")]), Truth::True);
        assert_eq!(refused(&nots(65)), (257, deep.clone()));

        // Signs apart: `--` starts a comment.
        let signs = |n: usize| format!("a = {}1", "- ".repeat(n));
        assert_eq!(eval(&signs(64), &[("a", "1")]), Truth::True);
        assert_eq!(eval(&signs(63), &[("a", "-1")]), Truth::True);
        assert_eq!(refused(&signs(65)), (5 + 2 * 64, deep.clone()));

        // They count together: 32 parentheses, 31 NOTs and a sign are 64.
        let mixed = |nots: usize| {
            format!(
                "{}{}a = -1{}",
                "(".repeat(32),
                "NOT ".repeat(nots),
                ")".repeat(32)
            )
        };
        assert_eq!(eval(&mixed(31), &[("a", "-1")]), Truth::False);
        assert_eq!(eval(&mixed(31), &[("a", "1")]), Truth::True);
        // One more NOT: the sign (column 165) is the 65th level.
        assert_eq!(refused(&mixed(32)), (32 + 4 * 32 + 5, deep.clone()));

        // Hostile: a whole 4 KiB of parentheses stops at the limit.
        assert_eq!(refused(&"(".repeat(MAX_SELECTOR_BYTES)), (65, deep));
    }

    #[test]
    fn the_deepest_selector_fits_a_default_thread_stack() {
        // 2 MiB: what `std::thread::spawn` (and so an actix arbiter) gives a thread.
        let deepest = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(|| {
                let parens = format!("{}a = 1{}", "(".repeat(64), ")".repeat(64));
                let mixed = format!("{}NOT a = -1{}", "(".repeat(62), ")".repeat(62));
                [parens, mixed].map(|text| eval(&text, &[("a", "1")]))
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(deepest, [Truth::True, Truth::True]);
    }

    #[test]
    fn long_flat_chains_do_not_nest() {
        // ~4 KiB of ORs and of additions: flat nodes, no deep recursion.
        let ors = vec!["a = 1"; 450].join(" OR ");
        assert!(ors.len() <= MAX_SELECTOR_BYTES);
        match expr(&ors) {
            Expr::Or(items) => assert_eq!(items.len(), 450),
            e => panic!("not an OR: {e:?}"),
        }
        assert_eq!(eval(&ors, &[("a", "1")]), Truth::True);
        assert_eq!(eval(&ors, &[("a", "2")]), Truth::False);
        let sum = format!("{} = 2000", vec!["1"; 2000].join("+"));
        assert!(sum.len() <= MAX_SELECTOR_BYTES);
        assert_eq!(eval(&sum, &[]), Truth::True);
    }

    #[test]
    fn precedence_and_associativity() {
        assert_eq!(
            expr("a OR b AND NOT c = 1").to_string(),
            "(a OR (b AND (NOT (c = 1))))"
        );
        assert_eq!(
            expr("x = 1 + 2 * 3 - -4 / 2").to_string(),
            "(x = (1 + (2 * 3) - (-4 / 2)))"
        );
        assert_eq!(
            expr("a BETWEEN 1 AND 2 AND b").to_string(),
            "((a BETWEEN 1 AND 2) AND b)"
        );
        assert_eq!(
            expr("NOT a NOT IN ('x', 'it''s')").to_string(),
            "(NOT (a NOT IN ('x', 'it''s')))"
        );
        assert_eq!(
            expr(r"a NOT LIKE 'a\_%' ESCAPE '\' OR b IS NOT NULL").to_string(),
            r"((a NOT LIKE 'a\_%' ESCAPE '\') OR (b IS NOT NULL))"
        );
        assert_eq!(expr("(a = 1) = TRUE").to_string(), "((a = 1) = TRUE)");
        assert_eq!(expr("+a > - b").to_string(), "((+a) > (-b))");
    }

    #[test]
    fn keywords_are_case_insensitive_identifiers_are_not() {
        assert_eq!(
            expr("a = 1 and not b or c is null").to_string(),
            "(((a = 1) AND (NOT b)) OR (c IS NULL))"
        );
        assert_eq!(expr("Kind = kind").to_string(), "(Kind = kind)");
        assert_eq!(expr("$a_1 = _b$").to_string(), "($a_1 = _b$)");
        assert_eq!(
            refused("and = 1"),
            (1, "expected an expression".to_string())
        );
    }

    #[test]
    fn literals() {
        let literal = |text: &str| match expr(&format!("a = {text}")) {
            Expr::Compare { right, .. } => match *right {
                Expr::Literal(l) => l,
                e => panic!("{text}: not a literal: {e:?}"),
            },
            e => panic!("{text}: {e:?}"),
        };
        assert_eq!(literal("57"), Literal::Int(57));
        assert_eq!(literal("-957"), Literal::Int(-957));
        assert_eq!(literal("57L"), Literal::Int(57));
        assert_eq!(literal("57l"), Literal::Int(57));
        assert_eq!(literal("0"), Literal::Int(0));
        assert_eq!(literal("0x1F"), Literal::Int(31));
        assert_eq!(literal("0X1fL"), Literal::Int(31));
        assert_eq!(literal("-0x8000000000000000"), Literal::Int(i64::MIN));
        assert_eq!(literal("9223372036854775807"), Literal::Int(i64::MAX));
        assert_eq!(literal("-9223372036854775808"), Literal::Int(i64::MIN));
        assert_eq!(
            literal("9223372036854775808"),
            Literal::Float(9223372036854775808.0)
        );
        assert_eq!(
            literal("123456789012345678901234567890"),
            Literal::Float(1.2345678901234568e29)
        );
        assert_eq!(literal("7."), Literal::Float(7.0));
        assert_eq!(literal(".5"), Literal::Float(0.5));
        assert_eq!(literal("-95.7"), Literal::Float(-95.7));
        assert_eq!(literal("6.02e23"), Literal::Float(6.02e23));
        assert_eq!(literal("1E-3"), Literal::Float(0.001));
        assert_eq!(literal("0.5"), Literal::Float(0.5));
        assert_eq!(literal("TRUE"), Literal::Bool(true));
        assert_eq!(literal("false"), Literal::Bool(false));
        assert_eq!(literal("NULL"), Literal::Null);
        assert_eq!(literal("'it''s'"), Literal::Str("it's".into()));
        assert_eq!(literal("''"), Literal::Str(String::new()));
        assert_eq!(literal("'a:b\nc'"), Literal::Str("a:b\nc".into()));
    }

    #[test]
    fn jms_identifiers() {
        let field = |text: &str| match expr(&format!("{text} IS NULL")) {
            Expr::IsNull { value, .. } => match *value {
                Expr::Field(f) => f,
                e => panic!("{e:?}"),
            },
            e => panic!("{e:?}"),
        };
        assert_eq!(field("JMSPriority"), Field::Priority);
        assert_eq!(field("JMSMessageID"), Field::MessageId);
        assert_eq!(field("JMSTimestamp"), Field::Timestamp);
        assert_eq!(field("JMSType"), Field::Type);
        assert_eq!(field("JMSCorrelationID"), Field::CorrelationId);
        assert_eq!(field("JMSDeliveryMode"), Field::DeliveryMode);
        assert_eq!(field("JMSExpiration"), Field::Expiration);
        assert_eq!(field("JMSXGroupID"), Field::Header("JMSXGroupID".into()));
        assert_eq!(field("JMSXGroupSeq"), Field::Header("JMSXGroupSeq".into()));
        assert_eq!(field("jmsPriority"), Field::Header("jmsPriority".into()));
        assert_eq!(
            refused("JMSpriority IS NULL"),
            (1, "unknown JMS field JMSpriority".to_string())
        );
    }

    /// Issue 35, point 9: the pattern that took a backtracking matcher ~2.4·10⁸ steps
    /// (a 4 KB `%aaaa…ab` against 60 KB of `a`), and runs with `_` longer than one
    /// word of the bit-parallel scan, match as the pattern says.
    #[test]
    fn like_long_patterns_and_subjects() {
        let pattern = format!("%{}b", "a".repeat(4_000));
        let subject = "a".repeat(60_000);
        assert!(!like(&pattern, None, &subject));
        assert!(like(&pattern, None, &format!("{subject}b")));
        assert!(!like(&pattern, None, &format!("{subject}ba")));
        // A run of 200 with `_`s (four words of masks), found in the middle.
        let run: String = (0..200)
            .map(|i| if i % 7 == 3 { '_' } else { 'a' })
            .collect();
        let pattern = format!("x%{run}%y");
        let inside: String = (0..200)
            .map(|i| if i % 7 == 3 { 'é' } else { 'a' })
            .collect();
        assert!(like(
            &pattern,
            None,
            &format!("x{}{inside}zzy", "a".repeat(500))
        ));
        let short: String = inside.chars().take(199).collect();
        assert!(!like(&pattern, None, &format!("x{short}y")));
        assert!(like(
            &format!("%{run}"),
            None,
            &format!("{}{inside}", "a".repeat(70))
        ));
        // Prefix and suffix never overlap.
        assert!(!like("ab%ba", None, "aba"));
        assert!(like("ab%ba", None, "abba"));
        assert!(like("a%_%a", None, "aéa"));
        assert!(!like("a%_%a", None, "aa"));
    }

    #[test]
    fn like_refuses_a_run_with_underscore_over_its_limit() {
        let run = format!("a{}", "_".repeat(MAX_WILD_RUN));
        let err = LikePattern::compile(&format!("%{run}%"), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("longer than 256 characters"), "{err}");
        assert!(LikePattern::compile(&format!("%{}%", &run[1..]), None).is_ok());
        // Runs without `_` have no limit of their own.
        assert!(LikePattern::compile(&format!("%{}%", "a".repeat(1_000)), None).is_ok());
        let selector = format!("h LIKE '%{run}'");
        let err = parse(&selector).unwrap_err();
        assert_eq!(err.column, 8, "{err:?}");
        assert!(err.message.contains("'_'"), "{err:?}");
    }

    #[test]
    fn like_matching() {
        assert!(like("im%", None, "image"));
        assert!(like("im_ge", None, "image"));
        assert!(like("%age", None, "image"));
        assert!(like("i%e", None, "image"));
        assert!(like("%", None, ""));
        assert!(like("%%", None, "x"));
        assert!(like("", None, ""));
        assert!(!like("", None, "x"));
        assert!(!like("_", None, ""));
        assert!(!like("im%", None, "IMAGE"));
        assert!(!like("%x%", None, "image"));
        assert!(!like("image_", None, "image"));
        // Regex characters are plain.
        assert!(like("a.b", None, "a.b"));
        assert!(!like("a.b", None, "axb"));
        assert!(like("a*b[c]", None, "a*b[c]"));
        // `_` is one character, not one byte.
        assert!(like("__", None, "日本"));
        assert!(!like("_", None, "日本"));
        assert!(like("é%ü", None, "éaaü"));
        // Escapes.
        assert!(like(r"a\_%", Some('\\'), "a_b"));
        assert!(!like(r"a\_%", Some('\\'), "ab"));
        assert!(like("a_%", None, "ab"));
        assert!(like(r"100\%", Some('\\'), "100%"));
        assert!(!like(r"100\%", Some('\\'), "1000"));
        assert!(like(r"a\\b", Some('\\'), r"a\b"));
        assert!(like("a!%b", Some('!'), "a%b"));
        assert!(!like("a!%b", Some('!'), "axb"));
        // Without ESCAPE a backslash is plain.
        assert!(like(r"a\_", None, r"a\x"));
        // Backtracking to the latest `%` only.
        assert!(like("%ab%ab", None, "xabyabab"));
        assert!(!like("%ab%abc", None, "xabyabab"));
        assert_eq!(
            LikePattern::compile("a%%%b", None).unwrap().tokens,
            vec![LikeToken::Char('a'), LikeToken::Any, LikeToken::Char('b')]
        );
    }

    #[test]
    fn like_has_no_backtracking_blow_up() {
        let subject = "a".repeat(20_000);
        let pattern = format!("{}b", "%a".repeat(40));
        let started = std::time::Instant::now();
        assert!(!like(&pattern, None, &subject));
        assert!(like(&format!("{}%", "%a".repeat(40)), None, &subject));
        // O(n·m) is ~10^6 steps; naive recursion would not finish.
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn printing_reads_back() {
        for text in [
            "a = 1",
            "NOT (a = 'it''s') OR b IS NULL",
            r"a LIKE '%''\%' ESCAPE '\' AND b NOT IN ('x', '')",
            "a BETWEEN -1 AND 2.5e10 OR a NOT BETWEEN 1 + 2 AND 3 * 4",
            "-(a + 1) * 2 / (b - 3) > -9223372036854775808",
            "a LIKE 'x' ESCAPE ''''",
            "(a = 1) <> (b = 2)",
            "-(-0) = - -1.5",
            "NULL",
            "TRUE",
        ] {
            let tree = expr(text);
            assert_eq!(expr(&tree.to_string()), tree, "{text:?} printed as {tree}");
        }
    }
}
