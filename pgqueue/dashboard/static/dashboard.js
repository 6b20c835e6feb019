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
  // The header checkbox selects every row of the page.
  document.addEventListener("change", function (event) {
    if (event.target.matches("[data-select-all]")) {
      var table = event.target.closest("table");
      table.querySelectorAll("input[name=id]").forEach(function (box) { box.checked = event.target.checked; });
    }
  });
})();
