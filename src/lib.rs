//! Portcullis: the policy core a server links to let a signed-in user connect
//! external AI agents (MCP clients) to an application safely.
//!
//! This facade re-exports [`portcullis_core`] and, behind the `memory` and
//! `redb` features (both on by default), the two stores under [`store`], with group commit
//! ([`store::GroupCommitter`]) for any of them. See
//! the [`portcullis_core`] crate documentation for the contract (no I/O, no
//! clock, no randomness) and the module map.
#![forbid(unsafe_code)]

pub use portcullis_core::*;

/// The store contract and the stores this build carries.
pub mod store {
    pub use portcullis_core::store::*;
    pub use portcullis_store_group::{BatchWrite, GroupCommitter};
    #[cfg(feature = "memory")]
    pub use portcullis_store_memory::MemoryStore;
    #[cfg(feature = "postgres")]
    pub use portcullis_store_postgres::{PostgresConfig, PostgresStore};
    #[cfg(feature = "redb")]
    pub use portcullis_store_redb::{Durability, RedbStore};
}

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// The examples of docs/core.md, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../docs/core.md")]
struct CoreDocDoctests;

/// The examples of docs/agent.md, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../docs/agent.md")]
struct AgentDocDoctests;
