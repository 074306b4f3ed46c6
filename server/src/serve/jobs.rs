//! The tab's jobs and their reports as rows, when several instances share a
//! PostgreSQL database: an `execute` driven on instance B reaches a tab
//! long-polling on instance A, and the tab's report made through A reaches
//! the run waiting on B.
//!
//! One small server-side table, `"<schema>".relay_job`, beside the store's
//! own tables (it holds no record of the core: a job is a hint to a page
//! plus the page's answer, never a decision). A row's life:
//!
//! 1. **queued**: the run's instance inserts it, then bumps the user's
//!    mailbox everywhere (`NOTIFY bump`), so the polls of every instance
//!    wake;
//! 2. **taken**: the page's poll claims it with `UPDATE … SET taken = true
//!    WHERE NOT taken RETURNING`: whichever instance the page polls and
//!    however many polls race, one claim wins, so a job reaches one page
//!    once and the action runs at most once;
//! 3. **reported**: the page's report, through any instance, sets the
//!    outcome on a taken, unreported row of that user and `NOTIFY report`s
//!    its job id; the run's instance (the one that awaits that id)
//!    deletes the row and hands the outcome to its run. A run that
//!    missed the notification collects the row at its next liveness check.
//!
//! The open route's `navigate` commands are rows too
//! (`"<schema>".relay_navigate`), with the in-memory queue's bounds, lease
//! and expiry, so a link opened through one instance reaches the browser
//! session's tab polling another.
//!
//! The browser sessions' epoch and signed-out set are rows as well
//! (`session_epoch`, `session_signout`, see [`crate::session`]); on redb
//! they are in the session file beside the database
//! ([`crate::session_file`]).
//!
//! **Lost runs.** A run's ticket lives in the memory of the instance that
//! drives it. `portcullis-axum` begins a tab run under that instance's
//! executor lease ([`portcullis_core::Engine::begin_driven`]), so the
//! ledger itself knows which instance holds each run: a repeat reaching
//! another instance is `execution_pending` while that lease is live, and
//! once the instance dies its runs end with `unknownTail` (at that repeat,
//! or by the crate's sweep of lost runs on any instance). Nothing of it is
//! here.
//!
//! A run that gives up on a job deletes its row; rows older than [`STALE`] (an
//! instance died mid-run) are swept. On redb none of this exists: the
//! relay's in-process queue is the whole path.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use portcullis_axum::navigate::NavigateBounds;
use portcullis_core::grant::GrantId;
use portcullis_core::ledger::RequestId;
use postgres::Client;
use serde_json::{Value, json};

use super::work::{Job, TabReport};
use crate::session::Epoch;

/// A row left this long (its instance died mid-run) is deleted by the sweep.
pub(crate) const STALE: Duration = Duration::from_hours(1);

/// The job table of one instance: one connection of its own, used from the
/// blocking pool only (the synchronous driver must not run on a runtime
/// worker), made again after it breaks.
pub(crate) struct JobTable {
    url: String,
    table: String,
    /// The open route's `navigate` commands (see [`super::navigate`]).
    navigate: String,
    /// Their bounds.
    bounds: NavigateBounds,
    /// The browser sessions' shared epoch (one row).
    epoch: String,
    /// The signed-out browser sessions, until their cookies expire.
    signout: String,
    client: Mutex<Option<Client>>,
}

impl std::fmt::Debug for JobTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobTable")
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

/// A job as its row keeps it.
fn encode(job: &Job) -> String {
    json!({
        "grant": job.grant.to_string(),
        "connection": job.connection,
        "requestId": job.request_id.to_string(),
        "seq": job.seq,
        "skill": job.skill,
        "args": job.args,
    })
    .to_string()
}

/// The job of a row, `None` when it does not parse (written by another
/// build, or naming a skill this build lacks).
fn decode(id: String, text: &str) -> Option<Job> {
    let v: Value = serde_json::from_str(text).ok()?;
    Some(Job {
        id,
        grant: GrantId::parse(v["grant"].as_str()?)?,
        connection: u32::try_from(v["connection"].as_u64()?).ok()?,
        request_id: RequestId::parse(v["requestId"].as_str()?).ok()?,
        seq: u32::try_from(v["seq"].as_u64()?).ok()?,
        skill: super::skills::Skill::named(v["skill"].as_str()?)?.name,
        args: v["args"].clone(),
    })
}

impl JobTable {
    /// Connects to `url` and creates the table in `schema` if it is missing;
    /// `navigate` commands are kept within `bounds`.
    pub(crate) fn open(url: &str, schema: &str, bounds: NavigateBounds) -> Result<Self, String> {
        let schema = schema.replace('"', "\"\"");
        let jobs = Self {
            url: url.to_owned(),
            table: format!("\"{schema}\".relay_job"),
            navigate: format!("\"{schema}\".relay_navigate"),
            bounds,
            epoch: format!("\"{schema}\".session_epoch"),
            signout: format!("\"{schema}\".session_signout"),
            client: Mutex::new(None),
        };
        let t = &jobs.table;
        jobs.with(|c| {
            c.batch_execute(&format!(
                "CREATE TABLE IF NOT EXISTS {t} (
                     id text PRIMARY KEY,
                     subject text NOT NULL,
                     origin text NOT NULL,
                     job text NOT NULL,
                     taken boolean NOT NULL DEFAULT false,
                     reported boolean NOT NULL DEFAULT false,
                     failed text,
                     summary text,
                     made timestamptz NOT NULL DEFAULT now()
                 );
                 CREATE INDEX IF NOT EXISTS relay_job_subject ON {t} (subject) WHERE NOT taken;
                 CREATE TABLE IF NOT EXISTS {n} (
                     seq bigserial PRIMARY KEY,
                     id text NOT NULL,
                     session text NOT NULL,
                     subject text NOT NULL,
                     message text NOT NULL,
                     bytes bigint NOT NULL,
                     handed timestamptz,
                     made timestamptz NOT NULL DEFAULT now()
                 );
                 CREATE INDEX IF NOT EXISTS relay_navigate_session ON {n} (session);
                 CREATE INDEX IF NOT EXISTS relay_navigate_subject ON {n} (subject);
                 CREATE TABLE IF NOT EXISTS {e} (
                     singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
                     epoch bytea NOT NULL
                 );
                 CREATE TABLE IF NOT EXISTS {o} (sid text PRIMARY KEY, expires bigint NOT NULL);",
                n = jobs.navigate,
                e = jobs.epoch,
                o = jobs.signout,
            ))
        })
        .map_err(|e| format!("creating the job table: {e}"))?;
        Ok(jobs)
    }

    /// Runs `f` on the connection, connecting first if there is none; a
    /// failure drops the connection so the next call makes a fresh one.
    fn with<T>(
        &self,
        f: impl FnOnce(&mut Client) -> Result<T, postgres::Error>,
    ) -> Result<T, String> {
        let mut guard = self.client.lock().unwrap_or_else(PoisonError::into_inner);
        if guard.is_none() {
            *guard = Some(crate::notify::connect(&self.url)?);
        }
        let Some(client) = guard.as_mut() else {
            return Err("no connection".into());
        };
        f(client).map_err(|e| {
            *guard = None;
            e.to_string()
        })
    }

    /// Queues `job` for `subject`'s tab, driven by instance `origin`.
    pub(crate) fn insert(&self, subject: &str, origin: &str, job: &Job) -> Result<(), String> {
        let sql = format!(
            "INSERT INTO {} (id, subject, origin, job) VALUES ($1, $2, $3, $4)",
            self.table
        );
        self.with(|c| c.execute(&sql, &[&job.id, &subject, &origin, &encode(job)]))
            .map(drop)
    }

    /// `subject`'s jobs not yet taken, oldest first.
    pub(crate) fn queued(&self, subject: &str) -> Result<Vec<Job>, String> {
        let sql = format!(
            "SELECT id, job FROM {} WHERE subject = $1 AND NOT taken ORDER BY made",
            self.table
        );
        let rows = self.with(|c| c.query(&sql, &[&subject]))?;
        Ok(rows
            .into_iter()
            .filter_map(|r| decode(r.get(0), r.get::<_, &str>(1)))
            .collect())
    }

    /// Claims the jobs `ids` for the polling page; returns the ids this
    /// call won (a racing poll may have taken some).
    pub(crate) fn claim(&self, ids: &[&str]) -> Result<Vec<String>, String> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "UPDATE {} SET taken = true WHERE id = ANY($1) AND NOT taken RETURNING id",
            self.table
        );
        let rows = self.with(|c| c.query(&sql, &[&ids]))?;
        Ok(rows.into_iter().map(|r| r.get(0)).collect())
    }

    /// Deletes the jobs `ids` (withdrawn, or never deliverable).
    pub(crate) fn delete(&self, ids: &[&str]) -> Result<(), String> {
        if ids.is_empty() {
            return Ok(());
        }
        let sql = format!("DELETE FROM {} WHERE id = ANY($1)", self.table);
        self.with(|c| c.execute(&sql, &[&ids])).map(drop)
    }

    /// Records the page's report on job `id` of `subject`: true when such
    /// a job was taken and not yet reported.
    pub(crate) fn report(
        &self,
        subject: &str,
        id: &str,
        report: &TabReport,
    ) -> Result<bool, String> {
        let sql = format!(
            "UPDATE {} SET reported = true, failed = $3, summary = $4
             WHERE id = $1 AND subject = $2 AND taken AND NOT reported",
            self.table
        );
        let failed = report.failed.as_deref();
        let n = self.with(|c| c.execute(&sql, &[&id, &subject, &failed, &report.summary]))?;
        Ok(n == 1)
    }

    /// Takes the report on job `id`, if it has arrived: the row goes.
    pub(crate) fn collect(&self, id: &str) -> Result<Option<TabReport>, String> {
        let sql = format!(
            "DELETE FROM {} WHERE id = $1 AND reported RETURNING failed, summary",
            self.table
        );
        let row = self.with(|c| c.query_opt(&sql, &[&id]))?;
        Ok(row.map(|r| TabReport {
            failed: r.get(0),
            summary: r.get::<_, Option<String>>(1).unwrap_or_default(),
        }))
    }

    /// Queues the `navigate` message `message` (id `id`) for browser
    /// session `session` of `subject`, within the bounds of the in-memory
    /// queue ([`NavigateBounds`]): the session's oldest beyond
    /// `per_session`, the user's oldest beyond `user_bytes`, anyone's oldest
    /// beyond `total_bytes` and the expired ones go.
    /// Returns how many the session has pending.
    pub(crate) fn push_navigate(
        &self,
        session: &str,
        subject: &str,
        id: &str,
        message: &str,
        bytes: usize,
    ) -> Result<i64, String> {
        let n = &self.navigate;
        let b = self.bounds;
        let ttl = secs(b.ttl);
        let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
        let per_session = i64::try_from(b.per_session).unwrap_or(i64::MAX);
        let user = i64::try_from(b.user_bytes).unwrap_or(i64::MAX);
        let total = i64::try_from(b.total_bytes).unwrap_or(i64::MAX);
        self.with(|c| {
            let mut t = c.transaction()?;
            t.execute(
                &format!(
                    "INSERT INTO {n} (id, session, subject, message, bytes) \
                     VALUES ($1, $2, $3, $4, $5)"
                ),
                &[&id, &session, &subject, &message, &bytes],
            )?;
            t.execute(
                &format!("DELETE FROM {n} WHERE made < now() - make_interval(secs => $1)"),
                &[&ttl],
            )?;
            t.execute(
                &format!(
                    "DELETE FROM {n} WHERE seq IN (SELECT seq FROM {n} WHERE session = $1 \
                     ORDER BY seq DESC OFFSET $2)"
                ),
                &[&session, &per_session],
            )?;
            for (filter, budget) in [("subject = $2", user), ("$2::text IS NOT NULL", total)] {
                t.execute(
                    &format!(
                        "DELETE FROM {n} WHERE seq IN (SELECT seq FROM (SELECT seq, \
                         sum(bytes) OVER (ORDER BY seq DESC) AS held FROM {n} WHERE {filter}) \
                         AS newest WHERE held > $1::bigint)"
                    ),
                    &[&budget, &subject],
                )?;
            }
            let pending: i64 = t
                .query_one(
                    &format!("SELECT count(*) FROM {n} WHERE session = $1"),
                    &[&session],
                )?
                .get(0);
            t.commit()?;
            Ok(pending)
        })
    }

    /// The messages of `session` to hand to the polling page now, oldest
    /// first, each reserved for the bounds' `lease` (as the in-memory
    /// queue's `take`), whichever instance the page polls.
    pub(crate) fn take_navigates(&self, session: &str) -> Result<Vec<Value>, String> {
        let sql = format!(
            "UPDATE {} SET handed = now() WHERE session = $1 \
             AND made >= now() - make_interval(secs => $2) \
             AND (handed IS NULL OR handed <= now() - make_interval(secs => $3)) \
             RETURNING seq, message",
            self.navigate
        );
        let (ttl, lease) = (secs(self.bounds.ttl), secs(self.bounds.lease));
        let mut rows = self.with(|c| c.query(&sql, &[&session, &ttl, &lease]))?;
        rows.sort_by_key(|r| r.get::<_, i64>(0));
        Ok(rows
            .iter()
            .filter_map(|r| serde_json::from_str(r.get::<_, &str>(1)).ok())
            .collect())
    }

    /// Acknowledges message `id` of `session`: false when it has none such.
    pub(crate) fn ack_navigate(&self, session: &str, id: &str) -> Result<bool, String> {
        let sql = format!(
            "DELETE FROM {} WHERE session = $1 AND id = $2",
            self.navigate
        );
        Ok(self.with(|c| c.execute(&sql, &[&session, &id]))? > 0)
    }

    /// Drops every message of `session` (sign-out).
    pub(crate) fn clear_navigates(&self, session: &str) -> Result<(), String> {
        let sql = format!("DELETE FROM {} WHERE session = $1", self.navigate);
        self.with(|c| c.execute(&sql, &[&session])).map(drop)
    }

    /// The browser sessions' epoch, made at random by the first instance.
    pub(crate) fn session_epoch(&self) -> Result<Epoch, String> {
        let fresh = Epoch::random(&mut rand::rng()).to_bytes();
        let insert = format!(
            "INSERT INTO {} (epoch) VALUES ($1) ON CONFLICT (singleton) DO NOTHING",
            self.epoch
        );
        let select = format!("SELECT epoch FROM {}", self.epoch);
        let bytes: Vec<u8> = self.with(|c| {
            c.execute(&insert, &[&&fresh[..]])?;
            Ok(c.query_one(&select, &[])?.get(0))
        })?;
        let bytes: [u8; 16] = bytes
            .try_into()
            .map_err(|_| "the stored session epoch is not 16 bytes".to_owned())?;
        Ok(Epoch::from_bytes(bytes))
    }

    /// The signed-out sessions whose cookies are still live at `now`.
    pub(crate) fn signed_out(&self, now: u64) -> Result<Vec<(String, u64)>, String> {
        let sql = format!(
            "SELECT sid, expires FROM {} WHERE expires > $1",
            self.signout
        );
        let now = i64::try_from(now).unwrap_or(i64::MAX);
        let rows = self.with(|c| c.query(&sql, &[&now]))?;
        Ok(rows
            .iter()
            .map(|r| {
                let expires: i64 = r.get(1);
                (r.get(0), u64::try_from(expires).unwrap_or(0))
            })
            .collect())
    }

    /// Records the sign-out of `sid` (its cookie expires at `expires`).
    /// When more than `capacity` live sign-outs are held, a new epoch
    /// replaces the old (every session ends) and the set empties: that
    /// epoch is returned.
    pub(crate) fn sign_out(
        &self,
        sid: &str,
        expires: u64,
        now: u64,
        capacity: usize,
    ) -> Result<Option<Epoch>, String> {
        let (o, e) = (&self.signout, &self.epoch);
        let expires = i64::try_from(expires).unwrap_or(i64::MAX);
        let now = i64::try_from(now).unwrap_or(i64::MAX);
        let capacity = i64::try_from(capacity).unwrap_or(i64::MAX);
        let fresh = Epoch::random(&mut rand::rng());
        self.with(|c| {
            let mut t = c.transaction()?;
            t.execute(
                &format!("INSERT INTO {o} (sid, expires) VALUES ($1, $2) ON CONFLICT DO NOTHING"),
                &[&sid, &expires],
            )?;
            let live: i64 = t
                .query_one(
                    &format!("SELECT count(*) FROM {o} WHERE expires > $1"),
                    &[&now],
                )?
                .get(0);
            let renewed = if live > capacity {
                t.execute(
                    &format!("UPDATE {e} SET epoch = $1"),
                    &[&&fresh.to_bytes()[..]],
                )?;
                t.execute(&format!("DELETE FROM {o}"), &[])?;
                Some(fresh)
            } else {
                None
            };
            t.commit()?;
            Ok(renewed)
        })
    }

    /// Deletes the rows older than [`STALE`], the expired `navigate`
    /// commands and sign-outs; returns how many.
    pub(crate) fn sweep(&self) -> Result<u64, String> {
        let sql = format!(
            "DELETE FROM {} WHERE made < now() - make_interval(secs => $1)",
            self.table
        );
        let expired = format!(
            "DELETE FROM {} WHERE made < now() - make_interval(secs => $1)",
            self.navigate
        );
        let signouts = format!(
            "DELETE FROM {} WHERE expires <= extract(epoch FROM now())",
            self.signout
        );
        let (stale, ttl) = (secs(STALE), secs(self.bounds.ttl));
        self.with(|c| {
            Ok(c.execute(&sql, &[&stale])?
                + c.execute(&expired, &[&ttl])?
                + c.execute(&signouts, &[])?)
        })
    }
}

/// `d` in seconds, as `make_interval` takes them.
fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_round_trips_through_its_row() {
        let job = Job {
            id: "j1".into(),
            grant: GrantId::parse("AAAAAAAAAAAAAAAAAAAAAA").expect("a grant id"),
            connection: 7,
            request_id: RequestId::parse("0190b2a4-7c3e-7def-8abc-000000000001").expect("an id"),
            seq: 2,
            skill: "create_note",
            args: json!({"title": "t"}),
        };
        let back = decode("j1".into(), &encode(&job)).expect("decodes");
        assert_eq!(back.grant, job.grant);
        assert_eq!(
            (back.connection, back.seq, back.skill),
            (7, 2, "create_note")
        );
        assert_eq!(back.request_id, job.request_id);
        assert_eq!(back.args, job.args);
        let unknown = encode(&job).replace("create_note", "no_such_skill");
        assert!(decode("j1".into(), &unknown).is_none());
    }
}
