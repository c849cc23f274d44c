//! A blocking connection to a server, over TCP or a unix socket, whose
//! reads end by a deadline: before each read the socket's timeout is set to
//! what is left, so a reply whose bytes drip in cannot hold a call past its
//! deadline (a read timeout alone bounds each read, not the reply: one byte
//! every 50 ms would hold a call for as long as the reply is long). The
//! Redis link and the memcached connections are both built on it.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// A TCP or unix-socket stream, as the connections use it.
pub(crate) type Socket = Box<dyn Stream>;

/// What a connection asks of its stream beyond reads and writes: std's
/// calls of the same names on [`TcpStream`] and [`UnixStream`].
pub(crate) trait Stream: Read + Write + Send {
    fn set_read_timeout(&self, t: Duration) -> io::Result<()>;
    fn set_write_timeout(&self, t: Duration) -> io::Result<()>;
    /// Shuts both ways (an error: it is shut already).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    fn shutdown(&self);
}

/// [`Stream`] for each of std's sockets, by its own calls of the same names.
macro_rules! streams {
    ($($(#[$cfg:meta])* $socket:ident)*) => {$(
        $(#[$cfg])*
        impl Stream for $socket {
            fn set_read_timeout(&self, t: Duration) -> io::Result<()> {
                $socket::set_read_timeout(self, Some(t))
            }
            fn set_write_timeout(&self, t: Duration) -> io::Result<()> {
                $socket::set_write_timeout(self, Some(t))
            }
            fn shutdown(&self) {
                let _ = $socket::shutdown(self, Shutdown::Both);
            }
        }
    )*};
}
streams!(TcpStream #[cfg(unix)] UnixStream);

/// One call's budget, on either face: connect plus response timeout from
/// its start; each reply waits at most the response timeout, or what is
/// left.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Budget {
    deadline: Instant,
    pub(crate) response: Duration,
}

impl Budget {
    /// The budget of a call that starts now.
    pub(crate) fn new(connect: Duration, response: Duration) -> Budget {
        Budget {
            deadline: Instant::now() + connect + response,
            response,
        }
    }

    /// What the budget leaves now (at least 1 ms: a zero timeout is an
    /// error to a socket).
    pub(crate) fn left(&self) -> Duration {
        self.deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    }

    /// How long the next reply may take.
    #[cfg_attr(not(feature = "memcached"), allow(dead_code))]
    pub(crate) fn reply_within(&self) -> Duration {
        self.left().min(self.response)
    }

    /// Whether the budget has room for `pause` and then a reply: a quarter
    /// of a response timeout (a call sent again after a pause).
    pub(crate) fn fits(&self, pause: Duration) -> bool {
        self.left() >= pause.saturating_add(self.response / 4)
    }
}

/// The first 40 characters of a server's reply: enough for an error
/// message about it, which stays readable whatever came.
pub(crate) fn cut(s: &str) -> &str {
    s.char_indices().nth(40).map_or(s, |(i, _)| &s[..i])
}

/// What is left until `deadline`, or the error of a call that ran out.
pub(crate) fn left(deadline: Instant) -> io::Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "no reply within the response timeout",
        ));
    }
    Ok(left)
}

/// A socket and the deadline of the reply being read: every read ends by
/// it, whatever pace the bytes come at, and whatever signals the process
/// takes meanwhile.
pub(crate) struct Timed {
    pub(crate) socket: Socket,
    pub(crate) deadline: Instant,
}

impl Read for Timed {
    /// A read with what is left until the deadline, made again when a
    /// signal interrupted it, until it answers or the deadline passes. A
    /// read on a socket with a timeout is never restarted by the kernel,
    /// whatever flags the signal's handler was installed with (signal(7)):
    /// in a process with any handler (tokio's for child processes, a
    /// server's for SIGHUP), a call would otherwise fail as if the server
    /// were gone.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            self.socket.set_read_timeout(left(self.deadline)?)?;
            match self.socket.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                answer => return answer,
            }
        }
    }
}

/// A TCP connection to `addr` by `deadline`, trying each address it
/// resolves to; without Nagle's delay (one write per call: nothing to
/// coalesce).
pub(crate) fn tcp(addr: impl ToSocketAddrs, deadline: Instant) -> io::Result<TcpStream> {
    let mut last = None;
    for addr in addr.to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, left(deadline)?) {
            Ok(s) => {
                s.set_nodelay(true)?;
                return Ok(s);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        io::Error::new(io::ErrorKind::NotFound, "the host resolves to no address")
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// A socket whose first `fails` reads fail with `fail` and whose later
    /// ones answer the count of reads so far, counting them in `reads`;
    /// each read's timeout must be above zero and at most `max`.
    struct Scripted {
        fail: io::ErrorKind,
        fails: usize,
        reads: Arc<AtomicUsize>,
        max: Duration,
    }

    impl Read for Scripted {
        fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
            let n = self.reads.fetch_add(1, Ordering::Relaxed) + 1;
            if n <= self.fails {
                Err(io::Error::from(self.fail))
            } else {
                Ok(n)
            }
        }
    }

    impl Write for Scripted {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Stream for Scripted {
        fn set_read_timeout(&self, t: Duration) -> io::Result<()> {
            assert!(
                t > Duration::ZERO && t <= self.max,
                "a read timeout of {t:?}"
            );
            Ok(())
        }
        fn set_write_timeout(&self, _: Duration) -> io::Result<()> {
            Ok(())
        }
        fn shutdown(&self) {}
    }

    /// A read by `within` from now on a [`Scripted`] socket: its answer,
    /// how many reads it made, and its deadline.
    fn read(
        fail: io::ErrorKind,
        fails: usize,
        within: Duration,
    ) -> (io::Result<usize>, usize, Instant) {
        let reads = Arc::new(AtomicUsize::new(0));
        let socket = Scripted {
            fail,
            fails,
            reads: Arc::clone(&reads),
            max: within,
        };
        let deadline = Instant::now() + within;
        let mut timed = Timed {
            socket: Box::new(socket),
            deadline,
        };
        let answer = timed.read(&mut [0; 8]);
        (answer, reads.load(Ordering::Relaxed), deadline)
    }

    #[test]
    fn an_interrupted_read_is_made_again_until_it_answers() {
        let (answer, reads, _) = read(io::ErrorKind::Interrupted, 3, Duration::from_secs(60));
        assert_eq!(answer.unwrap(), 4);
        assert_eq!(reads, 4);
    }

    #[test]
    fn interruptions_never_hold_a_read_past_its_deadline() {
        let within = Duration::from_millis(20);
        let (answer, reads, deadline) = read(io::ErrorKind::Interrupted, usize::MAX, within);
        assert_eq!(answer.unwrap_err().kind(), io::ErrorKind::TimedOut);
        assert!(reads > 0 && Instant::now() >= deadline);
    }

    #[test]
    fn other_errors_are_answered_at_once() {
        let within = Duration::from_secs(60);
        let (answer, reads, _) = read(io::ErrorKind::ConnectionReset, usize::MAX, within);
        assert_eq!(answer.unwrap_err().kind(), io::ErrorKind::ConnectionReset);
        assert_eq!(reads, 1);
    }
}
