// whichgpu recommend report: sort a table by clicking its header (inlined into the page).
(function () {
  "use strict";
  function cellValue(td) {
    var v = td.getAttribute("data-v");
    if (v !== null && v !== "") { return parseFloat(v); }
    return td.textContent.trim().toLowerCase();
  }
  function sortBy(table, col, th) {
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var asc = th.getAttribute("data-dir") !== "asc";
    rows.sort(function (a, b) {
      var x = cellValue(a.cells[col]), y = cellValue(b.cells[col]);
      var xn = typeof x === "number" && !isNaN(x), yn = typeof y === "number" && !isNaN(y);
      if (xn && yn) { return asc ? x - y : y - x; }
      if (xn !== yn) { return xn ? -1 : 1; }
      return asc ? String(x).localeCompare(String(y)) : String(y).localeCompare(String(x));
    });
    rows.forEach(function (r) { body.appendChild(r); });
    th.setAttribute("data-dir", asc ? "asc" : "desc");
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    var heads = table.tHead ? table.tHead.rows[0].cells : [];
    Array.prototype.forEach.call(heads, function (th, i) {
      th.addEventListener("click", function () { sortBy(table, i, th); });
    });
  });
  document.body.setAttribute("data-ready", "1");
})();
