// Countersign console: the asks pages (the inbox home, one ask, a document's discussion).
// Answers, snoozes, replies, resolutions and suggestion decisions go to the JSON API with the
// session's CSRF token; the sections marked data-live-asks follow the event stream and are
// fetched again when an ask, comment or suggestion event arrives. No framework.
"use strict";

(function () {
  // console.js (loaded first, in the page's head) holds the API call.
  const api = window.countersign.api;

  // "@" in a reply or comment box offers sessions and people (/assets/mentions.js).
  if (!document.querySelector('script[src="/assets/mentions.js"]')) {
    const m = document.createElement("script");
    m.src = "/assets/mentions.js";
    m.defer = true;
    document.head.appendChild(m);
  }

  // The sessions a form's text mentions (picked after "@"), as the comments API takes them.
  function mentionsOf(f) {
    const field = f.querySelector("[name=mentions]");
    const ids = field ? field.value.split(/[,\n]/).map(function (x) { return x.trim(); })
      .filter(function (x) { return x; }) : [];
    return ids.length ? ids : undefined;
  }

  function flash(kind, text) {
    const el = document.getElementById("flash");
    if (!el) return;
    el.hidden = false;
    el.className = "notice " + kind;
    el.textContent = text;
  }

  // ----- live sections: fetched again (and swapped in by id) on the events about them -----
  const sections = Array.prototype.slice.call(document.querySelectorAll("[data-live-asks]"));
  let fetching = null;
  let again = false;
  async function refresh() {
    if (!sections.length) return;
    if (fetching) { again = true; return fetching; }
    fetching = (async function () {
      do {
        again = false;
        try {
          const r = await fetch(window.location.pathname + window.location.search,
            { credentials: "same-origin", cache: "no-store" });
          if (r.redirected || r.status === 401) { window.location.reload(); return; }
          const doc = new DOMParser().parseFromString(await r.text(), "text/html");
          sections.forEach(function (s) {
            const fresh = doc.getElementById(s.id);
            if (!fresh || fresh.innerHTML === s.innerHTML) return;
            // What the person is typing stays (fields with an id).
            const typed = {};
            s.querySelectorAll("input[id], textarea[id]").forEach(function (f) {
              if (f.value && f.type !== "checkbox") typed[f.id] = f.value;
            });
            const focused = document.activeElement && document.activeElement.id;
            s.innerHTML = fresh.innerHTML;
            Object.keys(typed).forEach(function (id) {
              const f = document.getElementById(id);
              if (f) f.value = typed[id];
            });
            if (focused && document.getElementById(focused)) document.getElementById(focused).focus();
          });
        } catch (e) {
          // The next event tries again.
        }
      } while (again);
    })();
    await fetching;
    fetching = null;
  }
  if (sections.length) {
    // The page's one event stream (console.js), closed when the page is left or hidden.
    window.countersign.on(["ask.opened", "ask.reworded", "ask.answered", "ask.retracted", "ask.resolved",
      "ask.followed", "ask.unfollowed", "comment.created", "comment.edited", "comment.resolved",
      "comment.reopened", "suggestion.accepted", "suggestion.rejected", "document.edited",
      "approval.requested", "approval.approved", "approval.changes_requested"], function () { refresh(); });
  }

  function inSeconds(hours) {
    return new Date(Date.now() + hours * 3600 * 1000).toISOString();
  }

  // ----- buttons -----
  document.addEventListener("click", async function (ev) {
    const b = ev.target.closest("button[data-answer], button[data-snooze], button[data-unsnooze], " +
      "button[data-close], button[data-resolve], button[data-reopen], button[data-accept], button[data-reject]");
    if (!b) return;
    b.disabled = true;
    try {
      if (b.hasAttribute("data-answer")) {
        const id = b.getAttribute("data-answer");
        await api("POST", "/api/v1/asks/" + encodeURIComponent(id) + "/answer",
          { options: [b.getAttribute("data-option")] });
        flash("ok", "Answered: " + b.textContent.trim() + ".");
      } else if (b.hasAttribute("data-snooze")) {
        const id = b.getAttribute("data-snooze");
        const hours = Number(b.getAttribute("data-hours") || "24");
        await api("PUT", "/api/v1/inbox/asks/" + encodeURIComponent(id) + "/snooze",
          { snoozed_until: inSeconds(hours) });
        flash("ok", "Snoozed.");
      } else if (b.hasAttribute("data-unsnooze")) {
        await api("DELETE", "/api/v1/inbox/asks/" + encodeURIComponent(b.getAttribute("data-unsnooze")) + "/snooze");
        flash("ok", "Back in your inbox.");
      } else if (b.hasAttribute("data-close")) {
        await api("POST", "/api/v1/asks/" + encodeURIComponent(b.getAttribute("data-close")) + "/close",
          { state: b.getAttribute("data-as") || "resolved" });
        flash("ok", "Closed.");
      } else if (b.hasAttribute("data-resolve")) {
        await api("POST", "/api/v1/comments/" + encodeURIComponent(b.getAttribute("data-resolve")) + "/resolve", {});
      } else if (b.hasAttribute("data-reopen")) {
        await api("POST", "/api/v1/comments/" + encodeURIComponent(b.getAttribute("data-reopen")) + "/reopen", {});
      } else if (b.hasAttribute("data-accept")) {
        await api("POST", "/api/v1/comments/" + encodeURIComponent(b.getAttribute("data-accept")) + "/suggestion/accept", {});
        flash("ok", "Suggestion accepted: the document is changed.");
      } else if (b.hasAttribute("data-reject")) {
        await api("POST", "/api/v1/comments/" + encodeURIComponent(b.getAttribute("data-reject")) + "/suggestion/reject", {});
        flash("ok", "Suggestion rejected.");
      }
      await refresh();
    } catch (e) {
      flash("error", (e.code ? e.code + ": " : "") + e.message);
      b.disabled = false;
    }
  });

  // ----- forms: an answer in words, a reply, a new comment -----
  document.addEventListener("submit", async function (ev) {
    const f = ev.target;
    if (!(f instanceof HTMLFormElement)) return;
    const text = f.hasAttribute("data-answer-text");
    const reply = f.hasAttribute("data-reply-ask") || f.hasAttribute("data-reply-comment");
    const comment = f.hasAttribute("data-comment");
    if (!text && !reply && !comment) return;
    ev.preventDefault();
    const field = f.querySelector("input[name=text], input[name=body], textarea[name=body]");
    const value = field ? field.value.trim() : "";
    const picked = Array.prototype.map.call(f.querySelectorAll("input[name=option]:checked"),
      function (c) { return c.value; });
    if (!value && !(text && picked.length)) return;
    const button = f.querySelector("button[type=submit]");
    if (button) button.disabled = true;
    try {
      if (text) {
        const answer = {};
        if (picked.length) answer.options = picked;
        if (value) answer.text = value;
        await api("POST", "/api/v1/asks/" + encodeURIComponent(f.getAttribute("data-answer-text")) + "/answer",
          answer);
        flash("ok", "Answered.");
      } else if (f.hasAttribute("data-reply-ask")) {
        await api("POST", f.getAttribute("data-comments"),
          { body: value, ask: f.getAttribute("data-reply-ask"), mentions: mentionsOf(f) });
      } else if (f.hasAttribute("data-reply-comment")) {
        await api("POST", f.getAttribute("data-comments"),
          { body: value, parent: f.getAttribute("data-reply-comment"), mentions: mentionsOf(f) });
      } else {
        const body = { body: value, mentions: mentionsOf(f) };
        const quote = f.querySelector("input[name=quote]");
        const replacement = f.querySelector("input[name=replacement]");
        const block = f.querySelector("input[name=block]");
        if (quote && quote.value) body.quote = { exact: quote.value };
        if (quote && quote.value && block && block.value) body.block = block.value;
        if (quote && quote.value && replacement && replacement.value) {
          body.suggestion = { replacement: replacement.value };
        }
        await api("POST", f.getAttribute("data-comments"), body);
      }
      f.reset();
      await refresh();
    } catch (e) {
      flash("error", (e.code ? e.code + ": " : "") + e.message);
    } finally {
      if (button) button.disabled = false;
    }
  });
})();
