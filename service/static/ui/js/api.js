// The API as the page uses it: requests with the tab's API key, problem+json errors,
// uploads with progress (XMLHttpRequest) and job events (fetch, since EventSource cannot
// send the key header). URLs are relative to the page (/ui/ -> ../v1/...), so the page
// works under a proxy's path prefix too.

import { readEvents } from "./sse.js";

const KEY_ITEM = "rbfkm.apiKey";
const BASE = new URL("../", document.baseURI);

/** The media types an upload is sent as, by file extension (service/uploads.py). */
export const UPLOAD_TYPES = {
  csv: "text/csv",
  txt: "text/csv",
  npy: "application/x-npy",
  parquet: "application/vnd.apache.parquet",
  json: "application/json",
};
export const PARQUET = "application/vnd.apache.parquet";
/** Job statuses after which nothing changes. */
export const FINISHED = ["succeeded", "failed", "canceled"];

/** A refused request: the status and the problem details the service sent. */
export class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

export const apiKey = {
  get: () => sessionStorage.getItem(KEY_ITEM),
  set: (key) => sessionStorage.setItem(KEY_ITEM, key),
  clear: () => sessionStorage.removeItem(KEY_ITEM),
};

/** The absolute URL of an API path such as "v1/jobs". */
export function url(path) {
  return new URL(path, BASE).href;
}

function headers(extra = {}) {
  const key = apiKey.get();
  return key ? { "X-API-Key": key, ...extra } : { ...extra };
}

async function problemOf(response) {
  const text = await response.text();
  try {
    return JSON.parse(text);
  } catch {
    return { title: response.statusText, detail: text || `HTTP ${response.status}` };
  }
}

/** fetch() an API path with the key; an ApiError for any status >= 400. */
export async function request(path, { method = "GET", body, accept, signal } = {}) {
  const extra = {};
  if (accept) extra.Accept = accept;
  if (body !== undefined) extra["Content-Type"] = "application/json";
  const response = await fetch(url(path), {
    method,
    signal,
    headers: headers(extra),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!response.ok) throw new ApiError(response.status, await problemOf(response));
  return response;
}

/** The JSON body of a GET (or of another method with `options`). */
export async function getJSON(path, options) {
  return (await request(path, options)).json();
}

/** The media type a file is uploaded as; null for an extension the service does not read. */
export function uploadType(file) {
  const extension = file.name.split(".").pop().toLowerCase();
  return UPLOAD_TYPES[extension] || null;
}

/** Upload a file as a dataset; `onProgress(fraction)` while it is sent. The stored
 *  dataset, or an ApiError. */
export function uploadDataset(file, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    const name = encodeURIComponent(file.name);
    xhr.open("POST", url(`v1/datasets?name=${name}`));
    for (const [header, value] of Object.entries(headers({ "Content-Type": uploadType(file) }))) {
      xhr.setRequestHeader(header, value);
    }
    xhr.upload.onprogress = (event) => {
      if (event.lengthComputable) onProgress(event.loaded / event.total);
    };
    xhr.onload = () => {
      let body;
      try {
        body = JSON.parse(xhr.responseText);
      } catch {
        body = { detail: xhr.responseText || `HTTP ${xhr.status}` };
      }
      if (xhr.status >= 200 && xhr.status < 300) resolve(body);
      else reject(new ApiError(xhr.status, body));
    };
    xhr.onerror = () => reject(new ApiError(0, { detail: "the upload failed: no connection" }));
    xhr.send(file);
  });
}

/** Follow a job's server-sent events, calling `onJob(job)` for each state, until the job
 *  has finished (or `signal` aborts). The stream ends after five minutes at most; then it
 *  is opened again with Last-Event-ID, as EventSource would. */
export async function followJob(jobId, onJob, signal) {
  let lastId = null;
  for (;;) {
    const extra = { Accept: "text/event-stream" };
    if (lastId) extra["Last-Event-ID"] = lastId;
    const response = await fetch(url(`v1/jobs/${jobId}/events`), {
      headers: headers(extra),
      signal,
    });
    if (!response.ok) throw new ApiError(response.status, await problemOf(response));
    for await (const event of readEvents(response.body)) {
      if (event.id) lastId = event.id;
      if (event.event === "deleted") return null;
      if (event.event !== "status" && event.event !== "progress") continue;
      const job = JSON.parse(event.data);
      onJob(job);
      if (FINISHED.includes(job.status)) return job;
    }
  }
}
