// The annotation page: sign in with an API key (kept in sessionStorage only), read the
// workspace's runs and feedback over REST, follow new events over the WebSocket stream (no
// polling), and give feedback with forms generated from the registered feedback types, as
// give_feedback commands over the same socket. A command keeps its command_id until it is
// answered, so a double click, a resend or a reconnect records it once (the service is
// idempotent by command id).
//
// Or work through an annotation queue (docs/ui.md, "Queues"): the server leases one item at a
// time to the signed-in person (`POST .../queues/{name}/next`); their verdict goes under the
// lease (`.../submit`, recorded once) and the next item follows; `s` gives the item back
// (`.../skip`). A blind queue shows no one else's verdict on the item.

import { buildForm } from "./form.js";

const $ = (selector) => document.querySelector(selector);
const API = new URL("../v1/", location.href);
const SESSION = "feedback-streams.session";
const RUN_PAGE = 50;

const state = {
  key: null, workspaceId: null, me: null, types: [],
  runs: new Map(),          // run_id -> {runId, rule, scope, time, status, output, firing}
  feedback: new Map(),      // run_id -> [envelope of feedback_given on it]
  seen: new Set(),          // event ids applied (REST pages and the stream overlap)
  selected: null,
  drafts: new Map(),        // `${run_id}|${type}` -> value being edited
  pending: new Map(),       // command_id -> {frame, runId, type}
  socket: null, cursor: null, retry: 0, connected: false, closedByUs: false,
  queues: new Map(),        // name -> the queue as listed (its definition)
  queue: null,              // the queue being worked through, or null (all runs)
  lease: null,              // the item it leased to me: {item, target, request_id, ends_ms}
  ahead: null,              // {queue, item, promise}: the item after it, leased while I judge
  doneHere: 0,              // verdicts submitted through queues since sign-in
  runsCursor: null,         // the next (older) page of runs, or null when all are read
  turns: [],                // ms from a submit to the next item shown (for tests)
};
let current = null;         // the open item's form: {runId, type, api, fieldIndex, lease}

// -- session --------------------------------------------------------------------------------

function saveSession() {
  sessionStorage.setItem(SESSION, JSON.stringify({ key: state.key,
    workspaceId: state.workspaceId, cursor: state.cursor,
    pending: [...state.pending.values()].map((p) => p.frame) }));
}

function loadSession() {
  try { return JSON.parse(sessionStorage.getItem(SESSION) || "null"); } catch { return null; }
}

async function api(path, options = {}) {
  const response = await fetch(new URL(path, API), { ...options, headers: {
    ...(options.headers || {}), authorization: `Bearer ${state.key}` } });
  let body = null;
  try { body = await response.json(); } catch { /* an empty or non-JSON answer */ }
  if (!response.ok) {
    const error = new Error(body?.error?.message || `HTTP ${response.status}`);
    error.code = body?.error?.code || String(response.status);
    error.fields = body?.error?.fields || [];
    throw error;
  }
  return body;
}

const wsPath = (rest) => `workspaces/${encodeURIComponent(state.workspaceId)}/${rest}`;

// -- the log, folded into what the page shows -----------------------------------------------

function runOf(envelope) {
  const run = envelope.event || {};
  return run.run_id;
}

function apply(envelope) {
  if (state.seen.has(envelope.event_id)) return false;
  state.seen.add(envelope.event_id);
  const type = envelope.event_type;
  const event = envelope.event || {};
  if (type === "run_started") {
    const known = state.runs.get(event.run_id);
    state.runs.set(event.run_id, { ...(known || {}), runId: event.run_id, rule: event.rule,
      action: event.action, scope: event.scope || {}, time: envelope.time,
      firing: event.firing_id, correlation: envelope.correlation_id,
      status: known?.status || "running", started: envelope });
    return true;
  }
  if (type === "run_succeeded" || type === "run_dead_lettered") {
    const known = state.runs.get(event.run_id) || { runId: event.run_id, rule: event.rule,
      time: envelope.time, scope: {} };
    known.status = type === "run_succeeded" ? "succeeded" : "dead-lettered";
    known.output = event.output ?? event.error;
    state.runs.set(event.run_id, known);
    return true;
  }
  if (type === "feedback_given" && event.target?.kind === "run") {
    const list = state.feedback.get(event.target.run_id) || [];
    list.push(envelope);
    state.feedback.set(event.target.run_id, list);
    return true;
  }
  return false;
}

function judgedByMe(runId) {
  return (state.feedback.get(runId) || []).some(
    (f) => participantOf(f.actor) === state.me?.participant);
}

function participantOf(actor) {
  if (!actor) return "?";
  if (actor.kind === "system") return "system";
  if (actor.kind === "evaluator") return `evaluator:${actor.name}@${actor.version ?? "0"}`;
  return `${actor.kind}:${actor.id}`;
}

// -- the queue ------------------------------------------------------------------------------

function visibleRuns() {
  const rule = $("#rule-filter").value;
  const unjudged = $("#unjudged-filter").checked;
  return [...state.runs.values()]
    .filter((r) => r.rule && (!rule || r.rule === rule) && (!unjudged || !judgedByMe(r.runId)))
    .sort((a, b) => (b.time || "").localeCompare(a.time || ""));
}

function renderQueue(fresh = new Set()) {
  const rules = [...new Set([...state.runs.values()].map((r) => r.rule).filter(Boolean))].sort();
  const select = $("#rule-filter");
  const chosen = select.value;
  select.replaceChildren(new Option("all rules", ""), ...rules.map((r) => new Option(r, r)));
  select.value = rules.includes(chosen) ? chosen : "";
  const runs = visibleRuns();
  $("#queue-count").textContent = `(${runs.length})`;
  const list = $("#queue");
  list.replaceChildren(...runs.map((run) => {
    const item = document.createElement("li");
    item.dataset.runId = run.runId;
    item.tabIndex = -1;
    item.setAttribute("role", "option");
    item.setAttribute("aria-selected", String(run.runId === state.selected));
    if (fresh.has(run.runId)) item.classList.add("new");
    const judged = judgedByMe(run.runId);
    item.innerHTML = `<div class="rule"></div><div class="meta"></div>` +
      (judged ? `<div class="judged">judged by you</div>` : "");
    item.querySelector(".rule").textContent = run.rule;
    item.querySelector(".meta").textContent =
      `${run.status || "running"} · ${(run.time || "").replace("T", " ").slice(0, 19)} · ${run.runId}`;
    item.addEventListener("click", () => select_(run.runId));
    return item;
  }));
  list.setAttribute("role", "listbox");
}

function move(step) {
  const runs = visibleRuns();
  if (!runs.length) return;
  const at = runs.findIndex((r) => r.runId === state.selected);
  const next = runs[Math.max(0, Math.min(runs.length - 1, at < 0 ? 0 : at + step))];
  select_(next.runId);
}

// -- one item -------------------------------------------------------------------------------

function pre(value) {
  const node = document.createElement("pre");
  node.textContent = JSON.stringify(value, null, 2);
  return node;
}

function section(title, ...children) {
  const node = document.createElement("section");
  const h = document.createElement("h3");
  h.textContent = title;
  node.append(h, ...children);
  return node;
}

async function select_(runId) {
  state.selected = runId;
  renderQueue();
  $(`#queue li[data-run-id="${CSS.escape(runId)}"]`)?.scrollIntoView({ block: "nearest" });
  const run = state.runs.get(runId);
  const article = $("#item");
  const title = document.createElement("h2");
  title.textContent = `${run.rule} · ${runId}`;
  article.replaceChildren(title);
  let record = null;
  try {
    record = await api(wsPath(`runs/${encodeURIComponent(runId)}`));
  } catch (error) {
    const p = document.createElement("p");
    p.className = "error";
    p.textContent = `could not read the run: ${error.message}`;
    article.append(p);
  }
  if (state.selected !== runId) return;
  // Its feedback (events it caused): others' verdicts were not read at sign-in.
  for (const emitted of record?.emitted || []) apply(emitted);
  article.append(section("Scope", pre(run.scope || {})));
  if (record) {
    article.append(section("What made it fire", pre(record.matched.map(
      (e) => ({ type: e.event_type, time: e.time, data: e.event })))));
    article.append(section("What it emitted", pre(record.emitted.map(
      (e) => ({ type: e.event_type, data: e.event })))));
  }
  article.append(section("Output", pre(run.output ?? "(still running)")));
  article.append(renderFeedback(runId));
  renderForm(article, runId);
}

function renderFeedback(runId) {
  const given = state.feedback.get(runId) || [];
  const table = document.createElement("table");
  table.id = "given";
  table.innerHTML = "<thead><tr><th scope='col'>who</th><th scope='col'>type</th>" +
    "<th scope='col'>value</th></tr></thead><tbody></tbody>";
  const people = given.filter((f) => f.actor?.kind === "user");
  const others = given.filter((f) => f.actor?.kind !== "user");
  for (const f of [...people, ...others]) {
    const row = table.tBodies[0].insertRow();
    row.insertCell().textContent = participantOf(f.actor);
    row.insertCell().textContent = f.event.feedback_type;
    row.insertCell().textContent = JSON.stringify(f.event.value);
  }
  if (!given.length) {
    const row = table.tBodies[0].insertRow();
    const cell = row.insertCell();
    cell.colSpan = 3;
    cell.textContent = "no feedback yet";
  }
  return section("Feedback given (people first, then each evaluator version)", table);
}

function renderForm(article, runId, lease = null) {
  // In a queue: the item's kind, and only the feedback types the queue takes (its first
  // one chosen); otherwise every type that can be given on a run.
  const kind = lease ? lease.target.kind : "run";
  const taken = lease ? state.queue.definition.feedback_types : null;
  const types = state.types.filter((t) => t.targets.includes(kind)
    && (!taken || taken.includes(t.name)))
    .sort((a, b) => (taken ? taken.indexOf(a.name) - taken.indexOf(b.name) : 0));
  if (!types.length) return;
  const box = document.createElement("section");
  box.id = "give";
  const h = document.createElement("h3");
  h.textContent = "Your feedback";
  const label = document.createElement("label");
  label.htmlFor = "feedback-type";
  label.textContent = "Feedback type";
  const choose = document.createElement("select");
  choose.id = "feedback-type";
  for (const t of types) choose.append(new Option(t.name, t.name));
  const preferred = !lease && current?.type && types.some((t) => t.name === current.type)
    ? current.type : types[0].name;
  choose.value = preferred;
  const holder = document.createElement("div");
  const status = document.createElement("p");
  status.className = "status";
  status.id = "submit-status";
  status.setAttribute("role", "status");
  box.append(h, label, choose, holder, status);
  article.append(box);

  function build(typeName) {
    const type = types.find((t) => t.name === typeName);
    const key = `${runId}|${typeName}`;
    const pair = typeName === "pairwise_preference" ? lease?.pair : null;
    const shown = buildForm(pair ? PREFERENCE_FORM : type.json_schema,
      { prefix: "fb", draft: state.drafts.get(key) || {} });
    const built = pair ? preferenceForm(shown, pair) : shown;
    built.form.addEventListener("input", () => state.drafts.set(key, shown.read().value));
    built.form.addEventListener("change", () => state.drafts.set(key, shown.read().value));
    built.form.addEventListener("submit", (event) => { event.preventDefault(); submit(); });
    holder.replaceChildren(built.form);
    current = { runId, type: typeName, api: built, fieldIndex: 0, status, lease };
    focusField(0);
    const waiting = [...state.pending.values()].find((p) => p.runId === runId && p.type === typeName);
    if (waiting) setStatus("pending", "sending…");
  }
  choose.addEventListener("change", () => build(choose.value));
  build(preferred);
}

function setStatus(kind, text) {
  if (!current) return;
  current.status.className = `status ${kind}`;
  current.status.textContent = text;
  const button = current.api.form.querySelector(".submit");
  button.disabled = kind === "pending";
}

function focusField(index) {
  if (!current) return;
  const rows = [...current.api.form.querySelectorAll(".field")];
  if (!rows.length) return;
  current.fieldIndex = Math.max(0, Math.min(rows.length - 1, index));
  rows.forEach((row, i) => row.classList.toggle("current", i === current.fieldIndex));
}

function submit() {
  if (!current) return;
  if (current.lease) { submitLeased(); return; }
  const { runId, type, api: form } = current;
  // A command already on its way for this item: a second click sends nothing new.
  if ([...state.pending.values()].some((p) => p.runId === runId && p.type === type)) return;
  const { value, missing } = form.read();
  if (missing.length) {
    form.showErrors(missing.map((name) => ({ path: ["value", name], message: "required" })));
    return;
  }
  form.clearErrors();
  const commandId = `ui_${crypto.randomUUID()}`;
  const frame = { type: "command", command_id: commandId, command: { type: "give_feedback",
    feedback_type: type, target: { kind: "run", run_id: runId }, value } };
  state.pending.set(commandId, { frame, runId, type });
  saveSession();
  setStatus("pending", "sending…");
  send(frame);
}

function answered(frame) {
  const pending = state.pending.get(frame.command_id);
  if (!pending) return;
  state.pending.delete(frame.command_id);
  saveSession();
  const here = current && current.runId === pending.runId && current.type === pending.type;
  if (frame.type === "outcome") {
    state.drafts.delete(`${pending.runId}|${pending.type}`);
    if (here) {
      const seq = frame.outcome.seq;
      setStatus("recorded", `recorded as ${frame.outcome.id} (partition ${seq.partition}, ` +
        `offset ${seq.offset})`);
    }
  } else if (here) {
    current.api.showErrors(frame.error.fields?.length ? frame.error.fields
      : [{ path: null, message: frame.error.message }]);
    setStatus("failed", `${frame.error.code}: ${frame.error.message}`);
  }
}

// -- queues ---------------------------------------------------------------------------------

function renderQueueChoice() {
  const select = $("#queue-choice");
  const chosen = state.queue?.queue || "";
  const names = [...state.queues.keys()].sort();
  select.replaceChildren(new Option("all runs (pick any)", ""),
    ...names.map((name) => new Option(`${name} (${state.queues.get(name).definition
      .feedback_types.join(", ")})`, name)));
  select.value = names.includes(chosen) ? chosen : "";
}

function progress(text) { $("#queue-progress").textContent = text; }

function row(list, term, value) {
  const dt = document.createElement("dt");
  dt.textContent = term;
  const dd = document.createElement("dd");
  dd.textContent = typeof value === "string" ? value : JSON.stringify(value);
  list.append(dt, dd);
}

function fields(pairs) {
  const list = document.createElement("dl");
  list.className = "fields";
  for (const [term, value] of pairs) {
    if (value !== undefined && value !== null && value !== "") row(list, term, value);
  }
  return list;
}

function asJson(title, value) {
  const box = document.createElement("details");
  const summary = document.createElement("summary");
  summary.textContent = title;
  box.append(summary, pre(value));
  return box;
}

async function chooseQueue(name) {
  const queue = name ? state.queues.get(name) : null;
  state.queue = queue || null;
  state.lease = null;
  state.ahead = null;       // a lease taken ahead runs out on its own
  current = null;
  $("#queue-team").textContent = "";
  $("#run-filters").hidden = Boolean(queue);
  $("#queue").hidden = Boolean(queue);
  $("#queue-count").hidden = Boolean(queue);
  $("#older-runs").hidden = Boolean(queue) || !state.runsCursor;
  $("#queue-hint").hidden = !queue;
  if (!queue) {
    progress("");
    const hint = document.createElement("p");
    hint.className = "meta";
    hint.textContent = "Pick a run from the queue.";
    $("#item").replaceChildren(hint);
    renderQueue();
    return;
  }
  await nextItem();
}

// The next item is leased while the person judges this one (`next?besides=<this item>`), and
// its run read, so that after a submit the page shows it without waiting for the server: a
// turn costs the submit's round trip and the drawing. The lease taken ahead is only used
// while it has a minute left; otherwise (and at a queue's end) the page asks again.
function leaseAhead(queue, lease) {
  const path = `queues/${encodeURIComponent(queue.queue)}/next?besides=`
    + encodeURIComponent(lease.item);
  const promise = api(wsPath(path), { method: "POST" }).then(async (answer) => (
    answer.lease ? { lease: answer.lease, record: await readItem(answer.lease, queue) }
      : null))
    .catch(() => null);
  state.ahead = { queue, item: lease.item, promise };
}

async function readItem(lease, queue = state.queue) {
  // The item's record (a run's, a firing's or a chain's), or the error reading it (shown in
  // its place); in a queue of pairs, with the two verdicts to compare (`pair`), both read
  // at once.
  const { kind } = lease.target;
  const id = lease.item.slice(kind.length + 1);
  const route = { run: "runs", firing: "firings", chain: "chains" }[kind];
  const pairPath = queue?.definition.enters.pairs
    ? `queues/${encodeURIComponent(queue.queue)}/pair/${encodeURIComponent(lease.item)}`
    : null;
  try {
    const [record, pair] = await Promise.all([
      api(wsPath(`${route}/${encodeURIComponent(id)}`)),
      pairPath ? api(wsPath(pairPath)) : null]);
    return pair ? { ...record, pair } : record;
  } catch (error) {
    return { error };
  }
}

// A queue of pairs: the two versions' verdicts side by side, as "1" and "2" (which version
// is which stays hidden in a blind queue; half the items show b first).
function pairSection(pair, blind) {
  const box = document.createElement("div");
  box.className = "pair";
  box.id = "pair";
  pair.shown.forEach((side, i) => {
    const version = side.side === "a" ? pair.a : pair.b;
    const card = document.createElement("section");
    card.className = "pair-side";
    card.dataset.side = String(i + 1);
    const h = document.createElement("h3");
    h.textContent = blind ? `Verdict ${i + 1}` : `Verdict ${i + 1}: ${version}`;
    card.append(h, side.value ? fields(Object.entries(side.value))
      : Object.assign(document.createElement("p"), { className: "meta",
        textContent: "no verdict from this version" }));
    box.append(card);
  });
  return section(`Which ${pair.feedback_type} verdict is better?`, box);
}

// The form of a pairwise_preference: which of the two shown is better, and a note. The
// answer is mapped back to the queue's versions (a, b) on reading.
const PREFERENCE_FORM = {
  title: "Your preference", type: "object", required: ["preferred"],
  properties: {
    preferred: { title: "Better", enum: ["1", "2", "tie"],
      description: "1 and 2 as shown above; tie when neither is better" },
    note: { title: "Note", anyOf: [{ type: "string" }, { type: "null" }] },
  },
};

function preferenceForm(built, pair) {
  return { ...built, read() {
    const { value, missing } = built.read();
    const chosen = value.preferred === "tie" || value.preferred === undefined
      ? value.preferred : pair.shown[Number(value.preferred) - 1].side;
    const out = { a: pair.a, b: pair.b, preferred: chosen };
    if (value.note !== undefined) out.note = value.note;
    return { value: out, missing };
  } };
}

const when = (envelope) => (envelope.time || "").replace("T", " ").slice(0, 19);

// Verdicts, in what a run caused: feedback given on it, an evaluator's recorded verdicts
// (`streams:verdict`, a shadow version's included). A blind queue shows none of them.
const VERDICT_EVENTS = new Set(["feedback_given", "streams:verdict"]);

function verdictOutput(output) {
  // An evaluator run's output is its verdict (and its shadow's): value, evaluator, version.
  return Boolean(output && typeof output === "object" && "evaluator" in output);
}

function runParts(record, id, blind) {
  const run = record.run.event || {};
  const ended = record.emitted.find((e) => e.event.run_id === id
    && ["run_succeeded", "run_failed", "run_dead_lettered"].includes(e.event_type));
  const output = ended?.event.output ?? ended?.event.error;
  const parts = [section("The run", fields([
    ["rule", run.rule], ["action", run.action], ["started", when(record.run)],
    ["status", ended ? ended.event_type.replace("run_", "").replace("_", "-") : "running"],
    ["output", blind && verdictOutput(output)
      ? "an evaluator's verdict (hidden: blind review)" : output],
    ...Object.entries(run.scope || {}).map(([k, v]) => [`scope: ${k}`, v]),
  ]))];
  if (record.matched.length) {
    parts.push(section("What made it fire", fields(record.matched.map(
      (e) => [e.event_type, e.event.data ?? e.event]))));
  }
  const emitted = blind ? record.emitted.filter((e) => !VERDICT_EVENTS.has(e.event_type)
    && !(e.event_type === "run_succeeded" && verdictOutput(e.event.output)))
    : record.emitted;
  parts.push(asJson("all events as JSON", { run: record.run, matched: record.matched, emitted }));
  return parts;
}

function firingParts(record) {
  const fired = record.firing.event || {};
  const parts = [section("The firing", fields([
    ["rule", fired.rule], ["fired", when(record.firing)],
    ["matched", `${record.matched.length} event${record.matched.length === 1 ? "" : "s"}`],
    ["runs started", record.runs.map((e) => e.event.run_id).join(", ") || "none"],
  ]))];
  if (record.matched.length) {
    parts.push(section("What made it fire", fields(record.matched.map(
      (e) => [e.event_type, e.event.data ?? e.event]))));
  }
  parts.push(asJson("all events as JSON", record));
  return parts;
}

function chainParts(record, blind) {
  // A blind queue leaves the verdicts given in the chain out.
  const events = blind ? record.events.filter((e) => !VERDICT_EVENTS.has(e.event_type)
    && !(e.event_type === "run_succeeded" && verdictOutput(e.event.output)))
    : record.events;
  const [first] = events;
  const last = events[events.length - 1];
  const parts = [section("The chain", fields([
    ["events", record.count > record.events.length
      ? `${record.count} (the first ${record.events.length} read)` : String(record.count)],
    ["began", first ? `${first.event_type} at ${when(first)}` : ""],
    ["last", last && last !== first ? `${last.event_type} at ${when(last)}` : ""],
  ]))];
  parts.push(section("Its events", fields(events.slice(0, 30).map(
    (e) => [e.event_type, `${when(e)} ${JSON.stringify(e.event.data ?? e.event)}`]))));
  parts.push(asJson("all events as JSON", { ...record, events }));
  return parts;
}

async function nextItem(started = null) {
  const queue = state.queue;
  if (!queue) return;
  const ahead = state.ahead?.queue === queue ? await state.ahead.promise : null;
  state.ahead = null;
  let answer;
  let record;
  if (ahead && ahead.lease.ends_ms - Date.now() > 60000) {
    answer = { lease: ahead.lease };
    record = ahead.record;
  } else {
    progress(`${queue.queue}: asking for your next item…`);
    try {
      answer = await api(wsPath(`queues/${encodeURIComponent(queue.queue)}/next`),
        { method: "POST" });
    } catch (error) {
      progress(`${queue.queue}: ${error.code}: ${error.message}`);
      return;
    }
  }
  if (state.queue !== queue) return;
  state.lease = answer.lease;
  if (!answer.lease) {
    current = null;
    state.selected = null;
    const done = document.createElement("p");
    done.className = "meta";
    done.id = "queue-empty";
    done.textContent = `Nothing left for you in ${queue.queue}.`;
    $("#item").replaceChildren(done);
    progress(`${queue.queue}: ${state.doneHere} judged here; nothing left for you`);
    teamProgress(queue);
    return;
  }
  await showLeased(answer.lease, record);
  if (started !== null) state.turns.push(Math.round(performance.now() - started));
  const until = new Date(answer.lease.ends_ms).toLocaleTimeString();
  progress(`${queue.queue}: ${state.doneHere} judged here; this item is yours until ${until}`);
  if (state.lease === answer.lease) leaseAhead(queue, answer.lease);
  teamProgress(queue);
}

// Where the queue stands for the whole team (done / in review / left), read after each turn
// and when the queue runs out, off the turn's clock.
async function teamProgress(queue) {
  let counts;
  try {
    counts = await api(wsPath(`queues/${encodeURIComponent(queue.queue)}/progress`));
  } catch (error) {
    return;  // the count is a courtesy: the item on screen does not depend on it
  }
  if (state.queue !== queue) return;
  $("#queue-team").textContent = `The team: ${counts.done} done, ${counts.in_review} in `
    + `review, ${counts.left} left of ${counts.items} (${counts.verdicts} verdicts).`;
}

async function showLeased(lease, read = undefined) {
  current = null;
  const { kind } = lease.target;
  const id = lease.item.slice(kind.length + 1);
  const blind = Boolean(state.queue.definition.blind);
  // Live updates of others' verdicts reach the open item only when the queue is not blind.
  state.selected = kind === "run" && !blind ? id : null;
  const article = $("#item");
  const title = document.createElement("h2");
  title.textContent = `${kind} · ${id}`;
  title.dataset.item = lease.item;
  const parts = [title];
  try {
    const record = read === undefined || read === null ? await readItem(lease) : read;
    if (record.error) throw record.error;
    if (record.pair) {
      lease.pair = record.pair;
      parts.push(pairSection(record.pair, blind));
    }
    parts.push(...(kind === "run" ? runParts(record, id, blind)
      : kind === "firing" ? firingParts(record) : chainParts(record, blind)));
  } catch (error) {
    const p = document.createElement("p");
    p.className = "error";
    p.textContent = `could not read the ${kind}: ${error.message}`;
    parts.push(p);
  }
  if (state.lease !== lease) return;
  article.replaceChildren(...parts);
  if (blind) {
    const note = document.createElement("p");
    note.className = "meta";
    note.id = "blind-note";
    note.textContent = "Blind review: other people's and evaluators' verdicts stay hidden.";
    article.append(note);
  } else if (kind === "run") {
    article.append(renderFeedback(id));
  }
  renderForm(article, id, lease);
  // Keys go to the item, not to the queue chooser or a field of the last item.
  article.tabIndex = -1;
  article.focus({ preventScroll: true });
}

async function submitLeased() {
  const { lease, type, api: form } = current;
  if (current.sending) return;
  const { value, missing } = form.read();
  if (missing.length) {
    form.showErrors(missing.map((name) => ({ path: ["value", name], message: "required" })));
    return;
  }
  form.clearErrors();
  current.sending = true;
  setStatus("pending", "sending…");
  const started = performance.now();
  const here = current;
  try {
    const answer = await api(wsPath(`queues/${encodeURIComponent(state.queue.queue)}/submit`), {
      method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify({ request_id: lease.request_id, command: { type: "give_feedback",
        feedback_type: type, target: lease.target, value } }) });
    state.drafts.delete(`${here.runId}|${type}`);
    state.doneHere += 1;
    setStatus("recorded", `recorded as ${answer.outcome.id}`);
    await nextItem(started);
  } catch (error) {
    here.sending = false;
    if (current !== here) return;
    if (error.code === "conflict" && /is not running/.test(error.message)) {
      // The lease ran out before the submit: the item went back to the queue for someone
      // else, and is never handed to this person again. Nothing was recorded; move on.
      state.drafts.delete(`${here.runId}|${type}`);
      await nextItem();
      if (state.queue) progress(`${state.queue.queue}: your lease on ${lease.item} ran out before you `
        + "submitted; it went back to the queue and nothing was recorded");
      return;
    }
    here.api.showErrors(error.fields?.length ? error.fields
      : [{ path: null, message: error.message }]);
    setStatus("failed", `${error.code}: ${error.message}`);
  }
}

async function skipLeased() {
  const lease = state.lease;
  if (!lease || !state.queue) return;
  try {
    await api(wsPath(`queues/${encodeURIComponent(state.queue.queue)}/skip`), {
      method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify({ item: lease.item, request_id: lease.request_id }) });
  } catch (error) {
    progress(`${state.queue.queue}: ${error.code}: ${error.message}`);
    return;
  }
  await nextItem();
}

// -- the stream -----------------------------------------------------------------------------

function send(frame) {
  if (state.socket && state.socket.readyState === WebSocket.OPEN && state.connected) {
    state.socket.send(JSON.stringify(frame));
  } // else: sent again on (re)connect, from state.pending
}

function setConnection(text) { $("#connection").textContent = text; }

function connect() {
  const url = new URL(wsPath("stream"), API);
  url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  const socket = new WebSocket(url);
  state.socket = socket;
  state.connected = false;
  setConnection("connecting…");
  socket.addEventListener("open", () => {
    socket.send(JSON.stringify({ type: "auth", token: state.key }));
    const from = state.cursor ? Object.fromEntries(
      Object.entries(state.cursor).map(([p, o]) => [p, o])) : "end";
    socket.send(JSON.stringify({ type: "subscribe", from }));
  });
  socket.addEventListener("message", (message) => {
    let frame;
    try { frame = JSON.parse(message.data); } catch { return; }
    if (frame.type === "subscribed") {
      state.connected = true;
      state.retry = 0;
      state.cursor = state.cursor || frame.from;
      saveSession();
      setConnection("live");
      // What was sent before the drop (or never sent) goes again, with its command_id.
      for (const pending of state.pending.values()) socket.send(JSON.stringify(pending.frame));
      return;
    }
    if (frame.type === "event") {
      const envelope = { ...frame.envelope, seq: frame.seq };
      const changed = apply(envelope);
      state.cursor = { ...(state.cursor || {}), [frame.seq.partition]: frame.seq.offset + 1 };
      socket.send(JSON.stringify({ type: "ack", seq: frame.seq }));
      saveSession();
      if (changed) refreshAfter(envelope);
      return;
    }
    if (frame.type === "outcome" || (frame.type === "error" && frame.command_id)) {
      answered(frame);
      return;
    }
    if (frame.type === "error") {
      setConnection(`error: ${frame.error.code}: ${frame.error.message}`);
      if (frame.error.code === "unauthorized" || frame.error.code === "forbidden") {
        state.closedByUs = true;
        signOut(`${frame.error.code}: ${frame.error.message}`);
      }
    }
  });
  socket.addEventListener("close", (event) => {
    state.connected = false;
    if (state.socket !== socket || state.closedByUs) return;
    const delay = Math.min(10000, 250 * 2 ** state.retry++);
    setConnection(`disconnected (${event.reason || event.code}); reconnecting in ` +
      `${(delay / 1000).toFixed(1)} s`);
    setTimeout(() => { if (state.socket === socket && !state.closedByUs) connect(); }, delay);
  });
}

function refreshAfter(envelope) {
  const runId = runOf(envelope) || envelope.event?.target?.run_id;
  renderQueue(envelope.event_type === "run_started" ? new Set([runId]) : new Set());
  if (runId && runId === state.selected) {
    const article = $("#item");
    const old = article.querySelector("section:has(#given)");
    if (old) old.replaceWith(renderFeedback(runId));
  }
}

// -- loading and signing in -----------------------------------------------------------------

async function loadWorkspace() {
  const [me, types, queues] = await Promise.all([api(wsPath("me")),
    api(wsPath("feedback-types")), api(wsPath("queues")).catch(() => ({ queues: [] }))]);
  state.me = me;
  state.types = types.feedback_types;
  state.queues = new Map(queues.queues.map((q) => [q.queue, q]));
  renderQueueChoice();
  offerNewQueue();
  $("#who").textContent = `${me.participant} in ${state.workspaceId}`;
  // Subscribe first (from the end), then read what is there: the overlap is deduplicated by
  // event id, so nothing between the two is missed.
  connect();
  // One page of the newest runs (older ones on demand: "Older runs"), and the signed-in
  // person's own feedback (for "not yet judged by me"); others' feedback on a run is read
  // with the run when it is opened. So signing in costs a page, whatever the workspace
  // holds. Runs started meanwhile are newer than the first page and come in on the
  // subscription, so paging on neither skips nor repeats one.
  state.runsCursor = null;
  await olderRuns();
  const mine = `participant=${encodeURIComponent(me.participant)}`;
  for (let cursor = null; ;) {
    const after = cursor ? `&cursor=${encodeURIComponent(cursor)}` : "";
    const page = await api(wsPath(`feedback?${mine}&limit=1000${after}`));
    for (const f of page.feedback) apply(f);
    cursor = page.next_cursor;
    if (!cursor) break;
  }
  renderQueue();
}

async function olderRuns() {
  // The next page of runs, older than those shown (the first page at sign-in).
  const after = state.runsCursor ? `&cursor=${encodeURIComponent(state.runsCursor)}` : "";
  const page = await api(wsPath(`runs?limit=${RUN_PAGE}${after}`));
  for (const run of page.runs) {
    apply(run.run);
    for (const emitted of run.emitted) apply(emitted);   // its run_succeeded, its feedback
  }
  state.runsCursor = page.next_cursor;
  $("#older-runs").hidden = !state.runsCursor;
}

// -- a new queue (a key that may manage queues) ---------------------------------------------

function offerNewQueue() {
  // A template to edit: the first type's runs, blind, two people per item.
  const may = (state.me?.capabilities || []).includes("manage_queues");
  $("#new-queue").hidden = !may;
  if (!may || $("#new-queue-json").value) return;
  const type = state.types.find((t) => t.targets.includes("run")
    && t.name !== "pairwise_preference");
  $("#new-queue-json").value = JSON.stringify({
    name: "my-queue", enters: { runs_of: "<rule>" },
    feedback_types: type ? [type.name] : [], reviewers: 2, blind: true,
  }, null, 2);
}

async function installQueue() {
  const status = $("#new-queue-status");
  let definition;
  try {
    definition = JSON.parse($("#new-queue-json").value);
  } catch (error) {
    status.className = "status failed";
    status.textContent = `not JSON: ${error.message}`;
    return;
  }
  status.className = "status pending";
  status.textContent = "installing…";
  try {
    const answer = await api(wsPath("queues"), { method: "POST",
      headers: { "content-type": "application/json" }, body: JSON.stringify(definition) });
    const listed = await api(wsPath("queues"));
    state.queues = new Map(listed.queues.map((q) => [q.queue, q]));
    renderQueueChoice();
    status.className = "status recorded";
    status.textContent = answer.repeat ? `${answer.queue.queue} is live already`
      : `installed ${answer.queue.queue}`;
  } catch (error) {
    // The server names the JSON path and what to write there (an error frame).
    status.className = "status failed";
    status.textContent = `${error.code}: ${error.message}`;
  }
}

function signOut(reason = "") {
  state.closedByUs = true;
  state.socket?.close();
  sessionStorage.removeItem(SESSION);
  location.hash = "";
  $("#workbench").hidden = true;
  $("#sign-in").hidden = false;
  $("#sign-out").hidden = true;
  $("#who").textContent = "";
  $("#sign-in-error").textContent = reason;
  setConnection("not connected");
}

async function signIn(key, workspaceId, restored = null) {
  state.key = key;
  state.workspaceId = workspaceId;
  state.closedByUs = false;
  state.cursor = restored?.cursor || null;
  for (const frame of restored?.pending || []) {
    state.pending.set(frame.command_id, { frame, runId: frame.command.target.run_id,
      type: frame.command.feedback_type });
  }
  try {
    $("#sign-in-error").textContent = "";
    $("#sign-in").hidden = true;
    $("#workbench").hidden = false;
    $("#sign-out").hidden = false;
    saveSession();
    await loadWorkspace();
  } catch (error) {
    signOut(`${error.code || "error"}: ${error.message}`);
  }
}

// -- agreement ------------------------------------------------------------------------------

const fixed = (value, digits = 2) => (value === null || value === undefined ? "–" : value.toFixed(digits));

const STATE_TEXT = {
  ok: "ok", alarm: "ALARM", too_few: "too few pairs", undefined: "undefined",
  unwatched: "no threshold",
};

async function renderAgreement() {
  // The server's calibration (GET .../calibration): each evaluator version's newest pairs
  // with people, its measure with a 95% interval, and where its alarm stands.
  const body = $("#agreement tbody");
  let answer;
  try {
    answer = await api(wsPath("calibration"));
  } catch (error) {
    body.replaceChildren();
    const cell = body.insertRow().insertCell();
    cell.colSpan = 8;
    cell.textContent = `${error.code || "error"}: ${error.message}`;
    return;
  }
  $("#agreement-policy").textContent = `Each version's newest ${answer.window} pairs with `
    + `people; a state needs ${answer.min_pairs} pairs, and an alarm clears `
    + `${answer.margin} above its threshold.`;
  body.replaceChildren();
  for (const item of answer.calibration) {
    const row = body.insertRow();
    row.dataset.state = item.alarm ? "alarm" : item.state;
    row.insertCell().textContent = `evaluator:${item.evaluator}@${item.version}`;
    row.insertCell().textContent = `${item.feedback_type}.${item.field}`;
    row.insertCell().textContent = item.measure === "kappa" ? "kappa" : "rank corr.";
    row.insertCell().textContent = item.ci
      ? `${fixed(item.value)} [${fixed(item.ci[0])}, ${fixed(item.ci[1])}]` : fixed(item.value);
    row.insertCell().textContent = item.observed === null ? "–" : `${Math.round(100 * item.observed)}%`;
    row.insertCell().textContent = String(item.n);
    row.insertCell().textContent = item.threshold === null ? "–" : fixed(item.threshold);
    const cell = row.insertCell();
    cell.className = "state";
    const said = STATE_TEXT[item.state] || item.state;
    // An alarm stands until the measure clears it, whatever a thin window says meanwhile.
    cell.textContent = item.alarm && item.state !== "alarm" ? `ALARM (${said})` : said;
  }
  if (!answer.calibration.length) {
    const cell = body.insertRow().insertCell();
    cell.colSpan = 8;
    cell.textContent = "no target has both a person's and an evaluator's verdict yet";
  }
}

function table(id, headers, rows) {
  const node = document.createElement("table");
  node.id = id;
  const head = node.createTHead().insertRow();
  for (const h of headers) {
    const th = document.createElement("th");
    th.scope = "col";
    th.textContent = h;
    head.append(th);
  }
  const body = node.createTBody();
  for (const cells of rows) {
    const row = body.insertRow();
    for (const c of cells) row.insertCell().textContent = c;
  }
  return node;
}

const withCi = (value, ci) => (ci ? `${fixed(value)} [${fixed(ci[0])}, ${fixed(ci[1])}]`
  : fixed(value));
const share = (value) => (value === null || value === undefined ? "–"
  : `${Math.round(100 * value)}%`);

async function renderQueueAgreement() {
  // The queue being worked through: agreement on its items only, between people (alpha)
  // and of each judge with people (GET .../queues/{name}/agreement).
  const box = $("#queue-agreement");
  const queue = state.queue;
  if (!queue) { box.replaceChildren(); return; }
  let answer;
  try {
    answer = await api(wsPath(`queues/${encodeURIComponent(queue.queue)}/agreement`));
  } catch (error) {
    box.replaceChildren(Object.assign(document.createElement("p"), { className: "error",
      textContent: `${error.code || "error"}: ${error.message}` }));
    return;
  }
  if (state.queue !== queue) return;
  const h = document.createElement("h2");
  h.textContent = `On queue ${answer.queue}: ${answer.items} items, ${answer.judged} with a `
    + "verdict";
  const people = answer.people_agreement.length
    ? table("queue-people", ["between people: field", "targets", "agreed", "alpha [95%]"],
      answer.people_agreement.map((r) => [`${r.feedback_type}.${r.field}`, String(r.units),
        share(r.observed), withCi(r.alpha, r.alpha_ci)]))
    : Object.assign(document.createElement("p"), { className: "meta",
      textContent: "No item was judged by two people or more yet." });
  const judges = answer.judge_agreement.length
    ? table("queue-judges", ["evaluator", "field", "pairs", "agreed", "kappa or rank corr. [95%]"],
      answer.judge_agreement.map((r) => [r.evaluator, `${r.feedback_type}.${r.field}`,
        String(r.n), share(r.observed), r.kind === "numeric"
          ? withCi(r.spearman, r.spearman_ci) : withCi(r.kappa, r.kappa_ci)]))
    : Object.assign(document.createElement("p"), { className: "meta",
      textContent: "No item has both a person's and an evaluator's verdict yet." });
  box.replaceChildren(h, people, judges);
}

function showView(name) {
  $("#queue-view").hidden = name !== "queue";
  $("#agreement-view").hidden = name !== "agreement";
  $("#show-queue").setAttribute("aria-pressed", String(name === "queue"));
  $("#show-agreement").setAttribute("aria-pressed", String(name === "agreement"));
  if (name === "agreement") {
    renderAgreement();
    renderQueueAgreement();
  }
}

// -- keys -----------------------------------------------------------------------------------

function onKey(event) {
  if ($("#workbench").hidden) return;
  if (event.target.closest?.("#new-queue")) return;  // writing a queue, not judging
  const typing = event.target.matches("textarea, input[type=text], input[type=number], input[type=password], select");
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
    event.preventDefault();
    submit();
    return;
  }
  if (typing || event.altKey || event.ctrlKey || event.metaKey) return;
  if (state.queue) {
    if (event.key === "s") { event.preventDefault(); skipLeased(); return; }
  } else {
    if (event.key === "j") { move(1); return; }
    if (event.key === "k") { move(-1); return; }
  }
  if (!current) return;
  const rows = [...current.api.form.querySelectorAll(".field")];
  const row = rows[current.fieldIndex];
  if (event.key === "Tab") {
    event.preventDefault();
    focusField(current.fieldIndex + (event.shiftKey ? -1 : 1));
    return;
  }
  const option = row?.querySelector(`input[data-key="${CSS.escape(event.key)}"]`);
  if (option) {
    event.preventDefault();
    option.checked = true;
    option.dispatchEvent(new Event("change", { bubbles: true }));
    focusField(current.fieldIndex + 1);
  }
}

// -- start ----------------------------------------------------------------------------------

$("#sign-in-form").addEventListener("submit", (event) => {
  event.preventDefault();
  signIn($("#api-key").value.trim(), $("#workspace-id").value.trim());
});
$("#sign-out").addEventListener("click", () => signOut());
$("#rule-filter").addEventListener("change", () => renderQueue());
$("#unjudged-filter").addEventListener("change", () => renderQueue());
$("#show-queue").addEventListener("click", () => showView("queue"));
$("#show-agreement").addEventListener("click", () => showView("agreement"));
$("#older-runs").addEventListener("click", async () => {
  try {
    await olderRuns();
  } catch (error) {
    progress(`${error.code || "error"}: ${error.message}`);
  }
  renderQueue();
});
$("#queue-choice").addEventListener("change", (event) => chooseQueue(event.target.value));
$("#queue-choice").addEventListener("focus", async () => {
  // Queues installed since sign-in appear when the chooser is opened.
  try {
    const listed = await api(wsPath("queues"));
    state.queues = new Map(listed.queues.map((q) => [q.queue, q]));
    renderQueueChoice();
  } catch { /* the list stays as it was */ }
});
$("#install-queue").addEventListener("click", () => installQueue());
document.addEventListener("keydown", onKey);

const restored = loadSession();
if (restored?.key && restored?.workspaceId) signIn(restored.key, restored.workspaceId, restored);

// For tests and people debugging: what the page holds.
window.feedbackStreams = { state };
