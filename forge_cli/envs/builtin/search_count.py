"""Family ``search-count``: count lines, count or extract matching lines, find the file that holds a text."""

from __future__ import annotations

import random

from forge_cli.envs.builtin import checks
from forge_cli.envs.builtin.template import Instance, guided, template, text, words

FAMILY = "search-count"


def _log(rng: random.Random, level: str) -> list[str]:
    """8-14 log lines ``LEVEL word word``, with ``level`` on 2-5 of them (never on all)."""
    n = rng.randint(8, 14)
    marked = set(rng.sample(range(n), rng.randint(2, 5)))
    others = [lv for lv in ("INFO", "WARN", "ERROR") if lv != level]
    return [f"{level if i in marked else rng.choice(others)} {' '.join(words(rng, 2))}" for i in range(n)]


@template(FAMILY, "easy")
def count_lines(rng: random.Random) -> Instance:
    """One command, shown in the instruction: ``wc -l < file > count.txt``."""
    name = rng.choice(["data.txt", "words.txt", "items.txt"])
    items = words(rng, rng.randint(5, 15))
    count = str(len(items))
    return Instance(
        instruction=f"Count the lines of {name} and write only that number into count.txt "
                    f"(for example: wc -l < {name} > count.txt).",
        files={name: text(items)},
        check=checks.answer, args={"path": "count.txt", "expected": [count], "numeric": True},
        solution=f"wc -l < {name} > count.txt", secrets=(count,))


@template(FAMILY, "medium")
def count_matches(rng: random.Random) -> Instance:
    """One ``grep -c``; the instruction does not name the command."""
    level = rng.choice(["WARN", "ERROR"])
    log = _log(rng, level)
    count, out = str(sum(level in line.split() for line in log)), f"{level.lower()}s.txt"
    return Instance(
        instruction=f"How many lines of app.log contain the word `{level}`? Write only the number into {out}.",
        files={"app.log": text(log)},
        check=checks.answer, args={"path": out, "expected": [count], "numeric": True},
        solution=f"grep -c -w {level} app.log > {out}", secrets=(count,))


@template(FAMILY, "medium")
def extract_lines(rng: random.Random) -> Instance:
    """One ``grep`` into a file; partial credit by the F1 of the lines written."""
    level = rng.choice(["WARN", "ERROR"])
    log = _log(rng, level)
    out = f"{level.lower()}.txt"
    return Instance(
        instruction=f"Write every line of app.log that contains the word `{level}` into {out}, in their original "
                    "order (nothing else in that file).",
        files={"app.log": text(log)},
        check=checks.lines, args={"path": out, "expected": [line for line in log if level in line.split()]},
        solution=f"grep -w {level} app.log > {out}")


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


@template(FAMILY, "easy")
def count_guided(rng: random.Random) -> Instance:
    """Guided: count the lines of a file with the shown ``wc -l``."""
    name, items = f"{rng.choice(['items', 'names', 'words', 'entries'])}.txt", words(rng, rng.randint(3, 9))
    command = f"wc -l < {name} > lines.txt"
    return Instance(instruction=guided(f"Write the number of lines of {name} into lines.txt.", command),
                    files={name: text(items)}, check=checks.answer,
                    args={"path": "lines.txt", "expected": [str(len(items))], "numeric": True}, solution=command,
                    secrets=())


@template(FAMILY, "easy")
def matches_guided(rng: random.Random) -> Instance:
    """Guided: count the lines of a log with one level, with the shown ``grep -c``."""
    level = rng.choice(["ERROR", "WARN"])
    log = _log(rng, level)
    out = f"{level.lower()}s.txt"
    command = f"grep -c {level} app.log > {out}"
    return Instance(instruction=guided(f"Write the number of {level} lines of app.log into {out}.", command),
                    files={"app.log": text(log)}, check=checks.answer,
                    args={"path": out, "expected": [str(sum(line.startswith(level) for line in log))],
                          "numeric": True},
                    solution=command)
