// A run's plan drawn as a DAG in SVG: one column per dependency level, each step a box whose
// labels are shortened with an ellipsis until they fit (the full text is the box's tooltip).
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const BOX = { W: 190, H: 46, GX: 46, GY: 16, PAD: 8 };

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

// Sets `text` on an SVG <text>, cut with an ellipsis at the longest prefix that fits `width`
// pixels as rendered (the element must be in a displayed document to be measured).
function fitText(element, text, width) {
  element.textContent = text;
  if (element.getComputedTextLength() <= width) return;
  let low = 0, high = text.length;
  while (low < high) {
    const mid = Math.ceil((low + high) / 2);
    element.textContent = text.slice(0, mid).trimEnd() + "…";
    if (element.getComputedTextLength() <= width) low = mid; else high = mid - 1;
  }
  element.textContent = text.slice(0, low).trimEnd() + "…";
}

function svgElement(name, attributes) {
  const element = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes || {})) element.setAttribute(key, value);
  return element;
}

function drawDag(svg, plan, states, onPick) {
  svg.replaceChildren();
  const defs = svgElement("defs");
  defs.innerHTML = '<marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#8893a6"/></marker>';
  svg.append(defs);
  const deps = dependencies(plan);
  const level = levels(plan, deps);
  const rows = {};
  const where = {};
  const { W, H, GX, GY } = BOX;
  for (const step of plan) {
    const col = level[step.id];
    const row = rows[col] = (rows[col] ?? -1) + 1;
    where[step.id] = { x: 10 + col * (W + GX), y: 10 + row * (H + GY) };
  }
  for (const step of plan) for (const dep of deps[step.id]) {
    if (!where[dep]) continue;
    const a = where[dep], b = where[step.id];
    svg.append(svgElement("path", {
      class: "edge",
      d: `M${a.x + W},${a.y + H / 2} C${a.x + W + GX / 2},${a.y + H / 2} ${b.x - GX / 2},${b.y + H / 2} ${b.x},${b.y + H / 2}`,
    }));
  }
  const cols = Math.max(0, ...Object.values(level)) + 1;
  const width = cols * (W + GX) - GX + 20;
  const height = Math.max(1, ...Object.values(rows).map((r) => r + 1)) * (H + GY) - GY + 20;
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.style.width = `${width}px`;
  svg.style.height = `${height}px`;
  for (const step of plan) node(svg, step, where[step.id], states[step.id] || "pending", onPick);
}

function node(svg, step, at, state, onPick) {
  const { W, H, PAD } = BOX;
  const g = svgElement("g", { class: "node", tabindex: "0" });
  g.dataset.stepId = step.id;
  g.dataset.state = state;
  const tip = svgElement("title");
  tip.textContent = `${step.id}: ${step.title}\n${step.tool || "instruction"} ${JSON.stringify(step.args || {})}`;
  const rect = svgElement("rect", { x: at.x, y: at.y, width: W, height: H });
  const title = svgElement("text", { x: at.x + PAD, y: at.y + 18, class: "title" });
  const tool = svgElement("text", { x: at.x + PAD, y: at.y + 36, class: "tool" });
  g.append(tip, rect, title, tool);
  g.onclick = () => onPick(step.id);
  g.onkeydown = (event) => { if (event.key === "Enter") onPick(step.id); };
  svg.append(g); // in the document first: a label is measured as rendered
  fitText(title, `${step.id}: ${step.title}`, W - 2 * PAD);
  fitText(tool, step.tool || "instruction", W - 2 * PAD);
}
