//! Loom model tests for paceline live in `tests/`; build with `--cfg paceline_loom`.
