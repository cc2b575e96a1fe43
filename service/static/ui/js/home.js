// The home view: the tenant's datasets (with the upload drop zone), the job form generated
// from the OpenAPI document, and the jobs, the unfinished ones followed live.

import {
  FINISHED,
  UPLOAD_TYPES,
  followJob,
  getJSON,
  request,
  uploadDataset,
  uploadType,
} from "./api.js";
import {
  errorBox,
  formatBytes,
  formatDate,
  formatNumber,
  h,
  progressBar,
  shortId,
  show,
  statusBadge,
} from "./dom.js";
import { markErrors, schemaForm } from "./schemaform.js";

/** Unfinished jobs of the list followed live at once (each holds a connection). */
const FOLLOWED = 3;

/** The job request's schema from the service's own OpenAPI document. */
async function jobSchema() {
  const document = await getJSON("openapi.json");
  return document.components.schemas.JobCreate;
}

function uploadZone(onUploaded) {
  const accepted = Object.keys(UPLOAD_TYPES)
    .map((e) => `.${e}`)
    .join(",");
  const picker = h("input", { type: "file", accept: accepted, hidden: true, id: "upload-input" });
  const bar = progressBar(0, "upload progress");
  bar.hidden = true;
  const status = h("p", { className: "upload-status", role: "status" });
  const zone = h(
    "div",
    { className: "drop-zone", id: "drop-zone", tabindex: 0, role: "button" },
    h("strong", {}, "Drop a dataset here"),
    h("span", {}, ` or click to choose (${accepted.replaceAll(",", ", ")})`),
  );
  async function send(file) {
    if (!uploadType(file)) {
      show(
        status,
        errorBox(
          new Error(`${file.name}: send a file ending in ${accepted.replaceAll(",", ", ")}`),
        ),
      );
      return;
    }
    bar.hidden = false;
    bar.value = 0;
    show(status, `Uploading ${file.name} (${formatBytes(file.size)})…`);
    try {
      const dataset = await uploadDataset(file, (fraction) => (bar.value = fraction));
      bar.value = 1;
      show(
        status,
        `Stored ${dataset.name || dataset.id}: ${dataset.n_samples} × ${dataset.n_features}.`,
      );
      onUploaded(dataset);
    } catch (error) {
      bar.hidden = true;
      show(status, errorBox(error));
    }
  }
  zone.addEventListener("click", () => picker.click());
  zone.addEventListener("keydown", (e) => (e.key === "Enter" || e.key === " ") && picker.click());
  picker.addEventListener("change", () => picker.files[0] && send(picker.files[0]));
  zone.addEventListener("dragover", (e) => {
    e.preventDefault();
    zone.classList.add("over");
  });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", (e) => {
    e.preventDefault();
    zone.classList.remove("over");
    if (e.dataTransfer.files[0]) send(e.dataTransfer.files[0]);
  });
  return h("div", { className: "upload" }, zone, picker, bar, status);
}

function datasetTable(datasets, onUse) {
  if (!datasets.length) return h("p", { className: "empty" }, "No datasets yet: upload one.");
  const rows = datasets.map((d) =>
    h(
      "tr",
      { dataset: { id: d.id } },
      h("td", { title: d.id }, d.name || h("code", {}, shortId(d.id))),
      h("td", { className: "num" }, `${formatNumber(d.n_samples)} × ${d.n_features}`),
      h("td", { className: "num" }, formatBytes(d.size_bytes)),
      h("td", { className: "optional" }, formatDate(d.created_at)),
      h(
        "td",
        {},
        h("button", { type: "button", className: "small", onclick: () => onUse(d) }, "Cluster"),
      ),
    ),
  );
  return h(
    "div",
    { className: "scroll" },
    h(
      "table",
      { id: "datasets" },
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          ["Name", "Rows × features", "Size", "Uploaded", ""].map((t, i) =>
            h("th", { className: i === 3 ? "optional" : null }, t),
          ),
        ),
      ),
      h("tbody", {}, rows),
    ),
  );
}

function jobProgress(job) {
  const fraction = FINISHED.includes(job.status)
    ? job.status === "succeeded"
      ? 1
      : null
    : job.progress.fraction;
  if (job.status === "failed" || job.status === "canceled")
    return h("span", { className: "muted" }, job.error || "");
  if (job.status === "queued") return h("span", { className: "muted" }, "waiting for a worker");
  return progressBar(fraction ?? null, `progress of job ${shortId(job.id)}`);
}

function jobRow(job, datasetNames) {
  return h(
    "tr",
    { dataset: { id: job.id, status: job.status } },
    h("td", {}, h("a", { href: `#/jobs/${job.id}` }, h("code", {}, shortId(job.id)))),
    h(
      "td",
      { className: "optional" },
      datasetNames.get(job.dataset_id) || h("code", {}, shortId(job.dataset_id)),
    ),
    h("td", { className: "num" }, job.params.n_clusters),
    h("td", {}, statusBadge(job.status)),
    h("td", { className: "progress-cell" }, jobProgress(job)),
    h("td", { className: "optional" }, formatDate(job.created_at)),
  );
}

function jobTable(jobs, datasetNames) {
  if (!jobs.length) return h("p", { className: "empty" }, "No jobs yet.");
  return h(
    "div",
    { className: "scroll" },
    h(
      "table",
      { id: "jobs" },
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          ["Job", "Dataset", "k", "Status", "Progress", "Created"].map((t, i) =>
            h("th", { className: i === 1 || i === 5 ? "optional" : null }, t),
          ),
        ),
      ),
      h(
        "tbody",
        {},
        jobs.map((job) => jobRow(job, datasetNames)),
      ),
    ),
  );
}

/** Draw the home view into `root`; `signal` ends its event streams when the view goes. */
export async function homeView(root, signal) {
  const datasetsBox = h("div", {}, h("p", { className: "muted" }, "Loading…"));
  const jobsBox = h("div", {}, h("p", { className: "muted" }, "Loading…"));
  const formBox = h("div", {});
  const select = h("select", { name: "dataset_id", id: "field-dataset_id", required: true });
  show(
    root,
    h(
      "section",
      { className: "card", id: "datasets-card" },
      h("h2", {}, "Datasets"),
      uploadZone(onUploaded),
      datasetsBox,
    ),
    h("section", { className: "card", id: "job-card" }, h("h2", {}, "Start a job"), formBox),
    h("section", { className: "card wide", id: "jobs-card" }, h("h2", {}, "Jobs"), jobsBox),
  );
  let datasetNames = new Map();

  async function loadDatasets(chosen) {
    const { items } = await getJSON("v1/datasets?limit=100");
    datasetNames = new Map(items.map((d) => [d.id, d.name || shortId(d.id)]));
    show(
      datasetsBox,
      datasetTable(items, (d) => choose(d.id)),
    );
    show(
      select,
      items.map((d) =>
        h(
          "option",
          { value: d.id },
          `${d.name || shortId(d.id)} (${d.n_samples} × ${d.n_features})`,
        ),
      ),
    );
    if (chosen) select.value = chosen;
  }
  function choose(id) {
    select.value = id;
    formBox.querySelector("#field-n_clusters")?.focus();
  }
  async function onUploaded(dataset) {
    await loadDatasets(dataset.id);
  }
  async function loadJobs() {
    const { items } = await getJSON("v1/jobs?limit=50");
    show(jobsBox, jobTable(items, datasetNames));
    items
      .filter((j) => !FINISHED.includes(j.status))
      .slice(0, FOLLOWED)
      .forEach(follow);
  }
  function follow(job) {
    followJob(
      job.id,
      (update) => {
        const row = jobsBox.querySelector(`tr[data-id="${job.id}"]`);
        row?.replaceWith(jobRow(update, datasetNames));
      },
      signal,
    ).catch(() => {}); // the view went away, or the job was deleted: nothing to show
  }
  async function submit(body, form) {
    markErrors(form, null);
    show(form.querySelector(".form-error"));
    try {
      const response = await request("v1/jobs", { method: "POST", body });
      const job = await response.json();
      location.hash = `#/jobs/${job.id}`;
    } catch (error) {
      markErrors(form, error.problem);
      show(form.querySelector(".form-error"), errorBox(error));
    }
  }

  try {
    await loadDatasets();
    const schema = await jobSchema();
    show(
      formBox,
      schemaForm(schema, {
        custom: { dataset_id: select },
        onSubmit: submit,
        submitLabel: "Start job",
      }),
    );
    await loadJobs();
  } catch (error) {
    if (error.status === 401) throw error;
    show(jobsBox, errorBox(error));
  }
}
