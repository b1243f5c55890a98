"""Family ``multi-step``: chores of several file operations, each step credited (``checks.files``)."""

from __future__ import annotations

import random

from forge_cli.envs.builtin import checks
from forge_cli.envs.builtin.template import NAMES, STEMS, Instance, guided, phrase, template, text, words

FAMILY = "multi-step"


def _contents(rng: random.Random, paths: list[str]) -> dict[str, str]:
    """A short distinct text for each path."""
    return {path: text([phrase(rng)]) for path in paths}


@template(FAMILY, "easy")
def backup_copy(rng: random.Random) -> Instance:
    """Two commands, shown in the instruction: ``mkdir`` and ``cp``; the original must stay."""
    name, folder = f"{rng.choice(STEMS)}.txt", rng.choice(["backup", "archive", "copies"])
    files = _contents(rng, [name])
    return Instance(
        instruction=f"Create a directory named {folder} and copy {name} into it, keeping the original {name} where "
                    f"it is (for example: mkdir {folder} && cp {name} {folder}/).",
        files=files,
        check=checks.files, args={"goals": {f"{folder}/{name}": files[name]}, "keep": files},
        solution=f"mkdir -p {folder} && cp {name} {folder}/")


@template(FAMILY, "medium")
def cleanup_tmp(rng: random.Random) -> Instance:
    """Delete by pattern through subdirectories (``find -delete``); the other files must stay."""
    stems = words(rng, 7)
    optional = [f"{stems[0]}.tmp", f"{stems[1]}.tmp", f"cache/{stems[2]}.tmp"]
    tmp = [*optional[:rng.randint(2, 3)], f"cache/{stems[3]}.tmp"]
    kept = [f"{stems[4]}.txt", f"{stems[5]}.log", f"cache/{stems[6]}.txt"]
    files = _contents(rng, tmp + kept)
    return Instance(
        instruction="Delete every file whose name ends in `.tmp`, in the current directory and in all its "
                    "subdirectories; keep every other file.",
        files=files,
        check=checks.files, args={"goals": dict.fromkeys(tmp), "keep": {path: files[path] for path in kept}},
        solution="find . -type f -name '*.tmp' -delete")


@template(FAMILY, "medium")
def move_by_ext(rng: random.Random) -> Instance:
    """Make a directory and move the files of one extension into it; the other files stay."""
    stems = words(rng, 5)
    moved = [f"{stem}.txt" for stem in stems[:rng.randint(2, 3)]]
    stay = [f"{stems[3]}.csv", f"{stems[4]}.md"]
    files = _contents(rng, [f"inbox/{name}" for name in moved + stay])
    goals: dict[str, str | None] = {f"texts/{name}": files[f"inbox/{name}"] for name in moved}
    goals.update(dict.fromkeys(f"inbox/{name}" for name in moved))
    return Instance(
        instruction="Move every .txt file from the inbox directory into a new directory named texts, so that inbox "
                    "keeps only its other files.",
        files=files,
        check=checks.files, args={"goals": goals, "keep": {f"inbox/{name}": files[f"inbox/{name}"] for name in stay}},
        solution="mkdir -p texts && mv inbox/*.txt texts/")


@template(FAMILY, "hard")
def sort_and_count(rng: random.Random) -> Instance:
    """Two outputs from one input: the sorted lines, then their count; names.txt itself must stay."""
    names = rng.sample(NAMES, rng.randint(5, 9))
    if names == sorted(names):
        names.reverse()
    files = {"names.txt": text(names)}
    return Instance(
        instruction="Sort the lines of names.txt alphabetically into a new file sorted.txt, then write the number "
                    "of lines of sorted.txt (only the number) into count.txt.",
        files=files,
        check=checks.files, args={"goals": {"sorted.txt": text(sorted(names)), "count.txt": str(len(names))},
                                  "keep": files},
        solution="sort names.txt > sorted.txt && wc -l < sorted.txt > count.txt", secrets=(str(len(names)),))


@template(FAMILY, "hard", held_out=True)
def make_files(rng: random.Random) -> Instance:
    """A directory of three files, each holding its own name: a loop or three writes."""
    folder, stems = rng.choice(["out", "parts", "pieces"]), words(rng, 3)
    listed = f"{stems[0]}.txt, {stems[1]}.txt and {stems[2]}.txt"
    return Instance(
        instruction=f"Create a directory named {folder} containing three files {listed}; each must contain just "
                    f"its own name without `.txt` (so {folder}/{stems[0]}.txt contains `{stems[0]}`).",
        check=checks.files, args={"goals": {f"{folder}/{stem}.txt": stem for stem in stems}},
        solution=f"mkdir -p {folder} && for w in {' '.join(stems)}; do echo \"$w\" > \"{folder}/$w.txt\"; done")


@template(FAMILY, "easy")
def dir_and_file_guided(rng: random.Random) -> Instance:
    """Guided: two steps in one shown command line (a directory, then a file in it)."""
    folder, name, said = rng.choice(["out", "build", "done", "results"]), f"{rng.choice(STEMS)}.txt", words(rng, 1)[0]
    command = f"mkdir -p {folder} && echo {said} > {folder}/{name}"
    return Instance(instruction=guided(f"Create a directory {folder} with a file {name} in it containing `{said}`.",
                                       command),
                    check=checks.files, args={"goals": {f"{folder}/{name}": said + "\n"}}, solution=command)


@template(FAMILY, "easy")
def archive_guided(rng: random.Random) -> Instance:
    """Guided: the log files moved into a new folder with the shown ``mkdir`` and ``mv``; the others stay."""
    stems = words(rng, rng.randint(3, 5))
    logs, kept = [f"{stem}.log" for stem in stems[:-1]], [f"{stems[-1]}.txt"]
    files = _contents(rng, logs + kept)
    folder = rng.choice(["old", "archive", "logs"])
    command = f"mkdir {folder} && mv *.log {folder}/"
    return Instance(instruction=guided(f"Move the .log files into a new folder {folder}.", command), files=files,
                    check=checks.files,
                    args={"goals": {**{f"{folder}/{log}": files[log] for log in logs}, **dict.fromkeys(logs)},
                          "keep": {path: files[path] for path in kept}},
                    solution=command)
