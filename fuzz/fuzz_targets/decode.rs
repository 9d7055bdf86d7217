//! The frame decoder on arbitrary bytes, both directions: it must never panic or abort
//! (a huge claimed length is an error, not an allocation), and whatever it accepts must
//! re-encode into a frame that decodes to the same message. (Not necessarily the same
//! bytes: bincode's varint decoder accepts non-minimal integer encodings.)
#![no_main]

use libfuzzer_sys::fuzz_target;
use vivarium_proto::{decode, encode, Event, FrameError, Request, MAX_FRAME};

fn check<T>(data: &[u8])
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    match decode::<T>(data) {
        Ok(msg) => {
            let again = encode(&msg).expect("a decoded message re-encodes");
            assert!(
                again.len() <= data.len(),
                "re-encoding grew the frame: {msg:?}"
            );
            let back: T = decode(&again).expect("a re-encoded frame decodes");
            assert_eq!(back, msg);
        }
        Err(FrameError::Oversize { len, .. }) => assert!(len > MAX_FRAME),
        Err(_) => {}
    }
}

fuzz_target!(|data: &[u8]| {
    check::<Request>(data);
    check::<Event>(data);
});
