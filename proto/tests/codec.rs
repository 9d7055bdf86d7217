//! Property tests of the frame codec: every variant of `Request` and `Event` (with
//! integers biased to bincode's varint boundaries, strings with NUL and multi-byte
//! characters, payloads up to a full chunk) round-trips; every strict prefix and every
//! one-byte extension of a valid frame is refused; mutated frames never panic, and what
//! decodes re-encodes to itself. proptest prints the failing case and keeps it in
//! `proptest-regressions/`.

use proptest::collection::vec;
use proptest::prelude::*;
use vivarium_proto::*;

/// Integers at the varint boundaries (250/251, 2^16, 2^32) and the extremes, small ones,
/// and anything.
fn int() -> impl Strategy<Value = u64> {
    prop_oneof![
        prop::sample::select(vec![
            0,
            1,
            250,
            251,
            255,
            256,
            65_535,
            65_536,
            u64::from(u32::MAX),
            u64::from(u32::MAX) + 1,
            u64::MAX - 1,
            u64::MAX,
        ]),
        0..1000u64,
        any::<u64>(),
    ]
}

fn int32() -> impl Strategy<Value = u32> {
    int().prop_map(|v| v as u32)
}

fn text() -> impl Strategy<Value = String> {
    vec(
        prop::sample::select(vec!['a', 'Z', ' ', '\0', '\n', 'é', '€', '🦀']),
        0..16,
    )
    .prop_map(|c| c.into_iter().collect())
}

fn texts() -> impl Strategy<Value = Vec<String>> {
    vec(text(), 0..4)
}

/// A payload: short most of the time, sometimes a full chunk.
fn payload() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        8 => vec(any::<u8>(), 0..24),
        1 => vec(any::<u8>(), 0..4096),
        1 => vec(any::<u8>(), MAX_PAYLOAD_CHUNK - 64..=MAX_PAYLOAD_CHUNK),
    ]
}

fn limits() -> impl Strategy<Value = LimitOverrides> {
    (
        proptest::option::of(int()),
        proptest::option::of(int()),
        proptest::option::of(int()),
        proptest::option::of(int32()),
        proptest::option::of(int()),
    )
        .prop_map(
            |(wall_ms, cpu_ms, memory_bytes, pids, output_bytes)| LimitOverrides {
                wall_ms,
                cpu_ms,
                memory_bytes,
                pids,
                output_bytes,
            },
        )
}

fn spec() -> impl Strategy<Value = JobSpec> {
    (
        text(),
        prop_oneof![
            payload().prop_map(Code::Inline),
            int().prop_map(|len| Code::Chunked { len }),
        ],
        texts(),
        any::<bool>(),
        limits(),
    )
        .prop_map(|(profile, code, args, stdin, limits)| JobSpec {
            profile,
            code,
            args,
            stdin,
            limits,
        })
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (int32(), int32(), text()).prop_map(|(min_version, max_version, client)| {
            Request::Hello(Hello {
                min_version,
                max_version,
                client,
            })
        }),
        spec().prop_map(Request::Submit),
        payload().prop_map(Request::CodeChunk),
        payload().prop_map(Request::Stdin),
        Just(Request::StdinEof),
        Just(Request::Cancel),
        Just(Request::ListProfiles),
        (spec(), texts()).prop_map(|(spec, packages)| Request::SubmitWith(Box::new(SubmitWith {
            spec,
            packages
        }))),
        Just(Request::ListProfileFeatures),
    ]
}

fn error_code() -> impl Strategy<Value = ErrorCode> {
    prop::sample::select(vec![
        ErrorCode::MalformedFrame,
        ErrorCode::OversizeFrame,
        ErrorCode::UnsupportedVersion,
        ErrorCode::NotAuthorized,
        ErrorCode::UnexpectedMessage,
        ErrorCode::UnknownProfile,
        ErrorCode::ProfileDisabled,
        ErrorCode::InvalidCode,
        ErrorCode::LimitOutOfRange,
        ErrorCode::Busy,
        ErrorCode::SandboxFailed,
        ErrorCode::Internal,
        ErrorCode::ShuttingDown,
        ErrorCode::CodeTooLarge,
        ErrorCode::InvalidRequirement,
        ErrorCode::PackageNotAllowed,
        ErrorCode::PackageNotFound,
        ErrorCode::NoCompatibleWheel,
        ErrorCode::ResolutionConflict,
        ErrorCode::IndexUnreachable,
        ErrorCode::EnvironmentTooLarge,
        ErrorCode::InstallTimeout,
        ErrorCode::InstallFailed,
    ])
}

fn reason() -> impl Strategy<Value = Reason> {
    prop::sample::select(vec![
        Reason::Ok,
        Reason::Error,
        Reason::Timeout,
        Reason::CpuLimit,
        Reason::Oom,
        Reason::Pids,
        Reason::OutputLimit,
        Reason::Signal,
        Reason::Seccomp,
        Reason::Cancelled,
        Reason::SandboxError,
    ])
}

fn limit_kind() -> impl Strategy<Value = LimitKind> {
    prop::sample::select(vec![
        LimitKind::Wall,
        LimitKind::Cpu,
        LimitKind::Memory,
        LimitKind::Pids,
        LimitKind::Stdout,
        LimitKind::Stderr,
        LimitKind::Disk,
    ])
}

fn isolation() -> impl Strategy<Value = Isolation> {
    (
        texts(),
        (int32(), int32(), any::<bool>(), any::<bool>(), int32()),
        proptest::option::of(prop::sample::select(vec![
            LandlockStatus::FullyEnforced,
            LandlockStatus::PartiallyEnforced,
            LandlockStatus::NotEnforced,
        ])),
        int32(),
        proptest::option::of(prop::sample::select(vec![
            CgroupVersion::V1,
            CgroupVersion::V2,
        ])),
        texts(),
    )
        .prop_map(
            |(namespaces, (uid, gid, nnp, caps, abi), landlock, filters, cgroup, not_enforced)| {
                Isolation {
                    namespaces,
                    uid,
                    gid,
                    no_new_privs: nnp,
                    capabilities_dropped: caps,
                    landlock_abi: abi,
                    landlock,
                    seccomp_filters: filters,
                    cgroup,
                    not_enforced,
                }
            },
        )
}

fn outcome() -> impl Strategy<Value = Outcome> {
    (
        (int(), text(), reason()),
        prop_oneof![
            int32().prop_map(|c| ExitStatus::Code(c as i32)),
            int32().prop_map(|s| ExitStatus::Signal(s as i32)),
            Just(ExitStatus::NotStarted),
        ],
        vec(limit_kind(), 0..8),
        (int(), int(), int(), int(), int()),
        (any::<bool>(), any::<bool>()),
        isolation(),
        text(),
    )
        .prop_map(
            |(
                (job_id, profile, reason),
                exit,
                limits_hit,
                u,
                (out_t, err_t),
                isolation,
                detail,
            )| {
                Outcome {
                    job_id,
                    profile,
                    reason,
                    exit,
                    limits_hit,
                    usage: Usage {
                        wall_ms: u.0,
                        cpu_ms: u.1,
                        peak_memory_bytes: u.2,
                        stdout_bytes: u.3,
                        stderr_bytes: u.4,
                    },
                    stdout_truncated: out_t,
                    stderr_truncated: err_t,
                    isolation,
                    detail,
                }
            },
        )
}

fn profile_info() -> impl Strategy<Value = ProfileInfo> {
    (
        text(),
        text(),
        proptest::option::of(text()),
        any::<bool>(),
        (int(), int(), int(), int32(), int()),
        texts(),
    )
        .prop_map(
            |(name, description, disabled, network, m, not_enforced)| ProfileInfo {
                name,
                description,
                disabled,
                network,
                max: MaxLimits {
                    wall_ms: m.0,
                    cpu_ms: m.1,
                    memory_bytes: m.2,
                    pids: m.3,
                    output_bytes: m.4,
                },
                not_enforced,
            },
        )
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        (int32(), text(), int32()).prop_map(|(version, daemon, peer_uid)| {
            Event::HelloAck(HelloAck {
                version,
                daemon,
                peer_uid,
            })
        }),
        int32().prop_map(|position| Event::Queued { position }),
        (int(), text()).prop_map(|(job_id, profile)| Event::Started { job_id, profile }),
        payload().prop_map(Event::Stdout),
        payload().prop_map(Event::Stderr),
        outcome().prop_map(|o| Event::Finished(Box::new(o))),
        (error_code(), text())
            .prop_map(|(code, message)| Event::Error(WireError { code, message })),
        vec(profile_info(), 0..3).prop_map(Event::Profiles),
        (texts(), texts(), any::<bool>(), int(), int()).prop_map(
            |(requested, resolved, from_cache, install_ms, env_bytes)| {
                Event::Packages(PackagesReport {
                    requested,
                    resolved,
                    from_cache,
                    install_ms,
                    env_bytes,
                })
            }
        ),
        int().prop_map(Event::StdinCredit),
        vec(
            (
                text(),
                prop::option::of(text()),
                any::<bool>(),
                prop::option::of(text())
            )
                .prop_map(
                    |(name, packages_unavailable, packages_from_index, python)| ProfileFeatures {
                        name,
                        packages_unavailable,
                        packages_from_index,
                        python,
                    }
                ),
            0..3
        )
        .prop_map(Event::ProfileFeatures),
    ]
}

/// A damaged frame: one bit flipped, one byte inserted or one byte removed, at `at`
/// (modulo the frame's length).
#[derive(Debug, Clone)]
enum Damage {
    Flip(usize, u8),
    Insert(usize, u8),
    Remove(usize),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (any::<usize>(), 0..8u8).prop_map(|(at, bit)| Damage::Flip(at, bit)),
        (any::<usize>(), any::<u8>()).prop_map(|(at, b)| Damage::Insert(at, b)),
        any::<usize>().prop_map(Damage::Remove),
    ]
}

fn apply(frame: &[u8], d: &Damage) -> Vec<u8> {
    let mut m = frame.to_vec();
    match *d {
        Damage::Flip(at, bit) if !m.is_empty() => {
            let at = at % m.len();
            m[at] ^= 1 << bit;
        }
        Damage::Insert(at, b) => m.insert(at % (m.len() + 1), b),
        Damage::Remove(at) if !m.is_empty() => {
            m.remove(at % m.len());
        }
        _ => {}
    }
    m
}

/// Round trip, refused prefixes and extension, and damage, for one message.
fn check<T>(msg: &T, extra: u8, damages: &[Damage]) -> Result<(), TestCaseError>
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let frame = match encode(msg) {
        Ok(f) => f,
        // Too big for one frame (several full payloads): refused whole, as it must be.
        Err(FrameError::Oversize { len, .. }) => {
            prop_assert!(len > MAX_FRAME);
            return Ok(());
        }
        Err(e) => return Err(TestCaseError::fail(format!("{msg:?} does not encode: {e}"))),
    };
    prop_assert!(frame.len() <= MAX_FRAME);
    prop_assert_eq!(&decode::<T>(&frame).expect("a valid frame decodes"), msg);
    // Every strict prefix is refused (every 1/64th for long frames).
    let step = (frame.len() / 64).max(1);
    for cut in (0..frame.len()).step_by(step) {
        prop_assert!(
            decode::<T>(&frame[..cut]).is_err(),
            "a {cut}-byte prefix decoded"
        );
    }
    let mut longer = frame.clone();
    longer.push(extra);
    let refused = matches!(
        decode::<T>(&longer),
        Err(FrameError::TrailingBytes { extra: 1 }) | Err(FrameError::Oversize { .. })
    );
    prop_assert!(refused, "a frame with one more byte was not refused");
    for d in damages {
        let m = apply(&frame, d);
        if let Ok(v) = decode::<T>(&m) {
            let again = encode(&v).expect("a decoded message re-encodes");
            prop_assert!(again.len() <= m.len());
            prop_assert_eq!(decode::<T>(&again).expect("its frame decodes"), v);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_request_round_trips_and_damage_is_refused(
        req in request(), extra in any::<u8>(), damages in vec(damage(), 16)
    ) {
        check(&req, extra, &damages)?;
    }

    #[test]
    fn every_event_round_trips_and_damage_is_refused(
        ev in event(), extra in any::<u8>(), damages in vec(damage(), 16)
    ) {
        check(&ev, extra, &damages)?;
    }
}

/// The documented frames of `docs/protocol.md` are what `encode` produces.
#[test]
fn documented_bytes_are_the_wire_format() {
    let hello = Request::Hello(Hello {
        min_version: 1,
        max_version: 1,
        client: "viv".into(),
    });
    let started = Event::Started {
        job_id: 300,
        profile: "default".into(),
    };
    let cases: Vec<(Vec<u8>, Vec<u8>)> = vec![
        (encode(&Request::Cancel).unwrap(), vec![0x05]),
        (encode(&Request::StdinEof).unwrap(), vec![0x04]),
        (
            encode(&hello).unwrap(),
            vec![0x00, 0x01, 0x01, 0x03, b'v', b'i', b'v'],
        ),
        (
            encode(&started).unwrap(),
            [&[0x02, 0xfb, 0x2c, 0x01, 0x07][..], b"default"].concat(),
        ),
    ];
    for (got, want) in cases {
        assert_eq!(got, want);
    }
    // A full payload chunk fits in every variant that carries one.
    let chunk = vec![0xffu8; MAX_PAYLOAD_CHUNK];
    for frame in [
        encode(&Request::CodeChunk(chunk.clone())),
        encode(&Request::Stdin(chunk.clone())),
        encode(&Event::Stdout(chunk.clone())),
        encode(&Event::Stderr(chunk)),
    ] {
        assert!(frame.expect("a full chunk encodes").len() <= MAX_FRAME);
    }
}

/// Whatever `encode` accepts (at most `MAX_FRAME` bytes on the wire), `decode` accepts.
/// bincode's decode limit counts *in-memory* sizes (8 per length prefix or u64, 4 per u32
/// or variant index) while the wire spends 1 byte on a small integer, so a limit of
/// `MAX_FRAME` refused frames that fit: many short arguments, or a near-limit inline script
/// with a few arguments, came back as `MalformedFrame` (fixed with a larger decode limit).
#[test]
fn frames_that_encode_within_the_limit_decode() {
    let submit = |code: usize, args: Vec<String>| {
        Request::Submit(JobSpec {
            profile: "default".into(),
            code: Code::Inline(vec![b'#'; code]),
            args,
            stdin: false,
            limits: LimitOverrides::default(),
        })
    };
    let cases = [
        (
            "5000 ten-byte arguments",
            submit(10, vec!["a".repeat(10); 5000]),
        ),
        (
            "a 64000-byte script and 100 arguments",
            submit(64_000, vec!["b".repeat(13); 100]),
        ),
        (
            "a full inline script",
            submit(MAX_PAYLOAD_CHUNK - 64, vec![]),
        ),
    ];
    for (name, req) in cases {
        let frame = encode(&req).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(frame.len() <= MAX_FRAME);
        let back = decode::<Request>(&frame).unwrap_or_else(|e| {
            panic!(
                "{name}: a {}-byte frame does not decode: {e:?}",
                frame.len()
            )
        });
        assert_eq!(back, req);
    }
}

/// bincode's varint decoder accepts a non-minimal encoding of a small integer (here the
/// variant index 4 as `0xfb` + u16): two frames can carry one message. Harmless for this
/// protocol (nothing is signed or compared as bytes), but pinned so a change is noticed.
#[test]
fn non_minimal_integers_decode_to_the_same_message() {
    let long_form = [0xfb, 0x04, 0x00];
    match decode::<Request>(&long_form) {
        Ok(msg) => assert_eq!(msg, Request::StdinEof),
        Err(e) => eprintln!("non-minimal varints are refused now ({e}); update this test"),
    }
}
