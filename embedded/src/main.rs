//! The probe firmware: runs every `no_std` feature of `portcullis-core`
//! through its public API on a Cortex-M4F, and exits through semihosting
//! with status 0 only if every check held.
//!
//! It always signs and verifies HS256 tokens through the `Keyring` (alone,
//! that is the "JWT only" size figure). Feature `links` adds PKCE, the
//! open-redirect guard, deep links and the open route, and external links;
//! feature `engine` adds one engine operation of each kind over the
//! `no_std` memory store: site creation, client registration, authorization
//! (authorize and decide), code exchange, refresh, bearer check, an
//! `execute` run (begin, one action, complete, replay) and a replayed code.
//! The default, `full`, is both. Feature `eddsa` (not in `full`) verifies
//! an EdDSA access token signed on the host with the public key alone.
//!
//! Nothing here prints through `core::fmt`, so the flash figures are the
//! core's, not the probe's.
#![no_std]
#![no_main]

extern crate alloc;

#[cfg(feature = "engine")]
use core::convert::Infallible;

use cortex_m_rt::{ExceptionFrame, entry, exception};
use cortex_m_semihosting::{debug, hio};
use embedded_alloc::LlffHeap as Heap;
use portcullis_core::Timestamp;
#[cfg(feature = "eddsa")]
use portcullis_core::jwt::TokenKey;
use portcullis_core::jwt::{Claims, Keyring, SigningKey, TokenType, Validation};
#[cfg(feature = "engine")]
use rand_core::{TryCryptoRng, TryRng};
#[cfg(feature = "engine")]
use sha2::{Digest, Sha256};

#[global_allocator]
static HEAP: Heap = Heap::empty();

/// The heap the issue's budget assumes: 64 KiB.
const HEAP_SIZE: usize = 64 * 1024;

/// An EdDSA access token signed on the host, and the public key that
/// verifies it (a host test holds them to the `Keyring`'s signer).
#[cfg(feature = "eddsa")]
mod eddsa_token;

/// The RFC 7636 Appendix B verifier.
#[cfg(any(feature = "links", feature = "engine"))]
const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";

/// One instant the probe starts at; the clock only moves forward from it.
const START: u64 = 1_800_000_000;

#[entry]
fn main() -> ! {
    // SAFETY: runs once, first thing, before anything allocates.
    #[allow(unsafe_code, reason = "handing the heap its static region")]
    unsafe {
        embedded_alloc::init!(HEAP, HEAP_SIZE);
    }
    #[cfg_attr(not(feature = "engine"), allow(unused_mut))]
    let mut clock = Clock(START);
    jwt_round_trip(&clock);
    #[cfg(feature = "eddsa")]
    eddsa_verify(&clock);
    #[cfg(feature = "links")]
    links::run();
    #[cfg(feature = "engine")]
    engine::run(
        &mut TestOnlyRng::new(*b"portcullis probe, test only seed"),
        &mut clock,
    );
    say("probe: ok, heap in use at exit ");
    say_u32(u32::try_from(HEAP.used()).unwrap_or(u32::MAX));
    say(" bytes\n");
    exit(true)
}

/// A clock the probe owns: real firmware reads its RTC, the core only sees
/// the `Timestamp` it is given.
struct Clock(u64);

impl Clock {
    fn now(&self) -> Timestamp {
        Timestamp::from_secs(self.0)
    }

    #[cfg(feature = "engine")]
    fn advance(&mut self, secs: u64) {
        self.0 += secs;
    }
}

/// **Test firmware only — never ship this.** A deterministic generator
/// (SHA-256 over a fixed seed and a counter) so every run of the probe is
/// the same. Real firmware passes a `CryptoRng` fed by its TRNG.
#[cfg(feature = "engine")]
struct TestOnlyRng {
    seed: [u8; 32],
    counter: u64,
}

#[cfg(feature = "engine")]
impl TestOnlyRng {
    fn new(seed: [u8; 32]) -> Self {
        Self { seed, counter: 0 }
    }
}

#[cfg(feature = "engine")]
impl TryRng for TestOnlyRng {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        let mut b = [0; 4];
        self.try_fill_bytes(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        let mut b = [0; 8];
        self.try_fill_bytes(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        for chunk in dst.chunks_mut(32) {
            let block = Sha256::new()
                .chain_update(self.seed)
                .chain_update(self.counter.to_le_bytes())
                .finalize();
            self.counter += 1;
            chunk.copy_from_slice(&block[..chunk.len()]);
        }
        Ok(())
    }
}

// Marked cryptographic only because the core's API asks for it; see above.
#[cfg(feature = "engine")]
impl TryCryptoRng for TestOnlyRng {}

fn keyring() -> Keyring {
    let mut k = Keyring::new();
    check(
        k.insert(
            "k1",
            SigningKey::from_bytes(&[0x5a; 32])
                .ok()
                .unwrap_or_else(|| fail("key")),
        )
        .is_ok(),
        "keyring insert",
    );
    check(k.set_active("k1").is_ok(), "keyring set_active");
    k
}

/// HS256 sign and verify through the `Keyring`, and a tampered token refused.
fn jwt_round_trip(clock: &Clock) {
    let keyring = keyring();
    let now = clock.now();
    let claims = Claims {
        iss: Some("https://auth.example.com".into()),
        sub: Some("device-7".into()),
        aud: Some("https://app.example.com/mcp".into()),
        iat: Some(now.as_secs().cast_signed()),
        exp: Some(now.as_secs().cast_signed() + 300),
        ..Claims::default()
    };
    let Ok(token) = keyring.sign(TokenType::AccessToken, &claims) else {
        fail("jwt sign")
    };
    let expect = Validation::new(TokenType::AccessToken, "https://app.example.com/mcp")
        .issuer("https://auth.example.com");
    let verified = keyring.verify(token.expose_secret(), &expect, now);
    check(
        verified.is_ok_and(|v| v.claims.sub.as_deref() == Some("device-7")),
        "jwt verify",
    );
    let mut forged = alloc::string::String::from(token.expose_secret());
    let last = forged.pop().unwrap_or('A');
    forged.push(if last == 'A' { 'B' } else { 'A' });
    check(
        keyring.verify(&forged, &expect, now).is_err(),
        "jwt tampered signature refused",
    );
    say("probe: jwt ok\n");
}

/// An EdDSA access token from a site this device shares no secret with,
/// verified with the site's public key alone; a token whose signature was
/// altered, and the same token once expired, refused.
#[cfg(feature = "eddsa")]
fn eddsa_verify(clock: &Clock) {
    use eddsa_token::{AUDIENCE, EXPIRES_AT, ISSUER, KID, PUBLIC_KEY, SUBJECT, TOKEN};
    let mut keys = Keyring::new();
    let key = TokenKey::ed25519_public(&PUBLIC_KEY).unwrap_or_else(|_| fail("eddsa public key"));
    check(keys.insert_token_key(KID, key).is_ok(), "eddsa key insert");
    let expect = Validation::new(TokenType::AccessToken, AUDIENCE).issuer(ISSUER);
    let now = clock.now();
    check(
        keys.verify_with(TOKEN, &expect, now, |v| {
            v.claims.sub.as_deref() == Some(SUBJECT)
        })
        .is_ok_and(|ok| ok),
        "eddsa verify",
    );
    // The signature's first character: a valid encoding of another signature.
    let at = TOKEN.rfind('.').unwrap_or_else(|| fail("eddsa token")) + 1;
    let mut forged = alloc::string::String::from(TOKEN);
    let flipped = if TOKEN.as_bytes()[at] == b'A' {
        "B"
    } else {
        "A"
    };
    forged.replace_range(at..=at, flipped);
    check(
        keys.verify_with(&forged, &expect, now, |_| ()).is_err(),
        "eddsa altered signature refused",
    );
    check(
        keys.verify_with(
            TOKEN,
            &expect,
            Timestamp::from_secs(EXPIRES_AT + 3_600),
            |_| (),
        )
        .is_err(),
        "eddsa expired token refused",
    );
    say("probe: eddsa ok\n");
}

#[cfg(feature = "links")]
mod links {
    //! PKCE, the open-redirect guard, deep links and the open route,
    //! external links.

    use portcullis_core::link::{
        DeepLink, ExternalLink, ExternalLinkPolicy, LinkConfig, OpenAnswer, OpenRoute,
    };
    use portcullis_core::pkce::{CodeChallenge, CodeVerifier};
    use portcullis_core::redirect::SafePath;

    use super::{VERIFIER, check, fail, say};

    pub(super) fn run() {
        pkce();
        links();
    }

    fn pkce() {
        let verifier = CodeVerifier::parse(VERIFIER).unwrap_or_else(|_| fail("pkce parse"));
        let challenge = CodeChallenge::from_verifier(verifier);
        // RFC 7636 Appendix B.
        check(
            challenge.to_base64url() == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
            "pkce s256",
        );
        check(
            CodeVerifier::parse("short").is_err(),
            "pkce short verifier refused",
        );
        say("probe: pkce ok\n");
    }

    fn links() {
        check(
            SafePath::new("/inbox?x=1").is_ok_and(|p| p.path_without_query() == "/inbox"),
            "safe path accepted",
        );
        for evil in [
            "//evil.com",
            "/\\evil.com",
            "/%2F%2Fevil.com",
            "https://evil.com",
        ] {
            check(SafePath::new(evil).is_err(), "open redirect refused");
        }

        let config = LinkConfig::default();
        let mut link = DeepLink::new("mail");
        link.view = Some("inbox".into());
        link.params.insert("label".into(), "work & play".into());
        let path = link
            .to_path(&config)
            .unwrap_or_else(|_| fail("deep link build"));
        check(
            DeepLink::parse(&path, &config).is_ok_and(|back| back == link),
            "deep link round trip",
        );
        let web = link
            .to_web_url(&config, "https://mail.example.com")
            .unwrap_or_else(|_| fail("deep link web url"));
        check(
            DeepLink::parse(&web, &config).is_ok_and(|back| back == link),
            "deep link web round trip",
        );
        let query = path.split_once('?').map_or("", |(_, q)| q);
        let answer = OpenRoute::new().handle(query, true, |_| None);
        check(
            matches!(answer, Ok(OpenAnswer::Redirect(ref r)) if r.location == "/inbox"),
            "open route redirect",
        );

        let policy =
            ExternalLinkPolicy::new("https://chat.example.com", "https://apps.example.net")
                .unwrap_or_else(|_| fail("external link policy"));
        check(
            ExternalLink::parse("HTTPS://Docs.Example.org:443/a/../b?q#f", &policy)
                .is_ok_and(|l| l.as_str() == "https://docs.example.org/b?q#f"),
            "external link normalised",
        );
        check(
            ExternalLink::parse("https://chat.example.com./x", &policy).is_err(),
            "external link to the host refused",
        );
        check(
            ExternalLink::parse("https://user@docs.example.org/", &policy).is_err(),
            "external link with credentials refused",
        );
        // This image links the ASCII-only url stand-in (url-ascii/): a
        // host that needs IDNA processing is refused, in Unicode or in its
        // xn-- form (which the host build accepts), never passed through
        // unchecked. ASCII hosts are lowercased, as checked above.
        check(
            ExternalLink::parse("https://\u{ff45}xample.org/", &policy).is_err(),
            "non-ASCII host refused without Unicode tables",
        );
        check(
            ExternalLink::parse("https://xn--nxasmq6b.example.org/", &policy).is_err(),
            "punycode host refused",
        );
        // So is an IPv4 address in any form but dotted decimal (the host
        // build reads this one as http://127.0.0.1/).
        check(
            ExternalLink::parse("http://0x7f.1/", &policy).is_err(),
            "non-canonical IPv4 host refused",
        );
        say("probe: links ok\n");
    }
}

#[cfg(feature = "engine")]
mod engine {
    //! One engine operation of each kind over the `no_std` memory store.

    use alloc::string::String;

    use portcullis_core::authorize::AuthorizeAnswer;
    use portcullis_core::form::{Form, encode_pairs};
    use portcullis_core::header::HeaderField;
    use portcullis_core::ledger::{
        Action, ActionVerdict, BeginAnswer, Caller, Completion, Effect, End, ExecuteParams, Report,
    };
    use portcullis_core::pkce::{CodeChallenge, CodeVerifier};
    use portcullis_core::scope::ScopeSet;
    use portcullis_core::site::{SiteConfig, SiteId};
    use portcullis_core::tab::TabHello;
    use portcullis_core::{Engine, Own, Policy, TimestampMs};
    use portcullis_store_memory::SpinMemoryStore;

    use super::{Clock, TestOnlyRng, VERIFIER, check, fail, keyring, say};

    const REDIRECT: &str = "http://127.0.0.1:4711/callback";
    const USER: &str = "user-1";

    #[allow(
        clippy::too_many_lines,
        reason = "one session from site creation to a replayed code, read top to bottom"
    )]
    pub(super) fn run(rng: &mut TestOnlyRng, clock: &mut Clock) {
        let store = SpinMemoryStore::new();
        let engine = Engine::new(&store, keyring(), Policy::default());
        let site = SiteId::parse("demo").unwrap_or_else(|_| fail("site id"));
        let config = SiteConfig::new(
            site.clone(),
            "Demo",
            "https://app.example.com",
            "https://app.example.com/mcp/",
        );
        check(
            engine.create_site(Own, config, rng, clock.now()).is_ok(),
            "create site",
        );
        let resource = engine
            .site(&site)
            .unwrap_or_else(|_| fail("load site"))
            .resource();
        let client_id = engine
            .register_client(
                br#"{"redirect_uris":["http://127.0.0.1/callback"],"token_endpoint_auth_method":"none","client_name":"Probe Agent","grant_types":["authorization_code","refresh_token"]}"#,
                rng,
                clock.now(),
            )
            .unwrap_or_else(|_| fail("register client"))
            .client_id;

        // Authorization: validate, then the user allows.
        let challenge = CodeChallenge::from_verifier(
            CodeVerifier::parse(VERIFIER).unwrap_or_else(|_| fail("verifier")),
        )
        .to_base64url();
        let query = encode_pairs([
            ("response_type", "code"),
            ("client_id", client_id.as_str()),
            ("redirect_uri", REDIRECT),
            ("state", "xyz"),
            ("code_challenge", challenge.as_str()),
            ("code_challenge_method", "S256"),
            ("resource", resource.as_str()),
            ("scope", "skills:read skills:write"),
        ]);
        check(
            matches!(
                engine.authorize(&site, &query, None),
                Ok(AuthorizeAnswer::Consent(_))
            ),
            "authorize shows consent",
        );
        let Ok(AuthorizeAnswer::Redirect(back)) =
            engine.decide(Own, &site, &query, None, USER, true, rng, clock.now())
        else {
            fail("decide allows")
        };
        let code = param(&back, "code").unwrap_or_else(|| fail("code in redirect"));

        // Code exchange, then a refresh.
        let exchange = encode_pairs([
            ("grant_type", "authorization_code"),
            ("code", code.as_str()),
            ("redirect_uri", REDIRECT),
            ("client_id", client_id.as_str()),
            ("code_verifier", VERIFIER),
        ]);
        let tokens = engine
            .token(Own, &site, &exchange, HeaderField::ABSENT, rng, clock.now())
            .unwrap_or_else(|_| fail("code exchange"));
        clock.advance(10);
        let body = encode_pairs([
            ("grant_type", "refresh_token"),
            ("refresh_token", tokens.refresh_token.expose_secret()),
            ("client_id", client_id.as_str()),
        ]);
        let tokens = engine
            .token(Own, &site, &body, HeaderField::ABSENT, rng, clock.now())
            .unwrap_or_else(|_| fail("refresh"));

        // Bearer check.
        let header = {
            let mut h = String::from("Bearer ");
            h.push_str(tokens.access_token.expose_secret());
            h
        };
        let read = ScopeSet::parse("skills:read").unwrap_or_else(|_| fail("scope"));
        let principal = engine
            .verify_bearer(&site, HeaderField::one(&header), &read, clock.now())
            .unwrap_or_else(|_| fail("bearer check"));
        check(
            engine
                .verify_bearer(&site, HeaderField::one("Bearer x.y.z"), &read, clock.now())
                .is_err(),
            "bad bearer refused",
        );

        // `execute`: a tab serves the grant; begin, one read, complete.
        let hello = TabHello {
            browser_session: "browser-1".into(),
            tab_id: "tab-1".into(),
            page_instance: "page-1".into(),
            visible: true,
        };
        check(
            engine
                .connect_tab(Own, &site, USER, &principal.grant, &hello, clock.now())
                .is_ok(),
            "connect tab",
        );
        let params = ExecuteParams::new(
            "00000000-0000-4000-8000-000000000001",
            "read()".into(),
            None,
        )
        .unwrap_or_else(|_| fail("execute params"));
        let now_ms = TimestampMs::from(clock.now());
        let Ok(BeginAnswer::Run(ticket)) =
            engine.begin(Own, &principal, &params, Caller::Client, now_ms)
        else {
            fail("execute begin")
        };
        let action = Action::new("items.list", Effect::Read, "skills:read", b"{}")
            .unwrap_or_else(|_| fail("action"));
        let Ok(ActionVerdict::Run(running)) =
            engine.authorize_action(Own, ticket, &action, clock.now())
        else {
            fail("authorize action")
        };
        let ticket = engine
            .record_outcome(Own, running, Report::ok("listed"), clock.now())
            .unwrap_or_else(|_| fail("record outcome"));
        let value = Completion::Value(serde_json::Value::Bool(true));
        let result = engine
            .complete(Own, ticket, &value, clock.now())
            .unwrap_or_else(|_| fail("execute complete"));
        check(
            result.end == End::Returned("true".into()) && result.outcomes.total == 1,
            "stored result",
        );
        let again = engine.begin(Own, &principal, &params, Caller::Client, now_ms);
        check(
            matches!(again, Ok(BeginAnswer::Stored(ref r)) if *r == result),
            "same request id answers the stored result",
        );

        // A replayed code is refused and revokes the grant made from it.
        check(
            engine
                .token(Own, &site, &exchange, HeaderField::ABSENT, rng, clock.now())
                .is_err(),
            "code replay refused",
        );
        check(
            engine
                .verify_bearer(&site, HeaderField::one(&header), &read, clock.now())
                .is_err(),
            "code replay revoked the grant",
        );
        say("probe: engine ok\n");
    }

    fn param(url: &str, name: &str) -> Option<String> {
        let (_, query) = url.split_once('?')?;
        Form::parse(query, 4096).ok()?.get(name).map(String::from)
    }
}

/// The interrupt half of the vector table, sized to the board as a device
/// crate sizes it: the MPS2 AN386's Cortex-M4 has 32 external interrupts
/// (QEMU's `mps2-an386`). Without a device crate cortex-m-rt reserves the
/// architecture's 240 vectors, 832 bytes more of flash that no firmware
/// built for a real part carries. The probe enables none of them, so each
/// is cortex-m-rt's default handler.
#[allow(
    unsafe_code,
    reason = "the vector table is an unmangled static in a linker section"
)]
mod interrupts {
    unsafe extern "C" {
        /// cortex-m-rt's default handler (its `link.x` defines the symbol).
        fn DefaultHandler();
    }

    /// One vector of the table.
    #[repr(transparent)]
    pub(crate) struct Vector(unsafe extern "C" fn());

    /// IRQ 0 to 31, placed by cortex-m-rt's `link.x` after the exceptions.
    #[unsafe(link_section = ".vector_table.interrupts")]
    #[unsafe(no_mangle)]
    pub(crate) static __INTERRUPTS: [Vector; 32] = [const { Vector(DefaultHandler) }; 32];
}

fn say(text: &str) {
    if let Ok(mut out) = hio::hstdout() {
        let _ = out.write_all(text.as_bytes());
    }
}

fn say_u32(mut n: u32) {
    let mut buf = [0u8; 10];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    say(core::str::from_utf8(&buf[i..]).unwrap_or("?"));
}

fn exit(ok: bool) -> ! {
    debug::exit(if ok {
        debug::EXIT_SUCCESS
    } else {
        debug::EXIT_FAILURE
    });
    // Only reached without a semihosting host.
    loop {
        cortex_m::asm::wfi();
    }
}

fn check(ok: bool, what: &str) {
    if !ok {
        fail(what);
    }
}

fn fail(what: &str) -> ! {
    say("probe: FAILED: ");
    say(what);
    say("\n");
    exit(false)
}

/// A fault (with `panic = immediate-abort`, a panic too) fails the run.
#[exception]
#[allow(
    unsafe_code,
    reason = "cortex-m-rt declares the HardFault handler unsafe"
)]
unsafe fn HardFault(_frame: &ExceptionFrame) -> ! {
    say("probe: hard fault\n");
    exit(false)
}

/// A panic fails the run: its message (when it is plain text) and place go
/// to the host, then the exit status says failure.
#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    say("probe: panic");
    if let Some(message) = info.message().as_str() {
        say(": ");
        say(message);
    }
    if let Some(at) = info.location() {
        say(" at ");
        say(at.file());
        say(":");
        say_u32(at.line());
    }
    say("\n");
    exit(false)
}
