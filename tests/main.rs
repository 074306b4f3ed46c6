//! Integration tests of the `portcullis` facade: one binary, topic modules.
//!
//! One binary keeps link time low and makes proptest write its regressions to
//! the top-level `proptest-regressions/` directory.

mod support;

mod alloc_counter;
mod clients;
mod jwt;
mod links;
mod oauth;
mod oauth_model;
mod pkce;
mod store_contract;
