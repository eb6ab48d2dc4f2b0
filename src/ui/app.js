// localagents ui: live updates, the page's only script (no inline script
// anywhere). The page shows everything without it; with it, the server's
// event stream replaces each section marked data-live="NAME" with the HTML
// of its event NAME, which the server wrote and escaped with the same
// functions as the page. On "done" (a job that ended) it reloads once, so
// the page shows the result and the diff.
(function () {
  var url = document.body.getAttribute("data-events");
  if (!url || !window.EventSource) return;
  var es = new EventSource(url);
  document.querySelectorAll("[data-live]").forEach(function (el) {
    es.addEventListener(el.getAttribute("data-live"), function (e) {
      el.innerHTML = e.data;
      document.body.setAttribute("data-updated", String(Date.now()));
    });
  });
  es.addEventListener("done", function () {
    es.close();
    window.location.reload();
  });
})();
