//! The key layout of every table. Keys are ordered bytes; integers are
//! big-endian so that byte order is numeric order, and variable-length
//! parts are length-prefixed so that no key is a prefix of an unrelated one.

use alloc::vec::Vec;

use crate::grant::GrantId;
use crate::ledger::{CodeFingerprint, Lineage, RequestId};
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

/// The grant id that ends a key made by [`with_grant`].
pub(crate) fn grant_suffix(key: &[u8]) -> Option<GrantId> {
    let (_, id) = key.split_last_chunk::<16>()?;
    Some(GrantId::from_bytes(*id))
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

/// `AgentTokens`: `j | jti`, the record.
pub(crate) fn agent_token(jti: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + jti.len());
    k.push(b'j');
    k.extend_from_slice(jti.as_bytes());
    k
}

/// `AgentTokens`: `u | site | subject | jti`, the index of a user's tokens
/// (with an empty `jti`, the prefix of all of them).
pub(crate) fn agent_token_of_user(site: &SiteId, subject: &str, jti: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(5 + site.as_str().len() + subject.len() + jti.len());
    k.push(b'u');
    push_str(&mut k, site.as_str());
    push_str(&mut k, subject);
    k.extend_from_slice(jti.as_bytes());
    k
}

/// `parts` one after another in a key of exactly `N` bytes, on the stack.
/// The ledger's keys have fixed lengths: built this way they cost no
/// allocator calls where they are made and dropped, which is most of the
/// engine's ledger paths (a unit test holds every length).
fn fixed<const N: usize>(parts: &[&[u8]]) -> [u8; N] {
    let mut k = [0; N];
    fill(&mut k, parts);
    k
}

/// Copies `parts` one after another into `out`, which they fill exactly.
fn fill(out: &mut [u8], parts: &[&[u8]]) {
    let mut at = 0;
    for part in parts {
        out[at..at + part.len()].copy_from_slice(part);
        at += part.len();
    }
    debug_assert_eq!(at, out.len());
}

/// `GrantApps`: `g | grant`, the apps a grant reaches.
pub(crate) fn grant_apps(grant: &GrantId) -> [u8; 17] {
    fixed(&[b"g", grant.as_bytes()])
}

/// `GrantApps`: `c | code id`, the apps a consent chose, until its code is
/// exchanged (then they move to [`grant_apps`]) or swept with it.
pub(crate) fn code_apps(code: &[u8; 16]) -> [u8; 17] {
    fixed(&[b"c", code])
}

/// `Requests`: `q | lineage | request id`, the request record.
pub(crate) fn request(lineage: &Lineage, id: &RequestId) -> [u8; 49] {
    fixed(&[b"q", &lineage.0, id.as_bytes()])
}

/// `Requests`: `g | grant`, the prefix of a grant's undecided requests.
pub(crate) fn grant_requests(grant: &GrantId) -> [u8; 17] {
    fixed(&[ALL_GRANT_REQUESTS, grant.as_bytes()])
}

/// `Requests`: the prefix of every grant's undecided requests.
pub(crate) const ALL_GRANT_REQUESTS: &[u8] = b"g";

/// Splits a [`grant_request`] key.
pub(crate) fn split_grant_request(key: &[u8]) -> Option<(GrantId, RequestId)> {
    let rest = key.strip_prefix(ALL_GRANT_REQUESTS)?;
    let (grant, rest) = rest.split_first_chunk::<16>()?;
    let id: [u8; 16] = rest.try_into().ok()?;
    Some((GrantId::from_bytes(*grant), RequestId::from_bytes(id)))
}

/// `Requests`: `g | grant | request id` → lineage, one undecided request.
pub(crate) fn grant_request(grant: &GrantId, id: &RequestId) -> [u8; 33] {
    fixed(&[ALL_GRANT_REQUESTS, grant.as_bytes(), id.as_bytes()])
}

/// `Requests`: `e | deadline | lineage | request id`, the ledger's own
/// expiry index (the shared `Expiry` sweep only knows codes and grants).
pub(crate) fn ledger_expiry(at: Timestamp, lineage: &Lineage, id: &RequestId) -> [u8; 57] {
    fixed(&[b"e", &at.as_secs().to_be_bytes(), &lineage.0, id.as_bytes()])
}

/// The first ledger expiry key after every entry due at `now`.
pub(crate) fn ledger_expiry_after(now: Timestamp) -> Vec<u8> {
    let mut k = Vec::with_capacity(9);
    k.push(b'e');
    k.extend_from_slice(&now.as_secs().saturating_add(1).to_be_bytes());
    k
}

/// Splits a ledger expiry key.
pub(crate) fn split_ledger_expiry(key: &[u8]) -> Option<(Timestamp, Lineage, RequestId)> {
    let rest = key.strip_prefix(b"e")?;
    let (at, rest) = rest.split_first_chunk::<8>()?;
    let (lineage, rest) = rest.split_first_chunk::<32>()?;
    let id: [u8; 16] = rest.try_into().ok()?;
    Some((
        Timestamp::from_secs(u64::from_be_bytes(*at)),
        Lineage(*lineage),
        RequestId::from_bytes(id),
    ))
}

/// `WaitingCalls`: `lineage | caller | code fingerprint` → request id, the
/// request an identical call that names no request id joins while it is
/// unfinished. `caller` is where the call runs and who submitted it
/// ([`WAITING_TAB_CLIENT`], [`WAITING_TAB_IN_PAGE`], [`WAITING_SERVER`]):
/// calls that differ there never join each other.
pub(crate) fn waiting_call(
    lineage: &Lineage,
    caller: u8,
    fingerprint: &CodeFingerprint,
) -> [u8; 65] {
    fixed(&[&lineage.0, &[caller], fingerprint.as_bytes()])
}

/// The [`waiting_call`] caller of a tab call an external client submitted.
pub(crate) const WAITING_TAB_CLIENT: u8 = 0;
/// The [`waiting_call`] caller of a tab call an in-page caller submitted.
pub(crate) const WAITING_TAB_IN_PAGE: u8 = 1;
/// The [`waiting_call`] caller of a call on a server executor.
pub(crate) const WAITING_SERVER: u8 = 2;

/// `Requests`: `r | grant`, the grant's GCRA state.
pub(crate) fn rate(grant: &GrantId) -> [u8; 17] {
    fixed(&[b"r", grant.as_bytes()])
}

/// `Outcomes`: `lineage | request id`, the prefix of a request's outcomes.
pub(crate) fn outcomes(lineage: &Lineage, id: &RequestId) -> [u8; 48] {
    fixed(&[&lineage.0, id.as_bytes()])
}

/// `Outcomes`: `lineage | request id | seq`.
pub(crate) fn outcome(lineage: &Lineage, id: &RequestId, seq: u32) -> [u8; 52] {
    fixed(&[&lineage.0, id.as_bytes(), &seq.to_be_bytes()])
}

/// `Tabs`: `c | grant`, the grant's tab connection.
pub(crate) fn tab(grant: &GrantId) -> [u8; 17] {
    fixed(&[b"c", grant.as_bytes()])
}

/// `Tabs`: `x | site | executor`, a server executor's lease. Numbers are
/// big-endian, so a site's leases are in number order.
pub(crate) fn executor_lease(site: &SiteId, id: u32) -> Vec<u8> {
    let mut k = executor_leases(site);
    k.extend_from_slice(&id.to_be_bytes());
    k
}

/// `Tabs`: `x | site`, the prefix of a site's executor leases.
pub(crate) fn executor_leases(site: &SiteId) -> Vec<u8> {
    let mut k = Vec::with_capacity(7 + site.as_str().len());
    k.extend_from_slice(ALL_EXECUTOR_LEASES);
    push_str(&mut k, site.as_str());
    k
}

/// `Tabs`: the prefix of every site's executor leases.
pub(crate) const ALL_EXECUTOR_LEASES: &[u8] = b"x";

/// `Tabs`: `n | site` → the last executor number allocated on the site
/// (`u32`, big-endian): numbers are never reused.
pub(crate) fn executor_counter(site: &SiteId) -> Vec<u8> {
    let mut k = Vec::with_capacity(3 + site.as_str().len());
    k.push(b'n');
    push_str(&mut k, site.as_str());
    k
}

/// `Requests`: `d | executor | grant | request id` → lineage, a running
/// server request dispatched to that executor number. The site is not in
/// the key (the request's grant names it): numbers of different sites
/// share a prefix, and readers check the grant's site.
pub(crate) fn server_run(executor: u32, grant: &GrantId, id: &RequestId) -> [u8; 37] {
    fixed(&[
        ALL_SERVER_RUNS,
        &executor.to_be_bytes(),
        grant.as_bytes(),
        id.as_bytes(),
    ])
}

/// `Requests`: `d | executor`, the prefix of the running server requests
/// dispatched to that executor number (on any site).
pub(crate) fn server_runs(executor: u32) -> [u8; 5] {
    fixed(&[ALL_SERVER_RUNS, &executor.to_be_bytes()])
}

/// `Requests`: the prefix of every running server request.
pub(crate) const ALL_SERVER_RUNS: &[u8] = b"d";

/// Splits a [`server_run`] key.
pub(crate) fn split_server_run(key: &[u8]) -> Option<(u32, GrantId, RequestId)> {
    let rest = key.strip_prefix(ALL_SERVER_RUNS)?;
    let (executor, rest) = rest.split_first_chunk::<4>()?;
    let (grant, rest) = rest.split_first_chunk::<16>()?;
    let id: [u8; 16] = rest.try_into().ok()?;
    Some((
        u32::from_be_bytes(*executor),
        GrantId::from_bytes(*grant),
        RequestId::from_bytes(id),
    ))
}

/// `Approvals`: `a | grant`, the auto-approvals of the grant's server runs.
pub(crate) fn grant_auto_approval(grant: &GrantId) -> [u8; 17] {
    fixed(&[b"a", grant.as_bytes()])
}

/// `Tabs`: `s | site | browser session`, the prefix of a session's tabs.
pub(crate) fn session_tabs(site: &SiteId, session: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(5 + site.as_str().len() + session.len() + 16);
    k.push(b's');
    push_str(&mut k, site.as_str());
    push_str(&mut k, session);
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant() -> GrantId {
        GrantId::from_bytes([7; 16])
    }

    fn request_id() -> RequestId {
        RequestId::from_bytes([9; 16])
    }

    #[test]
    fn every_split_key_round_trips() {
        let site = SiteId::parse("demo").unwrap_or_else(|_| unreachable!());
        let lineage = Lineage([3; 32]);
        let at = Timestamp::from_secs(1_800_000_000);
        assert_eq!(
            split_grant_request(&grant_request(&grant(), &request_id())),
            Some((grant(), request_id()))
        );
        for prefix in [
            user_grants(&site, "user-1"),
            site_grants(&site),
            session_tabs(&site, "browser"),
        ] {
            assert_eq!(grant_suffix(&with_grant(prefix, &grant())), Some(grant()));
        }
        assert_eq!(
            split_ledger_expiry(&ledger_expiry(at, &lineage, &request_id())),
            Some((at, lineage, request_id()))
        );
        assert_eq!(
            split_server_run(&server_run(u32::MAX, &grant(), &request_id())),
            Some((u32::MAX, grant(), request_id()))
        );
        assert!(server_run(7, &grant(), &request_id()).starts_with(&server_runs(7)));
        assert!(executor_lease(&site, 7).starts_with(&executor_leases(&site)));
        // A site's leases never share a prefix with another site's.
        let other = SiteId::parse("demo2").unwrap_or_else(|_| unreachable!());
        assert!(!executor_lease(&other, 7).starts_with(&executor_leases(&site)));
        let key = expiry(at, Table::Grants, grant().as_bytes());
        assert_eq!(
            split_expiry(&key),
            Some((
                at,
                Table::Grants.index() as u8,
                grant().as_bytes().as_slice()
            ))
        );
    }

    /// The fixed-length keys fill their arrays exactly (`fill` checks it
    /// in debug builds) and keep the layouts their docs give.
    #[test]
    fn fixed_keys_are_their_parts_end_to_end() {
        let lineage = Lineage([3; 32]);
        let at = Timestamp::from_secs(0x0102_0304_0506_0708);
        let (g, r) = (grant(), request_id());
        let cat = |parts: &[&[u8]]| parts.concat();
        assert_eq!(
            request(&lineage, &r).to_vec(),
            cat(&[b"q", &lineage.0, r.as_bytes()])
        );
        assert_eq!(grant_requests(&g).to_vec(), cat(&[b"g", g.as_bytes()]));
        assert_eq!(
            grant_request(&g, &r).to_vec(),
            cat(&[b"g", g.as_bytes(), r.as_bytes()])
        );
        assert_eq!(
            ledger_expiry(at, &lineage, &r).to_vec(),
            cat(&[b"e", &at.as_secs().to_be_bytes(), &lineage.0, r.as_bytes()])
        );
        assert_eq!(rate(&g).to_vec(), cat(&[b"r", g.as_bytes()]));
        assert_eq!(
            outcome(&lineage, &r, 7).to_vec(),
            cat(&[&outcomes(&lineage, &r), &7u32.to_be_bytes()])
        );
        assert_eq!(tab(&g).to_vec(), cat(&[b"c", g.as_bytes()]));
        assert_eq!(
            server_run(9, &g, &r).to_vec(),
            cat(&[&server_runs(9), g.as_bytes(), r.as_bytes()])
        );
        assert_eq!(grant_auto_approval(&g).to_vec(), cat(&[b"a", g.as_bytes()]));
        let code = CodeFingerprint::of(b"code");
        assert_eq!(
            waiting_call(&lineage, WAITING_SERVER, &code).to_vec(),
            cat(&[&lineage.0, &[WAITING_SERVER], code.as_bytes()])
        );
    }

    #[test]
    fn malformed_keys_split_to_nothing() {
        let key = grant_request(&grant(), &request_id());
        assert_eq!(split_grant_request(&key[..key.len() - 1]), None);
        assert_eq!(split_grant_request(&[key.as_slice(), b"x"].concat()), None);
        assert_eq!(split_grant_request(&rate(&grant())), None);
        assert_eq!(grant_suffix(&[1; 15]), None);
        assert_eq!(split_ledger_expiry(b"e"), None);
        let run = server_run(1, &grant(), &request_id());
        assert_eq!(split_server_run(&run[..run.len() - 1]), None);
        assert_eq!(split_server_run(&key), None);
        assert_eq!(split_expiry(&[0; 8]), None);
    }
}
