"""A cost budget the server cannot keep is refused when the run is posted, never stored."""

from __future__ import annotations

import dataclasses

from taskdecomp.models import Connection
from taskdecomp.server import ServerConfig
from tests.server.support import Served


def test_a_cost_budget_over_a_model_of_unknown_price_is_a_422_and_no_run(
    config: ServerConfig,
) -> None:
    unpriced = dataclasses.replace(
        config,
        models=("openai:my-tune",),
        connection=Connection(base_url="http://127.0.0.1:9/v1"),
    )
    body = {"goal": "do work", "toolset": "demo", "budget": {"max_cost_usd": 1.0}}
    with Served(unpriced) as server, server.client() as client:
        refused = client.post("/runs", json=body)
        runs = client.get("/runs").json()
        without_budget = client.post("/runs", json={"goal": "do work", "toolset": "demo"})

    assert refused.status_code == 422, refused.text
    assert "'openai:my-tune' has none known" in refused.json()["detail"]
    assert runs["runs"] == []
    assert without_budget.status_code == 202  # the same model without a cost budget runs
