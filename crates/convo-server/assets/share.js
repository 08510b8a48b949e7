// convo share: checks this file's nodes and draws them (crates/convo-server/src/web/share.rs).
// Every node's hash encoding (docs/HASHING.md, node_v1) is parsed field by
// field, its SHA-256 recomputed with WebCrypto and compared with the hash the
// file claims; every parent link, payload (digest and length) and timeline
// head is checked; then the timelines are drawn from the parsed fields only.
// Nothing here writes HTML from strings: text goes in through textContent.
"use strict";
(function () {
  var KINDS = ["", "invoke", "request", "response", "complete", "fork", "promote"];
  var body = document.body;
  var badge = document.getElementById("badge");
  var problemsBox = document.getElementById("problems");
  var turnsBox = document.getElementById("turns");

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function hex(b) {
    var s = "";
    for (var i = 0; i < b.length; i++) s += (b[i] < 16 ? "0" : "") + b[i].toString(16);
    return s;
  }
  function unb64(s) {
    var bin = atob(s);
    var out = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }
  var utf8 = new TextDecoder("utf-8", { fatal: true });
  function text(b) { return utf8.decode(b); }
  function sha(b) {
    return crypto.subtle.digest("SHA-256", b).then(function (d) { return hex(new Uint8Array(d)); });
  }

  // node_v1, as docs/HASHING.md lays it out; throws on anything else.
  function parseNode(b) {
    var i = 0;
    var dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
    function need(n) { if (i + n > b.length) throw new Error("encoding ends early at byte " + i); }
    function take(n) { need(n); var s = b.subarray(i, i + n); i += n; return s; }
    function u8() { need(1); return b[i++]; }
    function opt() {
      var t = u8();
      if (t > 1) throw new Error("option tag " + t + " at byte " + (i - 1));
      return t === 1;
    }
    function u64() { need(8); var v = dv.getBigUint64(i, true); i += 8; return v; }
    function lp() {
      var n = u64();
      if (n > BigInt(b.length)) throw new Error("length " + n + " past the end");
      return take(Number(n));
    }
    var tag = "convo.node.v1";
    var t = take(tag.length);
    for (var k = 0; k < tag.length; k++) if (t[k] !== tag.charCodeAt(k)) throw new Error("not a convo.node.v1 encoding");
    var n = {};
    n.parent = opt() ? hex(take(32)) : null;
    n.code = u8();
    if (n.code < 1 || n.code > 6) throw new Error("kind " + n.code);
    n.kind = KINDS[n.code];
    n.session = hex(take(16));
    n.submission = opt() ? hex(take(32)) : null;
    if (opt()) { need(4); n.sequence = dv.getUint32(i, true); i += 4; } else n.sequence = null;
    n.from = text(lp());
    n.to = text(lp());
    n.payload = hex(take(32));
    n.payloadLen = u64();
    n.diagnostics = text(lp());
    n.state = opt() ? hex(take(32)) : null;
    need(8); n.createdAt = dv.getBigInt64(i, true); i += 8;
    n.event = null;
    if (opt()) {
      n.event = { branch: text(lp()), sealedAs: null };
      if (opt()) n.event.sealedAs = text(lp());
      n.event.nonce = hex(take(16));
    }
    if (i !== b.length) throw new Error((b.length - i) + " bytes after the encoding");
    return n;
  }

  function uuidHex(sid) { return String(sid).replace(/^ses-/, "").replace(/-/g, "").toLowerCase(); }

  async function verify(data) {
    var problems = [];
    var byHash = new Map();
    var records = data.nodes.map(function (r, at) {
      var rec = { claimed: String(r[0]), at: at, carried: r[2], node: null, bytes: null, problems: [] };
      try { rec.bytes = unb64(String(r[1])); } catch (e) { rec.problems.push("its encoding is not base64"); }
      if (rec.bytes) {
        try { rec.node = parseNode(rec.bytes); } catch (e) { rec.problems.push("its encoding does not parse: " + e.message); }
      }
      return rec;
    });
    var payloadBytes = [];
    var payloadErr = [];
    data.payloads.forEach(function (p, k) {
      try { payloadBytes[k] = unb64(String(p)); } catch (e) { payloadBytes[k] = null; payloadErr[k] = true; }
    });
    var hashes = await Promise.all(records.map(function (r) { return r.bytes ? sha(r.bytes) : null; }));
    var pdig = await Promise.all(payloadBytes.map(function (b) { return b ? sha(b) : null; }));
    records.forEach(function (r, k) {
      r.computed = hashes[k];
      if (r.computed && r.computed !== r.claimed) r.problems.push("its bytes hash to " + r.computed + ", not to the hash it claims");
      if (r.problems.length === 0) byHash.set(r.claimed, r);
    });
    var sid = uuidHex(data.session);
    records.forEach(function (r) {
      var n = r.node;
      if (!n) return;
      if (n.session !== sid) r.problems.push("it belongs to another session");
      if (n.parent !== null && !byHash.has(n.parent)) r.problems.push("its parent " + n.parent + " is not a verified node of this file");
      var c = r.carried;
      if (typeof c === "number") {
        if (c < 0 || c >= payloadBytes.length || payloadErr[c]) r.problems.push("its payload is missing from the file");
        else if (pdig[c] !== n.payload || BigInt(payloadBytes[c].length) !== n.payloadLen) {
          r.problems.push("its payload bytes do not match the SHA-256 and length it commits to");
        } else r.payload = payloadBytes[c];
      } else if (c === null || c === undefined) {
        if (data.content) r.problems.push("its payload is missing from the file");
      } else if (typeof c !== "object" || (typeof c.t !== "string" && typeof c.r !== "string")) {
        r.problems.push("its payload entry is malformed");
      }
      r.problems.forEach(function (p) { problems.push({ hash: r.claimed, why: p }); });
    });
    records.forEach(function (r) {
      if (!r.node && r.problems.length) r.problems.forEach(function (p) { problems.push({ hash: r.claimed, why: p }); });
    });
    var all = new Map();
    records.forEach(function (r) { all.set(r.claimed, r); });
    data.branches.forEach(function (b) {
      if (b.head && !byHash.has(b.head) && (data.branch === null || data.branch === b.name)) {
        problems.push({ hash: b.head, why: "the head of timeline " + b.name + " is not a verified node of this file" });
      }
    });
    return { records: records, all: all, problems: problems };
  }

  // ----- drawing what was verified -------------------------------------------

  function diagChips(n) {
    var out = [];
    var d;
    try { d = JSON.parse(n.diagnostics); } catch (e) { return out; }
    if (!d || typeof d !== "object") return out;
    if (d.model) out.push(["model", String(d.model)]);
    var u = d.usage || d.tokens;
    if (u && typeof u === "object") {
      var pick = function (ks) { for (var i = 0; i < ks.length; i++) if (u[ks[i]] !== undefined) return u[ks[i]]; };
      var ti = pick(["prompt_tokens", "input_tokens", "input"]);
      var to = pick(["completion_tokens", "output_tokens", "output"]);
      if (ti !== undefined) out.push(["tokens in", String(ti)]);
      if (to !== undefined) out.push(["tokens out", String(to)]);
    }
    ["latency_ms", "duration_ms", "ttft_ms"].forEach(function (k) { if (d[k] !== undefined) out.push([k.replace(/_/g, " "), String(d[k])]); });
    if (d.status !== undefined) out.push(["status", String(d.status), Number(d.status) >= 400]);
    if (d.partial || d.cut || d.stream_cut) out.push(["stream", "cut", true]);
    if (d.error) out.push(["error", typeof d.error === "string" ? d.error : JSON.stringify(d.error), true]);
    return out;
  }

  function contentText(c) {
    if (c === null || c === undefined) return "";
    if (typeof c === "string") return c;
    if (!Array.isArray(c)) return JSON.stringify(c, null, 2);
    return c.map(function (b) {
      if (typeof b === "string") return b;
      if (!b || typeof b !== "object") return String(b);
      if (typeof b.text === "string") return b.text;
      if (b.type === "tool_use" || b.type === "function_call") return "→ " + (b.name || "tool") + " " + JSON.stringify(b.input || b.arguments || {});
      if (b.type === "tool_result" || b.type === "function_call_output") return "← " + contentText(b.content || b.output);
      if (b.type === "thinking") return "(thinking) " + (b.thinking || "");
      if (b.type === "image" || b.type === "image_url" || b.inlineData) return "[image]";
      if (b.functionCall) return "→ " + b.functionCall.name + " " + JSON.stringify(b.functionCall.args || {});
      if (b.functionResponse) return "← " + JSON.stringify(b.functionResponse.response || {});
      return JSON.stringify(b);
    }).join("\n");
  }

  function messages(kind, v) {
    if (!v || typeof v !== "object" || Array.isArray(v)) return null;
    var out = [];
    if (kind === "request") {
      if (v.system) out.push(["system", contentText(v.system)]);
      if (v.instructions) out.push(["system", contentText(v.instructions)]);
      var list = v.messages || v.contents || (Array.isArray(v.input) ? v.input : null);
      if (!list && typeof v.input === "string") list = [{ role: "user", content: v.input }];
      if (!Array.isArray(list)) return null;
      list.forEach(function (m) {
        if (!m || typeof m !== "object") return;
        out.push([m.role || m.type || "message", contentText(m.content !== undefined ? m.content : (m.parts || m.output || m))]);
        if (Array.isArray(m.tool_calls)) m.tool_calls.forEach(function (t) {
          var f = t.function || {};
          out.push(["tool call", (f.name || "") + " " + (f.arguments || "")]);
        });
      });
      return out;
    }
    if (Array.isArray(v.choices)) {
      v.choices.forEach(function (c) {
        var m = c.message || c.delta || {};
        out.push([m.role || "assistant", contentText(m.content) + (c.text || "")]);
        if (Array.isArray(m.tool_calls)) m.tool_calls.forEach(function (t) {
          var f = t.function || {};
          out.push(["tool call", (f.name || "") + " " + (f.arguments || "")]);
        });
      });
      return out;
    }
    if (Array.isArray(v.content) && v.role) return [[v.role, contentText(v.content)]];
    if (Array.isArray(v.output)) return v.output.map(function (o) { return [o.role || o.type || "output", contentText(o.content || o.arguments || o)]; });
    if (Array.isArray(v.candidates)) return v.candidates.map(function (c) { return ["model", contentText((c.content || {}).parts)]; });
    return null;
  }

  function payloadView(r) {
    var n = r.node;
    var c = r.carried;
    if (c && typeof c === "object" && typeof c.t === "string") {
      return el("p", "notice", "Redacted in the store: " + c.t + " (the hashes still commit to the erased bytes).");
    }
    if (c && typeof c === "object" && typeof c.r === "string") {
      var w = el("div", "withheld");
      w.appendChild(el("p", "notice", "Credentials replaced (" + (c.rules || []).join(", ") + "): this text is not the recorded bytes and no hash covers it."));
      w.appendChild(el("pre", "", c.r));
      return w;
    }
    if (!r.payload) {
      if (n.payloadLen === 0n) return null;
      return el("p", "absent", "payload " + n.payloadLen + " bytes · SHA-256 " + n.payload + " (not in this file)");
    }
    var t;
    try { t = text(r.payload); } catch (e) {
      return el("p", "binary", "<" + r.payload.length + " bytes of binary>");
    }
    var v;
    try { v = JSON.parse(t); } catch (e) { v = undefined; }
    if (v !== undefined && (n.kind === "request" || n.kind === "response")) {
      var ms = messages(n.kind, v);
      if (ms && ms.length) {
        var box = el("div", "convo");
        ms.forEach(function (m) {
          var d = el("div", "msg r-" + String(m[0]).toLowerCase().replace(/[^a-z]/g, ""));
          d.appendChild(el("div", "role", m[0]));
          d.appendChild(el("div", "mtext", m[1]));
          box.appendChild(d);
        });
        var raw = el("details", "raw");
        raw.appendChild(el("summary", "", "raw " + r.payload.length + " bytes"));
        raw.appendChild(el("pre", "", t));
        box.appendChild(raw);
        return box;
      }
    }
    if (v !== undefined && typeof v === "object" && v !== null && !/e[+-]?\d{3}/i.test(t)) return el("pre", "", JSON.stringify(v, null, 2));
    return el("pre", "", t);
  }

  function nodeView(r, bad) {
    var n = r.node;
    var a = el("article", "node " + n.kind + (bad ? " bad" : ""));
    a.id = "n-" + r.claimed;
    a.tabIndex = 0;
    a.dataset.hash = r.claimed;
    var m = el("div", "meta");
    m.appendChild(el("span", "kind k-" + n.kind, n.kind));
    var ends = el("span", "ends");
    ends.appendChild(el("bdi", "", n.from));
    ends.appendChild(document.createTextNode(" → "));
    ends.appendChild(el("bdi", "", n.to));
    m.appendChild(ends);
    if (n.sequence !== null) m.appendChild(el("span", "seqno", "#" + n.sequence));
    diagChips(n).forEach(function (c) {
      var s = el("span", c[2] ? "diag status bad" : "diag", c[0] + ": ");
      s.appendChild(el("bdi", "", c[1]));
      m.appendChild(s);
    });
    if (n.event) {
      var ev = el("span", "event", (n.kind === "promote" ? "promoted " : "branch "));
      ev.appendChild(el("bdi", "", n.event.branch));
      m.appendChild(ev);
      if (n.event.sealedAs !== null) {
        var se = el("span", "event", "sealed ");
        se.appendChild(el("bdi", "", n.event.sealedAs));
        m.appendChild(se);
      }
    }
    var when = new Date(Number(n.createdAt));
    m.appendChild(el("time", "", isNaN(when.getTime()) ? String(n.createdAt) : when.toISOString()));
    var h = el("span", "hash", r.claimed.slice(0, 12));
    h.title = r.claimed;
    m.appendChild(h);
    a.appendChild(m);
    if (bad) a.appendChild(el("p", "failed", "Fails: " + r.problems.join("; ")));
    var p = payloadView(r);
    if (p) a.appendChild(p);
    return a;
  }

  function draw(data, v, branch) {
    turnsBox.textContent = "";
    var nav = document.getElementById("timelines");
    nav.textContent = "Timeline: ";
    data.branches.forEach(function (b) {
      if (!b.head) return;
      var x = el(b.name === branch ? "strong" : "button", b.name === branch ? "" : "tl");
      x.appendChild(el("bdi", "", b.name));
      if (b.sealed) x.appendChild(document.createTextNode(" (sealed)"));
      if (b.name !== branch) {
        x.type = "button";
        x.addEventListener("click", function () { draw(data, v, b.name); });
      }
      nav.appendChild(x);
      nav.appendChild(document.createTextNode(" "));
    });
    var head = null;
    data.branches.forEach(function (b) { if (b.name === branch) head = b.head; });
    var chain = [];
    var seen = new Set();
    for (var h = head; h && v.all.has(h) && !seen.has(h);) {
      seen.add(h);
      var r = v.all.get(h);
      chain.push(r);
      h = r.node ? r.node.parent : null;
    }
    chain.reverse();
    var turn = 0;
    var lastHeaded = -1;
    var frag = document.createDocumentFragment();
    chain.forEach(function (r) {
      if (!r.node) return;
      if (r.node.kind === "invoke") turn++;
      if (turn !== lastHeaded) {
        var t = el("h2", "turn", turn === 0 ? "Start" : "Turn " + turn);
        t.id = "turn-" + turn;
        frag.appendChild(t);
        lastHeaded = turn;
      }
      frag.appendChild(nodeView(r, r.problems.length > 0));
    });
    turnsBox.appendChild(frag);
    document.getElementById("count").textContent = chain.length + " nodes · " + turn + " turns on this timeline · " + v.records.length + " nodes in the file";
  }

  function report(v, data) {
    problemsBox.textContent = "";
    if (v.problems.length === 0) {
      badge.className = "badge-v ok";
      badge.textContent = "✓ Verified: " + v.records.length + " node hashes and parent links recomputed (SHA-256)" + (data.content ? ", " + data.payloads.length + " payloads checked" : "");
      body.setAttribute("data-verified", "true");
      return;
    }
    badge.className = "badge-v bad";
    badge.textContent = "✗ Not verified: " + v.problems.length + " problem" + (v.problems.length === 1 ? "" : "s");
    var box = el("section", "problems");
    box.appendChild(el("h2", "", "This file was changed after convo wrote it"));
    var ul = el("ul");
    v.problems.forEach(function (p) {
      var li = el("li");
      var code = el("code", "bad-node", p.hash);
      li.appendChild(el("span", "", "Node "));
      li.appendChild(code);
      li.appendChild(el("span", "", ": " + p.why));
      ul.appendChild(li);
    });
    box.appendChild(ul);
    problemsBox.appendChild(box);
    body.setAttribute("data-verified", "false");
  }

  function theme() {
    var b = document.getElementById("theme");
    var saved = null;
    try { saved = localStorage.getItem("convo-theme"); } catch (e) { saved = null; }
    if (saved) document.documentElement.dataset.theme = saved;
    if (!b) return;
    b.addEventListener("click", function () {
      var dark = document.documentElement.dataset.theme
        ? document.documentElement.dataset.theme === "dark"
        : matchMedia("(prefers-color-scheme: dark)").matches;
      var next = dark ? "light" : "dark";
      document.documentElement.dataset.theme = next;
      try { localStorage.setItem("convo-theme", next); } catch (e) { /* a file:// page may have no storage */ }
    });
  }

  async function main() {
    theme();
    var t0 = performance.now();
    var data;
    try {
      data = JSON.parse(document.getElementById("convo-data").textContent);
    } catch (e) {
      badge.className = "badge-v bad";
      badge.textContent = "✗ Not verified: the data does not parse (" + e.message + ")";
      body.setAttribute("data-verified", "false");
      return;
    }
    if (!window.crypto || !crypto.subtle) {
      badge.className = "badge-v bad";
      badge.textContent = "✗ Cannot verify: this browser offers no WebCrypto here (open the file from disk or over https)";
      body.setAttribute("data-verified", "false");
      return;
    }
    var v = await verify(data);
    report(v, data);
    var first = data.branch || "main";
    var has = data.branches.some(function (b) { return b.name === first && b.head; });
    if (!has) data.branches.forEach(function (b) { if (!has && b.head) { first = b.name; has = true; } });
    draw(data, v, first);
    body.setAttribute("data-verify-ms", String(Math.round(performance.now() - t0)));
  }
  main().catch(function (e) {
    badge.className = "badge-v bad";
    badge.textContent = "✗ Not verified: " + e.message;
    body.setAttribute("data-verified", "false");
  });
})();
