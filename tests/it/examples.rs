//! The `examples/` folder runs: each example, built by `cargo test` (which builds every
//! example), is started as a user would start it and driven to its end: the tokio
//! service and the axum handler stop on Ctrl-C (SIGINT) with a graceful shutdown, the
//! worker pool ends on its own. A missing or stale example binary fails the test and
//! says how to build it.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use ebb::test_util::PATIENCE;

/// The example's binary, built after its source changed.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary");
    // target/debug/deps/it-… → target/debug/examples/NAME
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/debug")
        .join("examples")
        .join(name);
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(format!("{name}.rs"));
    let built = std::fs::metadata(&path).and_then(|m| m.modified());
    let changed = std::fs::metadata(&source)
        .and_then(|m| m.modified())
        .unwrap();
    match built {
        Ok(built) if built >= changed => path,
        _ => panic!(
            "{} is missing or older than {}: `cargo test` (without --test) builds the examples, or `cargo build --examples`",
            path.display(),
            source.display()
        ),
    }
}

/// Starts `name`; its stdout lines arrive on the receiver.
fn start(name: &str, args: &[&str], env: &[(&str, &str)]) -> (Child, mpsc::Receiver<String>) {
    let mut child = Command::new(example(name))
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the example starts");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

/// The first line with `prefix` (the lines before it are dropped); panics if none
/// comes within [`PATIENCE`] of the last.
fn line_with(lines: &mpsc::Receiver<String>, prefix: &str) -> String {
    loop {
        match lines.recv_timeout(PATIENCE) {
            Ok(line) if line.starts_with(prefix) => return line,
            Ok(_) => continue,
            Err(e) => panic!("no line starting with {prefix:?}: {e}"),
        }
    }
}

/// Sends SIGINT (Ctrl-C) and waits for a successful exit ([`PATIENCE`] at most).
fn interrupt_and_wait(mut child: Child) {
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let deadline = std::time::Instant::now() + PATIENCE;
    while std::time::Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "exited with {status}");
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    panic!("did not exit within {PATIENCE:?} of Ctrl-C");
}

#[test]
fn the_tokio_service_works_and_stops_on_ctrl_c() {
    let (child, lines) = start(
        "tokio_service",
        &[],
        &[("EBB_EXAMPLE_STORE", "sqlite::memory:")],
    );
    line_with(&lines, "ready");
    assert_eq!(line_with(&lines, "worked on"), "worked on job 0");
    assert_eq!(line_with(&lines, "worked on"), "worked on job 1");
    // The consumer prints a job before acking it: once it works on job 2, the acks of
    // jobs 0 and 1 have returned (a Ctrl-C right after job 1 could refuse its ack).
    assert_eq!(line_with(&lines, "worked on"), "worked on job 2");
    interrupt_and_wait(child);
    let summary = line_with(&lines, "sent ");
    let numbers: Vec<u64> = summary
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    assert!(
        numbers.len() == 2 && numbers[0] >= 2 && numbers[1] >= 2,
        "{summary}"
    );
    assert!(numbers[1] <= numbers[0], "{summary}");
}

#[test]
fn the_worker_pool_does_each_job_once() {
    let (mut child, lines) = start("worker_pool", &["3", "300"], &[]);
    assert_eq!(line_with(&lines, "300 jobs"), "300 jobs done by 3 workers");
    assert!(child.wait().unwrap().success());
}

/// One HTTP/1.1 request on a fresh connection; the whole answer.
fn http(addr: &str, request: &str) -> String {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

#[test]
fn the_axum_handler_publishes_and_refuses_bad_names() {
    let (child, lines) = start("axum_publish", &[], &[("EBB_EXAMPLE_HTTP", "127.0.0.1:0")]);
    let listening = line_with(&lines, "listening on http://");
    let addr = listening
        .trim_start_matches("listening on http://")
        .to_string();
    let post = |path: &str, body: &str| {
        http(
            &addr,
            &format!(
                "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            ),
        )
    };
    let answer = post("/queues/jobs", "hello");
    assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
    assert!(answer.contains("ID:ebb-"), "{answer}");
    let refused = post("/queues/a.*", "no");
    assert!(refused.starts_with("HTTP/1.1 400"), "{refused}");
    assert!(refused.contains("wildcards"), "{refused}");
    let stats = http(
        &addr,
        "GET /queues/jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert!(stats.contains("enqueued 1 "), "{stats}");
    interrupt_and_wait(child);
    line_with(&lines, "shut down");
}
