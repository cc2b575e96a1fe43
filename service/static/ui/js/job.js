// One job: its parameters, its progress as it happens (server-sent events) and, once it
// has succeeded, its result: the annealing path, the clusters on two principal axes, the
// cluster sizes, the metrics, and downloads.

import { FINISHED, followJob, getJSON, request } from "./api.js";
import { drawAnnealing, drawProjection, drawSizes } from "./charts.js";
import {
  errorBox,
  formatDate,
  formatNumber,
  h,
  progressBar,
  shortId,
  show,
  statusBadge,
} from "./dom.js";
import { centroidsCsv, labelsCsv, saveCsv, saveParquet } from "./download.js";

/** Points per cluster, counted from the labels (when the result has no `metrics`). */
export function sizesOf(labels, k) {
  const sizes = new Array(k).fill(0);
  for (const label of labels) sizes[label] += 1;
  return sizes;
}

function facts(pairs) {
  return h(
    "dl",
    { className: "facts" },
    pairs.flatMap(([term, value]) => [h("dt", {}, term), h("dd", {}, value)]),
  );
}

function paramValue(value) {
  return typeof value === "string" ? value : JSON.stringify(value);
}

function title(job, onCancel) {
  const cancel = FINISHED.includes(job.status)
    ? null
    : h("button", { type: "button", className: "small", onclick: onCancel }, "Cancel");
  return h(
    "h2",
    { className: "job-title" },
    "Job ",
    h("code", { title: job.id }, shortId(job.id)),
    " ",
    cancel,
  );
}

function details(job) {
  const params = Object.entries(job.params).map(([name, value]) =>
    h("div", {}, h("dt", {}, name), h("dd", {}, paramValue(value))),
  );
  return h(
    "div",
    { className: "job-details" },
    facts([
      ["dataset", h("code", {}, job.dataset_id)],
      ["created", formatDate(job.created_at)],
      ["finished", formatDate(job.finished_at)],
    ]),
    h(
      "details",
      { className: "params", open: true },
      h("summary", {}, "Parameters"),
      h("dl", {}, params),
    ),
  );
}

function progressView(job) {
  const p = job.progress || {};
  const running = job.status === "running";
  const fraction = p.fraction ?? null;
  return h(
    "div",
    { className: "progress-panel", id: "progress", dataset: { status: job.status } },
    h(
      "div",
      { className: "status-line" },
      statusBadge(job.status),
      running ? progressBar(fraction, "job progress") : null,
      running && fraction !== null
        ? h("span", { id: "progress-percent" }, `${Math.round(100 * fraction)}%`)
        : null,
    ),
    running
      ? facts([
          ["σ", formatNumber(p.sigma)],
          ["iteration", formatNumber(p.iteration)],
          ["objective", formatNumber(p.objective)],
        ])
      : null,
    job.status === "queued" ? h("p", { className: "muted" }, "Waiting for a worker…") : null,
    job.error ? errorBox(new Error(job.error)) : null,
  );
}

function metricsTable(result) {
  const metrics = result.metrics || {};
  const rows = [
    ["inertia", result.inertia],
    ["iterations", result.n_iter],
    ["converged", String(result.converged)],
    ["final σ", result.sigma],
    ["device", result.device],
    ["silhouette", metrics.silhouette],
    ["Davies–Bouldin", metrics.davies_bouldin],
    ["Calinski–Harabasz", metrics.calinski_harabasz],
  ].filter(([, value]) => value !== undefined);
  return h(
    "div",
    { id: "metrics" },
    facts(rows.map(([t, v]) => [t, typeof v === "number" ? formatNumber(v) : (v ?? "–")])),
  );
}

function downloads(jobId, result, labels) {
  const failed = h("div", { className: "download-error" });
  const guard = (action) => async () => {
    show(failed);
    try {
      await action();
    } catch (error) {
      show(failed, errorBox(error));
    }
  };
  const button = (id, text, action) =>
    h("button", { type: "button", id, onclick: guard(action) }, text);
  return h(
    "div",
    { className: "downloads" },
    button("download-labels-csv", "Labels (CSV)", async () =>
      saveCsv(labelsCsv(await labels()), `${jobId}-labels.csv`),
    ),
    button("download-centroids-csv", "Centroids (CSV)", async () =>
      saveCsv(centroidsCsv(result.centroids), `${jobId}-centroids.csv`),
    ),
    button("download-labels-parquet", "Labels (Parquet)", () => saveParquet(jobId, "labels")),
    button("download-centroids-parquet", "Centroids (Parquet)", () =>
      saveParquet(jobId, "centroids"),
    ),
    failed,
  );
}

/** Draw a succeeded job's result into `box`. */
async function resultView(box, job) {
  const result = await getJSON(`v1/jobs/${job.id}/result?exclude=labels`);
  const k = result.centroids.length;
  let labelsPromise = null;
  const labels = () =>
    (labelsPromise ??= getJSON(`v1/jobs/${job.id}/result?include=labels`).then((r) => r.labels));
  const charts = {
    annealing: h("div", { className: "chart", id: "chart-annealing" }),
    projection: h("div", { className: "chart", id: "chart-projection" }),
    sizes: h("div", { className: "chart", id: "chart-sizes" }),
  };
  show(
    box,
    h(
      "section",
      { className: "card wide" },
      h("h2", {}, "Result"),
      metricsTable(result),
      downloads(job.id, result, labels),
    ),
    h("section", { className: "card wide" }, charts.annealing),
    h("section", { className: "card" }, charts.projection),
    h("section", { className: "card" }, charts.sizes),
  );
  const drawing = [
    drawAnnealing(charts.annealing, result.history, result.k_path, result.inertia),
    getJSON(`v1/jobs/${job.id}/projection`).then((p) => drawProjection(charts.projection, p, k)),
    (result.metrics?.sizes
      ? Promise.resolve(result.metrics.sizes)
      : labels().then((l) => sizesOf(l, k))
    ).then((sizes) => drawSizes(charts.sizes, sizes)),
  ];
  const outcomes = await Promise.allSettled(drawing);
  Object.values(charts).forEach((chart, i) => {
    if (outcomes[i].status === "rejected") show(chart, errorBox(outcomes[i].reason));
  });
}

/** Draw the view of job `jobId` into `root`; `signal` ends its event stream. */
export async function jobView(root, jobId, signal) {
  let job = await getJSON(`v1/jobs/${jobId}`, { signal }); // aborted: another view is shown
  const top = h("section", { className: "card wide", id: "job-card" });
  const resultBox = h("div", { className: "result", id: "result" });
  show(root, top, resultBox);
  async function cancel() {
    try {
      render(await (await request(`v1/jobs/${jobId}/cancel`, { method: "POST" })).json());
    } catch (error) {
      top.append(errorBox(error));
    }
  }
  function render(update) {
    job = update;
    show(top, title(job, cancel), progressView(job), details(job));
  }
  render(job);
  if (!FINISHED.includes(job.status)) job = (await followJob(jobId, render, signal)) || job;
  if (job.status === "succeeded") await resultView(resultBox, job);
}
