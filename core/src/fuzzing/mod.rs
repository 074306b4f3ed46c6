//! Entry points for the fuzz targets in `fuzz/` (hidden; not a public API).
//!
//! Each target is one line calling a function here, so the checks a fuzzer
//! runs are ordinary Rust that is built and linted with the crate.

pub mod client;
pub mod foundation;
pub mod ledger;
pub mod links;
pub mod oauth;
