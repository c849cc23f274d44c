//! stdin, read on a thread of its own into a small bounded channel, so a
//! work loop blocked on input still sees a stop signal (signal-hook's
//! handlers restart an interrupted `read`, so it would not return).

use std::fs::File;
use std::io::{self, Read};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, TryRecvError};
use std::thread;
use std::time::Duration;

use crate::pace::Pace;
use crate::signals::Flags;

/// How much one read asks for.
const CHUNK: usize = 64 * 1024;
/// Chunks read ahead of the work loop: bounded memory (4 × 64 KiB).
const AHEAD: usize = 4;
/// How often a loop waiting for input looks at the signal flags.
const POLL: Duration = Duration::from_millis(50);

/// What the work loop gets next.
pub enum Next {
    /// Bytes read.
    Data(Vec<u8>),
    /// End of input.
    Eof,
    /// A stop signal came while waiting for input.
    Stopped,
    /// Reading failed.
    Failed(io::Error),
}

/// The reading end of stdin.
pub struct Input {
    rx: Receiver<io::Result<Vec<u8>>>,
}

impl Input {
    /// Starts reading `file` (stdin) on its own thread.
    pub fn spawn(mut file: File) -> io::Result<Input> {
        let (tx, rx) = sync_channel(AHEAD);
        thread::Builder::new()
            .name("stdin".into())
            .spawn(move || loop {
                let mut buf = vec![0u8; CHUNK];
                match file.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => {
                        buf.truncate(n);
                        if tx.send(Ok(buf)).is_err() {
                            return;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                }
            })?;
        Ok(Input { rx })
    }

    /// The next chunk: at once if one is ready; otherwise runs `idle` (the
    /// lines loop flushes there) and waits, looking at the flags (and
    /// applying a SIGHUP) every [`POLL`].
    pub fn next(&self, flags: &Flags, pace: &Pace, idle: &mut dyn FnMut()) -> Next {
        let got = match self.rx.try_recv() {
            Ok(got) => got,
            Err(TryRecvError::Disconnected) => return Next::Eof,
            Err(TryRecvError::Empty) => {
                idle();
                loop {
                    if flags.stopping() {
                        return Next::Stopped;
                    }
                    match self.rx.recv_timeout(POLL) {
                        Ok(got) => break got,
                        Err(RecvTimeoutError::Timeout) => pace.reload_if_asked(),
                        Err(RecvTimeoutError::Disconnected) => return Next::Eof,
                    }
                }
            }
        };
        match got {
            Ok(data) => Next::Data(data),
            Err(e) => Next::Failed(e),
        }
    }
}
