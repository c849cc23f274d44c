//! A fault-injecting TCP proxy for tests: listens on a loopback port,
//! forwards every connection to an upstream server, and does to the bytes
//! what the link between two hosts does on a bad day, switched by
//! [`FaultProxy::set`] while traffic flows:
//!
//! | [`Fault`] | what the client sees |
//! |---|---|
//! | `None` | a clean link |
//! | `Latency { base, jitter }` | each chunk of the reply held `base` plus up to `jitter` |
//! | `BlackHole` | packets vanish, no reset: what is sent is read and dropped, nothing comes back. A connection open while it lasts (or made during it) stays dead after it ends, as TCP's does when its bytes were lost (a NAT or firewall that dropped its state) |
//! | `ResetMidReply` | requests reach the server; the next reply is cut after its first byte and the connection reset (`SO_LINGER` 0: an RST, not a FIN) |
//! | `Drip { every }` | replies come one byte at a time, `every` apart |
//! | `Partition` | nothing moves either way, and nothing is lost: held bytes flow, in order, when it heals (`set(Fault::None)`); a connection made during it reaches the server only then |
//!
//! Generic TCP: it knows nothing of the protocol (Redis, PostgreSQL,
//! memcached alike). All traffic stays on 127.0.0.1. Every loop is bounded
//! in time: each thread wakes at least every [`TICK`] to look at the fault
//! and the stop flag, and dropping the proxy closes every connection and
//! joins every thread.
//!
//! (Network namespaces could stand in for separate hosts, but creating one
//! needs privileges the test machines do not give; and `tc netem` is not
//! available. A proxy in user space needs neither.)

#![allow(dead_code)] // each user needs a different part

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often every thread looks at the fault and the stop flag: the
/// longest a switch waits to take effect on bytes not yet in flight.
pub const TICK: Duration = Duration::from_millis(5);

/// How long the proxy waits to connect upstream: the server is on this
/// machine.
const UPSTREAM_CONNECT: Duration = Duration::from_secs(2);

/// What the link does (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    None,
    Latency { base: Duration, jitter: Duration },
    BlackHole,
    ResetMidReply,
    Drip { every: Duration },
    Partition,
}

impl Fault {
    /// A short name, for tables and messages.
    pub fn name(&self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::Latency { .. } => "latency",
            Fault::BlackHole => "black hole",
            Fault::ResetMidReply => "reset mid-reply",
            Fault::Drip { .. } => "drip",
            Fault::Partition => "partition",
        }
    }
}

struct Shared {
    fault: Mutex<Fault>,
    /// Bumped by every `set`: a black hole marks the connections open when
    /// it starts, even if it ends before their threads look again.
    black_holes: AtomicU64,
    stop: AtomicBool,
    /// Connections open now (client side).
    open: AtomicUsize,
    /// Connections accepted so far.
    accepted: AtomicUsize,
    /// Replies cut by `ResetMidReply`.
    resets: AtomicUsize,
    /// A cheap jitter source (xorshift).
    seed: AtomicU64,
}

impl Shared {
    fn fault(&self) -> Fault {
        *self.fault.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn jitter(&self, max: Duration) -> Duration {
        if max.is_zero() {
            return Duration::ZERO;
        }
        let mut x = self.seed.load(Ordering::Relaxed) | 1;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.seed.store(x, Ordering::Relaxed);
        Duration::from_nanos(x % (max.as_nanos() as u64 + 1))
    }

    /// Sleeps `d` in ticks; false if the proxy stopped meanwhile.
    fn sleep(&self, d: Duration) -> bool {
        let until = Instant::now() + d;
        while !self.stopped() {
            let now = Instant::now();
            if now >= until {
                return true;
            }
            std::thread::sleep((until - now).min(TICK));
        }
        false
    }

    /// Waits while the link is partitioned; false if the proxy stopped.
    fn wait_out_partition(&self) -> bool {
        while self.fault() == Fault::Partition {
            if !self.sleep(TICK) {
                return false;
            }
        }
        !self.stopped()
    }
}

/// One proxied connection's state, shared by its two pumps.
struct Link {
    /// Lost bytes (a black hole): dead for good.
    dead: AtomicBool,
    /// Either side closed: both pumps end.
    closed: AtomicBool,
    /// The black-hole generation this link last saw.
    seen: AtomicU64,
    /// Cut by `ResetMidReply`: the client's socket is closed without a
    /// FIN, so that its last close sends an RST.
    reset: AtomicBool,
}

pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
    acceptor: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// A proxy on a free loopback port in front of `upstream`, with a
    /// clean link.
    pub fn start(upstream: SocketAddr) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy's port");
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            fault: Mutex::new(Fault::None),
            black_holes: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            open: AtomicUsize::new(0),
            accepted: AtomicUsize::new(0),
            resets: AtomicUsize::new(0),
            seed: AtomicU64::new(0x9e37_79b9_7f4a_7c15),
        });
        let threads = Arc::new(Mutex::new(Vec::new()));
        let acceptor = {
            let (shared, threads) = (Arc::clone(&shared), Arc::clone(&threads));
            std::thread::Builder::new()
                .name("fault-proxy-accept".into())
                .spawn(move || accept_loop(listener, upstream, shared, threads))
                .unwrap()
        };
        FaultProxy {
            addr,
            shared,
            threads,
            acceptor: Some(acceptor),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Switches the link's fault; takes effect within [`TICK`], on
    /// connections open now and to come. `Fault::None` heals it.
    pub fn set(&self, fault: Fault) {
        if fault == Fault::BlackHole {
            self.shared.black_holes.fetch_add(1, Ordering::SeqCst);
        }
        *self
            .shared
            .fault
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = fault;
    }

    pub fn fault(&self) -> Fault {
        self.shared.fault()
    }

    /// Client connections open through the proxy now.
    pub fn open_connections(&self) -> usize {
        self.shared.open.load(Ordering::SeqCst)
    }

    /// Client connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Replies cut by `ResetMidReply` so far.
    pub fn resets(&self) -> usize {
        self.shared.resets.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        let threads =
            std::mem::take(&mut *self.threads.lock().unwrap_or_else(PoisonError::into_inner));
        for t in threads {
            let _ = t.join();
        }
    }
}

fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    shared: Arc<Shared>,
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
) {
    while !shared.stopped() {
        match listener.accept() {
            Ok((client, _)) => {
                shared.accepted.fetch_add(1, Ordering::SeqCst);
                shared.open.fetch_add(1, Ordering::SeqCst);
                let s = Arc::clone(&shared);
                let handle = std::thread::Builder::new()
                    .name("fault-proxy-conn".into())
                    .spawn(move || {
                        serve(client, upstream, &s);
                        s.open.fetch_sub(1, Ordering::SeqCst);
                    })
                    .unwrap();
                let mut threads = threads.lock().unwrap_or_else(PoisonError::into_inner);
                threads.retain(|t| !t.is_finished());
                threads.push(handle);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(TICK),
            Err(_) => std::thread::sleep(TICK),
        }
    }
}

/// One connection: connects upstream (once the link lets it), then pumps
/// both ways until either side closes or the proxy stops.
fn serve(client: TcpStream, upstream: SocketAddr, shared: &Arc<Shared>) {
    let _ = client.set_nodelay(true);
    let link = Arc::new(Link {
        dead: AtomicBool::new(false),
        closed: AtomicBool::new(false),
        seen: AtomicU64::new(shared.black_holes.load(Ordering::SeqCst)),
        reset: AtomicBool::new(false),
    });
    // A connection made in a black hole is dead from the start; one made in
    // a partition waits for it to heal before it reaches the server.
    let server = loop {
        if shared.stopped() {
            return;
        }
        match shared.fault() {
            Fault::BlackHole => {
                link.dead.store(true, Ordering::SeqCst);
                // Read and drop, never answer, until the client gives up.
                swallow(&client, &link, shared);
                return;
            }
            Fault::Partition => {
                shared.sleep(TICK);
            }
            _ => match TcpStream::connect_timeout(&upstream, UPSTREAM_CONNECT) {
                Ok(s) => break s,
                Err(_) => return, // closes the client: the server is down
            },
        }
    };
    let _ = server.set_nodelay(true);
    let (c2, s2) = match (client.try_clone(), server.try_clone()) {
        (Ok(c), Ok(s)) => (c, s),
        _ => return,
    };
    let up = {
        let (shared, link) = (Arc::clone(shared), Arc::clone(&link));
        std::thread::Builder::new()
            .name("fault-proxy-up".into())
            .spawn(move || pump(c2, s2, Direction::Request, &shared, &link))
            .unwrap()
    };
    pump(server, client, Direction::Reply, shared, &link);
    let _ = up.join();
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    /// Client to server.
    Request,
    /// Server to client.
    Reply,
}

/// Reads what the client sends and drops it, until it closes (or the
/// proxy stops): a dead connection.
fn swallow(client: &TcpStream, link: &Link, shared: &Shared) {
    let _ = client.set_read_timeout(Some(TICK));
    let mut buf = [0u8; 4096];
    let mut reader = client;
    while !shared.stopped() && !link.closed.load(Ordering::SeqCst) {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    link.closed.store(true, Ordering::SeqCst);
    let _ = client.shutdown(Shutdown::Both);
}

/// Copies `from` to `to` in one direction, doing the fault to the bytes.
fn pump(mut from: TcpStream, mut to: TcpStream, dir: Direction, shared: &Shared, link: &Link) {
    let _ = from.set_read_timeout(Some(TICK));
    let mut buf = [0u8; 16 * 1024];
    let client = match dir {
        Direction::Request => &from,
        Direction::Reply => &to,
    };
    let client = client.try_clone().ok();
    'outer: while !shared.stopped() && !link.closed.load(Ordering::SeqCst) {
        // A black hole that started since this link last looked kills it,
        // even if it is over by now.
        let holes = shared.black_holes.load(Ordering::SeqCst);
        if link.seen.swap(holes, Ordering::SeqCst) != holes || shared.fault() == Fault::BlackHole {
            link.dead.store(true, Ordering::SeqCst);
        }
        if link.dead.load(Ordering::SeqCst) {
            if dir == Direction::Request {
                // The client's side: read and drop until it closes.
                if let Some(client) = &client {
                    swallow(client, link, shared);
                }
            } else {
                // The server's side: whatever it still says is lost.
                let _ = from.read(&mut buf);
            }
            continue;
        }
        if shared.fault() == Fault::Partition {
            // Read nothing: the bytes wait in the kernel's buffers.
            shared.sleep(TICK);
            continue;
        }
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(_) => break,
        };
        let mut chunk = &buf[..n];
        // The fault as the chunk leaves (it may change while it waits).
        loop {
            if !shared.wait_out_partition() {
                break 'outer;
            }
            let fault = shared.fault();
            if fault == Fault::BlackHole {
                link.dead.store(true, Ordering::SeqCst);
                continue 'outer;
            }
            match (fault, dir) {
                (Fault::Latency { base, jitter }, Direction::Reply) => {
                    if !shared.sleep(base + shared.jitter(jitter)) {
                        break 'outer;
                    }
                    // Delivered as the link is now.
                    if shared.fault() != fault {
                        continue;
                    }
                    if to.write_all(chunk).is_err() {
                        break 'outer;
                    }
                    break;
                }
                (Fault::Drip { every }, Direction::Reply) => {
                    if to.write_all(&chunk[..1]).is_err() {
                        break 'outer;
                    }
                    chunk = &chunk[1..];
                    if chunk.is_empty() {
                        break;
                    }
                    if !shared.sleep(every) {
                        break 'outer;
                    }
                }
                (Fault::ResetMidReply, Direction::Reply) => {
                    // One byte: a chunk may hold several replies (of calls
                    // multiplexed on one connection), and none may pass
                    // whole; no reply is shorter than two bytes.
                    let _ = to.write_all(&chunk[..1]);
                    let _ = to.flush();
                    shared.resets.fetch_add(1, Ordering::SeqCst);
                    // SO_LINGER 0: the last close sends an RST, not a FIN.
                    let _ = socket2::SockRef::from(&to).set_linger(Some(Duration::ZERO));
                    link.reset.store(true, Ordering::SeqCst);
                    break 'outer;
                }
                _ => {
                    if to.write_all(chunk).is_err() {
                        break 'outer;
                    }
                    break;
                }
            }
        }
    }
    link.closed.store(true, Ordering::SeqCst);
    // The client's socket is `from` for requests, `to` for replies; after a
    // reset it is only closed (an RST), never shut down (a FIN).
    let reset = link.reset.load(Ordering::SeqCst);
    let (client, server) = match dir {
        Direction::Request => (&from, &to),
        Direction::Reply => (&to, &from),
    };
    if !reset {
        let _ = client.shutdown(Shutdown::Both);
    }
    let _ = server.shutdown(Shutdown::Both);
}
