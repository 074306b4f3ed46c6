//! What one instance tells the others on a shared PostgreSQL database:
//! `NOTIFY` on one channel, `LISTEN` on a dedicated connection per instance.
//!
//! A server keeps some state in memory (the tab channel's long-polls and
//! their mailbox versions) and caches one value read from the store (the
//! site's public key, the `{key}` of its MCP URL). With several instances on
//! one database, a change made through one must reach the others at once,
//! without polling:
//!
//! * **`bump <subject>`**: something a user's connected tab shows changed
//!   (an approval asked or decided, a job queued, a tab connected): every
//!   instance bumps that user's mailbox, which wakes the long-polls waiting
//!   there, and they answer with a fresh snapshot read from the store.
//! * **`report <job>`**: a page reported on a job through this instance;
//!   the instance whose driver awaits that job collects the report from
//!   the job table (see `serve::jobs`).
//! * **`signout <sid> <expires>`** and **`epoch`**: a browser session
//!   signed out, or the sessions' epoch changed (see [`crate::session`]).
//! * **`site`**: the site changed (off switch, key rotation, from the admin
//!   CLI or another instance): every instance re-reads it.
//!
//! A notification carries only the key of what changed (a schema name, an
//! instance id, the event and a user name), never a token, code or secret;
//! what changed is read from the store. PostgreSQL delivers a `NOTIFY`
//! only when its transaction commits, and in order per sender. On redb none
//! of this runs: one process owns the file, and the in-process wake-ups are
//! the whole story.
//!
//! Every connection here takes the store's TLS from the URL (`sslmode`,
//! `sslrootcert`, see `portcullis_store_postgres::TlsMode`).
//!
//! The listening connection is dedicated (a pooled one would drop its
//! `LISTEN` when returned); when it breaks, the listener reconnects with a
//! pause and re-reads what it may have missed (the site), see [`listen`].

use std::sync::mpsc;
use std::time::Duration;

use fallible_iterator::FallibleIterator as _;
use postgres::Client;

use crate::cli::DbArgs;

/// The one channel every instance listens on; the payload names the schema,
/// so instances of other schemas on the same database ignore it.
pub(crate) const CHANNEL: &str = "portcullis";

/// The schema when `--db-schema` is not given (the store's default).
fn schema_of(db: &DbArgs) -> &str {
    db.db_schema
        .as_deref()
        .unwrap_or(portcullis_store_postgres::DEFAULT_SCHEMA)
}

/// What changed, as a notification says.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// The site changed: re-read it.
    Site,
    /// The connected tab of this user has something new.
    Bump(String),
    /// The page reported on this job: the instance driving it collects the
    /// report ([`crate::serve`]'s job table).
    Report(String),
    /// A browser session signed out (its id, its cookie's expiry).
    SignOut(String, u64),
    /// The browser sessions' epoch changed (every session ended).
    Epoch,
}

impl Event {
    fn encode(&self, schema: &str, instance: &str) -> String {
        match self {
            Self::Site => format!("{schema}\t{instance}\tsite"),
            Self::Bump(subject) => format!("{schema}\t{instance}\tbump\t{subject}"),
            Self::Report(job) => format!("{schema}\t{instance}\treport\t{job}"),
            Self::SignOut(sid, expires) => {
                format!("{schema}\t{instance}\tsignout\t{sid}\t{expires}")
            }
            Self::Epoch => format!("{schema}\t{instance}\tepoch"),
        }
    }

    /// The event of `payload` for `schema`, unless it came from `instance`
    /// itself (it already applied it) or names another schema.
    fn decode(payload: &str, schema: &str, instance: &str) -> Option<Self> {
        let mut parts = payload.splitn(4, '\t');
        let (s, from, kind) = (parts.next()?, parts.next()?, parts.next()?);
        if s != schema || from == instance {
            return None;
        }
        match (kind, parts.next()) {
            ("site", None) => Some(Self::Site),
            ("bump", Some(subject)) => Some(Self::Bump(subject.to_owned())),
            ("report", Some(job)) => Some(Self::Report(job.to_owned())),
            ("signout", Some(rest)) => {
                let (sid, expires) = rest.split_once('\t')?;
                Some(Self::SignOut(sid.to_owned(), expires.parse().ok()?))
            }
            ("epoch", None) => Some(Self::Epoch),
            _ => None,
        }
    }
}

/// A connection of its own to `url` (the error never repeats the URL).
pub(crate) fn connect(url: &str) -> Result<Client, String> {
    // With the store's TLS (`sslmode`); its errors never repeat the string.
    portcullis_store_postgres::PostgresConfig::parse(url)
        .and_then(|c| c.connect())
        .map_err(|e| format!("connecting to notify: {e}"))
}

fn send(client: &mut Client, payload: &str) -> Result<(), postgres::Error> {
    client
        .execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &payload])
        .map(drop)
}

/// Tells the running instances that the site changed (the admin CLI, after
/// its change committed). Nothing to do on a redb file.
pub(crate) fn site_changed(db: &DbArgs) -> Result<(), String> {
    let Some(url) = db.db.postgres_url() else {
        return Ok(());
    };
    let mut client = connect(url)?;
    send(&mut client, &Event::Site.encode(schema_of(db), "cli"))
        .map_err(|e| format!("notifying the servers: {e}"))
}

/// An instance's sending side: a thread with its own connection, fed by a
/// channel, so a handler never waits for a round trip to announce an event.
#[derive(Debug)]
pub(crate) struct Fanout {
    to_sender: Option<mpsc::Sender<Event>>,
    instance: String,
    schema: String,
}

impl Fanout {
    /// No other instance to tell (redb).
    pub(crate) fn local() -> Self {
        Self {
            to_sender: None,
            instance: String::new(),
            schema: String::new(),
        }
    }

    /// The sender of one instance on a PostgreSQL `db` (`None` on redb).
    pub(crate) fn start(db: &DbArgs) -> Self {
        let Some(url) = db.db.postgres_url() else {
            return Self::local();
        };
        let instance = format!(
            "i-{}",
            portcullis_core::rand::base64url::<9, _>(&mut rand::rng())
        );
        let schema = schema_of(db).to_owned();
        let (tx, rx) = mpsc::channel::<Event>();
        let (url, s, i) = (url.to_owned(), schema.clone(), instance.clone());
        std::thread::Builder::new()
            .name("notify-send".into())
            .spawn(move || send_forever(&url, &s, &i, &rx))
            .map_or_else(
                |e| {
                    tracing::error!(error = %e, "no notify thread: other instances will not be told");
                },
                drop,
            );
        Self {
            to_sender: Some(tx),
            instance,
            schema,
        }
    }

    /// This instance's id in payloads.
    pub(crate) fn instance(&self) -> &str {
        &self.instance
    }

    /// The schema payloads name.
    pub(crate) fn schema(&self) -> &str {
        &self.schema
    }

    /// Announces `event` to the other instances (nothing on redb).
    pub(crate) fn announce(&self, event: Event) {
        if let Some(tx) = &self.to_sender {
            let _ = tx.send(event);
        }
    }
}

/// How long a broken notify connection waits before it connects again.
const RECONNECT: Duration = Duration::from_secs(1);

fn send_forever(url: &str, schema: &str, instance: &str, rx: &mpsc::Receiver<Event>) {
    let mut client: Option<Client> = None;
    while let Ok(event) = rx.recv() {
        let payload = event.encode(schema, instance);
        // Twice at most: once more on a fresh connection when the kept one
        // broke since the last event.
        for _ in 0..2 {
            if client.is_none() {
                match connect(url) {
                    Ok(c) => client = Some(c),
                    Err(e) => {
                        tracing::warn!(error = %e, "notify: no connection; event dropped");
                        std::thread::sleep(RECONNECT);
                        break;
                    }
                }
            }
            let Some(c) = client.as_mut() else { break };
            match send(c, &payload) {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "notify failed; reconnecting");
                    client = None;
                }
            }
        }
    }
}

/// Listens for the other instances' events on a dedicated connection of
/// `db`, on a thread of its own, for the life of the process: `on(Some(e))`
/// for each event, `on(None)` after every (re)connection, when events may
/// have been missed and cached values should be re-read.
pub(crate) fn listen(
    db: &DbArgs,
    fanout: &Fanout,
    on: impl Fn(Option<Event>) + Send + 'static,
) -> Result<(), String> {
    let Some(url) = db.db.postgres_url() else {
        return Ok(());
    };
    let (url, schema, instance) = (
        url.to_owned(),
        fanout.schema().to_owned(),
        fanout.instance().to_owned(),
    );
    // The first connection is made before the server answers anyone, so a
    // change committed after start is never missed.
    let first = listening(&url)?;
    std::thread::Builder::new()
        .name("notify-listen".into())
        .spawn(move || {
            let mut client = Some(first);
            loop {
                let mut c = match client.take() {
                    Some(c) => c,
                    None => match listening(&url) {
                        Ok(c) => {
                            on(None);
                            c
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "notify listener: reconnecting");
                            std::thread::sleep(RECONNECT);
                            continue;
                        }
                    },
                };
                let mut notes = c.notifications();
                let mut events = notes.blocking_iter();
                while let Ok(Some(n)) = events.next() {
                    if n.channel() == CHANNEL
                        && let Some(e) = Event::decode(n.payload(), &schema, &instance)
                    {
                        on(Some(e));
                    }
                }
                tracing::warn!("notify listener: connection lost; reconnecting");
                std::thread::sleep(RECONNECT);
            }
        })
        .map_err(|e| format!("starting the notify listener: {e}"))?;
    Ok(())
}

fn listening(url: &str) -> Result<Client, String> {
    let mut c = connect(url)?;
    c.batch_execute(&format!("LISTEN {CHANNEL}"))
        .map_err(|e| format!("LISTEN: {e}"))?;
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip_and_skip_their_own_instance_and_other_schemas() {
        let bump = Event::Bump("alice\twith tab".into()).encode("portcullis", "i-a");
        assert_eq!(
            Event::decode(&bump, "portcullis", "i-b"),
            Some(Event::Bump("alice\twith tab".into()))
        );
        assert_eq!(Event::decode(&bump, "portcullis", "i-a"), None);
        assert_eq!(Event::decode(&bump, "other", "i-b"), None);
        let site = Event::Site.encode("portcullis", "cli");
        assert_eq!(Event::decode(&site, "portcullis", "i-b"), Some(Event::Site));
        assert_eq!(Event::decode("garbage", "portcullis", "i-b"), None);
        let signout = Event::SignOut("sid-1".into(), 99).encode("portcullis", "i-a");
        assert_eq!(
            Event::decode(&signout, "portcullis", "i-b"),
            Some(Event::SignOut("sid-1".into(), 99))
        );
        let epoch = Event::Epoch.encode("portcullis", "i-a");
        assert_eq!(
            Event::decode(&epoch, "portcullis", "i-b"),
            Some(Event::Epoch)
        );
        let report = Event::Report("job-1".into()).encode("portcullis", "i-a");
        assert_eq!(
            Event::decode(&report, "portcullis", "i-b"),
            Some(Event::Report("job-1".into()))
        );
        assert_eq!(
            Event::decode("portcullis\ti-a\tsite\textra", "portcullis", "i-b"),
            None
        );
    }
}
