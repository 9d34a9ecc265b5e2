// Countersign console: the conversation pages (issue 14). A conversation with a session
// follows the event stream (its section is fetched again and swapped in when a message, a
// reply or an attempt about the session arrives); the relay view follows the session's relay
// stream; the broadcast form sends through the API and shows each recipient's result, kept
// current by the event stream. State changes carry the session's CSRF token. No framework.
"use strict";

(function () {
  // console.js (loaded first, in the page's head) holds the API call and the notices.
  const api = window.countersign.api;
  const note = window.countersign.show;
  const failed = window.countersign.fail;

  // "@" in the send box offers sessions and people by name (/assets/mentions.js).
  if (!document.querySelector('script[src="/assets/mentions.js"]')) {
    const m = document.createElement("script");
    m.src = "/assets/mentions.js";
    m.defer = true;
    document.head.appendChild(m);
  }

  function envelope(ev) {
    try { return JSON.parse(ev.data); } catch (e) { return null; }
  }

  const MESSAGE_EVENTS = ["message.sent", "message.replied", "message.accepted", "delivery.attempt"];

  // ----- a conversation with a session -----
  const conv = document.querySelector("[data-conversation]");
  if (conv) {
    const session = conv.getAttribute("data-conversation");
    const base = "/api/v1/sessions/" + encodeURIComponent(session);
    let fetching = null;
    let again = false;
    const refresh = async function () {
      if (fetching) { again = true; return; }
      fetching = (async function () {
        do {
          again = false;
          try {
            const r = await fetch(window.location.pathname,
              { credentials: "same-origin", cache: "no-store" });
            if (r.redirected || r.status === 401) { window.location.reload(); return; }
            const doc = new DOMParser().parseFromString(await r.text(), "text/html");
            const fresh = doc.getElementById("conversation");
            if (fresh) {
              conv.innerHTML = fresh.innerHTML;
              conv.setAttribute("data-unread", fresh.getAttribute("data-unread") || "0");
            }
            const state = doc.getElementById("session-state");
            const mine = document.getElementById("session-state");
            if (state && mine) mine.innerHTML = state.innerHTML;
          } catch (e) {
            // The next event tries again.
          }
        } while (again);
      })();
      await fetching;
      fetching = null;
    };
    const about = function (env) {
      if (!env) return false;
      if (env.session === session) return true;
      const d = env.data || {};
      return d.session_id === session || (d.target && d.target.session === session);
    };
    // The page's one event stream (console.js), closed when the page is left or hidden.
    window.countersign.on(MESSAGE_EVENTS.concat(["session.live", "session.updated", "session.gone"]),
      function (env) { if (about(env)) refresh(); });
    const form = document.getElementById("send");
    const result = document.getElementById("send-result");
    form.addEventListener("submit", async function (ev) {
      ev.preventDefault();
      const body = document.getElementById("send-body");
      const mode = document.getElementById("send-mode").value;
      const button = document.getElementById("send-button");
      button.disabled = true;
      try {
        const m = await api("POST", base + "/messages", { body: body.value, delivery: mode });
        body.value = "";
        const a = m.deliveries[0];
        note(result, a && a.state === "failed" ? "error" : "ok",
          "Sent as " + mode + (a ? ": " + a.state + (a.error ? " (" + a.error + ")" : "") : "") + ".");
        refresh();
      } catch (e) {
        failed(result, e);
      } finally {
        button.disabled = false;
      }
    });
    document.addEventListener("click", async function (ev) {
      const t = ev.target;
      if (!(t instanceof HTMLElement)) return;
      const field = t.id === "mark-read" ? "read_through" : t.id === "clear" ? "cleared_before" : null;
      if (!field) return;
      const patch = {};
      patch[field] = new Date().toISOString();
      try {
        await api("PATCH", "/api/v1/inbox/agents/" + encodeURIComponent(session), patch);
        refresh();
      } catch (e) {
        failed(result, e);
      }
    });
  }

  // ----- the relay view -----
  const relay = document.querySelector("[data-relay]");
  if (relay && typeof EventSource === "function") {
    const session = relay.getAttribute("data-relay");
    const list = document.getElementById("frames");
    const state = document.getElementById("relay-state");
    const add = function (f) {
      const li = document.createElement("li");
      li.className = "frame " + (f.kind || "");
      li.setAttribute("data-seq", String(f.seq));
      const k = document.createElement("span");
      k.className = "kind";
      k.textContent = f.kind;
      li.appendChild(k);
      const text = document.createElement("span");
      const d = f.data || {};
      text.textContent = typeof d.text === "string" ? d.text : JSON.stringify(d);
      li.appendChild(text);
      list.appendChild(li);
    };
    const stream = new EventSource("/api/v1/sessions/" + encodeURIComponent(session) + "/relay");
    // The relay holds a connection: closed when the page is left (a page kept in the
    // back/forward cache is loaded afresh when shown again).
    window.addEventListener("pagehide", function () { stream.close(); });
    window.addEventListener("pageshow", function (ev) { if (ev.persisted) window.location.reload(); });
    stream.addEventListener("replay", function (ev) {
      const r = envelope(ev) || { frames: [] };
      list.textContent = "";
      (r.frames || []).forEach(add);
      note(state, "ok", "Live.");
    });
    stream.addEventListener("frame", function (ev) {
      const f = envelope(ev);
      if (f) add(f);
    });
    stream.addEventListener("end", function () {
      note(state, "error", "The session's link closed.");
      stream.close();
    });
    stream.addEventListener("error", function () {
      if (stream.readyState === EventSource.CLOSED) {
        note(state, "error", "The session is not live here, or does not serve the relay.");
      }
    });
  }

  // ----- the broadcast form -----
  const bform = document.getElementById("broadcast");
  if (bform) {
    const out = document.getElementById("broadcast-result");
    const cells = {};
    // The latest state of each message's attempt seen on the stream (it may come before the
    // send's answer does).
    const seen = {};
    const render = function (res) {
      out.hidden = false;
      out.textContent = "";
      const b = res.broadcast;
      const head = document.createElement("p");
      head.className = "notice ok";
      const link = document.createElement("a");
      link.href = "/broadcasts/" + b.id;
      link.textContent = "Sent to " + b.recipient_count + " session" + (b.recipient_count === 1 ? "" : "s");
      head.appendChild(link);
      out.appendChild(head);
      const table = document.createElement("table");
      table.className = "list";
      table.id = "broadcast-recipients";
      const rows = [];
      b.recipients.forEach(function (r) {
        const a = r.message.deliveries[0] || {};
        rows.push([r.session_id, seen[r.message.id] || a.state || "none", a.error || "", r.message.id]);
      });
      res.excluded.forEach(function (x) {
        rows.push([x.session_id, "excluded", x.reason, null]);
      });
      rows.forEach(function (row) {
        const tr = document.createElement("tr");
        tr.setAttribute("data-recipient", row[0]);
        [row[0], row[1], row[2]].forEach(function (v, i) {
          const td = document.createElement("td");
          td.textContent = v;
          if (i === 1) td.className = "state";
          tr.appendChild(td);
        });
        if (row[3]) cells[row[3]] = tr;
        table.appendChild(tr);
      });
      out.appendChild(table);
    };
    window.countersign.on(["delivery.attempt"], function (env) {
      const d = env && env.data;
      if (!d || d.kind !== "message") return;
      seen[d.id] = d.state;
      const tr = cells[d.id];
      if (tr) tr.children[1].textContent = d.state;
    });
    // One idempotency key per form fill: made with the page, kept while the person retries
    // after a refusal, replaced once a broadcast is sent (and the form emptied). A second
    // click while one is being sent does nothing.
    let sending = false;
    bform.addEventListener("submit", async function (ev) {
      ev.preventDefault();
      if (sending) return;
      const sessions = Array.from(bform.querySelectorAll('input[name="session"]:checked'))
        .map(function (i) { return i.value; });
      document.getElementById("broadcast-more").value.split(/\s+/).forEach(function (s) {
        if (s && sessions.indexOf(s) < 0) sessions.push(s);
      });
      const button = document.getElementById("broadcast-send");
      button.disabled = true;
      sending = true;
      try {
        const res = await api("POST", "/api/v1/broadcasts", {
          idempotency_key: bform.getAttribute("data-key"),
          sessions: sessions,
          mode: document.getElementById("broadcast-mode").value,
          body: document.getElementById("broadcast-body").value,
        });
        render(res);
        // The next fill is another broadcast.
        bform.reset();
        bform.setAttribute("data-key", "page-" + (crypto.randomUUID ? crypto.randomUUID() : String(Date.now())));
        if (window.countersign.refresh) window.countersign.refresh(["recent"]);
      } catch (e) {
        failed(out, e);
      } finally {
        sending = false;
        button.disabled = false;
      }
    });
  }
})();
