//! A scripted MCP conversation, line by line as a relay hands it over:
//! recorded as paired nodes, then answered from the recording in another
//! order, a changed request answered with the pointer that changed.
use convo_core::{BranchName, Kind};
use convo_mcp::message::{Dir, Message};
use convo_mcp::record::{Recorder, public_command, resolve};
use convo_mcp::replay::{Answer, MISS_CODE, McpReplay};
use convo_store::{Store, TimelineNode};
use serde_json::{Value, json};

const LINES: &[(Dir, &str)] = &[
    (
        Dir::ToServer,
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"sampling":{}},"clientInfo":{"name":"c","version":"1"}}}"#,
    ),
    (
        Dir::ToClient,
        r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#,
    ),
    (
        Dir::ToClient,
        r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"srv","version":"2"}}}"#,
    ),
    (
        Dir::ToServer,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    ),
    (
        Dir::ToServer,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hi"},"_meta":{"progressToken":2}}}"#,
    ),
    (
        Dir::ToClient,
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":2,"progress":1}}"#,
    ),
    (
        Dir::ToClient,
        r#"{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{"messages":[],"maxTokens":5}}"#,
    ),
    (
        Dir::ToServer,
        r#"{"jsonrpc":"2.0","id":"s1","result":{"role":"assistant","content":{"type":"text","text":"ok"},"model":"m"}}"#,
    ),
    (
        Dir::ToClient,
        r#"{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"Echo: hi"}]}}"#,
    ),
    (
        Dir::ToServer,
        r#"{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"file:///nope"}}"#,
    ),
    (
        Dir::ToClient,
        r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32002,"message":"Resource not found"}}"#,
    ),
];

fn record(dir: &std::path::Path, argv: &[&str]) -> (Store, Vec<TimelineNode>) {
    let url = format!("sqlite://{}", dir.join("convo.db").display());
    let mut store = Store::open(&url).unwrap();
    let target = resolve(&mut store, Some("run"), &BranchName::main(), "x", 1).unwrap();
    let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
    let rec = Recorder::start(store, target, "prog", false, public_command(&argv));
    let noter = rec.noter();
    for (dir, line) in LINES {
        noter.note(*dir, format!("{line}\n").as_bytes());
    }
    let out = rec.finish(Some(0));
    assert_eq!(out.failures, 0, "{:?}", out.last_error);
    let mut store = Store::open(&url).unwrap();
    let s = store.find_session("run").unwrap();
    let nodes = store.timeline(&s.id, &BranchName::main()).unwrap();
    (store, nodes)
}

fn diag(n: &TimelineNode) -> Value {
    n.stored.node.diagnostics.to_value()
}

#[test]
fn every_message_is_a_node_and_responses_answer_their_requests() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, nodes) = record(dir.path(), &["prog", "--token", "hunter2"]);
    let kinds: Vec<Kind> = nodes.iter().map(|n| n.stored.node.kind).collect();
    assert_eq!(
        kinds.len(),
        LINES.len() + 2,
        "invoke, one node per line, complete"
    );
    assert_eq!(kinds[0], Kind::Invoke);
    assert_eq!(kinds[kinds.len() - 1], Kind::Complete);
    // The relayed bytes, exactly, in relayed order.
    for (n, (_, line)) in nodes[1..].iter().zip(LINES) {
        assert_eq!(n.payload, line.as_bytes());
    }
    // Named from initialize, even for what came before its answer.
    assert_eq!(nodes[1].stored.node.to, "mcp:srv");
    assert_eq!(nodes[2].stored.node.from, "mcp:srv");
    // Each response answers its request's sequence, by id and direction.
    let seq_of = |line: &str| {
        nodes
            .iter()
            .find(|n| n.payload == line.as_bytes())
            .and_then(|n| n.stored.node.sequence)
    };
    for (req, resp) in [(0, 2), (4, 8), (6, 7), (9, 10)] {
        let r = nodes
            .iter()
            .find(|n| n.payload == LINES[resp].1.as_bytes())
            .unwrap();
        assert_eq!(r.stored.node.kind, Kind::Response, "{}", LINES[resp].1);
        assert_eq!(r.stored.node.sequence, seq_of(LINES[req].1));
    }
    // The server's sampling request goes the other way.
    let sampling = &nodes[7];
    assert_eq!(
        (
            sampling.stored.node.from.as_str(),
            sampling.stored.node.to.as_str()
        ),
        ("mcp:srv", "proxy")
    );
    let echo_answer = &nodes[9];
    assert_eq!(diag(echo_answer)["mcp"]["tool"], "echo");
    assert!(diag(echo_answer)["latency_ms"].as_f64().is_some());
    assert_eq!(diag(&nodes[11])["error"]["code"], -32002);
    assert_eq!(diag(&nodes[6])["mcp"]["notification"], true);
    // The command line's credential is not stored anywhere.
    assert!(!String::from_utf8_lossy(&nodes[0].payload).contains("hunter2"));
    assert!(!diag(&nodes[1]).to_string().contains("hunter2"));
    assert!(store.verify().unwrap().is_clean());
}

#[test]
fn the_recording_answers_in_any_order_and_names_what_changed() {
    let dir = tempfile::tempdir().unwrap();
    let (_store, nodes) = record(dir.path(), &["prog"]);
    let mut r = McpReplay::from_nodes(&nodes, None, &["other".into()], &[]).unwrap();
    assert_eq!(r.server, "srv");
    assert_eq!(r.len(), 3, "initialize, tools/call, resources/read");
    let ask = |r: &mut McpReplay, line: &str| match r.answer(&Message::read(line.as_bytes())) {
        Answer::Hit(b) => Ok(serde_json::from_slice::<Value>(&b).unwrap()),
        Answer::Miss(b) => Err(serde_json::from_slice::<Value>(&b).unwrap()),
        Answer::Nothing => panic!("no answer to {line}"),
    };
    // Another id and progress token, asked first: the recorded answer, with this id.
    let echo = ask(
        &mut r,
        r#"{"jsonrpc":"2.0","id":"x7","method":"tools/call","params":{"name":"echo","arguments":{"message":"hi"},"_meta":{"progressToken":"x7"}}}"#,
    )
    .unwrap();
    assert_eq!(
        echo,
        json!({"jsonrpc":"2.0","id":"x7","result":{"content":[{"type":"text","text":"Echo: hi"}]}})
    );
    // Its progress, sent again before it, with the received token.
    let notes: Vec<Value> = r
        .notes
        .iter()
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    assert_eq!(
        notes,
        [
            json!({"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"x7","progress":1}})
        ]
    );
    let err = ask(
        &mut r,
        r#"{"jsonrpc":"2.0","id":8,"method":"resources/read","params":{"uri":"file:///nope"}}"#,
    )
    .unwrap();
    assert_eq!(
        err["error"]["code"], -32002,
        "a recorded error is an answer too"
    );
    // The same id as recorded: the recorded bytes.
    assert_eq!(
        r.answer(&Message::read(LINES[0].1.as_bytes())),
        Answer::Hit(format!("{}\n", LINES[2].1).into_bytes())
    );
    assert_eq!(
        r.answer(&Message::read(LINES[3].1.as_bytes())),
        Answer::Nothing
    );
    let miss = ask(
        &mut r,
        r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"echo","arguments":{"message":"bye"}}}"#,
    )
    .unwrap_err();
    assert_eq!(miss["id"], 9);
    assert_eq!(miss["error"]["code"], MISS_CODE);
    assert_eq!(
        miss["error"]["data"]["differences"],
        json!([{"pointer": "/params/arguments/message", "recorded": "hi", "received": "bye"}])
    );
    assert!(
        miss["error"]["message"]
            .as_str()
            .unwrap()
            .contains("/params/arguments/message")
    );
    assert_eq!((r.matched, r.missed), (3, 1));
}
