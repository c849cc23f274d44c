//! The Redis [`Store`]: a document as a hash (`version`, `body`) under its
//! name, written by a script that bumps the version and publishes it on the
//! channel of the same name.

use std::time::Duration;

use redis::{Client, Connection, RedisError};

use super::document::{FleetError, Versioned};
use super::source::Store;

/// Writes `ARGV[1]` as the next version, only over version `ARGV[2]` if it
/// is not empty; publishes the new version. `{1, version}`, or `{0,
/// found}` when the version asked for is not the one stored.
const SET: &str = r"
local v = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if ARGV[2] ~= '' and tonumber(ARGV[2]) ~= v then
  return {0, v}
end
v = v + 1
redis.call('HSET', KEYS[1], 'version', v, 'body', ARGV[1])
redis.call('PUBLISH', KEYS[1], v)
return {1, v}
";

pub(crate) struct RedisStore {
    client: Client,
    key: String,
    timeout: Duration,
    script: redis::Script,
    conn: Option<Connection>,
    /// The subscribed connection.
    sub: Option<Connection>,
}

fn server(e: &RedisError) -> FleetError {
    FleetError::Server(e.to_string())
}

impl RedisStore {
    pub(crate) fn new(url: &str, key: &str, timeout: Duration) -> Result<RedisStore, FleetError> {
        let client =
            Client::open(url).map_err(|e| FleetError::Config(format!("Redis URL {url:?}: {e}")))?;
        Ok(RedisStore {
            client,
            key: key.to_owned(),
            timeout,
            script: redis::Script::new(SET),
            conn: None,
            sub: None,
        })
    }

    fn connect(&self) -> Result<Connection, FleetError> {
        let conn = self
            .client
            .get_connection_with_timeout(self.timeout)
            .map_err(|e| server(&e))?;
        conn.set_read_timeout(Some(self.timeout))
            .and_then(|()| conn.set_write_timeout(Some(self.timeout)))
            .map_err(|e| server(&e))?;
        Ok(conn)
    }

    /// Runs `f` on the command connection, connecting first if need be and
    /// dropping the connection after a failure (the next call connects
    /// anew).
    fn with_conn<T>(
        &mut self,
        f: impl FnOnce(&mut Connection, &redis::Script, &str) -> Result<T, RedisError>,
    ) -> Result<T, FleetError> {
        let mut conn = match self.conn.take() {
            Some(conn) => conn,
            None => self.connect()?,
        };
        let out = f(&mut conn, &self.script, &self.key).map_err(|e| server(&e))?;
        self.conn = Some(conn);
        Ok(out)
    }
}

impl Store for RedisStore {
    fn get(&mut self) -> Result<Option<Versioned>, FleetError> {
        let (version, body): (Option<String>, Option<String>) = self.with_conn(|c, _, key| {
            redis::cmd("HMGET")
                .arg(key)
                .arg("version")
                .arg("body")
                .query(c)
        })?;
        match (version, body) {
            (None, _) => Ok(None),
            (Some(v), body) => {
                let version = v.parse::<u64>().map_err(|_| {
                    FleetError::Server(format!("{:?}: version {v:?} is not a count", self.key))
                })?;
                Ok(Some(Versioned {
                    version,
                    text: body.unwrap_or_default(),
                }))
            }
        }
    }

    fn set(&mut self, text: &str, if_version: Option<u64>) -> Result<u64, FleetError> {
        let (written, version): (u8, u64) = self.with_conn(|c, script, key| {
            script
                .key(key)
                .arg(text)
                .arg(if_version.map(|v| v.to_string()).unwrap_or_default())
                .invoke(c)
        })?;
        match written {
            1 => Ok(version),
            _ => Err(FleetError::Conflict {
                expected: if_version.unwrap_or(0),
                found: version,
            }),
        }
    }

    fn listen(&mut self) -> Result<(), FleetError> {
        self.sub = None;
        let mut sub = self.connect()?;
        let subscribe = redis::cmd("SUBSCRIBE").arg(&self.key).get_packed_command();
        sub.send_packed_command(&subscribe)
            .and_then(|()| sub.recv_response())
            .map_err(|e| server(&e))?;
        self.sub = Some(sub);
        Ok(())
    }

    fn wait(&mut self, timeout: Duration) -> Result<bool, FleetError> {
        let Some(sub) = &mut self.sub else {
            return Err(FleetError::Server("not subscribed".into()));
        };
        sub.set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
            .map_err(|e| server(&e))?;
        match sub.recv_response() {
            // Any message on the channel is news: the watcher reads the
            // document, whatever the message says.
            Ok(_) => Ok(true),
            Err(e) if e.is_timeout() => Ok(false),
            Err(e) => {
                self.sub = None;
                Err(server(&e))
            }
        }
    }
}
