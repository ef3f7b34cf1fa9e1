"""The door of ``rankvisor serve``: who may open the page and start a session.

A page of any web site the user opens in a browser on the same machine can reach
127.0.0.1, and a websocket is not bound by the same-origin policy: the server itself must
refuse. Every session it starts shows a run's output, and (with ``--control``, or a run of
its own) its keys signal and restart ranks. So:

* **Origin**: a websocket handshake must carry the Origin of the URL the page is served
  from (``--public-url``, else ``http://HOST:PORT``); any other request carrying an Origin
  header must carry that one. Anything else gets 403 and no app starts.
* **Token**: a secret made at each start (``secrets``) is part of the URL printed then; the
  page wants it as ``?token=`` and the websocket as the last path segment
  (``/ws/<token>``), because textual-serve's page script appends ``?width=..&height=..`` to
  the websocket URL it is given. Compared in constant time; a wrong or missing one is 403.
* **Viewers**: at most ``max_viewers`` sessions at a time, counted from the handshake until
  the session's app has exited; one more gets 503 with the reason, and no app.
* **Shutdown**: on SIGTERM/SIGINT every session is told to quit, as the app's own quit
  would (a viewer lets go of the run it watches; a session's own run has its ranks
  terminated with escalation), and is waited for up to ``SESSION_END_GRACE`` seconds.
  Beyond that, and on SIGKILL of serve, the sessions die with it: each session app asks the
  kernel for a death signal tied to serve (see ``tui.cli.serve``); a run of its own is then
  removed by that run's guard, a watched run goes on.

The page, the static files and the download route are textual-serve's; this module only
puts the checks in front of them and starts the sessions with textual-serve's
``AppService``.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import signal
from typing import Any, Awaitable, Callable
from urllib.parse import urlsplit

import aiohttp_jinja2
import jinja2
from aiohttp import hdrs, web
from textual_serve.app_service import AppService
from textual_serve.server import Server, to_int

__all__ = ["SESSION_END_GRACE", "DoorServer", "origin_of"]

SESSION_END_GRACE = 60.0
"""Seconds serve waits, at SIGTERM/SIGINT, for its sessions to end (a session's own run's
ranks get ``--term-timeout``, 30 s by default, before SIGKILL; a viewer only lets go)."""

_DEFAULT_PORTS = {"http": 80, "https": 443}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def origin_of(url: str) -> tuple[str, str, int] | None:
    """``(scheme, host, port)`` of an http(s) URL or Origin header, None if it is not one.

    Ports are made explicit (``http://h`` is ``http://h:80``) and the host lower-cased, so
    an Origin header compares equal to the URL the page was served from.
    """
    try:
        parts = urlsplit(url.strip())
        scheme = parts.scheme.lower()
        host = parts.hostname
        port = parts.port
    except ValueError:  # a port that is no number, or out of range
        return None
    if scheme not in _DEFAULT_PORTS or not host:
        return None
    return scheme, host, port if port is not None else _DEFAULT_PORTS[scheme]


class DoorServer(Server):
    """textual-serve's server with the checks above in front of the page and the websocket."""

    def __init__(
        self,
        command: str,
        *,
        host: str,
        port: int,
        public_url: str,
        token: str,
        max_viewers: int,
        title: str = "rankvisor",
        announce: Callable[[], None] | None = None,
    ) -> None:
        """
        Args:
            command: the shell command of one session (``tui.cli.serve.session_command``).
            host, port: where to listen.
            public_url: the URL browsers use (no trailing slash); its origin is the only
                one let in.
            token: this start's secret; the URL to open is ``public_url/?token=TOKEN``.
            max_viewers: sessions allowed at once (at least 1).
            announce: called once the port is listening (prints the URL to open).
        """
        super().__init__(command, host=host, port=port, title=title, public_url=public_url)
        allowed = origin_of(public_url)
        if allowed is None:
            raise ValueError(f"not an http(s) URL: {public_url!r}")
        if max_viewers < 1:
            raise ValueError("max_viewers must be at least 1")
        self.allowed_origin = allowed
        self.max_viewers = max_viewers
        self.viewers = 0
        """Sessions counted against ``max_viewers`` now."""
        self._token = token.encode("utf-8")
        self._announce = announce
        self._sessions: set[AppService] = set()

    # -- the checks ---------------------------------------------------------------------

    def origin_allowed(self, origin: str | None) -> bool:
        """Whether an Origin header names the page's own origin (None: no header)."""
        return origin is not None and origin_of(origin) == self.allowed_origin

    def token_matches(self, given: str | None) -> bool:
        """Constant-time comparison with this start's token (None: none was given)."""
        if given is None:
            return False
        return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), self._token)

    def _refuse_full(self) -> web.HTTPServiceUnavailable:
        word = "viewer is" if self.viewers == 1 else "viewers are"
        return web.HTTPServiceUnavailable(
            text=f"rankvisor serve: {self.viewers} {word} connected, the most --max-viewers "
            f"{self.max_viewers} allows; close one and reload this page\n"
        )

    @web.middleware
    async def _origin_gate(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        # Navigations carry no Origin header; fetches, fonts and posts from a page do, and a
        # page of another site must get nothing here (its websocket is checked below too).
        origin = request.headers.get(hdrs.ORIGIN)
        if origin is not None and not self.origin_allowed(origin):
            raise web.HTTPForbidden(text="rankvisor serve: cross-origin request refused\n")
        return await handler(request)

    # -- the aiohttp application --------------------------------------------------------

    async def _make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._origin_gate])
        aiohttp_jinja2.setup(app, loader=jinja2.FileSystemLoader(self.templates_path))
        app.add_routes(
            [
                web.get("/", self._page, name="index"),
                web.get("/ws", self._websocket),
                web.get("/ws/{token}", self._websocket, name="websocket"),
                web.get("/download/{key}", self.handle_download, name="download"),
                web.static("/static", self.statics_path, name="static"),
            ]
        )
        app.on_shutdown.append(self.on_shutdown)
        return app

    def initialize_logging(self) -> None:
        """textual-serve's logging, without the access log: its lines would repeat the token."""
        super().initialize_logging()
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)

    def serve(self, debug: bool = False) -> None:
        """Listen until SIGTERM/SIGINT, then end every session (see the module docstring)."""
        self.debug = debug
        self.initialize_logging()
        loop = asyncio.new_event_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            # request_exit raises GracefulExit: aiohttp then runs the shutdown below.
            loop.add_signal_handler(signum, self.request_exit)
        web.run_app(
            self._make_app(),
            host=self.host,
            port=self.port,
            handle_signals=False,
            loop=loop,
            access_log=None,
            # aiohttp calls this once every socket listens: only then is the URL usable.
            print=lambda _message: self._announce() if self._announce else None,
            shutdown_timeout=SESSION_END_GRACE,
        )

    async def on_shutdown(self, app: web.Application) -> None:
        """Tell every session to quit and wait (bounded) for its app to exit."""
        stops = [asyncio.ensure_future(service.stop()) for service in list(self._sessions)]
        if stops:
            # Past the grace, serve exits anyway and the apps' death signal ends them.
            await asyncio.wait(stops, timeout=SESSION_END_GRACE)

    async def _page(self, request: web.Request) -> web.StreamResponse:
        if not self.token_matches(request.query.get("token")):
            raise web.HTTPForbidden(
                text="rankvisor serve: open the URL with the token that serve printed at start\n"
            )
        if self.viewers >= self.max_viewers:
            raise self._refuse_full()
        token = self._token.decode("utf-8")
        scheme = "wss" if self.allowed_origin[0] == "https" else "ws"
        ws_url = f"{scheme}:{self.public_url.split(':', 1)[1]}/ws/{token}"
        context: dict[str, Any] = {
            "font_size": to_int(request.query.get("fontsize", "16"), 16),
            "app_websocket_url": ws_url,
            "config": {"static": {"url": f"{self.public_url}/static/"}},
            "application": {"name": self.title},
        }
        response = aiohttp_jinja2.render_template("app_index.html", request, context)
        # The URL holds the token: never send it on as a Referer, never keep the page.
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Frame-Options"] = "DENY"
        return response

    async def _websocket(self, request: web.Request) -> web.StreamResponse:
        # A browser always sends Origin with a websocket handshake: none is no browser of
        # ours, and another one is a page of another site.
        if not self.origin_allowed(request.headers.get(hdrs.ORIGIN)):
            raise web.HTTPForbidden(text="rankvisor serve: websocket from another origin\n")
        if not self.token_matches(request.match_info.get("token")):
            raise web.HTTPForbidden(text="rankvisor serve: wrong or missing token\n")
        if self.viewers >= self.max_viewers:
            raise self._refuse_full()
        # Counted before the first await, so two handshakes cannot both take the last place.
        self.viewers += 1
        try:
            return await self._run_session(request)
        finally:
            self.viewers -= 1

    async def _run_session(self, request: web.Request) -> web.WebSocketResponse:
        websocket = web.WebSocketResponse(heartbeat=15)
        await websocket.prepare(request)

        async def close() -> None:  # the app said "exit": end the browser's side too
            await websocket.close()

        service = AppService(
            self.command,
            write_bytes=websocket.send_bytes,
            write_str=websocket.send_str,
            close=close,
            download_manager=self.download_manager,
            debug=self.debug,
        )
        self._sessions.add(service)
        try:
            await service.start(
                to_int(request.query.get("width", "80"), 80),
                to_int(request.query.get("height", "24"), 24),
            )
            await self._until_either_ends(websocket, service)
        except asyncio.CancelledError:
            await websocket.close()
            raise
        except Exception:  # a broken pipe to the app, a malformed message from the page
            logging.getLogger("textual-serve").exception("rankvisor serve: session failed")
        finally:
            # Sends the app "quit" and waits until its output ends, i.e. it has exited;
            # only then does the place count as free.
            try:
                await service.stop()
            finally:
                self._sessions.discard(service)
        return websocket

    async def _until_either_ends(self, websocket: web.WebSocketResponse,
                                 service: AppService) -> None:
        """Carry the tab's messages until the tab goes or the app does.

        An app that exits by itself says so first (its "exit" closes the websocket); one that
        is killed (SIGKILL, the OOM killer) says nothing, and textual-serve would keep the tab
        open on a dead session, its place taken until serve ends. So its reading task (the
        app's output, ended at the app's exit) is watched too."""
        messages = asyncio.ensure_future(self._process_messages(websocket, service))
        app_task = getattr(service, "_task", None)  # textual-serve's reader of the app
        try:
            await asyncio.wait({messages, *([app_task] if app_task is not None else [])},
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not messages.done():
                messages.cancel()
                if app_task is not None and app_task.done() and not websocket.closed:
                    logging.getLogger("textual-serve").warning(
                        "rankvisor serve: a session's app ended without a word; its tab is "
                        "closed")
                await websocket.close()
        if not messages.cancelled():
            messages.result()  # its failure, if any, as before
