//! Paced byte streams over `std::io`: real files and TCP on loopback at
//! 1 MiB/s (the pacing must never let a byte out early, and keeps the rate
//! within 1 %), chunks of one burst, pay-for-what-came, credit kept across a
//! short write, and a limiter failure as an `io::Error`.

mod common;

use std::fs::{self, File};
use std::io::{self, Cursor, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use common::{assert_paced, data};
use paceline::io::{PacedReader, PacedWriter};
use paceline::{clock::ManualClock, clock::StdClock, AtomicLimiter, Rate};

/// 1 MiB/s (an interval of 954 ns, rounded from 953.67).
const RATE: u64 = 1 << 20;
/// A burst of 64 KiB: 62.5 ms of bytes, far more than a late wake-up.
const SLACK: u64 = 64 * 1024 - 1;
/// What the real-time copies move: 3 MiB, about 3 s.
const COPY: usize = 3 << 20;

/// A limiter at [`RATE`] with a burst of 64 KiB, with its first permit
/// taken: from then on byte `k` may go `k` intervals later, whatever the
/// chunks, so `n` bytes take exactly `n` intervals.
///
/// On the OS's monotonic clock, as `Instant` (which the tests measure
/// with) is: the default clock, the TSC, may run some ppm apart from it
/// (219 ppm fast on the VM this was written on: 0.66 ms early over 3 s).
fn mib_per_second() -> AtomicLimiter<StdClock> {
    let limiter = AtomicLimiter::builder(Rate::per_second(RATE))
        .slack(SLACK)
        .clock(StdClock::new())
        .build()
        .unwrap();
    limiter.take();
    limiter
}

/// A file of its own in the temporary directory, removed when dropped.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str) -> TempFile {
        TempFile(std::env::temp_dir().join(format!("paceline-io-{}-{name}", std::process::id())))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

#[test]
fn a_file_copied_through_a_paced_reader_goes_at_1_mib_per_second() {
    let (src, dst) = (TempFile::new("src"), TempFile::new("dst"));
    let sent = data(COPY);
    fs::write(&src.0, &sent).unwrap();

    let start = Instant::now();
    let limiter = mib_per_second();
    let mut paced = PacedReader::new(File::open(&src.0).unwrap(), &limiter);
    let mut out = File::create(&dst.0).unwrap();
    let (mut marks, mut copied) = (Vec::new(), 0);
    loop {
        // In pieces of 100 000 bytes, to mark the progress.
        match io::copy(&mut (&mut paced).take(100_000), &mut out).unwrap() {
            0 => break,
            n => copied += n as usize,
        }
        marks.push((start.elapsed(), copied));
    }

    assert_eq!(fs::read(&dst.0).unwrap(), sent);
    let interval = limiter.rate().interval();
    assert_paced("file copy, paced reader", interval, &marks);
}

#[test]
fn a_tcp_stream_written_through_a_paced_writer_goes_at_1_mib_per_second() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let receiver = thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut received = Vec::new();
        stream.read_to_end(&mut received).unwrap();
        received
    });
    let sent = data(COPY);

    let start = Instant::now();
    let limiter = mib_per_second();
    let mut paced = PacedWriter::new(TcpStream::connect(addr).unwrap(), &limiter);
    let (mut marks, mut written) = (Vec::new(), 0);
    // Writes of 100 000 bytes: each larger than the burst, so split.
    for part in sent.chunks(100_000) {
        paced.write_all(part).unwrap();
        written += part.len();
        marks.push((start.elapsed(), written));
    }
    paced.get_ref().shutdown(Shutdown::Write).unwrap();

    assert_eq!(receiver.join().unwrap(), sent);
    let interval = limiter.rate().interval();
    assert_paced("TCP, paced writer", interval, &marks);
}

/// A limiter at 1 MB/s (1 µs a byte) with a burst of 64 000 bytes, on a
/// clock that jumps to whatever a waiter waits for.
fn megabyte_per_second_on(clock: &ManualClock) -> AtomicLimiter<ManualClock> {
    AtomicLimiter::builder(Rate::per_second(1_000_000))
        .slack(63_999)
        .clock(clock.clone())
        .build()
        .unwrap()
}

#[test]
fn a_write_larger_than_the_burst_goes_in_chunks_of_one_burst() {
    let clock = ManualClock::with_auto_advance();
    let limiter = megabyte_per_second_on(&clock);
    let sent = data(200_000);
    let mut paced = PacedWriter::new(Vec::new(), &limiter);
    let mut chunks = Vec::new();
    let mut at = 0;
    while at < sent.len() {
        let n = paced.write(&sent[at..]).unwrap();
        chunks.push((n, clock.elapsed()));
        at += n;
    }
    // Each chunk goes once all its bytes are paid for: the first burst at
    // once (a fresh limiter), then 1 µs a byte.
    let ms = Duration::from_millis;
    assert_eq!(
        chunks,
        [
            (64_000, ms(0)),
            (64_000, ms(64)),
            (64_000, ms(128)),
            (8_000, ms(136))
        ]
    );
    assert_eq!(paced.get_ref(), &sent);
    assert_eq!(paced.credit(), 0);
}

#[test]
fn write_all_pays_each_byte_once_across_short_inner_writes() {
    let clock = ManualClock::with_auto_advance();
    let limiter = megabyte_per_second_on(&clock);
    let sent = data(10_000);
    // A writer that takes at most 3 000 bytes, then nothing until drained.
    let mut paced = PacedWriter::new(Cursor::new(vec![0u8; 3_000].into_boxed_slice()), &limiter);
    let mut received = Vec::new();
    let mut at = 0;
    while at < sent.len() {
        match paced.write(&sent[at..]).unwrap() {
            0 => {
                let inner = paced.get_mut();
                received.extend_from_slice(&inner.get_ref()[..inner.position() as usize]);
                inner.set_position(0);
            }
            n => at += n,
        }
    }
    let inner = paced.get_ref();
    received.extend_from_slice(&inner.get_ref()[..inner.position() as usize]);
    assert_eq!(received, sent);
    // One payment of 10 000 bytes (a fresh limiter's first request goes at
    // once and banks nothing), written as 3 000, 3 000, 3 000 and 1 000
    // from credit: any second payment would have waited.
    assert_eq!(paced.credit(), 0);
    assert_eq!(clock.elapsed(), Duration::ZERO);
    limiter.take();
    assert_eq!(clock.elapsed(), Duration::from_micros(1));
}

#[test]
fn a_read_pays_for_the_bytes_that_came_not_for_the_buffer() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (go_on, wait) = std::sync::mpsc::channel::<()>();
    let sender = thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        stream.write_all(&[5; 100]).unwrap();
        let _ = wait.recv(); // keep the connection open meanwhile
    });
    let limiter = AtomicLimiter::builder(Rate::per_second(1_000_000))
        .slack(63_999)
        .full_credit(true)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let mut paced = PacedReader::new(TcpStream::connect(addr).unwrap(), &limiter);
    let mut buf = vec![0; 1 << 20];
    let n = paced.read(&mut buf).unwrap();
    assert!(n > 0 && n <= 100);
    assert_eq!(limiter.available(), 64_000 - n as u64);
    go_on.send(()).unwrap();
    sender.join().unwrap();
}

#[test]
fn a_read_returns_at_most_one_burst() {
    let clock = ManualClock::with_auto_advance();
    let limiter = megabyte_per_second_on(&clock);
    let sent = data(100_000);
    let mut paced = PacedReader::new(&sent[..], &limiter);
    let mut buf = vec![0; 1 << 20];
    assert_eq!(paced.read(&mut buf).unwrap(), 64_000);
    assert_eq!(paced.read(&mut buf).unwrap(), 36_000);
    assert_eq!(clock.elapsed(), Duration::from_millis(36));
    assert_eq!(paced.read(&mut buf).unwrap(), 0); // the end costs nothing
    assert_eq!(clock.elapsed(), Duration::from_millis(36));
}

/// A limiter's failure, on a keyed limiter that refuses new keys.
#[cfg(feature = "keyed")]
mod failed_payment {
    use paceline::Take;
    use std::error::Error as _;
    use std::io::{self, Read, Write};
    use std::time::Duration;

    use paceline::io::{OnKey, PacedReader, PacedWriter, PayError};
    use paceline::{clock::ManualClock, keyed::WhenFull, Error, KeyedLimiter, Rate};

    use super::data;

    /// A keyed limiter tracking at most one key, refusing new ones while it is
    /// busy, and its clock: "hog" is busy until the clock moves 1 s (only a
    /// wait moves it).
    fn keyed_with_one_busy_key() -> (KeyedLimiter<String, ManualClock>, ManualClock) {
        let clock = ManualClock::with_auto_advance();
        let keyed = KeyedLimiter::<String>::builder(Rate::per_second(1_000))
            .slack(999)
            .max_keys(1)
            .when_full(WhenFull::Refuse)
            .clock(clock.clone())
            .build()
            .unwrap();
        keyed.take_n("hog", 1_000).unwrap();
        (keyed, clock)
    }

    /// The `PayError` inside `e`, after checking the kind and the source.
    fn pay_error(e: &io::Error) -> &PayError {
        assert_eq!(e.kind(), io::ErrorKind::Other);
        assert!(
            matches!(
                e.source().and_then(|s| s.downcast_ref::<Error>()),
                Some(Error::TooManyKeys { max_keys: 1 })
            ),
            "{e:?}"
        );
        e.get_ref().unwrap().downcast_ref::<PayError>().unwrap()
    }

    #[test]
    fn a_failed_payment_is_an_io_error_and_the_bytes_it_was_for_are_kept() {
        let (keyed, clock) = keyed_with_one_busy_key();
        let sent = data(1_500);
        let mut paced = PacedReader::new(&sent[..], OnKey::new(&keyed, "reader".to_string()));
        let mut buf = vec![0; 4_096];

        let e = paced.read(&mut buf).unwrap_err();
        assert_eq!(pay_error(&e).bytes(), 1_000);
        assert!(
            e.to_string().contains("could not pay for 1000 bytes"),
            "{e}"
        );
        assert!(e.to_string().contains("tracked keys are busy"), "{e}");
        assert_eq!(paced.buffer(), &sent[..1_000]); // kept, not handed out
        assert!(paced.read(&mut buf).is_err()); // still refused, still kept

        // "hog" comes to rest and makes room: the kept bytes are paid for and
        // handed out, then the rest.
        clock.advance(Duration::from_secs(10));
        let mut received = Vec::new();
        paced.read_to_end(&mut received).unwrap();
        assert_eq!(received, sent);
    }

    #[test]
    fn a_failed_payment_writes_nothing() {
        let (keyed, _clock) = keyed_with_one_busy_key();
        let mut paced = PacedWriter::new(Vec::new(), OnKey::new(&keyed, "writer".to_string()));
        let e = paced.write(&[1; 300]).unwrap_err();
        assert_eq!(pay_error(&e).bytes(), 300);
        assert!(paced.get_ref().is_empty());
        assert_eq!(paced.credit(), 0);
    }
}

#[cfg(feature = "redis")]
#[test]
fn a_redis_server_that_cannot_be_reached_fails_the_write_with_its_error() {
    use paceline::io::OnKey;
    use paceline::redis::{Error as RedisError, RedisLimiter};
    use std::error::Error;

    // Nothing listens on port 1.
    let limiter = RedisLimiter::builder("redis://127.0.0.1:1/", Rate::per_second(1_000_000))
        .slack(63_999)
        .connect_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let mut paced = PacedWriter::new(Vec::new(), OnKey::new(limiter, "upload".to_string()));
    let e = paced.write(&[1; 10]).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::Other);
    let cause = e.source().and_then(|s| s.downcast_ref::<RedisError>());
    assert!(
        matches!(
            cause,
            Some(RedisError::Unavailable(_) | RedisError::Timeout)
        ),
        "{e:?}"
    );
    assert!(paced.get_ref().is_empty());
}

/// The wrappers are `Send` and `Sync` when what they wrap is, with or
/// without the `tokio` feature (its pending payment must not change that).
#[test]
fn the_wrappers_are_send_and_sync_like_what_they_wrap() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<PacedWriter<File, &AtomicLimiter>>();
    send_sync::<PacedReader<TcpStream, std::sync::Arc<AtomicLimiter>>>();
}
