// Countersign console: the document pages (their live sections and plain API forms are
// console.js's data-live and data-api; see its contract). The review form sends the latest
// version the page shows. The editor saves one quote-anchored
// edit guarded by the token the person started from: a stale save (409 DOCUMENT_CHANGED)
// applies nothing, and the page shows what changed and keeps the person's text (never a
// silent merge). Selecting text in a document offers to comment on it or suggest a change,
// the quote found in the document's markdown (no retyping). The project's documents page
// creates and uploads documents. Nothing here builds HTML from event data: the rendered
// blocks and the preview are the server's sanitized HTML.
"use strict";

(function () {
  const cs = window.countersign;
  const api = cs.api;
  const csrfMeta = document.querySelector('meta[name="csrf-token"]');
  const csrf = csrfMeta ? csrfMeta.content : "";

  function say(el, kind, text) {
    if (!el) return;
    el.hidden = false;
    el.className = "notice " + kind;
    el.textContent = text;
  }
  function failed(el, e) {
    say(el, "error", (e.code ? e.code + ": " : "") + e.message);
  }
  const enc = encodeURIComponent;

  // ----- the document page: reviews (its live section is console.js's data-live) -----
  const review = document.getElementById("review");
  if (review) {
    const id = review.getAttribute("data-artifact");
    const result = document.getElementById("doc-result");
    review.addEventListener("submit", async function (ev) {
      ev.preventDefault();
      const outcome = ev.submitter ? ev.submitter.value : "approve";
      const body = review.querySelector("textarea[name=body]").value.trim();
      const latest = document.getElementById("latest-version");
      const version = Number(latest ? latest.getAttribute("data-version") : "0");
      const req = { outcome: outcome, version: version };
      if (body) req.body = body;
      const buttons = review.querySelectorAll("button");
      buttons.forEach(function (b) { b.disabled = true; });
      try {
        await api("POST", "/api/v1/artifacts/" + enc(id) + "/reviews", req);
        review.reset();
        say(result, "ok", outcome === "approve" ? "You approved version " + version + "."
          : "You asked for changes to version " + version + ".");
        if (cs.refresh) await cs.refresh();
      } catch (e) {
        failed(result, e);
      } finally {
        buttons.forEach(function (b) { b.disabled = false; });
      }
    });
  }

  // ----- a long document in parts: the next one fetched as the person reads near its end ---
  // (or at once with the placeholder's button). After a live swap shows the first part again,
  // the parts the person had read are fetched again, in order.
  const docSection = document.getElementById("document");
  if (docSection) {
    let partsRead = 0;
    let replaying = false;
    const near = "IntersectionObserver" in window ? new IntersectionObserver(function (seen) {
      seen.forEach(function (e) { if (e.isIntersecting) loadPart(e.target); });
    }, { rootMargin: "1200px 0px" }) : null;
    async function loadPart(more) {
      if (more.hasAttribute("data-loading")) return false;
      more.setAttribute("data-loading", "");
      if (near) near.unobserve(more);
      const button = more.querySelector("[data-load-part]");
      if (button) { button.disabled = true; button.textContent = "Loading…"; }
      try {
        const r = await fetch(more.getAttribute("data-doc-part"),
          { credentials: "same-origin", headers: { "Accept": "text/html" } });
        const t = document.createElement("template");
        t.innerHTML = await r.text();
        if (r.status === 409) {
          more.replaceWith(t.content);
          if (cs.refresh) await cs.refresh();
          return false;
        }
        if (!r.ok) throw new Error(String(r.status));
        more.replaceWith(t.content);
        partsRead += 1;
        watch();
        return true;
      } catch (e) {
        more.removeAttribute("data-loading");
        if (button) { button.disabled = false; button.textContent = "Try again"; }
        return false;
      }
    }
    function watch() {
      if (replaying) return;
      docSection.querySelectorAll("[data-doc-part]:not([data-loading])").forEach(function (m) {
        if (near) near.observe(m);
      });
    }
    docSection.addEventListener("click", async function (ev) {
      const b = ev.target.closest("[data-load-part]");
      const more = b && b.closest("[data-doc-part]");
      if (more) await loadPart(more);
    });
    docSection.addEventListener("countersign:swapped", async function () {
      const again = partsRead;
      partsRead = 0;
      replaying = true;
      try {
        for (let i = 0; i < again; i++) {
          const more = docSection.querySelector("[data-doc-part]:not([data-loading])");
          if (!more || !(await loadPart(more))) break;
        }
      } finally {
        replaying = false;
      }
      watch();
    });
    watch();
  }

  // ----- select to quote: the selection found in the document's markdown -----
  const quoted = document.querySelector("[data-quote-from]");
  if (quoted) {
    const id = quoted.getAttribute("data-quote-from");
    const bar = document.getElementById("quote-bar");
    let markdown = null;
    const loadMarkdown = async function () {
      if (markdown === null) {
        const t = await api("GET", "/api/v1/artifacts/" + enc(id) + "/text");
        markdown = t.markdown;
      }
      return markdown;
    };
    const count = function (hay, needle) {
      let n = 0, at = hay.indexOf(needle);
      while (at >= 0) { n++; at = hay.indexOf(needle, at + 1); }
      return n;
    };
    const escapeRe = function (s) { return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"); };
    // The quote for a selection: its text as the markdown holds it (markup such as ** or `
    // between its words allowed), once in the document, else once in its block.
    const locate = async function (text, block) {
      const md = await loadMarkdown();
      let exact = text;
      if (count(md, exact) === 0) {
        const words = text.split(/\s+/).filter(Boolean).map(escapeRe);
        if (!words.length) return null;
        const re = new RegExp(words.join("[*_`~\\[\\]()]*\\s+[*_`~\\[\\]()]*"), "g");
        const found = md.match(re) || [];
        if (found.length === 0) return null;
        exact = found[0];
      }
      return { exact: exact, block: count(md, exact) > 1 ? block : null };
    };
    let current = null;
    const hide = function () { if (bar) bar.hidden = true; current = null; };
    document.addEventListener("selectionchange", function () {
      const sel = window.getSelection();
      if (!sel || sel.isCollapsed || !sel.rangeCount) { return; }
      const range = sel.getRangeAt(0);
      const article = document.querySelector("[data-quote-from]");
      if (!article || !article.contains(range.commonAncestorContainer)) { hide(); return; }
      const text = sel.toString().trim();
      if (!text) { hide(); return; }
      let node = range.startContainer;
      if (node.nodeType !== 1) node = node.parentElement;
      const top = node && node.closest("[data-block]");
      current = { text: text, block: top ? top.getAttribute("data-block") : null };
      if (bar) {
        const rect = range.getBoundingClientRect();
        bar.style.top = (window.scrollY + rect.bottom + 6) + "px";
        bar.style.left = (window.scrollX + rect.left) + "px";
        bar.hidden = false;
      }
    });
    const go = async function (suggest, ev) {
      ev.preventDefault();
      if (!current) return;
      const chosen = current;
      const q = await locate(chosen.text, chosen.block).catch(function () { return null; });
      const form = document.querySelector("form[data-comment]");
      const exact = q ? q.exact : chosen.text;
      if (form) {
        // The discussion page: the form beside the document takes the quote.
        form.querySelector("input[name=quote]").value = exact;
        const blockField = form.querySelector("input[name=block]");
        if (blockField) blockField.value = q && q.block ? q.block : "";
        const repl = form.querySelector("input[name=replacement]");
        if (suggest && repl) { repl.value = exact; repl.focus(); repl.select(); }
        else form.querySelector("textarea[name=body]").focus();
        hide();
      } else {
        const params = new URLSearchParams({ quote: exact });
        if (q && q.block) params.set("block", q.block);
        if (suggest) params.set("suggest", "1");
        window.location.href = "/artifacts/" + enc(id) + "/discussion?" + params.toString();
      }
    };
    if (bar) {
      document.getElementById("quote-comment").addEventListener("click", function (ev) { go(false, ev); });
      document.getElementById("quote-suggest").addEventListener("click", function (ev) { go(true, ev); });
    }
  }

  // ----- the editor -----
  const editor = document.getElementById("editor");
  if (editor) {
    const id = editor.getAttribute("data-artifact");
    const text = document.getElementById("doc-text");
    const out = document.getElementById("save-result");
    const stale = document.getElementById("stale");
    // What the person started from, and its token: what a save is guarded by.
    let base = text.value;
    let token = editor.getAttribute("data-token");

    const count = function (hay, needle) {
      let n = 0, at = hay.indexOf(needle);
      while (at >= 0 && n < 2) { n++; at = hay.indexOf(needle, at + 1); }
      return n;
    };
    const lineStart = function (s, at) { return at <= 0 ? 0 : s.lastIndexOf("\n", at - 1) + 1; };
    const lineEnd = function (s, at) {
      if (at >= s.length) return s.length;
      const n = s.indexOf("\n", at);
      return n < 0 ? s.length : n + 1;
    };
    // One op turning `old` into `neu`: the changed lines, widened a line at a time until the
    // quote occurs once in `old`.
    const opFor = function (old, neu) {
      if (old === neu) return null;
      let p = 0;
      const max = Math.min(old.length, neu.length);
      while (p < max && old[p] === neu[p]) p++;
      let s = 0;
      while (s < max - p && old[old.length - 1 - s] === neu[neu.length - 1 - s]) s++;
      let from = lineStart(old, p);
      let to = lineEnd(old, old.length - s);
      if (to < old.length - s) to = old.length - s;
      for (;;) {
        const exact = old.slice(from, to);
        const text = neu.slice(from, neu.length - (old.length - to));
        if (exact.length > 0 && count(old, exact) === 1) {
          return { op: "replace", quote: { exact: exact }, text: text };
        }
        if (from === 0 && to === old.length) return null;
        if (from > 0) from = lineStart(old, from - 1);
        if (to < old.length) to = lineEnd(old, to);
      }
    };
    const setStale = function (on) {
      stale.hidden = !on;
    };
    const save = async function () {
      const mine = text.value;
      const op = opFor(base, mine);
      if (!op) {
        if (base === mine) { say(out, "ok", "Nothing to save: the text is as you opened it."); return; }
        // An empty document takes its first text as a new upload of the same name.
        const a = await api("GET", "/api/v1/artifacts/" + enc(id));
        if (a.token !== token) { await showStale(mine); return; }
        const where = a.issue ? "/api/v1/issues/" + enc(a.issue) : "/api/v1/projects/" + enc(a.project);
        await api("POST", where + "/artifacts", { filename: a.filename, content_type: "text/markdown", content: mine });
      } else {
        try {
          const r = await api("POST", "/api/v1/artifacts/" + enc(id) + "/edits",
            { expected_token: token, ops: [op] });
          token = r.token;
        } catch (e) {
          if (e.code === "DOCUMENT_CHANGED") { await showStale(mine); return; }
          throw e;
        }
      }
      const t = await api("GET", "/api/v1/artifacts/" + enc(id) + "/text");
      base = t.markdown;
      token = t.token;
      if (text.value === mine) text.value = base;
      setStale(false);
      say(out, "ok", "Saved.");
    };
    let latest = null;
    const showStale = async function (mine) {
      latest = await api("GET", "/api/v1/artifacts/" + enc(id) + "/text");
      diffInto(document.getElementById("stale-theirs"), base, latest.markdown);
      diffInto(document.getElementById("stale-mine"), base, mine);
      document.getElementById("stale-kept").value = mine;
      setStale(true);
      say(out, "error", "Not saved: the document changed since you opened it. See below.");
      document.getElementById("stale-heading").scrollIntoView({ block: "start" });
    };
    editor.addEventListener("submit", async function (ev) {
      ev.preventDefault();
      const b = document.getElementById("save");
      b.disabled = true;
      try { await save(); } catch (e) { failed(out, e); } finally { b.disabled = false; }
    });
    document.getElementById("stale-latest").addEventListener("click", function () {
      if (!latest) return;
      base = latest.markdown;
      token = latest.token;
      text.value = latest.markdown;
      say(out, "info", "This is the latest text. Your text is kept below: copy from it what you want to keep, then save.");
      text.focus();
    });
    document.getElementById("stale-overwrite").addEventListener("click", async function () {
      if (!latest) return;
      // The person chose to put their text over what changed: it is saved against the latest.
      base = latest.markdown;
      token = latest.token;
      text.value = document.getElementById("stale-kept").value;
      try { await save(); } catch (e) { failed(out, e); }
    });
    document.getElementById("preview-button").addEventListener("click", async function () {
      const preview = document.getElementById("preview");
      const body = document.getElementById("preview-body");
      try {
        const r = await fetch("/documents/preview", {
          method: "POST", credentials: "same-origin",
          headers: { "X-CSRF-Token": csrf, "Content-Type": "text/markdown; charset=utf-8" },
          body: text.value,
        });
        if (!r.ok) throw new Error("the preview failed (" + r.status + ")");
        // The server's sanitized rendering, as the document page shows it.
        body.innerHTML = await r.text();
        preview.hidden = false;
      } catch (e) {
        failed(out, e);
      }
    });
  }

  // A line diff (longest common subsequence over the lines that differ), into a <pre>.
  function diffInto(pre, a, b) {
    pre.textContent = "";
    const x = a.split("\n"), y = b.split("\n");
    let p = 0;
    while (p < x.length && p < y.length && x[p] === y[p]) p++;
    let s = 0;
    while (s < x.length - p && s < y.length - p && x[x.length - 1 - s] === y[y.length - 1 - s]) s++;
    const xs = x.slice(p, x.length - s), ys = y.slice(p, y.length - s);
    const lines = [];
    if (p > 0) lines.push(["same", "  " + x[p - 1]]);
    if (xs.length * ys.length > 4000000) {
      xs.forEach(function (l) { lines.push(["del", "- " + l]); });
      ys.forEach(function (l) { lines.push(["ins", "+ " + l]); });
    } else {
      const n = xs.length, m = ys.length;
      const t = [];
      for (let i = 0; i <= n; i++) t.push(new Uint32Array(m + 1));
      for (let i = n - 1; i >= 0; i--) {
        for (let j = m - 1; j >= 0; j--) {
          t[i][j] = xs[i] === ys[j] ? t[i + 1][j + 1] + 1 : Math.max(t[i + 1][j], t[i][j + 1]);
        }
      }
      let i = 0, j = 0;
      while (i < n || j < m) {
        if (i < n && j < m && xs[i] === ys[j]) { lines.push(["same", "  " + xs[i]]); i++; j++; }
        else if (j < m && (i === n || t[i][j + 1] >= t[i + 1][j])) { lines.push(["ins", "+ " + ys[j]]); j++; }
        else { lines.push(["del", "- " + xs[i]]); i++; }
      }
    }
    if (s > 0) lines.push(["same", "  " + x[x.length - s]]);
    if (xs.length === 0 && ys.length === 0) lines.push(["same", "  (no change)"]);
    lines.forEach(function (l) {
      const span = document.createElement("span");
      span.className = l[0];
      span.textContent = l[1];
      pre.appendChild(span);
    });
  }

  // ----- a project's documents: write one, upload one -----
  const create = document.getElementById("new-document");
  if (create) {
    const project = create.getAttribute("data-project");
    const out = document.getElementById("new-doc-result");
    create.addEventListener("submit", async function (ev) {
      ev.preventDefault();
      const issue = document.getElementById("new-doc-issue").value.trim();
      let filename = document.getElementById("new-doc-name").value.trim();
      if (!/\.(md|markdown)$/i.test(filename)) filename += ".md";
      const where = issue ? "/api/v1/issues/" + enc(issue) : "/api/v1/projects/" + enc(project);
      const b = document.getElementById("new-doc-create");
      b.disabled = true;
      try {
        const a = await api("POST", where + "/artifacts", {
          filename: filename, content_type: "text/markdown",
          content: document.getElementById("new-doc-text").value,
        });
        window.location.href = "/artifacts/" + enc(a.id);
      } catch (e) {
        failed(out, e);
        b.disabled = false;
      }
    });
    const upload = document.getElementById("upload");
    const uout = document.getElementById("upload-result");
    upload.addEventListener("submit", async function (ev) {
      ev.preventDefault();
      const issue = document.getElementById("upload-issue").value.trim();
      const file = document.getElementById("upload-file").files[0];
      if (!file) return;
      const where = issue ? "/api/v1/issues/" + enc(issue) : "/api/v1/projects/" + enc(project);
      const data = new FormData();
      let type = file.type;
      if (!type && /\.(md|markdown)$/i.test(file.name)) type = "text/markdown";
      data.append("file", new Blob([file], { type: type || "application/octet-stream" }), file.name);
      const b = document.getElementById("upload-send");
      b.disabled = true;
      try {
        const r = await fetch(where + "/artifacts", {
          method: "POST", credentials: "same-origin",
          headers: { "X-CSRF-Token": csrf, "Accept": "application/json" }, body: data,
        });
        const j = await r.json().catch(function () { return null; });
        if (!r.ok) {
          const err = new Error((j && j.error) || r.statusText);
          err.code = (j && j.code) || ("HTTP_" + r.status);
          throw err;
        }
        window.location.href = "/artifacts/" + enc(j.id);
      } catch (e) {
        failed(uout, e);
        b.disabled = false;
      }
    });
  }
})();
