// Refreshes the page's <main> from its fragment URL: one request at a time,
// the next one 5 s after the last answer, none while the page is hidden, and
// a doubling pause (up to 60 s) while requests fail. Served by the daemon
// itself; nothing is fetched from anywhere else.
(function () {
  "use strict";
  var main = document.getElementById("content");
  if (!main || !main.dataset.refresh) { return; }
  var PERIOD = 5000;
  var LONGEST = 60000;
  var pause = PERIOD;
  var timer = null;
  var busy = false;

  function schedule(ms) {
    if (timer !== null) { clearTimeout(timer); }
    timer = setTimeout(tick, ms);
  }

  function tick() {
    timer = null;
    if (document.visibilityState === "hidden") { return; }
    busy = true;
    fetch(main.dataset.refresh, {
      headers: { "Accept": "text/html" },
      credentials: "same-origin",
      cache: "no-store"
    }).then(function (response) {
      if (!response.ok) { throw new Error("HTTP " + response.status); }
      return response.text();
    }).then(function (html) {
      main.innerHTML = html;
      pause = PERIOD;
      main.dataset.refreshes = String(Number(main.dataset.refreshes || "0") + 1);
    }).catch(function () {
      pause = Math.min(pause * 2, LONGEST);
    }).then(function () {
      busy = false;
      if (document.visibilityState !== "hidden") { schedule(pause); }
    });
  }

  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState !== "hidden" && timer === null && !busy) { schedule(pause); }
  });
  schedule(PERIOD);
})();
