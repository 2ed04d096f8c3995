//! Users and authorization for `ebb serve`, in the manner of ActiveMQ's simple
//! authentication and authorization plugins.
//!
//! With users configured, CONNECT must carry a `login` and `passcode` that match one
//! of them; passwords are stored only as argon2 hashes (`ebb passwd` prints one). With
//! authorization entries, each operation needs a right on the destination, granted to
//! user names or groups by pattern (`topic://orders.>`): `write` to send, `read` to
//! subscribe, `admin` to create or remove a durable subscription. The first entry that
//! matches the destination decides; a destination no entry matches is refused. With
//! no entries, every authenticated user may do everything.
//!
//! Temporary destinations have an entry of their own,
//! [`TempDestinationAuthorizationEntry`] (`[temp_destination_authorization_entry]`,
//! ActiveMQ's `tempDestinationAuthorizationEntry`): `admin` to make one, `write` to
//! send to another connection's, `read` to browse another connection's
//! ([`Security::authorize_temporary`]); a connection needs no right on its own. Without
//! it, anyone connected may make one and send to one whose name it was given (names
//! hold 128 random bits, [`crate::Broker::temporary`]), and only its own connection
//! reads it.
//!
//! A user may instead (or also) be named by a client certificate: with
//! `certificate_subject`, a connection over TLS whose client certificate (verified
//! against `[tls] client_ca_file`) has that subject is that user without a passcode,
//! as ActiveMQ's certificate login module (`TextFileCertificateLoginModule`) maps a
//! certificate's distinguished name to a user.

mod subject;

pub use subject::{CertificateAttribute, DistinguishedName, SubjectError};

use crate::{DestinationKey, DestinationPattern};
use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;

/// How long a refused login waits before its answer (1 s): a client guessing
/// passcodes gets one guess per second per connection.
pub const FAILED_LOGIN_DELAY: std::time::Duration = std::time::Duration::from_secs(1);

/// The passcode checks that may run at once in the process: one per core. argon2 is
/// slow on purpose, so a flood of CONNECTs waits here instead of taking every core
/// from the broker.
pub fn login_checks() -> &'static tokio::sync::Semaphore {
    static CHECKS: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    CHECKS.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        tokio::sync::Semaphore::new(cores)
    })
}

/// A user as the configuration gives it.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct User {
    /// The name a connection gives as its STOMP `login`.
    pub login: String,
    /// An argon2 PHC string (`$argon2id$...`), as `ebb passwd` prints. Empty (the
    /// default) for a user who logs in only by [`User::certificate_subject`]: no
    /// passcode matches it.
    #[serde(default)]
    pub password_hash: String,
    /// The subject of the client certificate that logs in as this user, as a
    /// distinguished name in RFC 4514 text (`CN=orders-service,O=Example`; see
    /// [`DistinguishedName`] for how names compare). A subject that is not a
    /// distinguished name is refused when the configuration is read. `None` (the
    /// default): no certificate.
    #[serde(default)]
    pub certificate_subject: Option<DistinguishedName>,
    /// Groups it belongs to; authorization entries grant rights to groups.
    #[serde(default)]
    pub groups: Vec<String>,
}

/// Who may do what on destinations matching `destination`.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthorizationEntry {
    /// A destination pattern (`queue://jobs`, `topic://orders.>`): the entry covers what it matches.
    pub destination: String,
    /// Groups that may consume (SUBSCRIBE, browse) from it.
    #[serde(default)]
    pub read: Vec<String>,
    /// Groups that may send to it.
    #[serde(default)]
    pub write: Vec<String>,
    /// Groups that may create or remove its durable subscriptions (ActiveMQ's `admin`).
    #[serde(default)]
    pub admin: Vec<String>,
}

/// Who may do what on temporary destinations (`[temp_destination_authorization_entry]`),
/// as ActiveMQ's `tempDestinationAuthorizationEntry`: one entry for every temporary
/// queue and topic, apart from `[[authorization]]` (whose patterns never cover them).
/// Each list holds logins or groups, `*` for every user; a connection needs no right
/// on the temporary destinations it made itself. See
/// [`Security::authorize_temporary`] for what holds without it.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TempDestinationAuthorizationEntry {
    /// Who may browse another connection's temporary queue (STOMP `browser:true`, the
    /// admin API's and the console's message views). Consuming stays its own
    /// connection's alone, as in ActiveMQ, whatever the rights.
    #[serde(default)]
    pub read: Vec<String>,
    /// Who may send to another connection's temporary destination (a reply to a
    /// request's `reply-to`).
    #[serde(default)]
    pub write: Vec<String>,
    /// Who may make temporary destinations (STOMP `/temp-queue/NAME`,
    /// `/temp-topic/NAME`).
    #[serde(default)]
    pub admin: Vec<String>,
}

/// A right an operation needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Right {
    /// Consume: SUBSCRIBE, browse.
    Read,
    /// Send.
    Write,
    /// Create or remove a durable subscription.
    Admin,
}

impl Right {
    fn name(self) -> &'static str {
        match self {
            Right::Read => "read",
            Right::Write => "write",
            Right::Admin => "admin",
        }
    }
}

/// Why [`Security::log_in`] refused a login.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoginFailure {
    /// Too many refused logins from the address: its text says until when.
    #[error("authentication failed: {0}")]
    Throttled(String),
    /// No such user, a wrong passcode, or none given.
    #[error("{0}")]
    Refused(String),
    /// The check could not run.
    #[error("authentication failed: internal error")]
    Internal,
}

/// An authenticated connection's identity: its login and groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The login it connected with.
    pub login: String,
    /// Its groups, from the configuration.
    pub groups: Vec<String>,
}

/// The users and entries of one broker. `Default` (no users, no entries) lets
/// everyone in.
#[derive(Debug, Clone, Default)]
pub struct Security {
    /// Who may connect (none: anyone, without a login).
    pub users: Vec<User>,
    /// Who may do what; the first entry that matches a destination decides (none: everyone may do everything).
    pub authorization: Vec<AuthorizationEntry>,
    /// Who may make, send to and browse temporary destinations
    /// ([`Security::authorize_temporary`]); `None`: the default described there.
    pub temp_destination_authorization_entry: Option<TempDestinationAuthorizationEntry>,
    /// Refused logins per client address, for every protocol of the broker
    /// ([`crate::login_guard`]); clones share it.
    pub login_guard: std::sync::Arc<crate::login_guard::LoginGuard>,
}

impl Security {
    /// Whether operations need rights (authorization entries are configured).
    pub fn has_authorization(&self) -> bool {
        !self.authorization.is_empty()
    }

    /// Whether CONNECT must authenticate.
    pub fn requires_login(&self) -> bool {
        !self.users.is_empty()
    }

    /// Checks `login`/`passcode`. Slow on purpose (argon2): call it off the event loop.
    /// The error text is the same for an unknown user and a wrong password.
    pub fn authenticate(
        &self,
        login: Option<&str>,
        passcode: Option<&str>,
    ) -> Result<Option<Principal>, LoginError> {
        if !self.requires_login() {
            return Ok(None);
        }
        let (Some(login), Some(passcode)) = (login, passcode) else {
            return Err(LoginError::Missing);
        };
        let Some(user) = self.users.iter().find(|u| u.login == login) else {
            // Spend the same time as for a known user, so logins cannot be probed.
            let _ = verify_password(passcode, dummy_hash());
            return Err(LoginError::Refused);
        };
        if verify_password(passcode, &user.password_hash) {
            Ok(Some(Principal {
                login: user.login.clone(),
                groups: user.groups.clone(),
            }))
        } else {
            Err(LoginError::Refused)
        }
    }

    /// Logs in by `login` and `passcode` when users are configured, as every
    /// protocol does: refused logins from `peer` are throttled
    /// ([`crate::login_guard`], metrics labelled `protocol`), argon2 runs off the event
    /// loop (one check per core at a time, [`login_checks`]), and a refusal is
    /// answered after [`FAILED_LOGIN_DELAY`]. `Ok(None)` when no users are configured.
    ///
    /// Errors: [`LoginFailure`], whose text the protocol sends back.
    pub async fn log_in(
        self: &std::sync::Arc<Self>,
        peer: Option<std::net::IpAddr>,
        protocol: &'static str,
        login: Option<String>,
        passcode: Option<String>,
    ) -> Result<Option<Principal>, LoginFailure> {
        if !self.requires_login() {
            return Ok(None);
        }
        let guard = std::sync::Arc::clone(&self.login_guard);
        let check = guard
            .admit(peer, protocol)
            .await
            .map_err(|throttled| LoginFailure::Throttled(throttled.to_string()))?;
        let permit = login_checks()
            .acquire()
            .await
            .map_err(|_| LoginFailure::Internal)?;
        let security = std::sync::Arc::clone(self);
        let checked = actix_rt::task::spawn_blocking(move || {
            security.authenticate(login.as_deref(), passcode.as_deref())
        })
        .await
        .map_err(|_| LoginFailure::Internal)?;
        drop(permit);
        match checked {
            Ok(principal) => {
                check.accepted();
                Ok(principal)
            }
            Err(reason) => {
                check.refused();
                // One guess per second per connection.
                tokio::time::sleep(FAILED_LOGIN_DELAY).await;
                Err(LoginFailure::Refused(reason.to_string()))
            }
        }
    }

    /// The user whose [`User::certificate_subject`] is `subject` (a verified client
    /// certificate's subject, as [`crate::tls::certificate_subject`] reads it from
    /// the certificate's RDNs), if any. A `login` the client gave as well must name
    /// that user.
    ///
    /// Returns `None` when no user has this subject (the connection may still log in
    /// with a passcode); `Some(Err)` when the login names another user.
    pub fn authenticate_certificate(
        &self,
        subject: &DistinguishedName,
        login: Option<&str>,
    ) -> Option<Result<Principal, LoginError>> {
        let user = self
            .users
            .iter()
            .find(|u| u.certificate_subject.as_ref() == Some(subject))?;
        Some(match login {
            Some(login) if login != user.login => Err(LoginError::OtherUser {
                subject: subject.to_string(),
                user: user.login.clone(),
                login: login.to_string(),
            }),
            _ => Ok(Principal {
                login: user.login.clone(),
                groups: user.groups.clone(),
            }),
        })
    }

    /// Whether `principal` (None: anonymous, when no users are configured) has
    /// `right` on `destination`, by the first entry whose pattern
    /// ([`DestinationPattern`]) matches it. A temporary destination is taken as
    /// another connection's, decided by [`Security::authorize_temporary`]: a caller
    /// that knows the connection checks first whether it is its own (which needs no
    /// right). The error says what is missing.
    pub fn authorize(
        &self,
        principal: Option<&Principal>,
        right: Right,
        destination: &DestinationKey,
    ) -> Result<(), AccessError> {
        if destination.capabilities().temporary {
            return self.authorize_temporary(principal, right);
        }
        if self.authorization.is_empty() {
            return Ok(());
        }
        let Some(entry) = self.authorization.iter().find(|e| {
            DestinationPattern::parse(&e.destination).is_ok_and(|p| p.matches(destination))
        }) else {
            return Err(AccessError::NoEntry(destination.to_string()));
        };
        self.check(entry, principal, right, &destination.to_string())?;
        // A shared subscription's queue holds its topics' messages: reaching it by
        // name needs the right on those topics too.
        match shared_subscription_filter(destination) {
            None => Ok(()),
            Some(Ok(topic)) => self.authorize(principal, right, &topic),
            Some(Err(pattern)) => self.authorize_pattern(principal, right, &pattern),
        }
    }

    /// Whether `principal` has `right` on temporary destinations other than its own
    /// connection's (`admin`: on making one), by
    /// [`Security::temp_destination_authorization_entry`], as ActiveMQ's
    /// `tempDestinationAuthorizationEntry` (a connection needs no right on its own).
    /// Without the entry, the default keeps request/reply working while nothing can
    /// be guessed:
    /// - `admin` (make one): everyone connected;
    /// - `write` (send to another connection's): everyone who has its name, handed
    ///   out in a request's `reply-to` (the name holds 128 random bits, so it is known
    ///   only to whom it was given, and to readers of the advisory topics that name it);
    /// - `read` (browse another connection's): nobody.
    ///
    /// Errors: [`AccessError::NoRight`] naming the right and the entry.
    pub fn authorize_temporary(
        &self,
        principal: Option<&Principal>,
        right: Right,
    ) -> Result<(), AccessError> {
        let granted = match (&self.temp_destination_authorization_entry, right) {
            (None, Right::Admin | Right::Write) => return Ok(()),
            (None, Right::Read) => false,
            (Some(entry), Right::Read) => grants(&entry.read, principal),
            (Some(entry), Right::Write) => grants(&entry.write, principal),
            (Some(entry), Right::Admin) => grants(&entry.admin, principal),
        };
        if granted {
            return Ok(());
        }
        Err(AccessError::NoRight {
            who: principal.map_or("anonymous", |p| p.login.as_str()).to_string(),
            right: right.name(),
            what: match right {
                Right::Admin => "temporary destinations (making one; [temp_destination_authorization_entry])",
                Right::Read | Right::Write => {
                    "another connection's temporary destinations ([temp_destination_authorization_entry])"
                }
            }
            .to_string(),
        })
    }

    /// Whether `principal` has `right` on every destination `pattern` matches, by one
    /// entry: the first entry whose pattern shares a destination with it must cover
    /// it whole ([`DestinationPattern::covers`]) and grant the right. A pattern over
    /// destinations that different entries decide is refused, with the entries named:
    /// a durable subscription to a wildcard topic is held on every matching topic,
    /// also while offline, so it must be allowed on all of them.
    pub fn authorize_pattern(
        &self,
        principal: Option<&Principal>,
        right: Right,
        pattern: &DestinationPattern,
    ) -> Result<(), AccessError> {
        if self.authorization.is_empty() {
            return Ok(());
        }
        let first = self.authorization.iter().find_map(|e| {
            let p = DestinationPattern::parse(&e.destination).ok()?;
            p.intersects(pattern).then_some((e, p))
        });
        let Some((entry, entry_pattern)) = first else {
            return Err(AccessError::NoEntry(pattern.to_string()));
        };
        if !entry_pattern.covers(pattern) {
            return Err(AccessError::Partial {
                entry: entry.destination.clone(),
                pattern: pattern.to_string(),
            });
        }
        self.check(entry, principal, right, &pattern.to_string())
    }

    /// Whether `entry` grants `right` to `principal`; the error names `what`.
    fn check(
        &self,
        entry: &AuthorizationEntry,
        principal: Option<&Principal>,
        right: Right,
        what: &str,
    ) -> Result<(), AccessError> {
        let who = principal.map_or("anonymous", |p| p.login.as_str());
        let granted = match right {
            Right::Read => &entry.read,
            Right::Write => &entry.write,
            Right::Admin => &entry.admin,
        };
        if grants(granted, principal) {
            Ok(())
        } else {
            Err(AccessError::NoRight {
                who: who.to_string(),
                right: right.name(),
                what: what.to_string(),
            })
        }
    }

    /// Checks the users at start: every hash parses (a typo stops the broker, not a
    /// login), every user can log in somehow (a hash or a certificate subject), and
    /// no login or certificate subject is given twice (the second could never log
    /// in, or would log in as the first).
    pub fn validate(&self) -> Result<(), UsersError> {
        for (i, user) in self.users.iter().enumerate() {
            let earlier = &self.users[..i];
            if earlier.iter().any(|u| u.login == user.login) {
                return Err(UsersError::Twice(user.login.clone()));
            }
            if let Some(subject) = &user.certificate_subject {
                if let Some(other) = earlier
                    .iter()
                    .find(|u| u.certificate_subject.as_ref() == Some(subject))
                {
                    return Err(UsersError::SameSubject {
                        first: other.login.clone(),
                        second: user.login.clone(),
                        subject: subject.to_string(),
                    });
                }
                if user.password_hash.is_empty() {
                    continue;
                }
            } else if user.password_hash.is_empty() {
                return Err(UsersError::NoWayIn(user.login.clone()));
            }
            PasswordHash::new(&user.password_hash).map_err(|e| UsersError::BadHash {
                login: user.login.clone(),
                reason: e.to_string(),
            })?;
        }
        Ok(())
    }
}

/// Whether `granted` (logins, groups, `*` for every user) names `principal`; never
/// an anonymous connection.
fn grants(granted: &[String], principal: Option<&Principal>) -> bool {
    principal.is_some_and(|p| {
        granted
            .iter()
            .any(|g| g == "*" || *g == p.login || p.groups.contains(g))
    })
}

/// A hash verified against for unknown logins (made once, on first use).
fn dummy_hash() -> &'static str {
    static HASH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HASH.get_or_init(|| hash_password("ebb: no such user").unwrap_or_default())
}

/// Hashes `password` with argon2id and a random salt (PHC string).
pub fn hash_password(password: &str) -> Result<String, HashError> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| HashError(e.to_string()))
}

/// argon2 could not hash a password (its own error's text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot hash the password: {0}")]
pub struct HashError(pub String);

/// Why a login was refused: the text of the refusal (the same for an unknown login
/// and a wrong passcode, so logins cannot be probed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoginError {
    /// No login or no passcode was given, and users are configured.
    #[error("authentication required: CONNECT needs login and passcode")]
    Missing,
    /// An unknown login or a wrong passcode.
    #[error("authentication failed: unknown login or wrong passcode")]
    Refused,
    /// A client certificate that logs in as `user`, with a `login` naming another.
    #[error("authentication failed: the client certificate ({subject}) logs in as {user}, not as login {login}")]
    OtherUser {
        /// The certificate's subject, RFC 4514 text.
        subject: String,
        /// The user the certificate logs in as.
        user: String,
        /// The login the client gave.
        login: String,
    },
}

/// Why a user may not do something: the right it lacks, or the entry that does not
/// cover the destination (the text of the refusal).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccessError {
    /// No `[[authorization]]` entry matches the destination (or pattern).
    #[error("not authorized: no authorization entry covers {0}")]
    NoEntry(String),
    /// The first entry that meets a wildcard pattern does not cover all of it.
    #[error("not authorized: the entry for {entry} does not cover all of {pattern}; rights differ across the destinations it matches (subscribe to a narrower pattern)")]
    Partial {
        /// The entry's pattern.
        entry: String,
        /// The pattern asked for.
        pattern: String,
    },
    /// The entry grants `who` (a login, or `anonymous`) no `right` on `what`.
    #[error("not authorized: {who} has no {right} right on {what}")]
    NoRight {
        /// The login, or `anonymous`.
        who: String,
        /// `read`, `write` or `admin`.
        right: &'static str,
        /// The destination or pattern.
        what: String,
    },
}

/// Users that cannot be used, found at start ([`Security::validate`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsersError {
    /// A login given twice.
    #[error("user `{0}` is configured twice")]
    Twice(String),
    /// Two users with one certificate subject.
    #[error("users `{first}` and `{second}` have the same certificate_subject ({subject}): a certificate logs in as one user")]
    SameSubject {
        /// The first user's login.
        first: String,
        /// The second user's login.
        second: String,
        /// The subject, RFC 4514 text.
        subject: String,
    },
    /// A user with neither a password hash nor a certificate subject.
    #[error("user `{0}` has neither a password_hash nor a certificate_subject, so it can never log in: give it a hash (`ebb passwd`) or a subject")]
    NoWayIn(String),
    /// A password hash that is not an argon2 PHC string.
    #[error("user `{login}`: password_hash is not an argon2 hash ({reason}); make one with `ebb passwd`")]
    BadHash {
        /// The user's login.
        login: String,
        /// What the hash parser said.
        reason: String,
    },
}

/// Whether `password` matches the PHC string `hash` (false for a malformed hash).
pub fn verify_password(password: &str, hash: &str) -> bool {
    PasswordHash::new(hash).is_ok_and(|parsed| {
        Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok()
    })
}

/// The topic (`Ok`) or wildcard topic (`Err`) whose messages queue `queue` holds when
/// it is a shared subscription's (`queue://$share.GROUP.FILTER`, as
/// `ebb::broker::shared_subscription_queue` names it: the group has no `.`, and a
/// filter segment `+` or `#` is the wildcard `*` or `>`); `None` for any other
/// destination, or a name that gives no topic.
fn shared_subscription_filter(
    queue: &DestinationKey,
) -> Option<Result<DestinationKey, DestinationPattern>> {
    let container = queue.container();
    let rest = container.strip_prefix("queue://$share.")?;
    let (_group, filter) = rest.split_once('.')?;
    let mut wildcard = false;
    let segments: Vec<&str> = filter
        .split('.')
        .map(|segment| match segment {
            "+" => {
                wildcard = true;
                "*"
            }
            "#" => {
                wildcard = true;
                ">"
            }
            segment => segment,
        })
        .collect();
    let text = format!("topic://{}", segments.join("."));
    if wildcard {
        DestinationPattern::parse(&text).ok().map(Err)
    } else {
        DestinationKey::from_container(&text).ok().map(Ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn security() -> Security {
        Security {
            login_guard: Default::default(),
            users: vec![
                User {
                    login: "alice".into(),
                    password_hash: hash_password("pa:ss").unwrap(),
                    certificate_subject: None,
                    groups: vec!["billing".into()],
                },
                User {
                    login: "bob".into(),
                    password_hash: hash_password("secret").unwrap(),
                    certificate_subject: None,
                    groups: vec![],
                },
                User {
                    login: "orders-service".into(),
                    password_hash: String::new(),
                    certificate_subject: Some(dn("CN=orders, O=Example\\, Inc., C=DE")),
                    groups: vec!["billing".into()],
                },
            ],
            authorization: vec![
                AuthorizationEntry {
                    destination: "topic://orders.>".into(),
                    read: vec!["billing".into()],
                    write: vec!["bob".into(), "billing".into()],
                    admin: vec!["alice".into()],
                },
                AuthorizationEntry {
                    destination: "topic://public".into(),
                    read: vec!["*".into()],
                    write: vec![],
                    admin: vec![],
                },
            ],
            temp_destination_authorization_entry: None,
        }
    }

    /// A shared subscription's queue (`$share.GROUP.FILTER`) holds its topics'
    /// messages: naming it needs the queue's right and the right on the topics too.
    #[test]
    fn a_shared_subscriptions_queue_needs_its_topics_rights() {
        let mut s = security();
        s.authorization.push(AuthorizationEntry {
            destination: "queue://>".into(),
            read: vec!["*".into()],
            write: vec!["*".into()],
            admin: vec![],
        });
        let alice = s.authenticate(Some("alice"), Some("pa:ss")).unwrap();
        let bob = s.authenticate(Some("bob"), Some("secret")).unwrap();
        for name in ["queue://$share.g.orders.eu", "queue://$share.g.orders.+"] {
            let queue = key(name);
            assert!(
                s.authorize(alice.as_ref(), Right::Read, &queue).is_ok(),
                "{name}"
            );
            let e = s.authorize(bob.as_ref(), Right::Read, &queue).unwrap_err();
            assert!(
                e.to_string().contains("bob has no read right"),
                "{name}: {e}"
            );
            assert!(
                s.authorize(bob.as_ref(), Right::Write, &queue).is_ok(),
                "{name}"
            );
        }
        // Its topic has no entry: refused, as the topic is.
        assert!(s
            .authorize(alice.as_ref(), Right::Read, &key("queue://$share.g.secret"))
            .is_err());
        assert!(s
            .authorize(alice.as_ref(), Right::Read, &key("queue://jobs"))
            .is_ok());
    }

    /// Without `[temp_destination_authorization_entry]`: anyone makes one and sends to
    /// another's (its name is the capability), nobody browses another's, and the
    /// `[[authorization]]` entries play no part. With it, its lists decide.
    #[test]
    fn temporary_destinations_have_their_own_entry() {
        let mut s = security();
        let alice = s.authenticate(Some("alice"), Some("pa:ss")).unwrap();
        let bob = s.authenticate(Some("bob"), Some("secret")).unwrap();
        let reply = key("temp-queue://ebb-x-7-abc.replies");
        for who in [alice.as_ref(), bob.as_ref(), None] {
            assert!(s.authorize_temporary(who, Right::Admin).is_ok());
            assert!(s.authorize(who, Right::Write, &reply).is_ok());
            let e = s
                .authorize(who, Right::Read, &reply)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("no read right on another connection's temporary destinations"),
                "{e}"
            );
        }
        s.temp_destination_authorization_entry = Some(TempDestinationAuthorizationEntry {
            read: vec!["alice".into()],
            write: vec!["billing".into()],
            admin: vec!["*".into()],
        });
        assert!(s.authorize(alice.as_ref(), Right::Read, &reply).is_ok());
        assert!(s.authorize(alice.as_ref(), Right::Write, &reply).is_ok());
        assert!(s.authorize_temporary(bob.as_ref(), Right::Admin).is_ok());
        let e = s
            .authorize(bob.as_ref(), Right::Write, &reply)
            .unwrap_err()
            .to_string();
        assert_eq!(e, "not authorized: bob has no write right on another connection's temporary destinations ([temp_destination_authorization_entry])");
        assert!(s.authorize(bob.as_ref(), Right::Read, &reply).is_err());
        // `*` is every user, never an anonymous connection.
        assert!(s.authorize_temporary(None, Right::Admin).is_err());
        s.temp_destination_authorization_entry = Some(Default::default());
        let e = s
            .authorize_temporary(alice.as_ref(), Right::Admin)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("alice has no admin right on temporary destinations"),
            "{e}"
        );
    }

    fn key(text: &str) -> DestinationKey {
        DestinationKey::from_container(text).unwrap()
    }

    #[test]
    fn logins_are_checked_against_argon2_hashes() {
        let s = security();
        assert!(s.validate().is_ok());
        let alice = s
            .authenticate(Some("alice"), Some("pa:ss"))
            .unwrap()
            .unwrap();
        assert_eq!(alice.groups, vec!["billing".to_string()]);
        let wrong = s
            .authenticate(Some("alice"), Some("nope"))
            .unwrap_err()
            .to_string();
        let unknown = s
            .authenticate(Some("mallory"), Some("x"))
            .unwrap_err()
            .to_string();
        assert_eq!(wrong, unknown, "no hint which part was wrong");
        assert!(s
            .authenticate(None, None)
            .unwrap_err()
            .to_string()
            .contains("login"));
        assert_eq!(Security::default().authenticate(None, None), Ok(None));
        assert!(PasswordHash::new(dummy_hash()).is_ok());
    }

    #[test]
    fn rights_come_from_the_first_matching_entry() {
        let s = security();
        let alice = s.authenticate(Some("alice"), Some("pa:ss")).unwrap();
        let bob = s.authenticate(Some("bob"), Some("secret")).unwrap();
        assert!(s
            .authorize(alice.as_ref(), Right::Read, &key("topic://orders.eu"))
            .is_ok());
        assert!(s
            .authorize(alice.as_ref(), Right::Admin, &key("topic://orders.eu"))
            .is_ok());
        assert!(s
            .authorize(bob.as_ref(), Right::Write, &key("topic://orders.eu"))
            .is_ok());
        let e = s
            .authorize(bob.as_ref(), Right::Read, &key("topic://orders.eu"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("bob has no read right"), "{e}");
        assert!(s
            .authorize(bob.as_ref(), Right::Read, &key("topic://public"))
            .is_ok());
        assert!(s
            .authorize(bob.as_ref(), Right::Write, &key("topic://other"))
            .unwrap_err()
            .to_string()
            .contains("no authorization entry"));
        assert!(Security::default()
            .authorize(None, Right::Admin, &key("topic://x"))
            .is_ok());
    }

    fn dn(text: &str) -> DistinguishedName {
        text.parse().unwrap()
    }

    #[test]
    fn a_certificate_subject_names_its_user() {
        let s = security();
        assert!(s.validate().is_ok());
        // Reversed (as OpenSSL writes it), spaces and the case of attribute names do
        // not matter.
        let user = s
            .authenticate_certificate(&dn("c=DE,O=Example\\, Inc.,CN = orders"), None)
            .expect("a user has this subject")
            .unwrap();
        assert_eq!(user.login, "orders-service");
        assert_eq!(user.groups, vec!["billing".to_string()]);
        let subject = dn("CN=orders,O=Example\\, Inc.,C=DE");
        let same = s.authenticate_certificate(&subject, Some("orders-service"));
        assert_eq!(same, Some(Ok(user)));
        let other = s
            .authenticate_certificate(&subject, Some("alice"))
            .unwrap()
            .unwrap_err()
            .to_string();
        assert!(
            other.contains(
                "(CN=orders,O=Example\\, Inc.,C=DE) logs in as orders-service, not as login alice"
            ),
            "{other}"
        );
        // A value differs (its case counts), an attribute is missing, or the order
        // is another: no user.
        assert!(s
            .authenticate_certificate(&dn("O=Example\\, Inc.,CN=orders,C=DE"), None)
            .is_none());
        assert!(s
            .authenticate_certificate(&dn("CN=Orders,O=Example\\, Inc.,C=DE"), None)
            .is_none());
        assert!(s
            .authenticate_certificate(&dn("CN=orders,C=DE"), None)
            .is_none());
        // The comma inside `Example, Inc.` belongs to O: split, it is another name.
        assert!(s
            .authenticate_certificate(&dn("CN=orders,O=Example,O=Inc.,C=DE"), None)
            .is_none());
        // Nobody logs in as a certificate-only user with a passcode.
        assert!(s.authenticate(Some("orders-service"), Some("")).is_err());
    }

    #[test]
    fn malformed_hashes_are_caught_at_start() {
        let mut s = security();
        s.users[1].password_hash = "plain-text".into();
        assert!(s.validate().unwrap_err().to_string().contains("bob"));
        let mut s = security();
        s.users[1].password_hash = String::new();
        let e = s.validate().unwrap_err().to_string();
        assert!(
            e.contains("user `bob` has neither a password_hash nor a certificate_subject"),
            "no way to log in: {e}"
        );
        let mut s = security();
        s.users.push(s.users[0].clone());
        assert_eq!(
            s.validate().unwrap_err().to_string(),
            "user `alice` is configured twice"
        );
        let mut s = security();
        s.users[1].certificate_subject = Some(dn("C=DE,O=Example\\, Inc.,CN=orders"));
        let e = s.validate().unwrap_err().to_string();
        assert!(
            e.contains("users `bob` and `orders-service` have the same certificate_subject"),
            "{e}"
        );
    }

    #[test]
    fn a_subject_that_is_not_a_distinguished_name_stops_the_configuration() {
        let e = toml::from_str::<User>("login = \"x\"\ncertificate_subject = \"/CN=x/O=y\"\n")
            .unwrap_err()
            .to_string()
            .to_string();
        assert!(e.contains("`/CN` is not an attribute type"), "{e}");
        let user: User =
            toml::from_str("login = \"x\"\ncertificate_subject = \"CN=x\\\\, y\"\n").unwrap();
        assert_eq!(user.certificate_subject, Some(dn("CN=x\\, y")));
    }
}
