//! Ordinary Python must work in the sandbox: threads, processes, files, sqlite, asyncio,
//! stdin, arguments, big scripts, unicode, and exit statuses that mean what they say.
#![forbid(unsafe_code)]

use std::io::Write as _;

use serde_json::json;
use vivarium_e2e::proto::{ExitStatus, Reason};
use vivarium_e2e::{
    describe, describe_output, evidence, probe, require_root, Collected, Daemon, DaemonOpts, Job,
};

fn assert_ok(done: &Collected) {
    assert_eq!(
        (done.outcome.reason, done.outcome.exit),
        (Reason::Ok, ExitStatus::Code(0)),
        "{}",
        describe(done)
    );
    assert!(
        done.outcome.limits_hit.is_empty(),
        "{:?}",
        done.outcome.limits_hit
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn threads() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let done = daemon.run(&probe("threads")).await;
    assert_ok(&done);
    let ev = evidence(&done);
    assert_eq!(ev["total"], ev["expected"]);
    assert_eq!(
        ev["threads"],
        json!(["t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8", "t9"])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn multiprocessing_and_subprocess() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let done = daemon.run(&probe("processes")).await;
    assert_ok(&done);
    let ev = evidence(&done);
    let squares: Vec<u64> = (0..20).map(|x| x * x).collect();
    assert_eq!(ev["squares"], json!(squares));
    assert!(ev["pool_pids"].as_u64().unwrap() >= 1, "{ev}");
    // The child printed 42 and its parent's pid, which is the script's own.
    assert_eq!(ev["subprocess"], json!(["42", ev["parent"].to_string()]));
}

#[tokio::test(flavor = "multi_thread")]
async fn tempfile_and_sqlite() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let done = daemon.run(&probe("storage")).await;
    assert_ok(&done);
    assert_eq!(
        evidence(&done),
        json!({
            "tmp_dir": "/tmp", "tmp_text": "scratch", "gettempdir": "/tmp",
            "db": "/work/data.db", "rows": [[1, "a"], [2, "b"], [3, "c"]],
        })
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn asyncio_with_a_subprocess() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let done = daemon.run(&probe("async_io")).await;
    assert_ok(&done);
    assert_eq!(
        evidence(&done),
        json!({
            "naps": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], "concurrent": true,
            "child": "from child", "returncode": 0,
        })
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn stdin_arguments_and_the_standard_library() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    // A few frames' worth of stdin, so it is streamed in several chunks.
    let numbers: Vec<String> = (1..=30_000).map(|n| n.to_string()).collect();
    let stdin = numbers.join("\n") + "\n";
    let job = Job::new(probe("stdlib")).args(["a", "b c", "--flag", "ünï"]);
    let done = daemon.run_job_stdin(&job, Some(stdin.as_bytes())).await;
    assert_ok(&done);
    assert_eq!(
        evidence(&done),
        json!({
            "argv": ["/work/main.py", "a", "b c", "--flag", "ünï"],
            "stdin_sum": 30_000u64 * 30_001 / 2,
            "stdin_count": 30_000,
            "re": ["1", "22", "333"],
            "math": [1_000_000, 120, 12],
            "decimal": "0.142857142857142857142857142857",
            "sha256": "4dea8909dd6dfdbb40b0dcc6dcfea1134a3e4eb20a91f561e9b9bc0d2c1f01d2",
            "json": {"k": [1, 2.5, null]},
        })
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn empty_stdin_reads_eof() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let done = daemon
        .run("import sys; print(repr(sys.stdin.read()))")
        .await;
    assert_ok(&done);
    assert_eq!(done.stdout, b"''\n");
}

/// 300 KiB of script does not fit a frame: the client sends it in chunks and the daemon
/// must reassemble it exactly.
#[tokio::test(flavor = "multi_thread")]
async fn large_chunked_script() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let mut code = String::from("total = 0\n");
    let mut i = 0u64;
    while code.len() < 300 * 1024 {
        code.push_str(&format!("total += {i}  # line {i} padding padding\n"));
        i += 1;
    }
    code.push_str("print(total)\n");
    assert!(code.len() > 300 * 1024);
    let done = daemon.run(&code).await;
    assert_ok(&done);
    assert_eq!(
        String::from_utf8_lossy(&done.stdout),
        format!("{}\n", i * (i - 1) / 2)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn unicode_output_is_passed_through_byte_exact() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let text = "héllo wörld ✓ 日本語 🐍";
    let done = daemon
        .run(&format!(
            "import sys\nprint({text:?})\nprint('ërr ✗', file=sys.stderr)"
        ))
        .await;
    assert_ok(&done);
    assert_eq!(String::from_utf8(done.stdout).unwrap(), format!("{text}\n"));
    assert_eq!(String::from_utf8(done.stderr).unwrap(), "ërr ✗\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn exit_status_propagates() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let done = daemon.run("import sys\nprint('bye')\nsys.exit(3)").await;
    assert_eq!(
        (done.outcome.reason, done.outcome.exit),
        (Reason::Error, ExitStatus::Code(3)),
        "{}",
        describe(&done)
    );
    assert_eq!(done.stdout, b"bye\n");
    assert!(done.outcome.limits_hit.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_exception_is_an_error_with_its_traceback() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let done = daemon.run("def f():\n    return 1 / 0\n\nf()\n").await;
    assert_eq!(
        (done.outcome.reason, done.outcome.exit),
        (Reason::Error, ExitStatus::Code(1)),
        "{}",
        describe(&done)
    );
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert!(
        stderr.starts_with("Traceback (most recent call last):"),
        "{stderr}"
    );
    assert!(
        stderr.contains("File \"/work/main.py\", line 2, in f"),
        "{stderr}"
    );
    assert!(
        stderr
            .trim_end()
            .ends_with("ZeroDivisionError: division by zero"),
        "{stderr}"
    );
}

/// A connection runs one job at a time but can run many in a row.
#[tokio::test(flavor = "multi_thread")]
async fn one_connection_runs_jobs_back_to_back() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let mut client = daemon.client().await;
    for i in 0..3 {
        let done = client
            .run_collect(&Job::new(format!("print({i})")), None)
            .await
            .expect("job");
        assert_ok(&done);
        assert_eq!(done.stdout, format!("{i}\n").as_bytes());
    }
}

/// `viv run FILE ARGS...` forwards its own stdin to the job; `--json` reports the outcome
/// and the output as one object.
#[tokio::test(flavor = "multi_thread")]
async fn viv_forwards_stdin_and_reports_json() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("sum.py");
    std::fs::write(
        &script,
        "import sys\nprint(sys.argv[1:], sum(int(x) for x in sys.stdin.read().split()))\n",
    )
    .unwrap();
    let script = script.to_str().unwrap();
    let out = daemon.viv(&["run", script, "-x", "y z"], b"1 2 3\n4\n");
    assert_eq!(out.status.code(), Some(0), "{}", describe_output(&out));
    assert_eq!(out.stdout, b"['-x', 'y z'] 10\n");

    let out = daemon.viv(&["run", "--json", script, "a"], b"5 5");
    assert_eq!(out.status.code(), Some(0), "{}", describe_output(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", describe_output(&out)));
    assert_eq!(
        (
            &v["reason"],
            &v["exit"],
            &v["exit_code"],
            &v["stdout"],
            &v["stderr"]
        ),
        (
            &json!("Ok"),
            &json!({"Code": 0}),
            &json!(0),
            &json!("['a'] 10\n"),
            &json!("")
        ),
        "{v:#}"
    );
}

/// Stdin the job never reads must not hold the job (or the client) up.
#[tokio::test(flavor = "multi_thread")]
async fn unread_stdin_does_not_block() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let stdin = vec![b'z'; 8 << 20];
    let started = std::time::Instant::now();
    let done = daemon
        .run_job_stdin(&Job::new("print('ignored')"), Some(&stdin))
        .await;
    assert_ok(&done);
    assert_eq!(done.stdout, b"ignored\n");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

/// Stdin past the daemon's 64 MiB cap is cut off: the job reads EOF there and goes on,
/// and the client gets its outcome as usual (no error event in the middle of the job).
#[tokio::test(flavor = "multi_thread")]
async fn stdin_past_the_cap_reads_eof() {
    if !require_root() {
        return;
    }
    const CAP: usize = 64 << 20;
    let daemon = Daemon::start(DaemonOpts::default());
    let stdin = vec![b's'; CAP + (2 << 20)];
    let code = "import sys\nprint(len(sys.stdin.buffer.read()))";
    let done = daemon.run_job_stdin(&Job::new(code), Some(&stdin)).await;
    assert_ok(&done);
    let got: usize = String::from_utf8_lossy(&done.stdout)
        .trim()
        .parse()
        .unwrap();
    let frame = vivarium_e2e::proto::MAX_PAYLOAD_CHUNK;
    assert!(
        (CAP - frame..=CAP).contains(&got),
        "the job read {got} bytes"
    );
}

/// Fontconfig finds its configuration, so the common plotting case has a clean stderr:
/// matplotlib's font manager runs `fc-list`, and without `/etc/fonts` fontconfig prints
/// "Fontconfig error: Cannot load default config file" into every such job's stderr. The
/// shipped profiles bind `/etc/fonts` where the host has it (an optional bind). The probe
/// reads `fonts.conf` and runs matplotlib's own `fc-list` call with the job's stderr; the
/// job must list the fonts the host has under `/usr` and write nothing to stderr, under
/// every shipped profile a root daemon runs.
#[tokio::test(flavor = "multi_thread")]
async fn fontconfig_finds_its_configuration_under_every_profile() {
    if !require_root() {
        return;
    }
    if !std::path::Path::new("/etc/fonts/fonts.conf").is_file() {
        let name = vivarium_e2e::test_name();
        assert!(
            std::env::var("VIVARIUM_REQUIRE_FONTCONFIG").as_deref() != Ok("1"),
            "{name}: the host has no /etc/fonts/fonts.conf, and VIVARIUM_REQUIRE_FONTCONFIG=1 \
             says it has (apt-get install fontconfig)"
        );
        let _ = writeln!(
            std::io::stderr(),
            "SKIP {name}: the host has no /etc/fonts/fonts.conf (apt-get install fontconfig; \
             CI sets VIVARIUM_REQUIRE_FONTCONFIG=1)"
        );
        return;
    }
    // What the host's fontconfig finds under /usr (the job sees /usr, not /usr/local
    // beyond it or a home directory).
    let host_fonts = std::process::Command::new("fc-list")
        .arg("--format=%{file}\n")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| l.starts_with("/usr/"))
                .count()
        });
    let daemon = Daemon::start(DaemonOpts::default().warm_pools());
    for profile in ["default", "compat", "warm", "zygote", "rootless", "offline"] {
        let done = daemon
            .run_job(&Job::new(probe("fontconfig")).profile(profile))
            .await;
        assert_ok(&done);
        assert_eq!(
            String::from_utf8_lossy(&done.stderr),
            "",
            "{profile}: {}",
            describe(&done)
        );
        let ev = evidence(&done);
        assert_eq!(ev["fonts_conf"], json!("<?xml"), "{profile}: {ev}");
        match host_fonts {
            Some(fonts) => assert_eq!(
                ev["fc_list"],
                json!({"returncode": 0, "fonts": fonts, "outside_usr": []}),
                "{profile}: {}",
                describe(&done)
            ),
            None => assert_eq!(
                ev["fc_list"],
                json!(null),
                "{profile}: no fc-list on the host"
            ),
        }
    }
}
