"""Line numbers of keys in a TOML file, for error messages that point at the offending line.

Hand-written because neither ``tomllib`` nor ``tomlkit`` exposes where a parsed key sits (tomlkit issue #55 is
still open). The data always comes from ``tomllib``; this module only walks the *structure* of a text
that tomllib has already accepted (tables, arrays of tables, dotted keys, inline tables, arrays) and records
the line of every key path, with array elements addressed by their index: ``("grid", 0, "attacks", 1)``.
"""

from __future__ import annotations

from collections.abc import Sequence

PathPart = str | int
_BARE = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


class KeyLines:
    """Map key paths of a (valid) TOML document to 1-based line numbers."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.lineno = 1
        self.index: dict[tuple[PathPart, ...], int] = {}
        self._array_tables: dict[tuple[PathPart, ...], int] = {}
        self._document()

    # -- public --------------------------------------------------------------------------------------------
    def line(self, path: Sequence[PathPart]) -> int | None:
        """The line of ``path``, else of its longest prefix that was found; None when nothing matched."""
        p = tuple(path)
        while p:
            if p in self.index:
                return self.index[p]
            p = p[:-1]
        return None

    # -- scanning ------------------------------------------------------------------------------------------
    def _peek(self, k: int = 0) -> str:
        i = self.pos + k
        return self.text[i] if i < len(self.text) else ""

    def _advance(self, n: int = 1) -> None:
        for _ in range(n):
            if self.pos < len(self.text):
                if self.text[self.pos] == "\n":
                    self.lineno += 1
                self.pos += 1

    def _skip(self, newlines: bool) -> None:
        """Skip blanks and comments (and newlines when ``newlines``)."""
        while self.pos < len(self.text):
            ch = self._peek()
            if ch in " \t\r" or (newlines and ch == "\n"):
                self._advance()
            elif ch == "#":
                while self.pos < len(self.text) and self._peek() != "\n":
                    self._advance()
            else:
                return

    def _record(self, path: tuple[PathPart, ...], lineno: int) -> None:
        self.index.setdefault(path, lineno)

    def _string(self) -> str:
        quote = self._peek()
        triple = self.text.startswith(quote * 3, self.pos)
        if triple:
            self._advance(3)
            end = self.text.find(quote * 3, self.pos)
            while quote == '"' and end > 0 and self.text[end - 1] == "\\":
                end = self.text.find(quote * 3, end + 1)
            value = self.text[self.pos : end]
            self._advance(end - self.pos + 3)
            while self._peek() == quote:  # up to two extra quotes may close a multi-line string
                self._advance()
            return value
        self._advance()
        start = self.pos
        while self.pos < len(self.text) and self._peek() != quote:
            if quote == '"' and self._peek() == "\\":
                self._advance()
            self._advance()
        value = self.text[start : self.pos]
        self._advance()
        return value

    def _key(self) -> list[str]:
        """A (dotted) key; returns its parts."""
        parts: list[str] = []
        while True:
            self._skip(newlines=False)
            if self._peek() in "\"'":
                parts.append(self._string())
            else:
                start = self.pos
                while self._peek() in _BARE and self._peek():
                    self._advance()
                parts.append(self.text[start : self.pos])
            self._skip(newlines=False)
            if self._peek() == ".":
                self._advance()
                continue
            return parts

    def _document(self) -> None:
        table: tuple[PathPart, ...] = ()
        while True:
            self._skip(newlines=True)
            if self.pos >= len(self.text):
                return
            line = self.lineno
            if self._peek() == "[":
                array = self._peek(1) == "["
                self._advance(2 if array else 1)
                path = tuple(self._key())
                self._advance(2 if array else 1)
                for k in range(1, len(path) + 1):
                    self._record(path[:k], line)
                if array:
                    idx = self._array_tables.get(path, 0)
                    self._array_tables[path] = idx + 1
                    table = (*path, idx)
                else:
                    table = path
                self._record(table, line)
                continue
            self._keyval(table)

    def _keyval(self, base: tuple[PathPart, ...]) -> None:
        line = self.lineno
        path = (*base, *self._key())
        for k in range(len(base) + 1, len(path) + 1):
            self._record(path[:k], line)
        self._skip(newlines=False)
        self._advance()  # '='
        self._skip(newlines=False)
        self._value(path)

    def _value(self, path: tuple[PathPart, ...]) -> None:
        ch = self._peek()
        if ch == "{":
            self._advance()
            while True:
                self._skip(newlines=True)
                if self._peek() == "}":
                    self._advance()
                    return
                if self._peek() == ",":
                    self._advance()
                    continue
                self._keyval(path)
        elif ch == "[":
            self._advance()
            i = 0
            while True:
                self._skip(newlines=True)
                if self._peek() == "]":
                    self._advance()
                    return
                if self._peek() == ",":
                    self._advance()
                    i += 1
                    continue
                self._record((*path, i), self.lineno)
                self._value((*path, i))
        elif ch in "\"'":
            self._string()
        else:  # number, boolean, date: everything up to a delimiter
            while self.pos < len(self.text) and self._peek() not in ",]}\n#":
                self._advance()
