//! What the host supplies: who is signed in, where a signed-out user signs
//! in, and (optionally) how the consent screen looks. Everything else —
//! the OAuth routes, the bearer check, the ledger — is this crate's.

use std::future::Future;
use std::pin::Pin;

use axum::http::request::Parts;
use axum::response::Response;
use portcullis_core::authorize::ConsentScreen;
use portcullis_core::form::Form;
use portcullis_core::granted_apps::AppSelection;

use crate::pages::{self, ConsentPage};
use crate::respond;
use crate::user::SignedIn;

/// The host's side of the authorization server.
///
/// ```
/// use axum::http::request::Parts;
/// use axum::response::Response;
/// use portcullis_axum::{Host, SignedIn, see_other};
///
/// struct MyApp;
///
/// impl Host for MyApp {
///     async fn signed_in(&self, parts: &Parts) -> Option<SignedIn> {
///         // The app's own session: a cookie it issued at its sign-in.
///         let user = parts.headers.get("x-demo-user")?.to_str().ok()?;
///         Some(SignedIn::new(user))
///     }
///
///     fn sign_in(&self, return_to: &str) -> Response {
///         see_other(&format!("/login?next={}", portcullis_axum::url_encode(return_to)))
///     }
/// }
/// ```
pub trait Host: Send + Sync + 'static {
    /// The user this request is signed in as, from the host's own session
    /// (a cookie it issued, a header its proxy sets); `None` when nobody
    /// is signed in. Called on the authorization and approval pages only,
    /// never on the MCP endpoint (agents carry bearer tokens).
    fn signed_in(&self, parts: &Parts) -> impl Future<Output = Option<SignedIn>> + Send;

    /// The answer to a signed-out user on a page that needs one: usually a
    /// redirect to the host's sign-in page, which sends the user back to
    /// `return_to` afterwards. `return_to` is a path and query of this site
    /// (the whole authorization request, so nothing of it is lost); check
    /// it is one before redirecting to it
    /// ([`portcullis_core::redirect::SafePath`] does).
    fn sign_in(&self, return_to: &str) -> Response;

    /// The consent screen. The default is this crate's page
    /// ([`pages::consent`]); a host with its own look renders `page`
    /// itself, keeping the form's fields.
    fn consent(&self, page: &ConsentPage<'_>) -> Response {
        respond::html(axum::http::StatusCode::OK, pages::consent(page))
    }

    /// The host's own fields on the consent form, as HTML the host builds
    /// (and escapes): for instance which of its apps the new grant may
    /// reach. They come back in the posted form ([`Host::consent_apps`]).
    /// The default is none.
    fn consent_fields(&self, screen: &ConsentScreen, user: &SignedIn) -> String {
        let _ = (screen, user);
        String::new()
    }

    /// The apps the accepted consent grants ([`AppSelection`]), read from
    /// the posted form (the host's [`Host::consent_fields`] among its
    /// fields). Called on Allow only, after the CSRF check and before
    /// anything is stored; the choice is stored in the same transaction as
    /// the authorization code, and the code's grant reaches exactly it.
    /// `Err(response)` refuses the form with that answer and changes
    /// nothing. The default is every app.
    #[expect(
        clippy::result_large_err,
        reason = "the refusal is the response itself, sent at once"
    )]
    fn consent_apps(&self, user: &SignedIn, form: &Form<'_>) -> Result<AppSelection, Response> {
        let _ = (user, form);
        Ok(AppSelection::All)
    }
}

/// A boxed future borrowing `'a`.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// [`Host`] as an object, so the crate's types are generic over the store
/// only.
pub(crate) trait DynHost: Send + Sync + 'static {
    fn signed_in<'a>(&'a self, parts: &'a Parts) -> BoxFuture<'a, Option<SignedIn>>;
    fn sign_in(&self, return_to: &str) -> Response;
    fn consent(&self, page: &ConsentPage<'_>) -> Response;
    fn consent_fields(&self, screen: &ConsentScreen, user: &SignedIn) -> String;
    #[expect(
        clippy::result_large_err,
        reason = "the refusal is the response itself, sent at once"
    )]
    fn consent_apps(&self, user: &SignedIn, form: &Form<'_>) -> Result<AppSelection, Response>;
}

impl<H: Host> DynHost for H {
    fn signed_in<'a>(&'a self, parts: &'a Parts) -> BoxFuture<'a, Option<SignedIn>> {
        Box::pin(Host::signed_in(self, parts))
    }

    fn sign_in(&self, return_to: &str) -> Response {
        Host::sign_in(self, return_to)
    }

    fn consent(&self, page: &ConsentPage<'_>) -> Response {
        Host::consent(self, page)
    }

    fn consent_fields(&self, screen: &ConsentScreen, user: &SignedIn) -> String {
        Host::consent_fields(self, screen, user)
    }

    fn consent_apps(&self, user: &SignedIn, form: &Form<'_>) -> Result<AppSelection, Response> {
        Host::consent_apps(self, user, form)
    }
}
