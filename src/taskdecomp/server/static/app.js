// The taskdecomp web page: lists runs and plans, shows one at its own URL (#/runs/ID,
// #/plans/ID), draws a run's plan as a DAG and a plan as a tree, and follows their event
// streams live. No build step, no dependencies.
"use strict";

let current = null; // {kind: "run"|"plan", id, stream, ...}
const older = { runs: [], cursor: null, loaded: false }; // pages past the first, once asked for

// ---- routes ------------------------------------------------------------------------------

function route() {
  const match = /^#\/(runs|plans)\/([^/]+)$/.exec(location.hash);
  if (!match) { stopFollowing(); current = null; show(null); return; }
  const id = decodeURIComponent(match[2]);
  if (current && current.kind + "s" === match[1] && String(current.id) === id) return;
  if (match[1] === "runs") selectRun(id); else selectPlan(Number(id));
}

function go(kind, id) { location.hash = `#/${kind}/${encodeURIComponent(id)}`; }

function show(kind) {
  $("empty").hidden = kind !== null;
  $("run-view").hidden = kind !== "run";
  $("plan-view").hidden = kind !== "plan";
  document.body.dataset.view = kind || "";
  for (const li of document.querySelectorAll(".list li")) markSelected(li);
}

function markSelected(li) {
  const mine = current && (current.kind === "run" ? li.dataset.runId === current.id : li.dataset.planId === String(current.id));
  li.classList.toggle("selected", Boolean(mine));
}

function stopFollowing() { if (current && current.stream) current.stream.abort(); }

// ---- lists -------------------------------------------------------------------------------

function runItem(run) {
  const li = el("li", { dataset: { runId: run.run_id }, onclick: () => go("runs", run.run_id) },
    el("span", { className: "badge", textContent: run.status, dataset: { status: run.status } }),
    clip(run.goal, "goal"));
  markSelected(li);
  return li;
}

async function refreshLists() {
  try {
    const runs = await api("GET", "/runs?limit=50");
    if (!older.loaded) older.cursor = runs.next_cursor || null;
    const first = new Set(runs.runs.map((run) => run.run_id));
    const rest = older.runs.filter((run) => !first.has(run.run_id));
    $("runs").replaceChildren(...[...runs.runs, ...rest].map(runItem));
    $("older-runs").hidden = !older.cursor;
    const plans = await api("GET", "/plans");
    $("plans").replaceChildren(...plans.plans.map((plan) => {
      const li = el("li", { dataset: { planId: plan.id }, onclick: () => go("plans", plan.id) },
        clip(`#${plan.id} ${plan.title} (${plan.nodes} nodes)`, "goal"));
      markSelected(li);
      return li;
    }));
  } catch (error) { notice(error.message); }
}

async function loadOlderRuns() {
  try {
    const page = await api("GET", `/runs?limit=50&cursor=${encodeURIComponent(older.cursor)}`);
    older.loaded = true;
    older.runs.push(...page.runs);
    older.cursor = page.next_cursor || null;
    refreshLists();
  } catch (error) { notice(error.message); }
}

async function loadChoices() {
  const toolsets = await api("GET", "/toolsets");
  $("toolset").replaceChildren(...toolsets.toolsets.map((t) => new Option(t.name, t.name)));
  const models = await api("GET", "/models");
  $("model").replaceChildren(...models.models.map((m) => new Option(m, m)));
}

// ---- a run -------------------------------------------------------------------------------

async function selectRun(runId) {
  stopFollowing();
  const mine = current = { kind: "run", id: runId, states: {}, stream: null, view: null };
  show("run");
  for (const part of ["event-log", "steps", "dag", "run-tree"]) $(part).replaceChildren();
  $("event-count").textContent = "0";
  await refreshRun();
  if (mine !== current || !mine.view) return;
  mine.stream = follow(`/runs/${encodeURIComponent(runId)}/events`, (message) => { if (current === mine) onRunEvent(message); });
}

function onRunEvent(message) {
  const data = (message.data && message.data.data) || {};
  $("event-log").append(eventRow(message));
  $("event-count").textContent = String($("event-log").children.length);
  switch (message.event) {
    case "StepStarted": case "AgentTurn": setState(data.step_id, "running"); break;
    case "StepFinished": setState(data.step_id, data.ok ? "done" : "failed"); refreshRun(); break;
    case "ApprovalDecided": clearWaiting(); refreshRun(); break;
    case "NodeStarted": case "NodeFinished": case "NodeDecomposed":
      if (!window.runTreeEvent($("run-tree"), current.id, message)) refreshRun();
      break;
    case "PlanCreated": case "PlanRevised": case "ApprovalRequested": case "RunStopped": case "end":
      refreshRun(); break;
    default: break;
  }
}

function setState(stepId, state) {
  if (!stepId) return;
  current.states[stepId] = state;
  const node = document.querySelector(`#dag .node[data-step-id="${CSS.escape(stepId)}"]`);
  if (node) node.dataset.state = state;
  const badge = document.querySelector(`#steps li[data-step-id="${CSS.escape(stepId)}"] .badge`);
  if (badge) { badge.dataset.status = state; badge.textContent = state; }
  inferRunning();
}

// A step's StepStarted is stored with its checkpoint, so while a run is in flight a step
// whose dependencies are all done is shown running (it is, unless max_parallel holds it).
function inferRunning() {
  const run = current;
  if (!run || run.kind !== "run" || !run.view || run.view.status !== "running") return;
  if (isTreeRun(run.view)) return; // its nodes say themselves when they start
  const plan = run.view.plan || [];
  const deps = dependencies(plan);
  for (const step of plan) {
    if (run.states[step.id] && run.states[step.id] !== "pending") continue;
    if (deps[step.id].every((dep) => run.states[dep] === "done")) setState(step.id, "running");
  }
}

function clearWaiting() {
  for (const [id, state] of Object.entries(current.states)) if (state === "waiting") setState(id, "pending");
}

// One request at a time per run: events that ask for a refresh meanwhile get one more after it.
function refreshRun() {
  const run = current;
  if (!run || run.kind !== "run") return Promise.resolve();
  if (run.loading) { run.again = true; return run.loading; }
  run.loading = (async () => {
    do { run.again = false; await loadRun(run); } while (run.again && current === run);
    run.loading = null;
  })();
  return run.loading;
}

async function loadRun(run) {
  let view;
  try { view = await api("GET", `/runs/${encodeURIComponent(run.id)}`); } catch (error) { notice(error.message); return; }
  if (current !== run) return;
  notice("");
  run.view = view;
  renderRunHeader(view);
  for (const entry of view.trace) if (!entry.ok) run.states[entry.step_id] = "failed";
  for (const entry of view.history) run.states[entry.plan_step.id] = "done"; // a resume redid it
  const ids = (view.plan || []).map((s) => s.id).join(",");
  if (ids !== run.planIds && !isTreeRun(view)) { run.planIds = ids; drawDag($("dag"), view.plan || [], run.states, pickStep); }
  renderApproval(view, run);
  if (view.status === "running") inferRunning();
  else for (const [id, state] of Object.entries(run.states)) if (state === "running") setState(id, "pending");
  renderSteps(view, run.states);
  renderStop(view);
  renderUsage(view);
  showWorkflow(view);
  showRunTree(view);
  $("answer").hidden = !view.answer;
  $("answer").textContent = view.answer || "";
  const resumable = view.status === "interrupted" || (view.status === "stopped" && ["cancelled", "max_seconds"].includes(view.stop_reason));
  $("resume-run").hidden = !resumable;
  $("cancel-run").hidden = !((view.status === "running" && view.active) || view.status === "queued");
}

function renderRunHeader(view) {
  $("run-goal").textContent = view.goal;
  $("run-status").textContent = view.status;
  $("run-status").dataset.status = view.status;
  const strategy = (view.config && view.config.strategy) || "plan_execute";
  const started = view.started_at ? new Date(view.started_at * 1000).toLocaleString() : "";
  $("run-meta").textContent = [`run ${view.run_id}`, `toolset ${view.toolset || "-"}`, strategy, view.model, started].filter(Boolean).join(" · ");
  $("run-meta").title = $("run-meta").textContent;
}

function renderApproval(view, run) {
  const pending = view.status === "paused" ? view.approval : null;
  $("approval").hidden = !pending;
  if (!pending) return;
  const steps = pending.subject.plan || [];
  $("approval-text").textContent = pending.kind === "tool"
    ? `The call of ${pending.subject.tool} in step ${pending.subject.step_id} waits for approval: ${JSON.stringify(pending.subject.args)}`
    : isTreeRun(view)
      ? `A split waits for approval before its ${steps.length} subtasks run: ${steps.map((s) => s.title).join(", ")}.`
      : `The plan (${steps.length} steps) waits for approval.`;
  if (pending.kind === "tool") setState(pending.subject.step_id, "waiting");
  else for (const step of view.plan || []) if (run.states[step.id] !== "done") setState(step.id, "waiting");
}

// Workflow runs (their view has "workflow") are drawn by workflow.js's renderWorkflow.
function showWorkflow(view) {
  const box = $("workflow");
  const shown = Boolean(view.workflow) && typeof window.renderWorkflow === "function";
  box.hidden = !shown;
  if (shown) window.renderWorkflow(box, view);
}

function isTreeRun(view) {
  return Boolean(view.tree) || (view.config && view.config.strategy) === "tree";
}

// Tree runs are drawn by treeview.js's renderRunTree: their plan tree, not a DAG of steps.
function showRunTree(view) {
  const shown = isTreeRun(view) && typeof window.renderRunTree === "function";
  $("dag").parentElement.hidden = shown;
  $("run-tree").hidden = !shown;
  if (shown) window.renderRunTree($("run-tree"), view);
}

function pickStep(stepId) {
  const row = document.getElementById("step-" + stepId);
  if (!row) return;
  row.scrollIntoView({ block: "nearest" });
  row.classList.add("picked");
  setTimeout(() => row.classList.remove("picked"), 1200);
}

async function decide(action, body) {
  const run = current;
  try { await api("POST", `/runs/${encodeURIComponent(run.id)}/${action}`, body); } catch (error) { notice(error.message); }
  refreshRun();
  refreshLists();
}

// ---- a plan tree -------------------------------------------------------------------------

async function selectPlan(planId) {
  stopFollowing();
  const mine = current = { kind: "plan", id: planId, stream: null };
  show("plan");
  $("tree").replaceChildren();
  $("jobs").replaceChildren();
  let tree;
  try { tree = await api("GET", `/plans/${planId}/tree`); } catch (error) { notice(error.message); return; }
  if (mine !== current) return;
  $("plan-heading").textContent = `Plan #${planId}: ${tree.title}`;
  $("run-plan").onclick = () => window.startTreeRun(planId, null);
  mine.stream = follow(`/plans/${planId}/events`, (message) => { if (current === mine) onPlanEvent(message); });
}

function onPlanEvent(message) {
  const data = message.data;
  if (message.event === "node") addNode(data);
  else if (message.event === "removed") for (const id of data.node_ids) document.querySelector(`#tree li[data-node-id="${id}"]`)?.remove();
  else if (message.event === "decomposition") showJob(data);
}

function addNode(node) {
  if (document.querySelector(`#tree li[data-node-id="${node.id}"]`)) return;
  const split = el("button", { type: "button", className: "decompose", textContent: "decompose" });
  split.onclick = () => api("POST", `/plans/${node.plan_id}/nodes/${node.id}/decompose`, { expand_depth: 1 }).catch((e) => notice(e.message));
  const run = el("button", { type: "button", className: "run", textContent: "run" });
  run.onclick = () => window.startTreeRun(node.plan_id, node.id);
  const label = el("span", { className: "label", textContent: `[${node.id}] ${node.name}`, title: node.instruction });
  const li = el("li", { className: "fresh", dataset: { nodeId: node.id, position: node.position, leaf: String(node.leaf) } },
    label, split, run, el("ul"));
  setTimeout(() => li.classList.remove("fresh"), 1500);
  const parent = node.parent_id === null ? $("tree") : document.querySelector(`#tree li[data-node-id="${node.parent_id}"] > ul`);
  if (!parent) return;
  const after = [...parent.children].find((other) => Number(other.dataset.position) > node.position);
  parent.insertBefore(li, after || null);
}

function showJob(job) {
  let li = document.querySelector(`#jobs li[data-job-id="${job.job_id}"]`);
  if (!li) { li = el("li", { dataset: { jobId: job.job_id } }); $("jobs").append(li); }
  li.dataset.state = job.state;
  li.textContent = job.summary || `${job.mode} ${job.node_id ? "of node " + job.node_id : "of the plan"}`;
}

// ---- wiring ------------------------------------------------------------------------------

$("run-form").onsubmit = async (event) => {
  event.preventDefault();
  const body = { goal: $("goal").value, toolset: $("toolset").value, model: $("model").value, strategy: $("strategy").value };
  if (body.strategy === "replan") body.replan = { approve_plan: $("approve-plan").checked };
  try { const run = await api("POST", "/runs", body); notice(""); go("runs", run.run_id); refreshLists(); } catch (error) { notice(error.message); }
};
$("plan-form").onsubmit = async (event) => {
  event.preventDefault();
  try {
    const plan = await api("POST", "/plans", { title: $("plan-title").value, auto_decompose: $("plan-auto").checked });
    notice(""); go("plans", plan.id); refreshLists();
  } catch (error) { notice(error.message); }
};
$("approve").onclick = () => decide("approve", {});
$("reject").onclick = () => decide("reject", { reason: $("reject-reason").value || "rejected on the web page" });
$("cancel-run").onclick = () => decide("cancel", {});
$("resume-run").onclick = async () => { const run = current; await decide("resume", {}); if (run.stream) run.stream.restart(); };
$("older-runs").onclick = loadOlderRuns;
$("token-form").onsubmit = (event) => {
  event.preventDefault();
  setToken($("token").value.trim());
  $("token-form").hidden = true;
  notice("");
  loadChoices().then(refreshLists).then(() => { current = null; route(); });
};
window.addEventListener("hashchange", route);

loadChoices().then(refreshLists).catch((error) => notice(error.message));
route();
setInterval(refreshLists, 2000);
