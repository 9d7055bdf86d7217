//! The session calls of the client library against the scripted fake daemon.

mod common;

use std::time::Duration;

use common::{
    cell_outcome, handle, refusal, serve, session_ended, session_info, session_opened,
    zero_division,
};
use vivarium_client::proto::{
    CellStatus, ErrorCode, Event, PackagesReport, Request, SessionEndReason, MAX_PAYLOAD_CHUNK,
};
use vivarium_client::{cell_exit_code, Cell, CellEvent, Client, ClientError, SessionSpec, Stream};

#[tokio::test]
async fn a_session_opens_runs_cells_lists_and_closes() {
    let (_dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        let Some(Request::OpenSession(open)) = c.recv().await else {
            panic!("expected OpenSession")
        };
        assert_eq!(open.profile, "data");
        assert_eq!(open.packages, ["numpy>=2"]);
        assert_eq!(open.limits.idle_ttl_ms, Some(60_000));
        assert_eq!(open.limits.lifetime_ms, Some(600_000));
        assert_eq!(open.limits.memory_bytes, Some(256 << 20));
        c.send(Event::Packages(PackagesReport::default())).await;
        c.send(session_opened(handle(1))).await;

        let (cell, code) = c.exec_cell().await;
        assert_eq!(cell.session, handle(1));
        assert_eq!(code, b"print('hi'); 6 * 7");
        assert!(!cell.stdin);
        assert_eq!(cell.wall_ms, Some(5_000));
        c.send(Event::Stdout(b"hi\n".to_vec())).await;
        c.send(Event::Stderr(b"warn\n".to_vec())).await;
        let mut done = cell_outcome(handle(1), 1, CellStatus::Ok);
        done.value = Some("42".into());
        c.send(Event::CellFinished(done)).await;

        assert_eq!(c.recv().await, Some(Request::ListSessions));
        c.send(Event::Sessions(vec![session_info(handle(1))])).await;
        assert_eq!(c.recv().await, Some(Request::InterruptCell(handle(1))));
        c.send(Event::SessionAck).await;
        assert_eq!(c.recv().await, Some(Request::CloseSession(handle(1))));
        let mut ended = session_ended(handle(1), SessionEndReason::Closed);
        ended.ended_ms_ago = 0;
        c.send(Event::SessionClosed(ended)).await;
        assert_eq!(c.recv().await, None);
    });
    let mut client = Client::connect(&path).await.unwrap();
    let spec = SessionSpec::new()
        .profile("data")
        .package("numpy>=2")
        .idle_ttl_ms(60_000)
        .lifetime_ms(600_000)
        .memory_bytes(256 << 20);
    let opened = client.open_session(&spec).await.unwrap();
    assert_eq!(opened.info.handle, handle(1));
    let cell = Cell::new(handle(1), "print('hi'); 6 * 7").wall_ms(5_000);
    let done = client.exec_cell_collect(&cell, None).await.unwrap();
    assert_eq!(done.stdout, b"hi\n");
    assert_eq!(done.stderr, b"warn\n");
    assert_eq!(done.outcome.value.as_deref(), Some("42"));
    assert_eq!(cell_exit_code(&done.outcome), 0);
    let sessions = client.list_sessions().await.unwrap();
    assert_eq!(sessions, vec![session_info(handle(1))]);
    client.interrupt_cell(&handle(1)).await.unwrap();
    let ended = client.close_session(&handle(1)).await.unwrap();
    assert_eq!(ended.reason, SessionEndReason::Closed);
    drop(client);
    daemon.await.unwrap();
}

/// An ended session is its own typed error, which says why and how to go on; the
/// connection stays usable.
#[tokio::test]
async fn an_expired_handle_is_a_typed_error_and_the_connection_goes_on() {
    let (_dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        c.exec_cell().await;
        c.send(Event::SessionExpired(session_ended(
            handle(2),
            SessionEndReason::IdleTimeout,
        )))
        .await;
        assert_eq!(c.recv().await, Some(Request::CloseSession(handle(2))));
        c.send(Event::SessionExpired(session_ended(
            handle(2),
            SessionEndReason::DaemonRestarted,
        )))
        .await;
        assert_eq!(c.recv().await, Some(Request::ListSessions));
        c.send(Event::Sessions(vec![])).await;
    });
    let mut client = Client::connect(&path).await.unwrap();
    let err = client
        .exec_cell_collect(&Cell::new(handle(2), "x"), None)
        .await
        .unwrap_err();
    let ClientError::SessionExpired(ended) = &err else {
        panic!("expected SessionExpired, got {err:?}");
    };
    assert_eq!(ended.reason, SessionEndReason::IdleTimeout);
    let text = err.to_string();
    assert!(text.contains("idle for longer than its TTL"), "{text}");
    assert!(text.contains("open a new session"), "{text}");
    assert_eq!(err.refusal_code(), None);
    assert!(err.session_ended().is_some());
    let err = client.close_session(&handle(2)).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("the daemon restarted: every session ended"),
        "{err}"
    );
    assert_eq!(client.list_sessions().await.unwrap(), vec![]);
    daemon.await.unwrap();
}

#[tokio::test]
async fn not_found_busy_and_disabled_are_refusals() {
    let (_dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        c.exec_cell().await;
        c.send(refusal(ErrorCode::SessionNotFound)).await;
        c.exec_cell().await;
        c.send(refusal(ErrorCode::SessionBusy)).await;
        assert_eq!(c.recv().await, Some(Request::InterruptCell(handle(4))));
        c.send(refusal(ErrorCode::SessionNotFound)).await;
        assert!(matches!(c.recv().await, Some(Request::OpenSession(_))));
        c.send(refusal(ErrorCode::SessionsDisabled)).await;
        assert_eq!(c.recv().await, Some(Request::ListSessions));
        c.send(Event::Sessions(vec![])).await;
    });
    let mut client = Client::connect(&path).await.unwrap();
    let cell = Cell::new(handle(3), "pass");
    let err = client.exec_cell_collect(&cell, None).await.unwrap_err();
    assert_eq!(
        err.refusal_code(),
        Some(ErrorCode::SessionNotFound),
        "{err:?}"
    );
    let err = client.exec_cell_collect(&cell, None).await.unwrap_err();
    assert_eq!(err.refusal_code(), Some(ErrorCode::SessionBusy), "{err:?}");
    let err = client.interrupt_cell(&handle(4)).await.unwrap_err();
    assert_eq!(
        err.refusal_code(),
        Some(ErrorCode::SessionNotFound),
        "{err:?}"
    );
    let err = client.open_session(&SessionSpec::new()).await.unwrap_err();
    assert_eq!(
        err.refusal_code(),
        Some(ErrorCode::SessionsDisabled),
        "{err:?}"
    );
    client.list_sessions().await.unwrap();
    daemon.await.unwrap();
}

/// A daemon older than protocol 6 is not asked: the client refuses with a clear error and
/// sends nothing (the fake sees the connection close with no request).
#[tokio::test]
async fn a_daemon_before_protocol_6_is_not_asked_about_sessions() {
    let (_dir, path, daemon) = serve(|mut c| async move {
        c.read_hello().await;
        c.ack_hello_version(5).await;
        assert_eq!(c.recv().await, None);
    });
    let mut client = Client::connect(&path).await.unwrap();
    let err = client.open_session(&SessionSpec::new()).await.unwrap_err();
    assert!(
        matches!(err, ClientError::SessionsUnsupported { version: 5 }),
        "{err:?}"
    );
    assert!(err.to_string().contains("protocol version 6"), "{err}");
    assert!(matches!(
        client
            .exec_cell_collect(&Cell::new(handle(1), "x"), None)
            .await,
        Err(ClientError::SessionsUnsupported { .. })
    ));
    assert!(matches!(
        client.list_sessions().await,
        Err(ClientError::SessionsUnsupported { .. })
    ));
    drop(client);
    daemon.await.unwrap();
}

/// A cell's stdin goes against credit exactly as a job's: 100 000 bytes at a time, the
/// next credit only once the last is used up; the cell's code is chunked past a frame.
#[tokio::test]
async fn a_cells_stdin_stays_within_its_credit() {
    let input: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    let code = "#".repeat(3 * MAX_PAYLOAD_CHUNK);
    let (expect, expect_code) = (input.clone(), code.clone());
    let (_dir, path, daemon) = serve(move |mut c| async move {
        c.hello().await;
        let Some(Request::ExecCell(cell)) = c.recv().await else {
            panic!("expected ExecCell")
        };
        assert!(cell.stdin);
        let mut got_code = Vec::new();
        while got_code.len() < expect_code.len() {
            let Some(Request::CodeChunk(piece)) = c.recv().await else {
                panic!("expected a code chunk")
            };
            got_code.extend_from_slice(&piece);
        }
        assert_eq!(got_code, expect_code.as_bytes());
        let got = c.read_stdin_in_credits(100_000).await;
        assert_eq!(got, expect);
        c.send(Event::CellFinished(cell_outcome(
            handle(1),
            1,
            CellStatus::Ok,
        )))
        .await;
    });
    let mut client = Client::connect(&path).await.unwrap();
    let done = tokio::time::timeout(
        Duration::from_secs(30),
        client.exec_cell_collect(&Cell::new(handle(1), code), Some(&input)),
    )
    .await
    .expect("deadlock")
    .unwrap();
    assert_eq!(done.outcome.status, CellStatus::Ok);
    daemon.await.unwrap();
}

/// `Cancel` while a cell runs interrupts it; its outcome still comes (Interrupted), the
/// connection is reusable, and a late interrupt sends nothing.
#[tokio::test]
async fn cancel_interrupts_the_cell_and_the_session_goes_on() {
    let (_dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        c.exec_cell().await;
        c.send(Event::Stdout(b"tick\n".to_vec())).await;
        assert_eq!(c.recv().await, Some(Request::Cancel));
        c.send(Event::CellFinished(cell_outcome(
            handle(1),
            2,
            CellStatus::Interrupted,
        )))
        .await;
        c.exec_cell().await;
        c.send(Event::CellFinished(zero_division(3))).await;
        assert_eq!(c.recv().await, None);
    });
    let mut client = Client::connect(&path).await.unwrap();
    let cell = Cell::new(handle(1), "while True: print('tick')");
    let mut running = client.exec_cell(&cell, None::<&[u8]>).await.unwrap();
    assert_eq!(running.session(), &handle(1));
    assert_eq!(
        running.next_event().await.unwrap(),
        Some(CellEvent::Output(Stream::Stdout, b"tick\n".to_vec()))
    );
    let interrupter = running.interrupter();
    let aside = interrupter.clone();
    tokio::spawn(async move { assert!(aside.cancel().await.unwrap()) });
    let Some(CellEvent::Finished(outcome)) = running.next_event().await.unwrap() else {
        panic!("expected the cell's outcome");
    };
    assert_eq!(outcome.status, CellStatus::Interrupted);
    assert_eq!(cell_exit_code(&outcome), 130);
    assert_eq!(running.next_event().await.unwrap(), None);
    assert!(!interrupter.cancel().await.unwrap());
    drop(running);
    let done = client
        .exec_cell_collect(&Cell::new(handle(1), "1/0"), None)
        .await
        .unwrap();
    assert!(matches!(done.outcome.status, CellStatus::Exception(_)));
    assert_eq!(cell_exit_code(&done.outcome), 1);
    drop(client);
    daemon.await.unwrap();
}

#[tokio::test]
async fn an_outcome_for_another_session_is_a_protocol_error() {
    let (_dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        c.exec_cell().await;
        c.send(Event::CellFinished(cell_outcome(
            handle(9),
            1,
            CellStatus::Ok,
        )))
        .await;
        assert_eq!(c.recv().await, None);
    });
    let mut client = Client::connect(&path).await.unwrap();
    let err = client
        .exec_cell_collect(&Cell::new(handle(1), "x"), None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClientError::Protocol(ref m) if m.contains("session")),
        "{err:?}"
    );
    // The conversation is out of step: the connection is closed.
    assert!(matches!(
        client.list_sessions().await,
        Err(ClientError::Unusable)
    ));
    daemon.await.unwrap();
}
