//! The ledger action kind of a downstream tool, `<source>/<tool>`: what
//! approvals and auto-approval are keyed by, so they are per source and tool
//! and never shared with the app's own skills (whose names have no `/`).
//! A host's approval card reads the source from a kind with
//! [`source_of_kind`].

/// The action kind of `source`'s tool `tool`.
#[must_use]
pub(crate) fn action_kind(source: &str, tool: &str) -> String {
    format!("{source}/{tool}")
}

/// The source and tool of a gateway tool's action kind
/// (`<source>/<tool>`); `None` for the app's own skills.
#[must_use]
pub fn source_of_kind(kind: &str) -> Option<(&str, &str)> {
    kind.split_once('/')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_names_its_source_and_a_skill_has_none() {
        let kind = action_kind("notes-db", "create_note");
        assert_eq!(kind, "notes-db/create_note");
        assert_ne!(kind, "create_note", "never the app's own skill's kind");
        assert_eq!(source_of_kind(&kind), Some(("notes-db", "create_note")));
        assert_eq!(source_of_kind("create_note"), None);
        // A tool name with a slash still reads back to its source.
        assert_eq!(source_of_kind(&action_kind("s", "a/b")), Some(("s", "a/b")));
    }
}
