// A workflow run's phases and tasks, for the web page. No build step, no dependencies.
//
// window.renderWorkflow(container, run) draws run.workflow (the field GET /runs/{id} fills
// for workflow runs, null for other runs) into container, replacing what it held, and
// returns the drawn element (null when the run is no workflow run). Call it again with the
// run read anew to redraw. Text is set with textContent only, never parsed as HTML.
"use strict";

(function () {
  const TASK_COLUMNS = [
    ["id", "id"], ["title", "title"], ["status", "status"],
    ["attempts", "tries"], ["feedback", "last feedback"], ["commit", "commit"],
  ];
  const HISTORY_COLUMNS = [
    ["no", "#"], ["phase", "phase"], ["task", "task"], ["attempt", "try"],
    ["changed", "changed"], ["result", "result"],
  ];

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  // Text that may be cut by CSS (with an ellipsis): the full text stays on hover.
  function cell(tag, className, text) {
    const shown = text === undefined || text === null || text === "" ? "-" : String(text);
    const node = el(tag, className, shown);
    node.title = shown;
    return node;
  }

  function asText(value) {
    if (value === undefined || value === null) return "";
    if (Array.isArray(value)) return value.join(", ");
    return typeof value === "string" ? value : JSON.stringify(value);
  }

  function phases(flow) {
    const list = el("ol", "wf-phases");
    list.setAttribute("aria-label", "phases");
    for (const phase of flow.phases || []) {
      const item = el("li", "wf-phase");
      item.dataset.phase = phase.name;
      item.dataset.state = phase.state;
      if (phase.type) item.dataset.type = phase.type;
      item.appendChild(cell("span", "wf-phase-name", phase.name));
      if (phase.runs > 0) item.appendChild(el("span", "wf-runs", "×" + phase.runs));
      const about = [phase.name, phase.type ? "(" + phase.type + ")" : "", phase.state];
      if (phase.description) about.push("— " + phase.description);
      if (phase.next && phase.next.length) about.push("→ " + phase.next.join(", "));
      item.title = about.filter(Boolean).join(" ");
      list.appendChild(item);
    }
    return list;
  }

  function table(className, label, columns, rows, decorate) {
    const wrap = el("div", "wf-scroll");
    const grid = el("table", className);
    grid.setAttribute("aria-label", label);
    const head = grid.createTHead().insertRow();
    for (const [, title] of columns) head.appendChild(el("th", "", title));
    const body = grid.createTBody();
    for (const row of rows) {
      const line = body.insertRow();
      for (const [key] of columns) line.appendChild(cell("td", "wf-col-" + key, asText(row[key])));
      decorate(line, row);
    }
    wrap.appendChild(grid);
    return wrap;
  }

  function tasks(flow) {
    const rows = (flow.tasks || []).map((task) =>
      Object.assign({}, task, { commit: task.commit ? task.commit.slice(0, 12) : null }));
    return table("wf-tasks", "tasks", TASK_COLUMNS, rows, (line, task) => {
      line.dataset.taskId = task.id;
      line.dataset.status = task.status;
    });
  }

  function history(flow) {
    const rows = (flow.history || []).map((entry) => {
      const changed = asText(entry.changed);
      const outside = asText(entry.out_of_scope);
      return Object.assign({}, entry, {
        changed: outside ? changed + " (out of scope: " + outside + ")" : changed,
      });
    });
    for (const entry of flow.in_flight || []) {
      rows.push(Object.assign({}, entry, { result: "in flight", inFlight: true }));
    }
    const box = el("details", "wf-history");
    box.appendChild(el("summary", "", "phase runs (" + rows.length + ")"));
    box.appendChild(table("wf-runs-table", "phase runs", HISTORY_COLUMNS, rows, (line, row) => {
      line.dataset.phase = row.phase || "";
      if (row.inFlight) line.dataset.inFlight = "true";
    }));
    return box;
  }

  function heading(run, flow) {
    const head = el("div", "wf-head");
    head.appendChild(cell("strong", "wf-name", flow.name || flow.workflow || "workflow"));
    if (flow.name && flow.workflow && flow.workflow !== flow.name) {
      head.appendChild(el("span", "wf-dim", "(" + flow.workflow + ")"));
    }
    head.appendChild(el("span", "wf-dim", "phase"));
    head.appendChild(cell("span", "wf-current", flow.phase));
    const passed = (flow.tasks || []).filter((task) => task.status === "passed").length;
    head.appendChild(el("span", "wf-dim", passed + " of " + (flow.tasks || []).length + " tasks passed"));
    if (run.stop_reason && run.status !== "ok") {
      head.appendChild(cell("span", "wf-stop", run.stop_reason + (run.message ? ": " + run.message : "")));
    }
    return head;
  }

  window.renderWorkflow = function renderWorkflow(container, run) {
    container.replaceChildren();
    const flow = run && run.workflow;
    if (!flow) return null;
    const root = el("section", "wf");
    root.dataset.runId = run.run_id || "";
    root.appendChild(heading(run, flow));
    root.appendChild(el("h3", "", "Phases"));
    root.appendChild(phases(flow));
    root.appendChild(el("h3", "", "Tasks"));
    if ((flow.tasks || []).length) root.appendChild(tasks(flow));
    else root.appendChild(el("p", "wf-dim wf-empty", "no task list yet"));
    root.appendChild(history(flow));
    container.appendChild(root);
    return root;
  };
})();
