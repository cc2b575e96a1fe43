// The result's charts as Vega-Lite specifications, drawn as SVG by the vendored
// vega-embed (globals from vendor/). Each chart names its marks (`name`), so that the SVG
// says what each group of shapes is: `points_marks`, `centroids_marks`, `sizes_marks`, ...

import { annealingData } from "./annealing.js";

const EMBED = { actions: false, renderer: "svg", mode: "vega-lite" };
/** Colour of cluster j, the same in every chart. */
function clusterScale(k) {
  return {
    domain: Array.from({ length: k }, (_, j) => j),
    scheme: k <= 10 ? "tableau10" : "tableau20",
  };
}
const BASE = {
  width: "container",
  autosize: { type: "fit-x", contains: "padding" },
  config: { font: "system-ui, sans-serif", view: { stroke: null } },
};

async function draw(element, spec) {
  const result = await window.vegaEmbed(element, { ...BASE, ...spec }, EMBED);
  element.dataset.rendered = "true";
  return result.view;
}

/** Inertia against temperature (log scale, hot to cold), the count of distinct centres
 *  when the result has a k path, the phase transitions as dashed rules. */
export function annealingSpec(history, kPath, finalInertia) {
  const { temps, segments, transitions, estimated } = annealingData(history, kPath);
  const x = {
    field: "sigma",
    type: "quantitative",
    scale: { type: "log", reverse: true, nice: false },
    title: "σ (temperature, log scale; cooling →)",
    axis: { labelOverlap: "greedy" },
  };
  const positive = temps.every((t) => t.inertia > 0) && !(finalInertia <= 0);
  const inertia = [
    {
      name: "inertia",
      data: { values: temps },
      mark: { type: "line", point: true, color: "#1f5f99" },
      encoding: {
        x,
        y: {
          field: "inertia",
          type: "quantitative",
          scale: { type: positive ? "log" : "linear" },
          title: "inertia",
          axis: { titleColor: "#1f5f99" },
        },
        tooltip: [
          { field: "sigma", format: ".4g", title: "σ" },
          { field: "inertia", format: ".4g" },
        ],
      },
    },
  ];
  if (finalInertia !== undefined && finalInertia !== null) {
    inertia.push({
      name: "final",
      data: { values: [{ inertia: finalInertia, label: "final inertia (after Lloyd)" }] },
      mark: { type: "rule", color: "#1f5f99", strokeDash: [1, 3] },
      encoding: {
        y: { field: "inertia", type: "quantitative" },
        tooltip: [{ field: "label" }, { field: "inertia", format: ".4g" }],
      },
    });
  }
  const layers = [{ layer: inertia }];
  if (transitions.length) {
    layers.push({
      name: "transitions",
      data: { values: transitions },
      mark: { type: "rule", color: "#d9730d", strokeDash: [4, 3] },
      encoding: { x: { ...x, field: "sigma" }, tooltip: [{ field: "label", title: "transition" }] },
    });
  }
  if (segments.length) {
    layers.push({
      name: "centres",
      data: { values: segments },
      mark: { type: "rule", color: "#2a9d3c", strokeWidth: 3 },
      encoding: {
        x: { ...x, field: "from" },
        x2: { field: "to" },
        y: {
          field: "k",
          type: "quantitative",
          title: "distinct centres",
          axis: { orient: "right", titleColor: "#2a9d3c", tickMinStep: 1 },
        },
        tooltip: [{ field: "k" }, { field: "from", format: ".4g", title: "appears at σ" }],
      },
    });
  }
  return {
    height: 260,
    title: {
      text: "Annealing path",
      subtitle: estimated ? "transitions estimated from the inertia" : "",
    },
    layer: layers,
    resolve: { scale: { y: "independent" } },
  };
}

/** The sample on its two principal axes: coloured by label, fainter where its soft
 *  assignment is spread (entropy), the centroids as outlined diamonds. */
export function projectionSpec(projection, k) {
  const points = projection.points.map(([x, y], i) => ({
    x,
    y,
    row: projection.rows[i],
    label: projection.labels[i],
    entropy: projection.entropy[i],
  }));
  const centres = projection.centroids.map(([x, y], label) => ({ x, y, label }));
  const [first, second] = projection.explained_variance_ratio.map(
    (r) => `${(100 * r).toFixed(1)}%`,
  );
  const color = {
    field: "label",
    type: "nominal",
    scale: clusterScale(k),
    legend: k <= 20 ? { title: "cluster" } : null,
  };
  const maxEntropy = Math.max(Math.log(Math.max(k, 2)), 1e-9);
  return {
    height: 380,
    title: {
      text: "Clusters on the first two principal axes",
      subtitle: `${points.length.toLocaleString("en-US")} of ${projection.n_samples.toLocaleString("en-US")} points; fainter = softer assignment`,
    },
    layer: [
      {
        name: "points",
        data: { values: points },
        mark: { type: "circle", size: 16 },
        encoding: {
          x: { field: "x", type: "quantitative", title: `PC1 (${first})`, scale: { zero: false } },
          y: { field: "y", type: "quantitative", title: `PC2 (${second})`, scale: { zero: false } },
          color,
          opacity: {
            field: "entropy",
            type: "quantitative",
            scale: { domain: [0, maxEntropy], range: [0.9, 0.15], clamp: true },
            legend: null,
          },
          tooltip: [{ field: "row" }, { field: "label" }, { field: "entropy", format: ".3f" }],
        },
      },
      {
        name: "centroids",
        data: { values: centres },
        mark: {
          type: "point",
          shape: "diamond",
          size: 180,
          filled: true,
          stroke: "#111",
          strokeWidth: 1.5,
          opacity: 1,
        },
        encoding: {
          x: { field: "x", type: "quantitative" },
          y: { field: "y", type: "quantitative" },
          color,
          tooltip: [{ field: "label", title: "centroid" }],
        },
      },
    ],
  };
}

/** Points per cluster. */
export function sizesSpec(sizes) {
  const k = sizes.length;
  return {
    name: "sizes",
    height: 200,
    title: "Cluster sizes",
    data: { values: sizes.map((size, cluster) => ({ cluster, size })) },
    mark: "bar",
    encoding: {
      x: { field: "cluster", type: "ordinal", axis: k > 40 ? { labels: false, ticks: false } : {} },
      y: { field: "size", type: "quantitative", title: "points" },
      color: { field: "cluster", type: "nominal", scale: clusterScale(k), legend: null },
      tooltip: [{ field: "cluster" }, { field: "size" }],
    },
  };
}

export const drawAnnealing = (element, history, kPath, finalInertia) =>
  draw(element, annealingSpec(history, kPath, finalInertia));
export const drawProjection = (element, projection, k) =>
  draw(element, projectionSpec(projection, k));
export const drawSizes = (element, sizes) => draw(element, sizesSpec(sizes));
