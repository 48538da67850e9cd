// Client-side search over search-index.js (window.SEARCH_INDEX: [[kind, title, url], ...]); no server, works from file://.
(function () {
  var box = document.getElementById("q"), list = document.getElementById("results"), count = document.getElementById("count");
  var LIMIT = 200;
  function show() {
    var words = box.value.toLowerCase().split(/\s+/).filter(Boolean);
    list.textContent = "";
    if (!words.length) { count.textContent = ""; return; }
    var hits = window.SEARCH_INDEX.filter(function (e) {
      var text = (e[0] + " " + e[1]).toLowerCase();
      return words.every(function (w) { return text.indexOf(w) >= 0; });
    });
    count.textContent = hits.length + " found" + (hits.length > LIMIT ? ", the first " + LIMIT + " shown" : "");
    hits.slice(0, LIMIT).forEach(function (e) {
      var li = document.createElement("li"), a = document.createElement("a");
      a.href = e[2]; a.textContent = e[1];
      li.appendChild(document.createTextNode(e[0] + ": ")); li.appendChild(a); list.appendChild(li);
    });
  }
  var q = new URLSearchParams(window.location.search).get("q");
  if (q) { box.value = q; }
  box.addEventListener("input", show);
  show();
})();
