// Building the page: a tiny element helper and the formats numbers and dates are shown in.

/** An element: h("a", { href: "#/" }, "text", child, ...). Attributes starting with "on"
 *  are listeners; `dataset` sets data-* attributes; null children are skipped. */
export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else if (name === "dataset") Object.assign(element.dataset, value);
    else if (name === "className") element.className = value;
    else element.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : String(child));
  }
  return element;
}

/** Text with `code` spans (as the API's descriptions write them) as <code> elements. */
export function richText(text) {
  return (text || "").split(/`([^`]*)`/).map((part, i) => (i % 2 ? h("code", {}, part) : part));
}

export function formatNumber(value, digits = 4) {
  if (value === null || value === undefined) return "–";
  if (Number.isInteger(value)) return value.toLocaleString("en-US");
  const magnitude = Math.abs(value);
  if (magnitude !== 0 && (magnitude < 1e-3 || magnitude >= 1e6)) return value.toExponential(3);
  return Number(value.toPrecision(digits)).toString();
}

export function formatBytes(bytes) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${unit ? value.toFixed(1) : value} ${units[unit]}`;
}

export function formatDate(iso) {
  if (!iso) return "–";
  const date = new Date(iso);
  return date.toLocaleString("en-GB", { dateStyle: "short", timeStyle: "short" });
}

export function shortId(id) {
  return id.slice(0, 8);
}

/** A <progress> for a fraction in [0, 1]; indeterminate for null. */
export function progressBar(fraction, label) {
  const bar = h("progress", { max: 1, "aria-label": label });
  if (fraction !== null && fraction !== undefined) bar.value = fraction;
  return bar;
}

/** A status as a coloured badge. */
export function statusBadge(status) {
  return h("span", { className: `badge status-${status}`, dataset: { status } }, status);
}

/** Replace an element's children. */
export function show(element, ...children) {
  element.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined));
}

/** A message for an error: the problem's detail and its field errors. */
export function errorBox(error) {
  const problem = error.problem || {};
  const fields = (problem.errors || []).map((e) => h("li", {}, `${e.field}: ${e.message}`));
  return h(
    "div",
    { className: "error", role: "alert" },
    h("p", {}, error.message || String(error)),
    fields.length ? h("ul", {}, fields) : null,
  );
}
