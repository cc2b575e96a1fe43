// A form generated from a JSON Schema object (the OpenAPI document's JobCreate), so that
// the page offers every job parameter the API takes, with its bounds, choices, default
// and description, without repeating them here.
//
// Each property becomes one control, by what its schema admits:
// - only strings from a list (enum, const): a <select>;
// - numbers or integers (maybe null): a number input with the schema's bounds;
// - a number or a few words (sigma0: a number or "auto"): a text input offering the words;
// - a string: a text input (its pattern, its examples offered);
// - a boolean: a checkbox.
// Alternatives a form cannot hold (init's array of centres) are left to the API. A field
// left empty, or at its default, is not sent: the server fills in its own default.

import { h, richText } from "./dom.js";

/** The alternatives of a property's schema, without null; and whether null is one. */
function alternatives(schema) {
  const options = schema.anyOf || schema.oneOf || [schema];
  return {
    options: options.filter((o) => o.type !== "null"),
    nullable: options.some((o) => o.type === "null"),
  };
}

function words(options) {
  return options.flatMap((o) => o.enum || (o.const !== undefined ? [o.const] : []));
}

/** How a property is edited: { kind, ... } (null for one the form cannot hold). */
export function controlOf(schema) {
  const { options } = alternatives(schema);
  const numeric = options.find((o) => o.type === "number" || o.type === "integer");
  const choices = words(options.filter((o) => o.type === "string"));
  const text = options.find((o) => o.type === "string" && !o.enum && o.const === undefined);
  if (options.some((o) => o.type === "boolean")) return { kind: "boolean" };
  if (numeric && choices.length) return { kind: "number-or-word", numeric, choices };
  if (numeric) return { kind: "number", numeric };
  if (choices.length && !text) return { kind: "select", choices };
  if (text) return { kind: "text", text, choices: schema.examples || [] };
  return null;
}

function numberAttributes(numeric) {
  const attributes = { type: "number", step: numeric.type === "integer" ? 1 : "any" };
  if (numeric.minimum !== undefined) attributes.min = numeric.minimum;
  if (numeric.maximum !== undefined) attributes.max = numeric.maximum;
  return attributes;
}

function input(name, control, schema, required) {
  const base = { name, id: `field-${name}`, required: required || null };
  const placeholder = schema.default === undefined ? null : String(schema.default);
  switch (control.kind) {
    case "boolean":
      return h("input", { ...base, type: "checkbox", checked: schema.default === true });
    case "select": {
      const blank =
        required || schema.default !== undefined ? [] : [h("option", { value: "" }, "–")];
      const select = h(
        "select",
        base,
        blank,
        control.choices.map((c) => h("option", { value: c }, c)),
      );
      if (schema.default !== undefined) select.value = schema.default;
      return select;
    }
    case "number":
      return h("input", { ...base, ...numberAttributes(control.numeric), placeholder });
    case "number-or-word":
    case "text": {
      const list = control.choices.length ? `${base.id}-choices` : null;
      const pattern = control.text?.pattern?.replace(/^\^|\$$/g, "") || null;
      return h(
        "span",
        { className: "combo" },
        h("input", { ...base, type: "text", list, pattern, placeholder }),
        list
          ? h(
              "datalist",
              { id: list },
              control.choices.map((c) => h("option", { value: c })),
            )
          : null,
      );
    }
    default:
      return null;
  }
}

/** A labelled field for one property; null when the form cannot hold it. */
function field(name, schema, required) {
  const control = controlOf(schema);
  if (!control) return null;
  const element = input(name, control, schema, required);
  const help = schema.description ? h("small", {}, richText(schema.description)) : null;
  return h(
    "div",
    { className: `field field-${control.kind}`, dataset: { field: name } },
    h("label", { for: `field-${name}` }, schema.title || name, required ? " *" : ""),
    element,
    help,
  );
}

/** The value of one control as JSON, or undefined to leave the property out. */
function valueOf(form, name, schema) {
  const control = controlOf(schema);
  const element = form.elements[name];
  if (control.kind === "boolean") {
    return element.checked === (schema.default === true) ? undefined : element.checked;
  }
  const raw = element.value.trim();
  if (raw === "" || raw === String(schema.default)) return undefined;
  const numeric = control.numeric;
  if (numeric && !(control.choices || []).includes(raw)) {
    const number = Number(raw);
    return Number.isNaN(number) ? raw : number; // not a number: the server says what is wrong
  }
  return raw;
}

/**
 * A form for the object `schema` (properties resolved). `custom` maps a property name to
 * an element that replaces its generated control (it must carry `name`); `onSubmit(body)`
 * gets the JSON body.
 */
export function schemaForm(schema, { custom = {}, onSubmit, submitLabel = "Submit" }) {
  const required = new Set(schema.required || []);
  const names = Object.keys(schema.properties);
  const build = (name) =>
    custom[name]
      ? h(
          "div",
          { className: "field", dataset: { field: name } },
          h("label", { for: custom[name].id }, schema.properties[name].title || name, " *"),
          custom[name],
        )
      : field(name, schema.properties[name], required.has(name));
  const main = names.filter((n) => required.has(n)).map(build);
  const more = names
    .filter((n) => !required.has(n))
    .map(build)
    .filter(Boolean);
  const form = h(
    "form",
    { className: "schema-form" },
    main,
    h("details", { className: "more" }, h("summary", {}, `More parameters (${more.length})`), more),
    h("div", { className: "actions" }, h("button", { type: "submit" }, submitLabel)),
    h("div", { className: "form-error" }),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (!form.reportValidity()) return;
    const body = {};
    for (const name of names) {
      if (custom[name]) {
        body[name] = form.elements[name].value;
        continue;
      }
      if (!controlOf(schema.properties[name])) continue;
      const value = valueOf(form, name, schema.properties[name]);
      if (value !== undefined) body[name] = value;
    }
    onSubmit(body, form);
  });
  return form;
}

/** Mark the fields a problem's errors name ("body.n_clusters"). */
export function markErrors(form, problem) {
  for (const marked of form.querySelectorAll(".field.invalid")) marked.classList.remove("invalid");
  for (const error of problem?.errors || []) {
    const name = error.field.replace(/^body\./, "").split(/[.[]/)[0];
    form.querySelector(`.field[data-field="${CSS.escape(name)}"]`)?.classList.add("invalid");
  }
}
