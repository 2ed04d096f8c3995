//! `ebb passwd`: reads a password and prints its argon2 hash, for `password_hash` in
//! the configuration's `[[users]]` ([`crate::auth::hash_password`]). On a terminal it
//! asks twice, without echo (the password stays off the screen, the shell's history
//! and the process list); otherwise it reads one line from standard input
//! (`echo "$PASS" | ebb passwd`, a pipe from a secret store).

use std::io::IsTerminal;

/// Runs `ebb passwd`: the password from the terminal (prompted twice, not echoed) or
/// one line from standard input (its line ending removed), hashed.
///
/// Errors: the password cannot be read, is empty, or the two entries differ; hashing
/// fails.
pub fn execute() -> anyhow::Result<()> {
    let password = if std::io::stdin().is_terminal() {
        let first = rpassword::prompt_password("password: ")?;
        let again = rpassword::prompt_password("again: ")?;
        anyhow::ensure!(first == again, "the two passwords differ");
        first
    } else {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)?;
        line.trim_end_matches(['\n', '\r']).to_string()
    };
    anyhow::ensure!(!password.is_empty(), "no password given");
    println!(
        "{}",
        crate::auth::hash_password(&password).map_err(anyhow::Error::msg)?
    );
    Ok(())
}
