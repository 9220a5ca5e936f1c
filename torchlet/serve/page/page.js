// The page of `torchlet serve`: a chat box that streams from /v1/chat/completions, and the
// engine as /engine/events reports it (one JSON snapshot per event, from the engine thread).
"use strict";
const $ = (id) => document.getElementById(id);
let model = null;
const conversation = [];

fetch("/v1/models").then((r) => r.json()).then((m) => {
  model = m.data[0].id;
  $("model").textContent = `${model} (${m.data[0].owned_by})`;
});

function message(role, text) {
  const div = document.createElement("div");
  div.className = `msg ${role}`;
  div.dataset.role = role;
  div.textContent = text;
  $("messages").appendChild(div);
  $("messages").scrollTop = $("messages").scrollHeight;
  return div;
}

async function ask(question) {
  conversation.push({ role: "user", content: question });
  message("user", question);
  const answer = message("assistant", "");
  $("send").disabled = true;
  try {
    const response = await fetch("/v1/chat/completions", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ model, messages: conversation, stream: true }),
    });
    if (!response.ok) throw new Error((await response.json()).error.message);
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      const events = buffer.split("\n\n");
      buffer = events.pop();
      for (const event of events) {
        const data = event.replace(/^data: /, "");
        if (data === "[DONE]") continue;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new Error(chunk.error.message);
        const delta = chunk.choices.length ? chunk.choices[0].delta.content : null;
        if (delta) answer.textContent += delta;
      }
    }
    conversation.push({ role: "assistant", content: answer.textContent });
  } catch (e) {
    conversation.pop();
    answer.className = "msg error";
    answer.dataset.role = "error";
    answer.textContent = e.message;
  } finally {
    $("send").disabled = false;
  }
}

$("ask").addEventListener("submit", (e) => {
  e.preventDefault();
  const question = $("question").value.trim();
  if (question && model) {
    $("question").value = "";
    ask(question);
  }
});
$("question").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) {
    e.preventDefault();
    $("ask").requestSubmit();
  }
});

function ids(element, list, tables) {
  element.replaceChildren(...list.map((id) => {
    const span = document.createElement("span");
    span.textContent = id;
    const table = (tables && tables[id]) || [];
    span.title = tables ? `request ${id}: blocks [${table.join(", ")}]` : `request ${id}`;
    span.onmouseenter = () => highlight(id, table, true);
    span.onmouseleave = () => highlight(id, table, false);
    return span;
  }));
}

function highlight(id, table, on) {
  for (const b of table) {
    const cell = document.querySelector(`.block[data-block="${b}"]`);
    if (cell) cell.classList.toggle("hover", on);
  }
}

function steps(list) {
  const body = $("steps").tBodies[0];
  body.replaceChildren(...list.slice().reverse().map((s) => {
    const row = document.createElement("tr");
    const cells = [[`#${s.step}`, "n"], ...s.prefill.map((i) => [i, "p"]),
                   ...s.decode.map((i) => [i, "d"])];
    for (const [text, kind] of cells) {
      const td = document.createElement("td");
      td.textContent = text;
      td.className = kind;
      row.appendChild(td);
    }
    return row;
  }));
}

// cached: blocks no request holds that keep a prefix's K/V, in eviction order (null without
// a prefix cache).
function blocks(pool, tables, cached) {
  const grid = $("blocks");
  if (!pool) return;
  const next = {};
  (cached || []).forEach((b, i) => { next[b] = i + 1; });
  const owners = {};
  for (const [id, table] of Object.entries(tables)) {
    for (const b of table) (owners[b] = owners[b] || []).push(id);
  }
  const cells = [];
  for (let b = 0; b < pool.num_blocks; b++) {
    const cell = document.createElement("div");
    const held = owners[b] || [];
    cell.className = "block " + (b === 0 ? "null" : held.length > 1 ? "shared" :
                                 held.length ? "used" : next[b] ? "cached" : "free");
    cell.dataset.block = b;
    cell.title = b === 0 ? "block 0: the null block" :
      `block ${b}: ${held.length ? "requests " + held.join(", ") :
                     next[b] ? `cached, ${next[b]} of ${cached.length} in eviction order` : "free"}`;
    cells.push(cell);
  }
  grid.replaceChildren(...cells);
}

function render(s) {
  ids($("waiting"), s.waiting, s.tables);
  ids($("running"), s.running, s.tables);
  $("finished").textContent = Object.entries(s.finished).map(([k, v]) => `${k} ${v}`).join(", ") || "none";
  steps(s.steps);
  blocks(s.pool, s.tables, s.cached);
  let summary = `step ${s.step}, ${s.tokens_per_second.toFixed(1)} tokens/s`;
  if (s.pool) summary += `, blocks ${s.pool.num_used} used of ${s.pool.num_usable}`;
  if (s.cached) summary += `, ${s.cached.length} cached`;
  if (s.prefix && s.prefix.queried_tokens) {
    summary += `, prefix hits ${(100 * s.prefix.hit_tokens / s.prefix.queried_tokens).toFixed(0)}%`;
  }
  $("summary").textContent = summary;
}

const events = new EventSource("/engine/events");
events.onmessage = (e) => render(JSON.parse(e.data));
events.onerror = () => { $("summary").textContent = "(disconnected)"; };
