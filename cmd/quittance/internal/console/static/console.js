// Quittance console: small progressive enhancements. Every page works
// without this script.
(function () {
  "use strict";
  // A "select all" checkbox selects every row checkbox of its form.
  document.querySelectorAll("input[data-select-all]").forEach(function (all) {
    var name = all.getAttribute("data-select-all");
    all.addEventListener("change", function () {
      all.form.querySelectorAll('input[type=checkbox][name="' + name + '"]').forEach(function (box) {
        box.checked = all.checked;
      });
    });
  });
  // Show each UTC time in the reader's local time as a tooltip.
  document.querySelectorAll("time[datetime]").forEach(function (t) {
    var d = new Date(t.getAttribute("datetime"));
    if (!isNaN(d)) { t.title = d.toLocaleString(); }
  });
})();
