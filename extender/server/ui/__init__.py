"""The live device map at ``/ui/``: its static page (``static/``, shipped as package data) and the
JSON and server-sent events it reads (``routes.py``; the shapes are in docs/ui.md)."""

from __future__ import annotations

from extender.server.ui.routes import UI, UiState, add_routes

__all__ = ["UI", "UiState", "add_routes"]
