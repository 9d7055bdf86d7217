//! Artifacts through MCP (#20, point 5) with the real daemon and a real MCP client: the
//! official Python SDK runs `mcp-frontend/tests/clients/artifacts_client.py` against
//! `vivarium-mcp`, whose `run_python` code writes PNGs, a CSV and a symlink to
//! /etc/shadow under /work/out. The client checks the image content (decoded: the small
//! PNG as it is, the 3000x2000 one downscaled within 1568 px and 1.15 MP), the captions,
//! the inlined CSV, the skipped symlink, the resource links and
//! `structuredContent.artifacts` (against the output schema); reads the original PNG
//! (its sha256) and the CSV with `resources/read`; does the same for a session's second
//! cell; and checks that another server instance refuses the URI.
//!
//! Needs root (the daemon does) and a Python with the `mcp` package:
//! `$VIVARIUM_MCP_PYTHON`, else `<target>/mcp-venv/bin/python`. Skips loudly without
//! them, and fails instead when `VIVARIUM_REQUIRE_ROOT=1` or `VIVARIUM_REQUIRE_MCP_SDK=1`.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::{Command, Stdio};

use vivarium_e2e::{bin, bin_dir, require_root, workspace_dir, Daemon, DaemonOpts};

fn sdk_python() -> Option<PathBuf> {
    let python = std::env::var_os("VIVARIUM_MCP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            bin_dir()
                .parent()
                .expect("the bin dir has a parent")
                .join("mcp-venv/bin/python")
        });
    let has_sdk = Command::new(&python)
        .args(["-c", "import mcp, jsonschema, anyio"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    has_sdk.then_some(python)
}

#[test]
fn the_python_sdk_gets_images_links_and_reads_a_resource() {
    if !require_root() {
        return;
    }
    let Some(python) = sdk_python() else {
        let why = "no Python with the MCP SDK (set VIVARIUM_MCP_PYTHON)";
        if std::env::var("VIVARIUM_REQUIRE_MCP_SDK").as_deref() == Ok("1") {
            panic!("{why}, and VIVARIUM_REQUIRE_MCP_SDK=1 says it must run");
        }
        eprintln!("SKIP the_python_sdk_gets_images_links_and_reads_a_resource: {why}");
        return;
    };
    let daemon = Daemon::start(DaemonOpts::default());
    let script = workspace_dir().join("mcp-frontend/tests/clients/artifacts_client.py");
    let output = Command::new(&python)
        .arg(&script)
        .arg("--server")
        .arg(bin("vivarium-mcp"))
        .arg("--socket")
        .arg(daemon.socket())
        .stdin(Stdio::null())
        .output()
        .expect("run the SDK client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the SDK client failed:\n{stdout}\n--- stderr ---\n{stderr}\n--- daemon log ---\n{}",
        daemon.log()
    );
    for needle in [
        "ok job: images within the budget",
        "ok resources/read: the full-size original",
        "ok resources/list",
        "ok session cell 2: images within the budget",
        "ok another instance refuses the URI",
    ] {
        assert!(stdout.contains(needle), "no `{needle}` in:\n{stdout}");
    }
    eprint!("{stdout}");
}
