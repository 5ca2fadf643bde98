// Draw the request's workflow (the Mermaid text is in the page; mermaid.js is served locally).
mermaid.initialize({ startOnLoad: false, securityLevel: "strict", flowchart: { htmlLabels: false } });
mermaid.run({ querySelector: "pre.mermaid" }).then(function () {
  document.body.setAttribute("data-diagram", "rendered");
}, function (error) {
  document.body.setAttribute("data-diagram", "failed");
  console.error(error);
});
