"""How the command line prints: literal text, tables that fit the terminal, live progress.

User and model text (goals, titles, tool errors, answers) is printed literally, as
:class:`rich.text.Text`: never read as markup or emoji codes, so ``openai:m:`` stays as it
is. Tables keep identifiers and states whole and shrink the free text instead; a column that
breaks its lines at chosen characters (a stop reason after ``:``, a path after ``/``) never
splits a word. While a run
works, :class:`Activity` keeps a live status line on a terminal (what runs, for how long,
tokens so far) and prints one plain line per phase elsewhere; a ``tree`` run's nodes get a
line as they start, end or are split.
"""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Literal

from rich.cells import cell_len, chop_cells
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from taskdecomp.events import (
    AgentTurn,
    AnswerDelta,
    ApprovalRequested,
    Event,
    ModelCalled,
    ModelProgress,
    NodeDecomposed,
    NodeFinished,
    NodeStarted,
    PlanCreated,
    PlanRepaired,
    PlanRevised,
    ReplanDecided,
    StepFinished,
    StepStarted,
)

GAP = 2
"""Spaces between two table columns."""


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """Let the entry point end quietly (rich's own way exits with status 1)."""
        self.quiet = True
        raise BrokenPipeError


def console(*, stderr: bool = False) -> Console:
    """A console that prints text as it is: no emoji codes, no colours guessed from content."""
    return _Console(stderr=stderr, highlight=False, emoji=False)


def literal(value: object, style: str = "", *, limit: int | None = None) -> Text:
    """``value`` as text printed as it is, cut to ``limit`` characters when given."""
    text = str(value)
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return Text(text.encode("utf-8", "backslashreplace").decode("utf-8"), style=style)


def line(*parts: str | Text | tuple[str, str]) -> Text:
    """One line from parts: strings and ``(text, style)`` pairs, and ``Text`` for data."""
    return Text.assemble(*parts)


@dataclass(frozen=True, kw_only=True, slots=True)
class Column:
    """How a table column behaves when the terminal is narrow."""

    header: str
    kind: Literal["keep", "wrap", "flex"] = "keep"
    """``keep``: always whole (ids, states); ``wrap``: onto more lines, between words (a
    word wider than the column is folded, unless :attr:`breaks` says where it may break);
    ``flex``: shrinks first, cut with an ellipsis (the one free-text column)."""
    min_width: int = 10
    """Narrowest a ``wrap`` or ``flex`` column gets."""
    drop: int = 0
    """When even the narrowest layout does not fit, columns with ``drop`` > 0 are left out,
    the highest first."""
    justify: Literal["left", "right"] = "left"
    breaks: str = ""
    """``wrap``: where a line may break besides a space, the most welcome first. ``":_"``
    breaks a stop reason after a colon, and after an underscore only when a part between
    colons is still too wide. Such a column never splits a word: it is as narrow as its
    longest word allows (``min_width`` is unused), and only a word wider than that is cut."""
    lines: int = 1
    """``flex``: how many lines the text fills, broken between words, before its ellipsis."""


def fitted_table(
    columns: Sequence[Column],
    rows: Sequence[Sequence[Text]],
    *,
    width: int,
    title: str | None = None,
) -> Table:
    """A table no wider than ``width`` whenever its ``keep`` columns allow it."""
    cells = [[Text(c.header), *(row[i] for row in rows)] for i, c in enumerate(columns)]
    natural = [max(_widest(cell) for cell in column) for column in cells]
    shown, widths = _layout(columns, cells, natural, width)
    _tighten(columns, cells, natural, shown, widths)
    table = Table(
        title=title,
        title_justify="left",
        title_style="bold",
        box=None,
        pad_edge=False,
        padding=(0, GAP // 2),
        header_style="bold",
    )
    for i in shown:
        column = columns[i]
        table.add_column(
            _shaped(column, cells[i][0], widths[i]),
            width=widths[i],
            justify=column.justify,
            no_wrap=column.kind != "wrap" or bool(column.breaks),
            overflow="fold" if column.kind == "wrap" else "ellipsis",
        )
    for row in rows:
        table.add_row(*(_shaped(columns[i], row[i], widths[i]) for i in shown))
    return table


def _widest(cell: Text) -> int:
    return max((cell_len(part) for part in cell.plain.splitlines()), default=0)


def _layout(
    columns: Sequence[Column], cells: list[list[Text]], natural: list[int], width: int
) -> tuple[list[int], dict[int, int]]:
    """The columns shown and their widths.

    Columns that break at chosen characters are first kept to their longest word (columns
    are dropped for that), then allowed down to their longest part between two breaks.
    """
    words = [_floor(c, cells[i], natural[i], fine=False) for i, c in enumerate(columns)]
    parts = [_floor(c, cells[i], natural[i], fine=True) for i, c in enumerate(columns)]
    for floors in (words, parts):
        shown = list(range(len(columns)))
        widths = _fit(columns, natural, words, floors, shown, width)
        while widths is None:
            droppable = [i for i in shown if columns[i].drop > 0]
            if not droppable:
                break
            shown.remove(max(droppable, key=lambda i: columns[i].drop))
            widths = _fit(columns, natural, words, floors, shown, width)
        if widths is not None:
            return shown, widths
    return shown, {i: parts[i] for i in shown}


def _floor(column: Column, cells: list[Text], natural: int, *, fine: bool) -> int:
    """The narrowest ``column`` gets: whole for ``keep``, its longest word with breaks."""
    if column.kind == "keep":
        return natural
    if _breaking(column):
        marks = " " + (column.breaks if fine else column.breaks[:-1])
        return max(cell_len(part.rstrip(" ")) for c in cells for part in _parts(c.plain, marks))
    return min(column.min_width, natural)


def _breaking(column: Column) -> bool:
    return column.kind == "wrap" and bool(column.breaks)


def _parts(text: str, marks: str) -> list[str]:
    """``text`` cut after each of the ``marks``."""
    return re.split(f"(?<=[{re.escape(marks)}])", text)


def _fit(
    columns: Sequence[Column],
    natural: list[int],
    words: list[int],
    floors: list[int],
    shown: list[int],
    width: int,
) -> dict[int, int] | None:
    """Widths for the ``shown`` columns within ``width``, or ``None``.

    Columns that break between words shrink first, as far as their longest word; then the
    flex column; then the wrap columns, the widest first each time. ``None`` when they do
    not fit even at their ``floors``.
    """
    widths = {i: natural[i] for i in shown}
    excess = sum(widths.values()) + GAP * (len(shown) - 1) - width
    excess = _shrink(widths, {i: words[i] for i in shown if _breaking(columns[i])}, excess)
    excess = _shrink(widths, {i: floors[i] for i in shown if columns[i].kind == "flex"}, excess)
    excess = _shrink(widths, {i: floors[i] for i in shown if columns[i].kind == "wrap"}, excess)
    return widths if excess <= 0 else None


def _shrink(widths: dict[int, int], floors: dict[int, int], excess: int) -> int:
    """Take up to ``excess`` cells from the columns in ``floors``, the widest first."""
    while excess > 0:
        roomy = [i for i in floors if widths[i] > floors[i]]
        if not roomy:
            break
        widest = max(roomy, key=lambda i: widths[i])
        widths[widest] -= 1
        excess -= 1
    return excess


def _tighten(
    columns: Sequence[Column],
    cells: list[list[Text]],
    natural: list[int],
    shown: list[int],
    widths: dict[int, int],
) -> None:
    """Give what a breaking column leaves unused (its lines end at breaks) to the flex one."""
    spare = 0
    for i in shown:
        if _breaking(columns[i]):
            used = max(_widest(_shaped(columns[i], cell, widths[i])) for cell in cells[i])
            spare += widths[i] - used
            widths[i] = used
    for i in (i for i in shown if columns[i].kind == "flex"):
        widths[i] = min(natural[i], widths[i] + spare)


def _shaped(column: Column, cell: Text, width: int) -> Text:
    """``cell`` as ``column`` prints it at ``width``: broken where it may be, or cut."""
    if _breaking(column):
        return _broken(cell, width, " " + column.breaks)
    if column.kind == "flex" and column.lines > 1:
        lines = _broken(cell, width, " ").split("\n")
        if len(lines) <= column.lines:
            return Text("\n").join(lines)
        last = lines[column.lines - 1]
        if cell_len(last.plain) >= width:  # no room for the ellipsis: drop the last word
            space = last.plain.rfind(" ")
            if space > 0:
                last.right_crop(len(last) - space)
            else:
                last.truncate(width - 1)
        last.append("…")
        return Text("\n").join(lines[: column.lines])
    return cell


def _broken(cell: Text, width: int, marks: str) -> Text:
    """``cell`` on lines of at most ``width`` cells, broken after its ``marks``."""
    pieces = _wrapped(cell.plain, width, marks)
    lines = cell.divide(itertools.accumulate(len(piece) for piece in pieces[:-1]))
    for line in lines:
        line.rstrip()
    return Text("\n").join(lines)


def _wrapped(text: str, width: int, marks: str) -> list[str]:
    """``text`` in pieces of at most ``width`` cells (trailing spaces aside) that join into it.

    A piece ends after ``marks[0]`` where the text allows, else after the next mark; only a
    piece without any mark is cut where the width ends.
    """
    if cell_len(text.rstrip(" ")) <= width:
        return [text]
    if not marks:
        body = text.rstrip(" ")
        chunks = chop_cells(body, width)
        chunks[-1] += text[len(body) :]
        return chunks
    pieces: list[str] = []
    for part in _parts(text, marks[0]):
        if pieces and cell_len((pieces[-1] + part).rstrip(" ")) <= width:
            pieces[-1] += part
        elif part:
            pieces.extend(_wrapped(part, width, marks[1:]))
    return pieces


@dataclass(kw_only=True)
class _Call:
    phase: str
    model: str
    since: float
    stage: str = "started"
    tokens: int = 0


class Activity:
    """What a run is doing, on ``console`` (stderr).

    A line per event worth attention, and on a terminal a live status line (a spinner, the
    model and phase, seconds, tokens so far) under the answer as the combine call streams
    it (``AnswerDelta``); the result's answer is printed once at the end, as without a
    terminal.

    Use it as a context manager around the run and as its event subscriber.
    """

    def __init__(self, console: Console) -> None:
        self._console = console
        self._live: Live | None = None
        self._since = time.monotonic()
        self._call: _Call | None = None
        self._steps: dict[int, tuple[str, float]] = {}
        self._nodes: dict[int, str] = {}
        """The name of each node of a tree run seen start."""
        self._leaves: dict[int, float] = {}
        """The leaves of a tree run at work, since when."""
        self._note: Text | None = None
        self._spinner = Spinner("dots", style="cyan")
        self._answer: list[str] = []
        """The answer so far, as the combine call streams it (shown live on a terminal)."""
        self._attempt = 1

    @property
    def on_terminal(self) -> bool:
        """Whether the status is drawn live (stderr is a terminal that can redraw)."""
        return self._console.is_terminal and not self._console.is_dumb_terminal

    def __enter__(self) -> Activity:
        if self.on_terminal:
            self._live = Live(
                console=self._console,
                get_renderable=self._render,
                transient=True,
                refresh_per_second=8,
                redirect_stdout=False,
            )
            self._live.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def note(self, text: str) -> None:
        """A line of progress from elsewhere (the decomposer): printed, and in the status."""
        self._note = literal(text)
        self._console.print(literal(text, "dim"))

    def __call__(self, event: Event) -> None:
        """Show ``event``."""
        if isinstance(event, ModelProgress):
            self._model_progress(event)
        elif isinstance(event, AnswerDelta):
            if event.attempt != self._attempt:  # a repaired answer replaces the one before
                self._answer, self._attempt = [], event.attempt
            self._answer.append(event.text)
        elif isinstance(event, ModelCalled):
            self._call = None
            mark = ("ok", "green") if event.ok else ("failed", "red")
            self._print(("model ", "dim"), event.phase, " ", mark, f" ({event.seconds:.2f}s)")
        elif isinstance(event, PlanCreated):
            self._print(("plan ", "dim"), f"{len(event.plan.steps)} steps")
        elif isinstance(event, PlanRepaired):
            self._print(
                ("repair ", "yellow"),
                f"{event.phase} answer {event.attempt}: ",
                literal(event.rule),
                literal(f" ({one_line(event.message)})" if event.message else "", limit=RESULT),
            )
        elif isinstance(event, StepStarted):
            self._steps[event.step_no] = (event.step.tool_name, time.monotonic())
            step = event.step
            does = (" -> ", step.tool) if step.tool is not None else (": ", step.title)
            self._print(
                ("step ", "dim"),
                f"{event.step_no} ",
                literal(step.id),
                does[0],
                literal(does[1], limit=200),
            )
        elif isinstance(event, StepFinished):
            self._steps.pop(event.entry.step_no, None)
            if not event.entry.ok:
                reason = event.entry.stop_reason or event.entry.error or ""
                self._print((f"step {event.entry.step_no} stopped: ", "red"), literal(reason))
        elif isinstance(event, NodeStarted | NodeFinished | NodeDecomposed):
            self._node(event)
        else:
            self._replan(event)

    def _node(self, event: NodeStarted | NodeFinished | NodeDecomposed) -> None:
        """``node 12 'Venue': running``, ``... ok: <result>``, ``... failed (<reason>)``."""
        if isinstance(event, NodeStarted):
            self._nodes[event.node_id] = event.name
            if event.leaf:
                self._leaves[event.node_id] = time.monotonic()
            what: tuple[str | Text | tuple[str, str], ...] = (
                "running" if event.leaf else "running its subtasks",
            )
        elif isinstance(event, NodeFinished):
            self._leaves.pop(event.node_id, None)
            if event.status == "ok":
                what = (("ok", "green"), literal(f": {one_line(event.result)}", limit=RESULT))
            else:
                what = (("failed", "red"), literal(f" ({event.reason or 'failed'})", limit=RESULT))
        else:
            self._leaves.pop(event.node_id, None)
            count = len(event.children)
            what = (
                ("split", "cyan"),
                f" into {count} {'subtask' if count == 1 else 'subtasks'} "
                f"({', '.join(map(str, event.children))}): ",
                literal(one_line(event.reason), limit=RESULT),
            )
        name = self._nodes.get(event.node_id)
        called = literal(f" {name!r}", limit=80) if name is not None else ""
        self._print(("node ", "dim"), f"{event.node_id}", called, ": ", *what)

    def _model_progress(self, event: ModelProgress) -> None:
        call = self._call
        if event.stage == "started" or call is None:
            call = self._call = _Call(phase=event.phase, model=event.model, since=time.monotonic())
            if not self.on_terminal:
                self._print(
                    ("model ", "dim"), f"{event.phase} started (", literal(event.model), ")"
                )
        if event.stage == "loading" and call.stage != "loading" and not self.on_terminal:
            self._print(("model ", "dim"), f"{event.phase} loading the model file")
        call.stage, call.tokens = event.stage, max(call.tokens, event.tokens_out)

    def _replan(self, event: Event) -> None:
        if isinstance(event, ReplanDecided):
            self._print(("replan ", "dim"), f"round {event.iteration}: {event.kind}")
        elif isinstance(event, PlanRevised):
            change = "revised" if event.changed else "unchanged"
            self._print(("plan ", "dim"), f"{change}: {len(event.plan.steps)} steps left")
        elif isinstance(event, AgentTurn):
            what = f"call {event.tool}" if event.action == "call" else event.action
            step = f"step {event.step_no}" if not self._nodes else event.step_id  # node-12
            self._print(("agent ", "dim"), literal(step), f" turn {event.turn}: ", literal(what))
        elif isinstance(event, ApprovalRequested):
            self._print(("waiting for approval: ", "yellow"), literal(event.request.describe()))

    def _print(self, *parts: str | Text | tuple[str, str]) -> None:
        self._console.print(line(*parts), soft_wrap=True)

    def _render(self) -> RenderableType:
        status = self.status(time.monotonic())
        status.no_wrap, status.overflow = True, "ellipsis"  # one line, whatever the width
        self._spinner.update(text=status)
        if not self._answer:
            return self._spinner
        return Group(self.answer_so_far(), self._spinner)

    def answer_so_far(self) -> Text:
        """The streamed answer's last lines that fit above the status line."""
        room = max(1, self._console.height - 2)
        lines = "".join(self._answer).splitlines()[-room:]
        return literal("\n".join(lines))

    def status(self, now: float) -> Text:
        """The status line at ``now``, with the seconds it has taken.

        The model call, else the running steps, else the running leaves of a tree (the
        longest running first), else the last note.
        """
        call = self._call
        if call is not None:
            doing = {
                "loading": "loading the model file",
                "generating": f"{call.tokens} tokens" if call.tokens else "reading the prompt",
            }
            return line(
                ("model ", "dim"),
                f"{call.phase} · {_seconds(now - call.since)} · ",
                doing.get(call.stage, "waiting for the answer"),
                " · ",
                literal(short_model(call.model)),
            )
        steps = dict(self._steps)  # a copy: the run's thread changes it meanwhile
        if steps:
            step_no, (tool, since) = min(steps.items())
            more = f" (+{len(steps) - 1} more)" if len(steps) > 1 else ""
            return line(
                ("step ", "dim"), f"{step_no} · {_seconds(now - since)} · ", literal(tool), more
            )
        leaves = dict(self._leaves)
        if leaves:
            node_id, since = min(leaves.items(), key=lambda item: item[1])
            more = f" (+{len(leaves) - 1} more)" if len(leaves) > 1 else ""
            name = literal(self._nodes.get(node_id, ""), limit=80)
            return line(("node ", "dim"), f"{node_id} · {_seconds(now - since)} · ", name, more)
        note = self._note or Text("working")
        return line(_seconds(now - self._since), " · ", note)


RESULT = 120
"""Most characters of a node's result or failure in its line."""


def one_line(value: object) -> str:
    """``value`` on one line: text as it is, anything else as JSON; whitespace runs as one space."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return " ".join(text.split())


def short_model(name: str) -> str:
    """A model's name for a status line: a file path only by its file name."""
    provider, colon, rest = name.partition(":")
    if colon and "/" in rest:
        return f"{provider}:{rest.rsplit('/', 1)[-1]}"
    return name


def _seconds(seconds: float) -> str:
    return f"{seconds:.0f}s" if seconds < 60 else f"{int(seconds // 60)}m{seconds % 60:02.0f}s"
