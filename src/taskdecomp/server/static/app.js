// The taskdecomp web page: lists runs and plans, draws a run's plan as a DAG and a plan as a
// tree, and follows their event streams live. No build step, no dependencies.
"use strict";

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
let token = sessionStorage.getItem("taskdecomp-token") || "";
let current = null; // {kind: "run"|"plan", id, stream}

function headers(extra) {
  const h = Object.assign({}, extra || {});
  if (token) h.Authorization = "Bearer " + token;
  return h;
}

function notice(text) { $("notice").textContent = text || ""; }

async function api(method, path, body) {
  const init = { method, headers: headers(body === undefined ? {} : { "Content-Type": "application/json" }) };
  if (body !== undefined) init.body = JSON.stringify(body);
  const response = await fetch(path, init);
  if (response.status === 401) { $("token-form").hidden = false; throw new Error("this server needs a token"); }
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(data.detail || response.statusText);
  return data;
}

// Server-sent events over fetch (EventSource cannot send a token). Reconnects with
// Last-Event-ID after a network error, so nothing is missed; stops on "end" or abort().
function follow(path, onMessage) {
  const state = { lastId: null, aborted: false, controller: null, ended: false };
  async function connect() {
    while (!state.aborted && !state.ended) {
      state.controller = new AbortController();
      const extra = state.lastId === null ? {} : { "Last-Event-ID": String(state.lastId) };
      try {
        const response = await fetch(path, { headers: headers(extra), signal: state.controller.signal });
        if (!response.ok) { notice((await response.json()).detail || "stream refused"); return; }
        const reader = response.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true });
          let cut;
          while ((cut = buffer.indexOf("\n\n")) >= 0) {
            const block = buffer.slice(0, cut);
            buffer = buffer.slice(cut + 2);
            const message = parse(block);
            if (!message) continue;
            if (message.id !== null) state.lastId = message.id;
            if (message.event === "end") state.ended = true;
            onMessage(message);
          }
        }
      } catch (error) {
        if (state.aborted) return;
      }
      if (!state.ended && !state.aborted) await new Promise((r) => setTimeout(r, 1000));
    }
  }
  function parse(block) {
    const message = { id: null, event: "message", data: null };
    for (const line of block.split("\n")) {
      if (line.startsWith(":")) continue;
      const at = line.indexOf(": ");
      const key = at < 0 ? line : line.slice(0, at);
      const value = at < 0 ? "" : line.slice(at + 2);
      if (key === "id") message.id = Number(value);
      else if (key === "event") message.event = value;
      else if (key === "data") message.data = JSON.parse(value);
    }
    return message.data === null ? null : message;
  }
  connect();
  return {
    abort() { state.aborted = true; if (state.controller) state.controller.abort(); },
    restart() { if (state.ended) { state.ended = false; connect(); } },
  };
}

// ---- lists -----------------------------------------------------------------------------

async function refreshLists() {
  try {
    const runs = await api("GET", "/runs?limit=50");
    const list = $("runs");
    list.replaceChildren(...runs.runs.map((run) => {
      const li = document.createElement("li");
      li.dataset.runId = run.run_id;
      li.classList.toggle("selected", current && current.kind === "run" && current.id === run.run_id);
      const badge = document.createElement("span");
      badge.className = "badge";
      badge.dataset.status = run.status;
      badge.textContent = run.status;
      li.append(badge, " " + run.goal.slice(0, 60));
      li.onclick = () => selectRun(run.run_id);
      return li;
    }));
    const plans = await api("GET", "/plans");
    $("plans").replaceChildren(...plans.plans.map((plan) => {
      const li = document.createElement("li");
      li.dataset.planId = plan.id;
      li.textContent = `#${plan.id} ${plan.title} (${plan.nodes} nodes)`;
      li.onclick = () => selectPlan(plan.id);
      return li;
    }));
  } catch (error) { notice(error.message); }
}

async function loadChoices() {
  const toolsets = await api("GET", "/toolsets");
  $("toolset").replaceChildren(...toolsets.toolsets.map((t) => new Option(t.name, t.name)));
  const models = await api("GET", "/models");
  $("model").replaceChildren(...models.models.map((m) => new Option(m, m)));
}

// ---- a run -----------------------------------------------------------------------------

function show(kind) {
  $("empty").hidden = true;
  $("run-view").hidden = kind !== "run";
  $("plan-view").hidden = kind !== "plan";
}

function stopFollowing() { if (current && current.stream) current.stream.abort(); }

async function selectRun(runId) {
  stopFollowing();
  current = { kind: "run", id: runId, states: {}, plan: null, stream: null, view: null };
  show("run");
  $("event-log").replaceChildren();
  await refreshRun();
  const mine = current;
  mine.stream = follow(`/runs/${runId}/events`, (message) => { if (current === mine) onRunEvent(message); });
  refreshLists();
}

function onRunEvent(message) {
  const data = message.data.data || {};
  const item = document.createElement("li");
  item.textContent = message.event === "end" ? "end" : `${message.id} ${message.event} ${JSON.stringify(data)}`;
  $("event-log").append(item);
  switch (message.event) {
    case "StepStarted": case "AgentTurn": setState(data.step_id, "running"); break;
    case "StepFinished": setState(data.step_id, data.ok ? "done" : "failed"); break;
    case "ApprovalDecided": clearWaiting(); refreshRun(); break;
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
  inferRunning();
}

// A step's StepStarted is stored with its checkpoint, so while a run is in flight a step
// whose dependencies are all done is shown running (it is, unless max_parallel holds it).
function inferRunning() {
  const run = current;
  if (!run || run.kind !== "run" || !run.view || run.view.status !== "running") return;
  const plan = run.view.plan || [];
  const deps = dependencies(plan);
  for (const step of plan) {
    if (run.states[step.id] && run.states[step.id] !== "pending") continue;
    if (deps[step.id].every((dep) => run.states[dep] === "done")) {
      run.states[step.id] = "running";
      const node = document.querySelector(`#dag .node[data-step-id="${CSS.escape(step.id)}"]`);
      if (node) node.dataset.state = "running";
    }
  }
}

function clearWaiting() {
  for (const [id, state] of Object.entries(current.states)) if (state === "waiting") setState(id, "pending");
}

async function refreshRun() {
  const run = current;
  if (!run || run.kind !== "run") return;
  let view;
  try { view = await api("GET", `/runs/${run.id}`); } catch (error) { notice(error.message); return; }
  if (current !== run) return;
  run.view = view;
  $("run-goal").textContent = view.goal;
  $("run-status").textContent = view.status + (view.stop_reason && view.stop_reason !== "success" ? ` (${view.stop_reason})` : "");
  $("run-status").dataset.status = view.status;
  $("run-meta").textContent = `run ${view.run_id} · toolset ${view.toolset || "-"} · ${view.usage.llm_calls} model calls · ${view.usage.tool_calls} tool calls`;
  for (const entry of view.history) if (!run.states[entry.plan_step.id]) run.states[entry.plan_step.id] = "done";
  const ids = (view.plan || []).map((s) => s.id).join(",");
  if (ids !== run.planIds) { run.planIds = ids; drawDag(view.plan || []); }
  const pending = view.status === "paused" ? view.approval : null;
  $("approval").hidden = !pending;
  if (pending) {
    $("approval-text").textContent = pending.kind === "tool"
      ? `The call of ${pending.subject.tool} in step ${pending.subject.step_id} waits for approval: ${JSON.stringify(pending.subject.args)}`
      : `The plan (${(pending.subject.plan || []).length} steps) waits for approval.`;
    if (pending.kind === "tool") setState(pending.subject.step_id, "waiting");
    else for (const step of view.plan || []) if (run.states[step.id] !== "done") setState(step.id, "waiting");
  }
  $("answer").hidden = !view.answer;
  $("answer").textContent = view.answer || "";
  const resumable = view.status === "interrupted" || (view.status === "stopped" && ["cancelled", "max_seconds"].includes(view.stop_reason));
  $("resume-run").hidden = !resumable;
  $("cancel-run").hidden = !((view.status === "running" && view.active) || view.status === "queued");
  if (view.status === "running") inferRunning();
  else for (const [id, state] of Object.entries(run.states)) if (state === "running") setState(id, "pending");
}

// What each step waits for: its depends_on in a DAG plan, else the step before it.
function dependencies(plan) {
  const dag = plan.some((s) => Array.isArray(s.depends_on));
  const deps = {};
  plan.forEach((step, index) => {
    deps[step.id] = dag ? (step.depends_on || []) : (index ? [plan[index - 1].id] : []);
  });
  return deps;
}

function levels(plan, deps) {
  const level = {};
  for (const step of plan) {
    const mine = deps[step.id];
    level[step.id] = mine.length ? 1 + Math.max(...mine.map((d) => level[d] ?? 0)) : 0;
  }
  return level;
}

function drawDag(plan) {
  const svg = $("dag");
  svg.replaceChildren();
  const defs = document.createElementNS(SVG, "defs");
  defs.innerHTML = '<marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#8893a6"/></marker>';
  svg.append(defs);
  const deps = dependencies(plan);
  const level = levels(plan, deps);
  const rows = {};
  const where = {};
  const W = 170, H = 46, GX = 50, GY = 16;
  for (const step of plan) {
    const col = level[step.id];
    const row = rows[col] = (rows[col] ?? -1) + 1;
    where[step.id] = { x: 10 + col * (W + GX), y: 10 + row * (H + GY) };
  }
  for (const step of plan) for (const dep of deps[step.id]) {
    if (!where[dep]) continue;
    const a = where[dep], b = where[step.id];
    const path = document.createElementNS(SVG, "path");
    path.setAttribute("class", "edge");
    path.setAttribute("d", `M${a.x + W},${a.y + H / 2} C${a.x + W + GX / 2},${a.y + H / 2} ${b.x - GX / 2},${b.y + H / 2} ${b.x},${b.y + H / 2}`);
    svg.append(path);
  }
  for (const step of plan) {
    const g = document.createElementNS(SVG, "g");
    g.setAttribute("class", "node");
    g.dataset.stepId = step.id;
    g.dataset.state = current.states[step.id] || "pending";
    const { x, y } = where[step.id];
    const rect = document.createElementNS(SVG, "rect");
    rect.setAttribute("x", x); rect.setAttribute("y", y);
    rect.setAttribute("width", W); rect.setAttribute("height", H);
    const title = document.createElementNS(SVG, "text");
    title.setAttribute("x", x + 8); title.setAttribute("y", y + 18);
    title.textContent = `${step.id}: ${step.title}`.slice(0, 26);
    const tool = document.createElementNS(SVG, "text");
    tool.setAttribute("x", x + 8); tool.setAttribute("y", y + 36);
    tool.textContent = (step.tool || "instruction").slice(0, 26);
    const tip = document.createElementNS(SVG, "title");
    tip.textContent = `${step.id}: ${step.title}`;
    g.append(rect, title, tool, tip);
    svg.append(g);
  }
  const cols = Math.max(0, ...Object.values(level)) + 1;
  const height = Math.max(1, ...Object.values(rows).map((r) => r + 1)) * (H + GY) + 20;
  svg.setAttribute("viewBox", `0 0 ${cols * (W + GX) + 20} ${height}`);
  svg.style.height = `${height}px`;
}

async function decide(path, body) {
  try { await api("POST", path, body); } catch (error) { notice(error.message); }
  refreshRun();
  refreshLists();
}

// ---- a plan tree -----------------------------------------------------------------------

async function selectPlan(planId) {
  stopFollowing();
  current = { kind: "plan", id: planId, stream: null };
  show("plan");
  const tree = await api("GET", `/plans/${planId}/tree`);
  $("plan-heading").textContent = `Plan #${planId}: ${tree.title}`;
  $("tree").replaceChildren();
  $("jobs").replaceChildren();
  const mine = current;
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
  const li = document.createElement("li");
  li.dataset.nodeId = node.id;
  li.dataset.position = node.position;
  li.dataset.leaf = String(node.leaf);
  li.classList.add("fresh");
  setTimeout(() => li.classList.remove("fresh"), 1500);
  const label = document.createElement("span");
  label.className = "label";
  label.textContent = `[${node.id}] ${node.name}`;
  label.title = node.instruction;
  const split = document.createElement("button");
  split.type = "button";
  split.className = "decompose";
  split.textContent = "decompose";
  split.onclick = () => api("POST", `/plans/${node.plan_id}/nodes/${node.id}/decompose`, { expand_depth: 1 }).catch((e) => notice(e.message));
  const kids = document.createElement("ul");
  li.append(label, split, kids);
  const parent = node.parent_id === null ? $("tree") : document.querySelector(`#tree li[data-node-id="${node.parent_id}"] > ul`);
  if (!parent) return;
  const after = [...parent.children].find((other) => Number(other.dataset.position) > node.position);
  parent.insertBefore(li, after || null);
}

function showJob(job) {
  let li = document.querySelector(`#jobs li[data-job-id="${job.job_id}"]`);
  if (!li) { li = document.createElement("li"); li.dataset.jobId = job.job_id; $("jobs").append(li); }
  li.dataset.state = job.state;
  li.textContent = job.summary || `${job.mode} ${job.node_id ? "of node " + job.node_id : "of the plan"}`;
}

// ---- wiring ----------------------------------------------------------------------------

$("run-form").onsubmit = async (event) => {
  event.preventDefault();
  const body = { goal: $("goal").value, toolset: $("toolset").value, model: $("model").value, strategy: $("strategy").value };
  if (body.strategy === "replan") body.replan = { approve_plan: $("approve-plan").checked };
  try { const run = await api("POST", "/runs", body); notice(""); selectRun(run.run_id); } catch (error) { notice(error.message); }
};
$("plan-form").onsubmit = async (event) => {
  event.preventDefault();
  try {
    const plan = await api("POST", "/plans", { title: $("plan-title").value, auto_decompose: $("plan-auto").checked });
    notice(""); selectPlan(plan.id); refreshLists();
  } catch (error) { notice(error.message); }
};
$("approve").onclick = () => decide(`/runs/${current.id}/approve`);
$("reject").onclick = () => decide(`/runs/${current.id}/reject`, { reason: $("reject-reason").value || "rejected on the web page" });
$("cancel-run").onclick = () => decide(`/runs/${current.id}/cancel`);
$("resume-run").onclick = async () => { await decide(`/runs/${current.id}/resume`); if (current.stream) current.stream.restart(); };
$("token-form").onsubmit = (event) => {
  event.preventDefault();
  token = $("token").value.trim();
  sessionStorage.setItem("taskdecomp-token", token);
  $("token-form").hidden = true;
  notice("");
  loadChoices().then(refreshLists);
};

loadChoices().then(refreshLists).catch((error) => notice(error.message));
setInterval(refreshLists, 2000);
