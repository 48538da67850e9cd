// Filters the rows of a client's test table by the words typed (test id, outcome or message).
(function () {
  var box = document.getElementById("filter"), rows = document.querySelectorAll("#client-tests tr[id]");
  box.addEventListener("input", function () {
    var words = box.value.toLowerCase().split(/\s+/).filter(Boolean);
    rows.forEach(function (row) {
      var text = row.textContent.toLowerCase();
      row.hidden = !words.every(function (w) { return text.indexOf(w) >= 0; });
    });
  });
})();
