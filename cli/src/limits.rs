//! `paceline limits`: a fleet's limits document in Redis (one server or a
//! cluster) or PostgreSQL,
//! stored (checked whole first), printed, watched, or only checked. Every
//! mistake in the arguments or the document is a [`Usage`] error (exit
//! status 2); a server's failure or a conflicting write, status 1.
//!
//! [`Follow`]: a run without a rate (`--redis URL --key K`) paced by `K`'s
//! limit in the document, read at the start and followed as it changes.

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use lexopt::prelude::*;
use paceline::config::fleet::{check, Document, FleetError, Watching, MAX_DOCUMENT_BYTES};

use crate::args::{Given, Limit, Server, Usage};
use crate::signals;

/// A key's limit in a document, and what to say about it.
type Found = Result<(Limit, String), String>;

/// A run's limit read from the limits document (no RATE with `--redis
/// URL --key K` or `--postgres CONN --key K`): the key's override, else the
/// document's default, read at the start and followed from then on.
pub struct Follow {
    /// The limit the document gave at the start.
    pub limit: Limit,
    news: mpsc::Receiver<Found>,
    _watching: Watching,
}

impl Follow {
    /// Reads the document `name` on `server`, says which limit applies to
    /// `key` (unless `quiet`), and watches for new versions.
    ///
    /// # Errors
    /// No document, none that limits `key`, or the server not answering:
    /// the message names it (the run ends with status 1).
    pub fn start(server: &Server, key: &str, name: &str, quiet: bool) -> Result<Follow, String> {
        let at = |e: &dyn std::fmt::Display| format!("{} {}: {e}", server.flag(), server.address());
        // memcached keeps no document: the arguments refused it.
        let open = || match server {
            Server::Postgres(conn) => Document::postgres(conn, Some(name)),
            Server::Redis(url) | Server::Memcached(url) => Document::redis(url, Some(name)),
        };
        let first = open()
            .and_then(|mut doc| doc.get())
            .map_err(|e| at(&e))?
            .ok_or_else(|| {
                at(&format!(
                    "no limits document {name:?} there (store one with `paceline limits set`)"
                ))
            })?;
        let (limit, said) = limit_for(&first.text, key, name, first.version).map_err(|e| at(&e))?;
        if !quiet {
            eprintln!("paceline: {said}");
        }
        let (tx, news) = mpsc::channel();
        let key = key.to_owned();
        let name = name.to_owned();
        let watching = open()
            .map_err(|e| at(&e))?
            .watch(move |read| {
                let _ = match read {
                    Ok(v) if v.version <= first.version => Ok(()),
                    Ok(v) => tx.send(limit_for(&v.text, &key, &name, v.version)),
                    Err(e) => tx.send(Err(format!("limits document {name:?}: {e}"))),
                };
            })
            .map_err(|e| format!("cannot watch the limits document: {e}"))?;
        Ok(Follow {
            limit,
            news,
            _watching: watching,
        })
    }

    /// A new version's limit (or why it cannot be used), if one came.
    pub fn news(&self) -> Option<Found> {
        self.news.try_recv().ok()
    }
}

/// `key`'s limit in the document `text` (version `version` of `name`): its
/// override, else the default.
fn limit_for(text: &str, key: &str, name: &str, version: u64) -> Found {
    let layer = check(text).map_err(|e| e.to_string())?;
    let (limit, whose) = match layer.overrides().iter().find(|(k, _)| k == key) {
        Some((_, limit)) => (limit, format!("{key:?}")),
        None => (
            layer.default_limit().ok_or_else(|| {
                format!(
                    "the limits document {name:?} (version {version}) has no limit for {key:?}: \
                     no override for it and no [default]"
                )
            })?,
            "the default".to_owned(),
        ),
    };
    let (rate, burst) = (limit.rate(), limit.burst());
    let said = format!(
        "rate {rate}, burst {burst}: {whose} in the limits document {name:?} (version {version})"
    );
    Ok((
        Limit::new(Given::Lines(rate), Some(burst)).map_err(|u| u.0)?,
        said,
    ))
}

/// `paceline limits --help`.
pub const HELP: &str = "\
paceline limits: one limits document for a whole fleet, in Redis or PostgreSQL

usage: paceline limits get   STORE [--name NAME]
       paceline limits set   STORE [--name NAME] [--if-version N] [FILE]
       paceline limits watch STORE [--name NAME]
       paceline limits check [FILE]
where  STORE is --redis URL, --redis-cluster URL[,URL...] or --postgres CONN

get    print the document to stdout (its version on stderr)
set    store FILE (or stdin: none or -) as the next version; the document
       is checked whole first, and a broken one is never stored
watch  print each new version (\"# version N\", then the document) until
       SIGINT or SIGTERM
check  check a document without storing it

The document is TOML: [default] (rate, burst) and [overrides] (key = limit),
as the library's Limits reads; [default] may be left to a layer below.

options:
      --redis URL       the document in this Redis server
      --redis-cluster URL[,URL...]
                        the document in the Redis Cluster these nodes (some
                        or all of them) belong to
      --postgres CONN   the document in this PostgreSQL server (table
                        paceline_documents, created by the first write)
      --name NAME       the document's name [default: paceline:limits]
      --if-version N    with set: write only over version N (0: only if there
                        is none), so that two writers cannot silently
                        overwrite each other
  -h, --help            this help

exit status: 0 done; 1 a server error, no document (get), or a write over
another version (--if-version); 2 a bad argument or a broken document.
";

/// What to do.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Command {
    Get,
    Set {
        file: Option<PathBuf>,
        if_version: Option<u64>,
    },
    Watch,
    Check {
        file: Option<PathBuf>,
    },
}

/// Where the document is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Store {
    Redis(String),
    RedisCluster(Vec<String>),
    Postgres(String),
}

/// `paceline limits ...`, its arguments after `limits`: the exit status.
pub fn main(args: impl IntoIterator<Item = OsString>) -> u8 {
    match parse(args) {
        Ok(None) => {
            let _ = io::stdout().lock().write_all(HELP.as_bytes());
            0
        }
        Ok(Some((command, store, name))) => match run(command, store, name.as_deref()) {
            Ok(()) => 0,
            Err(Failed::Usage(usage)) => {
                eprintln!("paceline: {usage}");
                2
            }
            Err(Failed::Run(message)) => {
                eprintln!("paceline: {message}");
                1
            }
        },
        Err(usage) => {
            eprintln!("paceline: {usage}\nTry 'paceline limits --help'.");
            2
        }
    }
}

type Parsed = Option<(Command, Option<Store>, Option<String>)>;

fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Parsed, Usage> {
    let mut parser = lexopt::Parser::from_args(args);
    let (mut verb, mut store, mut name, mut if_version, mut file) = (
        None::<String>,
        None::<Store>,
        None::<String>,
        None::<u64>,
        None::<PathBuf>,
    );
    let text = |v: OsString, what: &str| {
        v.into_string()
            .map_err(|v| Usage(format!("{what} is not UTF-8: {v:?}")))
    };
    while let Some(arg) = parser.next()? {
        match arg {
            Short('h') | Long("help") => return Ok(None),
            Long("redis") | Long("redis-cluster") | Long("postgres") => {
                let flag = match arg {
                    Long(f) => f.to_owned(),
                    _ => unreachable!(),
                };
                if store.is_some() {
                    return Err(Usage(
                        "give one of --redis, --redis-cluster and --postgres, once".into(),
                    ));
                }
                let at = text(parser.value()?, &format!("--{flag}"))?;
                store = Some(match flag.as_str() {
                    "redis" => Store::Redis(at),
                    "postgres" => Store::Postgres(at),
                    _ => {
                        let nodes: Vec<String> = at.split(',').map(str::to_owned).collect();
                        if nodes.iter().any(String::is_empty) {
                            return Err(Usage(format!(
                                "bad --redis-cluster {at:?}: want node URLs separated by commas"
                            )));
                        }
                        Store::RedisCluster(nodes)
                    }
                });
            }
            Long("name") => name = Some(text(parser.value()?, "--name")?),
            Long("if-version") => {
                let v = text(parser.value()?, "--if-version")?;
                if_version = Some(v.parse().map_err(|_| {
                    Usage(format!("bad --if-version {v:?}: want a version, 0 or more"))
                })?);
            }
            Value(v) if verb.is_none() => verb = Some(text(v, "the command")?),
            Value(v) if file.is_none() => file = Some(PathBuf::from(v)),
            _ => return Err(arg.unexpected().into()),
        }
    }
    let verb = verb.ok_or_else(|| Usage("name a command: get, set, watch or check".into()))?;
    let file = file.filter(|f| f.as_os_str() != "-");
    let command = match verb.as_str() {
        "get" => Command::Get,
        "watch" => Command::Watch,
        "set" => Command::Set {
            file: file.clone(),
            if_version,
        },
        "check" => Command::Check { file: file.clone() },
        other => {
            return Err(Usage(format!(
                "unknown command {other:?}: want get, set, watch or check"
            )))
        }
    };
    if file.is_some() && matches!(command, Command::Get | Command::Watch) {
        return Err(Usage(format!("{verb} takes no file")));
    }
    if if_version.is_some() && !matches!(command, Command::Set { .. }) {
        return Err(Usage("--if-version is for set".into()));
    }
    match (&command, &store) {
        (Command::Check { .. }, Some(_)) => {
            return Err(Usage(
                "check reads no server: drop --redis / --redis-cluster / --postgres".into(),
            ))
        }
        (Command::Check { .. }, None) => {}
        (_, None) => {
            return Err(Usage(format!(
                "{verb}: give --redis URL, --redis-cluster URL[,URL...] or --postgres CONN"
            )))
        }
        _ => {}
    }
    Ok(Some((command, store, name)))
}

enum Failed {
    Usage(Usage),
    Run(String),
}

impl From<FleetError> for Failed {
    fn from(e: FleetError) -> Failed {
        match e {
            FleetError::Invalid(_) | FleetError::Config(_) => Failed::Usage(Usage(e.to_string())),
            _ => Failed::Run(e.to_string()),
        }
    }
}

/// The document: FILE's bytes, or stdin's; at most the largest a document
/// may be (one byte more is read, to say it is too large).
fn read_document(file: Option<&PathBuf>) -> Result<String, Failed> {
    let limit = MAX_DOCUMENT_BYTES as u64 + 1;
    let mut bytes = Vec::new();
    let (read, what) = match file {
        Some(path) => (
            std::fs::File::open(path).and_then(|f| f.take(limit).read_to_end(&mut bytes)),
            path.display().to_string(),
        ),
        None => (
            io::stdin().lock().take(limit).read_to_end(&mut bytes),
            "stdin".to_owned(),
        ),
    };
    read.map_err(|e| Failed::Usage(Usage(format!("cannot read {what}: {e}"))))?;
    String::from_utf8(bytes).map_err(|e| Failed::Usage(Usage(format!("{what} is not UTF-8: {e}"))))
}

fn open(store: Option<Store>, name: Option<&str>) -> Result<Document, Failed> {
    Ok(match store.expect("checked by parse") {
        Store::Redis(url) => Document::redis(&url, name)?,
        Store::RedisCluster(nodes) => Document::redis_cluster(&nodes, name)?,
        Store::Postgres(conn) => Document::postgres(&conn, name)?,
    })
}

fn run(command: Command, store: Option<Store>, name: Option<&str>) -> Result<(), Failed> {
    match command {
        Command::Check { file } => {
            check(&read_document(file.as_ref())?)?;
            eprintln!("paceline: the document is good");
            Ok(())
        }
        Command::Set { file, if_version } => {
            let text = read_document(file.as_ref())?;
            let layer = check(&text)?;
            let version = open(store, name)?.set(&text, if_version)?;
            eprintln!("paceline: stored version {version}");
            if layer.default_limit().is_none() {
                eprintln!(
                    "paceline: note: this document sets no [default]: it takes effect layered \
                     over one that does"
                );
            }
            Ok(())
        }
        Command::Get => match open(store, name)?.get()? {
            Some(v) => {
                eprintln!("paceline: version {}", v.version);
                print(&v.text).map_err(|e| Failed::Run(format!("cannot write stdout: {e}")))
            }
            None => Err(Failed::Run(format!(
                "no document {:?} there yet",
                name.unwrap_or(paceline::config::fleet::DEFAULT_NAME)
            ))),
        },
        Command::Watch => watch(open(store, name)?),
    }
}

fn print(text: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes())?;
    if !text.ends_with('\n') {
        out.write_all(b"\n")?;
    }
    out.flush()
}

/// Prints each new version until a stop signal (or stdout closes).
fn watch(doc: Document) -> Result<(), Failed> {
    let flags = signals::install()
        .map_err(|e| Failed::Run(format!("cannot install signal handlers: {e}")))?;
    let (tx, rx) = mpsc::channel();
    let _watching = doc
        .poll_every(Duration::from_secs(1))
        .watch(move |read| {
            let _ = tx.send(read);
        })
        .map_err(|e| Failed::Run(format!("cannot start the watcher: {e}")))?;
    while !flags.stopping() {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(Ok(v)) => {
                let shown = print(&format!("# version {}\n{}", v.version, v.text));
                if shown.is_err() {
                    // Downstream closed: a normal end.
                    return Ok(());
                }
            }
            Ok(Err(e)) => eprintln!("paceline: {e} (still watching)"),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(Failed::Run("the watcher stopped".into()))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Parsed, Usage> {
        parse(args.iter().map(OsString::from))
    }

    #[test]
    fn each_command_parses_and_mistakes_are_named() {
        assert_eq!(
            p(&[
                "set",
                "--redis",
                "redis://h/",
                "--if-version",
                "3",
                "l.toml"
            ])
            .unwrap(),
            Some((
                Command::Set {
                    file: Some("l.toml".into()),
                    if_version: Some(3)
                },
                Some(Store::Redis("redis://h/".into())),
                None
            ))
        );
        assert_eq!(
            p(&["get", "--postgres", "host=/x", "--name", "n"]).unwrap(),
            Some((
                Command::Get,
                Some(Store::Postgres("host=/x".into())),
                Some("n".into())
            ))
        );
        assert_eq!(
            p(&["watch", "--redis-cluster", "redis://a:1/,redis://b:2/"]).unwrap(),
            Some((
                Command::Watch,
                Some(Store::RedisCluster(vec![
                    "redis://a:1/".into(),
                    "redis://b:2/".into()
                ])),
                None
            ))
        );
        assert_eq!(
            p(&["check", "-"]).unwrap(),
            Some((Command::Check { file: None }, None, None))
        );
        for (args, says) in [
            (
                &["get"][..],
                "give --redis URL, --redis-cluster URL[,URL...] or --postgres CONN",
            ),
            (
                &["get", "--redis-cluster", "redis://a/,"][..],
                "bad --redis-cluster \"redis://a/,\"",
            ),
            (
                &["get", "--redis", "r", "--redis-cluster", "r"][..],
                "give one of --redis",
            ),
            (&["fetch", "--redis", "r"][..], "unknown command \"fetch\""),
            (
                &["set", "--redis", "r", "--if-version", "-1"][..],
                "bad --if-version \"-1\"",
            ),
            (&["get", "--redis", "r", "--postgres", "p"][..], "once"),
            (&["get", "--redis", "r", "f.toml"][..], "get takes no file"),
            (
                &["watch", "--redis", "r", "--if-version", "1"][..],
                "--if-version is for set",
            ),
            (&["check", "--redis", "r"][..], "check reads no server"),
        ] {
            let e = p(args).unwrap_err();
            assert!(e.0.contains(says), "{args:?}: {e}");
        }
    }
}
