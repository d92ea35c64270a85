"""The service: an HTTP API, live event streams, a web page and a chat agent.

``taskdecomp serve`` runs it on uvicorn; a program can build it too::

    from taskdecomp.server import ServerConfig, create_app, open_service

    service = open_service(ServerConfig(
        store_url="runs.db", toolsets={"sales": "tools.py"}, models=("scripted:plan.json",)
    ))
    app = create_app(service)  # any ASGI server

The application answers only to loopback Host names (and ``host``) unless the config's
``allowed_hosts`` names others, and refuses state-changing requests from other origins.

Needs the ``server`` extra (FastAPI, uvicorn): ``pip install 'taskdecomp[server]'``.
"""

from taskdecomp.listening import check_bind, is_loopback
from taskdecomp.server.app import create_app
from taskdecomp.server.config import CHAT_ACTIONS, ServerConfig
from taskdecomp.server.service import Service, open_service

__all__ = [
    "CHAT_ACTIONS",
    "ServerConfig",
    "Service",
    "check_bind",
    "create_app",
    "is_loopback",
    "open_service",
]
