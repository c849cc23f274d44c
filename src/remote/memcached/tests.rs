//! Unit tests against a real memcached (see tests/support/memcached_server.rs).
