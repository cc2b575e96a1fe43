// Downloads of a result: labels and centroids as CSV (written here from the JSON result)
// or as Parquet (the service's own tables, asked for with Accept).

import { PARQUET, request } from "./api.js";

/** RFC 4180 text: a header line and one line per row. */
export function csv(header, rows) {
  return [header, ...rows].map((row) => row.join(",")).join("\r\n") + "\r\n";
}

export function labelsCsv(labels) {
  return csv(
    ["row", "label"],
    labels.map((label, row) => [row, label]),
  );
}

export function centroidsCsv(centroids) {
  const d = centroids.length ? centroids[0].length : 0;
  const header = ["cluster", ...Array.from({ length: d }, (_, j) => `f${j}`)];
  return csv(
    header,
    centroids.map((centre, cluster) => [cluster, ...centre]),
  );
}

/** Hand a blob to the browser as a file download. */
export function saveBlob(blob, filename) {
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = filename;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 60_000);
}

export function saveCsv(text, filename) {
  saveBlob(new Blob([text], { type: "text/csv" }), filename);
}

/** Download one result table (`labels` or `centroids`) as Parquet. */
export async function saveParquet(jobId, part) {
  const response = await request(`v1/jobs/${jobId}/result?include=${part}`, { accept: PARQUET });
  saveBlob(await response.blob(), `${jobId}-${part}.parquet`);
}
