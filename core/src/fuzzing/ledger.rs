//! Fuzz entry points for the execution ledger: the `execute` envelope and
//! the `outcomeCursor`.

use alloc::string::ToString;

use super::keyring;
use crate::ledger::{
    self, CodeFingerprint, ExecuteParams, Lineage, MAX_CODE_LEN, MAX_ENVELOPE_LEN, RequestId,
};

/// Parses arbitrary bytes as an `execute` envelope and as a request id.
/// Whatever is accepted must be within bounds, print back to an id that
/// parses to itself, and fingerprint its code deterministically.
pub fn execute_request(data: &[u8]) {
    if let Ok(params) = ExecuteParams::parse_json(data) {
        assert!(data.len() <= MAX_ENVELOPE_LEN);
        assert!(!params.code.is_empty() && params.code.len() <= MAX_CODE_LEN);
        let text = params.request_id.to_string();
        assert_eq!(RequestId::parse(&text), Ok(params.request_id));
        assert_eq!(
            params.fingerprint(),
            CodeFingerprint::of(params.code.as_bytes())
        );
        let again = ExecuteParams::new(&text, params.code.clone(), params.outcome_cursor.clone())
            .expect("accepted parts are accepted again");
        assert_eq!(again, params);
    }
    if let Ok(text) = core::str::from_utf8(data)
        && let Ok(id) = RequestId::parse(text)
    {
        assert_eq!(id.to_string(), text.to_ascii_lowercase());
    }
}

/// Opens arbitrary bytes as an `outcomeCursor` of a fixed request. Only a
/// cursor the keyring issued for that request and position may open, and
/// cursors issued for a position derived from the input must open to it.
pub fn outcome_cursor(data: &[u8]) {
    let keyring = keyring();
    let lineage = Lineage::of("site", "user", "client");
    let request = RequestId::from_bytes([3; 16]);
    if let Ok(text) = core::str::from_utf8(data)
        && let Ok(seq) = ledger::open_cursor(&keyring, &lineage, &request, text)
    {
        let issued = ledger::issue_cursor(&keyring, &lineage, &request, seq).expect("active key");
        assert_eq!(issued, text, "only issued cursors open");
    }
    let seq = data
        .iter()
        .take(4)
        .fold(0u32, |acc, b| acc.rotate_left(8) ^ u32::from(*b));
    let issued = ledger::issue_cursor(&keyring, &lineage, &request, seq).expect("active key");
    assert_eq!(
        ledger::open_cursor(&keyring, &lineage, &request, &issued),
        Ok(seq)
    );
    let other = RequestId::from_bytes([4; 16]);
    assert!(ledger::open_cursor(&keyring, &lineage, &other, &issued).is_err());
}

/// A multi round-trip request's sealed state (`ledger::resume`) from
/// arbitrary text: only a state sealed for this lineage and call opens, and
/// it opens to what was sealed; one sealed from the input's bytes opens for
/// its own call only.
pub fn request_state(data: &[u8]) {
    use crate::ledger::resume::{self, CallDigest, ResumeState};
    let keyring = keyring();
    let lineage = Lineage::of("site", "user", "client");
    let call = CallDigest::of("tools/call", "t", b"{}");
    let now = crate::Timestamp::from_secs(1_000);
    if let Ok(text) = core::str::from_utf8(data)
        && let Ok(state) = resume::open(&keyring, &lineage, &call, text, now)
    {
        let again = resume::seal(&keyring, &lineage, &call, &state).expect("active key");
        assert_eq!(again, text, "only sealed states open");
    }
    let mut id = [0u8; 16];
    for (i, b) in data.iter().take(16).enumerate() {
        id[i] = *b;
    }
    let state = ResumeState {
        request_id: RequestId::from_bytes(id),
        prompted: data.first().is_some_and(|b| b & 1 == 1),
        expires: crate::Timestamp::from_secs(2_000),
    };
    let sealed = resume::seal(&keyring, &lineage, &call, &state).expect("active key");
    assert_eq!(
        resume::open(&keyring, &lineage, &call, &sealed, now),
        Ok(state)
    );
    let other = CallDigest::of("tools/call", "t", data);
    if data != b"{}" {
        assert!(resume::open(&keyring, &lineage, &other, &sealed, now).is_err());
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn seeds_and_edge_cases_do_not_panic() {
        for data in [
            &br#"{"requestId":"0190b2a4-7c3e-7def-8abc-0123456789ab","code":"x"}"#[..],
            b"",
            b"\xff",
            b"0190B2A4-7C3E-7DEF-8ABC-0123456789AB",
            b"AAAAZAAAAAAAAAAAAAAAAAAAAAA.k1",
        ] {
            super::execute_request(data);
            super::outcome_cursor(data);
            super::request_state(data);
        }
    }
}
