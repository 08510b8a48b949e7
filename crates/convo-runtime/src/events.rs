//! `GET /api/v1/events`: every new node, in append order, as Server-Sent
//! Events, resumable with `Last-Event-ID`.
//!
//! One hub thread follows the store's append cursor ([`Follower`]) with its
//! own connection and broadcasts each node once, already serialized, to
//! every subscriber. It sees nodes appended by this server, by other
//! processes, and on PostgreSQL by other machines (LISTEN/NOTIFY wakes it).
//!
//! A subscriber never depends on the broadcast alone: it subscribes first,
//! then reads from the store everything after its cursor, then takes
//! broadcast events whose number is the next one; any gap (a lagging
//! receiver, an event it has not seen yet) is filled from the store. The
//! event id is the follow cursor, so the client's `Last-Event-ID` on
//! reconnect resumes with no gap and no duplicate.

use crate::pool::StorePool;
use crate::reconnect::{Reconnecting, is_lost};
use convo_api::NodeView;
use convo_store::{Access, Follower, TimelineNode};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::broadcast;

/// One node, serialized once for every subscriber.
#[derive(Debug)]
pub struct Event {
    /// Its follow number (the SSE id).
    pub seq: u64,
    /// Its session id.
    pub session: String,
    /// The [`NodeView`] JSON, payload included.
    pub json: String,
}

impl Event {
    /// The event for a stored node.
    pub fn from_node(n: &TimelineNode) -> Self {
        let view: NodeView = crate::wire::node(&n.stored, Some(&n.payload));
        Event {
            seq: n.stored.seq,
            session: view.session.clone(),
            json: serde_json::to_string(&view).unwrap_or_else(|_| "{}".into()),
        }
    }
}

/// The broadcaster of new nodes.
#[derive(Clone, Debug)]
pub struct Hub {
    tx: broadcast::Sender<Arc<Event>>,
    poke: std::sync::mpsc::SyncSender<()>,
    /// The newest follow number the hub has broadcast.
    seen: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    /// Becomes `true` when the hub stops: every subscriber's stream ends,
    /// so a graceful shutdown is not held open by SSE clients.
    closing: tokio::sync::watch::Sender<bool>,
}

impl Hub {
    /// Starts the hub thread on its own connection to `url`, from the
    /// store's current end. Call it from a plain thread (it opens the
    /// connection now, so a bad URL fails at once).
    pub fn start(url: &str) -> convo_store::Result<Hub> {
        let mut conn = Reconnecting::open(url, Access::Read)?;
        let follower = conn.run(Follower::at_end)?;
        let (tx, _) = broadcast::channel(4096);
        let (poke, poked) = std::sync::mpsc::sync_channel(1);
        let hub = Hub {
            tx,
            poke,
            seen: Arc::new(AtomicU64::new(follower.cursor())),
            stop: Arc::new(AtomicBool::new(false)),
            closing: tokio::sync::watch::Sender::new(false),
        };
        let h = hub.clone();
        std::thread::Builder::new()
            .name("convo-events".into())
            .spawn(move || h.run(conn, follower, poked))
            .map_err(|e| convo_store::StoreError::backend(format!("cannot start a thread: {e}")))?;
        Ok(hub)
    }

    /// Wakes the hub now (after an append through this server), so local
    /// subscribers do not wait for the next poll.
    pub fn poke(&self) {
        let _ = self.poke.try_send(());
    }

    /// Stops the hub thread and ends every subscriber's stream.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.closing.send_replace(true);
        self.poke();
    }

    /// The newest follow number broadcast so far.
    pub fn seen(&self) -> u64 {
        self.seen.load(Ordering::SeqCst)
    }

    /// A receiver of every event broadcast from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.tx.subscribe()
    }

    fn run(
        self,
        mut conn: Reconnecting,
        mut follower: Follower,
        poked: std::sync::mpsc::Receiver<()>,
    ) {
        let sqlite = conn.run(|s| Ok(s.kind() == "sqlite")).unwrap_or(false);
        let stopped = || self.stop.load(Ordering::SeqCst);
        while !stopped() {
            // SQLite has no notifications: our own appends poke us, other
            // processes' are found by polling every 50 ms. PostgreSQL's
            // LISTEN wakes `next` for every writer anywhere.
            let wait = if sqlite {
                Duration::ZERO
            } else {
                Duration::from_millis(500)
            };
            // A lost database (a PostgreSQL restart) is waited out with a
            // new connection, resuming from the same cursor: no node is
            // skipped or broadcast twice.
            if self.tx.receiver_count() == 0 {
                // Nobody listens: the nodes are counted as seen without
                // their payloads (a payload may be a whole conversation,
                // assembled from its chunks for no one).
                let before = follower.cursor();
                match conn.retry(|s| follower.next_nodes(s, wait), stopped, |_| {}) {
                    Ok(page) if self.tx.receiver_count() > 0 => {
                        // Someone subscribed meanwhile: read them again,
                        // payloads included, for the broadcast.
                        if !page.is_empty() {
                            follower = follower.rewound(before);
                        }
                    }
                    Ok(page) => {
                        if let Some(n) = page.last() {
                            self.seen.store(n.seq, Ordering::SeqCst);
                        } else if sqlite {
                            let _ = poked.recv_timeout(Duration::from_millis(50));
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(500)),
                }
                continue;
            }
            let page = conn.retry(|s| follower.next(s, wait), stopped, |_| {});
            match page {
                Ok(page) => {
                    for n in &page {
                        // Seen first: a subscriber that comes after reads
                        // this node from the store in its catch-up.
                        self.seen.store(n.stored.seq, Ordering::SeqCst);
                        let _ = self.tx.send(Arc::new(Event::from_node(n)));
                    }
                    if page.is_empty() && sqlite {
                        let _ = poked.recv_timeout(Duration::from_millis(50));
                    }
                }
                Err(_) => std::thread::sleep(Duration::from_millis(500)),
            }
        }
    }
}

/// Only nodes of one session, when set.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// A session id.
    pub session: Option<String>,
}

/// What a subscriber's stream yields: an SSE message (id, JSON).
pub type Message = (u64, String);

/// Feeds `out` with every node after `cursor`, in order, with no gap and no
/// duplicate, until the client goes away or the hub stops.
pub async fn pump(
    hub: Hub,
    pool: StorePool,
    mut cursor: u64,
    filter: Filter,
    out: tokio::sync::mpsc::Sender<Message>,
) {
    let mut rx = hub.subscribe();
    let mut closing = hub.closing.subscribe();
    if *closing.borrow_and_update() {
        return;
    }
    // Catch up from the store to at least what the hub has broadcast.
    if catch_up(&hub, &pool, &mut cursor, u64::MAX, &filter, &out)
        .await
        .is_err()
    {
        return;
    }
    loop {
        let next = tokio::select! {
            ev = rx.recv() => ev,
            _ = closing.changed() => return,
        };
        let ev = match next {
            Ok(ev) => ev,
            Err(broadcast::error::RecvError::Lagged(_)) => {
                if catch_up(&hub, &pool, &mut cursor, u64::MAX, &filter, &out)
                    .await
                    .is_err()
                {
                    return;
                }
                continue;
            }
            Err(broadcast::error::RecvError::Closed) => return,
        };
        if ev.seq <= cursor {
            continue;
        }
        if ev.seq > cursor + 1
            && catch_up(&hub, &pool, &mut cursor, ev.seq - 1, &filter, &out)
                .await
                .is_err()
        {
            return;
        }
        if ev.seq != cursor + 1 {
            continue;
        }
        cursor = ev.seq;
        if wanted(&filter, &ev.session) && out.send((ev.seq, ev.json.clone())).await.is_err() {
            return;
        }
    }
}

fn wanted(f: &Filter, session: &str) -> bool {
    f.session.as_deref().is_none_or(|s| s == session)
}

/// Reads nodes after `cursor` up to `upto` from the store and sends them.
async fn catch_up(
    hub: &Hub,
    pool: &StorePool,
    cursor: &mut u64,
    upto: u64,
    filter: &Filter,
    out: &tokio::sync::mpsc::Sender<Message>,
) -> Result<(), ()> {
    let mut delay = Duration::from_millis(100);
    loop {
        let after = *cursor;
        let page = match pool.run(move |s| s.follow_with_payloads(after, 500)).await {
            Ok(page) => page,
            // The database went away: keep the stream open and read again
            // once it is back, from the same cursor.
            Err(e) if is_lost(&e) && !out.is_closed() && !hub.stop.load(Ordering::SeqCst) => {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
                continue;
            }
            Err(_) => return Err(()),
        };
        delay = Duration::from_millis(100);
        if page.is_empty() {
            return Ok(());
        }
        for n in &page {
            if n.stored.seq > upto {
                return Ok(());
            }
            *cursor = n.stored.seq;
            let ev = Event::from_node(n);
            if wanted(filter, &ev.session) {
                out.send((ev.seq, ev.json)).await.map_err(|_| ())?;
            }
        }
    }
}
