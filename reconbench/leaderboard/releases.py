"""Numbered, immutable releases of a published board (``reconbench leaderboard B --release``).

A release names a state of the board by two things a reader can check: the git **commit** its files are committed
at, and the **sha256 of its MANIFEST.json**, which lists the sha256 of every other file of the board (``manifest.py``),
so one hash covers the cells, cards, protocols, candidates, figures, README.md and results.json. Releases are
numbered per board, after the board's folder (``ci-r1``, ``ci-r2``, ...; ``paper-gpu-r1`` for the board of suite
``paper`` in ``leaderboards/paper-gpu``) and listed, oldest first, in the board's ``RELEASES.json``
(``reconbench-board-releases/1``); a release is never rewritten, and making one again on an unchanged board is a
no-op that names the release it already is.

When a board is released again after it changed, the previous release's ``MANIFEST.json`` and ``README.md`` are
taken from its commit (``git show``) and kept in ``releases/<id>/``, so that every older release stays readable from
the board folder (the site lists them, with links); only these two small files are kept per older release, the rest
is in the repository's history at the recorded commit. No manifest lists ``RELEASES.json`` or ``releases/`` (they
name manifests).

A release is made only from a board that matches its manifest and whose files are committed: the commit must hold
exactly the files released (``git status`` of the board folder is clean). Exports and the site carry the release id
of the board's current state, or ``unreleased`` when it changed since its last release.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from dataclasses import replace
from pathlib import Path

from reconbench.errors import ReconbenchError
from reconbench.leaderboard.manifest import MANIFEST_NAME, RELEASES_DIR, RELEASES_NAME, check_manifest
from reconbench.provenance import LOCK_FILE, write_text_atomic
from reconbench.records import RELEASES_FILE, BoardRelease, BoardReleases, plain
from reconbench.records.board_manifest import BOARD_MANIFEST_FILE

#: what exports and the site show for a board whose files are not those of any release
UNRELEASED = "unreleased"
#: the files of an older release kept under ``releases/<id>/``
ARCHIVED = (MANIFEST_NAME, "README.md")


def board_name(board: Path) -> str:
    """The name releases are numbered under: the one the board's RELEASES.json records (a copy of a board in
    another folder keeps its releases' names), else the board's folder. A board in a folder named after its suite
    (every CPU board) is named as its suite; one in a folder of another name (``leaderboards/paper-gpu`` from suite
    ``paper``) is named after its folder, so that its releases (``paper-gpu-r1``) and those of a board of the same
    suite in the suite's folder (``paper-r1``) cannot share a name."""
    path = board / RELEASES_NAME
    if path.exists() and (recorded := RELEASES_FILE.read(path).board):
        return recorded
    return board.resolve().name


def read_releases(board: Path) -> BoardReleases:
    """The board's releases (none when it has no ``RELEASES.json``), or a one-line error naming the file."""
    path = board / RELEASES_NAME
    if not path.exists():
        return BoardReleases(format=BoardReleases.SCHEMA, board=board_name(board))
    return RELEASES_FILE.read(path)


def manifest_sha256(board: Path) -> str:
    """The sha256 of the board's MANIFEST.json as stored (its bytes), or a one-line error when there is none."""
    path = board / MANIFEST_NAME
    if not path.is_file():
        raise ReconbenchError(f"{path} is missing: a board is released with its manifest; publish it (--publish) or "
                              "write its manifest with --slim first")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def current_release(board: Path) -> BoardRelease | None:
    """The release whose manifest the board holds now (None: changed since, or never released)."""
    if not (board / MANIFEST_NAME).is_file():
        return None
    now = manifest_sha256(board)
    return next((r for r in reversed(read_releases(board).releases) if r.manifest_sha256 == now), None)


def release_label(board: Path) -> str:
    """The id of the release the board is now (``ci-r1``), or ``unreleased``."""
    release = current_release(board)
    return UNRELEASED if release is None else release.id


def _git(board: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(["git", *args], cwd=board, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ReconbenchError(f"git is not available ({exc}); a release names a commit: release the board from a "
                              "git checkout") from None


def board_commit(board: Path) -> tuple[str, str]:
    """The commit the board's files are committed at, and the board's path in the repository; a one-line error
    when the board is not in a git checkout or has changes that are not committed."""
    head = _git(board, "rev-parse", "HEAD")
    prefix = _git(board, "rev-parse", "--show-prefix")
    if head.returncode != 0 or prefix.returncode != 0:
        raise ReconbenchError(f"{board} is not in a git checkout with a commit; a release names the commit of its "
                              "files: commit the board in the repository first")
    status = _git(board, "status", "--porcelain", "--untracked-files=all", "--", ".",
                  *(f":(exclude){name}" for name in (RELEASES_NAME, RELEASES_DIR, LOCK_FILE, LOCK_FILE + ".json")))
    changed = status.stdout.decode(errors="replace").splitlines()
    if status.returncode != 0 or changed:
        first = changed[0].strip() if changed else status.stderr.decode(errors="replace").strip()
        raise ReconbenchError(f"{board} has changes that are not committed ({len(changed)} path(s), first: {first}); "
                              "commit the board's files, then release it")
    return head.stdout.decode().strip(), prefix.stdout.decode().strip()


def make_release(board: Path, note: str | None = None) -> tuple[BoardRelease, bool]:
    """Record the board's current state as its next release; the release, and whether it is new (False: the board
    is already that release)."""
    problems = check_manifest(board)
    if problems:
        raise ReconbenchError(f"{board} differs from its {MANIFEST_NAME} ({len(problems)} file(s), first: "
                              f"{problems[0]}); only a board as published can be released")
    sha = manifest_sha256(board)
    known = read_releases(board)
    if (same := next((r for r in known.releases if r.manifest_sha256 == sha), None)) is not None:
        return same, False
    commit, prefix = board_commit(board)
    if known.releases:
        _archive(board, known.releases[-1], prefix)
    files = len(json.loads((board / MANIFEST_NAME).read_text())["files"])
    number = len(known.releases) + 1
    name = board_name(board)
    release = BoardRelease(id=f"{name}-r{number}", number=number, commit=commit, manifest_sha256=sha,
                           files=files, released=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), note=note)
    updated = replace(known, format=BoardReleases.SCHEMA, board=name, releases=[*known.releases, release])
    write_text_atomic(board / RELEASES_NAME, releases_text(updated))
    return release, True


def releases_text(releases: BoardReleases) -> str:
    """RELEASES.json's text: one release per line."""
    rows = [json.dumps(plain(r), sort_keys=False) for r in releases.releases]
    head = json.dumps({"format": releases.format, "board": releases.board})[:-1]
    return head + ', "releases": [\n' + ",\n".join(rows) + "\n]}\n"


def _archive(board: Path, release: BoardRelease, prefix: str) -> None:
    """Keep an older release's manifest and README under ``releases/<id>/``, from its commit."""
    folder = board / RELEASES_DIR / release.id
    for name in ARCHIVED:
        shown = _git(board, "show", f"{release.commit}:{prefix}{name}")
        if shown.returncode != 0:
            raise ReconbenchError(f"{name} of release {release.id} cannot be read from commit {release.commit} "
                                  f"({shown.stderr.decode(errors='replace').strip()[:120]}); fetch the repository's "
                                  "full history, then release again")
        if name == MANIFEST_NAME and hashlib.sha256(shown.stdout).hexdigest() != release.manifest_sha256:
            raise ReconbenchError(f"commit {release.commit} does not hold the manifest of release {release.id} "
                                  f"(sha256 {release.manifest_sha256[:16]}); restore {RELEASES_NAME}")
        folder.mkdir(parents=True, exist_ok=True)
        write_text_atomic(folder / name, shown.stdout.decode())


def check_releases(board: Path) -> list[str]:
    """What is wrong with a board's releases, one line each: numbering, ids, and each archived manifest against the
    sha256 its release records (empty: nothing)."""
    if not (board / RELEASES_NAME).exists():
        return []
    releases = read_releases(board).releases
    name = board_name(board)
    problems = []
    for k, r in enumerate(releases, start=1):
        if r.number != k or r.id != f"{name}-r{k}":
            problems.append(f"{board / RELEASES_NAME}: release {k} is named {r.id!r} (number {r.number}); releases "
                            "are never renumbered, restore the file")
        archived = board / RELEASES_DIR / r.id / MANIFEST_NAME
        if archived.exists() and hashlib.sha256(archived.read_bytes()).hexdigest() != r.manifest_sha256:
            problems.append(f"{archived} is not the manifest of release {r.id} (sha256 differs); restore it")
            continue
        problems += _release_files_problems(board, r, archived)
    ids = {r.id for r in releases}
    if (board / RELEASES_DIR).is_dir():
        for p in sorted((board / RELEASES_DIR).iterdir()):
            if p.name not in ids:
                problems.append(f"{p} is not a release of the board; remove it")
    return problems


def _release_files_problems(board: Path, release: BoardRelease, archived: Path) -> list[str]:
    """A release against the manifest it names, where the board holds it (its own, or archived under
    ``releases/<id>/``): the count of files it records, and an archived README.md against the manifest's sha256."""
    manifest = archived if archived.exists() else board / MANIFEST_NAME
    if not manifest.is_file() or hashlib.sha256(manifest.read_bytes()).hexdigest() != release.manifest_sha256:
        return []   # an older release kept only in the repository's history: its commit holds its files
    listed = BOARD_MANIFEST_FILE.read(manifest).files
    problems = []
    if release.files is not None and release.files != len(listed):
        problems.append(f"{board / RELEASES_NAME}: release {release.id} records {release.files} file(s), its manifest "
                        f"lists {len(listed)}; restore the file")
    readme = archived.parent / "README.md"
    if archived.exists() and readme.exists():
        entry = listed.get("README.md")
        if entry is None or hashlib.sha256(readme.read_bytes()).hexdigest() != entry.sha256:
            problems.append(f"{readme} is not the README.md of release {release.id} (its sha256 is not the one the "
                            "release's manifest lists); restore it")
    return problems


def release_line(board: Path) -> str:
    """One line on the board's release state, for ``--verify`` and ``--release``."""
    releases = read_releases(board).releases
    if not releases:
        return f"{board}: no release yet (`--release` numbers this state)"
    now = current_release(board)
    if now is None:
        return (f"{board}: changed since its last release {releases[-1].id} (unreleased; `--release` numbers this "
                "state)")
    return (f"{board}: release {now.id} (commit {str(now.commit)[:12]}, manifest sha256 {now.manifest_sha256[:16]}, "
            f"{len(releases)} release(s))")
