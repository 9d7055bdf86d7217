//! The client library against a scripted fake daemon.

mod common;

use std::time::Duration;

use common::{outcome, refusal, serve};
use vivarium_client::proto::{
    ErrorCode, Event, ExitStatus, ProfileInfo, Reason, Request, SandboxStart, WireError, MAX_FRAME,
    MAX_PAYLOAD_CHUNK,
};
use vivarium_client::{Client, ClientError, Job, JobEvent, Stream};

#[tokio::test]
async fn run_collect_returns_outcome_and_output() {
    let (_dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        let (spec, code) = c.submit().await;
        assert_eq!(code, b"print('hello world')");
        assert!(!spec.stdin);
        c.send(Event::Started {
            job_id: 42,
            profile: "default".into(),
        })
        .await;
        c.send(Event::Stdout(b"hello ".to_vec())).await;
        c.send(Event::Stderr(b"warn\n".to_vec())).await;
        c.send(Event::Stdout(b"world\n".to_vec())).await;
        c.send(Event::Finished(outcome(
            42,
            Reason::Ok,
            ExitStatus::Code(0),
        )))
        .await;
        // The connection is reusable after Finished.
        assert_eq!(c.recv().await, Some(Request::ListProfiles));
        c.send(Event::Profiles(vec![])).await;
        assert_eq!(c.recv().await, None);
    });
    let mut client = Client::connect(&path).await.unwrap();
    assert_eq!(client.hello().await.unwrap().daemon, "fake/0");
    let done = client
        .run_collect(&Job::new("print('hello world')"), None)
        .await
        .unwrap();
    assert_eq!(done.outcome, *outcome(42, Reason::Ok, ExitStatus::Code(0)));
    assert_eq!(done.stdout, b"hello world\n");
    assert_eq!(done.stderr, b"warn\n");
    assert_eq!(
        client.list_profiles().await.unwrap(),
        Vec::<ProfileInfo>::new()
    );
    drop(client);
    daemon.await.unwrap();
}

#[tokio::test]
async fn busy_is_a_refusal_and_the_connection_stays_usable() {
    let (_dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        c.submit().await;
        c.send(refusal(ErrorCode::Busy)).await;
        assert_eq!(c.recv().await, Some(Request::ListProfiles));
        c.send(Event::Profiles(vec![])).await;
    });
    let mut client = Client::connect(&path).await.unwrap();
    let err = client
        .run_collect(&Job::new("pass"), None)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ClientError::Refused(e) if e.code == ErrorCode::Busy),
        "{err:?}"
    );
    assert_eq!(err.refusal_code(), Some(ErrorCode::Busy));
    client.list_profiles().await.unwrap();
    daemon.await.unwrap();
}

#[tokio::test]
async fn refused_hello_is_a_refusal() {
    let (_dir, path, daemon) = serve(|mut c| async move {
        assert!(matches!(c.recv().await, Some(Request::Hello(_))));
        c.send(refusal(ErrorCode::NotAuthorized)).await;
    });
    let mut client = Client::connect(&path).await.unwrap();
    let err = client.hello().await.unwrap_err();
    assert_eq!(err.refusal_code(), Some(ErrorCode::NotAuthorized));
    daemon.await.unwrap();
}

/// `connect` sends the hello and returns; the answer is read with the first request's
/// events. This fake daemon answers the hello only once the job has arrived: a client
/// that waited for the answer before submitting would never get there.
#[tokio::test]
async fn the_hello_is_answered_with_the_first_job() {
    let (_dir, path, daemon) = serve(|mut c| async move {
        c.read_hello().await;
        c.submit().await;
        c.ack_hello().await;
        c.send(Event::Started {
            job_id: 7,
            profile: "default".into(),
        })
        .await;
        c.send(Event::Finished(outcome(7, Reason::Ok, ExitStatus::Code(0))))
            .await;
    });
    let mut client = Client::connect(&path).await.unwrap();
    let job = Job::new("pass");
    let run = client.run_collect(&job, None);
    let done = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the job's events came")
        .unwrap();
    assert_eq!(done.outcome.reason, Reason::Ok);
    assert_eq!(client.hello().await.unwrap().daemon, "fake/0");
    daemon.await.unwrap();
}

/// A job sent on a connection whose hello the daemon refuses is refused for the hello's
/// reason.
#[tokio::test]
async fn a_job_behind_a_refused_hello_is_refused_for_it() {
    let (_dir, path, daemon) = serve(|mut c| async move {
        c.read_hello().await;
        c.send(refusal(ErrorCode::NotAuthorized)).await;
        // As the daemon does: read what the client sent until it hangs up (closing with
        // unread data would reset the connection before the client reads why).
        c.submit().await;
        assert_eq!(c.recv().await, None);
    });
    let mut client = Client::connect(&path).await.unwrap();
    let err = client
        .run_collect(&Job::new("pass"), None)
        .await
        .unwrap_err();
    assert_eq!(
        err.refusal_code(),
        Some(ErrorCode::NotAuthorized),
        "{err:?}"
    );
    // Nothing more can be asked without a hello.
    assert!(matches!(
        client.list_profiles().await,
        Err(ClientError::Unusable)
    ));
    drop(client);
    daemon.await.unwrap();
}

#[tokio::test]
async fn missing_socket_is_a_connect_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nobody.sock");
    match Client::connect(&path).await {
        Err(ClientError::Connect { path: p, .. }) => assert_eq!(p, path),
        other => panic!("expected a connect error, got {other:?}"),
    }
}

/// A 300 KiB script goes chunked, and 2 MiB of stdin streams while the daemon echoes it
/// back: without reading events while sending stdin, both sides would block on full buffers.
#[tokio::test]
async fn chunked_code_and_stdin_stream_concurrently() {
    let script: String = (0..20_000).map(|i| format!("v{i} = {i}\n")).collect();
    assert!(script.len() > 200 * 1024);
    let input: Vec<u8> = (0..2 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let (expect_code, expect_input) = (script.clone(), input.clone());
    let (_dir, path, daemon) = serve(move |mut c| async move {
        c.hello().await;
        let (spec, code) = c.submit().await;
        assert_eq!(code, expect_code.as_bytes());
        assert!(spec.stdin);
        c.send(Event::Started {
            job_id: 1,
            profile: "default".into(),
        })
        .await;
        let mut echoed = 0;
        loop {
            match c.recv().await {
                Some(Request::Stdin(bytes)) => {
                    assert!(!bytes.is_empty() && bytes.len() <= MAX_PAYLOAD_CHUNK);
                    echoed += bytes.len();
                    c.send(Event::Stdout(bytes)).await;
                }
                Some(Request::StdinEof) => break,
                other => panic!("expected stdin, got {other:?}"),
            }
        }
        assert_eq!(echoed, expect_input.len());
        c.send(Event::Finished(outcome(1, Reason::Ok, ExitStatus::Code(0))))
            .await;
    });
    let mut client = Client::connect(&path).await.unwrap();
    let done = tokio::time::timeout(
        Duration::from_secs(30),
        client.run_collect(&Job::new(script), Some(&input)),
    )
    .await
    .expect("deadlock")
    .unwrap();
    assert_eq!(done.stdout, input);
    daemon.await.unwrap();
}

/// Protocol 3: the client sends no more stdin than its credit. The fake gives 100 000
/// bytes at a time, the next only once the last has arrived.
#[tokio::test]
async fn stdin_stays_within_its_credit() {
    let input: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    let expect = input.clone();
    let (_dir, path, daemon) = serve(move |mut c| async move {
        c.hello().await;
        c.recv().await.expect("submit"); // no credit from `submit()` here
        let got = c.read_stdin_in_credits(100_000).await;
        assert_eq!(got, expect);
        c.send(Event::Finished(outcome(1, Reason::Ok, ExitStatus::Code(0))))
            .await;
    });
    let mut client = Client::connect(&path).await.unwrap();
    let done = tokio::time::timeout(
        Duration::from_secs(30),
        client.run_collect(&Job::new("pass"), Some(&input)),
    )
    .await
    .expect("deadlock")
    .unwrap();
    assert_eq!(done.outcome.reason, Reason::Ok);
    daemon.await.unwrap();
}

#[tokio::test]
async fn cancel_from_another_task() {
    let (_dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        c.submit().await;
        c.send(Event::Started {
            job_id: 9,
            profile: "default".into(),
        })
        .await;
        assert_eq!(c.recv().await, Some(Request::Cancel));
        c.send(Event::Finished(outcome(
            9,
            Reason::Cancelled,
            ExitStatus::Signal(9),
        )))
        .await;
        assert_eq!(c.recv().await, None);
    });
    let mut client = Client::connect(&path).await.unwrap();
    let mut job = client
        .submit(&Job::new("while True: pass"), None::<&[u8]>)
        .await
        .unwrap();
    assert!(matches!(
        job.next_event().await.unwrap(),
        Some(JobEvent::Started { job_id: 9, .. })
    ));
    assert_eq!(job.job_id(), Some(9));
    let canceller = job.canceller();
    let canceller_task = canceller.clone();
    tokio::spawn(async move { assert!(canceller_task.cancel().await.unwrap()) });
    let Some(JobEvent::Finished(o)) = job.next_event().await.unwrap() else {
        panic!("expected the outcome");
    };
    assert_eq!(o.reason, Reason::Cancelled);
    assert_eq!(vivarium_client::exit_code_for(&o), 130);
    assert_eq!(job.next_event().await.unwrap(), None);
    // The job is over: a late cancel sends nothing.
    assert!(!canceller.cancel().await.unwrap());
    drop(job);
    drop(client);
    daemon.await.unwrap();
}

#[tokio::test]
async fn dropping_a_running_job_closes_the_connection() {
    let (_dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        c.submit().await;
        c.send(Event::Started {
            job_id: 3,
            profile: "default".into(),
        })
        .await;
        // The daemon sees the close (and would kill the job) although the client lives on.
        assert_eq!(c.recv().await, None);
    });
    let mut client = Client::connect(&path).await.unwrap();
    let mut job = client
        .submit(&Job::new("pass"), None::<&[u8]>)
        .await
        .unwrap();
    job.next_event().await.unwrap();
    drop(job);
    daemon.await.unwrap();
    assert!(matches!(
        client.list_profiles().await,
        Err(ClientError::Unusable)
    ));
}

#[tokio::test]
async fn output_before_started_is_a_protocol_error() {
    let (_dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        c.submit().await;
        c.send(Event::Stdout(b"early".to_vec())).await;
        assert_eq!(c.recv().await, None);
    });
    let mut client = Client::connect(&path).await.unwrap();
    let err = client
        .run_collect(&Job::new("pass"), None)
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Protocol(_)), "{err:?}");
    daemon.await.unwrap();
}

#[tokio::test]
async fn oversize_datagram_is_a_frame_error() {
    let (_dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        assert_eq!(c.recv().await, Some(Request::ListProfiles));
        c.sock.send(&vec![0u8; MAX_FRAME + 100]).await.unwrap();
        assert_eq!(c.recv().await, None);
    });
    let mut client = Client::connect(&path).await.unwrap();
    let err = client.list_profiles().await.unwrap_err();
    assert!(matches!(err, ClientError::Frame(_)), "{err:?}");
    daemon.await.unwrap();
}

#[tokio::test]
async fn daemon_vanishing_mid_job_is_a_disconnect() {
    let (_dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        c.submit().await;
        c.send(Event::Started {
            job_id: 5,
            profile: "default".into(),
        })
        .await;
    });
    let mut client = Client::connect(&path).await.unwrap();
    let mut seen = Vec::new();
    let err = client
        .run(&Job::new("pass"), None::<&[u8]>, |s: Stream, b: &[u8]| {
            seen.push((s, b.to_vec()))
        })
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Disconnected), "{err:?}");
    assert!(seen.is_empty());
    daemon.await.unwrap();
}

/// `Event::Sandbox` (after `Started`) is kept on the handle and in `Collected`, not
/// returned as an event; before `Started` it is a protocol error.
#[tokio::test]
async fn the_sandbox_start_is_kept_and_only_after_started() {
    let (_dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        c.submit().await;
        c.send(Event::Started {
            job_id: 7,
            profile: "default".into(),
        })
        .await;
        c.send(Event::Sandbox(SandboxStart::Ready { sandbox_id: 7 }))
            .await;
        c.send(Event::Stdout(b"hi\n".to_vec())).await;
        c.send(Event::Finished(outcome(7, Reason::Ok, ExitStatus::Code(0))))
            .await;
        c.submit().await;
        c.send(Event::Sandbox(SandboxStart::Cold)).await;
        assert_eq!(c.recv().await, None);
    });
    let mut client = Client::connect(&path).await.unwrap();
    let done = client
        .run_collect(&Job::new("print('hi')"), None)
        .await
        .unwrap();
    assert_eq!(done.sandbox, Some(SandboxStart::Ready { sandbox_id: 7 }));
    assert_eq!(done.stdout, b"hi\n");
    let early = client.run_collect(&Job::new("pass"), None).await;
    assert!(
        matches!(early, Err(ClientError::Protocol(ref m)) if m.contains("Sandbox")),
        "{early:?}"
    );
    drop(client);
    daemon.await.unwrap();
}

#[tokio::test]
async fn input_files_follow_the_chunked_code() {
    let code = "#".repeat(100_000);
    let want = code.clone();
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let want_big = big.clone();
    let (_dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        let (head, got_code, files) = c.submit_files().await;
        assert_eq!(got_code, want.as_bytes());
        assert_eq!(head.packages, ["numpy"]);
        let paths: Vec<_> = head
            .files
            .iter()
            .map(|f| (f.path.as_str(), f.mode))
            .collect();
        assert_eq!(
            paths,
            [("data/big.bin", 0), ("empty", 0), ("ro.txt", 0o444)]
        );
        assert_eq!(files, [want_big, vec![], b"ro".to_vec()]);
        c.send(Event::Finished(outcome(1, Reason::Ok, ExitStatus::Code(0))))
            .await;
        assert_eq!(c.recv().await, None);
    });
    let mut client = Client::connect(&path).await.unwrap();
    let job = Job::new(code)
        .package("numpy")
        .file("data/big.bin", big)
        .file("empty", Vec::new())
        .file_mode("ro.txt", "ro", 0o444);
    let done = client.run_collect(&job, None).await.unwrap();
    assert_eq!(done.outcome.reason, Reason::Ok);
    drop(client);
    daemon.await.unwrap();
}

#[tokio::test]
async fn files_need_protocol_7_and_nothing_is_sent() {
    let (_dir, path, daemon) = serve(|mut c| async move {
        c.read_hello().await;
        c.ack_hello_version(6).await;
        // The refused job sent nothing: the next request comes straight.
        assert_eq!(c.recv().await, Some(Request::ListProfiles));
        c.send(Event::Profiles(vec![])).await;
    });
    let mut client = Client::connect(&path).await.unwrap();
    let job = Job::new("pass").file("a.txt", "x");
    let err = client.run_collect(&job, None).await.unwrap_err();
    assert!(
        matches!(err, ClientError::FilesUnsupported { version: 6 }),
        "{err:?}"
    );
    assert!(err.to_string().contains("protocol version 7"), "{err}");
    client.list_profiles().await.unwrap();
    daemon.await.unwrap();
}

#[tokio::test]
async fn a_broken_file_rule_is_caught_before_sending() {
    let (_dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        assert_eq!(c.recv().await, Some(Request::ListProfiles));
        c.send(Event::Profiles(vec![])).await;
    });
    let mut client = Client::connect(&path).await.unwrap();
    let job = Job::new("pass").file("../escape", "x");
    let err = client.run_collect(&job, None).await.unwrap_err();
    assert!(matches!(err, ClientError::InvalidInputFiles(_)), "{err:?}");
    assert!(err.to_string().contains("\"../escape\""), "{err}");
    client.list_profiles().await.unwrap();
    daemon.await.unwrap();
}

#[tokio::test]
async fn the_daemons_invalid_input_file_is_a_refusal() {
    let (_dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        c.submit_files().await;
        c.send(Event::Error(WireError {
            code: ErrorCode::InvalidInputFile,
            message: "input file \"big.bin\" is larger than the profile's 1M".into(),
        }))
        .await;
        assert_eq!(c.recv().await, Some(Request::ListProfiles));
        c.send(Event::Profiles(vec![])).await;
    });
    let mut client = Client::connect(&path).await.unwrap();
    let job = Job::new("pass").file("big.bin", vec![0; 5000]);
    let err = client.run_collect(&job, None).await.unwrap_err();
    assert_eq!(err.refusal_code(), Some(ErrorCode::InvalidInputFile));
    assert!(err.to_string().contains("big.bin"), "{err}");
    // A refusal keeps the connection in step.
    client.list_profiles().await.unwrap();
    daemon.await.unwrap();
}
