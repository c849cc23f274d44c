//! The command line: what to pace, how fast, and what to tell the user.
//! Every mistake is a [`Usage`] error naming the bad value (exit status 2).

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

use paceline::clock::StdClock;
use paceline::config::fleet::DEFAULT_NAME;
use paceline::{AtomicLimiter, Rate, Slack};

use crate::units::{self, ByteRate};

/// The most commands `--jobs` runs at once. Every running command is polled
/// for its end once a millisecond, and each is a process of the user's
/// quota: past a thousand, paceline would spend its time polling, and a
/// larger number is more likely a slip than a plan.
pub const MAX_JOBS: usize = 1024;

/// `paceline --help`.
pub const HELP: &str = "\
paceline: pace lines, commands or bytes at a steady rate with a bounded burst

usage: paceline [OPTIONS] RATE                 stdin lines to stdout, each on time
       paceline [OPTIONS] RATE --exec CMD [ARG...]   run CMD per line ({} = the line)
       paceline [OPTIONS] --redis URL --key KEY      KEY's limit in the fleet's
                                               limits document (also --postgres)
       paceline [OPTIONS] --bytes RATE         a byte stream, not split at lines
       paceline [OPTIONS] --unlimited          count only (no pacing)
       paceline limits get|set|watch|check ...  a fleet's limits document
                                               (paceline limits --help)

RATE       COUNT/PERIOD: 5/s, 100/min, 20/3s, 1/250ms (units ns us ms s min h d)
           with --bytes: SIZE/PERIOD: 1MiB/s, 500K/s, 64KB/250ms
           (K, KiB = 1024; KB = 1000; likewise M, G, T)

options:
  -b, --burst N        at most N lines (with --bytes: N bytes, e.g. 64KiB) at
                       once after idle [default: 10, or 10 ms of the rate if more]
      --bytes RATE     pace the bytes of stdin; reads larger than the burst
                       go out in chunks of one burst
  -e, --exec CMD ARG.. run CMD once per line (the rest of the command line);
                       every {} in CMD/ARGs is replaced by the line, or the
                       line is the last argument if there is no {}; no shell
  -j, --jobs N         with --exec: at most N commands at once, N up to 1024
                       [default: 1]
      --drop           refuse instead of waiting: lines over the limit are
                       dropped (counted in the summary)
      --redis URL      share the limit through Redis (with --key): every
                       paceline using the same server and key draws from one
                       schedule, on any host
      --postgres CONN  share the limit through a PostgreSQL table instead
                       (with --key; CONN as libpq takes it: \"host=/run/pg
                       user=app\" or postgres://...); the table is created if
                       missing
      --memcached ADDR share the limit through memcached instead (with --key;
                       ADDR host:port or unix:/path); the clients' clocks
                       decide, so keep them in sync (NTP)
      --key KEY        the shared limit's name in Redis, PostgreSQL or
                       memcached; without RATE (Redis, PostgreSQL), the rate
                       and burst are KEY's in the limits document there
                       (its override, else its default), followed as it
                       changes
      --limits NAME    that document's name [default: paceline:limits]
      --rate-file PATH read the rate (and optionally a burst: \"10/s 20\") from
                       PATH, and again on SIGHUP; RATE may then be omitted
  -s, --size N         the total (lines, or bytes with --bytes) for the ETA;
                       with --bytes a regular file on stdin gives it itself
      --unlimited      no pacing (for comparing, or counting a stream)
  -q, --quiet          no progress and no summary
  -h, --help           this help;  -V, --version: the version

Progress is drawn on stderr while it is a terminal; a one-line summary ends
every run. SIGINT/SIGTERM: stop taking input, finish, summarise. SIGHUP:
re-read --rate-file (a bad file keeps the rate in force).

exit status: 0 done (a closed stdout downstream, too); 1 a runtime error
(stdin, Redis, PostgreSQL); 2 a bad argument; 130/143 ended by SIGINT/SIGTERM;
with --exec, as xargs: 123 a command exited 1-254 (or a line that cannot
be an argument, such as one holding a NUL byte, was skipped), 124 one exited 255,
125 one was killed by a signal, 126 CMD cannot run, 127 CMD not found.
";

/// What the input is and what becomes of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Lines of stdin to stdout.
    Lines,
    /// A command per line.
    Exec {
        /// The program and its arguments, `{}` not yet replaced.
        command: Vec<OsString>,
        /// At most this many at once.
        jobs: usize,
    },
    /// The bytes of stdin to stdout.
    Bytes,
}

/// A limit as given: a rate of lines (permits) or of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Given {
    /// Lines (or commands) per period.
    Lines(Rate),
    /// Bytes per period.
    Bytes(ByteRate),
}

impl Given {
    /// The limiter's rate: lines, or units of bytes.
    pub fn rate(&self) -> Rate {
        match self {
            Given::Lines(r) => *r,
            Given::Bytes(b) => b.rate,
        }
    }

    /// Bytes per permit (1 for lines).
    pub fn unit(&self) -> u64 {
        match self {
            Given::Lines(_) => 1,
            Given::Bytes(b) => b.unit,
        }
    }

    /// Permits per second, in the user's units (lines or bytes).
    pub fn per_second(&self) -> f64 {
        match self {
            Given::Lines(r) => r.per_second_f64(),
            Given::Bytes(b) => b.bytes as f64 / b.period.as_secs_f64(),
        }
    }
}

impl fmt::Display for Given {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Given::Lines(r) => write!(f, "{r}"),
            Given::Bytes(b) => write!(f, "{b}"),
        }
    }
}

/// A rate with its burst, resolved for the limiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// The rate.
    pub given: Given,
    /// The limiter's slack, in its permits.
    pub slack: Slack,
}

impl Limit {
    /// `given` with a burst of `burst` lines or bytes (None: the default).
    ///
    /// # Errors
    /// A burst of 0, or one that banks more time than the limiter can
    /// (about 146 years of the rate): bad input, named.
    pub fn new(given: Given, burst: Option<u64>) -> Result<Limit, Usage> {
        let slack = match burst {
            None => Slack::DEFAULT,
            Some(0) => return Err(Usage("the burst must be at least 1, got 0".into())),
            // A burst of N units is a slack of N - 1; bytes round up to units.
            Some(n) => Slack::permits(n.div_ceil(given.unit()) - 1),
        };
        // The library's own check of `slack * interval`, on a throwaway
        // limiter, so that a burst too large is refused here (status 2),
        // not when the run builds its limiter (status 1).
        if AtomicLimiter::builder(given.rate())
            .slack(slack)
            .clock(StdClock::new())
            .build()
            .is_err()
        {
            return Err(Usage(match (burst, given) {
                (Some(n), Given::Bytes(_)) => {
                    format!("bad burst {n} bytes: at {given} it banks more than 146 years")
                }
                (Some(n), Given::Lines(_)) => {
                    format!("bad burst {n}: at {given} it banks more than 146 years")
                }
                (None, _) => format!(
                    "rate {given}: the default burst banks more than 146 years at it \
                     (give a smaller --burst)"
                ),
            }));
        }
        Ok(Limit { given, slack })
    }
}

/// Everything the command line says.
#[derive(Debug, Clone)]
pub struct Args {
    /// Lines, commands or bytes.
    pub mode: Mode,
    /// The limit in force at the start; `None` with `--unlimited`.
    pub limit: Option<Limit>,
    /// `--burst` as given (lines or bytes), kept for `--rate-file` reloads.
    pub burst: Option<u64>,
    /// `--drop`.
    pub drop: bool,
    /// `--redis URL`, `--postgres CONN` or `--memcached ADDR`, and `--key KEY`.
    pub shared: Option<(Server, String)>,
    /// `--rate-file PATH`.
    pub rate_file: Option<PathBuf>,
    /// The limits document to read the limit from (no RATE, a shared
    /// limit in Redis or PostgreSQL): its name.
    pub limits: Option<String>,
    /// `--size N`.
    pub size: Option<u64>,
    /// `-q`.
    pub quiet: bool,
}

/// A usage error: the message names the bad value. Exit status 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usage(pub String);

/// Where a shared limit is kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Server {
    /// `--redis URL`.
    Redis(String),
    /// `--postgres CONN`.
    Postgres(String),
    /// `--memcached ADDR`.
    Memcached(String),
}

impl Server {
    /// The flag that named it.
    pub fn flag(&self) -> &'static str {
        match self {
            Server::Redis(_) => "--redis",
            Server::Postgres(_) => "--postgres",
            Server::Memcached(_) => "--memcached",
        }
    }

    /// The URL or connection string.
    pub fn address(&self) -> &str {
        match self {
            Server::Redis(a) | Server::Postgres(a) | Server::Memcached(a) => a,
        }
    }
}

impl fmt::Display for Usage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<lexopt::Error> for Usage {
    fn from(e: lexopt::Error) -> Usage {
        Usage(e.to_string())
    }
}

/// What the command line asks for: a run, or help / version text.
#[derive(Debug)]
pub enum Parsed {
    /// Pace.
    Run(Box<Args>),
    /// Print this and exit 0.
    Print(String),
}

/// Parses a rate of lines (`bytes == false`) or bytes.
pub fn parse_rate(s: &str, bytes: bool) -> Result<Given, String> {
    if bytes {
        units::parse_byte_rate(s).map(Given::Bytes)
    } else {
        s.trim()
            .parse::<Rate>()
            .map(Given::Lines)
            .map_err(|e| format!("bad rate {s:?}: {e}"))
    }
}

/// Parses `--burst`'s value: a count of lines, or a size with `--bytes`.
fn parse_burst(s: &str, bytes: bool) -> Result<u64, Usage> {
    if bytes {
        units::parse_size(s).map_err(|e| Usage(format!("bad --burst: {e}")))
    } else {
        s.trim().parse::<u64>().map_err(|_| {
            Usage(format!(
                "bad --burst {s:?}: expected a whole number of lines, at least 1"
            ))
        })
    }
}

/// A rate file's content: `RATE [BURST]`.
pub fn parse_rate_file(
    text: &str,
    bytes: bool,
    default_burst: Option<u64>,
) -> Result<Limit, String> {
    let mut words = text.split_whitespace();
    let rate = words
        .next()
        .ok_or("empty: expected a rate such as \"10/s\", optionally followed by a burst")?;
    let given = parse_rate(rate, bytes)?;
    let burst = match words.next() {
        None => default_burst,
        Some(b) => Some(parse_burst(b, bytes).map_err(|u| u.0)?),
    };
    if let Some(extra) = words.next() {
        return Err(format!("unexpected {extra:?} after the rate and burst"));
    }
    Limit::new(given, burst).map_err(|u| u.0)
}

/// Parses the command line (without the program name).
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Parsed, Usage> {
    use lexopt::prelude::*;

    let mut p = lexopt::Parser::from_args(args);
    let mut rate: Option<String> = None;
    let mut bytes: Option<String> = None;
    let mut burst: Option<String> = None;
    let mut exec: Option<Vec<OsString>> = None;
    let mut jobs: Option<String> = None;
    let mut drop = false;
    let mut redis: Option<String> = None;
    let mut postgres: Option<String> = None;
    let mut memcached: Option<String> = None;
    let mut key: Option<String> = None;
    let mut limits: Option<String> = None;
    let mut rate_file: Option<PathBuf> = None;
    let mut size: Option<String> = None;
    let mut unlimited = false;
    let mut quiet = false;

    while let Some(arg) = p.next()? {
        match arg {
            Short('h') | Long("help") => return Ok(Parsed::Print(HELP.to_owned())),
            Short('V') | Long("version") => {
                return Ok(Parsed::Print(format!(
                    "paceline {}\n",
                    env!("CARGO_PKG_VERSION")
                )))
            }
            Short('b') | Long("burst") => burst = Some(p.value()?.string()?),
            Long("bytes") => bytes = Some(p.value()?.string()?),
            Short('e') | Long("exec") => {
                let command: Vec<OsString> = p.raw_args()?.collect();
                if command.is_empty() {
                    return Err(Usage("--exec needs a command to run".into()));
                }
                exec = Some(command);
            }
            Short('j') | Long("jobs") => jobs = Some(p.value()?.string()?),
            Long("drop") => drop = true,
            Long("redis") => redis = Some(p.value()?.string()?),
            Long("postgres") => postgres = Some(p.value()?.string()?),
            Long("memcached") => memcached = Some(p.value()?.string()?),
            Long("key") => key = Some(p.value()?.string()?),
            Long("limits") => limits = Some(p.value()?.string()?),
            Long("rate-file") => rate_file = Some(p.value()?.into()),
            Short('s') | Long("size") => size = Some(p.value()?.string()?),
            Long("unlimited") => unlimited = true,
            Short('q') | Long("quiet") => quiet = true,
            Value(v) => {
                let v = v.string()?;
                if let Some(first) = &rate {
                    return Err(Usage(format!(
                        "unexpected argument {v:?}: the rate is already {first:?} \
                         (to run a command per line, put it after --exec)"
                    )));
                }
                rate = Some(v);
            }
            _ => return Err(arg.unexpected().into()),
        }
    }

    let is_bytes = bytes.is_some();
    if let (Some(r), Some(b)) = (&rate, &bytes) {
        return Err(Usage(format!(
            "two rates, {r:?} and --bytes {b:?}: give the byte rate to --bytes only"
        )));
    }
    let rate = bytes.or(rate);

    let mode = match exec {
        Some(command) => {
            if is_bytes {
                return Err(Usage(
                    "--exec runs a command per line; it cannot pace --bytes".into(),
                ));
            }
            let jobs = match jobs {
                None => 1,
                Some(j) => match j.trim().parse::<u64>() {
                    Ok(n @ 1..) if n <= MAX_JOBS as u64 => n as usize,
                    _ => {
                        return Err(Usage(format!(
                            "bad --jobs {j:?}: expected a whole number from 1 to {MAX_JOBS}"
                        )))
                    }
                },
            };
            Mode::Exec { command, jobs }
        }
        None if jobs.is_some() => return Err(Usage("--jobs is for --exec".into())),
        None if is_bytes => Mode::Bytes,
        None => Mode::Lines,
    };
    if drop && is_bytes {
        return Err(Usage(
            "--drop drops whole lines; it does not apply to --bytes".into(),
        ));
    }

    let burst_text = burst;
    let burst = burst_text
        .as_deref()
        .map(|b| parse_burst(b, is_bytes))
        .transpose()?;
    let size = size
        .map(|s| {
            if is_bytes {
                units::parse_size(&s).map_err(|e| Usage(format!("bad --size: {e}")))
            } else {
                s.trim().parse::<u64>().map_err(|_| {
                    Usage(format!(
                        "bad --size {s:?}: expected a whole number of lines"
                    ))
                })
            }
        })
        .transpose()?;

    let servers: Vec<Server> = [
        redis.map(Server::Redis),
        postgres.map(Server::Postgres),
        memcached.map(Server::Memcached),
    ]
    .into_iter()
    .flatten()
    .collect();
    let server = match servers.as_slice() {
        [a, b, ..] => {
            return Err(Usage(format!(
                "{} and {}: a limit is kept in one of them",
                a.flag(),
                b.flag()
            )))
        }
        [one] => Some(one.clone()),
        [] => None,
    };
    let shared = match (server, key) {
        (Some(server), Some(key)) if !key.is_empty() => Some((server, key)),
        (Some(server), _) => {
            return Err(Usage(format!(
                "{} needs --key KEY: the name of the shared limit",
                server.flag()
            )))
        }
        (None, Some(k)) => {
            return Err(Usage(format!(
                "--key {k:?} needs --redis URL, --postgres CONN or --memcached ADDR"
            )))
        }
        (None, None) => None,
    };
    let redis = &shared;
    if let Some(name) = limits
        .as_ref()
        .filter(|_| rate.is_some() || rate_file.is_some())
    {
        return Err(Usage(format!(
            "--limits {name:?} reads the rate from a limits document: give no RATE or --rate-file"
        )));
    }

    let limit = if unlimited {
        if let Some(r) = &rate {
            return Err(Usage(format!(
                "--unlimited with a rate ({r:?}): choose one"
            )));
        }
        if redis.is_some() || drop || rate_file.is_some() || burst.is_some() {
            return Err(Usage(
                "--unlimited does not pace: --redis, --postgres, --memcached, --drop, --burst and --rate-file need a rate"
                    .into(),
            ));
        }
        None
    } else {
        match (&rate, &rate_file) {
            (Some(r), _) => {
                let given = parse_rate(r, is_bytes).map_err(Usage)?;
                Some(Limit::new(given, burst).map_err(|u| match &burst_text {
                    // A size names the bytes it came to, and the text typed.
                    Some(text) if is_bytes => Usage(format!("--burst {text:?}: {u}")),
                    _ => u,
                })?)
            }
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    Usage(format!("cannot read --rate-file {}: {e}", path.display()))
                })?;
                Some(
                    parse_rate_file(&text, is_bytes, burst)
                        .map_err(|e| Usage(format!("--rate-file {}: {e}", path.display())))?,
                )
            }
            // The rate is the limits document's, read when the run starts.
            (None, None) => match (redis, burst) {
                (Some((Server::Memcached(_), _)), _) => {
                    return Err(Usage(
                        "missing RATE, such as 5/s: memcached holds no limits document to \
                         read one from"
                            .into(),
                    ))
                }
                (Some(_), Some(_)) => {
                    return Err(Usage(
                        "--burst without RATE: the limits document's limit for the key sets \
                         the burst (or give RATE too)"
                            .into(),
                    ))
                }
                (Some(_), None) => None,
                (None, _) => {
                    return Err(Usage(
                        "missing RATE, such as 5/s (or --rate-file PATH, --unlimited, or \
                         --redis URL --key KEY for the limits document's)"
                            .into(),
                    ))
                }
            },
        }
    };
    let limits = match (&limit, redis) {
        (None, Some(_)) if !unlimited => Some(limits.unwrap_or_else(|| DEFAULT_NAME.to_owned())),
        _ if limits.is_some() => {
            return Err(Usage(
                "--limits NAME needs --redis URL or --postgres CONN, and --key KEY".into(),
            ))
        }
        _ => None,
    };

    Ok(Parsed::Run(Box::new(Args {
        mode,
        limit,
        burst,
        drop,
        shared,
        rate_file,
        limits,
        size,
        quiet,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Args, Usage> {
        match parse(args.iter().map(OsString::from))? {
            Parsed::Run(a) => Ok(*a),
            Parsed::Print(_) => panic!("help"),
        }
    }

    #[test]
    fn a_rate_alone_paces_lines_with_the_default_burst() {
        let a = run(&["5/s"]).unwrap();
        assert_eq!(a.mode, Mode::Lines);
        let l = a.limit.unwrap();
        assert_eq!(l.given, Given::Lines(Rate::per_second(5)));
        assert_eq!(l.slack, Slack::DEFAULT);
    }

    #[test]
    fn burst_n_is_slack_n_minus_one() {
        let l = run(&["--burst", "3", "5/s"]).unwrap().limit.unwrap();
        assert_eq!(l.slack, Slack::permits(2));
        let l = run(&["--bytes", "1MiB/s", "-b", "64KiB"])
            .unwrap()
            .limit
            .unwrap();
        // 1 MiB/s is paced in 2-byte units: 64 KiB is 32768 units.
        assert_eq!(l.slack, Slack::permits(32_767));
        assert!(run(&["-b", "0", "5/s"])
            .unwrap_err()
            .0
            .contains("at least 1"));
    }

    #[test]
    fn exec_takes_the_rest_of_the_line() {
        let a = run(&["2/s", "-j", "3", "--exec", "echo", "-n", "{}", "--drop"]).unwrap();
        assert_eq!(
            a.mode,
            Mode::Exec {
                command: ["echo", "-n", "{}", "--drop"].map(OsString::from).to_vec(),
                jobs: 3
            }
        );
        assert!(!a.drop, "--drop after --exec belongs to the command");
        assert!(
            HELP.contains(&format!("N up to {MAX_JOBS}")),
            "--help says the bound"
        );
    }

    #[test]
    fn mistakes_name_the_bad_value() {
        for (args, needle) in [
            (&["5/x"][..], "\"5/x\""),
            (&["abc"][..], "\"abc\""),
            (&["0/s"][..], "\"0/s\""),
            (&["--bytes", "1XB/s"][..], "\"1XB/s\""),
            (&["-b", "many", "5/s"][..], "\"many\""),
            (&["--jobs", "0", "5/s", "--exec", "true"][..], "\"0\""),
            (&["--frobnicate", "5/s"][..], "--frobnicate"),
            (&["5/s", "6/s"][..], "\"6/s\""),
            (&["--key", "k", "5/s"][..], "\"k\""),
            (&["5/s", "--bytes", "1M/s"][..], "\"5/s\""),
            (&["--size", "lots", "5/s"][..], "\"lots\""),
        ] {
            let e = run(args).unwrap_err().0;
            assert!(e.contains(needle), "{args:?}: {e}");
        }
        assert!(run(&[]).unwrap_err().0.contains("missing RATE"));
        assert!(run(&["--redis", "redis://x/", "5/s"])
            .unwrap_err()
            .0
            .contains("--key"));
        assert!(run(&["--bytes", "1M/s", "--drop"]).is_err());
        assert!(run(&["--exec"]).is_err());
    }

    #[test]
    fn rate_files_hold_a_rate_and_maybe_a_burst() {
        let l = parse_rate_file("10/s\n", false, None).unwrap();
        assert_eq!(
            (l.given.rate(), l.slack),
            (Rate::per_second(10), Slack::DEFAULT)
        );
        let l = parse_rate_file(" 10/s 4 ", false, None).unwrap();
        assert_eq!(l.slack, Slack::permits(3));
        assert!(parse_rate_file("", false, None).is_err());
        assert!(parse_rate_file("10/q", false, None)
            .unwrap_err()
            .contains("\"10/q\""));
        assert!(parse_rate_file("10/s 4 5", false, None).is_err());
    }
}
