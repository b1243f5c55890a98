"""Family ``recovery`` (its own suite: ``env.options.suite=recovery``): tasks whose first obvious command fails in a
way the agent can recover from, for training and measuring error recovery (``forge branch``, ``algo.branch_at``).

Each instance keeps that command as ``trap`` (``metadata["trap"]``; a test checks it fails in the fresh workspace and
that the reference solution scores 1.0): the file is elsewhere, a directory is missing, a command needs a flag, a
script is not executable.

Seen templates (train, and new instances in val and test): ``find-the-file``, ``write-into-new-dir``,
``run-the-script``, ``make-nested-dirs``. Unseen: ``copy-a-directory``, ``grep-a-directory``, ``move-into-new-dir``
(test); ``remove-a-directory``, ``extract-into-new-dir`` (val).
"""

from __future__ import annotations

import random

from forge_cli.envs.builtin import checks
from forge_cli.envs.builtin.template import STEMS, Instance, phrase, sh, template, text, words

FAMILY = "recovery"
SUITE = "recovery"
PLACES = ("archive", "docs/old", "data/2024", "backup", "notes/misc", "old/drafts")
SCRIPTS = ("run.sh", "report.sh", "hello.sh", "build.sh", "show.sh")


@template(FAMILY, "medium", suite=SUITE)
def find_the_file(rng: random.Random) -> Instance:
    """The file is not in the workdir but below it: ``wc -l FILE`` fails (No such file); ``find`` finds it."""
    stem, place, n = rng.choice(STEMS), rng.choice(PLACES), rng.randint(3, 9)
    path = f"{place}/{stem}.txt"
    return Instance(
        instruction=f"Count the lines of the file {stem}.txt in this project and write the number to count.txt.",
        files={path: text(phrase(rng) for _ in range(n))},
        check=checks.answer, args={"path": "count.txt", "expected": [str(n)], "numeric": True},
        solution=f"wc -l < \"$(find . -name {stem}.txt)\" > count.txt", trap=f"wc -l {stem}.txt")


@template(FAMILY, "easy", suite=SUITE)
def write_into_new_dir(rng: random.Random) -> Instance:
    """The file goes into a directory that does not exist yet: the redirection fails; ``mkdir -p`` first."""
    said, (top, sub), stem = phrase(rng), words(rng, 2), rng.choice(STEMS)
    path = f"{top}/{sub}/{stem}.txt"
    return Instance(
        instruction=f"Write the line `{said}` to {path}.",
        check=checks.files, args={"goals": {path: said}},
        solution=f"mkdir -p {top}/{sub} && echo {sh(said)} > {path}", trap=f"echo {sh(said)} > {path}")


@template(FAMILY, "easy", suite=SUITE)
def run_the_script(rng: random.Random) -> Instance:
    """The script has no execute bit: ``./SCRIPT`` fails (Permission denied, for root too); ``bash SCRIPT`` runs."""
    name, said = rng.choice(SCRIPTS), phrase(rng)
    return Instance(
        instruction=f"Run ./{name} and save what it prints to output.txt.",
        files={name: text(["#!/bin/bash", f"echo {said}"])},
        check=checks.answer, args={"path": "output.txt", "expected": [said]},
        solution=f"bash {name} > output.txt", trap=f"./{name} > output.txt")


@template(FAMILY, "easy", suite=SUITE)
def make_nested_dirs(rng: random.Random) -> Instance:
    """Three levels at once: ``mkdir a/b/c`` fails (No such file); ``mkdir -p``."""
    a, b, c = words(rng, 3)
    return Instance(
        instruction=f"Create the directory {a}/{b}/{c} and put an empty file named .keep in it.",
        check=checks.outputs, args={"cases": [[f"test -f {a}/{b}/{c}/.keep && echo ok", "ok"]]},
        solution=f"mkdir -p {a}/{b}/{c} && touch {a}/{b}/{c}/.keep", trap=f"mkdir {a}/{b}/{c}")


@template(FAMILY, "medium", suite=SUITE, held_out="test")
def copy_a_directory(rng: random.Random) -> Instance:
    """``cp DIR COPY`` omits a directory (it needs ``-r``)."""
    src, dst = rng.sample(["config", "assets", "templates", "drafts", "scripts", "samples"], 2)
    contents = {f"{src}/{w}.txt": phrase(rng) for w in words(rng, 2)}
    return Instance(
        instruction=f"Make a copy of the directory {src} named {dst}, with everything in it.",
        files=contents,
        check=checks.files, args={"goals": {p.replace(f"{src}/", f"{dst}/", 1): c for p, c in contents.items()},
                                  "keep": contents},
        solution=f"cp -r {src} {dst}", trap=f"cp {src} {dst}")


@template(FAMILY, "medium", suite=SUITE, held_out="test")
def grep_a_directory(rng: random.Random) -> Instance:
    """``grep -c WORD DIR`` fails on a directory (it needs ``-r``); the count is over every file in it."""
    word, other = words(rng, 2)
    files, total = {}, 0
    for name in rng.sample(["app", "db", "web", "auth", "cron"], 3):
        hits = rng.randint(1, 4)
        total += hits
        rows = [f"{rng.randint(10, 99)} {word} event" for _ in range(hits)]
        rows += [f"{rng.randint(10, 99)} {other} event" for _ in range(rng.randint(1, 4))]
        rng.shuffle(rows)
        files[f"logs/{name}.log"] = text(rows)
    return Instance(
        instruction=f"Count how many lines in the files of the logs directory contain the word {word}, and write "
                    f"the number to count.txt.",
        files=files,
        check=checks.answer, args={"path": "count.txt", "expected": [str(total)], "numeric": True},
        solution=f"grep -r {word} logs | wc -l > count.txt", trap=f"grep -c {word} logs")


@template(FAMILY, "easy", suite=SUITE, held_out="test")
def move_into_new_dir(rng: random.Random) -> Instance:
    """``mv FILE DIR/`` fails when DIR does not exist; ``mkdir -p`` first."""
    stem, said, (top, sub) = rng.choice(STEMS), phrase(rng), words(rng, 2)
    return Instance(
        instruction=f"Move {stem}.txt into the directory {top}/{sub}/ (keep its name).",
        files={f"{stem}.txt": text([said])},
        check=checks.files, args={"goals": {f"{top}/{sub}/{stem}.txt": said, f"{stem}.txt": None}},
        solution=f"mkdir -p {top}/{sub} && mv {stem}.txt {top}/{sub}/", trap=f"mv {stem}.txt {top}/{sub}/")


@template(FAMILY, "easy", suite=SUITE, held_out="val")
def remove_a_directory(rng: random.Random) -> Instance:
    """``rm DIR`` fails (Is a directory) and ``rmdir`` too (not empty); ``rm -r``."""
    name, keep = rng.choice(["build", "cache", "tmpdata", "dist", "scratch"]), rng.choice(STEMS)
    kept = text([phrase(rng)])
    return Instance(
        instruction=f"Delete the directory {name} and everything in it (leave {keep}.txt alone).",
        files={f"{name}/{w}.o": phrase(rng) for w in words(rng, 2)} | {f"{keep}.txt": kept},
        check=checks.outputs, args={"cases": [[f"test ! -e {name} && cat {keep}.txt", kept]]},
        solution=f"rm -r {name}", trap=f"rm {name}")


@template(FAMILY, "medium", suite=SUITE, held_out="val")
def extract_into_new_dir(rng: random.Random) -> Instance:
    """``tar -xzf ARCHIVE -C DIR`` fails when DIR does not exist; ``mkdir -p`` first."""
    archive, out, inner = rng.choice(["bundle", "backup", "release", "export"]), rng.choice(["out", "unpacked"]), \
        rng.choice(STEMS)
    said = phrase(rng)
    return Instance(
        instruction=f"Extract {archive}.tar.gz into the directory {out}.",
        setup=(f"mkdir .pack && echo {sh(said)} > .pack/{inner}.txt && tar -czf {archive}.tar.gz -C .pack "
               f"{inner}.txt && rm -r .pack",),
        check=checks.files, args={"goals": {f"{out}/{inner}.txt": said}},
        solution=f"mkdir -p {out} && tar -xzf {archive}.tar.gz -C {out}", trap=f"tar -xzf {archive}.tar.gz -C {out}")
