//! `ebb passwd`: on a terminal it prompts twice without echo (the password never
//! appears in what the terminal shows); from a pipe it reads one line. Either way the
//! hash it prints verifies the password.

use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

/// Runs `ebb passwd` on a new pseudo-terminal (its controlling terminal, as a shell
/// gives it), typing `lines`, each once its prompt is shown and echo is off; returns
/// everything the terminal showed.
fn on_a_terminal(lines: &[&str]) -> (bool, String) {
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty fills two descriptors we then own.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty");
    let io = || unsafe { Stdio::from_raw_fd(libc::dup(slave)) };
    let mut command = Command::new(env!("CARGO_BIN_EXE_ebb"));
    command.arg("passwd").stdin(io()).stdout(io()).stderr(io());
    // SAFETY: setsid and TIOCSCTTY between fork and exec make the terminal the child's
    // controlling terminal (rpassword reads /dev/tty).
    unsafe {
        command.pre_exec(|| {
            libc::setsid();
            libc::ioctl(0, libc::TIOCSCTTY, 0);
            Ok(())
        });
    }
    let mut child = command.spawn().expect("ebb passwd runs");
    // Every copy of the terminal's other end closes here (the command holds three):
    // once the child exits, reading the master then ends instead of waiting.
    drop(command);
    unsafe { libc::close(slave) };
    let mut terminal = unsafe { std::fs::File::from_raw_fd(master) };
    // What the terminal shows, read as it comes (reading ends with EIO once the child
    // is gone).
    let shown = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let reader = {
        let (shown, mut master) = (shown.clone(), terminal.try_clone().unwrap());
        std::thread::spawn(move || {
            let mut buf = [0u8; 1024];
            while let Ok(n @ 1..) = master.read(&mut buf) {
                shown.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    for (i, line) in lines.iter().enumerate() {
        // Typed only once the i-th prompt is shown and echo is off: typed earlier it
        // would be echoed by the terminal, not by the program.
        loop {
            let prompts = {
                let text = shown.lock().unwrap();
                String::from_utf8_lossy(&text).matches(": ").count()
            };
            let mut mode: libc::termios = unsafe { std::mem::zeroed() };
            let echo = unsafe { libc::tcgetattr(master, &mut mode) } == 0
                && mode.c_lflag & libc::ECHO != 0;
            if prompts > i && !echo {
                break;
            }
            if std::time::Instant::now() > deadline || child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        terminal.write_all(format!("{line}\n").as_bytes()).unwrap();
    }
    // A child that waits for input forever would hang the run: killed at the deadline.
    let ok = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.success();
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            break false;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    drop(terminal);
    reader.join().unwrap();
    let shown = String::from_utf8_lossy(&shown.lock().unwrap()).into_owned();
    (ok, shown)
}

fn hash_in(text: &str) -> &str {
    text.lines()
        .map(str::trim)
        .find(|l| l.starts_with("$argon2id$"))
        .unwrap_or_else(|| panic!("no hash in {text:?}"))
}

#[test]
fn on_a_terminal_it_asks_twice_without_echo() {
    let (ok, shown) = on_a_terminal(&["hunter2", "hunter2"]);
    assert!(ok, "{shown}");
    assert!(
        shown.contains("password: ") && shown.contains("again: "),
        "{shown}"
    );
    assert!(
        !shown.contains("hunter2"),
        "the password was echoed: {shown}"
    );
    assert!(ebb::auth::verify_password("hunter2", hash_in(&shown)));

    let (ok, shown) = on_a_terminal(&["hunter2", "hunter3"]);
    assert!(!ok, "{shown}");
    assert!(shown.contains("the two passwords differ"), "{shown}");
}

#[test]
fn from_a_pipe_it_reads_one_line() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ebb"))
        .arg("passwd")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"s3cret\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("password:"), "no prompt on a pipe: {text}");
    assert!(ebb::auth::verify_password("s3cret", hash_in(&text)));
}
