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
//! drives it, so a crashed instance leaves its runs `Running`. Each
//! instance holds a lease (`instance_lease`, renewed every
//! [`LEASE_RENEW`], lapsed after [`LEASE_TTL`]) and claims each run in
//! `run_owner` **before** it begins it (no claim, no run: a run held by
//! another live instance answers `execution_pending`). The rule: a
//! `Running` request is lost when the instance holding its claim has no
//! live lease. At start, at every sweep and whenever an `execute` finds its
//! run's claim held by such an instance, an instance takes those claims
//! over (one `UPDATE`, so none can be claimed anew meanwhile), ends their
//! runs with `unknownTail` ([`portcullis_core::Engine::abandon_running_where`])
//! and lets the claims go. A lapsed claim is never claimed anew directly:
//! the run behind it has no driver anywhere and would stay `Running` with
//! no claim, which no sweep ends. A run another live instance drives is never
//! ended; a `Running` request with no claim at all (from before this
//! table) is left to the tab's next connection, which ends it.
//!
//! A run that gives up on a job deletes its row; rows older than [`STALE`] (an
//! instance died mid-run) are swept. On redb none of this exists: the
//! relay's in-process queue is the whole path.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use portcullis_core::grant::GrantId;
use portcullis_core::ledger::RequestId;
use postgres::Client;
use serde_json::{Value, json};

use super::work::{Job, TabReport};
use crate::session::Epoch;

/// A row left this long (its instance died mid-run) is deleted by the sweep.
pub(crate) const STALE: Duration = Duration::from_hours(1);
/// How often a live instance renews its lease.
pub(crate) const LEASE_RENEW: Duration = Duration::from_secs(5);
/// How long a lease lasts unrenewed: past it, the instance is taken for
/// dead and the runs it held are ended by the others.
pub(crate) const LEASE_TTL: Duration = Duration::from_secs(20);

/// What [`JobTable::claim_run`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Claim {
    /// This instance holds the claim now.
    Held,
    /// Another live instance holds it.
    Busy,
    /// An instance whose lease lapsed holds it: its runs are lost.
    Lapsed,
}

/// The bounds of the `navigate` commands' rows: those of the in-memory
/// queue, which owns them ([`super::navigate::BOUNDS`]) and hands them to
/// [`JobTable::open`], so that both paths keep and drop the same commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NavigateBounds {
    /// Most pending commands per browser session (the oldest go).
    pub(crate) per_session: usize,
    /// Most bytes of pending commands of one user (the user's oldest go).
    pub(crate) user_bytes: usize,
    /// Most bytes of pending commands in all (anyone's oldest go).
    pub(crate) total_bytes: usize,
    /// How long a command lasts, delivered or not.
    pub(crate) ttl: Duration,
    /// How long a command handed to a page waits for its acknowledgement.
    pub(crate) lease: Duration,
}

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
    /// Each live instance's lease, renewed every [`LEASE_RENEW`].
    lease: String,
    /// Which instance drives each run (holds its ticket).
    owner: String,
    /// The calls of this instance holding each run's claim (a run's call,
    /// and the calls of the same request waiting on it): the claim goes
    /// when the last lets go.
    holders: Mutex<std::collections::HashMap<(String, String), usize>>,
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
            lease: format!("\"{schema}\".instance_lease"),
            owner: format!("\"{schema}\".run_owner"),
            holders: Mutex::default(),
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
                 CREATE TABLE IF NOT EXISTS {o} (sid text PRIMARY KEY, expires bigint NOT NULL);
                 CREATE TABLE IF NOT EXISTS {l} (
                     instance text PRIMARY KEY,
                     renewed timestamptz NOT NULL DEFAULT now()
                 );
                 CREATE TABLE IF NOT EXISTS {r} (
                     grant_id text NOT NULL,
                     request text NOT NULL,
                     instance text NOT NULL,
                     PRIMARY KEY (grant_id, request)
                 );",
                l = jobs.lease,
                r = jobs.owner,
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

    /// Renews (or takes) the lease of `instance`.
    pub(crate) fn renew(&self, instance: &str) -> Result<(), String> {
        let sql = format!(
            "INSERT INTO {} (instance) VALUES ($1) \
             ON CONFLICT (instance) DO UPDATE SET renewed = now()",
            self.lease
        );
        self.with(|c| c.execute(&sql, &[&instance])).map(drop)
    }

    /// The condition that the instance named by `column` holds no live
    /// lease.
    fn dead(&self, column: &str) -> String {
        format!(
            "NOT EXISTS (SELECT 1 FROM {} l WHERE l.instance = {column} \
             AND l.renewed > now() - make_interval(secs => {}))",
            self.lease,
            LEASE_TTL.as_secs()
        )
    }

    /// Claims the run `(grant, request)` for `instance` before it may begin
    /// it: [`Claim::Held`] when no one held it or `instance` already does;
    /// [`Claim::Busy`] when another live instance holds it (it drives that
    /// run, or is ending it as lost); [`Claim::Lapsed`] when its holder's
    /// lease has lapsed. A lapsed claim is never taken over here: its run,
    /// if still `Running`, lost its driver with that instance, and a claim
    /// taken for it would find no driver to wait for and leave the run
    /// `Running` with no claim, which no sweep ends. The caller ends the
    /// lost runs first ([`JobTable::take_lost_runs`]), then claims again.
    pub(crate) fn claim_run(
        &self,
        grant: &str,
        request: &str,
        instance: &str,
    ) -> Result<Claim, String> {
        let claim = format!(
            "INSERT INTO {o} AS o (grant_id, request, instance) VALUES ($1, $2, $3) \
             ON CONFLICT (grant_id, request) DO UPDATE SET instance = EXCLUDED.instance \
             WHERE o.instance = EXCLUDED.instance RETURNING 1",
            o = self.owner,
        );
        let lapsed = format!(
            "SELECT 1 FROM {o} AS o WHERE o.grant_id = $1 AND o.request = $2 AND {dead}",
            o = self.owner,
            dead = self.dead("o.instance")
        );
        let held = self.with(|c| {
            if c.query_opt(&claim, &[&grant, &request, &instance])?
                .is_some()
            {
                return Ok(Claim::Held);
            }
            Ok(if c.query_opt(&lapsed, &[&grant, &request])?.is_some() {
                Claim::Lapsed
            } else {
                Claim::Busy
            })
        })?;
        if held == Claim::Held {
            *self
                .holders
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry((grant.to_owned(), request.to_owned()))
                .or_default() += 1;
        }
        Ok(held)
    }

    /// Lets go of one call's hold on the run `(grant, request)`; the claim
    /// goes (if `instance` holds it) when no call of this instance holds
    /// it any more.
    pub(crate) fn release_run(
        &self,
        grant: &str,
        request: &str,
        instance: &str,
    ) -> Result<(), String> {
        {
            let mut holders = self.holders.lock().unwrap_or_else(PoisonError::into_inner);
            let key = (grant.to_owned(), request.to_owned());
            match holders.get_mut(&key) {
                Some(n) if *n > 1 => {
                    *n -= 1;
                    return Ok(());
                }
                Some(_) => {
                    holders.remove(&key);
                }
                None => {}
            }
        }
        let sql = format!(
            "DELETE FROM {} WHERE grant_id = $1 AND request = $2 AND instance = $3",
            self.owner
        );
        self.with(|c| c.execute(&sql, &[&grant, &request, &instance]))
            .map(drop)
    }

    /// Takes over, for `instance`, every run held by an instance whose
    /// lease has lapsed (it died holding their tickets), so no one else
    /// claims them while `instance` ends them; returns them.
    pub(crate) fn take_lost_runs(&self, instance: &str) -> Result<Vec<(String, String)>, String> {
        let sql = format!(
            "UPDATE {o} AS o SET instance = $1 WHERE o.instance <> $1 AND {dead} \
             RETURNING grant_id, request",
            o = self.owner,
            dead = self.dead("o.instance")
        );
        let rows = self.with(|c| c.query(&sql, &[&instance]))?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
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
        let leases = format!(
            "DELETE FROM {} WHERE renewed < now() - make_interval(secs => $1)",
            self.lease
        );
        let (stale, ttl) = (secs(STALE), secs(self.bounds.ttl));
        self.with(|c| {
            Ok(c.execute(&sql, &[&stale])?
                + c.execute(&expired, &[&ttl])?
                + c.execute(&signouts, &[])?
                + c.execute(&leases, &[&stale])?)
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
