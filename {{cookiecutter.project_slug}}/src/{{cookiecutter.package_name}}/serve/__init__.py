"""Serving: an exported model behind HTTP (serve.py), with torch and FastAPI, no Lightning."""
