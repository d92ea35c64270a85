"""Servers of our own that speak the model providers' wire protocols, on 127.0.0.1.

Each is written from its provider's public API reference and answers from a queue of canned
replies: :mod:`~stub_servers.openai_server` (Chat Completions),
:mod:`~stub_servers.anthropic_server` (Messages) and :mod:`~stub_servers.gemini_server`
(Gemini API), each a :class:`~stub_servers.base.StubServer` that keeps only its wire format.
The provider tests and ``bench/providers.py`` both use them; neither depends on the other.
"""
