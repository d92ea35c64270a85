// The run view's parts drawn from `GET /runs/{id}`: why a run stopped, each step with its
// arguments, result and trace, the usage, and the event log as readable rows.
"use strict";

// What a stop reason's family means, in a line (docs/stop-reasons.md has them all).
const STOPS = {
  invalid_plan: "the model's plan was refused before any tool ran",
  invalid_replan: "the replanner's answer was refused",
  invalid_action: "an executor agent's action was refused; the tool was not called",
  max_execute_steps: "the plan has more steps than the budget allows",
  max_tool_calls: "the tool-call budget is spent",
  max_seconds: "the run's deadline passed; work in flight was cancelled",
  max_llm_calls: "the model-call budget is spent",
  max_tokens: "the token budget is spent",
  max_cost: "the cost budget is spent",
  max_iterations: "the rounds are spent",
  llm_timeout: "the model did not answer in time",
  llm_empty: "the model returned an empty answer",
  llm_error: "the model call failed",
  tool_denied: "the tool is not on the allowlist",
  tool_missing: "no toolset provides the tool",
  tool_bad_args: "the step's arguments do not match the tool's schema",
  tool_error: "the tool failed",
  tool_timeout: "the tool ran too long",
  loop_detected: "the same tool was called twice with the same arguments",
  cancelled: "the run was cancelled; it can be resumed",
  interrupted_unknown_outcome: "an unsafe step started and left no result; a human decides",
  approval_rejected: "a human rejected it",
  bad_ref: "a step's reference does not resolve",
  unavailable: "the worker has no toolset or model of this name",
  poisoned: "its worker died running it too often",
  invalid_tree: "the plan tree cannot be worked through; nothing ran",
  node_failed: "this node failed after its retries and splits, and with it the run's root",
};

function stopMeaning(reason) {
  return STOPS[(reason || "").split(":")[0]] || "";
}

function renderStop(view) {
  const box = $("run-stop");
  const interrupted = view.status === "interrupted";
  box.hidden = !(interrupted || view.status === "stopped");
  if (box.hidden) return;
  const reason = interrupted ? "interrupted" : view.stop_reason;
  const meaning = interrupted ? "the process that ran it ended; resume it" : stopMeaning(reason);
  const failed = (view.trace || []).filter((entry) => !entry.ok && entry.error);
  const message = view.message || (failed.length ? failed[failed.length - 1].error : "");
  const parts = [el("p", {}, el("strong", { id: "stop-reason", textContent: reason }),
    meaning ? " · " + meaning : "", view.llm_phase ? ` (model call: ${view.llm_phase})` : "")];
  if (message) parts.push(el("p", { id: "stop-message", textContent: message }));
  if (view.raw_plan !== null && view.raw_plan !== undefined) parts.push(expandable("the model's answer", view.raw_plan));
  box.replaceChildren(...parts);
}

function renderUsage(view) {
  const u = view.usage || {};
  const parts = [`${u.llm_calls ?? 0} model calls`, `${u.tool_calls ?? 0} tool calls`,
    `${u.tokens_in ?? 0}+${u.tokens_out ?? 0} tokens`, u.cost_usd == null ? "cost unknown" : `$${u.cost_usd.toFixed(4)}`,
    seconds(u.seconds)];
  $("run-usage").textContent = parts.join(" · ");
}

// The steps of the current plan, then any finished under an earlier plan (a replan).
function stepRows(view) {
  const plan = view.plan || [];
  const seen = new Set(plan.map((step) => step.id));
  const earlier = (view.history || []).map((entry) => entry.plan_step).filter((step) => !seen.has(step.id));
  return [...plan, ...earlier];
}

function renderSteps(view, states) {
  const results = {};
  for (const entry of view.history || []) results[entry.plan_step.id] = entry;
  const traces = {};
  for (const entry of view.trace || []) (traces[entry.step_id] = traces[entry.step_id] || []).push(entry);
  // Drawn anew as the run goes on: what the reader opened stays open.
  const opened = new Set([...document.querySelectorAll("#steps details[open]")].map(detailKey));
  $("steps").replaceChildren(...stepRows(view).map((step) => stepRow(step, states[step.id] || "pending", results[step.id], traces[step.id] || [])));
  for (const details of document.querySelectorAll("#steps details")) details.open = opened.has(detailKey(details));
}

function detailKey(details) {
  return details.closest("li").dataset.stepId + " " + details.className;
}

function stepRow(step, state, result, trace) {
  const head = el("div", { className: "step-head" },
    el("span", { className: "badge", textContent: state, dataset: { status: state } }),
    clip(`${step.id}: ${step.title}`, "step-title"),
    clip(step.tool || "instruction", "step-tool"));
  const body = [expandable("args", step.tool ? (step.args || {}) : (step.instruction || ""), "args")];
  if (result) body.push(expandable("result", result.observation, "result"));
  for (const entry of trace) {
    const line = [entry.ok ? "ok" : "failed", seconds(entry.seconds), `args ${entry.args_hash}`];
    if (entry.stop_reason) line.push(entry.stop_reason);
    body.push(el("div", { className: "trace" + (entry.ok ? "" : " failed") },
      el("span", { className: "label", textContent: "trace" }), clip(line.join(" · ")),
      entry.error ? el("p", { className: "error", textContent: entry.error }) : null));
  }
  return el("li", { id: "step-" + step.id, dataset: { stepId: step.id } }, head, ...body);
}

function seconds(value) {
  return `${Number(value || 0).toFixed(3)} s`;
}

// ---- events ------------------------------------------------------------------------------

function scalars(data) {
  return Object.entries(data || {})
    .filter(([, value]) => value === null || typeof value !== "object")
    .map(([key, value]) => `${key}=${value}`).join(" · ");
}

function eventSummary(kind, data) {
  switch (kind) {
    case "ModelCalled": return `${data.phase} ${data.ok ? "ok" : "failed"} · ${data.tokens_in}+${data.tokens_out} tokens · ${seconds(data.seconds)}`;
    case "StepStarted": return `${data.step_id} → ${data.tool || "instruction"}`;
    case "StepFinished": return `${data.step_id} ${data.tool || ""} ${data.ok ? "ok" : "failed"}${data.error ? ": " + data.error : ""}`;
    case "RunStopped": return `${data.status} · ${data.stop_reason}`;
    case "NodeStarted": return `node ${data.node_id} ${data.name}${data.leaf ? "" : " (its children)"}`;
    case "NodeFinished": return `node ${data.node_id} ${data.status}${data.error ? ": " + data.error : ""}`;
    case "NodeDecomposed": return `node ${data.node_id} → ${(data.children || []).join(", ")}: ${data.reason}`;
    case "end": return `the stream ended: ${data.status}`;
    default: return scalars(data);
  }
}

function eventRow(message) {
  const kind = message.event;
  const record = message.data || {};
  const data = kind === "end" ? record : (record.data || {});
  return el("li", { dataset: { kind, seq: message.id ?? "" } },
    el("details", {},
      el("summary", {},
        el("time", { textContent: record.at ? clock(record.at) : "" }),
        el("span", { className: "kind", textContent: kind }),
        clip(eventSummary(kind, data), "what")),
      el("pre", { textContent: pretty(record) })));
}
