// Countersign console: the pages' behaviour. State changes go to the JSON API with the
// session's CSRF token; the inbox, grants and machines pages poll for changes, the issue pages
// follow the event stream; revoking asks
// for a confirmation in a <dialog>; countdowns tick. No framework.
"use strict";

(function () {
  const meta = document.querySelector('meta[name="csrf-token"]');
  const csrf = meta ? meta.content : "";

  async function api(method, path, body) {
    const init = {
      method: method,
      credentials: "same-origin",
      headers: { "X-CSRF-Token": csrf, "Accept": "application/json" },
    };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const r = await fetch(path, init);
    let data = null;
    if (r.status !== 204) {
      try { data = await r.json(); } catch (e) { data = null; }
    }
    if (!r.ok) {
      const err = new Error((data && data.error) || r.statusText);
      err.code = (data && data.code) || ("HTTP_" + r.status);
      throw err;
    }
    return data;
  }

  function show(el, kind, text) {
    if (!el) return;
    el.hidden = false;
    el.className = "notice " + kind;
    el.textContent = text;
  }

  function fail(el, e) {
    show(el, "error", (e.code ? e.code + ": " : "") + e.message);
  }

  // What the area scripts loaded after this one (messages.js) share.
  window.countersign = Object.freeze({ api: api, show: show, fail: fail });

  // ----- times: the one format the server writes too (2026-11-24 14:05 UTC) -----
  function two(n) { return (n < 10 ? "0" : "") + n; }
  function timeText(iso) {
    const d = new Date(iso);
    if (isNaN(d.getTime())) return iso;
    return d.getUTCFullYear() + "-" + two(d.getUTCMonth() + 1) + "-" + two(d.getUTCDate()) +
      " " + two(d.getUTCHours()) + ":" + two(d.getUTCMinutes()) + " UTC";
  }
  function timeElement(iso) {
    const t = document.createElement("time");
    t.setAttribute("datetime", iso);
    t.textContent = timeText(iso);
    return t;
  }

  // ----- countdowns -----
  function plural(n, unit) { return n + " " + unit; }
  function left(secs) {
    if (secs <= 0) return "expired";
    const d = Math.floor(secs / 86400), h = Math.floor(secs % 86400 / 3600),
      m = Math.floor(secs % 3600 / 60), s = secs % 60;
    let t;
    if (d > 0) t = plural(d, "d") + (h ? " " + plural(h, "h") : "");
    else if (h > 0) t = plural(h, "h") + (m ? " " + plural(m, "min") : "");
    else if (m > 0) t = plural(m, "min");
    else t = plural(s, "s");
    return t + " left";
  }
  function tick() {
    const now = Date.now();
    document.querySelectorAll("[data-expires-at]").forEach(function (el) {
      const at = Date.parse(el.getAttribute("data-expires-at"));
      if (!isNaN(at)) el.textContent = left(Math.floor((at - now) / 1000));
    });
  }
  setInterval(tick, 1000);

  // ----- the inbox: new requests appear without a reload -----
  const inbox = document.getElementById("inbox");
  let polling = false;
  function ids(root) {
    return Array.prototype.map.call(root.querySelectorAll("[data-record-id]"),
      function (el) { return el.getAttribute("data-record-id"); }).join(",") +
      "|" + (root.querySelector(".empty, .notice") ? "x" : "");
  }
  async function poll() {
    if (!inbox || polling || document.hidden) return;
    polling = true;
    try {
      const r = await fetch(inbox.getAttribute("data-poll"), {
        credentials: "same-origin", cache: "no-store", headers: { "Accept": "text/html" },
      });
      if (r.redirected || r.status === 401) { window.location.reload(); return; }
      const text = await r.text();
      const t = document.createElement("template");
      t.innerHTML = text;
      if (ids(t.content) !== ids(inbox)) {
        inbox.innerHTML = text;
        tick();
      }
    } catch (e) {
      // The next poll tries again.
    } finally {
      polling = false;
    }
  }
  if (inbox) {
    setInterval(poll, 2000);
    document.addEventListener("visibilitychange", poll);
  }

  // ----- refreshing a list section: after a change, and by itself on the grants and machines
  // pages (the same polling as the inbox: the page is fetched again and its list swapped in
  // when the set of rows changed) -----
  function rowKeys(root) {
    return Array.prototype.map.call(root.querySelectorAll("[data-grant-id], [data-credential-id], [data-token-id]"),
      function (el) {
        return el.getAttribute("data-grant-id") || el.getAttribute("data-credential-id") || el.getAttribute("data-token-id");
      }).join(",") + "|" + (root.querySelector(".notice") ? root.querySelector(".notice").textContent : "");
  }
  let refreshing = null;
  async function refreshList(onlyIfChanged) {
    const list = document.getElementById("list");
    if (!list) return;
    if (refreshing) {
      // A poll is under way: let it end, then read again (a change may have come after it).
      if (onlyIfChanged) return;
      await refreshing;
    }
    let done;
    refreshing = new Promise(function (resolve) { done = resolve; });
    try {
      const r = await fetch(window.location.pathname, { credentials: "same-origin", cache: "no-store" });
      if (r.redirected || r.status === 401) { window.location.reload(); return; }
      const doc = new DOMParser().parseFromString(await r.text(), "text/html");
      const fresh = doc.getElementById("list");
      if (fresh && (!onlyIfChanged || rowKeys(fresh) !== rowKeys(list))) {
        list.innerHTML = fresh.innerHTML;
        tick();
      }
    } catch (e) {
      // The next poll tries again.
    } finally {
      refreshing = null;
      done();
    }
  }
  const live = document.querySelector("#list[data-poll-self]");
  if (live) {
    const again = function () {
      const dialog = document.getElementById("confirm");
      if (document.hidden || (dialog && dialog.open)) return;
      refreshList(true);
    };
    setInterval(again, 2000);
    document.addEventListener("visibilitychange", again);
  }

  // ----- the work pages follow the event stream: an issue page, or a project's issue list, is
  // fetched again and its section swapped in when an event about it arrives -----
  const followed = document.querySelector("[data-live-issue], [data-live-project]");
  if (followed && typeof EventSource === "function") {
    const issue = followed.getAttribute("data-live-issue");
    const project = followed.getAttribute("data-live-project");
    let fetching = null;
    let again = false;
    const refresh = async function () {
      if (fetching) { again = true; return; }
      fetching = (async function () {
        do {
          again = false;
          try {
            const r = await fetch(window.location.pathname + window.location.search,
              { credentials: "same-origin", cache: "no-store" });
            if (r.redirected || r.status === 401) { window.location.reload(); return; }
            const doc = new DOMParser().parseFromString(await r.text(), "text/html");
            const fresh = doc.getElementById(followed.id);
            if (fresh) followed.innerHTML = fresh.innerHTML;
          } catch (e) {
            // The next event tries again.
          }
        } while (again);
      })();
      await fetching;
      fetching = null;
    };
    const stream = new EventSource("/api/v1/events");
    ["issue.created", "issue.updated", "issue.claimed", "issue.released"].forEach(function (kind) {
      stream.addEventListener(kind, function (ev) {
        let env;
        try { env = JSON.parse(ev.data); } catch (e) { return; }
        if ((issue && env.issue === issue) || (project && env.project === project)) refresh();
      });
    });
  }

  // ----- confirming a revocation: a <dialog>, not window.confirm -----
  function confirmAction(text, okLabel) {
    const dialog = document.getElementById("confirm");
    if (!dialog || typeof dialog.showModal !== "function") return Promise.resolve(true);
    document.getElementById("confirm-text").textContent = text;
    document.getElementById("confirm-ok").textContent = okLabel || "Revoke";
    dialog.returnValue = "";
    return new Promise(function (resolve) {
      dialog.addEventListener("close", function () { resolve(dialog.returnValue === "ok"); }, { once: true });
      dialog.showModal();
    });
  }

  // ----- copying a new token: the Clipboard API, else the selected text and execCommand -----
  async function copyFrom(input) {
    input.focus();
    input.select();
    try {
      if (navigator.clipboard && window.isSecureContext) {
        await navigator.clipboard.writeText(input.value);
        return true;
      }
    } catch (e) {
      // Refused (no permission): fall back below.
    }
    try { return document.execCommand("copy"); } catch (e) { return false; }
  }

  // ----- machine login by typed code -----
  let looked = null;
  const lookup = document.getElementById("lookup");
  if (lookup) {
    lookup.addEventListener("submit", async function (ev) {
      ev.preventDefault();
      const result = document.getElementById("result");
      const section = document.getElementById("machine");
      const code = document.getElementById("code").value.trim();
      result.hidden = true;
      section.hidden = true;
      try {
        const rec = await api("POST", "/api/v1/credential-requests/machine-lookup", { code: code });
        looked = { id: rec.record_id, code: code };
        const facts = document.getElementById("machine-facts");
        facts.textContent = "";
        const rows = [
          ["Host", (rec.identifiers || [])[0] || "?"],
          ["Person", rec.approver],
          ["Requested", timeElement(rec.requested_at)],
          ["Reason", rec.reason || ""],
        ];
        if (rec.service) rows.splice(2, 0, ["Service", rec.service]);
        rows.forEach(function (kv) {
          const dt = document.createElement("dt"); dt.textContent = kv[0];
          const dd = document.createElement("dd");
          if (typeof kv[1] === "string") dd.textContent = kv[1]; else dd.appendChild(kv[1]);
          facts.appendChild(dt); facts.appendChild(dd);
        });
        const dt = document.createElement("dt"); dt.textContent = "Time left";
        const dd = document.createElement("dd");
        const span = document.createElement("span");
        span.setAttribute("data-expires-at", rec.expires_at);
        dd.appendChild(span); facts.appendChild(dt); facts.appendChild(dd);
        tick();
        section.hidden = false;
      } catch (e) {
        fail(result, e);
      }
    });
  }

  // ----- minting a personal token -----
  const mint = document.getElementById("mint");
  if (mint) {
    mint.addEventListener("submit", async function (ev) {
      ev.preventDefault();
      const result = document.getElementById("result");
      result.hidden = true;
      try {
        const name = document.getElementById("token-name").value;
        const t = await api("POST", "/api/v1/agent-tokens", name ? { name: name } : {});
        document.getElementById("minted-token").value = t.token;
        document.getElementById("copy-token").textContent = "Copy";
        document.getElementById("minted").hidden = false;
        mint.reset();
        await refreshList();
      } catch (e) {
        fail(result, e);
      }
    });
  }

  // ----- buttons -----
  document.addEventListener("click", async function (ev) {
    const b = ev.target.closest("button[data-action]");
    if (!b) return;
    const action = b.getAttribute("data-action");
    const result = document.getElementById("result") || document.getElementById("flash");
    const row = b.closest("[data-record-id]");
    const codeInput = document.getElementById("code");
    b.disabled = true;
    try {
      if (action === "approve" || action === "deny") {
        const id = b.getAttribute("data-record");
        const body = b.hasAttribute("data-with-code") && codeInput ? { code: codeInput.value } : {};
        const out = await api("POST", "/api/v1/credential-requests/" + encodeURIComponent(id) + "/" + action, body);
        if (b.getAttribute("data-then") === "reload") {
          // The request page shows its new state, who decided and the way on.
          window.location.reload();
          return;
        }
        const what = row ? (row.querySelector(".title") || {}).textContent : "";
        show(result, "ok", (action === "approve" ? "Approved" : "Denied") + (what ? ": " + what : "") +
          (out && out.grant_id ? " (grant " + out.grant_id + ")" : "") + ". ");
        const see = document.createElement("a");
        see.href = "/requests/" + encodeURIComponent(id);
        see.textContent = "See the request";
        result.appendChild(see);
        document.querySelectorAll(".actions button").forEach(function (x) {
          if (!row || row.contains(x)) x.disabled = true;
        });
        if (row) row.remove();
        poll();
        return;
      }
      if (action === "approve-machine" || action === "deny-machine") {
        if (!looked) return;
        const verb = action === "approve-machine" ? "approve" : "deny";
        await api("POST", "/api/v1/credential-requests/" + encodeURIComponent(looked.id) + "/" + verb, { code: looked.code });
        show(result, "ok", (verb === "approve" ? "Approved: the machine is logged in." : "Denied: the machine login is refused.") + " ");
        const see = document.createElement("a");
        see.href = "/requests/" + encodeURIComponent(looked.id);
        see.id = "see-request";
        see.textContent = "See the request";
        result.appendChild(see);
        document.querySelectorAll("#machine button").forEach(function (x) { x.disabled = true; });
        return;
      }
      if (action === "copy") {
        const ok = await copyFrom(document.getElementById(b.getAttribute("data-target")));
        b.textContent = ok ? "Copied" : "Select and copy it";
        b.disabled = false;
        return;
      }
      if (action === "revoke-grant" || action === "revoke-machine") {
        const id = b.getAttribute("data-id");
        const sure = await confirmAction(b.getAttribute("data-confirm") || "Revoke it?",
          action === "revoke-machine" ? "Revoke the machine login" : "Revoke the grant");
        if (!sure) { b.disabled = false; return; }
        const base = action === "revoke-grant" ? "/api/v1/credential-grants/" : "/api/v1/machine-logins/";
        const out = await api("POST", base + encodeURIComponent(id) + "/revoke");
        show(result, "ok", "Revoked (" + (out && out.state) + ").");
        b.disabled = false;
        await refreshList();
        return;
      }
      if (action === "revoke-token") {
        if (!await confirmAction(b.getAttribute("data-confirm") || "Revoke it?", "Revoke the token")) {
          b.disabled = false;
          return;
        }
        await api("DELETE", "/api/v1/agent-tokens/" + encodeURIComponent(b.getAttribute("data-id")));
        show(result, "ok", "Token revoked.");
        await refreshList();
        return;
      }
    } catch (e) {
      fail(result, e);
      b.disabled = false;
    }
  });
})();
