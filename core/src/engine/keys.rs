//! The key layout of every table. Keys are ordered bytes; integers are
//! big-endian so that byte order is numeric order, and variable-length
//! parts are length-prefixed so that no key is a prefix of an unrelated one.

use alloc::vec::Vec;

use crate::grant::GrantId;
use crate::site::SiteId;
use crate::store::Table;
use crate::time::Timestamp;

/// `Sites`: the site id.
pub(crate) fn site(id: &SiteId) -> &[u8] {
    id.as_str().as_bytes()
}

fn push_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u16).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// `GrantIndex`: `u | site | subject`, the prefix of a user's grants.
pub(crate) fn user_grants(site: &SiteId, subject: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(4 + site.as_str().len() + subject.len() + 16);
    k.push(b'u');
    push_str(&mut k, site.as_str());
    push_str(&mut k, subject);
    k
}

/// `GrantIndex`: `s | site`, the prefix of a site's grants.
pub(crate) fn site_grants(site: &SiteId) -> Vec<u8> {
    let mut k = Vec::with_capacity(3 + site.as_str().len() + 16);
    k.push(b's');
    push_str(&mut k, site.as_str());
    k
}

/// An index prefix followed by the grant id.
pub(crate) fn with_grant(mut prefix: Vec<u8>, grant: &GrantId) -> Vec<u8> {
    prefix.extend_from_slice(grant.as_bytes());
    prefix
}

/// `Expiry`: `expires | table | key`.
pub(crate) fn expiry(at: Timestamp, table: Table, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(9 + key.len());
    k.extend_from_slice(&at.as_secs().to_be_bytes());
    k.push(table.index() as u8);
    k.extend_from_slice(key);
    k
}

/// Splits an `Expiry` key.
pub(crate) fn split_expiry(key: &[u8]) -> Option<(Timestamp, u8, &[u8])> {
    let (at, rest) = key.split_first_chunk::<8>()?;
    let (&table, key) = rest.split_first()?;
    Some((Timestamp::from_secs(u64::from_be_bytes(*at)), table, key))
}
