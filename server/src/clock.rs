//! The one place the server reads the wall clock: `portcullis-axum`'s
//! ([`portcullis_axum::now`]). The core never does: every operation gets
//! `now` from here as an argument.

pub(crate) use portcullis_axum::now;
