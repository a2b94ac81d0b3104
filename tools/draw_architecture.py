"""Draw the house from the code: the import graph between the rooms of the layers contract in pyproject.toml
([tool.importlinter], the contract whose name starts "Rooms"), built with grimp (import-linter's own graph),
one box per room in rows from the top floor down, one arrow per importing room pair, labelled with the number
of imports (module → module) it stands for.

    python tools/draw_architecture.py [--out docs/architecture.png]

It prints the edges, then the number of upward arrows (an import of a room in a higher row) and of cycles
(between rooms, and between the top-level floors); both must be 0, and the exit status is 1 when one is not.
Needs the dev extra (grimp, with import-linter) and the plot extra (matplotlib).
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLOOR_COLOURS = {"api": "#f4cccc", "app": "#fce5cd", "ingest": "#d9ead3", "rag": "#cfe2f3"}


@dataclass(frozen=True)
class Plan:
    packages: tuple[str, ...]  # the top-level floors, top first
    rows: tuple[tuple[str, ...], ...]  # the rooms, row by row, top first


def read_plan(pyproject: Path) -> Plan:
    config = tomllib.loads(pyproject.read_text(encoding="utf-8"))["tool"]["importlinter"]
    contracts = config["contracts"]
    floors = next(c for c in contracts if c["type"] == "layers" and c["name"].startswith("Floors"))
    rooms = next(c for c in contracts if c["type"] == "layers" and c["name"].startswith("Rooms"))
    rows = tuple(tuple(name.strip() for name in re.split(r"[|:]", layer)) for layer in rooms["layers"])
    return Plan(tuple(floors["layers"]), rows)


def room_of(module: str, rooms: list[str]) -> str | None:
    """The deepest room that holds ``module`` (a package's own ``__init__`` of a floor is in none)."""
    holders = [r for r in rooms if module == r or module.startswith(r + ".")]
    return max(holders, key=len) if holders else None


def room_edges(plan: Plan) -> tuple[Counter[tuple[str, str]], list[str]]:
    """(importer room, imported room) → number of module imports between them; and modules in no room."""
    import grimp

    graph = grimp.build_graph(*plan.packages)
    rooms = [room for row in plan.rows for room in row]
    edges: Counter[tuple[str, str]] = Counter()
    homeless = []
    for module in sorted(graph.modules):
        source = room_of(module, rooms)
        imported = graph.find_modules_directly_imported_by(module)
        if source is None:
            if imported:
                homeless.append(module)
            continue
        for target_module in imported:
            target = room_of(target_module, rooms)
            if target is not None and target != source:
                edges[(source, target)] += 1
    return edges, homeless


def cycles(nodes: list[str], edges: set[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected groups of more than one node (Tarjan): each holds at least one circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for a, b in edges:
            if a != node:
                continue
            if b not in index:
                visit(b)
                low[node] = min(low[node], low[b])
            elif b in stack:
                low[node] = min(low[node], index[b])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in nodes:
        if node not in index:
            visit(node)
    return found


def draw(plan: Plan, edges: Counter[tuple[str, str]], out: Path) -> None:
    import math

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    width, row_gap, box_h = 14.0, 1.55, 0.56
    place: dict[str, tuple[float, float]] = {}
    for r, row in enumerate(plan.rows):
        y = -r * row_gap
        slot = width / len(row)
        for i, room in enumerate(row):
            place[room] = (slot * (i + 0.5), y)
    fig, ax = plt.subplots(figsize=(14, 1.25 * len(plan.rows) + 1.2), dpi=110)
    box_w = {room: max(1.15, 0.13 * len(room) + 0.35) for room in place}
    # Every room imports the ground floor: its arrows would cross all the others, so the ground floor's box
    # lists them instead (the printed edges have them all).
    ground = plan.rows[-1][0] if len(plan.rows[-1]) == 1 else None
    drawn = {e: n for e, n in edges.items() if e[1] != ground}
    biggest = max(drawn.values(), default=1)
    # Arrows leave a box's bottom and enter a box's top at points spread by where the other end is.
    outgoing = {room: sorted((b for a, b in drawn if a == room and place[b][1] != place[a][1]),
                             key=lambda b: place[b][0]) for room in place}
    incoming = {room: sorted((a for a, b in drawn if b == room and place[b][1] != place[a][1]),
                             key=lambda a: place[a][0]) for room in place}

    def port(room: str, others: list[str], other: str) -> float:
        spread = box_w[room] * 0.8
        i = others.index(other)
        return place[room][0] - spread / 2 + spread * (i + 0.5) / len(others)

    for (a, b), n in sorted(drawn.items(), key=lambda e: e[1]):
        (xa, ya), (xb, yb) = place[a], place[b]
        same_row = ya == yb
        if same_row:
            start = (xa + math.copysign(box_w[a] / 2, xb - xa), ya)
            end = (xb - math.copysign(box_w[b] / 2, xb - xa), yb)
        else:
            start, end = (port(a, outgoing[a], b), ya - box_h / 2), (port(b, incoming[b], a), yb + box_h / 2)
        arrow = FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=12, color="#555555", alpha=0.7,
                                linewidth=0.6 + 2.4 * math.log1p(n) / math.log1p(biggest),
                                connectionstyle="arc3,rad=0.25" if same_row else "arc3,rad=0.0", zorder=1)
        ax.add_patch(arrow)
        at = 0.8 if not same_row else 0.5
        mx, my = start[0] + (end[0] - start[0]) * at, start[1] + (end[1] - start[1]) * at
        if same_row:  # the arc's middle (matplotlib's arc3: the control point is rad * (dy, -dx) off the chord)
            mx, my = mx + 0.25 * (end[1] - start[1]) / 2, my - 0.25 * (end[0] - start[0]) / 2
        ax.text(mx, my, str(n), fontsize=7, ha="center", va="center", zorder=3,
                bbox={"boxstyle": "round,pad=0.12", "facecolor": "white", "edgecolor": "none", "alpha": 0.85})
    if ground is not None:
        into = sorted(((a, n) for (a, b), n in edges.items() if b == ground), key=lambda e: -e[1])
        listed = ", ".join(f"{a} {n}" for a, n in into)
        everyone = " every room above" if len(into) == len(place) - 1 else ""
        ax.text(place[ground][0], place[ground][1] - box_h / 2 - 0.25,
                f"imported by{everyone} (arrows not drawn; module imports): {listed}",
                ha="center", va="top", fontsize=7.5, wrap=True)
    for room, (x, y) in place.items():
        floor = room.split(".")[0]
        ax.add_patch(FancyBboxPatch((x - box_w[room] / 2, y - box_h / 2), box_w[room], box_h,
                                    boxstyle="round,pad=0.02,rounding_size=0.12", linewidth=1.1, zorder=2,
                                    facecolor=FLOOR_COLOURS.get(floor, "#eeeeee"), edgecolor="#333333"))
        ax.text(x, y, room, ha="center", va="center", fontsize=10, fontweight="bold", zorder=4)
    for floor, colour in FLOOR_COLOURS.items():
        if floor in plan.packages:
            ax.plot([], [], "s", markersize=11, color=colour, markeredgecolor="#333333", label=f"{floor}/")
    ax.legend(loc="lower left", ncol=len(FLOOR_COLOURS), frameon=False, fontsize=9, bbox_to_anchor=(0, -0.02))
    ax.set_title("The import graph, drawn from the code (grimp): rooms of the layers contract, top floor first;\n"
                 "an arrow is 'imports', its number the module imports it stands for; every arrow runs down "
                 "or across a row", fontsize=10)
    ax.set_xlim(-0.2, width + 0.2)
    ax.set_ylim(-(len(plan.rows) - 1) * row_gap - 1.3, 0.6)
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def listed(found: list) -> str:
    return f" {found}" if found else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "architecture.png")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))  # the checkout's packages, whatever the current directory
    plan = read_plan(ROOT / "pyproject.toml")
    edges, homeless = room_edges(plan)
    row = {room: r for r, rooms in enumerate(plan.rows) for room in rooms}
    upward = sorted((a, b) for a, b in edges if row[b] < row[a])
    room_cycles = cycles(list(row), set(edges))
    floor_edges = {(a.split(".")[0], b.split(".")[0]) for a, b in edges if a.split(".")[0] != b.split(".")[0]}
    floor_cycles = cycles(list(plan.packages), floor_edges)
    floor_rank = {floor: i for i, floor in enumerate(plan.packages)}
    floor_upward = sorted((a, b) for a, b in floor_edges if floor_rank[b] < floor_rank[a])
    for (a, b), n in sorted(edges.items(), key=lambda e: (row[e[0][0]], e[0])):
        print(f"{a:18} -> {b:18} {n:4}")
    print(f"rooms: {len(row)}, arrows: {len(edges)}, module imports between rooms: {sum(edges.values())}")
    if homeless:
        print(f"modules in no room that import something: {', '.join(homeless)}")
    print(f"upward arrows: {len(upward)} between rooms{listed(upward)}, {len(floor_upward)} between floors"
          f"{listed(floor_upward)}")
    print(f"cycles: {len(room_cycles)} between rooms{listed(room_cycles)}, {len(floor_cycles)} between floors"
          f"{listed(floor_cycles)}")
    draw(plan, edges, args.out)
    print(f"drawn: {args.out}")
    return 1 if upward or room_cycles or floor_upward or floor_cycles else 0


if __name__ == "__main__":
    sys.exit(main())
