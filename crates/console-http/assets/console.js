// Countersign console: the pages' behaviour. No framework: a small declarative layer that
// every page uses (the contract below), then the approval pages' own behaviour (the inbox,
// grants and machines pages poll; revoking asks for a confirmation in a <dialog>; countdowns
// tick). Served from /assets/console.js under a CSP with no inline script or style and no eval.
//
// ===== The contract (issue 27: the pages' shared foundation) =====
//
// FORMS THAT CALL THE API. A <form data-api="METHOD /api/v1/path/{name}"> is sent to the JSON
// API by this script, never by the browser:
//   - Each named control is a member of the JSON body. Its type comes from data-json on the
//     control: "string" (default), "int" (a number), "list" (comma- or newline-separated,
//     trimmed, empties dropped), "bool" (a checkbox's checked; checkboxes default to bool),
//     "json" (parsed); a list control's data-item="label" makes each item {label: item}. An empty value is left out of the body; data-empty="null" sends null
//     instead (to clear a field), data-empty="keep" sends "" / [].
//   - {name} in the path is filled (URL-encoded) from the control of that name, which then
//     leaves the body. Hidden inputs carry fixed members (expected_sequence, …).
//   - data-idempotency="idempotency_key" adds that member: one key per form fill, kept while
//     the person retries after an error, replaced after a success. While a send is in flight
//     the form's buttons are disabled and a second submit is ignored, so a double click sends
//     once.
//   - A refusal is shown in the form, in its [data-form-error] element (made when missing),
//     as "CODE: message", with role=alert; the person's input stays.
//   - On success, data-then says what follows: a URL, where {name} is filled from the JSON
//     answer (e.g. "/issues/{key}") -> navigate there; "reload" -> reload the page;
//     "refresh" (the default) -> reset the form and fetch the page's live regions again.
//     data-keep (no value) keeps the form's values after success (in-place editors).
//     The form also receives a "countersign:done" event (detail: the answer), after which
//     an area script may do more.
//   - data-confirm="text" on the form asks first, in the layout's <dialog id="confirm">.
//   - data-submit-on="change" sends the form when one of its controls changes (selects of
//     in-place editors).
//   - A control with data-followup="METHOD /path/{answer field}" is not in the body: when it
//     holds a value, a second call follows the first's success, with data-followup-body (JSON)
//     plus the value as data-followup-field (e.g. a new issue's description, uploaded as its
//     document once the issue exists).
//   A <button data-api="METHOD /path" data-body='{"json":1}' data-then=…> outside a form does
//   the same with a fixed body (claim, release, retract); its error goes to the nearest
//   [data-form-error] inside its closest [data-error-scope], else #flash.
//
// TOGGLES. <button data-toggle="ID"> shows or hides element ID (aria-expanded follows) and
//   focuses its first field; Escape inside a toggled element hides it again.
//
// LIVE REGIONS. An element with an id and data-live="kind kind …" (event kinds of
//   GET /api/v1/events, or "*" for every kind) is fetched again, as the same URL, and its
//   inner HTML swapped in by id, when such an event arrives. data-live-issue, -project,
//   -artifact, -session narrow it to events naming that key. A region the person is typing in
//   (or with a toggled editor open) is swapped once focus leaves it, so nothing typed is lost. Area scripts use the same
//   stream: countersign.on(kinds, fn(envelope, kind)) and countersign.refresh(ids?).
//   data-live-every="N" fetches a region again every N seconds while the page is visible
//   (for what changes with no event: the delivery pages after a background sync).
//   One EventSource per page, opened when something listens, closed on pagehide and while the
//   page is hidden, reopened (resuming at the last event id with ?since=) on pageshow and
//   when visible again, so pages kept in the back/forward cache hold no connection.
//
// THE UNREAD COUNT. #nav-unread in the navigation and the page title's "(N) " prefix show
//   what waits on the person (GET /inbox/count: {count}), read on load, on ask and comment
//   events and when the page becomes visible.
//
// KEYBOARD. "/" focuses the header search; "c" follows or clicks the page's [data-shortcut=c]
//   (create); "j"/"k" move through the rows marked [data-row] (Enter opens the row's link);
//   "?" shows the shortcuts <dialog id="shortcuts">. Not while typing in a field.
//
// window.countersign = { api, show, fail, on, refresh, confirm, send }.
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
      const err = new Error((data && typeof data.error === "string" && data.error) || r.statusText);
      err.code = (data && data.code) || ("HTTP_" + r.status);
      err.data = data;
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

  // ----- the event stream: one per page -----
  const ALL_KINDS = ["project.created", "issue.created", "issue.updated", "issue.claimed",
    "issue.released", "comment.created", "comment.edited", "comment.resolved", "comment.reopened",
    "suggestion.accepted", "suggestion.rejected", "ask.opened", "ask.reworded", "ask.answered",
    "ask.retracted", "ask.resolved", "ask.followed", "ask.unfollowed", "message.sent",
    "message.accepted", "message.replied", "broadcast.sent", "document.created", "document.edited",
    "document.versioned", "document.rebuilt", "approval.requested", "approval.approved",
    "approval.changes_requested", "session.live", "session.updated", "session.gone"];
  const listeners = {};
  let source = null;
  let lastId = null;
  function deliver(kind, ev) {
    if (ev.lastEventId) lastId = ev.lastEventId;
    let env = null;
    try { env = JSON.parse(ev.data); } catch (e) { return; }
    (listeners[kind] || []).slice().forEach(function (fn) {
      try { fn(env, kind); } catch (e) { /* one listener's fault stays its own */ }
    });
  }
  function attach(kind) {
    if (source) source.addEventListener(kind, function (ev) { deliver(kind, ev); });
  }
  function open() {
    if (source || typeof EventSource !== "function" || document.hidden) return;
    if (!Object.keys(listeners).length) return;
    source = new EventSource("/api/v1/events" + (lastId ? "?since=" + encodeURIComponent(lastId) : ""));
    Object.keys(listeners).forEach(attach);
  }
  function close() {
    if (source) { source.close(); source = null; }
  }
  function on(kinds, fn) {
    const list = kinds === "*" ? ALL_KINDS : (Array.isArray(kinds) ? kinds : String(kinds).split(/\s+/));
    list.forEach(function (k) {
      if (!k) return;
      if (k === "*") { on("*", fn); return; }
      if (!listeners[k]) { listeners[k] = []; attach(k); }
      listeners[k].push(fn);
    });
    // Opened once the page's scripts have registered (a microtask later), not once per kind.
    Promise.resolve().then(open);
  }
  window.addEventListener("pagehide", close);
  window.addEventListener("pageshow", function (ev) {
    open();
    if (ev.persisted) { refresh(); unread(); }
  });
  document.addEventListener("visibilitychange", function () {
    if (document.hidden) { close(); } else { open(); unread(); }
  });

  // ----- live regions: fetched again by the page's URL, swapped in by id -----
  let fetching = null;
  let wanted = null;
  async function refresh(ids) {
    const want = ids ? ids.slice() : Array.prototype.map.call(
      document.querySelectorAll("[data-live][id]"), function (el) { return el.id; });
    if (!want.length) return;
    wanted = (wanted || []).concat(want);
    if (fetching) return fetching;
    fetching = (async function () {
      while (wanted) {
        const now = wanted;
        wanted = null;
        try {
          const r = await fetch(window.location.pathname + window.location.search,
            { credentials: "same-origin", cache: "no-store", headers: { "Accept": "text/html" } });
          if (r.redirected || r.status === 401) { window.location.reload(); return; }
          const doc = new DOMParser().parseFromString(await r.text(), "text/html");
          now.forEach(function (id) {
            const old = document.getElementById(id);
            const fresh = doc.getElementById(id);
            if (old && busy(old)) { deferred[id] = true; return; }
            if (old && fresh && old.innerHTML !== fresh.innerHTML) {
              old.innerHTML = fresh.innerHTML;
              old.dispatchEvent(new CustomEvent("countersign:swapped", { bubbles: true }));
            }
          });
          if (typeof tick === "function") tick();
        } catch (e) {
          // The next event tries again.
        }
      }
    })();
    try { await fetching; } finally { fetching = null; }
  }
  // A region the person is typing in, or with an editor open, is swapped once they leave it.
  const deferred = {};
  function busy(el) {
    const a = document.activeElement;
    if (a && el.contains(a) && (typing(a) || a.tagName === "SELECT")) return true;
    return Array.prototype.some.call(el.querySelectorAll("[data-toggled]"), function (t) { return !t.hidden; });
  }
  function retryDeferred() {
    setTimeout(function () {
      const ids = Object.keys(deferred).filter(function (id) {
        const el = document.getElementById(id);
        return el && !busy(el);
      });
      ids.forEach(function (id) { delete deferred[id]; });
      if (ids.length) refresh(ids);
    }, 0);
  }
  document.addEventListener("focusout", retryDeferred);
  function follows(el, env) {
    const pairs = [["data-live-issue", "issue"], ["data-live-project", "project"],
      ["data-live-artifact", "artifact"], ["data-live-session", "session"]];
    return pairs.every(function (p) {
      const want = el.getAttribute(p[0]);
      return want === null || want === "" || env[p[1]] === want;
    });
  }
  document.querySelectorAll("[data-live][id]").forEach(function (el) {
    on(el.getAttribute("data-live") || "*", function (env) {
      if (follows(el, env)) refresh([el.id]);
    });
  });
  // A region with data-live-every="N" (seconds, at least 10) is also fetched again every N
  // seconds while the page is visible: what changes with no event (the delivery pages after a
  // background sync) still reaches the page.
  const timed = {};
  document.querySelectorAll("[data-live-every][id]").forEach(function (el) {
    const n = parseInt(el.getAttribute("data-live-every"), 10);
    if (n >= 10) (timed[n] = timed[n] || []).push(el.id);
  });
  Object.keys(timed).forEach(function (n) {
    setInterval(function () { if (!document.hidden) refresh(timed[n]); }, n * 1000);
  });

  // ----- the unread count in the navigation and the title -----
  const baseTitle = document.title;
  const counter = document.getElementById("nav-unread");
  let counting = false;
  async function unread() {
    if (!counter || counting) return;
    counting = true;
    try {
      const r = await fetch("/inbox/count", { credentials: "same-origin", cache: "no-store" });
      if (r.ok) {
        const n = (await r.json()).count || 0;
        counter.textContent = n ? String(n) : "";
        counter.hidden = !n;
        counter.setAttribute("aria-label", n + " waiting for you");
        const menuCount = document.getElementById("menu-unread");
        if (menuCount) { menuCount.textContent = counter.textContent; menuCount.hidden = !n; }
        document.title = (n ? "(" + n + ") " : "") + baseTitle;
      }
    } catch (e) {
      // Kept as it was.
    } finally {
      counting = false;
    }
  }
  if (counter) {
    unread();
    on(["ask.opened", "ask.answered", "ask.retracted", "ask.resolved", "ask.reworded",
      "comment.created", "message.replied"], function () { unread(); });
  }

  // ----- confirming: a <dialog>, not window.confirm -----
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

  // ----- forms and buttons that call the API -----
  function newKey() {
    const b = new Uint8Array(16);
    crypto.getRandomValues(b);
    return Array.prototype.map.call(b, function (x) { return (x < 16 ? "0" : "") + x.toString(16); }).join("");
  }
  function valueOf(el) {
    const type = el.getAttribute("data-json") || (el.type === "checkbox" ? "bool" : "string");
    const empty = el.getAttribute("data-empty") || "omit";
    if (type === "bool") return { v: !!el.checked };
    const raw = el.multiple
      ? Array.prototype.filter.call(el.options, function (o) { return o.selected; }).map(function (o) { return o.value; })
      : el.value;
    let v;
    if (type === "list") {
      v = Array.isArray(raw) ? raw : raw.split(/[,\n]/).map(function (s) { return s.trim(); }).filter(Boolean);
      if (!v.length && empty !== "keep") return empty === "null" ? { v: null } : null;
      const item = el.getAttribute("data-item");
      if (item) v = v.map(function (x) { const o = {}; o[item] = x; return o; });
      return { v: v };
    }
    if (Array.isArray(raw)) return { v: raw };
    const s = type === "string" && el.tagName !== "TEXTAREA" ? raw.trim() : raw;
    if (s === "" || s === undefined) {
      if (empty === "null") return { v: null };
      if (empty === "keep") return { v: type === "string" ? "" : null };
      return null;
    }
    if (type === "int") {
      const n = Number(s);
      if (!Number.isInteger(n)) throw Object.assign(new Error((el.labels && el.labels[0] ? el.labels[0].textContent.trim() : el.name) + " is a whole number"), { code: "INVALID_BODY" });
      return { v: n };
    }
    if (type === "json") return { v: JSON.parse(s) };
    return { v: s };
  }
  function fill(path, take) {
    return path.replace(/\{([a-z_]+)\}/g, function (_, name) {
      const v = take(name);
      return encodeURIComponent(v === undefined || v === null ? "" : String(v));
    });
  }
  function errorBox(scope) {
    let el = scope.querySelector("[data-form-error]");
    if (!el && scope.tagName === "FORM") {
      el = document.createElement("p");
      el.setAttribute("data-form-error", "");
      scope.appendChild(el);
    }
    return el || document.getElementById("flash");
  }
  function shownError(box, e) {
    if (!box) return;
    box.hidden = false;
    box.className = "notice error";
    box.setAttribute("role", "alert");
    box.textContent = (e.code ? e.code + ": " : "") + e.message;
  }
  function clearError(box) {
    if (box && box.hasAttribute("data-form-error")) { box.hidden = true; box.textContent = ""; }
  }
  async function after(el, out) {
    const then = el.getAttribute("data-then") || "refresh";
    el.dispatchEvent(new CustomEvent("countersign:done", { bubbles: true, detail: out }));
    if (then === "reload") { window.location.reload(); return; }
    if (then === "refresh" || then === "none") {
      if (el.tagName === "FORM" && !el.hasAttribute("data-keep")) el.reset();
      if (el.hasAttribute("data-toggled")) hide(el);
      if (then === "refresh") await refresh();
      return;
    }
    window.location.assign(fill(then, function (name) { return out ? out[name] : ""; }));
  }
  // Sends a form or a button's call; answers the API's answer (or throws).
  async function send(el) {
    if (el.getAttribute("aria-busy") === "true") return undefined;
    const spec = (el.getAttribute("data-api") || "").trim().split(/\s+/);
    const method = spec[0], path = spec[1] || "";
    const box = errorBox(el.tagName === "FORM" ? el : (el.closest("[data-error-scope]") || document.body));
    const question = el.getAttribute("data-confirm");
    if (question && !await confirmAction(question, el.getAttribute("data-confirm-ok") || "Yes")) return undefined;
    const buttons = el.tagName === "FORM" ? el.querySelectorAll("button, input[type=submit]") : [el];
    el.setAttribute("aria-busy", "true");
    Array.prototype.forEach.call(buttons, function (b) { b.disabled = true; });
    clearError(box);
    try {
      let body;
      let url = path;
      const followups = [];
      if (el.tagName === "FORM") {
        body = {};
        const used = {};
        url = fill(path, function (name) {
          const c = el.elements.namedItem(name);
          used[name] = true;
          return c ? c.value.trim() : "";
        });
        Array.prototype.forEach.call(el.elements, function (c) {
          if (!c.name || used[c.name] || c.disabled || c.type === "submit" || c.type === "button") return;
          const v = valueOf(c);
          if (!v) return;
          if (c.hasAttribute("data-followup")) followups.push({ control: c, value: v.v });
          else body[c.name] = v.v;
        });
        const keyName = el.getAttribute("data-idempotency");
        if (keyName) {
          if (!el.dataset.key) el.dataset.key = newKey();
          body[keyName] = el.dataset.key;
        }
      } else {
        const raw = el.getAttribute("data-body");
        body = raw ? JSON.parse(raw) : undefined;
      }
      const out = await api(method, url, method === "GET" || method === "DELETE" ? (body && Object.keys(body).length ? body : undefined) : (body || {}));
      for (const f of followups) {
        const c = f.control;
        const fspec = c.getAttribute("data-followup").trim().split(/\s+/);
        const fbody = JSON.parse(c.getAttribute("data-followup-body") || "{}");
        fbody[c.getAttribute("data-followup-field") || c.name] = f.value;
        try {
          await api(fspec[0], fill(fspec[1], function (name) { return out ? out[name] : ""; }), fbody);
        } catch (e) {
          delete el.dataset.key;
          e.message = "saved, but not " + (c.getAttribute("data-followup-what") || c.name) + ": " + e.message;
          throw e;
        }
      }
      if (el.tagName === "FORM") delete el.dataset.key;
      await after(el, out);
      return out;
    } catch (e) {
      shownError(box, e);
      throw e;
    } finally {
      el.removeAttribute("aria-busy");
      Array.prototype.forEach.call(buttons, function (b) { b.disabled = false; });
    }
  }
  document.addEventListener("submit", function (ev) {
    const form = ev.target.closest("form[data-api]");
    if (!form) return;
    ev.preventDefault();
    send(form).catch(function () { /* shown in the form */ });
  });
  document.addEventListener("change", function (ev) {
    const form = ev.target.closest("form[data-api][data-submit-on=change]");
    if (form) send(form).catch(function () { /* shown in the form */ });
  });
  document.addEventListener("click", function (ev) {
    const b = ev.target.closest("button[data-api]");
    if (b && !b.form) {
      ev.preventDefault();
      send(b).catch(function () { /* shown */ });
      return;
    }
    if (ev.target.closest("[data-show-shortcuts]")) {
      const d = document.getElementById("shortcuts");
      if (d && typeof d.showModal === "function") d.showModal();
      return;
    }
    const t = ev.target.closest("button[data-toggle]");
    if (t) {
      const target = document.getElementById(t.getAttribute("data-toggle"));
      if (!target) return;
      if (!target.hidden) { hide(target); return; }
      target.hidden = false;
      t.setAttribute("aria-expanded", "true");
      {
        const first = target.querySelector("input:not([type=hidden]), textarea, select");
        if (first) first.focus();
      }
    }
  });
  function hide(t) {
    t.hidden = true;
    const opener = document.querySelector('[data-toggle="' + t.id + '"]');
    if (opener) { opener.setAttribute("aria-expanded", "false"); opener.focus(); }
    retryDeferred();
  }
  document.addEventListener("keydown", function (ev) {
    if (ev.key !== "Escape") return;
    const open = ev.target.closest && ev.target.closest("[data-toggled]");
    if (open && !open.hidden) hide(open);
  });

  // ----- keyboard shortcuts -----
  function typing(el) {
    if (!el) return false;
    const tag = el.tagName;
    return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || el.isContentEditable;
  }
  let current = -1;
  function move(by) {
    const rows = Array.prototype.slice.call(document.querySelectorAll("[data-row]"));
    if (!rows.length) return;
    const at = rows.indexOf(document.activeElement && document.activeElement.closest("[data-row]"));
    current = Math.max(0, Math.min(rows.length - 1, (at >= 0 ? at : current) + by));
    rows.forEach(function (r) { r.classList.remove("current"); });
    const row = rows[current];
    row.classList.add("current");
    const link = row.querySelector("a[href]");
    (link || row).focus();
    row.scrollIntoView({ block: "nearest" });
  }
  document.addEventListener("keydown", function (ev) {
    if (ev.ctrlKey || ev.metaKey || ev.altKey || ev.defaultPrevented) return;
    if (typing(ev.target)) return;
    const dialog = document.querySelector("dialog[open]");
    if (dialog) return;
    if (ev.key === "/") {
      const s = document.getElementById("header-search");
      if (s) { ev.preventDefault(); s.focus(); s.select(); }
    } else if (ev.key === "c") {
      const c = document.querySelector("[data-shortcut=c]");
      if (c) { ev.preventDefault(); c.click(); }
    } else if (ev.key === "j") {
      ev.preventDefault(); move(1);
    } else if (ev.key === "k") {
      ev.preventDefault(); move(-1);
    } else if (ev.key === "?") {
      const d = document.getElementById("shortcuts");
      if (d && typeof d.showModal === "function") { ev.preventDefault(); d.showModal(); }
    }
  });

  // What the area scripts loaded after this one share.
  window.countersign = Object.freeze({
    api: api, show: show, fail: fail, on: on, refresh: refresh, confirm: confirmAction, send: send,
  });

  // ----- times: relative words, the absolute time on hover -----
  // The server writes <time datetime="ISO" title="2026-11-24 14:05 UTC">2026-11-24 14:05 UTC</time>
  // (the one absolute format, what a page without this script shows). This script shows every
  // <time datetime> as words relative to now ("just now", "3 min ago", "in 2 h", "yesterday",
  // "4 days ago", "24 Nov"), keeps the absolute time in its title (shown on hover), rewrites the
  // times inserted later (live regions, rendered rows) and brings them all up to date each minute.
  function two(n) { return (n < 10 ? "0" : "") + n; }
  function timeText(iso) {
    const d = new Date(iso);
    if (isNaN(d.getTime())) return iso;
    return d.getUTCFullYear() + "-" + two(d.getUTCMonth() + 1) + "-" + two(d.getUTCDate()) +
      " " + two(d.getUTCHours()) + ":" + two(d.getUTCMinutes()) + " UTC";
  }
  const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
  function dayOf(ms) { const d = new Date(ms); return new Date(d.getFullYear(), d.getMonth(), d.getDate()).getTime(); }
  function relative(at, now) {
    const secs = Math.round((at - now) / 1000);
    const past = secs <= 0, a = Math.abs(secs);
    const when = function (words) { return past ? words + " ago" : "in " + words; };
    if (a < 45) return past ? "just now" : "now";
    if (a < 3600) return when(Math.max(1, Math.floor(a / 60)) + " min");
    const days = Math.round((dayOf(at) - dayOf(now)) / 86400000);
    if (a < 6 * 3600 || days === 0) return when(Math.floor(a / 3600) + " h");
    if (days === -1) return "yesterday";
    if (days === 1) return "tomorrow";
    if (Math.abs(days) < 7) return when(Math.abs(days) + " days");
    const d = new Date(at);
    return d.getDate() + " " + MONTHS[d.getMonth()] +
      (d.getFullYear() !== new Date(now).getFullYear() ? " " + d.getFullYear() : "");
  }
  function relate(t) {
    const iso = t.getAttribute("datetime");
    const at = Date.parse(iso);
    if (isNaN(at)) return;
    if (!t.getAttribute("title")) t.setAttribute("title", timeText(iso));
    const words = relative(at, Date.now());
    if (t.textContent !== words) t.textContent = words;
  }
  function relateAll(root) {
    if (root.matches && root.matches("time[datetime]")) relate(root);
    if (root.querySelectorAll) root.querySelectorAll("time[datetime]").forEach(relate);
  }
  function timeElement(iso) {
    const t = document.createElement("time");
    t.setAttribute("datetime", iso);
    t.textContent = timeText(iso);
    relate(t);
    return t;
  }
  relateAll(document);
  setInterval(function () { if (!document.hidden) relateAll(document); }, 60000);
  document.addEventListener("visibilitychange", function () { if (!document.hidden) relateAll(document); });

  // ----- boxes that scroll sideways (long code lines, wide tables) take the keyboard's focus -----
  function scrollers() {
    document.querySelectorAll("main pre, main table, main .scroll-x").forEach(function (el) {
      const ox = getComputedStyle(el).overflowX;
      const wide = (ox === "auto" || ox === "scroll") && el.scrollWidth > el.clientWidth + 1;
      if (wide && !el.hasAttribute("tabindex")) {
        el.setAttribute("tabindex", "0");
        el.setAttribute("data-scroll-focus", "");
      } else if (!wide && el.hasAttribute("data-scroll-focus")) {
        el.removeAttribute("tabindex");
        el.removeAttribute("data-scroll-focus");
      }
    });
  }
  let scrollersQueued = false;
  function queueScrollers() {
    if (scrollersQueued) return;
    scrollersQueued = true;
    requestAnimationFrame(function () { scrollersQueued = false; scrollers(); });
  }
  scrollers();
  window.addEventListener("resize", queueScrollers);
  // What is inserted later (live regions, rendered rows, the document's next parts).
  new MutationObserver(function (changes) {
    let added = false;
    changes.forEach(function (c) {
      c.addedNodes.forEach(function (n) {
        if (n.nodeType === 1) { added = true; relateAll(n); }
      });
    });
    if (added) queueScrollers();
  }).observe(document.body, { childList: true, subtree: true });

  // ----- the menu: on narrow screens the navigation rows fold behind one button -----
  const menuButton = document.getElementById("menu-toggle");
  const menuHeader = menuButton && menuButton.closest("header");
  function setMenu(open) {
    menuHeader.classList.toggle("menu-open", open);
    menuButton.setAttribute("aria-expanded", open ? "true" : "false");
  }
  if (menuButton && menuHeader) {
    menuButton.addEventListener("click", function () {
      setMenu(menuButton.getAttribute("aria-expanded") !== "true");
    });
    document.addEventListener("keydown", function (ev) {
      if (ev.key !== "Escape" || !menuHeader.classList.contains("menu-open")) return;
      const inside = ev.target === document.body || menuHeader.contains(ev.target) ||
        (ev.target.closest && ev.target.closest("nav.sub"));
      if (!inside) return;
      setMenu(false);
      menuButton.focus();
    });
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

  // ----- passkeys (docs/passkeys.md) -----
  // The broker checks every ceremony; this only carries them: base64url in and out.
  function fromB64u(s) {
    const b = atob(s.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((s.length + 3) % 4));
    return Uint8Array.from(b, function (c) { return c.charCodeAt(0); });
  }
  function toB64u(buf) {
    let bin = "";
    new Uint8Array(buf).forEach(function (b) { bin += String.fromCharCode(b); });
    return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }
  function passkeyHere(rpId) {
    if (!window.PublicKeyCredential || !navigator.credentials) {
      const e = new Error("This browser cannot use passkeys (no WebAuthn).");
      e.code = "PASSKEYS_UNSUPPORTED";
      throw e;
    }
    if (rpId && location.hostname !== rpId) {
      const e = new Error("Passkeys work on this console at " + location.protocol + "//" + rpId +
        (location.port ? ":" + location.port : "") + ": open this page there.");
      e.code = "PASSKEY_WRONG_HOST";
      throw e;
    }
  }
  // An assertion over `challenge` by one of `passkeys`, as the broker's countersignature body.
  async function assertion(challenge, passkeys, nonce) {
    const cred = await navigator.credentials.get({ publicKey: {
      challenge: fromB64u(challenge),
      allowCredentials: (passkeys || []).map(function (p) { return { type: "public-key", id: fromB64u(p.id) }; }),
      userVerification: "required",
      timeout: 120000,
    } });
    return {
      credential: toB64u(cred.rawId),
      nonce: nonce,
      client_data: toB64u(cred.response.clientDataJSON),
      authenticator_data: toB64u(cred.response.authenticatorData),
      signature: toB64u(cred.response.signature),
    };
  }
  // Approves `id` countersigned: a fresh statement from the broker, shown in words, signed.
  async function approveWithPasskey(id, body, result) {
    const path = "/api/v1/credential-requests/" + encodeURIComponent(id);
    const st = await api("POST", path + "/statement", {});
    passkeyHere(st.rp_id);
    const shown = document.getElementById("statement-words");
    if (shown && shown.textContent !== st.words) {
      const e = new Error("The request changed since this page showed it: reload the page.");
      e.code = "STATEMENT_CHANGED";
      throw e;
    }
    if (!st.passkeys || st.passkeys.length === 0) {
      const e = new Error("You have no passkey this approval accepts: add one on the Passkeys page.");
      e.code = "NO_PASSKEY";
      throw e;
    }
    show(result, "info", "Confirm on your passkey. It signs: " + st.words);
    body.countersignature = await assertion(st.challenge, st.passkeys, st.nonce);
    return api("POST", path + "/approve", body);
  }

  const addPasskey = document.getElementById("passkey-add");
  if (addPasskey) {
    addPasskey.addEventListener("submit", async function (ev) {
      ev.preventDefault();
      const result = document.getElementById("result");
      const progress = document.getElementById("passkey-progress");
      const button = document.getElementById("passkey-add-button");
      result.hidden = true;
      button.disabled = true;
      try {
        const offer = await api("POST", "/api/v1/passkeys/challenge", {});
        passkeyHere(offer.rp_id);
        const login = document.querySelector("form.who span");
        const name = login ? login.textContent : "you";
        show(progress, "info", "Create the passkey on your device (a touch, a PIN or your face).");
        const cred = await navigator.credentials.create({ publicKey: {
          challenge: fromB64u(offer.challenge),
          rp: { id: offer.rp_id, name: "Countersign" },
          user: { id: fromB64u(offer.user_handle), name: name, displayName: name },
          pubKeyCredParams: [{ type: "public-key", alg: -7 }, { type: "public-key", alg: -8 }, { type: "public-key", alg: -257 }],
          authenticatorSelection: { residentKey: "preferred", userVerification: "required" },
          excludeCredentials: (offer.passkeys || []).map(function (p) { return { type: "public-key", id: fromB64u(p.id) }; }),
          attestation: "none",
          timeout: 120000,
        } });
        const body = {
          name: document.getElementById("passkey-name").value,
          nonce: offer.nonce,
          client_data: toB64u(cred.response.clientDataJSON),
          attestation_object: toB64u(cred.response.attestationObject),
        };
        const code = document.getElementById("enroll-code").value.trim();
        if (code) {
          body.enroll_code = code;
        } else if (offer.passkeys && offer.passkeys.length) {
          show(progress, "info", "Now confirm with a passkey you already have: it vouches for the new one.");
          body.endorsement = await assertion(offer.challenge, offer.passkeys, offer.nonce);
        }
        await api("POST", "/api/v1/passkeys", body);
        window.location.reload();
      } catch (e) {
        progress.hidden = true;
        fail(result, e);
        button.disabled = false;
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
        let out;
        if (action === "approve" && b.hasAttribute("data-passkey")) {
          out = await approveWithPasskey(id, body, result);
        } else {
          try {
            out = await api("POST", "/api/v1/credential-requests/" + encodeURIComponent(id) + "/" + action, body);
          } catch (e) {
            // Policy asks for a passkey (an approval from the inbox): countersign, then approve.
            if (action !== "approve" || e.code !== "PASSKEY_REQUIRED") throw e;
            out = await approveWithPasskey(id, body, result);
          }
        }
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
      if (action === "rename-passkey") {
        const name = window.prompt("A new name for this passkey", b.getAttribute("data-name") || "");
        if (name === null) { b.disabled = false; return; }
        await api("PATCH", "/api/v1/passkeys/" + encodeURIComponent(b.getAttribute("data-id")), { name: name });
        window.location.reload();
        return;
      }
      if (action === "remove-passkey") {
        if (!await confirmAction(b.getAttribute("data-confirm") || "Remove it?", "Remove the passkey")) {
          b.disabled = false;
          return;
        }
        await api("POST", "/api/v1/passkeys/" + encodeURIComponent(b.getAttribute("data-id")) + "/remove");
        window.location.reload();
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
