//! [`SignedIn`]: the user a request is signed in as, in the host's own
//! terms. What the host's [`Host::signed_in`](crate::Host::signed_in)
//! answers, and what every form this crate renders is bound to.

/// The user a request is signed in as, in the host's own terms.
#[derive(Clone, PartialEq, Eq)]
pub struct SignedIn {
    /// The user's stable id: it becomes the grant's subject (the `sub` of
    /// every token the user's agents get). 1–255 printable characters.
    pub subject: String,
    /// The host's session id, if it has one. The forms this crate renders
    /// for the user (consent, approvals) carry a CSRF token bound to the
    /// subject and, when given, to this session, so a token read from one
    /// session cannot be replayed from another.
    pub session: Option<String>,
}

impl SignedIn {
    /// `subject`, with no session binding.
    pub fn new(subject: impl Into<String>) -> Self {
        Self {
            subject: subject.into(),
            session: None,
        }
    }

    /// Binds the forms' CSRF tokens to the host's `session` id too.
    #[must_use]
    pub fn in_session(mut self, session: impl Into<String>) -> Self {
        self.session = Some(session.into());
        self
    }
}

/// The session id is a credential: never printed.
impl std::fmt::Debug for SignedIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignedIn")
            .field("subject", &self.subject)
            .field("session", &self.session.as_ref().map(|_| "…"))
            .finish()
    }
}
