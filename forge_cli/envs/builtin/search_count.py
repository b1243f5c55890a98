"""Family ``search-count``: count lines, count or extract matching lines, find the file that holds a text.

Unseen templates: ``count-words``, ``first-match``, ``count-files`` and ``head-guided`` (test); ``last-match`` and
``invert-guided`` (val).
"""

from __future__ import annotations

import random

from forge_cli.envs.builtin import checks
from forge_cli.envs.builtin.template import STEMS, Instance, guided, template, text, words

FAMILY = "search-count"
LOGS = ("app.log", "server.log", "build.log", "worker.log")
OUTPUTS = ("count.txt", "lines.txt", "n.txt", "total.txt")


def _log(rng: random.Random, level: str) -> list[str]:
    """8-14 log lines ``LEVEL word word``, with ``level`` on 2-5 of them (never on all)."""
    n = rng.randint(8, 14)
    marked = set(rng.sample(range(n), rng.randint(2, 5)))
    others = [lv for lv in ("INFO", "WARN", "ERROR") if lv != level]
    return [f"{level if i in marked else rng.choice(others)} {' '.join(words(rng, 2))}" for i in range(n)]


@template(FAMILY, "easy", guided=True)
def count_lines(rng: random.Random) -> Instance:
    """One command, shown in the instruction: ``wc -l < file > count.txt``."""
    name, out = f"{rng.choice(STEMS)}.txt", rng.choice(OUTPUTS)
    items = words(rng, rng.randint(5, 15))
    count = str(len(items))
    command = f"wc -l < {name} > {out}"
    return Instance(
        instruction=f"Count the lines of {name} and write only that number into {out} (for example: {command}).",
        files={name: text(items)},
        check=checks.answer, args={"path": out, "expected": [count], "numeric": True},
        solution=command, secrets=(count,))


@template(FAMILY, "medium")
def count_matches(rng: random.Random) -> Instance:
    """One ``grep -c``; the instruction does not name the command."""
    level, name = rng.choice(["WARN", "ERROR", "INFO"]), rng.choice(LOGS)
    log = _log(rng, level)
    count, out = str(sum(level in line.split() for line in log)), f"{level.lower()}s.txt"
    return Instance(
        instruction=f"How many lines of {name} contain the word `{level}`? Write only the number into {out}.",
        files={name: text(log)},
        check=checks.answer, args={"path": out, "expected": [count], "numeric": True},
        solution=f"grep -c -w {level} {name} > {out}", secrets=(count,))


@template(FAMILY, "medium")
def extract_lines(rng: random.Random) -> Instance:
    """One ``grep`` into a file; partial credit by the F1 of the lines written."""
    level, name = rng.choice(["WARN", "ERROR", "INFO"]), rng.choice(LOGS)
    log = _log(rng, level)
    out = f"{level.lower()}.txt"
    return Instance(
        instruction=f"Write every line of {name} that contains the word `{level}` into {out}, in their original "
                    "order (nothing else in that file).",
        files={name: text(log)},
        check=checks.lines, args={"path": out, "expected": [line for line in log if level in line.split()]},
        solution=f"grep -w {level} {name} > {out}")


@template(FAMILY, "hard")
def find_file(rng: random.Random) -> Instance:
    """Search a directory (``grep -l``) and report the path of the one file that matches."""
    names = [f"{word}.txt" for word in words(rng, 5)]
    token = f"KEY-{rng.randint(1000, 9999)}"
    target = rng.choice(names)
    files = {}
    for name in names:
        lines = [" ".join(words(rng, 3)) for _ in range(rng.randint(2, 4))]
        if name == target:
            lines.insert(rng.randrange(len(lines) + 1), f"code {token}")
        files[f"notes/{name}"] = text(lines)
    return Instance(
        instruction=f"Exactly one file in the notes directory contains the text `{token}`. Write that file's path "
                    "(like notes/example.txt) into found.txt.",
        files=files,
        check=checks.answer, args={"path": "found.txt", "expected": [f"notes/{target}", f"./notes/{target}"]},
        solution=f"grep -l {token} notes/* > found.txt", secrets=(target,))


@template(FAMILY, "easy", guided=True)
def count_guided(rng: random.Random) -> Instance:
    """Guided: count the lines of a file with the shown ``wc -l``."""
    name = f"{rng.choice(['items', 'names', 'words', 'entries', 'guests', 'tags', 'colors', 'tools'])}.txt"
    items, out = words(rng, rng.randint(3, 9)), rng.choice(["lines.txt", "size.txt"])
    command = f"wc -l < {name} > {out}"
    return Instance(instruction=guided(f"Write the number of lines of {name} into {out}.", command),
                    files={name: text(items)}, check=checks.answer,
                    args={"path": out, "expected": [str(len(items))], "numeric": True}, solution=command,
                    secrets=())


@template(FAMILY, "easy", guided=True)
def matches_guided(rng: random.Random) -> Instance:
    """Guided: count the lines of a log with one level, with the shown ``grep -c``."""
    level, name = rng.choice(["ERROR", "WARN", "INFO"]), rng.choice(LOGS)
    log = _log(rng, level)
    out = rng.choice([f"{level.lower()}s.txt", f"{level.lower()}-count.txt"])
    command = f"grep -c {level} {name} > {out}"
    return Instance(instruction=guided(f"Write the number of {level} lines of {name} into {out}.", command),
                    files={name: text(log)}, check=checks.answer,
                    args={"path": out, "expected": [str(sum(line.startswith(level) for line in log))],
                          "numeric": True},
                    solution=command)


@template(FAMILY, "easy", held_out="test")
def count_words(rng: random.Random) -> Instance:
    """The number of words of a file (``wc -w``), not of its lines."""
    name, out = f"{rng.choice(STEMS)}.txt", rng.choice(OUTPUTS)
    rows = [" ".join(words(rng, rng.randint(1, 4))) for _ in range(rng.randint(3, 6))]
    count = str(sum(len(row.split()) for row in rows))
    return Instance(
        instruction=f"How many words does {name} contain in total? Write only the number into {out}.",
        files={name: text(rows)},
        check=checks.answer, args={"path": out, "expected": [count], "numeric": True},
        solution=f"wc -w < {name} > {out}", secrets=(count,))


@template(FAMILY, "medium", held_out="test")
def first_match(rng: random.Random) -> Instance:
    """Only the first of several matching lines (``grep -m 1``)."""
    level, name = rng.choice(["WARN", "ERROR", "INFO"]), rng.choice(LOGS)
    log = _log(rng, level)
    out = rng.choice([f"first-{level.lower()}.txt", f"{level.lower()}-first.txt"])
    return Instance(
        instruction=f"Write the first line of {name} that contains the word `{level}` (only that one line) into "
                    f"{out}.",
        files={name: text(log)},
        check=checks.answer, args={"path": out, "expected": [next(line for line in log if level in line.split())],
                                   "case": True},
        solution=f"grep -m 1 -w {level} {name} > {out}")


@template(FAMILY, "medium", held_out="test")
def count_files(rng: random.Random) -> Instance:
    """Count the files of one extension in a directory tree (``find -name | wc -l``)."""
    ext, folder = rng.choice(["py", "md", "csv", "json"]), rng.choice(["project", "src", "docs", "data"])
    stems = words(rng, 9)
    wanted = rng.randint(2, 5)
    paths = [f"{folder}/{'sub/' if i % 2 else ''}{stem}.{ext}" for i, stem in enumerate(stems[:wanted])]
    paths += [f"{folder}/{stem}.{rng.choice(['txt', 'log'])}" for stem in stems[wanted:]]
    return Instance(
        instruction=f"How many files ending in `.{ext}` are there in the {folder} directory, its subdirectories "
                    "included? Write only the number into files.txt.",
        files={path: text([path]) for path in paths},
        check=checks.answer, args={"path": "files.txt", "expected": [str(wanted)], "numeric": True},
        solution=f"find {folder} -type f -name '*.{ext}' | wc -l > files.txt", secrets=(str(wanted),))


@template(FAMILY, "easy", guided=True, held_out="test")
def head_guided(rng: random.Random) -> Instance:
    """Guided: the first lines of a file with the shown ``head``."""
    name, n = f"{rng.choice(STEMS)}.txt", rng.randint(2, 4)
    rows = words(rng, rng.randint(n + 2, n + 6))
    command = f"head -n {n} {name} > top.txt"
    return Instance(instruction=guided(f"Write the first {n} lines of {name} into top.txt.", command),
                    files={name: text(rows)}, check=checks.lines, args={"path": "top.txt", "expected": rows[:n]},
                    solution=command)


@template(FAMILY, "medium", held_out="val")
def last_match(rng: random.Random) -> Instance:
    """Only the last of several matching lines (``grep | tail -n 1``)."""
    level, name = rng.choice(["WARN", "ERROR", "INFO"]), rng.choice(LOGS)
    log = _log(rng, level)
    out = rng.choice([f"last-{level.lower()}.txt", f"{level.lower()}-last.txt"])
    return Instance(
        instruction=f"Write the last line of {name} that contains the word `{level}` (only that one line) into "
                    f"{out}.",
        files={name: text(log)},
        check=checks.answer, args={"path": out, "expected": [[line for line in log if level in line.split()][-1]],
                                   "case": True},
        solution=f"grep -w {level} {name} | tail -n 1 > {out}")


@template(FAMILY, "easy", guided=True, held_out="val")
def invert_guided(rng: random.Random) -> Instance:
    """Guided: the lines without a level, with the shown ``grep -v``."""
    level, name = rng.choice(["INFO", "WARN"]), rng.choice(LOGS)
    log = _log(rng, level)
    out = rng.choice(["other.txt", "rest.txt"])
    command = f"grep -v {level} {name} > {out}"
    return Instance(instruction=guided(f"Write the lines of {name} without {level} into {out}.", command),
                    files={name: text(log)}, check=checks.lines,
                    args={"path": out, "expected": [line for line in log if level not in line.split()]},
                    solution=command)
