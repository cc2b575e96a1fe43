// The data of the annealing diagram: the fit's temperatures (the result's `history`), how
// many distinct centres lived at each temperature (`k_path`, when the result has one) and
// where the centres split (phase transitions).

/** The annealing temperatures, hottest first: history records with sigma > 0 (sigma = 0
 *  marks a Lloyd phase) and an inertia. */
export function temperatures(history) {
  return (history || [])
    .filter((r) => r.sigma > 0 && r.inertia !== null && r.inertia !== undefined)
    .map((r) => ({ sigma: r.sigma, inertia: r.inertia, objective: r.objective ?? null }))
    .sort((a, b) => b.sigma - a.sigma);
}

/** Counts annealing reached: those with a temperature (`n_clusters: "auto"` also reports
 *  counts it skipped, filled in by merging, with `sigma_appear` null). */
function annealed(kPath) {
  return (kPath || []).filter((entry) => entry.sigma_appear != null);
}

/** The count of distinct centres as segments of temperature: k from `sigma_appear` down to
 *  `sigma_split` (or down to `coldest`, for the k that lives to the end). */
export function countSegments(kPath, coldest) {
  return annealed(kPath).map((entry) => ({
    k: entry.k,
    from: entry.sigma_appear,
    to: entry.sigma_split ?? coldest ?? entry.sigma_appear,
    inertia: entry.inertia,
  }));
}

/** Transitions from a k path: where each k after the first appeared. */
export function pathTransitions(kPath) {
  const entries = annealed(kPath).sort((a, b) => a.k - b.k);
  return entries.slice(1).map((entry, i) => ({
    sigma: entry.sigma_appear,
    label: `${entries[i].k} → ${entry.k} centres`,
  }));
}

/** Transitions estimated from the inertia alone (no k path): the temperatures where it
 *  falls by at least `drop` of its value in one cooling step, and by more than in the
 *  steps beside (a split releases inertia at once; cooling between splits barely does).
 *  Each is placed between the two temperatures (their geometric mean). */
export function estimatedTransitions(temps, drop = 0.1) {
  const falls = temps.map((t, i) =>
    i === 0 ? 0 : (temps[i - 1].inertia - t.inertia) / temps[i - 1].inertia,
  );
  const found = [];
  for (let i = 1; i < temps.length; i += 1) {
    const peak = falls[i] >= (falls[i - 1] ?? 0) && falls[i] >= (falls[i + 1] ?? 0);
    if (falls[i] >= drop && peak) {
      found.push({
        sigma: Math.sqrt(temps[i - 1].sigma * temps[i].sigma),
        label: `inertia −${Math.round(100 * falls[i])}% (estimated)`,
      });
    }
  }
  return found;
}

/** Everything the diagram draws. */
export function annealingData(history, kPath) {
  const temps = temperatures(history);
  const coldest = temps.length ? temps[temps.length - 1].sigma : null;
  const hasPath = Array.isArray(kPath) && kPath.length > 0;
  return {
    temps,
    segments: hasPath ? countSegments(kPath, coldest) : [],
    transitions: hasPath ? pathTransitions(kPath) : estimatedTransitions(temps),
    estimated: !hasPath,
  };
}
