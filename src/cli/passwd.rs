//! `ebb passwd`: reads a password from standard input and prints its argon2 hash, for
//! `password_hash` in the configuration's `[[users]]` ([`crate::auth::hash_password`]).
//! Reading from standard input keeps the password out of the shell's history and the
//! process list.

/// Runs `ebb passwd`: one line from standard input (its line ending removed), hashed.
///
/// Errors: standard input cannot be read or holds no password; hashing fails.
pub fn execute() -> anyhow::Result<()> {
    let mut password = String::new();
    std::io::stdin().read_line(&mut password)?;
    let password = password.trim_end_matches(['\n', '\r']);
    anyhow::ensure!(!password.is_empty(), "no password on standard input");
    println!(
        "{}",
        crate::auth::hash_password(password).map_err(anyhow::Error::msg)?
    );
    Ok(())
}
