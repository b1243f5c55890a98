"""Family ``create-edit``: create a file with given content, append to one, change a value, delete lines."""

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


@template(FAMILY, "medium", held_out=True)
def delete_lines(rng: random.Random) -> Instance:
    """A filter in place (``sed -i '/DONE/d'``): drop the marked lines, keep the rest in order."""
    tasks = [f"{rng.choice(['call', 'buy', 'fix', 'send', 'read'])} {word}" for word in words(rng, 7)]
    done = set(rng.sample(range(7), rng.randint(2, 3)))
    original = [f"{'DONE' if i in done else 'TODO'} {item}" for i, item in enumerate(tasks)]
    return Instance(
        instruction="Remove every line that contains the word `DONE` from tasks.txt; keep the other lines in "
                    "their order.",
        files={"tasks.txt": text(original)},
        check=checks.edit, args={"path": "tasks.txt", "original": original,
                                 "expected": [line for line in original if "DONE" not in line]},
        solution="sed -i '/DONE/d' tasks.txt")


@template(FAMILY, "easy")
def touch_guided(rng: random.Random) -> Instance:
    """Guided: create a file with the given text; the command is shown."""
    name, said = f"{rng.choice(STEMS)}.txt", phrase(rng)
    command = f"echo {sh(said)} > {name}"
    return Instance(instruction=guided(f"Create the file {name} containing the line `{said}`.", command),
                    check=checks.files, args={"goals": {name: said + "\n"}}, solution=command)


@template(FAMILY, "easy")
def append_guided(rng: random.Random) -> Instance:
    """Guided: one word added as the last line of a list; the command (``>>``) is shown."""
    name, pool = f"{rng.choice(STEMS)}.txt", words(rng, rng.randint(3, 6))
    original, new = pool[:-1], pool[-1]
    command = f"echo {new} >> {name}"
    return Instance(instruction=guided(f"Add the word {new} as a new last line of {name}.", command),
                    files={name: text(original)}, check=checks.edit,
                    args={"path": name, "original": original, "expected": [*original, new]}, solution=command)
