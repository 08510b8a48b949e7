// convo web view: fork, promote, keyboard navigation (live updates and
// the JSON viewer's buttons: viewer.js).
// No framework, no inline script (the page's CSP forbids it), and every
// string from the store reaches the DOM through textContent only.
"use strict";

(function () {
  const root = document.getElementById("session");
  const sid = root ? root.dataset.session : null;

  async function post(url, body) {
    const res = await fetch(url, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      credentials: "same-origin",
      body: JSON.stringify(body),
    });
    const text = await res.text();
    let doc = null;
    try { doc = JSON.parse(text); } catch (_) { /* not JSON */ }
    if (!res.ok) {
      const msg = doc && doc.error ? doc.error.message : text;
      throw new Error(msg);
    }
    return doc;
  }

  function sessionUrl(branch) {
    return "/sessions/" + encodeURIComponent(sid) +
      (branch && branch !== "main" ? "?branch=" + encodeURIComponent(branch) : "");
  }

  async function forkAt(hash) {
    if (!sid) return;
    const name = window.prompt("Fork a new timeline from node " + hash.slice(0, 12) + ".\nName of the new timeline:", "fork-" + hash.slice(0, 6));
    if (!name) return;
    try {
      await post("/api/v1/sessions/" + encodeURIComponent(sid) + "/fork", { from: hash, branch: name });
      window.location.href = sessionUrl(name);
    } catch (e) {
      window.alert("Fork failed: " + e.message);
    }
  }

  async function promote(branch) {
    if (!window.confirm("Promote '" + branch + "' to main?\nThe current main will be sealed as broken-YYYY-MM-DD (kept, read-only).")) return;
    try {
      await post("/api/v1/sessions/" + encodeURIComponent(sid) + "/promote", { branch: branch });
      window.location.href = sessionUrl("main");
    } catch (e) {
      window.alert("Promote failed: " + e.message);
    }
  }

  document.addEventListener("click", function (ev) {
    const t = ev.target;
    if (!(t instanceof Element)) return;
    const fork = t.closest("button.fork");
    if (fork) { forkAt(fork.dataset.hash); return; }
    const pr = t.closest("button#promote");
    if (pr) { promote(pr.dataset.branch); return; }
    const row = t.closest("tr.row");
    if (row && !t.closest("a")) { window.location.href = row.dataset.href; }
  });

  // Live updates: assets/viewer.js.

  // ----- theme and help -------------------------------------------------------
  // The theme follows the system (prefers-color-scheme) until the toggle
  // picks one, kept in localStorage (assets/theme.js applies it early).
  function toggleTheme() {
    const root = document.documentElement;
    const dark = root.dataset.theme ? root.dataset.theme === "dark"
      : window.matchMedia("(prefers-color-scheme: dark)").matches;
    root.dataset.theme = dark ? "light" : "dark";
    try { localStorage.setItem("convo-theme", root.dataset.theme); } catch (e) { /* no storage */ }
  }
  function help() {
    const d = document.getElementById("help");
    if (d && !d.open) d.showModal();
  }
  const themeButton = document.getElementById("theme");
  if (themeButton) themeButton.addEventListener("click", toggleTheme);
  const helpButton = document.getElementById("help-open");
  if (helpButton) helpButton.addEventListener("click", help);

  // ----- keyboard -----------------------------------------------------------
  function nodes() { return Array.from(document.querySelectorAll("article.node")); }
  function focused() { return document.activeElement && document.activeElement.closest ? document.activeElement.closest("article.node") : null; }
  function move(d) {
    const all = nodes();
    if (!all.length) return;
    const cur = focused();
    let i = cur ? all.indexOf(cur) + d : (d > 0 ? 0 : all.length - 1);
    i = Math.max(0, Math.min(all.length - 1, i));
    all[i].focus();
    all[i].scrollIntoView({ block: "nearest" });
  }
  document.addEventListener("keydown", function (ev) {
    const tag = ev.target && ev.target.tagName;
    if (tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    const cur = focused();
    switch (ev.key) {
      case "j": move(1); break;
      case "k": move(-1); break;
      case "g": { const a = nodes(); if (a.length) { a[0].focus(); } break; }
      case "G": { const a = nodes(); if (a.length) { a[a.length - 1].focus(); a[a.length - 1].scrollIntoView(); } break; }
      case "o": case "Enter": if (cur) { const l = cur.querySelector("a.hash"); if (l) window.location.href = l.href; } break;
      case "f": if (cur) forkAt(cur.dataset.hash); break;
      case "/": { const q = document.getElementById("q"); if (q) { ev.preventDefault(); q.focus(); } break; }
      case "?": help(); break;
      case "t": toggleTheme(); break;
      default: return;
    }
  });
})();
