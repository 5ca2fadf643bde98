// `make run` prints /sign-in#key=...: the key stays in the fragment (never sent to a server or
// logged); it is moved into the form and submitted, then removed from the address bar.
(function () {
  var match = /(?:^#|&)key=([^&]+)/.exec(window.location.hash);
  if (!match) return;
  history.replaceState(null, "", window.location.pathname + window.location.search);
  document.getElementById("api-key").value = decodeURIComponent(match[1]);
  document.getElementById("sign-in").submit();
})();
