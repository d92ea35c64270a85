// Talking to the service: JSON requests that carry the tab's token, and server-sent events
// read through fetch (EventSource cannot send a token).
"use strict";

let token = sessionStorage.getItem("taskdecomp-token") || "";

function setToken(value) {
  token = value;
  sessionStorage.setItem("taskdecomp-token", token);
}

function headers(extra) {
  const h = Object.assign({}, extra || {});
  if (token) h.Authorization = "Bearer " + token;
  return h;
}

function notice(text) { document.getElementById("notice").textContent = text || ""; }

// Every request but a GET carries a JSON body ({} when there is nothing to say): the server
// takes no other body from a browser.
async function api(method, path, body) {
  const init = { method, headers: headers() };
  if (method !== "GET") {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body === undefined ? {} : body);
  }
  const response = await fetch(path, init);
  if (response.status === 401) {
    document.getElementById("token-form").hidden = false;
    throw new Error("this server needs a token");
  }
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(data.detail || `${response.status} ${response.statusText}`);
  return data;
}

// Reconnects with Last-Event-ID after a network error, so nothing is missed; stops on "end"
// or abort().
function follow(path, onMessage) {
  const state = { lastId: null, aborted: false, controller: null, ended: false };
  async function connect() {
    while (!state.aborted && !state.ended) {
      state.controller = new AbortController();
      const extra = state.lastId === null ? {} : { "Last-Event-ID": String(state.lastId) };
      try {
        const response = await fetch(path, { headers: headers(extra), signal: state.controller.signal });
        if (!response.ok) {
          notice((await response.json().catch(() => ({}))).detail || "the event stream was refused");
          return;
        }
        await read(response.body.getReader());
      } catch (error) {
        if (state.aborted) return;
      }
      if (!state.ended && !state.aborted) await new Promise((r) => setTimeout(r, 1000));
    }
  }
  async function read(reader) {
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const message = parse(buffer.slice(0, cut));
        buffer = buffer.slice(cut + 2);
        if (!message) continue;
        if (message.id !== null) state.lastId = message.id;
        if (message.event === "end") state.ended = true;
        onMessage(message);
      }
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
