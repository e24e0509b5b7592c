"""Serving under load: the generated serve.py (FastAPI on uvicorn) against LitServe.

Why: serve/app.py chose FastAPI over LitServe; this measures that choice on the model a user
serves. Bakes the template's defaults (serving "yes"), trains with `python train.py` exporting
torch.export only, then serves that model.pt2 four ways, each in its own process on a free
port of 127.0.0.1, one after the other:
- FastAPI: the project's own `python serve.py MODEL` (uvicorn, 1 worker; and --workers 2);
- LitServe, batch 1: a LitAPI around the same serve.model.ServedModel (this file's --litserve);
- LitServe with dynamic batching (--batch-size, --batch-timeout).
An embedded client (threads, each with its own keep-alive http.client connection) sends
POST /predict with one real digit per request, at 1 and at 32 concurrent clients, after a
warm-up, bounded by a request budget and a time limit. Also: the servers' RSS before and
after the 32-client run (the whole process tree: LitServe starts several), and
ServedModel.samples_from_json + predict called in this process: the cost of HTTP.

To run:
    .venv/bin/python benchmarks/serve_load.py            # full budgets
    .venv/bin/python benchmarks/serve_load.py --smoke    # small budgets: does it still run?
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import http.client
import importlib
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import litserve as ls
import numpy as np
import psutil
from fastapi import HTTPException

HEADERS = {"Content-Type": "application/json"}
TRAIN_TIMEOUT_S = 600  # bounds on a hang, not speed checks
START_TIMEOUT_S = 120  # a server not healthy by then is reported as failed
STOP_TIMEOUT_S = 40  # SIGTERM, then this long before SIGKILL
FASTAPI = "FastAPI (uvicorn, 1 worker)"  # CI's regex matches the last line's figure for it


# --- the LitServe server (this file run with --litserve) --------------------------------
# At module level: LitServe pickles the LitAPI into a spawned worker process, which imports
# this file again to find the class. No torch import here: it would inflate LitServe's RSS.


class LitModel(ls.LitAPI):
    """serve.py's model behind LitServe: the same ServedModel, checks and answers."""

    def __init__(self, package: str, model: str, **options: Any) -> None:
        super().__init__(**options)
        self.package, self.model_path = package, model

    def setup(self, device: str) -> None:
        """In the inference worker: load as serve.py does with 1 worker (threads: all cores)."""
        self.served = importlib.import_module(f"{self.package}.serve.model")
        cores = importlib.import_module(f"{self.package}.runtime").available_cores()
        gc.freeze()  # as serve.py does after its imports
        self.model = self.served.ServedModel(Path(self.model_path), self.served.Limits(), cores)

    # No annotations on `request` nor on encode_response's return: LitServe reads them to
    # build its endpoint; none means a plain Request, parsed with request.json().
    def decode_request(self, request, **kwargs: Any) -> np.ndarray:
        """LitServe hands over the parsed JSON: encoded again, it gets serve.py's checks."""
        try:
            return self.model.samples_from_json(json.dumps(request).encode())
        except self.served.RequestError as error:
            raise HTTPException(error.status, str(error)) from None

    def predict(self, x: np.ndarray, **kwargs: Any) -> dict[str, Any]:
        return self.model.predict(x)

    def encode_response(self, output, **kwargs: Any):
        return output


class BatchedLitModel(LitModel):
    """Dynamic batching: the requests that arrive within batch_timeout run as one batch."""

    def batch(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return inputs  # each request may hold several samples: predict concatenates

    def predict(self, x: list[np.ndarray], **kwargs: Any) -> list[dict[str, Any]]:
        predictions = self.model.predict(np.concatenate(x))["predictions"]
        ends = itertools.accumulate(len(samples) for samples in x)
        return [
            {"predictions": predictions[end - len(samples) : end]}
            for samples, end in zip(x, ends, strict=True)
        ]

    def unbatch(self, output: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return output


def run_litserve(args: argparse.Namespace) -> None:
    """Serve until SIGTERM; SIGTERM becomes KeyboardInterrupt, LitServe's graceful stop."""
    main_pid = os.getpid()

    def stop(signum: int, frame: Any) -> None:
        if os.getpid() == main_pid:
            raise KeyboardInterrupt
        raise SystemExit(0)  # LitServe's forked uvicorn process, which inherits this handler

    signal.signal(signal.SIGTERM, stop)
    if args.batch_size > 1:
        options = {"max_batch_size": args.batch_size, "batch_timeout": args.batch_timeout}
        api: LitModel = BatchedLitModel(args.package, str(args.litserve), **options)
    else:
        api = LitModel(args.package, str(args.litserve))
    gc.freeze()  # as serve.py does; LitServe's forked uvicorn process inherits it
    server = ls.LitServer(api, accelerator="cpu", workers_per_device=1, timeout=30)
    server.run(host="127.0.0.1", port=args.port, log_level="warning", generate_client_file=False)


# --- the load client --------------------------------------------------------------------


@dataclass
class Load:
    """One measured run: latencies of the answered requests, and what it cost."""

    sent: int = 0
    failures: int = 0
    latencies: list[float] = field(default_factory=list)  # seconds, 200 answers only
    wall: float = 0.0
    client_cpu: float = 0.0  # seconds of this process's CPU (the client threads)
    server_cpu: float = 0.0  # seconds of the server's process tree

    def rate(self) -> float:
        return len(self.latencies) / self.wall if self.wall else 0.0

    def percentile_ms(self, q: int) -> float:
        if len(self.latencies) < 2:
            return float("nan")
        return 1000 * statistics.quantiles(self.latencies, n=100, method="inclusive")[q - 1]

    def server_ms(self) -> float:
        """Server CPU per answered request."""
        return 1000 * self.server_cpu / max(1, len(self.latencies))


def send_load(port: int, body: bytes, clients: int, budget: int, seconds: float) -> Load:
    """``clients`` threads, each on its own keep-alive connection, one request at a time,
    until ``budget`` requests are sent or ``seconds`` have passed."""
    result = Load()
    tickets = itertools.count()  # next() on it is atomic under the GIL
    failed = threading.Lock()
    ready = threading.Barrier(clients + 1)
    deadline = [float("inf")]  # set once every client is connected

    def client() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        with contextlib.suppress(OSError):
            connection.connect()
        ready.wait()
        while next(tickets) < budget and time.monotonic() < deadline[0]:
            start = time.perf_counter()
            try:
                connection.request("POST", "/predict", body=body, headers=HEADERS)
                response = connection.getresponse()
                response.read()
                ok = response.status == 200
            except (OSError, http.client.HTTPException):
                connection.close()  # the next request connects again
                ok = False
            if ok:
                result.latencies.append(time.perf_counter() - start)  # atomic
            else:
                with failed:
                    result.failures += 1
        connection.close()

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    ready.wait()
    start, cpu = time.perf_counter(), time.process_time()
    deadline[0] = time.monotonic() + seconds
    for thread in threads:
        thread.join(seconds + 60)
    result.wall = time.perf_counter() - start
    result.client_cpu = time.process_time() - cpu
    result.sent = len(result.latencies) + result.failures
    return result


def in_process(model: Any, body: bytes, count: int, warmup: int, seconds: float) -> Load:
    """samples_from_json + predict in a loop: what a request costs without HTTP."""
    for _ in range(warmup):
        model.predict(model.samples_from_json(body))
    result = Load()
    start, cpu = time.perf_counter(), time.process_time()
    while result.sent < count and time.perf_counter() - start < seconds:
        began = time.perf_counter()
        model.predict(model.samples_from_json(body))
        result.latencies.append(time.perf_counter() - began)
        result.sent += 1
    result.wall = time.perf_counter() - start
    result.client_cpu = time.process_time() - cpu
    return result


# --- the servers -------------------------------------------------------------------------


def request(port: int, method: str, path: str, body: bytes = b"", timeout: float = 30):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request(method, path, body=body, headers=HEADERS if body else {})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def tree(process: psutil.Process) -> list[psutil.Process]:
    """The process and all its descendants (LitServe: manager, uvicorn, inference worker)."""
    with contextlib.suppress(psutil.Error):
        return [process, *process.children(recursive=True)]
    return []


def usage(processes: list[psutil.Process]) -> tuple[float, float]:
    """RSS in MiB and CPU seconds (user + system), summed over ``processes``."""
    rss, cpu = 0, 0.0
    for process in processes:
        with contextlib.suppress(psutil.Error):
            times = process.cpu_times()
            rss, cpu = rss + process.memory_info().rss, cpu + times.user + times.system
    return rss / 2**20, cpu


class ServerFailed(RuntimeError):
    """The server did not start or answered wrongly: its rows say so."""


@contextlib.contextmanager
def running(command: list[str], port: int, env: dict[str, str], log: Path) -> Iterator[Any]:
    """Start ``command``, wait (bounded) until GET /health answers 200, yield its process
    tree; on exit SIGTERM, wait, then SIGKILL whatever of the tree is still alive."""
    with log.open("w") as sink:
        popen = subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.STDOUT)
    root = psutil.Process(popen.pid)
    known = {root.pid: root}
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if popen.poll() is not None:
                raise ServerFailed(f"exited with {popen.returncode}: {last_error(log)}")
            with contextlib.suppress(OSError, http.client.HTTPException):
                if request(port, "GET", "/health", timeout=2)[0] == 200:
                    break
            if time.monotonic() > deadline:
                raise ServerFailed(f"not healthy after {START_TIMEOUT_S} s: {last_error(log)}")
            time.sleep(0.2)
        processes = tree(root)
        known.update((process.pid, process) for process in processes)
        yield processes
    finally:
        known.update((process.pid, process) for process in tree(root))
        started = time.perf_counter()
        if popen.poll() is None:
            popen.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(STOP_TIMEOUT_S)
        # The children (uvicorn's workers, LitServe's, multiprocessing's resource tracker)
        # exit after their parent: a few seconds on their own, then they are killed.
        _, alive = psutil.wait_procs([p for p in known.values() if p.is_running()], timeout=5)
        for process in alive:
            with contextlib.suppress(psutil.Error):
                process.kill()
        psutil.wait_procs(alive, timeout=10)
        popen.wait()
        note(f"  stopped in {time.perf_counter() - started:.1f} s ({len(alive)} killed)")


def last_error(log: Path) -> str:
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines()]
    errors = [line for line in lines if "error" in line.lower()] or lines
    return errors[-1][:300] if errors else "no output"


def note(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- the benchmark -----------------------------------------------------------------------


@dataclass
class Settings:
    budgets: dict[int, int]  # clients -> requests
    warmup: int  # requests before each run
    seconds: float  # each run's time limit


@dataclass
class Measured:
    """A server's runs by number of clients, its memory, or why it failed."""

    loads: dict[int, Load] = field(default_factory=dict)
    rss: tuple[int, float, float] | None = None  # processes, before, after the last run
    failed: str | None = None


def train(project: Path, epochs: int) -> Path:
    """`python train.py` as a user runs it, torch.export only; returns that export's path."""
    command = [
        sys.executable,
        "train.py",
        f"--trainer.max_epochs={epochs}",
        "--export.formats=[torch.export]",
        "--trainer.enable_progress_bar=false",
    ]
    env = {**os.environ, "PYTHONPATH": str(project / "src"), "WANDB_MODE": "offline"}
    result = subprocess.run(
        command, cwd=project, env=env, capture_output=True, text=True, timeout=TRAIN_TIMEOUT_S
    )
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    summary_path = result.stdout.rstrip().splitlines()[-1].removeprefix("summary: ")
    return Path(json.loads(Path(summary_path).read_text())["export"]["torch.export"]["path"])


def measure(
    command: list[str],
    port: int,
    env: dict[str, str],
    log: Path,
    body: bytes,
    expected: dict,
    s: Settings,
) -> Measured:
    """Start the server, check its answer, then per client count: a warm-up, a measured run."""
    measured = Measured()
    try:
        with running(command, port, env, log) as processes:
            status, answer = request(port, "POST", "/predict", body)
            if status != 200 or not same_answer(json.loads(answer), expected):
                raise ServerFailed(f"wrong answer ({status}): {answer[:200]!r}")
            for clients, budget in s.budgets.items():
                send_load(port, body, clients, s.warmup, s.seconds)
                processes = tree(processes[0])  # uvicorn's workers start on their own
                before, cpu = usage(processes)
                load = send_load(port, body, clients, budget, s.seconds)
                after, load.server_cpu = usage(processes)
                load.server_cpu -= cpu
                measured.loads[clients] = load
                measured.rss = (len(processes), before, after)
                note(
                    f"  {clients} clients: {load.rate():.0f} req/s, p50 "
                    f"{load.percentile_ms(50):.2f} ms, {load.failures} failures"
                )
    except ServerFailed as error:
        measured.failed = str(error)
        note(f"  failed: {error}")
    return measured


def same_answer(answer: dict, expected: dict) -> bool:
    """The server's class and probabilities are the in-process model's."""
    got, want = answer["predictions"][0], expected["predictions"][0]
    return got["class"] == want["class"] and all(
        abs(got["probabilities"][name] - p) < 1e-5 for name, p in want["probabilities"].items()
    )


def report(
    results: dict[str, Measured], baseline: Load, threads: int, s: Settings, epochs: int
) -> None:
    from baked import machine

    versions = ", ".join(
        f"{name} {version(name)}" for name in ("fastapi", "uvicorn", "litserve", "torch")
    )
    print(f"# Serving under load, {datetime.date.today().isoformat()}\n")
    print(
        f"machine: {machine()}; {versions}; model: model.pt2 (torch.export, default net, "
        f"epochs: {epochs}); one sample per request; clients are threads of one process, each "
        f"with a keep-alive http.client connection; warm-up {s.warmup} requests before each "
        f"run; runs stop at their budget or after {s.seconds:.0f} s."
    )
    print(
        "\n| server | clients | requests | req/s | p50 ms | p99 ms | failures "
        "| server CPU ms/request | client CPU, share of a core |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, measured in results.items():
        for clients in s.budgets:
            load = measured.loads.get(clients)
            if load is None:
                print(f"| {name} | {clients} | failed: {measured.failed} | | | | | | |")
                continue
            print(
                f"| {name} | {clients} | {load.sent} | {load.rate():.0f} "
                f"| {load.percentile_ms(50):.2f} | {load.percentile_ms(99):.2f} "
                f"| {load.failures} | {load.server_ms():.2f} | {load.client_cpu / load.wall:.0%} |"
            )

    most = max(s.budgets)
    print(f"\nmemory, RSS before and after the {most}-client run (after its warm-up):")
    for name, measured in results.items():
        if measured.rss is None:
            print(f"- {name}: failed: {measured.failed}")
            continue
        processes, before, after = measured.rss
        which = "1 process" if processes == 1 else f"sum over {processes} processes"
        print(
            f"- {name} ({which}): {before:.0f} MiB -> {after:.0f} MiB "
            f"({after - before:+.1f} MiB over {measured.loads[most].sent} requests)"
        )

    p50 = baseline.percentile_ms(50)
    print(
        f"\nin process (ServedModel.samples_from_json + predict, torch threads {threads}): "
        f"{baseline.rate():.0f} req/s, p50 {p50:.3f} ms over {baseline.sent} calls"
    )
    for name, measured in results.items():
        if 1 in measured.loads:
            ratio = measured.loads[1].percentile_ms(50) / p50
            print(f"- {name}: HTTP p50 at 1 client over in-process p50: {ratio:.1f}x")

    # The last line, which CI matches: a server that failed to start or answered wrongly
    # counts as one failure, so that "failures: 0" means every server answered every request.
    rates = [
        f"{name} {m.loads[most].rate():.0f} req/s" if most in m.loads else f"{name} failed"
        for name, m in results.items()
    ]
    failures = sum(load.failures for m in results.values() for load in m.loads.values())
    failures += sum(m.failed is not None for m in results.values())
    print(f"\nAt {most} clients: {', '.join(rates)}; failures: {failures}.")


def benchmark(args: argparse.Namespace) -> None:
    from sklearn.datasets import load_digits

    from baked import bake, free_port, import_modules

    s = Settings(
        budgets={1: 100, 32: 300} if args.smoke else {1: 3000, 32: 10_000},
        warmup=20 if args.smoke else 200,
        seconds=20 if args.smoke else 60,
    )
    epochs = 1 if args.smoke else 3
    sample = load_digits().images[0][None].tolist()  # (1, 8, 8): a real "0", raw values 0-16
    body = json.dumps({"inputs": [sample]}).encode()

    with tempfile.TemporaryDirectory() as workdir:
        project = bake(Path(workdir), answers={"serving": "yes"})
        note(f"training {epochs} epoch(s) in {project}")
        model_path = train(project, epochs)
        modules = import_modules(project, "serve.model", "runtime")
        served, cores = modules["serve.model"], modules["runtime"].available_cores()
        package = served.__name__.split(".")[0]
        model = served.ServedModel(model_path, None, cores)  # as serve.py with 1 worker
        expected = model.predict(model.samples_from_json(body))
        note("in process")
        baseline = in_process(model, body, s.budgets[1], s.warmup, s.seconds)

        serve = [sys.executable, str(project / "serve.py"), str(model_path)]
        litserve = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--litserve",
            str(model_path),
            "--package",
            package,
        ]
        batching = [f"--batch-size={args.batch_size}", f"--batch-timeout={args.batch_timeout}"]
        servers = {
            FASTAPI: serve,
            "FastAPI (uvicorn, 2 workers)": [*serve, "--workers=2"],
            "LitServe (batch 1)": [*litserve, "--batch-size=1"],
            f"LitServe (batching, max {args.batch_size}, {args.batch_timeout * 1000:g} ms)": [
                *litserve,
                *batching,
            ],
        }
        env = {**os.environ, "PYTHONPATH": str(project / "src")}
        results = {}
        for index, (name, command) in enumerate(servers.items()):
            note(name)
            port, log = free_port(), Path(workdir) / f"server-{index}.log"
            command = [*command, f"--port={port}"]
            results[name] = measure(command, port, env, log, body, expected, s)
        report(results, baseline, model.describe()["threads"], s, epochs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="1 epoch, ~100/300 requests")
    parser.add_argument("--batch-size", type=int, default=16, help="LitServe's max_batch_size")
    parser.add_argument("--batch-timeout", type=float, default=0.005, help="seconds")
    # The LitServe server, started by the benchmark itself:
    parser.add_argument("--litserve", type=Path, metavar="MODEL", help=argparse.SUPPRESS)
    parser.add_argument("--package", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.litserve:
        run_litserve(args)
        return
    started = time.perf_counter()
    benchmark(args)
    note(f"wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
