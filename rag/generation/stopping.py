"""Stop strings for streamed text: cut the reply where one first appears (OpenAI's ``stop``)."""

from __future__ import annotations

from typing import Sequence


class StopMatcher:
    """Feeds streamed text pieces through, holding back a tail that could be the start of a stop string,
    and cuts everything from the first stop string on."""

    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = tuple(s for s in stops if s)
        self._pending = ""
        self.stopped = False

    def feed(self, piece: str) -> str:
        """The text that is safe to emit now; sets ``stopped`` once a stop string has appeared."""
        if self.stopped:
            return ""
        text = self._pending + piece
        found = [i for i in (text.find(stop) for stop in self._stops) if i >= 0]
        if found:
            self.stopped, self._pending = True, ""
            return text[:min(found)]
        held = max((n for stop in self._stops for n in range(1, min(len(stop), len(text) + 1))
                    if text.endswith(stop[:n])), default=0)
        self._pending = text[len(text) - held:] if held else ""
        return text[:len(text) - held]

    def flush(self) -> str:
        """What was held back, at the end of generation (it did not turn into a stop string)."""
        rest, self._pending = self._pending, ""
        return rest
