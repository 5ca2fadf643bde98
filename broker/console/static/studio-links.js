// Studio's elements move between screens through callbacks (a row's "Edit", an instance's
// "View", the viewer's "Edit definition"); the console answers each with its own page.
(function () {
  "use strict";
  const routes = {
    editWorkflowDefinition: (id) => "/workflows/" + encodeURIComponent(id),
    viewWorkflowInstance: (id) => "/instances/" + encodeURIComponent(id),
  };
  // Without a router of its own, Studio's NavigationManager only rewrites the address (Run leads
  // to /workflows/instances/{id}/view): a move to another path loads the page the console serves
  // there, while a change of the query string (a list's paging) stays on the page.
  for (const method of ["pushState", "replaceState"]) {
    const original = history[method].bind(history);
    history[method] = function (state, title, url) {
      if (url !== undefined && url !== null) {
        const target = new URL(String(url), window.location.href);
        if (target.origin === window.location.origin && target.pathname !== window.location.pathname) {
          window.location.assign(target.href);
          return;
        }
      }
      original(state, title, url);
    };
  }
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
