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
  // A live region (data-live, with an id) is refreshed in place every few seconds. It waits while the
  // operator is busy in it: focused in a field, a field changed and not sent yet, or text selected
  // (to copy). And it keeps what a swap of its HTML would lose: the folds opened (<details>), the
  // focus, the scroll position. Elements are found again by their row's key (data-queue, data-job,
  // data-failure, data-attempt, data-worker, data-schedule, data-key) and their place in that row,
  // which a refresh keeps.
  var KEYS = ["data-queue", "data-job", "data-failure", "data-attempt", "data-worker", "data-schedule", "data-key"];
  var ROWS = KEYS.map(function (name) { return "[" + name + "]"; }).join(", ");
  var CONTROLS = "a[href], button, input, select, textarea, summary";
  function edited(field) {
    if (field.type === "checkbox" || field.type === "radio" || field.type === "hidden") { return false; }
    if (field.tagName === "SELECT") {
      return Array.prototype.some.call(field.options, function (o) { return o.selected !== o.defaultSelected; });
    }
    return field.value !== field.defaultValue;
  }
  function busy(region) {
    var active = document.activeElement;
    if (active && region.contains(active) && active.matches("input:not([type=checkbox]):not([type=radio]), select, textarea")) {
      return true;
    }
    if (Array.prototype.some.call(region.querySelectorAll("input, select, textarea"), edited)) { return true; }
    var selection = window.getSelection();
    return Boolean(selection && !selection.isCollapsed && selection.rangeCount &&
                   region.contains(selection.getRangeAt(0).commonAncestorContainer));
  }
  function within(scope, selector) {
    var found = Array.prototype.slice.call(scope.querySelectorAll(selector));
    return scope.matches(selector) ? [scope].concat(found) : found;
  }
  function place(element, region, selector) {
    var row = element.closest(ROWS);
    var key = null;
    if (row && region.contains(row)) {
      key = KEYS.filter(function (name) { return row.hasAttribute(name); })[0];
      key = [key, row.getAttribute(key)];
    } else {
      row = region;
    }
    return { key: key, index: within(row, selector).indexOf(element) };
  }
  function found(where, region, selector) {
    var row = where.key ? region.querySelector("[" + where.key[0] + '="' + CSS.escape(where.key[1]) + '"]') : region;
    return row && where.index >= 0 ? within(row, selector)[where.index] || null : null;
  }
  var kept = {};
  function live(event) {
    var region = event.detail.elt;
    return region && region.hasAttribute && region.hasAttribute("data-live") && region.id ? region : null;
  }
  // Every htmx request of these pages is a refresh. None is sent while the tab is hidden (another
  // tab in front, the window minimised): a dashboard left open costs the database nothing then. When
  // the tab is shown again, every refreshing element is asked at once (its hx-trigger lists
  // "pgqueue-shown", core.SHOWN_EVENT) rather than showing figures that old until its next period.
  document.addEventListener("htmx:beforeRequest", function (event) {
    if (document.visibilityState === "hidden") { event.preventDefault(); return; }
    var region = live(event);
    if (region && busy(region)) { event.preventDefault(); }
  });
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState !== "visible" || !window.htmx) { return; }
    document.querySelectorAll("[hx-trigger]").forEach(function (element) { window.htmx.trigger(element, "pgqueue-shown"); });
  });
  document.addEventListener("htmx:beforeSwap", function (event) {
    var region = live(event);
    if (!region) { return; }
    if (busy(region)) { event.detail.shouldSwap = false; return; }
    // A region that says so is replaced by the 404 page's too (its job finished: the page says so).
    if (event.detail.xhr.status === 404 && region.hasAttribute("data-live-gone")) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
    var active = document.activeElement;
    kept[region.id] = {
      open: Array.prototype.map.call(region.querySelectorAll("details[open]"), function (d) {
        return place(d, region, "details");
      }),
      focus: active && active !== region && region.contains(active) ? place(active, region, CONTROLS) : null,
      x: window.scrollX, y: window.scrollY
    };
  });
  document.addEventListener("htmx:afterSettle", function () {
    Object.keys(kept).forEach(function (id) {
      var state = kept[id];
      delete kept[id];
      var region = document.getElementById(id);
      if (!region) { return; }
      state.open.forEach(function (where) {
        var fold = found(where, region, "details");
        if (fold) { fold.open = true; }
      });
      var focus = state.focus && found(state.focus, region, CONTROLS);
      if (focus) { focus.focus({ preventScroll: true }); }
      if (window.scrollX !== state.x || window.scrollY !== state.y) { window.scrollTo(state.x, state.y); }
    });
  });
  // Keyboard shortcuts: "g" then a page's initial (o overview, q queues, f failed jobs, j jobs,
  // k workflows, s schedules, w workers) opens it; "/" moves to the page's first filter field. Not while typing.
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
