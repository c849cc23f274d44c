//! [`RuntimeThread`]: the private runtime the blocking PostgreSQL face runs
//! its async calls on (and a fleet's PostgreSQL document its own).

/// A current-thread Tokio runtime on a thread of its own, which runs the
/// blocking face's calls (reqwest's `blocking` pattern): the caller waits on
/// a std channel, so a blocking call works on any thread. It stops when
/// dropped.
pub(crate) struct RuntimeThread {
    pub(crate) handle: tokio::runtime::Handle,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl RuntimeThread {
    pub(crate) fn start() -> Result<RuntimeThread, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the PostgreSQL client's runtime: {e}"))?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("paceline-postgres".into())
            .spawn(move || {
                let _ = runtime.block_on(stopped);
            })
            .map_err(|e| format!("cannot start the PostgreSQL client's runtime thread: {e}"))?;
        Ok(RuntimeThread {
            handle,
            _stop: stop,
        })
    }
}
