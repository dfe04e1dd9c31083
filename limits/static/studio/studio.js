// Stackbone Studio: the little glue htmx needs. Says why a request failed (a 403's reason, a lost
// connection) in one banner, and lets flash messages be dismissed. No inline scripts anywhere.
(function () {
  "use strict";

  function banner() { return document.getElementById("problem"); }

  function show(text, kind) {
    const el = banner();
    if (!el) return;
    el.textContent = text;
    el.dataset.kind = kind;
    if (kind === "refused") {
      const close = document.createElement("button");
      close.type = "button";
      close.className = "dismiss";
      close.setAttribute("aria-label", "Dismiss");
      close.textContent = "×";
      close.addEventListener("click", function () { el.hidden = true; });
      el.appendChild(close);
    }
    el.hidden = false;
  }

  function hideConnectionProblem() {
    const el = banner();
    if (el && el.dataset.kind === "connection") el.hidden = true;
  }

  document.addEventListener("htmx:responseError", function (event) {
    const xhr = event.detail.xhr;
    let reason = "";
    try {
      const page = new DOMParser().parseFromString(xhr.responseText, "text/html");
      const el = page.getElementById("reason");
      if (el) reason = el.textContent.trim();
    } catch (error) { /* not HTML: fall back to the status */ }
    show(reason || "The box answered " + xhr.status + " " + xhr.statusText + ". Nothing was changed by this page.", "refused");
  });

  document.addEventListener("htmx:sendError", function () {
    show("Cannot reach the box. The figures on this page may be stale; retrying every few seconds…", "connection");
  });

  document.addEventListener("htmx:afterRequest", function (event) {
    if (event.detail.successful) hideConnectionProblem();
  });

  // Live regions (data-poll-while-visible) poll every few seconds and on visibilitychange, but
  // only while the tab is visible. Decided here rather than in an hx-trigger filter, because
  // htmx evaluates filters with Function(), which the Content-Security-Policy forbids.
  //
  // Nor while the operator is editing inside the region (a key's pool size, the key filter): a
  // refresh would replace the field under their fingers. Editing means a field holds what was
  // typed but not yet sent, or the focus is in a form whose value was refused (its message must
  // stay next to it). The next poll after that goes through. (A field with hx-preserve, the key
  // filter, is never replaced, so it holds nothing back.)
  function editing(region) {
    const fields = region.querySelectorAll("input[type=text]:not([hx-preserve]), input[type=search]:not([hx-preserve]), textarea");
    for (const field of fields) {
      if (field.value !== field.defaultValue) return true;
    }
    const active = document.activeElement;
    const form = active && region.contains(active) ? active.closest("form") : null;
    return Boolean(form && form.querySelector('[aria-invalid="true"]'));
  }

  document.addEventListener("htmx:beforeRequest", function (event) {
    const elt = event.detail.elt;
    if (!elt || !elt.hasAttribute || !elt.hasAttribute("data-poll-while-visible")) return;
    if (document.visibilityState !== "visible" || editing(elt)) event.preventDefault();
  });

  // The Start run form: show the docstring of the selected workflow (each is on the page, hidden).
  document.addEventListener("change", function (event) {
    if (!event.target || event.target.id !== "start-workflow") return;
    for (const hint of document.querySelectorAll("#start-workflow-hints [data-workflow]")) {
      hint.hidden = hint.dataset.workflow !== event.target.value;
    }
  });

  document.addEventListener("click", function (event) {
    const button = event.target.closest("[data-dismiss]");
    if (button && button.parentElement.classList.contains("flash")) button.parentElement.remove();
  });
})();
