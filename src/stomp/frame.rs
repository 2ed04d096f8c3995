//! STOMP frames and protocol versions. No broker types here.

/// A STOMP protocol version, as negotiated by CONNECT's `accept-version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Version {
    /// STOMP 1.0.
    V1_0,
    /// STOMP 1.1.
    V1_1,
    /// STOMP 1.2.
    V1_2,
}

impl Version {
    /// The version as `accept-version` and `version` write it (`1.2`).
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V1_0 => "1.0",
            Version::V1_1 => "1.1",
            Version::V1_2 => "1.2",
        }
    }

    /// The highest version both sides speak, from an `accept-version` header
    /// (`None` header: 1.0, as the spec says). `None` when there is none in common.
    pub fn negotiate(accept: Option<&str>) -> Option<Version> {
        let Some(accept) = accept else {
            return Some(Version::V1_0);
        };
        accept
            .split(',')
            .filter_map(|v| match v.trim() {
                "1.0" => Some(Version::V1_0),
                "1.1" => Some(Version::V1_1),
                "1.2" => Some(Version::V1_2),
                _ => None,
            })
            .max()
    }
}

/// Every STOMP command, client and server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// CONNECT (client).
    Connect,
    /// STOMP: CONNECT's other name (client, 1.1+).
    Stomp,
    /// SEND a message (client).
    Send,
    /// SUBSCRIBE (client).
    Subscribe,
    /// UNSUBSCRIBE (client).
    Unsubscribe,
    /// ACK a message (client).
    Ack,
    /// NACK a message (client, 1.1+).
    Nack,
    /// BEGIN a transaction (client).
    Begin,
    /// COMMIT a transaction (client).
    Commit,
    /// ABORT a transaction (client).
    Abort,
    /// DISCONNECT (client).
    Disconnect,
    /// CONNECTED (server).
    Connected,
    /// MESSAGE (server).
    Message,
    /// RECEIPT (server).
    Receipt,
    /// ERROR (server).
    Error,
}

impl Command {
    const ALL: [Command; 15] = [
        Command::Connect,
        Command::Stomp,
        Command::Send,
        Command::Subscribe,
        Command::Unsubscribe,
        Command::Ack,
        Command::Nack,
        Command::Begin,
        Command::Commit,
        Command::Abort,
        Command::Disconnect,
        Command::Connected,
        Command::Message,
        Command::Receipt,
        Command::Error,
    ];

    /// The command as it is written on the wire (`SEND`).
    pub fn as_str(self) -> &'static str {
        match self {
            Command::Connect => "CONNECT",
            Command::Stomp => "STOMP",
            Command::Send => "SEND",
            Command::Subscribe => "SUBSCRIBE",
            Command::Unsubscribe => "UNSUBSCRIBE",
            Command::Ack => "ACK",
            Command::Nack => "NACK",
            Command::Begin => "BEGIN",
            Command::Commit => "COMMIT",
            Command::Abort => "ABORT",
            Command::Disconnect => "DISCONNECT",
            Command::Connected => "CONNECTED",
            Command::Message => "MESSAGE",
            Command::Receipt => "RECEIPT",
            Command::Error => "ERROR",
        }
    }

    /// The command `text` names (exact, upper case), if any.
    pub fn parse(text: &str) -> Option<Command> {
        Self::ALL.into_iter().find(|c| c.as_str() == text)
    }

    /// CONNECT, STOMP and CONNECTED headers are never escaped.
    pub fn escapes_headers(self) -> bool {
        !matches!(self, Command::Connect | Command::Stomp | Command::Connected)
    }
}

/// One frame: command, headers in wire order (repeats kept: the first one counts),
/// body bytes (NUL allowed with `content-length`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The command.
    pub command: Command,
    /// Headers in wire order (repeats kept: the first one counts).
    pub headers: Vec<(String, String)>,
    /// The body: a shared buffer (cloning a frame or its body copies no bytes).
    pub body: bytes::Bytes,
}

impl Frame {
    /// A frame of `command` with no header and an empty body.
    pub fn new(command: Command) -> Self {
        Self {
            command,
            headers: Vec::new(),
            body: bytes::Bytes::new(),
        }
    }

    /// Adds a header at the end.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<bytes::Bytes>) -> Self {
        self.body = body.into();
        self
    }

    /// The first value of header `name` (STOMP 1.2: repeated headers, first wins).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_negotiation_takes_the_highest_common() {
        assert_eq!(Version::negotiate(None), Some(Version::V1_0));
        assert_eq!(Version::negotiate(Some("1.0,1.1,1.2")), Some(Version::V1_2));
        assert_eq!(Version::negotiate(Some("1.1")), Some(Version::V1_1));
        assert_eq!(Version::negotiate(Some("2.0")), None);
    }

    #[test]
    fn first_repeated_header_wins() {
        let f = Frame::new(Command::Send).header("a", "1").header("a", "2");
        assert_eq!(f.get("a"), Some("1"));
        assert_eq!(Command::parse("SEND"), Some(Command::Send));
        assert_eq!(Command::parse("send"), None);
    }
}
