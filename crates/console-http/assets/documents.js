// The document page follows the event stream: when the document it shows is edited, versioned
// or rebuilt, the page is fetched again and its section swapped in (no reload). The rendered
// blocks are the server's sanitized HTML; nothing here builds HTML from event data.
(function () {
  "use strict";
  const section = document.querySelector("[data-live-artifact]");
  if (!section || typeof EventSource !== "function") return;
  const id = section.getAttribute("data-live-artifact");
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
          const fresh = doc.getElementById(section.id);
          if (fresh) {
            section.innerHTML = fresh.innerHTML;
            section.setAttribute("data-token", fresh.getAttribute("data-token") || "");
          }
        } catch (e) {
          // The next event tries again.
        }
      } while (again);
    })();
    await fetching;
    fetching = null;
  };
  const stream = new EventSource("/api/v1/events");
  ["document.edited", "document.versioned", "document.rebuilt"].forEach(function (kind) {
    stream.addEventListener(kind, function (ev) {
      let env;
      try { env = JSON.parse(ev.data); } catch (e) { return; }
      if (env.artifact === id) refresh();
    });
  });
})();
