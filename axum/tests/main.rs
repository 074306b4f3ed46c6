//! Integration tests of `portcullis-axum`: one binary, topic modules. Every
//! test serves the real routes on a loopback port and speaks HTTP to them.
#![allow(clippy::unwrap_used, reason = "a test fails loudly where it unwraps")]
#![allow(clippy::too_many_lines, reason = "a scenario reads best as one story")]
#![allow(missing_docs, reason = "test code")]
#![allow(unreachable_pub, reason = "test code")]

mod support;

mod agents;
mod builder;
mod clients;
mod crash;
mod documents;
mod introspection;
mod oauth;
mod protect;
mod remote;
mod run_in_tab;
mod run_once;
