//! A user who puts the limit layer in an axum app with only the `tower`
//! feature is told, by the compiler, which feature to turn on; with it on,
//! the same app builds. Both are checked by building a small app of a
//! user's (`cargo check`, offline, on the workspace's lockfile) in a
//! directory of its own under `target/`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::{env, fs};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

const APP: &str = r#"
use axum::{routing::get, Router};
use paceline::http::LimitLayer;

fn main() {
    let limit = LimitLayer::per_ip("5/s".parse().unwrap()).build().unwrap();
    let _app: Router = Router::new().route("/", get(|| async { "hello" })).layer(limit);
}
"#;

/// A user's app depending on paceline with `features`, checked: whether it
/// built, and what the compiler said.
fn check_app(features: &str) -> (bool, String) {
    let root = Path::new(ROOT);
    let dir: PathBuf = root.join("target/feature-advice/app");
    fs::create_dir_all(dir.join("src")).unwrap();
    let manifest = format!(
        "[package]\nname = \"app\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n\
         [dependencies]\n\
         paceline = {{ path = {root:?}, default-features = false, features = [{features}] }}\n\
         axum = {{ version = \"0.8\", default-features = false, features = [\"tokio\"] }}\n\n\
         [workspace]\n"
    );
    fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    fs::write(dir.join("src/main.rs"), APP).unwrap();
    // The workspace's lockfile: the versions its own build downloaded.
    fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    let out = Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["check", "--offline", "--quiet", "--color", "never"])
        .current_dir(&dir)
        .env(
            "CARGO_TARGET_DIR",
            root.join("target/feature-advice/target"),
        )
        .env_remove("RUSTFLAGS")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_axum_app_without_the_axum_feature_is_told_to_turn_it_on() {
    let (built, said) = check_app("\"tower\"");
    assert!(!built, "an axum app built with `tower` alone");
    assert!(
        said.contains("cannot write its answers in a `Body` body")
            || said.contains("cannot write its answers in a `axum::body::Body` body"),
        "not the layer's own message:\n{said}"
    );
    assert!(
        said.contains("turn on paceline's `axum` feature"),
        "the message does not name the feature:\n{said}"
    );
    let (built, said) = check_app("\"axum\"");
    assert!(
        built,
        "with the `axum` feature on, the app does not build:\n{said}"
    );
}
