// convo web view: the JSON viewer's copy buttons and the session page's
// live updates. No inline script (the CSP forbids it); nodes arriving live
// are fetched as the server renders them (`?fragment=1`), never built from
// payload text here.
"use strict";

(function () {
  // ----- copy buttons -------------------------------------------------------
  function treeText(jv) {
    const body = jv.querySelector("pre.jv-body");
    if (!body) return "";
    const copy = body.cloneNode(true);
    copy.querySelectorAll(".jv-ui").forEach(function (e) { e.remove(); });
    return copy.textContent;
  }

  async function copyText(text) {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch (_) {
      const ta = document.createElement("textarea");
      ta.value = text;
      document.body.append(ta);
      ta.select();
      const ok = document.execCommand("copy");
      ta.remove();
      return ok;
    }
  }

  document.addEventListener("click", async function (ev) {
    const t = ev.target;
    if (!(t instanceof Element)) return;
    const b = t.closest("button.copy");
    if (!b) return;
    const jv = b.closest(".jv");
    if (!jv) return;
    ev.preventDefault();
    const text = treeText(jv);
    jv.dataset.copied = text.length;
    const ok = await copyText(text);
    b.textContent = ok ? "copied" : "copy failed";
    setTimeout(function () { b.textContent = "copy"; }, 1500);
  });

  // ----- live updates -------------------------------------------------------
  const root = document.getElementById("session");
  if (!root || !root.dataset.branch || !window.EventSource) return;
  const sid = root.dataset.session;
  const turns = document.getElementById("turns");
  const live = document.getElementById("live");
  const tail = root.dataset.tail === "1";
  let after = root.dataset.after || "";
  let es = null;
  let others = 0;
  let later = 0;
  let chain = Promise.resolve();

  function note(text, href) {
    if (!live) return;
    live.hidden = false;
    live.textContent = text + " ";
    if (href) {
      const a = document.createElement("a");
      a.href = href;
      a.textContent = "show";
      live.append(a);
    }
  }

  function bump(id, by) {
    const e = document.getElementById(id);
    if (e) e.textContent = String((parseInt(e.textContent, 10) || 0) + by);
  }

  function usd(x) {
    if (x === 0) return "$0";
    if (x < 0.0001) return "$" + x.toFixed(6);
    if (x < 0.01) return "$" + x.toFixed(4);
    return "$" + x.toFixed(2);
  }

  function addFigures(art) {
    const d = art.dataset;
    if (d.tin === undefined) return;
    bump("t-calls", 1);
    bump("t-tin", parseInt(d.tin, 10) || 0);
    bump("t-tout", parseInt(d.tout, 10) || 0);
    if (d.failed) bump("t-errors", 1);
    const tot = document.getElementById("totals");
    const cost = document.getElementById("t-cost");
    if (tot && cost) {
      const c = (parseFloat(tot.dataset.cost) || 0) + (parseFloat(d.cost) || 0);
      tot.dataset.cost = String(c);
      cost.textContent = usd(c);
    }
  }

  async function append(hash) {
    const url = "/sessions/" + encodeURIComponent(sid) + "/nodes/" + encodeURIComponent(hash) + "?fragment=1";
    const res = await fetch(url, { credentials: "same-origin" });
    if (!res.ok || !turns) return;
    // The server's own rendering of the node (escaped there); a template
    // never runs anything, and the page's CSP forbids inline script.
    const tpl = document.createElement("template");
    tpl.innerHTML = await res.text();
    const art = tpl.content.querySelector("article.node");
    if (!art) return;
    art.classList.add("fresh");
    const turn = parseInt(art.dataset.turn, 10) || 0;
    if (!tpl.content.querySelector("h2.turn") || document.getElementById("turn-" + turn)) {
      tpl.content.querySelectorAll("h2.turn").forEach(function (h) { h.remove(); });
    } else {
      bump("c-turns", 1);
    }
    bump("c-nodes", 1);
    addFigures(art);
    turns.append(tpl.content);
  }

  // The graph and the list of timelines, redrawn by the server after new
  // nodes (at most one fetch in flight, one more queued behind it).
  const box = document.getElementById("timelines");
  let drawing = false;
  let again = false;
  async function redraw() {
    if (!box) return;
    if (drawing) { again = true; return; }
    drawing = true;
    try {
      do {
        // Coalesce a burst of nodes into one redraw.
        await new Promise(function (r) { setTimeout(r, 300); });
        again = false;
        const url = location.pathname + "?branch=" + encodeURIComponent(root.dataset.branch) + "&fragment=graph";
        const res = await fetch(url, { credentials: "same-origin" });
        if (!res.ok) break;
        const tpl = document.createElement("template");
        tpl.innerHTML = await res.text();
        box.replaceChildren(tpl.content);
        box.dataset.drawn = String((parseInt(box.dataset.drawn, 10) || 0) + 1);
      } while (again);
    } catch (_) {
      // The next node redraws it.
    } finally {
      drawing = false;
    }
  }

  function onNode(ev) {
    let n;
    try { n = JSON.parse(ev.data); } catch (_) { return; }
    if (ev.lastEventId) after = ev.lastEventId;
    // Written as the page was read: already shown.
    if (document.getElementById("n-" + n.hash)) return;
    redraw();
    if (n.parent === root.dataset.head && root.dataset.sealed !== "1") {
      root.dataset.head = n.hash;
      if (tail) {
        chain = chain.then(function () { return append(n.hash); }).catch(function () {});
      } else {
        // Page 1 of many: the end of the timeline is elsewhere.
        later += 1;
        bump("c-nodes", 1);
        note(later + " new node(s) at the end of this timeline —", location.pathname + (root.dataset.branch !== "main" ? "?branch=" + encodeURIComponent(root.dataset.branch) : ""));
      }
    } else {
      others += 1;
      note(others + " new node(s) on other timelines, drawn in the graph above —", location.pathname + location.search);
    }
  }

  function open() {
    if (es) return;
    es = new EventSource("/api/v1/events?session=" + encodeURIComponent(sid) + (after ? "&after=" + encodeURIComponent(after) : ""));
    es.addEventListener("node", onNode);
    root.dataset.live = "open";
  }

  function close() {
    if (es) { es.close(); es = null; }
    root.dataset.live = "closed";
  }

  // A page kept in the back/forward cache holds no stream (six of them
  // would use up the browser's connections to this host); it resumes
  // after the last node it saw when shown again.
  window.addEventListener("pagehide", close);
  window.addEventListener("pageshow", open);
  open();
})();
