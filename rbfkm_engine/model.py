"""``RBFKMeans``: annealed RBF-K-Means with the scikit-learn estimator API."""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from sklearn.base import BaseEstimator, ClusterMixin, TransformerMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from .anneal import Schedule
from .assign import responsibilities, to_csr_block
from .blocks import block_budget, default_chunk_rows, iter_chunks
from .choose_k import CRITERIA, GAP_REFERENCE_ROWS, GapReference, principal_box_samples
from .context import FitContext
from .device import resolve_device
from .distances import squared_distances, squared_norms
from .frame import (
    COSINE_SCALE,
    Framed,
    centred,
    into_fit_frame,
    max_abs,
    onto_sphere,
    power_of_two_scale,
    scaled,
    squared_in_data_units,
    times_power_of_two,
    unscaled_callback,
    unscaled_record,
)
from .init import kmeans_plusplus, random_init
from .inputs import (
    array_input,
    check_tensor,
    check_total_weight,
    init_array,
    is_empty_shard,
    sample_weights,
)
from .kpath import KPathRecord, PathCount
from .parallel import BlockPool, cpu_threads
from .params import ASSIGNMENTS, DTYPES, PARAMETER_CONSTRAINTS, validate_params
from .passes import Workspace
from .progress import Budget, Callback, Interrupt, StopCheck, interrupter
from .reducer import LOCAL, Reducer
from .solver import AutoK, SolverResult, annealing_budget, solve
from .temperature import (
    colder_temperatures,
    iterations_per_temperature,
    schedule_for,
)

_DTYPES = {"float32": torch.float32, "float64": torch.float64}
assert tuple(_DTYPES) == DTYPES
_NUMPY_DTYPES = {"float32": np.float32, "float64": np.float64}


class RBFKMeans(ClusterMixin, TransformerMixin, BaseEstimator):
    r"""K-Means as the zero-temperature limit of an RBF network, solved by annealing.

    For a temperature ``sigma`` the responsibilities of point ``x_i`` are
    ``R_i = map(-D_i / sigma)`` with ``D_ij = ||x_i - c_j||^2`` and ``map`` one of softmax,
    entmax15 (sparse) or hard argmin. ``R`` and the centres ``C`` are a fixed point of

    .. math::

        J_\sigma(C, R) = \sum_i w_i \sum_j R_{ij} D_{ij} - \sigma \sum_i w_i H(R_i),
        \qquad c_j = \frac{\sum_i w_i R_{ij} x_i}{\sum_i w_i R_{ij}},

    (``H``: Shannon entropy for softmax, Tsallis-1.5 for entmax15). ``sigma`` starts just
    above the critical temperature where the collapsed solution splits and falls
    geometrically; a grown fit's centres split at the data's phase transitions and, once
    all ``n_clusters`` exist, trade slots where a split pays for a merge
    (:mod:`~rbfkm_engine.trades`); hard Lloyd iterations finish on a true K-Means fixed
    point. Annealed fits then swap a centre for a better-placed one while that lowers the
    inertia (the local search of Lattanzi and Sohler, 2019), each swap followed by Lloyd
    again.

    Parameters
    ----------
    n_clusters : int or "auto", default=8
        ``"auto"`` chooses ``k <= max_clusters`` from the k path of one annealed fit
        (:mod:`~rbfkm_engine.choose_k`); ``n_clusters_`` says which.
    max_clusters : int, default=10
        The largest ``k`` that ``n_clusters="auto"`` may choose.
    assignment : {"entmax15", "softmax", "hard"}, default="entmax15"
        The responsibility map. ``"hard"`` is plain Lloyd from the initial centres.
    metric : {"euclidean", "cosine"}, default="euclidean"
        ``"cosine"``: spherical K-Means on the rows' directions, ``1 - cos`` in place of
        the squared distance (inertia, temperatures and ``transform`` in those units).
    sigma0 : float or "auto", default="auto"
        First temperature. ``"auto"``: 1.1 x the critical temperature of ``m`` coincident
        centres, ``2 lambda_max`` for softmax and ``2 sqrt(m) lambda_max`` for entmax15
        (``lambda_max``: largest eigenvalue of the weighted covariance). ``m = 2`` when the
        centres are grown by splitting (a centre and its twin, the default), ``m = k``
        when annealing starts from an ``init`` array.
    sigma_min : float or "auto", default="auto"
        Last temperature; ``"auto"``: ``1e-4 x 2 lambda_max``, or lower while the
        temperature there is above a quarter of the cells' mean squared radius (many
        centres: docs/algorithm.md, "Schedule"). Annealing also stops once almost every
        point is hard (exactly, for entmax15).
    cooling : float, default=0.8
        Geometric rate ``sigma <- cooling * sigma``, in (0, 1). Each temperature gets up
        to ``ceil(log(cooling) / log(0.8))`` fixed-point iterations (1 at the default),
        fewer once the centres move less than ``tol``.
    overshoot : float, default=1.0
        A grown fit (an ``init`` string, a fixed ``n_clusters``, Euclidean) anneals to up
        to ``overshoot`` times ``n_clusters`` centres, then groups those cells into
        ``n_clusters`` by a weighted K-Means of their means (the cells' masses as weights),
        which counts each region's mass where annealing's splits count only its spread. In
        [1, 4]; 1: anneal to ``n_clusters``. More time for a lower inertia where the data
        are a continuum (colours, patches) and ``n_clusters`` is large; see
        docs/algorithm.md.
    max_iter : int, default=300
        Fixed-point iterations of annealing and the Lloyd finish together: annealing may
        use at most 80% of them, the Lloyd finish the rest and anything annealing left.
        The local search of an annealed fit has twice as many of its own, in which a Lloyd
        finish that has not converged goes on first, and keeps a move only once its Lloyd
        phase has converged. So a fit ends on a K-Means fixed point unless the Lloyd finish
        ran out of those too, which ``converged_`` says and a ``ConvergenceWarning``
        reports.
    tol : float, default=1e-4
        Convergence when the summed squared centre shift is below ``tol`` times the mean
        per-feature variance of the data (scikit-learn's convention).
    init : {"k-means++", "random"} or array of shape (n_clusters, n_features)
    n_init : int, default=1
        Runs from different initialisations; the lowest inertia wins.
    device : str, default="auto"
        ``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
    dtype : {"float32", "float64"}, default="float32"
        Precision of the fit. Fitted arrays are returned in the input's float precision.
    matmul_precision : {"highest", "high", "medium"}, default="high"
        On CUDA with Triton, the input precision of Lloyd's distance products: float32,
        TF32 or bfloat16, accumulated in float32 (named as in
        ``torch.set_float32_matmul_precision``). Whatever it is, Lloyd ends with float32
        products until the centres stop moving, so the fit ends on a float32 K-Means
        fixed point and ``labels_`` equal ``predict``'s. No effect on the CPU or with
        ``dtype="float64"``.
    chunk_size : int or None, default=None
        Rows per distance block; ``None`` derives it from a 256 MiB budget.
    random_state : int, RandomState or None
    verbose : bool, default=False

    Attributes
    ----------
    cluster_centers_ : ndarray (n_clusters, n_features)
    labels_ : ndarray (n_samples,) of int64, equal to ``predict(X)``
    inertia_ : float, weighted sum of squared distances to the nearest centre
    n_iter_ : int, fixed-point iterations of the best run
    n_features_in_ : int
    sigma_ : float, the last annealing temperature (0.0 for ``"hard"``)
    history_ : list of dict, one per temperature, one for the Lloyd phase and one for
        the Lloyd phase after each swap (``sigma = 0`` for both), with
        ``sigma, objective, inertia, iterations, mean_nnz``. A grown fit's hottest
        temperatures, where the first twin is advanced by the linearised map, have
        ``iterations = 0`` and the statistics of the collapsed centres.
    converged_ : bool, whether the fit ended on a K-Means fixed point: its last Lloyd
        phase moved the centres by less than ``tol`` (``False`` when ``max_iter`` ran out
        or the callback stopped the fit before that; ``False`` for :meth:`from_centers`)
    stopped_early_ : bool, whether the fit callback stopped the fit
    n_clusters_ : int, the number of centres fitted
    k_path_ : list of :class:`~rbfkm_engine.kpath.KPathRecord`, one per count of centres
        annealing reached: ``k, sigma_appear, sigma_split, inertia, centers``

    Examples
    --------
    >>> import numpy as np
    >>> from rbfkm_engine import RBFKMeans
    >>> X = np.array([[0.0, 0.0], [0.1, 0.0], [5.0, 5.0], [5.1, 5.0]])
    >>> km = RBFKMeans(n_clusters=2, random_state=0, device="cpu").fit(X)
    >>> sorted(np.bincount(km.labels_).tolist())
    [2, 2]
    """

    _parameter_constraints = PARAMETER_CONSTRAINTS
    #: The criterion ``n_clusters="auto"`` chooses ``k`` by (see
    #: :mod:`~rbfkm_engine.choose_k`); the others are there to be compared with it.
    _k_criterion = CRITERIA[0]

    def __init__(
        self,
        n_clusters: int | str = 8,
        *,
        max_clusters: int = 10,
        assignment: str = "entmax15",
        metric: str = "euclidean",
        sigma0: float | str = "auto",
        sigma_min: float | str = "auto",
        cooling: float = 0.8,
        overshoot: float = 1.0,
        max_iter: int = 300,
        tol: float = 1e-4,
        init: str | np.ndarray = "k-means++",
        n_init: int = 1,
        device: str = "auto",
        dtype: str = "float32",
        matmul_precision: str = "high",
        chunk_size: int | None = None,
        random_state: int | np.random.RandomState | None = None,
        verbose: bool = False,
    ) -> None:
        # Eighteen parameters, past the engine's guide of eight: scikit-learn's estimator
        # API wants every hyper-parameter as a keyword of __init__, stored as given
        # (get_params, set_params, clone and the estimator checks rely on it).
        self.n_clusters = n_clusters
        self.max_clusters = max_clusters
        self.assignment = assignment
        self.metric = metric
        self.sigma0 = sigma0
        self.sigma_min = sigma_min
        self.cooling = cooling
        self.overshoot = overshoot
        self.max_iter = max_iter
        self.tol = tol
        self.init = init
        self.n_init = n_init
        self.device = device
        self.dtype = dtype
        self.matmul_precision = matmul_precision
        self.chunk_size = chunk_size
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------------ validation
    def _validate_params(self) -> None:
        """Check every parameter against :data:`~rbfkm_engine.params.PARAMETER_CONSTRAINTS`;
        the message names the parameter, what it may be and what it was."""
        validate_params(self._params(), self._parameter_constraints)

    def _params(self) -> dict[str, Any]:
        """The parameters by name (``get_params`` without its signature inspection, which
        costs more than a small fit's pass)."""
        return {name: getattr(self, name) for name in self._parameter_constraints}

    def _to_tensor(
        self,
        X: Any,
        *,
        reset: bool,
        dtype: torch.dtype | None = None,
        allow_empty: bool = False,
    ) -> tuple[torch.Tensor, np.dtype]:
        """Validate ``X`` and return it on the fit device, with its float numpy dtype.

        Torch tensors are taken as they are (no trip through the host); everything else
        goes through scikit-learn's ``validate_data``. ``allow_empty``: a ``(0, d)`` array
        is a valid shard of a data-parallel fit.
        """
        device = resolve_device(self.device)
        if allow_empty and is_empty_shard(X):
            self.n_features_in_ = int(X.shape[1])
            floating = X.dtype in (torch.float64, np.float64)
            out_dtype = np.dtype("float64" if floating else "float32")
            return torch.empty((0, X.shape[1]), dtype=dtype, device=device), out_dtype
        if not isinstance(X, torch.Tensor):
            array = validate_data(
                self, X, reset=reset, dtype=[np.float64, np.float32], order="C", accept_sparse=False
            )
            return array_input(array, device, dtype), array.dtype
        check_tensor(X)
        if reset:
            self.n_features_in_ = int(X.shape[1])
        elif X.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {X.shape[1]} features, but {type(self).__name__} is expecting "
                f"{self.n_features_in_} features as input."
            )
        out_dtype = np.dtype("float64") if X.dtype == torch.float64 else np.dtype("float32")
        target = dtype or (torch.float64 if X.dtype == torch.float64 else torch.float32)
        return X.detach().to(device=device, dtype=target).contiguous(), out_dtype

    def _chunk(self, X: torch.Tensor, k: int) -> int:
        """Rows per block against ``k`` centres: the ``chunk_size`` parameter, else cache-
        and budget-sized."""
        if self.chunk_size is not None:
            return int(self.chunk_size)
        d, item = X.shape[1], X.element_size()
        return default_chunk_rows(k, d, item, X.device, block_budget(X.device))

    # ------------------------------------------------------------------ fitting
    def _auto(self) -> bool:
        """Whether ``k`` is chosen from the annealing path (``n_clusters="auto"``)."""
        return self.n_clusters == "auto"

    def _k_to_fit(self, n: int) -> int:
        """The centres a run anneals to: ``n_clusters``, or with ``"auto"`` one more than
        ``max_clusters`` (so that every count it may choose has split again), at most
        ``n``."""
        if not self._auto():
            return int(self.n_clusters)
        if not self._grows_centres() or self.assignment == "hard":
            raise ValueError(
                "n_clusters='auto' chooses k from the annealing path of centres grown from "
                "the mean: use a string init and an annealed assignment ('entmax15' or "
                "'softmax'), or give n_clusters as an int."
            )
        return min(int(self.max_clusters) + 1, n)

    def _initial_centres(
        self,
        framed: Framed,
        w: torch.Tensor | None,
        generator: torch.Generator,
        check: Interrupt,
        pool: BlockPool,
        reducer: Reducer,
        k: int,
    ) -> torch.Tensor:
        """Initial centres in the fit's frame (an ``init`` array is scaled, then its
        origin subtracted); the same on every rank of a data-parallel fit."""
        X, x_sq, origin, scale = framed.X, framed.x_sq, framed.origin, framed.scale
        if isinstance(self.init, str):
            if self.init == "k-means++":
                return kmeans_plusplus(
                    X,
                    k,
                    sample_weight=w,
                    generator=generator,
                    x_sq=x_sq,
                    check=check,
                    pool=pool,
                    reducer=reducer,
                )
            return random_init(X, k, sample_weight=w, generator=generator, reducer=reducer)
        C = init_array(self.init, k, X.shape[1], X.device)
        return (C * scale - origin).to(X.dtype)

    def _grows_centres(self) -> bool:
        """Whether an annealed fit grows its centres by splitting from the mean.

        Annealing from the collapsed state forgets any initial centres, so it grows them
        instead; an explicit init array is honoured as given.
        """
        return isinstance(self.init, str)

    def fit(
        self,
        X: Any,
        y: Any = None,
        sample_weight: Any = None,
        *,
        callback: Callback | None = None,
        should_stop: StopCheck | None = None,
        process_group: Any = "default",
    ) -> RBFKMeans:
        """Fit the centres.

        Parameters
        ----------
        X : array-like or torch.Tensor of shape (n_samples, n_features)
        y : ignored
        sample_weight : array-like of shape (n_samples,), optional
        callback : callable, optional
            Called after every fixed-point iteration with a
            :class:`~rbfkm_engine.FitProgress`; returning ``True`` stops the fit, which
            still ends with consistent fitted attributes (``stopped_early_ = True``).
        should_stop : callable, optional
            A cheap check without arguments, polled between the blocks of every pass and
            every step of the fit's other long loops (k-means++, re-seeding, merging
            centres); once it returns ``True`` the fit raises
            :class:`~rbfkm_engine.FitInterrupted` within one block of work and sets no
            fitted attributes (a service's cancel or time limit: nothing to keep).
        process_group : "default", None or a torch.distributed ProcessGroup
            The processes whose shards make the data: ``"default"``, the default group
            when one is initialised (else this process alone); ``None``, this process
            alone whatever groups exist.

        Called on every rank of an initialised ``torch.distributed`` process group (of
        more than one process), each with its own shard of the rows and the same
        parameters, it fits the union of the shards (see docs/distributed.md): the fitted
        attributes are the same on every rank, ``labels_`` are the rank's own rows, and
        ``callback`` is called on rank 0 only.
        """
        self._validate_params()
        reducer = Reducer.of(process_group)
        # Every torch op of the fit runs on this thread, its passes' blocks on the pool's
        # (see parallel.BlockPool): an op parallelised on its own, such as framing the
        # data, leaves torch's OpenMP workers spinning for milliseconds after it, on the
        # cores the pool's threads then need.
        with BlockPool(cpu_threads(resolve_device(self.device))) as pool:
            framed, w, k, out_dtype = self._framed(X, sample_weight, reducer)
            best = self._best_run(
                framed,
                w,
                k,
                check_random_state(self.random_state),
                reducer.on_rank0(callback),
                interrupter(should_stop),
                pool,
                reducer,
            )
        scale, origin = framed.scale, framed.origin
        del framed  # the fit's copy of X, before predict may make its own (see _store)
        self._store(best, scale, origin, X, sample_weight, out_dtype, reducer)
        return self

    def _framed(
        self, X: Any, sample_weight: Any, reducer: Reducer
    ) -> tuple[Framed, torch.Tensor | None, int, np.dtype]:
        """``X`` validated and in the fit's frame, the sample weights, the centres to fit
        and the data's float numpy dtype."""
        Xt, out_dtype = self._to_tensor(
            X, reset=True, dtype=_DTYPES[self.dtype], allow_empty=reducer.active
        )
        reducer.same_everywhere(Xt.shape[1], "number of features")
        reducer.same_everywhere(int(out_dtype == np.float64), "input precision (float64: 1)")
        n = sum(reducer.gather_ints(Xt.shape[0]))
        k = self._k_to_fit(n)
        if n < k:
            raise ValueError(
                f"n_samples={n} should be >= n_clusters={self.n_clusters}: "
                f"ask for at most {n} clusters or provide more samples."
            )
        top = reducer.max_float(max_abs(Xt) if Xt.shape[0] else 0.0)
        if not math.isfinite(top):  # finite input (checked), not in the compute dtype
            raise ValueError(
                f"X has values beyond the range of dtype={self.dtype!r} "
                f"(|x| up to {torch.finfo(Xt.dtype).max:.3g}); fit with dtype='float64'."
            )
        w = sample_weights(sample_weight, Xt, shard=reducer.active)
        if reducer.active:  # every rank takes part, weighted or not
            check_total_weight(reducer.sum_floats(Xt.shape[0] if w is None else float(w.sum()))[0])
        if self._cosine():
            framed = onto_sphere(Xt, X, w, reducer)
        else:
            framed = into_fit_frame(Xt, X, w, top, reducer)
        return framed, w, k, out_dtype

    def _cosine(self) -> bool:
        """Whether the fit compares rows by direction (``metric="cosine"``)."""
        return self.metric == "cosine"

    def _squared_scale(self, scale: float) -> float:
        """The scale of squared quantities (inertias, temperatures): the data's, or for
        a cosine fit that of ``1 - cos``, half the squared distance on the sphere."""
        return scale * COSINE_SCALE if self._cosine() else scale

    def _best_run(
        self,
        framed: Framed,
        w: torch.Tensor | None,
        k: int,
        rng: np.random.RandomState,
        callback: Callback | None,
        check: Interrupt,
        pool: BlockPool,
        reducer: Reducer = LOCAL,
    ) -> SolverResult:
        """The ``n_init`` runs of the solver on the framed data; the lowest inertia wins.
        ``check``: the stop check every phase calls between its blocks; ``pool``: the
        threads the passes' blocks run on. Over shards (``reducer``) every rank draws
        rank 0's seeds."""
        Xt = framed.X
        # Mean per-feature variance: trace of the covariance / d.
        tol = float(self.tol) * framed.spread / Xt.shape[1]
        mean = framed.mean - framed.origin
        params = {**self._params(), "n_clusters": k}
        dscale = self._squared_scale(framed.scale)
        temperatures, cov = schedule_for(
            params, self._grows_centres(), Xt, w, mean, dscale, reducer
        )
        grow = bool(temperatures) and self._grows_centres()
        if not grow:
            cov = None  # only a grown fit's first twin uses the covariance
        budget = annealing_budget(int(self.max_iter))
        schedule = Schedule(
            temperatures,
            self.assignment,
            iterations_per_temperature(float(self.cooling)),
            budget,
            float(self.overshoot),
            colder_temperatures(params, temperatures, budget),
        )
        chunk = self._chunk(Xt, k)
        auto = self._auto_k(Xt, mean, cov, rng, check, reducer)
        n_init = 1 if not isinstance(self.init, str) else int(self.n_init)
        best: SolverResult | None = None
        iterations_done = 0
        for run in range(n_init):
            generator = torch.Generator(device=Xt.device)
            seed = reducer.broadcast_ints([rng.randint(np.iinfo(np.int32).max)])[0]
            generator.manual_seed(seed)
            C0 = (
                None
                if grow
                else self._initial_centres(framed, w, generator, check, pool, reducer, k)
            )
            budget = Budget(
                int(self.max_iter),
                unscaled_callback(callback, dscale),
                offset=run / n_init,
                scale=1.0 / n_init,
                iteration_offset=iterations_done,
            )
            passes = Workspace(
                Xt,
                w,
                k,
                chunk,
                framed.x_sq,
                precision=self.matmul_precision,
                check=check,
                pool=pool,
                reducer=reducer,
            )
            passes.sphere = self._cosine()
            verbose = bool(self.verbose) and reducer.rank == 0
            ctx = FitContext(passes, budget, tol, generator, verbose=verbose)
            result = solve(ctx, schedule, C0, cov, auto)
            iterations_done += result.n_iter
            if best is None or result.inertia < best.inertia:
                best = result
            if result.stopped_early:
                break
        assert best is not None
        return best

    def _auto_k(
        self,
        Xt: torch.Tensor,
        mean: torch.Tensor,
        cov: torch.Tensor | None,
        rng: np.random.RandomState,
        check: Interrupt,
        reducer: Reducer,
    ) -> AutoK | None:
        """How ``n_clusters="auto"`` chooses (``None`` for a fixed ``k``); the gap
        criterion's reference paths are fitted here, before the data's own run (``check``
        stops them as it stops the fit)."""
        if not self._auto():
            return None
        reference = None
        if self._k_criterion == "gap":
            seed = reducer.broadcast_ints([rng.randint(np.iinfo(np.int32).max)])[0]
            reference = self._gap_reference(Xt, mean, cov, seed, check, reducer)
        return AutoK(int(self.max_clusters), self._k_criterion, reference)

    def _gap_reference(
        self,
        Xt: torch.Tensor,
        mean: torch.Tensor,
        cov: torch.Tensor | None,
        seed: int,
        check: Interrupt,
        reducer: Reducer,
    ) -> GapReference:
        """The k paths of the gap statistic's reference sets (in the fit's frame): one
        ``n_clusters="auto"`` fit of this estimator's parameters on each, in this process
        alone (every rank draws and fits the same sets)."""
        generator = torch.Generator(device=Xt.device)
        generator.manual_seed(seed)
        rows = min(GAP_REFERENCE_ROWS, int(reducer.sum_floats(Xt.shape[0])[0]))

        def stop() -> bool:  # the outer fit's check raises FitInterrupted itself
            check()
            return False

        paths = []
        for Z in principal_box_samples(Xt, mean, cov, generator, rows, reducer):
            params = {**self.get_params(), "random_state": seed, "verbose": False}
            reference = type(self)(**params)
            reference._k_criterion = "lifetime"  # needs no scoring: only the path is read
            with warnings.catch_warnings():  # uniform data: the user's fit is not theirs
                warnings.simplefilter("ignore", ConvergenceWarning)
                reference.fit(Z, should_stop=stop, process_group=None)
            paths.append(
                {r.k: r.inertia / rows for r in reference.k_path_ if r.inertia is not None}
            )
        return GapReference.from_paths(paths)

    def _store(
        self,
        best: SolverResult,
        scale: float,
        origin: torch.Tensor,
        X: Any,
        sample_weight: Any,
        out_dtype: np.dtype,
        reducer: Reducer = LOCAL,
    ) -> None:
        """Set the fitted attributes from the best run, in the data's units (``labels_``:
        of this shard's rows; the rest the same on every rank)."""
        if not best.converged and not best.stopped_early:
            warnings.warn(
                f"RBFKMeans did not converge within max_iter={self.max_iter} iterations; "
                "increase max_iter or tol.",
                ConvergenceWarning,
                stacklevel=3,
            )
        self._scale = scale
        self._dscale = dscale = self._squared_scale(scale)
        self._origin = origin.cpu().numpy()
        self._centred_centers = best.centres.cpu().numpy()
        self.cluster_centers_ = (
            (best.centres.double().cpu().numpy() + self._origin) / scale
        ).astype(out_dtype)
        if self._inference_dtype(out_dtype) == _DTYPES[self.dtype]:
            # predict would repeat the solver's last pass operation for operation (same
            # centred data, centres and blocks): its labels are predict(X).
            self.labels_ = best.labels.cpu().numpy()
            self.inertia_ = squared_in_data_units(float(best.inertia), dscale)
        else:
            # A wider inference precision: labels and inertia through predict's own path,
            # so that labels_ == predict(X) holds exactly.
            self.labels_, inertia = self._labels_inertia(X, sample_weight, reducer.active)
            self.inertia_ = reducer.sum_floats(inertia)[0]
        self.n_iter_ = int(best.n_iter)
        self.sigma_ = squared_in_data_units(float(best.sigma), dscale)
        self.history_ = [unscaled_record(record, dscale) for record in best.history]
        self.n_clusters_ = int(best.centres.shape[0])
        self.k_path_ = [self._path_record(count, scale, dscale) for count in best.path]
        if not self._auto() and self.k_path_ and self.k_path_[-1].k == self.n_clusters_:
            # The last count is the fit itself: its inertia as the fit reports it.
            self.k_path_[-1] = dataclasses.replace(self.k_path_[-1], inertia=self.inertia_)
        self.stopped_early_ = bool(best.stopped_early)
        self.converged_ = bool(best.converged)
        counts = torch.from_numpy(np.bincount(self.labels_, minlength=self.n_clusters_))
        distinct = int(torch.count_nonzero(reducer.sum(counts)))
        if distinct < self.n_clusters_:
            warnings.warn(
                f"Number of distinct clusters ({distinct}) found smaller than "
                f"n_clusters ({self.n_clusters_}). Possibly due to duplicate points in X.",
                ConvergenceWarning,
                stacklevel=3,
            )

    def _path_record(self, count: PathCount, scale: float, dscale: float) -> KPathRecord:
        """A count of the k path in the data's units (``dscale``: of squared quantities)."""

        def unscaled(sigma: float | None) -> float | None:
            return None if sigma is None else squared_in_data_units(float(sigma), dscale)

        centers = None
        if count.centres is not None:
            centres = (count.centres.double().cpu().numpy() + self._origin) / scale
            centers = centres.astype(self.cluster_centers_.dtype)
        return KPathRecord(
            k=count.k,
            sigma_appear=unscaled(count.sigma_appear),
            sigma_split=unscaled(count.sigma_split),
            inertia=unscaled(count.inertia),
            centers=centers,
        )

    @classmethod
    def from_centers(
        cls,
        centers: Any,
        *,
        assignment: str = "entmax15",
        sigma: float = 0.0,
        device: str = "cpu",
        dtype: str | None = None,
        metric: str = "euclidean",
    ) -> RBFKMeans:
        """A fitted estimator with the given centres (to predict without refitting);
        with ``metric="cosine"`` the centres are taken as directions."""
        array = np.asarray(centers)
        if array.ndim != 2 or array.shape[0] < 1 or array.shape[1] < 1:
            raise ValueError(f"centers must be a non-empty 2D array, got shape {array.shape}")
        if array.dtype not in (np.float32, np.float64):
            array = array.astype(np.float64)
        if not np.isfinite(array).all():
            raise ValueError("centers contain NaN or infinity")
        if not (math.isfinite(sigma) and sigma >= 0):
            raise ValueError(f"sigma must be a finite float >= 0, got {sigma}")
        model = cls(
            n_clusters=int(array.shape[0]),
            assignment=assignment,
            device=device,
            dtype=dtype or ("float64" if array.dtype == np.float64 else "float32"),
            metric=metric,
        )
        model._validate_params()
        if model._cosine():
            norms = np.linalg.norm(array, axis=1, keepdims=True)
            if not (norms > 0).all():
                raise ValueError("centers of norm 0 have no direction for metric='cosine'")
            array = array / norms
        if dtype is not None:
            array = array.astype(_NUMPY_DTYPES[model.dtype])
        model.cluster_centers_ = np.ascontiguousarray(array)
        model._scale = power_of_two_scale(float(np.abs(array).max()), _DTYPES[model.dtype])
        scaled = array.astype(np.float64) * model._scale
        model._origin = np.zeros(array.shape[1]) if model._cosine() else scaled.mean(axis=0)
        model._dscale = model._squared_scale(model._scale)
        model._centred_centers = (scaled - model._origin).astype(_NUMPY_DTYPES[model.dtype])
        model.n_features_in_ = int(array.shape[1])
        model.sigma_ = float(sigma)
        model.n_iter_ = 0
        model.history_ = []
        model.n_clusters_ = int(array.shape[0])
        model.k_path_ = []
        model.stopped_early_ = False
        model.converged_ = False  # no fit: nothing has converged
        return model

    # ------------------------------------------------------------------ inference
    def _predict_inputs(
        self, X: Any, allow_empty: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, np.dtype]:
        """``X`` and the centres on the device in the fit's frame (scaled by ``_scale``,
        centred by the fit's mean), in the wider of the fit's and the input's precisions."""
        check_is_fitted(self, "cluster_centers_")
        Xt, out_dtype = self._to_tensor(X, reset=False, allow_empty=allow_empty)
        wide = self._inference_dtype(out_dtype)
        mean = torch.from_numpy(self._origin).to(Xt.device)
        if wide == _DTYPES[self.dtype]:
            C = torch.from_numpy(self._centred_centers).to(device=Xt.device, dtype=wide)
        else:
            C = torch.from_numpy(np.asarray(self.cluster_centers_, dtype=np.float64))
            C = (C.to(Xt.device) * self._scale - mean).to(wide)
        if self._cosine():
            return onto_sphere(Xt.to(wide), X, None).X, C, out_dtype
        return centred(scaled(Xt.to(wide), X, self._scale), X, mean), C, out_dtype

    def _inference_dtype(self, input_dtype: np.dtype) -> torch.dtype:
        """The wider of the fit's precision and the input's."""
        if np.dtype(input_dtype) == np.float64 or self.dtype == "float64":
            return torch.float64
        return torch.float32

    def _blocks(self, X: torch.Tensor, C: torch.Tensor):
        """Yield ``(rows, D)`` distance blocks of ``X`` to the centres."""
        x_sq = squared_norms(X)
        c_sq = squared_norms(C)
        for rows in iter_chunks(X.shape[0], self._chunk(X, C.shape[0])):
            yield rows, squared_distances(X[rows], C, x_sq[rows], c_sq)

    def _labels_inertia(
        self, X: Any, sample_weight: Any = None, allow_empty: bool = False
    ) -> tuple[np.ndarray, float]:
        """Nearest centre of each point and the weighted inertia: the solver's last pass
        (the same operations on the same blocks), so ``labels_ == predict(X)``."""
        Xt, C, _ = self._predict_inputs(X, allow_empty)
        w = sample_weights(sample_weight, Xt)
        k = C.shape[0]
        last_pass = Workspace(Xt, w, k, self._chunk(Xt, k))
        inertia = last_pass.hard_labels(C)
        return last_pass.labels.cpu().numpy(), squared_in_data_units(inertia, self._dscale)

    def predict(self, X: Any) -> np.ndarray:
        """Index of the nearest centre for each sample (int64)."""
        return self._labels_inertia(X)[0]

    def fit_predict(self, X: Any, y: Any = None, sample_weight: Any = None) -> np.ndarray:
        """Fit, then return ``labels_``."""
        return self.fit(X, sample_weight=sample_weight).labels_

    def transform(self, X: Any) -> np.ndarray:
        """Distances to every centre, shape (n_samples, n_clusters): Euclidean, or
        ``1 - cos`` with ``metric="cosine"``."""
        Xt, C, out_dtype = self._predict_inputs(X)
        out = torch.empty((Xt.shape[0], C.shape[0]), dtype=Xt.dtype, device=Xt.device)
        for rows, D in self._blocks(Xt, C):
            if self._cosine():
                out[rows] = D / 2.0  # 1 - cos
            else:
                out[rows] = times_power_of_two(D.sqrt_(), 1.0 / self._scale)
        return out.cpu().numpy().astype(out_dtype, copy=False)

    def soft_assign(self, X: Any, sigma: float | None = None) -> sp.csr_matrix:
        """Responsibilities ``map(-D / sigma)`` as a CSR matrix whose rows sum to 1.

        ``sigma=None`` uses the final annealing temperature ``sigma_``; ``sigma=0`` (or a
        hard estimator) gives one-hot rows. Only nonzeros are stored.
        """
        sigma = self.sigma_ if sigma is None else float(sigma)
        if not (math.isfinite(sigma) and sigma >= 0):
            raise ValueError(f"sigma must be a finite float >= 0, got {sigma}")
        Xt, C, out_dtype = self._predict_inputs(X)
        sigma = sigma * self._dscale * self._dscale  # a squared distance, in the fit's frame
        assignment = self.assignment if self.assignment in ASSIGNMENTS else "hard"
        blocks = [
            to_csr_block(responsibilities(D, sigma, assignment).responsibilities, C.shape[0])
            for _, D in self._blocks(Xt, C)
        ]
        out = sp.vstack(blocks, format="csr")
        return out.astype(out_dtype, copy=False)

    def score(self, X: Any, y: Any = None, sample_weight: Any = None) -> float:
        """Minus the (weighted) inertia of ``X`` against the fitted centres."""
        return -self._labels_inertia(X, sample_weight)[1]
