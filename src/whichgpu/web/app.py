"""The ASGI app behind `whichgpu ui`: the single-page app (static/, served from the package) and
the JSON API (web/api.py).

- Every answer is strict JSON (NaN and infinity are null). Bad input is HTTP 400 with the CLI's
  one-line message, ``{"error": "..."}``; an upload over the limit 413; a model to trace on a
  server without torch 501, saying so (cached traces, plan and serve still answer); a valid
  question whose answer is "no" is 200 with ``"answer": "no"`` and the ``reason``; anything
  unexpected 500 with ``"internal error: ..."`` on one line (the traceback goes to the server's
  log, never the browser).
- The library's calls block (a first capture takes seconds): they run in a worker thread, one at
  a time (model capture is not known to be thread-safe; the catalog and zoo lookups do not
  wait for them), so the event loop keeps serving pages, the catalog and uploads meanwhile. Answers are kept in a small LRU keyed by the normalised
  query; traces come from the on-disk trace cache as for the CLI.
- The page asks its questions as jobs (POST /api/jobs, then GET /api/jobs/ID until done), so it
  can show the seconds spent while a slow answer is computed; GET/POST /api/NAME answer directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from whichgpu.errors import MissingExtraError, WhichGPUError
from whichgpu.web import api
from whichgpu.web.uploads import MAX_BYTES, TooLargeError, scrub, store

STATIC = Path(__file__).parent / "static"
LIGHT = ("gpus", "models")
"""Endpoints that only read the catalog or the zoo: answered beside a running computation."""
CACHE_SIZE = 32
"""Answers kept in memory (a recommend answer is up to ~2 MB of JSON)."""
_SLACK = 16 * 1024  # multipart framing around an upload

log = logging.getLogger("whichgpu.web")


def _json(doc: Any, status: int = 200) -> Response:
    # NaN/inf -> null, numpy -> Python, as the CLI's --json
    from whichgpu.report.jsonout import _clean

    text = scrub(json.dumps(_clean(doc), allow_nan=False, separators=(",", ":")))
    return Response(text, status_code=status, media_type="application/json")


def error(message: str, status: int = 400) -> Response:
    """``{"error": "..."}``: one line."""
    return _json(_error_doc(message), status)


def _error_doc(message: str) -> dict[str, str]:
    return {"error": " ".join(str(message).split())}


def _failure_doc(e: BaseException) -> tuple[int, dict[str, Any]]:
    """An exception as (HTTP status, body): ours are 4xx with the CLI's line, anything else 500."""
    from whichgpu.errors import NoAnswerError
    from whichgpu.report.flags import flag_message

    if isinstance(e, TooLargeError):
        return 413, _error_doc(str(e))
    if isinstance(e, MissingExtraError):  # this server cannot (no torch to trace a new model): 501, saying so
        return 501, _error_doc(str(e))
    if isinstance(e, NoAnswerError):  # a "no" found before any document: the answer, with its reason
        return 200, {"answer": "no", "reason": " ".join(flag_message(e).split())}
    if isinstance(e, WhichGPUError):
        return 400, _error_doc(flag_message(e))
    log.exception("internal error")
    first = (str(e).strip().splitlines() or [""])[0]
    return 500, _error_doc(f"internal error: {type(e).__name__}: {first}"[:500])


def _failure(e: BaseException) -> Response:
    status, doc = _failure_doc(e)
    return _json(doc, status)


class Answers:
    """The API's answers: computed in a worker thread, one at a time, remembered (LRU) by query."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self.size = size
        self._cache: OrderedDict[tuple[str, tuple[tuple[str, str], ...]], Any] = OrderedDict()
        self._work = threading.Lock()
        self._lru = threading.Lock()

    def _compute(self, fn: Callable[[Mapping[str, object]], Any], key: Any, raw: Mapping[str, object]) -> Any:
        # the catalog and the zoo are read-only lookups: they never wait behind a computation
        with contextlib.nullcontext() if key[0] in LIGHT else self._work:
            with self._lru:
                if key in self._cache:
                    return self._cache[key]
            doc = fn(raw)
            with self._lru:
                self._cache[key] = doc
                while len(self._cache) > self.size:
                    self._cache.popitem(last=False)
            return doc

    async def get(self, name: str, raw: Mapping[str, object]) -> Any:
        key = (name, tuple(sorted((k, json.dumps(v, sort_keys=True)) for k, v in raw.items()
                                  if v is not None and v != "")))
        with self._lru:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        return await run_in_threadpool(self._compute, api.ENDPOINTS[name], key, raw)


class Jobs:
    """Questions asked as jobs: POST /api/jobs starts one and answers its id at once; GET
    /api/jobs/ID says ``running`` (with the seconds so far) until it is ``done``, with the answer
    the endpoint itself would give (``http_status`` and the document or the error). The page polls
    them to show progress; the most recent KEEP jobs are kept."""

    KEEP = 64

    def __init__(self, answers: Answers) -> None:
        self.answers = answers
        self._jobs: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self, name: str, raw: Mapping[str, object]) -> dict[str, Any]:
        job: dict[str, Any] = {"id": secrets.token_hex(8), "endpoint": name, "status": "running",
                               "started": time.monotonic(), "elapsed_s": 0.0, "http_status": None, "result": None}
        self._jobs[job["id"]] = job
        while len(self._jobs) > self.KEEP:
            self._jobs.popitem(last=False)
        task = asyncio.get_running_loop().create_task(self._run(job, name, raw))
        self._tasks.add(task)  # (a reference until it ends: the loop keeps only weak ones)
        task.add_done_callback(self._tasks.discard)
        return self.view(job)

    async def _run(self, job: dict[str, Any], name: str, raw: Mapping[str, object]) -> None:
        try:
            job["result"], job["http_status"] = await self.answers.get(name, raw), 200
        except Exception as e:
            job["http_status"], job["result"] = _failure_doc(e)
        job["elapsed_s"] = time.monotonic() - job["started"]
        job["status"] = "done"

    def get(self, job_id: str) -> dict[str, Any] | None:
        job = self._jobs.get(job_id)
        return None if job is None else self.view(job)

    @staticmethod
    def view(job: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in job.items() if k != "started"}
        if job["status"] == "running":
            out["elapsed_s"] = time.monotonic() - job["started"]
        return out


async def _params(request: Request) -> dict[str, object]:
    """A request's parameters: the query string, and for POST a JSON object body on top."""
    raw: dict[str, object] = dict(request.query_params)
    if request.method == "POST":
        body = await request.body()
        if len(body) > MAX_BYTES:
            raise TooLargeError(f"request body over {MAX_BYTES // 1024} KiB")
        if body.strip():
            try:
                data = json.loads(body)
            except ValueError as e:
                from whichgpu.errors import InputError

                raise InputError(f"request body: not valid JSON ({e})") from None
            if not isinstance(data, dict):
                from whichgpu.errors import InputError

                raise InputError("request body: expected a JSON object of parameters")
            raw.update(data)
    return raw


def _endpoint(name: str, answers: Answers) -> Callable[[Request], Any]:
    async def handler(request: Request) -> Response:
        try:
            return _json(await answers.get(name, await _params(request)))
        except Exception as e:
            return _failure(e)

    handler.__name__ = f"api_{name}"
    return handler


async def start_job(request: Request) -> Response:
    """POST /api/jobs ``{"endpoint": "recommend", "params": {...}}``: 202 with the job (its id)."""
    try:
        body = await _params(request)
        name, params = body.get("endpoint"), body.get("params", {})
        if not isinstance(name, str) or name not in api.ENDPOINTS:
            from whichgpu.errors import UnknownNameError

            raise UnknownNameError("endpoint", str(name), api.ENDPOINTS)
        if not isinstance(params, dict):
            from whichgpu.errors import InputError

            raise InputError("params: expected a JSON object of parameters")
        return _json(request.app.state.jobs.start(name, params), 202)
    except Exception as e:
        return _failure(e)


async def job_status(request: Request) -> Response:
    """GET /api/jobs/ID: the job, ``running`` or ``done`` with its answer."""
    job = request.app.state.jobs.get(request.path_params["job_id"])
    if job is None:
        return error(f"no job {request.path_params['job_id']!r} (finished jobs are kept for a while only)", 404)
    return _json(job)


async def _read_capped(request: Request, limit: int) -> bytes:
    """The request body, refused (413) as soon as it passes `limit` bytes."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise TooLargeError(f"upload of {int(length):,} bytes is over the {MAX_BYTES // 1024} KiB limit of a "
                            "config.json")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise TooLargeError(f"upload over the {MAX_BYTES // 1024} KiB limit of a config.json")
        chunks.append(chunk)
    return b"".join(chunks)


async def upload_config(request: Request) -> Response:
    """POST /api/config: a Hugging Face config.json, as a multipart form field ``file`` or as the
    raw body (``?filename=`` names it). Parsed as JSON data only, checked as the CLI reads one;
    answers ``{"model": "upload:HASH", "model_type": ..., "filename": ...}``."""
    try:
        body = await _read_capped(request, MAX_BYTES + _SLACK)
        filename = request.query_params.get("filename", "config.json")
        if request.headers.get("content-type", "").startswith("multipart/form-data"):
            async def receive() -> dict[str, Any]:
                return {"type": "http.request", "body": body, "more_body": False}

            from starlette.formparsers import MultiPartException

            try:
                form = await Request(request.scope, receive).form(max_files=1, max_fields=4,
                                                                  max_part_size=MAX_BYTES + 1)
            except MultiPartException as e:
                from whichgpu.errors import InputError

                raise InputError(f"upload: {e.message}") from None
            part = form.get("file")
            if part is None or isinstance(part, str):
                from whichgpu.errors import InputError

                raise InputError("upload: no file field named 'file' (a config.json)")
            filename = part.filename or filename
            body = await part.read()
        model, cfg = await run_in_threadpool(store, body, filename)
        return _json({"model": model, "model_type": cfg.get("model_type"), "filename": filename})
    except Exception as e:
        return _failure(e)


async def index(request: Request) -> Response:
    return FileResponse(STATIC / "index.html", media_type="text/html")


async def _not_found(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 404
    if request.url.path.startswith("/api/"):
        return error(f"no such endpoint: {request.method} {request.url.path}" if status == 404
                     else f"{request.method} is not allowed on {request.url.path}", status)
    return Response("not found", status_code=status, media_type="text/plain")


async def _server_error(request: Request, exc: Exception) -> Response:
    return _failure(exc)


def create_app() -> Starlette:
    answers = Answers()
    routes: list[Any] = [Route("/", index), Route("/api/config", upload_config, methods=["POST"]),
                         Route("/api/jobs", start_job, methods=["POST"]), Route("/api/jobs/{job_id}", job_status)]
    for name in api.ENDPOINTS:
        methods = ["GET"] if name in ("gpus", "models") else ["GET", "POST"]
        routes.append(Route(f"/api/{name}", _endpoint(name, answers), methods=methods))
    routes.append(Mount("/static", StaticFiles(directory=STATIC), name="static"))
    app = Starlette(routes=routes, exception_handlers={404: _not_found, 405: _not_found, 500: _server_error})
    app.state.answers = answers
    app.state.jobs = Jobs(answers)
    return app
