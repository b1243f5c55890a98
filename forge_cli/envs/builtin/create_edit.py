"""Family ``create-edit``: create a file with given content, append to one, change a value, delete lines.

Unseen templates: ``delete-lines``, ``prepend-line``, ``replace-word`` and ``uppercase-guided`` (test);
``insert-after`` and ``overwrite-guided`` (val).
"""

from __future__ import annotations

import random

from forge_cli.envs.builtin import checks
from forge_cli.envs.builtin.template import STEMS, Instance, guided, phrase, sh, template, text, words

FAMILY = "create-edit"


@template(FAMILY, "easy")
def write_file(rng: random.Random) -> Instance:
    """One command: a new file with one given line."""
    name, content = f"{rng.choice(STEMS)}.txt", phrase(rng)
    return Instance(
        instruction=f"Create a file named {name} in the current directory containing exactly the text "
                    f"`{content}` (one line).",
        check=checks.answer, args={"path": name, "expected": [content], "case": True},
        solution=f"printf '%s\\n' {sh(content)} > {name}")


@template(FAMILY, "easy")
def append_line(rng: random.Random) -> Instance:
    """One command: ``echo ... >> file``; the existing lines must stay."""
    name = f"{rng.choice(STEMS)}.txt"
    pool = words(rng, 8)
    items = [f"- {a} {b}" for a, b in zip(pool[:4], pool[4:], strict=True)]
    original, new = items[:3], items[3]
    return Instance(
        instruction=f"Append the line `{new}` to the end of {name}, keeping its existing lines as they are.",
        files={name: text(original)},
        check=checks.edit, args={"path": name, "original": original, "expected": [*original, new]},
        solution=f"printf '%s\\n' {sh(new)} >> {name}")


@template(FAMILY, "medium")
def replace_value(rng: random.Random) -> Instance:
    """One ``sed -i`` (or a rewrite): one value of an ini file changes, every other line stays."""
    keys = rng.sample(["mode", "level", "color", "region", "theme", "owner"], 4)
    values = words(rng, 5)
    original = ["[app]", *(f"{key} = {value}" for key, value in zip(keys, values, strict=False)),
                f"port = {rng.randint(1000, 9999)}"]
    index = rng.randrange(4)
    key, old, new = keys[index], values[index], values[4]
    expected = [f"{key} = {new}" if line == f"{key} = {old}" else line for line in original]
    return Instance(
        instruction=f"In settings.ini, change the value of `{key}` from `{old}` to `{new}` (the line must read "
                    f"`{key} = {new}`); leave every other line unchanged.",
        files={"settings.ini": text(original)},
        check=checks.edit, args={"path": "settings.ini", "original": original, "expected": expected},
        solution=f"sed -i 's/^{key} = {old}$/{key} = {new}/' settings.ini")


@template(FAMILY, "medium", held_out="test")
def delete_lines(rng: random.Random) -> Instance:
    """A filter in place (``sed -i '/DONE/d'``): drop the marked lines, keep the rest in order."""
    marker = rng.choice(["DONE", "SKIP", "OLD"])
    name = rng.choice(["tasks.txt", "todo.txt", "items.txt", "chores.txt", "backlog.txt"])
    tasks = [f"{rng.choice(['call', 'buy', 'fix', 'send', 'read'])} {word}" for word in words(rng, 7)]
    done = set(rng.sample(range(7), rng.randint(2, 3)))
    original = [f"{marker if i in done else 'TODO'} {item}" for i, item in enumerate(tasks)]
    return Instance(
        instruction=f"Remove every line that contains the word `{marker}` from {name}; keep the other lines in "
                    "their order.",
        files={name: text(original)},
        check=checks.edit, args={"path": name, "original": original,
                                 "expected": [line for line in original if marker not in line.split()]},
        solution=f"sed -i '/{marker}/d' {name}")


@template(FAMILY, "easy", held_out="test")
def prepend_line(rng: random.Random) -> Instance:
    """A new first line (``sed -i '1i ...'`` or a rewrite); the existing lines stay below it."""
    name, title = f"{rng.choice(STEMS)}.md", f"# {phrase(rng)}"
    original = [f"- {word}" for word in words(rng, rng.randint(3, 5))]
    return Instance(
        instruction=f"Add the line `{title}` at the very top of {name}, above its existing lines (which stay as "
                    "they are).",
        files={name: text(original)},
        check=checks.edit, args={"path": name, "original": original, "expected": [title, *original]},
        solution=f"sed -i '1i {title}' {name}")


@template(FAMILY, "medium", held_out="test")
def replace_word(rng: random.Random) -> Instance:
    """Every occurrence of one word replaced by another (``sed -i 's/a/b/g'``), on several lines."""
    name = f"{rng.choice(STEMS)}.txt"
    old, new, *others = words(rng, 8)
    original = [f"{others[i]} {old} {others[i + 1]}" if i % 2 == 0 else f"{old} and {others[i]} {old}"
                for i in range(rng.randint(3, 5))]
    original.insert(rng.randrange(len(original) + 1), f"{others[-1]} stays")
    return Instance(
        instruction=f"In {name}, replace every occurrence of the word `{old}` with `{new}`; change nothing else.",
        files={name: text(original)},
        check=checks.edit, args={"path": name, "original": original,
                                 "expected": [line.replace(old, new) for line in original]},
        solution=f"sed -i 's/{old}/{new}/g' {name}")


@template(FAMILY, "easy", guided=True, held_out="test")
def uppercase_guided(rng: random.Random) -> Instance:
    """Guided: a file's text in capitals into a new file, with the shown ``tr``."""
    stem = rng.choice(STEMS)
    original = [" ".join(words(rng, 3)) for _ in range(rng.randint(2, 4))]
    command = f"tr a-z A-Z < {stem}.txt > {stem}-upper.txt"
    return Instance(instruction=guided(f"Write {stem}.txt in capital letters into {stem}-upper.txt.", command),
                    files={f"{stem}.txt": text(original)}, check=checks.files,
                    args={"goals": {f"{stem}-upper.txt": text(line.upper() for line in original)},
                          "keep": {f"{stem}.txt": text(original)}},
                    solution=command)


@template(FAMILY, "medium", held_out="val")
def insert_after(rng: random.Random) -> Instance:
    """A line inserted after a named one (``sed -i '/^x$/a y'``); the other lines keep their order."""
    name = f"{rng.choice(STEMS)}.txt"
    original = [f"step {word}" for word in words(rng, rng.randint(4, 6))]
    anchor, new = rng.choice(original[:-1]), f"step {phrase(rng, 1)}"
    expected = [line for item in original for line in ([item, new] if item == anchor else [item])]
    return Instance(
        instruction=f"In {name}, insert the line `{new}` right after the line `{anchor}`; keep every other line "
                    "where it is.",
        files={name: text(original)},
        check=checks.edit, args={"path": name, "original": original, "expected": expected},
        solution=f"sed -i '/^{anchor}$/a {new}' {name}")


@template(FAMILY, "easy", guided=True, held_out="val")
def overwrite_guided(rng: random.Random) -> Instance:
    """Guided: a file's whole content replaced by one line, with the shown ``echo >``."""
    name, said = f"{rng.choice(STEMS)}.txt", phrase(rng)
    original = [" ".join(words(rng, 2)) for _ in range(3)]
    command = f"echo {sh(said)} > {name}"
    return Instance(instruction=guided(f"Replace everything in {name} with the single line `{said}`.", command),
                    files={name: text(original)}, check=checks.edit,
                    args={"path": name, "original": original, "expected": [said]}, solution=command)


@template(FAMILY, "easy", guided=True)
def touch_guided(rng: random.Random) -> Instance:
    """Guided: create a file with the given text; the command is shown."""
    name, said = f"{rng.choice(STEMS)}.txt", phrase(rng)
    command = f"echo {sh(said)} > {name}"
    return Instance(instruction=guided(f"Create the file {name} containing the line `{said}`.", command),
                    check=checks.files, args={"goals": {name: said + "\n"}}, solution=command)


@template(FAMILY, "easy", guided=True)
def append_guided(rng: random.Random) -> Instance:
    """Guided: one word added as the last line of a list; the command (``>>``) is shown."""
    name, pool = f"{rng.choice(STEMS)}.txt", words(rng, rng.randint(3, 6))
    original, new = pool[:-1], pool[-1]
    command = f"echo {new} >> {name}"
    return Instance(instruction=guided(f"Add the word {new} as a new last line of {name}.", command),
                    files={name: text(original)}, check=checks.edit,
                    args={"path": name, "original": original, "expected": [*original, new]}, solution=command)
