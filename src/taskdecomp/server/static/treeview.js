// A tree run's plan tree on the web page: every node with its live status and its result.
// No build step, no dependencies.
//
// window.renderRunTree(container, run) draws run.tree (the field GET /runs/{id} fills for
// tree runs, null for other runs) into container as nested lists, replacing what it held;
// call it again with the run read anew to redraw. window.runTreeEvent(container, runId,
// message) applies one NodeStarted, NodeFinished or NodeDecomposed message of the run's
// event stream to what is drawn, and returns false when the tree must be read anew (the message names a
// node not drawn yet: the children of a split). window.startTreeRun(planId, nodeId) starts a
// tree run of a plan (nodeId null) or of one node's subtree and opens it. Text is set with
// textContent only, never parsed as HTML.
"use strict";

(function () {
  // A status never goes back: an event newer than the read that drew the tree wins over it.
  const RANK = { pending: 0, running: 1, decomposed: 2, ok: 3, failed: 3 };
  let live = { runId: null, nodes: new Map() }; // what the events said, by node id

  function later(a, b) {
    return (RANK[b] ?? 0) > (RANK[a] ?? 0) ? b : a;
  }

  function heard(runId) {
    if (live.runId !== runId) live = { runId, nodes: new Map() };
    return live.nodes;
  }

  function item(container, nodeId) {
    return container.querySelector(`li[data-node-id="${CSS.escape(String(nodeId))}"]`);
  }

  function setStatus(li, status) {
    li.dataset.status = status;
    const badge = li.querySelector(":scope > .tree-head > .badge");
    badge.dataset.status = status;
    badge.textContent = status;
  }

  function setResult(li, result) {
    const old = li.querySelector(":scope > .result");
    if (result === null || result === undefined) { if (old) old.remove(); return; }
    const shown = expandable("result", result, "result");
    if (old) old.replaceWith(shown); else li.querySelector(":scope > .tree-head").after(shown);
  }

  function why(node) {
    if (node.status === "failed" || (node.reason && node.status !== "ok")) {
      return [node.reason, node.message].filter(Boolean).join(": ");
    }
    return node.split ? "split: " + node.split : "";
  }

  function row(node, status) {
    const title = `[${node.id}] ${node.name}`;
    const head = el("div", { className: "tree-head" },
      el("span", { className: "badge", textContent: status, dataset: { status } }),
      clip(title, "tree-name"),
      node.leaf ? null : el("span", { className: "tree-kind", textContent: "inner" }));
    head.title = node.instruction ? `${title}\n${node.instruction}` : title;
    const li = el("li", { dataset: { nodeId: node.id, status } }, head);
    const text = why(node);
    if (text) li.append(el("p", { className: "tree-why", textContent: text, title: tip(text) }));
    li.append(el("ul"));
    return li;
  }

  function renderRunTree(container, run) {
    const nodes = heard(run.run_id);
    const tree = run.tree;
    if (!tree) { container.replaceChildren(el("p", { className: "meta", textContent: "The tree is drawn once the run has started." })); return null; }
    const opened = new Set([...container.querySelectorAll("details[open]")].map((d) => d.closest("li").dataset.nodeId));
    const top = el("ul", { className: "run-tree" });
    const drawn = new Map();
    for (const node of tree.nodes) {
      const said = nodes.get(node.id) || {};
      const status = later(node.status, said.status);
      const li = row(node, status);
      const result = node.result ?? (status === said.status ? said.result : null);
      drawn.set(node.id, li);
      (drawn.get(node.parent_id)?.querySelector(":scope > ul") || top).append(li);
      setResult(li, result);
    }
    for (const id of opened) { const li = drawn.get(Number(id)); if (li) { const d = li.querySelector(":scope > .result"); if (d) d.open = true; } }
    const heading = el("p", { className: "meta clip", textContent: `Plan #${tree.plan_id}: ${tree.title}` + (tree.root === null ? "" : ` · node ${tree.root}`) });
    container.replaceChildren(heading, top);
    return top;
  }

  function runTreeEvent(container, runId, message) {
    const data = (message.data && message.data.data) || {};
    const nodes = heard(runId);
    const said = nodes.get(data.node_id) || {};
    if (message.event === "NodeStarted") said.status = later(said.status, "running");
    else if (message.event === "NodeDecomposed") said.status = later(said.status, "decomposed");
    else if (message.event === "NodeFinished") { said.status = data.status; said.result = data.result; }
    nodes.set(data.node_id, said);
    const li = item(container, data.node_id);
    if (!li) return false;
    setStatus(li, later(li.dataset.status, said.status));
    if (message.event === "NodeFinished") setResult(li, data.result);
    if (message.event === "NodeDecomposed") return (data.children || []).every((id) => item(container, id));
    return true;
  }

  async function startTreeRun(planId, nodeId) {
    const path = nodeId === null ? `/plans/${planId}/runs` : `/plans/${planId}/nodes/${nodeId}/runs`;
    const body = { toolset: $("toolset").value, model: $("model").value, options: { decompose: $("plan-decompose").value } };
    try {
      const run = await api("POST", path, body);
      notice("");
      go("runs", run.run_id);
      refreshLists();
    } catch (error) { notice(error.message); }
  }

  window.renderRunTree = renderRunTree;
  window.runTreeEvent = runTreeEvent;
  window.startTreeRun = startTreeRun;
})();
