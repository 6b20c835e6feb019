// pgqueue dashboard: the few behaviours the pages need beyond HTML (no inline handlers: the
// content security policy allows scripts from this server only).
(function () {
  "use strict";
  // Forms and buttons with data-confirm ask before an action that deletes records.
  document.addEventListener("submit", function (event) {
    var button = event.submitter;
    var text = (button && button.getAttribute("data-confirm")) || event.target.getAttribute("data-confirm");
    if (text && !window.confirm(text)) {
      event.preventDefault();
      return;
    }
    if (button && button.hasAttribute("data-needs-selection") &&
        !event.target.querySelector("input[name=id]:checked")) {
      event.preventDefault();
      window.alert("Select at least one row first.");
    }
  });
  // The rows ticked, by id: a list that refreshes in place (htmx) ticks them again in its new rows,
  // so a refresh never loses a selection (nor the scroll position: the page is not reloaded).
  var ticked = new Set();
  function remember(box) {
    if (box.checked) { ticked.add(box.value); } else { ticked.delete(box.value); }
  }
  // The header checkbox selects every row of the page.
  document.addEventListener("change", function (event) {
    if (event.target.matches("[data-select-all]")) {
      var table = event.target.closest("table");
      table.querySelectorAll("input[name=id]").forEach(function (box) { box.checked = event.target.checked; remember(box); });
    } else if (event.target.matches("input[name=id]")) {
      remember(event.target);
    }
  });
  document.addEventListener("htmx:afterSettle", function () {
    document.querySelectorAll("[data-live] input[name=id]").forEach(function (box) {
      if (ticked.has(box.value)) { box.checked = true; }
    });
  });
  // Keyboard shortcuts: "g" then a page's initial (o overview, q queues, f failed jobs, j jobs,
  // s schedules, w workers) opens it; "/" moves to the page's first filter field. Not while typing.
  var pending = 0;
  document.addEventListener("keydown", function (event) {
    var target = event.target;
    if (event.ctrlKey || event.metaKey || event.altKey || (target.closest && target.closest("input, select, textarea"))) {
      return;
    }
    if (event.key === "/") {
      var field = document.querySelector("form.filters input:not([type=hidden])");
      if (field) { event.preventDefault(); field.focus(); }
      return;
    }
    if (pending && Date.now() - pending < 1500) {
      pending = 0;
      var link = document.querySelector('header.top nav a[data-key="' + event.key + '"]');
      if (link) { event.preventDefault(); link.click(); }
      return;
    }
    pending = event.key === "g" ? Date.now() : 0;
  });
})();
