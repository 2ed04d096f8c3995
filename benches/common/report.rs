//! Settings from the environment and numbers for the benchmarks' tables.

/// The value of environment variable `name` parsed as `T`, or `default` when it is not
/// set. Panics (naming the variable) on a value that does not parse.
pub fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v}: not a valid value")),
        Err(_) => default,
    }
}

/// The comma-separated parts of environment variable `name`, trimmed and lower-cased
/// (empty parts dropped); empty when it is not set. What the `..._ONLY` settings hold:
/// a row runs when its label contains one of the parts.
pub fn only(name: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_default()
        .split(',')
        .map(|o| o.trim().to_lowercase())
        .filter(|o| !o.is_empty())
        .collect()
}

/// Whether a row labelled `label` runs under the `only` parts (none: every row).
pub fn wanted(only: &[String], label: &str) -> bool {
    only.is_empty() || only.iter().any(|o| label.contains(o.as_str()))
}

/// `n` rounded to a whole number, with thousands separated by commas (`12,345`).
pub fn thousands(n: f64) -> String {
    let digits = format!("{:.0}", n);
    let (sign, digits) = match digits.strip_prefix('-') {
        Some(rest) => ("-", rest.to_string()),
        None => ("", digits),
    };
    let mut out = String::from(sign);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// The median round of each row that ran: `runs[i]` holds row `i`'s rounds (empty when
/// every round failed, and then dropped). Rounds are ranked by `figure`; the median one
/// is kept, with every round's figure, lowest first, stored by `keep_rounds`.
pub fn median_rounds<R: Clone>(
    runs: Vec<Vec<R>>,
    figure: impl Fn(&R) -> f64,
    keep_rounds: impl Fn(&mut R, Vec<f64>),
) -> Vec<R> {
    runs.into_iter()
        .filter(|r| !r.is_empty())
        .map(|mut r| {
            r.sort_by(|a, b| figure(a).total_cmp(&figure(b)));
            let rounds: Vec<f64> = r.iter().map(&figure).collect();
            let mut median = r[r.len() / 2].clone();
            keep_rounds(&mut median, rounds);
            median
        })
        .collect()
}
