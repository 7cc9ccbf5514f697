// The console's only script of its own: when the ledger changes (the server
// sends an event on /live for each batch of new ledger events), every region
// marked hx-trigger="ledger-changed from:body" is fetched again by htmx.
(function () {
  "use strict";
  if (!window.EventSource) {
    return;
  }
  var source = new EventSource("/live");
  source.addEventListener("ledger", function (event) {
    document.body.setAttribute("data-ledger-sequence", event.data);
    htmx.trigger(document.body, "ledger-changed");
  });
  source.addEventListener("open", function () {
    document.body.setAttribute("data-live", "connected");
  });
  source.addEventListener("error", function () {
    document.body.setAttribute("data-live", "reconnecting");
  });
})();
