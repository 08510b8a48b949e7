//! A PostgreSQL connection lost exactly at `COMMIT`: the store asks the
//! server whether the transaction was kept (`pg_xact_status`) on a new
//! connection, so a kept write is reported written (once) and a lost one
//! `unavailable` (nothing kept, safe to send again), never "unknown".

use convo_core::{BranchName, Kind};
use convo_store::{ErrorKind, Store};
use convo_testutil as testing;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// Where the relay cuts the next transaction's `COMMIT`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Cut {
    /// Before the server receives it (the server aborts the transaction).
    Before,
    /// After the server committed, before its answer reaches the client.
    After,
}

/// The simple-query message `COMMIT` (what the client sends).
const COMMIT_QUERY: &[u8] = b"Q\0\0\0\x0bCOMMIT\0";
/// The server's `CommandComplete` for it.
const COMMIT_DONE: &[u8] = b"C\0\0\0\x0bCOMMIT\0";

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A TCP relay in front of the server that cuts one connection at its
/// next `COMMIT` when armed, and relays everything else as it is.
struct Relay {
    port: u16,
    armed: Arc<Mutex<Option<Cut>>>,
}

impl Relay {
    fn start(server: String) -> Relay {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let armed: Arc<Mutex<Option<Cut>>> = Arc::default();
        let a = armed.clone();
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(client) = c else { return };
                let Ok(upstream) = TcpStream::connect(&server) else {
                    return;
                };
                let cutting: Arc<Mutex<bool>> = Arc::default();
                let (c2, u2) = (client.try_clone().unwrap(), upstream.try_clone().unwrap());
                let (a2, k2) = (a.clone(), cutting.clone());
                std::thread::spawn(move || to_server(client, upstream, &a2, &k2));
                std::thread::spawn(move || to_client(u2, c2, &cutting));
            }
        });
        Relay { port, armed }
    }

    fn arm(&self, cut: Cut) {
        *self.armed.lock().unwrap() = Some(cut);
    }
}

fn close(a: &TcpStream, b: &TcpStream) {
    let _ = a.shutdown(Shutdown::Both);
    let _ = b.shutdown(Shutdown::Both);
}

/// Client to server: at an armed `COMMIT`, either forwards what precedes
/// it and cuts (`Before`), or forwards it and tells the other direction
/// to cut at the server's answer (`After`).
fn to_server(
    mut client: TcpStream,
    mut server: TcpStream,
    armed: &Mutex<Option<Cut>>,
    cutting: &Mutex<bool>,
) {
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = match client.read(&mut buf) {
            Ok(0) | Err(_) => return close(&client, &server),
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        let at = find(chunk, COMMIT_QUERY);
        let cut = match at {
            Some(_) => armed.lock().unwrap().take(),
            None => None,
        };
        match (cut, at) {
            (Some(Cut::Before), Some(i)) => {
                let _ = server.write_all(&chunk[..i]);
                return close(&client, &server);
            }
            (Some(Cut::After), _) => *cutting.lock().unwrap() = true,
            _ => {}
        }
        if server.write_all(chunk).is_err() {
            return close(&client, &server);
        }
    }
}

/// Server to client: once told to cut, forwards what precedes the
/// server's `COMMIT` answer and closes both ends.
fn to_client(mut server: TcpStream, mut client: TcpStream, cutting: &Mutex<bool>) {
    let mut buf = vec![0u8; 1 << 16];
    let mut held = Vec::new();
    loop {
        let n = match server.read(&mut buf) {
            Ok(0) | Err(_) => return close(&client, &server),
            Ok(n) => n,
        };
        if !*cutting.lock().unwrap() {
            if client.write_all(&buf[..n]).is_err() {
                return close(&client, &server);
            }
            continue;
        }
        held.extend_from_slice(&buf[..n]);
        if let Some(i) = find(&held, COMMIT_DONE) {
            let _ = client.write_all(&held[..i]);
            return close(&client, &server);
        }
    }
}

fn appended(url: &str, session: &convo_core::SessionId, payload: &str) -> usize {
    let mut s = Store::open(url).unwrap();
    s.timeline(session, &BranchName::main())
        .unwrap()
        .iter()
        .filter(|n| n.payload == payload.as_bytes())
        .count()
}

#[test]
fn a_connection_lost_at_commit_asks_the_server_whether_the_write_was_kept() {
    let Some(db) = testing::pg_database() else {
        return;
    };
    let (head, name) = db.url.rsplit_once('/').unwrap();
    let (scheme_user, host) = head.rsplit_once('@').unwrap();
    let relay = Relay::start(host.to_owned());
    let url = format!("{scheme_user}@127.0.0.1:{}/{name}", relay.port);
    let mut s = Store::open(&url).unwrap();
    let ses = s.transaction(|l| l.new_session("cut", None, 0)).unwrap();
    let main = BranchName::main();
    s.transaction(|l| l.append(&ses.id, &main, &testing::draft(Kind::Invoke, "first", 1)))
        .unwrap();

    // The server committed; the answer never came: reported written, once.
    relay.arm(Cut::After);
    let kept = testing::draft(Kind::Complete, "kept at the cut", 2);
    let out = s.transaction(|l| l.append(&ses.id, &main, &kept));
    assert!(out.is_ok(), "a kept COMMIT is a success: {out:?}");
    assert_eq!(appended(&db.url, &ses.id, "kept at the cut"), 1);

    // The server never saw the COMMIT: unavailable, nothing kept.
    relay.arm(Cut::Before);
    let lost = testing::draft(Kind::Invoke, "lost at the cut", 3);
    let e = s
        .transaction(|l| l.append(&ses.id, &main, &lost))
        .expect_err("a COMMIT the server never got is not a success");
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert_eq!(appended(&db.url, &ses.id, "lost at the cut"), 0);

    // The same store goes on, on the connection that took the lost one's
    // place: sending the lost write again lands it once.
    s.transaction(|l| l.append(&ses.id, &main, &lost)).unwrap();
    assert_eq!(appended(&db.url, &ses.id, "lost at the cut"), 1);
    assert!(relay.armed.lock().unwrap().is_none(), "both cuts happened");
}
