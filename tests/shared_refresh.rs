//! One refresh token shared by a client's processes, under the default
//! policy (the reuse grace, [`portcullis::Policy::refresh_reuse_grace`]),
//! on every store: the patterns Claude Code and Codex show in public issue
//! threads end with a working token in every process and nothing revoked,
//! while a spent token presented where no honest client would present it
//! still revokes the grant (RFC 9700 §4.14.2). docs/clients.md has the
//! rule, its cost and the evidence.

use portcullis::store::Store;
use portcullis::token::{TokenError, TokenResponse};

use crate::oauth::World;
use crate::on_every_store;

/// One process of a client: the tokens it holds in memory.
struct Process {
    tokens: TokenResponse,
}

impl Process {
    fn refresh_token(&self) -> String {
        self.tokens.refresh_token.expose_secret().to_string()
    }

    /// Refreshes with the token it holds, as every client does when its
    /// access token expires, and keeps what it gets.
    fn refresh<S: Store>(&mut self, w: &mut World<S>) {
        let token = self.refresh_token();
        self.tokens = w
            .refresh(&token)
            .unwrap_or_else(|e| panic!("refresh refused: {e:?}"));
    }

    fn call_works<S: Store>(&self, w: &World<S>) -> bool {
        w.bearer(&self.tokens, "skills:read").is_ok()
    }
}

fn processes(tokens: &TokenResponse, n: usize) -> Vec<Process> {
    (0..n)
        .map(|_| Process {
            tokens: tokens.clone(),
        })
        .collect()
}

/// Claude Code: every session refreshes from its in-memory copy of the one
/// stored token (anthropics/claude-code#74250), three sessions within 8 s
/// (#85236), and an idle one presents its stale copy minutes later (#85236,
/// #91641); on `invalid_grant` it wipes the shared store. Here: three
/// within 8 s, the active one refreshes again when its access token
/// expires, and a fourth presents the first token at 9 min 59 s.
fn claude_code_sessions_sharing_one_refresh_token<S: Store>(store: &S) {
    let mut w = World::new(store);
    let login = w.login();
    let mut sessions = processes(&login, 4);
    w.advance(300);
    for (i, wait) in [(0, 0), (1, 3), (2, 5)] {
        w.advance(wait);
        sessions[i].refresh(&mut w);
    }
    let first = sessions[0].refresh_token();
    assert!(sessions[1..3].iter().all(|s| s.refresh_token() == first));
    // The active session's next refresh, 5 minutes on; the other two follow
    // within seconds with the token it just spent.
    w.advance(300 - 8);
    sessions[0].refresh(&mut w);
    w.advance(2);
    sessions[1].refresh(&mut w);
    sessions[2].refresh(&mut w);
    // The idle session wakes with the login's token, spent 9 min 59 s ago
    // and two rotations back.
    w.advance(599 - 300 - 2);
    sessions[3].refresh(&mut w);
    let current = sessions[0].refresh_token();
    for (i, s) in sessions.iter().enumerate() {
        assert_eq!(
            s.refresh_token(),
            current,
            "session {i} holds the current token"
        );
        assert!(s.call_works(&w), "session {i} makes a working call");
    }
}

/// Codex: five processes present one refresh token within one second, and
/// an idle instance presents it again 7 min 45 s after the rotation
/// (openai/codex#46028; #45944 shows the same race on macOS).
fn codex_processes_racing_one_refresh_token<S: Store>(store: &S) {
    let mut w = World::new(store);
    let login = w.login();
    let mut procs = processes(&login, 6);
    w.advance(300);
    for p in &mut procs[..5] {
        p.refresh(&mut w);
    }
    w.advance(1);
    let rotated = procs[0].refresh_token();
    assert!(procs[..5].iter().all(|p| p.refresh_token() == rotated));
    // An active one refreshes again at 5 minutes.
    w.advance(299);
    procs[0].refresh(&mut w);
    // The straggler, 7 min 45 s after the first rotation.
    w.advance(465 - 300);
    procs[5].refresh(&mut w);
    for (i, p) in procs.iter_mut().enumerate() {
        if i != 0 && i != 5 {
            p.refresh(&mut w);
        }
    }
    for (i, p) in procs.iter().enumerate() {
        assert!(p.call_works(&w), "process {i} makes a working call");
    }
}

/// The other side: a spent token presented where no honest client would
/// present it still revokes the grant, and every process loses it (the
/// revocation takes effect at once). Measured over the whole range: the
/// same spent token, presented at each offset after its spending, is the
/// client's own process below the grace and a replay from it on.
fn replays_past_the_grace_still_revoke<S: Store>(store: &S) {
    let grace = portcullis::Policy::default().refresh_reuse_grace.as_secs();
    assert_eq!(grace, 600);
    let mut w = World::new(store);
    for offset in [0, 1, 299, 465, 599, 600, 601, 3_600, 20 * 86_400] {
        let login = w.login();
        let mut active = processes(&login, 1).pop().unwrap();
        active.refresh(&mut w);
        w.advance(offset);
        let stale = w.refresh(login.refresh_token.expose_secret());
        if offset < grace {
            let t = stale.unwrap_or_else(|e| panic!("{offset} s: {e:?}"));
            assert_eq!(
                t.refresh_token.expose_secret(),
                active.refresh_token(),
                "{offset} s: the current token"
            );
        } else {
            assert_eq!(stale.unwrap_err(), TokenError::InvalidGrant, "{offset} s");
            assert!(
                w.refresh(&active.refresh_token()).is_err(),
                "{offset} s: the replay revoked the grant"
            );
        }
    }
    // Further back than the tracked rotations, however recent: a replay.
    let login = w.login();
    let mut active = processes(&login, 1).pop().unwrap();
    for _ in 0..=portcullis::grant::TRACKED_ROTATIONS {
        w.advance(30);
        active.refresh(&mut w);
    }
    assert_eq!(
        w.refresh(login.refresh_token.expose_secret()).unwrap_err(),
        TokenError::InvalidGrant
    );
    assert!(!active.call_works(&w));
}

on_every_store!(
    claude_code_sessions_sharing_one_refresh_token,
    codex_processes_racing_one_refresh_token,
    replays_past_the_grace_still_revoke,
);
