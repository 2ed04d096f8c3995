//! `ebb stat`: reads a running broker's metrics endpoint and prints a table.
//!
//! It fetches `http://ADDR/metrics` ([`fetch`]), parses Prometheus' text format
//! ([`parse`]: a small parser for the sample lines, comments skipped), reads Ebb's
//! metrics back into a [`BrokerStats`] ([`from_samples`]) and renders a header block
//! (memory, store and temp usage, blocked producers) and one row per destination
//! ([`render`]). The metric names are the ones [`crate::metrics`] writes.
//!
//! `ebb stat --watch` reads again every `--interval` seconds and shows rates
//! (messages per second) and depths as they move ([`watch_frame`]), computed as the
//! console's charts are, by a [`crate::history::History`] of its own.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::metrics::names::*;
use crate::stats::{BrokerStats, DestinationKind, DestinationStats, UsageStats};

/// The `ebb stat` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct StatArgs {
    /// The broker's metrics address, host:port.
    #[arg(long, value_name = "ADDR", default_value = super::DEFAULT_METRICS_ADDR)]
    pub metrics: String,
    /// Keep reading and show rates (messages per second) and how depths move, as the
    /// console's charts do, redrawn every `--interval`; Ctrl-C stops.
    #[arg(long)]
    pub watch: bool,
    /// Seconds between two readings with `--watch` (1 to 3600).
    #[arg(long, value_name = "SECONDS", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub interval: u64,
    /// With `--watch`, stop after this many frames (default: until Ctrl-C).
    #[arg(long, value_name = "N")]
    pub frames: Option<u64>,
    /// With `--watch`, list only destinations whose name holds this text (any case).
    #[arg(long, value_name = "TEXT", default_value = "")]
    pub filter: String,
}

/// Runs `ebb stat`: prints the table for the broker at `--metrics` ([`run`]), or,
/// with `--watch`, a frame of rates every `--interval` ([`watch_frame`]).
///
/// Errors: as [`run`]; with `--watch`, a reading that fails ends it.
pub async fn execute(args: &StatArgs) -> anyhow::Result<()> {
    if !args.watch {
        print!("{}", run(&args.metrics).await?);
        return Ok(());
    }
    use std::io::{IsTerminal, Write};
    let step = Duration::from_secs(args.interval);
    // Every frame is a point, however far apart the broker's two readings fall
    // (they come every second, so 5 s of frames may be 4.2 s of readings): the
    // history's step is its shortest.
    let history = crate::history::History::new(Duration::ZERO);
    let terminal = std::io::stdout().is_terminal();
    let mut tick = tokio::time::interval(step);
    // A slow read delays the next frame; missed ticks do not fire at once.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_read = None;
    for frame in 0.. {
        if args.frames.is_some_and(|n| frame >= n) {
            break;
        }
        tick.tick().await;
        // The broker refreshes its values every second: until they change, read
        // again (at most 2 s), so that a frame never divides by the same values.
        let (mut stats, mut read_at) = read_timed(&args.metrics).await?;
        for _ in 0..8 {
            if read_at.is_none() || read_at != last_read {
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
            (stats, read_at) = read_timed(&args.metrics).await?;
        }
        last_read = read_at;
        let now_ms = read_at.unwrap_or_else(crate::history::now_ms);
        let text = watch_frame(&history, &stats, now_ms, &args.filter);
        let mut out = std::io::stdout().lock();
        match terminal {
            // Redraw in place.
            true => write!(out, "\x1b[2J\x1b[H{text}")?,
            false => writeln!(out, "{text}")?,
        }
        out.flush()?;
    }
    Ok(())
}

/// Writes `header` and `rows` to `out` as aligned columns, two spaces apart: the
/// first left-aligned, the others right-aligned (numbers), each as wide as its
/// widest cell; one line each, trailing spaces trimmed.
fn aligned<const N: usize>(out: &mut String, header: [&str; N], rows: &[[String; N]]) {
    use std::fmt::Write;
    let mut widths = header.map(str::len);
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut line = |cells: [&str; N]| {
        let mut text = format!("{:<w$}", cells[0], w = widths[0]);
        for (cell, w) in cells.iter().zip(widths).skip(1) {
            let _ = write!(text, "  {cell:>w$}");
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(header);
    for row in rows {
        line(row.each_ref().map(String::as_str));
    }
}

/// `804 messages in 2 destinations`, singular where it is one.
fn waiting_line(messages: u64, destinations: u64) -> String {
    let s = |n: u64| if n == 1 { "" } else { "s" };
    format!(
        "{messages} message{} in {destinations} destination{}",
        s(messages),
        s(destinations)
    )
}

/// Rows a `--watch` frame lists.
pub const WATCH_ROWS: usize = 20;

/// One `ebb stat --watch` frame: takes `stats` (read at `now_ms`) into `history`,
/// which keeps the reading before it, and renders usage, the broker's rates over the
/// last interval (messages per second: enqueued, delivered, dequeued, expired,
/// dead-lettered), the messages waiting, then the
/// [`WATCH_ROWS`] busiest destinations whose name holds `filter` (by enqueue rate,
/// then depth) with their own.
/// The first frame has no rates yet and says so; the rates are over the time between
/// the two readings (`now_ms` and the one before), as measured.
pub fn watch_frame(
    history: &crate::history::History,
    stats: &BrokerStats,
    now_ms: i64,
    filter: &str,
) -> String {
    use std::fmt::Write;
    let before = history.last_reading_ms();
    let recorded = history.record(stats, 0, now_ms);
    let u = &stats.usage;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "memory   {}",
        usage_line(u.memory_bytes, u.memory_limit_bytes)
    );
    let _ = writeln!(
        out,
        "store    {}",
        usage_line(u.store_bytes, u.store_limit_bytes)
    );
    let waiting = stats.totals.queue_size;
    // Seconds between the two readings the rates come from.
    let seconds = before
        .filter(|_| recorded)
        .map(|before| (now_ms - before) as f64 / 1000.0);
    let Some(seconds) = seconds else {
        let why = match recorded {
            true => "from the next frame".to_string(),
            false => "no new reading since the last frame".to_string(),
        };
        let _ = writeln!(
            out,
            "rates    {why}\nwaiting  {}",
            waiting_line(waiting, stats.destinations_total)
        );
        return out;
    };
    let b = history.broker(history.step(), now_ms);
    let last = |v: &[f32]| v.last().copied().unwrap_or(0.0);
    let _ = writeln!(
        out,
        "rates    per second over the last {seconds:.1} s: enqueued {:.1}, delivered {:.1}, dequeued {:.1}, expired {:.1}, dead-lettered {:.1}",
        last(&b.columns.enqueued_per_s),
        last(&b.columns.delivered_per_s),
        last(&b.columns.dequeued_per_s),
        last(&b.columns.expired_per_s),
        last(&b.columns.dead_lettered_per_s),
    );
    let _ = writeln!(
        out,
        "waiting  {}",
        waiting_line(waiting, stats.destinations_total)
    );
    out.push('\n');
    let page = history.table(
        filter,
        crate::history::SortBy::EnqueuedRate,
        true,
        0,
        WATCH_ROWS,
        |_| true,
    );
    let header = ["DESTINATION", "QUEUE SIZE", "IN/S", "OUT/S", "CONSUMERS"];
    let rows: Vec<[String; 5]> = page
        .rows
        .iter()
        .map(|r| {
            [
                r.destination.clone(),
                r.depth.to_string(),
                format!("{:.1}", r.enqueued_per_s),
                format!("{:.1}", r.dequeued_per_s),
                r.consumers.to_string(),
            ]
        })
        .collect();
    aligned(&mut out, header, &rows);
    if page.matched > rows.len() {
        let _ = writeln!(
            out,
            "({} of {} destinations shown)",
            rows.len(),
            page.matched
        );
    }
    out
}

/// One sample line: `name{label="value",...} value [timestamp]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The metric name (for a histogram, with its `_bucket`, `_sum`, `_count` suffix).
    pub name: String,
    /// Labels in the order written, values unescaped.
    pub labels: Vec<(String, String)>,
    /// The value as written (`NaN`, `+Inf` and `-Inf` included).
    pub value: f64,
}

impl Sample {
    /// The value of label `name`, if the sample has it.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses Prometheus' text exposition format (version 0.0.4): every sample line, in
/// order; `#` lines (HELP, TYPE, comments) and blank lines are skipped, a timestamp
/// after the value is ignored. Values may be `NaN`, `+Inf`, `-Inf`.
///
/// Errors: `line N: why` for the first line that is not a sample.
pub fn parse(text: &str) -> anyhow::Result<Vec<Sample>> {
    let mut samples = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        samples.push(parse_line(line).map_err(|why| anyhow::anyhow!("line {}: {why}", i + 1))?);
    }
    Ok(samples)
}

fn parse_line(line: &str) -> anyhow::Result<Sample> {
    let name_end = line
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(anyhow::anyhow!("no metric name in `{line}`"));
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        let (parsed, after) = parse_labels(after)?;
        labels = parsed;
        rest = after;
    }
    let mut fields = rest.split_whitespace();
    let value = fields
        .next()
        .ok_or_else(|| anyhow::anyhow!("no value after `{name}`"))?;
    let value = parse_value(value)?;
    if let Some(timestamp) = fields.next() {
        timestamp
            .parse::<i64>()
            .map_err(|_| anyhow::anyhow!("bad timestamp `{timestamp}`"))?;
    }
    if let Some(extra) = fields.next() {
        return Err(anyhow::anyhow!("unexpected `{extra}` after the value"));
    }
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// Parses `a="x",b="y"}` (the text after `{`); returns the labels and what follows `}`.
#[allow(clippy::type_complexity)]
fn parse_labels(mut s: &str) -> anyhow::Result<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        s = s.trim_start();
        if let Some(after) = s.strip_prefix('}') {
            return Ok((labels, after));
        }
        let eq = s
            .find('=')
            .ok_or_else(|| anyhow::anyhow!("a label without `=`"))?;
        let name = s[..eq].trim();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(anyhow::anyhow!("bad label name `{name}`"));
        }
        s = s[eq + 1..].trim_start();
        s = s
            .strip_prefix('"')
            .ok_or_else(|| anyhow::anyhow!("label `{name}` has no quoted value"))?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err(anyhow::anyhow!("label `{name}`: unterminated value")),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    other => {
                        return Err(anyhow::anyhow!(
                            "label `{name}`: bad escape `\\{}`",
                            other.map_or(String::new(), |(_, c)| c.to_string())
                        ))
                    }
                },
                Some((_, c)) => value.push(c),
            }
        };
        labels.push((name.to_string(), value));
        s = s[end + 1..].trim_start();
        if let Some(after) = s.strip_prefix(',') {
            s = after;
        } else if !s.starts_with('}') {
            return Err(anyhow::anyhow!("expected `,` or `}}` after label `{name}`"));
        }
    }
}

fn parse_value(text: &str) -> anyhow::Result<f64> {
    match text {
        "+Inf" | "Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => text
            .parse()
            .map_err(|_| anyhow::anyhow!("bad value `{text}`")),
    }
}

/// A sample value as a count (negative and NaN read as 0).
fn count(value: f64) -> u64 {
    if value.is_nan() || value <= 0.0 {
        0
    } else {
        value as u64
    }
}

/// Reads Ebb's metrics back into a snapshot. `None` when `samples` has none of Ebb's
/// broker-level metrics (the endpoint is not an Ebb broker's). Destinations come
/// sorted by store key; ones whose key is neither `topic://` nor `queue://` are left
/// out.
pub fn from_samples(samples: &[Sample]) -> Option<BrokerStats> {
    let mut usage = UsageStats::default();
    let mut total = None;
    // The broker's totals, when the endpoint publishes them (older brokers did not:
    // then the sums of the destinations listed).
    let mut totals: Option<crate::stats::DestinationTotals> = None;
    let mut seen = false;
    let mut destinations: BTreeMap<String, DestinationStats> = BTreeMap::new();
    for s in samples {
        let v = count(s.value);
        let field = match s.name.as_str() {
            MEMORY_USAGE_BYTES => &mut usage.memory_bytes,
            MEMORY_LIMIT_BYTES => &mut usage.memory_limit_bytes,
            STORE_USAGE_BYTES => &mut usage.store_bytes,
            STORE_LIMIT_BYTES => &mut usage.store_limit_bytes,
            TEMP_USAGE_BYTES => &mut usage.temp_bytes,
            TEMP_LIMIT_BYTES => &mut usage.temp_limit_bytes,
            PRODUCERS_BLOCKED => &mut usage.blocked_producers,
            PROCESS_RESIDENT_BYTES => &mut usage.process_resident_bytes,
            HOUSEKEEPING_PAGES_WAITING => &mut usage.housekeeping_pages_waiting,
            HOUSEKEEPING_LAG_SECONDS => {
                seen = true;
                usage.housekeeping_lag_ms = (s.value * 1000.0).max(0.0) as u64;
                continue;
            }
            PROCESS_PEAK_RESIDENT_BYTES => &mut usage.process_peak_resident_bytes,
            DESTINATIONS => {
                seen = true;
                total = Some(v);
                continue;
            }
            MESSAGES_WAITING | MESSAGES_IN_FLIGHT | CONSUMERS_TOTAL | PRODUCERS_TOTAL
            | DESTINATIONS_ASLEEP => {
                let t = totals.get_or_insert_with(Default::default);
                *match s.name.as_str() {
                    MESSAGES_WAITING => &mut t.queue_size,
                    MESSAGES_IN_FLIGHT => &mut t.in_flight,
                    CONSUMERS_TOTAL => &mut t.consumers,
                    DESTINATIONS_ASLEEP => &mut t.asleep,
                    _ => &mut t.producers,
                } = v;
                continue;
            }
            _ => {
                destination_sample(&mut destinations, s, v);
                continue;
            }
        };
        seen = true;
        *field = v;
    }
    if !seen {
        return None;
    }
    let destinations: Vec<DestinationStats> = destinations.into_values().collect();
    Some(BrokerStats {
        usage,
        destinations_total: total.unwrap_or(destinations.len() as u64),
        totals: totals.unwrap_or_else(|| crate::stats::DestinationTotals::of(&destinations)),
        destinations,
        scheduler: Default::default(),
    })
}

fn destination_sample(destinations: &mut BTreeMap<String, DestinationStats>, s: &Sample, v: u64) {
    let (Some(key), true) = (s.label(DESTINATION_LABEL), is_destination_metric(&s.name)) else {
        return;
    };
    let Some(kind) = DestinationKind::of_container(key) else {
        return;
    };
    let d = destinations
        .entry(key.to_string())
        .or_insert_with(|| empty_destination(key, kind));
    let field = match s.name.as_str() {
        QUEUE_SIZE => &mut d.queue_size,
        IN_FLIGHT => &mut d.in_flight,
        CONSUMERS => &mut d.consumers,
        PRODUCERS => &mut d.producers,
        DESTINATION_MEMORY_BYTES => &mut d.memory_bytes,
        DESTINATION_PRODUCERS_BLOCKED => &mut d.blocked_producers,
        ENQUEUED_TOTAL => &mut d.enqueued_total,
        DEQUEUED_TOTAL => &mut d.dequeued_total,
        DELIVERED_TOTAL => &mut d.delivered_total,
        EXPIRED_TOTAL => &mut d.expired_total,
        DEAD_LETTERED_TOTAL => &mut d.dead_lettered_total,
        MAX_EXPIRY_PAGE_ROWS => &mut d.max_expiry_page_rows,
        EXPIRY_RUNS_TOTAL => &mut d.expiry_runs_total,
        _ => &mut d.expiry_pages_total,
    };
    *field = v;
}

/// The per-destination metrics the table shows (the histogram's series are not).
fn is_destination_metric(name: &str) -> bool {
    [
        QUEUE_SIZE,
        IN_FLIGHT,
        CONSUMERS,
        PRODUCERS,
        DESTINATION_MEMORY_BYTES,
        DESTINATION_PRODUCERS_BLOCKED,
        ENQUEUED_TOTAL,
        DEQUEUED_TOTAL,
        DELIVERED_TOTAL,
        EXPIRED_TOTAL,
        DEAD_LETTERED_TOTAL,
        EXPIRY_PAGES_TOTAL,
        MAX_EXPIRY_PAGE_ROWS,
        EXPIRY_RUNS_TOTAL,
    ]
    .contains(&name)
}

fn empty_destination(key: &str, kind: DestinationKind) -> DestinationStats {
    DestinationStats {
        destination: key.to_string(),
        kind,
        queue_size: 0,
        in_flight: 0,
        consumers: 0,
        producers: 0,
        enqueued_total: 0,
        dequeued_total: 0,
        delivered_total: 0,
        expired_total: 0,
        dead_lettered_total: 0,
        expiry_pages_total: 0,
        memory_bytes: 0,
        blocked_producers: 0,
        max_expiry_page_rows: 0,
        expiry_runs_total: 0,
        asleep: false,
        sleeps_total: 0,
    }
}

/// `1536` → `1.5 KiB` (powers of 1024).
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// `used of limit (p %)`, or `used (no limit)`.
fn usage_line(used: u64, limit: u64) -> String {
    if limit == 0 {
        format!("{} (no limit)", human_bytes(used))
    } else {
        format!(
            "{} of {} ({:.1} %)",
            human_bytes(used),
            human_bytes(limit),
            crate::stats::percent(used, limit)
        )
    }
}

/// The table `ebb stat` prints: a header block with usage and blocked producers, then
/// one row per destination (queue size, in flight, consumers, producers, enqueued,
/// dequeued, expired, dead-lettered), numbers right-aligned. Ends with a newline.
pub fn render(stats: &BrokerStats) -> String {
    use std::fmt::Write;
    let u = &stats.usage;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "memory             {}",
        usage_line(u.memory_bytes, u.memory_limit_bytes)
    );
    let _ = writeln!(
        out,
        "store              {}",
        usage_line(u.store_bytes, u.store_limit_bytes)
    );
    let _ = writeln!(
        out,
        "temp               {}",
        usage_line(u.temp_bytes, u.temp_limit_bytes)
    );
    let _ = writeln!(out, "blocked producers  {}", u.blocked_producers);
    let _ = writeln!(
        out,
        "housekeeping       lag {} ms, {} pages waiting",
        u.housekeeping_lag_ms, u.housekeeping_pages_waiting
    );
    let _ = writeln!(out, "destinations       {}", stats.destinations_total);
    out.push('\n');
    if stats.destinations.is_empty() {
        if stats.destinations_total > 0 {
            // `[http] max_destination_series = 0`: running, but none listed.
            let _ = writeln!(
                out,
                "(0 of {} destinations shown: the endpoint lists none, see [http] max_destination_series)",
                stats.destinations_total
            );
        } else {
            out.push_str("no destination in use\n");
        }
        return out;
    }
    let header = [
        "DESTINATION",
        "QUEUE SIZE",
        "IN FLIGHT",
        "CONSUMERS",
        "PRODUCERS",
        "ENQUEUED",
        "DEQUEUED",
        "EXPIRED",
        "DLQ",
    ];
    let rows: Vec<[String; 9]> = stats
        .destinations
        .iter()
        .map(|d| {
            [
                d.destination.clone(),
                d.queue_size.to_string(),
                d.in_flight.to_string(),
                d.consumers.to_string(),
                d.producers.to_string(),
                d.enqueued_total.to_string(),
                d.dequeued_total.to_string(),
                d.expired_total.to_string(),
                d.dead_lettered_total.to_string(),
            ]
        })
        .collect();
    aligned(&mut out, header, &rows);
    let shown = stats.destinations.len() as u64;
    if stats.destinations_total > shown {
        let _ = writeln!(
            out,
            "({shown} of {} destinations shown)",
            stats.destinations_total
        );
    }
    out
}

/// The body of `GET http://ADDR/metrics` (ADDR is `host:port`). Blocking I/O runs on
/// tokio's blocking pool, so the caller's runtime keeps running (also a broker in the
/// same process). Times out after 2 s to connect and 10 s in all.
///
/// Errors: "no broker metrics at ADDR: start ebb serve with --metrics ADDR" (with the
/// cause) when nothing answers there; the HTTP status when something else does.
pub async fn fetch(addr: &str) -> anyhow::Result<String> {
    let addr = addr.to_string();
    tokio::task::spawn_blocking(move || get(&addr)).await?
}

fn get(addr: &str) -> anyhow::Result<String> {
    let url = format!("http://{addr}/metrics");
    let agent = ureq::AgentBuilder::new()
        .timeout_connect(Duration::from_secs(2))
        .timeout(Duration::from_secs(10))
        .redirects(0)
        .build();
    match agent.get(&url).call() {
        Ok(response) => Ok(response.into_string()?),
        Err(ureq::Error::Status(code, response)) => anyhow::bail!(
            "{url} answered {code} {}: is ebb serve's metrics endpoint there?",
            response.status_text()
        ),
        Err(ureq::Error::Transport(e)) => anyhow::bail!(
            "no broker metrics at {addr}: start ebb serve with --metrics {addr} ({e})"
        ),
    }
}

/// `ebb stat`: fetches, parses and renders the table for the broker at `addr`.
///
/// Errors: as [`fetch`]; a parse error names the line; an endpoint without Ebb's
/// metrics is refused ("ADDR serves no Ebb metrics").
pub async fn run(addr: &str) -> anyhow::Result<String> {
    Ok(render(&read(addr).await?))
}

/// The broker at `addr` as its metrics say, destinations sorted by key.
///
/// Errors: as [`run`].
pub async fn read(addr: &str) -> anyhow::Result<BrokerStats> {
    Ok(read_timed(addr).await?.0)
}

/// [`read`], with when the broker's values were read (epoch ms, from
/// `ebb_stats_timestamp_seconds`; `None` from a broker without it).
///
/// Errors: as [`run`].
pub async fn read_timed(addr: &str) -> anyhow::Result<(BrokerStats, Option<i64>)> {
    let text = fetch(addr).await?;
    let samples =
        parse(&text).map_err(|why| anyhow::anyhow!("cannot read the metrics at {addr}: {why}"))?;
    let read_at = samples
        .iter()
        .find(|s| s.name == STATS_TIMESTAMP_SECONDS)
        .map(|s| (s.value * 1000.0) as i64);
    let stats = from_samples(&samples).ok_or_else(|| {
        anyhow::anyhow!("{addr} serves no Ebb metrics: is it ebb serve's --metrics address?")
    })?;
    Ok((stats, read_at))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `ebb serve --metrics` renders, trimmed: HELP and TYPE lines, escaped label
    /// values, a histogram whose series must not become destinations.
    const SCRAPE: &str = r#"# HELP ebb_memory_usage_bytes Bytes of messages held in memory
# TYPE ebb_memory_usage_bytes gauge
ebb_memory_usage_bytes 1572864
ebb_memory_limit_bytes 67108864
ebb_memory_usage_ratio 0.0234375
ebb_store_usage_bytes 0
ebb_store_limit_bytes 0
ebb_temp_usage_bytes 0
ebb_temp_limit_bytes 0
ebb_producers_blocked 2
ebb_destinations 3

# TYPE ebb_destination_queue_size gauge
ebb_destination_queue_size{destination="topic://orders"} 5
ebb_destination_queue_size{destination="queue://jobs"} 120
ebb_destination_in_flight{destination="queue://jobs"} 7
ebb_destination_consumers{destination="topic://orders"} 1
ebb_destination_producers{destination="queue://jobs"} 3
ebb_destination_enqueued_total{destination="topic://orders"} 8
ebb_destination_dequeued_total{destination="topic://orders"} 0
ebb_destination_expired_total{destination="topic://orders"} 3
ebb_destination_dead_lettered_total{destination="queue://jobs"} 4
ebb_expiry_pages_total{destination="topic://orders"} 1
ebb_destination_enqueued_total{destination="topic://a \"quoted\" \\ name"} 1
ebb_expiry_page_rows_bucket{destination="topic://orders",le="10"} 1
ebb_expiry_page_rows_bucket{destination="topic://orders",le="+Inf"} 1
ebb_expiry_page_rows_sum{destination="topic://orders"} 3
ebb_expiry_page_rows_count{destination="topic://orders"} 1
other_metric{destination="x"} 9 1700000000000
"#;

    #[test]
    fn watch_frames_show_rates_between_readings() {
        let history = crate::history::History::new(Duration::from_secs(5));
        let at = |enqueued: u64, dequeued: u64| {
            let mut stats = from_samples(&parse(SCRAPE).unwrap()).unwrap();
            let jobs = stats
                .destinations
                .iter_mut()
                .find(|d| d.destination == "queue://jobs")
                .unwrap();
            jobs.enqueued_total = enqueued;
            jobs.dequeued_total = dequeued;
            stats
        };
        let first = watch_frame(&history, &at(100, 0), 0, "");
        assert!(first.contains("rates    from the next frame"), "{first}");
        let second = watch_frame(&history, &at(150, 20), 5_000, "");
        assert!(
            second.contains("over the last 5.0 s: enqueued 10.0, delivered 0.0, dequeued 4.0"),
            "{second}"
        );
        let jobs = second
            .lines()
            .find(|l| l.starts_with("queue://jobs"))
            .unwrap();
        let cells: Vec<&str> = jobs.split_whitespace().collect();
        assert_eq!(
            cells,
            ["queue://jobs", "120", "10.0", "4.0", "0"],
            "{second}"
        );
        let again = watch_frame(&history, &at(150, 20), 5_000, "");
        assert!(
            again.contains("rates    no new reading since the last frame"),
            "{again}"
        );
        // The busiest destination comes first.
        let table = second.lines().skip_while(|l| !l.starts_with("DESTINATION"));
        assert!(
            table.clone().nth(1).unwrap().starts_with("queue://jobs"),
            "{second}"
        );
    }

    #[test]
    fn parses_samples_labels_and_escapes() {
        let samples = parse(SCRAPE).unwrap();
        assert_eq!(samples.len(), 25);
        assert_eq!(samples[0].name, "ebb_memory_usage_bytes");
        assert_eq!(samples[0].value, 1_572_864.0);
        let quoted = samples
            .iter()
            .find(|s| s.label("destination").is_some_and(|d| d.contains("quoted")))
            .unwrap();
        assert_eq!(
            quoted.label("destination"),
            Some(r#"topic://a "quoted" \ name"#)
        );
        let bucket = samples
            .iter()
            .find(|s| s.label("le") == Some("+Inf"))
            .unwrap();
        assert_eq!(bucket.labels.len(), 2);
        assert_eq!(samples.last().unwrap().value, 9.0, "timestamp ignored");
    }

    #[test]
    fn odd_but_valid_lines_parse() {
        let s = parse("m{a=\"1\",} NaN\nm{ a = \"x\\ny\" , b=\"\" } -Inf\nm +Inf\n").unwrap();
        assert!(s[0].value.is_nan());
        assert_eq!(s[0].labels, vec![("a".into(), "1".into())]);
        assert_eq!(s[1].label("a"), Some("x\ny"));
        assert_eq!(s[1].label("b"), Some(""));
        assert_eq!(s[2].value, f64::INFINITY);
        assert_eq!(count(f64::NAN), 0);
        assert_eq!(count(-1.0), 0);
    }

    #[test]
    fn bad_lines_name_the_line() {
        for (text, why) in [
            ("ok 1\nbroken", "line 2: no value"),
            ("m{a=\"x} 1", "unterminated"),
            ("m{a=x} 1", "no quoted value"),
            ("m{a=\"x\" b=\"y\"} 1", "expected `,`"),
            ("m{a=\"\\t\"} 1", "bad escape"),
            ("m one", "bad value `one`"),
            ("m 1 2 3", "unexpected `3`"),
            ("{a=\"x\"} 1", "no metric name"),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(why), "{text:?}: {e}");
        }
    }

    #[test]
    fn samples_read_back_into_stats() {
        let stats = from_samples(&parse(SCRAPE).unwrap()).unwrap();
        assert_eq!(stats.usage.memory_bytes, 1_572_864);
        assert_eq!(stats.usage.memory_limit_bytes, 64 << 20);
        assert_eq!(stats.usage.blocked_producers, 2);
        assert_eq!(stats.destinations_total, 3);
        let keys: Vec<&str> = stats
            .destinations
            .iter()
            .map(|d| d.destination.as_str())
            .collect();
        assert_eq!(
            keys,
            [
                "queue://jobs",
                r#"topic://a "quoted" \ name"#,
                "topic://orders"
            ]
        );
        let orders = &stats.destinations[2];
        assert_eq!(orders.kind, DestinationKind::TOPIC);
        assert_eq!(
            (
                orders.queue_size,
                orders.enqueued_total,
                orders.expired_total
            ),
            (5, 8, 3)
        );
        assert_eq!(orders.expiry_pages_total, 1);
        assert_eq!(stats.destinations[0].kind, DestinationKind::QUEUE);
        assert!(from_samples(&parse("other 1\n").unwrap()).is_none());
    }

    #[test]
    fn renders_a_table() {
        let stats = from_samples(&parse(SCRAPE).unwrap()).unwrap();
        let expected = "\
memory             1.5 MiB of 64.0 MiB (2.3 %)
store              0 B (no limit)
temp               0 B (no limit)
blocked producers  2
housekeeping       lag 0 ms, 0 pages waiting
destinations       3

DESTINATION                QUEUE SIZE  IN FLIGHT  CONSUMERS  PRODUCERS  ENQUEUED  DEQUEUED  EXPIRED  DLQ
queue://jobs                      120          7          0          3         0         0        0    4
topic://a \"quoted\" \\ name           0          0          0          0         1         0        0    0
topic://orders                      5          0          1          0         8         0        3    0
";
        assert_eq!(render(&stats), expected);
    }

    #[test]
    fn cut_lists_and_empty_brokers_say_so() {
        let mut stats = from_samples(&parse(SCRAPE).unwrap()).unwrap();
        stats.destinations_total = 10;
        assert!(render(&stats).ends_with("(3 of 10 destinations shown)\n"));
        stats.destinations.clear();
        assert!(
            render(&stats).ends_with(
                "\n(0 of 10 destinations shown: the endpoint lists none, see [http] max_destination_series)\n"
            ),
            "{}",
            render(&stats)
        );
        stats.destinations_total = 0;
        assert!(render(&stats).ends_with("\nno destination in use\n"));
    }

    #[test]
    fn bytes_read_as_people_write_them() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }
}
