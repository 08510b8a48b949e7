// The theme chosen with the page's toggle (app.js), set before the page paints.
(function () {
  try {
    var t = localStorage.getItem("convo-theme");
    if (t === "dark" || t === "light") document.documentElement.dataset.theme = t;
  } catch (e) { /* no storage: the system's theme */ }
})();
