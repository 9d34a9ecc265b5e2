// Countersign console: "@" in a comment or message box (a textarea named "body") offers the
// live sessions (GET /api/v1/sessions) and the people who signed in (GET /api/v1/people) by
// name as one types, in a listbox under the box (the ARIA combobox pattern: arrows move,
// Enter or Tab picks, Escape closes; a click picks too).
//
// Picking writes "@name " in the text. In a comment box a picked session is also added to the
// form's `mentions` (session ids: the comment is delivered to each; a form without that field
// gets a hidden one), which is the mention the console keeps for a comment. The console keeps
// no mention of a person, nor of anyone in a message: there the name is words for the reader.
//
// Served from /assets/mentions.js under a CSP with no inline script or style; the listbox's
// few rules are set here through the CSSOM, so the pages that load it need no style sheet.
"use strict";

(function () {
  if (window.countersignMentions) return;
  window.countersignMentions = true;

  const FRESH_MS = 15000;
  let names = null;
  let namesAt = 0;
  let loading = null;

  // The names, read again when older than FRESH_MS: sessions first (by title), then people.
  function load() {
    if (names && Date.now() - namesAt < FRESH_MS) return Promise.resolve(names);
    if (loading) return loading;
    const get = function (path) {
      return fetch(path, { credentials: "same-origin", headers: { "Accept": "application/json" } })
        .then(function (r) { return r.ok ? r.json() : []; })
        .catch(function () { return []; });
    };
    loading = Promise.all([get("/api/v1/sessions"), get("/api/v1/people")]).then(function (got) {
      const sessions = Array.isArray(got[0]) ? got[0] : [];
      const people = Array.isArray(got[1]) ? got[1] : [];
      names = sessions.map(function (s) {
        return { kind: "session", id: s.session_id, name: s.title || s.session_id,
          detail: "live session" + (s.owner ? " of " + s.owner : "") };
      }).concat(people.map(function (p) {
        const login = typeof p === "string" ? p : (p && (p.login || p.email)) || "";
        return { kind: "person", id: login, name: login, detail: "person" };
      }).filter(function (p) { return p.id; }));
      namesAt = Date.now();
      loading = null;
      return names;
    });
    return loading;
  }

  function isBox(el) {
    return el instanceof HTMLTextAreaElement && el.name === "body" && !!el.form;
  }

  // A comment form: the declarative API form posting to comments, or the asks pages' forms.
  function isComment(form) {
    const api = form.getAttribute("data-api") || "";
    return /\/comments$/.test(api) || form.hasAttribute("data-comments");
  }

  // The "@word" that ends at the caret, or null.
  function token(box) {
    const upto = box.value.slice(0, box.selectionStart);
    const m = /(^|\s)@([^\s@]*)$/.exec(upto);
    if (!m) return null;
    return { start: upto.length - m[2].length - 1, query: m[2].toLowerCase() };
  }

  let seq = 0;
  const state = new WeakMap();

  function style(el, rules) {
    Object.keys(rules).forEach(function (k) { el.style[k] = rules[k]; });
  }

  // The box's listbox, made on first use, right after the box.
  function listOf(box) {
    let s = state.get(box);
    if (s && s.list.isConnected) return s;
    seq += 1;
    const list = document.createElement("ul");
    list.id = "mention-list-" + seq;
    list.setAttribute("role", "listbox");
    list.setAttribute("aria-label", "People and sessions to mention");
    list.className = "mention-list";
    list.hidden = true;
    style(list, { listStyle: "none", margin: ".2rem 0 0", padding: ".2rem 0", border: "1px solid #c9d1e0",
      borderRadius: "8px", background: "#fff", boxShadow: "0 4px 14px rgba(20,30,60,.12)",
      maxHeight: "14rem", overflowY: "auto", maxWidth: "28rem" });
    // After the box's label when the label wraps it (a list is no label content).
    (box.closest("label") || box).insertAdjacentElement("afterend", list);
    box.setAttribute("role", "combobox");
    box.setAttribute("aria-autocomplete", "list");
    box.setAttribute("aria-controls", list.id);
    box.setAttribute("aria-expanded", "false");
    // A click picks (mousedown keeps the focus in the box).
    list.addEventListener("mousedown", function (ev) {
      const li = ev.target.closest("[role=option]");
      if (!li) return;
      ev.preventDefault();
      const st = state.get(box);
      pick(box, st.shown[Number(li.getAttribute("data-index"))]);
    });
    s = { list: list, shown: [], active: -1, tok: null };
    state.set(box, s);
    return s;
  }

  function close(box) {
    const s = state.get(box);
    if (!s) return;
    s.list.hidden = true;
    s.list.textContent = "";
    s.shown = [];
    s.active = -1;
    box.setAttribute("aria-expanded", "false");
    box.removeAttribute("aria-activedescendant");
  }

  function mark(box, s) {
    Array.prototype.forEach.call(s.list.children, function (li, i) {
      const on = i === s.active;
      li.setAttribute("aria-selected", on ? "true" : "false");
      style(li, { background: on ? "#e8efff" : "transparent" });
      if (on) {
        box.setAttribute("aria-activedescendant", li.id);
        li.scrollIntoView({ block: "nearest" });
      }
    });
  }

  async function offer(box) {
    const tok = token(box);
    if (!tok) { close(box); return; }
    const all = await load();
    // The text may have moved on while the names loaded.
    const now = token(box);
    if (!now || now.query !== tok.query || document.activeElement !== box) return;
    const s = listOf(box);
    const q = tok.query;
    const shown = all.filter(function (n) {
      return !q || n.name.toLowerCase().indexOf(q) >= 0 || n.id.toLowerCase().indexOf(q) >= 0;
    }).slice(0, 8);
    if (!shown.length) { close(box); return; }
    s.shown = shown;
    s.tok = tok;
    s.list.textContent = "";
    shown.forEach(function (n, i) {
      const li = document.createElement("li");
      li.id = s.list.id + "-" + i;
      li.setAttribute("role", "option");
      li.setAttribute("data-index", String(i));
      li.setAttribute("data-kind", n.kind);
      li.setAttribute("data-id", n.id);
      style(li, { padding: ".3rem .7rem", cursor: "pointer" });
      const name = document.createElement("strong");
      name.textContent = n.name;
      const detail = document.createElement("span");
      detail.textContent = " · " + n.detail;
      style(detail, { color: "#5b6477", fontSize: ".85rem" });
      li.appendChild(name);
      li.appendChild(detail);
      s.list.appendChild(li);
    });
    s.active = 0;
    s.list.hidden = false;
    box.setAttribute("aria-expanded", "true");
    mark(box, s);
  }

  // Writes "@name " over the "@word" and, in a comment, adds a session to the mentions.
  function pick(box, n) {
    const s = state.get(box);
    if (!n || !s) return;
    const tok = token(box) || s.tok;
    if (!tok) { close(box); return; }
    const end = box.selectionStart;
    const text = "@" + n.name + " ";
    box.value = box.value.slice(0, tok.start) + text + box.value.slice(end);
    const caret = tok.start + text.length;
    box.setSelectionRange(caret, caret);
    if (n.kind === "session" && isComment(box.form)) {
      let field = box.form.querySelector("[name=mentions]");
      if (!field) {
        field = document.createElement("input");
        field.type = "hidden";
        field.name = "mentions";
        field.setAttribute("data-json", "list");
        box.form.appendChild(field);
      }
      const ids = field.value.split(/[,\n]/).map(function (x) { return x.trim(); })
        .filter(function (x) { return x; });
      if (ids.indexOf(n.id) < 0) ids.push(n.id);
      field.value = ids.join(", ");
    }
    close(box);
    box.focus();
  }

  document.addEventListener("input", function (ev) {
    if (isBox(ev.target)) offer(ev.target);
  });

  document.addEventListener("keydown", function (ev) {
    const box = ev.target;
    if (!isBox(box)) return;
    const s = state.get(box);
    if (!s || s.list.hidden || !s.shown.length) return;
    if (ev.key === "ArrowDown" || ev.key === "ArrowUp") {
      ev.preventDefault();
      const n = s.shown.length;
      s.active = (s.active + (ev.key === "ArrowDown" ? 1 : n - 1)) % n;
      mark(box, s);
    } else if (ev.key === "Enter" || ev.key === "Tab") {
      ev.preventDefault();
      pick(box, s.shown[Math.max(0, s.active)]);
    } else if (ev.key === "Escape") {
      // Only the listbox closes, not a toggled form around the box.
      ev.preventDefault();
      ev.stopPropagation();
      close(box);
    }
  }, true);

  document.addEventListener("focusout", function (ev) {
    if (isBox(ev.target)) close(ev.target);
  });

  // A form sent or reset leaves no listbox open.
  document.addEventListener("reset", function (ev) {
    const f = ev.target;
    if (f instanceof HTMLFormElement) {
      f.querySelectorAll("textarea[name=body]").forEach(close);
      const hidden = f.querySelector("input[type=hidden][name=mentions]");
      if (hidden) hidden.value = "";
    }
  }, true);
})();
