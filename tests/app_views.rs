//! Stored App Views ([`portcullis::apps::StoredView`]) on every store: a
//! View and its awaiting approval read back exactly as written (what a
//! reload, a restart or another instance sees); a write over a stale
//! revision is refused and changes nothing; another user's View id finds
//! nothing; the user's selected context and confirmed message reach the
//! agent of the View's lineage exactly once, the exact selected version,
//! attributed to the source; a replaced selection fails the whole send and
//! queues nothing; a declined message never arrives.

use portcullis::Engine;
use portcullis::Policy;
use portcullis::apps::{
    AppViewError, Authority, ContextError, ContextValue, Delivery, Fingerprint, GrantedSources,
    LineageKey, OpRule, OpStep, Operation, StoredView, View, ViewId, ViewOrigin,
};
use portcullis::gateway::{Gateway, SourceId};
use portcullis::grant::GrantId;
use portcullis::ledger::Effect;
use portcullis::scope::ScopeSet;
use portcullis::site::SiteId;
use portcullis::store::{Store, WriteTransaction};
use portcullis::time::Timestamp;

use crate::on_every_store;

const ANN: &str = "ann";
const BOB: &str = "bob";

fn lineage(subject: &str) -> LineageKey {
    LineageKey::of("demo", subject, "client-1")
}

fn authority(subject: &str) -> Authority {
    Authority {
        lineage: lineage(subject),
        grant: GrantId::from_bytes([2; 16]),
        credential: Fingerprint::of(b"none"),
        policy: Fingerprint::of(b"epoch 0"),
        scopes: ScopeSet::parse("skills:write").unwrap(),
        sources: GrantedSources::All,
    }
}

/// An active View of `subject` (id `id`) of the counter App.
fn view(subject: &str, id: &str) -> View {
    let gateway = Gateway::default();
    let source = SourceId::new("counter").unwrap();
    let mut v = View::open(
        ViewOrigin {
            id: ViewId::new(id).unwrap(),
            lineage: lineage(subject),
            grant: GrantId::from_bytes([2; 16]),
            source: source.clone(),
            tool: "show_counter".into(),
            resource_uri: gateway.encode(&source, "ui://counter/app.html").unwrap(),
        },
        &gateway,
    )
    .unwrap();
    let _ = v
        .activate(&authority(subject), Some("ui://counter/app.html"))
        .unwrap();
    v
}

/// Runs `$body` with the engine `$e` in a write transaction `$w` of
/// `$views`' store, committed when it answers `Ok`.
macro_rules! write {
    ($views:expr, |$e:ident, $w:ident| $body:expr) => {{
        let $e = &$views.engine;
        let mut $w = $e.store().begin_write().unwrap();
        let out: Result<_, AppViewError> = $body;
        if out.is_ok() {
            $w.commit().unwrap();
        }
        out
    }};
}

struct Views<S: Store> {
    engine: Engine<S>,
    site: SiteId,
    now: Timestamp,
}

impl<S: Store> Views<S> {
    fn new(store: S) -> Self {
        Self {
            engine: Engine::new(store, crate::oauth::keyring(), Policy::default()),
            site: SiteId::parse("demo").unwrap(),
            now: Timestamp::from_secs(1_800_000_000),
        }
    }

    fn create(&self, subject: &str, v: View) -> StoredView {
        let stored = StoredView::new(
            self.site.clone(),
            subject.into(),
            v,
            r#"{"host":"data"}"#.into(),
            self.now,
        );
        write!(self, |e, w| e.create_app_view(&mut w, &stored, 16)).unwrap();
        self.get(subject, stored.view.id().as_str()).unwrap()
    }

    fn get(&self, subject: &str, id: &str) -> Option<StoredView> {
        self.engine
            .app_view(&self.site, subject, &ViewId::new(id).unwrap())
            .unwrap()
    }

    fn save(&self, v: &mut StoredView) -> Result<(), AppViewError> {
        write!(self, |e, w| e.save_app_view(&mut w, v))
    }

    fn take(&self, subject: &str) -> Vec<portcullis::apps::Delivered> {
        write!(self, |e, w| e
            .take_deliveries(&mut w, &self.site, subject, &lineage(subject))
            .map_err(AppViewError::Store))
        .unwrap()
    }
}

fn a_view_and_its_waiting_approval_read_back_as_written<S: Store>(store: &S) {
    let views = Views::new(store);
    let mut v = view(ANN, "v1");
    let ticket = v
        .admit(
            Operation::CallTool {
                name: "increment".into(),
                arguments: serde_json::from_str(r#"{"by":2}"#).unwrap(),
            },
            &authority(ANN),
            &Gateway::default(),
            |_| {
                Some(OpRule {
                    effect: Effect::Write,
                    scope: None,
                })
            },
        )
        .unwrap();
    let OpStep::Approve(card) = ticket.step else {
        panic!("a write waits for approval")
    };
    v.offer_context(
        ContextValue::new(
            Some("3 items".into()),
            Some(serde_json::from_str(r#"{"items":[1,2,{"n":3.5}]}"#).unwrap()),
        )
        .unwrap(),
    )
    .unwrap();
    v.propose_message("hello".into()).unwrap();
    let stored = views.create(ANN, v.clone());
    assert_eq!(stored.view, v, "the View reads back exactly");
    assert_eq!(stored.host, r#"{"host":"data"}"#);
    assert_eq!(stored.view.pending_approval(ticket.id), Some(&card));
    // A View of that id is never stored twice.
    let again = StoredView::new(views.site.clone(), ANN.into(), v, String::new(), views.now);
    assert_eq!(
        write!(views, |e, w| e.create_app_view(&mut w, &again, 16)),
        Err(AppViewError::Exists)
    );
    // Approving after a "reload" (a fresh read) works on the stored state.
    let mut fresh = views.get(ANN, "v1").unwrap();
    fresh.view.approve(ticket.id, &authority(ANN)).unwrap();
    views.save(&mut fresh).unwrap();
    let mut read = views.get(ANN, "v1").unwrap();
    assert!(read.view.pending_approval(ticket.id).is_none());
    assert!(
        read.view.approve(ticket.id, &authority(ANN)).is_err(),
        "approved once"
    );
    // Another user's id finds nothing.
    assert!(views.get(BOB, "v1").is_none());
    assert!(views.engine.app_views(&views.site, BOB).unwrap().is_empty());
    assert_eq!(views.engine.app_views(&views.site, ANN).unwrap().len(), 1);
}

fn a_stale_write_is_refused_and_changes_nothing<S: Store>(store: &S) {
    let views = Views::new(store);
    let stored = views.create(ANN, view(ANN, "v1"));
    let (mut first, mut second) = (stored.clone(), stored);
    first
        .view
        .offer_context(ContextValue::text("first"))
        .unwrap();
    views.save(&mut first).unwrap();
    second.view.close().proposals.clear();
    assert_eq!(views.save(&mut second), Err(AppViewError::Stale));
    let read = views.get(ANN, "v1").unwrap();
    assert!(!read.view.is_closed(), "the stale write left nothing");
    assert_eq!(read.view.context().unwrap().1.as_text(), Some("first"));
    // The bound on Views per user refuses the next one.
    views.create(ANN, view(ANN, "v2"));
    let third = StoredView::new(
        views.site.clone(),
        ANN.into(),
        view(ANN, "v3"),
        String::new(),
        views.now,
    );
    assert_eq!(
        write!(views, |e, w| e.create_app_view(&mut w, &third, 2)),
        Err(AppViewError::TooMany)
    );
    // Deleted: a save finds nothing.
    write!(views, |e, w| e
        .delete_app_view(&mut w, &views.site, ANN, &ViewId::new("v2").unwrap())
        .map_err(AppViewError::Store))
    .unwrap();
    let mut gone = views.get(ANN, "v1").unwrap();
    gone.view = view(ANN, "v2");
    assert_eq!(views.save(&mut gone), Err(AppViewError::NotFound));
}

fn selected_context_and_confirmed_messages_reach_the_agent_once<S: Store>(store: &S) {
    let views = Views::new(store);
    let mut v = view(ANN, "v1");
    v.offer_context(ContextValue::text("3 items")).unwrap();
    let picked = v.select_context().unwrap();
    let confirmed = v.propose_message("buy it".into()).unwrap();
    let declined = v.propose_message("never".into()).unwrap();
    views.create(ANN, v);
    views.create(BOB, view(BOB, "v9"));
    // The App offers a newer version after the user's selection of v1: the
    // send fails visibly and queues nothing.
    let mut s = views.get(ANN, "v1").unwrap();
    s.view.offer_context(ContextValue::text("4 items")).unwrap();
    views.save(&mut s).unwrap();
    let send = |sel: &[portcullis::apps::Selection], who: &str| {
        write!(views, |e, w| e.send_context(&mut w, &views.site, who, sel))
    };
    assert_eq!(
        send(std::slice::from_ref(&picked), ANN),
        Err(AppViewError::Context(ContextError::Replaced {
            view: ViewId::new("v1").unwrap()
        }))
    );
    assert!(views.take(ANN).is_empty(), "nothing was queued");
    // Another user's selection of ann's View finds nothing.
    let picked = views.get(ANN, "v1").unwrap().view.select_context().unwrap();
    assert!(matches!(
        send(std::slice::from_ref(&picked), BOB),
        Err(AppViewError::Context(ContextError::Missing { .. }))
    ));
    // The selection the user made now: exactly that version arrives.
    assert_eq!(send(std::slice::from_ref(&picked), ANN), Ok(1));
    let mut s = views.get(ANN, "v1").unwrap();
    s.send_message(confirmed).unwrap();
    assert!(matches!(
        s.send_message(confirmed),
        Err(AppViewError::Proposal(_))
    ));
    s.view.decline_proposal(declined).unwrap();
    views.save(&mut s).unwrap();
    // Bob's agent gets nothing of ann's.
    assert!(views.take(BOB).is_empty());
    let got = views.take(ANN);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0].source.as_str(), "counter");
    assert_eq!(got[0].view.as_str(), "v1");
    assert!(matches!(
        &got[0].item,
        Delivery::Context { version, value } if *version == picked.version && value.as_text() == Some("4 items")
    ));
    assert!(matches!(&got[1].item, Delivery::Message { text, .. } if text == "buy it"));
    assert_eq!(got[0].to_json()["trust"], "external-data");
    assert!(got[1].to_text().contains("source \"counter\""));
    assert!(views.take(ANN).is_empty(), "each item is taken once");
}

on_every_store!(
    a_view_and_its_waiting_approval_read_back_as_written,
    a_stale_write_is_refused_and_changes_nothing,
    selected_context_and_confirmed_messages_reach_the_agent_once,
);
