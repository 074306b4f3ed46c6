//! Integration tests of the `portcullis` facade: one binary, topic modules.
//!
//! One binary keeps link time low and makes proptest write its regressions to
//! the top-level `proptest-regressions/` directory.
#![allow(clippy::unwrap_used, reason = "a test fails loudly where it unwraps")]
#![allow(
    clippy::many_single_char_names,
    reason = "scenarios name their tokens a, b, c"
)]
#![allow(clippy::too_many_lines, reason = "a scenario reads best as one story")]

mod support;

mod activity;
mod agent_loop;
mod alloc_counter;
mod app_views;
mod client_keys;
mod clients;
mod failing_store;
mod forgery;
mod granted_apps;
mod introspection;
mod jwt;
mod ledger;
mod ledger_join;
mod ledger_model;
mod ledger_server;
mod links;
mod oauth;
mod oauth_model;
mod pkce;
mod private_key_jwt;
mod seam;
mod shared_refresh;
mod store_contract;
mod token_keys;
