// Small DOM helpers the page's scripts share: building elements, one-line text cut with an
// ellipsis (the full text on hover), JSON shown whole on demand, times.
"use strict";

const $ = (id) => document.getElementById(id);
const TIP_CHARS = 4000; // a tooltip longer than this is cut: the details show the rest

function el(tag, props, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (key === "dataset") Object.assign(element.dataset, value);
    else if (value !== undefined && value !== null) element[key] = value;
  }
  element.append(...children.filter((child) => child !== null && child !== undefined));
  return element;
}

function oneLine(value) {
  return typeof value === "string" ? value : JSON.stringify(value);
}

function pretty(value) {
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

function tip(text) {
  return text.length > TIP_CHARS ? text.slice(0, TIP_CHARS) + "…" : text;
}

// One line of text: CSS cuts it with an ellipsis where it does not fit; hover shows it whole.
function clip(text, className) {
  return el("span", { className: "clip" + (className ? " " + className : ""), title: tip(text), textContent: text });
}

// A value as a one-line summary that opens into the whole pretty-printed JSON.
function expandable(label, value, className) {
  return el("details", { className: "value" + (className ? " " + className : "") },
    el("summary", {}, el("span", { className: "label" }, label), clip(oneLine(value))),
    el("pre", { textContent: pretty(value) }));
}

function clock(seconds) {
  const at = new Date(seconds * 1000);
  const hms = at.toLocaleTimeString([], { hour12: false });
  return `${hms}.${String(at.getMilliseconds()).padStart(3, "0")}`;
}
