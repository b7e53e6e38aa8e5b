// reconbench leaderboards: sortable tables (click a header) and the board's filters. No libraries.
(function () {
  "use strict";

  function cellKey(row, index, type) {
    var cell = row.cells[index];
    if (!cell) return null;
    var raw = cell.hasAttribute("data-value") ? cell.getAttribute("data-value") : cell.textContent.trim();
    if (type === "num") {
      var x = parseFloat(raw);
      return isNaN(x) ? null : x;
    }
    return raw;
  }

  // Sort the rows of a table by one column; rows without a value go last in either direction.
  function sortTable(table, index, descending) {
    var th = table.tHead.rows[0].cells[index];
    var type = th.getAttribute("data-type") || "text";
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = cellKey(a, index, type), y = cellKey(b, index, type);
      if (x === null && y === null) return 0;
      if (x === null) return 1;
      if (y === null) return -1;
      var c = type === "num" ? x - y : String(x).localeCompare(String(y));
      return descending ? -c : c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", descending ? "descending" : "ascending");
  }

  function applyFilters() {
    var selects = document.querySelectorAll("select[data-filter]");
    document.querySelectorAll("table.filterable").forEach(function (table) {
      var shown = 0;
      Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
        var keep = true;
        selects.forEach(function (s) {
          var attr = "data-" + s.getAttribute("data-filter");
          // a row that does not carry this property (a privacy row has no attack column) is not filtered by it
          if (s.value && row.hasAttribute(attr) && row.getAttribute(attr) !== s.value) keep = false;
        });
        row.hidden = !keep;
        if (keep) shown += 1;
      });
      var counter = document.querySelector('.shown[data-for="' + table.id + '"]');
      if (counter) counter.textContent = String(shown);
    });
  }

  document.querySelectorAll("table.sortable").forEach(function (table) {
    if (!table.tHead) return;
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, index) {
      th.addEventListener("click", function () {
        // numbers sort best-first (descending) on the first click, text ascending
        var first = (th.getAttribute("data-type") || "text") === "num";
        var now = th.getAttribute("aria-sort");
        var descending = now ? now === "ascending" : first;
        sortTable(table, index, descending);
      });
    });
  });
  document.querySelectorAll("select[data-filter]").forEach(function (s) { s.addEventListener("change", applyFilters); });

  window.reconbench = { sortTable: sortTable, applyFilters: applyFilters };
})();
