//! Paced byte streams under Tokio: `tokio::io::copy` over TCP on loopback at
//! 1 MiB/s in real time (never early, within 1 %), and, in paused time,
//! chunks at their exact slots, cancel safety (a timed-out write or read
//! keeps its payment and its bytes; a dropped one gives its slot back) and a
//! failed payment as an `io::Error`.
#![cfg(feature = "tokio")]

#[cfg(feature = "keyed")]
use paceline::AsyncTake;
mod common;

use std::future::poll_fn;
use std::pin::Pin;
use std::time::Duration;

use common::{assert_paced, data};
use paceline::io::{PacedReader, PacedWriter};
use paceline::tokio::AsyncLimiter;
use paceline::Rate;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{timeout, Instant};

#[tokio::test]
async fn tokio_copy_into_a_paced_tcp_writer_goes_at_1_mib_per_second() {
    const BYTES: usize = 3 << 20;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let receiver = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut received = Vec::new();
        stream.read_to_end(&mut received).await.unwrap();
        received
    });
    let sent = data(BYTES);

    // 1 MiB/s with a burst of 64 KiB (62.5 ms of bytes: far more than the
    // timer's ~1 ms lateness). Its first permit taken, byte `k` may go `k`
    // intervals later, whatever the chunks.
    let limiter = AsyncLimiter::builder(Rate::per_second(1 << 20))
        .slack(64 * 1024 - 1)
        .build()
        .unwrap();
    let start = std::time::Instant::now();
    limiter.take().await;
    let mut paced = PacedWriter::new(TcpStream::connect(addr).await.unwrap(), limiter.clone());
    let (mut marks, mut copied) = (Vec::new(), 0);
    // In pieces of 100 000 bytes, to mark the progress.
    for mut piece in sent.chunks(100_000) {
        copied += tokio::io::copy(&mut piece, &mut paced).await.unwrap() as usize;
        marks.push((start.elapsed(), copied));
    }
    paced.shutdown().await.unwrap();

    assert_eq!(receiver.await.unwrap(), sent);
    // Tokio's clock, which the limiter reads, is `Instant`'s.
    assert_paced(
        "tokio::io::copy into a paced TCP writer",
        limiter.limiter().rate().interval(),
        &marks,
    );
}

/// 1 MB/s (1 µs a byte) with a burst of 64 000 bytes: 64 ms of bytes, so
/// chunks go on whole milliseconds, where Tokio's paused timer fires.
fn megabyte_per_second() -> AsyncLimiter {
    AsyncLimiter::builder(Rate::per_second(1_000_000))
        .slack(63_999)
        .build()
        .unwrap()
}

const MS: fn(u64) -> Duration = Duration::from_millis;

#[tokio::test(start_paused = true)]
async fn an_async_write_larger_than_the_burst_goes_in_chunks_of_one_burst() {
    let limiter = megabyte_per_second();
    let sent = data(200_000);
    let mut paced = PacedWriter::new(Vec::new(), limiter);
    let start = Instant::now();
    let mut chunks = Vec::new();
    let mut at = 0;
    while at < sent.len() {
        let n = paced.write(&sent[at..]).await.unwrap();
        chunks.push((n, start.elapsed()));
        at += n;
    }
    // The first burst at once (a fresh limiter), then 1 µs a byte.
    assert_eq!(
        chunks,
        [
            (64_000, MS(0)),
            (64_000, MS(64)),
            (64_000, MS(128)),
            (8_000, MS(136))
        ]
    );
    assert_eq!(paced.get_ref(), &sent);
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_write_keeps_its_payment_and_its_retry_pays_nothing_more() {
    let limiter = megabyte_per_second();
    let mut paced = PacedWriter::new(Vec::new(), limiter.clone());
    let start = Instant::now();
    assert_eq!(paced.write(&[1; 64_000]).await.unwrap(), 64_000);

    // The next burst's slot is at 64 ms; the take books it at 54 ms (10 ms
    // ahead) and the timeout cancels the write at 60 ms.
    assert!(timeout(MS(60), paced.write(&[2; 64_000])).await.is_err());
    assert_eq!(limiter.limiter().available(), 0); // the payment is still booked
    assert!(paced.get_ref().len() == 64_000 && paced.credit() == 0);

    // The retry goes on with that payment: its slot, not another one.
    assert_eq!(paced.write(&[2; 64_000]).await.unwrap(), 64_000);
    assert_eq!(start.elapsed(), MS(64));
    // The limiter saw 128 000 bytes: the next payment of 64 000 is at 128 ms.
    limiter.take_n(64_000).await.unwrap();
    assert_eq!(start.elapsed(), MS(128));
}

#[tokio::test(start_paused = true)]
async fn a_writer_dropped_with_a_booked_payment_gives_its_slot_back() {
    let limiter = megabyte_per_second();
    let mut paced = PacedWriter::new(Vec::new(), limiter.clone());
    let start = Instant::now();
    assert_eq!(paced.write(&[1; 64_000]).await.unwrap(), 64_000);
    assert!(timeout(MS(60), paced.write(&[2; 64_000])).await.is_err());
    assert_eq!(limiter.limiter().available(), 0);

    drop(paced);
    // As if the second write had never been made: the 60 ms since the
    // first (a fresh limiter's first request banks nothing) are free again.
    assert_eq!(limiter.limiter().available(), 60_000);
    limiter.take_n(64_000).await.unwrap();
    assert_eq!(start.elapsed(), MS(64));
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_read_keeps_its_bytes_and_its_payment() {
    let limiter = megabyte_per_second();
    let sent = data(200_000);
    let mut paced = PacedReader::new(&sent[..], limiter.clone());
    let start = Instant::now();
    let mut buf = vec![0; 100_000];
    assert_eq!(paced.read(&mut buf).await.unwrap(), 64_000);

    // The next 64 000 bytes are read from the source, and their payment
    // (slot at 64 ms, booked at 54 ms) is cancelled with the read at 60 ms.
    assert!(timeout(MS(60), paced.read(&mut buf)).await.is_err());
    assert_eq!(paced.buffer(), &sent[64_000..128_000]); // held, not lost
    assert_eq!(limiter.limiter().available(), 0);

    // The retry hands them out at their slot, paid once.
    let mut again = vec![0; 100_000];
    assert_eq!(paced.read(&mut again).await.unwrap(), 64_000);
    assert_eq!(start.elapsed(), MS(64));
    let mut received = sent[..64_000].to_vec();
    received.extend_from_slice(&again[..64_000]);
    paced.read_to_end(&mut received).await.unwrap();
    assert_eq!(received, sent);
    assert_eq!(start.elapsed(), MS(136)); // 200 000 bytes, each paid once
}

#[tokio::test(start_paused = true)]
async fn a_reader_dropped_with_a_booked_payment_gives_its_slot_back() {
    let limiter = megabyte_per_second();
    let sent = data(200_000);
    let mut paced = PacedReader::new(&sent[..], limiter.clone());
    let mut buf = vec![0; 100_000];
    assert_eq!(paced.read(&mut buf).await.unwrap(), 64_000);
    assert!(timeout(MS(60), paced.read(&mut buf)).await.is_err());
    assert_eq!(limiter.limiter().available(), 0);

    drop(paced);
    assert_eq!(limiter.limiter().available(), 60_000);
}

#[tokio::test(start_paused = true)]
async fn a_pending_read_leaves_the_callers_buffer_unfilled() {
    let limiter = megabyte_per_second();
    let sent = data(200_000);
    let mut paced = PacedReader::new(&sent[..], limiter);
    assert_eq!(paced.read(&mut [0; 64_000]).await.unwrap(), 64_000);
    // Polled by hand with one buffer across polls (as a caller may keep
    // it): while the payment is pending, nothing is in the buffer.
    let mut storage = [0; 64_000];
    let mut buf = ReadBuf::new(&mut storage);
    let polled = timeout(
        MS(60),
        poll_fn(|cx| Pin::new(&mut paced).poll_read(cx, &mut buf)),
    )
    .await;
    assert!(polled.is_err());
    assert!(buf.filled().is_empty());
    assert_eq!(paced.buffer().len(), 64_000);
    poll_fn(|cx| Pin::new(&mut paced).poll_read(cx, &mut buf))
        .await
        .unwrap();
    assert_eq!(buf.filled(), &sent[64_000..128_000]);
}

#[tokio::test(start_paused = true)]
async fn a_retried_read_with_a_smaller_buffer_gets_the_paid_bytes_in_pieces() {
    let limiter = megabyte_per_second();
    let sent = data(200_000);
    let mut paced = PacedReader::new(&sent[..], limiter.clone());
    let start = Instant::now();
    let mut received = vec![0; 64_000];
    assert_eq!(paced.read(&mut received).await.unwrap(), 64_000);
    assert!(timeout(MS(60), paced.read(&mut [0; 64_000])).await.is_err());

    // The 64 000 held bytes, paid for at 64 ms, handed out 10 000 at a time
    // without paying again.
    let mut small = [0; 10_000];
    for _ in 0..6 {
        assert_eq!(paced.read(&mut small).await.unwrap(), 10_000);
        assert_eq!(start.elapsed(), MS(64));
        received.extend_from_slice(&small);
    }
    assert_eq!(paced.read(&mut small).await.unwrap(), 4_000);
    received.extend_from_slice(&small[..4_000]);
    assert_eq!(start.elapsed(), MS(64));
    paced.read_to_end(&mut received).await.unwrap();
    assert_eq!(received, sent);
    assert_eq!(start.elapsed(), MS(136));
}

#[cfg(feature = "keyed")]
#[tokio::test]
async fn a_failed_async_payment_is_an_io_error_and_writes_nothing() {
    use paceline::io::{OnKey, PayError};
    use paceline::tokio::AsyncKeyedLimiter;
    use paceline::{keyed::WhenFull, Error, KeyedLimiter};
    use std::error::Error as _;
    use std::io;

    // One tracked key at most, refusing new ones while it is busy: "hog"
    // is busy for a second.
    let keyed = AsyncKeyedLimiter::from(
        KeyedLimiter::<String>::builder(Rate::per_second(1))
            .slack(0)
            .max_keys(1)
            .when_full(WhenFull::Refuse)
            .build()
            .unwrap(),
    );
    keyed.take("hog").await.unwrap();
    let mut paced = PacedWriter::new(Vec::new(), OnKey::new(keyed, "writer".to_string()));
    let e = paced.write(&[1; 10]).await.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::Other);
    assert_eq!(
        e.get_ref()
            .unwrap()
            .downcast_ref::<PayError>()
            .unwrap()
            .bytes(),
        1
    );
    assert!(matches!(
        e.source().and_then(|s| s.downcast_ref::<Error>()),
        Some(Error::TooManyKeys { max_keys: 1 })
    ));
    assert!(paced.get_ref().is_empty());
}

#[cfg(feature = "keyed")]
#[tokio::test]
async fn an_async_keyed_paced_writer_waits_without_counting_refusals() {
    use paceline::io::OnKey;
    use paceline::tokio::AsyncKeyedLimiter;
    use paceline::KeyedLimiter;

    // 1 MB/s per key, chunks of 1 000 bytes: 5 000 bytes wait 4 ms.
    let keyed = AsyncKeyedLimiter::from(
        KeyedLimiter::<String>::builder(Rate::per_second(1_000_000))
            .slack(999)
            .build()
            .unwrap(),
    );
    let mut paced = PacedWriter::new(Vec::new(), OnKey::new(keyed.clone(), "up".to_string()));
    let start = std::time::Instant::now();
    paced.write_all(&[3; 5_000]).await.unwrap();
    assert!(start.elapsed() >= Duration::from_millis(4));
    let stats = keyed.limiter().keyed_stats();
    assert_eq!((stats.admitted, stats.refused), (5, 0));
}
