"""Pages of long lists and places in a queue: what every list of the selectors hands back."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Numbered[T]:
    """A row of a page with its place in the whole list (1-based), and whether that place is an
    estimate (a fair limit's queue past the runs walked exactly, SPEC 13.7)."""

    place: int
    estimated: bool
    item: T


@dataclass(frozen=True, slots=True)
class Page[T]:
    """One page of a long list whose total comes from a counter, never from COUNT(*).
    `estimated_after`: places past it are estimates (a fair limit's queue: fair_queue_rows);
    None when every place is exact."""

    items: list[T]
    number: int
    size: int
    total: int
    estimated_after: int | None = None
    next_key: str | None = None  # a fair queue's (fair_queue_rows): the key its next freed slot goes to

    @property
    def offset(self) -> int:
        return (self.number - 1) * self.size

    @property
    def pages(self) -> int:
        return max((self.total + self.size - 1) // self.size, 1)

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def has_next(self) -> bool:
        return self.number < self.pages

    @property
    def first_index(self) -> int:
        """1-based index of the first row on this page (a queue position)."""
        return self.offset + 1

    @property
    def last_index(self) -> int:
        return self.offset + len(self.items)

    @property
    def numbered(self) -> list[Numbered[T]]:
        """The rows with their places: first_index, + 1, ..."""
        after = self.estimated_after
        return [
            Numbered(place, after is not None and place > after, item)
            for place, item in enumerate(self.items, start=self.first_index)
        ]

    def with_items[U](self, items: list[U]) -> Page[U]:
        """This page holding other rows, one for each of its own in the same order (what a
        template reads of each: limit_pages.slot_rows, limit_pages.queue_rows)."""
        return Page(items, self.number, self.size, self.total, self.estimated_after, self.next_key)


def clamp_page(number: int, *, total: int, size: int) -> int:
    return min(max(number, 1), max((total + size - 1) // size, 1))


@dataclass(frozen=True, slots=True)
class Place:
    """A run's place in a queue: 1-based, exact unless `approximate` (queue_place)."""

    number: int
    approximate: bool = False
