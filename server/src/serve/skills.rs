//! The demo notes app's skills and the `code` an `execute` call carries.
//!
//! **The code format.** `code` is a JSON array of steps, run in order in the
//! connected tab, each naming one skill and its arguments:
//!
//! ```json
//! [{"skill": "list_notes", "args": {}},
//!  {"skill": "create_note", "args": {"title": "Groceries", "body": "milk"}}]
//! ```
//!
//! At most [`MAX_STEPS`] steps. An unknown skill is `ACTION_NOT_FOUND`, bad
//! arguments are `INVALID_PARAMS`; both are refused before the ledger sees
//! the call, so the request id stays unbound. The run's result is the list
//! of step results: `[{"skill": …, "result": …}]`. A step that fails ends
//! the run with that business error (`result.error`).
//!
//! Each step becomes one ledger [`Action`] of the skill's effect,
//! fingerprinted over the canonical JSON of its arguments (object keys
//! sorted), so an approval covers exactly the arguments it showed.

use portcullis_core::error::ErrorCode;
use portcullis_core::ledger::{Action, Effect};
use portcullis_core::scope::{SKILLS_READ, SKILLS_WRITE};
use serde_json::{Map, Value, json};

/// Most steps in one `execute`.
pub(crate) const MAX_STEPS: usize = 16;
/// Longest note title, in bytes.
pub(crate) const MAX_TITLE_LEN: usize = 200;
/// Longest note body, in bytes.
pub(crate) const MAX_BODY_LEN: usize = 2_000;

/// One skill of the notes app.
#[derive(Debug)]
pub(crate) struct Skill {
    /// Its name, the action kind.
    pub(crate) name: &'static str,
    /// What it does.
    pub(crate) description: &'static str,
    /// What it may change.
    pub(crate) effect: Effect,
    /// The scope it needs (the demo's: `skills:read` to read, `skills:write`
    /// to change anything).
    pub(crate) scope: &'static str,
    /// Whether it drives page controls (needs the tab visible).
    pub(crate) drives_page: bool,
    /// Its arguments: `(name, max bytes)`, all required strings.
    args: &'static [(&'static str, usize)],
}

/// The catalog.
pub(crate) const SKILLS: &[Skill] = &[
    Skill {
        name: "list_notes",
        description: "List the signed-in user's notes (id, title, body).",
        effect: Effect::Read,
        scope: SKILLS_READ,
        drives_page: false,
        args: &[],
    },
    Skill {
        name: "create_note",
        description: "Create a note with a title and a body. The user approves each one.",
        effect: Effect::Write,
        scope: SKILLS_WRITE,
        drives_page: false,
        args: &[("title", MAX_TITLE_LEN), ("body", MAX_BODY_LEN)],
    },
    Skill {
        name: "highlight_note",
        description: "Scroll to a note in the user's open tab and highlight it. \
                      Changes only what the page shows; needs the tab visible.",
        effect: Effect::Read,
        scope: SKILLS_READ,
        drives_page: true,
        args: &[("id", 64)],
    },
];

impl Skill {
    /// The skill named `name`.
    pub(crate) fn named(name: &str) -> Option<&'static Self> {
        SKILLS.iter().find(|s| s.name == name)
    }

    /// Its JSON Schema for `args`.
    pub(crate) fn input_schema(&self) -> Value {
        let mut props = Map::new();
        for (name, max) in self.args {
            props.insert((*name).into(), json!({"type": "string", "maxLength": max}));
        }
        json!({
            "type": "object",
            "properties": props,
            "required": self.args.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            "additionalProperties": false,
        })
    }

    /// The short form `search_skills` lists.
    pub(crate) fn summary(&self) -> Value {
        json!({
            "name": self.name,
            "description": self.description,
            "effect": self.effect.as_str(),
            "drivesPage": self.drives_page,
        })
    }

    /// The full form `describe_skill` answers.
    pub(crate) fn describe(&self) -> Value {
        let mut v = self.summary();
        v["inputSchema"] = self.input_schema();
        v["needsApproval"] = json!(self.effect.needs_approval());
        v
    }

    fn check_args(&self, args: &Value) -> Result<(), String> {
        let obj = args
            .as_object()
            .ok_or_else(|| format!("{}: args must be an object", self.name))?;
        for key in obj.keys() {
            if !self.args.iter().any(|(n, _)| n == key) {
                return Err(format!("{}: unknown argument {key:?}", self.name));
            }
        }
        for (name, max) in self.args {
            match obj.get(*name).and_then(Value::as_str) {
                Some(s) if !s.is_empty() && s.len() <= *max => {}
                _ => {
                    return Err(format!(
                        "{}: {name} must be a string of 1-{max} bytes",
                        self.name
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The skills whose name or description contains `query` (all for an
/// empty query), case-insensitively.
pub(crate) fn search(query: &str) -> Vec<&'static Skill> {
    let q = query.trim().to_lowercase();
    SKILLS
        .iter()
        .filter(|s| {
            q.is_empty() || s.name.contains(&q) || s.description.to_lowercase().contains(&q)
        })
        .collect()
}

/// One step of a program.
#[derive(Clone, Debug)]
pub(crate) struct Step {
    /// The skill.
    pub(crate) skill: &'static Skill,
    /// Its validated arguments.
    pub(crate) args: Value,
}

impl Step {
    /// The ledger action this step asks for.
    pub(crate) fn action(&self) -> Result<Action, String> {
        let bytes = serde_json::to_vec(&self.args).map_err(|e| e.to_string())?;
        let action = Action::new(self.skill.name, self.skill.effect, self.skill.scope, &bytes)
            .map_err(|e| e.to_string())?;
        Ok(if self.skill.drives_page {
            action.driving_page()
        } else {
            action
        })
    }
}

/// Why a program was refused: its wire code and message.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ProgramError {
    /// `INVALID_PARAMS` or `ACTION_NOT_FOUND`.
    pub(crate) code: ErrorCode,
    /// What is wrong.
    pub(crate) message: String,
}

fn invalid(message: impl Into<String>) -> ProgramError {
    ProgramError {
        code: ErrorCode::InvalidParams,
        message: message.into(),
    }
}

/// Parses `code` (see the module docs).
pub(crate) fn parse_program(code: &str) -> Result<Vec<Step>, ProgramError> {
    let value: Value = serde_json::from_str(code)
        .map_err(|_| invalid("code must be a JSON array of {\"skill\", \"args\"} steps"))?;
    let steps = value
        .as_array()
        .filter(|a| (1..=MAX_STEPS).contains(&a.len()))
        .ok_or_else(|| invalid(format!("code must be an array of 1-{MAX_STEPS} steps")))?;
    steps
        .iter()
        .map(|step| {
            let obj = step
                .as_object()
                .filter(|o| o.keys().all(|k| k == "skill" || k == "args"))
                .ok_or_else(|| invalid("each step is {\"skill\": …, \"args\": {…}}"))?;
            let name = obj
                .get("skill")
                .and_then(Value::as_str)
                .ok_or_else(|| invalid("each step names a skill"))?;
            let skill = Skill::named(name).ok_or_else(|| ProgramError {
                code: ErrorCode::ActionNotFound,
                message: format!("no skill named {name:?}: call search_skills"),
            })?;
            let args = obj.get("args").cloned().unwrap_or_else(|| json!({}));
            skill.check_args(&args).map_err(invalid)?;
            Ok(Step { skill, args })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_name_known_skills_with_valid_arguments() {
        let steps = parse_program(
            r#"[{"skill":"list_notes"},{"skill":"create_note","args":{"title":"t","body":"b"}}]"#,
        )
        .unwrap();
        assert_eq!(steps.len(), 2);
        assert_eq!(steps[1].action().unwrap().effect(), Effect::Write);
        let e = parse_program(r#"[{"skill":"rm_rf"}]"#).unwrap_err();
        assert_eq!(e.code, ErrorCode::ActionNotFound);
        for bad in [
            "[]",
            "{}",
            "not json",
            r#"[{"skill":"create_note","args":{"title":"t"}}]"#,
            r#"[{"skill":"create_note","args":{"title":"t","body":"b","x":"y"}}]"#,
            r#"[{"skill":"list_notes","extra":1}]"#,
        ] {
            assert_eq!(
                parse_program(bad).unwrap_err().code,
                ErrorCode::InvalidParams,
                "{bad}"
            );
        }
    }

    #[test]
    fn the_fingerprint_ignores_key_order_and_page_skills_drive_the_page() {
        let a =
            parse_program(r#"[{"skill":"create_note","args":{"title":"t","body":"b"}}]"#).unwrap();
        let b =
            parse_program(r#"[{"args":{"body":"b","title":"t"},"skill":"create_note"}]"#).unwrap();
        assert_eq!(
            a[0].action().unwrap().fingerprint(),
            b[0].action().unwrap().fingerprint()
        );
        let h = parse_program(r#"[{"skill":"highlight_note","args":{"id":"n1"}}]"#).unwrap();
        assert!(h[0].action().unwrap().drives_page());
        assert_eq!(search("NOTE").len(), 3);
        assert_eq!(search("highlight").len(), 1);
    }
}
