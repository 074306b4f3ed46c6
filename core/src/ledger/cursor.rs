//! The opaque `outcomeCursor`: the position of the next outcome page, under
//! a MAC that binds it to one request.
//!
//! Text form: `base64url(seq ‖ tag[..16]) "." kid`, where the tag is
//! `mac_labeled("portcullis/outcome-cursor/v1", [lineage, request id, seq])`
//! under the keyring key `kid`. A client cannot forge one, move it to
//! another request or another user's request, or move it to another position;
//! the same position always gives the same cursor, so paging is stable.

use alloc::string::String;

use crate::jwt::b64;
use subtle::ConstantTimeEq;

use super::LedgerError;
use super::id::{Lineage, RequestId};
use crate::jwt::{Keyring, SigningKey};

const LABEL: &str = "portcullis/outcome-cursor/v1";
/// Longest cursor text accepted.
pub const MAX_CURSOR_LEN: usize = 128;

fn tag(key: &SigningKey, lineage: &Lineage, request: &RequestId, seq: u32) -> [u8; 32] {
    key.mac_labeled(LABEL, &[&lineage.0, request.as_bytes(), &seq.to_be_bytes()])
}

/// The cursor of the page starting at `seq`, or `None` without an active key.
pub(crate) fn issue(
    keyring: &Keyring,
    lineage: &Lineage,
    request: &RequestId,
    seq: u32,
) -> Option<String> {
    let (kid, key) = keyring.active_key()?;
    let mut raw = [0u8; 20];
    raw[..4].copy_from_slice(&seq.to_be_bytes());
    raw[4..].copy_from_slice(&tag(key, lineage, request, seq)[..16]);
    let mut out = b64::encode(&raw);
    out.push('.');
    out.push_str(kid);
    Some(out)
}

/// The position a cursor names, if it was issued for this request.
pub(crate) fn open(
    keyring: &Keyring,
    lineage: &Lineage,
    request: &RequestId,
    cursor: &str,
) -> Result<u32, LedgerError> {
    let (seq, tag_bytes, kid) = split(cursor).ok_or(LedgerError::InvalidCursor)?;
    let key = keyring
        .verifying_key(kid)
        .map_err(|_| LedgerError::InvalidCursor)?;
    let expected = tag(key, lineage, request, seq);
    if bool::from(expected[..16].ct_eq(&tag_bytes)) {
        Ok(seq)
    } else {
        Err(LedgerError::InvalidCursor)
    }
}

/// Splits the text form; nothing is trusted yet.
pub(crate) fn split(cursor: &str) -> Option<(u32, [u8; 16], &str)> {
    if cursor.len() > MAX_CURSOR_LEN {
        return None;
    }
    let (body, kid) = cursor.split_once('.')?;
    let mut raw = [0u8; 20];
    if body.len() != 27 || b64::decode_into(body.as_bytes(), &mut raw) != Some(20) {
        return None;
    }
    let seq = u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]);
    let mut t = [0u8; 16];
    t.copy_from_slice(&raw[4..]);
    Some((seq, t, kid))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keyring() -> Keyring {
        let mut k = Keyring::new();
        k.insert("k1", SigningKey::from_bytes(&[5; 32]).unwrap())
            .unwrap();
        k.set_active("k1").unwrap();
        k
    }

    #[test]
    fn cursors_round_trip_and_bind_request_and_position() {
        let k = keyring();
        let l = Lineage::of("s", "u", "c");
        let r = RequestId::from_bytes([1; 16]);
        let c = issue(&k, &l, &r, 100).unwrap();
        assert_eq!(
            issue(&k, &l, &r, 100).as_deref(),
            Some(c.as_str()),
            "stable"
        );
        assert_eq!(open(&k, &l, &r, &c), Ok(100));
        let other = RequestId::from_bytes([2; 16]);
        assert_eq!(open(&k, &l, &other, &c), Err(LedgerError::InvalidCursor));
        let other_user = Lineage::of("s", "v", "c");
        assert_eq!(
            open(&k, &other_user, &r, &c),
            Err(LedgerError::InvalidCursor)
        );
        // Moving the position breaks the tag.
        let moved = issue(&k, &l, &r, 200).unwrap();
        let forged = alloc::format!("{}{}", &moved[..6], &c[6..]);
        assert_eq!(open(&k, &l, &r, &forged), Err(LedgerError::InvalidCursor));
        for bad in [
            "",
            ".",
            "abc.k1",
            &"A".repeat(200),
            "AAAAAAAAAAAAAAAAAAAAAAAAAAA.nokey",
        ] {
            assert_eq!(
                open(&k, &l, &r, bad),
                Err(LedgerError::InvalidCursor),
                "{bad}"
            );
        }
    }
}
