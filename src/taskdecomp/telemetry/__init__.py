"""OpenTelemetry spans of runs: what an operations team sees of them.

A run is a tree of spans, each the parent of the work done inside it (so an
instrumented HTTP client's spans nest under the model call that made them)::

    invoke_agent plan_execute              run id, strategy, stop reason, status
    ├── chat gpt-4.1-mini                  a model call (GenAI semantic conventions)
    ├── execute_tool fetch_sales           a tool call
    ├── step s2                            an instruction step (an agent's work)
    │   ├── chat gpt-4.1-mini
    │   └── execute_tool lookup
    ├── node 3                             a node of a plan tree (``tree``)
    │   └── decompose single_node          a split, and its model calls
    └── await_approval                     the run paused for a human

Modules, each one concept:

- :mod:`~taskdecomp.telemetry.spans`: the spans, as context managers the engine opens
  where the work happens;
- :mod:`~taskdecomp.telemetry.runspan`: the span of a run (or of a resumed segment), its
  link to the run's first trace, and the pauses for approval;
- :mod:`~taskdecomp.telemetry.propagation`: W3C trace context stored with a run, so a
  resumed run links to its first trace and a queued one continues its submitter's;
- :mod:`~taskdecomp.telemetry.content`: whether prompts, arguments and observations go
  into spans (off by default; always with secrets replaced);
- :mod:`~taskdecomp.telemetry.setup`: the SDK and the OTLP/HTTP exporter from the
  standard ``OTEL_*`` variables, for the command line (a library user sets up their own).

Only ``opentelemetry-api`` is needed: without an SDK every span is a no-op. This package
is not imported by ``import taskdecomp``.
"""

from taskdecomp.telemetry.content import trace_content, tracing_content

__all__ = ["trace_content", "tracing_content"]
