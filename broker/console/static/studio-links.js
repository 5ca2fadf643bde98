// Studio's elements move between screens through callbacks (a row's "Edit", an instance's
// "View", the viewer's "Edit definition"); the console answers each with its own page.
(function () {
  "use strict";
  const routes = {
    editWorkflowDefinition: (id) => "/workflows/" + encodeURIComponent(id),
    viewWorkflowInstance: (id) => "/instances/" + encodeURIComponent(id),
  };
  for (const element of document.querySelectorAll("[data-studio-callbacks]")) {
    const wanted = element.getAttribute("data-studio-callbacks").split(" ").filter(Boolean);
    customElements.whenDefined(element.localName).then(() => {
      for (const name of wanted) {
        const route = routes[name];
        if (route) element[name] = (id) => window.location.assign(route(String(id)));
      }
    });
  }
})();
