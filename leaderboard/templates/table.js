/* Sortable, filterable tables: click a header to sort; filter by text and claim type. */
(function () {
  "use strict";

  function sortKey(row, index, numeric) {
    var cell = row.cells[index];
    var raw = cell.hasAttribute("data-sort") ? cell.getAttribute("data-sort") : cell.textContent.trim();
    if (!numeric) return raw.toLowerCase();
    var value = parseFloat(raw);
    return isNaN(value) ? null : value;
  }

  function sortBy(table, header) {
    var headers = table.tHead.rows[0].cells;
    var index = Array.prototype.indexOf.call(headers, header);
    var numeric = header.getAttribute("data-type") === "num";
    var ascending = header.getAttribute("aria-sort") !== "ascending";
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows).map(function (row, position) {
      return { row: row, key: sortKey(row, index, numeric), position: position };
    });
    rows.sort(function (a, b) {
      if (a.key === null || b.key === null) {
        if (a.key === b.key) return a.position - b.position;
        return a.key === null ? 1 : -1;
      }
      var order = numeric ? a.key - b.key : a.key.localeCompare(b.key);
      if (!ascending) order = -order;
      return order || a.position - b.position;
    });
    rows.forEach(function (item) { body.appendChild(item.row); });
    Array.prototype.forEach.call(headers, function (th) { th.setAttribute("aria-sort", "none"); });
    header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
  }

  function applyFilters(table, box) {
    var textInput = box.querySelector('[data-filter="text"]');
    var claimSelect = box.querySelector('[data-filter="claim"]');
    var text = textInput ? textInput.value.trim().toLowerCase() : "";
    var claim = claimSelect ? claimSelect.value : "";
    var shown = 0;
    var rows = table.tBodies[0].rows;
    Array.prototype.forEach.call(rows, function (row) {
      var visible = (!text || row.textContent.toLowerCase().indexOf(text) !== -1) &&
        (!claim || row.getAttribute("data-claim") === claim);
      row.hidden = !visible;
      if (visible) shown += 1;
    });
    var count = box.querySelector("[data-count]");
    if (count) count.textContent = shown + " of " + rows.length + " rows";
  }

  document.querySelectorAll("table.sortable").forEach(function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (header) {
      header.addEventListener("click", function () { sortBy(table, header); });
    });
    var box = document.querySelector('[data-filters-for="' + table.id + '"]');
    if (!box) return;
    box.querySelectorAll("[data-filter]").forEach(function (control) {
      control.addEventListener("input", function () { applyFilters(table, box); });
      control.addEventListener("change", function () { applyFilters(table, box); });
    });
    applyFilters(table, box);
  });
})();
