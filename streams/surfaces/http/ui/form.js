// A feedback form generated from a feedback type's JSON Schema (what pydantic writes for the
// registered type): bool as yes/no, Literal and Enum as choices, bounded numbers as a slider
// with their range, Optional fields as optional, str as a text area. Lists and nested models
// are left out with a note (give them through the API). No framework: plain DOM.

/** Resolve a local `$ref` (`#/$defs/Name`) against the root schema. */
function deref(schema, root) {
  if (schema && typeof schema.$ref === "string" && schema.$ref.startsWith("#/")) {
    let node = root;
    for (const part of schema.$ref.slice(2).split("/")) node = node?.[part];
    return node ? { ...node, ...Object.fromEntries(
      Object.entries(schema).filter(([k]) => k !== "$ref")) } : schema;
  }
  return schema;
}

/** The field's kind and its parts: {kind, optional, nullable, choices?, min?, max?, step?}.
 * `optional`: not required (Optional[...] or a default); `nullable`: Optional[...]. */
export function describeField(name, raw, root, required) {
  let schema = deref(raw, root);
  let optional = !required;
  let nullable = false;   // Optional[...]: an empty answer is sent as null, else left out
  if (Array.isArray(schema.anyOf)) {
    const parts = schema.anyOf.map((s) => deref(s, root));
    const nonNull = parts.filter((s) => s.type !== "null");
    if (nonNull.length < parts.length) { optional = true; nullable = true; }
    if (nonNull.length === 1) schema = { ...schema, ...nonNull[0], anyOf: undefined };
    else return { name, kind: "unsupported", optional, nullable, title: schema.title || name,
      note: "a choice of several shapes: give it through the API" };
  }
  const title = schema.title || name;
  const description = schema.description || "";
  if (schema.const !== undefined) {
    return { name, kind: "choice", optional, nullable, title, description,
      choices: [schema.const] };
  }
  if (Array.isArray(schema.enum)) {
    return { name, kind: "choice", optional, nullable, title, description,
      choices: schema.enum };
  }
  if (schema.type === "boolean") {
    return { name, kind: "bool", optional, nullable, title, description };
  }
  if (schema.type === "integer" || schema.type === "number") {
    const min = schema.minimum ?? (schema.exclusiveMinimum !== undefined
      ? schema.exclusiveMinimum + (schema.type === "integer" ? 1 : 0) : undefined);
    const max = schema.maximum ?? (schema.exclusiveMaximum !== undefined
      ? schema.exclusiveMaximum - (schema.type === "integer" ? 1 : 0) : undefined);
    const bounded = min !== undefined && max !== undefined;
    const step = schema.type === "integer" ? 1 : (bounded ? (max - min) / 100 : "any");
    return { name, kind: bounded ? "slider" : "number", optional, nullable, title, description,
      min, max, step, integer: schema.type === "integer" };
  }
  if (schema.type === "string") {
    return { name, kind: "text", optional, nullable, title, description,
      maxLength: schema.maxLength };
  }
  const what = schema.type === "array" ? "a list" : "a nested record";
  return { name, kind: "unsupported", optional, nullable, title,
    note: `${what}: give it through the API` };
}

/** Every field of a feedback type's schema, in the schema's order. */
export function describeSchema(schema) {
  const required = new Set(schema.required || []);
  return Object.entries(schema.properties || {}).map(
    ([name, raw]) => describeField(name, raw, schema, required.has(name)));
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

function fieldId(prefix, name, suffix = "") {
  return `${prefix}-${name}${suffix ? "-" + suffix : ""}`.replace(/[^A-Za-z0-9_-]/g, "_");
}

function controlFor(field, prefix, draft) {
  const id = fieldId(prefix, field.name);
  const saved = draft[field.name];
  if (field.kind === "bool") {
    const group = el("div", { role: "radiogroup", "aria-labelledby": id + "-label",
      class: "choices" });
    for (const [value, label, key] of [[true, "yes", "y"], [false, "no", "n"]]) {
      const rid = fieldId(prefix, field.name, label);
      group.append(el("label", { for: rid, class: "choice" },
        el("input", { type: "radio", id: rid, name: id, value: String(value),
          "data-key": key, checked: saved === value }),
        el("span", { text: `${label} ` }), el("kbd", { text: key })));
    }
    return group;
  }
  if (field.kind === "choice") {
    const group = el("div", { role: "radiogroup", "aria-labelledby": id + "-label",
      class: "choices" });
    field.choices.forEach((choice, i) => {
      const rid = fieldId(prefix, field.name, String(i));
      group.append(el("label", { for: rid, class: "choice" },
        el("input", { type: "radio", id: rid, name: id, value: JSON.stringify(choice),
          "data-key": i < 9 ? String(i + 1) : undefined,
          checked: saved !== undefined && JSON.stringify(saved) === JSON.stringify(choice) }),
        el("span", { text: `${choice} ` }), i < 9 ? el("kbd", { text: String(i + 1) }) : null));
    });
    return group;
  }
  if (field.kind === "slider") {
    const value = saved ?? field.min;
    const output = el("output", { for: id, id: id + "-value", text: String(value) });
    const input = el("input", { type: "range", id, name: field.name, min: field.min,
      max: field.max, step: field.step, value,
      "aria-describedby": id + "-range",
      oninput: (event) => { output.textContent = event.target.value; } });
    return el("div", { class: "slider" }, input, output,
      el("span", { id: id + "-range", class: "hint", text: `${field.min} to ${field.max}` }));
  }
  if (field.kind === "number") {
    return el("input", { type: "number", id, name: field.name, step: field.step,
      value: saved ?? "" });
  }
  if (field.kind === "text") {
    const area = el("textarea", { id, name: field.name, rows: 3, maxlength: field.maxLength });
    area.value = saved ?? "";
    return area;
  }
  return el("p", { class: "note", id, text: `left out: ${field.note}` });
}

/** The value's field an error path names: `command.value.severity`, `value.severity`, or
 * ["command", "value", "severity"] all name `severity`; null for anything else. */
export function fieldOf(path) {
  const parts = Array.isArray(path) ? path.map(String)
    : typeof path === "string" ? path.split(".") : [];
  const at = parts.indexOf("value");
  return at >= 0 && at + 1 < parts.length ? parts[at + 1] : null;
}

/**
 * A form for `schema`; `draft` pre-fills it (a draft kept across reconnects).
 * Returns {form, read(), showErrors(errors), clearErrors()}: read() gives
 * {value, missing[]}, showErrors takes the error frame's fields: [{path, message}].
 */
export function buildForm(schema, { prefix = "fb", draft = {}, submitLabel = "Submit" } = {}) {
  const fields = describeSchema(schema);
  const form = el("form", { class: "feedback-form", novalidate: true,
    "aria-label": `${schema.title || "feedback"} form` });
  for (const field of fields) {
    const id = fieldId(prefix, field.name);
    const labelText = field.title + (field.optional && field.kind !== "unsupported"
      ? " (optional)" : "");
    const isGroup = field.kind === "bool" || field.kind === "choice";
    const label = isGroup
      ? el("span", { id: id + "-label", class: "label", text: labelText })
      : el("label", { for: id, id: id + "-label", class: "label", text: labelText });
    const row = el("div", { class: "field", "data-field": field.name, "data-kind": field.kind },
      label,
      field.description ? el("p", { class: "hint", text: field.description }) : null,
      controlFor(field, prefix, draft),
      el("p", { class: "error", id: id + "-error", role: "alert", "aria-live": "polite" }));
    if (field.optional && (field.kind === "slider")) {
      const cid = id + "-given";
      row.insertBefore(el("label", { for: cid, class: "given" },
        el("input", { type: "checkbox", id: cid, checked: draft[field.name] !== undefined
          && draft[field.name] !== null }), el("span", { text: " give a value" })),
      row.querySelector(".slider"));
    }
    form.append(row);
  }
  form.append(el("button", { type: "submit", class: "submit", text: submitLabel }));

  function read() {
    const value = {};
    const missing = [];
    for (const field of fields) {
      const id = fieldId(prefix, field.name);
      let given;
      if (field.kind === "bool" || field.kind === "choice") {
        const checked = form.querySelector(`input[name="${id}"]:checked`);
        if (checked) given = field.kind === "bool" ? checked.value === "true"
          : JSON.parse(checked.value);
      } else if (field.kind === "slider") {
        const on = form.querySelector(`#${id}-given`);
        if (!on || on.checked) {
          const raw = form.querySelector(`#${id}`).value;
          given = field.integer ? parseInt(raw, 10) : parseFloat(raw);
        }
      } else if (field.kind === "number") {
        const raw = form.querySelector(`#${id}`).value;
        if (raw !== "") given = Number(raw);
      } else if (field.kind === "text") {
        const raw = form.querySelector(`#${id}`).value;
        if (raw !== "") given = raw;
      } else {
        continue;
      }
      if (given === undefined) {
        // Optional[...] is answered with null; a field with a default is left to it.
        if (field.nullable) value[field.name] = null;
        else if (!field.optional) missing.push(field.name);
      } else {
        value[field.name] = given;
      }
    }
    return { value, missing };
  }

  function clearErrors() {
    for (const node of form.querySelectorAll(".error")) node.textContent = "";
    for (const node of form.querySelectorAll("[aria-invalid]")) node.removeAttribute("aria-invalid");
    form.querySelector(".form-error")?.remove();
  }

  function showErrors(errors) {
    clearErrors();
    const general = [];
    for (const error of errors) {
      const name = fieldOf(error.path);
      const row = name ? form.querySelector(`[data-field="${CSS.escape(name)}"]`) : null;
      if (!row) { general.push(error.message); continue; }
      row.querySelector(".error").textContent = error.message;
      row.querySelector("input, textarea")?.setAttribute("aria-invalid", "true");
    }
    if (general.length) {
      form.querySelector(".submit").before(
        el("p", { class: "error form-error", role: "alert", text: general.join("; ") }));
    }
  }

  return { form, fields, read, showErrors, clearErrors };
}
