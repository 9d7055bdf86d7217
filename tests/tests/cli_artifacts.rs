//! `viv run --out DIR` and `viv exec --out DIR` (#20 point 4) with the real daemon: the
//! artifacts a job or cell returns are written under DIR at their paths, never outside it
//! (a symlink planted in DIR is not followed), never over an existing file without
//! `--force`; `--json` lists them with the daemon's report; without `--out` viv says what
//! it did not save. Needs root (VIVARIUM_REQUIRE_ROOT=1 in CI fails them loudly without
//! it) and a daemon that collects artifacts (protocol 8).
#![forbid(unsafe_code)]

use std::path::Path;
use std::process::Output;

use vivarium_e2e::{describe_output, require_root, Daemon, DaemonOpts};

/// A PNG signature and a few bytes: enough for the daemon to sniff `image/png`.
const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR-not-really";

/// A script writing `/work/out/plot.png` (the PNG bytes above), `/work/out/sub/data.csv`
/// and a file outside `/work/out` that the default outputs do not return.
fn script(dir: &Path) -> String {
    let path = dir.join("make.py");
    std::fs::write(
        &path,
        "import os\n\
         os.makedirs('/work/out/sub', exist_ok=True)\n\
         open('/work/out/plot.png', 'wb').write(b'\\x89PNG\\r\\n\\x1a\\n\\0\\0\\0\\rIHDR-not-really')\n\
         open('/work/out/sub/data.csv', 'w').write('a,b\\n1,2\\n')\n\
         open('/work/elsewhere.txt', 'w').write('not an output')\n\
         print('made')\n",
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

fn ok(out: Output) -> Output {
    assert!(out.status.success(), "{}", describe_output(&out));
    out
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON object ({e}): {}",
            describe_output(out)
        )
    })
}

fn sha256_hex(path: &Path) -> String {
    let out = std::process::Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("sha256sum");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

#[test]
fn viv_run_out_writes_the_artifacts_and_keeps_existing_files_without_force() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let tmp = tempfile::tempdir().unwrap();
    let script = script(tmp.path());
    let dir = tmp.path().join("results");
    let dir_arg = dir.to_str().unwrap();

    let out = ok(daemon.viv(&["run", "--out", dir_arg, &script], b""));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "made\n");
    assert_eq!(std::fs::read(dir.join("out/plot.png")).unwrap(), PNG);
    assert_eq!(
        std::fs::read_to_string(dir.join("out/sub/data.csv")).unwrap(),
        "a,b\n1,2\n"
    );
    assert!(!dir.join("elsewhere.txt").exists());
    assert!(
        !stderr(&out).contains("not saved"),
        "{}",
        describe_output(&out)
    );

    // Again, over a file the user changed: kept, named on stderr, the others written,
    // and a job that succeeded exits 125.
    std::fs::write(dir.join("out/plot.png"), b"mine").unwrap();
    std::fs::remove_file(dir.join("out/sub/data.csv")).unwrap();
    let out = daemon.viv(&["run", "--out", dir_arg, &script], b"");
    assert_eq!(out.status.code(), Some(125), "{}", describe_output(&out));
    let err = stderr(&out);
    assert!(
        err.contains("out/plot.png") && err.contains("already exists"),
        "{err}"
    );
    assert_eq!(std::fs::read(dir.join("out/plot.png")).unwrap(), b"mine");
    assert!(dir.join("out/sub/data.csv").is_file(), "{err}");

    // With --force it is replaced.
    ok(daemon.viv(&["run", "--out", dir_arg, "--force", &script], b""));
    assert_eq!(std::fs::read(dir.join("out/plot.png")).unwrap(), PNG);

    // A symlink planted in DIR pointing out of it is not followed, even with --force.
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::remove_dir_all(dir.join("out/sub")).unwrap();
    std::os::unix::fs::symlink(&outside, dir.join("out/sub")).unwrap();
    let out = daemon.viv(&["run", "--out", dir_arg, "--force", &script], b"");
    assert_eq!(out.status.code(), Some(125), "{}", describe_output(&out));
    let err = stderr(&out);
    assert!(
        err.contains("out/sub/data.csv") && err.contains("symlink"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
}

#[test]
fn viv_run_json_lists_the_artifacts_and_what_was_skipped() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let tmp = tempfile::tempdir().unwrap();
    let script = script(tmp.path());
    let dir = tmp.path().join("results");

    let out = ok(daemon.viv(
        &["run", "--json", "--out", dir.to_str().unwrap(), &script],
        b"",
    ));
    let v = json(&out);
    assert_eq!(v["stdout"], "made\n");
    assert_eq!(v["exit_code"], 0);
    let listed = v["artifacts"].as_array().expect("artifacts");
    let by_path = |p: &str| {
        listed
            .iter()
            .find(|a| a["path"] == p)
            .unwrap_or_else(|| panic!("{p} not listed: {v:#}"))
    };
    let plot = by_path("out/plot.png");
    assert_eq!(plot["size"], PNG.len());
    assert_eq!(plot["media_type"], "image/png");
    let saved = dir.join("out/plot.png");
    assert_eq!(plot["saved"], saved.to_str().unwrap());
    assert_eq!(plot["sha256"], sha256_hex(&saved));
    assert_eq!(
        by_path("out/sub/data.csv")["media_type"],
        "text/plain; charset=utf-8"
    );
    assert_eq!(listed.len(), 2, "{v:#}");
    assert_eq!(v["artifacts_report"]["status"], "Collected");
    assert_eq!(v["artifacts_report"]["returned"], 2);

    // Without --out: listed, saved nowhere; a symlink in /work/out is skipped by kind,
    // and --out-pattern picks what else to return.
    let out = ok(daemon.viv(
        &[
            "run",
            "--json",
            "--out-pattern",
            "out/**",
            "--out-pattern",
            "*.txt",
            "-",
        ],
        b"import os\nos.makedirs('/work/out', exist_ok=True)\n\
          os.symlink('/etc/shadow', '/work/out/shadow')\n\
          open('/work/out/a.txt', 'w').write('a')\n\
          open('/work/b.txt', 'w').write('bb')\n",
    ));
    let v = json(&out);
    let mut paths: Vec<&str> = v["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            assert!(a["saved"].is_null(), "{a}");
            a["path"].as_str().unwrap()
        })
        .collect();
    paths.sort();
    assert_eq!(paths, ["b.txt", "out/a.txt"], "{v:#}");
    let skipped = v["artifacts_report"]["skipped"].as_array().unwrap();
    assert!(
        skipped
            .iter()
            .any(|s| s["path"] == "out/shadow" && s["kind"] == "Symlink"),
        "{v:#}"
    );
    // The skip is said in words on stderr too.
    assert!(
        stderr(&out).contains("artifact out/shadow skipped: a symlink"),
        "{}",
        describe_output(&out)
    );

    // --no-outputs: nothing asked, no report.
    let out = ok(daemon.viv(&["run", "--json", "--no-outputs", &script], b""));
    let v = json(&out);
    assert_eq!(v["artifacts"], serde_json::json!([]));
    assert!(v["artifacts_report"].is_null(), "{v:#}");
}

#[test]
fn viv_run_without_out_says_what_it_did_not_save() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let tmp = tempfile::tempdir().unwrap();
    let script = script(tmp.path());
    let out = ok(daemon.viv(&["run", &script], b""));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "made\n");
    let err = stderr(&out);
    assert!(
        err.contains("2 artifacts not saved (out/plot.png, out/sub/data.csv): pass --out DIR"),
        "{err}"
    );
    let out = ok(daemon.viv(&["run", "--no-outputs", &script], b""));
    assert!(
        !stderr(&out).contains("not saved"),
        "{}",
        describe_output(&out)
    );
}

#[test]
fn viv_exec_out_writes_each_cells_new_artifacts() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cells");
    let dir_arg = dir.to_str().unwrap();
    let out = ok(daemon.viv(&["session", "new"], b""));
    let handle = String::from_utf8_lossy(&out.stdout).trim().to_owned();

    ok(daemon.viv(
        &["exec", &handle, "--out", dir_arg, "-"],
        b"import os\nos.makedirs('/work/out', exist_ok=True)\n\
          open('/work/out/first.txt', 'w').write('1')\n",
    ));
    assert_eq!(
        std::fs::read_to_string(dir.join("out/first.txt")).unwrap(),
        "1"
    );

    // The second cell returns only what is new or changed: first.txt is not sent again,
    // so it is no "already exists" error.
    let out = ok(daemon.viv(
        &["exec", &handle, "--out", dir_arg, "--json", "-"],
        b"open('/work/out/second.txt', 'w').write('22')\n",
    ));
    let v = json(&out);
    let listed = v["artifacts"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{v:#}");
    assert_eq!(listed[0]["path"], "out/second.txt");
    assert_eq!(
        listed[0]["saved"],
        dir.join("out/second.txt").to_str().unwrap()
    );
    assert_eq!(v["artifacts_report"]["status"], "Collected");
    assert_eq!(
        std::fs::read_to_string(dir.join("out/second.txt")).unwrap(),
        "22"
    );

    // A changed file comes back, and without --force is not written over.
    let out = daemon.viv(
        &["exec", &handle, "--out", dir_arg, "-"],
        b"open('/work/out/first.txt', 'w').write('changed')\n",
    );
    assert_eq!(out.status.code(), Some(125), "{}", describe_output(&out));
    assert!(
        stderr(&out).contains("already exists"),
        "{}",
        describe_output(&out)
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("out/first.txt")).unwrap(),
        "1"
    );

    ok(daemon.viv(&["session", "close", &handle], b""));
}
