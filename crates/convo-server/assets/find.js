// convo web view: finding and re-running. Brings the node a page was
// opened at (?node=, ?turn=, a search hit) into view, adds "re-run" to
// model requests and inputs, sends an edited request from the re-run page
// (after a confirmation; same-origin JSON POST, so the server's CSRF
// guard applies) and copies commands. Strings reach the DOM through
// textContent only.
"use strict";

(function () {
  // ----- the node this page was opened at ---------------------------------
  const focus = document.getElementById("focus");
  if (focus && focus.dataset.hash) {
    const el = document.getElementById("n-" + focus.dataset.hash);
    if (el) {
      el.classList.add("focus");
      const centre = function () { el.scrollIntoView({ block: "center" }); };
      centre();
      el.focus({ preventScroll: true });
      // The browser scrolls to the URL's #n-… once the page has loaded:
      // centre it again, clear of the sticky header.
      if (document.readyState !== "complete") window.addEventListener("load", centre, { once: true });
    }
  }

  // ----- "re-run" on requests and inputs ------------------------------------
  const session = document.getElementById("session");
  function addRerun(art) {
    if (!session || !art.dataset || !art.dataset.hash || art.querySelector("a.rerun")) return;
    if (!art.classList.contains("request") && !art.classList.contains("invoke")) return;
    // An MCP message is not a model request: nothing to re-run.
    if (art.querySelector(".call.mcp")) return;
    const meta = art.querySelector(".meta");
    if (!meta) return;
    const a = document.createElement("a");
    a.className = "rerun";
    a.href = "/sessions/" + encodeURIComponent(session.dataset.session) + "/nodes/" +
      encodeURIComponent(art.dataset.hash) + "/rerun";
    a.textContent = "re-run";
    a.title = art.classList.contains("request")
      ? "edit this model request and send it again on a new fork"
      : "run this input again on a new fork (command line)";
    meta.append(a);
  }
  if (session) {
    document.querySelectorAll("article.node").forEach(addRerun);
    const turns = document.getElementById("turns");
    if (turns && window.MutationObserver) {
      new MutationObserver(function (records) {
        records.forEach(function (r) {
          r.addedNodes.forEach(function (n) {
            if (n instanceof Element && n.matches("article.node")) addRerun(n);
          });
        });
      }).observe(turns, { childList: true });
    }
  }

  // ----- the re-run page ----------------------------------------------------
  const rerun = document.getElementById("rerun");
  const send = document.getElementById("rerun-send");
  function showError(msg) {
    const e = document.getElementById("rerun-error");
    if (!e) { window.alert(msg); return; }
    e.hidden = false;
    e.textContent = msg;
  }
  if (rerun && send) {
    send.addEventListener("click", async function () {
      const body = document.getElementById("rerun-body").value;
      const branch = document.getElementById("rerun-branch").value.trim();
      try { JSON.parse(body); } catch (e) { showError("The request is not JSON: " + e.message); return; }
      if (!window.confirm("Send this request to the model again?\nIt is recorded on a new timeline '" +
        branch + "' forked where the original was made.")) return;
      send.disabled = true;
      try {
        const res = await fetch("/sessions/" + encodeURIComponent(rerun.dataset.session) + "/rerun", {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          credentials: "same-origin",
          body: JSON.stringify({ node: rerun.dataset.node, body: body, branch: branch }),
        });
        const text = await res.text();
        let doc = null;
        try { doc = JSON.parse(text); } catch (_) { /* not JSON */ }
        if (!res.ok) throw new Error(doc && doc.error ? doc.error.message : text);
        window.location.href = doc.url;
      } catch (e) {
        send.disabled = false;
        showError("Re-run failed: " + e.message);
      }
    });
  }

  // ----- copy buttons ---------------------------------------------------------
  document.addEventListener("click", function (ev) {
    const t = ev.target;
    if (!(t instanceof Element)) return;
    const b = t.closest("button.copy");
    if (!b) return;
    const src = document.getElementById(b.dataset.copy);
    if (!src) return;
    const text = src.textContent;
    const done = function () { b.textContent = "Copied"; };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () { select(src); });
    } else {
      select(src);
    }
    function select(el) {
      const r = document.createRange();
      r.selectNodeContents(el);
      const s = window.getSelection();
      s.removeAllRanges();
      s.addRange(r);
      try { if (document.execCommand("copy")) done(); } catch (_) { /* selected for the user */ }
    }
  });
})();
