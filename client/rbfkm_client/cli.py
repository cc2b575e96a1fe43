"""The command line of the client: `rbfkm-client fit | jobs | datasets` (also reachable
as `rbfkm fit`, `rbfkm jobs` and `rbfkm datasets` where the service is installed).

```
rbfkm-client fit data.parquet -k 8 --url URL --out labels.parquet
rbfkm-client jobs list | show ID | cancel ID
rbfkm-client datasets list
```

Input: a ``.npy``, ``.csv``, ``.parquet`` or ``.json`` file, or an ``https://``,
``s3://`` or ``gs://`` URL of one (read by the service itself).
Output by extension: ``.parquet`` (the service's table: ``row``, ``label``), ``.csv``
(the same columns) or ``.npy`` (the labels alone); ``--centers`` likewise for the
centroids; ``--output-url s3://bucket/prefix/`` has the worker write every table there.
``--url`` and ``--api-key`` default to ``$RBFKM_URL`` and ``$RBFKM_API_KEY``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rbfkm_client.client import DEFAULT_TIMEOUT_S, KEY_VARIABLE, URL_VARIABLE, Client
from rbfkm_client.errors import RbfkmError
from rbfkm_client.media import PARQUET
from rbfkm_client.models import Job, Result

#: Output formats by file extension.
OUTPUTS = (".parquet", ".csv", ".npy")
#: The commands this module adds to a parser.
COMMANDS = ("fit", "jobs", "datasets")


def _connection(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", help=f"The service (default ${URL_VARIABLE}, else :8000).")
    parser.add_argument("--api-key", help=f"Its API key (default ${KEY_VARIABLE}).")
    parser.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="Seconds per HTTP exchange."
    )


def _output(value: str) -> Path:
    path = Path(value)
    if path.suffix.lower() not in OUTPUTS:
        raise argparse.ArgumentTypeError(f"{value!r}: name a file ending in {', '.join(OUTPUTS)}")
    return path


def _param(value: str) -> tuple[str, Any]:
    name, sep, text = value.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{value!r}: write NAME=VALUE, e.g. cooling=0.9")
    try:
        return name.replace("-", "_"), json.loads(text)
    except ValueError:
        return name.replace("-", "_"), text  # a bare word: a string (assignment=softmax)


def _add_fit(commands: Any) -> None:
    fit = commands.add_parser("fit", help="Cluster a data file on the service.")
    fit.add_argument(
        "data",
        help="A .npy, .csv, .parquet or .json file, or an https://, s3:// or gs:// URL of one "
        "(read by the service).",
    )
    fit.add_argument("-k", "--n-clusters", type=int, required=True, help="Clusters to find.")
    fit.add_argument("--out", type=_output, help="Write the labels (.parquet, .csv, .npy).")
    fit.add_argument("--centers", type=_output, help="Write the centroids (same formats).")
    fit.add_argument(
        "--output-url",
        metavar="URL",
        help="An object-store prefix (s3://bucket/prefix/) the worker writes the results to.",
    )
    fit.add_argument("--random-state", type=int, help="Seed of the fit.")
    fit.add_argument("--assignment", help="entmax15, sparsemax, softmax, hard, ...")
    fit.add_argument("--device", help="auto, cpu, cuda, cuda:N.")
    fit.add_argument("--max-runtime-s", type=float, help="Time limit of the job.")
    fit.add_argument(
        "--param",
        type=_param,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="Any other engine parameter (JSON value), repeatable: --param cooling=0.9.",
    )
    fit.add_argument("--no-wait", action="store_true", help="Print the job's id and return.")
    fit.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="Show a progress bar (default: on a terminal).",
    )
    _connection(fit)
    fit.set_defaults(client_handler=run_fit)


def _actions(commands: Any, name: str, text: str) -> Any:
    """A command (``jobs``) whose actions (``list``, ``show``) are subcommands."""
    group = commands.add_parser(name, help=text)
    return group.add_subparsers(dest="action", required=True, metavar="ACTION")


def _action(
    actions: Any, name: str, handler: Callable[[argparse.Namespace], int], text: str
) -> argparse.ArgumentParser:
    """An action that talks to the service (``--url``, ``--api-key``, ``--timeout``)."""
    action = actions.add_parser(name, help=text)
    _connection(action)
    action.set_defaults(client_handler=handler)
    return action


def _add_jobs(commands: Any) -> None:
    actions = _actions(commands, "jobs", "List, show or cancel jobs on the service.")
    listing = _action(actions, "list", run_jobs_list, "Jobs, newest first.")
    listing.add_argument("--status", help="Only jobs in this status.")
    listing.add_argument("--limit", type=int, default=50, help="At most this many.")
    _action(actions, "show", run_jobs_show, "A job as JSON.").add_argument("job_id")
    _action(actions, "cancel", run_jobs_cancel, "Cancel a job.").add_argument("job_id")


def _add_datasets(commands: Any) -> None:
    actions = _actions(commands, "datasets", "List datasets on the service.")
    listing = _action(actions, "list", run_datasets_list, "Datasets, newest first.")
    listing.add_argument("--limit", type=int, default=50, help="At most this many.")


def add_commands(commands: Any) -> None:
    """Add ``fit``, ``jobs`` and ``datasets`` to a parser's subcommands (``rbfkm``'s too)."""
    _add_fit(commands)
    _add_jobs(commands)
    _add_datasets(commands)


def build_parser(prog: str = "rbfkm-client") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Client of an rbfkm service.")
    add_commands(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    return parser


def _client(args: argparse.Namespace) -> Client:
    return Client(args.url, args.api_key, timeout=args.timeout)


def _write(path: Path, client: Client, job: Job, part: str, result: Result) -> None:
    """Write the ``labels`` or ``centroids`` of a job to ``path``, by its extension."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        params = {"include": part}
        path.write_bytes(client.download(f"/v1/jobs/{job.id}/result", PARQUET, params))
        return
    values = result.labels if part == "labels" else result.centroids
    if suffix == ".npy":
        np.save(path, values)
    elif part == "labels":
        table = np.column_stack([np.arange(len(values)), values])
        np.savetxt(path, table, fmt="%d", delimiter=",", header="row,label", comments="")
    else:
        table = np.column_stack([np.arange(len(values)), values])
        names = ",".join(["cluster", *(f"f{j}" for j in range(values.shape[1]))])
        fmt = ["%d", *["%.17g"] * values.shape[1]]
        np.savetxt(path, table, fmt=fmt, delimiter=",", header=names, comments="")


def run_fit(args: argparse.Namespace) -> int:
    params = dict(args.param)
    for name in ("random_state", "assignment", "device", "max_runtime_s"):
        if getattr(args, name) is not None:
            params[name] = getattr(args, name)
    if args.output_url is not None:
        params["output"] = args.output_url
    with _client(args) as client:
        job = client.fit(
            args.data, args.n_clusters, wait=not args.no_wait, progress=args.progress, **params
        )
        if args.no_wait:
            print(job.id)
            return 0
        result = client.result(job)
        print(
            f"job {job.id} succeeded: {len(result.labels)} points in {len(result.centroids)} "
            f"clusters, {result.n_iter} iterations, inertia {result.inertia:.6g}"
        )
        output = job.raw.get("output")
        if output:
            print(f"output {output['status']}: {output.get('error') or output['url']}")
        for path, part in ((args.out, "labels"), (args.centers, "centroids")):
            if path is not None:
                _write(path, client, job, part, result)
                print(f"{part} written to {path}")
    return 0


def _job_line(job: Job) -> str:
    fraction = job.fraction
    progress = "-" if fraction is None else f"{100 * fraction:.0f}%"
    created = job.raw.get("created_at") or "-"
    return f"{job.id}  {job.status:<9}  {progress:>4}  {created}  {job.dataset_id}"


def run_jobs_list(args: argparse.Namespace) -> int:
    with _client(args) as client:
        for job in client.jobs(args.status, args.limit):
            print(_job_line(job))
    return 0


def run_jobs_show(args: argparse.Namespace) -> int:
    with _client(args) as client:
        print(json.dumps(client.job(args.job_id).raw, indent=2))
    return 0


def run_jobs_cancel(args: argparse.Namespace) -> int:
    with _client(args) as client:
        job = client.cancel(args.job_id)
        print(f"job {job.id}: {job.status}")
    return 0


def run_datasets_list(args: argparse.Namespace) -> int:
    with _client(args) as client:
        for dataset in client.datasets(args.limit):
            print(
                f"{dataset.id}  {dataset.n_samples} x {dataset.n_features}  {dataset.name or '-'}"
            )
    return 0


def run(args: argparse.Namespace, prog: str = "rbfkm-client") -> int:
    """Run a parsed client command; errors are one line on stderr and exit status 1."""
    handler: Callable[[argparse.Namespace], int] = args.client_handler
    try:
        return handler(args)
    except BrokenPipeError:
        # The reader of the output went away (`| head`): not an error of the command.
        # Python's documented remedy, so that the exit's flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (RbfkmError, OSError, ValueError, TypeError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    """The ``rbfkm-client`` console script."""
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
