//! [`Link`]: a blocking connection to one Redis server (TCP or a unix
//! socket, RESP2) whose every call ends by a deadline.
//!
//! A socket's read timeout bounds each `read`, not a reply: a link that
//! drips a byte every 50 ms never trips a 150 ms read timeout, and a
//! 30-byte reply then takes 1.5 s (redis-rs's blocking connection reads
//! so, `tests/faults.rs` measured it). Here every read and write first
//! sets the socket's timeout to what is left until the call's deadline,
//! and fails at once when nothing is left, so a call ends within its
//! timeout whatever the link does. The reply is parsed by redis-rs's own
//! parser, and the calls are redis-rs's [`ConnectionLike`], so the script
//! and every command go through it unchanged.
//!
//! A connection that asks for what this one does not do (TLS, RESP3) is
//! redis-rs's own (`src/remote/redis/conn.rs`).

use std::io::{self, Write};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use crate::remote::socket::{left, tcp, Socket, Timed};
use redis::{
    cmd, ConnectionAddr, ConnectionInfo, ConnectionLike, ErrorKind, Parser, RedisError,
    RedisResult, Value,
};

/// A connection whose calls each end within `response` (see the module
/// docs).
pub(crate) struct Link {
    /// The socket, and the deadline of the reply being read.
    stream: Timed,
    /// Keeps what was read beyond a reply for the next (nothing, with one
    /// call at a time), and a reply's state across reads.
    parser: Parser,
    db: i64,
    response: Duration,
    /// False once a call failed on the way: what the server says next
    /// would answer the wrong call.
    open: bool,
}

impl Link {
    /// Whether `info` is a connection this type makes (TCP or a unix
    /// socket, RESP2).
    pub(crate) fn serves(info: &ConnectionInfo) -> bool {
        let resp2 = !info.redis_settings().protocol().supports_resp3();
        let addr = matches!(info.addr(), ConnectionAddr::Tcp(..));
        #[cfg(unix)]
        let addr = addr || matches!(info.addr(), ConnectionAddr::Unix(_));
        resp2 && addr
    }

    /// Connects, authenticates and selects the database, all within
    /// `connect`; calls then end within `response`.
    pub(crate) fn open(
        info: &ConnectionInfo,
        connect: Duration,
        response: Duration,
    ) -> RedisResult<Link> {
        let deadline = Instant::now() + connect;
        let socket: Socket = match info.addr() {
            ConnectionAddr::Tcp(host, port) => Box::new(tcp((host.as_str(), *port), deadline)?),
            #[cfg(unix)]
            ConnectionAddr::Unix(path) => {
                // A local socket: connecting does not wait on a network.
                Box::new(UnixStream::connect(path)?)
            }
            _ => {
                return Err(RedisError::from((
                    ErrorKind::InvalidClientConfig,
                    "not a TCP or unix socket address",
                )))
            }
        };
        let settings = info.redis_settings();
        socket.set_write_timeout(left(deadline)?)?;
        let mut link = Link {
            stream: Timed { socket, deadline },
            parser: Parser::new(),
            db: settings.db(),
            response,
            open: true,
        };
        // The setup's calls, each by what is left of the connect timeout.
        if let Some(password) = settings.password() {
            let mut auth = cmd("AUTH");
            if let Some(user) = settings.username() {
                auth.arg(user);
            }
            link.response = left(deadline)?;
            auth.arg(password).query::<()>(&mut link).map_err(|e| {
                if e.kind() == ErrorKind::Io {
                    e
                } else {
                    // As redis-rs's own connections say it.
                    RedisError::from((
                        ErrorKind::AuthenticationFailed,
                        "Password authentication failed",
                    ))
                }
            })?;
        }
        if settings.db() != 0 {
            link.response = left(deadline)?;
            cmd("SELECT").arg(settings.db()).query::<()>(&mut link)?;
        }
        link.response = response;
        link.stream.socket.set_write_timeout(response)?;
        Ok(link)
    }

    /// Sends `bytes` and reads `replies` replies (skipping pushes), all by
    /// one deadline.
    fn call(&mut self, bytes: &[u8], replies: usize) -> RedisResult<Vec<Value>> {
        if !self.open {
            return Err(RedisError::from(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the connection failed during an earlier call",
            )));
        }
        let deadline = Instant::now() + self.response;
        let result = self.exchange(bytes, replies, deadline);
        if result.is_err() {
            self.open = false;
            self.stream.socket.shutdown();
        }
        result
    }

    fn exchange(
        &mut self,
        mut bytes: &[u8],
        replies: usize,
        deadline: Instant,
    ) -> RedisResult<Vec<Value>> {
        // The first write waits at most the response timeout, set at
        // connect; a request that does not fit the socket's buffer at once
        // (none of paceline's) waits what is left.
        let mut first = true;
        while !bytes.is_empty() {
            if !std::mem::take(&mut first) {
                self.stream.socket.set_write_timeout(left(deadline)?)?;
            }
            match self.stream.socket.write(bytes) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero).into()),
                Ok(n) => bytes = &bytes[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        let mut values = Vec::with_capacity(replies);
        self.stream.deadline = deadline;
        while values.len() < replies {
            match self.parser.parse_value(&mut self.stream)? {
                Value::Push { .. } => {}
                value => values.push(value),
            }
        }
        Ok(values)
    }
}

impl ConnectionLike for Link {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        let mut values = self.call(cmd, 1)?;
        Ok(values.pop().unwrap_or(Value::Nil))
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let mut values = self.call(cmd, offset + count)?;
        Ok(values.split_off(offset))
    }

    fn get_db(&self) -> i64 {
        self.db
    }

    fn check_connection(&mut self) -> bool {
        cmd("PING").query::<String>(self).is_ok()
    }

    fn is_open(&self) -> bool {
        self.open
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.stream.socket.shutdown();
    }
}
