// Shared by the build scripts of the three crates (`include!`d): which test variants
// need a service that may be missing, and whether to run them.

/// Tells the crate's tests whether the service behind the environment variable `var`
/// is there: sets `cfg(<cfg>)` when `var` is set and not empty, or when `CI` is set.
/// Without the cfg, the tests that need the service are built as ignored, with the
/// reason (`#[cfg_attr(not(<cfg>), ignore = "...")]`), so `cargo test` counts them
/// as ignored instead of passing tests that did nothing. With `CI` set they always
/// run, so a missing service fails the run (the test panics naming `var`).
///
/// The value is read at build time; cargo reruns the script when `var` or `CI`
/// changes, so setting the variable before `cargo test` is enough.
#[allow(dead_code)]
fn test_service(var: &str, cfg: &str, what: &str) {
    println!("cargo::rerun-if-env-changed={var}");
    println!("cargo::rerun-if-env-changed=CI");
    println!("cargo::rustc-check-cfg=cfg({cfg})");
    let set = std::env::var_os(var).is_some_and(|v| !v.is_empty());
    let ci = std::env::var_os("CI").is_some();
    if set || ci {
        println!("cargo::rustc-cfg={cfg}");
    }
    if ci && !set {
        println!("cargo::warning=CI is set and {var} is not: the {what} tests will fail");
    }
}

/// Sets `cfg(<cfg>)` when the build runs as root (effective uid 0, read from
/// `/proc/self/status`), or when `CI` is set: tests that mount a filesystem (a
/// size-limited tmpfs for disk-full tests) need it, and are built as ignored, with the
/// reason, without it. Under CI they always run, so a CI without root fails them.
#[allow(dead_code)]
fn test_root(cfg: &str) {
    println!("cargo::rerun-if-env-changed=CI");
    println!("cargo::rustc-check-cfg=cfg({cfg})");
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let root = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        == Some("0");
    if root || std::env::var_os("CI").is_some() {
        println!("cargo::rustc-cfg={cfg}");
    }
}
